/* test_gemm.c: k_gemm's fallback. (a) The plain reference GEMM (k_gemm_ref) agrees with oneDNN
 * (k_gemm) for every transpose pair, odd shapes, leading dimensions wider than the rows, alpha
 * and beta (beta 0 overwrites NaN); (b) when dnnl_sgemm's status is a failure (forced by the
 * test hook: no valid call can make it fail), k_gemm still computes the product, bit-identical
 * to k_gemm_ref, and the fallback counter says so; (c) the matmul primitive's paths (alpha 1:
 * 'N','T' with beta 0 and 1, the 'N','N' class it takes, and k_matmul_forward with its bias
 * inside the product, overwriting and accumulating) agree with a double-precision product;
 * (d) k_gemm_bf16 (--matmul bf16), on both paths (oneDNN's bf16 matmul where this CPU has it;
 * the reference, forced by the test hook), on shapes that cross its tiles in M, N and K, every
 * transpose pair, against a double-precision product of the operands rounded to bf16 (nearest
 * even, computed here with frexp/nearbyint), and with K = 1 bit for bit (a product of two bf16
 * values is exact in fp32); the native path never falls back. */
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

static float bf16r(float x) {
    int ex;
    double m = frexp((double)x, &ex);
    return (float)ldexp(nearbyint(m * 256.0), ex - 8);
}

/* (d): one path of k_gemm_bf16 on every shape and transpose pair; the worst norm-wise error */
static double check_bf16(int ref, void *ws) {
    const int64_t shapes[][3] = {{1, 1, 1}, {33, 17, 65}, {7, 9, 1}, {2100, 6, 1100},
                                 {3, 4200, 1030}};
    const char tr[2] = {'N', 'T'};
    double worst = 0.0;
    int prev = k_gemm_bf16_force_ref(ref);
    uint64_t fb0 = k_gemm_fallbacks();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 3, ldc = N + 3;
                size_t na = (size_t)((ta ? K : M) * lda), nb = (size_t)((tb ? N : K) * ldb);
                size_t nc = (size_t)(M * ldc);
                float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4),
                      *C0 = malloc(nc * 4);
                fill(A, na, 3u + (unsigned)s);
                fill(B, nb, 5u + (unsigned)s);
                fill(C0, nc, 17u);
                for (int beta1 = 0; beta1 < 2; beta1++) {
                    memcpy(C, C0, nc * 4);
                    k_gemm_bf16(tr[ta], tr[tb], M, N, K, 1.0f, A, lda, B, ldb, (float)beta1, C,
                                ldc, ws);
                    double num = 0.0, den = 0.0;
                    int exact = 1, pad_ok = 1;
                    for (int64_t i = 0; i < M; i++) {
                        for (int64_t j = 0; j < N; j++) {
                            double want = beta1 ? (double)C0[i * ldc + j] : 0.0;
                            for (int64_t k = 0; k < K; k++)
                                want += (double)bf16r(ta ? A[k * lda + i] : A[i * lda + k]) *
                                        (double)bf16r(tb ? B[j * ldb + k] : B[k * ldb + j]);
                            double d = (double)C[i * ldc + j] - want;
                            num += d * d;
                            den += want * want;
                            exact &= (float)want == C[i * ldc + j];
                        }
                        for (int64_t j = N; j < ldc; j++)
                            pad_ok &= C[i * ldc + j] == C0[i * ldc + j];
                    }
                    double rel = sqrt(num / (den > 0 ? den : 1.0));
                    worst = rel > worst ? rel : worst;
                    CHECK_MSG(rel < 1e-6 && pad_ok, "bf16 %s path, %lldx%lldx%lld %c%c beta %d: "
                              "relative error %.3g (padding kept %d)", ref ? "reference" : "native",
                              (long long)M, (long long)N, (long long)K, tr[ta], tr[tb], beta1, rel,
                              pad_ok);
                    /* K = 1, beta 0: one exact product per element */
                    if (K == 1 && !beta1)
                        CHECK_MSG(exact, "bf16 %s path: K = 1 not bit for bit",
                                  ref ? "reference" : "native");
                }
                free(A); free(B); free(C); free(C0);
            }
    if (!ref && k_gemm_bf16_native())
        CHECK_MSG(k_gemm_fallbacks() == fb0, "the native bf16 path fell back %llu times",
                  (unsigned long long)(k_gemm_fallbacks() - fb0));
    k_gemm_bf16_force_ref(prev);
    return worst;
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
    void *ws = malloc(HPT_MM_BF16_WS_BYTES);
    const int native = k_gemm_bf16_native();
    double e_native = native ? check_bf16(0, ws) : -1.0, e_ref = check_bf16(1, ws);
    printf("bf16 GEMM (M, N, K up to 2100, 4200, 1100, across the tiles): native path %s "
           "(relative error %.3g), reference path relative error %.3g, against double sums of "
           "the bf16-rounded operands\n", native ? "oneDNN bf16 matmul" : "not on this CPU",
           e_native, e_ref);
    free(ws);
    return t_done("test_gemm");
}
