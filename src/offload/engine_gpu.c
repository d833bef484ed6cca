/* engine_gpu.c: what the offload engine does differently when its hpt_mem is bound to a GPU
 * (docs/cuda.md, "Training on the GPU"): the fused update of blocks whose weights (bf16-sr) and
 * optimizer state live on pinned host memory runs on CPU threads, ZeRO-Offload's CPU Adam.
 * When block l's gradients are complete the compute thread records an event on the COMPUTE
 * stream (eng_gpu_grads_ready); the worker's update job makes the STORE stream wait for it,
 * copies the gradient slot to a pinned host block on STORE and waits for that copy alone (not
 * for the compute issued since: the backward of the blocks below runs on), the optimizer's
 * callback updates the home and the state with the CPU's kernels (the optimizer asks
 * eng_updates_on_host), and the engine widens the slot again from the updated home as always
 * (a kernel issued after the update finished).
 * On the CPU none of this exists (no buffer, the gradient slot is the update's input, the
 * thread counts are the engine's own), except under the checking transfers
 * (HPT_TRANSFER_CHECK=1, kernels/transfer_check.c), where the same path runs, its copy
 * deferred until its wait, so the tests see the events' order (docs/testing.md).
 * Loads of bf16 weights homed on pinned host memory (the same condition, any update mode): the
 * load job copies the block's bf16 home into its slot's device staging block on the LOAD stream
 * (after the last widening out of that staging block) and records an event; the compute thread,
 * acquiring the block, makes COMPUTE wait for it and widens the staging block into the slot
 * (eng_gpu_load_finish), so block l + 1's copy overlaps block l's compute.
 * Invariants: the host block is written only by the job that then reads it (one worker, jobs in
 * order), and gradient slot g's event is recorded again only after the job reading g is done
 * (eng_grads_acquire waits for g_seq[g]); slot s's staging block is written only by a load
 * into slot s, queued on LOAD after ev_free[s] (recorded after the widening of the load before,
 * on the compute thread, before the slot can be chosen again); lpend[s] is 1 from a load's
 * scheduling until the compute thread widens it. */
#include "offload/engine_int.h"

#include <omp.h>
#include <stdlib.h>

int eng_gpu_host_update(const hpt_offload_opts *o, int gpu) {
    return (gpu || hpt_transfer_check_env()) && o->fused && o->params == HPT_TIER_HOST && o->weights == HPT_BW_BF16_SR &&
           o->optim == HPT_TIER_HOST && o->grads == HPT_TIER_DEVICE && o->grad_home == HPT_GH_FP32;
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
