/* simd_avx2.c: the optimizers' block helpers in AVX2, 8 lanes at a time, for CPUs without
 * AVX-512 (the dispatch and its contract: simd.h). The portable helpers' operations in the
 * same order (q8.h, bf16.h), so the same bits:
 *  - decoding: map[code] by a gather, times absmax;
 *  - encoding: the absmax in vector lanes, then one gather from the step table (simd.h) per
 *    code, taken from its lane's low byte; a block with a slow entry (an infinity or NaN) is
 *    encoded again by q8_encode_lut. Gathers, since AVX2 shuffles only 16 bytes at a time
 *    (docs/benchmarks.md, eighth pass), each into a freshly zeroed register (gather_fresh);
 *  - bf16: bf16.h's integer roundings; splitmix64 in 64-bit lanes from three 32x32 products.
 * No masked 8- or 16-bit stores in AVX2: a tail's codes (under 16) go through a stack buffer,
 * its floats through 32-bit masked loads and stores. Compiled with a target attribute; run
 * only where k_simd_avx2 is set. */
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/q8.h"
#include "kernels/cpu/simd.h"

#include <immintrin.h>
#include <string.h>

#define AVX2_FN __attribute__((target("avx2")))

/* base[idx] (8 lanes) into a freshly zeroed register. The gather merges into its destination,
 * and gcc, seeing all lanes enabled, reuses a register that holds the previous iteration's
 * result: each gather then waits for the one before (the encoder in cache: 0.80 against 0.54
 * ns per value). The zeroing is hidden from the compiler, so it stays (a zeroing vpxor
 * breaks the dependency; "x": xmm0-15, which VEX encodes). */
AVX2_FN static inline __m256i gather_fresh(const int *base, __m256i idx) {
    __m256i z;
    __asm__ volatile("vpxor %x0, %x0, %x0" : "=x"(z));
    return _mm256_mask_i32gather_epi32(z, base, idx, _mm256_set1_epi32(-1), 4);
}
AVX2_FN static inline __m256 gather_fresh_ps(const float *base, __m256i idx) {
    __m256 z;
    __asm__ volatile("vxorps %x0, %x0, %x0" : "=x"(z));
    return _mm256_mask_i32gather_ps(z, base, idx, _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4);
}

/* Lanes [0, r) of 8 set (r in 0..8): the mask of AVX2's masked loads and stores. */
AVX2_FN static inline __m256i lanes8(int r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

AVX2_FN void k_q8_load_avx2(float *buf, const uint8_t *codes, float absmax, int len,
                            const float *map) {
    const __m256 a = _mm256_set1_ps(absmax);
    int j = 0;
    for (; j + 8 <= len; j += 8) {
        __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(codes + j)));
        _mm256_storeu_ps(buf + j, _mm256_mul_ps(gather_fresh_ps(map, c), a));
    }
    if (j < len) { /* the tail's codes through a zeroed buffer, its floats by a masked store */
        uint8_t tail[8] = {0};
        memcpy(tail, codes + j, (size_t)(len - j));
        __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)tail));
        _mm256_maskstore_ps(buf + j, lanes8(len - j),
                            _mm256_mul_ps(gather_fresh_ps(map, c), a));
    }
}

/* The codes of x (8 lanes, already divided by the block's absmax) by the step table, each in
 * its lane's low byte (the bytes above are not cleared: c0 + d is the low byte of the entry
 * plus d, c0 being at least 1 where d is -1 and at most 254 where d is 1); each lane's d
 * (-1, 0, 1, or 2 for a slow entry) is maxed into *dmax. */
AVX2_FN static inline __m256i step8(__m256 x, const uint32_t *thr, __m256i *dmax) {
    __m256i bits = _mm256_castps_si256(x);
    __m256i e = gather_fresh((const int *)thr, _mm256_srli_epi32(bits, 16));
    __m256i d = _mm256_srai_epi32(e, 24);
    *dmax = _mm256_max_epi32(*dmax, d);
    __m256i t = _mm256_srli_epi32(_mm256_slli_epi32(e, 8), 16);
    /* low >= t, both below 2^16 (a signed compare is exact) */
    __m256i below = _mm256_cmpgt_epi32(t, _mm256_and_si256(bits, _mm256_set1_epi32(0xffff)));
    return _mm256_add_epi32(e, _mm256_andnot_si256(below, d));
}

/* The low bytes of two vectors' lanes as 16 bytes: a's 8, then b's. */
AVX2_FN static inline __m128i low_bytes16(__m256i a, __m256i b) {
    const __m256i to0 = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                         -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                         -1, -1);
    const __m256i to1 = _mm256_setr_epi8(-1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1,
                                         -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1,
                                         -1, -1);
    /* dwords: a0-3, b0-3, -, - | a4-7, b4-7, -, - */
    __m256i ab = _mm256_or_si256(_mm256_shuffle_epi8(a, to0), _mm256_shuffle_epi8(b, to1));
    return _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(ab, _mm256_setr_epi32(0, 4, 1, 5, 2, 2, 2, 2)));
}

AVX2_FN float k_q8_store_avx2(uint8_t *codes, const float *buf, int len, const float *map,
                              const int32_t *lut, const uint32_t *thr) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int n8 = len / 8 * 8, r = len - n8;
    const __m256i tmask = lanes8(r);
    /* max(|x|, mx) keeps mx where |x| is NaN (fmaxf's rule), so no lane is NaN and the
     * lanes' maximum is exact in any order; the tail's masked lanes load as zeros */
    __m256 mx0 = _mm256_setzero_ps(), mx1 = _mm256_setzero_ps();
    int j = 0;
    for (; j + 16 <= n8; j += 16) {
        mx0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(buf + j), absmask), mx0);
        mx1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(buf + j + 8), absmask), mx1);
    }
    if (j < n8) mx0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(buf + j), absmask), mx0);
    if (r) mx1 = _mm256_max_ps(_mm256_and_ps(_mm256_maskload_ps(buf + n8, tmask), absmask), mx1);
    __m256 m8 = _mm256_max_ps(mx0, mx1);
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    float mx = _mm_cvtss_f32(m4);
    float inv = mx > 0.0f ? 1.0f / mx : 0.0f;
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i dmax = _mm256_setzero_si256();
    for (j = 0; j + 16 <= n8; j += 16) {
        __m256i c0 = step8(_mm256_mul_ps(_mm256_loadu_ps(buf + j), vinv), thr, &dmax);
        __m256i c1 = step8(_mm256_mul_ps(_mm256_loadu_ps(buf + j + 8), vinv), thr, &dmax);
        _mm_storeu_si128((__m128i *)(void *)(codes + j), low_bytes16(c0, c1));
    }
    if (j < n8 || r) { /* 1 to 15 values: zeros past the end encoded, never stored */
        __m256 x0 = j < n8 ? _mm256_loadu_ps(buf + j) : _mm256_maskload_ps(buf + j, tmask);
        __m256 x1 = j < n8 ? _mm256_maskload_ps(buf + j + 8, tmask) : _mm256_setzero_ps();
        __m256i c0 = step8(_mm256_mul_ps(x0, vinv), thr, &dmax);
        __m256i c1 = step8(_mm256_mul_ps(x1, vinv), thr, &dmax);
        uint8_t out[16];
        _mm_storeu_si128((__m128i *)(void *)out, low_bytes16(c0, c1));
        memcpy(codes + j, out, (size_t)(len - j));
    }
    if (!_mm256_testz_si256(_mm256_cmpeq_epi32(dmax, _mm256_set1_epi32(2)),
                            _mm256_set1_epi32(-1)))
        for (j = 0; j < len; j++) codes[j] = q8_encode_lut(buf[j] * inv, map, lut);
    return mx;
}

AVX2_FN void k_bf16_load_avx2(float *buf, const uint16_t *h, const uint16_t *c, int len) {
    int j = 0;
    for (; j + 8 <= len; j += 8) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(h + j)));
        __m256 x = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)), r = _mm256_setzero_ps();
        if (c) {
            __m256i k = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)(c + j)));
            r = _mm256_castsi256_ps(_mm256_slli_epi32(k, 16));
        }
        _mm256_storeu_ps(buf + j, _mm256_add_ps(x, r)); /* + 0.0f kept: -0 becomes +0 */
    }
    for (; j < len; j++) buf[j] = bf16_widen(h[j]) + (c ? bf16_widen(c[j]) : 0.0f);
}

/* Bits b (8 lanes) plus add, shifted to bf16, or truncated where not finite; as 8 halves. */
AVX2_FN static inline __m128i round_bits(__m256i b, __m256i add) {
    const __m256i expo = _mm256_set1_epi32(0x7f800000);
    __m256i special = _mm256_cmpeq_epi32(_mm256_and_si256(b, expo), expo);
    __m256i r = _mm256_blendv_epi8(_mm256_add_epi32(b, add), b, special);
    r = _mm256_srli_epi32(r, 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

AVX2_FN static inline __m128i rne(__m256 x) {
    __m256i b = _mm256_castps_si256(x);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    return round_bits(b, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd));
}

/* The low 64 bits of a * b in each 64-bit lane. */
AVX2_FN static inline __m256i mul64(__m256i a, __m256i b) {
    __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                     _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
    return _mm256_add_epi64(_mm256_mul_epu32(a, b), _mm256_slli_epi64(cross, 32));
}

/* bf16_noise of 4 consecutive indices i (64-bit lanes), in the low dword of each lane. */
AVX2_FN static inline __m256i noise4(__m256i seed, __m256i i) {
    __m256i z = _mm256_add_epi64(seed, mul64(_mm256_set1_epi64x((long long)0x9e3779b97f4a7c15ull),
                                             _mm256_add_epi64(i, _mm256_set1_epi64x(1))));
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)),
              _mm256_set1_epi64x((long long)0xbf58476d1ce4e5b9ull));
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)),
              _mm256_set1_epi64x((long long)0x94d049bb133111ebull));
    return _mm256_srli_epi64(z, 48);
}

AVX2_FN void k_bf16_store_avx2(uint16_t *h, uint16_t *c, const float *buf, int len,
                               uint64_t seed, uint64_t index) {
    const __m256i vseed = _mm256_set1_epi64x((long long)seed);
    const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    int j = 0;
    for (; j + 8 <= len; j += 8) {
        __m256 x = _mm256_loadu_ps(buf + j);
        if (c) {
            __m128i hv = rne(x);
            __m256 back = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(hv), 16));
            _mm_storeu_si128((__m128i *)(void *)(h + j), hv);
            _mm_storeu_si128((__m128i *)(void *)(c + j), rne(_mm256_sub_ps(x, back)));
        } else {
            __m256i i0 = _mm256_add_epi64(_mm256_set1_epi64x((long long)(index + (uint64_t)j)),
                                          _mm256_setr_epi64x(0, 1, 2, 3));
            __m256i n0 = _mm256_permutevar8x32_epi32(noise4(vseed, i0), even);
            __m256i n1 = _mm256_permutevar8x32_epi32(
                noise4(vseed, _mm256_add_epi64(i0, _mm256_set1_epi64x(4))), even);
            __m256i nz = _mm256_permute2x128_si256(n0, n1, 0x20); /* lanes 0..3, then 4..7 */
            _mm_storeu_si128((__m128i *)(void *)(h + j), round_bits(_mm256_castps_si256(x), nz));
        }
    }
    for (; j < len; j++) {
        uint64_t i = index + (uint64_t)j;
        if (c) {
            h[j] = bf16_rne(buf[j]);
            c[j] = bf16_rne(buf[j] - bf16_widen(h[j]));
        } else {
            h[j] = bf16_sr(buf[j], bf16_noise(seed, i));
        }
    }
}

#define AVX2FMA_FN __attribute__((target("avx2,fma")))

#define TR8_FN AVX2FMA_FN
#include "kernels/cpu/simd_tr8.h"

/* 8 lanes as two vectors of 4 doubles (streams 0-3 and 4-7) */
AVX2FMA_FN void k_sumsq8_avx2(double out[8], const float *const xs[8], size_t len) {
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (size_t i = 0; i < len; i += 8) {
        __m256 r[8];
        for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(xs[k] + i);
        tr8x8(r);
        for (int k = 0; k < 8; k++) {
            __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(r[k]));
            __m256d b = _mm256_cvtps_pd(_mm256_extractf128_ps(r[k], 1));
            lo = _mm256_fmadd_pd(a, a, lo);
            hi = _mm256_fmadd_pd(b, b, hi);
        }
    }
    _mm256_storeu_pd(out, lo);
    _mm256_storeu_pd(out + 4, hi);
}
