/* dp_engine.c: the trainer's side of the offload engine under many processes (docs/
 * zero_engine.md). Stage 0: every process holds the whole model in the engine's homes; each
 * block's gradients are summed over the processes at the engine's gradient-done point
 * (engine_dist.c), wte's, wpe's and the final layernorm's after the backward (dp.c), so every
 * rank takes the same (fused) update. The one-process twin of N processes with --accum 1 is
 * --accum N --zero 0: its micro-batches are summed apart, in the engine's exact mode by the
 * homes' write-back (dp_engine_micro). --zero 1-3: the engine's homes sharded over the
 * processes (dp_engine_shards; engine_z3.c), and wte's, wpe's and lnf's optimizer state with them
 * (dp_engine_zemb: their gradients reduce-scattered onto the owners; engine_zemb.c). --accum K per process: eng_set_micro says where the
 * processes' sum goes (engine_dist.c). */
#include "core/core.h"
#include "dist/dist.h"
#include "offload/engine.h"
#include "train/train_int.h"
#include "train/trainer_int.h"


hpt_status dp_engine_check(const hpt_train_opts *o) {
    int N = hpt_dist_size();
    if (N == 1 || !hpt_offload_active(&o->offload) || o->accum <= 1) return HPT_OK;
    /* each process sums its micro-batches apart in the engine's homes (engine_dist.c) */
    hpt_status s = eng_check_add_home(&o->offload);
    if (s != HPT_OK)
        return hpt_fail_ctx(s, "%d processes with --accum %d and the offload engine", N, o->accum);
    return HPT_OK;
}

int dp_engine_per_micro(const hpt_train_opts *o) {
    return o->offload.shards > 1 && o->accum > 1;
}

int dp_engine_shards(const hpt_train_opts *o) {
    return o->zero >= 1 && hpt_offload_active(&o->offload) && hpt_dist_size() > 1 ? hpt_dist_size() : 0;
}

hpt_status dp_engine_after_backward(struct offload_engine *e) { return e ? eng_z3_norm(e) : HPT_OK; }

int dp_engine_zemb(hpt_trainer *tr) { return eng_zemb_on(model_engine(tr->model)); }

/* The non-block tensors whose gradient is not in the flat buffer (chunked embeddings' wte). */
static uint32_t deferred(hpt_trainer *tr) {
    const hpt_tensor_table *t = model_table(tr->model);
    uint32_t skip = 0;
    for (int i = 0; i < t->n && i < 32; i++)
        if (t->t[i].layer != HPT_LAYER_STACKED && model_emb_deferred(tr->model, i)) skip |= 1u << i;
    return skip;
}

hpt_status dp_engine_zemb_reduce(hpt_trainer *tr) {
    return eng_zemb_reduce(model_engine(tr->model), model_table(tr->model), model_grads(tr->model),
                           deferred(tr));
}

hpt_status dp_engine_zemb_norm(hpt_trainer *tr) {
    return eng_zemb_norm(model_engine(tr->model), model_table(tr->model), model_grads(tr->model),
                         deferred(tr));
}

/* The engine's collectives: the communication layer's rank-order ones (dist.h). */
static const eng_comm k_comm = {dist_reduce_scatter_ranges, dist_allgather_ranges,
                                dist_allgather_raw, dist_allreduce_f32};

void dp_engine_setup(struct offload_engine *e) {
    if (e) eng_set_comm(e, hpt_dist_size() > 1 ? &k_comm : NULL);
}

/* Chunked and bf16 embeddings update wte (and an untied head) chunk by chunk in the backward
 * (embed.c): each chunk's gradient summed over the processes first, in rank order. */
static hpt_status emb_chunk_sum(void *ctx, float *g, size_t n) {
    (void)ctx;
    return dist_allreduce_f32(g, n, "a chunk of wte's gradient");
}

void dp_engine_emb(hpt_trainer *tr) {
    if (hpt_dist_size() > 1 && model_embeddings(tr->model) != HPT_EMB_FULL)
        model_set_emb_sum(tr->model, emb_chunk_sum, NULL);
}

hpt_status dp_engine_micro(struct offload_engine *e, int k, int K) {
    if (!e || eng_fused(e)) return HPT_OK;
    HPT_CHECK(eng_set_micro(e, k, K)); /* the apart sum, and where the processes' sum goes */
    if (k < K) return HPT_OK;
    return eng_drain(e); /* the worker's sums of squares of the last micro-batch's blocks */
}

static hpt_status discard(void *ctx, const float *x, size_t n) {
    (void)ctx;
    (void)x;
    (void)n;
    return HPT_OK;
}

hpt_status dp_engine_follow(hpt_model *model, int n) {
    struct offload_engine *e = model_engine(model);
    if (!e || !eng_home_shard(e, EB_P)) return HPT_OK; /* stages 1-2: rank 0 reads its own */
    for (int k = 0; k < n; k++) HPT_CHECK(model_emit(model, EB_P, model_params(model), discard, NULL));
    return HPT_OK;
}
