/* test_simd.c: the AVX-512 and AVX2 block helpers (kernels/cpu/simd.h) give the portable
 * helpers' bits (each path the CPU has; an AVX-512 CPU runs all three).
 *  - the step tables: for every bucket of both maps, the entry's code equals q8_encode_lut's
 *    at both ends, around the step and at 24 random places of the bucket;
 *  - the gather-free encoder (AVX-512 VBMI): q8_encode_lut's code around every threshold and
 *    at random, its thresholds, its flag on blocks it cannot encode;
 *  - encoding and decoding whole blocks (with infinities, NaN, -0, subnormals, blocks of
 *    zeros, every length 1..18 and those around the last vectors of a block): codes, absmax
 *    and decoded values equal the portable path's, nothing written past the block;
 *  - every update kernel (AdamW 8-bit and fp32 state with fp32, bf16-sr and bf16-kahan
 *    weights, Lion, SGD, Adam-mini, fp32 and 8-bit), several steps on gradients with specials:
 *    every output buffer equal byte for byte to the portable path's, for AVX-512, AVX-512
 *    decoding by gathers instead of VBMI byte shuffles on one thread (the split across threads
 *    changes no bits), and AVX2 on 1, 2 and 3 threads, with the last block 13, 7 and 1 long;
 *  - whole-array bf16 widening, narrowing (and its overflow flag) and splitting, in place and
 *    not, on random bit patterns: equal to the portable loops';
 *  - the gradient norm's sums of squares (k_sumsq, 8 chunks in a vector's lanes) on lengths
 *    around the chunk and vector sizes, unaligned starts, 1-3 threads, values from 1e-30 to
 *    1e18 with subnormals and zeros: the same double, bit for bit, on every path.
 * On a CPU without AVX-512 only the portable path exists: the comparisons are skipped. */
#include "testlib.h"
#include "kernels/cpu/q8.h"
#include "kernels/cpu/simd.h"
#include "kernels/kernels.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}
static float frand(void) { return (float)rnd32() / 4294967296.0f - 0.5f; }

static float from_bits(uint32_t b) {
    float x;
    memcpy(&x, &b, sizeof x);
    return x;
}

static void test_step_tables(void) {
    for (int sgn = 0; sgn < 2; sgn++) {
        float map[256];
        k_q8_map(map, sgn);
        const int32_t *lut = k_q8_lut_of(sgn);
        const uint32_t *thr = k_q8_thr_of(lut);
        CHECK(thr != NULL);
        if (!thr) return;
        long differ = 0, fast = 0;
        for (uint32_t key = 0; key < 65536; key++) {
            uint32_t e = thr[key];
            if (e >> 24 == 2) {
                CHECK_MSG((key & 0x7f80u) == 0x7f80u, "bucket %#x slow", (unsigned)key);
                continue;
            }
            fast++;
            int c0 = (int)(e & 0xffu), d = (int8_t)(e >> 24);
            uint32_t t = e >> 8 & 0xffffu;
            uint32_t lows[31] = {0, 1, 0xfffe, 0xffff, t ? t - 1 : 0, t, t < 0xffff ? t + 1 : t};
            for (int k = 7; k < 31; k++) lows[k] = rnd32() & 0xffffu;
            for (int k = 0; k < 31; k++) {
                float x = from_bits(key << 16 | lows[k]);
                int want = q8_encode_lut(x, map, lut), got = c0 + (lows[k] >= t ? d : 0);
                differ += want != got;
            }
        }
        CHECK_MSG(differ == 0, "map %d: %ld codes differ from the walk's", sgn, differ);
        CHECK(fast == 65536 - 256); /* all but the infinity and NaN buckets */
    }
}

/* The gather-free encoder (q8enc.c, where the CPU has VBMI): for both maps, every float within
 * 200 ulps of each code's threshold T[c] (read back from the encoder's table) and 4096 random
 * floats of magnitude below 2 each get q8_encode_lut's code; each threshold is the code's
 * first float; blocks with an infinity, a NaN or a value of 2 or more are flagged. */
static void test_encoder(void) {
    if (!k_simd_force(1) || !k_simd_vbmi) {
        k_simd_force(-1);
        printf("test_simd: no AVX-512 VBMI: the gather-free encoder is not checked\n");
        return;
    }
    for (int sgn = 0; sgn < 2; sgn++) {
        float map[256];
        k_q8_map(map, sgn);
        const int32_t *lut = k_q8_lut_of(sgn);
        const k_q8_enc *e = k_q8_enc_of(lut);
        CHECK_MSG(e != NULL, "map %d: no gather-free encoder", sgn);
        if (!e) continue;
        static float x[256];
        uint8_t got[256];
        long differ = 0, wrong_t = 0, flags = 0;
        for (int c = 1; c < 256; c++) {
            uint32_t tb = 0;
            for (int k = 0; k < 4; k++) tb |= (uint32_t)e->tp[k][c - 1] << (8 * k);
            float t = from_bits(tb);
            wrong_t += q8_encode_lut(t, map, lut) < c || q8_encode_lut(nextafterf(t, -INFINITY), map, lut) >= c;
            float v = t;
            for (int i = 0; i < 100; i++) v = nextafterf(v, -INFINITY);
            for (int b = 0; b < 2; b++) { /* two blocks of 200 around t, the second shorter */
                int len = b ? 200 - 56 : 256;
                for (int i = 0; i < len; i++, v = nextafterf(v, INFINITY)) x[i] = v;
                flags += k_q8_encode_vbmi(got, x, 1.0f, len, e);
                for (int i = 0; i < len; i++) differ += got[i] != q8_encode_lut(x[i], map, lut);
            }
        }
        for (int it = 0; it < 16; it++) {
            for (int i = 0; i < 256; i++) {
                float v;
                do v = from_bits(rnd32()); while (!(fabsf(v) < 2.0f));
                x[i] = it % 2 ? v : ldexpf(frand(), -(int)(rnd32() % 30));
            }
            flags += k_q8_encode_vbmi(got, x, 1.0f, 256, e);
            for (int i = 0; i < 256; i++) differ += got[i] != q8_encode_lut(x[i], map, lut);
        }
        static const uint32_t sp[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x40000000u, 0xc0000000u};
        for (int k = 0; k < 5; k++) {
            for (int i = 0; i < 256; i++) x[i] = frand();
            x[rnd32() % 200] = from_bits(sp[k]);
            flags += !k_q8_encode_vbmi(got, x, 1.0f, 200, e);
        }
        CHECK_MSG(differ == 0, "map %d: %ld codes differ from q8_encode_lut's", sgn, differ);
        CHECK_MSG(wrong_t == 0, "map %d: %ld thresholds are not their code's first float", sgn, wrong_t);
        CHECK_MSG(flags == 0, "map %d: %ld blocks flagged wrongly", sgn, flags);
    }
    k_simd_force(-1);
}

/* A block's worth of values of one kind (k: 0 normal, 1 with specials, 2 zeros, 3 tiny). */
static void fill(float *x, int n, int k) {
    for (int i = 0; i < n; i++) {
        float v = frand() * powf(10.0f, (float)(rnd32() % 9) - 7.0f);
        if (k == 1 && rnd32() % 8 == 0) {
            static const uint32_t sp[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                          0x80000000u, 0x00000001u, 0x807fffffu, 0x7f7fffffu};
            v = from_bits(sp[rnd32() % 8]);
        }
        x[i] = k == 2 ? 0.0f : k == 3 ? from_bits(rnd32() & 0x807fffffu) : v;
    }
}

static void test_blocks(void) {
    static float x[256], back[4][256];
    static uint8_t codes[4][256];
    for (int sgn = 0; sgn < 2; sgn++) {
        float map[256];
        k_q8_map(map, sgn);
        const int32_t *lut = k_q8_lut_of(sgn);
        k_q8_planes pl;
        k_q8_planes_of(&pl, map);
        int bad = 0;
        /* random lengths, then every tail of the 8- and 16-lane loops: 1..33, and around
         * the last vectors of a block */
        static const int lens[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,  11,  12,  13,  14,
                                   15, 16, 17, 18, 23, 24, 25, 31, 32, 33, 239, 240, 241, 247,
                                   248, 249, 254, 255};
        const int nlens = (int)(sizeof lens / sizeof *lens);
        for (int it = 0; it < 400 + 4 * nlens; it++) {
            int len = it >= 400 ? lens[(it - 400) / 4]
                      : it % 5 == 0 ? 1 + (int)(rnd32() % 255) : 256;
            int kind = it % 4;
            fill(x, len, kind);
            float amax[4];
            for (int lv = 0; lv < 4; lv++) { /* portable, AVX-512, its gathers, AVX2 */
                if (!k_simd_force(lv)) continue;
                memset(codes[lv], 0xa5, sizeof codes[lv]);
                memset(back[lv], 0xa5, sizeof back[lv]);
                amax[lv] = q8_store_block(codes[lv], x, len, map, lut);
                q8_load_block(back[lv], codes[lv], amax[lv], len, map, &pl);
                /* whole buffers: nothing written past len either */
                bad += memcmp(&amax[0], &amax[lv], sizeof amax[0]) != 0 ||
                       memcmp(codes[0], codes[lv], sizeof codes[0]) != 0 ||
                       memcmp(back[0], back[lv], sizeof back[0]) != 0;
            }
        }
        CHECK_MSG(bad == 0, "map %d: %d blocks differ between the paths", sgn, bad);
    }
    k_simd_force(-1);
}

enum { N = 256 * 150 + 13 }; /* above K_PAR_MIN: the kernels split across threads */

typedef struct {
    float p[N], m[N], v[N], vmini[N / 13 + 1];
    uint16_t h[N], c[N];
    uint8_t mc[N], vc[N];
    float ms[N / 256 + 1], vs[N / 256 + 1];
} run_state;

/* op: 0 AdamW, 1 Lion, 2 SGD, 3 Adam-mini; bits 32 or 8; w 0 fp32, 1 bf16-sr, 2 bf16-kahan. */
static void run(run_state *s, const float *g0, int op, int bits, int w, int n) {
    float ms[256], mu[256];
    k_q8_map(ms, 1);
    k_q8_map(mu, 0);
    g_rng = 77;
    for (int i = 0; i < N; i++) {
        s->p[i] = frand();
        s->m[i] = frand() * 1e-3f;
        s->v[i] = fabsf(frand()) * 1e-4f;
    }
    for (int i = 0; i < N / 13 + 1; i++) s->vmini[i] = 1e-6f;
    for (int i = 0; i < N; i++) {
        s->h[i] = (uint16_t)(rnd32() >> 16 & 0x3fffu);
        s->c[i] = (uint16_t)(rnd32() >> 16 & 0x1fffu);
    }
    k_q8_quantize(s->mc, s->ms, s->m, (size_t)n, ms);
    k_q8_quantize(s->vc, s->vs, s->v, (size_t)n, mu);
    k_param p = w == 0 ? k_param_f32(s->p) : (k_param){NULL, s->h, w == 2 ? s->c : NULL, 99, 12345};
    k_state m = {.f32 = s->m}, v = {.f32 = s->v};
    if (bits == 8) {
        m = (k_state){NULL, s->mc, s->ms, ms, k_q8_lut_of(1)};
        v = (k_state){NULL, s->vc, s->vs, mu, k_q8_lut_of(0)};
    }
    static float g[N];
    for (int t = 1; t <= 3; t++) {
        for (int i = 0; i < N; i++) g[i] = g0[i] * (float)t;
        p.seed = 99u + (uint64_t)t;
        size_t nn = (size_t)n;
        if (op == 0) k_adamw_q(p, g, m, v, nn, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
        else if (op == 1) k_lion(p, g, m, nn, 1e-3f, 0.9f, 0.99f, 0.1f, 0.5f);
        else if (op == 2) k_sgd(p, g, m, nn, 1e-2f, 0.9f, 0.01f, 0.5f);
        else k_adam_mini(p, g, m, s->vmini, nn - nn % 13, 13, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, t);
    }
}

static void test_kernels(void) {
    static float g[N];
    g_rng = 5;
    fill(g, N, 0);
    for (int i = 0; i < N; i += 97) { /* specials in a few blocks only */
        static const uint32_t sp[] = {0x7f800000u, 0x7fc00000u, 0x80000000u, 0x00000001u,
                                      0x7f7fffffu};
        g[i] = i % 3 == 0 ? from_bits(sp[(i / 97) % 5]) : g[i] * 1e3f;
    }
    static run_state r[2];
    const int nthreads = omp_get_max_threads();
    static const char *const path[4] = {"", "AVX-512", "AVX-512 (gathers, one thread)", "AVX2"};
    /* lengths: the last block 13 long (8 + 5: a whole vector and a masked one), 7 long (a
     * masked vector only) and 1 long */
    static const int ns[] = {N, N - 6, N - 12};
    for (int op = 0; op < 4; op++)
        for (int bits = 32; bits >= 8; bits -= 24)
            for (int w = 0; w < 3; w++)
                for (int in = 0; in < 3; in++) {
                    if (op != 0 && w != 0) continue;
                    if (op == 0 && bits == 32 && w == 0) continue; /* k_adamw: no helpers */
                    int n = ns[in];
                    k_simd_force(0);
                    run(&r[0], g, op, bits, w, n);
                    for (int lv = 1; lv < 4; lv++) {
                        if (!k_simd_force(lv)) continue;
                        /* AVX2 on 1, 2 and 3 threads; AVX-512's gathers on one (the split
                         * changes no bits) */
                        for (int th = 1; th <= 3; th++) {
                            if (lv == 1 && th > 1) break;
                            if (lv == 2 && th > 1) break;
                            omp_set_num_threads(lv == 1 ? nthreads : th);
                            run(&r[1], g, op, bits, w, n);
                            omp_set_num_threads(nthreads);
                            CHECK_MSG(!memcmp(&r[0], &r[1], sizeof r[0]),
                                      "op %d, %d-bit, weights %d, n %d: the %s path's bits "
                                      "differ (%d threads)", op, bits, w, n, path[lv],
                                      lv == 1 ? nthreads : th);
                        }
                    }
                    k_simd_force(-1);
                }
}

/* Whole-array widening, narrowing (with its overflow flag) and splitting, out of place and in
 * place, on every kind of bit pattern. */
static void test_arrays(void) {
    enum { M = 1037 };
    static float x[M], xw[2][M];
    static uint16_t h[2][M], c[2][M], hin[M];
    static float inplace[2][M];
    const size_t ns[] = {0, 1, 15, 16, 17, 64, 1000, M};
    int bad = 0;
    for (int it = 0; it < 8; it++) {
        size_t n = ns[it];
        for (size_t i = 0; i < M; i++) {
            x[i] = from_bits(rnd32());
            if (i % 7 == 0) x[i] = frand();
            hin[i] = (uint16_t)(rnd32() >> 16);
        }
        int over[2], over_in[2];
        for (int lv = 0; lv < 2; lv++) {
            k_simd_force(lv);
            memset(xw[lv], 0, sizeof xw[lv]);
            k_bf16_widen(xw[lv], hin, n);
            over[lv] = k_bf16_narrow(h[lv], x, n);
            k_bf16_split(h[lv], c[lv], x, n);
            memcpy(inplace[lv], x, sizeof x); /* narrowed in place, then widened in place */
            over_in[lv] = k_bf16_narrow((uint16_t *)(void *)inplace[lv], inplace[lv], n);
            k_bf16_widen(inplace[lv], (const uint16_t *)(void *)inplace[lv], n);
        }
        bad += memcmp(xw[0], xw[1], sizeof xw[0]) != 0 || over[0] != over[1] ||
               memcmp(h[0], h[1], sizeof h[0]) != 0 || memcmp(c[0], c[1], sizeof c[0]) != 0 ||
               over_in[0] != over_in[1] || memcmp(inplace[0], inplace[1], sizeof inplace[0]) != 0;
    }
    k_simd_force(-1);
    CHECK_MSG(bad == 0, "%d bf16 array conversions differ between the paths", bad);
}

static void test_sumsq(void) {
    enum { M = 1 << 20 };
    static float x[M + 3];
    for (int i = 0; i < M + 3; i++) {
        x[i] = frand() * (i % 97 == 0 ? 1e18f : i % 89 == 0 ? 1e-30f : 1.0f);
        if (i % 101 == 0) x[i] = i % 2 ? 0.0f : from_bits(rnd32() & 0x807fffffu); /* subnormal */
    }
    const size_t ns[] = {0, 1, 7, 8, 63, 64, 65, 511, 512, 513, 768, 4095, 65537, 262143,
                         262145, M};
    const int nthreads = omp_get_max_threads();
    int bad = 0, cases = 0;
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        for (size_t a = 0; a < sizeof ns / sizeof *ns; a++)
            for (int off = 0; off < 3; off++) {
                double r[4];
                for (int lv = 0; lv < 4; lv++) {
                    r[lv] = -1.0;
                    if (k_simd_force(lv)) r[lv] = k_sumsq(x + off, ns[a]);
                    if (lv == 0 || r[lv] == -1.0) continue;
                    cases++;
                    bad += memcmp(&r[0], &r[lv], sizeof r[0]) != 0;
                }
            }
    }
    omp_set_num_threads(nthreads);
    k_simd_force(-1);
    CHECK_MSG(cases > 0 && bad == 0, "%d of %d sums of squares differ from the portable path's",
              bad, cases);
}

int main(void) {
    test_step_tables();
    test_encoder();
    int avx512 = k_simd_force(1), avx2 = k_simd_force(3);
    k_simd_force(-1);
    if (avx512 || avx2) {
        test_blocks();
        test_kernels();
    }
    if (avx512) test_arrays();
    if (avx512 || avx2) test_sumsq();
    if (!avx512 || !avx2)
        printf("test_simd: this CPU lacks %s: those paths are not compared\n",
               !avx512 && !avx2 ? "AVX-512 and AVX2" : !avx512 ? "AVX-512" : "AVX2");
    k_simd_force(-1);
    return t_done("test_simd");
}
