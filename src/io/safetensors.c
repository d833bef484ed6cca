/* safetensors.c: Hugging Face's safetensors files, read strictly from the format's
 * specification and written; docs/formats.md has every rule a file must pass, with its error.
 * Reading parses the header once, then reads with pread into the caller's buffer, one window per
 * call (a tensor or a row range of it), never the whole file. Writing pads the header's JSON
 * with spaces so the data starts at a multiple of 8, lays tensors out back to back in the order
 * given, converts values as they arrive (st_writer_put), and splits large models into shards
 * with model.safetensors.index.json, named as Hugging Face names them.
 * Invariants: a header that passes gives every tensor's bytes inside the file, tiling the data
 * exactly, so reads never pass its end unless the file changes underneath ("truncated"). */
#include "io/safetensors.h"

#include "core/core.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *name; size_t size; } k_dtypes[ST_DTYPE_COUNT] = {
    {"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F64", 8}, {"I64", 8}, {"I32", 4}, {"I16", 2},
    {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"U16", 2}, {"U32", 4}, {"U64", 8},
    {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

const char *st_dtype_name(int dt) {
    return dt >= 0 && dt < ST_DTYPE_COUNT ? k_dtypes[dt].name : "?";
}
size_t st_dtype_size(int dt) { return dt >= 0 && dt < ST_DTYPE_COUNT ? k_dtypes[dt].size : 0; }

hpt_status st_fail(hpt_status s, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return hpt_fail(s, "%s", buf);
}

/* ---- conversions ---- */

float st_bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);          /* inf, NaN (payload kept) */
    } else if (exp != 0) {
        bits = sign | ((exp + 112) << 23) | (man << 13);   /* normal: rebias 15 -> 127 */
    } else if (man == 0) {
        bits = sign;                                       /* signed zero */
    } else {                                               /* subnormal: man * 2^-24, exact */
        float f = (float)man * 0x1p-24f;
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t st_f32_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((bits >> 16) | 0x40); /* quiet NaN */
    bits += 0x7fffu + ((bits >> 16) & 1);                  /* round to nearest, ties to even */
    return (uint16_t)(bits >> 16);
}

/* ---- the header ---- */

void st_header_free(st_header *h) {
    if (!h) return;
    for (int i = 0; i < h->n; i++) free(h->t[i].name);
    free(h->t);
    memset(h, 0, sizeof *h);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

const st_tensor *st_find(const st_header *h, const char *name) {
    st_tensor key = {.name = (char *)(uintptr_t)name};
    return h->n ? bsearch(&key, h->t, (size_t)h->n, sizeof key, cmp_name) : NULL;
}

/* A JSON number that is an integer in [0, 2^53] (exact in a double). */
static int json_u53(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= 9007199254740992.0) || d != floor(d)) return 0;
    *out = (uint64_t)d;
    return 1;
}

/* One tensor's entry; what names the file. */
static hpt_status parse_tensor(const cJSON *e, const char *what, st_tensor *t) {
    const char *nm = e->string;
    if (!cJSON_IsObject(e))
        return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': its entry is not an object", what, nm);
    const cJSON *dt = NULL, *shape = NULL, *offs = NULL;
    for (const cJSON *k = e->child; k; k = k->next) {
        const cJSON **slot = !strcmp(k->string, "dtype") ? &dt
                           : !strcmp(k->string, "shape") ? &shape
                           : !strcmp(k->string, "data_offsets") ? &offs : NULL;
        if (!slot)
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': unknown key '%s'", what, nm, k->string);
        if (*slot)
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': key '%s' appears twice", what, nm,
                            k->string);
        *slot = k;
    }
    if (!dt || !shape || !offs)
        return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': missing %s", what, nm,
                        !dt ? "dtype" : !shape ? "shape" : "data_offsets");
    if (!cJSON_IsString(dt))
        return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': dtype is not a string", what, nm);
    t->dtype = -1;
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (!strcmp(dt->valuestring, k_dtypes[i].name)) t->dtype = i;
    if (t->dtype < 0)
        return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': unknown dtype '%.32s'", what, nm,
                        dt->valuestring);
    if (!cJSON_IsArray(shape))
        return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': shape is not an array", what, nm);
    t->ndim = 0;
    t->numel = 1;
    for (const cJSON *d = shape->child; d; d = d->next) {
        uint64_t v;
        if (t->ndim == ST_MAX_DIMS)
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': more than %d dimensions", what, nm,
                            ST_MAX_DIMS);
        if (!json_u53(d, &v))
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': shape entry %d is not a "
                            "non-negative integer", what, nm, t->ndim);
        if (v && t->numel > (1ull << 53) / v)
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': shape too large", what, nm);
        t->numel *= v;
        t->shape[t->ndim++] = (int64_t)v;
    }
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
        !json_u53(offs->child, &t->begin) || !json_u53(offs->child->next, &t->end))
        return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': data_offsets is not [begin, end] "
                        "(non-negative integers)", what, nm);
    if (t->end < t->begin)
        return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': data_offsets end %llu before begin %llu",
                        what, nm, (unsigned long long)t->end, (unsigned long long)t->begin);
    uint64_t want = t->numel * k_dtypes[t->dtype].size;
    if (t->end - t->begin != want)
        return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': %llu bytes in data_offsets, but dtype %s "
                        "and shape (%llu elements) need %llu", what, nm,
                        (unsigned long long)(t->end - t->begin), k_dtypes[t->dtype].name,
                        (unsigned long long)t->numel, (unsigned long long)want);
    return HPT_OK;
}

static hpt_status parse_metadata(const cJSON *e, const char *what) {
    if (!cJSON_IsObject(e))
        return st_fail(HPT_ERR_FORMAT, "%s: __metadata__ is not an object", what);
    for (const cJSON *k = e->child; k; k = k->next)
        if (!cJSON_IsString(k))
            return st_fail(HPT_ERR_FORMAT, "%s: __metadata__ entry '%s' is not a string", what,
                            k->string);
    return HPT_OK;
}

/* Sorted by offset, the tensors tile [0, data_bytes) exactly. */
static hpt_status check_coverage(const st_header *h, const char *what) {
    if (h->n == 0) {
        if (h->data_bytes)
            return st_fail(HPT_ERR_FORMAT, "%s: %llu data bytes but no tensors", what,
                            (unsigned long long)h->data_bytes);
        return HPT_OK;
    }
    const st_tensor **by = malloc((size_t)h->n * sizeof *by);
    if (!by) return st_fail(HPT_ERR_OOM, "%s: no memory for %d tensors", what, h->n);
    for (int i = 0; i < h->n; i++) by[i] = &h->t[i];
    qsort(by, (size_t)h->n, sizeof *by, cmp_offset);
    hpt_status s = HPT_OK;
    uint64_t at = 0;
    for (int i = 0; i < h->n && s == HPT_OK; i++) {
        const st_tensor *t = by[i];
        if (t->end > h->data_bytes)
            s = st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] outside the "
                         "%llu data bytes (truncated?)", what, t->name, (unsigned long long)t->begin,
                         (unsigned long long)t->end, (unsigned long long)h->data_bytes);
        else if (t->begin < at)
            s = st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] overlap '%s'",
                         what, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                         by[i - 1]->name);
        else if (t->begin > at)
            s = st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': hole of %llu bytes before it (data "
                         "bytes [%llu, %llu) belong to no tensor)", what, t->name,
                         (unsigned long long)(t->begin - at), (unsigned long long)at,
                         (unsigned long long)t->begin);
        at = t->end;
    }
    if (s == HPT_OK && at != h->data_bytes)
        s = st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': the last tensor ends at %llu, but the data "
                     "has %llu bytes (trailing bytes belong to no tensor)", what, by[h->n - 1]->name,
                     (unsigned long long)at, (unsigned long long)h->data_bytes);
    free(by);
    return s;
}

/* Offset of the first byte of p[0, n) that is not UTF-8 (overlong forms, surrogates and code
 * points past U+10FFFF included) or is a control character JSON never holds raw (below 0x20
 * other than tab, newline, carriage return); n if none. */
static size_t bad_utf8(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        if (c < 0x80) {
            if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') return i;
            i++;
            continue;
        }
        size_t k = c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2 : c >= 0xf0 && c <= 0xf4 ? 3 : 0;
        if (k == 0 || n - i <= k) return i; /* not a lead byte, or cut by the end */
        unsigned c1 = p[i + 1];
        unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
        unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
        if (c1 < lo || c1 > hi) return i;
        for (size_t j = 2; j <= k; j++)
            if ((p[i + j] & 0xc0) != 0x80) return i;
        i += k + 1;
    }
    return n;
}

hpt_status st_parse_json(const char *json, size_t n, uint64_t file_bytes, const char *what,
                         st_header *out) {
    memset(out, 0, sizeof *out);
    if (n < 2 || json[0] != '{')
        return st_fail(HPT_ERR_FORMAT, "%s: the header does not begin with '{'", what);
    if (file_bytes < 8 || n > file_bytes - 8)
        return st_fail(HPT_ERR_FORMAT, "%s: header size %zu passes the end of the file", what, n);
    size_t bad = bad_utf8((const unsigned char *)json, n);
    if (bad != n)
        return st_fail(HPT_ERR_FORMAT, "%s: the header is not UTF-8 JSON text (byte %zu: 0x%02x)",
                        what, bad, (unsigned char)json[bad]);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, n, &end, 0);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return st_fail(HPT_ERR_FORMAT, "%s: the header is not valid JSON (near byte %lld of %zu)",
                        what, (long long)(cJSON_GetErrorPtr() && cJSON_GetErrorPtr() >= json &&
                                          cJSON_GetErrorPtr() <= json + n
                                          ? cJSON_GetErrorPtr() - json : -1), n);
    }
    for (const char *p = end; p && p < json + n; p++)
        if (*p != ' ') {
            cJSON_Delete(root);
            return st_fail(HPT_ERR_FORMAT, "%s: the header has bytes after its JSON object "
                            "(byte %lld: only spaces may pad it)", what, (long long)(p - json));
        }
    int count = 0;
    for (const cJSON *e = root->child; e; e = e->next) count++;
    out->data_start = 8 + (uint64_t)n;
    out->data_bytes = file_bytes - out->data_start;
    out->t = calloc((size_t)(count ? count : 1), sizeof *out->t);
    hpt_status s = out->t ? HPT_OK : st_fail(HPT_ERR_OOM, "%s: no memory for the header", what);
    int n_meta = 0;
    for (const cJSON *e = root->child; e && s == HPT_OK; e = e->next) {
        if (!strcmp(e->string, "__metadata__")) {
            if (n_meta++) s = st_fail(HPT_ERR_FORMAT, "%s: __metadata__ appears twice", what);
            else s = parse_metadata(e, what);
            continue;
        }
        size_t len = strlen(e->string);
        if (len == 0) { s = st_fail(HPT_ERR_FORMAT, "%s: a tensor has an empty name", what); break; }
        st_tensor *t = &out->t[out->n];
        t->name = malloc(len + 1);
        if (!t->name) { s = st_fail(HPT_ERR_OOM, "%s: no memory for the header", what); break; }
        memcpy(t->name, e->string, len + 1);
        out->n++;
        s = parse_tensor(e, what, t);
    }
    cJSON_Delete(root);
    if (s == HPT_OK && out->n > 1) {
        qsort(out->t, (size_t)out->n, sizeof *out->t, cmp_name);
        for (int i = 1; i < out->n && s == HPT_OK; i++)
            if (!strcmp(out->t[i - 1].name, out->t[i].name))
                s = st_fail(HPT_ERR_FORMAT, "%s: tensor '%s' appears twice", what, out->t[i].name);
    }
    if (s == HPT_OK) s = check_coverage(out, what);
    if (s != HPT_OK) st_header_free(out);
    return s;
}

/* The 8-byte size and its bounds: N >= 2 ("{}"), N <= ST_MAX_HEADER_BYTES, 8 + N <= file. */
static hpt_status check_size(const unsigned char b[8], uint64_t file_bytes, const char *what,
                             uint64_t *n_out) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    if (n < 2 || n > ST_MAX_HEADER_BYTES)
        return st_fail(HPT_ERR_FORMAT, "%s: header size %llu is outside [2, %llu] (not a "
                        "safetensors file?)", what, (unsigned long long)n, ST_MAX_HEADER_BYTES);
    if (n > file_bytes - 8)
        return st_fail(HPT_ERR_FORMAT, "%s: header size %llu passes the end of the file (%llu "
                        "bytes): truncated", what, (unsigned long long)n,
                        (unsigned long long)file_bytes);
    *n_out = n;
    return HPT_OK;
}

hpt_status st_parse_buffer(const void *buf, size_t len, const char *what, st_header *out) {
    memset(out, 0, sizeof *out);
    if (len < 8)
        return st_fail(HPT_ERR_FORMAT, "%s: %zu bytes, shorter than the 8-byte header size",
                        what, len);
    uint64_t n = 0;
    HPT_CHECK(check_size(buf, len, what, &n));
    return st_parse_json((const char *)buf + 8, (size_t)n, len, what, out);
}

/* ---- files ---- */

/* Exactly bytes at off, or "truncated" (the header promised them). */
static hpt_status pread_exact(int fd, void *dst, size_t bytes, uint64_t off, const char *path,
                              const char *what) {
    unsigned char *p = dst;
    while (bytes) {
        ssize_t got = pread(fd, p, bytes, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return st_fail(HPT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        if (got == 0)
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': truncated (file shorter than its "
                            "header says)", path, what);
        p += got;
        off += (uint64_t)got;
        bytes -= (size_t)got;
    }
    return HPT_OK;
}

hpt_status st_open(const char *path, st_file *out) {
    memset(out, 0, sizeof *out);
    out->fd = -1;
    if (strlen(path) >= sizeof out->path)
        return st_fail(HPT_ERR_INVALID, "path too long: %.200s...", path);
    snprintf(out->path, sizeof out->path, "%s", path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return st_fail(HPT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return st_fail(HPT_ERR_IO, "%s is not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size, n = 0;
    unsigned char b[8];
    hpt_status s = size < 8 ? st_fail(HPT_ERR_FORMAT, "%s: %llu bytes, shorter than the 8-byte "
                                       "header size", path, (unsigned long long)size)
                            : pread_exact(fd, b, 8, 0, path, "(header size)");
    if (s == HPT_OK) s = check_size(b, size, path, &n);
    char *json = NULL;
    if (s == HPT_OK && !(json = malloc((size_t)n)))
        s = st_fail(HPT_ERR_OOM, "%s: no memory for a %llu-byte header", path,
                     (unsigned long long)n);
    if (s == HPT_OK) s = pread_exact(fd, json, (size_t)n, 8, path, "(header)");
    if (s == HPT_OK) s = st_parse_json(json, (size_t)n, size, path, &out->h);
    free(json);
    if (s != HPT_OK) { close(fd); return s; }
    out->fd = fd;
    return HPT_OK;
}

void st_close(st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    st_header_free(&f->h);
}

hpt_status st_read_f32(const st_file *f, const st_tensor *t, uint64_t e0, size_t n, float *dst) {
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return st_fail(HPT_ERR_UNSUPPORTED, "%s: tensor '%s': unsupported dtype %s (F32, BF16 "
                        "and F16 are read)", f->path, t->name, k_dtypes[t->dtype].name);
    if (e0 > t->numel || n > t->numel - e0)
        return st_fail(HPT_ERR_INVALID, "%s: tensor '%s': elements [%llu, %llu) outside its %llu",
                        f->path, t->name, (unsigned long long)e0,
                        (unsigned long long)(e0 + n), (unsigned long long)t->numel);
    size_t es = k_dtypes[t->dtype].size;
    uint64_t off = f->h.data_start + t->begin + e0 * es;
    if (es == 4) return pread_exact(f->fd, dst, n * 4, off, f->path, t->name);
    /* 16-bit values read into dst's upper half; dst[i] is written after value i is read and
     * before any value j > i is overwritten (value j sits at byte 2n + 2j > 4i + 3) */
    uint16_t *half = (uint16_t *)dst + n;
    HPT_CHECK(pread_exact(f->fd, half, n * 2, off, f->path, t->name));
    if (t->dtype == ST_BF16)
        for (size_t i = 0; i < n; i++) dst[i] = st_bf16_to_f32(half[i]);
    else
        for (size_t i = 0; i < n; i++) dst[i] = st_f16_to_f32(half[i]);
    return HPT_OK;
}

/* ---- model directories ---- */

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const struct st_entry *)a)->t->name, ((const struct st_entry *)b)->t->name);
}

void st_dir_close(st_dir *d) {
    if (!d) return;
    for (int i = 0; i < d->n_files; i++) st_close(&d->files[i]);
    free(d->files);
    free(d->ent);
    memset(d, 0, sizeof *d);
}

const st_tensor *st_dir_find(const st_dir *d, const char *name, const st_file **file) {
    st_tensor key = {.name = (char *)(uintptr_t)name};
    struct st_entry k = {&key, 0};
    const struct st_entry *e = d->n ? bsearch(&k, d->ent, (size_t)d->n, sizeof k, cmp_entry) : NULL;
    if (!e) return NULL;
    if (file) *file = &d->files[e->file];
    return e->t;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The shard file names of an index's weight_map (sorted, unique; borrowed from root). */
static hpt_status index_files(const cJSON *map, const char *path, const char ***names, int *n) {
    int count = cJSON_GetArraySize(map), k = 0;
    const char **v = malloc((size_t)(count ? count : 1) * sizeof *v);
    if (!v) return st_fail(HPT_ERR_OOM, "%s: no memory for the weight map", path);
    for (const cJSON *e = map->child; e; e = e->next) {
        const char *f = cJSON_IsString(e) ? e->valuestring : NULL;
        if (!f || !*f || strchr(f, '/') || !strcmp(f, ".") || !strcmp(f, "..")) {
            free(v);
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': weight_map entry is not a file name "
                            "in the directory", path, e->string);
        }
        v[k++] = f;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_str);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (!u || strcmp(v[u - 1], v[i])) v[u++] = v[i];
    *names = v;
    *n = u;
    return HPT_OK;
}

static hpt_status read_small(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return st_fail(HPT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    hpt_status s = b ? HPT_OK : st_fail(HPT_ERR_OOM, "no memory to read %s", path);
    while (s == HPT_OK) {
        if (n == cap) {
            char *nb = cap >= (64u << 20) ? NULL : realloc(b, cap * 2);
            if (!nb) { s = st_fail(HPT_ERR_FORMAT, "%s: larger than 64 MB", path); break; }
            b = nb;
            cap *= 2;
        }
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) s = st_fail(HPT_ERR_IO, "cannot read %s", path);
            break;
        }
    }
    fclose(f);
    if (s != HPT_OK) { free(b); return s; }
    *out = b;
    *len = n;
    return HPT_OK;
}

/* Every shard's tensors are in the weight map under that shard, and the other way round. */
static hpt_status index_agrees(const st_dir *d, const cJSON *map, const char *path) {
    int mapped = 0;
    for (const cJSON *e = map->child; e; e = e->next) {
        mapped++;
        const st_file *f;
        if (!st_dir_find(d, e->string, &f))
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': in the weight map, but not in %s",
                            path, e->string, e->valuestring);
        const char *base = strrchr(f->path, '/');
        if (strcmp(base ? base + 1 : f->path, e->valuestring))
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': the weight map names %s, but it is "
                            "in %s", path, e->string, e->valuestring, f->path);
    }
    if (mapped > d->n)
        return st_fail(HPT_ERR_FORMAT, "%s: the weight map names a tensor twice", path);
    if (mapped != d->n)
        for (int i = 0; i < d->n; i++)
            if (!cJSON_GetObjectItemCaseSensitive(map, d->ent[i].t->name))
                return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': not in the weight map of %s",
                                d->files[d->ent[i].file].path, d->ent[i].t->name, path);
    return HPT_OK;
}

/* Opens the shard files and indexes all their tensors by name (duplicates across files refused). */
static hpt_status dir_open_files(st_dir *d, const char *dir, const char **names, int n) {
    d->files = calloc((size_t)n, sizeof *d->files);
    if (!d->files) return st_fail(HPT_ERR_OOM, "%s: no memory", dir);
    for (int i = 0; i < n; i++) d->files[i].fd = -1;
    int total = 0;
    for (int i = 0; i < n; i++) {
        char p[4096];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, names[i]) >= sizeof p)
            return st_fail(HPT_ERR_INVALID, "path too long: %s/%s", dir, names[i]);
        HPT_CHECK(st_open(p, &d->files[i]));
        d->n_files = i + 1;
        total += d->files[i].h.n;
    }
    d->ent = malloc((size_t)(total ? total : 1) * sizeof *d->ent);
    if (!d->ent) return st_fail(HPT_ERR_OOM, "%s: no memory", dir);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < d->files[i].h.n; k++)
            d->ent[d->n++] = (struct st_entry){&d->files[i].h.t[k], i};
    qsort(d->ent, (size_t)d->n, sizeof *d->ent, cmp_entry);
    for (int i = 1; i < d->n; i++)
        if (!strcmp(d->ent[i - 1].t->name, d->ent[i].t->name))
            return st_fail(HPT_ERR_FORMAT, "%s: tensor '%s': in two files (%s and %s)", dir,
                            d->ent[i].t->name, d->files[d->ent[i - 1].file].path,
                            d->files[d->ent[i].file].path);
    return HPT_OK;
}

hpt_status st_dir_open(const char *dir, st_dir *out) {
    memset(out, 0, sizeof *out);
    char p[4096];
    if ((size_t)snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir) >= sizeof p)
        return st_fail(HPT_ERR_INVALID, "path too long: %s", dir);
    struct stat st;
    if (stat(p, &st) != 0) {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        if (stat(p, &st) != 0)
            return st_fail(HPT_ERR_IO, "%s: neither model.safetensors nor "
                            "model.safetensors.index.json", dir);
        const char *one = "model.safetensors";
        hpt_status s = dir_open_files(out, dir, &one, 1);
        if (s != HPT_OK) st_dir_close(out);
        return s;
    }
    char *text = NULL;
    size_t len = 0;
    HPT_CHECK(read_small(p, &text, &len));
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    const cJSON *meta = root ? cJSON_GetObjectItemCaseSensitive(root, "metadata") : NULL;
    hpt_status s = HPT_OK;
    if (!root || !cJSON_IsObject(root))
        s = st_fail(HPT_ERR_FORMAT, "%s: not valid JSON", p);
    else if (!cJSON_IsObject(map))
        s = st_fail(HPT_ERR_FORMAT, "%s: no weight_map object", p);
    else if (meta && !cJSON_IsObject(meta))
        s = st_fail(HPT_ERR_FORMAT, "%s: metadata is not an object", p);
    const char **names = NULL;
    int n = 0;
    if (s == HPT_OK) s = index_files(map, p, &names, &n);
    if (s == HPT_OK && n == 0) s = st_fail(HPT_ERR_FORMAT, "%s: the weight map is empty", p);
    if (s == HPT_OK) s = dir_open_files(out, dir, names, n);
    if (s == HPT_OK) s = index_agrees(out, map, p);
    free(names);
    cJSON_Delete(root);
    if (s != HPT_OK) st_dir_close(out);
    return s;
}
