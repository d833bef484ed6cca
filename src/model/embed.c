/* embed.c: the embedding and the head without a whole gradient (hpt_offload_opts.embeddings
 * CHUNKED and BF16; the fused update only), for GPT-2's tied wte with wpe and for llama's wte
 * with its head H tied (wte) or untied (lm_head). The head runs over the vocabulary in chunks of
 * Vc rows of H; the backward's start forms only dlnf; at its end each chunk in order gets its
 * gradient (the chunk's logits recomputed, plus the encoder's rows of its tokens), its sum of
 * squares and its update at once, so H's gradient exists one (Vc, C) chunk at a time (emb_grad).
 * BF16 keeps wte, wpe (or lm_head) in bf16 in emb_h with the blocks' rounding; compute is fp32.
 * Storage, the row-chunked head's running log-sum-exp, llama's untied case: docs/optimizers.md.
 * Invariants: a chunk starts at a multiple of HPT_Q8_BLOCK and of a row (model_vocab_chunk), and
 * its rows are updated after their last use, so a chunk's update is that of its values inside
 * the whole tensor, bit for bit; only the order of sums differs from FULL (dlnf's, the norm's,
 * the running log-sum-exp). Every op goes through m->be (kernels/cpu/embed_kernels.c). */
#include "core/core.h"
#include "kernels/backend.h"
#include "model/gpt2_int.h"

#include <math.h>
#include <string.h>

#define EMB_DEFAULT_ROWS 2048

static size_t gcd_size(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int model_vocab_chunk(const hpt_model_config *c, const hpt_offload_opts *o) {
    if (!o || o->embeddings == HPT_EMB_FULL) return 0;
    int rows = o->vocab_chunk > 0 ? o->vocab_chunk : EMB_DEFAULT_ROWS;
    return rows < c->Vp ? rows : c->Vp;
}

/* The tensors the technique concerns in table t: ti[0..*nt) kept in bf16 with BF16 (GPT-2 wte,
 * wpe; llama wte and an untied lm_head, in table order), *head the head's weight and *untied
 * whether it is not wte. */
static void emb_sets(const hpt_model_config *c, const hpt_tensor_table *t, int ti[2], int *nt,
                     int *head, int *untied) {
    ti[0] = 0; /* wte */
    *nt = 1;
    *head = 0;
    *untied = 0;
    if (c->arch == HPT_ARCH_GPT2) {
        ti[(*nt)++] = 1; /* wpe */
        return;
    }
    for (int i = 1; i < t->n; i++)
        if (!strcmp(t->t[i].name, "lm_head")) {
            ti[(*nt)++] = i;
            *head = i;
            *untied = 1;
        }
}

/* Floats kept in bf16 (BF16) and floats without a whole gradient, of configuration c. */
static void emb_floats(const hpt_model_config *c, size_t *stored, size_t *deferred) {
    hpt_tensor_table t;
    model_describe(c, &t);
    int ti[2], nt, head, untied;
    emb_sets(c, &t, ti, &nt, &head, &untied);
    *stored = 0;
    for (int k = 0; k < nt; k++) *stored += hpt_tensor_numel(&t.t[ti[k]]);
    *deferred = hpt_tensor_numel(&t.t[head]) + (untied ? hpt_tensor_numel(&t.t[0]) : 0);
}

void emb_plan(hpt_model *m, int kind) {
    m->emb = kind;
    emb_sets(&m->cfg, &m->tab, m->emb_ti, &m->emb_nt, &m->emb_head, &m->emb_untied);
    m->emb_at[0] = 0;
    m->emb_at[1] = hpt_tensor_numel(&m->tab.t[m->emb_ti[0]]);
}

int emb_stored(const hpt_model *m, int i) {
    if (m->emb != HPT_EMB_BF16) return 0;
    for (int k = 0; k < m->emb_nt; k++)
        if (m->emb_ti[k] == i) return 1;
    return 0;
}

int emb_deferred(const hpt_model *m, int i) {
    return m->emb != HPT_EMB_FULL && (i == m->emb_head || (m->emb_untied && i == 0));
}

void model_nonblock_bytes(const hpt_model_config *c, const hpt_offload_opts *o, uint64_t *params,
                         uint64_t *grads) {
    uint64_t nf = model_nonblock_floats(c), C = (uint64_t)c->C;
    int e = o ? o->embeddings : HPT_EMB_FULL;
    uint64_t vc = (uint64_t)model_vocab_chunk(c, o);
    *params = nf * 4;
    *grads = nf * 4;
    if (e == HPT_EMB_FULL) return;
    size_t stored, deferred;
    emb_floats(c, &stored, &deferred);
    /* the rest fp32 (GPT-2 wpe, lnfw, lnfb; llama lnfw); one chunk of the head's gradient */
    *grads = (nf - deferred) * 4 + vc * C * 4;
    if (e == HPT_EMB_BF16) /* the rest fp32; the bf16 homes (+ Kahan's compensation); the
                            * widened chunk */
        *params = (nf - stored) * 4 + vc * C * 4 +
                  (uint64_t)stored * 2 * (o->weights == HPT_BW_BF16_KAHAN ? 2u : 1u);
}

uint64_t model_emb_bf16_bytes(const hpt_model_config *c) {
    size_t stored, deferred;
    emb_floats(c, &stored, &deferred);
    return (uint64_t)stored * 2;
}

void emb_flat_floats(const hpt_model *m, size_t *n_flat, size_t *n_gflat) {
    size_t stored, deferred;
    emb_floats(&m->cfg, &stored, &deferred);
    *n_gflat = m->emb != HPT_EMB_FULL ? *n_flat - deferred : *n_flat; /* no whole gradient */
    if (m->emb == HPT_EMB_BF16) *n_flat -= stored;
}

hpt_status model_vocab_chunk_check(const hpt_model_config *c, const hpt_offload_opts *o) {
    size_t vc = (size_t)model_vocab_chunk(c, o), C = (size_t)c->C;
    if ((vc * C) % HPT_Q8_BLOCK)
        return hpt_fail(HPT_ERR_INVALID, "vocab chunk %zu rows of C=%d: rows * C must be a "
                        "multiple of %d (use a multiple of %zu rows)", vc, c->C, HPT_Q8_BLOCK,
                        (size_t)HPT_Q8_BLOCK / gcd_size(C, HPT_Q8_BLOCK));
    return HPT_OK;
}

/* Values of emb_h (BF16). */
static size_t emb_ne(const hpt_model *m) {
    size_t ne = 0;
    for (int k = 0; k < m->emb_nt; k++) ne += hpt_tensor_numel(&m->tab.t[m->emb_ti[k]]);
    return ne;
}

hpt_status emb_create(hpt_model *m, const hpt_offload_opts *o) {
    const hpt_model_config *c = &m->cfg;
    m->Vc = model_vocab_chunk(c, o);
    if (m->emb == HPT_EMB_FULL) return HPT_OK;
    HPT_CHECK(model_vocab_chunk_check(c, o));
    size_t C = (size_t)c->C;
    size_t ne = emb_ne(m), chunk = (size_t)m->Vc * C * sizeof(float);
    if (m->grads) { /* none for a frozen base (model/frozen.c): it has no gradients at all */
        hpt_mem_set_name(m->mem, m->emb_untied ? "lm_head/wte gradient chunk" : "wte gradient chunk");
        HPT_CHECK(m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, chunk, (void **)&m->emb_grad));
    }
    if (m->emb != HPT_EMB_BF16) return HPT_OK;
    hpt_mem_set_name(m->mem, "embeddings (bf16)");
    HPT_CHECK(m->be->alloc(m->mem, (hpt_tier)m->emb_tier, HPT_CAT_PARAMS, ne * 2, (void **)&m->emb_h));
    /* zero-filled by alloc; memset is the device tier's op (a frozen base's host copy: none) */
    if (m->emb_tier == HPT_TIER_DEVICE) m->be->memset(m->emb_h, 0, ne * 2);
    if (o->weights == HPT_BW_BF16_KAHAN) {
        hpt_mem_set_name(m->mem, "embeddings (Kahan compensation)");
        HPT_CHECK(m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, ne * 2,
                                (void **)&m->emb_c));
        m->be->memset(m->emb_c, 0, ne * 2);
    }
    hpt_mem_set_name(m->mem, "wte rows (fp32)");
    return m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, chunk, (void **)&m->emb_rows);
}

void emb_free(hpt_model *m) {
    const hpt_model_config *c = &m->cfg;
    size_t ne = emb_ne(m), chunk = (size_t)m->Vc * (size_t)c->C * sizeof(float);
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->emb_grad, chunk);
    m->be->free(m->mem, (hpt_tier)m->emb_tier, HPT_CAT_PARAMS, m->emb_h, ne * 2);
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->emb_c, ne * 2);
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->emb_rows, chunk);
    m->emb_grad = m->emb_rows = NULL;
    m->emb_h = m->emb_c = NULL;
}

void model_set_emb_update(hpt_model *m, model_emb_update_fn fn, void *ctx) {
    m->emb_upd = fn;
    m->emb_ctx = ctx;
}

void model_set_emb_sum(hpt_model *m, model_emb_sum_fn fn, void *ctx) {
    m->emb_sum = fn;
    m->emb_sum_ctx = ctx;
}

void model_emb_comp(hpt_model *m, uint16_t **comp, size_t *n) {
    *comp = m->emb_c;
    *n = m->emb_c ? emb_ne(m) : 0;
}

/* Value offset of stored tensor i (a table index) in emb_h. */
static size_t emb_off(const hpt_model *m, int i) {
    return m->emb_nt > 1 && i == m->emb_ti[1] ? m->emb_at[1] : 0;
}

hpt_be_param model_nonblock_param(hpt_model *m, int i) {
    int gpt2 = m->cfg.arch == HPT_ARCH_GPT2;
    if (!emb_stored(m, i)) {
        if (!gpt2) return hpt_be_param_f32(m->tp[i]);
        float *f[] = {m->p.wte, m->p.wpe, m->p.lnfw, m->p.lnfb};
        return hpt_be_param_f32(f[i < 2 ? i : i - 12]);
    }
    size_t o = emb_off(m, i);
    /* stochastic rounding's element index: after the blocks' (the engine's l * block floats) */
    size_t bf = gpt2 ? gpt2_block_floats(&m->cfg) : hpt_table_block_numel(&m->tab);
    size_t base = (size_t)m->cfg.L * bf + o;
    return (hpt_be_param){NULL, m->emb_h + o, m->emb_c ? m->emb_c + o : NULL, 0, base};
}

float *model_nonblock_grad(hpt_model *m, int i) {
    if (m->cfg.arch != HPT_ARCH_GPT2) return m->tg[i];
    float *g[] = {m->g.wte, m->g.wpe, m->g.lnfw, m->g.lnfb};
    return g[i < 2 ? i : i - 12];
}

void emb_get(const hpt_model *m, int i, size_t lo, float *x, size_t n) {
    m->be->bf16_widen_par(x, m->emb_h + emb_off(m, i) + lo, n);
}

void emb_put(hpt_model *m, int i, size_t lo, const float *x, size_t n) {
    uint16_t *cp = m->emb_c ? m->emb_c + emb_off(m, i) + lo : NULL;
    m->be->bf16_split_par(m->emb_h + emb_off(m, i) + lo, cp, x, n);
}

/* The buffers this file uses, from the architecture's activation struct. */
typedef struct {
    float *encoded, *lnf, *logits, *lse, *losses, *dres, *dsmall;
    float *zpos; /* llama: the encoder's zero position table (T, C); GPT-2 NULL */
    const int32_t *inputs, *targets;
} emb_acts;

static emb_acts acts_of(const hpt_model *m) {
    if (m->cfg.arch == HPT_ARCH_GPT2) {
        const gpt2_acts *a = &m->a;
        return (emb_acts){a->encoded, a->lnf, a->logits, a->lse, a->losses, a->dres, a->dsmall,
                          NULL, a->inputs, a->targets};
    }
    const llama_acts *a = &m->al;
    return (emb_acts){a->encoded, a->lnf, a->logits, a->lse, a->losses, a->dres, a->dsmall,
                      a->zpos, a->inputs, a->targets};
}

/* nv rows of the head's weight H from row v0 as fp32 (nv <= Vc): the weights themselves
 * (CHUNKED) or widened into emb_rows (BF16). */
static const float *head_rows(hpt_model *m, size_t v0, size_t nv) {
    size_t C = (size_t)m->cfg.C;
    if (m->emb != HPT_EMB_BF16) return model_nonblock_param(m, m->emb_head).f32 + v0 * C;
    emb_get(m, m->emb_head, v0 * C, m->emb_rows, nv * C);
    return m->emb_rows;
}

void emb_encoder_forward(hpt_model *m) {
    emb_acts a = acts_of(m);
    const int B = m->B, T = m->T, C = m->cfg.C;
    if (m->cfg.arch != HPT_ARCH_GPT2) {
        /* encoded (B, T, C) = wte[inputs] + zeros (fp32 zeros are bf16 zeros too, twice the
         * values needed) */
        m->be->memset(a.zpos, 0, (size_t)T * (size_t)C * sizeof(float));
        if (m->emb != HPT_EMB_BF16)
            m->be->encoder_forward(a.encoded, a.inputs, m->tp[0], a.zpos, B, T, C);
        else
            m->be->encoder_forward_bf16(a.encoded, a.inputs, m->emb_h, (const uint16_t *)a.zpos,
                                        B, T, C);
        if (m->arch->embed_scale) /* encoded *= the architecture's factor (Gemma's sqrt(C)) */
            m->be->scale(a.encoded, (size_t)B * T * (size_t)C, m->arch->embed_scale(&m->cfg));
        return;
    }
    /* encoded (B, T, C) = wte[inputs] + wpe[t] (bf16: each row widened as it is gathered);
     * packed examples (model/pack.c): wpe at each token's position */
    if (m->emb != HPT_EMB_BF16 && m->pos)
        m->be->encoder_forward_pos(a.encoded, a.inputs, m->p.wte, m->p.wpe, m->pos, B, T, C);
    else if (m->pos)
        m->be->encoder_forward_bf16_pos(a.encoded, a.inputs, m->emb_h, m->emb_h + emb_off(m, 1),
                                        m->pos, B, T, C);
    else if (m->emb != HPT_EMB_BF16)
        m->be->encoder_forward(a.encoded, a.inputs, m->p.wte, m->p.wpe, B, T, C);
    else
        m->be->encoder_forward_bf16(a.encoded, a.inputs, m->emb_h, m->emb_h + emb_off(m, 1), B,
                                    T, C);
}

/* The head's GEMMs at the run's precision (--matmul: the backend's gemm_bf16 with the model's
 * workspace, or gemm), as the arch's head (arch.h's arch_matmul_*). */
static void head_gemm(const hpt_model *m, char ta, char tb, int64_t M, int64_t N, int64_t K,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                      float *Cm, int64_t ldc) {
    if (m->run.mm_ws)
        m->be->gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, Cm, ldc, m->run.mm_ws);
    else m->be->gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, Cm, ldc);
}

/* The logits of rows [r0, r0 + n) for nv vocabulary rows W: (n, nv) into a->logits. */
static void chunk_logits(hpt_model *m, const emb_acts *a, const float *W, size_t r0, size_t n,
                         size_t nv) {
    size_t C = (size_t)m->cfg.C;
    head_gemm(m, 'N', 'T', (int64_t)n, (int64_t)nv, (int64_t)C, a->lnf + r0 * C,
              (int64_t)C, W, (int64_t)C, 0.0f, a->logits, (int64_t)nv);
}

/* a->logits (n, nv) of rows [r0, r0 + n), vocabulary rows [v0, v0 + nv), become dlogits:
 * (softmax - onehot) * dloss from the saved lse. */
static void chunk_dlogits(hpt_model *m, const emb_acts *a, size_t r0, size_t n, size_t v0,
                          size_t nv, float dloss) {
    m->be->crossentropy_dlogits(a->logits, a->lse + r0, a->targets + r0, n, v0, nv, dloss);
}

void emb_head_forward(hpt_model *m, size_t rows) {
    const hpt_backend *be = m->be;
    emb_acts a = acts_of(m);
    const hpt_model_config *c = &m->cfg;
    size_t BT = (size_t)m->B * m->T, C = (size_t)c->C, V = (size_t)c->V, Vc = (size_t)m->Vc;
    size_t Vp = (size_t)c->Vp;
    if (rows >= BT) { /* all logits kept, (BT, Vp): each chunk's columns placed, then the loss */
        for (size_t v0 = 0; v0 < V; v0 += Vc) {
            size_t nv = HPT_MIN(Vc, V - v0);
            head_gemm(m, 'N', 'T', (int64_t)BT, (int64_t)nv, (int64_t)C, a.lnf, (int64_t)C,
                      head_rows(m, v0, nv), (int64_t)C, 0.0f, a.logits + v0, (int64_t)Vp);
        }
        m->loss = be->crossentropy_forward(a.losses, a.lse, a.logits, a.targets, (int64_t)BT,
                                           c->V, c->Vp);
        return;
    }
    /* the running maximum of each row in losses, the running sum of exp(logit - max) in lse */
    for (size_t v0 = 0; v0 < V; v0 += Vc) {
        size_t nv = HPT_MIN(Vc, V - v0);
        const float *W = head_rows(m, v0, nv);
        for (size_t r0 = 0; r0 < BT; r0 += rows) {
            size_t n = HPT_MIN(rows, BT - r0);
            chunk_logits(m, &a, W, r0, n, nv);
            be->logsumexp_chunk(a.losses + r0, a.lse + r0, a.logits, n, nv, v0 == 0);
        }
    }
    /* lse_i = max_i + log(sum_i); loss_i = lse_i - lnf_i . H[target_i] */
    int bf = m->emb == HPT_EMB_BF16;
    be->tied_loss(a.losses, a.lse, a.lnf, bf ? NULL : model_nonblock_param(m, m->emb_head).f32,
                  bf ? m->emb_h + emb_off(m, m->emb_head) : NULL, a.targets, BT, C);
    m->loss = be->loss_mean(a.losses, BT); /* in order, as crossentropy_forward sums */
}

void emb_head_backward(hpt_model *m, size_t rows) {
    emb_acts a = acts_of(m);
    const hpt_model_config *c = &m->cfg;
    size_t BT = (size_t)m->B * m->T, C = (size_t)c->C, V = (size_t)c->V, Vc = (size_t)m->Vc;
    float dloss = 1.0f / gpt2_loss_norm(m) * m->loss_scale;
    /* dlnf (BT, C) = sum over chunks of dlogits_v @ H_v */
    if (rows >= BT) { /* the forward's logits, kept: dlogits in place */
        size_t Vp = (size_t)c->Vp;
        m->be->crossentropy_backward(a.logits, a.lse, a.targets, (int64_t)BT, c->V, c->Vp,
                                     dloss);
        for (size_t v0 = 0; v0 < V; v0 += Vc) {
            size_t nv = HPT_MIN(Vc, V - v0);
            head_gemm(m, 'N', 'N', (int64_t)BT, (int64_t)C, (int64_t)nv, a.logits + v0,
                      (int64_t)Vp, head_rows(m, v0, nv), (int64_t)C, v0 ? 1.0f : 0.0f,
                      a.dsmall, (int64_t)C);
        }
        return;
    }
    for (size_t v0 = 0; v0 < V; v0 += Vc) {
        size_t nv = HPT_MIN(Vc, V - v0);
        const float *W = head_rows(m, v0, nv);
        for (size_t r0 = 0; r0 < BT; r0 += rows) {
            size_t n = HPT_MIN(rows, BT - r0);
            chunk_logits(m, &a, W, r0, n, nv);
            chunk_dlogits(m, &a, r0, n, v0, nv, dloss);
            head_gemm(m, 'N', 'N', (int64_t)n, (int64_t)C, (int64_t)nv, a.logits,
                      (int64_t)nv, W, (int64_t)C, v0 ? 1.0f : 0.0f, a.dsmall + r0 * C,
                      (int64_t)C);
        }
    }
}

/* Tensor ti's gradient (the head's weight H, or an untied llama's wte), chunk by chunk in
 * order, each chunk's sum of squares summed (returned) and its update run at once:
 *   head: dH_v += dlogits_v^T @ lnf (the chunk's logits recomputed);
 *   enc:  dwte_v += the encoder's rows dres[b, t] of the tokens in v (k_encoder_backward's
 *         order). */
static double chunk_pass(hpt_model *m, const emb_acts *a, size_t rows, int ti, int head, int enc) {
    const hpt_backend *be = m->be;
    const hpt_model_config *c = &m->cfg;
    size_t BT = (size_t)m->B * m->T, C = (size_t)c->C, V = (size_t)c->V, Vp = (size_t)c->Vp;
    size_t Vc = (size_t)m->Vc;
    float dloss = 1.0f / gpt2_loss_norm(m) * m->loss_scale;
    double sumsq = 0.0;
    hpt_be_param wp = model_nonblock_param(m, ti);
    for (size_t v0 = 0; v0 < Vp; v0 += Vc) {
        size_t nv = HPT_MIN(Vc, Vp - v0), nh = head && v0 < V ? HPT_MIN(nv, V - v0) : 0;
        float *G = m->emb_grad; /* (nv, C) */
        be->memset(G, 0, nv * C * sizeof(float));
        /* logits = lnf @ H^T: dH_v += dlogits_v^T @ lnf (recomputed) */
        const float *W = nh ? head_rows(m, v0, nh) : NULL;
        for (size_t r0 = 0; r0 < BT && nh; r0 += rows) {
            size_t n = HPT_MIN(rows, BT - r0);
            chunk_logits(m, a, W, r0, n, nh);
            chunk_dlogits(m, a, r0, n, v0, nh, dloss);
            head_gemm(m, 'T', 'N', (int64_t)nh, (int64_t)C, (int64_t)n, a->logits, (int64_t)nh,
                      a->lnf + r0 * C, (int64_t)C, 1.0f, G, (int64_t)C);
        }
        /* the encoder's rows: dwte[inputs[b, t]] += dres[b, t] for the tokens in the chunk */
        if (enc) be->encoder_backward_rows(G, a->dres, a->inputs, BT, C, v0, nv);
        /* many processes: the chunk's sum over them before its norm and update (model_set_emb_sum) */
        if (m->emb_sum && m->emb_sum(m->emb_sum_ctx, G, nv * C) != HPT_OK) return (double)NAN;
        sumsq += be->sumsq(G, nv * C);
        if (m->emb_upd) {
            hpt_be_param kp = wp;
            size_t off = v0 * C;
            if (kp.f32) kp.f32 += off;
            else {
                kp.bf16 += off;
                if (kp.comp) kp.comp += off;
                kp.base += off;
            }
            m->emb_upd(m->emb_ctx, ti, off, kp, G, nv * C);
        }
    }
    return sumsq;
}

void emb_backward_end(hpt_model *m, size_t rows) {
    emb_acts a = acts_of(m);
    const hpt_model_config *c = &m->cfg;
    if (m->arch->embed_scale) /* encoded = wte[inputs] s: the rows' gradient is dres s */
        m->be->scale(a.dres, (size_t)m->B * m->T * (size_t)c->C, m->arch->embed_scale(c));
    /* GPT-2: encoded = wte[inputs] + wpe[t]: dwpe[t] += sum over b of dres[b, t]
     * (encoder_backward's order) */
    if (c->arch == HPT_ARCH_GPT2 && m->pos) /* packed: dwpe[pos[b, t]] += dres[b, t] */
        m->be->encoder_backward_pos(NULL, m->g.wpe, a.dres, a.inputs, m->pos, m->B, m->T, c->C);
    else if (c->arch == HPT_ARCH_GPT2)
        m->be->encoder_backward_wpe(m->g.wpe, a.dres, (size_t)m->B * m->T, m->T, (size_t)c->C);
    if (!m->emb_untied) { /* the tied head: H = wte gets both */
        m->wte_sumsq = chunk_pass(m, &a, rows, 0, 1, 1);
        return;
    }
    m->head_sumsq = chunk_pass(m, &a, rows, m->emb_head, 1, 0);
    m->wte_sumsq = chunk_pass(m, &a, rows, 0, 0, 1);
}

int model_emb_deferred(const hpt_model *m, int i) { return emb_deferred(m, i); }
