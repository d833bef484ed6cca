/* test_loss_scale.c ARCH: 16-bit gradient homes (--grad-home bf16|fp16) and the loss scaler, on
 * the architecture's case (arch_cases.h); the kernels, (d) and the refusals once, in the first
 * case's run.
 *   (k) the conversion kernels: fp16 narrowing reports |x| > 65504 and non-finite values, not
 *       65504 itself; in place equals out of place; widening is exact;
 *   (a) a power-of-two loss scale with fp32 gradients (engine homes on the host and on disk,
 *       with accumulation, and without the engine) trains bit for bit as no scaling, and the
 *       dynamic scale doubles after each window of clean steps;
 *   (b) the loss scaler recovers from an injected overflow (a value fp16 cannot hold in one
 *       block's gradients, or inf in fp32 ones) and from a natural one (initial scale 2^40): the
 *       overflowing step is skipped (weights, m, v and the optimizer's step count in the
 *       checkpoint unchanged byte for byte across it), the scale halves each time, and the run
 *       ends within 0.5% of the fp32-home run's loss (one step's update fewer); from 2^40 the
 *       first steps skip until the scale fits, then it trains;
 *   (c) fp16 and bf16 homes train 20 steps within 1e-4 (relative) of fp32 homes' final loss
 *       (device, host, disk; accum 2), and differ from them in the weights' bits (they round);
 *   (d) a run resumed from a checkpoint written right after a skipped step is bit for bit the
 *       uninterrupted run (scale and clean-step count restored);
 *   (e) every run's estimated peak per tier equals the measured one, byte for byte;
 *   and the refusals: --fused-update with a 16-bit home or a loss scale, fp16 without a scale,
 *   a scale that is not a power of two. */
#include "testlib.h"
#include "testing.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const t_arch *g_arch;
static char SHAPE[T_SHAPE_MAX];
#define STEPS 20
#define MAX_STEPS 48 /* the natural overflow's run */
#define HDR (16 + 32 * 8) /* a training state's magic, version and header fields */

static char g_train[512];
static char g_disk[512];
static char g_save[512];

static hpt_train_opts opts(void) {
    hpt_train_opts o = t_train_opts(SHAPE, g_train, 2, 16, STEPS, 3);
    o.grad_clip = 1.0f;
    return o;
}

static hpt_offload_opts off(hpt_tier t, int grad_home) {
    hpt_offload_opts f = hpt_offload_defaults();
    f.params = f.grads = f.optim = t;
    f.grad_home = grad_home;
    return f;
}

static hpt_loss_scale_opts scale(int mode, float init, int64_t window) {
    return (hpt_loss_scale_opts){.mode = mode, .init = init, .window = window};
}

typedef struct {
    float losses[MAX_STEPS], scale[MAX_STEPS];
    int skipped[MAX_STEPS];
    int64_t skipped_total;
    float *params;
    size_t n;
} run_out;

typedef struct {
    int64_t fault_step;  /* 0: none */
    int fault_layer;
    float fault_value;
    int64_t check_skip;  /* > 0: checkpoints before and after this step compared (it skips) */
    int64_t stop;        /* > 0: save after this step and stop */
} run_ctl;

static unsigned char *saved_state(hpt_trainer *tr, size_t *n) {
    char p[600];
    CHECK_OK(hpt_trainer_save(tr));
    t_state_file(p, sizeof p, g_save);
    return t_read_file(p, n);
}

/* A run on a fresh hpt_mem, step by step; checks the estimated peak per tier (e). */
static void run(const hpt_train_opts *o0, const run_ctl *c, run_out *r, const char *what) {
    hpt_train_opts o = *o0;
    o.save_dir = g_save;
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    CHECK_OK(hpt_mem_set_disk_dir(mem, g_disk));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(SHAPE, &cfg));
    memset(r, 0, sizeof *r);
    r->n = hpt_model_config_num_params(&cfg);
    r->params = calloc(r->n, sizeof(float));
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (!tr) {
        hpt_mem_destroy(mem);
        return;
    }
    if (c && c->fault_step) hpt_trainer_inject_grad(tr, c->fault_step, c->fault_layer, c->fault_value);
    unsigned char *before = NULL;
    size_t nb = 0;
    for (int64_t next = hpt_trainer_start_step(tr) + 1; !hpt_trainer_done(tr); next++) {
        hpt_train_progress p;
        if (c && c->check_skip == next) before = saved_state(tr, &nb);
        hpt_status s = hpt_trainer_step(tr, &p);
        CHECK_MSG(s == HPT_OK, "%s: step %lld: %s", what, (long long)next, hpt_last_error());
        if (s != HPT_OK) break;
        r->losses[p.step - 1] = p.loss;
        r->scale[p.step - 1] = p.loss_scale;
        r->skipped[p.step - 1] = p.skipped;
        r->skipped_total = p.skipped_total;
        if (before) { /* (b): nothing but the position moved */
            size_t na = 0;
            unsigned char *after = saved_state(tr, &na);
            size_t body = r->n * 4 * 3; /* params, m, v (AdamW fp32) */
            CHECK_MSG(p.skipped == 1, "%s: step %lld was not skipped", what, (long long)p.step);
            CHECK(after && na == nb && na > HDR + body);
            if (after && na == nb && na > HDR + body) {
                int64_t fb[32], fa[32];
                memcpy(fb, before + 16, sizeof fb);
                memcpy(fa, after + 16, sizeof fa);
                CHECK_MSG(memcmp(before + HDR, after + HDR, body) == 0,
                          "%s: weights or moments changed across the skipped step", what);
                CHECK_MSG(fa[19] == fb[19], "%s: the optimizer's step count moved (%lld -> %lld)",
                          what, (long long)fb[19], (long long)fa[19]);
                CHECK(fa[12] == fb[12] + 1); /* the trainer's step did */
            }
            free(after);
            free(before);
            before = NULL;
        }
        if (c && c->stop == p.step) {
            CHECK_OK(hpt_trainer_save(tr));
            break;
        }
    }
    CHECK_OK(hpt_model_copy_params(hpt_trainer_model(tr), r->params));
    hpt_trainer_free(tr);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    uint64_t live = 0;
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        for (int k = 0; k < HPT_CAT_COUNT; k++) live += st.live_bytes[t][k];
    CHECK_MSG(live == 0, "%s: %llu bytes live after the trainer was freed", what, (unsigned long long)live);
    /* (e); not for a resumed run, whose setup holds the checkpoint's sections on the host a
     * moment (here the scaler's 24 bytes), which the estimate of a run does not count */
    if (!o.resume) t_check_estimate(mem, &o, what);
    hpt_mem_destroy(mem);
}

static int same(const run_out *a, const run_out *b) {
    return memcmp(a->params, b->params, a->n * sizeof(float)) == 0 &&
           memcmp(a->losses, b->losses, STEPS * sizeof(float)) == 0;
}

static double rel(float a, float b) { return fabs((double)a - (double)b) / fabs((double)b); }

/* (k) */
static void test_kernels(void) {
    float x[19] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, -65504.0f, 1e-8f, 3.14159f, 1e-3f,
                   -7.0e4f, 0.1f, 0.2f, 0.3f, 1000.5f, -1.0f / 3.0f, 6.1e-5f, 5.9e-8f, 2.0f, 4.0f};
    uint16_t h[19], h2[19 * 2];
    float w[19], y[19];
    CHECK(k_f16_narrow(h, x, 9) == 0); /* up to 65504: no overflow */
    CHECK(k_f16_narrow(h, x, 19) == 1); /* -7e4 */
    float inf = INFINITY, nan_ = NAN, big = 65520.0f;
    CHECK(k_f16_narrow(h2, &inf, 1) == 1 && k_f16_narrow(h2, &nan_, 1) == 1);
    CHECK(k_f16_narrow(h2, &big, 1) == 1);
    CHECK(k_bf16_narrow(h2, &inf, 1) == 1 && k_bf16_narrow(h2, x, 19) == 0);
    k_f16_widen(w, h, 19);
    for (int i = 0; i < 19; i++) {
        if (i == 9) continue;
        /* round to nearest: relative error within 2^-11 for normal fp16 values */
        if (fabsf(x[i]) >= 6.2e-5f)
            CHECK_MSG(fabsf(w[i] - x[i]) <= fabsf(x[i]) * 4.9e-4f, "fp16 of %g is %g", (double)x[i], (double)w[i]);
    }
    CHECK(w[0] == 0.0f && w[4] == 65504.0f && w[2] == 1.0f && w[17] == 2.0f);
    /* in place, both ways, equals out of place */
    memcpy(y, x, sizeof y);
    CHECK(k_f16_narrow((uint16_t *)(void *)y, y, 19) == 1);
    CHECK(memcmp(y, h, sizeof h) == 0);
    k_f16_widen(y, (const uint16_t *)(void *)y, 19);
    CHECK(memcmp(y, w, sizeof w) == 0);
    k_bf16_narrow(h, x, 19);
    k_bf16_widen(w, h, 19);
    memcpy(y, x, sizeof y);
    k_bf16_narrow((uint16_t *)(void *)y, y, 19);
    k_bf16_widen(y, (const uint16_t *)(void *)y, 19);
    CHECK(memcmp(y, w, sizeof w) == 0);
    CHECK(k_nonfinite(x, 19) == 0 && k_nonfinite(&nan_, 1) == 1 && k_nonfinite(&inf, 1) == 1);
}

/* (a) */
static void test_bit_identity(void) {
    struct {
        hpt_offload_opts f;
        int accum;
        hpt_loss_scale_opts ls;
        const char *what;
    } cases[] = {
        {off(HPT_TIER_HOST, HPT_GH_FP32), 1, scale(HPT_LOSS_SCALE_STATIC, 1024.0f, 1), "host, fixed 2^10"},
        {off(HPT_TIER_HOST, HPT_GH_FP32), 1, scale(HPT_LOSS_SCALE_DYNAMIC, 65536.0f, 4), "host, dynamic 2^16 window 4"},
        {off(HPT_TIER_DISK, HPT_GH_FP32), 2, scale(HPT_LOSS_SCALE_DYNAMIC, 256.0f, 3), "disk, accum 2, dynamic"},
        {hpt_offload_defaults(), 1, scale(HPT_LOSS_SCALE_STATIC, 4096.0f, 1), "no engine, fixed 2^12"},
        {hpt_offload_defaults(), 2, scale(HPT_LOSS_SCALE_DYNAMIC, 8.0f, 2), "no engine, accum 2, dynamic"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hpt_train_opts o = opts();
        o.offload = cases[i].f;
        o.accum = cases[i].accum;
        run_out ref, r;
        run(&o, NULL, &ref, cases[i].what);
        o.loss_scale = cases[i].ls;
        run(&o, NULL, &r, cases[i].what);
        CHECK_MSG(same(&r, &ref), "%s: not bit-identical to the unscaled run", cases[i].what);
        CHECK(r.skipped_total == 0 && ref.losses[STEPS - 1] < ref.losses[0]);
        if (cases[i].ls.mode == HPT_LOSS_SCALE_DYNAMIC) /* doubles after each window */
            for (int s = 0; s < STEPS; s++)
                CHECK_MSG(r.scale[s] == cases[i].ls.init * (float)(1 << (s / (int)cases[i].ls.window)),
                          "%s: step %d's scale %g", cases[i].what, s + 1, (double)r.scale[s]);
        printf("  %s: bit-identical to unscaled; scale at the end %g\n", cases[i].what,
               (double)r.scale[STEPS - 1]);
        free(ref.params);
        free(r.params);
    }
}

/* (b) and (c) */
static void test_homes_and_recovery(void) {
    hpt_train_opts o = opts();
    o.offload = off(HPT_TIER_HOST, HPT_GH_FP32);
    run_out ref, r;
    run(&o, NULL, &ref, "fp32 homes");
    /* (c) 16-bit homes within 1% of fp32's final loss */
    struct {
        hpt_tier t;
        int gh, accum;
        const char *what;
    } homes[] = {
        {HPT_TIER_HOST, HPT_GH_FP16, 1, "fp16 host"}, {HPT_TIER_DISK, HPT_GH_FP16, 1, "fp16 disk"},
        {HPT_TIER_HOST, HPT_GH_BF16, 1, "bf16 host"}, {HPT_TIER_DISK, HPT_GH_BF16, 1, "bf16 disk"},
        {HPT_TIER_DEVICE, HPT_GH_FP16, 1, "fp16 device"},
        {HPT_TIER_HOST, HPT_GH_FP16, 2, "fp16 host accum 2"}, {HPT_TIER_DISK, HPT_GH_BF16, 2, "bf16 disk accum 2"},
    };
    run_out ref2;
    hpt_train_opts o2 = o;
    o2.accum = 2;
    run(&o2, NULL, &ref2, "fp32 homes accum 2");
    for (size_t i = 0; i < sizeof homes / sizeof homes[0]; i++) {
        hpt_train_opts oh = o;
        oh.offload = off(homes[i].t, homes[i].gh);
        oh.accum = homes[i].accum;
        if (homes[i].gh == HPT_GH_FP16) oh.loss_scale = scale(HPT_LOSS_SCALE_DYNAMIC, 65536.0f, 2000);
        run(&oh, NULL, &r, homes[i].what);
        const run_out *base = homes[i].accum > 1 ? &ref2 : &ref;
        double d = rel(r.losses[STEPS - 1], base->losses[STEPS - 1]);
        printf("  %s: final loss %.5f vs fp32 homes %.5f (rel %.2e), %lld skipped\n", homes[i].what,
               (double)r.losses[STEPS - 1], (double)base->losses[STEPS - 1], d, (long long)r.skipped_total);
        CHECK_MSG(d < 1e-4, "%s: final loss %g vs %g", homes[i].what, (double)r.losses[STEPS - 1],
                  (double)base->losses[STEPS - 1]);
        CHECK(!same(&r, base)); /* the homes really round */
        free(r.params);
    }
    free(ref2.params);
    /* (b) an injected overflow: skipped, the scale halves, training goes on */
    struct {
        hpt_tier t;
        int gh;
        float value;
        const char *what;
    } inj[] = {
        {HPT_TIER_HOST, HPT_GH_FP16, 1e6f, "fp16 host, 1e6 injected"},
        {HPT_TIER_DISK, HPT_GH_FP16, 7e4f, "fp16 disk, 7e4 injected"},
        {HPT_TIER_DISK, HPT_GH_FP32, INFINITY, "fp32 disk, inf injected"},
        {HPT_TIER_HOST, HPT_GH_BF16, NAN, "bf16 host, NaN injected"},
        {HPT_TIER_DEVICE, HPT_GH_FP32, INFINITY, "no engine, inf injected"},
    };
    for (size_t i = 0; i < sizeof inj / sizeof inj[0]; i++) {
        hpt_train_opts oi = o;
        oi.offload = inj[i].t == HPT_TIER_DEVICE ? hpt_offload_defaults() : off(inj[i].t, inj[i].gh);
        oi.loss_scale = scale(HPT_LOSS_SCALE_DYNAMIC, 65536.0f, 2000);
        run_ctl c = {.fault_step = 6, .fault_layer = 2, .fault_value = inj[i].value, .check_skip = 6};
        run(&oi, &c, &r, inj[i].what);
        CHECK_MSG(r.skipped_total == 1 && r.skipped[5] == 1, "%s: %lld skipped", inj[i].what,
                  (long long)r.skipped_total);
        CHECK(r.scale[5] == 65536.0f && r.scale[6] == 32768.0f && r.scale[STEPS - 1] == 32768.0f);
        double d = rel(r.losses[STEPS - 1], ref.losses[STEPS - 1]);
        printf("  %s: step 6 skipped, scale 65536 -> %g, final loss %.5f (fp32 homes %.5f, rel %.2e)\n",
               inj[i].what, (double)r.scale[6], (double)r.losses[STEPS - 1],
               (double)ref.losses[STEPS - 1], d);
        CHECK_MSG(d < 0.005, "%s: final loss %g vs %g", inj[i].what, (double)r.losses[STEPS - 1],
                  (double)ref.losses[STEPS - 1]);
        free(r.params);
    }
    /* (b) a natural overflow: 2^40 is far too large for fp16; it halves until the gradients fit
     * (the first case's run, GPT-2's: the skip count and the loss's drop are that model's on
     * these data) */
    if (!t_arch_first(g_arch)) {
        free(ref.params);
        return;
    }
    hpt_train_opts on = o;
    on.steps = MAX_STEPS;
    on.offload = off(HPT_TIER_HOST, HPT_GH_FP16);
    on.loss_scale = scale(HPT_LOSS_SCALE_DYNAMIC, 1099511627776.0f, 2000);
    run_ctl cn = {.check_skip = 1};
    run(&on, &cn, &r, "fp16 host, initial scale 2^40");
    int64_t k = r.skipped_total;
    CHECK(k >= 10 && k < MAX_STEPS - 10);
    for (int64_t s = 0; s < k; s++) /* the first k steps skip, each halving */
        CHECK(r.skipped[s] == 1 && r.scale[s] == ldexpf(1.0f, 40 - (int)s));
    for (int s = (int)k; s < MAX_STEPS; s++)
        CHECK(r.skipped[s] == 0 && r.scale[s] == ldexpf(1.0f, 40 - (int)k));
    printf("  fp16 host, initial scale 2^40, %d steps: the first %lld skipped, then scale 2^%d; loss "
           "%.5f at the first update, %.5f at the end\n", MAX_STEPS, (long long)k, 40 - (int)k,
           (double)r.losses[k], (double)r.losses[MAX_STEPS - 1]);
    CHECK(r.losses[MAX_STEPS - 1] < r.losses[k] - 0.05f); /* it trains once the scale fits */
    free(r.params);
    free(ref.params);
}

/* (d) */
static void test_resume(void) {
    hpt_train_opts o = opts();
    o.offload = off(HPT_TIER_DISK, HPT_GH_FP16);
    o.loss_scale = scale(HPT_LOSS_SCALE_DYNAMIC, 65536.0f, 3);
    run_ctl c = {.fault_step = 5, .fault_layer = 1, .fault_value = 1e6f};
    run_out whole, part, rest;
    run(&o, &c, &whole, "fp16 disk, whole");
    c.stop = 5;
    run(&o, &c, &part, "fp16 disk, to step 5");
    free(part.params);
    hpt_train_opts orr = o;
    orr.resume = g_save;
    run(&orr, NULL, &rest, "fp16 disk, resumed at 5");
    CHECK(whole.skipped[4] == 1 && whole.skipped_total == 1 && rest.skipped_total == 1);
    CHECK(memcmp(whole.params, rest.params, whole.n * sizeof(float)) == 0);
    CHECK(memcmp(whole.losses + 5, rest.losses + 5, (STEPS - 5) * sizeof(float)) == 0);
    CHECK(memcmp(whole.scale + 5, rest.scale + 5, (STEPS - 5) * sizeof(float)) == 0);
    printf("  resumed after the skipped step 5: bit-identical (scale at step 6 %g, at the end %g)\n",
           (double)rest.scale[5], (double)rest.scale[STEPS - 1]);
    free(whole.params);
    free(rest.params);
}

static void test_refusals(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_trainer *tr = NULL;
    hpt_train_opts o = opts();
    o.offload = off(HPT_TIER_HOST, HPT_GH_FP16);
    CHECK_STATUS(hpt_trainer_create(mem, &o, &tr), HPT_ERR_INVALID); /* fp16 needs a scale */
    o.loss_scale = scale(HPT_LOSS_SCALE_DYNAMIC, 65536.0f, 2000);
    o.offload.fused = 1;
    CHECK_STATUS(hpt_trainer_create(mem, &o, &tr), HPT_ERR_UNSUPPORTED); /* grads never go home */
    o.offload = off(HPT_TIER_HOST, HPT_GH_FP32);
    o.offload.fused = 1;
    CHECK_STATUS(hpt_trainer_create(mem, &o, &tr), HPT_ERR_UNSUPPORTED); /* updated before known */
    o.offload = off(HPT_TIER_HOST, HPT_GH_FP16);
    o.loss_scale.init = 1000.0f;
    CHECK_STATUS(hpt_trainer_create(mem, &o, &tr), HPT_ERR_INVALID);
    CHECK(tr == NULL);
    hpt_loss_scale_opts l = hpt_loss_scale_defaults();
    CHECK(l.mode == HPT_LOSS_SCALE_OFF && l.init == 65536.0f && l.window == 2000);
    CHECK_OK(hpt_loss_scale_parse("1024", &l));
    CHECK(l.mode == HPT_LOSS_SCALE_STATIC && l.init == 1024.0f);
    CHECK_OK(hpt_loss_scale_parse("dynamic", &l));
    CHECK(l.mode == HPT_LOSS_SCALE_DYNAMIC);
    CHECK_STATUS(hpt_loss_scale_parse("3", &l), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_loss_scale_parse("0.5", &l), HPT_ERR_INVALID);
    hpt_grad_home g;
    CHECK_OK(hpt_grad_home_parse("fp16", &g));
    CHECK(g == HPT_GH_FP16 && !strcmp(hpt_grad_home_name(HPT_GH_BF16), "bf16"));
    CHECK_STATUS(hpt_grad_home_parse("fp8", &g), HPT_ERR_INVALID);
    hpt_mem_destroy(mem);
}

int main(int argc, char **argv) {
    g_arch = t_arch_arg(argc, argv, "test_loss_scale");
    if (!g_arch) return 2;
    t_arch_shape(g_arch, SHAPE, 4, 32, 4, 64, 16, 0);
    hpt_set_threads(2);
    t_make_shards(4242, 23, 5, 8, 6000, 0, g_train, NULL);
    snprintf(g_disk, sizeof g_disk, "%s/offload", t_tmpdir());
    snprintf(g_save, sizeof g_save, "%s/ckpt", t_tmpdir());
    printf("%s\n", SHAPE);
    test_bit_identity();
    test_homes_and_recovery();
    if (t_arch_first(g_arch)) {
        test_kernels();
        /* (d) on the first case's run (GPT-2's), whose only skipped step is the injected one */
        test_resume();
        test_refusals();
    }
    return t_done(t_arch_label(g_arch, "test_loss_scale"));
}
