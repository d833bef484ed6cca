/* gemm.c: matrix products through oneDNN's sgemm, the GEMM library chosen by measurement
 * (docs/design.md): it dispatches to this CPU's widest vector units at run time with no
 * environment variable, and runs on the same OpenMP runtime as the other kernels. */
#include "kernels/kernels.h"

#include <dnnl.h>
#include <string.h>

void k_gemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
            const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
            int64_t ldc) {
    if (M == 0 || N == 0) return;
    /* dnnl_sgemm validates its arguments; with the shapes the library builds it cannot fail. */
    (void)dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
