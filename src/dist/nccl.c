/* nccl.c: the NCCL transport of the communication layer (dist.h's table) over device buffers,
 * built when the CUDA build finds NCCL (HPT_HAVE_NCCL; docs/zero.md, "NCCL"). MPI starts the
 * processes and hands rank 0's ncclUniqueIds to the others; one communicator per channel plus
 * one for the blocking calls, each on a CUDA stream of its own. It moves bytes only: the
 * reduce-scatter is grouped ncclSend/ncclRecv of slices, and its sum is dist.c's, on the
 * device through sum_slices (the backend's add in rank order: acc = x_0; acc += x_1; ..., the
 * host loop's expressions, so the same bits), never an NCCL reduction (whose order is NCCL's).
 * The caller hands down the compute stream and the backend's add (dist sits below kernels).
 * Ordering: each call records an event on the backend's compute stream and its channel's
 * stream waits for it (the buffers' writers are done); the blocking calls poll their done
 * event up to the layer's timeout; a started exchange's done event is chan_test's
 * cudaEventQuery. Host buffers (the small byte exchanges: losses, flags, the configuration
 * check) are staged through a device scratch buffer; the float calls refuse host buffers.
 * Not accounted: the receive buffers (kept for reuse until the end, three at most), the scratch
 * buffer and NCCL's own memory are cudaMalloc'd beside the backend's carved region. Not yet run
 * on a GPU (HPT_UNVERIFIED_NCCL). */
#include "core/core.h"
#include "dist/dist.h"

#ifdef HPT_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dist_have_nccl(void) { return 1; }

/* One communicator, its stream and events; busy: a started exchange in flight (channels). */
typedef struct {
    ncclComm_t comm;
    cudaStream_t st;
    cudaEvent_t before, done;
    int busy;
    uint64_t sent; /* counted when it completes */
} nc_chan;

typedef struct {
    int rank, size;
    dist_add_fn add;                    /* the backend's add, queued on compute */
    cudaStream_t compute;               /* the backend's: every op runs on it */
    nc_chan blk, ch[DIST_CHANNELS];     /* blk: the blocking calls' */
    void *scratch;                      /* device staging for host buffers (scratch_bytes) */
    size_t scratch_bytes;
    struct {                            /* receive buffers kept for the next exchange: one */
        void *p;                        /* blocking and one per channel are in use at most */
        size_t bytes;
        int used;
    } pool[1 + DIST_CHANNELS];
} nc_ctx;

static hpt_status nc_fail(ncclResult_t r, const char *what) {
    return hpt_fail(HPT_ERR_IO, "%s: NCCL error: %s", what, ncclGetErrorString(r));
}

static hpt_status cu_fail(cudaError_t e, const char *what) {
    return hpt_fail(HPT_ERR_IO, "%s: CUDA error: %s", what, cudaGetErrorString(e));
}

#define CU(call, what) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return cu_fail(e_, what); } while (0)

static int is_device(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* a plain host pointer on an older runtime */
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static hpt_status need_device(const void *p, const char *what) {
    if (is_device(p)) return HPT_OK;
    return hpt_fail(HPT_ERR_INVALID, "%s: the nccl transport moves device buffers only (a host "
                    "buffer was given)", what);
}

/* h's stream waits for the work queued on the compute stream so far. */
static hpt_status enter(nc_ctx *c, nc_chan *h, const char *what) {
    CU(cudaEventRecord(h->before, c->compute), what);
    CU(cudaStreamWaitEvent(h->st, h->before, 0), what);
    return HPT_OK;
}

/* Polls h's done event until it completes or the layer's timeout passes. */
static hpt_status wait_done(nc_ctx *c, nc_chan *h, const char *what) {
    double t0 = hpt_now(), limit = dist_timeout_s();
    for (long polls = 0;; polls++) {
        cudaError_t e = cudaEventQuery(h->done);
        if (e == cudaSuccess) return HPT_OK;
        if (e != cudaErrorNotReady) return cu_fail(e, what);
        ncclResult_t ar;
        if (ncclCommGetAsyncError(h->comm, &ar) == ncclSuccess && ar != ncclSuccess && ar != ncclInProgress)
            return nc_fail(ar, what);
        if (polls > 64) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
            if (hpt_now() - t0 > limit)
                return hpt_fail(HPT_ERR_IO, "rank %d: no answer from the other processes within "
                                "%.0f s during %s (NCCL; a process died or hangs; "
                                "HPT_DIST_TIMEOUT_S sets the limit)", c->rank, limit, what);
        }
    }
}

static hpt_status scratch(nc_ctx *c, size_t bytes, const char *what) {
    if (bytes <= c->scratch_bytes) return HPT_OK;
    if (c->scratch) CU(cudaFree(c->scratch), what);
    c->scratch = NULL;
    c->scratch_bytes = 0;
    CU(cudaMalloc(&c->scratch, bytes), what);
    c->scratch_bytes = bytes;
    return HPT_OK;
}

/* Rank r's slices [lo_q, hi_q) of buf to each q, every q's slice r into recv (N slices of
 * hi_r - lo_r floats, rank order), queued on h's stream; *sent: the bytes to the others. */
static hpt_status post_alltoall(nc_ctx *c, nc_chan *h, const float *buf, const size_t *lo,
                                const size_t *hi, float *recv, uint64_t *sent, const char *what) {
    int r = c->rank;
    size_t mine = hi[r] - lo[r];
    HPT_CHECK(need_device(buf, what));
    HPT_CHECK(need_device(recv, what));
    HPT_CHECK(enter(c, h, what));
    *sent = 0;
    /* every peer, this rank too (NCCL's send to self: its own slice moves the same way, so one
     * rank exercises the calls that N make) */
    ncclResult_t rc = ncclGroupStart();
    for (int q = 0; rc == ncclSuccess && q < c->size; q++) {
        /* empty slices are skipped on both sides (every rank knows every size) */
        if (hi[q] > lo[q]) rc = ncclSend(buf + lo[q], hi[q] - lo[q], ncclFloat, q, h->comm, h->st);
        if (rc == ncclSuccess && mine) rc = ncclRecv(recv + (size_t)q * mine, mine, ncclFloat, q, h->comm, h->st);
        if (q != r) *sent += (hi[q] - lo[q]) * sizeof(float);
    }
    ncclResult_t re = ncclGroupEnd();
    if (rc != ncclSuccess) return nc_fail(rc, what);
    if (re != ncclSuccess) return nc_fail(re, what);
    CU(cudaEventRecord(h->done, h->st), what);
    return HPT_OK;
}

static hpt_status nc_alltoall_slices(void *ctx, const float *buf, const size_t *lo,
                                     const size_t *hi, float *recv, const char *what) {
    nc_ctx *c = ctx;
    uint64_t sent;
    HPT_CHECK(post_alltoall(c, &c->blk, buf, lo, hi, recv, &sent, what));
    HPT_CHECK(wait_done(c, &c->blk, what));
    dist_count_sent(sent);
    return HPT_OK;
}

static hpt_status nc_alltoall_start(void *ctx, int chan, const float *buf, const size_t *lo,
                                    const size_t *hi, float *recv, const char *what) {
    nc_ctx *c = ctx;
    nc_chan *h = &c->ch[chan];
    if (h->busy) return hpt_fail(HPT_ERR_INVALID, "%s: channel %d has an exchange in flight", what, chan);
    HPT_CHECK(post_alltoall(c, h, buf, lo, hi, recv, &h->sent, what));
    h->busy = 1;
    return HPT_OK;
}

static hpt_status nc_chan_test(void *ctx, int chan, int *done, const char *what) {
    nc_ctx *c = ctx;
    nc_chan *h = &c->ch[chan];
    *done = 1;
    if (!h->busy) return HPT_OK;
    cudaError_t e = cudaEventQuery(h->done);
    if (e == cudaErrorNotReady) {
        *done = 0;
        return HPT_OK;
    }
    if (e != cudaSuccess) return cu_fail(e, what);
    h->busy = 0;
    dist_count_sent(h->sent);
    return HPT_OK;
}

static hpt_status nc_chan_wait(void *ctx, int chan, const char *what) {
    nc_ctx *c = ctx;
    nc_chan *h = &c->ch[chan];
    if (!h->busy) return HPT_OK;
    HPT_CHECK(wait_done(c, h, what));
    h->busy = 0;
    dist_count_sent(h->sent);
    return HPT_OK;
}

/* In place: rank q's slice [lo_q, hi_q) of buf sent by q to every other rank. */
static hpt_status nc_allgather_slices(void *ctx, float *buf, const size_t *lo, const size_t *hi,
                                      const char *what) {
    nc_ctx *c = ctx;
    nc_chan *h = &c->blk;
    int r = c->rank;
    size_t mine = hi[r] - lo[r];
    HPT_CHECK(need_device(buf, what));
    HPT_CHECK(enter(c, h, what));
    ncclResult_t rc = ncclGroupStart();
    for (int q = 0; rc == ncclSuccess && q < c->size; q++) {
        if (q == r) continue;
        if (mine) rc = ncclSend(buf + lo[r], mine, ncclFloat, q, h->comm, h->st);
        if (rc == ncclSuccess && hi[q] > lo[q])
            rc = ncclRecv(buf + lo[q], hi[q] - lo[q], ncclFloat, q, h->comm, h->st);
    }
    ncclResult_t re = ncclGroupEnd();
    if (rc != ncclSuccess) return nc_fail(rc, what);
    if (re != ncclSuccess) return nc_fail(re, what);
    CU(cudaEventRecord(h->done, h->st), what);
    HPT_CHECK(wait_done(c, h, what));
    dist_count_sent((uint64_t)mine * sizeof(float) * (uint64_t)(c->size - 1));
    return HPT_OK;
}

static hpt_status nc_allgather_bytes(void *ctx, const void *send, size_t bytes, void *recv,
                                     const char *what) {
    nc_ctx *c = ctx;
    nc_chan *h = &c->blk;
    size_t N = (size_t)c->size;
    int dev = is_device(send) && is_device(recv);
    const void *s = send;
    void *d = recv;
    HPT_CHECK(enter(c, h, what));
    if (!dev) { /* staged: scratch = [recv (N * bytes) | send (bytes)] */
        HPT_CHECK(scratch(c, (N + 1) * bytes, what));
        char *ss = (char *)c->scratch + N * bytes;
        d = c->scratch;
        s = ss;
        CU(cudaMemcpyAsync(ss, send, bytes, cudaMemcpyDefault, h->st), what);
    }
    ncclResult_t rc = ncclAllGather(s, d, bytes, ncclChar, h->comm, h->st);
    if (rc != ncclSuccess) return nc_fail(rc, what);
    if (!dev) CU(cudaMemcpyAsync(recv, d, N * bytes, cudaMemcpyDefault, h->st), what);
    CU(cudaEventRecord(h->done, h->st), what);
    HPT_CHECK(wait_done(c, h, what));
    dist_count_sent((uint64_t)bytes * (uint64_t)(c->size - 1));
    return HPT_OK;
}

static hpt_status nc_bcast(void *ctx, void *buf, size_t bytes, int root, const char *what) {
    nc_ctx *c = ctx;
    nc_chan *h = &c->blk;
    int dev = is_device(buf);
    void *d = buf;
    HPT_CHECK(enter(c, h, what));
    if (!dev) {
        HPT_CHECK(scratch(c, bytes, what));
        d = c->scratch;
        if (c->rank == root) CU(cudaMemcpyAsync(d, buf, bytes, cudaMemcpyDefault, h->st), what);
    }
    ncclResult_t rc = ncclBroadcast(d, d, bytes, ncclChar, root, h->comm, h->st);
    if (rc != ncclSuccess) return nc_fail(rc, what);
    if (!dev && c->rank != root) CU(cudaMemcpyAsync(buf, d, bytes, cudaMemcpyDefault, h->st), what);
    CU(cudaEventRecord(h->done, h->st), what);
    HPT_CHECK(wait_done(c, h, what));
    if (c->rank == root) dist_count_sent((uint64_t)bytes * (uint64_t)(c->size - 1));
    return HPT_OK;
}

/* Every rank's all-reduce of one int (its value unused): none returns before all have entered. */
static hpt_status nc_barrier(void *ctx, const char *what) {
    nc_ctx *c = ctx;
    nc_chan *h = &c->blk;
    HPT_CHECK(scratch(c, sizeof(int32_t), what));
    HPT_CHECK(enter(c, h, what));
    ncclResult_t rc = ncclAllReduce(c->scratch, c->scratch, 1, ncclInt32, ncclSum, h->comm, h->st);
    if (rc != ncclSuccess) return nc_fail(rc, what);
    CU(cudaEventRecord(h->done, h->st), what);
    return wait_done(c, h, what);
}

/* Receive buffers from the pool (a kept one that is large enough, else a new cudaMalloc in a
 * free entry, else one outside the pool), so a step's exchanges do not cudaMalloc and cudaFree
 * (which synchronises the device) each time. A kept buffer is written again only by a later
 * exchange, whose stream waits for the compute stream's work, the sums that read it included. */
static hpt_status nc_recv_alloc(void *ctx, size_t bytes, void **out, const char *what) {
    nc_ctx *c = ctx;
    const int np = 1 + DIST_CHANNELS;
    int k, slot = -1;
    *out = NULL;
    if (!bytes) bytes = 1;
    for (k = 0; k < np; k++)
        if (!c->pool[k].used && c->pool[k].p && c->pool[k].bytes >= bytes) {
            c->pool[k].used = 1;
            *out = c->pool[k].p;
            return HPT_OK;
        }
    for (k = 0; k < np && slot < 0; k++)
        if (!c->pool[k].used) slot = k;
    if (slot >= 0 && c->pool[slot].p) { /* too small: replaced */
        cudaFree(c->pool[slot].p);
        c->pool[slot].p = NULL;
        c->pool[slot].bytes = 0;
    }
    cudaError_t e = cudaMalloc(out, bytes);
    if (e != cudaSuccess) {
        *out = NULL;
        return hpt_fail(e == cudaErrorMemoryAllocation ? HPT_ERR_OOM : HPT_ERR_IO,
                        "%s: the receive buffer (%zu bytes on the device): %s", what, bytes,
                        cudaGetErrorString(e));
    }
    if (slot >= 0) {
        c->pool[slot].p = *out;
        c->pool[slot].bytes = bytes;
        c->pool[slot].used = 1;
    }
    return HPT_OK;
}

static void nc_recv_free(void *ctx, void *p) {
    nc_ctx *c = ctx;
    if (!p) return;
    for (int k = 0; k < 1 + DIST_CHANNELS; k++)
        if (c->pool[k].p == p) {
            c->pool[k].used = 0; /* kept */
            return;
        }
    cudaFree(p); /* synchronises the device: the sums that read it are done */
}

/* acc (m) = recv's slice 0; acc += slice q, q = 1 .. n-1: the copy and the backend's add on the
 * compute stream, the host loop's expressions in its order (dist.c's sum_round). The exchange
 * that filled recv is complete (the host saw its done event) before this is queued. */
static hpt_status nc_sum_slices(void *ctx, float *acc, const float *recv, size_t m, int n,
                                const char *what) {
    nc_ctx *c = ctx;
    HPT_CHECK(need_device(acc, what));
    CU(cudaMemcpyAsync(acc, recv, m * sizeof(float), cudaMemcpyDeviceToDevice, c->compute), what);
    for (int q = 1; q < n; q++) c->add(acc, acc, recv + (size_t)q * m, m);
    return HPT_OK; /* a kernel's failure is the backend's to report (its status, kept) */
}

static const dist_ops k_nccl = {nc_alltoall_slices, nc_allgather_slices, nc_allgather_bytes,
                                nc_bcast, nc_barrier, nc_alltoall_start, nc_chan_test,
                                nc_chan_wait, nc_recv_alloc, nc_recv_free, nc_sum_slices};
const dist_ops *dist_nccl_ops(void) { return &k_nccl; }

static void chan_close(nc_chan *h, int abort_job) {
    if (h->comm) {
        if (abort_job) ncclCommAbort(h->comm);
        else ncclCommDestroy(h->comm);
    }
    if (h->before) cudaEventDestroy(h->before);
    if (h->done) cudaEventDestroy(h->done);
    if (h->st) cudaStreamDestroy(h->st);
    memset(h, 0, sizeof *h);
}

void dist_nccl_finalize(void *ctx, int abort_job) {
    nc_ctx *c = ctx;
    if (!c) return;
    chan_close(&c->blk, abort_job);
    for (int k = 0; k < DIST_CHANNELS; k++) chan_close(&c->ch[k], abort_job);
    if (c->scratch) cudaFree(c->scratch);
    for (int k = 0; k < 1 + DIST_CHANNELS; k++)
        if (c->pool[k].p) cudaFree(c->pool[k].p);
    free(c);
}

hpt_status dist_nccl_init(int rank, int size, void *compute_stream, dist_add_fn add,
                          dist_bcast_fn bcast, void *bcast_ctx, void **out) {
    *out = NULL;
    if (!compute_stream || !add)
        return hpt_fail(HPT_ERR_INVALID, "the nccl transport needs the CUDA backend started "
                        "(its compute stream and add)");
    if (size > 1 && !bcast)
        return hpt_fail(HPT_ERR_INVALID, "the nccl transport: %d processes and no way to start them", size);
    nc_ctx *c = calloc(1, sizeof *c);
    if (!c) return hpt_fail(HPT_ERR_OOM, "the NCCL context");
    c->rank = rank;
    c->size = size;
    c->add = add;
    c->compute = (cudaStream_t)compute_stream;
    ncclUniqueId id[1 + DIST_CHANNELS];
    memset(id, 0, sizeof id);
    hpt_status s = HPT_OK;
    for (int k = 0; rank == 0 && s == HPT_OK && k <= DIST_CHANNELS; k++) {
        ncclResult_t r = ncclGetUniqueId(&id[k]);
        if (r != ncclSuccess) s = nc_fail(r, "NCCL's start (ncclGetUniqueId)");
    }
    /* collective: rank 0's ids to every rank, even after its own failure (then the zero ids
     * fail every rank's init alike) */
    if (size > 1) {
        hpt_status b = bcast(bcast_ctx, id, sizeof id, 0, "NCCL's start");
        if (s == HPT_OK) s = b;
    }
    for (int k = 0; s == HPT_OK && k <= DIST_CHANNELS; k++) {
        nc_chan *h = k ? &c->ch[k - 1] : &c->blk;
        cudaError_t e = cudaStreamCreateWithFlags(&h->st, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&h->before, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            s = cu_fail(e, "NCCL's start");
            break;
        }
        ncclResult_t r = ncclCommInitRank(&h->comm, size, id[k], rank);
        if (r != ncclSuccess) {
            h->comm = NULL;
            s = nc_fail(r, "NCCL's start (ncclCommInitRank)");
        }
    }
    if (s != HPT_OK) {
        dist_nccl_finalize(c, 1);
        return s;
    }
    *out = c;
    return HPT_OK;
}

#else /* a build without NCCL: the transport is refused by name (dist_transport_check) */
int dist_have_nccl(void) { return 0; }
const dist_ops *dist_nccl_ops(void) { return NULL; }
hpt_status dist_nccl_init(int rank, int size, void *compute_stream, dist_add_fn add,
                          dist_bcast_fn bcast, void *bcast_ctx, void **ctx) {
    (void)rank, (void)size, (void)compute_stream, (void)add, (void)bcast, (void)bcast_ctx;
    *ctx = NULL;
    return hpt_fail(HPT_ERR_UNSUPPORTED, "this build has no NCCL");
}
void dist_nccl_finalize(void *ctx, int abort_job) { (void)ctx, (void)abort_job; }
#endif
