/* hfmodel.c: Hugging Face model directories (config.json + safetensors) loaded into a model and
 * saved from one, for every architecture with a Hugging Face block (model/arch.h; formats.md). The
 * model's tensor table is the pivot: each table slice is a list of parts (Hugging Face tensors
 * covering ranges of it, llama's q|k|v and gate|up concatenated, or wte's zero padding; GPT-2's
 * Conv1D weights transposed through two host buffers). Loading streams in checkpoint order into
 * model_absorb (the flat buffer or the engine's homes); saving streams model_emit into the
 * safetensors writer, in a temporary directory renamed over the target when complete.
 * Invariants: a checkpoint is never whole in memory; before a load every name, shape and dtype
 * is checked and every tensor of the files must be one the architecture uses (or a known
 * non-parameter buffer), so nothing is half-loaded because of a bad name. */
#include "core/core.h"
#include "io/hf.h"
#include "io/io_int.h"
#include "io/safetensors.h"
#include "model/arch.h"
#include "model/blocks.h"
#include "model/model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define K_MAX_PARTS HPT_HF_MAX_PARTS
#define K_SHARD_DEFAULT HPT_HF_SHARD_DEFAULT /* Hugging Face's "5GB" */

typedef struct {
    char name[112];       /* Hugging Face name; "" for zero padding */
    uint64_t off, numel;  /* elements of the slice it covers */
    int64_t R, W;         /* its rows and width in hptrain's layout (1-D: R = 1) */
    int ndim;             /* 1 or 2 in the file */
    int transpose;        /* stored (W, R): GPT-2's Conv1D */
} hf_part;

typedef struct {
    hf_config hc;
    const hpt_arch *A;    /* hc's architecture: its Hugging Face block names the tensors */
    hpt_tensor_table tab;
    char prefix[16];      /* one of A->hf_prefixes (GPT-2: "transformer." or ""), or "" */
} hf_map;

static uint64_t slice_numel(const hf_map *mp, int k) {
    return hpt_tensor_slice_numel(&mp->tab.t[k], mp->tab.L);
}

static int is_stacked(const hf_map *mp, int k) { return mp->tab.t[k].layer == HPT_LAYER_STACKED; }

/* The parts of slice (k, l), as the architecture names them; 0 when the table's tensor has no
 * Hugging Face counterpart. */
static int slice_parts(const hf_map *mp, int k, int l, hf_part *p) {
    hpt_hf_part h[K_MAX_PARTS];
    int n = mp->A->hf_parts(&mp->hc.m, &mp->tab.t[k], l, mp->prefix, h);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        hf_part *q = &p[i];
        memcpy(q->name, h[i].name, sizeof q->name); /* both 112, NUL-ended */
        q->off = off;
        q->R = h[i].R;
        q->W = h[i].W;
        q->numel = (uint64_t)(h[i].R * h[i].W);
        q->ndim = h[i].ndim;
        q->transpose = h[i].transpose;
        off += q->numel;
    }
    return n;
}

/* The file's shape of a part. */
static void part_shape(const hf_part *q, int64_t s[2]) {
    if (q->ndim == 1) { s[0] = q->R * q->W; s[1] = 0; return; }
    s[0] = q->transpose ? q->W : q->R;
    s[1] = q->transpose ? q->R : q->W;
}

/* ---- loading ---- */

typedef struct {
    const hf_map *mp;
    const st_dir *d;
    hpt_mem *mem;
    int k, l;              /* the slice being read */
    uint64_t e;            /* elements of it read */
    float *tb[2];          /* (tcap) each: a transposed part as stored, and as hptrain's */
    size_t tcap;
    const st_tensor *cached; /* the part tb[1] holds */
} hf_reader;

static void transpose(float *dst, const float *src, int64_t rows, int64_t cols) {
    /* src (rows, cols) -> dst (cols, rows) in tiles, so both sides stay in cache */
    const int64_t B = 32;
    for (int64_t r0 = 0; r0 < rows; r0 += B)
        for (int64_t c0 = 0; c0 < cols; c0 += B)
            for (int64_t r = r0; r < HPT_MIN(r0 + B, rows); r++)
                for (int64_t c = c0; c < HPT_MIN(c0 + B, cols); c++)
                    dst[c * rows + r] = src[r * cols + c];
}

/* Elements [e, e + m) of slice (k, l) into dst. */
static hpt_status fill_slice(hf_reader *r, float *dst, uint64_t e, uint64_t m) {
    hf_part p[K_MAX_PARTS];
    int np = slice_parts(r->mp, r->k, r->l, p);
    for (int i = 0; i < np; i++) {
        uint64_t lo = HPT_MAX(e, p[i].off), hi = HPT_MIN(e + m, p[i].off + p[i].numel);
        if (lo >= hi) continue;
        float *out = dst + (lo - e);
        if (!p[i].name[0]) { memset(out, 0, (hi - lo) * sizeof(float)); continue; }
        const st_file *f;
        const st_tensor *t = st_dir_find(r->d, p[i].name, &f); /* present: checked at open */
        if (!p[i].transpose) {
            HPT_CHECK(st_read_f32(f, t, lo - p[i].off, (size_t)(hi - lo), out));
            continue;
        }
        if (r->cached != t) {
            HPT_CHECK(st_read_f32(f, t, 0, (size_t)p[i].numel, r->tb[0]));
            transpose(r->tb[1], r->tb[0], p[i].W, p[i].R);
            r->cached = t;
        }
        memcpy(out, r->tb[1] + (lo - p[i].off), (hi - lo) * sizeof(float));
    }
    return HPT_OK;
}

/* model_read_fn: the next n floats in checkpoint order. */
static hpt_status read_stream(void *ctx, float *dst, size_t n) {
    hf_reader *r = ctx;
    while (n) {
        if (r->k >= r->mp->tab.n)
            return st_fail(HPT_ERR_INVALID, "checkpoint stream read past its end");
        uint64_t S = slice_numel(r->mp, r->k), m = HPT_MIN((uint64_t)n, S - r->e);
        HPT_CHECK(fill_slice(r, dst, r->e, m));
        dst += m;
        n -= (size_t)m;
        r->e += m;
        if (r->e == S) {
            r->e = 0;
            if (!is_stacked(r->mp, r->k) || ++r->l == r->mp->tab.L) { r->l = 0; r->k++; }
        }
    }
    return HPT_OK;
}

/* Names Hugging Face files hold that are buffers, not parameters (the architecture's): skipped. */
static int ignorable(const hpt_arch *A, const char *name) {
    size_t n = strlen(name);
    for (int i = 0; A->hf_ignore && A->hf_ignore[i]; i++) {
        size_t k = strlen(A->hf_ignore[i]);
        if (n > k && !strcmp(name + n - k, A->hf_ignore[i])) return 1;
    }
    return 0;
}

/* Is a tied model's lm_head.weight (when a file has one) the embedding, value for value? */
static hpt_status check_tied_head(const st_dir *d, const char *head, const char *wte, const char *dir) {
    const st_file *fh, *fw;
    const st_tensor *h = st_dir_find(d, head, &fh), *w = st_dir_find(d, wte, &fw);
    if (!h) return HPT_OK;
    if (h->ndim != w->ndim || h->numel != w->numel || h->shape[0] != w->shape[0])
        return st_fail(HPT_ERR_SHAPE, "%s: tensor '%s': the head is tied "
                        "(tie_word_embeddings), but its shape differs from %s's", fh->path, head, wte);
    enum { N = 1 << 16 };
    float *a = malloc(2 * N * sizeof(float));
    if (!a) return st_fail(HPT_ERR_OOM, "no memory to compare %s", head);
    hpt_status s = HPT_OK;
    for (uint64_t e = 0; e < h->numel && s == HPT_OK; e += N) {
        size_t n = (size_t)HPT_MIN((uint64_t)N, h->numel - e);
        s = st_read_f32(fh, h, e, n, a);
        if (s == HPT_OK) s = st_read_f32(fw, w, e, n, a + N);
        if (s == HPT_OK && memcmp(a, a + N, n * sizeof(float)))
            s = st_fail(HPT_ERR_UNSUPPORTED, "%s: tensor '%s' differs from %s, but "
                         "config.json says the head is tied", fh->path, head, wte);
    }
    free(a);
    (void)dir;
    return s;
}

/* Every part present with its shape and a readable dtype; every file tensor used or ignorable.
 * *tmax: the largest transposed part (elements). */
static hpt_status check_names(const hf_map *mp, const st_dir *d, const char *dir, size_t *tmax) {
    unsigned char *used = calloc((size_t)(d->n ? d->n : 1), 1);
    if (!used) return st_fail(HPT_ERR_OOM, "no memory");
    hpt_status s = HPT_OK;
    *tmax = 0;
    for (int k = 0; k < mp->tab.n && s == HPT_OK; k++)
        for (int l = 0; l < (is_stacked(mp, k) ? mp->tab.L : 1) && s == HPT_OK; l++) {
            hf_part p[K_MAX_PARTS];
            int np = slice_parts(mp, k, l, p);
            if (np == 0)
                s = st_fail(HPT_ERR_UNSUPPORTED, "%s: the model's tensor '%s' has no name in %s",
                             dir, mp->tab.t[k].name, mp->hc.arch_name);
            for (int i = 0; i < np && s == HPT_OK; i++) {
                if (!p[i].name[0]) continue;
                const st_file *f;
                const st_tensor *t = st_dir_find(d, p[i].name, &f);
                if (!t) {
                    s = st_fail(HPT_ERR_FORMAT, "%s: tensor '%s' is missing (%s, config.json: "
                                 "L=%d C=%d)", dir, p[i].name, mp->hc.arch_name, mp->hc.m.L, mp->hc.m.C);
                    break;
                }
                for (int j = 0; j < d->n; j++)
                    if (d->ent[j].t == t) { used[j] = 1; break; }
                int64_t want[2];
                part_shape(&p[i], want);
                int ok = t->ndim == p[i].ndim && t->shape[0] == want[0] &&
                         (p[i].ndim == 1 || t->shape[1] == want[1]);
                if (!ok)
                    s = st_fail(HPT_ERR_SHAPE, "%s: tensor '%s': shape (%lld%s%lld), expected "
                                 "(%lld%s%lld) from config.json", f->path, p[i].name,
                                 (long long)(t->ndim ? t->shape[0] : 0), t->ndim > 1 ? ", " : "",
                                 (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)want[0],
                                 p[i].ndim > 1 ? ", " : "", (long long)want[1]);
                else if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
                    s = st_fail(HPT_ERR_UNSUPPORTED, "%s: tensor '%s': unsupported dtype %s "
                                 "(F32, BF16 and F16 are read)", f->path, p[i].name,
                                 st_dtype_name(t->dtype));
                if (p[i].transpose) *tmax = HPT_MAX(*tmax, (size_t)p[i].numel);
            }
        }
    const hpt_arch *A = mp->A;
    char wte[128];
    snprintf(wte, sizeof wte, "%s%s", mp->prefix, A->hf_embed_name);
    for (int j = 0; j < d->n && s == HPT_OK; j++) {
        const char *nm = d->ent[j].t->name;
        if (used[j] || ignorable(A, nm) || (mp->hc.m.tied && !strcmp(nm, A->hf_head_name))) continue;
        s = st_fail(HPT_ERR_FORMAT, "%s: tensor '%s' is not a tensor of %s", d->files[d->ent[j].file].path,
                     nm, mp->hc.arch_name);
    }
    if (s == HPT_OK && mp->hc.m.tied) s = check_tied_head(d, A->hf_head_name, wte, dir);
    free(used);
    return s;
}

/* The first of A's prefixes under which the files hold its embedding, else its first. */
static void pick_prefix(const hpt_arch *A, const st_dir *d, char *prefix, size_t n) {
    prefix[0] = 0;
    if (!A->hf_prefixes || !A->hf_prefixes[0]) return;
    snprintf(prefix, n, "%s", A->hf_prefixes[0]);
    for (int i = 0; A->hf_prefixes[i]; i++) {
        char nm[128];
        snprintf(nm, sizeof nm, "%s%s", A->hf_prefixes[i], A->hf_embed_name);
        if (st_dir_find(d, nm, NULL)) { snprintf(prefix, n, "%s", A->hf_prefixes[i]); return; }
    }
}

/* The map of a directory's config (the names' prefix chosen by what the files hold). */
static hpt_status map_config(const hf_config *hc, const st_dir *d, hf_map *mp, hpt_model_config *g) {
    memset(mp, 0, sizeof *mp);
    mp->hc = *hc;
    HPT_CHECK(hf_config_to_model(hc, g));
    mp->A = hpt_arch_of(g);
    model_describe(g, &mp->tab);
    if (!mp->A || !mp->A->hf_parts || mp->tab.n == 0)
        return st_fail(HPT_ERR_UNSUPPORTED, "%s: this build has no architecture that reads it",
                       hc->arch_name);
    if (d) pick_prefix(mp->A, d, mp->prefix, sizeof mp->prefix);
    return HPT_OK;
}

hpt_status io_hf_read_config(const char *dir, hpt_model_config *out) {
    hf_config hc;
    HPT_CHECK(hf_config_read(dir, &hc));
    return hf_config_to_model(&hc, out);
}

hpt_status hpt_model_load_hf(hpt_mem *mem, const char *dir, const hpt_offload_opts *off,
                             hpt_model **out) {
    *out = NULL;
    hf_config hc;
    HPT_CHECK(hf_config_read(dir, &hc));
    st_dir d;
    HPT_CHECK(st_dir_open(dir, &d));
    hf_map mp;
    hpt_model_config g;
    size_t tmax = 0;
    hpt_status s = map_config(&hc, &d, &mp, &g);
    if (s == HPT_OK) s = check_names(&mp, &d, dir, &tmax);
    hpt_model *m = NULL;
    if (s == HPT_OK) s = hpt_model_create_config_offload(mem, &g, off, &m);
    hf_reader r = {.mp = &mp, .d = &d, .mem = mem, .tcap = tmax};
    for (int i = 0; i < 2 && s == HPT_OK && tmax; i++) {
        hpt_mem_set_name(mem, "hf transpose staging");
        s = hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_IO, tmax * sizeof(float), (void **)&r.tb[i]);
    }
    if (s == HPT_OK) s = model_absorb(m, EB_P, model_params(m), read_stream, &r);
    if (s == HPT_OK && r.k != mp.tab.n)
        s = st_fail(HPT_ERR_INVALID, "%s: the model took fewer values than its table holds", dir);
    for (int i = 0; i < 2; i++)
        if (r.tb[i]) hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_IO, r.tb[i], tmax * sizeof(float));
    st_dir_close(&d);
    if (s != HPT_OK) {
        hpt_model_free(m);
        return hpt_fail_ctx(s, "loading %s", dir);
    }
    if (!model_engine(m)) hpt_model_zero_grad(m);
    *out = m;
    return HPT_OK;
}

/* io_llmc_stream's contract over a model directory (the inference engine's loader). */
hpt_status io_hf_stream(hpt_mem *mem, const char *dir, const hpt_model_config *cfg,
                        const size_t *row_width, size_t stage_bytes, io_llmc_rows_fn fn,
                        void *ctx) {
    hf_config hc;
    HPT_CHECK(hf_config_read(dir, &hc));
    st_dir d;
    HPT_CHECK(st_dir_open(dir, &d));
    hf_map mp;
    hpt_model_config g;
    size_t tmax = 0;
    hpt_status s = map_config(&hc, &d, &mp, &g);
    if (s == HPT_OK && (g.L != cfg->L || g.C != cfg->C || g.V != cfg->V || g.Vp != cfg->Vp ||
                        g.NH != cfg->NH || g.maxT != cfg->maxT || g.arch != cfg->arch))
        s = st_fail(HPT_ERR_SHAPE, "%s: config.json changed while loading", dir);
    if (s == HPT_OK) s = check_names(&mp, &d, dir, &tmax);
    hf_reader r = {.mp = &mp, .d = &d, .mem = mem, .tcap = tmax};
    float *stage = NULL;
    for (int i = 0; i < 2 && s == HPT_OK && tmax; i++) {
        hpt_mem_set_name(mem, "hf transpose staging");
        s = hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_IO, tmax * sizeof(float), (void **)&r.tb[i]);
    }
    if (s == HPT_OK) {
        hpt_mem_set_name(mem, "checkpoint staging");
        s = hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_IO, stage_bytes, (void **)&stage);
    }
    for (int k = 0; k < mp.tab.n && s == HPT_OK; k++) {
        size_t w = row_width[k], rows = hpt_tensor_numel(&mp.tab.t[k]) / w;
        size_t step = stage_bytes / (w * sizeof(float));
        for (size_t r0 = 0; r0 < rows && s == HPT_OK; r0 += step) {
            size_t n = HPT_MIN(step, rows - r0);
            s = read_stream(&r, stage, n * w);
            if (s == HPT_OK) fn(ctx, k, r0, stage, n);
        }
    }
    if (stage) hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_IO, stage, stage_bytes);
    for (int i = 0; i < 2; i++)
        if (r.tb[i]) hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_IO, r.tb[i], tmax * sizeof(float));
    st_dir_close(&d);
    return s;
}

/* ---- saving ---- */

typedef struct {
    const hf_map *mp;
    st_writer *w;
    int k, l;
    uint64_t e;
    float *tb[2];          /* a transposed part in hptrain's layout, then as stored */
} hf_saver;

/* model_emit_fn: the next n floats in checkpoint order, written as the files' tensors. */
static hpt_status emit_stream(void *ctx, const float *x, size_t n) {
    hf_saver *sv = ctx;
    while (n) {
        if (sv->k >= sv->mp->tab.n) return st_fail(HPT_ERR_INVALID, "checkpoint stream too long");
        uint64_t S = slice_numel(sv->mp, sv->k), m = HPT_MIN((uint64_t)n, S - sv->e);
        hf_part p[K_MAX_PARTS];
        int np = slice_parts(sv->mp, sv->k, sv->l, p);
        for (int i = 0; i < np; i++) {
            uint64_t lo = HPT_MAX(sv->e, p[i].off), hi = HPT_MIN(sv->e + m, p[i].off + p[i].numel);
            if (lo >= hi || !p[i].name[0]) continue; /* padding rows are not saved */
            const float *src = x + (lo - sv->e);
            if (!p[i].transpose) {
                HPT_CHECK(st_writer_put(sv->w, src, (size_t)(hi - lo)));
                continue;
            }
            memcpy(sv->tb[0] + (lo - p[i].off), src, (hi - lo) * sizeof(float));
            if (hi == p[i].off + p[i].numel) {
                transpose(sv->tb[1], sv->tb[0], p[i].R, p[i].W);
                HPT_CHECK(st_writer_put(sv->w, sv->tb[1], (size_t)p[i].numel));
            }
        }
        x += m;
        n -= (size_t)m;
        sv->e += m;
        if (sv->e == S) {
            sv->e = 0;
            if (!is_stacked(sv->mp, sv->k) || ++sv->l == sv->mp->tab.L) { sv->l = 0; sv->k++; }
        }
    }
    return HPT_OK;
}

/* Removes dir's entries and dir (one level: a model directory holds files only). */
static void remove_dir(const char *dir) {
    DIR *dp = opendir(dir);
    if (dp) {
        struct dirent *e;
        char p[4400];
        while ((e = readdir(dp)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
            }
        closedir(dp);
    }
    rmdir(dir);
}

static int is_weight_file(const char *n) {
    size_t k = strlen(n);
    return !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") ||
           (k > 12 && !strcmp(n + k - 12, ".safetensors"));
}

/* Copies file a to b (a model directory's tokenizer files: small). */
static hpt_status copy_file(const char *a, const char *b) {
    FILE *in = fopen(a, "rb"), *out = in ? fopen(b, "wb") : NULL;
    hpt_status s = in && out ? HPT_OK : st_fail(HPT_ERR_IO, "cannot copy %s to %s: %s", a, b,
                                                 strerror(errno));
    char buf[1 << 16];
    size_t n;
    while (s == HPT_OK && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) s = st_fail(HPT_ERR_IO, "cannot write %s: %s", b, strerror(errno));
    if (s == HPT_OK && in && ferror(in)) s = st_fail(HPT_ERR_IO, "cannot read %s", a);
    if (in) fclose(in);
    if (out && fclose(out) != 0 && s == HPT_OK) s = st_fail(HPT_ERR_IO, "cannot write %s", b);
    return s;
}

/* The files of dir other than the weights (tokenizer.json, state.bin, ...) into tmp: hard links
 * (the directory being replaced) or copies (another model's directory, copy 1); a name tmp
 * already holds is left as it is. */
static hpt_status keep_others(const char *dir, const char *tmp, int copy) {
    DIR *dp = opendir(dir);
    if (!dp) return HPT_OK;
    struct dirent *e;
    hpt_status s = HPT_OK;
    char a[4600], b[4600];
    while (s == HPT_OK && (e = readdir(dp))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || is_weight_file(e->d_name)) continue;
        snprintf(a, sizeof a, "%s/%s", dir, e->d_name);
        snprintf(b, sizeof b, "%s/%s", tmp, e->d_name);
        struct stat st;
        if (stat(b, &st) == 0) continue;
        if (stat(a, &st) != 0 || !S_ISREG(st.st_mode)) {
            if (copy) continue; /* another directory's subdirectories are not ours to take */
            s = st_fail(HPT_ERR_IO, "%s: holds %s, not a file: hptrain replaces only model "
                         "directories of files", dir, e->d_name);
        } else if (copy ? copy_file(a, b) != HPT_OK : link(a, b) != 0) {
            s = copy ? HPT_ERR_IO
                     : st_fail(HPT_ERR_IO, "cannot keep %s in the new %s: %s", a, dir, strerror(errno));
        }
    }
    closedir(dp);
    return s;
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) { (void)fsync(fd); close(fd); }
}

/* config.json and the weights into a fresh tmp directory. */
static hpt_status write_dir(hpt_model *m, const char *tmp, const hf_map *mp, int dtype,
                            uint64_t shard_bytes) {
    char p[4300];
    snprintf(p, sizeof p, "%s/config.json", tmp);
    HPT_CHECK(hf_config_write(p, &mp->hc, dtype == ST_BF16 ? "bfloat16" : "float32"));
    /* the files' tensors in checkpoint order: each slice's parts, padding left out */
    int cap = 0;
    for (int k = 0; k < mp->tab.n; k++) cap += (is_stacked(mp, k) ? mp->tab.L : 1) * K_MAX_PARTS;
    st_wtensor *wt = malloc((size_t)cap * sizeof *wt);
    char (*names)[112] = malloc((size_t)cap * sizeof *names);
    size_t tmax = 0;
    int n = 0;
    hpt_status s = wt && names ? HPT_OK : st_fail(HPT_ERR_OOM, "no memory to plan %s", tmp);
    for (int k = 0; k < mp->tab.n && s == HPT_OK; k++)
        for (int l = 0; l < (is_stacked(mp, k) ? mp->tab.L : 1); l++) {
            hf_part q[K_MAX_PARTS];
            int np = slice_parts(mp, k, l, q);
            if (np == 0)
                s = st_fail(HPT_ERR_UNSUPPORTED, "the model's tensor '%s' has no name in %s",
                             mp->tab.t[k].name, mp->hc.arch_name);
            for (int i = 0; i < np; i++) {
                if (!q[i].name[0]) continue;
                memcpy(names[n], q[i].name, sizeof names[n]);
                int64_t sh[2];
                part_shape(&q[i], sh);
                wt[n] = (st_wtensor){.name = names[n], .dtype = dtype, .ndim = q[i].ndim,
                                     .shape = {sh[0], sh[1]}};
                n++;
                if (q[i].transpose) tmax = HPT_MAX(tmax, (size_t)q[i].numel);
            }
        }
    hf_saver sv = {.mp = mp};
    float *tb = NULL;
    if (s == HPT_OK && tmax && !(tb = malloc(2 * tmax * sizeof(float))))
        s = st_fail(HPT_ERR_OOM, "no memory to transpose %zu floats", tmax);
    sv.tb[0] = tb;
    sv.tb[1] = tb ? tb + tmax : NULL;
    if (s == HPT_OK) s = st_writer_open(tmp, wt, n, shard_bytes, &sv.w);
    if (s == HPT_OK) s = model_emit(m, EB_P, model_params(m), emit_stream, &sv);
    if (s == HPT_OK) s = st_writer_close(sv.w);
    else if (sv.w) st_writer_abort(sv.w);
    free(tb);
    free(wt);
    free(names);
    return s;
}

/* bf16 when every tensor of dir's safetensors is bf16 (the headers only), else f32. */
hpt_status hpt_hf_weights_dtype(const char *dir, int *dtype_out) {
    st_dir d;
    HPT_CHECK(st_dir_open(dir, &d));
    int bf16 = d.n > 0;
    for (int i = 0; i < d.n; i++) bf16 &= d.ent[i].t->dtype == ST_BF16;
    st_dir_close(&d);
    *dtype_out = bf16 ? HPT_DTYPE_BF16 : HPT_DTYPE_F32;
    return HPT_OK;
}

hpt_status hpt_model_save_hf(const hpt_model *m, const char *dir, int dtype, uint64_t shard_bytes) {
    return hpt_model_save_hf_from(m, dir, dtype, shard_bytes, NULL);
}

hpt_status hpt_model_save_hf_from(const hpt_model *m, const char *dir, int dtype,
                                  uint64_t shard_bytes, const char *src) {
    if (dtype != HPT_DTYPE_F32 && dtype != HPT_DTYPE_BF16)
        return st_fail(HPT_ERR_INVALID, "saving %s: dtype must be f32 or bf16", dir);
    hpt_model *mm = (hpt_model *)(uintptr_t)m; /* model_emit gathers an offloaded model: no change */
    hf_map mp;
    memset(&mp, 0, sizeof mp);
    hf_config_from_model(hpt_model_get_config(m), &mp.hc);
    hf_config sc;
    if (src && hf_config_read(src, &sc) == HPT_OK && sc.arch == mp.hc.arch) {
        /* what the model does not carry: token ids, the architecture's name (Mistral) */
        mp.hc.bos = sc.bos;
        mp.hc.n_eos = sc.n_eos;
        memcpy(mp.hc.eos, sc.eos, sizeof sc.eos);
        memcpy(mp.hc.arch_name, sc.arch_name, sizeof sc.arch_name);
    }
    hpt_clear_error();
    mp.A = hpt_arch_of(hpt_model_get_config(m));
    if (!mp.A || !mp.A->hf_parts)
        return st_fail(HPT_ERR_UNSUPPORTED, "saving %s: a %s model has no Hugging Face form", dir,
                       hpt_model_arch(m));
    if (mp.A->hf_prefixes && mp.A->hf_prefixes[0])
        snprintf(mp.prefix, sizeof mp.prefix, "%s", mp.A->hf_prefixes[0]);
    mp.tab = *model_table(m);
    char tmp[4200], old[4200];
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    snprintf(tmp, sizeof tmp, "%.*s.tmp.%ld", (int)len, dir, (long)getpid());
    snprintf(old, sizeof old, "%.*s.old.%ld", (int)len, dir, (long)getpid());
    char target[4200];
    snprintf(target, sizeof target, "%.*s", (int)len, dir);
    remove_dir(tmp);
    if (mkdir(tmp, 0755) != 0) return st_fail(HPT_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    struct stat st;
    int exists = stat(target, &st) == 0;
    hpt_status s = exists && !S_ISDIR(st.st_mode)
                   ? st_fail(HPT_ERR_IO, "%s exists and is not a directory", target) : HPT_OK;
    if (s == HPT_OK) s = write_dir(mm, tmp, &mp, dtype == HPT_DTYPE_BF16 ? ST_BF16 : ST_F32,
                                   shard_bytes ? shard_bytes : K_SHARD_DEFAULT);
    if (s == HPT_OK && exists) s = keep_others(target, tmp, 0);
    if (s == HPT_OK && src && io_is_dir(src)) s = keep_others(src, tmp, 1);
    if (s == HPT_OK) sync_dir(tmp);
    if (s == HPT_OK && exists && rename(target, old) != 0)
        s = st_fail(HPT_ERR_IO, "cannot move %s aside: %s", target, strerror(errno));
    if (s == HPT_OK && rename(tmp, target) != 0) {
        s = st_fail(HPT_ERR_IO, "cannot rename %s to %s: %s", tmp, target, strerror(errno));
        if (exists) (void)rename(old, target);
    }
    if (s != HPT_OK) { remove_dir(tmp); return s; }
    if (exists) remove_dir(old);
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", target);
    char *slash = strrchr(parent, '/');
    if (slash) { *slash = 0; sync_dir(*parent ? parent : "/"); } else sync_dir(".");
    return HPT_OK;
}
