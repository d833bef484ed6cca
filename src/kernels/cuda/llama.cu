/* llama.cu: the Llama family's own ops on the GPU, fp32 (kernels/cpu/llama_ops.c's rules):
 * RMSNorm (forward, apply from the saved rstd, backward), rotary embeddings in place on the q and
 * k heads of qkv (rotate_half: element i of a head pairs with i + hd/2; backward the transpose
 * rotation, the sine negated), SwiGLU and Gemma's GeGLU (tanh GELU) on h = [gate | up].
 * RMSNorm's rows run one block per row (a fixed tree); dw one thread per channel over the rows in
 * order (deterministic, no atomics). RoPE and SwiGLU are elementwise: with nvcc's FMA
 * contraction off (cuda.cmake) they compute the CPU's fp32 expressions; expf may differ from
 * glibc's by an ulp. */
#include "kernels/cuda/cu_common.cuh"

#include <math.h>

__global__ void d_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int C, float eps) {
    __shared__ float sh[32];
    const float *x = inp + blockIdx.x * (size_t)C; // (C)
    float ss = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) ss += x[c] * x[c];
    const float rs = 1.0f / sqrtf(cu_block_sum(ss, sh) / (float)C + eps);
    float *o = out + blockIdx.x * (size_t)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = x[c] * rs * w[c];
    if (threadIdx.x == 0) rstd[blockIdx.x] = rs;
}
void cu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t N, int C, float eps) {
    if (N <= 0) return;
    cu_enter();
    d_rmsnorm_forward<<<(unsigned)N, CU_T, 0, cu_stream>>>(out, rstd, inp, w, C, eps);
    CU_LAUNCHED("rmsnorm_forward");
}

__global__ void d_rmsnorm_apply(float *out, const float *inp, const float *w, const float *rstd, int C, size_t n) {
    CU_FOR(i, n) out[i] = inp[i] * rstd[i / (size_t)C] * w[i % (size_t)C];
}
void cu_rmsnorm_apply(float *out, const float *inp, const float *w, const float *rstd, int64_t N, int C) {
    size_t n = (size_t)N * (size_t)C;
    if (!n) return;
    cu_enter();
    d_rmsnorm_apply<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, inp, w, rstd, C, n);
    CU_LAUNCHED("rmsnorm_apply");
}

/* dx_j += r (w_j d_j - x_j r^2 mean_c(w_c d_c x_c)): one block per row */
__global__ void d_rmsnorm_dinp(float *dinp, const float *dout, const float *inp, const float *w,
                               const float *rstd, int C) {
    __shared__ float sh[32];
    const size_t r = blockIdx.x;
    const float *x = inp + r * C, *d = dout + r * C;
    const float rs = rstd[r];
    float dot = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dot += w[c] * d[c] * x[c];
    const float k = cu_block_sum(dot, sh) / (float)C * rs * rs;
    float *dx = dinp + r * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) dx[c] += rs * (w[c] * d[c] - x[c] * k);
}
/* dw_c += sum over rows of d_c x_c r, rows in order (where C is beyond colsum.cu's scratch) */
__global__ void d_rmsnorm_dw(float *dw, const float *dout, const float *inp, const float *rstd, int64_t N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = dw[c];
    for (int64_t i = 0; i < N; i++) s += dout[i * C + c] * inp[i * C + c] * rstd[i];
    dw[c] = s;
}
void cu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                         const float *rstd, int64_t N, int C) {
    if (N <= 0) return;
    cu_enter();
    d_rmsnorm_dinp<<<(unsigned)N, CU_T, 0, cu_stream>>>(dinp, dout, inp, w, rstd, C);
    CU_LAUNCHED("rmsnorm_backward dinp");
    if (!cu_colsum(CU_COLSUM_RMSNORM, dw, NULL, dout, inp, NULL, rstd, N, C)) {
        d_rmsnorm_dw<<<cu_grid((size_t)C, 64), 64, 0, cu_stream>>>(dw, dout, inp, rstd, N, C);
        CU_LAUNCHED("rmsnorm_backward dw");
    }
}

/* one thread per (row, rotated head, pair i < hd/2): the q heads then the k heads of each row */
__global__ void d_rope(float *qkv, const float *cos, const float *sin, int T, int NH, int NKV, int hd,
                       int pos0, float sign, size_t n) {
    const int half = hd / 2, nrot = NH + NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * hd;
    CU_FOR(e, n) {
        const size_t r = e / ((size_t)nrot * half);
        const int rem = (int)(e % ((size_t)nrot * half)), h = rem / half, i = rem % half;
        const int t = (int)(r % (size_t)T);
        const float c = cos[(size_t)(pos0 + t) * half + i], s = sign * sin[(size_t)(pos0 + t) * half + i];
        float *x1 = qkv + r * W + (size_t)h * hd + i, *x2 = x1 + half;
        const float a = *x1, b = *x2;
        *x1 = a * c - b * s;
        *x2 = b * c + a * s;
    }
}
static void rope(float *qkv, const float *cos, const float *sin, int B, int T, int NH, int NKV, int hd,
                 int pos0, float sign) {
    size_t n = (size_t)B * T * (size_t)(NH + NKV) * (size_t)(hd / 2);
    if (!n) return;
    cu_enter();
    d_rope<<<cu_grid(n), CU_T, 0, cu_stream>>>(qkv, cos, sin, T, NH, NKV, hd, pos0, sign, n);
    CU_LAUNCHED("rope");
}
void cu_rope_forward(float *qkv, const float *cos, const float *sin, int B, int T, int NH, int NKV, int hd, int pos0) {
    rope(qkv, cos, sin, B, T, NH, NKV, hd, pos0, 1.0f);
}
void cu_rope_backward(float *dqkv, const float *cos, const float *sin, int B, int T, int NH, int NKV, int hd, int pos0) {
    rope(dqkv, cos, sin, B, T, NH, NKV, hd, pos0, -1.0f);
}

__global__ void d_swiglu_forward(float *out, const float *h, int FF, size_t n) {
    CU_FOR(e, n) {
        const size_t r = e / (size_t)FF, j = e % (size_t)FF;
        const float g = h[r * 2 * FF + j], u = h[r * 2 * FF + FF + j];
        const float sg = 1.0f / (1.0f + expf(-g));
        out[e] = g * sg * u;
    }
}
__global__ void d_swiglu_backward(float *dh, const float *dout, const float *h, int FF, size_t n) {
    CU_FOR(e, n) {
        const size_t r = e / (size_t)FF, j = e % (size_t)FF;
        const float g = h[r * 2 * FF + j], u = h[r * 2 * FF + FF + j], d = dout[e];
        const float sg = 1.0f / (1.0f + expf(-g));
        dh[r * 2 * FF + FF + j] = d * g * sg;
        dh[r * 2 * FF + j] = d * u * sg * (1.0f + g * (1.0f - sg));
    }
}
void cu_swiglu_forward(float *out, const float *h, int64_t N, int FF) {
    size_t n = (size_t)N * (size_t)FF;
    if (!n) return;
    cu_enter();
    d_swiglu_forward<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, h, FF, n);
    CU_LAUNCHED("swiglu_forward");
}
void cu_swiglu_backward(float *dh, const float *dout, const float *h, int64_t N, int FF) {
    size_t n = (size_t)N * (size_t)FF;
    if (!n) return;
    cu_enter();
    d_swiglu_backward<<<cu_grid(n), CU_T, 0, cu_stream>>>(dh, dout, h, FF, n);
    CU_LAUNCHED("swiglu_backward");
}

#define GEGLU_K 0.7978845608028654f
__global__ void d_geglu_forward(float *out, const float *h, int FF, size_t n) {
    CU_FOR(e, n) {
        const size_t r = e / (size_t)FF, j = e % (size_t)FF;
        const float x = h[r * 2 * FF + j], u = h[r * 2 * FF + FF + j];
        out[e] = 0.5f * x * (1.0f + tanhf(GEGLU_K * (x + 0.044715f * x * x * x))) * u;
    }
}
__global__ void d_geglu_backward(float *dh, const float *dout, const float *h, int FF, size_t n) {
    CU_FOR(e, n) {
        const size_t r = e / (size_t)FF, j = e % (size_t)FF;
        const float x = h[r * 2 * FF + j], u = h[r * 2 * FF + FF + j], d = dout[e];
        const float th = tanhf(GEGLU_K * (x + 0.044715f * x * x * x));
        const float dgelu = 0.5f * (1.0f + th) +
                            0.5f * x * (1.0f - th * th) * GEGLU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dh[r * 2 * FF + FF + j] = d * 0.5f * x * (1.0f + th);
        dh[r * 2 * FF + j] = d * u * dgelu;
    }
}
void cu_geglu_forward(float *out, const float *h, int64_t N, int FF) {
    size_t n = (size_t)N * (size_t)FF;
    if (!n) return;
    cu_enter();
    d_geglu_forward<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, h, FF, n);
    CU_LAUNCHED("geglu_forward");
}
void cu_geglu_backward(float *dh, const float *dout, const float *h, int64_t N, int FF) {
    size_t n = (size_t)N * (size_t)FF;
    if (!n) return;
    cu_enter();
    d_geglu_backward<<<cu_grid(n), CU_T, 0, cu_stream>>>(dh, dout, h, FF, n);
    CU_LAUNCHED("geglu_backward");
}
