/* hptrain/infer.h: generation with a key/value cache, fp32 or int8 weights. Part of hptrain.h.
 *
 * An hpt_infer is the inference engine beside the training model: it feeds tokens one step at a
 * time with a cache, from the model's weights or from a checkpoint (int8 copies read a few MiB
 * at a time). The section below has its manual. */
#ifndef HPTRAIN_INFER_H
#define HPTRAIN_INFER_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

/* ---- infer: generation with a key/value cache, fp32 or int8 weights ------------------
 * An hpt_infer runs tokens through the model one feed at a time, keeping every block's keys
 * and values (L, 2, ctx, C fp32, device tier) so a new token costs one row's work, and gives
 * the logits after the last fed token. Weights:
 *   HPT_WEIGHTS_F32  fp32 weights: the model's own, borrowed, with hpt_infer_create (the model
 *                    outlives the engine), or the engine's own with hpt_infer_load
 *   HPT_WEIGHTS_Q8   int8 copies of wte, qkvw, attprojw, fcw, fcprojw with one fp32 scale per
 *                    output channel (row), round to nearest of absmax/127; vectors and wpe
 *                    fp32. ~1 byte per parameter instead of 4 (hpt_infer_weight_bytes_for).
 * hpt_infer_load with HPT_WEIGHTS_Q8 reads the checkpoint a few MiB at a time, so the fp32
 * weights never sit in memory. Typical use:
 *     hpt_infer *inf;
 *     hpt_infer_load(mem, "model.bin", HPT_WEIGHTS_Q8, 0, &inf);   // ctx 0: maxT
 *     hpt_infer_generate(inf, tokens, n_prompt, n_new, 1.0f, 40, seed);
 *     hpt_infer_free(inf); */
typedef enum { HPT_WEIGHTS_F32 = 0, HPT_WEIGHTS_Q8 } hpt_weights;
const char *hpt_weights_name(hpt_weights w); /* "fp32", "int8" */
hpt_status hpt_weights_parse(const char *text, hpt_weights *out);
/* Bytes of an engine's weights for cfg (the estimate of what hpt_infer allocates for them). */
uint64_t hpt_infer_weight_bytes_for(const hpt_model_config *cfg, hpt_weights w);

/* Device bytes an engine allocates: its weights, its cache of ctx positions (0: maxT) and row
 * scratch: exactly what hpt_infer_load leaves allocated (hpt_infer_create with F32 borrows the
 * model's weights: hpt_infer_weight_bytes_for less). */
uint64_t hpt_infer_bytes_for(const hpt_model_config *cfg, hpt_weights w, int ctx);
/* Device bytes hpt_infer_loss allocates for the duration of its call (logits of 64 rows). */
uint64_t hpt_infer_loss_bytes_for(const hpt_model_config *cfg);

typedef struct hpt_infer hpt_infer;
/* An engine on model's weights (F32: borrowed; Q8: quantised copies, model may then be freed);
 * ctx cache positions, 0 or > maxT: maxT. */
hpt_status hpt_infer_create(hpt_mem *mem, hpt_model *model, hpt_weights w, int ctx,
                            hpt_infer **out);
/* An engine from an llm.c checkpoint (version 3 or 5) that owns its weights (fp32 or int8),
 * read a few MiB at a time: no model and no gradient buffer is made. */
hpt_status hpt_infer_load(hpt_mem *mem, const char *path, hpt_weights w, int ctx,
                          hpt_infer **out);
void hpt_infer_free(hpt_infer *inf);
const hpt_model_config *hpt_infer_get_config(const hpt_infer *inf);
int hpt_infer_get_ctx(const hpt_infer *inf);
int hpt_infer_get_pos(const hpt_infer *inf); /* positions filled since the last reset */
void hpt_infer_reset(hpt_infer *inf);        /* empties the cache */
/* Runs n tokens at the next positions; HPT_ERR_SHAPE when they do not fit the context. */
hpt_status hpt_infer_feed(hpt_infer *inf, const int32_t *tokens, int n);
/* (Vp) the logits after the last fed token. */
const float *hpt_infer_logits(const hpt_infer *inf);
/* Mean cross-entropy over the targets (a target < 0 is ignored) of B sequences (inputs,
 * targets (B, T), T <= ctx), each from an empty
 * cache: the training forward's loss within fp32 rounding (F32), or on int8 weights (Q8).
 * Allocates (64, Vp) logits for the call; leaves the cache empty. */
hpt_status hpt_infer_loss(hpt_infer *inf, const int32_t *inputs, const int32_t *targets, int B,
                          int T, float *loss_out);
/* Keeps the cache's first pos positions (pos <= hpt_infer_get_pos) and drops the rest: a
 * conversation whose rendered prefix is unchanged feeds only what follows it. The logits are
 * stale until the next feed. HPT_ERR_INVALID for pos outside [0, pos now]. */
hpt_status hpt_infer_truncate(hpt_infer *inf, int pos);
/* The next token from the logits after the last fed token, at temperature (> 0) among the top_k
 * likeliest (0: all; 1: the argmax, the lowest id among equals): hpt_infer_generate's draw.
 * *rng_state advances by one draw; start it with hpt_infer_rng_seed(seed). */
hpt_status hpt_infer_sample(hpt_infer *inf, float temperature, int top_k, uint64_t *rng_state,
                            int32_t *out);
uint64_t hpt_infer_rng_seed(uint64_t seed);
/* As hpt_model_generate; when the cache is full it restarts from the last ctx/2 tokens. */
hpt_status hpt_infer_generate(hpt_infer *inf, int32_t *tokens, int n_prompt, int n_new,
                              float temperature, int top_k, uint64_t seed);

#endif /* HPTRAIN_INFER_H */
