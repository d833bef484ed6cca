/* gemm_peak.c: this machine's fp32 GEMM peak through oneDNN's dnnl_sgemm and, for the forward
 * shapes, its matmul primitive: the two paths hptrain's kernels call (src/kernels/cpu/gemm.c). bench/run.sh divides the model FLOPs of a training step by this
 * figure to get hptrain's MFU, so the peak is measured the way hptrain would use it: the same
 * library, the same thread count, row-major, on the shapes of a GPT-2 124M step (B*T = 1024
 * forward, lm head at B*T = 256, backward dW and dX layouts) plus one large square GEMM that
 * shows the library's ceiling.
 *
 * Each shape runs once untimed (oneDNN's JIT and page faults), then repeats until a time
 * budget is spent; the best repetition gives its GFLOP/s (2*M*N*K / seconds). The output is
 * one JSON object on standard output: "peak_gflops" (the best over all shapes), the best over
 * the model's own shapes, and every shape's best and median. A human table goes to stderr.
 *
 * Build: cc -O2 -fopenmp bench/gemm_peak.c -ldnnl -o build/gemm_peak   (bench/run.sh does it)
 * Run:   build/gemm_peak [--threads N] [--budget SECONDS_PER_SHAPE] [--quick]
 */
#define _POSIX_C_SOURCE 200809L
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "bench_util.h"

typedef struct {
    const char *name;  /* what the GEMM is in a GPT-2 step */
    char ta, tb;       /* dnnl_sgemm's transa, transb ('N' or 'T') */
    int64_t M, N, K;   /* C (M, N) = op(A) (M, K) @ op(B) (K, N) */
    float beta;        /* 0: overwrite (forward), 1: accumulate (weight gradients) */
    int model_shape;   /* 1: a shape the model runs; 0: the ceiling probe */
} shape;

/* C = 768, 4C = 3072, 3C = 2304, Vp = 50304; BT = B*T. Linear weights are (out, in), so the
 * forward is inp (BT, in) @ W^T: transb = 'T'. dX = dout (BT, out) @ W (out, in): 'N','N'.
 * dW (out, in) += dout^T (out, BT) @ inp (BT, in): transa = 'T'. */
static const shape SHAPES[] = {
    {"qkv fwd      BT=1024", 'N', 'T', 1024, 2304, 768, 0.0f, 1},
    {"fc fwd       BT=1024", 'N', 'T', 1024, 3072, 768, 0.0f, 1},
    {"fcproj fwd   BT=1024", 'N', 'T', 1024, 768, 3072, 0.0f, 1},
    {"fc dX        BT=1024", 'N', 'N', 1024, 768, 3072, 0.0f, 1},
    {"fc dW        BT=1024", 'T', 'N', 3072, 768, 1024, 1.0f, 1},
    {"lm head fwd  BT=256 ", 'N', 'T', 256, 50304, 768, 0.0f, 1},
    {"lm head dX   BT=256 ", 'N', 'N', 256, 768, 50304, 0.0f, 1},
    {"lm head dW   BT=256 ", 'T', 'N', 50304, 768, 256, 1.0f, 1},
    {"square 4096         ", 'N', 'N', 4096, 4096, 4096, 0.0f, 0},
};
#define N_SHAPES (sizeof(SHAPES) / sizeof(SHAPES[0]))


/* hptrain's forward products ('N','T', beta 0) run through oneDNN's matmul primitive
 * (src/kernels/cpu/gemm.c), so those shapes are timed through it as well and the peak is the
 * best of either: a primitive on the row-major operands, B^T as strides. NULL if refused. */
static dnnl_engine_t g_eng;
static dnnl_stream_t g_strm;

static dnnl_primitive_t matmul_nt(const shape *sh, dnnl_memory_t mem[3], float *A, float *B, float *C) {
    dnnl_memory_desc_t d[3];
    dnnl_dims_t ad = {sh->M, sh->K}, bd = {sh->K, sh->N}, cd = {sh->M, sh->N};
    dnnl_dims_t as = {sh->K, 1}, bs = {1, sh->K}, cs = {sh->N, 1};
    if (dnnl_memory_desc_init_by_strides(&d[0], 2, ad, dnnl_f32, as) ||
        dnnl_memory_desc_init_by_strides(&d[1], 2, bd, dnnl_f32, bs) ||
        dnnl_memory_desc_init_by_strides(&d[2], 2, cd, dnnl_f32, cs))
        return NULL;
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    if (dnnl_matmul_desc_init(&md, &d[0], &d[1], NULL, &d[2]) ||
        dnnl_primitive_desc_create(&pd, &md, NULL, g_eng, NULL))
        return NULL;
    dnnl_status_t st = dnnl_primitive_create(&p, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st || dnnl_memory_create(&mem[0], &d[0], g_eng, A) || dnnl_memory_create(&mem[1], &d[1], g_eng, B) ||
        dnnl_memory_create(&mem[2], &d[2], g_eng, C))
        return NULL;
    return p;
}

static void matmul_run(dnnl_primitive_t p, dnnl_memory_t mem[3]) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
    dnnl_primitive_execute(p, g_strm, 3, args);
    dnnl_stream_wait(g_strm);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int threads = 2;
    double budget_s = 1.2; /* per shape, after the untimed call */
    int quick = 0;         /* skip the 4096 square (for smoke tests) */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--budget") && i + 1 < argc) {
            budget_s = atof(argv[++i]);
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: %s [--threads N] [--budget SECONDS] [--quick]\n", argv[0]);
            return 2;
        }
    }
    if (threads < 1 || budget_s <= 0.0) {
        fprintf(stderr, "gemm_peak: --threads must be >= 1 and --budget > 0\n");
        return 2;
    }
    omp_set_num_threads(threads);
    if (dnnl_engine_create(&g_eng, dnnl_cpu, 0) || dnnl_stream_create(&g_strm, g_eng, dnnl_stream_default_flags)) {
        fprintf(stderr, "gemm_peak: no oneDNN CPU engine\n");
        return 1;
    }

    const dnnl_version_t *ver = dnnl_version();
    double best_all = 0.0, best_model = 0.0;
    char json_shapes[4096];
    size_t js = 0;
    json_shapes[0] = '\0';
    uint64_t rng = 0x9E3779B97F4A7C15ull;

    fprintf(stderr, "oneDNN %d.%d.%d sgemm, %d threads\n", ver->major, ver->minor, ver->patch,
            threads);
    fprintf(stderr, "%-22s %2s %6s %6s %6s %6s %9s %9s\n", "shape", "op", "M", "N", "K", "reps",
            "best GF/s", "med GF/s");
    for (size_t s = 0; s < N_SHAPES; s++) {
        const shape *sh = &SHAPES[s];
        if (quick && !sh->model_shape) continue;
        /* Row-major storage: op(A) is (M, K), so A is (M, K) for 'N' and (K, M) for 'T'. */
        int64_t lda = sh->ta == 'N' ? sh->K : sh->M;
        int64_t ldb = sh->tb == 'N' ? sh->N : sh->K;
        int64_t ldc = sh->N;
        float *A = alloc_fill((size_t)(sh->M * sh->K), &rng);
        float *B = alloc_fill((size_t)(sh->K * sh->N), &rng);
        float *C = alloc_fill((size_t)(sh->M * sh->N), &rng);
        if (!A || !B || !C) {
            fprintf(stderr, "gemm_peak: out of memory for %s\n", sh->name);
            return 1;
        }
        double flop = 2.0 * (double)sh->M * (double)sh->N * (double)sh->K;
        /* beta = 1 accumulates into C forever; scale alpha so values stay finite. */
        float alpha = sh->beta != 0.0f ? 1e-6f : 1.0f;
        if (dnnl_sgemm(sh->ta, sh->tb, sh->M, sh->N, sh->K, alpha, A, lda, B, ldb, sh->beta,
                       C, ldc) != dnnl_success) {
            fprintf(stderr, "gemm_peak: dnnl_sgemm failed on %s\n", sh->name);
            return 1;
        }
        double times[1000];
        int reps = 0;
        double t_start = now_s();
        while (reps < 1000 && (reps < 2 || now_s() - t_start < budget_s)) {
            double t0 = now_s();
            dnnl_sgemm(sh->ta, sh->tb, sh->M, sh->N, sh->K, alpha, A, lda, B, ldb, sh->beta, C,
                       ldc);
            times[reps++] = now_s() - t0;
        }
        qsort(times, (size_t)reps, sizeof(double), cmp_double);
        double best = flop / times[0] / 1e9;
        double med = flop / times[reps / 2] / 1e9;
        /* the forward shapes again through the matmul primitive, as hptrain runs them */
        double mm_best = 0.0, mm_med = 0.0;
        int mm_reps = 0;
        dnnl_memory_t mem[3] = {NULL, NULL, NULL};
        dnnl_primitive_t p = sh->model_shape && sh->ta == 'N' && sh->tb == 'T' && sh->beta == 0.0f
                                 ? matmul_nt(sh, mem, A, B, C) : NULL;
        if (p) {
            matmul_run(p, mem);
            int r = 0;
            t_start = now_s();
            while (r < 1000 && (r < 2 || now_s() - t_start < budget_s)) {
                double t0 = now_s();
                matmul_run(p, mem);
                times[r++] = now_s() - t0;
            }
            qsort(times, (size_t)r, sizeof(double), cmp_double);
            mm_best = flop / times[0] / 1e9;
            mm_med = flop / times[r / 2] / 1e9;
            dnnl_primitive_destroy(p);
            mm_reps = r;
        }
        for (int k = 0; k < 3; k++) dnnl_memory_destroy(mem[k]);
        double top = best > mm_best ? best : mm_best; /* the faster path hptrain could take */
        if (top > best_all) best_all = top;
        if (sh->model_shape && top > best_model) best_model = top;
        fprintf(stderr, "%-22s %c%c %6lld %6lld %6lld %6d %9.1f %9.1f\n", sh->name, sh->ta,
                sh->tb, (long long)sh->M, (long long)sh->N, (long long)sh->K, reps, best, med);
        if (mm_reps)
            fprintf(stderr, "%-22s %2s %6s %6s %6s %6d %9.1f %9.1f  (same, matmul primitive)\n", "",
                    "", "", "", "", mm_reps, mm_best, mm_med);
        /* a shape's name without its alignment padding */
        char name[64];
        snprintf(name, sizeof(name), "%s", sh->name);
        for (size_t k = strlen(name); k > 0 && name[k - 1] == ' '; k--) name[k - 1] = '\0';
        js += (size_t)snprintf(json_shapes + js, sizeof(json_shapes) - js,
                               "%s{\"name\":\"%s\",\"op\":\"%c%c\",\"M\":%lld,\"N\":%lld,"
                               "\"K\":%lld,\"reps\":%d,\"best_gflops\":%.1f,"
                               "\"median_gflops\":%.1f,\"matmul_best_gflops\":%.1f,"
                               "\"matmul_median_gflops\":%.1f}",
                               js ? "," : "", name, sh->ta, sh->tb, (long long)sh->M,
                               (long long)sh->N, (long long)sh->K, reps, best, med, mm_best, mm_med);
        free(A);
        free(B);
        free(C);
    }
    printf("{\"library\":\"oneDNN %d.%d.%d dnnl_sgemm and matmul\",\"threads\":%d,"
           "\"peak_gflops\":%.1f,\"model_shapes_peak_gflops\":%.1f,\"shapes\":[%s]}\n",
           ver->major, ver->minor, ver->patch, threads, best_all, best_model, json_shapes);
    return 0;
}
