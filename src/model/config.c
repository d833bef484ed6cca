/* config.c: model shapes of every architecture: parsing (named shapes and KEY=VALUE lists),
 * validation, and GPT-2's legacy parameter layout. A configuration that leaves here is whole:
 * every field the architecture reads is set (GPT-2: NKV = NH, FF = 4C, norm_eps 1e-5, tied,
 * init_range 0.02; model_config_fill does the same for one written by hand). */
#include "core/core.h"
#include "model/gpt2_int.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void model_config_fill(hpt_model_config *c) {
    if (c->arch != HPT_ARCH_GPT2) return;
    if (!c->NKV) c->NKV = c->NH;
    /* C past check_common's bound (a header read from a file, not yet checked) is left for
     * the check to refuse: 4 C would overflow */
    if (!c->FF && c->C > 0 && c->C <= 65536) c->FF = 4 * c->C;
    if (c->norm_eps == 0.0f) c->norm_eps = 1e-5f;
    if (c->init_range == 0.0f) c->init_range = 0.02f;
    c->tied = 1;
}

static hpt_status check_common(const hpt_model_config *c, const char *arch) {
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

static hpt_status check_llama(const hpt_model_config *c) {
    HPT_CHECK(check_common(c, "llama"));
    int hd = c->C / c->NH;
    if (c->NKV < 1 || c->NH % c->NKV != 0)
        return hpt_fail(HPT_ERR_SHAPE, "query heads NH=%d are not a multiple of key/value heads "
                        "NKV=%d", c->NH, c->NKV);
    if (hd % 2 != 0)
        return hpt_fail(HPT_ERR_SHAPE, "head size C/NH=%d is odd: rotary embeddings rotate pairs", hd);
    if (c->FF < 1 || c->FF > 1048576)
        return hpt_fail(HPT_ERR_SHAPE, "bad MLP width FF=%d", c->FF);
    if (!(c->norm_eps > 0.0f) || !(c->rope_theta > 1.0f) || !(c->init_range >= 0.0f) ||
        !isfinite(c->rope_theta) || !(c->rope_factor >= 0.0f))
        return hpt_fail(HPT_ERR_SHAPE, "bad llama constants eps=%g theta=%g range=%g factor=%g",
                        (double)c->norm_eps, (double)c->rope_theta, (double)c->init_range,
                        (double)c->rope_factor);
    if (c->rope_factor > 0.0f &&
        (c->rope_orig_maxT < 1 || !(c->rope_low_freq > 0.0f) || !(c->rope_high_freq > c->rope_low_freq)))
        return hpt_fail(HPT_ERR_SHAPE, "rope scaling factor %g needs orig > 0 and high > low > 0 "
                        "(orig=%d low=%g high=%g)", (double)c->rope_factor, c->rope_orig_maxT,
                        (double)c->rope_low_freq, (double)c->rope_high_freq);
    return HPT_OK;
}

hpt_status hpt_model_config_check(const hpt_model_config *c) {
    switch (c->arch) {
    case HPT_ARCH_GPT2: return check_common(c, "GPT-2");
    case HPT_ARCH_LLAMA: return check_llama(c);
    default: return hpt_fail(HPT_ERR_SHAPE, "unknown architecture id %d", c->arch);
    }
}


static int round_up(int x, int m) { return (x + m - 1) / m * m; }

/* KEY=VALUE[,KEY=VALUE...] after a shape's "arch:" prefix; set(key, value) takes each pair. */
typedef hpt_status (*kv_fn)(hpt_model_config *c, const char *key, double v, const char *shape);
static hpt_status parse_kv(const char *shape, const char *s, hpt_model_config *c, kv_fn set) {
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
static hpt_status int_of(double v, int lo, const char *key, const char *shape, int *out) {
    if (v != (double)(int)v || v < lo || v > 100000000)
        return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': bad value for %s", shape, key);
    *out = (int)v;
    return HPT_OK;
}

static hpt_status gpt2_key(hpt_model_config *c, const char *key, double v, const char *shape) {
    int *dst = !strcmp(key, "L") ? &c->L : !strcmp(key, "C") ? &c->C : !strcmp(key, "NH") ? &c->NH
             : !strcmp(key, "V") ? &c->V : !strcmp(key, "Vp") ? &c->Vp
             : !strcmp(key, "T") || !strcmp(key, "maxT") ? &c->maxT : NULL;
    if (!dst) return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': unknown key %s (L, C, NH, V, Vp, T)", shape, key);
    return int_of(v, 1, key, shape, dst);
}

static hpt_status parse_gpt2(const char *shape, hpt_model_config *out) {
    static const struct { const char *name; int L, C, NH; } named[] = {
        {"gpt2-124m", 12, 768, 12}, {"gpt2-350m", 24, 1024, 16},
        {"gpt2-774m", 36, 1280, 20}, {"gpt2-1558m", 48, 1600, 25},
    };
    hpt_model_config c = {.arch = HPT_ARCH_GPT2, .V = 50257, .maxT = 1024, .Vp = 0};
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
        HPT_CHECK(parse_kv(shape, shape + 5, &c, gpt2_key));
        if (!c.L || !c.C || !c.NH)
            return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': L, C and NH are required", shape);
    }
    if (!c.Vp) c.Vp = c.V % 128 ? round_up(c.V, 128) : c.V;
    model_config_fill(&c);
    HPT_CHECK(hpt_model_config_check(&c));
    *out = c;
    return HPT_OK;
}

static hpt_status llama_key(hpt_model_config *c, const char *key, double v, const char *shape) {
    static const struct { const char *key; size_t off; int lo; } ints[] = {
        {"L", offsetof(hpt_model_config, L), 1},       {"C", offsetof(hpt_model_config, C), 1},
        {"NH", offsetof(hpt_model_config, NH), 1},     {"NKV", offsetof(hpt_model_config, NKV), 1},
        {"FF", offsetof(hpt_model_config, FF), 1},     {"V", offsetof(hpt_model_config, V), 1},
        {"Vp", offsetof(hpt_model_config, Vp), 1},     {"T", offsetof(hpt_model_config, maxT), 1},
        {"maxT", offsetof(hpt_model_config, maxT), 1}, {"orig", offsetof(hpt_model_config, rope_orig_maxT), 1},
        {"tied", offsetof(hpt_model_config, tied), 0}, {"attn_bias", offsetof(hpt_model_config, attn_bias), 0},
        {"mlp_bias", offsetof(hpt_model_config, mlp_bias), 0}};
    static const struct { const char *key; size_t off; } floats[] = {
        {"theta", offsetof(hpt_model_config, rope_theta)}, {"eps", offsetof(hpt_model_config, norm_eps)},
        {"factor", offsetof(hpt_model_config, rope_factor)}, {"low", offsetof(hpt_model_config, rope_low_freq)},
        {"high", offsetof(hpt_model_config, rope_high_freq)}, {"range", offsetof(hpt_model_config, init_range)}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!strcmp(key, ints[i].key)) {
            int *dst = (int *)((char *)c + ints[i].off);
            HPT_CHECK(int_of(v, ints[i].lo, key, shape, dst));
            if ((dst == &c->tied || dst == &c->attn_bias || dst == &c->mlp_bias) && *dst > 1)
                return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': %s is 0 or 1", shape, key);
            return HPT_OK;
        }
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (!strcmp(key, floats[i].key)) {
            *(float *)((char *)c + floats[i].off) = (float)v;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': unknown key %s (L, C, NH, NKV, FF, V, Vp, T, "
                    "theta, eps, factor, low, high, orig, tied, attn_bias, mlp_bias, range)", shape, key);
}

/* The named llama shapes, from their published config.json files (Hugging Face hub):
 * meta-llama/Llama-3.2-1B, Llama-3.2-3B, Llama-3.1-8B, Llama-2-7b-hf, and
 * mistralai/Mistral-7B-v0.1 (whose sliding window of 4096 positions is not modelled: full
 * causal attention, the same below T = 4096). All: rms_norm_eps 1e-5, initializer_range 0.02,
 * no biases. Llama 3.x: rope_theta 500000, rope_type llama3 with low_freq_factor 1,
 * high_freq_factor 4, original_max_position_embeddings 8192. */
static const struct {
    const char *name;
    int L, C, NH, NKV, FF, V, maxT, tied;
    float theta, factor;
} k_llama[] = {
    {"llama3.2-1b", 16, 2048, 32, 8, 8192, 128256, 131072, 1, 500000.0f, 32.0f},
    {"llama3.2-3b", 28, 3072, 24, 8, 8192, 128256, 131072, 1, 500000.0f, 32.0f},
    {"llama3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072, 0, 500000.0f, 8.0f},
    {"llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 0, 10000.0f, 0.0f},
    {"mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768, 0, 10000.0f, 0.0f},
};

static hpt_status parse_llama(const char *shape, hpt_model_config *out) {
    hpt_model_config c = {.arch = HPT_ARCH_LLAMA, .V = 32000, .maxT = 2048, .norm_eps = 1e-6f,
                          .rope_theta = 10000.0f, .init_range = 0.02f};
    int found = 0;
    for (size_t i = 0; i < sizeof k_llama / sizeof k_llama[0]; i++)
        if (!strcmp(shape, k_llama[i].name)) {
            c.L = k_llama[i].L; c.C = k_llama[i].C; c.NH = k_llama[i].NH;
            c.NKV = k_llama[i].NKV; c.FF = k_llama[i].FF; c.V = k_llama[i].V;
            c.maxT = k_llama[i].maxT; c.tied = k_llama[i].tied;
            c.rope_theta = k_llama[i].theta; c.norm_eps = 1e-5f;
            if (k_llama[i].factor > 0.0f) {
                c.rope_factor = k_llama[i].factor;
                c.rope_low_freq = 1.0f; c.rope_high_freq = 4.0f; c.rope_orig_maxT = 8192;
            }
            found = 1;
        }
    if (!found) {
        if (strncmp(shape, "llama:", 6) != 0)
            return hpt_fail(HPT_ERR_INVALID, "unknown model shape '%s' (use llama3.2-1b, "
                            "llama3.2-3b, llama3.1-8b, llama2-7b, mistral-7b or "
                            "llama:L=..,C=..,NH=..,NKV=..,FF=..[,V=..][,T=..][,theta=..])", shape);
        HPT_CHECK(parse_kv(shape, shape + 6, &c, llama_key));
        if (!c.L || !c.C || !c.NH || !c.FF)
            return hpt_fail(HPT_ERR_INVALID, "bad shape '%s': L, C, NH and FF are required", shape);
        if (!c.NKV) c.NKV = c.NH;
        if (c.rope_factor > 0.0f) {
            if (c.rope_low_freq == 0.0f) c.rope_low_freq = 1.0f;
            if (c.rope_high_freq == 0.0f) c.rope_high_freq = 4.0f;
        }
    }
    if (!c.Vp) c.Vp = c.V % 128 ? round_up(c.V, 128) : c.V;
    HPT_CHECK(hpt_model_config_check(&c));
    *out = c;
    return HPT_OK;
}

hpt_status hpt_model_config_parse(const char *shape, hpt_model_config *out) {
    if (!strncmp(shape, "llama", 5) || !strncmp(shape, "mistral", 7)) return parse_llama(shape, out);
    if (!strncmp(shape, "gpt2", 4)) return parse_gpt2(shape, out);
    return hpt_fail(HPT_ERR_INVALID, "unknown model shape '%s' (gpt2-124m, gpt2:L=..,C=..,NH=.., "
                    "llama3.2-1b, llama3.2-3b, llama3.1-8b, llama2-7b, mistral-7b, "
                    "llama:L=..,C=..,NH=..,NKV=..,FF=..)", shape);
}

size_t hpt_model_config_num_params(const hpt_model_config *cfg) {
    hpt_tensor_table t;
    model_describe(cfg, &t);
    return hpt_table_numel(&t);
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
