/* tokenizer_norm.c: what happens to text before the model sees it, for every tokenizer: the
 * added tokens (Hugging Face's added_tokens; GPT-2's <|endoftext|>), found in the raw text
 * before any normalisation, and the NFC normaliser (Qwen2.5, Qwen3), done by utf8proc.
 * Invariants: t->special holds the added tokens' ids sorted longest content first, then by id
 * (the first match at a position is Hugging Face's leftmost-longest one); special_text holds
 * the contents as found in raw text; special_first[b] has bit 1 when a special (ctl) token
 * starts with byte b, bit 2 when an always-matched added token does; NFC leaves bytes that are
 * not UTF-8 as they are, so every byte string still encodes. */
#include "io/tokenizer_int.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static size_t trie_slot(uint64_t key, size_t mask) {
    key *= 0x9e3779b97f4a7c15ull;
    return (size_t)(key ^ (key >> 29)) & mask;
}

/* The child of node by byte c, UINT32_MAX if none. */
static uint32_t trie_get(const hpt_tokenizer *t, uint32_t node, unsigned char c) {
    uint64_t key = ((uint64_t)node << 8 | c) + 1;
    for (size_t i = trie_slot(key, t->trie_mask);; i = (i + 1) & t->trie_mask) {
        if (t->trie_key[i] == key) return t->trie_child[i];
        if (t->trie_key[i] == 0) return UINT32_MAX;
    }
}

/* The trie over the sorted contents (total bytes in all): a walk finds the longest at a
 * position in one pass, whatever the number of added tokens (Gemma 3 has 6,415). */
static hpt_status build_trie(hpt_tokenizer *t, size_t total) {
    size_t cap = 16, max_nodes = total + 1;
    while (cap < 2 * max_nodes) cap *= 2;
    free(t->trie_key);
    free(t->trie_child);
    free(t->trie_end);
    t->trie_key = calloc(cap, sizeof *t->trie_key);
    t->trie_child = malloc(cap * sizeof *t->trie_child);
    t->trie_end = malloc(2 * max_nodes * sizeof *t->trie_end);
    t->trie_mask = cap - 1;
    if (!t->trie_key || !t->trie_child || !t->trie_end)
        return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", t->source);
    memset(t->trie_end, 0xff, 2 * max_nodes * sizeof *t->trie_end);
    uint32_t nodes = 1;
    for (int k = 0; k < t->n_special; k++) {
        uint32_t node = 0;
        for (uint32_t i = t->special_off[k]; i < t->special_off[k + 1]; i++) {
            uint32_t child = trie_get(t, node, t->special_text[i]);
            if (child == UINT32_MAX) {
                uint64_t key = ((uint64_t)node << 8 | t->special_text[i]) + 1;
                size_t s = trie_slot(key, t->trie_mask);
                while (t->trie_key[s]) s = (s + 1) & t->trie_mask;
                t->trie_key[s] = key;
                t->trie_child[s] = child = nodes++;
            }
            node = child;
        }
        int32_t *end = &t->trie_end[2 * node + (t->special_ctl[k] ? 0 : 1)];
        if (*end < 0) *end = k;
    }
    return HPT_OK;
}

hpt_status tok_set_added(hpt_tokenizer *t, int32_t *ids, const unsigned char *ctl,
                         const char *const *content, int n) {
    free(t->special);
    t->special = ids;
    t->n_special = 0;
    size_t total = 0;
    uint64_t *key = malloc(((size_t)n + 1) * sizeof *key); /* longest first, then by id */
    uint32_t *len = malloc(((size_t)n + 1) * sizeof *len);
    if (!key || !len) goto oom;
    for (int k = 0; k < n; k++) {
        len[k] = content ? (uint32_t)strlen(content[k]) : t->tok_off[ids[k] + 1] - t->tok_off[ids[k]];
        if (len[k] == 0) {
            free(key);
            free(len);
            return hpt_fail(HPT_ERR_FORMAT, "%s: added token %d is empty", t->source, ids[k]);
        }
        total += len[k];
        key[k] = (uint64_t)(UINT32_MAX - len[k]) << 32 | (uint32_t)k;
    }
    qsort(key, (size_t)n, sizeof *key, cmp_u64);
    /* ids sorted by length, then by id: order is the key's index k's id; ties are broken by id */
    for (int a = 0; a < n;) { /* within a run of equal length, by id */
        int b = a;
        while (b < n && key[b] >> 32 == key[a] >> 32) b++;
        for (int i = a + 1; i < b; i++)
            for (int j = i; j > a && ids[(uint32_t)key[j - 1]] > ids[(uint32_t)key[j]]; j--) {
                uint64_t x = key[j];
                key[j] = key[j - 1];
                key[j - 1] = x;
            }
        a = b;
    }
    int32_t *sid = malloc(((size_t)n + 1) * sizeof *sid);
    t->special_off = malloc(((size_t)n + 1) * sizeof *t->special_off);
    t->special_text = malloc(total + 1);
    t->special_ctl = malloc((size_t)n + 1);
    if (!sid || !t->special_off || !t->special_text || !t->special_ctl) {
        free(sid);
        goto oom;
    }
    size_t o = 0;
    memset(t->special_first, 0, sizeof t->special_first);
    for (int r = 0; r < n; r++) {
        uint32_t k = (uint32_t)key[r];
        const unsigned char *c = content ? (const unsigned char *)content[k]
                                         : t->tok_bytes + t->tok_off[ids[k]];
        sid[r] = ids[k];
        t->special_ctl[r] = ctl[k] ? 1 : 0;
        t->special_off[r] = (uint32_t)o;
        memcpy(t->special_text + o, c, len[k]);
        o += len[k];
        t->special_first[c[0]] |= ctl[k] ? 1 : 2;
    }
    t->special_off[n] = (uint32_t)o;
    memcpy(ids, sid, (size_t)n * sizeof *ids);
    free(sid);
    free(key);
    free(len);
    t->n_special = n;
    return build_trie(t, total);
oom:
    free(key);
    free(len);
    return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", t->source);
}

int tok_added_at(const hpt_tokenizer *t, const unsigned char *u, size_t n, unsigned want) {
    int best = -1;
    uint32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t child = trie_get(t, node, u[i]);
        if (child == UINT32_MAX) break;
        node = child;
        int32_t a = want & 1 ? t->trie_end[2 * node] : -1, b = want & 2 ? t->trie_end[2 * node + 1] : -1;
        if (a >= 0 || b >= 0) best = a < 0 ? b : b < 0 ? a : HPT_MIN(a, b); /* equal contents: the first */
    }
    return best;
}

static int norm_reserve(hpt_tokenizer *t, size_t n) {
    if (n <= t->norm_cap) return 0;
    size_t cap = HPT_MAX(n, 2 * t->norm_cap);
    unsigned char *p = realloc(t->norm, cap);
    if (!p) return -1;
    t->norm = p;
    t->norm_cap = cap;
    return 0;
}

hpt_status tok_nfc(hpt_tokenizer *t, const unsigned char **up, size_t *lenp) {
    const unsigned char *u = *up;
    size_t len = *lenp, i = 0, o = 0;
    /* ASCII is its own NFC: most text needs no call at all */
    while (i < len && u[i] < 0x80) i++;
    if (i == len) return HPT_OK;
    if (norm_reserve(t, len + len / 2 + 16) != 0)
        return hpt_fail(HPT_ERR_OOM, "out of memory normalising %zu bytes", len);
    for (i = 0; i < len;) {
        /* the longest valid UTF-8 run from i, and the invalid bytes after it */
        size_t j = i;
        uint32_t cp;
        for (size_t k; j < len && (k = tok_utf8_decode(u + j, len - j, &cp)) > 0;) j += k;
        if (j > i) {
            utf8proc_uint8_t *dst = NULL;
            utf8proc_ssize_t m = utf8proc_map(u + i, (utf8proc_ssize_t)(j - i), &dst,
                                              UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m < 0) {
                free(dst);
                return m == UTF8PROC_ERROR_NOMEM
                           ? hpt_fail(HPT_ERR_OOM, "out of memory normalising %zu bytes", len)
                           : hpt_fail(HPT_ERR_UNSUPPORTED, "NFC failed at byte %zu: %s", i,
                                      utf8proc_errmsg(m));
            }
            if (norm_reserve(t, o + (size_t)m + (len - j)) != 0) {
                free(dst);
                return hpt_fail(HPT_ERR_OOM, "out of memory normalising %zu bytes", len);
            }
            memcpy(t->norm + o, dst, (size_t)m);
            o += (size_t)m;
            free(dst);
            i = j;
        }
        size_t k = i;
        while (k < len && tok_utf8_decode(u + k, len - k, &cp) == 0) k++;
        if (k > i) {
            if (norm_reserve(t, o + (k - i) + (len - k)) != 0)
                return hpt_fail(HPT_ERR_OOM, "out of memory normalising %zu bytes", len);
            memcpy(t->norm + o, u + i, k - i);
            o += k - i;
            i = k;
        }
    }
    *up = t->norm;
    *lenp = o;
    return HPT_OK;
}
