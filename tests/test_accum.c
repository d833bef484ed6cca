/* test_accum.c ARCH: gradient accumulation (--accum K) against the large batch it stands for,
 * on the architecture's case (arch_cases.h).
 *   (a) K micro-batches of B, gradients summed and scaled by 1/K inside the optimizer, equal
 *       one batch of K*B in fp32: gradients norm-wise (bound 1e-6), the reported (clipped)
 *       norm, and the weights after one AdamW step; scale 1 is hpt_optim_step bit for bit;
 *   (b) a trainer run with accum 2 resumes bit-identically (split vs whole), a resume with
 *       another K is refused, and its losses follow the run with batch 2*B;
 *   (c) the accounted activation peak of K=4, B=2 is that of K=1, B=2 and below K=1, B=8;
 *       the estimator's tokens per step follow K, its peak does not. */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char SHAPE[T_SHAPE_MAX];
#define VOCAB 64

static char g_train[512];

static void make_shard(void) {
    t_make_shards(777, 17, 3, 7, 4000, 0, g_train, NULL);
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

/* (a) */
static void test_equivalence(hpt_mem *mem, int K, int B, float clip) {
    const int T = 16;
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(SHAPE, &cfg));
    hpt_model *big = NULL, *acc = NULL;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &big));
    CHECK_OK(hpt_model_create_config(mem, &cfg, &acc));
    if (!big || !acc) return;
    hpt_model_init_random(big, 42);
    hpt_model_init_random(acc, 42);
    size_t n = hpt_model_num_params(big), bt = (size_t)K * B * T;
    int32_t *x = malloc(bt * sizeof *x), *y = malloc(bt * sizeof *y);
    uint32_t s = 99;
    for (size_t i = 0; i < bt; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (int32_t)((s >> 8) % VOCAB);
        s = s * 1664525u + 1013904223u;
        y[i] = (int32_t)((s >> 8) % VOCAB);
    }
    float loss_big, loss;
    double loss_sum = 0.0;
    CHECK_OK(hpt_model_forward(big, x, y, K * B, T, &loss_big));
    hpt_model_zero_grad(big);
    CHECK_OK(hpt_model_backward(big));
    hpt_model_zero_grad(acc);
    for (int k = 0; k < K; k++) { /* micro-batch k is rows k*B .. k*B+B-1 of the big batch */
        CHECK_OK(hpt_model_forward(acc, x + (size_t)k * B * T, y + (size_t)k * B * T, B, T, &loss));
        CHECK_OK(hpt_model_backward(acc));
        loss_sum += (double)loss;
    }
    /* What the optimizer sees: the summed gradients times 1/K. */
    float *g = malloc(n * sizeof *g);
    const float *ga = hpt_model_grads(acc);
    for (size_t i = 0; i < n; i++) g[i] = ga[i] * (1.0f / (float)K);
    double grad_err = t_rel_err(g, hpt_model_grads(big), n);
    double loss_err = fabs(loss_sum / K - (double)loss_big) / fabs((double)loss_big);
    printf("  K=%d B=%d vs batch %d: gradients rel err %.3g, loss rel err %.3g\n", K, B, K * B,
           grad_err, loss_err);
    CHECK_MSG(grad_err < 1e-6, "accumulated gradients differ: %g", grad_err);
    CHECK_MSG(loss_err < 1e-6, "mean micro-batch loss differs: %g", loss_err);

    /* One AdamW step each, the accumulated one through the 1/K scale. */
    float *p0 = malloc(n * sizeof *p0);
    memcpy(p0, hpt_model_params(big), n * sizeof *p0);
    hpt_adamw_opts ao = hpt_adamw_defaults();
    hpt_optim *ob = NULL, *oa = NULL;
    CHECK_OK(hpt_optim_create(mem, big, &ao, &ob));
    CHECK_OK(hpt_optim_create(mem, acc, &ao, &oa));
    float gn_big = 0, gn_acc = 0;
    CHECK_OK(hpt_optim_step(ob, 1e-3f, clip, &gn_big));
    CHECK_OK(hpt_optim_step_scaled(oa, 1e-3f, clip, 1.0f / (float)K, &gn_acc));
    double gn_err = fabs((double)gn_acc - (double)gn_big) / (double)gn_big;
    const float *pb = hpt_model_params(big), *pa = hpt_model_params(acc);
    double w_err = t_rel_err(pa, pb, n);
    /* The update itself: (p_acc - p0) against (p_big - p0). */
    float *ua = malloc(n * sizeof *ua), *ub = malloc(n * sizeof *ub);
    for (size_t i = 0; i < n; i++) { ua[i] = pa[i] - p0[i]; ub[i] = pb[i] - p0[i]; }
    double u_err = t_rel_err(ua, ub, n), w_max = max_abs_diff(pa, pb, n);
    printf("  after one AdamW step (clip %g, norm %.5g): norm rel err %.3g, weights rel err "
           "%.3g (max abs %.3g), update rel err %.3g\n", (double)clip, (double)gn_big, gn_err,
           w_err, w_max, u_err);
    CHECK_MSG(gn_err < 1e-6, "gradient norm differs: %g", gn_err);
    CHECK_MSG(w_err < 1e-6, "weights after the step differ: %g", w_err);
    CHECK_MSG(u_err < 1e-4, "updates differ: %g", u_err);
    if (clip > 0) CHECK(gn_big > clip); /* the clip path was exercised */

    /* grad_scale 1 is hpt_optim_step, bit for bit. */
    hpt_optim *o1 = NULL, *o2 = NULL;
    memcpy(hpt_model_params(acc), p0, n * sizeof *p0);
    memcpy(hpt_model_params(big), p0, n * sizeof *p0);
    memcpy(hpt_model_grads(acc), hpt_model_grads(big), n * sizeof(float));
    CHECK_OK(hpt_optim_create(mem, big, &ao, &o1));
    CHECK_OK(hpt_optim_create(mem, acc, &ao, &o2));
    CHECK_OK(hpt_optim_step(o1, 1e-3f, clip, &gn_big));
    CHECK_OK(hpt_optim_step_scaled(o2, 1e-3f, clip, 1.0f, &gn_acc));
    CHECK(memcmp(&gn_big, &gn_acc, 4) == 0);
    CHECK_MSG(memcmp(hpt_model_params(big), hpt_model_params(acc), n * sizeof(float)) == 0,
              "grad_scale 1 is not hpt_optim_step");
    CHECK_STATUS(hpt_optim_step_scaled(o2, 1e-3f, clip, 0.0f, NULL), HPT_ERR_INVALID);
    hpt_optim_free(o1);
    hpt_optim_free(o2);
    hpt_optim_free(oa);
    hpt_optim_free(ob);
    free(p0); free(ua); free(ub); free(g); free(x); free(y);
    hpt_model_free(big);
    hpt_model_free(acc);
}

static hpt_train_opts opts(int B, int K, const char *save, const char *resume) {
    hpt_train_opts o = t_train_opts(SHAPE, g_train, B, 16, 8, 2);
    o.accum = K;
    o.save_dir = save;
    o.resume = resume;
    return o;
}


/* (b) */
static void test_resume(hpt_mem *mem) {
    char da[512], db[512], dc[512];
    snprintf(da, sizeof da, "%s/accum_a", t_tmpdir());
    snprintf(db, sizeof db, "%s/accum_b", t_tmpdir());
    snprintf(dc, sizeof dc, "%s/accum_c", t_tmpdir());
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(SHAPE, &cfg));
    size_t n = hpt_model_config_num_params(&cfg);
    float la[8] = {0}, lb[8] = {0}, lc[8] = {0};
    float *pa = calloc(n, 4), *pb = calloc(n, 4), *pc = calloc(n, 4);
    hpt_train_opts oa = opts(2, 2, da, NULL), ob = opts(2, 2, db, NULL);
    t_train_run(mem, &oa, 8, la, NULL, pa);       /* whole */
    t_train_run(mem, &ob, 3, lb, NULL, NULL);     /* steps 1-3, saved */
    hpt_train_opts ob2 = opts(2, 2, db, db);
    t_train_run(mem, &ob2, 8, lb, NULL, pb);      /* resumed: 4-8 */
    CHECK_MSG(memcmp(la, lb, sizeof la) == 0, "accum 2: resumed losses differ");
    CHECK_MSG(memcmp(pa, pb, n * 4) == 0, "accum 2: resumed weights differ");
    CHECK(la[7] < la[0]); /* it trained */
    /* another K on resume is refused, naming the flag */
    hpt_train_opts bad = opts(2, 3, NULL, db);
    hpt_trainer *tr = NULL;
    CHECK_STATUS(hpt_trainer_create(mem, &bad, &tr), HPT_ERR_INVALID);
    CHECK(strstr(hpt_last_error(), "--accum 2") != NULL);
    CHECK(tr == NULL);
    /* The same run as batch 4 without accumulation (same tokens per step, same windows):
     * equal up to float rounding. */
    hpt_train_opts oc = opts(4, 1, dc, NULL);
    t_train_run(mem, &oc, 8, lc, NULL, pc);
    double max_loss_err = 0.0;
    for (int i = 0; i < 8; i++) {
        double e = fabs((double)la[i] - (double)lc[i]) / fabs((double)lc[i]);
        if (e > max_loss_err) max_loss_err = e;
        printf("  step %d loss accum 2 x B 2 %.7f | B 4 %.7f\n", i + 1, (double)la[i], (double)lc[i]);
    }
    double w_err = t_rel_err(pa, pc, n);
    printf("  8 steps accum 2 x B 2 vs B 4: max loss rel err %.3g, weights rel err %.3g\n",
           max_loss_err, w_err);
    CHECK_MSG(max_loss_err < 1e-5, "losses of accum 2 x B 2 and B 4 differ: %g", max_loss_err);
    CHECK_MSG(w_err < 1e-5, "weights of accum 2 x B 2 and B 4 differ: %g", w_err);
    free(pa); free(pb); free(pc);
}

/* (c): one step through the trainer on a fresh hpt_mem; the accounted device peak and the
 * activation bytes live at it. */
static void one_step_peak(int B, int K, uint64_t *peak, uint64_t *acts) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_train_opts o = opts(B, K, NULL, NULL);
    o.steps = 1;
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (tr) {
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
    }
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    *peak = st.peak_bytes[HPT_TIER_DEVICE];
    *acts = st.peak_live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS];
    hpt_trainer_free(tr);
    hpt_mem_destroy(mem);
}

static void test_memory(void) {
    uint64_t p42, a42, p12, a12, p18, a18;
    one_step_peak(2, 4, &p42, &a42);
    one_step_peak(2, 1, &p12, &a12);
    one_step_peak(8, 1, &p18, &a18);
    printf("  accounted device peak / activations: K=4 B=2 %llu / %llu, K=1 B=2 %llu / %llu, "
           "K=1 B=8 %llu / %llu bytes\n", (unsigned long long)p42, (unsigned long long)a42,
           (unsigned long long)p12, (unsigned long long)a12, (unsigned long long)p18,
           (unsigned long long)a18);
    CHECK(a42 == a12 && p42 == p12);
    CHECK(a42 > 0 && a42 < a18 && p42 < p18);
    /* The estimator: the same peak, K times the tokens (and FLOPs) per step. */
    hpt_plan_opts po = hpt_plan_defaults();
    CHECK_OK(hpt_model_config_parse(SHAPE, &po.cfg));
    po.B = 2;
    po.T = 16;
    hpt_estimate e1, e4;
    CHECK_OK(hpt_plan_estimate(&po, &e1));
    po.accum = 4;
    CHECK_OK(hpt_plan_estimate(&po, &e4));
    CHECK(e4.peak_bytes[HPT_TIER_DEVICE] == e1.peak_bytes[HPT_TIER_DEVICE]);
    CHECK(e4.activation_bytes == e1.activation_bytes && e4.activation_bytes == a42);
    CHECK(e1.tokens_per_step == 32 && e4.tokens_per_step == 128);
    CHECK(e4.peak_bytes[HPT_TIER_DEVICE] == p42);
    po.accum = -1;
    CHECK_STATUS(hpt_plan_estimate(&po, &e4), HPT_ERR_INVALID);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_accum");
    if (!a) return 2;
    t_arch_shape(a, SHAPE, 2, 32, 4, VOCAB, 16, 0);
    hpt_set_threads(2);
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    make_shard();
    printf("%s\n", SHAPE);
    test_equivalence(mem, 4, 2, 0.0f);
    test_equivalence(mem, 2, 3, 0.05f);
    test_resume(mem);
    test_memory();
    uint64_t live = t_device_live(mem);
    CHECK_MSG(live == 0, "%llu bytes still live", (unsigned long long)live);
    hpt_mem_destroy(mem);
    return t_done(t_arch_label(a, "test_accum"));
}
