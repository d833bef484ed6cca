/* hfconfig.c: Hugging Face's config.json, read into hf_config and written from it. The keys
 * common to every architecture (architectures, model_type, vocab_size's neighbours:
 * initializer_range, tie_word_embeddings, bos/eos token ids, torch_dtype) are here; each
 * architecture reads and writes its own (model/arch.h's Hugging Face block) through the
 * hpt_hf_json_ops this file fills, and the class names say which architecture reads a file.
 * A key hptrain cannot honour is an error naming the key; keys it does not use are ignored,
 * as Hugging Face's loaders ignore them. */
#include "io/hf.h"
#include "model/arch.h"
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

/* ---- the calls an architecture reads and writes its keys through ---- */

static int j_has(const hpt_hf_json *j, const char *key) {
    return item((const cJSON *)j, key) != NULL;
}
static hpt_status j_int(const hpt_hf_json *j, const char *key, long def, long lo, long hi,
                        const char *what, int *out) {
    return get_int((const cJSON *)j, key, def, lo, hi, what, out);
}
static hpt_status j_float(const hpt_hf_json *j, const char *key, double def, const char *what,
                          float *out) {
    return get_float((const cJSON *)j, key, def, what, out);
}
static hpt_status j_bool(const hpt_hf_json *j, const char *key, int def, const char *what,
                         int *out) {
    return get_bool((const cJSON *)j, key, def, what, out);
}
static const char *j_str(const hpt_hf_json *j, const char *key) {
    const cJSON *v = item((const cJSON *)j, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static const char *j_str_at(const hpt_hf_json *j, const char *key, int i) {
    const cJSON *v = item((const cJSON *)j, key);
    const cJSON *e = cJSON_IsArray(v) ? cJSON_GetArrayItem(v, i) : NULL;
    return cJSON_IsString(e) ? e->valuestring : NULL;
}
static hpt_status j_obj(const hpt_hf_json *j, const char *key, const char *what,
                        const hpt_hf_json **out) {
    const cJSON *v = item((const cJSON *)j, key);
    *out = (const hpt_hf_json *)v;
    if (v && !cJSON_IsObject(v))
        return st_fail(HPT_ERR_FORMAT, "%s: '%s' is not an object", what, key);
    return HPT_OK;
}
static cJSON *num_float(float f);
static void j_put_int(hpt_hf_json *j, const char *key, double v) {
    cJSON_AddNumberToObject((cJSON *)j, key, v);
}
static void j_put_float(hpt_hf_json *j, const char *key, float v) {
    cJSON_AddItemToObject((cJSON *)j, key, num_float(v));
}
static void j_put_bool(hpt_hf_json *j, const char *key, int v) {
    cJSON_AddBoolToObject((cJSON *)j, key, v);
}
static void j_put_str(hpt_hf_json *j, const char *key, const char *v) {
    cJSON_AddStringToObject((cJSON *)j, key, v);
}
static void j_put_null(hpt_hf_json *j, const char *key) { cJSON_AddNullToObject((cJSON *)j, key); }
static hpt_hf_json *j_put_obj(hpt_hf_json *j, const char *key) {
    return (hpt_hf_json *)cJSON_AddObjectToObject((cJSON *)j, key);
}

static const hpt_hf_json_ops k_json = {
    .has = j_has, .get_int = j_int, .get_float = j_float, .get_bool = j_bool, .get_str = j_str,
    .str_at = j_str_at, .obj = j_obj, .put_int = j_put_int, .put_float = j_put_float,
    .put_bool = j_put_bool, .put_str = j_put_str, .put_null = j_put_null, .put_obj = j_put_obj,
    .fail = st_fail,
};

/* The architecture reading class cls (or, cls NULL, model_type type), and the class's index. */
static const hpt_arch *arch_of_class(const char *cls, const char *type, int *index) {
    for (int id = 0; id < hpt_arch_count(); id++) {
        const hpt_arch *A = hpt_arch_at(id);
        if (!A || !A->hf_classes) continue;
        for (int i = 0; A->hf_classes[i]; i++)
            if (cls ? !strcmp(cls, A->hf_classes[i]) : !strcmp(type, A->hf_model_types[i])) {
                *index = i;
                return A;
            }
    }
    return NULL;
}

/* "A, B and C": every class this build reads, for the refusal. */
static void known_classes(char *buf, size_t n) {
    const char *names[32];
    int k = 0;
    for (int id = 0; id < hpt_arch_count(); id++) {
        const hpt_arch *A = hpt_arch_at(id);
        for (int i = 0; A && A->hf_classes && A->hf_classes[i] && k < 32; i++)
            names[k++] = A->hf_classes[i];
    }
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < k && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i == 0 ? "" : i == k - 1 ? " and " : ", ",
                              names[i]);
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
    int ci = 0;
    const hpt_arch *A = a || *type ? arch_of_class(a, type, &ci) : NULL;
    hpt_status s;
    if (A) {
        snprintf(out->arch_name, sizeof out->arch_name, "%s", A->hf_classes[ci]);
        s = A->hf_config_read(&k_json, (const hpt_hf_json *)root, what, &out->m);
        out->arch = out->m.arch;
    } else {
        char known[256];
        known_classes(known, sizeof known);
        s = st_fail(HPT_ERR_UNSUPPORTED, "%s: architecture '%.40s': hptrain reads %s", what,
                    a ? a : *type ? type : "(none given)", known);
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
    const hpt_arch *A = hpt_arch_of(&c->m);
    if (A && A->hf_config_write) A->hf_config_write(&k_json, (hpt_hf_json *)r, &c->m, c->arch_name);
    cJSON_AddNumberToObject(r, "vocab_size", c->m.V);
    cJSON_AddItemToObject(r, "initializer_range", num_float(c->m.init_range));
    cJSON_AddBoolToObject(r, "tie_word_embeddings", c->m.tied);
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
    *out = c->m;
    out->Vp = (c->m.V + 127) / 128 * 128;
    return hpt_model_config_check(out);
}

void hf_config_from_model(const hpt_model_config *g, hf_config *out) {
    memset(out, 0, sizeof *out);
    const hpt_arch *A = hpt_arch_of(g);
    out->arch = g->arch;
    snprintf(out->arch_name, sizeof out->arch_name, "%s",
             A && A->hf_classes ? A->hf_classes[0] : "");
    out->m = *g;
    out->m.init_range = g->init_range > 0 ? g->init_range : 0.02f;
    out->bos = -1;
    if (A && A->hf_eot >= 0 && g->V > A->hf_eot) { /* GPT-2: <|endoftext|> */
        out->bos = A->hf_eot;
        out->eos[out->n_eos++] = A->hf_eot;
    }
}
