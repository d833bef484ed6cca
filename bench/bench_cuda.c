/* bench_cuda.c: the CUDA backend's figures on a GPU (bench/bench_cuda.sh runs it; docs/cuda.md).
 * WRITTEN, NEVER RUN: the session that wrote it had no GPU.
 *
 *   bench_cuda peak                        the GPU's GEMM peaks through cuBLAS: bf16 inputs with
 *                                          fp32 accumulation (the MFU denominator), TF32, fp32
 *   bench_cuda step L C NH B T STEPS       hptrain's GPT-2 step built from the CUDA backend's ops
 *                                          (tests/gpt2_ops.h: fp32, flash attention, AdamW), random
 *                                          initialisation and tokens, V = 50257 (Vp 50304)
 * Each prints one JSON line. GEMMs: each shape runs once untimed, then REPS times between CUDA
 * events recorded on the backend's compute stream (hpt_cuda_compute_stream: the work runs there,
 * and the legacy stream does not order against it); the best repetition counts (2 M N K /
 * seconds). The step: 2 untimed steps, then STEPS timed ones (the mean), tokens/s, the FLOPs per token of docs/estimate.md, the accounted device
 * peak, and cudaMemGetInfo's bytes in use (the context, the backend's fixed overhead and the
 * device region, which is the budget given by --memory or, unlimited, most of the GPU). */
#include "kernels/backend.h"
#include "kernels/cuda/cuda.h"
#include "gpt2_ops.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPS 20

static hpt_mem *g_mem;
static const hpt_backend *cu;

static void *dalloc(size_t bytes) {
    void *p = NULL;
    if (cu->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, bytes, &p) != HPT_OK) {
        fprintf(stderr, "bench_cuda: %s\n", hpt_last_error());
        exit(1);
    }
    return p;
}

/* kind 0: bf16 inputs, fp32 accumulation; 1: TF32; 2: fp32. TFLOP/s of the best repetition. */
static double gemm_tflops(int kind, int64_t n) {
    size_t in = kind == 0 ? 2 : 4;
    void *a = dalloc((size_t)(n * n) * in), *b = dalloc((size_t)(n * n) * in);
    float *c = dalloc((size_t)(n * n) * 4);
    cudaStream_t cs = (cudaStream_t)hpt_cuda_compute_stream();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    hpt_cuda_set_tf32(kind == 1);
    /* random operands, N(0, 1) (zeros run faster than real data), made by the backend's own
     * initialisation; bf16 ones narrowed from fp32 */
    if (kind == 0) {
        float *t = dalloc((size_t)(n * n) * 4);
        cu->init_normal(t, 0, (size_t)(n * n), (size_t)(n * n), 1.0f, 11);
        (void)cu->bf16_narrow(a, t, (size_t)(n * n));
        cu->init_normal(t, 0, (size_t)(n * n), (size_t)(n * n), 1.0f, 12);
        (void)cu->bf16_narrow(b, t, (size_t)(n * n));
        cu->sync();
        cu->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, t, (size_t)(n * n) * 4);
    } else {
        cu->init_normal(a, 0, (size_t)(n * n), (size_t)(n * n), 1.0f, 11);
        cu->init_normal(b, 0, (size_t)(n * n), (size_t)(n * n), 1.0f, 12);
    }
    double best = 0.0;
    for (int r = 0; r <= REPS; r++) {
        cu->sync();
        cudaEventRecord(e0, cs);
        if (kind == 0) hpt_cuda_gemm_bf16('N', 'T', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        else cu->gemm('N', 'T', n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        cudaEventRecord(e1, cs);
        cudaEventSynchronize(e1);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        double t = 2.0 * (double)n * (double)n * (double)n / ((double)ms * 1e-3) / 1e12;
        if (r > 0 && t > best) best = t; /* repetition 0 warms up */
    }
    hpt_cuda_set_tf32(0);
    cu->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, a, (size_t)(n * n) * in);
    cu->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, b, (size_t)(n * n) * in);
    cu->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, c, (size_t)(n * n) * 4);
    return best;
}

static int peak(void) {
    const int64_t sizes[] = {2048, 4096, 8192};
    double best[3] = {0, 0, 0};
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 3; i++) {
            double t = gemm_tflops(k, sizes[i]);
            fprintf(stderr, "%-5s GEMM %5lld^3: %.1f TFLOP/s\n", k == 0 ? "bf16" : k == 1 ? "tf32" : "fp32",
                    (long long)sizes[i], t);
            if (t > best[k]) best[k] = t;
        }
    printf("{\"bf16_peak_tflops\":%.2f,\"tf32_peak_tflops\":%.2f,\"fp32_peak_tflops\":%.2f}\n", best[0], best[1], best[2]);
    return 0;
}

static int step(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: bench_cuda step L C NH B T STEPS\n");
        return 2;
    }
    g2_cfg c = {atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), 50257, 50304, 1024, atoi(argv[5]), atoi(argv[6])};
    int steps = atoi(argv[7]);
    if (c.T > c.maxT) c.maxT = c.T;
    g2_model m;
    if (g2_open(&m, cu, g_mem, c) != HPT_OK) {
        fprintf(stderr, "bench_cuda: %s\n", hpt_last_error());
        return 1;
    }
    g2_init(&m, 1234);
    size_t n = (size_t)c.B * c.T;
    int32_t *tok = malloc(2 * n * sizeof(int32_t));
    uint64_t s = 42;
    for (size_t i = 0; i < 2 * n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (int32_t)((s >> 33) % (uint64_t)c.V);
    }
    cu->copy(m.x, tok, n * 4, HPT_COPY_H2D);
    cu->copy(m.y, tok + n, n * 4, HPT_COPY_H2D);
    cudaStream_t cs = (cudaStream_t)hpt_cuda_compute_stream();
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float loss = 0.0f, total_ms = 0.0f;
    for (int i = 0; i < steps + 2; i++) {
        cu->sync();
        cudaEventRecord(e0, cs);
        loss = g2_step(&m);
        cu->adamw(m.params, m.grads, m.m, m.v, m.off[G2_NT], 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, i + 1);
        cudaEventRecord(e1, cs);
        cudaEventSynchronize(e1);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i >= 2) total_ms += ms;
    }
    double step_ms = total_ms / steps, tps = (double)n / (step_ms * 1e-3);
    hpt_mem_stats st;
    hpt_mem_get_stats(g_mem, &st);
    size_t fr = 0, tot = 0, region = 0, used = 0;
    hpt_cuda_mem_info(&fr, &tot);
    hpt_cuda_region(&region, &used);
    printf("{\"impl\":\"hptrain-cuda-ops-fp32\",\"L\":%d,\"C\":%d,\"NH\":%d,\"B\":%d,\"T\":%d,\"params\":%zu,"
           "\"step_ms\":%.3f,\"tokens_per_s\":%.1f,\"flops_per_token\":%.6g,\"loss\":%.4f,"
           "\"accounted_peak_bytes\":%llu,\"region_bytes\":%zu,\"memgetinfo_used_bytes\":%zu,\"cuda_status\":\"%s\"}\n",
           c.L, c.C, c.NH, c.B, c.T, m.off[G2_NT], step_ms, tps, g2_flops_per_token(&c), (double)loss,
           (unsigned long long)st.peak_bytes[HPT_TIER_DEVICE], region, tot - fr,
           hpt_cuda_status() == HPT_OK ? "ok" : hpt_last_error());
    g2_close(&m);
    free(tok);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_cuda peak | step L C NH B T STEPS\n");
        return 2;
    }
    if (!(cu = hpt_backend_cuda())) {
        fprintf(stderr, "bench_cuda: %s\n", hpt_last_error());
        return 1;
    }
    if (hpt_mem_create(&g_mem) != HPT_OK) return 1;
    const char *budget = getenv("HPT_BENCH_MEMORY"); /* bytes: the device region; unset: most of the GPU */
    if (budget) hpt_mem_set_budget(g_mem, HPT_TIER_DEVICE, strtoull(budget, NULL, 10));
    int rc = !strcmp(argv[1], "peak") ? peak() : !strcmp(argv[1], "step") ? step(argc, argv) : 2;
    hpt_mem_destroy(g_mem);
    return rc;
}
