/* trainer.c: the training loop, one step per call: accum x (batch -> forward -> backward,
 * gradients summed) -> clip -> the optimizer with the warmup+cosine learning rate ->
 * (evaluation, checkpoint when due). Each step runs the phase the hybrid schedule's controller
 * names (schedule.c, predict.c; docs/predict.md), with the offload engine's fused update
 * (docs/offload.md), loss scaling (skip or unscale, docs/offload.md) and data parallel or ZeRO
 * (dp.c, zero.c; docs/zero.md) where the options ask for them.
 * Invariants: everything a step depends on (weights, moments, step count, data position, RNG,
 * the controller's, predictor's and scaler's state) is in the training-state checkpoint, so a
 * resumed run computes the uninterrupted run's bits with the same thread count; a resume with
 * another global accum (N*K) is refused; accumulation's 1/accum and the loss scale's 1/S fold
 * into the clip factor (exact: S is a power of two); N processes sum their micro-batches apart
 * and in rank order, so --accum K over N ranks gives one process's --accum N*K bits (K = 1). */
#include "core/core.h"
#include "dist/dist.h"
#include "kernels/backend.h"
#include "testing.h"
#include "model/model.h"
#include "offload/engine.h"
#include "optim/optim.h"
#include "train/train_int.h"
#include "train/trainer_int.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>


hpt_train_opts hpt_train_defaults(void) {
    hpt_train_opts o = {0};
    o.B = 4;
    o.T = 64;
    o.steps = 100;
    o.lr = 6e-4f;
    o.min_lr = 6e-5f;
    o.warmup = 10;
    o.grad_clip = 1.0f;
    o.eval_every = 100;
    o.val_batches = 10;
    o.save_every = 0;
    o.seed = 1337;
    o.save_dtype = -1; /* the --model directory's, else f32 (save_dir.c) */
    o.data_seed = 1234;
    o.plan = hpt_plan_default_choices(); /* AdamW fp32, accum 1, no technique, no budget */
    return o;
}

#define LS_MAX 18446744073709551616.0f /* 2^64: the largest initial scale */
#define LS_GROW_MAX 16777216.0f        /* 2^24: growth stops here */

static int pow2_scale(float x) {
    int e;
    return x >= 1.0f && x <= LS_MAX && frexpf(x, &e) == 0.5f;
}

void hpt_trainer_inject_grad(hpt_trainer *tr, int64_t step, int layer, float value) {
    tr->fault_step = step;
    tr->fault_layer = layer;
    tr->fault_value = value;
}


/* ---- the loss scaler's checkpoint section "loss_scale": int64[LSS_N] ---- */
enum { LSS_SCALE, LSS_CLEAN, LSS_SKIPPED, LSS_N };

/* The scaler's state from a checkpoint's sections; none (a run saved without scaling): a fresh
 * scaler. A run resumed without scaling ignores the section. */
static hpt_status restore_scaler(hpt_trainer *tr, const hpt_state_section *sec, int n_sec,
                                 const char *path) {
    const hpt_state_section *s = NULL;
    for (int i = 0; i < n_sec; i++)
        if (!strcmp(sec[i].name, "loss_scale")) s = &sec[i];
    if (!s || tr->o.loss_scale.mode == HPT_LOSS_SCALE_OFF) return HPT_OK;
    int64_t f[LSS_N];
    float scale = 0.0f;
    if (s->bytes == sizeof f) {
        memcpy(f, s->data, sizeof f);
        scale = (float)bitsd(f[LSS_SCALE]);
    }
    if (!pow2_scale(scale) || f[LSS_CLEAN] < 0 || f[LSS_SKIPPED] < 0)
        return hpt_fail(HPT_ERR_FORMAT, "%s: the loss_scale section is malformed", path);
    tr->ls = scale;
    tr->ls_clean = f[LSS_CLEAN];
    tr->ls_skipped = f[LSS_SKIPPED];
    return HPT_OK;
}

static const hpt_model_config *mcfg(const hpt_trainer *tr) { return hpt_model_get_config(tr->model); }

static void free_snapshot(hpt_trainer *tr) {
    if (tr->snapshot)
        tr->be->free(tr->mem, HPT_TIER_HOST, HPT_CAT_PARAMS, tr->snapshot, nparams(tr) * sizeof(float));
    tr->snapshot = NULL;
}

void hpt_trainer_free(hpt_trainer *tr) {
    if (!tr) return;
    free_snapshot(tr);
    dp_sink_free(&tr->dp);
    if (tr->acc)
        tr->be->free(tr->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, tr->acc, tr->acc_n * sizeof(float));
    jump_free(&tr->js);
    predictor_free(&tr->pr);
    if (tr->check_x) {
        size_t bt = (size_t)tr->o.B * tr->o.T * sizeof(int32_t);
        hpt_mem_free(tr->mem, HPT_TIER_HOST, HPT_CAT_IO, tr->check_x, bt);
        hpt_mem_free(tr->mem, HPT_TIER_HOST, HPT_CAT_IO, tr->check_y, bt);
    }
    hpt_dataloader_free(tr->train);
    hpt_dataloader_free(tr->val);
    hpt_optim_free(tr->opt);
    hpt_model_free(tr->model);
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
static hpt_status check_budget(hpt_trainer *tr, hpt_model_config *cfg, const char *ckpt,
                               uint64_t live0) {
    /* mem's budget: the plan's (set on mem by hpt_trainer_create), less a GPU's measured
     * context overhead (hpt_device_bind), or one a library caller set on mem */
    hpt_mem_stats st;
    hpt_mem_get_stats(tr->mem, &st);
    uint64_t budget = st.budget_bytes[HPT_TIER_DEVICE];
    if (!budget) return HPT_OK;
    if (ckpt) HPT_CHECK(hpt_model_read_config(ckpt, cfg));
    hpt_plan_opts po = hpt_train_plan_opts(&tr->o, cfg);
    return hpt_plan_check_budget(&po, budget, live0);
}

hpt_plan_opts hpt_train_plan_opts(const hpt_train_opts *o, const hpt_model_config *cfg) {
    hpt_plan_opts po = hpt_plan_defaults();
    po.cfg = *cfg;
    po.B = o->B;
    po.T = o->T;
    po.has_val = o->val != NULL || o->val_split > 0;
    po.plan = o->plan;
    po.procs = hpt_dist_size(); /* this process's bytes (ZeRO's runs differ by rank) */
    po.rank = hpt_dist_rank();
    return po;
}

/* 1 when dir's state.bin was written after its zero.manifest (a stage-0 save removes the
 * manifest and a sharded one state.bin; both are left only by a crash between the two). */
static int newer_state(const char *dir) {
    char a[PATH_MAX], b[PATH_MAX];
    struct stat sa, sb;
    snprintf(a, sizeof a, "%s/state.bin", dir);
    snprintf(b, sizeof b, "%s/zero.manifest", dir);
    if (stat(a, &sa) != 0) return 0;
    if (stat(b, &sb) != 0) return 1;
    return sa.st_mtim.tv_sec > sb.st_mtim.tv_sec ||
           (sa.st_mtim.tv_sec == sb.st_mtim.tv_sec && sa.st_mtim.tv_nsec > sb.st_mtim.tv_nsec);
}

/* A LoRA run resumed from dir (a LoRA --save): the adapters' values from PEFT's files, whose
 * settings must be the run's, then the rest of the state (lora_state.c). */
static hpt_status lora_resume(hpt_trainer *tr, const char *dir) {
    hpt_lora_opts saved;
    HPT_CHECK(hpt_lora_read_config(dir, &saved));
    const hpt_lora_opts *o = &tr->o.lora;
    if (saved.r != o->r || saved.alpha != o->alpha || saved.rslora != o->rslora ||
        saved.dropout != o->dropout)
        return hpt_fail(HPT_ERR_INVALID, "%s/adapter_config.json has r=%d alpha=%g dropout=%g%s; "
                        "resume with the same --lora", dir, saved.r, (double)saved.alpha,
                        (double)saved.dropout, saved.rslora ? " rslora" : "");
    HPT_CHECK(hpt_lora_read_values(tr->model, dir));
    return lora_state_load(tr, dir);
}

/* --val-split, --shuffle (docs/data.md): the rows of a set of data's documents, the training
 * rows in a seeded order per epoch; without either, the walk in order (docs/packing.md). */
static hpt_status order_data(hpt_trainer *tr, hpt_dataloader *d, int val) {
    const hpt_train_opts *o = &tr->o;
    const double frac = o->val ? 0.0 : o->val_split;
    const int shuffle = !val && o->shuffle;
    if (frac <= 0 && !shuffle) return HPT_OK;
    return hpt_dataloader_order(d, frac, val, shuffle, o->data_seed, &tr->split[val]);
}

static hpt_status setup(hpt_trainer *tr) {
    const hpt_train_opts *o = &tr->o;
    hpt_mem_stats st0;
    hpt_mem_get_stats(tr->mem, &st0);
    uint64_t live0 = 0;
    for (int c = 0; c < HPT_CAT_COUNT; c++) live0 += st0.live_bytes[HPT_TIER_DEVICE][c];
    /* many processes: the same configuration on each (first: a refusal is then every rank's) */
    HPT_CHECK(dp_agree(o));
    HPT_CHECK(dp_check(o));
    { /* HPT_DIST_TRANSPORT=nccl: its communicators on the device's compute stream */
        const hpt_transfer *x = hpt_transfer_of(tr->mem);
        HPT_CHECK(dist_bind_device(x && x->native_stream ? x->native_stream(HPT_XS_COMPUTE) : NULL,
                                   tr->be->add));
    }
    tr->o.offload.shards = dp_engine_shards(o); /* --zero 1-3 in the engine: 1/N of its homes */
    tr->o.offload.zero = o->zero;
    if (o->B < 1 || o->T < 1 || o->steps < 1)
        return hpt_fail(HPT_ERR_INVALID, "batch (%d), sequence (%d) and steps (%lld) must be >= 1",
                        o->B, o->T, (long long)o->steps);
    if (!o->data) return hpt_fail(HPT_ERR_INVALID, "no training data given");
    /* every rule on how the choices combine (accumulation, fused update, schedule, loss
     * scaling, offload, activations); the disk directory is the caller's (mem's) */
    hpt_plan_env env = {.training = 1, .has_val = o->val != NULL || o->val_split > 0, .need_disk_dir = 0};
    HPT_CHECK(hpt_plan_check(&o->plan, &env));
    tr->ls = o->loss_scale.mode != HPT_LOSS_SCALE_OFF ? o->loss_scale.init : 1.0f;
    hpt_rng_seed(&tr->rng, o->seed);
    hpt_state_section sec[HPT_STATE_MAX_SECTIONS];
    int n_sec = 0;
    char path[PATH_MAX];
    if (o->adapter) { /* the saved adapters' settings are the run's; the plan's rules again */
        if (o->resume)
            return hpt_fail(HPT_ERR_INVALID, "--adapter starts a run from adapters; --resume "
                            "continues one (give one of them)");
        /* --base-weights and --base-home are the run's, not the adapters' */
        int base = tr->o.lora.base, home = tr->o.lora.home, np = tr->o.lora.no_prefetch;
        HPT_CHECK(hpt_lora_read_config(o->adapter, &tr->o.lora));
        tr->o.lora.base = base, tr->o.lora.home = home, tr->o.lora.no_prefetch = np;
        HPT_CHECK(hpt_plan_check(&o->plan, &env));
    }
    const int lora = o->lora.r > 0;
    if (lora && dp_size() > 1) /* the processes' sums are over the model's gradients */
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--lora runs in one process in this version "
                        "(docs/lora.md)");
    if (lora && o->resume && !o->model)
        return hpt_fail(HPT_ERR_INVALID, "--resume of a --lora run takes the frozen base from "
                        "--model again (its checkpoint holds the adapters only)");
    if (o->resume && !lora) {
        char rdir[PATH_MAX - 64]; /* the state of a Hugging Face save lies beside it (save_dir.c) */
        HPT_CHECK(hpt_train_resume_dir(o->resume, rdir, sizeof rdir));
        snprintf(path, sizeof path, "%s/state.bin", rdir);
        hpt_adamw_opts ao;
        hpt_train_pos pos;
        /* a sharded checkpoint (zero.c) when its manifest is newer than any state.bin */
        int shards = zero_manifest_exists(rdir) && !newer_state(rdir);
        if (shards) {
            snprintf(path, sizeof path, "%s/zero.manifest", rdir);
            HPT_CHECK(zero_load(rdir, o, tr->mem, &tr->dp, &tr->model, &tr->opt, &ao, &pos,
                                sec, &n_sec));
        } else {
            HPT_CHECK(hpt_state_load_offload_sections(path, tr->mem, &o->offload, &tr->model,
                                                      &tr->opt, &ao, &pos, sec, &n_sec));
        }
        hpt_status s = HPT_OK;
        if (pos.B != o->B || pos.T != o->T)
            s = hpt_fail(HPT_ERR_SHAPE, "%s was trained with batch %d and sequence %d; resume "
                         "with the same (got %d and %d)", path, pos.B, pos.T, o->B, o->T);
        else if (pos.accum != (o->accum > 1 ? o->accum : 1) * dp_size())
            s = hpt_fail(HPT_ERR_INVALID, "%s was trained with --accum %d on one process (its "
                         "micro-batches per step: --accum times processes); resume with the same "
                         "product (got --accum %d x %d processes)", path, pos.accum,
                         o->accum > 1 ? o->accum : 1, dp_size());
        else if (pos.step > o->steps)
            s = hpt_fail(HPT_ERR_INVALID, "%s is at step %lld, beyond --steps %lld", path,
                         (long long)pos.step, (long long)o->steps);
        else
            s = restore_scaler(tr, sec, n_sec, path);
        if (s != HPT_OK) {
            hpt_state_sections_free(tr->mem, sec, n_sec);
            return s;
        }
        tr->o.adamw = ao; /* the checkpoint's optimizer and settings continue */
        if (!shards) { /* state.bin: the whole state, cut to this rank's units at stages 1, 2 */
            s = dp_shard_init(o, tr->model, &tr->dp);
            if (s == HPT_OK) s = zero_reshard(tr->mem, tr->model, &tr->dp, &tr->opt);
            if (s != HPT_OK) {
                hpt_state_sections_free(tr->mem, sec, n_sec);
                return s;
            }
        }
        hpt_model_config cfg = *hpt_model_get_config(tr->model);
        s = check_budget(tr, &cfg, NULL, live0); /* the shape is known only now */
        if (s != HPT_OK) {
            hpt_state_sections_free(tr->mem, sec, n_sec);
            return s;
        }
        tr->step = tr->start_step = pos.step;
        tr->rng.s = pos.rng_state;
        s = hpt_dataloader_open(tr->mem, o->data, o->B, o->T, mcfg(tr)->V, &tr->train);
        if (s == HPT_OK) s = hpt_dataloader_set_pack(tr->train, o->pack);
        /* a walk's position (--shuffle off, or a checkpoint from before shuffling) continues
         * the walk; the rows by index, a split, as asked (set_pos refuses the other kind) */
        if (s == HPT_OK && (pos.data_shard < 0 || (o->val_split > 0 && !o->val)))
            s = order_data(tr, tr->train, 0);
        if (s == HPT_OK) s = hpt_dataloader_set_pos(tr->train, pos.data_shard, pos.data_offset);
        if (s != HPT_OK) {
            hpt_state_sections_free(tr->mem, sec, n_sec);
            return s;
        }
    } else {
        if (!o->model) return hpt_fail(HPT_ERR_INVALID, "no model given (a checkpoint or a shape)");
        hpt_model_config cfg;
        hpt_status ms = HPT_OK;
        model_create_forward_only(lora); /* LoRA: a frozen base, no gradient buffer */
        model_set_frozen_base(lora ? o->lora.base : HPT_BASE_F32, /* --base-weights, --base-home */
                              lora ? o->lora.home : HPT_TIER_DEVICE);
        model_set_frozen_prefetch(!lora || !o->lora.no_prefetch); /* --base-prefetch */
        if (file_exists(o->model)) {
            ms = check_budget(tr, &cfg, o->model, live0);
            if (ms == HPT_OK) ms = hpt_model_load_offload(tr->mem, o->model, &o->offload, &tr->model);
        } else if (hpt_model_config_parse(o->model, &cfg) == HPT_OK) {
            ms = check_budget(tr, &cfg, NULL, live0);
            if (ms == HPT_OK) ms = hpt_model_create_config_offload(tr->mem, &cfg, &o->offload, &tr->model);
            if (ms == HPT_OK) ms = hpt_model_init_random(tr->model, o->seed);
        } else if (strchr(o->model, '/') || strstr(o->model, ".bin")) {
            model_create_forward_only(0);
            model_set_frozen_base(HPT_BASE_F32, HPT_TIER_DEVICE);
            model_set_frozen_prefetch(1);
            return hpt_fail(HPT_ERR_IO, "cannot open %s: %s", o->model, strerror(ENOENT));
        } else {
            model_create_forward_only(0);
            model_set_frozen_base(HPT_BASE_F32, HPT_TIER_DEVICE);
            model_set_frozen_prefetch(1);
            return hpt_model_config_parse(o->model, &cfg); /* its error names the shape problem */
        }
        model_create_forward_only(0);
        model_set_frozen_base(HPT_BASE_F32, HPT_TIER_DEVICE);
        model_set_frozen_prefetch(1);
        HPT_CHECK(ms);
        /* the adapters over the loaded or initialised base (A from the run's seed) */
        if (lora) HPT_CHECK(hpt_model_lora_attach(tr->model, &o->lora, o->seed ^ 0x4C6F5241ull));
        if (o->adapter) HPT_CHECK(hpt_lora_read_values(tr->model, o->adapter));
        HPT_CHECK(dp_shard_init(o, tr->model, &tr->dp));
        HPT_CHECK(dp_optim_create(tr->mem, tr->model, &tr->o.adamw, &tr->dp, &tr->opt));
        HPT_CHECK(hpt_dataloader_open(tr->mem, o->data, o->B, o->T, mcfg(tr)->V, &tr->train));
        HPT_CHECK(hpt_dataloader_set_pack(tr->train, o->pack)); /* rewinds: before a resume */
        HPT_CHECK(order_data(tr, tr->train, 0));
        if (lora && o->resume) HPT_CHECK(lora_resume(tr, o->resume));
    }
    if (model_engine(tr->model) && o->loss_scale.mode != HPT_LOSS_SCALE_OFF) /* fp32 homes too: */
        eng_check_grads(model_engine(tr->model), 1); /* non-finite values skip a step */
    dp_engine_setup(model_engine(tr->model)); /* many processes: blocks summed at grads_done */
    dp_engine_emb(tr); /* and wte's chunks in the backward (chunked, bf16 embeddings) */
    HPT_CHECK(dp_sink_attach(&tr->dp, tr->mem, tr->model, tr->opt, /* stage 2: by layer */
                             o->accum > 1 ? o->accum : 1));
    hpt_status s = hpt_model_set_act_opts(tr->model, &o->act); /* before the first forward */
    if (s == HPT_OK && o->T > mcfg(tr)->maxT)
        s = hpt_fail(HPT_ERR_SHAPE, "sequence length %d exceeds the model's maxT %d", o->T,
                     mcfg(tr)->maxT);
    const char *val = o->val ? o->val : o->val_split > 0 ? o->data : NULL; /* --val-split: data's */
    if (s == HPT_OK && val) s = hpt_dataloader_open(tr->mem, val, o->B, o->T, mcfg(tr)->V, &tr->val);
    if (s == HPT_OK && val) s = hpt_dataloader_set_pack(tr->val, o->pack);
    if (s == HPT_OK && val && !o->val) s = order_data(tr, tr->val, 1);
    if (s == HPT_OK) s = trainer_save_paths(tr);
    if (s == HPT_OK && o->save_dir) s = mkdir_p(o->save_dir);
    if (s == HPT_OK && o->save_dir) s = mkdir_p(tr->state_dir);
    if (s == HPT_OK && HYBRID(tr)) {
        /* the plan check saw the plan's optimizer; a resumed run's is its checkpoint's */
        if (o->sched.predictor == HPT_PREDICTOR_ADAM && !hpt_optim_m(tr->opt))
            s = hpt_fail(HPT_ERR_UNSUPPORTED, "the adam predictor reads AdamW's 32-bit moments: use "
                         "--optimizer adamw --state-bits 32, or --predictor linear");
        if (s == HPT_OK)
            s = predictor_init(&tr->pr, tr->mem, o->sched.predictor, nparams(tr),
                               (double)o->sched.fit_decay, o->seed);
        lossmodel_init(&tr->lm);
        hpt_schedule_init(&tr->sch, &o->sched);
        if (s == HPT_OK && o->sched.check_every > 0) s = trainer_load_check_batch(tr);
        if (s == HPT_OK && JUMP(tr)) s = trainer_load_heldout(tr);
        if (s == HPT_OK && o->resume) s = trainer_restore_schedule(tr, sec, n_sec, path);
    }
    hpt_state_sections_free(tr->mem, sec, n_sec);
    return s;
}

hpt_status hpt_trainer_create(hpt_mem *mem, const hpt_train_opts *opts, hpt_trainer **out) {
    *out = NULL;
    if (opts->plan.device) HPT_CHECK(train_gpu_check(opts));
    hpt_trainer *tr = calloc(1, sizeof *tr);
    if (!tr) return hpt_fail(HPT_ERR_OOM, "cannot allocate the trainer");
    tr->o = *opts;
    tr->mem = mem;
    hpt_mem_set_context(mem, 0, HPT_PHASE_SETUP, -1);
    /* the plan's budgets and disk directory are the run's: set on mem before anything; then
     * the device (a GPU takes its measured context overhead out of the device budget) */
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        if (opts->plan.budget_bytes[t]) hpt_mem_set_budget(mem, (hpt_tier)t, opts->plan.budget_bytes[t]);
    hpt_status s = hpt_device_bind(mem, opts->plan.device, NULL);
    tr->be = hpt_backend_of(mem);
    if (s == HPT_OK && opts->plan.offload_dir) s = hpt_mem_set_disk_dir(mem, opts->plan.offload_dir);
    model_grads_away(dp_sink_wanted(opts)); /* stage 2: the model's blocks' gradients away */
    if (s == HPT_OK) s = setup(tr);
    model_grads_away(0);
    if (s != HPT_OK) {
        hpt_trainer_free(tr);
        return s;
    }
    *out = tr;
    return HPT_OK;
}

int hpt_trainer_done(const hpt_trainer *tr) { return tr->step >= tr->o.steps; }
hpt_model *hpt_trainer_model(hpt_trainer *tr) { return tr->model; }
int64_t hpt_trainer_start_step(const hpt_trainer *tr) { return tr->start_step; }
const hpt_adamw_opts *hpt_trainer_optim_opts(const hpt_trainer *tr) { return hpt_optim_get_opts(tr->opt); }
size_t hpt_trainer_train_tokens(const hpt_trainer *tr) { return hpt_dataloader_num_tokens(tr->train); }
void hpt_trainer_data_split(const hpt_trainer *tr, int val, hpt_data_split *out) {
    *out = tr->split[val != 0];
}
const hpt_schedule *hpt_trainer_schedule(const hpt_trainer *tr) { return &tr->sch; }
hpt_optim *hpt_trainer_optim(hpt_trainer *tr) { return tr->opt; }

/* Targets of a batch y (n) that the loss counts: those >= 0 (masked shards' -1 are not). */
static int64_t count_targets(const int32_t *y, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += y[i] >= 0;
    return k;
}

static hpt_status eval_batches(hpt_trainer *tr, float *val_loss_out);

hpt_status hpt_trainer_eval(hpt_trainer *tr, float *val_loss_out) {
    *val_loss_out = NAN;
    if (!tr->val) return HPT_OK;
    HPT_CHECK(hpt_dataloader_rewind(tr->val));
    hpt_mem_set_context(tr->mem, tr->step, HPT_PHASE_EVAL, -1);
    hpt_model_lora_set_training(tr->model, 0); /* no adapter dropout while evaluating */
    hpt_status s = eval_batches(tr, val_loss_out);
    hpt_model_lora_set_training(tr->model, 1);
    return s;
}

static hpt_status eval_batches(hpt_trainer *tr, float *val_loss_out) {
    double sum = 0.0, wsum = 0.0;
    int64_t targets = 0;
    int n = tr->o.val_batches > 0 ? tr->o.val_batches : 1;
    for (int i = 0; i < n; i++) {
        const int32_t *x, *y;
        float loss;
        HPT_CHECK(hpt_dataloader_next(tr->val, &x, &y));
        HPT_CHECK(hpt_model_set_positions(tr->model, hpt_dataloader_positions(tr->val), tr->o.B,
                                          tr->o.T));
        HPT_CHECK(hpt_model_forward(tr->model, x, y, tr->o.B, tr->o.T, &loss));
        int64_t k = count_targets(y, (size_t)tr->o.B * tr->o.T);
        sum += (double)loss;
        wsum += (double)loss * (double)k;
        targets += k;
    }
    /* every token a target: the mean of the batches' losses, as before masks; else the mean
     * over all the batches' targets */
    *val_loss_out = targets == (int64_t)n * tr->o.B * tr->o.T ? (float)(sum / n)
                    : targets ? (float)(wsum / (double)targets) : 0.0f;
    return HPT_OK;
}

/* A run killed while writing a checkpoint leaves its temporary file (io_atomic's
 * "<name>.tmp.<pid>"; the checkpoint itself is intact; run.json's too). After a save, the ones of processes
 * that no longer exist are removed, so repeated kills do not fill the disk. */
static void sweep_stale_tmp(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        const char *t = strstr(de->d_name, ".bin.tmp."), *at = NULL; /* at: the pid */
        if (t && (!strncmp(de->d_name, "state.bin", 9) || !strncmp(de->d_name, "model.bin", 9) ||
                  !strncmp(de->d_name, "zero-", 5)))
            at = t + 9;
        else if (!strncmp(de->d_name, "run.json.tmp.", 13))
            at = de->d_name + 13;
        if (!at) continue;
        char *end;
        long pid = strtol(at, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", dir, de->d_name) < (int)sizeof path) unlink(path);
    }
    if (d) closedir(d);
}

static hpt_status save_files(hpt_trainer *tr);
static hpt_status save_shards(hpt_trainer *tr);

static hpt_status save_state(hpt_trainer *tr);

hpt_status hpt_trainer_save(hpt_trainer *tr) {
    if (!tr->o.save_dir) return hpt_fail(HPT_ERR_INVALID, "no save directory given");
    if (!dp_rank()) run_record_before_save(tr);
    hpt_status s = save_state(tr);
    if (s == HPT_OK && !dp_rank()) s = run_record_save(tr);
    return s;
}

static hpt_status save_state(hpt_trainer *tr) {
    /* LoRA: the adapters in PEFT's files, the frozen base untouched (docs/lora.md) */
    if (hpt_model_lora_on(tr->model)) {
        hpt_status s = dp_rank() ? HPT_OK : hpt_lora_save(tr->model, tr->o.save_dir, tr->o.model);
        if (s == HPT_OK && !dp_rank()) s = lora_state_save(tr, tr->o.save_dir);
        return dp_saved(s);
    }
    /* stages 1, 2 in memory, 1-3 in the engine: every rank its shard, rank 0 the manifest and
     * model.bin (zero.c) */
    if (tr->dp.stage || tr->o.offload.shards > 1) return dp_saved(save_shards(tr));
    /* many processes: rank 0 writes (every rank holds the same state); accum is the global one */
    if (dp_rank() != 0) return dp_saved(HPT_OK);
    return dp_saved(save_files(tr));
}

static hpt_status save_model_files(hpt_trainer *tr);
static int model_file_streams(const hpt_trainer *tr);

static hpt_status save_shards(hpt_trainer *tr) {
    hpt_train_pos pos = {.step = tr->step, .rng_state = tr->rng.s, .total_steps = tr->o.steps,
                         .B = tr->o.B, .T = tr->o.T,
                         .accum = (tr->o.accum > 1 ? tr->o.accum : 1) * dp_size()};
    hpt_dataloader_get_pos(tr->train, &pos.data_shard, &pos.data_offset);
    int64_t lsf[LSS_N] = {dbits((double)tr->ls), tr->ls_clean, tr->ls_skipped};
    /* the weights' files first, the state last: the state is the commit (save_files) */
    hpt_status s = dp_rank() == 0 ? save_model_files(tr)
                                  : dp_engine_follow(tr->model, model_file_streams(tr)); /* ZeRO-3's gathers */
    if (s == HPT_OK)
        s = zero_save(&tr->dp, tr->o.zero, tr->state_dir, tr->model, tr->opt, &tr->o.adamw, &pos,
                      tr->o.loss_scale.mode != HPT_LOSS_SCALE_OFF ? lsf : NULL);
    return s;
}

static hpt_status save_files(hpt_trainer *tr) {
    hpt_train_pos pos = {.step = tr->step, .rng_state = tr->rng.s, .total_steps = tr->o.steps,
                         .B = tr->o.B, .T = tr->o.T,
                         .accum = (tr->o.accum > 1 ? tr->o.accum : 1) * dp_size()};
    hpt_dataloader_get_pos(tr->train, &pos.data_shard, &pos.data_offset);
    hpt_state_section sec[7];
    int n = 0;
    int64_t f[HS_N], lsf[LSS_N], jf[JS_N];
    if (tr->o.loss_scale.mode != HPT_LOSS_SCALE_OFF) {
        lsf[LSS_SCALE] = dbits((double)tr->ls);
        lsf[LSS_CLEAN] = tr->ls_clean;
        lsf[LSS_SKIPPED] = tr->ls_skipped;
        sec[n++] = (hpt_state_section){.name = "loss_scale", .data = lsf, .bytes = sizeof lsf};
    }
    if (HYBRID(tr)) {
        size_t bytes = nparams(tr) * sizeof(float);
        trainer_pack_schedule(tr, f);
        sec[n++] = (hpt_state_section){.name = "schedule", .data = f, .bytes = sizeof f};
        if (tr->pr.s0) sec[n++] = (hpt_state_section){.name = "pred_s0", .data = tr->pr.s0, .bytes = bytes};
        if (tr->pr.s1) sec[n++] = (hpt_state_section){.name = "pred_s1", .data = tr->pr.s1, .bytes = bytes};
        if (tr->snapshot) sec[n++] = (hpt_state_section){.name = "snapshot", .data = tr->snapshot, .bytes = bytes};
        if (JUMP(tr)) {
            trainer_pack_jump(tr, jf);
            sec[n++] = (hpt_state_section){.name = "jump", .data = jf, .bytes = sizeof jf};
            if (jf[JS_COUNT])
                sec[n++] = (hpt_state_section){.name = "jump_ring", .data = tr->js.ring[jf[JS_FIRST]],
                                               .bytes = (uint64_t)jf[JS_COUNT] * bytes};
        }
    }
    /* the weights' files first, state.bin last: the state is the commit. A run killed between
     * the two resumes from the older state and writes both again; the other order left a
     * finished run's state beside the weights of its step before, which a resume at the last
     * step (nothing to do) never rewrote (test_crash) */
    HPT_CHECK(save_model_files(tr));
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/state.bin", tr->state_dir);
    HPT_CHECK(hpt_state_save_sections(path, tr->model, tr->opt, &tr->o.adamw, &pos, sec, n));
    zero_remove(tr->state_dir); /* a sharded checkpoint left in the directory is older now */
    return HPT_OK;
}

/* The streams of the weights save_model_files writes (model.bin, the Hugging Face files). */
static int model_file_streams(const hpt_trainer *tr) {
    return (hpt_model_get_config(tr->model)->arch == HPT_ARCH_GPT2) + trainer_saves_hf(tr);
}

/* model.bin (GPT-2) or the Hugging Face files beside the state. */
static hpt_status save_model_files(hpt_trainer *tr) {
    char path[PATH_MAX];
    /* llm.c's model.bin is GPT-2's; state.bin holds any architecture's weights */
    const int gpt2 = hpt_model_get_config(tr->model)->arch == HPT_ARCH_GPT2;
    if (gpt2) {
        snprintf(path, sizeof path, "%s/model.bin", tr->o.save_dir);
        HPT_CHECK(hpt_model_save(tr->model, path));
    }
    sweep_stale_tmp(tr->o.save_dir);
    if (strcmp(tr->state_dir, tr->o.save_dir)) sweep_stale_tmp(tr->state_dir);
    /* a run from a Hugging Face directory, or of an architecture llm.c's file does not hold,
     * saves one too (config.json + safetensors; the state lies beside it: save_dir.c) */
    struct stat st;
    int from_dir = tr->o.model && stat(tr->o.model, &st) == 0 && S_ISDIR(st.st_mode);
    if (trainer_saves_hf(tr))
        return hpt_model_save_hf_from(tr->model, tr->o.save_dir, tr->save_dtype, 0,
                                      from_dir ? tr->o.model : NULL);
    return HPT_OK;
}

/* The check batch's loss: B forwards of one sequence each (a B=1 arena, freed after), the
 * mean over sequences (= the batch's mean over tokens: equal counts). With int8 check weights:
 * an int8 engine quantised from the current weights (hpt_infer_create), its loss over the
 * batch (one sequence at a time, from an empty cache), freed: made for each check, since the
 * weights move between checks and a kept engine would hold its bytes through the phase. */
static hpt_status check_loss(hpt_trainer *tr, double *out) {
    int B = tr->o.B, T = tr->o.T;
    if (tr->o.sched.check_weights == HPT_WEIGHTS_Q8) {
        hpt_infer *inf;
        float loss;
        HPT_CHECK(hpt_infer_create(tr->mem, tr->model, HPT_WEIGHTS_Q8, T, &inf));
        hpt_status s = hpt_infer_loss(inf, tr->check_x, tr->check_y, B, T, &loss);
        hpt_infer_free(inf);
        if (s == HPT_OK) *out = (double)loss;
        return s;
    }
    double sum = 0.0;
    for (int b = 0; b < B; b++) {
        float loss;
        hpt_status s = hpt_model_forward(tr->model, tr->check_x + (size_t)b * T,
                                        tr->check_y + (size_t)b * T, 1, T, &loss);
        if (s != HPT_OK) {
            hpt_model_free_activations(tr->model);
            return s;
        }
        sum += (double)loss;
    }
    hpt_model_free_activations(tr->model);
    *out = sum / B;
    return HPT_OK;
}

static void rollback(hpt_trainer *tr) {
    tr->be->copy(model_params(tr->model), tr->snapshot, nparams(tr) * sizeof(float), HPT_COPY_H2D);
}

/* Relative excess of a loss over its prediction: 0 within the band, 1 above, 2 beyond the
 * rollback bound (a non-finite loss is beyond it). slack widens both: twice the batch noise
 * for a training batch's loss, 0 for the fixed check batch. */
static int divergence(const hpt_trainer *tr, double excess, double slack) {
    if (!isfinite(excess) || excess > (double)tr->o.sched.rollback + slack) return 2;
    return excess > (double)tr->o.sched.band + slack ? 1 : 0;
}

/* One PREDICT step: phase start (snapshot, predicted loss, baseline check) at k = 0; a check
 * when due; the predicted update unless the check ended the phase. */
static hpt_status predict_step(hpt_trainer *tr, hpt_train_progress *p) {
    const hpt_schedule_opts *so = &tr->o.sched;
    int64_t k = tr->sch.in_phase;
    hpt_model_free_activations(tr->model); /* an evaluation's (hpt_trainer_eval called alone) */
    if (JUMP(tr)) { /* the whole phase is one jump from the last snapshot (= the weights) */
        jump_env env = {.params = model_params(tr->model), .opt = tr->opt, .ctx = tr,
                        .loss = trainer_seq_loss};
        const hpt_tensor_table *ts = model_table(tr->model); /* checkpoint order */
        env.n_tensors = ts->n;
        for (int i = 0; i < ts->n; i++) {
            const hpt_tensor_desc *d = &ts->t[i];
            env.off[i + 1] = env.off[i] + hpt_tensor_numel(d);
            env.group[i] = !d->is_matrix ? JUMP_GROUP_VECTORS
                           : d->layer == -1 ? JUMP_GROUP_EMBEDDINGS : JUMP_GROUP_MATRICES;
        }
        jump_result r;
        HPT_CHECK(jump_run(&tr->js, so, &env, tr->step - tr->sch.n_predict_steps, &r));
        p->jumped = 1;
        p->checked = 1;
        p->loss = (float)r.loss1;
        p->pred_loss = (float)r.loss0;
        p->diverged = r.rolled_back ? 2 : 0;
        p->jump_scale = r.scale;
        memcpy(p->jump_scales, r.scales, sizeof p->jump_scales);
        p->jump_gain = r.gain;
        p->jump_search_ms = r.search_ms;
        p->jump_forwards = r.forwards;
        return HPT_OK;
    }
    if (k == 0) {
        size_t bytes = nparams(tr) * sizeof(float);
        if (!tr->snapshot) {
            hpt_mem_set_name(tr->mem, "rollback snapshot");
            HPT_CHECK(tr->be->alloc(tr->mem, HPT_TIER_HOST, HPT_CAT_PARAMS, bytes, (void **)&tr->snapshot));
        }
        tr->be->copy(tr->snapshot, model_params(tr->model), bytes, HPT_COPY_D2H);
        hpt_mem_transfer(tr->mem, HPT_TIER_DEVICE, HPT_TIER_HOST, HPT_CAT_PARAMS, bytes);
        lossmodel_begin_predict(&tr->lm);
        tr->pred0 = tr->lm.pred;
        tr->check0 = NAN;
        if (so->check_every > 0) {
            HPT_CHECK(check_loss(tr, &tr->check0));
            p->checked = 1;
            p->loss = (float)tr->check0;
        }
    } else if (so->check_every > 0 && k % so->check_every == 0) {
        double c;
        HPT_CHECK(check_loss(tr, &c));
        p->checked = 1;
        p->loss = (float)c;
        double excess = (c - tr->check0 - (tr->lm.pred - tr->pred0)) / tr->check0;
        p->diverged = divergence(tr, excess, 0.0);
        lossmodel_phase_error(&tr->lm, excess);
        if (p->diverged == 2) {
            rollback(tr);
            tr->lm.pred = tr->pred0;
        }
    }
    p->pred_loss = (float)tr->lm.pred;
    if (!p->diverged) {
        double un;
        HPT_CHECK(predictor_apply(&tr->pr, tr->model, tr->opt, k, tr->step, p->lr, &un));
        lossmodel_predict_step(&tr->lm, un);
    }
    return HPT_OK;
}

/* An overflowing step: no update (weights, optimizer state and its step count stay); S halves
 * (DYNAMIC, down to 1). An overflow at S = 1 is the gradients' own: an error. */
static hpt_status scaler_skip(hpt_trainer *tr, hpt_train_progress *p) {
    if (tr->ls <= 1.0f)
        return hpt_fail(HPT_ERR_INVALID, "a gradient overflows at loss scale 1 (step %lld): "
                        "training diverged (try a lower --lr)", (long long)tr->step + 1);
    p->skipped = 1;
    p->grad_norm = NAN;
    tr->ls_skipped++;
    tr->ls_clean = 0;
    if (tr->o.loss_scale.mode == HPT_LOSS_SCALE_DYNAMIC) tr->ls *= 0.5f;
    return HPT_OK;
}

/* A step that updated: after window of them in a row, S doubles (DYNAMIC, up to 2^24). */
static void scaler_clean(hpt_trainer *tr) {
    if (tr->o.loss_scale.mode != HPT_LOSS_SCALE_DYNAMIC) return;
    if (++tr->ls_clean < tr->o.loss_scale.window) return;
    tr->ls_clean = 0;
    if (tr->ls < LS_GROW_MAX) tr->ls *= 2.0f;
}

/* Micro-batch k of K summed apart (--zero, many processes): its gradients were computed into
 * zeroed buffers; acc = g_0, acc += g_k, and the last one's sum lands in the gradients: the
 * order N processes add theirs in (dist.h), so one process with --accum N computes their bits. */
static hpt_status sum_apart(hpt_trainer *tr, int k, int K) {
    float *g = model_grads(tr->model);
    size_t n = model_grads_floats(tr->model);
    if (tr->dp.stage == 2) { /* the owned values only, each micro-batch already summed over the
                              * processes (the reduce-scatter after its backward) */
        HPT_CHECK(dp_reduce_scatter(&tr->dp, g, n));
        g += tr->dp.plo[tr->dp.rank];
        n = tr->dp.phi[tr->dp.rank] - tr->dp.plo[tr->dp.rank];
    } else if (dp_engine_per_micro(&tr->o)) { /* the engine's stages 1-3: as its blocks' */
        HPT_CHECK(dp_engine_zemb(tr) ? dp_engine_zemb_reduce(tr) : dp_reduce_grads(g, n));
    }
    if (!tr->acc) {
        hpt_mem_set_name(tr->mem, "gradient sum (micro-batches apart)");
        HPT_CHECK(tr->be->alloc(tr->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, n * sizeof(float), (void **)&tr->acc));
        tr->acc_n = n;
    }
    if (k == 0) tr->be->copy(tr->acc, g, n * sizeof(float), HPT_COPY_D2D);
    else if (k < K - 1) dp_add(tr->be, tr->acc, g, n);
    else dp_add(tr->be, g, tr->acc, n);
    return HPT_OK;
}

/* The factor that turns the K*N micro-batches' summed gradients, each of its targets' loss sum
 * over B*T, into the gradient of the step's loss: the sum over all n_step targets of the step
 * (every micro-batch, every process) over n_step. Every token a target: 1/KN, the bits of the
 * step before masks; no target at all: the gradients are 0 and so is the loss. */
static float target_scale(double n_step, double BT, int KN) {
    if (n_step == BT * KN || n_step <= 0) return 1.0f / (float)KN;
    return (float)(BT / n_step);
}

/* One ordinary step (WARMUP, FULL, CORRECT; every step of a full-only run). */
static hpt_status real_step(hpt_trainer *tr, hpt_train_progress *p) {
    const hpt_train_opts *o = &tr->o;
    int hybrid = HYBRID(tr);
    int first_correct = hybrid && tr->sch.phase == HPT_PHASE_CORRECT && tr->sch.in_phase == 0;
    if (first_correct) { /* back from a predict phase: state, gradients, a fresh fit */
        HPT_CHECK(hpt_optim_set_tier(tr->opt, HPT_TIER_DEVICE));
        HPT_CHECK(hpt_model_acquire_grads(tr->model));
        HPT_CHECK(predictor_end(&tr->pr));
    }
    int measure = first_correct && tr->sch.clean && tr->snapshot;
    double pred = !hybrid || tr->lm.n < 1.0 ? (double)NAN : first_correct ? tr->lm.pred : lossmodel_next(&tr->lm);
    int K = o->accum > 1 ? o->accum : 1;
    int apart = K > 1 && dp_apart(o), KN = K * dp_size();
    int sink = tr->dp.slot != NULL; /* stage 2: each layer's gradients onto the owners at once */
    double loss_sum = 0.0, wloss_sum = 0.0, n_step = 0.0; /* n_step: targets (all ranks) */
    double real = 0.0; /* tokens that are not padding (all ranks) */
    const double BT = (double)o->B * o->T;
    int fused = o->offload.fused;
    int scaling = o->loss_scale.mode != HPT_LOSS_SCALE_OFF;
    p->lr = hpt_lr_cosine(tr->step, o->steps, o->warmup, o->lr, o->min_lr);
    p->loss_scale = tr->ls; /* 1 without scaling */
    model_set_loss_scale(tr->model, tr->ls);
    if (tr->fault_step == tr->step + 1) model_set_fault(tr->model, tr->fault_layer, tr->fault_value);
    hpt_model_zero_grad(tr->model);
    /* each micro-batch's gradient is that of its targets' loss sum / B*T; the step's count of
     * targets corrects the scale below (docs/targets.md) */
    model_set_loss_norm(tr->model, BT);
    dp_skip_before(tr->train, K); /* this rank's K windows of the step's K*N */
    for (int k = 0; k < K; k++) {
        const int32_t *x, *y;
        float loss;
        if (apart && k > 0) hpt_model_zero_grad(tr->model);
        HPT_CHECK(hpt_dataloader_next(tr->train, &x, &y));
        /* packed examples: each token's position in its example (NULL: none) */
        HPT_CHECK(hpt_model_set_positions(tr->model, hpt_dataloader_positions(tr->train), o->B,
                                          o->T));
        real += (double)hpt_dataloader_real_tokens(tr->train);
        HPT_CHECK(hpt_model_forward(tr->model, x, y, o->B, o->T, &loss));
        if (k == 0 && measure) { /* the prediction's error; past the bound, back to the start */
            double excess = ((double)loss - pred) / fmax(pred, 1e-6);
            p->diverged = divergence(tr, excess, 2.0 * tr->lm.noise);
            lossmodel_phase_error(&tr->lm, fmax(0.0, fabs(excess) - 2.0 * tr->lm.noise));
            if (p->diverged == 2) {
                rollback(tr);
                HPT_CHECK(hpt_model_forward(tr->model, x, y, o->B, o->T, &loss));
            }
        }
        if (!isfinite(loss))
            return hpt_fail(HPT_ERR_INVALID, "the loss is %g at step %lld: training diverged (try "
                            "a lower --lr)", (double)loss, (long long)tr->step + 1);
        double nk = (double)count_targets(y, (size_t)BT);
        wloss_sum += (double)loss * nk;
        n_step += nk;
        if (fused) { /* K = 1. N processes: their sum times 1/N, as the unfused step's 1/KN */
            HPT_CHECK(dp_loss_sum(n_step, &n_step)); /* the step's targets, before the update */
            HPT_CHECK(hpt_optim_fused_begin_scaled(tr->opt, p->lr, o->grad_clip,
                                                   target_scale(n_step, BT, KN)));
        }
        if (apart) HPT_CHECK(dp_engine_micro(model_engine(tr->model), k, K)); /* engine's homes */
        if (sink) dp_sink_begin(&tr->dp, k);
        HPT_CHECK(hpt_model_backward(tr->model)); /* += into the gradients (fused: updates) */
        if (sink) HPT_CHECK(dp_sink_end(&tr->dp)); /* and the non-block tensors' */
        else if (apart) HPT_CHECK(sum_apart(tr, k, K));
        loss_sum += (double)loss;
    }
    model_set_fault(tr->model, -1, 0.0f);
    if (apart) HPT_CHECK(dp_engine_micro(model_engine(tr->model), K, K));
    HPT_CHECK(dp_engine_after_backward(model_engine(tr->model))); /* ZeRO-3: the norm's parts */
    dp_skip_after(tr->train, K);
    HPT_CHECK(dp_loss_sum(loss_sum, &loss_sum));
    HPT_CHECK(dp_loss_sum(wloss_sum, &wloss_sum));
    HPT_CHECK(dp_loss_sum(real, &tr->real_tokens));
    if (!fused) HPT_CHECK(dp_loss_sum(n_step, &n_step));
    /* stage 0: every value summed on every rank; 1: the owned ones; 2 with accumulation: done
     * per micro-batch (sum_apart) */
    int reduce = !sink && !((tr->dp.stage == 2 || dp_engine_per_micro(&tr->o)) && apart);
    if (dp_engine_zemb(tr)) { /* the engine's ZeRO: wte, wpe, lnf onto their owners too */
        if (reduce) HPT_CHECK(dp_engine_zemb_reduce(tr));
        HPT_CHECK(dp_engine_zemb_norm(tr));
    } else if (reduce) {
        HPT_CHECK(dp_reduce_scatter(&tr->dp, model_grads(tr->model), model_grads_floats(tr->model)));
    }
    /* KN = 1: the loss is the micro-batch's, exactly (a float through a double and back).
     * Masked data: the mean over the step's targets (0 without any). */
    p->loss = n_step == BT * KN ? (float)(loss_sum / KN)
              : n_step > 0 ? (float)(wloss_sum / n_step) : 0.0f;
    if (scaling) {
        int overflow;
        int done = 0; /* without ZeRO and the fused update: from the norm's sums (one round trip) */
        if (tr->dp.stage) HPT_CHECK(dp_overflow(&tr->dp, tr->be, model_grads(tr->model), &overflow));
        else if (!fused) HPT_CHECK(optim_grads_overflow(tr->opt, &overflow, &done));
        if (!tr->dp.stage && !done) HPT_CHECK(model_grads_overflow(tr->model, &overflow));
        if (overflow) return scaler_skip(tr, p);
    }
    if (fused)
        HPT_CHECK(hpt_optim_fused_end(tr->opt, &p->grad_norm));
    else /* 1/S: a power of two, so the product with 1/K and the clip factor loses nothing */
        HPT_CHECK(hpt_optim_step_scaled(tr->opt, p->lr, o->grad_clip,
                                        target_scale(n_step, BT, KN) * (1.0f / tr->ls),
                                        &p->grad_norm));
    HPT_CHECK(dp_gather_params(&tr->dp, model_params(tr->model))); /* stages 1, 2: the owners' */
    if (scaling) scaler_clean(tr);
    if (hybrid) {
        p->pred_loss = (float)pred;
        if (p->diverged == 2) tr->lm.pred = tr->pred0; /* the rolled-back weights' prediction */
        /* the loss model's step size: AdamW's exact update norm (a pass over m and v, half a
         * step at 11M parameters) only where the confidence decides the phases; the jump's
         * schedule ignores it, so lr x gradient norm (docs/predict.md) */
        double un = JUMP(tr) ? (double)p->lr * (double)p->grad_norm
                             : predictor_real_update_norm(tr->opt, nparams(tr), p->lr, p->grad_norm);
        lossmodel_observe(&tr->lm, (double)p->loss, (double)p->grad_norm, un, first_correct);
        HPT_CHECK(predictor_observe(&tr->pr, model_params(tr->model), p->lr));
        if (first_correct) free_snapshot(tr);
    }
    return HPT_OK;
}

hpt_status hpt_trainer_step(hpt_trainer *tr, hpt_train_progress *p) {
    memset(p, 0, sizeof *p);
    p->loss_scale = tr->ls;
    p->val_loss = NAN;
    p->pred_loss = NAN;
    if (hpt_trainer_done(tr)) return hpt_fail(HPT_ERR_INVALID, "training is already complete");
    const hpt_train_opts *o = &tr->o;
    double t0 = hpt_now();
    int phase = HYBRID(tr) ? tr->sch.phase : HPT_PHASE_FULL;
    hpt_mem_set_context(tr->mem, tr->step + 1, (hpt_phase)phase, -1);
    p->phase = phase;
    p->lr = hpt_lr_cosine(tr->step, o->steps, o->warmup, o->lr, o->min_lr);
    if (phase == HPT_PHASE_PREDICT) {
        p->loss = NAN;
        HPT_CHECK(predict_step(tr, p));
    } else {
        HPT_CHECK(real_step(tr, p));
    }
    tr->step++;
    if (HYBRID(tr)) {
        p->confidence = (float)lossmodel_confidence(&tr->lm, (double)o->sched.band);
        if (JUMP(tr) && phase == HPT_PHASE_FULL && !tr->sch.stopped) { /* FULL's snapshots */
            int64_t slot = jump_slot(&o->sched, tr->sch.in_phase + 1);
            if (slot >= 0) jump_snapshot(&tr->js, slot, model_params(tr->model));
        }
        hpt_schedule_obs ob = {.confidence = p->confidence, .diverged = p->diverged,
                               .steps_left = o->steps - tr->step, .jump_gain = p->jump_gain};
        hpt_schedule_advance(&tr->sch, &o->sched, &ob);
        if (phase == HPT_PHASE_PREDICT && p->diverged) free_snapshot(tr); /* no measure follows */
        /* a predict phase next: its memory is released now, by this step */
        if (phase != HPT_PHASE_PREDICT && tr->sch.phase == HPT_PHASE_PREDICT) {
            predictor_begin(&tr->pr); /* the fit's sums become velocities (s0 freed) */
            HPT_CHECK(trainer_predict_memory(tr));
        }
    }
    double dt = hpt_now() - t0;
    p->step = tr->step;
    p->total = o->steps;
    p->step_ms = dt * 1e3;
    /* real tokens only: padding of packed or padded examples is not counted (docs/packing.md) */
    p->tokens_per_s = phase == HPT_PHASE_PREDICT ? 0.0 : tr->real_tokens / dt;
    int last = hpt_trainer_done(tr);
    if (tr->val && (last || (o->eval_every > 0 && tr->step % o->eval_every == 0))) {
        HPT_CHECK(hpt_trainer_eval(tr, &p->val_loss));
        p->evaluated = 1;
        /* a predict phase holds no B-sized arena: the evaluation's goes with it */
        if (HYBRID(tr) && tr->sch.phase == HPT_PHASE_PREDICT) hpt_model_free_activations(tr->model);
    }
    if (o->save_dir && (last || (o->save_every > 0 && tr->step % o->save_every == 0))) {
        HPT_CHECK(hpt_trainer_save(tr));
        p->saved = 1;
    }
    hpt_mem_stats st;
    hpt_mem_get_stats(tr->mem, &st);
    p->mem_peak_bytes = st.peak_bytes[HPT_TIER_DEVICE];
    p->rss_peak_bytes = hpt_rss_peak_bytes();
    p->skipped_total = tr->ls_skipped;
    return HPT_OK;
}
