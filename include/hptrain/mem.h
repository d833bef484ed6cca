/* hptrain/mem.h: the memory manager: tiers, categories, budgets, accounting. Part of hptrain.h.
 *
 * An hpt_mem owns every byte of tensor storage a run makes, on three tiers (the device, host
 * memory, a disk directory), counted by category (parameters, gradients, optimizer state,
 * activations, workspace, io) and refused past each tier's budget with HPT_ERR_OOM, a
 * recoverable status. hpt_mem_get_stats reads the counts and peaks; recording keeps the event
 * timeline that hptrain/profile.h summarises. Create one per run, before the model; it must
 * outlive everything allocated from it. */
#ifndef HPTRAIN_MEM_H
#define HPTRAIN_MEM_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

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
 * data moves with hpt_mem_disk_write/read, and each call is a transfer in the timeline.
 * Every 4096-byte page carries a CRC-32C kept in memory, set when the page is written and
 * checked each time it is read: a page changed on disk underneath is HPT_ERR_CHECKSUM naming
 * the block (unit_bytes) and the page, never wrong data. */
typedef struct {
    int fd;          /* -1: none */
    uint64_t bytes;  /* requested size */
    uint32_t *crc;   /* (pages) CRC-32C of each 4096-byte page as last written (disk.c) */
    int cat;         /* hpt_category, for error messages */
    uint64_t unit_bytes; /* the owner's block size, so an error names a block (0: none) */
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

#endif /* HPTRAIN_MEM_H */
