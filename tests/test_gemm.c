/* test_gemm.c: k_gemm's fallback. (a) The plain reference GEMM (k_gemm_ref) agrees with oneDNN
 * (k_gemm) for every transpose pair, odd shapes, leading dimensions wider than the rows, alpha
 * and beta (beta 0 overwrites NaN); (b) when dnnl_sgemm's status is a failure (forced by the
 * test hook: no valid call can make it fail), k_gemm still computes the product, bit-identical
 * to k_gemm_ref, and the fallback counter says so; (c) the matmul primitive's paths (alpha 1:
 * 'N','T' with beta 0 and 1, the 'N','N' class it takes, and k_matmul_forward with its bias
 * inside the product, overwriting and accumulating) agree with a double-precision product. */
#include "testlib.h"
#include "kernels/cpu/gemm.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
}

int main(void) {
    hpt_set_threads(2);
    const int64_t shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {33, 17, 65}, {64, 96, 128}, {129, 3, 250}};
    const char tr[2] = {'N', 'T'};
    double worst = 0.0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                /* leading dimensions 3 wider than the stored rows */
                int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 3, ldc = N + 3;
                size_t na = (size_t)((ta ? K : M) * lda), nb = (size_t)((tb ? N : K) * ldb);
                size_t nc = (size_t)(M * ldc);
                float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4),
                      *C1 = malloc(nc * 4), *C2 = malloc(nc * 4);
                fill(A, na, 1u + (unsigned)s);
                fill(B, nb, 7u + (unsigned)s);
                fill(C0, nc, 13u);
                float beta = (s & 1) ? 0.0f : 0.5f;
                if (beta == 0.0f) /* beta 0 must overwrite, never multiply, what C holds */
                    for (int64_t i = 0; i < M; i++) C0[i * ldc] = NAN;
                memcpy(C1, C0, nc * 4);
                memcpy(C2, C0, nc * 4);
                k_gemm(tr[ta], tr[tb], M, N, K, 1.25f, A, lda, B, ldb, beta, C1, ldc);
                k_gemm_ref(tr[ta], tr[tb], M, N, K, 1.25f, A, lda, B, ldb, beta, C2, ldc);
                double num = 0.0, den = 0.0;
                int pad_ok = 1;
                for (int64_t i = 0; i < M; i++) {
                    for (int64_t j = 0; j < N; j++) {
                        double d = (double)C1[i * ldc + j] - (double)C2[i * ldc + j];
                        num += d * d;
                        den += (double)C1[i * ldc + j] * (double)C1[i * ldc + j];
                    }
                    for (int64_t j = N; j < ldc; j++) /* the padding is left alone */
                        pad_ok &= C2[i * ldc + j] == C0[i * ldc + j];
                }
                double rel = sqrt(num / (den > 0 ? den : 1.0));
                if (rel > worst) worst = rel;
                CHECK_MSG(rel < 1e-5 && pad_ok, "%lldx%lldx%lld %c%c: reference vs oneDNN %.3g "
                          "(padding kept: %d)", (long long)M, (long long)N, (long long)K, tr[ta],
                          tr[tb], rel, pad_ok);
                free(A); free(B); free(C0); free(C1); free(C2);
            }
    printf("reference GEMM vs oneDNN: worst relative error %.3g over %zu cases\n", worst,
           4 * sizeof shapes / sizeof shapes[0]);

    /* (b) a failed status: the product still comes, from the reference, and is counted */
    const int64_t M = 31, N = 19, K = 45;
    float A[31 * 45], B[19 * 45], C1[31 * 19], C2[31 * 19];
    fill(A, sizeof A / 4, 3u);
    fill(B, sizeof B / 4, 5u);
    uint64_t before = k_gemm_fallbacks();
    k_gemm_fail_next(1);
    k_gemm('N', 'T', M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N);
    CHECK(k_gemm_fallbacks() == before + 1);
    k_gemm_ref('N', 'T', M, N, K, 1.0f, A, K, B, K, 0.0f, C2, N);
    CHECK_MSG(memcmp(C1, C2, sizeof C1) == 0, "the fallback's product differs from k_gemm_ref");
    k_gemm('N', 'T', M, N, K, 1.0f, A, K, B, K, 0.0f, C1, N); /* the hook is spent: oneDNN */
    CHECK(k_gemm_fallbacks() == before + 1);
    printf("forced dnnl_sgemm failure: fallbacks %llu -> %llu, product equal to the reference\n",
           (unsigned long long)before, (unsigned long long)k_gemm_fallbacks());

    /* (c) the matmul primitive's paths against sums in double */
    {
        const int64_t Mc = 64, Kc = 96, Nc = 512; /* 'N','N': Mc <= 256, Nc >= 4K, Kc <= 1024 */
        const int64_t ld = Nc + 5;
        float *Am = malloc((size_t)(Mc * Kc) * 4), *Bt = malloc((size_t)(Nc * Kc) * 4),
              *Bn = malloc((size_t)(Kc * Nc) * 4), *bias = malloc((size_t)Nc * 4),
              *C = malloc((size_t)(Mc * ld) * 4), *R = malloc((size_t)(Mc * ld) * 4);
        fill(Am, (size_t)(Mc * Kc), 21u);
        fill(Bt, (size_t)(Nc * Kc), 22u);
        fill(bias, (size_t)Nc, 23u);
        for (int64_t k = 0; k < Kc; k++) /* the same matrix stored (Kc, Nc) */
            for (int64_t j = 0; j < Nc; j++) Bn[k * Nc + j] = Bt[j * Kc + k];
        fill(R, (size_t)(Mc * ld), 24u);
        /* 0: 'N','T' beta 0; 1: 'N','T' beta 1; 2: 'N','N' beta 0; 3: forward + bias;
         * 4: forward + bias accumulating; ld = Nc + 5 for the gemms, Nc for the forwards */
        for (int c = 0; c < 5; c++) {
            int64_t ldc = c >= 3 ? Nc : ld;
            memcpy(C, R, (size_t)(Mc * ld) * 4);
            if (c == 0 || c == 1)
                k_gemm('N', 'T', Mc, Nc, Kc, 1.0f, Am, Kc, Bt, Kc, (float)c, C, ldc);
            else if (c == 2)
                k_gemm('N', 'N', Mc, Nc, Kc, 1.0f, Am, Kc, Bn, Nc, 0.0f, C, ldc);
            else
                k_matmul_forward(C, Am, Bt, bias, Mc, Kc, Nc, c == 4);
            double num = 0.0, den = 0.0;
            int pad_ok = 1;
            for (int64_t i = 0; i < Mc; i++) {
                for (int64_t j = 0; j < Nc; j++) {
                    double want = (c == 1 || c == 4) ? (double)R[i * ldc + j] : 0.0;
                    if (c >= 3) want += (double)bias[j];
                    for (int64_t k = 0; k < Kc; k++) want += (double)Am[i * Kc + k] * (double)Bt[j * Kc + k];
                    double d = (double)C[i * ldc + j] - want;
                    num += d * d;
                    den += want * want;
                }
                for (int64_t j = Nc; j < ldc; j++) pad_ok &= C[i * ldc + j] == R[i * ldc + j];
            }
            double rel = sqrt(num / (den > 0 ? den : 1.0));
            CHECK_MSG(rel < 1e-6 && pad_ok, "matmul path %d: relative error %.3g (padding kept: %d)", c,
                      rel, pad_ok);
            printf("matmul path %d: relative error %.3g against double sums\n", c, rel);
        }
        free(Am); free(Bt); free(Bn); free(bias); free(C); free(R);
    }
    return t_done("test_gemm");
}
