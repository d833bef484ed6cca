/* actstore.c: the activation store: saved fields offloaded to the host or to disk and/or
 * compressed (int8 with one scale per row, or bf16), with the backend's act_code ops.
 * actstore_put fills a field's stored copy at the end of its block's forward; actstore_prefetch
 * brings it back one block ahead of the backward that reads it (under every:N and full: the
 * segment's input, before its last block's backward, act_store_layer) (on a thread for host offload, on the transfer
 * streams on a GPU); actstore_wait joins it and records its transfers. The buffers and the GPU's
 * ordering: docs/activations.md, "Saved-activation offload and compression".
 * Slots: block l's fields at l * n_fields + i, and the embedding's output (block -1's, under
 * every:N and full) at L * n_fields.
 * Invariants: the prefetch thread writes only buffers born at the current time point (no other
 * live buffer overlaps them) and reads only the host store, which nothing writes during the
 * backward; it is joined before anything reads them and before the arena is freed or replanned;
 * host copies cannot fail, so it has no status to return. */
#include "core/core.h"
#include "model/gpt2_int.h"
#include "kernels/backend.h"

#include <pthread.h>
#include <string.h>

void actstore_release(hpt_model *m) {
    hpt_actstore *st = &m->run.st;
    if (st->xf) { /* no copy may still read or write the host store */
        st->xf->host_wait(st->ev_put);
        st->xf->host_wait(st->ev_load);
    }
    m->be->free(m->mem, HPT_TIER_HOST, HPT_CAT_ACTS, st->host_store, st->host_bytes);
    m->be->free(m->mem, HPT_TIER_HOST, HPT_CAT_ACTS, st->staging, st->staging_bytes);
    if (st->disk.fd >= 0) hpt_mem_disk_free(m->mem, HPT_CAT_ACTS, &st->disk);
    st->disk.fd = -1;
    st->host_store = st->staging = NULL;
    st->host_bytes = st->staging_bytes = st->disk_bytes = 0;
    if (st->xf && st->xf->event_destroy) {
        st->xf->event_destroy(st->ev_after);
        st->xf->event_destroy(st->ev_put);
        st->xf->event_destroy(st->ev_load);
    }
    st->xf = NULL;
    st->ev_after = st->ev_put = st->ev_load = NULL;
}

/* A GPU's host offload without compression: the transfers and their three events. */
static hpt_status xfer_open(hpt_model *m) {
    hpt_actstore *st = &m->run.st;
    const hpt_transfer *xf = hpt_transfer_of(m->mem);
    if (!xf->async || m->act.compress != HPT_COMPRESS_NONE) return HPT_OK;
    hpt_xevent *ev[3] = {NULL, NULL, NULL};
    hpt_status s = HPT_OK;
    for (int i = 0; i < 3 && s == HPT_OK; i++) s = xf->event_create(&ev[i]);
    if (s != HPT_OK) { /* all three or none: st->xf set means every event exists */
        for (int i = 0; i < 3; i++)
            if (ev[i]) xf->event_destroy(ev[i]);
        return s;
    }
    st->xf = xf;
    st->ev_after = ev[0], st->ev_put = ev[1], st->ev_load = ev[2];
    return HPT_OK;
}

/* Grown like the arena, kept while the plan fits. */
hpt_status actstore_reserve(hpt_model *m, size_t off_bytes, size_t max_store) {
    hpt_actstore *st = &m->run.st;
    size_t host_need = m->act.offload == HPT_OFFLOAD_HOST ? off_bytes : 0;
    size_t disk_need = m->act.offload == HPT_OFFLOAD_DISK ? off_bytes : 0;
    size_t stage_need = disk_need && m->act.compress != HPT_COMPRESS_NONE ? max_store : 0;
    if (host_need <= st->host_bytes && disk_need <= st->disk_bytes && stage_need <= st->staging_bytes)
        return HPT_OK;
    actstore_release(m);
    hpt_status s = HPT_OK;
    if (host_need) {
        hpt_mem_set_name(m->mem, "offloaded activations");
        s = m->be->alloc(m->mem, HPT_TIER_HOST, HPT_CAT_ACTS, host_need, (void **)&st->host_store);
        if (s == HPT_OK) st->host_bytes = host_need;
        if (s == HPT_OK) s = xfer_open(m);
    }
    if (s == HPT_OK && disk_need) {
        s = hpt_mem_disk_alloc(m->mem, HPT_CAT_ACTS, disk_need, &st->disk);
        if (s == HPT_OK) st->disk_bytes = disk_need;
        else st->disk.fd = -1;
    }
    if (s == HPT_OK && stage_need) {
        hpt_mem_set_name(m->mem, "int8 activation staging");
        s = m->be->alloc(m->mem, HPT_TIER_HOST, HPT_CAT_ACTS, stage_need, (void **)&st->staging);
        if (s == HPT_OK) st->staging_bytes = stage_need;
    }
    if (s != HPT_OK) actstore_release(m);
    return s;
}

/* Block l's store slots: its fields, or for l = -1 the embedding's output (one slot). */
static int n_slots(const hpt_model *m, int l) { return l < 0 ? 1 : m->arch->n_fields; }

static size_t slot_idx(const hpt_model *m, int l, int i) {
    return (size_t)(l < 0 ? m->cfg.L : l) * (size_t)m->arch->n_fields + (size_t)(l < 0 ? 0 : i);
}

/* Rows and row width of slot (l, i) at the current (B, T): field i's, or (B*T, C). */
static void slot_shape(const hpt_model *m, int l, int i, size_t *rows, size_t *w) {
    if (l < 0) {
        *rows = (size_t)m->B * (size_t)m->T;
        *w = (size_t)m->cfg.C;
        return;
    }
    hpt_arch_ctx x = act_ctx(m);
    m->arch->field_shape(&x, i, rows, w);
}

/* The buffer the forward wrote (fwd 1) or the backward reads (0). */
static float *slot_buf(const hpt_model *m, int l, int i, int fwd) {
    if (l < 0)
        return fwd ? *(float **)((char *)m->acts + m->arch->off_encoded) : m->run.st.enc_b;
    return *act_field(m->arch, fwd ? m->run.flayers : m->run.layers, l, i);
}

hpt_status actstore_put(hpt_model *m, int l) {
    const hpt_backend *be = m->be;
    hpt_actstore *st = &m->run.st;
    const hpt_act_code k = (hpt_act_code)m->act.compress;
    const hpt_transfer *xf = st->xf;
    if (l < 0 && !st->sbytes[slot_idx(m, -1, 0)]) return HPT_OK;
    if (xf) { /* the copies after the block's forward */
        xf->record(st->ev_after, HPT_XS_COMPUTE);
        xf->stream_wait(HPT_XS_STORE, st->ev_after);
    }
    for (int i = 0; i < n_slots(m, l); i++) {
        size_t idx = slot_idx(m, l, i), sb = st->sbytes[idx], rows, w;
        if (!sb) continue;
        slot_shape(m, l, i, &rows, &w);
        const float *src = slot_buf(m, l, i, 1);
        if (xf) {
            xf->copy_async(st->host_store + st->soff[idx], src, sb, HPT_COPY_D2H, HPT_XS_STORE);
            hpt_mem_transfer(m->mem, HPT_TIER_DEVICE, HPT_TIER_HOST, HPT_CAT_ACTS, sb);
        } else if (m->act.offload == HPT_OFFLOAD_NONE) {
            be->act_code_store(k, st->astore[idx], src, rows, w);
        } else if (m->act.offload == HPT_OFFLOAD_HOST) {
            char *dst = st->host_store + st->soff[idx];
            if (m->act.compress != HPT_COMPRESS_NONE) be->act_code_store(k, dst, src, rows, w);
            else be->copy(dst, src, sb, HPT_COPY_D2H);
            hpt_mem_transfer(m->mem, HPT_TIER_DEVICE, HPT_TIER_HOST, HPT_CAT_ACTS, sb);
        } else if (m->act.compress != HPT_COMPRESS_NONE) {
            be->act_code_store(k, st->staging, src, rows, w);
            HPT_CHECK(hpt_mem_disk_write(m->mem, &st->disk, st->soff[idx], st->staging, sb,
                                         HPT_TIER_HOST, HPT_CAT_ACTS));
        } else {
            HPT_CHECK(hpt_mem_disk_write(m->mem, &st->disk, st->soff[idx], src, sb,
                                         HPT_TIER_DEVICE, HPT_CAT_ACTS));
        }
    }
    if (xf) { /* later compute (which may reuse the forward buffers) after the copies */
        xf->record(st->ev_put, HPT_XS_STORE);
        xf->stream_wait(HPT_XS_COMPUTE, st->ev_put);
    }
    return HPT_OK;
}

/* Brings block l's stored fields back into the buffers its backward reads. serial 1: on the
 * prefetch thread (host offload only: no OpenMP, no event recording, which the main thread
 * does at actstore_wait). */
static hpt_status fetch_block(hpt_model *m, int l, int serial) {
    const hpt_backend *be = m->be;
    hpt_actstore *st = &m->run.st;
    const hpt_act_code k = (hpt_act_code)m->act.compress;
    for (int i = 0; i < n_slots(m, l); i++) {
        size_t idx = slot_idx(m, l, i), sb = st->sbytes[idx], rows, w;
        if (!sb) continue;
        slot_shape(m, l, i, &rows, &w);
        float *dst = slot_buf(m, l, i, 0);
        if (m->act.offload == HPT_OFFLOAD_NONE) {
            be->act_code_load(k, dst, st->astore[idx], rows, w, 1);
        } else if (m->act.offload == HPT_OFFLOAD_HOST) {
            const char *src = st->host_store + st->soff[idx];
            if (m->act.compress != HPT_COMPRESS_NONE) be->act_code_load(k, dst, src, rows, w, !serial);
            else be->copy(dst, src, sb, HPT_COPY_H2D);
            if (!serial) hpt_mem_transfer(m->mem, HPT_TIER_HOST, HPT_TIER_DEVICE, HPT_CAT_ACTS, sb);
        } else if (m->act.compress != HPT_COMPRESS_NONE) {
            HPT_CHECK(hpt_mem_disk_read(m->mem, &st->disk, st->soff[idx], st->staging, sb,
                                        HPT_TIER_HOST, HPT_CAT_ACTS));
            be->act_code_load(k, dst, st->staging, rows, w, 1);
        } else {
            HPT_CHECK(hpt_mem_disk_read(m->mem, &st->disk, st->soff[idx], dst, sb,
                                        HPT_TIER_DEVICE, HPT_CAT_ACTS));
        }
    }
    return HPT_OK;
}

/* The asynchronous prefetch (host offload): copies block l's fields back while the main
 * thread runs the backward of block l + 1 (or the head); see the invariant above. */
static void *prefetch_thread(void *arg) {
    hpt_model *m = arg;
    fetch_block(m, m->run.st.pf_layer, 1); /* host copies cannot fail */
    return NULL;
}

/* A GPU's prefetch: block l's fields on the load stream after the compute issued so far. */
static void fetch_async(hpt_model *m, int l) {
    hpt_actstore *st = &m->run.st;
    const hpt_transfer *xf = st->xf;
    xf->record(st->ev_after, HPT_XS_COMPUTE);
    xf->stream_wait(HPT_XS_LOAD, st->ev_after);
    for (int i = 0; i < n_slots(m, l); i++) {
        size_t idx = slot_idx(m, l, i), sb = st->sbytes[idx];
        if (sb) xf->copy_async(slot_buf(m, l, i, 0), st->host_store + st->soff[idx], sb,
                               HPT_COPY_H2D, HPT_XS_LOAD);
    }
    xf->record(st->ev_load, HPT_XS_LOAD);
}

hpt_status actstore_prefetch(hpt_model *m, int l) {
    hpt_actstore *st = &m->run.st;
    l = act_store_layer(&m->act, m->cfg.L, l);
    if (l < -1 || (l == -1 && !st->sbytes[slot_idx(m, -1, 0)]))
        return HPT_OK; /* nothing stored for this block's backward */
    if (st->xf) {
        st->pf_layer = l;
        fetch_async(m, l);
        st->pf_active = 1;
        return HPT_OK;
    }
    if (m->act.offload != HPT_OFFLOAD_HOST) return fetch_block(m, l, 0);
    st->pf_layer = l;
    if (pthread_create(&st->pf_thread, NULL, prefetch_thread, m) != 0)
        return fetch_block(m, l, 0); /* no thread: synchronously */
    st->pf_active = 1;
    return HPT_OK;
}

void actstore_wait(hpt_model *m) {
    hpt_actstore *st = &m->run.st;
    if (!st->pf_active) return;
    if (st->xf) st->xf->stream_wait(HPT_XS_COMPUTE, st->ev_load); /* the compute waits, not us */
    else pthread_join(st->pf_thread, NULL);
    st->pf_active = 0;
    for (int i = 0; i < n_slots(m, st->pf_layer); i++) {
        size_t sb = st->sbytes[slot_idx(m, st->pf_layer, i)];
        if (sb) hpt_mem_transfer(m->mem, HPT_TIER_HOST, HPT_TIER_DEVICE, HPT_CAT_ACTS, sb);
    }
}
