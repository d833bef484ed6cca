/* hptrain/schedule.h: the hybrid predict schedule (docs/predict.md): its options (a choice of
 * the plan) and its phase controller, which the trainer runs. Part of hptrain.h. */
#ifndef HPTRAIN_SCHEDULE_H
#define HPTRAIN_SCHEDULE_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

/* ---- train: the hybrid predict schedule (docs/predict.md) --------------------------
 *
 * A run in four phases: WARMUP (ordinary steps; the statistics start), FULL (ordinary steps
 * that also fit the predictor), PREDICT (the weights move by predicted per-parameter updates:
 * no data, no forward except optional checks, no backward; gradients and activations are
 * released and optimizer state the predictor does not read moves to the host tier), CORRECT
 * (ordinary steps again; the first one measures the prediction's error and may roll back).
 *
 *   WARMUP --warmup_steps--> FULL --full_steps, confidence >= threshold--> PREDICT
 *   FULL --full_steps, confidence below (or too few steps left)--> FULL (another round)
 *   PREDICT --horizon steps--> CORRECT; --loss above the band (a check)--> CORRECT (early);
 *           --loss beyond the rollback bound--> weights back to the phase's start, CORRECT
 *   CORRECT --correct_steps, confident--> PREDICT;  --not confident--> FULL
 * The horizon of a predict phase: max(1, round(max_predict_steps * cap * r)), r = (c - thr) /
 * (1 - thr) for confidence c and threshold thr (1 when thr = 1), cap in (0, 1] halved after each
 * early end or rollback and doubled (up to 1) after each clean phase; never past the point where
 * correct_steps would no longer fit before the run's end. */
typedef enum { HPT_SCHEDULE_FULL = 0, HPT_SCHEDULE_HYBRID } hpt_schedule_kind;
typedef enum {
    HPT_PREDICTOR_ADAM = 0, /* the optimizer's own direction: AdamW fp32 m / (sqrt(v) + eps) */
    HPT_PREDICTOR_LINEAR,   /* per-parameter weighted linear fit of the recent weights */
    /* 2, 3: the testing predictors (zero, garbage), internal; checkpoints store the values */
    HPT_PREDICTOR_JUMP = 4, /* one jump far along the weights' trajectory fitted to K snapshots
                             * (docs/predict.md, "Jumps"): a predict phase of one step */
    HPT_PREDICTOR_COUNT = 5 /* bound on the values a plan or checkpoint may hold */
} hpt_predictor_kind;
/* "adam", "linear", "jump" (and the testing predictors' "zero", "garbage"); "?" out of range. */
const char *hpt_predictor_name(hpt_predictor_kind k);
/* "adam", "linear" or "jump"; anything else is HPT_ERR_INVALID. */
hpt_status hpt_predictor_parse(const char *name, hpt_predictor_kind *out);

typedef struct {
    int kind;                  /* hpt_schedule_kind */
    int64_t warmup_steps;      /* WARMUP steps at the start (>= 0) */
    int64_t full_steps;        /* FULL steps before a predict phase is considered (>= 1) */
    int64_t max_predict_steps; /* the longest predict phase (>= 1) */
    float confidence;          /* threshold in [0, 1] on the dynamics model's confidence */
    int64_t correct_steps;     /* CORRECT steps after each predict phase (>= 1) */
    int predictor;             /* hpt_predictor_kind */
    int64_t check_every;       /* a forward on the check batch every K predict steps; 0: none */
    int check_weights;         /* hpt_weights of the checks' forward: F32 (the model's weights,
                                * one sequence at a time), or Q8 (int8 copies of the current
                                * weights, one scale per output channel, made for each check and
                                * freed after it; hpt_infer_loss) */
    float band;                /* relative excess of the loss over its prediction that ends a
                                * predict phase early; also the confidence's error scale */
    float rollback;            /* relative excess beyond which the weights roll back (>= band) */
    float fit_decay;           /* linear predictor: weight of a sample one step older (0, 1) */
    /* the jump predictor: FULL (max(full_steps, (snapshots - 1) * stride + 1) steps) keeps
     * jump_snapshots weights, jump_stride steps apart, the last at the phase's end; a fit (hpt_jump_fit) of
     * each weight's trajectory extrapolated jump_horizon steps ahead gives the direction; the
     * scale along it is chosen by a line search on held-out batches (jump_search_batches
     * batches of validation windows after the evaluation's, forward only), confirmed on 2 more
     * (any rise there: rolled back); then jump_state (hpt_jump_state) applies to the moments;
     * the controller stops jumping after 2 jumps in a row that gained less than jump_min_gain
     * real steps' worth of loss. */
    int64_t jump_stride, jump_snapshots, jump_horizon;
    int jump_fit, jump_state, jump_search_batches;
    float jump_min_gain;
} hpt_schedule_opts;
typedef enum { HPT_JUMP_FIT_LINEAR = 0, HPT_JUMP_FIT_QUADRATIC, HPT_JUMP_FIT_EXP } hpt_jump_fit;
typedef enum { HPT_JUMP_STATE_KEEP = 0, HPT_JUMP_STATE_RESET, HPT_JUMP_STATE_ZERO_M } hpt_jump_state;
/* Full-only; hybrid values: warmup 50, full 20, max predict 20, confidence 0.5, correct 2,
 * adam, no checks (fp32 when on), band 0.05, rollback 0.2, fit decay 0.9. */
hpt_schedule_opts hpt_schedule_defaults(void);
/* HPT_ERR_INVALID naming the field out of range. */
hpt_status hpt_schedule_check(const hpt_schedule_opts *o);

/* The controller: plain data, checkpointed with the run. */
typedef struct {
    int phase;                 /* hpt_phase of the next step */
    int64_t in_phase;          /* steps done in the current phase */
    int64_t horizon;           /* PREDICT: the phase's planned length */
    float cap;                 /* horizon scale in (0, 1] */
    int clean;                 /* the last predict phase ran its horizon without divergence */
    int64_t n_predict_phases, n_predict_steps, n_early, n_rollback;
    /* jump predictor: jumps whose gain was below the threshold, in a row; 1: no more jumps */
    int64_t n_poor;
    int stopped;
} hpt_schedule;

/* What a step observed, for the transition after it. */
typedef struct {
    float confidence;          /* the dynamics model's after the step, in [0, 1] */
    int diverged;              /* PREDICT or a CORRECT phase's first step: 0 within the band,
                                * 1 above it, 2 beyond the rollback bound (rolled back) */
    int64_t steps_left;        /* optimizer steps of the run after this one */
    double jump_gain;          /* a jump: its gain in real steps' worth of loss (0 if rolled back) */
} hpt_schedule_obs;
void hpt_schedule_init(hpt_schedule *s, const hpt_schedule_opts *o);
/* The transition after one step in phase s->phase (the diagram above). */
void hpt_schedule_advance(hpt_schedule *s, const hpt_schedule_opts *o, const hpt_schedule_obs *ob);
/* The horizon rule alone (>= 1). */
int64_t hpt_schedule_horizon(const hpt_schedule_opts *o, float confidence, float cap);

#endif /* HPTRAIN_SCHEDULE_H */
