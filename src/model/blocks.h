/* blocks.h: the block store, the runner's view of where a block's parameters and gradients live
 * outside the model's flat buffers. The model calls only through this table; the offload engine
 * implements it (offload/blocks_engine.c, bound by offload/bind.c), so the model never includes
 * the engine above it. A block is its n_slices slices (the arch's table order) packed back to
 * back (model_block_layout); every float * handed out is device memory of that layout.
 * The call order in a step is part of the contract (the engine's residency and prefetch rely on it):
 *   forward:   begin_pass(+1); for l = 0 .. L-1: acquire(l) ... release(l)
 *   backward:  begin_pass(-1); for l = L-1 .. 0: [acquire(j) ... release(j) per block j the
 *              recomputation reruns]; acquire(l); grad_slot(l, live); ... grads_done(l); release(l)
 *   between steps: grads_overflow, gather / scatter, block_dest / store_block, stats.
 * A store that reads ahead (schedule non-NULL: model/frozen.c) gets after each begin_pass the
 * pass's whole acquire order, recomputation included (runner.c's pass_order): never a guess.
 * Invariants: at most one block is held at a time; grad_slot and grads_done only while it is held
 * (grads_done hands the complete gradients over); a failed call leaves the store safe to free.
 * The table and ctx are the store's, freed once from hpt_model_free; pointers handed out are
 * borrowed until the matching release / next grad_slot / store_block. */
#ifndef HPT_MODEL_BLOCKS_H
#define HPT_MODEL_BLOCKS_H

#include "hptrain.h"

#include <stddef.h>

struct offload_engine;

/* The buffers of a block a store may keep: parameters, gradients, the optimizer's m and v. */
enum { EB_P = 0, EB_G, EB_M, EB_V, EB_COUNT };

/* Receives n floats of a slice being gathered. */
typedef hpt_status (*hpt_block_emit_fn)(void *ctx, const float *x, size_t n);
/* Fills n floats at dst (a checkpoint's stream being read). */
typedef hpt_status (*hpt_block_read_fn)(void *ctx, float *dst, size_t n);

typedef struct hpt_block_store {
    void *ctx; /* the store's state, passed to every entry */
    /* Starts a pass over the blocks: dir +1 forward (blocks 0..L-1), -1 backward (L-1..0). */
    hpt_status (*begin_pass)(void *ctx, int dir);
    /* Block l's parameters (packed), valid until release(l). */
    hpt_status (*acquire)(void *ctx, int l, float **p);
    void (*release)(void *ctx, int l);
    /* Block l's gradient buffer (packed; l held): zeroed, or with accumulate (gradients live
     * since the last zero_grad) holding the gradients block l has so far. */
    hpt_status (*grad_slot)(void *ctx, int l, int accumulate, float **g);
    /* Block l's gradients in its slot are complete (l still held). */
    hpt_status (*grads_done)(void *ctx, int l);
    /* *overflow 1 when a block's gradients overflowed since the last call, or it was 1 on entry
     * (the caller's flat gradients; under ZeRO agreed over the processes); clears the record. */
    hpt_status (*grads_overflow)(void *ctx, int *overflow);
    /* Gathers slice i of block l of buffer b (EB_P, EB_M, EB_V) into emit, in pieces. */
    hpt_status (*gather)(void *ctx, int b, int l, int i, hpt_block_emit_fn emit, void *ectx);
    /* Scatters: fills slice i of block l of buffer b from read, in pieces. */
    hpt_status (*scatter)(void *ctx, int b, int l, int i, hpt_block_read_fn read, void *rctx);
    /* Where to write a whole block of buffer b: a device scratch to hand to store_block, or
     * (*in_place 1) the block's home itself, which needs no store_block. */
    hpt_status (*block_dest)(void *ctx, int b, int l, float **dst, int *in_place);
    hpt_status (*store_block)(void *ctx, int b, int l, const float *src);
    /* The store's transfer statistics. */
    void (*stats)(void *ctx, hpt_offload_stats *out);
    void (*free)(void *ctx);
    /* Optional (NULL: the store reads no order): the pass just begun acquires order[0..n-1] in
     * this order (recomputation's acquires included); order is borrowed for the call. */
    hpt_status (*schedule)(void *ctx, const int *order, int n);
} hpt_block_store;

/* ---- binding a store to a model (its owner, src/offload/bind.c, calls these) ---- */
/* A model whose blocks live in a store: its flat buffers hold the non-block tensors only (and
 * o->embeddings' buffers, model/embed.c). Unusable until model_bind_blocks (or hpt_model_free).
 * cfg and o are checked by the caller. Failures are wrapped as hpt_model_create_config's. */
hpt_status model_create_unbound(hpt_mem *mem, const hpt_model_config *cfg,
                               const hpt_offload_opts *o, hpt_model **out);
/* The packed layout a store keeps: L blocks of *n_slices slices of slice_n[i] floats (borrowed
 * from the model). */
void model_block_layout(const hpt_model *m, int *L, int *n_slices, const size_t **slice_n);
/* Binds store (ownership passes to the model: hpt_model_free frees it) and eng, the engine
 * behind it, which the model keeps as m->eng for the modules above it and never calls. */
void model_bind_blocks(hpt_model *m, hpt_block_store *store, struct offload_engine *eng);

#endif
