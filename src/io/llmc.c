/* llmc.c: llm.c's GPT-2 checkpoint (version 3 fp32, version 5 bf16) and reference state.
 * Readers check magic, version, shape and the exact file size before reading a payload, so
 * a wrong or truncated file fails with a one-line reason and nothing half-loaded. The payload
 * is the model's tensor table in checkpoint order (model/model.h): read into and written from
 * the model's flat buffer, or streamed through model_absorb / model_emit with the offload engine. */
#include "core/core.h"
#include "io/io_int.h"
#include "kernels/backend.h"
#include "model/infer.h"
#include "model/model.h"
#include "offload/engine.h"

#include <stdlib.h>
#include <string.h>

#define CKPT_MAGIC 20240326
#define STATE_MAGIC 20240327

/* An offloaded model's weights, read in the engine's pieces (fp32, or bf16 widened in place:
 * the n bf16 values read into the upper half of dst, element i read before dst[i] is written,
 * and dst[i] never reaches an element not yet read). */
typedef struct {
    FILE *f;
    const char *path;
    int bf16;
} ckpt_reader;

static hpt_status read_ckpt(void *ctx, float *dst, size_t n) {
    ckpt_reader *r = ctx;
    if (!r->bf16) return io_read_exact(r->f, dst, n * 4, r->path, "parameters");
    uint16_t *stage = (uint16_t *)dst + n;
    HPT_CHECK(io_read_exact(r->f, stage, n * 2, r->path, "parameters"));
    for (size_t i = 0; i < n; i++) {
        uint32_t bits = (uint32_t)stage[i] << 16;
        memcpy(&dst[i], &bits, 4);
    }
    return HPT_OK;
}

/* The model's loaders are io's, so that the model and the engine call nothing above them. */
hpt_status hpt_model_load(hpt_mem *mem, const char *path, hpt_model **out) {
    return hpt_model_load_offload(mem, path, NULL, out);
}

hpt_status hpt_model_load_forward(hpt_mem *mem, const char *path, hpt_model **out) {
    model_create_forward_only(1);
    hpt_status s = hpt_model_load_offload(mem, path, NULL, out);
    model_create_forward_only(0);
    return s;
}

hpt_status hpt_model_load_offload(hpt_mem *mem, const char *path, const hpt_offload_opts *off,
                                  hpt_model **out) {
    *out = NULL;
    if (io_is_dir(path)) return hpt_model_load_hf(mem, path, off, out); /* Hugging Face */
    FILE *f;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &f, &size));
    int32_t h[256];
    hpt_status s = io_read_header(f, h, path);
    if (s != HPT_OK) { fclose(f); return s; }
    if (h[0] != CKPT_MAGIC) {
        fclose(f);
        return hpt_fail(HPT_ERR_FORMAT, "%s is not a GPT-2 checkpoint (magic %d, expected %d)",
                        path, h[0], CKPT_MAGIC);
    }
    if (h[1] != 3 && h[1] != 5) {
        fclose(f);
        return hpt_fail(HPT_ERR_FORMAT, "%s: checkpoint version %d is not supported (3 fp32, 5 bf16)",
                        path, h[1]);
    }
    hpt_model_config cfg = {.maxT = h[2], .V = h[3], .L = h[4], .NH = h[5], .C = h[6], .Vp = h[7]};
    if (cfg.Vp == 0) cfg.Vp = cfg.V; /* version-1 era files carry no padded size */
    model_config_fill(&cfg);
    s = hpt_model_config_check(&cfg);
    if (s != HPT_OK) { fclose(f); return hpt_fail_ctx(s, "%s", path); }
    size_t n = hpt_model_config_num_params(&cfg), esz = h[1] == 3 ? 4 : 2;
    if (size != 1024 + (uint64_t)n * esz) {
        fclose(f);
        return hpt_fail(HPT_ERR_FORMAT, "%s: %llu bytes, but its header (L=%d C=%d V=%d Vp=%d maxT=%d) "
                        "needs %llu (truncated or corrupt)", path, (unsigned long long)size, cfg.L, cfg.C, cfg.V, cfg.Vp,
                        cfg.maxT, (unsigned long long)(1024 + (uint64_t)n * esz));
    }
    hpt_model *m;
    s = hpt_model_create_config_offload(mem, &cfg, off, &m);
    if (s != HPT_OK) { fclose(f); return s; }
    float *params = model_params(m);
    /* a GPU's: staged; a forward-only model has no gradients to stage bf16 in: in place */
    if (model_engine(m) || model_backend(m) != hpt_backend_cpu() || !model_grads(m) ||
        model_grads_floats(m) < model_params_floats(m)) { /* ZeRO-2's: the blocks' away */
        ckpt_reader r = {f, path, esz == 2};
        s = model_absorb(m, EB_P, params, read_ckpt, &r);
    } else if (esz == 4) {
        s = io_read_exact(f, params, n * 4, path, "parameters");
    } else {
        /* bf16 -> fp32: the bf16 bits are the high half of the float; reuse grads as staging */
        uint16_t *stage = (uint16_t *)model_grads(m);
        s = io_read_exact(f, stage, n * 2, path, "parameters");
        for (size_t i = n; s == HPT_OK && i-- > 0;) {
            uint32_t bits = (uint32_t)stage[i] << 16;
            memcpy(&params[i], &bits, 4);
        }
        hpt_model_zero_grad(m);
    }
    fclose(f);
    if (s != HPT_OK) { hpt_model_free(m); return s; }
    *out = m;
    return HPT_OK;
}

static hpt_status emit_atomic(void *ctx, const float *x, size_t n) {
    return io_atomic_write(ctx, x, n * sizeof(float));
}

hpt_status hpt_model_save(const hpt_model *m, const char *path) {
    const hpt_model_config *c = hpt_model_get_config(m);
    if (c->arch != HPT_ARCH_GPT2)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: llm.c's checkpoint format holds GPT-2 only; a "
                        "%s model is saved as a Hugging Face directory", path, hpt_model_arch(m));
    hpt_model *mm = (hpt_model *)(uintptr_t)m; /* model_emit's engine gathers: no change */
    int32_t h[256] = {0};
    h[0] = CKPT_MAGIC; h[1] = 3; h[2] = c->maxT; h[3] = c->V; h[4] = c->L;
    h[5] = c->NH; h[6] = c->C; h[7] = c->Vp;
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, h, sizeof h);
    if (s == HPT_OK) /* model_emit gathers an offloaded model's blocks in checkpoint order */
        s = model_emit(mm, EB_P, model_params(mm), emit_atomic, &w);
    if (s != HPT_OK) { io_atomic_abort(&w); return s; }
    return io_atomic_commit(&w);
}

static size_t ref_sizes(const hpt_model_config *cfg, int B, int T, size_t *n_logits) {
    *n_logits = (size_t)B * T * cfg->V;
    return hpt_model_config_num_params(cfg);
}

void hpt_ref_state_free(hpt_mem *mem, const hpt_model_config *cfg, hpt_ref_state *s) {
    if (!s) return;
    size_t BT = (size_t)s->B * s->T, nl, np = ref_sizes(cfg, s->B, s->T, &nl);
    hpt_mem_free(mem, HPT_TIER_DEVICE, HPT_CAT_IO, s->x, BT * 4);
    hpt_mem_free(mem, HPT_TIER_DEVICE, HPT_CAT_IO, s->y, BT * 4);
    hpt_mem_free(mem, HPT_TIER_DEVICE, HPT_CAT_IO, s->logits, nl * 4);
    hpt_mem_free(mem, HPT_TIER_DEVICE, HPT_CAT_IO, s->grads, np * 4);
    memset(s, 0, sizeof *s);
}

hpt_status hpt_ref_state_load(const char *path, hpt_mem *mem, const hpt_model_config *cfg,
                              hpt_ref_state *out) {
    memset(out, 0, sizeof *out);
    FILE *f;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &f, &size));
    int32_t h[256];
    hpt_status s = io_read_header(f, h, path);
    if (s == HPT_OK && h[0] != STATE_MAGIC)
        s = hpt_fail(HPT_ERR_FORMAT, "%s is not a reference state (magic %d, expected %d)", path,
                     h[0], STATE_MAGIC);
    if (s == HPT_OK && h[1] != 2)
        s = hpt_fail(HPT_ERR_FORMAT, "%s: reference state version %d is not supported (2)", path, h[1]);
    if (s == HPT_OK && (h[2] < 1 || h[3] < 1 || h[3] > cfg->maxT))
        s = hpt_fail(HPT_ERR_SHAPE, "%s: B=%d T=%d do not fit the model (maxT %d)", path, h[2],
                     h[3], cfg->maxT);
    if (s != HPT_OK) { fclose(f); return s; }
    int B = h[2], T = h[3];
    size_t BT = (size_t)B * T, nl, np = ref_sizes(cfg, B, T, &nl);
    uint64_t want = 1024 + BT * 8 + nl * 4 + 4 + np * 4;
    if (size != want) {
        fclose(f);
        return hpt_fail(HPT_ERR_FORMAT, "%s: %llu bytes, but B=%d T=%d with this model "
                        "(V=%d, %zu parameters) needs %llu: truncated, or not this model's state",
                        path, (unsigned long long)size, B, T, cfg->V, np, (unsigned long long)want);
    }
    out->B = B; out->T = T; out->V = cfg->V; out->Vp = cfg->Vp;
    s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, BT * 4, (void **)&out->x);
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, BT * 4, (void **)&out->y);
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, nl * 4, (void **)&out->logits);
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, np * 4, (void **)&out->grads);
    if (s == HPT_OK) s = io_read_exact(f, out->x, BT * 4, path, "inputs");
    if (s == HPT_OK) s = io_read_exact(f, out->y, BT * 4, path, "targets");
    if (s == HPT_OK) s = io_read_exact(f, out->logits, nl * 4, path, "logits");
    if (s == HPT_OK) s = io_read_exact(f, &out->loss, 4, path, "loss");
    if (s == HPT_OK) s = io_read_exact(f, out->grads, np * 4, path, "gradients");
    fclose(f);
    for (size_t i = 0; s == HPT_OK && i < BT; i++)
        if (out->x[i] < 0 || out->x[i] >= cfg->V || out->y[i] < 0 || out->y[i] >= cfg->V)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: token at position %zu is outside [0, %d)", path, i, cfg->V);
    if (s != HPT_OK) hpt_ref_state_free(mem, cfg, out);
    return s;
}

/* The header checks of hpt_model_load without the payload: the estimator and the trainer's
 * budget check learn a checkpoint's shape before anything is allocated for it. */
hpt_status hpt_model_read_config(const char *path, hpt_model_config *out) {
    if (io_is_dir(path)) return io_hf_read_config(path, out); /* Hugging Face */
    FILE *f;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &f, &size));
    int32_t h[256];
    hpt_status s = io_read_header(f, h, path);
    fclose(f);
    if (s != HPT_OK) return s;
    if (h[0] != CKPT_MAGIC)
        return hpt_fail(HPT_ERR_FORMAT, "%s is not a GPT-2 checkpoint (magic %d, expected %d)",
                        path, h[0], CKPT_MAGIC);
    if (h[1] != 3 && h[1] != 5)
        return hpt_fail(HPT_ERR_FORMAT, "%s: checkpoint version %d is not supported (3 fp32, 5 bf16)",
                        path, h[1]);
    hpt_model_config cfg = {.maxT = h[2], .V = h[3], .L = h[4], .NH = h[5], .C = h[6], .Vp = h[7]};
    if (cfg.Vp == 0) cfg.Vp = cfg.V;
    model_config_fill(&cfg);
    s = hpt_model_config_check(&cfg);
    if (s != HPT_OK) return hpt_fail_ctx(s, "%s", path);
    size_t n = hpt_model_config_num_params(&cfg), esz = h[1] == 3 ? 4 : 2;
    if (size != 1024 + (uint64_t)n * esz)
        return hpt_fail(HPT_ERR_FORMAT, "%s: %llu bytes, but its header (L=%d C=%d V=%d Vp=%d maxT=%d) "
                        "needs %llu (truncated or corrupt)", path, (unsigned long long)size, cfg.L,
                        cfg.C, cfg.V, cfg.Vp, cfg.maxT, (unsigned long long)(1024 + (uint64_t)n * esz));
    *out = cfg;
    return HPT_OK;
}

/* ---- streaming reader: the inference engine's loader ---------------------------------- */

hpt_status io_llmc_stream(hpt_mem *mem, const char *path, const hpt_model_config *cfg,
                          const size_t *row_width, size_t stage_bytes, io_llmc_rows_fn fn,
                          void *ctx) {
    hpt_tensor_table t;
    model_describe(cfg, &t);
    FILE *f;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &f, &size));
    int32_t h[256];
    hpt_status s = io_read_header(f, h, path);
    const size_t esz = h[1] == 5 ? 2 : 4;
    float *stage = NULL;
    if (s == HPT_OK) {
        hpt_mem_set_name(mem, "checkpoint staging");
        s = hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_IO, stage_bytes, (void **)&stage);
    }
    for (int k = 0; k < t.n && s == HPT_OK; k++) {
        size_t w = row_width[k], rows = hpt_tensor_numel(&t.t[k]) / w;
        size_t step = stage_bytes / (w * sizeof(float));
        for (size_t r0 = 0; r0 < rows && s == HPT_OK; r0 += step) {
            size_t n = HPT_MIN(step, rows - r0), cnt = n * w;
            s = io_read_exact(f, stage, cnt * esz, path, t.t[k].name);
            if (s != HPT_OK) break;
            if (esz == 2) { /* bf16 bits are a float's high half; widen in place from the end */
                const uint16_t *b = (const uint16_t *)stage;
                for (size_t i = cnt; i-- > 0;) {
                    uint32_t bits = (uint32_t)b[i] << 16;
                    memcpy(&stage[i], &bits, 4);
                }
            }
            fn(ctx, k, r0, stage, n);
        }
    }
    hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_IO, stage, stage_bytes);
    fclose(f);
    return s;
}

static void ingest_rows(void *ctx, int k, size_t row0, const float *rows, size_t n) {
    infer_ingest(ctx, k, row0, rows, n);
}

/* An inference engine that owns its weights, read K_INFER_STAGE_BYTES at a time: with int8
 * weights no full fp32 copy ever exists. */
#define K_INFER_STAGE_BYTES (8u << 20)

hpt_status hpt_infer_load(hpt_mem *mem, const char *path, hpt_weights kind, int ctx,
                          hpt_infer **out) {
    *out = NULL;
    hpt_model_config cfg;
    HPT_CHECK(hpt_model_read_config(path, &cfg)); /* checks magic, version and size */
    hpt_infer *inf;
    HPT_CHECK(infer_new(mem, &cfg, kind, ctx, &inf));
    hpt_tensor_table t;
    model_describe(&cfg, &t);
    size_t w[HPT_TABLE_MAX];
    for (int k = 0; k < t.n; k++) w[k] = infer_row_width(&cfg, k);
    hpt_status s = infer_alloc_weights(inf);
    if (s == HPT_OK)
        s = (io_is_dir(path) ? io_hf_stream : io_llmc_stream)(mem, path, &cfg, w,
                                                              K_INFER_STAGE_BYTES, ingest_rows, inf);
    if (s != HPT_OK) {
        hpt_infer_free(inf);
        return hpt_fail_ctx(s, "loading %s (%s weights)", path, hpt_weights_name(kind));
    }
    *out = inf;
    return HPT_OK;
}
