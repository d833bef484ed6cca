/* simd.h: runtime dispatch of the optimizers' block helpers to AVX-512 (simd_avx512.c) or,
 * on CPUs without it, AVX2 (simd_avx2.c).
 * The helpers are the four steps around an update's fp32 arithmetic: 8-bit state decoded and
 * encoded (q8.h), bf16 weights widened and rounded back (bf16.h). Their AVX-512 and AVX2
 * versions compute the same bits as the portable ones (same IEEE operations in the same
 * order, the same codes, the same random bits), so the choice changes speed only;
 * tests/test_simd.c compares the three on every input class. The portable code runs on CPUs
 * with neither.
 * The level is read from the CPU once (__builtin_cpu_supports, in simd_avx512.c), whatever the
 * build's -march, since both files are compiled with target attributes. */
#ifndef HPT_SIMD_H
#define HPT_SIMD_H

#include <stddef.h>
#include <stdint.h>

/* 1 when the AVX-512 helpers run (F, BW, DQ and VL all present, or forced by the hook). */
extern int k_simd_avx512;
/* 1 when, in addition, AVX-512 VBMI's byte shuffles decode 8-bit states (k_q8_planes). */
extern int k_simd_vbmi;
/* 1 when the AVX2 helpers run (where k_simd_avx512 is 0). */
extern int k_simd_avx2;
/* Test hook: -1 back to the CPU's choice; 0 the portable helpers; 1 AVX-512 (with VBMI where
 * present); 2 AVX-512 without VBMI; 3 AVX2. Returns 1 when the path asked for runs (0 when
 * the CPU lacks it: then the portable helpers run). Not thread-safe: call it between
 * kernels. */
int k_simd_force(int level);
/* The level the process starts at: the CPU's, or HPT_SIMD's when that environment variable is
 * set (portable, avx512, avx512-novbmi or avx2: the k_simd_force levels 0..3 by name), for
 * comparing the paths' speed; the bits are the same on every path. */

/* The step table of a map's lut (k_q8_lut): per bucket key (a float's top 16 bits) the code
 * q8_encode_lut gives for the float with bits key << 16 | low, as one entry: bits 0..7 the
 * code at low 0, bits 8..23 the step's place t, bits 24..31 its size d as int8 (0, 1 or -1):
 * code = c0 + (low >= t ? d : 0). An entry whose top byte is 2 (K_Q8_THR_SLOW: infinities,
 * NaN, or a bucket with two steps, which neither map has) sends its value to q8_encode_lut.
 * One gather per 16 values where the walk takes three. */
#define K_Q8_THR_SLOW 0x02000000u
void k_q8_thr(uint32_t thr[65536], const float map[256], const int32_t *lut);
/* The step table of the lut that k_q8_lut_of returned (built with it), or NULL for any other
 * lut (the walk is used then). */
const uint32_t *k_q8_thr_of(const int32_t *lut);

/* A map as four byte planes (plane k: byte k of each of the 256 floats, little-endian), so that
 * decoding is a 256-entry byte lookup per plane (two 128-byte VBMI shuffles and a blend on the
 * code's top bit) instead of a gather: the same floats, byte for byte. Made once per kernel
 * call (k_q8_planes_of), read-only while the threads decode. */
typedef struct {
    uint8_t b[4][256];
} k_q8_planes;
void k_q8_planes_of(k_q8_planes *pl, const float *map);

/* The gather-free encoder's tables of a map (q8enc.c): the segments of evenly spaced codes
 * (q: lower bound, the threshold of the first code; qn: the next segment's; a, b: the
 * candidate floor(x * a + b); lo, hi: its clamp), seg: per sign and exponent below 128 the
 * segment of the binade's lowest value, and T[c + 1] at byte c, T[c] the smallest float whose
 * code is at least c (T[256] = +inf), as byte planes. */
typedef struct {
    float q[16], qn[16], a[16], b[16];
    int32_t lo[16], hi[16];
    uint8_t seg[2][128];
    uint8_t tp[4][256];
    int nseg;
} k_q8_enc;
/* Builds e for map and its lut; 0 when the map does not fit the scheme (more than 16 segments,
 * an unreachable code): then the step table is used. */
int k_q8_enc_build(k_q8_enc *e, const float map[256], const int32_t *lut);
/* The tables of the lut that k_q8_lut_of returned, or NULL (built with it). */
const k_q8_enc *k_q8_enc_of(const int32_t *lut);
/* codes (len <= 256) = q8_encode_lut(buf[j] * inv) for every product of magnitude below 2;
 * returns 1 when some product is not (2 or more, infinite or NaN: its codes are then
 * meaningless and the caller walks the block). Needs AVX-512 VBMI (k_simd_vbmi). */
int k_q8_encode_vbmi(uint8_t *codes, const float *buf, float inv, int len, const k_q8_enc *e);

/* buf (len <= 256) = map[codes] * absmax (pl: map's planes, or NULL: a gather from map). */
void k_q8_load_avx512(float *buf, const uint8_t *codes, float absmax, int len, const float *map,
                      const k_q8_planes *pl);
/* codes (len) = the nearest code of buf / absmax through the map's table lut (q8_encode_lut's
 * codes; through enc, the gather-free encoder, when not NULL and the CPU has VBMI; else
 * through thr, its step table, when not NULL); returns the block's absmax (max |buf|, NaN
 * ignored as fmaxf does). */
float k_q8_store_avx512(uint8_t *codes, const float *buf, int len, const float *map,
                        const int32_t *lut, const uint32_t *thr, const k_q8_enc *enc);
/* buf (len) = widen(h) + (c ? widen(c) : 0.0f) (the + 0.0f kept: it turns -0 into +0). */
void k_bf16_load_avx512(float *buf, const uint16_t *h, const uint16_t *c, int len);
/* h (len) = buf rounded: with c, to nearest even and c the residue's rounding (Kahan); else
 * stochastically with bf16_noise(seed, index + j). */
void k_bf16_store_avx512(uint16_t *h, uint16_t *c, const float *buf, int len, uint64_t seed,
                         uint64_t index);

/* The AVX2 versions of the four helpers (same contracts). */
void k_q8_load_avx2(float *buf, const uint8_t *codes, float absmax, int len, const float *map);
float k_q8_store_avx2(uint8_t *codes, const float *buf, int len, const float *map,
                      const int32_t *lut, const uint32_t *thr);
void k_bf16_load_avx2(float *buf, const uint16_t *h, const uint16_t *c, int len);
void k_bf16_store_avx2(uint16_t *h, uint16_t *c, const float *buf, int len, uint64_t seed,
                       uint64_t index);

/* half.c's whole-array conversions, with its in-place rules (widening may write x over h's
 * bytes, narrowing h over x's): the same bits, 16 values at a time. */
void k_bf16_widen_avx512(float *x, const uint16_t *h, size_t n);
/* The same widening for x apart from h, with streaming (non-temporal) stores: for arrays far
 * larger than the caches, whose write-allocate reads would be wasted (an offload engine's
 * block load). Fenced before it returns. */
void k_bf16_widen_nt_avx512(float *x, const uint16_t *h, size_t n);
/* p (bytes, a multiple of 64, p 64-byte aligned) = 0 with streaming stores, fenced. */
void k_zero_nt_avx512(void *p, size_t bytes);
int k_bf16_narrow_avx512(uint16_t *h, const float *x, size_t n);
void k_bf16_split_avx512(uint16_t *h, uint16_t *c, const float *x, size_t n);

/* The gradient norm's sums of squares (k_sumsq, pointwise.c), 8 chunks in a vector's lanes:
 * out[k] = the in-order sum from 0.0 of (double)x * (double)x over xs[k][0 .. len), len a
 * multiple of 8. Eight values of each stream are loaded and transposed, so a lane adds its own
 * stream's values one after another, as the scalar loop does; x * x is exact in double, so the
 * fused multiply-add rounds once where the scalar product and sum round once: the same bits. */
void k_sumsq8_avx512(double out[8], const float *const xs[8], size_t len);
void k_sumsq8_avx2(double out[8], const float *const xs[8], size_t len);

#endif
