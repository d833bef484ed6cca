/* compat.c: the hpt_gpt2_* calls on a model object, thin wrappers of the hpt_model_* ones (one
 * object type serves every architecture), kept for one release so programs written against
 * them build unchanged. Nothing here may do more than forward its call. */
#include "hptrain.h"

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
hpt_status hpt_gpt2_set_act_opts(hpt_gpt2 *m, const hpt_act_opts *o) {
    return hpt_model_set_act_opts(m, o);
}
hpt_act_opts hpt_gpt2_get_act_opts(const hpt_gpt2 *m) { return hpt_model_get_act_opts(m); }
hpt_status hpt_gpt2_generate(hpt_gpt2 *m, int32_t *tokens, int n_prompt, int n_new,
                             float temperature, int top_k, uint64_t seed) {
    return hpt_model_generate(m, tokens, n_prompt, n_new, temperature, top_k, seed);
}
hpt_status hpt_gpt2_copy_params(hpt_gpt2 *m, float *dst) { return hpt_model_copy_params(m, dst); }
void hpt_gpt2_offload_stats(const hpt_gpt2 *m, hpt_offload_stats *out) {
    hpt_model_offload_stats(m, out);
}
