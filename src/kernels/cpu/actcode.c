/* actcode.c: saved activations stored compressed (the activation store's int8 and bf16 copies).
 * int8: one fp32 absmax / 127 scale per row, then the rows' codes, round to nearest; bf16: each
 * float's high half rounded to nearest even (no scale: bf16 keeps fp32's range). Loading is
 * exact inverse arithmetic, so a stored-and-loaded field is the same bits every time. */
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

/* int8 with one absmax scale per row: (rows) fp32 scales, then (rows, w) int8. */
static size_t q8_bytes(size_t rows, size_t w) { return rows * sizeof(float) + rows * w; }

static void q8_store(char *dst, const float *x, size_t rows, size_t w) {
    float *scale = (float *)dst;
    int8_t *q = (int8_t *)(dst + rows * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < (int64_t)rows; r++) {
        const float *xr = x + (size_t)r * w;
        float amax = 0.0f;
        for (size_t j = 0; j < w; j++) amax = fabsf(xr[j]) > amax ? fabsf(xr[j]) : amax;
        float s = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[r] = s;
        for (size_t j = 0; j < w; j++) {
            float v = nearbyintf(xr[j] * inv);
            q[(size_t)r * w + j] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
    }
}

/* par 0: serial (on a helper thread, outside OpenMP's team) */
static void q8_load(float *x, const char *src, size_t rows, size_t w, int par) {
    const float *scale = (const float *)src;
    const int8_t *q = (const int8_t *)(src + rows * sizeof(float));
#pragma omp parallel for schedule(static) if (par)
    for (int64_t r = 0; r < (int64_t)rows; r++)
        for (size_t j = 0; j < w; j++)
            x[(size_t)r * w + j] = (float)q[(size_t)r * w + j] * scale[r];
}

static void bf16_store(char *dst, const float *x, size_t n) {
    uint16_t *h = (uint16_t *)dst;
#pragma omp parallel for simd schedule(static) if (n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        h[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
}

static void bf16_load(float *x, const char *src, size_t n, int par) {
    const uint16_t *h = (const uint16_t *)src;
#pragma omp parallel for simd schedule(static) if (par && n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)h[i] << 16;
        memcpy(&x[i], &b, sizeof b);
    }
}

size_t k_act_code_bytes(hpt_act_code k, size_t rows, size_t w) {
    return k == HPT_ACT_CODE_INT8 ? q8_bytes(rows, w)
           : k == HPT_ACT_CODE_BF16 ? rows * w * 2 : rows * w * 4;
}

void k_act_code_store(hpt_act_code k, void *dst, const float *x, size_t rows, size_t w) {
    if (k == HPT_ACT_CODE_INT8) q8_store(dst, x, rows, w);
    else bf16_store(dst, x, rows * w);
}

void k_act_code_load(hpt_act_code k, float *x, const void *src, size_t rows, size_t w, int par) {
    if (k == HPT_ACT_CODE_INT8) q8_load(x, src, rows, w, par);
    else bf16_load(x, src, rows * w, par);
}
