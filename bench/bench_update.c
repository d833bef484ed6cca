/* bench_update.c: the optimizer update kernels at memory speed. First the machine's memory
 * bandwidth (a STREAM-like copy b = a and triad a = b + s * c over arrays far larger than the
 * caches, counted as STREAM counts: bytes read + bytes written, no write-allocate; and rmw,
 * c = c * s + b, the pattern of an update, which writes only what it has read and so pays no
 * write-allocate: the figure the updates' shares are of), then every
 * update op of the CPU backend x state width x weight width on N parameters of random
 * gradients, in ns per parameter, the bytes it must move per parameter (each array read once
 * and the written ones written once) and the share of the triad bandwidth that makes, at 1 and
 * at 2 threads (or the threads given). The fastest of R runs of each (the machine is shared),
 * and the CPU time per parameter of all threads together (the least of R): on a loaded
 * machine the wall time includes waits for a core, the CPU time does not.
 * Usage: bench_update [--n MILLIONS] [--runs R] [--threads T1,T2,...] [--op NAME] [--bits B]
 * (--op, --bits: only the rows of that op or state width). */
#include "hptrain.h"
#include "kernels/backend.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The fastest of n runs: on a shared machine other work only ever adds time. */
static double best(double *t, int n) {
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    return t[0];
}

static void *big(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) {
        fprintf(stderr, "bench_update: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    memset(p, 0, bytes); /* first touch, so page faults stay out of the timings */
    return p;
}

/* GB/s of copy, triad and rmw over n floats per array at the current thread count. */
static void stream(size_t n, int runs, double *copy_gbs, double *triad_gbs, double *rmw_gbs) {
    float *a = big(n * 4), *b = big(n * 4), *c = big(n * 4);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = 1.0f, b[i] = 2.0f, c[i] = 0.5f;
    double tc[16], tt[16], tm[16];
    for (int r = 0; r < runs; r++) {
        double t0 = hpt_now();
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) b[i] = a[i];
        double t1 = hpt_now();
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
        double t2 = hpt_now();
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) c[i] = c[i] * 0.5f + b[i];
        double t3 = hpt_now();
        tc[r] = t1 - t0, tt[r] = t2 - t1, tm[r] = t3 - t2;
    }
    *copy_gbs = 8.0 * (double)n / best(tc, runs) / 1e9;
    *triad_gbs = 12.0 * (double)n / best(tt, runs) / 1e9;
    *rmw_gbs = 12.0 * (double)n / best(tm, runs) / 1e9;
    free(a), free(b), free(c);
}

enum { W_F32, W_SR, W_KAHAN };
static const char *const k_wname[] = {"fp32", "bf16-sr", "bf16-kahan"};

typedef struct {
    size_t n;
    float *p, *g, *m, *v, *vmini;
    uint16_t *h, *c;
    uint8_t *mc, *vc;
    float *ms, *vs;
    float map_s[256], map_u[256];
} arena;

/* CPU seconds of the whole process (every thread), for the cost of a kernel apart from the
 * time it waited for a core on a shared machine. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One op x state bits x weights; returns ns per parameter (the fastest run), *bytes per
 * parameter and *cpu_ns, the CPU time per parameter of the run with the least of it. */
static double time_op(const hpt_backend *be, arena *A, const char *op, int bits, int w, int runs,
                      double *bytes, double *cpu_ns) {
    size_t n = A->n;
    hpt_be_param p = hpt_be_param_f32(A->p);
    double pb = 8.0; /* parameter bytes moved: fp32 read + write */
    if (w != W_F32) {
        p = (hpt_be_param){NULL, A->h, w == W_KAHAN ? A->c : NULL, 0x1234, 0};
        pb = w == W_KAHAN ? 8.0 : 4.0;
    }
    hpt_be_state m = {.f32 = A->m}, v = {.f32 = A->v};
    double sb = 8.0; /* per moment: fp32 read + write */
    if (bits == 8) {
        m = (hpt_be_state){NULL, A->mc, A->ms, A->map_s, be->q8_lut_of(1)};
        v = (hpt_be_state){NULL, A->vc, A->vs, A->map_u, be->q8_lut_of(0)};
        sb = 2.0 + 8.0 / 256.0;
    }
    int moments = !strcmp(op, "adamw") ? 2 : 1;
    *bytes = pb + 4.0 + moments * sb + (!strcmp(op, "adam-mini") ? 4.0 : 0.0) /* g read twice */;
    double t[16], c[16];
    for (int r = 0; r < runs; r++) {
        double t0 = hpt_now(), c0 = cpu_now();
        if (!strcmp(op, "adamw") && bits == 32 && w == W_F32)
            be->adamw(A->p, A->g, A->m, A->v, n, 1e-6f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, r + 1);
        else if (!strcmp(op, "adamw"))
            be->adamw_q(p, A->g, m, v, n, 1e-6f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, r + 1);
        else if (!strcmp(op, "lion"))
            be->lion(p, A->g, m, n, 1e-6f, 0.9f, 0.99f, 0.1f, 1.0f);
        else if (!strcmp(op, "sgd"))
            be->sgd(p, A->g, m, n, 1e-6f, 0.9f, 0.0f, 1.0f);
        else
            be->adam_mini(p, A->g, m, A->vmini, n, 768, 1e-6f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f,
                          r + 1);
        t[r] = hpt_now() - t0;
        c[r] = cpu_now() - c0;
    }
    *cpu_ns = best(c, runs) / (double)n * 1e9;
    return best(t, runs) / (double)n * 1e9;
}

int main(int argc, char **argv) {
    double mil = 16.0;
    int runs = 5, thr[8] = {1, 2}, nthr = 2, only_bits = 0;
    const char *only_op = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) mil = atof(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--op") && i + 1 < argc) only_op = argv[++i];
        else if (!strcmp(argv[i], "--bits") && i + 1 < argc) only_bits = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nthr = 0;
            for (char *s = strtok(argv[++i], ","); s && nthr < 8; s = strtok(NULL, ","))
                thr[nthr++] = atoi(s);
        }
    }
    if (runs < 1 || runs > 16) runs = 5;
    size_t n = (size_t)(mil * 1e6) / 768 * 768; /* whole Adam-mini rows */
    const hpt_backend *be = hpt_backend_cpu();
    arena A = {.n = n};
    A.p = big(n * 4), A.g = big(n * 4), A.m = big(n * 4), A.v = big(n * 4);
    A.vmini = big(n / 768 * 4);
    A.h = big(n * 2), A.c = big(n * 2), A.mc = big(n), A.vc = big(n);
    A.ms = big((n / 256 + 1) * 4), A.vs = big((n / 256 + 1) * 4);
    be->q8_map(A.map_s, 1);
    be->q8_map(A.map_u, 0);
    uint32_t x = 1u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        A.g[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 1e-3f;
        A.p[i] = ((float)(x >> 12) / 1048576.0f - 0.5f) * 0.1f;
    }
    be->bf16_split(A.h, NULL, A.p, n);
    /* states from one step on these gradients, so the codes are spread as in training */
    be->adamw(A.p, A.g, A.m, A.v, n, 0.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f, 1);
    be->q8_quantize(A.mc, A.ms, A.m, n, A.map_s);
    for (size_t i = 0; i < n; i++) A.v[i] = sqrtf(A.v[i]);
    be->q8_quantize(A.vc, A.vs, A.v, n, A.map_u);
    printf("optimizer update kernels (CPU backend), %.1fM parameters, fastest of %d\n\n",
           (double)n / 1e6, runs);
    static const char *const ops[] = {"adamw", "lion", "sgd", "adam-mini"};
    for (int ti = 0; ti < nthr; ti++) {
        omp_set_num_threads(thr[ti]);
        double cp, tr, rmw;
        stream(n, runs, &cp, &tr, &rmw);
        printf("%d threads: memory bandwidth copy %.1f GB/s, triad %.1f GB/s, rmw %.1f GB/s\n\n",
               thr[ti], cp, tr, rmw);
        printf("| op | state | weights | ns/param | cpu ns/param | bytes/param | GB/s | share of rmw |\n");
        printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (int o = 0; o < 4; o++)
            for (int bits = 32; bits >= 8; bits -= 24)
                for (int w = W_F32; w <= W_KAHAN; w++) {
                    if (o && w != W_F32) continue; /* bf16 weights: AdamW (the engine's) */
                    if ((only_op && strcmp(only_op, ops[o])) || (only_bits && bits != only_bits))
                        continue;
                    double bytes, cpu, ns = time_op(be, &A, ops[o], bits, w, runs, &bytes, &cpu);
                    printf("| %s | %d-bit | %s | %.2f | %.2f | %.1f | %.1f | %.0f%% |\n", ops[o],
                           bits, k_wname[w], ns, cpu, bytes, bytes / ns, 100.0 * bytes / ns / rmw);
                }
        printf("\n");
    }
    return 0;
}
