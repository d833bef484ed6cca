/* optim.c: the optimizers behind hpt_optim (AdamW, Lion, Adam-mini, SGD with momentum), their
 * states in 32 or 8 bits, global-norm gradient clipping, and the warmup + cosine schedule.
 * The state is at most six buffers (fp32, 8-bit codes, block scales per moment) over the
 * model's tensor table, each tensor cut into slices (one per layer of a stacked tensor); the
 * kernels run slice by slice, so one layer can be updated on its own (fused, offloaded, ZeRO
 * parts) with the bits of the whole step. Layout, the engine's and ZeRO's arrangements:
 * docs/optimizers.md, "The state's layout".
 * Invariants: the global norm is one sum in a fixed order in every mode; AdamW with 32-bit
 * state is elementwise (the reference's bits); hpt_optim_state_bytes() and plan/estimate.c
 * give the same sizes; nothing here names one architecture's tensors; each step is
 * deterministic for a fixed thread count. */
#include "core/core.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "offload/engine.h"
#include "optim/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim/optim_int.h"

static const char *const k_names[HPT_OPTIM_COUNT] = {"adamw", "lion", "adam-mini", "sgd"};

static int state_bits(const hpt_adamw_opts *o) { return o->state_bits == 0 ? 32 : o->state_bits; }

/* Values per Adam-mini block of a tensor: its last dimension (a linear weight's row of
 * inputs, (out, in); a vector whole: see the top of the file). */
static size_t mini_row(const hpt_tensor_desc *d) { return (size_t)d->shape[d->ndim - 1]; }

static hpt_status check_opts(const hpt_adamw_opts *o) {
    int bits = state_bits(o);
    if ((unsigned)o->optimizer >= HPT_OPTIM_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "unknown optimizer %d", o->optimizer);
    if (bits != 32 && bits != 8)
        return hpt_fail(HPT_ERR_INVALID, "optimizer state bits must be 32 or 8 (got %d)", bits);
    int sgd = o->optimizer == HPT_OPTIM_SGD;
    if (!(o->lr >= 0) || !(o->beta1 >= 0 && o->beta1 < 1) ||
        (!sgd && !(o->beta2 >= 0 && o->beta2 < 1)) || !(o->eps > 0) || !(o->weight_decay >= 0))
        return hpt_fail(HPT_ERR_INVALID, "bad %s settings (lr %g, betas %g %g, eps %g, wd %g)",
                        k_names[o->optimizer], (double)o->lr, (double)o->beta1, (double)o->beta2,
                        (double)o->eps, (double)o->weight_decay);
    return HPT_OK;
}

/* The state's layout (docs/optimizers.md) for the tensors of table t (configuration c's).
 * eng_homes: the engine holds the blocks' m and v (AdamW fp32), this layout only the non-block
 * tensors', at their offsets in the model's flat buffer. */
void optim_plan_layout(const hpt_model_config *c, const hpt_tensor_table *t,
                        const hpt_adamw_opts *o, int eng_homes, size_t u_lo, size_t u_hi,
                        const size_t *cut_a, const size_t *cut_z, layout *L) {
    memset(L, 0, sizeof *L);
    L->u_lo = u_lo;
    L->u_hi = u_hi;
    size_t unit = 0;
    int bits = state_bits(o), k = o->optimizer;
    int first_block = t->n; /* the embeddings: the non-block tensors before the blocks */
    for (int i = t->n - 1; i >= 0; i--)
        if (t->t[i].layer == HPT_LAYER_STACKED) first_block = i;
    uint64_t n32 = 0, n8 = 0, nsc = 0, nv = 0;
    size_t off = 0;
    L->n = t->n;
    for (int i = 0; i < t->n; i++) {
        const hpt_tensor_desc *d = &t->t[i];
        size_t numel = hpt_tensor_numel(d);
        tensor_layout *tl = &L->t[i];
        tl->stacked = d->layer == HPT_LAYER_STACKED;
        tl->off = off;
        off += numel;
        tl->slices = tl->stacked ? (size_t)t->L : 1;
        tl->sn = hpt_tensor_slice_numel(d, t->L);
        tl->ca = 0;
        tl->cn = tl->sn;
        if (cut_a) { /* ZeRO in the engine: this rank's part of every layer's slice (and of every
                      * non-block tensor: engine_zemb.c) */
            tl->ca = cut_a[i];
            tl->cn = cut_z[i] - cut_a[i];
        }
        tl->unit = unit;
        /* the held slices: the units [u_lo, u_hi) that are this tensor's */
        size_t a = u_lo > unit ? u_lo - unit : 0, b = u_hi > unit ? u_hi - unit : 0;
        if (a > tl->slices) a = tl->slices;
        if (b > tl->slices) b = tl->slices;
        tl->s0 = a;
        tl->ns = b > a ? b - a : 0;
        unit += tl->slices;
        size_t held = tl->ns * tl->cn; /* values */
        if (eng_homes) { /* the non-block tensors' m, v: as the flat buffer, or (cut) the
                          * parts packed in order, which is this rank's range of it */
            if (!tl->stacked) tl->f32_off = cut_a ? n32 : model_nonblock_offset(c, i);
            if (!tl->stacked && cut_a) n32 += held;
            continue;
        }
        tl->q8 = bits == 8 && !(o->state32_embeddings && i < first_block);
        if (tl->q8) {
            tl->sc_per = (tl->cn + HPT_Q8_BLOCK - 1) / HPT_Q8_BLOCK;
            tl->q_off = n8;
            tl->sc_off = nsc;
            n8 += held;
            nsc += tl->ns * tl->sc_per;
        } else {
            tl->f32_off = n32;
            n32 += held;
        }
        tl->row = mini_row(d);
        tl->v_off = nv;
        nv += held / tl->row;
    }
    if (eng_homes && !cut_a) n32 = model_nonblock_floats(c);
    L->bytes[B_M] = n32 * 4;
    L->bytes[B_M_CODES] = n8;
    L->bytes[B_M_SCALES] = nsc * 4;
    if (k == HPT_OPTIM_ADAMW) {
        L->bytes[B_V] = n32 * 4;
        L->bytes[B_V_CODES] = n8;
        L->bytes[B_V_SCALES] = nsc * 4;
    } else if (k == HPT_OPTIM_ADAM_MINI) {
        L->bytes[B_V] = nv * 4;
    }
}

uint64_t hpt_optim_lora_state_bytes(const hpt_model_config *cfg, const hpt_lora_opts *lora,
                                    const hpt_adamw_opts *o) {
    hpt_tensor_table t;
    if (check_opts(o) != HPT_OK || hpt_model_config_check(cfg) != HPT_OK ||
        model_lora_describe(cfg, lora, &t) != HPT_OK)
        return 0;
    layout L;
    optim_plan_layout(cfg, &t, o, 0, 0, SIZE_MAX, NULL, NULL, &L);
    uint64_t s = 0;
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++) s += L.bytes[i];
    return s;
}

/* The values and gradients the optimizer updates: the adapters' with LoRA, else the model's. */
static float *op_params(const hpt_optim *op) {
    return op->lora ? hpt_model_lora_params(op->model) : model_params(op->model);
}
static float *op_grads(const hpt_optim *op) {
    return op->lora ? hpt_model_lora_grads(op->model) : model_grads(op->model);
}

uint64_t hpt_optim_state_bytes(const hpt_model_config *cfg, const hpt_adamw_opts *o) {
    if (check_opts(o) != HPT_OK || hpt_model_config_check(cfg) != HPT_OK) return 0;
    hpt_tensor_table t;
    model_describe(cfg, &t);
    layout L;
    optim_plan_layout(cfg, &t, o, 0, 0, SIZE_MAX, NULL, NULL, &L);
    uint64_t s = 0;
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++) s += L.bytes[i];
    return s;
}

/* Slice s of tensor i's state for moment base (B_M or B_V) with map, from the slice's value
 * off (a multiple of HPT_Q8_BLOCK, in the held part [ca, ca + cn)). */
static hpt_be_state slice_state(const hpt_optim *op, const hpt_backend *be, int i, size_t s,
                                size_t off, int base, const float *map) {
    const tensor_layout *tl = &op->lay.t[i];
    hpt_be_state st = {0};
    s -= tl->s0; /* the held slices' position (all of them without sharding) */
    off -= tl->ca; /* the held part's position (the whole slice but with ZeRO in the engine) */
    if (!tl->q8) {
        st.f32 = (float *)op->buf[base] + tl->f32_off + s * tl->cn + off;
    } else {
        st.codes = (uint8_t *)op->buf[base + 1] + tl->q_off + s * tl->cn + off;
        st.absmax = (float *)op->buf[base + 2] + tl->sc_off + s * tl->sc_per + off / HPT_Q8_BLOCK;
        st.map = map;
        st.lut = be->q8_lut_of(map == op->map_signed); /* fast encoding of the same map */
    }
    return st;
}

/* The step of values [off, off + n) of slice s of tensor i (parameters p and gradients g from
 * there) from this file's state; scale multiplies each gradient (clipping, accumulation's
 * 1/K). off is a multiple of HPT_Q8_BLOCK and of Adam-mini's block, n of the latter (a whole
 * slice, or a chunk of wte: embed.c). */
static void update_range(hpt_optim *op, const hpt_backend *be, int i, size_t s, size_t off,
                         hpt_be_param kp, const float *g, size_t n, float lr, float scale) {
    const hpt_adamw_opts *o = &op->o;
    const tensor_layout *tl = &op->lay.t[i];
    float *p = kp.f32;
    float wd = op->wd[i];
    hpt_be_state m = slice_state(op, be, i, s, off, B_M, op->map_signed);
    switch ((hpt_optim_kind)o->optimizer) {
    case HPT_OPTIM_ADAMW:
        if (m.f32 && p) /* the reference path, unchanged */
            be->adamw(p, g, m.f32, slice_state(op, be, i, s, off, B_V, NULL).f32, n, lr,
                      o->beta1, o->beta2, o->eps, wd, scale, op->t);
        else
            be->adamw_q(kp, g, m, slice_state(op, be, i, s, off, B_V, op->map_unsigned), n, lr,
                        o->beta1, o->beta2, o->eps, wd, scale, op->t);
        break;
    case HPT_OPTIM_LION:
        be->lion(kp, g, m, n, lr, o->beta1, o->beta2, wd, scale);
        break;
    case HPT_OPTIM_SGD:
        be->sgd(kp, g, m, n, lr, o->beta1, wd, scale);
        break;
    case HPT_OPTIM_ADAM_MINI:
        be->adam_mini(kp, g, m,
                      (float *)op->buf[B_V] + tl->v_off + ((s - tl->s0) * tl->cn + off - tl->ca) / tl->row,
                      n, tl->row, lr, o->beta1, o->beta2, o->eps, wd, scale, op->t);
        break;
    case HPT_OPTIM_COUNT:
        break;
    }
}

/* The step of slice s of tensor i, whole. */
static void update_slice(hpt_optim *op, const hpt_backend *be, int i, size_t s, hpt_be_param kp,
                         const float *g, float lr, float scale) {
    update_range(op, be, i, s, 0, kp, g, op->lay.t[i].sn, lr, scale);
}

/* The seed of this step's stochastic rounding of bf16 weights. */
static uint64_t sr_seed(const hpt_optim *op) { return 0x9e3779b97f4a7c15ull * (uint64_t)op->t; }

/* The model's deferred update of a chunk of wte (chunked embeddings, src/model/embed.c), with
 * the fused step's learning rate and clip factor. */
static void emb_update(void *ctx, int i, size_t off, hpt_be_param p, const float *g, size_t n) {
    hpt_optim *op = ctx;
    if (!op->armed) return; /* a backward outside a step's begin and end: gradients only */
    p.seed = sr_seed(op);
    if (op->nbcut) { /* ZeRO: this rank's part of the chunk (every rank holds the chunk's sum) */
        const tensor_layout *tl = &op->lay.t[i];
        size_t a = HPT_MAX(off, tl->ca), z = HPT_MIN(off + n, tl->ca + tl->cn);
        if (z <= a) return;
        p.f32 += a - off; /* chunked embeddings: fp32 weights */
        g += a - off;
        off = a;
        n = z - a;
    }
    update_range(op, op->be, i, 0, off, p, g, n, op->lr_now, op->scale_now);
}

/* The engine's update of slice `slice` of block l (the worker's thread or ours): AdamW fp32 on
 * the engine's m and v, or any optimizer on this file's state (m, v NULL). */
static void eng_update(void *ctx, int l, int slice, size_t off, hpt_be_param p, const float *g,
                       float *m, float *v, size_t n) {
    hpt_optim *op = ctx;
    if (!op->armed) return; /* a backward outside a step's begin and end: gradients only */
    const hpt_adamw_opts *o = &op->o;
    int i = op->slice_tensor[slice];
    p.seed = sr_seed(op); /* bf16 stochastic rounding: per step */
    const hpt_backend *be = op->be_eng;
    if (op->eng_homes && p.f32)
        be->adamw(p.f32, g, m, v, n, op->lr_now, o->beta1, o->beta2, o->eps, op->wd[i],
                  op->scale_now, op->t);
    else if (op->eng_homes) /* bf16 weights */
        be->adamw_q(p, g, (hpt_be_state){.f32 = m}, (hpt_be_state){.f32 = v}, n, op->lr_now,
                    o->beta1, o->beta2, o->eps, op->wd[i], op->scale_now, op->t);
    else /* values [off, off + n) of the slice: all of it, or this rank's cut (ZeRO) */
        update_range(op, be, i, (size_t)l, off, p, g, n, op->lr_now, op->scale_now);
}

/* Rank q's cut of every block tensor's slices (by the table's tensor index) from the engine's
 * shards; returns the number of shards. */
int optim_cut_of(const hpt_optim *op, struct offload_engine *eng, int q, size_t *ca, size_t *cz) {
    size_t a[ENG_MAX_SLICES], z[ENG_MAX_SLICES];
    int N = eng_cuts(eng, q, a, z);
    for (int k = 0; k < op->tab->n_slices && k < ENG_MAX_SLICES; k++) {
        int i = op->slice_tensor[k];
        ca[i] = a[k];
        cz[i] = z[k];
    }
    eng_zemb_cuts(eng, op->tab, q, ca, cz); /* the non-block tensors' (whole when not cut) */
    return N;
}

hpt_status hpt_optim_create(hpt_mem *mem, hpt_model *model, const hpt_adamw_opts *o,
                            hpt_optim **out) {
    return optim_create_units(mem, model, o, 0, SIZE_MAX, out);
}

size_t optim_units(const hpt_tensor_table *t) {
    size_t n = 0;
    for (int i = 0; i < t->n; i++) n += t->t[i].layer == HPT_LAYER_STACKED ? (size_t)t->L : 1;
    return n;
}

/* Unit u's first value (checkpoint order) and length. */
static void unit_span(const hpt_tensor_table *t, size_t u, size_t *off, size_t *len) {
    size_t unit = 0, o = 0;
    for (int i = 0; i < t->n; i++) {
        const hpt_tensor_desc *d = &t->t[i];
        size_t sl = d->layer == HPT_LAYER_STACKED ? (size_t)t->L : 1;
        size_t sn = hpt_tensor_slice_numel(d, t->L);
        if (u < unit + sl) {
            *off = o + (u - unit) * sn;
            *len = sn;
            return;
        }
        unit += sl;
        o += sl * sn;
    }
    *off = o;
    *len = 0;
}

void optim_owner(const hpt_tensor_table *t, int rank, int size, size_t *u_lo, size_t *u_hi,
                 size_t *p_lo, size_t *p_hi) {
    size_t nu = optim_units(t), total, len;
    unit_span(t, nu, &total, &len);
    /* boundary k (k = 0..size): the unit boundary nearest to k/size of the values, never below
     * boundary k-1 (so runs may be empty when one unit outweighs a share) */
    size_t b[2] = {0, 0}, pb[2] = {0, 0};
    for (int k = 1; k <= rank + 1; k++) {
        size_t target = (size_t)((uint64_t)total * (uint64_t)k / (uint64_t)size);
        size_t u = b[1], o = pb[1];
        while (u < nu) {
            size_t uo, ul;
            unit_span(t, u, &uo, &ul);
            /* step past unit u while its end is nearer the target than its start */
            if (k == size || (uo < target && (uo + ul <= target || uo + ul - target < target - uo))) {
                u++;
                o = uo + ul;
            } else {
                break;
            }
        }
        b[0] = b[1];
        pb[0] = pb[1];
        b[1] = u;
        pb[1] = o;
    }
    *u_lo = b[0];
    *u_hi = b[1];
    *p_lo = pb[0];
    *p_hi = pb[1];
}

void optim_units_bytes(const hpt_model_config *c, const hpt_adamw_opts *o, size_t u_lo,
                       size_t u_hi, uint64_t bytes[HPT_OPTIM_NUM_BUFS]) {
    hpt_tensor_table t;
    model_describe(c, &t);
    layout L;
    optim_plan_layout(c, &t, o, 0, u_lo, u_hi, NULL, NULL, &L);
    memcpy(bytes, L.bytes, sizeof L.bytes);
}

void optim_unit_place(const hpt_model_config *c, const hpt_adamw_opts *o, size_t u_lo,
                      size_t u_hi, size_t u, uint64_t off[HPT_OPTIM_NUM_BUFS],
                      uint64_t len[HPT_OPTIM_NUM_BUFS]) {
    /* the bytes of the units before u, and of those up to u + 1, in the layout [u_lo, u_hi) */
    uint64_t a[HPT_OPTIM_NUM_BUFS], b[HPT_OPTIM_NUM_BUFS];
    hpt_tensor_table t;
    model_describe(c, &t);
    layout L;
    optim_plan_layout(c, &t, o, 0, u_lo, u, NULL, NULL, &L);
    memcpy(a, L.bytes, sizeof a);
    optim_plan_layout(c, &t, o, 0, u_lo, u + 1 < u_hi ? u + 1 : u_hi, NULL, NULL, &L);
    memcpy(b, L.bytes, sizeof b);
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++) {
        off[i] = a[i];
        len[i] = b[i] - a[i];
    }
}

void optim_set_run_grads(hpt_optim *op, const float *g, size_t lo) {
    op->run_grads = g;
    op->run_lo = lo;
}

void optim_set_gather(hpt_optim *op, optim_gather_fn fn, void *ctx) {
    op->gather = fn;
    op->gather_ctx = ctx;
}

hpt_status optim_create_units(hpt_mem *mem, hpt_model *model, const hpt_adamw_opts *o,
                              size_t u_lo, size_t u_hi, hpt_optim **out) {
    *out = NULL;
    HPT_CHECK(check_opts(o));
    hpt_optim *op = calloc(1, sizeof *op);
    if (!op) return hpt_fail(HPT_ERR_OOM, "cannot allocate the optimizer object");
    op->mem = mem;
    op->be = hpt_backend_of(mem);
    op->model = model;
    op->lora = hpt_model_lora_on(model); /* LoRA: the adapters, the base frozen */
    op->tab = op->lora ? model_lora_table(model) : model_table(model);
    op->o = *o;
    op->n = op->lora ? hpt_model_lora_num_params(model) : hpt_model_num_params(model);
    struct offload_engine *eng = model_engine(model);
    op->eng_homes = eng && o->optimizer == HPT_OPTIM_ADAMW && state_bits(o) == 32;
    op->n_units = optim_units(op->tab);
    if (u_hi > op->n_units) u_hi = op->n_units;
    int sharded = u_lo > 0 || u_hi < op->n_units;
    if (sharded && (eng || model_embeddings(model) != HPT_EMB_FULL)) {
        free(op);
        return hpt_fail(HPT_ERR_UNSUPPORTED, "a sharded optimizer (ZeRO stage 1 or 2) runs without "
                        "the offload engine and with full embeddings");
    }
    for (int s = 0; s < op->tab->n_slices; s++)
        op->slice_tensor[s] = hpt_table_slice_tensor(op->tab, s);
    /* ZeRO in the engine (stages 1-3): the blocks' state of this rank's cut of every slice */
    size_t ca[HPT_TABLE_MAX], cz[HPT_TABLE_MAX];
    op->cut = eng && !op->eng_homes && optim_cut_of(op, eng, hpt_dist_rank(), ca, cz) > 1;
    op->nbcut = eng_zemb_on(eng);
    if (op->nbcut && op->eng_homes) optim_cut_of(op, eng, hpt_dist_rank(), ca, cz);
    int cuts = op->cut || op->nbcut;
    optim_plan_layout(hpt_model_get_config(model), op->tab, o, op->eng_homes, u_lo, u_hi,
                cuts ? ca : NULL, cuts ? cz : NULL, &op->lay);
    size_t nu = op->n_units > (size_t)op->tab->n ? op->n_units : (size_t)op->tab->n;
    op->unit_sumsq = calloc(op->n_units ? op->n_units : 1, sizeof(double));
    op->many_x = calloc(nu ? nu : 1, sizeof *op->many_x);
    op->many_n = calloc(nu ? nu : 1, sizeof *op->many_n);
    op->many_u = calloc(nu ? nu : 1, sizeof *op->many_u);
    op->many_s = calloc(nu ? nu : 1, sizeof *op->many_s);
    if (!op->unit_sumsq || !op->many_x || !op->many_n || !op->many_u || !op->many_s) {
        free(op->unit_sumsq), free(op->many_x), free(op->many_n), free(op->many_u), free(op->many_s);
        free(op);
        return hpt_fail(HPT_ERR_OOM, "cannot allocate the optimizer object");
    }
    op->cover = -1;
    for (int i = 0; i < op->tab->n; i++)
        op->wd[i] = o->decay_all || op->tab->t[i].is_matrix ? o->weight_decay : 0.0f;
    op->be->q8_map(op->map_signed, 1);
    op->be->q8_map(op->map_unsigned, 0);
    hpt_status s = HPT_OK;
    hpt_tier home = HPT_TIER_DEVICE;
    if (eng) {
        s = eng_check_optim(eng_opts(eng), op->eng_homes);
        if (!op->eng_homes) home = eng_opts(eng)->optim;
    }
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS && s == HPT_OK; i++) {
        hpt_mem_set_name(mem, k_buf_names[i]);
        op->tier[i] = op->home = home;
        s = op->be->alloc(mem, home, HPT_CAT_OPTIM, op->lay.bytes[i], &op->buf[i]);
    }
    op->be_eng = op->be;
    if (s == HPT_OK && eng) s = eng_attach_optim(eng, eng_update, op, op->eng_homes);
    if (s == HPT_OK && eng_updates_on_host(eng)) op->be_eng = hpt_backend_cpu();
    if (s == HPT_OK && model_embeddings(model) != HPT_EMB_FULL && !op->lora) /* LoRA: frozen */
        model_set_emb_update(model, emb_update, op);
    if (s != HPT_OK) {
        hpt_optim_free(op);
        return hpt_fail_ctx(s, "allocating %s state", k_names[o->optimizer]);
    }
    *out = op;
    return HPT_OK;
}

void hpt_optim_free(hpt_optim *op) {
    if (!op) return;
    if (model_engine(op->model)) eng_detach_optim(model_engine(op->model));
    model_set_emb_update(op->model, NULL, NULL);
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++)
        op->be->free(op->mem, op->tier[i], HPT_CAT_OPTIM, op->buf[i], op->lay.bytes[i]);
    free(op->unit_sumsq);
    free(op->many_x), free(op->many_n), free(op->many_u), free(op->many_s);
    free(op);
}

/* Buffer by buffer (allocate on the new tier, copy, free the old), so the old tier never holds
 * more than before and the new one grows by one buffer at a time. A failed allocation leaves
 * the buffers not yet moved where they were (each buffer knows its tier) and is returned; a
 * later call finishes the move. */
hpt_status hpt_optim_set_tier(hpt_optim *op, hpt_tier tier) {
    if (tier != HPT_TIER_DEVICE && tier != HPT_TIER_HOST)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "optimizer state moves between device and host only");
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++) {
        if (!op->lay.bytes[i] || op->tier[i] == tier) continue;
        void *p;
        hpt_mem_set_name(op->mem, k_buf_names[i]);
        hpt_status s = op->be->alloc(op->mem, tier, HPT_CAT_OPTIM, op->lay.bytes[i], &p);
        if (s != HPT_OK) return hpt_fail_ctx(s, "moving optimizer state %s", k_buf_names[i]);
        op->be->copy(p, op->buf[i], op->lay.bytes[i],
                     tier == HPT_TIER_HOST ? HPT_COPY_D2H : HPT_COPY_H2D);
        hpt_mem_transfer(op->mem, op->tier[i], tier, HPT_CAT_OPTIM, op->lay.bytes[i]);
        op->be->free(op->mem, op->tier[i], HPT_CAT_OPTIM, op->buf[i], op->lay.bytes[i]);
        op->buf[i] = p;
        op->tier[i] = tier;
    }
    return HPT_OK;
}

static int at_home(const hpt_optim *op) {
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++)
        if (op->tier[i] != op->home) return 0;
    return 1;
}
hpt_tier hpt_optim_get_tier(const hpt_optim *op) { return at_home(op) ? op->home : HPT_TIER_HOST; }

float hpt_optim_get_prev_norm(const hpt_optim *op) { return op->prev_norm; }
void hpt_optim_set_prev_norm(hpt_optim *op, float norm) { op->prev_norm = norm; }
int64_t hpt_optim_get_t(const hpt_optim *op) { return op->t; }
void hpt_optim_set_t(hpt_optim *op, int64_t t) { op->t = t; }
const hpt_adamw_opts *hpt_optim_get_opts(const hpt_optim *op) { return &op->o; }

int optim_eng_homes(const hpt_optim *op) { return op->eng_homes; }

int optim_q8_per_slice(const hpt_model_config *c) {
    hpt_tensor_table t;
    model_describe(c, &t);
    for (int i = 0; i < t.n && t.L > 1; i++)
        if (t.t[i].layer == HPT_LAYER_STACKED &&
            hpt_tensor_slice_numel(&t.t[i], t.L) % HPT_Q8_BLOCK)
            return 1;
    return 0;
}

static int full_fp32_adamw(const hpt_optim *op) {
    return op->o.optimizer == HPT_OPTIM_ADAMW && state_bits(&op->o) == 32 &&
           !model_engine(op->model) && op->lay.u_lo == 0 && op->lay.u_hi >= op->n_units;
}

hpt_status optim_emit_moment(const hpt_optim *op, int which, model_emit_fn emit, void *ctx) {
    if (!op->eng_homes)
        return hpt_fail(HPT_ERR_INVALID, "optim_emit_moment: AdamW with 32-bit state only");
    if (!op->nbcut) return model_emit(op->model, which ? EB_V : EB_M, op->buf[which ? B_V : B_M], emit, ctx);
    /* the non-block parts gathered from their owners into a whole flat copy (collective) */
    struct offload_engine *eng = model_engine(op->model);
    float *whole = malloc(model_nonblock_floats(hpt_model_get_config(op->model)) * sizeof(float) + 4);
    if (!whole) return hpt_fail(HPT_ERR_OOM, "a checkpoint's non-block optimizer state (ZeRO)");
    hpt_status s = eng_zemb_whole(eng, op->tab, op->buf[which ? B_V : B_M], whole);
    if (s == HPT_OK) s = model_emit(op->model, which ? EB_V : EB_M, whole, emit, ctx);
    free(whole);
    return s;
}

hpt_status optim_absorb_moment(hpt_optim *op, int which, model_read_fn read, void *ctx) {
    if (!op->eng_homes)
        return hpt_fail(HPT_ERR_INVALID, "optim_absorb_moment: AdamW with 32-bit state only");
    if (!op->nbcut) return model_absorb(op->model, which ? EB_V : EB_M, op->buf[which ? B_V : B_M], read, ctx);
    /* the file's whole non-block values read, this rank's part kept */
    float *whole = malloc(model_nonblock_floats(hpt_model_get_config(op->model)) * sizeof(float) + 4);
    if (!whole) return hpt_fail(HPT_ERR_OOM, "a checkpoint's non-block optimizer state (ZeRO)");
    hpt_status s = model_absorb(op->model, which ? EB_V : EB_M, whole, read, ctx);
    if (s == HPT_OK) eng_zemb_keep(model_engine(op->model), op->tab, whole, op->buf[which ? B_V : B_M]);
    free(whole);
    return s;
}

/* Without the engine: the gradients of tensor i's values from off (checkpoint order): the flat
 * buffer's, or with ZeRO-2's run (optim_set_run_grads) a block tensor's there. */
static const float *unit_grad(hpt_optim *op, const float *grads, int i, size_t off) {
    if (!op->lay.t[i].stacked) return model_nonblock_grad(op->model, i);
    return op->run_grads ? op->run_grads + (off - op->run_lo) : grads + off;
}

/* Without the engine: each held unit's sum of squares (sumsq op over its values), the others'
 * from the gather (ZeRO: their owners'), then added in the fixed order of the top of the file:
 * the same terms in the same order as one process, so the same bits. */
static hpt_status grad_sumsq_units(hpt_optim *op, double *out) {
    hpt_model *m = op->model;
    const hpt_tensor_table *t = op->tab;
    const float *grads = op_grads(op);
    double *u = op->unit_sumsq;
    size_t k = 0; /* the units summed on the device: all at once (one round trip) */
    for (int i = 0; i < t->n; i++) {
        const tensor_layout *tl = &op->lay.t[i];
        for (size_t sl = tl->s0; sl < tl->s0 + tl->ns; sl++) {
            if (!tl->stacked && model_emb_deferred(m, i)) {
                u[tl->unit + sl] = model_emb_sumsq(m, i);
                continue;
            }
            op->many_x[k] = unit_grad(op, grads, i, tl->off + sl * tl->sn);
            op->many_n[k] = tl->sn;
            op->many_u[k++] = tl->unit + sl;
        }
    }
    if (k) op->be->sumsq_many(op->many_s, op->many_x, op->many_n, k);
    for (size_t j = 0; j < k; j++) u[op->many_u[j]] = op->many_s[j];
    if (op->gather) HPT_CHECK(op->gather(op->gather_ctx, u, op->n_units));
    int blocks_done = 0;
    double s = 0.0;
    for (int i = 0; i < t->n; i++) {
        const tensor_layout *tl = &op->lay.t[i];
        if (!tl->stacked) {
            s += u[tl->unit];
            continue;
        }
        if (blocks_done) continue; /* the blocks, at the first block tensor */
        blocks_done = 1;
        for (int l = 0; l < t->L; l++) {
            double b = 0.0;
            for (int j = 0; j < t->n_slices; j++)
                b += u[op->lay.t[op->slice_tensor[j]].unit + (size_t)l];
            s += b;
        }
    }
    *out = s;
    return HPT_OK;
}

static int cmp_range(const void *a, const void *b) {
    const float *x = *(const float *const *)a, *y = *(const float *const *)b;
    return x < y ? -1 : x > y;
}

/* Whether the units grad_sumsq_units sums are the model's flat gradients, each value once. */
static int units_cover_grads(hpt_optim *op) {
    hpt_model *m = op->model;
    const float *g = model_grads(m);
    if (model_engine(m) || op->gather || op->lora || op->run_grads || !g || op->lay.u_lo != 0 ||
        op->lay.u_hi < op->n_units || op_grads(op) != g)
        return 0;
    size_t k = 0;
    for (int i = 0; i < op->tab->n; i++) {
        const tensor_layout *tl = &op->lay.t[i];
        if (!tl->stacked && model_emb_deferred(m, i)) return 0;
        for (size_t sl = tl->s0; sl < tl->s0 + tl->ns; sl++) {
            op->many_x[k] = unit_grad(op, g, i, tl->off + sl * tl->sn);
            op->many_n[k++] = tl->sn;
        }
    }
    /* sorted by address (pairs of pointer and length: one array of pointers suffices, the
     * lengths looked up after) */
    const float **xs = malloc(k * sizeof *xs);
    if (!xs) return 0;
    memcpy(xs, op->many_x, k * sizeof *xs);
    qsort(xs, k, sizeof *xs, cmp_range);
    const float *at = g;
    int ok = 1;
    for (size_t j = 0; j < k && ok; j++) {
        size_t n = 0;
        for (size_t q = 0; q < k; q++)
            if (op->many_x[q] == xs[j]) n = n > op->many_n[q] ? n : op->many_n[q];
        ok = xs[j] == at && (j + 1 == k || xs[j + 1] != xs[j]);
        at += n;
    }
    free(xs);
    return ok && at == g + model_grads_floats(m);
}

hpt_status optim_grads_overflow(hpt_optim *op, int *overflow, int *done) {
    *done = 0;
    op->ss_fresh = 0;
    if (op->cover < 0) op->cover = units_cover_grads(op);
    if (!op->cover) return HPT_OK;
    HPT_CHECK(grad_sumsq_units(op, &op->ss_cached));
    op->ss_fresh = 1;
    *overflow = !isfinite(op->ss_cached);
    *done = 1;
    return HPT_OK;
}

/* The global sum of squares of the gradients, in the fixed order of the top of the file (the
 * first term is added to 0.0, which changes no bits: a sum of squares is never -0). */
static double grad_sumsq(const hpt_optim *op) {
    hpt_model *m = op->model;
    const hpt_tensor_table *t = op->tab;
    struct offload_engine *eng = model_engine(m);
    const float *grads = model_grads(m);
    int blocks_done = 0;
    double s = 0.0;
    size_t k = 0; /* the non-block tensors summed on the device: all at once (one round trip) */
    for (int i = 0; i < t->n; i++) {
        const tensor_layout *tl = &op->lay.t[i];
        if (tl->stacked || op->nbcut || model_emb_deferred(m, i))
            continue;
        op->many_x[k] = model_nonblock_grad(m, i);
        op->many_n[k++] = tl->sn;
    }
    if (k) op->be->sumsq_many(op->many_s, op->many_x, op->many_n, k);
    eng_sums_read(eng); /* the blocks' sums, left on the device as their gradients completed */
    k = 0;
    for (int i = 0; i < t->n; i++) {
        const tensor_layout *tl = &op->lay.t[i];
        if (!tl->stacked) {
            /* chunked embeddings: the head's (and an untied wte's) sum of squares, chunk by
             * chunk, from the backward (embed.c) */
            double cs; /* ZeRO: the owners' chunk sums (engine_zemb.c) */
            if (op->nbcut && !model_emb_deferred(m, i)) s += eng_zemb_sumsq(eng, i, &cs) ? cs : (double)NAN;
            else s += model_emb_deferred(m, i) ? model_emb_sumsq(m, i) : op->many_s[k++];
            continue;
        }
        if (blocks_done) continue; /* the blocks, at the first block tensor */
        blocks_done = 1;
        for (int l = 0; l < t->L; l++) {
            double b = 0.0;
            if (eng) {
                b = eng_block_sumsq(eng, l);
            } else {
                for (int j = 0; j < t->n_slices; j++) {
                    const tensor_layout *sl = &op->lay.t[op->slice_tensor[j]];
                    b += op->be->sumsq(grads + sl->off + (size_t)l * sl->sn, sl->sn);
                }
            }
            s += b;
        }
    }
    if (op->nbcut) eng_zemb_norm_used(eng); /* taken: the next step gathers its own */
    return s;
}

/* The non-block tensors of an engine's model (wte's chunks already, with chunked embeddings):
 * each whole, or with ZeRO (nbcut) this rank's part [ca, ca + cn) only (its summed gradients
 * are there: engine_zemb.c), then every owner's part all-gathered into every rank's weights. */
static hpt_status update_nonblock(hpt_optim *op, float lr, float scale) {
    hpt_model *model = op->model;
    for (int i = 0; i < op->lay.n; i++) {
        const tensor_layout *tl = &op->lay.t[i];
        if (tl->stacked || model_emb_deferred(model, i) || !tl->cn) continue;
        hpt_be_param kp = model_nonblock_param(model, i);
        kp.seed = sr_seed(op);
        if (tl->ca) kp.f32 += tl->ca; /* nbcut: full embeddings, fp32 weights */
        update_range(op, op->be, i, 0, tl->ca, kp, model_nonblock_grad(model, i) + tl->ca, tl->cn, lr, scale);
    }
    if (!op->nbcut) return HPT_OK;
    return eng_zemb_gather(model_engine(model), op->tab, model_params(model));
}

hpt_status hpt_optim_fused_begin(hpt_optim *op, float lr, float clip) {
    return hpt_optim_fused_begin_scaled(op, lr, clip, 1.0f);
}

/* grad_scale as hpt_optim_step_scaled's (N processes' 1/N: the sum of their gradients), folded
 * into the clip factor; with 1 every product is exact (the unscaled bits). */
hpt_status hpt_optim_fused_begin_scaled(hpt_optim *op, float lr, float clip, float grad_scale) {
    struct offload_engine *eng = model_engine(op->model);
    if (!eng || !eng_fused(eng))
        return hpt_fail(HPT_ERR_INVALID, "the fused update needs a model made with the fused "
                        "engine (hpt_offload_opts.fused, --fused-update)");
    op->t++;
    op->ss_fresh = 0;
    op->lr_now = lr;
    op->scale_now = (clip > 0.0f && op->prev_norm > clip ? clip / op->prev_norm : 1.0f) * grad_scale;
    op->gscale_now = grad_scale;
    op->armed = 1;
    return HPT_OK;
}

hpt_status hpt_optim_fused_end(hpt_optim *op, float *grad_norm_out) {
    if (!op->armed) return hpt_fail(HPT_ERR_INVALID, "hpt_optim_fused_end without a begin");
    /* the non-block tensors and the norm first (they touch nothing the worker's block updates
     * touch, and the blocks' sums of squares were taken as their gradients completed), so this
     * thread works while the worker finishes the last blocks instead of waiting for them */
    hpt_status s = update_nonblock(op, op->lr_now, op->scale_now);
    float norm = (float)sqrt(grad_sumsq(op)) * op->gscale_now;
    if (s == HPT_OK) s = eng_drain(model_engine(op->model)); /* every block's update done */
    else eng_drain(model_engine(op->model));
    op->armed = 0;
    HPT_CHECK(s);
    if (grad_norm_out) *grad_norm_out = norm;
    op->prev_norm = norm;
    if (!isfinite(norm))
        return hpt_fail(HPT_ERR_INVALID, "gradient norm is not finite (%g)", (double)norm);
    return HPT_OK;
}
float *hpt_optim_m(const hpt_optim *op) { return full_fp32_adamw(op) ? op->buf[B_M] : NULL; }
float *hpt_optim_v(const hpt_optim *op) { return full_fp32_adamw(op) ? op->buf[B_V] : NULL; }

void hpt_optim_state_buffers(const hpt_optim *op, hpt_optim_buf out[HPT_OPTIM_NUM_BUFS]) {
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++)
        out[i] = (hpt_optim_buf){.data = op->buf[i], .bytes = op->lay.bytes[i],
                                 .name = k_buf_names[i]};
}

hpt_status hpt_optim_step(hpt_optim *op, float lr, float clip, float *grad_norm_out) {
    return hpt_optim_step_scaled(op, lr, clip, 1.0f, grad_norm_out);
}

/* grad_scale is folded into the factor the kernels already multiply each gradient by (the
 * clip factor), so accumulation's 1/K costs no pass over the gradients. With grad_scale 1
 * every product below is exact, so hpt_optim_step computes the same bits as before. */
hpt_status hpt_optim_step_scaled(hpt_optim *op, float lr, float clip, float grad_scale,
                                 float *grad_norm_out) {
    hpt_model *model = op->model;
    struct offload_engine *eng = model_engine(model);
    float *params = op_params(op), *grads = op_grads(op);
    if (!grads || !at_home(op))
        return hpt_fail(HPT_ERR_INVALID, "an optimizer step needs the gradients and the state on "
                        "the device (released or moved for a predict phase)");
    if (!(grad_scale > 0.0f) || !isfinite(grad_scale))
        return hpt_fail(HPT_ERR_INVALID, "gradient scale %g must be positive and finite",
                        (double)grad_scale);
    double ss;
    if (op->ss_fresh && !eng) ss = op->ss_cached; /* optim_grads_overflow's, this step's */
    else if (eng) ss = grad_sumsq(op);
    else HPT_CHECK(grad_sumsq_units(op, &ss));
    op->ss_fresh = 0;
    float norm = (float)sqrt(ss) * grad_scale;
    if (grad_norm_out) *grad_norm_out = norm;
    if (!isfinite(norm))
        return hpt_fail(HPT_ERR_INVALID, "gradient norm is not finite (%g); step skipped", (double)norm);
    float scale = (clip > 0.0f && norm > clip ? clip / norm : 1.0f) * grad_scale;
    if (eng) {
        if (eng_fused(eng))
            return hpt_fail(HPT_ERR_INVALID, "a fused-update model steps with "
                            "hpt_optim_fused_begin / _end");
        op->t++;
        op->lr_now = lr;
        op->scale_now = scale;
        op->armed = 1;
        hpt_status s = eng_stream_update(eng); /* the blocks, where their state lives */
        op->armed = 0;
        HPT_CHECK(s);
        return update_nonblock(op, lr, scale);
    }
    op->t++;
    for (int i = 0; i < op->lay.n; i++) { /* the held slices (ZeRO: this process's) */
        const tensor_layout *tl = &op->lay.t[i];
        for (size_t sl = tl->s0; sl < tl->s0 + tl->ns; sl++) {
            size_t off = tl->off + sl * tl->sn;
            update_slice(op, op->be, i, sl, hpt_be_param_f32(params + off),
                         unit_grad(op, grads, i, off), lr, scale);
        }
    }
    return HPT_OK;
}

float hpt_lr_cosine(int64_t step, int64_t total, int64_t warmup, float max_lr, float min_lr) {
    if (warmup > 0 && step < warmup) return max_lr * (float)(step + 1) / (float)warmup;
    if (step >= total || total <= warmup) return min_lr;
    double ratio = (double)(step - warmup) / (double)(total - warmup);
    double coeff = 0.5 * (1.0 + cos(3.14159265358979323846 * ratio));
    return min_lr + (float)coeff * (max_lr - min_lr);
}
