/* actopts.c: the runner's reading of the activation options (hpt_act_opts): the recompute
 * segments every:N and full cut the blocks into, the ops' context the options make (read by
 * the arena plan, the store and the runner alike), and the options' check, which is the plan's
 * (core/choices.c, hpt_act_check: the defaults, parsers and names live there too). Pure
 * functions of the options and the model's state. */
#include "core/choices.h"
#include "core/core.h"
#include "model/gpt2_int.h"

int act_segment_len(const hpt_act_opts *o) {
    if (o->recompute == HPT_RECOMPUTE_FULL) return 1;
    if (o->recompute == HPT_RECOMPUTE_EVERY) return o->every;
    return 0;
}

int act_segment_end(int l, int N, int L) {
    int e = (l / N) * N + N - 1;
    return e < L - 1 ? e : L - 1;
}

int act_store_layer(const hpt_act_opts *o, int L, int l) {
    int N = act_segment_len(o);
    if (!N) return l;
    int first = (l / N) * N; /* the segment's input: the previous block's output, or the
                              * embedding's (-1) */
    return l == act_segment_end(l, N, L) ? first - 1 : -2;
}

hpt_status act_opts_check(const hpt_model_config *c, const hpt_act_opts *o) {
    HPT_CHECK(hpt_act_check(o));
    /* Gemma 3's MLP ends in its own norm before the residual add: arch_mlp's tiles add the
     * down projection straight into the residual, so gemma.c runs it untiled */
    if (c && c->arch == HPT_ARCH_GEMMA3 && o->mlp_tile > 0)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "a tiled MLP (mlp_tile %d) is not built for Gemma 3 "
                        "in this version (its MLP's output norm): use --mlp-tile 0", o->mlp_tile);
    return HPT_OK;
}

uint64_t model_matmul_ws_bytes(const hpt_act_opts *o) {
    return o->matmul == HPT_MATMUL_BF16 ? (uint64_t)HPT_MM_BF16_WS_BYTES : 0;
}

size_t act_head_rows(const hpt_act_opts *o, int B, int T) {
    size_t BT = (size_t)B * T;
    return o->head_chunk > 0 && (size_t)o->head_chunk < BT ? (size_t)o->head_chunk : BT;
}

size_t act_mlp_rows(const hpt_act_opts *o, int B, int T) {
    size_t BT = (size_t)B * T;
    return o->mlp_tile <= 0 ? 0 : (size_t)o->mlp_tile < BT ? (size_t)o->mlp_tile : BT;
}

/* The ops' context at (B, T): vc > 0 (chunked embeddings, embed.c) makes a row-chunked head's
 * logits (rows, vc). */
hpt_arch_ctx act_ctx_for(const hpt_model_config *c, const hpt_act_opts *o, int vc, int B,
                         int T) {
    hpt_arch_ctx x = {hpt_backend_cpu(), c, B, T, o->attention, act_head_rows(o, B, T), 0, 1.0f,
                     hpt_attn_ops_for(o->attention, o->matmul), NULL, 0.0f, NULL, NULL, 0, NULL,
                     0, 0, 0, NULL};
    x.logit_cols = vc && x.head_rows < (size_t)B * T ? (size_t)vc : (size_t)c->Vp;
    x.mlp_rows = act_mlp_rows(o, B, T);
    /* the plan's sharing of the norms' buffers (actplan.c; arch.h's HPT_FIELD_NORM1/2) */
    const hpt_arch *A = hpt_arch_of(c);
    for (int i = 0; A && act_segment_len(o) > 0 && i < A->n_fields; i++)
        if (A->fields[i].flags & HPT_FIELD_NORM2) x.norm_rebuild = 1;
    return x;
}

hpt_arch_ctx act_ctx(const hpt_model *m) {
    hpt_arch_ctx x = act_ctx_for(&m->cfg, &m->act, m->emb != HPT_EMB_FULL ? m->Vc : 0, m->B, m->T);
    x.be = m->be;
    x.mm_ws = m->run.mm_ws;
    x.loss_scale = m->loss_scale;
    x.loss_norm = gpt2_loss_norm(m);
    x.params = m->ap;
    x.lora = m->lora;
    x.pos = m->pos; /* packed examples (pack.c); NULL: causal */
    x.acts = m->acts;
    return x;
}
