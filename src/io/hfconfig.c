/* hfconfig.c: Hugging Face's config.json, read into hf_config and written from it.
 *
 * Architectures: GPT2LMHeadModel (n_embd, n_layer, n_head, n_positions, vocab_size,
 * layer_norm_epsilon; tanh GELU; tied head) and LlamaForCausalLM / MistralForCausalLM
 * (hidden_size, intermediate_size, num_attention_heads, num_key_value_heads (default: the
 * heads), num_hidden_layers, vocab_size, max_position_embeddings, rms_norm_eps, rope_theta,
 * Llama 3's rope scaling under rope_scaling or rope_parameters, tie_word_embeddings,
 * attention_bias, mlp_bias, initializer_range, head_dim). A key hptrain cannot honour is an
 * error naming the key (a different head_dim, another rope_type, another activation); keys it
 * does not use are ignored, as Hugging Face's loaders ignore them. */
#include "io/hf.h"
#include "io/safetensors.h"

#include "core/core.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *item(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNull(v) ? NULL : v;
}

/* An integer key in [lo, hi]; def when absent (required: def < lo). */
static hpt_status get_int(const cJSON *o, const char *key, long def, long lo, long hi,
                          const char *what, int *out) {
    const cJSON *v = item(o, key);
    if (!v) {
        if (def < lo) return st_fail(HPT_ERR_FORMAT, "%s: '%s' is missing", what, key);
        *out = (int)def;
        return HPT_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo ||
        v->valuedouble > hi)
        return st_fail(HPT_ERR_FORMAT, "%s: '%s' must be an integer in [%ld, %ld]", what, key,
                        lo, hi);
    *out = (int)v->valuedouble;
    return HPT_OK;
}

static hpt_status get_float(const cJSON *o, const char *key, double def, const char *what,
                            float *out) {
    const cJSON *v = item(o, key);
    if (!v) { *out = (float)def; return HPT_OK; }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
        return st_fail(HPT_ERR_FORMAT, "%s: '%s' must be a non-negative number", what, key);
    *out = (float)v->valuedouble;
    return HPT_OK;
}

static hpt_status get_bool(const cJSON *o, const char *key, int def, const char *what, int *out) {
    const cJSON *v = item(o, key);
    if (!v) { *out = def; return HPT_OK; }
    if (!cJSON_IsBool(v)) return st_fail(HPT_ERR_FORMAT, "%s: '%s' must be true or false", what, key);
    *out = cJSON_IsTrue(v);
    return HPT_OK;
}

static hpt_status parse_tokens(const cJSON *root, const char *what, hf_config *c) {
    c->bos = -1;
    HPT_CHECK(get_int(root, "bos_token_id", -1, -1, 1L << 30, what, &c->bos));
    const cJSON *e = item(root, "eos_token_id");
    if (e && cJSON_IsArray(e)) {
        for (const cJSON *x = e->child; x; x = x->next) {
            if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
                x->valuedouble > (1 << 30))
                return st_fail(HPT_ERR_FORMAT, "%s: 'eos_token_id' entries must be token ids", what);
            if (c->n_eos < 8) c->eos[c->n_eos++] = (int)x->valuedouble;
        }
    } else if (e) {
        int id;
        HPT_CHECK(get_int(root, "eos_token_id", 0, 0, 1L << 30, what, &id));
        c->eos[c->n_eos++] = id;
    }
    const cJSON *d = item(root, "torch_dtype");
    if (!d) d = item(root, "dtype");
    if (cJSON_IsString(d)) snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", d->valuestring);
    return HPT_OK;
}

static hpt_status parse_gpt2(const cJSON *r, const char *what, hf_config *c) {
    c->arch = HF_GPT2;
    HPT_CHECK(get_int(r, "n_embd", -1, 1, 1 << 20, what, &c->C));
    HPT_CHECK(get_int(r, "n_layer", -1, 1, 1 << 16, what, &c->L));
    HPT_CHECK(get_int(r, "n_head", -1, 1, 1 << 16, what, &c->NH));
    HPT_CHECK(get_int(r, "vocab_size", -1, 1, 1 << 28, what, &c->V));
    int nctx;
    HPT_CHECK(get_int(r, "n_ctx", 1024, 1, 1 << 24, what, &nctx));
    HPT_CHECK(get_int(r, "n_positions", nctx, 1, 1 << 24, what, &c->maxT));
    HPT_CHECK(get_int(r, "n_inner", 4L * c->C, 4L * c->C, 4L * c->C, what, &c->FF));
    HPT_CHECK(get_float(r, "layer_norm_epsilon", 1e-5, what, &c->norm_eps));
    HPT_CHECK(get_float(r, "initializer_range", 0.02, what, &c->init_range));
    HPT_CHECK(get_bool(r, "tie_word_embeddings", 1, what, &c->tied));
    if (!c->tied)
        return st_fail(HPT_ERR_UNSUPPORTED, "%s: tie_word_embeddings false: hptrain's GPT-2 has "
                        "a tied head", what);
    const cJSON *act = item(r, "activation_function");
    if (act && (!cJSON_IsString(act) || (strcmp(act->valuestring, "gelu_new") &&
                                         strcmp(act->valuestring, "gelu_pytorch_tanh"))))
        return st_fail(HPT_ERR_UNSUPPORTED, "%s: activation_function '%s': hptrain's GPT-2 uses "
                        "the tanh GELU (gelu_new)", what,
                        cJSON_IsString(act) ? act->valuestring : "?");
    c->NKV = c->NH;
    c->attn_bias = c->mlp_bias = 1;
    if (c->C % c->NH)
        return st_fail(HPT_ERR_FORMAT, "%s: n_embd %d is not a multiple of n_head %d", what,
                        c->C, c->NH);
    return HPT_OK;
}

/* Llama 3's frequency scaling, under rope_scaling or rope_parameters (which may also hold
 * rope_theta). */
static hpt_status parse_rope(const cJSON *r, const char *what, hf_config *c) {
    const cJSON *rs = item(r, "rope_parameters");
    const char *key = "rope_parameters";
    if (!rs) { rs = item(r, "rope_scaling"); key = "rope_scaling"; }
    if (!rs) return HPT_OK;
    if (!cJSON_IsObject(rs)) return st_fail(HPT_ERR_FORMAT, "%s: '%s' is not an object", what, key);
    if (item(rs, "rope_theta")) HPT_CHECK(get_float(rs, "rope_theta", 0, what, &c->rope_theta));
    const cJSON *t = item(rs, "rope_type");
    if (!t) t = item(rs, "type");
    const char *type = cJSON_IsString(t) ? t->valuestring : "default";
    if (!strcmp(type, "default")) return HPT_OK;
    if (strcmp(type, "llama3"))
        return st_fail(HPT_ERR_UNSUPPORTED, "%s: %s.rope_type '%s': hptrain knows 'default' and "
                        "'llama3'", what, key, type);
    HPT_CHECK(get_float(rs, "factor", -1, what, &c->rope_factor));
    HPT_CHECK(get_float(rs, "low_freq_factor", 1, what, &c->rope_low_freq));
    HPT_CHECK(get_float(rs, "high_freq_factor", 4, what, &c->rope_high_freq));
    HPT_CHECK(get_int(rs, "original_max_position_embeddings", 8192, 1, 1 << 24, what,
                      &c->rope_orig_maxT));
    if (!(c->rope_factor > 0) || !(c->rope_high_freq > c->rope_low_freq))
        return st_fail(HPT_ERR_FORMAT, "%s: %s: llama3 needs factor > 0 and high_freq_factor > "
                        "low_freq_factor", what, key);
    return HPT_OK;
}

static hpt_status parse_llama(const cJSON *r, const char *what, hf_config *c) {
    c->arch = HF_LLAMA;
    HPT_CHECK(get_int(r, "hidden_size", -1, 1, 1 << 20, what, &c->C));
    HPT_CHECK(get_int(r, "intermediate_size", -1, 1, 1 << 22, what, &c->FF));
    HPT_CHECK(get_int(r, "num_hidden_layers", -1, 1, 1 << 16, what, &c->L));
    HPT_CHECK(get_int(r, "num_attention_heads", -1, 1, 1 << 16, what, &c->NH));
    HPT_CHECK(get_int(r, "num_key_value_heads", c->NH, 1, 1 << 16, what, &c->NKV));
    HPT_CHECK(get_int(r, "vocab_size", -1, 1, 1 << 28, what, &c->V));
    HPT_CHECK(get_int(r, "max_position_embeddings", 2048, 1, 1 << 24, what, &c->maxT));
    HPT_CHECK(get_float(r, "rms_norm_eps", 1e-6, what, &c->norm_eps));
    HPT_CHECK(get_float(r, "rope_theta", 10000, what, &c->rope_theta));
    HPT_CHECK(get_float(r, "initializer_range", 0.02, what, &c->init_range));
    HPT_CHECK(get_bool(r, "tie_word_embeddings", 0, what, &c->tied));
    HPT_CHECK(get_bool(r, "attention_bias", 0, what, &c->attn_bias));
    HPT_CHECK(get_bool(r, "mlp_bias", 0, what, &c->mlp_bias));
    HPT_CHECK(parse_rope(r, what, c));
    if (c->C % c->NH)
        return st_fail(HPT_ERR_FORMAT, "%s: hidden_size %d is not a multiple of "
                        "num_attention_heads %d", what, c->C, c->NH);
    if (c->NH % c->NKV)
        return st_fail(HPT_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of "
                        "num_key_value_heads %d", what, c->NH, c->NKV);
    int hd;
    HPT_CHECK(get_int(r, "head_dim", c->C / c->NH, 1, 1 << 20, what, &hd));
    if (hd != c->C / c->NH)
        return st_fail(HPT_ERR_UNSUPPORTED, "%s: head_dim %d differs from hidden_size / "
                        "num_attention_heads = %d: hptrain's llama needs them equal", what, hd,
                        c->C / c->NH);
    const cJSON *act = item(r, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu")))
        return st_fail(HPT_ERR_UNSUPPORTED, "%s: hidden_act '%s': hptrain's llama uses SiLU",
                        what, cJSON_IsString(act) ? act->valuestring : "?");
    return HPT_OK;
}

hpt_status hf_config_parse(const char *text, size_t n, const char *what, hf_config *out) {
    memset(out, 0, sizeof *out);
    cJSON *root = cJSON_ParseWithLength(text, n);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return st_fail(HPT_ERR_FORMAT, "%s: not a JSON object", what);
    }
    const cJSON *archs = item(root, "architectures"), *mt = item(root, "model_type");
    const char *a = cJSON_IsArray(archs) && cJSON_IsString(archs->child) ? archs->child->valuestring
                    : NULL;
    const char *type = cJSON_IsString(mt) ? mt->valuestring : "";
    hpt_status s;
    if (a ? !strcmp(a, "GPT2LMHeadModel") : !strcmp(type, "gpt2")) {
        snprintf(out->arch_name, sizeof out->arch_name, "GPT2LMHeadModel");
        s = parse_gpt2(root, what, out);
    } else if (a ? !strcmp(a, "LlamaForCausalLM") || !strcmp(a, "MistralForCausalLM")
                 : !strcmp(type, "llama") || !strcmp(type, "mistral")) {
        snprintf(out->arch_name, sizeof out->arch_name, "%s",
                 a ? a : !strcmp(type, "llama") ? "LlamaForCausalLM" : "MistralForCausalLM");
        s = parse_llama(root, what, out);
    } else {
        s = st_fail(HPT_ERR_UNSUPPORTED, "%s: architecture '%.40s': hptrain reads "
                     "GPT2LMHeadModel, LlamaForCausalLM and MistralForCausalLM", what,
                     a ? a : *type ? type : "(none given)");
    }
    if (s == HPT_OK) s = parse_tokens(root, what, out);
    cJSON_Delete(root);
    return s;
}

hpt_status hf_config_read(const char *dir, hf_config *out) {
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "rb");
    if (!f) return st_fail(HPT_ERR_IO, "cannot open %s: %s", p, strerror(errno));
    char *buf = malloc(1 << 20);
    size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    int big = buf && n == (1 << 20);
    fclose(f);
    if (!buf) return st_fail(HPT_ERR_OOM, "no memory to read %s", p);
    hpt_status s = big ? st_fail(HPT_ERR_FORMAT, "%s: larger than 1 MB", p)
                       : hf_config_parse(buf, n, p, out);
    free(buf);
    return s;
}

/* The shortest decimal that reads back as f. */
static cJSON *num_float(float f) {
    char b[32];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, (double)f);
        if (strtof(b, NULL) == f) break;
    }
    return cJSON_CreateRaw(b);
}

hpt_status hf_config_write(const char *path, const hf_config *c, const char *dtype) {
    cJSON *r = cJSON_CreateObject(), *archs = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(archs, cJSON_CreateString(c->arch_name));
    if (c->arch == HF_GPT2) {
        cJSON_AddStringToObject(r, "model_type", "gpt2");
        cJSON_AddStringToObject(r, "activation_function", "gelu_new");
        cJSON_AddNumberToObject(r, "n_embd", c->C);
        cJSON_AddNumberToObject(r, "n_layer", c->L);
        cJSON_AddNumberToObject(r, "n_head", c->NH);
        cJSON_AddNumberToObject(r, "n_positions", c->maxT);
        cJSON_AddNumberToObject(r, "n_ctx", c->maxT);
        cJSON_AddNullToObject(r, "n_inner");
        cJSON_AddItemToObject(r, "layer_norm_epsilon", num_float(c->norm_eps));
    } else {
        cJSON_AddStringToObject(r, "model_type",
                                !strcmp(c->arch_name, "MistralForCausalLM") ? "mistral" : "llama");
        cJSON_AddStringToObject(r, "hidden_act", "silu");
        cJSON_AddNumberToObject(r, "hidden_size", c->C);
        cJSON_AddNumberToObject(r, "intermediate_size", c->FF);
        cJSON_AddNumberToObject(r, "num_hidden_layers", c->L);
        cJSON_AddNumberToObject(r, "num_attention_heads", c->NH);
        cJSON_AddNumberToObject(r, "num_key_value_heads", c->NKV);
        cJSON_AddNumberToObject(r, "head_dim", c->C / c->NH);
        cJSON_AddNumberToObject(r, "max_position_embeddings", c->maxT);
        cJSON_AddItemToObject(r, "rms_norm_eps", num_float(c->norm_eps));
        cJSON_AddItemToObject(r, "rope_theta", num_float(c->rope_theta));
        if (c->rope_factor > 0) {
            cJSON *rs = cJSON_AddObjectToObject(r, "rope_scaling");
            cJSON_AddStringToObject(rs, "rope_type", "llama3");
            cJSON_AddItemToObject(rs, "factor", num_float(c->rope_factor));
            cJSON_AddItemToObject(rs, "low_freq_factor", num_float(c->rope_low_freq));
            cJSON_AddItemToObject(rs, "high_freq_factor", num_float(c->rope_high_freq));
            cJSON_AddNumberToObject(rs, "original_max_position_embeddings", c->rope_orig_maxT);
        } else {
            cJSON_AddNullToObject(r, "rope_scaling");
        }
        cJSON_AddBoolToObject(r, "attention_bias", c->attn_bias);
        cJSON_AddBoolToObject(r, "mlp_bias", c->mlp_bias);
    }
    cJSON_AddNumberToObject(r, "vocab_size", c->V);
    cJSON_AddItemToObject(r, "initializer_range", num_float(c->init_range));
    cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tied);
    if (c->bos >= 0) cJSON_AddNumberToObject(r, "bos_token_id", c->bos);
    if (c->n_eos == 1) cJSON_AddNumberToObject(r, "eos_token_id", c->eos[0]);
    if (c->n_eos > 1) {
        cJSON *e = cJSON_AddArrayToObject(r, "eos_token_id");
        for (int i = 0; i < c->n_eos; i++) cJSON_AddItemToArray(e, cJSON_CreateNumber(c->eos[i]));
    }
    cJSON_AddStringToObject(r, "torch_dtype", dtype);
    char *text = cJSON_Print(r);
    cJSON_Delete(r);
    if (!text) return st_fail(HPT_ERR_OOM, "no memory to write %s", path);
    FILE *f = fopen(path, "wb");
    hpt_status s = HPT_OK;
    if (!f) s = st_fail(HPT_ERR_IO, "cannot create %s: %s", path, strerror(errno));
    if (f && (fputs(text, f) < 0 || fputc('\n', f) == EOF))
        s = st_fail(HPT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (f && fclose(f) != 0 && s == HPT_OK)
        s = st_fail(HPT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    cJSON_free(text);
    return s;
}

hpt_status hf_config_to_model(const hf_config *c, hpt_model_config *out) {
    if (c->arch == HF_GPT2 && (c->norm_eps < 0.99e-5f || c->norm_eps > 1.01e-5f))
        return st_fail(HPT_ERR_UNSUPPORTED, "%s: layer_norm_epsilon %g: hptrain's GPT-2 uses 1e-5",
                        c->arch_name, (double)c->norm_eps);
    *out = (hpt_model_config){
        .arch = c->arch == HF_GPT2 ? HPT_ARCH_GPT2 : HPT_ARCH_LLAMA,
        .L = c->L, .C = c->C, .NH = c->NH, .NKV = c->NKV, .FF = c->FF, .V = c->V,
        .Vp = (c->V + 127) / 128 * 128, .maxT = c->maxT, .norm_eps = c->norm_eps,
        .rope_theta = c->arch == HF_GPT2 ? 0.0f : c->rope_theta, .rope_factor = c->rope_factor,
        .rope_low_freq = c->rope_low_freq, .rope_high_freq = c->rope_high_freq,
        .rope_orig_maxT = c->rope_orig_maxT, .tied = c->tied, .attn_bias = c->attn_bias,
        .mlp_bias = c->mlp_bias, .init_range = c->init_range};
    if (c->arch == HF_GPT2) out->attn_bias = out->mlp_bias = 0; /* GPT-2's biases are its own */
    return hpt_model_config_check(out);
}

void hf_config_from_model(const hpt_model_config *g, hf_config *out) {
    memset(out, 0, sizeof *out);
    const int gpt2 = g->arch == HPT_ARCH_GPT2;
    out->arch = gpt2 ? HF_GPT2 : HF_LLAMA;
    snprintf(out->arch_name, sizeof out->arch_name, gpt2 ? "GPT2LMHeadModel" : "LlamaForCausalLM");
    out->L = g->L; out->C = g->C; out->NH = g->NH; out->NKV = gpt2 ? g->NH : g->NKV;
    out->FF = gpt2 ? 4 * g->C : g->FF;
    out->V = g->V; out->maxT = g->maxT;
    out->norm_eps = gpt2 ? 1e-5f : g->norm_eps;
    out->rope_theta = g->rope_theta;
    out->rope_factor = g->rope_factor;
    out->rope_low_freq = g->rope_low_freq;
    out->rope_high_freq = g->rope_high_freq;
    out->rope_orig_maxT = g->rope_orig_maxT;
    out->init_range = g->init_range > 0 ? g->init_range : 0.02f;
    out->tied = gpt2 ? 1 : g->tied;
    out->attn_bias = gpt2 ? 1 : g->attn_bias;
    out->mlp_bias = gpt2 ? 1 : g->mlp_bias;
    out->bos = -1;
    if (gpt2 && g->V > 50256) { out->bos = 50256; out->eos[out->n_eos++] = 50256; }
}
