/* simd_avx512.c: the optimizers' block helpers in AVX-512 (the dispatch and its contract:
 * simd.h; the CPU's level is read here, for both vector files): 8-bit decoding by byte-plane
 * shuffles (VBMI) or a gather, encoding through the step table (simd.h), bf16 widening and
 * rounding (nearest even, stochastic: splitmix64 of (seed, index)). docs/optimizers.md, "8-bit
 * states".
 * Invariants: each function is the portable helper of q8.h or bf16.h 16 lanes at a time, with
 * the same operations in the same order, so the same bits (16 values with an infinity or NaN
 * take q8_encode_lut's walk, ties to the lower code, comparisons ordered as C's); tails use
 * masked loads and stores, never touching memory past len; compiled with target attributes and
 * run only where k_simd_avx512 says the CPU has F, BW, DQ and VL. */
#include "kernels/cpu/simd.h"

#include <immintrin.h>

#include <stdlib.h>
#include <string.h>

#define AVX512_FN __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define VBMI_FN __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi")))

int k_simd_avx512, k_simd_vbmi, k_simd_avx2;
static int g_cpu_avx512, g_cpu_vbmi, g_cpu_avx2;

__attribute__((constructor)) static void simd_detect(void) {
    __builtin_cpu_init();
    g_cpu_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    g_cpu_vbmi = g_cpu_avx512 && __builtin_cpu_supports("avx512vbmi");
    g_cpu_avx2 = __builtin_cpu_supports("avx2");
    const char *env = getenv("HPT_SIMD");
    static const char *const names[4] = {"portable", "avx512", "avx512-novbmi", "avx2"};
    int level = -1;
    for (int l = 0; env && l < 4; l++)
        if (!strcmp(env, names[l])) level = l;
    k_simd_force(level);
}

int k_simd_force(int level) {
    int cpu = level < 0 || level == 1;
    k_simd_avx512 = (cpu || level == 2) && g_cpu_avx512;
    k_simd_vbmi = cpu && g_cpu_vbmi;
    k_simd_avx2 = (cpu || level == 3) && g_cpu_avx2 && !k_simd_avx512;
    if (level < 0) return 1;
    return level == 0 ? 1 : level == 3 ? k_simd_avx2 : k_simd_avx512;
}

void k_q8_planes_of(k_q8_planes *pl, const float *map) {
    for (int e = 0; e < 256; e++) {
        uint32_t bits;
        memcpy(&bits, &map[e], sizeof bits);
        for (int k = 0; k < 4; k++) pl->b[k][e] = (uint8_t)(bits >> (8 * k));
    }
}

/* The lanes [0, len - j) of a 16-lane step at j (all 16 when len - j >= 16). */
static inline __mmask16 tail_mask(int len, int j) {
    int r = len - j;
    return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1u);
}

/* Decoding by byte planes, 64 codes at a time. The codes are first permuted so that the
 * unpack network (bytes of planes 0, 1 and 2, 3 into 16-bit pairs, pairs into dwords, each
 * within 128-bit lanes) leaves value 16r + 4L + i in lane L, dword i of result r: result r
 * is then values 16r .. 16r + 15 in order. */
VBMI_FN static void load_planes(float *buf, const uint8_t *codes, float absmax, int len,
                                const k_q8_planes *pl) {
    __m512i t[4][4]; /* plane k's entries 64q .. 64q + 63 */
    for (int k = 0; k < 4; k++)
        for (int q = 0; q < 4; q++) t[k][q] = _mm512_loadu_si512(pl->b[k] + 64 * q);
    /* perm[q] = 16 ((q mod 16) / 4) + 4 (q / 16) + q mod 4 */
    static const uint8_t perm[64] = {
        0, 1, 2, 3, 16, 17, 18, 19, 32, 33, 34, 35, 48, 49, 50, 51,
        4, 5, 6, 7, 20, 21, 22, 23, 36, 37, 38, 39, 52, 53, 54, 55,
        8, 9, 10, 11, 24, 25, 26, 27, 40, 41, 42, 43, 56, 57, 58, 59,
        12, 13, 14, 15, 28, 29, 30, 31, 44, 45, 46, 47, 60, 61, 62, 63,
    };
    const __m512i vperm = _mm512_loadu_si512(perm);
    const __m512 a = _mm512_set1_ps(absmax);
    for (int j = 0; j < len; j += 64) {
        int r = len - j;
        __mmask64 k64 = r >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << r) - 1);
        __m512i c = _mm512_permutexvar_epi8(vperm, _mm512_maskz_loadu_epi8(k64, codes + j));
        __mmask64 top = _mm512_movepi8_mask(c);
        __m512i p[4];
        for (int k = 0; k < 4; k++)
            p[k] = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(t[k][0], c, t[k][1]),
                                          _mm512_permutex2var_epi8(t[k][2], c, t[k][3]));
        __m512i lo01 = _mm512_unpacklo_epi8(p[0], p[1]), hi01 = _mm512_unpackhi_epi8(p[0], p[1]);
        __m512i lo23 = _mm512_unpacklo_epi8(p[2], p[3]), hi23 = _mm512_unpackhi_epi8(p[2], p[3]);
        __m512i v[4] = {_mm512_unpacklo_epi16(lo01, lo23), _mm512_unpackhi_epi16(lo01, lo23),
                        _mm512_unpacklo_epi16(hi01, hi23), _mm512_unpackhi_epi16(hi01, hi23)};
        for (int q = 0; q < 4 && 16 * q < r; q++)
            _mm512_mask_storeu_ps(buf + j + 16 * q, tail_mask(r, 16 * q),
                                  _mm512_mul_ps(_mm512_castsi512_ps(v[q]), a));
    }
}

AVX512_FN void k_q8_load_avx512(float *buf, const uint8_t *codes, float absmax, int len,
                                const float *map, const k_q8_planes *pl) {
    if (pl && k_simd_vbmi) {
        load_planes(buf, codes, absmax, len, pl);
        return;
    }
    const __m512 a = _mm512_set1_ps(absmax);
    for (int j = 0; j < len; j += 16) {
        __mmask16 k = tail_mask(len, j);
        __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(k, codes + j));
        __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), k, c, map, 4);
        _mm512_mask_storeu_ps(buf + j, k, _mm512_mul_ps(v, a));
    }
}

/* The codes of x (16 lanes) by q8_encode_lut's walk: three gathers. */
AVX512_FN static inline __m512i walk16(__m512 x, const float *map, const int32_t *lut) {
    const __m512i one = _mm512_set1_epi32(1), top = _mm512_set1_epi32(255);
    __m512i key = _mm512_srli_epi32(_mm512_castps_si512(x), 16);
    __m512i pos0 = _mm512_i32gather_epi32(key, lut, 4);
    __m512i p1 = _mm512_min_epi32(_mm512_add_epi32(pos0, one), top);
    __m512 m1 = _mm512_i32gather_ps(p1, map, 4);
    /* pos += pos < 255 && map[pos + 1] <= x */
    __mmask16 step = _mm512_cmplt_epi32_mask(pos0, top) & _mm512_cmp_ps_mask(m1, x, _CMP_LE_OQ);
    __m512i pos = _mm512_mask_add_epi32(pos0, step, pos0, one);
    __m512i up = _mm512_min_epi32(_mm512_add_epi32(pos, one), top);
    /* map[pos]: m1 where stepped, else map[pos0]; map[up]: m1 where not stepped (pos0 == 255
     * included: up = 255 = p1), else map[min(pos0 + 2, 255)] */
    __m512 mp = _mm512_mask_i32gather_ps(m1, (__mmask16)~step, pos0, map, 4);
    __m512 mu = _mm512_mask_i32gather_ps(m1, step, up, map, 4);
    __mmask16 nearer_up = _mm512_cmp_ps_mask(_mm512_sub_ps(mu, x), _mm512_sub_ps(x, mp), _CMP_LT_OQ);
    return _mm512_mask_blend_epi32(nearer_up, pos, up);
}

AVX512_FN float k_q8_store_avx512(uint8_t *codes, const float *buf, int len, const float *map,
                                  const int32_t *lut, const uint32_t *thr, const k_q8_enc *enc) {
    const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512 mxv = _mm512_setzero_ps();
    for (int j = 0; j < len; j += 16) {
        __m512 x = _mm512_maskz_loadu_ps(tail_mask(len, j), buf + j); /* zeros: no effect */
        /* max(|x|, mx) returns mx when |x| is NaN: fmaxf's rule */
        mxv = _mm512_max_ps(_mm512_and_ps(x, absmask), mxv);
    }
    float mx = _mm512_reduce_max_ps(mxv); /* exact: max does not round */
    float inv = mx > 0.0f ? 1.0f / mx : 0.0f;
    const __m512 vinv = _mm512_set1_ps(inv);
    int by_enc = enc && k_simd_vbmi;
    if (by_enc && !k_q8_encode_vbmi(codes, buf, inv, len, enc)) return mx;
    if (!thr || by_enc) { /* by_enc: the block has a value that is not finite */
        for (int j = 0; j < len; j += 16) {
            __mmask16 k = tail_mask(len, j);
            __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, buf + j), vinv);
            _mm_mask_storeu_epi8(codes + j, k, _mm512_cvtepi32_epi8(walk16(x, map, lut)));
        }
        return mx;
    }
    /* the step table: code = c0 + (low >= t ? d : 0); a slow entry anywhere in the block (an
     * infinity or NaN among its values) sends the whole block to the walk afterwards, so the
     * loop has no branch on gathered data and its gathers overlap */
    const __m512i low16 = _mm512_set1_epi32(0xffff), slow = _mm512_set1_epi32(2);
    __mmask16 any_slow = 0;
    for (int j = 0; j < len; j += 16) {
        __mmask16 k = tail_mask(len, j);
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, buf + j), vinv);
        __m512i bits = _mm512_castps_si512(x);
        __m512i e = _mm512_i32gather_epi32(_mm512_srli_epi32(bits, 16), (const int *)thr, 4);
        __m512i d = _mm512_srai_epi32(e, 24);
        any_slow |= _mm512_mask_cmpeq_epi32_mask(k, d, slow);
        __m512i c0 = _mm512_and_si512(e, _mm512_set1_epi32(0xff));
        __m512i t = _mm512_and_si512(_mm512_srli_epi32(e, 8), low16);
        __mmask16 ge = _mm512_cmpge_epu32_mask(_mm512_and_si512(bits, low16), t);
        __m512i code = _mm512_mask_add_epi32(c0, ge, c0, d);
        _mm_mask_storeu_epi8(codes + j, k, _mm512_cvtepi32_epi8(code));
    }
    if (any_slow)
        for (int j = 0; j < len; j += 16) {
            __mmask16 k = tail_mask(len, j);
            __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, buf + j), vinv);
            _mm_mask_storeu_epi8(codes + j, k, _mm512_cvtepi32_epi8(walk16(x, map, lut)));
        }
    return mx;
}

AVX512_FN void k_bf16_load_avx512(float *buf, const uint16_t *h, const uint16_t *c, int len) {
    for (int j = 0; j < len; j += 16) {
        __mmask16 k = tail_mask(len, j);
        __m512 x = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, h + j)), 16));
        __m512 r = c ? _mm512_castsi512_ps(_mm512_slli_epi32(
                           _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, c + j)), 16))
                     : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(buf + j, k, _mm512_add_ps(x, r));
    }
}

/* bits (16 lanes) shifted to bf16 after adding add, or truncated where not finite. */
AVX512_FN static inline __m256i round_bits(__m512i b, __m512i add) {
    const __m512i expo = _mm512_set1_epi32(0x7f800000);
    __mmask16 special = _mm512_cmpeq_epi32_mask(_mm512_and_si512(b, expo), expo);
    __m512i r = _mm512_mask_mov_epi32(_mm512_add_epi32(b, add), special, b);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

/* Round to nearest even: bf16_rne. */
AVX512_FN static inline __m256i rne(__m512 x) {
    __m512i b = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    return round_bits(b, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
}

/* bf16_noise for 8 consecutive indices i (64-bit lanes), as 8 32-bit values. */
AVX512_FN static inline __m256i noise8(__m512i seed, __m512i i) {
    const __m512i golden = _mm512_set1_epi64((long long)0x9e3779b97f4a7c15ull);
    __m512i z = _mm512_add_epi64(seed, _mm512_mullo_epi64(golden,
                                                         _mm512_add_epi64(i, _mm512_set1_epi64(1))));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                           _mm512_set1_epi64((long long)0xbf58476d1ce4e5b9ull));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                           _mm512_set1_epi64((long long)0x94d049bb133111ebull));
    return _mm512_cvtepi64_epi32(_mm512_srli_epi64(z, 48));
}

AVX512_FN void k_bf16_store_avx512(uint16_t *h, uint16_t *c, const float *buf, int len,
                                   uint64_t seed, uint64_t index) {
    const __m512i vseed = _mm512_set1_epi64((long long)seed);
    __m512i idx = _mm512_add_epi64(_mm512_set1_epi64((long long)index),
                                   _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    const __m512i eight = _mm512_set1_epi64(8), sixteen = _mm512_set1_epi64(16);
    for (int j = 0; j < len; j += 16) {
        __mmask16 k = tail_mask(len, j);
        __m512 x = _mm512_maskz_loadu_ps(k, buf + j);
        if (c) {
            __m256i hv = rne(x);
            __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hv), 16));
            _mm256_mask_storeu_epi16(h + j, k, hv);
            _mm256_mask_storeu_epi16(c + j, k, rne(_mm512_sub_ps(x, back)));
        } else {
            __m512i nz = _mm512_inserti64x4(_mm512_castsi256_si512(noise8(vseed, idx)),
                                            noise8(vseed, _mm512_add_epi64(idx, eight)), 1);
            _mm256_mask_storeu_epi16(h + j, k, round_bits(_mm512_castps_si512(x), nz));
            idx = _mm512_add_epi64(idx, sixteen);
        }
    }
}

/* ---- whole arrays of bf16 (half.c's k_bf16_widen, k_bf16_narrow, k_bf16_split) ---- */

/* The lanes [0, r) of a 16-lane step, r in 1..16. */
static inline __mmask16 lanes(size_t r) {
    return r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << r) - 1u);
}

AVX512_FN void k_bf16_widen_avx512(float *x, const uint16_t *h, size_t n) {
    /* from the end, each step's halves loaded before its floats are stored: with x over h's
     * bytes, a step's stores (bytes 4a .. 4a + 64) lie above every half still unread (< 2a) */
    for (size_t i = n; i > 0;) {
        size_t r = i % 16 ? i % 16 : 16, a = i - r;
        __mmask16 k = lanes(r);
        __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, h + a));
        _mm512_mask_storeu_ps(x + a, k, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
        i = a;
    }
}

AVX512_FN void k_bf16_widen_nt_avx512(float *x, const uint16_t *h, size_t n) {
    size_t a = 0;
    /* up to x's first 64-byte boundary with plain stores, then whole lines streamed */
    size_t head = (size_t)((64 - ((uintptr_t)x & 63)) & 63) / sizeof(float);
    if (head > n) head = n;
    if (head) {
        __mmask16 k = lanes(head);
        __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, h));
        _mm512_mask_storeu_ps(x, k, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
        a = head;
    }
    for (; a + 16 <= n; a += 16) {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(h + a)));
        _mm512_stream_ps(x + a, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    if (a < n) {
        __mmask16 k = lanes(n - a);
        __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, h + a));
        _mm512_mask_storeu_ps(x + a, k, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    _mm_sfence(); /* the streamed lines visible before any other thread reads them */
}

AVX512_FN void k_zero_nt_avx512(void *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 64) _mm512_stream_si512((__m512i *)(void *)((char *)p + i), _mm512_setzero_si512());
    _mm_sfence();
}

AVX512_FN int k_bf16_narrow_avx512(uint16_t *h, const float *x, size_t n) {
    /* forward: with h over x's bytes, a step's halves (bytes 2a .. 2a + 32) lie below the
     * floats not yet read (>= 4a + 64) */
    const __m512i expo = _mm512_set1_epi32(0x7f80);
    __mmask16 over = 0;
    for (size_t a = 0; a < n; a += 16) {
        __mmask16 k = lanes(n - a);
        __m256i r = rne(_mm512_maskz_loadu_ps(k, x + a));
        over |= _mm512_mask_cmpeq_epi32_mask(k, _mm512_and_si512(_mm512_cvtepu16_epi32(r), expo),
                                             expo);
        _mm256_mask_storeu_epi16(h + a, k, r);
    }
    return over != 0;
}

AVX512_FN void k_bf16_split_avx512(uint16_t *h, uint16_t *c, const float *x, size_t n) {
    for (size_t a = 0; a < n; a += 16) {
        __mmask16 k = lanes(n - a);
        __m512 v = _mm512_maskz_loadu_ps(k, x + a);
        __m256i hv = rne(v);
        _mm256_mask_storeu_epi16(h + a, k, hv);
        if (c) {
            __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hv), 16));
            _mm256_mask_storeu_epi16(c + a, k, rne(_mm512_sub_ps(v, back)));
        }
    }
}

#define TR8_FN AVX512_FN
#include "kernels/cpu/simd_tr8.h"

AVX512_FN void k_sumsq8_avx512(double out[8], const float *const xs[8], size_t len) {
    __m512d acc = _mm512_setzero_pd();
    for (size_t i = 0; i < len; i += 8) {
        __m256 r[8];
        for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(xs[k] + i);
        tr8x8(r);
        for (int k = 0; k < 8; k++) {
            __m512d d = _mm512_cvtps_pd(r[k]);
            acc = _mm512_fmadd_pd(d, d, acc);
        }
    }
    _mm512_storeu_pd(out, acc);
}
