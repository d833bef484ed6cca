/* flash_attention.c: causal multi-head (grouped-query) self-attention in memory linear in T
 * (FlashAttention-2's algorithm, fp32, on the CPU). Forward walks the keys in tiles of FA_BC
 * with an online softmax and saves only the output and each row's lse, (B,NH,T); backward
 * recomputes P = exp(scale q.k - lse) tile by tile, with D_t = dO_t . O_t, dS = P * (dP - D).
 * qkv (B,T,W) holds NH query, NKV key, NKV value heads; query head h reads kv head h / (NH/NKV),
 * never a repeated copy. The tiles, their register blocks and why: docs/activations.md.
 * Invariants: no (T,T) buffer and no allocation (the tiles are on the stack); a forward task
 * (b, h, query tile) and a backward task (b, kv head) each write only their own outputs and
 * sum in a fixed order (heads, then query rows ascending), so the bits depend neither on the
 * schedule nor on the thread count, and a row's sum is the same in a row block as alone.
 * The bf16 pair (--matmul bf16; docs/design.md, "Matmul precision") is the same code with rnd
 * set: the operands of each product (Q, K, V, dO as their tiles are copied; P and dS once
 * computed in fp32) rounded to bf16, every sum, the softmax statistics and D in fp32. */
#include "kernels/kernels.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/vmath.h"

#include <math.h>
#include <string.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

/* VB: the bytes of the widest vector register the build may use */
#if defined(__AVX512F__)
#define VB 64
#elif defined(__AVX__)
#define VB 32
#else
#define VB 16
#endif
#define VW (VB / 4) /* floats per vector */

#define FA_BR 64 /* query rows per tile */
#define FA_BC 64 /* keys per tile */
#define FA_HC (4 * VW) /* head columns per transposed chunk and per accumulator row */
/* rows whose scores (FA_RB) or P/dS products (FA_AB) are accumulated together, 4 vectors a
 * row: their accumulators fill AVX-512's 32 registers, or 16 (blocking changes no sum's
 * order) */
#ifdef __AVX512F__
#define FA_RB 4
#define FA_AB 4
#else
#define FA_RB 2
#define FA_AB 2
#endif
#define FA_HM 64 /* the widest head whose tiles are copied compact (stack: 4 tiles) */
/* the widest head of the bf16 pair: its tiles are always copied (rounded), on the stack of
 * the task, 4 tiles of FA_BR x FA_HB floats (256 KiB) for heads wider than FA_HM */
#define FA_HB HPT_ATTN_BF16_MAX_HS

/* VW floats as one value (GCC's vector extension): one register; the FA_HC-wide accumulators
 * below are NV of these, so they stay in registers (an array accumulator went to the stack on
 * every add). Each lane's operations are the scalar loop's (a multiply, then an add), so
 * every width gives the same bits. */
typedef float vf __attribute__((vector_size(VB)));
#define NV (FA_HC / VW)
/* v = VW floats at p, and back: unaligned loads and stores through a type that may alias
 * floats (macros: a vector passed by value would change the ABI where the compiler is not
 * told of the ISA; a memcpy became two 16-byte moves and a stalled reload with AVX2) */
typedef float vfu __attribute__((vector_size(VB), aligned(4), may_alias));
#define VLD(v, p) ((v) = *(const vfu *)(const void *)(p))
#define VST(p, v) (*(vfu *)(void *)(p) = (v))
/* REG(v): v is kept in a register from here on (an empty asm the compiler cannot see into):
 * GCC otherwise folds the load into each multiply that reads v, so a register block of R
 * rows loads each vector R times (the backward 2% faster at T=256 without those loads) */
#if defined(__AVX512F__)
#define REG(v) __asm__("" : "+v"(v))
#else
#define REG(v) __asm__("" : "+x"(v))
#endif

/* dst (hc, FA_BC) = the columns [i0, i0 + hc) of nk rows at src (row stride W), transposed;
 * keys nk .. FA_BC - 1 are 0 (their scores are computed and never read). With AVX-512, in
 * 16 x 16 blocks through registers (a copy: the same values). */
static void transpose_tile(float *dst, const float *src, int nk, int i0, int hc, int64_t W) {
#ifdef __AVX512F__
    if (hc % 16 == 0) {
        for (int jb = 0; jb < FA_BC; jb += 16)
            for (int ib = 0; ib < hc; ib += 16) {
                __m512 r[16], a[16], b[16];
                for (int k = 0; k < 16; k++)
                    r[k] = jb + k < nk ? _mm512_loadu_ps(src + (int64_t)(jb + k) * W + i0 + ib)
                                       : _mm512_setzero_ps();
                for (int k = 0; k < 8; k++) { /* pairs of rows interleaved per 128-bit lane */
                    a[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
                    a[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
                }
                for (int k = 0; k < 4; k++) { /* b[4k + m], lane L: column 4L + m, rows 4k.. */
                    b[4 * k] = _mm512_shuffle_ps(a[4 * k], a[4 * k + 2], 0x44);
                    b[4 * k + 1] = _mm512_shuffle_ps(a[4 * k], a[4 * k + 2], 0xEE);
                    b[4 * k + 2] = _mm512_shuffle_ps(a[4 * k + 1], a[4 * k + 3], 0x44);
                    b[4 * k + 3] = _mm512_shuffle_ps(a[4 * k + 1], a[4 * k + 3], 0xEE);
                }
                for (int m = 0; m < 4; m++) { /* lanes gathered: column 4L + m, rows 0..15 */
                    const __m512 c1 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0x88);
                    const __m512 c2 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0x88);
                    const __m512 d1 = _mm512_shuffle_f32x4(b[m], b[4 + m], 0xDD);
                    const __m512 d2 = _mm512_shuffle_f32x4(b[8 + m], b[12 + m], 0xDD);
                    float *d = dst + (int64_t)(ib + m) * FA_BC + jb;
                    _mm512_storeu_ps(d, _mm512_shuffle_f32x4(c1, c2, 0x88));
                    _mm512_storeu_ps(d + 4 * FA_BC, _mm512_shuffle_f32x4(d1, d2, 0x88));
                    _mm512_storeu_ps(d + 8 * FA_BC, _mm512_shuffle_f32x4(c1, c2, 0xDD));
                    _mm512_storeu_ps(d + 12 * FA_BC, _mm512_shuffle_f32x4(d1, d2, 0xDD));
                }
            }
        return;
    }
#endif
    for (int i = 0; i < hc; i++) {
        float *d = dst + i * FA_BC;
        for (int j = 0; j < nk; j++) d[j] = src[(int64_t)j * W + i0 + i];
        for (int j = nk; j < FA_BC; j++) d[j] = 0.0f;
    }
}

/* S[r][j] (+)= sum_{i < hc} x_r[i] * Kt[i][j] for FA_RB rows x_r = x + r * xs and the keys
 * c0 <= j < c0 + VW * NU, each sum in order of i (NU <= 4 a constant: the accumulators stay
 * in registers); z: the sums start from 0 (the first chunk of columns; S is not read: no
 * memset first). */
static inline __attribute__((always_inline)) void scores_rb(float (*S)[FA_BC], int c0,
                                                            const float *x, int64_t xs,
                                                            const float *Kt, int hc,
                                                            const int NU, int z) {
    vf acc[FA_RB][4];
    for (int r = 0; r < FA_RB; r++)
        for (int u = 0; u < NU; u++) {
            if (z) acc[r][u] = (vf){0};
            else VLD(acc[r][u], &S[r][c0 + VW * u]);
        }
    for (int i = 0; i < hc; i++) {
        const float *k = Kt + i * FA_BC + c0;
        vf kv[4];
        for (int u = 0; u < NU; u++) {
            VLD(kv[u], k + VW * u);
            REG(kv[u]);
        }
        for (int r = 0; r < FA_RB; r++) {
            const float xi = x[r * xs + i];
            for (int u = 0; u < NU; u++) acc[r][u] += xi * kv[u];
        }
    }
    for (int r = 0; r < FA_RB; r++)
        for (int u = 0; u < NU; u++) VST(&S[r][c0 + VW * u], acc[r][u]);
}

static void scores_1(float *S, const float *x, const float *Kt, int hc, int z) {
    if (z) memset(S, 0, FA_BC * sizeof(float));
    for (int i = 0; i < hc; i++) {
        const float *k = Kt + i * FA_BC;
        const float xi = x[i];
#pragma omp simd
        for (int j = 0; j < FA_BC; j++) S[j] += xi * k[j];
    }
}

/* S (nr, FA_BC) += rows x (nr rows of stride xs, columns [i0, i0+hc)) @ Kt (hc, FA_BC), or =
 * where i0 = 0; row r needs keys j <= r + dk only (dk: the first row's last key; >= FA_BC - 1:
 * every key): a block stops at the VW-key chunk of its last row's key (the rest of its row
 * holds whatever it held: the callers read keys j <= r + dk only). */
static void scores(float (*S)[FA_BC], const float *x, int64_t xs, int nr, const float *Kt,
                   int i0, int hc, int dk) {
    int r = 0;
    for (; r + FA_RB <= nr; r += FA_RB) {
        const int last = r + FA_RB - 1 + dk, nu = last >= FA_BC - 1 ? FA_BC / VW : last / VW + 1;
        float (*Sr)[FA_BC] = S + r;
        const float *xr = x + r * xs + i0;
        const int z = i0 == 0;
        for (int g = 0; g < nu; g += 4) /* 4 vectors of keys at a time */
            switch (nu - g) {
            case 1: scores_rb(Sr, VW * g, xr, xs, Kt, hc, 1, z); break;
            case 2: scores_rb(Sr, VW * g, xr, xs, Kt, hc, 2, z); break;
            case 3: scores_rb(Sr, VW * g, xr, xs, Kt, hc, 3, z); break;
            default: scores_rb(Sr, VW * g, xr, xs, Kt, hc, 4, z); break;
            }
    }
    for (; r < nr; r++) scores_1(S[r], x + r * xs + i0, Kt, hc, i0 == 0);
}

/* y[0..hc) += sum_j c[j] * x_j[0..hc) for j < n in order, x_j = x + j * xs: one accumulator
 * over the whole sum (in registers for a whole chunk of FA_HC). */
static void axpy_sum(float *y, const float *c, int cs, const float *x, int64_t xs, int n, int hc) {
    if (hc == FA_HC) {
        vf acc[NV];
        for (int u = 0; u < NV; u++) VLD(acc[u], y + VW * u);
        for (int j = 0; j < n; j++) {
            const float cj = c[j * cs], *xj = x + j * xs;
            for (int u = 0; u < NV; u++) {
                vf xv;
                VLD(xv, xj + VW * u);
                acc[u] += cj * xv;
            }
        }
        for (int u = 0; u < NV; u++) VST(y + VW * u, acc[u]);
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

/* FA_AB rows y_r = y + r * ys: y_r[0..FA_HC) += sum_{j < n} c[r * crs + j * cjs] * x_j,
 * x_j = x + j * xs, j ascending; one register accumulator per row and VW columns. */
static void axpy_block(float *y, int64_t ys, const float *c, int crs, int cjs, const float *x,
                       int64_t xs, int n) {
    vf acc[FA_AB][NV];
    for (int r = 0; r < FA_AB; r++)
        for (int u = 0; u < NV; u++) VLD(acc[r][u], y + r * ys + VW * u);
    for (int j = 0; j < n; j++) {
        const float *xj = x + j * xs;
        vf xv[NV];
        for (int u = 0; u < NV; u++) {
            VLD(xv[u], xj + VW * u);
            REG(xv[u]);
        }
        for (int r = 0; r < FA_AB; r++) {
            const float cj = c[r * crs + j * cjs];
            for (int u = 0; u < NV; u++) acc[r][u] += cj * xv[u];
        }
    }
    for (int r = 0; r < FA_AB; r++)
        for (int u = 0; u < NV; u++) VST(y + r * ys + VW * u, acc[r][u]);
}

/* ny rows y_r = y + r * ys (hs columns): y_r += sum_{j < n} c[r * crs + j * cjs] * x_j, j
 * ascending; FA_AB rows at a time where a chunk is FA_HC wide, else row by row. */
static void axpy_rows_n(float *y, int64_t ys, int ny, const float *c, int crs, int cjs,
                        const float *x, int64_t xs, int n, int hs) {
    int r = 0;
    if (hs % FA_HC == 0)
        for (; r + FA_AB <= ny; r += FA_AB)
            for (int i0 = 0; i0 < hs; i0 += FA_HC)
                axpy_block(y + r * ys + i0, ys, c + r * crs, crs, cjs, x + i0, xs, n);
    for (; r < ny; r++) axpy_rows(y + r * ys, c + r * crs, cjs, x, xs, n, hs);
}

/* x rounded to bf16 (nearest even, bf16.h's) and widened back: the bf16 pair's operands */
static inline float rnd16(float x) { return bf16_widen(bf16_rne(x)); }

/* n rows of hs floats at src (row stride stride) as the products read them: copied into buf
 * (rows hs apart) when a head fits FA_HM columns, so the tile's rows share a few pages instead
 * of one page per row (qkv's rows are W floats apart: the TLB, not the arithmetic, bounded the
 * loops); else src itself. *xs: the stride of what is returned. Copies change no value; rnd:
 * always copied (buf holds n x hs), each value rounded to bf16. */
__attribute__((optimize("no-tree-loop-distribute-patterns"))) /* GCC made the copy a call */
static const float *compact(float *buf, const float *src, int n, int64_t stride, int hs,
                            int rnd, int64_t *xs) {
    if (rnd) {
        for (int r = 0; r < n; r++)
            for (int i = 0; i < hs; i++) buf[(int64_t)r * hs + i] = rnd16(src[r * stride + i]);
        *xs = hs;
        return buf;
    }
    if (hs > FA_HM) {
        *xs = stride;
        return src;
    }
    if (hs % VW == 0) /* VW floats at a time, inline (a memcpy call per row cost more) */
        for (int r = 0; r < n; r++)
            for (int i = 0; i < hs; i += VW) {
                vf v;
                VLD(v, src + r * stride + i);
                VST(buf + (int64_t)r * hs + i, v);
            }
    else
        for (int r = 0; r < n; r++)
            memcpy(buf + (int64_t)r * hs, src + r * stride, (size_t)hs * sizeof(float));
    *xs = hs;
    return buf;
}

/* SEG(b, t): the first key query t of row b sees (its example's start, the window's) */
#define SEG(b, t) k_first_key(pos, window, b, T, t)

/* the first key tile any query row t0 .. t1 - 1 of row b sees (0 without pos and window):
 * the tiles before it are skipped, so a window of W keys costs O(T W), not O(T^2) */
static int first_tile(const int32_t *pos, int window, int b, int T, int t0, int t1) {
    int smin = t0;
    for (int t = t0; t < t1; t++) {
        const int s = SEG(b, t);
        smin = s < smin ? s : smin;
    }
    return smin / FA_BC * FA_BC;
}

/* One forward task: query tile qt of head h of row b (the loop body of fwd). Qc, Kc, Vc: the
 * compact tiles, FA_BR x hm floats each (hm >= hs where rnd). */
static inline __attribute__((always_inline)) void
fwd_task(float *out, float *lse, const float *qkv, int b, int h, int qt, int T, int C, int NH,
         int NKV, const int32_t *pos, int window, int rnd, float *Qc, float *Kc, float *Vc) {
    const int hs = C / NH;
    const int G = NH / NKV;              /* query heads per kv head */
    const int W = C + 2 * NKV * hs;      /* a row of qkv */
    const int KO = C, VO = C + NKV * hs; /* the k and v parts' offsets in a row */
    const float scale = 1.0f / sqrtf((float)hs);
    const int t0 = qt * FA_BR, t1 = t0 + FA_BR < T ? t0 + FA_BR : T;
    const int kh = (h / G) * hs; /* the kv head's column in the k and v parts */
    float m[FA_BR], l[FA_BR];    /* running max and sum of each row */
    float S[FA_BR][FA_BC];       /* the tile's scores, then probabilities */
    float Kt[FA_HC * FA_BC];     /* a key tile's chunk, transposed */
    int64_t qs, ks, vs;
    const float *qc = compact(Qc, qkv + ((int64_t)b * T + t0) * W + h * hs, t1 - t0, W, hs, rnd,
                              &qs);
    for (int t = t0; t < t1; t++) {
        float *o = out + ((int64_t)b * T + t) * C + h * hs; // (hs)
        memset(o, 0, (size_t)hs * sizeof(float));
        m[t - t0] = -INFINITY;
        l[t - t0] = 0.0f;
    }
    /* key tiles before every row's first key (example start, window) are skipped */
    for (int k0 = first_tile(pos, window, b, T, t0, t1); k0 < t1; k0 += FA_BC) {
        const int k1 = k0 + FA_BC < t1 ? k0 + FA_BC : t1;
        const int ta = t0 < k0 ? k0 : t0; /* rows t < k0 see no key here */
        const int nr = t1 - ta;
        const float *kbase = qkv + ((int64_t)b * T + k0) * W + KO + kh;
        const float *kt = compact(Kc, kbase, k1 - k0, W, hs, rnd, &ks);
        for (int i0 = 0; i0 < hs; i0 += FA_HC) {
            const int hc = hs - i0 < FA_HC ? hs - i0 : FA_HC;
            transpose_tile(Kt, kt, k1 - k0, i0, hc, ks);
            scores(S, qc + (ta - t0) * qs, qs, nr, Kt, i0, hc, ta - k0);
        }
        const float *vt = compact(Vc, kbase + (VO - KO), k1 - k0, W, hs, rnd, &vs);
        for (int t = ta; t < t1; t++) {
            const int nk = (t + 1 < k1 ? t + 1 : k1) - k0; /* causal: keys <= t */
            float *s = S[t - ta];
            /* keys before the row's first key (example, window): masked (p = 0) */
            const int lo = SEG(b, t) - k0;
            if (lo >= nk) { /* none of this tile's keys is the row's */
                for (int j = 0; j < FA_BC; j++) s[j] = 0.0f;
                continue;
            }
            float mt = -INFINITY;
#pragma omp simd reduction(max : mt)
            for (int j = 0; j < nk; j++) {
                s[j] *= scale;
                mt = s[j] > mt ? s[j] : mt;
            }
            if (lo > 0) { /* the max again over the row's keys only */
                mt = -INFINITY;
                for (int j = 0; j < lo; j++) s[j] = -INFINITY;
                for (int j = lo; j < nk; j++) mt = s[j] > mt ? s[j] : mt;
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
            /* bf16: P's operand rounded after its fp32 sum joined l */
            if (rnd)
                for (int j = 0; j < nk; j++) s[j] = rnd16(s[j]);
            for (int j = nk; j < FA_BC; j++) s[j] = 0.0f; /* keys after t */
            float *o = out + ((int64_t)b * T + t) * C + h * hs;
            if (corr != 1.0f) {
#pragma omp simd
                for (int i = 0; i < hs; i++) o[i] *= corr;
            }
        }
        /* o_t += sum_j p_tj v_j, keys in order, FA_AB rows at a time (a block's sums run to
         * its last row's key) */
        for (int t = ta; t < t1; t += FA_AB) {
            const int te = t + FA_AB < t1 ? t + FA_AB : t1;
            const int nk = (te < k1 ? te : k1) - k0;
            axpy_rows_n(out + ((int64_t)b * T + t) * C + h * hs, C, te - t, S[t - ta], FA_BC, 1,
                        vt, vs, nk, hs);
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

/* The forward, fp32 (rnd 0) or bf16 (rnd 1): one task per (b, h, query tile); the tiles on
 * each task's stack, FA_HM columns wide, or FA_HB for the bf16 pair's wider heads. */
static void fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV,
                const int32_t *pos, int window, int rnd) {
    const int n_qt = (T + FA_BR - 1) / FA_BR;
    if (!rnd || C / NH <= FA_HM) {
#pragma omp parallel for collapse(3) schedule(dynamic) if ((int64_t)B * T * T * C >= 4 * K_PAR_MIN)
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int qt = 0; qt < n_qt; qt++) {
                    float Vc[FA_BC * FA_HM], Kc[FA_BC * FA_HM], Qc[FA_BR * FA_HM]; /* compact */
                    fwd_task(out, lse, qkv, b, h, qt, T, C, NH, NKV, pos, window, rnd, Qc, Kc,
                             Vc);
                }
        return;
    }
#pragma omp parallel for collapse(3) schedule(dynamic) if ((int64_t)B * T * T * C >= 4 * K_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int qt = 0; qt < n_qt; qt++) {
                float Vc[FA_BC * FA_HB], Kc[FA_BC * FA_HB], Qc[FA_BR * FA_HB];
                fwd_task(out, lse, qkv, b, h, qt, T, C, NH, NKV, pos, window, 1, Qc, Kc, Vc);
            }
}

void k_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                               int NH, int NKV) {
    fwd(out, lse, qkv, B, T, C, NH, NKV, NULL, 0, 0);
}

void k_flash_attention_forward_seg(float *out, float *lse, const float *qkv, int B, int T, int C,
                                   int NH, int NKV, const int32_t *pos, int window) {
    fwd(out, lse, qkv, B, T, C, NH, NKV, pos, window, 0);
}

void k_flash_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T,
                                    int C, int NH, int NKV, const int32_t *pos, int window) {
    fwd(out, lse, qkv, B, T, C, NH, NKV, pos, window, 1);
}

/* D[t] = d_t . o_t for T rows of hs floats (row stride C), each summed in order of i, as each
 * score dP = dO . v is (scores_rb, scores_1): a row with one key (t = 0: P = 1, O = v) then has
 * dP - D = 0 and dS = 0 exactly, like the plain kernel's D = sum_j P dP (a vector reduction's
 * partial sums left ~1 ulp there, so T = 1's dq and dk, zero, were rounding noise). Four rows
 * at a time: four independent chains instead of one (at B=4 T=256 C=768, 0.45 ms against one
 * chain's 0.7 and the vector reduction's 0.3). */
static void row_dots(float *D, const float *d, const float *o, int T, int64_t C, int hs) {
    int t = 0;
    for (; t + 4 <= T; t += 4) {
        const float *d0 = d + t * C, *o0 = o + t * C;
        float dd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int i = 0; i < hs; i++)
            for (int r = 0; r < 4; r++) dd[r] += d0[r * C + i] * o0[r * C + i];
        for (int r = 0; r < 4; r++) D[t + r] = dd[r];
    }
    for (; t < T; t++) {
        float dd = 0.0f;
        for (int i = 0; i < hs; i++) dd += d[t * C + i] * o[t * C + i];
        D[t] = dd;
    }
}

/* One backward task: kv head g of row b, over its G query heads (the loop body of bwd). Kc, Vc,
 * Qc, Dc: the compact tiles, FA_BR x hm floats each (hm >= hs where rnd). */
static inline __attribute__((always_inline)) void
bwd_task(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
         const float *lse, int b, int g, int T, int C, int NH, int NKV, const int32_t *pos,
         int window, int rnd, float *Kc, float *Vc, float *Qc, float *Dc) {
    const int hs = C / NH;
    const int G = NH / NKV;
    const int W = C + 2 * NKV * hs;
    const int KO = C, VO = C + NKV * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const int kh = g * hs; /* the kv head's column in the k and v parts */
    for (int t = 0; t < T; t++) {
        float *row = dqkv + ((int64_t)b * T + t) * W;
        memset(row + (int64_t)g * G * hs, 0, (size_t)G * hs * sizeof(float));
        memset(row + KO + kh, 0, (size_t)hs * sizeof(float));
        memset(row + VO + kh, 0, (size_t)hs * sizeof(float));
    }
    for (int h = g * G; h < (g + 1) * G; h++) {
        const float *lrow = lse + ((int64_t)b * NH + h) * T; // (T)
        float *D = scratch + ((int64_t)b * NH + h) * T;      // (T) D_t = dO_t . O_t (fp32)
        row_dots(D, dout + (int64_t)b * T * C + h * hs, out + (int64_t)b * T * C + h * hs, T, C,
                 hs);
        /* a tile's probabilities P and score gradients dS (the scores and dP first) */
        float P[FA_BR][FA_BC], dS[FA_BR][FA_BC];
        float Kt[FA_HC * FA_BC];
        for (int t0 = 0; t0 < T; t0 += FA_BR) {
            const int t1 = t0 + FA_BR < T ? t0 + FA_BR : T;
            int64_t qs, ds_, ks, vs;
            const float *qt = compact(Qc, qkv + ((int64_t)b * T + t0) * W + h * hs, t1 - t0, W,
                                      hs, rnd, &qs);
            const float *dt = compact(Dc, dout + ((int64_t)b * T + t0) * C + h * hs, t1 - t0, C,
                                      hs, rnd, &ds_);
            for (int k0 = first_tile(pos, window, b, T, t0, t1); k0 < t1; k0 += FA_BC) {
                const int k1 = k0 + FA_BC < t1 ? k0 + FA_BC : t1;
                const int ta = t0 < k0 ? k0 : t0, nr = t1 - ta;
                const float *kbase = qkv + ((int64_t)b * T + k0) * W + KO + kh;
                const float *vbase = kbase + (VO - KO);
                float *dkbase = dqkv + ((int64_t)b * T + k0) * W + KO + kh;
                float *dvbase = dkbase + (VO - KO);
                const float *kt = compact(Kc, kbase, k1 - k0, W, hs, rnd, &ks);
                const float *vt = compact(Vc, vbase, k1 - k0, W, hs, rnd, &vs);
                const float *qa = qt + (ta - t0) * qs, *da = dt + (ta - t0) * ds_;
                for (int i0 = 0; i0 < hs; i0 += FA_HC) {
                    const int hc = hs - i0 < FA_HC ? hs - i0 : FA_HC;
                    transpose_tile(Kt, kt, k1 - k0, i0, hc, ks);
                    scores(P, qa, qs, nr, Kt, i0, hc, ta - k0); /* q . k */
                    transpose_tile(Kt, vt, k1 - k0, i0, hc, vs);
                    scores(dS, da, ds_, nr, Kt, i0, hc, ta - k0); /* dO . v */
                }
                /* P = exp(scale q.k - lse); dS = P (dP - D) scale; keys after t: 0 */
                for (int t = ta; t < t1; t++) {
                    const int nk = (t + 1 < k1 ? t + 1 : k1) - k0;
                    float *p = P[t - ta], *ds = dS[t - ta];
                    const float lt = lrow[t], Dt = D[t];
                    int lo = SEG(b, t) - k0; /* keys before the row's first key: 0 */
                    lo = lo < 0 ? 0 : lo > nk ? nk : lo;
                    for (int j = 0; j < lo; j++) p[j] = ds[j] = 0.0f;
#pragma omp simd
                    for (int j = lo; j < nk; j++) {
                        p[j] = expf(p[j] * scale - lt);
                        ds[j] = p[j] * (ds[j] - Dt) * scale; /* through s = scale q.k */
                    }
                    /* bf16: the products' operands, once dS has its fp32 P */
                    if (rnd)
                        for (int j = lo; j < nk; j++) {
                            p[j] = rnd16(p[j]);
                            ds[j] = rnd16(ds[j]);
                        }
                    for (int j = nk; j < FA_BC; j++) p[j] = ds[j] = 0.0f;
                }
                /* dq_t += sum_j dS_tj k_j, keys in order, FA_AB rows at a time (a block's sums
                 * run to its last row's key: the rest have dS = 0) */
                for (int t = ta; t < t1; t += FA_AB) {
                    const int te = t + FA_AB < t1 ? t + FA_AB : t1;
                    const int nk = (te < k1 ? te : k1) - k0;
                    axpy_rows_n(dqkv + ((int64_t)b * T + t) * W + h * hs, W, te - t, dS[t - ta],
                                FA_BC, 1, kt, ks, nk, hs);
                }
                /* dk_j += sum_t dS_tj q_t, dv_j += sum_t P_tj dO_t, rows in order, FA_AB keys
                 * at a time from the block's first key's first row (rows t < j have P = dS =
                 * 0: the causal mask) */
                for (int j = 0; j < k1 - k0; j += FA_AB) {
                    const int nj = k1 - k0 - j < FA_AB ? k1 - k0 - j : FA_AB;
                    const int r0 = k0 + j > ta ? k0 + j - ta : 0; /* first row t >= key */
                    const int64_t rq = ta - t0 + r0; /* row r0's index in the q tile */
                    axpy_rows_n(dkbase + (int64_t)j * W, W, nj, &dS[r0][j], 1, FA_BC,
                                qt + rq * qs, qs, nr - r0, hs);
                    axpy_rows_n(dvbase + (int64_t)j * W, W, nj, &P[r0][j], 1, FA_BC,
                                dt + rq * ds_, ds_, nr - r0, hs);
                }
            }
        }
    }
}

/* The backward, fp32 (rnd 0) or bf16 (rnd 1): one task per (b, kv head), tiles as fwd's. */
static void bwd(float *dqkv, float *scratch, const float *dout, const float *qkv,
                const float *out, const float *lse, int B, int T, int C, int NH, int NKV,
                const int32_t *pos, int window, int rnd) {
    if (!rnd || C / NH <= FA_HM) {
#pragma omp parallel for collapse(2) schedule(dynamic) if ((int64_t)B * T * T * C >= 4 * K_PAR_MIN)
        for (int b = 0; b < B; b++)
            for (int g = 0; g < NKV; g++) {
                float Kc[FA_BC * FA_HM], Vc[FA_BC * FA_HM]; /* compact tiles */
                float Qc[FA_BR * FA_HM], Dc[FA_BR * FA_HM];
                bwd_task(dqkv, scratch, dout, qkv, out, lse, b, g, T, C, NH, NKV, pos, window,
                         rnd, Kc, Vc, Qc, Dc);
            }
        return;
    }
#pragma omp parallel for collapse(2) schedule(dynamic) if ((int64_t)B * T * T * C >= 4 * K_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < NKV; g++) {
            float Kc[FA_BC * FA_HB], Vc[FA_BC * FA_HB], Qc[FA_BR * FA_HB], Dc[FA_BR * FA_HB];
            bwd_task(dqkv, scratch, dout, qkv, out, lse, b, g, T, C, NH, NKV, pos, window, 1,
                     Kc, Vc, Qc, Dc);
        }
}

void k_flash_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *out, const float *lse, int B, int T, int C, int NH,
                                int NKV) {
    bwd(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, NULL, 0, 0);
}

void k_flash_attention_backward_seg(float *dqkv, float *scratch, const float *dout,
                                    const float *qkv, const float *out, const float *lse, int B,
                                    int T, int C, int NH, int NKV, const int32_t *pos, int window) {
    bwd(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, pos, window, 0);
}

void k_flash_attention_backward_bf16(float *dqkv, float *scratch, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH, int NKV, const int32_t *pos,
                                     int window) {
    bwd(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, pos, window, 1);
}

int k_flash_attention_bf16_heads(int hd) { return hd >= 1 && hd <= FA_HB; }
