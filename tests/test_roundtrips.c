/* test_roundtrips.c: host round trips per training step (kernels/backend.h, "host round trips";
 * docs/cuda.md, "Host round trips"). Each is a backend call after which the host holds a result
 * of device work, so on a GPU it waits for the device to drain; the CPU backend notes them where
 * the CUDA backend waits, so the CPU's counts are the GPU's.
 *   (a) the counter: a value op, a copy to or from the host, sync and a transfer's host_wait
 *       count one each; device work (a GEMM, a D2D copy, a memset) none;
 *   (b) the round trips of steps 2..4 of tiny GPT-2 and Llama runs (4 layers) in each
 *       configuration (plain, --accum 4, --loss-scale dynamic, the offload engine unfused and
 *       fused, with loss scaling and with accumulation, LoRA): printed, the same in every step, and at most this file's bound for it,
 *       so a change that adds round trips to a step fails here. Lower a bound when a change
 *       cuts them (the figures are printed). */
#include "testlib.h"
#include "kernels/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_train[512];

/* (a) */
static void test_counter(void) {
    const hpt_backend *be = hpt_backend_cpu();
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    float *x = NULL, *y = NULL, h[64];
    CHECK_OK(be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, 64 * sizeof(float), (void **)&x));
    CHECK_OK(be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, 64 * sizeof(float), (void **)&y));
    if (!x || !y) return;
    for (int i = 0; i < 64; i++) h[i] = (float)i;
    hpt_be_trips_reset();
    CHECK(hpt_be_trips() == 0);
    be->copy(x, h, sizeof h, HPT_COPY_H2D);
    CHECK(hpt_be_trips() == 1);
    be->copy(y, x, sizeof h, HPT_COPY_D2D);
    be->memset(y, 0, sizeof h);
    be->gemm('N', 'T', 8, 8, 8, 1.0f, x, 8, x, 8, 0.0f, y, 8);
    be->scale(y, 64, 2.0f);
    CHECK_MSG(hpt_be_trips() == 1, "device work counted: %llu", (unsigned long long)hpt_be_trips());
    double s = be->sumsq(x, 64);
    CHECK(s == 85344.0 && hpt_be_trips() == 2); /* 0^2 + ... + 63^2 */
    CHECK(be->nonfinite(x, 64) == 0 && hpt_be_trips() == 3);
    const float *xs[2] = {x, x + 32};
    size_t ns[2] = {32, 32};
    double u[2];
    be->sumsq_many(u, xs, ns, 2);
    CHECK(u[0] + u[1] == s && hpt_be_trips() == 4);
    be->copy(h, y, sizeof h, HPT_COPY_D2H);
    be->sync();
    CHECK(hpt_be_trips() == 6);
    const hpt_transfer *xf = hpt_transfer_of(mem);
    hpt_xevent *ev = NULL;
    CHECK_OK(xf->event_create(&ev));
    xf->record(ev, HPT_XS_STORE);
    xf->host_wait(ev);
    xf->event_destroy(ev);
    CHECK(hpt_be_trips() == 7);
    be->free(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, x, 64 * sizeof(float));
    be->free(mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, y, 64 * sizeof(float));
    hpt_mem_destroy(mem);
    printf("  counter: value ops, host copies, sync and host_wait count one each; device work "
           "none\n");
}

/* (b) */
#define STEPS 4
typedef struct {
    const char *what, *flags;
    int64_t bound[2]; /* per step at most, GPT-2 and Llama */
} trip_case;
static const trip_case k_cases[] = {
    {"plain", "", {4, 4}},
    {"--accum 4", "--accum 4", {13, 13}},
    {"--loss-scale dynamic", "--loss-scale dynamic", {4, 4}},
    {"--offload host", "--offload host", {15, 15}},
    {"--offload host --fused-update", "--offload host --fused-update", {13, 13}},
    {"--offload host --loss-scale dynamic", "--offload host --loss-scale dynamic", {16, 16}},
    {"--offload host --accum 2 --loss-scale dynamic", "--offload host --accum 2 --loss-scale dynamic", {32, 32}},
    {"--lora r=4,alpha=8", "--lora r=4,alpha=8", {4, 4}},
};
#define N_CASES (sizeof k_cases / sizeof k_cases[0])

/* The round trips of steps 2..STEPS into per[] (step 1 allocates and plans); 0 when the run
 * could not be made. */
static int count_run(const char *shape, const char *flags, int64_t per[STEPS]) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_train_opts o = t_train_opts(shape, g_train, 2, 16, 100, 2);
    o.grad_clip = 1.0f;
    char words[256];
    snprintf(words, sizeof words, "%s", flags);
    CHECK_OK(hpt_plan_parse_flags(&o.plan, words));
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    int ok = tr != NULL;
    for (int s = 0; ok && s < STEPS; s++) {
        hpt_train_progress p;
        hpt_be_trips_reset();
        hpt_status st = hpt_trainer_step(tr, &p);
        CHECK_OK(st);
        per[s] = (int64_t)hpt_be_trips();
        ok = st == HPT_OK;
    }
    hpt_trainer_free(tr);
    hpt_mem_destroy(mem);
    return ok;
}

/* only: one case's index (argv[1]: its round trips alone, for a debugger), or -1: all;
 * shape (argv[2]): that model instead of the two tiny ones (figures printed, no bound) */
static void test_steps(int only, const char *shape_arg) {
    const char *archs[2] = {"gpt2", "llama"};
    printf("  round trips per step (steps 2-%d; the bound in brackets):\n", STEPS);
    printf("  %-46s %12s %12s\n", "configuration", archs[0], archs[1]);
    for (size_t c = 0; c < N_CASES; c++) {
        if (only >= 0 && (size_t)only != c) continue;
        int64_t got[2] = {-1, -1};
        if (shape_arg) {
            int64_t per[STEPS];
            if (count_run(shape_arg, k_cases[c].flags, per))
                printf("  %-32s %s: %lld %lld %lld\n", k_cases[c].what, shape_arg, (long long)per[1],
                       (long long)per[2], (long long)per[3]);
            continue;
        }
        for (int a = 0; a < 2; a++) {
            const t_arch *ar = t_arch_named(archs[a]);
            CHECK(ar != NULL);
            if (!ar) continue;
            char shape[T_SHAPE_MAX];
            t_arch_shape(ar, shape, 4, 32, 4, 64, 16, 0);
            int64_t per[STEPS];
            if (!count_run(shape, k_cases[c].flags, per)) continue;
            got[a] = per[1];
            for (int s = 2; s < STEPS; s++)
                CHECK_MSG(per[s] == per[1], "%s %s: step %d %lld round trips, step 2 %lld", archs[a],
                          k_cases[c].what, s + 1, (long long)per[s], (long long)per[1]);
            CHECK_MSG(per[1] <= k_cases[c].bound[a], "%s %s: %lld round trips a step, more than "
                      "the bound %lld", archs[a], k_cases[c].what, (long long)per[1],
                      (long long)k_cases[c].bound[a]);
        }
        printf("  %-46s %6lld [%3lld] %6lld [%3lld]\n", k_cases[c].what, (long long)got[0],
               (long long)k_cases[c].bound[0], (long long)got[1], (long long)k_cases[c].bound[1]);
    }
}

int main(int argc, char **argv) {
    t_make_shards(777, 17, 3, 7, 4000, 0, g_train, NULL);
    test_counter();
    test_steps(argc > 1 ? atoi(argv[1]) : -1, argc > 2 ? argv[2] : NULL);
    return t_done("test_roundtrips");
}
