/* hptrain.h: train transformer language models in C inside a memory budget.
 *
 * MANUAL
 *
 *   A run in a dozen lines (errors checked in real code; see tools/hptrain/):
 *
 *     hpt_mem *mem;            hpt_mem_create(&mem);
 *     hpt_mem_set_budget(mem, HPT_TIER_DEVICE, 4ull << 30);        // 4 GiB
 *     hpt_gpt2_config cfg;     hpt_gpt2_config_parse("gpt2:L=4,C=128,NH=4", &cfg);
 *     hpt_gpt2 *model;         hpt_gpt2_create(mem, &cfg, &model);
 *     hpt_gpt2_init_random(model, 1337);
 *     hpt_adamw_opts ao = hpt_adamw_defaults();
 *     hpt_optim *opt;          hpt_optim_create(mem, model, &ao, &opt);
 *     for (step ...) {
 *         float loss;
 *         hpt_gpt2_forward(model, inputs, targets, B, T, &loss);   // (B,T) int32 each
 *         hpt_gpt2_zero_grad(model);
 *         hpt_gpt2_backward(model);
 *         hpt_optim_step(opt, lr, grad_clip, &gnorm);
 *     }
 *     hpt_optim_free(opt); hpt_gpt2_free(model); hpt_mem_destroy(mem);
 *
 *   Or let the trainer run the loop (data, schedule, evaluation, checkpoints, resume):
 *
 *     hpt_train_opts o = hpt_train_defaults();
 *     o.model = "gpt2-124m"; o.data = "data/train_*.bin"; o.B = 4; o.T = 256; o.steps = 1000;
 *     o.act.recompute = HPT_RECOMPUTE_SELECTIVE;          // memory techniques: o.act, o.adamw,
 *     o.offload.params = o.offload.optim = HPT_TIER_DISK; // o.offload (blocks streamed from
 *     o.offload.fused = 1;                                // disk: hpt_mem_set_disk_dir first)
 *     hpt_trainer *tr;         hpt_trainer_create(mem, &o, &tr);   // refuses a budget it
 *     while (!hpt_trainer_done(tr)) {                              // cannot meet, up front
 *         hpt_train_progress p; hpt_trainer_step(tr, &p);
 *     }
 *
 *   Gradients kept in fp16 at their offload home with dynamic loss scaling (exact mode, not
 *   fused; a step whose gradients overflow is skipped: hpt_train_progress.skipped):
 *
 *     o.offload.grads = HPT_TIER_HOST; o.offload.grad_home = HPT_GH_FP16;
 *     o.loss_scale.mode = HPT_LOSS_SCALE_DYNAMIC;       // from 2^16, halved on overflow
 *
 *   The smallest training state (8-bit AdamW, fused, bf16 weights with stochastic rounding,
 *   and bf16 tied embeddings whose gradient is one vocabulary chunk, updated chunk by chunk
 *   after the backward; a forward then needs targets: hpt_embeddings):
 *
 *     o.adamw.state_bits = 8; o.offload.fused = 1;
 *     o.offload.weights = HPT_BW_BF16_SR; o.offload.embeddings = HPT_EMB_BF16;
 *
 *   hpt_plan_estimate() tells what a configuration will allocate, by tier and category,
 *   before anything is; hpt_mem_record() and hpt_trace_write() give the exact timeline.
 *
 * ERRORS
 *   Every function that can fail returns hpt_status. HPT_OK is 0. Detail (which file, how
 *   many bytes, which tensor) is in hpt_last_error(), a per-thread text valid until the next
 *   failing call on that thread. Library code never prints, exits or aborts on a user's
 *   error. Out-of-memory on any tier is an ordinary, recoverable status.
 *
 * OWNERSHIP
 *   *_create / *_load return an object the caller owns and releases with the matching
 *   *_free, which accepts NULL. Pointer arguments are borrowed for the duration of the call
 *   unless the comment says otherwise. Buffers that a function returns through a `**_out`
 *   argument documented as "malloc'd" are released by the caller with free().
 *
 * MEMORY
 *   Tensor storage comes from an hpt_mem, which accounts every byte by tier and category and
 *   refuses an allocation that would pass the tier's budget (HPT_ERR_OOM). A model, its
 *   optimizer and its activations must share one hpt_mem, which must outlive them.
 *
 * THREADS
 *   Kernels use OpenMP; hpt_set_threads(n) fixes the count. Same seed, same inputs, same
 *   thread count: same bits.
 */
#ifndef HPTRAIN_H
#define HPTRAIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HPT_VERSION "0.1.0"

/* ---- core ------------------------------------------------------------------------------ */

typedef enum {
    HPT_OK = 0,
    HPT_ERR_OOM,         /* a tier's budget (or the operating system) refused memory */
    HPT_ERR_IO,          /* open, read, write, sync or rename failed */
    HPT_ERR_FORMAT,      /* wrong magic, version, truncated or malformed file */
    HPT_ERR_CHECKSUM,    /* a file's checksum does not match its contents */
    HPT_ERR_SHAPE,       /* shapes disagree (file vs model, T > maxT, ...) */
    HPT_ERR_INVALID,     /* an argument is out of range */
    HPT_ERR_UNSUPPORTED, /* valid, but not implemented for this configuration */
    HPT_ERR_MISMATCH     /* a verification found values outside tolerance */
} hpt_status;

const char *hpt_status_str(hpt_status s);
/* The detail of the last failure on this thread; "" when none. */
const char *hpt_last_error(void);
/* Sets the OpenMP thread count for kernels and GEMM (n >= 1). */
void hpt_set_threads(int n);
int hpt_get_threads(void);
/* The process's peak resident set size so far, in bytes (0 if unknown). */
uint64_t hpt_rss_peak_bytes(void);
/* The process's resident set size now, in bytes (0 if unknown). */
uint64_t hpt_rss_bytes(void);
/* Monotonic clock in seconds. */
double hpt_now(void);

/* Parses "512MB", "4GB", "1.5GiB", "123" (bytes). KB/MB/GB are powers of 1000, KiB/MiB/GiB
 * powers of 1024. */
hpt_status hpt_parse_size(const char *text, uint64_t *bytes_out);

/* ---- mem: tiers, categories, budgets ------------------------------------------------- */

typedef enum { HPT_TIER_DEVICE = 0, HPT_TIER_HOST, HPT_TIER_DISK, HPT_TIER_COUNT } hpt_tier;

typedef enum {
    HPT_CAT_PARAMS = 0, /* model weights */
    HPT_CAT_GRADS,      /* parameter gradients */
    HPT_CAT_OPTIM,      /* optimizer state (moments) */
    HPT_CAT_ACTS,       /* activations saved for backward and their gradients */
    HPT_CAT_WORKSPACE,  /* temporaries of kernels */
    HPT_CAT_IO,         /* file and data buffers */
    HPT_CAT_COUNT
} hpt_category;

const char *hpt_tier_name(hpt_tier t);
const char *hpt_category_name(hpt_category c);

typedef struct hpt_mem hpt_mem;

#define HPT_MEM_STATS_VERSION 1
typedef struct {
    int version;                                     /* HPT_MEM_STATS_VERSION */
    uint64_t live_bytes[HPT_TIER_COUNT][HPT_CAT_COUNT];
    uint64_t peak_bytes[HPT_TIER_COUNT];             /* high-water mark of the tier's total */
    uint64_t peak_live_bytes[HPT_TIER_COUNT][HPT_CAT_COUNT]; /* breakdown at that peak */
    uint64_t budget_bytes[HPT_TIER_COUNT];           /* 0: unlimited */
    uint64_t n_allocs, n_frees, n_refused;
} hpt_mem_stats;

hpt_status hpt_mem_create(hpt_mem **out);
/* Releases the manager (and its disk bounce buffer). Blocks still live are leaked: free them first. */
void hpt_mem_destroy(hpt_mem *m);
/* 0 means unlimited. A budget below what is live already is accepted; later allocs fail. */
void hpt_mem_set_budget(hpt_mem *m, hpt_tier tier, uint64_t bytes);
/* Zero-filled storage of `bytes` bytes on `tier` (64-byte aligned, 4096 from 4096 bytes up).
 * HPT_ERR_OOM with the live breakdown in hpt_last_error() when the budget would be passed.
 * bytes == 0 gives *out == NULL and HPT_OK. DEVICE and HOST only: the disk tier has its own
 * calls below. */
hpt_status hpt_mem_alloc(hpt_mem *m, hpt_tier tier, hpt_category cat, size_t bytes,
                         void **out);
/* Frees what hpt_mem_alloc gave, told its tier, category and size (Lua's rule: devices
 * have no room for headers). NULL does nothing. */
void hpt_mem_free(hpt_mem *m, hpt_tier tier, hpt_category cat, void *p, size_t bytes);
void hpt_mem_get_stats(const hpt_mem *m, hpt_mem_stats *out);
/* Resets the peaks to the live values (start of a new measurement window). */
void hpt_mem_reset_peak(hpt_mem *m);

/* -- mem: the disk tier --
 * Storage in files under a directory (one file per block, removed when freed), read and
 * written with direct I/O (O_DIRECT, 4096-byte aligned; unaligned requests go through an
 * aligned bounce buffer counted on the host tier). Space is reserved at allocation, so a full
 * disk is an HPT_ERR_OOM then, not a failed write later. Disk blocks are not addressable:
 * data moves with hpt_mem_disk_write/read, and each call is a transfer in the timeline. */
typedef struct {
    int fd;          /* -1: none */
    uint64_t bytes;  /* requested size */
} hpt_disk_ref;

/* Directory for the disk tier's files (created if missing). Needed before a disk allocation. */
hpt_status hpt_mem_set_disk_dir(hpt_mem *m, const char *dir);
hpt_status hpt_mem_disk_alloc(hpt_mem *m, hpt_category cat, size_t bytes, hpt_disk_ref *out);
/* Frees the block (the file is already unlinked; closing releases the space). */
void hpt_mem_disk_free(hpt_mem *m, hpt_category cat, hpt_disk_ref *ref);
/* Copies bytes between memory on tier `from`/`to` (DEVICE or HOST, for the timeline) and the
 * block at byte offset `offset`. */
hpt_status hpt_mem_disk_write(hpt_mem *m, const hpt_disk_ref *ref, uint64_t offset,
                              const void *src, size_t bytes, hpt_tier from, hpt_category cat);
hpt_status hpt_mem_disk_read(hpt_mem *m, const hpt_disk_ref *ref, uint64_t offset, void *dst,
                             size_t bytes, hpt_tier to, hpt_category cat);

/* -- mem: the event timeline (profiler) --
 * While recording, every allocation, free, refusal and transfer is an event, tagged with the
 * context the caller set (step, phase, layer). Buffers inside a planned activation arena are
 * events too (in_arena = 1): they do not change the tier's accounted total (the arena itself
 * was one allocation), but show what is live inside it. Recording costs one append per event. */
typedef enum {
    HPT_PHASE_FULL = 0, /* forward + backward + update (the only phase until the hybrid schedule) */
    HPT_PHASE_WARMUP,
    HPT_PHASE_PREDICT,
    HPT_PHASE_CORRECT,
    HPT_PHASE_EVAL,     /* validation forwards */
    HPT_PHASE_SETUP,    /* before the first step: model, optimizer, data */
    HPT_PHASE_COUNT
} hpt_phase;
const char *hpt_phase_name(hpt_phase p);

typedef enum { HPT_EV_ALLOC = 0, HPT_EV_FREE, HPT_EV_REFUSED, HPT_EV_TRANSFER } hpt_mem_event_kind;

typedef struct {
    double t;                /* seconds since recording started */
    int64_t step;            /* context: optimizer step being computed (0 before the first) */
    int32_t layer;           /* context: transformer block, -1 outside blocks */
    uint8_t kind;            /* hpt_mem_event_kind */
    uint8_t tier;            /* hpt_tier (source tier of a transfer) */
    uint8_t dst_tier;        /* transfers only */
    uint8_t category;        /* hpt_category */
    uint8_t phase;           /* hpt_phase */
    uint8_t in_arena;        /* 1: a buffer inside an activation arena */
    uint64_t bytes;
    uint64_t tier_live_bytes;   /* the tier's accounted total after the event */
    uint64_t arena_live_bytes;  /* bytes live inside arenas after the event */
    const char *name;        /* static text naming the buffer ("qkv", "params"...), may be NULL */
} hpt_mem_event;

/* Starts (clearing earlier events) or stops recording. */
void hpt_mem_record(hpt_mem *m, int on);
/* The recorded events, valid until the next allocation or hpt_mem_record(m, 1). */
const hpt_mem_event *hpt_mem_events(const hpt_mem *m, size_t *n_out);
/* Sets the context that tags the following events. layer -1: outside blocks. */
void hpt_mem_set_context(hpt_mem *m, int64_t step, hpt_phase phase, int layer);
void hpt_mem_set_layer(hpt_mem *m, int layer);
/* Names the next hpt_mem_alloc (static text; reset after that call). */
void hpt_mem_set_name(hpt_mem *m, const char *name);
/* Records a buffer becoming live (born = 1) or dead inside an arena. */
void hpt_mem_arena_event(hpt_mem *m, hpt_category cat, size_t bytes, int born, const char *name);
/* Records bytes copied from one tier to another (the offload engine's transfers). */
void hpt_mem_transfer(hpt_mem *m, hpt_tier src, hpt_tier dst, hpt_category cat, size_t bytes);

/* ---- model: GPT-2 -------------------------------------------------------------------- */

typedef struct {
    int L;    /* layers */
    int C;    /* channels */
    int NH;   /* heads; C % NH == 0 */
    int V;    /* vocabulary */
    int Vp;   /* vocabulary padded (rows of wte), Vp >= V */
    int maxT; /* positions */
} hpt_gpt2_config;

/* "gpt2-124m" | "gpt2-350m" | "gpt2-774m" | "gpt2-1558m" |
 * "gpt2:L=12,C=768,NH=12[,V=50257][,T=1024][,Vp=...]". Vp defaults to V rounded up to 128. */
hpt_status hpt_gpt2_config_parse(const char *shape, hpt_gpt2_config *out);
hpt_status hpt_gpt2_config_check(const hpt_gpt2_config *cfg);
/* Number of parameters including wte's padding rows. */
size_t hpt_gpt2_num_params(const hpt_gpt2_config *cfg);

#define HPT_GPT2_NUM_TENSORS 16
typedef struct {
    const char *name; /* "wte", "wpe", "ln1w", ..., "lnfb" (llm.c's checkpoint order) */
    size_t offset;    /* floats from the start of the parameter buffer */
    size_t numel;     /* whole tensor, stacked over L for per-layer tensors */
    int is_matrix;    /* 2-D weights (embeddings and linear weights): decayed by default */
} hpt_gpt2_tensor;
void hpt_gpt2_tensors(const hpt_gpt2_config *cfg, hpt_gpt2_tensor out[HPT_GPT2_NUM_TENSORS]);

typedef struct hpt_gpt2 hpt_gpt2;

/* Allocates zeroed parameters and gradients (device tier). */
hpt_status hpt_gpt2_create(hpt_mem *mem, const hpt_gpt2_config *cfg, hpt_gpt2 **out);
/* Reads an llm.c GPT-2 checkpoint (version 3 fp32 or 5 bf16). */
hpt_status hpt_gpt2_load(hpt_mem *mem, const char *path, hpt_gpt2 **out);
/* Writes an llm.c version-3 (fp32) checkpoint, atomically. */
hpt_status hpt_gpt2_save(const hpt_gpt2 *m, const char *path);
void hpt_gpt2_free(hpt_gpt2 *m);
/* GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0,
 * layernorm weights 1, wte padding rows 0. Deterministic in seed; the same values with or
 * without the offload engine (which can fail: a disk write). */
hpt_status hpt_gpt2_init_random(hpt_gpt2 *m, uint64_t seed);

const hpt_gpt2_config *hpt_gpt2_get_config(const hpt_gpt2 *m);
size_t hpt_gpt2_get_num_params(const hpt_gpt2 *m);
float *hpt_gpt2_params(hpt_gpt2 *m); /* (num_params) fp32, in checkpoint order */
float *hpt_gpt2_grads(hpt_gpt2 *m);  /* (num_params) fp32 */
/* Logits of the last forward: (B, T, Vp) fp32, entries >= V are the padding columns. */
const float *hpt_gpt2_logits(const hpt_gpt2 *m);

/* Activation buffers for (B, T) are allocated on first use and kept while B*T does not grow.
 * targets may be NULL (no loss; *loss_out = -1). Token ids must be in [0, V). */
hpt_status hpt_gpt2_forward(hpt_gpt2 *m, const int32_t *inputs, const int32_t *targets,
                            int B, int T, float *loss_out);
void hpt_gpt2_zero_grad(hpt_gpt2 *m);
/* Accumulates (+=) the gradients of the mean loss of the last forward (which needs targets)
 * into hpt_gpt2_grads(). */
hpt_status hpt_gpt2_backward(hpt_gpt2 *m);
/* Releases the activation buffers. */
void hpt_gpt2_free_activations(hpt_gpt2 *m);
/* Frees the gradient buffer (a predict phase needs none): hpt_gpt2_grads() is NULL, backward
 * and an optimizer step are refused, zero_grad does nothing, until hpt_gpt2_acquire_grads()
 * allocates it again (zeroed; HPT_ERR_OOM if the device budget refuses; nothing if present). */
void hpt_gpt2_release_grads(hpt_gpt2 *m);
hpt_status hpt_gpt2_acquire_grads(hpt_gpt2 *m);

/* -- model: what the activation arena keeps (docs/activations.md) --
 * attention: FLASH (the default) saves each block's attention output and the log-sum-exp of
 *   each row, (B,NH,T), and recomputes the probabilities in backward, memory linear in T;
 *   PLAIN saves the (B,NH,T,T) probabilities (the reference kernel).
 * recompute (exact: the same kernels on the same inputs, so gradients and losses are the same
 *   bits as without recomputation):
 *   NONE       every block keeps all it saves until its backward.
 *   SELECTIVE  drops the large cheap activations, ln1, ln2 (recomputed from the saved input,
 *              mean and rstd), the GELU output and, with PLAIN attention, the probabilities;
 *              each is rebuilt at the start of its block's backward.
 *   EVERY      (every:N) keeps only the input of every N-th block (blocks 0, N, 2N, ...) and
 *              the last block's output; the backward of a segment of N blocks reruns that
 *              segment's forward once, keeping its activations until each block's backward.
 *   FULL       every:1: keeps each block's input (the residual stream), reruns each block's
 *              forward at the start of its backward.
 * The arena plan follows the choice: recomputed buffers live only during the forward of their
 * block and from the recompute to their block's backward, so the arena shrinks. */
typedef enum { HPT_ATTN_FLASH = 0, HPT_ATTN_PLAIN } hpt_attention;
typedef enum {
    HPT_RECOMPUTE_NONE = 0,
    HPT_RECOMPUTE_SELECTIVE,
    HPT_RECOMPUTE_EVERY,
    HPT_RECOMPUTE_FULL
} hpt_recompute;
/* offload (docs/activations.md; recompute NONE or SELECTIVE only, else HPT_ERR_UNSUPPORTED):
 *   the fields each block keeps for its backward other than its output and the per-row
 *   statistics (ln1, qkv, atty, att, res2, ln2, fch, fch_gelu, those the policy keeps) live in
 *   the device arena only during the block's forward, which copies them to a HOST buffer or to
 *   the DISK tier (hpt_mem_set_disk_dir first); at the time point before the block's backward
 *   (the next block's backward, or the head's) they are copied back into arena buffers that
 *   live until the block's backward. Copies out are synchronous; the copy back is done by a
 *   thread during the next block's backward with HOST, synchronously with DISK. Exact: same
 *   bits.
 * compress INT8: those fields are stored as int8 with one fp32 absmax scale per row (a token's
 *   C, 3C or 4C values; a probability row of T) and dequantised before backward: on the
 *   offload tier, or with no offload in the device arena. Lossy.
 * compress BF16: those fields are stored as bf16 (a float's top 16 bits, rounded to nearest
 *   even: fp32's range, 8 significant bits) and widened before backward. Half the bytes of
 *   fp32; lossy, far less than INT8 (relative error <= 2^-9 per value). */
typedef enum { HPT_OFFLOAD_NONE = 0, HPT_OFFLOAD_HOST, HPT_OFFLOAD_DISK } hpt_act_offload;
typedef enum { HPT_COMPRESS_NONE = 0, HPT_COMPRESS_INT8, HPT_COMPRESS_BF16 } hpt_act_compress;
typedef struct {
    hpt_attention attention;
    hpt_recompute recompute;
    int every;                /* N of HPT_RECOMPUTE_EVERY, >= 1 */
    hpt_act_offload offload;
    hpt_act_compress compress;
    int head_chunk;           /* 0: the head keeps all (B,T,Vp) logits; N > 0: it computes the
                               * loss N rows at a time, keeps only (N,Vp) logits, and recomputes
                               * each chunk's logits in backward (one more head GEMM). A forward
                               * without targets then fails: sampling and verify need all logits. */
} hpt_gpt2_act_opts;
/* Parses "none" | "host" | "disk" into o->offload; "none" | "int8" | "bf16" into o->compress. */
hpt_status hpt_act_offload_parse(const char *text, hpt_gpt2_act_opts *o);
hpt_status hpt_act_compress_parse(const char *text, hpt_gpt2_act_opts *o);
const char *hpt_act_offload_name(hpt_act_offload x);
const char *hpt_act_compress_name(hpt_act_compress x);
/* Activation bytes per tier that a forward+backward at (B, T) allocates with o (category
 * acts): [DEVICE] the arena (= hpt_gpt2_activation_bytes), [HOST] the offload buffer (host
 * offload) or the int8 staging buffer (disk offload with int8), [DISK] the offload file.
 * HPT_ERR_INVALID / HPT_ERR_UNSUPPORTED for a bad choice, HPT_ERR_OOM if it cannot plan. */
hpt_status hpt_gpt2_act_tier_bytes(const hpt_gpt2_config *cfg, int B, int T,
                                   const hpt_gpt2_act_opts *o, uint64_t out[HPT_TIER_COUNT]);
/* FLASH, NONE, every 1, no offload, no compression. */
hpt_gpt2_act_opts hpt_gpt2_act_defaults(void);
/* Parses "flash" | "plain" into o->attention. */
hpt_status hpt_attention_parse(const char *text, hpt_gpt2_act_opts *o);
/* Parses "none" | "selective" | "every:N" (N >= 1) | "full" into o->recompute and o->every. */
hpt_status hpt_recompute_parse(const char *text, hpt_gpt2_act_opts *o);
/* "flash", "plain"; "none", "selective", "every:N", "full" (written to buf, n >= 24). */
const char *hpt_attention_name(hpt_attention a);
const char *hpt_recompute_name(const hpt_gpt2_act_opts *o, char *buf, size_t n);
/* Sets what the model keeps (HPT_ERR_INVALID for an unknown choice). Activations already
 * allocated are released, so the next forward plans and allocates the arena for the choice. */
hpt_status hpt_gpt2_set_act_opts(hpt_gpt2 *m, const hpt_gpt2_act_opts *o);
hpt_gpt2_act_opts hpt_gpt2_get_act_opts(const hpt_gpt2 *m);
/* Bytes of activations (and backward scratch) that a forward+backward at (B, T) allocates
 * with the choice o (NULL: hpt_gpt2_act_defaults()); 0 if the plan cannot be made. */
size_t hpt_gpt2_activation_bytes(const hpt_gpt2_config *cfg, int B, int T,
                                 const hpt_gpt2_act_opts *o);

/* -- model: the offload engine (src/offload/engine.c, docs/offload.md) --
 * Each transformer block's parameters, gradients and optimizer state have a home tier; the
 * blocks' parameters come to the device only while needed: at most max_active (K) blocks at
 * once, the next prefetch (P) blocks loading on a worker thread while one computes (forward
 * order in forward, reverse in backward). wte, wpe and the final layernorm stay on the device.
 * Homes are laid out block by block (a block's 12 tensors' slices packed, 4096-byte aligned),
 * so a block moves in one transfer; the disk tier uses direct I/O.
 *   params, optim  the home of the blocks' weights and of their AdamW m and v (DEVICE, HOST or
 *                  DISK); any other optimizer or 8-bit state keeps its whole state in the
 *                  optim tier (DEVICE or HOST; DISK is HPT_ERR_UNSUPPORTED), in the same
 *                  layout as without the engine
 *   grads          exact mode: where each block's gradients wait for the optimizer after its
 *                  backward (the optimizer then streams over all blocks, so clipping uses this
 *                  step's global norm: the same bits as without offload); fused mode keeps
 *                  gradients only in device slots of one block
 *   fused          1: each block's update runs (on the worker, where its state lives) as soon as
 *                  its gradients are complete, overlapping the backward of the blocks before
 *                  it; clipping then uses the previous step's global norm (none at the first
 *                  step). With clipping off, the same bits as the unfused update, for every
 *                  optimizer and state width.
 * An active engine (any home not DEVICE, or fused) changes what hpt_gpt2_params() and
 * hpt_gpt2_grads() return: NULL (the blocks are not in one buffer); hpt_gpt2_copy_params()
 * gathers the weights in checkpoint order, and checkpoints are saved and loaded (the
 * *_load_offload calls) in the same formats as without the engine. Gradient accumulation works in exact mode (a later
 * micro-batch's backward adds to the block's gradients brought back from their home), not
 * with the fused update. */
/* The precision of the blocks' weights at their home (hpt_offload_opts.weights; training's
 * counterpart of inference's hpt_weights). bf16 homes
 * (device, host, or disk for SR; Kahan on disk is HPT_ERR_UNSUPPORTED; a disk home is read and
 * written through two host staging blocks of bf16) hold 2 bytes per weight, Kahan 2 more (the
 * compensation, bf16); acquiring a block widens it into an fp32 device slot, so compute stays
 * fp32, and the optimizer's update rewrites the home: stochastic rounding (SR; the noise is a
 * hash of the step and the element) or round to nearest plus the compensation (Kahan). The
 * embeddings (unless hpt_offload_opts.embeddings is HPT_EMB_BF16) and the final layer norm stay
 * fp32. Checkpoints stay fp32: the weights are widened
 * when saved and rounded to nearest when loaded (exact for a bf16 run's own checkpoint), and the
 * training state (hpt_state_save) also holds the Kahan compensation, so a bf16-kahan run resumes
 * bit for bit. Loaded with other weights (fp32, bf16-sr) a Kahan state's compensation is dropped;
 * a state without one loaded into bf16-kahan weights starts it at the residue of rounding the
 * saved weights (zero when they are bf16 values, as a bf16 run's are). Any value but FP32 makes
 * the engine active. */
typedef enum { HPT_BW_FP32 = 0, HPT_BW_BF16_SR, HPT_BW_BF16_KAHAN, HPT_BW_COUNT } hpt_block_weights;
/* "fp32" | "bf16-sr" | "bf16-kahan" into *out. */
hpt_status hpt_block_weights_parse(const char *text, hpt_block_weights *out);
const char *hpt_block_weights_name(hpt_block_weights w);
/* The precision of the blocks' gradients at their home (hpt_offload_opts.grad_home; exact mode
 * only, HPT_ERR_UNSUPPORTED with fused). FP16 and BF16 homes hold 2 bytes per gradient (device,
 * host or disk; each block rounded up to 4096 bytes): a block's gradients are computed in an
 * fp32 device slot, rounded to nearest even when they go home, and widened when they come back
 * (accumulation's later micro-batches, the optimizer's streaming pass). FP16 needs a loss scale
 * (hpt_train_opts.loss_scale): its narrowing reports any value beyond 65504 or not finite, and
 * the trainer skips that step. Any value but FP32 makes the engine active. */
typedef enum { HPT_GH_FP32 = 0, HPT_GH_BF16, HPT_GH_FP16, HPT_GH_COUNT } hpt_grad_home;
/* "fp32" | "bf16" | "fp16" into *out. */
hpt_status hpt_grad_home_parse(const char *text, hpt_grad_home *out);
const char *hpt_grad_home_name(hpt_grad_home g);
/* The tied embedding wte (and wpe) under the engine (hpt_offload_opts.embeddings; src/model/embed.c).
 * FULL (the default) keeps them fp32 with a whole (Vp, C) gradient. CHUNKED and BF16 need
 * --fused-update: the head runs over the vocabulary in chunks of vocab_chunk rows of wte (its
 * logits never exist whole), and wte is updated after the backward chunk by chunk (each chunk's
 * head gradient recomputed from the saved lnf and log-sum-exp, plus the encoder's rows of its
 * tokens) by the optimizer's own update of those values: wte's gradient memory is one chunk
 * (and with a row-chunked head, act.head_chunk, the logits (rows, vocab_chunk)). The price:
 * one head GEMM more per step than FULL with the same head chunk (the logits recomputed for
 * wte's gradient at the end). CHUNKED keeps wte and wpe fp32; BF16 stores them in
 * bf16 with the blocks' rounding (hpt_offload_opts.weights: bf16-sr or bf16-kahan, whose
 * compensation the training state saves as the section "emb_comp"). lnfw, lnfb stay fp32. A
 * forward without targets (the full logits) is refused; sampling and checks copy the weights
 * out (hpt_gpt2_copy_params). Clipping is the fused update's (the previous step's norm); wte's
 * chunks are part of this step's norm. Results equal FULL's up to the reduction order of the
 * chunked sums (docs/optimizers.md). */
typedef enum { HPT_EMB_FULL = 0, HPT_EMB_CHUNKED, HPT_EMB_BF16, HPT_EMB_COUNT } hpt_embeddings;
/* "full" | "chunked" | "bf16" into *out. */
hpt_status hpt_embeddings_parse(const char *text, hpt_embeddings *out);
const char *hpt_embeddings_name(hpt_embeddings e);
typedef struct {
    hpt_tier params, grads, optim; /* homes; all DEVICE and fused 0: no engine (the default) */
    int max_active;                /* K >= 1 device slots of block parameters */
    int prefetch;                  /* P, 0 <= P < K: blocks loaded ahead of the one computing */
    int fused;
    int weights;                   /* hpt_block_weights: the blocks' weights' home precision */
    int grad_home;                 /* hpt_grad_home: the blocks' gradients' home precision */
    int embeddings;                /* hpt_embeddings: wte's and wpe's storage and update */
    int vocab_chunk;               /* CHUNKED, BF16: rows of wte per chunk (0: 2048), a
                                    * multiple of 256 / gcd(C, 256) so that 8-bit state blocks
                                    * never straddle two chunks */
} hpt_offload_opts;
hpt_offload_opts hpt_offload_defaults(void);  /* all DEVICE, K 2, P 1, not fused */
int hpt_offload_active(const hpt_offload_opts *o);
/* "none" | "host" | "disk" (params, grads and optim there) | "params=T,grads=T,optim=T" (T:
 * device, host or disk; missing keys stay as they are) into o. */
hpt_status hpt_offload_parse(const char *text, hpt_offload_opts *o);
/* HPT_ERR_INVALID / HPT_ERR_UNSUPPORTED with the reason for a choice the engine refuses. */
hpt_status hpt_offload_check(const hpt_offload_opts *o);
/* hpt_gpt2_create with the engine (o NULL or inactive: hpt_gpt2_create); DISK homes need
 * hpt_mem_set_disk_dir first. */
hpt_status hpt_gpt2_create_offload(hpt_mem *mem, const hpt_gpt2_config *cfg,
                                   const hpt_offload_opts *o, hpt_gpt2 **out);
/* hpt_gpt2_load into a model made with the offload engine (off NULL or inactive: none). */
hpt_status hpt_gpt2_load_offload(hpt_mem *mem, const char *path, const hpt_offload_opts *off,
                                 hpt_gpt2 **out);
/* The weights in checkpoint order into dst (num_params floats), with or without the engine. */
hpt_status hpt_gpt2_copy_params(hpt_gpt2 *m, float *dst);
/* What the engine moved and how long it waited (all zero without one). */
typedef struct {
    uint64_t bytes_in[HPT_TIER_COUNT];  /* bytes read from each home tier (loads, state reads) */
    uint64_t bytes_out[HPT_TIER_COUNT]; /* bytes written to each home tier (write-backs) */
    uint64_t loads, acquires;           /* block loads queued; block acquisitions (forward,
                                         * recompute, backward): acquires - loads were found on the device */
    double io_s;                        /* worker time in copies and disk transfers */
    double update_s;                    /* worker time in optimizer updates */
    double compute_update_s;            /* compute-thread time in updates (fused, state on disk) */
    double wait_s;                      /* compute-thread time blocked on the worker */
} hpt_offload_stats;
void hpt_gpt2_offload_stats(const hpt_gpt2 *m, hpt_offload_stats *out);

/* Samples n_new tokens after the n_prompt tokens in tokens[] (capacity n_prompt + n_new),
 * with temperature (> 0) and top_k (0: all): hpt_infer_generate on the model's fp32 weights
 * with a cache of min(n_prompt + n_new, maxT) positions. */
hpt_status hpt_gpt2_generate(hpt_gpt2 *m, int32_t *tokens, int n_prompt, int n_new,
                             float temperature, int top_k, uint64_t seed);

/* ---- infer: generation with a key/value cache, fp32 or int8 weights ------------------
 * An hpt_infer runs tokens through the model one feed at a time, keeping every block's keys
 * and values (L, 2, ctx, C fp32, device tier) so a new token costs one row's work, and gives
 * the logits after the last fed token. Weights:
 *   HPT_WEIGHTS_F32  fp32 weights: the model's own, borrowed, with hpt_infer_create (the model
 *                    outlives the engine), or the engine's own with hpt_infer_load
 *   HPT_WEIGHTS_Q8   int8 copies of wte, qkvw, attprojw, fcw, fcprojw with one fp32 scale per
 *                    output channel (row), round to nearest of absmax/127; vectors and wpe
 *                    fp32. ~1 byte per parameter instead of 4 (hpt_infer_weight_bytes_for).
 * hpt_infer_load with HPT_WEIGHTS_Q8 reads the checkpoint a few MiB at a time, so the fp32
 * weights never sit in memory. Typical use:
 *     hpt_infer *inf;
 *     hpt_infer_load(mem, "model.bin", HPT_WEIGHTS_Q8, 0, &inf);   // ctx 0: maxT
 *     hpt_infer_generate(inf, tokens, n_prompt, n_new, 1.0f, 40, seed);
 *     hpt_infer_free(inf); */
typedef enum { HPT_WEIGHTS_F32 = 0, HPT_WEIGHTS_Q8 } hpt_weights;
const char *hpt_weights_name(hpt_weights w); /* "fp32", "int8" */
hpt_status hpt_weights_parse(const char *text, hpt_weights *out);
/* Bytes of an engine's weights for cfg (the estimate of what hpt_infer allocates for them). */
uint64_t hpt_infer_weight_bytes_for(const hpt_gpt2_config *cfg, hpt_weights w);

/* Device bytes an engine allocates: its weights, its cache of ctx positions (0: maxT) and row
 * scratch: exactly what hpt_infer_load leaves allocated (hpt_infer_create with F32 borrows the
 * model's weights: hpt_infer_weight_bytes_for less). */
uint64_t hpt_infer_bytes_for(const hpt_gpt2_config *cfg, hpt_weights w, int ctx);
/* Device bytes hpt_infer_loss allocates for the duration of its call (logits of 64 rows). */
uint64_t hpt_infer_loss_bytes_for(const hpt_gpt2_config *cfg);

typedef struct hpt_infer hpt_infer;
/* An engine on model's weights (F32: borrowed; Q8: quantised copies, model may then be freed);
 * ctx cache positions, 0 or > maxT: maxT. */
hpt_status hpt_infer_create(hpt_mem *mem, hpt_gpt2 *model, hpt_weights w, int ctx,
                            hpt_infer **out);
/* An engine from an llm.c checkpoint (version 3 or 5) that owns its weights (fp32 or int8),
 * read a few MiB at a time: no model and no gradient buffer is made. */
hpt_status hpt_infer_load(hpt_mem *mem, const char *path, hpt_weights w, int ctx,
                          hpt_infer **out);
void hpt_infer_free(hpt_infer *inf);
const hpt_gpt2_config *hpt_infer_get_config(const hpt_infer *inf);
int hpt_infer_get_ctx(const hpt_infer *inf);
int hpt_infer_get_pos(const hpt_infer *inf); /* positions filled since the last reset */
void hpt_infer_reset(hpt_infer *inf);        /* empties the cache */
/* Runs n tokens at the next positions; HPT_ERR_SHAPE when they do not fit the context. */
hpt_status hpt_infer_feed(hpt_infer *inf, const int32_t *tokens, int n);
/* (Vp) the logits after the last fed token. */
const float *hpt_infer_logits(const hpt_infer *inf);
/* Mean cross-entropy of B sequences (inputs, targets (B, T), T <= ctx), each from an empty
 * cache: the training forward's loss within fp32 rounding (F32), or on int8 weights (Q8).
 * Allocates (64, Vp) logits for the call; leaves the cache empty. */
hpt_status hpt_infer_loss(hpt_infer *inf, const int32_t *inputs, const int32_t *targets, int B,
                          int T, float *loss_out);
/* As hpt_gpt2_generate; when the cache is full it restarts from the last ctx/2 tokens. */
hpt_status hpt_infer_generate(hpt_infer *inf, int32_t *tokens, int n_prompt, int n_new,
                              float temperature, int top_k, uint64_t seed);

/* ---- optim: AdamW, Lion, Adam-mini, SGD; 8-bit states; schedules, clipping ------------ */

/* The optimizer (docs/optimizers.md has the formulas, state bytes and advice):
 *   ADAMW      PyTorch's AdamW, decoupled weight decay. State m, v per parameter.
 *   LION       Chen et al. 2023: p -= lr*(sign(beta1*m + (1-beta1)*g) + wd*p), then
 *              m = beta2*m + (1-beta2)*g. State m. Use a 3-10x smaller lr than AdamW.
 *   ADAM_MINI  AdamW with one second moment per block: each row of a linear weight or
 *              embedding, each (per-layer) vector; v_b tracks the block's mean of g^2.
 *              State m per parameter plus v per block (always fp32).
 *   SGD        PyTorch's SGD with momentum beta1 (dampening 0, not Nesterov) and coupled
 *              (L2) weight decay: d = g + wd*p, buf = beta1*buf + d, p -= lr*buf. State buf.
 * State width: 32 (fp32) or 8: block-wise quantised states (blocks of 256 values, one fp32
 * absmax per block, Dettmers et al.'s dynamic map: signed for m; AdamW's v as sqrt(v) on the
 * unsigned map, whose smallest code is 1e-7 rather than 0, so no v reads back as 0 under a
 * nonzero m), updated in fp32 inside the step and requantised. */
typedef enum {
    HPT_OPTIM_ADAMW = 0,
    HPT_OPTIM_LION,
    HPT_OPTIM_ADAM_MINI,
    HPT_OPTIM_SGD,
    HPT_OPTIM_COUNT
} hpt_optim_kind;
const char *hpt_optim_name(hpt_optim_kind k); /* "adamw", "lion", "adam-mini", "sgd" */
/* HPT_ERR_INVALID for an unknown name. */
hpt_status hpt_optim_parse(const char *name, hpt_optim_kind *out);

/* The optimizer's settings (named after the first optimizer; every kind uses it). */
typedef struct {
    float lr;           /* peak learning rate */
    float beta1, beta2; /* SGD: beta1 is the momentum, beta2 unused */
    float eps;          /* AdamW, Adam-mini */
    float weight_decay; /* decoupled (AdamW, Lion, Adam-mini); coupled L2 for SGD, as PyTorch */
    int decay_all;      /* 1: decay every tensor; 0: only matrices (hpt_gpt2_tensor.is_matrix) */
    int optimizer;      /* hpt_optim_kind; 0 = AdamW */
    int state_bits;     /* 32 (or 0, read as 32) or 8 */
    int state32_embeddings; /* with 8-bit states: wte and wpe keep 32-bit state */
} hpt_adamw_opts;
hpt_adamw_opts hpt_adamw_defaults(void); /* 3e-4, 0.9, 0.95, 1e-8, 0.1, matrices only, AdamW fp32 */
/* Defaults of each kind: AdamW's, with Lion betas 0.9, 0.99 and lr 1e-4; SGD momentum 0.9,
 * weight decay 0, lr 0.1; Adam-mini as AdamW. */
hpt_adamw_opts hpt_optim_defaults(hpt_optim_kind k);

typedef struct hpt_optim hpt_optim;
/* Allocates the optimizer's state (optimizer category, device tier) for the model's
 * parameters: hpt_optim_state_bytes() bytes, zero. */
hpt_status hpt_optim_create(hpt_mem *mem, hpt_gpt2 *model, const hpt_adamw_opts *o,
                            hpt_optim **out);
void hpt_optim_free(hpt_optim *o);
/* One optimizer step with learning rate lr. If clip > 0 the gradients are scaled so their
 * global L2 norm is at most clip. *grad_norm_out (may be NULL) gets the norm before clipping. */
hpt_status hpt_optim_step(hpt_optim *o, float lr, float clip, float *grad_norm_out);
/* hpt_optim_step on the gradients times grad_scale (> 0; gradient accumulation passes 1/K
 * for K micro-batches summed into the gradients): the norm, the clipping and the update all
 * see grad_scale * grads. The buffer itself is not changed (the factor is applied inside the
 * update, at no extra pass). grad_scale 1 is hpt_optim_step, bit for bit. */
hpt_status hpt_optim_step_scaled(hpt_optim *o, float lr, float clip, float grad_scale,
                                 float *grad_norm_out);
/* The fused update (a model with the engine in fused mode): begin before the backward (sets
 * lr, counts the step, takes the clip factor from the previous step's norm), then the
 * backward updates each block as its gradients complete; end updates wte, wpe and the final
 * layernorm, waits for the blocks' updates and gives this step's gradient norm. */
hpt_status hpt_optim_fused_begin(hpt_optim *o, float lr, float clip);
hpt_status hpt_optim_fused_end(hpt_optim *o, float *grad_norm_out);
/* Moves the state buffers to tier (DEVICE or HOST; transfers in the timeline). While any is on
 * HOST a step is refused; the values are unchanged, so moving back continues bit for bit. */
hpt_status hpt_optim_set_tier(hpt_optim *o, hpt_tier tier);
hpt_tier hpt_optim_get_tier(const hpt_optim *o); /* DEVICE when every buffer is there */
int64_t hpt_optim_get_t(const hpt_optim *o); /* steps taken */
/* The fused update's previous gradient norm (its clip factor's source; 0: none yet), which the
 * training state saves so a resumed fused run clips its first step as the uninterrupted one. */
float hpt_optim_get_prev_norm(const hpt_optim *o);
void hpt_optim_set_prev_norm(hpt_optim *o, float norm);
void hpt_optim_set_t(hpt_optim *o, int64_t t);
const hpt_adamw_opts *hpt_optim_get_opts(const hpt_optim *o);
/* AdamW with 32-bit state only (else NULL): the moments, (num_params) floats each;
 * const-in, mutable-out like strchr. */
float *hpt_optim_m(const hpt_optim *o);
float *hpt_optim_v(const hpt_optim *o);

/* The optimizer's state as the buffers it allocated, in a fixed order (the checkpoint's):
 * first moment fp32, codes, scales; second moment fp32, codes, scales. Empty buffers are
 * listed with bytes 0 and data NULL. */
#define HPT_OPTIM_NUM_BUFS 6
typedef struct {
    void *data;         /* borrowed from the optimizer */
    size_t bytes;
    const char *name;   /* "m", "m_codes", "m_scales", "v", "v_codes", "v_scales" */
} hpt_optim_buf;
void hpt_optim_state_buffers(const hpt_optim *o, hpt_optim_buf out[HPT_OPTIM_NUM_BUFS]);
/* The bytes of state an optimizer with settings o allocates for a model of shape cfg (the
 * sum of its buffers); 0 for invalid settings. */
uint64_t hpt_optim_state_bytes(const hpt_gpt2_config *cfg, const hpt_adamw_opts *o);

/* Linear warmup from 0 to max_lr over warmup steps, then cosine to min_lr at total. */
float hpt_lr_cosine(int64_t step, int64_t total, int64_t warmup, float max_lr, float min_lr);

/* ---- io: llm.c data shards and the data loader -------------------------------------- */

/* Writes an llm.c token shard (magic 20240520, version 1, uint16 tokens), atomically. */
hpt_status hpt_shard_write(const char *path, const uint16_t *tokens, size_t n);

typedef struct hpt_dataloader hpt_dataloader;
/* Opens the shards matching a glob pattern (sorted by name). Batches are consecutive
 * windows of B*T+1 tokens, walking the shards in order and wrapping at the end. */
hpt_status hpt_dataloader_open(hpt_mem *mem, const char *pattern, int B, int T, int vocab,
                               hpt_dataloader **out);
void hpt_dataloader_free(hpt_dataloader *d);
/* inputs, targets: (B, T) int32, owned by the loader until the next call. */
hpt_status hpt_dataloader_next(hpt_dataloader *d, const int32_t **inputs,
                               const int32_t **targets);
size_t hpt_dataloader_num_tokens(const hpt_dataloader *d);
/* Position for exact resume: (shard index, token offset within the shard). */
void hpt_dataloader_get_pos(const hpt_dataloader *d, int64_t *shard, int64_t *offset);
hpt_status hpt_dataloader_set_pos(hpt_dataloader *d, int64_t shard, int64_t offset);
/* Back to the first window of the first shard (evaluation reads the same batches each time). */
hpt_status hpt_dataloader_rewind(hpt_dataloader *d);

/* ---- io: GPT-2 tokenizer -------------------------------------------------------------- */

typedef struct hpt_tokenizer hpt_tokenizer;
/* path: a directory holding GPT-2's encoder.json and vocab.bpe (encode and decode), or
 * llm.c's tokenizer file (magic 20240328; decode only). */
hpt_status hpt_tokenizer_load(const char *path, hpt_tokenizer **out);
void hpt_tokenizer_free(hpt_tokenizer *t);
int hpt_tokenizer_vocab_size(const hpt_tokenizer *t);
int hpt_tokenizer_eot(const hpt_tokenizer *t); /* <|endoftext|>, 50256 for GPT-2 */
int hpt_tokenizer_can_encode(const hpt_tokenizer *t);
/* Encodes len bytes of UTF-8 text (invalid UTF-8 is encoded byte-wise, losslessly).
 * *ids_out is malloc'd (caller frees); *n_out its length. */
hpt_status hpt_tokenizer_encode(hpt_tokenizer *t, const char *text, size_t len,
                                int32_t **ids_out, size_t *n_out);
/* The bytes of one token (not NUL-terminated); HPT_ERR_INVALID for an id out of range. */
hpt_status hpt_tokenizer_decode(const hpt_tokenizer *t, int32_t id, const char **bytes_out,
                                size_t *len_out);
/* Writes llm.c's tokenizer file (version 2), atomically. */
hpt_status hpt_tokenizer_write_llmc(const hpt_tokenizer *t, const char *path);

/* ---- train: training-state checkpoint and the trainer -------------------------------- */

/* Data and RNG position of a run, saved with weights and optimizer state. */
typedef struct {
    int64_t step;         /* optimizer steps completed */
    int64_t data_shard;   /* dataloader position */
    int64_t data_offset;
    uint64_t rng_state;   /* the trainer's RNG (sampling, future dropout) */
    int64_t total_steps;  /* the run's planned steps (schedule) */
    int32_t B, T;
    int32_t accum;        /* micro-batches per optimizer step (0 is read as 1) */
} hpt_train_pos;

/* Writes model weights, the optimizer's settings and state (moments, 8-bit codes and their
 * scales) and position to path (a file), atomically: a temporary file in the same directory,
 * fsync, rename, fsync of the directory. A CRC-32C checksum over the whole payload is
 * verified on load. Version 2; version-1 files (AdamW, fp32 moments) load as AdamW fp32. */
hpt_status hpt_state_save(const char *path, const hpt_gpt2 *model, const hpt_optim *opt,
                          const hpt_adamw_opts *ao, const hpt_train_pos *pos);
/* Creates model and optimizer from a state file (both owned by the caller); *ao_out gets the
 * optimizer settings saved with it. */
hpt_status hpt_state_load(const char *path, hpt_mem *mem, hpt_gpt2 **model_out,
                          hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                          hpt_train_pos *pos_out);
/* hpt_state_load into a model made with the offload engine (off NULL or inactive: none); the
 * same files either way. */
hpt_status hpt_state_load_offload(const char *path, hpt_mem *mem, const hpt_offload_opts *off,
                                  hpt_gpt2 **model_out, hpt_optim **opt_out,
                                  hpt_adamw_opts *ao_out, hpt_train_pos *pos_out);
/* Named extra sections of a training state (version 3): the hybrid schedule's controller,
 * predictor and rollback snapshot. Saving borrows data; loading allocates each section's data
 * on the host tier (category io), released with hpt_state_sections_free. Files of versions 1
 * and 2 load with no sections. At most HPT_STATE_MAX_SECTIONS, names up to 15 characters.
 * The state adds one of its own for a model with bf16-kahan weights, "bf16_comp" (their
 * compensation; a caller's section may not take that name, and at most
 * HPT_STATE_MAX_SECTIONS - 1 go beside it), which a load restores and does not hand back. */
#define HPT_STATE_MAX_SECTIONS 16
typedef struct {
    char name[16];
    void *data;
    uint64_t bytes;
} hpt_state_section;
hpt_status hpt_state_save_sections(const char *path, const hpt_gpt2 *model, const hpt_optim *opt,
                                   const hpt_adamw_opts *ao, const hpt_train_pos *pos,
                                   const hpt_state_section *sec, int n_sec);
hpt_status hpt_state_load_sections(const char *path, hpt_mem *mem, hpt_gpt2 **model_out,
                                   hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                                   hpt_train_pos *pos_out,
                                   hpt_state_section sec_out[HPT_STATE_MAX_SECTIONS],
                                   int *n_sec_out);
/* hpt_state_load_sections into a model made with the offload engine (off NULL or inactive:
 * none). */
hpt_status hpt_state_load_offload_sections(const char *path, hpt_mem *mem,
                                           const hpt_offload_opts *off, hpt_gpt2 **model_out,
                                           hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                                           hpt_train_pos *pos_out,
                                           hpt_state_section sec_out[HPT_STATE_MAX_SECTIONS],
                                           int *n_sec_out);
void hpt_state_sections_free(hpt_mem *mem, hpt_state_section *sec, int n_sec);

/* ---- io: llm.c reference state (verification) ------------------------------------------ */

typedef struct {
    int B, T, V, Vp;   /* V, Vp from the model the state belongs to */
    int32_t *x, *y;    /* (B, T) */
    float *logits;     /* (B, T, V), unpadded */
    float loss;
    float *grads;      /* (num_params) in checkpoint order with padding */
} hpt_ref_state;
/* Reads a reference state (magic 20240327, version 2) for the given model config; buffers
 * come from mem (IO category). */
hpt_status hpt_ref_state_load(const char *path, hpt_mem *mem, const hpt_gpt2_config *cfg,
                              hpt_ref_state *out);
void hpt_ref_state_free(hpt_mem *mem, const hpt_gpt2_config *cfg, hpt_ref_state *s);





/* ---- mem: profile summaries, traces (src/mem/profile.c) -------------------------------- */
/* (section owned by the profiler work; see docs/memory.md)
 *
 * A trace is the event timeline of a run plus what is needed to read it: budgets, model
 * shape, batch, and the process's RSS before and at its peak. A summary turns events into
 * figures: per-phase mean / max / min, the peak with what was live at it, spikes. The SVG is
 * memory over time stacked by category. Events are replayed, never sampled, so the summary's
 * peak is exactly hpt_mem_get_stats' peak when recording started with the hpt_mem.
 *
 *   hpt_mem_record(mem, 1);            ... run ...
 *   hpt_trace_meta meta = hpt_trace_meta_defaults();   (fill what is known)
 *   size_t n; const hpt_mem_event *ev = hpt_mem_events(mem, &n);
 *   hpt_trace_write_json("run.json", &meta, ev, n);
 *   hpt_trace *tr; hpt_trace_load("run.json", &tr);
 *   hpt_profile_summary s; hpt_profile_summarize(tr->events, tr->n_events, 25.0, &s);
 *   hpt_profile_render_svg(tr, &s, "run.svg");
 *   hpt_profile_summary_free(&s); hpt_trace_free(tr); */

#define HPT_TRACE_VERSION 1
typedef struct {
    int version;                                  /* HPT_TRACE_VERSION */
    uint64_t budget_bytes[HPT_TIER_COUNT];        /* 0: unlimited */
    hpt_gpt2_config cfg;                          /* all zero when unknown */
    uint64_t num_params;
    int B, T;
    int has_val;                                  /* a validation set was evaluated */
    int threads;
    int64_t steps;                                /* optimizer steps completed in the trace */
    uint64_t rss_baseline_bytes;                  /* RSS before hptrain allocated anything */
    uint64_t rss_peak_bytes;                      /* the process's peak RSS at the end */
    uint64_t accounted_peak_bytes[HPT_TIER_COUNT]; /* hpt_mem_stats.peak_bytes at the end */
} hpt_trace_meta;
hpt_trace_meta hpt_trace_meta_defaults(void);     /* version set, everything else 0 */

/* A trace read back. The events' names point into storage the trace owns. */
typedef struct {
    hpt_trace_meta meta;
    hpt_mem_event *events;                        /* (n_events) */
    size_t n_events;
    char *names;                                  /* owned: the distinct names, NUL-separated */
} hpt_trace;

/* Writes meta and events as one JSON object {"format": "hptrain-trace", "version",
 * "meta": {...}, "events": [{...}, ...]}, one event per line; or as CSV: "# key=value" lines
 * with the metadata, a header row, one row per event. Names are quoted, enum fields are
 * written as their names (hpt_phase_name, ...). Atomic (temporary name, rename). */
hpt_status hpt_trace_write_json(const char *path, const hpt_trace_meta *meta,
                                const hpt_mem_event *ev, size_t n);
hpt_status hpt_trace_write_csv(const char *path, const hpt_trace_meta *meta,
                               const hpt_mem_event *ev, size_t n);
/* By the path's extension: ".csv" CSV, anything else JSON. */
hpt_status hpt_trace_write(const char *path, const hpt_trace_meta *meta,
                           const hpt_mem_event *ev, size_t n);
/* Reads a trace written by either writer (detected from the first byte). HPT_ERR_FORMAT with
 * the line or event index when malformed. */
hpt_status hpt_trace_load(const char *path, hpt_trace **out);
void hpt_trace_free(hpt_trace *tr);

/* Per phase: the device tier's accounted bytes and the bytes live inside activation arenas.
 * Means are time-weighted (a value holds until the next event), over the events tagged with
 * the phase; a phase with no time between its events takes the plain mean of its events. */
typedef struct {
    uint64_t n_events;
    double seconds;                    /* time attributed to the phase */
    double mean_bytes;
    uint64_t max_bytes, min_bytes;
    double arena_mean_bytes;
    uint64_t arena_max_bytes, arena_min_bytes;
} hpt_profile_phase;

typedef struct {
    const char *name;                  /* the buffer's name (borrowed from the events) */
    int layer;                         /* the layer context when it was born; -1 outside */
    uint64_t bytes;
} hpt_profile_buf;

/* A run of consecutive events whose in-use bytes stay above the threshold (the mean in-use bytes
 * of the event's phase times 1 + pct/100), at its highest. Setup has none: it only grows. */
typedef struct {
    size_t event;                      /* index of the highest event of the run */
    double t, duration_s;
    int64_t step;
    int phase, layer;
    uint64_t bytes;                    /* in-use bytes at the highest event */
    double threshold_bytes;            /* the phase's mean in-use bytes times (1 + pct/100) */
    const char *name;                  /* the latest buffer born at the top; NULL if unnamed */
} hpt_profile_spike;

/* "In use" on the device tier: accounted bytes, counting the activation category by what is
 * live inside arenas instead of the arenas' reserved size (activations on the device are only
 * allocated through the arena plan). */
typedef struct {
    size_t n_events;
    double duration_s;
    int64_t max_step;
    hpt_profile_phase phase[HPT_PHASE_COUNT];
    hpt_profile_phase in_use[HPT_PHASE_COUNT];   /* the same statistics of in-use bytes */
    uint64_t peak_bytes[HPT_TIER_COUNT];         /* max of the accounted total per tier */
    /* The device peak moment: the accounted total at its maximum and, among such events, the
     * one with the most bytes live inside arenas. */
    size_t peak_event;
    double peak_t;
    int64_t peak_step;
    int peak_phase, peak_layer;
    uint64_t peak_by_cat[HPT_CAT_COUNT];         /* device accounted bytes at that moment */
    uint64_t peak_unrecorded_bytes;              /* device bytes live before recording began */
    uint64_t peak_arena_live_bytes;
    hpt_profile_buf *peak_bufs;                  /* (n_peak_bufs) malloc'd, largest first */
    size_t n_peak_bufs;
    uint64_t arena_live_max_bytes;               /* over the whole trace */
    uint64_t in_use_max_bytes;
    double spike_pct;
    hpt_profile_spike *spikes;                   /* (n_spikes) malloc'd, in time order */
    size_t n_spikes;
    uint64_t n_allocs, n_frees, n_refused, n_transfers;
    uint64_t transfer_bytes[HPT_TIER_COUNT][HPT_TIER_COUNT]; /* [src][dst] */
} hpt_profile_summary;

/* Summarizes events (borrowed; the summary's names point into them). spike_pct >= 0. */
hpt_status hpt_profile_summarize(const hpt_mem_event *ev, size_t n, double spike_pct,
                                 hpt_profile_summary *out);
void hpt_profile_summary_free(hpt_profile_summary *s);
/* Renders the device tier over time as an SVG: stacked areas by category (the arena split into
 * its live part and its reserved-but-free part), phases shaded, steps marked, the peak marked
 * and labelled, the budget line when meta has one, axes with units, a legend. */
hpt_status hpt_profile_render_svg(const hpt_trace *tr, const hpt_profile_summary *s,
                                  const char *path);

/* ---- end of profile section ---- */

/* ---- train: the hybrid predict schedule (docs/predict.md) --------------------------
 *
 * A run in four phases: WARMUP (ordinary steps; the statistics start), FULL (ordinary steps
 * that also fit the predictor), PREDICT (the weights move by predicted per-parameter updates:
 * no data, no forward except optional checks, no backward; gradients and activations are
 * released and optimizer state the predictor does not read moves to the host tier), CORRECT
 * (ordinary steps again; the first one measures the prediction's error and may roll back).
 *
 *   WARMUP --warmup_steps--> FULL --full_steps, confidence >= threshold--> PREDICT
 *   FULL --full_steps, confidence below (or too few steps left)--> FULL (another round)
 *   PREDICT --horizon steps--> CORRECT; --loss above the band (a check)--> CORRECT (early);
 *           --loss beyond the rollback bound--> weights back to the phase's start, CORRECT
 *   CORRECT --correct_steps, confident--> PREDICT;  --not confident--> FULL
 * The horizon of a predict phase: max(1, round(max_predict_steps * cap * r)), r = (c - thr) /
 * (1 - thr) for confidence c and threshold thr (1 when thr = 1), cap in (0, 1] halved after each
 * early end or rollback and doubled (up to 1) after each clean phase; never past the point where
 * correct_steps would no longer fit before the run's end. */
typedef enum { HPT_SCHEDULE_FULL = 0, HPT_SCHEDULE_HYBRID } hpt_schedule_kind;
typedef enum {
    HPT_PREDICTOR_ADAM = 0, /* the optimizer's own direction: AdamW fp32 m / (sqrt(v) + eps) */
    HPT_PREDICTOR_LINEAR,   /* per-parameter weighted linear fit of the recent weights */
    /* 2, 3: the testing predictors (zero, garbage), internal; checkpoints store the values */
    HPT_PREDICTOR_COUNT = 4 /* bound on the values a plan or checkpoint may hold */
} hpt_predictor_kind;
/* "adam", "linear" (and the testing predictors' "zero", "garbage"); "?" out of range. */
const char *hpt_predictor_name(hpt_predictor_kind k);
/* "adam" or "linear"; anything else is HPT_ERR_INVALID. */
hpt_status hpt_predictor_parse(const char *name, hpt_predictor_kind *out);

typedef struct {
    int kind;                  /* hpt_schedule_kind */
    int64_t warmup_steps;      /* WARMUP steps at the start (>= 0) */
    int64_t full_steps;        /* FULL steps before a predict phase is considered (>= 1) */
    int64_t max_predict_steps; /* the longest predict phase (>= 1) */
    float confidence;          /* threshold in [0, 1] on the dynamics model's confidence */
    int64_t correct_steps;     /* CORRECT steps after each predict phase (>= 1) */
    int predictor;             /* hpt_predictor_kind */
    int64_t check_every;       /* a forward on the check batch every K predict steps; 0: none */
    int check_weights;         /* hpt_weights of the checks' forward: F32 (the model's weights,
                                * one sequence at a time), or Q8 (int8 copies of the current
                                * weights, one scale per output channel, made for each check and
                                * freed after it; hpt_infer_loss) */
    float band;                /* relative excess of the loss over its prediction that ends a
                                * predict phase early; also the confidence's error scale */
    float rollback;            /* relative excess beyond which the weights roll back (>= band) */
    float fit_decay;           /* linear predictor: weight of a sample one step older (0, 1) */
} hpt_schedule_opts;
/* Full-only; hybrid values: warmup 50, full 20, max predict 20, confidence 0.5, correct 2,
 * adam, no checks (fp32 when on), band 0.05, rollback 0.2, fit decay 0.9. */
hpt_schedule_opts hpt_schedule_defaults(void);
/* HPT_ERR_INVALID naming the field out of range. */
hpt_status hpt_schedule_check(const hpt_schedule_opts *o);

/* The controller: plain data, checkpointed with the run. */
typedef struct {
    int phase;                 /* hpt_phase of the next step */
    int64_t in_phase;          /* steps done in the current phase */
    int64_t horizon;           /* PREDICT: the phase's planned length */
    float cap;                 /* horizon scale in (0, 1] */
    int clean;                 /* the last predict phase ran its horizon without divergence */
    int64_t n_predict_phases, n_predict_steps, n_early, n_rollback;
} hpt_schedule;

/* What a step observed, for the transition after it. */
typedef struct {
    float confidence;          /* the dynamics model's after the step, in [0, 1] */
    int diverged;              /* PREDICT or a CORRECT phase's first step: 0 within the band,
                                * 1 above it, 2 beyond the rollback bound (rolled back) */
    int64_t steps_left;        /* optimizer steps of the run after this one */
} hpt_schedule_obs;
void hpt_schedule_init(hpt_schedule *s, const hpt_schedule_opts *o);
/* The transition after one step in phase s->phase (the diagram above). */
void hpt_schedule_advance(hpt_schedule *s, const hpt_schedule_opts *o, const hpt_schedule_obs *ob);
/* The horizon rule alone (>= 1). */
int64_t hpt_schedule_horizon(const hpt_schedule_opts *o, float confidence, float cap);

/* ---- train: the trainer ------------------------------------------------------------- */

/* Loss scaling (docs/offload.md, "16-bit gradient homes"). The backward computes S times the
 * loss's gradients (S a power of two, so every gradient is exactly S times the unscaled one);
 * before the update they are taken times 1/S (folded into the clip factor, with accumulation's
 * 1/accum), so with fp32 gradients a scaled run computes the unscaled run's bits. After each
 * step's backward the trainer asks whether a gradient overflowed: fp16 homes check every value
 * as it is narrowed (|x| > 65504 or not finite), every other gradient (fp32 and bf16 homes, the
 * flat wte, wpe and lnf gradients) is checked for non-finite values. On an overflow in any
 * micro-batch the step is skipped: weights and optimizer state stay as they were, the
 * optimizer's step count (AdamW's bias correction) does not advance; the trainer's step, the
 * learning-rate schedule and the data position do (the step's tokens are consumed). DYNAMIC
 * then halves S (not below 1) and doubles it (up to 2^24) after `window` clean steps in a row;
 * STATIC keeps S. Scale, clean-step count and skipped steps are saved in the training state
 * (section "loss_scale"), so a resumed run continues with the uninterrupted one's bits.
 * Exact mode only (not with the fused update, which updates before the backward is over),
 * not with the hybrid schedule. */
typedef enum { HPT_LOSS_SCALE_OFF = 0, HPT_LOSS_SCALE_STATIC, HPT_LOSS_SCALE_DYNAMIC } hpt_loss_scale_mode;
typedef struct {
    int mode;              /* hpt_loss_scale_mode */
    float init;            /* S at the start (a power of two, 1 to 2^64) */
    int64_t window;        /* DYNAMIC: clean steps in a row before S doubles (>= 1) */
} hpt_loss_scale_opts;
hpt_loss_scale_opts hpt_loss_scale_defaults(void); /* OFF, init 65536, window 2000 */
/* "off" | "dynamic" | a power of two N (STATIC at N) into o (mode, and init for N). */
hpt_status hpt_loss_scale_parse(const char *text, hpt_loss_scale_opts *o);

/* ---- plan: every technique choice and the budgets (src/plan/plan_opts.c) -------------
 *
 * An hpt_plan holds each choice a run makes about memory and speed: what the activation arena
 * keeps (act), the optimizer and its state width (adamw), the offload engine (offload), loss
 * scaling, gradient accumulation, the schedule, and the budget of each tier with the disk
 * tier's directory. hpt_train_opts and the estimator's hpt_plan_opts carry one.
 *
 *   hpt_plan p = hpt_plan_default_choices();
 *   hpt_plan_set(&p, "recompute", "selective");      // one option by name, as the command
 *   hpt_plan_set(&p, "fused-update", NULL);          // line's --recompute, --fused-update
 *   hpt_plan_env env = {.training = 1, .has_val = -1};
 *   if (hpt_plan_check(&p, &env) != HPT_OK) ...      // every compatibility rule, one place
 *   char flags[1024]; hpt_plan_print(&p, flags, sizeof flags); // "--recompute selective ..."
 *
 * Options are named as the command line's flags without the dashes: each flag --NAME is the
 * option NAME. Messages of hpt_plan_set start with the option's name ("accum expects an
 * integer ..."; "attention: attention 'x': expected flash or plain"), so the command line
 * writes "--" before them; hpt_plan_check's messages name the options in the flags' spelling.
 *
 * The members are listed once (HPT_PLAN_MEMBERS) so that hpt_train_opts and hpt_plan_opts can
 * hold a plan and also reach its members by their own names (o.act is o.plan.act). */
#define HPT_PLAN_MEMBERS \
    hpt_gpt2_act_opts act;      /* attention, recompute, activation offload/compression, head chunk */ \
    hpt_adamw_opts adamw;       /* optimizer kind, state bits, 32-bit embedding state; its
                                 * settings (lr inside is ignored: the trainer's schedule sets it) */ \
    hpt_offload_opts offload;   /* homes, K, P, fused update, weights, gradient home, embeddings,
                                 * vocabulary chunk */ \
    hpt_loss_scale_opts loss_scale; /* off by default; needed by fp16 gradient homes */ \
    hpt_schedule_opts sched;    /* full-only (default) or the hybrid predict schedule */ \
    int accum;                  /* micro-batches of B sequences per optimizer step (0 is read as
                                 * 1): their gradients are summed and scaled by 1/accum, the same
                                 * update as one batch of accum*B; activations are for B only */ \
    uint64_t budget_bytes[HPT_TIER_COUNT]; /* per tier; 0: unlimited */ \
    const char *offload_dir;    /* the disk tier's directory (borrowed), or NULL */ \
    uint64_t given;             /* bit i: option i (hpt_plan_option_name) was set by
                                 * hpt_plan_set; 0 in a plan made in code. Choices whose default
                                 * follows another (SGD's weight decay, the loss scale of fp16
                                 * gradient homes) and rules about what was given use it */
typedef struct { HPT_PLAN_MEMBERS } hpt_plan;

/* AdamW fp32, no recompute, flash attention, no offload, no loss scale, accum 1, full-only
 * schedule, no budgets. (hpt_plan_defaults is the estimator's options, below.) */
hpt_plan hpt_plan_default_choices(void);
/* Sets one option from its text (value NULL for the options that take none: fused-update,
 * state-32bit-embeddings). HPT_ERR_INVALID for an unknown option or a bad value, the message
 * starting with the option's name. Values are checked for syntax and range here; how choices
 * combine is hpt_plan_check's. */
hpt_status hpt_plan_set(hpt_plan *p, const char *option, const char *value);
/* The i-th option's name (NULL past the last) and whether it takes a value. */
const char *hpt_plan_option_name(int i, int *takes_value);

/* What hpt_plan_check knows of the run beside the plan. */
typedef struct {
    int training;      /* 0: forward only: the optimizer's and the update's rules do not apply */
    int has_val;       /* -1: not known (no rule about it); 0 or 1: validation data given */
    int need_disk_dir; /* 1: disk homes and disk activation offload need p->offload_dir (the
                        * command line; a library caller may call hpt_mem_set_disk_dir) */
} hpt_plan_env;
/* Every rule on how the plan's choices combine and on their ranges: HPT_ERR_INVALID or
 * HPT_ERR_UNSUPPORTED with a one-line reason naming the options. env NULL: training, validation
 * unknown, no directory rule. (Rules on the model's shape, such as the vocabulary chunk's
 * multiple, are the estimator's and the model's.) */
hpt_status hpt_plan_check(const hpt_plan *p, const hpt_plan_env *env);
/* Writes the options that reproduce p (those not at their default) as command-line flags,
 * "--recompute selective --fused-update", "" for the default plan; hpt_plan_set of each gives
 * p back (given aside). HPT_ERR_INVALID if n is too small (buf then holds a cut text). */
hpt_status hpt_plan_print(const hpt_plan *p, char *buf, size_t n);

/* ---- plan: the estimator ---------------------------------------------------------------- */

/* What a run will allocate, computed from the configuration alone (nothing is allocated, no
 * file is read). The figures are the bytes the run's hpt_mem accounts, byte for byte, on the
 * device tier: parameters and gradients (4 bytes each, wte's padding rows included; the model
 * allocates gradients also for forward-only use), the optimizer's state (training only:
 * hpt_optim_state_bytes restated per optimizer and state width, docs/optimizers.md; AdamW fp32
 * 8 bytes per parameter), the activation arena (hpt_gpt2_activation_bytes: planned for forward and
 * backward, so a forward-only run allocates the same), and each data loader's buffers
 * ((B*T+1)*2 + 2*B*T*4 bytes). All of them are allocated at setup or at the first forward and
 * live until the run ends, so the peak is their sum, reached at the first forward.
 * FLOPs count matrix multiplies and attention only (docs/estimate.md):
 *   forward per token  = 2*(12*L*C^2 + Vp*C) + 2*L*C*(T+1)   (causal attention as computed:
 *                        position t attends t+1 keys, QK^T and AV at 2 FLOPs per multiply-add)
 *   training per token = 3 * forward                          (backward = 2 * forward) */
typedef struct {
    hpt_gpt2_config cfg;
    int B, T;            /* batch and sequence length; 1 <= T <= cfg.maxT */
    int training;        /* 1: forward + backward + AdamW; 0: forward only (sampling, eval) */
    int has_val;         /* a validation loader is open (its data buffers count) */
    int no_data;         /* 1: no data loader at all (generation from a prompt); 0: the training
                          * data loader's buffers count, in forward-only runs too (evaluation) */
    /* every technique choice; also by the members' own names (o.act is o.plan.act). Read here:
     * act (the activation arena); adamw's optimizer, state_bits (32, or 0, or 8) and
     * state32_embeddings (training only); accum (tokens and FLOPs per step follow it, memory
     * does not); offload (all zero or inactive: none); sched's kind (training only; HYBRID: the
     * linear predictor's two sums per parameter (device, optim) at the peak, the rollback
     * snapshot (host, params) and the check batch (host, io: 2*B*T int32) beside it, and
     * predict_peak_bytes below), predictor, check_every (> 0: predict-phase checks,
     * one-sequence forwards, which need has_val) and check_weights (F32: the model's, a B=1
     * arena; Q8: an int8 hpt_infer made for each check, hpt_infer_bytes_for at ctx T plus
     * hpt_infer_loss_bytes_for, instead of the arena). The budgets are not read (the fit
     * functions below take theirs; hpt_plan_check_tiers compares them). */
    union {
        hpt_plan plan;
        struct { HPT_PLAN_MEMBERS };
    };
} hpt_plan_opts;
/* gpt2-124m, B=4, T=64, training with AdamW fp32, no validation: the trainer's defaults. */
hpt_plan_opts hpt_plan_defaults(void);

typedef struct {
    uint64_t bytes[HPT_TIER_COUNT][HPT_CAT_COUNT]; /* at the peak */
    uint64_t peak_bytes[HPT_TIER_COUNT];
    uint64_t num_params;
    uint64_t activation_bytes;     /* the planned activation arena */
    double flops_per_token;        /* the run's: training 3 x forward; forward-only = forward */
    double flops_per_token_fwd;
    uint64_t tokens_per_step;      /* accum*B*T: tokens per optimizer step */
    /* hybrid schedule: each tier's peak during PREDICT steps (docs/predict.md): parameters, the
     * data loaders, the optimizer's state where the predictor reads it (adam) or on the host
     * (others), the linear predictor's velocities, the snapshot and check batch (host), the
     * checks' one-sequence arena. All zero without the hybrid schedule. */
    uint64_t predict_peak_bytes[HPT_TIER_COUNT];
} hpt_estimate;

/* HPT_ERR_SHAPE for a bad shape or T > maxT, HPT_ERR_INVALID for B or T < 1 or a run too large
 * to count in 64 bits. */
hpt_status hpt_plan_estimate(const hpt_plan_opts *o, hpt_estimate *out);

/* What fits a device budget of budget_bytes (0: unlimited), searched with the estimator
 * (nothing is allocated; a few estimates, the peak being affine in B and convex in T). A max_*
 * field is 0 where nothing fits. */
typedef struct {
    int fits;                     /* o itself fits */
    uint64_t peak_bytes;          /* o's device peak */
    int max_B;                    /* the largest batch at o->T that fits (up to 1 << 20) */
    uint64_t max_B_peak_bytes;
    int max_T;                    /* the largest sequence at o->B that fits (up to maxT) */
    uint64_t max_T_peak_bytes;
    int max_T_B1;                 /* the largest sequence at B = 1 that fits */
    uint64_t max_T_B1_peak_bytes;
    uint64_t min_peak_bytes;      /* the peak at B = 1, T = 1 */
    uint64_t fixed_bytes;         /* what B and T do not change: params, grads, optim */
} hpt_plan_fit;
hpt_status hpt_plan_fit_budget(const hpt_plan_opts *o, uint64_t budget_bytes, hpt_plan_fit *out);

/* The trainer's refusal before it allocates: HPT_OK when o's estimated device peak plus
 * live_bytes (already allocated in the same hpt_mem) is within budget_bytes (0: unlimited);
 * otherwise HPT_ERR_OOM with a one-line hpt_last_error() that gives the breakdown and the
 * --batch / --seq that would fit with their estimated peaks, or says that the model itself
 * does not fit the budget. Estimator errors (a bad shape, T > maxT) are returned as they are. */
hpt_status hpt_plan_check_budget(const hpt_plan_opts *o, uint64_t budget_bytes,
                                 uint64_t live_bytes);

/* Each tier's peak in e (full phase; with the hybrid schedule also its predict phase) against
 * p's budget for the tier (0: unlimited): HPT_OK when all fit, else HPT_ERR_OOM naming the
 * first tier that does not ("the host tier's estimated peak ... passes --host-memory ..."). */
hpt_status hpt_plan_check_tiers(const hpt_plan *p, const hpt_estimate *e);

/* The shape in an llm.c GPT-2 checkpoint's header, checked as hpt_gpt2_load checks it (magic,
 * version, shape, file size); the payload is not read (src/io/llmc.c). */
hpt_status hpt_gpt2_read_config(const char *path, hpt_gpt2_config *out);

typedef struct {
    const char *model;     /* llm.c checkpoint path or SHAPE (random init); unused on resume */
    const char *data;      /* glob of training shards */
    const char *val;       /* glob of validation shards, or NULL */
    const char *resume;    /* directory holding state.bin, or NULL */
    const char *save_dir;  /* directory for state.bin and model.bin, or NULL */
    int B, T;
    int64_t steps;         /* total optimizer steps of the run (a resumed run continues to it) */
    float lr, min_lr;      /* peak and final learning rate (cosine) */
    int64_t warmup;        /* linear warmup steps */
    float grad_clip;       /* global-norm clip; 0 disables */
    int64_t eval_every;    /* validation every N steps and at the end; 0: only at the end */
    int val_batches;       /* batches per validation */
    int64_t save_every;    /* checkpoint every N steps and at the end; 0: only at the end */
    uint64_t seed;
    /* every technique choice and the budgets (hpt_trainer_create applies the plan's budgets
     * and disk directory to its hpt_mem); also by the members' own names: o.act is o.plan.act */
    union {
        hpt_plan plan;
        struct { HPT_PLAN_MEMBERS };
    };
} hpt_train_opts;
hpt_train_opts hpt_train_defaults(void);
/* The estimator's options for the run o describes on the shape cfg (what the trainer's budget
 * check estimates; hpt_plan_estimate of it gives the run's peaks). */
hpt_plan_opts hpt_train_plan_opts(const hpt_train_opts *o, const hpt_gpt2_config *cfg);

typedef struct {
    int64_t step, total;   /* steps completed after this call, of total */
    float loss;            /* training loss of this step's batch, before its update (with
                            * accumulation: the mean of the micro-batches' losses) */
    float val_loss;        /* when evaluated is 1 */
    int evaluated, saved;
    float lr, grad_norm;
    double step_ms;        /* forward + backward + update (not evaluation or saving) */
    double tokens_per_s;
    uint64_t mem_peak_bytes; /* accounted device-tier peak so far */
    uint64_t rss_peak_bytes;
    int phase;             /* hpt_phase of this step (FULL throughout a full-only run) */
    float pred_loss;       /* the dynamics model's predicted loss of this step (NaN if none) */
    float confidence;      /* the dynamics model's confidence after the step, [0, 1] */
    int checked;           /* PREDICT: a check forward ran; loss is its loss (NaN otherwise) */
    int diverged;          /* 1: the phase ended early; 2: the weights were rolled back */
    float loss_scale;      /* the loss scale this step used (1 without loss scaling) */
    int skipped;           /* 1: a gradient overflowed, the update was skipped */
    int64_t skipped_total; /* steps skipped so far in the run (a resumed run counts from its
                            * first start: the count is in the checkpoint) */
} hpt_train_progress;

typedef struct hpt_trainer hpt_trainer;
/* Builds model, optimizer and data loaders from opts (loading or resuming as asked). First
 * sets on mem the budgets the plan names (those not 0) and its disk directory, and checks the
 * plan (hpt_plan_check); then refuses, before allocating for it, a run whose estimated device
 * peak passes the device budget (the plan's, or else one set on mem beforehand). */
hpt_status hpt_trainer_create(hpt_mem *mem, const hpt_train_opts *opts, hpt_trainer **out);
void hpt_trainer_free(hpt_trainer *tr);
/* Runs one optimizer step (plus evaluation and checkpoint when due). */
hpt_status hpt_trainer_step(hpt_trainer *tr, hpt_train_progress *out);
int hpt_trainer_done(const hpt_trainer *tr);
/* Evaluates the validation loss now (NaN if there is no validation data). */
hpt_status hpt_trainer_eval(hpt_trainer *tr, float *val_loss_out);
/* Writes save_dir/state.bin and save_dir/model.bin now (needs save_dir). */
hpt_status hpt_trainer_save(hpt_trainer *tr);
hpt_gpt2 *hpt_trainer_model(hpt_trainer *tr);
int64_t hpt_trainer_start_step(const hpt_trainer *tr);       /* > 0 after a resume */
/* The optimizer settings in use (a resumed run's come from its checkpoint). */
const hpt_adamw_opts *hpt_trainer_optim_opts(const hpt_trainer *tr);
size_t hpt_trainer_train_tokens(const hpt_trainer *tr);
/* The hybrid schedule's controller (phase of the next step, counts); FULL in a full-only run. */
const hpt_schedule *hpt_trainer_schedule(const hpt_trainer *tr);

/* ---- train: verification against a PyTorch reference state -------------------------- */

#define HPT_VERIFY_MAX_STEPS 64
typedef struct {
    hpt_gpt2_config cfg;
    int B, T;
    double logits_rel_err;                       /* ||ours - ref|| / ||ref|| over (B,T,V) */
    double loss_rel_err;
    float loss, ref_loss;
    double grad_rel_err[HPT_GPT2_NUM_TENSORS];   /* norm-wise, per tensor */
    const char *grad_name[HPT_GPT2_NUM_TENSORS];
    int n_steps;                                 /* AdamW steps compared (0: no steps file) */
    float step_loss[HPT_VERIFY_MAX_STEPS], ref_step_loss[HPT_VERIFY_MAX_STEPS];
    double max_step_rel_err;
    double tol;
    int passed;                                  /* every figure within tol */
} hpt_verify_report;

/* Loads an llm.c checkpoint and reference state, runs forward and backward on its batch and
 * compares logits, loss and every gradient; with steps_json (may be NULL: llm.c-style JSON
 * with "adamw": {lr, beta1, beta2, eps, weight_decay} and "losses": [...]) also runs that
 * many AdamW steps (weight decay on every tensor) comparing the loss before each. Returns
 * HPT_OK when the comparison ran (see report->passed), an error status otherwise. */
hpt_status hpt_verify(hpt_mem *mem, const char *model_path, const char *state_path,
                      const char *steps_json, double tol, hpt_verify_report *report);

#ifdef __cplusplus
}
#endif
#endif /* HPTRAIN_H */
