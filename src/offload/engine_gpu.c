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
 * Invariant: the host block is written only by the job that then reads it (one worker, jobs in
 * order), and gradient slot g's event is recorded again only after the job reading g is done
 * (eng_grads_acquire waits for g_seq[g]). */
#include "offload/engine_int.h"

#include <omp.h>

int eng_gpu_host_update(const hpt_offload_opts *o, int gpu) {
    return (gpu || hpt_transfer_check_env()) && o->fused && o->params == HPT_TIER_HOST && o->weights == HPT_BW_BF16_SR &&
           o->optim == HPT_TIER_HOST && o->grads == HPT_TIER_DEVICE && o->grad_home == HPT_GH_FP32;
}

void eng_gpu_bytes(const hpt_offload_opts *o, int gpu, size_t block_floats, int training,
                   uint64_t out[HPT_TIER_COUNT][HPT_CAT_COUNT]) {
    if (training && eng_gpu_host_update(o, gpu))
        out[HPT_TIER_HOST][HPT_CAT_GRADS] += (uint64_t)block_floats * sizeof(float);
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
