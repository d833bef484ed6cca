/* bench_util.h: what the GEMM benches share: a monotonic clock and 64-byte aligned buffers of
 * small pseudo-random floats in [-1, 1) (xorshift; the same values for the same seed). */
#ifndef HPT_BENCH_UTIL_H
#define HPT_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline float *alloc_fill(size_t n, uint64_t *rng) {
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        uint64_t x = *rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *rng = x;
        p[i] = (float)((double)(x >> 40) / (double)(1ull << 23)) - 1.0f;
    }
    return p;
}

#endif
