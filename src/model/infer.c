/* infer.c: inference with a key/value cache (hpt_infer), GPT-2, llama, Qwen and Gemma 3: the
 * logits of the next token after each fed token, and sampling. Weights are fp32 (borrowed from a
 * model) or int8 with one fp32 scale per output channel for the weight matrices (q8w ops);
 * an engine loaded from a checkpoint owns its weights, read a few MiB at a time by io/llmc.c
 * (hpt_infer_load, above the model, hands it each tensor's rows: model/infer.h). A feed of n
 * tokens runs the blocks on those n rows only (at most K_ROWS at once), attending to the cache
 * (llama's and Qwen's: NKV heads, keys rotated at their positions; Qwen3's q and k heads
 * normalised first, the attention NH hd wide; Gemma 3's norms times 1 + w, its local layers'
 * tables and window, its post-norms: gemma_rows). docs/inference.md.
 * Invariants: pos <= ctx; cache rows [0, pos) are those of the tokens fed since the last reset,
 * in order; every buffer goes through hpt_mem (weights params, cache and rows acts, the int8
 * GEMM's tile workspace, the loader's staging host io) and every op through the backend. */
#include "core/core.h"
#include "kernels/backend.h"
#include "model/gpt2_int.h"
#include "model/infer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define K_ROWS 64                  /* tokens a feed runs through the blocks at once */

/* Tensor roles: GPT-2's table order (its checkpoint index is its role), then llama's head,
 * Qwen3's (and Gemma 3's) per-head norms and Gemma 3's post-norms;
 * a configuration's table index of each role is in ti (-1: absent). The int8 ones are the
 * 2-D linear weights and the token embedding. */
enum { T_WTE = 0, T_WPE, T_LN1W, T_LN1B, T_QKVW, T_QKVB, T_ATTPROJW, T_ATTPROJB, T_LN2W,
       T_LN2B, T_FCW, T_FCB, T_FCPROJW, T_FCPROJB, T_LNFW, T_LNFB, T_LMHEAD, T_QKNW, T_POSTW,
       T_ROLES };
static const char *const k_role[T_ROLES] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
    "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb", "lm_head", "qknw", "postw"};
static int is_q8(int k) {
    return k == T_WTE || k == T_QKVW || k == T_ATTPROJW || k == T_FCW || k == T_FCPROJW ||
           k == T_LMHEAD;
}

struct hpt_infer {
    hpt_mem *mem;
    hpt_model_config cfg;
    hpt_weights kind;
    hpt_tensor_table tab;  /* the configuration's tensors (checkpoint order) */
    int ti[T_ROLES];       /* table index of each role, -1: absent */
    float *f[T_ROLES];     /* fp32 tensors (NULL for int8 ones and absent ones) */
    int8_t *q[T_ROLES];    /* int8 tensors (NULL for fp32 ones) */
    float *qs[T_ROLES];    /* their per-row scales */
    float *rope;           /* (n_rope) llama: the rotary tables, cos then sin (maxT, hd/2)
                            * each (the arch's constants); device params */
    size_t n_rope;
    float *f32;            /* (f32_bytes) int8 engine: its fp32 tensors, device params */
    int8_t *q8;            /* (q8_bytes) int8 engine: int8 tensors, device params */
    float *scales;         /* (scale_bytes) their scales, device params */
    size_t f32_bytes, q8_bytes, scale_bytes;
    int ctx, pos;          /* cache positions; positions filled */
    float *kv;             /* (L, 2, ctx, KV) keys then values of each block; device acts */
    size_t kv_bytes;
    float *work;           /* (work_bytes) the rows' activations and logits; device acts */
    size_t work_bytes;
    float *x, *ln, *qkv, *atty, *fch; /* (K_ROWS, C | C | QKV | A | FCH), A = NH hd (C but
                                       * for Qwen3) */
    float *mean, *rstd;    /* (K_ROWS) */
    float *qk_rstd;        /* (NH + NKV) Qwen3, Gemma 3: one row's per-head rstd; NULL otherwise */
    float *gtmp;           /* (K_ROWS, C) Gemma 3: a sublayer's output before its post-norm */
    float *wone;           /* (4C + 2hd) Gemma 3: 1 + [ln1w | ln2w | postw | qknw] of a layer */
    float *logits;         /* (Vp) after the last fed token */
    float *tile;           /* (HPT_Q8W_TILE, widest input) int8 engine: the q8w GEMM's
                            * dequantised weights, kernel scratch; device workspace (NULL for fp32) */
    size_t tile_bytes;
};

/* The configuration with a hand-written GPT-2's fields filled (model_config_fill). */
static hpt_model_config full_cfg(const hpt_model_config *c) {
    hpt_model_config f = *c;
    model_config_fill(&f);
    return f;
}
/* llama's block (llama, Qwen2, Qwen3: RMSNorm, rope, SwiGLU) rather than GPT-2's */
static int is_llama(const hpt_model_config *c) { return c->arch != HPT_ARCH_GPT2; }
static size_t hd_of(const hpt_model_config *c) { return (size_t)(c->hd ? c->hd : c->C / c->NH); }
/* the attention's width NH hd (C but for Qwen3); key (and value) width of one cached position;
 * a row of qkv; the MLP rows (GPT-2: fch (4C); llama: [gate | up] (2FF) then silu(gate) * up
 * (FF)); the widest GEMM input */
static size_t att_w(const hpt_model_config *c) { return (size_t)c->NH * hd_of(c); }
static size_t kv_w(const hpt_model_config *c) { return (size_t)c->NKV * hd_of(c); }
static size_t qkv_w(const hpt_model_config *c) { return att_w(c) + 2 * kv_w(c); }
static size_t fch_w(const hpt_model_config *c) { return (is_llama(c) ? 3u : 1u) * (size_t)c->FF; }
static size_t in_w(const hpt_model_config *c) {
    size_t w = (size_t)c->FF > (size_t)c->C ? (size_t)c->FF : (size_t)c->C;
    return w > att_w(c) ? w : att_w(c);
}
static int is_gemma(const hpt_model_config *c) { return c->arch == HPT_ARCH_GEMMA3; }
static int has_qk_norm(const hpt_model_config *c) { return c->arch == HPT_ARCH_QWEN3 || is_gemma(c); }

/* Row width of tensor role k (one output channel: its input width; qknw: a layer's 2hd). */
static size_t row_width(const hpt_model_config *c, int k) {
    return k == T_FCPROJW ? (size_t)c->FF : k == T_ATTPROJW ? att_w(c)
         : k == T_QKNW ? 2 * hd_of(c) : k == T_POSTW ? 2 * (size_t)c->C : (size_t)c->C;
}
/* The role of table index i (-1: none). */
static int role_of(const int ti[T_ROLES], int i) {
    for (int k = 0; k < T_ROLES; k++)
        if (ti[k] == i) return k;
    return -1;
}
static void roles(const hpt_model_config *c, hpt_tensor_table *t, int ti[T_ROLES]);

size_t infer_row_width(const hpt_model_config *cfg, int i) {
    hpt_model_config c = full_cfg(cfg);
    hpt_tensor_table t;
    int ti[T_ROLES];
    roles(&c, &t, ti);
    return row_width(&c, role_of(ti, i));
}
static int per_layer(int k) {
    return k != T_WTE && k != T_WPE && k != T_LNFW && k != T_LNFB && k != T_LMHEAD;
}

/* The roles' table indices and elements of a configuration. */
static void roles(const hpt_model_config *c, hpt_tensor_table *t, int ti[T_ROLES]) {
    model_describe(c, t);
    for (int k = 0; k < T_ROLES; k++) ti[k] = hpt_table_find(t, k_role[k]);
}

uint64_t hpt_infer_weight_bytes_for(const hpt_model_config *cfg, hpt_weights w) {
    hpt_model_config c = full_cfg(cfg);
    hpt_tensor_table t;
    int ti[T_ROLES];
    roles(&c, &t, ti);
    uint64_t bytes = 0;
    for (int k = 0; k < T_ROLES; k++) {
        if (ti[k] < 0) continue;
        size_t numel = hpt_tensor_numel(&t.t[ti[k]]);
        if (w == HPT_WEIGHTS_Q8 && is_q8(k))
            bytes += numel + numel / row_width(&c, k) * sizeof(float);
        else
            bytes += numel * sizeof(float);
    }
    return bytes;
}

/* Floats of an engine's row buffers (see infer_new). */
static size_t work_floats(const hpt_model_config *c) {
    const size_t C = (size_t)c->C;
    return K_ROWS * (C + C + qkv_w(c) + att_w(c) + fch_w(c)) + 2 * K_ROWS + (size_t)c->Vp +
           (has_qk_norm(c) ? (size_t)(c->NH + c->NKV) : 0) +
           (is_gemma(c) ? K_ROWS * C + 4 * C + 2 * hd_of(c) : 0);
}
/* Bytes of the int8 GEMM's tile: HPT_Q8W_TILE output channels of the widest input. */
static size_t tile_bytes(const hpt_model_config *c, hpt_weights kind) {
    return kind == HPT_WEIGHTS_Q8 ? HPT_Q8W_TILE * in_w(c) * sizeof(float) : 0;
}

static int clamp_ctx(const hpt_model_config *c, int ctx) { return ctx == 0 || ctx > c->maxT ? c->maxT : ctx; }

uint64_t hpt_infer_bytes_for(const hpt_model_config *cfg, hpt_weights w, int ctx) {
    hpt_model_config c = full_cfg(cfg);
    uint64_t kv = (uint64_t)c.L * 2 * (uint64_t)clamp_ctx(&c, ctx) * (uint64_t)kv_w(&c) * sizeof(float);
    return hpt_infer_weight_bytes_for(&c, w) + kv + work_floats(&c) * sizeof(float) +
           tile_bytes(&c, w) + model_consts_floats(&c) * sizeof(float);
}

/* (K_ROWS, Vp) logits, then (K_ROWS) losses and log-sum-exps (hpt_infer_loss). */
static size_t loss_bytes(const hpt_model_config *c) {
    return ((size_t)K_ROWS * (size_t)c->Vp + 2 * K_ROWS) * sizeof(float);
}

uint64_t hpt_infer_loss_bytes_for(const hpt_model_config *cfg) { return loss_bytes(cfg); }

void hpt_infer_free(hpt_infer *inf) {
    if (!inf) return;
    hpt_mem *mem = inf->mem;
    const hpt_backend *be = hpt_backend_cpu();
    be->free(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, inf->f32, inf->f32_bytes);
    be->free(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, inf->q8, inf->q8_bytes);
    be->free(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, inf->scales, inf->scale_bytes);
    be->free(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, inf->kv, inf->kv_bytes);
    be->free(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, inf->work, inf->work_bytes);
    be->free(mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, inf->tile, inf->tile_bytes);
    be->free(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, inf->rope, inf->n_rope * sizeof(float));
    free(inf);
}

/* The engine object with its cache and scratch; weights are the caller's to set. */
hpt_status infer_new(hpt_mem *mem, const hpt_model_config *cfg, hpt_weights kind, int ctx,
                     hpt_infer **out) {
    const hpt_backend *be = hpt_backend_cpu();
    *out = NULL;
    if (ctx < 0) return hpt_fail(HPT_ERR_INVALID, "context %d must be >= 0", ctx);
    hpt_infer *inf = calloc(1, sizeof *inf);
    if (!inf) return hpt_fail(HPT_ERR_OOM, "cannot allocate the inference object");
    inf->mem = mem;
    inf->cfg = full_cfg(cfg);
    cfg = &inf->cfg;
    inf->kind = kind;
    inf->ctx = clamp_ctx(cfg, ctx);
    roles(cfg, &inf->tab, inf->ti);
    const size_t C = (size_t)cfg->C;
    inf->kv_bytes = (size_t)cfg->L * 2 * (size_t)inf->ctx * kv_w(cfg) * sizeof(float);
    inf->work_bytes = work_floats(cfg) * sizeof(float);
    inf->tile_bytes = tile_bytes(cfg, kind);
    hpt_mem_set_name(mem, "kv cache");
    hpt_status s = be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, inf->kv_bytes, (void **)&inf->kv);
    if (s == HPT_OK) {
        hpt_mem_set_name(mem, "inference rows");
        s = be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, inf->work_bytes, (void **)&inf->work);
    }
    if (s == HPT_OK) {
        hpt_mem_set_name(mem, "int8 gemm tile");
        s = be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, inf->tile_bytes, (void **)&inf->tile);
    }
    inf->n_rope = model_consts_floats(cfg);
    if (s == HPT_OK && inf->n_rope) { /* the arch's rotary tables, made on the host */
        float *host = malloc(inf->n_rope * sizeof(float));
        hpt_mem_set_name(mem, "rotary tables");
        s = host ? be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, inf->n_rope * sizeof(float),
                             (void **)&inf->rope)
                 : hpt_fail(HPT_ERR_OOM, "rotary tables");
        if (s == HPT_OK) {
            hpt_arch_of(cfg)->consts_fill(cfg, host);
            be->copy(inf->rope, host, inf->n_rope * sizeof(float), HPT_COPY_H2D);
        } else {
            inf->n_rope = 0;
        }
        free(host);
    }
    if (s != HPT_OK) {
        hpt_infer_free(inf);
        return hpt_fail_ctx(s, "inference buffers for a context of %d", ctx);
    }
    float *w = inf->work;
    inf->x = w;        w += K_ROWS * C;
    inf->ln = w;       w += K_ROWS * C;
    inf->qkv = w;      w += K_ROWS * qkv_w(cfg);
    inf->atty = w;     w += K_ROWS * att_w(cfg);
    inf->fch = w;      w += K_ROWS * fch_w(cfg);
    inf->mean = w;     w += K_ROWS;
    inf->rstd = w;     w += K_ROWS;
    inf->logits = w;   w += cfg->Vp;
    inf->qk_rstd = has_qk_norm(cfg) ? w : NULL;
    if (is_gemma(cfg)) {
        w += cfg->NH + cfg->NKV;
        inf->gtmp = w;  w += K_ROWS * C;
        inf->wone = w;
    }
    *out = inf;
    return HPT_OK;
}

/* Whether tensor role k is stored as int8 in this engine. */
static int quantised(const hpt_infer *inf, int k) { return inf->kind == HPT_WEIGHTS_Q8 && is_q8(k); }
static size_t role_numel(const hpt_infer *inf, int k) {
    return inf->ti[k] < 0 ? 0 : hpt_tensor_numel(&inf->tab.t[inf->ti[k]]);
}

/* An engine that owns its weights: its buffers (int8 and scales for the quantised tensors, fp32
 * for the others) and the tensor pointers into them. */
hpt_status infer_alloc_weights(hpt_infer *inf) {
    const hpt_backend *be = hpt_backend_cpu();
    const hpt_model_config *c = &inf->cfg;
    size_t nf = 0, nq = 0, ns = 0;
    for (int k = 0; k < T_ROLES; k++) {
        if (quantised(inf, k)) {
            nq += role_numel(inf, k);
            ns += role_numel(inf, k) / row_width(c, k);
        } else {
            nf += role_numel(inf, k);
        }
    }
    inf->f32_bytes = nf * sizeof(float);
    inf->q8_bytes = nq;
    inf->scale_bytes = ns * sizeof(float);
    hpt_mem *mem = inf->mem;
    hpt_mem_set_name(mem, "int8 weights");
    HPT_CHECK(be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, inf->q8_bytes, (void **)&inf->q8));
    hpt_mem_set_name(mem, "int8 weight scales");
    HPT_CHECK(be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, inf->scale_bytes,
                        (void **)&inf->scales));
    hpt_mem_set_name(mem, inf->kind == HPT_WEIGHTS_Q8 ? "fp32 vectors" : "fp32 weights");
    HPT_CHECK(be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, inf->f32_bytes, (void **)&inf->f32));
    nf = nq = ns = 0;
    for (int k = 0; k < T_ROLES; k++) {
        if (inf->ti[k] < 0) continue;
        if (quantised(inf, k)) {
            inf->q[k] = inf->q8 + nq;
            inf->qs[k] = inf->scales + ns;
            nq += role_numel(inf, k);
            ns += role_numel(inf, k) / row_width(c, k);
        } else {
            inf->f[k] = inf->f32 + nf;
            nf += role_numel(inf, k);
        }
    }
    return HPT_OK;
}

/* Stores rows [r0, r0 + n) of tensor role k's fp32 values (src, n rows of its width, on the
 * tier the copy kind names) into an engine that owns its weights: quantised rows or copies. */
static void ingest(hpt_infer *inf, int k, size_t r0, const float *src, size_t n,
                   hpt_copy_kind kind) {
    const hpt_backend *be = hpt_backend_cpu();
    size_t w = row_width(&inf->cfg, k);
    if (quantised(inf, k)) /* the CPU backend quantises from either tier */
        be->q8w_quantize(inf->q[k] + r0 * w, inf->qs[k] + r0, src, (int64_t)n, (int64_t)w);
    else
        be->copy(inf->f[k] + r0 * w, src, n * w * sizeof(float), kind);
}

void infer_ingest(hpt_infer *inf, int i, size_t row0, const float *rows, size_t n) {
    int k = role_of(inf->ti, i);
    if (k >= 0) ingest(inf, k, row0, rows, n, HPT_COPY_H2D);
}

hpt_status hpt_infer_create(hpt_mem *mem, hpt_model *model, hpt_weights kind, int ctx,
                            hpt_infer **out) {
    *out = NULL;
    if (model->eng)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "inference reads the model's flat weights: load the "
                        "checkpoint with hpt_infer_load instead of a model made with the offload "
                        "engine");
    hpt_infer *inf;
    HPT_CHECK(infer_new(mem, &model->cfg, kind, ctx, &inf));
    for (int k = 0; k < T_ROLES; k++) {
        if (inf->ti[k] < 0) continue;
        if (kind == HPT_WEIGHTS_F32) inf->f[k] = model->params + hpt_table_offset(&inf->tab, inf->ti[k]);
    }
    if (kind != HPT_WEIGHTS_F32) {
        hpt_status s = infer_alloc_weights(inf);
        if (s != HPT_OK) {
            hpt_infer_free(inf);
            return hpt_fail_ctx(s, "int8 weights");
        }
        for (int k = 0; k < T_ROLES; k++)
            if (inf->ti[k] >= 0)
                ingest(inf, k, 0, model->params + hpt_table_offset(&inf->tab, inf->ti[k]),
                       role_numel(inf, k) / row_width(&inf->cfg, k), HPT_COPY_D2D);
    }
    *out = inf;
    return HPT_OK;
}

const hpt_model_config *hpt_infer_get_config(const hpt_infer *inf) { return &inf->cfg; }
int hpt_infer_get_ctx(const hpt_infer *inf) { return inf->ctx; }
int hpt_infer_get_pos(const hpt_infer *inf) { return inf->pos; }
void hpt_infer_reset(hpt_infer *inf) { inf->pos = 0; }
const float *hpt_infer_logits(const hpt_infer *inf) { return inf->logits; }

/* out (n, OC) (+)= inp (n, IC) @ w^T + b for tensor role kw of layer l (bias kb, -1 or absent:
 * none). */
static void linear(hpt_infer *inf, float *out, const float *inp, int kw, int kb, int l, size_t n,
                   int64_t IC, int64_t OC, int accumulate) {
    size_t wo = per_layer(kw) ? (size_t)l * (size_t)(OC * IC) : 0;
    const float *b = kb >= 0 && inf->f[kb] ? inf->f[kb] + (size_t)l * (size_t)OC : NULL;
    const hpt_backend *be = hpt_backend_cpu();
    if (inf->q[kw])
        be->q8w_matmul_forward(out, inp, inf->q[kw] + wo, inf->qs[kw] + wo / (size_t)IC, b,
                               (int64_t)n, IC, OC, accumulate, inf->tile);
    else
        be->matmul_forward(out, inp, inf->f[kw] + wo, b, (int64_t)n, IC, OC, accumulate);
}

/* Qwen3's per-head norms of the n rows' q and k heads in qkv (model/qwen.c's forward; Gemma
 * 3's), row by row through atty's first row (free until the attention): q_h = rmsnorm(q_h) *
 * qnw * qscale, k_h = rmsnorm(k_h) * knw, w = [qnw | knw] (2hd). */
static void qk_norm_rows(hpt_infer *inf, size_t n, const float *w, float qscale) {
    const hpt_backend *be = hpt_backend_cpu();
    const hpt_model_config *c = &inf->cfg;
    const int NH = c->NH, NKV = c->NKV, hd = (int)hd_of(c);
    const size_t QKV = qkv_w(c), A = att_w(c), K = kv_w(c);
    for (size_t r = 0; r < n; r++) {
        float *q = inf->qkv + r * QKV;
        be->copy(inf->atty, q, (A + K) * sizeof(float), HPT_COPY_D2D);
        be->rmsnorm_forward(q, inf->qk_rstd, inf->atty, w, NH, hd, c->norm_eps);
        if (qscale != 1.0f) be->scale(q, A, qscale);
        be->rmsnorm_forward(q + A, inf->qk_rstd + NH, inf->atty + A, w + hd, NKV, hd, c->norm_eps);
    }
}

/* out (n) = 1 + w: Gemma 3's norm weights as its maths uses them */
static void plus_one(float *out, const float *w, size_t n) {
    hpt_backend_cpu()->fill(out, n, 1.0f);
    hpt_backend_cpu()->add(out, out, w, n);
}

/* Gemma 3's blocks on n rows (model/gemma.c's forward): its norms times 1 + w (wone, refilled
 * per layer), q scaled, the local layers' rotary tables and window, the post-norms on the
 * attention's and the MLP's outputs (through gtmp), GeGLU. */
static void gemma_rows(hpt_infer *inf, size_t n, int pos0) {
    const hpt_backend *be = hpt_backend_cpu();
    const hpt_model_config *c = &inf->cfg;
    const int C = c->C, NH = c->NH, NKV = c->NKV, FF = c->FF, hd = (int)hd_of(c);
    const int A = (int)att_w(c);
    const size_t Cz = (size_t)C, kw = kv_w(c), QKV = qkv_w(c), nC = n * Cz;
    const size_t half = (size_t)c->maxT * (size_t)(hd / 2);
    const float qscale = c->attn_scalar > 0.0f ? (float)sqrt((double)hd / (double)c->attn_scalar) : 1.0f;
    float *gu = inf->fch, *sw = inf->fch + K_ROWS * 2 * (size_t)FF, *wo = inf->wone;
    for (int l = 0; l < c->L; l++) {
        const size_t lc = (size_t)l * Cz;
        float *K = inf->kv + (size_t)l * 2 * (size_t)inf->ctx * kw, *V = K + (size_t)inf->ctx * kw;
        const int local = c->swa_pattern > 0 && (l + 1) % c->swa_pattern != 0;
        const float *cosv = inf->rope + (local ? 2 * half : 0), *sinv = cosv + half;
        plus_one(wo, inf->f[T_LN1W] + lc, Cz);
        plus_one(wo + Cz, inf->f[T_LN2W] + lc, Cz);
        plus_one(wo + 2 * Cz, inf->f[T_POSTW] + 2 * lc, 2 * Cz);
        plus_one(wo + 4 * Cz, inf->f[T_QKNW] + (size_t)l * 2 * (size_t)hd, 2 * (size_t)hd);
        be->rmsnorm_forward(inf->ln, inf->rstd, inf->x, wo, (int64_t)n, C, c->norm_eps);
        linear(inf, inf->qkv, inf->ln, T_QKVW, T_QKVB, l, n, C, (int64_t)QKV, 0);
        qk_norm_rows(inf, n, wo + 4 * Cz, qscale);
        be->rope_forward(inf->qkv, cosv, sinv, 1, (int)n, NH, NKV, hd, pos0);
        be->infer_kv_store(K, V, inf->qkv, pos0, n, A, NH, NKV);
        be->infer_attend(inf->atty, inf->qkv, K, V, pos0, n, A, NH, NKV, local ? c->window : 0);
        linear(inf, inf->gtmp, inf->atty, T_ATTPROJW, T_ATTPROJB, l, n, A, C, 0);
        be->rmsnorm_forward(inf->ln, inf->rstd, inf->gtmp, wo + 2 * Cz, (int64_t)n, C, c->norm_eps);
        be->add(inf->x, inf->x, inf->ln, nC);
        be->rmsnorm_forward(inf->ln, inf->rstd, inf->x, wo + Cz, (int64_t)n, C, c->norm_eps);
        linear(inf, gu, inf->ln, T_FCW, T_FCB, l, n, C, 2 * (int64_t)FF, 0);
        be->geglu_forward(sw, gu, (int64_t)n, FF);
        linear(inf, inf->gtmp, sw, T_FCPROJW, T_FCPROJB, l, n, FF, C, 0);
        be->rmsnorm_forward(inf->ln, inf->rstd, inf->gtmp, wo + 3 * Cz, (int64_t)n, C, c->norm_eps);
        be->add(inf->x, inf->x, inf->ln, nC);
    }
}

/* llama's blocks on n rows (model/llama.c's forward; Qwen's, model/qwen.c): rmsnorm, qkv,
 * [Qwen3's q and k norms], rope at the rows' positions, the cache of NKV heads, attention,
 * SwiGLU. */
static void llama_rows(hpt_infer *inf, size_t n, int pos0) {
    const hpt_backend *be = hpt_backend_cpu();
    const hpt_model_config *c = &inf->cfg;
    const int C = c->C, NH = c->NH, NKV = c->NKV, FF = c->FF, hd = (int)hd_of(c);
    const int A = (int)att_w(c);
    const size_t Cz = (size_t)C, kw = kv_w(c), QKV = qkv_w(c);
    const float *cosv = inf->rope, *sinv = inf->rope + (size_t)c->maxT * (size_t)(hd / 2);
    float *gu = inf->fch, *sw = inf->fch + K_ROWS * 2 * (size_t)FF;
    for (int l = 0; l < c->L; l++) {
        const size_t lc = (size_t)l * Cz;
        float *K = inf->kv + (size_t)l * 2 * (size_t)inf->ctx * kw, *V = K + (size_t)inf->ctx * kw;
        be->rmsnorm_forward(inf->ln, inf->rstd, inf->x, inf->f[T_LN1W] + lc, (int64_t)n, C, c->norm_eps);
        linear(inf, inf->qkv, inf->ln, T_QKVW, T_QKVB, l, n, C, (int64_t)QKV, 0);
        if (inf->qk_rstd)
            qk_norm_rows(inf, n, inf->f[T_QKNW] + (size_t)l * 2 * (size_t)hd, 1.0f);
        be->rope_forward(inf->qkv, cosv, sinv, 1, (int)n, NH, NKV, hd, pos0);
        be->infer_kv_store(K, V, inf->qkv, pos0, n, A, NH, NKV);
        be->infer_attend(inf->atty, inf->qkv, K, V, pos0, n, A, NH, NKV, c->window);
        linear(inf, inf->x, inf->atty, T_ATTPROJW, T_ATTPROJB, l, n, A, C, 1);
        be->rmsnorm_forward(inf->ln, inf->rstd, inf->x, inf->f[T_LN2W] + lc, (int64_t)n, C, c->norm_eps);
        linear(inf, gu, inf->ln, T_FCW, T_FCB, l, n, C, 2 * (int64_t)FF, 0);
        be->swiglu_forward(sw, gu, (int64_t)n, FF);
        linear(inf, inf->x, sw, T_FCPROJW, T_FCPROJB, l, n, FF, C, 1);
    }
}

/* Runs n <= K_ROWS tokens at positions pos .. pos + n - 1 through the blocks: x holds their
 * final residuals. */
static void block_rows(hpt_infer *inf, const int32_t *tok, size_t n) {
    const hpt_backend *be = hpt_backend_cpu();
    const hpt_model_config *c = &inf->cfg;
    const int C = c->C, L = c->L;
    const size_t Cz = (size_t)C;
    const int pos0 = inf->pos;
    be->infer_embed(inf->x, tok, n, pos0, inf->f[T_WTE], inf->q[T_WTE], inf->qs[T_WTE],
                    inf->f[T_WPE], C); /* x = wte[tok] + wpe[pos] (llama: no wpe) */
    if (is_gemma(c)) { /* x = wte[tok] sqrt(C) */
        be->scale(inf->x, n * Cz, (float)sqrt((double)C));
        gemma_rows(inf, n, pos0);
        inf->pos += (int)n;
        return;
    }
    if (is_llama(c)) {
        llama_rows(inf, n, pos0);
        inf->pos += (int)n;
        return;
    }
    for (int l = 0; l < L; l++) {
        const size_t lc = (size_t)l * Cz;
        float *K = inf->kv + (size_t)l * 2 * (size_t)inf->ctx * Cz, *V = K + (size_t)inf->ctx * Cz;
        be->layernorm_forward(inf->ln, inf->mean, inf->rstd, inf->x, inf->f[T_LN1W] + lc,
                              inf->f[T_LN1B] + lc, (int64_t)n, C);
        linear(inf, inf->qkv, inf->ln, T_QKVW, T_QKVB, l, n, C, 3 * C, 0);
        be->infer_kv_store(K, V, inf->qkv, pos0, n, C, c->NH, c->NH);
        be->infer_attend(inf->atty, inf->qkv, K, V, pos0, n, C, c->NH, c->NH, 0);
        linear(inf, inf->x, inf->atty, T_ATTPROJW, T_ATTPROJB, l, n, C, C, 1);
        be->layernorm_forward(inf->ln, inf->mean, inf->rstd, inf->x, inf->f[T_LN2W] + lc,
                              inf->f[T_LN2B] + lc, (int64_t)n, C);
        linear(inf, inf->fch, inf->ln, T_FCW, T_FCB, l, n, C, 4 * C, 0);
        be->gelu_forward(inf->fch, inf->fch, (int64_t)n * 4 * C);
        linear(inf, inf->x, inf->fch, T_FCPROJW, T_FCPROJB, l, n, 4 * C, C, 1);
    }
    inf->pos += (int)n;
}

/* ln (n, C) = the final norm of the n rows in x; out (n, Vp) = their logits (the tied head,
 * or llama's lm_head when untied). */
static void head_rows(hpt_infer *inf, float *out, const float *x, size_t n) {
    const hpt_model_config *c = &inf->cfg;
    if (is_gemma(c)) /* times 1 + lnfw */
        plus_one(inf->wone, inf->f[T_LNFW], (size_t)c->C);
    if (is_llama(c))
        hpt_backend_cpu()->rmsnorm_forward(inf->ln, inf->rstd, x,
                                           is_gemma(c) ? inf->wone : inf->f[T_LNFW], (int64_t)n,
                                           c->C, c->norm_eps);
    else
        hpt_backend_cpu()->layernorm_forward(inf->ln, inf->mean, inf->rstd, x, inf->f[T_LNFW],
                                             inf->f[T_LNFB], (int64_t)n, c->C);
    linear(inf, out, inf->ln, inf->ti[T_LMHEAD] >= 0 ? T_LMHEAD : T_WTE, -1, 0, n, c->C, c->Vp, 0);
}

hpt_status hpt_infer_feed(hpt_infer *inf, const int32_t *tokens, int n) {
    if (n < 1) return hpt_fail(HPT_ERR_INVALID, "feed needs at least one token");
    if (inf->pos + n > inf->ctx)
        return hpt_fail(HPT_ERR_SHAPE, "%d more tokens do not fit the context (%d of %d used)",
                        n, inf->pos, inf->ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= inf->cfg.V)
            return hpt_fail(HPT_ERR_INVALID, "token %d at position %d is outside [0, %d)",
                            tokens[i], i, inf->cfg.V);
    int k = 0;
    for (int i = 0; i < n; i += k) {
        k = n - i < K_ROWS ? n - i : K_ROWS;
        block_rows(inf, tokens + i, (size_t)k);
    }
    head_rows(inf, inf->logits, inf->x + (size_t)(k - 1) * (size_t)inf->cfg.C, 1);
    return HPT_OK;
}

hpt_status hpt_infer_loss(hpt_infer *inf, const int32_t *inputs, const int32_t *targets, int B,
                          int T, float *loss_out) {
    const hpt_model_config *c = &inf->cfg;
    if (B < 1 || T < 1) return hpt_fail(HPT_ERR_INVALID, "batch %d and sequence %d must be >= 1", B, T);
    if (T > inf->ctx)
        return hpt_fail(HPT_ERR_SHAPE, "sequence %d is longer than the context %d", T, inf->ctx);
    double n_targets = 0.0; /* a target < 0 is ignored (docs/targets.md) */
    for (size_t i = 0; i < (size_t)B * (size_t)T; i++) {
        if (inputs[i] < 0 || inputs[i] >= c->V || targets[i] >= c->V)
            return hpt_fail(HPT_ERR_INVALID, "token %d -> %d at position %zu is outside [0, %d)",
                            inputs[i], targets[i], i, c->V);
        n_targets += targets[i] >= 0;
    }
    size_t bytes = loss_bytes(c); /* for this call only */
    float *lg;
    hpt_mem_set_name(inf->mem, "loss logits");
    const hpt_backend *be = hpt_backend_cpu();
    HPT_CHECK(be->alloc(inf->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, bytes, (void **)&lg));
    float *losses = lg + (size_t)K_ROWS * (size_t)c->Vp, *lse = losses + K_ROWS;
    double total = 0.0;
    for (int b = 0; b < B; b++) {
        hpt_infer_reset(inf);
        for (int i = 0; i < T; i += K_ROWS) {
            size_t k = (size_t)(T - i < K_ROWS ? T - i : K_ROWS), at = (size_t)b * (size_t)T + (size_t)i;
            block_rows(inf, inputs + at, k);
            head_rows(inf, lg, inf->x, k);
            (void)be->crossentropy_forward(losses, lse, lg, targets + at, (int64_t)k, c->V, c->Vp);
            for (size_t r = 0; r < k; r++) total += (double)losses[r];
        }
    }
    hpt_infer_reset(inf);
    be->free(inf->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, lg, bytes);
    /* every token a target: n_targets is B*T exactly */
    *loss_out = n_targets > 0 ? (float)(total / n_targets) : 0.0f;
    return HPT_OK;
}

/* The next token from logits (V of Vp) at temperature among the top_k likeliest (0: all);
 * probs, order (V) are scratch. */
static int32_t sample_token(const float *logits, int V, float temperature, int top_k,
                            hpt_rng *rng, float *probs, int32_t *order) {
    float maxv = -INFINITY;
    for (int v = 0; v < V; v++) maxv = logits[v] > maxv ? logits[v] : maxv;
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        probs[v] = expf((logits[v] - maxv) / temperature);
        sum += (double)probs[v];
    }
    for (int v = 0; v < V; v++) order[v] = v;
    int K = top_k > 0 && top_k < V ? top_k : V;
    if (K < V) { /* keep the K largest: partial selection sort on indices (K is small) */
        for (int i = 0; i < K; i++) {
            int best = i;
            for (int j = i + 1; j < V; j++)
                if (probs[order[j]] > probs[order[best]]) best = j;
            int32_t tmp = order[i];
            order[i] = order[best];
            order[best] = tmp;
        }
        sum = 0.0;
        for (int i = 0; i < K; i++) sum += (double)probs[order[i]];
    }
    double r = (double)hpt_rng_uniform(rng) * sum, acc = 0.0;
    for (int i = 0; i < K; i++) {
        acc += (double)probs[order[i]];
        if (r < acc) return order[i];
    }
    return order[K - 1];
}

/* The options' checks and sample_token's scratch, probs and order (V each; both or neither). */
static hpt_status sampling_scratch(int V, float temperature, int top_k, float **probs,
                                   int32_t **order) {
    if (!(temperature > 0.0f)) return hpt_fail(HPT_ERR_INVALID, "temperature must be > 0");
    if (top_k < 0) return hpt_fail(HPT_ERR_INVALID, "top-k must be >= 0");
    *probs = malloc((size_t)V * sizeof(float));
    *order = malloc((size_t)V * sizeof(int32_t));
    if (!*probs || !*order) {
        free(*probs);
        free(*order);
        return hpt_fail(HPT_ERR_OOM, "sampling buffers");
    }
    return HPT_OK;
}

hpt_status hpt_infer_truncate(hpt_infer *inf, int pos) {
    if (pos < 0 || pos > inf->pos)
        return hpt_fail(HPT_ERR_INVALID, "cannot keep %d positions of %d", pos, inf->pos);
    inf->pos = pos; /* rows [0, pos) stay those of the tokens fed first (the invariant) */
    return HPT_OK;
}

hpt_status hpt_infer_sample(hpt_infer *inf, float temperature, int top_k, uint64_t *rng_state,
                            int32_t *out) {
    const int V = inf->cfg.V;
    if (inf->pos < 1) return hpt_fail(HPT_ERR_INVALID, "sampling needs a fed token first");
    float *probs = NULL;
    int32_t *order = NULL;
    HPT_CHECK(sampling_scratch(V, temperature, top_k, &probs, &order));
    hpt_rng rng = {*rng_state};
    *out = sample_token(inf->logits, V, temperature, top_k, &rng, probs, order);
    *rng_state = rng.s;
    free(probs);
    free(order);
    return HPT_OK;
}

uint64_t hpt_infer_rng_seed(uint64_t seed) {
    hpt_rng r;
    hpt_rng_seed(&r, seed);
    return r.s;
}

hpt_status hpt_infer_generate(hpt_infer *inf, int32_t *tokens, int n_prompt, int n_new,
                              float temperature, int top_k, uint64_t seed) {
    const int V = inf->cfg.V, ctx = inf->ctx;
    if (n_prompt < 1) return hpt_fail(HPT_ERR_INVALID, "generation needs at least one prompt token");
    float *probs = NULL;
    int32_t *order = NULL;
    HPT_CHECK(sampling_scratch(V, temperature, top_k, &probs, &order));
    hpt_rng rng;
    hpt_rng_seed(&rng, seed);
    /* the cache holds at most ctx positions: when full, it restarts from the last ctx / 2
     * tokens (one prefill), so each token sees between ctx / 2 and ctx tokens of context */
    hpt_infer_reset(inf);
    int start = n_prompt > ctx ? n_prompt - ctx : 0;
    hpt_status s = hpt_infer_feed(inf, tokens + start, n_prompt - start);
    for (int n = n_prompt; n < n_prompt + n_new && s == HPT_OK; n++) {
        tokens[n] = sample_token(inf->logits, V, temperature, top_k, &rng, probs, order);
        if (n + 1 == n_prompt + n_new) break;
        if (inf->pos == ctx) {
            int keep = ctx / 2 > 0 ? ctx / 2 : 1;
            hpt_infer_reset(inf);
            s = hpt_infer_feed(inf, tokens + n + 1 - keep, keep);
        } else {
            s = hpt_infer_feed(inf, tokens + n, 1);
        }
    }
    free(probs);
    free(order);
    return s;
}

hpt_status hpt_model_generate(hpt_model *m, int32_t *tokens, int n_prompt, int n_new,
                             float temperature, int top_k, uint64_t seed) {
    if (n_prompt < 1) return hpt_fail(HPT_ERR_INVALID, "generation needs at least one prompt token");
    if (n_new < 0) return hpt_fail(HPT_ERR_INVALID, "tokens to generate must be >= 0");
    hpt_infer *inf;
    HPT_CHECK(hpt_infer_create(m->mem, m, HPT_WEIGHTS_F32, n_prompt + n_new, &inf));
    hpt_status s = hpt_infer_generate(inf, tokens, n_prompt, n_new, temperature, top_k, seed);
    hpt_infer_free(inf);
    return s;
}
