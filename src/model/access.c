/* access.c: the model's accessors for the modules above it (model/model.h): its tensor table,
 * flat buffers, engine, embeddings kind and the trainer's hooks. Plain reads and writes of the
 * model's record, so that nothing outside src/model/ needs its layout (gpt2_int.h). */
#include "model/gpt2_int.h"

#include <string.h>

void model_describe(const hpt_model_config *cfg, hpt_tensor_table *out) {
    const hpt_arch *a = hpt_arch_of(cfg);
    if (a) a->describe(cfg, out);
    else memset(out, 0, sizeof *out);
}

size_t model_consts_floats(const hpt_model_config *cfg) {
    const hpt_arch *a = hpt_arch_of(cfg);
    return a && a->consts_floats ? a->consts_floats(cfg) : 0;
}

double model_flops_per_token(const hpt_model_config *cfg, int T) {
    const hpt_arch *a = hpt_arch_of(cfg);
    return a ? a->flops_per_token(cfg, T) : 0.0;
}

const hpt_tensor_table *model_table(const hpt_model *m) { return &m->tab; }

float *model_params(hpt_model *m) { return m->params; }
size_t model_params_floats(const hpt_model *m) { return m->n_flat; }
float *model_grads(hpt_model *m) { return m->grads; }
size_t model_grads_floats(const hpt_model *m) { return m->n_gflat; }
struct offload_engine *model_engine(const hpt_model *m) { return m->eng; }
const struct hpt_backend *model_backend(const hpt_model *m) { return m->be; }

int model_embeddings(const hpt_model *m) { return m->emb; }
double model_wte_sumsq(const hpt_model *m) { return m->wte_sumsq; }
double model_emb_sumsq(const hpt_model *m, int i) {
    return m->emb_untied && i == m->emb_head ? m->head_sumsq : m->wte_sumsq;
}

void model_set_loss_scale(hpt_model *m, float s) { m->loss_scale = s; }
void model_set_loss_norm(hpt_model *m, double n) { m->loss_norm = n; }

void model_set_fault(hpt_model *m, int layer, float value) {
    m->fault_layer = layer;
    if (layer >= 0) m->fault_value = value;
}

size_t hpt_model_config_num_params(const hpt_model_config *cfg) {
    hpt_tensor_table t;
    model_describe(cfg, &t);
    return hpt_table_numel(&t);
}

/* The non-block tensors back to back in checkpoint order (GPT-2: wte, wpe, lnfw, lnfb). */
size_t model_nonblock_offset(const hpt_model_config *cfg, int i) {
    hpt_tensor_table t;
    model_describe(cfg, &t);
    size_t off = 0;
    for (int k = 0; k < i && k < t.n; k++)
        if (t.t[k].layer != HPT_LAYER_STACKED) off += hpt_tensor_numel(&t.t[k]);
    return off;
}

size_t model_nonblock_floats(const hpt_model_config *cfg) {
    hpt_tensor_table t;
    model_describe(cfg, &t);
    return model_nonblock_offset(cfg, t.n);
}
