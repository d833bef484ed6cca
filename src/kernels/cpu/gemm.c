/* gemm.c: matrix products through oneDNN's sgemm, the GEMM library chosen by measurement
 * (docs/design.md): it dispatches to this CPU's widest vector units at run time with no
 * environment variable, and runs on the same OpenMP runtime as the other kernels.
 * Kernels cannot fail: should dnnl_sgemm refuse a call (it validates its arguments; the shapes
 * the library builds are valid), k_gemm computes the product with the plain reference loops
 * instead and counts the event (k_gemm_fallbacks), so the result is right and the slowdown
 * observable. */
#include "kernels/cpu/gemm.h"
#include "kernels/kernels.h"

#include <dnnl.h>
#include <stdatomic.h>
#include <string.h>

static _Atomic uint64_t g_fallbacks; /* k_gemm calls served by k_gemm_ref */
static _Atomic uint64_t g_fail_next; /* testing: calls still to see a failed status */

uint64_t k_gemm_fallbacks(void) { return atomic_load(&g_fallbacks); }
void k_gemm_fail_next(uint64_t n) { atomic_store(&g_fail_next, n); }

void k_gemm_ref(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc) {
    int ta = transa == 'T' || transa == 't', tb = transb == 'T' || transb == 't';
#pragma omp parallel for schedule(static) if (M * N >= K_PAR_MIN)
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            /* beta 0 overwrites (C may hold NaN), as BLAS does */
            C[i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]);
        }
}

void k_gemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
            const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
            int64_t ldc) {
    if (M == 0 || N == 0) return;
    dnnl_status_t st = dnnl_invalid_arguments;
    uint64_t f = atomic_load_explicit(&g_fail_next, memory_order_relaxed);
    if (!f || !atomic_compare_exchange_strong(&g_fail_next, &f, f - 1))
        st = dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (st != dnnl_success) {
        atomic_fetch_add(&g_fallbacks, 1);
        k_gemm_ref(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}

void k_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                      int64_t N, int64_t C, int64_t OC, int accumulate) {
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
#pragma omp parallel for schedule(static) if (N * OC >= K_PAR_MIN)
        for (int64_t i = 0; i < N; i++) {
            float *o = out + i * OC;
            if (accumulate) {
#pragma omp simd
                for (int64_t j = 0; j < OC; j++) o[j] += bias[j];
            } else {
                memcpy(o, bias, (size_t)OC * sizeof(float));
            }
        }
        beta = 1.0f;
    }
    k_gemm('N', 'T', N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
}

void k_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                       int accumulate_dinp) {
    /* dinp (N,C) = dout (N,OC) @ w (OC,C) */
    k_gemm('N', 'N', N, C, OC, 1.0f, dout, OC, w, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    /* dw (OC,C) += dout^T (OC,N) @ inp (N,C) */
    k_gemm('T', 'N', OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) {
        /* column sums, parallel over columns so no two threads touch one output */
#pragma omp parallel for schedule(static) if (N * OC >= K_PAR_MIN)
        for (int64_t j0 = 0; j0 < OC; j0 += 64) {
            int64_t j1 = j0 + 64 < OC ? j0 + 64 : OC;
            for (int64_t i = 0; i < N; i++) {
                const float *d = dout + i * OC;
#pragma omp simd
                for (int64_t j = j0; j < j1; j++) dbias[j] += d[j];
            }
        }
    }
}
