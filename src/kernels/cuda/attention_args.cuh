/* attention_args.cuh: what the tiled flash kernels (attention_tiled.cu, fp32 on the CUDA cores)
 * and the bf16 ones (attention_bf16.cu, tensor cores) are handed: the tensors of one call, the
 * shapes, and the first key a query row sees (causal, packed examples, a sliding window). */
#ifndef HPT_CUDA_ATTENTION_ARGS_CUH
#define HPT_CUDA_ATTENTION_ARGS_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    const float *qkv, *dout, *out, *lse_in;
    float *out_w, *lse, *dqkv, *D;
    int B, T, NH, NKV, group;
    size_t W; /* a qkv row: (NH + 2 NKV) HS */
    size_t C; /* an out / dout row: NH HS */
    float scale;
    const int32_t *pos; /* (B, T) positions in each example, or NULL: causal */
    int window;         /* keys r - window + 1 .. r only (> 0); 0: all */
} fa_args;

/* the first key query row r (< T) of sequence b sees (its example's, its window's); never
 * decreasing in r */
__device__ inline int fa_seg(const fa_args &a, int b, int r) {
    if (r >= a.T) return 0;
    const int s = a.pos ? r - a.pos[(size_t)b * a.T + r] : 0;
    return a.window > 0 ? max(s, r - a.window + 1) : s;
}

/* a call's shapes and scale (1/sqrt(head size)); the tensors are the caller's to set */
static inline fa_args fa_make(const float *qkv, int B, int T, int C, int NH, int NKV,
                              const int32_t *pos, int window) {
    fa_args a = {};
    const int hs = C / NH;
    a.qkv = qkv;
    a.B = B, a.T = T, a.NH = NH, a.NKV = NKV, a.group = NH / NKV;
    a.W = (size_t)(NH + 2 * NKV) * hs;
    a.C = (size_t)NH * hs;
    a.scale = 1.0f / sqrtf((float)hs);
    a.pos = pos, a.window = window;
    return a;
}

/* one thread per (b, t, h): D = dO . O in fp32, one fmaf chain in order from 0 (the chain of
 * the fp32 kernels' every dP; the bf16 kernels' operands unrounded) */
static __global__ void d_fa_D(fa_args a, int HS) {
    const size_t n = (size_t)a.B * a.T * a.NH;
    const size_t id = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= n) return;
    const int h = (int)(id % a.NH);
    const size_t bt = id / a.NH; /* b * T + t */
    const float *d = a.dout + bt * a.C + (size_t)h * HS, *o = a.out + bt * a.C + (size_t)h * HS;
    float acc = 0.0f;
    for (int i = 0; i < HS; i++) acc = fmaf(d[i], o[i], acc);
    const size_t b = bt / a.T, t = bt % a.T;
    a.D[(b * a.NH + h) * a.T + t] = acc;
}

#endif
