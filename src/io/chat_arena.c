/* chat_arena.c: the chat template interpreter's arena (io/chat_int.h): blocks of at least
 * 64 KiB, each allocation zeroed and 16-byte aligned, the whole freed at once; a template's
 * tree and a render's values live in one each, bounded by limit_bytes so that a hostile
 * template or conversation fails with out-of-memory instead of exhausting the machine. */
#include "io/chat_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct ct_block {
    ct_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *ct_alloc(ct_arena *a, size_t bytes) {
    bytes = (bytes + 15) & ~(size_t)15;
    if (bytes == 0) bytes = 16;
    ct_block *b = a->head;
    if (!b || b->cap - b->used < bytes) {
        size_t cap = bytes > (64u << 10) ? bytes : (64u << 10);
        if (a->used_bytes + cap > a->limit_bytes || cap > SIZE_MAX - sizeof *b) return NULL;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
        a->used_bytes += cap;
    }
    void *p = b->data + b->used;
    b->used += bytes;
    memset(p, 0, bytes);
    return p;
}

void ct_arena_free(ct_arena *a) {
    for (ct_block *b = a->head, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    a->head = NULL;
    a->used_bytes = 0;
}
