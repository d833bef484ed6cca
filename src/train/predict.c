/* predict.c: the hybrid schedule's per-parameter predictors and its loss-dynamics model: adam
 * (AdamW's own update with the gradient held at its running estimate m; reads m and v, changes
 * neither), linear (each weight's weighted least-squares slope over the real steps since the
 * last predict phase, scaled by the schedule's learning rate), and for tests zero (nothing) and
 * garbage (fresh noise). The formulas: docs/predict.md, "Predictors".
 * Invariants: the per-parameter loops are the backend's ops (fit_observe, predict_adam, ...),
 * each partitioned statically with every norm summed in fixed chunks, so a phase gives the same
 * bits for a given thread count, and after a resume. */
#include "core/core.h"
#include "kernels/backend.h"
#include "testing.h"
#include "model/model.h"
#include "train/train_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static hpt_status alloc_sums(weight_predictor *pr) {
    size_t bytes = pr->n * sizeof(float);
    if (!pr->s0) {
        hpt_mem_set_name(pr->mem, "predictor sum w");
        HPT_CHECK(pr->be->alloc(pr->mem, HPT_TIER_DEVICE, HPT_CAT_OPTIM, bytes, (void **)&pr->s0));
    }
    if (!pr->s1) {
        hpt_mem_set_name(pr->mem, "predictor sum a*w");
        HPT_CHECK(pr->be->alloc(pr->mem, HPT_TIER_DEVICE, HPT_CAT_OPTIM, bytes, (void **)&pr->s1));
    }
    return HPT_OK;
}

static void free_buf(weight_predictor *pr, float **p) {
    pr->be->free(pr->mem, HPT_TIER_DEVICE, HPT_CAT_OPTIM, *p, pr->n * sizeof(float));
    *p = NULL;
}

hpt_status predictor_init(weight_predictor *pr, hpt_mem *mem, int kind, size_t n, double decay,
                          uint64_t seed) {
    memset(pr, 0, sizeof *pr);
    pr->mem = mem;
    pr->be = hpt_backend_of(mem);
    pr->kind = kind;
    pr->n = n;
    pr->decay = decay;
    pr->seed = seed;
    if (kind == HPT_PREDICTOR_LINEAR) HPT_CHECK(alloc_sums(pr));
    return HPT_OK;
}

void predictor_free(weight_predictor *pr) {
    if (!pr->mem) return;
    free_buf(pr, &pr->s0);
    free_buf(pr, &pr->s1);
}

void predictor_drop_s0(weight_predictor *pr) { free_buf(pr, &pr->s0); }

uint64_t predictor_full_bytes(int kind, size_t n) {
    return kind == HPT_PREDICTOR_LINEAR ? 2 * (uint64_t)n * sizeof(float) : 0;
}

uint64_t predictor_predict_bytes(int kind, size_t n) {
    return kind == HPT_PREDICTOR_LINEAR ? (uint64_t)n * sizeof(float) : 0;
}

int predictor_reads_moments(int kind) { return kind == HPT_PREDICTOR_ADAM; }

hpt_status predictor_observe(weight_predictor *pr, const float *params, float lr) {
    pr->lr_fit = lr;
    if (pr->kind != HPT_PREDICTOR_LINEAR) return HPT_OK;
    HPT_CHECK(alloc_sums(pr)); /* present unless a predict phase just ended without its reset */
    /* every sample ages by one step (decay, a -> a+1), then w joins with age 0:
     * s1' = d (s1 + s0), s0' = d s0 + w */
    pr->be->fit_observe(pr->s0, pr->s1, params, pr->n, (float)pr->decay);
    double D = pr->decay;
    pr->A2 = D * (pr->A2 + 2.0 * pr->A1 + pr->W);
    pr->A1 = D * (pr->A1 + pr->W);
    pr->W = D * pr->W + 1.0;
    pr->n_samples++;
    return HPT_OK;
}

void predictor_begin(weight_predictor *pr) {
    if (pr->kind != HPT_PREDICTOR_LINEAR) return;
    /* slope in age: beta = (W s1 - A1 s0) / (W A2 - A1^2); velocity forward in time = -beta */
    double den = pr->W * pr->A2 - pr->A1 * pr->A1;
    float cw = 0.0f, ca = 0.0f;
    if (pr->n_samples >= 2 && den > 1e-12) {
        cw = (float)(-pr->W / den);
        ca = (float)(pr->A1 / den);
    }
    pr->be->fit_velocity(pr->s1, pr->s0, pr->n, cw, ca);
    free_buf(pr, &pr->s0);
}

hpt_status predictor_end(weight_predictor *pr) {
    if (pr->kind != HPT_PREDICTOR_LINEAR) return HPT_OK;
    HPT_CHECK(alloc_sums(pr));
    pr->be->memset(pr->s0, 0, pr->n * sizeof(float));
    pr->be->memset(pr->s1, 0, pr->n * sizeof(float));
    pr->W = pr->A1 = pr->A2 = 0.0;
    pr->n_samples = 0;
    return HPT_OK;
}

hpt_status predictor_apply(weight_predictor *pr, hpt_model *model, const hpt_optim *opt, int64_t k,
                           int64_t step, float lr, double *update_norm_out) {
    *update_norm_out = 0.0;
    float *p = hpt_model_params(model);
    const size_t n = pr->n;
    double ss = 0.0;
    switch (pr->kind) { /* an int: the testing predictors are not in the public enum */
    case HPT_PREDICTOR_ADAM: {
        const float *m = hpt_optim_m(opt), *v = hpt_optim_v(opt);
        if (!m || !v)
            return hpt_fail(HPT_ERR_UNSUPPORTED, "the adam predictor reads AdamW's 32-bit moments "
                            "(use --optimizer adamw --state-bits 32, or --predictor linear)");
        const hpt_adamw_opts *o = hpt_optim_get_opts(opt);
        double t = (double)hpt_optim_get_t(opt) + (double)k + 1.0;
        float b2k = (float)pow((double)o->beta2, (double)k + 1.0);
        float bc1 = (float)(1.0 - pow((double)o->beta1, t));
        float bc2 = (float)(1.0 - pow((double)o->beta2, t));
        const hpt_tensor_table *ts = model_table(model); /* checkpoint order: p, m, v */
        size_t off = 0;
        for (int i = 0; i < ts->n; i++) {
            const hpt_tensor_desc *d = &ts->t[i];
            size_t numel = hpt_tensor_numel(d);
            float wd = o->decay_all || d->is_matrix ? o->weight_decay : 0.0f;
            ss += pr->be->predict_adam(p + off, m + off, v + off, numel, lr, wd, b2k, bc1, bc2,
                                       o->eps);
            off += numel;
        }
        break;
    }
    case HPT_PREDICTOR_LINEAR: {
        if (!pr->s1) return hpt_fail(HPT_ERR_INVALID, "the linear predictor has no velocities");
        float scale = pr->lr_fit > 0.0f ? lr / pr->lr_fit : 1.0f;
        ss += pr->be->predict_linear(p, pr->s1, n, scale);
        break;
    }
    case HPT_PREDICTOR_ZERO:
        break;
    case HPT_PREDICTOR_GARBAGE: {
        ss += pr->be->add_normal(p, n, pr->seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(step + 1)),
                                 0.1f);
        break;
    }
    case HPT_PREDICTOR_JUMP: /* src/train/jump.c: the trainer jumps, not per step */
    case HPT_PREDICTOR_COUNT:
        break;
    }
    *update_norm_out = sqrt(ss);
    return HPT_OK;
}

double predictor_real_update_norm(const hpt_optim *opt, size_t n, float lr, float grad_norm) {
    const float *m = hpt_optim_m(opt), *v = hpt_optim_v(opt);
    if (!m || !v) return (double)lr * (double)grad_norm;
    const hpt_adamw_opts *o = hpt_optim_get_opts(opt);
    double t = (double)hpt_optim_get_t(opt);
    float bc1 = (float)(1.0 - pow((double)o->beta1, t));
    float bc2 = (float)(1.0 - pow((double)o->beta2, t));
    /* no predictor object here: the moments are the CPU backend's, as the optimizer's */
    return (double)lr * sqrt(hpt_backend_cpu()->adam_step_sumsq(m, v, n, bc1, bc2, o->eps));
}

void predictor_get_scalars(const weight_predictor *pr, predictor_scalars *out) {
    memset(out, 0, sizeof *out);
    out->W = pr->W;
    out->A1 = pr->A1;
    out->A2 = pr->A2;
    out->n_samples = pr->n_samples;
    out->lr_fit = pr->lr_fit;
    out->velocity = pr->s1 && !pr->s0;
}

void predictor_set_scalars(weight_predictor *pr, const predictor_scalars *in) {
    pr->W = in->W;
    pr->A1 = in->A1;
    pr->A2 = in->A2;
    pr->n_samples = in->n_samples;
    pr->lr_fit = in->lr_fit;
}

/* ---- the loss-dynamics model ---- */

#define LM_EMA 0.9      /* the smoothed loss and gradient norm */
#define LM_FIT 0.95     /* the line's sample weights */
#define LM_ERR 0.9      /* the error's EMA */
#define LM_FORGET 0.97  /* phase_err's decay per real step: old phases' errors fade */

void lossmodel_init(lossmodel *lm) { memset(lm, 0, sizeof *lm); }

/* The line's predicted change of the smoothed loss for a step with feature x: through the
 * origin (no update, no change), b = sum(x dy) / sum(x^2). */
static double line(const lossmodel *lm, double x) {
    return lm->sxx > 0.0 ? lm->sxy / lm->sxx * x : 0.0;
}

double lossmodel_next(const lossmodel *lm) {
    double d = line(lm, lm->prev_x);
    /* an EMA of a line lags it by LM_EMA / (1 - LM_EMA) steps */
    return lm->lbar + (LM_EMA / (1.0 - LM_EMA) + 1.0) * d;
}

void lossmodel_observe(lossmodel *lm, double loss, double grad_norm, double update_norm,
                       int after_predict) {
    if (lm->n > 0) {
        double pred = after_predict ? lm->pred : lossmodel_next(lm);
        double e = fabs(loss - pred) / fmax(fabs(pred), 1e-6);
        lm->noise = lm->n < 2 && !after_predict ? e : LM_ERR * lm->noise + (1.0 - LM_ERR) * e;
        if (!after_predict) { /* the smoothed loss's change against the line's (batch noise
                               * enters 1 - LM_EMA times); a predict phase's error is the
                               * trainer's to report (lossmodel_phase_error) */
            double te = fabs((1.0 - LM_EMA) * (loss - lm->lbar) - line(lm, lm->prev_x)) /
                        fmax(fabs(lm->lbar), 1e-6);
            lm->err = lm->n < 2 ? te : LM_ERR * lm->err + (1.0 - LM_ERR) * te;
        }
    }
    lm->phase_err *= LM_FORGET;
    lm->gbar = lm->n > 0 ? LM_EMA * lm->gbar + (1.0 - LM_EMA) * grad_norm : grad_norm;
    if (lm->n == 0 || after_predict) {
        lm->lbar = loss; /* the level restarts: the smoothed loss spans no predict phase */
    } else {
        double nb = LM_EMA * lm->lbar + (1.0 - LM_EMA) * loss;
        double dy = nb - lm->lbar, x = lm->prev_x;
        lm->sxx = LM_FIT * lm->sxx + x * x;
        lm->sxy = LM_FIT * lm->sxy + x * dy;
        lm->lbar = nb;
    }
    lm->prev_x = lm->gbar * update_norm;
    lm->n += 1.0;
}

void lossmodel_phase_error(lossmodel *lm, double excess) {
    double e = isfinite(excess) ? fmin(fabs(excess), 1.0) : 1.0;
    lm->phase_err = 0.5 * lm->phase_err + 0.5 * e;
}

double lossmodel_confidence(const lossmodel *lm, double band) {
    if (lm->n < 3.0) return 0.0;
    double c = 1.0 - fmax(lm->err, lm->phase_err) / band;
    return c < 0.0 ? 0.0 : c > 1.0 ? 1.0 : c;
}

void lossmodel_begin_predict(lossmodel *lm) { lm->pred = lossmodel_next(lm); }

void lossmodel_predict_step(lossmodel *lm, double update_norm) {
    lm->prev_x = lm->gbar * update_norm;
    lm->pred = fmax(0.0, lm->pred + line(lm, lm->prev_x)); /* a loss is never negative */
}
