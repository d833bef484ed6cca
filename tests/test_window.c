/* test_window.c: sliding-window attention (Mistral's sliding_window, Gemma 3's local layers):
 * query t sees keys j with t - j < window only (window keys, its own included), besides the
 * causal mask and, packed, its example's (kernels/backend.h's attention_forward_seg).
 *
 * The CPU kernels, plain and flash, forward (out, lse) and backward (dqkv) against a naive
 * masked reference in double (the softmax over the visible keys, its gradient written out),
 * within BOUND = 1e-5 norm-wise relative, and flash against plain: windows of 1, 2, a few keys,
 * around the 64-key tile (63, 64, 65, 70), T and above; causal rows and packed rows (examples of
 * random lengths); grouped-query and not; odd head widths and T across the tiles. Plain's
 * probabilities are exactly 0 outside each row's keys and sum to 1; a window >= T gives the
 * bits of no window (0); the bits do not depend on the thread count. */
#include "testlib.h"

#include "core/core.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BOUND 1e-5

static hpt_rng rng;

/* the first key query t of row b sees, written out apart from the kernels' k_first_key */
static int first_key(const int32_t *pos, int window, int b, int T, int t) {
    int s = 0;
    if (pos) s = t - pos[(size_t)b * T + t];
    if (window > 0 && t - (window - 1) > s) s = t - (window - 1);
    return s;
}

/* out (B,T,C), lse (B,NH,T) and dqkv (as qkv) of the masked attention, in double: for each row
 * s_j = q . k_j / sqrt(hd) over its keys, p = softmax(s), o = sum_j p_j v_j; backward dv_j +=
 * p_j dO, dp_j = dO . v_j, ds_j = p_j (dp_j - sum_i p_i dp_i), dq += ds_j k_j / sqrt(hd),
 * dk_j += ds_j q / sqrt(hd) */
static void reference(double *out, double *lse, double *dqkv, const float *qkv_f,
                      const float *dout_f, int B, int T, int NH, int NKV, int hd,
                      const int32_t *pos, int window) {
    const int C = NH * hd, W = C + 2 * NKV * hd, G = NH / NKV;
    const double sc = 1.0 / sqrt((double)hd);
    double *s = malloc((size_t)T * sizeof(double)), *dp = malloc((size_t)T * sizeof(double));
    const size_t nq = (size_t)B * T * W, no = (size_t)B * T * C;
    double *qkv = malloc(nq * sizeof(double)), *dout = malloc(no * sizeof(double));
    for (size_t i = 0; i < nq; i++) qkv[i] = qkv_f[i];
    for (size_t i = 0; i < no; i++) dout[i] = dout_f[i];
    memset(dqkv, 0, (size_t)B * T * W * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const int s0 = first_key(pos, window, b, T, t), kh = (h / G) * hd;
                const double *q = qkv + ((size_t)b * T + t) * W + h * hd;
                const double *d = dout + ((size_t)b * T + t) * C + h * hd;
                double mx = -INFINITY, z = 0.0;
                for (int j = s0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * W + C + kh;
                    double a = 0.0;
                    for (int i = 0; i < hd; i++) a += q[i] * k[i];
                    s[j] = a * sc;
                    mx = fmax(mx, s[j]);
                }
                for (int j = s0; j <= t; j++) z += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + t] = mx + log(z);
                double *o = out + ((size_t)b * T + t) * C + h * hd, D = 0.0;
                for (int i = 0; i < hd; i++) o[i] = 0.0;
                for (int j = s0; j <= t; j++) {
                    const double *v = qkv + ((size_t)b * T + j) * W + C + NKV * hd + kh;
                    double *dv = dqkv + ((size_t)b * T + j) * W + C + NKV * hd + kh;
                    s[j] = exp(s[j] - mx) / z; /* p_j from here on */
                    dp[j] = 0.0;
                    for (int i = 0; i < hd; i++) {
                        o[i] += s[j] * v[i];
                        dv[i] += s[j] * d[i];
                        dp[j] += d[i] * v[i];
                    }
                    D += s[j] * dp[j];
                }
                double *dq = dqkv + ((size_t)b * T + t) * W + h * hd;
                for (int j = s0; j <= t; j++) {
                    const double ds = s[j] * (dp[j] - D) * sc;
                    const double *k = qkv + ((size_t)b * T + j) * W + C + kh;
                    double *dk = dqkv + ((size_t)b * T + j) * W + C + kh;
                    for (int i = 0; i < hd; i++) dq[i] += ds * k[i], dk[i] += ds * q[i];
                }
            }
    free(s), free(dp), free(qkv), free(dout);
}

/* ||a - r|| / ||r|| with r in double */
static double rel_err_d(const float *a, const double *r, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - r[i];
        num += d * d, den += r[i] * r[i];
    }
    return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static void kern(int flash, float *out, float *st, float *dqkv, float *scr, const float *dout,
                 const float *qkv, int B, int T, int NH, int NKV, int hd, const int32_t *pos,
                 int window) {
    const int C = NH * hd;
    if (flash) {
        k_flash_attention_forward_seg(out, st, qkv, B, T, C, NH, NKV, pos, window);
        k_flash_attention_backward_seg(dqkv, scr, dout, qkv, out, st, B, T, C, NH, NKV, pos,
                                       window);
    } else {
        k_attention_forward_seg(out, st, qkv, B, T, C, NH, NKV, pos, window);
        k_attention_backward_seg(dqkv, scr, dout, qkv, st, B, T, C, NH, NKV, pos, window);
    }
}

/* rows of examples of random lengths (1, a few, across the tiles) */
static void cut_rows(int B, int T, int32_t *pos) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T;) {
            int r = (int)(hpt_rng_uniform(&rng) * 3);
            int len = r == 0 ? 1 : r == 1 ? 2 + (int)(hpt_rng_uniform(&rng) * 6)
                                          : 1 + (int)(hpt_rng_uniform(&rng) * 120);
            if (len > T - t) len = T - t;
            for (int i = 0; i < len; i++) pos[(size_t)b * T + t + i] = i;
            t += len;
        }
}

static void check(int B, int T, int NH, int NKV, int hd, int packed, int window, double worst[3]) {
    const int C = NH * hd, W = C + 2 * NKV * hd;
    const size_t BT = (size_t)B * T, nq = BT * W, no = BT * C, nl = (size_t)B * NH * T;
    float *qkv = malloc(nq * 4), *dout = malloc(no * 4), *scr = malloc(nl * 4);
    for (size_t i = 0; i < nq; i++) qkv[i] = 4.0f * hpt_rng_uniform(&rng) - 2.0f; /* [-2, 2) */
    for (size_t i = 0; i < no; i++) dout[i] = 2.0f * hpt_rng_uniform(&rng) - 1.0f;
    int32_t *pos = NULL;
    if (packed) pos = malloc(BT * sizeof(int32_t)), cut_rows(B, T, pos);
    double *ro = malloc(no * 8), *rl = malloc(nl * 8), *rd = malloc(nq * 8);
    reference(ro, rl, rd, qkv, dout, B, T, NH, NKV, hd, pos, window);
    float *out[2], *dq[2], *st[2];
    for (int f = 0; f < 2; f++) {
        out[f] = malloc(no * 4), dq[f] = malloc(nq * 4);
        st[f] = malloc((f ? nl : nl * T) * 4);
        for (size_t i = 0; i < nq; i++) dq[f][i] = NAN; /* overwritten, not accumulated into */
        kern(f, out[f], st[f], dq[f], scr, dout, qkv, B, T, NH, NKV, hd, pos, window);
        const double eo = rel_err_d(out[f], ro, no), ed = rel_err_d(dq[f], rd, nq);
        double el = 0.0;
        if (f) el = rel_err_d(st[f], rl, nl);
        CHECK_MSG(eo <= BOUND && ed <= BOUND && el <= BOUND, "%s B=%d T=%d NH=%d NKV=%d hd=%d %s "
                  "window %d: out %.3g dqkv %.3g lse %.3g", f ? "flash" : "plain", B, T, NH, NKV,
                  hd, packed ? "packed" : "causal", window, eo, ed, el);
        worst[0] = fmax(worst[0], fmax(eo, el)), worst[1] = fmax(worst[1], ed);
    }
    const double fo = t_rel_err(out[1], out[0], no), fd = t_rel_err(dq[1], dq[0], nq);
    CHECK_MSG(fo <= BOUND && fd <= BOUND, "flash vs plain window %d: %.3g %.3g", window, fo, fd);
    worst[2] = fmax(worst[2], fmax(fo, fd));
    /* plain's probabilities: 0 outside each row's keys, rows summing to 1 */
    int leak = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *a = st[0] + (((size_t)b * NH + h) * T + t) * T;
                const int s0 = first_key(pos, window, b, T, t);
                double sum = 0.0;
                for (int j = 0; j < T; j++) {
                    if ((j < s0 || j > t) && a[j] != 0.0f) leak++;
                    sum += (double)a[j];
                }
                if (fabs(sum - 1.0) > 1e-5) leak++;
            }
    CHECK_MSG(leak == 0, "window %d: %d probabilities outside a row's keys (or rows not 1)", window,
              leak);
    /* a window covering every row: the bits of no window; and the bits of one thread count */
    float *o3 = malloc(no * 4), *d3 = malloc(nq * 4);
    for (int f = 0; f < 2; f++) {
        if (window >= T) {
            kern(f, o3, st[f], d3, scr, dout, qkv, B, T, NH, NKV, hd, pos, 0);
            CHECK_MSG(!memcmp(o3, out[f], no * 4) && !memcmp(d3, dq[f], nq * 4),
                      "%s window %d >= T=%d: bits differ from no window", f ? "flash" : "plain",
                      window, T);
        }
        const int threads = hpt_get_threads();
        hpt_set_threads(threads == 1 ? 2 : 1);
        kern(f, o3, st[f], d3, scr, dout, qkv, B, T, NH, NKV, hd, pos, window);
        hpt_set_threads(threads);
        CHECK_MSG(!memcmp(o3, out[f], no * 4) && !memcmp(d3, dq[f], nq * 4),
                  "%s window %d: bits differ with the thread count", f ? "flash" : "plain", window);
    }
    free(o3), free(d3);
    for (int f = 0; f < 2; f++) free(out[f]), free(dq[f]), free(st[f]);
    free(qkv), free(dout), free(scr), free(pos), free(ro), free(rl), free(rd);
}

int main(void) {
    hpt_rng_seed(&rng, 2718);
    double worst[3] = {0};
    printf("sliding-window attention against the masked reference:\n");
    static const int wins[] = {1, 2, 5, 63, 64, 65, 70}; /* and T, T + 11 */
    static const struct { int B, T, NH, NKV, hd; } shapes[] = {
        {2, 37, 4, 2, 20}, {2, 150, 3, 3, 16}, {1, 200, 6, 2, 36}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int T = shapes[s].T;
        for (size_t w = 0; w < sizeof wins / sizeof wins[0] + 2; w++) {
            const int win = w < sizeof wins / sizeof wins[0] ? wins[w] : w % 2 ? T + 11 : T;
            if (win > T + 11 || (w < sizeof wins / sizeof wins[0] && win >= T)) continue;
            for (int packed = 0; packed < 2; packed++)
                check(shapes[s].B, T, shapes[s].NH, shapes[s].NKV, shapes[s].hd, packed, win,
                      worst);
            printf("  B=%d T=%3d NH=%d NKV=%d hd=%d window %3d: causal and packed\n", shapes[s].B,
                   T, shapes[s].NH, shapes[s].NKV, shapes[s].hd, win);
        }
    }
    printf("  worst: out/lse %.2e dqkv %.2e, flash vs plain %.2e (bound %.0e)\n", worst[0],
           worst[1], worst[2], BOUND);
    return t_done("test_window");
}
