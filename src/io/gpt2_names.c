/* gpt2_names.c: the hpt_gpt2_* names (hptrain/gpt2.h), each forwarding to its hpt_model_* call,
 * until nothing in the project calls them (issue 33). In io, beside the loaders, so that the
 * model calls nothing above it. Nothing here may do more than forward its call. */
#include "hptrain.h"

#include "core/core.h"

#include <string.h>

hpt_status hpt_gpt2_config_parse(const char *shape, hpt_gpt2_config *out) {
    if (strncmp(shape, "gpt2", 4) != 0)
        return hpt_fail(HPT_ERR_INVALID, "'%s' is not a GPT-2 shape (gpt2-124m, gpt2-350m, "
                        "gpt2-774m, gpt2-1558m or gpt2:L=..,C=..,NH=..[,V=..][,T=..])", shape);
    return hpt_model_config_parse(shape, out);
}
hpt_status hpt_gpt2_config_check(const hpt_gpt2_config *c) { return hpt_model_config_check(c); }
size_t hpt_gpt2_num_params(const hpt_gpt2_config *c) { return hpt_model_config_num_params(c); }
hpt_status hpt_gpt2_create(hpt_mem *mem, const hpt_gpt2_config *cfg, hpt_gpt2 **out) {
    return hpt_model_create_config(mem, cfg, out);
}
hpt_status hpt_gpt2_load(hpt_mem *mem, const char *path, hpt_gpt2 **out) {
    return hpt_model_load(mem, path, out);
}
const hpt_gpt2_config *hpt_gpt2_get_config(const hpt_gpt2 *m) { return hpt_model_get_config(m); }
hpt_status hpt_gpt2_save(const hpt_gpt2 *m, const char *path) { return hpt_model_save(m, path); }
void hpt_gpt2_free(hpt_gpt2 *m) { hpt_model_free(m); }
hpt_status hpt_gpt2_init_random(hpt_gpt2 *m, uint64_t seed) { return hpt_model_init_random(m, seed); }
size_t hpt_gpt2_get_num_params(const hpt_gpt2 *m) { return hpt_model_num_params(m); }
float *hpt_gpt2_params(hpt_gpt2 *m) { return hpt_model_params(m); }
float *hpt_gpt2_grads(hpt_gpt2 *m) { return hpt_model_grads(m); }
const float *hpt_gpt2_logits(const hpt_gpt2 *m) { return hpt_model_logits(m); }
hpt_status hpt_gpt2_forward(hpt_gpt2 *m, const int32_t *inputs, const int32_t *targets, int B,
                            int T, float *loss_out) {
    return hpt_model_forward(m, inputs, targets, B, T, loss_out);
}
void hpt_gpt2_zero_grad(hpt_gpt2 *m) { hpt_model_zero_grad(m); }
hpt_status hpt_gpt2_backward(hpt_gpt2 *m) { return hpt_model_backward(m); }
void hpt_gpt2_free_activations(hpt_gpt2 *m) { hpt_model_free_activations(m); }
void hpt_gpt2_release_grads(hpt_gpt2 *m) { hpt_model_release_grads(m); }
hpt_status hpt_gpt2_acquire_grads(hpt_gpt2 *m) { return hpt_model_acquire_grads(m); }
hpt_status hpt_gpt2_act_tier_bytes(const hpt_gpt2_config *cfg, int B, int T, const hpt_act_opts *o,
                                   uint64_t out[HPT_TIER_COUNT]) {
    return hpt_model_act_tier_bytes(cfg, B, T, o, out);
}
hpt_act_opts hpt_gpt2_act_defaults(void) { return hpt_act_defaults(); }
hpt_status hpt_gpt2_set_act_opts(hpt_gpt2 *m, const hpt_act_opts *o) {
    return hpt_model_set_act_opts(m, o);
}
hpt_act_opts hpt_gpt2_get_act_opts(const hpt_gpt2 *m) { return hpt_model_get_act_opts(m); }
size_t hpt_gpt2_activation_bytes(const hpt_gpt2_config *cfg, int B, int T, const hpt_act_opts *o) {
    return hpt_model_activation_bytes(cfg, B, T, o);
}
hpt_status hpt_gpt2_generate(hpt_gpt2 *m, int32_t *tokens, int n_prompt, int n_new,
                             float temperature, int top_k, uint64_t seed) {
    return hpt_model_generate(m, tokens, n_prompt, n_new, temperature, top_k, seed);
}
hpt_status hpt_gpt2_create_offload(hpt_mem *mem, const hpt_model_config *cfg,
                                   const hpt_offload_opts *o, hpt_gpt2 **out) {
    return hpt_model_create_config_offload(mem, cfg, o, out);
}
hpt_status hpt_gpt2_load_offload(hpt_mem *mem, const char *path, const hpt_offload_opts *off,
                                 hpt_gpt2 **out) {
    return hpt_model_load_offload(mem, path, off, out);
}
hpt_status hpt_gpt2_copy_params(hpt_gpt2 *m, float *dst) { return hpt_model_copy_params(m, dst); }
void hpt_gpt2_offload_stats(const hpt_gpt2 *m, hpt_offload_stats *out) {
    hpt_model_offload_stats(m, out);
}
hpt_status hpt_gpt2_read_config(const char *path, hpt_model_config *out) {
    return hpt_model_read_config(path, out);
}
