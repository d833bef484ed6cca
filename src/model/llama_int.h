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
    float *qknw;     // (L, 2hd) [q_norm | k_norm], the per-head norms' weights (Qwen3)
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
} llama_acts;

/* ---- what qwen.c shares with llama.c (the layout above, the table's mechanics) ---- */
#include "model/arch.h"

/* The SwiGLU MLP as the tiled MLP takes it (arch.h's arch_mlp): fc [gate | up] (2FF, C) and
 * its bias or NULL, down (C, FF) and its bias or NULL; the gradients' pointers set by the
 * backward. */
static inline arch_mlp llama_mlp(const hpt_model_config *c, const float *fcw, const float *fcb,
                                 const float *projw, const float *projb) {
    arch_mlp m = {fcw, fcb, projw, projb, NULL, NULL, NULL, NULL, c->C, 2 * (int64_t)c->FF,
                  c->FF, arch_mlp_swiglu_fwd, arch_mlp_swiglu_bwd};
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
/* cos, sin (maxT, hd/2) at rope_theta, with Llama 3's scaling where rope_factor > 0 */
void llama_rope_fill(const hpt_model_config *c, int64_t hd, float *host);
/* the non-block buffers and their lifetimes (llama_acts) */
#define LLAMA_N_GLOBALS 18
extern const hpt_arch_global llama_globals[LLAMA_N_GLOBALS];

#endif
