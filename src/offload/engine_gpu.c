/* engine_gpu.c: what the offload engine does differently on a GPU, or on the CPU under the
 * checking transfers (HPT_TRANSFER_CHECK=1: the same path, so the tests see its events' order);
 * docs/offload.md and docs/cuda.md, "Training on the GPU", say how each works.
 * (1) bf16-sr weights and optimizer state on pinned host: the fused update runs on CPU threads
 * from a host copy of block l's gradients, made on STORE after an event recorded on COMPUTE
 * when block l's backward was issued (eng_gpu_grads_ready, eng_gpu_grads).
 * (2) bf16 weights homed on the host: a load copies the bf16 home into its slot's device
 * staging block on LOAD; acquiring the block waits for it on COMPUTE and widens it into the slot.
 * Invariants: the host block is written only by the job that then reads it (one worker, jobs in
 * order); gradient slot g's event is recorded again only after the job reading g is done
 * (eng_grad_slot waits for g_seq[g]); slot s's staging block is written only by a load into
 * slot s, queued on LOAD after ev_free[s], which the compute thread records after widening the
 * load before (and before the slot can be chosen again); lpend[s] is 1 from a load's
 * scheduling until the compute thread widens it. Elsewhere none of this exists. */
#include "offload/engine_int.h"

#include <omp.h>
#include <stdlib.h>

int eng_gpu_host_update(const hpt_offload_opts *o, int gpu) {
    return (gpu || hpt_transfer_check_env()) && o->fused && o->params == HPT_TIER_HOST &&
           o->weights == HPT_BW_BF16_SR && o->optim == HPT_TIER_HOST && o->grads == HPT_TIER_DEVICE &&
           o->grad_home == HPT_GH_FP32;
}

int eng_gpu_loads(const hpt_offload_opts *o, int gpu) {
    return (gpu || hpt_transfer_check_env()) && o->weights != HPT_BW_FP32 &&
           o->params == HPT_TIER_HOST && o->shards <= 1 && o->max_active > 0;
}

void eng_gpu_bytes(const hpt_offload_opts *o, int gpu, size_t block_floats, int training,
                   uint64_t out[HPT_TIER_COUNT][HPT_CAT_COUNT]) {
    if (training && eng_gpu_host_update(o, gpu))
        out[HPT_TIER_HOST][HPT_CAT_GRADS] += (uint64_t)block_floats * sizeof(float);
    if (eng_gpu_loads(o, gpu)) /* a bf16 staging block per parameter slot */
        out[HPT_TIER_DEVICE][HPT_CAT_PARAMS] +=
            (uint64_t)o->max_active * eng_round_halves(block_floats) * sizeof(uint16_t);
}

static int on_gpu(const offload_engine *e) { return e->be != hpt_backend_cpu(); }

hpt_status eng_gpu_attach(offload_engine *e) {
    if (!eng_gpu_host_update(&e->o, on_gpu(e))) return HPT_OK;
    const hpt_transfer *xf = hpt_transfer_of(e->mem);
    hpt_xevent *ev[3] = {NULL, NULL, NULL}; /* gradient slots 0 and 1 ready; the copy done */
    hpt_status s = HPT_OK;
    for (int i = 0; i < 3 && s == HPT_OK; i++) s = xf->event_create(&ev[i]);
    if (s == HPT_OK) {
        hpt_mem_set_name(e->mem, "block gradients for the CPU update");
        s = e->be->alloc(e->mem, HPT_TIER_HOST, HPT_CAT_GRADS, e->bn * sizeof(float),
                         (void **)&e->ghost);
    }
    if (s != HPT_OK) { /* all or nothing: ghost set means every event exists */
        e->ghost = NULL;
        for (int i = 0; i < 3; i++)
            if (ev[i] && xf->event_destroy) xf->event_destroy(ev[i]);
        return s;
    }
    e->xf = xf;
    e->ev_grads[0] = ev[0], e->ev_grads[1] = ev[1], e->ev_copied = ev[2];
    return HPT_OK;
}

void eng_gpu_detach(offload_engine *e) {
    if (!e->ghost) return; /* nothing was allocated: nothing accounted */
    e->be->free(e->mem, HPT_TIER_HOST, HPT_CAT_GRADS, e->ghost, e->bn * sizeof(float));
    e->ghost = NULL;
    if (e->xf->event_destroy) {
        e->xf->event_destroy(e->ev_grads[0]);
        e->xf->event_destroy(e->ev_grads[1]);
        e->xf->event_destroy(e->ev_copied);
    }
    e->xf = NULL;
}

int eng_updates_on_host(const offload_engine *e) { return e && e->ghost != NULL; }

void eng_gpu_grads_ready(offload_engine *e, int g) {
    if (e->ghost) e->xf->record(e->ev_grads[g], HPT_XS_COMPUTE);
}

const float *eng_gpu_grads(offload_engine *e, const float *gslot, int g) {
    if (!e->ghost) return gslot;
    const hpt_transfer *xf = e->xf;
    xf->stream_wait(HPT_XS_STORE, e->ev_grads[g]); /* after block l's backward, not all since */
    xf->copy_async(e->ghost, gslot, e->bn * sizeof(float), HPT_COPY_D2H, HPT_XS_STORE);
    xf->record(e->ev_copied, HPT_XS_STORE);
    xf->host_wait(e->ev_copied);
    return e->ghost;
}

int eng_gpu_team(const offload_engine *e, int team) {
    if (!e->ghost) return team > 0 ? team : 1;
    int n = omp_get_num_procs() - 1; /* the compute thread only issues the GPU's work */
    return n > 1 ? n : 1;
}

/* ---- loads of bf16 host homes on the LOAD stream ---- */

static size_t lstage_bytes(const offload_engine *e) {
    return (size_t)e->K * e->hstride * sizeof(uint16_t);
}

hpt_status eng_gpu_load_setup(offload_engine *e) {
    if (!eng_gpu_loads(&e->o, on_gpu(e))) return HPT_OK;
    const hpt_transfer *xf = hpt_transfer_of(e->mem);
    e->lxf = xf; /* from here eng_gpu_load_free undoes what was made */
    e->ev_loaded = calloc((size_t)e->K, sizeof *e->ev_loaded);
    e->ev_free = calloc((size_t)e->K, sizeof *e->ev_free);
    e->lpend = calloc((size_t)e->K, sizeof *e->lpend);
    if (!e->ev_loaded || !e->ev_free || !e->lpend)
        return hpt_fail(HPT_ERR_OOM, "offload engine: load events");
    hpt_status s = HPT_OK;
    for (int k = 0; k < e->K && s == HPT_OK; k++) {
        s = xf->event_create(&e->ev_loaded[k]);
        if (s == HPT_OK) s = xf->event_create(&e->ev_free[k]);
    }
    if (s != HPT_OK) return s;
    hpt_mem_set_name(e->mem, "bf16 load staging");
    s = e->be->alloc(e->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, lstage_bytes(e), (void **)&e->lstage);
    if (s != HPT_OK) e->lstage = NULL;
    return s;
}

void eng_gpu_load_free(offload_engine *e) {
    const hpt_transfer *xf = e->lxf;
    if (!xf) return;
    if (e->lstage) {
        for (int k = 0; k < e->K; k++) xf->host_wait(e->ev_loaded[k]); /* no copy writes it now */
        e->be->free(e->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, e->lstage, lstage_bytes(e));
    }
    e->lstage = NULL;
    for (int k = 0; k < e->K && xf->event_destroy; k++) {
        if (e->ev_loaded && e->ev_loaded[k]) xf->event_destroy(e->ev_loaded[k]);
        if (e->ev_free && e->ev_free[k]) xf->event_destroy(e->ev_free[k]);
    }
    free(e->ev_loaded), free(e->ev_free), free(e->lpend);
    e->ev_loaded = e->ev_free = NULL;
    e->lpend = NULL;
    e->lxf = NULL;
}

int eng_gpu_load_issue(offload_engine *e, int l, int s) {
    if (!e->lstage) return 0;
    const hpt_transfer *xf = e->lxf;
    xf->stream_wait(HPT_XS_LOAD, e->ev_free[s]); /* the last widening out of this staging block */
    xf->copy_async(e->lstage + (size_t)s * e->hstride, e->wh + (size_t)l * e->hstride,
                   e->bn * sizeof(uint16_t), HPT_COPY_H2D, HPT_XS_LOAD);
    xf->record(e->ev_loaded[s], HPT_XS_LOAD);
    return 1;
}

void eng_gpu_load_finish(offload_engine *e, int s, float *slot) {
    if (!e->lstage || !e->lpend[s]) return;
    const hpt_transfer *xf = e->lxf;
    xf->stream_wait(HPT_XS_COMPUTE, e->ev_loaded[s]);
    e->be->bf16_widen_par(slot, e->lstage + (size_t)s * e->hstride, e->bn);
    xf->record(e->ev_free[s], HPT_XS_COMPUTE);
    e->lpend[s] = 0;
}
