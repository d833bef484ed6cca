/* kernels.h: the CPU kernels of GPT-2 training, fp32. Internal to the library.
 * Conventions: row-major; shapes in comments; N = B*T rows. Kernels never allocate, never
 * fail and never print; scratch is passed in. Every kernel is deterministic for a fixed
 * thread count: parallel loops partition work statically and reductions never race. */
#ifndef HPT_KERNELS_H
#define HPT_KERNELS_H

#include "kernels/backend.h"

#include <stddef.h>
#include <stdint.h>

/* Loops over fewer elements than this run on one thread (backend.h says why). */
#define K_PAR_MIN HPT_PAR_MIN

/* C (M,N) = alpha * op(A) * op(B) + beta * C, row-major; op(X) = X or X^T ('N'/'T'). */
void k_gemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
            const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
            int64_t ldc);

/* out (N,OC) = inp (N,C) @ w^T (w: (OC,C)) + bias (OC, may be NULL).
 * accumulate = 1 adds to what out holds (residual connections) instead of overwriting. */
void k_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                      int64_t N, int64_t C, int64_t OC, int accumulate);
/* Backward of k_matmul_forward: dinp (N,C) = or += dout @ w (accumulate_dinp), dw (OC,C) +=
 * dout^T @ inp, dbias (OC) += column sums of dout (dbias may be NULL). */
void k_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                       int accumulate_dinp);

/* the bf16 operand GEMMs (backend.h's gemm_bf16, matmul_forward_bf16, matmul_backward_bf16) */
void k_gemm_bf16(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc, void *ws);
void k_matmul_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                           int64_t N, int64_t C, int64_t OC, int accumulate, void *ws);
void k_matmul_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                            int accumulate_dinp, void *ws);

/* out (B,T,C) = wte[inp[b,t]] + wpe[t]. */
void k_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                       int B, int T, int C);
/* dwte (Vp,C) += scatter of dout by token; dwpe (maxT,C) += sum over b of dout. */
void k_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
                        int T, int C);
/* packed examples: wpe read at pos[b*T+t] (each token's position in its example) instead of t */
void k_encoder_forward_pos(float *out, const int32_t *inp, const float *wte, const float *wpe,
                           const int32_t *pos, int B, int T, int C);
void k_encoder_backward_pos(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                            const int32_t *pos, int B, int T, int C);

/* out = (inp - mean) * rstd * w + b per row, eps 1e-5; mean, rstd (N) saved for backward. */
void k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, int64_t N, int C);
/* out = (inp - mean) * rstd * w + b with the mean and rstd a forward saved: the same bits as
 * k_layernorm_forward's out (recomputation). */
void k_layernorm_apply(float *out, const float *inp, const float *w, const float *b,
                       const float *mean, const float *rstd, int64_t N, int C);
/* dinp (N,C) += backward; dw, db (C) += backward. */
void k_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int64_t N, int C);

/* Causal self-attention with grouped-query heads. qkv (B,T,(NH+2*NKV)*hd) = [q (NH heads) |
 * k (NKV heads) | v (NKV heads)], hd = C/NH; query head h uses kv head h / (NH/NKV) (GPT-2:
 * NKV = NH, qkv (B,T,3C)). out (B,T,C); att (B,NH,T,T) the softmax probabilities (upper
 * triangle zero). */
void k_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                         int NKV);
/* dqkv (B,T,(NH+2*NKV)*hd) = backward (overwritten; dk, dv summed over each group's query
 * heads); scratch (B*NH, T) floats. */
void k_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                          const float *att, int B, int T, int C, int NH, int NKV);

/* The same attention in memory linear in T (flash_attention.c, FlashAttention-2's algorithm):
 * out (B,T,C) as above; lse (B,NH,T) the log-sum-exp of each row's scaled scores, the only
 * other thing saved. Equal to the plain version within fp32 rounding, not bit for bit. */
void k_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                               int NH, int NKV);
/* dqkv (as qkv) = backward (overwritten), recomputing the probabilities from qkv and lse;
 * out (B,T,C) the forward's output; scratch (B*NH, T) floats. */
void k_flash_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *out, const float *lse, int B, int T, int C, int NH,
                                int NKV);

/* The same four with document masks (packed examples, docs/packing.md) and a sliding window:
 * pos (B*T) each token's position in its example; query t of row b sees keys
 * k_first_key(pos, window, b, T, t) .. t only (pos NULL, window 0: all keys <= t, the functions
 * above). Rows of probabilities are 0 outside those keys. */
void k_attention_forward_seg(float *out, float *att, const float *qkv, int B, int T, int C,
                             int NH, int NKV, const int32_t *pos, int window);
void k_attention_backward_seg(float *dqkv, float *scratch, const float *dout, const float *qkv,
                              const float *att, int B, int T, int C, int NH, int NKV,
                              const int32_t *pos, int window);
void k_flash_attention_forward_seg(float *out, float *lse, const float *qkv, int B, int T, int C,
                                   int NH, int NKV, const int32_t *pos, int window);
void k_flash_attention_backward_seg(float *dqkv, float *scratch, const float *dout,
                                    const float *qkv, const float *out, const float *lse, int B,
                                    int T, int C, int NH, int NKV, const int32_t *pos, int window);

/* The flash pair with bf16 operands (--matmul bf16; docs/design.md, "Matmul precision"): the
 * _seg functions' arguments and results, each product's operands rounded to bf16 (nearest
 * even): S = bf16(Q) bf16(K)^T then scaled, O += bf16(P) bf16(V) with P, m, l in fp32;
 * dP = bf16(dO) bf16(V)^T, D = dO . O and dS = P (dP - D) scale in fp32, dQ = bf16(dS) bf16(K),
 * dK = bf16(dS)^T bf16(Q), dV = bf16(P)^T bf16(dO). Heads of at most HPT_ATTN_BF16_MAX_HS
 * (k_flash_attention_bf16_heads). */
int k_flash_attention_bf16_heads(int hd);
void k_flash_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int C,
                                    int NH, int NKV, const int32_t *pos, int window);
void k_flash_attention_backward_bf16(float *dqkv, float *scratch, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH, int NKV, const int32_t *pos,
                                     int window);

/* The first key query t of row b sees: its example's start (pos: each token's position in its
 * example, docs/packing.md; NULL: 0), and with a sliding window of `window` keys (> 0) no key
 * before t - window + 1 (window 0: none). */
static inline int k_first_key(const int32_t *pos, int window, int b, int T, int t) {
    int s = pos ? t - pos[(int64_t)b * T + t] : 0;
    if (window > 0 && t - window + 1 > s) s = t - window + 1;
    return s;
}

/* GELU, tanh form: out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
void k_gelu_forward(float *out, const float *inp, int64_t n);
/* dinp = gelu'(inp) * dout (overwrites; dinp may alias dout). */
void k_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n);

/* Softmax cross-entropy over the first V of Vp columns. lse (N): log-sum-exp of each row;
 * losses (N): lse - logit[target]. Returns the mean loss (summed in double). */
float k_crossentropy_forward(float *losses, float *lse, const float *logits,
                             const int32_t *targets, int64_t N, int V, int Vp);
/* logits (N,Vp) become dlogits in place: (softmax - onehot) * dloss for v < V, 0 beyond. */
void k_crossentropy_backward(float *logits, const float *lse, const int32_t *targets,
                             int64_t N, int V, int Vp, float dloss);

/* Sum of squares of x (n), in double, deterministic. */
double k_sumsq(const float *x, size_t n);
/* x *= s. */
void k_scale(float *x, size_t n, float s);
void k_add(float *out, const float *a, const float *b, size_t n);
/* One AdamW step (PyTorch's formulation) on n parameters: p -= lr*wd*p, moments update,
 * bias-corrected step. grad_scale multiplies each gradient first (clipping). */
void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
             float beta2, float eps, float wd, float grad_scale, int64_t t);

/* ---- 8-bit block-wise states (quant.c) and the optimizers' element loops (optim.c) ----
 * An 8-bit state of n values is n codes plus one fp32 absmax per block of K_Q8_BLOCK values
 * (the last block may be short): value = map[code] * absmax. The map is Dettmers et al.'s
 * dynamic map (2021): 256 ascending values in [-1, 1] (signed, with 0 and 1 exactly) or
 * [K_Q8_UNSIGNED_MIN, 1] (unsigned: bitsandbytes' 0 code replaced by K_Q8_UNSIGNED_MIN, so no
 * value dequantises to 0 in a block whose absmax is not 0). Quantisation picks the nearest
 * code (ties to the lower one). */
#define K_Q8_BLOCK HPT_Q8_BLOCK
#define K_Q8_UNSIGNED_MIN HPT_Q8_UNSIGNED_MIN

/* map (256) ascending: the signed (is_signed = 1) or unsigned dynamic map. */
void k_q8_map(float map[256], int is_signed);
/* lut (K_Q8_LUT_SIZE) for map: per bucket of floats with the same top 16 bits, the largest
 * code whose value is not above the bucket's smallest value (fast encoding, q8.h). Returns
 * the most code values inside one bucket: the fast encoding is exact when it is <= 1. */
#define K_Q8_LUT_SIZE HPT_Q8_LUT_SIZE
int k_q8_lut(int32_t lut[K_Q8_LUT_SIZE], const float map[256]);
/* The table of k_q8_map(is_signed)'s map, built on first use (thread-safe). */
const int32_t *k_q8_lut_of(int is_signed);
/* codes (n), absmax (ceil(n/256)) from x (n) (binary search: the reference encoding). */
void k_q8_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, const float *map);
/* x (n) from codes and absmax. */
void k_q8_dequantize(float *x, const uint8_t *codes, const float *absmax, size_t n,
                     const float *map);

/* One optimizer state tensor, and the parameters an update writes (backend.h). */
typedef hpt_be_state k_state;
typedef hpt_be_param k_param;
static inline k_param k_param_f32(float *p) { return hpt_be_param_f32(p); }

/* The update kernels work on one tensor of n parameters, block by block (256 values): the
 * block's states are dequantised into fp32, updated, used for the parameter update (in fp32)
 * and requantised with the block's new absmax. Threaded over blocks; deterministic.
 * grad_scale multiplies each gradient first (clipping). */
/* AdamW, as k_adamw, with states of either width. */
void k_adamw_q(k_param p, const float *g, k_state m, k_state v, size_t n, float lr, float beta1,
               float beta2, float eps, float wd, float grad_scale, int64_t t);
/* Lion: c = beta1*m + (1-beta1)*g; p = p*(1 - lr*wd) - lr*sign(c); m = beta2*m + (1-beta2)*g. */
void k_lion(k_param p, const float *g, k_state m, size_t n, float lr, float beta1, float beta2,
            float wd, float grad_scale);
/* SGD with momentum (PyTorch, dampening 0): d = g + wd*p; m = mom*m + d; p -= lr*m. */
void k_sgd(k_param p, const float *g, k_state m, size_t n, float lr, float momentum, float wd,
           float grad_scale);
/* Adam-mini: v (n / block) holds one second moment per block of `block` consecutive values,
 * v_b = beta2*v_b + (1-beta2)*mean over the block of g^2 (summed in double); then AdamW's
 * update with v_b in place of each v_i. n % block == 0. */
void k_adam_mini(k_param p, const float *g, k_state m, float *v, size_t n, size_t block, float lr,
                 float beta1, float beta2, float eps, float wd, float grad_scale, int64_t t);

/* ---- 16-bit gradient homes (half.c) ----------------------------------------------------
 * h (n) from x (n), rounded to nearest even; 1 when a value overflowed (fp16: |x| > 65504 or not
 * finite; bf16: a result not finite). h may be x's own bytes (in place). */
int k_f16_narrow(uint16_t *h, const float *x, size_t n);
int k_bf16_narrow(uint16_t *h, const float *x, size_t n);
/* x (n) from h (n), exactly; x may be h's own bytes (in place). */
void k_f16_widen(float *x, const uint16_t *h, size_t n);
void k_bf16_widen(float *x, const uint16_t *h, size_t n);
/* bf16 weights (the engine's blocks, bf16 embeddings): x (n) rounded to nearest even into h and,
 * when c is not NULL, the residue x - h rounded into c (Kahan's compensation). One thread. */
void k_bf16_split(uint16_t *h, uint16_t *c, const float *x, size_t n);
/* 1 when any of x (n) is infinite or NaN. */
int k_nonfinite(const float *x, size_t n);

/* ---- int8 weights, one fp32 scale per output channel (q8w.c) ---------------------------
 * w (OC, C) ~= scale (OC) * q (OC, C), q in [-127, 127]. Used by inference (sample, forward
 * checks), never by training. */
#define K_Q8W_TILE HPT_Q8W_TILE               /* output channels dequantised at once for the GEMM path */
#define K_Q8W_DIRECT_ROWS HPT_Q8W_DIRECT_ROWS /* up to this many rows take the direct int8 dot product */
/* q (OC, C), scale (OC) from w (OC, C): per-row absmax / 127, round to nearest. */
void k_q8w_quantize(int8_t *q, float *scale, const float *w, int64_t OC, int64_t C);
/* w (OC, C) = scale[o] * q[o][i]. */
void k_q8w_dequantize(float *w, const int8_t *q, const float *scale, int64_t OC, int64_t C);
/* As k_matmul_forward with w given as (q, scale); scratch (K_Q8W_TILE * C) floats. */
void k_q8w_matmul_forward(float *out, const float *inp, const int8_t *q, const float *scale,
                          const float *bias, int64_t N, int64_t C, int64_t OC, int accumulate,
                          float *scratch);

/* ---- saved activations, compressed (actcode.c) ---------------------------------------- */
size_t k_act_code_bytes(hpt_act_code k, size_t rows, size_t w);
void k_act_code_store(hpt_act_code k, void *dst, const float *x, size_t rows, size_t w);
void k_act_code_load(hpt_act_code k, float *x, const void *src, size_t rows, size_t w, int par);

/* ---- the hybrid schedule's predictors (predict.c) and initialisation (init.c) ----------
 * As the backend table's ops of the same names (backend.h). */
void k_fit_observe(float *s0, float *s1, const float *w, size_t n, float d);
void k_fit_velocity(float *s1, const float *s0, size_t n, float cw, float ca);
double k_predict_adam(float *p, const float *m, const float *v, size_t n, float lr, float wd,
                      float b2k, float bc1, float bc2, float eps);
double k_predict_linear(float *p, const float *vel, size_t n, float scale);
double k_add_normal(float *p, size_t n, uint64_t seed, float std);
double k_adam_step_sumsq(const float *m, const float *v, size_t n, float bc1, float bc2,
                         float eps);
void k_init_normal(float *x, size_t lo, size_t hi, size_t total, float std, uint64_t key);
void k_fill(float *x, size_t n, float value);
void k_dropout_forward(float *y, const float *x, size_t n, float p, uint64_t seed);
void k_dropout_backward(float *dx, const float *dy, size_t n, float p, uint64_t seed);

#endif
