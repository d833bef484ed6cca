/* hptrain/gpt2.h: the hpt_gpt2_* names of the model calls, before one object type served every
 * architecture: each the same as its hpt_model_* (or hpt_act_*) call. Part of hptrain.h only
 * until nothing in the project calls them (issue 33); then include/hptrain_gpt2.h. */
#ifndef HPTRAIN_GPT2_H
#define HPTRAIN_GPT2_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

typedef hpt_model_config hpt_gpt2_config;
typedef hpt_act_opts hpt_gpt2_act_opts;
/* GPT-2 shapes only (HPT_ERR_INVALID for another architecture's); see hpt_model_config_parse. */
hpt_status hpt_gpt2_config_parse(const char *shape, hpt_gpt2_config *out);
hpt_status hpt_gpt2_config_check(const hpt_gpt2_config *cfg);
size_t hpt_gpt2_num_params(const hpt_gpt2_config *cfg);
hpt_status hpt_gpt2_create(hpt_mem *mem, const hpt_gpt2_config *cfg, hpt_gpt2 **out);
hpt_status hpt_gpt2_load(hpt_mem *mem, const char *path, hpt_gpt2 **out);
const hpt_gpt2_config *hpt_gpt2_get_config(const hpt_gpt2 *m);
hpt_status hpt_gpt2_save(const hpt_gpt2 *m, const char *path);
void hpt_gpt2_free(hpt_gpt2 *m);
hpt_status hpt_gpt2_init_random(hpt_gpt2 *m, uint64_t seed);
size_t hpt_gpt2_get_num_params(const hpt_gpt2 *m);
float *hpt_gpt2_params(hpt_gpt2 *m);
float *hpt_gpt2_grads(hpt_gpt2 *m);
const float *hpt_gpt2_logits(const hpt_gpt2 *m);
hpt_status hpt_gpt2_forward(hpt_gpt2 *m, const int32_t *inputs, const int32_t *targets,
                            int B, int T, float *loss_out);
void hpt_gpt2_zero_grad(hpt_gpt2 *m);
hpt_status hpt_gpt2_backward(hpt_gpt2 *m);
void hpt_gpt2_free_activations(hpt_gpt2 *m);
void hpt_gpt2_release_grads(hpt_gpt2 *m);
hpt_status hpt_gpt2_acquire_grads(hpt_gpt2 *m);
hpt_status hpt_gpt2_act_tier_bytes(const hpt_gpt2_config *cfg, int B, int T,
                                   const hpt_act_opts *o, uint64_t out[HPT_TIER_COUNT]);
hpt_act_opts hpt_gpt2_act_defaults(void);
hpt_status hpt_gpt2_set_act_opts(hpt_gpt2 *m, const hpt_act_opts *o);
hpt_act_opts hpt_gpt2_get_act_opts(const hpt_gpt2 *m);
size_t hpt_gpt2_activation_bytes(const hpt_gpt2_config *cfg, int B, int T,
                                 const hpt_act_opts *o);
hpt_status hpt_gpt2_generate(hpt_gpt2 *m, int32_t *tokens, int n_prompt, int n_new,
                             float temperature, int top_k, uint64_t seed);
hpt_status hpt_gpt2_create_offload(hpt_mem *mem, const hpt_model_config *cfg,
                                   const hpt_offload_opts *o, hpt_gpt2 **out);
hpt_status hpt_gpt2_load_offload(hpt_mem *mem, const char *path, const hpt_offload_opts *off,
                                 hpt_gpt2 **out);
hpt_status hpt_gpt2_copy_params(hpt_gpt2 *m, float *dst);
void hpt_gpt2_offload_stats(const hpt_gpt2 *m, hpt_offload_stats *out);
hpt_status hpt_gpt2_read_config(const char *path, hpt_model_config *out);

#endif /* HPTRAIN_GPT2_H */
