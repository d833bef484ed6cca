/* arena.h: offsets for buffers with known lifetimes inside one block (the way ggml's graph
 * allocator plans a step): two buffers share bytes only if their lifetimes do not overlap.
 * Lifetimes are closed intervals [first, last] of abstract time points (a step's phases). */
#ifndef HPT_ARENA_H
#define HPT_ARENA_H

#include <stddef.h>

typedef struct {
    size_t bytes;    /* requested size; each buffer is placed on a 64-byte boundary */
    int first, last; /* lifetime, first <= last */
    size_t offset;   /* out: byte offset in the arena */
} hpt_arena_buf;

/* Assigns offsets to the n buffers and returns the arena's size in bytes: the peak of the
 * plan, known before anything runs. Deterministic for the same input. */
size_t hpt_arena_plan(hpt_arena_buf *bufs, int n);

#endif
