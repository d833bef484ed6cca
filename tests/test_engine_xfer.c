/* test_engine_xfer.c: the offload engine's transfers under the checking transfer table
 * (kernels/transfer_check.c, HPT_TRANSFER_CHECK=1). A GPU's fused update on CPU threads
 * (bf16-sr weights and AdamW state on the host, gradients on the device: engine_gpu.c) runs on
 * the CPU under the checking table, its gradient copy on the STORE stream deferred until its
 * event's wait, inline and on the worker thread, with activation offload (the same streams):
 * the losses and weights are the bits of the update reading the gradient slot (the plain CPU
 * run), the host block of gradients was there (the host gradients' peak above the plain run's),
 * and so were the device staging blocks of the bf16 loads, which run on the LOAD stream and are
 * widened at acquisition (the device parameters' peak above the plain run's); every tier's peak
 * is the estimator's, and no copy is left queued. */
#include "testlib.h"
#include "kernels/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 12

static char SHAPE[T_SHAPE_MAX];
static char g_train[512];

typedef struct {
    float losses[STEPS];
    float *params;
    size_t n;
    uint64_t host_grads_peak; /* bytes: the host tier's gradients at their peak */
    uint64_t dev_params_peak; /* bytes: the device tier's parameters at their peak */
} run_out;

/* A run on a fresh hpt_mem; checks the estimator against its measured peaks per tier. */
static void run(const hpt_train_opts *o, run_out *r, const char *what) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(SHAPE, &cfg));
    r->n = hpt_model_config_num_params(&cfg);
    r->params = calloc(r->n, sizeof(float));
    t_train_run(mem, o, 0, r->losses, NULL, r->params);
    t_check_estimate(mem, o, what);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    r->host_grads_peak = st.peak_live_bytes[HPT_TIER_HOST][HPT_CAT_GRADS];
    r->dev_params_peak = st.peak_live_bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS];
    hpt_mem_destroy(mem);
}

/* Sets (value non-NULL) or removes an environment variable. */
static void set_env(const char *name, const char *value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_engine_xfer");
    if (!a) return 2;
    t_arch_shape(a, SHAPE, 4, 32, 4, 64, 16, 0);
    hpt_set_threads(2);
    t_make_shards(4242, 23, 5, 8, 6000, 0, g_train, NULL);
    char *check = getenv("HPT_TRANSFER_CHECK"), *worker = getenv("HPT_ENGINE_WORKER");
    check = check ? strdup(check) : NULL, worker = worker ? strdup(worker) : NULL;

    hpt_train_opts o = t_train_opts(SHAPE, g_train, 2, 16, STEPS, 3);
    o.grad_clip = 0.0f;
    o.offload = hpt_offload_defaults();
    o.offload.params = HPT_TIER_HOST;
    o.offload.grads = HPT_TIER_DEVICE;
    o.offload.optim = HPT_TIER_HOST;
    o.offload.max_active = 2;
    o.offload.prefetch = 1;
    o.offload.fused = 1;
    o.offload.weights = HPT_BW_BF16_SR;
    o.act.offload = HPT_OFFLOAD_HOST; /* the activations' copies on the same streams */
    run_out ref, r;
    set_env("HPT_TRANSFER_CHECK", NULL);
    run(&o, &ref, "bf16-sr fused host, update on the slot");
    CHECK(ref.losses[STEPS - 1] < ref.losses[0]);
    set_env("HPT_TRANSFER_CHECK", "1");
    static const char *const workers[] = {"inline", "thread"};
    for (int w = 0; w < 2; w++) {
        set_env("HPT_ENGINE_WORKER", workers[w]);
        char what[120];
        snprintf(what, sizeof what, "bf16-sr fused host, update on CPU threads (checking "
                 "transfers, %s worker)", workers[w]);
        run(&o, &r, what);
        CHECK_MSG(memcmp(r.params, ref.params, r.n * sizeof(float)) == 0 &&
                  memcmp(r.losses, ref.losses, sizeof r.losses) == 0,
                  "%s: not the bits of the update on the slot", what);
        CHECK_MSG(r.host_grads_peak > ref.host_grads_peak, "%s: host gradients peak %llu, "
                  "without %llu", what, (unsigned long long)r.host_grads_peak,
                  (unsigned long long)ref.host_grads_peak);
        /* and the device staging blocks of the loads on the LOAD stream (K of them) */
        CHECK_MSG(r.dev_params_peak > ref.dev_params_peak, "%s: device params peak %llu, without "
                  "%llu", what, (unsigned long long)r.dev_params_peak,
                  (unsigned long long)ref.dev_params_peak);
        CHECK(hpt_transfer_check_queued() == 0);
        printf("%s: loss %.6f -> %.6f (without: %.6f -> %.6f); host gradients peak %llu bytes "
               "(without: %llu); device params peak %llu (without: %llu)\n", what,
               (double)r.losses[0], (double)r.losses[STEPS - 1], (double)ref.losses[0],
               (double)ref.losses[STEPS - 1], (unsigned long long)r.host_grads_peak,
               (unsigned long long)ref.host_grads_peak, (unsigned long long)r.dev_params_peak,
               (unsigned long long)ref.dev_params_peak);
        free(r.params);
    }
    free(ref.params);
    set_env("HPT_TRANSFER_CHECK", check);
    set_env("HPT_ENGINE_WORKER", worker);
    free(check), free(worker);
    return t_done(t_arch_label(a, "test_engine_xfer"));
}
