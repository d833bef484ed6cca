/* dist.c: the process-wide world and the fixed-order collectives built on a transport's table
 * (dist.h), in rounds of at most DIST_PIECE/N floats per rank; started exchanges
 * (dist_reduce_scatter_start .. dist_wait), one per channel, advanced round by round, with
 * HPT_DIST_PROGRESS=thread by a progress thread. docs/zero.md, "The communication layer".
 * Invariants: a reduce-scatter's float sum is computed by the chunk's owner alone, in rank order
 * from rank 0's value (acc = x_0; acc += x_1; ...), element by element, so N processes give the
 * bits of one process summing its micro-batches apart, whatever the transport or timing; the
 * allgather copies the owner's bits; a channel's rounds follow each other in the same order on
 * every rank; the receive buffer (16 MiB, host) is the layer's only allocation, freed after
 * each call (a started exchange holds its own until dist_wait); with the progress thread every
 * transport call is made under the layer's lock. With the nccl transport (nccl.c) the receive
 * buffer is device memory and the sums run on the device (the table's sum_slices). */
#include "core/core.h"
#include "core/crc32c.h"
#include "dist/dist.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DIST_PIECE ((size_t)1 << 22) /* floats in the receive buffer: 16 MiB */

static struct {
    int inited, rank, size, shared_failure;
    void *ctx;
    void *mpi_ctx, *nccl_ctx; /* the transports' own (ctx is the one ops runs on) */
    const dist_ops *ops;
    uint64_t sent;
    double timeout_s;
    size_t piece;  /* floats in the receive buffer (HPT_DIST_PIECE: tests make it small) */
    int progress;  /* HPT_DIST_PROGRESS=thread: the progress thread runs */
    pthread_t thread;
    int thread_on, thread_stop;
    dist_req *inflight[DIST_CHANNELS];
} g_w = {0, 0, 1, 0, NULL, NULL, NULL, NULL, 0, 600.0, DIST_PIECE, 0, 0, 0, 0, {NULL}};
/* Held around every transport call while the progress thread runs. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;

struct dist_req {
    float *buf, *recv;
    size_t lo[64], hi[64], plo[64], phi[64], piece, biggest, off;
    int chan, done;
    hpt_status err;      /* a failure in the progress thread, told by dist_wait */
    char what[96], msg[512];
};

static void lock(void) { if (g_w.progress) pthread_mutex_lock(&g_lock); }
static void unlock(void) { if (g_w.progress) pthread_mutex_unlock(&g_lock); }

int hpt_dist_have_mpi(void) {
#ifdef HPT_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

hpt_status hpt_dist_init(void) {
    if (g_w.inited) return HPT_OK;
    const char *t = getenv("HPT_DIST_TIMEOUT_S");
    if (t && atof(t) > 0.0) g_w.timeout_s = atof(t);
    const char *pc = getenv("HPT_DIST_PIECE");
    if (pc && atol(pc) > 0) g_w.piece = (size_t)atol(pc);
    const char *pr = getenv("HPT_DIST_PROGRESS");
    g_w.progress = pr && !strcmp(pr, "thread");
#ifdef HPT_HAVE_MPI
    if (dist_mpi_launched()) {
        HPT_CHECK(dist_mpi_init(&g_w.rank, &g_w.size, &g_w.ctx, g_w.progress));
        g_w.mpi_ctx = g_w.ctx;
        g_w.ops = dist_mpi_ops();
    }
#endif
    g_w.inited = 1;
    return HPT_OK;
}

void hpt_dist_finalize(int failed) {
    if (!g_w.inited) return;
    if (g_w.thread_on) {
        pthread_mutex_lock(&g_lock);
        g_w.thread_stop = 1;
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_lock);
        pthread_join(g_w.thread, NULL);
        g_w.thread_on = g_w.thread_stop = 0;
    }
    if (g_w.nccl_ctx) dist_nccl_finalize(g_w.nccl_ctx, failed && !g_w.shared_failure);
    g_w.nccl_ctx = NULL;
#ifdef HPT_HAVE_MPI
    if (g_w.mpi_ctx) dist_mpi_finalize(g_w.mpi_ctx, failed && !g_w.shared_failure);
    g_w.mpi_ctx = NULL;
#else
    (void)failed;
#endif
    g_w.inited = 0;
    g_w.ops = NULL;
    g_w.ctx = NULL;
    g_w.rank = 0;
    g_w.size = 1;
}

/* HPT_DIST_TRANSPORT: 0 mpi (or unset), 1 nccl, -1 another name. */
static int transport_asked(void) {
    const char *t = getenv("HPT_DIST_TRANSPORT");
    if (!t || !*t || !strcmp(t, "mpi")) return 0;
    return !strcmp(t, "nccl") ? 1 : -1;
}

int dist_transport_nccl(void) { return transport_asked() == 1; }

hpt_status dist_transport_check(int on_device) {
    int t = transport_asked();
    if (t < 0)
        return hpt_fail(HPT_ERR_INVALID, "HPT_DIST_TRANSPORT=%s: the transports are mpi and nccl",
                        getenv("HPT_DIST_TRANSPORT"));
    if (t == 0) return HPT_OK;
    if (!dist_have_nccl())
        return hpt_fail(HPT_ERR_UNSUPPORTED, "HPT_DIST_TRANSPORT=nccl: this build has no NCCL "
                        "(a CUDA build that finds nccl.h and libnccl)");
    if (!on_device)
        return hpt_fail(HPT_ERR_INVALID, "HPT_DIST_TRANSPORT=nccl needs --device cuda (NCCL "
                        "moves device buffers; the CPU's processes use mpi)");
    if (g_w.progress)
        return hpt_fail(HPT_ERR_INVALID, "HPT_DIST_TRANSPORT=nccl with HPT_DIST_PROGRESS=thread: "
                        "NCCL needs no progress thread (its exchanges run on their own streams)");
    return HPT_OK;
}

hpt_status dist_bind_device(void *compute_stream, dist_add_fn add) {
    if (g_w.size == 1 || !dist_transport_nccl() || g_w.nccl_ctx) return HPT_OK;
#ifdef HPT_HAVE_MPI
    HPT_CHECK(dist_nccl_init(g_w.rank, g_w.size, compute_stream, add, dist_mpi_ops()->bcast,
                             g_w.mpi_ctx, &g_w.nccl_ctx));
    g_w.ctx = g_w.nccl_ctx;
    g_w.ops = dist_nccl_ops();
    return HPT_OK;
#else
    (void)compute_stream, (void)add;
    return hpt_fail(HPT_ERR_UNSUPPORTED, "HPT_DIST_TRANSPORT=nccl: no MPI to start the processes");
#endif
}

/* The reduce-scatter's receive buffer (floats): the transport's memory, or the host's. */
static hpt_status recv_alloc(size_t floats, float **out, const char *what) {
    if (g_w.ops->recv_alloc)
        return g_w.ops->recv_alloc(g_w.ctx, floats * sizeof(float), (void **)out, what);
    if (!(*out = malloc(floats * sizeof(float))))
        return hpt_fail(HPT_ERR_OOM, "%s: the receive buffer", what);
    return HPT_OK;
}

static void recv_free(float *p) {
    if (g_w.ops && g_w.ops->recv_free) g_w.ops->recv_free(g_w.ctx, p);
    else free(p);
}

/* The owner's sum of one round: acc (m) = x_0 + x_1 + ... in rank order, x_q = recv's slice q
 * (N slices of m); par: OpenMP threads may share the host loop (the bits are the same). */
static hpt_status sum_round(float *acc, const float *recv, size_t m, int par, const char *what) {
    if (!m) return HPT_OK;
    if (g_w.ops->sum_slices) return g_w.ops->sum_slices(g_w.ctx, acc, recv, m, g_w.size, what);
    memcpy(acc, recv, m * sizeof(float));
    for (int q = 1; q < g_w.size; q++) {
        const float *x = recv + (size_t)q * m;
#pragma omp parallel for simd schedule(static) if (par)
        for (size_t i = 0; i < m; i++) acc[i] += x[i];
    }
    return HPT_OK;
}

int hpt_dist_rank(void) { return g_w.rank; }
int hpt_dist_size(void) { return g_w.size; }
uint64_t hpt_dist_bytes_sent(void) { return g_w.sent; }
void dist_count_sent(uint64_t bytes) { g_w.sent += bytes; }
double dist_timeout_s(void) { return g_w.timeout_s; }

void dist_chunk(size_t n, int rank, int size, size_t *lo, size_t *hi) {
    /* n * (rank + 1) stays in 64 bits for any buffer that fits in memory */
    *lo = (size_t)((uint64_t)n * (uint64_t)rank / (uint64_t)size);
    *hi = (size_t)((uint64_t)n * (uint64_t)(rank + 1) / (uint64_t)size);
}

hpt_status dist_reduce_scatter_ranges(float *buf, const size_t *lo, const size_t *hi,
                                      const char *what) {
    int N = g_w.size, r = g_w.rank;
    if (N == 1) return HPT_OK;
    size_t plo[64], phi[64];
    if (N > 64) return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: more than 64 processes", what);
    size_t piece = g_w.piece / (size_t)N, biggest = 0;
    if (!piece) piece = 1;
    for (int q = 0; q < N; q++)
        if (hi[q] - lo[q] > biggest) biggest = hi[q] - lo[q];
    float *recv;
    HPT_CHECK(recv_alloc((piece < biggest ? piece : biggest ? biggest : 1) * (size_t)N, &recv, what));
    hpt_status s = HPT_OK;
    /* round j: every chunk's piece j (empty for a chunk already done) */
    for (size_t off = 0; s == HPT_OK && off < biggest; off += piece) {
        for (int q = 0; q < N; q++) {
            size_t len = hi[q] - lo[q];
            plo[q] = lo[q] + (off < len ? off : len);
            phi[q] = lo[q] + (off + piece < len ? off + piece : len);
        }
        lock();
        s = g_w.ops->alltoall_slices(g_w.ctx, buf, plo, phi, recv, what);
        unlock();
        size_t m = phi[r] - plo[r];
        /* (m) this rank's piece: x_0 + x_1 + ... in rank order */
        if (s == HPT_OK) s = sum_round(buf + plo[r], recv, m, m >= 65536, what);
    }
    recv_free(recv);
    return s;
}

/* ---- started reduce-scatters ---- */

/* Round rq->off's slices posted on rq's channel (the lock held when the thread runs). */
static hpt_status req_post(dist_req *rq) {
    int N = g_w.size;
    for (int q = 0; q < N; q++) {
        size_t len = rq->hi[q] - rq->lo[q];
        rq->plo[q] = rq->lo[q] + (rq->off < len ? rq->off : len);
        rq->phi[q] = rq->lo[q] + (rq->off + rq->piece < len ? rq->off + rq->piece : len);
    }
    return g_w.ops->alltoall_start(g_w.ctx, rq->chan, rq->buf, rq->plo, rq->phi, rq->recv, rq->what);
}

/* Advances rq: when its round is in, the owner's sums in rank order (as the blocking call's),
 * then the next round posted; rq->done after the last. */
static hpt_status req_advance(dist_req *rq) {
    while (!rq->done) {
        int in = 0;
        HPT_CHECK(g_w.ops->chan_test(g_w.ctx, rq->chan, &in, rq->what));
        if (!in) return HPT_OK;
        int r = g_w.rank;
        size_t m = rq->phi[r] - rq->plo[r];
        /* (m) x_0 + x_1 + ... in rank order */
        HPT_CHECK(sum_round(rq->buf + rq->plo[r], rq->recv, m, m >= 65536 && !g_w.progress, rq->what));
        rq->off += rq->piece;
        if (rq->off >= rq->biggest) rq->done = 1;
        else HPT_CHECK(req_post(rq));
    }
    return HPT_OK;
}

/* The progress thread: every exchange in flight advanced every ~100 us; asleep when none is. */
static void *progress_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_lock);
    while (!g_w.thread_stop) {
        int any = 0;
        for (int k = 0; k < DIST_CHANNELS; k++) {
            dist_req *rq = g_w.inflight[k];
            if (!rq || rq->done || rq->err != HPT_OK) continue;
            any = 1;
            hpt_status s = req_advance(rq);
            if (s != HPT_OK) {
                rq->err = s;
                snprintf(rq->msg, sizeof rq->msg, "%s", hpt_last_error());
            }
        }
        if (!any) {
            pthread_cond_wait(&g_cv, &g_lock);
            continue;
        }
        pthread_mutex_unlock(&g_lock);
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&g_lock);
    }
    pthread_mutex_unlock(&g_lock);
    return NULL;
}

hpt_status dist_reduce_scatter_start(float *buf, const size_t *lo, const size_t *hi, int chan,
                                     const char *what, dist_req **out) {
    int N = g_w.size;
    *out = NULL;
    if (N == 1) return HPT_OK;
    if (N > 64) return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: more than 64 processes", what);
    if (chan < 0 || chan >= DIST_CHANNELS || g_w.inflight[chan])
        return hpt_fail(HPT_ERR_INVALID, "%s: channel %d is busy or not one", what, chan);
    dist_req *rq = calloc(1, sizeof *rq);
    if (!rq) return hpt_fail(HPT_ERR_OOM, "%s: the exchange", what);
    rq->buf = buf;
    rq->chan = chan;
    snprintf(rq->what, sizeof rq->what, "%s", what);
    rq->piece = g_w.piece / (size_t)N ? g_w.piece / (size_t)N : 1;
    for (int q = 0; q < N; q++) {
        rq->lo[q] = lo[q];
        rq->hi[q] = hi[q];
        if (hi[q] - lo[q] > rq->biggest) rq->biggest = hi[q] - lo[q];
    }
    if (!rq->biggest) { /* nothing to send: done (every rank sees the same sizes) */
        rq->done = 1;
        *out = rq;
        return HPT_OK;
    }
    size_t rn = (rq->piece < rq->biggest ? rq->piece : rq->biggest) * (size_t)N;
    hpt_status sa = recv_alloc(rn, &rq->recv, what);
    if (sa != HPT_OK) {
        free(rq);
        return sa;
    }
    if (g_w.progress && !g_w.thread_on) {
        if (pthread_create(&g_w.thread, NULL, progress_main, NULL)) {
            recv_free(rq->recv);
            free(rq);
            return hpt_fail(HPT_ERR_IO, "%s: cannot start the progress thread", what);
        }
        g_w.thread_on = 1;
    }
    lock();
    hpt_status s = req_post(rq);
    if (s == HPT_OK) {
        g_w.inflight[chan] = rq;
        if (g_w.progress) pthread_cond_broadcast(&g_cv);
    }
    unlock();
    if (s != HPT_OK) {
        recv_free(rq->recv);
        free(rq);
        return s;
    }
    *out = rq;
    return HPT_OK;
}

hpt_status dist_test(dist_req *rq, int *done) {
    *done = 1;
    if (!rq) return HPT_OK;
    lock();
    hpt_status s = rq->err != HPT_OK ? hpt_fail(rq->err, "%s", rq->msg) : req_advance(rq);
    *done = rq->done;
    unlock();
    return s;
}

hpt_status dist_wait(dist_req *rq) {
    if (!rq) return HPT_OK;
    hpt_status s = HPT_OK;
    lock(); /* rq's fields are the progress thread's too */
    /* the rounds left: each waited for (with the timeout), summed, the next one posted */
    while (s == HPT_OK && !rq->done && rq->err == HPT_OK) {
        s = g_w.ops->chan_wait(g_w.ctx, rq->chan, rq->what);
        if (s == HPT_OK) s = req_advance(rq);
    }
    if (s == HPT_OK && rq->err != HPT_OK) s = hpt_fail(rq->err, "%s", rq->msg);
    if (s == HPT_OK) g_w.inflight[rq->chan] = NULL;
    unlock();
    if (s != HPT_OK) { /* the transport may still write it: left as it is */
        dist_abandon(rq);
        return s;
    }
    recv_free(rq->recv);
    free(rq);
    return HPT_OK;
}

void dist_abandon(dist_req *rq) {
    if (!rq) return;
    lock();
    if (g_w.inflight[rq->chan] == rq) g_w.inflight[rq->chan] = NULL;
    unlock();
    /* rq and its receive buffer stay allocated: the job is ending */
}

hpt_status dist_allgather_ranges(float *buf, const size_t *lo, const size_t *hi, const char *what) {
    if (g_w.size == 1) return HPT_OK;
    lock();
    hpt_status s = g_w.ops->allgather_slices(g_w.ctx, buf, lo, hi, what);
    unlock();
    return s;
}

hpt_status dist_reduce_scatter_f32(float *buf, size_t n, const char *what) {
    int N = g_w.size;
    if (N == 1) return HPT_OK;
    size_t lo[64], hi[64];
    if (N > 64) return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: more than 64 processes", what);
    for (int q = 0; q < N; q++) dist_chunk(n, q, N, &lo[q], &hi[q]);
    return dist_reduce_scatter_ranges(buf, lo, hi, what);
}

hpt_status dist_allgather_f32(float *buf, size_t n, const char *what) {
    int N = g_w.size;
    if (N == 1) return HPT_OK;
    size_t lo[64], hi[64];
    if (N > 64) return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: more than 64 processes", what);
    for (int q = 0; q < N; q++) dist_chunk(n, q, N, &lo[q], &hi[q]);
    return dist_allgather_ranges(buf, lo, hi, what);
}

hpt_status dist_allgather_raw(const void *send, size_t bytes, void *recv, const char *what) {
    if (g_w.size == 1) {
        memcpy(recv, send, bytes);
        return HPT_OK;
    }
    lock();
    hpt_status s = g_w.ops->allgather_bytes(g_w.ctx, send, bytes, recv, what);
    unlock();
    return s;
}

hpt_status dist_allreduce_f32(float *buf, size_t n, const char *what) {
    HPT_CHECK(dist_reduce_scatter_f32(buf, n, what));
    return dist_allgather_f32(buf, n, what);
}

hpt_status dist_allgather_f64(double v, double *out, const char *what) {
    if (g_w.size == 1) {
        out[0] = v;
        return HPT_OK;
    }
    return dist_allgather_raw(&v, sizeof v, out, what);
}

hpt_status dist_bcast(void *buf, size_t bytes, int root, const char *what) {
    if (g_w.size == 1) return HPT_OK;
    lock();
    hpt_status s = g_w.ops->bcast(g_w.ctx, buf, bytes, root, what);
    unlock();
    return s;
}

hpt_status dist_barrier(const char *what) {
    if (g_w.size == 1) return HPT_OK;
    lock();
    hpt_status s = g_w.ops->barrier(g_w.ctx, what);
    unlock();
    return s;
}

int hpt_dist_any(int flag) {
    if (g_w.size == 1) return flag != 0;
    double v = flag ? 1.0 : 0.0, all[64];
    if (g_w.size > 64 || dist_allgather_f64(v, all, "the stop flag") != HPT_OK) return 1;
    for (int q = 0; q < g_w.size; q++)
        if (all[q] != 0.0) return 1;
    return 0;
}

/* Line k of text (the k-th "key=value" line) as key [*k0, *k1) and value [*v0, *v1); 0 past the end. */
static int nth_line(const char *text, int k, const char **key, int *klen, const char **val, int *vlen) {
    const char *a = text;
    for (int i = 0; *a; i++) {
        int la = (int)strcspn(a, "\n"), ka = (int)strcspn(a, "=");
        if (ka > la) ka = la;
        if (i == k) {
            *key = a;
            *klen = ka;
            *val = a + ka + (ka < la);
            *vlen = la - ka - (ka < la);
            return 1;
        }
        a += la + (a[la] == '\n');
    }
    return 0;
}

/* The value of key in text (its first line with that key); 0 when none has it. */
static int find_key(const char *text, const char *key, int klen, const char **val, int *vlen) {
    const char *k;
    int kl;
    for (int i = 0; nth_line(text, i, &k, &kl, val, vlen); i++)
        if (kl == klen && !memcmp(k, key, (size_t)klen)) return 1;
    return 0;
}

/* The first key whose value differs between mine and ref (rank 0's), looked up by key so an
 * option given on one rank only is named as such: "key is A on rank r but B on rank 0". */
static void first_difference(const char *mine, const char *ref, char *out, size_t n) {
    const char *k, *a, *b;
    int kl, la, lb;
    for (int i = 0; nth_line(mine, i, &k, &kl, &a, &la); i++) {
        if (!find_key(ref, k, kl, &b, &lb)) {
            snprintf(out, n, "%.*s is %.*s on rank %d but not given on rank 0", kl, k, la, a, g_w.rank);
            return;
        }
        if (la != lb || memcmp(a, b, (size_t)la)) {
            snprintf(out, n, "%.*s is %.*s on rank %d but %.*s on rank 0", kl, k, la, a, g_w.rank, lb, b);
            return;
        }
    }
    for (int i = 0; nth_line(ref, i, &k, &kl, &b, &lb); i++)
        if (!find_key(mine, k, kl, &a, &la)) {
            snprintf(out, n, "%.*s is not given on rank %d but %.*s on rank 0", kl, k, g_w.rank, lb, b);
            return;
        }
    snprintf(out, n, "rank %d's configuration differs from rank 0's", g_w.rank);
}

hpt_status dist_agree(const char *text) {
    if (g_w.size == 1) return HPT_OK;
    int N = g_w.size;
    uint64_t mine = crc32c(0, text, strlen(text)) | (uint64_t)strlen(text) << 32;
    uint64_t *all = calloc((size_t)N, sizeof *all);
    char *lines = calloc((size_t)N, 256);
    uint64_t len0 = strlen(text) + 1;
    char *ref = NULL;
    hpt_status s = all && lines ? HPT_OK : hpt_fail(HPT_ERR_OOM, "the configuration check");
    if (s == HPT_OK) s = dist_allgather_raw(&mine, sizeof mine, all, "the configuration check");
    int same = 1;
    for (int q = 1; s == HPT_OK && q < N; q++) same &= all[q] == all[0];
    if (s == HPT_OK && !same) { /* rank 0's text to all; each names its first difference */
        s = dist_bcast(&len0, sizeof len0, 0, "the configuration check");
        if (s == HPT_OK && !(ref = calloc(len0, 1))) s = hpt_fail(HPT_ERR_OOM, "the configuration check");
        if (s == HPT_OK && g_w.rank == 0) memcpy(ref, text, len0);
        if (s == HPT_OK) s = dist_bcast(ref, len0, 0, "the configuration check");
        char line[256] = "";
        if (s == HPT_OK && all[g_w.rank] != all[0]) first_difference(text, ref, line, sizeof line);
        if (s == HPT_OK) s = dist_allgather_raw(line, sizeof line, lines, "the configuration check");
        for (int q = 1; s == HPT_OK && q < N; q++)
            if (lines[(size_t)q * 256]) {
                g_w.shared_failure = 1;
                s = hpt_fail(HPT_ERR_INVALID, "the processes were started with different "
                             "configurations: %s", lines + (size_t)q * 256);
            }
    }
    free(ref);
    free(lines);
    free(all);
    return s;
}
