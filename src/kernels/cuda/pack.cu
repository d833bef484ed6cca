/* pack.cu: packed examples' positions on the GPU (docs/packing.md): GPT-2's encoder reading wpe
 * at each token's position in its example, and RoPE rotating there (pos (B*T) int32, device).
 * The same sums as the CPU's (kernels/cpu/pointwise.c, llama_ops.c): the wpe gradient one
 * thread per channel, rows in order (deterministic, no atomics). */
#include "kernels/cuda/cu_common.cuh"

__global__ void d_encoder_forward_pos(float *out, const int32_t *inp, const float *wte,
                                      const float *wpe, const int32_t *pos, int C, size_t n) {
    CU_FOR(i, n) {
        size_t row = i / (size_t)C, c = i % (size_t)C;
        out[i] = wte[(size_t)inp[row] * C + c] + wpe[(size_t)pos[row] * C + c];
    }
}
void cu_encoder_forward_pos(float *out, const int32_t *inp, const float *wte, const float *wpe,
                            const int32_t *pos, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    cu_enter();
    d_encoder_forward_pos<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, inp, wte, wpe, pos, C, n);
    CU_LAUNCHED("encoder_forward_pos");
}

__global__ void d_encoder_forward_bf16_pos(float *out, const int32_t *inp, const uint16_t *wte,
                                           const uint16_t *wpe, const int32_t *pos, int C,
                                           size_t n) {
    CU_FOR(i, n) {
        size_t row = i / (size_t)C, c = i % (size_t)C;
        out[i] = cu_bf16_widen(wte[(size_t)inp[row] * C + c]) +
                 cu_bf16_widen(wpe[(size_t)pos[row] * C + c]);
    }
}
void cu_encoder_forward_bf16_pos(float *out, const int32_t *inp, const uint16_t *wte,
                                 const uint16_t *wpe, const int32_t *pos, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    cu_enter();
    d_encoder_forward_bf16_pos<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, inp, wte, wpe, pos, C, n);
    CU_LAUNCHED("encoder_forward_bf16_pos");
}

/* one thread per channel, rows in order */
__global__ void d_encoder_backward_pos(float *dwte, float *dwpe, const float *dout,
                                       const int32_t *inp, const int32_t *pos, size_t BT,
                                       size_t C) {
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (size_t i = 0; i < BT; i++) {
        float d = dout[i * C + c];
        if (dwte) dwte[(size_t)inp[i] * C + c] += d; /* NULL: wpe only */
        dwpe[(size_t)pos[i] * C + c] += d;
    }
}
void cu_encoder_backward_pos(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                             const int32_t *pos, int B, int T, int C) {
    if (!B || !T || !C) return;
    cu_enter();
    d_encoder_backward_pos<<<cu_grid((size_t)C, 64), 64, 0, cu_stream>>>(
        dwte, dwpe, dout, inp, pos, (size_t)B * T, (size_t)C);
    CU_LAUNCHED("encoder_backward_pos");
}

/* one thread per (row, rotated head, pair i < hd/2), as llama.cu's d_rope, at pos[row] */
__global__ void d_rope_pos(float *qkv, const float *cos, const float *sin, const int32_t *pos,
                           int NH, int NKV, int hd, float sign, size_t n) {
    const int half = hd / 2, nrot = NH + NKV;
    const size_t W = (size_t)(NH + 2 * NKV) * hd;
    CU_FOR(e, n) {
        const size_t r = e / ((size_t)nrot * half);
        const int rem = (int)(e % ((size_t)nrot * half)), h = rem / half, i = rem % half;
        const int t = pos[r];
        const float c = cos[(size_t)t * half + i], s = sign * sin[(size_t)t * half + i];
        float *x1 = qkv + r * W + (size_t)h * hd + i, *x2 = x1 + half;
        const float a = *x1, b = *x2;
        *x1 = a * c - b * s;
        *x2 = b * c + a * s;
    }
}
static void rope_pos(float *qkv, const float *cos, const float *sin, int B, int T, int NH,
                     int NKV, int hd, const int32_t *pos, float sign) {
    size_t n = (size_t)B * T * (size_t)(NH + NKV) * (size_t)(hd / 2);
    if (!n) return;
    cu_enter();
    d_rope_pos<<<cu_grid(n), CU_T, 0, cu_stream>>>(qkv, cos, sin, pos, NH, NKV, hd, sign, n);
    CU_LAUNCHED("rope_pos");
}
void cu_rope_forward_pos(float *qkv, const float *cos, const float *sin, int B, int T, int NH,
                         int NKV, int hd, const int32_t *pos) {
    rope_pos(qkv, cos, sin, B, T, NH, NKV, hd, pos, 1.0f);
}
void cu_rope_backward_pos(float *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                          int NKV, int hd, const int32_t *pos) {
    rope_pos(dqkv, cos, sin, B, T, NH, NKV, hd, pos, -1.0f);
}
