/* transfer_check.c: the checking CPU transfers (kernels/backend.h, "transfers"; docs/testing.md,
 * "The checking transfer table"). A copy does not run when copy_async returns: it is queued on
 * its stream and its destination is filled with NaN bytes (0xff), and it runs only when the
 * order the table promises makes it due: stream_wait(COMPUTE, ev) or host_wait(ev) runs the
 * copies ev covers, in issue order; a copy on LOAD or STORE never runs before the copies its
 * stream was made to wait for (stream_wait(LOAD|STORE, ev)) nor before its stream's earlier ones.
 * So code that reads a destination before waiting reads NaN, and code that overwrites a source
 * before waiting changes what is copied: a missing record or wait shows up as a wrong result.
 * The order is a vector clock: copies are numbered per stream (1, 2, ...); an event holds, per
 * stream, the last copy it covers; each stream holds the copies its later work must follow.
 * Errors (a programmer's, so reported, by default with a message and abort()): a copy on the
 * COMPUTE stream; a copy whose bytes overlap those of a queued copy not ordered before it (a
 * race on a GPU); memory freed (the CPU backend's free) under a queued copy; a copy still queued
 * at exit. Invariant: g_q holds the queued copies, in issue order; all state is under g_mu. */
#include "core/core.h"
#include "kernels/backend.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hpt_xevent {
    uint64_t vec[HPT_XS_COUNT]; /* the last copy of each stream that this event covers */
};

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    int s;                      /* HPT_XS_LOAD or HPT_XS_STORE */
    uint64_t idx;               /* 1-based, per stream */
    uint64_t dep[HPT_XS_COUNT]; /* copies of each other stream that must run first */
    int done;
} xcopy;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static xcopy *g_q;                              /* queued copies, issue order */
static size_t g_n, g_cap;
static uint64_t g_issued[HPT_XS_COUNT];          /* copies issued per stream */
static uint64_t g_clock[HPT_XS_COUNT][HPT_XS_COUNT]; /* [s][r]: s's later work follows r's copies up to */
static int g_used;                               /* the atexit check is registered */
static void (*g_on_error)(const char *msg);      /* NULL: print and abort */

static const char *k_sname[HPT_XS_COUNT] = {"COMPUTE", "LOAD", "STORE"};

static void report(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (g_on_error) {
        g_on_error(msg);
        return;
    }
    fprintf(stderr, "hptrain transfer check: %s\n", msg);
    abort();
}

static int overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

/* Copy c must run before work of stream s whose clock is dep (c on s: its stream order). */
static int ordered_before(const xcopy *c, int s, const uint64_t dep[HPT_XS_COUNT]) {
    return c->s == s || c->idx <= dep[c->s];
}

static void run_upto(int s, uint64_t k);

static void run_one(xcopy *c) {
    if (c->done) return;
    run_upto(c->s, c->idx - 1); /* its stream's earlier copies */
    for (int r = 0; r < HPT_XS_COUNT; r++)
        if (r != c->s) run_upto(r, c->dep[r]);
    memcpy(c->dst, c->src, c->bytes);
    c->done = 1;
}

/* Runs stream s's queued copies numbered k and below, in order, each after its dependencies. */
static void run_upto(int s, uint64_t k) {
    if (s == HPT_XS_COMPUTE) return; /* no copies: the CPU's compute is done when issued */
    for (size_t i = 0; i < g_n; i++)
        if (!g_q[i].done && g_q[i].s == s && g_q[i].idx <= k) run_one(&g_q[i]);
}

static void compact(void) {
    size_t j = 0;
    for (size_t i = 0; i < g_n; i++)
        if (!g_q[i].done) g_q[j++] = g_q[i];
    g_n = j;
}

static void at_exit_check(void) {
    pthread_mutex_lock(&g_mu);
    compact();
    size_t n = g_n;
    const xcopy c = n ? g_q[0] : (xcopy){0};
    pthread_mutex_unlock(&g_mu);
    if (n)
        report("%zu copies still queued at exit (never waited for), the first %zu bytes %p -> %p "
               "on %s", n, c.bytes, c.src, c.dst, k_sname[c.s]);
}

static hpt_status chk_event_create(hpt_xevent **out) {
    *out = calloc(1, sizeof **out); /* host metadata, as a CUDA event's */
    return *out ? HPT_OK : hpt_fail(HPT_ERR_OOM, "a transfer event");
}

static void chk_event_destroy(hpt_xevent *ev) { free(ev); }

static void chk_copy_async(void *dst, const void *src, size_t bytes, hpt_copy_kind kind,
                           hpt_xstream s) {
    (void)kind;
    if (!bytes) return;
    pthread_mutex_lock(&g_mu);
    if (!__atomic_load_n(&g_used, __ATOMIC_RELAXED)) {
        __atomic_store_n(&g_used, 1, __ATOMIC_RELAXED);
        atexit(at_exit_check);
    }
    if (s != HPT_XS_LOAD && s != HPT_XS_STORE) {
        pthread_mutex_unlock(&g_mu);
        report("copy_async on the %s stream (copies go on LOAD or STORE)", k_sname[s]);
        return;
    }
    if (overlap(dst, bytes, src, bytes)) {
        pthread_mutex_unlock(&g_mu);
        report("copy_async of %zu bytes %p -> %p: source and destination overlap", bytes, src, dst);
        return;
    }
    xcopy c = {dst, src, bytes, (int)s, g_issued[s] + 1, {0}, 0};
    memcpy(c.dep, g_clock[s], sizeof c.dep);
    /* a queued copy that reads or writes our destination, or writes our source: ordered before
     * us it runs now when it touches the destination (before the poison); unordered it races */
    for (size_t i = 0; i < g_n; i++) {
        xcopy *p = &g_q[i];
        if (p->done) continue;
        const int war = overlap(p->src, p->bytes, dst, bytes), waw = overlap(p->dst, p->bytes, dst, bytes);
        const int raw = overlap(p->dst, p->bytes, src, bytes);
        if (!war && !waw && !raw) continue;
        if (!ordered_before(p, (int)s, c.dep)) {
            const xcopy q = *p;
            pthread_mutex_unlock(&g_mu);
            report("a copy of %zu bytes %p -> %p on %s overlaps the queued copy of %zu bytes %p -> "
                   "%p on %s (%s), which no event orders before it", bytes, src, dst, k_sname[s],
                   q.bytes, q.src, q.dst, k_sname[q.s],
                   war ? "it writes that copy's source" : waw ? "both write the same bytes"
                                                          : "it reads that copy's destination");
            return;
        }
        if (war || waw) run_one(p);
    }
    if (g_n == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 64;
        xcopy *q = realloc(g_q, cap * sizeof *q);
        if (!q) { /* the checker's own metadata: copying at once keeps the results */
            pthread_mutex_unlock(&g_mu);
            memcpy(dst, src, bytes);
            return;
        }
        g_q = q, g_cap = cap;
    }
    g_issued[s]++;
    memset(dst, 0xff, bytes); /* NaN in fp32, bf16 and fp16 until the copy runs */
    g_q[g_n++] = c;
    compact();
    pthread_mutex_unlock(&g_mu);
}

static void chk_record(hpt_xevent *ev, hpt_xstream s) {
    pthread_mutex_lock(&g_mu);
    memcpy(ev->vec, g_clock[s], sizeof ev->vec);
    if (s != HPT_XS_COMPUTE) ev->vec[s] = g_issued[s];
    pthread_mutex_unlock(&g_mu);
}

static void chk_stream_wait(hpt_xstream s, hpt_xevent *ev) {
    pthread_mutex_lock(&g_mu);
    for (int r = 0; r < HPT_XS_COUNT; r++)
        if (ev->vec[r] > g_clock[s][r]) g_clock[s][r] = ev->vec[r];
    if (s == HPT_XS_COMPUTE) { /* the compute issued from now on reads what ev covers */
        for (int r = 0; r < HPT_XS_COUNT; r++) run_upto(r, ev->vec[r]);
        compact();
    }
    pthread_mutex_unlock(&g_mu);
}

static void chk_host_wait(hpt_xevent *ev) {
    hpt_be_note_trip(); /* a GPU's host waits here (backend.h, "host round trips") */
    pthread_mutex_lock(&g_mu);
    for (int r = 0; r < HPT_XS_COUNT; r++) run_upto(r, ev->vec[r]);
    compact();
    pthread_mutex_unlock(&g_mu);
}

static const hpt_transfer g_check = {"cpu-check", 1, chk_event_create, chk_event_destroy,
                                     chk_copy_async, chk_record, chk_stream_wait, chk_host_wait,
                                     NULL};

const hpt_transfer *hpt_transfer_check(void) { return &g_check; }

void hpt_transfer_check_sync(void) {
    if (!__atomic_load_n(&g_used, __ATOMIC_RELAXED)) return; /* never used: nothing queued */
    pthread_mutex_lock(&g_mu);
    for (int r = 0; r < HPT_XS_COUNT; r++) run_upto(r, g_issued[r]);
    compact();
    pthread_mutex_unlock(&g_mu);
}

void hpt_transfer_check_freed(const void *p, size_t bytes) {
    if (!p || !__atomic_load_n(&g_used, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++) {
        const xcopy c = g_q[i];
        if (c.done || (!overlap(c.src, c.bytes, p, bytes) && !overlap(c.dst, c.bytes, p, bytes)))
            continue;
        pthread_mutex_unlock(&g_mu);
        report("%zu bytes at %p freed under a queued copy of %zu bytes %p -> %p on %s (never "
               "waited for)", bytes, p, c.bytes, c.src, c.dst, k_sname[c.s]);
        return;
    }
    pthread_mutex_unlock(&g_mu);
}

size_t hpt_transfer_check_queued(void) {
    pthread_mutex_lock(&g_mu);
    compact();
    size_t n = g_n;
    pthread_mutex_unlock(&g_mu);
    return n;
}

void hpt_transfer_check_on_error(void (*fn)(const char *msg)) {
    pthread_mutex_lock(&g_mu);
    g_on_error = fn;
    pthread_mutex_unlock(&g_mu);
}

void hpt_transfer_check_reset(void) {
    pthread_mutex_lock(&g_mu);
    g_n = 0;
    memset(g_clock, 0, sizeof g_clock);
    pthread_mutex_unlock(&g_mu);
}

int hpt_transfer_check_env(void) {
    const char *v = getenv("HPT_TRANSFER_CHECK");
    return v && v[0] == '1' && !v[1];
}
