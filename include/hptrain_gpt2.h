/* hptrain_gpt2.h: DEPRECATED. The hpt_gpt2_* names the model calls had before one object type
 * served every architecture (and that type's, hpt_gpt2, now hpt_model), each the same as its
 * hpt_model_* (or hpt_act_*) call, for programs
 * written against them; nothing in hptrain includes this header, and it goes in a later release.
 * hpt_gpt2_config_parse (GPT-2 shapes only) and hpt_gpt2_tensors are gone: hpt_model_config_parse
 * takes every architecture's shapes, hpt_model_tensor describes any model's tensors. */
#ifndef HPTRAIN_GPT2_COMPAT_H
#define HPTRAIN_GPT2_COMPAT_H
#include <hptrain.h>

typedef struct hpt_model hpt_gpt2;
typedef hpt_model_config hpt_gpt2_config;
typedef hpt_act_opts hpt_gpt2_act_opts;

static inline hpt_status hpt_gpt2_config_check(const hpt_gpt2_config *cfg) {
    return hpt_model_config_check(cfg);
}
static inline size_t hpt_gpt2_num_params(const hpt_gpt2_config *cfg) {
    return hpt_model_config_num_params(cfg);
}
static inline hpt_status hpt_gpt2_create(hpt_mem *mem, const hpt_gpt2_config *cfg, hpt_gpt2 **out) {
    return hpt_model_create_config(mem, cfg, out);
}
static inline hpt_status hpt_gpt2_load(hpt_mem *mem, const char *path, hpt_gpt2 **out) {
    return hpt_model_load(mem, path, out);
}
static inline const hpt_gpt2_config *hpt_gpt2_get_config(const hpt_gpt2 *m) {
    return hpt_model_get_config(m);
}
static inline hpt_status hpt_gpt2_save(const hpt_gpt2 *m, const char *path) {
    return hpt_model_save(m, path);
}
static inline void hpt_gpt2_free(hpt_gpt2 *m) {
    hpt_model_free(m);
}
static inline hpt_status hpt_gpt2_init_random(hpt_gpt2 *m, uint64_t seed) {
    return hpt_model_init_random(m, seed);
}
static inline size_t hpt_gpt2_get_num_params(const hpt_gpt2 *m) {
    return hpt_model_num_params(m);
}
static inline float *hpt_gpt2_params(hpt_gpt2 *m) {
    return hpt_model_params(m);
}
static inline float *hpt_gpt2_grads(hpt_gpt2 *m) {
    return hpt_model_grads(m);
}
static inline const float *hpt_gpt2_logits(const hpt_gpt2 *m) {
    return hpt_model_logits(m);
}
static inline hpt_status hpt_gpt2_forward(hpt_gpt2 *m, const int32_t *inputs, const int32_t *targets,
                                          int B, int T, float *loss_out) {
    return hpt_model_forward(m, inputs, targets, B, T, loss_out);
}
static inline void hpt_gpt2_zero_grad(hpt_gpt2 *m) {
    hpt_model_zero_grad(m);
}
static inline hpt_status hpt_gpt2_backward(hpt_gpt2 *m) {
    return hpt_model_backward(m);
}
static inline void hpt_gpt2_free_activations(hpt_gpt2 *m) {
    hpt_model_free_activations(m);
}
static inline void hpt_gpt2_release_grads(hpt_gpt2 *m) {
    hpt_model_release_grads(m);
}
static inline hpt_status hpt_gpt2_acquire_grads(hpt_gpt2 *m) {
    return hpt_model_acquire_grads(m);
}
static inline hpt_status hpt_gpt2_act_tier_bytes(const hpt_gpt2_config *cfg, int B, int T,
                                                 const hpt_act_opts *o, uint64_t out[HPT_TIER_COUNT]) {
    return hpt_model_act_tier_bytes(cfg, B, T, o, out);
}
static inline hpt_act_opts hpt_gpt2_act_defaults(void) {
    return hpt_act_defaults();
}
static inline hpt_status hpt_gpt2_set_act_opts(hpt_gpt2 *m, const hpt_act_opts *o) {
    return hpt_model_set_act_opts(m, o);
}
static inline hpt_act_opts hpt_gpt2_get_act_opts(const hpt_gpt2 *m) {
    return hpt_model_get_act_opts(m);
}
static inline size_t hpt_gpt2_activation_bytes(const hpt_gpt2_config *cfg, int B, int T,
                                               const hpt_act_opts *o) {
    return hpt_model_activation_bytes(cfg, B, T, o);
}
static inline hpt_status hpt_gpt2_generate(hpt_gpt2 *m, int32_t *tokens, int n_prompt, int n_new,
                                           float temperature, int top_k, uint64_t seed) {
    return hpt_model_generate(m, tokens, n_prompt, n_new, temperature, top_k, seed);
}
static inline hpt_status hpt_gpt2_create_offload(hpt_mem *mem, const hpt_model_config *cfg,
                                                 const hpt_offload_opts *o, hpt_gpt2 **out) {
    return hpt_model_create_config_offload(mem, cfg, o, out);
}
static inline hpt_status hpt_gpt2_load_offload(hpt_mem *mem, const char *path, const hpt_offload_opts *off,
                                               hpt_gpt2 **out) {
    return hpt_model_load_offload(mem, path, off, out);
}
static inline hpt_status hpt_gpt2_copy_params(hpt_gpt2 *m, float *dst) {
    return hpt_model_copy_params(m, dst);
}
static inline void hpt_gpt2_offload_stats(const hpt_gpt2 *m, hpt_offload_stats *out) {
    hpt_model_offload_stats(m, out);
}
static inline hpt_status hpt_gpt2_read_config(const char *path, hpt_model_config *out) {
    return hpt_model_read_config(path, out);
}

#endif /* HPTRAIN_GPT2_COMPAT_H */
