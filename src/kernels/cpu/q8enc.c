/* q8enc.c: 8-bit encoding without gathers (AVX-512 VBMI), the same codes as q8_encode_lut. The
 * nearest-code rule is monotone (code c has a threshold T[c], its smallest float) and the map
 * is piecewise uniform, so per 16 values: the segment from sign and exponent by byte shuffles, a
 * candidate c' by one multiply-add, and code = c' + (x >= T[c' + 1]) by byte-plane lookups.
 * How and why (a gather costs a cycle per element here): docs/optimizers.md, "8-bit states".
 * Invariants: the candidate is code(x) or code(x) - 1 (margin K_ENC_MARGIN, clamped at each
 * segment's ends); a map that does not fit (over 16 segments, a binade over three) or a block
 * with a value not finite or |x| >= 2 keeps the walk; exactness is checked for all 2^32 bit
 * patterns by bench/check_q8_tables.c and around every threshold by tests/test_simd.c. */
#include "kernels/cpu/q8.h"
#include "kernels/cpu/simd.h"

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define VBMI_FN __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi")))
#define K_ENC_MARGIN (1.0 / 64.0)

static float f_of(uint32_t b) {
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* Floats in value order as unsigned integers (-FLT_MAX lowest), and back. */
static uint32_t ord_of(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b >> 31 ? ~b : b | 0x80000000u;
}
static float from_ord(uint32_t o) { return f_of(o >> 31 ? o & 0x7fffffffu : ~o); }

int k_q8_enc_build(k_q8_enc *e, const float map[256], const int32_t *lut) {
    memset(e, 0, sizeof *e);
    /* T[c]: bisection over the finite floats (the code is monotone in their order) */
    float T[257];
    uint32_t lo_ord = ord_of(-FLT_MAX), hi_ord = ord_of(FLT_MAX);
    T[0] = -INFINITY;
    T[256] = INFINITY;
    for (int c = 1; c < 256; c++) {
        if (q8_encode_lut(FLT_MAX, map, lut) < c) return 0;
        uint32_t lo = lo_ord, hi = hi_ord; /* code(hi) >= c */
        if (q8_encode_lut(from_ord(lo), map, lut) >= c) hi = lo;
        while (hi - lo > 1) {
            uint32_t mid = lo + (hi - lo) / 2;
            if (q8_encode_lut(from_ord(mid), map, lut) >= c) hi = mid;
            else lo = mid;
        }
        T[c] = from_ord(hi);
        if (c > 1 && !(T[c] > T[c - 1])) return 0; /* every code reachable */
    }
    /* segments: maximal runs of codes whose spacings agree to 1e-3 */
    int nseg = 0;
    for (int s0 = 0; s0 < 256;) {
        int s1 = s0;
        if (s0 < 255) {
            double sp = (double)map[s0 + 1] - (double)map[s0];
            s1 = s0 + 1;
            while (s1 < 255 && fabs(((double)map[s1 + 1] - (double)map[s1]) - sp) <= 1e-3 * sp) s1++;
        }
        if (nseg == 16) return 0;
        double A = s1 > s0 ? (double)(s1 - s0) / ((double)map[s1] - (double)map[s0]) : 0.0;
        double B = (double)s0 + 0.5 - (double)map[s0] * A;
        e->q[nseg] = T[s0];
        e->a[nseg] = (float)A;
        e->b[nseg] = (float)(B - K_ENC_MARGIN);
        e->lo[nseg] = s0 > 0 ? s0 - 1 : 0;
        e->hi[nseg] = s1;
        nseg++;
        s0 = s1 + 1;
    }
    for (int s = nseg; s < 16; s++) e->q[s] = INFINITY, e->lo[s] = e->hi[s] = 255;
    for (int s = 0; s < 16; s++) e->qn[s] = s < 15 ? e->q[s + 1] : INFINITY;
    /* per sign and exponent below 128: the segment of the binade's lowest value; its highest
     * value must lie in that segment or the next */
    for (int neg = 0; neg < 2; neg++)
        for (uint32_t ex = 0; ex < 128; ex++) {
            uint32_t sign = neg ? 0x80000000u : 0u;
            float lo = f_of(sign | ex << 23 | (neg ? 0x7fffffu : 0u));
            float hi = f_of(sign | ex << 23 | (neg ? 0u : 0x7fffffu));
            int slo = 0, shi = 0;
            for (int k = 1; k < 16; k++) slo += e->q[k] <= lo, shi += e->q[k] <= hi;
            if (shi > slo + 1) return 0;
            e->seg[neg][ex] = (uint8_t)slo;
        }
    /* T[c + 1] at byte c (c' runs over 0..255) */
    for (int c = 0; c < 256; c++) {
        uint32_t bits;
        float t = T[c + 1];
        memcpy(&bits, &t, sizeof bits);
        for (int k = 0; k < 4; k++) e->tp[k][c] = (uint8_t)(bits >> (8 * k));
    }
    e->nseg = nseg;
    return 1;
}

/* The decoder's permutation (simd_avx512.c, load_planes): byte p of the planes' index holds
 * value k_perm[p] = 16 ((p mod 16) / 4) + 4 (p / 16) + p mod 4, so that after the four planes'
 * bytes are unpacked within 128-bit lanes, result r holds values 16r .. 16r + 15 in order.
 * The packing indices: 4 (k_perm[p] mod 32) and 4 (p mod 32), byte 0 of a dword in a pair
 * of vectors. */
#define K_PER_ROW(o) o, o + 4, o + 8, o + 12, o + 64, o + 68, o + 72, o + 76, \
                     o, o + 4, o + 8, o + 12, o + 64, o + 68, o + 72, o + 76
static const uint8_t k_per_idx[64] = {K_PER_ROW(0), K_PER_ROW(16), K_PER_ROW(32), K_PER_ROW(48)};
#define K_NAT_ROW(o) o, o + 4, o + 8, o + 12, o + 16, o + 20, o + 24, o + 28, o + 32, o + 36, \
                     o + 40, o + 44, o + 48, o + 52, o + 56, o + 60
static const uint8_t k_nat_idx[64] = {K_NAT_ROW(0), K_NAT_ROW(64), K_NAT_ROW(0), K_NAT_ROW(64)};

/* The lanes [0, r) of a 16-lane step (r may be <= 0 or > 16). */
static inline __mmask16 lanes16(int r) {
    return r >= 16 ? (__mmask16)0xffff : r <= 0 ? (__mmask16)0 : (__mmask16)((1u << r) - 1u);
}

VBMI_FN int k_q8_encode_vbmi(uint8_t *codes, const float *buf, float inv, int len,
                             const k_q8_enc *e) {
    __m512i t[4][4];
    for (int k = 0; k < 4; k++)
        for (int q = 0; q < 4; q++) t[k][q] = _mm512_loadu_si512(e->tp[k] + 64 * q);
    const __m512i sp0 = _mm512_loadu_si512(e->seg[0]), sp1 = _mm512_loadu_si512(e->seg[0] + 64);
    const __m512i sn0 = _mm512_loadu_si512(e->seg[1]), sn1 = _mm512_loadu_si512(e->seg[1] + 64);
    const __m512 QN = _mm512_loadu_ps(e->qn), A = _mm512_loadu_ps(e->a), B = _mm512_loadu_ps(e->b);
    const __m512i LO = _mm512_loadu_si512(e->lo), HI = _mm512_loadu_si512(e->hi);
    const __m512 vinv = _mm512_set1_ps(inv);
    const __m512i one = _mm512_set1_epi32(1), big = _mm512_set1_epi32(0x80);
    const __mmask64 byte0 = 0x1111111111111111ull;
    /* packing byte 0 of each dword of four vectors, in the planes' order (per: byte p takes
     * value k_perm[p]) and in natural order (nat); the top half of either from vectors 2, 3 */
    const __m512i vper = _mm512_loadu_si512(k_per_idx), vnat = _mm512_loadu_si512(k_nat_idx);
    const __mmask64 per_hi = 0xff00ff00ff00ff00ull, nat_hi = 0xffffffff00000000ull;
    __mmask16 slow = 0;
    for (int j = 0; j < len; j += 64) {
        __m512 x[4];
        __m512i c[4];
        for (int r = 0; r < 4; r++) {
            __mmask16 k = lanes16(len - j - 16 * r);
            x[r] = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, buf + j + 16 * r), vinv);
            __m512i bits = _mm512_castps_si512(x[r]);
            __m512i se = _mm512_srli_epi32(bits, 23); /* sign << 8 | exponent */
            slow |= _mm512_mask_test_epi32_mask(k, se, big); /* |x| >= 2, inf, NaN */
            /* the segment: the binade's lowest value's (by the exponent's low 7 bits), or the next */
            __m512i s = _mm512_mask_blend_epi32(_mm512_movepi32_mask(bits),
                                                _mm512_maskz_permutex2var_epi8(byte0, sp0, se, sp1),
                                                _mm512_maskz_permutex2var_epi8(byte0, sn0, se, sn1));
            s = _mm512_mask_add_epi32(
                s, _mm512_cmp_ps_mask(x[r], _mm512_permutexvar_ps(s, QN), _CMP_GE_OQ), s, one);
            __m512 L = _mm512_fmadd_ps(x[r], _mm512_permutexvar_ps(s, A), _mm512_permutexvar_ps(s, B));
            __m512i ci = _mm512_cvt_roundps_epi32(L, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
            ci = _mm512_max_epi32(ci, _mm512_permutexvar_epi32(s, LO));
            c[r] = _mm512_min_epi32(ci, _mm512_permutexvar_epi32(s, HI));
        }
        /* T[c' + 1] of the 64 values, by the planes */
        __m512i P = _mm512_mask_blend_epi8(per_hi, _mm512_permutex2var_epi8(c[0], vper, c[1]),
                                           _mm512_permutex2var_epi8(c[2], vper, c[3]));
        __mmask64 top = _mm512_movepi8_mask(P);
        __m512i p[4];
        for (int k = 0; k < 4; k++)
            p[k] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t[k][0], P, t[k][1]),
                                          _mm512_permutex2var_epi8(t[k][2], P, t[k][3]));
        __m512i lo01 = _mm512_unpacklo_epi8(p[0], p[1]), hi01 = _mm512_unpackhi_epi8(p[0], p[1]);
        __m512i lo23 = _mm512_unpacklo_epi8(p[2], p[3]), hi23 = _mm512_unpackhi_epi8(p[2], p[3]);
        __m512i T[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                        _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
        for (int r = 0; r < 4; r++)
            c[r] = _mm512_mask_add_epi32(
                c[r], _mm512_cmp_ps_mask(x[r], _mm512_castsi512_ps(T[r]), _CMP_GE_OQ), c[r], one);
        __m512i out = _mm512_mask_blend_epi8(nat_hi, _mm512_permutex2var_epi8(c[0], vnat, c[1]),
                                             _mm512_permutex2var_epi8(c[2], vnat, c[3]));
        int rem = len - j;
        __mmask64 k64 = rem >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << rem) - 1);
        _mm512_mask_storeu_epi8(codes + j, k64, out);
    }
    return slow != 0;
}
