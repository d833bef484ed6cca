/* bench_attention.c: the CPU backend's flash attention kernels (forward, backward) on GPT-2
 * 124M's shapes (C 768, 12 heads of 64) at B=4 and T = 64, 256, 1024: seconds per call, the
 * CPU time per call of all threads (on a shared machine the wall time includes waits for a
 * core; the CPU time does not) and GFLOP/s of the causal products (forward 2 * 2 * hs per
 * (query, key <= query) pair and head: S = QK^T and O = PV; backward twice the forward's
 * products plus the two recomputed ones: 4 per pair, x 2 FLOPs x hs), the fastest of R runs.
 * The figure to compare with is bench/gemm_peak's GEMM rate at the same thread count.
 * Usage: bench_attention [--threads N] [--runs R] [--T 64,256] */
#include "hptrain.h"
#include "kernels/backend.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n floats on 2 MiB pages where the kernel gives them, as src/mem/mem.c places the runtime's
 * blocks of 4 MiB or more (the activations the kernels read in a step) */
static float *randv(size_t n, uint32_t seed) {
    size_t bytes = (n * sizeof(float) + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    float *p = NULL;
    if (posix_memalign((void **)&p, (size_t)2 << 20, bytes) != 0) p = NULL;
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, bytes, MADV_HUGEPAGE);
#endif
    if (!p) {
        fprintf(stderr, "bench_attention: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f);
    }
    return p;
}

int main(int argc, char **argv) {
    int threads = 1, runs = 5, Ts[8] = {64, 256}, nT = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) {
            nT = 0;
            for (char *s = strtok(argv[++i], ","); s && nT < 8; s = strtok(NULL, ","))
                Ts[nT++] = atoi(s);
        }
    }
    omp_set_num_threads(threads);
    const hpt_backend *be = hpt_backend_cpu();
    const int B = 4, C = 768, NH = 12, hs = C / NH;
    printf("flash attention (CPU backend), B=%d C=%d NH=%d, %d thread(s), fastest of %d\n\n", B,
           C, NH, threads, runs);
    printf("| T | pass | ms | cpu ms | GFLOP/s | GFLOP/s per cpu s |\n| ---: | --- | ---: | ---: | ---: | ---: |\n");
    for (int ti = 0; ti < nT; ti++) {
        const int T = Ts[ti];
        size_t nqkv = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
        float *qkv = randv(nqkv, 1), *dout = randv(no, 2), *out = randv(no, 3);
        float *lse = randv(nl, 4), *scr = randv(nl, 5), *dqkv = randv(nqkv, 6);
        double pairs = (double)B * NH * T * (T + 1) / 2.0;
        double fl[2] = {pairs * 2.0 * 2.0 * hs, pairs * 4.0 * 2.0 * hs};
        for (int pass = 0; pass < 2; pass++) {
            double best = 1e30, bestc = 1e30;
            /* a fresh process's first calls ran on one core for tens of ms (the new OpenMP
             * thread not yet on the other core: wall = CPU time, 5-9x the later calls'), so
             * 0.2 s of untimed calls first */
            for (double w0 = hpt_now(); ti == 0 && pass == 0 && hpt_now() - w0 < 0.2;)
                be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NH);
            for (int r = 0; r < runs; r++) {
                double t0 = hpt_now(), c0 = cpu_now();
                if (pass == 0) be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NH);
                else be->flash_attention_backward(dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NH);
                double t = hpt_now() - t0, c = cpu_now() - c0;
                best = t < best ? t : best;
                bestc = c < bestc ? c : bestc;
            }
            printf("| %d | %s | %.2f | %.2f | %.1f | %.1f |\n", T, pass ? "backward" : "forward",
                   best * 1e3, bestc * 1e3, fl[pass] / best / 1e9, fl[pass] / bestc / 1e9);
        }
        free(qkv), free(dout), free(out), free(lse), free(scr), free(dqkv);
    }
    return 0;
}
