/* lifecycle.c: the model object: creation with its blocks in the flat buffers or in a block
 * store (model/blocks.h; the offload engine binds one: src/offload/bind.c), its parameter and
 * gradient buffers (device tier: every tensor in checkpoint order, or with a store the
 * non-block tensors only), freeing, the accessors, and the checkpoint-order streams
 * (model_emit, model_absorb) that hide where the blocks live. A forward-only model is born
 * without its gradient buffer (hpt_model_acquire_grads gives it one); the loaders' request
 * travels to create() as a per-thread flag set around that call only.
 * States: created -> (forward -> [backward]) *; a backward without a forward with targets is
 * refused with HPT_ERR_INVALID (runner.c). Invariants: the model reaches a store only through
 * its table, owns it from model_bind_blocks and frees it in hpt_model_free; activations are the
 * runner's (actplan.c), from the first forward to hpt_model_free_activations. */
#include "core/core.h"
#include "model/blocks.h"
#include "model/gpt2_int.h"

#include <stdlib.h>
#include <string.h>

/* Points the non-block tensors into the flat buffer of a model with a block store (wte, wpe,
 * lnfw, lnfb). */
static void point_nonblock(const hpt_model_config *cfg, float *base, gpt2_tensors *t) {
    memset(t, 0, sizeof *t);
    t->wte = base + model_nonblock_offset(cfg, 0);
    t->wpe = base + model_nonblock_offset(cfg, 1);
    t->lnfw = base + model_nonblock_offset(cfg, 14);
    t->lnfb = base + model_nonblock_offset(cfg, 15);
}

/* Points an architecture with its own parameter struct (arch->point; llama): tensor i of the
 * table in base (every tensor in checkpoint order, or with a block store the non-block ones
 * back to back, less those the embeddings' kind keeps elsewhere: in emb_h, or without a whole
 * gradient when grads; NULL base: none) into tp, then the arch's struct out. */
static void point_arch(hpt_model *m, float *base, int grads, float **tp, void *out) {
    const hpt_tensor_table *t = &m->tab;
    size_t off = 0;
    for (int i = 0; i < t->n; i++) {
        int block = t->t[i].layer == HPT_LAYER_STACKED;
        int away = grads ? emb_deferred(m, i) : emb_stored(m, i);
        int here = !(block && (m->blocks_planned || (grads && m->grads_away))) && !away;
        tp[i] = base && here ? base + off : NULL;
        if (here) off += hpt_tensor_numel(&t->t[i]);
    }
    m->arch->point(&m->cfg, t, tp, m->consts, out);
}

/* The arch's constants (rotary tables): computed on the host, kept on the device. */
static hpt_status consts_create(hpt_model *m) {
    m->n_consts = m->arch->consts_floats ? m->arch->consts_floats(&m->cfg) : 0;
    if (!m->n_consts) return HPT_OK;
    float *host = malloc(m->n_consts * sizeof(float));
    if (!host) return hpt_fail(HPT_ERR_OOM, "cannot allocate %zu floats of constants", m->n_consts);
    hpt_mem_set_name(m->mem, "rotary tables");
    hpt_status s = m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS,
                                m->n_consts * sizeof(float), (void **)&m->consts);
    if (s == HPT_OK) {
        m->arch->consts_fill(&m->cfg, host);
        m->be->copy(m->consts, host, m->n_consts * sizeof(float), HPT_COPY_H2D);
    } else {
        m->n_consts = 0;
    }
    free(host);
    return s;
}

/* The architecture, the backend and the block slices' layout in the flat buffers. */
static void bind_arch(hpt_model *m) {
    m->be = hpt_backend_of(m->mem);
    m->arch = hpt_arch_of(&m->cfg);
    int own = m->arch->point != NULL;
    m->ap = own ? (void *)&m->lp : (void *)&m->p;
    m->ag = own ? (void *)&m->lg : (void *)&m->g;
    m->acts = own ? (void *)&m->al : (void *)&m->a;
    m->arch->describe(&m->cfg, &m->tab);
    for (int s = 0; s < m->tab.n_slices; s++) {
        int ti = hpt_table_slice_tensor(&m->tab, s);
        m->slice_off[s] = hpt_table_offset(&m->tab, ti);
        m->slice_n[s] = hpt_tensor_slice_numel(&m->tab.t[ti], m->tab.L);
    }
}

/* Set by the forward-only calls around their create or load (this thread, that call only). */
static _Thread_local int create_without_grads;
/* Set by model_grads_away (ZeRO-2's trainer, around its model's creation or load). */
static _Thread_local int create_grads_away;
/* Set by frozen.c around its create: a frozen base's model holds no gradients */
static _Thread_local int create_frozen;
/* The base kind and home hpt_model_create_config_offload builds (model_set_frozen_base) */
static _Thread_local int frozen_base_kind, frozen_base_home;

void model_create_frozen_flag(int on) { create_frozen = on; }
/* Set by frozen.c around its create: the tier of a frozen base's bf16 embeddings */
static _Thread_local int create_emb_tier;
void model_create_emb_tier(int tier) { create_emb_tier = tier; }
void model_set_frozen_base(int kind, int home) {
    frozen_base_kind = kind;
    frozen_base_home = home;
}
int model_frozen_base(void) { return frozen_base_kind; }
int model_frozen_home(void) { return frozen_base_home; }
/* 1 (the default): --base-prefetch 0 off (model_set_frozen_prefetch) */
static _Thread_local int frozen_no_prefetch;
void model_set_frozen_prefetch(int on) { frozen_no_prefetch = !on; }
int model_frozen_prefetch(void) { return !frozen_no_prefetch; }
int model_frozen_reads_ahead(const hpt_lora_opts *o, int device) {
    return !o->no_prefetch && o->home != HPT_TIER_DEVICE && !device; /* frozen.c: the CPU's */
}

void model_grads_away(int on) { create_grads_away = on; }

void model_set_grad_sink(hpt_model *m, const model_grad_sink *sink) { m->gsink = *sink; }

/* The model object and its flat buffers: every tensor (o NULL), or with o (the blocks in a
 * store, bound later) the non-block tensors and o->embeddings' buffers. */
static hpt_status create(hpt_mem *mem, const hpt_model_config *cfg, const hpt_offload_opts *o,
                         hpt_model **out) {
    *out = NULL;
    int stored = o != NULL;
    hpt_model_config full = *cfg;
    model_config_fill(&full);
    HPT_CHECK(hpt_model_config_check(&full));
    if (!hpt_arch_of(&full))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "architecture %d is not built in this version", full.arch);
    cfg = &full;
    hpt_model *m = calloc(1, sizeof *m);
    if (!m) return hpt_fail(HPT_ERR_OOM, "cannot allocate the model object");
    m->cfg = full;
    m->mem = mem;
    bind_arch(m);
    m->run.t_now = -1;
    m->run.st.disk.fd = -1;
    m->act = hpt_act_defaults();
    m->loss_scale = 1.0f;
    m->fault_layer = -1;
    m->num_params = hpt_model_config_num_params(cfg);
    int emb = stored ? o->embeddings : HPT_EMB_FULL;
    m->blocks_planned = stored;
    emb_plan(m, emb);
    size_t C = (size_t)cfg->C;
    m->n_flat = stored ? model_nonblock_floats(cfg) : m->num_params;
    /* no whole gradient of the head's weight (and of an untied wte); bf16 embeddings: GPT-2's
     * flat buffer holds lnfw, lnfb only, llama's lnfw */
    emb_flat_floats(m, &m->n_flat, &m->n_gflat);
    /* ZeRO-2 in memory: the blocks' gradients live in a sink's slot, layer by layer */
    m->grads_away = !stored && create_grads_away;
    if (m->grads_away) m->n_gflat = model_nonblock_floats(cfg);
    hpt_mem_set_name(mem, "parameters");
    hpt_status s = m->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->n_flat * sizeof(float),
                                (void **)&m->params);
    /* the engine's models keep theirs; a frozen base (frozen.c) has none */
    int grads = !create_frozen && (stored || !create_without_grads);
    if (s == HPT_OK && grads) {
        hpt_mem_set_name(mem, "gradients");
        s = m->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->n_gflat * sizeof(float),
                         (void **)&m->grads);
    }
    m->emb_tier = create_emb_tier;
    if (s == HPT_OK) s = emb_create(m, stored ? o : NULL);
    if (s == HPT_OK) s = consts_create(m);
    if (s != HPT_OK) {
        hpt_model_free(m);
        return hpt_fail_ctx(s, "allocating %zu parameters", hpt_model_config_num_params(cfg));
    }
    if (emb == HPT_EMB_BF16) {
        memset(&m->p, 0, sizeof m->p);
        m->p.lnfw = m->params;
        m->p.lnfb = m->params + C;
    } else if (stored) {
        point_nonblock(cfg, m->params, &m->p);
    }
    if (emb != HPT_EMB_FULL) { /* wpe, lnfw, lnfb */
        memset(&m->g, 0, sizeof m->g);
        m->g.wpe = m->grads;
        m->g.lnfw = m->grads + (size_t)cfg->maxT * C;
        m->g.lnfb = m->g.lnfw + C;
    } else if (stored || m->grads_away) {
        point_nonblock(cfg, m->grads, &m->g);
    }
    if (m->arch->point) {
        point_arch(m, m->params, 0, m->tp, &m->lp);
        point_arch(m, m->grads, 1, m->tg, &m->lg);
    } else if (!stored) {
        gpt2_point_tensors(cfg, m->params, &m->p);
        if (!m->grads_away) gpt2_point_tensors(cfg, m->grads, &m->g);
    }
    *out = m;
    return HPT_OK;
}

hpt_status hpt_model_create_config(hpt_mem *mem, const hpt_model_config *cfg, hpt_model **out) {
    return create(mem, cfg, NULL, out);
}

hpt_status hpt_model_create_forward(hpt_mem *mem, const char *shape, hpt_model **out) {
    *out = NULL;
    hpt_model_config cfg;
    HPT_CHECK(hpt_model_config_parse(shape, &cfg));
    create_without_grads = 1;
    hpt_status s = create(mem, &cfg, NULL, out);
    create_without_grads = 0;
    return s;
}

void model_create_forward_only(int on) { create_without_grads = on; }

hpt_status model_create_unbound(hpt_mem *mem, const hpt_model_config *cfg,
                               const hpt_offload_opts *o, hpt_model **out) {
    return create(mem, cfg, o, out);
}

void model_block_layout(const hpt_model *m, int *L, int *n_slices, const size_t **slice_n) {
    *L = m->cfg.L;
    *n_slices = m->tab.n_slices;
    *slice_n = m->slice_n;
}

void model_bind_blocks(hpt_model *m, hpt_block_store *store, struct offload_engine *eng) {
    m->blocks = store;
    m->eng = eng;
}

void hpt_model_free(hpt_model *m) {
    if (!m) return;
    hpt_model_free_activations(m);
    model_lora_free(m);
    model_pos_free(m);
    act_plan_free(m);
    if (m->blocks) m->blocks->free(m->blocks->ctx);
    emb_free(m);
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->consts, m->n_consts * sizeof(float));
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->params, m->n_flat * sizeof(float));
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->grads, m->n_gflat * sizeof(float));
    free(m);
}

const hpt_model_config *hpt_model_get_config(const hpt_model *m) { return &m->cfg; }
size_t hpt_model_num_params(const hpt_model *m) { return m->num_params; }
float *hpt_model_params(hpt_model *m) { return m->blocks ? NULL : m->params; }
float *hpt_model_grads(hpt_model *m) { return m->blocks ? NULL : m->grads; }

/* The streams' callbacks read and write host memory. The CPU's tensors are host memory and go
 * to them in place; a GPU's go through a host bounce buffer a piece at a time (the same values
 * in the same order, in more calls). */
#define DEV_STAGE_FLOATS ((size_t)1 << 20)
static hpt_status emit_dev(const hpt_model *m, const float *x, size_t n, model_emit_fn emit,
                           void *ctx) {
    if (m->be == hpt_backend_cpu()) return emit(ctx, x, n);
    float *buf = malloc(HPT_MIN(n, DEV_STAGE_FLOATS) * sizeof(float) + 1); /* freed here */
    if (!buf) return hpt_fail(HPT_ERR_OOM, "a bounce buffer for the device's tensors");
    hpt_status s = HPT_OK;
    for (size_t o = 0; o < n && s == HPT_OK; o += DEV_STAGE_FLOATS) {
        size_t k = HPT_MIN(DEV_STAGE_FLOATS, n - o);
        m->be->copy(buf, x + o, k * sizeof(float), HPT_COPY_D2H);
        s = emit(ctx, buf, k);
    }
    free(buf);
    return s;
}

static hpt_status read_dev(const hpt_model *m, float *x, size_t n, model_read_fn read, void *ctx) {
    if (m->be == hpt_backend_cpu()) return read(ctx, x, n);
    float *buf = malloc(HPT_MIN(n, DEV_STAGE_FLOATS) * sizeof(float) + 1);
    if (!buf) return hpt_fail(HPT_ERR_OOM, "a bounce buffer for the device's tensors");
    hpt_status s = HPT_OK;
    for (size_t o = 0; o < n && s == HPT_OK; o += DEV_STAGE_FLOATS) {
        size_t k = HPT_MIN(DEV_STAGE_FLOATS, n - o);
        s = read(ctx, buf, k);
        if (s == HPT_OK) m->be->copy(x + o, buf, k * sizeof(float), HPT_COPY_H2D);
    }
    free(buf);
    return s;
}

hpt_status model_emit(hpt_model *m, int b, const float *flat, model_emit_fn emit, void *ctx) {
    const hpt_tensor_table *t = &m->tab;
    const hpt_block_store *bs = m->blocks;
    if (!bs) return emit_dev(m, flat, m->num_params, emit, ctx);
    size_t piece = (size_t)m->Vc * (size_t)m->cfg.C;
    for (int i = 0; i < t->n; i++) {
        size_t numel = hpt_tensor_numel(&t->t[i]);
        if (b == EB_P && emb_stored(m, i)) { /* widened through the chunk scratch */
            for (size_t lo = 0; lo < numel; lo += piece) {
                size_t n = HPT_MIN(piece, numel - lo);
                emb_get(m, i, lo, m->emb_rows, n);
                HPT_CHECK(emit_dev(m, m->emb_rows, n, emit, ctx));
            }
            continue;
        }
        if (t->t[i].layer != HPT_LAYER_STACKED) {
            HPT_CHECK(emit_dev(m, b == EB_P ? model_nonblock_param(m, i).f32
                                            : flat + model_nonblock_offset(&m->cfg, i), numel,
                               emit, ctx));
            continue;
        }
        for (int l = 0; l < m->cfg.L; l++)
            HPT_CHECK(bs->gather(bs->ctx, b, l, t->t[i].slice, emit, ctx));
    }
    return HPT_OK;
}

hpt_status model_absorb(hpt_model *m, int b, float *flat, model_read_fn read, void *ctx) {
    const hpt_tensor_table *t = &m->tab;
    const hpt_block_store *bs = m->blocks;
    if (!bs) return read_dev(m, flat, m->num_params, read, ctx);
    size_t piece = (size_t)m->Vc * (size_t)m->cfg.C;
    for (int i = 0; i < t->n; i++) {
        size_t numel = hpt_tensor_numel(&t->t[i]);
        if (b == EB_P && emb_stored(m, i)) { /* rounded through the chunk scratch */
            for (size_t lo = 0; lo < numel; lo += piece) {
                size_t n = HPT_MIN(piece, numel - lo);
                HPT_CHECK(read_dev(m, m->emb_rows, n, read, ctx));
                emb_put(m, i, lo, m->emb_rows, n);
            }
            continue;
        }
        if (t->t[i].layer != HPT_LAYER_STACKED) {
            HPT_CHECK(read_dev(m, b == EB_P ? model_nonblock_param(m, i).f32
                                            : flat + model_nonblock_offset(&m->cfg, i), numel,
                               read, ctx));
            continue;
        }
        for (int l = 0; l < m->cfg.L; l++)
            HPT_CHECK(bs->scatter(bs->ctx, b, l, t->t[i].slice, read, ctx));
    }
    return HPT_OK;
}

typedef struct {
    const hpt_backend *be;
    float *dst; /* the caller's host buffer */
} emit_copy_ctx;

static hpt_status emit_copy(void *ctx, const float *x, size_t n) {
    emit_copy_ctx *c = ctx;
    c->be->copy(c->dst, x, n * sizeof(float), HPT_COPY_H2H); /* model_emit hands host memory */
    c->dst += n;
    return HPT_OK;
}

hpt_status hpt_model_copy_params(hpt_model *m, float *dst) {
    emit_copy_ctx c = {m->be, dst};
    return model_emit(m, EB_P, m->params, emit_copy, &c);
}

void hpt_model_offload_stats(const hpt_model *m, hpt_offload_stats *out) {
    memset(out, 0, sizeof *out);
    if (m->blocks) m->blocks->stats(m->blocks->ctx, out);
}

const float *hpt_model_logits(const hpt_model *m) {
    return *(float *const *)((const char *)m->acts + m->arch->off_logits);
}

void hpt_model_zero_grad(hpt_model *m) {
    /* a block store zeroes a block's at its backward (grad_slot) */
    if (m->grads) m->be->memset(m->grads, 0, m->n_gflat * sizeof(float));
    model_lora_zero_grad(m);
    m->grads_live = 0;
}

hpt_status model_grads_overflow(hpt_model *m, int *overflow) {
    /* the flat gradients first: the engine adds its blocks' finding and, under ZeRO (each rank's
     * flat gradients summed only in its range), makes the union the same on every rank */
    *overflow = m->grads && m->be->nonfinite(m->grads, m->n_gflat);
    if (m->blocks) HPT_CHECK(m->blocks->grads_overflow(m->blocks->ctx, overflow));
    return HPT_OK;
}

void hpt_model_release_grads(hpt_model *m) {
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->grads, m->n_gflat * sizeof(float));
    m->grads = NULL;
    memset(&m->g, 0, sizeof m->g);
    if (m->arch->point) point_arch(m, NULL, 1, m->tg, &m->lg);
}

hpt_status hpt_model_acquire_grads(hpt_model *m) {
    if (m->grads) return HPT_OK;
    if (m->blocks)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "releasing and reacquiring gradients is for models "
                        "without the offload engine");
    hpt_mem_set_name(m->mem, "gradients");
    HPT_CHECK(m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->num_params * sizeof(float),
                           (void **)&m->grads));
    if (m->arch->point) point_arch(m, m->grads, 1, m->tg, &m->lg);
    else gpt2_point_tensors(&m->cfg, m->grads, &m->g);
    return HPT_OK;
}
