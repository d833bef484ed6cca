/* engine_sums.c: the offload engine's part of the gradient norm and of the loss scale's overflow
 * check (docs/cuda.md, "Host round trips"). When block l's gradients are done (its slot is
 * reused afterwards) its slices' sums of squares go into a device buffer of (L, ENG_MAX_SLICES)
 * doubles without a round trip (sumsq_many_dev); eng_sums_read reads every pending block's at
 * once, at the norm or the overflow decision, and adds each block's slices in slice order.
 * Invariants: e->sumsq[l] is what the per-slice sumsq calls added in order gave (the same bits);
 * a sum of squares in double of finite floats is finite (each square below 2^256) and one with an
 * infinite or NaN value is not, so when the slices cover the block !isfinite(sum) is nonfinite
 * over it; a block summed again before the read replaces its sums, and one whose overflow check
 * is pending is read first, so no micro-batch's check is lost. Without an optimizer attached
 * (no buffer) or on the add_home path a block's sum is read at once (eng_slices_sumsq). */
#include "offload/engine_int.h"

#include <math.h>
#include <stdlib.h>

size_t eng_sums_bytes(int L) { return (size_t)L * ENG_MAX_SLICES * sizeof(double); }

double eng_slices_sumsq(const offload_engine *e, const float *g) {
    const float *xs[ENG_MAX_SLICES];
    double u[ENG_MAX_SLICES], s = 0.0;
    for (int i = 0; i < e->ns; i++) xs[i] = g + e->slice_off[i];
    e->be->sumsq_many(u, xs, e->slice_n, (size_t)e->ns); /* one round trip */
    for (int i = 0; i < e->ns; i++) s += u[i];
    return s;
}

/* Whether the slices are the block's bn values, in order, without holes. */
static int slices_cover(const offload_engine *e) {
    size_t at = 0;
    for (int i = 0; i < e->ns; i++) {
        if (e->slice_off[i] != at) return 0;
        at += e->slice_n[i];
    }
    return at == e->bn;
}

hpt_status eng_sums_attach(offload_engine *e) {
    hpt_mem_set_name(e->mem, "block gradient sums");
    HPT_CHECK(e->be->alloc(e->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, eng_sums_bytes(e->L),
                           (void **)&e->sums_dev));
    e->sums_host = malloc(eng_sums_bytes(e->L));
    e->sums_pend = calloc((size_t)e->L, 1);
    if (!e->sums_host || !e->sums_pend) return hpt_fail(HPT_ERR_OOM, "offload engine: the blocks' sums");
    return HPT_OK;
}

void eng_sums_detach(offload_engine *e) {
    if (e->sums_dev) e->be->free(e->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, e->sums_dev, eng_sums_bytes(e->L));
    free(e->sums_host);
    free(e->sums_pend);
    e->sums_dev = e->sums_host = NULL;
    e->sums_pend = NULL;
    e->n_pend = 0;
}

void eng_sums_take(offload_engine *e, int l, const float *g) {
    int summed = !e->add_home && !e->z3 && e->ns > 0;
    int check = e->check_grads && !e->gh && !e->z3; /* 16-bit: at narrowing */
    int by_sum = summed && slices_cover(e);
    if (e->sums_pend && e->sums_pend[l]) { /* an earlier micro-batch's sums of this block */
        if (e->sums_pend[l] & 2) {
            eng_sums_read(e); /* its overflow check, which this call's sums would replace */
        } else {
            e->sums_pend[l] = 0; /* superseded: this call sets the block's sum */
            e->n_pend--;
        }
    }
    if (summed && e->sums_dev && e->sums_host && e->sums_pend) { /* read at the norm */
        const float *xs[ENG_MAX_SLICES];
        for (int i = 0; i < e->ns; i++) xs[i] = g + e->slice_off[i];
        e->be->sumsq_many_dev(e->sums_dev + (size_t)l * ENG_MAX_SLICES, xs, e->slice_n, (size_t)e->ns);
        e->n_pend++;
        e->sums_pend[l] = (unsigned char)(1 | (check && by_sum ? 2 : 0));
        if (check && !by_sum) e->g_over |= e->be->nonfinite(g, e->bn);
        return;
    }
    double s = summed ? eng_slices_sumsq(e, g) : 0.0;
    e->sumsq[l] = s;
    if (check) e->g_over |= by_sum ? !isfinite(s) : e->be->nonfinite(g, e->bn);
}

void eng_sums_read(offload_engine *e) {
    if (!e || !e->n_pend) return;
    e->be->copy(e->sums_host, e->sums_dev, eng_sums_bytes(e->L), HPT_COPY_D2H); /* one round trip */
    for (int l = 0; l < e->L; l++) {
        if (!e->sums_pend[l]) continue;
        const double *u = e->sums_host + (size_t)l * ENG_MAX_SLICES;
        double s = 0.0; /* eng_slices_sumsq's order */
        for (int i = 0; i < e->ns; i++) s += u[i];
        e->sumsq[l] = s;
        if (e->sums_pend[l] & 2) e->g_over |= !isfinite(s);
        e->sums_pend[l] = 0;
    }
    e->n_pend = 0;
}
