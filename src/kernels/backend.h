/* backend.h: the backend table. Every op the architectures, the runner, the optimizer and the
 * offload engine use, and every touch of device memory (allocate per tier, copy, memset,
 * synchronise), goes through one of these tables; nothing outside src/kernels/ calls a kernel
 * or memcpy/memset's a device buffer itself. kernels/cpu fills the CPU table (oneDNN GEMM and
 * the vectorised kernels of kernels/cpu/); a CUDA backend fills the same table with device
 * code, and tests/test_backend.c checks every op of every backend present against the CPU one.
 *
 *   const hpt_backend *be = hpt_backend_cpu();
 *   float *x;  be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, n * sizeof(float), (void **)&x);
 *   be->memset(x, 0, n * sizeof(float));
 *   be->gelu_forward(y, x, n);                        // y (n) = gelu(x)
 *   be->free(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, x, n * sizeof(float));
 *
 * Conventions (the CPU's, which every backend keeps): row-major; shapes in the comments; N =
 * B*T rows. Ops never allocate, never fail and never print; scratch is passed in. Each op is
 * deterministic for a fixed thread count. An op's pointers are device-tier memory of the
 * backend unless said otherwise; ops run in order on the backend's stream, and sync() waits
 * for all of them (the CPU's ops finish before they return). */
#ifndef HPT_KERNELS_BACKEND_H
#define HPT_KERNELS_BACKEND_H

#include "hptrain.h"

#include <stddef.h>
#include <stdint.h>

/* Loops over fewer elements than this run on one thread: a fork/join costs microseconds, more
 * than small layers' work, and far more when the machine is shared. */
#define HPT_PAR_MIN 32768

/* 8-bit block-wise states: blocks of this many values, one fp32 absmax each. */
#define HPT_Q8_BLOCK 256
/* The smallest code of the unsigned dynamic map (no value dequantises to 0). */
#define HPT_Q8_UNSIGNED_MIN 1e-7f
/* Entries of the fast nearest-code table (one per float's top 16 bits). */
#define HPT_Q8_LUT_SIZE 65536
/* int8 weights: output channels dequantised at once for the GEMM path (q8w scratch rows). */
#define HPT_Q8W_TILE 256
#define HPT_Q8W_DIRECT_ROWS 8

/* One optimizer state tensor of n values: fp32 (f32 set) or 8-bit (codes, absmax, map). */
typedef struct {
    float *f32;         /* (n) or NULL */
    uint8_t *codes;     /* (n) when f32 is NULL */
    float *absmax;      /* (ceil(n/256)) when f32 is NULL */
    const float *map;   /* (256) when f32 is NULL */
    const int32_t *lut; /* (HPT_Q8_LUT_SIZE) the map's fast table, or NULL: binary search */
} hpt_be_state;

/* The parameters an update op writes: fp32 (f32 set) or bf16 (bf16 set), rounded back after the
 * update stochastically (comp NULL: random bits from seed and the element's index base + i in
 * the model) or with Kahan compensation (comp (n) bf16: the rounding error, added back before
 * the next update). */
typedef struct {
    float *f32;       /* (n) or NULL */
    uint16_t *bf16;   /* (n) when f32 is NULL */
    uint16_t *comp;   /* (n) or NULL */
    uint64_t seed;    /* stochastic rounding: this step's seed */
    size_t base;      /* index of element 0 in the whole model */
} hpt_be_param;

static inline hpt_be_param hpt_be_param_f32(float *p) {
    hpt_be_param k = {p, NULL, NULL, 0, 0};
    return k;
}

/* The widest head (hd = C/NH) of the CPU's bf16 flash attention ops (their stack tiles). */
#define HPT_ATTN_BF16_MAX_HS 256

/* The bf16 GEMMs' workspace (gemm_bf16): operand panels of at most this many bytes. */
#define HPT_MM_BF16_WS_BYTES ((size_t)8 << 20)

/* Directions of a copy: between two device buffers, host to device, device to host, or two
 * host buffers (pinned or not: the backend knows its own host tier). */
typedef enum { HPT_COPY_D2D = 0, HPT_COPY_H2D, HPT_COPY_D2H, HPT_COPY_H2H } hpt_copy_kind;

/* Saved activations stored compressed (the activation store): per-row int8 with one fp32 scale,
 * or bf16 rounded to nearest even. */
typedef enum { HPT_ACT_CODE_INT8 = 1, HPT_ACT_CODE_BF16 = 2 } hpt_act_code;

typedef struct hpt_backend hpt_backend;
struct hpt_backend {
    const char *name; /* "cpu", "cuda" */

    /* ---- memory ---- */
    /* Zero-filled storage from the budgeted manager on tier (DEVICE: the backend's memory, HOST:
     * memory it copies to and from fastest); free is told the size (devices keep no headers). */
    hpt_status (*alloc)(hpt_mem *mem, hpt_tier tier, hpt_category cat, size_t bytes, void **out);
    void (*free)(hpt_mem *mem, hpt_tier tier, hpt_category cat, void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes, hpt_copy_kind kind);
    void (*memset)(void *dst, int value, size_t bytes);
    /* Waits for every op and copy issued so far. */
    void (*sync)(void);

    /* ---- GEMM and linear layers ---- */
    /* C (M,N) = alpha * op(A) * op(B) + beta * C, row-major; op(X) = X or X^T ('N'/'T'). */
    void (*gemm)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc);
    /* out (N,OC) = inp (N,C) @ w^T (w: (OC,C)) + bias (OC, may be NULL); accumulate 1 adds to
     * what out holds (residual connections). */
    void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias,
                           int64_t N, int64_t C, int64_t OC, int accumulate);
    /* dinp (N,C) = or += dout @ w (accumulate_dinp), dw (OC,C) += dout^T @ inp, dbias (OC) +=
     * column sums of dout (dbias may be NULL). */
    void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                            int accumulate_dinp);

    /* ---- bf16 operand GEMMs (--matmul bf16; docs/design.md, "Matmul precision") ----
     * gemm, matmul_forward and matmul_backward with each product's two operands rounded to bf16
     * (nearest even) and the sums, the bias and the outputs in fp32: every product of two bf16
     * values is exact in fp32, so these differ from the fp32 GEMM of the rounded operands by
     * summation order only. ws: HPT_MM_BF16_WS_BYTES of device workspace (the rounded operand
     * panels, where the backend needs them). NULL where the backend has none. */
    void (*gemm_bf16)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                      float *C, int64_t ldc, void *ws);
    void (*matmul_forward_bf16)(float *out, const float *inp, const float *w, const float *bias,
                                int64_t N, int64_t C, int64_t OC, int accumulate, void *ws);
    void (*matmul_backward_bf16)(float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, int64_t N, int64_t C,
                                 int64_t OC, int accumulate_dinp, void *ws);

    /* ---- embedding ---- */
    /* out (B,T,C) = wte[inp[b,t]] + wpe[t]. */
    void (*encoder_forward)(float *out, const int32_t *inp, const float *wte, const float *wpe,
                            int B, int T, int C);
    /* dwte (Vp,C) += scatter of dout by token; dwpe (maxT,C) += sum over b of dout. */
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             int B, int T, int C);

    /* ---- normalisation ---- */
    /* out = (inp - mean) * rstd * w + b per row, eps 1e-5; mean, rstd (N) saved. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int64_t N, int C);
    /* the same out from a forward's saved mean and rstd (recomputation: the same bits) */
    void (*layernorm_apply)(float *out, const float *inp, const float *w, const float *b,
                            const float *mean, const float *rstd, int64_t N, int C);
    /* dinp (N,C) += backward; dw, db (C) += backward. */
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int64_t N, int C);
    /* RMSNorm (Llama): out (N,C) = inp * rstd * w per row, rstd = 1 / sqrt(mean(inp^2) + eps);
     * rstd (N) saved. out must not alias inp. */
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int64_t N,
                            int C, float eps);
    /* the same out from the forward's saved rstd: the same bits (recomputation) */
    void (*rmsnorm_apply)(float *out, const float *inp, const float *w, const float *rstd,
                          int64_t N, int C);
    /* dinp (N,C) += backward; dw (C) += backward (dout, inp (N,C); rstd (N) the forward's) */
    void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int64_t N, int C);

    /* ---- rotary position embeddings and SwiGLU (Llama) ---- */
    /* In place on the NH q heads and the NKV k heads of qkv (B,T,(NH+2*NKV)*hd) (v untouched),
     * rotate_half convention (element i of a head pairs with i + hd/2, hd even):
     *   y[i] = x[i] cos - x[i+hd/2] sin,  y[i+hd/2] = x[i+hd/2] cos + x[i] sin,
     * with cos, sin (maxT, hd/2) tables (host-computed by the arch, on the device) read at row
     * pos0 + t for position t of each sequence (pos0 + T <= maxT; training passes pos0 = 0,
     * inference the position of its first new token, B = 1). */
    void (*rope_forward)(float *qkv, const float *cos, const float *sin, int B, int T, int NH,
                         int NKV, int hd, int pos0);
    /* the transpose rotation, in place on the dq and dk heads of dqkv (same layout); dv untouched.
     * RoPE is linear: nothing is saved. */
    void (*rope_backward)(float *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                          int NKV, int hd, int pos0);
    /* h (N,2FF) = [gate | up] per row: out (N,FF) = silu(gate) * up, silu(g) = g / (1 + e^-g).
     * out must not alias h. */
    void (*swiglu_forward)(float *out, const float *h, int64_t N, int FF);
    /* dh (N,2FF) = [dgate | dup] overwritten from dout (N,FF) and the forward's saved h (N,2FF);
     * dh must not alias h or dout. */
    void (*swiglu_backward)(float *dh, const float *dout, const float *h, int64_t N, int FF);
    /* GeGLU (Gemma): out (N,FF) = gelu(gate) * up on h (N,2FF) = [gate | up], gelu the tanh
     * form (gelu_forward's); out must not alias h. The backward as swiglu_backward's. */
    void (*geglu_forward)(float *out, const float *h, int64_t N, int FF);
    void (*geglu_backward)(float *dh, const float *dout, const float *h, int64_t N, int FF);

    /* ---- attention (causal, grouped-query) ----
     * qkv (B,T,(NH+2*NKV)*hd) = [q (NH heads) | k (NKV heads) | v (NKV heads)], hd = C/NH,
     * NKV divides NH; query head h uses kv head h / (NH/NKV); out (B,T,C), C = NH*hd. GPT-2 is
     * NKV = NH: qkv (B,T,3C) = [q | k | v]. Repeated K/V heads are never materialised. */
    /* plain: out (B,T,C); att (B,NH,T,T) the softmax probabilities */
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH, int NKV);
    /* dqkv (as qkv) overwritten, dk and dv the sums over each group's query heads; scratch
     * (B*NH, T) */
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH, int NKV);
    /* flash: out (B,T,C), lse (B,NH,T) each row's log-sum-exp: the only other thing saved */
    void (*flash_attention_forward)(float *out, float *lse, const float *qkv, int B, int T,
                                    int C, int NH, int NKV);
    /* dqkv (as qkv) overwritten, as attention_backward; out, lse the forward's; scratch
     * (B*NH, T) */
    void (*flash_attention_backward)(float *dqkv, float *scratch, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH, int NKV);

    /* ---- packed examples (docs/packing.md) ----
     * pos (B*T int32, device): each token's position in its example (0 at an example's first
     * token). The attention ops above with document masks: query t of row b sees keys
     * t - pos[b*T+t] .. t only (pos NULL: every key <= t, the ops above); window > 0, a sliding
     * window (Mistral, Gemma's local layers): besides, keys j with t - j < window only (W keys,
     * the query's own included; transformers' kv_idx > q_idx - sliding_window); window 0: no
     * window, the same bits as without it; the encoder reads
     * wpe at pos, RoPE rotates at pos (instead of t); encoder_backward_pos's dwte may be NULL
     * (wpe's gradient only: chunked embeddings' wte gradient is made chunk by chunk). */
    void (*attention_forward_seg)(float *out, float *att, const float *qkv, int B, int T, int C,
                                  int NH, int NKV, const int32_t *pos, int window);
    void (*attention_backward_seg)(float *dqkv, float *scratch, const float *dout,
                                   const float *qkv, const float *att, int B, int T, int C,
                                   int NH, int NKV, const int32_t *pos, int window);
    void (*flash_attention_forward_seg)(float *out, float *lse, const float *qkv, int B, int T,
                                        int C, int NH, int NKV, const int32_t *pos,
                                        int window);
    void (*flash_attention_backward_seg)(float *dqkv, float *scratch, const float *dout,
                                         const float *qkv, const float *out, const float *lse,
                                         int B, int T, int C, int NH, int NKV,
                                         const int32_t *pos, int window);
    /* ---- the flash pair with bf16 operands (--matmul bf16; docs/design.md, "Matmul
     * precision") ----
     * The _seg pair's arguments and results with each product's two operands rounded to bf16
     * (nearest even), the sums, the softmax statistics and D in fp32: S = bf16(Q) bf16(K)^T,
     * scaled by 1/sqrt(hd) after the sum; the online softmax over key tiles of 64 (m, l and P
     * in fp32, P relative to the running max), O += bf16(P) bf16(V), O /= l at the end;
     * backward P = exp(scale S - lse), dP = bf16(dO) bf16(V)^T, D = rowsum(dO * O), dS =
     * scale P (dP - D) in fp32, dQ = bf16(dS) bf16(K), dK = bf16(dS)^T bf16(Q), dV = bf16(P)^T
     * bf16(dO). Only for the head sizes flash_attention_bf16_heads accepts (the model refuses
     * the others at setup). NULL where the backend has none. */
    void (*flash_attention_forward_bf16)(float *out, float *lse, const float *qkv, int B, int T,
                                         int C, int NH, int NKV, const int32_t *pos,
                                         int window);
    void (*flash_attention_backward_bf16)(float *dqkv, float *scratch, const float *dout,
                                          const float *qkv, const float *out, const float *lse,
                                          int B, int T, int C, int NH, int NKV,
                                          const int32_t *pos, int window);
    /* 1 when the pair above is built for heads of hd = C/NH (the CPU: 1 .. HPT_ATTN_BF16_MAX_HS;
     * CUDA: 16, 32, 64, 128), else 0 */
    int (*flash_attention_bf16_heads)(int hd);
    void (*encoder_forward_pos)(float *out, const int32_t *inp, const float *wte,
                                const float *wpe, const int32_t *pos, int B, int T, int C);
    void (*encoder_backward_pos)(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                 const int32_t *pos, int B, int T, int C);
    /* encoder_forward_bf16 (bf16 wte and wpe) reading wpe at pos */
    void (*encoder_forward_bf16_pos)(float *out, const int32_t *inp, const uint16_t *wte,
                                     const uint16_t *wpe, const int32_t *pos, int B, int T,
                                     int C);
    void (*rope_forward_pos)(float *qkv, const float *cos, const float *sin, int B, int T, int NH,
                             int NKV, int hd, const int32_t *pos);
    void (*rope_backward_pos)(float *dqkv, const float *cos, const float *sin, int B, int T,
                              int NH, int NKV, int hd, const int32_t *pos);

    /* ---- pointwise ---- */
    /* GELU, tanh form; backward: dinp = gelu'(inp) * dout (dinp may alias dout) */
    void (*gelu_forward)(float *out, const float *inp, int64_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, int64_t n);
    void (*scale)(float *x, size_t n, float s);
    /* out (n) = a + b, each sum rounded once; out may alias a or b (Gemma's residual adds) */
    void (*add)(float *out, const float *a, const float *b, size_t n);
    /* sum of squares in double, deterministic */
    double (*sumsq)(const float *x, size_t n);
    /* 1 when any of x (n) is infinite or NaN */
    int (*nonfinite)(const float *x, size_t n);
    /* sumsq and nonfinite over k ranges at once, in one round trip (the gradient norm's units,
     * docs/cuda.md "Host round trips"): sums (k, host memory) [j] = sumsq(xs[j], ns[j]), the
     * bits of that call; nonfinite_many 1 when any range holds an infinite or NaN value. xs, ns
     * (k): host arrays of device pointers and lengths, read during the call */
    void (*sumsq_many)(double *sums, const float *const *xs, const size_t *ns, size_t k);
    /* sumsq_many with sums (k) in device memory: no round trip; a later copy(D2H) reads them
     * (the offload engine's blocks, summed while their gradient slot holds them) */
    void (*sumsq_many_dev)(double *sums, const float *const *xs, const size_t *ns, size_t k);
    int (*nonfinite_many)(const float *const *xs, const size_t *ns, size_t k);

    /* ---- loss ---- */
    /* softmax cross-entropy over the first V of Vp columns: lse, losses (N); mean loss */
    float (*crossentropy_forward)(float *losses, float *lse, const float *logits,
                                  const int32_t *targets, int64_t N, int V, int Vp);
    /* logits (N,Vp) become dlogits in place: (softmax - onehot) * dloss, 0 beyond V */
    void (*crossentropy_backward)(float *logits, const float *lse, const int32_t *targets,
                                  int64_t N, int V, int Vp, float dloss);

    /* ---- model-side helpers (chunked head, embeddings) ---- */
    /* the mean of losses (n), summed in double in order (crossentropy_forward's sum): the
     * loss of a head computed over row chunks */
    float (*loss_mean)(const float *losses, size_t n);
    /* bf16 tied embeddings (model/embed.c): x (n) = h widened; h (n) = x rounded to nearest
     * even and, when c is not NULL, the residue into c; both in pieces across threads */
    void (*bf16_widen_par)(float *x, const uint16_t *h, size_t n);
    void (*bf16_split_par)(uint16_t *h, uint16_t *c, const float *x, size_t n);
    /* out (B,T,C) = wte[inp[b,t]] + wpe[t] with wte, wpe bf16 (each row widened as gathered) */
    void (*encoder_forward_bf16)(float *out, const int32_t *inp, const uint16_t *wte,
                                 const uint16_t *wpe, int B, int T, int C);
    /* encoder_backward's two halves, the same sums in the same order: dwpe (T,C) += sum over
     * b of dout (BT rows, position = row % T); dwte (nv,C), the rows [v0, v0 + nv) of wte,
     * += dout's rows of the tokens in that range */
    void (*encoder_backward_wpe)(float *dwpe, const float *dout, size_t BT, int T, size_t C);
    void (*encoder_backward_rows)(float *dwte, const float *dout, const int32_t *inp, size_t BT,
                                  size_t C, size_t v0, size_t nv);
    /* A running log-sum-exp over vocabulary chunks: logits (n, nv) of one chunk update each
     * row's maximum mx (n) and sum of exp(logit - mx) sum (n); first: the first chunk */
    void (*logsumexp_chunk)(float *mx, float *sum, const float *logits, size_t n, size_t nv,
                            int first);
    /* The running log-sum-exp's end: lse (n) = mx + log(sum) (lse holds sum, losses holds mx
     * on entry), losses (n) = lse - lnf_i . wte[targets_i]; wte fp32 (wte) or bf16 (wte_h) */
    void (*tied_loss)(float *losses, float *lse, const float *lnf, const float *wte,
                      const uint16_t *wte_h, const int32_t *targets, size_t n, size_t C);
    /* logits (n, nv) of vocabulary rows [v0, v0 + nv) become dlogits: (softmax - onehot) *
     * dloss, the softmax from the saved lse (n) */
    void (*crossentropy_dlogits)(float *logits, const float *lse, const int32_t *targets,
                                 size_t n, size_t v0, size_t nv, float dloss);

    /* ---- optimizer updates (one tensor of n values, 256-value blocks; grad_scale multiplies
     * each gradient first: clipping and the loss scale's inverse) ---- */
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float wd, float grad_scale, int64_t t);
    void (*adamw_q)(hpt_be_param p, const float *g, hpt_be_state m, hpt_be_state v, size_t n,
                    float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                    int64_t t);
    void (*lion)(hpt_be_param p, const float *g, hpt_be_state m, size_t n, float lr,
                 float beta1, float beta2, float wd, float grad_scale);
    void (*sgd)(hpt_be_param p, const float *g, hpt_be_state m, size_t n, float lr,
                float momentum, float wd, float grad_scale);
    /* Adam-mini: v (ceil(n / block)) one second moment per block of `block` values; when n is
     * not a multiple of block, the last n % block values are a block of their own */
    void (*adam_mini)(hpt_be_param p, const float *g, hpt_be_state m, float *v, size_t n,
                      size_t block, float lr, float beta1, float beta2, float eps, float wd,
                      float grad_scale, int64_t t);

    /* ---- quantisation and 16-bit conversion ---- */
    /* the dynamic map (256 ascending values; host memory) and its fast table (built once) */
    void (*q8_map)(float map[256], int is_signed);
    const int32_t *(*q8_lut_of)(int is_signed);
    void (*q8_quantize)(uint8_t *codes, float *absmax, const float *x, size_t n,
                        const float *map);
    void (*q8_dequantize)(float *x, const uint8_t *codes, const float *absmax, size_t n,
                          const float *map);
    /* h (n) from x (n), nearest even; 1 when a value overflowed. h may alias x. */
    int (*f16_narrow)(uint16_t *h, const float *x, size_t n);
    int (*bf16_narrow)(uint16_t *h, const float *x, size_t n);
    void (*f16_widen)(float *x, const uint16_t *h, size_t n);
    void (*bf16_widen)(float *x, const uint16_t *h, size_t n);
    /* bf16 weights: h nearest even and, when c is not NULL, the residue into c (Kahan) */
    void (*bf16_split)(uint16_t *h, uint16_t *c, const float *x, size_t n);
    /* int8 weights per output channel: w (OC,C) ~= scale (OC) * q (OC,C) */
    void (*q8w_quantize)(int8_t *q, float *scale, const float *w, int64_t OC, int64_t C);
    void (*q8w_dequantize)(float *w, const int8_t *q, const float *scale, int64_t OC,
                           int64_t C);
    /* as matmul_forward with w as (q, scale); scratch (HPT_Q8W_TILE * C) floats */
    void (*q8w_matmul_forward)(float *out, const float *inp, const int8_t *q, const float *scale,
                               const float *bias, int64_t N, int64_t C, int64_t OC,
                               int accumulate, float *scratch);
    /* ---- inference helpers ---- */
    /* x (n,C) = wte[tok] + wpe[pos0 + t]; wte (Vp,C) fp32, or int8 rows wte_q (Vp,C) times
     * wte_scale (Vp) when wte_q is not NULL (wte is then unused); wpe (maxT,C) NULL: no
     * learned positions (rotary models), x = wte[tok] */
    void (*infer_embed)(float *x, const int32_t *tok, size_t n, int pos0, const float *wte,
                        const int8_t *wte_q, const float *wte_scale, const float *wpe, int C);
    /* The key/value cache of NKV heads, grouped-query as the attention ops: qkv (n, C + 2 KVC)
     * = [q (NH heads) | k (NKV heads) | v (NKV heads)], KVC = NKV * (C/NH); K, V (ctx, KVC).
     * GPT-2: NKV = NH, qkv (n,3C), K, V (ctx,C). A rotary model applies rope_forward (B = 1,
     * T = n, pos0) to qkv before storing. */
    /* rows pos0 .. pos0 + n - 1 of K, V = the k and v parts of qkv's n rows (copies) */
    void (*infer_kv_store)(float *K, float *V, const float *qkv, int pos0, size_t n, int C,
                           int NH, int NKV);
    /* atty (n,C) = causal attention of qkv's n queries at positions pos0 .. pos0 + n - 1 over
     * K, V rows 0 .. each query's position (window > 0: the last `window` of them only, the
     * attention ops' sliding window); query head h reads kv head h / (NH/NKV) */
    void (*infer_attend)(float *atty, const float *qkv, const float *K, const float *V,
                         int pos0, size_t n, int C, int NH, int NKV, int window);
    /* Saved activations, compressed: the bytes of a stored copy of x (rows, w); store it; load
     * it back (par 0: on a helper thread, outside the op's thread team). */
    size_t (*act_code_bytes)(hpt_act_code k, size_t rows, size_t w);
    void (*act_code_store)(hpt_act_code k, void *dst, const float *x, size_t rows, size_t w);
    void (*act_code_load)(hpt_act_code k, float *x, const void *src, size_t rows, size_t w,
                          int par);

    /* ---- optimizer, predictor and initialisation helpers ---- */
    /* The hybrid schedule's predictors (src/train/predict.c). Each sum of squares is summed in
     * double over 64 fixed chunks of the n values, then the chunks in order. */
    /* the linear fit's sums (n each): s1 = d * (s1 + s0), then s0 = d * s0 + w */
    void (*fit_observe)(float *s0, float *s1, const float *w, size_t n, float d);
    /* the fit's velocity: s1 = cw * s1 + ca * s0 */
    void (*fit_velocity)(float *s1, const float *s0, size_t n, float cw, float ca);
    /* a predicted AdamW update of p (n) from m, v (read only): vk = b2k v + (1 - b2k) m^2,
     * u = lr ((m / bc1) / (sqrt(vk / bc2) + eps) + wd p), p -= u; returns the sum of u^2 */
    double (*predict_adam)(float *p, const float *m, const float *v, size_t n, float lr,
                           float wd, float b2k, float bc1, float bc2, float eps);
    /* p += scale * vel; returns the sum of the updates' squares */
    double (*predict_linear)(float *p, const float *vel, size_t n, float scale);
    /* p += std * N(0, 1), one stream seeded seed, in order; returns the sum of the updates'
     * squares (one thread) */
    double (*add_normal)(float *p, size_t n, uint64_t seed, float std);
    /* the sum over i of ((m / bc1) / (sqrt(v / bc2) + eps))^2: AdamW's last step's norm */
    double (*adam_step_sumsq)(const float *m, const float *v, size_t n, float bc1, float bc2,
                              float eps);
    /* Random initialisation (src/model/init.c): x (hi - lo) = values [lo, hi) of total normals
     * std * N(0, 1) made in chunks of 4096, chunk k from an RNG seeded key ^ k (the same
     * values whichever range is asked for); hi <= total. */
    void (*init_normal)(float *x, size_t lo, size_t hi, size_t total, float std, uint64_t key);
    /* x (n) = value */
    void (*fill)(float *x, size_t n, float value);
    /* Dropout with probability p (0 <= p < 1) and a counter-based mask from seed (element i's
     * keep decided by seed and i alone): y (n) = keep_i ? x / (1 - p) : 0; the backward
     * dx (n) += keep_i ? dy / (1 - p) : 0 with the forward's seed. LoRA's adapter inputs
     * (model/lora.c); NULL in a backend without them (LoRA's dropout is then refused). */
    void (*dropout_forward)(float *y, const float *x, size_t n, float p, uint64_t seed);
    void (*dropout_backward)(float *dx, const float *dy, size_t n, float p, uint64_t seed);

    /* ---- NF4, QLoRA's 4-bit codec (kernels/nf4.h: the layout, the rules) ----
     * dst, src: the storage of n values, hpt_nf4_bytes(n) bytes, 4-aligned (a frozen block's
     * slice, model/frozen.c). The CPU's ops are hpt_nf4_quantize and hpt_nf4_dequantize (host
     * routines); every backend gives their bits, whatever the threads. */
    void (*nf4_quantize)(unsigned char *dst, const float *x, size_t n);
    void (*nf4_dequantize)(float *x, const unsigned char *src, size_t n);
};

/* Bytes of the NF4 storage of n values (kernels/nf4.c; the layout in kernels/nf4.h): what the
 * nf4 ops read and write, for the frozen store's layout (model/frozen.c). */
size_t hpt_nf4_bytes(size_t n);

/* ---- host round trips (kernels/roundtrip.c) ----
 * A round trip: a call after which the host holds a result of device work issued before it, so
 * on a GPU the host waits for the device to drain (and a step holding one cannot be captured as
 * a CUDA graph): the ops returning a value computed from device data (sumsq, sumsq_many,
 * nonfinite, nonfinite_many, crossentropy_forward, loss_mean, f16_narrow, bf16_narrow,
 * predict_adam, predict_linear, add_normal, adam_step_sumsq, init_normal), copy of any kind but
 * D2D, sync, and the transfers' host_wait. Every backend notes one per such call (the CUDA
 * backend where it synchronises, the CPU's where the CUDA backend would), so the CPU's count
 * of a run is the GPU's; docs/cuda.md, "Host round trips", has the counts per step. */
void hpt_be_note_trip(void);
/* the round trips noted since the start or the last reset (all threads) */
uint64_t hpt_be_trips(void);
void hpt_be_trips_reset(void);

/* The CPU backend (kernels/cpu/backend.c): always present. */
const hpt_backend *hpt_backend_cpu(void);
/* The backend whose memory mem's device tier is (kernels/device.c): the CPU's unless
 * hpt_device_bind bound mem to a GPU, which it did only after the CUDA backend started, so the
 * answer is never NULL. Everything that allocates from mem (the model, the optimizer, the
 * offload engine, the trainer) takes its backend here: one code path for every device. */
const hpt_backend *hpt_backend_of(const hpt_mem *mem);
/* A GPU's identity without starting its backend (device.c): "cuda NAME sm_XY" into buf for
 * device >= 1 (cuda:device-1); HPT_ERR_UNSUPPORTED, naming why, where it is absent or the build
 * has no CUDA backend. hpt_device_status: the first error a GPU op kept (HPT_OK on the CPU). */
hpt_status hpt_device_name(int device, char *buf, size_t n);
hpt_status hpt_device_status(void);

/* ---- transfers (kernels/transfer.c, kernels/cuda/transfer.cu) ----
 * Copies between the host tier and the device tier that run beside compute, and the events that
 * order them: what the activation store and the offload engine see of PCIe.
 *
 *   const hpt_transfer *x = hpt_transfer_of(mem);        // the CPU's or a GPU's
 *   hpt_xevent *after, *done;
 *   HPT_CHECK(x->event_create(&after)); HPT_CHECK(x->event_create(&done));
 *   x->record(after, HPT_XS_COMPUTE);                    // the compute issued so far
 *   x->stream_wait(HPT_XS_LOAD, after);                  // the copy starts after it (dst free)
 *   x->copy_async(dev, host, bytes, HPT_COPY_H2D, HPT_XS_LOAD);
 *   x->record(done, HPT_XS_LOAD);
 *   ... compute issued here overlaps the copy ...
 *   x->stream_wait(HPT_XS_COMPUTE, done);                // compute issued later sees dev
 *   x->host_wait(done);                                  // or: the host reads what arrived
 *   x->event_destroy(after); x->event_destroy(done);
 *
 * Three streams: COMPUTE (the backend's ops), LOAD (host to device) and STORE (device to host).
 * Work on one stream runs in issue order; between streams only the events order it, and
 * nothing orders a copy implicitly: the caller records and waits for what it needs (a copy's
 * destination must be free of earlier readers, its source complete, before it starts; no
 * later compute may overwrite the source until the copy's event has been waited for).
 * On the CPU (async 0) a copy is a memcpy that is complete when it returns, and events, records
 * and waits do nothing: code written against this table keeps the CPU's behaviour exactly.
 * On a GPU (kernels/cuda/transfer.cu) copies are cudaMemcpyAsync on two streams of their own
 * and events are CUDA events; host memory must be the host tier's (pinned) for the copies to
 * be asynchronous. Nothing fails after event_create: a CUDA error is kept by the backend
 * (hpt_cuda_status). */
typedef enum { HPT_XS_COMPUTE = 0, HPT_XS_LOAD, HPT_XS_STORE, HPT_XS_COUNT } hpt_xstream;
typedef struct hpt_xevent hpt_xevent;

typedef struct hpt_transfer {
    const char *name; /* "cpu", "cuda" */
    int async;        /* 1: copies run beside compute; 0: complete when copy_async returns */
    hpt_status (*event_create)(hpt_xevent **out);
    void (*event_destroy)(hpt_xevent *ev); /* NULL: nothing */
    /* bytes from src to dst on stream s (LOAD or STORE) */
    void (*copy_async)(void *dst, const void *src, size_t bytes, hpt_copy_kind kind, hpt_xstream s);
    /* ev completes when the work issued on s so far has */
    void (*record)(hpt_xevent *ev, hpt_xstream s);
    /* the work issued on s after this call waits for ev (the host does not) */
    void (*stream_wait)(hpt_xstream s, hpt_xevent *ev);
    /* the calling thread waits for ev */
    void (*host_wait)(hpt_xevent *ev);
    /* stream s's own handle (a cudaStream_t), for a library that queues work on it itself
     * (the NCCL transport, dist/nccl.c); NULL (the field) where there is none: the CPU */
    void *(*native_stream)(hpt_xstream s);
} hpt_transfer;

/* The CPU's: memcpy, no events. */
const hpt_transfer *hpt_transfer_cpu(void);
/* The checking CPU transfers (kernels/transfer_check.c; docs/testing.md): async 1, a copy queued
 * and its destination filled with NaN bytes until a wait makes it due, misuse reported (message
 * and abort(), or the handler set by hpt_transfer_check_on_error). hpt_transfer_of returns it for
 * a CPU-bound mem when HPT_TRANSFER_CHECK=1 is in the environment (hpt_transfer_check_env). */
const hpt_transfer *hpt_transfer_check(void);
int hpt_transfer_check_env(void);
/* Runs every queued copy (the CPU backend's sync: a GPU's sync waits for the copy streams). */
void hpt_transfer_check_sync(void);
/* Reports an error if [p, p + bytes) is a queued copy's source or destination (the CPU
 * backend's free calls it). */
void hpt_transfer_check_freed(const void *p, size_t bytes);
/* Tests: the copies queued now; a handler instead of abort() (NULL: abort again); forget the
 * queue and the streams' waits (after a provoked error). */
size_t hpt_transfer_check_queued(void);
void hpt_transfer_check_on_error(void (*fn)(const char *msg));
void hpt_transfer_check_reset(void);
/* The transfers of mem's device tier (kernels/device.c's binding): the CPU's (the checking
 * table's under HPT_TRANSFER_CHECK=1), or the CUDA backend's when mem is bound to a GPU. */
const hpt_transfer *hpt_transfer_of(const hpt_mem *mem);

#endif
