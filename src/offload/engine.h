/* engine.h: the offload engine's interface to the optimizer, the trainer and checkpoints
 * (engine.c, engine_gather.c); the model reaches it only as a block store (model/blocks.h,
 * eng_block_store: blocks_engine.c), bound by hpt_model_create_config_offload (bind.c). */
#ifndef HPT_OFFLOAD_ENGINE_H
#define HPT_OFFLOAD_ENGINE_H

#include "hptrain.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "model/blocks.h" /* EB_P..EB_V: the per-block buffers, each in its home tier */

#define ENG_MAX_SLICES 16

typedef struct offload_engine offload_engine;

/* The optimizer's update of one slice of block l: values [off, off + n) of slice i
 * (0..n_slices-1; off 0 and n the slice's size but with ZeRO, where it is this rank's part of the
 * slice: off then a multiple of the 8-bit block and of the Adam-mini row, eng_create_rows); p
 * the weights (fp32, or bf16 weights' home with seed 0 for the optimizer to set); m and v are
 * the engine's homes' (or staging's) values, NULL when the optimizer keeps its own state. */
typedef void (*eng_update_fn)(void *ctx, int l, int slice, size_t off, hpt_be_param p,
                              const float *g, float *m, float *v, size_t n);
/* Receives n floats of a slice being gathered (eng_emit_slice). */
typedef hpt_block_emit_fn eng_emit_fn; /* (model/blocks.h) */

/* L blocks of n_slices slices of slice_n[i] floats each (packed in order). Allocates the
 * parameters' home, the device slots and the gradient slots. */
hpt_status eng_create(hpt_mem *mem, int L, int n_slices, const size_t *slice_n,
                      const hpt_offload_opts *o, offload_engine **out);
/* eng_create with each slice's optimizer row (slice_row[i]: its tensor's last dimension,
 * eng_slice_rows): with ZeRO (o->shards > 1) a shard boundary inside a slice then falls on a
 * multiple of the 8-bit state's block and of the row as well as on a sum-of-squares chunk start,
 * so every optimizer's state cuts at the shards (docs/zero_engine.md). NULL: chunk starts only. */
hpt_status eng_create_rows(hpt_mem *mem, int L, int n_slices, const size_t *slice_n,
                           const size_t *slice_row, const hpt_offload_opts *o, offload_engine **out);
/* Each block slice's optimizer row from the table (its tensor's last dimension). */
void eng_slice_rows(const hpt_tensor_table *t, size_t rows[ENG_MAX_SLICES]);
/* ZeRO: rank q's part of each block slice [a[i], z[i]) in the slice's coordinates (a == z:
 * none); returns the number of shards (1 unsharded: every slice whole). eng_cut_of: the same
 * from the options (the estimator; rank of o->shards). */
int eng_cuts(const offload_engine *e, int q, size_t *a, size_t *z);
int eng_cut_of(const hpt_offload_opts *o, int n_slices, const size_t *slice_n,
               const size_t *slice_row, int rank, size_t *a, size_t *z);
/* ZeRO over the non-block tensors (wte, wpe, the final layernorm: engine_zemb.c, its layout in
 * docs/zero_engine.md). eng_zemb_on: 1 when they are cut (stages 1-3, full or chunked
 * embeddings). skip: bit i set when tensor i's gradient is not in the flat gradients g (chunked
 * embeddings' wte: summed chunk by chunk in the backward, its norm the model's).
 * eng_zemb_cut_of / eng_zemb_cuts: rank q's part [a[i], z[i]) of each non-block tensor i of t
 * (table indices; block tensors untouched), from the options or the engine; returns the
 * shards (1: whole). The rest is collective: eng_zemb_reduce reduce-scatters the flat non-block
 * gradients g onto the owners; eng_zemb_norm takes each tensor's sum of squares from the
 * owners' chunk sums (eng_zemb_sumsq: 1 and *s when taken since eng_zemb_norm_used);
 * eng_zemb_gather all-gathers the owners' ranges of the flat weights; eng_zemb_whole gathers
 * every rank's packed part (mine: this rank's range, hi - lo floats) into whole (the flat
 * floats), eng_zemb_keep copies this rank's range back out of whole. */
int eng_zemb_on(const offload_engine *e);
int eng_zemb_cut_of(const hpt_offload_opts *o, const hpt_tensor_table *t, int q, size_t *a,
                    size_t *z);
int eng_zemb_cuts(const offload_engine *e, const hpt_tensor_table *t, int q, size_t *a, size_t *z);
hpt_status eng_zemb_reduce(offload_engine *e, const hpt_tensor_table *t, float *g, uint32_t skip);
hpt_status eng_zemb_norm(offload_engine *e, const hpt_tensor_table *t, const float *g, uint32_t skip);
int eng_zemb_sumsq(const offload_engine *e, int i, double *s);
void eng_zemb_norm_used(offload_engine *e);
hpt_status eng_zemb_gather(offload_engine *e, const hpt_tensor_table *t, float *flat);
hpt_status eng_zemb_whole(offload_engine *e, const hpt_tensor_table *t, const float *mine,
                          float *whole);
void eng_zemb_keep(const offload_engine *e, const hpt_tensor_table *t, const float *whole,
                   float *mine);
/* ZeRO, collective: recv (N * bytes) = every rank's send in rank order (the trainer's comm). */
hpt_status eng_allgather_bytes(offload_engine *e, const void *send, size_t bytes, void *recv,
                               const char *what);
void eng_free(offload_engine *e);
/* Bytes eng_create and eng_attach_optim allocate, per tier and category, for L blocks of
 * block_floats floats (the estimator's restatement lives here, next to the allocations);
 * mv_homes as eng_attach_optim's. */
void eng_bytes(const hpt_offload_opts *o, int L, size_t block_floats, int training, int mv_homes,
               uint64_t out[HPT_TIER_COUNT][HPT_CAT_COUNT]);
/* eng_bytes with home_floats floats between two blocks in an fp32 home (and its staging). */
void eng_bytes_homes(const hpt_offload_opts *o, int L, size_t block_floats, size_t home_floats,
                     int training, int mv_homes, uint64_t out[HPT_TIER_COUNT][HPT_CAT_COUNT]);
/* ZeRO-3 (o->shards > 1; docs/zero_engine.md): one process's bytes, its homes holding its shard
 * of each block of n_slices slices of slice_n[i] floats (the largest shard's, so every rank's
 * figure is the same), plus its bounce buffer. */
void eng_bytes_sharded(const hpt_offload_opts *o, int L, int n_slices, const size_t *slice_n,
                       const size_t *slice_row, int training, int mv_homes, uint64_t out[HPT_TIER_COUNT][HPT_CAT_COUNT]);
/* What ZeRO-3 in the engine does not run with (HPT_ERR_UNSUPPORTED, naming it). */
hpt_status eng_check_sharded(const hpt_offload_opts *o);
/* ZeRO-3, after the backward (collective): every block's sum of squares from the shards' chunk
 * sums, the bits of one process's (eng_block_sumsq). Nothing without ZeRO-3. */
hpt_status eng_z3_norm(offload_engine *e);
/* HPT_ERR_UNSUPPORTED when an optimizer that keeps its own state (mv_homes 0) meets a disk
 * optimizer home (its state is not streamed; device and host are memory it updates in place). */
hpt_status eng_check_optim(const hpt_offload_opts *o, int mv_homes);
const hpt_offload_opts *eng_opts(const offload_engine *e);
/* Attaches the optimizer: with mv_homes, allocates the homes of its state (m, v per block);
 * without, the optimizer keeps its state (in the optim home's tier: device or host) and fn
 * gets NULL m, v. Also the
 * host staging buffers for disk homes. fn updates a slice (called on the worker or, for
 * device homes, on the caller's thread). */
hpt_status eng_attach_optim(offload_engine *e, eng_update_fn fn, void *ctx, int mv_homes);
void eng_detach_optim(offload_engine *e);
/* 1 when the engine runs its optimizer callback on host memory only, on CPU threads (a GPU's
 * fused update of host-homed state, engine_gpu.c): the callback must use the CPU's kernels. */
int eng_updates_on_host(const offload_engine *e);
/* Whether a plan's fused update runs on CPU threads on a GPU (gpu 1; on the CPU under the
 * checking transfers, HPT_TRANSFER_CHECK=1, too), and the bytes it adds to
 * eng_bytes' (a pinned block of gradients, host tier). */
int eng_gpu_host_update(const hpt_offload_opts *o, int gpu);
/* Whether a plan's bf16 host-homed weights load through device staging blocks on the LOAD
 * stream (gpu 1, or the checking transfers; eng_gpu_bytes counts the blocks). */
int eng_gpu_loads(const hpt_offload_opts *o, int gpu);
void eng_gpu_bytes(const hpt_offload_opts *o, int gpu, size_t block_floats, int training,
                   uint64_t out[HPT_TIER_COUNT][HPT_CAT_COUNT]);
int eng_fused(const offload_engine *e);
size_t eng_slice_offset(const offload_engine *e, int i);

/* Starts a pass over the blocks: dir +1 forward (prefetch l+1..l+P), -1 backward. */
hpt_status eng_begin_pass(offload_engine *e, int dir);
/* Block l's parameters on the device (packed slices), valid until eng_release. One block is
 * held at a time. */
hpt_status eng_acquire(offload_engine *e, int l, float **p_out);
void eng_release(offload_engine *e, int l);
/* A device buffer for block l's gradients (backward, while l is held): zeroed, or with
 * accumulate (exact mode: a later micro-batch of one step) holding the gradients its home has
 * so far, which the backward adds to. */
hpt_status eng_grad_slot(offload_engine *e, int l, int accumulate, float **g_out);
/* Block l's gradients are complete (l still held): records their sum of squares, then hands
 * them to the optimizer (fused) or writes them to their home (exact). */
hpt_status eng_grads_done(offload_engine *e, int l);
/* Sum of squares of block l's gradients of this step, slice by slice in order (each slice by
 * the backend's sumsq): the global norm's partial sums, combined by the optimizer in a fixed order. */
double eng_block_sumsq(const offload_engine *e, int l);
/* Reads the blocks' sums left on the device since the last read (one round trip; nothing when
 * none is pending): before eng_block_sumsq at the norm. NULL: nothing. */
void eng_sums_read(offload_engine *e);
/* Exact mode: *overflow 1 when a block's gradients overflowed since the last call, after every
 * queued write-back: a 16-bit home's narrowing met a value fp16 cannot hold (|x| > 65504, or
 * not finite) or bf16 rounded to a non-finite one; with eng_check_grads on, an fp32 home's block
 * held a non-finite value; or *overflow was 1 on entry (the caller's own finding: the flat
 * gradients'). With ZeRO (stages 1-3, where each rank checked its part) the result is the union
 * over the ranks, the same on every rank (collective). Clears the record. */
hpt_status eng_grads_overflow(offload_engine *e, int *overflow);
/* on 1: eng_grads_done scans fp32 gradients for non-finite values (the loss scaler's check;
 * 16-bit homes are checked as they are narrowed, always). */
void eng_check_grads(offload_engine *e, int on);
/* The collectives the engine calls with many processes, given by the layer above (the trainer
 * fills them with src/dist's rank-order ones: the engine sits below the communication layer in
 * the module order). Every one is collective and sums, where it sums, in rank order. */
typedef struct {
    /* buf's range [lo[q], hi[q]) of rank q (N each, ascending) = the sum over the ranks, on q */
    hpt_status (*reduce_scatter)(float *buf, const size_t *lo, const size_t *hi, const char *what);
    /* every rank's range of buf from its owner, in place */
    hpt_status (*allgather)(float *buf, const size_t *lo, const size_t *hi, const char *what);
    /* recv (N * bytes) = every rank's send, in rank order */
    hpt_status (*allgather_raw)(const void *send, size_t bytes, void *recv, const char *what);
    /* buf (n) = the sum over the ranks, on every rank */
    hpt_status (*allreduce)(float *buf, size_t n, const char *what);
} eng_comm;
/* Many processes (engine_dist.c; docs/zero_engine.md): with c (kept by pointer), eng_grads_done
 * first sums the block's gradients over the processes (ZeRO-3: reduce-scatters them), so the
 * norm, the overflow check and the (fused) update see the sum, the same bits on every rank.
 * NULL: one process. */
void eng_set_comm(offload_engine *e, const eng_comm *c);
/* Exact mode, micro-batches summed apart (--zero with --accum): on 1, each block's gradients
 * handed over are added to what their home holds (home = slot + home: the in-memory apart sum's
 * acc += g, bit for bit) instead of replacing it; the trainer turns it on for micro-batches
 * 1..K-1. HPT_ERR_UNSUPPORTED where the engine cannot: the fused update, gradients straight
 * into a device home (no slot), a 16-bit gradient home (it would round each partial sum). */
hpt_status eng_set_add_home(offload_engine *e, int on);
hpt_status eng_check_add_home(const hpt_offload_opts *o);
/* Micro-batch k of K about to run its backward (k = K: the step's backwards are done): the
 * apart sum as eng_set_add_home(k > 0), and with many processes where each block's sum over the
 * processes goes (engine_dist.c): stage 0 at the last micro-batch, of each process's sum of its
 * K; stages 1-3 at every micro-batch, its reduce-scatter, then summed over k in the shards. */
hpt_status eng_set_micro(offload_engine *e, int k, int K);
/* Waits for every queued transfer and update; the engine's first error, if any (sticky). */
hpt_status eng_drain(offload_engine *e);
/* Exact mode: one streaming pass over all blocks after the backward, fn on each (disk homes
 * read and written back with two staging sets, the next block read while one updates). */
hpt_status eng_stream_update(offload_engine *e);
/* Gathers slice i of block l of buffer b (EB_P, EB_M, EB_V) into emit, in pieces. */
hpt_status eng_emit_slice(offload_engine *e, int b, int l, int i, eng_emit_fn emit, void *ctx);
/* Fills n floats at dst (a checkpoint's stream being read). */
typedef hpt_block_read_fn eng_read_fn;
/* Scatters: fills slice i of block l of buffer b from read, in pieces (disk: each aligned window
 * read, filled and written back). */
hpt_status eng_absorb_slice(offload_engine *e, int b, int l, int i, eng_read_fn read, void *ctx);
/* The Kahan compensation of bf16-kahan weights (after waiting for queued updates): its home,
 * (L, S) bf16 values, S the block's floats (its slices packed in order) rounded up to 2048 values
 * (4096 bytes), the rounding zero; *n_out = L * S. NULL and 0 for other weights. The training
 * state saves and restores it (src/io/state.c); writing it between steps is safe. */
hpt_status eng_comp(offload_engine *e, uint16_t **comp_out, size_t *n_out);
/* With ZeRO (each rank's compensation its range) eng_comp is collective once the collectives
 * are given (eng_set_comm; before, a load: zeroed) and lends a whole copy:
 * after writing it, or after filling it (filled 1: its ranges go back into this rank's), give
 * it back. Nothing without ZeRO. */
void eng_comp_done(offload_engine *e, int filled);
/* ZeRO's sharded checkpoints (engine_ckpt.c; not collective, between steps): values [at, at + n)
 * of block l of buffer b (EB_P, EB_M, EB_V; block coordinates), inside this rank's shard where
 * b's home is sharded (eng_home_shard). get: *p at them (the memory home, or the first parameter
 * slot holding them: bf16 widened, disk read), valid until the next call into the engine; put:
 * stored from src (bf16 rounded to nearest, Kahan's residue into this rank's compensation). */
int eng_home_shard(const offload_engine *e, int b);
hpt_status eng_range_get(offload_engine *e, int b, int l, size_t at, size_t n, const float **p);
hpt_status eng_range_put(offload_engine *e, int b, int l, size_t at, size_t n, const float *src);
/* bf16-kahan: the compensation of block l's value at (in this rank's range with ZeRO), NULL
 * where this rank keeps none. */
uint16_t *eng_comp_range(offload_engine *e, int l, size_t at);
/* A device scratch of one block (for filling a block before eng_store_block), or the block's
 * home when that is memory (then fill it in place and skip the store). */
hpt_status eng_block_dest(offload_engine *e, int b, int l, float **dst, int *in_place);
hpt_status eng_store_block(offload_engine *e, int b, int l, const float *src);
/* Consistency of the residency records (slots, states, the one held block); HPT_ERR_INVALID
 * with the broken rule. Also counts the resident blocks into *resident (may be NULL). */
hpt_status eng_check(const offload_engine *e, int *resident);
void eng_stats(const offload_engine *e, hpt_offload_stats *out);
/* The engine as a block store (model/blocks.h): each entry calls the eng_* function of its
 * name (gather: eng_emit_slice, scatter: eng_absorb_slice, free: eng_free). The table lives in
 * the engine and is valid until eng_free. */
hpt_block_store *eng_block_store(offload_engine *e);

#endif
