/* schedule.c: the hybrid schedule's phase controller (the state diagram is in
 * include/hptrain/schedule.h, above hpt_schedule_opts; the options' defaults, names and check
 * are the plan's, src/core/choices.c). Pure: a function of its options, its state and each
 * step's observation, so every transition is table-testable and the state checkpoints as plain
 * data.
 * Invariants: phase is WARMUP, FULL, PREDICT or CORRECT (FULL forever in a full-only run);
 * a predict phase lasts 1 <= horizon <= max_predict_steps steps unless it ends early; it starts
 * only with at least horizon + correct_steps steps left, so a run never ends uncorrected;
 * 0 < cap <= 1. The jump predictor (docs/predict.md, "Jumps"): FULL -> PREDICT (one step, the
 * jump) -> CORRECT -> FULL, until 2 jumps in a row gain less than jump_min_gain; then FULL. */
#include "core/core.h"
#include "train/train_int.h"

#include <math.h>
#include <string.h>

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

int64_t schedule_full_len(const hpt_schedule_opts *o) {
    if (o->predictor != HPT_PREDICTOR_JUMP) return o->full_steps;
    int64_t span = (o->jump_snapshots - 1) * o->jump_stride + 1;
    return o->full_steps > span ? o->full_steps : span;
}

static void enter(hpt_schedule *s, int phase) {
    s->phase = phase;
    s->in_phase = 0;
    s->horizon = 0;
}

/* After a round of FULL or CORRECT: a predict phase if confident and it fits, else FULL.
 * The jump predictor: a jump (a predict phase of one step) after each round of FULL while the
 * controller has not stopped, whatever the confidence; after CORRECT, FULL (the snapshots of
 * the next jump). */
static void decide(hpt_schedule *s, const hpt_schedule_opts *o, const hpt_schedule_obs *ob) {
    if (o->predictor == HPT_PREDICTOR_JUMP) {
        if (s->phase == HPT_PHASE_FULL && !s->stopped && ob->steps_left - o->correct_steps >= 1) {
            enter(s, HPT_PHASE_PREDICT);
            s->horizon = 1;
            s->n_predict_phases++;
            return;
        }
        enter(s, HPT_PHASE_FULL);
        return;
    }
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
        if (s->in_phase >= schedule_full_len(o)) decide(s, o, ob);
        break;
    case HPT_PHASE_PREDICT:
        s->n_predict_steps++;
        if (o->predictor == HPT_PREDICTOR_JUMP) { /* one step; stop after 2 poor jumps in a row */
            if (ob->diverged == 2) s->n_rollback++;
            s->n_poor = ob->jump_gain < (double)o->jump_min_gain ? s->n_poor + 1 : 0;
            if (s->n_poor >= 2) s->stopped = 1;
            enter(s, HPT_PHASE_CORRECT);
            s->clean = 0;
        } else if (ob->diverged) {
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
