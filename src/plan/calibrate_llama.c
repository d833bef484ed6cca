/* calibrate_llama.c: a Llama block's own rates for the cost model (cost.c), measured with the
 * backend's Llama kernels, and their part of the calibration file.
 *
 * A Llama block differs from a GPT-2 block in every op that is not a GEMM and in its GEMMs'
 * shapes: RMSNorm instead of LayerNorm, RoPE on q and k, grouped-query attention (NKV < NH
 * key/value heads), and SwiGLU's gate and up projections (one (C, 2FF) GEMM here) with a
 * pointwise silu(gate) * up between them and the down projection. So this measures:
 *   - the block's four GEMMs one after the other, as the block runs them ((rows, C) against
 *     C -> QKV, C -> C, C -> 2FF, and (rows, FF) against FF -> C), at two widths (C = 512 with
 *     FF = 3C, a small Llama's; C = 2048 with FF = 4C, llama3.2-1b's), 64 and 256 rows, their
 *     FLOPs over their summed time, forward and backward (the cost model interpolates in C and
 *     log(rows), as for GPT-2's);
 *   - grouped-query attention (flash and plain, forward and backward) at B = 1, T = 128,
 *     C = 2048, NH = 32, NKV = 8 (llama3.2-1b's heads), counted as the estimator counts
 *     attention (2 C (T+1) FLOPs per token forward);
 *   - the pointwise kernels in ns per element over 512 rows (C = 2048, FF = 8192: past the
 *     caches, as a step's activations are): RMSNorm forward and backward per element of C,
 *     SwiGLU forward and backward per element of FF, RoPE forward and backward per rotated
 *     element of q and k.
 * Each the best of reps repetitions of at least min_s seconds (calibrate.c's convention); the
 * whole takes a few seconds.
 *
 * Invariants: library code, nothing printed; buffers freed on every path; a file without the
 * "llama" object loads with llama_C[0] = 0 (the cost model then uses the GPT-2 block's rates
 * and says so). */
#include "core/core.h"
#include "kernels/backend.h"
#include "plan/calibrate_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The best over reps repetitions of one run of body, each repetition repeating it for at
 * least min_s seconds. */
#define LL_BEST(reps, min_s, best, body)                                   \
    do {                                                                   \
        best = 1e30;                                                       \
        for (int r_ = 0; r_ < (reps); r_++) {                              \
            double t0_ = hpt_now(), dt_;                                   \
            long k_ = 0;                                                   \
            do {                                                           \
                body;                                                      \
                k_++;                                                      \
            } while ((dt_ = hpt_now() - t0_) < (min_s));                   \
            if (dt_ / (double)k_ < best) best = dt_ / (double)k_;          \
        }                                                                  \
    } while (0)

static void ll_fill(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] = s * (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f * s;
}

static const int k_ll_C[2] = {512, 2048}, k_ll_FF[2] = {1536, 8192};

static int64_t ll_qkv(int C) { return C + 2 * (C / 64 / 4) * 64; } /* NH = C/64, NKV = NH/4 */

static hpt_status ll_gemm(const hpt_backend *be, int reps, double min_s, hpt_calibration *c) {
    const int64_t NMAX = 256, CM = 2048, FM = 8192;
    const int64_t WMAX = CM * 2 * FM, XMAX = NMAX * 2 * FM;
    float *inp = malloc((size_t)XMAX * 4), *w = malloc((size_t)WMAX * 4);
    float *out = malloc((size_t)XMAX * 4), *dinp = malloc((size_t)XMAX * 4);
    float *dw = calloc((size_t)WMAX, 4);
    hpt_status s = HPT_OK;
    if (!inp || !w || !out || !dinp || !dw) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for the Llama GEMMs");
        goto done;
    }
    ll_fill(inp, (size_t)XMAX, 1), ll_fill(w, (size_t)WMAX, 0.01f), ll_fill(out, (size_t)XMAX, 0.1f);
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++) {
        int64_t N = c->gemm_rows[r] > 0 ? c->gemm_rows[r] : (r ? 256 : 64);
        for (int i = 0; i < 2; i++) {
            int64_t C = k_ll_C[i], FF = k_ll_FF[i];
            int64_t sh[4][2] = {{C, ll_qkv((int)C)}, {C, C}, {C, 2 * FF}, {FF, C}};
            double f = 0, tf, tb;
            for (int k = 0; k < 4; k++) {
                f += 2.0 * (double)(N * sh[k][0] * sh[k][1]);
                be->matmul_forward(out, inp, w, NULL, N, sh[k][0], sh[k][1], 0); /* warm */
            }
            LL_BEST(reps, min_s, tf, for (int k = 0; k < 4; k++)
                                         be->matmul_forward(out, inp, w, NULL, N, sh[k][0], sh[k][1], 0));
            LL_BEST(reps, min_s, tb, for (int k = 0; k < 4; k++)
                                         be->matmul_backward(dinp, dw, NULL, out, inp, w, N, sh[k][0], sh[k][1], 0));
            c->llama_gemm_gflops[r][i][0] = f / tf / 1e9;
            c->llama_gemm_gflops[r][i][1] = 2.0 * f / tb / 1e9;
        }
    }
    c->llama_C[0] = k_ll_C[0], c->llama_C[1] = k_ll_C[1];
    c->llama_FF[0] = k_ll_FF[0], c->llama_FF[1] = k_ll_FF[1];
done:
    free(inp), free(w), free(out), free(dinp), free(dw);
    return s;
}

/* Grouped-query attention, llama3.2-1b's heads, T = 128. */
static hpt_status ll_attention(const hpt_backend *be, int reps, double min_s, hpt_calibration *c) {
    const int B = 1, T = 128, C = 2048, NH = 32, NKV = 8, hd = C / NH;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * hd, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T, nscr = natt + 4 * (size_t)B * T * 3 * C;
    float *qkv = malloc(nqkv * 4), *out = malloc(nout * 4), *att = malloc(natt * 4);
    float *lse = malloc((size_t)B * NH * T * 4), *dqkv = calloc(nqkv, 4);
    float *scr = calloc(nscr, 4), *dout = malloc(nout * 4);
    hpt_status s = HPT_OK;
    if (!qkv || !out || !att || !lse || !dqkv || !scr || !dout) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for the Llama attention");
        goto done;
    }
    ll_fill(qkv, nqkv, 1), ll_fill(dout, nout, 0.1f);
    double f = 2.0 * C * (T + 1.0) * B * T, t;
    be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NKV);
    LL_BEST(reps, min_s, t, be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NKV));
    c->llama_attn_gflops[0][0] = f / t / 1e9;
    LL_BEST(reps, min_s, t, be->flash_attention_backward(dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NKV));
    c->llama_attn_gflops[0][1] = 2 * f / t / 1e9;
    be->attention_forward(out, att, qkv, B, T, C, NH, NKV);
    LL_BEST(reps, min_s, t, be->attention_forward(out, att, qkv, B, T, C, NH, NKV));
    c->llama_attn_gflops[1][0] = f / t / 1e9;
    LL_BEST(reps, min_s, t, be->attention_backward(dqkv, scr, dout, qkv, att, B, T, C, NH, NKV));
    c->llama_attn_gflops[1][1] = 2 * f / t / 1e9;
done:
    free(qkv), free(out), free(att), free(lse), free(dqkv), free(scr), free(dout);
    return s;
}

/* RMSNorm, SwiGLU and RoPE over 512 rows of llama3.2-1b's widths, ns per element. */
static hpt_status ll_pointwise(const hpt_backend *be, int reps, double min_s, hpt_calibration *c) {
    const int N = 512, C = 2048, FF = 8192, NH = 32, NKV = 8, hd = 64;
    size_t nc = (size_t)N * C, nh = (size_t)N * 2 * FF, nq = (size_t)N * (NH + 2 * NKV) * hd;
    float *x = malloc(nc * 4), *y = malloc(nc * 4), *dx = calloc(nc, 4), *w = malloc((size_t)C * 4);
    float *dw = calloc((size_t)C, 4), *rstd = malloc((size_t)N * 4), *h = malloc(nh * 4);
    float *sw = malloc(nh / 2 * 4), *dh = malloc(nh * 4), *qkv = malloc(nq * 4);
    float *cs = malloc((size_t)N * hd / 2 * 4), *sn = malloc((size_t)N * hd / 2 * 4);
    hpt_status s = HPT_OK;
    if (!x || !y || !dx || !w || !dw || !rstd || !h || !sw || !dh || !qkv || !cs || !sn) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for the Llama pointwise kernels");
        goto done;
    }
    ll_fill(x, nc, 1), ll_fill(w, (size_t)C, 1), ll_fill(h, nh, 2), ll_fill(qkv, nq, 1);
    for (int i = 0; i < N * hd / 2; i++) cs[i] = cosf(0.01f * (float)i), sn[i] = sinf(0.01f * (float)i);
    double t, per_c = 1e9 / (double)nc, per_f = 1e9 / ((double)N * FF);
    double per_r = 1e9 / ((double)N * (NH + NKV) * hd);
    LL_BEST(reps, min_s, t, be->rmsnorm_forward(y, rstd, x, w, N, C, 1e-5f));
    c->llama_pw_ns[0] = t * per_c;
    LL_BEST(reps, min_s, t, be->rmsnorm_backward(dx, dw, y, x, w, rstd, N, C));
    c->llama_pw_ns[1] = t * per_c;
    LL_BEST(reps, min_s, t, be->swiglu_forward(sw, h, N, FF));
    c->llama_pw_ns[2] = t * per_f;
    LL_BEST(reps, min_s, t, be->swiglu_backward(dh, sw, h, N, FF));
    c->llama_pw_ns[3] = t * per_f;
    LL_BEST(reps, min_s, t, be->rope_forward(qkv, cs, sn, 1, N, NH, NKV, hd, 0));
    c->llama_pw_ns[4] = t * per_r;
    LL_BEST(reps, min_s, t, be->rope_backward(qkv, cs, sn, 1, N, NH, NKV, hd, 0));
    c->llama_pw_ns[5] = t * per_r;
done:
    free(x), free(y), free(dx), free(w), free(dw), free(rstd), free(h), free(sw), free(dh);
    free(qkv), free(cs), free(sn);
    return s;
}

hpt_status hpt_cal_measure_llama(const hpt_backend *be, int reps, double min_s, hpt_calibration *c) {
    HPT_CHECK(ll_gemm(be, reps, min_s, c));
    HPT_CHECK(ll_attention(be, reps, min_s, c));
    return ll_pointwise(be, reps, min_s, c);
}

static const char *const k_pw_key[6] = {"rmsnorm_fwd_ns", "rmsnorm_bwd_ns", "swiglu_fwd_ns",
                                        "swiglu_bwd_ns", "rope_fwd_ns", "rope_bwd_ns"};

void hpt_cal_llama_save(cJSON *j, const hpt_calibration *c) {
    if (c->llama_C[0] <= 0) return;
    cJSON *l = cJSON_AddObjectToObject(j, "llama");
    cJSON *g = cJSON_AddArrayToObject(l, "gemm");
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++)
        for (int i = 0; i < 2; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "rows", c->gemm_rows[r]);
            cJSON_AddNumberToObject(e, "C", c->llama_C[i]);
            cJSON_AddNumberToObject(e, "FF", c->llama_FF[i]);
            cJSON_AddNumberToObject(e, "fwd_gflops", c->llama_gemm_gflops[r][i][0]);
            cJSON_AddNumberToObject(e, "bwd_gflops", c->llama_gemm_gflops[r][i][1]);
            cJSON_AddItemToArray(g, e);
        }
    cJSON_AddNumberToObject(l, "gqa_flash_fwd_gflops", c->llama_attn_gflops[0][0]);
    cJSON_AddNumberToObject(l, "gqa_flash_bwd_gflops", c->llama_attn_gflops[0][1]);
    cJSON_AddNumberToObject(l, "gqa_plain_fwd_gflops", c->llama_attn_gflops[1][0]);
    cJSON_AddNumberToObject(l, "gqa_plain_bwd_gflops", c->llama_attn_gflops[1][1]);
    for (int k = 0; k < 6; k++) cJSON_AddNumberToObject(l, k_pw_key[k], c->llama_pw_ns[k]);
}

static int ll_num(const cJSON *j, const char *key, double *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble > 0)) return 0;
    *out = x->valuedouble;
    return 1;
}

void hpt_cal_llama_load(const cJSON *j, hpt_calibration *c) {
    hpt_calibration t = *c;
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, "llama");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(l, "gemm");
    int ok = cJSON_IsArray(g) && cJSON_GetArraySize(g) == HPT_CAL_GEMM_ROWS * 2;
    for (int r = 0; ok && r < HPT_CAL_GEMM_ROWS; r++)
        for (int i = 0; ok && i < 2; i++) {
            const cJSON *e = cJSON_GetArrayItem(g, r * 2 + i);
            double rows = 0, C = 0, FF = 0;
            ok = ll_num(e, "rows", &rows) && (int)rows == c->gemm_rows[r] && ll_num(e, "C", &C) &&
                 ll_num(e, "FF", &FF) && ll_num(e, "fwd_gflops", &t.llama_gemm_gflops[r][i][0]) &&
                 ll_num(e, "bwd_gflops", &t.llama_gemm_gflops[r][i][1]);
            if (ok && r == 0) t.llama_C[i] = (int)C, t.llama_FF[i] = (int)FF;
            ok = ok && (int)C == t.llama_C[i] && (i == 0 || t.llama_C[1] > t.llama_C[0]);
        }
    ok = ok && ll_num(l, "gqa_flash_fwd_gflops", &t.llama_attn_gflops[0][0]) &&
         ll_num(l, "gqa_flash_bwd_gflops", &t.llama_attn_gflops[0][1]) &&
         ll_num(l, "gqa_plain_fwd_gflops", &t.llama_attn_gflops[1][0]) &&
         ll_num(l, "gqa_plain_bwd_gflops", &t.llama_attn_gflops[1][1]);
    for (int k = 0; ok && k < 6; k++) ok = ll_num(l, k_pw_key[k], &t.llama_pw_ns[k]);
    if (ok) *c = t; /* all or nothing: a partial object is ignored */
}
