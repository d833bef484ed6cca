/* lora.c: LoRA adapters over a frozen base (docs/lora.md). On each chosen linear layer of a
 * block (the architecture's `linears`: rows [row0, row0 + out) of a block weight)
 *   y = W x + s * B (A (dropout(x))),  A (r, in), B (out, r), s = alpha / r (rslora: / sqrt(r))
 * The adapters are a tensor table of their own (A then B of each chosen layer, stacked over the
 * blocks), with flat values and gradients (device tier), which the optimizer updates in place of
 * the model's (optim.c). The base is frozen: arch_linear_backward (arch.h) comes here and
 * computes the input's gradient (one GEMM, no weight or bias gradient) and the adapters'; the
 * norms' weight gradients, which their kernels always write, go to a small sink (one block's
 * vector slices and the non-block vectors) that nothing reads; the embedding's backward is not
 * run (runner.c).
 * Invariants: without adapters nothing here runs (the arch's calls are the matmul ops, the same
 * bits); every buffer comes from hpt_mem with the sizes hpt_lora_bytes gives (the estimator's);
 * dropout's mask is counter-based from (seed, forward pass, block, layer), so the backward and a
 * recomputation regenerate the forward's. */
#include "core/choices.h"
#include "core/core.h"
#include "model/gpt2_int.h"
#include "model/model.h"
#include "testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct model_lora {
    hpt_model *m;               /* borrowed: the model it is attached to */
    hpt_lora_opts o;
    float s;                    /* the scale */
    int n_lin;                  /* the chosen linear layers */
    hpt_arch_linear lin[HPT_ARCH_MAX_LINEARS];
    int lin_slice[HPT_ARCH_MAX_LINEARS]; /* the block slice of each one's weight */
    hpt_tensor_table tab;       /* A, B of each chosen layer (2 i, 2 i + 1), stacked */
    size_t n;                   /* adapter values */
    size_t off[2 * HPT_ARCH_MAX_LINEARS]; /* floats: tensor j in params and grads */
    float *params, *grads;      /* (n) device tier, categories params and grads */
    float *sink;                /* (n_sink) device grads: the frozen vectors' gradients, unread */
    size_t n_sink;
    size_t sink_off[HPT_TABLE_MAX]; /* floats: a base vector tensor's slice in sink */
    float *scratch;             /* (scratch_floats) device acts: u, du (BT, r), xd (BT, in_max) */
    size_t scratch_floats;
    int64_t in_max;             /* the widest chosen input */
    int training;               /* dropout on */
    int hold;                   /* testing: the masks stay those of the current pass */
    int cur_l;                  /* the block the runner computes now (model_lora_at) */
    const float *cur_w[HPT_TABLE_MAX]; /* its slices' pointers */
    uint64_t seed, pass;        /* dropout's stream: the seed, the forward passes so far */
};

/* ---- which layers (the architecture's names) ---- */

/* Whether token t names layer l: its short name, or the end of its module path at a dot. */
static int names(const hpt_arch_linear *l, const char *t, size_t n) {
    if (strlen(l->name) == n && !strncmp(l->name, t, n)) return 1;
    size_t h = strlen(l->hf);
    return h >= n && !strncmp(l->hf + h - n, t, n) && (h == n || l->hf[h - n - 1] == '.');
}

/* The layers o->targets chooses at cfg, in block order; HPT_ERR_INVALID for an unknown name. */
static hpt_status choose(const hpt_model_config *cfg, const hpt_lora_opts *o,
                         hpt_arch_linear out[HPT_ARCH_MAX_LINEARS], int *n_out) {
    const hpt_arch *A = hpt_arch_of(cfg);
    hpt_arch_linear all[HPT_ARCH_MAX_LINEARS];
    int n = A && A->linears ? A->linears(cfg, all) : 0;
    if (!n)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "LoRA: the %s architecture names no linear layers",
                        A ? A->name : "unknown");
    int pick[HPT_ARCH_MAX_LINEARS] = {0};
    const char *t = o->targets;
    int every = !*t || !strcmp(t, "all") || !strcmp(t, "all-linear");
    for (int i = 0; i < n; i++) pick[i] = every;
    while (!every && *t) {
        size_t len = strcspn(t, ",");
        int hit = 0;
        for (int i = 0; i < n; i++)
            if (len && names(&all[i], t, len)) pick[i] = hit = 1;
        if (!hit) {
            char known[256] = "";
            for (int i = 0; i < n; i++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s",
                         i ? ", " : "", all[i].name);
            return hpt_fail(HPT_ERR_INVALID, "lora-targets: '%.*s' is no linear layer of %s "
                            "(%s, or a module path's end such as %s)", (int)len, t, A->name,
                            known, all[0].hf);
        }
        t += len + (t[len] == ',');
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (pick[i]) out[k++] = all[i];
    *n_out = k;
    return HPT_OK;
}

/* The adapters' table at cfg: A (L, r, in) and B (L, out, r) of each chosen layer. */
static void describe(const hpt_model_config *cfg, int r, const hpt_arch_linear *lin, int n,
                     hpt_tensor_table *t) {
    memset(t, 0, sizeof *t);
    t->L = cfg->L;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 2; b++) {
            hpt_tensor_desc *d = &t->t[t->n++];
            snprintf(d->name, sizeof d->name, "%s.lora_%c", lin[i].name, b ? 'B' : 'A');
            d->dtype = HPT_DT_F32;
            d->ndim = 3;
            d->shape[0] = cfg->L;
            d->shape[1] = b ? lin[i].out : r;
            d->shape[2] = b ? r : lin[i].in;
            d->role = HPT_ROLE_PARAM;
            d->layer = HPT_LAYER_STACKED;
            d->slice = t->n_slices++;
            d->is_matrix = 1;
        }
}

/* Floats of the frozen base's gradient sink at cfg: one block's vector slices and the non-block
 * vectors (the norms' weights and biases, which their backward kernels write). */
static size_t sink_floats(const hpt_model_config *cfg, size_t *off) {
    hpt_tensor_table t;
    model_describe(cfg, &t);
    size_t n = 0;
    for (int i = 0; i < t.n; i++) {
        if (off) off[i] = (size_t)-1;
        if (t.t[i].is_matrix) continue;
        if (off) off[i] = n;
        n += hpt_tensor_slice_numel(&t.t[i], t.L);
    }
    return n;
}

static size_t scratch_floats(const hpt_lora_opts *o, int64_t in_max, size_t BT) {
    return BT * (2 * (size_t)o->r + (o->dropout > 0.0f ? (size_t)in_max : 0));
}

hpt_status model_lora_describe(const hpt_model_config *cfg, const hpt_lora_opts *o,
                               hpt_tensor_table *out) {
    hpt_arch_linear lin[HPT_ARCH_MAX_LINEARS];
    int n = 0;
    HPT_CHECK(hpt_lora_check(o));
    if (o->r < 1) return hpt_fail(HPT_ERR_INVALID, "LoRA: rank r must be >= 1 (got %d)", o->r);
    HPT_CHECK(choose(cfg, o, lin, &n));
    describe(cfg, o->r, lin, n, out);
    return HPT_OK;
}

size_t hpt_lora_num_params(const hpt_model_config *cfg, const hpt_lora_opts *o) {
    hpt_arch_linear lin[HPT_ARCH_MAX_LINEARS];
    int n = 0;
    if (o->r < 1 || choose(cfg, o, lin, &n) != HPT_OK) return 0;
    hpt_tensor_table t;
    describe(cfg, o->r, lin, n, &t);
    return hpt_table_numel(&t);
}

hpt_status model_lora_flops(const hpt_model_config *cfg, const hpt_lora_opts *o,
                            double *frozen_dw, double *adapters) {
    hpt_arch_linear all[HPT_ARCH_MAX_LINEARS], lin[HPT_ARCH_MAX_LINEARS];
    const hpt_arch *A = hpt_arch_of(cfg);
    int na = A && A->linears ? A->linears(cfg, all) : 0, n = 0;
    HPT_CHECK(choose(cfg, o, lin, &n));
    /* the weight gradients a frozen base does not compute: every block GEMM's and the head's,
     * 2 FLOPs per multiply-add (biases left out, as the architectures' counts do) */
    double w = 0.0, r = o->r, f = 0.0;
    for (int i = 0; i < na; i++) w += (double)all[i].in * (double)all[i].out;
    *frozen_dw = 2.0 * ((double)cfg->L * w + (double)cfg->Vp * cfg->C);
    /* per adapted layer: forward u = A x, y += B u: 2r(in + out); backward u again (2r in),
     * dB and du (2r out each), dA and dx (2r in each) */
    for (int i = 0; i < n; i++) f += 2.0 * r * (4.0 * (double)lin[i].in + 3.0 * (double)lin[i].out);
    *adapters = (double)cfg->L * f;
    return HPT_OK;
}

hpt_status hpt_lora_bytes(const hpt_model_config *cfg, const hpt_lora_opts *o, int B, int T,
                          int training, uint64_t out[HPT_CAT_COUNT]) {
    memset(out, 0, HPT_CAT_COUNT * sizeof out[0]);
    if (o->r < 1) return HPT_OK;
    hpt_arch_linear lin[HPT_ARCH_MAX_LINEARS];
    int n = 0;
    HPT_CHECK(choose(cfg, o, lin, &n));
    size_t np = hpt_lora_num_params(cfg, o);
    int64_t in_max = 0;
    for (int i = 0; i < n; i++) in_max = HPT_MAX(in_max, lin[i].in);
    out[HPT_CAT_PARAMS] = 4 * (uint64_t)np;
    if (!training) return HPT_OK;
    out[HPT_CAT_GRADS] = 4 * ((uint64_t)np + sink_floats(cfg, NULL));
    out[HPT_CAT_ACTS] = 4 * (uint64_t)scratch_floats(o, in_max, (size_t)B * (size_t)T);
    return HPT_OK;
}

/* ---- attaching ---- */

/* The arch's gradient struct pointed at the sink: the non-block vectors there, the rest NULL. */
static void point_sink(hpt_model *m) {
    struct model_lora *z = m->lora;
    const hpt_tensor_table *t = &m->tab;
    if (m->arch->point) {
        float *tp[HPT_TABLE_MAX] = {0};
        for (int i = 0; i < t->n; i++)
            if (t->t[i].layer != HPT_LAYER_STACKED && z->sink_off[i] != (size_t)-1)
                tp[i] = z->sink + z->sink_off[i];
        m->arch->point(&m->cfg, t, tp, m->consts, m->ag);
        return;
    }
    memset(&m->g, 0, sizeof m->g); /* GPT-2: its non-block vectors are lnfw and lnfb */
    m->g.lnfw = z->sink + z->sink_off[hpt_table_find(t, "lnfw")];
    m->g.lnfb = z->sink + z->sink_off[hpt_table_find(t, "lnfb")];
}

static hpt_status alloc(hpt_model *m, const char *name, hpt_category cat, size_t floats, float **p) {
    hpt_mem_set_name(m->mem, name);
    return m->be->alloc(m->mem, HPT_TIER_DEVICE, cat, floats * sizeof(float), (void **)p);
}

static void lora_free(hpt_model *m, struct model_lora *z) {
    if (!z) return;
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, z->params, z->n * sizeof(float));
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, z->grads, z->n * sizeof(float));
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, z->sink, z->n_sink * sizeof(float));
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, z->scratch, z->scratch_floats * sizeof(float));
    free(z);
}

void model_lora_free(hpt_model *m) {
    if (!m->lora) return;
    lora_free(m, m->lora);
    m->lora = NULL;
    /* the gradient struct as creation pointed it: at the flat gradients, or nowhere */
    if (m->arch->point) m->arch->point(&m->cfg, &m->tab, m->tg, m->consts, m->ag);
    else if (m->grads && !m->grads_away) gpt2_point_tensors(&m->cfg, m->grads, &m->g);
    else memset(&m->g, 0, sizeof m->g);
}

/* A (r, in) per block: PEFT's kaiming_uniform_(a=sqrt(5)), U(-1/sqrt(in), 1/sqrt(in)), from one
 * xorshift stream per tensor in table order (host, then copied to the device). */
static hpt_status init_values(hpt_model *m, struct model_lora *z, uint64_t seed) {
    m->be->memset(z->params, 0, z->n * sizeof(float));
    for (int i = 0; i < z->n_lin; i++) {
        const hpt_tensor_desc *d = &z->tab.t[2 * i];
        size_t n = hpt_tensor_numel(d);
        float *h = malloc(n * sizeof(float));
        if (!h) return hpt_fail(HPT_ERR_OOM, "LoRA: %zu floats to initialise %s", n, d->name);
        hpt_rng g;
        hpt_rng_seed(&g, seed ^ (0x9E3779B97F4A7C15ull * (uint64_t)(i + 1)));
        float bound = 1.0f / sqrtf((float)z->lin[i].in);
        for (size_t k = 0; k < n; k++) h[k] = (2.0f * hpt_rng_uniform(&g) - 1.0f) * bound;
        m->be->copy(z->params + z->off[2 * i], h, n * sizeof(float), HPT_COPY_H2D);
        free(h);
    }
    return HPT_OK;
}

hpt_status hpt_model_lora_attach(hpt_model *m, const hpt_lora_opts *o, uint64_t seed) {
    if (m->lora) return hpt_fail(HPT_ERR_INVALID, "LoRA: the model has adapters already");
    HPT_CHECK(hpt_lora_check(o));
    if (o->r < 1) return hpt_fail(HPT_ERR_INVALID, "LoRA: rank r must be >= 1 (got %d)", o->r);
    /* a frozen base's store and its bf16 embeddings (frozen.c: no gradients) are fine */
    if (m->eng || (m->emb != HPT_EMB_FULL && m->grads))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "LoRA adapters run on a base in memory (no --offload, "
                        "full embeddings) in this version");
    if (o->dropout > 0.0f && !m->be->dropout_forward)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "LoRA dropout: the %s backend has no dropout op",
                        m->be->name);
    struct model_lora *z = calloc(1, sizeof *z);
    if (!z) return hpt_fail(HPT_ERR_OOM, "cannot allocate the LoRA object");
    z->m = m;
    z->o = *o;
    z->s = hpt_lora_scale(o);
    z->training = 1;
    z->seed = seed;
    z->cur_l = -1;
    hpt_status s = choose(&m->cfg, o, z->lin, &z->n_lin);
    if (s != HPT_OK) {
        free(z);
        return s;
    }
    describe(&m->cfg, o->r, z->lin, z->n_lin, &z->tab);
    for (int j = 0; j < z->tab.n; j++) z->off[j] = hpt_table_offset(&z->tab, j);
    z->n = hpt_table_numel(&z->tab);
    for (int i = 0; i < z->n_lin; i++) {
        z->lin_slice[i] = m->tab.t[hpt_table_find(&m->tab, z->lin[i].weight)].slice;
        z->in_max = HPT_MAX(z->in_max, z->lin[i].in);
    }
    z->n_sink = sink_floats(&m->cfg, z->sink_off);
    s = alloc(m, "lora adapters", HPT_CAT_PARAMS, z->n, &z->params);
    if (s == HPT_OK) s = alloc(m, "lora gradients", HPT_CAT_GRADS, z->n, &z->grads);
    if (s == HPT_OK) s = alloc(m, "frozen norm gradients (unread)", HPT_CAT_GRADS, z->n_sink, &z->sink);
    if (s == HPT_OK) s = init_values(m, z, seed);
    if (s != HPT_OK) {
        lora_free(m, z);
        return hpt_fail_ctx(s, "attaching LoRA adapters (%zu values)", hpt_lora_num_params(&m->cfg, o));
    }
    m->be->memset(z->grads, 0, z->n * sizeof(float));
    m->be->memset(z->sink, 0, z->n_sink * sizeof(float));
    m->lora = z;
    point_sink(m);
    return HPT_OK;
}

void hpt_model_lora_detach(hpt_model *m) { model_lora_free(m); }

hpt_status model_lora_ensure(hpt_model *m, int B, int T) {
    struct model_lora *z = m->lora;
    if (z->o.dropout > 0.0f && m->act.mlp_tile > 0) /* the plan's rule (core/plan.c) */
        return hpt_fail(HPT_ERR_UNSUPPORTED, "a tiled MLP (mlp_tile %d) with LoRA dropout %g: "
                        "the dropout masks are drawn per call, not per tile", m->act.mlp_tile,
                        (double)z->o.dropout);
    size_t want = scratch_floats(&z->o, z->in_max, (size_t)B * (size_t)T);
    if (want <= z->scratch_floats) return HPT_OK;
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, z->scratch, z->scratch_floats * sizeof(float));
    z->scratch = NULL;
    z->scratch_floats = 0;
    HPT_CHECK(alloc(m, "lora scratch", HPT_CAT_ACTS, want, &z->scratch));
    z->scratch_floats = want;
    return HPT_OK;
}

void model_lora_begin_forward(hpt_model *m) {
    if (m->lora && !m->lora->hold) m->lora->pass++;
}

uint64_t model_lora_pass(const hpt_model *m) { return m->lora ? m->lora->pass : 0; }
void model_lora_set_pass(hpt_model *m, uint64_t pass) {
    if (m->lora) m->lora->pass = pass;
}

void hpt_model_lora_hold_masks(hpt_model *m, int hold) {
    if (m->lora) m->lora->hold = hold;
}

void model_lora_block_grads(hpt_model *m, float *dw[HPT_TABLE_MAX]) {
    const struct model_lora *z = m->lora;
    for (int s = 0; s < m->tab.n_slices; s++) {
        int ti = hpt_table_slice_tensor(&m->tab, s);
        dw[s] = z->sink_off[ti] == (size_t)-1 ? NULL : z->sink + z->sink_off[ti];
    }
}

void model_lora_zero_grad(hpt_model *m) {
    struct model_lora *z = m->lora;
    if (!z) return;
    m->be->memset(z->grads, 0, z->n * sizeof(float));
    m->be->memset(z->sink, 0, z->n_sink * sizeof(float));
}

const hpt_tensor_table *model_lora_table(const hpt_model *m) { return m->lora ? &m->lora->tab : NULL; }
int hpt_model_lora_on(const hpt_model *m) { return m->lora != NULL; }
int hpt_model_lora_num_tensors(const hpt_model *m) { return m->lora ? m->lora->tab.n : 0; }
size_t hpt_model_lora_num_params(const hpt_model *m) { return m->lora ? m->lora->n : 0; }
float *hpt_model_lora_params(hpt_model *m) { return m->lora ? m->lora->params : NULL; }
float *hpt_model_lora_grads(hpt_model *m) { return m->lora ? m->lora->grads : NULL; }
void hpt_model_lora_set_training(hpt_model *m, int on) {
    if (m->lora) m->lora->training = on;
}
const hpt_lora_opts *model_lora_opts(const hpt_model *m) { return m->lora ? &m->lora->o : NULL; }

hpt_status hpt_model_lora_tensor(const hpt_model *m, int i, hpt_tensor_info *out) {
    if (!m->lora || i < 0 || i >= m->lora->tab.n)
        return hpt_fail(HPT_ERR_INVALID, "LoRA tensor %d: the model has %d", i,
                        hpt_model_lora_num_tensors(m));
    const hpt_tensor_desc *d = &m->lora->tab.t[i];
    memset(out, 0, sizeof *out);
    out->name = d->name;
    out->dtype = HPT_DTYPE_F32;
    out->ndim = d->ndim;
    for (int k = 0; k < d->ndim; k++) out->shape[k] = d->shape[k];
    out->numel = hpt_tensor_numel(d);
    out->per_layer = 1;
    out->is_matrix = 1;
    return HPT_OK;
}

/* ---- the maths ---- */

/* The block whose slice `slice` w is: the runner's current one (model_lora_at), or -1 when w
 * is not that slice (another linear layer, the head). */
static int layer_of(const struct model_lora *z, int slice, const float *w) {
    return z->cur_l >= 0 && w == z->cur_w[slice] ? z->cur_l : -1;
}

void model_lora_at(hpt_model *m, int l, float *const *w) {
    struct model_lora *z = m->lora;
    if (!z) return;
    z->cur_l = l;
    for (int s = 0; s < m->tab.n_slices; s++) z->cur_w[s] = w[s];
}

static uint64_t drop_seed(const struct model_lora *z, int l, int i) {
    return z->seed ^ (z->pass * 0xD1B54A32D192ED03ull) ^ ((uint64_t)(l + 1) << 32) ^
           (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
}

/* The adapters' input: x itself, or dropout(x) into xd (N, in). */
static const float *adapter_input(const hpt_arch_ctx *x, const struct model_lora *z, int l, int i,
                                  const float *inp, float *xd, size_t n) {
    if (!(z->o.dropout > 0.0f) || !z->training) return inp;
    x->be->dropout_forward(xd, inp, n, z->o.dropout, drop_seed(z, l, i));
    return xd;
}

void model_lora_forward(const hpt_arch_ctx *x, float *out, const float *inp, const float *w,
                        int64_t N, int64_t C, int64_t OC) {
    const struct model_lora *z = x->lora;
    const hpt_backend *be = x->be;
    const int64_t r = z->o.r;
    float *u = z->scratch, *xd = u + 2 * (size_t)N * (size_t)r;
    (void)C;
    for (int i = 0; i < z->n_lin; i++) {
        int l = layer_of(z, z->lin_slice[i], w);
        if (l < 0) continue;
        const hpt_arch_linear *li = &z->lin[i];
        const float *A = z->params + z->off[2 * i] + (size_t)l * (size_t)(r * li->in);
        const float *Bm = z->params + z->off[2 * i + 1] + (size_t)l * (size_t)(li->out * r);
        const float *xin = adapter_input(x, z, l, i, inp, xd, (size_t)(N * li->in));
        /* u (N, r) = xin @ A^T */
        be->gemm('N', 'T', N, r, li->in, 1.0f, xin, li->in, A, li->in, 0.0f, u, r);
        /* out[:, row0:row0+out] += s * u @ B^T */
        be->gemm('N', 'T', N, li->out, r, z->s, u, r, Bm, r, 1.0f, out + li->row0, OC);
    }
}

void model_lora_backward(const hpt_arch_ctx *x, float *dinp, const float *dout, const float *inp,
                         const float *w, int64_t N, int64_t C, int64_t OC, int accumulate_dinp) {
    const struct model_lora *z = x->lora;
    const hpt_backend *be = x->be;
    const int64_t r = z->o.r;
    float *u = z->scratch, *du = u + (size_t)N * (size_t)r, *xd = du + (size_t)N * (size_t)r;
    /* the frozen base: dinp (N, C) = dout (N, OC) @ w (OC, C), no dw, no dbias */
    if (x->mm_ws) /* --matmul bf16: the base's product with bf16 operands, as without adapters */
        be->gemm_bf16('N', 'N', N, C, OC, 1.0f, dout, OC, w, C, accumulate_dinp ? 1.0f : 0.0f,
                      dinp, C, x->mm_ws);
    else be->gemm('N', 'N', N, C, OC, 1.0f, dout, OC, w, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    for (int i = 0; i < z->n_lin; i++) {
        int l = layer_of(z, z->lin_slice[i], w);
        if (l < 0) continue;
        const hpt_arch_linear *li = &z->lin[i];
        const size_t a_at = z->off[2 * i] + (size_t)l * (size_t)(r * li->in);
        const size_t b_at = z->off[2 * i + 1] + (size_t)l * (size_t)(li->out * r);
        const float *A = z->params + a_at, *Bm = z->params + b_at;
        float *dA = z->grads + a_at, *dB = z->grads + b_at;
        const float *dy = dout + li->row0; /* (N, out), rows OC apart */
        const int drop = z->o.dropout > 0.0f && z->training;
        const float *xin = adapter_input(x, z, l, i, inp, xd, (size_t)(N * li->in));
        /* u = xin @ A^T, as the forward */
        be->gemm('N', 'T', N, r, li->in, 1.0f, xin, li->in, A, li->in, 0.0f, u, r);
        /* y += s * u @ B^T: dB (out, r) += s * dy^T @ u; du (N, r) = s * dy @ B */
        be->gemm('T', 'N', li->out, r, N, z->s, dy, OC, u, r, 1.0f, dB, r);
        be->gemm('N', 'N', N, r, li->out, z->s, dy, OC, Bm, r, 0.0f, du, r);
        /* u = xin @ A^T: dA (r, in) += du^T @ xin; dxin (N, in) = du @ A */
        be->gemm('T', 'N', r, li->in, N, 1.0f, du, r, xin, li->in, 1.0f, dA, li->in);
        if (!drop) {
            be->gemm('N', 'N', N, li->in, r, 1.0f, du, r, A, li->in, 1.0f, dinp, li->in);
        } else { /* xin = dropout(x): dinp += mask * dxin / (1 - p) */
            be->gemm('N', 'N', N, li->in, r, 1.0f, du, r, A, li->in, 0.0f, xd, li->in);
            be->dropout_backward(dinp, xd, (size_t)(N * li->in), z->o.dropout, drop_seed(z, l, i));
        }
    }
}

/* ---- what io's PEFT files need (io/peft.c) ---- */

int model_lora_layers(const hpt_model *m, hpt_arch_linear out[HPT_ARCH_MAX_LINEARS],
                      const char **hf_block) {
    if (!m->lora) return 0;
    memcpy(out, m->lora->lin, (size_t)m->lora->n_lin * sizeof out[0]);
    *hf_block = m->arch->hf_block;
    return m->lora->n_lin;
}

hpt_status hpt_model_lora_merge(hpt_model *m) {
    struct model_lora *z = m->lora;
    if (!z) return hpt_fail(HPT_ERR_INVALID, "LoRA merge: the model has no adapters");
    if (m->blocks)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "LoRA merge: the base's blocks are in a store "
                        "(--base-weights, --offload): merge into an fp32 base");
    const int64_t r = z->o.r;
    for (int i = 0; i < z->n_lin; i++) {
        const hpt_arch_linear *li = &z->lin[i];
        const int s = z->lin_slice[i];
        for (int l = 0; l < m->cfg.L; l++) {
            const float *A = z->params + z->off[2 * i] + (size_t)l * (size_t)(r * li->in);
            const float *Bm = z->params + z->off[2 * i + 1] + (size_t)l * (size_t)(li->out * r);
            float *W = m->params + m->slice_off[s] + (size_t)l * m->slice_n[s] +
                       (size_t)li->row0 * (size_t)li->in;
            /* W[row0:row0+out, :] (out, in) += s * B (out, r) @ A (r, in) */
            m->be->gemm('N', 'N', li->out, li->in, r, z->s, Bm, r, A, li->in, 1.0f, W, li->in);
        }
    }
    model_lora_free(m);
    return HPT_OK;
}
