/* calibrate_arch.c: each architecture's own block rates for the cost model (cost.c), measured
 * from its op table (model/arch.h's hpt_arch_plan), and their part of the calibration file: one
 * object per architecture, named after it (none for one without a table: the reference block).
 * At the table's shapes: the block's GEMMs one after the other at each calibration width and
 * the reference's row counts (FLOPs over summed time, forward and backward); its attention,
 * flash and plain, at B 1, T 128 and the last width's heads (2 C (T+1) FLOPs per token); each
 * pointwise op in ns per element of its per_token width over 512 rows of the last width; for
 * --matmul bf16 the GEMMs through matmul_*_bf16 and the bf16 flash pair (optional in the file).
 * Each the best of reps repetitions of at least min_s seconds (calibrate.c's). docs/planner.md.
 * Invariants: library code, nothing printed; buffers freed on every path; an absent or partial
 * object loads as C[0] = 0 (the reference rates serve: hpt_cost.arch_rates), a partial bf16
 * part as bf16_C0 = 0 (cost.c scales the fp32 own rates by the reference's bf16 ratio). */
#include "core/core.h"
#include "kernels/backend.h"
#include "model/arch.h"
#include "plan/calibrate_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The best over reps repetitions of one run of body, each repetition repeating it for at
 * least min_s seconds. */
#define ARCH_BEST(reps, min_s, best, body)                                 \
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

static void cal_fill(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] = s * (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f * s;
}

static int rows_of(const hpt_calibration *c, int r) {
    return c->gemm_rows[r] > 0 ? c->gemm_rows[r] : (r ? 256 : 64);
}

/* ws NULL: the fp32 rates into a->gemm_gflops; else the bf16 ops' into a->gemm_bf16_gflops */
static hpt_status arch_gemm(const hpt_backend *be, const hpt_arch_plan *p, int reps, double min_s,
                            const hpt_calibration *c, void *ws, hpt_cal_arch *a) {
    int64_t sh[HPT_CAL_ARCH_WIDTHS][HPT_ARCH_MAX_GEMMS][2];
    int ns[HPT_CAL_ARCH_WIDTHS];
    int64_t NMAX = 0, WMAX = 0, XMAX = 0;
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++) NMAX = rows_of(c, r) > NMAX ? rows_of(c, r) : NMAX;
    for (int i = 0; i < p->n_cal; i++) {
        ns[i] = p->gemms(&p->cal[i], sh[i]);
        for (int k = 0; k < ns[i]; k++) {
            int64_t in = sh[i][k][0], out = sh[i][k][1], wide = in > out ? in : out;
            WMAX = in * out > WMAX ? in * out : WMAX;
            XMAX = NMAX * wide > XMAX ? NMAX * wide : XMAX;
        }
    }
    float *inp = malloc((size_t)XMAX * 4), *w = malloc((size_t)WMAX * 4);
    float *out = malloc((size_t)XMAX * 4), *dinp = malloc((size_t)XMAX * 4);
    float *dw = calloc((size_t)WMAX, 4);
    hpt_status s = HPT_OK;
    if (!inp || !w || !out || !dinp || !dw) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for an architecture's block GEMMs");
        goto done;
    }
    cal_fill(inp, (size_t)XMAX, 1), cal_fill(w, (size_t)WMAX, 0.01f), cal_fill(out, (size_t)XMAX, 0.1f);
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++) {
        int64_t N = rows_of(c, r);
        for (int i = 0; i < p->n_cal; i++) {
            double f = 0, tf, tb;
            for (int k = 0; k < ns[i]; k++) {
                f += 2.0 * (double)(N * sh[i][k][0] * sh[i][k][1]);
                hpt_cal_mm_fwd(be, ws, out, inp, w, N, sh[i][k][0], sh[i][k][1]); /* warm */
            }
            ARCH_BEST(reps, min_s, tf, for (int k = 0; k < ns[i]; k++)
                                           hpt_cal_mm_fwd(be, ws, out, inp, w, N, sh[i][k][0], sh[i][k][1]));
            ARCH_BEST(reps, min_s, tb, for (int k = 0; k < ns[i]; k++)
                                           hpt_cal_mm_bwd(be, ws, dinp, dw, out, inp, w, N, sh[i][k][0], sh[i][k][1]));
            double(*g)[2] = ws ? a->gemm_bf16_gflops[r] : a->gemm_gflops[r];
            g[i][0] = f / tf / 1e9;
            g[i][1] = 2.0 * f / tb / 1e9;
        }
    }
    if (!ws)
        for (int i = 0; i < p->n_cal; i++) a->C[i] = p->cal[i].C, a->FF[i] = p->cal[i].FF;
done:
    free(inp), free(w), free(out), free(dinp), free(dw);
    return s;
}

/* The attention at B 1, T 128 and the last calibration width's heads. */
static hpt_status arch_attention(const hpt_backend *be, const hpt_model_config *m, int reps,
                                 double min_s, hpt_cal_arch *a) {
    const int B = 1, T = 128, C = m->C, NH = m->NH, NKV = m->NKV, hd = C / NH;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * hd, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T, nscr = natt + 4 * (size_t)B * T * 3 * C;
    float *qkv = malloc(nqkv * 4), *out = malloc(nout * 4), *att = malloc(natt * 4);
    float *lse = malloc((size_t)B * NH * T * 4), *dqkv = calloc(nqkv, 4);
    float *scr = calloc(nscr, 4), *dout = malloc(nout * 4);
    hpt_status s = HPT_OK;
    if (!qkv || !out || !att || !lse || !dqkv || !scr || !dout) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for an architecture's attention");
        goto done;
    }
    cal_fill(qkv, nqkv, 1), cal_fill(dout, nout, 0.1f);
    double f = 2.0 * C * (T + 1.0) * B * T, t;
    be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NKV);
    ARCH_BEST(reps, min_s, t, be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NKV));
    a->attn_gflops[0][0] = f / t / 1e9;
    ARCH_BEST(reps, min_s, t, be->flash_attention_backward(dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NKV));
    a->attn_gflops[0][1] = 2 * f / t / 1e9;
    be->attention_forward(out, att, qkv, B, T, C, NH, NKV);
    ARCH_BEST(reps, min_s, t, be->attention_forward(out, att, qkv, B, T, C, NH, NKV));
    a->attn_gflops[1][0] = f / t / 1e9;
    ARCH_BEST(reps, min_s, t, be->attention_backward(dqkv, scr, dout, qkv, att, B, T, C, NH, NKV));
    a->attn_gflops[1][1] = 2 * f / t / 1e9;
    /* the bf16 flash pair (--matmul bf16), where the backend has it for these heads; else its
     * rates are the fp32 pair's (the model refuses such heads with --matmul bf16) */
    a->flash_bf16_gflops[0] = a->attn_gflops[0][0], a->flash_bf16_gflops[1] = a->attn_gflops[0][1];
    if (be->flash_attention_forward_bf16 && be->flash_attention_bf16_heads(hd)) {
        be->flash_attention_forward_bf16(out, lse, qkv, B, T, C, NH, NKV, NULL, 0);
        ARCH_BEST(reps, min_s, t, be->flash_attention_forward_bf16(out, lse, qkv, B, T, C, NH, NKV, NULL, 0));
        a->flash_bf16_gflops[0] = f / t / 1e9;
        ARCH_BEST(reps, min_s, t, be->flash_attention_backward_bf16(dqkv, scr, dout, qkv, out, lse, B, T, C,
                                                                    NH, NKV, NULL, 0));
        a->flash_bf16_gflops[1] = 2 * f / t / 1e9;
    }
done:
    free(qkv), free(out), free(att), free(lse), free(dqkv), free(scr), free(dout);
    return s;
}

/* Each pointwise op over 512 rows of the last calibration width, ns per element. */
static hpt_status arch_ops(const hpt_backend *be, const hpt_arch_plan *p, int reps, double min_s,
                           hpt_cal_arch *a) {
    const int N = 512;
    const hpt_model_config *m = &p->cal[p->n_cal - 1];
    for (int k = 0; k < p->n_ops; k++) {
        const hpt_arch_op *op = &p->ops[k];
        size_t n = op->floats(m, N);
        float *x = malloc(n * 4);
        if (!x) return hpt_fail(HPT_ERR_OOM, "calibration: no memory for the %s kernels", op->key);
        cal_fill(x, n, 1);
        if (op->fill) op->fill(m, N, x);
        double t, per = 1e9 / ((double)N * op->per_token(m));
        ARCH_BEST(reps, min_s, t, op->run(be, m, N, 0, x));
        a->op_ns[k][0] = t * per;
        ARCH_BEST(reps, min_s, t, op->run(be, m, N, 1, x));
        a->op_ns[k][1] = t * per;
        free(x);
    }
    return HPT_OK;
}

hpt_status hpt_cal_measure_arch(const hpt_backend *be, int reps, int bf16_reps, double min_s,
                                hpt_calibration *c) {
    for (int id = 0; id < hpt_arch_count() && id < HPT_CAL_ARCHS; id++) {
        const hpt_arch_plan *p = hpt_arch_at(id)->plan;
        if (!p || p->n_cal < 1) continue;
        hpt_cal_arch *a = &c->arch[id];
        HPT_CHECK(arch_gemm(be, p, reps, min_s, c, NULL, a));
        HPT_CHECK(arch_attention(be, &p->cal[p->n_cal - 1], reps, min_s, a));
        HPT_CHECK(arch_ops(be, p, reps, min_s, a));
        if (bf16_reps > 0 && be->matmul_forward_bf16 && be->matmul_backward_bf16) { /* --matmul bf16's */
            void *ws = NULL;
            if (posix_memalign(&ws, 4096, HPT_MM_BF16_WS_BYTES))
                return hpt_fail(HPT_ERR_OOM, "calibration: no memory for the bf16 GEMMs' workspace");
            hpt_status s = arch_gemm(be, p, bf16_reps, min_s, c, ws, a);
            free(ws);
            HPT_CHECK(s);
            a->bf16_C0 = a->C[0];
        }
    }
    return HPT_OK;
}

/* ---- the file: {"<name>": {"gemm": [{rows, C, FF, fwd_gflops, bwd_gflops}, ...] (rows-major),
 * "<attn_key>_flash_fwd_gflops", ..._bwd, "<attn_key>_plain_fwd_gflops", ..._bwd,
 * "<op>_fwd_ns", "<op>_bwd_ns" for each op} ---- */

static const char *const k_attn[2][2] = {{"flash_fwd", "flash_bwd"}, {"plain_fwd", "plain_bwd"}};

void hpt_cal_arch_save(cJSON *j, const hpt_calibration *c) {
    char key[64];
    for (int id = 0; id < hpt_arch_count() && id < HPT_CAL_ARCHS; id++) {
        const hpt_arch *A = hpt_arch_at(id);
        const hpt_arch_plan *p = A->plan;
        const hpt_cal_arch *a = &c->arch[id];
        if (!p || a->C[0] <= 0) continue;
        cJSON *l = cJSON_AddObjectToObject(j, A->name);
        cJSON *g = cJSON_AddArrayToObject(l, "gemm");
        for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++)
            for (int i = 0; i < p->n_cal; i++) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "rows", c->gemm_rows[r]);
                cJSON_AddNumberToObject(e, "C", a->C[i]);
                cJSON_AddNumberToObject(e, "FF", a->FF[i]);
                cJSON_AddNumberToObject(e, "fwd_gflops", a->gemm_gflops[r][i][0]);
                cJSON_AddNumberToObject(e, "bwd_gflops", a->gemm_gflops[r][i][1]);
                cJSON_AddItemToArray(g, e);
            }
        for (int k = 0; k < 2; k++)
            for (int b = 0; b < 2; b++) {
                snprintf(key, sizeof key, "%s_%s_gflops", p->attn_key, k_attn[k][b]);
                cJSON_AddNumberToObject(l, key, a->attn_gflops[k][b]);
            }
        if (a->bf16_C0 > 0) { /* --matmul bf16's: "gemm_bf16" as "gemm", the bf16 flash pair */
            cJSON *gb = cJSON_AddArrayToObject(l, "gemm_bf16");
            for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++)
                for (int i = 0; i < p->n_cal; i++) {
                    cJSON *e = cJSON_CreateObject();
                    cJSON_AddNumberToObject(e, "rows", c->gemm_rows[r]);
                    cJSON_AddNumberToObject(e, "C", a->C[i]);
                    cJSON_AddNumberToObject(e, "fwd_gflops", a->gemm_bf16_gflops[r][i][0]);
                    cJSON_AddNumberToObject(e, "bwd_gflops", a->gemm_bf16_gflops[r][i][1]);
                    cJSON_AddItemToArray(gb, e);
                }
            for (int b = 0; b < 2; b++) {
                snprintf(key, sizeof key, "%s_flash_bf16_%s_gflops", p->attn_key, b ? "bwd" : "fwd");
                cJSON_AddNumberToObject(l, key, a->flash_bf16_gflops[b]);
            }
        }
        for (int k = 0; k < p->n_ops; k++)
            for (int b = 0; b < 2; b++) {
                snprintf(key, sizeof key, "%s_%s_ns", p->ops[k].key, b ? "bwd" : "fwd");
                cJSON_AddNumberToObject(l, key, a->op_ns[k][b]);
            }
    }
}

static int pos_num(const cJSON *j, const char *key, double *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble > 0)) return 0;
    *out = x->valuedouble;
    return 1;
}

/* One architecture's object into t (all or nothing: 1 when whole). */
static int load_one(const cJSON *l, const hpt_arch_plan *p, const hpt_calibration *c, hpt_cal_arch *t) {
    char key[64];
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(l, "gemm");
    int ok = cJSON_IsArray(g) && cJSON_GetArraySize(g) == HPT_CAL_GEMM_ROWS * p->n_cal;
    for (int r = 0; ok && r < HPT_CAL_GEMM_ROWS; r++)
        for (int i = 0; ok && i < p->n_cal; i++) {
            const cJSON *e = cJSON_GetArrayItem(g, r * p->n_cal + i);
            double rows = 0, C = 0, FF = 0;
            ok = pos_num(e, "rows", &rows) && (int)rows == c->gemm_rows[r] && pos_num(e, "C", &C) &&
                 pos_num(e, "FF", &FF) && pos_num(e, "fwd_gflops", &t->gemm_gflops[r][i][0]) &&
                 pos_num(e, "bwd_gflops", &t->gemm_gflops[r][i][1]);
            if (ok && r == 0) t->C[i] = (int)C, t->FF[i] = (int)FF;
            ok = ok && (int)C == t->C[i] && (i == 0 || t->C[i] > t->C[i - 1]);
        }
    for (int k = 0; ok && k < 2; k++)
        for (int b = 0; ok && b < 2; b++) {
            snprintf(key, sizeof key, "%s_%s_gflops", p->attn_key, k_attn[k][b]);
            ok = pos_num(l, key, &t->attn_gflops[k][b]);
        }
    for (int k = 0; ok && k < p->n_ops; k++)
        for (int b = 0; ok && b < 2; b++) {
            snprintf(key, sizeof key, "%s_%s_ns", p->ops[k].key, b ? "bwd" : "fwd");
            ok = pos_num(l, key, &t->op_ns[k][b]);
        }
    /* --matmul bf16's (optional, all or nothing: absent or partial, bf16_C0 stays 0) */
    const cJSON *gb = cJSON_GetObjectItemCaseSensitive(l, "gemm_bf16");
    int okb = ok && cJSON_IsArray(gb) && cJSON_GetArraySize(gb) == HPT_CAL_GEMM_ROWS * p->n_cal;
    double gbf[HPT_CAL_GEMM_ROWS][HPT_CAL_ARCH_WIDTHS][2] = {{{0}}}, fb[2] = {0, 0};
    for (int r = 0; okb && r < HPT_CAL_GEMM_ROWS; r++)
        for (int i = 0; okb && i < p->n_cal; i++) {
            const cJSON *e = cJSON_GetArrayItem(gb, r * p->n_cal + i);
            double rows = 0, C = 0;
            okb = pos_num(e, "rows", &rows) && (int)rows == c->gemm_rows[r] && pos_num(e, "C", &C) &&
                  (int)C == t->C[i] && pos_num(e, "fwd_gflops", &gbf[r][i][0]) &&
                  pos_num(e, "bwd_gflops", &gbf[r][i][1]);
        }
    for (int b = 0; okb && b < 2; b++) {
        snprintf(key, sizeof key, "%s_flash_bf16_%s_gflops", p->attn_key, b ? "bwd" : "fwd");
        okb = pos_num(l, key, &fb[b]);
    }
    t->bf16_C0 = 0;
    if (okb) {
        memcpy(t->gemm_bf16_gflops, gbf, sizeof gbf);
        memcpy(t->flash_bf16_gflops, fb, sizeof fb);
        t->bf16_C0 = t->C[0];
    }
    return ok;
}

void hpt_cal_arch_load(const cJSON *j, hpt_calibration *c) {
    for (int id = 0; id < hpt_arch_count() && id < HPT_CAL_ARCHS; id++) {
        const hpt_arch *A = hpt_arch_at(id);
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(j, A->name);
        hpt_cal_arch t = c->arch[id];
        if (A->plan && A->plan->n_cal >= 1 && cJSON_IsObject(l) && load_one(l, A->plan, c, &t))
            c->arch[id] = t; /* a partial object is ignored */
    }
}
