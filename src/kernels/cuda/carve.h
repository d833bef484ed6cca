/* carve.h: the device region's allocator (backend.cu), host code only so that it is tested
 * without a GPU (tests/test_cuda_carve.c). First fit over a list of free extents sorted by
 * offset: a request takes the lowest extent that holds it (from its start); a give-back joins
 * its free neighbours, so the list never holds two touching extents and an empty region is one
 * extent. A give-back that overlaps a free extent (a double free, a wrong size) or falls outside
 * the region is refused and changes nothing. Lengths are the caller's (backend.cu rounds them
 * to 256 bytes). O(number of free extents) per call; no allocation (the list is the caller's).
 * high is the end of the highest piece ever taken: the part of the region that has been used at
 * all, which backend.cu backs with memory as it grows (vmm.cu); first fit keeps it low. */
#ifndef HPT_KERNELS_CUDA_CARVE_H
#define HPT_KERNELS_CUDA_CARVE_H

#include <stddef.h>
#include <string.h>

typedef struct {
    size_t off, len;
} hpt_extent;

typedef struct {
    hpt_extent *free; /* (cap) sorted by off, none touching */
    int n, cap;
    size_t size, used;
    size_t high; /* the highest end of a piece ever taken */
} hpt_carve;

static inline void hpt_carve_init(hpt_carve *c, hpt_extent *buf, int cap, size_t size) {
    c->free = buf, c->cap = cap, c->size = size, c->used = 0, c->high = 0;
    c->n = size ? 1 : 0;
    if (size) buf[0].off = 0, buf[0].len = size;
}

/* 1 and *off: len bytes at the lowest offset that holds them; 0: none does */
static inline int hpt_carve_take(hpt_carve *c, size_t len, size_t *off) {
    if (!len) return 0;
    for (int i = 0; i < c->n; i++) {
        if (c->free[i].len < len) continue;
        *off = c->free[i].off;
        c->free[i].off += len;
        c->free[i].len -= len;
        if (!c->free[i].len) {
            memmove(c->free + i, c->free + i + 1, (size_t)(c->n - i - 1) * sizeof *c->free);
            c->n--;
        }
        c->used += len;
        if (*off + len > c->high) c->high = *off + len;
        return 1;
    }
    return 0;
}

/* 1: [off, off + len) is free again; 0: refused (outside, overlapping a free extent, or no room
 * in the list for a new extent), nothing changed */
static inline int hpt_carve_give(hpt_carve *c, size_t off, size_t len) {
    if (!len || off > c->size || len > c->size - off) return 0;
    int i = 0;
    while (i < c->n && c->free[i].off < off) i++;
    if ((i > 0 && c->free[i - 1].off + c->free[i - 1].len > off) || (i < c->n && off + len > c->free[i].off))
        return 0;
    int join_prev = i > 0 && c->free[i - 1].off + c->free[i - 1].len == off;
    int join_next = i < c->n && off + len == c->free[i].off;
    if (join_prev && join_next) {
        c->free[i - 1].len += len + c->free[i].len;
        memmove(c->free + i, c->free + i + 1, (size_t)(c->n - i - 1) * sizeof *c->free);
        c->n--;
    } else if (join_prev) {
        c->free[i - 1].len += len;
    } else if (join_next) {
        c->free[i].off = off;
        c->free[i].len += len;
    } else {
        if (c->n == c->cap) return 0;
        memmove(c->free + i + 1, c->free + i, (size_t)(c->n - i) * sizeof *c->free);
        c->free[i].off = off, c->free[i].len = len;
        c->n++;
    }
    c->used -= len;
    return 1;
}

#endif
