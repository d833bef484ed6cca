/* embed.c: the tied embedding without a whole gradient (hpt_offload_opts.embeddings CHUNKED and
 * BF16; the fused update only).
 *
 * Storage. CHUNKED keeps wte (Vp, C) and wpe (maxT, C) fp32 in the model's flat buffer as FULL
 * does; BF16 keeps them in emb_h, bf16 ((Vp + maxT) * C values, wte first), with the blocks'
 * rounding (o.weights: stochastic, or Kahan with emb_c, the compensation), and no fp32 copy;
 * the flat buffer then holds lnfw, lnfb only (2C floats, fp32). Compute is fp32: rows are
 * widened as they are used (the encoder's gathered rows, Vc rows of wte at a time for the head).
 * The gradient buffer holds wpe, lnfw, lnfb; wte's gradient exists one chunk at a time
 * (emb_grad, (Vc, C)).
 *
 * The head, logits = lnf @ wte^T, runs over the vocabulary in chunks of Vc rows of wte (each
 * widened once per pass). Without a row-chunked head (act.head_chunk 0) the logits are kept
 * whole, (B*T, Vp), as the full head keeps them: the forward places each chunk's columns and
 * takes the loss as the full head does (the same bits), and the backward's start turns them
 * into dlogits in place. With a row-chunked head the logits scratch is (rows, Vc) (vocabulary
 * chunks outer, row chunks inner): the forward keeps a running maximum (in losses) and a running
 * sum of exponentials (in lse) per row, then lse = max + log(sum) and loss = lse -
 * logit[target] (the target's logit as one dot product), and the backward's start recomputes
 * each chunk's logits and dlogits = (softmax - onehot) / BT times the loss scale from lse.
 * Either way the backward's start forms only dlnf = dlogits @ wte, summed over the chunks; wte's
 * gradient is not formed there. At its end, after the blocks (and so after every use of dres),
 * each chunk v of Vc rows in order:
 *   dwte_v = dlogits_v^T @ lnf  (the chunk's logits recomputed: one head GEMM more per step
 *                                than the full head with the same head chunk)
 *          + the encoder's rows dres[b, t] of the tokens in v (in (b, t) order, as
 *            k_encoder_backward adds them),
 * its sum of squares added to wte_sumsq (chunk order: fixed), and the optimizer's update of
 * those Vc * C values runs at once (emb_upd: the step's learning rate and the clip factor of the
 * previous step's norm, as every fused update). A chunk's logits depend only on its own rows of
 * wte, which are updated after their last use, so updating as we go is exact.
 * Chunks start at multiples of Vc * C values, a multiple of HPT_Q8_BLOCK (gpt2_vocab_chunk) and of
 * a row, so an 8-bit state's blocks and Adam-mini's per-row blocks never straddle two chunks,
 * and stochastic rounding's noise is keyed by the element's index: the update of a chunk is the
 * update of those values inside the whole tensor, bit for bit. What differs from FULL is only
 * the order of sums: dlnf's over chunks, the running log-sum-exp, the norm's.
 * Every op goes through the model's backend (m->be): its model-side helpers hold this file's
 * loops (kernels/cpu/embed_kernels.c). */
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

int gpt2_vocab_chunk(const hpt_model_config *c, const hpt_offload_opts *o) {
    if (!o || o->embeddings == HPT_EMB_FULL) return 0;
    int rows = o->vocab_chunk > 0 ? o->vocab_chunk : EMB_DEFAULT_ROWS;
    return rows < c->Vp ? rows : c->Vp;
}

/* Floats of wte and wpe. */
static size_t wte_n(const hpt_model_config *c) { return (size_t)c->Vp * (size_t)c->C; }
static size_t wpe_n(const hpt_model_config *c) { return (size_t)c->maxT * (size_t)c->C; }

void gpt2_nonblock_bytes(const hpt_model_config *c, const hpt_offload_opts *o, uint64_t *params,
                         uint64_t *grads) {
    uint64_t nf = gpt2_nonblock_floats(c), C = (uint64_t)c->C;
    int e = o ? o->embeddings : HPT_EMB_FULL;
    uint64_t vc = (uint64_t)gpt2_vocab_chunk(c, o);
    *params = nf * 4;
    *grads = nf * 4;
    if (e == HPT_EMB_FULL) return;
    *grads = (wpe_n(c) + 2 * C) * 4 + vc * C * 4; /* wpe, lnf; one chunk of wte */
    if (e == HPT_EMB_BF16) /* lnf fp32; wte, wpe bf16 (+ Kahan's compensation); the widened chunk */
        *params = 2 * C * 4 + vc * C * 4 +
                  (wte_n(c) + wpe_n(c)) * 2 * (o->weights == HPT_BW_BF16_KAHAN ? 2u : 1u);
}

hpt_status gpt2_vocab_chunk_check(const hpt_model_config *c, const hpt_offload_opts *o) {
    size_t vc = (size_t)gpt2_vocab_chunk(c, o), C = (size_t)c->C;
    if ((vc * C) % HPT_Q8_BLOCK)
        return hpt_fail(HPT_ERR_INVALID, "vocab chunk %zu rows of C=%d: rows * C must be a "
                        "multiple of %d (use a multiple of %zu rows)", vc, c->C, HPT_Q8_BLOCK,
                        (size_t)HPT_Q8_BLOCK / gcd_size(C, HPT_Q8_BLOCK));
    return HPT_OK;
}

hpt_status emb_create(hpt_gpt2 *m, const hpt_offload_opts *o) {
    const hpt_model_config *c = &m->cfg;
    m->emb = o ? o->embeddings : HPT_EMB_FULL;
    m->Vc = gpt2_vocab_chunk(c, o);
    if (m->emb == HPT_EMB_FULL) return HPT_OK;
    HPT_CHECK(gpt2_vocab_chunk_check(c, o));
    size_t C = (size_t)c->C;
    size_t ne = wte_n(c) + wpe_n(c), chunk = (size_t)m->Vc * C * sizeof(float);
    hpt_mem_set_name(m->mem, "wte gradient chunk");
    HPT_CHECK(m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, chunk, (void **)&m->emb_grad));
    if (m->emb != HPT_EMB_BF16) return HPT_OK;
    hpt_mem_set_name(m->mem, "embeddings (bf16)");
    HPT_CHECK(m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, ne * 2, (void **)&m->emb_h));
    m->be->memset(m->emb_h, 0, ne * 2);
    if (o->weights == HPT_BW_BF16_KAHAN) {
        hpt_mem_set_name(m->mem, "embeddings (Kahan compensation)");
        HPT_CHECK(m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, ne * 2,
                                (void **)&m->emb_c));
        m->be->memset(m->emb_c, 0, ne * 2);
    }
    hpt_mem_set_name(m->mem, "wte rows (fp32)");
    return m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, chunk, (void **)&m->emb_rows);
}

void emb_free(hpt_gpt2 *m) {
    const hpt_model_config *c = &m->cfg;
    size_t ne = wte_n(c) + wpe_n(c), chunk = (size_t)m->Vc * (size_t)c->C * sizeof(float);
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->emb_grad, chunk);
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->emb_h, ne * 2);
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->emb_c, ne * 2);
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->emb_rows, chunk);
    m->emb_grad = m->emb_rows = NULL;
    m->emb_h = m->emb_c = NULL;
}

void gpt2_set_emb_update(hpt_gpt2 *m, gpt2_emb_update_fn fn, void *ctx) {
    m->emb_upd = fn;
    m->emb_ctx = ctx;
}

void gpt2_emb_comp(hpt_gpt2 *m, uint16_t **comp, size_t *n) {
    *comp = m->emb_c;
    *n = m->emb_c ? wte_n(&m->cfg) + wpe_n(&m->cfg) : 0;
}

/* Value offset of tensor i (0 wte, 1 wpe) in emb_h. */
static size_t emb_off(const hpt_gpt2 *m, int i) { return i ? wte_n(&m->cfg) : 0; }

hpt_be_param gpt2_nonblock_param(hpt_gpt2 *m, int i) {
    if (m->cfg.arch != HPT_ARCH_GPT2) return hpt_be_param_f32(m->tp[i]);
    float *f[] = {m->p.wte, m->p.wpe, m->p.lnfw, m->p.lnfb};
    int k = i < 2 ? i : i - 12;
    if (m->emb != HPT_EMB_BF16 || i > 1) return hpt_be_param_f32(f[k]);
    size_t o = emb_off(m, i);
    /* stochastic rounding's element index: after the blocks' (the engine's l * block floats) */
    size_t base = (size_t)m->cfg.L * gpt2_block_floats(&m->cfg) + o;
    return (hpt_be_param){NULL, m->emb_h + o, m->emb_c ? m->emb_c + o : NULL, 0, base};
}

float *gpt2_nonblock_grad(hpt_gpt2 *m, int i) {
    if (m->cfg.arch != HPT_ARCH_GPT2) return m->tg[i];
    float *g[] = {m->g.wte, m->g.wpe, m->g.lnfw, m->g.lnfb};
    return g[i < 2 ? i : i - 12];
}

void emb_get(const hpt_gpt2 *m, int i, size_t lo, float *x, size_t n) {
    m->be->bf16_widen_par(x, m->emb_h + emb_off(m, i) + lo, n);
}

void emb_put(hpt_gpt2 *m, int i, size_t lo, const float *x, size_t n) {
    uint16_t *cp = m->emb_c ? m->emb_c + emb_off(m, i) + lo : NULL;
    m->be->bf16_split_par(m->emb_h + emb_off(m, i) + lo, cp, x, n);
}

/* nv rows of wte from row v0 as fp32 (nv <= Vc): the weights themselves (CHUNKED) or widened
 * into emb_rows (BF16). */
static const float *wte_rows(hpt_gpt2 *m, size_t v0, size_t nv) {
    size_t C = (size_t)m->cfg.C;
    if (m->emb != HPT_EMB_BF16) return m->p.wte + v0 * C;
    emb_get(m, 0, v0 * C, m->emb_rows, nv * C);
    return m->emb_rows;
}

void emb_encoder_forward(hpt_gpt2 *m) {
    gpt2_acts *a = &m->a;
    const int B = m->B, T = m->T, C = m->cfg.C;
    /* encoded (B, T, C) = wte[inputs] + wpe[t] (bf16: each row widened as it is gathered) */
    if (m->emb != HPT_EMB_BF16)
        m->be->encoder_forward(a->encoded, a->inputs, m->p.wte, m->p.wpe, B, T, C);
    else
        m->be->encoder_forward_bf16(a->encoded, a->inputs, m->emb_h, m->emb_h + emb_off(m, 1), B,
                                    T, C);
}

/* The logits of rows [r0, r0 + n) for nv vocabulary rows W: (n, nv) into a->logits. */
static void chunk_logits(hpt_gpt2 *m, const float *W, size_t r0, size_t n, size_t nv) {
    size_t C = (size_t)m->cfg.C;
    m->be->gemm('N', 'T', (int64_t)n, (int64_t)nv, (int64_t)C, 1.0f, m->a.lnf + r0 * C,
                (int64_t)C, W, (int64_t)C, 0.0f, m->a.logits, (int64_t)nv);
}

/* a->logits (n, nv) of rows [r0, r0 + n), vocabulary rows [v0, v0 + nv), become dlogits:
 * (softmax - onehot) * dloss from the saved lse. */
static void chunk_dlogits(hpt_gpt2 *m, size_t r0, size_t n, size_t v0, size_t nv, float dloss) {
    gpt2_acts *a = &m->a;
    m->be->crossentropy_dlogits(a->logits, a->lse + r0, a->targets + r0, n, v0, nv, dloss);
}

void emb_head_forward(hpt_gpt2 *m, size_t rows) {
    const hpt_backend *be = m->be;
    gpt2_acts *a = &m->a;
    const hpt_model_config *c = &m->cfg;
    size_t BT = (size_t)m->B * m->T, C = (size_t)c->C, V = (size_t)c->V, Vc = (size_t)m->Vc;
    size_t Vp = (size_t)c->Vp;
    if (rows >= BT) { /* all logits kept, (BT, Vp): each chunk's columns placed, then the loss */
        for (size_t v0 = 0; v0 < V; v0 += Vc) {
            size_t nv = HPT_MIN(Vc, V - v0);
            be->gemm('N', 'T', (int64_t)BT, (int64_t)nv, (int64_t)C, 1.0f, a->lnf, (int64_t)C,
                     wte_rows(m, v0, nv), (int64_t)C, 0.0f, a->logits + v0, (int64_t)Vp);
        }
        m->loss = be->crossentropy_forward(a->losses, a->lse, a->logits, a->targets, (int64_t)BT,
                                           c->V, c->Vp);
        return;
    }
    /* the running maximum of each row in losses, the running sum of exp(logit - max) in lse */
    for (size_t v0 = 0; v0 < V; v0 += Vc) {
        size_t nv = HPT_MIN(Vc, V - v0);
        const float *W = wte_rows(m, v0, nv);
        for (size_t r0 = 0; r0 < BT; r0 += rows) {
            size_t n = HPT_MIN(rows, BT - r0);
            chunk_logits(m, W, r0, n, nv);
            be->logsumexp_chunk(a->losses + r0, a->lse + r0, a->logits, n, nv, v0 == 0);
        }
    }
    /* lse_i = max_i + log(sum_i); loss_i = lse_i - lnf_i . wte[target_i] */
    be->tied_loss(a->losses, a->lse, a->lnf, m->emb == HPT_EMB_BF16 ? NULL : m->p.wte, m->emb_h,
                  a->targets, BT, C);
    m->loss = be->loss_mean(a->losses, BT); /* in order, as crossentropy_forward sums */
}

void emb_head_backward(hpt_gpt2 *m, size_t rows) {
    gpt2_acts *a = &m->a;
    const hpt_model_config *c = &m->cfg;
    size_t BT = (size_t)m->B * m->T, C = (size_t)c->C, V = (size_t)c->V, Vc = (size_t)m->Vc;
    float dloss = 1.0f / (float)BT * m->loss_scale;
    /* dlnf (BT, C) = sum over chunks of dlogits_v @ wte_v */
    if (rows >= BT) { /* the forward's logits, kept: dlogits in place */
        size_t Vp = (size_t)c->Vp;
        m->be->crossentropy_backward(a->logits, a->lse, a->targets, (int64_t)BT, c->V, c->Vp,
                                     dloss);
        for (size_t v0 = 0; v0 < V; v0 += Vc) {
            size_t nv = HPT_MIN(Vc, V - v0);
            m->be->gemm('N', 'N', (int64_t)BT, (int64_t)C, (int64_t)nv, 1.0f, a->logits + v0,
                        (int64_t)Vp, wte_rows(m, v0, nv), (int64_t)C, v0 ? 1.0f : 0.0f, a->dsmall,
                        (int64_t)C);
        }
        return;
    }
    for (size_t v0 = 0; v0 < V; v0 += Vc) {
        size_t nv = HPT_MIN(Vc, V - v0);
        const float *W = wte_rows(m, v0, nv);
        for (size_t r0 = 0; r0 < BT; r0 += rows) {
            size_t n = HPT_MIN(rows, BT - r0);
            chunk_logits(m, W, r0, n, nv);
            chunk_dlogits(m, r0, n, v0, nv, dloss);
            m->be->gemm('N', 'N', (int64_t)n, (int64_t)C, (int64_t)nv, 1.0f, a->logits,
                        (int64_t)nv, W, (int64_t)C, v0 ? 1.0f : 0.0f, a->dsmall + r0 * C,
                        (int64_t)C);
        }
    }
}

void emb_backward_end(hpt_gpt2 *m, size_t rows) {
    const hpt_backend *be = m->be;
    gpt2_acts *a = &m->a;
    const hpt_model_config *c = &m->cfg;
    const int B = m->B, T = m->T;
    size_t BT = (size_t)B * T, C = (size_t)c->C, V = (size_t)c->V, Vp = (size_t)c->Vp;
    size_t Vc = (size_t)m->Vc;
    float dloss = 1.0f / (float)BT * m->loss_scale;
    /* encoded = wte[inputs] + wpe[t]: dwpe[t] += sum over b of dres[b, t] (encoder_backward's
     * order) */
    be->encoder_backward_wpe(m->g.wpe, a->dres, BT, T, C);
    double sumsq = 0.0;
    hpt_be_param wp = gpt2_nonblock_param(m, 0);
    for (size_t v0 = 0; v0 < Vp; v0 += Vc) {
        size_t nv = HPT_MIN(Vc, Vp - v0), nh = v0 < V ? HPT_MIN(nv, V - v0) : 0;
        float *G = m->emb_grad; /* (nv, C) */
        be->memset(G, 0, nv * C * sizeof(float));
        /* logits = lnf @ wte^T: dwte_v += dlogits_v^T @ lnf (recomputed) */
        const float *W = nh ? wte_rows(m, v0, nh) : NULL;
        for (size_t r0 = 0; r0 < BT && nh; r0 += rows) {
            size_t n = HPT_MIN(rows, BT - r0);
            chunk_logits(m, W, r0, n, nh);
            chunk_dlogits(m, r0, n, v0, nh, dloss);
            be->gemm('T', 'N', (int64_t)nh, (int64_t)C, (int64_t)n, 1.0f, a->logits, (int64_t)nh,
                     a->lnf + r0 * C, (int64_t)C, 1.0f, G, (int64_t)C);
        }
        /* the encoder's rows: dwte[inputs[b, t]] += dres[b, t] for the tokens in the chunk */
        be->encoder_backward_rows(G, a->dres, a->inputs, BT, C, v0, nv);
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
            m->emb_upd(m->emb_ctx, 0, off, kp, G, nv * C);
        }
    }
    m->wte_sumsq = sumsq;
}
