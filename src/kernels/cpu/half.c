/* half.c: gradients to and from 16-bit homes (the offload engine's --grad-home fp16 or bf16),
 * one thread (the engine's worker), 8 values at a time; and bf16 weights' rounding with their
 * Kahan compensation (k_bf16_split).
 * fp16 uses F16C's conversions (_mm256_cvtps_ph / _mm256_cvtph_ps, round to nearest even);
 * bf16 keeps a float's top 16 bits, rounded to nearest even (bf16_rne). Narrowing reports an
 * overflow where it happens: fp16, any |x| above 65504 (the largest finite fp16; what rounds
 * to it from up to 65520 is still called an overflow) or not finite; bf16, any result not
 * finite. The loss scaler skips a step on it (src/train/trainer.c).
 * In place: narrowing may write h over x's own bytes (h == (uint16_t *)x: value i's half goes
 * to bytes 2i, below its float at 4i, so every value is read before it is overwritten in
 * forward order); widening may write x over h's bytes (x == (float *)h: backward order).
 * The vector loads and stores have may-alias types, the scalar ends go through memcpy. The bf16
 * conversions run 16 at a time in AVX-512 where the CPU has it (simd.h: the same bits, the
 * same in-place rules). */
#include "kernels/kernels.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/simd.h"

#include <immintrin.h>
#include <string.h>

/* Compiled for AVX and F16C whatever the build's flags (the sanitizer build has no
 * -march=native): every x86-64 CPU since 2012 has them, this project's machines included. */
#define F16C_FN __attribute__((target("avx,f16c")))

#define F16_MAX 65504.0f

static float load_f(const float *x, size_t i) {
    float v;
    memcpy(&v, (const char *)x + i * sizeof(float), sizeof v);
    return v;
}

F16C_FN int k_f16_narrow(uint16_t *h, const float *x, size_t n) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 lim = _mm256_set1_ps(F16_MAX);
    __m256 bad = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        /* not (|v| <= 65504): beyond it, or NaN (unordered) */
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_and_ps(v, absmask), lim, _CMP_NLE_UQ));
        _mm_storeu_si128((__m128i *)(void *)(h + i),
                         _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    int over = _mm256_movemask_ps(bad) != 0;
    for (; i < n; i++) {
        float v = load_f(x, i);
        over |= !(v <= F16_MAX && v >= -F16_MAX);
        uint16_t r = (uint16_t)_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        memcpy((char *)h + i * sizeof r, &r, sizeof r);
    }
    return over;
}

F16C_FN void k_f16_widen(float *x, const uint16_t *h, size_t n) {
    size_t n8 = n / 8 * 8;
    for (size_t i = n; i > n8; i--) {
        uint16_t r;
        memcpy(&r, (const char *)h + (i - 1) * sizeof r, sizeof r);
        float v = _cvtsh_ss(r);
        memcpy((char *)x + (i - 1) * sizeof v, &v, sizeof v);
    }
    for (size_t i = n8; i > 0; i -= 8) {
        __m128i r = _mm_loadu_si128((const __m128i *)(const void *)(h + i - 8));
        _mm256_storeu_ps(x + i - 8, _mm256_cvtph_ps(r));
    }
}

int k_bf16_narrow(uint16_t *h, const float *x, size_t n) {
    if (k_simd_avx512) return k_bf16_narrow_avx512(h, x, n);
    int over = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t r = bf16_rne(load_f(x, i));
        over |= (r & 0x7f80u) == 0x7f80u;
        memcpy((char *)h + i * sizeof r, &r, sizeof r);
    }
    return over;
}

void k_bf16_widen(float *x, const uint16_t *h, size_t n) {
    if (k_simd_avx512) {
        k_bf16_widen_avx512(x, h, n);
        return;
    }
    for (size_t i = n; i > 0; i--) {
        uint16_t r;
        memcpy(&r, (const char *)h + (i - 1) * sizeof r, sizeof r);
        float v = bf16_widen(r);
        memcpy((char *)x + (i - 1) * sizeof v, &v, sizeof v);
    }
}

void k_bf16_split(uint16_t *h, uint16_t *c, const float *x, size_t n) {
    if (k_simd_avx512) {
        k_bf16_split_avx512(h, c, x, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        h[i] = bf16_rne(x[i]);
        if (c) c[i] = bf16_rne(x[i] - bf16_widen(h[i]));
    }
}

int k_nonfinite(const float *x, size_t n) {
    uint32_t any = 0;
#pragma omp parallel for simd schedule(static) reduction(| : any) if (n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        any |= (b & 0x7f800000u) == 0x7f800000u;
    }
    return any != 0;
}
