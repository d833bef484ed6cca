/* test_backend.c: every op of every backend (ggml's test-backend-ops). For each backend present
 * (the CPU always; the CUDA backend where HPT_HAVE_CUDA adds it to k_backends) and every op of
 * the table, the op runs on small random inputs of odd sizes (N = 7 .. 10 rows, C = 24, NH = 3,
 * T = 5, n = 1003 and 100003 so the parallel paths run) and its outputs are compared with a
 * plain double-precision reference written here, independent of the kernels; backward ops get
 * a central-difference check in double too (layernorm's and attention's backward are compared
 * element by element with the whole finite-difference gradient). A backend other than the CPU
 * is also compared with the CPU backend's outputs, op by op.
 * A new op without a test fails to compile: the table below names every function pointer of
 * hpt_backend, and a static assert holds its size to that count.
 * Tolerances (each stated where used): fp32 arithmetic against double, 1e-5 relative to
 * max(1, |reference|) per element (reductions here are at most a few hundred terms); libmvec
 * (exp, tanh, log: 4 ulp) the same; finite differences 1e-4; rounding ops exact or within
 * their rounding's half unit. One line per op prints its largest error. */
#include "testlib.h"

#include "core/core.h"
#include "kernels/backend.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The references compute in double from fp32 inputs on purpose: every promotion is wanted. */
#pragma GCC diagnostic ignored "-Wdouble-promotion"

#define PI 3.14159265358979323846
#define TOL 1e-5   /* fp32 op against the double reference, relative to max(1, |ref|) */
#define TOL_FD 1e-4 /* the op's gradient against central differences of the reference */

static hpt_mem *g_mem;
static const hpt_backend *g_be; /* the backend under test */

/* ---- device buffers of the backend under test (freed after each op's test) ---- */
typedef struct {
    void *p;
    size_t bytes;
} dbuf;
static dbuf g_d[64];
static int g_nd;

/* A device copy of h (bytes; h NULL: zeros). */
static void *dput(const void *h, size_t bytes) {
    void *d = NULL;
    CHECK_OK(g_be->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, bytes ? bytes : 1, &d));
    if (h && bytes) g_be->copy(d, h, bytes, HPT_COPY_H2D);
    g_d[g_nd++] = (dbuf){d, bytes ? bytes : 1};
    return d;
}
static void dget(void *h, const void *d, size_t bytes) {
    g_be->sync();
    g_be->copy(h, d, bytes, HPT_COPY_D2H);
}
static void dfree_all(void) {
    g_be->sync();
    for (int i = 0; i < g_nd; i++) g_be->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, g_d[i].p, g_d[i].bytes);
    g_nd = 0;
}

/* ---- outputs recorded for the comparison of two backends ---- */
typedef struct {
    float *x;
    size_t n;
} rec;
static rec g_rec[2][64];
static int g_nrec[2], g_side = -1; /* -1: not recording */

/* The outputs an op's test produced (host copies), in order. */
static void emit(const float *x, size_t n) {
    if (g_side < 0 || g_nrec[g_side] >= 64) return;
    rec *r = &g_rec[g_side][g_nrec[g_side]++];
    r->x = malloc(n * sizeof(float));
    memcpy(r->x, x, n * sizeof(float));
    r->n = n;
}
static void emit1(double v) {
    float f = (float)v;
    emit(&f, 1);
}
static void rec_clear(void) {
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < g_nrec[s]; i++) free(g_rec[s][i].x);
        g_nrec[s] = 0;
    }
}

/* ---- inputs and errors ---- */
static uint64_t g_seed;
static float frand(void) { /* [-1, 1) */
    g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_seed >> 40) / 8388608.0 - 1.0);
}
static void fill_rand(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] = s * frand();
}
static double rel(double got, double ref) { return fabs(got - ref) / fmax(1.0, fabs(ref)); }
/* The largest rel() over n values; checked against tol. */
static double cmp_arr(const char *what, const float *got, const double *ref, size_t n, double tol) {
    double e = 0.0;
    for (size_t i = 0; i < n; i++) e = fmax(e, isnan(got[i]) ? INFINITY : rel(got[i], ref[i]));
    CHECK_MSG(e <= tol, "%s: %s max error %.3g > %.3g", g_be->name, what, e, tol);
    return e;
}

/* ---- finite differences (double) ---- */
typedef double (*loss_fn)(const double *theta, const void *ctx);
/* d loss / d theta[i], central, h 1e-5 (truncation ~1e-10, rounding ~1e-11 here). */
static double fd(loss_fn f, double *theta, size_t i, const void *ctx) {
    double h = 1e-5, t = theta[i];
    theta[i] = t + h;
    double a = f(theta, ctx);
    theta[i] = t - h;
    double b = f(theta, ctx);
    theta[i] = t;
    return (a - b) / (2.0 * h);
}

/* ================================ memory ================================ */
static double t_memory(void) {
    hpt_mem_stats s0, s1;
    hpt_mem_get_stats(g_mem, &s0);
    size_t n = 1003;
    float *d = NULL, *e = NULL, h[1003], k[1003];
    CHECK_OK(g_be->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, n * sizeof(float), (void **)&d));
    CHECK_OK(g_be->alloc(g_mem, HPT_TIER_HOST, HPT_CAT_IO, n * sizeof(float), (void **)&e));
    hpt_mem_get_stats(g_mem, &s1);
    CHECK(s1.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] ==
          s0.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] + n * sizeof(float));
    dget(k, d, n * sizeof(float)); /* zero-filled */
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= k[i] == 0.0f;
    CHECK(zero);
    fill_rand(h, n, 1.0f);
    g_be->copy(e, h, n * sizeof(float), HPT_COPY_H2H);
    g_be->copy(d, e, n * sizeof(float), HPT_COPY_H2D);
    float *d2 = dput(NULL, n * sizeof(float));
    g_be->copy(d2, d, n * sizeof(float), HPT_COPY_D2D);
    g_be->memset(d2 + 5, 0, 7 * sizeof(float));
    g_be->sync();
    g_be->copy(k, d2, n * sizeof(float), HPT_COPY_D2H);
    g_be->sync();
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= k[i] == (i >= 5 && i < 12 ? 0.0f : h[i]);
    CHECK_MSG(same, "%s: copy H2H, H2D, D2D, D2H and memset", g_be->name);
    emit(k, n);
    g_be->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, d, n * sizeof(float));
    g_be->free(g_mem, HPT_TIER_HOST, HPT_CAT_IO, e, n * sizeof(float));
    dfree_all();
    hpt_mem_get_stats(g_mem, &s1);
    CHECK(s1.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] == s0.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS]);
    CHECK(s1.live_bytes[HPT_TIER_HOST][HPT_CAT_IO] == s0.live_bytes[HPT_TIER_HOST][HPT_CAT_IO]);
    return same ? 0.0 : 1.0;
}

/* ================================ GEMM and linear ================================ */
static double t_gemm(void) {
    enum { M = 5, N = 7, K = 9, PAD = 2 };
    const char tr[2] = {'N', 'T'};
    double e = 0.0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
            float A[(K + PAD) * (M + PAD)], B[(K + PAD) * (N + PAD)], C[M * (N + PAD)];
            fill_rand(A, sizeof A / sizeof *A, 1.0f);
            fill_rand(B, sizeof B / sizeof *B, 1.0f);
            fill_rand(C, sizeof C / sizeof *C, 1.0f);
            double ref[M * (N + PAD)];
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N + PAD; j++) {
                    double s = 0.0;
                    for (int k = 0; k < K; k++)
                        s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                             (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
                    /* columns past N are outside C: untouched */
                    ref[i * ldc + j] = j < N ? 0.7 * s + 0.3 * C[i * ldc + j] : C[i * ldc + j];
                }
            float *dA = dput(A, sizeof A), *dB = dput(B, sizeof B), *dC = dput(C, sizeof C);
            g_be->gemm(tr[ta], tr[tb], M, N, K, 0.7f, dA, lda, dB, ldb, 0.3f, dC, ldc);
            dget(C, dC, sizeof C);
            e = fmax(e, cmp_arr("gemm", C, ref, M * (N + PAD), TOL));
            emit(C, M * (N + PAD));
            dfree_all();
        }
    return e;
}

enum { MN = 7, MC = 24, MOC = 13 };
static void ref_matmul(double *out, const float *inp, const float *w, const float *bias, int N,
                       int C, int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += (double)inp[i * C + c] * w[o * C + c];
            out[i * OC + o] = s;
        }
}

static double t_matmul_forward(void) {
    float inp[MN * MC], w[MOC * MC], b[MOC], out[MN * MOC], out0[MN * MOC];
    fill_rand(inp, MN * MC, 1.0f);
    fill_rand(w, MOC * MC, 0.5f);
    fill_rand(b, MOC, 0.5f);
    fill_rand(out0, MN * MOC, 1.0f);
    double ref[MN * MOC], e = 0.0;
    for (int acc = 0; acc < 2; acc++) {
        const float *bias = acc ? NULL : b;
        ref_matmul(ref, inp, w, bias, MN, MC, MOC);
        if (acc)
            for (int i = 0; i < MN * MOC; i++) ref[i] += out0[i];
        float *dout = dput(out0, sizeof out0);
        g_be->matmul_forward(dout, dput(inp, sizeof inp), dput(w, sizeof w), bias ? dput(b, sizeof b) : NULL,
                             MN, MC, MOC, acc);
        dget(out, dout, sizeof out);
        e = fmax(e, cmp_arr("matmul_forward", out, ref, MN * MOC, TOL));
        emit(out, MN * MOC);
        dfree_all();
    }
    return e;
}

typedef struct {
    const float *R; /* (N, OC) the loss's weights: loss = sum R * out */
} mm_ctx;
/* theta = [inp (N*C) | w (OC*C) | b (OC)] */
static double mm_loss(const double *th, const void *vctx) {
    const mm_ctx *c = vctx;
    const double *inp = th, *w = th + MN * MC, *b = w + MOC * MC;
    double L = 0.0;
    for (int i = 0; i < MN; i++)
        for (int o = 0; o < MOC; o++) {
            double s = b[o];
            for (int k = 0; k < MC; k++) s += inp[i * MC + k] * w[o * MC + k];
            L += c->R[i * MOC + o] * s;
        }
    return L;
}

static double t_matmul_backward(void) {
    float inp[MN * MC], w[MOC * MC], dout[MN * MOC], dinp0[MN * MC], dw0[MOC * MC], db0[MOC];
    fill_rand(inp, MN * MC, 1.0f);
    fill_rand(w, MOC * MC, 0.5f);
    fill_rand(dout, MN * MOC, 1.0f);
    fill_rand(dinp0, MN * MC, 1.0f);
    fill_rand(dw0, MOC * MC, 1.0f);
    fill_rand(db0, MOC, 1.0f);
    double e = 0.0;
    for (int acc = 0; acc < 2; acc++) {
        float *ddinp = dput(dinp0, sizeof dinp0), *ddw = dput(dw0, sizeof dw0), *ddb = dput(db0, sizeof db0);
        g_be->matmul_backward(ddinp, ddw, ddb, dput(dout, sizeof dout), dput(inp, sizeof inp),
                              dput(w, sizeof w), MN, MC, MOC, acc);
        float gi[MN * MC], gw[MOC * MC], gb[MOC];
        dget(gi, ddinp, sizeof gi);
        dget(gw, ddw, sizeof gw);
        dget(gb, ddb, sizeof gb);
        double ri[MN * MC], rw[MOC * MC], rb[MOC];
        for (int i = 0; i < MN; i++)
            for (int c = 0; c < MC; c++) {
                double s = acc ? dinp0[i * MC + c] : 0.0;
                for (int o = 0; o < MOC; o++) s += (double)dout[i * MOC + o] * w[o * MC + c];
                ri[i * MC + c] = s;
            }
        for (int o = 0; o < MOC; o++) {
            double sb = db0[o];
            for (int i = 0; i < MN; i++) sb += dout[i * MOC + o];
            rb[o] = sb;
            for (int c = 0; c < MC; c++) {
                double s = dw0[o * MC + c];
                for (int i = 0; i < MN; i++) s += (double)dout[i * MOC + o] * inp[i * MC + c];
                rw[o * MC + c] = s;
            }
        }
        e = fmax(e, cmp_arr("matmul_backward dinp", gi, ri, MN * MC, TOL));
        e = fmax(e, cmp_arr("matmul_backward dw", gw, rw, MOC * MC, TOL));
        e = fmax(e, cmp_arr("matmul_backward dbias", gb, rb, MOC, TOL));
        emit(gi, MN * MC);
        emit(gw, MOC * MC);
        emit(gb, MOC);
        if (!acc) { /* finite differences: the gradient of sum(dout * forward) */
            static double th[MN * MC + MOC * MC + MOC];
            for (int i = 0; i < MN * MC; i++) th[i] = inp[i];
            for (int i = 0; i < MOC * MC; i++) th[MN * MC + i] = w[i];
            for (int i = 0; i < MOC; i++) th[MN * MC + MOC * MC + i] = 0.0;
            mm_ctx c = {dout};
            size_t idx[4] = {3, MN * MC + 17, MN * MC + MOC * MC - 1, MN * MC + MOC * MC + 5};
            double got[4] = {gi[3], gw[17] - dw0[17], gw[MOC * MC - 1] - dw0[MOC * MC - 1], gb[5] - db0[5]};
            for (int k = 0; k < 4; k++) {
                double err = rel(got[k], fd(mm_loss, th, idx[k], &c));
                CHECK_MSG(err <= TOL_FD, "matmul_backward finite difference %d: %.3g", k, err);
                e = fmax(e, err);
            }
        }
        dfree_all();
    }
    return e;
}

/* ================================ embedding ================================ */
enum { EB = 2, ET = 5, EC = 24, EV = 11 };
static void enc_inputs(int32_t *tok, float *wte, float *wpe) {
    for (int i = 0; i < EB * ET; i++) tok[i] = (int32_t)((frand() + 1.0f) * 0.5f * EV) % EV;
    tok[3] = tok[7]; /* a repeated token: dwte's rows have several writers */
    fill_rand(wte, EV * EC, 1.0f);
    fill_rand(wpe, ET * EC, 1.0f);
}

static double t_encoder_forward(void) {
    int32_t tok[EB * ET];
    float wte[EV * EC], wpe[ET * EC], out[EB * ET * EC];
    enc_inputs(tok, wte, wpe);
    double ref[EB * ET * EC];
    for (int b = 0; b < EB; b++)
        for (int t = 0; t < ET; t++)
            for (int c = 0; c < EC; c++)
                ref[(b * ET + t) * EC + c] = (double)wte[tok[b * ET + t] * EC + c] + wpe[t * EC + c];
    float *d = dput(NULL, sizeof out);
    g_be->encoder_forward(d, dput(tok, sizeof tok), dput(wte, sizeof wte), dput(wpe, sizeof wpe), EB, ET, EC);
    dget(out, d, sizeof out);
    double e = cmp_arr("encoder_forward", out, ref, EB * ET * EC, TOL);
    emit(out, EB * ET * EC);
    dfree_all();
    return e;
}

static double t_encoder_backward(void) {
    int32_t tok[EB * ET];
    float wte[EV * EC], wpe[ET * EC], dout[EB * ET * EC];
    enc_inputs(tok, wte, wpe); /* wte, wpe: the initial gradients (accumulated into) */
    fill_rand(dout, EB * ET * EC, 1.0f);
    double rwte[EV * EC], rwpe[ET * EC];
    for (int i = 0; i < EV * EC; i++) rwte[i] = wte[i];
    for (int i = 0; i < ET * EC; i++) rwpe[i] = wpe[i];
    for (int b = 0; b < EB; b++)
        for (int t = 0; t < ET; t++)
            for (int c = 0; c < EC; c++) {
                rwte[tok[b * ET + t] * EC + c] += dout[(b * ET + t) * EC + c];
                rwpe[t * EC + c] += dout[(b * ET + t) * EC + c];
            }
    float *dwte = dput(wte, sizeof wte), *dwpe = dput(wpe, sizeof wpe);
    g_be->encoder_backward(dwte, dwpe, dput(dout, sizeof dout), dput(tok, sizeof tok), EB, ET, EC);
    dget(wte, dwte, sizeof wte);
    dget(wpe, dwpe, sizeof wpe);
    double e = fmax(cmp_arr("encoder_backward dwte", wte, rwte, EV * EC, TOL),
                    cmp_arr("encoder_backward dwpe", wpe, rwpe, ET * EC, TOL));
    /* the forward is linear: its finite difference is the scatter itself, checked above */
    emit(wte, EV * EC);
    emit(wpe, ET * EC);
    dfree_all();
    return e;
}

/* ================================ layernorm ================================ */
enum { LN = 7, LC = 24 };
static void ref_ln(double *out, double *mean, double *rstd, const double *x, const double *w,
                   const double *b) {
    for (int i = 0; i < LN; i++) {
        double m = 0.0, v = 0.0;
        for (int c = 0; c < LC; c++) m += x[i * LC + c];
        m /= LC;
        for (int c = 0; c < LC; c++) v += (x[i * LC + c] - m) * (x[i * LC + c] - m);
        double r = 1.0 / sqrt(v / LC + 1e-5);
        for (int c = 0; c < LC; c++) out[i * LC + c] = (x[i * LC + c] - m) * r * w[c] + b[c];
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = r;
    }
}
static void to_d(double *d, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}

static void ln_inputs(float *x, float *w, float *b) {
    fill_rand(x, LN * LC, 2.0f);
    for (int i = 0; i < LN * LC; i++) x[i] += (float)(i / LC); /* rows with different means */
    fill_rand(w, LC, 1.0f);
    fill_rand(b, LC, 1.0f);
}

static double t_layernorm_forward(void) {
    float x[LN * LC], w[LC], b[LC], out[LN * LC], mean[LN], rstd[LN];
    ln_inputs(x, w, b);
    double xd[LN * LC], wd[LC], bd[LC], ro[LN * LC], rm[LN], rr[LN];
    to_d(xd, x, LN * LC), to_d(wd, w, LC), to_d(bd, b, LC);
    ref_ln(ro, rm, rr, xd, wd, bd);
    float *dout = dput(NULL, sizeof out), *dm = dput(NULL, sizeof mean), *dr = dput(NULL, sizeof rstd);
    g_be->layernorm_forward(dout, dm, dr, dput(x, sizeof x), dput(w, sizeof w), dput(b, sizeof b), LN, LC);
    dget(out, dout, sizeof out), dget(mean, dm, sizeof mean), dget(rstd, dr, sizeof rstd);
    double e = cmp_arr("layernorm_forward out", out, ro, LN * LC, TOL);
    e = fmax(e, cmp_arr("layernorm_forward mean", mean, rm, LN, TOL));
    e = fmax(e, cmp_arr("layernorm_forward rstd", rstd, rr, LN, TOL));
    emit(out, LN * LC), emit(mean, LN), emit(rstd, LN);
    dfree_all();
    return e;
}

static double t_layernorm_apply(void) {
    float x[LN * LC], w[LC], b[LC], out[LN * LC], out2[LN * LC];
    ln_inputs(x, w, b);
    double xd[LN * LC], wd[LC], bd[LC], ro[LN * LC];
    to_d(xd, x, LN * LC), to_d(wd, w, LC), to_d(bd, b, LC);
    ref_ln(ro, NULL, NULL, xd, wd, bd);
    float *dx = dput(x, sizeof x), *dw = dput(w, sizeof w), *db = dput(b, sizeof b);
    float *dout = dput(NULL, sizeof out), *dm = dput(NULL, LN * 4), *dr = dput(NULL, LN * 4);
    float *dout2 = dput(NULL, sizeof out);
    g_be->layernorm_forward(dout, dm, dr, dx, dw, db, LN, LC);
    g_be->layernorm_apply(dout2, dx, dw, db, dm, dr, LN, LC);
    dget(out, dout, sizeof out), dget(out2, dout2, sizeof out2);
    double e = cmp_arr("layernorm_apply", out2, ro, LN * LC, TOL);
    /* recomputation relies on it: the forward's bits from its saved statistics */
    CHECK_MSG(!memcmp(out, out2, sizeof out), "%s: layernorm_apply differs from the forward's out", g_be->name);
    emit(out2, LN * LC);
    dfree_all();
    return e;
}

typedef struct {
    const float *R;
} ln_ctx;
static double ln_loss(const double *th, const void *vctx) { /* theta = [x | w | b] */
    const ln_ctx *c = vctx;
    static double out[LN * LC];
    ref_ln(out, NULL, NULL, th, th + LN * LC, th + LN * LC + LC);
    double L = 0.0;
    for (int i = 0; i < LN * LC; i++) L += c->R[i] * out[i];
    return L;
}

static double t_layernorm_backward(void) {
    float x[LN * LC], w[LC], b[LC], dout[LN * LC], dinp[LN * LC], dw[LC], db[LC];
    ln_inputs(x, w, b);
    fill_rand(dout, LN * LC, 1.0f);
    fill_rand(dinp, LN * LC, 1.0f); /* accumulated into */
    fill_rand(dw, LC, 1.0f);
    fill_rand(db, LC, 1.0f);
    float gi[LN * LC], gw[LC], gb[LC];
    float *dx = dput(x, sizeof x), *dW = dput(w, sizeof w), *dB = dput(b, sizeof b);
    float *dm = dput(NULL, LN * 4), *dr = dput(NULL, LN * 4), *dy = dput(NULL, sizeof x);
    g_be->layernorm_forward(dy, dm, dr, dx, dW, dB, LN, LC);
    float *ddi = dput(dinp, sizeof dinp), *ddw = dput(dw, sizeof dw), *ddb = dput(db, sizeof db);
    g_be->layernorm_backward(ddi, ddw, ddb, dput(dout, sizeof dout), dx, dW, dm, dr, LN, LC);
    dget(gi, ddi, sizeof gi), dget(gw, ddw, sizeof gw), dget(gb, ddb, sizeof gb);
    /* the reference: the whole central-difference gradient of sum(dout * layernorm) in double */
    static double th[LN * LC + 2 * LC], ri[LN * LC], rw[LC], rb[LC];
    to_d(th, x, LN * LC), to_d(th + LN * LC, w, LC), to_d(th + LN * LC + LC, b, LC);
    ln_ctx c = {dout};
    for (int i = 0; i < LN * LC; i++) ri[i] = dinp[i] + fd(ln_loss, th, (size_t)i, &c);
    for (int i = 0; i < LC; i++) rw[i] = dw[i] + fd(ln_loss, th, (size_t)(LN * LC + i), &c);
    for (int i = 0; i < LC; i++) rb[i] = db[i] + fd(ln_loss, th, (size_t)(LN * LC + LC + i), &c);
    double e = cmp_arr("layernorm_backward dinp", gi, ri, LN * LC, TOL_FD);
    e = fmax(e, cmp_arr("layernorm_backward dw", gw, rw, LC, TOL_FD));
    e = fmax(e, cmp_arr("layernorm_backward db", gb, rb, LC, TOL_FD));
    emit(gi, LN * LC), emit(gw, LC), emit(gb, LC);
    dfree_all();
    return e;
}

/* ================================ attention ================================ */
enum { AB = 2, AT = 5, AC = 24, ANH = 3, AHS = AC / ANH };
/* out (B,T,C), att (B,NH,T,T), lse (B,NH,T) from qkv (B,T,3C), causal, scale 1/sqrt(hs). */
static void ref_attn(double *out, double *att, double *lse, const double *qkv) {
    double sc = 1.0 / sqrt((double)AHS);
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < ANH; h++)
            for (int t = 0; t < AT; t++) {
                const double *q = qkv + (b * AT + t) * 3 * AC + h * AHS;
                double s[AT], mx = -INFINITY, z = 0.0;
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + (b * AT + u) * 3 * AC + AC + h * AHS;
                    double d = 0.0;
                    for (int i = 0; i < AHS; i++) d += q[i] * k[i];
                    s[u] = d * sc;
                    mx = fmax(mx, s[u]);
                }
                for (int u = 0; u <= t; u++) z += exp(s[u] - mx);
                if (lse) lse[(b * ANH + h) * AT + t] = mx + log(z);
                double *o = out + (b * AT + t) * AC + h * AHS;
                for (int i = 0; i < AHS; i++) o[i] = 0.0;
                for (int u = 0; u < AT; u++) {
                    double p = u <= t ? exp(s[u] - mx) / z : 0.0;
                    if (att) att[((b * ANH + h) * AT + t) * AT + u] = p;
                    if (u > t) continue;
                    const double *v = qkv + (b * AT + u) * 3 * AC + 2 * AC + h * AHS;
                    for (int i = 0; i < AHS; i++) o[i] += p * v[i];
                }
            }
}
enum { NQKV = AB * AT * 3 * AC, NAO = AB * AT * AC, NATT = AB * ANH * AT * AT, NLSE = AB * ANH * AT };

static double t_attention_forward_impl(int flash) {
    float qkv[NQKV], out[NAO], att[NATT], lse[NLSE];
    fill_rand(qkv, NQKV, 1.5f);
    static double qd[NQKV], ro[NAO], ra[NATT], rl[NLSE];
    to_d(qd, qkv, NQKV);
    ref_attn(ro, ra, rl, qd);
    float *dq = dput(qkv, sizeof qkv), *dout = dput(NULL, sizeof out);
    double e;
    if (!flash) {
        float *da = dput(NULL, sizeof att);
        g_be->attention_forward(dout, da, dq, AB, AT, AC, ANH);
        dget(out, dout, sizeof out), dget(att, da, sizeof att);
        e = fmax(cmp_arr("attention_forward out", out, ro, NAO, TOL),
                 cmp_arr("attention_forward att", att, ra, NATT, TOL));
        emit(out, NAO), emit(att, NATT);
    } else {
        float *dl = dput(NULL, sizeof lse);
        g_be->flash_attention_forward(dout, dl, dq, AB, AT, AC, ANH);
        dget(out, dout, sizeof out), dget(lse, dl, sizeof lse);
        e = fmax(cmp_arr("flash_attention_forward out", out, ro, NAO, TOL),
                 cmp_arr("flash_attention_forward lse", lse, rl, NLSE, TOL));
        emit(out, NAO), emit(lse, NLSE);
    }
    dfree_all();
    return e;
}
static double t_attention_forward(void) { return t_attention_forward_impl(0); }
static double t_flash_attention_forward(void) { return t_attention_forward_impl(1); }

typedef struct {
    const float *R;
} at_ctx;
static double at_loss(const double *qkv, const void *vctx) {
    const at_ctx *c = vctx;
    static double out[NAO];
    ref_attn(out, NULL, NULL, qkv);
    double L = 0.0;
    for (int i = 0; i < NAO; i++) L += c->R[i] * out[i];
    return L;
}

static double t_attention_backward_impl(int flash) {
    float qkv[NQKV], dout[NAO], g[NQKV];
    fill_rand(qkv, NQKV, 1.5f);
    fill_rand(dout, NAO, 1.0f);
    float *dq = dput(qkv, sizeof qkv), *dy = dput(NULL, NAO * 4), *ddy = dput(dout, sizeof dout);
    float *dg = dput(NULL, sizeof g), *scr = dput(NULL, AB * ANH * AT * 4);
    if (!flash) {
        float *da = dput(NULL, NATT * 4);
        g_be->attention_forward(dy, da, dq, AB, AT, AC, ANH);
        g_be->attention_backward(dg, scr, ddy, dq, da, AB, AT, AC, ANH);
    } else {
        float *dl = dput(NULL, NLSE * 4);
        g_be->flash_attention_forward(dy, dl, dq, AB, AT, AC, ANH);
        g_be->flash_attention_backward(dg, scr, ddy, dq, dy, dl, AB, AT, AC, ANH);
    }
    dget(g, dg, sizeof g);
    /* the reference: the whole central-difference gradient of sum(dout * attention) */
    static double th[NQKV], r[NQKV];
    to_d(th, qkv, NQKV);
    at_ctx c = {dout};
    for (int i = 0; i < NQKV; i++) r[i] = fd(at_loss, th, (size_t)i, &c);
    double e = cmp_arr(flash ? "flash_attention_backward" : "attention_backward", g, r, NQKV, TOL_FD);
    emit(g, NQKV);
    dfree_all();
    return e;
}
static double t_attention_backward(void) { return t_attention_backward_impl(0); }
static double t_flash_attention_backward(void) { return t_attention_backward_impl(1); }

/* ================================ pointwise ================================ */
enum { PN = 1003 };
static double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
}
static double ref_gelu_grad(double x) {
    double k = sqrt(2.0 / PI), u = k * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

static double t_gelu_forward(void) {
    float x[PN], y[PN];
    fill_rand(x, PN, 5.0f);
    double r[PN];
    for (int i = 0; i < PN; i++) r[i] = ref_gelu(x[i]);
    float *dy = dput(NULL, sizeof y);
    g_be->gelu_forward(dy, dput(x, sizeof x), PN);
    dget(y, dy, sizeof y);
    double e = cmp_arr("gelu_forward", y, r, PN, TOL);
    emit(y, PN);
    dfree_all();
    return e;
}

static double gelu_loss(const double *x, const void *ctx) {
    (void)ctx;
    return ref_gelu(x[0]);
}

static double t_gelu_backward(void) {
    float x[PN], d[PN], g[PN];
    fill_rand(x, PN, 5.0f);
    fill_rand(d, PN, 1.0f);
    double r[PN];
    for (int i = 0; i < PN; i++) r[i] = ref_gelu_grad(x[i]) * d[i];
    float *dx = dput(x, sizeof x), *dd = dput(d, sizeof d), *dg = dput(NULL, sizeof g);
    g_be->gelu_backward(dg, dx, dd, PN);
    dget(g, dg, sizeof g);
    double e = cmp_arr("gelu_backward", g, r, PN, TOL);
    g_be->gelu_backward(dd, dx, dd, PN); /* dinp aliasing dout */
    float g2[PN];
    dget(g2, dd, sizeof g2);
    CHECK_MSG(!memcmp(g, g2, sizeof g), "%s: gelu_backward in place differs", g_be->name);
    for (int i = 0; i < PN; i += 250) { /* finite differences of the double forward */
        double th = x[i], err = rel(g[i] / d[i], fd(gelu_loss, &th, 0, NULL));
        CHECK_MSG(err <= TOL_FD * fmax(1.0, 1.0 / fabs(d[i])), "gelu finite difference at %d: %.3g", i, err);
    }
    emit(g, PN);
    dfree_all();
    return e;
}

static double t_scale(void) {
    float x[PN], y[PN];
    fill_rand(x, PN, 3.0f);
    float *dx = dput(x, sizeof x);
    g_be->scale(dx, PN, 0.37f);
    dget(y, dx, sizeof y);
    int exact = 1; /* one fp32 product: correctly rounded */
    for (int i = 0; i < PN; i++) exact &= y[i] == (float)((double)x[i] * (double)0.37f);
    CHECK_MSG(exact, "%s: scale is not the rounded product", g_be->name);
    emit(y, PN);
    dfree_all();
    return exact ? 0.0 : 1.0;
}

static double t_sumsq(void) {
    double e = 0.0;
    size_t sizes[2] = {PN, 100003}; /* the second above HPT_PAR_MIN: the threaded path */
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        float *x = malloc(n * sizeof(float));
        fill_rand(x, n, 2.0f);
        double r = 0.0;
        for (size_t i = 0; i < n; i++) r += (double)x[i] * x[i];
        double got = g_be->sumsq(dput(x, n * sizeof(float)), n);
        double err = fabs(got - r) / r; /* summed in double: 1e-12 */
        CHECK_MSG(err <= 1e-12, "%s: sumsq n=%zu error %.3g", g_be->name, n, err);
        e = fmax(e, err);
        emit1(got);
        free(x);
        dfree_all();
    }
    return e;
}

static double t_nonfinite(void) {
    float x[PN];
    fill_rand(x, PN, 1e30f);
    float *dx = dput(x, sizeof x);
    int bad = g_be->nonfinite(dx, PN) != 0;
    float specials[3] = {INFINITY, -INFINITY, NAN};
    size_t at[3] = {0, 517, PN - 1};
    for (int k = 0; k < 3; k++) {
        g_be->copy(dx + at[k], &specials[k], sizeof(float), HPT_COPY_H2D);
        bad |= g_be->nonfinite(dx, PN) != 1;
        g_be->copy(dx + at[k], &x[at[k]], sizeof(float), HPT_COPY_H2D);
    }
    bad |= g_be->nonfinite(dx, PN) != 0;
    CHECK_MSG(!bad, "%s: nonfinite", g_be->name);
    emit1(bad);
    dfree_all();
    return bad;
}

/* ================================ cross-entropy ================================ */
enum { XN = 7, XV = 11, XVP = 16 };
static void ref_ce(double *losses, double *lse, const double *lg, const int32_t *tg) {
    for (int i = 0; i < XN; i++) {
        double mx = -INFINITY, z = 0.0;
        for (int v = 0; v < XV; v++) mx = fmax(mx, lg[i * XVP + v]);
        for (int v = 0; v < XV; v++) z += exp(lg[i * XVP + v] - mx);
        double l = mx + log(z);
        if (lse) lse[i] = l;
        losses[i] = l - lg[i * XVP + tg[i]];
    }
}

static void ce_inputs(float *lg, int32_t *tg) {
    fill_rand(lg, XN * XVP, 4.0f);
    for (int i = 0; i < XN; i++) tg[i] = (int32_t)(i * 5 % XV);
}

static double t_crossentropy_forward(void) {
    float lg[XN * XVP], losses[XN], lse[XN];
    int32_t tg[XN];
    ce_inputs(lg, tg);
    double lgd[XN * XVP], rl[XN], rs[XN], mean = 0.0;
    to_d(lgd, lg, XN * XVP);
    ref_ce(rl, rs, lgd, tg);
    for (int i = 0; i < XN; i++) mean += rl[i] / XN;
    float *dl = dput(NULL, sizeof losses), *ds = dput(NULL, sizeof lse);
    float got = g_be->crossentropy_forward(dl, ds, dput(lg, sizeof lg), dput(tg, sizeof tg), XN, XV, XVP);
    dget(losses, dl, sizeof losses), dget(lse, ds, sizeof lse);
    double e = fmax(cmp_arr("crossentropy_forward losses", losses, rl, XN, TOL),
                    cmp_arr("crossentropy_forward lse", lse, rs, XN, TOL));
    e = fmax(e, rel(got, mean));
    CHECK_MSG(rel(got, mean) <= TOL, "%s: crossentropy mean %g, reference %g", g_be->name, got, mean);
    emit(losses, XN), emit(lse, XN), emit1(got);
    dfree_all();
    return e;
}

typedef struct {
    const int32_t *tg;
    double dloss;
} ce_ctx;
static double ce_loss(const double *lg, const void *vctx) {
    const ce_ctx *c = vctx;
    double l[XN], L = 0.0;
    ref_ce(l, NULL, lg, c->tg);
    for (int i = 0; i < XN; i++) L += c->dloss * l[i];
    return L;
}

static double t_crossentropy_backward(void) {
    float lg[XN * XVP], lse[XN], g[XN * XVP];
    int32_t tg[XN];
    ce_inputs(lg, tg);
    double lgd[XN * XVP], rl[XN], rs[XN], r[XN * XVP], dloss = 1.0 / XN;
    to_d(lgd, lg, XN * XVP);
    ref_ce(rl, rs, lgd, tg);
    for (int i = 0; i < XN; i++)
        for (int v = 0; v < XVP; v++)
            r[i * XVP + v] = v < XV ? (exp(lgd[i * XVP + v] - rs[i]) - (v == tg[i])) * dloss : 0.0;
    float *dlg = dput(lg, sizeof lg), *ds = dput(NULL, sizeof lse);
    int32_t *dt = dput(tg, sizeof tg);
    (void)g_be->crossentropy_forward(dput(NULL, sizeof lse), ds, dlg, dt, XN, XV, XVP);
    g_be->crossentropy_backward(dlg, ds, dt, XN, XV, XVP, (float)dloss);
    dget(g, dlg, sizeof g);
    double e = cmp_arr("crossentropy_backward", g, r, XN * XVP, TOL);
    ce_ctx c = {tg, dloss};
    for (int k = 0; k < 4; k++) {
        size_t i = (size_t)(k * 23 % (XN * XVP));
        if (i % XVP >= XV) continue;
        double err = rel(g[i], fd(ce_loss, lgd, i, &c));
        CHECK_MSG(err <= TOL_FD, "crossentropy finite difference at %zu: %.3g", i, err);
        e = fmax(e, err);
    }
    emit(g, XN * XVP);
    dfree_all();
    return e;
}

/* ================================ optimizers ================================ */
enum { ON = 1003 }; /* four 256-value blocks, the last short */
#define LR 1e-2f
#define B1 0.9f
#define B2 0.95f
#define EPS 1e-8f
#define WD 0.1f
#define GS 0.5f
#define STEP 3
static void opt_inputs(float *p, float *g, float *m, float *v) {
    fill_rand(p, ON, 1.0f);
    fill_rand(g, ON, 1.0f);
    fill_rand(m, ON, 0.1f);
    for (int i = 0; i < ON; i++) v[i] = 0.01f * (frand() + 1.0f) + 1e-4f;
}
/* AdamW (PyTorch's): decoupled decay, bias-corrected moments. */
static void ref_adamw(double *p, double *m, double *v, const float *g, int n) {
    double bc1 = 1.0 - pow(B1, STEP), bc2 = 1.0 - pow(B2, STEP);
    for (int i = 0; i < n; i++) {
        double gi = (double)g[i] * GS;
        m[i] = B1 * m[i] + (1.0 - B1) * gi;
        v[i] = B2 * v[i] + (1.0 - B2) * gi * gi;
        p[i] = p[i] * (1.0 - (double)LR * WD) - LR * (m[i] / bc1) / (sqrt(v[i] / bc2) + EPS);
    }
}

static double t_adamw(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double rp[ON], rm[ON], rv[ON];
    to_d(rp, p, ON), to_d(rm, m, ON), to_d(rv, v, ON);
    ref_adamw(rp, rm, rv, g, ON);
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m), *dv = dput(v, sizeof v);
    g_be->adamw(dp, dput(g, sizeof g), dm, dv, ON, LR, B1, B2, EPS, WD, GS, STEP);
    dget(p, dp, sizeof p), dget(m, dm, sizeof m), dget(v, dv, sizeof v);
    double e = cmp_arr("adamw p", p, rp, ON, TOL);
    e = fmax(e, cmp_arr("adamw m", m, rm, ON, TOL));
    e = fmax(e, cmp_arr("adamw v", v, rv, ON, TOL));
    emit(p, ON), emit(m, ON), emit(v, ON);
    dfree_all();
    return e;
}

/* The dynamic maps' largest gap: twice a quantisation's worst error, relative to absmax. */
static double map_gap(const float *map) {
    double gap = 0.0;
    for (int i = 1; i < 256; i++) gap = fmax(gap, (double)map[i] - map[i - 1]);
    return gap;
}
/* A q8 state of n values on the device, from x (host); *codes_h, *absmax_h its host copies. */
static hpt_be_state q8_state(const float *x, size_t n, const float *map, int is_signed, int lut) {
    size_t nb = (n + HPT_Q8_BLOCK - 1) / HPT_Q8_BLOCK;
    hpt_be_state s = {0};
    s.codes = dput(NULL, n);
    s.absmax = dput(NULL, nb * sizeof(float));
    s.map = dput(map, 256 * sizeof(float));
    s.lut = lut ? g_be->q8_lut_of(is_signed) : NULL;
    g_be->q8_quantize(s.codes, s.absmax, dput(x, n * sizeof(float)), n, s.map);
    return s;
}
static void q8_host(double *x, const hpt_be_state *s, size_t n, const float *map) {
    size_t nb = (n + HPT_Q8_BLOCK - 1) / HPT_Q8_BLOCK;
    uint8_t *c = malloc(n);
    float *a = malloc(nb * sizeof(float));
    dget(c, s->codes, n), dget(a, s->absmax, nb * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (double)map[c[i]] * a[i / HPT_Q8_BLOCK];
    free(c), free(a);
}

static double t_adamw_q(void) {
    float p[ON], g[ON], m[ON], v[ON], ms[256], mu[256];
    opt_inputs(p, g, m, v);
    g_be->q8_map(ms, 1);
    g_be->q8_map(mu, 0);
    double e = 0.0;
    /* (a) fp32 state and weights: AdamW itself */
    double rp[ON], rm[ON], rv[ON];
    to_d(rp, p, ON), to_d(rm, m, ON), to_d(rv, v, ON);
    ref_adamw(rp, rm, rv, g, ON);
    float pa[ON], ma[ON], va[ON];
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m), *dv = dput(v, sizeof v), *dg = dput(g, sizeof g);
    g_be->adamw_q(hpt_be_param_f32(dp), dg, (hpt_be_state){.f32 = dm}, (hpt_be_state){.f32 = dv}, ON, LR,
                  B1, B2, EPS, WD, GS, STEP);
    dget(pa, dp, sizeof pa), dget(ma, dm, sizeof ma), dget(va, dv, sizeof va);
    e = fmax(e, cmp_arr("adamw_q fp32 p", pa, rp, ON, TOL));
    e = fmax(e, cmp_arr("adamw_q fp32 m", ma, rm, ON, TOL));
    e = fmax(e, cmp_arr("adamw_q fp32 v", va, rv, ON, TOL));
    emit(pa, ON);
    /* (b) 8-bit state (m signed, sqrt(v) unsigned): the reference starts from the dequantised
     * state; p within TOL, the new state within half the map's largest gap of its block's
     * absmax (plus TOL). The fast table and the binary search give the same bits. */
    float rootv[ON];
    for (int i = 0; i < ON; i++) rootv[i] = sqrtf(v[i]);
    float pq[2][ON];
    for (int lut = 0; lut < 2; lut++) {
        hpt_be_state sm = q8_state(m, ON, ms, 1, lut), sv = q8_state(rootv, ON, mu, 0, lut);
        double m0[ON], r0[ON];
        q8_host(m0, &sm, ON, ms), q8_host(r0, &sv, ON, mu);
        to_d(rp, p, ON);
        for (int i = 0; i < ON; i++) rm[i] = m0[i], rv[i] = r0[i] * r0[i];
        ref_adamw(rp, rm, rv, g, ON);
        float *dp2 = dput(p, sizeof p);
        g_be->adamw_q(hpt_be_param_f32(dp2), dg, sm, sv, ON, LR, B1, B2, EPS, WD, GS, STEP);
        dget(pq[lut], dp2, sizeof p);
        e = fmax(e, cmp_arr("adamw_q 8-bit p", pq[lut], rp, ON, TOL));
        double m1[ON], r1[ON], em = 0.0, ev = 0.0;
        q8_host(m1, &sm, ON, ms), q8_host(r1, &sv, ON, mu);
        for (int b = 0; b * HPT_Q8_BLOCK < ON; b++) {
            double am = 0.0, ar = 0.0;
            for (int i = b * HPT_Q8_BLOCK; i < ON && i < (b + 1) * HPT_Q8_BLOCK; i++)
                am = fmax(am, fabs(rm[i])), ar = fmax(ar, sqrt(rv[i]));
            for (int i = b * HPT_Q8_BLOCK; i < ON && i < (b + 1) * HPT_Q8_BLOCK; i++) {
                em = fmax(em, fabs(m1[i] - rm[i]) / (am * (map_gap(ms) / 2 + TOL)));
                ev = fmax(ev, fabs(r1[i] - sqrt(rv[i])) / (ar * (map_gap(mu) / 2 + TOL)));
            }
        }
        CHECK_MSG(em <= 1.0 && ev <= 1.0, "%s: adamw_q 8-bit state beyond its bound (%.3g, %.3g)",
                  g_be->name, em, ev);
    }
    CHECK_MSG(!memcmp(pq[0], pq[1], sizeof pq[0]), "%s: adamw_q with and without the fast table", g_be->name);
    emit(pq[1], ON);
    /* (c) bf16 weights: stochastic rounding lands on one of the two bf16 neighbours of the fp32
     * result; Kahan's h + c holds it within bf16's rounding of the residue */
    uint16_t h[ON], c[ON];
    for (int i = 0; i < ON; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        h[i] = (uint16_t)(u >> 16);
        c[i] = 0;
    }
    double pb[ON], mb[ON], vb[ON];
    for (int i = 0; i < ON; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        pb[i] = f;
    }
    to_d(mb, m, ON), to_d(vb, v, ON);
    ref_adamw(pb, mb, vb, g, ON);
    for (int kahan = 0; kahan < 2; kahan++) {
        uint16_t *dh = dput(h, sizeof h), *dc = kahan ? dput(c, sizeof c) : NULL;
        hpt_be_param bp = {NULL, dh, dc, 12345, 0};
        g_be->adamw_q(bp, dg, (hpt_be_state){.f32 = dput(m, sizeof m)}, (hpt_be_state){.f32 = dput(v, sizeof v)},
                      ON, LR, B1, B2, EPS, WD, GS, STEP);
        uint16_t hh[ON], cc[ON];
        dget(hh, dh, sizeof hh);
        if (kahan) dget(cc, dc, sizeof cc);
        double worst = 0.0;
        for (int i = 0; i < ON; i++) {
            uint32_t u = (uint32_t)hh[i] << 16, uc = kahan ? (uint32_t)cc[i] << 16 : 0;
            float f, fc;
            memcpy(&f, &u, 4), memcpy(&fc, &uc, 4);
            double got = (double)f + fc, ulp = ldexp(1.0, ilogb(pb[i]) - 7);
            /* sr: below one bf16 ulp; kahan: the residue's own bf16 rounding, 2^-8 of it */
            worst = fmax(worst, fabs(got - pb[i]) / (kahan ? ulp * 1e-2 : ulp * (1 + 1e-6)));
        }
        CHECK_MSG(worst <= 1.0, "%s: adamw_q bf16 weights (%s) %.3g of the bound", g_be->name,
                  kahan ? "kahan" : "sr", worst);
        float hf[ON];
        for (int i = 0; i < ON; i++) hf[i] = hh[i];
        emit(hf, ON);
    }
    dfree_all();
    return e;
}

static double t_lion(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double rp[ON], rm[ON];
    for (int i = 0; i < ON; i++) {
        double gi = (double)g[i] * GS, c = B1 * (double)m[i] + (1.0 - B1) * gi;
        rp[i] = p[i] * (1.0 - (double)LR * WD) - LR * (double)((c > 0) - (c < 0));
        rm[i] = B2 * (double)m[i] + (1.0 - B2) * gi;
    }
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m);
    g_be->lion(hpt_be_param_f32(dp), dput(g, sizeof g), (hpt_be_state){.f32 = dm}, ON, LR, B1, B2, WD, GS);
    dget(p, dp, sizeof p), dget(m, dm, sizeof m);
    double e = fmax(cmp_arr("lion p", p, rp, ON, TOL), cmp_arr("lion m", m, rm, ON, TOL));
    emit(p, ON), emit(m, ON);
    dfree_all();
    return e;
}

static double t_sgd(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double rp[ON], rm[ON];
    for (int i = 0; i < ON; i++) { /* PyTorch: d = g + wd p; buf = mom buf + d; p -= lr buf */
        double d = (double)g[i] * GS + WD * (double)p[i];
        rm[i] = B1 * (double)m[i] + d;
        rp[i] = p[i] - LR * rm[i];
    }
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m);
    g_be->sgd(hpt_be_param_f32(dp), dput(g, sizeof g), (hpt_be_state){.f32 = dm}, ON, LR, B1, WD, GS);
    dget(p, dp, sizeof p), dget(m, dm, sizeof m);
    double e = fmax(cmp_arr("sgd p", p, rp, ON, TOL), cmp_arr("sgd m", m, rm, ON, TOL));
    emit(p, ON), emit(m, ON);
    dfree_all();
    return e;
}

static double t_adam_mini(void) {
    enum { ROW = 17, NR = 59 }; /* 59 rows of 17: 1003 values, blocks straddling rows */
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double rp[ON], rm[ON], rv[NR], bc1 = 1.0 - pow(B1, STEP), bc2 = 1.0 - pow(B2, STEP);
    for (int r = 0; r < NR; r++) {
        double s = 0.0;
        for (int j = 0; j < ROW; j++) s += pow((double)g[r * ROW + j] * GS, 2);
        rv[r] = B2 * (double)v[r] + (1.0 - B2) * s / ROW;
    }
    for (int i = 0; i < ON; i++) {
        rm[i] = B1 * (double)m[i] + (1.0 - B1) * (double)g[i] * GS;
        rp[i] = p[i] * (1.0 - (double)LR * WD) - LR * (rm[i] / bc1) / (sqrt(rv[i / ROW] / bc2) + EPS);
    }
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m), *dv = dput(v, NR * sizeof(float));
    g_be->adam_mini(hpt_be_param_f32(dp), dput(g, sizeof g), (hpt_be_state){.f32 = dm}, dv, ON, ROW, LR, B1,
                    B2, EPS, WD, GS, STEP);
    dget(p, dp, sizeof p), dget(m, dm, sizeof m), dget(v, dv, NR * sizeof(float));
    double e = cmp_arr("adam_mini p", p, rp, ON, TOL);
    e = fmax(e, cmp_arr("adam_mini m", m, rm, ON, TOL));
    e = fmax(e, cmp_arr("adam_mini v", v, rv, NR, TOL));
    emit(p, ON), emit(m, ON), emit(v, NR);
    dfree_all();
    return e;
}

/* ================================ quantisation ================================ */
static double t_q8_map(void) {
    float ms[256], mu[256];
    g_be->q8_map(ms, 1);
    g_be->q8_map(mu, 0);
    int asc = 1, zero = 0;
    for (int i = 1; i < 256; i++) asc &= ms[i] > ms[i - 1] && mu[i] > mu[i - 1];
    for (int i = 0; i < 256; i++) zero |= ms[i] == 0.0f;
    CHECK_MSG(asc, "%s: q8 maps not ascending", g_be->name);
    CHECK(zero && ms[255] == 1.0f && ms[0] >= -1.0f);
    CHECK(mu[0] == HPT_Q8_UNSIGNED_MIN && mu[255] == 1.0f);
    emit(ms, 256), emit(mu, 256);
    return asc ? 0.0 : 1.0;
}

/* q8_quantize's codes are the nearest (ties to the lower) of the map, checked by scanning all
 * 256; absmax is the block's largest |x|; the round trip within half the largest gap. */
static double t_q8_quantize(void) {
    float ms[256];
    g_be->q8_map(ms, 1);
    float x[ON], y[ON];
    fill_rand(x, ON, 3.0f);
    x[5] = 0.0f;
    size_t nb = (ON + HPT_Q8_BLOCK - 1) / HPT_Q8_BLOCK;
    uint8_t *dc = dput(NULL, ON), c[ON];
    float *da = dput(NULL, nb * sizeof(float)), *dm = dput(ms, sizeof ms), a[4], *dy = dput(NULL, sizeof y);
    g_be->q8_quantize(dc, da, dput(x, sizeof x), ON, dm);
    g_be->q8_dequantize(dy, dc, da, ON, dm);
    dget(c, dc, ON), dget(a, da, nb * sizeof(float)), dget(y, dy, sizeof y);
    int nearest = 1;
    double e = 0.0;
    for (size_t b = 0; b < nb; b++) {
        double am = 0.0;
        for (size_t i = b * HPT_Q8_BLOCK; i < ON && i < (b + 1) * HPT_Q8_BLOCK; i++) am = fmax(am, fabs(x[i]));
        CHECK(a[b] == (float)am);
        for (size_t i = b * HPT_Q8_BLOCK; i < ON && i < (b + 1) * HPT_Q8_BLOCK; i++) {
            double t = x[i] / (double)a[b];
            int best = 0;
            for (int k = 1; k < 256; k++)
                if (fabs(t - ms[k]) < fabs(t - ms[best])) best = k;
            /* ties to the lower code, and fp32 division may round a hair: accept a code
             * within 1e-6 of the best distance */
            nearest &= fabs(t - ms[c[i]]) <= fabs(t - ms[best]) + 1e-6;
            e = fmax(e, fabs(y[i] - x[i]) / (a[b] * map_gap(ms) / 2));
            nearest &= y[i] == ms[c[i]] * a[b];
        }
    }
    CHECK_MSG(nearest, "%s: q8_quantize not the nearest code", g_be->name);
    /* the code is chosen from fp32 x / absmax: the 1e-6 slack above, 1e-4 of half a gap */
    CHECK_MSG(e <= 1.0 + 1e-4, "%s: q8 round trip %.3g of half the largest gap", g_be->name, e);
    float cf[ON];
    for (int i = 0; i < ON; i++) cf[i] = c[i];
    emit(cf, ON), emit(y, ON);
    dfree_all();
    return e;
}

/* f16 in double: the value of bits h. */
static double ref_f16_value(uint16_t h) {
    int s = h >> 15, ex = (h >> 10) & 31, mant = h & 1023;
    double v = ex == 0 ? ldexp(mant, -24) : ex == 31 ? (mant ? NAN : INFINITY) : ldexp(1024 + mant, ex - 25);
    return s ? -v : v;
}
/* x rounded to the nearest f16 (ties to even), in double; overflow -> inf. */
static double ref_f16_round(double x) {
    if (!isfinite(x) || x == 0.0) return x;
    int e = ilogb(x);
    double q = ldexp(1.0, (e < -14 ? -14 : e) - 10); /* the quantum (subnormals: 2^-24) */
    double r = rint(x / q) * q;                      /* rint: nearest, ties to even */
    return fabs(r) > 65504.0 ? copysign(INFINITY, x) : r;
}
static double ref_bf16_round(double x) {
    if (!isfinite(x) || x == 0.0) return x;
    int e = ilogb(x);
    double q = ldexp(1.0, (e < -126 ? -126 : e) - 7);
    double r = rint(x / q) * q;
    return fabs(r) > 3.3895313892515355e38 ? copysign(INFINITY, x) : r;
}
static double bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void half_inputs(float *x, int n) {
    fill_rand(x, n, 1.0f);
    for (int i = 0; i < n; i++) x[i] = ldexpf(x[i], (i % 45) - 30); /* 2^-30 .. 2^14: f16 subnormals, no overflow */
    float sp[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -70000.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                  1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 3e38f, NAN};
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) x[i] = sp[i];
}

static double t_narrow(int bf) {
    enum { HN = 301 };
    float x[HN];
    uint16_t h[HN];
    half_inputs(x, HN);
    double e = 0.0;
    /* without the overflowing values (and NaN) first: flag 0; then all of them: flag 1 */
    for (int all = 0; all < 2; all++) {
        int first = all ? 0 : 13;
        float *dx = dput(x + first, (HN - first) * sizeof(float));
        uint16_t *dh = dput(NULL, (HN - first) * sizeof(uint16_t));
        int ovf = bf ? g_be->bf16_narrow(dh, dx, HN - first) : g_be->f16_narrow(dh, dx, HN - first);
        dget(h, dh, (HN - first) * sizeof(uint16_t));
        int exact = 1, want_ovf = 0;
        for (int i = first; i < HN; i++) {
            double r = bf ? ref_bf16_round(x[i]) : ref_f16_round(x[i]);
            double got = bf ? bf16_value(h[i - first]) : ref_f16_value(h[i - first]);
            want_ovf |= !isfinite(r);
            exact &= isnan(r) ? isnan(got) : got == r && !signbit(got) == !signbit(r);
        }
        CHECK_MSG(exact, "%s: %s_narrow is not the nearest-even value", g_be->name, bf ? "bf16" : "f16");
        CHECK_MSG(ovf == want_ovf, "%s: %s_narrow overflow flag %d, expected %d", g_be->name,
                  bf ? "bf16" : "f16", ovf, want_ovf);
        e = fmax(e, exact ? 0.0 : 1.0);
        float hf[HN];
        for (int i = 0; i < HN - first; i++) hf[i] = h[i];
        emit(hf, (size_t)(HN - first));
        /* in place: h over x's own bytes */
        g_be->copy(dx, x + first, (HN - first) * sizeof(float), HPT_COPY_H2D);
        if (bf) g_be->bf16_narrow((uint16_t *)(void *)dx, dx, HN - first);
        else g_be->f16_narrow((uint16_t *)(void *)dx, dx, HN - first);
        uint16_t h2[HN];
        dget(h2, dx, (HN - first) * sizeof(uint16_t));
        CHECK_MSG(!memcmp(h, h2, (HN - first) * sizeof(uint16_t)), "%s: narrowing in place differs", g_be->name);
        dfree_all();
    }
    return e;
}
static double t_f16_narrow(void) { return t_narrow(0); }
static double t_bf16_narrow(void) { return t_narrow(1); }

/* Every one of the 65536 patterns, exactly (NaN as NaN). */
static double t_widen(int bf) {
    enum { WN = 65536 };
    uint16_t *h = malloc(WN * sizeof(uint16_t));
    float *x = malloc(WN * sizeof(float));
    for (int i = 0; i < WN; i++) h[i] = (uint16_t)i;
    float *dx = dput(NULL, WN * sizeof(float));
    if (bf) g_be->bf16_widen(dx, dput(h, WN * sizeof(uint16_t)), WN);
    else g_be->f16_widen(dx, dput(h, WN * sizeof(uint16_t)), WN);
    dget(x, dx, WN * sizeof(float));
    int exact = 1;
    for (int i = 0; i < WN; i++) {
        double r = bf ? bf16_value(h[i]) : ref_f16_value(h[i]);
        int ok = isnan(r) ? isnan(x[i]) : x[i] == r && !signbit(x[i]) == !signbit(r);
        exact &= ok;
    }
    CHECK_MSG(exact, "%s: %s_widen", g_be->name, bf ? "bf16" : "f16");
    emit(x, WN);
    free(h), free(x);
    dfree_all();
    return exact ? 0.0 : 1.0;
}
static double t_f16_widen(void) { return t_widen(0); }
static double t_bf16_widen(void) { return t_widen(1); }

static double t_bf16_split(void) {
    float x[ON];
    fill_rand(x, ON, 10.0f);
    uint16_t h[ON], c[ON], h0[ON];
    float *dx = dput(x, sizeof x);
    uint16_t *dh = dput(NULL, sizeof h), *dc = dput(NULL, sizeof c), *dh0 = dput(NULL, sizeof h0);
    g_be->bf16_split(dh, dc, dx, ON);
    g_be->bf16_split(dh0, NULL, dx, ON);
    dget(h, dh, sizeof h), dget(c, dc, sizeof c), dget(h0, dh0, sizeof h0);
    int exact = !memcmp(h, h0, sizeof h);
    for (int i = 0; i < ON; i++) {
        double hv = bf16_value(h[i]);
        exact &= hv == ref_bf16_round(x[i]);
        exact &= bf16_value(c[i]) == ref_bf16_round((double)x[i] - hv); /* the residue, rounded */
    }
    CHECK_MSG(exact, "%s: bf16_split", g_be->name);
    float hf[ON];
    for (int i = 0; i < ON; i++) hf[i] = h[i] * 65536.0f + c[i];
    emit(hf, ON);
    dfree_all();
    return exact ? 0.0 : 1.0;
}

enum { QOC = 13, QC = 24 };
static void q8w_host(const float *w, int8_t *q, float *s) {
    float *dw = dput(w, QOC * QC * sizeof(float));
    int8_t *dq = dput(NULL, QOC * QC);
    float *ds = dput(NULL, QOC * sizeof(float));
    g_be->q8w_quantize(dq, ds, dw, QOC, QC);
    dget(q, dq, QOC * QC), dget(s, ds, QOC * sizeof(float));
}

static double t_q8w_quantize(void) {
    float w[QOC * QC], s[QOC];
    int8_t q[QOC * QC];
    fill_rand(w, QOC * QC, 1.0f);
    q8w_host(w, q, s);
    double e = 0.0;
    for (int o = 0; o < QOC; o++) {
        double am = 0.0;
        for (int c = 0; c < QC; c++) am = fmax(am, fabs(w[o * QC + c]));
        e = fmax(e, rel(s[o], am / 127.0) / TOL);
        for (int c = 0; c < QC; c++) /* round to nearest: within half a step */
            e = fmax(e, fabs((double)q[o * QC + c] * s[o] - w[o * QC + c]) / (0.5 * s[o] * (1 + 1e-5)));
    }
    CHECK_MSG(e <= 1.0, "%s: q8w_quantize %.3g of its bound", g_be->name, e);
    float qf[QOC * QC];
    for (int i = 0; i < QOC * QC; i++) qf[i] = q[i];
    emit(qf, QOC * QC), emit(s, QOC);
    dfree_all();
    return e;
}

static double t_q8w_dequantize(void) {
    float w[QOC * QC], s[QOC], y[QOC * QC];
    int8_t q[QOC * QC];
    fill_rand(w, QOC * QC, 1.0f);
    q8w_host(w, q, s);
    float *dy = dput(NULL, sizeof y);
    g_be->q8w_dequantize(dy, dput(q, sizeof q), dput(s, sizeof s), QOC, QC);
    dget(y, dy, sizeof y);
    int exact = 1; /* one fp32 product each */
    for (int i = 0; i < QOC * QC; i++) exact &= y[i] == (float)((double)s[i / QC] * q[i]);
    CHECK_MSG(exact, "%s: q8w_dequantize", g_be->name);
    emit(y, QOC * QC);
    dfree_all();
    return exact ? 0.0 : 1.0;
}

static double t_q8w_matmul_forward(void) {
    float w[QOC * QC], s[QOC], b[QOC];
    int8_t q[QOC * QC];
    fill_rand(w, QOC * QC, 1.0f);
    fill_rand(b, QOC, 1.0f);
    q8w_host(w, q, s);
    double e = 0.0;
    int rows[2] = {3, 11}; /* the direct int8 path (<= 8 rows) and the GEMM path */
    for (int k = 0; k < 2; k++) {
        int N = rows[k];
        float inp[11 * QC], out[11 * QOC], out0[11 * QOC];
        fill_rand(inp, (size_t)N * QC, 1.0f);
        fill_rand(out0, (size_t)N * QOC, 1.0f);
        double ref[11 * QOC];
        for (int i = 0; i < N; i++)
            for (int o = 0; o < QOC; o++) {
                double acc = k ? out0[i * QOC + o] : 0.0;
                for (int c = 0; c < QC; c++) acc += (double)inp[i * QC + c] * ((double)s[o] * q[o * QC + c]);
                ref[i * QOC + o] = acc + (k ? 0.0 : b[o]);
            }
        float *dout = dput(out0, (size_t)N * QOC * sizeof(float));
        g_be->q8w_matmul_forward(dout, dput(inp, (size_t)N * QC * sizeof(float)), dput(q, sizeof q),
                                 dput(s, sizeof s), k ? NULL : dput(b, sizeof b), N, QC, QOC, k,
                                 dput(NULL, HPT_Q8W_TILE * QC * sizeof(float)));
        dget(out, dout, (size_t)N * QOC * sizeof(float));
        e = fmax(e, cmp_arr("q8w_matmul_forward", out, ref, (size_t)N * QOC, TOL));
        emit(out, (size_t)N * QOC);
        dfree_all();
    }
    return e;
}

/* ================================ activation coding ================================ */
enum { CR = 7, CW = 37 };
static double t_act_code_bytes(void) {
    int ok = g_be->act_code_bytes(HPT_ACT_CODE_INT8, CR, CW) == CR * CW + CR * sizeof(float) &&
             g_be->act_code_bytes(HPT_ACT_CODE_BF16, CR, CW) == CR * CW * sizeof(uint16_t);
    CHECK_MSG(ok, "%s: act_code_bytes (int8: a byte per value and an fp32 scale per row; bf16: two "
              "bytes per value)", g_be->name);
    emit1(ok);
    return ok ? 0.0 : 1.0;
}

/* int8: per-row scale absmax / 127, each value within half a step; bf16: nearest even. The
 * load on a helper thread (par 0) gives the same bits as on the team (par 1). */
static double t_act_code(void) {
    float x[CR * CW], y[CR * CW], y2[CR * CW];
    fill_rand(x, CR * CW, 4.0f);
    double e = 0.0;
    for (int k = 1; k <= 2; k++) {
        hpt_act_code code = (hpt_act_code)k;
        size_t bytes = g_be->act_code_bytes(code, CR, CW);
        void *dst = dput(NULL, bytes);
        float *dx = dput(x, sizeof x), *dy = dput(NULL, sizeof y);
        g_be->act_code_store(code, dst, dx, CR, CW);
        g_be->act_code_load(code, dy, dst, CR, CW, 1);
        dget(y, dy, sizeof y);
        g_be->act_code_load(code, dy, dst, CR, CW, 0);
        dget(y2, dy, sizeof y2);
        CHECK(!memcmp(y, y2, sizeof y));
        for (int r = 0; r < CR; r++) {
            double am = 0.0;
            for (int c = 0; c < CW; c++) am = fmax(am, fabs(x[r * CW + c]));
            for (int c = 0; c < CW; c++) {
                double xv = x[r * CW + c], bound = code == HPT_ACT_CODE_INT8 ? am / 254.0 * (1 + 1e-5) : 0.0;
                double err = code == HPT_ACT_CODE_INT8 ? fabs(y[r * CW + c] - xv) / bound
                                                       : (y[r * CW + c] == ref_bf16_round(xv) ? 0.0 : 2.0);
                e = fmax(e, err);
            }
        }
        emit(y, CR * CW);
        dfree_all();
    }
    CHECK_MSG(e <= 1.0, "%s: act_code round trip %.3g of its bound", g_be->name, e);
    return e;
}

/* ================================ predictors and initialisation ================================ */
static double t_fit(int velocity) {
    float s0[ON], s1[ON], w[ON];
    fill_rand(s0, ON, 1.0f), fill_rand(s1, ON, 1.0f), fill_rand(w, ON, 1.0f);
    double r0[ON], r1[ON];
    for (int i = 0; i < ON; i++) {
        r1[i] = velocity ? 0.3 * s1[i] - 0.7 * s0[i] : 0.9 * ((double)s1[i] + s0[i]);
        r0[i] = velocity ? s0[i] : 0.9 * (double)s0[i] + w[i];
    }
    float *d0 = dput(s0, sizeof s0), *d1 = dput(s1, sizeof s1);
    if (velocity) g_be->fit_velocity(d1, d0, ON, 0.3f, -0.7f);
    else g_be->fit_observe(d0, d1, dput(w, sizeof w), ON, 0.9f);
    dget(s0, d0, sizeof s0), dget(s1, d1, sizeof s1);
    double e = fmax(cmp_arr("fit s0", s0, r0, ON, TOL), cmp_arr("fit s1", s1, r1, ON, TOL));
    emit(s0, ON), emit(s1, ON);
    dfree_all();
    return e;
}
static double t_fit_observe(void) { return t_fit(0); }
static double t_fit_velocity(void) { return t_fit(1); }

static double t_predict_adam(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    const double b2k = 0.9, bc1 = 0.3, bc2 = 0.2;
    double r[ON], ss = 0.0;
    for (int i = 0; i < ON; i++) {
        double vk = b2k * v[i] + (1 - b2k) * (double)m[i] * m[i];
        double u = LR * ((m[i] / bc1) / (sqrt(vk / bc2) + EPS) + WD * (double)p[i]);
        r[i] = p[i] - u;
        ss += u * u;
    }
    float *dp = dput(p, sizeof p);
    double got = g_be->predict_adam(dp, dput(m, sizeof m), dput(v, sizeof v), ON, LR, WD, (float)b2k,
                                    (float)bc1, (float)bc2, EPS);
    dget(p, dp, sizeof p);
    double e = fmax(cmp_arr("predict_adam", p, r, ON, TOL), fabs(got - ss) / ss);
    CHECK_MSG(fabs(got - ss) / ss <= 1e-4, "%s: predict_adam's sum of squares", g_be->name);
    emit(p, ON), emit1(got);
    dfree_all();
    return e;
}

static double t_predict_linear(void) {
    float p[ON], vel[ON];
    fill_rand(p, ON, 1.0f), fill_rand(vel, ON, 1e-2f);
    double r[ON], ss = 0.0;
    for (int i = 0; i < ON; i++) {
        double u = 1.7 * (double)vel[i];
        r[i] = p[i] + u;
        ss += u * u;
    }
    float *dp = dput(p, sizeof p);
    double got = g_be->predict_linear(dp, dput(vel, sizeof vel), ON, 1.7f);
    dget(p, dp, sizeof p);
    double e = fmax(cmp_arr("predict_linear", p, r, ON, TOL), fabs(got - ss) / ss);
    CHECK_MSG(fabs(got - ss) / ss <= 1e-5, "%s: predict_linear's sum of squares", g_be->name);
    emit(p, ON), emit1(got);
    dfree_all();
    return e;
}

static double t_add_normal(void) {
    float p[ON];
    fill_rand(p, ON, 1.0f);
    hpt_rng rng;
    hpt_rng_seed(&rng, 99);
    double r[ON], ss = 0.0;
    for (int i = 0; i < ON; i++) { /* core's generator, in order */
        double u = 0.1 * (double)hpt_rng_normal(&rng);
        r[i] = p[i] + u;
        ss += u * u;
    }
    float *dp = dput(p, sizeof p);
    double got = g_be->add_normal(dp, ON, 99, 0.1f);
    dget(p, dp, sizeof p);
    double e = fmax(cmp_arr("add_normal", p, r, ON, TOL), fabs(got - ss) / ss);
    CHECK_MSG(fabs(got - ss) / ss <= 1e-5, "%s: add_normal's sum of squares", g_be->name);
    emit(p, ON);
    dfree_all();
    return e;
}

static double t_adam_step_sumsq(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double ss = 0.0;
    for (int i = 0; i < ON; i++) {
        double u = (m[i] / 0.3) / (sqrt(v[i] / 0.2) + EPS);
        ss += u * u;
    }
    double got = g_be->adam_step_sumsq(dput(m, sizeof m), dput(v, sizeof v), ON, 0.3f, 0.2f, EPS);
    double e = fabs(got - ss) / ss;
    CHECK_MSG(e <= 1e-5, "%s: adam_step_sumsq %g, reference %g", g_be->name, got, ss);
    emit1(got);
    dfree_all();
    return e;
}

/* Box-Muller in double from core's uniform stream: chunk k of 4096 from the seed key ^ k, both
 * outputs of each pair (cos then sin). libmvec's logf/cosf/sinf: 4 ulp, inside TOL. */
static double t_init_normal(void) {
    enum { TOTAL = 70003, LO = 4000, HI = 9001 }; /* above 65536: the threaded path */
    const uint64_t key = 0x1234567ull;
    const float sd = 0.02f;
    float *x = malloc(TOTAL * sizeof(float)), part[HI - LO];
    double *r = malloc(TOTAL * sizeof(double));
    for (size_t c0 = 0; c0 < TOTAL; c0 += 4096) {
        hpt_rng rng;
        hpt_rng_seed(&rng, key ^ (uint64_t)(c0 / 4096));
        size_t len = TOTAL - c0 < 4096 ? TOTAL - c0 : 4096;
        for (size_t i = 0; i < len; i += 2) {
            double u1 = 1.0f - hpt_rng_uniform(&rng), u2 = hpt_rng_uniform(&rng);
            double rad = sd * sqrt(-2.0 * log(u1)), a = 2.0 * PI * u2;
            r[c0 + i] = rad * cos(a);
            if (i + 1 < len) r[c0 + i + 1] = rad * sin(a);
        }
    }
    float *dx = dput(NULL, TOTAL * sizeof(float)), *dpart = dput(NULL, sizeof part);
    g_be->init_normal(dx, 0, TOTAL, TOTAL, sd, key);
    g_be->init_normal(dpart, LO, HI, TOTAL, sd, key);
    dget(x, dx, TOTAL * sizeof(float)), dget(part, dpart, sizeof part);
    /* absolute: the values are 0.02-scale, so relative to 0.02 */
    double e = 0.0;
    for (int i = 0; i < TOTAL; i++) e = fmax(e, fabs(x[i] - r[i]) / sd);
    CHECK_MSG(e <= TOL, "%s: init_normal %.3g", g_be->name, e);
    CHECK_MSG(!memcmp(part, x + LO, sizeof part), "%s: init_normal's range [%d, %d) differs", g_be->name, LO, HI);
    emit(x, TOTAL);
    free(x), free(r);
    dfree_all();
    return e;
}

static double t_fill(void) {
    float x[ON];
    float *dx = dput(NULL, sizeof x);
    g_be->fill(dx + 1, ON - 2, 1.25f);
    dget(x, dx, sizeof x);
    int ok = x[0] == 0.0f && x[ON - 1] == 0.0f;
    for (int i = 1; i < ON - 1; i++) ok &= x[i] == 1.25f;
    CHECK_MSG(ok, "%s: fill", g_be->name);
    emit(x, ON);
    dfree_all();
    return ok ? 0.0 : 1.0;
}

static double t_sync(void) {
    g_be->sync(); /* nothing issued: returns */
    return 0.0;
}

/* ================================ the table ================================ */
typedef struct {
    const char *op;
    size_t off;        /* the op's pointer in hpt_backend */
    double (*fn)(void); /* NULL: checked by the test named in `with` */
    const char *with;
} op_test;
#define OP(name, fn) {#name, offsetof(hpt_backend, name), fn, NULL}
#define WITH(name, other) {#name, offsetof(hpt_backend, name), NULL, other}
static const op_test k_tests[] = {
    OP(alloc, t_memory), WITH(free, "alloc"), WITH(copy, "alloc"), WITH(memset, "alloc"),
    OP(sync, t_sync),
    OP(gemm, t_gemm), OP(matmul_forward, t_matmul_forward), OP(matmul_backward, t_matmul_backward),
    OP(encoder_forward, t_encoder_forward), OP(encoder_backward, t_encoder_backward),
    OP(layernorm_forward, t_layernorm_forward), OP(layernorm_apply, t_layernorm_apply),
    OP(layernorm_backward, t_layernorm_backward),
    OP(attention_forward, t_attention_forward), OP(attention_backward, t_attention_backward),
    OP(flash_attention_forward, t_flash_attention_forward),
    OP(flash_attention_backward, t_flash_attention_backward),
    OP(gelu_forward, t_gelu_forward), OP(gelu_backward, t_gelu_backward), OP(scale, t_scale),
    OP(sumsq, t_sumsq), OP(nonfinite, t_nonfinite),
    OP(crossentropy_forward, t_crossentropy_forward),
    OP(crossentropy_backward, t_crossentropy_backward),
    OP(adamw, t_adamw), OP(adamw_q, t_adamw_q), OP(lion, t_lion), OP(sgd, t_sgd),
    OP(adam_mini, t_adam_mini),
    OP(q8_map, t_q8_map), WITH(q8_lut_of, "adamw_q (the fast table against the binary search)"),
    OP(q8_quantize, t_q8_quantize), WITH(q8_dequantize, "q8_quantize"),
    OP(f16_narrow, t_f16_narrow), OP(bf16_narrow, t_bf16_narrow), OP(f16_widen, t_f16_widen),
    OP(bf16_widen, t_bf16_widen), OP(bf16_split, t_bf16_split),
    OP(q8w_quantize, t_q8w_quantize), OP(q8w_dequantize, t_q8w_dequantize),
    OP(q8w_matmul_forward, t_q8w_matmul_forward),
    OP(act_code_bytes, t_act_code_bytes), OP(act_code_store, t_act_code),
    WITH(act_code_load, "act_code_store"),
    OP(fit_observe, t_fit_observe), OP(fit_velocity, t_fit_velocity),
    OP(predict_adam, t_predict_adam), OP(predict_linear, t_predict_linear),
    OP(add_normal, t_add_normal), OP(adam_step_sumsq, t_adam_step_sumsq),
    OP(init_normal, t_init_normal), OP(fill, t_fill),
};
#define N_TESTS (sizeof k_tests / sizeof k_tests[0])
/* Every member after the name is an op's function pointer, and every one has an entry. */
_Static_assert(sizeof(hpt_backend) ==
                   offsetof(hpt_backend, alloc) + N_TESTS * sizeof(void (*)(void)),
               "hpt_backend has an op tests/test_backend.c does not cover: add its test");

/* The backends present. */
static const hpt_backend *backends(int i) {
    switch (i) {
    case 0: return hpt_backend_cpu();
#ifdef HPT_HAVE_CUDA
    case 1: return hpt_backend_cuda(); /* the CUDA backend, when built */
#endif
    default: return NULL;
    }
}

/* The largest difference of two runs' outputs: 1e-4 relative to max(1, |cpu|) (different
 * summation orders on a device; exact ops agree to the bit and show 0). */
static double cmp_runs(const char *op) {
    double e = 0.0;
    CHECK_MSG(g_nrec[0] == g_nrec[1], "%s: %d outputs on the cpu, %d on %s", op, g_nrec[0], g_nrec[1], g_be->name);
    for (int k = 0; k < g_nrec[0] && k < g_nrec[1]; k++) {
        CHECK(g_rec[0][k].n == g_rec[1][k].n);
        for (size_t i = 0; i < g_rec[0][k].n && i < g_rec[1][k].n; i++) {
            double a = g_rec[0][k].x[i], b = g_rec[1][k].x[i];
            e = fmax(e, isnan(a) && isnan(b) ? 0.0 : rel(b, a));
        }
    }
    CHECK_MSG(e <= 1e-4, "%s: %s against the cpu: %.3g", op, g_be->name, e);
    return e;
}

int main(void) {
    CHECK_OK(hpt_mem_create(&g_mem));
    const hpt_backend *cpu = hpt_backend_cpu();
    int n_be = 0;
    for (int b = 0; backends(b); b++) n_be++;
    for (int b = 0; b < n_be; b++) {
        const hpt_backend *be = backends(b);
        /* every op present, each slot named once */
        for (size_t i = 0; i < N_TESTS; i++) {
            void (*f)(void);
            memcpy(&f, (const char *)be + k_tests[i].off, sizeof f);
            CHECK_MSG(f != NULL, "%s: op %s missing", be->name, k_tests[i].op);
            for (size_t j = 0; j < i; j++) CHECK(k_tests[j].off != k_tests[i].off);
        }
        printf("backend %s: %zu ops\n", be->name, N_TESTS);
        for (size_t i = 0; i < N_TESTS; i++) {
            const op_test *t = &k_tests[i];
            if (!t->fn) {
                printf("  %-26s checked with %s\n", t->op, t->with);
                continue;
            }
            g_seed = 0x5eed0000u + i; /* the same inputs on every backend */
            g_be = be;
            g_side = be == cpu ? -1 : 1;
            double e = t->fn();
            if (be == cpu) {
                printf("  %-26s max error %.3g\n", t->op, e);
                continue;
            }
            g_be = cpu; /* the same op on the CPU, for the comparison */
            g_seed = 0x5eed0000u + i;
            g_side = 0;
            (void)t->fn();
            g_be = be;
            g_side = -1;
            printf("  %-26s max error %.3g, against the cpu %.3g\n", t->op, e, cmp_runs(t->op));
            rec_clear();
        }
    }
    if (n_be == 1) printf("only the cpu backend is present: the comparison of backends is skipped\n");
    hpt_mem_destroy(g_mem);
    return t_done("test_backend");
}
