/* crc32c.c: CRC-32C, the checksum of hptrain's training state and of the disk tier's pages.
 * Two paths with the same result: the SSE4.2 crc32 instruction, three independent streams at
 * once (its latency is three cycles, its throughput one per cycle) joined by a "shift by n
 * zero bytes" of the first two (a multiplication mod P, as tables); and a slicing-by-8 table for other CPUs. The
 * choice is made once, at the first call, from cpuid (thread-safe: pthread_once).
 * crc32c_pages, the disk tier's call, checksums whole 4096-byte pages three at a time, each its
 * own stream (no joining), prefetching the next ones: a hardware prefetcher stops at a page
 * boundary, and reading three short lanes of one page from memory ran at half the speed.
 * Convention (zlib's): the pre- and post-inversion happen inside, so crc32c(0, ...) starts a
 * new checksum and a previous result continues it. */
#include "core/crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t g_tab[8][256];
static int g_hw;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* ---- joining streams: multiplication in GF(2)[x] mod P (reflected bit order) ------------- */

/* a * b mod P, both reflected (bit 31 is x^0). */
static uint32_t gf_mul(uint32_t a, uint32_t b) {
    uint32_t r = 0;
    for (int i = 0; i < 32; i++) {
        if (a & 0x80000000u) r ^= b;
        a <<= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1; /* b * x */
    }
    return r;
}

/* x^(8 n) mod P, reflected: the operator that appends n zero bytes to a raw CRC register. */
static uint32_t x_pow_8n(size_t n) {
    uint32_t r = 0x80000000u, sq = 0x00800000u; /* 1; x^8 */
    while (n) {
        if (n & 1) r = gf_mul(r, sq);
        sq = gf_mul(sq, sq);
        n >>= 1;
    }
    return r;
}

#define HW_LANE 1360 /* bytes per stream in one round: 3 lanes fill a 4096-byte page (+16) */
/* The joins as tables: shifting a register by n zero bytes is linear in its 4 bytes, so
 * shift(c) = t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ ... (4 loads, not a 32-step multiply) */
static uint32_t g_shift1[4][256], g_shift2[4][256]; /* by HW_LANE, by 2 HW_LANE bytes */

static void shift_table(uint32_t t[4][256], uint32_t op) {
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++) t[k][b] = gf_mul(b << (8 * k), op);
}

static inline uint32_t shift_by(const uint32_t t[4][256], uint32_t c) {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

static void init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        g_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) g_tab[t][i] = (g_tab[t - 1][i] >> 8) ^ g_tab[0][g_tab[t - 1][i] & 0xff];
    shift_table(g_shift1, x_pow_8n(HW_LANE));
    shift_table(g_shift2, x_pow_8n(2 * HW_LANE));
#if defined(__x86_64__)
    __builtin_cpu_init();
    g_hw = __builtin_cpu_supports("sse4.2") != 0;
#endif
}

/* The raw register (no inversions) over data, by table. */
static uint32_t sw_raw(uint32_t crc, const unsigned char *p, size_t n) {
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = g_tab[7][lo & 0xff] ^ g_tab[6][(lo >> 8) & 0xff] ^ g_tab[5][(lo >> 16) & 0xff] ^
              g_tab[4][lo >> 24] ^ g_tab[3][hi & 0xff] ^ g_tab[2][(hi >> 8) & 0xff] ^
              g_tab[1][(hi >> 16) & 0xff] ^ g_tab[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ g_tab[0][(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

__attribute__((target("sse4.2"))) static uint32_t hw_raw(uint32_t crc, const unsigned char *p,
                                                         size_t n) {
    uint64_t c0 = crc;
    /* three lanes of HW_LANE bytes per round; lanes 1 and 2 start from 0 and are joined:
     * crc(A||B) = shift(crc(A), |B|) ^ crc(B) for raw registers */
    while (n >= 3 * HW_LANE) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *q = p;
        for (size_t i = 0; i < HW_LANE; i += 8) {
            uint64_t a, b, c;
            memcpy(&a, q + i, 8);
            memcpy(&b, q + HW_LANE + i, 8);
            memcpy(&c, q + 2 * HW_LANE + i, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, c);
        }
        c0 = shift_by(g_shift2, (uint32_t)c0) ^ shift_by(g_shift1, (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * HW_LANE;
        n -= 3 * HW_LANE;
    }
    while (n >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c0 = _mm_crc32_u64(c0, a);
        p += 8;
        n -= 8;
    }
    uint32_t c = (uint32_t)c0;
    while (n--) c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

#if defined(__x86_64__)
/* Three 4096-byte pages at a time, their CRCs into out[0..2]; the three after them
 * prefetched (prefetches never fault, so running past the buffer's end is harmless). */
__attribute__((target("sse4.2"))) static void hw_pages3(const unsigned char *q, uint32_t *out) {
    uint64_t a = 0xffffffffu, b = 0xffffffffu, c = 0xffffffffu;
    for (size_t i = 0; i < 4096; i += 8) {
        uint64_t x, y, z;
        if ((i & 15) == 0) {
            __builtin_prefetch(q + 3 * 4096 + i);
            __builtin_prefetch(q + 4 * 4096 + i);
            __builtin_prefetch(q + 5 * 4096 + i);
        }
        memcpy(&x, q + i, 8);
        memcpy(&y, q + 4096 + i, 8);
        memcpy(&z, q + 2 * 4096 + i, 8);
        a = _mm_crc32_u64(a, x);
        b = _mm_crc32_u64(b, y);
        c = _mm_crc32_u64(c, z);
    }
    out[0] = ~(uint32_t)a;
    out[1] = ~(uint32_t)b;
    out[2] = ~(uint32_t)c;
}
#endif

void crc32c_pages(const void *buf, size_t n_pages, uint32_t *out) {
    pthread_once(&g_once, init);
    const unsigned char *p = buf;
    size_t i = 0;
#if defined(__x86_64__)
    if (g_hw)
        for (; i + 3 <= n_pages; i += 3) hw_pages3(p + i * 4096, out + i);
#endif
    for (; i < n_pages; i++) out[i] = crc32c(0, p + i * 4096, 4096);
}

uint32_t crc32c_sw(uint32_t crc, const void *data, size_t n) {
    pthread_once(&g_once, init);
    return ~sw_raw(~crc, data, n);
}

uint32_t crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&g_once, init);
#if defined(__x86_64__)
    if (g_hw) return ~hw_raw(~crc, data, n);
#endif
    return ~sw_raw(~crc, data, n);
}

int crc32c_hw(void) {
    pthread_once(&g_once, init);
    return g_hw;
}
