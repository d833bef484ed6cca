/* bench_llama_ops.c: the Llama family's CPU ops (RMSNorm, RoPE, SwiGLU; kernels/cpu/llama_ops.c)
 * against plain scalar loops written here, in nanoseconds per element, at one layer of a
 * llama3.2-1b-like shape (B*T = N rows, C, FF, NH, NKV, hd). Each figure is the best of REPS
 * runs after a warm-up; the op runs with 1 and with 2 threads, the naive loop on one. The
 * naive loops compute the same expressions element by element (compiled -O2: sums in order,
 * no vector reductions), so the ratio is what vectorising and threading buy.
 * Usage: bench_llama_ops [N C FF NH NKV hd]   (default 1024 2048 8192 32 8 64) */
#include "hptrain.h"
#include "kernels/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 15

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static float *rnd(size_t n, float s) {
    float *x = malloc(n * sizeof(float));
    uint64_t g = 0x1234567u + n;
    for (size_t i = 0; i < n; i++) {
        g = g * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = s * (float)((double)(g >> 40) / 8388608.0 - 1.0);
    }
    return x;
}

/* ---- the naive loops ---- */
static void nv_rms_fwd(float *o, float *r, const float *x, const float *w, int64_t N, int C) {
    for (int64_t i = 0; i < N; i++) {
        float ss = 0.0f;
        for (int c = 0; c < C; c++) ss += x[i * C + c] * x[i * C + c];
        r[i] = 1.0f / sqrtf(ss / (float)C + 1e-5f);
        for (int c = 0; c < C; c++) o[i * C + c] = x[i * C + c] * r[i] * w[c];
    }
}
static void nv_rms_bwd(float *dx, float *dw, const float *d, const float *x, const float *w,
                       const float *r, int64_t N, int C) {
    for (int64_t i = 0; i < N; i++) {
        float dot = 0.0f;
        for (int c = 0; c < C; c++) dot += w[c] * d[i * C + c] * x[i * C + c];
        float k = dot / (float)C * r[i] * r[i];
        for (int c = 0; c < C; c++) {
            dx[i * C + c] += r[i] * (w[c] * d[i * C + c] - x[i * C + c] * k);
            dw[c] += d[i * C + c] * x[i * C + c] * r[i];
        }
    }
}
static void nv_rope(float *qkv, const float *cs, const float *sn, int64_t N, int NH, int NKV, int hd) {
    int W = (NH + 2 * NKV) * hd, half = hd / 2;
    for (int64_t r = 0; r < N; r++)
        for (int h = 0; h < NH + NKV; h++)
            for (int i = 0; i < half; i++) {
                float *x = qkv + r * W + h * hd;
                float a = x[i], b = x[i + half], c = cs[i], s = sn[i];
                x[i] = a * c - b * s;
                x[i + half] = b * c + a * s;
            }
}
static void nv_swiglu_fwd(float *o, const float *h, int64_t N, int FF) {
    for (int64_t i = 0; i < N; i++)
        for (int j = 0; j < FF; j++) {
            float g = h[i * 2 * FF + j], u = h[i * 2 * FF + FF + j];
            o[i * FF + j] = g / (1.0f + expf(-g)) * u;
        }
}
static void nv_swiglu_bwd(float *dh, const float *d, const float *h, int64_t N, int FF) {
    for (int64_t i = 0; i < N; i++)
        for (int j = 0; j < FF; j++) {
            float g = h[i * 2 * FF + j], u = h[i * 2 * FF + FF + j], s = 1.0f / (1.0f + expf(-g));
            dh[i * 2 * FF + FF + j] = d[i * FF + j] * g * s;
            dh[i * 2 * FF + j] = d[i * FF + j] * u * s * (1.0f + g * (1.0f - s));
        }
}

typedef struct {
    int64_t N;
    int C, FF, NH, NKV, hd;
    float *x, *w, *o, *r, *d, *dx, *dw, *qkv, *cs, *sn, *h, *so, *sd, *dh;
} ctx;

static void run(ctx *c, int op, int naive) {
    const hpt_backend *be = hpt_backend_cpu();
    switch (op) {
    case 0: naive ? nv_rms_fwd(c->o, c->r, c->x, c->w, c->N, c->C)
                  : be->rmsnorm_forward(c->o, c->r, c->x, c->w, c->N, c->C, 1e-5f); break;
    case 1: naive ? nv_rms_bwd(c->dx, c->dw, c->d, c->x, c->w, c->r, c->N, c->C)
                  : be->rmsnorm_backward(c->dx, c->dw, c->d, c->x, c->w, c->r, c->N, c->C); break;
    case 2: naive ? nv_rope(c->qkv, c->cs, c->sn, c->N, c->NH, c->NKV, c->hd)
                  : be->rope_forward(c->qkv, c->cs, c->sn, 1, (int)c->N, c->NH, c->NKV, c->hd, 0); break;
    case 3: naive ? nv_swiglu_fwd(c->so, c->h, c->N, c->FF) : be->swiglu_forward(c->so, c->h, c->N, c->FF); break;
    case 4: naive ? nv_swiglu_bwd(c->dh, c->sd, c->h, c->N, c->FF)
                  : be->swiglu_backward(c->dh, c->sd, c->h, c->N, c->FF); break;
    }
}

static double timed(ctx *c, int op, int naive) {
    double t[REPS];
    run(c, op, naive);
    for (int k = 0; k < REPS; k++) {
        double t0 = now();
        run(c, op, naive);
        t[k] = now() - t0;
    }
    qsort(t, REPS, sizeof t[0], cmpd);
    return t[0]; /* the best: the least disturbed by other load on a shared machine */
}

int main(int argc, char **argv) {
    ctx c = {1024, 2048, 8192, 32, 8, 64, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (argc == 7) {
        c.N = atoll(argv[1]), c.C = atoi(argv[2]), c.FF = atoi(argv[3]);
        c.NH = atoi(argv[4]), c.NKV = atoi(argv[5]), c.hd = atoi(argv[6]);
    }
    size_t NC = (size_t)c.N * c.C, NW = (size_t)c.N * (c.NH + 2 * c.NKV) * c.hd;
    size_t NF = (size_t)c.N * c.FF;
    c.x = rnd(NC, 2.0f), c.w = rnd(c.C, 1.0f), c.o = rnd(NC, 1.0f), c.r = rnd(c.N, 1.0f);
    c.d = rnd(NC, 1.0f), c.dx = rnd(NC, 1.0f), c.dw = rnd(c.C, 1.0f), c.qkv = rnd(NW, 1.0f);
    c.cs = rnd((size_t)c.N * c.hd / 2, 1.0f), c.sn = rnd((size_t)c.N * c.hd / 2, 1.0f);
    c.h = rnd(2 * NF, 4.0f), c.so = rnd(NF, 1.0f), c.sd = rnd(NF, 1.0f), c.dh = rnd(2 * NF, 1.0f);
    hpt_backend_cpu()->rmsnorm_forward(c.o, c.r, c.x, c.w, c.N, c.C, 1e-5f); /* a real rstd */
    static const char *names[5] = {"rmsnorm_forward", "rmsnorm_backward", "rope_forward",
                                   "swiglu_forward", "swiglu_backward"};
    /* elements: rows x C; rows x rotated heads x hd; rows x FF */
    double elems[5] = {(double)NC, (double)NC, (double)c.N * (c.NH + c.NKV) * c.hd, (double)NF, (double)NF};
    printf("N=%lld C=%d FF=%d NH=%d NKV=%d hd=%d; ns per element, best of %d\n", (long long)c.N,
           c.C, c.FF, c.NH, c.NKV, c.hd, REPS);
    printf("%-18s %10s %10s %10s %8s %8s\n", "op", "naive", "op 1 thr", "op 2 thr", "x(1thr)", "x(2thr)");
    for (int op = 0; op < 5; op++) {
        hpt_set_threads(1);
        double tn = timed(&c, op, 1), t1 = timed(&c, op, 0);
        hpt_set_threads(2);
        double t2 = timed(&c, op, 0);
        double e = elems[op] * 1e-9;
        printf("%-18s %10.3f %10.3f %10.3f %8.2f %8.2f\n", names[op], tn / e, t1 / e, t2 / e, tn / t1, tn / t2);
    }
    return 0;
}
