/* engine_zemb.c: ZeRO in the offload engine for the tensors outside the blocks (GPT-2's wte, wpe
 * and final layernorm; any table's non-stacked tensors), at stages 1, 2 and 3 with full or
 * chunked embeddings. Their concatenation is cut into N ranges with the blocks' rule
 * (eng_shard_ranges); rank q's optimizer state and update cover its range only; the gradients
 * are reduce-scattered onto the owners (eng_zemb_reduce) and the updated weights all-gathered
 * into every rank's whole flat buffer (eng_zemb_gather). The layout, why stage 3 keeps these
 * weights whole, chunked and bf16 embeddings: docs/zero_engine.md, "wte, wpe and the final
 * layernorm".
 * Invariants: the cut falls on k_sumsq's chunk starts, so eng_zemb_norm's gathered chunk sums,
 * added in k_sumsq's order, give one process's norm bit for bit; every call is collective
 * (every rank, the same order, on the compute thread); the worker never calls one. */
#include "offload/engine_int.h"

#include <stdlib.h>
#include <string.h>

#define ZEMB_CHUNKS 64 /* k_sumsq's K_CHUNKS (src/kernels/cpu/pointwise.c) */

/* Full or chunked embeddings keep wte, wpe, lnf fp32 in the flat weights (bf16 ones do not). */
static int cut_kind(int emb) { return emb == HPT_EMB_FULL || emb == HPT_EMB_CHUNKED; }

int eng_zemb_on(const offload_engine *e) {
    return e && e->z3 && e->o.shards > 1 && cut_kind(e->o.embeddings);
}

/* The non-block tensors of t (table indices, in order), their sizes and rows; returns how many. */
static int nonblock(const hpt_tensor_table *t, int *idx, size_t *n, size_t *row) {
    int k = 0;
    for (int i = 0; i < t->n; i++) {
        const hpt_tensor_desc *d = &t->t[i];
        if (d->layer == HPT_LAYER_STACKED) continue;
        idx[k] = i;
        n[k] = hpt_tensor_numel(d);
        row[k] = (size_t)d->shape[d->ndim - 1];
        k++;
    }
    return k;
}

/* Every rank's range [lo[q], hi[q]) of the concatenation, N ranks. */
static void ranges(const hpt_tensor_table *t, int N, size_t *lo, size_t *hi) {
    int idx[HPT_TABLE_MAX];
    size_t n[HPT_TABLE_MAX], row[HPT_TABLE_MAX];
    int k = nonblock(t, idx, n, row);
    eng_shard_ranges(k, n, row, N, lo, hi);
}

int eng_zemb_cut_of(const hpt_offload_opts *o, const hpt_tensor_table *t, int q, size_t *a,
                    size_t *z) {
    int N = o->shards > 1 && cut_kind(o->embeddings) ? HPT_MIN(o->shards, 64) : 1;
    size_t lo[64] = {0}, hi[64];
    int idx[HPT_TABLE_MAX];
    size_t n[HPT_TABLE_MAX], row[HPT_TABLE_MAX], off = 0;
    int k = nonblock(t, idx, n, row);
    if (N > 1) {
        eng_shard_ranges(k, n, row, N, lo, hi);
    } else {
        for (int j = 0; j < k; j++) off += n[j];
        hi[0] = off;
        off = 0;
    }
    q = HPT_MIN(HPT_MAX(q, 0), N - 1);
    for (int j = 0; j < k; j++) {
        size_t A = HPT_MIN(HPT_MAX(lo[q], off), off + n[j]), Z = HPT_MIN(HPT_MAX(hi[q], off), off + n[j]);
        a[idx[j]] = A - off;
        z[idx[j]] = HPT_MAX(Z, A) - off;
        off += n[j];
    }
    return N;
}

int eng_zemb_cuts(const offload_engine *e, const hpt_tensor_table *t, int q, size_t *a, size_t *z) {
    if (!eng_zemb_on(e)) {
        hpt_offload_opts o = e->o;
        o.shards = 1;
        return eng_zemb_cut_of(&o, t, q, a, z);
    }
    return eng_zemb_cut_of(&e->o, t, q, a, z);
}

static hpt_status comm_of(const offload_engine *e) {
    if (e->comm) return HPT_OK;
    return hpt_fail(HPT_ERR_INVALID, "offload engine: wte/wpe/lnf sharded over %d processes "
                    "without their collectives (eng_set_comm)", e->o.shards);
}

/* Values of the skipped tensors (bit i of skip: table index i) before x of the concatenation:
 * x minus it is x's place in the flat gradients, which leave those tensors out. */
static size_t skipped_before(const hpt_tensor_table *t, uint32_t skip, size_t x) {
    size_t off = 0, c = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->t[i].layer == HPT_LAYER_STACKED) continue;
        size_t n = hpt_tensor_numel(&t->t[i]);
        if (skip >> i & 1u) c += x <= off ? 0 : HPT_MIN(x - off, n);
        off += n;
    }
    return c;
}

hpt_status eng_zemb_reduce(offload_engine *e, const hpt_tensor_table *t, float *g, uint32_t skip) {
    size_t lo[64], hi[64];
    HPT_CHECK(comm_of(e));
    ranges(t, e->o.shards, lo, hi);
    for (int q = 0; q < e->o.shards; q++) { /* the flat gradients' coordinates */
        lo[q] -= skipped_before(t, skip, lo[q]);
        hi[q] -= skipped_before(t, skip, hi[q]);
    }
    return e->comm->reduce_scatter(g, lo, hi, "wte's, wpe's and lnf's gradients (ZeRO)");
}

/* One k_sumsq chunk's sum: in order, from 0, in double. */
static double chunk_sumsq(const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)x[i];
    return s;
}

hpt_status eng_zemb_norm(offload_engine *e, const hpt_tensor_table *t, const float *g, uint32_t skip) {
    int idx[HPT_TABLE_MAX];
    size_t n[HPT_TABLE_MAX], row[HPT_TABLE_MAX], lo[64], hi[64];
    int k = nonblock(t, idx, n, row), N = e->o.shards;
    HPT_CHECK(comm_of(e));
    eng_shard_ranges(k, n, row, N, lo, hi);
    int r = hpt_dist_rank();
    size_t per = (size_t)k * ZEMB_CHUNKS;
    double *part = calloc(per * (size_t)(N + 1), sizeof(double)); /* a few KiB */
    if (!part) return hpt_fail(HPT_ERR_OOM, "the non-block gradients' norm (ZeRO)");
    double *all = part + per;
    size_t off = 0, goff = 0; /* the concatenation's and the flat gradients' */
    for (int j = 0; j < k; j++) { /* this rank's chunks: those starting in its range */
        size_t chunk = (n[j] + ZEMB_CHUNKS - 1) / ZEMB_CHUNKS;
        for (size_t c = 0; c < ZEMB_CHUNKS && !(skip >> idx[j] & 1u); c++) {
            size_t a = HPT_MIN(c * chunk, n[j]), len = HPT_MIN(chunk, n[j] - a), u = off + a;
            part[(size_t)j * ZEMB_CHUNKS + c] = len && u >= lo[r] && u < hi[r] ? chunk_sumsq(g + goff + a, len) : 0.0;
        }
        off += n[j];
        goff += skip >> idx[j] & 1u ? 0 : n[j];
    }
    hpt_status s = e->comm->allgather_raw(part, per * sizeof(double), all, "the non-block norm's parts (ZeRO)");
    off = 0;
    for (int j = 0; j < k && s == HPT_OK; j++) {
        size_t chunk = (n[j] + ZEMB_CHUNKS - 1) / ZEMB_CHUNKS;
        double sj = 0.0; /* k_sumsq's: its chunks' sums in order */
        for (size_t c = 0; c < ZEMB_CHUNKS; c++) {
            size_t u = off + HPT_MIN(c * chunk, n[j]);
            int q = 0; /* the chunk's owner (an empty chunk's sum is 0 on every rank) */
            while (q + 1 < N && u >= hi[q]) q++;
            sj += all[(size_t)q * per + (size_t)j * ZEMB_CHUNKS + c];
        }
        e->zemb_sumsq[idx[j]] = sj;
        off += n[j];
    }
    e->zemb_norm = s == HPT_OK;
    free(part);
    return s;
}

int eng_zemb_sumsq(const offload_engine *e, int i, double *s) {
    if (!eng_zemb_on(e) || !e->zemb_norm || i < 0 || i >= HPT_TABLE_MAX) return 0;
    *s = e->zemb_sumsq[i];
    return 1;
}

void eng_zemb_norm_used(offload_engine *e) {
    if (e) e->zemb_norm = 0;
}

hpt_status eng_zemb_gather(offload_engine *e, const hpt_tensor_table *t, float *flat) {
    size_t lo[64], hi[64];
    HPT_CHECK(comm_of(e));
    ranges(t, e->o.shards, lo, hi);
    return e->comm->allgather(flat, lo, hi, "wte's, wpe's and lnf's updated weights (ZeRO)");
}

hpt_status eng_zemb_whole(offload_engine *e, const hpt_tensor_table *t, const float *mine,
                          float *whole) {
    size_t lo[64], hi[64];
    HPT_CHECK(comm_of(e));
    ranges(t, e->o.shards, lo, hi);
    int r = hpt_dist_rank();
    memcpy(whole + lo[r], mine, (hi[r] - lo[r]) * sizeof(float));
    return e->comm->allgather(whole, lo, hi, "a checkpoint's non-block optimizer state (ZeRO)");
}

void eng_zemb_keep(const offload_engine *e, const hpt_tensor_table *t, const float *whole,
                   float *mine) {
    size_t lo[64], hi[64];
    ranges(t, e->o.shards, lo, hi);
    int r = hpt_dist_rank();
    memcpy(mine, whole + lo[r], (hi[r] - lo[r]) * sizeof(float));
}
