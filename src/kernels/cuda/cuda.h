/* cuda.h: the CUDA backend's entry points beyond the backend table (kernels/backend.h), for the
 * library and the tests; C, present only in builds with HPT_HAVE_CUDA (docs/cuda.md).
 *
 *   hpt_cuda_select(0);                          // before the first use: which GPU
 *   const hpt_backend *be = hpt_backend_cuda();  // NULL, with hpt_last_error(), without a GPU
 *
 * Memory (one carved device region, pinned host), streams and errors: backend.cu. Ops cannot
 * fail: the first CUDA error is kept and reported by hpt_cuda_status(). */
#ifndef HPT_KERNELS_CUDA_H
#define HPT_KERNELS_CUDA_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA backend, initialised on the first call on device hpt_cuda_select chose (0 if none);
 * NULL with hpt_last_error() set when no CUDA device is present or the driver is missing. */
const hpt_backend *hpt_backend_cuda(void);
/* Chooses the GPU before the first hpt_backend_cuda(); HPT_ERR_INVALID after it for another
 * device, HPT_ERR_UNSUPPORTED when the device does not exist (the message says why). */
hpt_status hpt_cuda_select(int device);
/* The number of CUDA devices present (0 without a driver or a GPU). */
int hpt_cuda_device_count(void);
/* Device `device`'s name ("NVIDIA H200") and compute capability, from cudaGetDeviceProperties;
 * HPT_ERR_UNSUPPORTED when there is no such device. */
hpt_status hpt_cuda_device_props(int device, char *name, size_t n, int *major, int *minor);
/* The first CUDA error an op or copy met since the last call (HPT_OK: none); clears it. */
hpt_status hpt_cuda_status(void);
/* Sizes the device region before the first device allocation (bytes; 0: the default). */
hpt_status hpt_cuda_reserve(size_t bytes);
/* The device region's size and what of it the allocator has handed out (bytes). */
void hpt_cuda_region(size_t *region_bytes, size_t *used_bytes);
/* The bytes of the region with GPU memory behind them: what the allocator has reached, in 64 MiB
 * chunks (vmm.cu), or the whole region where it was taken with one cudaMalloc; 0 before it opens. */
size_t hpt_cuda_region_backed(void);
/* cudaMemGetInfo of the current device: an independent reading of the GPU's memory. */
hpt_status hpt_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
/* The compute stream the ops run on (a cudaStream_t; benchmarks record their timing events on
 * it, as events on the legacy stream do not order against a non-blocking stream). */
void *hpt_cuda_compute_stream(void);
/* TF32 tensor-core math for the fp32 GEMMs (off by default: fp32 GEMMs are exact fp32). */
void hpt_cuda_set_tf32(int on);
/* C (M,N) = alpha * op(A) op(B) + beta * C, row-major as the table's gemm, with A and B bf16
 * (uint16 bit patterns) and fp32 accumulation and output (cublasGemmEx). */
void hpt_cuda_gemm_bf16(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                        const uint16_t *A, int64_t lda, const uint16_t *B, int64_t ldb,
                        float beta, float *C, int64_t ldc);
/* The CUDA backend's transfers (kernels/backend.h: copies on a load and a store stream beside
 * the compute stream, CUDA events), NULL when the backend cannot start. */
const struct hpt_transfer *hpt_transfer_cuda(void);
/* Releases the region, the streams and the libraries' handles (tests: the context's overhead
 * afterwards); the next hpt_backend_cuda() starts again. Nothing the backend gave may be live. */
void hpt_cuda_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif
