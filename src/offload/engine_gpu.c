/* engine_gpu.c: what the offload engine does differently when its hpt_mem is bound to a GPU
 * (docs/cuda.md, "Training on the GPU"): the fused update of blocks whose weights (bf16-sr) and
 * optimizer state live on pinned host memory runs on CPU threads, ZeRO-Offload's CPU Adam.
 * When block l's gradients are complete the worker copies its gradient slot to a pinned host
 * block (the backend's copy: after the compute issued so far, so after block l's backward; it
 * returns when the bytes have arrived), the optimizer's callback updates the home and the state
 * with the CPU's kernels (the optimizer asks eng_updates_on_host), and the engine widens the
 * slot again from the updated home as always (a kernel issued after the update finished). The
 * GPU meanwhile runs the backward of the blocks below.
 * On the CPU none of this exists: no buffer, the gradient slot is the update's input, the
 * thread counts are the engine's own. */
#include "offload/engine_int.h"

#include <omp.h>

int eng_gpu_host_update(const hpt_offload_opts *o, int gpu) {
    return gpu && o->fused && o->params == HPT_TIER_HOST && o->weights == HPT_BW_BF16_SR &&
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
    hpt_mem_set_name(e->mem, "block gradients for the CPU update");
    return e->be->alloc(e->mem, HPT_TIER_HOST, HPT_CAT_GRADS, e->bn * sizeof(float),
                        (void **)&e->ghost);
}

void eng_gpu_detach(offload_engine *e) {
    if (!e->ghost) return; /* nothing was allocated: nothing accounted */
    e->be->free(e->mem, HPT_TIER_HOST, HPT_CAT_GRADS, e->ghost, e->bn * sizeof(float));
    e->ghost = NULL;
}

int eng_updates_on_host(const offload_engine *e) { return e && e->ghost != NULL; }

const float *eng_gpu_grads(offload_engine *e, const float *gslot) {
    if (!e->ghost) return gslot;
    e->be->copy(e->ghost, gslot, e->bn * sizeof(float), HPT_COPY_D2H);
    return e->ghost;
}

int eng_gpu_team(const offload_engine *e, int team) {
    if (!e->ghost) return team > 0 ? team : 1;
    int n = omp_get_num_procs() - 1; /* the compute thread only issues the GPU's work */
    return n > 1 ? n : 1;
}
