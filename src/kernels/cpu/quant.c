/* quant.c: 8-bit block-wise quantisation with Dettmers et al.'s dynamic map ("8-bit Optimizers
 * via Block-wise Quantization", 2021; bitsandbytes' create_dynamic_map(signed, 7, 8)): an
 * exponent 10^-6 .. 10^0 and a linear fraction growing with it; signed [-0.993, 1], unsigned
 * [1e-7, 1]. The unsigned map holds AdamW's sqrt(v), and its smallest code is 1e-7 instead of
 * 0 against the zero-point problem. The construction and why: docs/optimizers.md, "8-bit
 * states".
 * Invariant: map[] is strictly ascending, so nearest-code search is a binary search. */
#include "kernels/cpu/q8.h"
#include "kernels/cpu/simd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

void k_q8_map(float map[256], int is_signed) {
    int n = 0;
    for (int i = 0; i < 7; i++) {
        int k = is_signed ? 1 << i : 1 << (i + 1); /* fractions at this exponent */
        double scale = pow(10.0, (double)(i - 6));
        for (int j = 0; j < k; j++) {
            /* midpoint of [b_j, b_j+1], b = linspace(0.1, 1, k+1), in float */
            float b0 = 0.1f + (float)j * (0.9f / (float)k), b1 = 0.1f + (float)(j + 1) * (0.9f / (float)k);
            float mid = (float)(scale * (double)((b0 + b1) / 2.0f));
            map[n++] = mid;
            if (is_signed) map[n++] = -mid;
        }
    }
    map[n++] = is_signed ? 0.0f : K_Q8_UNSIGNED_MIN;
    map[n++] = 1.0f;
    qsort(map, 256, sizeof(float), cmp_float);
}

int k_q8_lut(int32_t lut[K_Q8_LUT_SIZE], const float map[256]) {
    int most = 0;
    for (uint32_t key = 0; key < K_Q8_LUT_SIZE; key++) {
        /* the bucket's values run from lo to hi bits; negative ones descend as bits grow */
        uint32_t lo_bits = key << 16, hi_bits = lo_bits | 0xffffu;
        float a, b;
        memcpy(&a, &lo_bits, sizeof a);
        memcpy(&b, &hi_bits, sizeof b);
        float lo = key >> 15 ? b : a, hi = key >> 15 ? a : b;
        if (!isfinite(lo) || !isfinite(hi)) { /* infinities: what q8_encode gives */
            lut[key] = q8_encode(lo, map) == 255 ? 254 : 0;
            continue;
        }
        int pos = 0, inside = 0;
        for (int c = 0; c < 256; c++) {
            if (map[c] <= lo) pos = c;
            else if (map[c] <= hi) inside++;
        }
        lut[key] = pos;
        most = inside > most ? inside : most;
    }
    return most;
}

/* q8_encode_lut of the float with bits (key << 16) | low. */
static int enc_at(uint32_t key, uint32_t low, const float *map, const int32_t *lut) {
    uint32_t bits = key << 16 | low;
    float x;
    memcpy(&x, &bits, sizeof x);
    return q8_encode_lut(x, map, lut);
}

/* The step table's entry of bucket key (simd.h, K_Q8_THR_SLOW). Within a bucket of finite
 * floats the code is monotone in the value, hence in the low 16 bits (up for positive keys,
 * down for negative ones): q8_encode_lut's position only grows with x, and the nearer-neighbour
 * test (map[up] - x < x - map[pos]) turns from false to true once as x grows, both rounded
 * differences being monotone in x. A bucket holds at most one code value, hence at most two
 * midpoints; one step of one code (the case everywhere in both maps) is the entry's, the rest
 * (two steps, infinities and NaN) is marked slow. The step's place is found by bisection. */
static uint32_t thr_entry(uint32_t key, const float *map, const int32_t *lut) {
    if ((key & 0x7f80u) == 0x7f80u) return K_Q8_THR_SLOW;
    int a = enc_at(key, 0, map, lut), b = enc_at(key, 0xffffu, map, lut);
    if (a == b) return (uint32_t)a;
    if (b - a != 1 && b - a != -1) return K_Q8_THR_SLOW;
    uint32_t lo = 0, hi = 0xffffu; /* enc(lo) == a, enc(hi) == b */
    while (hi - lo > 1) {
        uint32_t mid = (lo + hi) / 2;
        if (enc_at(key, mid, map, lut) == a) lo = mid;
        else hi = mid;
    }
    return (uint32_t)a | hi << 8 | (uint32_t)(uint8_t)(int8_t)(b - a) << 24;
}

void k_q8_thr(uint32_t thr[K_Q8_LUT_SIZE], const float map[256], const int32_t *lut) {
    for (uint32_t key = 0; key < K_Q8_LUT_SIZE; key++) thr[key] = thr_entry(key, map, lut);
}

/* The tables of the two maps, built once per process (1 MiB of constant data, of which the
 * buckets of |x| in [1e-7, 1], a few thousand entries, are the ones used). */
static int32_t g_lut[2][K_Q8_LUT_SIZE];
static uint32_t g_thr[2][K_Q8_LUT_SIZE];
static k_q8_enc g_enc[2];
static int g_enc_ok[2];
static pthread_once_t g_lut_once = PTHREAD_ONCE_INIT;
static void build_luts(void) {
    for (int sgn = 0; sgn < 2; sgn++) {
        float map[256];
        k_q8_map(map, sgn);
        (void)k_q8_lut(g_lut[sgn], map); /* exact (<= 1 code per bucket): tests/test_optim.c */
        k_q8_thr(g_thr[sgn], map, g_lut[sgn]);
        g_enc_ok[sgn] = k_q8_enc_build(&g_enc[sgn], map, g_lut[sgn]);
    }
}

const uint32_t *k_q8_thr_of(const int32_t *lut) {
    pthread_once(&g_lut_once, build_luts);
    return lut == g_lut[0] ? g_thr[0] : lut == g_lut[1] ? g_thr[1] : NULL;
}

const k_q8_enc *k_q8_enc_of(const int32_t *lut) {
    pthread_once(&g_lut_once, build_luts);
    for (int sgn = 0; sgn < 2; sgn++)
        if (lut == g_lut[sgn]) return g_enc_ok[sgn] ? &g_enc[sgn] : NULL;
    return NULL;
}

const int32_t *k_q8_lut_of(int is_signed) {
    pthread_once(&g_lut_once, build_luts);
    return g_lut[is_signed ? 1 : 0];
}

void k_q8_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, const float *map) {
    size_t nb = (n + K_Q8_BLOCK - 1) / K_Q8_BLOCK;
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * K_Q8_BLOCK;
        int len = (int)(n - lo < K_Q8_BLOCK ? n - lo : K_Q8_BLOCK);
        absmax[b] = q8_store_block(codes + lo, x + lo, len, map, NULL);
    }
}

void k_q8_dequantize(float *x, const uint8_t *codes, const float *absmax, size_t n,
                     const float *map) {
    size_t nb = (n + K_Q8_BLOCK - 1) / K_Q8_BLOCK;
    k_q8_planes pl;
    if (k_simd_vbmi) k_q8_planes_of(&pl, map);
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * K_Q8_BLOCK;
        int len = (int)(n - lo < K_Q8_BLOCK ? n - lo : K_Q8_BLOCK);
        q8_load_block(x + lo, codes + lo, absmax[b], len, map, k_simd_vbmi ? &pl : NULL);
    }
}
