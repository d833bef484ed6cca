/* gpt2.c: GPT-2 forward and backward in fp32 on the CPU, llm.c's layout.
 *
 * The model owns two buffers of num_params floats (parameters and gradients, device tier)
 * and one activation block laid out for the largest (B, T) seen so far. Each forward
 * records its inputs and targets; backward differentiates that forward. Backward restates
 * the expression it differentiates above each step. Gradients accumulate (+=), so callers
 * zero them per optimizer step and may accumulate micro-batches.
 * What the arena keeps follows the model's hpt_gpt2_act_opts: flash or plain attention, and a
 * recompute policy (recompute_block rebuilds at the start of a block's backward what the
 * policy dropped, with the forward's kernels on the forward's inputs, so the bits are the
 * same as without recomputation; plan_acts gives dropped buffers a forward lifetime and a
 * backward one, so the arena shrinks).
 * Offload and compression (act.offload, act.compress int8 or bf16; docs/activations.md): a
 * stored field has a forward buffer (its block's forward), a stored copy (host buffer, disk
 * block, or the compressed copy in the arena) and a backward buffer (from the time point before its block's backward);
 * offload_block fills the copy, prefetch_start / prefetch_wait bring it back (a thread for
 * host offload). Invariant: the prefetch thread writes only buffers born at the current time
 * point and reads only the host store; it is joined before anything reads them and before the
 * arena is freed or replanned.
 * Blocks' parameters are reached through a gpt2_block (block_acquire / block_release): slices of
 * the flat buffers without the offload engine (zero copy, the same pointers as before the
 * engine existed), or the engine's device slot with it (src/offload/engine.c): each block is
 * acquired for its forward, its recomputation and its backward, whose gradients go to the
 * engine's gradient slot and are handed to it (eng_grads_done) when complete.
 * With chunked or bf16 embeddings (the engine's o.embeddings) the encoder, the head and wte's
 * gradient go through src/model/embed.c: no whole wte gradient (the flat gradients are wpe's and
 * lnf's), wte updated chunk by chunk at the backward's end, bf16 wte and wpe outside params.
 * States: created -> (forward -> [backward]) * ; backward without a forward with targets
 * is refused with HPT_ERR_INVALID. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "mem/arena.h"
#include "model/gpt2_int.h"
#include "offload/engine.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void enter_time(hpt_gpt2 *m, int t);
static void prefetch_wait(hpt_gpt2 *m);

/* Releases the offload tier's buffers (host store, disk block, staging). */
static void free_stores(hpt_gpt2 *m) {
    hpt_mem_free(m->mem, HPT_TIER_HOST, HPT_CAT_ACTS, m->host_store, m->host_bytes);
    hpt_mem_free(m->mem, HPT_TIER_HOST, HPT_CAT_ACTS, m->staging, m->staging_bytes);
    if (m->disk.fd >= 0) hpt_mem_disk_free(m->mem, HPT_CAT_ACTS, &m->disk);
    m->disk.fd = -1;
    m->host_store = m->staging = NULL;
    m->host_bytes = m->staging_bytes = m->disk_bytes = 0;
}

/* Points the non-block tensors into the engine's flat buffer (wte, wpe, lnfw, lnfb). */
static void point_nonblock(const hpt_gpt2_config *cfg, float *base, gpt2_tensors *t) {
    memset(t, 0, sizeof *t);
    t->wte = base + gpt2_nonblock_offset(cfg, 0);
    t->wpe = base + gpt2_nonblock_offset(cfg, 1);
    t->lnfw = base + gpt2_nonblock_offset(cfg, 14);
    t->lnfb = base + gpt2_nonblock_offset(cfg, 15);
}

hpt_status hpt_gpt2_create_offload(hpt_mem *mem, const hpt_gpt2_config *cfg,
                                   const hpt_offload_opts *o, hpt_gpt2 **out) {
    *out = NULL;
    HPT_CHECK(hpt_gpt2_config_check(cfg));
    int eng = hpt_offload_active(o);
    if (eng) HPT_CHECK(hpt_offload_check(o));
    hpt_gpt2 *m = calloc(1, sizeof *m);
    if (!m) return hpt_fail(HPT_ERR_OOM, "cannot allocate the model object");
    m->cfg = *cfg;
    m->mem = mem;
    m->t_now = -1;
    m->disk.fd = -1;
    m->act = hpt_gpt2_act_defaults();
    m->loss_scale = 1.0f;
    m->fault_layer = -1;
    m->num_params = hpt_gpt2_num_params(cfg);
    int emb = eng ? o->embeddings : HPT_EMB_FULL;
    size_t C = (size_t)cfg->C, wte = (size_t)cfg->Vp * C;
    m->n_flat = eng ? gpt2_nonblock_floats(cfg) : m->num_params;
    m->n_gflat = emb != HPT_EMB_FULL ? m->n_flat - wte : m->n_flat; /* no whole wte gradient */
    if (emb == HPT_EMB_BF16) m->n_flat = 2 * C;                      /* lnfw, lnfb */
    hpt_mem_set_name(mem, "parameters");
    hpt_status s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->n_flat * sizeof(float),
                                 (void **)&m->params);
    if (s == HPT_OK) {
        hpt_mem_set_name(mem, "gradients");
        s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->n_gflat * sizeof(float),
                          (void **)&m->grads);
    }
    if (s == HPT_OK) s = emb_create(m, eng ? o : NULL);
    if (s == HPT_OK && eng) {
        size_t n[GPT2_BLOCK_SLICES];
        gpt2_block_slices(cfg, n);
        s = eng_create(mem, cfg->L, GPT2_BLOCK_SLICES, n, o, &m->eng);
    }
    if (s != HPT_OK) {
        hpt_gpt2_free(m);
        return hpt_fail_ctx(s, "allocating %zu parameters", hpt_gpt2_num_params(cfg));
    }
    if (emb == HPT_EMB_BF16) {
        memset(&m->p, 0, sizeof m->p);
        m->p.lnfw = m->params;
        m->p.lnfb = m->params + C;
    } else if (eng) {
        point_nonblock(cfg, m->params, &m->p);
    }
    if (emb != HPT_EMB_FULL) { /* wpe, lnfw, lnfb */
        memset(&m->g, 0, sizeof m->g);
        m->g.wpe = m->grads;
        m->g.lnfw = m->grads + (size_t)cfg->maxT * C;
        m->g.lnfb = m->g.lnfw + C;
    } else if (eng) {
        point_nonblock(cfg, m->grads, &m->g);
    }
    if (!eng) {
        gpt2_point_tensors(cfg, m->params, &m->p);
        gpt2_point_tensors(cfg, m->grads, &m->g);
    }
    *out = m;
    return HPT_OK;
}

hpt_status hpt_gpt2_create(hpt_mem *mem, const hpt_gpt2_config *cfg, hpt_gpt2 **out) {
    return hpt_gpt2_create_offload(mem, cfg, NULL, out);
}

/* The slices of block l in a packed block at base (the engine's layout). */
static void block_packed(const hpt_gpt2_config *cfg, float *base, gpt2_block *b) {
    size_t n[GPT2_BLOCK_SLICES], o = 0;
    gpt2_block_slices(cfg, n);
    float **f[GPT2_BLOCK_SLICES] = {&b->ln1w, &b->ln1b, &b->qkvw, &b->qkvb, &b->attprojw,
                                    &b->attprojb, &b->ln2w, &b->ln2b, &b->fcw, &b->fcb,
                                    &b->fcprojw, &b->fcprojb};
    for (int i = 0; i < GPT2_BLOCK_SLICES; i++) {
        *f[i] = base + o;
        o += n[i];
    }
}

/* Block l's slices of the flat tensors t. */
static void block_flat(const hpt_gpt2_config *cfg, const gpt2_tensors *t, int l, gpt2_block *b) {
    size_t lc = (size_t)l * cfg->C, C = (size_t)cfg->C;
    *b = (gpt2_block){t->ln1w + lc, t->ln1b + lc, t->qkvw + lc * 3 * C, t->qkvb + lc * 3,
                      t->attprojw + lc * C, t->attprojb + lc, t->ln2w + lc, t->ln2b + lc,
                      t->fcw + lc * 4 * C, t->fcb + lc * 4, t->fcprojw + lc * 4 * C,
                      t->fcprojb + lc};
}

/* Block l's parameters, held until block_release (the engine loads them when offloaded). */
static hpt_status block_acquire(hpt_gpt2 *m, int l, gpt2_block *b) {
    if (!m->eng) {
        block_flat(&m->cfg, &m->p, l, b);
        return HPT_OK;
    }
    float *base;
    HPT_CHECK(eng_acquire(m->eng, l, &base));
    block_packed(&m->cfg, base, b);
    return HPT_OK;
}

static void block_release(hpt_gpt2 *m, int l) {
    if (m->eng) eng_release(m->eng, l);
}

void hpt_gpt2_free_activations(hpt_gpt2 *m) {
    if (!m) return;
    prefetch_wait(m);
    if (m->act_mem) enter_time(m, -1);
    hpt_mem_free(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, m->act_mem, m->act_bytes);
    m->act_mem = NULL;
    m->act_bytes = 0;
    free_stores(m);
    m->aB = m->aT = 0;
    m->B = m->T = 0;
    m->has_targets = 0;
}

void hpt_gpt2_free(hpt_gpt2 *m) {
    if (!m) return;
    hpt_gpt2_free_activations(m);
    free(m->layers);
    free(m->flayers);
    free(m->bufs);
    free(m->astore);
    free(m->soff);
    free(m->sbytes);
    eng_free(m->eng);
    emb_free(m);
    hpt_mem_free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->params, m->n_flat * sizeof(float));
    hpt_mem_free(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->grads, m->n_gflat * sizeof(float));
    free(m);
}

const hpt_gpt2_config *hpt_gpt2_get_config(const hpt_gpt2 *m) { return &m->cfg; }
size_t hpt_gpt2_get_num_params(const hpt_gpt2 *m) { return m->num_params; }
float *hpt_gpt2_params(hpt_gpt2 *m) { return m->eng ? NULL : m->params; }
float *hpt_gpt2_grads(hpt_gpt2 *m) { return m->eng ? NULL : m->grads; }

hpt_status gpt2_emit(hpt_gpt2 *m, int b, const float *flat, gpt2_emit_fn emit, void *ctx) {
    hpt_gpt2_tensor t[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(&m->cfg, t);
    if (!m->eng) return emit(ctx, flat, m->num_params);
    size_t piece = (size_t)m->Vc * (size_t)m->cfg.C;
    for (int i = 0; i < HPT_GPT2_NUM_TENSORS; i++) {
        if (b == EB_P && m->emb == HPT_EMB_BF16 && i < 2) { /* widened through the chunk scratch */
            for (size_t lo = 0; lo < t[i].numel; lo += piece) {
                size_t n = HPT_MIN(piece, t[i].numel - lo);
                emb_get(m, i, lo, m->emb_rows, n);
                HPT_CHECK(emit(ctx, m->emb_rows, n));
            }
            continue;
        }
        if (!gpt2_is_block_tensor(i)) {
            HPT_CHECK(emit(ctx, b == EB_P ? gpt2_nonblock_param(m, i).f32
                                          : flat + gpt2_nonblock_offset(&m->cfg, i), t[i].numel));
            continue;
        }
        for (int l = 0; l < m->cfg.L; l++)
            HPT_CHECK(eng_emit_slice(m->eng, b, l, i - GPT2_FIRST_BLOCK_TENSOR, emit, ctx));
    }
    return HPT_OK;
}

hpt_status gpt2_absorb(hpt_gpt2 *m, int b, float *flat, gpt2_read_fn read, void *ctx) {
    hpt_gpt2_tensor t[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(&m->cfg, t);
    if (!m->eng) return read(ctx, flat, m->num_params);
    size_t piece = (size_t)m->Vc * (size_t)m->cfg.C;
    for (int i = 0; i < HPT_GPT2_NUM_TENSORS; i++) {
        if (b == EB_P && m->emb == HPT_EMB_BF16 && i < 2) { /* rounded through the chunk scratch */
            for (size_t lo = 0; lo < t[i].numel; lo += piece) {
                size_t n = HPT_MIN(piece, t[i].numel - lo);
                HPT_CHECK(read(ctx, m->emb_rows, n));
                emb_put(m, i, lo, m->emb_rows, n);
            }
            continue;
        }
        if (!gpt2_is_block_tensor(i)) {
            HPT_CHECK(read(ctx, b == EB_P ? gpt2_nonblock_param(m, i).f32
                                          : flat + gpt2_nonblock_offset(&m->cfg, i), t[i].numel));
            continue;
        }
        for (int l = 0; l < m->cfg.L; l++)
            HPT_CHECK(eng_absorb_slice(m->eng, b, l, i - GPT2_FIRST_BLOCK_TENSOR, read, ctx));
    }
    return HPT_OK;
}

static hpt_status emit_copy(void *ctx, const float *x, size_t n) {
    float **dst = ctx;
    memcpy(*dst, x, n * sizeof(float));
    *dst += n;
    return HPT_OK;
}

hpt_status hpt_gpt2_copy_params(hpt_gpt2 *m, float *dst) {
    return gpt2_emit(m, EB_P, m->params, emit_copy, &dst);
}

void hpt_gpt2_offload_stats(const hpt_gpt2 *m, hpt_offload_stats *out) {
    memset(out, 0, sizeof *out);
    if (m->eng) eng_stats(m->eng, out);
}
const float *hpt_gpt2_logits(const hpt_gpt2 *m) { return m->a.logits; }

/* Rows of logits the head computes at once for the current (B, T). */
static size_t head_rows(const hpt_gpt2 *m) {
    size_t BT = (size_t)m->B * m->T;
    return m->act.head_chunk > 0 && (size_t)m->act.head_chunk < BT ? (size_t)m->act.head_chunk : BT;
}

void hpt_gpt2_zero_grad(hpt_gpt2 *m) {
    if (m->grads) memset(m->grads, 0, m->n_gflat * sizeof(float)); /* the engine zeroes a block's at its backward */
    m->grads_live = 0;
}

hpt_status gpt2_grads_overflow(hpt_gpt2 *m, int *overflow) {
    *overflow = 0;
    if (m->eng) HPT_CHECK(eng_grads_overflow(m->eng, overflow));
    if (m->grads && k_nonfinite(m->grads, m->n_gflat)) *overflow = 1;
    return HPT_OK;
}

void hpt_gpt2_release_grads(hpt_gpt2 *m) {
    hpt_mem_free(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->grads, m->n_gflat * sizeof(float));
    m->grads = NULL;
    memset(&m->g, 0, sizeof m->g);
}

hpt_status hpt_gpt2_acquire_grads(hpt_gpt2 *m) {
    if (m->grads) return HPT_OK;
    if (m->eng)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "releasing and reacquiring gradients is for models "
                        "without the offload engine");
    hpt_mem_set_name(m->mem, "gradients");
    HPT_CHECK(hpt_mem_alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->num_params * sizeof(float),
                            (void **)&m->grads));
    gpt2_point_tensors(&m->cfg, m->grads, &m->g);
    return HPT_OK;
}

/* Step time points of the arena plan: forward of the embeddings (0), of block l (1 + l), of
 * the head and loss (L + 1); backward of the head (L + 2), of block l (L + 3 + (L - 1 - l)),
 * of the embeddings (2L + 3). A buffer lives from the point that writes it to the last
 * point that reads it. A block's recomputation runs at the start of its backward point (for
 * every:N, the segment's whole forward at the backward point of its last block). */
#define TP_BLOCK_F(l) (1 + (l))
#define TP_HEAD_F(L) ((L) + 1)
#define TP_HEAD_B(L) ((L) + 2)
#define TP_BLOCK_B(L, l) ((L) + 3 + ((L) - 1 - (l)))
#define TP_ENC_B(L) (2 * (L) + 3)

/* The fields of gpt2_layer_acts (all float pointers), for the plan. */
enum { SZ_C, SZ_3C, SZ_4C, SZ_ROW, SZ_ATT, SZ_LSE };
typedef struct {
    size_t off;
    const char *name;
    int size;
} layer_field;
#define LF(f, sz) {offsetof(gpt2_layer_acts, f), #f, sz}
static const layer_field k_fields[] = {
    LF(ln1, SZ_C),  LF(ln1_mean, SZ_ROW), LF(ln1_rstd, SZ_ROW), LF(qkv, SZ_3C),
    LF(atty, SZ_C), LF(att, SZ_ATT),      LF(att_lse, SZ_LSE),  LF(res2, SZ_C),
    LF(ln2, SZ_C),  LF(ln2_mean, SZ_ROW), LF(ln2_rstd, SZ_ROW), LF(fch, SZ_4C),
    LF(fch_gelu, SZ_4C), LF(res3, SZ_C)};
#undef LF
#define N_FIELDS ((int)(sizeof k_fields / sizeof k_fields[0]))
static float **field_of(gpt2_layer_acts *la, int i) { return (float **)((char *)la + k_fields[i].off); }

/* a stored (offloaded or compressed) field is up to three buffers: forward, store, backward */
static int n_bufs_for(const hpt_gpt2_config *c) { return 3 * N_FIELDS * c->L + 13; }

/* Where the stored copies go: filled by plan_acts (arrays of L * N_FIELDS, zeroed). */
typedef struct {
    void **astore;     /* int8 copies in the arena (compression without offload) */
    size_t *soff;      /* offsets in the offload space (host buffer or disk block) */
    size_t *sbytes;    /* bytes of each stored copy, 0: not stored */
    size_t off_bytes;  /* the offload space */
    size_t max_store;  /* the largest stored copy (disk + int8 staging) */
} store_plan;

/* Whether field `name` of a kept buffer is stored (offloaded and/or compressed): the large
 * ones a block's backward reads; not the block's output (the next block's input) nor the
 * per-row statistics. */
static int stored(const hpt_gpt2_act_opts *o, const char *name) {
    if (o->offload == HPT_OFFLOAD_NONE && o->compress == HPT_COMPRESS_NONE) return 0;
    static const char *k[] = {"ln1", "qkv", "atty", "att", "res2", "ln2", "fch", "fch_gelu"};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (!strcmp(name, k[i])) return 1;
    return 0;
}

/* Row width (floats) of a field of size class sz: a token's C, 3C or 4C values, or a row of
 * T probabilities. */
static size_t row_width(const hpt_gpt2_config *c, int T, int sz) {
    switch (sz) {
    case SZ_3C: return 3 * (size_t)c->C;
    case SZ_4C: return 4 * (size_t)c->C;
    case SZ_ATT: return (size_t)T;
    case SZ_C: return (size_t)c->C;
    default: return 1;
    }
}

/* int8 with one absmax scale per row: (rows) fp32 scales, then (rows, w) int8. */
static size_t q8_bytes(size_t rows, size_t w) { return rows * sizeof(float) + rows * w; }

static void q8_store(char *dst, const float *x, size_t rows, size_t w) {
    float *scale = (float *)dst;
    int8_t *q = (int8_t *)(dst + rows * sizeof(float));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < (int64_t)rows; r++) {
        const float *xr = x + (size_t)r * w;
        float amax = 0.0f;
        for (size_t j = 0; j < w; j++) amax = fabsf(xr[j]) > amax ? fabsf(xr[j]) : amax;
        float s = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[r] = s;
        for (size_t j = 0; j < w; j++) {
            float v = nearbyintf(xr[j] * inv);
            q[(size_t)r * w + j] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
    }
}

/* par 0: serial (on the prefetch thread, outside OpenMP's team) */
static void q8_load(float *x, const char *src, size_t rows, size_t w, int par) {
    const float *scale = (const float *)src;
    const int8_t *q = (const int8_t *)(src + rows * sizeof(float));
#pragma omp parallel for schedule(static) if (par)
    for (int64_t r = 0; r < (int64_t)rows; r++)
        for (size_t j = 0; j < w; j++)
            x[(size_t)r * w + j] = (float)q[(size_t)r * w + j] * scale[r];
}

/* bf16: a float's high half, rounded to nearest even (no scale: bf16 keeps fp32's range). */
static void bf16_store(char *dst, const float *x, size_t n) {
    uint16_t *h = (uint16_t *)dst;
#pragma omp parallel for simd schedule(static) if (n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof b);
        h[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
}

static void bf16_load(float *x, const char *src, size_t n, int par) {
    const uint16_t *h = (const uint16_t *)src;
#pragma omp parallel for simd schedule(static) if (par && n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        uint32_t b = (uint32_t)h[i] << 16;
        memcpy(&x[i], &b, sizeof b);
    }
}

/* Bytes of a stored copy of (rows, w) floats under compression kind k. */
static size_t coded_bytes(hpt_act_compress k, size_t rows, size_t w) {
    return k == HPT_COMPRESS_INT8 ? q8_bytes(rows, w) : k == HPT_COMPRESS_BF16 ? rows * w * 2 : rows * w * 4;
}

/* dst = the compressed copy of x (rows, w) (kind not NONE). */
static void code_store(hpt_act_compress k, char *dst, const float *x, size_t rows, size_t w) {
    if (k == HPT_COMPRESS_INT8) q8_store(dst, x, rows, w);
    else bf16_store(dst, x, rows * w);
}

/* x (rows, w) from a compressed copy; par 0: serial (the prefetch thread). */
static void code_load(hpt_act_compress k, float *x, const char *src, size_t rows, size_t w, int par) {
    if (k == HPT_COMPRESS_INT8) q8_load(x, src, rows, w, par);
    else bf16_load(x, src, rows * w, par);
}

/* N of the every:N segmentation (full = every:1); 0 for policies that keep block inputs. */
static int segment_len(const hpt_gpt2_act_opts *o) {
    if (o->recompute == HPT_RECOMPUTE_FULL) return 1;
    if (o->recompute == HPT_RECOMPUTE_EVERY) return o->every;
    return 0;
}

/* The last block of block l's segment (every:N): segments are [kN, kN + N - 1]. */
static int segment_end(int l, int N, int L) {
    int e = (l / N) * N + N - 1;
    return e < L - 1 ? e : L - 1;
}

/* Whether the policy drops field i of block l (recomputes it in backward). */
static int dropped(const hpt_gpt2_act_opts *o, int L, int l, const char *name) {
    int N = segment_len(o);
    if (N) return !(strcmp(name, "res3") == 0 && l == segment_end(l, N, L));
    if (o->recompute == HPT_RECOMPUTE_SELECTIVE)
        return !strcmp(name, "ln1") || !strcmp(name, "ln2") || !strcmp(name, "fch_gelu") ||
               !strcmp(name, "att");
    return 0;
}

/* Lists the buffers of a step at (B, T) with their sizes and lifetimes, plans their offsets,
 * and returns the arena's size and the number of buffers. Pointers are set later by
 * point_bufs. A kept field of block l is one buffer, from its forward to its backward; a
 * dropped one is two: a transient one its forward writes (flayers[l]) and the recomputed one
 * its backward reads (layers[l]). */
static size_t plan_acts(const hpt_gpt2_config *c, const hpt_gpt2_act_opts *o, int vc, int B,
                        int T, gpt2_acts *a, gpt2_layer_acts *layers, gpt2_layer_acts *flayers,
                        gpt2_buf *bufs, int *n_out, store_plan *sp) {
    const int L = c->L;
    size_t BT = (size_t)B * T, C = (size_t)c->C, NH = (size_t)c->NH, f = sizeof(float);
    const size_t sizes[] = {BT * C * f, BT * 3 * C * f, BT * 4 * C * f, BT * f,
                            (size_t)B * NH * T * T * f, (size_t)B * NH * T * f};
    const int N = segment_len(o);
    int n = 0;
#define BUF(p, nm, lay, nbytes, t0, t1) \
    bufs[n++] = (gpt2_buf){(void **)&(p), nm, lay, nbytes, t0, t1, 0}
    BUF(a->inputs, "inputs", -1, BT * 4, 0, TP_ENC_B(L));
    /* vc > 0 (chunked embeddings, embed.c): a row-chunked head's logits are (rows, vc), and the
     * targets, lnf, lse and the logits live on to the encoder's backward (wte's deferred update) */
    const int t_head = vc ? TP_ENC_B(L) : TP_HEAD_B(L);
    BUF(a->targets, "targets", -1, BT * 4, 0, t_head);
    BUF(a->encoded, "encoded", -1, BT * C * f, 0, TP_BLOCK_B(L, 0));
    for (int l = 0; l < L; l++) {
        int tf = TP_BLOCK_F(l), tb = TP_BLOCK_B(L, l);
        /* the block's output is the next block's input (read by its forward and its ln1
         * backward) or lnf's */
        int next_b = l + 1 < L ? TP_BLOCK_B(L, l + 1) : TP_HEAD_B(L);
        int t_re = N ? TP_BLOCK_B(L, segment_end(l, N, L)) : tb; /* when it is recomputed */
        for (int i = 0; i < N_FIELDS; i++) {
            const char *nm = k_fields[i].name;
            int is_res3 = !strcmp(nm, "res3");
            if (!strcmp(nm, o->attention == HPT_ATTN_FLASH ? "att" : "att_lse")) continue;
            size_t bytes = sizes[k_fields[i].size];
            if (!dropped(o, L, l, nm) && stored(o, nm)) {
                /* forward writes a transient buffer, copied out at the end of the block's
                 * forward; copied back at tb - 1 (the next block's backward or the head's)
                 * into the buffer the backward reads */
                size_t idx = (size_t)l * N_FIELDS + (size_t)i, w = row_width(c, T, k_fields[i].size);
                size_t sb = coded_bytes(o->compress, bytes / (w * f), w);
                sp->sbytes[idx] = sb;
                sp->max_store = sb > sp->max_store ? sb : sp->max_store;
                BUF(*field_of(&flayers[l], i), nm, l, bytes, tf, tf);
                if (o->offload == HPT_OFFLOAD_NONE) {
                    BUF(sp->astore[idx], o->compress == HPT_COMPRESS_INT8 ? "int8 store" : "bf16 store",
                        l, sb, tf, tb - 1);
                } else {
                    sp->soff[idx] = sp->off_bytes;
                    sp->off_bytes += (sb + 63) & ~(size_t)63;
                }
                BUF(*field_of(&layers[l], i), nm, l, bytes, tb - 1, tb);
            } else if (!dropped(o, L, l, nm)) {
                BUF(*field_of(&layers[l], i), nm, l, bytes, tf, is_res3 ? next_b : tb);
            } else {
                BUF(*field_of(&flayers[l], i), nm, l, bytes, tf, is_res3 ? tf + 1 : tf);
                BUF(*field_of(&layers[l], i), nm, l, bytes, t_re, is_res3 ? next_b : tb);
            }
        }
    }
    BUF(a->lnf, "lnf", -1, BT * C * f, TP_HEAD_F(L), t_head);
    BUF(a->lnf_mean, "lnf_mean", -1, BT * f, TP_HEAD_F(L), TP_HEAD_B(L));
    BUF(a->lnf_rstd, "lnf_rstd", -1, BT * f, TP_HEAD_F(L), TP_HEAD_B(L));
    size_t head_rows = o->head_chunk > 0 && (size_t)o->head_chunk < BT ? (size_t)o->head_chunk : BT;
    size_t lw = vc && head_rows < BT ? (size_t)vc : (size_t)c->Vp; /* embed.c: (rows, vc) */
    BUF(a->logits, "logits", -1, head_rows * lw * f, TP_HEAD_F(L), t_head);
    BUF(a->lse, "lse", -1, BT * f, TP_HEAD_F(L), t_head);
    BUF(a->losses, "losses", -1, BT * f, TP_HEAD_F(L), TP_HEAD_F(L));
    BUF(a->dres, "dres", -1, BT * C * f, TP_HEAD_B(L), TP_ENC_B(L));
    BUF(a->dsmall, "dsmall", -1, BT * C * f, TP_HEAD_B(L), TP_BLOCK_B(L, 0));
    BUF(a->dbig, "dbig", -1, BT * 4 * C * f, TP_BLOCK_B(L, L - 1), TP_BLOCK_B(L, 0));
    /* plain: one row of dP per (b, h); flash: D = rowsum(dO * O) per (b, h) */
    BUF(a->attscr, "attscr", -1, (size_t)B * NH * T * f, TP_BLOCK_B(L, L - 1), TP_BLOCK_B(L, 0));
#undef BUF
    *n_out = n;
    hpt_arena_buf *ab = malloc((size_t)n * sizeof *ab);
    size_t size = 0;
    if (ab) {
        for (int i = 0; i < n; i++) ab[i] = (hpt_arena_buf){bufs[i].bytes, bufs[i].first, bufs[i].last, 0};
        size = hpt_arena_plan(ab, n);
        for (int i = 0; i < n; i++) bufs[i].offset = ab[i].offset;
        free(ab);
    } else { /* no room to plan: end to end */
        for (int i = 0; i < n; i++) {
            bufs[i].offset = size;
            size += (bufs[i].bytes + 63) & ~(size_t)63;
        }
    }
    return size;
}

hpt_gpt2_act_opts hpt_gpt2_act_defaults(void) {
    hpt_gpt2_act_opts o = {HPT_ATTN_FLASH, HPT_RECOMPUTE_NONE, 1, HPT_OFFLOAD_NONE,
                           HPT_COMPRESS_NONE, 0};
    return o;
}

static hpt_status check_act_opts(const hpt_gpt2_act_opts *o) {
    if (o->head_chunk < 0)
        return hpt_fail(HPT_ERR_INVALID, "head chunk %d must be >= 0 (0: all logits)", o->head_chunk);
    if (o->attention != HPT_ATTN_FLASH && o->attention != HPT_ATTN_PLAIN)
        return hpt_fail(HPT_ERR_INVALID, "unknown attention kind %d", (int)o->attention);
    if ((unsigned)o->recompute > HPT_RECOMPUTE_FULL)
        return hpt_fail(HPT_ERR_INVALID, "unknown recompute policy %d", (int)o->recompute);
    if (o->recompute == HPT_RECOMPUTE_EVERY && o->every < 1)
        return hpt_fail(HPT_ERR_INVALID, "recompute every:%d: N must be >= 1", o->every);
    if ((unsigned)o->offload > HPT_OFFLOAD_DISK)
        return hpt_fail(HPT_ERR_INVALID, "unknown activation offload %d", (int)o->offload);
    if ((unsigned)o->compress > HPT_COMPRESS_BF16)
        return hpt_fail(HPT_ERR_INVALID, "unknown activation compression %d", (int)o->compress);
    if ((o->offload != HPT_OFFLOAD_NONE || o->compress != HPT_COMPRESS_NONE) && segment_len(o))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "activation offload and compression work with "
                        "recompute none or selective, not every:N or full");
    return HPT_OK;
}

hpt_status hpt_act_offload_parse(const char *text, hpt_gpt2_act_opts *o) {
    if (!strcmp(text, "none")) o->offload = HPT_OFFLOAD_NONE;
    else if (!strcmp(text, "host")) o->offload = HPT_OFFLOAD_HOST;
    else if (!strcmp(text, "disk")) o->offload = HPT_OFFLOAD_DISK;
    else return hpt_fail(HPT_ERR_INVALID, "act-offload '%s': expected none, host or disk", text);
    return HPT_OK;
}

hpt_status hpt_act_compress_parse(const char *text, hpt_gpt2_act_opts *o) {
    if (!strcmp(text, "none")) o->compress = HPT_COMPRESS_NONE;
    else if (!strcmp(text, "int8")) o->compress = HPT_COMPRESS_INT8;
    else if (!strcmp(text, "bf16")) o->compress = HPT_COMPRESS_BF16;
    else return hpt_fail(HPT_ERR_INVALID, "act-compress '%s': expected none, int8 or bf16", text);
    return HPT_OK;
}

const char *hpt_act_offload_name(hpt_act_offload x) {
    return x == HPT_OFFLOAD_HOST ? "host" : x == HPT_OFFLOAD_DISK ? "disk" : "none";
}

const char *hpt_act_compress_name(hpt_act_compress x) {
    return x == HPT_COMPRESS_INT8 ? "int8" : x == HPT_COMPRESS_BF16 ? "bf16" : "none";
}

hpt_status hpt_attention_parse(const char *text, hpt_gpt2_act_opts *o) {
    if (!strcmp(text, "flash")) o->attention = HPT_ATTN_FLASH;
    else if (!strcmp(text, "plain")) o->attention = HPT_ATTN_PLAIN;
    else return hpt_fail(HPT_ERR_INVALID, "attention '%s': expected flash or plain", text);
    return HPT_OK;
}

hpt_status hpt_recompute_parse(const char *text, hpt_gpt2_act_opts *o) {
    if (!strcmp(text, "none")) o->recompute = HPT_RECOMPUTE_NONE;
    else if (!strcmp(text, "selective")) o->recompute = HPT_RECOMPUTE_SELECTIVE;
    else if (!strcmp(text, "full")) o->recompute = HPT_RECOMPUTE_FULL;
    else if (!strncmp(text, "every:", 6)) {
        char *end;
        long n = strtol(text + 6, &end, 10);
        if (end == text + 6 || *end || n < 1 || n > 1000000)
            return hpt_fail(HPT_ERR_INVALID, "recompute '%s': N of every:N must be an integer >= 1", text);
        o->recompute = HPT_RECOMPUTE_EVERY;
        o->every = (int)n;
    } else {
        return hpt_fail(HPT_ERR_INVALID, "recompute '%s': expected none, selective, every:N or full", text);
    }
    return HPT_OK;
}

const char *hpt_attention_name(hpt_attention a) { return a == HPT_ATTN_PLAIN ? "plain" : "flash"; }

const char *hpt_recompute_name(const hpt_gpt2_act_opts *o, char *buf, size_t n) {
    switch (o->recompute) {
    case HPT_RECOMPUTE_SELECTIVE: snprintf(buf, n, "selective"); break;
    case HPT_RECOMPUTE_EVERY: snprintf(buf, n, "every:%d", o->every); break;
    case HPT_RECOMPUTE_FULL: snprintf(buf, n, "full"); break;
    default: snprintf(buf, n, "none"); break;
    }
    return buf;
}

hpt_status hpt_gpt2_set_act_opts(hpt_gpt2 *m, const hpt_gpt2_act_opts *o) {
    HPT_CHECK(check_act_opts(o));
    hpt_gpt2_free_activations(m);
    m->act = *o;
    return HPT_OK;
}

hpt_gpt2_act_opts hpt_gpt2_get_act_opts(const hpt_gpt2 *m) { return m->act; }

/* The plan's bytes per tier (see hpt_gpt2_act_tier_bytes); HPT_ERR_OOM when it cannot plan. */
static hpt_status plan_tiers(const hpt_gpt2_config *cfg, int B, int T, const hpt_gpt2_act_opts *o,
                             int vc, uint64_t out[HPT_TIER_COUNT]) {
    for (int t = 0; t < HPT_TIER_COUNT; t++) out[t] = 0;
    HPT_CHECK(check_act_opts(o));
    gpt2_acts a;
    size_t nf = (size_t)cfg->L * N_FIELDS;
    gpt2_layer_acts *layers = calloc((size_t)cfg->L, sizeof *layers);
    gpt2_layer_acts *flayers = calloc((size_t)cfg->L, sizeof *flayers);
    gpt2_buf *bufs = calloc((size_t)n_bufs_for(cfg), sizeof *bufs);
    store_plan sp = {calloc(nf, sizeof(void *)), calloc(nf, sizeof(size_t)),
                     calloc(nf, sizeof(size_t)), 0, 0};
    hpt_status s = HPT_ERR_OOM;
    int n;
    if (layers && flayers && bufs && sp.astore && sp.soff && sp.sbytes) {
        out[HPT_TIER_DEVICE] = plan_acts(cfg, o, vc, B, T, &a, layers, flayers, bufs, &n, &sp);
        if (o->offload == HPT_OFFLOAD_HOST) out[HPT_TIER_HOST] = sp.off_bytes;
        if (o->offload == HPT_OFFLOAD_DISK) {
            out[HPT_TIER_DISK] = sp.off_bytes;
            if (o->compress != HPT_COMPRESS_NONE) out[HPT_TIER_HOST] = sp.max_store;
        }
        s = HPT_OK;
    }
    free(layers);
    free(flayers);
    free(bufs);
    free(sp.astore);
    free(sp.soff);
    free(sp.sbytes);
    return s == HPT_OK ? s : hpt_fail(s, "no memory to plan the activations");
}

hpt_status hpt_gpt2_act_tier_bytes(const hpt_gpt2_config *cfg, int B, int T,
                                   const hpt_gpt2_act_opts *o, uint64_t out[HPT_TIER_COUNT]) {
    hpt_gpt2_act_opts d = hpt_gpt2_act_defaults();
    return plan_tiers(cfg, B, T, o ? o : &d, 0, out);
}

hpt_status gpt2_act_tier_bytes_vc(const hpt_gpt2_config *cfg, int B, int T,
                                  const hpt_gpt2_act_opts *o, int vc, uint64_t out[HPT_TIER_COUNT]) {
    return plan_tiers(cfg, B, T, o, vc, out);
}

size_t hpt_gpt2_activation_bytes(const hpt_gpt2_config *cfg, int B, int T,
                                 const hpt_gpt2_act_opts *o) {
    uint64_t t[HPT_TIER_COUNT];
    if (hpt_gpt2_act_tier_bytes(cfg, B, T, o, t) != HPT_OK) return 0;
    return (size_t)t[HPT_TIER_DEVICE];
}

/* Moves the step to time point t (-1: outside a step), recording which arena buffers die and
 * which are born, for the profiler. */
static void enter_time(hpt_gpt2 *m, int t) {
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < m->n_bufs; i++) {
            const gpt2_buf *b = &m->bufs[i];
            int was = m->t_now >= 0 && b->first <= m->t_now && m->t_now <= b->last;
            int now = t >= 0 && b->first <= t && t <= b->last;
            if (pass == 0 && was && !now) hpt_mem_arena_event(m->mem, HPT_CAT_ACTS, b->bytes, 0, b->name);
            if (pass == 1 && !was && now) hpt_mem_arena_event(m->mem, HPT_CAT_ACTS, b->bytes, 1, b->name);
        }
    m->t_now = t;
}

static hpt_status ensure_acts(hpt_gpt2 *m, int B, int T) {
    if (m->act_mem && m->aB == B && m->aT == T) return HPT_OK;
    if (m->act_mem) enter_time(m, -1);
    if (!m->layers) {
        m->layers = calloc((size_t)m->cfg.L, sizeof *m->layers);
        m->flayers = calloc((size_t)m->cfg.L, sizeof *m->flayers);
        m->bufs = calloc((size_t)n_bufs_for(&m->cfg), sizeof *m->bufs);
        size_t nf = (size_t)m->cfg.L * N_FIELDS;
        m->astore = calloc(nf, sizeof *m->astore);
        m->soff = calloc(nf, sizeof *m->soff);
        m->sbytes = calloc(nf, sizeof *m->sbytes);
        if (!m->layers || !m->flayers || !m->bufs || !m->astore || !m->soff || !m->sbytes)
            return hpt_fail(HPT_ERR_OOM, "activation plan");
    }
    size_t nf = (size_t)m->cfg.L * N_FIELDS;
    memset(m->astore, 0, nf * sizeof *m->astore);
    memset(m->soff, 0, nf * sizeof *m->soff);
    memset(m->sbytes, 0, nf * sizeof *m->sbytes);
    store_plan sp = {m->astore, m->soff, m->sbytes, 0, 0};
    m->a.layer = m->layers;
    memset(m->layers, 0, (size_t)m->cfg.L * sizeof *m->layers);
    memset(m->flayers, 0, (size_t)m->cfg.L * sizeof *m->flayers);
    size_t need = plan_acts(&m->cfg, &m->act, m->emb != HPT_EMB_FULL ? m->Vc : 0, B, T, &m->a,
                            m->layers, m->flayers, m->bufs, &m->n_bufs, &sp);
    if (!m->act_mem || need > m->act_bytes) {
        hpt_mem_free(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, m->act_mem, m->act_bytes);
        m->act_mem = NULL;
        m->act_bytes = 0;
        void *p;
        hpt_mem_set_name(m->mem, "activation arena");
        hpt_status s = hpt_mem_alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, need, &p);
        if (s != HPT_OK) {
            m->aB = m->aT = 0;
            return hpt_fail_ctx(s, "activations for B=%d T=%d", B, T);
        }
        m->act_mem = p;
        m->act_bytes = need;
    }
    /* the offload tier: grown like the arena, kept while the plan fits */
    size_t host_need = m->act.offload == HPT_OFFLOAD_HOST ? sp.off_bytes : 0;
    size_t disk_need = m->act.offload == HPT_OFFLOAD_DISK ? sp.off_bytes : 0;
    size_t stage_need = disk_need && m->act.compress != HPT_COMPRESS_NONE ? sp.max_store : 0;
    if (host_need > m->host_bytes || disk_need > m->disk_bytes || stage_need > m->staging_bytes) {
        free_stores(m);
        hpt_status s = HPT_OK;
        if (host_need) {
            hpt_mem_set_name(m->mem, "offloaded activations");
            s = hpt_mem_alloc(m->mem, HPT_TIER_HOST, HPT_CAT_ACTS, host_need, (void **)&m->host_store);
            if (s == HPT_OK) m->host_bytes = host_need;
        }
        if (s == HPT_OK && disk_need) {
            s = hpt_mem_disk_alloc(m->mem, HPT_CAT_ACTS, disk_need, &m->disk);
            if (s == HPT_OK) m->disk_bytes = disk_need;
            else m->disk.fd = -1;
        }
        if (s == HPT_OK && stage_need) {
            hpt_mem_set_name(m->mem, "int8 activation staging");
            s = hpt_mem_alloc(m->mem, HPT_TIER_HOST, HPT_CAT_ACTS, stage_need, (void **)&m->staging);
            if (s == HPT_OK) m->staging_bytes = stage_need;
        }
        if (s != HPT_OK) {
            free_stores(m);
            m->aB = m->aT = 0;
            return hpt_fail_ctx(s, "offloaded activations for B=%d T=%d", B, T);
        }
    }
    for (int i = 0; i < m->n_bufs; i++) *m->bufs[i].ptr = (char *)m->act_mem + m->bufs[i].offset;
    /* a kept field: the forward writes the buffer the backward reads */
    for (int l = 0; l < m->cfg.L; l++)
        for (int i = 0; i < N_FIELDS; i++)
            if (!*field_of(&m->flayers[l], i)) *field_of(&m->flayers[l], i) = *field_of(&m->layers[l], i);
    m->aB = B;
    m->aT = T;
    m->t_now = -1;
    return HPT_OK;
}

/* The forward of block l on (m->B, m->T): reads residual (B,T,C), writes la's buffers; the
 * block's output res3 only when with_res3 (a recomputation skips it where it is kept). */
static void block_forward(hpt_gpt2 *m, const gpt2_block *p, gpt2_layer_acts *la,
                          const float *residual, int with_res3) {
    const int B = m->B, T = m->T, C = m->cfg.C, NH = m->cfg.NH;
    const size_t BT = (size_t)B * T;
    k_layernorm_forward(la->ln1, la->ln1_mean, la->ln1_rstd, residual, p->ln1w, p->ln1b,
                        (int64_t)BT, C);
    k_matmul_forward(la->qkv, la->ln1, p->qkvw, p->qkvb, (int64_t)BT, C, 3 * C, 0);
    if (m->act.attention == HPT_ATTN_FLASH)
        k_flash_attention_forward(la->atty, la->att_lse, la->qkv, B, T, C, NH);
    else
        k_attention_forward(la->atty, la->att, la->qkv, B, T, C, NH);
    /* res2 = residual + atty @ attprojw^T + attprojb */
    memcpy(la->res2, residual, BT * C * sizeof(float));
    k_matmul_forward(la->res2, la->atty, p->attprojw, p->attprojb, (int64_t)BT, C, C, 1);
    k_layernorm_forward(la->ln2, la->ln2_mean, la->ln2_rstd, la->res2, p->ln2w, p->ln2b,
                        (int64_t)BT, C);
    k_matmul_forward(la->fch, la->ln2, p->fcw, p->fcb, (int64_t)BT, C, 4 * C, 0);
    k_gelu_forward(la->fch_gelu, la->fch, (int64_t)BT * 4 * C);
    if (!with_res3) return;
    /* res3 = res2 + fch_gelu @ fcprojw^T + fcprojb */
    memcpy(la->res3, la->res2, BT * C * sizeof(float));
    k_matmul_forward(la->res3, la->fch_gelu, p->fcprojw, p->fcprojb, (int64_t)BT, 4 * C, C, 1);
}

/* At the start of block l's backward: rebuilds what the policy dropped, with the kernels and
 * inputs of the forward, so the bits are the forward's. Acquires (and releases) each block whose
 * forward it reruns. */
static hpt_status recompute_block(hpt_gpt2 *m, int l) {
    const int B = m->B, T = m->T, L = m->cfg.L, C = m->cfg.C, NH = m->cfg.NH;
    const size_t BT = (size_t)B * T;
    gpt2_acts *a = &m->a;
    const int N = segment_len(&m->act);
    if (N) {
        /* every:N / full: at the segment's last block, rerun its forward from the kept input */
        if (l != segment_end(l, N, L)) return HPT_OK;
        for (int j = (l / N) * N; j <= l; j++) {
            gpt2_block bj;
            HPT_CHECK(block_acquire(m, j, &bj));
            block_forward(m, &bj, &a->layer[j], j == 0 ? a->encoded : a->layer[j - 1].res3, j < l);
            block_release(m, j);
        }
    } else if (m->act.recompute == HPT_RECOMPUTE_SELECTIVE) {
        gpt2_block pb;
        HPT_CHECK(block_acquire(m, l, &pb));
        const gpt2_block *p = &pb;
        gpt2_layer_acts *la = &a->layer[l];
        const float *residual = l == 0 ? a->encoded : a->layer[l - 1].res3;
        k_layernorm_apply(la->ln1, residual, p->ln1w, p->ln1b, la->ln1_mean, la->ln1_rstd,
                          (int64_t)BT, C);
        if (m->act.attention == HPT_ATTN_PLAIN) /* rewrites atty with the same bits */
            k_attention_forward(la->atty, la->att, la->qkv, B, T, C, NH);
        k_layernorm_apply(la->ln2, la->res2, p->ln2w, p->ln2b, la->ln2_mean, la->ln2_rstd,
                          (int64_t)BT, C);
        k_gelu_forward(la->fch_gelu, la->fch, (int64_t)BT * 4 * C);
        block_release(m, l);
    }
    return HPT_OK;
}

/* Rows and row width of field i at the current (B, T). */
static void field_shape(const hpt_gpt2 *m, int i, size_t *rows, size_t *w) {
    const size_t BT = (size_t)m->B * m->T;
    *w = row_width(&m->cfg, m->T, k_fields[i].size);
    *rows = k_fields[i].size == SZ_ATT ? (size_t)m->B * m->cfg.NH * m->T : BT;
}

/* At the end of block l's forward: copies (or quantises) its stored fields out of the
 * transient buffers the forward wrote. */
static hpt_status offload_block(hpt_gpt2 *m, int l) {
    for (int i = 0; i < N_FIELDS; i++) {
        size_t idx = (size_t)l * N_FIELDS + (size_t)i, sb = m->sbytes[idx], rows, w;
        if (!sb) continue;
        field_shape(m, i, &rows, &w);
        const float *src = *field_of(&m->flayers[l], i);
        const hpt_act_compress k = m->act.compress;
        if (m->act.offload == HPT_OFFLOAD_NONE) {
            code_store(k, m->astore[idx], src, rows, w);
        } else if (m->act.offload == HPT_OFFLOAD_HOST) {
            char *dst = m->host_store + m->soff[idx];
            if (k != HPT_COMPRESS_NONE) code_store(k, dst, src, rows, w);
            else memcpy(dst, src, sb);
            hpt_mem_transfer(m->mem, HPT_TIER_DEVICE, HPT_TIER_HOST, HPT_CAT_ACTS, sb);
        } else if (k != HPT_COMPRESS_NONE) {
            code_store(k, m->staging, src, rows, w);
            HPT_CHECK(hpt_mem_disk_write(m->mem, &m->disk, m->soff[idx], m->staging, sb,
                                         HPT_TIER_HOST, HPT_CAT_ACTS));
        } else {
            HPT_CHECK(hpt_mem_disk_write(m->mem, &m->disk, m->soff[idx], src, sb,
                                         HPT_TIER_DEVICE, HPT_CAT_ACTS));
        }
    }
    return HPT_OK;
}

/* At the time point before block l's backward: brings its stored fields back into the
 * buffers its backward reads. serial 1: called on the prefetch thread (host offload only:
 * no OpenMP, no event recording, which the main thread does at prefetch_wait). */
static hpt_status prefetch_block(hpt_gpt2 *m, int l, int serial) {
    for (int i = 0; i < N_FIELDS; i++) {
        size_t idx = (size_t)l * N_FIELDS + (size_t)i, sb = m->sbytes[idx], rows, w;
        if (!sb) continue;
        field_shape(m, i, &rows, &w);
        float *dst = *field_of(&m->layers[l], i);
        const hpt_act_compress k = m->act.compress;
        if (m->act.offload == HPT_OFFLOAD_NONE) {
            code_load(k, dst, m->astore[idx], rows, w, 1);
        } else if (m->act.offload == HPT_OFFLOAD_HOST) {
            const char *src = m->host_store + m->soff[idx];
            if (k != HPT_COMPRESS_NONE) code_load(k, dst, src, rows, w, !serial);
            else memcpy(dst, src, sb);
            if (!serial) hpt_mem_transfer(m->mem, HPT_TIER_HOST, HPT_TIER_DEVICE, HPT_CAT_ACTS, sb);
        } else if (k != HPT_COMPRESS_NONE) {
            HPT_CHECK(hpt_mem_disk_read(m->mem, &m->disk, m->soff[idx], m->staging, sb,
                                        HPT_TIER_HOST, HPT_CAT_ACTS));
            code_load(k, dst, m->staging, rows, w, 1);
        } else {
            HPT_CHECK(hpt_mem_disk_read(m->mem, &m->disk, m->soff[idx], dst, sb,
                                        HPT_TIER_DEVICE, HPT_CAT_ACTS));
        }
    }
    return HPT_OK;
}

/* The asynchronous prefetch (host offload): a thread copies block l's fields back while the
 * main thread runs the backward of block l + 1 (or the head). Safe because the buffers it
 * writes are born at that time point in the plan (no other buffer live then overlaps them)
 * and it only reads the host store, which nothing writes during backward. */
static void *prefetch_thread(void *arg) {
    hpt_gpt2 *m = arg;
    prefetch_block(m, m->pf_layer, 1); /* host copies cannot fail */
    return NULL;
}

static hpt_status prefetch_start(hpt_gpt2 *m, int l) {
    if (m->act.offload != HPT_OFFLOAD_HOST) return prefetch_block(m, l, 0);
    m->pf_layer = l;
    if (pthread_create(&m->pf_thread, NULL, prefetch_thread, m) != 0)
        return prefetch_block(m, l, 0); /* no thread: synchronously */
    m->pf_active = 1;
    return HPT_OK;
}

/* Waits for the prefetch thread and records its transfers. */
static void prefetch_wait(hpt_gpt2 *m) {
    if (!m->pf_active) return;
    pthread_join(m->pf_thread, NULL);
    m->pf_active = 0;
    for (int i = 0; i < N_FIELDS; i++) {
        size_t sb = m->sbytes[(size_t)m->pf_layer * N_FIELDS + (size_t)i];
        if (sb) hpt_mem_transfer(m->mem, HPT_TIER_HOST, HPT_TIER_DEVICE, HPT_CAT_ACTS, sb);
    }
}

hpt_status hpt_gpt2_forward(hpt_gpt2 *m, const int32_t *inputs, const int32_t *targets,
                            int B, int T, float *loss_out) {
    const hpt_gpt2_config *c = &m->cfg;
    if (B < 1 || T < 1) return hpt_fail(HPT_ERR_INVALID, "batch %d and sequence %d must be >= 1", B, T);
    if (T > c->maxT)
        return hpt_fail(HPT_ERR_SHAPE, "sequence length %d exceeds the model's maxT %d", T, c->maxT);
    size_t BT = (size_t)B * T;
    for (size_t i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= c->V)
            return hpt_fail(HPT_ERR_INVALID, "input token %d at position %zu is outside [0, %d)",
                            inputs[i], i, c->V);
        if (targets && (targets[i] < 0 || targets[i] >= c->V))
            return hpt_fail(HPT_ERR_INVALID, "target token %d at position %zu is outside [0, %d)",
                            targets[i], i, c->V);
    }
    prefetch_wait(m);
    HPT_CHECK(ensure_acts(m, B, T));
    m->B = B;
    m->T = T;
    const int L = c->L, C = c->C;
    gpt2_acts *a = &m->a;
    const gpt2_tensors *p = &m->p;
    hpt_mem_set_layer(m->mem, -1);
    enter_time(m, 0);
    memcpy(a->inputs, inputs, BT * sizeof(int32_t));
    m->has_targets = targets != NULL;
    if (targets) memcpy(a->targets, targets, BT * sizeof(int32_t));
    if (m->emb != HPT_EMB_FULL) emb_encoder_forward(m);
    else k_encoder_forward(a->encoded, a->inputs, p->wte, p->wpe, B, T, C);
    hpt_status s = m->eng ? eng_begin_pass(m->eng, 1) : HPT_OK;
    for (int l = 0; l < L && s == HPT_OK; l++) {
        hpt_mem_set_layer(m->mem, l);
        enter_time(m, TP_BLOCK_F(l));
        gpt2_block bp;
        s = block_acquire(m, l, &bp);
        if (s != HPT_OK) {
            s = hpt_fail_ctx(s, "bringing in block %d's parameters", l);
            break;
        }
        block_forward(m, &bp, &m->flayers[l], l == 0 ? a->encoded : m->flayers[l - 1].res3, 1);
        block_release(m, l);
        s = offload_block(m, l);
        if (s != HPT_OK) s = hpt_fail_ctx(s, "offloading block %d's activations", l);
    }
    if (s != HPT_OK) {
        m->has_targets = 0;
        hpt_mem_set_layer(m->mem, -1);
        return s;
    }
    hpt_mem_set_layer(m->mem, -1);
    enter_time(m, TP_HEAD_F(L));
    k_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->layer[L - 1].res3, p->lnfw, p->lnfb,
                        (int64_t)BT, C);
    m->loss = -1.0f;
    if (m->emb != HPT_EMB_FULL) {
        if (!targets)
            return hpt_fail(HPT_ERR_UNSUPPORTED, "--embeddings %s computes the logits a vocabulary "
                            "chunk at a time: a forward without targets needs full embeddings",
                            hpt_embeddings_name((hpt_embeddings)m->emb));
        emb_head_forward(m, head_rows(m));
    } else if (head_rows(m) < BT) {
        if (!targets)
            return hpt_fail(HPT_ERR_UNSUPPORTED, "a chunked head (head_chunk %d) computes no full "
                            "logits: a forward without targets needs head_chunk 0", m->act.head_chunk);
        /* the loss chunk by chunk; the logits of one chunk at a time, (rows, Vp) */
        for (size_t r0 = 0; r0 < BT; r0 += head_rows(m)) {
            size_t n = HPT_MIN(head_rows(m), BT - r0);
            k_matmul_forward(a->logits, a->lnf + r0 * C, p->wte, NULL, (int64_t)n, C, c->Vp, 0);
            (void)k_crossentropy_forward(a->losses + r0, a->lse + r0, a->logits, a->targets + r0,
                                         (int64_t)n, c->V, c->Vp);
        }
        double total = 0.0; /* the same sum, in the same order, as the unchunked head's */
        for (size_t i = 0; i < BT; i++) total += (double)a->losses[i];
        m->loss = (float)(total / (double)BT);
    } else {
        /* logits (BT, Vp) = lnf @ wte^T (tied head, no bias) */
        k_matmul_forward(a->logits, a->lnf, p->wte, NULL, (int64_t)BT, C, c->Vp, 0);
        if (targets)
            m->loss = k_crossentropy_forward(a->losses, a->lse, a->logits, a->targets,
                                             (int64_t)BT, c->V, c->Vp);
    }
    if (loss_out) *loss_out = m->loss;
    return HPT_OK;
}

hpt_status hpt_gpt2_backward(hpt_gpt2 *m) {
    if (!m->has_targets)
        return hpt_fail(HPT_ERR_INVALID, "backward needs a forward with targets first");
    if (!m->grads)
        return hpt_fail(HPT_ERR_INVALID, "backward needs gradients (released by hpt_gpt2_release_grads)");
    const hpt_gpt2_config *c = &m->cfg;
    const int B = m->B, T = m->T, L = c->L, C = c->C, NH = c->NH;
    const size_t BT = (size_t)B * T;
    gpt2_acts *a = &m->a;
    const gpt2_tensors *p = &m->p;
    const gpt2_tensors *g = &m->g;
    m->has_targets = 0; /* logits become dlogits: one backward per forward */

    enter_time(m, TP_HEAD_B(L));
    HPT_CHECK(prefetch_start(m, L - 1));
    /* loss = mean_i (lse_i - logits[i, y_i]); logits = lnf @ wte^T:
     * dlnf = dlogits @ wte, dwte += dlogits^T @ lnf; chunk by chunk with a chunked head, whose
     * logits are recomputed first */
    if (m->emb != HPT_EMB_FULL) emb_head_backward(m, head_rows(m)); /* dlnf only (embed.c) */
    for (size_t r0 = 0; r0 < BT && m->emb == HPT_EMB_FULL; r0 += head_rows(m)) {
        size_t n = HPT_MIN(head_rows(m), BT - r0);
        if (n < BT)
            k_matmul_forward(a->logits, a->lnf + r0 * C, p->wte, NULL, (int64_t)n, C, c->Vp, 0);
        /* times the loss scale (a power of two: every gradient below is exactly S times) */
        k_crossentropy_backward(a->logits, a->lse + r0, a->targets + r0, (int64_t)n, c->V, c->Vp,
                                1.0f / (float)BT * m->loss_scale);
        k_matmul_backward(a->dsmall + r0 * C, g->wte, NULL, a->logits, a->lnf + r0 * C, p->wte,
                          (int64_t)n, C, c->Vp, 0);
    }
    /* lnf = layernorm(res3[L-1]) */
    memset(a->dres, 0, BT * C * sizeof(float));
    k_layernorm_backward(a->dres, g->lnfw, g->lnfb, a->dsmall, a->layer[L - 1].res3, p->lnfw,
                         a->lnf_mean, a->lnf_rstd, (int64_t)BT, C);
    hpt_status s = m->eng ? eng_begin_pass(m->eng, -1) : HPT_OK;
    for (int l = L - 1; l >= 0 && s == HPT_OK; l--) {
        hpt_mem_set_layer(m->mem, l);
        enter_time(m, TP_BLOCK_B(L, l));
        prefetch_wait(m); /* block l's fields */
        if (l > 0) {
            s = prefetch_start(m, l - 1);
            if (s != HPT_OK) {
                s = hpt_fail_ctx(s, "bringing back block %d's activations", l - 1);
                break;
            }
        }
        gpt2_block pb, gb;
        s = recompute_block(m, l);
        if (s == HPT_OK) s = block_acquire(m, l, &pb);
        if (s == HPT_OK && m->eng) {
            float *gbase;
            s = eng_grad_slot(m->eng, l, m->grads_live, &gbase);
            if (s == HPT_OK) block_packed(c, gbase, &gb);
        } else if (s == HPT_OK) {
            block_flat(c, g, l, &gb);
        }
        if (s != HPT_OK) {
            s = hpt_fail_ctx(s, "bringing in block %d's parameters", l);
            break;
        }
        const gpt2_block *bp = &pb, *bg = &gb;
        const float *residual = l == 0 ? a->encoded : a->layer[l - 1].res3;
        const gpt2_layer_acts *la = &a->layer[l];
        /* res3 = res2 + fch_gelu @ fcprojw^T + fcprojb; dres flows to res2 unchanged */
        k_matmul_backward(a->dbig, bg->fcprojw, bg->fcprojb, a->dres, la->fch_gelu, bp->fcprojw,
                          (int64_t)BT, 4 * C, C, 0);
        /* fch_gelu = gelu(fch) */
        k_gelu_backward(a->dbig, la->fch, a->dbig, (int64_t)BT * 4 * C);
        /* fch = ln2 @ fcw^T + fcb */
        k_matmul_backward(a->dsmall, bg->fcw, bg->fcb, a->dbig, la->ln2, bp->fcw, (int64_t)BT, C,
                          4 * C, 0);
        /* ln2 = layernorm(res2) */
        k_layernorm_backward(a->dres, bg->ln2w, bg->ln2b, a->dsmall, la->res2, bp->ln2w,
                             la->ln2_mean, la->ln2_rstd, (int64_t)BT, C);
        /* res2 = residual + atty @ attprojw^T + attprojb */
        k_matmul_backward(a->dsmall, bg->attprojw, bg->attprojb, a->dres, la->atty, bp->attprojw,
                          (int64_t)BT, C, C, 0);
        /* atty = attention(qkv) */
        if (m->act.attention == HPT_ATTN_FLASH)
            k_flash_attention_backward(a->dbig, a->attscr, a->dsmall, la->qkv, la->atty,
                                       la->att_lse, B, T, C, NH);
        else
            k_attention_backward(a->dbig, a->attscr, a->dsmall, la->qkv, la->att, B, T, C, NH);
        /* qkv = ln1 @ qkvw^T + qkvb */
        k_matmul_backward(a->dsmall, bg->qkvw, bg->qkvb, a->dbig, la->ln1, bp->qkvw, (int64_t)BT,
                          C, 3 * C, 0);
        /* ln1 = layernorm(residual) */
        k_layernorm_backward(a->dres, bg->ln1w, bg->ln1b, a->dsmall, residual, bp->ln1w,
                             la->ln1_mean, la->ln1_rstd, (int64_t)BT, C);
        if (m->fault_layer == l) { /* a test's injected gradient (hpt_trainer_inject_grad) */
            bg->ln1w[0] = m->fault_value;
            m->fault_layer = -1;
        }
        if (m->eng) {
            s = eng_grads_done(m->eng, l);
            if (s != HPT_OK) s = hpt_fail_ctx(s, "handing over block %d's gradients", l);
        }
        block_release(m, l);
    }
    hpt_mem_set_layer(m->mem, -1);
    if (s != HPT_OK) {
        prefetch_wait(m);
        enter_time(m, -1);
        return s;
    }
    enter_time(m, TP_ENC_B(L));
    /* encoded = wte[inputs] + wpe[t]; chunked embeddings: also the head's dwte, and wte's
     * update chunk by chunk (embed.c) */
    if (m->emb != HPT_EMB_FULL) emb_backward_end(m, head_rows(m));
    else k_encoder_backward(g->wte, g->wpe, a->dres, a->inputs, B, T, C);
    m->grads_live = 1;
    enter_time(m, -1);
    return HPT_OK;
}
