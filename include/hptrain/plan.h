/* hptrain/plan.h: the plan (every technique choice and the budgets) and the estimator.
 * Part of hptrain.h.
 *
 * A run's choices are one hpt_plan: the activation arena's (hptrain/model.h), the optimizer's
 * (hptrain/optim.h), the offload engine's (hptrain/offload.h), loss scaling (below), gradient
 * accumulation, the schedule (hptrain/schedule.h) and a budget per tier. One parser sets them by
 * the command line's names, one check holds every rule on how they combine, one printer writes
 * them back (src/core/plan.c). The estimator computes, from a plan and a shape alone, what a run
 * will allocate per tier and category and its FLOPs; the trainer refuses a plan whose estimate
 * does not fit before it allocates anything. */
#ifndef HPTRAIN_PLAN_H
#define HPTRAIN_PLAN_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

/* ---- plan: loss scaling ------------------------------------------------------------- */

/* Loss scaling (docs/offload.md, "16-bit gradient homes"). The backward computes S times the
 * loss's gradients (S a power of two, so every gradient is exactly S times the unscaled one);
 * before the update they are taken times 1/S (folded into the clip factor, with accumulation's
 * 1/accum), so with fp32 gradients a scaled run computes the unscaled run's bits. After each
 * step's backward the trainer asks whether a gradient overflowed: fp16 homes check every value
 * as it is narrowed (|x| > 65504 or not finite), every other gradient (fp32 and bf16 homes, the
 * flat wte, wpe and lnf gradients) is checked for non-finite values. On an overflow in any
 * micro-batch the step is skipped: weights and optimizer state stay as they were, the
 * optimizer's step count (AdamW's bias correction) does not advance; the trainer's step, the
 * learning-rate schedule and the data position do (the step's tokens are consumed). DYNAMIC
 * then halves S (not below 1) and doubles it (up to 2^24) after `window` clean steps in a row;
 * STATIC keeps S. Scale, clean-step count and skipped steps are saved in the training state
 * (section "loss_scale"), so a resumed run continues with the uninterrupted one's bits.
 * Exact mode only (not with the fused update, which updates before the backward is over),
 * not with the hybrid schedule. */
typedef enum { HPT_LOSS_SCALE_OFF = 0, HPT_LOSS_SCALE_STATIC, HPT_LOSS_SCALE_DYNAMIC } hpt_loss_scale_mode;
typedef struct {
    int mode;              /* hpt_loss_scale_mode */
    float init;            /* S at the start (a power of two, 1 to 2^64) */
    int64_t window;        /* DYNAMIC: clean steps in a row before S doubles (>= 1) */
} hpt_loss_scale_opts;
hpt_loss_scale_opts hpt_loss_scale_defaults(void); /* OFF, init 65536, window 2000 */
/* "off" | "dynamic" | a power of two N (STATIC at N) into o (mode, and init for N). */
hpt_status hpt_loss_scale_parse(const char *text, hpt_loss_scale_opts *o);

/* ---- plan: every technique choice and the budgets (src/core/plan.c) -------------
 *
 * An hpt_plan holds each choice a run makes about memory and speed: what the activation arena
 * keeps (act), the optimizer and its state width (adamw), the offload engine (offload), loss
 * scaling, gradient accumulation, the schedule, and the budget of each tier with the disk
 * tier's directory. hpt_train_opts and the estimator's hpt_plan_opts carry one.
 *
 *   hpt_plan p = hpt_plan_default_choices();
 *   hpt_plan_set(&p, "recompute", "selective");      // one option by name, as the command
 *   hpt_plan_set(&p, "fused-update", NULL);          // line's --recompute, --fused-update
 *   hpt_plan_env env = {.training = 1, .has_val = -1};
 *   if (hpt_plan_check(&p, &env) != HPT_OK) ...      // every compatibility rule, one place
 *   char flags[1024]; hpt_plan_print(&p, flags, sizeof flags); // "--recompute selective ..."
 *
 * Options are named as the command line's flags without the dashes: each flag --NAME is the
 * option NAME. Messages of hpt_plan_set start with the option's name ("accum expects an
 * integer ..."; "attention: attention 'x': expected flash or plain"), so the command line
 * writes "--" before them; hpt_plan_check's messages name the options in the flags' spelling.
 *
 * The members are listed once (HPT_PLAN_MEMBERS) so that hpt_train_opts and hpt_plan_opts can
 * hold a plan and also reach its members by their own names (o.act is o.plan.act). */
#define HPT_PLAN_MEMBERS \
    hpt_act_opts act;      /* attention, recompute, activation offload/compression, head chunk */ \
    hpt_adamw_opts adamw;       /* optimizer kind, state bits, 32-bit embedding state; its
                                 * settings (lr inside is ignored: the trainer's schedule sets it) */ \
    hpt_offload_opts offload;   /* homes, K, P, fused update, weights, gradient home, embeddings,
                                 * vocabulary chunk */ \
    hpt_loss_scale_opts loss_scale; /* off by default; needed by fp16 gradient homes */ \
    hpt_schedule_opts sched;    /* full-only (default) or the hybrid predict schedule */ \
    int accum;                  /* micro-batches of B sequences per optimizer step (0 is read as
                                 * 1): their gradients are summed and scaled by 1/accum, the same
                                 * update as one batch of accum*B; activations are for B only */ \
    uint64_t budget_bytes[HPT_TIER_COUNT]; /* per tier; 0: unlimited */ \
    const char *offload_dir;    /* the disk tier's directory (borrowed), or NULL */ \
    int device;                 /* where the run computes: 0 the CPU (default), 1 + N CUDA device
                                 * N (--device cpu | cuda | cuda:N; docs/cuda.md) */ \
    int zero;                   /* data parallel (docs/zero.md): -1 (default) none chosen (many
                                 * processes run 0); 0: replicated state, gradients summed over
                                 * the processes in rank order, micro-batches summed apart (so
                                 * one process with --accum N computes N processes' bits);
                                 * 1-3: ZeRO's sharded stages (not built yet: refused) */ \
    hpt_lora_opts lora;         /* LoRA adapters over a frozen base (r 0: full training;
                                 * --lora, --lora-targets; docs/lora.md) */ \
    int pack;                   /* examples (hpt_pack_mode; docs/packing.md): 0 stream (default:
                                 * windows of the token stream), 1 on (whole examples packed in
                                 * a row, positions and attention per example), 2 off (one
                                 * example per row, padded) */ \
    uint64_t given;             /* bit i: option i (hpt_plan_option_name) was set by
                                 * hpt_plan_set; 0 in a plan made in code. Choices whose default
                                 * follows another (SGD's weight decay, the loss scale of fp16
                                 * gradient homes) and rules about what was given use it */
typedef struct { HPT_PLAN_MEMBERS } hpt_plan;

/* AdamW fp32, no recompute, flash attention, no offload, no loss scale, accum 1, full-only
 * schedule, no budgets. (hpt_plan_defaults is the estimator's options, below.) */
hpt_plan hpt_plan_default_choices(void);
/* Sets one option from its text (value NULL for the options that take none: fused-update,
 * state-32bit-embeddings). HPT_ERR_INVALID for an unknown option or a bad value, the message
 * starting with the option's name. Values are checked for syntax and range here; how choices
 * combine is hpt_plan_check's. */
hpt_status hpt_plan_set(hpt_plan *p, const char *option, const char *value);
/* The i-th option's name (NULL past the last) and whether it takes a value. */
const char *hpt_plan_option_name(int i, int *takes_value);

/* What hpt_plan_check knows of the run beside the plan. */
typedef struct {
    int training;      /* 0: forward only: the optimizer's and the update's rules do not apply */
    int has_val;       /* -1: not known (no rule about it); 0 or 1: validation data given */
    int need_disk_dir; /* 1: disk homes and disk activation offload need p->offload_dir (the
                        * command line; a library caller may call hpt_mem_set_disk_dir) */
} hpt_plan_env;
/* Every rule on how the plan's choices combine and on their ranges: HPT_ERR_INVALID or
 * HPT_ERR_UNSUPPORTED with a one-line reason naming the options. env NULL: training, validation
 * unknown, no directory rule. (Rules on the model's shape, such as the vocabulary chunk's
 * multiple, are the estimator's and the model's.) */
hpt_status hpt_plan_check(const hpt_plan *p, const hpt_plan_env *env);
/* Writes the options that reproduce p (those not at their default) as command-line flags,
 * "--recompute selective --fused-update", "" for the default plan; hpt_plan_set of each gives
 * p back (given aside). HPT_ERR_INVALID if n is too small (buf then holds a cut text). */
hpt_status hpt_plan_print(const hpt_plan *p, char *buf, size_t n);
/* The other way: applies flags as hpt_plan_print writes them ("--recompute selective
 * --fused-update"; words separated by spaces, each option --NAME followed by its value when it
 * takes one) to p with hpt_plan_set, in order. flags is cut into words in place (a NUL after
 * each): the plan borrows --offload-dir's value from it, so it must outlive p's use.
 * HPT_ERR_INVALID naming the word that is not an option or the option without its value;
 * hpt_plan_set's errors otherwise. */
hpt_status hpt_plan_parse_flags(hpt_plan *p, char *flags);

/* Whether the plan's device can run here: HPT_OK for the CPU; for CUDA (device 1 + N),
 * HPT_ERR_UNSUPPORTED with a one-line reason when the build has no CUDA backend or there is no
 * GPU N (docs/cuda.md). */
hpt_status hpt_device_ready(int device);
/* Makes mem's device tier the memory of device (0: the CPU, nothing changes), before anything
 * is allocated from mem: on a GPU, starts the CUDA backend and, when mem has a device budget,
 * takes the GPU's measured fixed overhead (the CUDA context, cuBLAS's workspace, the backend's
 * buffers: total less free memory once started) out of it and sizes the device region to what
 * is left, so that the device tier plus the overhead stay within the budget, as on a card of
 * that size. *overhead_bytes (may be NULL) gets the overhead (0 on the CPU). HPT_ERR_OOM when
 * the budget is not above the overhead. The first binding in a process sizes the device region;
 * a later one keeps it and caps its hpt_mem's device tier within it. */
hpt_status hpt_device_bind(hpt_mem *mem, int device, uint64_t *overhead_bytes);
/* GPU memory a device budget also keeps back, beside the measured overhead, for the kernels CUDA
 * loads after the measure (lazy module loading): a guess, to be measured on a GPU (docs/cuda.md). */
#define HPT_DEVICE_LAZY_RESERVE ((uint64_t)128 << 20)

/* ---- plan: the estimator ---------------------------------------------------------------- */

/* What a run will allocate, computed from the configuration alone (nothing is allocated, no
 * file is read). The figures are the bytes the run's hpt_mem accounts, byte for byte, on the
 * device tier: parameters and gradients (4 bytes each, wte's padding rows included; the model
 * allocates gradients also for forward-only use), the optimizer's state (training only:
 * hpt_optim_state_bytes restated per optimizer and state width, docs/optimizers.md; AdamW fp32
 * 8 bytes per parameter), the activation arena (hpt_model_activation_bytes: planned for forward and
 * backward, so a forward-only run allocates the same), and each data loader's buffers
 * ((B*T+1)*2 + 2*B*T*4 bytes). All of them are allocated at setup or at the first forward and
 * live until the run ends, so the peak is their sum, reached at the first forward.
 * FLOPs count matrix multiplies and attention only (docs/estimate.md):
 *   forward per token  = 2*(12*L*C^2 + Vp*C) + 2*L*C*(T+1)   (causal attention as computed:
 *                        position t attends t+1 keys, QK^T and AV at 2 FLOPs per multiply-add)
 *   training per token = 3 * forward                          (backward = 2 * forward) */
typedef struct {
    hpt_model_config cfg;
    int B, T;            /* batch and sequence length; 1 <= T <= cfg.maxT */
    int training;        /* 1: forward + backward + AdamW; 0: forward only (sampling, eval) */
    int has_val;         /* a validation loader is open (its data buffers count) */
    int no_data;         /* 1: no data loader at all (generation from a prompt); 0: the training
                          * data loader's buffers count, in forward-only runs too (evaluation) */
    int procs, rank;     /* data parallel (docs/zero.md): the process count (0 is read as 1) and
                          * which process's bytes (0 to procs - 1): with --zero 1 or 2 each holds
                          * its run of the optimizer's units, so the figures differ by rank */
    /* every technique choice; also by the members' own names (o.act is o.plan.act). Read here:
     * act (the activation arena); adamw's optimizer, state_bits (32, or 0, or 8) and
     * state32_embeddings (training only); accum (tokens and FLOPs per step follow it, memory
     * does not); offload (all zero or inactive: none); sched's kind (training only; HYBRID: the
     * linear predictor's two sums per parameter (device, optim) at the peak, the rollback
     * snapshot (host, params) and the check batch (host, io: 2*B*T int32) beside it, and
     * predict_peak_bytes below), predictor, check_every (> 0: predict-phase checks,
     * one-sequence forwards, which need has_val) and check_weights (F32: the model's, a B=1
     * arena; Q8: an int8 hpt_infer made for each check, hpt_infer_bytes_for at ctx T plus
     * hpt_infer_loss_bytes_for, instead of the arena). The budgets are not read (the fit
     * functions below take theirs; hpt_plan_check_tiers compares them). */
    union {
        hpt_plan plan;
        struct { HPT_PLAN_MEMBERS };
    };
} hpt_plan_opts;
/* gpt2-124m, B=4, T=64, training with AdamW fp32, no validation: the trainer's defaults. */
hpt_plan_opts hpt_plan_defaults(void);

typedef struct {
    uint64_t bytes[HPT_TIER_COUNT][HPT_CAT_COUNT]; /* at the peak */
    uint64_t peak_bytes[HPT_TIER_COUNT];
    uint64_t num_params;
    uint64_t activation_bytes;     /* the planned activation arena */
    double flops_per_token;        /* the run's: training 3 x forward; forward-only = forward */
    double flops_per_token_fwd;
    uint64_t tokens_per_step;      /* accum*B*T: tokens per optimizer step */
    /* hybrid schedule: each tier's peak during PREDICT steps (docs/predict.md): parameters, the
     * data loaders, the optimizer's state where the predictor reads it (adam) or on the host
     * (others), the linear predictor's velocities, the snapshot and check batch (host), the
     * checks' one-sequence arena. All zero without the hybrid schedule. */
    uint64_t predict_peak_bytes[HPT_TIER_COUNT];
} hpt_estimate;

/* HPT_ERR_SHAPE for a bad shape or T > maxT, HPT_ERR_INVALID for B or T < 1 or a run too large
 * to count in 64 bits. */
hpt_status hpt_plan_estimate(const hpt_plan_opts *o, hpt_estimate *out);

/* What fits a device budget of budget_bytes (0: unlimited), searched with the estimator
 * (nothing is allocated; a few estimates, the peak being affine in B and convex in T). A max_*
 * field is 0 where nothing fits. */
typedef struct {
    int fits;                     /* o itself fits */
    uint64_t peak_bytes;          /* o's device peak */
    int max_B;                    /* the largest batch at o->T that fits (up to 1 << 20) */
    uint64_t max_B_peak_bytes;
    int max_T;                    /* the largest sequence at o->B that fits (up to maxT) */
    uint64_t max_T_peak_bytes;
    int max_T_B1;                 /* the largest sequence at B = 1 that fits */
    uint64_t max_T_B1_peak_bytes;
    uint64_t min_peak_bytes;      /* the peak at B = 1, T = 1 */
    uint64_t fixed_bytes;         /* what B and T do not change: params, grads, optim */
} hpt_plan_fit;
hpt_status hpt_plan_fit_budget(const hpt_plan_opts *o, uint64_t budget_bytes, hpt_plan_fit *out);

/* The trainer's refusal before it allocates: HPT_OK when o's estimated device peak plus
 * live_bytes (already allocated in the same hpt_mem) is within budget_bytes (0: unlimited);
 * otherwise HPT_ERR_OOM with a one-line hpt_last_error() that gives the breakdown and the
 * --batch / --seq that would fit with their estimated peaks, or says that the model itself
 * does not fit the budget. Estimator errors (a bad shape, T > maxT) are returned as they are. */
hpt_status hpt_plan_check_budget(const hpt_plan_opts *o, uint64_t budget_bytes,
                                 uint64_t live_bytes);

/* Each tier's peak in e (full phase; with the hybrid schedule also its predict phase) against
 * p's budget for the tier (0: unlimited): HPT_OK when all fit, else HPT_ERR_OOM naming the
 * first tier that does not ("the host tier's estimated peak ... passes --host-memory ..."). */
hpt_status hpt_plan_check_tiers(const hpt_plan *p, const hpt_estimate *e);

#endif /* HPTRAIN_PLAN_H */
