/* verify.c: checks forward, backward and AdamW against a PyTorch reference state. Two forms:
 * an llm.c GPT-2 checkpoint with llm.c's reference state (version 2), or a SHAPE of any
 * architecture (hpt_model_config_parse) with a version-3 state, which carries the initial
 * parameters itself (tests/make_ref_state_llama.py writes one):
 *   header 256 int32 (20240327, 3, B, T), x and y (B, T) int32, the parameters (num_params
 *   fp32, checkpoint order, padding rows), logits (B, T, V) fp32, loss fp32, the gradients
 *   (num_params fp32, checkpoint order).
 * Any shape works, including real vocabularies with their padding. */
#include "core/core.h"
#include "kernels/backend.h"
#include "model/arch.h"
#include "model/model.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_MAGIC 20240327

/* The report's tensor names: the architecture's static strings, which outlive the model. */
static const char *static_name(const hpt_model_config *c, const char *name) {
    const hpt_arch *a = hpt_arch_of(c);
    for (const char *const *k = a ? a->param_names : NULL; k && *k; k++)
        if (!strcmp(*k, name)) return *k;
    return "?";
}

/* A version-3 reference state for the model m made from a shape: its batch, logits, loss and
 * gradients into ref (buffers from mem, freed by hpt_ref_state_free), its parameters into m. */
static hpt_status load_v3(const char *path, hpt_mem *mem, hpt_model *m, hpt_ref_state *ref) {
    const hpt_model_config *c = hpt_model_get_config(m);
    memset(ref, 0, sizeof *ref);
    FILE *f = fopen(path, "rb");
    if (!f) return hpt_fail(HPT_ERR_IO, "cannot open %s", path);
    int32_t h[256];
    hpt_status s = HPT_OK;
    if (fread(h, sizeof h, 1, f) != 1) s = hpt_fail(HPT_ERR_FORMAT, "%s: no header", path);
    if (s == HPT_OK && (h[0] != STATE_MAGIC || h[1] != 3))
        s = hpt_fail(HPT_ERR_FORMAT, "%s: not a version-3 reference state (magic %d version %d); "
                     "a SHAPE as --model needs one", path, h[0], h[1]);
    if (s == HPT_OK && (h[2] < 1 || h[3] < 1 || h[3] > c->maxT || h[2] > 65536))
        s = hpt_fail(HPT_ERR_SHAPE, "%s: B=%d T=%d do not fit the model (maxT %d)", path, h[2],
                     h[3], c->maxT);
    size_t BT = 0, np = hpt_model_num_params(m), nl = 0;
    if (s == HPT_OK) {
        BT = (size_t)h[2] * (size_t)h[3];
        nl = BT * (size_t)c->V;
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        uint64_t want = 1024 + BT * 8 + np * 8 + nl * 4 + 4;
        if (size < 0 || (uint64_t)size != want)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: %ld bytes, but B=%d T=%d with this model (V=%d, %zu "
                         "parameters) needs %llu: truncated, or not this model's state", path,
                         size, h[2], h[3], c->V, np, (unsigned long long)want);
        fseek(f, 1024, SEEK_SET);
    }
    float *params = s == HPT_OK ? malloc(np * sizeof(float)) : NULL;
    if (s == HPT_OK && !params) s = hpt_fail(HPT_ERR_OOM, "reading %s", path);
    if (s == HPT_OK) {
        ref->B = h[2]; ref->T = h[3]; ref->V = c->V; ref->Vp = c->Vp;
        s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, BT * 4, (void **)&ref->x);
    }
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, BT * 4, (void **)&ref->y);
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, nl * 4, (void **)&ref->logits);
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, np * 4, (void **)&ref->grads);
    if (s == HPT_OK && (fread(ref->x, 4, BT, f) != BT || fread(ref->y, 4, BT, f) != BT ||
                        fread(params, 4, np, f) != np || fread(ref->logits, 4, nl, f) != nl ||
                        fread(&ref->loss, 4, 1, f) != 1 || fread(ref->grads, 4, np, f) != np))
        s = hpt_fail(HPT_ERR_IO, "%s: read failed", path);
    fclose(f);
    for (size_t i = 0; s == HPT_OK && i < BT; i++)
        if (ref->x[i] < 0 || ref->x[i] >= c->V || ref->y[i] < 0 || ref->y[i] >= c->V)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: token at position %zu is outside [0, %d)", path, i, c->V);
    if (s == HPT_OK)
        hpt_backend_cpu()->copy(hpt_model_params(m), params, np * sizeof(float), HPT_COPY_H2D);
    free(params);
    if (s != HPT_OK && ref->B) hpt_ref_state_free(mem, c, ref);
    return s;
}

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
    hpt_model *m = NULL;
    hpt_model_config shape;
    /* a SHAPE (no file of that name): the parameters come from a version-3 state */
    FILE *probe = fopen(model_path, "rb");
    int from_shape = !probe && hpt_model_config_parse(model_path, &shape) == HPT_OK;
    if (probe) fclose(probe);
    if (from_shape) HPT_CHECK(hpt_model_create_config(mem, &shape, &m));
    else HPT_CHECK(hpt_model_load(mem, model_path, &m));
    const hpt_model_config *c = hpt_model_get_config(m);
    r->cfg = *c;
    hpt_ref_state ref;
    hpt_status s = from_shape ? load_v3(state_path, mem, m, &ref)
                              : hpt_ref_state_load(state_path, mem, c, &ref);
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
    /* per tensor of the table, in checkpoint order (the reference's gradients' too) */
    const hpt_tensor_table *t = model_table(m);
    const float *grads = hpt_model_grads(m);
    int ok = r->loss_rel_err <= tol && r->logits_rel_err <= tol;
    size_t off = 0;
    for (int i = 0; i < t->n && i < HPT_VERIFY_MAX_TENSORS; i++) {
        size_t numel = hpt_tensor_numel(&t->t[i]);
        r->grad_name[i] = static_name(c, t->t[i].name);
        r->n_grads = i + 1;
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
