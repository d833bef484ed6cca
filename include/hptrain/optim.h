/* hptrain/optim.h: the optimizers (AdamW, Lion, Adam-mini, SGD), their state in 32 or 8 bits,
 * clipping and the learning-rate schedule. Part of hptrain.h.
 *
 *   hpt_adamw_opts ao = hpt_optim_defaults(HPT_OPTIM_ADAMW);   // a choice of the plan
 *   hpt_optim *opt; hpt_optim_create(mem, model, &ao, &opt);
 *   hpt_optim_step(opt, lr, grad_clip, &gnorm);                 // after each backward
 *
 * The state comes from the model's hpt_mem (category optim), on the device or, with the offload
 * engine, at the optimizer's home. */
#ifndef HPTRAIN_OPTIM_H
#define HPTRAIN_OPTIM_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

/* The optimizer (docs/optimizers.md has the formulas, state bytes and advice):
 *   ADAMW      PyTorch's AdamW, decoupled weight decay. State m, v per parameter.
 *   LION       Chen et al. 2023: p -= lr*(sign(beta1*m + (1-beta1)*g) + wd*p), then
 *              m = beta2*m + (1-beta2)*g. State m. Use a 3-10x smaller lr than AdamW.
 *   ADAM_MINI  AdamW with one second moment per block: each row of a linear weight or
 *              embedding, each (per-layer) vector; v_b tracks the block's mean of g^2.
 *              State m per parameter plus v per block (always fp32).
 *   SGD        PyTorch's SGD with momentum beta1 (dampening 0, not Nesterov) and coupled
 *              (L2) weight decay: d = g + wd*p, buf = beta1*buf + d, p -= lr*buf. State buf.
 * State width: 32 (fp32) or 8: block-wise quantised states (blocks of 256 values, one fp32
 * absmax per block, Dettmers et al.'s dynamic map: signed for m; AdamW's v as sqrt(v) on the
 * unsigned map, whose smallest code is 1e-7 rather than 0, so no v reads back as 0 under a
 * nonzero m), updated in fp32 inside the step and requantised. */
typedef enum {
    HPT_OPTIM_ADAMW = 0,
    HPT_OPTIM_LION,
    HPT_OPTIM_ADAM_MINI,
    HPT_OPTIM_SGD,
    HPT_OPTIM_COUNT
} hpt_optim_kind;
const char *hpt_optim_name(hpt_optim_kind k); /* "adamw", "lion", "adam-mini", "sgd" */
/* HPT_ERR_INVALID for an unknown name. */
hpt_status hpt_optim_parse(const char *name, hpt_optim_kind *out);

/* The optimizer's settings (named after the first optimizer; every kind uses it). */
typedef struct {
    float lr;           /* peak learning rate */
    float beta1, beta2; /* SGD: beta1 is the momentum, beta2 unused */
    float eps;          /* AdamW, Adam-mini */
    float weight_decay; /* decoupled (AdamW, Lion, Adam-mini); coupled L2 for SGD, as PyTorch */
    int decay_all;      /* 1: decay every tensor; 0: only matrices (hpt_tensor_info.is_matrix) */
    int optimizer;      /* hpt_optim_kind; 0 = AdamW */
    int state_bits;     /* 32 (or 0, read as 32) or 8 */
    int state32_embeddings; /* with 8-bit states: wte and wpe keep 32-bit state */
} hpt_adamw_opts;
hpt_adamw_opts hpt_adamw_defaults(void); /* 3e-4, 0.9, 0.95, 1e-8, 0.1, matrices only, AdamW fp32 */
/* Defaults of each kind: AdamW's, with Lion betas 0.9, 0.99 and lr 1e-4; SGD momentum 0.9,
 * weight decay 0, lr 0.1; Adam-mini as AdamW. */
hpt_adamw_opts hpt_optim_defaults(hpt_optim_kind k);

typedef struct hpt_optim hpt_optim;
/* Allocates the optimizer's state (optimizer category, device tier) for the model's
 * parameters: hpt_optim_state_bytes() bytes, zero. */
hpt_status hpt_optim_create(hpt_mem *mem, hpt_model *model, const hpt_adamw_opts *o,
                            hpt_optim **out);
void hpt_optim_free(hpt_optim *o);
/* One optimizer step with learning rate lr. If clip > 0 the gradients are scaled so their
 * global L2 norm is at most clip. *grad_norm_out (may be NULL) gets the norm before clipping. */
hpt_status hpt_optim_step(hpt_optim *o, float lr, float clip, float *grad_norm_out);
/* hpt_optim_step on the gradients times grad_scale (> 0; gradient accumulation passes 1/K
 * for K micro-batches summed into the gradients): the norm, the clipping and the update all
 * see grad_scale * grads. The buffer itself is not changed (the factor is applied inside the
 * update, at no extra pass). grad_scale 1 is hpt_optim_step, bit for bit. */
hpt_status hpt_optim_step_scaled(hpt_optim *o, float lr, float clip, float grad_scale,
                                 float *grad_norm_out);
/* The fused update (a model with the engine in fused mode): begin before the backward (sets
 * lr, counts the step, takes the clip factor from the previous step's norm), then the
 * backward updates each block as its gradients complete; end updates wte, wpe and the final
 * layernorm, waits for the blocks' updates and gives this step's gradient norm. */
hpt_status hpt_optim_fused_begin(hpt_optim *o, float lr, float clip);
/* The same, the gradients taken times grad_scale (their norm too: N processes' 1/N). */
hpt_status hpt_optim_fused_begin_scaled(hpt_optim *o, float lr, float clip, float grad_scale);
hpt_status hpt_optim_fused_end(hpt_optim *o, float *grad_norm_out);
/* Moves the state buffers to tier (DEVICE or HOST; transfers in the timeline). While any is on
 * HOST a step is refused; the values are unchanged, so moving back continues bit for bit. */
hpt_status hpt_optim_set_tier(hpt_optim *o, hpt_tier tier);
hpt_tier hpt_optim_get_tier(const hpt_optim *o); /* DEVICE when every buffer is there */
int64_t hpt_optim_get_t(const hpt_optim *o); /* steps taken */
/* The fused update's previous gradient norm (its clip factor's source; 0: none yet), which the
 * training state saves so a resumed fused run clips its first step as the uninterrupted one. */
float hpt_optim_get_prev_norm(const hpt_optim *o);
void hpt_optim_set_prev_norm(hpt_optim *o, float norm);
void hpt_optim_set_t(hpt_optim *o, int64_t t);
const hpt_adamw_opts *hpt_optim_get_opts(const hpt_optim *o);
/* AdamW with 32-bit state only (else NULL): the moments, (num_params) floats each;
 * const-in, mutable-out like strchr. */
float *hpt_optim_m(const hpt_optim *o);
float *hpt_optim_v(const hpt_optim *o);

/* The optimizer's state as the buffers it allocated, in a fixed order (the checkpoint's):
 * first moment fp32, codes, scales; second moment fp32, codes, scales. Empty buffers are
 * listed with bytes 0 and data NULL. */
#define HPT_OPTIM_NUM_BUFS 6
typedef struct {
    void *data;         /* borrowed from the optimizer */
    size_t bytes;
    const char *name;   /* "m", "m_codes", "m_scales", "v", "v_codes", "v_scales" */
} hpt_optim_buf;
void hpt_optim_state_buffers(const hpt_optim *o, hpt_optim_buf out[HPT_OPTIM_NUM_BUFS]);
/* The bytes of state an optimizer with settings o allocates for a model of shape cfg (the
 * sum of its buffers); 0 for invalid settings. */
uint64_t hpt_optim_state_bytes(const hpt_model_config *cfg, const hpt_adamw_opts *o);
/* The same for LoRA adapters lora on cfg (an optimizer made on a model with adapters updates
 * them only); 0 for invalid settings or targets. */
uint64_t hpt_optim_lora_state_bytes(const hpt_model_config *cfg, const hpt_lora_opts *lora,
                                    const hpt_adamw_opts *o);

/* Linear warmup from 0 to max_lr over warmup steps, then cosine to min_lr at total. */
float hpt_lr_cosine(int64_t step, int64_t total, int64_t warmup, float max_lr, float min_lr);

#endif /* HPTRAIN_OPTIM_H */
