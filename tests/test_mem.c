/* test_mem.c: budgets are enforced, and out-of-memory injected at every allocation site of a
 * training setup and step (fail the Nth allocation, N = 1, 2, ...) gives a clean error, no
 * leak (the sanitizer variant checks) and no corrupted state: after each failure a clean run
 * gives the same loss bits as a run that never failed. */
#include "testlib.h"
#include "testing.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_train[512];

/* One short training run; returns its status and the last loss. */
static hpt_status run_once(hpt_mem *mem, float *loss_out) {
    hpt_train_opts o = hpt_train_defaults();
    o.model = "gpt2:L=2,C=16,NH=2,V=32,T=8";
    o.data = g_train;
    o.val = g_train;
    o.B = 2;
    o.T = 8;
    o.steps = 2;
    o.eval_every = 1;
    o.val_batches = 1;
    hpt_trainer *tr;
    hpt_status s = hpt_trainer_create(mem, &o, &tr);
    if (s != HPT_OK) return s;
    hpt_train_progress p = {0};
    while (s == HPT_OK && !hpt_trainer_done(tr)) s = hpt_trainer_step(tr, &p);
    *loss_out = p.loss;
    hpt_trainer_free(tr);
    return s;
}

static uint64_t live(const hpt_mem *mem) {
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    uint64_t n = 0;
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        for (int c = 0; c < HPT_CAT_COUNT; c++) n += st.live_bytes[t][c];
    return n;
}

/* Frees a fresh block with a wrong size (wrong != 0) or an unknown pointer (wrong == 0) in a
 * forked child; returns 1 if the child died of SIGABRT. */
static int free_dies(size_t wrong) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        hpt_mem *mem;
        void *a = NULL;
        if (hpt_mem_create(&mem) != HPT_OK) _exit(3);
        if (hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_ACTS, 1000, &a) != HPT_OK) _exit(3);
        freopen("/dev/null", "w", stderr); /* the expected message */
        static char not_ours[64];
        if (wrong) hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_ACTS, a, wrong);
        else hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_ACTS, not_ours, 64);
        _exit(0); /* survived: the check is missing */
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 0;
    return WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT;
}

/* hpt_mem_free checks the size it is told (debug and sanitizer builds): a right free passes
 * among many live blocks (the table grows and deletes), a wrong size or a pointer it never gave
 * aborts. Release builds skip the check and this test. */
static void test_free_checks(void) {
    if (!hpt_mem_checks_frees()) {
        printf("free-size checks: release build, not compiled in\n");
        return;
    }
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    enum { N = 1000 };
    static void *p[N];
    for (int i = 0; i < N; i++)
        CHECK_OK(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_ACTS, (size_t)(i % 97) + 1, &p[i]));
    for (int i = 0; i < N; i += 2) hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_ACTS, p[i], (size_t)(i % 97) + 1);
    for (int i = 1; i < N; i += 2) hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_ACTS, p[i], (size_t)(i % 97) + 1);
    CHECK(live(mem) == 0);
    hpt_mem_destroy(mem);
    CHECK_MSG(free_dies(999), "a free with the wrong size did not abort");
    CHECK_MSG(free_dies(0), "a free of an unknown pointer did not abort");
    printf("free-size checks: %d blocks freed by their sizes; a wrong size and an unknown "
           "pointer abort\n", N);
}

/* The disk tier: budget, aligned and unaligned round trips, accounting, transfers recorded. */
static void test_disk(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_disk_ref r;
    CHECK_STATUS(hpt_mem_disk_alloc(mem, HPT_CAT_OPTIM, 100, &r), HPT_ERR_INVALID); /* no dir */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/disk", t_tmpdir());
    CHECK_OK(hpt_mem_set_disk_dir(mem, dir));
    hpt_mem_set_budget(mem, HPT_TIER_DISK, 3u << 20);
    CHECK_STATUS(hpt_mem_disk_alloc(mem, HPT_CAT_OPTIM, (3u << 20) + 1, &r), HPT_ERR_OOM);
    CHECK(strstr(hpt_last_error(), "disk tier") != NULL);
    size_t n = (2u << 20) + 123; /* not a multiple of the block size */
    CHECK_OK(hpt_mem_disk_alloc(mem, HPT_CAT_OPTIM, n, &r));
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    CHECK(st.live_bytes[HPT_TIER_DISK][HPT_CAT_OPTIM] == n);
    unsigned char *a, *b;
    CHECK_OK(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, n, (void **)&a));
    CHECK_OK(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, n, (void **)&b));
    if (a && b && r.fd >= 0) {
        for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 131 + (i >> 9));
        hpt_mem_record(mem, 1);
        CHECK_OK(hpt_mem_disk_write(mem, &r, 0, a, n, HPT_TIER_HOST, HPT_CAT_OPTIM));
        CHECK_OK(hpt_mem_disk_read(mem, &r, 0, b, n, HPT_TIER_HOST, HPT_CAT_OPTIM));
        CHECK(memcmp(a, b, n) == 0);
        /* unaligned window in the middle: read-modify-write keeps the neighbours */
        memset(b, 0xAB, 5000);
        CHECK_OK(hpt_mem_disk_write(mem, &r, 4097, b, 5000, HPT_TIER_HOST, HPT_CAT_OPTIM));
        memset(b, 0, n);
        CHECK_OK(hpt_mem_disk_read(mem, &r, 0, b, n, HPT_TIER_HOST, HPT_CAT_OPTIM));
        int ok = 1;
        for (size_t i = 0; i < n; i++)
            if (b[i] != (i >= 4097 && i < 9097 ? 0xAB : a[i])) { ok = 0; break; }
        CHECK_MSG(ok, "unaligned disk write damaged its neighbours");
        CHECK_STATUS(hpt_mem_disk_read(mem, &r, n - 10, b, 11, HPT_TIER_HOST, HPT_CAT_OPTIM),
                     HPT_ERR_INVALID);
        size_t ne;
        const hpt_mem_event *ev = hpt_mem_events(mem, &ne);
        int transfers = 0;
        for (size_t i = 0; i < ne; i++) transfers += ev[i].kind == HPT_EV_TRANSFER;
        CHECK(transfers == 4);
    }
    hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, a, n);
    hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, b, n);
    hpt_mem_disk_free(mem, HPT_CAT_OPTIM, &r);
    hpt_mem_disk_free(mem, HPT_CAT_OPTIM, &r); /* twice is harmless */
    hpt_mem_get_stats(mem, &st);
    CHECK(st.live_bytes[HPT_TIER_DISK][HPT_CAT_OPTIM] == 0);
    hpt_mem_destroy(mem);
}

int main(void) {
    hpt_set_threads(2);
    uint16_t toks[400];
    for (int i = 0; i < 400; i++) toks[i] = (uint16_t)((i * 7 + i / 5) % 32);
    snprintf(g_train, sizeof g_train, "%s/train.bin", t_tmpdir());
    CHECK_OK(hpt_shard_write(g_train, toks, 400));

    /* budgets: exact boundary, refusal detail, accounting */
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_mem_set_budget(mem, HPT_TIER_DEVICE, 1000);
    void *a, *b;
    CHECK_OK(hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, 600, &a));
    CHECK_STATUS(hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, 401, &b), HPT_ERR_OOM);
    CHECK(strstr(hpt_last_error(), "device tier") && strstr(hpt_last_error(), "acts"));
    CHECK(b == NULL);
    CHECK_OK(hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, 400, &b)); /* exactly fits */
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS] == 600);
    CHECK(st.peak_bytes[HPT_TIER_DEVICE] == 1000 && st.n_refused == 1);
    hpt_mem_free(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, b, 400);
    hpt_mem_free(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, a, 600);
    CHECK(live(mem) == 0);
    /* the host tier has its own budget */
    hpt_mem_set_budget(mem, HPT_TIER_HOST, 100);
    CHECK_STATUS(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, 101, &a), HPT_ERR_OOM);
    CHECK_OK(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, 100, &a));
    hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, a, 100);
    hpt_mem_destroy(mem);

    test_disk();
    test_free_checks();

    /* a training run under a budget too small fails cleanly with the breakdown */
    CHECK_OK(hpt_mem_create(&mem));
    hpt_mem_set_budget(mem, HPT_TIER_DEVICE, 20000);
    float loss;
    CHECK_STATUS(run_once(mem, &loss), HPT_ERR_OOM);
    CHECK(live(mem) == 0);
    hpt_mem_destroy(mem);

    /* the reference: no failure */
    CHECK_OK(hpt_mem_create(&mem));
    float ref_loss = 0;
    CHECK_OK(run_once(mem, &ref_loss));
    hpt_mem_get_stats(mem, &st);
    uint64_t n_allocs = st.n_allocs;
    hpt_mem_destroy(mem);
    CHECK(n_allocs >= 8);

    /* fail the Nth allocation for every N */
    int failures_seen = 0;
    for (uint64_t n = 1; n <= n_allocs; n++) {
        CHECK_OK(hpt_mem_create(&mem));
        hpt_mem_fail_nth(mem, n);
        hpt_status s = run_once(mem, &loss);
        CHECK_MSG(s == HPT_ERR_OOM, "allocation %llu: status %s", (unsigned long long)n,
                  hpt_status_str(s));
        CHECK_MSG(live(mem) == 0, "allocation %llu: %llu bytes leaked", (unsigned long long)n,
                  (unsigned long long)live(mem));
        CHECK(strstr(hpt_last_error(), "injected") != NULL);
        failures_seen += s == HPT_ERR_OOM;
        /* the same manager, no injection: the run is exactly the reference */
        float again = 0;
        CHECK_OK(run_once(mem, &again));
        CHECK_MSG(memcmp(&again, &ref_loss, 4) == 0, "after failing allocation %llu the loss "
                  "is %.9g, not %.9g", (unsigned long long)n, (double)again, (double)ref_loss);
        hpt_mem_destroy(mem);
    }
    printf("injected out-of-memory at each of %llu allocation sites: %d clean failures\n",
           (unsigned long long)n_allocs, failures_seen);
    return t_done("test_mem");
}
