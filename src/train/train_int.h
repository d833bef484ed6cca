/* train_int.h: the hybrid schedule's predictors and loss-dynamics model (src/train/predict.c),
 * shared by the trainer. */
#ifndef HPT_TRAIN_INT_H
#define HPT_TRAIN_INT_H

#include "hptrain.h"
#include "kernels/backend.h"

/* A per-parameter predictor. The linear one keeps, over the real steps since its last reset,
 * exponentially weighted sums of each weight by its age a (steps before now, weight
 * decay^a): s0 = sum w, s1 = sum a*w, and the same sums of 1, a, a^2 as scalars (W, A1, A2),
 * so the weighted least-squares slope of every weight is known at any step from O(1) state
 * per parameter; no snapshot of past weights is kept. In a predict phase s1 holds the
 * velocity (weight change per step) and s0 is freed. */
typedef struct {
    hpt_mem *mem;                 /* borrowed */
    const hpt_backend *be;        /* the per-parameter loops (the CPU's for now) */
    int kind;                     /* hpt_predictor_kind */
    size_t n;                     /* parameters */
    double decay;                 /* the linear fit's decay */
    float *s0, *s1;               /* (n) each, device tier, optim category; NULL when unused */
    double W, A1, A2;             /* scalar sums of the fit */
    int64_t n_samples;            /* real steps in the fit */
    float lr_fit;                 /* the learning rate of the last real step */
    uint64_t seed;                /* garbage predictor */
} weight_predictor;

/* The scalar part of a predictor's state, as checkpointed (the arrays are separate sections). */
typedef struct {
    double W, A1, A2;
    int64_t n_samples;
    float lr_fit;
    int32_t velocity;             /* 1: s1 holds the velocity (a predict phase) */
} predictor_scalars;

hpt_status predictor_init(weight_predictor *pr, hpt_mem *mem, int kind, size_t n, double decay,
                          uint64_t seed);
void predictor_free(weight_predictor *pr);
/* Frees s0 (a checkpoint taken in a predict phase holds only the velocities). */
void predictor_drop_s0(weight_predictor *pr);
/* Device bytes the predictor holds during FULL steps and during PREDICT steps. */
uint64_t predictor_full_bytes(int kind, size_t n);
uint64_t predictor_predict_bytes(int kind, size_t n);
/* Whether it reads the optimizer's moments (the others let them move to the host). */
int predictor_reads_moments(int kind);
/* After a real step: params (n) are the weights after it, lr its learning rate. */
hpt_status predictor_observe(weight_predictor *pr, const float *params, float lr);
/* At the start of a predict phase: the linear predictor turns its sums into velocities. */
void predictor_begin(weight_predictor *pr);
/* At the end of a predict phase: the linear fit restarts from nothing (sums reallocated). */
hpt_status predictor_end(weight_predictor *pr);
/* Predicted update number k (0-based) of the phase at optimizer step `step` with learning
 * rate lr, applied to the model's weights; *update_norm_out gets its L2 norm. */
hpt_status predictor_apply(weight_predictor *pr, hpt_model *model, const hpt_optim *opt, int64_t k,
                           int64_t step, float lr, double *update_norm_out);
/* The norm of the update the last real AdamW (fp32) step made, from its moments:
 * lr * ||m_hat / (sqrt(v_hat) + eps)|| (decay excluded); lr * grad_norm for other optimizers. */
double predictor_real_update_norm(const hpt_optim *opt, size_t n, float lr, float grad_norm);
void predictor_get_scalars(const weight_predictor *pr, predictor_scalars *out);
void predictor_set_scalars(weight_predictor *pr, const predictor_scalars *in);

/* The loss-dynamics model: the smoothed loss lbar (an EMA, 0.9), the smoothed gradient norm
 * gbar, and a weighted least-squares line through the origin (decay 0.95) of the smoothed
 * loss's change per step against x = gbar * (update norm of the step): dl = b * x (a step that
 * moves nothing changes nothing). It predicts the next loss
 * (lbar corrected for the EMA's lag, plus the line at the last step's x) and, in a predict
 * phase, the loss after each predicted update. noise is an EMA (0.9) of the relative error of
 * its one-step predictions of the batch losses (mostly batch-to-batch noise); err an EMA of the
 * trend's relative error: of the smoothed loss's one-step change; phase_err an EMA (0.5) of the relative errors measured on predicted weights: a
 * predict phase's checks, and its prediction against the first CORRECT step's loss beyond twice
 * the noise (each capped at 1; decaying by 0.97 per real step, so an old failure fades). confidence = max(0, 1 - max(err, phase_err) / band). All fields double: it
 * checkpoints as bytes. */
typedef struct {
    double lbar, gbar;
    double sxx, sxy;
    double err, noise, phase_err;
    double prev_x;                /* x of the last step's update */
    double pred;                  /* PREDICT: the predicted loss of the current weights */
    double n;                     /* real losses observed */
} lossmodel;

void lossmodel_init(lossmodel *lm);
/* The predicted loss of the next real step. */
double lossmodel_next(const lossmodel *lm);
/* A real step's loss, gradient norm and update norm. after_predict: the first step after a
 * predict phase (its error is against lm->pred; the level restarts from it). */
void lossmodel_observe(lossmodel *lm, double loss, double grad_norm, double update_norm,
                       int after_predict);
double lossmodel_confidence(const lossmodel *lm, double band);
/* A relative error measured on predicted weights (a check's excess over the prediction). */
void lossmodel_phase_error(lossmodel *lm, double excess);
/* Predict phase: begin sets pred to the next loss; step adds one predicted update. */
void lossmodel_begin_predict(lossmodel *lm);
void lossmodel_predict_step(lossmodel *lm, double update_norm);


/* ---- data parallel (dp.c; docs/zero.md) ---- */
int dp_size(void);
int dp_rank(void);
/* 1: micro-batches' gradients are summed apart, in order (--zero given, or many processes). */
int dp_apart(const hpt_train_opts *o);

/* ---- gpu.c ---- */
/* HPT_ERR_UNSUPPORTED, with the reason, for a plan a GPU run cannot use yet (docs/cuda.md). */
hpt_status train_gpu_check(const hpt_train_opts *o);
/* The processes' configurations agree (else every rank fails naming the difference). */
hpt_status dp_agree(const hpt_train_opts *o);
/* What many processes do not run with yet. */
hpt_status dp_check(const hpt_train_opts *o);
/* This rank's windows of a step: skip the ranks' before it, read K, skip the ranks' after. */
void dp_skip_before(hpt_dataloader *d, int K);
void dp_skip_after(hpt_dataloader *d, int K);
/* dst (n) += src (n), element by element, through the backend (host or device memory). */
void dp_add(const hpt_backend *be, float *dst, const float *src, size_t n);
/* grads (n floats) = the rank-order sum over the processes. */
hpt_status dp_reduce_grads(float *grads, size_t n);
/* global = the rank-order sum of every rank's local loss sum. */
hpt_status dp_loss_sum(double local, double *global);
/* Rank 0 saved with status s: every rank returns it. */
hpt_status dp_saved(hpt_status s);
/* ---- the offload engine under many processes (dp_engine.c; docs/zero_engine.md) ---- */
struct offload_engine;
/* What many processes with the engine do not run with (dp_check's part for --offload). */
hpt_status dp_engine_check(const hpt_train_opts *o);
/* The engine's shards: the number of processes with --zero 3 and the engine, else 0. */
int dp_engine_shards(const hpt_train_opts *o);
/* 1 when the engine's ZeRO stages sum each micro-batch over the processes at once (--accum > 1):
 * the non-block gradients then too, as in-memory stage 2 does (trainer.c's sum_apart). */
int dp_engine_per_micro(const hpt_train_opts *o);
/* After a step's backward (collective): ZeRO-3's blocks' sums of squares (eng_z3_norm). */
hpt_status dp_engine_after_backward(struct offload_engine *e);
/* ZeRO with the engine and full embeddings (engine_zemb.c): 1 when wte's, wpe's and lnf's state
 * is cut among the owners; then their flat gradients are reduce-scattered onto the owners
 * (dp_engine_zemb_reduce, instead of the all-reduce) and the norm's parts gathered
 * (dp_engine_zemb_norm, after the last micro-batch's sum). Collective. */
int dp_engine_zemb(hpt_trainer *tr);
/* After the model is made: with many processes, chunked or bf16 embeddings' chunks of wte's
 * gradient are summed over them in the backward, before their norm and update (embed.c). */
void dp_engine_emb(hpt_trainer *tr);
hpt_status dp_engine_zemb_reduce(hpt_trainer *tr);
hpt_status dp_engine_zemb_norm(hpt_trainer *tr);
/* ZeRO-3 in the engine, a rank other than 0 while rank 0 writes the model's files (n streams of
 * the weights, each gathered block by block: collective): the same gathers, discarded. */
hpt_status dp_engine_follow(hpt_model *model, int n);
/* After the model is made: its engine sums each block's gradients over the processes. */
void dp_engine_setup(struct offload_engine *e);
/* Before micro-batch k of K of a step summed apart: the engine's exact mode adds it to its
 * homes' sum (k > 0) instead of replacing it; k = K after the last: back to replacing, and
 * every block's sum handed over. */
hpt_status dp_engine_micro(struct offload_engine *e, int k, int K);

/* ---- state.c's header fields, for the sharded checkpoints (zero.c) ---- */
#define STATE_NFIELDS 32
void state_pack_fields(const hpt_model *model, const hpt_optim *opt, const hpt_adamw_opts *ao,
                       const hpt_train_pos *pos, int64_t f[STATE_NFIELDS]);
/* The fields' shape, optimizer settings and position (checked); path names the file in errors. */
hpt_status state_unpack_fields(const int64_t f[STATE_NFIELDS], const char *path,
                               hpt_model_config *c, hpt_adamw_opts *ao, hpt_train_pos *pos,
                               int64_t *optim_t, float *prev_norm);

/* ZeRO's stages 1 and 2 (docs/zero.md): rank q owns the optimizer's units [ulo[q], uhi[q])
 * (optim.h: optim_owner), the parameter values [plo[q], phi[q]); stage 0 when the run is not
 * sharded (one process, or --zero 0 / none). */
#define DP_MAX_PROCS 64
typedef struct {
    int stage, size, rank;          /* stage 1 or 2 only with size > 1; else 0 */
    size_t ulo[DP_MAX_PROCS], uhi[DP_MAX_PROCS], plo[DP_MAX_PROCS], phi[DP_MAX_PROCS];
    /* stage 2's gradient sink (dp_sink_attach): the blocks' gradients go layer by layer
     * through two packed slots (slot: 2 x slot_n floats; block l in slot l % 2, its exchange
     * rq[l % 2] in flight until block l - 2 takes the slot, slot_l[i]: the block it holds, or
     * -1) onto the owners; run (run_n) holds this rank's
     * summed block values from value run_lo (checkpoint order), its non-block ones lie at
     * [nb_lo, nb_lo + nb_n) of the model's flat gradients (nb_acc: their sum over micro-batches
     * with accum > 1); micro: the micro-batch (0: copy, > 0: add) */
    hpt_mem *mem;
    const hpt_backend *be;
    hpt_model *model;
    float *slot, *run, *nb_acc;
    size_t slot_n, run_n, run_lo, nb_lo, nb_n;
    int micro, accum;
    struct dist_req *rq[2];
    int slot_l[2];
} dp_shard;
/* The run's sharding for the model's table (o->zero, the process count). */
hpt_status dp_shard_init(const hpt_train_opts *o, hpt_model *model, dp_shard *z);
/* The optimizer for z: the owned units' state only when sharded, with the norm's gather. */
hpt_status dp_optim_create(hpt_mem *mem, hpt_model *model, const hpt_adamw_opts *ao,
                           dp_shard *z, hpt_optim **out);
void dp_optim_attach(hpt_optim *op, dp_shard *z);
/* Stage 1, 2: grads' owned values = the rank-order sum (the others' stay); stage 0: all. */
hpt_status dp_reduce_scatter(const dp_shard *z, float *grads, size_t n);
/* Stage 1, 2: every rank's owned values of params from their owner (after the update). */
hpt_status dp_gather_params(const dp_shard *z, float *params);
/* Stage 2 in memory: 1 when a model for o is to be made with its blocks' gradients away
 * (model_grads_away; before the model is made). */
int dp_sink_wanted(const hpt_train_opts *o);
/* Stage 2 (K micro-batches per step): the slot and the run's gradients allocated, the sink set
 * on the model (made with its gradients away), the optimizer reading the run's gradients. */
hpt_status dp_sink_attach(dp_shard *z, hpt_mem *mem, hpt_model *model, hpt_optim *op, int K);
void dp_sink_free(dp_shard *z);
/* Stage 2, micro-batch k: before its backward (dp_sink_begin: its blocks' sums are copied
 * (k = 0) or added to the run); after it (dp_sink_end), the non-block tensors' gradients (the
 * model's flat buffer) reduce-scattered, the owned ones summed over the micro-batches the same
 * way (in place after the last). */
void dp_sink_begin(dp_shard *z, int k);
hpt_status dp_sink_end(dp_shard *z);
/* Whether any process's owned summed gradients hold a non-finite value (loss scaling). */
hpt_status dp_overflow(const dp_shard *z, const hpt_backend *be, const float *grads, int *overflow);

/* ---- zero.c: the sharded checkpoints (in memory stages 1, 2; the engine's 1-3) ---- */
int zero_manifest_exists(const char *dir);
/* A stage-0 save's: the manifest, then every shard (they are older than its state.bin). */
void zero_remove(const char *dir);
/* Every rank writes DIR/zero-<step>-<rank>of<N>.bin (what it owns: z's run in memory, its cut of
 * every block with the engine), then rank 0 the manifest (and model.bin is the caller's); stage
 * the run's (recorded); ls: the loss scaler's three fields or NULL. Every rank's shard status is
 * every rank's; the manifest's is rank 0's (the caller shares it: dp_saved). */
hpt_status zero_save(const dp_shard *z, int stage, const char *dir, hpt_model *model,
                     const hpt_optim *opt, const hpt_adamw_opts *ao, const hpt_train_pos *pos,
                     const int64_t *ls);
/* A sharded checkpoint into this run's processes (re-cut: any M, any stage; z filled for the
 * run); sec gets the loss scaler's "loss_scale" section when it was saved. */
hpt_status zero_load(const char *dir, const hpt_train_opts *o, hpt_mem *mem, dp_shard *z,
                     hpt_model **model_out, hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                     hpt_train_pos *pos_out, hpt_state_section *sec, int *n_sec);
/* A whole optimizer (from state.bin) cut to z's run (stage 0: kept; the norm's gather set). */
hpt_status zero_reshard(hpt_mem *mem, hpt_model *model, dp_shard *z, hpt_optim **opt);
/* ---- the jump predictor (src/train/jump.c) ---- */

/* Steps in a round of FULL (schedule.c): full_steps, and for the jump predictor at least the
 * snapshots' span, (K - 1) S + 1. */
int64_t schedule_full_len(const hpt_schedule_opts *o);

/* The K snapshots (host tier, params category) and the held-out batches of the line search
 * (search batches, then 2 that confirm; host tier, io; copied from the validation windows after
 * the evaluation's), and the last jump's verify loss and real step (its gain's rate). */
typedef struct {
    hpt_mem *mem;                 /* borrowed */
    size_t n;                     /* parameters */
    int64_t K;
    int B, T, n_search;
    float *ring[64];              /* (n) each; ring[K-1] the latest; ring[0] the direction
                                   * during a jump */
    int32_t *hx, *hy;             /* (n_search + 2, B, T) each */
    double prev_loss;             /* the verify loss after the last jump */
    int64_t prev_step;            /* its real step; -1: no jump yet */
    int64_t n_forwards;           /* sequences forwarded by the current jump */
} jump_state;

/* The jump's scale groups: the embeddings (wte, wpe), the blocks' matrices, and every vector
 * (layer norms, biases). */
enum { JUMP_GROUP_EMBEDDINGS, JUMP_GROUP_MATRICES, JUMP_GROUP_VECTORS, JUMP_GROUPS };

/* What the jump needs from the trainer: the weights and their tensors' offsets and groups, the
 * optimizer (its moments, for the state option), and the mean loss of nseq sequences of length
 * T (forward only). */
typedef struct {
    float *params;
    int n_tensors;
    size_t off[33];               /* tensor t: params[off[t], off[t + 1]) */
    int group[32];
    hpt_optim *opt;
    void *ctx;
    hpt_status (*loss)(void *ctx, const int32_t *x, const int32_t *y, int nseq, double *out);
} jump_env;

typedef struct {
    double scales[JUMP_GROUPS];   /* the chosen scales along the direction (0: rolled back) */
    double scale;                 /* the matrices' */
    double search_loss0, search_loss; /* the search batches' loss before, and at the scale */
    double loss0, loss1;          /* the verify batches' loss before and after */
    double gain;                  /* real steps' worth (0 rolled back, 1e30 no rate yet) */
    int rolled_back;
    int64_t forwards;             /* sequences forwarded */
    double ms, search_ms;         /* the jump's time, and up to the confirmation */
} jump_result;

/* The extrapolation coefficients of a linear or quadratic least-squares fit through K points
 * S steps apart, H steps past the last: the fit's value there is sum_i c[i] w_i (c: K). */
hpt_status jump_coeffs(int fit, int64_t K, int64_t S, int64_t H, double *c);
/* The jump's direction per weight (the fit's value H steps ahead minus ring[K-1]) into out
 * (n), which may be ring[0]. */
hpt_status jump_direction(int fit, int64_t K, int64_t S, int64_t H, float *const *ring, size_t n,
                          float *out);
hpt_status jump_init(jump_state *js, hpt_mem *mem, const hpt_schedule_opts *o, size_t n, int B,
                     int T);
void jump_free(jump_state *js);
/* Held-out tokens (per array) and batches the jump reads. */
size_t jump_heldout_tokens(const hpt_schedule_opts *o, int B, int T);
int jump_heldout_batches(const hpt_schedule_opts *o);
/* The ring slot of the weights after FULL step number done_in_full (1-based), or -1. */
int64_t jump_slot(const hpt_schedule_opts *o, int64_t done_in_full);
void jump_snapshot(jump_state *js, int64_t slot, const float *params);
/* One jump from the weights in ring[K-1] (= env->params): fit, line search, confirmation or
 * rollback, the state option. real_step: real steps so far (the gain's rate). */
hpt_status jump_run(jump_state *js, const hpt_schedule_opts *o, const jump_env *env,
                    int64_t real_step, jump_result *r);

#endif
