/* nf4.cu: the CUDA backend's NF4 ops (kernels/nf4.h, the rules; kernels/nf4.c, the host's
 * routines, whose bits these give). Every step is exact or one IEEE rounding the host makes the
 * same way: absmaxes are maxima of |x| (any order), codes count midpoints below x / a (a
 * correctly rounded division: no fast math here), the mean is summed in double in block order by
 * one thread (d_sum_in_order), the FP8 rounding uses frexpf / ldexpf / rintf (exact), and the
 * widened absmax q * scale + mean is computed in double, where the product is exact (a 4-bit
 * significand times a float), so contraction could not change it either (the build has
 * --fmad=false besides).
 * Quantisation, n values at dst (hpt_nf4_bytes(n) bytes, 4-aligned):
 *   d_codes: one warp per 64-value block, lane j the byte of values 2j and 2j + 1;
 *   d_absmax + d_sum_in_order: the absmaxes of up to CU_COLRED_FLOATS blocks into cu_colred,
 *     added in order onto a running double (cu_red's last slot), chunk after chunk;
 *   d_mean: mean = fp32(sum / nb) into dst;
 *   d_groups: one block of 256 threads per group of 256 blocks: c_b = a_b - mean, the group's
 *     scale max |c| / 448 and each q_b in FP8 E4M3.
 * Dequantisation: one thread per value. */
#include "kernels/cuda/cu_common.cuh"

extern "C" {
#include "kernels/nf4.h"
}

__constant__ float c_nf4[16] = HPT_NF4_VALUES_INIT;

static size_t nf4_blocks(size_t n) { return (n + HPT_NF4_BLOCK - 1) / HPT_NF4_BLOCK; }
static size_t nf4_groups(size_t nb) { return (nb + HPT_NF4_GROUP - 1) / HPT_NF4_GROUP; }

/* FP8 E4M3, nearest, ties to an even mantissa (nf4.c's fp8_of) */
__device__ inline unsigned char d_fp8_of(float v) {
    unsigned char sign = v < 0.0f ? 0x80 : 0;
    float a = fabsf(v);
    unsigned bits;
    if (a < 0x1p-6f) {
        bits = (unsigned)rintf(a * 0x1p9f);
    } else {
        int e;
        (void)frexpf(a, &e);
        float m = rintf((ldexpf(a, 1 - e) - 1.0f) * 8.0f);
        bits = (unsigned)((e - 1 + 7) << 3) + (unsigned)m;
    }
    return (unsigned char)(sign | (bits > 126 ? 126 : bits));
}

__device__ inline float d_fp8_value(unsigned char b) {
    int e = b >> 3 & 15, m = b & 7;
    float a = e ? ldexpf((float)(8 + m), e - 10) : ldexpf((float)m, -9);
    return b & 0x80 ? -a : a;
}

/* the code of v = x / a: the count of midpoints strictly below it (nf4.c's block_codes) */
__device__ inline unsigned d_code(float x, float a) {
    float v = x / a;
    unsigned c = 0;
    for (int j = 0; j < 15; j++) c += v > (c_nf4[j] + c_nf4[j + 1]) * 0.5f;
    return c;
}

/* |x| of value i of block b, 0 past the block's end (a block of m <= 64 values) */
__device__ inline float d_abs_at(const float *x, size_t n, size_t i) { return i < n ? fabsf(x[i]) : 0.0f; }

/* the absmax of block b, one warp: lanes 2 values each */
__device__ inline float d_warp_absmax(const float *x, size_t n, size_t b, int lane) {
    size_t i0 = b * HPT_NF4_BLOCK + 2 * (size_t)lane;
    float a = fmaxf(d_abs_at(x, n, i0), d_abs_at(x, n, i0 + 1));
    return cu_warp_max(a); /* a max: the same whatever the order */
}

/* warps w of the grid, striding: w is the same on a warp's 32 lanes, so a warp stays whole */
#define NF4_FOR_WARPS(w, count)                                                                    \
    for (size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; w < (count);             \
         w += (size_t)gridDim.x * blockDim.x / 32)

__global__ void d_codes(unsigned char *codes, const float *x, size_t n, size_t nb) {
    int lane = threadIdx.x & 31;
    NF4_FOR_WARPS(w, nb) {
        float a = d_warp_absmax(x, n, w, lane);
        size_t i0 = w * HPT_NF4_BLOCK + 2 * (size_t)lane;
        if (i0 >= n) continue;
        unsigned hi = a > 0.0f ? d_code(x[i0], a) : 7u;
        unsigned lo = i0 + 1 >= n ? 0u : a > 0.0f ? d_code(x[i0 + 1], a) : 7u; /* odd count: 0 */
        codes[i0 / 2] = (unsigned char)(hi << 4 | lo);
    }
}

__global__ void d_absmax(float *out, const float *x, size_t n, size_t b0, size_t nbc) {
    int lane = threadIdx.x & 31;
    NF4_FOR_WARPS(w, nbc) {
        float a = d_warp_absmax(x, n, b0 + w, lane);
        if (lane == 0) out[w] = a;
    }
}

/* acc += the nbc values of v in order, in double (acc = 0 first when first) */
__global__ void d_sum_in_order(double *acc, const float *v, size_t nbc, int first) {
    double s = first ? 0.0 : *acc;
    for (size_t i = 0; i < nbc; i++) s += (double)v[i];
    *acc = s;
}

__global__ void d_mean(unsigned char *dst, const double *sum, size_t nb) {
    float mean = (float)(*sum / (double)nb);
    *(float *)(void *)dst = mean;
}

/* one block of HPT_NF4_GROUP threads per group; thread t: block g * 256 + t */
__global__ void d_groups(unsigned char *dst, const float *x, size_t n, size_t nb, size_t ng) {
    __shared__ float sh[32];
    size_t g = blockIdx.x, b = g * HPT_NF4_GROUP + threadIdx.x;
    float mean = *(const float *)(const void *)dst, c = 0.0f, a = 0.0f;
    if (b < nb) {
        size_t i0 = b * HPT_NF4_BLOCK, i1 = i0 + HPT_NF4_BLOCK < n ? i0 + HPT_NF4_BLOCK : n;
        for (size_t i = i0; i < i1; i++) a = fabsf(x[i]) > a ? fabsf(x[i]) : a;
        c = a - mean;
    }
    float m = cu_block_max(b < nb ? fabsf(c) : 0.0f, sh, 0.0f);
    float s = m / 448.0f;
    if (threadIdx.x == 0) ((float *)(void *)(dst + 4))[g] = s;
    if (b < nb) {
        float r = s > 0.0f ? c / s : 0.0f;
        dst[4 + 4 * ng + b] = d_fp8_of(r > 448.0f ? 448.0f : r < -448.0f ? -448.0f : r);
    }
}

void cu_nf4_quantize(unsigned char *dst, const float *x, size_t n) {
    if (!n) return;
    cu_enter();
    size_t nb = nf4_blocks(n), ng = nf4_groups(nb);
    unsigned char *codes = dst + 4 + 4 * ng + nb;
    d_codes<<<cu_grid(nb * 32), CU_T, 0, cu_stream>>>(codes, x, n, nb);
    CU_LAUNCHED("nf4_quantize (codes)");
    double *acc = cu_red + CU_RED_SLOTS - 1;
    for (size_t b0 = 0; b0 < nb; b0 += CU_COLRED_FLOATS) {
        size_t nbc = nb - b0 < CU_COLRED_FLOATS ? nb - b0 : CU_COLRED_FLOATS;
        d_absmax<<<cu_grid(nbc * 32), CU_T, 0, cu_stream>>>(cu_colred, x, n, b0, nbc);
        d_sum_in_order<<<1, 1, 0, cu_stream>>>(acc, cu_colred, nbc, b0 == 0);
    }
    d_mean<<<1, 1, 0, cu_stream>>>(dst, acc, nb);
    d_groups<<<(unsigned)ng, HPT_NF4_GROUP, 0, cu_stream>>>(dst, x, n, nb, ng);
    CU_LAUNCHED("nf4_quantize");
}

__global__ void d_nf4_dequantize(float *x, const unsigned char *src, size_t n, size_t ng) {
    const float mean = *(const float *)(const void *)src;
    const float *scale = (const float *)(const void *)(src + 4);
    const unsigned char *q = src + 4 + 4 * ng, *codes = q + (n + HPT_NF4_BLOCK - 1) / HPT_NF4_BLOCK;
    CU_FOR(i, n) {
        size_t b = i / HPT_NF4_BLOCK;
        float a = (float)((double)d_fp8_value(q[b]) * (double)scale[b / HPT_NF4_GROUP] + (double)mean);
        unsigned k = codes[i / 2] >> (i % 2 ? 0 : 4) & 15;
        x[i] = c_nf4[k] * a;
    }
}

void cu_nf4_dequantize(float *x, const unsigned char *src, size_t n) {
    if (!n) return;
    cu_enter();
    size_t ng = nf4_groups(nf4_blocks(n));
    d_nf4_dequantize<<<cu_grid(n), CU_T, 0, cu_stream>>>(x, src, n, ng);
    CU_LAUNCHED("nf4_dequantize");
}
