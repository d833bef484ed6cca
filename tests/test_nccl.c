/* test_nccl.c: the NCCL transport (src/dist/nccl.c) op by op against the values the MPI/CPU
 * path computes, bit for bit: every table entry (all-to-all of slices, blocking and started on
 * both channels with chan_test/chan_wait, the all-gather of slices, of bytes from host, device
 * and mixed buffers, the broadcast from both, the barrier, the receive buffer) and the rank-order
 * sum on the device against the host loop (acc = x_0; acc += x_1; ...), with values whose sum
 * depends on the order and a -0 that a 0 + x start would turn into +0; and a host buffer given
 * to a float op refused.
 *   test_nccl        one rank (a one-GPU machine: NCCL refuses two ranks on one device, "Duplicate
 *                    GPU detected", so this is what one GPU checks: API misuse, staging, the sum)
 *   test_nccl N      N ranks, one forked process per GPU 0 .. N-1 (the ids handed over by pipes);
 *                    needs N GPUs (scripts/gpu_check.sh runs it when it sees them)
 * Without a GPU (or without NCCL in the build): SKIP, exit 77. */
#include "testlib.h"
#include "core/core.h"
#include "dist/dist.h"

#ifdef HPT_HAVE_NCCL
#include "kernels/backend.h"
#include "kernels/cuda/cuda.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NMAX 8
#define NV 1000 /* floats per rank's buffer */

/* Rank q's value i: mixed signs and magnitudes; index 3 is -0 on every rank (the sum stays -0
 * only from rank 0's value); index 5 (1e8, 1, -1e8, 1, ...) sums differently in another order. */
static float val(int q, size_t i) {
    if (i == 3) return -0.0f;
    if (i == 5) return q % 2 ? 1.0f : (q % 4 == 0 ? 1e8f : -1e8f);
    uint32_t h = (uint32_t)(q * 2654435761u) ^ (uint32_t)(i * 40503u + 17u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    float m = (float)(h & 0xffffff) / 16777216.0f - 0.5f;
    return m * (float)(1u << (h >> 28));
}

typedef struct {
    int rank, size;
    int rfd[NMAX], wfd[NMAX]; /* pipe q: rank 0 writes, rank q reads */
} pipes;

/* dist_bcast_fn for the ids: rank 0's bytes down the pipes (root 0 only). */
static hpt_status pipe_bcast(void *ctx, void *buf, size_t bytes, int root, const char *what) {
    pipes *p = ctx;
    (void)root;
    for (int q = 1; q < p->size; q++) {
        if (p->rank == 0 && write(p->wfd[q], buf, bytes) != (ssize_t)bytes)
            return hpt_fail(HPT_ERR_IO, "%s: pipe write", what);
        if (p->rank == q) {
            size_t got = 0;
            while (got < bytes) {
                ssize_t k = read(p->rfd[q], (char *)buf + got, bytes - got);
                if (k <= 0) return hpt_fail(HPT_ERR_IO, "%s: pipe read", what);
                got += (size_t)k;
            }
        }
    }
    return HPT_OK;
}

static int same_bits(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

static float *dev(size_t n) {
    float *d = NULL;
    if (cudaMalloc((void **)&d, n * sizeof(float)) != cudaSuccess) return NULL;
    return d;
}

static int run_rank(int r, int N, pipes *pp) {
    const hpt_backend *be;
    if (N > 1) CHECK_OK(hpt_cuda_select(r));
    if (hpt_cuda_device_count() < N || !(be = hpt_backend_cuda()))
        return t_gpu_skip("test_nccl", hpt_cuda_device_count() ? "fewer GPUs than ranks" : "no CUDA device");
    void *ctx = NULL;
    hpt_status s = dist_nccl_init(r, N, hpt_cuda_compute_stream(), be->add, pipe_bcast, pp, &ctx);
    CHECK_OK(s);
    if (s != HPT_OK) return t_done("test_nccl");
    const dist_ops *ops = dist_nccl_ops();
    size_t lo[NMAX], hi[NMAX];
    for (int q = 0; q < N; q++) { /* unequal slices, a gap at both ends */
        lo[q] = 3 + (size_t)q * 997 / (size_t)N + (q ? 1 : 0);
        hi[q] = 3 + (size_t)(q + 1) * 997 / (size_t)N - (q == N - 1 ? 3 : 0);
    }
    size_t mine = hi[r] - lo[r];
    float hb[NV], want[NV * NMAX], got[NV * NMAX];
    for (size_t i = 0; i < NV; i++) hb[i] = val(r, i);
    float *db = dev(NV), *recv = NULL;
    CHECK(db != NULL);
    cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
    CHECK_OK(ops->recv_alloc(ctx, (size_t)N * mine * sizeof(float), (void **)&recv, "test"));

    /* all-to-all of slices: slice q of recv is rank q's [lo_r, hi_r) */
    for (int q = 0; q < N; q++)
        for (size_t i = 0; i < mine; i++) want[(size_t)q * mine + i] = val(q, lo[r] + i);
    CHECK_OK(ops->alltoall_slices(ctx, db, lo, hi, recv, "test alltoall"));
    cudaMemcpy(got, recv, (size_t)N * mine * sizeof(float), cudaMemcpyDeviceToHost);
    CHECK(same_bits(got, want, (size_t)N * mine));

    /* the owner's sum on the device: the host loop's bits (dist.c's sum_round without a table) */
    float acc[NV];
    memcpy(acc, want, mine * sizeof(float));
    for (int q = 1; q < N; q++)
        for (size_t i = 0; i < mine; i++) acc[i] += want[(size_t)q * mine + i];
    CHECK_OK(ops->sum_slices(ctx, db + lo[r], recv, mine, N, "test sum"));
    cudaMemcpy(got, db, sizeof hb, cudaMemcpyDeviceToHost);
    CHECK(same_bits(got + lo[r], acc, mine));
    CHECK(same_bits(got, hb, lo[r]) && same_bits(got + hi[r], hb + hi[r], NV - hi[r]));
    if (lo[r] <= 3 && 3 < hi[r]) CHECK(signbit(got[3]) && got[3] == 0.0f);

    /* the sum of 4 slices whatever N: order-sensitive values, the host loop's bits */
    {
        enum { S = 4, M = 64 };
        float x[S * M], a[M], *dx = dev(S * M), *da = dev(M);
        for (int q = 0; q < S; q++)
            for (size_t i = 0; i < M; i++) x[q * M + i] = val(q, i);
        memcpy(a, x, sizeof a);
        for (int q = 1; q < S; q++)
            for (size_t i = 0; i < M; i++) a[i] += x[q * M + i];
        CHECK(a[5] == 1.0f); /* ((1e8 + 1) - 1e8) + 1: rank order; 0 + x_0 + ... would agree here, -0 not */
        cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice);
        CHECK_OK(ops->sum_slices(ctx, da, dx, M, S, "test sum 4"));
        float g[M];
        cudaMemcpy(g, da, sizeof g, cudaMemcpyDeviceToHost);
        CHECK(same_bits(g, a, M));
        CHECK(signbit(g[3]));
        cudaFree(dx);
        cudaFree(da);
    }

    /* started exchanges on both channels at once, then tested and waited for */
    {
        float *r2 = NULL, *db2 = dev(NV);
        cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
        cudaMemcpy(db2, hb, sizeof hb, cudaMemcpyHostToDevice);
        CHECK_OK(ops->recv_alloc(ctx, (size_t)N * mine * sizeof(float), (void **)&r2, "test"));
        CHECK_OK(ops->alltoall_start(ctx, 0, db, lo, hi, recv, "test chan 0"));
        CHECK_OK(ops->alltoall_start(ctx, 1, db2, lo, hi, r2, "test chan 1"));
        CHECK_STATUS(ops->alltoall_start(ctx, 0, db, lo, hi, recv, "busy"), HPT_ERR_INVALID);
        int done = 0;
        for (int k = 0; k < 1000000 && !done; k++) CHECK_OK(ops->chan_test(ctx, 1, &done, "test chan 1"));
        CHECK(done);
        CHECK_OK(ops->chan_wait(ctx, 0, "test chan 0"));
        cudaMemcpy(got, recv, (size_t)N * mine * sizeof(float), cudaMemcpyDeviceToHost);
        CHECK(same_bits(got, want, (size_t)N * mine));
        cudaMemcpy(got, r2, (size_t)N * mine * sizeof(float), cudaMemcpyDeviceToHost);
        CHECK(same_bits(got, want, (size_t)N * mine));
        ops->recv_free(ctx, r2);
        cudaFree(db2);
    }

    /* all-gather of slices in place: every rank's slice from its owner, the rest untouched */
    for (size_t i = 0; i < NV; i++) want[i] = hb[i];
    for (int q = 0; q < N; q++)
        for (size_t i = lo[q]; i < hi[q]; i++) want[i] = val(q, i);
    cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
    CHECK_OK(ops->allgather_slices(ctx, db, lo, hi, "test allgather"));
    cudaMemcpy(got, db, sizeof hb, cudaMemcpyDeviceToHost);
    CHECK(same_bits(got, want, NV));

    /* all-gather of bytes from host memory (staged) and from device memory */
    {
        double mineb[2] = {r + 0.25, -(double)r}, all[2 * NMAX], wantb[2 * NMAX];
        for (int q = 0; q < N; q++) wantb[2 * q] = q + 0.25, wantb[2 * q + 1] = -(double)q;
        CHECK_OK(ops->allgather_bytes(ctx, mineb, sizeof mineb, all, "test bytes host"));
        CHECK(!memcmp(all, wantb, (size_t)N * sizeof mineb));
        float *ds = dev(4), *dr = dev(4 * NMAX);
        cudaMemcpy(ds, hb, 4 * sizeof(float), cudaMemcpyHostToDevice);
        CHECK_OK(ops->allgather_bytes(ctx, ds, 4 * sizeof(float), dr, "test bytes device"));
        cudaMemcpy(got, dr, (size_t)N * 4 * sizeof(float), cudaMemcpyDeviceToHost);
        for (int q = 0; q < N; q++)
            for (size_t i = 0; i < 4; i++) want[(size_t)q * 4 + i] = val(q, i);
        CHECK(same_bits(got, want, (size_t)N * 4));
        memset(got, 0, (size_t)N * 4 * sizeof(float)); /* device send, host recv: staged */
        CHECK_OK(ops->allgather_bytes(ctx, ds, 4 * sizeof(float), got, "test bytes mixed"));
        CHECK(same_bits(got, want, (size_t)N * 4));
        cudaFree(ds);
        cudaFree(dr);
    }

    /* broadcast from the last rank: host (staged) and device */
    {
        int root = N - 1;
        char text[64];
        snprintf(text, sizeof text, "rank %d", r);
        CHECK_OK(ops->bcast(ctx, text, sizeof text, root, "test bcast host"));
        char wantt[64];
        snprintf(wantt, sizeof wantt, "rank %d", root);
        CHECK(!strcmp(text, wantt));
        cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
        CHECK_OK(ops->bcast(ctx, db, sizeof hb, root, "test bcast device"));
        cudaMemcpy(got, db, sizeof hb, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < NV; i++) want[i] = val(root, i);
        CHECK(same_bits(got, want, NV));
    }

    CHECK_OK(ops->barrier(ctx, "test barrier"));
    /* a host buffer given to a float op: refused by name */
    CHECK_STATUS(ops->alltoall_slices(ctx, hb, lo, hi, recv, "host"), HPT_ERR_INVALID);
    CHECK_STATUS(ops->allgather_slices(ctx, hb, lo, hi, "host"), HPT_ERR_INVALID);
    ops->recv_free(ctx, recv);
    cudaFree(db);
    dist_nccl_finalize(ctx, 0);
    printf("test_nccl: rank %d of %d\n", r, N);
    return t_done("test_nccl");
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 1;
    if (N < 1 || N > NMAX) {
        fprintf(stderr, "usage: test_nccl [ranks 1..%d]\n", NMAX);
        return 2;
    }
    pipes p = {0, N, {0}, {0}};
    if (N == 1) return run_rank(0, 1, &p);
    /* N processes, forked before any CUDA call (a child cannot use CUDA its parent started) */
    for (int q = 1; q < N; q++) {
        int fd[2];
        if (pipe(fd)) return 1;
        p.rfd[q] = fd[0];
        p.wfd[q] = fd[1];
    }
    pid_t pid[NMAX];
    for (int q = 0; q < N; q++) {
        pid[q] = fork();
        if (pid[q] < 0) return 1;
        if (pid[q] == 0) {
            p.rank = q;
            _exit(run_rank(q, N, &p));
        }
    }
    int rc = 0;
    for (int q = 0; q < N; q++) {
        int st = 0;
        waitpid(pid[q], &st, 0);
        int c = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        if (c && rc != 1) rc = c; /* a failure wins over a skip */
    }
    return rc;
}

#else
int main(void) {
    printf("SKIP: no NCCL in this build\n");
    return 77;
}
#endif
