/* q8.h: the 8-bit dynamic-map codec shared by quant.c and optim.c (inline, no state).
 * Encoding is a branchless binary search over the 256 ascending code values (8 compares, no
 * data-dependent branches, so `omp simd` loops vectorise it with gathers), then the nearer of
 * the two neighbours. Blocks are decoded and encoded (through the table) by the AVX-512 or
 * AVX2 helpers where the CPU has them (simd.h: the same bits). */
#ifndef HPT_Q8_H
#define HPT_Q8_H

#include "kernels/kernels.h"
#include "kernels/q8_codec.h"
#include "kernels/cpu/simd.h"

#include <math.h>
#include <string.h>

/* The code whose value is nearest x (x in units of the block's absmax). */
static inline uint8_t q8_encode(float x, const float *map) { return hpt_q8_encode(x, map); }

/* buf (len) = the block's values; len <= 256; pl: map's byte planes (simd.h) or NULL. */
static inline void q8_load_block(float *buf, const uint8_t *codes, float absmax, int len,
                                 const float *map, const k_q8_planes *pl) {
    if (k_simd_avx512) {
        k_q8_load_avx512(buf, codes, absmax, len, map, pl);
        return;
    }
    if (k_simd_avx2) {
        k_q8_load_avx2(buf, codes, absmax, len, map);
        return;
    }
#pragma omp simd
    for (int j = 0; j < len; j++) buf[j] = map[codes[j]] * absmax;
}

/* q8_encode through the map's table (k_q8_lut): the table gives the largest code not above
 * the smallest value of x's bucket (the top 16 bits of x: sign, exponent, 7 mantissa bits);
 * no bucket holds more than one code value (checked when the table is built), so one step up
 * gives the largest code not above x, and the nearest-code rule is q8_encode's: the same code
 * for every x but NaN (whose code is meaningless either way), 3.4x faster (int32 entries:
 * the loop vectorises with gathers). */
static inline uint8_t q8_encode_lut(float x, const float *map, const int32_t *lut) {
    return hpt_q8_encode_lut(x, map, lut);
}

/* Quantises buf (len) into codes, through lut when not NULL; returns the block's absmax. */
static inline float q8_store_block(uint8_t *codes, const float *buf, int len, const float *map,
                                   const int32_t *lut) {
    if (lut && k_simd_avx512)
        return k_q8_store_avx512(codes, buf, len, map, lut, k_q8_thr_of(lut),
                                 k_simd_vbmi ? k_q8_enc_of(lut) : NULL);
    const uint32_t *thr = lut && k_simd_avx2 ? k_q8_thr_of(lut) : NULL;
    if (thr) return k_q8_store_avx2(codes, buf, len, map, lut, thr);
    float mx = 0.0f;
#pragma omp simd reduction(max : mx)
    for (int j = 0; j < len; j++) mx = fmaxf(mx, fabsf(buf[j]));
    float inv = mx > 0.0f ? 1.0f / mx : 0.0f;
    if (lut) {
#pragma omp simd
        for (int j = 0; j < len; j++) codes[j] = q8_encode_lut(buf[j] * inv, map, lut);
    } else {
#pragma omp simd
        for (int j = 0; j < len; j++) codes[j] = q8_encode(buf[j] * inv, map);
    }
    return mx;
}

/* The block [lo, lo+len) of state s as fp32: in place when s is fp32, else dequantised into
 * scratch (pl: s's map's byte planes, or NULL). */
static inline float *state_block(const k_state *s, size_t lo, int len, float *scratch,
                                 const k_q8_planes *pl) {
    if (s->f32) return s->f32 + lo;
    q8_load_block(scratch, s->codes + lo, s->absmax[lo / K_Q8_BLOCK], len, s->map, pl);
    return scratch;
}

/* s's map's byte planes into *pl when s is 8-bit and the planes will be used (else NULL). */
static inline const k_q8_planes *state_planes(const k_state *s, k_q8_planes *pl) {
    if (s->f32 || !k_simd_vbmi) return NULL;
    k_q8_planes_of(pl, s->map);
    return pl;
}

/* Writes the block back (requantises when 8-bit). */
static inline void state_commit(const k_state *s, size_t lo, int len, const float *buf) {
    if (s->f32) return;
    s->absmax[lo / K_Q8_BLOCK] = q8_store_block(s->codes + lo, buf, len, s->map, s->lut);
}

#endif
