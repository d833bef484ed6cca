/* gemm.h: the plain reference GEMM behind k_gemm's fallback, and how to observe that fallback.
 * Internal to the kernels and their tests. */
#ifndef HPT_KERNELS_CPU_GEMM_H
#define HPT_KERNELS_CPU_GEMM_H

#include <stdint.h>

/* k_gemm's arithmetic with plain loops (row-major; op(X) = X or X^T by 'N'/'T'): the path a
 * failed dnnl_sgemm falls back to, so a kernel still cannot fail. */
void k_gemm_ref(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc);
/* How many k_gemm calls fell back to k_gemm_ref since the process started (any thread). */
uint64_t k_gemm_fallbacks(void);
/* Testing: the next n k_gemm calls see dnnl_sgemm's status as a failure (invalid arguments)
 * without calling it; the API gives no way to make a valid call fail otherwise. */
void k_gemm_fail_next(uint64_t n);
/* Which path k_gemm_bf16 takes: 1 oneDNN's bf16 matmul (fpmath mode bf16: this CPU's bf16
 * instructions round the operands), 0 the reference (operands rounded into the workspace, then
 * k_gemm). The native path runs where oneDNN reports avx512_core_bf16 or better and
 * HPT_GEMM_BF16=ref is not set (HPT_GEMM=sgemm turns it off too). */
int k_gemm_bf16_native(void);
/* Testing: force the reference path (1) or restore the choice above (0); returns the previous
 * forcing. */
int k_gemm_bf16_force_ref(int on);
/* k_matmul_forward's and k_matmul_backward's bias parts (the op timer calls them apart):
 * out (N,OC) = or += bias row by row; dbias (OC) += column sums of dout (N,OC). */
void k_matmul_bias_init(float *out, const float *bias, int64_t N, int64_t OC, int accumulate);
void k_matmul_bias_grad(float *dbias, const float *dout, int64_t N, int64_t OC);

#endif
