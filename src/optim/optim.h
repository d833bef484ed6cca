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
hpt_status optim_emit_moment(const hpt_optim *op, int which, gpt2_emit_fn emit, void *ctx);
hpt_status optim_absorb_moment(hpt_optim *op, int which, gpt2_read_fn read, void *ctx);
/* 1 when an 8-bit state's blocks, which start at each layer's slice of a per-layer tensor,
 * differ from blocks starting at each tensor's first value (checkpoints before version 3). */
int optim_q8_per_slice(const hpt_model_config *cfg);
/* How AdamW's 8-bit second moment is encoded (checkpoint header field 26): 1, this build's,
 * sqrt(v) on the unsigned map without a 0 code (kernels/cpu/optim.c); 0, in files written
 * before the field, v itself on a map with a 0 code. */
#define OPTIM_Q8_V_ROOT 1

#endif
