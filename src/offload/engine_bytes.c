/* engine_bytes.c: the offload engine's layout rules and what it holds per tier, from its options
 * alone (no engine needed): the estimator's figures (eng_bytes*) and eng_create's allocations
 * both come from these functions, so the engine's measured bytes equal the estimate.
 *
 * Invariants: a block in a home or slot is rounded up to ALIGN_BYTES (one aligned transfer,
 * direct I/O on disk); a ZeRO shard's home stride replaces the block's where engine_z3.c shards
 * that buffer. */
#include "offload/engine_int.h"

#include <string.h>

size_t eng_round_floats(size_t n) {
    size_t b = (n * sizeof(float) + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
    return b / sizeof(float);
}

size_t eng_round_halves(size_t n) {
    return (n * sizeof(uint16_t) + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES / sizeof(uint16_t);
}

size_t eng_zhalves(size_t hstr, hpt_tier t) { return t == HPT_TIER_DISK ? eng_round_halves(hstr) : hstr; }

/* The blocks' weights are used in place: fp32 on the device (bf16 ones are widened into slots). */
int eng_zero_copy(const hpt_offload_opts *o) {
    return o->params == HPT_TIER_DEVICE && o->weights == HPT_BW_FP32 && o->shards <= 1;
}

int eng_is_sync(const hpt_offload_opts *o) {
    if (!eng_zero_copy(o) || o->grad_home != HPT_GH_FP32) return 0; /* 16-bit G: the worker narrows */
    if (o->fused)
        return o->params == HPT_TIER_DEVICE && o->optim == HPT_TIER_DEVICE;
    return o->grads == HPT_TIER_DEVICE && o->params == HPT_TIER_DEVICE &&
           o->optim == HPT_TIER_DEVICE;
}

int eng_n_gslots(const hpt_offload_opts *o) {
    if (o->shards > 1) return 2; /* ZeRO-3: each block's gradients are reduce-scattered from a slot */
    if (!o->fused && o->grads == HPT_TIER_DEVICE && o->grad_home == HPT_GH_FP32) return 0;
    return eng_is_sync(o) ? 1 : 2;
}

/* Bytes of one staging set: the disk-homed buffers among fused M, V; exact P, G, M, V (sb[b]
 * buffer b's home stride in bytes; a 16-bit G takes hsb, its stride in halves). */
uint64_t eng_stage_set_bytes(const hpt_offload_opts *o, const uint64_t sb[EB_COUNT], uint64_t hsb) {
    uint64_t n = (o->optim == HPT_TIER_DISK) * (sb[EB_M] + sb[EB_V]);
    if (!o->fused)
        n += (o->params == HPT_TIER_DISK && o->weights == HPT_BW_FP32) * sb[EB_P] + /* bf16: bstage */
             (o->grads == HPT_TIER_DISK) * (o->grad_home != HPT_GH_FP32 ? hsb : sb[EB_G]);
    return n;
}

void eng_bytes(const hpt_offload_opts *o, int L, size_t block_floats, int training, int mv_homes,
               uint64_t out[HPT_TIER_COUNT][HPT_CAT_COUNT]) {
    eng_bytes_homes(o, L, block_floats, eng_round_floats(block_floats), training, mv_homes, out);
}

/* home_floats: floats between two blocks in a sharded fp32 home (and its staging): the block's
 * stride, or with ZeRO the shard's (engine_z3.c: every home at stage 3, m and v at 1 and 2, the
 * gradients' at 2); the slots and the other homes stay whole blocks. */
void eng_bytes_homes(const hpt_offload_opts *o, int L, size_t block_floats, size_t home_floats,
                     int training, int mv_homes, uint64_t out[HPT_TIER_COUNT][HPT_CAT_COUNT]) {
    memset(out, 0, sizeof(uint64_t) * HPT_TIER_COUNT * HPT_CAT_COUNT);
    uint64_t slb = (uint64_t)eng_round_floats(block_floats) * sizeof(float); /* a slot */
    uint64_t sh = (uint64_t)home_floats * sizeof(float);
    int z = eng_zstage(o);
    uint64_t sb[EB_COUNT] = {z == 3 ? sh : slb, z >= 2 ? sh : slb, sh, sh};
    uint64_t home = (uint64_t)L * sh;
    uint64_t hhome = (uint64_t)L * eng_round_halves(block_floats) * sizeof(uint16_t);
    /* a 16-bit G: a whole block's halves, or at ZeRO 2, 3 a shard's (eng_zhalves) */
    uint64_t hsb = (uint64_t)(z >= 2 ? eng_zhalves(home_floats, o->grads) : eng_round_halves(block_floats)) *
                   sizeof(uint16_t);
    if (o->weights == HPT_BW_FP32) out[o->params][HPT_CAT_PARAMS] += (uint64_t)L * sb[EB_P];
    else /* bf16 weights (ZeRO-3: hstride = eng_zhalves(hstr)), and their bf16 compensation with
          * Kahan (ZeRO: this rank's range, cstride = hstr) */
        out[o->params][HPT_CAT_PARAMS] +=
            (z == 3 ? (uint64_t)L * eng_zhalves(home_floats, o->params) * sizeof(uint16_t) : hhome) +
            (o->weights != HPT_BW_BF16_KAHAN ? 0 : z ? (uint64_t)L * home_floats * sizeof(uint16_t) : hhome);
    if (!eng_zero_copy(o)) out[HPT_TIER_DEVICE][HPT_CAT_PARAMS] += (uint64_t)o->max_active * slb;
    if (o->weights != HPT_BW_FP32 && o->params == HPT_TIER_DISK) /* bstage, from eng_create */
        out[HPT_TIER_HOST][HPT_CAT_IO] += 2 * (uint64_t)(z == 3 ? eng_zhalves(home_floats, o->params)
                                                                : eng_round_halves(block_floats)) * sizeof(uint16_t);
    if (!o->fused) out[o->grads][HPT_CAT_GRADS] += o->grad_home != HPT_GH_FP32 ? (uint64_t)L * hsb : (uint64_t)L * sb[EB_G];
    out[HPT_TIER_DEVICE][HPT_CAT_GRADS] += (uint64_t)eng_n_gslots(o) * slb;
    if (!training) return;
    out[HPT_TIER_DEVICE][HPT_CAT_GRADS] += eng_sums_bytes(L); /* eng_attach_optim's */
    if (mv_homes) out[o->optim][HPT_CAT_OPTIM] += 2 * home;
    out[HPT_TIER_HOST][HPT_CAT_IO] += 2 * eng_stage_set_bytes(o, sb, hsb);
}
