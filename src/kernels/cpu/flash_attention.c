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
 * one task, in a fixed order, h ascending, then query rows ascending; with G = 1 that is
 * GPT-2's order and bits exactly). No task reads what another writes, so the bits do not
 * depend on the schedule or the thread count; the dynamic schedule only balances the causal
 * triangle's unequal tiles.
 *
 * Speed: the score tiles S = Q K^T (and dP = dO V^T in backward) are small GEMMs, FA_BR query
 * rows by FA_BC keys. Each is computed from a transposed copy of the key (value) tile, FA_HC
 * head columns at a time, as FA_RB rows x FA_BC keys of independent accumulators: a score is
 * the in-order sum over the head's columns (no horizontal reduction per score, which cost
 * more than the products). The products with P and dS (O += P V, dQ += dS K, dK += dS^T Q,
 * dV += P^T dO) keep each output row in a FA_HC-wide accumulator over its whole sum, in the
 * order the sum had before (keys ascending for a row of O or dQ, query rows ascending for a
 * row of dK or dV). Heads up to FA_HM wide have their tiles' rows copied compact first
 * (qkv's rows are pages apart). The tiles live on the stack (80 KiB forward, 112 KiB
 * backward), so the kernels never allocate; the OpenMP threads' stacks are megabytes. */
#include "kernels/kernels.h"
#include "kernels/cpu/vmath.h"

#include <math.h>
#include <string.h>

#define FA_BR 64 /* query rows per tile */
#define FA_BC 64 /* keys per tile */
#define FA_HC 64 /* head columns per transposed chunk and per accumulator */
#define FA_RB 4  /* query rows whose scores are accumulated together */
#define FA_HM 64 /* the widest head whose tiles are copied compact (stack: 4 tiles) */

/* 16 floats as one value (GCC's vector extension): a zmm register with AVX-512, two ymm with
 * AVX2; the FA_HC-wide accumulators below are FA_HC / 16 of these, so they stay in registers
 * (an array accumulator went to the stack on every add). Each lane's operations are the
 * scalar loop's (a multiply, then an add), so both paths give the same bits. */
typedef float v16 __attribute__((vector_size(64)));
#define NV (FA_HC / 16)
/* v = 16 floats at p, and back (unaligned; macros: a 64-byte vector passed by value would
 * change the ABI where the compiler is not told of AVX-512) */
#define VLD(v, p) memcpy(&(v), (p), sizeof(v16))
#define VST(p, v) memcpy((p), &(v), sizeof(v16))

/* dst (hc, FA_BC) = the columns [i0, i0 + hc) of nk rows at src (row stride W), transposed;
 * keys nk .. FA_BC - 1 are 0 (their scores are computed and never read). */
static void transpose_tile(float *dst, const float *src, int nk, int i0, int hc, int64_t W) {
    for (int i = 0; i < hc; i++) {
        float *d = dst + i * FA_BC;
        for (int j = 0; j < nk; j++) d[j] = src[(int64_t)j * W + i0 + i];
        for (int j = nk; j < FA_BC; j++) d[j] = 0.0f;
    }
}

/* S[r][j] += sum_{i < hc} x_r[i] * Kt[i][j] for FA_RB rows x_r = x + r * xs, each sum in
 * order of i. */
static void scores_rb(float (*S)[FA_BC], const float *x, int64_t xs, const float *Kt, int hc) {
    v16 acc[FA_RB][FA_BC / 16];
    for (int r = 0; r < FA_RB; r++)
        for (int u = 0; u < FA_BC / 16; u++) VLD(acc[r][u], &S[r][16 * u]);
    for (int i = 0; i < hc; i++) {
        const float *k = Kt + i * FA_BC;
        v16 kv[FA_BC / 16];
        for (int u = 0; u < FA_BC / 16; u++) VLD(kv[u], k + 16 * u);
        for (int r = 0; r < FA_RB; r++) {
            const float xi = x[r * xs + i];
            for (int u = 0; u < FA_BC / 16; u++) acc[r][u] += xi * kv[u];
        }
    }
    for (int r = 0; r < FA_RB; r++)
        for (int u = 0; u < FA_BC / 16; u++) VST(&S[r][16 * u], acc[r][u]);
}

static void scores_1(float *S, const float *x, const float *Kt, int hc) {
    for (int i = 0; i < hc; i++) {
        const float *k = Kt + i * FA_BC;
        const float xi = x[i];
#pragma omp simd
        for (int j = 0; j < FA_BC; j++) S[j] += xi * k[j];
    }
}

/* S (nr, FA_BC) += rows x (nr rows of stride xs, columns [i0, i0+hc)) @ Kt (hc, FA_BC). */
static void scores(float (*S)[FA_BC], const float *x, int64_t xs, int nr, const float *Kt,
                   int i0, int hc) {
    int r = 0;
    for (; r + FA_RB <= nr; r += FA_RB) scores_rb(S + r, x + r * xs + i0, xs, Kt, hc);
    for (; r < nr; r++) scores_1(S[r], x + r * xs + i0, Kt, hc);
}

/* y[0..hc) += sum_j c[j] * x_j[0..hc) for j < n in order, x_j = x + j * xs: one accumulator
 * over the whole sum (in registers for a whole chunk of FA_HC). */
static void axpy_sum(float *y, const float *c, int cs, const float *x, int64_t xs, int n, int hc) {
    if (hc == FA_HC) {
        v16 acc[NV];
        for (int u = 0; u < NV; u++) VLD(acc[u], y + 16 * u);
        for (int j = 0; j < n; j++) {
            const float cj = c[j * cs], *xj = x + j * xs;
            for (int u = 0; u < NV; u++) {
                v16 x16;
                VLD(x16, xj + 16 * u);
                acc[u] += cj * x16;
            }
        }
        for (int u = 0; u < NV; u++) VST(y + 16 * u, acc[u]);
        return;
    }
    float acc[FA_HC];
    for (int i = 0; i < hc; i++) acc[i] = y[i];
    for (int j = 0; j < n; j++) {
        const float cj = c[j * cs], *xj = x + j * xs;
#pragma omp simd
        for (int i = 0; i < hc; i++) acc[i] += cj * xj[i];
    }
    for (int i = 0; i < hc; i++) y[i] = acc[i];
}

static void axpy_rows(float *y, const float *c, int cs, const float *x, int64_t xs, int n,
                      int hs) {
    for (int i0 = 0; i0 < hs; i0 += FA_HC) {
        if (hs - i0 >= FA_HC) axpy_sum(y + i0, c, cs, x + i0, xs, n, FA_HC);
        else axpy_sum(y + i0, c, cs, x + i0, xs, n, hs - i0);
    }
}

/* n rows of hs floats at src (row stride stride) as the products read them: copied into buf
 * (rows hs apart) when a head fits FA_HM columns, so the tile's rows share a few pages instead
 * of one page per row (qkv's rows are W floats apart: the TLB, not the arithmetic, bounded the
 * loops); else src itself. *xs: the stride of what is returned. Copies change no value. */
static const float *compact(float *buf, const float *src, int n, int64_t stride, int hs,
                            int64_t *xs) {
    if (hs > FA_HM) {
        *xs = stride;
        return src;
    }
    for (int r = 0; r < n; r++) memcpy(buf + (int64_t)r * hs, src + r * stride, (size_t)hs * sizeof(float));
    *xs = hs;
    return buf;
}

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
                float m[FA_BR], l[FA_BR];    /* running max and sum of each row */
                float S[FA_BR][FA_BC];       /* the tile's scores, then probabilities */
                float Kt[FA_HC * FA_BC];     /* a key tile's chunk, transposed */
                float Vc[FA_BC * FA_HM], Kc[FA_BC * FA_HM], Qc[FA_BR * FA_HM]; /* compact */
                int64_t qs, ks, vs;
                const float *qc = compact(Qc, qkv + ((int64_t)b * T + t0) * W + h * hs, t1 - t0,
                                          W, hs, &qs);
                for (int t = t0; t < t1; t++) {
                    float *o = out + ((int64_t)b * T + t) * C + h * hs; // (hs)
                    memset(o, 0, (size_t)hs * sizeof(float));
                    m[t - t0] = -INFINITY;
                    l[t - t0] = 0.0f;
                }
                for (int k0 = 0; k0 < t1; k0 += FA_BC) {
                    const int k1 = k0 + FA_BC < t1 ? k0 + FA_BC : t1;
                    const int ta = t0 < k0 ? k0 : t0; /* rows t < k0 see no key here */
                    const int nr = t1 - ta;
                    const float *kbase = qkv + ((int64_t)b * T + k0) * W + KO + kh;
                    const float *kt = compact(Kc, kbase, k1 - k0, W, hs, &ks);
                    memset(S, 0, (size_t)nr * sizeof S[0]);
                    for (int i0 = 0; i0 < hs; i0 += FA_HC) {
                        const int hc = hs - i0 < FA_HC ? hs - i0 : FA_HC;
                        transpose_tile(Kt, kt, k1 - k0, i0, hc, ks);
                        scores(S, qc + (ta - t0) * qs, qs, nr, Kt, i0, hc);
                    }
                    const float *vt = compact(Vc, kbase + (VO - KO), k1 - k0, W, hs, &vs);
                    for (int t = ta; t < t1; t++) {
                        const int nk = (t + 1 < k1 ? t + 1 : k1) - k0; /* causal: keys <= t */
                        float *s = S[t - ta];
                        float mt = -INFINITY;
                        for (int j = 0; j < nk; j++) {
                            s[j] *= scale;
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
                        /* o += sum_j p_j v_j, keys in order */
                        axpy_rows(o, s, 1, vt, vs, nk, hs);
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
                /* a tile's probabilities P and score gradients dS (the scores and dP first) */
                float P[FA_BR][FA_BC], dS[FA_BR][FA_BC];
                float Kt[FA_HC * FA_BC];
                float Kc[FA_BC * FA_HM], Vc[FA_BC * FA_HM]; /* compact tiles */
                float Qc[FA_BR * FA_HM], Dc[FA_BR * FA_HM];
                for (int t0 = 0; t0 < T; t0 += FA_BR) {
                    const int t1 = t0 + FA_BR < T ? t0 + FA_BR : T;
                    int64_t qs, ds_, ks, vs;
                    const float *qt = compact(Qc, qkv + ((int64_t)b * T + t0) * W + h * hs,
                                              t1 - t0, W, hs, &qs);
                    const float *dt = compact(Dc, dout + ((int64_t)b * T + t0) * C + h * hs,
                                              t1 - t0, C, hs, &ds_);
                    for (int k0 = 0; k0 < t1; k0 += FA_BC) {
                        const int k1 = k0 + FA_BC < t1 ? k0 + FA_BC : t1;
                        const int ta = t0 < k0 ? k0 : t0, nr = t1 - ta;
                        const float *kbase = qkv + ((int64_t)b * T + k0) * W + KO + kh;
                        const float *vbase = kbase + (VO - KO);
                        float *dkbase = dqkv + ((int64_t)b * T + k0) * W + KO + kh;
                        float *dvbase = dkbase + (VO - KO);
                        const float *kt = compact(Kc, kbase, k1 - k0, W, hs, &ks);
                        const float *vt = compact(Vc, vbase, k1 - k0, W, hs, &vs);
                        const float *qa = qt + (ta - t0) * qs, *da = dt + (ta - t0) * ds_;
                        memset(P, 0, (size_t)nr * sizeof P[0]);
                        memset(dS, 0, (size_t)nr * sizeof dS[0]);
                        for (int i0 = 0; i0 < hs; i0 += FA_HC) {
                            const int hc = hs - i0 < FA_HC ? hs - i0 : FA_HC;
                            transpose_tile(Kt, kt, k1 - k0, i0, hc, ks);
                            scores(P, qa, qs, nr, Kt, i0, hc); /* q . k */
                            transpose_tile(Kt, vt, k1 - k0, i0, hc, vs);
                            scores(dS, da, ds_, nr, Kt, i0, hc); /* dO . v */
                        }
                        /* P = exp(scale q.k - lse); dS = P (dP - D) scale; keys after t: 0 */
                        for (int t = ta; t < t1; t++) {
                            const int nk = (t + 1 < k1 ? t + 1 : k1) - k0;
                            float *p = P[t - ta], *ds = dS[t - ta];
                            const float lt = lrow[t], Dt = D[t];
#pragma omp simd
                            for (int j = 0; j < nk; j++) {
                                p[j] = expf(p[j] * scale - lt);
                                ds[j] = p[j] * (ds[j] - Dt) * scale; /* through s = scale q.k */
                            }
                            for (int j = nk; j < FA_BC; j++) p[j] = ds[j] = 0.0f;
                            /* dq_t += sum_j dS_tj k_j, keys in order */
                            float *dq = dqkv + ((int64_t)b * T + t) * W + h * hs;
                            axpy_rows(dq, ds, 1, kt, ks, nk, hs);
                        }
                        /* dk_j += sum_t dS_tj q_t, dv_j += sum_t P_tj dO_t, rows in order
                         * (rows t < j have P = dS = 0: the causal mask) */
                        for (int j = 0; j < k1 - k0; j++) {
                            const int r0 = k0 + j > ta ? k0 + j - ta : 0; /* first row t >= key */
                            const int64_t rq = ta - t0 + r0; /* row r0's index in the q tile */
                            axpy_rows(dkbase + (int64_t)j * W, &dS[r0][j], FA_BC, qt + rq * qs,
                                      qs, nr - r0, hs);
                            axpy_rows(dvbase + (int64_t)j * W, &P[r0][j], FA_BC, dt + rq * ds_,
                                      ds_, nr - r0, hs);
                        }
                    }
                }
            }
        }
}
