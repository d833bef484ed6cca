/* frozen.c: a LoRA run's frozen base (docs/lora.md): a block store (model/blocks.h) that the
 * model's runner reads like the offload engine's. Block l's slices lie back to back at
 * l * stride on its home (--base-home: a device buffer, a host buffer or a disk-tier block, the
 * stride then 4096-rounded): a matrix (OC, C) as fp32, bf16 (round to nearest even), int8 with
 * one fp32 scale per output row (the q8w codec) or QLoRA's NF4 (kernels/nf4.h), a vector in
 * fp32 (--base-weights); every codec is a backend op, so the store runs on any backend. A narrow
 * base keeps its embeddings and an untied head in bf16 (embed.c's HPT_EMB_BF16 without
 * gradient; on the host with an off-device home, read in place by the ops: a GPU reads the
 * pinned host tier over the bus). acquire(l) brings block l whole into a device staging block
 * when it is off the device (a copy; a disk read, through one pinned host block where device
 * memory is not host memory) and widens it into one fp32 slot (kept while acquires name the
 * same block); with prefetch (--base-prefetch, the CPU backend) a worker reads the pass's next
 * scheduled block into a second staging block meanwhile, one read in flight. Loading,
 * initialisation and saving go through the slot and off the device rewrite a block whole.
 * Nothing is written back in training; no gradients. Invariants: a forward reads exactly the
 * widened stored values (the bits of an fp32 model of them); every byte is from hpt_mem
 * (params) in the sizes model_frozen_bytes gives per tier; the worker touches only its job's
 * staging block and never accounts; an acquire off the schedule fails. */
#include "core/core.h"
#include "model/blocks.h"
#include "model/gpt2_int.h"
#include "model/model.h"
#include "mem/mem.h"
#include "testing.h"

#include <pthread.h>
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
    unsigned char *stage[2];        /* (stride) device params each: a stored block, off-device
                                     * homes; [1] only with prefetch */
    int sblk[2];                    /* the block stage[k] holds, -1: none (or being read) */
    int nstage;                     /* staging blocks: 1, 2 with prefetch */
    unsigned char *hstage;          /* (stride) host params: a disk home's block on its way between
                                     * the disk and stage, where device memory is not host memory */
    unsigned char *written;         /* (L) whether block l was written to the home yet */
    float *slot;                    /* (slot_floats) device params: one block widened */
    int held;                       /* the block in slot, -1: none */
    /* the pass's acquire order (schedule) and the next position in it; n_order 0: none */
    int *order, n_order, pos;
    /* the prefetch worker: one job (block job_l into stage[job_k]) at a time */
    int prefetch;                   /* 1: the worker runs */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_done;
    int job_l, job_k;               /* the job posted, job_l -1: none */
    int job_done, quit;             /* set by the worker under mu / by free_store */
    hpt_status job_s;               /* the job's status, its last-error text in job_err */
    char job_err[1024];
    double job_io_s;                /* the job's seconds in its read or copy */
    /* counters (hpt_offload_stats): reads of blocks, acquires, bytes read from the home, the
     * seconds the reads took (worker or compute thread), the compute thread's seconds waiting
     * for a block (a read of its own, or the worker's) */
    uint64_t loads, acquires, bytes_in;
    double io_s, wait_s;
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

void model_frozen_bytes(const hpt_model_config *cfg, int kind, int home, int gpu, int prefetch,
                        uint64_t out[HPT_TIER_COUNT]) {
    size_t slot;
    size_t block = layout(cfg, kind, NULL, &slot), stride = stride_of(block, home);
    hpt_offload_opts o = nonblock_opts(kind);
    uint64_t nb, unused;
    model_nonblock_bytes(cfg, &o, &nb, &unused);
    memset(out, 0, HPT_TIER_COUNT * sizeof out[0]);
    out[home] += (uint64_t)cfg->L * stride;
    /* the staging blocks: two with prefetch (never through the host block) */
    int nstage = home == HPT_TIER_DEVICE ? 0 : prefetch && !disk_via_host(home, gpu) ? 2 : 1;
    out[HPT_TIER_DEVICE] += 4 * (uint64_t)slot + nb + (uint64_t)nstage * stride;
    out[HPT_TIER_HOST] += disk_via_host(home, gpu) ? stride : 0;
    uint64_t eh = emb_home(kind, home) != HPT_TIER_DEVICE ? model_emb_bf16_bytes(cfg) : 0;
    out[HPT_TIER_DEVICE] -= eh, out[HPT_TIER_HOST] += eh; /* the bf16 embeddings on the host */
}

int model_frozen_vocab_chunk(const hpt_model_config *cfg, int kind) {
    hpt_offload_opts o = nonblock_opts(kind);
    return model_vocab_chunk(cfg, &o);
}

/* ---- the prefetch worker ------------------------------------------------------------ */

/* Reads block l from its home into dst (4096-aligned, stride bytes): the worker's or the
 * compute thread's; no accounting (the caller's). */
static hpt_status read_block(frozen *f, int l, unsigned char *dst) {
    if (f->home == HPT_TIER_HOST) {
        memcpy(dst, f->data + (size_t)l * f->stride, f->stride); /* the CPU backend's copy */
        return HPT_OK;
    }
    return mem_disk_rw(f->mem, &f->disk, (uint64_t)l * f->stride, dst, f->stride, 0);
}

static void *worker(void *arg) {
    frozen *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->quit && (f->job_l < 0 || f->job_done)) pthread_cond_wait(&f->cv_job, &f->mu);
        if (f->quit) break;
        int l = f->job_l;
        unsigned char *dst = f->stage[f->job_k];
        pthread_mutex_unlock(&f->mu);
        double t0 = hpt_now();
        hpt_clear_error();
        hpt_status s = read_block(f, l, dst);
        double dt = hpt_now() - t0;
        pthread_mutex_lock(&f->mu);
        f->job_s = s;
        if (s != HPT_OK) snprintf(f->job_err, sizeof f->job_err, "%s", hpt_last_error());
        f->job_io_s = dt;
        f->job_done = 1;
        pthread_cond_signal(&f->cv_done);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Waits for the job posted (if any) and takes it: its block into sblk, its bytes accounted, its
 * error returned as the worker's text (the one a read on this thread would have given). */
static hpt_status reap(frozen *f) {
    if (!f->prefetch || f->job_l < 0) return HPT_OK;
    double t0 = hpt_now();
    pthread_mutex_lock(&f->mu);
    while (!f->job_done) pthread_cond_wait(&f->cv_done, &f->mu);
    int l = f->job_l, k = f->job_k;
    hpt_status s = f->job_s;
    f->job_l = -1;
    pthread_mutex_unlock(&f->mu);
    f->wait_s += hpt_now() - t0;
    f->io_s += f->job_io_s;
    if (s != HPT_OK) return hpt_fail(s, "%s", f->job_err);
    f->sblk[k] = l;
    f->loads++;
    f->bytes_in += f->stride;
    hpt_mem_transfer(f->mem, f->home, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->stride);
    return HPT_OK;
}

/* Posts the read of block l into stage[k] (no job in flight: reap first). */
static void post(frozen *f, int l, int k) {
    f->sblk[k] = -1;
    pthread_mutex_lock(&f->mu);
    f->job_l = l, f->job_k = k, f->job_done = 0;
    pthread_cond_signal(&f->cv_job);
    pthread_mutex_unlock(&f->mu);
}

/* The staging block that holds block l, -1: none */
static int staged(const frozen *f, int l) {
    for (int k = 0; k < f->nstage; k++)
        if (f->sblk[k] == l) return k;
    return -1;
}

/* Block l's storage on the device (*p): its home, or a staging block it is (or was) brought
 * into: the worker's read of it waited for, else read here. */
static hpt_status fetch(frozen *f, int l, unsigned char **p) {
    if (f->home == HPT_TIER_DEVICE) {
        *p = f->data + (size_t)l * f->stride;
        return HPT_OK;
    }
    HPT_CHECK(reap(f)); /* l's read (its wait counted), or another's: the staging blocks free */
    int k = staged(f, l);
    if (k < 0) {
        k = f->nstage > 1 && f->sblk[0] >= 0 && f->sblk[1] < 0 ? 1 : 0;
        f->sblk[k] = -1;
        double t0 = hpt_now();
        if (!f->written[l]) {
            f->be->memset(f->stage[k], 0, f->stride); /* never written: zeros, as a device home's */
        } else if (f->home == HPT_TIER_HOST) {
            f->be->copy(f->stage[k], f->data + (size_t)l * f->stride, f->stride, HPT_COPY_H2D);
            hpt_mem_transfer(f->mem, HPT_TIER_HOST, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->stride);
        } else if (f->hstage) { /* the disk into host memory, then the device */
            HPT_CHECK(hpt_mem_disk_read(f->mem, &f->disk, (uint64_t)l * f->stride, f->hstage,
                                        f->stride, HPT_TIER_HOST, HPT_CAT_PARAMS));
            f->be->copy(f->stage[k], f->hstage, f->stride, HPT_COPY_H2D);
            hpt_mem_transfer(f->mem, HPT_TIER_HOST, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->stride);
        } else {
            HPT_CHECK(hpt_mem_disk_read(f->mem, &f->disk, (uint64_t)l * f->stride, f->stage[k],
                                        f->stride, HPT_TIER_DEVICE, HPT_CAT_PARAMS));
        }
        if (f->written[l]) {
            double dt = hpt_now() - t0;
            f->loads++, f->bytes_in += f->stride, f->io_s += dt, f->wait_s += dt;
        }
        f->sblk[k] = l;
    }
    *p = f->stage[k];
    return HPT_OK;
}

/* After acquiring block l (in stage[k]): the worker reads the next other block of the
 * schedule into the other staging block, unless it is there or has never been written. */
static void prefetch_next(frozen *f, int l) {
    if (!f->prefetch || f->job_l >= 0) return;
    int k = staged(f, l);
    for (int i = f->pos; i < f->n_order; i++) {
        int b = f->order[i];
        if (b == l) continue;
        if (staged(f, b) < 0 && f->written[b]) post(f, b, k == 0 ? 1 : 0);
        return;
    }
}

/* The staged block l, narrowed into, goes to its home whole. */
static hpt_status flush(frozen *f, int l, const unsigned char *stage) {
    if (f->home == HPT_TIER_DEVICE) return HPT_OK;
    f->written[l] = 1;
    if (f->home == HPT_TIER_HOST) {
        f->be->copy(f->data + (size_t)l * f->stride, stage, f->stride, HPT_COPY_D2H);
        hpt_mem_transfer(f->mem, HPT_TIER_DEVICE, HPT_TIER_HOST, HPT_CAT_PARAMS, f->stride);
        return HPT_OK;
    }
    if (f->hstage) { /* the device into host memory (the copy returns when it arrived), the disk */
        f->be->copy(f->hstage, stage, f->stride, HPT_COPY_D2H);
        hpt_mem_transfer(f->mem, HPT_TIER_DEVICE, HPT_TIER_HOST, HPT_CAT_PARAMS, f->stride);
        return hpt_mem_disk_write(f->mem, &f->disk, (uint64_t)l * f->stride, f->hstage, f->stride,
                                  HPT_TIER_HOST, HPT_CAT_PARAMS);
    }
    return hpt_mem_disk_write(f->mem, &f->disk, (uint64_t)l * f->stride, stage, f->stride,
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
    frozen *f = ctx;
    (void)dir;
    f->n_order = f->pos = 0; /* no order until schedule: nothing checked or read ahead */
    return HPT_OK;
}

static hpt_status schedule(void *ctx, const int *order, int n) {
    frozen *f = ctx;
    if (n < 0 || n > 2 * f->L)
        return hpt_fail(HPT_ERR_INVALID, "frozen base: a pass of %d acquires over %d blocks", n, f->L);
    for (int i = 0; i < n; i++)
        if (order[i] < 0 || order[i] >= f->L)
            return hpt_fail(HPT_ERR_INVALID, "frozen base: the schedule names block %d of %d",
                            order[i], f->L);
    memcpy(f->order, order, (size_t)n * sizeof *order);
    f->n_order = n;
    f->pos = 0;
    if (f->home != HPT_TIER_DEVICE) prefetch_next(f, f->held); /* the first block not held */
    return HPT_OK;
}

static hpt_status acquire(void *ctx, int l, float **p) {
    frozen *f = ctx;
    if (f->n_order) { /* the schedule is the contract the worker reads ahead by */
        if (f->pos >= f->n_order || f->order[f->pos] != l)
            return hpt_fail(HPT_ERR_INVALID, "frozen base: block %d acquired at position %d of "
                            "the pass, whose schedule names %d", l, f->pos,
                            f->pos < f->n_order ? f->order[f->pos] : -1);
        f->pos++;
    }
    f->acquires++;
    if (f->held != l) {
        unsigned char *b;
        f->held = -1;
        HPT_CHECK(fetch(f, l, &b));
        prefetch_next(f, l); /* read while this block widens and computes */
        for (int s = 0; s < f->n; s++) widen(f, b, s, f->slot + f->foff[s]);
    } else if (f->home != HPT_TIER_DEVICE) {
        prefetch_next(f, l);
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
    return flush(f, l, p);
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
    HPT_CHECK(reap(f)); /* a read in flight finishes before its staging block changes */
    unsigned char *p = f->home == HPT_TIER_DEVICE ? f->data + (size_t)l * f->stride : f->stage[0];
    for (int k = 0; k < f->nstage; k++)
        if (f->sblk[k] == l) f->sblk[k] = -1; /* an older copy */
    if (f->home != HPT_TIER_DEVICE) f->sblk[0] = l; /* every slice written below */
    for (int s = 0; s < f->n; s++) narrow(f, p, s, src + f->foff[s]);
    return flush(f, l, p);
}

/* The reads of the blocks from their home (hpt_offload_stats's fields, as the engine's):
 * wait_s the compute thread's time waiting for a block, its own reads included. */
static void stats(void *ctx, hpt_offload_stats *out) {
    const frozen *f = ctx;
    memset(out, 0, sizeof *out);
    if (f->home == HPT_TIER_DEVICE) return;
    out->bytes_in[f->home] = f->bytes_in;
    out->loads = f->loads, out->acquires = f->acquires;
    out->io_s = f->io_s, out->wait_s = f->wait_s;
    if (f->home == HPT_TIER_DISK) {
        out->disk_read_bytes = f->bytes_in, out->disk_read_s = f->io_s;
        out->wait_disk_read_s = f->wait_s;
        out->disk_beside_s = f->io_s > f->wait_s ? f->io_s - f->wait_s : 0.0;
    } else {
        out->host_copy_bytes = f->bytes_in, out->host_copy_s = f->io_s;
        out->wait_host_s = f->wait_s;
    }
}

static void free_store(void *ctx) {
    frozen *f = ctx;
    if (!f) return;
    if (f->prefetch) { /* the job in flight finishes; its result is not needed */
        pthread_mutex_lock(&f->mu);
        f->quit = 1;
        pthread_cond_signal(&f->cv_job);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->th, NULL);
        pthread_mutex_destroy(&f->mu);
        pthread_cond_destroy(&f->cv_job);
        pthread_cond_destroy(&f->cv_done);
    }
    if (f->home == HPT_TIER_DISK) hpt_mem_disk_free(f->mem, HPT_CAT_PARAMS, &f->disk);
    else f->be->free(f->mem, f->home, HPT_CAT_PARAMS, f->data, (size_t)f->L * f->stride);
    for (int k = 0; k < 2; k++)
        f->be->free(f->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->stage[k], f->stride);
    f->be->free(f->mem, HPT_TIER_HOST, HPT_CAT_PARAMS, f->hstage, f->stride);
    f->be->free(f->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->slot, f->slot_floats * 4);
    free(f->written);
    free(f->order);
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
    f->held = f->sblk[0] = f->sblk[1] = f->job_l = -1;
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
    f->order = malloc(2 * (size_t)f->L * sizeof *f->order); /* any home: the order is checked */
    if (s == HPT_OK && !f->order) s = hpt_fail(HPT_ERR_OOM, "cannot allocate the frozen base's store");
    if (s == HPT_OK && home != HPT_TIER_DEVICE) {
        /* the worker reads ahead on the CPU backend only (its copy is a memcpy, its disk reads
         * land in RAM); model_frozen_bytes counts the second staging block the same way */
        int via_host = disk_via_host(home, strcmp(be->name, "cpu") != 0 || via_host_test);
        f->nstage = model_frozen_prefetch() && !strcmp(f->be->name, "cpu") && !via_host ? 2 : 1;
        f->written = calloc((size_t)f->L, 1);
        if (!f->written) s = hpt_fail(HPT_ERR_OOM, "cannot allocate the frozen base's store");
        for (int k = 0; k < f->nstage && s == HPT_OK; k++) {
            hpt_mem_set_name(mem, k ? "frozen block (prefetch staging)" : "frozen block (staging)");
            s = f->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, f->stride, (void **)&f->stage[k]);
        }
        hpt_mem_set_name(mem, "frozen block (host staging)");
        if (s == HPT_OK && via_host)
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
    if (s == HPT_OK && f->nstage == 2) {
        pthread_mutex_init(&f->mu, NULL);
        pthread_cond_init(&f->cv_job, NULL);
        pthread_cond_init(&f->cv_done, NULL);
        if (pthread_create(&f->th, NULL, worker, f) != 0) {
            pthread_mutex_destroy(&f->mu);
            pthread_cond_destroy(&f->cv_job);
            pthread_cond_destroy(&f->cv_done);
            s = hpt_fail(HPT_ERR_OOM, "cannot start the frozen base's prefetch thread");
        } else {
            f->prefetch = 1;
        }
    }
    if (s != HPT_OK) {
        free_store(f);
        hpt_model_free(m);
        return hpt_fail_ctx(s, "starting a frozen base's prefetch (%s)", hpt_tier_name(f->home));
    }
    if (home == HPT_TIER_DEVICE) f->be->memset(f->data, 0, total);
    f->store = (hpt_block_store){
        .ctx = f, .begin_pass = begin_pass, .schedule = schedule, .acquire = acquire,
        .release = release,
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
