/* gpu.c: what a training run on a GPU (--device cuda, docs/cuda.md) cannot use yet, refused
 * by hpt_trainer_create before anything is allocated, with the reason: the parts whose host code
 * still reads tensor memory itself or whose transfers do not go through the backend. */
#include "core/core.h"
#include "train/train_int.h"

/* The offload engine's plans that run on a GPU: the fused update with the blocks' gradients in
 * device slots, no disk, fp32 gradients; bf16-sr weights on pinned host memory (the engine's
 * loads widen them into fp32 device slots, its updates round into them: kernels reading and
 * writing the pinned homes over PCIe) or fp32 weights on the device. Elsewhere the engine's
 * host code or its disk I/O would meet device memory (docs/cuda.md). */
static int gpu_engine_ok(const hpt_offload_opts *o) {
    if (!o->fused || o->grads != HPT_TIER_DEVICE || o->grad_home != HPT_GH_FP32 ||
        o->optim == HPT_TIER_DISK || o->embeddings == HPT_EMB_CHUNKED)
        return 0;
    if (o->params == HPT_TIER_HOST) return o->weights == HPT_BW_BF16_SR;
    return o->params == HPT_TIER_DEVICE && o->weights == HPT_BW_FP32;
}

/* What a run on a GPU cannot use yet: the parts whose host code still reads tensor memory
 * itself or whose transfers are not through the backend (docs/cuda.md, "what is not done"). */
hpt_status train_gpu_check(const hpt_train_opts *o) {
    const char *what = hpt_offload_active(&o->plan.offload) && !gpu_engine_ok(&o->plan.offload)
                       ? "this offload engine plan (on a GPU: --fused-update, grads on the device, "
                         "no disk, and --weights bf16-sr with params on the host or fp32 weights "
                         "on the device)"
                       : dp_apart(o) ? "data parallel (--zero, mpirun: the gradients are summed "
                                       "on the host)"
                       : o->plan.act.offload == HPT_OFFLOAD_DISK ? "activation offload to disk"
                       : o->sched.kind == HPT_SCHEDULE_HYBRID ? "the hybrid schedule"
                       : NULL;
    if (!what) return HPT_OK;
    return hpt_fail(HPT_ERR_UNSUPPORTED, "--device cuda: %s does not run on the GPU yet "
                    "(docs/cuda.md)", what);
}
