/* arch.h: the architecture interface. An architecture (model/gpt2.c, model/llama.c) is the maths
 * of one model family and nothing else: it describes a configuration as a tensor table, names
 * the activations one block saves and their shapes, and computes the embedding, one block, the
 * final norm and the head, forward and backward, through a backend's ops. It knows nothing of
 * tiers, the offload engine, recomputation policies, activation offload or compression: the
 * runner (model/runner.c) owns the layer loop and hands each op the buffers it planned.
 *
 *   const hpt_arch *A = &hpt_arch_gpt2;
 *   hpt_tensor_table t;  A->describe(cfg, &t);            // checkpoint order
 *   hpt_arch_ctx x = {be, cfg, B, T, HPT_ATTN_FLASH, BT, Vp, 1.0f, hpt_attn_ops_of(HPT_ATTN_FLASH)};
 *   A->embed_forward(&x, params, acts);
 *   for (l...) A->block_forward(&x, w_l, layer_acts_l, input_l, 1);
 *   A->final_forward(&x, params, acts, output_of_last_block);
 *   loss = A->head_forward(&x, params, acts, 1);
 *   A->head_backward(...); A->final_backward(...); for (l reversed) A->block_backward(...);
 *   A->embed_backward(...);
 *
 * Ownership: every pointer an op takes is borrowed (device memory of x->be). Ops never allocate,
 * fail or print. Activations: a block's saved fields live in an arch-defined struct of float
 * pointers (block_acts_size bytes, each field's pointer at fields[i].off); the non-block
 * buffers (inputs, head, backward scratch) in another (acts_size bytes, globals[i].off). The
 * runner sets those pointers from its arena plan; a field the plan does not keep (the other
 * attention kind's) is NULL. */
#ifndef HPT_MODEL_ARCH_H
#define HPT_MODEL_ARCH_H

#include "core/tensor.h"
#include "hptrain.h"
#include "kernels/backend.h"

#include <stddef.h>

/* The attention kernel pair the plan chose, as ops the maths calls without asking which
 * (model/attention.c): out (B,T,C) from qkv (B,T,3C); the saved state is att (B,NH,T,T), the
 * probabilities (plain), or lse (B,NH,T), each row's log-sum-exp (flash): each op takes both
 * pointers and uses its own. rebuild: selective recomputation's rerun (plain: the forward again,
 * the same bits; flash: nothing, it keeps no probabilities). */
typedef struct {
    /* NKV: key/value heads (grouped-query attention, qkv (B,T,(NH+2*NKV)*C/NH); GPT-2 NH);
     * pos: hpt_arch_ctx's (the document mask of packed examples; NULL: causal); window: a
     * sliding window of that many keys (> 0; 0: none), backend.h's attention_forward_seg */
    void (*forward)(const hpt_backend *be, float *out, float *att, float *lse, const float *qkv,
                    int B, int T, int C, int NH, int NKV, const int32_t *pos, int window);
    void (*rebuild)(const hpt_backend *be, float *out, float *att, float *lse, const float *qkv,
                    int B, int T, int C, int NH, int NKV, const int32_t *pos, int window);
    /* dqkv (as qkv) overwritten from dout (B,T,C); scratch (B*NH, T) */
    void (*backward)(const hpt_backend *be, float *dqkv, float *scratch, const float *dout,
                     const float *qkv, const float *out, const float *att, const float *lse,
                     int B, int T, int C, int NH, int NKV, const int32_t *pos, int window);
} hpt_attn_ops;

const hpt_attn_ops *hpt_attn_ops_of(hpt_attention a);
/* the pair at the run's matmul precision: --matmul bf16's flash pair has bf16 operands
 * (backend.h's flash_attention_*_bf16; plain attention is refused with it: hpt_act_check) */
const hpt_attn_ops *hpt_attn_ops_for(hpt_attention a, hpt_matmul mm);

/* One step's data for the ops: the backend, the shape, and the choices that reach the maths as
 * data (which attention kernel pair, how many logit rows at once, the loss scale). */
typedef struct {
    const hpt_backend *be;
    const hpt_model_config *cfg;
    int B, T;
    hpt_attention attention; /* the plan's attention kind: flash saves att_lse, plain att */
    size_t head_rows;        /* rows of logits the head computes at once (B*T: all) */
    size_t logit_cols;       /* columns of the logits buffer (the planner's; Vp for the head) */
    float loss_scale;        /* S: the backward computes S times the loss's gradients */
    const hpt_attn_ops *attn; /* the kernels of `attention` (hpt_attn_ops_of) */
    const void *params;      /* the arch's parameter struct (non-block tensors, constants) as
                              * the embedding and head ops get it; NULL when only planning */
    float loss_norm;         /* N: the loss whose gradient the backward computes is the sum of
                              * the target tokens' losses over N (docs/targets.md); 0: B*T */
    struct model_lora *lora; /* LoRA adapters over a frozen base (model/lora.c), or NULL: the
                              * linear layers go through arch_linear_* below */
    const int32_t *pos;      /* packed examples (docs/packing.md): (B*T) device, each token's
                              * position in its example: the positions the embedding or the
                              * rotation reads, and the attention's document mask; NULL:
                              * positions 0 .. T-1, plain causal attention */
    size_t mlp_rows;         /* rows of B*T the MLP runs at once (arch_mlp_*, model/mlptile.c);
                              * 0: untiled, the MLP's fields kept per block */
    void *acts;              /* the arch's activation struct (its non-block buffers): the tiled
                              * MLP's tile buffers, which a block's forward reads there */
    int in_backward;         /* 1: a forward rerun by a recomputation during the backward (its
                              * tiled MLP takes the backward's tile buffers) */
    int layer;               /* the block the runner's block ops run (0 outside them): the
                              * families whose layers differ (Gemma 3's local and global) */
    int norm_rebuild;        /* 1: the HPT_FIELD_NORM2 field shares the NORM1 field's buffer
                              * (every:N, full), so the block's backward rebuilds NORM1 before
                              * reading it */
    void *mm_ws;             /* --matmul bf16: the bf16 GEMMs' workspace (HPT_MM_BF16_WS_BYTES,
                              * device), and the linear layers run the backend's _bf16 ops;
                              * NULL: fp32 */
} hpt_arch_ctx;

/* RoPE at the context's positions: pos0 = 0 for t, or x->pos (packed examples) */
static inline void hpt_rope_fwd(const hpt_arch_ctx *x, float *qkv, const float *cos,
                                const float *sin, int NH, int NKV, int hd) {
    if (x->pos) x->be->rope_forward_pos(qkv, cos, sin, x->B, x->T, NH, NKV, hd, x->pos);
    else x->be->rope_forward(qkv, cos, sin, x->B, x->T, NH, NKV, hd, 0);
}
static inline void hpt_rope_bwd(const hpt_arch_ctx *x, float *dqkv, const float *cos,
                                const float *sin, int NH, int NKV, int hd) {
    if (x->pos) x->be->rope_backward_pos(dqkv, cos, sin, x->B, x->T, NH, NKV, hd, x->pos);
    else x->be->rope_backward(dqkv, cos, sin, x->B, x->T, NH, NKV, hd, 0);
}


/* ---- the linear layers (every block GEMM and the head's backward go through these) ----
 * Without adapters (x->lora NULL) they are the backend's matmul ops, the same calls and bits.
 * With them, the forward adds each adapter on w's rows (model_lora_forward finds the adapters
 * by w: a block slice of the frozen base), and the backward computes the input's gradient and
 * the adapters' only: no weight or bias gradient for the frozen base (dw, dbias unused). */
struct model_lora;
void model_lora_forward(const hpt_arch_ctx *x, float *out, const float *inp, const float *w,
                        int64_t N, int64_t C, int64_t OC);
void model_lora_backward(const hpt_arch_ctx *x, float *dinp, const float *dout, const float *inp,
                         const float *w, int64_t N, int64_t C, int64_t OC, int accumulate_dinp);
/* out (N, OC) = inp (N, C) @ w^T + bias [+ out], plus the adapters on w */
/* the backend's matmul ops at the context's precision (--matmul): no adapters (the head) */
static inline void arch_matmul_forward(const hpt_arch_ctx *x, float *out, const float *inp,
                                       const float *w, const float *bias, int64_t N, int64_t C,
                                       int64_t OC, int accumulate) {
    if (x->mm_ws) x->be->matmul_forward_bf16(out, inp, w, bias, N, C, OC, accumulate, x->mm_ws);
    else x->be->matmul_forward(out, inp, w, bias, N, C, OC, accumulate);
}
static inline void arch_matmul_backward(const hpt_arch_ctx *x, float *dinp, float *dw,
                                        float *dbias, const float *dout, const float *inp,
                                        const float *w, int64_t N, int64_t C, int64_t OC,
                                        int accumulate_dinp) {
    if (x->mm_ws)
        x->be->matmul_backward_bf16(dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate_dinp,
                                    x->mm_ws);
    else x->be->matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate_dinp);
}
static inline void arch_linear_forward(const hpt_arch_ctx *x, float *out, const float *inp,
                                       const float *w, const float *bias, int64_t N, int64_t C,
                                       int64_t OC, int accumulate) {
    arch_matmul_forward(x, out, inp, w, bias, N, C, OC, accumulate);
    if (x->lora) model_lora_forward(x, out, inp, w, N, C, OC);
}
/* matmul_backward's contract; with adapters dw and dbias are left alone */
static inline void arch_linear_backward(const hpt_arch_ctx *x, float *dinp, float *dw,
                                        float *dbias, const float *dout, const float *inp,
                                        const float *w, int64_t N, int64_t C, int64_t OC,
                                        int accumulate_dinp) {
    if (x->lora) model_lora_backward(x, dinp, dout, inp, w, N, C, OC, accumulate_dinp);
    else arch_matmul_backward(x, dinp, dw, dbias, dout, inp, w, N, C, OC, accumulate_dinp);
}

/* ---- the sequence-tiled MLP (model/mlptile.c; docs/activations.md, "The tiled MLP") ----
 * out = proj(act(fc(in))) over tiles of x->mlp_rows token rows: fc (H, C) [+ bias (H)], act
 * (rows, H) -> (rows, F), proj (C, F) [+ bias (C)]; GPT-2: H = F = 4C and GELU, SwiGLU: H = 2FF,
 * F = FF. Only one tile's (rows, H) and (rows, F) exist; the backward recomputes each tile's
 * from the saved input, and adds the weights' gradients tile by tile, ascending. A new family
 * fills one of these with its weights and its activation's pair. */
typedef struct {
    const float *w1, *b1, *w2, *b2; /* fc (H, C) and bias (H) or NULL; proj (C, F), bias (C) */
    float *dw1, *db1, *dw2, *db2;   /* their gradients (backward; += like every gradient) */
    int64_t C, H, F;
    /* y (rows, F) = act(h (rows, H)); dh (rows, H) = d act from dy (rows, F) (dh may be dy
     * when the pair allows it in place: GELU) */
    void (*act_fwd)(const hpt_backend *be, float *y, const float *h, int64_t rows, int64_t F);
    void (*act_bwd)(const hpt_backend *be, float *dh, const float *dy, const float *h,
                    int64_t rows, int64_t F);
    /* the backward's input rebuilt per tile (NULL norm_x: `in` as given): in_tile (rows, C) =
     * rmsnorm_apply(norm_x (B*T, C) rows, norm_w (C), norm_rstd (B*T) rows), the bits of the
     * forward's rmsnorm; so `in` need not outlive the forward and din may be its buffer */
    const float *norm_x, *norm_w, *norm_rstd;
    float *in_tile;
} arch_mlp;
void arch_mlp_gelu_fwd(const hpt_backend *be, float *y, const float *h, int64_t rows, int64_t F);
void arch_mlp_gelu_bwd(const hpt_backend *be, float *dh, const float *dy, const float *h,
                       int64_t rows, int64_t F);
void arch_mlp_swiglu_fwd(const hpt_backend *be, float *y, const float *h, int64_t rows, int64_t F);
void arch_mlp_swiglu_bwd(const hpt_backend *be, float *dh, const float *dy, const float *h,
                         int64_t rows, int64_t F);
/* out (B*T, C) += proj(act(fc(in (B*T, C)))), tile by tile through h (rows, H), y (rows, F) */
void arch_mlp_forward(const hpt_arch_ctx *x, const arch_mlp *m, float *out, const float *in,
                      float *h, float *y);
/* din (B*T, C) = the gradient of in (overwritten) from dout (B*T, C); h, y as the forward's,
 * dy (rows, F), dh (rows, H) scratch; dw1, db1, dw2, db2 +=; in is NULL when m->norm_x
 * rebuilds it tile by tile */
void arch_mlp_backward(const hpt_arch_ctx *x, const arch_mlp *m, float *din, const float *dout,
                       const float *in, float *h, float *y, float *dy, float *dh);

/* A linear layer of a block, as LoRA names and finds it (model/lora.c): rows [row0, row0 + out)
 * of the block tensor `weight` (a fused weight holds several layers), in inputs wide. */
#define HPT_ARCH_MAX_LINEARS 8
typedef struct {
    const char *name;   /* its short name, --lora-targets': "q", "c_attn" */
    const char *hf;     /* its module under a block in Hugging Face's names: "self_attn.q_proj" */
    const char *weight; /* the table's tensor holding it: "qkvw" */
    int64_t row0, out, in;
} hpt_arch_linear;
/* The layers a model's adapters are on (model/lora.c; 0 without adapters) and the
 * architecture's Hugging Face block prefix (hpt_arch.hf_block): io's PEFT files. */
int model_lora_layers(const hpt_model *m, hpt_arch_linear out[HPT_ARCH_MAX_LINEARS],
                      const char **hf_block);

/* A saved field of one block. */
#define HPT_FIELD_RECOMPUTE 1 /* selective recomputation drops it; block_recompute rebuilds it */
#define HPT_FIELD_STORE 2     /* large, read by the backward: may be offloaded or compressed */
#define HPT_FIELD_OUTPUT 4    /* the block's output: the next block's input (or the final norm's) */
#define HPT_FIELD_MLP 8       /* an MLP intermediate: not kept when the MLP is tiled (mlp_rows) */
/* Under every:N and full (every field but the output rebuilt in backward), the NORM2 field
 * takes the NORM1 field's buffer (one (B*T, C) buffer fewer: actplan.c): the block's forward
 * writes the second norm's output once the first's last reader (the qkv GEMM) has run, and its
 * backward, told by x->norm_rebuild, rebuilds the first from the block's input and the saved
 * rstd (rmsnorm_apply: the forward's bits) after the second's last reader (the MLP's backward).
 * With a tiled MLP too, such an arch's block backward needs no (B*T, C) scratch global past the
 * head's (HPT_TP_SCRATCH_END): it works in its own fields once they are dead. */
#define HPT_FIELD_NORM1 16
#define HPT_FIELD_NORM2 32
typedef struct {
    const char *name;  /* the profiler's event name */
    size_t off;        /* offset of its float * in the block's activation struct */
    int flags;         /* HPT_FIELD_* */
    int attention;     /* -1: always; else planned only with this hpt_attention */
} hpt_arch_field;

/* Lifetimes of the non-block buffers, in the runner's step time points. */
typedef enum {
    HPT_TP_START = 0,  /* the embedding's forward */
    HPT_TP_HEAD_F,     /* the final norm and the head's forward */
    HPT_TP_HEAD_B,     /* the head's and the final norm's backward */
    HPT_TP_HEAD_END,   /* HEAD_B, or EMBED_B when the head's buffers live on (embeddings that
                        * update wte chunk by chunk at the backward's end) */
    HPT_TP_BLOCKS_B,   /* the first block backward (block L-1) */
    HPT_TP_BLOCK0_B,   /* block 0's backward */
    HPT_TP_EMBED_B,    /* the embedding's backward */
    HPT_TP_BLOCKS_F,   /* the last block's forward (block L-1) */
    HPT_TP_SCRATCH_END /* BLOCK0_B, or HEAD_B where x->norm_rebuild and x->mlp_rows (the
                        * HPT_FIELD_NORM1/2 comment) */
} hpt_arch_time;

/* A non-block buffer; elements are 4 bytes (fp32 or int32). */
typedef struct {
    const char *name;
    size_t off;          /* offset of its pointer in the activation struct */
    hpt_arch_time first, last;
    int after_blocks;    /* 0: planned before the blocks' fields, 1: after them */
} hpt_arch_global;

struct hpt_hf_json;
struct hpt_hf_json_ops;
struct hpt_hf_part;
/* ---- the planner's view of a block (plan/calibrate_arch.c measures it, plan/cost.c costs
 * a step with it) ---- */
#define HPT_ARCH_MAX_GEMMS 8

/* A pointwise op of one block: measured in ns per element over rows rows of the calibration's
 * last shape, costed per token as times x per_token(cfg) x ns in each pass that runs it. */
typedef struct {
    const char *key;       /* the calibration file's keys: <key>_fwd_ns, <key>_bwd_ns */
    int fwd, bwd, sel;     /* times per block: forward, backward, selective recomputation */
    double (*per_token)(const hpt_model_config *c);      /* elements per token it is costed by */
    size_t (*floats)(const hpt_model_config *c, int rows); /* scratch floats run needs */
    /* runs it once (bwd 0: forward, 1: backward) over rows rows of c on scratch (floats(c,
     * rows) floats, filled by the caller), through be */
    void (*run)(const hpt_backend *be, const hpt_model_config *c, int rows, int bwd, float *scratch);
    /* NULL, or sets what the op needs after the caller's fill (host memory): values that
     * repeated runs keep in range (a rotation's true cos and sin: arbitrary ones would shrink
     * the rotated values into denormals, and time those) */
    void (*fill)(const hpt_model_config *c, int rows, float *scratch);
} hpt_arch_op;

typedef struct {
    /* one block's linear layers at c as (in, out) widths, in the order the block runs them;
     * returns their count (<= HPT_ARCH_MAX_GEMMS) */
    int (*gemms)(const hpt_model_config *c, int64_t in_out[][2]);
    /* the shapes the calibration measures, C ascending: the GEMMs at each; attention (B 1,
     * T 128) and the ops (512 rows) at the last */
    int n_cal;                                 /* <= HPT_CAL_ARCH_WIDTHS */
    hpt_model_config cal[HPT_CAL_ARCH_WIDTHS];
    const char *attn_key;  /* the file's attention keys: <attn_key>_flash_fwd_gflops, ... */
    int n_ops;             /* <= HPT_ARCH_MAX_OPS; costed in this order */
    const hpt_arch_op *ops;
    /* the forward's other memory traffic per token and block (bytes read + written; e.g. the
     * residual copies), which the ops' rates replace the arena's passes with */
    double (*fwd_bytes)(const hpt_model_config *c);
} hpt_arch_plan;

typedef struct hpt_arch {
    const char *name;
    /* The parameters in checkpoint order (the per-layer tensors stacked over L). */
    void (*describe)(const hpt_model_config *cfg, hpt_tensor_table *out);
    /* Forward FLOPs per token at sequence length T (GEMMs and attention; training: 3 times). */
    double (*flops_per_token)(const hpt_model_config *cfg, int T);

    /* a block's saved fields: rows and row width (floats) of field i at x's (B, T) */
    int n_fields;
    const hpt_arch_field *fields;
    size_t block_acts_size;
    void (*field_shape)(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w);
    /* the non-block buffers, in plan order */
    int n_globals;
    const hpt_arch_global *globals;
    size_t acts_size;
    void (*global_shape)(const hpt_arch_ctx *x, int i, size_t *rows, size_t *w);
    /* offsets in the activation struct of the runner's inputs and targets (int32_t *), of
     * block 0's input and of the logits (float *) */
    size_t off_inputs, off_targets, off_encoded, off_logits;

    /* The parameter struct (p or g of the ops) from the tensors' pointers tp[i] (table order;
     * NULL where not in the flat buffers) and the constants; NULL: the model points GPT-2's
     * itself (lifecycle.c). */
    void (*point)(const hpt_model_config *cfg, const hpt_tensor_table *t, float *const *tp,
                  const float *consts, void *out);
    /* Constants the ops read (not parameters; e.g. rotary tables), computed on the host once
     * and kept on the device: their floats (0: none) and their values. */
    size_t (*consts_floats)(const hpt_model_config *cfg);
    void (*consts_fill)(const hpt_model_config *cfg, float *host);

    /* p, g: the non-block parameters and gradients (the arch's struct of tensor pointers);
     * w, dw: one block's parameters and gradients, one pointer per block slice in block order;
     * a: the activation struct; la: one block's; in: the block's input (B, T, C). */
    void (*embed_forward)(const hpt_arch_ctx *x, const void *p, void *a);
    void (*embed_backward)(const hpt_arch_ctx *x, void *g, const void *a);
    /* with_out 0: stops before the block's output (a recomputation where it is kept) */
    void (*block_forward)(const hpt_arch_ctx *x, float *const *w, void *la, const float *in,
                          int with_out);
    /* selective recomputation: rebuilds the HPT_FIELD_RECOMPUTE fields, the same bits */
    void (*block_recompute)(const hpt_arch_ctx *x, float *const *w, void *la, const float *in);
    /* a's residual gradient flows back through the block; dw += the block's gradients */
    void (*block_backward)(const hpt_arch_ctx *x, float *const *w, float *const *dw,
                           const void *la, const float *in, void *a);
    /* the final norm of the last block's output `out` */
    void (*final_forward)(const hpt_arch_ctx *x, const void *p, void *a, const float *out);
    /* logits (and with targets the loss, returned; -1 without) */
    float (*head_forward)(const hpt_arch_ctx *x, const void *p, void *a, int has_targets);
    /* the head's backward: the final norm's output gradient, and the head's weights' */
    void (*head_backward)(const hpt_arch_ctx *x, const void *p, void *g, void *a);
    /* the final norm's backward: starts the residual gradient */
    void (*final_backward)(const hpt_arch_ctx *x, const void *p, void *g, void *a,
                           const float *out);

    /* ---- its shapes (model/config.c routes a SHAPE by these and checks every configuration
     * through them): a new family's named shapes and KEY=VALUE keys live in its own file. ---- */
    const char *const *shape_prefixes; /* a SHAPE starting with one of these is this family's
                                        * (NULL-terminated) */
    /* SHAPE -> configuration: named or "family:KEY=VALUE,..." (config.c's model_shape_kv);
     * Vp may be left 0 (config.c rounds V up to 128); config.c fills and checks it after */
    hpt_status (*shape_parse)(const char *shape, hpt_model_config *out);
    /* the family's own rules, after config.c's common ones (model_config_check_common) */
    hpt_status (*config_check)(const hpt_model_config *c);
    /* the fields a family implies (GPT-2: NKV = NH, FF = 4C, ...), for a configuration read from
     * a file or written by hand; NULL: none */
    void (*config_fill)(hpt_model_config *c);

    /* ---- what the modules above ask of an architecture, through the registry (registry.c):
     * the planner's calibration and cost (plan/), the profiler's labels, verify's names and
     * the command line's reports. They name no family; a new one fills these. ---- */
    hpt_arch_desc desc;              /* name, label, SHAPEs, the calibration report's titles */
    const hpt_arch_plan *plan;       /* its block for the planner; NULL: costed at the
                                      * reference block's rates (plan/calibrate.c) */
    const char *const *param_names;  /* every name describe() may give, NULL-terminated:
                                      * static strings that outlive a model (verify's report) */
    /* the factor the embedding's rows are multiplied by (Gemma: sqrt(C)), which the chunked
     * embeddings (model/embed.c) apply too; NULL: 1 */
    float (*embed_scale)(const hpt_model_config *c);
    /* ---- Hugging Face: what io's loader and writer (io/hfconfig.c, io/hfmodel.c) ask an
     * architecture; all NULL: it has no Hugging Face form. The architecture sees no JSON and no
     * file: config.json's keys come and go through io's hpt_hf_json calls. ---- */
    /* config.json's architectures[] names this one reads, NULL-terminated (the first is the one
     * written), and the model_type of each (same index) for a config.json without them */
    const char *const *hf_classes;
    const char *const *hf_model_types;
    /* config.json -> configuration (arch set, Vp left to the loader): its own keys, strict where
     * the maths cannot follow (errors name `what` and the key: HPT_ERR_FORMAT, _UNSUPPORTED) */
    hpt_status (*hf_config_read)(const struct hpt_hf_json_ops *J, const struct hpt_hf_json *j,
                                 const char *what, hpt_model_config *out);
    /* configuration -> config.json: model_type and its own keys (cls: the class written) */
    void (*hf_config_write)(const struct hpt_hf_json_ops *J, struct hpt_hf_json *j,
                            const hpt_model_config *c, const char *cls);
    /* The Hugging Face tensors whose values make table tensor d's slice l (a stacked tensor's
     * layer; 0 for one not stacked), in the slice's element order: up to HPT_HF_MAX_PARTS
     * parts; a part named "" is zero padding. prefix: the one the loader chose (hf_prefixes).
     * Returns the number of parts; 0: the tensor has no Hugging Face counterpart. */
    int (*hf_parts)(const hpt_model_config *c, const hpt_tensor_desc *d, int l,
                    const char *prefix, struct hpt_hf_part *out);
    /* prefixes a hub's files may put before every name, preferred first (NULL: none); the
     * loader takes the first under which the files hold hf_embed_name; a new file gets [0] */
    const char *const *hf_prefixes;
    const char *hf_embed_name; /* the embedding (after the prefix): the tied head's twin */
    const char *hf_head_name;  /* a tied head's own tensor, when a file keeps one */
    const char *const *hf_ignore; /* name endings that are buffers, not parameters (NULL-ended) */
    int hf_eot; /* token id written as bos and eos for a model not read from a directory, when
                 * the vocabulary holds it (GPT-2's <|endoftext|> 50256); -1: none */
    /* ---- LoRA (model/lora.c): a block's linear layers at c, in block order; returns their
     * count (<= HPT_ARCH_MAX_LINEARS; NULL: none, adapters refused); hf_block: the Hugging
     * Face prefix of block l's modules, a printf format ("model.layers.%d.") ---- */
    int (*linears)(const hpt_model_config *c, hpt_arch_linear out[HPT_ARCH_MAX_LINEARS]);
    const char *hf_block;
} hpt_arch;

/* The Hugging Face side's data (the block above). */
#define HPT_HF_MAX_PARTS 4
typedef struct hpt_hf_part {
    char name[112];  /* Hugging Face name; "" for zero padding */
    int64_t R, W;    /* its rows and width in hptrain's layout (1-D: R = 1) */
    int ndim;        /* 1 or 2 in the file */
    int transpose;   /* stored (W, R): GPT-2's Conv1D */
} hpt_hf_part;
/* config.json's object as io holds it, and io's calls on it (io/hfconfig.c fills the table, so
 * the model calls nothing of io's). Reading: a key absent takes def (required: def < lo);
 * present, it must be in range, else HPT_ERR_FORMAT naming `what` and the key; obj: a
 * sub-object (*out NULL when absent). Writing keeps the order of the calls. */
typedef struct hpt_hf_json hpt_hf_json;
typedef struct hpt_hf_json_ops {
    int (*has)(const hpt_hf_json *j, const char *key);
    hpt_status (*get_int)(const hpt_hf_json *j, const char *key, long def, long lo, long hi,
                          const char *what, int *out);
    hpt_status (*get_float)(const hpt_hf_json *j, const char *key, double def, const char *what,
                            float *out);
    hpt_status (*get_bool)(const hpt_hf_json *j, const char *key, int def, const char *what,
                           int *out);
    const char *(*get_str)(const hpt_hf_json *j, const char *key); /* NULL: absent or not one */
    /* element i of the array key when it is a string; NULL: past its end, absent or not one */
    const char *(*str_at)(const hpt_hf_json *j, const char *key, int i);
    hpt_status (*obj)(const hpt_hf_json *j, const char *key, const char *what,
                      const hpt_hf_json **out);
    void (*put_int)(hpt_hf_json *j, const char *key, double v);
    void (*put_float)(hpt_hf_json *j, const char *key, float v); /* shortest round trip */
    void (*put_bool)(hpt_hf_json *j, const char *key, int v);
    void (*put_str)(hpt_hf_json *j, const char *key, const char *v);
    void (*put_null)(hpt_hf_json *j, const char *key);
    hpt_hf_json *(*put_obj)(hpt_hf_json *j, const char *key);
    /* the error text, with a file's control characters made harmless (one line) */
    hpt_status (*fail)(hpt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
} hpt_hf_json_ops;

/* config.c's helpers for the families' shape hooks. check_common: L, C, NH, V, Vp, maxT in
 * range and C a multiple of NH (errors name `family`). shape_kv: the KEY=VALUE,... list s of
 * `shape`, each pair given to set (which fails on an unknown key). shape_int: an integer
 * key's value, a whole number >= lo. */
hpt_status model_config_check_common(const hpt_model_config *c, const char *family);
typedef hpt_status (*model_kv_fn)(hpt_model_config *c, const char *key, double v, const char *shape);
hpt_status model_shape_kv(const char *shape, const char *s, hpt_model_config *c, model_kv_fn set);
hpt_status model_shape_int(double v, int lo, const char *key, const char *shape, int *out);
/* A family's KEY=VALUE keys: integers (>= lo; tied, attn_bias and mlp_bias 0 or 1) and floats
 * at their offsets in hpt_model_config; model_shape_key sets key from the tables, or fails
 * naming the keys it knows (known: their list) */
typedef struct { const char *key; size_t off; int lo; } model_int_key;
typedef struct { const char *key; size_t off; } model_float_key;
hpt_status model_shape_key(hpt_model_config *c, const char *key, double v, const char *shape,
                           const model_int_key *ints, size_t n_ints, const model_float_key *floats,
                           size_t n_floats, const char *known);

/* GPT-2 (model/gpt2.c); the Llama family (model/llama.c); Qwen2/2.5 and Qwen3 (model/qwen.c). */
extern const hpt_arch hpt_arch_gpt2;
extern const hpt_arch hpt_arch_llama;
extern const hpt_arch hpt_arch_qwen2;
extern const hpt_arch hpt_arch_qwen3;
extern const hpt_arch hpt_arch_gemma3; /* Gemma 3's text models (model/gemma.c) */

/* ---- the registry (model/registry.c): one line per architecture, index = its id ---- */
/* The architectures this build has (hpt_arch_count, public) and the one at id i (NULL past
 * the last); the one named name ("gpt2", "llama"; NULL: none). */
const hpt_arch *hpt_arch_at(int i);
const hpt_arch *hpt_arch_by_name(const char *name);
/* The architecture of a configuration (cfg->arch), or NULL when this build has none. */
const hpt_arch *hpt_arch_of(const hpt_model_config *cfg);

#endif
