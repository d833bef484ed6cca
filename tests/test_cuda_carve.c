/* test_cuda_carve.c: the CUDA backend's device-region allocator (src/kernels/cuda/carve.h), which
 * is host code and runs here without a GPU. 200,000 random takes and give-backs on a region of
 * 4096 units of 256 bytes, against a plain map of the units (live, free):
 *   - every unit is exactly one of live or free, the free list is sorted and has no two touching
 *     extents, used + free = size;
 *   - a take returns the lowest offset where a run of free units holds it (first fit), and fails
 *     only when no run does;
 *   - a double give-back, one outside the region and one over a free extent are refused and
 *     change nothing;
 *   - a full extent list refuses a give-back that needs a new extent, and changes nothing;
 *   - everything given back: one extent, the whole region;
 *   - the high-water mark (the end of the highest piece ever taken) is the highest end of the
 *     map's live units ever seen, and never falls. */
#include "testlib.h"

#include "kernels/cuda/carve.h"

#include <stdlib.h>
#include <string.h>

enum { UNIT = 256, UNITS = 4096, CAP = 1024, MAXLIVE = 2048 };
static const size_t SIZE = (size_t)UNIT * UNITS;

static uint64_t g_seed = 7;
static unsigned rnd(unsigned n) {
    g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)((g_seed >> 33) % n);
}

static hpt_extent g_buf[CAP];
static hpt_carve g_c;
static struct {
    size_t off, len;
} g_live[MAXLIVE];
static int g_nlive;
static unsigned char g_map[UNITS]; /* 1: live */

/* the invariants; 1 when they hold */
static int consistent(void) {
    unsigned char seen[UNITS];
    memset(seen, 0, sizeof seen);
    size_t free_bytes = 0;
    int ok = 1;
    for (int i = 0; i < g_c.n; i++) {
        const hpt_extent *e = &g_c.free[i];
        ok &= e->len > 0 && e->off % UNIT == 0 && e->len % UNIT == 0 && e->off + e->len <= SIZE;
        if (i) ok &= g_c.free[i - 1].off + g_c.free[i - 1].len < e->off; /* sorted, not touching */
        for (size_t u = e->off / UNIT; ok && u < (e->off + e->len) / UNIT; u++) ok &= !g_map[u] && !seen[u]++;
        free_bytes += e->len;
    }
    for (size_t u = 0; u < UNITS; u++) ok &= seen[u] + g_map[u] == 1; /* free or live, never both */
    size_t live_bytes = 0;
    for (int i = 0; i < g_nlive; i++) live_bytes += g_live[i].len;
    return ok && free_bytes + g_c.used == SIZE && g_c.used == live_bytes;
}

/* the lowest unit where n free units start, or -1 */
static long first_fit(size_t n) {
    size_t run = 0;
    for (size_t u = 0; u < UNITS; u++) {
        run = g_map[u] ? 0 : run + 1;
        if (run == n) return (long)(u + 1 - n);
    }
    return -1;
}

static void mark(size_t off, size_t len, unsigned char v) {
    for (size_t u = off / UNIT; u < (off + len) / UNIT; u++) g_map[u] = v;
}

int main(void) {
    hpt_carve_init(&g_c, g_buf, CAP, SIZE);
    CHECK(g_c.n == 1 && g_c.free[0].off == 0 && g_c.free[0].len == SIZE && consistent());
    int takes = 0, fails = 0, bad_fit = 0, bad_state = 0, refusals_ok = 1, bad_high = 0;
    size_t high = 0;
    for (int it = 0; it < 200000; it++) {
        if (g_nlive < MAXLIVE && (g_nlive == 0 || rnd(100) < 52)) {
            size_t len = (size_t)UNIT * (1 + (rnd(4) ? rnd(16) : rnd(512)));
            long want = first_fit(len / UNIT);
            size_t off = 0;
            int got = hpt_carve_take(&g_c, len, &off);
            if (got) {
                takes++;
                bad_fit += want < 0 || off != (size_t)want * UNIT;
                g_live[g_nlive].off = off, g_live[g_nlive].len = len, g_nlive++;
                mark(off, len, 1);
                if (off + len > high) high = off + len;
            } else {
                fails++;
                bad_fit += want >= 0;
            }
        } else {
            int k = (int)rnd((unsigned)g_nlive);
            size_t off = g_live[k].off, len = g_live[k].len;
            hpt_carve snap = g_c;
            if (hpt_carve_give(&g_c, off, len)) {
                mark(off, len, 0);
                g_live[k] = g_live[--g_nlive];
                /* again: a double free, refused, nothing changed */
                hpt_carve snap2 = g_c;
                refusals_ok &= !hpt_carve_give(&g_c, off, len) && !memcmp(&snap2, &g_c, sizeof g_c);
            } else { /* only a full extent list may refuse a live block's give-back */
                refusals_ok &= g_c.n == CAP && !memcmp(&snap, &g_c, sizeof g_c);
            }
        }
        bad_state += !consistent();
        bad_high += g_c.high != high;
    }
    printf("%d takes, %d refused for room, %d live at the end, %d free extents\n", takes, fails, g_nlive, g_c.n);
    CHECK_MSG(bad_fit == 0, "%d takes not first fit", bad_fit);
    CHECK_MSG(bad_state == 0, "%d states inconsistent", bad_state);
    CHECK_MSG(bad_high == 0, "%d states with a wrong high-water mark", bad_high);
    printf("high-water mark %zu of %zu bytes\n", g_c.high, SIZE);
    CHECK(refusals_ok);
    CHECK(takes > 50000 && fails > 0); /* the region filled up at times */
    /* outside the region, over a free extent: refused */
    hpt_carve snap = g_c;
    CHECK(!hpt_carve_give(&g_c, SIZE, UNIT) && !hpt_carve_give(&g_c, SIZE - UNIT, 2 * UNIT));
    if (g_c.n) CHECK(!hpt_carve_give(&g_c, g_c.free[0].off, UNIT));
    CHECK(!memcmp(&snap, &g_c, sizeof g_c));
    /* everything back: one extent, the whole region */
    while (g_nlive) {
        g_nlive--;
        CHECK(hpt_carve_give(&g_c, g_live[g_nlive].off, g_live[g_nlive].len));
        mark(g_live[g_nlive].off, g_live[g_nlive].len, 0);
    }
    CHECK(g_c.n == 1 && g_c.free[0].off == 0 && g_c.free[0].len == SIZE && g_c.used == 0 && consistent());
    CHECK(g_c.high == high); /* giving back lowers nothing */
    /* a full list (3 extents at most): a give-back that needs a fourth is refused, unchanged */
    hpt_extent small[3];
    hpt_carve c;
    hpt_carve_init(&c, small, 3, 8 * UNIT);
    size_t o[8];
    for (int i = 0; i < 8; i++) CHECK(hpt_carve_take(&c, UNIT, &o[i]) && o[i] == (size_t)i * UNIT);
    CHECK(c.n == 0 && !hpt_carve_take(&c, UNIT, &o[0]));
    CHECK(hpt_carve_give(&c, o[0], UNIT) && hpt_carve_give(&c, o[2], UNIT) && hpt_carve_give(&c, o[4], UNIT));
    CHECK(c.n == 3);
    hpt_carve full = c;
    hpt_extent fullbuf[3];
    memcpy(fullbuf, small, sizeof small);
    CHECK(!hpt_carve_give(&c, o[6], UNIT)); /* isolated: would need a fourth extent */
    CHECK(!memcmp(&full, &c, sizeof c) && !memcmp(fullbuf, small, sizeof small));
    CHECK(hpt_carve_give(&c, o[1], UNIT) && c.n == 2); /* joins 0 and 2 */
    CHECK(hpt_carve_give(&c, o[6], UNIT) && c.n == 3 && c.used == 3 * UNIT); /* 3, 5, 7 live */
    return t_done("test_cuda_carve");
}
