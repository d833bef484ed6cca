/* qwen.c: the Qwen families' maths in the architecture interface (model/arch.h): Qwen2 and
 * Qwen2.5 (Hugging Face Qwen2ForCausalLM) and Qwen3 (Qwen3ForCausalLM), two architectures of
 * one block. It is Llama's (model/llama.c, on llama_int.h's layout) with
 *   Qwen2: biases on q, k and v, none on o; head width hd = C/NH;
 *   Qwen3: no biases (attention_bias: on q, k, v and o); q and k RMS-normalised per head
 *          (weights q_norm, k_norm of hd; rms_norm_eps) after the projection, before the
 *          rotation; hd = head_dim, free of C/NH: the attention's width A = NH hd may differ
 *          from C (q (NH hd), k and v (NKV hd) each; o_proj (C, A)).
 *   per block: n = rmsnorm(x) * ln1w; [q | k | v] = n @ qkvw^T (+ qkvb)
 *              Qwen3: q_h = rmsnorm(q_h) * q_norm, k_h = rmsnorm(k_h) * k_norm per head h
 *              x += o_proj(attention(rope(q), rope(k), v)); x += down(silu(gate(m)) * up(m)),
 *              m = rmsnorm(x) * ln2w
 * The embedding, the final norm and the head are llama's own ops (the same layout). The per-head
 * norms go through the backend's rmsnorm one token at a time: a token's q heads are NH
 * contiguous rows of hd, its k heads NKV (no kernel of their own; docs/qwen.md). Invariants:
 * gradients accumulate (+=); every op goes through x->be on the runner's buffers. */
#include "core/core.h"
#include "model/arch.h"
#include "model/llama_int.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- the parameters ---- */

static int qk_norm(const hpt_model_config *c) { return c->arch == HPT_ARCH_QWEN3; }
static int gemma(const hpt_model_config *c) { return c->arch == HPT_ARCH_GEMMA3; }
static int64_t hd_of(const hpt_model_config *c) { return c->hd ? c->hd : c->C / c->NH; }
static int64_t att_of(const hpt_model_config *c) { return c->NH * hd_of(c); } /* A */
static int64_t qkv_of(const hpt_model_config *c) { return (c->NH + 2 * (int64_t)c->NKV) * hd_of(c); }
/* o_proj's bias: Qwen3's and Gemma's attention_bias (Qwen2's o_proj has none) */
static int o_bias(const hpt_model_config *c) { return c->attn_bias && (qk_norm(c) || gemma(c)); }

#define T_(f) #f, offsetof(llama_tensors, f)
int llama_hd_descs(const hpt_model_config *c, llama_desc d[LLAMA_HD_DESCS]) {
    const int64_t L = c->L, C = c->C, Vp = c->Vp, QKV = qkv_of(c), FF = c->FF, A = att_of(c);
    const llama_desc all[LLAMA_HD_DESCS - 1] = {
        {T_(wte), 2, {Vp, C}, 0, 1, 1},
        {T_(ln1w), 2, {L, C}, 1, 0, 1},
        {T_(qkvw), 3, {L, QKV, C}, 1, 1, 1},
        {T_(qkvb), 2, {L, QKV}, 1, 0, c->attn_bias},
        {T_(qknw), 2, {L, 2 * hd_of(c)}, 1, 0, qk_norm(c) || gemma(c)},
        {T_(attprojw), 3, {L, C, A}, 1, 1, 1},
        {T_(attprojb), 2, {L, C}, 1, 0, o_bias(c)},
        {T_(ln2w), 2, {L, C}, 1, 0, 1},
        {T_(fcw), 3, {L, 2 * FF, C}, 1, 1, 1},
        {T_(fcprojw), 3, {L, C, FF}, 1, 1, 1},
        {T_(postw), 2, {L, 2 * C}, 1, 0, gemma(c)},
        {T_(lnfw), 1, {C}, 0, 0, 1},
    };
    int n = 0;
    for (int i = 0; i < LLAMA_HD_DESCS - 1; i++)
        if (all[i].present) d[n++] = all[i];
    if (!c->tied) d[n++] = (llama_desc){T_(lm_head), 2, {Vp, C}, 0, 1, 1};
    return n;
}
#undef T_

static void describe(const hpt_model_config *cfg, hpt_tensor_table *out) {
    llama_desc d[LLAMA_HD_DESCS];
    llama_describe_descs(d, llama_hd_descs(cfg, d), cfg, out);
}

static void point(const hpt_model_config *cfg, const hpt_tensor_table *t, float *const *tp,
                  const float *consts, void *outv) {
    llama_desc d[LLAMA_HD_DESCS];
    llama_point_descs(d, llama_hd_descs(cfg, d), cfg, t, tp, consts, hd_of(cfg), outv);
}

/* FLOPs per token: the GEMMs (C*QKV; o: A*C; gate and up 2*C*FF; down FF*C) and the head Vp*C
 * at 2 FLOPs per multiply-add; causal attention 2*A*(T+1) per token and layer (QK^T and AV over
 * t+1 keys on average, A = NH*hd query channels; Gemma's local layers counted as full: an upper
 * bound). */
double llama_hd_flops_per_token(const hpt_model_config *c, int T) {
    double L = c->L, C = c->C, QKV = (double)qkv_of(c), A = (double)att_of(c), FF = c->FF;
    return 2.0 * (L * (C * QKV + A * C + 3.0 * C * FF) + (double)c->Vp * C) + 2.0 * L * A * (T + 1.0);
}

/* ---- the rotary tables: cos, sin (maxT, hd/2), angle p * theta^(-2i/hd) (no scaling) ---- */

static size_t consts_floats(const hpt_model_config *c) { return (size_t)c->maxT * (size_t)hd_of(c); }

/* rope_factor is 0 (config_check): llama's tables without the scaling */
static void consts_fill(const hpt_model_config *c, float *host) {
    llama_rope_fill(c, hd_of(c), c->rope_theta, 1.0, host);
}

llama_hd_block llama_hd_block_of(const hpt_model_config *c, float *const *s) {
    llama_hd_block b;
    int k = 0;
    b.ln1w = s[k++];
    b.qkvw = s[k++];
    b.qkvb = c->attn_bias ? s[k++] : NULL;
    b.qknw = qk_norm(c) || gemma(c) ? s[k++] : NULL;
    b.attprojw = s[k++];
    b.attprojb = o_bias(c) ? s[k++] : NULL;
    b.ln2w = s[k++];
    b.fcw = s[k++];
    b.fcprojw = s[k++];
    b.postw = gemma(c) ? s[k++] : NULL;
    return b;
}

/* ---- the activations (llama's, and Qwen3's pre-norm projections with their rstd) ---- */

#define F(f, flags, attn) {#f, offsetof(llama_layer_acts, f), flags, attn}
enum { R = HPT_FIELD_RECOMPUTE, S = HPT_FIELD_STORE, O = HPT_FIELD_OUTPUT, M = HPT_FIELD_MLP };
#define LLAMA_FIELDS                                                                              \
    F(ln1, R | S, -1), F(ln1_rstd, 0, -1), F(qkv, S, -1), F(atty, S, -1),                         \
        F(att, R | S, HPT_ATTN_PLAIN), F(att_lse, 0, HPT_ATTN_FLASH), F(res2, S, -1),             \
        F(ln2, R | S, -1), F(ln2_rstd, 0, -1), F(fch, S | M, -1), F(fch_swi, R | S | M, -1),     \
        F(res3, O, -1)
static const hpt_arch_field k_fields2[] = {LLAMA_FIELDS};
static const hpt_arch_field k_fields3[] = {LLAMA_FIELDS, F(qkvr, S, -1), F(qk_rstd, 0, -1)};
#undef LLAMA_FIELDS
#undef F

/* A saved field's rows and width by its offset in llama_layer_acts (Gemma 3's too): Qwen3's
 * fields with the head width hd; Gemma's wone and its post-norms' rstd */
void llama_hd_field_shape(const hpt_arch_ctx *x, size_t off, size_t *rows, size_t *w) {
    const hpt_model_config *c = x->cfg;
    const size_t heads = (size_t)x->B * (size_t)c->NH * (size_t)x->T;
    *rows = (size_t)x->B * x->T;
    switch (off) {
    case offsetof(llama_layer_acts, qkv):
    case offsetof(llama_layer_acts, qkvr): *w = (size_t)qkv_of(c); return;
    case offsetof(llama_layer_acts, atty): *w = (size_t)att_of(c); return;
    case offsetof(llama_layer_acts, qk_rstd): *w = (size_t)(c->NH + c->NKV); return;
    case offsetof(llama_layer_acts, fch): *w = 2 * (size_t)c->FF; return;
    case offsetof(llama_layer_acts, fch_swi): *w = (size_t)c->FF; return;
    case offsetof(llama_layer_acts, ln1_rstd):
    case offsetof(llama_layer_acts, ln2_rstd):
    case offsetof(llama_layer_acts, attp_rstd):
    case offsetof(llama_layer_acts, mlpo_rstd): *w = 1; return;
    case offsetof(llama_layer_acts, att): *rows = heads; *w = (size_t)x->T; return;
    case offsetof(llama_layer_acts, att_lse): *rows = heads; *w = 1; return;
    case offsetof(llama_layer_acts, wone): *rows = 1; *w = 4 * (size_t)c->C + 2 * (size_t)hd_of(c); return;
    default: *w = (size_t)c->C; return; /* ln1, res2, ln2, res3; Gemma's attp, mlpo */
    }
}
static void field_shape(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w) {
    llama_hd_field_shape(x, k_fields3[i].off, rows, w); /* k_fields2 is k_fields3's beginning */
}

/* A non-block buffer's rows and width by its offset in llama_acts (Gemma 3's too).
 * dsmall: d of ln2 (C) and of atty (A); dmid: d of fch_swi (FF) and, with the q/k norms, of
 * qkvr (QKV); dbig: d of fch (2FF) and of qkv (QKV); lnf1: Gemma's 1 + lnfw */
void llama_hd_global_shape(const hpt_arch_ctx *x, size_t off, size_t *rows, size_t *w) {
    const hpt_model_config *c = x->cfg;
    const size_t C = (size_t)c->C, QKV = (size_t)qkv_of(c), FF = (size_t)c->FF;
    *rows = (size_t)x->B * x->T;
    switch (off) {
    case offsetof(llama_acts, inputs):
    case offsetof(llama_acts, targets):
    case offsetof(llama_acts, lnf_rstd):
    case offsetof(llama_acts, lse):
    case offsetof(llama_acts, losses): *w = 1; return;
    case offsetof(llama_acts, zpos): *rows = (size_t)x->T; *w = C; return;
    case offsetof(llama_acts, logits): *rows = x->head_rows; *w = x->logit_cols; return;
    case offsetof(llama_acts, dsmall): *w = HPT_MAX(C, (size_t)att_of(c)); return;
    case offsetof(llama_acts, dmid): /* tiled: one tile's (rows, FF) or Qwen3's and Gemma's (B*T, QKV) */
        *w = c->arch != HPT_ARCH_QWEN2 ? HPT_MAX(FF, QKV) : FF;
        if (x->mlp_rows && (c->arch == HPT_ARCH_QWEN2 || x->mlp_rows * FF > *rows * QKV)) *rows = x->mlp_rows, *w = FF;
        else if (x->mlp_rows) *w = QKV;
        return;
    case offsetof(llama_acts, dbig): llama_dbig_shape(x, QKV, rows, w); return;
    case offsetof(llama_acts, mlph):
    case offsetof(llama_acts, mlph_b): *rows = x->mlp_rows; *w = 2 * FF; return;
    case offsetof(llama_acts, mlpy):
    case offsetof(llama_acts, mlpy_b): *rows = x->mlp_rows; *w = FF; return;
    case offsetof(llama_acts, mlpx_b): *rows = 0; *w = C; return; /* llama's own */
    case offsetof(llama_acts, attscr): *rows = (size_t)x->B * (size_t)c->NH; *w = (size_t)x->T; return;
    case offsetof(llama_acts, lnf1): *rows = 1; *w = C; return;
    default: *w = C; return; /* encoded, lnf, dres */
    }
}
static void global_shape(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w) {
    llama_hd_global_shape(x, llama_globals[i].off, rows, w);
}

/* ---- the embedding, the final norm and the head: llama's (the same layout and maths) ---- */

static void embed_forward(const hpt_arch_ctx *x, const void *p, void *a) {
    hpt_arch_llama.embed_forward(x, p, a);
}
static void embed_backward(const hpt_arch_ctx *x, void *g, const void *a) {
    hpt_arch_llama.embed_backward(x, g, a);
}
static void final_forward(const hpt_arch_ctx *x, const void *p, void *a, const float *out) {
    hpt_arch_llama.final_forward(x, p, a, out);
}
static float head_forward(const hpt_arch_ctx *x, const void *p, void *a, int has_targets) {
    return hpt_arch_llama.head_forward(x, p, a, has_targets);
}
static void head_backward(const hpt_arch_ctx *x, const void *p, void *g, void *a) {
    hpt_arch_llama.head_backward(x, p, g, a);
}
static void final_backward(const hpt_arch_ctx *x, const void *p, void *g, void *a, const float *out) {
    hpt_arch_llama.final_backward(x, p, g, a, out);
}

/* ---- Qwen3's per-head norms of q and k, token by token (Gemma 3's too: llama_int.h) ---- */

void llama_qk_norm_forward(const hpt_backend *be, const hpt_model_config *c, float *qkv,
                           float *rstd, const float *qkvr, const float *qknw, float qscale,
                           int64_t BT) {
    const int NH = c->NH, NKV = c->NKV, hd = (int)hd_of(c);
    const size_t QKV = (size_t)qkv_of(c), KO = (size_t)NH * (size_t)hd, NR = (size_t)(NH + NKV);
    be->copy(qkv, qkvr, (size_t)BT * QKV * sizeof(float), HPT_COPY_D2D);
    for (int64_t r = 0; r < BT; r++) {
        const size_t o = (size_t)r * QKV;
        be->rmsnorm_forward(qkv + o, rstd + (size_t)r * NR, qkvr + o, qknw, NH, hd, c->norm_eps);
        if (qscale != 1.0f) be->scale(qkv + o, KO, qscale);
        be->rmsnorm_forward(qkv + o + KO, rstd + (size_t)r * NR + NH, qkvr + o + KO, qknw + hd,
                            NKV, hd, c->norm_eps);
    }
}

void llama_qk_norm_backward(const hpt_backend *be, const hpt_model_config *c, float *draw,
                            float *dqknw, float *dqkv, const float *qkvr, const float *qknw,
                            const float *rstd, float qscale, int64_t BT) {
    const int NH = c->NH, NKV = c->NKV, hd = (int)hd_of(c);
    const size_t QKV = (size_t)qkv_of(c), KO = (size_t)NH * (size_t)hd, NR = (size_t)(NH + NKV);
    be->copy(draw, dqkv, (size_t)BT * QKV * sizeof(float), HPT_COPY_D2D);
    for (int64_t r = 0; r < BT; r++) {
        const size_t o = (size_t)r * QKV;
        be->memset(draw + o, 0, NR * (size_t)hd * sizeof(float)); /* the op adds (dinp +=) */
        if (qscale != 1.0f) be->scale(dqkv + o, KO, qscale);
        be->rmsnorm_backward(draw + o, dqknw, dqkv + o, qkvr + o, qknw, rstd + (size_t)r * NR, NH, hd);
        be->rmsnorm_backward(draw + o + KO, dqknw + hd, dqkv + o + KO, qkvr + o + KO, qknw + hd,
                             rstd + (size_t)r * NR + NH, NKV, hd);
    }
}

/* ---- one block: forward ---- */

static void block_forward(const hpt_arch_ctx *x, float *const *w, void *lav, const float *residual,
                          int with_res3) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    const llama_tensors *k = x->params;
    const int B = x->B, T = x->T, C = c->C, NH = c->NH, NKV = c->NKV, FF = c->FF;
    const int hd = (int)hd_of(c), A = (int)att_of(c);
    const int64_t BT = (int64_t)B * T, QKV = qkv_of(c);
    const llama_hd_block pb = llama_hd_block_of(c, w), *p = &pb;
    llama_layer_acts *la = lav;
    /* ln1 (B, T, C) = rmsnorm(residual) * ln1w */
    be->rmsnorm_forward(la->ln1, la->ln1_rstd, residual, p->ln1w, BT, C, c->norm_eps);
    /* qkv (B, T, QKV) = ln1 @ qkvw^T (+ qkvb); Qwen3: into qkvr, then the per-head norms */
    if (qk_norm(c)) {
        arch_linear_forward(x, la->qkvr, la->ln1, p->qkvw, p->qkvb, BT, C, QKV, 0);
        llama_qk_norm_forward(be, c, la->qkv, la->qk_rstd, la->qkvr, p->qknw, 1.0f, BT);
    } else {
        arch_linear_forward(x, la->qkv, la->ln1, p->qkvw, p->qkvb, BT, C, QKV, 0);
    }
    /* q and k rotated in place */
    hpt_rope_fwd(x, la->qkv, k->rope_cos, k->rope_sin, NH, NKV, hd);
    /* atty (B, T, A) = attention(q, k, v), kv head h / (NH / NKV) for query head h */
    x->attn->forward(be, la->atty, la->att, la->att_lse, la->qkv, B, T, A, NH, NKV, x->pos, 0);
    /* res2 (B, T, C) = residual + atty @ attprojw^T (+ attprojb) */
    be->copy(la->res2, residual, (size_t)BT * C * sizeof(float), HPT_COPY_D2D);
    arch_linear_forward(x, la->res2, la->atty, p->attprojw, p->attprojb, BT, A, C, 1);
    /* ln2 (B, T, C) = rmsnorm(res2) * ln2w */
    be->rmsnorm_forward(la->ln2, la->ln2_rstd, la->res2, p->ln2w, BT, C, c->norm_eps);
    if (x->mlp_rows) { /* tiled: res3 = res2 + the MLP tile by tile (a recomputation: none) */
        if (!with_res3) return;
        const arch_mlp mlp = llama_mlp(c, p->fcw, NULL, p->fcprojw, NULL);
        const llama_acts *a = x->acts;
        be->copy(la->res3, la->res2, (size_t)BT * C * sizeof(float), HPT_COPY_D2D);
        arch_mlp_forward(x, &mlp, la->res3, la->ln2, x->in_backward ? a->mlph_b : a->mlph,
                         x->in_backward ? a->mlpy_b : a->mlpy);
        return;
    }
    /* fch (B, T, 2FF) = ln2 @ fcw^T = [gate | up]; fch_swi (B, T, FF) = silu(gate) * up */
    arch_linear_forward(x, la->fch, la->ln2, p->fcw, NULL, BT, C, 2 * (int64_t)FF, 0);
    be->swiglu_forward(la->fch_swi, la->fch, BT, FF);
    if (!with_res3) return;
    /* res3 (B, T, C) = res2 + fch_swi @ fcprojw^T */
    be->copy(la->res3, la->res2, (size_t)BT * C * sizeof(float), HPT_COPY_D2D);
    arch_linear_forward(x, la->res3, la->fch_swi, p->fcprojw, NULL, BT, FF, C, 1);
}

/* Rebuilds ln1, att (plain attention), ln2 and fch_swi from what the forward kept, with the
 * forward's kernels on the forward's inputs: the same bits. */
static void block_recompute(const hpt_arch_ctx *x, float *const *w, void *lav, const float *residual) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    const int B = x->B, T = x->T, C = c->C;
    const int64_t BT = (int64_t)B * T;
    const llama_hd_block pb = llama_hd_block_of(c, w), *p = &pb;
    llama_layer_acts *la = lav;
    be->rmsnorm_apply(la->ln1, residual, p->ln1w, la->ln1_rstd, BT, C);
    x->attn->rebuild(be, la->atty, la->att, la->att_lse, la->qkv, B, T, (int)att_of(c), c->NH,
                     c->NKV, x->pos, 0);
    be->rmsnorm_apply(la->ln2, la->res2, p->ln2w, la->ln2_rstd, BT, C);
    if (!x->mlp_rows) be->swiglu_forward(la->fch_swi, la->fch, BT, c->FF); /* tiled: per tile */
}

/* ---- one block: backward (a->dres: the gradient of the block's output in, of its input out) ---- */

static void block_backward(const hpt_arch_ctx *x, float *const *w, float *const *dw,
                           const void *lav, const float *residual, void *av) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    const llama_tensors *k = x->params;
    const int B = x->B, T = x->T, C = c->C, NH = c->NH, NKV = c->NKV, FF = c->FF;
    const int hd = (int)hd_of(c), A = (int)att_of(c);
    const int64_t BT = (int64_t)B * T, QKV = qkv_of(c);
    const llama_hd_block pb = llama_hd_block_of(c, w), gb = llama_hd_block_of(c, dw);
    const llama_hd_block *p = &pb, *g = &gb;
    const llama_layer_acts *la = lav;
    llama_acts *a = av;
    if (x->mlp_rows) { /* tiled: dln2 into dsmall tile by tile; dres flows to res2 unchanged */
        arch_mlp mlp = llama_mlp(c, p->fcw, NULL, p->fcprojw, NULL);
        mlp.dw1 = g->fcw, mlp.dw2 = g->fcprojw;
        arch_mlp_backward(x, &mlp, a->dsmall, a->dres, la->ln2, a->mlph_b, a->mlpy_b, a->dmid, a->dbig);
    } else {
        /* res3 = res2 + fch_swi @ fcprojw^T; dres flows to res2 unchanged */
        arch_linear_backward(x, a->dmid, g->fcprojw, NULL, a->dres, la->fch_swi, p->fcprojw, BT,
                            FF, C, 0);
        /* fch_swi = silu(gate) * up: d[gate | up] (B, T, 2FF) into dbig */
        be->swiglu_backward(a->dbig, a->dmid, la->fch, BT, FF);
        /* fch = ln2 @ fcw^T */
        arch_linear_backward(x, a->dsmall, g->fcw, NULL, a->dbig, la->ln2, p->fcw, BT, C,
                            2 * (int64_t)FF, 0);
    }
    /* ln2 = rmsnorm(res2) * ln2w: dres += */
    be->rmsnorm_backward(a->dres, g->ln2w, a->dsmall, la->res2, p->ln2w, la->ln2_rstd, BT, C);
    /* res2 = residual + atty @ attprojw^T (+ attprojb): datty (B, T, A) into dsmall */
    arch_linear_backward(x, a->dsmall, g->attprojw, g->attprojb, a->dres, la->atty, p->attprojw, BT,
                        A, C, 0);
    /* atty = attention(qkv); dqkv (B, T, QKV) into dbig, dk and dv summed over each group */
    x->attn->backward(be, a->dbig, a->attscr, a->dsmall, la->qkv, la->atty, la->att, la->att_lse,
                      B, T, A, NH, NKV, x->pos, 0);
    /* q, k = rope(q, k): the transpose rotation */
    hpt_rope_bwd(x, a->dbig, k->rope_cos, k->rope_sin, NH, NKV, hd);
    /* Qwen3: q, k = the per-head norms of qkvr's: d qkvr (B, T, QKV) into dmid */
    const float *dproj = a->dbig;
    if (qk_norm(c)) {
        llama_qk_norm_backward(be, c, a->dmid, g->qknw, a->dbig, la->qkvr, p->qknw, la->qk_rstd, 1.0f,
                               BT);
        dproj = a->dmid;
    }
    /* qkv (or qkvr) = ln1 @ qkvw^T (+ qkvb) */
    arch_linear_backward(x, a->dsmall, g->qkvw, g->qkvb, dproj, la->ln1, p->qkvw, BT, C, QKV, 0);
    /* ln1 = rmsnorm(residual) * ln1w: dres += */
    be->rmsnorm_backward(a->dres, g->ln1w, a->dsmall, residual, p->ln1w, la->ln1_rstd, BT, C);
}

/* ---- Hugging Face: Qwen2ForCausalLM, Qwen3ForCausalLM (asked by io/hfconfig.c and
 * io/hfmodel.c) ---- */

static const char *const k_hf_classes2[] = {"Qwen2ForCausalLM", NULL};
static const char *const k_hf_types2[] = {"qwen2", NULL};
static const char *const k_hf_classes3[] = {"Qwen3ForCausalLM", NULL};
static const char *const k_hf_types3[] = {"qwen3", NULL};
static const char *const k_hf_ignore[] = {".rotary_emb.inv_freq", NULL};

/* rope_scaling or rope_parameters (which may hold rope_theta): only the default rotation */
static hpt_status hf_rope(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                          hpt_model_config *c) {
    const hpt_hf_json *rs;
    const char *key = "rope_parameters";
    HPT_CHECK(J->obj(r, key, what, &rs));
    if (!rs) { key = "rope_scaling"; HPT_CHECK(J->obj(r, key, what, &rs)); }
    if (!rs) return HPT_OK;
    if (J->has(rs, "rope_theta")) HPT_CHECK(J->get_float(rs, "rope_theta", 0, what, &c->rope_theta));
    const char *type = J->has(rs, "rope_type") ? J->get_str(rs, "rope_type") : J->get_str(rs, "type");
    if (type && strcmp(type, "default"))
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: %s.rope_type '%s': hptrain's qwen knows only "
                       "'default'", what, key, type);
    return HPT_OK;
}

/* hidden_size, intermediate_size, num_attention_heads, num_key_value_heads (default: the heads),
 * num_hidden_layers, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta,
 * tie_word_embeddings, initializer_range (defaults: Qwen2Config's and Qwen3Config's); Qwen3:
 * head_dim (default 128) and attention_bias; hidden_act only SiLU; use_sliding_window only
 * false (the sliding window is not modelled) */
static hpt_status hf_config_read(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                                 hpt_model_config *c, int arch) {
    memset(c, 0, sizeof *c);
    c->arch = arch;
    HPT_CHECK(J->get_int(r, "hidden_size", -1, 1, 1 << 20, what, &c->C));
    HPT_CHECK(J->get_int(r, "intermediate_size", -1, 1, 1 << 22, what, &c->FF));
    HPT_CHECK(J->get_int(r, "num_hidden_layers", -1, 1, 1 << 16, what, &c->L));
    HPT_CHECK(J->get_int(r, "num_attention_heads", -1, 1, 1 << 16, what, &c->NH));
    HPT_CHECK(J->get_int(r, "num_key_value_heads", c->NH, 1, 1 << 16, what, &c->NKV));
    HPT_CHECK(J->get_int(r, "vocab_size", 151936, 1, 1 << 28, what, &c->V));
    HPT_CHECK(J->get_int(r, "max_position_embeddings", 32768, 1, 1 << 24, what, &c->maxT));
    HPT_CHECK(J->get_float(r, "rms_norm_eps", 1e-6, what, &c->norm_eps));
    HPT_CHECK(J->get_float(r, "rope_theta", 10000, what, &c->rope_theta));
    HPT_CHECK(J->get_float(r, "initializer_range", 0.02, what, &c->init_range));
    HPT_CHECK(J->get_bool(r, "tie_word_embeddings", 0, what, &c->tied));
    HPT_CHECK(hf_rope(J, r, what, c));
    if (c->NH % c->NKV)
        return J->fail(HPT_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of "
                       "num_key_value_heads %d", what, c->NH, c->NKV);
    int hd, sliding;
    if (arch == HPT_ARCH_QWEN3) {
        HPT_CHECK(J->get_int(r, "head_dim", 128, 2, 1 << 16, what, &hd));
        HPT_CHECK(J->get_bool(r, "attention_bias", 0, what, &c->attn_bias));
        c->hd = hd;
    } else {
        c->attn_bias = 1;
        if (c->C % c->NH)
            return J->fail(HPT_ERR_FORMAT, "%s: hidden_size %d is not a multiple of "
                           "num_attention_heads %d", what, c->C, c->NH);
        HPT_CHECK(J->get_int(r, "head_dim", c->C / c->NH, 1, 1 << 16, what, &hd));
        if (hd != c->C / c->NH)
            return J->fail(HPT_ERR_UNSUPPORTED, "%s: head_dim %d differs from hidden_size / "
                           "num_attention_heads = %d: Qwen2's are equal", what, hd, c->C / c->NH);
    }
    HPT_CHECK(J->get_bool(r, "use_sliding_window", 0, what, &sliding));
    if (sliding)
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: use_sliding_window: hptrain's qwen attends to "
                       "every earlier position", what);
    const char *act = J->get_str(r, "hidden_act");
    if (J->has(r, "hidden_act") && (!act || strcmp(act, "silu")))
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: hidden_act '%s': hptrain's qwen uses SiLU",
                       what, act ? act : "?");
    return HPT_OK;
}
static hpt_status hf_config_read2(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                                  hpt_model_config *c) {
    return hf_config_read(J, r, what, c, HPT_ARCH_QWEN2);
}
static hpt_status hf_config_read3(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                                  hpt_model_config *c) {
    return hf_config_read(J, r, what, c, HPT_ARCH_QWEN3);
}

void llama_hd_config_write(const hpt_hf_json_ops *J, hpt_hf_json *r, const hpt_model_config *c) {
    J->put_int(r, "hidden_size", c->C);
    J->put_int(r, "intermediate_size", c->FF);
    J->put_int(r, "num_hidden_layers", c->L);
    J->put_int(r, "num_attention_heads", c->NH);
    J->put_int(r, "num_key_value_heads", c->NKV);
    J->put_int(r, "head_dim", (double)hd_of(c));
    J->put_int(r, "max_position_embeddings", c->maxT);
    J->put_float(r, "rms_norm_eps", c->norm_eps);
    J->put_float(r, "rope_theta", c->rope_theta);
}

static void hf_config_write(const hpt_hf_json_ops *J, hpt_hf_json *r, const hpt_model_config *c,
                            const char *cls) {
    (void)cls;
    J->put_str(r, "model_type", qk_norm(c) ? "qwen3" : "qwen2");
    J->put_str(r, "hidden_act", "silu");
    llama_hd_config_write(J, r, c);
    J->put_null(r, "rope_scaling");
    J->put_bool(r, "use_sliding_window", 0);
    if (qk_norm(c)) J->put_bool(r, "attention_bias", c->attn_bias);
}

/* table name -> the Hugging Face tensors its rows concatenate (under model.layers.{l}.) */
static const llama_hf_name k_hf_names[] = {
    {"ln1w", {"input_layernorm.weight"}}, {"ln2w", {"post_attention_layernorm.weight"}},
    LLAMA_HD_HF_NAMES,
};

static int hf_parts(const hpt_model_config *c, const hpt_tensor_desc *d, int l, const char *prefix,
                    hpt_hf_part *p) {
    (void)prefix; /* the hub's qwen files name everything in full */
    return llama_hf_parts(c, d, l, k_hf_names, (int)(sizeof k_hf_names / sizeof *k_hf_names),
                          hd_of(c), p);
}

/* every name llama_descs may give (verify's report outlives the model) */
static const char *const k_param_names[] = {
    "wte", "ln1w", "qkvw", "qkvb", "qknw", "attprojw", "attprojb", "ln2w", "fcw", "fcprojw",
    "lnfw", "lm_head", NULL};

/* ---- shapes (model/config.c routes "qwen2..." and "qwen3..." here, then checks) ---- */

static hpt_status config_check(const hpt_model_config *c) {
    const char *fam = qk_norm(c) ? "qwen3" : "qwen2";
    hpt_model_config k = *c;
    if (c->hd && qk_norm(c)) k.C = c->NH; /* Qwen3's widths need not divide: checked below */
    HPT_CHECK(model_config_check_common(&k, fam));
    if (c->C > 65536) return hpt_fail(HPT_ERR_SHAPE, "%s shape too large (C=%d)", fam, c->C);
    const int64_t hd = hd_of(c);
    if (c->hd && !qk_norm(c) && c->hd != c->C / c->NH)
        return hpt_fail(HPT_ERR_SHAPE, "qwen2's head width is C/NH=%d, not hd=%d", c->C / c->NH, c->hd);
    if (c->hd < 0 || hd < 2 || hd > 1024 || att_of(c) > 65536)
        return hpt_fail(HPT_ERR_SHAPE, "bad %s head width hd=%lld (NH=%d)", fam, (long long)hd, c->NH);
    if (c->NKV < 1 || c->NH % c->NKV != 0)
        return hpt_fail(HPT_ERR_SHAPE, "query heads NH=%d are not a multiple of key/value heads "
                        "NKV=%d", c->NH, c->NKV);
    if (hd % 2 != 0)
        return hpt_fail(HPT_ERR_SHAPE, "head width %lld is odd: rotary embeddings rotate pairs",
                        (long long)hd);
    if (c->FF < 1 || c->FF > 1048576) return hpt_fail(HPT_ERR_SHAPE, "bad MLP width FF=%d", c->FF);
    if (!qk_norm(c) && !c->attn_bias)
        return hpt_fail(HPT_ERR_SHAPE, "qwen2 has q/k/v biases (attn_bias=1)");
    if (c->mlp_bias || c->rope_factor != 0.0f)
        return hpt_fail(HPT_ERR_SHAPE, "%s has no MLP biases and no rope scaling", fam);
    if (!(c->norm_eps > 0.0f) || !(c->rope_theta > 1.0f) || !isfinite(c->rope_theta) ||
        !(c->init_range >= 0.0f))
        return hpt_fail(HPT_ERR_SHAPE, "bad %s constants eps=%g theta=%g range=%g", fam,
                        (double)c->norm_eps, (double)c->rope_theta, (double)c->init_range);
    return HPT_OK;
}

/* Qwen2 implies its q/k/v biases (a hand-written configuration may leave them 0) */
static void config_fill2(hpt_model_config *c) { c->attn_bias = 1; }

static hpt_status qwen_key(hpt_model_config *c, const char *key, double v, const char *shape) {
    static const model_int_key ints[] = {
        {"L", offsetof(hpt_model_config, L), 1},       {"C", offsetof(hpt_model_config, C), 1},
        {"NH", offsetof(hpt_model_config, NH), 1},     {"NKV", offsetof(hpt_model_config, NKV), 1},
        {"FF", offsetof(hpt_model_config, FF), 1},     {"V", offsetof(hpt_model_config, V), 1},
        {"Vp", offsetof(hpt_model_config, Vp), 1},     {"T", offsetof(hpt_model_config, maxT), 1},
        {"maxT", offsetof(hpt_model_config, maxT), 1}, {"hd", offsetof(hpt_model_config, hd), 2},
        {"tied", offsetof(hpt_model_config, tied), 0}, {"attn_bias", offsetof(hpt_model_config, attn_bias), 0}};
    static const model_float_key floats[] = {
        {"theta", offsetof(hpt_model_config, rope_theta)}, {"eps", offsetof(hpt_model_config, norm_eps)},
        {"range", offsetof(hpt_model_config, init_range)}};
    HPT_CHECK(model_shape_key(c, key, v, shape, ints, sizeof ints / sizeof ints[0], floats,
                              sizeof floats / sizeof floats[0], "L, C, NH, NKV, FF, V, Vp, T, hd, "
                              "theta, eps, tied, attn_bias, range"));
    if (!strcmp(key, "attn_bias") && !c->attn_bias && c->arch == HPT_ARCH_QWEN2)
        return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': qwen2 has its q/k/v biases", shape);
    return HPT_OK;
}

/* The named shapes, from their published config.json files (Hugging Face hub, Qwen/...):
 * Qwen2.5-0.5B, -1.5B, -7B; Qwen3-0.6B, -1.7B, -4B, -8B. All: rms_norm_eps 1e-6, rope_theta
 * 1000000, initializer_range 0.02, no rope scaling, no sliding window. Qwen3: head_dim 128.
 * Parameter counts (tests/test_qwen.c): docs/qwen.md. */
static const struct {
    const char *name;
    int arch, L, C, NH, NKV, hd, FF, V, maxT, tied;
} k_qwen[] = {
    {"qwen2.5-0.5b", HPT_ARCH_QWEN2, 24, 896, 14, 2, 0, 4864, 151936, 32768, 1},
    {"qwen2.5-1.5b", HPT_ARCH_QWEN2, 28, 1536, 12, 2, 0, 8960, 151936, 131072, 1},
    {"qwen2.5-7b", HPT_ARCH_QWEN2, 28, 3584, 28, 4, 0, 18944, 152064, 131072, 0},
    {"qwen3-0.6b", HPT_ARCH_QWEN3, 28, 1024, 16, 8, 128, 3072, 151936, 40960, 1},
    {"qwen3-1.7b", HPT_ARCH_QWEN3, 28, 2048, 16, 8, 128, 6144, 151936, 40960, 1},
    {"qwen3-4b", HPT_ARCH_QWEN3, 36, 2560, 32, 8, 128, 9728, 151936, 40960, 1},
    {"qwen3-8b", HPT_ARCH_QWEN3, 36, 4096, 32, 8, 128, 12288, 151936, 40960, 0},
};

/* A custom shape takes Qwen2Config's and Qwen3Config's defaults (V 151936, T 32768, theta 10000,
 * eps 1e-6, untied; Qwen2 with its q/k/v biases), but hd C/NH unless given (Qwen3Config's 128
 * would not fit the small shapes tests make). */
static hpt_status shape_parse(const char *shape, hpt_model_config *out, int arch) {
    hpt_model_config c = {.arch = arch, .V = 151936, .maxT = 32768, .norm_eps = 1e-6f,
                          .rope_theta = 10000.0f, .init_range = 0.02f,
                          .attn_bias = arch == HPT_ARCH_QWEN2};
    const char *prefix = arch == HPT_ARCH_QWEN3 ? "qwen3:" : "qwen2:";
    for (size_t i = 0; i < sizeof k_qwen / sizeof k_qwen[0]; i++)
        if (!strcmp(shape, k_qwen[i].name) && k_qwen[i].arch == arch) {
            c.L = k_qwen[i].L; c.C = k_qwen[i].C; c.NH = k_qwen[i].NH; c.NKV = k_qwen[i].NKV;
            c.hd = k_qwen[i].hd; c.FF = k_qwen[i].FF; c.V = k_qwen[i].V;
            c.maxT = k_qwen[i].maxT; c.tied = k_qwen[i].tied; c.rope_theta = 1000000.0f;
            *out = c;
            return HPT_OK;
        }
    if (strncmp(shape, prefix, 6) != 0)
        return hpt_fail(HPT_ERR_INVALID, "unknown model shape '%s' (use %s or "
                        "%sL=..,C=..,NH=..,FF=..[,NKV=..][,hd=..][,V=..][,T=..][,theta=..])", shape,
                        arch == HPT_ARCH_QWEN3 ? "qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b"
                                               : "qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b", prefix);
    HPT_CHECK(model_shape_kv(shape, shape + 6, &c, qwen_key));
    if (!c.L || !c.C || !c.NH || !c.FF)
        return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': L, C, NH and FF are required", shape);
    if (!c.NKV) c.NKV = c.NH;
    *out = c;
    return HPT_OK;
}
static hpt_status shape_parse2(const char *shape, hpt_model_config *out) {
    return shape_parse(shape, out, HPT_ARCH_QWEN2);
}
static hpt_status shape_parse3(const char *shape, hpt_model_config *out) {
    return shape_parse(shape, out, HPT_ARCH_QWEN3);
}

/* LoRA's view of a block (model/lora.c): q, k, v share qkvw (q NH*hd rows, k and v NKV*hd),
 * gate and up fcw; o's input is NH*hd wide (Gemma 3's too: llama_int.h) */
int llama_linears_hd(const hpt_model_config *c, hpt_arch_linear o[HPT_ARCH_MAX_LINEARS]) {
    const int64_t C = c->C, q = att_of(c), kv = c->NKV * hd_of(c), FF = c->FF;
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

static const char *const k_prefixes2[] = {"qwen2", NULL};
static const char *const k_prefixes3[] = {"qwen3", NULL};

/* The two architectures: the same ops; Qwen3's block saves its pre-norm projections too. The
 * planner costs them at the reference block's rates (plan NULL). */
#define QWEN_ARCH(nm, flds, prefixes, parse, fill, classes, types, read, lbl, shp)              \
    {                                                                                             \
        .name = nm, .describe = describe, .flops_per_token = llama_hd_flops_per_token,                     \
        .n_fields = (int)(sizeof flds / sizeof flds[0]), .fields = flds,                          \
        .block_acts_size = sizeof(llama_layer_acts), .field_shape = field_shape,                  \
        .n_globals = LLAMA_N_GLOBALS, .globals = llama_globals,         \
        .acts_size = sizeof(llama_acts), .global_shape = global_shape,                            \
        .off_inputs = offsetof(llama_acts, inputs), .off_targets = offsetof(llama_acts, targets), \
        .off_encoded = offsetof(llama_acts, encoded), .off_logits = offsetof(llama_acts, logits), \
        .point = point, .consts_floats = consts_floats, .consts_fill = consts_fill,               \
        .embed_forward = embed_forward, .embed_backward = embed_backward,                         \
        .block_forward = block_forward, .block_recompute = block_recompute,                       \
        .block_backward = block_backward, .final_forward = final_forward,                         \
        .head_forward = head_forward, .head_backward = head_backward,                             \
        .final_backward = final_backward, .shape_prefixes = prefixes, .shape_parse = parse,       \
        .config_check = config_check, .config_fill = fill, .hf_classes = classes,                 \
        .hf_model_types = types, .hf_config_read = read, .hf_config_write = hf_config_write,      \
        .hf_parts = hf_parts, .hf_embed_name = "model.embed_tokens.weight",                       \
        .hf_head_name = "lm_head.weight", .hf_ignore = k_hf_ignore, .hf_eot = 151643,             \
        .desc = {.name = nm, .label = lbl, .shapes = shp}, .plan = NULL,                          \
        .param_names = k_param_names, .linears = llama_linears_hd, .hf_block = "model.layers.%d.",        \
    }

const hpt_arch hpt_arch_qwen2 =
    QWEN_ARCH("qwen2", k_fields2, k_prefixes2, shape_parse2, config_fill2, k_hf_classes2,
              k_hf_types2, hf_config_read2, "Qwen2",
              "qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, qwen2:L=..,C=..,NH=..,FF=..[,NKV=..][,V=..]"
              "[,T=..][,theta=..]");
const hpt_arch hpt_arch_qwen3 =
    QWEN_ARCH("qwen3", k_fields3, k_prefixes3, shape_parse3, NULL, k_hf_classes3, k_hf_types3,
              hf_config_read3, "Qwen3",
              "qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3:L=..,C=..,NH=..,FF=..[,NKV=..]"
              "[,hd=..][,V=..][,T=..][,theta=..]");
