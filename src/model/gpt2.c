/* gpt2.c: GPT-2's maths, llm.c's train_gpt2.c in the architecture interface (model/arch.h).
 *
 * The parameters are llm.c's, in its checkpoint order (describe); a block reads its slices
 * (ln1w ... fcprojb) and saves the fields of gpt2_layer_acts for its backward. Forward and
 * backward of each piece sit side by side; each backward step restates the forward expression
 * it differentiates. Gradients accumulate (+=). Every op goes through the backend x->be, on the
 * buffers the runner planned (model/runner.c): which buffers exist, where they live, what is
 * dropped and rebuilt, and where a block's parameters come from are the runner's business, not
 * this file's. The attention kernel pair arrives as ops (x->attn, chosen by the runner): flash
 * saves the rows' log-sum-exp, plain the probabilities; this file calls them without asking. */
#include "core/core.h"
#include "model/arch.h"
#include "model/gpt2_int.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* ---- the parameters ---- */

/* checkpoint order; NULL-terminated (hpt_arch.param_names) */
static const char *const names[GPT2_NUM_TENSORS + 1] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", NULL};

static void describe(const hpt_model_config *cfg, hpt_tensor_table *out) {
    const int64_t L = cfg->L, C = cfg->C;
    /* shapes as llm.c's: the per-layer tensors stacked over L, linear weights (out, in) */
    const int64_t shape[GPT2_NUM_TENSORS][3] = {
        {cfg->Vp, C}, {cfg->maxT, C}, {L, C},         {L, C},         {L, 3 * C, C},
        {L, 3 * C},   {L, C, C},      {L, C},         {L, C},         {L, C},
        {L, 4 * C, C}, {L, 4 * C},    {L, C, 4 * C},  {L, C},         {C},   {C}};
    static const int ndim[GPT2_NUM_TENSORS] = {2, 2, 2, 2, 3, 2, 3, 2, 2, 2, 3, 2, 3, 2, 1, 1};
    static const int matrix[GPT2_NUM_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
    memset(out, 0, sizeof *out);
    out->n = GPT2_NUM_TENSORS;
    out->L = cfg->L;
    out->n_slices = GPT2_BLOCK_SLICES;
    for (int i = 0; i < GPT2_NUM_TENSORS; i++) {
        hpt_tensor_desc *d = &out->t[i];
        snprintf(d->name, sizeof d->name, "%s", names[i]);
        d->dtype = HPT_DT_F32;
        d->ndim = ndim[i];
        for (int k = 0; k < ndim[i]; k++) d->shape[k] = shape[i][k];
        d->role = HPT_ROLE_PARAM;
        int block = gpt2_is_block_tensor(i);
        d->layer = block ? HPT_LAYER_STACKED : -1;
        d->slice = block ? i - GPT2_FIRST_BLOCK_TENSOR : -1;
        d->is_matrix = matrix[i];
        d->tied = i == 0;
    }
}

/* FLOPs per token (docs/estimate.md): GEMMs with qkv 3C^2, attention projection C^2, fc and fc
 * projection 4C^2 each per layer and the tied head Vp*C, at 2 FLOPs per multiply-add; causal
 * attention 2*C*(T+1) per token and layer (QK^T and AV over t+1 keys on average). */
static double flops_per_token(const hpt_model_config *c, int T) {
    double L = c->L, C = c->C;
    return 2.0 * (12.0 * L * C * C + (double)c->Vp * C) + 2.0 * L * C * (T + 1.0);
}

/* A block's slices from the runner's pointers (block order, GPT2_BLOCK_SLICES). */
static gpt2_block block_of(float *const *s) {
    return (gpt2_block){s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11]};
}

/* ---- the activations: what a block saves, and the rest of a step's buffers ---- */

#define F(f, flags, attn) {#f, offsetof(gpt2_layer_acts, f), flags, attn}
enum { R = HPT_FIELD_RECOMPUTE, S = HPT_FIELD_STORE, O = HPT_FIELD_OUTPUT, M = HPT_FIELD_MLP };
static const hpt_arch_field k_fields[] = {
    F(ln1, R | S, -1),      F(ln1_mean, 0, -1),      F(ln1_rstd, 0, -1),
    F(qkv, S, -1),          F(atty, S, -1),          F(att, R | S, HPT_ATTN_PLAIN),
    F(att_lse, 0, HPT_ATTN_FLASH), F(res2, S, -1),   F(ln2, R | S, -1),
    F(ln2_mean, 0, -1),     F(ln2_rstd, 0, -1),      F(fch, S | M, -1),
    F(fch_gelu, R | S | M, -1), F(res3, O, -1)};
#undef F
#define N_FIELDS ((int)(sizeof k_fields / sizeof k_fields[0]))

/* rows and row width: a token's C, 3C or 4C values, its statistics, or per (b, h) rows of T
 * probabilities / one log-sum-exp */
static void field_shape(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w) {
    const size_t BT = (size_t)x->B * x->T, C = (size_t)x->cfg->C;
    const size_t heads = (size_t)x->B * (size_t)x->cfg->NH * (size_t)x->T;
    switch (k_fields[i].off) {
    case offsetof(gpt2_layer_acts, qkv): *rows = BT; *w = 3 * C; return;
    case offsetof(gpt2_layer_acts, fch):
    case offsetof(gpt2_layer_acts, fch_gelu): *rows = BT; *w = 4 * C; return;
    case offsetof(gpt2_layer_acts, ln1_mean):
    case offsetof(gpt2_layer_acts, ln1_rstd):
    case offsetof(gpt2_layer_acts, ln2_mean):
    case offsetof(gpt2_layer_acts, ln2_rstd): *rows = BT; *w = 1; return;
    case offsetof(gpt2_layer_acts, att): *rows = heads; *w = (size_t)x->T; return;
    case offsetof(gpt2_layer_acts, att_lse): *rows = heads; *w = 1; return;
    default: *rows = BT; *w = C; return; /* ln1, atty, res2, ln2, res3 */
    }
}

#define G(f, t0, t1, after) {#f, offsetof(gpt2_acts, f), t0, t1, after}
static const hpt_arch_global k_globals[] = {
    G(inputs, HPT_TP_START, HPT_TP_EMBED_B, 0),
    G(targets, HPT_TP_START, HPT_TP_HEAD_END, 0),
    G(encoded, HPT_TP_START, HPT_TP_BLOCK0_B, 0),
    G(lnf, HPT_TP_HEAD_F, HPT_TP_HEAD_END, 1),
    G(lnf_mean, HPT_TP_HEAD_F, HPT_TP_HEAD_B, 1),
    G(lnf_rstd, HPT_TP_HEAD_F, HPT_TP_HEAD_B, 1),
    G(logits, HPT_TP_HEAD_F, HPT_TP_HEAD_END, 1),
    G(lse, HPT_TP_HEAD_F, HPT_TP_HEAD_END, 1),
    G(losses, HPT_TP_HEAD_F, HPT_TP_HEAD_F, 1),
    G(dres, HPT_TP_HEAD_B, HPT_TP_EMBED_B, 1),
    G(dsmall, HPT_TP_HEAD_B, HPT_TP_BLOCK0_B, 1),
    G(dbig, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1),
    G(attscr, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1),
    G(mlph, HPT_TP_START, HPT_TP_BLOCKS_F, 0),
    G(mlpy, HPT_TP_START, HPT_TP_BLOCKS_F, 0),
    G(mlph_b, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1),
    G(mlpy_b, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1)};
#undef G

static void global_shape(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w) {
    const size_t BT = (size_t)x->B * x->T, C = (size_t)x->cfg->C;
    *rows = BT;
    switch (k_globals[i].off) {
    case offsetof(gpt2_acts, inputs):
    case offsetof(gpt2_acts, targets):
    case offsetof(gpt2_acts, lnf_mean):
    case offsetof(gpt2_acts, lnf_rstd):
    case offsetof(gpt2_acts, lse):
    case offsetof(gpt2_acts, losses): *w = 1; return;
    case offsetof(gpt2_acts, logits): *rows = x->head_rows; *w = x->logit_cols; return;
    case offsetof(gpt2_acts, dbig): /* also dqkv (B, T, 3C); tiled the larger of it and a tile's */
        *w = 4 * C;
        if (x->mlp_rows && x->mlp_rows * 4 > BT * 3) *rows = x->mlp_rows;
        else if (x->mlp_rows) *w = 3 * C;
        return;
    case offsetof(gpt2_acts, mlph):
    case offsetof(gpt2_acts, mlpy):
    case offsetof(gpt2_acts, mlph_b):
    case offsetof(gpt2_acts, mlpy_b): *rows = x->mlp_rows; *w = 4 * C; return;
    /* plain: one row of dP per (b, h); flash: D = rowsum(dO * O) per (b, h) */
    case offsetof(gpt2_acts, attscr): *rows = (size_t)x->B * (size_t)x->cfg->NH; *w = (size_t)x->T; return;
    default: *w = C; return; /* encoded, lnf, dres, dsmall */
    }
}

/* ---- the embedding ---- */

static void embed_forward(const hpt_arch_ctx *x, const void *pv, void *av) {
    const gpt2_tensors *p = pv;
    gpt2_acts *a = av;
    /* encoded (B, T, C) = wte[inputs] + wpe[t] (packed: wpe[pos[b, t]]) */
    if (x->pos)
        x->be->encoder_forward_pos(a->encoded, a->inputs, p->wte, p->wpe, x->pos, x->B, x->T,
                                   x->cfg->C);
    else x->be->encoder_forward(a->encoded, a->inputs, p->wte, p->wpe, x->B, x->T, x->cfg->C);
}

static void embed_backward(const hpt_arch_ctx *x, void *gv, const void *av) {
    gpt2_tensors *g = gv;
    const gpt2_acts *a = av;
    /* encoded = wte[inputs] + wpe[t]: dwte[inputs[b,t]] += dres[b,t], dwpe[t] += dres[b,t] */
    if (x->pos)
        x->be->encoder_backward_pos(g->wte, g->wpe, a->dres, a->inputs, x->pos, x->B, x->T,
                                    x->cfg->C);
    else x->be->encoder_backward(g->wte, g->wpe, a->dres, a->inputs, x->B, x->T, x->cfg->C);
}

/* The MLP as the tiled MLP takes it (arch.h's arch_mlp): fc (4C, C), GELU, proj (C, 4C) */
static arch_mlp mlp_of(int C, const gpt2_block *p) {
    arch_mlp m = {p->fcw, p->fcb, p->fcprojw, p->fcprojb, NULL, NULL, NULL, NULL, C, 4 * (int64_t)C,
                  4 * (int64_t)C, arch_mlp_gelu_fwd, arch_mlp_gelu_bwd, NULL, NULL, NULL, NULL};
    return m;
}

/* ---- one block: forward ---- */

static void block_forward(const hpt_arch_ctx *x, float *const *w, void *lav, const float *residual,
                          int with_res3) {
    const hpt_backend *be = x->be;
    const int B = x->B, T = x->T, C = x->cfg->C, NH = x->cfg->NH;
    const int64_t BT = (int64_t)B * T;
    const gpt2_block pb = block_of(w), *p = &pb;
    gpt2_layer_acts *la = lav;
    /* ln1 (B, T, C) = layernorm(residual) */
    be->layernorm_forward(la->ln1, la->ln1_mean, la->ln1_rstd, residual, p->ln1w, p->ln1b, BT, C);
    /* qkv (B, T, 3C) = ln1 @ qkvw^T + qkvb */
    arch_linear_forward(x, la->qkv, la->ln1, p->qkvw, p->qkvb, BT, C, 3 * C, 0);
    /* atty (B, T, C) = attention(qkv) */
    x->attn->forward(be, la->atty, la->att, la->att_lse, la->qkv, B, T, C, NH, NH, x->pos, 0);
    /* res2 (B, T, C) = residual + atty @ attprojw^T + attprojb */
    be->copy(la->res2, residual, (size_t)BT * C * sizeof(float), HPT_COPY_D2D);
    arch_linear_forward(x, la->res2, la->atty, p->attprojw, p->attprojb, BT, C, C, 1);
    /* ln2 (B, T, C) = layernorm(res2) */
    be->layernorm_forward(la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, p->ln2w, p->ln2b, BT, C);
    if (x->mlp_rows) { /* tiled: res3 = res2 + the MLP tile by tile (a recomputation: none) */
        if (!with_res3) return;
        const arch_mlp mlp = mlp_of(C, p);
        const gpt2_acts *a = x->acts;
        be->copy(la->res3, la->res2, (size_t)BT * C * sizeof(float), HPT_COPY_D2D);
        arch_mlp_forward(x, &mlp, la->res3, la->ln2, x->in_backward ? a->mlph_b : a->mlph,
                         x->in_backward ? a->mlpy_b : a->mlpy);
        return;
    }
    /* fch (B, T, 4C) = ln2 @ fcw^T + fcb; fch_gelu = gelu(fch) */
    arch_linear_forward(x, la->fch, la->ln2, p->fcw, p->fcb, BT, C, 4 * C, 0);
    be->gelu_forward(la->fch_gelu, la->fch, BT * 4 * C);
    if (!with_res3) return;
    /* res3 (B, T, C) = res2 + fch_gelu @ fcprojw^T + fcprojb */
    be->copy(la->res3, la->res2, (size_t)BT * C * sizeof(float), HPT_COPY_D2D);
    arch_linear_forward(x, la->res3, la->fch_gelu, p->fcprojw, p->fcprojb, BT, 4 * C, C, 1);
}

/* Rebuilds ln1, att (plain attention), ln2 and fch_gelu from what the forward kept, with the
 * forward's kernels on the forward's inputs: the same bits. */
static void block_recompute(const hpt_arch_ctx *x, float *const *w, void *lav, const float *residual) {
    const hpt_backend *be = x->be;
    const int B = x->B, T = x->T, C = x->cfg->C, NH = x->cfg->NH;
    const int64_t BT = (int64_t)B * T;
    const gpt2_block pb = block_of(w), *p = &pb;
    gpt2_layer_acts *la = lav;
    /* ln1 = layernorm(residual), with the saved mean and rstd */
    be->layernorm_apply(la->ln1, residual, p->ln1w, p->ln1b, la->ln1_mean, la->ln1_rstd, BT, C);
    /* att = softmax(q k^T) (plain attention; flash keeps none): rewrites atty, the same bits */
    x->attn->rebuild(be, la->atty, la->att, la->att_lse, la->qkv, B, T, C, NH, NH, x->pos, 0);
    /* ln2 = layernorm(res2) */
    be->layernorm_apply(la->ln2, la->res2, p->ln2w, p->ln2b, la->ln2_mean, la->ln2_rstd, BT, C);
    /* fch_gelu = gelu(fch) (tiled: the backward's, tile by tile) */
    if (!x->mlp_rows) be->gelu_forward(la->fch_gelu, la->fch, BT * 4 * C);
}

/* ---- one block: backward (a->dres: the gradient of the block's output in, of its input out) ---- */

static void block_backward(const hpt_arch_ctx *x, float *const *w, float *const *dw,
                           const void *lav, const float *residual, void *av) {
    const hpt_backend *be = x->be;
    const int B = x->B, T = x->T, C = x->cfg->C, NH = x->cfg->NH;
    const int64_t BT = (int64_t)B * T;
    const gpt2_block pb = block_of(w), gb = block_of(dw), *p = &pb, *g = &gb;
    const gpt2_layer_acts *la = lav;
    gpt2_acts *a = av;
    if (x->mlp_rows) { /* tiled: dln2 into dsmall tile by tile (GELU's backward in place) */
        arch_mlp mlp = mlp_of(C, p);
        mlp.dw1 = g->fcw, mlp.db1 = g->fcb, mlp.dw2 = g->fcprojw, mlp.db2 = g->fcprojb;
        arch_mlp_backward(x, &mlp, a->dsmall, a->dres, la->ln2, a->mlph_b, a->mlpy_b, a->dbig, a->dbig);
    } else {
        /* res3 = res2 + fch_gelu @ fcprojw^T + fcprojb; dres flows to res2 unchanged */
        arch_linear_backward(x, a->dbig, g->fcprojw, g->fcprojb, a->dres, la->fch_gelu, p->fcprojw,
                            BT, 4 * C, C, 0);
        /* fch_gelu = gelu(fch) */
        be->gelu_backward(a->dbig, la->fch, a->dbig, BT * 4 * C);
        /* fch = ln2 @ fcw^T + fcb */
        arch_linear_backward(x, a->dsmall, g->fcw, g->fcb, a->dbig, la->ln2, p->fcw, BT, C, 4 * C,
                            0);
    }
    /* ln2 = layernorm(res2) */
    be->layernorm_backward(a->dres, g->ln2w, g->ln2b, a->dsmall, la->res2, p->ln2w, la->ln2_mean,
                           la->ln2_rstd, BT, C);
    /* res2 = residual + atty @ attprojw^T + attprojb */
    arch_linear_backward(x, a->dsmall, g->attprojw, g->attprojb, a->dres, la->atty, p->attprojw, BT,
                        C, C, 0);
    /* atty = attention(qkv); dqkv (B, T, 3C) into dbig */
    x->attn->backward(be, a->dbig, a->attscr, a->dsmall, la->qkv, la->atty, la->att, la->att_lse,
                      B, T, C, NH, NH, x->pos, 0);
    /* qkv = ln1 @ qkvw^T + qkvb */
    arch_linear_backward(x, a->dsmall, g->qkvw, g->qkvb, a->dbig, la->ln1, p->qkvw, BT, C, 3 * C, 0);
    /* ln1 = layernorm(residual) */
    be->layernorm_backward(a->dres, g->ln1w, g->ln1b, a->dsmall, residual, p->ln1w, la->ln1_mean,
                           la->ln1_rstd, BT, C);
}

/* ---- the final norm and the tied head ---- */

static void final_forward(const hpt_arch_ctx *x, const void *pv, void *av, const float *res3) {
    const gpt2_tensors *p = pv;
    gpt2_acts *a = av;
    /* lnf (B, T, C) = layernorm(res3 of block L-1) */
    x->be->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, res3, p->lnfw, p->lnfb,
                             (int64_t)x->B * x->T, x->cfg->C);
}

/* The logits head_rows rows at a time: all (B*T, Vp) of them kept when head_rows is B*T, else
 * the loss chunk by chunk and the logits of the last chunk only, (rows, Vp). */
static float head_forward(const hpt_arch_ctx *x, const void *pv, void *av, int has_targets) {
    const hpt_backend *be = x->be;
    const gpt2_tensors *p = pv;
    gpt2_acts *a = av;
    const hpt_model_config *c = x->cfg;
    const size_t BT = (size_t)x->B * x->T, C = (size_t)c->C, rows = x->head_rows;
    float loss = -1.0f;
    for (size_t r0 = 0; r0 < BT; r0 += rows) {
        size_t n = HPT_MIN(rows, BT - r0);
        /* logits (n, Vp) = lnf @ wte^T (tied head, no bias) */
        arch_matmul_forward(x, a->logits, a->lnf + r0 * C, p->wte, NULL, (int64_t)n, (int64_t)C,
                            c->Vp, 0);
        /* loss = mean_i (lse_i - logits[i, y_i]) */
        if (has_targets)
            loss = be->crossentropy_forward(a->losses + r0, a->lse + r0, a->logits,
                                            a->targets + r0, (int64_t)n, c->V, c->Vp);
    }
    /* the same sum, in the same order, as one chunk's */
    if (has_targets && rows < BT) loss = be->loss_mean(a->losses, BT);
    return loss;
}

static void head_backward(const hpt_arch_ctx *x, const void *pv, void *gv, void *av) {
    const hpt_backend *be = x->be;
    const gpt2_tensors *p = pv;
    gpt2_tensors *g = gv;
    gpt2_acts *a = av;
    const hpt_model_config *c = x->cfg;
    const size_t BT = (size_t)x->B * x->T, C = (size_t)c->C, rows = x->head_rows;
    /* loss = sum over targets i (y_i >= 0) of (lse_i - logits[i, y_i]) / N (docs/targets.md),
     * times the loss scale S (a power of two: every gradient below is exactly S times) */
    const float dloss = 1.0f / (x->loss_norm > 0 ? x->loss_norm : (float)BT) * x->loss_scale;
    /* logits = lnf @ wte^T:
     * dlnf = dlogits @ wte, dwte += dlogits^T @ lnf; chunk by chunk, a chunk's logits
     * recomputed first when the forward kept only the last one */
    for (size_t r0 = 0; r0 < BT; r0 += rows) {
        size_t n = HPT_MIN(rows, BT - r0);
        if (n < BT)
            arch_matmul_forward(x, a->logits, a->lnf + r0 * C, p->wte, NULL, (int64_t)n, (int64_t)C,
                                c->Vp, 0);
        be->crossentropy_backward(a->logits, a->lse + r0, a->targets + r0, (int64_t)n, c->V,
                                  c->Vp, dloss);
        arch_linear_backward(x, a->dsmall + r0 * C, g->wte, NULL, a->logits, a->lnf + r0 * C, p->wte,
                            (int64_t)n, (int64_t)C, c->Vp, 0);
    }
}

static void final_backward(const hpt_arch_ctx *x, const void *pv, void *gv, void *av,
                           const float *res3) {
    const gpt2_tensors *p = pv;
    gpt2_tensors *g = gv;
    gpt2_acts *a = av;
    const int64_t BT = (int64_t)x->B * x->T;
    const int C = x->cfg->C;
    /* lnf = layernorm(res3[L-1]): dres (B, T, C) starts here */
    x->be->memset(a->dres, 0, (size_t)BT * C * sizeof(float));
    x->be->layernorm_backward(a->dres, g->lnfw, g->lnfb, a->dsmall, res3, p->lnfw, a->lnf_mean,
                              a->lnf_rstd, BT, C);
}

/* ---- Hugging Face: GPT2LMHeadModel (asked by io/hfconfig.c and io/hfmodel.c) ---- */

static const char *const k_hf_classes[] = {"GPT2LMHeadModel", NULL};
static const char *const k_hf_types[] = {"gpt2", NULL};
static const char *const k_hf_prefixes[] = {"transformer.", "", NULL};
static const char *const k_hf_ignore[] = {".attn.bias", ".attn.masked_bias", NULL};

/* n_embd, n_layer, n_head, n_positions (n_ctx), vocab_size, layer_norm_epsilon; tanh GELU; a
 * tied head; n_inner only 4C */
static hpt_status hf_config_read(const hpt_hf_json_ops *J, const hpt_hf_json *r, const char *what,
                                 hpt_model_config *c) {
    memset(c, 0, sizeof *c);
    c->arch = HPT_ARCH_GPT2;
    HPT_CHECK(J->get_int(r, "n_embd", -1, 1, 1 << 20, what, &c->C));
    HPT_CHECK(J->get_int(r, "n_layer", -1, 1, 1 << 16, what, &c->L));
    HPT_CHECK(J->get_int(r, "n_head", -1, 1, 1 << 16, what, &c->NH));
    HPT_CHECK(J->get_int(r, "vocab_size", -1, 1, 1 << 28, what, &c->V));
    int nctx;
    HPT_CHECK(J->get_int(r, "n_ctx", 1024, 1, 1 << 24, what, &nctx));
    HPT_CHECK(J->get_int(r, "n_positions", nctx, 1, 1 << 24, what, &c->maxT));
    HPT_CHECK(J->get_int(r, "n_inner", 4L * c->C, 4L * c->C, 4L * c->C, what, &c->FF));
    HPT_CHECK(J->get_float(r, "layer_norm_epsilon", 1e-5, what, &c->norm_eps));
    HPT_CHECK(J->get_float(r, "initializer_range", 0.02, what, &c->init_range));
    HPT_CHECK(J->get_bool(r, "tie_word_embeddings", 1, what, &c->tied));
    if (!c->tied)
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: tie_word_embeddings false: hptrain's GPT-2 has "
                       "a tied head", what);
    const char *act = J->get_str(r, "activation_function");
    if (J->has(r, "activation_function") &&
        (!act || (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))))
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: activation_function '%s': hptrain's GPT-2 uses "
                       "the tanh GELU (gelu_new)", what, act ? act : "?");
    c->NKV = c->NH;
    if (c->C % c->NH)
        return J->fail(HPT_ERR_FORMAT, "%s: n_embd %d is not a multiple of n_head %d", what,
                       c->C, c->NH);
    if (c->norm_eps < 0.99e-5f || c->norm_eps > 1.01e-5f)
        return J->fail(HPT_ERR_UNSUPPORTED, "%s: layer_norm_epsilon %g: hptrain's GPT-2 uses "
                       "1e-5", what, (double)c->norm_eps);
    return HPT_OK; /* biases: GPT-2's own (attn_bias, mlp_bias are llama's switches) */
}

static void hf_config_write(const hpt_hf_json_ops *J, hpt_hf_json *r, const hpt_model_config *c,
                            const char *cls) {
    (void)cls;
    J->put_str(r, "model_type", "gpt2");
    J->put_str(r, "activation_function", "gelu_new");
    J->put_int(r, "n_embd", c->C);
    J->put_int(r, "n_layer", c->L);
    J->put_int(r, "n_head", c->NH);
    J->put_int(r, "n_positions", c->maxT);
    J->put_int(r, "n_ctx", c->maxT);
    J->put_null(r, "n_inner");
    J->put_float(r, "layer_norm_epsilon", c->norm_eps);
}

static void hf_part(hpt_hf_part *p, int *n, const char *prefix, const char *name, int l,
                    int64_t rows, int64_t W, int ndim, int transpose) {
    hpt_hf_part *q = &p[(*n)++];
    if (!name) q->name[0] = 0;
    else if (l < 0) snprintf(q->name, sizeof q->name, "%s%s", prefix, name);
    else snprintf(q->name, sizeof q->name, "%sh.%d.%s", prefix, l, name);
    q->R = rows;
    q->W = W;
    q->ndim = ndim;
    q->transpose = transpose;
}

/* table name -> Hugging Face suffix; the Conv1D weights are stored (in, out): transposed */
static const struct { const char *t, *hf; int tr; } k_hf_names[] = {
    {"ln1w", "ln_1.weight", 0}, {"ln1b", "ln_1.bias", 0}, {"qkvw", "attn.c_attn.weight", 1},
    {"qkvb", "attn.c_attn.bias", 0}, {"attprojw", "attn.c_proj.weight", 1},
    {"attprojb", "attn.c_proj.bias", 0}, {"ln2w", "ln_2.weight", 0}, {"ln2b", "ln_2.bias", 0},
    {"fcw", "mlp.c_fc.weight", 1}, {"fcb", "mlp.c_fc.bias", 0},
    {"fcprojw", "mlp.c_proj.weight", 1}, {"fcprojb", "mlp.c_proj.bias", 0},
    {"lnfw", "ln_f.weight", 0}, {"lnfb", "ln_f.bias", 0}, {"wpe", "wpe.weight", 0},
};

static int hf_parts(const hpt_model_config *c, const hpt_tensor_desc *d, int l, const char *prefix,
                    hpt_hf_part *p) {
    const int stacked = d->layer == HPT_LAYER_STACKED, nd = d->ndim - stacked;
    const int64_t rows = nd == 2 ? d->shape[stacked] : 1, W = d->shape[d->ndim - 1];
    int n = 0;
    if (!strcmp(d->name, "wte")) { /* (Vp, C): V rows, then the padding */
        hf_part(p, &n, prefix, "wte.weight", -1, c->V, W, 2, 0);
        if (rows > c->V) hf_part(p, &n, prefix, NULL, -1, rows - c->V, W, 2, 0);
        return n;
    }
    for (size_t i = 0; i < sizeof k_hf_names / sizeof *k_hf_names; i++)
        if (!strcmp(d->name, k_hf_names[i].t))
            hf_part(p, &n, prefix, k_hf_names[i].hf, stacked ? l : -1, rows, W, nd, k_hf_names[i].tr);
    return n;
}

/* ---- shapes (model/config.c routes "gpt2..." here, then fills and checks) ---- */
/* GPT-2's implied fields: NKV = NH, FF = 4C, norm_eps 1e-5, init_range 0.02, tied head. */
static void config_fill(hpt_model_config *c) {
    if (!c->NKV) c->NKV = c->NH;
    /* C past the common check's bound (a header read from a file, not yet checked) is left for
     * the check to refuse: 4 C would overflow */
    if (!c->FF && c->C > 0 && c->C <= 65536) c->FF = 4 * c->C;
    if (c->norm_eps == 0.0f) c->norm_eps = 1e-5f;
    if (c->init_range == 0.0f) c->init_range = 0.02f;
    c->tied = 1;
}

static hpt_status config_check(const hpt_model_config *c) { return model_config_check_common(c, "GPT-2"); }

static hpt_status gpt2_key(hpt_model_config *c, const char *key, double v, const char *shape) {
    int *dst = !strcmp(key, "L") ? &c->L : !strcmp(key, "C") ? &c->C : !strcmp(key, "NH") ? &c->NH
             : !strcmp(key, "V") ? &c->V : !strcmp(key, "Vp") ? &c->Vp
             : !strcmp(key, "T") || !strcmp(key, "maxT") ? &c->maxT : NULL;
    if (!dst) return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': unknown key %s (L, C, NH, V, Vp, T)", shape, key);
    return model_shape_int(v, 1, key, shape, dst);
}

static hpt_status shape_parse(const char *shape, hpt_model_config *out) {
    static const struct { const char *name; int L, C, NH; } named[] = {
        {"gpt2-124m", 12, 768, 12}, {"gpt2-350m", 24, 1024, 16},
        {"gpt2-774m", 36, 1280, 20}, {"gpt2-1558m", 48, 1600, 25},
    };
    hpt_model_config c = {.arch = HPT_ARCH_GPT2, .V = 50257, .maxT = 1024, .Vp = 0};
    int found = 0;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (!strcmp(shape, named[i].name)) {
            c.L = named[i].L; c.C = named[i].C; c.NH = named[i].NH;
            found = 1;
        }
    if (!found) {
        if (strncmp(shape, "gpt2:", 5) != 0)
            return hpt_fail(HPT_ERR_INVALID, "unknown model shape '%s' (use gpt2-124m, gpt2-350m, "
                            "gpt2-774m, gpt2-1558m or gpt2:L=..,C=..,NH=..[,V=..][,T=..])", shape);
        HPT_CHECK(model_shape_kv(shape, shape + 5, &c, gpt2_key));
        if (!c.L || !c.C || !c.NH)
            return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': L, C and NH are required", shape);
    }
    *out = c;
    return HPT_OK;
}

static const char *const k_shape_prefixes[] = {"gpt2", NULL};

/* LoRA's view of a block (model/lora.c); "c_proj" names both projections (PEFT's suffix match) */
static int linears(const hpt_model_config *c, hpt_arch_linear o[HPT_ARCH_MAX_LINEARS]) {
    const int64_t C = c->C;
    const hpt_arch_linear l[4] = {
        {"c_attn", "attn.c_attn", "qkvw", 0, 3 * C, C},
        {"attn.c_proj", "attn.c_proj", "attprojw", 0, C, C},
        {"c_fc", "mlp.c_fc", "fcw", 0, 4 * C, C},
        {"mlp.c_proj", "mlp.c_proj", "fcprojw", 0, C, 4 * C}};
    memcpy(o, l, sizeof l);
    return 4;
}

const hpt_arch hpt_arch_gpt2 = {
    .name = "gpt2",
    .describe = describe,
    .flops_per_token = flops_per_token,
    .n_fields = N_FIELDS,
    .fields = k_fields,
    .block_acts_size = sizeof(gpt2_layer_acts),
    .field_shape = field_shape,
    .n_globals = (int)(sizeof k_globals / sizeof k_globals[0]),
    .globals = k_globals,
    .acts_size = sizeof(gpt2_acts),
    .global_shape = global_shape,
    .off_inputs = offsetof(gpt2_acts, inputs),
    .off_targets = offsetof(gpt2_acts, targets),
    .off_encoded = offsetof(gpt2_acts, encoded),
    .off_logits = offsetof(gpt2_acts, logits),
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
    .config_fill = config_fill,
    /* Hugging Face */
    .hf_classes = k_hf_classes,
    .hf_model_types = k_hf_types,
    .hf_config_read = hf_config_read,
    .hf_config_write = hf_config_write,
    .hf_parts = hf_parts,
    .hf_prefixes = k_hf_prefixes,
    .hf_embed_name = "wte.weight",
    .hf_head_name = "lm_head.weight",
    .hf_ignore = k_hf_ignore,
    .hf_eot = 50256,
    .linears = linears,
    .hf_block = "transformer.h.%d.",
    /* the registry's block: costed at the reference block's rates (its shapes are the
     * reference block's: plan/calibrate.c) */
    .desc = {.name = "gpt2", .label = "GPT-2",
             .shapes = "gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, "
                       "gpt2:L=..,C=..,NH=..[,V=50257][,T=1024]"},
    .plan = NULL,
    .param_names = names,
};
