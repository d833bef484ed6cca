/* config.c: what the architectures' shape hooks share (model/arch.h: the common check, the
 * KEY=VALUE parser, an integer key's value) and GPT-2's legacy parameter layout. Routing a
 * SHAPE to its family and checking a configuration through it are the registry's
 * (registry.c). Calls nothing above core, so an architecture's file may use it. */
#include "core/core.h"
#include "model/arch.h"
#include "model/gpt2_int.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hpt_status model_config_check_common(const hpt_model_config *c, const char *arch) {
    if (c->L < 1 || c->C < 1 || c->NH < 1 || c->V < 1 || c->maxT < 1 || c->Vp < c->V)
        return hpt_fail(HPT_ERR_SHAPE, "invalid %s shape L=%d C=%d NH=%d V=%d Vp=%d maxT=%d", arch,
                        c->L, c->C, c->NH, c->V, c->Vp, c->maxT);
    if (c->C % c->NH != 0)
        return hpt_fail(HPT_ERR_SHAPE, "channels C=%d are not a multiple of heads NH=%d", c->C, c->NH);
    if (c->L > 4096 || c->C > 65536 || c->V > 16777216 || c->maxT > 1048576)
        return hpt_fail(HPT_ERR_SHAPE, "%s shape too large (L=%d C=%d V=%d maxT=%d)", arch, c->L,
                        c->C, c->V, c->maxT);
    return HPT_OK;
}


/* KEY=VALUE[,KEY=VALUE...] after a shape's "arch:" prefix; set(key, value) takes each pair. */
hpt_status model_shape_kv(const char *shape, const char *s, hpt_model_config *c, model_kv_fn set) {
    while (*s) {
        char key[16] = {0};
        size_t k = 0;
        while (*s && *s != '=' && k < sizeof key - 1) key[k++] = *s++;
        if (*s != '=') return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': expected KEY=VALUE", shape);
        s++;
        char *end;
        double v = strtod(s, &end);
        if (end == s || !isfinite(v) || v < 0 || v > 1e9)
            return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': bad value for %s", shape, key);
        s = end;
        HPT_CHECK(set(c, key, v, shape));
        if (*s == ',') s++;
        else if (*s) return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': expected ','", shape);
    }
    return HPT_OK;
}

/* an integer key's value: a whole number >= lo */
hpt_status model_shape_key(hpt_model_config *c, const char *key, double v, const char *shape,
                           const model_int_key *ints, size_t n_ints, const model_float_key *floats,
                           size_t n_floats, const char *known) {
    for (size_t i = 0; i < n_ints; i++)
        if (!strcmp(key, ints[i].key)) {
            int *dst = (int *)((char *)c + ints[i].off);
            HPT_CHECK(model_shape_int(v, ints[i].lo, key, shape, dst));
            if ((dst == &c->tied || dst == &c->attn_bias || dst == &c->mlp_bias) && *dst > 1)
                return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': %s is 0 or 1", shape, key);
            return HPT_OK;
        }
    for (size_t i = 0; i < n_floats; i++)
        if (!strcmp(key, floats[i].key)) {
            *(float *)((char *)c + floats[i].off) = (float)v;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': unknown key %s (%s)", shape, key, known);
}

hpt_status model_shape_int(double v, int lo, const char *key, const char *shape, int *out) {
    if (v != (double)(int)v || v < lo || v > 100000000)
        return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': bad value for %s", shape, key);
    *out = (int)v;
    return HPT_OK;
}

void gpt2_spans(const hpt_model_config *cfg, gpt2_span out[GPT2_NUM_TENSORS]) {
    size_t L = (size_t)cfg->L, C = (size_t)cfg->C;
    static const char *const names[GPT2_NUM_TENSORS] = {
        "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
        "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    const size_t numel[GPT2_NUM_TENSORS] = {
        (size_t)cfg->Vp * C, (size_t)cfg->maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
        L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    static const int matrix[GPT2_NUM_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_TENSORS; i++) {
        out[i].name = names[i];
        out[i].offset = off;
        out[i].numel = numel[i];
        out[i].is_matrix = matrix[i];
        off += numel[i];
    }
}


void gpt2_point_tensors(const hpt_model_config *cfg, float *base, gpt2_tensors *p) {
    gpt2_span t[GPT2_NUM_TENSORS];
    gpt2_spans(cfg, t);
    float **dst[GPT2_NUM_TENSORS] = {&p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw,
                                         &p->qkvb, &p->attprojw, &p->attprojb, &p->ln2w,
                                         &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb,
                                         &p->lnfw, &p->lnfb};
    for (int i = 0; i < GPT2_NUM_TENSORS; i++) *dst[i] = base + t[i].offset;
}

void gpt2_block_slices(const hpt_model_config *cfg, size_t n[GPT2_BLOCK_SLICES]) {
    gpt2_span t[GPT2_NUM_TENSORS];
    gpt2_spans(cfg, t);
    for (int i = 0; i < GPT2_BLOCK_SLICES; i++)
        n[i] = t[GPT2_FIRST_BLOCK_TENSOR + i].numel / (size_t)cfg->L;
}

size_t gpt2_block_floats(const hpt_model_config *cfg) {
    size_t n[GPT2_BLOCK_SLICES], s = 0;
    gpt2_block_slices(cfg, n);
    for (int i = 0; i < GPT2_BLOCK_SLICES; i++) s += n[i];
    return s;
}
