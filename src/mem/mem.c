/* mem.c: the budgeted, counting allocator behind every tensor.
 *
 * Invariants:
 *   - live_bytes[tier][cat] is the exact sum of the sizes of the live blocks of that tier and
 *     category; a tier's total never exceeds its budget (when the budget is non-zero).
 *   - peak_bytes[tier] is the high-water mark of the tier's total since the last reset, and
 *     peak_live_bytes is the breakdown at the moment that mark was set.
 *   - A refused request changes nothing but n_refused and the last-error text.
 *   - In debug and sanitizer builds (HPT_MEM_CHECK) every live block's size is on record, and
 *     hpt_mem_free of an unknown pointer or with a wrong size aborts: a programmer's error.
 * One thread allocates at a time (the trainer's); kernels never allocate. */
#include "core/core.h"
#include "testing.h"
#include "mem/mem_int.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const char *const k_phase_names[HPT_PHASE_COUNT] = {"full", "warmup", "predict",
                                                           "correct", "eval", "setup"};
const char *hpt_phase_name(hpt_phase p) {
    return (unsigned)p < HPT_PHASE_COUNT ? k_phase_names[p] : "?";
}

static const char *const k_cat_names[HPT_CAT_COUNT] = {"params", "grads", "optim",
                                                       "acts", "workspace", "io"};

const char *hpt_category_name(hpt_category c) {
    return (unsigned)c < HPT_CAT_COUNT ? k_cat_names[c] : "?";
}

static uint64_t tier_total(const hpt_mem_stats *st, int tier) {
    uint64_t s = 0;
    for (int c = 0; c < HPT_CAT_COUNT; c++) s += st->live_bytes[tier][c];
    return s;
}

/* Appends an event if recording. A failed growth stops recording (the timeline is then
 * incomplete, which hpt_mem_events cannot hide: the caller sees fewer events), but never
 * fails the allocation it describes. */
static void emit(hpt_mem *m, hpt_mem_event_kind kind, int tier, int dst, int cat, uint64_t bytes,
                 int in_arena, const char *name) {
    if (!m->recording) return;
    if (m->n_ev == m->cap_ev) {
        size_t cap = m->cap_ev ? m->cap_ev * 2 : 4096;
        hpt_mem_event *ev = realloc(m->ev, cap * sizeof *ev);
        if (!ev) { m->recording = 0; return; }
        m->ev = ev;
        m->cap_ev = cap;
    }
    hpt_mem_event *e = &m->ev[m->n_ev++];
    e->t = hpt_now() - m->t0;
    e->step = m->step;
    e->layer = m->layer;
    e->kind = (uint8_t)kind;
    e->tier = (uint8_t)tier;
    e->dst_tier = (uint8_t)dst;
    e->category = (uint8_t)cat;
    e->phase = (uint8_t)m->phase;
    e->in_arena = (uint8_t)in_arena;
    e->bytes = bytes;
    e->tier_live_bytes = tier_total(&m->st, tier);
    e->arena_live_bytes = m->arena_live;
    e->name = name;
}

void hpt_mem_record(hpt_mem *m, int on) {
    if (on) {
        m->n_ev = 0;
        m->t0 = hpt_now();
    }
    m->recording = on;
}

const hpt_mem_event *hpt_mem_events(const hpt_mem *m, size_t *n_out) {
    *n_out = m->n_ev;
    return m->ev;
}

void hpt_mem_set_context(hpt_mem *m, int64_t step, hpt_phase phase, int layer) {
    m->step = step;
    m->phase = phase;
    m->layer = layer;
}

void hpt_mem_set_layer(hpt_mem *m, int layer) { m->layer = layer; }
void hpt_mem_set_name(hpt_mem *m, const char *name) { m->next_name = name; }

void hpt_mem_arena_event(hpt_mem *m, hpt_category cat, size_t bytes, int born, const char *name) {
    if (born) m->arena_live += bytes;
    else m->arena_live -= bytes;
    emit(m, born ? HPT_EV_ALLOC : HPT_EV_FREE, HPT_TIER_DEVICE, HPT_TIER_DEVICE, cat, bytes, 1, name);
}

void hpt_mem_transfer(hpt_mem *m, hpt_tier src, hpt_tier dst, hpt_category cat, size_t bytes) {
    emit(m, HPT_EV_TRANSFER, src, dst, cat, bytes, 0, NULL);
}

/* ---- the live-block table (HPT_MEM_CHECK builds) ---- */
#if HPT_MEM_CHECK
static size_t block_slot(const hpt_mem *m, const void *p) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull; /* Fibonacci hashing */
    size_t mask = m->cap_blocks - 1, i = (size_t)(h >> 32) & mask;
    while (m->blocks[i].p && m->blocks[i].p != p) i = (i + 1) & mask;
    return i;
}

/* Records p; a failed growth only stops the checking (it never fails the allocation). */
static void block_add(hpt_mem *m, void *p, size_t bytes) {
    if (2 * (m->n_blocks + 1) > m->cap_blocks) {
        size_t cap = m->cap_blocks ? 2 * m->cap_blocks : 256;
        struct mem_block *old = m->blocks, *nb = calloc(cap, sizeof *nb);
        if (!nb) { m->blocks_lost = 1; return; }
        size_t old_cap = m->cap_blocks;
        m->blocks = nb;
        m->cap_blocks = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].p) m->blocks[block_slot(m, old[i].p)] = old[i];
        free(old);
    }
    size_t i = block_slot(m, p);
    m->blocks[i].p = p;
    m->blocks[i].bytes = bytes;
    m->n_blocks++;
}

/* A programmer's error, not a user's: the caller freed a block it does not own, or told the
 * wrong size. Fail loudly where it happens rather than report wrong peaks later. */
static void block_remove(hpt_mem *m, void *p, size_t bytes) {
    if (m->blocks_lost) return;
    size_t i = m->cap_blocks ? block_slot(m, p) : 0, mask = m->cap_blocks - 1;
    if (!m->cap_blocks || !m->blocks[i].p || m->blocks[i].bytes != bytes) {
        int known = m->cap_blocks && m->blocks[i].p;
        fprintf(stderr, "hpt_mem_free: %s %p (told %zu bytes, allocated %zu)\n",
                known ? "wrong size for block" : "unknown pointer", p, bytes,
                known ? m->blocks[i].bytes : (size_t)0);
        abort();
    }
    /* backward-shift deletion keeps every probe chain unbroken without tombstones */
    size_t j = i;
    for (;;) {
        m->blocks[i].p = NULL;
        for (;;) {
            j = (j + 1) & mask;
            if (!m->blocks[j].p) { m->n_blocks--; return; }
            uint64_t h = (uint64_t)(uintptr_t)m->blocks[j].p * 0x9e3779b97f4a7c15ull;
            size_t home = (size_t)(h >> 32) & mask;
            /* j's entry may move to i unless its home lies cyclically in (i, j] */
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j)) break;
        }
        m->blocks[i] = m->blocks[j];
        i = j;
    }
}
#endif

int hpt_mem_checks_frees(void) { return HPT_MEM_CHECK; }

hpt_status hpt_mem_create(hpt_mem **out) {
    hpt_mem *m = calloc(1, sizeof *m);
    if (!m) return hpt_fail(HPT_ERR_OOM, "cannot allocate the memory manager");
    m->st.version = HPT_MEM_STATS_VERSION;
    m->layer = -1;
    m->phase = HPT_PHASE_SETUP;
    *out = m;
    return HPT_OK;
}

void hpt_mem_destroy(hpt_mem *m) {
    if (!m) return;
    if (m->bounce) hpt_mem_free(m, HPT_TIER_HOST, HPT_CAT_IO, m->bounce, 4u << 20);
    free(m->ev);
#if HPT_MEM_CHECK
    free(m->blocks);
#endif
    free(m);
}

void hpt_mem_set_budget(hpt_mem *m, hpt_tier tier, uint64_t bytes) {
    if ((unsigned)tier < HPT_TIER_COUNT) m->st.budget_bytes[tier] = bytes;
}

void mem_set_device(hpt_mem *m, int device) { m->device = device; }
int mem_device(const hpt_mem *m) { return m ? m->device : 0; }

void hpt_mem_fail_nth(hpt_mem *m, uint64_t n) { m->fail_countdown = n; }

static hpt_status refuse(hpt_mem *m, hpt_tier tier, hpt_category cat, size_t bytes,
                         const char *why) {
    m->st.n_refused++;
    emit(m, HPT_EV_REFUSED, tier, tier, cat, bytes, 0, m->next_name);
    m->next_name = NULL;
    char detail[512];
    int n = 0;
    for (int c = 0; c < HPT_CAT_COUNT && n < (int)sizeof detail; c++)
        n += snprintf(detail + n, sizeof detail - (size_t)n, "%s%s %.1f MiB", c ? ", " : "",
                      k_cat_names[c], (double)m->st.live_bytes[tier][c] / 1048576.0);
    return hpt_fail(HPT_ERR_OOM,
                    "%s tier: %s request of %.1f MiB (%zu bytes) refused (%s); live %.1f MiB "
                    "of budget %.1f MiB: %s",
                    hpt_tier_name(tier), k_cat_names[cat], (double)bytes / 1048576.0, bytes, why,
                    (double)tier_total(&m->st, tier) / 1048576.0,
                    (double)m->st.budget_bytes[tier] / 1048576.0, detail);
}

hpt_status mem_reserve(hpt_mem *m, hpt_tier tier, hpt_category cat, size_t bytes) {
    if ((unsigned)tier >= HPT_TIER_COUNT || (unsigned)cat >= HPT_CAT_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "bad tier %d or category %d", (int)tier, (int)cat);
    if (m->fail_countdown && --m->fail_countdown == 0) return refuse(m, tier, cat, bytes, "injected failure");
    uint64_t total = tier_total(&m->st, tier);
    uint64_t budget = m->st.budget_bytes[tier];
    if (budget && (bytes > budget || total > budget - bytes))
        return refuse(m, tier, cat, bytes, "over budget");
    m->st.live_bytes[tier][cat] += bytes;
    m->st.n_allocs++;
    total += bytes;
    if (total > m->st.peak_bytes[tier]) {
        m->st.peak_bytes[tier] = total;
        memcpy(m->st.peak_live_bytes[tier], m->st.live_bytes[tier], sizeof m->st.live_bytes[tier]);
    }
    emit(m, HPT_EV_ALLOC, tier, tier, cat, bytes, 0, m->next_name);
    m->next_name = NULL;
    return HPT_OK;
}

void mem_unreserve(hpt_mem *m, hpt_tier tier, hpt_category cat, size_t bytes) {
    m->st.live_bytes[tier][cat] -= bytes;
    m->st.n_frees++;
    emit(m, HPT_EV_FREE, tier, tier, cat, bytes, 0, NULL);
}

hpt_status hpt_mem_alloc(hpt_mem *m, hpt_tier tier, hpt_category cat, size_t bytes,
                         void **out) {
    *out = NULL;
    if (tier == HPT_TIER_DISK)
        return hpt_fail(HPT_ERR_INVALID, "the disk tier is not addressable: use hpt_mem_disk_alloc");
    if (bytes == 0) {
        m->next_name = NULL;
        return HPT_OK;
    }
    HPT_CHECK(mem_reserve(m, tier, cat, bytes));
    /* page alignment for blocks of a page or more: the disk tier's direct I/O needs it; blocks
     * of 4 MiB or more on 2 MiB pages where the kernel gives them (madvise before the first
     * touch): the GEMMs' and the optimizer's streams over weights, gradients and moments
     * otherwise miss the TLB every 4 KiB (docs/benchmarks.md, "Fifth pass") */
    int huge = bytes >= ((size_t)4 << 20);
    size_t align = bytes >= 4096 ? 4096 : 64;
    size_t rounded = (bytes + align - 1) & ~(align - 1); /* the bytes touched: no more with huge */
    void *p = NULL;
    if (posix_memalign(&p, huge ? (size_t)2 << 20 : align, rounded) != 0 || !p) {
        mem_unreserve(m, tier, cat, bytes); /* the timeline sees an alloc undone by a free */
        return refuse(m, tier, cat, bytes, "operating system refused");
    }
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice: refused or not, the same */
#endif
    memset(p, 0, rounded);
#if HPT_MEM_CHECK
    block_add(m, p, bytes);
#endif
    *out = p;
    return HPT_OK;
}

void hpt_mem_free(hpt_mem *m, hpt_tier tier, hpt_category cat, void *p, size_t bytes) {
    if (!p) return;
#if HPT_MEM_CHECK
    block_remove(m, p, bytes);
#endif
    mem_unreserve(m, tier, cat, bytes);
    free(p);
}

void hpt_mem_get_stats(const hpt_mem *m, hpt_mem_stats *out) { *out = m->st; }

void hpt_mem_reset_peak(hpt_mem *m) {
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        m->st.peak_bytes[t] = tier_total(&m->st, t);
        memcpy(m->st.peak_live_bytes[t], m->st.live_bytes[t], sizeof m->st.live_bytes[t]);
    }
}
