/* runner_int.h: the runner's private state and the functions its files share (model/runner.c:
 * the layer loop; actplan.c: the arena plan and its time points; actstore.c: offload and
 * compression of saved fields; actopts.c: the activation options; lifecycle.c: the model
 * object). Nothing outside src/model/ reads these. */
#ifndef HPT_MODEL_RUNNER_INT_H
#define HPT_MODEL_RUNNER_INT_H

#include "hptrain.h"
#include "model/arch.h"

#include <pthread.h>
#include <stddef.h>

/* One buffer of the arena: where its pointer goes, and its lifetime in step time points. */
typedef struct {
    void **ptr;
    const char *name;
    int layer;       /* -1 outside blocks */
    size_t bytes;
    int first, last;
    size_t offset;
} hpt_act_buf;

/* The activation store (actstore.c): offload and int8/bf16 compression of saved fields
 * (act.offload, act.compress), per (block l, field i) at l * n_fields + i, and under every:N
 * and full the embedding's output (block 0's input) at L * n_fields: L * n_fields + 1 slots. */
typedef struct {
    void **astore;           /* compressed copy inside the arena (compression without offload) */
    size_t *soff;            /* offset of the stored copy in host_store or the disk block */
    size_t *sbytes;          /* bytes of the stored copy; 0: the field is not stored */
    void *enc_b;             /* the embedding's output as the backward reads it, its own buffer
                              * when stored (every:N and full with a store: actplan.c); NULL:
                              * the forward's (the arch's encoded) */
    char *host_store;        /* (host_bytes) host tier, acts: host offload */
    size_t host_bytes;
    hpt_disk_ref disk;       /* (disk_bytes) disk tier, acts: disk offload; fd -1 when none */
    size_t disk_bytes;
    char *staging;           /* (staging_bytes) host tier, acts: a compressed copy on its way to disk */
    size_t staging_bytes;
    pthread_t pf_thread;     /* the prefetch thread (host offload), joined by actstore_wait */
    int pf_active;           /* 1 while pf_thread runs */
    int pf_layer;            /* the block it brings back */
    /* a GPU (host offload without compression): the copies on the transfer streams, ordered by
     * events (kernels/backend.h, "transfers") instead of the thread; NULL xf on the CPU */
    const struct hpt_transfer *xf;
    struct hpt_xevent *ev_after, *ev_put, *ev_load;
} hpt_actstore;

/* The runner's activations: one arena planned for (aB, aT); replanned when the shape changes. */
typedef struct {
    void *act_mem;           /* (act_bytes) device tier, acts: the arena */
    size_t act_bytes;
    void *mm_ws;             /* (HPT_MM_BF16_WS_BYTES) device tier, workspace: the bf16 GEMMs'
                              * operand panels (--matmul bf16), else NULL */
    int aB, aT;
    char *layers;            /* (L) arch->block_acts_size each: what each block's backward reads */
    char *flayers;           /* (L) what each block's forward writes: the same buffers as
                              * layers[l] where kept, transient ones where recomputed or stored */
    hpt_act_buf *bufs;       /* (n_bufs) the plan */
    int n_bufs;
    int t_now;               /* the last time point entered; -1 outside a step */
    hpt_actstore st;
} hpt_run;

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

/* ---- actopts.c ---- */
/* hpt_act_check, and what an architecture refuses (c NULL: no architecture's check) */
hpt_status act_opts_check(const hpt_model_config *c, const hpt_act_opts *o);
/* N of the every:N segmentation (full = every:1); 0 for policies that keep block inputs. */
int act_segment_len(const hpt_act_opts *o);
/* The last block of block l's segment (every:N): segments are [kN, kN + N - 1]. */
int act_segment_end(int l, int N, int L);
/* The block whose stored fields block l's backward reads (l; under every:N and full the
 * segment input's when l ends a segment: the previous block's, or -1, the embedding's output,
 * for the first segment), -2: none. */
int act_store_layer(const hpt_act_opts *o, int L, int l);
/* The ops' context for the model's current (B, T) and choices. */
hpt_arch_ctx act_ctx(const hpt_model *m);
/* frees the positions of packed examples (pack.c) */
void model_pos_free(hpt_model *m);
/* The ops' context at (B, T): vc > 0 (chunked embeddings, embed.c) makes a row-chunked head's
 * logits (rows, vc). */
hpt_arch_ctx act_ctx_for(const hpt_model_config *c, const hpt_act_opts *o, int vc, int B, int T);
/* Rows of logits the head computes at once for (B, T) and head_chunk. */
size_t act_head_rows(const hpt_act_opts *o, int B, int T);
/* Rows of B*T the MLP runs at once for (B, T) and mlp_tile (0: untiled). */
size_t act_mlp_rows(const hpt_act_opts *o, int B, int T);

/* ---- actplan.c ---- */
/* Field i's pointer in block l's activation struct of the array base (layers or flayers). */
static inline float **act_field(const hpt_arch *A, char *base, int l, int i) {
    return (float **)(base + (size_t)l * A->block_acts_size + A->fields[i].off);
}
/* Plans (and allocates, when it grew) the arena and the store for (B, T); points the buffers. */
hpt_status act_ensure(hpt_model *m, int B, int T);
/* Moves the step to time point t (-1: outside a step), recording the arena's events. */
void act_enter(hpt_model *m, int t);
/* Releases the plan's arrays (hpt_model_free). */
void act_plan_free(hpt_model *m);

/* ---- actstore.c ---- */
/* The offload tier's buffers for a plan: off_bytes of stored copies, max_store the largest. */
hpt_status actstore_reserve(hpt_model *m, size_t off_bytes, size_t max_store);
void actstore_release(hpt_model *m);
/* End of block l's forward: copies (or compresses) its stored fields out of the transient
 * buffers its forward wrote; l = -1: the embedding's output, after the embedding's forward
 * (nothing unless the plan stores it). */
hpt_status actstore_put(hpt_model *m, int l);
/* Before block l's backward: brings its stored fields back (asynchronously for host
 * offload); actstore_wait joins that. */
hpt_status actstore_prefetch(hpt_model *m, int l);
void actstore_wait(hpt_model *m);

#endif
