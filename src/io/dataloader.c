/* dataloader.c: batches from llm.c token shards.
 * Shards matching a glob are sorted by name and validated at open (magic, version, size):
 * uint16 shards (magic 20240520, version 1) and uint32 ones (20240801, version 7, for
 * vocabularies above 65,536), which may mix, and their masked versions 2 and 8 (a target flag
 * per token and the examples' starts, checked at open; docs/formats.md). A uint32 window is
 * read straight into the targets buffer (its tokens 1..B*T) and the inputs are those shifted by
 * one; a window's target flags go to the buffer the width leaves free (uint16: inputs, uint32:
 * raw), so the loader's buffers are the same bytes for every version (the estimator's
 * loader_bytes). A target whose flag is 0 is -1 (ignored by the loss, docs/targets.md).
 * A batch is the window of B*T+1 tokens at (shard, offset): inputs are its first B*T tokens,
 * targets the same shifted by one. The offset then advances by B*T; a shard whose rest is
 * shorter than a window is left for the next one, and after the last shard the walk wraps to
 * the first. The position (shard, offset) is all the state, so resume is exact.
 * Examples (hpt_dataloader_set_pack, docs/packing.md; masked shards, whose example starts say
 * where each example begins): HPT_PACK_ON fills each row with whole examples in order while
 * the next fits (an example longer than T alone, truncated to T), the rest padding; each
 * token's position in its example (hpt_dataloader_positions) gives the model its positions and
 * attention masks. HPT_PACK_OFF puts one example per row (truncated to T), the rest padding.
 * Padding: input token 0, target -1 (not a target); an example's last token has no target (its
 * next token is another example's). A row never spans two shards. The offset is then always
 * an example's first token.
 * hpt_dataloader_order (docs/data.md) turns the walk into rows indexed by (epoch, position):
 * the set's rows (its documents', a --val-split keeping one set) read in a seeded permutation
 * per epoch, or in order; the position is then (-1 - epoch, row index in the epoch's order). */
#include "core/core.h"
#include "io/io_int.h"

#include <glob.h>
#include <stdlib.h>
#include <string.h>

#define SHARD_MAGIC 20240520
#define SHARD_MAGIC_U32 20240801

struct hpt_dataloader {
    hpt_mem *mem;
    int B, T, V;
    size_t n_shards;
    char **paths;
    uint64_t *counts;   /* tokens in each shard */
    unsigned char *width; /* bytes per token of each shard: 2 or 4 */
    unsigned char *masked; /* 1: the shard carries target flags (versions 2 and 8) */
    uint64_t *n_ex;     /* examples in each shard (masked shards) */
    int pack;           /* hpt_pack_mode */
    int32_t *pos;       /* (B, T) packed: each token's position in its example; device io */
    int64_t real;       /* tokens of the last batch that are not padding */
    uint32_t *starts;   /* the example starts of shard starts_shard (host, malloc'd) */
    int64_t starts_shard;
    uint32_t *row_tok;  /* (T + 1) a row's tokens and flags as read (host, malloc'd) */
    uint8_t *row_flag;
    int *row_len;       /* (T) the examples of a row being filled */
    size_t pack_batches;
    size_t total;
    int64_t shard, offset;
    uint16_t *raw;      /* (B*T+1) */
    int32_t *inputs;    /* (B, T) */
    int32_t *targets;   /* (B, T) */
    /* the indexed walk (hpt_dataloader_order): 0 off, else rows of a set in a seeded order */
    int indexed, shuffle;
    uint64_t seed;
    int64_t epoch;
    uint64_t at;        /* the next row's index in the epoch's order */
    uint64_t n_rows;    /* the set's rows: stream, T+1-token windows at stride T; packed rows */
    struct ix_piece *pieces; /* stream: the set's tokens, runs of a shard, end to end */
    size_t n_pieces;
    uint64_t set_tokens;
    uint64_t *row_start; /* (n_rows) pack: each row's first token, shard << 32 | offset */
    uint8_t *ex_in;     /* (examples of all shards) pack with a split: 1 for the set's; else NULL */
    uint64_t *ex_base;  /* (n_shards) the index of each shard's first example among all */
    hpt_data_split split;
};

static void ix_clear(hpt_dataloader *d);

void hpt_dataloader_free(hpt_dataloader *d) {
    if (!d) return;
    size_t BT = (size_t)d->B * d->T;
    hpt_mem_free(d->mem, HPT_TIER_DEVICE, HPT_CAT_IO, d->raw, (BT + 1) * 2);
    hpt_mem_free(d->mem, HPT_TIER_DEVICE, HPT_CAT_IO, d->inputs, BT * 4);
    hpt_mem_free(d->mem, HPT_TIER_DEVICE, HPT_CAT_IO, d->targets, BT * 4);
    if (d->pos) hpt_mem_free(d->mem, HPT_TIER_DEVICE, HPT_CAT_IO, d->pos, BT * 4);
    free(d->n_ex);
    free(d->starts);
    free(d->row_tok);
    free(d->row_flag);
    free(d->row_len);
    ix_clear(d);
    for (size_t i = 0; i < d->n_shards; i++) free(d->paths[i]);
    free(d->paths);
    free(d->counts);
    free(d->width);
    free(d->masked);
    free(d);
}

/* The examples' starts (n_ex uint32 at the file's position): 0 first, increasing, below n. */
static hpt_status check_starts(FILE *f, const char *path, uint64_t n, uint64_t n_ex,
                               uint32_t *all) {
    uint32_t buf[1024], prev = 0;
    for (uint64_t e0 = 0; e0 < n_ex; e0 += 1024) {
        size_t k = (size_t)(n_ex - e0 < 1024 ? n_ex - e0 : 1024);
        uint32_t *p = all ? all + e0 : buf;
        HPT_CHECK(io_read_exact(f, p, k * 4, path, "example starts"));
        for (size_t i = 0; i < k; i++) {
            uint64_t e = e0 + i;
            if ((e == 0 && p[i] != 0) || (e > 0 && p[i] <= prev) || p[i] >= n)
                return hpt_fail(HPT_ERR_FORMAT, "%s: example %llu starts at token %u (starts begin "
                                "at 0, increase and lie below the %llu tokens): corrupt", path,
                                (unsigned long long)e, p[i], (unsigned long long)n);
            prev = p[i];
        }
    }
    return HPT_OK;
}

/* Magic, version, size; a masked shard's example starts. f is left after the header. */
static hpt_status check_header(FILE *f, uint64_t size, const char *path, uint64_t *count,
                               unsigned char *width, unsigned char *masked, uint64_t *n_ex) {
    int32_t h[256];
    HPT_CHECK(io_read_header(f, h, path));
    if (h[0] == 20240328) /* llm.c's tokenizer file, which `tokenize` writes beside the shards */
        return hpt_fail(HPT_ERR_FORMAT, "%s is a tokenizer file, not a token shard: match the "
                        "shards only (e.g. 'DIR/train_*.bin')", path);
    if (h[0] != SHARD_MAGIC && h[0] != SHARD_MAGIC_U32)
        return hpt_fail(HPT_ERR_FORMAT, "%s is not a token shard (magic %d, expected %d or %d)", path,
                        h[0], SHARD_MAGIC, SHARD_MAGIC_U32);
    int plain = h[0] == SHARD_MAGIC ? 1 : 7, mask = h[0] == SHARD_MAGIC ? 2 : 8;
    if (h[1] != plain && h[1] != mask)
        return hpt_fail(HPT_ERR_FORMAT, "%s: token shard version %d is not supported with magic %d "
                        "(%d, or %d with target masks)", path, h[1], h[0], plain, mask);
    *width = h[0] == SHARD_MAGIC ? 2 : 4;
    *masked = h[1] == mask;
    if (h[2] < 0)
        return hpt_fail(HPT_ERR_FORMAT, "%s: header says %d tokens of %d bytes but the file has "
                        "%llu bytes (truncated or corrupt)", path, h[2], *width,
                        (unsigned long long)size);
    if (*masked && (h[3] < 0 || (h[2] > 0) != (h[3] > 0) || h[3] > h[2]))
        return hpt_fail(HPT_ERR_FORMAT, "%s: header says %d tokens and %d examples (truncated or "
                        "corrupt)", path, h[2], h[3]);
    uint64_t n = (uint64_t)(uint32_t)h[2], e = *masked ? (uint64_t)(uint32_t)h[3] : 0;
    uint64_t want = 1024 + *width * n + (*masked ? n + 4 * e : 0);
    if (size != want)
        return hpt_fail(HPT_ERR_FORMAT, "%s: header says %llu tokens of %d bytes%s but the file "
                        "has %llu bytes, not %llu (truncated or corrupt)", path,
                        (unsigned long long)n, *width,
                        *masked ? " with target flags and example starts" : "",
                        (unsigned long long)size, (unsigned long long)want);
    *count = n;
    *n_ex = e;
    return HPT_OK;
}

static hpt_status check_shard(const char *path, uint64_t *count, unsigned char *width,
                              unsigned char *masked, uint64_t *n_ex_out) {
    FILE *f;
    uint64_t size, n_ex = 0;
    HPT_CHECK(io_open_read(path, &f, &size));
    hpt_status s = check_header(f, size, path, count, width, masked, &n_ex);
    *n_ex_out = n_ex;
    if (s == HPT_OK && *masked && fseek(f, (long)(1024 + (*width + 1) * *count), SEEK_SET) != 0)
        s = hpt_fail(HPT_ERR_IO, "cannot seek in %s", path);
    if (s == HPT_OK && *masked) s = check_starts(f, path, *count, n_ex, NULL);
    fclose(f);
    return s;
}

hpt_status hpt_shard_read(const char *path, uint32_t **tokens_out, uint8_t **target_out,
                          size_t *n_out, uint32_t **starts_out, size_t *n_examples_out) {
    *tokens_out = NULL;
    *target_out = NULL;
    *starts_out = NULL;
    *n_out = *n_examples_out = 0;
    FILE *f;
    uint64_t size, n, n_ex;
    unsigned char width, masked;
    HPT_CHECK(io_open_read(path, &f, &size));
    hpt_status s = check_header(f, size, path, &n, &width, &masked, &n_ex);
    uint32_t *tok = NULL, *starts = NULL;
    uint8_t *tgt = NULL;
    if (s == HPT_OK) {
        tok = malloc(n ? n * 4 : 1);
        tgt = malloc(n ? n : 1);
        starts = malloc(n_ex ? n_ex * 4 : 1);
        if (!tok || !tgt || !starts)
            s = hpt_fail(HPT_ERR_OOM, "%s: %llu tokens", path, (unsigned long long)n);
    }
    if (s == HPT_OK && width == 4) s = io_read_exact(f, tok, n * 4, path, "tokens");
    if (s == HPT_OK && width == 2) { /* widened in place from the back */
        s = io_read_exact(f, tok, n * 2, path, "tokens");
        const uint16_t *narrow = (const uint16_t *)(void *)tok;
        for (uint64_t i = n; s == HPT_OK && i-- > 0;) tok[i] = narrow[i];
    }
    if (s == HPT_OK && masked) s = io_read_exact(f, tgt, n, path, "target flags");
    for (uint64_t i = 0; s == HPT_OK && masked && i < n; i++)
        if (tgt[i] > 1)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: target flag %u at token %llu (0 or 1): corrupt", path,
                         tgt[i], (unsigned long long)i);
    if (s == HPT_OK && !masked) memset(tgt, 1, n);
    if (s == HPT_OK && masked) s = check_starts(f, path, n, n_ex, starts);
    fclose(f);
    if (s != HPT_OK) {
        free(tok);
        free(tgt);
        free(starts);
        return s;
    }
    *tokens_out = tok;
    *target_out = tgt;
    *starts_out = starts;
    *n_out = (size_t)n;
    *n_examples_out = (size_t)n_ex;
    return HPT_OK;
}

hpt_status hpt_dataloader_open(hpt_mem *mem, const char *pattern, int B, int T, int vocab,
                               hpt_dataloader **out) {
    *out = NULL;
    if (B < 1 || T < 1) return hpt_fail(HPT_ERR_INVALID, "batch %d and sequence %d must be >= 1", B, T);
    glob_t g;
    int gr = glob(pattern, 0, NULL, &g);
    if (gr == GLOB_NOMATCH || (gr == 0 && g.gl_pathc == 0)) {
        if (gr == 0) globfree(&g);
        return hpt_fail(HPT_ERR_IO, "no data files match '%s'", pattern);
    }
    if (gr != 0) return hpt_fail(HPT_ERR_IO, "cannot expand '%s'", pattern);
    hpt_dataloader *d = calloc(1, sizeof *d);
    hpt_status s = d ? HPT_OK : hpt_fail(HPT_ERR_OOM, "data loader");
    if (s == HPT_OK) {
        d->mem = mem; d->B = B; d->T = T; d->V = vocab;
        d->paths = calloc(g.gl_pathc, sizeof *d->paths);
        d->counts = calloc(g.gl_pathc, sizeof *d->counts);
        d->width = calloc(g.gl_pathc, 1);
        d->masked = calloc(g.gl_pathc, 1);
        d->n_ex = calloc(g.gl_pathc, sizeof *d->n_ex);
        d->starts_shard = -1;
        if (!d->paths || !d->counts || !d->width || !d->masked || !d->n_ex)
            s = hpt_fail(HPT_ERR_OOM, "data loader");
    }
    size_t window = (size_t)B * T + 1;
    for (size_t i = 0; s == HPT_OK && i < g.gl_pathc; i++) { /* glob sorts by name */
        d->paths[i] = strdup(g.gl_pathv[i]);
        d->n_shards = i + 1;
        if (!d->paths[i]) s = hpt_fail(HPT_ERR_OOM, "data loader");
        if (s == HPT_OK) s = check_shard(g.gl_pathv[i], &d->counts[i], &d->width[i], &d->masked[i],
                                            &d->n_ex[i]);
        if (s == HPT_OK && d->counts[i] >= window) d->total += d->counts[i];
    }
    globfree(&g);
    if (s == HPT_OK && d->total == 0)
        s = hpt_fail(HPT_ERR_INVALID, "no shard matching '%s' holds a batch: B*T+1 = %zu tokens "
                     "are needed", pattern, window);
    size_t BT = (size_t)B * T;
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, (BT + 1) * 2, (void **)&d->raw);
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, BT * 4, (void **)&d->inputs);
    if (s == HPT_OK) s = hpt_mem_alloc(mem, HPT_TIER_DEVICE, HPT_CAT_IO, BT * 4, (void **)&d->targets);
    if (s != HPT_OK) { hpt_dataloader_free(d); return s; }
    while (d->counts[d->shard] < window) d->shard++;
    *out = d;
    return HPT_OK;
}

size_t hpt_dataloader_num_tokens(const hpt_dataloader *d) {
    return d->indexed ? (size_t)d->split.tokens : d->total;
}

static size_t pack_num_batches(const hpt_dataloader *d);
static hpt_status pack_set_pos(hpt_dataloader *d, int64_t shard, int64_t offset);
static void pack_skip(hpt_dataloader *d, int64_t n);
static hpt_status pack_next(hpt_dataloader *d);
static void pack_rewind(hpt_dataloader *d);
static hpt_status ix_next(hpt_dataloader *d);
static void ix_advance(hpt_dataloader *d, int64_t batches);

size_t hpt_dataloader_num_batches(const hpt_dataloader *d) {
    if (d->indexed) return (size_t)(d->n_rows / (uint64_t)d->B);
    if (d->pack) return pack_num_batches(d);
    size_t BT = (size_t)d->B * d->T, n = 0;
    for (size_t i = 0; i < d->n_shards; i++)
        if (d->counts[i] > BT) n += (size_t)((d->counts[i] - 1) / BT);
    return n;
}

void hpt_dataloader_get_pos(const hpt_dataloader *d, int64_t *shard, int64_t *offset) {
    *shard = d->indexed ? -1 - d->epoch : d->shard;
    *offset = d->indexed ? (int64_t)d->at : d->offset;
}

hpt_status hpt_dataloader_set_pos(hpt_dataloader *d, int64_t shard, int64_t offset) {
    const uint64_t per = d->n_rows / (uint64_t)d->B * (uint64_t)d->B;
    if (d->indexed != (shard < 0))
        return hpt_fail(HPT_ERR_INVALID, "data position (%lld, %lld) was saved %s shuffled rows "
                        "or a validation split: resume with the run's --shuffle, --val-split and "
                        "--data-seed", (long long)shard, (long long)offset,
                        shard < 0 ? "with" : "without");
    if (d->indexed && (offset < 0 || (uint64_t)offset >= per || offset % d->B))
        return hpt_fail(HPT_ERR_INVALID, "data position (epoch %lld, row %lld) is outside the "
                        "data's %llu rows of %d batches; were the shards changed?",
                        (long long)(-1 - shard), (long long)offset, (unsigned long long)per, d->B);
    if (d->indexed) {
        d->epoch = -1 - shard;
        d->at = (uint64_t)offset;
        return HPT_OK;
    }
    if (d->pack) return pack_set_pos(d, shard, offset);
    size_t window = (size_t)d->B * d->T + 1;
    if (shard < 0 || (size_t)shard >= d->n_shards || offset < 0 ||
        (uint64_t)offset + window > d->counts[shard])
        return hpt_fail(HPT_ERR_INVALID, "data position (shard %lld, offset %lld) is outside the "
                        "data (%zu shards); were the shards changed?", (long long)shard,
                        (long long)offset, d->n_shards);
    d->shard = shard;
    d->offset = offset;
    return HPT_OK;
}

/* The next window: in this shard, else in the next shard that holds one (wrapping). */
static void advance(hpt_dataloader *d) {
    size_t BT = (size_t)d->B * d->T, window = BT + 1;
    d->offset += (int64_t)BT;
    if ((uint64_t)d->offset + window > d->counts[d->shard]) {
        d->offset = 0;
        do d->shard = (d->shard + 1) % (int64_t)d->n_shards;
        while (d->counts[d->shard] < window);
    }
}

void hpt_dataloader_skip(hpt_dataloader *d, int64_t n) {
    if (d->indexed) {
        ix_advance(d, n);
        return;
    }
    if (d->pack) {
        pack_skip(d, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) advance(d);
}

/* A masked shard's target flags of the window (window bytes at the flags' offset) into flags. */
static hpt_status read_flags(hpt_dataloader *d, FILE *f, const char *path, uint8_t *flags,
                             size_t window) {
    uint64_t at = 1024 + d->width[d->shard] * d->counts[d->shard] + (uint64_t)d->offset;
    if (fseek(f, (long)at, SEEK_SET) != 0) return hpt_fail(HPT_ERR_IO, "cannot seek in %s", path);
    HPT_CHECK(io_read_exact(f, flags, window, path, "target flags"));
    for (size_t i = 0; i < window; i++)
        if (flags[i] > 1)
            return hpt_fail(HPT_ERR_FORMAT, "%s: target flag %u at token %lld (0 or 1): corrupt",
                            path, flags[i], (long long)d->offset + (long long)i);
    return HPT_OK;
}

hpt_status hpt_dataloader_next(hpt_dataloader *d, const int32_t **inputs,
                               const int32_t **targets) {
    if (d->pack || d->indexed) {
        HPT_CHECK(d->indexed ? ix_next(d) : pack_next(d));
        *inputs = d->inputs;
        *targets = d->targets;
        return HPT_OK;
    }
    size_t BT = (size_t)d->B * d->T, window = BT + 1;
    const char *path = d->paths[d->shard];
    FILE *f = fopen(path, "rb");
    if (!f) return hpt_fail(HPT_ERR_IO, "cannot open %s", path);
    hpt_status s = HPT_OK;
    int width = d->width[d->shard];
    if (fseek(f, 1024 + width * (long)d->offset, SEEK_SET) != 0)
        s = hpt_fail(HPT_ERR_IO, "cannot seek in %s", path);
    int masked = d->masked[d->shard];
    if (width == 2) {
        uint8_t *flags = (uint8_t *)(void *)d->inputs; /* (window) bytes; BT*4 >= BT+1 */
        if (s == HPT_OK) s = io_read_exact(f, d->raw, window * 2, path, "tokens");
        if (s == HPT_OK && masked) s = read_flags(d, f, path, flags, window);
        fclose(f);
        if (s != HPT_OK) return s;
        for (size_t i = 0; i < window; i++)
            if (d->raw[i] >= d->V)
                return hpt_fail(HPT_ERR_FORMAT, "%s: token id %u at %lld is not below the model's "
                                "vocabulary size %d", path, d->raw[i], (long long)d->offset + (long long)i, d->V);
        for (size_t i = 0; i < BT; i++) /* targets first: the flags live in inputs */
            d->targets[i] = !masked || flags[i + 1] ? d->raw[i + 1] : -1;
        for (size_t i = 0; i < BT; i++) d->inputs[i] = d->raw[i];
    } else { /* uint32: token 0, then tokens 1..BT into targets */
        uint32_t first = 0;
        uint32_t *rest = (uint32_t *)(void *)d->targets;
        uint8_t *flags = (uint8_t *)(void *)d->raw; /* (window) bytes, unused by uint32 */
        if (s == HPT_OK) s = io_read_exact(f, &first, 4, path, "tokens");
        if (s == HPT_OK) s = io_read_exact(f, rest, BT * 4, path, "tokens");
        if (s == HPT_OK && masked) s = read_flags(d, f, path, flags, window);
        fclose(f);
        if (s != HPT_OK) return s;
        for (size_t i = 0; i < window; i++) {
            uint32_t tok = i == 0 ? first : rest[i - 1];
            if (tok >= (uint32_t)d->V)
                return hpt_fail(HPT_ERR_FORMAT, "%s: token id %u at %lld is not below the model's "
                                "vocabulary size %d", path, tok, (long long)d->offset + (long long)i, d->V);
        }
        d->inputs[0] = (int32_t)first;
        for (size_t i = 1; i < BT; i++) d->inputs[i] = (int32_t)rest[i - 1];
        for (size_t i = 0; masked && i < BT; i++)
            if (!flags[i + 1]) d->targets[i] = -1;
    }
    advance(d);
    d->real = (int64_t)BT;
    *inputs = d->inputs;
    *targets = d->targets;
    return HPT_OK;
}

hpt_status hpt_dataloader_rewind(hpt_dataloader *d) {
    if (d->indexed) {
        d->epoch = 0;
        d->at = 0;
        return HPT_OK;
    }
    if (d->pack) {
        pack_rewind(d);
        return HPT_OK;
    }
    size_t window = (size_t)d->B * d->T + 1;
    d->shard = 0;
    d->offset = 0;
    while (d->counts[d->shard] < window) d->shard++;
    return HPT_OK;
}

/* ---- examples: packed or padded rows (docs/packing.md) ---- */

const int32_t *hpt_dataloader_positions(const hpt_dataloader *d) { return d->pos; }
int64_t hpt_dataloader_real_tokens(const hpt_dataloader *d) { return d->real; }

/* the example starts of shard sh into d->starts (kept while the walk stays in it) */
static hpt_status load_starts(hpt_dataloader *d, int64_t sh) {
    if (d->starts_shard == sh) return HPT_OK;
    const uint64_t n_ex = d->n_ex[sh];
    uint32_t *st = malloc(n_ex ? n_ex * 4 : 4);
    if (!st) return hpt_fail(HPT_ERR_OOM, "%s: %llu example starts", d->paths[sh], (unsigned long long)n_ex);
    const char *path = d->paths[sh];
    FILE *f = fopen(path, "rb");
    hpt_status s = f ? HPT_OK : hpt_fail(HPT_ERR_IO, "cannot open %s", path);
    if (s == HPT_OK && fseek(f, (long)(1024 + (d->width[sh] + 1) * d->counts[sh]), SEEK_SET) != 0)
        s = hpt_fail(HPT_ERR_IO, "cannot seek in %s", path);
    if (s == HPT_OK) s = check_starts(f, path, d->counts[sh], n_ex, st);
    if (f) fclose(f);
    if (s != HPT_OK) {
        free(st);
        return s;
    }
    free(d->starts);
    d->starts = st;
    d->starts_shard = sh;
    return HPT_OK;
}

/* the end of the example holding token off of the loaded shard (binary search of the starts) */
static uint64_t example_after(const hpt_dataloader *d, int64_t off) { /* first start > off */
    uint64_t lo = 0, hi = d->n_ex[d->starts_shard];
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if ((int64_t)d->starts[mid] <= off) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static uint64_t example_end(const hpt_dataloader *d, int64_t off) {
    const uint64_t lo = example_after(d, off);
    return lo < d->n_ex[d->starts_shard] ? d->starts[lo] : d->counts[d->starts_shard];
}

static int64_t shard_with_examples(const hpt_dataloader *d, int64_t sh);

/* A split's packed rows (ex_in): the position, an example's first token, moved to the set's
 * first example at or after it (wrapping). Without a split it stays. */
static hpt_status to_kept(hpt_dataloader *d) {
    for (size_t guard = 0; d->ex_in && guard <= d->n_shards; guard++) {
        HPT_CHECK(load_starts(d, d->shard));
        for (uint64_t e = example_after(d, d->offset) - 1; e < d->n_ex[d->shard]; e++)
            if (d->ex_in[d->ex_base[d->shard] + e]) {
                d->offset = (int64_t)d->starts[e];
                return HPT_OK;
            }
        d->shard = shard_with_examples(d, (d->shard + 1) % (int64_t)d->n_shards);
        d->offset = 0;
    }
    return d->ex_in ? hpt_fail(HPT_ERR_INVALID, "the set holds no example") : HPT_OK;
}

/* the first shard at or after sh (wrapping) that holds an example */
static int64_t shard_with_examples(const hpt_dataloader *d, int64_t sh) {
    while (d->n_ex[sh] == 0) sh = (sh + 1) % (int64_t)d->n_shards;
    return sh;
}

/* Row b from the position: the examples that fill it (lens[k], negative: truncated to T), the
 * position moved past them; dry: nothing read, nothing written. */
static hpt_status fill_row(hpt_dataloader *d, int b, int dry) {
    const int T = d->T;
    const int64_t sh = d->shard, off0 = d->offset;
    HPT_CHECK(load_starts(d, sh));
    int t = 0, k = 0;
    int *lens = d->row_len;
    while (t < T) {
        const uint64_t end = example_end(d, d->offset);
        int64_t len = (int64_t)end - d->offset;
        if (t > 0 && (d->pack == HPT_PACK_OFF || t + len > T)) break;
        int cut = len > T;
        if (cut) len = T;
        lens[k++] = cut ? -(int)len : (int)len;
        t += (int)len;
        const int kept = !d->ex_in || (end < d->counts[sh] &&
                                       d->ex_in[d->ex_base[sh] + example_after(d, d->offset)]);
        if (end < d->counts[sh] && kept) {
            d->offset = (int64_t)end;
        } else { /* a row never spans two shards, nor reaches the other set's example */
            if (end < d->counts[sh]) {
                d->offset = (int64_t)end;
            } else {
                d->shard = shard_with_examples(d, (sh + 1) % (int64_t)d->n_shards);
                d->offset = 0;
            }
            HPT_CHECK(to_kept(d));
            break;
        }
    }
    if (dry) return HPT_OK;
    /* tokens off0 .. off0 + t (the one after a truncated example's last is its target) */
    const size_t n_read = (size_t)((uint64_t)(off0 + t + 1) <= d->counts[sh] ? t + 1 : t);
    const char *path = d->paths[sh];
    const int width = d->width[sh];
    FILE *f = fopen(path, "rb");
    if (!f) return hpt_fail(HPT_ERR_IO, "cannot open %s", path);
    hpt_status s = HPT_OK;
    if (fseek(f, (long)(1024 + (uint64_t)width * (uint64_t)off0), SEEK_SET) != 0)
        s = hpt_fail(HPT_ERR_IO, "cannot seek in %s", path);
    if (s == HPT_OK) s = io_read_exact(f, d->row_tok, n_read * (size_t)width, path, "tokens");
    if (s == HPT_OK && fseek(f, (long)(1024 + (uint64_t)width * d->counts[sh] + (uint64_t)off0), SEEK_SET) != 0)
        s = hpt_fail(HPT_ERR_IO, "cannot seek in %s", path);
    if (s == HPT_OK) s = io_read_exact(f, d->row_flag, n_read, path, "target flags");
    fclose(f);
    if (s != HPT_OK) return s;
    if (width == 2) { /* widened in place from the back */
        const uint16_t *narrow = (const uint16_t *)(void *)d->row_tok;
        for (size_t i = n_read; i-- > 0;) d->row_tok[i] = narrow[i];
    }
    for (size_t i = 0; i < n_read; i++) {
        if (d->row_tok[i] >= (uint32_t)d->V)
            return hpt_fail(HPT_ERR_FORMAT, "%s: token id %u at %lld is not below the model's "
                            "vocabulary size %d", path, d->row_tok[i], (long long)off0 + (long long)i, d->V);
        if (d->row_flag[i] > 1)
            return hpt_fail(HPT_ERR_FORMAT, "%s: target flag %u at token %lld (0 or 1): corrupt",
                            path, d->row_flag[i], (long long)off0 + (long long)i);
    }
    int32_t *in = d->inputs + (size_t)b * T, *tg = d->targets + (size_t)b * T;
    int32_t *pos = d->pos ? d->pos + (size_t)b * T : NULL;
    int i = 0;
    for (int e = 0; e < k; e++) {
        const int len = lens[e] < 0 ? -lens[e] : lens[e], cut = lens[e] < 0;
        for (int q = 0; q < len; q++, i++) {
            in[i] = (int32_t)d->row_tok[i];
            /* the next token of the example: a target where flagged; none after its last */
            const int has_next = q + 1 < len || (cut && (size_t)i + 1 < n_read);
            tg[i] = has_next && d->row_flag[i + 1] ? (int32_t)d->row_tok[i + 1] : -1;
            if (pos) pos[i] = q;
        }
    }
    d->real += i;
    for (int p0 = i; i < T; i++) { /* padding: its own run of positions, no target */
        in[i] = 0;
        tg[i] = -1;
        if (pos) pos[i] = i - p0;
    }
    return HPT_OK;
}

static hpt_status pack_next(hpt_dataloader *d) {
    d->real = 0;
    for (int b = 0; b < d->B; b++) HPT_CHECK(fill_row(d, b, 0));
    return HPT_OK;
}

static void pack_skip(hpt_dataloader *d, int64_t n) {
    /* a failure to read the starts leaves the position where it was: next() reports it */
    for (int64_t i = 0; i < n; i++)
        for (int b = 0; b < d->B; b++)
            if (fill_row(d, b, 1) != HPT_OK) return;
}

static void pack_rewind(hpt_dataloader *d) {
    d->shard = shard_with_examples(d, 0);
    d->offset = 0;
}

static hpt_status pack_set_pos(hpt_dataloader *d, int64_t shard, int64_t offset) {
    if (shard < 0 || (size_t)shard >= d->n_shards || offset < 0 ||
        (uint64_t)offset >= d->counts[shard] || d->n_ex[shard] == 0)
        return hpt_fail(HPT_ERR_INVALID, "data position (shard %lld, offset %lld) is outside the "
                        "data (%zu shards); were the shards changed?", (long long)shard,
                        (long long)offset, d->n_shards);
    HPT_CHECK(load_starts(d, shard));
    /* an example's first token: the one before it ends an example (or it is token 0) */
    if (offset > 0 && example_end(d, offset - 1) != (uint64_t)offset)
        return hpt_fail(HPT_ERR_INVALID, "data position (shard %lld, offset %lld) is not an "
                        "example's first token: was the run packed differently (--pack)?",
                        (long long)shard, (long long)offset);
    d->shard = shard;
    d->offset = offset;
    return HPT_OK;
}

/* batches in one pass from the start: rows of a dry walk until it wraps, over B */
static size_t pack_num_batches(const hpt_dataloader *d) { return d->pack_batches; }

hpt_status hpt_dataloader_set_pack(hpt_dataloader *d, int mode) {
    const size_t BT = (size_t)d->B * d->T;
    if (d->pos) hpt_mem_free(d->mem, HPT_TIER_DEVICE, HPT_CAT_IO, d->pos, BT * 4);
    d->pos = NULL;
    d->pack = 0;
    ix_clear(d);
    if (mode == HPT_PACK_STREAM) return hpt_dataloader_rewind(d);
    if (mode != HPT_PACK_ON && mode != HPT_PACK_OFF)
        return hpt_fail(HPT_ERR_INVALID, "pack mode %d", mode);
    size_t with = 0;
    for (size_t i = 0; i < d->n_shards; i++) {
        if (!d->masked[i])
            return hpt_fail(HPT_ERR_INVALID, "--pack %s needs shards that mark their examples "
                            "(hptrain tokenize of *.jsonl); %s has none (--pack stream walks it)",
                            mode == HPT_PACK_ON ? "on" : "off", d->paths[i]);
        with += d->n_ex[i] > 0;
    }
    if (!with) return hpt_fail(HPT_ERR_INVALID, "the shards hold no example");
    if (!d->row_tok) {
        d->row_tok = malloc(((size_t)d->T + 1) * 4);
        d->row_flag = malloc((size_t)d->T + 1);
        d->row_len = malloc((size_t)d->T * sizeof(int));
        if (!d->row_tok || !d->row_flag || !d->row_len) return hpt_fail(HPT_ERR_OOM, "data loader rows");
    }
    if (mode == HPT_PACK_ON)
        HPT_CHECK(hpt_mem_alloc(d->mem, HPT_TIER_DEVICE, HPT_CAT_IO, BT * 4, (void **)&d->pos));
    d->pack = mode;
    /* one pass: rows until the walk is back at the start */
    pack_rewind(d);
    const int64_t sh0 = d->shard;
    size_t rows = 0;
    do {
        HPT_CHECK(fill_row(d, 0, 1));
        rows++;
    } while (!(d->shard == sh0 && d->offset == 0));
    d->pack_batches = rows / (size_t)d->B;
    pack_rewind(d);
    return HPT_OK;
}

/* ---- the indexed walk: a set's rows in a seeded order per epoch (docs/data.md) ---- */

struct ix_piece {
    uint64_t shard, start, len; /* tokens [start, start + len) of the shard */
    uint64_t doc;               /* the document they belong to; then: where they begin in the set */
};

static void ix_clear(hpt_dataloader *d) {
    free(d->pieces);
    free(d->row_start);
    free(d->ex_in);
    free(d->ex_base);
    d->pieces = NULL;
    d->row_start = NULL;
    d->ex_in = NULL;
    d->ex_base = NULL;
    d->n_pieces = 0;
    d->indexed = 0;
    d->epoch = 0;
    d->at = 0;
}

/* The documents as pieces of shards: a raw shard's start at each delimiter token (a piece
 * before the first one continues the previous shard's last document), a masked shard's at each
 * example's start. */
typedef struct {
    hpt_dataloader *d;
    struct ix_piece *p;
    size_t n, cap;
    uint64_t shard, start, n_docs;
    int64_t doc; /* the document being read, -1: the next piece starts one */
} ix_docs;

static hpt_status ix_emit(ix_docs *x, uint64_t end) {
    if (end <= x->start) return HPT_OK;
    if (x->n == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 1024;
        struct ix_piece *p = realloc(x->p, cap * sizeof *p);
        if (!p) return hpt_fail(HPT_ERR_OOM, "data loader: %zu document pieces", cap);
        x->p = p;
        x->cap = cap;
    }
    if (x->doc < 0) x->doc = (int64_t)x->n_docs++;
    x->p[x->n++] = (struct ix_piece){x->shard, x->start, end - x->start, (uint64_t)x->doc};
    x->start = end;
    return HPT_OK;
}

static hpt_status ix_boundary(void *ctx, uint64_t offset) {
    ix_docs *x = ctx;
    HPT_CHECK(ix_emit(x, offset));
    x->doc = -1;
    return HPT_OK;
}

static hpt_status ix_find_docs(hpt_dataloader *d, ix_docs *x) {
    uint32_t delim = 0; /* the first shard's first token: llm.c's shards open each document with it */
    size_t first = 0;
    while (first < d->n_shards && d->counts[first] == 0) first++;
    if (first < d->n_shards && !d->masked[first]) {
        FILE *f = fopen(d->paths[first], "rb");
        if (!f) return hpt_fail(HPT_ERR_IO, "cannot open %s", d->paths[first]);
        hpt_status s = fseek(f, 1024, SEEK_SET) == 0 ? HPT_OK : hpt_fail(HPT_ERR_IO, "cannot seek in %s", d->paths[first]);
        if (s == HPT_OK) s = io_read_exact(f, &delim, (size_t)d->width[first], d->paths[first], "tokens");
        fclose(f);
        HPT_CHECK(s);
        /* uint16: its two bytes are the low ones (little-endian), the rest stays 0 */
    }
    x->doc = -1;
    for (size_t i = 0; i < d->n_shards; i++) {
        x->shard = i;
        x->start = 0;
        if (d->masked[i]) {
            HPT_CHECK(load_starts(d, (int64_t)i));
            for (uint64_t e = 1; e < d->n_ex[i]; e++) HPT_CHECK(ix_boundary(x, d->starts[e]));
            HPT_CHECK(ix_emit(x, d->counts[i]));
            x->doc = -1;
        } else {
            HPT_CHECK(io_scan_delims(d->paths[i], d->width[i], d->counts[i], delim, ix_boundary, x));
            HPT_CHECK(ix_emit(x, d->counts[i]));
        }
    }
    return HPT_OK;
}

/* Keeps the pieces of one set (val: the chosen documents; else the others), joined where they
 * touch; each piece's doc becomes where it begins in the set's tokens. */
static hpt_status ix_select(hpt_dataloader *d, ix_docs *x, double fraction, int val) {
    uint64_t *len = calloc(x->n_docs ? x->n_docs : 1, sizeof *len);
    uint8_t *is_val = calloc(x->n_docs ? x->n_docs : 1, 1);
    hpt_status s = len && is_val ? HPT_OK : hpt_fail(HPT_ERR_OOM, "data loader: %llu documents",
                                                      (unsigned long long)x->n_docs);
    for (size_t i = 0; s == HPT_OK && i < x->n; i++) len[x->p[i].doc] += x->p[i].len;
    size_t n_val = 0;
    if (s == HPT_OK && fraction > 0) s = io_data_choose(len, (size_t)x->n_docs, fraction, d->seed, is_val, &n_val);
    d->split.docs_total = fraction > 0 ? (size_t)x->n_docs : 0; /* not counted without a split */
    d->split.docs = fraction > 0 ? (val ? n_val : (size_t)x->n_docs - n_val) : 0;
    d->split.tokens_total = 0;
    size_t k = 0;
    uint64_t at = 0;
    for (size_t i = 0; s == HPT_OK && i < x->n; i++) {
        struct ix_piece q = x->p[i];
        d->split.tokens_total += q.len;
        if (fraction > 0 && is_val[q.doc] != (val != 0)) continue;
        if (k > 0 && x->p[k - 1].shard == q.shard && x->p[k - 1].start + x->p[k - 1].len == q.start) {
            x->p[k - 1].len += q.len;
        } else {
            q.doc = at;
            x->p[k++] = q;
        }
        at += q.len;
    }
    free(len);
    if (s == HPT_OK && d->pack && fraction > 0) { /* packed rows: the set's examples (a document each) */
        d->ex_base = malloc(d->n_shards * sizeof *d->ex_base);
        if (!d->ex_base) s = hpt_fail(HPT_ERR_OOM, "data loader: %zu shards", d->n_shards);
        for (size_t i = 0, e = 0; s == HPT_OK && i < d->n_shards; e += (size_t)d->n_ex[i++])
            d->ex_base[i] = e;
        for (size_t i = 0; s == HPT_OK && i < x->n_docs; i++) is_val[i] = is_val[i] == (val != 0);
        d->ex_in = is_val;
        is_val = NULL;
    }
    free(is_val);
    d->pieces = x->p;
    d->n_pieces = k;
    d->set_tokens = at;
    d->split.tokens = at;
    x->p = NULL;
    return s;
}

/* pack: each row's first token, from a dry walk of one pass */
static hpt_status ix_pack_rows(hpt_dataloader *d) {
    size_t cap = d->pack_batches * (size_t)d->B + (size_t)d->B; /* the walk's rows; a split's
                                                                  * may be more (rows end at
                                                                  * the other set's examples) */
    pack_rewind(d);
    HPT_CHECK(to_kept(d));
    const int64_t sh0 = d->shard, off0 = d->offset;
    d->n_rows = 0;
    do {
        if (!d->row_start || d->n_rows == cap) {
            cap = d->row_start ? 2 * cap : cap;
            uint64_t *p = realloc(d->row_start, cap * sizeof *p);
            if (!p) return hpt_fail(HPT_ERR_OOM, "data loader: %zu rows", cap);
            d->row_start = p;
        }
        d->row_start[d->n_rows++] = (uint64_t)d->shard << 32 | (uint64_t)d->offset;
        HPT_CHECK(fill_row(d, 0, 1));
    } while (!(d->shard == sh0 && d->offset == off0));
    return HPT_OK;
}

hpt_status hpt_dataloader_order(hpt_dataloader *d, double val_fraction, int val, int shuffle,
                                uint64_t seed, hpt_data_split *info) {
    ix_clear(d);
    d->seed = seed;
    d->shuffle = shuffle;
    if (!d->row_tok) {
        d->row_tok = malloc(((size_t)d->T + 1) * 4);
        d->row_flag = malloc((size_t)d->T + 1);
        d->row_len = malloc((size_t)d->T * sizeof(int));
        if (!d->row_tok || !d->row_flag || !d->row_len) return hpt_fail(HPT_ERR_OOM, "data loader rows");
    }
    hpt_status s = HPT_OK;
    d->split.docs = d->split.docs_total = 0;
    d->split.tokens = d->split.tokens_total = d->total;
    if (d->pack && val_fraction > 0) { /* the set's examples: ex_in */
        ix_docs x = {.d = d};
        s = ix_find_docs(d, &x);
        if (s == HPT_OK) s = ix_select(d, &x, val_fraction, val);
        free(x.p);
        free(d->pieces); /* packed rows are read through row_start */
        d->pieces = NULL;
        d->n_pieces = 0;
    }
    if (d->pack) {
        if (s == HPT_OK) s = ix_pack_rows(d);
    } else {
        ix_docs x = {.d = d};
        s = val_fraction > 0 ? ix_find_docs(d, &x) : HPT_OK;
        for (size_t i = 0; s == HPT_OK && val_fraction <= 0 && i < d->n_shards; i++) {
            x.shard = i; /* no split: each shard whole, no need to find its documents */
            x.start = 0;
            x.doc = (int64_t)i;
            x.n_docs = i + 1;
            s = ix_emit(&x, d->counts[i]);
        }
        if (s == HPT_OK) s = ix_select(d, &x, val_fraction, val);
        free(x.p);
        d->n_rows = d->set_tokens > (uint64_t)d->T ? (d->set_tokens - 1) / (uint64_t)d->T : 0;
    }
    if (s == HPT_OK && d->n_rows < (uint64_t)d->B)
        s = hpt_fail(HPT_ERR_INVALID, "the %s documents hold %llu tokens, %llu rows of %d: fewer "
                     "than a batch of %d rows%s", val_fraction > 0 ? (val ? "validation" : "training")
                     : "data's", (unsigned long long)d->split.tokens, (unsigned long long)d->n_rows,
                     d->T, d->B, val_fraction > 0 ? " (a larger or smaller --val-split, or --val "
                     "shards)" : "");
    if (s != HPT_OK) {
        ix_clear(d);
        return s;
    }
    d->indexed = 1;
    if (info) *info = d->split;
    return HPT_OK;
}

/* tokens [v0, v0 + n) of the set into row_tok, row_flag (an unmasked shard's flags all 1) */
static hpt_status ix_read(hpt_dataloader *d, uint64_t v0, size_t n) {
    size_t lo = 0, hi = d->n_pieces; /* the last piece beginning at or before v0 */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (d->pieces[mid].doc <= v0) lo = mid;
        else hi = mid;
    }
    for (size_t got = 0, p = lo; got < n; p++) {
        const struct ix_piece *q = &d->pieces[p];
        const uint64_t off = q->start + (v0 + got - q->doc);
        const size_t k = (size_t)(q->len - (v0 + got - q->doc) < n - got ? q->len - (v0 + got - q->doc) : n - got);
        const char *path = d->paths[q->shard];
        const int width = d->width[q->shard];
        FILE *f = fopen(path, "rb");
        if (!f) return hpt_fail(HPT_ERR_IO, "cannot open %s", path);
        hpt_status s = fseek(f, (long)(1024 + (uint64_t)width * off), SEEK_SET) == 0 ? HPT_OK
                       : hpt_fail(HPT_ERR_IO, "cannot seek in %s", path);
        uint32_t *tok = d->row_tok + got;
        if (s == HPT_OK) s = io_read_exact(f, tok, k * (size_t)width, path, "tokens");
        if (s == HPT_OK && d->masked[q->shard] &&
            fseek(f, (long)(1024 + (uint64_t)width * d->counts[q->shard] + off), SEEK_SET) != 0)
            s = hpt_fail(HPT_ERR_IO, "cannot seek in %s", path);
        if (s == HPT_OK && d->masked[q->shard]) s = io_read_exact(f, d->row_flag + got, k, path, "target flags");
        if (s == HPT_OK && !d->masked[q->shard]) memset(d->row_flag + got, 1, k);
        fclose(f);
        if (s != HPT_OK) return s;
        if (width == 2) { /* widened in place from the back */
            const uint16_t *narrow = (const uint16_t *)(void *)tok;
            for (size_t i = k; i-- > 0;) tok[i] = narrow[i];
        }
        for (size_t i = 0; i < k; i++) {
            if (tok[i] >= (uint32_t)d->V)
                return hpt_fail(HPT_ERR_FORMAT, "%s: token id %u at %llu is not below the model's "
                                "vocabulary size %d", path, tok[i], (unsigned long long)(off + i), d->V);
            if (d->row_flag[got + i] > 1)
                return hpt_fail(HPT_ERR_FORMAT, "%s: target flag %u at token %llu (0 or 1): corrupt",
                                path, d->row_flag[got + i], (unsigned long long)(off + i));
        }
        got += k;
    }
    return HPT_OK;
}

static void ix_advance(hpt_dataloader *d, int64_t batches) {
    const uint64_t per = d->n_rows / (uint64_t)d->B * (uint64_t)d->B;
    for (int64_t i = 0; i < batches; i++) {
        d->at += (uint64_t)d->B;
        if (d->at >= per) {
            d->at = 0;
            d->epoch++;
        }
    }
}

static hpt_status ix_next(hpt_dataloader *d) {
    const int T = d->T;
    d->real = 0;
    for (int b = 0; b < d->B; b++) {
        const uint64_t i = d->at + (uint64_t)b;
        const uint64_t r = d->shuffle ? io_data_perm(i, d->n_rows, d->seed, (uint64_t)d->epoch) : i;
        if (d->pack) {
            d->shard = (int64_t)(d->row_start[r] >> 32);
            d->offset = (int64_t)(d->row_start[r] & 0xFFFFFFFFu);
            HPT_CHECK(fill_row(d, b, 0));
            continue;
        }
        HPT_CHECK(ix_read(d, r * (uint64_t)T, (size_t)T + 1));
        int32_t *in = d->inputs + (size_t)b * T, *tg = d->targets + (size_t)b * T;
        for (int t = 0; t < T; t++) {
            in[t] = (int32_t)d->row_tok[t];
            tg[t] = d->row_flag[t + 1] ? (int32_t)d->row_tok[t + 1] : -1;
        }
        d->real += T;
    }
    ix_advance(d, 1);
    return HPT_OK;
}
