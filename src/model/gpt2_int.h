/* gpt2_int.h: the model object's layout (every architecture's; GPT-2's parameter and
 * activation structs here, llama's in llama_int.h), private to src/model/ (the modules above
 * reach the model through model/model.h and its tensor table). The model's files: gpt2.c and
 * llama.c (the maths, through the arch interface, arch.h), runner.c (the layer loop), actplan.c (the activation arena),
 * actstore.c (offload and compression of saved fields), actopts.c (the activation options),
 * lifecycle.c (the object), embed.c (chunked and bf16 tied embeddings), config.c (shapes);
 * runner_int.h holds the runner's private state and functions. */
#ifndef HPT_GPT2_INT_H
#define HPT_GPT2_INT_H

#include "hptrain.h"
#include "kernels/backend.h"
#include "model/arch.h"
#include "model/llama_int.h"
#include "model/model.h"
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
#define GPT2_NUM_TENSORS 16
#define GPT2_FIRST_BLOCK_TENSOR 2 /* tensor index (gpt2_spans) of a block's slice 0 */
/* Where each of GPT-2's tensors lies in the flat buffer (llm.c's checkpoint order). */
typedef struct {
    const char *name; /* "wte", "wpe", "ln1w", ..., "lnfb" */
    size_t offset;    /* floats from the start of the parameter buffer */
    size_t numel;     /* whole tensor, stacked over L for per-layer tensors */
    int is_matrix;    /* 2-D weights (embeddings and linear weights): decayed by default */
} gpt2_span;
void gpt2_spans(const hpt_model_config *cfg, gpt2_span out[GPT2_NUM_TENSORS]);

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
    float *dbig;     // (B, T, 4C) also holds dqkv (B, T, 3C); tiled max(rows 4C, B T 3C)
    float *attscr;   // (B, NH, T)
    /* the tiled MLP's (x->mlp_rows > 0; else not planned): one tile's in the forward and, apart
     * (not live at the head), in the backward */
    float *mlph;     // (rows, 4C) fc's output
    float *mlpy;     // (rows, 4C) its GELU
    float *mlph_b;   // (rows, 4C)
    float *mlpy_b;   // (rows, 4C)
} gpt2_acts;

struct offload_engine;
struct hpt_block_store;

struct hpt_model {
    hpt_model_config cfg;
    hpt_mem *mem;         /* borrowed; outlives the model */
    const hpt_backend *be;   /* every op and device copy (the CPU's today) */
    const hpt_arch *arch;    /* the maths (hpt_arch_gpt2) */
    hpt_tensor_table tab;    /* arch->describe(cfg): checkpoint order */
    size_t slice_off[HPT_TABLE_MAX]; /* floats: block slice s's tensor in the flat buffers */
    size_t slice_n[HPT_TABLE_MAX];   /* floats of one block's slice s (tab.n_slices of them) */
    size_t num_params;
    float *params;        /* (n_flat) device tier, params category */
    float *grads;         /* (n_flat) device tier, grads category */
    size_t n_flat;        /* floats of params: num_params; with the engine, the non-block
                           * tensors only: wte, wpe, lnfw, lnfb back to back
                           * (model_nonblock_offset); with bf16 embeddings lnfw, lnfb only */
    size_t n_gflat;       /* floats of grads: n_flat; with chunked or bf16 embeddings wpe,
                           * lnfw, lnfb only (wte's gradient is one chunk, emb_grad) */
    /* the tied embedding (hpt_embeddings; src/model/embed.c): FULL without the engine */
    int emb;
    int Vc;               /* CHUNKED, BF16: rows of wte per chunk */
    /* which tensors (table indices; emb_plan): emb_ti[0..emb_nt) are kept in emb_h with BF16
     * (GPT-2 wte, wpe; llama wte and an untied lm_head) at value offsets emb_at[]; emb_head is
     * the head's weight (wte when tied, else lm_head), whose gradient exists one chunk at a
     * time, and so does wte's when the head is untied (emb_untied) */
    int emb_nt, emb_ti[2], emb_head, emb_untied;
    size_t emb_at[2];
    double head_sumsq;    /* untied: the last backward's sum of squares of lm_head's gradient */
    uint16_t *emb_h;      /* BF16: (Vp*C + maxT*C) bf16 wte then wpe, params on emb_tier (llama:
                           * wte, then lm_head when untied) */
    int emb_tier;         /* emb_h's tier: the device, or the host for a frozen base homed off
                           * the device on the CPU (frozen.c: read in place, a gather) */
    uint16_t *emb_c;      /* BF16 with Kahan: their compensation (same shape), device params */
    float *emb_rows;      /* BF16: (Vc, C) fp32 chunk of wte widened, device params */
    float *emb_grad;      /* CHUNKED, BF16: (Vc, C) fp32 one chunk of wte's gradient, device grads */
    double wte_sumsq;     /* CHUNKED, BF16: the last backward's sum of squares of wte's gradient,
                           * chunk by chunk in order */
    model_emb_update_fn emb_upd; /* the optimizer's update of a chunk, or NULL */
    void *emb_ctx;
    model_emb_sum_fn emb_sum;    /* many processes: a chunk's gradient summed over them, or NULL */
    void *emb_sum_ctx;
    gpt2_tensors p, g;    /* GPT-2's; with the engine, the block tensors' pointers are NULL */
    llama_tensors lp, lg; /* llama's (the same rules) */
    float *tp[HPT_TABLE_MAX], *tg[HPT_TABLE_MAX]; /* table tensor i in params, grads (NULL:
                                                   * not in the flat buffers); llama's only */
    void *ap, *ag;        /* the arch's parameter and gradient structs: &p, &g or &lp, &lg */
    int blocks_planned;   /* created for a block store: the flat buffers hold no blocks */
    float *consts;        /* (n_consts) device tier, params: the arch's constants (consts_fill) */
    size_t n_consts;
    struct offload_engine *eng; /* the offload engine, or NULL (src/offload/engine.c); the
                                 * model itself never calls it: see blocks */
    struct hpt_block_store *blocks; /* where the blocks live (model/blocks.h), owned; NULL:
                                     * the flat buffers. Set with eng (model_bind_blocks) */
    int grads_live;       /* a backward has added gradients since the last zero_grad */
    int grads_away;       /* the flat gradients hold the non-block tensors only (as with a
                           * store): the blocks' go to gsink (ZeRO-2, model_grads_away) */
    model_grad_sink gsink; /* without a store: block l's gradient slot and done point */
    float loss_scale;     /* S: backward computes S times the loss's gradients (1: none; a
                           * power of two set by the trainer's loss scaler) */
    double loss_norm;     /* N of the backward's sum of target losses / N (model_set_loss_norm;
                           * 0: the forward's n_targets) */
    int fault_layer;      /* testing: the next backward sets element 0 of this block's
                           * gradients to fault_value (-1: none; hpt_trainer_inject_grad) */
    float fault_value;
    struct model_lora *lora; /* LoRA adapters over the frozen base (lora.c), owned; NULL: none */
    hpt_act_opts act;   /* attention kind, recompute policy, offload, compression, head */
    gpt2_acts a;             /* GPT-2's non-block activations (pointers into the arena) */
    llama_acts al;           /* llama's */
    void *acts;              /* the arch's: &a or &al */
    hpt_run run;             /* the runner's arena, plan and activation store (runner_int.h) */
    /* the last forward */
    int B, T;
    int has_targets;
    int64_t n_targets;       /* targets >= 0 of the last forward (the others are ignored) */
    float loss;              /* the mean over those n_targets (0 when there are none) */
    /* packed examples (model/pack.c, docs/packing.md): the positions of the next forwards at
     * (pos_B, pos_T), (pos_B * pos_T) int32 device, activations; NULL: none (causal) */
    int32_t *pos;
    int pos_B, pos_T;
};

/* The backward's normaliser N (the loss's gradient is that of sum over targets / N): the
 * trainer's (a step's), else the last forward's target count; as a float, B*T gives the bits of
 * the 1.0f / (float)BT the backward used before targets could be ignored. */
static inline float gpt2_loss_norm(const hpt_model *m) {
    return m->loss_norm > 0 ? (float)m->loss_norm : m->n_targets > 0 ? (float)m->n_targets : 1.0f;
}

void gpt2_point_tensors(const hpt_model_config *cfg, float *base, gpt2_tensors *t);

/* ---- frozen.c's: create() allocates no gradients while on (this thread) ---- */
void model_create_frozen_flag(int on);
/* ... and the tier its bf16 embeddings take (HPT_TIER_DEVICE unless set) */
void model_create_emb_tier(int tier);

/* ---- lora.c: the runner's and the object's calls (m->lora set) ---- */
void model_lora_free(hpt_model *m);
/* The adapters' scratch for (B, T) (category acts), before a forward. */
hpt_status model_lora_ensure(hpt_model *m, int B, int T);
/* Block l, whose slices are w, is the one the next arch call computes: the adapters find
 * their layer by w (a block store hands out one slot for every block). Nothing without. */
void model_lora_at(hpt_model *m, int l, float *const *w);
/* A forward pass starts (dropout's masks change). */
void model_lora_begin_forward(hpt_model *m);
/* Block gradients of the frozen base: its vector slices in the sink, the matrices NULL. */
void model_lora_block_grads(hpt_model *m, float *dw[HPT_TABLE_MAX]);
void model_lora_zero_grad(hpt_model *m);
/* Floats of each block slice (GPT2_BLOCK_SLICES) and of one block. */
void gpt2_block_slices(const hpt_model_config *cfg, size_t n[GPT2_BLOCK_SLICES]);
size_t gpt2_block_floats(const hpt_model_config *cfg);
static inline int gpt2_is_block_tensor(int i) {
    return i >= GPT2_FIRST_BLOCK_TENSOR && i < GPT2_FIRST_BLOCK_TENSOR + GPT2_BLOCK_SLICES;
}

/* ---- embed.c: chunked and bf16 tied embeddings (HPT_EMB_CHUNKED, HPT_EMB_BF16) ---- */
/* Allocates what embeddings o->embeddings need beside params and grads (sets m->emb, m->Vc). */
hpt_status emb_create(hpt_model *m, const hpt_offload_opts *o);
/* Sets m->emb (kind) and the tensors it concerns (emb_ti, emb_at, emb_head, emb_untied) before
 * the flat buffers are sized; emb_stored: tensor i lives in emb_h (BF16), not in params;
 * emb_deferred: tensor i has no whole gradient (updated chunk by chunk). */
void emb_plan(hpt_model *m, int kind);
int emb_stored(const hpt_model *m, int i);
int emb_deferred(const hpt_model *m, int i);
/* The flat buffers' floats with the embeddings' kind: *n_flat in (every non-block tensor) and
 * out (less those in emb_h), *n_gflat out (less those without a whole gradient). */
void emb_flat_floats(const hpt_model *m, size_t *n_flat, size_t *n_gflat);
void emb_free(hpt_model *m);
/* BF16: n values of tensor i (emb_stored) from value lo, widened into x / rounded from x
 * (to nearest; Kahan: the compensation gets the residue). */
void emb_get(const hpt_model *m, int i, size_t lo, float *x, size_t n);
void emb_put(hpt_model *m, int i, size_t lo, const float *x, size_t n);
/* The forward's encoder (a->encoded) and head (lse, losses, m->loss; needs targets), the
 * backward's head (dlnf into a->dsmall), and the backward's end: wpe's gradient and wte's
 * deferred update, chunk by chunk (see embed.c). */
void emb_encoder_forward(hpt_model *m);
void emb_head_forward(hpt_model *m, size_t rows);
void emb_head_backward(hpt_model *m, size_t rows);
void emb_backward_end(hpt_model *m, size_t rows);

#endif
