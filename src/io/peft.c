/* peft.c: LoRA adapters in PEFT's files (docs/lora.md, docs/formats.md): a directory with
 * adapter_config.json (peft_type LORA, r, lora_alpha, lora_dropout, use_rslora,
 * target_modules, ...) and adapter_model.safetensors, whose tensors are named
 *   base_model.model.<block prefix><module>.lora_A.weight   (r, in)
 *   base_model.model.<block prefix><module>.lora_B.weight   (out, r)
 * with the architecture's Hugging Face block prefix ("model.layers.3.", "transformer.h.3.")
 * and module ("self_attn.q_proj", "attn.c_attn"). Writing: both files atomically (temporary
 * name, fsync, rename), the safetensors file written here (one file, F32, data 8-aligned).
 * Reading: the config gives the options (target_modules matched as PEFT does, by a module
 * path's end), the adapters are attached and filled from the file; every tensor is checked
 * for presence and shape, and an unknown target or a missing tensor is refused by name. */
#include "core/core.h"
#include "io/io.h"
#include "io/safetensors.h"
#include "kernels/backend.h"
#include "model/arch.h"
#include "model/model.h"

#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEFT_CONFIG "adapter_config.json"
#define PEFT_WEIGHTS "adapter_model.safetensors"

/* block: the architecture's prefix, a format with one %d (hpt_arch.hf_block) */
static void tensor_name(char *out, size_t n, const char *block, int l, const char *hf, int b) {
    const char *d = strstr(block, "%d");
    snprintf(out, n, "base_model.model.%.*s%d%s%s.lora_%c.weight", d ? (int)(d - block) : 0,
             block, l, d ? d + 2 : "", hf, b ? 'B' : 'A');
}

static hpt_status write_text(const char *path, const char *text) {
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, text, strlen(text));
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w);
}

static hpt_status write_config(const hpt_model *m, const char *dir, const char *base,
                               const hpt_arch_linear *lin, int n) {
    const hpt_lora_opts *o = model_lora_opts(m);
    cJSON *j = cJSON_CreateObject(), *t = cJSON_CreateArray();
    if (!j || !t) {
        cJSON_Delete(j);
        cJSON_Delete(t);
        return hpt_fail(HPT_ERR_OOM, "writing %s", PEFT_CONFIG);
    }
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(t, cJSON_CreateString(lin[i].hf));
    const int gpt2 = hpt_model_get_config(m)->arch == HPT_ARCH_GPT2;
    cJSON_AddStringToObject(j, "peft_type", "LORA");
    cJSON_AddStringToObject(j, "task_type", "CAUSAL_LM");
    if (base) cJSON_AddStringToObject(j, "base_model_name_or_path", base);
    else cJSON_AddNullToObject(j, "base_model_name_or_path");
    cJSON_AddNumberToObject(j, "r", o->r);
    /* the float settings as their shortest decimal (0.05, not 0.0500000007) */
    char num[32];
    snprintf(num, sizeof num, "%.7g", (double)o->alpha);
    cJSON_AddNumberToObject(j, "lora_alpha", strtod(num, NULL));
    snprintf(num, sizeof num, "%.7g", (double)o->dropout);
    cJSON_AddNumberToObject(j, "lora_dropout", strtod(num, NULL));
    cJSON_AddBoolToObject(j, "use_rslora", o->rslora);
    cJSON_AddItemToObject(j, "target_modules", t);
    cJSON_AddStringToObject(j, "bias", "none");
    cJSON_AddBoolToObject(j, "fan_in_fan_out", gpt2); /* GPT-2's Conv1D stores W^T */
    cJSON_AddBoolToObject(j, "inference_mode", 1);
    cJSON_AddBoolToObject(j, "init_lora_weights", 1);
    cJSON_AddNullToObject(j, "modules_to_save");
    cJSON_AddNullToObject(j, "layers_to_transform");
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return hpt_fail(HPT_ERR_OOM, "writing %s", PEFT_CONFIG);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, PEFT_CONFIG);
    hpt_status s = write_text(path, text);
    free(text);
    return s;
}

/* adapter_model.safetensors: the header (every tensor F32, back to back in the model's order:
 * per layer l, per target, A then B), padded to 8 bytes, then the values. */
static hpt_status write_weights(hpt_model *m, const char *dir, const hpt_arch_linear *lin, int n,
                                const char *block) {
    const hpt_model_config *c = hpt_model_get_config(m);
    const hpt_lora_opts *o = model_lora_opts(m);
    const hpt_tensor_table *t = model_lora_table(m);
    const struct hpt_backend *be = model_backend(m);
    size_t cap = 256 + (size_t)c->L * (size_t)n * 2 * 200, len = 0;
    char *hdr = malloc(cap);
    if (!hdr) return hpt_fail(HPT_ERR_OOM, "writing %s", PEFT_WEIGHTS);
    len += (size_t)snprintf(hdr + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t at = 0;
    for (int l = 0; l < c->L; l++)
        for (int i = 0; i < n; i++)
            for (int b = 0; b < 2; b++) {
                char name[200];
                tensor_name(name, sizeof name, block, l, lin[i].hf, b);
                int64_t R = b ? lin[i].out : o->r, W = b ? o->r : lin[i].in;
                uint64_t bytes = (uint64_t)R * (uint64_t)W * 4;
                len += (size_t)snprintf(hdr + len, cap - len,
                                        ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld,%lld],"
                                        "\"data_offsets\":[%llu,%llu]}", name, (long long)R,
                                        (long long)W, (unsigned long long)at,
                                        (unsigned long long)(at + bytes));
                at += bytes;
            }
    len += (size_t)snprintf(hdr + len, cap - len, "}");
    while (len % 8) hdr[len++] = ' ';
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, PEFT_WEIGHTS);
    io_atomic w;
    hpt_status s = io_atomic_begin(&w, path);
    if (s != HPT_OK) {
        free(hdr);
        return s;
    }
    uint64_t hl = len;
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)(hl >> (8 * k));
    s = io_atomic_write(&w, le, 8);
    if (s == HPT_OK) s = io_atomic_write(&w, hdr, len);
    free(hdr);
    size_t most = 0;
    for (int j = 0; j < t->n; j++) most = HPT_MAX(most, hpt_tensor_slice_numel(&t->t[j], t->L));
    float *host = malloc(most * sizeof(float) + 4);
    if (!host && s == HPT_OK) s = hpt_fail(HPT_ERR_OOM, "writing %s", PEFT_WEIGHTS);
    const float *P = hpt_model_lora_params(m);
    for (int l = 0; l < c->L && s == HPT_OK; l++)
        for (int j = 0; j < t->n && s == HPT_OK; j++) { /* j = 2 i + b: the file's order */
            size_t sn = hpt_tensor_slice_numel(&t->t[j], t->L);
            be->copy(host, P + hpt_table_offset(t, j) + (size_t)l * sn, sn * sizeof(float),
                     HPT_COPY_D2H);
            s = io_atomic_write(&w, host, sn * sizeof(float));
        }
    free(host);
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return hpt_fail_ctx(s, "writing %s", path);
    }
    return io_atomic_commit(&w);
}

hpt_status hpt_lora_save(hpt_model *m, const char *dir, const char *base_model) {
    hpt_arch_linear lin[HPT_ARCH_MAX_LINEARS];
    const char *block = NULL;
    int n = model_lora_layers(m, lin, &block);
    if (!n) return hpt_fail(HPT_ERR_INVALID, "saving adapters: the model has none");
    HPT_CHECK(write_weights(m, dir, lin, n, block));
    return write_config(m, dir, base_model, lin, n);
}

/* adapter_config.json -> options: r, lora_alpha, lora_dropout, use_rslora, target_modules (a
 * list, or one string: PEFT's regular expression is not read). */
hpt_status hpt_lora_read_config(const char *dir, hpt_lora_opts *o) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, PEFT_CONFIG);
    FILE *f;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &f, &size));
    char *text = malloc(size + 1);
    hpt_status s = text ? io_read_exact(f, text, size, path, "the adapter configuration")
                        : hpt_fail(HPT_ERR_OOM, "reading %s", path);
    fclose(f);
    if (s != HPT_OK) {
        free(text);
        return s;
    }
    text[size] = 0;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) return hpt_fail(HPT_ERR_FORMAT, "%s is not JSON", path);
    *o = hpt_lora_defaults();
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(j, "peft_type");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "r");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "lora_alpha");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "lora_dropout");
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "use_rslora");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "target_modules");
    if (pt && (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA")))
        s = hpt_fail(HPT_ERR_UNSUPPORTED, "%s: peft_type is not LORA", path);
    else if (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble != (int)r->valuedouble)
        s = hpt_fail(HPT_ERR_FORMAT, "%s: no rank r (a whole number >= 1)", path);
    if (s == HPT_OK) {
        o->r = (int)r->valuedouble;
        o->alpha = cJSON_IsNumber(a) ? (float)a->valuedouble : 8.0f;
        o->dropout = cJSON_IsNumber(d) ? (float)d->valuedouble : 0.0f;
        o->rslora = cJSON_IsTrue(rs);
        size_t k = 0;
        o->targets[0] = 0;
        const cJSON *e;
        if (cJSON_IsString(t)) {
            k = (size_t)snprintf(o->targets, sizeof o->targets, "%s", t->valuestring);
        } else if (cJSON_IsArray(t)) {
            cJSON_ArrayForEach(e, t)
                if (cJSON_IsString(e) && k < sizeof o->targets)
                    k += (size_t)snprintf(o->targets + k, sizeof o->targets - k, "%s%s",
                                          k ? "," : "", e->valuestring);
        }
        if (k >= sizeof o->targets)
            s = hpt_fail(HPT_ERR_UNSUPPORTED, "%s: target_modules longer than %zu characters",
                         path, sizeof o->targets - 1);
    }
    cJSON_Delete(j);
    return s;
}

hpt_status hpt_lora_load(hpt_model *m, const char *dir) {
    hpt_lora_opts o;
    HPT_CHECK(hpt_lora_read_config(dir, &o));
    HPT_CHECK(hpt_model_lora_attach(m, &o, 0));
    hpt_status s = hpt_lora_read_values(m, dir);
    if (s != HPT_OK) hpt_model_lora_detach(m);
    return s;
}

hpt_status hpt_lora_read_values(hpt_model *m, const char *dir) {
    hpt_arch_linear lin[HPT_ARCH_MAX_LINEARS];
    const char *block = NULL;
    int n = model_lora_layers(m, lin, &block);
    const hpt_tensor_table *t = model_lora_table(m);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, PEFT_WEIGHTS);
    st_file f;
    if (!n) return hpt_fail(HPT_ERR_INVALID, "reading adapters: the model has none attached");
    hpt_status s = st_open(path, &f);
    if (s != HPT_OK) return s;
    const struct hpt_backend *be = model_backend(m);
    float *P = hpt_model_lora_params(m);
    size_t most = 0;
    for (int j = 0; j < t->n; j++) most = HPT_MAX(most, hpt_tensor_slice_numel(&t->t[j], t->L));
    float *host = malloc(most * sizeof(float) + 4);
    if (!host) s = hpt_fail(HPT_ERR_OOM, "reading %s", path);
    for (int l = 0; l < t->L && s == HPT_OK; l++)
        for (int j = 0; j < 2 * n && s == HPT_OK; j++) {
            const hpt_tensor_desc *d = &t->t[j];
            char name[200];
            tensor_name(name, sizeof name, block, l, lin[j / 2].hf, j % 2);
            const st_tensor *st = st_find(&f.h, name);
            if (!st) {
                s = hpt_fail(HPT_ERR_FORMAT, "%s has no tensor %s", path, name);
                break;
            }
            if (st->ndim != 2 || st->shape[0] != d->shape[1] || st->shape[1] != d->shape[2]) {
                s = hpt_fail(HPT_ERR_SHAPE, "%s: %s should be (%lld, %lld)", path, name,
                             (long long)d->shape[1], (long long)d->shape[2]);
                break;
            }
            size_t sn = hpt_tensor_slice_numel(d, t->L);
            s = st_read_f32(&f, st, 0, sn, host);
            if (s == HPT_OK)
                be->copy(P + hpt_table_offset(t, j) + (size_t)l * sn, host, sn * sizeof(float),
                         HPT_COPY_H2D);
        }
    free(host);
    st_close(&f);
    return s;
}
