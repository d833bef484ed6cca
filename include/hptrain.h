/* hptrain.h: train transformer language models in C inside a memory budget.
 *
 * MANUAL
 *
 *   A run in a dozen lines (errors checked in real code; see tools/hptrain/):
 *
 *     hpt_mem *mem;            hpt_mem_create(&mem);
 *     hpt_mem_set_budget(mem, HPT_TIER_DEVICE, 4ull << 30);        // 4 GiB
 *     hpt_model_config cfg;    hpt_model_config_parse("gpt2:L=4,C=128,NH=4", &cfg);
 *     hpt_model *model;         hpt_model_create_config(mem, &cfg, &model);
 *     hpt_model_init_random(model, 1337);
 *     hpt_adamw_opts ao = hpt_adamw_defaults();
 *     hpt_optim *opt;          hpt_optim_create(mem, model, &ao, &opt);
 *     for (step ...) {
 *         float loss;
 *         hpt_model_forward(model, inputs, targets, B, T, &loss);   // (B,T) int32 each
 *         hpt_model_zero_grad(model);
 *         hpt_model_backward(model);
 *         hpt_optim_step(opt, lr, grad_clip, &gnorm);
 *     }
 *     hpt_optim_free(opt); hpt_model_free(model); hpt_mem_destroy(mem);
 *
 *   Or let the trainer run the loop (data, schedule, evaluation, checkpoints, resume):
 *
 *     hpt_train_opts o = hpt_train_defaults();
 *     o.model = "gpt2-124m"; o.data = "data/train_*.bin"; o.B = 4; o.T = 256; o.steps = 1000;
 *     o.act.recompute = HPT_RECOMPUTE_SELECTIVE;          // memory techniques: o.act, o.adamw,
 *     o.offload.params = o.offload.optim = HPT_TIER_DISK; // o.offload (blocks streamed from
 *     o.offload.fused = 1;                                // disk: hpt_mem_set_disk_dir first)
 *     hpt_trainer *tr;         hpt_trainer_create(mem, &o, &tr);   // refuses a budget it
 *     while (!hpt_trainer_done(tr)) {                              // cannot meet, up front
 *         hpt_train_progress p; hpt_trainer_step(tr, &p);
 *     }
 *
 *   Gradients kept in fp16 at their offload home with dynamic loss scaling (exact mode, not
 *   fused; a step whose gradients overflow is skipped: hpt_train_progress.skipped):
 *
 *     o.offload.grads = HPT_TIER_HOST; o.offload.grad_home = HPT_GH_FP16;
 *     o.loss_scale.mode = HPT_LOSS_SCALE_DYNAMIC;       // from 2^16, halved on overflow
 *
 *   The smallest training state (8-bit AdamW, fused, bf16 weights with stochastic rounding,
 *   and bf16 tied embeddings whose gradient is one vocabulary chunk, updated chunk by chunk
 *   after the backward; a forward then needs targets: hpt_embeddings):
 *
 *     o.adamw.state_bits = 8; o.offload.fused = 1;
 *     o.offload.weights = HPT_BW_BF16_SR; o.offload.embeddings = HPT_EMB_BF16;
 *
 *   hpt_plan_estimate() tells what a configuration will allocate, by tier and category,
 *   before anything is; hpt_mem_record() and hpt_trace_write() give the exact timeline.
 *
 * ERRORS
 *   Every function that can fail returns hpt_status. HPT_OK is 0. Detail (which file, how
 *   many bytes, which tensor) is in hpt_last_error(), a per-thread text valid until the next
 *   failing call on that thread. Library code never prints, exits or aborts on a user's
 *   error. Out-of-memory on any tier is an ordinary, recoverable status.
 *
 * OWNERSHIP
 *   *_create / *_load return an object the caller owns and releases with the matching
 *   *_free, which accepts NULL. Pointer arguments are borrowed for the duration of the call
 *   unless the comment says otherwise. Buffers that a function returns through a `**_out`
 *   argument documented as "malloc'd" are released by the caller with free().
 *
 * MEMORY
 *   Tensor storage comes from an hpt_mem, which accounts every byte by tier and category and
 *   refuses an allocation that would pass the tier's budget (HPT_ERR_OOM). A model, its
 *   optimizer and its activations must share one hpt_mem, which must outlive them.
 *
 * THREADS
 *   Kernels use OpenMP; hpt_set_threads(n) fixes the count. Same seed, same inputs, same
 *   thread count: same bits.
 *
 * PARTS
 *   This header includes its parts in the order of use, each opening with its own manual:
 *     hptrain/core.h      status codes, last error, threads, clocks, sizes
 *     hptrain/mem.h       tiers, categories, budgets, accounting (hpt_mem)
 *     hptrain/model.h     the model over any architecture (GPT-2, llama): shape, forward,
 *                         backward, the activation arena's choices
 *     hptrain/offload.h   the offload engine's choices; the model made with it
 *     hptrain/infer.h     generation with a key/value cache, fp32 or int8 weights
 *     hptrain/optim.h     optimizers, 8-bit states, clipping, the learning-rate schedule
 *     hptrain/io.h        shards, data loader, tokenizer, training state, reference state
 *     hptrain/chat.h      chat templates (Jinja) rendered over conversations, and their ids
 *     hptrain/profile.h   traces, summaries, the memory picture
 *     hptrain/schedule.h  the hybrid predict schedule
 *     hptrain/plan.h      the plan (every technique choice, the budgets) and the estimator
 *     hptrain/planner.h   calibration, the cost model, the search for a plan (--plan auto)
 *     hptrain/train.h     the trainer; verification against PyTorch
 *     hptrain/dist.h      many processes: data parallel over MPI, ZeRO
 *   Include hptrain.h only; the parts are not headers of their own.
 */
#ifndef HPTRAIN_H
#define HPTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HPT_VERSION "0.1.0"

#include "hptrain/core.h"
#include "hptrain/mem.h"
#include "hptrain/model.h"
#include "hptrain/offload.h"
#include "hptrain/infer.h"
#include "hptrain/optim.h"
#include "hptrain/io.h"
#include "hptrain/chat.h"
#include "hptrain/profile.h"
#include "hptrain/schedule.h"
#include "hptrain/plan.h"
#include "hptrain/planner.h"
#include "hptrain/train.h"
#include "hptrain/dist.h"

#ifdef __cplusplus
}
#endif
#endif /* HPTRAIN_H */
