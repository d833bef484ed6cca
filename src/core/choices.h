/* choices.h: the per-part checks of the plan's choices (src/core/choices.c). hpt_plan_check
 * (src/core/plan.c) is built from these; a module that takes only its own part of a plan
 * (the model's activation options, the offload engine's, the estimator's optimizer) calls the
 * same function, so each rule is written once and fails with the same words everywhere. */
#ifndef HPT_CORE_CHOICES_H
#define HPT_CORE_CHOICES_H

#include "hptrain.h"

/* The activation options on their own (head chunk, attention, recompute, offload, compression
 * and how they combine). HPT_ERR_INVALID or HPT_ERR_UNSUPPORTED. */
hpt_status hpt_act_check(const hpt_act_opts *o);

/* An optimizer kind and state width that exist (state_bits 0 reads as 32). */
hpt_status hpt_optim_check(const hpt_adamw_opts *o);

/* 1 when the optimizer's blocks keep AdamW's 32-bit m and v in the offload engine's homes. */
int hpt_optim_mv_homes(const hpt_adamw_opts *o);

/* Where the offload engine may keep an optimizer's state: AdamW's 32-bit m and v in its homes
 * (mv_homes) on any tier, any other state on the device or the host only. For a training run
 * with the engine active. HPT_ERR_UNSUPPORTED. */
hpt_status hpt_offload_check_optim(const hpt_offload_opts *o, int mv_homes);

/* The hybrid schedule's predictor against the optimizer it reads: the adam predictor needs
 * AdamW's 32-bit moments. HPT_ERR_UNSUPPORTED. */
hpt_status hpt_predictor_check_optim(int predictor, const hpt_adamw_opts *o);

/* LoRA's settings on their own: r >= 0 (0: off), alpha > 0, dropout in [0, 1). HPT_ERR_INVALID. */
hpt_status hpt_lora_check(const hpt_lora_opts *o);

/* 1 when x is a loss scale: a power of two from 1 to 2^64. */
int hpt_loss_scale_valid(float x);

#endif
