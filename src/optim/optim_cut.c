/* optim_cut.c: ZeRO in the offload engine, the optimizer's side: the state of each rank's cut
 * of the blocks' slices (and of the non-block tensors', engine_zemb.c), its bytes for the
 * estimator, where a checkpoint piece's values lie in the buffers (optim_place, the sharded
 * checkpoints of src/train/zero.c) and the gathered whole-state emit and absorb (state.bin).
 * Invariants: a rank's cut of a slice is [ca, ca + cn) of its values (eng_cuts), on 8-bit
 * blocks and Adam-mini rows, so every buffer's part of a cut is whole elements; the ranks' cuts
 * tile each slice in rank order (cut_pieces checks it). */
#include "optim/optim_int.h"

#include <stdlib.h>
#include <string.h>

/* ---- ZeRO in the engine: the blocks' state cut at the shards (op->cut) ------------------- */

void optim_cut_bytes(const hpt_model_config *c, const hpt_adamw_opts *o, const size_t *slice_a,
                     const size_t *slice_z, const size_t *nb_a, const size_t *nb_z,
                     uint64_t bytes[HPT_OPTIM_NUM_BUFS]) {
    hpt_tensor_table t;
    model_describe(c, &t);
    size_t ca[HPT_TABLE_MAX], cz[HPT_TABLE_MAX];
    for (int i = 0; i < t.n; i++) { /* the non-block tensors: whole, or their given parts */
        ca[i] = nb_a ? nb_a[i] : 0;
        cz[i] = nb_z ? nb_z[i] : hpt_tensor_numel(&t.t[i]);
    }
    for (int k = 0; k < t.n_slices; k++) {
        int i = hpt_table_slice_tensor(&t, k);
        ca[i] = slice_a[k];
        cz[i] = slice_z[k];
    }
    layout L;
    optim_plan_layout(c, &t, o, 0, 0, SIZE_MAX, ca, cz, &L);
    memcpy(bytes, L.bytes, sizeof L.bytes);
}

int optim_cut(const hpt_optim *op) { return op->cut; }

/* Buffer b's elements of tensor i's slice [ca, ca + cn) in layout tl (fp32 values, codes,
 * scales or Adam-mini rows), as [*e0, *e1) in the whole slice's elements, and the element's
 * bytes; 0 when the buffer holds nothing of the tensor. */
static size_t buf_piece_k(int kind, int b, const tensor_layout *tl, size_t ca, size_t cn,
                          size_t *e0, size_t *e1) {
    int mini = kind == HPT_OPTIM_ADAM_MINI;
    *e0 = *e1 = 0;
    if (b >= B_V && kind != HPT_OPTIM_ADAMW && !(b == B_V && mini))
        return 0; /* no second moment, or Adam-mini's fp32 rows only */
    if (b == B_V && mini) {
        *e0 = ca / tl->row;
        *e1 = (ca + cn) / tl->row;
        return 4;
    }
    int codes = b == B_M_CODES || b == B_V_CODES, scales = b == B_M_SCALES || b == B_V_SCALES;
    if ((codes || scales) != tl->q8) return 0;
    if (scales) {
        *e0 = ca / HPT_Q8_BLOCK;
        *e1 = *e0 + (cn + HPT_Q8_BLOCK - 1) / HPT_Q8_BLOCK;
        return 4;
    }
    *e0 = ca;
    *e1 = ca + cn;
    return codes ? 1 : 4;
}

static size_t buf_piece(const hpt_optim *op, int b, const tensor_layout *tl, size_t ca, size_t cn,
                        size_t *e0, size_t *e1) {
    return buf_piece_k(op->o.optimizer, b, tl, ca, cn, e0, e1);
}

/* Where buffer b's part of tensor i's held slice s starts in this layout (bytes). */
static size_t buf_at(const hpt_optim *op, int b, int i, size_t s) {
    const tensor_layout *tl = &op->lay.t[i];
    size_t e0, e1, es = buf_piece(op, b, tl, tl->ca, tl->cn, &e0, &e1), per = e1 - e0;
    if (b == B_V && op->o.optimizer == HPT_OPTIM_ADAM_MINI) return (tl->v_off + s * per) * es;
    if (b == B_M_CODES || b == B_V_CODES) return tl->q_off + s * per;
    if (b == B_M_SCALES || b == B_V_SCALES) return (tl->sc_off + s * per) * es;
    return (tl->f32_off + s * per) * es;
}

/* Where values [a, z) of unit u lie in layout L's buffers (bytes; len 0 where a buffer holds
 * none of them); 0 when L does not hold them all (another run's unit, outside the slice's cut,
 * or a block unit of AdamW fp32 with the engine's homes, which hold its m and v). */
static int layout_place(const layout *L, int eng_homes, int kind, size_t u, size_t a, size_t z,
                        uint64_t off[HPT_OPTIM_NUM_BUFS], uint64_t len[HPT_OPTIM_NUM_BUFS]) {
    memset(off, 0, HPT_OPTIM_NUM_BUFS * sizeof *off);
    memset(len, 0, HPT_OPTIM_NUM_BUFS * sizeof *len);
    for (int i = 0; i < L->n; i++) {
        const tensor_layout *tl = &L->t[i];
        if (u < tl->unit || u >= tl->unit + tl->slices) continue;
        size_t s = u - tl->unit;
        if (s < tl->s0 || s >= tl->s0 + tl->ns || a > z || a < tl->ca || z > tl->ca + tl->cn ||
            (eng_homes && tl->stacked))
            return 0;
        s -= tl->s0;
        for (int b = 0; b < HPT_OPTIM_NUM_BUFS; b++) {
            size_t h0, h1, p0, p1, es = buf_piece_k(kind, b, tl, tl->ca, tl->cn, &h0, &h1), per = h1 - h0;
            if (!es || a == z) continue;
            buf_piece_k(kind, b, tl, a, z - a, &p0, &p1);
            size_t at = b == B_V && kind == HPT_OPTIM_ADAM_MINI ? tl->v_off
                        : b == B_M_CODES || b == B_V_CODES      ? tl->q_off
                        : b == B_M_SCALES || b == B_V_SCALES    ? tl->sc_off : tl->f32_off;
            off[b] = (uint64_t)(at + s * per + (p0 - h0)) * es;
            len[b] = (uint64_t)(p1 - p0) * es;
        }
        return 1;
    }
    return 0;
}

int optim_place(const hpt_optim *op, size_t u, size_t a, size_t z, uint64_t off[HPT_OPTIM_NUM_BUFS],
                uint64_t len[HPT_OPTIM_NUM_BUFS]) {
    return layout_place(&op->lay, op->eng_homes, op->o.optimizer, u, a, z, off, len);
}

void optim_place_whole(const hpt_model_config *c, const hpt_adamw_opts *o, size_t u, size_t a,
                       size_t z, uint64_t off[HPT_OPTIM_NUM_BUFS], uint64_t len[HPT_OPTIM_NUM_BUFS]) {
    hpt_tensor_table t;
    model_describe(c, &t);
    layout L;
    optim_plan_layout(c, &t, o, 0, 0, SIZE_MAX, NULL, NULL, &L);
    layout_place(&L, 0, o->optimizer, u, a, z, off, len);
}

/* The engine's shards (1 without ZeRO). */
static int n_shards(const hpt_optim *op) {
    size_t a[ENG_MAX_SLICES], z[ENG_MAX_SLICES];
    struct offload_engine *eng = model_engine(op->model);
    return eng ? eng_cuts(eng, 0, a, z) : 1;
}

/* Every rank's cut of tensor i (its block slice's), the whole slice's pieces of buffer b in rank
 * order: pieces[q] = [e0, e1); checks they tile the whole slice. */
static hpt_status cut_pieces(const hpt_optim *op, int b, int i, int N, size_t *e0, size_t *e1,
                             size_t *es, size_t *whole) {
    struct offload_engine *eng = model_engine(op->model);
    const tensor_layout *tl = &op->lay.t[i];
    size_t ca[HPT_TABLE_MAX], cz[HPT_TABLE_MAX];
    *es = 0;
    for (int q = 0; q < N; q++) {
        optim_cut_of(op, eng, q, ca, cz);
        size_t e = buf_piece(op, b, tl, ca[i], cz[i] - ca[i], &e0[q], &e1[q]);
        if (e) *es = e;
    }
    size_t w0, w1;
    buf_piece(op, b, tl, 0, tl->sn, &w0, &w1);
    *whole = w1;
    size_t at = 0; /* the non-empty pieces, in rank order, end to end from 0 to the whole */
    for (int q = 0; q < N && *es; q++) {
        if (e1[q] == e0[q]) continue;
        if (e0[q] != at)
            return hpt_fail(HPT_ERR_INVALID, "optimizer: the shards' cut of %s does not tile its "
                            "slice (rank %d: %zu..%zu)", k_buf_names[b], q, e0[q], e1[q]);
        at = e1[q];
    }
    if (*es && at != w1)
        return hpt_fail(HPT_ERR_INVALID, "optimizer: the shards' cut of %s ends at %zu of %zu",
                        k_buf_names[b], at, w1);
    return HPT_OK;
}

hpt_status optim_emit_cut(const hpt_optim *op, int b, optim_bytes_fn write, void *ctx) {
    struct offload_engine *eng = model_engine(op->model);
    int N = n_shards(op);
    if (!op->cut || N > 64) return hpt_fail(HPT_ERR_INVALID, "optim_emit_cut: no cut state");
    hpt_status s = HPT_OK;
    for (int i = 0; i < op->lay.n && s == HPT_OK; i++) {
        const tensor_layout *tl = &op->lay.t[i];
        size_t e0[64], e1[64], es, whole;
        if (!tl->stacked && !op->nbcut) { /* replicated: this rank's is the whole */
            size_t a, z, e = buf_piece(op, b, tl, 0, tl->sn, &a, &z);
            if (e && z > a)
                s = write(ctx, (char *)op->buf[b] + buf_at(op, b, i, 0), tl->slices * (z - a) * e);
            continue;
        }
        s = cut_pieces(op, b, i, N, e0, e1, &es, &whole);
        if (s != HPT_OK || !es) continue;
        size_t big = 0;
        for (int q = 0; q < N; q++) big = HPT_MAX(big, (e1[q] - e0[q]) * es);
        char *send = calloc(big ? big : 1, 1), *recv = malloc((size_t)N * (big ? big : 1));
        if (!send || !recv) s = hpt_fail(HPT_ERR_OOM, "optimizer: a checkpoint's gather buffers");
        int r = hpt_dist_rank();
        for (size_t l = 0; l < tl->slices && s == HPT_OK; l++) { /* every layer's slice */
            memcpy(send, (char *)op->buf[b] + buf_at(op, b, i, l), (e1[r] - e0[r]) * es);
            s = eng_allgather_bytes(eng, send, big, recv, "a checkpoint's optimizer state (ZeRO)");
            for (int q = 0; q < N && s == HPT_OK; q++)
                if (e1[q] > e0[q]) s = write(ctx, recv + (size_t)q * big, (e1[q] - e0[q]) * es);
        }
        free(send);
        free(recv);
    }
    return s;
}

hpt_status optim_absorb_cut(hpt_optim *op, int b, optim_bytes_fn read, void *ctx) {
    int N = n_shards(op);
    if (!op->cut || N > 64) return hpt_fail(HPT_ERR_INVALID, "optim_absorb_cut: no cut state");
    hpt_status s = HPT_OK;
    int r = hpt_dist_rank();
    for (int i = 0; i < op->lay.n && s == HPT_OK; i++) {
        const tensor_layout *tl = &op->lay.t[i];
        size_t e0[64], e1[64], es, whole;
        if (!tl->stacked && !op->nbcut) {
            size_t a, z, e = buf_piece(op, b, tl, 0, tl->sn, &a, &z);
            if (e && z > a)
                s = read(ctx, (char *)op->buf[b] + buf_at(op, b, i, 0), tl->slices * (z - a) * e);
            continue;
        }
        s = cut_pieces(op, b, i, N, e0, e1, &es, &whole);
        if (s != HPT_OK || !es) continue;
        char *tmp = malloc(whole * es + 1);
        if (!tmp) s = hpt_fail(HPT_ERR_OOM, "optimizer: a checkpoint's slice buffer");
        for (size_t l = 0; l < tl->slices && s == HPT_OK; l++) { /* the whole slice; keeps its cut */
            s = read(ctx, tmp, whole * es);
            if (s == HPT_OK)
                memcpy((char *)op->buf[b] + buf_at(op, b, i, l), tmp + e0[r] * es, (e1[r] - e0[r]) * es);
        }
        free(tmp);
    }
    return s;
}
