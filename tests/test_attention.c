/* test_attention.c: flash attention (kernels/cpu/flash_attention.c) against the plain
 * reference kernel (attention.c), and the whole model with each.
 *
 * Kernel: on short sequences (T = 1, 2, 3: fewer rows and keys than a vector or a register
 * block) and shapes that cross the 64-row/64-key tiles (T = 63, 64, 65 = tile + 1, 100, 130,
 * 200), with B > 1 and NH > 1, the same qkv and dout go to both kernels; out, and dq, dk, dv
 * separately, must agree within BOUND = 1e-5 norm-wise relative (both are fp32 with sums of
 * at most T products; the online softmax rescales partial sums, so equality is to rounding,
 * ~1e-7, not bitwise). A sequence's first row sees one key (P = 1, O = v, so dS = 0): its dq
 * is exactly 0 in both kernels, and with T = 1 every dq and dk is (checked as such: a
 * norm-wise error against plain's exact 0 divides rounding by 1e-30). The output is
 * pre-filled with NaN (every element must be written), and the flash lse is checked against
 * log(sum(exp(s))) in double. Flash is also run twice with 1 and 2 threads: the bits must not
 * change (each output element has one writer).
 *
 * Grouped-query attention (NH query heads over NKV key/value heads, GQA): on T not a multiple
 * of the tile (1, 2, 3, 5 .. 130), hd = 16 and 20 (no multiple of 16 words), NH/NKV = 1, 2,
 * 3, both kernels against an independent double-precision reference (forward, lse, and the
 * analytic backward with dk, dv summed over each group's query heads) within 1e-5 relative to
 * max(1, |ref|) per element; one-key rows' gradients exactly 0, as above; the reference's
 * backward against central differences of its forward (1e-6: both double); the kernels' dqkv
 * against those central differences on sampled elements (1e-4); flash against plain (BOUND
 * norm-wise); both kernels' bits the same with 1 and 2 threads.
 *
 * Model (test_attention ARCH: the architecture's case, arch_cases.h; the kernels above run in
 * the first case's run): a small model trained for a few SGD steps with flash and with plain
 * attention from the same initialisation and batches: each step's loss and the gradients of
 * the last step agree within BOUND. */
#include "testlib.h"

#include "core/core.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BOUND 1e-5

static hpt_rng rng;

static float *rand_f(size_t n, float std) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = std * hpt_rng_normal(&rng);
    return x;
}

/* dq, dk or dv (which = 0, 1, 2) of dqkv (B,T,3C) into dst (B,T,C). */
static void part(float *dst, const float *dqkv, size_t BT, int C, int which) {
    for (size_t r = 0; r < BT; r++) memcpy(dst + r * C, dqkv + r * 3 * C + which * C, (size_t)C * sizeof(float));
}

static void check_kernel(int B, int T, int C, int NH, double *worst) {
    size_t BT = (size_t)B * T;
    float *qkv = rand_f(BT * 3 * C, 1.0f), *dout = rand_f(BT * C, 1.0f);
    float *o1 = malloc(BT * C * sizeof(float)), *o2 = malloc(BT * C * sizeof(float));
    float *att = malloc((size_t)B * NH * T * T * sizeof(float));
    float *lse = malloc((size_t)B * NH * T * sizeof(float));
    float *scr = malloc((size_t)B * NH * T * sizeof(float));
    float *d1 = malloc(BT * 3 * C * sizeof(float)), *d2 = malloc(BT * 3 * C * sizeof(float));
    float *p1 = malloc(BT * C * sizeof(float)), *p2 = malloc(BT * C * sizeof(float));
    for (size_t i = 0; i < BT * C; i++) o1[i] = o2[i] = NAN;
    for (size_t i = 0; i < BT * 3 * C; i++) d1[i] = d2[i] = NAN;
    k_attention_forward(o1, att, qkv, B, T, C, NH, NH);
    k_flash_attention_forward(o2, lse, qkv, B, T, C, NH, NH);
    double e = t_rel_err(o2, o1, BT * C);
    CHECK_MSG(e <= BOUND, "B=%d T=%d C=%d NH=%d: out rel err %.3g", B, T, C, NH, e);
    if (e > worst[0]) worst[0] = e;
    /* lse against double */
    int hs = C / NH;
    double lerr = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, s[1024];
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += (double)q[i] * (double)k[i];
                    s[u] = d / sqrt((double)hs);
                    if (s[u] > mx) mx = s[u];
                }
                double sum = 0;
                for (int u = 0; u <= t; u++) sum += exp(s[u] - mx);
                double ref = mx + log(sum), got = lse[((size_t)b * NH + h) * T + t];
                double r = fabs(got - ref) / (fabs(ref) > 1 ? fabs(ref) : 1);
                if (r > lerr) lerr = r;
            }
    CHECK_MSG(lerr <= BOUND, "B=%d T=%d: lse err %.3g", B, T, lerr);
    k_attention_backward(d1, scr, dout, qkv, att, B, T, C, NH, NH);
    k_flash_attention_backward(d2, scr, dout, qkv, o2, lse, B, T, C, NH, NH);
    /* one key: dS = P (dP - D) = 0 exactly (softmax's Jacobian has zero row sums), so row 0's
     * dq, and with T = 1 dk too, are 0 in both kernels */
    int nz = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < (T == 1 ? 2 * C : C); i++) {
            const size_t k = (size_t)b * T * 3 * C + i;
            nz += d1[k] != 0.0f || d2[k] != 0.0f;
        }
    CHECK_MSG(nz == 0, "B=%d T=%d C=%d NH=%d: %d gradients of one-key rows not 0", B, T, C, NH, nz);
    static const char *nm[3] = {"dq", "dk", "dv"};
    for (int w = 0; w < 3; w++) {
        part(p1, d1, BT, C, w);
        part(p2, d2, BT, C, w);
        double g = t_rel_err(p2, p1, BT * C);
        CHECK_MSG(g <= BOUND, "B=%d T=%d C=%d NH=%d: %s rel err %.3g", B, T, C, NH, nm[w], g);
        if (g > worst[1 + w]) worst[1 + w] = g;
    }
    printf("  B=%d T=%4d C=%3d NH=%d: out %.2e lse %.2e", B, T, C, NH, e, lerr);
    for (int w = 0; w < 3; w++) {
        part(p1, d1, BT, C, w);
        part(p2, d2, BT, C, w);
        printf(" %s %.2e", nm[w], t_rel_err(p2, p1, BT * C));
    }
    printf("\n");
    /* the bits do not depend on the thread count */
    int threads = hpt_get_threads();
    float *o3 = malloc(BT * C * sizeof(float)), *d3 = malloc(BT * 3 * C * sizeof(float));
    hpt_set_threads(threads == 1 ? 2 : 1);
    k_flash_attention_forward(o3, lse, qkv, B, T, C, NH, NH);
    k_flash_attention_backward(d3, scr, dout, qkv, o3, lse, B, T, C, NH, NH);
    hpt_set_threads(threads);
    CHECK(memcmp(o3, o2, BT * C * sizeof(float)) == 0);
    CHECK(memcmp(d3, d2, BT * 3 * C * sizeof(float)) == 0);
    free(o3); free(d3);
    free(qkv); free(dout); free(o1); free(o2); free(att); free(lse); free(scr);
    free(d1); free(d2); free(p1); free(p2);
}

/* ---- grouped-query attention ---- */
typedef struct {
    int B, T, NH, NKV, hd;
} gqa_shape;
static int gqa_width(const gqa_shape *g) { return (g->NH + 2 * g->NKV) * g->hd; }

/* out (B,T,NH*hd), lse (B,NH,T), att (B,NH,T,T) (each may be NULL) from qkv, in double. */
static void gqa_ref_forward(const gqa_shape *g, const double *qkv, double *out, double *lse,
                            double *att) {
    const int W = gqa_width(g), C = g->NH * g->hd, G = g->NH / g->NKV, T = g->T, hd = g->hd;
    double *s = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < g->B; b++)
        for (int h = 0; h < g->NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * W + h * hd;
                double mx = -INFINITY, z = 0.0;
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + ((size_t)b * T + u) * W + C + (h / G) * hd;
                    double d = 0.0;
                    for (int i = 0; i < hd; i++) d += q[i] * k[i];
                    s[u] = d / sqrt((double)hd);
                    mx = fmax(mx, s[u]);
                }
                for (int u = 0; u <= t; u++) z += exp(s[u] - mx);
                if (lse) lse[((size_t)b * g->NH + h) * T + t] = mx + log(z);
                if (att)
                    for (int u = 0; u < T; u++)
                        att[(((size_t)b * g->NH + h) * T + t) * T + u] = u <= t ? exp(s[u] - mx) / z : 0.0;
                if (!out) continue;
                double *o = out + ((size_t)b * T + t) * C + h * hd;
                for (int i = 0; i < hd; i++) o[i] = 0.0;
                for (int u = 0; u <= t; u++) {
                    const double p = exp(s[u] - mx) / z;
                    const double *v = qkv + ((size_t)b * T + u) * W + C + g->NKV * hd + (h / G) * hd;
                    for (int i = 0; i < hd; i++) o[i] += p * v[i];
                }
            }
    free(s);
}

/* dqkv (as qkv) = the gradient of sum(dout * out), analytic, in double: per query head the
 * softmax's backward; the kv head's dk, dv collect every query head of its group. */
static void gqa_ref_backward(const gqa_shape *g, const double *qkv, const double *dout,
                             double *dqkv) {
    const int W = gqa_width(g), C = g->NH * g->hd, G = g->NH / g->NKV, T = g->T, hd = g->hd;
    const size_t n = (size_t)g->B * T * W;
    double *att = malloc((size_t)g->B * g->NH * T * T * sizeof(double));
    double *dp = malloc((size_t)T * sizeof(double));
    gqa_ref_forward(g, qkv, NULL, NULL, att);
    for (size_t i = 0; i < n; i++) dqkv[i] = 0.0;
    const double sc = 1.0 / sqrt((double)hd);
    for (int b = 0; b < g->B; b++)
        for (int h = 0; h < g->NH; h++)
            for (int t = 0; t < T; t++) {
                const double *a = att + (((size_t)b * g->NH + h) * T + t) * T;
                const double *d = dout + ((size_t)b * T + t) * C + h * hd;
                const double *q = qkv + ((size_t)b * T + t) * W + h * hd;
                double *dq = dqkv + ((size_t)b * T + t) * W + h * hd;
                double sum = 0.0;
                for (int u = 0; u <= t; u++) {
                    const double *v = qkv + ((size_t)b * T + u) * W + C + g->NKV * hd + (h / G) * hd;
                    dp[u] = 0.0;
                    for (int i = 0; i < hd; i++) dp[u] += d[i] * v[i];
                    sum += a[u] * dp[u];
                }
                for (int u = 0; u <= t; u++) {
                    const size_t ku = ((size_t)b * T + u) * W + C + (h / G) * hd;
                    const double ds = a[u] * (dp[u] - sum) * sc;
                    for (int i = 0; i < hd; i++) {
                        dq[i] += ds * qkv[ku + i];
                        dqkv[ku + i] += ds * q[i];
                        dqkv[ku + g->NKV * hd + i] += a[u] * d[i];
                    }
                }
            }
    free(att);
    free(dp);
}

typedef struct {
    const gqa_shape *g;
    const double *R;
    double *out;
} gqa_ctx;
static double gqa_loss(const double *qkv, const gqa_ctx *c) {
    gqa_ref_forward(c->g, qkv, c->out, NULL, NULL);
    double L = 0.0;
    for (size_t i = 0; i < (size_t)c->g->B * c->g->T * c->g->NH * c->g->hd; i++) L += c->R[i] * c->out[i];
    return L;
}
static double gqa_fd(double *qkv, size_t i, const gqa_ctx *c) {
    const double h = 1e-5, x = qkv[i];
    qkv[i] = x + h;
    double a = gqa_loss(qkv, c);
    qkv[i] = x - h;
    double b = gqa_loss(qkv, c);
    qkv[i] = x;
    return (a - b) / (2.0 * h);
}

static double max_err(const float *got, const double *ref, size_t n) {
    double e = 0.0;
    for (size_t i = 0; i < n; i++)
        e = fmax(e, isnan(got[i]) ? (double)INFINITY : fabs((double)got[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
    return e;
}

static void check_gqa(int B, int T, int NH, int NKV, int hd) {
    const gqa_shape g = {B, T, NH, NKV, hd};
    const int C = NH * hd, W = gqa_width(&g);
    const size_t nq = (size_t)B * T * W, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    float *qkv = rand_f(nq, 1.0f), *dout = rand_f(no, 1.0f);
    float *o1 = malloc(no * 4), *o2 = malloc(no * 4), *lse = malloc(nl * 4), *scr = malloc(nl * 4);
    float *att = malloc(nl * T * 4), *d1 = malloc(nq * 4), *d2 = malloc(nq * 4);
    double *qd = malloc(nq * 8), *dd = malloc(no * 8), *ro = malloc(no * 8), *rl = malloc(nl * 8);
    double *ra = malloc(nl * T * 8), *rg = malloc(nq * 8);
    for (size_t i = 0; i < nq; i++) qd[i] = qkv[i];
    for (size_t i = 0; i < no; i++) dd[i] = dout[i];
    for (size_t i = 0; i < no; i++) o1[i] = o2[i] = NAN;
    for (size_t i = 0; i < nq; i++) d1[i] = d2[i] = NAN; /* every element must be written */
    gqa_ref_forward(&g, qd, ro, rl, ra);
    gqa_ref_backward(&g, qd, dd, rg);
    k_attention_forward(o1, att, qkv, B, T, C, NH, NKV);
    k_flash_attention_forward(o2, lse, qkv, B, T, C, NH, NKV);
    k_attention_backward(d1, scr, dout, qkv, att, B, T, C, NH, NKV);
    k_flash_attention_backward(d2, scr, dout, qkv, o2, lse, B, T, C, NH, NKV);
    double e[7] = {max_err(o1, ro, no), max_err(att, ra, nl * T), max_err(d1, rg, nq),
                   max_err(o2, ro, no), max_err(lse, rl, nl), max_err(d2, rg, nq), 0.0};
    static const char *nm[6] = {"plain out", "plain att", "plain dqkv", "flash out", "flash lse", "flash dqkv"};
    for (int k = 0; k < 6; k++)
        CHECK_MSG(e[k] <= 1e-5, "GQA B=%d T=%d NH=%d NKV=%d hd=%d: %s err %.3g", B, T, NH, NKV, hd, nm[k], e[k]);
    /* one key (each sequence's row 0): its query heads' dq is exactly 0 in both kernels; with
     * T = 1 the kv heads' dk too */
    int nz = 0;
    for (int b = 0; b < B; b++)
        for (int i = 0; i < (T == 1 ? C + NKV * hd : C); i++) {
            const size_t k = (size_t)b * T * W + i;
            nz += d1[k] != 0.0f || d2[k] != 0.0f;
        }
    CHECK_MSG(nz == 0, "GQA B=%d T=%d NH=%d NKV=%d: %d gradients of one-key rows not 0", B, T, NH,
              NKV, nz);
    /* flash against plain, norm-wise */
    double fo = t_rel_err(o2, o1, no), fg = t_rel_err(d2, d1, nq);
    CHECK_MSG(fo <= BOUND && fg <= BOUND, "GQA flash vs plain: out %.3g dqkv %.3g", fo, fg);
    /* the reference's backward and both kernels' dqkv against central differences of the
     * double forward, on elements spread over the q, k and v parts (all of them when small) */
    gqa_ctx c = {&g, dd, malloc(no * 8)};
    size_t stride = nq <= 2000 ? 1 : nq / 97 + 1;
    double efd_ref = 0.0, efd = 0.0;
    for (size_t i = 0; i < nq; i += stride) {
        double f = gqa_fd(qd, i, &c), den = fmax(1.0, fabs(f));
        efd_ref = fmax(efd_ref, fabs(rg[i] - f) / den);
        efd = fmax(efd, fmax(fabs((double)d1[i] - f), fabs((double)d2[i] - f)) / den);
    }
    CHECK_MSG(efd_ref <= 1e-6, "GQA reference backward vs finite differences %.3g", efd_ref);
    CHECK_MSG(efd <= 1e-4, "GQA kernels vs finite differences %.3g", efd);
    /* the bits do not depend on the thread count */
    int threads = hpt_get_threads();
    float *o3 = malloc(no * 4), *o4 = malloc(no * 4), *att3 = malloc(nl * T * 4);
    float *d3 = malloc(nq * 4), *d4 = malloc(nq * 4);
    hpt_set_threads(threads == 1 ? 2 : 1);
    k_attention_forward(o3, att3, qkv, B, T, C, NH, NKV);
    k_attention_backward(d3, scr, dout, qkv, att3, B, T, C, NH, NKV);
    k_flash_attention_forward(o4, lse, qkv, B, T, C, NH, NKV);
    k_flash_attention_backward(d4, scr, dout, qkv, o4, lse, B, T, C, NH, NKV);
    hpt_set_threads(threads);
    CHECK(!memcmp(o3, o1, no * 4) && !memcmp(d3, d1, nq * 4));
    CHECK(!memcmp(o4, o2, no * 4) && !memcmp(d4, d2, nq * 4));
    printf("  GQA B=%d T=%3d NH=%d NKV=%d hd=%d: plain out %.1e att %.1e dqkv %.1e, flash out %.1e "
           "lse %.1e dqkv %.1e, flash/plain %.1e %.1e, fd %.1e (ref %.1e)\n",
           B, T, NH, NKV, hd, e[0], e[1], e[2], e[3], e[4], e[5], fo, fg, efd, efd_ref);
    free(o3), free(o4), free(att3), free(d3), free(d4), free(c.out);
    free(qkv), free(dout), free(o1), free(o2), free(lse), free(scr), free(att), free(d1), free(d2);
    free(qd), free(dd), free(ro), free(rl), free(ra), free(rg);
}

/* Trains a small model for n steps with the given attention; losses (n) and the last step's
 * gradients (num_params, malloc'd) out. */
static void train(const char *shape, hpt_attention kind, int n, float *losses, float **grads_out,
                  size_t *np_out) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(shape, &cfg));
    hpt_model *m;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &m));
    hpt_model_init_random(m, 7);
    hpt_act_opts ao = hpt_act_defaults();
    ao.attention = kind;
    CHECK_OK(hpt_model_set_act_opts(m, &ao));
    enum { B = 2, T = 80 }; /* T crosses a 64 tile */
    int32_t x[B * T], y[B * T];
    hpt_rng r;
    hpt_rng_seed(&r, 99);
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < B * T; i++) {
            x[i] = (int32_t)(hpt_rng_uniform(&r) * 256) % 256;
            y[i] = (int32_t)(hpt_rng_uniform(&r) * 256) % 256;
        }
        CHECK_OK(hpt_model_forward(m, x, y, B, T, &losses[s]));
        hpt_model_zero_grad(m);
        CHECK_OK(hpt_model_backward(m));
        if (s + 1 < n) { /* plain SGD: the test needs updates, not a particular optimizer */
            float *p = hpt_model_params(m), *g = hpt_model_grads(m);
            for (size_t i = 0; i < hpt_model_num_params(m); i++) p[i] -= 0.1f * g[i];
        }
    }
    size_t np = hpt_model_num_params(m);
    *grads_out = malloc(np * sizeof(float));
    memcpy(*grads_out, hpt_model_grads(m), np * sizeof(float));
    *np_out = np;
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

static void check_kernels(void) {
    hpt_rng_seed(&rng, 1234);
    double worst[4] = {0};
    printf("flash vs plain attention, norm-wise relative errors:\n");
    check_kernel(1, 1, 16, 1, worst);
    check_kernel(2, 1, 32, 2, worst);   /* heads of 16: one AVX-512 vector, two AVX2 ones */
    check_kernel(2, 1, 64, 2, worst);   /* 32 */
    check_kernel(3, 2, 48, 3, worst);
    check_kernel(2, 3, 128, 4, worst);
    check_kernel(2, 3, 192, 2, worst);  /* 96: chunks of the head on every ISA */
    check_kernel(1, 63, 32, 2, worst);
    check_kernel(2, 64, 64, 4, worst);
    check_kernel(2, 65, 64, 4, worst);
    check_kernel(3, 100, 48, 3, worst);
    check_kernel(1, 130, 128, 2, worst);
    check_kernel(2, 200, 64, 4, worst);
    check_kernel(2, 100, 192, 2, worst); /* heads of 96: wider than the compact tiles, two chunks */
    check_kernel(1, 70, 256, 2, worst);  /* heads of 128 */
    printf("  worst: out %.2e dq %.2e dk %.2e dv %.2e (bound %.0e)\n", worst[0], worst[1],
           worst[2], worst[3], BOUND);
    printf("grouped-query attention against double references:\n");
    check_gqa(2, 1, 4, 2, 16);   /* one key */
    check_gqa(3, 2, 6, 3, 20);
    check_gqa(2, 3, 6, 2, 16);
    check_gqa(2, 5, 2, 2, 20);   /* NH/NKV = 1 */
    check_gqa(2, 9, 6, 3, 20);   /* 2 */
    check_gqa(2, 7, 3, 1, 16);   /* 3, one kv head */
    check_gqa(2, 70, 3, 1, 20);  /* across a tile */
    check_gqa(1, 130, 4, 2, 16); /* two tiles and a bit */
    check_gqa(2, 67, 6, 2, 20);
    check_gqa(1, 65, 3, 3, 16);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_attention");
    if (!a) return 2;
    if (t_arch_first(a)) check_kernels();
    enum { STEPS = 4 };
    char shape[T_SHAPE_MAX];
    t_arch_shape(a, shape, 2, 64, 4, 256, 96, 0);
    float lf[STEPS], lp[STEPS];
    float *gf, *gp;
    size_t np;
    printf("  %s\n", shape);
    train(shape, HPT_ATTN_FLASH, STEPS, lf, &gf, &np);
    train(shape, HPT_ATTN_PLAIN, STEPS, lp, &gp, &np);
    double lmax = 0;
    for (int s = 0; s < STEPS; s++) {
        double e = fabs((double)lf[s] - (double)lp[s]) / fabs((double)lp[s]);
        printf("  model step %d: loss flash %.7f plain %.7f rel %.2e\n", s, (double)lf[s], (double)lp[s], e);
        if (e > lmax) lmax = e;
    }
    CHECK_MSG(lmax <= BOUND, "loss rel err %.3g", lmax);
    double ge = t_rel_err(gf, gp, np);
    printf("  model gradients after %d steps: rel err %.2e\n", STEPS, ge);
    CHECK_MSG(ge <= BOUND, "gradient rel err %.3g", ge);
    free(gf);
    free(gp);
    return t_done(t_arch_label(a, "test_attention"));
}
