/* zero_side.c: one process's holdings for ZeRO's sharded checkpoints (zero.c; docs/zero.md,
 * "Checkpoints"): in memory, the run [ulo, uhi) of whole units; with the offload engine, its cut
 * of every block slice (eng_cuts: weights at stage 3, state at every stage, in the engine's homes
 * or the optimizer's cut buffers). The non-block tensors' state is cut among the ranks with full
 * embeddings in the engine (engine_zemb.c), else replicated and written by the rank whose
 * in-memory run holds it; nonblock_write and nonblock_keep are the two places that say so.
 * Invariants: the pieces a rank writes are in unit order, and the writers' pieces tile every
 * unit exactly once (zero.c checks it on load); nothing here allocates beyond the piece list
 * (engine ranges go through its accounted slot: engine_ckpt.c). */
#include "train/zero_int.h"
#include "dist/dist.h"
#include "kernels/backend.h"
#include "offload/engine.h"

#include <stdlib.h>
#include <string.h>

hpt_status zs_init(zside *s, hpt_model *model, hpt_optim *opt, const dp_shard *z) {
    memset(s, 0, sizeof *s);
    s->model = model;
    s->opt = opt;
    s->eng = model_engine(model);
    s->t = model_table(model);
    s->c = *hpt_model_get_config(model);
    s->ao = *hpt_optim_get_opts(opt);
    s->nu = optim_units(s->t);
    if (model_backend(model) != hpt_backend_cpu()) /* the pieces are copied with the CPU */
        return hpt_fail(HPT_ERR_UNSUPPORTED, "a sharded checkpoint (ZeRO) on a GPU (not built: "
                        "resume it on the CPU, then save a state.bin)");
    if (model_embeddings(model) == HPT_EMB_BF16) /* chunked ones: fp32 in the flat buffer */
        return hpt_fail(HPT_ERR_UNSUPPORTED, "a sharded checkpoint with bf16 embeddings (not "
                        "built: their weights live in bf16 homes)");
    if (s->eng) {
        size_t a[ENG_MAX_SLICES], zz[ENG_MAX_SLICES];
        s->size = eng_cuts(s->eng, 0, a, zz);
        s->rank = s->size > 1 ? hpt_dist_rank() : 0;
        s->ulo = 0;
        s->uhi = s->nu;
        if (eng_opts(s->eng)->weights == HPT_BW_BF16_KAHAN) {
            size_t bn = 0;
            for (int i = 0; i < s->t->n; i++)
                if (s->t->t[i].layer == HPT_LAYER_STACKED) bn += hpt_tensor_slice_numel(&s->t->t[i], s->t->L);
            s->comp_S = (bn * sizeof(uint16_t) + 4095) / 4096 * 4096 / sizeof(uint16_t); /* eng_comp's */
        }
        return HPT_OK;
    }
    s->rank = z->stage ? z->rank : 0;
    s->size = z->stage ? z->size : 1;
    s->ulo = z->ulo[z->rank];
    s->uhi = z->stage ? z->uhi[z->rank] : s->nu;
    return HPT_OK;
}

void zs_unit(const zside *s, size_t u, int *ti, size_t *sl, size_t *sn, size_t *off) {
    size_t unit = 0, o = 0;
    for (int i = 0; i < s->t->n; i++) {
        const hpt_tensor_desc *d = &s->t->t[i];
        size_t ns = d->layer == HPT_LAYER_STACKED ? (size_t)s->t->L : 1;
        size_t n = hpt_tensor_slice_numel(d, s->t->L);
        if (u < unit + ns) {
            *ti = i;
            *sl = u - unit;
            *sn = n;
            *off = o + (u - unit) * n;
            return;
        }
        unit += ns;
        o += ns * n;
    }
    *ti = -1;
    *sl = *sn = 0;
    *off = o;
}

static int stacked(const zside *s, int i) { return s->t->t[i].layer == HPT_LAYER_STACKED; }

/* This rank's cut of block slice k (the table's tensor i's). */
static void cut(const zside *s, int i, size_t *a, size_t *z) {
    size_t ca[ENG_MAX_SLICES], cz[ENG_MAX_SLICES];
    eng_cuts(s->eng, s->rank, ca, cz);
    int k = s->t->t[i].slice;
    *a = ca[k];
    *z = cz[k];
}

/* This rank's part of non-block tensor i when the engine cuts their state (engine_zemb.c);
 * 0 when they are replicated. */
static int nonblock_cut(const zside *s, int i, size_t *a, size_t *z) {
    if (!eng_zemb_on(s->eng)) return 0;
    size_t ca[HPT_TABLE_MAX], cz[HPT_TABLE_MAX];
    eng_zemb_cuts(s->eng, s->t, s->rank, ca, cz);
    *a = ca[i];
    *z = cz[i];
    return 1;
}

/* The values of non-block tensor i (unit u, sn values) this rank writes: its part when the
 * engine cuts their state (the parts tile the tensor), else all of them when its in-memory run
 * holds the unit (optim_owner for the writers), else none. */
static void nonblock_write(const zside *s, int i, size_t u, size_t sn, size_t *a, size_t *z) {
    size_t ulo, uhi, plo, phi;
    if (nonblock_cut(s, i, a, z)) return;
    optim_owner(s->t, s->rank, s->size, &ulo, &uhi, &plo, &phi);
    *a = 0;
    *z = u >= ulo && u < uhi ? sn : 0;
}

/* ... and what it keeps on load: the whole tensor's weights (every rank's, with the engine), the
 * state of its part when cut, else the whole tensor's. */
static void nonblock_keep(const zside *s, int i, size_t sn, size_t *wa, size_t *wz, size_t *sa,
                          size_t *sz) {
    *wa = 0;
    *wz = sn;
    if (!nonblock_cut(s, i, sa, sz)) {
        *sa = 0;
        *sz = sn;
    }
}

hpt_status zs_pieces(const zside *s, zpiece **out, size_t *n) {
    *n = 0;
    *out = malloc((s->nu ? s->nu : 1) * sizeof **out);
    if (!*out) return hpt_fail(HPT_ERR_OOM, "the checkpoint's pieces");
    for (size_t u = 0; u < s->nu; u++) {
        int i;
        size_t sl, sn, off, a = 0, z = 0;
        zs_unit(s, u, &i, &sl, &sn, &off);
        if (!s->eng) {
            if (u >= s->ulo && u < s->uhi) z = sn;
        } else if (stacked(s, i)) {
            cut(s, i, &a, &z);
        } else {
            nonblock_write(s, i, u, sn, &a, &z);
        }
        if (z > a) (*out)[(*n)++] = (zpiece){u, a, z};
    }
    return HPT_OK;
}

void zs_held(const zside *s, size_t u, size_t *wa, size_t *wz, size_t *sa, size_t *sz) {
    int i;
    size_t sl, sn, off;
    zs_unit(s, u, &i, &sl, &sn, &off);
    *wa = *sa = 0;
    *wz = *sz = sn;
    if (!s->eng) {
        if (u < s->ulo || u >= s->uhi) *sz = 0;
    } else if (stacked(s, i)) {
        cut(s, i, sa, sz);
        if (eng_home_shard(s->eng, EB_P)) {
            *wa = *sa;
            *wz = *sz;
        }
    } else {
        nonblock_keep(s, i, sn, wa, wz, sa, sz);
    }
}

/* Block slice of unit u (engine): its layer and its first value in the block. */
static void block_at(const zside *s, size_t u, int *l, size_t *at, int *i) {
    size_t sl, sn, off;
    zs_unit(s, u, i, &sl, &sn, &off);
    *l = (int)sl;
    *at = eng_slice_offset(s->eng, s->t->t[*i].slice);
}

hpt_status zs_weights_get(zside *s, size_t u, size_t a, size_t n, const float **p) {
    int i, l;
    size_t sl, sn, off, at;
    zs_unit(s, u, &i, &sl, &sn, &off);
    if (!s->eng) {
        *p = model_params(s->model) + off + a;
        return HPT_OK;
    }
    if (!stacked(s, i)) {
        *p = model_nonblock_param(s->model, i).f32 + a;
        return HPT_OK;
    }
    block_at(s, u, &l, &at, &i);
    return eng_range_get(s->eng, EB_P, l, at + a, n, p);
}

hpt_status zs_weights_put(zside *s, size_t u, size_t a, size_t n, const float *src) {
    int i, l;
    size_t sl, sn, off, at;
    zs_unit(s, u, &i, &sl, &sn, &off);
    if (!s->eng || !stacked(s, i)) {
        float *p = !s->eng ? model_params(s->model) + off : model_nonblock_param(s->model, i).f32;
        memcpy(p + a, src, n * sizeof(float));
        return HPT_OK;
    }
    block_at(s, u, &l, &at, &i);
    return eng_range_put(s->eng, EB_P, l, at + a, n, src);
}

hpt_status zs_state_at(zside *s, int b, size_t u, size_t a, size_t z, char **p, uint64_t *len, int *eb) {
    int i;
    size_t sl, sn, off;
    zs_unit(s, u, &i, &sl, &sn, &off);
    *p = NULL;
    *len = 0;
    *eb = -1;
    if (s->eng && optim_eng_homes(s->opt) && stacked(s, i)) { /* AdamW fp32: m and v homes */
        if (b == 0 || b == 3) {
            *eb = b == 0 ? EB_M : EB_V;
            *len = (uint64_t)(z - a) * sizeof(float);
        }
        return HPT_OK;
    }
    uint64_t po[HPT_OPTIM_NUM_BUFS], pl[HPT_OPTIM_NUM_BUFS];
    if (!optim_place(s->opt, u, a, z, po, pl))
        return hpt_fail(HPT_ERR_INVALID, "a checkpoint's piece: unit %zu values %zu..%zu are not "
                        "this rank's state", u, a, z);
    hpt_optim_buf bufs[HPT_OPTIM_NUM_BUFS];
    hpt_optim_state_buffers(s->opt, bufs);
    *len = pl[b];
    if (pl[b]) *p = (char *)bufs[b].data + po[b];
    return HPT_OK;
}

hpt_status zs_state_get(zside *s, int eb, size_t u, size_t a, size_t n, const float **p) {
    int i, l;
    size_t at;
    block_at(s, u, &l, &at, &i);
    return eng_range_get(s->eng, eb, l, at + a, n, p);
}

hpt_status zs_state_put(zside *s, int eb, size_t u, size_t a, size_t n, const float *src) {
    int i, l;
    size_t at;
    block_at(s, u, &l, &at, &i);
    return eng_range_put(s->eng, eb, l, at + a, n, src);
}

uint16_t *zs_comp(zside *s, size_t u, size_t a) {
    int i, l;
    size_t at;
    if (!s->comp_S) return NULL;
    block_at(s, u, &l, &at, &i);
    return stacked(s, i) ? eng_comp_range(s->eng, l, at + a) : NULL;
}

uint64_t zs_comp_whole(const zside *s, size_t u, size_t a) {
    int i;
    size_t sl, sn, off;
    zs_unit(s, u, &i, &sl, &sn, &off);
    return (uint64_t)sl * s->comp_S + eng_slice_offset(s->eng, s->t->t[i].slice) + a;
}
