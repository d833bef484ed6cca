/* gemma.c: Gemma 3's text models (Hugging Face Gemma3ForCausalLM) in the architecture interface
 * (model/arch.h), on llama's layout (model/llama_int.h) and Qwen3's per-head q/k norms:
 *   encoded = wte[inputs] * sqrt(C); every RMSNorm multiplies by (1 + w), w stored as the hub
 *   stores it (0 at initialisation); per block l:
 *     n = norm(x; ln1w); [q | k | v] = n @ qkvw^T (+ qkvb); q_h = norm(q_h; q_norm) *
 *     sqrt(hd / attn_scalar), k_h = norm(k_h; k_norm); q, k rotated with the local tables
 *     (rope_local_theta) on local layers, the global ones (rope_theta, linear scaling
 *     rope_factor) on global layers; local layers attend to their last `window` keys;
 *     x += norm(o_proj(attention); post_attention); m = norm(x; ln2w) (pre_feedforward);
 *     x += norm(down(gelu_tanh(gate(m)) * up(m)); post_feedforward)
 *   lnf = norm(x; lnfw); logits = lnf @ wte^T (tied) or lm_head.
 * Every global layer is the swa_pattern-th (l + 1 a multiple of it), the others local
 * (docs/gemma.md). The block's (1 + w) weights live in its field wone, the final norm's in the
 * buffer lnf1. Invariants: gradients accumulate (+=); every op goes through x->be. */
#include "core/core.h"
#include "model/arch.h"
#include "model/llama_int.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- the parameters ---- */

static int64_t hd_of(const hpt_model_config *c) { return c->hd ? c->hd : c->C / c->NH; }
static int64_t att_of(const hpt_model_config *c) { return c->NH * hd_of(c); } /* A */
static int64_t qkv_of(const hpt_model_config *c) { return (c->NH + 2 * (int64_t)c->NKV) * hd_of(c); }
static int is_local(const hpt_model_config *c, int l) {
    return c->swa_pattern > 0 && (l + 1) % c->swa_pattern != 0;
}
/* sqrt(hd / attn_scalar): the attention kernels scale by hd^-1/2, Gemma by attn_scalar^-1/2 */
static float qscale_of(const hpt_model_config *c) {
    return c->attn_scalar > 0.0f ? (float)sqrt((double)hd_of(c) / (double)c->attn_scalar) : 1.0f;
}

/* the table: llama_hd_descs's (qwen.c), with qknw and postw */
static void describe(const hpt_model_config *cfg, hpt_tensor_table *out) {
    llama_desc d[LLAMA_HD_DESCS];
    llama_describe_descs(d, llama_hd_descs(cfg, d), cfg, out);
}

/* ---- the rotary tables: global cos, sin then local cos, sin, (maxT, hd/2) each ---- */

static size_t consts_floats(const hpt_model_config *c) { return 2 * (size_t)c->maxT * (size_t)hd_of(c); }

static void consts_fill(const hpt_model_config *c, float *host) {
    hpt_model_config k = *c;
    k.rope_factor = 0.0f; /* Gemma's factor is linear scaling, not Llama 3's */
    const double linear = c->rope_factor > 0.0f ? (double)c->rope_factor : 1.0;
    llama_rope_fill(&k, hd_of(c), (double)c->rope_theta, linear, host);
    llama_rope_fill(&k, hd_of(c), (double)c->rope_local_theta, 1.0, host + consts_floats(c) / 2);
}

static void point(const hpt_model_config *cfg, const hpt_tensor_table *t, float *const *tp,
                  const float *consts, void *outv) {
    llama_desc d[LLAMA_HD_DESCS];
    llama_tensors *p = outv;
    llama_point_descs(d, llama_hd_descs(cfg, d), cfg, t, tp, consts, hd_of(cfg), p);
    p->rope_cos_l = consts ? consts + consts_floats(cfg) / 2 : NULL;
    p->rope_sin_l = consts ? consts + consts_floats(cfg) * 3 / 4 : NULL;
}


/* out (n) = 1 + w */
static void plus_one(const hpt_backend *be, float *out, const float *w, size_t n) {
    be->fill(out, n, 1.0f);
    be->add(out, out, w, n);
}
/* the block's wone from its weights (the same bits each time: the recomputations' too) */
static void block_wone(const hpt_backend *be, const hpt_model_config *c, float *wone,
                       const llama_hd_block *p) {
    const size_t C = (size_t)c->C;
    plus_one(be, wone, p->ln1w, C);
    plus_one(be, wone + C, p->ln2w, C);
    plus_one(be, wone + 2 * C, p->postw, 2 * C);
    plus_one(be, wone + 4 * C, p->qknw, 2 * (size_t)hd_of(c));
}

/* ---- the activations: Qwen3's, and the post-norms' inputs with their rstd ---- */

#define F(f, flags, attn) {#f, offsetof(llama_layer_acts, f), flags, attn}
enum { R = HPT_FIELD_RECOMPUTE, S = HPT_FIELD_STORE, O = HPT_FIELD_OUTPUT };
static const hpt_arch_field k_fields[] = {
    F(ln1, R | S, -1), F(ln1_rstd, 0, -1), F(qkvr, S, -1), F(qk_rstd, 0, -1), F(qkv, S, -1),
    F(atty, S, -1), F(att, R | S, HPT_ATTN_PLAIN), F(att_lse, 0, HPT_ATTN_FLASH),
    F(attp, S, -1), F(attp_rstd, 0, -1), F(res2, S, -1), F(ln2, R | S, -1), F(ln2_rstd, 0, -1),
    F(fch, S, -1), F(fch_swi, R | S, -1), F(mlpo, S, -1), F(mlpo_rstd, 0, -1), F(wone, 0, -1),
    F(res3, O, -1)};
#undef F

static void field_shape(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w) {
    llama_hd_field_shape(x, k_fields[i].off, rows, w);
}

/* llama's buffers and the final norm's 1 + lnfw */
#define G(f, t0, t1, after) {#f, offsetof(llama_acts, f), t0, t1, after}
static const hpt_arch_global k_globals[] = {LLAMA_GLOBALS(G),
                                            G(lnf1, HPT_TP_HEAD_F, HPT_TP_HEAD_B, 1)};
#undef G

/* dsmall: also d of attp and mlpo (C); dmid: also d of atty (A <= QKV) */
static void global_shape(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w) {
    llama_hd_global_shape(x, k_globals[i].off, rows, w);
}

/* ---- the embedding (llama's, scaled by sqrt(C)), the final norm (1 + lnfw), the head (llama's) ---- */

static float embed_scale(const hpt_model_config *c) { return (float)sqrt((double)c->C); }

static void embed_forward(const hpt_arch_ctx *x, const void *p, void *av) {
    llama_acts *a = av;
    hpt_arch_llama.embed_forward(x, p, a);
    /* encoded (B, T, C) *= sqrt(C) (transformers: the normalizer in the activations' dtype) */
    x->be->scale(a->encoded, (size_t)x->B * x->T * (size_t)x->cfg->C, embed_scale(x->cfg));
}
static void embed_backward(const hpt_arch_ctx *x, void *g, const void *av) {
    const llama_acts *a = av;
    /* encoded = wte[inputs] sqrt(C): dwte[inputs] += dres sqrt(C) (dres is spent after this) */
    x->be->scale(a->dres, (size_t)x->B * x->T * (size_t)x->cfg->C, embed_scale(x->cfg));
    hpt_arch_llama.embed_backward(x, g, a);
}
static void final_forward(const hpt_arch_ctx *x, const void *pv, void *av, const float *res3) {
    const llama_tensors *p = pv;
    llama_acts *a = av;
    /* lnf (B, T, C) = rmsnorm(res3 of block L-1) * (1 + lnfw) */
    plus_one(x->be, a->lnf1, p->lnfw, (size_t)x->cfg->C);
    x->be->rmsnorm_forward(a->lnf, a->lnf_rstd, res3, a->lnf1, (int64_t)x->B * x->T, x->cfg->C,
                           x->cfg->norm_eps);
}
static float head_forward(const hpt_arch_ctx *x, const void *p, void *a, int has_targets) {
    return hpt_arch_llama.head_forward(x, p, a, has_targets);
}
static void head_backward(const hpt_arch_ctx *x, const void *p, void *g, void *a) {
    hpt_arch_llama.head_backward(x, p, g, a);
}
static void final_backward(const hpt_arch_ctx *x, const void *pv, void *gv, void *av,
                           const float *res3) {
    llama_tensors *g = gv;
    llama_acts *a = av;
    const int64_t BT = (int64_t)x->B * x->T;
    const int C = x->cfg->C;
    (void)pv;
    /* lnf = rmsnorm(res3[L-1]) * (1 + lnfw): dres (B, T, C) starts here; d lnfw = d (1 + lnfw) */
    x->be->memset(a->dres, 0, (size_t)BT * C * sizeof(float));
    x->be->rmsnorm_backward(a->dres, g->lnfw, a->dsmall, res3, a->lnf1, a->lnf_rstd, BT, C);
}

/* ---- one block ---- */

/* the layer's rotary tables and window (0: all keys) */
static void layer_rope(const hpt_arch_ctx *x, const float **cosv, const float **sinv, int *window) {
    const llama_tensors *k = x->params;
    const int local = is_local(x->cfg, x->layer);
    *cosv = local ? k->rope_cos_l : k->rope_cos;
    *sinv = local ? k->rope_sin_l : k->rope_sin;
    *window = local ? x->cfg->window : 0;
}

static void block_forward(const hpt_arch_ctx *x, float *const *w, void *lav, const float *residual,
                          int with_res3) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    const int B = x->B, T = x->T, C = c->C, NH = c->NH, NKV = c->NKV, FF = c->FF;
    const int hd = (int)hd_of(c), A = (int)att_of(c);
    const int64_t BT = (int64_t)B * T, QKV = qkv_of(c);
    const llama_hd_block pb = llama_hd_block_of(c, w), *p = &pb;
    llama_layer_acts *la = lav;
    const float *rc, *rs;
    int window;
    layer_rope(x, &rc, &rs, &window);
    block_wone(be, c, la->wone, p);
    const float *w_ln1 = la->wone, *w_ln2 = la->wone + C, *w_pa = la->wone + 2 * C,
                *w_pf = la->wone + 3 * C, *w_qk = la->wone + 4 * C;
    /* ln1 (B, T, C) = rmsnorm(residual) * (1 + ln1w) */
    be->rmsnorm_forward(la->ln1, la->ln1_rstd, residual, w_ln1, BT, C, c->norm_eps);
    /* qkvr (B, T, QKV) = ln1 @ qkvw^T (+ qkvb); qkv: the per-head norms, q scaled */
    arch_linear_forward(x, la->qkvr, la->ln1, p->qkvw, p->qkvb, BT, C, QKV, 0);
    llama_qk_norm_forward(be, c, la->qkv, la->qk_rstd, la->qkvr, w_qk, qscale_of(c), BT);
    /* q and k rotated in place with the layer's tables */
    hpt_rope_fwd(x, la->qkv, rc, rs, NH, NKV, hd);
    /* atty (B, T, A) = attention(q, k, v), kv head h / (NH / NKV) for query head h */
    x->attn->forward(be, la->atty, la->att, la->att_lse, la->qkv, B, T, A, NH, NKV, x->pos,
                     window);
    /* attp (B, T, C) = atty @ attprojw^T (+ attprojb);
     * res2 = residual + rmsnorm(attp) * (1 + post_attention) */
    arch_linear_forward(x, la->attp, la->atty, p->attprojw, p->attprojb, BT, A, C, 0);
    be->rmsnorm_forward(la->res2, la->attp_rstd, la->attp, w_pa, BT, C, c->norm_eps);
    be->add(la->res2, residual, la->res2, (size_t)BT * C);
    /* ln2 (B, T, C) = rmsnorm(res2) * (1 + pre_feedforward) */
    be->rmsnorm_forward(la->ln2, la->ln2_rstd, la->res2, w_ln2, BT, C, c->norm_eps);
    /* fch (B, T, 2FF) = ln2 @ fcw^T = [gate | up]; fch_swi (B, T, FF) = gelu_tanh(gate) * up */
    arch_linear_forward(x, la->fch, la->ln2, p->fcw, NULL, BT, C, 2 * (int64_t)FF, 0);
    be->geglu_forward(la->fch_swi, la->fch, BT, FF);
    /* mlpo (B, T, C) = fch_swi @ fcprojw^T: the backward reads it, so also without res3 */
    arch_linear_forward(x, la->mlpo, la->fch_swi, p->fcprojw, NULL, BT, FF, C, 0);
    if (!with_res3) return;
    /* res3 (B, T, C) = res2 + rmsnorm(mlpo) * (1 + post_feedforward) */
    be->rmsnorm_forward(la->res3, la->mlpo_rstd, la->mlpo, w_pf, BT, C, c->norm_eps);
    be->add(la->res3, la->res2, la->res3, (size_t)BT * C);
}

/* Rebuilds ln1, att (plain attention), ln2 and fch_swi from what the forward kept (wone, the
 * rstds), with the forward's kernels on the forward's inputs: the same bits. */
static void block_recompute(const hpt_arch_ctx *x, float *const *w, void *lav, const float *residual) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    const int B = x->B, T = x->T, C = c->C;
    const int64_t BT = (int64_t)B * T;
    llama_layer_acts *la = lav;
    const float *rc, *rs;
    int window;
    (void)w;
    layer_rope(x, &rc, &rs, &window);
    be->rmsnorm_apply(la->ln1, residual, la->wone, la->ln1_rstd, BT, C);
    x->attn->rebuild(be, la->atty, la->att, la->att_lse, la->qkv, B, T, (int)att_of(c), c->NH,
                     c->NKV, x->pos, window);
    be->rmsnorm_apply(la->ln2, la->res2, la->wone + C, la->ln2_rstd, BT, C);
    be->geglu_forward(la->fch_swi, la->fch, BT, c->FF);
}

/* a->dres: the gradient of the block's output in, of its input out */
static void block_backward(const hpt_arch_ctx *x, float *const *w, float *const *dw,
                           const void *lav, const float *residual, void *av) {
    const hpt_backend *be = x->be;
    const hpt_model_config *c = x->cfg;
    const int B = x->B, T = x->T, C = c->C, NH = c->NH, NKV = c->NKV, FF = c->FF;
    const int hd = (int)hd_of(c), A = (int)att_of(c);
    const int64_t BT = (int64_t)B * T, QKV = qkv_of(c);
    const size_t nC = (size_t)BT * C;
    const llama_hd_block pb = llama_hd_block_of(c, w), gb = llama_hd_block_of(c, dw);
    const llama_hd_block *p = &pb, *g = &gb;
    const llama_layer_acts *la = lav;
    llama_acts *a = av;
    const float *rc, *rs;
    int window;
    layer_rope(x, &rc, &rs, &window);
    const float *w_ln1 = la->wone, *w_ln2 = la->wone + C, *w_pa = la->wone + 2 * C,
                *w_pf = la->wone + 3 * C, *w_qk = la->wone + 4 * C;
    /* res3 = res2 + rmsnorm(mlpo) * (1 + pf): dres flows to res2 unchanged; mlpo's rstd again
     * (the forward may have stopped before it), its output into dsmall as scratch */
    be->rmsnorm_forward(a->dsmall, la->mlpo_rstd, la->mlpo, w_pf, BT, C, c->norm_eps);
    be->memset(a->dsmall, 0, nC * sizeof(float));
    be->rmsnorm_backward(a->dsmall, g->postw + C, a->dres, la->mlpo, w_pf, la->mlpo_rstd, BT, C);
    /* mlpo = fch_swi @ fcprojw^T: dfch_swi (B, T, FF) into dmid */
    arch_linear_backward(x, a->dmid, g->fcprojw, NULL, a->dsmall, la->fch_swi, p->fcprojw, BT, FF, C, 0);
    /* fch_swi = gelu_tanh(gate) * up: d[gate | up] (B, T, 2FF) into dbig */
    be->geglu_backward(a->dbig, a->dmid, la->fch, BT, FF);
    /* fch = ln2 @ fcw^T */
    arch_linear_backward(x, a->dsmall, g->fcw, NULL, a->dbig, la->ln2, p->fcw, BT, C, 2 * (int64_t)FF, 0);
    /* ln2 = rmsnorm(res2) * (1 + ln2w): dres += */
    be->rmsnorm_backward(a->dres, g->ln2w, a->dsmall, la->res2, w_ln2, la->ln2_rstd, BT, C);
    /* res2 = residual + rmsnorm(attp) * (1 + pa): dattp (B, T, C) into dsmall */
    be->memset(a->dsmall, 0, nC * sizeof(float));
    be->rmsnorm_backward(a->dsmall, g->postw, a->dres, la->attp, w_pa, la->attp_rstd, BT, C);
    /* attp = atty @ attprojw^T (+ attprojb): datty (B, T, A) into dmid (dsmall holds dattp) */
    arch_linear_backward(x, a->dmid, g->attprojw, g->attprojb, a->dsmall, la->atty, p->attprojw,
                         BT, A, C, 0);
    /* atty = attention(qkv); dqkv (B, T, QKV) into dbig, dk and dv summed over each group */
    x->attn->backward(be, a->dbig, a->attscr, a->dmid, la->qkv, la->atty, la->att, la->att_lse,
                      B, T, A, NH, NKV, x->pos, window);
    /* q, k = rope(q, k): the transpose rotation */
    hpt_rope_bwd(x, a->dbig, rc, rs, NH, NKV, hd);
    /* q, k = the per-head norms of qkvr's (q scaled): d qkvr (B, T, QKV) into dmid */
    llama_qk_norm_backward(be, c, a->dmid, g->qknw, a->dbig, la->qkvr, w_qk, la->qk_rstd,
                           qscale_of(c), BT);
    /* qkvr = ln1 @ qkvw^T (+ qkvb) */
    arch_linear_backward(x, a->dsmall, g->qkvw, g->qkvb, a->dmid, la->ln1, p->qkvw, BT, C, QKV, 0);
    /* ln1 = rmsnorm(residual) * (1 + ln1w): dres += */
    be->rmsnorm_backward(a->dres, g->ln1w, a->dsmall, residual, w_ln1, la->ln1_rstd, BT, C);
}

/* ---- Hugging Face: Gemma3ForCausalLM (asked by io/hfconfig.c and io/hfmodel.c) ---- */

static const char *const k_hf_classes[] = {"Gemma3ForCausalLM", NULL};
static const char *const k_hf_types[] = {"gemma3_text", NULL};
static const char *const k_hf_ignore[] = {".rotary_emb.inv_freq", ".rotary_emb_local.inv_freq", NULL};

/* one rotation's parameters (o: rope_scaling, rope_parameters or one of its per-layer-type
 * objects): its base where given; the default type, or linear scaling (linear_ok) */
static hpt_status hf_rope_one(const hpt_hf_json_ops *J, const hpt_hf_json *o, const char *what,
                              const char *key, int linear_ok, float *theta, float *factor) {
    if (J->has(o, "rope_theta")) HPT_CHECK(J->get_float(o, "rope_theta", 0, what, theta));
    const char *type = J->has(o, "rope_type") ? J->get_str(o, "rope_type") : J->get_str(o, "type");
    if (!type || !strcmp(type, "default")) return HPT_OK;
    if (strcmp(type, "linear") || !linear_ok)
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: %s.rope_type '%s': hptrain's gemma3 knows "
                       "'default'%s", what, key, type, linear_ok ? " and 'linear'" : "");
    HPT_CHECK(J->get_float(o, "factor", -1, what, factor));
    if (!(*factor >= 1.0f))
        return J->fail(HPT_ERR_FORMAT, "%s: %s.factor must be at least 1", what, key);
    if (*factor == 1.0f) *factor = 0.0f;
    return HPT_OK;
}

/* rope_scaling (the global layers'), or transformers 5's rope_parameters: one object, or one per
 * layer type (full_attention, sliding_attention) */
static hpt_status hf_rope(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                          hpt_model_config *c) {
    const hpt_hf_json *rp, *full, *slide;
    HPT_CHECK(J->obj(r, "rope_parameters", what, &rp));
    if (!rp) {
        HPT_CHECK(J->obj(r, "rope_scaling", what, &rp));
        return rp ? hf_rope_one(J, rp, what, "rope_scaling", 1, &c->rope_theta, &c->rope_factor)
                  : HPT_OK;
    }
    HPT_CHECK(J->obj(rp, "full_attention", what, &full));
    HPT_CHECK(J->obj(rp, "sliding_attention", what, &slide));
    if (!full && !slide)
        return hf_rope_one(J, rp, what, "rope_parameters", 1, &c->rope_theta, &c->rope_factor);
    float none = 0.0f;
    if (full) HPT_CHECK(hf_rope_one(J, full, what, "rope_parameters.full_attention", 1,
                                    &c->rope_theta, &c->rope_factor));
    if (slide) HPT_CHECK(hf_rope_one(J, slide, what, "rope_parameters.sliding_attention", 0,
                                     &c->rope_local_theta, &none));
    return HPT_OK;
}

/* layer_types (each "sliding_attention" or "full_attention") as a period: every p-th layer
 * full, the others sliding; or sliding_window_pattern (Gemma3TextConfig's default 6) */
static hpt_status hf_layer_types(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                                 hpt_model_config *c) {
    if (!J->has(r, "layer_types"))
        return J->get_int(r, "sliding_window_pattern", 6, 1, 1 << 16, what, &c->swa_pattern);
    int first_full = -1;
    for (int l = 0; l < c->L; l++) {
        const char *t = J->str_at(r, "layer_types", l);
        if (!t || (strcmp(t, "full_attention") && strcmp(t, "sliding_attention")))
            return J->fail(HPT_ERR_FORMAT, "%s: layer_types[%d] is not 'full_attention' or "
                           "'sliding_attention'", what, l);
        if (first_full < 0 && !strcmp(t, "full_attention")) first_full = l;
    }
    if (J->str_at(r, "layer_types", c->L))
        return J->fail(HPT_ERR_FORMAT, "%s: layer_types has more than num_hidden_layers = %d "
                       "entries", what, c->L);
    c->swa_pattern = first_full < 0 ? c->L + 1 : first_full + 1; /* none full: all local */
    for (int l = 0; l < c->L; l++)
        if (is_local(c, l) != !strcmp(J->str_at(r, "layer_types", l), "sliding_attention"))
            return J->fail(HPT_ERR_UNSUPPORTED, "%s: layer_types: hptrain's gemma3 takes every "
                           "%d-th layer global and the others local, not layer %d's '%s'", what,
                           c->swa_pattern, l, J->str_at(r, "layer_types", l));
    return HPT_OK;
}

/* Gemma3TextConfig's keys and defaults (docs/gemma.md); strict where the maths cannot follow:
 * soft-capping, another activation, bidirectional attention, Gemma3ForConditionalGeneration's
 * nested text_config */
static hpt_status hf_config_read(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                                 hpt_model_config *c) {
    memset(c, 0, sizeof *c);
    c->arch = HPT_ARCH_GEMMA3;
    if (J->has(r, "text_config"))
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: a multimodal Gemma 3 (text_config): hptrain reads "
                       "Gemma3ForCausalLM text models; save the language model as one", what);
    HPT_CHECK(J->get_int(r, "hidden_size", 2304, 1, 1 << 20, what, &c->C));
    HPT_CHECK(J->get_int(r, "intermediate_size", 9216, 1, 1 << 22, what, &c->FF));
    HPT_CHECK(J->get_int(r, "num_hidden_layers", 26, 1, 1 << 16, what, &c->L));
    HPT_CHECK(J->get_int(r, "num_attention_heads", 8, 1, 1 << 16, what, &c->NH));
    HPT_CHECK(J->get_int(r, "num_key_value_heads", 4, 1, 1 << 16, what, &c->NKV));
    HPT_CHECK(J->get_int(r, "head_dim", 256, 2, 1 << 16, what, &c->hd));
    HPT_CHECK(J->get_int(r, "vocab_size", 262208, 1, 1 << 28, what, &c->V));
    HPT_CHECK(J->get_int(r, "max_position_embeddings", 131072, 1, 1 << 24, what, &c->maxT));
    HPT_CHECK(J->get_float(r, "rms_norm_eps", 1e-6, what, &c->norm_eps));
    HPT_CHECK(J->get_float(r, "rope_theta", 1000000, what, &c->rope_theta));
    HPT_CHECK(J->get_float(r, "rope_local_base_freq", 10000, what, &c->rope_local_theta));
    HPT_CHECK(J->get_float(r, "query_pre_attn_scalar", 256, what, &c->attn_scalar));
    HPT_CHECK(J->get_int(r, "sliding_window", 4096, 1, 1 << 24, what, &c->window));
    HPT_CHECK(J->get_float(r, "initializer_range", 0.02, what, &c->init_range));
    HPT_CHECK(J->get_bool(r, "tie_word_embeddings", 1, what, &c->tied));
    HPT_CHECK(J->get_bool(r, "attention_bias", 0, what, &c->attn_bias));
    HPT_CHECK(hf_rope(J, r, what, c));
    HPT_CHECK(hf_layer_types(J, r, what, c));
    if (c->NH % c->NKV)
        return J->fail(HPT_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of "
                       "num_key_value_heads %d", what, c->NH, c->NKV);
    static const char *const k_refused[] = {"final_logit_softcapping", "attn_logit_softcapping"};
    for (int i = 0; i < 2; i++)
        if (J->has(r, k_refused[i]))
            return J->fail(HPT_ERR_UNSUPPORTED, "%s: %s: hptrain's gemma3 has no soft-capping "
                           "(Gemma 3's published configs set it null)", what, k_refused[i]);
    int bidir;
    HPT_CHECK(J->get_bool(r, "use_bidirectional_attention", 0, what, &bidir));
    if (bidir)
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: use_bidirectional_attention: hptrain's gemma3 is "
                       "causal", what);
    const char *key = J->has(r, "hidden_activation") ? "hidden_activation" : "hidden_act";
    const char *act = J->get_str(r, key);
    if (J->has(r, key) && (!act || strcmp(act, "gelu_pytorch_tanh")))
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: %s '%s': hptrain's gemma3 uses gelu_pytorch_tanh",
                       what, key, act ? act : "?");
    return HPT_OK;
}

static void hf_config_write(const hpt_hf_json_ops *J, hpt_hf_json *r, const hpt_model_config *c,
                            const char *cls) {
    (void)cls;
    J->put_str(r, "model_type", "gemma3_text");
    J->put_str(r, "hidden_activation", "gelu_pytorch_tanh");
    llama_hd_config_write(J, r, c);
    J->put_float(r, "rope_local_base_freq", c->rope_local_theta);
    J->put_float(r, "query_pre_attn_scalar", c->attn_scalar > 0.0f ? c->attn_scalar : (float)hd_of(c));
    J->put_int(r, "sliding_window", c->window);
    J->put_int(r, "sliding_window_pattern", c->swa_pattern);
    if (c->rope_factor > 0.0f) {
        hpt_hf_json *rs = J->put_obj(r, "rope_scaling");
        J->put_str(rs, "rope_type", "linear");
        J->put_float(rs, "factor", c->rope_factor);
    } else {
        J->put_null(r, "rope_scaling");
    }
    J->put_bool(r, "attention_bias", c->attn_bias);
    J->put_null(r, "final_logit_softcapping");
    J->put_null(r, "attn_logit_softcapping");
}

/* table name -> the Hugging Face tensors its rows concatenate (under model.layers.{l}.) */
static const llama_hf_name k_hf_names[] = {
    {"ln1w", {"input_layernorm.weight"}}, {"ln2w", {"pre_feedforward_layernorm.weight"}},
    LLAMA_HD_HF_NAMES,
    {"postw", {"post_attention_layernorm.weight", "post_feedforward_layernorm.weight"}},
};

static int hf_parts(const hpt_model_config *c, const hpt_tensor_desc *d, int l, const char *prefix,
                    hpt_hf_part *p) {
    (void)prefix;
    return llama_hf_parts(c, d, l, k_hf_names, (int)(sizeof k_hf_names / sizeof *k_hf_names),
                          hd_of(c), p);
}

/* every name gemma_descs may give (verify's report outlives the model) */
static const char *const k_param_names[] = {
    "wte", "ln1w", "qkvw", "qkvb", "qknw", "attprojw", "attprojb", "ln2w", "fcw", "fcprojw",
    "postw", "lnfw", "lm_head", NULL};

/* ---- shapes (model/config.c routes "gemma3..." here, then checks) ---- */

static hpt_status config_check(const hpt_model_config *c) {
    hpt_model_config k = *c;
    k.C = c->NH; /* the widths need not divide: checked below */
    HPT_CHECK(model_config_check_common(&k, "gemma3"));
    if (c->C > 65536) return hpt_fail(HPT_ERR_SHAPE, "gemma3 shape too large (C=%d)", c->C);
    const int64_t hd = hd_of(c);
    if (c->hd < 0 || hd < 2 || hd > 1024 || hd % 2 || att_of(c) > 65536)
        return hpt_fail(HPT_ERR_SHAPE, "bad gemma3 head width hd=%lld (NH=%d; even: rotary "
                        "embeddings rotate pairs)", (long long)hd, c->NH);
    if (c->NKV < 1 || c->NH % c->NKV != 0)
        return hpt_fail(HPT_ERR_SHAPE, "query heads NH=%d are not a multiple of key/value heads "
                        "NKV=%d", c->NH, c->NKV);
    if (c->FF < 1 || c->FF > 1048576) return hpt_fail(HPT_ERR_SHAPE, "bad MLP width FF=%d", c->FF);
    if (c->mlp_bias || c->rope_orig_maxT)
        return hpt_fail(HPT_ERR_SHAPE, "gemma3 has no MLP biases and no Llama 3 rope scaling");
    if (c->window < 0 || c->window > 0xffffff || c->swa_pattern < 0 || c->swa_pattern > 255 ||
        !(c->attn_scalar >= 0.0f) ||
        !(c->rope_factor == 0.0f || c->rope_factor >= 1.0f))
        return hpt_fail(HPT_ERR_SHAPE, "bad gemma3 window=%d pattern=%d qscalar=%g factor=%g",
                        c->window, c->swa_pattern, (double)c->attn_scalar, (double)c->rope_factor);
    if (!(c->norm_eps > 0.0f) || !(c->rope_theta > 1.0f) || !isfinite(c->rope_theta) ||
        !(c->rope_local_theta > 1.0f) || !isfinite(c->rope_local_theta) || !(c->init_range >= 0.0f))
        return hpt_fail(HPT_ERR_SHAPE, "bad gemma3 constants eps=%g theta=%g ltheta=%g range=%g",
                        (double)c->norm_eps, (double)c->rope_theta, (double)c->rope_local_theta,
                        (double)c->init_range);
    return HPT_OK;
}

static hpt_status gemma_key(hpt_model_config *c, const char *key, double v, const char *shape) {
    static const model_int_key ints[] = {
        {"L", offsetof(hpt_model_config, L), 1},       {"C", offsetof(hpt_model_config, C), 1},
        {"NH", offsetof(hpt_model_config, NH), 1},     {"NKV", offsetof(hpt_model_config, NKV), 1},
        {"FF", offsetof(hpt_model_config, FF), 1},     {"V", offsetof(hpt_model_config, V), 1},
        {"Vp", offsetof(hpt_model_config, Vp), 1},     {"T", offsetof(hpt_model_config, maxT), 1},
        {"hd", offsetof(hpt_model_config, hd), 2},     {"window", offsetof(hpt_model_config, window), 0},
        {"pattern", offsetof(hpt_model_config, swa_pattern), 0},
        {"tied", offsetof(hpt_model_config, tied), 0}, {"attn_bias", offsetof(hpt_model_config, attn_bias), 0}};
    static const model_float_key floats[] = {
        {"theta", offsetof(hpt_model_config, rope_theta)},
        {"ltheta", offsetof(hpt_model_config, rope_local_theta)},
        {"factor", offsetof(hpt_model_config, rope_factor)},
        {"qscalar", offsetof(hpt_model_config, attn_scalar)},
        {"eps", offsetof(hpt_model_config, norm_eps)}, {"range", offsetof(hpt_model_config, init_range)}};
    return model_shape_key(c, key, v, shape, ints, sizeof ints / sizeof ints[0], floats,
                           sizeof floats / sizeof floats[0], "L, C, NH, NKV, FF, V, Vp, T, hd, "
                           "window, pattern, theta, ltheta, factor, qscalar, eps, tied, attn_bias, "
                           "range");
}

/* The named shapes: the text models of Gemma 3 (google/gemma-3-270m, -1b-pt: Gemma3ForCausalLM;
 * -4b-pt, -12b-pt, -27b-pt: Gemma3ForConditionalGeneration's text_config), from their published
 * config.json files as remembered: head_dim 256 (27b: 128, query_pre_attn_scalar 168), rope_theta
 * 1e6 (4b and up: linear scaling 8), rope_local_base_freq 1e4, sliding_window_pattern 6,
 * rms_norm_eps 1e-6, tied heads. Parameter counts (tests/test_gemma.c): docs/gemma.md. */
static const struct {
    const char *name;
    int L, C, NH, NKV, hd, FF, V, maxT, window;
    float factor, qscalar;
} k_gemma[] = {
    {"gemma3-270m", 18, 640, 4, 1, 256, 2048, 262144, 32768, 512, 0.0f, 256.0f},
    {"gemma3-1b", 26, 1152, 4, 1, 256, 6912, 262144, 32768, 512, 0.0f, 256.0f},
    {"gemma3-4b", 34, 2560, 8, 4, 256, 10240, 262208, 131072, 1024, 8.0f, 256.0f},
    {"gemma3-12b", 48, 3840, 16, 8, 256, 15360, 262208, 131072, 1024, 8.0f, 256.0f},
    {"gemma3-27b", 62, 5376, 32, 16, 128, 21504, 262208, 131072, 1024, 8.0f, 168.0f},
};

/* A custom shape takes Gemma3TextConfig's defaults (V 262208, T 131072, theta 1e6, ltheta 1e4,
 * window 4096, pattern 6, eps 1e-6, tied) but hd C/NH unless given and qscalar hd (scale 1). */
static hpt_status shape_parse(const char *shape, hpt_model_config *out) {
    hpt_model_config c = {.arch = HPT_ARCH_GEMMA3, .V = 262208, .maxT = 131072, .norm_eps = 1e-6f,
                          .rope_theta = 1000000.0f, .rope_local_theta = 10000.0f, .window = 4096,
                          .swa_pattern = 6, .init_range = 0.02f, .tied = 1};
    for (size_t i = 0; i < sizeof k_gemma / sizeof k_gemma[0]; i++)
        if (!strcmp(shape, k_gemma[i].name)) {
            c.L = k_gemma[i].L; c.C = k_gemma[i].C; c.NH = k_gemma[i].NH; c.NKV = k_gemma[i].NKV;
            c.hd = k_gemma[i].hd; c.FF = k_gemma[i].FF; c.V = k_gemma[i].V;
            c.maxT = k_gemma[i].maxT; c.window = k_gemma[i].window;
            c.rope_factor = k_gemma[i].factor; c.attn_scalar = k_gemma[i].qscalar;
            *out = c;
            return HPT_OK;
        }
    if (strncmp(shape, "gemma3:", 7) != 0)
        return hpt_fail(HPT_ERR_INVALID, "unknown model shape '%s' (use gemma3-270m, gemma3-1b, "
                        "gemma3-4b, gemma3-12b, gemma3-27b or gemma3:L=..,C=..,NH=..,FF=..[,NKV=..]"
                        "[,hd=..][,window=..][,pattern=..])", shape);
    HPT_CHECK(model_shape_kv(shape, shape + 7, &c, gemma_key));
    if (!c.L || !c.C || !c.NH || !c.FF)
        return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': L, C, NH and FF are required", shape);
    if (!c.NKV) c.NKV = c.NH;
    if (!c.hd) c.hd = c.C / c.NH;
    *out = c;
    return HPT_OK;
}

static const char *const k_prefixes[] = {"gemma3", NULL};

/* The planner costs the block at the reference block's rates (plan NULL). */
const hpt_arch hpt_arch_gemma3 = {
    .name = "gemma3", .describe = describe, .flops_per_token = llama_hd_flops_per_token,
    .n_fields = (int)(sizeof k_fields / sizeof k_fields[0]), .fields = k_fields,
    .block_acts_size = sizeof(llama_layer_acts), .field_shape = field_shape,
    .n_globals = (int)(sizeof k_globals / sizeof k_globals[0]), .globals = k_globals,
    .acts_size = sizeof(llama_acts), .global_shape = global_shape,
    .off_inputs = offsetof(llama_acts, inputs), .off_targets = offsetof(llama_acts, targets),
    .off_encoded = offsetof(llama_acts, encoded), .off_logits = offsetof(llama_acts, logits),
    .point = point, .consts_floats = consts_floats, .consts_fill = consts_fill,
    .embed_forward = embed_forward, .embed_backward = embed_backward,
    .block_forward = block_forward, .block_recompute = block_recompute,
    .block_backward = block_backward, .final_forward = final_forward,
    .head_forward = head_forward, .head_backward = head_backward,
    .final_backward = final_backward, .shape_prefixes = k_prefixes, .shape_parse = shape_parse,
    .config_check = config_check, .config_fill = NULL, .hf_classes = k_hf_classes,
    .hf_model_types = k_hf_types, .hf_config_read = hf_config_read,
    .hf_config_write = hf_config_write, .hf_parts = hf_parts,
    .hf_embed_name = "model.embed_tokens.weight", .hf_head_name = "lm_head.weight",
    .hf_ignore = k_hf_ignore, .hf_eot = 1,
    .desc = {.name = "gemma3", .label = "Gemma 3",
             .shapes = "gemma3-270m, gemma3-1b, gemma3-4b, gemma3-12b, gemma3-27b, "
                       "gemma3:L=..,C=..,NH=..,FF=..[,NKV=..][,hd=..][,window=..][,pattern=..]"},
    .plan = NULL, .param_names = k_param_names, .embed_scale = embed_scale,
    .linears = llama_linears_hd,
    .hf_block = "model.layers.%d.",
};
