/* gemm_bf16.c: k_gemm (fp32) against k_gemm_bf16's two paths (--matmul bf16; docs/design.md,
 * "Matmul precision"), native (oneDNN's bf16 matmul on rounded bf16 panels) and reference
 * (rounded fp32 panels and sgemm), at a gpt2-124m step's linear shapes at B*T = 256: the
 * forward ('N','T'), dX ('N','N') and dW ('T','N') of fc and of the head. Each call runs once
 * untimed, then the three methods alternate, one call each, REPS times, so all see the same
 * (shared) machine; the median call's ms and GFLOP/s (2*M*N*K / s) are printed.
 *
 * Build: cc -O2 -fopenmp -Isrc -Iinclude bench/gemm_bf16.c build/libhptrain.a -ldnnl -lm \
 *        -lpthread -o build/gemm_bf16
 * Run:   OMP_NUM_THREADS=2 build/gemm_bf16 [REPS (default 5)] */
#define _POSIX_C_SOURCE 200809L
#include "kernels/cpu/gemm.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    const int64_t sh[][3] = {{256, 3072, 768}, {256, 768, 3072}, {3072, 768, 256},
                             {256, 50304, 768}, {256, 768, 50304}, {50304, 768, 256}};
    const char tr[][2] = {{'N', 'T'}, {'N', 'N'}, {'T', 'N'}, {'N', 'T'}, {'N', 'N'}, {'T', 'N'}};
    const char *what[] = {"fc forward", "fc dX", "fc dW", "head forward", "head dX", "head dW"};
    void *ws = malloc(HPT_MM_BF16_WS_BYTES);
    printf("native bf16 path on this CPU: %s\n", k_gemm_bf16_native() ? "yes" : "no");
    printf("%-13s %c%c %6s %6s %6s %20s %20s %20s\n", "GEMM", 't', 't', "M", "N", "K",
           "fp32 ms (GFLOP/s)", "bf16 native", "bf16 reference");
    for (int s = 0; s < 6; s++) {
        const int64_t M = sh[s][0], N = sh[s][1], K = sh[s][2];
        const char ta = tr[s][0], tb = tr[s][1];
        const int64_t lda = ta == 'T' ? M : K, ldb = tb == 'T' ? K : N;
        float *A = malloc((size_t)(M * K) * 4), *B = malloc((size_t)(K * N) * 4),
              *C = calloc((size_t)(M * N), 4);
        for (int64_t i = 0; i < M * K; i++) A[i] = (float)(i % 7) * 0.1f - 0.3f;
        for (int64_t i = 0; i < K * N; i++) B[i] = (float)(i % 5) * 0.1f - 0.2f;
        double *t[3];
        for (int v = 0; v < 3; v++) t[v] = malloc((size_t)reps * sizeof(double));
        for (int r = -1; r < reps; r++)
            for (int v = 0; v < 3; v++) {
                if (v == 1 && !k_gemm_bf16_native()) continue;
                k_gemm_bf16_force_ref(v == 2);
                double t0 = now();
                if (v == 0) k_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N);
                else k_gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, N, ws);
                if (r >= 0) t[v][r] = now() - t0;
                k_gemm_bf16_force_ref(0);
            }
        printf("%-13s %c%c %6lld %6lld %6lld", what[s], ta, tb, (long long)M, (long long)N,
               (long long)K);
        for (int v = 0; v < 3; v++) {
            if (v == 1 && !k_gemm_bf16_native()) {
                printf(" %20s", "-");
                continue;
            }
            qsort(t[v], (size_t)reps, sizeof(double), cmp_d);
            double med = t[v][reps / 2];
            printf("   %8.1f (%7.1f)", med * 1e3, 2.0 * (double)(M * N * K) / med / 1e9);
        }
        printf("\n");
        for (int v = 0; v < 3; v++) free(t[v]);
        free(A), free(B), free(C);
    }
    free(ws);
    return 0;
}
