/* arena.c: lifetime-based placement of a step's buffers in one arena.
 * Greedy first-fit: each buffer in turn goes to the lowest 64-byte aligned offset where it
 * overlaps, in address, no placed buffer whose lifetime overlaps its own; the classic heuristic
 * for the (NP-hard) dynamic storage allocation problem. The turn is tried in four orders
 * (decreasing size, ties by birth or by death; longest lifetime first; largest size x lifetime)
 * and the smallest arena kept, the first order's on ties: decreasing size alone left 2.8% of a
 * long-context plan's arena in holes (llama, full recomputation with offloaded checkpoints,
 * T = 32768: 637,665,280 bytes for a bound of 620,101,632), where (T, C) buffers of one or two
 * time points interleave with wider ones, and 3,584 bytes over the bound in test_memcheck's
 * GPT-2 shapes at L = 3 and 4. On a transformer step it reaches the lower bound (the largest
 * sum of sizes live at one time point) in the cases the tests check. O(n^2 log n) per order,
 * n a few hundred. */
#include "mem/arena.h"

#include <stdlib.h>

static size_t align64(size_t x) { return (x + 63) & ~(size_t)63; }

static const hpt_arena_buf *g_sort_base; /* qsort has no context argument */

static int by_size_desc(const void *a, const void *b) {
    const hpt_arena_buf *x = g_sort_base + *(const int *)a, *y = g_sort_base + *(const int *)b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return *(const int *)a - *(const int *)b; /* stable: index order */
}

static int by_size_last(const void *a, const void *b) {
    const hpt_arena_buf *x = g_sort_base + *(const int *)a, *y = g_sort_base + *(const int *)b;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
    if (x->last != y->last) return x->last > y->last ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

static int by_length_first(const void *a, const void *b) {
    const hpt_arena_buf *x = g_sort_base + *(const int *)a, *y = g_sort_base + *(const int *)b;
    const int lx = x->last - x->first, ly = y->last - y->first;
    if (lx != ly) return lx > ly ? -1 : 1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return by_size_desc(a, b);
}

static int by_area(const void *a, const void *b) {
    const hpt_arena_buf *x = g_sort_base + *(const int *)a, *y = g_sort_base + *(const int *)b;
    double ax = (double)x->bytes * (x->last - x->first + 1);
    double ay = (double)y->bytes * (y->last - y->first + 1);
    if (ax != ay) return ax > ay ? -1 : 1;
    return by_size_desc(a, b);
}
static int by_offset(const void *a, const void *b) {
    const hpt_arena_buf *x = g_sort_base + *(const int *)a, *y = g_sort_base + *(const int *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* Places the buffers in order's turn (first-fit); returns the arena's size. */
static size_t place(hpt_arena_buf *bufs, int n, const int *order, int *placed, int *conf) {
    size_t size = 0;
    int n_placed = 0;
    for (int k = 0; k < n; k++) {
        hpt_arena_buf *b = &bufs[order[k]];
        /* the placed buffers whose lifetimes overlap b's, by offset */
        int nc = 0;
        for (int j = 0; j < n_placed; j++) {
            const hpt_arena_buf *o = &bufs[placed[j]];
            if (o->first <= b->last && b->first <= o->last) conf[nc++] = placed[j];
        }
        qsort(conf, (size_t)nc, sizeof *conf, by_offset);
        size_t need = align64(b->bytes), off = 0;
        for (int j = 0; j < nc; j++) {
            const hpt_arena_buf *o = &bufs[conf[j]];
            if (off + need <= o->offset) break; /* fits in the gap before o */
            size_t end = o->offset + align64(o->bytes);
            if (end > off) off = end;
        }
        b->offset = off;
        if (off + need > size) size = off + need;
        placed[n_placed++] = order[k];
    }
    return size;
}

size_t hpt_arena_plan(hpt_arena_buf *bufs, int n) {
    if (n <= 0) return 0;
    int *order = malloc((size_t)n * sizeof *order);
    int *placed = malloc((size_t)n * sizeof *placed);
    int *conf = malloc((size_t)n * sizeof *conf);
    size_t *best = malloc((size_t)n * sizeof *best);
    size_t size = 0;
    if (!order || !placed || !conf || !best) {
        /* no room to plan: lay the buffers end to end (correct, just without reuse) */
        for (int i = 0; i < n; i++) {
            bufs[i].offset = size;
            size += align64(bufs[i].bytes);
        }
        free(order); free(placed); free(conf); free(best);
        return size;
    }
    static int (*const orders[])(const void *, const void *) = {by_size_desc, by_size_last,
                                                                by_length_first, by_area};
    g_sort_base = bufs;
    for (size_t k = 0; k < sizeof orders / sizeof *orders; k++) {
        for (int i = 0; i < n; i++) order[i] = i;
        qsort(order, (size_t)n, sizeof *order, orders[k]);
        size_t s = place(bufs, n, order, placed, conf);
        if (k == 0 || s < size) {
            size = s;
            for (int i = 0; i < n; i++) best[i] = bufs[i].offset;
        }
    }
    for (int i = 0; i < n; i++) bufs[i].offset = best[i];
    free(order);
    free(placed);
    free(conf);
    free(best);
    return size;
}
