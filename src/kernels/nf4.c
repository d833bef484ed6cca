/* nf4.c: the NF4 codec with double-quantised absmaxes (nf4.h; docs/lora.md), on host memory: the
 * CPU backend's nf4 ops (kernels/cuda/nf4.cu is the CUDA backend's, the same bits). */
#include "kernels/nf4.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

const float hpt_nf4_values[16] = HPT_NF4_VALUES_INIT;

/* values below which the codec runs on one thread; blocks are independent, so the bits do not
 * depend on the threads */
#define NF4_PAR_MIN ((size_t)1 << 16)

static size_t blocks(size_t n) { return (n + HPT_NF4_BLOCK - 1) / HPT_NF4_BLOCK; }
static size_t groups(size_t nb) { return (nb + HPT_NF4_GROUP - 1) / HPT_NF4_GROUP; }

size_t hpt_nf4_bytes(size_t n) {
    size_t nb = blocks(n);
    return 4 + 4 * groups(nb) + nb + (n + 1) / 2;
}

/* FP8 E4M3 (4 exponent bits, bias 7, 3 mantissa bits, no infinities; largest 448): |v| <= 448
 * to the nearest value, ties to an even mantissa; the sign in bit 7. */
static unsigned char fp8_of(float v) {
    unsigned char sign = v < 0.0f ? 0x80 : 0;
    float a = fabsf(v);
    unsigned bits;
    if (a < 0x1p-6f) { /* subnormals, m / 8 * 2^-6: 8 rounds up into the smallest normal */
        bits = (unsigned)rintf(a * 0x1p9f);
    } else {
        int e;
        (void)frexpf(a, &e); /* a = f 2^e, f in [0.5, 1) */
        float m = rintf((ldexpf(a, 1 - e) - 1.0f) * 8.0f); /* exact operands: one rounding */
        bits = (unsigned)((e - 1 + 7) << 3) + (unsigned)m;
    }
    return (unsigned char)(sign | (bits > 126 ? 126 : bits));
}

static float fp8_value(unsigned char b) {
    int e = b >> 3 & 15, m = b & 7;
    float a = e ? ldexpf((float)(8 + m), e - 10) : ldexpf((float)m, -9);
    return b & 0x80 ? -a : a;
}

/* the codes of one block's values (a > 0): each the count of midpoints strictly below x / a */
static void block_codes(unsigned char *k, const float *x, size_t m, float a) {
    float mid[15];
    for (int j = 0; j < 15; j++) mid[j] = (hpt_nf4_values[j] + hpt_nf4_values[j + 1]) * 0.5f;
    for (size_t i = 0; i < m; i++) { /* branch-free: vectorised */
        float v = x[i] / a;
        unsigned c = 0;
        for (int j = 0; j < 15; j++) c += v > mid[j];
        k[i] = (unsigned char)c;
    }
}

static float block_absmax(const float *x, size_t m) {
    float a = 0.0f;
    for (size_t i = 0; i < m; i++) a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
    return a;
}

void hpt_nf4_quantize(unsigned char *dst, const float *x, size_t n) {
    size_t nb = blocks(n), ng = groups(nb);
    float *scale = (float *)(void *)(dst + 4);
    unsigned char *q = dst + 4 + 4 * ng;
    unsigned char *codes = dst + 4 + 4 * ng + nb;
#pragma omp parallel for schedule(static) if (n >= NF4_PAR_MIN)
    for (size_t b = 0; b < nb; b++) { /* a block starts at an even value: its own bytes */
        size_t i0 = b * HPT_NF4_BLOCK, m = i0 + HPT_NF4_BLOCK < n ? HPT_NF4_BLOCK : n - i0;
        float a = block_absmax(x + i0, m);
        unsigned char k[HPT_NF4_BLOCK + 1];
        if (a > 0.0f) block_codes(k, x + i0, m, a);
        else memset(k, 7, m);
        k[m] = 0; /* an odd count's last low nibble */
        for (size_t j = 0; j < (m + 1) / 2; j++)
            codes[i0 / 2 + j] = (unsigned char)(k[2 * j] << 4 | k[2 * j + 1]);
    }
    double sum = 0.0; /* in order, whatever the threads: the mean's bits are fixed */
    for (size_t b = 0; b < nb; b++) {
        size_t i0 = b * HPT_NF4_BLOCK;
        sum += (double)block_absmax(x + i0, i0 + HPT_NF4_BLOCK < n ? HPT_NF4_BLOCK : n - i0);
    }
    float mean = (float)(sum / (double)nb);
    memcpy(dst, &mean, 4);
#pragma omp parallel for schedule(static) if (n >= NF4_PAR_MIN)
    for (size_t g = 0; g < ng; g++) {
        size_t b0 = g * HPT_NF4_GROUP, b1 = b0 + HPT_NF4_GROUP < nb ? b0 + HPT_NF4_GROUP : nb;
        float c[HPT_NF4_GROUP], m = 0.0f;
        for (size_t b = b0; b < b1; b++) {
            size_t i0 = b * HPT_NF4_BLOCK;
            c[b - b0] = block_absmax(x + i0, i0 + HPT_NF4_BLOCK < n ? HPT_NF4_BLOCK : n - i0) - mean;
            m = fabsf(c[b - b0]) > m ? fabsf(c[b - b0]) : m;
        }
        float s = m / 448.0f;
        scale[g] = s;
        for (size_t b = b0; b < b1; b++) {
            float r = s > 0.0f ? c[b - b0] / s : 0.0f;
            q[b] = fp8_of(r > 448.0f ? 448.0f : r < -448.0f ? -448.0f : r);
        }
    }
}

static float absmax_of(const unsigned char *src, size_t ng, size_t b) {
    float mean, s;
    memcpy(&mean, src, 4);
    memcpy(&s, src + 4 + 4 * (b / HPT_NF4_GROUP), 4);
    float q = fp8_value(src[4 + 4 * ng + b]);
    /* the product of a 4-bit significand and a float is exact in double: no fused multiply-add
     * changes it */
    return (float)((double)q * (double)s + (double)mean);
}

float hpt_nf4_block_absmax(const unsigned char *src, size_t n, size_t b) {
    return absmax_of(src, groups(blocks(n)), b);
}

void hpt_nf4_dequantize(float *x, const unsigned char *src, size_t n) {
    size_t nb = blocks(n), ng = groups(nb);
    const unsigned char *codes = src + 4 + 4 * ng + nb;
#pragma omp parallel for schedule(static) if (n >= NF4_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        float a = absmax_of(src, ng, b), v[16];
        for (int k = 0; k < 16; k++) v[k] = hpt_nf4_values[k] * a;
        size_t i0 = b * HPT_NF4_BLOCK, m = i0 + HPT_NF4_BLOCK < n ? HPT_NF4_BLOCK : n - i0;
        const unsigned char *c = codes + i0 / 2;
        int k[HPT_NF4_BLOCK];
        for (size_t j = 0; j < (m + 1) / 2; j++) { /* unpacked, then looked up: vectorised */
            k[2 * j] = c[j] >> 4;
            k[2 * j + 1] = c[j] & 15;
        }
        float *y = x + i0;
        for (size_t i = 0; i < m; i++) y[i] = v[k[i]];
    }
}
