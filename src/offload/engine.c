/* engine.c: the offload engine. Each block's parameters, gradients and AdamW moments live in a
 * home tier (device, host or disk), block-major, a block one aligned transfer; K device slots
 * hold the block computing and up to P ahead, loaded by one worker running a FIFO queue of jobs
 * (loads, write-backs, updates, streaming reads and writes), so a job sees every write queued
 * before it. bf16 weight homes, 16-bit gradient homes, the fused and the streaming update, the
 * inline worker of the CPU backend: docs/offload.md, which also has this diagram.
 *
 * Residency of a block's parameters (res[l]); every transition is made by the compute thread,
 * in the function named:
 *
 *            schedule_load               reap (load done)
 *     HOME ----------------> LOADING -----------------------> RESIDENT <------------+
 *      ^                                                      |   |                  |
 *      |   choose_slot (evict: no write, the home is current)  |   | eng_grads_done   | reap
 *      +-------------------------------------------------------+   v (fused: update | (update and
 *      |                                                         DIRTY   queued, or | write-back
 *      |   choose_slot (evict: the queued write-back runs first;   |  done and its  | done)
 *      +---------- FIFO orders any later load after it) -----------+  write-back    |
 *      |                                                           |  queued) ------+
 *      |
 *      |   eng_stream_update (exact mode: slots invalidated, then per block:
 *      |   read into staging -> update -> WRITING_BACK queued -> reap -> HOME)
 *      +--- reap <-- WRITING_BACK <-- eng_stream_update
 *
 * Invariants: at most one block is held by the compute thread (in_use), and its slot is never
 * chosen for eviction; at most K blocks have a slot; slot_of and slot_blk are inverse; the
 * worker never allocates, never records timeline events and touches only what its job names;
 * the first worker error is sticky (every later call returns it), so nothing is written over a
 * good checkpoint. engine_int.h: the record, jobs, states; engine_gather.c, engine_opts.c. */
#include "offload/engine_int.h"

#include <omp.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_home_name[EB_COUNT] = {"block parameters (home)", "block gradients (home)",
                                                  "block m (home)", "block v (home)"};

/* Whether the jobs run inline (push runs each on the compute thread and its team): on the CPU
 * backend with no disk home every job is CPU work, and a third busy thread on the team's cores
 * preempts one of its threads, whose partner sleeps at the next barrier and lends its core to
 * other processes (docs/benchmarks.md, "Fourth pass"). HPT_ENGINE_WORKER=thread|inline forces
 * either. The same jobs, order and kernels (bits independent of the thread count). */
static int inline_jobs(const offload_engine *e) {
    if (strcmp(e->be->name, "cpu") != 0) return 0;
    const char *env = getenv("HPT_ENGINE_WORKER");
    if (env && !strcmp(env, "thread")) return 0;
    if (env && !strcmp(env, "inline")) return 1;
    return e->o.params != HPT_TIER_DISK && e->o.grads != HPT_TIER_DISK &&
           e->o.optim != HPT_TIER_DISK && e->o.shards <= 1;
}

/* ---- worker ---------------------------------------------------------------------------- */

static size_t home_bytes_moved(const offload_engine *e, int b) {
    if (b == EB_G && e->gh)
        return (e->tier[b] == HPT_TIER_DISK ? e->ghs : e->zhi - e->zlo) * sizeof(uint16_t);
    if (b == EB_P && e->bf) return (e->bfd ? e->hstride : eng_hn(e, b)) * sizeof(uint16_t);
    return (e->tier[b] == HPT_TIER_DISK ? eng_hstr(e, b) : eng_hn(e, b)) * sizeof(float);
}

/* Copies block l of buffer b between its home and mem (disk: the aligned stride). */
static hpt_status home_io(offload_engine *e, int b, int l, float *mem, int write_) {
    if (b == EB_P && e->bf) { /* bf16 weights are only read (widened): updates write the home */
        if (!e->bfd) { /* over the calling thread's team; ZeRO-3: a shard */
            e->be->bf16_widen_par(mem, e->wh + (size_t)l * e->hstride, eng_hn(e, b));
            return HPT_OK;
        }
        /* read into mem's start, widened in place (ZeRO-3: a shard, into the bounce buffer) */
        HPT_CHECK(eng_disk_rw(e, &e->disk[EB_P], (uint64_t)l * e->hstride * sizeof(uint16_t),
                              mem, e->hstride * sizeof(uint16_t), 0));
        e->be->bf16_widen(mem, (const uint16_t *)mem, eng_hn(e, b));
        return HPT_OK;
    }
    if (e->tier[b] == HPT_TIER_DISK)
        return eng_disk_rw(e, &e->disk[b], (uint64_t)l * eng_hstr(e, b) * sizeof(float), mem,
                           eng_hstr(e, b) * sizeof(float), write_);
    float *h = e->home[b] + (size_t)l * eng_hstr(e, b);
    size_t n = eng_hn(e, b) * sizeof(float);
    int host = e->tier[b] == HPT_TIER_HOST; /* mem is a device slot here (staging serves disk) */
    if (write_) eng_host_copy(e, h, mem, n, host ? HPT_COPY_D2H : HPT_COPY_D2D);
    else eng_host_copy(e, mem, h, n, host ? HPT_COPY_H2D : HPT_COPY_D2D);
    return HPT_OK;
}

hpt_status eng_home_io(offload_engine *e, int b, int l, float *mem, int write_) {
    return home_io(e, b, l, mem, write_);
}

/* Block l of fp32 buffer b between its home and a slot (a whole block): home_io, or with a
 * sharded home the slot's range [zlo, zhi), through the bounce buffer for a disk home. */
static hpt_status slot_io(offload_engine *e, int b, int l, float *slot, int write_) {
    return eng_shard_home(e, b) ? eng_z3_slot_io(e, b, l, slot, write_) : home_io(e, b, l, slot, write_);
}

/* bfd: block l's bf16 weights between disk and staging block set. */
hpt_status eng_bstage_io(offload_engine *e, int l, int set, int write_) {
    return eng_disk_rw(e, &e->disk[EB_P], (uint64_t)l * e->hstride * sizeof(uint16_t),
                       e->bstage + (size_t)set * e->hstride, e->hstride * sizeof(uint16_t), write_);
}

/* bfd, fused: block l's bf16 weights into staging set from its slot, which holds them widened
 * (exactly: rounding a widened bf16 value gives it back), so the update needs no disk read.
 * ZeRO-3: the shard, from the slot's range [zlo, zhi). */
static void bstage_from_slot(offload_engine *e, int set, const float *slot) {
    uint16_t *h = e->bstage + (size_t)set * e->hstride;
    size_t n = eng_hn(e, EB_P);
    e->be->bf16_split(h, NULL, slot + (eng_shard_home(e, EB_P) ? e->zlo : 0), n);
    e->be->memset(h + n, 0, (e->hstride - n) * sizeof(uint16_t));
}

static float *slot_ptr(const offload_engine *e, int s) { return e->slots + (size_t)s * e->stride; }
static float *gslot_ptr(const offload_engine *e, int g) { return e->gslots + (size_t)g * e->stride; }

/* Block l's gradients between gradient slot g and their home: fp32 as home_io; a 16-bit home
 * narrowed into (*ovf: an overflow) or widened from, in place in the slot for a disk home. With
 * ZeRO only this rank's range [zlo, zhi) (the owner's sums): into a sharded home's block (stages
 * 2, 3) or at its place in a whole one (stage 1), so only summed values are narrowed and
 * checked for overflow. */
static hpt_status grad_io(offload_engine *e, int l, float *g, int write_, int *ovf) {
    if (!e->gh) return slot_io(e, EB_G, l, g, write_);
    int f16 = e->gh == HPT_GH_FP16, disk = e->tier[EB_G] == HPT_TIER_DISK;
    size_t a = e->zlo, n = e->zhi - e->zlo, at = eng_shard_home(e, EB_G) ? 0 : a;
    uint16_t *h0 = disk ? (uint16_t *)(void *)g : e->ghome + (size_t)l * e->ghs, *h = h0 + at;
    uint64_t off = (uint64_t)l * e->ghs * sizeof(uint16_t);
    size_t len = e->ghs * sizeof(uint16_t);
    if (write_) { /* in place: each half lands at or before the float it comes from */
        *ovf = f16 ? e->be->f16_narrow(h, g + a, n) : e->be->bf16_narrow(h, g + a, n);
        return disk ? eng_disk_rw(e, &e->disk[EB_G], off, h0, len, 1) : HPT_OK;
    }
    if (disk) HPT_CHECK(eng_disk_rw(e, &e->disk[EB_G], off, h0, len, 0));
    if (f16) e->be->f16_widen(g + a, h, n);
    else e->be->bf16_widen(g + a, h, n);
    return HPT_OK;
}

/* Where block l of buffer b is read and written during an update: its memory home, or the
 * staging set's buffer when it lives on disk; NULL when the buffer has no home (m and v kept
 * by the optimizer) or is not fp32 (bf16 weights: update_block names their home). With ZeRO it
 * points at this rank's first value, zlo (a whole home's block + zlo). */
static float *update_ptr(const offload_engine *e, int b, int l, int set) {
    if (!e->has[b] || (b == EB_P && e->bf)) return NULL;
    size_t o = eng_shard_home(e, b) ? 0 : e->zlo;
    return (e->tier[b] == HPT_TIER_DISK ? e->stage_ptr[set][b] : e->home[b] + (size_t)l * eng_hstr(e, b)) + o;
}

/* Block l's gradients as the update reads them (set: the staging set of this block): the fp32
 * home or staging itself, or a 16-bit home (or its staging) widened into gradient slot set. */
static const float *update_grads(offload_engine *e, int l, int set) {
    if (!e->gh) return update_ptr(e, EB_G, l, set);
    const uint16_t *h = e->tier[EB_G] == HPT_TIER_DISK ? (const uint16_t *)(void *)e->stage_ptr[set][EB_G]
                                                       : e->ghome + (size_t)l * e->ghs;
    float *g = gslot_ptr(e, set); /* ZeRO: this rank's range, from its first value */
    size_t n = e->zhi - e->zlo;
    if (!eng_shard_home(e, EB_G)) h += e->zlo;
    if (e->gh == HPT_GH_FP16) e->be->f16_widen(g, h, n);
    else e->be->bf16_widen(g, h, n);
    return g;
}

static _Thread_local int t_worker; /* 1 on an engine's worker thread */

/* Block l's update, slice by slice; m and v NULL when the optimizer keeps its state. p is
 * the fp32 weights (unused with bf16 weights: the update rewrites their home, or with bfd the
 * staging block of set, read before and written back after). */
static void update_block(offload_engine *e, int l, int set, float *p, const float *g, float *m,
                         float *v) {
    uint16_t *wh = e->bfd ? e->bstage + (size_t)set * e->hstride : e->wh + (size_t)l * e->hstride;
    for (int i = 0; i < e->ns; i++) {
        /* this rank's part of the slice: all of it, or with ZeRO-3 its intersection with the
         * shard [zlo, zhi) (p, g, m, v then point at the shard's first value) */
        size_t a = HPT_MAX(e->slice_off[i], e->zlo), z = HPT_MIN(e->slice_off[i] + e->slice_n[i], e->zhi);
        if (a >= z) continue;
        /* the worker's update: one thread while the compute thread computes, its team's cores
         * while it waits for a job (the update kernels give the same bits on any count) */
        if (t_worker) {
            int team = __atomic_load_n(&e->waiting, __ATOMIC_RELAXED);
            omp_set_num_threads(eng_gpu_team(e, team));
        }
        size_t o = a - e->zlo, ow = eng_shard_home(e, EB_P) ? o : a; /* the bf16 home's place */
        hpt_be_param kp = hpt_be_param_f32(p ? p + o : NULL);
        if (e->bf) /* base: the element's index among the blocks' weights (noise, not layout:
                    * with ZeRO-3 the one process's index, not the shard's) */
            kp = (hpt_be_param){NULL, wh + ow, e->wc ? e->wc + eng_comp_at(e, l, a) : NULL, 0,
                                (size_t)l * e->bn + a};
        e->upd(e->upd_ctx, l, i, a - e->slice_off[i], kp, g + o, m ? m + o : NULL,
               v ? v + o : NULL, z - a);
    }
}

/* After block l's update: its slot's copy made current again (fp32: written to its home;
 * bf16: widened again from the home the update wrote; bfd: from staging set, written home). */
static hpt_status after_update(offload_engine *e, int l, float *slot, int set) {
    if (!e->bfd) return slot_io(e, EB_P, l, slot, !e->bf); /* bf16: widened (ZeRO-3: its range) */
    HPT_CHECK(eng_bstage_io(e, l, set, 1));
    e->be->bf16_widen(slot + (eng_shard_home(e, EB_P) ? e->zlo : 0), e->bstage + (size_t)set * e->hstride,
                      eng_hn(e, EB_P));
    return HPT_OK;
}

static hpt_status run_job(offload_engine *e, const job *j, double *io_s, double *upd_s, int *ovf) {
    double t0 = hpt_now();
    switch (j->kind) {
    case J_LOAD: /* bf16 host homes on a GPU: a copy on the LOAD stream, widened at acquire */
        if (!eng_gpu_load_issue(e, j->l, j->slot)) HPT_CHECK(slot_io(e, EB_P, j->l, slot_ptr(e, j->slot), 0));
        break;
    case J_WRITE_G:
        if (j->set) HPT_CHECK(eng_grad_add_home(e, j->l, gslot_ptr(e, j->g))); /* apart sum */
        HPT_CHECK(grad_io(e, j->l, gslot_ptr(e, j->g), 1, ovf));
        break;
    case J_READ_G:
        HPT_CHECK(grad_io(e, j->l, gslot_ptr(e, j->g), 0, ovf));
        break;
    case J_UPDATE: { /* m and v in memory: the update runs here, where they live */
        /* slot -1: bf16 weights whose slot was given up (eng_grads_done): only the home */
        float *p = e->zc ? e->home[EB_P] + (size_t)j->l * e->stride
                         : j->slot >= 0 ? slot_ptr(e, j->slot) : NULL;
        if (e->bfd) bstage_from_slot(e, 0, p);
        update_block(e, j->l, 0, p ? p + e->zlo : NULL,
                     eng_gpu_grads(e, gslot_ptr(e, j->g), j->g) + e->zlo, update_ptr(e, EB_M, j->l, 0),
                     update_ptr(e, EB_V, j->l, 0));
        double t1 = hpt_now();
        *upd_s += t1 - t0;
        if (p && !e->zc) HPT_CHECK(after_update(e, j->l, p, 0));
        *io_s += hpt_now() - t1;
        return HPT_OK;
    }
    case J_READ_MV:
        for (int b = EB_M; b <= EB_V; b++) HPT_CHECK(home_io(e, b, j->l, e->stage_ptr[j->set][b], 0));
        break;
    case J_WRITE_PMV: /* ZeRO 1, 2 with m and v in memory: the weights alone */
        if (j->slot >= 0) HPT_CHECK(after_update(e, j->l, slot_ptr(e, j->slot), j->set));
        for (int b = EB_M; b <= EB_V && e->tier[b] == HPT_TIER_DISK; b++)
            HPT_CHECK(home_io(e, b, j->l, e->stage_ptr[j->set][b], 1));
        break;
    case J_READ:
        for (int b = 0; b < EB_COUNT; b++)
            if (e->has[b] && e->tier[b] == HPT_TIER_DISK && !(b == EB_P && e->bfd) &&
                !(b == EB_G && e->gh))
                HPT_CHECK(home_io(e, b, j->l, e->stage_ptr[j->set][b], 0));
        if (e->bfd) HPT_CHECK(eng_bstage_io(e, j->l, j->set, 0));
        if (e->gh && e->tier[EB_G] == HPT_TIER_DISK) /* the halves, widened by update_grads */
            HPT_CHECK(eng_disk_rw(e, &e->disk[EB_G],
                                  (uint64_t)j->l * e->ghs * sizeof(uint16_t),
                                  e->stage_ptr[j->set][EB_G], e->ghs * sizeof(uint16_t), 0));
        break;
    case J_WRITE:
        for (int b = 0; b < EB_COUNT; b++)
            if (b != EB_G && e->has[b] && e->tier[b] == HPT_TIER_DISK && !(b == EB_P && e->bfd))
                HPT_CHECK(home_io(e, b, j->l, e->stage_ptr[j->set][b], 1));
        if (e->bfd) HPT_CHECK(eng_bstage_io(e, j->l, j->set, 1));
        break;
    }
    *io_s += hpt_now() - t0;
    return HPT_OK;
}

/* Runs the oldest queued job and records its outcome (mu not held): the worker's loop body,
 * and the whole of push in inline mode. */
static void run_next(offload_engine *e) {
    pthread_mutex_lock(&e->mu);
    job *j = &e->q[e->done % QCAP];
    int failed = e->err != HPT_OK;
    pthread_mutex_unlock(&e->mu);
    double io = 0.0, up = 0.0;
    int ovf = 0;
    hpt_status s = failed ? HPT_ERR_IO : run_job(e, j, &io, &up, &ovf);
    pthread_mutex_lock(&e->mu);
    j->ok = !failed && s == HPT_OK;
    j->ovf = ovf;
    if (!failed && s != HPT_OK) {
        e->err = s;
        snprintf(e->err_msg, sizeof e->err_msg, "%s", hpt_last_error());
    }
    e->st.io_s += io;
    e->st.update_s += up;
    if (e->inl) e->st.wait_s += io + up; /* the compute thread ran it: nothing hidden */
    e->done++;
    pthread_cond_broadcast(&e->cv_done);
    pthread_mutex_unlock(&e->mu);
}

static void *worker(void *arg) {
    offload_engine *e = arg;
    t_worker = 1;
    omp_set_num_threads(1); /* the compute thread's team keeps the cores */
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        if (e->done == e->head) {
            pthread_cond_wait(&e->cv_work, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        run_next(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- the compute thread's side of the queue ------------------------------------------ */

static void transfer(offload_engine *e, hpt_tier src, hpt_tier dst, int b, size_t bytes) {
    if (src == dst) return; /* bf16 weights on the device widened into their slot */
    hpt_mem_transfer(e->mem, src, dst, k_cat[b], bytes);
    if (src != HPT_TIER_DEVICE && dst == HPT_TIER_DEVICE) e->st.bytes_in[src] += bytes;
    else if (src == HPT_TIER_DISK) e->st.bytes_in[src] += bytes;
    else e->st.bytes_out[dst] += bytes;
}

/* Records the transfers of the jobs completed since the last reap and makes their
 * residency transitions. */
static void reap(offload_engine *e) {
    uint64_t done;
    pthread_mutex_lock(&e->mu);
    done = e->done;
    pthread_mutex_unlock(&e->mu);
    for (; e->reaped < done; e->reaped++) {
        const job *j = &e->q[e->reaped % QCAP];
        if (!j->ok) continue;
        switch (j->kind) {
        case J_LOAD:
            transfer(e, e->tier[EB_P], HPT_TIER_DEVICE, EB_P, home_bytes_moved(e, EB_P));
            if (e->res[j->l] == RS_LOADING && e->slot_of[j->l] == j->slot) e->res[j->l] = RS_RESIDENT;
            break;
        case J_WRITE_G:
            if (j->set) transfer(e, e->tier[EB_G], HPT_TIER_DEVICE, EB_G, home_bytes_moved(e, EB_G));
            transfer(e, HPT_TIER_DEVICE, e->tier[EB_G], EB_G, home_bytes_moved(e, EB_G));
            e->g_over |= j->ovf;
            break;
        case J_READ_G:
            transfer(e, e->tier[EB_G], HPT_TIER_DEVICE, EB_G, home_bytes_moved(e, EB_G));
            break;
        case J_UPDATE:
        case J_WRITE_PMV:
            if (j->kind == J_WRITE_PMV && e->tier[EB_M] == HPT_TIER_DISK)
                for (int b = EB_M; b <= EB_V; b++)
                    transfer(e, HPT_TIER_HOST, HPT_TIER_DISK, b, home_bytes_moved(e, b));
            if (e->bfd) /* written from the staging block (filled from the slot) */
                transfer(e, HPT_TIER_HOST, HPT_TIER_DISK, EB_P, home_bytes_moved(e, EB_P));
            else if (e->tier[EB_P] != HPT_TIER_DEVICE)
                transfer(e, HPT_TIER_DEVICE, e->tier[EB_P], EB_P, home_bytes_moved(e, EB_P));
            if (e->res[j->l] == RS_DIRTY && e->slot_of[j->l] == j->slot) e->res[j->l] = RS_RESIDENT;
            break;
        case J_READ_MV:
            for (int b = EB_M; b <= EB_V; b++)
                transfer(e, HPT_TIER_DISK, HPT_TIER_HOST, b, home_bytes_moved(e, b));
            break;
        case J_READ:
            for (int b = 0; b < EB_COUNT; b++)
                if (e->has[b] && e->tier[b] == HPT_TIER_DISK)
                    transfer(e, HPT_TIER_DISK, HPT_TIER_HOST, b, home_bytes_moved(e, b));
            break;
        case J_WRITE:
            for (int b = 0; b < EB_COUNT; b++)
                if (b != EB_G && e->has[b] && e->tier[b] == HPT_TIER_DISK)
                    transfer(e, HPT_TIER_HOST, HPT_TIER_DISK, b, home_bytes_moved(e, b));
            if (e->res[j->l] == RS_WRITING_BACK) e->res[j->l] = RS_HOME;
            break;
        }
    }
}

static hpt_status sticky(offload_engine *e) {
    pthread_mutex_lock(&e->mu);
    hpt_status s = e->err;
    pthread_mutex_unlock(&e->mu);
    if (s == HPT_OK) return HPT_OK;
    return hpt_fail(s, "offload engine stopped: %s", e->err_msg);
}

/* Waits until job seq (0: none) is done; the engine's error if one happened. */
static hpt_status wait_seq(offload_engine *e, uint64_t seq) {
    if (!e->th_on && !e->inl) return HPT_OK; /* inline: every job is done, only reaped here */
    pthread_mutex_lock(&e->mu);
    if (e->done < seq) {
        double t0 = hpt_now(), d0 = eng_disk_busy_s(e);
        /* the worker may use our cores */
        __atomic_store_n(&e->waiting, omp_get_max_threads(), __ATOMIC_RELAXED);
        while (e->done < seq) pthread_cond_wait(&e->cv_done, &e->mu);
        __atomic_store_n(&e->waiting, 0, __ATOMIC_RELAXED);
        e->st.wait_s += hpt_now() - t0;
        eng_io_waited(e, &e->q[(seq - 1) % QCAP], hpt_now() - t0, eng_disk_busy_s(e) - d0);
    }
    pthread_mutex_unlock(&e->mu);
    reap(e);
    return sticky(e);
}

static uint64_t push(offload_engine *e, job j) {
    if (e->head - e->reaped >= QCAP) (void)wait_seq(e, e->head - QCAP + 1);
    pthread_mutex_lock(&e->mu);
    j.ok = j.ovf = 0;
    e->q[e->head % QCAP] = j;
    uint64_t seq = ++e->head;
    pthread_cond_signal(&e->cv_work);
    pthread_mutex_unlock(&e->mu);
    if (e->inl) run_next(e); /* at once, on this thread and its team */
    return seq;
}

hpt_status eng_drain(offload_engine *e) {
    if (!e) return HPT_OK;
    return wait_seq(e, e->head);
}

/* ---- residency --------------------------------------------------------------------------- */

static int in_window(const offload_engine *e, int b) {
    for (int k = 0; k <= e->o.prefetch; k++)
        if (b == e->cur + e->dir * k) return 1;
    return 0;
}

/* A slot for a block: an empty one, else the least recently used whose block is neither held
 * nor in the prefetch window (evicted to HOME without a write: a clean block's home is
 * current, a DIRTY one's queued update writes it back first). -1 if none. */
static int choose_slot(offload_engine *e) {
    int best = -1;
    for (int s = 0; s < e->K; s++) {
        int b = e->slot_blk[s];
        if (b < 0) return s;
        if (b == e->in_use || in_window(e, b) || e->res[b] == RS_LOADING) continue;
        if (best < 0 || e->slot_tick[s] < e->slot_tick[best]) best = s;
    }
    if (best >= 0) {
        int b = e->slot_blk[best];
        e->res[b] = RS_HOME;
        e->slot_of[b] = -1;
        e->slot_blk[best] = -1;
    }
    return best;
}

/* HOME -> LOADING when a slot is free; 0 if none is. */
static int schedule_load(offload_engine *e, int l) {
    if (e->res[l] != RS_HOME) return 1;
    int s = choose_slot(e);
    if (s < 0) return 0;
    e->slot_blk[s] = l;
    e->slot_of[l] = s;
    e->slot_tick[s] = ++e->tick;
    e->res[l] = RS_LOADING;
    if (e->lstage) e->lpend[s] = 1; /* widened when acquired (eng_gpu_load_finish) */
    e->st.loads++;
    e->blk_seq[l] = push(e, (job){.kind = J_LOAD, .l = l, .slot = s});
    return 1;
}

hpt_status eng_begin_pass(offload_engine *e, int dir) {
    HPT_CHECK(sticky(e));
    e->dir = dir;
    e->in_use = -1;
    if (e->zc) return HPT_OK;
    reap(e);
    e->cur = dir > 0 ? 0 : e->L - 1;
    for (int k = 0; k <= e->o.prefetch; k++) {
        int b = e->cur + dir * k;
        if (b < 0 || b >= e->L || !schedule_load(e, b)) break;
    }
    return HPT_OK;
}

hpt_status eng_acquire(offload_engine *e, int l, float **p_out) {
    *p_out = NULL;
    HPT_CHECK(sticky(e));
    if (l < 0 || l >= e->L || e->in_use >= 0)
        return hpt_fail(HPT_ERR_INVALID, "offload engine: acquiring block %d with block %d held",
                        l, e->in_use);
    if (e->zc) {
        HPT_CHECK(wait_seq(e, e->blk_seq[l])); /* a queued update of its weights */
        e->in_use = l;
        *p_out = e->home[EB_P] + (size_t)l * e->stride;
        return HPT_OK;
    }
    reap(e);
    e->cur = l;
    e->st.acquires++;
    if (!schedule_load(e, l)) {
        HPT_CHECK(eng_drain(e)); /* every slot busy with the window: wait, then evict */
        if (!schedule_load(e, l))
            return hpt_fail(HPT_ERR_INVALID, "offload engine: no slot for block %d (K %d)", l, e->K);
    }
    HPT_CHECK(wait_seq(e, e->blk_seq[l]));
    int s = e->slot_of[l];
    eng_gpu_load_finish(e, s, slot_ptr(e, s));
    if (e->zstage == 3) HPT_CHECK(eng_z3_gather(e, l, slot_ptr(e, s))); /* every rank's shard */
    e->in_use = l;
    e->slot_tick[s] = ++e->tick;
    for (int k = 1; k <= e->o.prefetch; k++) {
        int b = l + e->dir * k;
        if (b < 0 || b >= e->L || !schedule_load(e, b)) break;
    }
    *p_out = slot_ptr(e, s);
    return HPT_OK;
}

void eng_release(offload_engine *e, int l) {
    if (e->in_use == l) e->in_use = -1;
}

hpt_status eng_grad_slot(offload_engine *e, int l, int accumulate, float **g_out) {
    *g_out = NULL;
    HPT_CHECK(sticky(e));
    if (accumulate && e->o.fused)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "the fused update cannot accumulate gradients over "
                        "micro-batches (each block is updated as its gradients complete)");
    if (e->n_g == 0) { /* the home itself (exact mode, gradients on the device) */
        *g_out = e->home[EB_G] + (size_t)l * e->stride;
        if (!accumulate) e->be->memset(*g_out, 0, e->bn * sizeof(float));
        return HPT_OK;
    }
    int g = e->g_next;
    e->g_next = (e->g_next + 1) % e->n_g;
    HPT_CHECK(wait_seq(e, e->g_seq[g]));
    e->g_of[l] = g;
    *g_out = gslot_ptr(e, g);
    if (e->o.fused && e->tier[EB_M] == HPT_TIER_DISK && e->upd) {
        /* the block's m and v come in while its backward computes (staging sets alternate;
         * FIFO puts the read after the write-back that last used the set) */
        e->mv_set[l] = e->mv_next;
        e->mv_next ^= 1;
        e->mv_seq[l] = push(e, (job){.kind = J_READ_MV, .l = l, .set = e->mv_set[l]});
    }
    if (!accumulate) {
        e->be->memset(*g_out, 0, e->bn * sizeof(float));
        return HPT_OK;
    }
    /* queued after the block's last write-back (FIFO), so it reads the sum so far */
    e->g_seq[g] = push(e, (job){.kind = J_READ_G, .l = l, .g = g});
    return wait_seq(e, e->g_seq[g]);
}

double eng_block_sumsq(const offload_engine *e, int l) { return e->sumsq[l]; }

void eng_check_grads(offload_engine *e, int on) { e->check_grads = on; }

hpt_status eng_grads_overflow(offload_engine *e, int *overflow) {
    int caller = *overflow; /* the flat gradients' own check */
    *overflow = 0;
    HPT_CHECK(eng_drain(e)); /* every queued narrowing reaped */
    eng_sums_read(e);        /* the blocks' checks left with their sums */
    *overflow = e->g_over || caller;
    e->g_over = 0;
    return eng_dist_overflow(e, overflow); /* ZeRO: the ranks' flags agreed */
}

hpt_status eng_grads_done(offload_engine *e, int l) {
    HPT_CHECK(sticky(e));
    if (e->in_use != l)
        return hpt_fail(HPT_ERR_INVALID, "offload engine: block %d's gradients done while not held", l);
    float *g = e->n_g ? gslot_ptr(e, e->g_of[l]) : e->home[EB_G] + (size_t)l * e->stride;
    /* fp32 homes, loss scaling: ZeRO checks this rank's micro-batch (whole) before the reduce-
     * scatter leaves only its range summed; the ranks agree at eng_grads_overflow */
    if (e->check_grads && !e->gh && e->z3) e->g_over |= e->be->nonfinite(g, e->bn);
    if (e->dist) HPT_CHECK(eng_dist_grads(e, l, g)); /* the processes' sum, rank order */
    /* add_home: the worker takes it of the sum (eng_grad_add_home); ZeRO-3: of the shards, at
     * the backward's end (eng_z3_norm) */
    eng_sums_take(e, l, g);
    if (!e->o.fused) {
        if (e->n_g)
            e->g_seq[e->g_of[l]] = push(e, (job){.kind = J_WRITE_G, .l = l, .g = e->g_of[l],
                                                 .set = e->add_home});
        return HPT_OK;
    }
    if (!e->upd)
        return hpt_fail(HPT_ERR_INVALID, "fused update: the model has no optimizer attached");
    if (e->sync) {
        size_t o = (size_t)l * e->stride;
        update_block(e, l, 0, e->home[EB_P] + o, g, update_ptr(e, EB_M, l, 0), update_ptr(e, EB_V, l, 0));
        return HPT_OK;
    }
    int sl = e->zc ? -1 : e->slot_of[l];
    if (e->tier[EB_M] == HPT_TIER_DISK || e->zstage == 1 || e->zstage == 2) {
        /* m and v on disk: the update runs here, between their read and the write-back of
         * weights, m and v (the worker's I/O is the bottleneck, not this thread); ZeRO 1, 2:
         * here too, since the updated range is then all-gathered (the worker never
         * communicates), m and v in memory or in staging */
        int set = e->tier[EB_M] == HPT_TIER_DISK ? e->mv_set[l] : 0;
        if (e->tier[EB_M] == HPT_TIER_DISK) HPT_CHECK(wait_seq(e, e->mv_seq[l]));
        float *p = sl >= 0 ? slot_ptr(e, sl) : e->home[EB_P] + (size_t)l * e->stride;
        /* bfd: the set's last write-back ran (FIFO after its m, v read; m, v in memory: wait
         * for the block before's, the last to use set 0) */
        if (e->bfd && set == 0 && l + 1 < e->L) HPT_CHECK(wait_seq(e, e->blk_seq[l + 1]));
        if (e->bfd) bstage_from_slot(e, set, p);
        double t0 = hpt_now();
        update_block(e, l, set, p + e->zlo, g + e->zlo, update_ptr(e, EB_M, l, set), update_ptr(e, EB_V, l, set));
        e->st.compute_update_s += hpt_now() - t0;
        if (e->zstage == 1 || e->zstage == 2) HPT_CHECK(eng_z12_gather(e, l, p, set)); /* every owner's range */
        if (sl >= 0) e->res[l] = RS_DIRTY;
        e->blk_seq[l] = push(e, (job){.kind = J_WRITE_PMV, .l = l, .slot = sl, .set = set});
        return HPT_OK;
    }
    if (sl >= 0 && e->bf && !e->bfd && e->dir < 0 && l >= e->K) {
        /* bf16 weights in memory: the update writes their home; widening it again into the
         * slot pays only for the blocks the next forward finds resident, the first K (the
         * backward runs down to 0 and evicts least recently used), so the others' slots are
         * given up now: their block is HOME, its next load queued after this update (FIFO).
         * The compute thread is done with the slot (grads_done, then release). */
        e->res[l] = RS_HOME;
        e->slot_of[l] = -1;
        e->slot_blk[sl] = -1;
        sl = -1;
    }
    if (sl >= 0) e->res[l] = RS_DIRTY;
    eng_gpu_grads_ready(e, e->g_of[l]); /* a GPU's update on CPU threads copies after this */
    uint64_t seq = push(e, (job){.kind = J_UPDATE, .l = l, .slot = sl, .g = e->g_of[l]});
    e->blk_seq[l] = e->g_seq[e->g_of[l]] = seq;
    return HPT_OK;
}

hpt_status eng_stream_update(offload_engine *e) {
    HPT_CHECK(eng_drain(e));
    if (!e->upd) return hpt_fail(HPT_ERR_INVALID, "offload engine: no optimizer attached");
    for (int s = 0; s < e->K; s++) /* the homes change: the slots' copies become stale */
        if (e->slot_blk[s] >= 0) {
            e->res[e->slot_blk[s]] = RS_HOME;
            e->slot_of[e->slot_blk[s]] = -1;
            e->slot_blk[s] = -1;
        }
    if (!e->stage && !e->bfd) { /* memory homes: in place */
        for (int l = 0; l < e->L; l++) {
            update_block(e, l, 0, update_ptr(e, EB_P, l, 0), update_grads(e, l, 0),
                         update_ptr(e, EB_M, l, 0), update_ptr(e, EB_V, l, 0));
            if (e->zstage == 1 || e->zstage == 2) /* bf16: through a free gradient slot */
                HPT_CHECK(eng_z12_gather(e, l, e->bf ? gslot_ptr(e, 0) : update_ptr(e, EB_P, l, 0) - e->zlo, 0));
        }
        return HPT_OK;
    }
    e->read_seq[0] = push(e, (job){.kind = J_READ, .l = 0, .set = 0});
    for (int l = 0; l < e->L; l++) {
        int set = l & 1;
        if (l + 1 < e->L) e->read_seq[set ^ 1] = push(e, (job){.kind = J_READ, .l = l + 1, .set = set ^ 1});
        HPT_CHECK(wait_seq(e, e->read_seq[set]));
        update_block(e, l, set, update_ptr(e, EB_P, l, set), update_grads(e, l, set),
                     update_ptr(e, EB_M, l, set), update_ptr(e, EB_V, l, set));
        if (e->zstage == 1 || e->zstage == 2)
            HPT_CHECK(eng_z12_gather(e, l, e->bf ? gslot_ptr(e, 0) : update_ptr(e, EB_P, l, set) - e->zlo, set));
        if (e->tier[EB_P] == HPT_TIER_DISK) e->res[l] = RS_WRITING_BACK;
        push(e, (job){.kind = J_WRITE, .l = l, .set = set});
    }
    return eng_drain(e);
}

/* ---- setup --------------------------------------------------------------------------------- */

static hpt_status alloc_home(offload_engine *e, int b) {
    size_t bytes = (size_t)e->L * eng_hstr(e, b) * sizeof(float);
    e->tier[b] = b == EB_P ? e->o.params : b == EB_G ? e->o.grads : e->o.optim;
    if (b == EB_P && e->bf && e->tier[b] == HPT_TIER_DISK) { /* bf16-sr (hpt_offload_check) */
        HPT_CHECK(hpt_mem_disk_alloc(e->mem, HPT_CAT_PARAMS,
                                     (size_t)e->L * e->hstride * sizeof(uint16_t), &e->disk[b]));
        e->disk[b].unit_bytes = e->hstride * sizeof(uint16_t); /* errors name the layer */
        e->has[b] = e->bfd = 1;
        hpt_mem_set_name(e->mem, "bf16 parameter staging");
        return e->be->alloc(e->mem, HPT_TIER_HOST, HPT_CAT_IO, 2 * e->hstride * sizeof(uint16_t),
                             (void **)&e->bstage);
    }
    if (b == EB_P && e->bf) {
        size_t hb = (size_t)e->L * e->hstride * sizeof(uint16_t);
        hpt_mem_set_name(e->mem, "block bf16 parameters (home)");
        HPT_CHECK(e->be->alloc(e->mem, e->tier[b], HPT_CAT_PARAMS, hb, (void **)&e->wh));
        e->has[b] = 1;
        if (e->bf != HPT_BW_BF16_KAHAN) return HPT_OK;
        hpt_mem_set_name(e->mem, "block bf16 compensation (home)");
        return e->be->alloc(e->mem, e->tier[b], HPT_CAT_PARAMS,
                            (size_t)e->L * e->cstride * sizeof(uint16_t), (void **)&e->wc);
    }
    if (b == EB_G && e->gh) { /* 16-bit gradients */
        size_t hb = (size_t)e->L * e->ghs * sizeof(uint16_t);
        if (e->tier[b] == HPT_TIER_DISK) {
            HPT_CHECK(hpt_mem_disk_alloc(e->mem, k_cat[b], hb, &e->disk[b]));
            e->disk[b].unit_bytes = e->ghs * sizeof(uint16_t);
        } else {
            hpt_mem_set_name(e->mem, e->gh == HPT_GH_FP16 ? "block fp16 gradients (home)"
                                                          : "block bf16 gradients (home)");
            HPT_CHECK(e->be->alloc(e->mem, e->tier[b], k_cat[b], hb, (void **)&e->ghome));
        }
    } else if (e->tier[b] == HPT_TIER_DISK) {
        HPT_CHECK(hpt_mem_disk_alloc(e->mem, k_cat[b], bytes, &e->disk[b]));
        e->disk[b].unit_bytes = eng_hstr(e, b) * sizeof(float);
    } else {
        hpt_mem_set_name(e->mem, k_home_name[b]);
        HPT_CHECK(e->be->alloc(e->mem, e->tier[b], k_cat[b], bytes, (void **)&e->home[b]));
    }
    e->has[b] = 1;
    return HPT_OK;
}

static void free_home(offload_engine *e, int b) {
    if (!e->has[b]) return;
    if (b == EB_P && e->bfd) {
        hpt_mem_disk_free(e->mem, HPT_CAT_PARAMS, &e->disk[b]);
        e->be->free(e->mem, HPT_TIER_HOST, HPT_CAT_IO, e->bstage, 2 * e->hstride * sizeof(uint16_t));
        e->bstage = NULL;
        e->disk[b].fd = -1;
        e->has[b] = e->bfd = 0;
        return;
    }
    if (b == EB_P && e->bf) {
        size_t hb = (size_t)e->L * e->hstride * sizeof(uint16_t);
        e->be->free(e->mem, e->tier[b], HPT_CAT_PARAMS, e->wh, hb);
        e->be->free(e->mem, e->tier[b], HPT_CAT_PARAMS, e->wc,
                     (size_t)e->L * e->cstride * sizeof(uint16_t));
        e->wh = e->wc = NULL;
        free(e->wcw);
        e->wcw = NULL;
        e->has[b] = 0;
        return;
    }
    if (e->tier[b] == HPT_TIER_DISK) {
        hpt_mem_disk_free(e->mem, k_cat[b], &e->disk[b]);
    } else if (b == EB_G && e->gh) {
        e->be->free(e->mem, e->tier[b], k_cat[b], e->ghome,
                     (size_t)e->L * e->ghs * sizeof(uint16_t));
        e->ghome = NULL;
    } else {
        e->be->free(e->mem, e->tier[b], k_cat[b], e->home[b],
                     (size_t)e->L * eng_hstr(e, b) * sizeof(float));
    }
    e->home[b] = NULL;
    e->disk[b].fd = -1;
    e->has[b] = 0;
}

hpt_status eng_create(hpt_mem *mem, int L, int n_slices, const size_t *slice_n,
                      const hpt_offload_opts *o, offload_engine **out) {
    return eng_create_rows(mem, L, n_slices, slice_n, NULL, o, out);
}

hpt_status eng_create_rows(hpt_mem *mem, int L, int n_slices, const size_t *slice_n,
                           const size_t *slice_row, const hpt_offload_opts *o, offload_engine **out) {
    *out = NULL;
    HPT_CHECK(hpt_offload_check(o));
    if (L < 1 || n_slices < 1 || n_slices > ENG_MAX_SLICES)
        return hpt_fail(HPT_ERR_INVALID, "offload engine: %d blocks of %d slices", L, n_slices);
    offload_engine *e = calloc(1, sizeof *e);
    if (!e) return hpt_fail(HPT_ERR_OOM, "cannot allocate the offload engine");
    e->mem = mem;
    e->be = hpt_backend_of(mem);
    e->o = *o;
    e->L = L;
    e->ns = n_slices;
    for (int i = 0; i < n_slices; i++) {
        e->slice_off[i] = e->bn;
        e->slice_n[i] = slice_n[i];
        e->slice_row[i] = slice_row ? slice_row[i] : 0;
        e->bn += slice_n[i];
    }
    e->has_rows = slice_row != NULL;
    e->stride = eng_round_floats(e->bn);
    e->hstride = e->cstride = e->ghs = eng_round_halves(e->bn);
    e->hn = e->zhi = e->bn; /* the homes hold whole blocks, unless sharded (eng_z3_setup) */
    e->hstr = e->stride;
    e->bf = o->weights;
    e->gh = o->grad_home;
    e->zc = eng_zero_copy(o);
    e->in_use = e->cur = -1;
    e->dir = 1;
    e->sync = eng_is_sync(o);
    for (int b = 0; b < EB_COUNT; b++) e->disk[b].fd = -1;
    e->tier[EB_P] = o->params;
    e->tier[EB_G] = o->grads;
    e->tier[EB_M] = e->tier[EB_V] = o->optim;
    e->K = e->zc ? 0 : o->max_active;
    e->n_g = eng_n_gslots(o);
    e->res = calloc((size_t)L, sizeof *e->res);
    e->slot_of = malloc((size_t)L * sizeof *e->slot_of);
    e->blk_seq = calloc((size_t)L, sizeof *e->blk_seq);
    e->g_of = calloc((size_t)L, sizeof *e->g_of);
    e->sumsq = calloc((size_t)L, sizeof *e->sumsq);
    e->mv_set = calloc((size_t)L, sizeof *e->mv_set);
    e->mv_seq = calloc((size_t)L, sizeof *e->mv_seq);
    e->slot_blk = malloc((size_t)(e->K ? e->K : 1) * sizeof *e->slot_blk);
    e->slot_tick = calloc((size_t)(e->K ? e->K : 1), sizeof *e->slot_tick);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv_work, NULL);
    pthread_cond_init(&e->cv_done, NULL);
    hpt_status s = HPT_OK;
    if (!e->res || !e->slot_of || !e->blk_seq || !e->g_of || !e->sumsq || !e->slot_blk ||
        !e->slot_tick || !e->mv_set || !e->mv_seq)
        s = hpt_fail(HPT_ERR_OOM, "offload engine records");
    if (s == HPT_OK) {
        for (int l = 0; l < L; l++) e->slot_of[l] = -1;
        for (int k = 0; k < e->K; k++) e->slot_blk[k] = -1;
        if (o->shards > 1) s = eng_z3_setup(e); /* this rank's shard, its home stride */
    }
    if (s == HPT_OK) s = alloc_home(e, EB_P);
    if (s == HPT_OK && !o->fused) s = alloc_home(e, EB_G);
    if (s == HPT_OK && e->K) {
        hpt_mem_set_name(mem, "parameter slots");
        s = e->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, (size_t)e->K * e->stride * sizeof(float),
                          (void **)&e->slots);
    }
    if (s == HPT_OK) s = eng_gpu_load_setup(e);
    if (s == HPT_OK && e->n_g) {
        hpt_mem_set_name(mem, "gradient slots");
        s = e->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, (size_t)e->n_g * e->stride * sizeof(float),
                          (void **)&e->gslots);
    }
    if (s == HPT_OK && !e->sync && (e->inl = inline_jobs(e))) {
        /* no thread: jobs run as they are queued */
    } else if (s == HPT_OK && !e->sync) {
        if (pthread_create(&e->th, NULL, worker, e) != 0)
            s = hpt_fail(HPT_ERR_OOM, "offload engine: cannot start its worker thread");
        else
            e->th_on = 1;
    }
    if (s != HPT_OK) {
        size_t bn = e->bn;
        eng_free(e);
        return hpt_fail_ctx(s, "offload engine for %d blocks of %zu floats", L, bn);
    }
    *out = e;
    return HPT_OK;
}

hpt_status eng_attach_optim(offload_engine *e, eng_update_fn fn, void *ctx, int mv_homes) {
    HPT_CHECK(eng_check_optim(&e->o, mv_homes));
    hpt_status s = HPT_OK;
    if (mv_homes) {
        HPT_CHECK(alloc_home(e, EB_M));
        s = alloc_home(e, EB_V);
    }
    int sets = 2;
    uint64_t sb[EB_COUNT], hsb = e->ghs * sizeof(uint16_t);
    for (int b = 0; b < EB_COUNT; b++) sb[b] = eng_hstr(e, b) * sizeof(float);
    size_t set_bytes = (size_t)eng_stage_set_bytes(&e->o, sb, hsb);
    if (s == HPT_OK && set_bytes) {
        e->stage_bytes = (size_t)sets * set_bytes;
        hpt_mem_set_name(e->mem, "offload staging");
        s = e->be->alloc(e->mem, HPT_TIER_HOST, HPT_CAT_IO, e->stage_bytes, (void **)&e->stage);
        if (s != HPT_OK) e->stage_bytes = 0;
    }
    if (s == HPT_OK) s = eng_gpu_attach(e);
    if (s == HPT_OK) s = eng_sums_attach(e); /* the blocks' sums of squares (engine_sums.c) */
    if (s != HPT_OK) {
        eng_detach_optim(e);
        return s;
    }
    size_t off = 0; /* bytes; every share is a multiple of 4096 */
    for (int set = 0; set < sets; set++)
        for (int b = e->o.fused ? EB_M : EB_P; b < EB_COUNT; b++)
            if (e->tier[b] == HPT_TIER_DISK && !(b == EB_P && e->bf)) { /* bf16: bstage */
                e->stage_ptr[set][b] = (float *)(void *)((char *)e->stage + off);
                off += b == EB_G && e->gh ? hsb : sb[b];
            }
    e->upd = fn;
    e->upd_ctx = ctx;
    return HPT_OK;
}

void eng_detach_optim(offload_engine *e) {
    if (!e) return;
    (void)eng_drain(e);
    free_home(e, EB_M);
    free_home(e, EB_V);
    e->be->free(e->mem, HPT_TIER_HOST, HPT_CAT_IO, e->stage, e->stage_bytes);
    eng_sums_detach(e);
    e->stage = NULL;
    e->stage_bytes = 0;
    memset(e->stage_ptr, 0, sizeof e->stage_ptr);
    eng_gpu_detach(e);
    e->upd = NULL;
    e->upd_ctx = NULL;
}

void eng_free(offload_engine *e) {
    if (!e) return;
    if (e->th_on) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1; /* queued jobs are dropped: the worker finishes the one it runs */
        pthread_cond_signal(&e->cv_work);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->th, NULL);
    }
    eng_detach_optim(e);
    free_home(e, EB_P);
    free_home(e, EB_G);
    eng_z3_free(e);
    eng_gpu_load_free(e);
    e->be->free(e->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, e->slots, (size_t)e->K * e->stride * sizeof(float));
    e->be->free(e->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, e->gslots, (size_t)e->n_g * e->stride * sizeof(float));
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv_work);
    pthread_cond_destroy(&e->cv_done);
    free(e->res);
    free(e->slot_of);
    free(e->blk_seq);
    free(e->g_of);
    free(e->sumsq);
    free(e->mv_set);
    free(e->mv_seq);
    free(e->slot_blk);
    free(e->slot_tick);
    free(e);
}

int eng_fused(const offload_engine *e) { return e->o.fused; }
const hpt_offload_opts *eng_opts(const offload_engine *e) { return &e->o; }
size_t eng_slice_offset(const offload_engine *e, int i) { return e->slice_off[i]; }

hpt_status eng_check(const offload_engine *e, int *resident) {
    int n = 0;
    for (int s = 0; s < e->K; s++) {
        int b = e->slot_blk[s];
        if (b < 0) continue;
        n++;
        if (b >= e->L || e->slot_of[b] != s)
            return hpt_fail(HPT_ERR_INVALID, "slot %d holds block %d, whose slot is %d", s, b,
                            b < e->L ? e->slot_of[b] : -2);
        if (e->res[b] == RS_HOME || e->res[b] == RS_WRITING_BACK)
            return hpt_fail(HPT_ERR_INVALID, "block %d is in slot %d but in state %d", b, s, e->res[b]);
    }
    for (int l = 0; l < e->L; l++) {
        int s = e->slot_of[l];
        if (s >= 0 && (s >= e->K || e->slot_blk[s] != l))
            return hpt_fail(HPT_ERR_INVALID, "block %d names slot %d, which holds another", l, s);
        if (s < 0 && e->K && e->res[l] != RS_HOME && e->res[l] != RS_WRITING_BACK)
            return hpt_fail(HPT_ERR_INVALID, "block %d has no slot but is in state %d", l, e->res[l]);
    }
    if (e->in_use >= 0 && e->K && e->slot_of[e->in_use] < 0)
        return hpt_fail(HPT_ERR_INVALID, "held block %d has no slot", e->in_use);
    if (n > e->K) return hpt_fail(HPT_ERR_INVALID, "%d blocks resident with K = %d", n, e->K);
    if (resident) *resident = n;
    return HPT_OK;
}

void eng_stats(const offload_engine *e, hpt_offload_stats *out) {
    offload_engine *m = (offload_engine *)(uintptr_t)e;
    pthread_mutex_lock(&m->mu);
    *out = e->st;
    eng_io_stats(e, out);
    pthread_mutex_unlock(&m->mu);
}
