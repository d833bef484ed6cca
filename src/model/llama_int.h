/* llama_int.h: the llama architecture's layout (model/llama.c), private to src/model/: its
 * parameter pointers, one block's saved activations and the step's other buffers. The tensor
 * table (llama.c's describe) is the contract's (docs/llama.md): wte, then per-layer ln1w,
 * qkvw, [qkvb], attprojw, [attprojb], ln2w, fcw, [fcb], fcprojw, [fcprojb] stacked over L, then
 * lnfw and [lm_head]; the bracketed ones exist only when the configuration asks for them
 * (attn_bias, mlp_bias, !tied). hd = C/NH, QKV = (NH + 2 NKV) hd.
 * The Qwen families (model/qwen.c) run llama's block on this layout, with their own table
 * (qwen.c's describe) and the fields marked Qwen3 below, which llama leaves NULL; there hd may
 * differ from C/NH (the attention's width A = NH hd). */
#ifndef HPT_LLAMA_INT_H
#define HPT_LLAMA_INT_H

#include <stdint.h>

/* Pointers into the parameter (or gradient) buffer; NULL for a tensor the configuration has
 * not (a bias, the untied head), or that is not in the flat buffers (blocks in a store). */
typedef struct {
    float *wte;      // (Vp, C)
    float *ln1w;     // (L, C)
    float *qkvw;     // (L, QKV, C)
    float *qkvb;     // (L, QKV)
    float *attprojw; // (L, C, NH*hd)
    float *attprojb; // (L, C)
    float *ln2w;     // (L, C)
    float *fcw;      // (L, 2FF, C) [gate | up]
    float *fcb;      // (L, 2FF)
    float *fcprojw;  // (L, C, FF)
    float *fcprojb;  // (L, C)
    float *lnfw;     // (C)
    float *lm_head;  // (Vp, C); NULL when tied (the head is wte)
    /* constants, not parameters (the model's, device): rotary tables, row p = position p */
    const float *rope_cos; // (maxT, hd/2)
    const float *rope_sin; // (maxT, hd/2)
    float *qknw;     // (L, 2hd) [q_norm | k_norm], the per-head norms' weights (Qwen3, Gemma 3)
    float *postw;    // (L, 2C) [post_attention | post_feedforward] norms' weights (Gemma 3)
    const float *rope_cos_l; // (maxT, hd/2) the local layers' tables (Gemma 3)
    const float *rope_sin_l; // (maxT, hd/2)
} llama_tensors;

/* Activations one block saves for its backward; all fp32. */
typedef struct {
    float *ln1;      // (B, T, C)
    float *ln1_rstd; // (B, T)
    float *qkv;      // (B, T, QKV) q and k rotated (the attention's input)
    float *atty;     // (B, T, C) attention output before the projection
    float *att;      // (B, NH, T, T) softmax probabilities (plain attention only)
    float *att_lse;  // (B, NH, T) log-sum-exp of each row's scores (flash attention only)
    float *res2;     // (B, T, C) residual after attention
    float *ln2;      // (B, T, C)
    float *ln2_rstd; // (B, T)
    float *fch;      // (B, T, 2FF) [gate | up]
    float *fch_swi;  // (B, T, FF) silu(gate) * up
    float *res3;     // (B, T, C) residual after the MLP: the block's output
    float *qkvr;     // (B, T, QKV) the projections before the per-head q and k norms (Qwen3)
    float *qk_rstd;  // (B, T, NH + NKV) their rstd, q heads then k heads (Qwen3)
    /* Gemma 3: the attention's and the MLP's outputs before their post-norms, with the norms'
     * rstd, and the block's norm weights as the maths uses them, 1 + w */
    float *attp;     // (B, T, C) atty @ attprojw^T
    float *attp_rstd;// (B, T)
    float *mlpo;     // (B, T, C) fch_swi @ fcprojw^T
    float *mlpo_rstd;// (B, T)
    float *wone;     // (4C + 2hd) 1 + [ln1w | ln2w | postw | qknw]
} llama_layer_acts;

/* The non-block activations and the backward's scratch, in the runner's arena. */
typedef struct {
    int32_t *inputs; // (B, T)
    int32_t *targets;// (B, T)
    float *encoded;  // (B, T, C) block 0's input: wte[inputs]
    float *zpos;     // (T, C) zeros: the encoder op's position table (llama has none)
    float *lnf;      // (B, T, C)
    float *lnf_rstd; // (B, T)
    float *logits;   // (B, T, Vp), or (rows, Vp) chunked; dlogits in place in backward
    float *lse;      // (B, T)
    float *losses;   // (B, T)
    /* backward scratch */
    float *dres;     // (B, T, C) gradient of the residual stream
    float *dsmall;   // (B, T, C)
    float *dmid;     // (B, T, FF) the SwiGLU output's gradient; tiled (rows, FF)
    float *dbig;     // (B, T, max(2FF, QKV)) dfch, then dqkv; tiled max(rows 2FF, B T QKV)
    float *attscr;   // (B, NH, T)
    /* the tiled MLP's (x->mlp_rows > 0; else not planned): one tile's in the forward and, apart
     * (not live at the head), in the backward */
    float *mlph;     // (rows, 2FF) [gate | up]
    float *mlpy;     // (rows, FF) silu(gate) * up
    float *mlph_b;   // (rows, 2FF)
    float *mlpy_b;   // (rows, FF)
    float *mlpx_b;   // (rows, C) a tile's ln2 rows, rebuilt from res2 in the backward (llama's,
                     // under every:N and full: ln2's buffer then takes dln2; else not planned)
    float *lnf1;     // (C) 1 + lnfw (Gemma 3's final norm; not in llama_globals)
} llama_acts;

/* ---- what qwen.c shares with llama.c (the layout above, the table's mechanics) ---- */
#include "model/arch.h"

/* The SwiGLU MLP as the tiled MLP takes it (arch.h's arch_mlp): fc [gate | up] (2FF, C) and
 * its bias or NULL, down (C, FF) and its bias or NULL; the gradients' pointers set by the
 * backward. */
static inline arch_mlp llama_mlp(const hpt_model_config *c, const float *fcw, const float *fcb,
                                 const float *projw, const float *projb) {
    arch_mlp m = {fcw, fcb, projw, projb, NULL, NULL, NULL, NULL, c->C, 2 * (int64_t)c->FF,
                  c->FF, arch_mlp_swiglu_fwd, arch_mlp_swiglu_bwd, NULL, NULL, NULL, NULL};
    return m;
}
/* dmid's rows: B*T, or one tile's when the MLP is tiled */
static inline void llama_tile_rows(const hpt_arch_ctx *x, size_t *rows) {
    if (x->mlp_rows) *rows = x->mlp_rows;
}
/* dbig, d of fch (2FF) then of qkv (QKV): (B*T, max(2FF, QKV)), or tiled the larger of one
 * tile's (rows, 2FF) and (B*T, QKV) */
static inline void llama_dbig_shape(const hpt_arch_ctx *x, size_t QKV, size_t *rows, size_t *w) {
    const size_t BT = (size_t)x->B * x->T, H = 2 * (size_t)x->cfg->FF;
    *rows = BT;
    *w = H > QKV ? H : QKV;
    if (x->mlp_rows && x->mlp_rows * H > BT * QKV) *rows = x->mlp_rows, *w = H;
    else if (x->mlp_rows) *w = QKV;
}

/* A tensor of a configuration in checkpoint order, and where it lands in llama_tensors;
 * present: 0 for a bias, norm or head the configuration has not. */
typedef struct {
    const char *name;
    size_t off;      /* of its pointer in llama_tensors */
    int ndim;
    int64_t shape[3];
    int stacked, matrix, present;
} llama_desc;
/* The tensor table of n present descs (the first is wte, tied to the head when cfg->tied). */
void llama_describe_descs(const llama_desc *d, int n, const hpt_model_config *cfg,
                          hpt_tensor_table *out);
/* p's pointers from the runner's (table order), the rotary tables of half = hd/2 columns */
void llama_point_descs(const llama_desc *d, int n, const hpt_model_config *cfg,
                       const hpt_tensor_table *t, float *const *tp, const float *consts,
                       int64_t hd, llama_tensors *p);
/* cos, sin (maxT, hd/2) at base theta, with Llama 3's scaling where rope_factor > 0, the
 * positions divided by linear (1: none; Gemma 3's linear scaling) */
void llama_rope_fill(const hpt_model_config *c, int64_t hd, double theta, double linear,
                     float *host);
/* Hugging Face's names of a table tensor's parts (under model.layers.{l}.): 1, 2 (halves) or 3
 * (q, k, v) tensors; llama_hf_parts: arch.h's hf_parts for the llama layout (wte, lm_head,
 * lnfw, and the stacked tensors named in names), hd the head width */
typedef struct {
    const char *t, *hf[3];
} llama_hf_name;
/* the Hugging Face names Qwen and Gemma 3 share (attention with q/k norms, the MLP) */
#define LLAMA_HD_HF_NAMES                                                                         \
    {"qkvw", {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"}},  \
        {"qkvb", {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}},    \
        {"qknw", {"self_attn.q_norm.weight", "self_attn.k_norm.weight"}},                         \
        {"attprojw", {"self_attn.o_proj.weight"}}, {"attprojb", {"self_attn.o_proj.bias"}},       \
        {"fcw", {"mlp.gate_proj.weight", "mlp.up_proj.weight"}}, {"fcprojw", {"mlp.down_proj.weight"}}
int llama_hf_parts(const hpt_model_config *c, const hpt_tensor_desc *d, int l,
                   const llama_hf_name *names, int n_names, int64_t hd, struct hpt_hf_part *p);
/* Qwen's and Gemma 3's tensors (qwen.c): llama's layout with a head width free of C/NH, q/k
 * norms (Qwen3, Gemma), o's bias only with them, Gemma's postw; d's count returned (at most
 * LLAMA_HD_DESCS); their FLOPs per token (arch.h's flops_per_token) */
#define LLAMA_HD_DESCS 13
int llama_hd_descs(const hpt_model_config *c, llama_desc d[LLAMA_HD_DESCS]);
double llama_hd_flops_per_token(const hpt_model_config *c, int T);
/* a block's slices from the runner's pointers s (block order: the table's stacked tensors;
 * NULL: one the configuration has not) */
typedef struct {
    float *ln1w, *qkvw, *qkvb, *qknw, *attprojw, *attprojb, *ln2w, *fcw, *fcprojw, *postw;
} llama_hd_block;
llama_hd_block llama_hd_block_of(const hpt_model_config *c, float *const *s);
/* config.json's dimensions of c (hidden_size .. rope_theta, head_dim among them) */
void llama_hd_config_write(const struct hpt_hf_json_ops *J, struct hpt_hf_json *r,
                           const hpt_model_config *c);
/* the saved fields' and the non-block buffers' shapes (arch.h's field_shape, global_shape) by
 * their offsets in llama_layer_acts and llama_acts, with a head width free of C/NH (qwen.c; Qwen
 * and Gemma 3) */
void llama_hd_field_shape(const hpt_arch_ctx *x, size_t off, size_t *rows, size_t *w);
void llama_hd_global_shape(const hpt_arch_ctx *x, size_t off, size_t *rows, size_t *w);
/* LoRA's seven layers (q, k, v, o, gate, up, down) with a head width free of C/NH (qwen.c) */
int llama_linears_hd(const hpt_model_config *c, hpt_arch_linear o[HPT_ARCH_MAX_LINEARS]);
/* the non-block buffers and their lifetimes (llama_acts) */
#define LLAMA_N_GLOBALS 19
extern const hpt_arch_global llama_globals[LLAMA_N_GLOBALS];
/* the table's entries, for a family that appends its own (G(field, first, last, after)) */
#define LLAMA_GLOBALS(G)                                                                          \
    G(inputs, HPT_TP_START, HPT_TP_EMBED_B, 0), G(targets, HPT_TP_START, HPT_TP_HEAD_END, 0),     \
        G(encoded, HPT_TP_START, HPT_TP_BLOCK0_B, 0), G(zpos, HPT_TP_START, HPT_TP_START, 0),     \
        G(lnf, HPT_TP_HEAD_F, HPT_TP_HEAD_END, 1), G(lnf_rstd, HPT_TP_HEAD_F, HPT_TP_HEAD_B, 1),  \
        G(logits, HPT_TP_HEAD_F, HPT_TP_HEAD_END, 1), G(lse, HPT_TP_HEAD_F, HPT_TP_HEAD_END, 1),  \
        G(losses, HPT_TP_HEAD_F, HPT_TP_HEAD_F, 1), G(dres, HPT_TP_HEAD_B, HPT_TP_EMBED_B, 1),    \
        G(dsmall, HPT_TP_HEAD_B, HPT_TP_SCRATCH_END, 1), G(dmid, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1), \
        G(dbig, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1), G(attscr, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1), \
        G(mlph, HPT_TP_START, HPT_TP_BLOCKS_F, 0), G(mlpy, HPT_TP_START, HPT_TP_BLOCKS_F, 0),     \
        G(mlph_b, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1), G(mlpy_b, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1),  \
        G(mlpx_b, HPT_TP_BLOCKS_B, HPT_TP_BLOCK0_B, 1)
/* Qwen3's and Gemma 3's per-head norms of q and k, token by token through the backend's rmsnorm:
 * qkv (BT, QKV) = qkvr with each q head rmsnorm(q_h) * qnw * qscale and each k head
 * rmsnorm(k_h) * knw (qknw = [qnw | knw], (2hd)); rstd (BT, NH+NKV) saved; v copied as is.
 * The backward: draw (BT, QKV) = d qkvr from dqkv (d qkv, as qkv; its q heads scaled by qscale
 * in place); dqknw (2hd) +=. */
void llama_qk_norm_forward(const hpt_backend *be, const hpt_model_config *c, float *qkv,
                           float *rstd, const float *qkvr, const float *qknw, float qscale,
                           int64_t BT);
void llama_qk_norm_backward(const hpt_backend *be, const hpt_model_config *c, float *draw,
                            float *dqknw, float *dqkv, const float *qkvr, const float *qknw,
                            const float *rstd, float qscale, int64_t BT);

#endif
