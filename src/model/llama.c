/* llama.c: the Llama family's maths (Llama 2, Llama 3.x, Mistral) in the architecture
 * interface (model/arch.h), read like llm.c's GPT-2: Hugging Face LlamaForCausalLM's forward
 * and its backward side by side.
 *
 *   x = wte[tokens]                                          (no position table)
 *   per block: h = x + o_proj(attention(rope(q), rope(k), v)) on rmsnorm(x) * ln1w
 *              x = h + down_proj(silu(gate_proj(n)) * up_proj(n)), n = rmsnorm(h) * ln2w
 *   logits = rmsnorm(x) * lnfw @ head^T, head = wte (tied) or lm_head
 *
 * Grouped-query attention, rotary embeddings in place after the qkv projection, the cos/sin
 * tables (consts_fill): docs/llama.md, "The maths". Invariants: gradients accumulate (+=); the
 * shared kv heads are never repeated; every op goes through x->be on the runner's buffers. */
#include "core/core.h"
#include "model/arch.h"
#include "model/gpt2_int.h"
#include "model/llama_int.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- the parameters ---- */

static int64_t hd_of(const hpt_model_config *c) { return c->C / c->NH; }
static int64_t qkv_of(const hpt_model_config *c) { return (c->NH + 2 * (int64_t)c->NKV) * hd_of(c); }

/* The tensors of a configuration in checkpoint order (llama_desc: llama_int.h). */
#define T_(f) #f, offsetof(llama_tensors, f)
static int llama_descs(const hpt_model_config *c, llama_desc d[13]) {
    const int64_t L = c->L, C = c->C, Vp = c->Vp, QKV = qkv_of(c), FF = c->FF;
    const int64_t A = c->NH * hd_of(c);
    const llama_desc all[13] = {
        {T_(wte), 2, {Vp, C}, 0, 1, 1},
        {T_(ln1w), 2, {L, C}, 1, 0, 1},
        {T_(qkvw), 3, {L, QKV, C}, 1, 1, 1},
        {T_(qkvb), 2, {L, QKV}, 1, 0, c->attn_bias},
        {T_(attprojw), 3, {L, C, A}, 1, 1, 1},
        {T_(attprojb), 2, {L, C}, 1, 0, c->attn_bias},
        {T_(ln2w), 2, {L, C}, 1, 0, 1},
        {T_(fcw), 3, {L, 2 * FF, C}, 1, 1, 1},
        {T_(fcb), 2, {L, 2 * FF}, 1, 0, c->mlp_bias},
        {T_(fcprojw), 3, {L, C, FF}, 1, 1, 1},
        {T_(fcprojb), 2, {L, C}, 1, 0, c->mlp_bias},
        {T_(lnfw), 1, {C}, 0, 0, 1},
        {T_(lm_head), 2, {Vp, C}, 0, 1, !c->tied},
    };
    int n = 0;
    for (int i = 0; i < 13; i++)
        if (all[i].present) d[n++] = all[i];
    return n;
}
#undef T_

void llama_describe_descs(const llama_desc *d, int n, const hpt_model_config *cfg,
                          hpt_tensor_table *out) {
    int slice = 0;
    memset(out, 0, sizeof *out);
    out->n = n;
    out->L = cfg->L;
    for (int i = 0; i < n; i++) {
        hpt_tensor_desc *t = &out->t[i];
        snprintf(t->name, sizeof t->name, "%s", d[i].name);
        t->dtype = HPT_DT_F32;
        t->ndim = d[i].ndim;
        for (int k = 0; k < d[i].ndim; k++) t->shape[k] = d[i].shape[k];
        t->role = HPT_ROLE_PARAM;
        t->layer = d[i].stacked ? HPT_LAYER_STACKED : -1;
        t->slice = d[i].stacked ? slice++ : -1;
        t->is_matrix = d[i].matrix;
        t->tied = i == 0 && cfg->tied;
    }
    out->n_slices = slice;
}

static void describe(const hpt_model_config *cfg, hpt_tensor_table *out) {
    llama_desc d[13];
    llama_describe_descs(d, llama_descs(cfg, d), cfg, out);
}

void llama_point_descs(const llama_desc *d, int n, const hpt_model_config *cfg,
                       const hpt_tensor_table *t, float *const *tp, const float *consts,
                       int64_t hd, llama_tensors *p) {
    memset(p, 0, sizeof *p);
    for (int i = 0; i < n && i < t->n; i++) *(float **)((char *)p + d[i].off) = tp[i];
    size_t half = (size_t)cfg->maxT * (size_t)(hd / 2);
    p->rope_cos = consts;
    p->rope_sin = consts ? consts + half : NULL;
}

static void point(const hpt_model_config *cfg, const hpt_tensor_table *t, float *const *tp,
                  const float *consts, void *outv) {
    llama_desc d[13];
    llama_point_descs(d, llama_descs(cfg, d), cfg, t, tp, consts, hd_of(cfg), outv);
}

/* FLOPs per token: the GEMMs (q, k, v: C*QKV; o: C*C; gate and up: 2*C*FF; down: FF*C) and the
 * head Vp*C at 2 FLOPs per multiply-add; attention 4*C per key a query sees, per token and
 * layer (QK^T and AV, NH*hd = C query channels): causal, (T+1)/2 keys on average, 2*C*(T+1);
 * with a sliding window W < T, query t sees min(t+1, W): W(W+1)/2 + (T-W) W keys over T rows. */
static double flops_per_token(const hpt_model_config *c, int T) {
    double L = c->L, C = c->C, QKV = (double)qkv_of(c), FF = c->FF;
    double keys = (T + 1.0) / 2.0, W = c->window; /* keys per query, on average */
    if (c->window > 0 && c->window < T) keys = (W * (W + 1.0) / 2.0 + (T - W) * W) / T;
    return 2.0 * (L * C * (QKV + C + 3.0 * FF) + (double)c->Vp * C) + 4.0 * L * C * keys;
}

/* ---- the rotary tables ---- */

static size_t consts_floats(const hpt_model_config *c) { return (size_t)c->maxT * (size_t)hd_of(c); }

/* cos, sin (maxT, hd/2): angle p * f_i at position p, f_i = theta^(-2i/hd), and with Llama 3's
 * scaling (rope_factor > 0; Hugging Face's "llama3" rope type): wavelengths 2 pi / f_i above
 * orig / low are divided by factor, those below orig / high kept, those between blended by
 * s = (orig / wavelength - low) / (high - low): f (1 - s) / factor + f s. */
void llama_rope_fill(const hpt_model_config *c, int64_t hd, double theta, double linear,
                     float *host) {
    const int half = (int)(hd / 2);
    const size_t rows = (size_t)c->maxT;
    float *cosv = host, *sinv = host + rows * (size_t)half;
    for (int i = 0; i < half; i++) {
        double f = pow(theta, -(2.0 * i) / (double)(2 * half)) / linear;
        if (c->rope_factor > 0.0f) {
            const double orig = c->rope_orig_maxT, lo = c->rope_low_freq, hi = c->rope_high_freq;
            const double wavelen = 2.0 * 3.14159265358979323846 / f, factor = c->rope_factor;
            if (wavelen > orig / lo) f /= factor;
            else if (wavelen >= orig / hi) {
                double s = (orig / wavelen - lo) / (hi - lo);
                f = (1.0 - s) * f / factor + s * f;
            }
        }
        for (size_t p = 0; p < rows; p++) {
            double a = (double)p * f;
            cosv[p * (size_t)half + (size_t)i] = (float)cos(a);
            sinv[p * (size_t)half + (size_t)i] = (float)sin(a);
        }
    }
}

static void consts_fill(const hpt_model_config *c, float *host) {
    llama_rope_fill(c, hd_of(c), c->rope_theta, 1.0, host);
}

/* A block's slices from the runner's pointers (block order: the table's stacked tensors). */
typedef struct {
    float *ln1w, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *fcw, *fcb, *fcprojw, *fcprojb;
} llama_block;

static llama_block block_of(const hpt_model_config *c, float *const *s) {
    llama_block b;
    int k = 0;
    b.ln1w = s[k++];
    b.qkvw = s[k++];
    b.qkvb = c->attn_bias ? s[k++] : NULL;
    b.attprojw = s[k++];
    b.attprojb = c->attn_bias ? s[k++] : NULL;
    b.ln2w = s[k++];
    b.fcw = s[k++];
    b.fcb = c->mlp_bias ? s[k++] : NULL;
    b.fcprojw = s[k++];
    b.fcprojb = c->mlp_bias ? s[k++] : NULL;
    return b;
}

/* ---- the activations ---- */

#define F(f, flags, attn) {#f, offsetof(llama_layer_acts, f), flags, attn}
enum { R = HPT_FIELD_RECOMPUTE, S = HPT_FIELD_STORE, O = HPT_FIELD_OUTPUT, M = HPT_FIELD_MLP,
       N1 = HPT_FIELD_NORM1, N2 = HPT_FIELD_NORM2 };
/* ln2 takes ln1's buffer under every:N and full (x->norm_rebuild: block_backward rebuilds ln1) */
static const hpt_arch_field k_fields[] = {
    F(ln1, R | S | N1, -1), F(ln1_rstd, 0, -1),      F(qkv, S, -1),
    F(atty, S, -1),         F(att, R | S, HPT_ATTN_PLAIN), F(att_lse, 0, HPT_ATTN_FLASH),
    F(res2, S, -1),         F(ln2, R | S | N2, -1),  F(ln2_rstd, 0, -1),
    F(fch, S | M, -1),      F(fch_swi, R | S | M, -1), F(res3, O, -1)};
#undef F
#define N_FIELDS ((int)(sizeof k_fields / sizeof k_fields[0]))

static void field_shape(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w) {
    const hpt_model_config *c = x->cfg;
    const size_t BT = (size_t)x->B * x->T, C = (size_t)c->C;
    const size_t heads = (size_t)x->B * (size_t)c->NH * (size_t)x->T;
    *rows = BT;
    switch (k_fields[i].off) {
    case offsetof(llama_layer_acts, qkv): *w = (size_t)qkv_of(c); return;
    case offsetof(llama_layer_acts, fch): *w = 2 * (size_t)c->FF; return;
    case offsetof(llama_layer_acts, fch_swi): *w = (size_t)c->FF; return;
    case offsetof(llama_layer_acts, ln1_rstd):
    case offsetof(llama_layer_acts, ln2_rstd): *w = 1; return;
    case offsetof(llama_layer_acts, att): *rows = heads; *w = (size_t)x->T; return;
    case offsetof(llama_layer_acts, att_lse): *rows = heads; *w = 1; return;
    default: *w = C; return; /* ln1, atty, res2, ln2, res3 */
    }
}

#define G(f, t0, t1, after) {#f, offsetof(llama_acts, f), t0, t1, after}
const hpt_arch_global llama_globals[] = {LLAMA_GLOBALS(G)};
#undef G
_Static_assert(sizeof llama_globals / sizeof llama_globals[0] == LLAMA_N_GLOBALS,
               "llama_int.h's LLAMA_N_GLOBALS is not the table's length");

static void global_shape(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w) {
    const hpt_model_config *c = x->cfg;
    const size_t BT = (size_t)x->B * x->T, C = (size_t)c->C;
    *rows = BT;
    switch (llama_globals[i].off) {
    case offsetof(llama_acts, inputs):
    case offsetof(llama_acts, targets):
    case offsetof(llama_acts, lnf_rstd):
    case offsetof(llama_acts, lse):
    case offsetof(llama_acts, losses): *w = 1; return;
    case offsetof(llama_acts, zpos): *rows = (size_t)x->T; *w = C; return;
    case offsetof(llama_acts, logits): *rows = x->head_rows; *w = x->logit_cols; return;
    case offsetof(llama_acts, dmid): llama_tile_rows(x, rows); *w = (size_t)c->FF; return;
    case offsetof(llama_acts, dbig): llama_dbig_shape(x, (size_t)qkv_of(c), rows, w); return;
    case offsetof(llama_acts, attscr): *rows = (size_t)x->B * (size_t)c->NH; *w = (size_t)x->T; return;
    case offsetof(llama_acts, mlph):
    case offsetof(llama_acts, mlph_b): *rows = x->mlp_rows; *w = 2 * (size_t)c->FF; return;
    case offsetof(llama_acts, mlpy):
    case offsetof(llama_acts, mlpy_b): *rows = x->mlp_rows; *w = (size_t)c->FF; return;
    case offsetof(llama_acts, mlpx_b): *rows = x->norm_rebuild ? x->mlp_rows : 0; *w = C; return;
    default: *w = C; return; /* encoded, lnf, dres, dsmall */
    }
}

/* ---- the embedding ---- */

static void embed_forward(const hpt_arch_ctx *x, const void *pv, void *av) {
    const llama_tensors *p = pv;
    llama_acts *a = av;
    const int C = x->cfg->C;
    /* encoded (B, T, C) = wte[inputs] (the encoder op adds a position table: zeros here, and
     * v + 0 is v exactly) */
    x->be->memset(a->zpos, 0, (size_t)x->T * (size_t)C * sizeof(float));
    x->be->encoder_forward(a->encoded, a->inputs, p->wte, a->zpos, x->B, x->T, C);
}

static void embed_backward(const hpt_arch_ctx *x, void *gv, const void *av) {
    llama_tensors *g = gv;
    const llama_acts *a = av;
    /* encoded = wte[inputs]: dwte[inputs[b,t]] += dres[b,t] */
    x->be->encoder_backward_rows(g->wte, a->dres, a->inputs, (size_t)x->B * x->T,
                                 (size_t)x->cfg->C, 0, (size_t)x->cfg->Vp);
}

/* ---- one block: forward ---- */

static void block_forward(const hpt_arch_ctx *x, float *const *w, void *lav, const float *residual,
                          int with_res3) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    const llama_tensors *k = x->params;
    const int B = x->B, T = x->T, C = c->C, NH = c->NH, NKV = c->NKV, FF = c->FF;
    const int hd = (int)hd_of(c);
    const int64_t BT = (int64_t)B * T, QKV = qkv_of(c);
    const llama_block pb = block_of(c, w), *p = &pb;
    llama_layer_acts *la = lav;
    /* ln1 (B, T, C) = rmsnorm(residual) * ln1w */
    be->rmsnorm_forward(la->ln1, la->ln1_rstd, residual, p->ln1w, BT, C, c->norm_eps);
    /* qkv (B, T, QKV) = ln1 @ qkvw^T (+ qkvb); q and k rotated in place */
    arch_linear_forward(x, la->qkv, la->ln1, p->qkvw, p->qkvb, BT, C, QKV, 0);
    hpt_rope_fwd(x, la->qkv, k->rope_cos, k->rope_sin, NH, NKV, hd);
    /* atty (B, T, C) = attention(q, k, v), kv head h / (NH / NKV) for query head h */
    x->attn->forward(be, la->atty, la->att, la->att_lse, la->qkv, B, T, C, NH, NKV, x->pos,
                     c->window);
    /* res2 (B, T, C) = residual + atty @ attprojw^T (+ attprojb) */
    be->copy(la->res2, residual, (size_t)BT * C * sizeof(float), HPT_COPY_D2D);
    arch_linear_forward(x, la->res2, la->atty, p->attprojw, p->attprojb, BT, C, C, 1);
    /* ln2 (B, T, C) = rmsnorm(res2) * ln2w */
    be->rmsnorm_forward(la->ln2, la->ln2_rstd, la->res2, p->ln2w, BT, C, c->norm_eps);
    if (x->mlp_rows) { /* tiled: res3 = res2 + the MLP tile by tile (a recomputation: none) */
        if (!with_res3) return;
        const arch_mlp mlp = llama_mlp(c, p->fcw, p->fcb, p->fcprojw, p->fcprojb);
        const llama_acts *a = x->acts;
        be->copy(la->res3, la->res2, (size_t)BT * C * sizeof(float), HPT_COPY_D2D);
        arch_mlp_forward(x, &mlp, la->res3, la->ln2, x->in_backward ? a->mlph_b : a->mlph,
                         x->in_backward ? a->mlpy_b : a->mlpy);
        return;
    }
    /* fch (B, T, 2FF) = ln2 @ fcw^T (+ fcb) = [gate | up]; fch_swi (B, T, FF) = silu(gate) * up */
    arch_linear_forward(x, la->fch, la->ln2, p->fcw, p->fcb, BT, C, 2 * (int64_t)FF, 0);
    be->swiglu_forward(la->fch_swi, la->fch, BT, FF);
    if (!with_res3) return;
    /* res3 (B, T, C) = res2 + fch_swi @ fcprojw^T (+ fcprojb) */
    be->copy(la->res3, la->res2, (size_t)BT * C * sizeof(float), HPT_COPY_D2D);
    arch_linear_forward(x, la->res3, la->fch_swi, p->fcprojw, p->fcprojb, BT, FF, C, 1);
}

/* Rebuilds ln1, att (plain attention), ln2 and fch_swi from what the forward kept, with the
 * forward's kernels on the forward's inputs: the same bits. */
static void block_recompute(const hpt_arch_ctx *x, float *const *w, void *lav, const float *residual) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    const int B = x->B, T = x->T, C = c->C;
    const int64_t BT = (int64_t)B * T;
    const llama_block pb = block_of(c, w), *p = &pb;
    llama_layer_acts *la = lav;
    /* ln1 = rmsnorm(residual) * ln1w, with the saved rstd */
    be->rmsnorm_apply(la->ln1, residual, p->ln1w, la->ln1_rstd, BT, C);
    /* att = softmax(q k^T) (plain attention; flash keeps none): rewrites atty, the same bits */
    x->attn->rebuild(be, la->atty, la->att, la->att_lse, la->qkv, B, T, C, c->NH, c->NKV, x->pos,
                     c->window);
    /* ln2 = rmsnorm(res2) * ln2w */
    be->rmsnorm_apply(la->ln2, la->res2, p->ln2w, la->ln2_rstd, BT, C);
    /* fch_swi = silu(gate) * up (tiled: the backward's, tile by tile) */
    if (!x->mlp_rows) be->swiglu_forward(la->fch_swi, la->fch, BT, c->FF);
}

/* ---- one block: backward (a->dres: the gradient of the block's output in, of its input out) ---- */

static void block_backward(const hpt_arch_ctx *x, float *const *w, float *const *dw,
                           const void *lav, const float *residual, void *av) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    const llama_tensors *k = x->params;
    const int B = x->B, T = x->T, C = c->C, NH = c->NH, NKV = c->NKV, FF = c->FF;
    const int hd = (int)hd_of(c);
    const int64_t BT = (int64_t)B * T, QKV = qkv_of(c);
    const llama_block pb = block_of(c, w), gb = block_of(c, dw), *p = &pb, *g = &gb;
    const llama_layer_acts *la = lav;
    llama_acts *a = av;
    /* the (B, T, C) gradients' scratch: dsmall; or, norms shared and the MLP tiled (arch.h's
     * HPT_FIELD_NORM2), the block's own dead fields: dln2 in ln2's buffer (the tiles rebuild
     * ln2's rows from res2), then datty and dln1 in res2's (dead after ln2's backward), and
     * ln1 rebuilt in ln2's */
    const int own = x->norm_rebuild && x->mlp_rows;
    float *dln2 = own ? la->ln2 : a->dsmall, *dsm = own ? la->res2 : a->dsmall;
    if (x->mlp_rows) { /* tiled: dln2 tile by tile; dres flows to res2 unchanged */
        arch_mlp mlp = llama_mlp(c, p->fcw, p->fcb, p->fcprojw, p->fcprojb);
        mlp.dw1 = g->fcw, mlp.db1 = g->fcb, mlp.dw2 = g->fcprojw, mlp.db2 = g->fcprojb;
        if (own) {
            mlp.norm_x = la->res2, mlp.norm_w = p->ln2w, mlp.norm_rstd = la->ln2_rstd;
            mlp.in_tile = a->mlpx_b;
        }
        arch_mlp_backward(x, &mlp, dln2, a->dres, own ? NULL : la->ln2, a->mlph_b, a->mlpy_b,
                          a->dmid, a->dbig);
    } else {
        /* res3 = res2 + fch_swi @ fcprojw^T (+ fcprojb); dres flows to res2 unchanged */
        arch_linear_backward(x, a->dmid, g->fcprojw, g->fcprojb, a->dres, la->fch_swi, p->fcprojw,
                            BT, FF, C, 0);
        /* fch_swi = silu(gate) * up: d[gate | up] (B, T, 2FF) into dbig */
        be->swiglu_backward(a->dbig, a->dmid, la->fch, BT, FF);
        /* fch = ln2 @ fcw^T (+ fcb) */
        arch_linear_backward(x, a->dsmall, g->fcw, g->fcb, a->dbig, la->ln2, p->fcw, BT, C,
                            2 * (int64_t)FF, 0);
    }
    /* ln2 = rmsnorm(res2) * ln2w: dres += */
    be->rmsnorm_backward(a->dres, g->ln2w, dln2, la->res2, p->ln2w, la->ln2_rstd, BT, C);
    /* res2 = residual + atty @ attprojw^T (+ attprojb) */
    arch_linear_backward(x, dsm, g->attprojw, g->attprojb, a->dres, la->atty, p->attprojw, BT,
                        C, C, 0);
    /* atty = attention(qkv); dqkv (B, T, QKV) into dbig, dk and dv summed over each group */
    x->attn->backward(be, a->dbig, a->attscr, dsm, la->qkv, la->atty, la->att, la->att_lse,
                      B, T, C, NH, NKV, x->pos, c->window);
    /* q, k = rope(q, k): the transpose rotation */
    hpt_rope_bwd(x, a->dbig, k->rope_cos, k->rope_sin, NH, NKV, hd);
    /* ln2 took ln1's buffer (every:N, full; ln2's last reader was the MLP's backward): ln1 =
     * rmsnorm(residual) * ln1w again, with the saved rstd (the forward's bits) */
    if (x->norm_rebuild) be->rmsnorm_apply(la->ln1, residual, p->ln1w, la->ln1_rstd, BT, C);
    /* qkv = ln1 @ qkvw^T (+ qkvb) */
    arch_linear_backward(x, dsm, g->qkvw, g->qkvb, a->dbig, la->ln1, p->qkvw, BT, C, QKV, 0);
    /* ln1 = rmsnorm(residual) * ln1w: dres += */
    be->rmsnorm_backward(a->dres, g->ln1w, dsm, residual, p->ln1w, la->ln1_rstd, BT, C);
}

/* ---- the final norm and the head ---- */

static void final_forward(const hpt_arch_ctx *x, const void *pv, void *av, const float *res3) {
    const llama_tensors *p = pv;
    llama_acts *a = av;
    /* lnf (B, T, C) = rmsnorm(res3 of block L-1) * lnfw */
    x->be->rmsnorm_forward(a->lnf, a->lnf_rstd, res3, p->lnfw, (int64_t)x->B * x->T, x->cfg->C,
                           x->cfg->norm_eps);
}

/* The head's weight: lm_head, or wte when tied. */
static float *head_w(const hpt_model_config *c, const llama_tensors *p) {
    return c->tied ? p->wte : p->lm_head;
}

/* The logits head_rows rows at a time: all (B*T, Vp) kept when head_rows is B*T, else the loss
 * chunk by chunk and the last chunk's logits only, (rows, Vp). */
static float head_forward(const hpt_arch_ctx *x, const void *pv, void *av, int has_targets) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    llama_acts *a = av;
    const float *W = head_w(c, pv);
    const size_t BT = (size_t)x->B * x->T, C = (size_t)c->C, rows = x->head_rows;
    float loss = -1.0f;
    for (size_t r0 = 0; r0 < BT; r0 += rows) {
        size_t n = HPT_MIN(rows, BT - r0);
        /* logits (n, Vp) = lnf @ W^T (no bias) */
        arch_matmul_forward(x, a->logits, a->lnf + r0 * C, W, NULL, (int64_t)n, (int64_t)C, c->Vp,
                            0);
        /* loss = mean_i (lse_i - logits[i, y_i]) */
        if (has_targets)
            loss = be->crossentropy_forward(a->losses + r0, a->lse + r0, a->logits,
                                            a->targets + r0, (int64_t)n, c->V, c->Vp);
    }
    if (has_targets && rows < BT) loss = be->loss_mean(a->losses, BT);
    return loss;
}

static void head_backward(const hpt_arch_ctx *x, const void *pv, void *gv, void *av) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    llama_acts *a = av;
    const float *W = head_w(c, pv);
    float *dW = head_w(c, gv);
    const size_t BT = (size_t)x->B * x->T, C = (size_t)c->C, rows = x->head_rows;
    /* the gradient of the targets' loss sum / N (docs/targets.md), times the loss scale */
    const float dloss = 1.0f / (x->loss_norm > 0 ? x->loss_norm : (float)BT) * x->loss_scale;
    /* logits = lnf @ W^T: dlnf = dlogits @ W, dW += dlogits^T @ lnf; a chunk's logits
     * recomputed first when the forward kept only the last one */
    for (size_t r0 = 0; r0 < BT; r0 += rows) {
        size_t n = HPT_MIN(rows, BT - r0);
        if (n < BT)
            arch_matmul_forward(x, a->logits, a->lnf + r0 * C, W, NULL, (int64_t)n, (int64_t)C,
                                c->Vp, 0);
        be->crossentropy_backward(a->logits, a->lse + r0, a->targets + r0, (int64_t)n, c->V,
                                  c->Vp, dloss);
        arch_linear_backward(x, a->dsmall + r0 * C, dW, NULL, a->logits, a->lnf + r0 * C, W,
                            (int64_t)n, (int64_t)C, c->Vp, 0);
    }
}

static void final_backward(const hpt_arch_ctx *x, const void *pv, void *gv, void *av,
                           const float *res3) {
    const llama_tensors *p = pv;
    llama_tensors *g = gv;
    llama_acts *a = av;
    const int64_t BT = (int64_t)x->B * x->T;
    const int C = x->cfg->C;
    /* lnf = rmsnorm(res3[L-1]) * lnfw: dres (B, T, C) starts here */
    x->be->memset(a->dres, 0, (size_t)BT * C * sizeof(float));
    x->be->rmsnorm_backward(a->dres, g->lnfw, a->dsmall, res3, p->lnfw, a->lnf_rstd, BT, C);
}

/* ---- Hugging Face: LlamaForCausalLM, MistralForCausalLM (asked by io/hfconfig.c and
 * io/hfmodel.c) ---- */

static const char *const k_hf_classes[] = {"LlamaForCausalLM", "MistralForCausalLM", NULL};
static const char *const k_hf_types[] = {"llama", "mistral", NULL};
static const char *const k_hf_ignore[] = {".rotary_emb.inv_freq", NULL};

/* Llama 3's frequency scaling, under rope_scaling or rope_parameters (which may also hold
 * rope_theta). */
static hpt_status hf_rope(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                          hpt_model_config *c) {
    const hpt_hf_json *rs;
    const char *key = "rope_parameters";
    HPT_CHECK(J->obj(r, key, what, &rs));
    if (!rs) { key = "rope_scaling"; HPT_CHECK(J->obj(r, key, what, &rs)); }
    if (!rs) return HPT_OK;
    if (J->has(rs, "rope_theta")) HPT_CHECK(J->get_float(rs, "rope_theta", 0, what, &c->rope_theta));
    const char *type = J->has(rs, "rope_type") ? J->get_str(rs, "rope_type") : J->get_str(rs, "type");
    if (!type) type = "default";
    if (!strcmp(type, "default")) return HPT_OK;
    if (strcmp(type, "llama3"))
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: %s.rope_type '%s': hptrain knows 'default' and "
                       "'llama3'", what, key, type);
    HPT_CHECK(J->get_float(rs, "factor", -1, what, &c->rope_factor));
    HPT_CHECK(J->get_float(rs, "low_freq_factor", 1, what, &c->rope_low_freq));
    HPT_CHECK(J->get_float(rs, "high_freq_factor", 4, what, &c->rope_high_freq));
    HPT_CHECK(J->get_int(rs, "original_max_position_embeddings", 8192, 1, 1 << 24, what,
                         &c->rope_orig_maxT));
    if (!(c->rope_factor > 0) || !(c->rope_high_freq > c->rope_low_freq))
        return J->fail(HPT_ERR_FORMAT, "%s: %s: llama3 needs factor > 0 and high_freq_factor > "
                       "low_freq_factor", what, key);
    return HPT_OK;
}

/* hidden_size, intermediate_size, num_attention_heads, num_key_value_heads (default: the
 * heads), num_hidden_layers, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta and
 * Llama 3's scaling, tie_word_embeddings, attention_bias, mlp_bias, initializer_range,
 * sliding_window (Mistral); head_dim only C/NH, hidden_act only SiLU */
static hpt_status hf_config_read(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                                 hpt_model_config *c) {
    memset(c, 0, sizeof *c);
    c->arch = HPT_ARCH_LLAMA;
    HPT_CHECK(J->get_int(r, "hidden_size", -1, 1, 1 << 20, what, &c->C));
    HPT_CHECK(J->get_int(r, "intermediate_size", -1, 1, 1 << 22, what, &c->FF));
    HPT_CHECK(J->get_int(r, "num_hidden_layers", -1, 1, 1 << 16, what, &c->L));
    HPT_CHECK(J->get_int(r, "num_attention_heads", -1, 1, 1 << 16, what, &c->NH));
    HPT_CHECK(J->get_int(r, "num_key_value_heads", c->NH, 1, 1 << 16, what, &c->NKV));
    HPT_CHECK(J->get_int(r, "vocab_size", -1, 1, 1 << 28, what, &c->V));
    HPT_CHECK(J->get_int(r, "max_position_embeddings", 2048, 1, 1 << 24, what, &c->maxT));
    HPT_CHECK(J->get_float(r, "rms_norm_eps", 1e-6, what, &c->norm_eps));
    HPT_CHECK(J->get_float(r, "rope_theta", 10000, what, &c->rope_theta));
    HPT_CHECK(J->get_float(r, "initializer_range", 0.02, what, &c->init_range));
    HPT_CHECK(J->get_bool(r, "tie_word_embeddings", 0, what, &c->tied));
    HPT_CHECK(J->get_bool(r, "attention_bias", 0, what, &c->attn_bias));
    HPT_CHECK(J->get_bool(r, "mlp_bias", 0, what, &c->mlp_bias));
    HPT_CHECK(hf_rope(J, r, what, c));
    /* Mistral's sliding_window (null or absent: none); one >= max_position_embeddings never
     * cuts a row: none */
    HPT_CHECK(J->get_int(r, "sliding_window", 0, 0, 1 << 30, what, &c->window));
    if (c->window >= c->maxT) c->window = 0;
    if (c->C % c->NH)
        return J->fail(HPT_ERR_FORMAT, "%s: hidden_size %d is not a multiple of "
                       "num_attention_heads %d", what, c->C, c->NH);
    if (c->NH % c->NKV)
        return J->fail(HPT_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of "
                       "num_key_value_heads %d", what, c->NH, c->NKV);
    int hd;
    HPT_CHECK(J->get_int(r, "head_dim", c->C / c->NH, 1, 1 << 20, what, &hd));
    if (hd != c->C / c->NH)
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: head_dim %d differs from hidden_size / "
                       "num_attention_heads = %d: hptrain's llama needs them equal", what, hd,
                       c->C / c->NH);
    const char *act = J->get_str(r, "hidden_act");
    if (J->has(r, "hidden_act") && (!act || strcmp(act, "silu")))
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: hidden_act '%s': hptrain's llama uses SiLU",
                       what, act ? act : "?");
    return HPT_OK;
}

static void hf_config_write(const hpt_hf_json_ops *J, hpt_hf_json *r, const hpt_model_config *c,
                            const char *cls) {
    /* transformers' Auto classes build the model of model_type: a window needs Mistral's */
    J->put_str(r, "model_type", !strcmp(cls, "MistralForCausalLM") || c->window > 0 ? "mistral" : "llama");
    J->put_str(r, "hidden_act", "silu");
    J->put_int(r, "hidden_size", c->C);
    J->put_int(r, "intermediate_size", c->FF);
    J->put_int(r, "num_hidden_layers", c->L);
    J->put_int(r, "num_attention_heads", c->NH);
    J->put_int(r, "num_key_value_heads", c->NKV);
    J->put_int(r, "head_dim", c->C / c->NH);
    J->put_int(r, "max_position_embeddings", c->maxT);
    J->put_float(r, "rms_norm_eps", c->norm_eps);
    J->put_float(r, "rope_theta", c->rope_theta);
    if (c->rope_factor > 0) {
        hpt_hf_json *rs = J->put_obj(r, "rope_scaling");
        J->put_str(rs, "rope_type", "llama3");
        J->put_float(rs, "factor", c->rope_factor);
        J->put_float(rs, "low_freq_factor", c->rope_low_freq);
        J->put_float(rs, "high_freq_factor", c->rope_high_freq);
        J->put_int(rs, "original_max_position_embeddings", c->rope_orig_maxT);
    } else {
        J->put_null(r, "rope_scaling");
    }
    J->put_bool(r, "attention_bias", c->attn_bias);
    J->put_bool(r, "mlp_bias", c->mlp_bias);
    if (c->window > 0) J->put_int(r, "sliding_window", c->window);
    else if (!strcmp(cls, "MistralForCausalLM")) J->put_null(r, "sliding_window");
}

static void hf_part(hpt_hf_part *p, int *n, const char *name, int64_t rows, int64_t W, int ndim) {
    hpt_hf_part *q = &p[(*n)++];
    snprintf(q->name, sizeof q->name, "%s", name ? name : "");
    q->R = rows;
    q->W = W;
    q->ndim = ndim;
    q->transpose = 0;
}

/* table name -> the Hugging Face tensors its rows concatenate (under model.layers.{l}.) */
static const llama_hf_name k_hf_names[] = {
    {"ln1w", {"input_layernorm.weight"}}, {"ln2w", {"post_attention_layernorm.weight"}},
    {"qkvw", {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}},
    {"qkvb", {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}},
    {"attprojw", {"self_attn.o_proj.weight"}}, {"attprojb", {"self_attn.o_proj.bias"}},
    {"fcw", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}},
    {"fcb", {"mlp.gate_proj.bias", "mlp.up_proj.bias"}},
    {"fcprojw", {"mlp.down_proj.weight"}}, {"fcprojb", {"mlp.down_proj.bias"}},
};

int llama_hf_parts(const hpt_model_config *c, const hpt_tensor_desc *d, int l,
                   const llama_hf_name *names, int n_names, int64_t hd, hpt_hf_part *p) {
    const int stacked = d->layer == HPT_LAYER_STACKED, nd = d->ndim - stacked;
    const int64_t Rs = nd == 2 ? d->shape[stacked] : 1, W = d->shape[d->ndim - 1];
    int n = 0;
    char name[112];
    if (!strcmp(d->name, "wte") || !strcmp(d->name, "lm_head")) { /* (Vp, C): V rows, padding */
        hf_part(p, &n, !strcmp(d->name, "wte") ? "model.embed_tokens.weight" : "lm_head.weight",
                c->V, W, 2);
        if (Rs > c->V) hf_part(p, &n, NULL, Rs - c->V, W, 2);
        return n;
    }
    if (!strcmp(d->name, "lnfw")) {
        hf_part(p, &n, "model.norm.weight", 1, W, 1);
        return n;
    }
    for (int i = 0; i < n_names; i++) {
        if (strcmp(d->name, names[i].t)) continue;
        int np = names[i].hf[2] ? 3 : names[i].hf[1] ? 2 : 1;
        for (int j = 0; j < np; j++) {
            /* rows of each part: q NH*hd, k and v NKV*hd; two parts halves (gate and up FF,
             * q_norm and k_norm hd, Gemma's post norms C); a lone part all */
            int64_t rows = np == 3 ? (j == 0 ? c->NH : c->NKV) * hd
                         : np == 2 ? (nd == 2 ? Rs : W) / 2 : Rs;
            snprintf(name, sizeof name, "model.layers.%d.%s", l, names[i].hf[j]);
            if (nd == 2) hf_part(p, &n, name, rows, W, 2);
            else hf_part(p, &n, name, 1, np == 1 ? W : rows, 1);
        }
    }
    return n;
}

static int hf_parts(const hpt_model_config *c, const hpt_tensor_desc *d, int l, const char *prefix,
                    hpt_hf_part *p) {
    (void)prefix; /* the hub's llama files name everything in full */
    return llama_hf_parts(c, d, l, k_hf_names, (int)(sizeof k_hf_names / sizeof *k_hf_names),
                          c->C / c->NH, p);
}
/* ---- the planner's view of the block (model/arch.h's hpt_arch_plan) ----
 * Every op but the GEMMs differs from the reference block's, and the GEMMs' shapes too
 * (grouped-query qkv, SwiGLU's gate and up as one (C, 2FF)), so the calibration measures them
 * at two widths (C 512 with FF 3C, a small Llama's; C 2048 with FF 4C, llama3.2-1b's; NH =
 * C/64, NKV = NH/4), the grouped-query attention and the pointwise ops at the second. */

static int plan_gemms(const hpt_model_config *c, int64_t io[][2]) {
    const int64_t C = c->C, FF = c->FF;
    const int64_t sh[4][2] = {{C, qkv_of(c)}, {C, C}, {C, 2 * FF}, {FF, C}};
    memcpy(io, sh, sizeof sh);
    return 4;
}

/* rmsnorm_forward (B, T, C) -> (B, T, C): x, y, dx (rows, C), w, dw (C), rstd (rows) */
static double rms_per_token(const hpt_model_config *c) { return c->C; }
static size_t rms_floats(const hpt_model_config *c, int rows) {
    return 3 * (size_t)rows * c->C + 2 * (size_t)c->C + (size_t)rows;
}
static void rms_run(const hpt_backend *be, const hpt_model_config *c, int rows, int bwd, float *s) {
    const size_t nc = (size_t)rows * c->C;
    float *x = s, *y = x + nc, *dx = y + nc, *w = dx + nc, *dw = w + c->C, *rstd = dw + c->C;
    if (bwd) be->rmsnorm_backward(dx, dw, y, x, w, rstd, rows, c->C);
    else be->rmsnorm_forward(y, rstd, x, w, rows, c->C, 1e-5f);
}

/* rope on q and k in place: qkv (rows, QKV), cos and sin (rows, hd/2); costed per rotated
 * element ((NH + NKV) hd per token) */
static double rope_per_token(const hpt_model_config *c) {
    return (double)(c->NH + c->NKV) * (c->C / c->NH);
}
static size_t rope_floats(const hpt_model_config *c, int rows) {
    return (size_t)rows * (size_t)(qkv_of(c) + hd_of(c));
}
static void rope_run(const hpt_backend *be, const hpt_model_config *c, int rows, int bwd, float *s) {
    const int hd = (int)hd_of(c);
    float *qkv = s, *cs = qkv + (size_t)rows * qkv_of(c), *sn = cs + (size_t)rows * hd / 2;
    if (bwd) be->rope_backward(qkv, cs, sn, 1, rows, c->NH, c->NKV, hd, 0);
    else be->rope_forward(qkv, cs, sn, 1, rows, c->NH, c->NKV, hd, 0);
}
static void rope_fill(const hpt_model_config *c, int rows, float *s) {
    const size_t half = (size_t)rows * (size_t)(hd_of(c) / 2);
    float *cs = s + (size_t)rows * qkv_of(c), *sn = cs + half;
    for (size_t i = 0; i < half; i++) cs[i] = cosf(0.01f * (float)i), sn[i] = sinf(0.01f * (float)i);
}

/* silu(gate) * up: h (rows, 2FF) [gate | up], out (rows, FF), dh (rows, 2FF) */
static double swi_per_token(const hpt_model_config *c) { return c->FF; }
static size_t swi_floats(const hpt_model_config *c, int rows) { return 5 * (size_t)rows * c->FF; }
static void swi_run(const hpt_backend *be, const hpt_model_config *c, int rows, int bwd, float *s) {
    const size_t nf = (size_t)rows * c->FF;
    float *h = s, *sw = h + 2 * nf, *dh = sw + nf;
    if (bwd) be->swiglu_backward(dh, sw, h, rows, c->FF);
    else be->swiglu_forward(sw, h, rows, c->FF);
}
static void swi_fill(const hpt_model_config *c, int rows, float *s) { /* h in [-1, 1) */
    for (size_t i = 0; i < 2 * (size_t)rows * c->FF; i++) s[i] *= 2.0f;
}

/* the forward's two residual copies (C floats read and written each) */
static double plan_fwd_bytes(const hpt_model_config *c) { return 16.0 * c->C; }

/* per block: two norms, rope on q and k, SwiGLU; a selective recomputation reruns the norms
 * and SwiGLU (costed in this order) */
static const hpt_arch_op k_plan_ops[] = {
    {"rmsnorm", 2, 2, 2, rms_per_token, rms_floats, rms_run, NULL},
    {"rope", 1, 1, 0, rope_per_token, rope_floats, rope_run, rope_fill},
    {"swiglu", 1, 1, 1, swi_per_token, swi_floats, swi_run, swi_fill},
};

static const hpt_arch_plan k_plan = {
    .gemms = plan_gemms,
    .n_cal = 2,
    .cal = {{.arch = HPT_ARCH_LLAMA, .L = 1, .C = 512, .NH = 8, .NKV = 2, .FF = 1536},
            {.arch = HPT_ARCH_LLAMA, .L = 1, .C = 2048, .NH = 32, .NKV = 8, .FF = 8192}},
    .attn_key = "gqa",
    .n_ops = 3,
    .ops = k_plan_ops,
    .fwd_bytes = plan_fwd_bytes,
};

/* every name llama_descs may give (verify's report outlives the model) */
static const char *const k_param_names[] = {
    "wte", "ln1w", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "fcw", "fcb", "fcprojw",
    "fcprojb", "lnfw", "lm_head", NULL};

/* ---- shapes (model/config.c routes "llama..." and "mistral..." here, then checks) ---- */
static hpt_status config_check(const hpt_model_config *c) {
    HPT_CHECK(model_config_check_common(c, "llama"));
    int hd = c->C / c->NH;
    if (c->NKV < 1 || c->NH % c->NKV != 0)
        return hpt_fail(HPT_ERR_SHAPE, "query heads NH=%d are not a multiple of key/value heads "
                        "NKV=%d", c->NH, c->NKV);
    if (hd % 2 != 0)
        return hpt_fail(HPT_ERR_SHAPE, "head size C/NH=%d is odd: rotary embeddings rotate pairs", hd);
    if (c->FF < 1 || c->FF > 1048576)
        return hpt_fail(HPT_ERR_SHAPE, "bad MLP width FF=%d", c->FF);
    if (c->window < 0 || c->window > c->maxT)
        return hpt_fail(HPT_ERR_SHAPE, "sliding window %d is not in 0 (none) .. maxT=%d", c->window,
                        c->maxT);
    if (!(c->norm_eps > 0.0f) || !(c->rope_theta > 1.0f) || !(c->init_range >= 0.0f) ||
        !isfinite(c->rope_theta) || !(c->rope_factor >= 0.0f))
        return hpt_fail(HPT_ERR_SHAPE, "bad llama constants eps=%g theta=%g range=%g factor=%g",
                        (double)c->norm_eps, (double)c->rope_theta, (double)c->init_range,
                        (double)c->rope_factor);
    if (c->rope_factor > 0.0f &&
        (c->rope_orig_maxT < 1 || !(c->rope_low_freq > 0.0f) || !(c->rope_high_freq > c->rope_low_freq)))
        return hpt_fail(HPT_ERR_SHAPE, "rope scaling factor %g needs orig > 0 and high > low > 0 "
                        "(orig=%d low=%g high=%g)", (double)c->rope_factor, c->rope_orig_maxT,
                        (double)c->rope_low_freq, (double)c->rope_high_freq);
    return HPT_OK;
}

static hpt_status llama_key(hpt_model_config *c, const char *key, double v, const char *shape) {
    static const model_int_key ints[] = {
        {"L", offsetof(hpt_model_config, L), 1},       {"C", offsetof(hpt_model_config, C), 1},
        {"NH", offsetof(hpt_model_config, NH), 1},     {"NKV", offsetof(hpt_model_config, NKV), 1},
        {"FF", offsetof(hpt_model_config, FF), 1},     {"V", offsetof(hpt_model_config, V), 1},
        {"Vp", offsetof(hpt_model_config, Vp), 1},     {"T", offsetof(hpt_model_config, maxT), 1},
        {"maxT", offsetof(hpt_model_config, maxT), 1}, {"orig", offsetof(hpt_model_config, rope_orig_maxT), 1},
        {"tied", offsetof(hpt_model_config, tied), 0}, {"attn_bias", offsetof(hpt_model_config, attn_bias), 0},
        {"mlp_bias", offsetof(hpt_model_config, mlp_bias), 0},
        {"window", offsetof(hpt_model_config, window), 0}};
    static const model_float_key floats[] = {
        {"theta", offsetof(hpt_model_config, rope_theta)}, {"eps", offsetof(hpt_model_config, norm_eps)},
        {"factor", offsetof(hpt_model_config, rope_factor)}, {"low", offsetof(hpt_model_config, rope_low_freq)},
        {"high", offsetof(hpt_model_config, rope_high_freq)}, {"range", offsetof(hpt_model_config, init_range)}};
    return model_shape_key(c, key, v, shape, ints, sizeof ints / sizeof ints[0], floats,
                           sizeof floats / sizeof floats[0], "L, C, NH, NKV, FF, V, Vp, T, "
                           "theta, eps, factor, low, high, orig, tied, attn_bias, mlp_bias, range, "
                           "window");
}

/* The named llama shapes, from their published config.json files (Hugging Face hub):
 * meta-llama/Llama-3.2-1B, Llama-3.2-3B, Llama-3.1-8B, Llama-2-7b-hf, and
 * mistralai/Mistral-7B-v0.1 (sliding_window 4096: each query sees its last 4096 positions).
 * All: rms_norm_eps 1e-5, initializer_range 0.02,
 * no biases. Llama 3.x: rope_theta 500000, rope_type llama3 with low_freq_factor 1,
 * high_freq_factor 4, original_max_position_embeddings 8192. */
static const struct {
    const char *name;
    int L, C, NH, NKV, FF, V, maxT, tied;
    float theta, factor;
    int window;
} k_llama[] = {
    {"llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 131072, 1, 500000.0f, 32.0f, 0},
    {"llama3.2-3b", 28, 3072, 24, 8, 8192, 128256, 131072, 1, 500000.0f, 32.0f, 0},
    {"llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072, 0, 500000.0f, 8.0f, 0},
    {"llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 0, 10000.0f, 0.0f, 0},
    {"mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768, 0, 10000.0f, 0.0f, 4096},
};

static hpt_status shape_parse(const char *shape, hpt_model_config *out) {
    hpt_model_config c = {.arch = HPT_ARCH_LLAMA, .V = 32000, .maxT = 2048, .norm_eps = 1e-6f,
                          .rope_theta = 10000.0f, .init_range = 0.02f};
    int found = 0;
    for (size_t i = 0; i < sizeof k_llama / sizeof k_llama[0]; i++)
        if (!strcmp(shape, k_llama[i].name)) {
            c.L = k_llama[i].L; c.C = k_llama[i].C; c.NH = k_llama[i].NH;
            c.NKV = k_llama[i].NKV; c.FF = k_llama[i].FF; c.V = k_llama[i].V;
            c.maxT = k_llama[i].maxT; c.tied = k_llama[i].tied;
            c.rope_theta = k_llama[i].theta; c.norm_eps = 1e-5f; c.window = k_llama[i].window;
            if (k_llama[i].factor > 0.0f) {
                c.rope_factor = k_llama[i].factor;
                c.rope_low_freq = 1.0f; c.rope_high_freq = 4.0f; c.rope_orig_maxT = 8192;
            }
            found = 1;
        }
    if (!found) {
        if (strncmp(shape, "llama:", 6) != 0)
            return hpt_fail(HPT_ERR_INVALID, "unknown model shape '%s' (use llama3.2-1b, "
                            "llama3.2-3b, llama3.1-8b, llama2-7b, mistral-7b or "
                            "llama:L=..,C=..,NH=..,NKV=..,FF=..[,V=..][,T=..][,theta=..]"
                            "[,window=..])", shape);
        HPT_CHECK(model_shape_kv(shape, shape + 6, &c, llama_key));
        if (!c.L || !c.C || !c.NH || !c.FF)
            return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': L, C, NH and FF are required", shape);
        if (!c.NKV) c.NKV = c.NH;
        if (c.rope_factor > 0.0f) {
            if (c.rope_low_freq == 0.0f) c.rope_low_freq = 1.0f;
            if (c.rope_high_freq == 0.0f) c.rope_high_freq = 4.0f;
        }
    }
    *out = c;
    return HPT_OK;
}

static const char *const k_shape_prefixes[] = {"llama", "mistral", NULL};

/* LoRA's view of a block (model/lora.c): q, k, v share qkvw, gate and up fcw */
static int linears(const hpt_model_config *c, hpt_arch_linear o[HPT_ARCH_MAX_LINEARS]) {
    const int64_t C = c->C, q = c->NH * hd_of(c), kv = c->NKV * hd_of(c), FF = c->FF;
    const hpt_arch_linear l[7] = {
        {"q", "self_attn.q_proj", "qkvw", 0, q, C},
        {"k", "self_attn.k_proj", "qkvw", q, kv, C},
        {"v", "self_attn.v_proj", "qkvw", q + kv, kv, C},
        {"o", "self_attn.o_proj", "attprojw", 0, C, q},
        {"gate", "mlp.gate_proj", "fcw", 0, FF, C},
        {"up", "mlp.up_proj", "fcw", FF, FF, C},
        {"down", "mlp.down_proj", "fcprojw", 0, C, FF}};
    memcpy(o, l, sizeof l);
    return 7;
}

const hpt_arch hpt_arch_llama = {
    .name = "llama",
    .describe = describe,
    .flops_per_token = flops_per_token,
    .n_fields = N_FIELDS,
    .fields = k_fields,
    .block_acts_size = sizeof(llama_layer_acts),
    .field_shape = field_shape,
    .n_globals = LLAMA_N_GLOBALS,
    .globals = llama_globals,
    .acts_size = sizeof(llama_acts),
    .global_shape = global_shape,
    .off_inputs = offsetof(llama_acts, inputs),
    .off_targets = offsetof(llama_acts, targets),
    .off_encoded = offsetof(llama_acts, encoded),
    .off_logits = offsetof(llama_acts, logits),
    .point = point,
    .consts_floats = consts_floats,
    .consts_fill = consts_fill,
    .embed_forward = embed_forward,
    .embed_backward = embed_backward,
    .block_forward = block_forward,
    .block_recompute = block_recompute,
    .block_backward = block_backward,
    .final_forward = final_forward,
    .head_forward = head_forward,
    .head_backward = head_backward,
    .final_backward = final_backward,
    /* shapes */
    .shape_prefixes = k_shape_prefixes,
    .shape_parse = shape_parse,
    .config_check = config_check,
    /* Hugging Face */
    .hf_classes = k_hf_classes,
    .hf_model_types = k_hf_types,
    .hf_config_read = hf_config_read,
    .hf_config_write = hf_config_write,
    .hf_parts = hf_parts,
    .hf_embed_name = "model.embed_tokens.weight",
    .hf_head_name = "lm_head.weight",
    .hf_ignore = k_hf_ignore,
    .hf_eot = -1,
    .linears = linears,
    .hf_block = "model.layers.%d.",
    /* the registry's block */
    .desc = {.name = "llama", .label = "llama",
             .shapes = "llama3.2-1b, llama3.2-3b, llama3.1-8b, llama2-7b, mistral-7b, "
                       "llama:L=..,C=..,NH=..,NKV=..,FF=..[,V=..][,T=..][,theta=..][,window=..]",
             .block = "Llama",
             .attention = "grouped-query attention GFLOP/s (T=128, NH 32, NKV 8)",
             .op = {"RMSNorm", "RoPE", "SwiGLU"}},
    .plan = &k_plan,
    .param_names = k_param_names,
};
