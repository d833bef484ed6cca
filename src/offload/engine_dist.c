/* engine_dist.c: the offload engine under many processes. Stage 0: a block's gradients are
 * summed over the processes at the gradient-done point, on the compute thread, before their
 * sum of squares, overflow check and (fused) update, with the communication layer's rank-order
 * sum (eng_comm); with --accum K each process sums its K apart in its homes (eng_set_micro).
 * ZeRO 1-3 reduce-scatter every micro-batch; at 1-3 the overflow flags are all-reduced
 * (eng_dist_overflow). docs/zero_engine.md, "Stage 0 with the engine".
 * Invariants: N processes give the bits of one process with --accum N --zero 0 (home = g_k + acc
 * is acc + g_k bit for bit); every rank hands its blocks over in the same order (L-1 .. 0), so
 * every rank makes the same collective calls in the same order; the worker never communicates. */
#include "offload/engine_int.h"

#include <string.h>

void eng_set_comm(offload_engine *e, const eng_comm *c) {
    e->comm = c;
    e->dist = c != NULL && hpt_dist_size() > 1;
}


hpt_status eng_check_add_home(const hpt_offload_opts *o) {
    if (o->fused)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--fused-update updates each block as its gradients "
                        "complete: it cannot sum micro-batches apart (--accum with --zero)");
    if (o->grad_home != HPT_GH_FP32)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--zero with --accum sums the micro-batches apart in "
                        "fp32: not with a 16-bit gradient home (--grad-home)");
    if (o->grads == HPT_TIER_DEVICE) /* eng_n_gslots: exact fp32 gradients on the device, no slot */
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--zero with --accum and the offload engine needs "
                        "the gradients' home off the device (--offload grads=host|disk): on the "
                        "device the backward writes straight into it, with no slot to sum apart");
    return HPT_OK;
}

hpt_status eng_set_add_home(offload_engine *e, int on) {
    if (on) {
        HPT_CHECK(eng_check_add_home(&e->o));
    }
    e->add_home = on;
    return HPT_OK;
}

hpt_status eng_set_micro(offload_engine *e, int k, int K) {
    e->acc_pos = !e->dist || K <= 1 || k >= K ? 0 : k < K - 1 ? 1 : 2;
    /* stage 0's last micro-batch adds the home here, before the processes' sum (eng_dist_grads),
     * so its write-back replaces the home */
    int here = e->acc_pos == 2 && !e->z3 && k > 0;
    HPT_CHECK(eng_set_add_home(e, k > 0 && k < K && !here));
    return here ? eng_drain(e) : HPT_OK; /* every earlier write-back in the home */
}

hpt_status eng_dist_grads(offload_engine *e, int l, float *g) {
    if (e->z3) return eng_z3_reduce(e, l, g); /* onto the shards' owners (engine_z3.c) */
    if (e->acc_pos == 1) return HPT_OK; /* stage 0: this process's sum first (the homes) */
    if (e->acc_pos == 2) HPT_CHECK(eng_grad_add_home(e, l, g)); /* K > 1: the last is k >= 1 */
    return e->comm->allreduce(g, e->bn, "a block's gradients' sum");
}

hpt_status eng_grad_add_home(offload_engine *e, int l, float *g) {
    const float *h;
    size_t hs = eng_hstr(e, EB_G); /* a whole block's stride, or with ZeRO 2, 3 a shard's */
    if (e->tier[EB_G] == HPT_TIER_DISK) {
        /* exact mode's staging set 0: idle during the backward (the streaming update uses it) */
        float *st = e->stage_ptr[0][EB_G];
        if (!st) return hpt_fail(HPT_ERR_INVALID, "offload engine: no staging for the gradients");
        HPT_CHECK(eng_disk_rw(e, &e->disk[EB_G], (uint64_t)l * hs * sizeof(float), st,
                              hs * sizeof(float), 0));
        h = st;
    } else {
        h = e->home[EB_G] + (size_t)l * hs;
    }
    if (!eng_shard_home(e, EB_G)) h += e->zlo; /* a whole home: the range's place in it */
    float *d = g + e->zlo; /* with ZeRO the reduce-scatter summed this rank's range only */
    size_t n = e->zhi - e->zlo;
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++) d[i] += h[i];
    if (e->z3) {
        eng_z3_parts(e, l, g);
        return HPT_OK;
    }
    e->sumsq[l] = eng_slices_sumsq(e, g); /* the norm's partial sum, of the sum (read after eng_drain) */
    return HPT_OK;
}

hpt_status eng_dist_overflow(offload_engine *e, int *overflow) {
    /* ZeRO: each rank saw its own part (fp32 homes: its micro-batch; 16-bit: the range it
     * narrowed; the flat non-block gradients, the caller's: summed in its range only since
     * engine_zemb.c reduce-scatters them); one all-reduce of the flags makes the union every
     * rank's, so all skip or apply the step together and their scalers stay equal. Stage 0's
     * flags already agree (every rank checks the same sums). */
    if (!e->z3 || !e->dist) return HPT_OK;
    float f = *overflow ? 1.0f : 0.0f;
    HPT_CHECK(e->comm->allreduce(&f, 1, "the gradients' overflow flag (ZeRO)"));
    *overflow = f > 0.0f;
    return HPT_OK;
}
