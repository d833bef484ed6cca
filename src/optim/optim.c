/* adamw.c: AdamW with decoupled weight decay (PyTorch's formulation), global-norm gradient
 * clipping, and the warmup + cosine learning-rate schedule. The moments live in the device
 * tier's optimizer category, one float each per parameter, in checkpoint order. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "model/gpt2_int.h"

#include <math.h>
#include <stdlib.h>

struct hpt_optim {
    hpt_mem *mem;
    hpt_gpt2 *model; /* borrowed */
    hpt_adamw_opts o;
    size_t n;
    float *m;        /* (n) first moments */
    float *v;        /* (n) second moments */
    int64_t t;       /* steps taken */
};

hpt_adamw_opts hpt_adamw_defaults(void) {
    hpt_adamw_opts o = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f, .decay_all = 0};
    return o;
}

hpt_status hpt_optim_create(hpt_mem *mem, hpt_gpt2 *model, const hpt_adamw_opts *o,
                            hpt_optim **out) {
    *out = NULL;
    if (!(o->lr >= 0) || !(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1) ||
        !(o->eps > 0) || !(o->weight_decay >= 0))
        return hpt_fail(HPT_ERR_INVALID, "bad AdamW settings (lr %g, betas %g %g, eps %g, wd %g)",
                        (double)o->lr, (double)o->beta1, (double)o->beta2, (double)o->eps,
                        (double)o->weight_decay);
    hpt_optim *op = calloc(1, sizeof *op);
    if (!op) return hpt_fail(HPT_ERR_OOM, "cannot allocate the optimizer object");
    op->mem = mem;
    op->model = model;
    op->o = *o;
    op->n = model->num_params;
    hpt_status s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_OPTIM, op->n * 4, (void **)&op->m);
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_OPTIM, op->n * 4, (void **)&op->v);
    if (s != HPT_OK) {
        hpt_optim_free(op);
        return hpt_fail_ctx(s, "allocating AdamW state");
    }
    *out = op;
    return HPT_OK;
}

void hpt_optim_free(hpt_optim *op) {
    if (!op) return;
    hpt_mem_free(op->mem, HPT_TIER_DEVICE, HPT_CAT_OPTIM, op->m, op->n * 4);
    hpt_mem_free(op->mem, HPT_TIER_DEVICE, HPT_CAT_OPTIM, op->v, op->n * 4);
    free(op);
}

int64_t hpt_optim_get_t(const hpt_optim *op) { return op->t; }
void hpt_optim_set_t(hpt_optim *op, int64_t t) { op->t = t; }
float *hpt_optim_m(const hpt_optim *op) { return op->m; }
float *hpt_optim_v(const hpt_optim *op) { return op->v; }

hpt_status hpt_optim_step(hpt_optim *op, float lr, float clip, float *grad_norm_out) {
    hpt_gpt2 *model = op->model;
    float norm = (float)sqrt(k_sumsq(model->grads, op->n));
    if (grad_norm_out) *grad_norm_out = norm;
    if (!isfinite(norm))
        return hpt_fail(HPT_ERR_INVALID, "gradient norm is not finite (%g); step skipped", (double)norm);
    float scale = clip > 0.0f && norm > clip ? clip / norm : 1.0f;
    op->t++;
    hpt_gpt2_tensor t[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(&model->cfg, t);
    for (int i = 0; i < HPT_GPT2_NUM_TENSORS; i++) {
        size_t off = t[i].offset;
        float wd = op->o.decay_all || t[i].is_matrix ? op->o.weight_decay : 0.0f;
        k_adamw(model->params + off, model->grads + off, op->m + off, op->v + off, t[i].numel, lr,
                op->o.beta1, op->o.beta2, op->o.eps, wd, scale, op->t);
    }
    return HPT_OK;
}

float hpt_lr_cosine(int64_t step, int64_t total, int64_t warmup, float max_lr, float min_lr) {
    if (warmup > 0 && step < warmup) return max_lr * (float)(step + 1) / (float)warmup;
    if (step >= total || total <= warmup) return min_lr;
    double ratio = (double)(step - warmup) / (double)(total - warmup);
    double coeff = 0.5 * (1.0 + cos(3.14159265358979323846 * ratio));
    return min_lr + (float)coeff * (max_lr - min_lr);
}
