/* dist.h: the communication layer's interface to the trainer (not public; hptrain/dist.h is
 * the command line's part). The collectives on float data sum in rank order 0, 1, ..., N-1,
 * starting from rank 0's value (no 0 + x: that would turn -0 into +0), so their result is the
 * same bits on every rank, independent of timing and of the transport's own reduction order.
 * A process-wide world (MPI_COMM_WORLD, or one process); every call is collective: every rank
 * makes the same calls in the same order with the same sizes.
 *
 * The transport is a table (dist_ops): MPI's over host buffers (src/dist/mpi.c), NCCL's over
 * device buffers (src/dist/nccl.c, HPT_DIST_TRANSPORT=nccl). The sums stay the layer's, in the
 * same expression order (acc = x_0; acc += x_1; ...), on the host or, through the transport's
 * sum_slices, on the device: the same bits either way. */
#ifndef HPT_DIST_H
#define HPT_DIST_H

#include "hptrain.h"

typedef struct {
    /* Each rank sends its slice [lo_q, hi_q) of buf to rank q and receives slice [lo_r, hi_r)
     * of every rank's buf, into recv laid out as N consecutive slices of (hi_r - lo_r) floats
     * (rank order). lo/hi: (N) each, the same on every rank. */
    hpt_status (*alltoall_slices)(void *ctx, const float *buf, const size_t *lo,
                                  const size_t *hi, float *recv, const char *what);
    /* Every rank's slice [lo_q, hi_q) of buf from rank q, in place. */
    hpt_status (*allgather_slices)(void *ctx, float *buf, const size_t *lo, const size_t *hi,
                                   const char *what);
    /* recv (N * bytes) = every rank's send (bytes) in rank order. */
    hpt_status (*allgather_bytes)(void *ctx, const void *send, size_t bytes, void *recv,
                                  const char *what);
    hpt_status (*bcast)(void *ctx, void *buf, size_t bytes, int root, const char *what);
    hpt_status (*barrier)(void *ctx, const char *what);
    /* alltoall_slices without waiting, on channel chan (0 .. DIST_CHANNELS-1: a communicator
     * of its own, so an exchange in flight on one never meets another's in the transport's
     * order); buf and recv stay untouched by the caller until chan_test says done. */
    hpt_status (*alltoall_start)(void *ctx, int chan, const float *buf, const size_t *lo,
                                 const size_t *hi, float *recv, const char *what);
    /* *done = 1 when chan's exchange has completed (it advances the transport: Open MPI moves a
     * non-blocking collective's bytes only inside its calls); wait: until then, or the timeout. */
    hpt_status (*chan_test)(void *ctx, int chan, int *done, const char *what);
    hpt_status (*chan_wait)(void *ctx, int chan, const char *what);
    /* Optional (NULL: host memory, malloc and the layer's own loop): the receive buffer of
     * the reduce-scatter's rounds, in the transport's memory; and the owner's sum of one
     * round: acc (m) = recv slice 0, then acc += slice q for q = 1 .. n-1 (recv: n slices of
     * m floats in rank order), the same expressions in the same order as the host loop. */
    hpt_status (*recv_alloc)(void *ctx, size_t bytes, void **out, const char *what);
    void (*recv_free)(void *ctx, void *p);
    hpt_status (*sum_slices)(void *ctx, float *acc, const float *recv, size_t m, int n,
                             const char *what);
} dist_ops;

/* Channels for exchanges in flight at once (dist_reduce_scatter_start). */
#define DIST_CHANNELS 2

/* Rank r's chunk [*lo, *hi) of n values split over N ranks: r*n/N to (r+1)*n/N (sizes differ
 * by at most one; the same on every rank). */
void dist_chunk(size_t n, int rank, int size, size_t *lo, size_t *hi);
/* buf (n floats) summed over the ranks in rank order; on return rank r's chunk (dist_chunk)
 * of buf holds the sum (the rest of buf is unchanged). */
hpt_status dist_reduce_scatter_f32(float *buf, size_t n, const char *what);
/* The same with chunks of the caller's: rank q's is [lo[q], hi[q]) (N each, the same on every
 * rank, ascending, disjoint; empty ones allowed), e.g. ZeRO's runs of optimizer slices. */
hpt_status dist_reduce_scatter_ranges(float *buf, const size_t *lo, const size_t *hi,
                                      const char *what);
hpt_status dist_allgather_ranges(float *buf, const size_t *lo, const size_t *hi, const char *what);
/* dist_reduce_scatter_ranges without waiting: started on channel chan (one exchange in flight
 * per channel; every rank starts the same ones on the same channels in the same order), it
 * advances in dist_test and dist_progress, and is complete (buf's owned values summed in rank
 * order, the same bits as the blocking call) when dist_wait returns. buf stays the caller's to
 * neither read nor write until then. *rq is NULL with one process (nothing to wait for).
 * With HPT_DIST_PROGRESS=thread a thread of the layer's advances the exchanges in flight
 * (Open MPI moves their bytes only inside its calls); else they advance at the caller's
 * dist_test / dist_progress / dist_wait calls. */
typedef struct dist_req dist_req;
hpt_status dist_reduce_scatter_start(float *buf, const size_t *lo, const size_t *hi, int chan,
                                     const char *what, dist_req **rq);
hpt_status dist_test(dist_req *rq, int *done);
/* Waits for rq and frees it (NULL: nothing). */
hpt_status dist_wait(dist_req *rq);
/* rq given up after a failure (the job is ending): not waited for; its memory stays allocated,
 * since the transport may still write it. */
void dist_abandon(dist_req *rq);
/* recv (N * bytes) = every rank's send (bytes), in rank order (one process: a copy). */
hpt_status dist_allgather_raw(const void *send, size_t bytes, void *recv, const char *what);
/* Every rank's chunk of buf from its owner. */
hpt_status dist_allgather_f32(float *buf, size_t n, const char *what);
/* reduce_scatter then allgather: every rank's buf is the rank-order sum, the same bits. */
hpt_status dist_allreduce_f32(float *buf, size_t n, const char *what);
/* out (N) = every rank's value, in rank order. */
hpt_status dist_allgather_f64(double v, double *out, const char *what);
hpt_status dist_bcast(void *buf, size_t bytes, int root, const char *what);
hpt_status dist_barrier(const char *what);
/* Compares the ranks' configuration texts ("key=value" lines): HPT_OK when they are equal;
 * else, on every rank, the same HPT_ERR_INVALID naming the first rank and line that differ
 * from rank 0's (a failure every rank shares: hpt_dist_finalize need not abort). */
hpt_status dist_agree(const char *text);

/* The transports. */
const dist_ops *dist_mpi_ops(void);
/* thread_serialized: MPI calls from the layer's progress thread as well (under its lock) */
hpt_status dist_mpi_init(int *rank, int *size, void **ctx, int thread_serialized);
void dist_mpi_finalize(void *ctx, int abort_job);
int dist_mpi_launched(void); /* the environment says mpirun started this process */

/* NCCL (nccl.c, built with HPT_HAVE_NCCL): communicators over device buffers. The device's
 * compute stream (a cudaStream_t, the transfer table's native_stream) orders each exchange: a
 * channel's stream waits for the work queued before the call, and the sums run on the compute
 * stream after the exchange, through add (the backend's: out (n) = a + b, queued on that
 * stream). bcast (may be NULL with size 1) hands rank 0's ncclUniqueIds to the others (MPI's
 * bcast at start). dist sits below kernels (docs/design.md): the caller hands these down. */
typedef hpt_status (*dist_bcast_fn)(void *ctx, void *buf, size_t bytes, int root, const char *what);
typedef void (*dist_add_fn)(float *out, const float *a, const float *b, size_t n);
const dist_ops *dist_nccl_ops(void);
hpt_status dist_nccl_init(int rank, int size, void *compute_stream, dist_add_fn add,
                          dist_bcast_fn bcast, void *bcast_ctx, void **ctx);
void dist_nccl_finalize(void *ctx, int abort_job);
int dist_have_nccl(void);

/* The transport asked for (HPT_DIST_TRANSPORT=mpi|nccl, mpi when unset): HPT_OK when it can run
 * here, on_device telling whether the run's buffers are on a CUDA device; else the one-line
 * reason (an unknown name, nccl in a build without it, nccl without --device cuda, nccl with
 * the progress thread). dist_transport_nccl: nccl was asked for. */
hpt_status dist_transport_check(int on_device);
int dist_transport_nccl(void);
/* Many processes with the nccl transport: its communicators opened on the current device, with
 * its compute stream and add (dist_nccl_init; collective: every rank, once, before the first
 * exchange); else nothing. */
hpt_status dist_bind_device(void *compute_stream, dist_add_fn add);

/* The layer's own counters and timeout, for the transports. */
void dist_count_sent(uint64_t bytes);
double dist_timeout_s(void);

#endif
