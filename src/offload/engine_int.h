/* engine_int.h: the offload engine's private parts, shared by its files: engine.c (sizes, the
 * worker and its queue, residency, setup), engine_gather.c (gather and scatter between steps)
 * and engine_opts.c (the options, public, need none of this). The engine's state, its job
 * queue and residency states are described with their invariants at the top of engine.c. */
#ifndef HPT_OFFLOAD_ENGINE_INT_H
#define HPT_OFFLOAD_ENGINE_INT_H

#include "offload/engine.h"
#include "core/core.h"
#include "kernels/backend.h"
#include "mem/mem.h"

#include <pthread.h>

enum { RS_HOME = 0, RS_LOADING, RS_RESIDENT, RS_DIRTY, RS_WRITING_BACK };
enum { J_LOAD = 0, J_WRITE_G, J_UPDATE, J_READ, J_WRITE, J_READ_G, J_READ_MV, J_WRITE_PMV };
#define QCAP 64
#define ALIGN_BYTES 4096u

typedef struct {
    int kind, l, slot, g, set;
    int ok;          /* set by the worker: the job ran without error */
    int ovf;         /* set by the worker: J_WRITE_G narrowed an overflowing value */
} job;

static const hpt_category k_cat[EB_COUNT] = {HPT_CAT_PARAMS, HPT_CAT_GRADS, HPT_CAT_OPTIM,
                                             HPT_CAT_OPTIM};

/* The worker's transfers by direction (engine_io.c): nanoseconds and bytes, added atomically
 * by the thread doing the transfer; busy_t0 the start of the disk transfer in flight (0: none). */
typedef struct {
    uint64_t ns[3], bytes[3];  /* ECTR_DISK_READ, ECTR_DISK_WRITE, ECTR_HOST_COPY */
    uint64_t busy_t0;
    double disk_in_wait_s;     /* disk seconds while the compute thread waited */
    double wait_s[4];          /* compute waits by the waited job's class (ECTR_*, ECTR_UPDATE) */
} eng_io_ctr;
enum { ECTR_DISK_READ = 0, ECTR_DISK_WRITE, ECTR_HOST_COPY, ECTR_UPDATE };

struct offload_engine {
    hpt_mem *mem;              /* borrowed */
    const hpt_backend *be;     /* every op and device copy (the CPU's for now) */
    hpt_offload_opts o;
    int L, ns;
    size_t slice_n[ENG_MAX_SLICES], slice_off[ENG_MAX_SLICES];
    size_t slice_row[ENG_MAX_SLICES]; /* each slice's optimizer row (eng_create_rows) */
    int has_rows;              /* slice_row given: shard boundaries also on blocks and rows */
    size_t bn;                 /* floats per block */
    size_t stride;             /* floats between blocks: bn rounded up to 4096 bytes */
    hpt_tier tier[EB_COUNT];
    int has[EB_COUNT];         /* the home exists */
    float *home[EB_COUNT];     /* (L, stride) memory homes (P: NULL with bf16 weights) */
    int bf;                    /* HPT_BW_*: bf16 weights keep P in wh (and wc, Kahan) */
    size_t hstride;            /* bf16 values between blocks: bn rounded up to 4096 bytes */
    uint16_t *wh, *wc;         /* (L, hstride) bf16 weights; (L, cstride) their compensation
                                * (Kahan; with ZeRO this rank's range [zlo, zhi) of each block) */
    size_t cstride;            /* compensation values between blocks: hstride, with ZeRO hstr */
    uint16_t *wcw;             /* ZeRO: the whole compensation gathered for a checkpoint
                                * (eng_comp, until eng_comp_done), or NULL */
    int bfd;                   /* bf16 weights on disk (disk[EB_P] holds them, wh is NULL) */
    uint16_t *bstage;          /* (2, hstride) host io: bfd's staging blocks */
    int zc;                    /* P's home is the fp32 device slot itself (zero copy) */
    hpt_disk_ref disk[EB_COUNT];
    /* parameter slots (P not device-homed) */
    int K;
    float *slots;              /* (K, stride) device, params */
    int *slot_blk;             /* (K) block held, -1 empty */
    uint64_t *slot_tick;       /* (K) last acquisition, for LRU */
    uint64_t tick;
    int *res;                  /* (L) RS_* */
    int *slot_of;              /* (L) slot, -1 */
    uint64_t *blk_seq;         /* (L) last job that writes the block's slot or its home */
    int in_use, cur, dir;
    /* gradient slots */
    int n_g;                   /* 0: gradients go straight to a device home (zero copy) */
    float *gslots;             /* (n_g, stride) device, grads */
    uint64_t g_seq[2];
    int g_next;
    int *g_of;                 /* (L) the gradient slot block l uses this backward */
    double *sumsq;             /* (L) */
    /* the blocks' slice sums left on the device (training: eng_attach_optim), read once at the
     * norm or the overflow check (eng_sums_read): (L, ENG_MAX_SLICES) doubles on the device, a
     * host copy of them, and per block 0, or 1 (pending) | 2 (its overflow check pending) */
    double *sums_dev, *sums_host;
    unsigned char *sums_pend;
    int n_pend;
    int gh;                    /* HPT_GH_*: G's home precision (FP32: in home[EB_G]) */
    uint16_t *ghome;           /* (L, ghs) fp16 or bf16 gradients: G's memory home */
    size_t ghs;                /* halves between two blocks of a 16-bit G home: hstride, or
                                * with ZeRO 2, 3 a shard's (eng_zhalves) */
    int check_grads;           /* fp32 homes: scan each block's gradients for non-finite values */
    int g_over;                /* a block's gradients overflowed since eng_grads_overflow */
    int sync;                  /* 1: every home on the device: no worker, updates inline */
    /* many processes (engine_dist.c) */
    int dist;                  /* 1: a block's gradients are summed over the processes (rank
                                * order, comm) at eng_grads_done, before the norm and update */
    const eng_comm *comm;      /* the collectives (eng_set_comm); NULL with one process */
    int add_home;              /* 1: exact mode, a later micro-batch summed apart: the write-back
                                * adds the home's sum so far to the slot (J_WRITE_G's set = 1) */
    int acc_pos;               /* many processes with --accum K > 1 (eng_set_micro): 1 a micro-
                                * batch before the last, 2 the last; 0 otherwise */
    /* ZeRO (o.shards > 1, engine_z3.c): the homes hold this rank's shard of every block (stage
     * 3), or all but the weights' (stage 2), or m's and v's (stage 1): eng_shard_home */
    int z3;                    /* 1: sharded (any stage) */
    int zstage;                /* 1, 2 or 3 (z3), else 0 */
    size_t zlo, zhi;           /* this rank's shard [zlo, zhi) of a block's floats (0, bn else) */
    size_t *zlo_all, *zhi_all; /* (N) every rank's, the same on every rank */
    size_t hn, hstr;           /* floats of a block in an fp32 home, and between two blocks
                                * there (bn and stride without ZeRO-3) */
    float *bounce;             /* (hstr) host io: a disk home's shard to or from a slot's range */
    uint64_t *zseq;            /* (L) blk_seq when the block's slot was last gathered */
    double *zpart, *zrecv;     /* (L, ns, 64) the norm's chunk sums this rank owns; (N, ...) all */
    /* ZeRO, the non-block tensors (engine_zemb.c): each one's sum of squares of the summed
     * gradients (by table index), from the owners' chunk sums; valid while zemb_norm */
    double zemb_sumsq[HPT_TABLE_MAX];
    int zemb_norm;
    /* staging for disk homes (host, io): fused 1 set of M, V; exact 2 sets of P, G, M, V */
    float *stage;              /* 2 sets; a 16-bit G's share is hstride halves */
    size_t stage_bytes;
    float *stage_ptr[2][EB_COUNT];
    uint64_t read_seq[2];
    int mv_next;               /* fused, m and v on disk: the staging set of the next read */
    int *mv_set;               /* (L) the set block l's m and v were read into */
    uint64_t *mv_seq;          /* (L) that read's job */
    eng_update_fn upd;
    void *upd_ctx;
    float *ghost;              /* (bn) host tier, grads: on a GPU, a block's gradients for the
                                * update on CPU threads (engine_gpu.c); NULL elsewhere */
    const hpt_transfer *xf;    /* with ghost: the transfers of mem (engine_gpu.c) */
    hpt_xevent *ev_grads[2];   /* with ghost: gradient slot g's block done (COMPUTE) */
    hpt_xevent *ev_copied;     /* with ghost: the worker's copy into ghost done (STORE) */
    /* loads of bf16 host homes on the LOAD stream (engine_gpu.c); NULL without */
    uint16_t *lstage;          /* (K, hstride) device, params: each slot's bf16 staging block */
    const hpt_transfer *lxf;   /* the transfers of mem, while the events exist */
    hpt_xevent **ev_loaded;    /* (K) slot s's staging block filled (LOAD) */
    hpt_xevent **ev_free;      /* (K) slot s's staging block widened (COMPUTE) */
    int *lpend;                /* (K) 1: slot s's load is not widened yet (compute thread) */
    /* worker */
    pthread_t th;
    int th_on;
    int inl;                   /* no thread: push runs each job at once (inline_jobs) */
    int waiting;               /* while the compute thread is blocked on a job: its team's
                                * thread count, else 0 (atomic; the worker's updates use it) */
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    job q[QCAP];
    uint64_t head, done, reaped; /* jobs queued, completed, recorded (seq = 1-based index) */
    int stop;
    hpt_status err;
    char err_msg[600];
    hpt_offload_stats st;
    eng_io_ctr io;             /* the worker's transfers by direction (engine_io.c) */
    hpt_block_store store;     /* the engine as the model sees it (blocks_engine.c) */
};

/* engine_bytes.c: layout rules from the options alone (shared by eng_create and eng_bytes). */
size_t eng_round_floats(size_t n);   /* n floats rounded up to ALIGN_BYTES, in floats */
size_t eng_round_halves(size_t n);   /* n halves rounded up to ALIGN_BYTES, in halves */
int eng_zero_copy(const hpt_offload_opts *o); /* fp32 weights on the device, used in place */
int eng_is_sync(const hpt_offload_opts *o);   /* no worker jobs at all */
int eng_n_gslots(const hpt_offload_opts *o);  /* device gradient slots */
/* Halves between two blocks of a sharded 16-bit home (bf16 weights at stage 3, a 16-bit G at
 * 2 and 3) of shard stride hstr floats: hstr in memory, rounded up to ALIGN_BYTES on disk
 * (direct I/O; hstr halves are only 2048-byte multiples). */
size_t eng_zhalves(size_t hstr, hpt_tier t);
/* Bytes of one staging set (sb[b]: buffer b's home stride in bytes; hsb a 16-bit G's). */
uint64_t eng_stage_set_bytes(const hpt_offload_opts *o, const uint64_t sb[EB_COUNT], uint64_t hsb);

/* The ZeRO stage of o: 1, 2, 3 with o->shards > 1 (o->zero 0 is 3), else 0. */
static inline int eng_zstage(const hpt_offload_opts *o) {
    return o->shards > 1 ? (o->zero >= 1 && o->zero <= 2 ? o->zero : 3) : 0;
}
/* Buffer b's home holds this rank's shard [zlo, zhi) of each block, hstr floats apart (stage 3:
 * every home; stages 1, 2: m and v, and at 2 the gradients), else whole blocks, stride apart. */
static inline int eng_shard_home(const offload_engine *e, int b) {
    return e->zstage == 3 || (e->zstage && (b >= EB_M || (b == EB_G && e->zstage == 2)));
}
static inline size_t eng_hn(const offload_engine *e, int b) { return eng_shard_home(e, b) ? e->hn : e->bn; }
static inline size_t eng_hstr(const offload_engine *e, int b) {
    return eng_shard_home(e, b) ? e->hstr : e->stride;
}

/* Where block l's value a (the block's coordinates, in this rank's range with ZeRO) has its
 * Kahan compensation in wc: whole blocks, or with ZeRO this rank's range of each. */
static inline size_t eng_comp_at(const offload_engine *e, int l, size_t a) {
    return (size_t)l * e->cstride + (e->z3 ? a - e->zlo : a);
}

/* bfd: block l's bf16 weights between disk and staging block set (engine.c; the worker's
 * loads and write-backs, and eng_store_block). */
hpt_status eng_bstage_io(offload_engine *e, int l, int set, int write_);
/* Drops the slot copy of block l's weights, its home about to change between steps
 * (engine_gather.c; the checkpoints' range writes, engine_ckpt.c). */
void eng_drop_slot(offload_engine *e, int l);

/* ---- engine_dist.c: the engine under many processes ---- */
/* Block l's gradients g (bn floats, a device slot or home) summed over the processes in rank
 * order; every rank calls it for the same blocks in the same order (the backward's). */
hpt_status eng_dist_grads(offload_engine *e, int l, float *g);
/* The worker, J_WRITE_G with set 1: g (block l's fresh micro-batch) += the home's sum so far
 * (with ZeRO, this rank's range [zlo, zhi) only, and its norm's chunk sums taken); with many
 * processes at stage 0, the compute thread before the last micro-batch's sum. */
hpt_status eng_grad_add_home(offload_engine *e, int l, float *g);
/* eng_grads_overflow's flag made the same on every rank with ZeRO (its union; collective). */
hpt_status eng_dist_overflow(offload_engine *e, int *overflow);

hpt_status eng_home_io(offload_engine *e, int b, int l, float *mem, int write_); /* engine.c */

/* ---- engine_io.c: the transfers, timed and counted by direction ---- */
/* mem_disk_rw, its bytes and seconds counted as a disk read or write of e's. */
hpt_status eng_disk_rw(offload_engine *e, const hpt_disk_ref *ref, uint64_t off, void *buf,
                       size_t len, int write_);
/* e->be->copy between a host home and device memory, counted as a host copy. */
void eng_host_copy(offload_engine *e, void *dst, const void *src, size_t bytes, hpt_copy_kind k);
/* The disk seconds so far, the transfer in flight included (for the waits' share). */
double eng_disk_busy_s(offload_engine *e);
/* Called by wait_seq (under e->mu) after waiting w seconds on job j, while the disk was busy
 * for d of them: the waits' classes and the disk seconds beside waits. */
void eng_io_waited(offload_engine *e, const job *j, double w, double d);
/* The counters into st (under e->mu). */
void eng_io_stats(const offload_engine *e, hpt_offload_stats *st);

/* ---- engine_z3.c: ZeRO-3, the homes sharded over the processes ---- */
/* This rank's shard (o.shards must be the number of processes), the home stride, the bounce
 * buffer and the records; eng_z3_free releases them. */
hpt_status eng_z3_setup(offload_engine *e);
void eng_z3_free(offload_engine *e);
/* Block l of fp32 buffer b between its home (this rank's shard) and slot's range [zlo, zhi). */
hpt_status eng_z3_slot_io(offload_engine *e, int b, int l, float *slot, int write_);
/* Block l's slot (loaded with this rank's shard) all-gathered from the others, unless it is
 * since its last load or update. Collective: called in the same order on every rank. */
hpt_status eng_z3_gather(offload_engine *e, int l, float *slot);
/* Stages 1, 2, after block l's update by the owners, so every rank's home gets the whole new
 * block: fp32, blk (a whole block: slot, memory home or staging, this rank's range just updated)
 * all-gathered in place; bf16-sr, blk a whole-block fp32 scratch: the bf16 home's block (on
 * disk: staging block set) widened into it, all-gathered and rounded back (exact: each value a
 * widened bf16). Collective. */
hpt_status eng_z12_gather(offload_engine *e, int l, float *blk, int set);
/* Block l's gradients g (a whole slot) reduce-scattered onto the shards' owners, and this
 * rank's chunk sums of squares (the norm's parts) taken of its shard. */
hpt_status eng_z3_reduce(offload_engine *e, int l, float *g);
/* The shard boundaries of ns slices of slice_n[i] floats (rows slice_row, or NULL) over N
 * ranks: rank q's [lo[q], hi[q]); returns the largest (engine_zemb.c cuts the non-block
 * tensors with the same rule). */
size_t eng_shard_ranges(int ns, const size_t *slice_n, const size_t *slice_row, int N, size_t *lo,
                        size_t *hi);
/* Block l's chunk sums of squares (the norm's parts) of this rank's range of g. */
void eng_z3_parts(offload_engine *e, int l, const float *g);
/* Between steps, collective (every rank in the same order): engine_gather.c's entries. */
hpt_status eng_z3_emit_slice(offload_engine *e, int b, int l, int i, eng_emit_fn emit, void *ctx);
hpt_status eng_z3_absorb_slice(offload_engine *e, int b, int l, int i, eng_read_fn read, void *ctx);
hpt_status eng_z3_block_dest(offload_engine *e, int b, int l, float **dst, int *in_place);
hpt_status eng_z3_store_block(offload_engine *e, int b, int l, const float *src);
/* bf16-kahan: this rank's compensation ranges all-gathered into whole (L, eng_round_halves(bn))
 * (collective), and whole's ranges back into this rank's (engine_gather.c's eng_comp). */
hpt_status eng_z3_comp_gather(offload_engine *e, uint16_t *whole);
void eng_z3_comp_scatter(offload_engine *e, const uint16_t *whole);
/* Between steps: the first parameter slot as a whole-block scratch, its block dropped (reloaded
 * when next acquired); engine_gather.c. */
float *eng_slot_scratch(offload_engine *e);

/* ---- engine_gpu.c: on a GPU, the fused update of host-homed blocks on CPU threads ---- */
hpt_status eng_gpu_attach(offload_engine *e); /* ghost, when this plan updates on the host */
void eng_gpu_detach(offload_engine *e);
/* bf16 host homes' loads on the LOAD stream (eng_gpu_loads): the staging blocks and events
 * (eng_create; nothing when the plan has none), freed after every copy into them is done; the
 * load job's copy (1: issued; 0: not this plan, load as before); the compute thread's wait and
 * widening into slot s at its acquisition (nothing unless a load into s is pending). */
hpt_status eng_gpu_load_setup(offload_engine *e);
void eng_gpu_load_free(offload_engine *e);
int eng_gpu_load_issue(offload_engine *e, int l, int s);
void eng_gpu_load_finish(offload_engine *e, int s, float *slot);
/* The compute thread, when gradient slot g's block is done: (ghost) an event after it. */
void eng_gpu_grads_ready(offload_engine *e, int g);
/* The gradients the update reads: gslot (gradient slot g) itself, or (ghost) its copy on the
 * host, copied on the STORE stream after eng_gpu_grads_ready's event and waited for. */
const float *eng_gpu_grads(offload_engine *e, const float *gslot, int g);
/* The worker's thread count for an update given the compute thread's team (0: computing). */
int eng_gpu_team(const offload_engine *e, int team);

/* The sum of block gradient g's slices' sums of squares, in slice order: one sumsq_many
 * (engine.c) */
double eng_slices_sumsq(const offload_engine *e, const float *g);
/* The device bytes of the sums left there (L blocks; engine_bytes.c counts them for training) */
size_t eng_sums_bytes(int L);
/* engine_sums.c: the buffer (eng_attach_optim, eng_detach_optim), and block l's sums of its
 * gradients g when they are done (eng_grads_done): left on the device, or read at once */
hpt_status eng_sums_attach(offload_engine *e);
void eng_sums_detach(offload_engine *e);
void eng_sums_take(offload_engine *e, int l, const float *g);

#endif
