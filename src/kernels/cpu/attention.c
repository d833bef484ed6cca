/* attention.c: causal multi-head self-attention, the plain reference version: it stores the
 * (T,T) probabilities of every head for backward. Grouped-query attention (GQA): qkv (B,T,W),
 * W = (NH + 2*NKV)*hd, holds NH query heads, then NKV key heads, then NKV value heads; query
 * head h reads kv head h / G, G = NH/NKV (GPT-2: NKV = NH, G = 1, W = 3C). Repeated K/V heads
 * are never materialised: the kernels index the shared head.
 * Work: forward splits over (b, h, t), so every output element has exactly one writer.
 * Backward splits over (b, kv head g): a task owns dk, dv of head g and dq of the G query heads
 * of its group, summing the group's contributions to dk, dv in a fixed order (h ascending, then
 * t, then t2), so the bits do not depend on the thread count; with G = 1 that is GPT-2's order
 * and bits exactly. */
#include "kernels/kernels.h"
#include "kernels/cpu/vmath.h"

#include <math.h>
#include <string.h>

/* SEG(b, t): the first key query t of row b sees (its example's start, the window's) */
#define SEG(b, t) k_first_key(pos, window, b, T, t)

void k_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                         int NKV) {
    k_attention_forward_seg(out, att, qkv, B, T, C, NH, NKV, NULL, 0);
}

void k_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                          const float *att, int B, int T, int C, int NH, int NKV) {
    k_attention_backward_seg(dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, NULL, 0);
}

void k_attention_forward_seg(float *out, float *att, const float *qkv, int B, int T, int C,
                             int NH, int NKV, const int32_t *pos, int window) {
    const int hs = C / NH;
    const int G = NH / NKV;            /* query heads per kv head */
    const int W = C + 2 * NKV * hs;    /* a row of qkv */
    const int KO = C, VO = C + NKV * hs; /* the k and v parts' offsets in a row */
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(3) schedule(static) if ((int64_t)B * T * T * C >= 4 * K_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const int kh = (h / G) * hs;                                  /* kv head's column */
                const float *q = qkv + ((int64_t)b * T + t) * W + h * hs;     // (hs)
                float *a = att + (((int64_t)b * NH + h) * T + t) * T;         // (T) row of probs
                const int s0 = SEG(b, t); /* keys s0 .. t: this example's, up to t */
                float maxv = -INFINITY;
                for (int t2 = 0; t2 < s0; t2++) a[t2] = 0.0f;
                for (int t2 = s0; t2 <= t; t2++) {
                    const float *k = qkv + ((int64_t)b * T + t2) * W + KO + kh;
                    float s = 0.0f;
#pragma omp simd reduction(+ : s)
                    for (int i = 0; i < hs; i++) s += q[i] * k[i];
                    s *= scale;
                    a[t2] = s;
                    if (s > maxv) maxv = s;
                }
                float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                for (int t2 = s0; t2 <= t; t2++) {
                    float e = expf(a[t2] - maxv);
                    a[t2] = e;
                    sum += e;
                }
                float inv = 1.0f / sum;
                for (int t2 = s0; t2 <= t; t2++) a[t2] *= inv;
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
                float *o = out + ((int64_t)b * T + t) * C + h * hs; // (hs)
                for (int i = 0; i < hs; i++) o[i] = 0.0f;
                for (int t2 = s0; t2 <= t; t2++) {
                    const float *v = qkv + ((int64_t)b * T + t2) * W + VO + kh;
                    float p = a[t2];
#pragma omp simd
                    for (int i = 0; i < hs; i++) o[i] += p * v[i];
                }
            }
}

void k_attention_backward_seg(float *dqkv, float *scratch, const float *dout, const float *qkv,
                              const float *att, int B, int T, int C, int NH, int NKV,
                              const int32_t *pos, int window) {
    const int hs = C / NH;
    const int G = NH / NKV;
    const int W = C + 2 * NKV * hs;
    const int KO = C, VO = C + NKV * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    /* dqkv is overwritten: clear this (b, g)'s slices inside the task that owns them */
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)B * T * T * C >= 4 * K_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++) {
            const int kh = g * hs; /* the kv head's column in the k and v parts */
            for (int t = 0; t < T; t++) {
                float *row = dqkv + ((int64_t)b * T + t) * W;
                memset(row + (int64_t)g * G * hs, 0, (size_t)G * hs * sizeof(float));
                memset(row + KO + kh, 0, (size_t)hs * sizeof(float));
                memset(row + VO + kh, 0, (size_t)hs * sizeof(float));
            }
            for (int h = g * G; h < (g + 1) * G; h++) {
                float *datt = scratch + ((int64_t)b * NH + h) * T; // (T) one row at a time
                for (int t = 0; t < T; t++) {
                    const float *a = att + (((int64_t)b * NH + h) * T + t) * T;
                    const float *d = dout + ((int64_t)b * T + t) * C + h * hs;
                    const float *q = qkv + ((int64_t)b * T + t) * W + h * hs;
                    float *dq = dqkv + ((int64_t)b * T + t) * W + h * hs;
                    /* out[t] = sum_t2 a[t2] v[t2]: datt[t2] = dout[t] . v[t2]; dv[t2] += a[t2] dout[t] */
                    const int s0 = SEG(b, t);
                    float dot = 0.0f;
                    for (int t2 = s0; t2 <= t; t2++) {
                        const float *v = qkv + ((int64_t)b * T + t2) * W + VO + kh;
                        float *dv = dqkv + ((int64_t)b * T + t2) * W + VO + kh;
                        float s = 0.0f;
                        float p = a[t2];
#pragma omp simd reduction(+ : s)
                        for (int i = 0; i < hs; i++) {
                            s += d[i] * v[i];
                            dv[i] += p * d[i];
                        }
                        datt[t2] = s;
                        dot += p * s;
                    }
                    /* a = softmax(s): dpre[t2] = a[t2] (datt[t2] - sum_j a[j] datt[j]);
                     * s[t2] = scale q[t] . k[t2]: dq[t] += scale dpre k[t2], dk[t2] += scale dpre q[t] */
                    for (int t2 = s0; t2 <= t; t2++) {
                        float dpre = a[t2] * (datt[t2] - dot) * scale;
                        const float *k = qkv + ((int64_t)b * T + t2) * W + KO + kh;
                        float *dk = dqkv + ((int64_t)b * T + t2) * W + KO + kh;
#pragma omp simd
                        for (int i = 0; i < hs; i++) {
                            dq[i] += dpre * k[i];
                            dk[i] += dpre * q[i];
                        }
                    }
                }
            }
        }
}
