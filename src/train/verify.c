/* verify.c: checks forward, backward and AdamW against a PyTorch reference state (llm.c's
 * format). Any shape works, including the real GPT-2 vocabulary with its padding. */
#include "core/core.h"
#include "kernels/backend.h"
#include "model/model.h"

#include <cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double rel(double a, double b) { return fabs(a - b) / (fabs(b) > 1e-30 ? fabs(b) : 1e-30); }

static double norm_rel_err(const float *a, const float *b, size_t n, size_t stride_a, size_t row,
                           size_t stride_b) {
    /* rows of `row` elements; a's rows are stride_a apart, b's stride_b */
    double num = 0, den = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t j = 0; j < row; j++) {
            double x = a[r * stride_a + j], y = b[r * stride_b + j];
            num += (x - y) * (x - y);
            den += y * y;
        }
    return sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
}

typedef struct {
    hpt_adamw_opts o;
    int n;
    float losses[HPT_VERIFY_MAX_STEPS];
} steps_file;

static hpt_status read_steps(const char *path, steps_file *sf) {
    FILE *f = fopen(path, "rb");
    if (!f) return hpt_fail(HPT_ERR_IO, "cannot open %s", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            char *nb = realloc(buf, cap = cap * 2 + 8192);
            if (!nb) { free(buf); fclose(f); return hpt_fail(HPT_ERR_OOM, "reading %s", path); }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (!r) break;
    }
    fclose(f);
    buf[len] = '\0';
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    if (!j) return hpt_fail(HPT_ERR_FORMAT, "%s is not valid JSON", path);
    hpt_status s = HPT_OK;
    cJSON *ad = cJSON_GetObjectItem(j, "adamw"), *ls = cJSON_GetObjectItem(j, "losses");
    const char *keys[5] = {"lr", "beta1", "beta2", "eps", "weight_decay"};
    float *dst[5] = {&sf->o.lr, &sf->o.beta1, &sf->o.beta2, &sf->o.eps, &sf->o.weight_decay};
    if (!cJSON_IsObject(ad) || !cJSON_IsArray(ls)) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s: expected an \"adamw\" object and a \"losses\" array", path);
    } else {
        for (int i = 0; i < 5 && s == HPT_OK; i++) {
            cJSON *v = cJSON_GetObjectItem(ad, keys[i]);
            if (!cJSON_IsNumber(v)) s = hpt_fail(HPT_ERR_FORMAT, "%s: adamw.%s missing", path, keys[i]);
            else *dst[i] = (float)v->valuedouble;
        }
        sf->o.decay_all = 1;
        sf->n = cJSON_GetArraySize(ls);
        if (s == HPT_OK && (sf->n < 1 || sf->n > HPT_VERIFY_MAX_STEPS))
            s = hpt_fail(HPT_ERR_FORMAT, "%s: %d losses (1 to %d supported)", path, sf->n,
                         HPT_VERIFY_MAX_STEPS);
        for (int i = 0; i < sf->n && s == HPT_OK; i++) {
            cJSON *v = cJSON_GetArrayItem(ls, i);
            if (!cJSON_IsNumber(v)) s = hpt_fail(HPT_ERR_FORMAT, "%s: losses[%d] is not a number", path, i);
            else sf->losses[i] = (float)v->valuedouble;
        }
    }
    cJSON_Delete(j);
    return s;
}

hpt_status hpt_verify(hpt_mem *mem, const char *model_path, const char *state_path,
                      const char *steps_json, double tol, hpt_verify_report *r) {
    memset(r, 0, sizeof *r);
    r->tol = tol;
    steps_file sf = {0};
    if (steps_json) HPT_CHECK(read_steps(steps_json, &sf));
    hpt_gpt2 *m = NULL;
    HPT_CHECK(hpt_gpt2_load(mem, model_path, &m));
    const hpt_model_config *c = hpt_gpt2_get_config(m);
    r->cfg = *c;
    hpt_ref_state ref;
    hpt_status s = hpt_ref_state_load(state_path, mem, c, &ref);
    if (s != HPT_OK) { hpt_model_free(m); return s; }
    r->B = ref.B;
    r->T = ref.T;
    size_t BT = (size_t)ref.B * ref.T;
    hpt_optim *opt = NULL;

    s = hpt_model_forward(m, ref.x, ref.y, ref.B, ref.T, &r->loss);
    if (s != HPT_OK) goto done;
    r->ref_loss = ref.loss;
    r->loss_rel_err = rel(r->loss, ref.loss);
    r->logits_rel_err = norm_rel_err(hpt_model_logits(m), ref.logits, BT, (size_t)c->Vp,
                                     (size_t)c->V, (size_t)c->V);
    hpt_model_zero_grad(m);
    s = hpt_model_backward(m);
    if (s != HPT_OK) goto done;
    /* per tensor of the table, in checkpoint order (the reference's gradients' too); the
     * report's names are the public list's (static strings: they outlive the model) */
    const hpt_tensor_table *t = model_table(m);
    hpt_gpt2_tensor names[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(c, names);
    const float *grads = hpt_model_grads(m);
    int ok = r->loss_rel_err <= tol && r->logits_rel_err <= tol;
    size_t off = 0;
    for (int i = 0; i < t->n && i < HPT_GPT2_NUM_TENSORS; i++) {
        size_t numel = hpt_tensor_numel(&t->t[i]);
        r->grad_name[i] = names[i].name;
        r->grad_rel_err[i] = norm_rel_err(grads + off, ref.grads + off, 1, 0, numel, 0);
        off += numel;
        if (!(r->grad_rel_err[i] <= tol)) ok = 0;
    }
    if (sf.n) {
        s = hpt_optim_create(mem, m, &sf.o, &opt);
        if (s != HPT_OK) goto done;
        for (int i = 0; i < sf.n; i++) {
            s = hpt_model_forward(m, ref.x, ref.y, ref.B, ref.T, &r->step_loss[i]);
            if (s != HPT_OK) goto done;
            r->ref_step_loss[i] = sf.losses[i];
            double e = rel(r->step_loss[i], sf.losses[i]);
            if (e > r->max_step_rel_err || isnan(e)) r->max_step_rel_err = e;
            hpt_model_zero_grad(m);
            s = hpt_model_backward(m);
            if (s == HPT_OK) s = hpt_optim_step(opt, sf.o.lr, 0.0f, NULL);
            if (s != HPT_OK) goto done;
        }
        r->n_steps = sf.n;
        if (!(r->max_step_rel_err <= tol)) ok = 0;
    }
    r->passed = ok;
done:
    hpt_optim_free(opt);
    hpt_ref_state_free(mem, c, &ref);
    hpt_model_free(m);
    return s;
}
