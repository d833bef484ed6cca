/* gpt2.c: GPT-2 forward and backward in fp32 on the CPU, llm.c's layout.
 *
 * The model owns two buffers of num_params floats (parameters and gradients, device tier)
 * and one activation block laid out for the largest (B, T) seen so far. Each forward
 * records its inputs and targets; backward differentiates that forward. Backward restates
 * the expression it differentiates above each step. Gradients accumulate (+=), so callers
 * zero them per optimizer step and may accumulate micro-batches.
 * States: created -> (forward -> [backward]) * ; backward without a forward with targets
 * is refused with HPT_ERR_INVALID. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "model/gpt2_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

hpt_status hpt_gpt2_create(hpt_mem *mem, const hpt_gpt2_config *cfg, hpt_gpt2 **out) {
    *out = NULL;
    HPT_CHECK(hpt_gpt2_config_check(cfg));
    hpt_gpt2 *m = calloc(1, sizeof *m);
    if (!m) return hpt_fail(HPT_ERR_OOM, "cannot allocate the model object");
    m->cfg = *cfg;
    m->mem = mem;
    m->num_params = hpt_gpt2_num_params(cfg);
    size_t bytes = m->num_params * sizeof(float);
    hpt_status s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, bytes, (void **)&m->params);
    if (s == HPT_OK)
        s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, bytes, (void **)&m->grads);
    if (s != HPT_OK) {
        hpt_gpt2_free(m);
        return hpt_fail_ctx(s, "allocating %zu parameters", hpt_gpt2_num_params(cfg));
    }
    gpt2_point_tensors(cfg, m->params, &m->p);
    gpt2_point_tensors(cfg, m->grads, &m->g);
    *out = m;
    return HPT_OK;
}

void hpt_gpt2_free_activations(hpt_gpt2 *m) {
    if (!m) return;
    hpt_mem_free(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, m->act_mem, m->act_bytes);
    m->act_mem = NULL;
    m->act_bytes = 0;
    m->aB = m->aT = 0;
    m->B = m->T = 0;
    m->has_targets = 0;
}

void hpt_gpt2_free(hpt_gpt2 *m) {
    if (!m) return;
    hpt_gpt2_free_activations(m);
    size_t bytes = m->num_params * sizeof(float);
    hpt_mem_free(m->mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, m->params, bytes);
    hpt_mem_free(m->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, m->grads, bytes);
    free(m);
}

const hpt_gpt2_config *hpt_gpt2_get_config(const hpt_gpt2 *m) { return &m->cfg; }
size_t hpt_gpt2_get_num_params(const hpt_gpt2 *m) { return m->num_params; }
float *hpt_gpt2_params(hpt_gpt2 *m) { return m->params; }
float *hpt_gpt2_grads(hpt_gpt2 *m) { return m->grads; }
const float *hpt_gpt2_logits(const hpt_gpt2 *m) { return m->a.logits; }

void hpt_gpt2_zero_grad(hpt_gpt2 *m) {
    memset(m->grads, 0, m->num_params * sizeof(float));
}

void hpt_gpt2_init_random(hpt_gpt2 *m, uint64_t seed) {
    const hpt_gpt2_config *c = &m->cfg;
    hpt_gpt2_tensor t[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(c, t);
    hpt_rng rng;
    hpt_rng_seed(&rng, seed);
    float resid_std = 0.02f / sqrtf(2.0f * (float)c->L);
    for (int i = 0; i < HPT_GPT2_NUM_TENSORS; i++) {
        float *x = m->params + t[i].offset;
        const char *n = t[i].name;
        if (!strcmp(n, "ln1w") || !strcmp(n, "ln2w") || !strcmp(n, "lnfw")) {
            for (size_t j = 0; j < t[i].numel; j++) x[j] = 1.0f;
        } else if (!t[i].is_matrix) {
            memset(x, 0, t[i].numel * sizeof(float)); /* biases */
        } else {
            float std = (!strcmp(n, "attprojw") || !strcmp(n, "fcprojw")) ? resid_std : 0.02f;
            size_t n_init = t[i].numel;
            if (!strcmp(n, "wte")) n_init = (size_t)c->V * c->C; /* padding rows stay 0 */
            for (size_t j = 0; j < n_init; j++) x[j] = std * hpt_rng_normal(&rng);
            for (size_t j = n_init; j < t[i].numel; j++) x[j] = 0.0f;
        }
    }
}

/* Lays out the activations of (B, T) from base (NULL: only counts); returns the bytes. */
static size_t layout_acts(const hpt_gpt2_config *c, int B, int T, char *base, gpt2_acts *a,
                          int32_t **inputs, int32_t **targets) {
    size_t L = (size_t)c->L, BT = (size_t)B * T, C = (size_t)c->C;
    size_t NH = (size_t)c->NH, Vp = (size_t)c->Vp;
    struct { float **p; size_t n; } f[] = {
        {&a->encoded, BT * C},        {&a->ln1, L * BT * C},      {&a->ln1_mean, L * BT},
        {&a->ln1_rstd, L * BT},       {&a->qkv, L * BT * 3 * C},  {&a->atty, L * BT * C},
        {&a->att, L * (size_t)B * NH * T * T}, {&a->res2, L * BT * C}, {&a->ln2, L * BT * C},
        {&a->ln2_mean, L * BT},       {&a->ln2_rstd, L * BT},     {&a->fch, L * BT * 4 * C},
        {&a->fch_gelu, L * BT * 4 * C}, {&a->res3, L * BT * C},   {&a->lnf, BT * C},
        {&a->lnf_mean, BT},           {&a->lnf_rstd, BT},         {&a->logits, BT * Vp},
        {&a->lse, BT},                {&a->losses, BT},           {&a->dres, BT * C},
        {&a->dsmall, BT * C},         {&a->dbig, BT * 4 * C},     {&a->attscr, (size_t)B * NH * T},
    };
    size_t off = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (base) *f[i].p = (float *)(base + off);
        off += (f[i].n * sizeof(float) + 63) & ~(size_t)63; /* each buffer 64-byte aligned */
    }
    if (base) *inputs = (int32_t *)(base + off);
    off += (BT * sizeof(int32_t) + 63) & ~(size_t)63;
    if (base) *targets = (int32_t *)(base + off);
    off += (BT * sizeof(int32_t) + 63) & ~(size_t)63;
    return off;
}

size_t hpt_gpt2_activation_bytes(const hpt_gpt2_config *cfg, int B, int T) {
    gpt2_acts a;
    return layout_acts(cfg, B, T, NULL, &a, NULL, NULL);
}

static hpt_status ensure_acts(hpt_gpt2 *m, int B, int T) {
    if (m->act_mem && m->aB == B && m->aT == T) return HPT_OK;
    size_t need = hpt_gpt2_activation_bytes(&m->cfg, B, T);
    if (!m->act_mem || need > m->act_bytes) {
        hpt_gpt2_free_activations(m);
        void *p;
        hpt_status s = hpt_mem_alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, need, &p);
        if (s != HPT_OK) return hpt_fail_ctx(s, "activations for B=%d T=%d", B, T);
        m->act_mem = p;
        m->act_bytes = need;
    }
    layout_acts(&m->cfg, B, T, (char *)m->act_mem, &m->a, &m->inputs, &m->targets);
    m->aB = B;
    m->aT = T;
    return HPT_OK;
}

hpt_status hpt_gpt2_forward(hpt_gpt2 *m, const int32_t *inputs, const int32_t *targets,
                            int B, int T, float *loss_out) {
    const hpt_gpt2_config *c = &m->cfg;
    if (B < 1 || T < 1) return hpt_fail(HPT_ERR_INVALID, "batch %d and sequence %d must be >= 1", B, T);
    if (T > c->maxT)
        return hpt_fail(HPT_ERR_SHAPE, "sequence length %d exceeds the model's maxT %d", T, c->maxT);
    size_t BT = (size_t)B * T;
    for (size_t i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= c->V)
            return hpt_fail(HPT_ERR_INVALID, "input token %d at position %zu is outside [0, %d)",
                            inputs[i], i, c->V);
        if (targets && (targets[i] < 0 || targets[i] >= c->V))
            return hpt_fail(HPT_ERR_INVALID, "target token %d at position %zu is outside [0, %d)",
                            targets[i], i, c->V);
    }
    HPT_CHECK(ensure_acts(m, B, T));
    m->B = B;
    m->T = T;
    memcpy(m->inputs, inputs, BT * sizeof(int32_t));
    m->has_targets = targets != NULL;
    if (targets) memcpy(m->targets, targets, BT * sizeof(int32_t));

    const int L = c->L, C = c->C, NH = c->NH;
    gpt2_acts *a = &m->a;
    const gpt2_tensors *p = &m->p;
    k_encoder_forward(a->encoded, m->inputs, p->wte, p->wpe, B, T, C);
    for (int l = 0; l < L; l++) {
        const float *residual = l == 0 ? a->encoded : a->res3 + (size_t)(l - 1) * BT * C;
        float *ln1 = a->ln1 + (size_t)l * BT * C, *qkv = a->qkv + (size_t)l * BT * 3 * C;
        float *atty = a->atty + (size_t)l * BT * C, *res2 = a->res2 + (size_t)l * BT * C;
        float *att = a->att + (size_t)l * B * NH * T * T;
        float *ln2 = a->ln2 + (size_t)l * BT * C, *fch = a->fch + (size_t)l * BT * 4 * C;
        float *fch_gelu = a->fch_gelu + (size_t)l * BT * 4 * C, *res3 = a->res3 + (size_t)l * BT * C;
        size_t lc = (size_t)l * C;
        k_layernorm_forward(ln1, a->ln1_mean + (size_t)l * BT, a->ln1_rstd + (size_t)l * BT,
                            residual, p->ln1w + lc, p->ln1b + lc, (int64_t)BT, C);
        k_matmul_forward(qkv, ln1, p->qkvw + lc * 3 * C, p->qkvb + lc * 3, (int64_t)BT, C, 3 * C, 0);
        k_attention_forward(atty, att, qkv, B, T, C, NH);
        /* res2 = residual + atty @ attprojw^T + attprojb */
        memcpy(res2, residual, BT * C * sizeof(float));
        k_matmul_forward(res2, atty, p->attprojw + lc * C, p->attprojb + lc, (int64_t)BT, C, C, 1);
        k_layernorm_forward(ln2, a->ln2_mean + (size_t)l * BT, a->ln2_rstd + (size_t)l * BT, res2,
                            p->ln2w + lc, p->ln2b + lc, (int64_t)BT, C);
        k_matmul_forward(fch, ln2, p->fcw + lc * 4 * C, p->fcb + lc * 4, (int64_t)BT, C, 4 * C, 0);
        k_gelu_forward(fch_gelu, fch, (int64_t)BT * 4 * C);
        /* res3 = res2 + fch_gelu @ fcprojw^T + fcprojb */
        memcpy(res3, res2, BT * C * sizeof(float));
        k_matmul_forward(res3, fch_gelu, p->fcprojw + lc * 4 * C, p->fcprojb + lc, (int64_t)BT,
                         4 * C, C, 1);
    }
    const float *last = a->res3 + (size_t)(L - 1) * BT * C;
    k_layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, p->lnfw, p->lnfb, (int64_t)BT, C);
    /* logits (BT, Vp) = lnf @ wte^T (tied head, no bias) */
    k_matmul_forward(a->logits, a->lnf, p->wte, NULL, (int64_t)BT, C, c->Vp, 0);
    m->loss = -1.0f;
    if (targets)
        m->loss = k_crossentropy_forward(a->losses, a->lse, a->logits, m->targets, (int64_t)BT,
                                         c->V, c->Vp);
    if (loss_out) *loss_out = m->loss;
    return HPT_OK;
}

hpt_status hpt_gpt2_backward(hpt_gpt2 *m) {
    if (!m->has_targets)
        return hpt_fail(HPT_ERR_INVALID, "backward needs a forward with targets first");
    const hpt_gpt2_config *c = &m->cfg;
    const int B = m->B, T = m->T, L = c->L, C = c->C, NH = c->NH;
    const size_t BT = (size_t)B * T;
    gpt2_acts *a = &m->a;
    const gpt2_tensors *p = &m->p;
    const gpt2_tensors *g = &m->g;
    m->has_targets = 0; /* logits become dlogits: one backward per forward */

    /* loss = mean_i (lse_i - logits[i, y_i]) */
    k_crossentropy_backward(a->logits, a->lse, m->targets, (int64_t)BT, c->V, c->Vp,
                            1.0f / (float)BT);
    float *dlogits = a->logits;
    /* logits = lnf @ wte^T: dlnf = dlogits @ wte, dwte += dlogits^T @ lnf */
    k_matmul_backward(a->dsmall, g->wte, NULL, dlogits, a->lnf, p->wte, (int64_t)BT, C, c->Vp, 0);
    /* lnf = layernorm(res3[L-1]) */
    memset(a->dres, 0, BT * C * sizeof(float));
    k_layernorm_backward(a->dres, g->lnfw, g->lnfb, a->dsmall, a->res3 + (size_t)(L - 1) * BT * C,
                         p->lnfw, a->lnf_mean, a->lnf_rstd, (int64_t)BT, C);
    for (int l = L - 1; l >= 0; l--) {
        const float *residual = l == 0 ? a->encoded : a->res3 + (size_t)(l - 1) * BT * C;
        const float *ln1 = a->ln1 + (size_t)l * BT * C, *qkv = a->qkv + (size_t)l * BT * 3 * C;
        const float *atty = a->atty + (size_t)l * BT * C, *res2 = a->res2 + (size_t)l * BT * C;
        const float *att = a->att + (size_t)l * B * NH * T * T;
        const float *ln2 = a->ln2 + (size_t)l * BT * C, *fch = a->fch + (size_t)l * BT * 4 * C;
        const float *fch_gelu = a->fch_gelu + (size_t)l * BT * 4 * C;
        size_t lc = (size_t)l * C;
        /* res3 = res2 + fch_gelu @ fcprojw^T + fcprojb; dres flows to res2 unchanged */
        k_matmul_backward(a->dbig, g->fcprojw + lc * 4 * C, g->fcprojb + lc, a->dres, fch_gelu,
                          p->fcprojw + lc * 4 * C, (int64_t)BT, 4 * C, C, 0);
        /* fch_gelu = gelu(fch) */
        k_gelu_backward(a->dbig, fch, a->dbig, (int64_t)BT * 4 * C);
        /* fch = ln2 @ fcw^T + fcb */
        k_matmul_backward(a->dsmall, g->fcw + lc * 4 * C, g->fcb + lc * 4, a->dbig, ln2,
                          p->fcw + lc * 4 * C, (int64_t)BT, C, 4 * C, 0);
        /* ln2 = layernorm(res2) */
        k_layernorm_backward(a->dres, g->ln2w + lc, g->ln2b + lc, a->dsmall, res2, p->ln2w + lc,
                             a->ln2_mean + (size_t)l * BT, a->ln2_rstd + (size_t)l * BT,
                             (int64_t)BT, C);
        /* res2 = residual + atty @ attprojw^T + attprojb */
        k_matmul_backward(a->dsmall, g->attprojw + lc * C, g->attprojb + lc, a->dres, atty,
                          p->attprojw + lc * C, (int64_t)BT, C, C, 0);
        /* atty = attention(qkv) */
        k_attention_backward(a->dbig, a->attscr, a->dsmall, qkv, att, B, T, C, NH);
        /* qkv = ln1 @ qkvw^T + qkvb */
        k_matmul_backward(a->dsmall, g->qkvw + lc * 3 * C, g->qkvb + lc * 3, a->dbig, ln1,
                          p->qkvw + lc * 3 * C, (int64_t)BT, C, 3 * C, 0);
        /* ln1 = layernorm(residual) */
        k_layernorm_backward(a->dres, g->ln1w + lc, g->ln1b + lc, a->dsmall, residual,
                             p->ln1w + lc, a->ln1_mean + (size_t)l * BT,
                             a->ln1_rstd + (size_t)l * BT, (int64_t)BT, C);
    }
    /* encoded = wte[inputs] + wpe[t] */
    k_encoder_backward(g->wte, g->wpe, a->dres, m->inputs, B, T, C);
    return HPT_OK;
}

hpt_status hpt_gpt2_generate(hpt_gpt2 *m, int32_t *tokens, int n_prompt, int n_new,
                             float temperature, int top_k, uint64_t seed) {
    const hpt_gpt2_config *c = &m->cfg;
    if (n_prompt < 1) return hpt_fail(HPT_ERR_INVALID, "generation needs at least one prompt token");
    if (!(temperature > 0.0f)) return hpt_fail(HPT_ERR_INVALID, "temperature must be > 0");
    if (top_k < 0) return hpt_fail(HPT_ERR_INVALID, "top-k must be >= 0");
    hpt_rng rng;
    hpt_rng_seed(&rng, seed);
    float *probs = malloc((size_t)c->V * sizeof(float));
    int32_t *order = malloc((size_t)c->V * sizeof(int32_t));
    if (!probs || !order) {
        free(probs);
        free(order);
        return hpt_fail(HPT_ERR_OOM, "sampling buffers");
    }
    hpt_status s = HPT_OK;
    for (int n = n_prompt; n < n_prompt + n_new && s == HPT_OK; n++) {
        int start = n > c->maxT ? n - c->maxT : 0, T = n - start;
        s = hpt_gpt2_forward(m, tokens + start, NULL, 1, T, NULL);
        if (s != HPT_OK) break;
        const float *logits = m->a.logits + (size_t)(T - 1) * c->Vp;
        float maxv = -INFINITY;
        for (int v = 0; v < c->V; v++) maxv = logits[v] > maxv ? logits[v] : maxv;
        double sum = 0.0;
        for (int v = 0; v < c->V; v++) {
            probs[v] = expf((logits[v] - maxv) / temperature);
            sum += (double)probs[v];
        }
        int K = top_k > 0 && top_k < c->V ? top_k : c->V;
        if (K < c->V) {
            /* keep the K largest: partial selection sort on indices (K is small) */
            for (int v = 0; v < c->V; v++) order[v] = v;
            for (int i = 0; i < K; i++) {
                int best = i;
                for (int j = i + 1; j < c->V; j++)
                    if (probs[order[j]] > probs[order[best]]) best = j;
                int32_t tmp = order[i]; order[i] = order[best]; order[best] = tmp;
            }
            sum = 0.0;
            for (int i = 0; i < K; i++) sum += (double)probs[order[i]];
        } else {
            for (int v = 0; v < c->V; v++) order[v] = v;
        }
        double r = (double)hpt_rng_uniform(&rng) * sum, acc = 0.0;
        int32_t pick = order[K - 1];
        for (int i = 0; i < K; i++) {
            acc += (double)probs[order[i]];
            if (r < acc) { pick = order[i]; break; }
        }
        tokens[n] = pick;
    }
    free(probs);
    free(order);
    return s;
}
