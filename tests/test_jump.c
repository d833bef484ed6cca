/* test_jump.c ARCH: the hybrid schedule's jump predictor (docs/predict.md, "Jumps"), on the
 * architecture's case (arch_cases.h; the fits and the controller, (a) and (b), once, in the
 * first case's run).
 *   (a) the fits: on exactly linear, quadratic and geometric trajectories sampled at K
 *       snapshots S steps apart, the linear, quadratic and exp fits land H steps ahead where
 *       the trajectory is (relative 1e-5), and the linear fit of a curved one does not;
 *   (b) the controller: FULL -> PREDICT (one step) -> CORRECT -> FULL, a jump only when
 *       correct steps fit after it, and no more jumps after 2 poor ones in a row;
 *   (c) a jump that cannot help (a horizon far beyond the trajectory) is rolled back: the
 *       weights and the optimizer's moments after the jump step are bit-identical to those
 *       before it, and the controller stops after two of them;
 *   (d) jumps that help: at least one is taken (scale > 0), each taken jump lowers the
 *       confirming batches' loss, and the state options act (reset: moments 0 and step count
 *       0; zero-m: first moment 0, second kept);
 *   (e) a run saved inside FULL (snapshots partly taken), just before the jump, and inside
 *       CORRECT resumes to the uninterrupted run's bits (weights, losses, state file);
 *   (f) the estimator equals the measured memory: the device peak by category, the jump's
 *       device peak (events tagged PREDICT), and the host peak (the K snapshots, the held-out
 *       batches, and the optimizer's state, which moves to the host for the jump). */
#include "testlib.h"
#include "testing.h"

#include "train/train_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char SHAPE[T_SHAPE_MAX];

static char g_train[512], g_val[512];

/* ---- (a) ---- */

static double max_rel(const float *a, const double *b, size_t n) {
    double e = 0.0;
    for (size_t j = 0; j < n; j++) e = fmax(e, fabs((double)a[j] - b[j]) / fmax(fabs(b[j]), 1e-3));
    return e;
}

static void test_fits(void) {
    enum { K = 5, S = 7, N = 64 };
    const int64_t H = 35; /* 5 strides */
    float buf[K][N], *ring[K], out[N];
    double want[N];
    for (int i = 0; i < K; i++) ring[i] = buf[i];
    /* linear: w(t) = a + b t, t = i S; H ahead of the last: a + b ((K-1) S + H) */
    for (int j = 0; j < N; j++) {
        double a = 0.01 * j - 0.3, b = 1e-3 * (j % 7 - 3);
        for (int i = 0; i < K; i++) buf[i][j] = (float)(a + b * i * S);
        want[j] = b * (double)H; /* the direction: the target minus the last snapshot */
    }
    CHECK_OK(jump_direction(HPT_JUMP_FIT_LINEAR, K, S, H, ring, N, out));
    CHECK_MSG(max_rel(out, want, N) < 1e-4, "linear fit of a line: %g", max_rel(out, want, N));
    CHECK_OK(jump_direction(HPT_JUMP_FIT_QUADRATIC, K, S, H, ring, N, out));
    CHECK_MSG(max_rel(out, want, N) < 1e-4, "quadratic fit of a line: %g", max_rel(out, want, N));
    /* quadratic: w(t) = a + b t + c t^2 */
    for (int j = 0; j < N; j++) {
        double a = 0.02 * j, b = 1e-3 * (j % 5 - 2), c = -2e-5 * (j % 3 + 1);
        double tl = (K - 1) * S, tt = tl + (double)H;
        for (int i = 0; i < K; i++) buf[i][j] = (float)(a + b * i * S + c * i * S * i * S);
        want[j] = (a + b * tt + c * tt * tt) - (a + b * tl + c * tl * tl);
    }
    CHECK_OK(jump_direction(HPT_JUMP_FIT_QUADRATIC, K, S, H, ring, N, out));
    CHECK_MSG(max_rel(out, want, N) < 1e-3, "quadratic fit of a parabola: %g", max_rel(out, want, N));
    CHECK_OK(jump_direction(HPT_JUMP_FIT_LINEAR, K, S, H, ring, N, out));
    CHECK_MSG(max_rel(out, want, N) > 0.1, "a line does not follow a parabola: %g", max_rel(out, want, N));
    /* geometric: w_i = a + b r^i (per stride); 5 more strides: b (r^K + .. + r^(K+4)) - ... */
    for (int j = 0; j < N; j++) {
        double a = 0.1 - 0.003 * j, b = 0.05 * (j % 4 + 1) * (j % 2 ? 1 : -1), r = 0.5 + 0.006 * j;
        for (int i = 0; i < K; i++) buf[i][j] = (float)(a + b * pow(r, i));
        want[j] = b * pow(r, K - 1) * (pow(r, (double)H / S) - 1.0);
    }
    CHECK_OK(jump_direction(HPT_JUMP_FIT_EXP, K, S, H, ring, N, out));
    CHECK_MSG(max_rel(out, want, N) < 1e-3, "exp fit of a geometric series: %g", max_rel(out, want, N));
    /* the coefficients of a linear fit reproduce constants and the time itself */
    double c[K], s0 = 0.0, s1 = 0.0;
    CHECK_OK(jump_coeffs(HPT_JUMP_FIT_LINEAR, K, S, H, c));
    for (int i = 0; i < K; i++) {
        s0 += c[i];
        s1 += c[i] * (double)(i - (K - 1));
    }
    CHECK(fabs(s0 - 1.0) < 1e-12 && fabs(s1 - (double)H / S) < 1e-12);
}

/* ---- (b) ---- */

static void test_controller(void) {
    hpt_schedule_opts o = hpt_schedule_defaults();
    o.kind = HPT_SCHEDULE_HYBRID;
    o.predictor = HPT_PREDICTOR_JUMP;
    o.warmup_steps = 2;
    o.full_steps = 5;
    o.correct_steps = 2;
    o.jump_stride = 2;
    o.jump_snapshots = 3;
    o.jump_min_gain = 1.0f;
    CHECK_OK(hpt_schedule_check(&o));
    hpt_schedule s;
    hpt_schedule_init(&s, &o);
    /* gains of the jumps in order: good, poor, good, poor, poor (stops) */
    const double gains[] = {10.0, 0.5, 3.0, 0.0, 0.2};
    int jumps = 0;
    int64_t left = 100;
    const int want_seq[] = {HPT_PHASE_WARMUP, HPT_PHASE_WARMUP, HPT_PHASE_FULL, HPT_PHASE_FULL,
                            HPT_PHASE_FULL, HPT_PHASE_FULL, HPT_PHASE_FULL, HPT_PHASE_PREDICT,
                            HPT_PHASE_CORRECT, HPT_PHASE_CORRECT, HPT_PHASE_FULL};
    for (int k = 0; k < 11; k++) {
        CHECK_MSG(s.phase == want_seq[k], "step %d: phase %d, expected %d", k, s.phase, want_seq[k]);
        hpt_schedule_obs ob = {.steps_left = --left, .jump_gain = s.phase == HPT_PHASE_PREDICT ? gains[jumps] : 0.0};
        if (s.phase == HPT_PHASE_PREDICT) jumps++;
        hpt_schedule_advance(&s, &o, &ob);
    }
    while (left > 0) {
        int was = s.phase;
        hpt_schedule_obs ob = {.steps_left = --left};
        if (was == HPT_PHASE_PREDICT) {
            CHECK(!s.stopped && jumps < 5);
            ob.jump_gain = gains[jumps < 5 ? jumps : 4];
            jumps++;
        }
        hpt_schedule_advance(&s, &o, &ob);
        if (was == HPT_PHASE_PREDICT) CHECK(s.phase == HPT_PHASE_CORRECT && s.in_phase == 0);
    }
    CHECK_MSG(jumps == 5 && s.stopped && s.n_poor == 2, "jumps %d stopped %d poor %lld", jumps,
              s.stopped, (long long)s.n_poor);
    CHECK(s.phase == HPT_PHASE_FULL);
    /* no jump unless its correct steps fit: FULL ends with 2 steps left */
    hpt_schedule_init(&s, &o);
    s.phase = HPT_PHASE_FULL;
    s.in_phase = 4;
    hpt_schedule_obs ob = {.steps_left = 2};
    hpt_schedule_advance(&s, &o, &ob);
    CHECK(s.phase == HPT_PHASE_FULL);
    s.in_phase = 4;
    ob.steps_left = 3;
    hpt_schedule_advance(&s, &o, &ob);
    CHECK(s.phase == HPT_PHASE_PREDICT && s.horizon == 1);
    /* a FULL round spans the snapshots: 4 steps asked, (3 - 1) * 2 + 1 = 5 run */
    hpt_schedule_opts shortf = o;
    shortf.full_steps = 4;
    hpt_schedule_init(&s, &shortf);
    s.phase = HPT_PHASE_FULL;
    ob.steps_left = 50;
    for (int k = 0; k < 4; k++) hpt_schedule_advance(&s, &shortf, &ob);
    CHECK(s.phase == HPT_PHASE_FULL && s.in_phase == 4);
    hpt_schedule_advance(&s, &shortf, &ob);
    CHECK(s.phase == HPT_PHASE_PREDICT);
    /* refused: a quadratic fit of 2 snapshots */
    hpt_schedule_opts bad = o;
    bad.jump_snapshots = 2;
    bad.jump_fit = HPT_JUMP_FIT_QUADRATIC;
    CHECK_STATUS(hpt_schedule_check(&bad), HPT_ERR_INVALID);
    hpt_predictor_kind pk;
    CHECK_OK(hpt_predictor_parse("jump", &pk));
    CHECK(pk == HPT_PREDICTOR_JUMP && !strcmp(hpt_predictor_name(pk), "jump"));
}

/* ---- the trainer ---- */

static hpt_train_opts jump_opts(int64_t steps, int64_t horizon) {
    hpt_train_opts o = t_train_opts(SHAPE, g_train, 4, 16, steps, 5);
    o.val = g_val;
    o.eval_every = 0;
    o.val_batches = 4;
    o.sched.kind = HPT_SCHEDULE_HYBRID;
    o.sched.predictor = HPT_PREDICTOR_JUMP;
    o.sched.warmup_steps = 5;
    o.sched.full_steps = 9;
    o.sched.correct_steps = 2;
    o.sched.jump_stride = 2;
    o.sched.jump_snapshots = 5;
    o.sched.jump_horizon = horizon;
    o.sched.jump_search_batches = 2;
    o.sched.jump_min_gain = 0.0f;
    return o;
}

/* (c) */
static void test_rollback(hpt_mem *mem) {
    hpt_train_opts o = jump_opts(60, 1000000); /* a thousand times the fitted span at the least */
    o.sched.jump_min_gain = 1.0f;
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (!tr) return;
    hpt_model *m = hpt_trainer_model(tr);
    size_t n = hpt_model_num_params(m);
    float *w = malloc(n * sizeof(float)), *mm = malloc(n * sizeof(float));
    int jumps = 0, same = 0;
    while (!hpt_trainer_done(tr)) {
        const hpt_optim *opt = hpt_trainer_optim(tr);
        memcpy(w, hpt_model_params(m), n * sizeof(float));
        memcpy(mm, hpt_optim_m(opt), n * sizeof(float));
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
        if (!p.jumped) continue;
        jumps++;
        CHECK(p.diverged == 2 && p.jump_scale == 0.0 && p.jump_gain == 0.0);
        same += !memcmp(w, hpt_model_params(m), n * sizeof(float)) &&
                !memcmp(mm, hpt_optim_m(opt), n * sizeof(float));
    }
    const hpt_schedule *s = hpt_trainer_schedule(tr);
    CHECK_MSG(jumps == 2 && same == 2 && s->stopped && s->n_rollback == 2,
              "rollback: %d jumps, %d bit-identical, stopped %d", jumps, same, s->stopped);
    free(w);
    free(mm);
    hpt_trainer_free(tr);
}

/* (d) */
static void test_taken(hpt_mem *mem, int state) {
    hpt_train_opts o = jump_opts(80, 4);
    o.sched.jump_state = state;
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (!tr) return;
    size_t n = hpt_model_num_params(hpt_trainer_model(tr));
    int jumps = 0, taken = 0, state_ok = 0;
    while (!hpt_trainer_done(tr)) {
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
        if (!p.jumped) continue;
        jumps++;
        if (p.diverged) continue;
        taken++;
        CHECK(p.jump_scale >= 0.0 && p.loss < p.pred_loss); /* the confirming batches' loss fell */
        const hpt_optim *opt = hpt_trainer_optim(tr);
        const float *mo = hpt_optim_m(opt), *vo = hpt_optim_v(opt);
        int m0 = 1, v0 = 1;
        for (size_t j = 0; j < n; j++) {
            m0 &= mo[j] == 0.0f;
            v0 &= vo[j] == 0.0f;
        }
        if (state == HPT_JUMP_STATE_RESET) state_ok += m0 && v0 && hpt_optim_get_t(opt) == 0;
        else if (state == HPT_JUMP_STATE_ZERO_M) state_ok += m0 && !v0 && hpt_optim_get_t(opt) > 0;
        else state_ok += !m0 && !v0 && hpt_optim_get_t(opt) > 0;
    }
    CHECK_MSG(jumps >= 3 && taken >= 1 && state_ok == taken, "state %d: %d jumps, %d taken, %d with "
              "the state expected", state, jumps, taken, state_ok);
    hpt_trainer_free(tr);
}

/* (e), (f) */
static void test_resume(hpt_mem *mem) {
    hpt_train_opts o = jump_opts(40, 4);
    size_t n = 0;
    {
        hpt_trainer *tr = NULL;
        CHECK_OK(hpt_trainer_create(mem, &o, &tr));
        if (!tr) return;
        n = hpt_model_num_params(hpt_trainer_model(tr));
        hpt_trainer_free(tr);
    }
    /* warmup 1-5, FULL 6-14 (snapshots after 6, 8, .., 14), the jump 15, CORRECT 16-17 */
    t_check_resume(mem, &o, 9, n, "jump_full", "inside FULL", NULL, NULL);
    t_check_resume(mem, &o, 14, n, "jump_before", "before the jump", NULL, NULL);
    t_check_resume(mem, &o, 16, n, "jump_correct", "inside CORRECT", NULL, NULL);
    o.sched.jump_state = HPT_JUMP_STATE_ZERO_M;
    o.sched.jump_fit = HPT_JUMP_FIT_EXP;
    t_check_resume(mem, &o, 31, n, "jump_exp", "exp fit, zero-m, second FULL", NULL, NULL);
    hpt_mem *fresh;
    CHECK_OK(hpt_mem_create(&fresh));
    hpt_mem_record(fresh, 1);
    float *losses = calloc(40, sizeof(float));
    t_train_run(fresh, &o, 0, losses, NULL, NULL);
    free(losses);
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(o.model, &cfg));
    hpt_plan_opts po = hpt_train_plan_opts(&o, &cfg);
    hpt_estimate e;
    CHECK_OK(hpt_plan_estimate(&po, &e));
    hpt_mem_stats st;
    hpt_mem_get_stats(fresh, &st);
    size_t nev;
    const hpt_mem_event *ev = hpt_mem_events(fresh, &nev);
    uint64_t pred = 0;
    for (size_t i = 0; i < nev; i++)
        if (ev[i].phase == HPT_PHASE_PREDICT && ev[i].tier == HPT_TIER_DEVICE && ev[i].tier_live_bytes > pred)
            pred = ev[i].tier_live_bytes;
    uint64_t host = e.peak_bytes[HPT_TIER_HOST] > e.predict_peak_bytes[HPT_TIER_HOST]
                        ? e.peak_bytes[HPT_TIER_HOST] : e.predict_peak_bytes[HPT_TIER_HOST];
    for (int c = 0; c < HPT_CAT_COUNT; c++)
        CHECK_MSG(e.bytes[HPT_TIER_DEVICE][c] == st.peak_live_bytes[HPT_TIER_DEVICE][c],
                  "jump: device %s estimate %llu, measured %llu", hpt_category_name((hpt_category)c),
                  (unsigned long long)e.bytes[HPT_TIER_DEVICE][c],
                  (unsigned long long)st.peak_live_bytes[HPT_TIER_DEVICE][c]);
    CHECK(e.peak_bytes[HPT_TIER_DEVICE] == st.peak_bytes[HPT_TIER_DEVICE]);
    CHECK_MSG(e.predict_peak_bytes[HPT_TIER_DEVICE] == pred, "jump: predict-phase device estimate "
              "%llu, measured %llu", (unsigned long long)e.predict_peak_bytes[HPT_TIER_DEVICE],
              (unsigned long long)pred);
    CHECK_MSG(host == st.peak_bytes[HPT_TIER_HOST], "jump: host estimate %llu, measured %llu",
              (unsigned long long)host, (unsigned long long)st.peak_bytes[HPT_TIER_HOST]);
    hpt_mem_destroy(fresh);
}

/* (g) Before its first jump a jump run is FULL-only training, bit for bit: the snapshots and
 * the loss model (fed lr x gradient norm in a jump run) touch no weight. */
static void test_full_until_jump(hpt_mem *mem) {
    hpt_train_opts o = jump_opts(40, 4), f = o;
    f.sched.kind = HPT_SCHEDULE_FULL;
    hpt_trainer *tj = NULL, *tf = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tj));
    CHECK_OK(hpt_trainer_create(mem, &f, &tf));
    if (!tj || !tf) {
        hpt_trainer_free(tj);
        hpt_trainer_free(tf);
        return;
    }
    /* warmup 5 + FULL 9 real steps, then the jump */
    int same = 0, jumped = 0;
    hpt_train_progress pj, pf;
    for (int i = 0; i < 14; i++) {
        CHECK_OK(hpt_trainer_step(tj, &pj));
        CHECK_OK(hpt_trainer_step(tf, &pf));
        jumped += pj.jumped;
        same += pj.loss == pf.loss && pj.grad_norm == pf.grad_norm;
    }
    hpt_model *mj = hpt_trainer_model(tj), *mf = hpt_trainer_model(tf);
    size_t n = hpt_model_num_params(mj);
    CHECK_MSG(same == 14 && jumped == 0, "before the jump: %d of 14 steps the same, %d jumps", same, jumped);
    CHECK(!memcmp(hpt_model_params(mj), hpt_model_params(mf), n * sizeof(float)));
    CHECK_OK(hpt_trainer_step(tj, &pj));
    CHECK(pj.jumped); /* and the next step is the jump */
    hpt_trainer_free(tj);
    hpt_trainer_free(tf);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_jump");
    if (!a) return 2;
    t_arch_shape(a, SHAPE, 2, 32, 4, 64, 16, 0);
    t_make_shards(4242, 17, 3, 7, 5000, 1200, g_train, g_val);
    if (t_arch_first(a)) {
        test_fits();
        test_controller();
    }
    hpt_mem *mem;
    if (hpt_mem_create(&mem) != HPT_OK) return 1;
    test_rollback(mem);
    test_taken(mem, HPT_JUMP_STATE_KEEP);
    test_taken(mem, HPT_JUMP_STATE_RESET);
    test_taken(mem, HPT_JUMP_STATE_ZERO_M);
    test_resume(mem);
    test_full_until_jump(mem);
    hpt_mem_destroy(mem);
    return t_done(t_arch_label(a, "test_jump"));
}
