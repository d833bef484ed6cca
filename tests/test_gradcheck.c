/* test_gradcheck.c: every layer's fp32 backward kernel against finite differences in double
 * precision, AdamW against PyTorch's formula in double, and the whole model's gradients
 * against finite differences of its fp32 loss (the wiring; see check_model for its bound).
 *
 * Per kernel: a double-precision restatement of the layer's forward (the same formula) gives a
 * scalar objective J = sum(out * R) for a fixed random R; dJ/dx for every input, weight and
 * bias element is taken by central differences in double (h = 1e-5), and compared with the
 * fp32 backward kernel fed dout = R. R and all inputs are drawn as floats, so the kernel and
 * the reference see exactly the same numbers.
 *
 * Bounds, as norm-wise relative errors ||analytic - numeric|| / ||numeric||:
 *   GRAD_BOUND 1e-4: the numeric side is good to ~1e-10 (truncation ~h^2 |J'''| ~ 1e-10,
 *   rounding ~1e-16 |J| / h ~ 1e-11), so what is measured is the fp32 error of the kernel:
 *   each gradient element is a sum of at most ~100 products whose rounding grows like
 *   sqrt(K) u, u = 6e-8, i.e. ~1e-6; layernorm's and softmax's cancelling terms cost a
 *   little more. The measured errors (printed) are 1e-9..1e-6; a wiring error (a wrong
 *   index, a missing term, a wrong factor) is O(1e-2..1), and even a 3% error in one term
 *   of GELU's derivative shows as 1e-3.
 *   FWD_BOUND 1e-5: the fp32 forward against the double forward, same reasoning.
 * Accumulating outputs (dw, dbias, layernorm's dinp, ...) are pre-filled with random values
 * and the pre-fill is subtracted in double before comparing; outputs documented as
 * overwritten are pre-filled with NaN, so any element left unwritten or read shows.
 * Every buffer is malloc'ed at its exact size, so the sanitizer build catches overruns.
 * Small shapes get a difference for every element and cross the kernels' internal block
 * sizes (64 columns of dbias, 32 channels of layernorm's dw, 16 of dwte); shapes past
 * K_PAR_MIN, where the kernels split work over the 2 threads, get sampled differences. */
#include "testlib.h"

#include "core/core.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FD_H 1e-5       /* central-difference step of the double checks */
#define GRAD_BOUND 1e-4 /* fp32 backward vs double numeric, norm-wise relative */
#define FWD_BOUND 1e-5  /* fp32 forward vs double forward, norm-wise relative */
#define FD_ALL 512      /* arrays up to this size: every element gets a difference */
#define FD_SAMPLE 48    /* larger ones: this many, spread over the array */

static hpt_rng rng;

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_gradcheck: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* (n) floats ~ mean + std * N(0,1). */
static float *rand_f(size_t n, double mean, double std) {
    float *x = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)(mean + std * (double)hpt_rng_normal(&rng));
    return x;
}

static float *fill_f(size_t n, float v) {
    float *x = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

static float *copy_f(const float *src, size_t n) {
    float *x = xmalloc(n * sizeof(float));
    memcpy(x, src, n * sizeof(float));
    return x;
}

/* The exact double image of a float vector (NULL stays NULL). */
static double *to_d(const float *src, size_t n) {
    if (!src) return NULL;
    double *x = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = (double)src[i];
    return x;
}

static double *zeros_d(size_t n) {
    double *x = xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = 0.0;
    return x;
}

static double dot_d(const double *a, const double *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static double norm_d(const double *a, size_t n) { return sqrt(dot_d(a, a, n)); }

/* ||(analytic - prefill) - numeric|| / ||numeric||, in double (prefill may be NULL). */
static double grad_err(const float *analytic, const float *prefill, const double *numeric,
                       size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double a = (double)analytic[i] - (prefill ? (double)prefill[i] : 0.0);
        double d = a - numeric[i];
        num += d * d;
        den += numeric[i] * numeric[i];
    }
    return sqrt(num) / (den > 0.0 ? sqrt(den) : 1e-300);
}

/* ||fp32 - double|| / ||double||. */
static double fwd_err(const float *a, const double *ref, size_t n) {
    return grad_err(a, NULL, ref, n);
}

static void report(const char *tag, const char *what, double err, double bound) {
    printf("  %-44s %-8s rel %.2e  (bound %.1e)\n", tag, what, err, bound);
    CHECK_MSG(err < bound, "%s %s: relative error %.3e >= %.0e", tag, what, err, bound);
}

/* dJ/dx[i] by a central difference; x is one of the arrays J reads through ctx, and x[i] is
 * perturbed in place and restored exactly. */
typedef double (*objective_fn)(void *ctx);
static double fd_one(double *x, size_t i, objective_fn J, void *ctx) {
    double xi = x[i];
    x[i] = xi + FD_H;
    double jp = J(ctx);
    x[i] = xi - FD_H;
    double jm = J(ctx);
    x[i] = xi;
    return (jp - jm) / (2.0 * FD_H);
}

static void fd_grad(double *x, size_t n, objective_fn J, void *ctx, double *g) {
    for (size_t i = 0; i < n; i++) g[i] = fd_one(x, i, J, ctx);
}

/* Checks the analytic gradient of the n elements of x (minus its pre-fill; prefill may be
 * NULL) against central differences: every element when n <= FD_ALL, else FD_SAMPLE of
 * them, one from each of FD_SAMPLE equal parts, reported as "name*". The large shapes are
 * there to run the kernels' multi-thread paths, and each difference costs a whole forward. */
static void check_grad(const char *tag, const char *what, double *x, size_t n, objective_fn J,
                       void *ctx, const float *analytic, const float *prefill) {
    int sampled = n > FD_ALL;
    size_t m = sampled ? FD_SAMPLE : n, part = n / FD_SAMPLE;
    double num = 0.0, den = 0.0;
    for (size_t k = 0; k < m; k++) {
        size_t i = sampled ? k * part + hpt_rng_u32(&rng) % part : k;
        double g = fd_one(x, i, J, ctx);
        double a = (double)analytic[i] - (prefill ? (double)prefill[i] : 0.0);
        num += (a - g) * (a - g);
        den += g * g;
    }
    char label[32];
    snprintf(label, sizeof label, "%s%s", what, sampled ? "*" : "");
    CHECK_MSG(sqrt(den) > 1e-6, "%s %s: numeric gradient is zero", tag, label);
    report(tag, label, sqrt(num) / (den > 0.0 ? sqrt(den) : 1e-300), GRAD_BOUND);
}

/* ---- matmul ------------------------------------------------------------------------- */

typedef struct {
    double *inp;  // (N, C)
    double *w;    // (OC, C)
    double *bias; // (OC) or NULL
    double *out;  // (N, OC) scratch
    const double *R; // (N, OC)
    int64_t N, C, OC;
} mm_ctx;

/* out = inp @ w^T + bias */
static void matmul_ref(double *out, const double *inp, const double *w, const double *bias,
                       int64_t N, int64_t C, int64_t OC) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int64_t c = 0; c < C; c++) s += inp[n * C + c] * w[o * C + c];
            out[n * OC + o] = s;
        }
}

static double mm_objective(void *p) {
    mm_ctx *x = p;
    matmul_ref(x->out, x->inp, x->w, x->bias, x->N, x->C, x->OC);
    return dot_d(x->out, x->R, (size_t)(x->N * x->OC));
}

static void check_matmul(int64_t N, int64_t C, int64_t OC, int with_bias, int accumulate) {
    char tag[96];
    snprintf(tag, sizeof tag, "matmul N=%d C=%d OC=%d bias=%d acc=%d", (int)N, (int)C, (int)OC,
             with_bias, accumulate);
    size_t nI = (size_t)(N * C), nW = (size_t)(OC * C), nO = (size_t)(N * OC);
    float *inp = rand_f(nI, 0.0, 1.0), *w = rand_f(nW, 0.0, 1.0);
    float *bias = with_bias ? rand_f((size_t)OC, 0.0, 1.0) : NULL;
    /* forward: with accumulate, out += ...; without, whatever out held is overwritten */
    float *pre_out = rand_f(nO, 0.0, 1.0);
    float *out = accumulate ? copy_f(pre_out, nO) : fill_f(nO, NAN);
    k_matmul_forward(out, inp, w, bias, N, C, OC, accumulate);
    mm_ctx x = {to_d(inp, nI), to_d(w, nW), to_d(bias, (size_t)OC), zeros_d(nO), NULL, N, C, OC};
    matmul_ref(x.out, x.inp, x.w, x.bias, N, C, OC);
    report(tag, "fwd", grad_err(out, accumulate ? pre_out : NULL, x.out, nO), FWD_BOUND);

    /* backward: dw and dbias always +=, dinp += only with accumulate_dinp */
    float *R = rand_f(nO, 0.0, 1.0);
    double *Rd = to_d(R, nO);
    x.R = Rd;
    float *pre_dinp = rand_f(nI, 0.0, 1.0), *pre_dw = rand_f(nW, 0.0, 1.0);
    float *pre_db = rand_f((size_t)OC, 0.0, 1.0);
    float *dinp = accumulate ? copy_f(pre_dinp, nI) : fill_f(nI, NAN);
    float *dw = copy_f(pre_dw, nW), *dbias = with_bias ? copy_f(pre_db, (size_t)OC) : NULL;
    k_matmul_backward(dinp, dw, dbias, R, inp, w, N, C, OC, accumulate);

    check_grad(tag, "dinp", x.inp, nI, mm_objective, &x, dinp, accumulate ? pre_dinp : NULL);
    check_grad(tag, "dw", x.w, nW, mm_objective, &x, dw, pre_dw);
    if (with_bias) {
        check_grad(tag, "dbias", x.bias, (size_t)OC, mm_objective, &x, dbias, pre_db);
    }
    free(x.inp); free(x.w); free(x.bias); free(x.out); free(Rd);
    free(inp); free(w); free(bias); free(pre_out); free(out); free(R);
    free(pre_dinp); free(pre_dw); free(pre_db); free(dinp); free(dw); free(dbias);
}

/* ---- layernorm ---------------------------------------------------------------------- */

typedef struct {
    double *inp, *w, *b; // (N, C), (C), (C)
    double *out, *mean, *rstd; // (N, C), (N), (N) scratch
    const double *R;     // (N, C)
    int64_t N;
    int C;
} ln_ctx;

/* out = (inp - mean) / sqrt(var + 1e-5) * w + b per row, var the biased variance. */
static void layernorm_ref(double *out, double *mean, double *rstd, const double *inp,
                          const double *w, const double *b, int64_t N, int C) {
    for (int64_t i = 0; i < N; i++) {
        const double *x = inp + i * C;
        double mu = 0.0, var = 0.0;
        for (int c = 0; c < C; c++) mu += x[c];
        mu /= C;
        for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
        var /= C;
        double rs = 1.0 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++) out[i * C + c] = (x[c] - mu) * rs * w[c] + b[c];
        mean[i] = mu;
        rstd[i] = rs;
    }
}

static double ln_objective(void *p) {
    ln_ctx *x = p;
    layernorm_ref(x->out, x->mean, x->rstd, x->inp, x->w, x->b, x->N, x->C);
    return dot_d(x->out, x->R, (size_t)x->N * (size_t)x->C);
}

static void check_layernorm(int64_t N, int C) {
    char tag[96];
    snprintf(tag, sizeof tag, "layernorm N=%d C=%d", (int)N, C);
    size_t nX = (size_t)N * (size_t)C;
    /* an offset mean and a non-unit spread, so the mean and rstd terms matter */
    float *inp = rand_f(nX, 0.7, 1.3), *w = rand_f((size_t)C, 1.0, 0.5);
    float *b = rand_f((size_t)C, 0.0, 0.5);
    float *out = fill_f(nX, NAN), *mean = fill_f((size_t)N, NAN), *rstd = fill_f((size_t)N, NAN);
    k_layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    ln_ctx x = {to_d(inp, nX), to_d(w, (size_t)C), to_d(b, (size_t)C), zeros_d(nX),
                zeros_d((size_t)N), zeros_d((size_t)N), NULL, N, C};
    layernorm_ref(x.out, x.mean, x.rstd, x.inp, x.w, x.b, N, C);
    report(tag, "fwd", fwd_err(out, x.out, nX), FWD_BOUND);
    report(tag, "mean", fwd_err(mean, x.mean, (size_t)N), FWD_BOUND);
    report(tag, "rstd", fwd_err(rstd, x.rstd, (size_t)N), FWD_BOUND);

    /* backward: dinp, dw, db all += */
    float *R = rand_f(nX, 0.0, 1.0);
    double *Rd = to_d(R, nX);
    x.R = Rd;
    float *pre_dinp = rand_f(nX, 0.0, 1.0), *pre_dw = rand_f((size_t)C, 0.0, 1.0);
    float *pre_db = rand_f((size_t)C, 0.0, 1.0);
    float *dinp = copy_f(pre_dinp, nX), *dw = copy_f(pre_dw, (size_t)C);
    float *db = copy_f(pre_db, (size_t)C);
    k_layernorm_backward(dinp, dw, db, R, inp, w, mean, rstd, N, C);

    check_grad(tag, "dinp", x.inp, nX, ln_objective, &x, dinp, pre_dinp);
    check_grad(tag, "dw", x.w, (size_t)C, ln_objective, &x, dw, pre_dw);
    check_grad(tag, "db", x.b, (size_t)C, ln_objective, &x, db, pre_db);
    free(x.inp); free(x.w); free(x.b); free(x.out); free(x.mean); free(x.rstd);
    free(Rd); free(inp); free(w); free(b); free(out); free(mean); free(rstd); free(R);
    free(pre_dinp); free(pre_dw); free(pre_db); free(dinp); free(dw); free(db);
}

/* ---- attention ---------------------------------------------------------------------- */

typedef struct {
    double *qkv;      // (B, T, 3C)
    double *out, *att; // (B, T, C), (B, NH, T, T) scratch
    const double *R;  // (B, T, C)
    int B, T, C, NH;
} att_ctx;

/* Causal softmax(q k^T / sqrt(hs)) v per head; att's upper triangle is 0. */
static void attention_ref(double *out, double *att, const double *qkv, int B, int T, int C,
                          int NH) {
    int hs = C / NH, C3 = 3 * C;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * C3 + h * hs;
                double *a = att + (((size_t)b * NH + h) * T + t) * T;
                double maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *k = qkv + ((size_t)b * T + t2) * C3 + C + h * hs;
                    double s = 0.0;
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    a[t2] = s * scale;
                    if (a[t2] > maxv) maxv = a[t2];
                }
                double sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++) {
                    a[t2] = exp(a[t2] - maxv);
                    sum += a[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) a[t2] /= sum;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0;
                double *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int i = 0; i < hs; i++) {
                    double s = 0.0;
                    for (int t2 = 0; t2 <= t; t2++)
                        s += a[t2] * qkv[((size_t)b * T + t2) * C3 + 2 * C + h * hs + i];
                    o[i] = s;
                }
            }
}

static double att_objective(void *p) {
    att_ctx *x = p;
    attention_ref(x->out, x->att, x->qkv, x->B, x->T, x->C, x->NH);
    return dot_d(x->out, x->R, (size_t)x->B * x->T * x->C);
}

static void check_attention(int B, int T, int C, int NH) {
    char tag[96];
    snprintf(tag, sizeof tag, "attention B=%d T=%d C=%d NH=%d", B, T, C, NH);
    size_t nQ = (size_t)B * T * 3 * C, nO = (size_t)B * T * C, nA = (size_t)B * NH * T * T;
    float *qkv = rand_f(nQ, 0.0, 1.0);
    float *out = fill_f(nO, NAN), *att = fill_f(nA, NAN);
    k_attention_forward(out, att, qkv, B, T, C, NH, NH);
    att_ctx x = {to_d(qkv, nQ), zeros_d(nO), zeros_d(nA), NULL, B, T, C, NH};
    attention_ref(x.out, x.att, x.qkv, B, T, C, NH);
    report(tag, "fwd", fwd_err(out, x.out, nO), FWD_BOUND);
    report(tag, "att", fwd_err(att, x.att, nA), FWD_BOUND);
    int upper_ok = 1;
    for (int bh = 0; bh < B * NH; bh++)
        for (int t = 0; t < T; t++)
            for (int t2 = t + 1; t2 < T; t2++)
                if (att[((size_t)bh * T + t) * T + t2] != 0.0f) upper_ok = 0;
    CHECK_MSG(upper_ok, "%s: att's upper triangle is not exactly 0", tag);

    /* backward: dqkv overwritten; scratch is the kernel's to use */
    float *R = rand_f(nO, 0.0, 1.0);
    double *Rd = to_d(R, nO);
    x.R = Rd;
    float *dqkv = fill_f(nQ, NAN), *scratch = fill_f((size_t)B * NH * T, NAN);
    k_attention_backward(dqkv, scratch, R, qkv, att, B, T, C, NH, NH);
    if (nQ > FD_ALL) {
        check_grad(tag, "dqkv", x.qkv, nQ, att_objective, &x, dqkv, NULL);
    } else {
        double *g = zeros_d(nQ);
        fd_grad(x.qkv, nQ, att_objective, &x, g);
        report(tag, "dqkv", grad_err(dqkv, NULL, g, nQ), GRAD_BOUND);
        /* q, k, v separately: a wrong part would hide in the whole if the others were large */
        const char *part[3] = {"dq", "dk", "dv"};
        for (int s = 0; s < 3; s++) {
            double num = 0.0, den = 0.0;
            for (size_t r = 0; r < (size_t)B * T; r++)
                for (int i = 0; i < C; i++) {
                    size_t j = r * 3 * C + (size_t)s * C + i;
                    double d = (double)dqkv[j] - g[j];
                    num += d * d;
                    den += g[j] * g[j];
                }
            if (T == 1 && s < 2) {
                /* one position: the softmax of one score is 1 whatever q and k are */
                CHECK_MSG(sqrt(num) < 1e-6, "%s %s: expected 0, |d| = %.3e", tag, part[s],
                          sqrt(num));
                printf("  %-44s %-8s |d| %.2e  (exactly 0 expected)\n", tag, part[s], sqrt(num));
            } else {
                CHECK_MSG(sqrt(den) > 1e-6, "%s %s: numeric gradient is zero", tag, part[s]);
                report(tag, part[s], sqrt(num) / (den > 0.0 ? sqrt(den) : 1e-300), GRAD_BOUND);
            }
        }
        free(g);
    }
    free(x.qkv); free(x.out); free(x.att); free(Rd);
    free(qkv); free(out); free(att); free(R); free(dqkv); free(scratch);
}

/* ---- GELU --------------------------------------------------------------------------- */

typedef struct {
    double *inp, *out; // (n)
    const double *R;   // (n)
    size_t n;
} gelu_ctx;

static void gelu_ref(double *out, const double *inp, size_t n) {
    const double k = sqrt(2.0 / M_PI);
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = 0.5 * x * (1.0 + tanh(k * (x + 0.044715 * x * x * x)));
    }
}

static double gelu_objective(void *p) {
    gelu_ctx *x = p;
    gelu_ref(x->out, x->inp, x->n);
    return dot_d(x->out, x->R, x->n);
}

static void check_gelu(size_t n) {
    char tag[96];
    snprintf(tag, sizeof tag, "gelu n=%zu", n);
    float *inp = rand_f(n, 0.0, 2.0);
    /* the middle, and the saturated tails where tanh is +-1 */
    inp[0] = 0.0f;
    if (n > 4) { inp[1] = 6.0f; inp[2] = -6.0f; inp[3] = 12.0f; inp[4] = -12.0f; }
    float *out = fill_f(n, NAN);
    k_gelu_forward(out, inp, (int64_t)n);
    gelu_ctx x = {to_d(inp, n), zeros_d(n), NULL, n};
    gelu_ref(x.out, x.inp, n);
    report(tag, "fwd", fwd_err(out, x.out, n), FWD_BOUND);

    float *R = rand_f(n, 0.0, 1.0);
    double *Rd = to_d(R, n);
    x.R = Rd;
    float *dinp = fill_f(n, NAN);
    k_gelu_backward(dinp, inp, R, (int64_t)n);
    check_grad(tag, "dinp", x.inp, n, gelu_objective, &x, dinp, NULL);
    /* in place, as the model calls it: dinp aliases dout */
    float *inplace = copy_f(R, n);
    k_gelu_backward(inplace, inp, inplace, (int64_t)n);
    CHECK_MSG(memcmp(inplace, dinp, n * sizeof(float)) == 0, "%s: in-place backward differs", tag);
    free(x.inp); free(x.out); free(Rd); free(inp); free(out); free(R); free(dinp);
    free(inplace);
}

/* ---- encoder ------------------------------------------------------------------------ */

typedef struct {
    double *wte, *wpe; // (Vp, C), (maxT, C)
    double *out;       // (B, T, C) scratch
    const double *R;   // (B, T, C)
    const int32_t *inp; // (B, T)
    int B, T, C;
} enc_ctx;

static void encoder_ref(double *out, const int32_t *inp, const double *wte, const double *wpe,
                        int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++)
                out[((size_t)b * T + t) * C + c] =
                    wte[(size_t)inp[b * T + t] * C + c] + wpe[(size_t)t * C + c];
}

static double enc_objective(void *p) {
    enc_ctx *x = p;
    encoder_ref(x->out, x->inp, x->wte, x->wpe, x->B, x->T, x->C);
    return dot_d(x->out, x->R, (size_t)x->B * x->T * x->C);
}

static void check_encoder(int B, int T, int C, int Vp, int maxT) {
    char tag[96];
    snprintf(tag, sizeof tag, "encoder B=%d T=%d C=%d Vp=%d maxT=%d", B, T, C, Vp, maxT);
    size_t nE = (size_t)Vp * C, nP = (size_t)maxT * C, nO = (size_t)B * T * C;
    /* tokens from the first few rows only: many repeats, and rows nobody uses */
    int used = Vp < 4 ? Vp : 4;
    int32_t *inp = xmalloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) inp[i] = (int32_t)(hpt_rng_u32(&rng) % (uint32_t)used);
    inp[B * T - 1] = inp[0]; /* at least one repeat, across batch rows when B > 1 */
    float *wte = rand_f(nE, 0.0, 1.0), *wpe = rand_f(nP, 0.0, 1.0);
    float *out = fill_f(nO, NAN);
    k_encoder_forward(out, inp, wte, wpe, B, T, C);
    enc_ctx x = {to_d(wte, nE), to_d(wpe, nP), zeros_d(nO), NULL, inp, B, T, C};
    encoder_ref(x.out, inp, x.wte, x.wpe, B, T, C);
    report(tag, "fwd", fwd_err(out, x.out, nO), FWD_BOUND);

    /* backward: dwte, dwpe += */
    float *R = rand_f(nO, 0.0, 1.0);
    double *Rd = to_d(R, nO);
    x.R = Rd;
    float *pre_dwte = rand_f(nE, 0.0, 1.0), *pre_dwpe = rand_f(nP, 0.0, 1.0);
    float *dwte = copy_f(pre_dwte, nE), *dwpe = copy_f(pre_dwpe, nP);
    k_encoder_backward(dwte, dwpe, R, inp, B, T, C);
    check_grad(tag, "dwte", x.wte, nE, enc_objective, &x, dwte, pre_dwte);
    check_grad(tag, "dwpe", x.wpe, nP, enc_objective, &x, dwpe, pre_dwpe);
    /* rows of unused tokens and positions >= T are left exactly as they were */
    CHECK_MSG(memcmp(dwte + (size_t)used * C, pre_dwte + (size_t)used * C,
                     (nE - (size_t)used * C) * sizeof(float)) == 0,
              "%s: unused dwte rows changed", tag);
    CHECK_MSG(memcmp(dwpe + (size_t)T * C, pre_dwpe + (size_t)T * C,
                     (nP - (size_t)T * C) * sizeof(float)) == 0, "%s: dwpe rows >= T changed", tag);
    free(x.wte); free(x.wpe); free(x.out); free(Rd); free(inp); free(wte); free(wpe);
    free(out); free(R); free(pre_dwte); free(pre_dwpe); free(dwte); free(dwpe);
}

/* ---- cross-entropy ------------------------------------------------------------------ */

typedef struct {
    double *logits;        // (N, Vp)
    double *losses, *lse;  // (N) scratch
    const int32_t *targets; // (N)
    int64_t N;
    int V, Vp;
} ce_ctx;

/* Mean over rows of lse - logit[target], the softmax over the first V columns only. */
static double crossentropy_ref(double *losses, double *lse, const double *logits,
                               const int32_t *targets, int64_t N, int V, int Vp) {
    double total = 0.0;
    for (int64_t i = 0; i < N; i++) {
        const double *l = logits + i * Vp;
        double maxv = -INFINITY, sum = 0.0;
        for (int v = 0; v < V; v++) maxv = l[v] > maxv ? l[v] : maxv;
        for (int v = 0; v < V; v++) sum += exp(l[v] - maxv);
        lse[i] = maxv + log(sum);
        losses[i] = lse[i] - l[targets[i]];
        total += losses[i];
    }
    return total / (double)N;
}

static double ce_objective(void *p) {
    ce_ctx *x = p;
    return crossentropy_ref(x->losses, x->lse, x->logits, x->targets, x->N, x->V, x->Vp);
}

static void check_crossentropy(int64_t N, int V, int Vp) {
    char tag[96];
    snprintf(tag, sizeof tag, "crossentropy N=%d V=%d Vp=%d", (int)N, V, Vp);
    size_t nL = (size_t)N * (size_t)Vp;
    float *logits = rand_f(nL, 0.0, 2.0);
    for (int64_t i = 0; i < N; i++) {
        /* padding columns hold values that would dominate the softmax if they were read */
        for (int v = V; v < Vp; v++) logits[i * Vp + v] = 50.0f;
        /* the last row is shifted by +100: expf overflows unless the max is subtracted */
        if (i == N - 1)
            for (int v = 0; v < V; v++) logits[i * Vp + v] += 100.0f;
    }
    int32_t *targets = xmalloc((size_t)N * sizeof(int32_t));
    for (int64_t i = 0; i < N; i++) targets[i] = (int32_t)(hpt_rng_u32(&rng) % (uint32_t)V);
    targets[0] = V - 1; /* the last real column */
    if (N > 2) targets[2] = targets[1];
    float *losses = fill_f((size_t)N, NAN), *lse = fill_f((size_t)N, NAN);
    float mean = k_crossentropy_forward(losses, lse, logits, targets, N, V, Vp);
    ce_ctx x = {to_d(logits, nL), zeros_d((size_t)N), zeros_d((size_t)N), targets, N, V, Vp};
    double ref_mean = crossentropy_ref(x.losses, x.lse, x.logits, targets, N, V, Vp);
    report(tag, "losses", fwd_err(losses, x.losses, (size_t)N), FWD_BOUND);
    report(tag, "lse", fwd_err(lse, x.lse, (size_t)N), FWD_BOUND);
    report(tag, "mean", fabs((double)mean - ref_mean) / fabs(ref_mean), FWD_BOUND);

    /* backward of the mean loss: dloss = 1/N, in place on a copy of the logits */
    float *dlogits = copy_f(logits, nL);
    k_crossentropy_backward(dlogits, lse, targets, N, V, Vp, 1.0f / (float)N);
    check_grad(tag, "dlogits", x.logits, nL, ce_objective, &x, dlogits, NULL);
    int pad_zero = 1;
    for (int64_t i = 0; i < N; i++)
        for (int v = V; v < Vp; v++)
            if (dlogits[i * Vp + v] != 0.0f) pad_zero = 0;
    CHECK_MSG(pad_zero, "%s: dlogits of padding columns are not exactly 0", tag);
    free(x.logits); free(x.losses); free(x.lse); free(logits); free(targets);
    free(losses); free(lse); free(dlogits);
}

/* ---- AdamW -------------------------------------------------------------------------- */

/* PyTorch's torch.optim.AdamW step (amsgrad off, maximize off), in double:
 *   p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   p -= lr / (1-b1^t) * m / (sqrt(v) / sqrt(1-b2^t) + eps). */
static void adamw_ref(double *p, const double *g, double *m, double *v, size_t n, double lr,
                      double b1, double b2, double eps, double wd, int64_t t) {
    double bc1 = 1.0 - pow(b1, (double)t), bc2 = 1.0 - pow(b2, (double)t);
    for (size_t i = 0; i < n; i++) {
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * g[i];
        v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

static void check_adamw(size_t n, int steps, float lr, float wd, float grad_scale) {
    char tag[96];
    snprintf(tag, sizeof tag, "adamw n=%zu lr=%g wd=%g scale=%g", n, (double)lr, (double)wd,
             (double)grad_scale);
    const float b1 = 0.9f, b2 = 0.95f, eps = 1e-8f;
    float *p = rand_f(n, 0.0, 1.0), *m = fill_f(n, 0.0f), *v = fill_f(n, 0.0f);
    double *pd = to_d(p, n), *md = zeros_d(n), *vd = zeros_d(n), *gd = zeros_d(n);
    float *p0 = copy_f(p, n);
    for (int64_t t = 1; t <= steps; t++) {
        float *g = rand_f(n, 0.0, 1.0);
        g[0] = 0.0f; /* a parameter that never gets a gradient: m = v = 0, only decay moves it */
        /* the kernel scales the gradient in fp32 first; the reference sees that product */
        for (size_t i = 0; i < n; i++) gd[i] = (double)(g[i] * grad_scale);
        k_adamw(p, g, m, v, n, lr, b1, b2, eps, wd, grad_scale, t);
        adamw_ref(pd, gd, md, vd, n, (double)lr, (double)b1, (double)b2, (double)eps,
                  (double)wd, t);
        free(g);
    }
    report(tag, "p", fwd_err(p, pd, n), FWD_BOUND);
    report(tag, "m", fwd_err(m, md, n), FWD_BOUND);
    report(tag, "v", fwd_err(v, vd, n), FWD_BOUND);
    /* the update itself (p - p0, ~steps*lr), which the errors of p hide relative to |p| */
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double da = (double)p[i] - (double)p0[i], dr = pd[i] - (double)p0[i];
        num += (da - dr) * (da - dr);
        den += dr * dr;
    }
    /* p is rounded to fp32 after every step, by up to u |p| (u = 2^-24), which is large
     * against a small update: allow steps * u ||p|| on top of 1e-4 ||update|| */
    double upd_bound = 1e-4 + (double)steps * 0x1p-24 * norm_d(pd, n) / sqrt(den);
    report(tag, "p - p0", sqrt(num) / sqrt(den), upd_bound);
    free(p); free(m); free(v); free(pd); free(md); free(vd); free(gd); free(p0);
}

/* ---- the whole model ---------------------------------------------------------------- */

/* Finite differences of the fp32 loss through hpt_model_forward, against hpt_model_backward,
 * for a few parameters of every tensor (every layer of the stacked ones). The loss is fp32:
 * its rounding noise delta is a few ulp of ~2.6 (~1e-6 at most), which a step h turns into
 * ~1.5 delta / h of gradient error, so h must be large: h = 1e-2 gives ~1e-4 at worst.
 * At that h the plain central difference is not good enough: with weights of std 0.3 the
 * loss curves sharply in places (for one wpe element the second-order error h^2/6 |f'''|
 * is 5e-4 against a gradient of 1.6e-4), so the derivative is taken from four points,
 * x +- h and x +- 2h: the fourth-order stencil (8 (f(h) - f(-h)) - (f(2h) - f(-2h))) / 12h,
 * error ~h^4 |f^(5)| / 30, written for the points the float parameter really reached.
 * Each element passes if |a - n| <= MODEL_RTOL max(|a|, |n|) + MODEL_ATOL: the absolute
 * floor covers the loss noise, the relative part the remaining truncation and the fp32
 * error of the analytic gradient (~1e-6 relative). A wiring error (a missing residual, a
 * swapped weight, a wrong scale) changes gradients by O(1). */
#define MODEL_H 1e-2f
#define MODEL_RTOL 2e-2
#define MODEL_ATOL 2e-4
#define MODEL_PER_TENSOR 3

/* f'(0) of the polynomial through (d[j], f[j]), j < n: sum_j f[j] L_j'(0), L_j the
 * Lagrange basis. For d = -2h, -h, h, 2h it is the fourth-order central stencil. */
static double lagrange_deriv0(const double *d, const double *f, int n) {
    double s = 0.0;
    for (int j = 0; j < n; j++) {
        double lj = 0.0; /* L_j'(0) = sum_m 1/(d_j - d_m) prod_{k != j,m} (0 - d_k)/(d_j - d_k) */
        for (int m = 0; m < n; m++) {
            if (m == j) continue;
            double t = 1.0 / (d[j] - d[m]);
            for (int k = 0; k < n; k++)
                if (k != j && k != m) t *= -d[k] / (d[j] - d[k]);
            lj += t;
        }
        s += f[j] * lj;
    }
    return s;
}

static double model_loss(hpt_model *m, const int32_t *inp, const int32_t *tgt, int B, int T) {
    float loss = 0.0f;
    CHECK_OK(hpt_model_forward(m, inp, tgt, B, T, &loss));
    return (double)loss;
}

/* masked: half the targets are -1, ignored by the loss (docs/targets.md): the gradients are
 * those of the mean over the other five */
static void check_model(const hpt_model_config *cfgp, const char *label, int masked) {
    const hpt_model_config cfg = *cfgp;
    const int B = 2, T = 5;
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *model;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &model));
    hpt_model_init_random(model, 7);
    size_t np = hpt_model_num_params(model);
    float *params = hpt_model_params(model);
    /* larger weights than GPT-2's init, so the gradients of every tensor are far from 0 */
    for (size_t i = 0; i < np; i++) params[i] += 0.3f * hpt_rng_normal(&rng);
    int32_t inp[10], tgt[10];
    for (int i = 0; i < B * T; i++) {
        inp[i] = (int32_t)(hpt_rng_u32(&rng) % (uint32_t)cfg.V);
        tgt[i] = (int32_t)(hpt_rng_u32(&rng) % (uint32_t)cfg.V);
    }
    inp[7] = inp[1]; /* a repeated token */
    if (masked)
        for (int i = 0; i < B * T; i++)
            if (i == 0 || i == 2 || i == 3 || i == 7 || i == 8) tgt[i] = -1;

    float loss;
    CHECK_OK(hpt_model_forward(model, inp, tgt, B, T, &loss));
    hpt_model_zero_grad(model);
    CHECK_OK(hpt_model_backward(model));
    float *grads = copy_f(hpt_model_grads(model), np);
    printf("  model %s B=2 T=5%s: loss %.6f\n", label, masked ? ", 5 of 10 targets ignored" : "",
           (double)loss);

    /* the loss is deterministic: the same forward twice gives the same bits */
    double l1 = model_loss(model, inp, tgt, B, T), l2 = model_loss(model, inp, tgt, B, T);
    CHECK_MSG(l1 == l2 && l1 == (double)loss, "forward is not deterministic");

    t_tensor tens[T_MAX_TENSORS];
    const int nt = t_tensors_of(&cfg, tens, NULL);
    int checked = 0, meaningful = 0;
    double worst = 0.0;
    for (int ti = 0; ti < nt; ti++) {
        size_t lo = tens[ti].offset, n = tens[ti].numel;
        /* embeddings and an untied head: only rows the batch reaches (real tokens, positions < T) */
        if (!strcmp(tens[ti].name, "wte") || !strcmp(tens[ti].name, "lm_head"))
            n = (size_t)cfg.V * cfg.C;
        if (!strcmp(tens[ti].name, "wpe")) n = (size_t)T * cfg.C;
        for (int k = 0; k < MODEL_PER_TENSOR; k++) {
            /* one element from each k-th part: distinct, and each layer of stacked tensors */
            size_t seg = n / MODEL_PER_TENSOR;
            size_t i = lo + (size_t)k * seg + hpt_rng_u32(&rng) % seg;
            float orig = params[i];
            /* Gemma's embedding reaches the loss mostly through the first norm (its residual
             * path is small beside the post-normed blocks'): the loss curves on the scale of a
             * row's rms there, and a smaller step keeps the stencil's truncation in bounds */
            const float H = cfg.arch == HPT_ARCH_GEMMA3 && !strcmp(tens[ti].name, "wte")
                                ? MODEL_H / 5 : MODEL_H;
            const float step[4] = {-2.0f * H, -H, H, 2.0f * H};
            double d[4], f[4];
            for (int s = 0; s < 4; s++) {
                params[i] = orig + step[s];
                d[s] = (double)params[i] - (double)orig; /* the step the float really took */
                f[s] = model_loss(model, inp, tgt, B, T);
            }
            params[i] = orig;
            double num = lagrange_deriv0(d, f, 4), ana = (double)grads[i];
            double diff = fabs(ana - num), mag = fmax(fabs(ana), fabs(num));
            double ratio = diff / (MODEL_RTOL * mag + MODEL_ATOL);
            if (ratio > worst) worst = ratio;
            if (mag > 10 * MODEL_ATOL) meaningful++;
            checked++;
            printf("    %-9s [%4zu] analytic % .6e numeric % .6e |d| %.1e rel %.1e\n",
                   tens[ti].name, i - lo, ana, num, diff, mag > 0 ? diff / mag : 0.0);
            CHECK_MSG(diff <= MODEL_RTOL * mag + MODEL_ATOL,
                      "model %s[%zu]: analytic %.6e numeric %.6e", tens[ti].name, i - lo, ana, num);
        }
    }
    printf("  model: %d parameters checked, %d with |grad| > %.0e, worst |d| / bound %.2f\n",
           checked, meaningful, 10 * MODEL_ATOL, worst);
    CHECK(checked == nt * MODEL_PER_TENSOR);
    CHECK_MSG(meaningful >= checked * 3 / 4, "only %d of %d gradients are above the floor",
              meaningful, checked);
    /* gradients of what the loss cannot see are exactly 0: the padding rows of wte (and of an
     * untied lm_head), wpe >= T */
    int unseen_zero = 1;
    for (int ti = 0; ti < nt; ti++) {
        size_t lo = 0, hi = 0;
        if (!strcmp(tens[ti].name, "wte") || !strcmp(tens[ti].name, "lm_head")) {
            lo = (size_t)cfg.V * cfg.C;
            hi = (size_t)cfg.Vp * cfg.C;
        } else if (!strcmp(tens[ti].name, "wpe")) {
            lo = (size_t)T * cfg.C;
            hi = (size_t)cfg.maxT * cfg.C;
        }
        for (size_t i = lo; i < hi; i++)
            if (grads[tens[ti].offset + i] != 0.0f) unseen_zero = 0;
    }
    CHECK_MSG(unseen_zero, "padding rows of wte / lm_head or wpe rows >= T have nonzero gradients");

    free(grads);
    hpt_model_free(model);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    for (int c = 0; c < HPT_CAT_COUNT; c++) CHECK(st.live_bytes[HPT_TIER_DEVICE][c] == 0);
    hpt_mem_destroy(mem);
}

static void check_kernels(void);

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_gradcheck");
    if (!a) return 2;
    hpt_set_threads(2);
    hpt_rng_seed(&rng, 20240607);
    if (t_arch_first(a)) check_kernels();
    printf("whole model: four-point differences of the fp32 loss (h=%.0e), "
           "|d| <= %.0e max(|a|,|n|) + %.0e\n", (double)MODEL_H, MODEL_RTOL, MODEL_ATOL);
    /* every variant of the case, at C = 8, NH = 2, V = 11 (Vp 16): llama's grouped-query
     * attention (NKV 1), rotary embeddings with Llama 3 scaling (the two frequencies in the
     * blended and the scaled bands), SwiGLU; untied, and tied with biases */
    for (int v = 0; v < a->n_variants; v++) {
        char shape[T_SHAPE_MAX + 8];
        t_arch_shape(a, shape, 2, 8, 2, 11, 8, v);
        strcat(shape, ",Vp=16");
        hpt_model_config cfg;
        CHECK_OK(hpt_model_config_parse(shape, &cfg));
        check_model(&cfg, shape, 0);
    }
    { /* the loss on targets only, the case's first variant (after the others: their draws stay) */
        char shape[T_SHAPE_MAX + 8];
        t_arch_shape(a, shape, 2, 8, 2, 11, 8, 0);
        strcat(shape, ",Vp=16");
        hpt_model_config cfg;
        CHECK_OK(hpt_model_config_parse(shape, &cfg));
        check_model(&cfg, shape, 1);
    }
    return t_done(t_arch_label(a, "test_gradcheck"));
}

/* the kernels, AdamW, and the kernels' threaded paths (they name no architecture) */
static void check_kernels(void) {
    printf("kernels: fp32 backward vs double central differences (h=%.0e), "
           "bounds fwd %.0e grad %.0e\n", FD_H, FWD_BOUND, GRAD_BOUND);
    check_matmul(5, 7, 6, 1, 0);
    check_matmul(5, 7, 6, 0, 1);
    check_matmul(4, 9, 13, 1, 1);
    check_matmul(3, 5, 70, 1, 0); /* dbias's column blocks of 64: a full and a partial one */
    check_matmul(1, 1, 1, 1, 1);

    check_layernorm(6, 10);
    check_layernorm(3, 40); /* dw/db's channel blocks of 32: a full and a partial one */
    check_layernorm(2, 3);

    check_attention(2, 7, 12, 3); /* T not a multiple of 8 */
    check_attention(1, 1, 8, 2);  /* T = 1 */
    check_attention(1, 9, 16, 2);
    check_attention(2, 8, 6, 1);

    check_gelu(37);

    check_encoder(2, 5, 6, 9, 7);
    check_encoder(2, 3, 20, 5, 4); /* dwte's channel blocks of 16: a full and a partial one */

    check_crossentropy(6, 11, 16);
    check_crossentropy(3, 7, 7); /* no padding */

    check_adamw(13, 5, 1e-2f, 0.1f, 0.7f);
    check_adamw(9, 3, 3e-4f, 0.0f, 1.0f);

    /* Shapes past K_PAR_MIN, where the kernels split their loops over threads (the small
     * ones above run on one): sampled differences. Each states the size it must exceed. */
    printf("kernels on shapes that run multi-threaded (K_PAR_MIN %d), * = %d sampled elements\n",
           K_PAR_MIN, FD_SAMPLE);
    CHECK(300 * 110 >= K_PAR_MIN && 456 * 72 >= K_PAR_MIN && 4 * 64 * 128 >= K_PAR_MIN);
    CHECK(2 * 33 * 33 * 64 >= 4 * K_PAR_MIN && 64 * 600 >= K_PAR_MIN && 33000 >= K_PAR_MIN);
    check_matmul(300, 2, 110, 1, 1);
    check_layernorm(456, 72);
    check_attention(2, 33, 64, 4);
    check_gelu(33000);
    check_encoder(4, 64, 128, 6, 70);
    check_crossentropy(64, 600, 640);

}
