/* model.h: the model module's interface to the modules above it (the optimizer, the checkpoint
 * readers and writers, the estimator, the trainer), without the model's layout (gpt2_int.h,
 * private to src/model/). A model's parameters are a tensor table (core/tensor.h) in checkpoint
 * order; callers iterate it and reach a tensor's values through the functions below, never
 * through the struct.
 *
 *   const hpt_tensor_table *t = model_table(m);
 *   for (int i = 0; i < t->n; i++)
 *       if (t->t[i].layer != HPT_LAYER_STACKED)
 *           use(model_nonblock_param(m, i), model_nonblock_grad(m, i));
 *
 * Storage: without the offload engine the flat buffers (model_params, model_grads) hold every
 * tensor in checkpoint order (hpt_table_offset); with it they hold the non-block tensors only,
 * back to back (model_nonblock_offset), and the blocks live in the engine's homes (model_engine;
 * the checkpoint-order streams model_emit and model_absorb hide where). Every pointer handed out
 * is the model's (device tier), valid until the model is freed (gradients: until released). */
#ifndef HPT_MODEL_H
#define HPT_MODEL_H

#include "core/tensor.h"
#include "hptrain.h"
#include "kernels/backend.h"

#include <stddef.h>
#include <stdint.h>

struct offload_engine;

/* ---- the configuration ---- */
/* Fills the fields a GPT-2 configuration written with only L, C, NH, V, Vp, maxT leaves 0
 * (NKV = NH, FF = 4C, norm_eps 1e-5, tied, init_range 0.02); other architectures: nothing. */
void model_config_fill(hpt_model_config *c);
/* While on (this thread), models are created without their gradient buffer (not those with
 * the offload engine): io's hpt_model_load_forward sets it around a load. */
void model_create_forward_only(int on);

/* ---- the tensor table ---- */
/* The parameters of a configuration in checkpoint order (the architecture's describe). */
void model_describe(const hpt_model_config *cfg, hpt_tensor_table *out);
/* Floats of the architecture's device constants (llama: the rotary tables, maxT * C/NH; GPT-2
 * none), allocated with the parameters (category params). */
size_t model_consts_floats(const hpt_model_config *cfg);
/* Forward FLOPs per token at sequence length T (the architecture's count, docs/estimate.md). */
double model_flops_per_token(const hpt_model_config *cfg, int T);
/* The model's table (model_describe of its configuration). */
const hpt_tensor_table *model_table(const hpt_model *m);

/* ---- storage ---- */
/* The flat parameter buffer and its floats (num_params without the engine; with it the
 * non-block tensors, fewer with bf16 embeddings: embed.c). */
float *model_params(hpt_model *m);
size_t model_params_floats(const hpt_model *m);
/* The backend the model's tensors belong to (hpt_backend_of its hpt_mem): host code reads them
 * through its copies (the checkpoint's staged I/O, train/state.c). */
const struct hpt_backend *model_backend(const hpt_model *m);
/* Device bytes (category workspace) of the bf16 GEMMs' workspace under o: HPT_MM_BF16_WS_BYTES
 * with --matmul bf16 (allocated with the activation arena), else 0. */
uint64_t model_matmul_ws_bytes(const hpt_act_opts *o);
/* The flat gradient buffer (NULL while released: hpt_model_release_grads) and its floats. */
float *model_grads(hpt_model *m);
size_t model_grads_floats(const hpt_model *m);
/* The offload engine (src/offload/engine.h), or NULL. */
struct offload_engine *model_engine(const hpt_model *m);
/* A gradient sink (ZeRO-2 in memory, src/train/dp.c): without a block store, block l's
 * backward writes into the packed slot slot() hands out (the block store's layout, zeroed by
 * the sink), and done() takes it when complete (the runner's grads_done point). */
typedef struct {
    void *ctx;
    hpt_status (*slot)(void *ctx, int l, float **g);
    hpt_status (*done)(void *ctx, int l);
} model_grad_sink;
/* on 1: models created by this thread from now on (without the engine) hold the non-block
 * tensors' gradients only in their flat gradient buffer (the blocks' go to a sink,
 * model_set_grad_sink, which must be set before a backward); 0: whole again. */
void model_grads_away(int on);
void model_set_grad_sink(hpt_model *m, const model_grad_sink *sink);

/* Offset (floats) of non-block tensor i (a table index) in the engine's flat buffers: the
 * non-block tensors back to back in checkpoint order; and their floats. */
size_t model_nonblock_offset(const hpt_model_config *cfg, int i);
size_t model_nonblock_floats(const hpt_model_config *cfg);
/* Parameters of non-block tensor i as the optimizer's kernels take them, and their gradients
 * (NULL: the tied embedding with CHUNKED or BF16 embeddings, updated chunk by chunk). */
hpt_be_param model_nonblock_param(hpt_model *m, int i);
float *model_nonblock_grad(hpt_model *m, int i);

/* ---- checkpoint order ---- */
/* Emits buffer b (EB_P, EB_M or EB_V of the engine, offload/engine.h) in checkpoint order:
 * non-block tensors from flat (model_params_floats floats, the model's or the optimizer's),
 * block slices from the engine; without the engine flat is the whole buffer. */
typedef hpt_status (*model_emit_fn)(void *ctx, const float *x, size_t n);
hpt_status model_emit(hpt_model *m, int b, const float *flat, model_emit_fn emit, void *ctx);
/* The reverse of model_emit: fills buffer b from a stream in checkpoint order (read fills n
 * floats at dst each call). */
typedef hpt_status (*model_read_fn)(void *ctx, float *dst, size_t n);
hpt_status model_absorb(hpt_model *m, int b, float *flat, model_read_fn read, void *ctx);

/* ---- the tied embedding (hpt_embeddings; src/model/embed.c) ---- */
/* The embeddings kind (hpt_embeddings): FULL without the engine. */
int model_embeddings(const hpt_model *m);
/* CHUNKED, BF16: the last backward's sum of squares of the tied embedding's gradient, chunk by
 * chunk in order (its gradient is never whole). */
double model_wte_sumsq(const hpt_model *m);
/* CHUNKED, BF16: whether non-block tensor i has no whole gradient (the head's weight: GPT-2's
 * and a tied llama's wte; an untied llama's lm_head and wte), and its sum of squares from the
 * last backward. */
int model_emb_deferred(const hpt_model *m, int i);
double model_emb_sumsq(const hpt_model *m, int i);
/* The optimizer's update of n values of non-block tensor i from its value off (embed.c's
 * deferred update of the tied embedding; off a multiple of HPT_Q8_BLOCK and of a row): p the
 * parameters there, g their gradients. Registered by hpt_optim_create (model_set_emb_update;
 * NULL unregisters). */
typedef void (*model_emb_update_fn)(void *ctx, int i, size_t off, hpt_be_param p, const float *g,
                                   size_t n);
void model_set_emb_update(hpt_model *m, model_emb_update_fn fn, void *ctx);
/* Many processes (the trainer's dp_engine.c): each chunk's gradient g (n floats, the model's
 * writable chunk buffer) is handed to fn before its sum of squares and its update, which sums it
 * over the processes in place (collective: every rank's backward hands the same chunks in the
 * same order); a failure makes the step's norm NaN. NULL: one process. */
typedef hpt_status (*model_emb_sum_fn)(void *ctx, float *g, size_t n);
void model_set_emb_sum(hpt_model *m, model_emb_sum_fn fn, void *ctx);
/* BF16 with Kahan: the compensation of the bf16 embeddings (GPT-2 wte, wpe: (Vp + maxT) * C
 * bf16; llama wte, [lm_head]); NULL, 0 otherwise. */
void model_emb_comp(hpt_model *m, uint16_t **comp, size_t *n);

/* ---- the trainer's hooks ---- */
/* S: the next backwards compute S times the loss's gradients (1: none; a power of two). */
void model_set_loss_scale(hpt_model *m, float s);
/* The backward's gradient becomes that of (sum of the target tokens' losses) / n, n > 0: the
 * trainer's count of a whole step's targets (or B*T: the per-window scale it corrects
 * afterwards); 0: each forward's own target count (the default). */
void model_set_loss_norm(hpt_model *m, double n);
/* Testing: the next backward sets element 0 of block layer's gradients to value (layer -1:
 * none; hpt_trainer_inject_grad). */
void model_set_fault(hpt_model *m, int layer, float value);
/* *overflow 1 when this step's gradients overflowed so far: an engine's block (its 16-bit home's
 * narrowing, or a non-finite fp32 one with eng_check_grads), or a non-finite value in the flat
 * gradients (all of them without the engine; the non-block ones with it). Waits for the
 * engine's queued write-backs and clears its record. */
hpt_status model_grads_overflow(hpt_model *m, int *overflow);

/* ---- sizes from a configuration (the estimator's) ---- */
/* Bytes of the embeddings kept in bf16 by HPT_EMB_BF16 (of *params below, without Kahan's). */
uint64_t model_emb_bf16_bytes(const hpt_model_config *c);
/* Device bytes of the model's non-block parameters and gradients with the engine (params and
 * grads flat buffers, embed.c's bf16 homes and chunk buffers). */
void model_nonblock_bytes(const hpt_model_config *c, const hpt_offload_opts *o, uint64_t *params,
                         uint64_t *grads);
/* Rows of wte the head computes at once; 0 for FULL (the arena plan's logits width). */
int model_vocab_chunk(const hpt_model_config *c, const hpt_offload_opts *o);
/* HPT_ERR_INVALID when a chunk's values (rows * C) are not a multiple of HPT_Q8_BLOCK. */
hpt_status model_vocab_chunk_check(const hpt_model_config *c, const hpt_offload_opts *o);
/* hpt_model_act_tier_bytes with a head of vc vocabulary rows at a time (0: all; -vc: the same
 * without the deferred embedding gradient, a frozen base's: the head's buffers end earlier). */
hpt_status model_act_tier_bytes_vc(const hpt_model_config *cfg, int B, int T,
                                  const hpt_act_opts *o, int vc, uint64_t out[HPT_TIER_COUNT]);

/* ---- LoRA adapters (lora.c; hptrain/model.h's hpt_model_lora_*) ----
 * The adapters' table (A then B of each chosen layer, stacked over the blocks: checkpoint order
 * of hpt_model_lora_params and _grads) and options; NULL without adapters. */
const hpt_tensor_table *model_lora_table(const hpt_model *m);
const hpt_lora_opts *model_lora_opts(const hpt_model *m);
/* A frozen base's params bytes per tier (frozen.c, --base-weights kind, --base-home tier): the
 * block storage on home; the fp32 slot, a staging block off the device (two with prefetch,
 * never through the host block) and the non-block tensors (a narrow kind's embeddings in bf16,
 * one fp32 vocabulary chunk) on the device; gpu 1 (a GPU's backend, whose device memory is not
 * host memory): a disk home's pinned host block besides. And the
 * kind and home that models made by hpt_model_create_config_offload on this thread take
 * (HPT_BASE_F32 on the device: none; the trainer sets them around a LoRA run's load, so io's
 * loaders build a frozen base). */
void model_frozen_bytes(const hpt_model_config *cfg, int kind, int home, int gpu, int prefetch,
                        uint64_t out[HPT_TIER_COUNT]);
void model_set_frozen_base(int kind, int home);
int model_frozen_base(void);
int model_frozen_home(void);
/* Whether a frozen base made from now on, on this thread, reads ahead off the device (1, the
 * default; --base-prefetch): its second staging block, on the CPU backend. And whether a plan's
 * base reads ahead (prefetch asked, off the device, on the CPU): model_frozen_bytes' prefetch. */
void model_set_frozen_prefetch(int on);
int model_frozen_prefetch(void);
int model_frozen_reads_ahead(const hpt_lora_opts *o, int device);
/* A frozen base's vocabulary chunk: the rows of its bf16 embeddings widened at a time (embed.c;
 * 0: an f32 base's full embeddings) */
int model_frozen_vocab_chunk(const hpt_model_config *cfg, int kind);
/* The forward passes so far (dropout's masks follow it): a resumed run's training state. */
uint64_t model_lora_pass(const hpt_model *m);
void model_lora_set_pass(hpt_model *m, uint64_t pass);
/* Per token of a LoRA run: *frozen_dw the weight-gradient FLOPs the frozen base skips (every
 * block GEMM's and the head's), *adapters the adapters' own forward and backward FLOPs. */
hpt_status model_lora_flops(const hpt_model_config *cfg, const hpt_lora_opts *o,
                            double *frozen_dw, double *adapters);
/* The table adapters o would have on a model of cfg (the estimator's, without a model). */
hpt_status model_lora_describe(const hpt_model_config *cfg, const hpt_lora_opts *o,
                               hpt_tensor_table *out);

#endif
