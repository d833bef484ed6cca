/* engine_z3.c: ZeRO in the offload engine's homes (ZeRO-Infinity). Stages 1 and 2 shard the
 * homes of m and v (at 2 the gradients' too) and all-gather each owner's updated range into the
 * block before its write-back (eng_z12_gather). Stage 3 (o.shards = N): each rank's homes hold
 * only its shard [zlo, zhi) of every block, packed at l * hstr floats; slots stay whole blocks,
 * the acquisition all-gathers the other ranks' ranges (eng_z3_gather, again after an update:
 * blk_seq past zseq), the gradient-done point reduce-scatters onto the owners, each rank updates
 * its shard. bf16 and 16-bit homes, checkpoints: docs/zero_engine.md.
 * Invariants (one process's bits): shard boundaries fall on k_sumsq's chunks, 8-bit blocks and
 * Adam-mini rows (cut_step), so every sum and update is one process's (eng_z3_norm adds the
 * gathered chunk sums in k_sumsq's order; stochastic rounding keys on the one process's index);
 * every collective runs on the compute thread in the runner's order, the same on every rank;
 * the worker never communicates. */
#include "core/choices.h"
#include "offload/engine_int.h"

#include <stdlib.h>
#include <string.h>

#define SUMSQ_CHUNKS 64 /* k_sumsq's K_CHUNKS (src/kernels/cpu/pointwise.c) */

static size_t round4k(size_t n) { return (n * sizeof(float) + 4095) / 4096 * 4096 / sizeof(float); }

static size_t gcd_z(size_t a, size_t b) {
    while (b) {
        size_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}
static size_t lcm_z(size_t a, size_t b) { return a / gcd_z(a, b) * b; }

/* Where a shard boundary may fall inside slice i of n values (row: its optimizer row, 0 when
 * not known): on a multiple of this step from the slice's start. Always on a sum-of-squares
 * chunk start (the norm's bits); with rows known also on a multiple of the 8-bit state's
 * 256-value block and of the Adam-mini row (a vector slice is one row: never cut inside), so an
 * owner's range of any optimizer's state starts on a whole block and a whole row
 * (docs/zero_engine.md). The slice's start always qualifies. */
static size_t cut_step(size_t n, size_t row) {
    size_t chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
    if (!chunk) return 1;
    if (!row) return chunk;
    return lcm_z(lcm_z(chunk, HPT_Q8_BLOCK), row);
}

/* The shard boundaries of a block of ns slices: rank q's [lo[q], hi[q]); each lo the first
 * allowed boundary (cut_step) at or after q * bn / N. Returns the largest shard. */
size_t eng_shard_ranges(int ns, const size_t *slice_n, const size_t *slice_row, int N,
                           size_t *lo, size_t *hi) {
    size_t bn = 0;
    for (int i = 0; i < ns; i++) bn += slice_n[i];
    lo[0] = 0;
    for (int q = 1; q < N; q++) {
        uint64_t t = (uint64_t)bn * (uint64_t)q / (uint64_t)N;
        size_t best = bn, off = 0;
        for (int i = 0; i < ns && best == bn; i++) {
            size_t n = slice_n[i], step = cut_step(n, slice_row ? slice_row[i] : 0);
            for (size_t c = 0; c * step < n; c++)
                if (off + c * step >= t) {
                    best = off + c * step;
                    break;
                }
            off += n;
        }
        lo[q] = HPT_MAX(best, lo[q - 1]);
    }
    size_t big = 0;
    for (int q = 0; q < N; q++) {
        hi[q] = q + 1 < N ? lo[q + 1] : bn;
        big = HPT_MAX(big, hi[q] - lo[q]);
    }
    return big;
}

void eng_slice_rows(const hpt_tensor_table *t, size_t rows[ENG_MAX_SLICES]) {
    for (int s = 0; s < t->n_slices && s < ENG_MAX_SLICES; s++) {
        const hpt_tensor_desc *d = &t->t[hpt_table_slice_tensor(t, s)];
        rows[s] = (size_t)d->shape[d->ndim - 1];
    }
}

/* Rank q's part of each slice, in the slice's coordinates: a[i], z[i] (a == z: none). */
static void slice_cuts(int ns, const size_t *slice_n, const size_t *lo, const size_t *hi, int q,
                       size_t *a, size_t *z) {
    size_t off = 0;
    for (int i = 0; i < ns; i++) {
        size_t n = slice_n[i];
        a[i] = HPT_MIN(HPT_MAX(lo[q], off), off + n) - off;
        z[i] = HPT_MIN(HPT_MAX(hi[q], off), off + n) - off;
        if (z[i] < a[i]) z[i] = a[i];
        off += n;
    }
}

int eng_cut_of(const hpt_offload_opts *o, int ns, const size_t *slice_n, const size_t *slice_row,
               int rank, size_t *a, size_t *z) {
    size_t lo[64], hi[64];
    int N = HPT_MIN(HPT_MAX(o->shards, 1), 64);
    eng_shard_ranges(ns, slice_n, slice_row, N, lo, hi);
    slice_cuts(ns, slice_n, lo, hi, HPT_MIN(HPT_MAX(rank, 0), N - 1), a, z);
    return N;
}

int eng_cuts(const offload_engine *e, int q, size_t *a, size_t *z) {
    if (!e->z3) {
        for (int i = 0; i < e->ns; i++) {
            a[i] = 0;
            z[i] = e->slice_n[i];
        }
        return 1;
    }
    slice_cuts(e->ns, e->slice_n, e->zlo_all, e->zhi_all, q, a, z);
    return e->o.shards;
}

/* A sharded disk home moves a shard between disk and a whole block's range (slots, and the
 * checkpoints' scratch): through the bounce buffer. */
static int needs_bounce(const hpt_offload_opts *o) {
    int z = eng_zstage(o);
    return (z == 3 && o->params == HPT_TIER_DISK) ||
           (z >= 2 && !o->fused && o->grads == HPT_TIER_DISK) || o->optim == HPT_TIER_DISK;
}

hpt_status eng_check_sharded(const hpt_offload_opts *o) {
    if (o->shards <= 1) return HPT_OK;
    int z = eng_zstage(o);
    if (o->shards > 64) return hpt_fail(HPT_ERR_UNSUPPORTED, "--zero %d: more than 64 processes", z);
    return HPT_OK;
}

void eng_bytes_sharded(const hpt_offload_opts *o, int L, int n_slices, const size_t *slice_n,
                       const size_t *slice_row, int training, int mv_homes, uint64_t out[HPT_TIER_COUNT][HPT_CAT_COUNT]) {
    size_t lo[64], hi[64], bn = 0;
    for (int i = 0; i < n_slices; i++) bn += slice_n[i];
    int N = HPT_MIN(HPT_MAX(o->shards, 1), 64);
    size_t hstr = round4k(eng_shard_ranges(n_slices, slice_n, slice_row, N, lo, hi));
    eng_bytes_homes(o, L, bn, hstr, training, mv_homes, out);
    if (needs_bounce(o)) out[HPT_TIER_HOST][HPT_CAT_IO] += (uint64_t)hstr * sizeof(float);
}

hpt_status eng_z3_setup(offload_engine *e) {
    int N = e->o.shards, r = hpt_dist_rank();
    HPT_CHECK(eng_check_sharded(&e->o));
    if (N != hpt_dist_size())
        return hpt_fail(HPT_ERR_INVALID, "offload engine: ZeRO-3 over %d shards in %d processes",
                        N, hpt_dist_size());
    e->z3 = 1;
    e->zstage = eng_zstage(&e->o);
    e->zlo_all = malloc((size_t)N * sizeof *e->zlo_all);
    e->zhi_all = malloc((size_t)N * sizeof *e->zhi_all);
    e->zseq = calloc((size_t)e->L, sizeof *e->zseq);
    size_t parts = (size_t)e->L * (size_t)e->ns * SUMSQ_CHUNKS;
    e->zpart = calloc(parts, sizeof *e->zpart);
    e->zrecv = calloc(parts * (size_t)N, sizeof *e->zrecv);
    if (!e->zlo_all || !e->zhi_all || !e->zseq || !e->zpart || !e->zrecv)
        return hpt_fail(HPT_ERR_OOM, "offload engine: ZeRO-3 records");
    e->hstr = round4k(eng_shard_ranges(e->ns, e->slice_n, e->has_rows ? e->slice_row : NULL, N,
                                   e->zlo_all, e->zhi_all));
    e->zlo = e->zlo_all[r];
    e->zhi = e->zhi_all[r];
    e->hn = e->zhi - e->zlo;
    if (e->bf && e->zstage == 3) e->hstride = eng_zhalves(e->hstr, e->o.params); /* a shard's halves */
    if (e->zstage >= 2) e->ghs = eng_zhalves(e->hstr, e->o.grads); /* a 16-bit G: a shard's */
    if (e->bf == HPT_BW_BF16_KAHAN) e->cstride = e->hstr; /* the compensation: the owner's range */
    if (!needs_bounce(&e->o)) return HPT_OK;
    hpt_mem_set_name(e->mem, "ZeRO-3 shard bounce");
    return e->be->alloc(e->mem, HPT_TIER_HOST, HPT_CAT_IO, e->hstr * sizeof(float), (void **)&e->bounce);
}

void eng_z3_free(offload_engine *e) {
    if (!e->z3) return;
    e->be->free(e->mem, HPT_TIER_HOST, HPT_CAT_IO, e->bounce, e->hstr * sizeof(float));
    e->bounce = NULL;
    free(e->zlo_all);
    free(e->zhi_all);
    free(e->zseq);
    free(e->zpart);
    free(e->zrecv);
    e->z3 = e->zstage = 0;
}

hpt_status eng_z3_slot_io(offload_engine *e, int b, int l, float *slot, int write_) {
    float *r = slot + e->zlo;
    if (e->tier[b] != HPT_TIER_DISK) return eng_home_io(e, b, l, r, write_);
    if (write_) {
        e->be->copy(e->bounce, r, e->hn * sizeof(float), HPT_COPY_D2H);
        return eng_home_io(e, b, l, e->bounce, 1);
    }
    HPT_CHECK(eng_home_io(e, b, l, e->bounce, 0));
    e->be->copy(r, e->bounce, e->hn * sizeof(float), HPT_COPY_H2D);
    return HPT_OK;
}

/* The collectives the trainer gave (eng_set_comm): a sharded engine cannot run without. */
static hpt_status need_comm(const offload_engine *e) {
    if (e->comm) return HPT_OK;
    return hpt_fail(HPT_ERR_INVALID, "offload engine: ZeRO-3 over %d processes without their "
                    "collectives (eng_set_comm)", e->o.shards);
}

hpt_status eng_z12_gather(offload_engine *e, int l, float *blk, int set) {
    HPT_CHECK(need_comm(e));
    /* bf16 weights: their memory home's block, or on disk the staging block of set (the update
     * rounded into it; the write-back takes it to disk after this) */
    uint16_t *wh = !e->bf ? NULL : e->bfd ? e->bstage + (size_t)set * e->hstride : e->wh + (size_t)l * e->hstride;
    if (wh) e->be->bf16_widen(blk, wh, e->bn);
    HPT_CHECK(e->comm->allgather(blk, e->zlo_all, e->zhi_all, "a block's updated weights (ZeRO-1/2)"));
    if (wh) e->be->bf16_split(wh, NULL, blk, e->bn);
    return HPT_OK;
}

hpt_status eng_z3_gather(offload_engine *e, int l, float *slot) {
    if (e->zseq[l] == e->blk_seq[l]) return HPT_OK; /* gathered since its last load or update */
    HPT_CHECK(need_comm(e));
    HPT_CHECK(e->comm->allgather(slot, e->zlo_all, e->zhi_all, "a block's weights (ZeRO-3)"));
    e->zseq[l] = e->blk_seq[l];
    return HPT_OK;
}

hpt_status eng_allgather_bytes(offload_engine *e, const void *send, size_t bytes, void *recv,
                               const char *what) {
    HPT_CHECK(need_comm(e));
    return e->comm->allgather_raw(send, bytes, recv, what);
}

/* One k_sumsq chunk's sum: in order, from 0, in double (its lanes' arithmetic). */
static double chunk_sumsq(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

hpt_status eng_z3_reduce(offload_engine *e, int l, float *g) {
    HPT_CHECK(need_comm(e));
    HPT_CHECK(e->comm->reduce_scatter(g, e->zlo_all, e->zhi_all, "a block's gradients (ZeRO)"));
    if (!e->add_home) eng_z3_parts(e, l, g); /* else the worker's, of the sum over k */
    return HPT_OK;
}

void eng_z3_parts(offload_engine *e, int l, const float *g) {
    double *part = e->zpart + (size_t)l * (size_t)e->ns * SUMSQ_CHUNKS;
    for (int i = 0; i < e->ns; i++) {
        size_t n = e->slice_n[i], chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
        for (size_t c = 0; c < SUMSQ_CHUNKS; c++) {
            size_t a = HPT_MIN(c * chunk, n), len = HPT_MIN(chunk, n - a), u = e->slice_off[i] + a;
            part[(size_t)i * SUMSQ_CHUNKS + c] =
                len && u >= e->zlo && u < e->zhi ? chunk_sumsq(g + u, len) : 0.0;
        }
    }
}

hpt_status eng_z3_norm(offload_engine *e) {
    if (!e->z3) return HPT_OK;
    size_t per = (size_t)e->L * (size_t)e->ns * SUMSQ_CHUNKS;
    HPT_CHECK(need_comm(e));
    HPT_CHECK(e->comm->allgather_raw(e->zpart, per * sizeof(double), e->zrecv, "the norm's parts (ZeRO-3)"));
    int N = e->o.shards;
    for (int l = 0; l < e->L; l++) {
        double s = 0.0;
        for (int i = 0; i < e->ns; i++) {
            size_t n = e->slice_n[i], chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
            double si = 0.0; /* k_sumsq's: its chunks' sums in order */
            for (size_t c = 0; c < SUMSQ_CHUNKS; c++) {
                size_t a = HPT_MIN(c * chunk, n), u = e->slice_off[i] + a;
                int q = 0; /* the chunk's owner (an empty chunk's sum is 0 on every rank) */
                while (q + 1 < N && u >= e->zhi_all[q]) q++;
                si += e->zrecv[(size_t)q * per + ((size_t)l * e->ns + i) * SUMSQ_CHUNKS + c];
            }
            s += si; /* eng_grads_done's: the slices' sums in order */
        }
        e->sumsq[l] = s;
    }
    return HPT_OK;
}

/* ---- between steps: checkpoints' gather and scatter, initialisation --------------------- */


/* This rank's shard of block l of buffer b into scr's range [zlo, zhi) (scr a whole block). */
static hpt_status shard_in(offload_engine *e, int b, int l, float *scr) {
    if (e->tier[b] == HPT_TIER_DISK)
        hpt_mem_transfer(e->mem, HPT_TIER_DISK, HPT_TIER_HOST, k_cat[b],
                         b == EB_P && e->bfd ? e->hstride * sizeof(uint16_t) : e->hstr * sizeof(float));
    return eng_z3_slot_io(e, b, l, scr, 0);
}

static hpt_status shard_out(offload_engine *e, int b, int l, float *scr) {
    if (b == EB_P && e->bfd) { /* rounded to nearest into staging set 0, written (no Kahan) */
        e->be->bf16_split(e->bstage, NULL, scr + e->zlo, e->hn);
        e->be->memset(e->bstage + e->hn, 0, (e->hstride - e->hn) * sizeof(uint16_t));
        hpt_mem_transfer(e->mem, HPT_TIER_HOST, HPT_TIER_DISK, HPT_CAT_PARAMS, e->hstride * sizeof(uint16_t));
        return eng_bstage_io(e, l, 0, 1);
    }
    if (b == EB_P && e->bf) { /* rounded to nearest, as a whole home's are (eng_store_block);
                               * Kahan: the residue is the compensation */
        e->be->bf16_split(e->wh + (size_t)l * e->hstride, e->wc ? e->wc + eng_comp_at(e, l, e->zlo) : NULL,
                          scr + e->zlo, e->hn);
        return HPT_OK;
    }
    if (e->tier[b] == HPT_TIER_DISK)
        hpt_mem_transfer(e->mem, HPT_TIER_HOST, HPT_TIER_DISK, k_cat[b], e->hstr * sizeof(float));
    return eng_z3_slot_io(e, b, l, scr, 1);
}

hpt_status eng_z3_emit_slice(offload_engine *e, int b, int l, int i, eng_emit_fn emit, void *ctx) {
    HPT_CHECK(eng_drain(e));
    if (!e->has[b]) return hpt_fail(HPT_ERR_INVALID, "offload engine: no home %d to gather", b);
    float *scr = eng_slot_scratch(e);
    HPT_CHECK(shard_in(e, b, l, scr));
    /* the slice's ranges on every rank, in the slice's coordinates */
    size_t s0 = e->slice_off[i], s1 = s0 + e->slice_n[i], lo[64], hi[64];
    int N = e->o.shards;
    for (int q = 0; q < N; q++) {
        lo[q] = HPT_MIN(HPT_MAX(e->zlo_all[q], s0), s1) - s0;
        hi[q] = HPT_MIN(HPT_MAX(e->zhi_all[q], s0), s1) - s0;
    }
    HPT_CHECK(need_comm(e));
    HPT_CHECK(e->comm->allgather(scr + s0, lo, hi, "a checkpoint's slice (ZeRO-3)"));
    return emit(ctx, scr + s0, e->slice_n[i]);
}

hpt_status eng_z3_absorb_slice(offload_engine *e, int b, int l, int i, eng_read_fn read, void *ctx) {
    HPT_CHECK(eng_drain(e));
    if (!e->has[b]) return hpt_fail(HPT_ERR_INVALID, "offload engine: no home %d to fill", b);
    float *scr = eng_slot_scratch(e);
    if (b == EB_P && e->slot_of[l] >= 0) { /* its slot's copy becomes stale */
        e->slot_blk[e->slot_of[l]] = -1;
        e->slot_of[l] = -1;
        e->res[l] = RS_HOME;
    }
    HPT_CHECK(shard_in(e, b, l, scr)); /* the rest of this rank's shard stays */
    size_t s0 = e->slice_off[i], n = e->slice_n[i];
    HPT_CHECK(read(ctx, scr + s0, n)); /* every rank reads the whole slice; keeps its range */
    return shard_out(e, b, l, scr);
}

hpt_status eng_z3_block_dest(offload_engine *e, int b, int l, float **dst, int *in_place) {
    (void)b;
    (void)l;
    HPT_CHECK(eng_drain(e));
    *in_place = 0;
    *dst = eng_slot_scratch(e);
    return HPT_OK;
}

hpt_status eng_z3_store_block(offload_engine *e, int b, int l, const float *src) {
    if (b == EB_P && e->slot_of[l] >= 0) {
        e->slot_blk[e->slot_of[l]] = -1;
        e->slot_of[l] = -1;
        e->res[l] = RS_HOME;
    }
    return shard_out(e, b, l, (float *)(uintptr_t)src);
}

/* ---- bf16-kahan weights: the compensation of this rank's range, whole for a checkpoint ----- */

hpt_status eng_z3_comp_gather(offload_engine *e, uint16_t *whole) {
    size_t S = eng_round_halves(e->bn), piece = e->cstride * sizeof(uint16_t);
    int N = e->o.shards;
    char *recv = malloc((size_t)N * piece);
    if (!recv) return hpt_fail(HPT_ERR_OOM, "offload engine: the compensation's gather buffer");
    hpt_status s = need_comm(e);
    for (int l = 0; l < e->L && s == HPT_OK; l++) { /* each rank's range of block l, rank order */
        s = e->comm->allgather_raw(e->wc + (size_t)l * e->cstride, piece, recv,
                                   "a checkpoint's Kahan compensation (ZeRO)");
        for (int q = 0; q < N && s == HPT_OK; q++)
            memcpy(whole + (size_t)l * S + e->zlo_all[q], recv + (size_t)q * piece,
                   (e->zhi_all[q] - e->zlo_all[q]) * sizeof(uint16_t));
        if (s == HPT_OK) memset(whole + (size_t)l * S + e->bn, 0, (S - e->bn) * sizeof(uint16_t));
    }
    free(recv);
    return s;
}

void eng_z3_comp_scatter(offload_engine *e, const uint16_t *whole) {
    size_t S = eng_round_halves(e->bn);
    for (int l = 0; l < e->L; l++)
        memcpy(e->wc + (size_t)l * e->cstride, whole + (size_t)l * S + e->zlo, e->hn * sizeof(uint16_t));
}
