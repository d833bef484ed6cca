/* device.c: where a run computes. hpt_device_ready says whether a plan's device is here;
 * hpt_device_bind makes an hpt_mem's device tier that device's memory; hpt_backend_of gives the
 * backend of an hpt_mem's device tier, which everything allocating from it uses: one code path
 * for the CPU and the GPU. A CUDA device needs a build with HPT_HAVE_CUDA and that GPU. On a GPU
 * a device budget B stands for a card of B bytes: the measured overhead (context, libraries) and
 * HPT_DEVICE_LAZY_RESERVE come out of B (docs/cuda.md, "Training on the GPU"; unverified on a GPU).
 * Invariants: the device tier's peak plus the overhead stay within B whatever the larger GPU has
 * free; the first binding in a process sizes the device region, a later one keeps it and caps
 * its device tier within it. */
#include "core/core.h"
#include "kernels/backend.h"
#include "mem/mem.h"
#ifdef HPT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

#include <stdio.h>

hpt_status hpt_device_ready(int device) {
    if (device == 0) return HPT_OK;
    if (device < 0) return hpt_fail(HPT_ERR_INVALID, "bad device %d", device);
#ifdef HPT_HAVE_CUDA
    HPT_CHECK(hpt_cuda_select(device - 1));
    if (!hpt_backend_cuda()) return HPT_ERR_UNSUPPORTED; /* its reason is the last error */
    return HPT_OK;
#else
    return hpt_fail(HPT_ERR_UNSUPPORTED, "--device cuda: this build has no CUDA backend (build "
                    "where nvcc and the CUDA toolkit are installed: docs/cuda.md)");
#endif
}

hpt_status hpt_device_bind(hpt_mem *mem, int device, uint64_t *overhead_bytes) {
    if (overhead_bytes) *overhead_bytes = 0;
    if (device == 0) {
        mem_set_device(mem, 0);
        return HPT_OK;
    }
    HPT_CHECK(hpt_device_ready(device));
#ifdef HPT_HAVE_CUDA
    /* the transfers' streams first (hpt_transfer_of never falls back to the CPU's memcpy), so
     * that the overhead measured next is all of the fixed part */
    if (!hpt_transfer_cuda()) return HPT_ERR_UNSUPPORTED; /* the reason is the last error */
    size_t fr = 0, tot = 0;
    HPT_CHECK(hpt_cuda_mem_info(&fr, &tot));
    size_t region = 0, carved = 0; /* a region already open (an earlier binding) is not overhead:
                                    * the memory behind it (vmm.cu maps it as it is used) */
    hpt_cuda_region(&region, &carved);
    const size_t backed = hpt_cuda_region_backed();
    uint64_t over = tot > fr + backed ? (uint64_t)(tot - fr - backed) : 0;
    if (overhead_bytes) *overhead_bytes = over;
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    uint64_t budget = st.budget_bytes[HPT_TIER_DEVICE];
    if (budget) {
        if (budget <= over + HPT_DEVICE_LAZY_RESERVE + ((uint64_t)1 << 20))
            return hpt_fail(HPT_ERR_OOM, "device budget %.1f MiB: the GPU's fixed overhead (CUDA "
                            "context and libraries, measured) is already %.1f MiB",
                            (double)budget / 1048576.0, (double)over / 1048576.0);
        uint64_t tier = budget - over - HPT_DEVICE_LAZY_RESERVE;
        if (region) { /* an earlier binding's region: the tier within it */
            if (tier > region) tier = region;
        } else if (tier > fr) {
            return hpt_fail(HPT_ERR_OOM, "device budget %.1f MiB: GPU %d has %.1f MiB free beside "
                            "the overhead of %.1f MiB", (double)budget / 1048576.0, device - 1,
                            (double)fr / 1048576.0, (double)over / 1048576.0);
        } else {
            HPT_CHECK(hpt_cuda_reserve((size_t)tier));
        }
        hpt_mem_set_budget(mem, HPT_TIER_DEVICE, tier);
    }
    mem_set_device(mem, device);
    return HPT_OK;
#else
    (void)mem;
    return HPT_ERR_UNSUPPORTED; /* hpt_device_ready said why */
#endif
}

const hpt_backend *hpt_backend_of(const hpt_mem *mem) {
#ifdef HPT_HAVE_CUDA
    if (mem_device(mem) != 0) {
        const hpt_backend *be = hpt_backend_cuda(); /* started by hpt_device_bind: not NULL */
        if (be) return be;
    }
#else
    (void)mem;
#endif
    return hpt_backend_cpu();
}

hpt_status hpt_device_name(int device, char *buf, size_t n) {
    if (device < 1) return hpt_fail(HPT_ERR_INVALID, "device %d is not a GPU", device);
#ifdef HPT_HAVE_CUDA
    const int count = hpt_cuda_device_count();
    if (device - 1 >= count)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "no CUDA device: GPU %d absent (this machine has %d)",
                        device - 1, count);
    char name[256];
    int major = 0, minor = 0;
    HPT_CHECK(hpt_cuda_device_props(device - 1, name, sizeof name, &major, &minor));
    snprintf(buf, n, "cuda %s sm_%d%d", name, major, minor);
    return HPT_OK;
#else
    (void)buf, (void)n;
    return hpt_device_ready(device); /* the build has no CUDA backend: it says so */
#endif
}

hpt_status hpt_device_status(void) {
#ifdef HPT_HAVE_CUDA
    return hpt_cuda_status();
#else
    return HPT_OK;
#endif
}
