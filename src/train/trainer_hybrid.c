/* trainer_hybrid.c: the hybrid schedule's part of the trainer (docs/predict.md; trainer.c runs
 * the phases): its checkpoint sections ("schedule", the predictors' arrays, the rollback
 * snapshot, the jump predictor's "jump" and "jump_ring"), packed for a save and restored on
 * resume so that a run resumed inside any phase computes the same bits; the check batch and the
 * jump's held-out batches (validation windows, copied to the host tier); the memory a predict
 * phase holds. */
#include "train/trainer_int.h"

void trainer_pack_schedule(const hpt_trainer *tr, int64_t f[HS_N]) {
    memset(f, 0, HS_N * sizeof *f);
    const hpt_schedule *s = &tr->sch;
    f[HS_PHASE] = s->phase;
    f[HS_IN_PHASE] = s->in_phase;
    f[HS_HORIZON] = s->horizon;
    f[HS_CAP] = dbits((double)s->cap);
    f[HS_CLEAN] = s->clean;
    f[HS_N_PHASES] = s->n_predict_phases;
    f[HS_N_PSTEPS] = s->n_predict_steps;
    f[HS_N_EARLY] = s->n_early;
    f[HS_N_ROLLBACK] = s->n_rollback;
    f[HS_PREDICTOR] = tr->pr.kind;
    predictor_scalars ps;
    predictor_get_scalars(&tr->pr, &ps);
    f[HS_PW] = dbits(ps.W);
    f[HS_PA1] = dbits(ps.A1);
    f[HS_PA2] = dbits(ps.A2);
    f[HS_PSAMPLES] = ps.n_samples;
    f[HS_PLR] = dbits((double)ps.lr_fit);
    f[HS_CHECK0] = dbits(tr->check0);
    f[HS_PRED0] = dbits(tr->pred0);
    memcpy(&f[HS_LM], &tr->lm, sizeof tr->lm);
}

static const hpt_state_section *find_section(const hpt_state_section *sec, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(sec[i].name, name)) return &sec[i];
    return NULL;
}

/* Copies a per-parameter section into *dst, allocated on tier (device: the predictor's). */
static hpt_status load_array(hpt_trainer *tr, const hpt_state_section *s, hpt_tier tier,
                             hpt_category cat, const char *name, float **dst) {
    size_t bytes = nparams(tr) * sizeof(float);
    if (s->bytes != bytes)
        return hpt_fail(HPT_ERR_FORMAT, "checkpoint section %s: %llu bytes, expected %zu", s->name,
                        (unsigned long long)s->bytes, bytes);
    if (!*dst) {
        hpt_mem_set_name(tr->mem, name);
        HPT_CHECK(tr->be->alloc(tr->mem, tier, cat, bytes, (void **)dst));
    }
    tr->be->copy(*dst, s->data, bytes, tier == HPT_TIER_DEVICE ? HPT_COPY_H2D : HPT_COPY_H2H);
    return HPT_OK;
}

/* Memory as a predict phase holds it: no gradients, no arena, and the optimizer's state on
 * the host unless the predictor reads it. */
hpt_status trainer_predict_memory(hpt_trainer *tr) {
    hpt_model_release_grads(tr->model);
    hpt_model_free_activations(tr->model);
    if (!predictor_reads_moments(tr->pr.kind)) HPT_CHECK(hpt_optim_set_tier(tr->opt, HPT_TIER_HOST));
    return HPT_OK;
}


/* The ring slots FULL has filled by now: [*first, *first + *count). */
static void ring_filled(const hpt_trainer *tr, int64_t *first, int64_t *count) {
    *first = -1;
    *count = 0;
    if (tr->sch.phase == HPT_PHASE_PREDICT) { /* the jump is next: every slot */
        *first = 0;
        *count = tr->js.K;
        return;
    }
    if (tr->sch.phase != HPT_PHASE_FULL || tr->sch.stopped) return;
    for (int64_t j = 1; j <= tr->sch.in_phase; j++) {
        int64_t slot = jump_slot(&tr->o.sched, j);
        if (slot < 0) continue;
        if (*first < 0) *first = slot;
        (*count)++;
    }
}

void trainer_pack_jump(const hpt_trainer *tr, int64_t f[JS_N]) {
    f[JS_PREV_LOSS] = dbits(tr->js.prev_loss);
    f[JS_PREV_STEP] = tr->js.prev_step;
    f[JS_N_POOR] = tr->sch.n_poor;
    f[JS_STOPPED] = tr->sch.stopped;
    ring_filled(tr, &f[JS_FIRST], &f[JS_COUNT]);
}

static hpt_status restore_jump(hpt_trainer *tr, const hpt_state_section *sec, int n_sec,
                               const char *path) {
    const hpt_state_section *s = find_section(sec, n_sec, "jump");
    if (!s || s->bytes != JS_N * sizeof(int64_t))
        return hpt_fail(HPT_ERR_FORMAT, "%s: the jump predictor's section is missing or wrong", path);
    int64_t f[JS_N];
    memcpy(f, s->data, sizeof f);
    tr->js.prev_loss = bitsd(f[JS_PREV_LOSS]);
    tr->js.prev_step = f[JS_PREV_STEP];
    tr->sch.n_poor = f[JS_N_POOR];
    tr->sch.stopped = (int)f[JS_STOPPED];
    int64_t first, count;
    ring_filled(tr, &first, &count);
    if (first != f[JS_FIRST] || count != f[JS_COUNT])
        return hpt_fail(HPT_ERR_FORMAT, "%s: jump snapshots %lld+%lld, the schedule says %lld+%lld",
                        path, (long long)f[JS_FIRST], (long long)f[JS_COUNT], (long long)first,
                        (long long)count);
    if (!count) return HPT_OK;
    size_t bytes = (size_t)count * nparams(tr) * sizeof(float);
    const hpt_state_section *r = find_section(sec, n_sec, "jump_ring");
    if (!r || r->bytes != bytes)
        return hpt_fail(HPT_ERR_FORMAT, "%s: jump snapshots missing or not %zu bytes", path, bytes);
    tr->be->copy(tr->js.ring[first], r->data, bytes, HPT_COPY_H2H);
    return HPT_OK;
}

/* The mean loss of nseq held-out sequences, one at a time (a B=1 arena, freed after). */
hpt_status trainer_seq_loss(void *ctx, const int32_t *x, const int32_t *y, int nseq, double *out) {
    hpt_trainer *tr = ctx;
    int T = tr->o.T;
    double sum = 0.0;
    hpt_status s = HPT_OK;
    for (int b = 0; b < nseq && s == HPT_OK; b++) {
        float loss;
        s = hpt_model_forward(tr->model, x + (size_t)b * T, y + (size_t)b * T, 1, T, &loss);
        sum += (double)loss;
    }
    hpt_model_free_activations(tr->model);
    *out = sum / nseq;
    return s;
}

/* The jump's held-out batches: the validation windows after the evaluation's (never trained
 * on, never evaluated). */
hpt_status trainer_load_heldout(hpt_trainer *tr) {
    const hpt_schedule_opts *so = &tr->o.sched;
    int nb = jump_heldout_batches(so), nv = tr->o.val_batches > 0 ? tr->o.val_batches : 1;
    if (!tr->val || hpt_dataloader_num_batches(tr->val) < (size_t)(nv + nb))
        return hpt_fail(HPT_ERR_INVALID, "the jump predictor needs validation data (--val) of at "
                        "least %d batches (evaluation %d + held-out %d); it has %zu", nv + nb, nv,
                        nb, tr->val ? hpt_dataloader_num_batches(tr->val) : (size_t)0);
    HPT_CHECK(jump_init(&tr->js, tr->mem, so, nparams(tr), tr->o.B, tr->o.T));
    size_t bt = (size_t)tr->o.B * tr->o.T;
    HPT_CHECK(hpt_dataloader_rewind(tr->val));
    for (int b = 0; b < nv + nb; b++) {
        const int32_t *x, *y;
        HPT_CHECK(hpt_dataloader_next(tr->val, &x, &y));
        if (b < nv) continue;
        memcpy(tr->js.hx + (size_t)(b - nv) * bt, x, bt * sizeof(int32_t));
        memcpy(tr->js.hy + (size_t)(b - nv) * bt, y, bt * sizeof(int32_t));
    }
    return hpt_dataloader_rewind(tr->val);
}

/* Restores the hybrid schedule's state from a checkpoint's sections (none: a fresh start). */
hpt_status trainer_restore_schedule(hpt_trainer *tr, const hpt_state_section *sec, int n_sec,
                                   const char *path) {
    const hpt_state_section *s = find_section(sec, n_sec, "schedule");
    if (!s) return HPT_OK;
    if (s->bytes != HS_N * sizeof(int64_t))
        return hpt_fail(HPT_ERR_FORMAT, "%s: schedule section of %llu bytes, expected %zu", path,
                        (unsigned long long)s->bytes, HS_N * sizeof(int64_t));
    int64_t f[HS_N];
    memcpy(f, s->data, sizeof f);
    if (f[HS_PREDICTOR] != tr->pr.kind)
        return hpt_fail(HPT_ERR_INVALID, "%s was trained with --predictor %s; resume with the same "
                        "(got %s)", path, hpt_predictor_name((hpt_predictor_kind)f[HS_PREDICTOR]),
                        hpt_predictor_name((hpt_predictor_kind)tr->pr.kind));
    if (f[HS_PHASE] != HPT_PHASE_WARMUP && f[HS_PHASE] != HPT_PHASE_FULL &&
        f[HS_PHASE] != HPT_PHASE_PREDICT && f[HS_PHASE] != HPT_PHASE_CORRECT)
        return hpt_fail(HPT_ERR_FORMAT, "%s: schedule phase %lld is not a training phase", path,
                        (long long)f[HS_PHASE]);
    hpt_schedule *c = &tr->sch;
    c->phase = (int)f[HS_PHASE];
    c->in_phase = f[HS_IN_PHASE];
    c->horizon = f[HS_HORIZON];
    c->cap = (float)bitsd(f[HS_CAP]);
    c->clean = (int)f[HS_CLEAN];
    c->n_predict_phases = f[HS_N_PHASES];
    c->n_predict_steps = f[HS_N_PSTEPS];
    c->n_early = f[HS_N_EARLY];
    c->n_rollback = f[HS_N_ROLLBACK];
    predictor_scalars ps = {.W = bitsd(f[HS_PW]), .A1 = bitsd(f[HS_PA1]), .A2 = bitsd(f[HS_PA2]),
                            .n_samples = f[HS_PSAMPLES], .lr_fit = (float)bitsd(f[HS_PLR])};
    predictor_set_scalars(&tr->pr, &ps);
    tr->check0 = bitsd(f[HS_CHECK0]);
    tr->pred0 = bitsd(f[HS_PRED0]);
    memcpy(&tr->lm, &f[HS_LM], sizeof tr->lm);
    if (tr->pr.kind == HPT_PREDICTOR_LINEAR) {
        const hpt_state_section *s0 = find_section(sec, n_sec, "pred_s0");
        const hpt_state_section *s1 = find_section(sec, n_sec, "pred_s1");
        if (!s1) return hpt_fail(HPT_ERR_FORMAT, "%s: the linear predictor's sums are missing", path);
        if (s0) HPT_CHECK(load_array(tr, s0, HPT_TIER_DEVICE, HPT_CAT_OPTIM, "predictor sum w", &tr->pr.s0));
        else predictor_drop_s0(&tr->pr); /* a predict phase's velocities only */
        HPT_CHECK(load_array(tr, s1, HPT_TIER_DEVICE, HPT_CAT_OPTIM, "predictor sum a*w", &tr->pr.s1));
    }
    if (tr->pr.kind == HPT_PREDICTOR_JUMP) HPT_CHECK(restore_jump(tr, sec, n_sec, path));
    const hpt_state_section *sn = find_section(sec, n_sec, "snapshot");
    if (sn) HPT_CHECK(load_array(tr, sn, HPT_TIER_HOST, HPT_CAT_PARAMS, "rollback snapshot", &tr->snapshot));
    if (c->phase == HPT_PHASE_PREDICT) HPT_CHECK(trainer_predict_memory(tr));
    return HPT_OK;
}

/* The check batch: the validation set's first window, copied (host tier). */
hpt_status trainer_load_check_batch(hpt_trainer *tr) {
    if (!tr->val)
        return hpt_fail(HPT_ERR_INVALID, "predict-phase checks (check every %lld) need validation "
                        "data (--val)", (long long)tr->o.sched.check_every);
    size_t bt = (size_t)tr->o.B * tr->o.T * sizeof(int32_t);
    hpt_mem_set_name(tr->mem, "check batch inputs");
    HPT_CHECK(hpt_mem_alloc(tr->mem, HPT_TIER_HOST, HPT_CAT_IO, bt, (void **)&tr->check_x));
    hpt_mem_set_name(tr->mem, "check batch targets");
    HPT_CHECK(hpt_mem_alloc(tr->mem, HPT_TIER_HOST, HPT_CAT_IO, bt, (void **)&tr->check_y));
    const int32_t *x, *y;
    HPT_CHECK(hpt_dataloader_rewind(tr->val));
    HPT_CHECK(hpt_dataloader_next(tr->val, &x, &y));
    memcpy(tr->check_x, x, bt);
    memcpy(tr->check_y, y, bt);
    return hpt_dataloader_rewind(tr->val);
}
