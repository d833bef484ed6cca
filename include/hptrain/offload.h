/* hptrain/offload.h: the offload engine's choices and the model made with it (src/offload/,
 * docs/offload.md). Part of hptrain.h.
 *
 * The blocks' parameters, gradients and optimizer state live at a home tier (device, host or
 * disk) and come to the device block by block; an hpt_offload_opts (a choice of the plan) says
 * where, how many blocks at once, whether the update is fused into the backward, and at what
 * precision weights, gradients and embeddings are kept. All DEVICE and nothing else set: no
 * engine, the model as hptrain/model.h makes it. */
#ifndef HPTRAIN_OFFLOAD_H
#define HPTRAIN_OFFLOAD_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

/* The engine (src/offload/engine.c):
 * Each transformer block's parameters, gradients and optimizer state have a home tier; the
 * blocks' parameters come to the device only while needed: at most max_active (K) blocks at
 * once, the next prefetch (P) blocks loading on a worker thread while one computes (forward
 * order in forward, reverse in backward). wte, wpe and the final layernorm stay on the device.
 * Homes are laid out block by block (a block's 12 tensors' slices packed, 4096-byte aligned),
 * so a block moves in one transfer; the disk tier uses direct I/O.
 *   params, optim  the home of the blocks' weights and of their AdamW m and v (DEVICE, HOST or
 *                  DISK); any other optimizer or 8-bit state keeps its whole state in the
 *                  optim tier (DEVICE or HOST; DISK is HPT_ERR_UNSUPPORTED), in the same
 *                  layout as without the engine
 *   grads          exact mode: where each block's gradients wait for the optimizer after its
 *                  backward (the optimizer then streams over all blocks, so clipping uses this
 *                  step's global norm: the same bits as without offload); fused mode keeps
 *                  gradients only in device slots of one block
 *   fused          1: each block's update runs (on the worker, where its state lives) as soon as
 *                  its gradients are complete, overlapping the backward of the blocks before
 *                  it; clipping then uses the previous step's global norm (none at the first
 *                  step). With clipping off, the same bits as the unfused update, for every
 *                  optimizer and state width.
 * An active engine (any home not DEVICE, or fused) changes what hpt_model_params() and
 * hpt_model_grads() return: NULL (the blocks are not in one buffer); hpt_model_copy_params()
 * gathers the weights in checkpoint order, and checkpoints are saved and loaded (the
 * *_load_offload calls) in the same formats as without the engine. Gradient accumulation works in exact mode (a later
 * micro-batch's backward adds to the block's gradients brought back from their home), not
 * with the fused update. */
/* The precision of the blocks' weights at their home (hpt_offload_opts.weights; training's
 * counterpart of inference's hpt_weights). bf16 homes
 * (device, host, or disk for SR; Kahan on disk is HPT_ERR_UNSUPPORTED; a disk home is read and
 * written through two host staging blocks of bf16) hold 2 bytes per weight, Kahan 2 more (the
 * compensation, bf16); acquiring a block widens it into an fp32 device slot, so compute stays
 * fp32, and the optimizer's update rewrites the home: stochastic rounding (SR; the noise is a
 * hash of the step and the element) or round to nearest plus the compensation (Kahan). The
 * embeddings (unless hpt_offload_opts.embeddings is HPT_EMB_BF16) and the final layer norm stay
 * fp32. Checkpoints stay fp32: the weights are widened
 * when saved and rounded to nearest when loaded (exact for a bf16 run's own checkpoint), and the
 * training state (hpt_state_save) also holds the Kahan compensation, so a bf16-kahan run resumes
 * bit for bit. Loaded with other weights (fp32, bf16-sr) a Kahan state's compensation is dropped;
 * a state without one loaded into bf16-kahan weights starts it at the residue of rounding the
 * saved weights (zero when they are bf16 values, as a bf16 run's are). Any value but FP32 makes
 * the engine active. */
typedef enum { HPT_BW_FP32 = 0, HPT_BW_BF16_SR, HPT_BW_BF16_KAHAN, HPT_BW_COUNT } hpt_block_weights;
/* "fp32" | "bf16-sr" | "bf16-kahan" into *out. */
hpt_status hpt_block_weights_parse(const char *text, hpt_block_weights *out);
const char *hpt_block_weights_name(hpt_block_weights w);
/* The precision of the blocks' gradients at their home (hpt_offload_opts.grad_home; exact mode
 * only, HPT_ERR_UNSUPPORTED with fused). FP16 and BF16 homes hold 2 bytes per gradient (device,
 * host or disk; each block rounded up to 4096 bytes): a block's gradients are computed in an
 * fp32 device slot, rounded to nearest even when they go home, and widened when they come back
 * (accumulation's later micro-batches, the optimizer's streaming pass). FP16 needs a loss scale
 * (hpt_train_opts.loss_scale): its narrowing reports any value beyond 65504 or not finite, and
 * the trainer skips that step. Any value but FP32 makes the engine active. */
typedef enum { HPT_GH_FP32 = 0, HPT_GH_BF16, HPT_GH_FP16, HPT_GH_COUNT } hpt_grad_home;
/* "fp32" | "bf16" | "fp16" into *out. */
hpt_status hpt_grad_home_parse(const char *text, hpt_grad_home *out);
const char *hpt_grad_home_name(hpt_grad_home g);
/* The tied embedding wte (and wpe) under the engine (hpt_offload_opts.embeddings; src/model/embed.c).
 * FULL (the default) keeps them fp32 with a whole (Vp, C) gradient. CHUNKED and BF16 need
 * --fused-update: the head runs over the vocabulary in chunks of vocab_chunk rows of wte (its
 * logits never exist whole), and wte is updated after the backward chunk by chunk (each chunk's
 * head gradient recomputed from the saved lnf and log-sum-exp, plus the encoder's rows of its
 * tokens) by the optimizer's own update of those values: wte's gradient memory is one chunk
 * (and with a row-chunked head, act.head_chunk, the logits (rows, vocab_chunk)). The price:
 * one head GEMM more per step than FULL with the same head chunk (the logits recomputed for
 * wte's gradient at the end). CHUNKED keeps wte and wpe fp32; BF16 stores them in
 * bf16 with the blocks' rounding (hpt_offload_opts.weights: bf16-sr or bf16-kahan, whose
 * compensation the training state saves as the section "emb_comp"). lnfw, lnfb stay fp32. A
 * forward without targets (the full logits) is refused; sampling and checks copy the weights
 * out (hpt_model_copy_params). Clipping is the fused update's (the previous step's norm); wte's
 * chunks are part of this step's norm. Results equal FULL's up to the reduction order of the
 * chunked sums (docs/optimizers.md). */
typedef enum { HPT_EMB_FULL = 0, HPT_EMB_CHUNKED, HPT_EMB_BF16, HPT_EMB_COUNT } hpt_embeddings;
/* "full" | "chunked" | "bf16" into *out. */
hpt_status hpt_embeddings_parse(const char *text, hpt_embeddings *out);
const char *hpt_embeddings_name(hpt_embeddings e);
typedef struct {
    hpt_tier params, grads, optim; /* homes; all DEVICE and fused 0: no engine (the default) */
    int max_active;                /* K >= 1 device slots of block parameters */
    int prefetch;                  /* P, 0 <= P < K: blocks loaded ahead of the one computing */
    int fused;
    int weights;                   /* hpt_block_weights: the blocks' weights' home precision */
    int grad_home;                 /* hpt_grad_home: the blocks' gradients' home precision */
    int embeddings;                /* hpt_embeddings: wte's and wpe's storage and update */
    int vocab_chunk;               /* CHUNKED, BF16: rows of wte per chunk (0: 2048), a
                                    * multiple of 256 / gcd(C, 256) so that 8-bit state blocks
                                    * never straddle two chunks */
    int shards;                    /* ZeRO-3 (--zero 3 over N processes; docs/zero_engine.md):
                                    * N > 1, each home holds this rank's 1/N of every block,
                                    * gathered at acquisition; 0 or 1: whole blocks */
    int zero;                      /* with shards > 1, the ZeRO stage: 3 (or 0) as above; 1, 2:
                                    * the weights' homes whole on every rank (all-gathered after
                                    * each owner's update), m and v sharded, and at 2 the
                                    * gradients' homes (docs/zero_engine.md) */
} hpt_offload_opts;
hpt_offload_opts hpt_offload_defaults(void);  /* all DEVICE, K 2, P 1, not fused */
int hpt_offload_active(const hpt_offload_opts *o);
/* "none" | "host" | "disk" (params, grads and optim there) | "params=T,grads=T,optim=T" (T:
 * device, host or disk; missing keys stay as they are) into o. */
hpt_status hpt_offload_parse(const char *text, hpt_offload_opts *o);
/* HPT_ERR_INVALID / HPT_ERR_UNSUPPORTED with the reason for a choice the engine refuses. */
hpt_status hpt_offload_check(const hpt_offload_opts *o);
/* hpt_model_create_config with the engine (o NULL or inactive: hpt_model_create_config); DISK
 * homes need hpt_mem_set_disk_dir first. */
hpt_status hpt_model_create_config_offload(hpt_mem *mem, const hpt_model_config *cfg,
                                           const hpt_offload_opts *o, hpt_model **out);
/* hpt_model_create and hpt_model_load with the engine (o NULL or inactive: none). */
hpt_status hpt_model_create_offload(hpt_mem *mem, const char *shape, const hpt_offload_opts *o,
                                    hpt_model **out);
hpt_status hpt_model_load_offload(hpt_mem *mem, const char *path, const hpt_offload_opts *o,
                                  hpt_model **out);
/* The weights in checkpoint order into dst (num_params floats), with or without the engine. */
hpt_status hpt_model_copy_params(hpt_model *m, float *dst);
/* What the engine moved and how long it waited (all zero without one). */
typedef struct {
    uint64_t bytes_in[HPT_TIER_COUNT];  /* bytes read from each home tier (loads, state reads) */
    uint64_t bytes_out[HPT_TIER_COUNT]; /* bytes written to each home tier (write-backs) */
    uint64_t loads, acquires;           /* block loads queued; block acquisitions (forward,
                                         * recompute, backward): acquires - loads were found on the device */
    double io_s;                        /* worker time in copies and disk transfers */
    double update_s;                    /* worker time in optimizer updates */
    double compute_update_s;            /* compute-thread time in updates (fused, state on disk) */
    double wait_s;                      /* compute-thread time blocked on the worker */
    /* the worker's transfers by direction, each timed where it runs (docs/planner.md: the
     * planner takes the engine's own disk rates from these): bytes and seconds */
    uint64_t disk_read_bytes, disk_write_bytes, host_copy_bytes;
    double disk_read_s, disk_write_s, host_copy_s;
    double disk_beside_s;               /* disk seconds while the compute thread was not waiting
                                         * (computing beside the transfers) */
    /* wait_s by what the job waited on was doing: a disk read, a disk write, a host copy, an
     * update (a job of several: its disk write, else its read, else its copy) */
    double wait_disk_read_s, wait_disk_write_s, wait_host_s, wait_update_s;
} hpt_offload_stats;
void hpt_model_offload_stats(const hpt_model *m, hpt_offload_stats *out);

#endif /* HPTRAIN_OFFLOAD_H */
