/* mpi.c: the MPI transport of the communication layer (dist.h's table), built when CMake finds
 * MPI (HPT_MPI). It moves bytes only: no MPI reduction touches float data (their summation
 * order is the implementation's), the sums are dist.c's, in rank order.
 * Every operation is non-blocking and then polled (MPI_Test, sleeping between polls so a
 * waiting rank leaves its core to the others) up to the layer's timeout: a peer that hangs
 * ends the wait with an error naming the operation; a peer that dies is Open MPI's to report
 * (mpirun ends the job). Errors come back as status codes (MPI_ERRORS_RETURN), not aborts.
 * The started exchanges (alltoall_start) run on channels, each a duplicate of the world
 * communicator, so one in flight per channel never meets another collective in MPI's order. */
#include "core/core.h"
#include "dist/dist.h"

#ifdef HPT_HAVE_MPI
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int dist_mpi_launched(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static hpt_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return hpt_fail(HPT_ERR_IO, "%s: MPI error: %s", what, msg);
}

/* Polls rq until it completes or the timeout passes. */
static hpt_status wait_req(MPI_Request *rq, const char *what) {
    if (*rq == MPI_REQUEST_NULL) return HPT_OK;
    double t0 = hpt_now(), limit = dist_timeout_s();
    for (long polls = 0;; polls++) {
        int done = 0;
        int rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
        if (done) return HPT_OK;
        if (polls > 64) { /* past a short spin: sleep 50 us between polls */
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
            if (hpt_now() - t0 > limit) {
                int rank = 0;
                MPI_Comm_rank(MPI_COMM_WORLD, &rank);
                return hpt_fail(HPT_ERR_IO, "rank %d: no answer from the other processes within "
                                "%.0f s during %s (a process died or hangs; HPT_DIST_TIMEOUT_S "
                                "sets the limit)", rank, limit, what);
            }
        }
    }
}

/* One channel (dist.h): a duplicate of the world, its exchange in flight and the counts it
 * reads until it completes (MPI's non-blocking calls keep pointers to them). */
typedef struct {
    MPI_Comm comm;
    MPI_Request rq;
    int *cnt_s, *dsp_s, *cnt_r, *dsp_r; /* (size) each */
    uint64_t sent;                      /* counted when it completes */
} mpi_chan;

typedef struct {
    int rank, size;
    int *cnt_s, *dsp_s, *cnt_r, *dsp_r; /* (size) each: MPI's counts and displacements */
    mpi_chan ch[DIST_CHANNELS];
} mpi_ctx;

hpt_status dist_mpi_init(int *rank, int *size, void **ctx, int thread_serialized) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided, want = thread_serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_FUNNELED;
        if (MPI_Init_thread(NULL, NULL, want, &provided) != MPI_SUCCESS)
            return hpt_fail(HPT_ERR_IO, "MPI_Init failed");
        if (provided < want)
            return hpt_fail(HPT_ERR_UNSUPPORTED, "HPT_DIST_PROGRESS=thread: this MPI gives no "
                            "MPI_THREAD_SERIALIZED");
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    mpi_ctx *c = calloc(1, sizeof *c);
    if (!c) return hpt_fail(HPT_ERR_OOM, "the MPI context");
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    size_t n = (size_t)c->size;
    int ok = 1;
    for (int k = 0; k <= DIST_CHANNELS; k++) {
        int **a[4] = {&c->cnt_s, &c->dsp_s, &c->cnt_r, &c->dsp_r};
        if (k < DIST_CHANNELS) {
            mpi_chan *h = &c->ch[k];
            h->comm = MPI_COMM_NULL;
            h->rq = MPI_REQUEST_NULL;
            a[0] = &h->cnt_s, a[1] = &h->dsp_s, a[2] = &h->cnt_r, a[3] = &h->dsp_r;
        }
        for (int i = 0; i < 4; i++) ok &= (*a[i] = calloc(n, sizeof(int))) != NULL;
    }
    for (int k = 0; ok && k < DIST_CHANNELS; k++) /* collective: every rank, in this order */
        ok = MPI_Comm_dup(MPI_COMM_WORLD, &c->ch[k].comm) == MPI_SUCCESS;
    if (!ok) {
        dist_mpi_finalize(c, 0);
        return hpt_fail(HPT_ERR_OOM, "the MPI context");
    }
    *rank = c->rank;
    *size = c->size;
    *ctx = c;
    return HPT_OK;
}

void dist_mpi_finalize(void *ctx, int abort_job) {
    mpi_ctx *c = ctx;
    if (c) {
        for (int k = 0; k < DIST_CHANNELS; k++) {
            mpi_chan *h = &c->ch[k];
            /* an exchange still in flight after a failure keeps its communicator */
            if (!abort_job && h->comm != MPI_COMM_NULL && h->rq == MPI_REQUEST_NULL)
                MPI_Comm_free(&h->comm);
            free(h->cnt_s);
            free(h->dsp_s);
            free(h->cnt_r);
            free(h->dsp_r);
        }
        free(c->cnt_s);
        free(c->dsp_s);
        free(c->cnt_r);
        free(c->dsp_r);
        free(c);
    }
    if (abort_job) MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_Finalize();
}

/* Float counts travel as MPI ints: a slice over 2^31 floats is refused (pieces are smaller). */
static hpt_status mpi_alltoall_slices(void *ctx, const float *buf, const size_t *lo,
                                      const size_t *hi, float *recv, const char *what) {
    mpi_ctx *c = ctx;
    size_t mine = hi[c->rank] - lo[c->rank];
    uint64_t sent = 0;
    for (int q = 0; q < c->size; q++) {
        c->cnt_s[q] = (int)(hi[q] - lo[q]);
        c->cnt_r[q] = (int)mine;
        c->dsp_r[q] = (int)(mine * (size_t)q);
        if (q != c->rank) sent += (hi[q] - lo[q]) * sizeof(float);
    }
    /* displacements from lo[0], so they stay small whatever the buffer's length */
    for (int q = 0; q < c->size; q++) c->dsp_s[q] = (int)(lo[q] - lo[0]);
    MPI_Request rq;
    int rc = MPI_Ialltoallv(buf + lo[0], c->cnt_s, c->dsp_s, MPI_FLOAT, recv, c->cnt_r, c->dsp_r,
                            MPI_FLOAT, MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
    HPT_CHECK(wait_req(&rq, what));
    dist_count_sent(sent);
    return HPT_OK;
}

static hpt_status mpi_alltoall_start(void *ctx, int chan, const float *buf, const size_t *lo,
                                     const size_t *hi, float *recv, const char *what) {
    mpi_ctx *c = ctx;
    mpi_chan *h = &c->ch[chan];
    if (h->rq != MPI_REQUEST_NULL)
        return hpt_fail(HPT_ERR_INVALID, "%s: channel %d has an exchange in flight", what, chan);
    size_t mine = hi[c->rank] - lo[c->rank];
    h->sent = 0;
    for (int q = 0; q < c->size; q++) {
        h->cnt_s[q] = (int)(hi[q] - lo[q]);
        h->dsp_s[q] = (int)(lo[q] - lo[0]);
        h->cnt_r[q] = (int)mine;
        h->dsp_r[q] = (int)(mine * (size_t)q);
        if (q != c->rank) h->sent += (hi[q] - lo[q]) * sizeof(float);
    }
    int rc = MPI_Ialltoallv(buf + lo[0], h->cnt_s, h->dsp_s, MPI_FLOAT, recv, h->cnt_r, h->dsp_r,
                            MPI_FLOAT, h->comm, &h->rq);
    if (rc != MPI_SUCCESS) {
        h->rq = MPI_REQUEST_NULL;
        return mpi_fail(rc, what);
    }
    return HPT_OK;
}

static hpt_status mpi_chan_test(void *ctx, int chan, int *done, const char *what) {
    mpi_ctx *c = ctx;
    mpi_chan *h = &c->ch[chan];
    *done = 1;
    if (h->rq == MPI_REQUEST_NULL) return HPT_OK;
    int rc = MPI_Test(&h->rq, done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
    if (*done) dist_count_sent(h->sent); /* MPI set rq to MPI_REQUEST_NULL */
    return HPT_OK;
}

static hpt_status mpi_chan_wait(void *ctx, int chan, const char *what) {
    mpi_ctx *c = ctx;
    mpi_chan *h = &c->ch[chan];
    if (h->rq == MPI_REQUEST_NULL) return HPT_OK;
    HPT_CHECK(wait_req(&h->rq, what));
    dist_count_sent(h->sent);
    return HPT_OK;
}

static hpt_status mpi_allgather_slices(void *ctx, float *buf, const size_t *lo, const size_t *hi,
                                       const char *what) {
    mpi_ctx *c = ctx;
    /* in pieces: MPI's counts are ints */
    const size_t piece = (size_t)1 << 28;
    size_t biggest = 0;
    for (int q = 0; q < c->size; q++)
        if (hi[q] - lo[q] > biggest) biggest = hi[q] - lo[q];
    for (size_t off = 0; off < biggest; off += piece) {
        size_t base = lo[0] + (off < hi[0] - lo[0] ? off : hi[0] - lo[0]);
        for (int q = 0; q < c->size; q++) {
            size_t len = hi[q] - lo[q];
            size_t a = lo[q] + (off < len ? off : len), b = lo[q] + (off + piece < len ? off + piece : len);
            c->cnt_r[q] = (int)(b - a);
            c->dsp_r[q] = (int)(a - base);
        }
        MPI_Request rq;
        int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf + base, c->cnt_r, c->dsp_r,
                                 MPI_FLOAT, MPI_COMM_WORLD, &rq);
        if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
        HPT_CHECK(wait_req(&rq, what));
        dist_count_sent((uint64_t)c->cnt_r[c->rank] * sizeof(float) * (uint64_t)(c->size - 1));
    }
    return HPT_OK;
}

static hpt_status mpi_allgather_bytes(void *ctx, const void *send, size_t bytes, void *recv,
                                      const char *what) {
    mpi_ctx *c = ctx;
    MPI_Request rq;
    int rc = MPI_Iallgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
    HPT_CHECK(wait_req(&rq, what));
    dist_count_sent((uint64_t)bytes * (uint64_t)(c->size - 1));
    return HPT_OK;
}

static hpt_status mpi_bcast(void *ctx, void *buf, size_t bytes, int root, const char *what) {
    mpi_ctx *c = ctx;
    MPI_Request rq;
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
    HPT_CHECK(wait_req(&rq, what));
    if (c->rank == root) dist_count_sent((uint64_t)bytes * (uint64_t)(c->size - 1));
    return HPT_OK;
}

static hpt_status mpi_barrier(void *ctx, const char *what) {
    (void)ctx;
    MPI_Request rq;
    int rc = MPI_Ibarrier(MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, what);
    return wait_req(&rq, what);
}

static const dist_ops k_mpi = {mpi_alltoall_slices, mpi_allgather_slices, mpi_allgather_bytes,
                               mpi_bcast, mpi_barrier, mpi_alltoall_start, mpi_chan_test,
                               mpi_chan_wait, NULL, NULL, NULL}; /* host buffers: dist.c's */
const dist_ops *dist_mpi_ops(void) { return &k_mpi; }

#else
typedef int dist_mpi_absent; /* a build without MPI: one process (dist.c) */
#endif
