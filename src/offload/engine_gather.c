/* engine_gather.c: the offload engine's gather and scatter, between steps (checkpoints,
 * initialisation, tests): a slice of a block's weights, gradients or moments streamed out of its
 * home (eng_emit_slice) or into it (eng_absorb_slice), a whole block stored (eng_block_dest,
 * eng_store_block), and the Kahan compensation lent (eng_comp). Invariants: each call first
 * drains the worker's queue (eng_store_block follows eng_block_dest, which does), so no job
 * touches a home or a buffer while it runs; a disk home is read and written in aligned windows
 * through a scratch buffer that is free between steps; a home of weights about to change first
 * loses its slot's copy (RS_HOME), so the next acquisition loads the new weights; bf16 weights
 * are widened going out and rounded to nearest coming in (Kahan: the residue becomes the
 * compensation). */
#include "offload/engine_int.h"

#include <stdlib.h>

/* The worker's queue drained and, on a GPU, the kernels it issued finished: the host then reads
 * and writes homes itself (the CPU's sync does nothing). */
static hpt_status drain_sync(offload_engine *e) {
    HPT_CHECK(eng_drain(e));
    e->be->sync();
    return HPT_OK;
}

/* Conversions between the bf16 homes and the host buffers below run on the CPU: both are host
 * memory on a GPU too (hptrain refuses device-homed bf16 weights there), and on the CPU this is
 * the engine's own backend. */
#define HOST_BE hpt_backend_cpu()

/* c values of block l from its value pos rounded into the whole bf16 home (be's bf16_split);
 * Kahan: their residue into the compensation, all of it, or with ZeRO (stages 1, 2: the weights'
 * home whole, the compensation this rank's range) the part in [zlo, zhi). */
static void bf_split(offload_engine *e, const hpt_backend *be, int l, size_t pos, const float *src,
                     size_t c) {
    uint16_t *w = e->wh + (size_t)l * e->hstride + pos;
    if (!e->wc || !e->z3) {
        be->bf16_split(w, e->wc ? e->wc + eng_comp_at(e, l, pos) : NULL, src, c);
        return;
    }
    be->bf16_split(w, NULL, src, c);
    size_t a = HPT_MAX(pos, e->zlo), z = HPT_MIN(pos + c, e->zhi);
    if (a < z) be->bf16_split(w + (a - pos), e->wc + eng_comp_at(e, l, a), src + (a - pos), z - a);
}


/* A buffer of stride floats free between steps, and its tier: staging (at least stride floats:
 * even two sets of a 16-bit G's share alone, 2 x hstride halves, hold them; not always with
 * ZeRO's shard-sized m and v), a gradient slot, or a parameter slot (whose block is dropped). */
static float *scratch(offload_engine *e, hpt_tier *tier) {
    *tier = HPT_TIER_DEVICE;
    if (e->stage && e->stage_bytes >= e->stride * sizeof(float)) {
        *tier = HPT_TIER_HOST;
        return e->stage;
    }
    if (e->gslots) return e->gslots;
    return e->slots ? eng_slot_scratch(e) : NULL;
}

float *eng_slot_scratch(offload_engine *e) {
    int b = e->slot_blk[0];
    if (b >= 0) {
        e->res[b] = RS_HOME;
        e->slot_of[b] = -1;
        e->slot_blk[0] = -1;
    }
    return e->slots;
}

#define BF_CHUNK 1024 /* floats widened or narrowed at once by gather and scatter */

/* bfd: the next aligned window of bf16 weights from byte o (< end) into staging set 0: its
 * first byte a and length (at most the staging block); the bytes of [o, end) it holds. */
static hpt_status bf_window(offload_engine *e, uint64_t o, uint64_t end, uint64_t *a,
                            uint64_t *len, uint64_t *useful) {
    *a = o / ALIGN_BYTES * ALIGN_BYTES;
    *len = (end + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES - *a;
    if (*len > (uint64_t)e->hstride * sizeof(uint16_t)) *len = (uint64_t)e->hstride * sizeof(uint16_t);
    *useful = HPT_MIN(end, *a + *len) - o;
    HPT_CHECK(mem_disk_rw(e->mem, &e->disk[EB_P], *a, e->bstage, (size_t)*len, 0));
    hpt_mem_transfer(e->mem, HPT_TIER_DISK, HPT_TIER_HOST, HPT_CAT_PARAMS, (size_t)*len);
    return HPT_OK;
}

hpt_status eng_emit_slice(offload_engine *e, int b, int l, int i, eng_emit_fn emit, void *ctx) {
    if (eng_shard_home(e, b)) return eng_z3_emit_slice(e, b, l, i, emit, ctx); /* sharded homes: gathered */
    HPT_CHECK(drain_sync(e));
    size_t n = e->slice_n[i], off = (size_t)l * e->stride + e->slice_off[i];
    if (b == EB_P && e->bf) { /* widened (the compensation goes separately: eng_comp) */
        uint64_t o = ((uint64_t)l * e->hstride + e->slice_off[i]) * sizeof(uint16_t);
        uint64_t end = o + (uint64_t)n * sizeof(uint16_t);
        float buf[BF_CHUNK];
        while (o < end) { /* memory: one window, the home; bfd: aligned windows read from disk */
            const uint16_t *h = e->wh ? e->wh + o / sizeof(uint16_t) : NULL;
            uint64_t a, len, useful = end - o;
            if (!h) {
                HPT_CHECK(bf_window(e, o, end, &a, &len, &useful));
                h = e->bstage + (o - a) / sizeof(uint16_t);
            }
            size_t m = (size_t)(useful / sizeof(uint16_t));
            for (size_t k = 0; k < m; k += BF_CHUNK) {
                size_t c = HPT_MIN(m - k, (size_t)BF_CHUNK);
                HOST_BE->bf16_widen(buf, h + k, c);
                HPT_CHECK(emit(ctx, buf, c));
            }
            o += useful;
        }
        return HPT_OK;
    }
    if (e->tier[b] != HPT_TIER_DISK) return emit(ctx, e->home[b] + off, n);
    hpt_tier st;
    float *buf = scratch(e, &st);
    if (!buf) return hpt_fail(HPT_ERR_INVALID, "offload engine: no buffer to read a block into");
    uint64_t o = (uint64_t)off * sizeof(float), end = o + (uint64_t)n * sizeof(float);
    uint64_t cap = (uint64_t)e->stride * sizeof(float);
    while (o < end) {
        uint64_t a = o / ALIGN_BYTES * ALIGN_BYTES;
        uint64_t len = (end + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES - a;
        if (len > cap) len = cap;
        HPT_CHECK(mem_disk_rw(e->mem, &e->disk[b], a, buf, (size_t)len, 0));
        hpt_mem_transfer(e->mem, HPT_TIER_DISK, st, k_cat[b], (size_t)len);
        uint64_t useful = HPT_MIN(end, a + len) - o;
        HPT_CHECK(emit(ctx, buf + (o - a) / sizeof(float), (size_t)(useful / sizeof(float))));
        o += useful;
    }
    return HPT_OK;
}

/* Drops the slot copy of block l's weights (its home is about to change). */
void eng_drop_slot(offload_engine *e, int l) {
    if (e->slot_of[l] < 0) return;
    e->slot_blk[e->slot_of[l]] = -1;
    e->slot_of[l] = -1;
    e->res[l] = RS_HOME;
}

hpt_status eng_absorb_slice(offload_engine *e, int b, int l, int i, eng_read_fn read, void *ctx) {
    if (eng_shard_home(e, b)) return eng_z3_absorb_slice(e, b, l, i, read, ctx); /* keeps this rank's range */
    HPT_CHECK(drain_sync(e));
    size_t n = e->slice_n[i], off = (size_t)l * e->stride + e->slice_off[i];
    if (b == EB_P) eng_drop_slot(e, l);
    if (b == EB_P && e->bf) { /* rounded to nearest; Kahan: the residue is the compensation */
        size_t h = (size_t)l * e->hstride + e->slice_off[i];
        float buf[BF_CHUNK];
        if (e->bfd) { /* read-modify-write of each aligned window (no compensation on disk) */
            uint64_t o = (uint64_t)h * sizeof(uint16_t), end = o + (uint64_t)n * sizeof(uint16_t);
            while (o < end) {
                uint64_t a, len, useful;
                HPT_CHECK(bf_window(e, o, end, &a, &len, &useful));
                uint16_t *w = e->bstage + (o - a) / sizeof(uint16_t);
                size_t m = (size_t)(useful / sizeof(uint16_t));
                for (size_t k = 0; k < m; k += BF_CHUNK) {
                    size_t c = HPT_MIN(m - k, (size_t)BF_CHUNK);
                    HPT_CHECK(read(ctx, buf, c));
                    HOST_BE->bf16_split(w + k, NULL, buf, c);
                }
                HPT_CHECK(mem_disk_rw(e->mem, &e->disk[EB_P], a, e->bstage, (size_t)len, 1));
                hpt_mem_transfer(e->mem, HPT_TIER_HOST, HPT_TIER_DISK, HPT_CAT_PARAMS, (size_t)len);
                o += useful;
            }
            return HPT_OK;
        }
        for (size_t k = 0; k < n; k += BF_CHUNK) {
            size_t c = HPT_MIN(n - k, (size_t)BF_CHUNK);
            HPT_CHECK(read(ctx, buf, c));
            bf_split(e, HOST_BE, l, e->slice_off[i] + k, buf, c);
        }
        return HPT_OK;
    }
    if (e->tier[b] != HPT_TIER_DISK) return read(ctx, e->home[b] + off, n);
    hpt_tier st;
    float *buf = scratch(e, &st);
    if (!buf) return hpt_fail(HPT_ERR_INVALID, "offload engine: no buffer to fill a block in");
    uint64_t o = (uint64_t)off * sizeof(float), end = o + (uint64_t)n * sizeof(float);
    uint64_t cap = (uint64_t)e->stride * sizeof(float);
    while (o < end) { /* read-modify-write of each aligned window */
        uint64_t a = o / ALIGN_BYTES * ALIGN_BYTES;
        uint64_t len = (end + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES - a;
        if (len > cap) len = cap;
        uint64_t useful = HPT_MIN(end, a + len) - o;
        HPT_CHECK(mem_disk_rw(e->mem, &e->disk[b], a, buf, (size_t)len, 0));
        HPT_CHECK(read(ctx, buf + (o - a) / sizeof(float), (size_t)(useful / sizeof(float))));
        HPT_CHECK(mem_disk_rw(e->mem, &e->disk[b], a, buf, (size_t)len, 1));
        hpt_mem_transfer(e->mem, HPT_TIER_DISK, st, k_cat[b], (size_t)len);
        hpt_mem_transfer(e->mem, st, HPT_TIER_DISK, k_cat[b], (size_t)len);
        o += useful;
    }
    return HPT_OK;
}

hpt_status eng_comp(offload_engine *e, uint16_t **comp_out, size_t *n_out) {
    *comp_out = NULL;
    *n_out = 0;
    HPT_CHECK(drain_sync(e));
    if (!e->wc) return HPT_OK;
    *n_out = (size_t)e->L * eng_round_halves(e->bn);
    if (!e->z3) {
        *comp_out = e->wc;
        return HPT_OK;
    }
    /* ZeRO: each rank keeps its range; a checkpoint's is whole (collective), lent until
     * eng_comp_done (a host scratch outside the accounted tiers, like the engine's records).
     * Before the trainer gives the collectives (a checkpoint being loaded, which fills it) it
     * is lent zeroed. */
    if (!e->wcw) e->wcw = calloc(*n_out, sizeof(uint16_t));
    if (!e->wcw) return hpt_fail(HPT_ERR_OOM, "offload engine: a checkpoint's compensation");
    if (e->comm) HPT_CHECK(eng_z3_comp_gather(e, e->wcw));
    *comp_out = e->wcw;
    return HPT_OK;
}

void eng_comp_done(offload_engine *e, int filled) {
    if (!e || !e->wcw) return;
    if (filled) eng_z3_comp_scatter(e, e->wcw);
    free(e->wcw);
    e->wcw = NULL;
}

hpt_status eng_block_dest(offload_engine *e, int b, int l, float **dst, int *in_place) {
    if (eng_shard_home(e, b)) return eng_z3_block_dest(e, b, l, dst, in_place);
    HPT_CHECK(drain_sync(e));
    *in_place = e->tier[b] != HPT_TIER_DISK && !(b == EB_P && e->bf);
    if (*in_place) {
        *dst = e->home[b] + (size_t)l * e->stride;
        if (b == EB_P) eng_drop_slot(e, l); /* its slot's copy becomes stale */
        return HPT_OK;
    }
    hpt_tier st;
    *dst = scratch(e, &st);
    return *dst ? HPT_OK : hpt_fail(HPT_ERR_INVALID, "offload engine: no buffer to fill a block in");
}

hpt_status eng_store_block(offload_engine *e, int b, int l, const float *src) {
    if (eng_shard_home(e, b)) return eng_z3_store_block(e, b, l, src);
    if (b == EB_P && e->bf) {
        eng_drop_slot(e, l);
        if (!e->bfd) {
            bf_split(e, e->be, l, 0, src, e->bn);
            return HPT_OK;
        }
        e->be->bf16_split(e->bstage, NULL, src, e->bn);
        e->be->memset(e->bstage + e->bn, 0, (e->hstride - e->bn) * sizeof(uint16_t));
        HPT_CHECK(eng_bstage_io(e, l, 0, 1));
        hpt_mem_transfer(e->mem, HPT_TIER_HOST, HPT_TIER_DISK, HPT_CAT_PARAMS,
                         e->hstride * sizeof(uint16_t));
        return HPT_OK;
    }
    if (e->tier[b] != HPT_TIER_DISK) return HPT_OK;
    if (b == EB_P) eng_drop_slot(e, l);
    /* the buffer is the scratch (aligned, stride floats) */
    HPT_CHECK(mem_disk_rw(e->mem, &e->disk[b], (uint64_t)l * e->stride * sizeof(float),
                          (void *)(uintptr_t)src, e->stride * sizeof(float), 1));
    hpt_tier st;
    (void)scratch(e, &st); /* src's tier */
    hpt_mem_transfer(e->mem, st, HPT_TIER_DISK, k_cat[b],
                     e->stride * sizeof(float));
    return HPT_OK;
}
