/* schedule.c: the hybrid schedule's phase controller (the state diagram is in hptrain.h, above
 * hpt_schedule_opts). Pure: a function of its options, its state and each step's observation,
 * so every transition is table-testable and the state checkpoints as plain data.
 * Invariants: phase is WARMUP, FULL, PREDICT or CORRECT (FULL forever in a full-only run);
 * a predict phase lasts 1 <= horizon <= max_predict_steps steps unless it ends early; it starts
 * only with at least horizon + correct_steps steps left, so a run never ends uncorrected;
 * 0 < cap <= 1. */
#include "core/core.h"
#include "testing.h"

#include <math.h>
#include <string.h>

static const char *const k_pred_names[HPT_PREDICTOR_COUNT] = {"adam", "linear", "zero", "garbage"};

const char *hpt_predictor_name(hpt_predictor_kind k) {
    return (unsigned)k < HPT_PREDICTOR_COUNT ? k_pred_names[k] : "?";
}

/* The public parse knows the user's predictors only; the testing ones (src/testing.h) are
 * reachable from tests, never from a flag. */
static hpt_status predictor_parse(const char *name, int n, hpt_predictor_kind *out) {
    for (int k = 0; k < n; k++)
        if (!strcmp(name, k_pred_names[k])) {
            *out = (hpt_predictor_kind)k;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "unknown predictor '%s' (adam or linear)", name);
}

hpt_status hpt_predictor_parse(const char *name, hpt_predictor_kind *out) {
    return predictor_parse(name, HPT_PREDICTOR_LINEAR + 1, out);
}

hpt_status hpt_predictor_parse_testing(const char *name, hpt_predictor_kind *out) {
    return predictor_parse(name, HPT_PREDICTOR_COUNT, out);
}

hpt_schedule_opts hpt_schedule_defaults(void) {
    hpt_schedule_opts o = {.kind = HPT_SCHEDULE_FULL, .warmup_steps = 50, .full_steps = 20,
                           .max_predict_steps = 20, .confidence = 0.5f, .correct_steps = 2,
                           .predictor = HPT_PREDICTOR_ADAM, .check_every = 0, .band = 0.05f,
                           .rollback = 0.2f, .fit_decay = 0.9f};
    return o;
}

hpt_status hpt_schedule_check(const hpt_schedule_opts *o) {
    if (o->kind != HPT_SCHEDULE_FULL && o->kind != HPT_SCHEDULE_HYBRID)
        return hpt_fail(HPT_ERR_INVALID, "unknown schedule %d", o->kind);
    if (o->kind == HPT_SCHEDULE_FULL) return HPT_OK;
    if (o->warmup_steps < 0 || o->full_steps < 1 || o->max_predict_steps < 1 ||
        o->correct_steps < 1 || o->check_every < 0)
        return hpt_fail(HPT_ERR_INVALID, "hybrid schedule: warmup (%lld) and check interval (%lld) "
                        "must be >= 0, full (%lld), max predict (%lld) and correct (%lld) steps >= 1",
                        (long long)o->warmup_steps, (long long)o->check_every,
                        (long long)o->full_steps, (long long)o->max_predict_steps,
                        (long long)o->correct_steps);
    if (!(o->confidence >= 0.0f && o->confidence <= 1.0f))
        return hpt_fail(HPT_ERR_INVALID, "confidence threshold %g must be in [0, 1]", (double)o->confidence);
    if (!(o->band > 0.0f) || !(o->rollback >= o->band) || !isfinite(o->rollback))
        return hpt_fail(HPT_ERR_INVALID, "band %g must be > 0 and the rollback bound %g >= it",
                        (double)o->band, (double)o->rollback);
    if (!(o->fit_decay > 0.0f && o->fit_decay < 1.0f))
        return hpt_fail(HPT_ERR_INVALID, "fit decay %g must be in (0, 1)", (double)o->fit_decay);
    if ((unsigned)o->predictor >= HPT_PREDICTOR_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "unknown predictor %d", o->predictor);
    if (o->check_weights != HPT_WEIGHTS_F32 && o->check_weights != HPT_WEIGHTS_Q8)
        return hpt_fail(HPT_ERR_INVALID, "unknown check weights %d (fp32 or int8)", o->check_weights);
    return HPT_OK;
}

void hpt_schedule_init(hpt_schedule *s, const hpt_schedule_opts *o) {
    memset(s, 0, sizeof *s);
    s->cap = 1.0f;
    s->phase = o->kind == HPT_SCHEDULE_HYBRID && o->warmup_steps > 0 ? HPT_PHASE_WARMUP : HPT_PHASE_FULL;
}

int64_t hpt_schedule_horizon(const hpt_schedule_opts *o, float confidence, float cap) {
    double thr = (double)o->confidence;
    double r = thr < 1.0 ? ((double)confidence - thr) / (1.0 - thr) : 1.0;
    if (r < 0.0) r = 0.0;
    if (r > 1.0) r = 1.0;
    int64_t h = (int64_t)floor((double)o->max_predict_steps * (double)cap * r + 0.5);
    return h < 1 ? 1 : h > o->max_predict_steps ? o->max_predict_steps : h;
}

static void enter(hpt_schedule *s, int phase) {
    s->phase = phase;
    s->in_phase = 0;
    s->horizon = 0;
}

/* After a round of FULL or CORRECT: a predict phase if confident and it fits, else FULL. */
static void decide(hpt_schedule *s, const hpt_schedule_opts *o, const hpt_schedule_obs *ob) {
    if (ob->confidence >= o->confidence) {
        int64_t h = hpt_schedule_horizon(o, ob->confidence, s->cap);
        int64_t room = ob->steps_left - o->correct_steps;
        if (h > room) h = room;
        if (h >= 1) {
            enter(s, HPT_PHASE_PREDICT);
            s->horizon = h;
            s->n_predict_phases++;
            return;
        }
    }
    enter(s, HPT_PHASE_FULL);
}

static void shrink(hpt_schedule *s, const hpt_schedule_opts *o) {
    float floor_cap = 1.0f / (float)o->max_predict_steps;
    s->cap = s->cap * 0.5f < floor_cap ? floor_cap : s->cap * 0.5f;
}

void hpt_schedule_advance(hpt_schedule *s, const hpt_schedule_opts *o, const hpt_schedule_obs *ob) {
    if (o->kind != HPT_SCHEDULE_HYBRID) return; /* FULL forever */
    s->in_phase++;
    switch (s->phase) {
    case HPT_PHASE_WARMUP:
        if (s->in_phase >= o->warmup_steps) enter(s, HPT_PHASE_FULL);
        break;
    case HPT_PHASE_FULL:
        if (s->in_phase >= o->full_steps) decide(s, o, ob);
        break;
    case HPT_PHASE_PREDICT:
        s->n_predict_steps++;
        if (ob->diverged) {
            if (ob->diverged == 2) s->n_rollback++;
            else s->n_early++;
            shrink(s, o);
            enter(s, HPT_PHASE_CORRECT);
            s->clean = 0;
        } else if (s->in_phase >= s->horizon) {
            enter(s, HPT_PHASE_CORRECT);
            s->clean = 1;
        }
        break;
    case HPT_PHASE_CORRECT:
        if (s->in_phase == 1) { /* the step that measured the prediction's error */
            if (ob->diverged == 2) s->n_rollback++;
            if (ob->diverged) shrink(s, o);
            else if (s->clean) s->cap = s->cap * 2.0f > 1.0f ? 1.0f : s->cap * 2.0f;
            s->clean = 0;
        }
        if (s->in_phase >= o->correct_steps) decide(s, o, ob);
        break;
    default:
        break;
    }
}
