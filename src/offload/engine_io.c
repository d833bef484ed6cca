/* engine_io.c: the offload engine's transfers, timed and counted by direction (disk reads,
 * disk writes, host copies) where they run, and the compute thread's waits by what the job it
 * waited on was doing. The planner takes the engine's own disk rates from these counters
 * (docs/planner.md: a disk's rate measured standalone differs from what the engine sees).
 *
 * Invariants: the byte and nanosecond counters are added atomically by the thread doing the
 * transfer (the worker; a checkpoint's gather on the compute thread too), so reading them
 * needs no lock; busy_t0 is only the worker's (one disk transfer in flight at a time); the
 * wait counters are written under e->mu by the compute thread. Nothing here changes a bit of
 * what moves: each entry does the transfer it wraps, then counts it. */
#include "offload/engine_int.h"

static _Thread_local int t_busy; /* 1 while this thread owns busy_t0 */

static uint64_t now_ns(void) { return (uint64_t)(hpt_now() * 1e9); }

static void add(offload_engine *e, int k, uint64_t ns, size_t bytes) {
    __atomic_add_fetch(&e->io.ns[k], ns, __ATOMIC_RELAXED);
    __atomic_add_fetch(&e->io.bytes[k], (uint64_t)bytes, __ATOMIC_RELAXED);
}

hpt_status eng_disk_rw(offload_engine *e, const hpt_disk_ref *ref, uint64_t off, void *buf,
                       size_t len, int write_) {
    uint64_t t0 = now_ns();
    /* the first thread to start a transfer marks the disk busy (for eng_disk_busy_s) */
    uint64_t zero = 0;
    t_busy = __atomic_compare_exchange_n(&e->io.busy_t0, &zero, t0, 0, __ATOMIC_RELAXED,
                                         __ATOMIC_RELAXED);
    hpt_status s = mem_disk_rw(e->mem, ref, off, buf, len, write_);
    uint64_t t1 = now_ns();
    add(e, write_ ? ECTR_DISK_WRITE : ECTR_DISK_READ, t1 - t0, len);
    if (t_busy) __atomic_store_n(&e->io.busy_t0, 0, __ATOMIC_RELAXED);
    t_busy = 0;
    return s;
}

void eng_host_copy(offload_engine *e, void *dst, const void *src, size_t bytes, hpt_copy_kind k) {
    uint64_t t0 = now_ns();
    e->be->copy(dst, src, bytes, k);
    add(e, ECTR_HOST_COPY, now_ns() - t0, bytes);
}

double eng_disk_busy_s(offload_engine *e) {
    uint64_t t0 = __atomic_load_n(&e->io.busy_t0, __ATOMIC_RELAXED);
    uint64_t ns = __atomic_load_n(&e->io.ns[ECTR_DISK_READ], __ATOMIC_RELAXED) +
                  __atomic_load_n(&e->io.ns[ECTR_DISK_WRITE], __ATOMIC_RELAXED);
    uint64_t n = now_ns();
    /* a transfer in flight counts from its start (its end adds it to ns[] and clears t0: a
     * read between the two may count it twice for a moment; the waits' share stays small) */
    return (double)(ns + (t0 && n > t0 ? n - t0 : 0)) * 1e-9;
}

/* The class of what job j does: where its bytes go (disk writes first, then disk reads,
 * then host copies), or an in-memory update. */
static int job_class(const offload_engine *e, const job *j) {
    switch (j->kind) {
    case J_LOAD:
        return e->tier[EB_P] == HPT_TIER_DISK ? ECTR_DISK_READ : ECTR_HOST_COPY;
    case J_WRITE_G:
        return e->tier[EB_G] == HPT_TIER_DISK ? ECTR_DISK_WRITE : ECTR_HOST_COPY;
    case J_READ_G:
        return e->tier[EB_G] == HPT_TIER_DISK ? ECTR_DISK_READ : ECTR_HOST_COPY;
    case J_READ:
    case J_READ_MV:
        return ECTR_DISK_READ;
    case J_WRITE:
    case J_WRITE_PMV:
        return ECTR_DISK_WRITE;
    default:
        return ECTR_UPDATE;
    }
}

void eng_io_waited(offload_engine *e, const job *j, double w, double d) {
    e->io.wait_s[job_class(e, j)] += w;
    e->io.disk_in_wait_s += d < w ? d : w;
}

void eng_io_stats(const offload_engine *e, hpt_offload_stats *st) {
    offload_engine *m = (offload_engine *)(uintptr_t)e;
    uint64_t ns[3], by[3];
    for (int k = 0; k < 3; k++) {
        ns[k] = __atomic_load_n(&m->io.ns[k], __ATOMIC_RELAXED);
        by[k] = __atomic_load_n(&m->io.bytes[k], __ATOMIC_RELAXED);
    }
    st->disk_read_bytes = by[ECTR_DISK_READ], st->disk_write_bytes = by[ECTR_DISK_WRITE];
    st->host_copy_bytes = by[ECTR_HOST_COPY];
    st->disk_read_s = (double)ns[ECTR_DISK_READ] * 1e-9;
    st->disk_write_s = (double)ns[ECTR_DISK_WRITE] * 1e-9;
    st->host_copy_s = (double)ns[ECTR_HOST_COPY] * 1e-9;
    double beside = st->disk_read_s + st->disk_write_s - e->io.disk_in_wait_s;
    st->disk_beside_s = beside > 0 ? beside : 0;
    st->wait_disk_read_s = e->io.wait_s[ECTR_DISK_READ];
    st->wait_disk_write_s = e->io.wait_s[ECTR_DISK_WRITE];
    st->wait_host_s = e->io.wait_s[ECTR_HOST_COPY];
    st->wait_update_s = e->io.wait_s[ECTR_UPDATE];
}
