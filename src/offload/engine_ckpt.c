/* engine_ckpt.c: a range of one block's home read or written by this process alone, between
 * steps: ZeRO's sharded checkpoints (src/train/zero.c; docs/zero.md), where each rank writes
 * what it owns and reads what it will own, so nothing is gathered. A range lies inside this
 * rank's shard [zlo, zhi) when the home is sharded (eng_shard_home), anywhere otherwise.
 * Invariants: the worker's queue is drained first; fp32 memory homes move in place; a disk
 * home or bf16 weights go through a buffer free between steps (bf16 on disk: staging set 0;
 * else the host staging, a gradient slot or the first parameter slot, engine_gather.c's
 * choice), accounted with the engine's, so nothing is allocated here; bf16 weights are rounded
 * to nearest coming in, the residue into this rank's Kahan compensation (as eng_absorb_slice);
 * a weights' range written drops its block's slot copy, so the next acquisition loads (and at
 * stage 3 gathers) the new values. */
#include "offload/engine_int.h"

#include <string.h>

#define HOST_BE hpt_backend_cpu() /* bf16 conversions: host memory (as engine_gather.c) */

int eng_home_shard(const offload_engine *e, int b) { return eng_shard_home(e, b); }

static hpt_status check_range(offload_engine *e, int b, size_t at, size_t n) {
    HPT_CHECK(eng_drain(e));
    e->be->sync();
    if (b < 0 || b >= EB_COUNT || b == EB_G || !e->has[b])
        return hpt_fail(HPT_ERR_INVALID, "offload engine: no home %d for a checkpoint's range", b);
    if (at + n > e->bn || (eng_shard_home(e, b) && (at < e->zlo || at + n > e->zhi)))
        return hpt_fail(HPT_ERR_INVALID, "offload engine: range %zu..%zu of a block is not this "
                        "rank's (%zu..%zu)", at, at + n, e->zlo, e->zhi);
    return HPT_OK;
}

/* bfd: block l's bf16 weights (its shard at stage 3, else the whole block's halves) between the
 * disk and staging set 0, which no job uses between steps; h: where value at lies there. */
static hpt_status bfd_block(offload_engine *e, int l, size_t at, int write_, uint16_t **h) {
    size_t bytes = e->hstride * sizeof(uint16_t);
    if (write_) hpt_mem_transfer(e->mem, HPT_TIER_HOST, HPT_TIER_DISK, HPT_CAT_PARAMS, bytes);
    else hpt_mem_transfer(e->mem, HPT_TIER_DISK, HPT_TIER_HOST, HPT_CAT_PARAMS, bytes);
    *h = e->bstage + (eng_shard_home(e, EB_P) ? at - e->zlo : at);
    return eng_bstage_io(e, l, 0, write_);
}

/* A whole block's buffer free between steps (engine_gather.c's choice): the host staging when it
 * holds a block, a gradient slot, or the first parameter slot (its block dropped). */
static float *scratch(offload_engine *e) {
    if (e->stage && e->stage_bytes >= e->stride * sizeof(float)) return e->stage;
    if (e->gslots) return e->gslots;
    return e->slots ? eng_slot_scratch(e) : NULL;
}

/* Where block l's value at is in buffer b's memory home (fp32). */
static float *home_at(offload_engine *e, int b, int l, size_t at) {
    return e->home[b] + (size_t)l * eng_hstr(e, b) + (eng_shard_home(e, b) ? at - e->zlo : at);
}

/* A disk home's block (its shard, or whole) into scr, at its block coordinates. */
static hpt_status disk_block(offload_engine *e, int b, int l, float *scr, int write_) {
    size_t bytes = eng_hstr(e, b) * sizeof(float);
    if (write_) hpt_mem_transfer(e->mem, HPT_TIER_HOST, HPT_TIER_DISK, k_cat[b], bytes);
    else hpt_mem_transfer(e->mem, HPT_TIER_DISK, HPT_TIER_HOST, k_cat[b], bytes);
    if (eng_shard_home(e, b)) return eng_z3_slot_io(e, b, l, scr, write_);
    return eng_home_io(e, b, l, scr, write_);
}

hpt_status eng_range_get(offload_engine *e, int b, int l, size_t at, size_t n, const float **p) {
    *p = NULL;
    HPT_CHECK(check_range(e, b, at, n));
    float *scr = NULL;
    if ((b == EB_P && e->bf) || e->tier[b] == HPT_TIER_DISK) {
        scr = scratch(e);
        if (!scr) return hpt_fail(HPT_ERR_INVALID, "offload engine: no buffer for a checkpoint's range");
    }
    if (b == EB_P && e->bfd) { /* read from disk, widened into the scratch */
        uint16_t *h;
        HPT_CHECK(bfd_block(e, l, at, 0, &h));
        HOST_BE->bf16_widen(scr, h, n);
        *p = scr;
        return HPT_OK;
    }
    if (b == EB_P && e->bf) { /* widened into the scratch */
        const uint16_t *h = e->wh + (size_t)l * e->hstride + (eng_shard_home(e, b) ? at - e->zlo : at);
        HOST_BE->bf16_widen(scr, h, n);
        *p = scr;
        return HPT_OK;
    }
    if (e->tier[b] != HPT_TIER_DISK) {
        *p = home_at(e, b, l, at);
        return HPT_OK;
    }
    HPT_CHECK(disk_block(e, b, l, scr, 0));
    *p = scr + at;
    return HPT_OK;
}

hpt_status eng_range_put(offload_engine *e, int b, int l, size_t at, size_t n, const float *src) {
    HPT_CHECK(check_range(e, b, at, n));
    if (b == EB_P) eng_drop_slot(e, l);
    if (b == EB_P && e->bfd) { /* read, rounded to nearest into the range, written back (bf16-sr:
                                * no compensation on disk) */
        uint16_t *h;
        HPT_CHECK(bfd_block(e, l, at, 0, &h));
        HOST_BE->bf16_split(h, NULL, src, n);
        return bfd_block(e, l, at, 1, &h);
    }
    if (b == EB_P && e->bf) { /* rounded to nearest; Kahan: this rank's residues */
        uint16_t *w = e->wh + (size_t)l * e->hstride + (eng_shard_home(e, b) ? at - e->zlo : at);
        size_t a = at, z = at + n;
        if (e->wc && e->z3) {
            a = HPT_MIN(HPT_MAX(at, e->zlo), at + n);
            z = HPT_MAX(HPT_MIN(at + n, e->zhi), a);
        }
        if (!e->wc) a = z = at;
        HOST_BE->bf16_split(w, NULL, src, a - at);
        if (z > a) HOST_BE->bf16_split(w + (a - at), e->wc + eng_comp_at(e, l, a), src + (a - at), z - a);
        HOST_BE->bf16_split(w + (z - at), NULL, src + (z - at), at + n - z);
        return HPT_OK;
    }
    if (e->tier[b] != HPT_TIER_DISK) {
        memcpy(home_at(e, b, l, at), src, n * sizeof(float));
        return HPT_OK;
    }
    float *scr = scratch(e); /* read, fill, write back */
    if (!scr) return hpt_fail(HPT_ERR_INVALID, "offload engine: no buffer for a checkpoint's range");
    HPT_CHECK(disk_block(e, b, l, scr, 0));
    memcpy(scr + at, src, n * sizeof(float));
    return disk_block(e, b, l, scr, 1);
}

uint16_t *eng_comp_range(offload_engine *e, int l, size_t at) {
    if (!e->wc || (e->z3 && (at < e->zlo || at >= e->zhi))) return NULL;
    return e->wc + eng_comp_at(e, l, at);
}
