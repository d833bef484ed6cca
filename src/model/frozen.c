/* frozen.c: a LoRA run's frozen base (docs/lora.md): a block store (model/blocks.h) that the
 * model's runner reads like the offload engine's. Block l's slices lie back to back at
 * l * stride on its home (--base-home: a device buffer, a host buffer or a disk-tier block, the
 * stride then 4096-rounded): a matrix (OC, C) as fp32, bf16 (round to nearest even), int8 with
 * one fp32 scale per output row (the q8w codec) or QLoRA's NF4 (kernels/nf4.h), a vector in
 * fp32 (--base-weights); every codec is a backend op, so the store runs on any backend. A narrow
 * base keeps its embeddings and an untied head in bf16 (embed.c's HPT_EMB_BF16 without
 * gradient; on the host with an off-device home, read in place by the ops: a GPU reads the
 * pinned host tier over the bus). acquire(l) brings block l whole into a device staging buffer
 * when it is off the device (a copy; a disk read, through one pinned host block where device
 * memory is not host memory) and widens it into one fp32 slot (kept while the next acquire
 * names the same block); loading, initialisation and saving go through the slot, and off the
 * device rewrite a block whole. Nothing is written back in training; no gradients.
 * Invariants: a forward reads exactly the widened stored values (the bits of an fp32 model of
 * them); every byte is from hpt_mem (params) in the sizes model_frozen_bytes gives per tier. */
#include "core/core.h"
#include "model/blocks.h"
#include "model/gpt2_int.h"
#include "model/model.h"
#include "testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    hpt_block_store store;
    const hpt_backend *be;
    hpt_mem *mem;
    int kind;                       /* HPT_BASE_BF16, HPT_BASE_INT8 or HPT_BASE_NF4 */
    int L, n;                       /* blocks, slices per block */
    size_t sn[HPT_TABLE_MAX];       /* floats of slice s */
    size_t foff[HPT_TABLE_MAX];     /* floats: slice s in the fp32 slot */
    size_t boff[HPT_TABLE_MAX];     /* bytes: slice s in a block's storage */
    int64_t rows[HPT_TABLE_MAX];    /* a matrix slice's rows (OC); 0: a vector, kept fp32 */
    size_t block_bytes, slot_floats;
    hpt_tier home;                  /* the stored blocks' tier (--base-home) */
    size_t stride;                  /* bytes: block l at l * stride in the home */
    unsigned char *data;            /* (L * stride) params, a device or host home: the blocks */
    hpt_disk_ref disk;              /* (L * stride) params, disk home */
    unsigned char *stage;           /* (stride) device params: one stored block, off-device homes */
    unsigned char *hstage;          /* (stride) host params: a disk home's block on its way between
                                     * the disk and stage, where device memory is not host memory */
    unsigned char *written;         /* (L) whether block l was written to the home yet */
    int staged;                     /* the block in stage, -1: none */
    float *slot;                    /* (slot_floats) device params: one block widened */
    int held;                       /* the block in slot, -1: none */
} frozen;

/* One block's layout at cfg; returns its storage bytes, *slot its fp32 floats. */
static size_t layout(const hpt_model_config *cfg, int kind, frozen *f, size_t *slot) {
    hpt_tensor_table t;
    model_describe(cfg, &t);
    size_t bytes = 0, floats = 0;
    for (int s = 0; s < t.n_slices; s++) {
        const hpt_tensor_desc *d = &t.t[hpt_table_slice_tensor(&t, s)];
        size_t n = hpt_tensor_slice_numel(d, t.L);
        int64_t rows = d->is_matrix && d->ndim == 3 ? d->shape[1] : 0;
        if (f) {
            f->sn[s] = n;
            f->foff[s] = floats;
            f->boff[s] = bytes;
            f->rows[s] = rows;
        }
        floats += n;
        size_t b = !rows || kind == HPT_BASE_F32 ? 4 * n
                   : kind == HPT_BASE_BF16 ? 2 * n
                   : kind == HPT_BASE_NF4  ? hpt_nf4_bytes(n)
                                           : 4 * (size_t)rows + n;
        bytes += (b + 3) / 4 * 4; /* the next slice's fp32 parts 4-aligned */
    }
    if (f) f->n = t.n_slices;
    *slot = floats;
    return bytes;
}

/* The non-block tensors' storage (embed.c): wte (and an untied head; GPT-2's wpe) in bf16, one
 * (Vc, C) fp32 scratch that the lookup's and the head's rows are widened into, Vc rows at a time;
 * the final norm fp32. */
static _Thread_local int vocab_rows; /* hpt_frozen_vocab_chunk's, 0: embed.c's default */

void hpt_frozen_vocab_chunk(int rows) { vocab_rows = rows; }

static hpt_offload_opts nonblock_opts(int kind) {
    hpt_offload_opts o = hpt_offload_defaults(); /* an f32 base: fp32 embeddings, its bits */
    if (kind == HPT_BASE_F32) return o;
    o.embeddings = HPT_EMB_BF16;
    o.vocab_chunk = vocab_rows;
    return o;
}

/* The tier of a narrow base's bf16 embeddings and head: the host's when the blocks are off the
 * device (read in place on the CPU, a gather of rows and chunks into device buffers). */
static int emb_home(int kind, int home) {
    return kind != HPT_BASE_F32 && home != HPT_TIER_DEVICE ? HPT_TIER_HOST : HPT_TIER_DEVICE;
}

static size_t stride_of(size_t block, int home) {
    return home == HPT_TIER_DEVICE ? block : (block + 4095) / 4096 * 4096; /* whole pages */
}

/* Whether a disk home needs the pinned host block: the disk tier reads and writes host
 * memory, and a GPU's device memory is not (the CPU's is). */
static int disk_via_host(int home, int gpu) { return home == HPT_TIER_DISK && gpu; }

static _Thread_local int via_host_test; /* hpt_frozen_disk_via_host's (testing.h) */

void hpt_frozen_disk_via_host(int on) { via_host_test = on; }

void model_frozen_bytes(const hpt_model_config *cfg, int kind, int home, int gpu,
                        uint64_t out[HPT_TIER_COUNT]) {
    size_t slot;
    size_t block = layout(cfg, kind, NULL, &slot), stride = stride_of(block, home);
    hpt_offload_opts o = nonblock_opts(kind);
    uint64_t nb, unused;
    model_nonblock_bytes(cfg, &o, &nb, &unused);
    memset(out, 0, HPT_TIER_COUNT * sizeof out[0]);
    out[home] += (uint64_t)cfg->L * stride;
    out[HPT_TIER_DEVICE] += 4 * (uint64_t)slot + nb + (home != HPT_TIER_DEVICE ? stride : 0);
    out[HPT_TIER_HOST] += disk_via_host(home, gpu) ? stride : 0;
    uint64_t eh = emb_home(kind, home) != HPT_TIER_DEVICE ? model_emb_bf16_bytes(cfg) : 0;
    out[HPT_TIER_DEVICE] -= eh, out[HPT_TIER_HOST] += eh; /* the bf16 embeddings on the host */
}

int model_frozen_vocab_chunk(const hpt_model_config *cfg, int kind) {
    hpt_offload_opts o = nonblock_opts(kind);
    return model_vocab_chunk(cfg, &o);
}

/* Block l's storage on the device (*p): its home, or the staging buffer it is brought into. */
static hpt_status fetch(frozen *f, int l, unsigned char **p) {
    if (f->home == HPT_TIER_DEVICE) {
        *p = f->data + (size_t)l * f->stride;
        return HPT_OK;
    }
    if (f->staged != l && !f->written[l]) {
        f->be->memset(f->stage, 0, f->stride); /* never written: zeros, as a device home's */
    } else if (f->staged != l && f->home == HPT_TIER_HOST) {
        f->be->copy(f->stage, f->data + (size_t)l * f->stride, f->stride, HPT_COPY_H2D);
        hpt_mem_transfer(f->mem, HPT_TIER_HOST, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->stride);
    } else if (f->staged != l && f->hstage) { /* the disk into host memory, then the device */
        f->staged = -1;
        HPT_CHECK(hpt_mem_disk_read(f->mem, &f->disk, (uint64_t)l * f->stride, f->hstage,
                                    f->stride, HPT_TIER_HOST, HPT_CAT_PARAMS));
        f->be->copy(f->stage, f->hstage, f->stride, HPT_COPY_H2D);
        hpt_mem_transfer(f->mem, HPT_TIER_HOST, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->stride);
    } else if (f->staged != l) {
        f->staged = -1;
        HPT_CHECK(hpt_mem_disk_read(f->mem, &f->disk, (uint64_t)l * f->stride, f->stage, f->stride,
                                    HPT_TIER_DEVICE, HPT_CAT_PARAMS));
    }
    f->staged = l;
    *p = f->stage;
    return HPT_OK;
}

/* The staged block l, narrowed into, goes to its home whole. */
static hpt_status flush(frozen *f, int l) {
    if (f->home == HPT_TIER_DEVICE) return HPT_OK;
    f->written[l] = 1;
    if (f->home == HPT_TIER_HOST) {
        f->be->copy(f->data + (size_t)l * f->stride, f->stage, f->stride, HPT_COPY_D2H);
        hpt_mem_transfer(f->mem, HPT_TIER_DEVICE, HPT_TIER_HOST, HPT_CAT_PARAMS, f->stride);
        return HPT_OK;
    }
    if (f->hstage) { /* the device into host memory (the copy returns when it arrived), the disk */
        f->be->copy(f->hstage, f->stage, f->stride, HPT_COPY_D2H);
        hpt_mem_transfer(f->mem, HPT_TIER_DEVICE, HPT_TIER_HOST, HPT_CAT_PARAMS, f->stride);
        return hpt_mem_disk_write(f->mem, &f->disk, (uint64_t)l * f->stride, f->hstage, f->stride,
                                  HPT_TIER_HOST, HPT_CAT_PARAMS);
    }
    return hpt_mem_disk_write(f->mem, &f->disk, (uint64_t)l * f->stride, f->stage, f->stride,
                              HPT_TIER_DEVICE, HPT_CAT_PARAMS);
}

/* slice s of the block stored at b: from the fp32 values at x into the storage, or back */
static void narrow(frozen *f, unsigned char *b, int s, const float *x) {
    unsigned char *p = b + f->boff[s];
    if (!f->rows[s] || f->kind == HPT_BASE_F32) f->be->copy(p, x, f->sn[s] * 4, HPT_COPY_D2D);
    else if (f->kind == HPT_BASE_BF16) (void)f->be->bf16_narrow((uint16_t *)(void *)p, x, f->sn[s]);
    else if (f->kind == HPT_BASE_NF4) f->be->nf4_quantize(p, x, f->sn[s]);
    else f->be->q8w_quantize((int8_t *)(p + 4 * (size_t)f->rows[s]), (float *)(void *)p, x,
                             f->rows[s], (int64_t)(f->sn[s] / (size_t)f->rows[s]));
}

static void widen(frozen *f, const unsigned char *b, int s, float *x) {
    const unsigned char *p = b + f->boff[s];
    if (!f->rows[s] || f->kind == HPT_BASE_F32) f->be->copy(x, p, f->sn[s] * 4, HPT_COPY_D2D);
    else if (f->kind == HPT_BASE_BF16) f->be->bf16_widen(x, (const uint16_t *)(const void *)p, f->sn[s]);
    else if (f->kind == HPT_BASE_NF4) f->be->nf4_dequantize(x, p, f->sn[s]);
    else f->be->q8w_dequantize(x, (const int8_t *)(p + 4 * (size_t)f->rows[s]),
                               (const float *)(const void *)p, f->rows[s],
                               (int64_t)(f->sn[s] / (size_t)f->rows[s]));
}

static hpt_status begin_pass(void *ctx, int dir) {
    (void)ctx, (void)dir;
    return HPT_OK;
}

static hpt_status acquire(void *ctx, int l, float **p) {
    frozen *f = ctx;
    if (f->held != l) {
        unsigned char *b;
        f->held = -1;
        HPT_CHECK(fetch(f, l, &b));
        for (int s = 0; s < f->n; s++) widen(f, b, s, f->slot + f->foff[s]);
    }
    f->held = l;
    *p = f->slot;
    return HPT_OK;
}

static void release(void *ctx, int l) { (void)ctx, (void)l; }

static hpt_status grad_slot(void *ctx, int l, int accumulate, float **g) {
    (void)ctx, (void)accumulate, (void)g;
    return hpt_fail(HPT_ERR_UNSUPPORTED, "block %d of a frozen base (--base-weights) has no "
                    "gradients: only LoRA adapters train it", l);
}

static hpt_status grads_done(void *ctx, int l) {
    (void)ctx, (void)l;
    return HPT_OK;
}

static hpt_status grads_overflow(void *ctx, int *overflow) {
    (void)ctx, (void)overflow; /* no gradients here: the caller's finding stands */
    return HPT_OK;
}

static hpt_status only_params(int b) {
    return b == EB_P ? HPT_OK
                     : hpt_fail(HPT_ERR_UNSUPPORTED, "a frozen base keeps no gradients or "
                                "optimizer state");
}

static hpt_status gather(void *ctx, int b, int l, int i, hpt_block_emit_fn emit, void *ectx) {
    frozen *f = ctx;
    HPT_CHECK(only_params(b));
    f->held = -1;
    unsigned char *p;
    HPT_CHECK(fetch(f, l, &p));
    widen(f, p, i, f->slot + f->foff[i]);
    return emit(ectx, f->slot + f->foff[i], f->sn[i]);
}

static hpt_status scatter(void *ctx, int b, int l, int i, hpt_block_read_fn read, void *rctx) {
    frozen *f = ctx;
    HPT_CHECK(only_params(b));
    f->held = -1;
    HPT_CHECK(read(rctx, f->slot + f->foff[i], f->sn[i]));
    unsigned char *p;
    HPT_CHECK(fetch(f, l, &p)); /* the rest of the block kept */
    narrow(f, p, i, f->slot + f->foff[i]);
    return flush(f, l);
}

static hpt_status block_dest(void *ctx, int b, int l, float **dst, int *in_place) {
    frozen *f = ctx;
    (void)l;
    HPT_CHECK(only_params(b));
    f->held = -1;
    *dst = f->slot;
    *in_place = 0;
    return HPT_OK;
}

static hpt_status store_block(void *ctx, int b, int l, const float *src) {
    frozen *f = ctx;
    HPT_CHECK(only_params(b));
    f->held = -1;
    unsigned char *p = f->home == HPT_TIER_DEVICE ? f->data + (size_t)l * f->stride : f->stage;
    f->staged = f->home == HPT_TIER_DEVICE ? -1 : l; /* every slice written below */
    for (int s = 0; s < f->n; s++) narrow(f, p, s, src + f->foff[s]);
    return flush(f, l);
}

static void stats(void *ctx, hpt_offload_stats *out) {
    (void)ctx;
    memset(out, 0, sizeof *out);
}

static void free_store(void *ctx) {
    frozen *f = ctx;
    if (!f) return;
    if (f->home == HPT_TIER_DISK) hpt_mem_disk_free(f->mem, HPT_CAT_PARAMS, &f->disk);
    else f->be->free(f->mem, f->home, HPT_CAT_PARAMS, f->data, (size_t)f->L * f->stride);
    f->be->free(f->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->stage, f->stride);
    f->be->free(f->mem, HPT_TIER_HOST, HPT_CAT_PARAMS, f->hstage, f->stride);
    f->be->free(f->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->slot, f->slot_floats * 4);
    free(f->written);
    free(f);
}

hpt_status hpt_model_create_frozen_on(hpt_mem *mem, const hpt_model_config *cfg, int kind,
                                      int home, hpt_model **out) {
    static const char *const kinds[] = {"f32", "bf16", "int8", "nf4"};
    const hpt_backend *be = hpt_backend_of(mem);
    *out = NULL;
    if (kind < HPT_BASE_F32 || kind > HPT_BASE_NF4)
        return hpt_fail(HPT_ERR_INVALID, "base-weights: %d is not f32, bf16, int8 or nf4", kind);
    if (home < HPT_TIER_DEVICE || home > HPT_TIER_DISK)
        return hpt_fail(HPT_ERR_INVALID, "base-home: %d is not device, host or disk", home);
    hpt_offload_opts o = nonblock_opts(kind); /* the non-block tensors in the flat buffer */
    hpt_model *m;
    model_create_frozen_flag(1);
    model_create_emb_tier(emb_home(kind, home));
    hpt_status s = model_create_unbound(mem, cfg, &o, &m);
    model_create_emb_tier(HPT_TIER_DEVICE);
    model_create_frozen_flag(0);
    HPT_CHECK(s);
    frozen *f = calloc(1, sizeof *f);
    if (!f) {
        hpt_model_free(m);
        return hpt_fail(HPT_ERR_OOM, "cannot allocate the frozen base's store");
    }
    f->be = be;
    f->mem = mem;
    f->kind = kind;
    f->L = cfg->L;
    f->held = f->staged = -1;
    f->home = (hpt_tier)home;
    f->disk.fd = -1;
    f->block_bytes = layout(hpt_model_get_config(m), kind, f, &f->slot_floats);
    f->stride = stride_of(f->block_bytes, home);
    size_t total = (size_t)f->L * f->stride;
    char name[64];
    snprintf(name, sizeof name, "frozen blocks (%s)", kinds[kind]);
    hpt_mem_set_name(mem, name);
    if (home == HPT_TIER_DISK) s = hpt_mem_disk_alloc(mem, HPT_CAT_PARAMS, total, &f->disk);
    else s = f->be->alloc(mem, f->home, HPT_CAT_PARAMS, total, (void **)&f->data);
    if (s == HPT_OK && home != HPT_TIER_DEVICE) {
        f->written = calloc((size_t)f->L, 1);
        if (!f->written) s = hpt_fail(HPT_ERR_OOM, "cannot allocate the frozen base's store");
        hpt_mem_set_name(mem, "frozen block (staging)");
        if (s == HPT_OK)
            s = f->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->stride, (void **)&f->stage);
        hpt_mem_set_name(mem, "frozen block (host staging)");
        if (s == HPT_OK && disk_via_host(home, strcmp(be->name, "cpu") != 0 || via_host_test))
            s = f->be->alloc(mem, HPT_TIER_HOST, HPT_CAT_PARAMS, f->stride, (void **)&f->hstage);
    }
    if (s == HPT_OK) {
        hpt_mem_set_name(mem, "frozen block (fp32 slot)");
        s = f->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->slot_floats * 4, (void **)&f->slot);
    }
    if (s != HPT_OK) {
        free_store(f);
        hpt_model_free(m);
        return hpt_fail_ctx(s, "allocating a frozen base's blocks (%s)", hpt_tier_name(f->home));
    }
    if (home == HPT_TIER_DEVICE) f->be->memset(f->data, 0, total);
    f->store = (hpt_block_store){
        .ctx = f, .begin_pass = begin_pass, .acquire = acquire, .release = release,
        .grad_slot = grad_slot, .grads_done = grads_done, .grads_overflow = grads_overflow,
        .gather = gather, .scatter = scatter, .block_dest = block_dest,
        .store_block = store_block, .stats = stats, .free = free_store};
    model_bind_blocks(m, &f->store, NULL);
    *out = m;
    return HPT_OK;
}

hpt_status hpt_model_create_frozen(hpt_mem *mem, const hpt_model_config *cfg, int kind,
                                   hpt_model **out) {
    *out = NULL;
    if (kind != HPT_BASE_BF16 && kind != HPT_BASE_INT8 && kind != HPT_BASE_NF4)
        return hpt_fail(HPT_ERR_INVALID, "base-weights: %d is not bf16, int8 or nf4", kind);
    return hpt_model_create_frozen_on(mem, cfg, kind, HPT_TIER_DEVICE, out);
}
