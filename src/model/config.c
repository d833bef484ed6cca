/* config.c: GPT-2 shapes: parsing, validation, the parameter layout. */
#include "core/core.h"
#include "model/gpt2_int.h"

#include <stdlib.h>
#include <string.h>

hpt_status hpt_gpt2_config_check(const hpt_gpt2_config *c) {
    if (c->L < 1 || c->C < 1 || c->NH < 1 || c->V < 1 || c->maxT < 1 || c->Vp < c->V)
        return hpt_fail(HPT_ERR_SHAPE, "invalid GPT-2 shape L=%d C=%d NH=%d V=%d Vp=%d maxT=%d",
                        c->L, c->C, c->NH, c->V, c->Vp, c->maxT);
    if (c->C % c->NH != 0)
        return hpt_fail(HPT_ERR_SHAPE, "channels C=%d are not a multiple of heads NH=%d", c->C, c->NH);
    if (c->L > 4096 || c->C > 65536 || c->V > 16777216 || c->maxT > 1048576)
        return hpt_fail(HPT_ERR_SHAPE, "GPT-2 shape too large (L=%d C=%d V=%d maxT=%d)", c->L,
                        c->C, c->V, c->maxT);
    return HPT_OK;
}

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

hpt_status hpt_gpt2_config_parse(const char *shape, hpt_gpt2_config *out) {
    static const struct { const char *name; int L, C, NH; } named[] = {
        {"gpt2-124m", 12, 768, 12}, {"gpt2-350m", 24, 1024, 16},
        {"gpt2-774m", 36, 1280, 20}, {"gpt2-1558m", 48, 1600, 25},
    };
    hpt_gpt2_config c = {.V = 50257, .maxT = 1024, .Vp = 0};
    int found = 0;
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        if (!strcmp(shape, named[i].name)) {
            c.L = named[i].L; c.C = named[i].C; c.NH = named[i].NH;
            found = 1;
        }
    if (!found) {
        if (strncmp(shape, "gpt2:", 5) != 0)
            return hpt_fail(HPT_ERR_INVALID, "unknown model shape '%s' (use gpt2-124m, gpt2-350m, "
                            "gpt2-774m, gpt2-1558m or gpt2:L=..,C=..,NH=..[,V=..][,T=..])", shape);
        const char *s = shape + 5;
        while (*s) {
            char key[8] = {0};
            size_t k = 0;
            while (*s && *s != '=' && k < sizeof key - 1) key[k++] = *s++;
            if (*s != '=') return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': expected KEY=VALUE", shape);
            s++;
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s || v < 1 || v > 100000000)
                return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': bad value for %s", shape, key);
            s = end;
            if (!strcmp(key, "L")) c.L = (int)v;
            else if (!strcmp(key, "C")) c.C = (int)v;
            else if (!strcmp(key, "NH")) c.NH = (int)v;
            else if (!strcmp(key, "V")) c.V = (int)v;
            else if (!strcmp(key, "Vp")) c.Vp = (int)v;
            else if (!strcmp(key, "T") || !strcmp(key, "maxT")) c.maxT = (int)v;
            else return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': unknown key %s (L, C, NH, V, Vp, T)", shape, key);
            if (*s == ',') s++;
            else if (*s) return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': expected ','", shape);
        }
        if (!c.L || !c.C || !c.NH)
            return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': L, C and NH are required", shape);
    }
    if (!c.Vp) c.Vp = c.V % 128 ? round_up(c.V, 128) : c.V;
    HPT_CHECK(hpt_gpt2_config_check(&c));
    *out = c;
    return HPT_OK;
}

void hpt_gpt2_tensors(const hpt_gpt2_config *cfg, hpt_gpt2_tensor out[HPT_GPT2_NUM_TENSORS]) {
    size_t L = (size_t)cfg->L, C = (size_t)cfg->C;
    static const char *const names[HPT_GPT2_NUM_TENSORS] = {
        "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
        "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    const size_t numel[HPT_GPT2_NUM_TENSORS] = {
        (size_t)cfg->Vp * C, (size_t)cfg->maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
        L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    static const int matrix[HPT_GPT2_NUM_TENSORS] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
    size_t off = 0;
    for (int i = 0; i < HPT_GPT2_NUM_TENSORS; i++) {
        out[i].name = names[i];
        out[i].offset = off;
        out[i].numel = numel[i];
        out[i].is_matrix = matrix[i];
        off += numel[i];
    }
}

size_t hpt_gpt2_num_params(const hpt_gpt2_config *cfg) {
    hpt_gpt2_tensor t[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(cfg, t);
    return t[HPT_GPT2_NUM_TENSORS - 1].offset + t[HPT_GPT2_NUM_TENSORS - 1].numel;
}

void gpt2_point_tensors(const hpt_gpt2_config *cfg, float *base, gpt2_tensors *p) {
    hpt_gpt2_tensor t[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(cfg, t);
    float **dst[HPT_GPT2_NUM_TENSORS] = {&p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw,
                                         &p->qkvb, &p->attprojw, &p->attprojb, &p->ln2w,
                                         &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb,
                                         &p->lnfw, &p->lnfb};
    for (int i = 0; i < HPT_GPT2_NUM_TENSORS; i++) *dst[i] = base + t[i].offset;
}

void gpt2_block_slices(const hpt_gpt2_config *cfg, size_t n[GPT2_BLOCK_SLICES]) {
    hpt_gpt2_tensor t[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(cfg, t);
    for (int i = 0; i < GPT2_BLOCK_SLICES; i++)
        n[i] = t[GPT2_FIRST_BLOCK_TENSOR + i].numel / (size_t)cfg->L;
}

size_t gpt2_block_floats(const hpt_gpt2_config *cfg) {
    size_t n[GPT2_BLOCK_SLICES], s = 0;
    gpt2_block_slices(cfg, n);
    for (int i = 0; i < GPT2_BLOCK_SLICES; i++) s += n[i];
    return s;
}

int gpt2_is_block_tensor(int i) {
    return i >= GPT2_FIRST_BLOCK_TENSOR && i < GPT2_FIRST_BLOCK_TENSOR + GPT2_BLOCK_SLICES;
}

size_t gpt2_nonblock_offset(const hpt_gpt2_config *cfg, int i) {
    size_t C = (size_t)cfg->C, emb = (size_t)cfg->Vp * C + (size_t)cfg->maxT * C;
    switch (i) {
    case 0: return 0;
    case 1: return (size_t)cfg->Vp * C;
    case 14: return emb;
    default: return emb + C; /* 15 */
    }
}

size_t gpt2_nonblock_floats(const hpt_gpt2_config *cfg) {
    return gpt2_nonblock_offset(cfg, 15) + (size_t)cfg->C;
}
