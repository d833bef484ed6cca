/* test_transfer.c: the checking CPU transfer table (kernels/transfer_check.c): correct use gives
 * the data; each misuse is caught, either as a wrong result (a destination read before its wait
 * is NaN; a source overwritten before the wait changes what is copied) or as a reported error
 * (unordered overlapping copies, memory freed under a queued copy, a copy on COMPUTE, a copy
 * still queued at exit: that one in a child process, which must abort with the message). */
#include "testlib.h"
#include "kernels/backend.h"
#include "mem/mem.h"

#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 64

static int g_errors;
static char g_msg[512];

static void on_error(const char *msg) {
    g_errors++;
    snprintf(g_msg, sizeof g_msg, "%s", msg);
}

/* Forgets the errors reported so far. */
static void expect_errors_from(void) {
    g_errors = 0;
    g_msg[0] = 0;
}

static void fill(float *p, float base) {
    for (int i = 0; i < N; i++) p[i] = base + (float)i;
}

static int all_nan_bytes(const float *p) {
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < N * sizeof(float); i++)
        if (b[i] != 0xff) return 0;
    return 1;
}

static int is(const float *p, float base) {
    for (int i = 0; i < N; i++)
        if (p[i] != base + (float)i) return 0;
    return 1;
}

/* The header's example: a load after the compute, waited for by the compute. */
static void correct_use(const hpt_transfer *x) {
    float host[N], dev[N];
    fill(host, 1), fill(dev, 100);
    hpt_xevent *after, *done;
    CHECK_OK(x->event_create(&after));
    CHECK_OK(x->event_create(&done));
    x->record(after, HPT_XS_COMPUTE);
    x->stream_wait(HPT_XS_LOAD, after);
    x->copy_async(dev, host, sizeof dev, HPT_COPY_H2D, HPT_XS_LOAD);
    x->record(done, HPT_XS_LOAD);
    CHECK(all_nan_bytes(dev));                 /* not yet: a read here is a bug, and shows */
    CHECK(hpt_transfer_check_queued() == 1);
    x->stream_wait(HPT_XS_COMPUTE, done);
    CHECK(is(dev, 1));
    CHECK(hpt_transfer_check_queued() == 0);
    /* host_wait does the same for the host */
    fill(dev, 7);
    x->copy_async(host, dev, sizeof host, HPT_COPY_D2H, HPT_XS_STORE);
    x->record(done, HPT_XS_STORE);
    CHECK(all_nan_bytes(host));
    x->host_wait(done);
    CHECK(is(host, 7));
    x->event_destroy(after), x->event_destroy(done);
}

/* A source overwritten before the wait: the copy takes the new bytes (the deferred copy shows
 * the missing wait as a wrong result). */
static void source_overwritten(const hpt_transfer *x) {
    float src[N], dst[N];
    fill(src, 1);
    hpt_xevent *done;
    CHECK_OK(x->event_create(&done));
    x->copy_async(dst, src, sizeof dst, HPT_COPY_D2H, HPT_XS_STORE);
    x->record(done, HPT_XS_STORE);
    fill(src, 50); /* the compute reuses the buffer before waiting */
    x->host_wait(done);
    CHECK(is(dst, 50) && !is(dst, 1));
    x->event_destroy(done);
}

/* An event covers only the copies issued on its stream before its record. */
static void event_covers_prefix(const hpt_transfer *x) {
    float a[N], b[N], da[N], db[N];
    fill(a, 1), fill(b, 2);
    hpt_xevent *e1, *e2;
    CHECK_OK(x->event_create(&e1));
    CHECK_OK(x->event_create(&e2));
    x->copy_async(da, a, sizeof da, HPT_COPY_H2D, HPT_XS_LOAD);
    x->record(e1, HPT_XS_LOAD);
    x->copy_async(db, b, sizeof db, HPT_COPY_H2D, HPT_XS_LOAD);
    x->record(e2, HPT_XS_LOAD);
    x->stream_wait(HPT_XS_COMPUTE, e1);
    CHECK(is(da, 1) && all_nan_bytes(db));
    x->host_wait(e2);
    CHECK(is(db, 2));
    /* an event never recorded covers nothing (CUDA: complete) */
    hpt_xevent *e3;
    CHECK_OK(x->event_create(&e3));
    x->copy_async(da, b, sizeof da, HPT_COPY_H2D, HPT_XS_LOAD);
    x->host_wait(e3);
    CHECK(all_nan_bytes(da));
    x->host_wait(e2); /* e2 was recorded before this copy: still not due */
    CHECK(all_nan_bytes(da));
    x->record(e3, HPT_XS_LOAD);
    x->host_wait(e3);
    CHECK(is(da, 2));
    x->event_destroy(e1), x->event_destroy(e2), x->event_destroy(e3);
}

/* STORE -> host, then LOAD host -> elsewhere after STORE's event: the load's copy runs after the
 * store's (transitively, from a wait on LOAD's event alone). Without the stream_wait the two
 * race on the host bytes: reported. */
static void cross_stream(const hpt_transfer *x) {
    float dev[N], host[N], dev2[N];
    hpt_xevent *st, *ld;
    CHECK_OK(x->event_create(&st));
    CHECK_OK(x->event_create(&ld));
    fill(dev, 3);
    expect_errors_from();
    x->copy_async(host, dev, sizeof host, HPT_COPY_D2H, HPT_XS_STORE);
    x->record(st, HPT_XS_STORE);
    x->stream_wait(HPT_XS_LOAD, st);
    x->copy_async(dev2, host, sizeof dev2, HPT_COPY_H2D, HPT_XS_LOAD);
    x->record(ld, HPT_XS_LOAD);
    CHECK(all_nan_bytes(host) && all_nan_bytes(dev2));
    x->stream_wait(HPT_XS_COMPUTE, ld);
    CHECK(is(dev2, 3) && is(host, 3));
    CHECK(g_errors == 0);

    /* the same without the stream_wait: a race (read after write) */
    x->copy_async(host, dev, sizeof host, HPT_COPY_D2H, HPT_XS_STORE);
    x->copy_async(dev2, host, sizeof dev2, HPT_COPY_H2D, HPT_XS_LOAD);
    CHECK_MSG(g_errors == 1 && strstr(g_msg, "no event orders"), "%d: %s", g_errors, g_msg);
    hpt_transfer_check_reset();

    /* write after read: LOAD overwrites the source of a queued STORE copy. Ordered, the store
     * copy runs first and takes the old bytes; unordered, reported. */
    expect_errors_from();
    fill(dev, 4), fill(host, 0);
    x->copy_async(host, dev, sizeof host, HPT_COPY_D2H, HPT_XS_STORE);
    x->record(st, HPT_XS_STORE);
    x->stream_wait(HPT_XS_LOAD, st);
    fill(dev2, 9);
    x->copy_async(dev, dev2, sizeof dev, HPT_COPY_H2D, HPT_XS_LOAD);
    x->record(ld, HPT_XS_LOAD);
    x->host_wait(ld);
    CHECK(is(host, 4) && is(dev, 9));
    CHECK(g_errors == 0);
    x->copy_async(host, dev, sizeof host, HPT_COPY_D2H, HPT_XS_STORE);
    x->copy_async(dev, dev2, sizeof dev, HPT_COPY_H2D, HPT_XS_LOAD);
    CHECK_MSG(g_errors == 1 && strstr(g_msg, "writes that copy's source"), "%s", g_msg);
    hpt_transfer_check_reset();

    /* write after write on two streams, unordered */
    expect_errors_from();
    x->copy_async(host, dev, sizeof host, HPT_COPY_D2H, HPT_XS_STORE);
    x->copy_async(host, dev2, sizeof host, HPT_COPY_H2D, HPT_XS_LOAD);
    CHECK_MSG(g_errors == 1 && strstr(g_msg, "same bytes"), "%s", g_msg);
    hpt_transfer_check_reset();

    /* a stream's own copies are ordered: no error, the later one's bytes win */
    expect_errors_from();
    fill(dev, 5), fill(dev2, 6);
    x->copy_async(host, dev, sizeof host, HPT_COPY_D2H, HPT_XS_STORE);
    x->copy_async(host, dev2, sizeof host, HPT_COPY_D2H, HPT_XS_STORE);
    x->record(st, HPT_XS_STORE);
    x->host_wait(st);
    CHECK(g_errors == 0 && is(host, 6));
    x->event_destroy(st), x->event_destroy(ld);
}

/* A copy on the COMPUTE stream, and memory freed under a queued copy (the CPU backend's free). */
static void misuse_reported(const hpt_transfer *x) {
    float a[N], b[N];
    fill(a, 1);
    expect_errors_from();
    x->copy_async(b, a, sizeof b, HPT_COPY_H2D, HPT_XS_COMPUTE);
    CHECK_MSG(g_errors == 1 && strstr(g_msg, "COMPUTE"), "%s", g_msg);

    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    const hpt_backend *be = hpt_backend_cpu();
    float *h;
    CHECK_OK(be->alloc(mem, HPT_TIER_HOST, HPT_CAT_ACTS, N * sizeof(float), (void **)&h));
    expect_errors_from();
    x->copy_async(h, a, N * sizeof(float), HPT_COPY_D2H, HPT_XS_STORE);
    be->free(mem, HPT_TIER_HOST, HPT_CAT_ACTS, h, N * sizeof(float));
    CHECK_MSG(g_errors == 1 && strstr(g_msg, "freed under a queued copy"), "%s", g_msg);
    hpt_transfer_check_reset();
    /* waited for first: no error */
    CHECK_OK(be->alloc(mem, HPT_TIER_HOST, HPT_CAT_ACTS, N * sizeof(float), (void **)&h));
    hpt_xevent *ev;
    CHECK_OK(x->event_create(&ev));
    expect_errors_from();
    x->copy_async(h, a, N * sizeof(float), HPT_COPY_D2H, HPT_XS_STORE);
    x->record(ev, HPT_XS_STORE);
    x->host_wait(ev);
    CHECK(is(h, 1));
    be->free(mem, HPT_TIER_HOST, HPT_CAT_ACTS, h, N * sizeof(float));
    CHECK(g_errors == 0);
    /* the backend's sync runs every queued copy (a GPU's sync waits for the copy streams) */
    x->copy_async(b, a, sizeof b, HPT_COPY_H2D, HPT_XS_LOAD);
    CHECK(all_nan_bytes(b));
    be->sync();
    CHECK(is(b, 1) && hpt_transfer_check_queued() == 0);
    x->event_destroy(ev);
    hpt_mem_destroy(mem);
}

/* In a child with the default handler: a copy left queued at exit aborts with the message. */
static void leak_aborts(const hpt_transfer *x) {
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        hpt_transfer_check_on_error(NULL);
        static float a[N], b[N];
        x->copy_async(b, a, sizeof b, HPT_COPY_H2D, HPT_XS_LOAD);
        exit(0); /* atexit: the check aborts */
    }
    int st = 0;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECK_MSG(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "child status %d", st);
}

int main(void) {
    const hpt_transfer *x = hpt_transfer_check();
    CHECK(x->async == 1 && !strcmp(x->name, "cpu-check"));
    hpt_transfer_check_on_error(on_error);
    expect_errors_from();
    correct_use(x);
    source_overwritten(x);
    event_covers_prefix(x);
    CHECK(g_errors == 0);
    cross_stream(x);
    misuse_reported(x);
    CHECK(hpt_transfer_check_queued() == 0);
    leak_aborts(x);
    /* the selection: the environment picks the checking table for a CPU-bound mem */
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    setenv("HPT_TRANSFER_CHECK", "1", 1);
    CHECK(hpt_transfer_of(mem) == x);
    setenv("HPT_TRANSFER_CHECK", "0", 1);
    CHECK(hpt_transfer_of(mem) == hpt_transfer_cpu());
    hpt_mem_destroy(mem);
    return t_done("test_transfer");
}
