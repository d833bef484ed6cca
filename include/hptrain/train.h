/* hptrain/train.h: the trainer (data, schedule, evaluation, checkpoints, resume) and the
 * verification against a PyTorch reference state. Part of hptrain.h.
 *
 * An hpt_train_opts holds a run's data, steps and learning rate and its plan; hpt_trainer_create
 * checks the plan, refuses a budget it cannot meet, and builds the model, optimizer and loaders;
 * hpt_trainer_step runs one optimizer step at a time (the loop is the caller's, so a caller
 * logs, stops or saves between steps). */
#ifndef HPTRAIN_TRAIN_H
#define HPTRAIN_TRAIN_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

typedef struct {
    const char *model;     /* llm.c checkpoint path or SHAPE (random init); unused on resume */
    const char *data;      /* glob of training shards */
    const char *val;       /* glob of validation shards, or NULL */
    const char *resume;    /* directory holding state.bin, or NULL */
    const char *save_dir;  /* directory of the saved weights, or NULL; the state goes to
                            * hpt_train_state_dir's directory */
    int B, T;
    int64_t steps;         /* total optimizer steps of the run (a resumed run continues to it) */
    float lr, min_lr;      /* peak and final learning rate (cosine) */
    int64_t warmup;        /* linear warmup steps */
    float grad_clip;       /* global-norm clip; 0 disables */
    int64_t eval_every;    /* validation every N steps and at the end; 0: only at the end */
    int val_batches;       /* batches per validation */
    int64_t save_every;    /* checkpoint every N steps and at the end; 0: only at the end */
    uint64_t seed;
    /* every technique choice and the budgets (hpt_trainer_create applies the plan's budgets
     * and disk directory to its hpt_mem); also by the members' own names: o.act is o.plan.act */
    union {
        hpt_plan plan;
        struct { HPT_PLAN_MEMBERS };
    };
    const char *adapter;   /* LoRA adapters to start from (PEFT's files: adapter_config.json
                            * and adapter_model.safetensors; their settings replace lora's), or
                            * NULL (docs/lora.md) */
    int save_dtype;        /* a save's Hugging Face files: HPT_DTYPE_F32 or HPT_DTYPE_BF16;
                            * -1 (the default): the dtype of the --model directory's weights,
                            * else f32 (docs/formats.md) */
    const char *run_record; /* a JSON object the caller keeps beside every save as DIR/run.json
                             * (borrowed; NULL: none): what it needs to continue the run from
                             * DIR alone (the command line's flags; docs/formats.md) */
    double val_split;      /* > 0 (val NULL): this fraction of data's tokens, whole documents
                            * chosen by data_seed, is the validation set (docs/data.md) */
    int shuffle;           /* 1: the training rows in a permutation per epoch (data_seed); a
                            * resume from a walk's position (no split) continues the walk */
    uint64_t data_seed;    /* the split's and the order's seed (default 1234) */
} hpt_train_opts;
hpt_train_opts hpt_train_defaults(void);
/* The estimator's options for the run o describes on the shape cfg (what the trainer's budget
 * check estimates; hpt_plan_estimate of it gives the run's peaks). */
hpt_plan_opts hpt_train_plan_opts(const hpt_train_opts *o, const hpt_model_config *cfg);

typedef struct {
    int64_t step, total;   /* steps completed after this call, of total */
    float loss;            /* training loss of this step's batch, before its update (with
                            * accumulation: the mean of the micro-batches' losses) */
    float val_loss;        /* when evaluated is 1 */
    int evaluated, saved;
    float lr, grad_norm;
    double step_ms;        /* forward + backward + update (not evaluation or saving) */
    double tokens_per_s;
    uint64_t mem_peak_bytes; /* accounted device-tier peak so far */
    uint64_t rss_peak_bytes;
    int phase;             /* hpt_phase of this step (FULL throughout a full-only run) */
    float pred_loss;       /* the dynamics model's predicted loss of this step (NaN if none) */
    float confidence;      /* the dynamics model's confidence after the step, [0, 1] */
    int checked;           /* PREDICT: a check forward ran; loss is its loss (NaN otherwise) */
    int diverged;          /* 1: the phase ended early; 2: the weights were rolled back */
    float loss_scale;      /* the loss scale this step used (1 without loss scaling) */
    int skipped;           /* 1: a gradient overflowed, the update was skipped */
    int64_t skipped_total; /* steps skipped so far in the run (a resumed run counts from its
                            * first start: the count is in the checkpoint) */
    int jumped;            /* the jump predictor jumped in this step (rolled back: diverged 2) */
    double jump_scale;     /* its scale along the fitted direction (0: rolled back) */
    double jump_scales[3]; /* per group: embeddings, the blocks' matrices, vectors */
    double jump_gain;      /* its gain in real steps' worth of loss (1e30: no rate yet) */
    double jump_search_ms; /* its fit and line search, of step_ms */
    int64_t jump_forwards; /* sequences it forwarded */
} hpt_train_progress;

typedef struct hpt_trainer hpt_trainer;
/* Builds model, optimizer and data loaders from opts (loading or resuming as asked). First
 * sets on mem the budgets the plan names (those not 0) and its disk directory, and checks the
 * plan (hpt_plan_check); then refuses, before allocating for it, a run whose estimated device
 * peak passes the device budget (the plan's, or else one set on mem beforehand). */
hpt_status hpt_trainer_create(hpt_mem *mem, const hpt_train_opts *opts, hpt_trainer **out);
void hpt_trainer_free(hpt_trainer *tr);
/* Runs one optimizer step (plus evaluation and checkpoint when due). */
hpt_status hpt_trainer_step(hpt_trainer *tr, hpt_train_progress *out);
int hpt_trainer_done(const hpt_trainer *tr);
/* Evaluates the validation loss now (NaN if there is no validation data). */
hpt_status hpt_trainer_eval(hpt_trainer *tr, float *val_loss_out);
/* Writes the save now (needs save_dir): the weights into save_dir (llm.c's model.bin for GPT-2;
 * a Hugging Face directory for a run from one or of another architecture), the training state
 * (state.bin, or ZeRO's manifest and shards) into hpt_trainer_state_dir, then the run record
 * (opts.run_record) there as run.json. */
hpt_status hpt_trainer_save(hpt_trainer *tr);
/* The directory a save's training state goes to: save_dir itself, or, when the save writes a
 * Hugging Face directory there (hf 1), "save_dir.state" beside it, so the exported directory
 * holds the model only. The one place that decides (save_dir.c). */
hpt_status hpt_train_state_dir(const char *save_dir, int hf, char *buf, size_t n);
/* The save directory whose state state_dir is (hpt_train_state_dir's inverse): DIR for a
 * DIR.state beside a Hugging Face DIR, else state_dir itself. */
hpt_status hpt_train_save_dir_of(const char *state_dir, char *buf, size_t n);
/* The state directory --resume dir reads: dir.state when it holds a state, else dir. */
hpt_status hpt_train_resume_dir(const char *dir, char *buf, size_t n);
/* This run's state directory (NULL without save_dir); and the files its last save wrote, as
 * one line of text ("out/config.json, ...; the training state out.state/state.bin"). */
const char *hpt_trainer_state_dir(const hpt_trainer *tr);
hpt_status hpt_trainer_saved_files(const hpt_trainer *tr, char *buf, size_t n);
/* The run record saved in dir/run.json (hpt_train_opts.run_record, as a JSON object's text,
 * malloc'd: the caller frees it) and the step it was saved at; *record_out NULL when dir has
 * none (a save made before records, or by a caller that gave none). HPT_ERR_FORMAT or
 * HPT_ERR_CHECKSUM for a damaged file. */
hpt_status hpt_run_record_read(const char *dir, char **record_out, int64_t *step_out);
hpt_model *hpt_trainer_model(hpt_trainer *tr);
int64_t hpt_trainer_start_step(const hpt_trainer *tr);       /* > 0 after a resume */
/* The optimizer settings in use (a resumed run's come from its checkpoint). */
const hpt_adamw_opts *hpt_trainer_optim_opts(const hpt_trainer *tr);
size_t hpt_trainer_train_tokens(const hpt_trainer *tr);
/* The training (val 0) or validation (1) set that val_split or shuffle made (zeros: none). */
void hpt_trainer_data_split(const hpt_trainer *tr, int val, hpt_data_split *out);
/* The hybrid schedule's controller (phase of the next step, counts); FULL in a full-only run. */
const hpt_schedule *hpt_trainer_schedule(const hpt_trainer *tr);

/* ---- train: verification against a PyTorch reference state -------------------------- */

#define HPT_VERIFY_MAX_STEPS 64
#define HPT_VERIFY_MAX_TENSORS 16 /* the first tensors of the table compared (GPT-2: all) */
typedef struct {
    hpt_model_config cfg;
    int B, T;
    double logits_rel_err;                       /* ||ours - ref|| / ||ref|| over (B,T,V) */
    double loss_rel_err;
    float loss, ref_loss;
    double grad_rel_err[HPT_VERIFY_MAX_TENSORS]; /* norm-wise, per tensor */
    const char *grad_name[HPT_VERIFY_MAX_TENSORS];
    int n_grads;                                 /* entries of grad_name, grad_rel_err */
    int n_steps;                                 /* AdamW steps compared (0: no steps file) */
    float step_loss[HPT_VERIFY_MAX_STEPS], ref_step_loss[HPT_VERIFY_MAX_STEPS];
    double max_step_rel_err;
    double tol;
    int passed;                                  /* every figure within tol */
} hpt_verify_report;

/* Loads an llm.c checkpoint and reference state (or, with a SHAPE as model_path, a model of
 * that shape whose parameters come from a version-3 reference state: src/train/verify.c),
 * runs forward and backward on its batch and
 * compares logits, loss and every gradient; with steps_json (may be NULL: llm.c-style JSON
 * with "adamw": {lr, beta1, beta2, eps, weight_decay} and "losses": [...]) also runs that
 * many AdamW steps (weight decay on every tensor) comparing the loss before each. Returns
 * HPT_OK when the comparison ran (see report->passed), an error status otherwise. */
hpt_status hpt_verify(hpt_mem *mem, const char *model_path, const char *state_path,
                      const char *steps_json, double tol, hpt_verify_report *report);

#endif /* HPTRAIN_TRAIN_H */
