/* api.c: the public model calls that no single file of the model owns: creating a model from a
 * SHAPE (hpt_model_config_parse: GPT-2's and llama's shapes), its
 * architecture's name, and its tensor table as public descriptors (hpt_tensor_info, borrowed
 * from the table the model keeps). The forward, backward and lifecycle calls live with the
 * runner (runner.c, lifecycle.c). Loading and
 * saving are io's (io/llmc.c, io/hfmodel.c): the model calls nothing above it. */
#include "core/core.h"
#include "model/gpt2_int.h"

#include <string.h>

hpt_status hpt_model_create(hpt_mem *mem, const char *shape, hpt_model **out) {
    *out = NULL;
    hpt_model_config cfg; /* its error names the shapes each architecture knows */
    HPT_CHECK(hpt_model_config_parse(shape, &cfg));
    return hpt_model_create_config(mem, &cfg, out);
}

const char *hpt_model_arch(const hpt_model *m) { return m->arch->name; }

int hpt_model_num_tensors(const hpt_model *m) { return m->tab.n; }

hpt_status hpt_model_tensor(const hpt_model *m, int i, hpt_tensor_info *out) {
    if (i < 0 || i >= m->tab.n)
        return hpt_fail(HPT_ERR_INVALID, "tensor %d: the model has %d", i, m->tab.n);
    const hpt_tensor_desc *d = &m->tab.t[i];
    memset(out, 0, sizeof *out);
    out->name = d->name;
    out->dtype = (int)d->dtype;
    out->ndim = d->ndim;
    for (int k = 0; k < d->ndim && k < 4; k++) out->shape[k] = d->shape[k];
    out->numel = hpt_tensor_numel(d);
    out->per_layer = d->layer == HPT_LAYER_STACKED;
    out->is_matrix = d->is_matrix;
    return HPT_OK;
}
