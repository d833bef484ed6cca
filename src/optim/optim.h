/* optim.h: the optimizer module's interface to the modules above it (the training-state
 * checkpoint, src/train/state.c), beside the public hpt_optim_* API: how the state is laid out
 * for a checkpoint when the offload engine holds part of it. Not public. */
#ifndef HPT_OPTIM_H
#define HPT_OPTIM_H

#include "hptrain.h"
#include "model/model.h"

/* 1 when the engine's homes hold the blocks' m and v (AdamW fp32 with the engine: the
 * checkpoint goes through optim_emit_moment / _absorb_moment); else the optimizer's state
 * buffers are the checkpoint's, with or without the engine. */
int optim_eng_homes(const hpt_optim *op);
/* The optimizer's fp32 moment (0: m, 1: v) in checkpoint order through emit (AdamW fp32 with
 * the engine's homes), and the reverse: filled from a stream in checkpoint order. */
hpt_status optim_emit_moment(const hpt_optim *op, int which, model_emit_fn emit, void *ctx);
hpt_status optim_absorb_moment(hpt_optim *op, int which, model_read_fn read, void *ctx);
/* 1 when an 8-bit state's blocks, which start at each layer's slice of a per-layer tensor,
 * differ from blocks starting at each tensor's first value (checkpoints before version 3). */
int optim_q8_per_slice(const hpt_model_config *cfg);
/* How AdamW's 8-bit second moment is encoded (checkpoint header field 26): 1, this build's,
 * sqrt(v) on the unsigned map without a 0 code (kernels/cpu/optim.c); 0, in files written
 * before the field, v itself on a map with a 0 code. */
#define OPTIM_Q8_V_ROOT 1

/* ---- ZeRO's sharding (docs/zero.md) ----
 * The optimizer's units are the slices of the table's tensors in checkpoint order: tensor by
 * tensor, a block tensor's L layers' slices in order, any other tensor one unit. A unit is where
 * 8-bit blocks start and what one update call takes, so a run of whole units can be updated,
 * normed and saved on its own. */
size_t optim_units(const hpt_tensor_table *t);
/* Rank r of N's contiguous run of units [*u_lo, *u_hi) and its values [*p_lo, *p_hi) in
 * checkpoint order (the flat parameter buffer's order without the engine): boundary k is the
 * unit boundary nearest k/N of the values, so runs hold ~1/N of the parameters when no unit
 * outweighs a share (a run is empty when its neighbours' units take it all). The same on every
 * rank; N = 1 owns everything. */
void optim_owner(const hpt_tensor_table *t, int rank, int size, size_t *u_lo, size_t *u_hi,
                 size_t *p_lo, size_t *p_hi);
/* hpt_optim_create holding state for units [u_lo, u_hi) only (SIZE_MAX: to the last): its
 * buffers hold those units' state in the whole layout's order (the units of one width packed);
 * a step updates those units only. HPT_ERR_UNSUPPORTED for a proper part with the offload engine
 * or chunked embeddings. */
hpt_status optim_create_units(hpt_mem *mem, hpt_model *model, const hpt_adamw_opts *o,
                              size_t u_lo, size_t u_hi, hpt_optim **out);
/* The state buffers' bytes for units [u_lo, u_hi), and where unit u's state lies in them
 * (off, len per buffer; hpt_optim_state_buffers' order). */
void optim_units_bytes(const hpt_model_config *c, const hpt_adamw_opts *o, size_t u_lo,
                       size_t u_hi, uint64_t bytes[HPT_OPTIM_NUM_BUFS]);
void optim_unit_place(const hpt_model_config *c, const hpt_adamw_opts *o, size_t u_lo,
                      size_t u_hi, size_t u, uint64_t off[HPT_OPTIM_NUM_BUFS],
                      uint64_t len[HPT_OPTIM_NUM_BUFS]);
/* The global norm's sums of squares of the units this optimizer does not hold: fn fills them in
 * unit_sumsq (n_units, the held ones already computed), the same on every process. */
typedef hpt_status (*optim_gather_fn)(void *ctx, double *unit_sumsq, size_t n_units);
void optim_set_gather(hpt_optim *op, optim_gather_fn fn, void *ctx);
/* ZeRO-2 in memory: the held block slices' gradients are at g (value lo of checkpoint order at
 * g[0]), not in the model's flat buffer, which holds the non-block tensors only (read through
 * model_nonblock_grad). */
void optim_set_run_grads(hpt_optim *op, const float *g, size_t lo);
/* The loss scale's overflow check from the gradient norm's own sums (one round trip for both;
 * docs/cuda.md, "Host round trips"): where the units this optimizer sums are the model's flat
 * gradients exactly (no engine, no ZeRO, no LoRA, no chunked embeddings), *done = 1, *overflow
 * = whether any gradient is infinite or NaN (their sum of squares in double is then not finite,
 * and it is finite otherwise), and the next hpt_optim_step_scaled uses those sums instead of
 * taking them again (the same bits). Else *done = 0: the caller checks the gradients itself. */
hpt_status optim_grads_overflow(hpt_optim *op, int *overflow, int *done);

/* ---- ZeRO in the offload engine (stages 1-3; docs/zero_engine.md) ----
 * The blocks' state of optimizers the engine's homes do not hold (8-bit, Lion, SGD, Adam-mini)
 * is this file's, cut at the engine's shards: each rank holds, of every layer's slice of a
 * block tensor, its part [a, z) (eng_cuts, on 8-bit blocks and Adam-mini rows), packed in the
 * whole layout's order; wte, wpe and the final layernorm: with full embeddings this rank's part
 * of each (eng_zemb_cuts, engine_zemb.c), else whole on every rank. */
/* The state buffers' bytes with the blocks' slices cut to [slice_a[k], slice_z[k]) (by block
 * slice k) and the non-block tensors to [nb_a[i], nb_z[i]) (by table index; NULL: whole): the
 * estimator's. */
void optim_cut_bytes(const hpt_model_config *c, const hpt_adamw_opts *o, const size_t *slice_a,
                     const size_t *slice_z, const size_t *nb_a, const size_t *nb_z,
                     uint64_t bytes[HPT_OPTIM_NUM_BUFS]);
/* 1 when this optimizer's state is cut at the engine's shards. */
int optim_cut(const hpt_optim *op);
/* A checkpoint's bytes of state buffer b in the whole layout's order: emit (collective: every
 * rank, the same order; each layer's slice all-gathered from the owners) writes them, absorb
 * reads them all and keeps this rank's cuts. */
typedef hpt_status (*optim_bytes_fn)(void *ctx, void *p, size_t bytes);
hpt_status optim_emit_cut(const hpt_optim *op, int b, optim_bytes_fn write, void *ctx);
hpt_status optim_absorb_cut(hpt_optim *op, int b, optim_bytes_fn read, void *ctx);

/* ZeRO's sharded checkpoints (src/train/zero.c): where the state of values [a, z) of unit u
 * lies, per state buffer (bytes: off, len; len 0 where a buffer holds none of it), in the whole
 * layout (a state.bin's; a shard's pieces are cut from it) or in op's buffers (0 when op does not
 * hold all of them: another rank's unit or cut; with the engine's homes AdamW fp32's block units,
 * whose m and v are the engine's). a and z are 0, a slice's end or cut boundaries (eng_cuts). */
void optim_place_whole(const hpt_model_config *c, const hpt_adamw_opts *o, size_t u, size_t a,
                       size_t z, uint64_t off[HPT_OPTIM_NUM_BUFS], uint64_t len[HPT_OPTIM_NUM_BUFS]);
int optim_place(const hpt_optim *op, size_t u, size_t a, size_t z, uint64_t off[HPT_OPTIM_NUM_BUFS],
                uint64_t len[HPT_OPTIM_NUM_BUFS]);

#endif
