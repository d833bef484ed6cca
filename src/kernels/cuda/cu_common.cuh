/* cu_common.cuh: what the CUDA backend's files share (device code, C++): the compute stream,
 * the cuBLAS handle, the small scratch for results read back by the host, the launch and
 * reduction helpers, bf16/f16 bit helpers and the op functions each file defines for the table
 * (backend.cu). Reductions are deterministic: fixed launch shapes, fixed-order trees in shared
 * memory, no floating-point atomics, so the same inputs give the same bits every run. */
#ifndef HPT_CU_COMMON_CUH
#define HPT_CU_COMMON_CUH

extern "C" { /* the library's C headers: C linkage */
#include "kernels/backend.h"
#include "kernels/cuda/cuda.h"
#include "core/core.h"
#include "kernels/kernels.h"
#include "mem/mem.h"
}

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* ---- state (backend.cu) ---- */
extern cudaStream_t cu_stream;   /* every op runs on it, in order */
extern cublasHandle_t cu_blas;   /* bound to cu_stream, its workspace fixed at init */
extern double *cu_red;           /* (CU_RED_SLOTS) device scratch for reductions */
extern double *cu_red_host;      /* (CU_RED_SLOTS) pinned: what the host reads back */
extern float *cu_stage;          /* (CU_STAGE_FLOATS) pinned: host-side work (RNG) */
extern float *cu_colred;         /* (CU_COLRED_FLOATS) device scratch: colsum.cu's partials */
#define CU_RED_SLOTS 1024
#define CU_COLRED_FLOATS (1u << 21)
#define CU_STAGE_FLOATS (1u << 20)
/* Keeps the first error (ops cannot fail: hpt_cuda_status reports it). */
void cu_note(cudaError_t e, const char *what);
void cu_note_blas(cublasStatus_t s, const char *what);
/* Makes the backend's device current on the calling thread (the offload worker's, too). */
void cu_enter(void);
/* The host reads n doubles of cu_red after the stream's work: the reductions' results. */
void cu_read_red(int n);
/* the same for cu_red[first .. first + n) into cu_red_host[first ..]: one round trip */
void cu_read_red_at(int first, int n);
/* Waits for the transfers' LOAD and STORE streams (transfer.cu), where they exist: sync()'s part. */
void cu_transfer_sync(void);

#define CU_LAUNCHED(what) cu_note(cudaGetLastError(), what)

/* ---- launch helpers ---- */
#define CU_T 256
static inline unsigned cu_grid(size_t n, unsigned t = CU_T) {
    size_t g = (n + t - 1) / t;
    return (unsigned)(g < 1 ? 1 : (g > 65535u * 32u ? 65535u * 32u : g));
}
#define CU_FOR(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
                          i += (size_t)gridDim.x * blockDim.x)

/* Block-wide sum and max (blockDim.x a multiple of 32, at most 1024): a fixed tree, so the same
 * inputs give the same result. sh: 32 slots of shared memory; every thread gets the result. */
template <typename F>
__device__ inline F cu_warp_sum(F v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename F>
__device__ inline F cu_warp_max(F v) {
    for (int o = 16; o > 0; o >>= 1) {
        F w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}
template <typename F>
__device__ inline F cu_block_sum(F v, F *sh) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum(v);
    __syncthreads(); /* sh may hold a previous call's values */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (F)0;
    return cu_warp_sum(v);
}
template <typename F>
__device__ inline F cu_block_max(F v, F *sh, F lowest) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : lowest;
    return cu_warp_max(v);
}

/* ---- 16-bit helpers: the CPU's rules (kernels/cpu/bf16.h), bit for bit ---- */
__device__ inline float cu_bf16_widen(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
__device__ inline uint16_t cu_bf16_rne(float x) {
    uint32_t b = __float_as_uint(x);
    if ((b & 0x7f800000u) == 0x7f800000u) return (uint16_t)(b >> 16);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}
__device__ inline uint32_t cu_bf16_noise(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)(z >> 48);
}
__device__ inline uint16_t cu_bf16_sr(float x, uint32_t noise16) {
    uint32_t b = __float_as_uint(x);
    if ((b & 0x7f800000u) == 0x7f800000u) return (uint16_t)(b >> 16);
    return (uint16_t)((b + noise16) >> 16);
}

/* ---- deterministic sums in double over n values: fixed blocks, then one block in order ---- */
#define CU_SUM_BLOCKS 256
/* Sums the CU_SUM_BLOCKS partials at cu_red[first..] into cu_red[out] (one block, a fixed tree). */
void cu_finish_sum(int first, int out);

/* ---- the ops (one function per table entry, defined in gemm.cu, nn.cu, attention.cu,
 * optim.cu and misc.cu; backend.cu puts them in the table) ---- */
void cu_gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
             int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void cu_gemm_bf16(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                 int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                 void *ws);
void cu_matmul_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                            int64_t N, int64_t C, int64_t OC, int accumulate, void *ws);
void cu_matmul_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                             int accumulate_dinp, void *ws);
void cu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int64_t N,
                       int64_t C, int64_t OC, int accumulate);
void cu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int64_t N, int64_t C, int64_t OC, int accumulate_dinp);
void cu_q8w_quantize(int8_t *q, float *scale, const float *w, int64_t OC, int64_t C);
void cu_q8w_dequantize(float *w, const int8_t *q, const float *scale, int64_t OC, int64_t C);
void cu_q8w_matmul_forward(float *out, const float *inp, const int8_t *q, const float *scale,
                           const float *bias, int64_t N, int64_t C, int64_t OC, int accumulate,
                           float *scratch);

void cu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B,
                        int T, int C);
void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
                         int T, int C);
void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int64_t N, int C);
void cu_layernorm_apply(float *out, const float *inp, const float *w, const float *b,
                        const float *mean, const float *rstd, int64_t N, int C);
void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int64_t N, int C);
void cu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t N, int C,
                        float eps);
void cu_rmsnorm_apply(float *out, const float *inp, const float *w, const float *rstd, int64_t N, int C);
void cu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int64_t N, int C);
void cu_rope_forward(float *qkv, const float *cos, const float *sin, int B, int T, int NH, int NKV,
                     int hd, int pos0);
void cu_rope_backward(float *dqkv, const float *cos, const float *sin, int B, int T, int NH, int NKV,
                      int hd, int pos0);
void cu_swiglu_forward(float *out, const float *h, int64_t N, int FF);
void cu_swiglu_backward(float *dh, const float *dout, const float *h, int64_t N, int FF);
void cu_geglu_forward(float *out, const float *h, int64_t N, int FF);
void cu_geglu_backward(float *dh, const float *dout, const float *h, int64_t N, int FF);
void cu_gelu_forward(float *out, const float *inp, int64_t n);
void cu_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n);
void cu_scale(float *x, size_t n, float s);
void cu_add(float *out, const float *a, const float *b, size_t n);
double cu_sumsq(const float *x, size_t n);
int cu_nonfinite(const float *x, size_t n);
void cu_sumsq_many(double *sums, const float *const *xs, const size_t *ns, size_t k);
void cu_sumsq_many_dev(double *sums, const float *const *xs, const size_t *ns, size_t k);
int cu_nonfinite_many(const float *const *xs, const size_t *ns, size_t k);
float cu_crossentropy_forward(float *losses, float *lse, const float *logits,
                              const int32_t *targets, int64_t N, int V, int Vp);
void cu_crossentropy_backward(float *logits, const float *lse, const int32_t *targets, int64_t N,
                              int V, int Vp, float dloss);
float cu_loss_mean(const float *losses, size_t n);
void cu_bf16_widen_par(float *x, const uint16_t *h, size_t n);
void cu_bf16_split_par(uint16_t *h, uint16_t *c, const float *x, size_t n);
void cu_encoder_forward_bf16(float *out, const int32_t *inp, const uint16_t *wte,
                             const uint16_t *wpe, int B, int T, int C);
void cu_encoder_backward_wpe(float *dwpe, const float *dout, size_t BT, int T, size_t C);
void cu_encoder_backward_rows(float *dwte, const float *dout, const int32_t *inp, size_t BT,
                              size_t C, size_t v0, size_t nv);
void cu_logsumexp_chunk(float *mx, float *sum, const float *logits, size_t n, size_t nv,
                        int first);
void cu_tied_loss(float *losses, float *lse, const float *lnf, const float *wte,
                  const uint16_t *wte_h, const int32_t *targets, size_t n, size_t C);
void cu_crossentropy_dlogits(float *logits, const float *lse, const int32_t *targets, size_t n,
                             size_t v0, size_t nv, float dloss);

/* attention: NKV key/value heads (GPT-2: NKV = NH); qkv rows (NH + 2 NKV) * hs wide */
void cu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                          int NKV);
void cu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH, int NKV);
void cu_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                int NH, int NKV);
void cu_flash_attention_backward(float *dqkv, float *scratch, const float *dout,
                                 const float *qkv, const float *out, const float *lse, int B,
                                 int T, int C, int NH, int NKV);
/* vmm.cu: the device region as reserved addresses with memory mapped up to what the allocator
 * has reached (false: no virtual memory management here, or HPT_CUDA_VMM=0: cudaMalloc it) */
bool cu_vmm_open(int device, size_t size, char **base);
hpt_status cu_vmm_ensure(size_t end);
size_t cu_vmm_mapped(void);
int cu_vmm_active(void);
void cu_vmm_close(void);
/* colsum.cu: out0 (C) += the sums over N rows of a per-element term of dout (N,C), deterministic
 * and across the GPU: BIAS dout; LAYERNORM dout (inp - mean) rstd into out0 and dout into out1;
 * RMSNORM dout inp rstd. false (nothing done) when C is beyond the scratch: the caller's kernel. */
enum { CU_COLSUM_BIAS = 0, CU_COLSUM_LAYERNORM = 1, CU_COLSUM_RMSNORM = 2 };
bool cu_colsum(int kind, float *out0, float *out1, const float *dout, const float *inp,
               const float *mean, const float *rstd, int64_t N, int64_t C);
/* the document-masked ops of packed examples (attention.cu, pack.cu; docs/packing.md), with
 * the sliding window (window > 0: keys t - window + 1 .. t; 0: none) */
void cu_attention_forward_seg(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH, int NKV, const int32_t *pos, int window);
void cu_attention_backward_seg(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH, int NKV,
                               const int32_t *pos, int window);
void cu_flash_attention_forward_seg(float *out, float *lse, const float *qkv, int B, int T, int C,
                                    int NH, int NKV, const int32_t *pos, int window);
void cu_flash_attention_backward_seg(float *dqkv, float *scratch, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH, int NKV, const int32_t *pos,
                                     int window);
void cu_encoder_forward_pos(float *out, const int32_t *inp, const float *wte, const float *wpe,
                            const int32_t *pos, int B, int T, int C);
void cu_encoder_backward_pos(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             const int32_t *pos, int B, int T, int C);
void cu_encoder_forward_bf16_pos(float *out, const int32_t *inp, const uint16_t *wte,
                                 const uint16_t *wpe, const int32_t *pos, int B, int T, int C);
void cu_rope_forward_pos(float *qkv, const float *cos, const float *sin, int B, int T, int NH,
                         int NKV, int hd, const int32_t *pos);
void cu_rope_backward_pos(float *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                          int NKV, int hd, const int32_t *pos);
/* attention_bf16.cu: the flash pair with bf16 operands on the tensor cores (WMMA), heads of
 * 16, 32, 64, 128 (cu_flash_attention_bf16_heads) */
int cu_flash_attention_bf16_heads(int hd);
void cu_flash_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int C,
                                     int NH, int NKV, const int32_t *pos, int window);
void cu_flash_attention_backward_bf16(float *dqkv, float *scratch, const float *dout,
                                      const float *qkv, const float *out, const float *lse, int B,
                                      int T, int C, int NH, int NKV, const int32_t *pos,
                                      int window);
/* attention_tiled.cu: the flash kernels over tiles, for the head sizes C / NH it is built for
 * (16, 32, 64, 128); cu_flash_attention_forward / _backward take them there */
bool cu_tiled_attention_supported(int C, int NH);
void cu_tiled_flash_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                            int NKV, const int32_t *pos, int window);
void cu_tiled_flash_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *out, const float *lse, int B, int T, int C, int NH, int NKV,
                             const int32_t *pos, int window);
void cu_infer_attend(float *atty, const float *qkv, const float *K, const float *V, int pos0,
                     size_t n, int C, int NH, int NKV, int window);

void cu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
              float beta2, float eps, float wd, float grad_scale, int64_t t);
void cu_adamw_q(hpt_be_param p, const float *g, hpt_be_state m, hpt_be_state v, size_t n,
                float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                int64_t t);
void cu_lion(hpt_be_param p, const float *g, hpt_be_state m, size_t n, float lr, float beta1,
             float beta2, float wd, float grad_scale);
void cu_sgd(hpt_be_param p, const float *g, hpt_be_state m, size_t n, float lr, float momentum,
            float wd, float grad_scale);
void cu_adam_mini(hpt_be_param p, const float *g, hpt_be_state m, float *v, size_t n,
                  size_t block, float lr, float beta1, float beta2, float eps, float wd,
                  float grad_scale, int64_t t);
void cu_q8_map(float map[256], int is_signed);
const int32_t *cu_q8_lut_of(int is_signed);
void cu_q8_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, const float *map);
void cu_q8_dequantize(float *x, const uint8_t *codes, const float *absmax, size_t n,
                      const float *map);

int cu_f16_narrow(uint16_t *h, const float *x, size_t n);
int cu_bf16_narrow(uint16_t *h, const float *x, size_t n);
void cu_f16_widen(float *x, const uint16_t *h, size_t n);
void cu_bf16_widen(float *x, const uint16_t *h, size_t n);
void cu_bf16_split(uint16_t *h, uint16_t *c, const float *x, size_t n);
void cu_infer_embed(float *x, const int32_t *tok, size_t n, int pos0, const float *wte,
                    const int8_t *wte_q, const float *wte_scale, const float *wpe, int C);
void cu_infer_kv_store(float *K, float *V, const float *qkv, int pos0, size_t n, int C, int NH,
                       int NKV);
size_t cu_act_code_bytes(hpt_act_code k, size_t rows, size_t w);
void cu_act_code_store(hpt_act_code k, void *dst, const float *x, size_t rows, size_t w);
void cu_act_code_load(hpt_act_code k, float *x, const void *src, size_t rows, size_t w, int par);
void cu_fit_observe(float *s0, float *s1, const float *w, size_t n, float d);
void cu_fit_velocity(float *s1, const float *s0, size_t n, float cw, float ca);
double cu_predict_adam(float *p, const float *m, const float *v, size_t n, float lr, float wd,
                       float b2k, float bc1, float bc2, float eps);
double cu_predict_linear(float *p, const float *vel, size_t n, float scale);
double cu_add_normal(float *p, size_t n, uint64_t seed, float std);
double cu_adam_step_sumsq(const float *m, const float *v, size_t n, float bc1, float bc2,
                          float eps);
void cu_init_normal(float *x, size_t lo, size_t hi, size_t total, float std, uint64_t key);
void cu_fill(float *x, size_t n, float value);
void cu_dropout_forward(float *y, const float *x, size_t n, float p, uint64_t seed);
void cu_dropout_backward(float *dx, const float *dy, size_t n, float p, uint64_t seed);
void cu_nf4_quantize(unsigned char *dst, const float *x, size_t n);   /* nf4.cu */
void cu_nf4_dequantize(float *x, const unsigned char *src, size_t n);
/* the q8 tables' device copies (optim.cu), released by hpt_cuda_shutdown */
void cu_q8_release(void);
/* A map for an op: map itself when the device can read it, else (pageable host memory holding
 * one of the two maps q8_map makes) that map's device copy (optim.cu). */
const float *cu_dev_map(const float *map);

#endif
