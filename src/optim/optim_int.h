/* optim_int.h: optim.c's state layout and object, shared with optim_cut.c (ZeRO's cut state
 * and its checkpoint pieces); not part of the optimizer's interface (optim.h). The layout's
 * description: docs/optimizers.md, "The state's layout". */
#ifndef HPT_OPTIM_INT_H
#define HPT_OPTIM_INT_H
#include "core/core.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "offload/engine.h"
#include "optim/optim.h"

enum { B_M = 0, B_M_CODES, B_M_SCALES, B_V, B_V_CODES, B_V_SCALES };
static const char *const k_buf_names[HPT_OPTIM_NUM_BUFS] = {"m", "m_codes", "m_scales",
                                                            "v", "v_codes", "v_scales"};

typedef struct {
    int q8;          /* 1: 8-bit state */
    int stacked;     /* a block tensor (layer HPT_LAYER_STACKED) */
    size_t off;      /* values into the model's checkpoint order (the flat buffers without the
                      * engine) */
    size_t slices;   /* L for a per-layer tensor, else 1 */
    size_t unit;     /* the optimizer's unit (optim.h) of the tensor's slice 0 */
    size_t s0, ns;   /* the slices this layout holds state for: [s0, s0 + ns) (all of them but
                      * with ZeRO's sharding: optim_owner) */
    size_t sn;       /* values per slice */
    size_t ca, cn;   /* the part of each slice this layout holds: values [ca, ca + cn) (0, sn but
                      * with ZeRO in the engine: this rank's cut, eng_cuts) */
    size_t sc_per;   /* 8-bit: scales per slice */
    size_t f32_off;  /* floats into the fp32 arrays (fp32 tensors) */
    size_t q_off;    /* codes into the code arrays (8-bit tensors) */
    size_t sc_off;   /* scales into the scale arrays (8-bit tensors) */
    size_t row;      /* Adam-mini: values per second-moment block */
    size_t v_off;    /* Adam-mini: blocks into the v array */
} tensor_layout;

typedef struct {
    int n;           /* tensors (the table's) */
    size_t u_lo, u_hi; /* the units held: [u_lo, u_hi) */
    tensor_layout t[HPT_TABLE_MAX];
    uint64_t bytes[HPT_OPTIM_NUM_BUFS];
} layout;

struct hpt_optim {
    hpt_mem *mem;
    const hpt_backend *be; /* the update ops and device copies (hpt_backend_of the mem) */
    const hpt_backend *be_eng; /* the engine's callback's: the CPU's when the engine updates
                                * host-homed blocks on CPU threads (a GPU), else be */
    hpt_model *model; /* borrowed */
    int lora;        /* 1: the model's LoRA adapters are the parameters (tab, params, grads) */
    const hpt_tensor_table *tab; /* the model's (model_table) */
    hpt_adamw_opts o;
    size_t n;
    layout lay;
    void *buf[HPT_OPTIM_NUM_BUFS]; /* (lay.bytes[i]) each, NULL when empty */
    float map_signed[256], map_unsigned[256];
    int64_t t;       /* steps taken */
    float wd[HPT_TABLE_MAX]; /* weight decay of each tensor */
    int slice_tensor[HPT_TABLE_MAX]; /* the table's tensor of block slice s */
    /* the engine's updates (read by its worker between a step's start and its end) */
    float lr_now, scale_now;
    float gscale_now;  /* fused: the step's gradient scale (1/N over N processes) */
    int armed;       /* 1 while a step's block updates may run */
    float prev_norm; /* fused: the previous step's gradient norm (0 before the first) */
    int eng_homes;   /* 1: the engine's homes hold the blocks' m and v (AdamW fp32) */
    int cut;         /* 1: ZeRO in the engine, this file's state of the blocks' cuts (eng_cuts) */
    int nbcut;       /* 1: ZeRO in the engine, the non-block tensors' state of this rank's part
                      * only (eng_zemb_cuts; engine_zemb.c), their weights all-gathered after
                      * the owners' update */
    size_t n_units;  /* the table's units (optim.h) */
    double *unit_sumsq; /* (n_units) the step's sums of squares per unit (held ones; the others
                         * from gather) */
    /* the sums of squares asked of the backend at once (sumsq_many), n_units at most each:
     * the ranges (device pointers, lengths), the unit (or tensor) each is for, their sums */
    const float **many_x;
    size_t *many_n, *many_u;
    double *many_s;
    int cover;         /* optim_grads_overflow: -1 not known, 1 the units are the flat gradients */
    int ss_fresh;      /* 1: ss_cached is this step's sum (optim_grads_overflow), not yet used */
    double ss_cached;
    optim_gather_fn gather; /* ZeRO: fills the units this process does not hold */
    void *gather_ctx;
    const float *run_grads; /* ZeRO-2 (optim_set_run_grads): the held block slices' gradients,
                             * values [run_lo, ...) of checkpoint order; NULL: the flat buffer */
    size_t run_lo;
    hpt_tier home;   /* where buf[] is made: the device, or the engine's optim home (host)
                      * without eng_homes */
    hpt_tier tier[HPT_OPTIM_NUM_BUFS]; /* where each buf[] lives: home, or HOST while moved by
                                        * hpt_optim_set_tier */
};

/* The state's layout for the tensors of table t (configuration c's): optim.c. */
void optim_plan_layout(const hpt_model_config *c, const hpt_tensor_table *t,
                       const hpt_adamw_opts *o, int eng_homes, size_t u_lo, size_t u_hi,
                       const size_t *cut_a, const size_t *cut_z, layout *L);
/* Rank q's cut of every tensor's slices (by the table's index) from the engine's shards;
 * returns the number of shards: optim.c. */
int optim_cut_of(const hpt_optim *op, struct offload_engine *eng, int q, size_t *ca, size_t *cz);

#endif
