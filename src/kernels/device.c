/* device.c: whether a plan's device can run here (hpt_device_ready, include/hptrain/plan.h).
 * The CPU always can. A CUDA device needs a build with the CUDA backend (HPT_HAVE_CUDA) and that
 * GPU; and even then the runner, the model's buffers and the trainer still compute on the CPU
 * backend (their tensors are host memory they touch directly), so a CUDA run is refused with
 * the reason rather than silently run on the CPU. The CUDA backend's ops themselves are built
 * and checked against the CPU's op by op (tests/test_backend.c, tests/test_cuda.c). */
#include "core/core.h"
#ifdef HPT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

hpt_status hpt_device_ready(int device) {
    if (device == 0) return HPT_OK;
    if (device < 0) return hpt_fail(HPT_ERR_INVALID, "bad device %d", device);
#ifdef HPT_HAVE_CUDA
    HPT_CHECK(hpt_cuda_select(device - 1));
    if (!hpt_backend_cuda()) return HPT_ERR_UNSUPPORTED; /* its reason is the last error */
    return hpt_fail(HPT_ERR_UNSUPPORTED, "--device cuda:%d: the GPU is present, but training on "
                    "the CUDA backend is not wired into the runner yet (docs/cuda.md)", device - 1);
#else
    return hpt_fail(HPT_ERR_UNSUPPORTED, "--device cuda: this build has no CUDA backend (build "
                    "where nvcc and the CUDA toolkit are installed: docs/cuda.md)");
#endif
}
