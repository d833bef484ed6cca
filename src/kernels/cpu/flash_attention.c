/* flash_attention.c: causal multi-head self-attention in memory linear in T (FlashAttention-2's
 * algorithm, fp32, on the CPU). No (T,T) buffer exists: forward walks the keys in tiles of
 * FA_BC with an online softmax (running max m and running sum l per query row, the partial
 * output rescaled by exp(m_old - m_new) when the max grows) and saves only the output and the
 * log-sum-exp of each row, lse = m + log(l), (B,NH,T). Backward recomputes each probability as
 * P = exp(scale q.k - lse) tile by tile and uses D_t = dO_t . O_t for the softmax's
 * Jacobian: dS = P * (dP - D), dP = dO . v.
 *
 * Grouped-query attention (GQA): qkv (B,T,W), W = (NH + 2*NKV)*hd, holds NH query heads, then
 * NKV key heads, then NKV value heads; query head h reads kv head h / G, G = NH/NKV (GPT-2:
 * NKV = NH, W = 3C). Repeated K/V heads are never materialised: the kernels index the shared
 * head.
 *
 * Work and determinism: forward tasks are (b, h, query tile) and write only their rows of out
 * and lse; backward tasks are (b, kv head g) and own dk, dv of head g and dq of the G query
 * heads of its group (dk and dv sum over query rows and the group's heads: the sum runs inside
 * one task, in a fixed order, h ascending, then query tiles; with G = 1 that is GPT-2's order
 * and bits exactly). No task reads what another
 * writes, so the bits do not depend on the schedule or the thread count; the dynamic schedule
 * only balances the causal triangle's unequal tiles. Tiles of FA_BR query rows by FA_BC keys
 * keep a K/V tile in cache while the rows of a query tile use it; per-row scratch lives on the
 * stack (FA_BC floats), so the kernels never allocate. */
#include "kernels/kernels.h"
#include "kernels/cpu/vmath.h"

#include <math.h>
#include <string.h>

#define FA_BR 64 /* query rows per tile */
#define FA_BC 64 /* keys per tile */

void k_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                               int NH, int NKV) {
    const int hs = C / NH;
    const int G = NH / NKV;              /* query heads per kv head */
    const int W = C + 2 * NKV * hs;      /* a row of qkv */
    const int KO = C, VO = C + NKV * hs; /* the k and v parts' offsets in a row */
    const float scale = 1.0f / sqrtf((float)hs);
    const int n_qt = (T + FA_BR - 1) / FA_BR;
#pragma omp parallel for collapse(3) schedule(dynamic) if ((int64_t)B * T * T * C >= 4 * K_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int qt = 0; qt < n_qt; qt++) {
                const int t0 = qt * FA_BR, t1 = t0 + FA_BR < T ? t0 + FA_BR : T;
                const int kh = (h / G) * hs; /* the kv head's column in the k and v parts */
                float m[FA_BR], l[FA_BR]; /* running max and sum of each row */
                float s[FA_BC];           /* one row's scores, then probabilities */
                for (int t = t0; t < t1; t++) {
                    float *o = out + ((int64_t)b * T + t) * C + h * hs; // (hs)
                    memset(o, 0, (size_t)hs * sizeof(float));
                    m[t - t0] = -INFINITY;
                    l[t - t0] = 0.0f;
                }
                for (int k0 = 0; k0 < t1; k0 += FA_BC) {
                    const int k1 = k0 + FA_BC < t1 ? k0 + FA_BC : t1;
                    for (int t = t0 < k0 ? k0 : t0; t < t1; t++) { /* rows t < k0 see no key here */
                        const int nk = (t + 1 < k1 ? t + 1 : k1) - k0; /* causal: keys <= t */
                        const float *q = qkv + ((int64_t)b * T + t) * W + h * hs;
                        float mt = -INFINITY;
                        for (int j = 0; j < nk; j++) {
                            const float *k = qkv + ((int64_t)b * T + k0 + j) * W + KO + kh;
                            float d = 0.0f;
#pragma omp simd reduction(+ : d)
                            for (int i = 0; i < hs; i++) d += q[i] * k[i];
                            s[j] = d * scale;
                            mt = s[j] > mt ? s[j] : mt;
                        }
                        const int r = t - t0;
                        const float mnew = mt > m[r] ? mt : m[r];
                        const float corr = expf(m[r] - mnew); /* 0 on the first tile */
                        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                        for (int j = 0; j < nk; j++) {
                            s[j] = expf(s[j] - mnew);
                            sum += s[j];
                        }
                        l[r] = l[r] * corr + sum;
                        m[r] = mnew;
                        float *o = out + ((int64_t)b * T + t) * C + h * hs;
                        if (corr != 1.0f) {
#pragma omp simd
                            for (int i = 0; i < hs; i++) o[i] *= corr;
                        }
                        for (int j = 0; j < nk; j++) {
                            const float *v = qkv + ((int64_t)b * T + k0 + j) * W + VO + kh;
                            const float p = s[j];
#pragma omp simd
                            for (int i = 0; i < hs; i++) o[i] += p * v[i];
                        }
                    }
                }
                for (int t = t0; t < t1; t++) {
                    const int r = t - t0;
                    float *o = out + ((int64_t)b * T + t) * C + h * hs;
                    const float inv = 1.0f / l[r];
#pragma omp simd
                    for (int i = 0; i < hs; i++) o[i] *= inv;
                    lse[((int64_t)b * NH + h) * T + t] = m[r] + logf(l[r]);
                }
            }
}

void k_flash_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *out, const float *lse, int B, int T, int C, int NH,
                                int NKV) {
    const int hs = C / NH;
    const int G = NH / NKV;
    const int W = C + 2 * NKV * hs;
    const int KO = C, VO = C + NKV * hs;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(dynamic) if ((int64_t)B * T * T * C >= 4 * K_PAR_MIN)
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
                const float *lrow = lse + ((int64_t)b * NH + h) * T; // (T)
                float *D = scratch + ((int64_t)b * NH + h) * T;      // (T) D_t = dO_t . O_t
                for (int t = 0; t < T; t++) {
                    const float *d = dout + ((int64_t)b * T + t) * C + h * hs;
                    const float *o = out + ((int64_t)b * T + t) * C + h * hs;
                    float dd = 0.0f;
#pragma omp simd reduction(+ : dd)
                    for (int i = 0; i < hs; i++) dd += d[i] * o[i];
                    D[t] = dd;
                }
                float p[FA_BC], ds[FA_BC]; /* one row's probabilities and score gradients */
                for (int t0 = 0; t0 < T; t0 += FA_BR) {
                    const int t1 = t0 + FA_BR < T ? t0 + FA_BR : T;
                    for (int k0 = 0; k0 < t1; k0 += FA_BC) {
                        const int k1 = k0 + FA_BC < t1 ? k0 + FA_BC : t1;
                        for (int t = t0 < k0 ? k0 : t0; t < t1; t++) {
                            const int nk = (t + 1 < k1 ? t + 1 : k1) - k0;
                            const float *q = qkv + ((int64_t)b * T + t) * W + h * hs;
                            const float *d = dout + ((int64_t)b * T + t) * C + h * hs;
                            float *dq = dqkv + ((int64_t)b * T + t) * W + h * hs;
                            /* P = exp(scale q.k - lse); dP = dO . v; dS = P (dP - D) */
                            for (int j = 0; j < nk; j++) {
                                const float *k = qkv + ((int64_t)b * T + k0 + j) * W + KO + kh;
                                const float *v = k + (VO - KO);
                                float sq = 0.0f, sd = 0.0f;
#pragma omp simd reduction(+ : sq, sd)
                                for (int i = 0; i < hs; i++) {
                                    sq += q[i] * k[i];
                                    sd += d[i] * v[i];
                                }
                                p[j] = sq * scale - lrow[t];
                                ds[j] = sd;
                            }
                            const float Dt = D[t];
#pragma omp simd
                            for (int j = 0; j < nk; j++) {
                                p[j] = expf(p[j]);
                                ds[j] = p[j] * (ds[j] - Dt) * scale; /* through s = scale q.k */
                            }
                            /* dq_t += dS k_j; dk_j += dS q_t; dv_j += P dO_t */
                            for (int j = 0; j < nk; j++) {
                                const float *k = qkv + ((int64_t)b * T + k0 + j) * W + KO + kh;
                                float *dk = dqkv + ((int64_t)b * T + k0 + j) * W + KO + kh;
                                float *dv = dk + (VO - KO);
                                const float gj = ds[j], pj = p[j];
#pragma omp simd
                                for (int i = 0; i < hs; i++) {
                                    dq[i] += gj * k[i];
                                    dk[i] += gj * q[i];
                                    dv[i] += pj * d[i];
                                }
                            }
                        }
                    }
                }
            }
        }
}
