/* runner.c: the training step of a model made of L identical blocks, generic over hpt_arch
 * (model/arch.h): the layer loop, where each block's parameters come from (the flat buffers,
 * zero copy, or a block store, in blocks.h's call order), what is recomputed (selective: the
 * arch's HPT_FIELD_RECOMPUTE fields; every:N and full: a segment's forward from its kept input),
 * and the hooks around a block's gradients (a store's grads_done, or a gradient sink when the
 * flat gradients hold no blocks: ZeRO-2). The maths is the arch's, the buffers the arena's
 * (actplan.c), stored fields the activation store's (actstore.c), chunked or bf16 embeddings
 * embed.c's. docs/activations.md.
 * Invariants: recomputation runs the forward's kernels on the forward's inputs, so its bits are
 * those of a run without it; the forward records its inputs and targets, and the backward
 * differentiates that forward, once. */
#include "core/core.h"
#include "model/blocks.h"
#include "model/gpt2_int.h"

#include <stddef.h>
#include <stdlib.h>

/* The arch's activation struct's pointer at offset off (arch.h's off_*). */
static void *acts_ptr(const hpt_model *m, size_t off) {
    return *(void *const *)((const char *)m->acts + off);
}

/* The block's input in a block activation array: the embedding's output for block 0 (the
 * backward's copy when the store brings it back: actstore.c), else the previous block's
 * output field. */
static const float *block_input(const hpt_model *m, char *base, int l) {
    const hpt_arch *A = m->arch;
    if (l == 0)
        return base == m->run.layers && m->run.st.enc_b ? m->run.st.enc_b : acts_ptr(m, A->off_encoded);
    for (int i = 0; i < A->n_fields; i++)
        if (A->fields[i].flags & HPT_FIELD_OUTPUT) return *act_field(A, base, l - 1, i);
    return NULL;
}

static const float *block_output(const hpt_model *m, char *base, int l) {
    return block_input(m, base, l + 1);
}

/* The slices of a packed block at base (the block store's layout: slices back to back). */
static void block_packed(const hpt_model *m, float *base, float *w[HPT_TABLE_MAX]) {
    size_t o = 0;
    for (int s = 0; s < m->tab.n_slices; s++) {
        w[s] = base + o;
        o += m->slice_n[s];
    }
}

/* Block l's slices of the flat buffer base (checkpoint order). */
static void block_flat(const hpt_model *m, float *base, int l, float *w[HPT_TABLE_MAX]) {
    for (int s = 0; s < m->tab.n_slices; s++)
        w[s] = base + m->slice_off[s] + (size_t)l * m->slice_n[s];
}

/* Block l's parameters, held until block_release (the store loads them when offloaded). */
static hpt_status block_acquire(hpt_model *m, int l, float *w[HPT_TABLE_MAX]) {
    const hpt_block_store *bs = m->blocks;
    if (!bs) {
        block_flat(m, m->params, l, w);
        return HPT_OK;
    }
    float *base;
    HPT_CHECK(bs->acquire(bs->ctx, l, &base));
    block_packed(m, base, w);
    return HPT_OK;
}

static void block_release(hpt_model *m, int l) {
    if (m->blocks) m->blocks->release(m->blocks->ctx, l);
}

/* Block l's gradients: the store's gradient slot (zeroed unless gradients are live), or
 * slices of the flat gradients. */
static hpt_status block_grads(hpt_model *m, int l, float *dw[HPT_TABLE_MAX]) {
    const hpt_block_store *bs = m->blocks;
    float *gbase;
    if (m->lora) { /* a frozen base: no gradient of its own (lora.c) */
        model_lora_block_grads(m, dw);
        return HPT_OK;
    }
    if (!bs && m->grads_away) { /* a sink's packed slot (ZeRO-2: model.h) */
        if (!m->gsink.slot) return hpt_fail(HPT_ERR_INVALID, "no gradient sink for the blocks");
        HPT_CHECK(m->gsink.slot(m->gsink.ctx, l, &gbase));
        block_packed(m, gbase, dw);
        return HPT_OK;
    }
    if (!bs) {
        block_flat(m, m->grads, l, dw);
        return HPT_OK;
    }
    HPT_CHECK(bs->grad_slot(bs->ctx, l, m->grads_live, &gbase));
    block_packed(m, gbase, dw);
    return HPT_OK;
}

/* A block's gradients are complete: the test fault hook (hpt_trainer_inject_grad sets element
 * 0 of the chosen block's gradients), then the store takes them. */
static hpt_status grads_done(hpt_model *m, int l, float *const *dw) {
    if (m->fault_layer == l) {
        m->be->copy(dw[0], &m->fault_value, sizeof(float), HPT_COPY_H2D);
        m->fault_layer = -1;
    }
    hpt_status s = m->blocks ? m->blocks->grads_done(m->blocks->ctx, l)
                   : m->grads_away ? m->gsink.done(m->gsink.ctx, l) : HPT_OK;
    return s == HPT_OK ? s : hpt_fail_ctx(s, "handing over block %d's gradients", l);
}

/* The blocks a pass acquires, in order (blocks.h's schedule): the forward 0 .. L-1; the
 * backward L-1 .. 0, each block's acquire preceded by those recompute() makes at its start
 * (every:N and full: the segment's blocks at its last one; selective: the block itself).
 * out holds 2L; returns the count. */
static int pass_order(const hpt_model *m, int dir, int *out) {
    const int L = m->cfg.L, N = act_segment_len(&m->act);
    int n = 0;
    for (int l = 0; l < L && dir > 0; l++) out[n++] = l;
    for (int l = L - 1; l >= 0 && dir < 0; l--) {
        if (N && l == act_segment_end(l, N, L))
            for (int j = (l / N) * N; j <= l; j++) out[n++] = j;
        else if (!N && m->act.recompute == HPT_RECOMPUTE_SELECTIVE) out[n++] = l;
        out[n++] = l;
    }
    return n;
}

/* Starts a pass over the store's blocks and hands it the pass's acquire order. */
static hpt_status begin_pass(hpt_model *m, int dir) {
    const hpt_block_store *bs = m->blocks;
    if (!bs) return HPT_OK;
    HPT_CHECK(bs->begin_pass(bs->ctx, dir));
    if (!bs->schedule) return HPT_OK;
    int *order = malloc(2 * (size_t)m->cfg.L * sizeof *order);
    if (!order) return hpt_fail(HPT_ERR_OOM, "cannot allocate a pass's block order");
    hpt_status s = bs->schedule(bs->ctx, order, pass_order(m, dir, order));
    free(order);
    return s;
}

/* At the start of block l's backward: rebuilds what the policy dropped, acquiring (and
 * releasing) each block whose forward it reruns. */
static hpt_status recompute(hpt_model *m, const hpt_arch_ctx *xf, int l) {
    const hpt_arch *A = m->arch;
    hpt_arch_ctx xb = *xf; /* the backward's: a rerun forward's tiled MLP takes its buffers */
    const hpt_arch_ctx *x = &xb;
    xb.in_backward = 1;
    const int L = m->cfg.L, N = act_segment_len(&m->act);
    char *layers = m->run.layers;
    float *w[HPT_TABLE_MAX];
    if (N) {
        /* every:N / full: at the segment's last block, rerun its forward from the kept input */
        if (l != act_segment_end(l, N, L)) return HPT_OK;
        for (int j = (l / N) * N; j <= l; j++) {
            HPT_CHECK(block_acquire(m, j, w));
            model_lora_at(m, j, w);
            hpt_arch_ctx xj = *x;
            xj.layer = j;
            A->block_forward(&xj, w, layers + (size_t)j * A->block_acts_size,
                             block_input(m, layers, j), j < l);
            block_release(m, j);
        }
    } else if (m->act.recompute == HPT_RECOMPUTE_SELECTIVE) {
        HPT_CHECK(block_acquire(m, l, w));
        model_lora_at(m, l, w);
        A->block_recompute(x, w, layers + (size_t)l * A->block_acts_size, block_input(m, layers, l));
        block_release(m, l);
    }
    return HPT_OK;
}

hpt_status hpt_model_forward(hpt_model *m, const int32_t *inputs, const int32_t *targets,
                            int B, int T, float *loss_out) {
    const hpt_model_config *c = &m->cfg;
    const hpt_arch *A = m->arch;
    if (B < 1 || T < 1) return hpt_fail(HPT_ERR_INVALID, "batch %d and sequence %d must be >= 1", B, T);
    if (T > c->maxT)
        return hpt_fail(HPT_ERR_SHAPE, "sequence length %d exceeds the model's maxT %d", T, c->maxT);
    if (m->pos && (m->pos_B != B || m->pos_T != T))
        return hpt_fail(HPT_ERR_INVALID, "the positions set are for batch %d and sequence %d, the "
                        "forward's %d and %d", m->pos_B, m->pos_T, B, T);
    size_t BT = (size_t)B * T;
    for (size_t i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= c->V)
            return hpt_fail(HPT_ERR_INVALID, "input token %d at position %zu is outside [0, %d)",
                            inputs[i], i, c->V);
        if (targets && targets[i] >= c->V) /* < 0: ignored (PyTorch's ignore_index) */
            return hpt_fail(HPT_ERR_INVALID, "target token %d at position %zu is not below the "
                            "vocabulary size %d", targets[i], i, c->V);
    }
    int64_t n_targets = 0;
    for (size_t i = 0; targets && i < BT; i++) n_targets += targets[i] >= 0;
    actstore_wait(m);
    HPT_CHECK(act_ensure(m, B, T));
    if (m->lora) {
        HPT_CHECK(model_lora_ensure(m, B, T));
        model_lora_begin_forward(m);
    }
    m->B = B;
    m->T = T;
    const int L = c->L;
    hpt_arch_ctx x = act_ctx(m);
    char *flayers = m->run.flayers;
    hpt_mem_set_layer(m->mem, -1);
    act_enter(m, 0);
    m->be->copy(acts_ptr(m, A->off_inputs), inputs, BT * sizeof(int32_t), HPT_COPY_H2D);
    m->has_targets = targets != NULL;
    m->n_targets = n_targets;
    if (targets) m->be->copy(acts_ptr(m, A->off_targets), targets, BT * sizeof(int32_t), HPT_COPY_H2D);
    if (m->emb != HPT_EMB_FULL) emb_encoder_forward(m);
    else A->embed_forward(&x, m->ap, m->acts);
    hpt_status s = actstore_put(m, -1); /* every:N, full: the embedding's output, stored */
    if (s != HPT_OK) return hpt_fail_ctx(s, "offloading the embedding's output");
    s = begin_pass(m, 1);
    for (int l = 0; l < L && s == HPT_OK; l++) {
        hpt_mem_set_layer(m->mem, l);
        act_enter(m, TP_BLOCK_F(l));
        float *w[HPT_TABLE_MAX];
        s = block_acquire(m, l, w);
        if (s != HPT_OK) {
            s = hpt_fail_ctx(s, "bringing in block %d's parameters", l);
            break;
        }
        model_lora_at(m, l, w);
        x.layer = l;
        A->block_forward(&x, w, flayers + (size_t)l * A->block_acts_size,
                         block_input(m, flayers, l), 1);
        block_release(m, l);
        s = actstore_put(m, l);
        if (s != HPT_OK) s = hpt_fail_ctx(s, "offloading block %d's activations", l);
    }
    if (s != HPT_OK) {
        m->has_targets = 0;
        hpt_mem_set_layer(m->mem, -1);
        return s;
    }
    hpt_mem_set_layer(m->mem, -1);
    act_enter(m, TP_HEAD_F(L));
    A->final_forward(&x, m->ap, m->acts, block_output(m, m->run.layers, L - 1));
    m->loss = -1.0f;
    if (m->emb != HPT_EMB_FULL) {
        if (!targets)
            return hpt_fail(HPT_ERR_UNSUPPORTED, "--embeddings %s computes the logits a vocabulary "
                            "chunk at a time: a forward without targets needs full embeddings",
                            hpt_embeddings_name((hpt_embeddings)m->emb));
        emb_head_forward(m, x.head_rows);
    } else {
        if (x.head_rows < BT && !targets)
            return hpt_fail(HPT_ERR_UNSUPPORTED, "a chunked head (head_chunk %d) computes no full "
                            "logits: a forward without targets needs head_chunk 0", m->act.head_chunk);
        m->loss = A->head_forward(&x, m->ap, m->acts, targets != NULL);
    }
    /* the kernels' mean is over all B*T rows, an ignored one's loss 0: over the targets */
    if (targets && (size_t)n_targets < BT)
        m->loss = n_targets ? (float)((double)m->loss * (double)BT / (double)n_targets) : 0.0f;
    if (loss_out) *loss_out = m->loss;
    return HPT_OK;
}

hpt_status hpt_model_backward(hpt_model *m) {
    if (!m->has_targets)
        return hpt_fail(HPT_ERR_INVALID, "backward needs a forward with targets first");
    if (!m->grads && !m->lora)
        return hpt_fail(HPT_ERR_INVALID, "backward needs gradients (released by hpt_model_release_grads)");
    const hpt_arch *A = m->arch;
    const int L = m->cfg.L;
    hpt_arch_ctx x = act_ctx(m);
    char *layers = m->run.layers;
    m->has_targets = 0; /* logits become dlogits: one backward per forward */

    act_enter(m, TP_HEAD_B(L));
    HPT_CHECK(actstore_prefetch(m, L - 1));
    if (m->emb != HPT_EMB_FULL) emb_head_backward(m, x.head_rows); /* dlnf only (embed.c) */
    else A->head_backward(&x, m->ap, m->ag, m->acts);
    A->final_backward(&x, m->ap, m->ag, m->acts, block_output(m, layers, L - 1));
    hpt_status s = begin_pass(m, -1);
    for (int l = L - 1; l >= 0 && s == HPT_OK; l--) {
        hpt_mem_set_layer(m->mem, l);
        act_enter(m, TP_BLOCK_B(L, l));
        actstore_wait(m); /* block l's fields */
        if (l > 0) { /* (every:N, full: the segment's input, the embedding's at block 1's) */
            s = actstore_prefetch(m, l - 1);
            if (s != HPT_OK) {
                s = hpt_fail_ctx(s, "bringing back block %d's activations", l - 1);
                break;
            }
        }
        float *w[HPT_TABLE_MAX], *dw[HPT_TABLE_MAX];
        x.layer = l;
        s = recompute(m, &x, l);
        if (s == HPT_OK) s = block_acquire(m, l, w);
        if (s == HPT_OK) s = block_grads(m, l, dw);
        if (s != HPT_OK) {
            s = hpt_fail_ctx(s, "bringing in block %d's parameters", l);
            break;
        }
        model_lora_at(m, l, w);
        A->block_backward(&x, w, dw, layers + (size_t)l * A->block_acts_size,
                          block_input(m, layers, l), m->acts);
        s = grads_done(m, l, dw);
        block_release(m, l);
    }
    hpt_mem_set_layer(m->mem, -1);
    if (s != HPT_OK) {
        actstore_wait(m);
        act_enter(m, -1);
        return s;
    }
    act_enter(m, TP_ENC_B(L));
    /* chunked embeddings: also the head's dwte, and wte's update chunk by chunk (embed.c) */
    if (m->lora) { /* LoRA: the embedding (and the head) frozen */
    } else if (m->emb != HPT_EMB_FULL) emb_backward_end(m, x.head_rows);
    else A->embed_backward(&x, m->ag, m->acts);
    m->grads_live = 1;
    act_enter(m, -1);
    return HPT_OK;
}
