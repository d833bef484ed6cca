/* gpt2_int.h: the GPT-2 object's layout, shared by the model and (until they iterate the tensor
 * table) the optim, io, plan and train modules. The model's files: gpt2.c (the maths, through
 * the arch interface, arch.h), runner.c (the layer loop), actplan.c (the activation arena),
 * actstore.c (offload and compression of saved fields), actopts.c (the activation options),
 * lifecycle.c (the object), embed.c (chunked and bf16 tied embeddings), config.c (shapes);
 * runner_int.h holds the runner's private state and functions. */
#ifndef HPT_GPT2_INT_H
#define HPT_GPT2_INT_H

#include "hptrain.h"
#include "kernels/kernels.h"
#include "model/arch.h"
#include "model/runner_int.h"

#include <pthread.h>

/* Pointers into the parameter (or gradient) buffer, llm.c's checkpoint order. */
typedef struct {
    float *wte;      // (Vp, C)
    float *wpe;      // (maxT, C)
    float *ln1w;     // (L, C)
    float *ln1b;     // (L, C)
    float *qkvw;     // (L, 3C, C)
    float *qkvb;     // (L, 3C)
    float *attprojw; // (L, C, C)
    float *attprojb; // (L, C)
    float *ln2w;     // (L, C)
    float *ln2b;     // (L, C)
    float *fcw;      // (L, 4C, C)
    float *fcb;      // (L, 4C)
    float *fcprojw;  // (L, C, 4C)
    float *fcprojb;  // (L, C)
    float *lnfw;     // (C)
    float *lnfb;     // (C)
} gpt2_tensors;

/* One block's parameters (or gradients): block l's slice of each per-layer tensor, in the
 * tensors' order. Without the offload engine they point into the flat buffers (slice l of each
 * tensor); with it, into one packed block (the slices back to back, this order). */
typedef struct {
    float *ln1w;     // (C)
    float *ln1b;     // (C)
    float *qkvw;     // (3C, C)
    float *qkvb;     // (3C)
    float *attprojw; // (C, C)
    float *attprojb; // (C)
    float *ln2w;     // (C)
    float *ln2b;     // (C)
    float *fcw;      // (4C, C)
    float *fcb;      // (4C)
    float *fcprojw;  // (C, 4C)
    float *fcprojb;  // (C)
} gpt2_block;
#define GPT2_BLOCK_SLICES 12
#define GPT2_FIRST_BLOCK_TENSOR 2 /* tensor index (hpt_gpt2_tensors) of a block's slice 0 */

/* Activations one block saves for its backward; all fp32 (model/gpt2.c's fields). */
typedef struct {
    float *ln1;      // (B, T, C)
    float *ln1_mean; // (B, T)
    float *ln1_rstd; // (B, T)
    float *qkv;      // (B, T, 3C)
    float *atty;     // (B, T, C) attention output before the projection
    float *att;      // (B, NH, T, T) softmax probabilities (plain attention only)
    float *att_lse;  // (B, NH, T) log-sum-exp of each row's scores (flash attention only)
    float *res2;     // (B, T, C) residual after attention
    float *ln2;      // (B, T, C)
    float *ln2_mean; // (B, T)
    float *ln2_rstd; // (B, T)
    float *fch;      // (B, T, 4C) MLP pre-activation
    float *fch_gelu; // (B, T, 4C)
    float *res3;     // (B, T, C) residual after the MLP: the block's output
} gpt2_layer_acts;

/* The non-block activations of one forward at (B, T) and the scratch of its backward, placed
 * in the runner's arena by lifetime (model/actplan.c); all fp32 unless noted. */
typedef struct {
    float *encoded;  // (B, T, C) block 0's input
    float *lnf;      // (B, T, C)
    float *lnf_mean; // (B, T)
    float *lnf_rstd; // (B, T)
    float *logits;   // (B, T, Vp), or (rows, Vp) / (rows, Vc) chunked; dlogits in place in backward
    float *lse;      // (B, T) log-sum-exp of each row
    float *losses;   // (B, T)
    int32_t *inputs; // (B, T) copy of the forward's inputs
    int32_t *targets;// (B, T) copy of its targets
    /* backward scratch */
    float *dres;     // (B, T, C) gradient of the residual stream
    float *dsmall;   // (B, T, C)
    float *dbig;     // (B, T, 4C) also holds dqkv (B, T, 3C)
    float *attscr;   // (B, NH, T)
} gpt2_acts;

struct offload_engine;
struct hpt_block_store;

/* The optimizer's update of n values of non-block tensor i from its value off (embed.c's
 * deferred wte update; off a multiple of K_Q8_BLOCK and of a row): p the parameters there, g
 * their gradients. Registered by hpt_optim_create (gpt2_set_emb_update). */
typedef void (*gpt2_emb_update_fn)(void *ctx, int i, size_t off, hpt_be_param p, const float *g,
                                   size_t n);

struct hpt_gpt2 {
    hpt_gpt2_config cfg;
    hpt_mem *mem;         /* borrowed; outlives the model */
    const hpt_backend *be;   /* every op and device copy (the CPU's today) */
    const hpt_arch *arch;    /* the maths (hpt_arch_gpt2) */
    hpt_tensor_table tab;    /* arch->describe(cfg): checkpoint order */
    size_t slice_off[GPT2_BLOCK_SLICES]; /* floats: block slice s's tensor in the flat buffers */
    size_t slice_n[GPT2_BLOCK_SLICES];   /* floats of one block's slice s */
    size_t num_params;
    float *params;        /* (n_flat) device tier, params category */
    float *grads;         /* (n_flat) device tier, grads category */
    size_t n_flat;        /* floats of params: num_params; with the engine, the non-block
                           * tensors only: wte, wpe, lnfw, lnfb back to back
                           * (gpt2_nonblock_offset); with bf16 embeddings lnfw, lnfb only */
    size_t n_gflat;       /* floats of grads: n_flat; with chunked or bf16 embeddings wpe,
                           * lnfw, lnfb only (wte's gradient is one chunk, emb_grad) */
    /* the tied embedding (hpt_embeddings; src/model/embed.c): FULL without the engine */
    int emb;
    int Vc;               /* CHUNKED, BF16: rows of wte per chunk */
    uint16_t *emb_h;      /* BF16: (Vp*C + maxT*C) bf16 wte then wpe, device params */
    uint16_t *emb_c;      /* BF16 with Kahan: their compensation (same shape), device params */
    float *emb_rows;      /* BF16: (Vc, C) fp32 chunk of wte widened, device params */
    float *emb_grad;      /* CHUNKED, BF16: (Vc, C) fp32 one chunk of wte's gradient, device grads */
    double wte_sumsq;     /* CHUNKED, BF16: the last backward's sum of squares of wte's gradient,
                           * chunk by chunk in order */
    gpt2_emb_update_fn emb_upd; /* the optimizer's update of a chunk, or NULL */
    void *emb_ctx;
    gpt2_tensors p, g;    /* with the engine, the block tensors' pointers are NULL */
    struct offload_engine *eng; /* the offload engine, or NULL (src/offload/engine.c); the
                                 * model itself never calls it: see blocks */
    struct hpt_block_store *blocks; /* where the blocks live (model/blocks.h), owned; NULL:
                                     * the flat buffers. Set with eng (gpt2_bind_blocks) */
    int grads_live;       /* a backward has added gradients since the last zero_grad */
    float loss_scale;     /* S: backward computes S times the loss's gradients (1: none; a
                           * power of two set by the trainer's loss scaler) */
    int fault_layer;      /* testing: the next backward sets element 0 of this block's
                           * gradients to fault_value (-1: none; hpt_trainer_inject_grad) */
    float fault_value;
    hpt_gpt2_act_opts act;   /* attention kind, recompute policy, offload, compression, head */
    gpt2_acts a;             /* the non-block activations (pointers into the arena) */
    hpt_run run;             /* the runner's arena, plan and activation store (runner_int.h) */
    /* the last forward */
    int B, T;
    int has_targets;
    float loss;
};

/* *overflow 1 when this step's gradients overflowed so far: an engine's block (its 16-bit home's
 * narrowing, or a non-finite fp32 one with eng_check_grads), or a non-finite value in the flat
 * gradients (all of them without the engine; wte, wpe and lnf with it). Waits for the engine's
 * queued write-backs and clears its record. */
hpt_status gpt2_grads_overflow(hpt_gpt2 *m, int *overflow);
void gpt2_point_tensors(const hpt_gpt2_config *cfg, float *base, gpt2_tensors *t);
/* Floats of each block slice (GPT2_BLOCK_SLICES), of one block, and of the non-block tensors. */
void gpt2_block_slices(const hpt_gpt2_config *cfg, size_t n[GPT2_BLOCK_SLICES]);
size_t gpt2_block_floats(const hpt_gpt2_config *cfg);
size_t gpt2_nonblock_floats(const hpt_gpt2_config *cfg);
/* Offset of non-block tensor i (0, 1, 14, 15) in the engine's flat buffers. */
size_t gpt2_nonblock_offset(const hpt_gpt2_config *cfg, int i);
int gpt2_is_block_tensor(int i);
/* Emits buffer b (EB_P, EB_M or EB_V of the engine) in checkpoint order: non-block tensors from
 * flat (n_flat floats, the model's or the optimizer's), block slices from the engine. */
typedef hpt_status (*gpt2_emit_fn)(void *ctx, const float *x, size_t n);
hpt_status gpt2_emit(hpt_gpt2 *m, int b, const float *flat, gpt2_emit_fn emit, void *ctx);
/* The optimizer's fp32 moment (0: m, 1: v) in checkpoint order through emit (AdamW fp32;
 * with or without the engine). */
hpt_status optim_emit_moment(const hpt_optim *op, int which, gpt2_emit_fn emit, void *ctx);
/* The reverse of gpt2_emit: fills buffer b from a stream in checkpoint order (read fills n
 * floats at dst each call); and the optimizer's moment likewise. */
typedef hpt_status (*gpt2_read_fn)(void *ctx, float *dst, size_t n);
hpt_status gpt2_absorb(hpt_gpt2 *m, int b, float *flat, gpt2_read_fn read, void *ctx);
hpt_status optim_absorb_moment(hpt_optim *op, int which, gpt2_read_fn read, void *ctx);
/* 1 when the engine's homes hold the blocks' m and v (AdamW fp32 with the engine: the
 * checkpoint goes through optim_emit_moment / _absorb_moment); else the optimizer's state
 * buffers are the checkpoint's, with or without the engine. */
int optim_eng_homes(const hpt_optim *op);
/* 1 when an 8-bit state's blocks, which start at each layer's slice of a per-layer tensor,
 * differ from blocks starting at each tensor's first value (checkpoints before version 3). */
int optim_q8_per_slice(const hpt_gpt2_config *cfg);
/* How AdamW's 8-bit second moment is encoded (checkpoint header field 26): 1, this build's,
 * sqrt(v) on the unsigned map without a 0 code (kernels/cpu/optim.c); 0, in files written
 * before the field, v itself on a map with a 0 code. */
#define OPTIM_Q8_V_ROOT 1

/* ---- embed.c: chunked and bf16 tied embeddings (HPT_EMB_CHUNKED, HPT_EMB_BF16) ---- */
/* Device bytes of the model's non-block parameters and gradients with the engine (params and
 * grads flat buffers, embed.c's bf16 homes and chunk buffers). */
void gpt2_nonblock_bytes(const hpt_gpt2_config *c, const hpt_offload_opts *o, uint64_t *params,
                         uint64_t *grads);
/* Allocates what embeddings o->embeddings need beside params and grads (sets m->emb, m->Vc). */
hpt_status emb_create(hpt_gpt2 *m, const hpt_offload_opts *o);
void emb_free(hpt_gpt2 *m);
/* Rows of wte the head computes at once; 0 for FULL (the arena plan's logits width). */
int gpt2_vocab_chunk(const hpt_gpt2_config *c, const hpt_offload_opts *o);
/* HPT_ERR_INVALID when a chunk's values (rows * C) are not a multiple of K_Q8_BLOCK. */
hpt_status gpt2_vocab_chunk_check(const hpt_gpt2_config *c, const hpt_offload_opts *o);
/* Parameters of non-block tensor i (0, 1, 14, 15) as the optimizer's kernels take them, and
 * their gradients (NULL: wte with CHUNKED or BF16). */
hpt_be_param gpt2_nonblock_param(hpt_gpt2 *m, int i);
float *gpt2_nonblock_grad(hpt_gpt2 *m, int i);
/* BF16: n values of tensor i (0 wte, 1 wpe) from value lo, widened into x / rounded from x
 * (to nearest; Kahan: the compensation gets the residue). */
void emb_get(const hpt_gpt2 *m, int i, size_t lo, float *x, size_t n);
void emb_put(hpt_gpt2 *m, int i, size_t lo, const float *x, size_t n);
/* The forward's encoder (a->encoded) and head (lse, losses, m->loss; needs targets), the
 * backward's head (dlnf into a->dsmall), and the backward's end: wpe's gradient and wte's
 * deferred update, chunk by chunk (see embed.c). */
void emb_encoder_forward(hpt_gpt2 *m);
void emb_head_forward(hpt_gpt2 *m, size_t rows);
void emb_head_backward(hpt_gpt2 *m, size_t rows);
void emb_backward_end(hpt_gpt2 *m, size_t rows);
/* hpt_gpt2_act_tier_bytes with a head of vc vocabulary rows at a time (0: all). */
hpt_status gpt2_act_tier_bytes_vc(const hpt_gpt2_config *cfg, int B, int T,
                                  const hpt_gpt2_act_opts *o, int vc, uint64_t out[HPT_TIER_COUNT]);
void gpt2_set_emb_update(hpt_gpt2 *m, gpt2_emb_update_fn fn, void *ctx);
/* BF16 with Kahan: the compensation of wte, wpe ((Vp + maxT) * C bf16); NULL, 0 otherwise. */
void gpt2_emb_comp(hpt_gpt2 *m, uint16_t **comp, size_t *n);

#endif
