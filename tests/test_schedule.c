/* test_schedule.c ARCH: the hybrid predict schedule (docs/predict.md), on the architecture's
 * case (arch_cases.h; the controller's tables, (a), once, in the first case's run).
 *   (a) the controller's transitions follow the configuration exactly (tables of observations
 *       and the phase, step in phase and horizon expected after each), and bad settings are
 *       refused;
 *   (b) a zero predictor leaves the weights bit-identical through a predict phase;
 *   (c) a garbage predictor is detected by the checks, the weights roll back bit-identically
 *       to the phase's start, and training recovers (final validation loss near the full-only
 *       run's); without checks the first CORRECT step detects it and rolls back;
 *   (d) a run saved and resumed in the middle of a predict phase (adam and linear predictors)
 *       computes the same bits as the uninterrupted run; a full-only state is still version 2,
 *       a hybrid one version 3, and both load; a corrupt or truncated section is refused, and
 *       so is a resume with another predictor;
 *   (f) the predictors' formulas: three adam predictions equal three real AdamW steps whose
 *       gradient is the first moment (the summed updates within 1e-5, norm-wise); the linear fit of an exactly
 *       linear trajectory gives its slope (1e-4) and moves the weights by it;
 *   (g) int8 checks (--check-weights int8): the same run with fp32 and with int8 checks (zero
 *       predictor, a band too wide to act on) checks the same weights at the same steps; each
 *       int8 check loss is within 0.2% (relative) of the fp32 one, and not equal to it
 *       (measured: 2.0e-5 at worst); a garbage
 *       predictor under int8 checks is caught, rolled back bit for bit, and training recovers
 *       as with fp32 checks (c);
 *   (e) phase-aware memory, from the hpt_mem timeline: the device peak of PREDICT is below
 *       that of the ordinary steps (WARMUP, FULL, CORRECT) by at least the gradients and the arena (adam) and also the optimizer state
 *       (linear, whose state goes to the host tier and comes back). */
#include "testlib.h"
#include "testing.h"

#include "train/train_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char SHAPE[T_SHAPE_MAX];
static const t_arch *g_arch;
#define HPT_MAX3(a, b, c) ((a) > (b) ? ((a) > (c) ? (a) : (c)) : ((b) > (c) ? (b) : (c)))

static char g_train[512], g_val[512];

static void make_shards(void) {
    t_make_shards(4242, 17, 3, 7, 5000, 1000, g_train, g_val);
}

/* ---- (a) ---- */

typedef struct {
    float confidence;
    int diverged;
    int64_t steps_left;
    int phase;            /* expected after the step */
    int64_t in_phase, horizon;
} row;

enum { W = HPT_PHASE_WARMUP, F = HPT_PHASE_FULL, P = HPT_PHASE_PREDICT, C = HPT_PHASE_CORRECT };

static void run_table(const char *name, const hpt_schedule_opts *o, int first, const row *r, int n,
                      const hpt_schedule *want_end) {
    hpt_schedule s;
    hpt_schedule_init(&s, o);
    CHECK_MSG(s.phase == first, "%s: starts in %s", name, hpt_phase_name((hpt_phase)s.phase));
    for (int i = 0; i < n; i++) {
        hpt_schedule_obs ob = {.confidence = r[i].confidence, .diverged = r[i].diverged,
                               .steps_left = r[i].steps_left};
        hpt_schedule_advance(&s, o, &ob);
        CHECK_MSG(s.phase == r[i].phase && s.in_phase == r[i].in_phase && s.horizon == r[i].horizon,
                  "%s row %d: got %s %lld/%lld, want %s %lld/%lld", name, i,
                  hpt_phase_name((hpt_phase)s.phase), (long long)s.in_phase, (long long)s.horizon,
                  hpt_phase_name((hpt_phase)r[i].phase), (long long)r[i].in_phase,
                  (long long)r[i].horizon);
    }
    if (want_end)
        CHECK_MSG(s.n_predict_phases == want_end->n_predict_phases &&
                  s.n_predict_steps == want_end->n_predict_steps && s.n_early == want_end->n_early &&
                  s.n_rollback == want_end->n_rollback && s.cap == want_end->cap,
                  "%s: counts %lld %lld %lld %lld cap %g", name, (long long)s.n_predict_phases,
                  (long long)s.n_predict_steps, (long long)s.n_early, (long long)s.n_rollback,
                  (double)s.cap);
}

static void test_transitions(void) {
    hpt_schedule_opts o = hpt_schedule_defaults();
    o.kind = HPT_SCHEDULE_HYBRID;
    o.warmup_steps = 2;
    o.full_steps = 3;
    o.max_predict_steps = 4;
    o.confidence = 0.5f;
    o.correct_steps = 2;
    /* confident throughout: W W | F F F | P P P P (horizon 4) | C C | P ... */
    static const row confident[] = {
        {0.0f, 0, 100, W, 1, 0}, {0.0f, 0, 99, F, 0, 0},
        {1.0f, 0, 98, F, 1, 0}, {1.0f, 0, 97, F, 2, 0}, {1.0f, 0, 96, P, 0, 4},
        {1.0f, 0, 95, P, 1, 4}, {1.0f, 0, 94, P, 2, 4}, {1.0f, 0, 93, P, 3, 4}, {1.0f, 0, 92, C, 0, 0},
        {1.0f, 0, 91, C, 1, 0}, {1.0f, 0, 90, P, 0, 4},
    };
    hpt_schedule end = {.n_predict_phases = 2, .n_predict_steps = 4, .cap = 1.0f};
    run_table("confident", &o, W, confident, (int)(sizeof confident / sizeof *confident), &end);
    /* not confident: FULL rounds repeat; the horizon follows the confidence: r = (0.75 - 0.5) /
     * 0.5 = 0.5 -> 2 steps; then CORRECT below the threshold goes back to FULL */
    static const row unsure[] = {
        {0.0f, 0, 100, W, 1, 0}, {0.0f, 0, 99, F, 0, 0},
        {0.9f, 0, 98, F, 1, 0}, {0.9f, 0, 97, F, 2, 0}, {0.4f, 0, 96, F, 0, 0},
        {0.4f, 0, 95, F, 1, 0}, {0.4f, 0, 94, F, 2, 0}, {0.75f, 0, 93, P, 0, 2},
        {0.75f, 0, 92, P, 1, 2}, {0.75f, 0, 91, C, 0, 0},
        {0.75f, 0, 90, C, 1, 0}, {0.3f, 0, 89, F, 0, 0},
    };
    end = (hpt_schedule){.n_predict_phases = 1, .n_predict_steps = 2, .cap = 1.0f};
    run_table("unsure", &o, W, unsure, (int)(sizeof unsure / sizeof *unsure), &end);
    /* divergence: an early end halves the cap (next horizon 2), a rollback halves it again (1,
     * the floor is 1/4); a clean phase then a clean first CORRECT step doubles it */
    o.warmup_steps = 0;
    static const row diverge[] = {
        {1.0f, 0, 100, F, 1, 0}, {1.0f, 0, 99, F, 2, 0}, {1.0f, 0, 98, P, 0, 4},
        {1.0f, 1, 97, C, 0, 0},                               /* early end at step 1 */
        {1.0f, 0, 96, C, 1, 0}, {1.0f, 0, 95, P, 0, 2},       /* cap 0.5 */
        {1.0f, 0, 94, P, 1, 2}, {1.0f, 2, 93, C, 0, 0},       /* rollback */
        {1.0f, 0, 92, C, 1, 0}, {1.0f, 0, 91, P, 0, 1},       /* cap 0.25 */
        {1.0f, 0, 90, C, 0, 0},                               /* a clean phase */
        {1.0f, 0, 89, C, 1, 0}, {1.0f, 0, 88, P, 0, 2},       /* cap 0.5 */
        {1.0f, 0, 87, P, 1, 2}, {1.0f, 0, 86, C, 0, 0},
        {1.0f, 2, 85, C, 1, 0}, {1.0f, 0, 84, P, 0, 1},       /* measured at CORRECT: rollback */
    };
    end = (hpt_schedule){.n_predict_phases = 5, .n_predict_steps = 6, .n_early = 1,
                         .n_rollback = 2, .cap = 0.25f};
    run_table("diverge", &o, F, diverge, (int)(sizeof diverge / sizeof *diverge), &end);
    /* the run's end: a phase never leaves fewer than correct_steps steps */
    static const row tail[] = {
        {1.0f, 0, 6, F, 1, 0}, {1.0f, 0, 5, F, 2, 0}, {1.0f, 0, 4, P, 0, 2},
        {1.0f, 0, 3, P, 1, 2}, {1.0f, 0, 2, C, 0, 0}, {1.0f, 0, 1, C, 1, 0}, {1.0f, 0, 0, F, 0, 0},
    };
    run_table("tail", &o, F, tail, (int)(sizeof tail / sizeof *tail), NULL);
    /* full-only: FULL whatever is observed */
    hpt_schedule_opts full = hpt_schedule_defaults();
    static const row only[] = {{1.0f, 0, 9, F, 0, 0}, {1.0f, 2, 8, F, 0, 0}, {0.0f, 1, 7, F, 0, 0}};
    run_table("full-only", &full, F, only, 3, NULL);
    /* the horizon rule */
    CHECK(hpt_schedule_horizon(&o, 0.5f, 1.0f) == 1);
    CHECK(hpt_schedule_horizon(&o, 1.0f, 1.0f) == 4);
    CHECK(hpt_schedule_horizon(&o, 0.9f, 0.5f) == 2); /* 4 * 0.5 * 0.8 = 1.6 */
    o.confidence = 1.0f;
    CHECK(hpt_schedule_horizon(&o, 1.0f, 1.0f) == 4);
    /* refused settings */
    hpt_schedule_opts bad = o;
    CHECK_OK(hpt_schedule_check(&bad));
    bad.full_steps = 0;
    CHECK_STATUS(hpt_schedule_check(&bad), HPT_ERR_INVALID);
    bad = o;
    bad.confidence = 1.5f;
    CHECK_STATUS(hpt_schedule_check(&bad), HPT_ERR_INVALID);
    bad = o;
    bad.rollback = bad.band / 2;
    CHECK_STATUS(hpt_schedule_check(&bad), HPT_ERR_INVALID);
    bad = o;
    bad.correct_steps = 0;
    CHECK_STATUS(hpt_schedule_check(&bad), HPT_ERR_INVALID);
    bad = o;
    bad.check_weights = 7;
    CHECK_STATUS(hpt_schedule_check(&bad), HPT_ERR_INVALID);
    hpt_predictor_kind pk;
    CHECK_OK(hpt_predictor_parse("linear", &pk));
    CHECK(pk == HPT_PREDICTOR_LINEAR);
    CHECK_STATUS(hpt_predictor_parse("oracle", &pk), HPT_ERR_INVALID);
}

/* ---- trainer runs ---- */

static hpt_train_opts hybrid_opts(int predictor, int64_t steps) {
    hpt_train_opts o = t_train_opts(SHAPE, g_train, 4, 16, steps, 5);
    o.val = g_val;
    o.eval_every = 0;
    o.val_batches = 4;
    o.sched.kind = HPT_SCHEDULE_HYBRID;
    o.sched.warmup_steps = 5;
    o.sched.full_steps = 4;
    o.sched.max_predict_steps = 6;
    o.sched.confidence = 0.0f; /* predict after every round: the tests need phases */
    o.sched.correct_steps = 2;
    o.sched.predictor = predictor;
    return o;
}

/* (b) */
static void test_zero(hpt_mem *mem) {
    hpt_train_opts o = hybrid_opts(HPT_PREDICTOR_ZERO, 30);
    o.sched.check_every = 2;
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (!tr) return;
    hpt_model *m = hpt_trainer_model(tr);
    size_t n = hpt_model_num_params(m);
    float *start = malloc(n * sizeof(float));
    int64_t predict_steps = 0, same = 0;
    while (!hpt_trainer_done(tr)) {
        const hpt_schedule *s = hpt_trainer_schedule(tr);
        if (s->phase == HPT_PHASE_PREDICT && s->in_phase == 0)
            memcpy(start, hpt_model_params(m), n * sizeof(float));
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
        if (p.phase == HPT_PHASE_PREDICT) {
            predict_steps++;
            same += memcmp(start, hpt_model_params(m), n * sizeof(float)) == 0;
            CHECK(p.diverged == 0);
            CHECK(isnan(p.loss) || p.checked);
        }
    }
    CHECK_MSG(predict_steps >= 6 && same == predict_steps,
              "zero predictor: %lld predict steps, %lld left the weights bit-identical",
              (long long)predict_steps, (long long)same);
    fprintf(stderr, "  zero predictor: %lld predict steps in %lld phases, weights bit-identical "
            "after each\n", (long long)predict_steps, (long long)hpt_trainer_schedule(tr)->n_predict_phases);
    free(start);
    hpt_trainer_free(tr);
}

/* A run to the end: final validation loss; *rollbacks (all), *in_predict (those a check made in
 * PREDICT), *bitexact (of those, the ones that restored the phase's start bit for bit), *worst
 * (the highest check loss) when not NULL. */
static float run_val(hpt_mem *mem, const hpt_train_opts *o, int64_t *rollbacks, int64_t *in_predict,
                     int64_t *bitexact, float *worst) {
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, o, &tr));
    if (!tr) return NAN;
    hpt_model *m = hpt_trainer_model(tr);
    size_t n = hpt_model_num_params(m);
    float *start = malloc(n * sizeof(float));
    float val = NAN;
    if (rollbacks) *rollbacks = *in_predict = *bitexact = 0;
    if (worst) *worst = 0.0f;
    while (!hpt_trainer_done(tr)) {
        const hpt_schedule *s = hpt_trainer_schedule(tr);
        if (o->sched.kind == HPT_SCHEDULE_HYBRID && s->phase == HPT_PHASE_PREDICT && s->in_phase == 0)
            memcpy(start, hpt_model_params(m), n * sizeof(float));
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
        if (p.evaluated) val = p.val_loss;
        if (worst && p.checked && !(p.loss <= *worst)) *worst = p.loss; /* NaN counts as worst */
        if (rollbacks && p.diverged == 2) {
            (*rollbacks)++;
            /* in PREDICT the restore is the step's last act; in CORRECT a real update follows */
            if (p.phase == HPT_PHASE_PREDICT) {
                (*in_predict)++;
                *bitexact += memcmp(start, hpt_model_params(m), n * sizeof(float)) == 0;
            }
        }
    }
    free(start);
    hpt_trainer_free(tr);
    return val;
}

/* (c) */
static void test_garbage(hpt_mem *mem) {
    const int64_t steps = 80;
    hpt_train_opts full = hybrid_opts(HPT_PREDICTOR_ZERO, steps);
    full.sched.kind = HPT_SCHEDULE_FULL;
    float base = run_val(mem, &full, NULL, NULL, NULL, NULL);
    hpt_train_opts g = hybrid_opts(HPT_PREDICTOR_GARBAGE, steps);
    g.sched.check_every = 2;
    g.sched.max_predict_steps = 8;
    g.sched.confidence = 0.5f; /* as in use: a detected failure lowers the confidence */
    int64_t rb, inp, exact;
    float worst;
    float val = run_val(mem, &g, &rb, &inp, &exact, &worst);
    CHECK_MSG(inp >= 1 && exact == inp, "garbage with checks: %lld rollbacks in PREDICT, %lld "
              "bit-exact", (long long)inp, (long long)exact);
    CHECK_MSG(!(worst < logf(64.0f)), "the garbage was not garbage: worst check loss %g (uniform "
              "guessing: %g)", (double)worst, (double)logf(64.0f));
    CHECK_MSG(fabsf(val - base) < 0.05f * base, "garbage with checks: val %g vs full-only %g",
              (double)val, (double)base);
    fprintf(stderr, "  garbage predictor with checks every 2: worst check loss %.3f (uniform %.3f), "
            "%lld rollbacks by a check (all bit-identical to the phase's start), %lld in all; final "
            "val %.4f vs full-only %.4f\n", (double)worst, (double)logf(64.0f), (long long)inp,
            (long long)rb, (double)val, (double)base);
    g.sched.check_every = 0;
    g.sched.rollback = 0.1f; /* a training batch's loss: the bound is widened by twice its noise */
    float val0 = run_val(mem, &g, &rb, &inp, &exact, NULL);
    CHECK_MSG(rb >= 1, "garbage without checks: no rollback at CORRECT");
    CHECK_MSG(fabsf(val0 - base) < 0.05f * base, "garbage without checks: val %g vs full-only %g",
              (double)val0, (double)base);
    fprintf(stderr, "  garbage predictor without checks: %lld rollbacks at the first CORRECT step; "
            "final val %.4f vs full-only %.4f\n", (long long)rb, (double)val0, (double)base);
}

/* (g) the check losses of a run, by step (NaN where none ran) */
static int check_losses(hpt_mem *mem, int weights, int64_t steps, float *out) {
    hpt_train_opts o = hybrid_opts(HPT_PREDICTOR_ZERO, steps);
    o.sched.check_every = 1;
    o.sched.band = 100.0f; /* nothing a check measures changes the schedule */
    o.sched.rollback = 100.0f;
    o.sched.check_weights = weights;
    hpt_trainer *tr = NULL;
    int n = 0;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    while (tr && !hpt_trainer_done(tr)) {
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
        if (p.step < 1) break;
        out[p.step - 1] = p.checked ? p.loss : NAN;
        n += p.checked;
    }
    hpt_trainer_free(tr);
    return n;
}

/* (g) */
static void test_int8_checks(hpt_mem *mem) {
    enum { STEPS = 30 };
    float c32[STEPS], c8[STEPS];
    int n32 = check_losses(mem, HPT_WEIGHTS_F32, STEPS, c32);
    int n8 = check_losses(mem, HPT_WEIGHTS_Q8, STEPS, c8);
    int paired = 0, differ = 0;
    double worst = 0.0;
    for (int i = 0; i < STEPS; i++) {
        CHECK_MSG(isnan(c32[i]) == isnan(c8[i]), "step %d: a check in one run only", i + 1);
        if (isnan(c32[i]) || isnan(c8[i])) continue;
        double rel = fabs((double)c8[i] - (double)c32[i]) / (double)c32[i];
        worst = rel > worst ? rel : worst;
        paired++;
        differ += c8[i] != c32[i];
    }
    CHECK_MSG(paired >= 6 && paired == n32 && paired == n8, "%d checks paired (%d fp32, %d int8)",
              paired, n32, n8);
    CHECK_MSG(worst < 0.002 && differ == paired, "int8 checks: worst relative difference %.3g from "
              "the fp32 checks' losses (%d of %d differ)", worst, differ, paired);
    fprintf(stderr, "  int8 checks: %d checks on the same weights as fp32 checks, worst relative "
            "loss difference %.2e\n", paired, worst);
    /* garbage caught by int8 checks too */
    const int64_t steps = 80;
    hpt_train_opts full = hybrid_opts(HPT_PREDICTOR_ZERO, steps);
    full.sched.kind = HPT_SCHEDULE_FULL;
    float base = run_val(mem, &full, NULL, NULL, NULL, NULL);
    hpt_train_opts g = hybrid_opts(HPT_PREDICTOR_GARBAGE, steps);
    g.sched.check_every = 2;
    g.sched.max_predict_steps = 8;
    g.sched.confidence = 0.5f;
    g.sched.check_weights = HPT_WEIGHTS_Q8;
    int64_t rb, inp, exact;
    float worst_loss;
    float val = run_val(mem, &g, &rb, &inp, &exact, &worst_loss);
    CHECK_MSG(inp >= 1 && exact == inp, "garbage with int8 checks: %lld rollbacks in PREDICT, %lld "
              "bit-exact", (long long)inp, (long long)exact);
    CHECK_MSG(!(worst_loss < logf(64.0f)), "garbage with int8 checks: worst check loss %g",
              (double)worst_loss);
    CHECK_MSG(fabsf(val - base) < 0.05f * base, "garbage with int8 checks: val %g vs full-only %g",
              (double)val, (double)base);
    fprintf(stderr, "  garbage predictor with int8 checks every 2: worst check loss %.3f, %lld "
            "rollbacks by a check (bit-identical), %lld in all; final val %.4f vs full-only %.4f\n",
            (double)worst_loss, (long long)inp, (long long)rb, (double)val, (double)base);
}

/* (d) */
static int same_losses(const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return 0; /* NaN (no loss) bits too */
    return 1;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n);
    if (f) fclose(f);
}

static uint32_t file_version(const char *path) {
    uint32_t v = 0;
    FILE *f = fopen(path, "rb");
    if (f && fseek(f, 8, SEEK_SET) == 0 && fread(&v, 4, 1, f) != 1) v = 0;
    if (f) fclose(f);
    return v;
}

static void test_resume(hpt_mem *mem, int predictor) {
    enum { STEPS = 40 };
    char dir_a[512], dir_b[512], path[600];
    snprintf(dir_a, sizeof dir_a, "%s/res_%s_a", t_tmpdir(), hpt_predictor_name((hpt_predictor_kind)predictor));
    snprintf(dir_b, sizeof dir_b, "%s/res_%s_b", t_tmpdir(), hpt_predictor_name((hpt_predictor_kind)predictor));
    hpt_train_opts o = hybrid_opts(predictor, STEPS);
    o.sched.check_every = 3;
    o.eval_every = 10;
    /* where is the middle of a predict phase? (warmup 5, full 4: the first phase starts at 10) */
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (!tr) return;
    int64_t stop = 0;
    while (!hpt_trainer_done(tr) && !stop) {
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
        const hpt_schedule *s = hpt_trainer_schedule(tr);
        if (p.step > 15 && s->phase == HPT_PHASE_PREDICT && s->in_phase >= 2) stop = p.step;
    }
    hpt_trainer_free(tr);
    CHECK_MSG(stop > 0, "%s: no predict phase to stop in", hpt_predictor_name((hpt_predictor_kind)predictor));
    if (!stop) return;
    size_t n = 0;
    {
        hpt_model_config cfg;
        CHECK_OK(hpt_model_config_parse(SHAPE, &cfg));
        n = hpt_model_config_num_params(&cfg);
    }
    float la[STEPS], lb[STEPS], va[STEPS], vb[STEPS];
    float *pa = calloc(n, sizeof(float)), *pb = calloc(n, sizeof(float));
    for (int i = 0; i < STEPS; i++) la[i] = lb[i] = va[i] = vb[i] = 0.0f;
    o.save_dir = dir_a;
    t_train_run(mem, &o, 0, la, va, pa);
    o.save_dir = dir_b;
    t_train_run(mem, &o, stop, lb, vb, NULL);
    t_state_file(path, sizeof path, dir_b);
    CHECK_MSG(file_version(path) == 3, "a hybrid state is version 3 (got %u)", file_version(path));
    { /* it loads without the trainer too (sections dropped) */
        hpt_model *m = NULL;
        hpt_optim *op = NULL;
        hpt_adamw_opts ao;
        hpt_train_pos pos;
        CHECK_OK(hpt_state_load(path, mem, &m, &op, &ao, &pos));
        CHECK(pos.step == stop);
        hpt_optim_free(op);
        hpt_model_free(m);
    }
    if (predictor == HPT_PREDICTOR_ADAM) { /* bad sections: corrupt, truncated, other predictor */
        char bad[600];
        snprintf(bad, sizeof bad, "%s/bad", t_tmpdir());
        FILE *f = fopen(path, "rb");
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, 0, SEEK_SET);
        unsigned char *b = malloc((size_t)size);
        CHECK(fread(b, 1, (size_t)size, f) == (size_t)size);
        fclose(f);
        hpt_model *m = NULL;
        hpt_optim *op = NULL;
        hpt_adamw_opts ao;
        hpt_train_pos pos;
        char bad_state[700];
        snprintf(bad_state, sizeof bad_state, "%s/state.bin", bad);
        hpt_train_opts ob = o;
        ob.resume = bad;
        ob.save_dir = NULL;
        (void)mkdir(bad, 0755);
        b[size - 100] ^= 0x10; /* inside the last section (the snapshot) */
        spit(bad_state, b, (size_t)size);
        CHECK_STATUS(hpt_state_load(bad_state, mem, &m, &op, &ao, &pos), HPT_ERR_CHECKSUM);
        b[size - 100] ^= 0x10;
        spit(bad_state, b, (size_t)size - 50);
        CHECK_STATUS(hpt_state_load(bad_state, mem, &m, &op, &ao, &pos), HPT_ERR_FORMAT);
        spit(bad_state, b, (size_t)size);
        hpt_trainer *t2 = NULL;
        ob.sched.predictor = HPT_PREDICTOR_LINEAR;
        CHECK_STATUS(hpt_trainer_create(mem, &ob, &t2), HPT_ERR_INVALID);
        CHECK(strstr(hpt_last_error(), "--predictor adam") != NULL);
        free(b);
    }
    o.resume = dir_b;
    t_train_run(mem, &o, 0, lb, vb, pb);
    CHECK_MSG(memcmp(pa, pb, n * sizeof(float)) == 0, "%s: final weights differ after a resume at "
              "step %lld (mid-predict)", hpt_predictor_name((hpt_predictor_kind)predictor), (long long)stop);
    CHECK_MSG(same_losses(la, lb, STEPS) && same_losses(va, vb, STEPS), "%s: losses differ after "
              "resume", hpt_predictor_name((hpt_predictor_kind)predictor));
    char sa[600], sb[600];
    t_state_file(sa, sizeof sa, dir_a);
    t_state_file(sb, sizeof sb, dir_b);
    FILE *fa = fopen(sa, "rb"), *fb = fopen(sb, "rb");
    int equal = fa && fb;
    while (equal) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) equal = 0;
        if (ca == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    CHECK_MSG(equal, "%s: final state files differ", hpt_predictor_name((hpt_predictor_kind)predictor));
    fprintf(stderr, "  %s predictor: resumed at step %lld (inside a predict phase): weights, losses "
            "and the final state file bit-identical\n", hpt_predictor_name((hpt_predictor_kind)predictor),
            (long long)stop);
    /* a full-only state is version 3 with no sections */
    hpt_train_opts f = hybrid_opts(HPT_PREDICTOR_ADAM, 3);
    f.sched.kind = HPT_SCHEDULE_FULL;
    snprintf(dir_a, sizeof dir_a, "%s/res_full", t_tmpdir());
    f.save_dir = dir_a;
    t_train_run(mem, &f, 0, la, NULL, NULL);
    t_state_file(path, sizeof path, dir_a);
    CHECK_MSG(file_version(path) == 3, "a full-only state is version 3 (got %u)", file_version(path));
    free(pa);
    free(pb);
}

/* (e) The device tier's highest accounted bytes over the events tagged with a phase. */
static uint64_t phase_peak(const hpt_mem_event *ev, size_t n, int phase) {
    uint64_t mx = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].phase == phase && ev[i].tier == HPT_TIER_DEVICE && ev[i].kind != HPT_EV_TRANSFER &&
            ev[i].tier_live_bytes > mx)
            mx = ev[i].tier_live_bytes;
    return mx;
}

static void test_memory(hpt_mem *mem, int predictor) {
    hpt_train_opts o = hybrid_opts(predictor, 24);
    o.sched.check_every = 2;
    o.eval_every = 3; /* evaluations land in predict phases too: their arena is not PREDICT's */
    hpt_mem_record(mem, 1);
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (!tr) return;
    int64_t host_optim_steps = 0, predict_steps = 0;
    while (!hpt_trainer_done(tr)) {
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
        if (p.phase == HPT_PHASE_PREDICT) {
            hpt_mem_stats st;
            hpt_mem_get_stats(mem, &st);
            predict_steps++;
            host_optim_steps += st.live_bytes[HPT_TIER_HOST][HPT_CAT_OPTIM] > 0;
            CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_GRADS] == 0);
        }
    }
    hpt_model *m = hpt_trainer_model(tr);
    const hpt_model_config *cfg = hpt_model_get_config(m);
    uint64_t grads = hpt_model_num_params(m) * sizeof(float);
    uint64_t optim = hpt_optim_state_bytes(cfg, hpt_trainer_optim_opts(tr));
    uint64_t arena = hpt_model_activation_bytes(cfg, o.B, o.T, &o.act);
    size_t n;
    const hpt_mem_event *ev = hpt_mem_events(mem, &n);
    /* ordinary steps allocate in WARMUP (the first forward) and CORRECT (back from PREDICT) */
    uint64_t full = HPT_MAX3(phase_peak(ev, n, HPT_PHASE_WARMUP), phase_peak(ev, n, HPT_PHASE_FULL),
                             phase_peak(ev, n, HPT_PHASE_CORRECT));
    uint64_t pred = phase_peak(ev, n, HPT_PHASE_PREDICT);
    /* the predict phase's arena: one sequence for the checks */
    uint64_t check_arena = hpt_model_activation_bytes(cfg, 1, o.T, &o.act);
    uint64_t saved = grads + arena - check_arena + (predictor == HPT_PREDICTOR_LINEAR ? optim : 0);
    if (predictor == HPT_PREDICTOR_LINEAR) saved += grads; /* s0 of the fit is freed too */
    CHECK_MSG(pred > 0 && pred + saved <= full, "%s: predict peak %llu, full peak %llu, expected at "
              "least %llu less", hpt_predictor_name((hpt_predictor_kind)predictor),
              (unsigned long long)pred, (unsigned long long)full, (unsigned long long)saved);
    CHECK(host_optim_steps == (predictor == HPT_PREDICTOR_LINEAR ? predict_steps : 0));
    hpt_profile_summary s;
    CHECK_OK(hpt_profile_summarize(ev, n, 25.0, &s));
    CHECK(s.phase[HPT_PHASE_PREDICT].max_bytes == pred);
    CHECK(HPT_MAX3(s.phase[HPT_PHASE_WARMUP].max_bytes, s.phase[HPT_PHASE_FULL].max_bytes,
                   s.phase[HPT_PHASE_CORRECT].max_bytes) == full);
    fprintf(stderr, "  %s predictor: device peak PREDICT %.1f KiB vs FULL %.1f KiB (%.0f%%); "
            "optimizer state on the host in %lld of %lld predict steps\n",
            hpt_predictor_name((hpt_predictor_kind)predictor), (double)pred / 1024.0,
            (double)full / 1024.0, 100.0 * (double)pred / (double)full, (long long)host_optim_steps,
            (long long)predict_steps);
    hpt_profile_summary_free(&s);
    hpt_trainer_free(tr);
    hpt_mem_record(mem, 0);
}

/* (f) */
static int k_nonzero(const float *x, size_t n) {
    size_t nz = 0;
    for (size_t i = 0; i < n; i++) nz += x[i] != 0.0f;
    return nz > n / 2;
}

static void test_formulas(hpt_mem *mem) {
    hpt_model_config cfg;
    char shape[T_SHAPE_MAX];
    /* V 256: t_sgd_steps' tokens */
    CHECK_OK(hpt_model_config_parse(t_arch_shape(g_arch, shape, 2, 32, 4, 256, 16, 0), &cfg));
    hpt_model *a = NULL, *b = NULL;
    hpt_optim *oa = NULL, *ob = NULL;
    hpt_adamw_opts ao = hpt_adamw_defaults();
    CHECK_OK(hpt_model_create_config(mem, &cfg, &a));
    CHECK_OK(hpt_model_create_config(mem, &cfg, &b));
    if (!a || !b) return;
    CHECK_OK(hpt_optim_create(mem, a, &ao, &oa));
    CHECK_OK(hpt_optim_create(mem, b, &ao, &ob));
    if (!oa || !ob) return;
    hpt_model_init_random(a, 3);
    size_t n = hpt_model_num_params(a);
    float loss[3];
    for (int i = 0; i < 3; i++) { /* real moments: three AdamW steps on random tokens */
        t_sgd_steps(a, 2, 16, 1, loss);
        CHECK_OK(hpt_optim_step(oa, 1e-3f, 0.0f, NULL));
    }
    memcpy(hpt_model_params(b), hpt_model_params(a), n * sizeof(float));
    memcpy(hpt_optim_m(ob), hpt_optim_m(oa), n * sizeof(float));
    memcpy(hpt_optim_v(ob), hpt_optim_v(oa), n * sizeof(float));
    hpt_optim_set_t(ob, hpt_optim_get_t(oa));
    float *p0 = malloc(n * sizeof(float)), *ua = malloc(n * sizeof(float)), *ub = malloc(n * sizeof(float));
    memcpy(p0, hpt_model_params(a), n * sizeof(float));
    weight_predictor pr;
    CHECK_OK(predictor_init(&pr, mem, HPT_PREDICTOR_ADAM, n, 0.9, 1));
    const float lrs[3] = {1e-3f, 8e-4f, 6e-4f};
    for (int k = 0; k < 3; k++) {
        double un;
        CHECK_OK(predictor_apply(&pr, a, oa, k, 10 + k, lrs[k], &un));
        memcpy(hpt_model_grads(b), hpt_optim_m(ob), n * sizeof(float)); /* g = m */
        CHECK_OK(hpt_optim_step(ob, lrs[k], 0.0f, NULL));
        CHECK(un > 0.0);
    }
    for (size_t i = 0; i < n; i++) { /* the updates, in double: the weights' own size hides them */
        ua[i] = (float)((double)hpt_model_params(a)[i] - (double)p0[i]);
        ub[i] = (float)((double)hpt_model_params(b)[i] - (double)p0[i]);
    }
    double err = t_rel_err(ua, ub, n);
    CHECK_MSG(err < 1e-5, "adam predictor vs AdamW with g = m: %g", err);
    free(p0);
    free(ua);
    free(ub);
    CHECK(hpt_optim_get_t(oa) == 3); /* the predictor does not count steps */
    CHECK(k_nonzero(hpt_optim_m(oa), n));
    fprintf(stderr, "  adam predictor: 3 predicted updates vs 3 AdamW steps with g = m: updates "
            "differ by %.2e (norm-wise)\n", err);
    predictor_free(&pr);
    /* linear: w_t = w0 + t * slope, observed 8 times */
    CHECK_OK(predictor_init(&pr, mem, HPT_PREDICTOR_LINEAR, n, 0.9, 1));
    float *w = hpt_model_params(b), *w0 = malloc(n * sizeof(float)), *slope = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        w0[i] = hpt_model_params(a)[i];
        slope[i] = 1e-3f * (float)((int)(i % 7) - 3);
    }
    for (int t = 0; t < 8; t++) {
        for (size_t i = 0; i < n; i++) w[i] = w0[i] + (float)t * slope[i];
        CHECK_OK(predictor_observe(&pr, w, 1e-3f));
    }
    predictor_begin(&pr);
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)pr.s1[i] - (double)slope[i];
        num += e * e;
        den += (double)slope[i] * (double)slope[i];
    }
    CHECK_MSG(sqrt(num / den) < 1e-4, "linear fit slope error %g", sqrt(num / den));
    double un;
    for (size_t i = 0; i < n; i++) w[i] = w0[i];
    CHECK_OK(predictor_apply(&pr, b, ob, 0, 20, 1e-3f, &un));
    double d = 0.0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)w[i] - (double)w0[i] - (double)slope[i]));
    CHECK_MSG(d < 1e-5, "linear prediction moved by %g off the slope", d);
    fprintf(stderr, "  linear predictor: slope of an exact linear trajectory recovered to %.1e\n",
            sqrt(num / den));
    predictor_free(&pr);
    free(w0);
    free(slope);
    hpt_optim_free(oa);
    hpt_optim_free(ob);
    hpt_model_free(a);
    hpt_model_free(b);
}

int main(int argc, char **argv) {
    g_arch = t_arch_arg(argc, argv, "test_schedule");
    if (!g_arch) return 2;
    t_arch_shape(g_arch, SHAPE, 2, 32, 4, 64, 16, 0);
    hpt_set_threads(2);
    make_shards();
    if (t_arch_first(g_arch)) test_transitions();
    hpt_mem *mem;
    if (hpt_mem_create(&mem) != HPT_OK) return 1;
    test_formulas(mem);
    test_zero(mem);
    test_garbage(mem);
    test_int8_checks(mem);
    test_resume(mem, HPT_PREDICTOR_ADAM);
    test_resume(mem, HPT_PREDICTOR_LINEAR);
    test_memory(mem, HPT_PREDICTOR_ADAM);
    test_memory(mem, HPT_PREDICTOR_LINEAR);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        for (int c = 0; c < HPT_CAT_COUNT; c++) CHECK(st.live_bytes[t][c] == 0);
    hpt_mem_destroy(mem);
    return t_done(t_arch_label(g_arch, "test_schedule"));
}
