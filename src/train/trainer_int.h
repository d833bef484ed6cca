/* trainer_int.h: the trainer's object, shared by its two files: trainer.c (the loop, setup,
 * checkpoints) and trainer_hybrid.c (the hybrid schedule's checkpoint sections, its check and
 * held-out batches, the memory of a predict phase). */
#ifndef HPT_TRAINER_INT_H
#define HPT_TRAINER_INT_H

#include "core/core.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "train/train_int.h"

#include <string.h>

struct hpt_trainer {
    hpt_train_opts o;
    double real_tokens;       /* the last real step's tokens that are not padding (all ranks;
                               * docs/packing.md): tokens_per_s counts these */
    hpt_mem *mem;
    const hpt_backend *be;    /* mem's device tier's (hpt_backend_of): device copies */
    hpt_model *model;
    hpt_optim *opt;
    hpt_dataloader *train, *val;
    hpt_data_split split[2];  /* the training and validation sets (hpt_dataloader_order) */
    hpt_rng rng;
    int64_t step, start_step;
    /* the hybrid schedule (o.sched.kind HYBRID) */
    hpt_schedule sch;
    weight_predictor pr;
    lossmodel lm;
    float *snapshot;          /* (num_params) host tier, params: weights at the phase's start */
    int32_t *check_x, *check_y; /* (B, T) each, host tier, io: the check batch; NULL: none */
    double check0, pred0;     /* the phase's first check loss and predicted loss at its start */
    jump_state js;            /* the jump predictor's snapshots and held-out batches */
    /* loss scaling (o.loss_scale.mode not OFF) */
    float ls;                 /* S, a power of two in [1, 2^64] */
    int64_t ls_clean;         /* clean steps in a row since S last changed */
    int64_t ls_skipped;       /* steps skipped in the run (restored on resume) */
    /* data parallel (dp.c): the micro-batches' gradient sum, kept apart (dp_apart, accum > 1) */
    float *acc;               /* (num_params; stage 2: the owned values) device tier, grads; NULL
                               * until the first step */
    size_t acc_n;             /* its floats */
    dp_shard dp;              /* ZeRO's sharding (stage 0: one owner of everything) */
    /* where and how a save goes (save_dir.c) */
    char state_dir[4000];     /* the save's training state: o.save_dir or beside it; "": none */
    int save_dtype;           /* the Hugging Face files' dtype: HPT_DTYPE_F32 or _BF16 */
    /* testing: hpt_trainer_inject_grad */
    int64_t fault_step;
    int fault_layer;
    float fault_value;
    int record_fresh;         /* save_dir's run.json is this run's, or removed (run_record.c) */
};

/* ---- run_record.c: DIR/run.json beside the state (docs/formats.md, "The run record") ---- */
/* Before the run's first save: removes save_dir's record unless it is the resumed directory. */
void run_record_before_save(hpt_trainer *tr);
/* After the state files: o.run_record (if any) as save_dir/run.json, atomically. */
hpt_status run_record_save(const hpt_trainer *tr);

/* ---- lora_state.c: a LoRA run's training state beside its PEFT files (docs/lora.md) ---- */
hpt_status lora_state_save(const hpt_trainer *tr, const char *dir);
/* After the base, the adapters, the optimizer and the data loader are made: the saved step,
 * data position, RNG, dropout pass and optimizer state (refused when the run differs). */
hpt_status lora_state_load(hpt_trainer *tr, const char *dir);

/* ---- save_dir.c: where a save's files go (docs/formats.md) ---- */
/* 1 when a save writes a Hugging Face directory (a run from one, or not GPT-2). */
int trainer_saves_hf(const hpt_trainer *tr);
/* After the model is made: tr->state_dir and tr->save_dtype from the options (refuses
 * --save-dtype bf16 for a save that writes no Hugging Face directory). */
hpt_status trainer_save_paths(hpt_trainer *tr);

#define HYBRID(tr) ((tr)->o.sched.kind == HPT_SCHEDULE_HYBRID)
#define JUMP(tr) (HYBRID(tr) && (tr)->o.sched.predictor == HPT_PREDICTOR_JUMP)

/* Doubles (and floats, widened exactly) in a section's int64 fields, bit for bit. */
static inline int64_t dbits(double d) { int64_t b; memcpy(&b, &d, 8); return b; }
static inline double bitsd(int64_t b) { double d; memcpy(&d, &b, 8); return d; }
static inline size_t nparams(const hpt_trainer *tr) { return hpt_model_num_params(tr->model); }

/* ---- the hybrid schedule's checkpoint sections ----
 * "schedule": int64[HS_N], below; "pred_s0", "pred_s1": the linear predictor's arrays when
 * allocated; "snapshot": the rollback weights while they live. Doubles and floats are stored
 * as their bits (no struct padding reaches the file, so equal states give equal files). */
enum {
    HS_PHASE, HS_IN_PHASE, HS_HORIZON, HS_CAP, HS_CLEAN, HS_N_PHASES, HS_N_PSTEPS, HS_N_EARLY,
    HS_N_ROLLBACK, HS_PREDICTOR, HS_PW, HS_PA1, HS_PA2, HS_PSAMPLES, HS_PLR, HS_CHECK0, HS_PRED0,
    HS_LM, /* the loss model's doubles follow */
    HS_N = HS_LM + (int)(sizeof(lossmodel) / sizeof(double))
};

/* ---- the jump predictor's sections: "jump" int64[JS_N] below, "jump_ring" the snapshot slots
 * [first, first + count) taken so far in the FULL phase (one block) ---- */
enum { JS_PREV_LOSS, JS_PREV_STEP, JS_N_POOR, JS_STOPPED, JS_FIRST, JS_COUNT, JS_N };

/* ---- trainer_hybrid.c ---- */
void trainer_pack_schedule(const hpt_trainer *tr, int64_t f[HS_N]);
void trainer_pack_jump(const hpt_trainer *tr, int64_t f[JS_N]);
/* Restores the hybrid schedule's state from a checkpoint's sections (none: a fresh start). */
hpt_status trainer_restore_schedule(hpt_trainer *tr, const hpt_state_section *sec, int n_sec,
                                    const char *path);
/* The check batch: the validation set's first window, copied (host tier). */
hpt_status trainer_load_check_batch(hpt_trainer *tr);
/* The jump's held-out batches: the validation windows after the evaluation's. */
hpt_status trainer_load_heldout(hpt_trainer *tr);
/* Memory as a predict phase holds it: no gradients, no arena, the optimizer's state on the
 * host unless the predictor reads it. */
hpt_status trainer_predict_memory(hpt_trainer *tr);
/* The mean loss of nseq held-out sequences, one at a time (jump_env.loss; ctx: the trainer). */
hpt_status trainer_seq_loss(void *ctx, const int32_t *x, const int32_t *y, int nseq, double *out);

#endif
