/* q8_codec.h: the 8-bit dynamic map's nearest-code rule, one definition for every backend (the
 * CPU's kernels/cpu/q8.h and the CUDA backend's optim.cu), so both give the same code for every
 * value. map: the 256 ascending code values; lut (HPT_Q8_LUT_SIZE, indexed by a float's top 16
 * bits): the largest code not above any value with those bits. Pure functions, no state. */
#ifndef HPT_KERNELS_Q8_CODEC_H
#define HPT_KERNELS_Q8_CODEC_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define HPT_Q8_FN static inline __host__ __device__
#else
#define HPT_Q8_FN static inline
#endif

/* The nearer of the two codes around pos, the largest index with map[pos] <= x (or 0). */
HPT_Q8_FN uint8_t hpt_q8_nearest(float x, const float *map, int pos) {
    int up = pos < 255 ? pos + 1 : 255;
    return (uint8_t)(map[up] - x < x - map[pos] ? up : pos);
}

/* Branchless binary search (8 compares, no data-dependent branch: `omp simd` loops vectorise
 * it with gathers), then the nearer neighbour. */
HPT_Q8_FN uint8_t hpt_q8_encode(float x, const float *map) {
    int pos = 0;
    pos += map[pos + 128] <= x ? 128 : 0;
    pos += map[pos + 64] <= x ? 64 : 0;
    pos += map[pos + 32] <= x ? 32 : 0;
    pos += map[pos + 16] <= x ? 16 : 0;
    pos += map[pos + 8] <= x ? 8 : 0;
    pos += map[pos + 4] <= x ? 4 : 0;
    pos += map[pos + 2] <= x ? 2 : 0;
    pos += map[pos + 1] <= x ? 1 : 0;
    return hpt_q8_nearest(x, map, pos);
}

/* The same code through the table: one lookup and one compare. */
HPT_Q8_FN uint8_t hpt_q8_encode_lut(float x, const float *map, const int32_t *lut) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    int pos = lut[bits >> 16];
    pos += pos < 255 && map[pos + 1] <= x ? 1 : 0;
    return hpt_q8_nearest(x, map, pos);
}

#endif
