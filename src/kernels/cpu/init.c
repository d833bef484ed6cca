/* init.c: random initialisation's normals, constant fills (src/model/init.c calls them
 * through the backend table) and dropout's counter-based masks (LoRA, src/model/lora.c).
 * Normals come in chunks of INIT_CHUNK values, chunk k from its own RNG seeded key ^ k, filled
 * by Box-Muller on vectors (both outputs used). Invariant: chunks are independent, so they are
 * generated in parallel and a value depends on neither the thread count nor the range asked
 * for: a range cutting a chunk generates the chunk whole and keeps the overlap. */
#include "kernels/kernels.h"
#include "core/core.h"
#include "kernels/cpu/vmath.h"

#include <math.h>
#include <string.h>

#define INIT_CHUNK 4096

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
float cosf(float) __attribute__((simd("notinbranch")));
float sinf(float) __attribute__((simd("notinbranch")));
#endif

/* x[0..n) = std * N(0, 1), n <= INIT_CHUNK, from its own stream. */
static void normal_chunk(float *x, size_t n, float std, uint64_t stream) {
    float u1[INIT_CHUNK / 2], u2[INIT_CHUNK / 2];
    hpt_rng rng;
    hpt_rng_seed(&rng, stream);
    size_t half = (n + 1) / 2;
    for (size_t i = 0; i < half; i++) {
        u1[i] = 1.0f - hpt_rng_uniform(&rng); /* (0, 1]: log is finite */
        u2[i] = hpt_rng_uniform(&rng);
    }
#pragma omp simd
    for (size_t i = 0; i < half; i++) {
        float r = std * sqrtf(-2.0f * logf(u1[i]));
        float a = 6.2831853071795864f * u2[i];
        u1[i] = r * cosf(a);
        u2[i] = r * sinf(a);
    }
    for (size_t i = 0; i < n; i++) x[i] = i % 2 ? u2[i / 2] : u1[i / 2];
}

void k_init_normal(float *x, size_t lo, size_t hi, size_t total, float std, uint64_t key) {
    if (hi <= lo) return;
    int64_t k0 = (int64_t)(lo / INIT_CHUNK), k1 = (int64_t)((hi - 1) / INIT_CHUNK);
#pragma omp parallel for schedule(static) if (hi - lo >= 65536)
    for (int64_t k = k0; k <= k1; k++) {
        size_t c0 = (size_t)k * INIT_CHUNK, len = HPT_MIN((size_t)INIT_CHUNK, total - c0);
        uint64_t stream = key ^ (uint64_t)k;
        size_t a = HPT_MAX(c0, lo), b = HPT_MIN(c0 + len, hi);
        if (a == c0 && b == c0 + len) {
            normal_chunk(x + (c0 - lo), len, std, stream);
        } else { /* a chunk cut by the range: generate it whole, keep the overlap */
            float tmp[INIT_CHUNK];
            normal_chunk(tmp, len, std, stream);
            memcpy(x + (a - lo), tmp + (a - c0), (b - a) * sizeof(float));
        }
    }
}

void k_fill(float *x, size_t n, float value) {
    for (size_t i = 0; i < n; i++) x[i] = value;
}

/* Dropout's keep mask: element i is kept when a hash of (seed, i) (splitmix64's finaliser) is at
 * or above p as a 24-bit fraction; counter-based, so the backward regenerates the forward's
 * mask from the seed alone, and the bits do not depend on the thread count. */
static inline int dropout_keep(uint64_t seed, size_t i, uint32_t cut) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 40) >= cut;
}

void k_dropout_forward(float *y, const float *x, size_t n, float p, uint64_t seed) {
    const uint32_t cut = (uint32_t)((double)p * 16777216.0);
    const float keep = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (size_t i = 0; i < n; i++) y[i] = dropout_keep(seed, i, cut) ? x[i] * keep : 0.0f;
}

void k_dropout_backward(float *dx, const float *dy, size_t n, float p, uint64_t seed) {
    const uint32_t cut = (uint32_t)((double)p * 16777216.0);
    const float keep = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n >= 32768)
    for (size_t i = 0; i < n; i++)
        if (dropout_keep(seed, i, cut)) dx[i] += dy[i] * keep;
}
