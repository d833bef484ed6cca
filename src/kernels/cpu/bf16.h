/* bf16.h: bf16 parameters inside the optimizers' block loops (inline, no state).
 * A bf16 value is a float's top 16 bits. Rounding back after an update is either
 *   stochastic: add 16 random bits below the kept ones, then truncate, so the expected stored
 *     value is the fp32 value (small updates survive on average, none is lost by bias); the bits
 *     are a hash of (seed, element index in the model), so results do not depend on threads
 *     or on how a tensor is cut into blocks; or
 *   Kahan-compensated: the stored value is round-to-nearest-even, and what rounding lost is
 *     itself stored in bf16 (comp) and added back before the next update: value = p + comp
 *     carries ~16 significant bits in 4 bytes, and updates far below p's ulp accumulate.
 * NaN and infinity pass through unchanged by either rounding. A block is widened and rounded
 * by the AVX-512 or AVX2 helpers where the CPU has them (simd.h: the same bits). */
#ifndef HPT_BF16_H
#define HPT_BF16_H

#include "kernels/kernels.h"
#include "kernels/cpu/simd.h"

#include <string.h>

static inline float bf16_widen(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* Round to nearest even. */
static inline uint16_t bf16_rne(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    if ((b & 0x7f800000u) == 0x7f800000u) return (uint16_t)(b >> 16); /* inf, NaN: truncate */
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* 16 random bits for element i under seed (splitmix64's finaliser). */
static inline uint32_t bf16_noise(uint64_t seed, uint64_t i) {
    uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)(z >> 48);
}

/* Stochastic rounding: rounds |x| up with probability (dropped bits) / 2^16. */
static inline uint16_t bf16_sr(float x, uint32_t noise16) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    if ((b & 0x7f800000u) == 0x7f800000u) return (uint16_t)(b >> 16);
    return (uint16_t)((b + noise16) >> 16);
}

/* The block [lo, lo+len) of parameters p as fp32: in place for fp32, else widened (plus the
 * compensation) into scratch. */
static inline float *param_block(const k_param *p, size_t lo, int len, float *scratch) {
    if (p->f32) return p->f32 + lo;
    if (k_simd_avx512) {
        k_bf16_load_avx512(scratch, p->bf16 + lo, p->comp ? p->comp + lo : NULL, len);
        return scratch;
    }
    if (k_simd_avx2) {
        k_bf16_load_avx2(scratch, p->bf16 + lo, p->comp ? p->comp + lo : NULL, len);
        return scratch;
    }
    for (int j = 0; j < len; j++)
        scratch[j] = bf16_widen(p->bf16[lo + (size_t)j]) +
                     (p->comp ? bf16_widen(p->comp[lo + (size_t)j]) : 0.0f);
    return scratch;
}

/* Writes the updated block back (rounds to bf16 when bf16). */
static inline void param_commit(const k_param *p, size_t lo, int len, const float *buf) {
    if (p->f32) return;
    if (k_simd_avx512) {
        k_bf16_store_avx512(p->bf16 + lo, p->comp ? p->comp + lo : NULL, buf, len, p->seed,
                            p->base + lo);
        return;
    }
    if (k_simd_avx2) {
        k_bf16_store_avx2(p->bf16 + lo, p->comp ? p->comp + lo : NULL, buf, len, p->seed,
                          p->base + lo);
        return;
    }
    for (int j = 0; j < len; j++) {
        size_t i = lo + (size_t)j;
        if (p->comp) {
            uint16_t h = bf16_rne(buf[j]);
            p->bf16[i] = h;
            p->comp[i] = bf16_rne(buf[j] - bf16_widen(h));
        } else {
            p->bf16[i] = bf16_sr(buf[j], bf16_noise(p->seed, p->base + i));
        }
    }
}

#endif
