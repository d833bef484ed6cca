/* blocks_engine.c: the offload engine as a block store (model/blocks.h), the only way the
 * model reaches it. Each entry forwards to the eng_* function of its name, unchanged, so the
 * engine sees exactly the calls, in exactly the order, the runner makes; the residency
 * invariants are engine.c's. The table lives in the engine's record and dies with it. */
#include "offload/engine_int.h"

static hpt_status begin_pass(void *ctx, int dir) { return eng_begin_pass(ctx, dir); }

static hpt_status acquire(void *ctx, int l, float **p) { return eng_acquire(ctx, l, p); }

static void release(void *ctx, int l) { eng_release(ctx, l); }

static hpt_status grad_slot(void *ctx, int l, int accumulate, float **g) {
    return eng_grad_slot(ctx, l, accumulate, g);
}

static hpt_status grads_done(void *ctx, int l) { return eng_grads_done(ctx, l); }

static hpt_status grads_overflow(void *ctx, int *overflow) {
    return eng_grads_overflow(ctx, overflow);
}

static hpt_status gather(void *ctx, int b, int l, int i, hpt_block_emit_fn emit, void *ectx) {
    return eng_emit_slice(ctx, b, l, i, emit, ectx);
}

static hpt_status scatter(void *ctx, int b, int l, int i, hpt_block_read_fn read, void *rctx) {
    return eng_absorb_slice(ctx, b, l, i, read, rctx);
}

static hpt_status block_dest(void *ctx, int b, int l, float **dst, int *in_place) {
    return eng_block_dest(ctx, b, l, dst, in_place);
}

static hpt_status store_block(void *ctx, int b, int l, const float *src) {
    return eng_store_block(ctx, b, l, src);
}

static void stats(void *ctx, hpt_offload_stats *out) { eng_stats(ctx, out); }

static void free_engine(void *ctx) { eng_free(ctx); }

hpt_block_store *eng_block_store(offload_engine *e) {
    e->store = (hpt_block_store){
        .ctx = e,
        .begin_pass = begin_pass,
        .acquire = acquire,
        .release = release,
        .grad_slot = grad_slot,
        .grads_done = grads_done,
        .grads_overflow = grads_overflow,
        .gather = gather,
        .scatter = scatter,
        .block_dest = block_dest,
        .store_block = store_block,
        .stats = stats,
        .free = free_engine,
    };
    return &e->store;
}
