/* hptrain/planner.h: this machine's measured rates (the calibration, src/plan/calibrate.c), a
 * plan's predicted step time from them (src/plan/cost.c), and the automatic plan search
 * (src/plan/auto.c). Part of hptrain.h. docs/planner.md. */
#ifndef HPTRAIN_PLANNER_H
#define HPTRAIN_PLANNER_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif /* HPTRAIN_PLANNER_H */

#define HPT_CAL_VERSION 2
#define HPT_CAL_GEMM_SIZES 6
#define HPT_CAL_GEMM_ROWS 2
#define HPT_CAL_LAYOUTS 8

#define HPT_CAL_ARCHS 5
#define HPT_CAL_ARCH_WIDTHS 2

/* An architecture's own block rates (C[0] = 0: not measured; its block is then costed at the
 * reference block's rates): its block's GEMMs, one after the other as the block runs them, at
 * its calibration widths (C, FF) and the reference's row counts, [rows][width][forward,
 * backward] GFLOP/s; its attention at T = 128 and its calibration heads, [flash, plain]
 * [forward, backward]; its pointwise ops in ns per element (the architecture's order,
 * hpt_arch_desc.op), [op][forward, backward], over a micro-batch of 512 rows (past the caches,
 * as a step's). */
typedef struct {
    int C[HPT_CAL_ARCH_WIDTHS], FF[HPT_CAL_ARCH_WIDTHS];
    double gemm_gflops[HPT_CAL_GEMM_ROWS][HPT_CAL_ARCH_WIDTHS][2];
    double attn_gflops[2][2];
    double op_ns[HPT_ARCH_MAX_OPS][2];
    /* --matmul bf16's (bf16_C0 = 0: not measured): the same GEMMs through the backend's
     * matmul_*_bf16 ops (their operand rounding included), [rows][width][forward, backward];
     * its bf16 flash attention at T = 128, [forward, backward] */
    int bf16_C0;
    double gemm_bf16_gflops[HPT_CAL_GEMM_ROWS][HPT_CAL_ARCH_WIDTHS][2];
    double flash_bf16_gflops[2];
} hpt_cal_arch;

/* --matmul bf16's rates (docs/planner.md, "bf16 GEMMs"): the reference block's and the head's
 * GEMMs at the fp32 ones' shapes through the backend's matmul_forward_bf16 and
 * matmul_backward_bf16 (each call's operand rounding included), and the bf16 flash attention
 * pair at T = 128 and 512. The file's optional "matmul_bf16" object; have 0 (an older file):
 * a bf16 plan is costed at the fp32 rates (hpt_cost.bf16_at_fp32). */
typedef struct {
    int have;
    double gemm_fwd_gflops[HPT_CAL_GEMM_ROWS][HPT_CAL_GEMM_SIZES];
    double gemm_bwd_gflops[HPT_CAL_GEMM_ROWS][HPT_CAL_GEMM_SIZES];
    double head_gflops[HPT_CAL_GEMM_ROWS][2];
    double flash_gflops[2];              /* T = 128, [forward, backward] */
    double flash512_gflops[2];           /* T = 512 (0: not measured) */
} hpt_cal_bf16;

/* Rates measured by hpt_calibrate (or read from its cached file). Rates are per second. */
typedef struct {
    int version;                         /* HPT_CAL_VERSION */
    int threads;                         /* the thread count it was measured with */
    int cores;                           /* online CPUs then (0: not known, taken as threads) */
    char device[64];                     /* what was measured: "cpu" (hpt_calibrate measures the
                                          * CPU backend; a file without the key is a CPU's); a
                                          * GPU's calibration would name it ("cuda ...") */
    int gemm_C[HPT_CAL_GEMM_SIZES];      /* model widths measured */
    int gemm_rows[HPT_CAL_GEMM_ROWS];    /* row counts (B*T) measured */
    /* a block's GEMMs: (rows, C) against C -> 3C, C -> C, C -> 4C and (rows, 4C) against
     * 4C -> C, their FLOPs over their summed time; [rows][C] */
    double gemm_fwd_gflops[HPT_CAL_GEMM_ROWS][HPT_CAL_GEMM_SIZES]; /* matmul_forward */
    double gemm_bwd_gflops[HPT_CAL_GEMM_ROWS][HPT_CAL_GEMM_SIZES]; /* matmul_backward */
    double head_gflops[HPT_CAL_GEMM_ROWS][2]; /* [rows][forward, backward] a head-shaped GEMM:
                                               * C = 768 against 32768 outputs */
    double attn_gflops[2][2];            /* [flash, plain][forward, backward] causal attention
                                          * at T = 128 */
    double attn512_gflops[2][2];         /* the same at T = 512 (0: not measured: the T = 128
                                          * rates serve every T) */
    double mem_gbps;                     /* a read+write streaming pass (bytes read + written) */
    double optim_ns[HPT_OPTIM_COUNT][2]; /* ns per parameter of one update: [kind][32-bit, 8-bit] */
    double worker_ns[HPT_OPTIM_COUNT][2]; /* the same at one thread: the offload engine's worker's
                                           * update (0: not measured, optim_ns is used) */
    double share_loss;                   /* compute seconds lost per second of one-thread work
                                          * run beside a compute team that takes every core
                                          * (0: not measured, 1 is used) */
    double host_copy_gbps;               /* memcpy, host to host */
    double disk_read_gbps, disk_write_gbps; /* O_DIRECT, 64 MiB transfers beside the team's
                                             * GEMMs; 0: not measured */
    double disk_share_loss;              /* compute seconds lost per second of disk transfers
                                          * run in a thread beside the team (0: not measured) */
    /* The offload engine's own disk rates and the compute's loss beside its transfers, taken
     * from a training run's counters (hpt_calibration_take_engine; 0: none, the standalone
     * rates above serve), one set per layout of the homes on disk (the index: bit 0 the
     * weights, bit 1 the gradients, bit 2 the optimizer state; hpt_plan_disk_homes): the
     * engine's rate depends on it here (all homes on disk: reads 1.0-1.75 GB/s; the state
     * alone: 1.5-3.1). The cost model takes a plan's layout's set when there is one. */
    double engine_disk_read_gbps[HPT_CAL_LAYOUTS], engine_disk_write_gbps[HPT_CAL_LAYOUTS];
    double engine_disk_loss[HPT_CAL_LAYOUTS]; /* compute seconds lost per second of the
                                               * worker's disk transfers beside the compute */
    char engine_source[HPT_CAL_LAYOUTS][256]; /* the run: model, B, T, plan, its step */
    /* Each architecture's own block rates, by id (hpt_model_config.arch), for those whose
     * block differs from the reference one measured above (src/plan/calibrate_arch.c, from
     * the architecture's op table; the file's object named after it) */
    hpt_cal_arch arch[HPT_CAL_ARCHS];
    hpt_cal_bf16 bf16;                   /* --matmul bf16's rates (optional) */
} hpt_calibration;

/* The cache file: $HPT_CALIBRATION, else ~/.cache/hptrain/calibration.json. */
const char *hpt_calibration_path(char *buf, size_t n);
/* HPT_ERR_IO if absent or unreadable, HPT_ERR_FORMAT for a bad or other-version file. */
hpt_status hpt_calibration_load(const char *path, hpt_calibration *c);
/* Writes it (making the directory), JSON. */
hpt_status hpt_calibration_save(const char *path, const hpt_calibration *c);
/* Which of o's engine homes are on disk: bit 0 the weights, 1 the gradients, 2 the optimizer
 * state (0: none, or no engine). */
int hpt_plan_disk_homes(const hpt_plan_opts *o);
/* Whether the offload engine runs o's jobs inline on the compute thread (the CPU backend with
 * no disk home and one shard; HPT_ENGINE_WORKER=thread|inline forces either), as engine.c's
 * choice: the cost model then costs them serially with the compute. */
int hpt_plan_engine_inline(const hpt_plan_opts *o);
/* Takes the engine's rates from a training run into c (the set of o's layout): st the engine's counters over `steps`
 * steps, step_s the mean step time of those steps, o the run's plan (the compute's own time
 * alone comes from the cost model at c's compute rates; what the compute took beyond it when
 * not waiting, per second of the disk transfers the model puts beside it, is the loss);
 * source names the run. HPT_ERR_INVALID when the run moved nothing through the disk. */
hpt_status hpt_calibration_take_engine(hpt_calibration *c, const hpt_plan_opts *o,
                                       const hpt_offload_stats *st, int64_t steps, double step_s,
                                       const char *source);
/* Measures every rate with the backend's ops (quick: about seconds x quick-scaled work);
 * disk_dir NULL: the disk is not measured (its rates stay 0). quick 1: fewer repetitions. */
hpt_status hpt_calibrate(const char *disk_dir, int quick, hpt_calibration *c);
/* GPU device (1 + N)'s rates through the CUDA backend (calibrate_gpu.c), c->device its key
 * (hpt_calibration_device_name); the disk rates stay 0 (the caller takes the CPU's).
 * HPT_ERR_UNSUPPORTED, "no CUDA device: ...", without the backend or that GPU. */
hpt_status hpt_calibrate_device(int device, int quick, hpt_calibration *c);
/* The key of GPU device (1 + N)'s calibration: "cuda NAME sm_XY" ("cuda NVIDIA H200 sm_90");
 * hpt_device_ready's error without it. */
hpt_status hpt_calibration_device_name(int device, char *buf, size_t n);
/* The calibration of the device named `key` from the file's "devices" object (a GPU's, kept
 * beside the CPU's top-level entry; hpt_calibration_save of a "cuda ..." calibration writes
 * it there, of the CPU's keeps it). HPT_ERR_IO without the file, HPT_ERR_INVALID without the
 * key, HPT_ERR_FORMAT for a bad entry. */
hpt_status hpt_calibration_load_device(const char *path, const char *key, hpt_calibration *c);

/* A plan's predicted optimizer step, in seconds, by part, and the inputs it was computed from. */
typedef struct {
    /* inputs */
    double tokens;                 /* per micro-batch: B*T */
    int accum;
    double gemm_flops_fwd;         /* per micro-batch: blocks and head GEMMs, forward */
    double block_gemm_flops_fwd;   /* of which the blocks' */
    double attn_flops_fwd;         /* causal attention, forward */
    double gemm_fwd_gflops, gemm_bwd_gflops, attn_fwd_gflops, attn_bwd_gflops; /* rates used */
    double head_fwd_gflops, head_bwd_gflops;
    double pointwise_bytes;        /* memory-bound passes per step (activations, norms, widen) */
    double params, block_params;   /* parameters; in the offload engine's blocks */
    double optim_ns;               /* per parameter */
    double load_bytes, grad_out_bytes, state_in_bytes, state_out_bytes; /* engine, per step */
    double act_out_bytes;          /* activation offload, each way, per step */
    double disk_read_gbps, disk_write_gbps, disk_loss; /* the engine's disk rates used */
    int disk_from_engine;          /* 1 + the layout whose engine_* set was used (a training
                                    * run's); 0: calibrate's own */
    double compute_s;              /* the compute thread's own work, without waits or the loss
                                    * beside the disk worker */
    double disk_beside_s;          /* the worker's disk seconds beside the compute (P >= 1) */
    int engine_inline;             /* 1: the engine's jobs costed inline on the compute thread
                                    * (no disk home on the CPU backend: no worker thread) */
    int arch_rates;                /* 1: the architecture's block costed at its own measured
                                    * rates (hpt_calibration.arch) */
    int bf16_at_fp32;              /* 1: a --matmul bf16 plan costed at the fp32 rates (the
                                    * calibration has no bf16 rates: an older file) */
    /* the parts (seconds per optimizer step) */
    double fwd_s, bwd_s, recompute_s, pointwise_s, optim_s;
    double transfer_s;             /* all transfers' own time at their bandwidths */
    double exposed_s;              /* the part of transfer_s that compute does not hide */
    double total_s;
} hpt_cost;

/* Whether c was measured on the kind of device o->device computes on (a CPU calibration serves
 * only --device cpu: its rates say nothing of a GPU's). */
int hpt_calibration_for_device(const hpt_calibration *c, int device);

/* GEMM rates of GPUs measured once (not calibrations: there is no cost model of a GPU yet, so
 * they give a floor, the step's FLOPs at the GEMM peak, never a prediction): TFLOP/s. */
typedef struct {
    const char *name;
    double fp32_tflops, tf32_tflops, bf16_tflops;
    const char *source;
} hpt_gpu_rates;
/* The i-th known GPU (NULL past the last). */
const hpt_gpu_rates *hpt_gpu_rates_known(int i);

/* Predicts o's training step on the machine c describes. HPT_ERR_INVALID when o needs a rate
 * that c lacks (a disk home without disk rates). */
hpt_status hpt_plan_cost(const hpt_plan_opts *o, const hpt_calibration *c, hpt_cost *out);
/* The same with the arena figures given (the search computes each once per activation choice):
 * none_arena the device arena of o's B, T with recompute none and o's attention, aoff
 * hpt_model_act_tier_bytes of o's activation choices. */
hpt_status hpt_plan_cost_acts(const hpt_plan_opts *o, const hpt_calibration *c, uint64_t none_arena,
                              const uint64_t aoff[HPT_TIER_COUNT], hpt_cost *out);

/* ---- the search (src/plan/auto.c) ---- */

typedef struct {
    int allow_lossy;          /* 8-bit state, bf16 weights, compressed activations */
    int allow_disk;           /* disk homes and disk activation offload (an --offload-dir) */
    int64_t sequences;        /* sequences per optimizer step (B*accum), fixed */
    uint64_t shared_bytes;    /* 0, or the device and host peaks together at most this: on the
                               * CPU both tiers are the same RAM (its free memory) */
    int first_fit;            /* stop at the first plan that fits (in time order): whether any
                               * plan of the space fits, cheaply (hptrain estimate --max-seq) */
} hpt_auto_opts;

#define HPT_AUTO_KEEP 6
/* the MLP tile the search and the smallest plans take (token rows; docs/activations.md) */
#define HPT_AUTO_MLP_TILE 1024
typedef struct {
    hpt_plan_opts o;          /* B, accum and the plan's choices */
    hpt_estimate e;
    hpt_cost cost;
    int fits;                 /* every tier within its budget */
    int bad_tier;             /* the first tier over its budget (when !fits); -1: the device
                               * and host peaks together over hpt_auto_opts.shared_bytes */
    uint64_t over_bytes;      /* by how much */
} hpt_auto_cand;

typedef struct {
    int n_tried, n_fit;
    int n;                    /* cand[0] the chosen plan, then the fastest others that fit */
    hpt_auto_cand cand[HPT_AUTO_KEEP];
    int n_nofit;              /* faster plans that do not fit, fastest first */
    hpt_auto_cand nofit[2];
} hpt_auto_result;

/* Searches the plan space around base (its model, T, budgets and offload_dir; its optimizer
 * kind) for the fastest plan that the estimator says fits every tier's budget. HPT_ERR_OOM
 * when none fits (out->nofit then holds the one nearest to fitting: the fewest bytes over the
 * budgets, the tiers' excesses and the shared one summed). */
hpt_status hpt_plan_auto(const hpt_plan_opts *base, const hpt_calibration *c,
                         const hpt_auto_opts *a, hpt_auto_result *out);

#endif /* HPTRAIN_PLANNER_H */
