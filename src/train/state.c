/* state.c: hptrain's training-state checkpoint (weights, optimizer settings and state,
 * position, config, named sections). It builds the model and the optimizer it resumes, so it
 * lives in train (the module above both), on io's file helpers (io/io.h). The layout (version
 * 3; versions 1 and 2 still load), its sections (bf16_comp, emb_comp added here) and what loads
 * where: docs/formats.md, "The training state". The header fields are also ZeRO's manifest's
 * (state_pack_fields, state_unpack_fields; zero.c).
 * Invariants: written through io_atomic (temporary file, fsync, rename, directory fsync), so
 * the previous checkpoint under the same name survives any crash; a load checks the size, then
 * the CRC-32C over everything, before handing out a model; an offloaded model's file is the
 * same bytes as an in-memory one's (blocks gathered and scattered as the stream goes by). */
#include "core/core.h"
#include "io/io.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "offload/engine.h"
#include "optim/optim.h"
#include "train/train_int.h"

#include <stdlib.h>
#include <string.h>

#define STATE_VERSION 3
#define NFIELDS STATE_NFIELDS

/* Fields 27-31: the configuration beyond GPT-2's six numbers (all 0 for GPT-2, as in files
 * written before them): 27 arch | NKV << 8 | FF << 32; 28 tied | attn_bias << 1 | mlp_bias << 2
 * | rope_orig_maxT << 8 | hd << 40 (0 but for Qwen3); 29 norm_eps | rope_theta << 32;
 * 30 rope_factor | rope_low_freq << 32; 31 rope_high_freq | init_range << 32 (floats as their
 * bits). Field 5 is maxT | window << 32 (the sliding window; 0 in files before it). Gemma 3 has
 * no Llama 3 scaling: its rope_orig_maxT bits hold swa_pattern, its rope_low_freq
 * rope_local_theta and its rope_high_freq attn_scalar. */
static int gemma(const hpt_model_config *c) { return c->arch == HPT_ARCH_GEMMA3; }
static int64_t two_floats(float lo, float hi) {
    uint32_t a, b;
    memcpy(&a, &lo, 4);
    memcpy(&b, &hi, 4);
    return (int64_t)((uint64_t)a | (uint64_t)b << 32);
}
static float float_at(int64_t v, int hi) {
    uint32_t a = (uint32_t)((uint64_t)v >> (hi ? 32 : 0));
    float x;
    memcpy(&x, &a, 4);
    return x;
}
static void pack_arch(const hpt_model_config *c, int64_t *f) {
    f[5] = (int64_t)((uint64_t)(uint32_t)c->maxT | (uint64_t)(uint32_t)c->window << 32);
    if (c->arch == HPT_ARCH_GPT2) return;
    f[27] = (int64_t)((uint64_t)c->arch | (uint64_t)c->NKV << 8 | (uint64_t)c->FF << 32);
    const uint64_t orig = (uint64_t)(uint32_t)(gemma(c) ? c->swa_pattern : c->rope_orig_maxT);
    f[28] = (int64_t)((uint64_t)c->tied | (uint64_t)c->attn_bias << 1 | (uint64_t)c->mlp_bias << 2 |
                      orig << 8 | (uint64_t)c->hd << 40);
    f[29] = two_floats(c->norm_eps, c->rope_theta);
    f[30] = two_floats(c->rope_factor, gemma(c) ? c->rope_local_theta : c->rope_low_freq);
    f[31] = two_floats(gemma(c) ? c->attn_scalar : c->rope_high_freq, c->init_range);
}
static void unpack_arch(const int64_t *f, hpt_model_config *c) {
    uint64_t a = (uint64_t)f[27], b = (uint64_t)f[28];
    c->maxT = (int)((uint64_t)f[5] & 0xffffffffu);
    c->window = (int)((uint64_t)f[5] >> 32);
    c->arch = (int)(a & 0xff);
    if (c->arch == HPT_ARCH_GPT2) return;
    c->NKV = (int)((a >> 8) & 0xffffff);
    c->FF = (int)(a >> 32);
    c->tied = (int)(b & 1);
    c->attn_bias = (int)((b >> 1) & 1);
    c->mlp_bias = (int)((b >> 2) & 1);
    c->rope_orig_maxT = (int)((b >> 8) & 0xffffffffu);
    c->hd = (int)(b >> 40);
    c->norm_eps = float_at(f[29], 0);
    c->rope_theta = float_at(f[29], 1);
    c->rope_factor = float_at(f[30], 0);
    c->rope_low_freq = float_at(f[30], 1);
    c->rope_high_freq = float_at(f[31], 0);
    c->init_range = float_at(f[31], 1);
    if (gemma(c)) {
        c->swa_pattern = c->rope_orig_maxT;
        c->rope_local_theta = c->rope_low_freq;
        c->attn_scalar = c->rope_high_freq;
        c->rope_orig_maxT = 0, c->rope_low_freq = 0.0f, c->rope_high_freq = 0.0f;
    }
}
static const char k_magic[8] = {'H', 'P', 'T', 'S', 'T', 'A', 'T', 'E'};
static const char k_end[8] = {'H', 'P', 'T', 'E', 'N', 'D', 0, 0};

#define N_COMP 2
static const char *const comp_names[N_COMP] = {"bf16_comp", "emb_comp"};

/* The model's Kahan compensations, one per name of comp_names (NULL, 0: none). */
static hpt_status model_comps(hpt_model *m, uint16_t *comp[N_COMP], size_t n[N_COMP]) {
    comp[0] = comp[1] = NULL;
    n[0] = n[1] = 0;
    if (model_engine(m)) HPT_CHECK(eng_comp(model_engine(m), &comp[0], &n[0]));
    model_emb_comp(m, &comp[1], &n[1]);
    return HPT_OK;
}

static int64_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return (int64_t)u; }
static float bitsf(int64_t b) { uint32_t u = (uint32_t)b; float f; memcpy(&f, &u, 4); return f; }

static hpt_status emit_atomic(void *ctx, const float *x, size_t n) {
    return io_atomic_write(ctx, x, n * sizeof(float));
}
static hpt_status write_atomic(void *ctx, void *p, size_t bytes) { return io_atomic_write(ctx, p, bytes); }

/* Tensor memory of backend be to and from the file. The CPU's tensors are the host's: written,
 * read and checksummed in place, as always. A GPU's go through a host bounce buffer, a piece
 * at a time (device -> host -> file, file -> host -> device); the file's bytes are the same. */
#define STAGE_BYTES ((size_t)4 << 20)
static hpt_status tensor_write(io_atomic *w, const hpt_backend *be, const void *p, size_t bytes) {
    if (be == hpt_backend_cpu()) return io_atomic_write(w, p, bytes);
    char *buf = malloc(HPT_MIN(bytes, STAGE_BYTES) + 1); /* staging, freed here */
    if (!buf) return hpt_fail(HPT_ERR_OOM, "the checkpoint's staging buffer");
    hpt_status s = HPT_OK;
    for (size_t o = 0; o < bytes && s == HPT_OK; o += STAGE_BYTES) {
        size_t n = HPT_MIN(STAGE_BYTES, bytes - o);
        be->copy(buf, (const char *)p + o, n, HPT_COPY_D2H);
        s = io_atomic_write(w, buf, n);
    }
    free(buf);
    return s;
}

static hpt_status tensor_read(FILE *fp, const hpt_backend *be, void *p, size_t bytes,
                              const char *path, const char *what) {
    if (be == hpt_backend_cpu()) return io_read_exact(fp, p, bytes, path, what);
    char *buf = malloc(HPT_MIN(bytes, STAGE_BYTES) + 1);
    if (!buf) return hpt_fail(HPT_ERR_OOM, "the checkpoint's staging buffer");
    hpt_status s = HPT_OK;
    for (size_t o = 0; o < bytes && s == HPT_OK; o += STAGE_BYTES) {
        size_t n = HPT_MIN(STAGE_BYTES, bytes - o);
        s = io_read_exact(fp, buf, n, path, what);
        if (s == HPT_OK) be->copy((char *)p + o, buf, n, HPT_COPY_H2D);
    }
    free(buf);
    return s;
}

static uint32_t tensor_crc(uint32_t crc, const hpt_backend *be, const void *p, size_t bytes) {
    if (be == hpt_backend_cpu()) return io_crc32c(crc, p, bytes);
    char *buf = malloc(HPT_MIN(bytes, STAGE_BYTES) + 1);
    if (!buf) return ~crc; /* cannot check: a mismatch, reported as a corrupt file */
    for (size_t o = 0; o < bytes; o += STAGE_BYTES) {
        size_t n = HPT_MIN(STAGE_BYTES, bytes - o);
        be->copy(buf, (const char *)p + o, n, HPT_COPY_D2H);
        crc = io_crc32c(crc, buf, n);
    }
    free(buf);
    return crc;
}

void state_pack_fields(const hpt_model *model, const hpt_optim *opt, const hpt_adamw_opts *ao,
                       const hpt_train_pos *pos, int64_t f[STATE_NFIELDS]) {
    const hpt_model_config *c = hpt_model_get_config(model);
    size_t num_params = hpt_model_num_params(model);
    int64_t g[NFIELDS] = {c->L, c->C, c->NH, c->V, c->Vp, c->maxT,
                          fbits(ao->lr), fbits(ao->beta1), fbits(ao->beta2), fbits(ao->eps),
                          fbits(ao->weight_decay), ao->decay_all,
                          pos->step, pos->data_shard, pos->data_offset, (int64_t)pos->rng_state,
                          pos->total_steps, pos->B, pos->T,
                          hpt_optim_get_t(opt), (int64_t)num_params, ao->optimizer,
                          ao->state_bits == 0 ? 32 : ao->state_bits, ao->state32_embeddings,
                          pos->accum > 1 ? pos->accum : 1, fbits(hpt_optim_get_prev_norm(opt)),
                          OPTIM_Q8_V_ROOT};
    pack_arch(c, g);
    memcpy(f, g, sizeof g);
}

hpt_status state_unpack_fields(const int64_t f[STATE_NFIELDS], const char *path,
                               hpt_model_config *c, hpt_adamw_opts *ao, hpt_train_pos *pos,
                               int64_t *optim_t, float *prev_norm) {
    *c = (hpt_model_config){.L = (int)f[0], .C = (int)f[1], .NH = (int)f[2], .V = (int)f[3],
                            .Vp = (int)f[4], .maxT = (int)f[5]};
    unpack_arch(f, c);
    hpt_status s = hpt_model_config_check(c);
    if (s != HPT_OK) return hpt_fail_ctx(s, "%s", path);
    *ao = (hpt_adamw_opts){.lr = bitsf(f[6]), .beta1 = bitsf(f[7]), .beta2 = bitsf(f[8]),
                           .eps = bitsf(f[9]), .weight_decay = bitsf(f[10]),
                           .decay_all = (int)f[11], .optimizer = (int)f[21],
                           .state_bits = (int)f[22], .state32_embeddings = (int)f[23]};
    if (hpt_optim_state_bytes(c, ao) == 0)
        return hpt_fail(HPT_ERR_FORMAT, "%s: bad optimizer settings (optimizer %lld, %lld-bit "
                        "state)", path, (long long)f[21], (long long)f[22]);
    if (ao->optimizer == HPT_OPTIM_ADAMW && ao->state_bits == 8 && f[26] != OPTIM_Q8_V_ROOT)
        return hpt_fail(HPT_ERR_FORMAT, "%s: its 8-bit AdamW second moment is not in this "
                        "build's encoding", path);
    if ((uint64_t)f[20] != hpt_model_config_num_params(c))
        return hpt_fail(HPT_ERR_FORMAT, "%s: parameter count %lld does not match its shape", path,
                        (long long)f[20]);
    memset(pos, 0, sizeof *pos);
    pos->step = f[12];
    pos->data_shard = f[13];
    pos->data_offset = f[14];
    pos->rng_state = (uint64_t)f[15];
    pos->total_steps = f[16];
    pos->B = (int32_t)f[17];
    pos->T = (int32_t)f[18];
    pos->accum = f[24] > 1 ? (int32_t)f[24] : 1;
    *optim_t = f[19];
    *prev_norm = bitsf(f[25]);
    return HPT_OK;
}

hpt_status hpt_state_save(const char *path, const hpt_model *model, const hpt_optim *opt,
                          const hpt_adamw_opts *ao, const hpt_train_pos *pos) {
    return hpt_state_save_sections(path, model, opt, ao, pos, NULL, 0);
}

hpt_status hpt_state_save_sections(const char *path, const hpt_model *model, const hpt_optim *opt,
                                   const hpt_adamw_opts *ao, const hpt_train_pos *pos,
                                   const hpt_state_section *sec, int n_sec) {
    /* bf16-kahan weights' (and embeddings') compensation: one more section each */
    uint16_t *comp[N_COMP];
    size_t n_comp[N_COMP];
    HPT_CHECK(model_comps((hpt_model *)(uintptr_t)model, comp, n_comp));
    int n_own = (comp[0] != NULL) + (comp[1] != NULL);
    if (n_sec < 0 || n_sec + n_own > HPT_STATE_MAX_SECTIONS)
        return hpt_fail(HPT_ERR_INVALID, "%d checkpoint sections (at most %d%s)", n_sec,
                        HPT_STATE_MAX_SECTIONS - n_own,
                        n_own ? " beside the bf16 compensation" : "");
    for (int i = 0; i < n_sec; i++)
        if (!memchr(sec[i].name, 0, sizeof sec[i].name) || !sec[i].name[0] ||
            !strcmp(sec[i].name, comp_names[0]) || !strcmp(sec[i].name, comp_names[1]))
            return hpt_fail(HPT_ERR_INVALID, "checkpoint section %d: a name of 1 to 15 characters, "
                            "not %s or %s (the state's own)", i, comp_names[0], comp_names[1]);
    size_t num_params = hpt_model_num_params(model);
    int64_t f[NFIELDS];
    state_pack_fields(model, opt, ao, pos, f);
    uint32_t ver[2] = {STATE_VERSION, NFIELDS};
    size_t nb = num_params * sizeof(float);
    const hpt_adamw_opts *oo = hpt_optim_get_opts(opt);
    if (oo->optimizer != ao->optimizer || (oo->state_bits == 0 ? 32 : oo->state_bits) != f[22] ||
        oo->state32_embeddings != ao->state32_embeddings)
        return hpt_fail(HPT_ERR_INVALID, "saving a state: the settings given do not match the "
                        "optimizer's (%s)", hpt_optim_name((hpt_optim_kind)oo->optimizer));
    hpt_optim_buf bufs[HPT_OPTIM_NUM_BUFS];
    hpt_optim_state_buffers(opt, bufs);
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, k_magic, 8);
    if (s == HPT_OK) s = io_atomic_write(&w, ver, sizeof ver);
    if (s == HPT_OK) s = io_atomic_write(&w, f, sizeof f);
    hpt_model *mm = (hpt_model *)(uintptr_t)model;
    if (model_engine(mm)) { /* offloaded: gathered in checkpoint order */
        if (s == HPT_OK) s = model_emit(mm, EB_P, model_params(mm), emit_atomic, &w);
    } else if (s == HPT_OK) {
        s = tensor_write(&w, model_backend(mm), model_params(mm), nb);
    }
    if (optim_eng_homes(opt)) { /* AdamW fp32's m, v from the engine's homes */
        for (int i = 0; i < 2 && s == HPT_OK; i++) s = optim_emit_moment(opt, i, emit_atomic, &w);
    } else if (optim_cut(opt)) { /* ZeRO in the engine: the blocks' state gathered (collective) */
        for (int i = 0; i < HPT_OPTIM_NUM_BUFS && s == HPT_OK; i++)
            s = optim_emit_cut(opt, i, write_atomic, &w);
    } else {
        for (int i = 0; i < HPT_OPTIM_NUM_BUFS && s == HPT_OK; i++)
            if (bufs[i].bytes) s = tensor_write(&w, model_backend(mm), bufs[i].data, bufs[i].bytes);
    }
    {
        uint32_t ns = (uint32_t)(n_sec + n_own);
        if (s == HPT_OK) s = io_atomic_write(&w, &ns, 4);
        for (int i = 0, k = 0; i < (int)ns && s == HPT_OK; i++) {
            char name[16] = {0};
            if (i >= n_sec) /* the next compensation the model has */
                while (!comp[k]) k++;
            strcpy(name, i < n_sec ? sec[i].name : comp_names[k]);
            uint64_t sb = i < n_sec ? sec[i].bytes : n_comp[k] * sizeof(uint16_t);
            const void *data = i < n_sec ? sec[i].data : comp[k];
            if (i >= n_sec) k++;
            s = io_atomic_write(&w, name, sizeof name);
            if (s == HPT_OK) s = io_atomic_write(&w, &sb, 8);
            if (s == HPT_OK && sb) s = io_atomic_write(&w, data, (size_t)sb);
        }
    }
    eng_comp_done(model_engine(mm), 0); /* ZeRO: the gathered compensation given back */
    uint32_t crc = w.crc;
    if (s == HPT_OK) s = io_atomic_write(&w, &crc, 4);
    if (s == HPT_OK) s = io_atomic_write(&w, k_end, 8);
    if (s != HPT_OK) { io_atomic_abort(&w); return s; }
    return io_atomic_commit(&w);
}

/* An offloaded model's stream, read in the engine's pieces, with the checksum as it goes. */
typedef struct {
    FILE *fp;
    const char *path;
    uint32_t crc;
} crc_reader;

static hpt_status read_crc(void *ctx, float *dst, size_t n) {
    crc_reader *r = ctx;
    HPT_CHECK(io_read_exact(r->fp, dst, n * sizeof(float), r->path, "state"));
    r->crc = io_crc32c(r->crc, dst, n * sizeof(float));
    return HPT_OK;
}
static hpt_status read_crc_bytes(void *ctx, void *dst, size_t bytes) {
    crc_reader *r = ctx;
    HPT_CHECK(io_read_exact(r->fp, dst, bytes, r->path, "state"));
    r->crc = io_crc32c(r->crc, dst, bytes);
    return HPT_OK;
}

void hpt_state_sections_free(hpt_mem *mem, hpt_state_section *sec, int n_sec) {
    for (int i = 0; i < n_sec; i++) {
        hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_IO, sec[i].data, (size_t)sec[i].bytes);
        sec[i].data = NULL;
    }
}

static hpt_status load_state(const char *path, hpt_mem *mem, const hpt_offload_opts *off,
                             hpt_model **model_out, hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                             hpt_train_pos *pos_out, hpt_state_section sec[HPT_STATE_MAX_SECTIONS],
                             int *n_sec_out);

hpt_status hpt_state_load(const char *path, hpt_mem *mem, hpt_model **model_out,
                          hpt_optim **opt_out, hpt_adamw_opts *ao_out, hpt_train_pos *pos_out) {
    hpt_state_section sec[HPT_STATE_MAX_SECTIONS];
    int n_sec;
    HPT_CHECK(load_state(path, mem, NULL, model_out, opt_out, ao_out, pos_out, sec, &n_sec));
    hpt_state_sections_free(mem, sec, n_sec);
    return HPT_OK;
}

hpt_status hpt_state_load_offload(const char *path, hpt_mem *mem, const hpt_offload_opts *off,
                                  hpt_model **model_out, hpt_optim **opt_out,
                                  hpt_adamw_opts *ao_out, hpt_train_pos *pos_out) {
    hpt_state_section sec[HPT_STATE_MAX_SECTIONS];
    int n_sec;
    HPT_CHECK(load_state(path, mem, off, model_out, opt_out, ao_out, pos_out, sec, &n_sec));
    hpt_state_sections_free(mem, sec, n_sec);
    return HPT_OK;
}

hpt_status hpt_state_load_sections(const char *path, hpt_mem *mem, hpt_model **model_out,
                                   hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                                   hpt_train_pos *pos_out,
                                   hpt_state_section sec[HPT_STATE_MAX_SECTIONS],
                                   int *n_sec_out) {
    return load_state(path, mem, NULL, model_out, opt_out, ao_out, pos_out, sec, n_sec_out);
}

hpt_status hpt_state_load_offload_sections(const char *path, hpt_mem *mem,
                                           const hpt_offload_opts *off, hpt_model **model_out,
                                           hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                                           hpt_train_pos *pos_out,
                                           hpt_state_section sec[HPT_STATE_MAX_SECTIONS],
                                           int *n_sec_out) {
    return load_state(path, mem, off, model_out, opt_out, ao_out, pos_out, sec, n_sec_out);
}

/* Reads version 3's sections (after the optimizer's state) into host buffers from mem; rest:
 * the file's bytes left before the checksum and end marker. */
static hpt_status read_sections(FILE *fp, const char *path, hpt_mem *mem, uint64_t rest,
                                hpt_state_section *sec, int *n_sec) {
    uint32_t ns;
    if (rest < 4) return hpt_fail(HPT_ERR_FORMAT, "%s: sections missing (truncated or corrupt)", path);
    HPT_CHECK(io_read_exact(fp, &ns, 4, path, "section count"));
    rest -= 4;
    if (ns > HPT_STATE_MAX_SECTIONS)
        return hpt_fail(HPT_ERR_FORMAT, "%s: %u sections (at most %d): corrupt", path, ns,
                        HPT_STATE_MAX_SECTIONS);
    for (uint32_t i = 0; i < ns; i++) {
        hpt_state_section *s = &sec[i];
        uint64_t nb;
        if (rest < 24) return hpt_fail(HPT_ERR_FORMAT, "%s: section %u truncated", path, i);
        HPT_CHECK(io_read_exact(fp, s->name, sizeof s->name, path, "section name"));
        HPT_CHECK(io_read_exact(fp, &nb, 8, path, "section size"));
        rest -= 24;
        if (!memchr(s->name, 0, sizeof s->name) || nb > rest)
            return hpt_fail(HPT_ERR_FORMAT, "%s: section %u is malformed or truncated", path, i);
        s->bytes = nb;
        s->data = NULL;
        hpt_mem_set_name(mem, "checkpoint section");
        HPT_CHECK(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_IO, (size_t)nb, &s->data));
        *n_sec = (int)i + 1;
        if (nb) HPT_CHECK(io_read_exact(fp, s->data, (size_t)nb, path, s->name));
        rest -= nb;
    }
    if (rest != 0)
        return hpt_fail(HPT_ERR_FORMAT, "%s: %llu unexpected bytes after the sections", path,
                        (unsigned long long)rest);
    return HPT_OK;
}

/* Takes the bf16 compensations' sections out of sec (freed, the others moved up): into the
 * model's bf16-kahan weights (embeddings), or dropped for other weights. */
static hpt_status absorb_comp(hpt_model *m, hpt_mem *mem, const char *path, hpt_state_section *sec,
                              int *n_sec) {
    uint16_t *comp[N_COMP];
    size_t n[N_COMP];
    HPT_CHECK(model_comps(m, comp, n));
    hpt_status s = HPT_OK;
    for (int c = 0; c < N_COMP; c++) {
        int k = 0;
        while (k < *n_sec && strcmp(sec[k].name, comp_names[c])) k++;
        if (k == *n_sec) continue;
        if (s == HPT_OK && comp[c] && sec[k].bytes != n[c] * sizeof(uint16_t))
            s = hpt_fail(HPT_ERR_FORMAT, "%s: the bf16 %s' Kahan compensation has %llu bytes, "
                         "expected %zu for this shape (truncated or corrupt)", path,
                         c ? "embeddings" : "weights", (unsigned long long)sec[k].bytes,
                         n[c] * sizeof(uint16_t));
        if (s == HPT_OK && comp[c]) /* the model's (device, or an engine's host home) from the
                                     * section's (host) */
            hpt_backend_cpu()->copy(comp[c], sec[k].data, n[c] * sizeof(uint16_t), HPT_COPY_H2D);
        if (c == 0) eng_comp_done(model_engine(m), s == HPT_OK && comp[c] != NULL); /* ZeRO: kept ranges */
        hpt_state_sections_free(mem, &sec[k], 1);
        for (int i = k + 1; i < *n_sec; i++) sec[i - 1] = sec[i];
        (*n_sec)--;
    }
    return s;
}

/* Loads a state into a model made with off (NULL: no engine), with version 3's sections. */
static hpt_status load_state(const char *path, hpt_mem *mem, const hpt_offload_opts *off,
                             hpt_model **model_out, hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                             hpt_train_pos *pos_out, hpt_state_section sec[HPT_STATE_MAX_SECTIONS],
                             int *n_sec_out) {
    *model_out = NULL;
    *opt_out = NULL;
    *n_sec_out = 0;
    int n_sec = 0;
    uint64_t base = 0;
    FILE *fp;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &fp, &size));
    char magic[8];
    uint32_t ver[2];
    int64_t f[NFIELDS];
    hpt_status s = io_read_exact(fp, magic, 8, path, "magic");
    if (s == HPT_OK && memcmp(magic, k_magic, 8) != 0)
        s = hpt_fail(HPT_ERR_FORMAT, "%s is not an hptrain training state (bad magic)", path);
    if (s == HPT_OK) s = io_read_exact(fp, ver, sizeof ver, path, "version");
    if (s == HPT_OK && (ver[0] < 1 || ver[0] > STATE_VERSION || ver[1] != NFIELDS))
        s = hpt_fail(HPT_ERR_FORMAT, "%s: training-state version %u is not supported (this build "
                     "reads versions 1 to %d)", path, ver[0], STATE_VERSION);
    if (s == HPT_OK) s = io_read_exact(fp, f, sizeof f, path, "header");
    hpt_model_config c = {0};
    if (s == HPT_OK) {
        c = (hpt_model_config){.L = (int)f[0], .C = (int)f[1], .NH = (int)f[2], .V = (int)f[3],
                              .Vp = (int)f[4], .maxT = (int)f[5]};
        unpack_arch(f, &c);
        s = hpt_model_config_check(&c);
        if (s != HPT_OK) s = hpt_fail_ctx(s, "%s", path);
    }
    size_t n = 0;
    hpt_adamw_opts ao = {0};
    if (s == HPT_OK) {
        ao = (hpt_adamw_opts){.lr = bitsf(f[6]), .beta1 = bitsf(f[7]), .beta2 = bitsf(f[8]),
                              .eps = bitsf(f[9]), .weight_decay = bitsf(f[10]),
                              .decay_all = (int)f[11], .optimizer = (int)f[21],
                              .state_bits = ver[0] == 1 ? 32 : (int)f[22],
                              .state32_embeddings = (int)f[23]};
        n = hpt_model_config_num_params(&c);
        uint64_t sb = hpt_optim_state_bytes(&c, &ao);
        uint64_t want = 16 + sizeof f + (uint64_t)n * 4 + sb + 12;
        if (sb == 0)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: bad optimizer settings (optimizer %lld, %lld-bit "
                         "state): %s", path, (long long)f[21], (long long)f[22], hpt_last_error());
        else if (ver[0] < 3 && ao.state_bits == 8 && optim_q8_per_slice(&c))
            s = hpt_fail(HPT_ERR_FORMAT, "%s: a version-%u state whose 8-bit optimizer state has "
                         "quantisation blocks per tensor; this build's start at each layer's "
                         "slice (L=%d, C=%d), so the file cannot be read: resume it with the "
                         "build that wrote it, or start again", path, ver[0], c.L, c.C);
        else if (ao.optimizer == HPT_OPTIM_ADAMW && ao.state_bits == 8 && f[26] != OPTIM_Q8_V_ROOT)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: its 8-bit AdamW second moment is %s; this build "
                         "stores sqrt(v) on a map without a 0 code (docs/optimizers.md, the "
                         "zero-point problem), so the file cannot be resumed exactly: resume it "
                         "with the build that wrote it, or start again", path,
                         f[26] == 0 ? "v on the map with a 0 code (written before the encoding "
                                      "was recorded)" : "in an unknown encoding");
        else if ((uint64_t)f[20] != n)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: parameter count %lld does not match its shape", path,
                         (long long)f[20]);
        else if (ver[0] < 3 ? size != want : size < want)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: %llu bytes, expected %llu (truncated or corrupt)",
                         path, (unsigned long long)size, (unsigned long long)want);
        base = want;
    }
    hpt_model *m = NULL;
    hpt_optim *o = NULL;
    hpt_optim_buf bufs[HPT_OPTIM_NUM_BUFS];
    crc_reader rd = {fp, path, 0};
    if (s == HPT_OK) s = hpt_model_create_config_offload(mem, &c, off, &m);
    if (s == HPT_OK) s = hpt_optim_create(mem, m, &ao, &o);
    if (s == HPT_OK) hpt_optim_state_buffers(o, bufs);
    if (s == HPT_OK && model_engine(m)) { /* scattered into the engine's homes as it is read */
        rd.crc = io_crc32c(io_crc32c(io_crc32c(0, k_magic, 8), ver, sizeof ver), f, sizeof f);
        s = model_absorb(m, EB_P, model_params(m), read_crc, &rd);
    } else if (s == HPT_OK) {
        s = tensor_read(fp, model_backend(m), model_params(m), n * 4, path, "parameters");
    }
    if (s == HPT_OK && optim_eng_homes(o)) {
        for (int i = 0; i < 2 && s == HPT_OK; i++) s = optim_absorb_moment(o, i, read_crc, &rd);
    } else if (s == HPT_OK && optim_cut(o)) { /* ZeRO in the engine: this rank's cuts kept */
        for (int i = 0; i < HPT_OPTIM_NUM_BUFS && s == HPT_OK; i++)
            s = optim_absorb_cut(o, i, read_crc_bytes, &rd);
    } else {
        for (int i = 0; i < HPT_OPTIM_NUM_BUFS && s == HPT_OK; i++) {
            if (!bufs[i].bytes) continue;
            s = tensor_read(fp, model_backend(m), bufs[i].data, bufs[i].bytes, path, bufs[i].name);
            if (s == HPT_OK && model_engine(m))
                rd.crc = io_crc32c(rd.crc, bufs[i].data, bufs[i].bytes);
        }
    }
    if (s == HPT_OK && ver[0] >= 3) s = read_sections(fp, path, mem, size - base, sec, &n_sec);
    uint32_t crc_file = 0;
    char end[8];
    if (s == HPT_OK) s = io_read_exact(fp, &crc_file, 4, path, "checksum");
    if (s == HPT_OK) s = io_read_exact(fp, end, 8, path, "end marker");
    fclose(fp);
    if (s == HPT_OK) {
        uint32_t crc = rd.crc;
        if (!model_engine(m)) {
            crc = io_crc32c(0, k_magic, 8);
            crc = io_crc32c(crc, ver, sizeof ver);
            crc = io_crc32c(crc, f, sizeof f);
            crc = tensor_crc(crc, model_backend(m), model_params(m), n * 4);
            for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++)
                if (bufs[i].bytes) crc = tensor_crc(crc, model_backend(m), bufs[i].data, bufs[i].bytes);
        }
        if (ver[0] >= 3) {
            uint32_t ns = (uint32_t)n_sec;
            crc = io_crc32c(crc, &ns, 4);
            for (int i = 0; i < n_sec; i++) {
                crc = io_crc32c(crc, sec[i].name, sizeof sec[i].name);
                crc = io_crc32c(crc, &sec[i].bytes, 8);
                if (sec[i].bytes) crc = io_crc32c(crc, sec[i].data, (size_t)sec[i].bytes);
            }
        }
        if (memcmp(end, k_end, 8) != 0)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: end marker missing (truncated or corrupt)", path);
        else if (crc != crc_file)
            s = hpt_fail(HPT_ERR_CHECKSUM, "%s: checksum mismatch (stored %08x, computed %08x): "
                         "the file is corrupt", path, crc_file, crc);
    }
    if (s == HPT_OK) s = absorb_comp(m, mem, path, sec, &n_sec);
    if (s != HPT_OK) {
        hpt_state_sections_free(mem, sec, n_sec);
        hpt_optim_free(o);
        hpt_model_free(m);
        return s;
    }
    *n_sec_out = n_sec;
    hpt_optim_set_t(o, f[19]);
    hpt_optim_set_prev_norm(o, bitsf(f[25])); /* 0 in files before it was saved */
    *ao_out = ao;
    /* Field by field after a memset: the struct has tail padding, and callers compare it
     * with memcmp. */
    memset(pos_out, 0, sizeof *pos_out);
    pos_out->step = f[12];
    pos_out->data_shard = f[13];
    pos_out->data_offset = f[14];
    pos_out->rng_state = (uint64_t)f[15];
    pos_out->total_steps = f[16];
    pos_out->B = (int32_t)f[17];
    pos_out->T = (int32_t)f[18];
    pos_out->accum = f[24] > 1 ? (int32_t)f[24] : 1;
    *model_out = m;
    *opt_out = o;
    return HPT_OK;
}
