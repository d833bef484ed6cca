/* trainer.c: the training loop, one step per call: accum x (batch -> forward -> backward,
 * gradients summed) -> clip -> the optimizer (AdamW, Lion, Adam-mini or SGD; 32- or 8-bit state) with the warmup+cosine
 * learning rate -> (evaluation, checkpoint when due).
 * Everything a step depends on (weights, moments, optimizer step count, data position, RNG)
 * is in the training-state checkpoint, so a resumed run computes the same bits as an
 * uninterrupted one with the same thread count.
 * Gradient accumulation: one optimizer step runs accum micro-batches of B sequences (the
 * loader's next accum windows, the tokens one batch of accum*B would read), backward adds
 * each one's gradients of its mean loss, and the optimizer takes them times 1/accum
 * (hpt_optim_step_scaled: folded into the clip factor, no extra pass), so the update is that
 * of one batch of accum*B up to float rounding. The checkpoint records accum; a resume with
 * another is refused (the data position would still be right, but the run would no longer
 * be the one that was started).
 * Offload (o.offload, src/offload/engine.c): the model is made with the engine; a fused-update
 * engine's step is forward -> hpt_optim_fused_begin -> backward (each block updated as its
 * gradients complete) -> hpt_optim_fused_end; it takes one micro-batch per step. Checkpoints
 * load into an offloaded model and resume it (the same files as without offload). */
#include "core/core.h"
#include "model/gpt2_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct hpt_trainer {
    hpt_train_opts o;
    hpt_mem *mem;
    hpt_gpt2 *model;
    hpt_optim *opt;
    hpt_dataloader *train, *val;
    hpt_rng rng;
    int64_t step, start_step;
};

hpt_train_opts hpt_train_defaults(void) {
    hpt_train_opts o = {0};
    o.B = 4;
    o.T = 64;
    o.accum = 1;
    o.steps = 100;
    o.lr = 6e-4f;
    o.min_lr = 6e-5f;
    o.warmup = 10;
    o.grad_clip = 1.0f;
    o.adamw = hpt_adamw_defaults();
    o.eval_every = 100;
    o.val_batches = 10;
    o.save_every = 0;
    o.seed = 1337;
    o.act = hpt_gpt2_act_defaults();
    o.offload = hpt_offload_defaults();
    return o;
}

void hpt_trainer_free(hpt_trainer *tr) {
    if (!tr) return;
    hpt_dataloader_free(tr->train);
    hpt_dataloader_free(tr->val);
    hpt_optim_free(tr->opt);
    hpt_gpt2_free(tr->model);
    free(tr);
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* Creates dir and its missing parents, like mkdir -p. */
static hpt_status mkdir_p(const char *dir) {
    char p[PATH_MAX];
    if (strlen(dir) >= sizeof p) return hpt_fail(HPT_ERR_INVALID, "path too long: %s", dir);
    strcpy(p, dir);
    for (char *c = p + 1; ; c++) {
        if (*c == '/' || *c == '\0') {
            char keep = *c;
            *c = '\0';
            if (mkdir(p, 0755) != 0 && errno != EEXIST)
                return hpt_fail(HPT_ERR_IO, "cannot create %s: %s", p, strerror(errno));
            *c = keep;
            if (!keep) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return hpt_fail(HPT_ERR_IO, "%s exists and is not a directory", dir);
    return HPT_OK;
}

/* Refuses, before anything is allocated for it, a run whose estimated device peak does not
 * fit the budget: the error gives the breakdown and the --batch / --seq that would fit.
 * The shape is *cfg, or is read into *cfg from the checkpoint at ckpt (when not NULL);
 * live0: device bytes live before setup began. */
static hpt_status check_budget(hpt_trainer *tr, hpt_gpt2_config *cfg, const char *ckpt,
                               uint64_t live0) {
    hpt_mem_stats st;
    hpt_mem_get_stats(tr->mem, &st);
    if (!st.budget_bytes[HPT_TIER_DEVICE]) return HPT_OK;
    hpt_plan_opts po = hpt_plan_defaults();
    if (ckpt) HPT_CHECK(hpt_gpt2_read_config(ckpt, cfg));
    po.cfg = *cfg;
    po.B = tr->o.B;
    po.T = tr->o.T;
    po.accum = tr->o.accum;
    po.has_val = tr->o.val != NULL;
    po.optimizer = tr->o.adamw.optimizer;
    po.state_bits = tr->o.adamw.state_bits;
    po.state32_embeddings = tr->o.adamw.state32_embeddings;
    po.act = tr->o.act;
    po.offload = tr->o.offload;
    return hpt_plan_check_budget(&po, st.budget_bytes[HPT_TIER_DEVICE], live0);
}

static hpt_status setup(hpt_trainer *tr) {
    const hpt_train_opts *o = &tr->o;
    hpt_mem_stats st0;
    hpt_mem_get_stats(tr->mem, &st0);
    uint64_t live0 = 0;
    for (int c = 0; c < HPT_CAT_COUNT; c++) live0 += st0.live_bytes[HPT_TIER_DEVICE][c];
    if (o->accum < 0)
        return hpt_fail(HPT_ERR_INVALID, "accumulation (%d) must be >= 1", o->accum);
    if (o->B < 1 || o->T < 1 || o->steps < 1)
        return hpt_fail(HPT_ERR_INVALID, "batch (%d), sequence (%d) and steps (%lld) must be >= 1",
                        o->B, o->T, (long long)o->steps);
    if (!o->data) return hpt_fail(HPT_ERR_INVALID, "no training data given");
    if (o->offload.fused && o->accum > 1)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--fused-update updates each block as its gradients "
                        "complete: it cannot accumulate micro-batches (--accum %d)", o->accum);
    hpt_rng_seed(&tr->rng, o->seed);
    if (o->resume) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/state.bin", o->resume);
        hpt_adamw_opts ao;
        hpt_train_pos pos;
        HPT_CHECK(hpt_state_load_offload(path, tr->mem, &o->offload, &tr->model, &tr->opt, &ao, &pos));
        if (pos.B != o->B || pos.T != o->T)
            return hpt_fail(HPT_ERR_SHAPE, "%s was trained with batch %d and sequence %d; resume "
                            "with the same (got %d and %d)", path, pos.B, pos.T, o->B, o->T);
        if (pos.accum != (o->accum > 1 ? o->accum : 1))
            return hpt_fail(HPT_ERR_INVALID, "%s was trained with --accum %d; resume with the "
                            "same (got %d)", path, pos.accum, o->accum > 1 ? o->accum : 1);
        if (pos.step > o->steps)
            return hpt_fail(HPT_ERR_INVALID, "%s is at step %lld, beyond --steps %lld", path,
                            (long long)pos.step, (long long)o->steps);
        tr->o.adamw = ao; /* the checkpoint's optimizer and settings continue */
        hpt_gpt2_config cfg = tr->model->cfg;
        HPT_CHECK(check_budget(tr, &cfg, NULL, live0)); /* the shape is known only now */
        tr->step = tr->start_step = pos.step;
        tr->rng.s = pos.rng_state;
        HPT_CHECK(hpt_dataloader_open(tr->mem, o->data, o->B, o->T, tr->model->cfg.V, &tr->train));
        HPT_CHECK(hpt_dataloader_set_pos(tr->train, pos.data_shard, pos.data_offset));
    } else {
        if (!o->model) return hpt_fail(HPT_ERR_INVALID, "no model given (a checkpoint or a shape)");
        hpt_gpt2_config cfg;
        if (file_exists(o->model)) {
            HPT_CHECK(check_budget(tr, &cfg, o->model, live0));
            HPT_CHECK(hpt_gpt2_load_offload(tr->mem, o->model, &o->offload, &tr->model));
        } else if (hpt_gpt2_config_parse(o->model, &cfg) == HPT_OK) {
            HPT_CHECK(check_budget(tr, &cfg, NULL, live0));
            HPT_CHECK(hpt_gpt2_create_offload(tr->mem, &cfg, &o->offload, &tr->model));
            HPT_CHECK(hpt_gpt2_init_random(tr->model, o->seed));
        } else if (strchr(o->model, '/') || strstr(o->model, ".bin")) {
            return hpt_fail(HPT_ERR_IO, "cannot open %s: %s", o->model, strerror(ENOENT));
        } else {
            return hpt_gpt2_config_parse(o->model, &cfg); /* its error names the shape problem */
        }
        HPT_CHECK(hpt_optim_create(tr->mem, tr->model, &tr->o.adamw, &tr->opt));
        HPT_CHECK(hpt_dataloader_open(tr->mem, o->data, o->B, o->T, tr->model->cfg.V, &tr->train));
    }
    HPT_CHECK(hpt_gpt2_set_act_opts(tr->model, &o->act)); /* before the first forward */
    if (o->T > tr->model->cfg.maxT)
        return hpt_fail(HPT_ERR_SHAPE, "sequence length %d exceeds the model's maxT %d", o->T,
                        tr->model->cfg.maxT);
    if (o->val) HPT_CHECK(hpt_dataloader_open(tr->mem, o->val, o->B, o->T, tr->model->cfg.V, &tr->val));
    if (o->save_dir) HPT_CHECK(mkdir_p(o->save_dir));
    return HPT_OK;
}

hpt_status hpt_trainer_create(hpt_mem *mem, const hpt_train_opts *opts, hpt_trainer **out) {
    *out = NULL;
    hpt_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return hpt_fail(HPT_ERR_OOM, "cannot allocate the trainer");
    tr->o = *opts;
    tr->mem = mem;
    hpt_mem_set_context(mem, 0, HPT_PHASE_SETUP, -1);
    hpt_status s = setup(tr);
    if (s != HPT_OK) {
        hpt_trainer_free(tr);
        return s;
    }
    *out = tr;
    return HPT_OK;
}

int hpt_trainer_done(const hpt_trainer *tr) { return tr->step >= tr->o.steps; }
hpt_gpt2 *hpt_trainer_model(hpt_trainer *tr) { return tr->model; }
int64_t hpt_trainer_start_step(const hpt_trainer *tr) { return tr->start_step; }
const hpt_adamw_opts *hpt_trainer_optim_opts(const hpt_trainer *tr) { return hpt_optim_get_opts(tr->opt); }
size_t hpt_trainer_train_tokens(const hpt_trainer *tr) { return hpt_dataloader_num_tokens(tr->train); }

hpt_status hpt_trainer_eval(hpt_trainer *tr, float *val_loss_out) {
    *val_loss_out = NAN;
    if (!tr->val) return HPT_OK;
    HPT_CHECK(hpt_dataloader_rewind(tr->val));
    hpt_mem_set_context(tr->mem, tr->step, HPT_PHASE_EVAL, -1);
    double sum = 0.0;
    int n = tr->o.val_batches > 0 ? tr->o.val_batches : 1;
    for (int i = 0; i < n; i++) {
        const int32_t *x, *y;
        float loss;
        HPT_CHECK(hpt_dataloader_next(tr->val, &x, &y));
        HPT_CHECK(hpt_gpt2_forward(tr->model, x, y, tr->o.B, tr->o.T, &loss));
        sum += (double)loss;
    }
    *val_loss_out = (float)(sum / n);
    return HPT_OK;
}

hpt_status hpt_trainer_save(hpt_trainer *tr) {
    if (!tr->o.save_dir) return hpt_fail(HPT_ERR_INVALID, "no save directory given");
    hpt_train_pos pos = {.step = tr->step, .rng_state = tr->rng.s, .total_steps = tr->o.steps,
                         .B = tr->o.B, .T = tr->o.T, .accum = tr->o.accum};
    hpt_dataloader_get_pos(tr->train, &pos.data_shard, &pos.data_offset);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", tr->o.save_dir);
    HPT_CHECK(hpt_state_save(path, tr->model, tr->opt, &tr->o.adamw, &pos));
    snprintf(path, sizeof path, "%s/model.bin", tr->o.save_dir);
    return hpt_gpt2_save(tr->model, path);
}

hpt_status hpt_trainer_step(hpt_trainer *tr, hpt_train_progress *p) {
    memset(p, 0, sizeof *p);
    p->val_loss = NAN;
    if (hpt_trainer_done(tr)) return hpt_fail(HPT_ERR_INVALID, "training is already complete");
    const hpt_train_opts *o = &tr->o;
    double t0 = hpt_now();
    hpt_mem_set_context(tr->mem, tr->step + 1, HPT_PHASE_FULL, -1);
    int K = o->accum > 1 ? o->accum : 1;
    double loss_sum = 0.0;
    int fused = o->offload.fused;
    p->lr = hpt_lr_cosine(tr->step, o->steps, o->warmup, o->lr, o->min_lr);
    hpt_gpt2_zero_grad(tr->model);
    for (int k = 0; k < K; k++) {
        const int32_t *x, *y;
        float loss;
        HPT_CHECK(hpt_dataloader_next(tr->train, &x, &y));
        HPT_CHECK(hpt_gpt2_forward(tr->model, x, y, o->B, o->T, &loss));
        if (!isfinite(loss))
            return hpt_fail(HPT_ERR_INVALID, "the loss is %g at step %lld: training diverged (try "
                            "a lower --lr)", (double)loss, (long long)tr->step + 1);
        if (fused) HPT_CHECK(hpt_optim_fused_begin(tr->opt, p->lr, o->grad_clip));
        HPT_CHECK(hpt_gpt2_backward(tr->model)); /* += into the gradients (fused: updates) */
        loss_sum += (double)loss;
    }
    /* K = 1: the loss is the micro-batch's, exactly (a float through a double and back). */
    p->loss = (float)(loss_sum / K);
    if (fused)
        HPT_CHECK(hpt_optim_fused_end(tr->opt, &p->grad_norm));
    else
        HPT_CHECK(hpt_optim_step_scaled(tr->opt, p->lr, o->grad_clip, 1.0f / (float)K,
                                        &p->grad_norm));
    tr->step++;
    double dt = hpt_now() - t0;
    p->step = tr->step;
    p->total = o->steps;
    p->step_ms = dt * 1e3;
    p->tokens_per_s = (double)K * o->B * o->T / dt;
    int last = hpt_trainer_done(tr);
    if (tr->val && (last || (o->eval_every > 0 && tr->step % o->eval_every == 0))) {
        HPT_CHECK(hpt_trainer_eval(tr, &p->val_loss));
        p->evaluated = 1;
    }
    if (o->save_dir && (last || (o->save_every > 0 && tr->step % o->save_every == 0))) {
        HPT_CHECK(hpt_trainer_save(tr));
        p->saved = 1;
    }
    hpt_mem_stats st;
    hpt_mem_get_stats(tr->mem, &st);
    p->mem_peak_bytes = st.peak_bytes[HPT_TIER_DEVICE];
    p->rss_peak_bytes = hpt_rss_peak_bytes();
    return HPT_OK;
}
