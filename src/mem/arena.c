/* arena.c: lifetime-based placement of a step's buffers in one arena.
 * Greedy best-fit by decreasing size: each buffer goes to the lowest 64-byte aligned offset
 * where it overlaps, in address, no placed buffer whose lifetime overlaps its own. This is
 * the classic heuristic for the (NP-hard) dynamic storage allocation problem; on a transformer
 * step, whose big buffers are few, it reaches the lower bound (the largest sum of sizes live
 * at one time point) in the cases the tests check. O(n^2 log n), n a few hundred. */
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

static int by_offset(const void *a, const void *b) {
    const hpt_arena_buf *x = g_sort_base + *(const int *)a, *y = g_sort_base + *(const int *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

size_t hpt_arena_plan(hpt_arena_buf *bufs, int n) {
    if (n <= 0) return 0;
    int *order = malloc((size_t)n * sizeof *order);
    int *placed = malloc((size_t)n * sizeof *placed);
    int *conf = malloc((size_t)n * sizeof *conf);
    size_t size = 0;
    if (!order || !placed || !conf) {
        /* no room to plan: lay the buffers end to end (correct, just without reuse) */
        for (int i = 0; i < n; i++) {
            bufs[i].offset = size;
            size += align64(bufs[i].bytes);
        }
        free(order); free(placed); free(conf);
        return size;
    }
    for (int i = 0; i < n; i++) order[i] = i;
    g_sort_base = bufs;
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
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
    free(order);
    free(placed);
    free(conf);
    return size;
}
