/* st_write.c: writes safetensors files (the writer of io/safetensors.h).
 *
 * The layout is fixed before the first value: tensors back to back in the order given, split
 * into shards where a tensor would pass the shard size (a shard holds at least one tensor), each
 * file's header JSON padded with spaces so its data starts at a multiple of 8 bytes, as the
 * format asks. Values then stream through st_writer_put in that order, converted to each
 * tensor's dtype in a small buffer, so nothing but one conversion buffer is ever held. The
 * writer writes into a directory the caller made (a temporary one: the model-directory writer
 * renames it into place), and syncs each file before closing it. */
#include "io/safetensors.h"

#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define K_CONV_FLOATS 16384   /* values converted per fwrite */

struct st_writer {
    char dir[4096];
    int n;
    st_wtensor *t;            /* (n), names borrowed */
    uint64_t *bytes;          /* (n) each tensor's bytes */
    uint64_t *begin;          /* (n) offset in its shard's data */
    int *shard;               /* (n) the shard it lies in */
    int n_shards;
    int cur, cur_shard;       /* the tensor being written, the open shard (-1: none) */
    uint64_t cur_e;           /* elements of tensor cur written */
    FILE *f;
    unsigned char *buf;       /* (K_CONV_FLOATS * 4) */
};

static void shard_name(const st_writer *w, int s, char *out, size_t cap) {
    if (w->n_shards == 1) snprintf(out, cap, "model.safetensors");
    else snprintf(out, cap, "model-%05d-of-%05d.safetensors", s + 1, w->n_shards);
}

static uint64_t numel_of(const st_wtensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (uint64_t)t->shape[d];
    return n;
}

/* JSON text of a string (the tensor names hptrain writes are plain, but escape anyway). */
static void put_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

/* Shard s's header JSON, malloc'd (*n its bytes), or NULL without memory. */
static char *shard_header(const st_writer *w, int s, size_t *n) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, n);
    if (!f) return NULL;
    fputs("{\"__metadata__\":{\"format\":\"pt\"}", f);
    for (int i = 0; i < w->n; i++) {
        if (w->shard[i] != s) continue;
        fputc(',', f);
        put_json_str(f, w->t[i].name);
        fprintf(f, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(w->t[i].dtype));
        for (int d = 0; d < w->t[i].ndim; d++)
            fprintf(f, "%s%lld", d ? "," : "", (long long)w->t[i].shape[d]);
        fprintf(f, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)w->begin[i],
                (unsigned long long)(w->begin[i] + w->bytes[i]));
    }
    fputc('}', f);
    if (ferror(f)) { fclose(f); free(buf); return NULL; }
    fclose(f);
    return buf;
}

static hpt_status open_shard(st_writer *w, int s) {
    char name[64], p[4200];
    shard_name(w, s, name, sizeof name);
    snprintf(p, sizeof p, "%s/%s", w->dir, name);
    size_t json = 0;
    char *text = shard_header(w, s, &json);
    if (!text) return st_fail(HPT_ERR_OOM, "no memory for the header of %s", p);
    uint64_t n = ((uint64_t)json + 8 + 7) / 8 * 8 - 8; /* data at a multiple of 8 */
    w->f = fopen(p, "wb");
    if (!w->f) { free(text); return st_fail(HPT_ERR_IO, "cannot create %s: %s", p, strerror(errno)); }
    w->cur_shard = s;
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
    fwrite(b, 1, 8, w->f);
    fwrite(text, 1, json, w->f);
    free(text);
    for (uint64_t i = (uint64_t)json; i < n; i++) fputc(' ', w->f);
    if (ferror(w->f)) return st_fail(HPT_ERR_IO, "cannot write %s: %s", p, strerror(errno));
    return HPT_OK;
}

static hpt_status close_shard(st_writer *w) {
    if (!w->f) return HPT_OK;
    int err = 0;
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) err = errno;
    if (fclose(w->f) != 0 && !err) err = errno;
    w->f = NULL;
    if (err) return st_fail(HPT_ERR_IO, "cannot write into %s: %s", w->dir, strerror(err));
    return HPT_OK;
}

hpt_status st_writer_open(const char *dir, const st_wtensor *t, int n, uint64_t shard_bytes,
                          st_writer **out) {
    *out = NULL;
    st_writer *w = calloc(1, sizeof *w);
    if (!w) return st_fail(HPT_ERR_OOM, "no memory for a safetensors writer");
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    w->n = n;
    w->cur_shard = -1;
    w->t = malloc((size_t)(n ? n : 1) * sizeof *w->t);
    w->bytes = malloc((size_t)(n ? n : 1) * sizeof *w->bytes);
    w->begin = malloc((size_t)(n ? n : 1) * sizeof *w->begin);
    w->shard = malloc((size_t)(n ? n : 1) * sizeof *w->shard);
    w->buf = malloc(K_CONV_FLOATS * 4);
    if (!w->t || !w->bytes || !w->begin || !w->shard || !w->buf) {
        st_writer_abort(w);
        return st_fail(HPT_ERR_OOM, "no memory for a safetensors writer");
    }
    uint64_t at = 0;
    int s = 0;
    for (int i = 0; i < n; i++) {
        w->t[i] = t[i];
        if ((t[i].dtype != ST_F32 && t[i].dtype != ST_BF16) || t[i].ndim > ST_MAX_DIMS) {
            st_writer_abort(w);
            return st_fail(HPT_ERR_INVALID, "tensor '%s': only F32 and BF16 are written", t[i].name);
        }
        w->bytes[i] = numel_of(&t[i]) * st_dtype_size(t[i].dtype);
        if (at > 0 && at + w->bytes[i] > shard_bytes) { s++; at = 0; }
        w->shard[i] = s;
        w->begin[i] = at;
        at += w->bytes[i];
    }
    w->n_shards = s + 1;
    *out = w;
    return HPT_OK;
}

/* Moves to the next tensor with values to write, opening its shard. */
static hpt_status advance(st_writer *w) {
    while (w->cur < w->n && w->cur_e == numel_of(&w->t[w->cur])) { w->cur++; w->cur_e = 0; }
    if (w->cur < w->n && w->shard[w->cur] != w->cur_shard) {
        HPT_CHECK(close_shard(w));
        HPT_CHECK(open_shard(w, w->shard[w->cur]));
    }
    return HPT_OK;
}

hpt_status st_writer_put(st_writer *w, const float *x, size_t n) {
    while (n) {
        HPT_CHECK(advance(w));
        if (w->cur == w->n)
            return st_fail(HPT_ERR_INVALID, "%s: %zu values more than the tensors hold", w->dir, n);
        const st_wtensor *t = &w->t[w->cur];
        uint64_t room = numel_of(t) - w->cur_e;
        size_t k = (size_t)HPT_MIN((uint64_t)HPT_MIN(n, (size_t)K_CONV_FLOATS), room);
        size_t bytes;
        if (t->dtype == ST_F32) {
            memcpy(w->buf, x, k * 4);
            bytes = k * 4;
        } else {
            for (size_t i = 0; i < k; i++) {
                uint16_t b = st_f32_to_bf16(x[i]);
                w->buf[2 * i] = (unsigned char)b;
                w->buf[2 * i + 1] = (unsigned char)(b >> 8);
            }
            bytes = k * 2;
        }
        if (fwrite(w->buf, 1, bytes, w->f) != bytes)
            return st_fail(HPT_ERR_IO, "cannot write into %s: %s", w->dir, strerror(errno));
        w->cur_e += k;
        x += k;
        n -= k;
    }
    return HPT_OK;
}

static hpt_status write_index(const st_writer *w) {
    char p[4200], name[64];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", w->dir);
    FILE *f = fopen(p, "wb");
    if (!f) return st_fail(HPT_ERR_IO, "cannot create %s: %s", p, strerror(errno));
    uint64_t total = 0;
    for (int i = 0; i < w->n; i++) total += w->bytes[i];
    fprintf(f, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {",
            (unsigned long long)total);
    for (int i = 0; i < w->n; i++) {
        shard_name(w, w->shard[i], name, sizeof name);
        fputs(i ? ",\n    " : "\n    ", f);
        put_json_str(f, w->t[i].name);
        fprintf(f, ": \"%s\"", name);
    }
    fputs("\n  }\n}\n", f);
    int err = 0;
    if (ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0) err = errno ? errno : EIO;
    if (fclose(f) != 0 && !err) err = errno;
    if (err) return st_fail(HPT_ERR_IO, "cannot write %s: %s", p, strerror(err));
    return HPT_OK;
}

hpt_status st_writer_close(st_writer *w) {
    hpt_status s = advance(w);
    if (s == HPT_OK && w->cur != w->n)
        s = st_fail(HPT_ERR_INVALID, "%s: tensor '%s' got %llu of its values", w->dir,
                     w->t[w->cur].name, (unsigned long long)w->cur_e);
    /* shards of zero-sized tensors only were never opened by a value: a header alone */
    while (s == HPT_OK && w->cur_shard < w->n_shards - 1) {
        s = close_shard(w);
        if (s == HPT_OK) s = open_shard(w, w->cur_shard + 1);
    }
    if (s == HPT_OK) s = close_shard(w);
    if (s == HPT_OK && w->n_shards > 1) s = write_index(w);
    if (s != HPT_OK) { st_writer_abort(w); return s; }
    free(w->t); free(w->bytes); free(w->begin); free(w->shard); free(w->buf);
    free(w);
    return HPT_OK;
}

void st_writer_abort(st_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    w->f = NULL;
    char name[64], p[4200];
    for (int s = 0; w->shard && s < w->n_shards; s++) {
        shard_name(w, s, name, sizeof name);
        snprintf(p, sizeof p, "%s/%s", w->dir, name);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", w->dir);
    unlink(p);
    free(w->t); free(w->bytes); free(w->begin); free(w->shard); free(w->buf);
    free(w);
}
