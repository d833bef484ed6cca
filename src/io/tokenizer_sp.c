/* tokenizer_sp.c: SentencePiece-style BPE from a Hugging Face tokenizer.json, as Gemma 3 and
 * Llama 2 ship it: the normalizer turns each space into U+2581 ("\u2581", Replace) and may put
 * one before the text (Prepend, Llama 2); the BPE starts from the characters of a whole
 * segment (the text between added tokens: no pre-tokenizer splits it), merges by rank with the
 * heap of tokenizer.c, and a character outside the vocabulary becomes its UTF-8 bytes' <0xXX>
 * tokens (byte_fallback), else the unknown token (consecutive ones fused with fuse_unk).
 * The work is done in the decoded domain: every token's bytes are its text with U+2581 read as
 * a space and <0xXX> as its byte, and the text has U+2581 read as a space too. That is the same
 * BPE, since the vocabulary has no space of its own (checked: a space in a token, or two tokens
 * that differ only by U+2581 against space, is refused), and what decode gives directly.
 * Invariants (on success): t->ix indexes every model.vocab token but the <0xXX> ones, by its
 * decoded bytes; every merge's parts and result are indexed tokens; byte_fb[b] is <0xXX> or -1.
 * What is read and refused, and why: docs/tokenizer.md, "SentencePiece-style BPE". */
#include "io/tokenizer_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SP_SPACE "\xe2\x96\x81" /* U+2581, SentencePiece's space */

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static int is_type(const cJSON *o, const char *type) {
    const cJSON *ty = get(o, "type");
    return cJSON_IsString(ty) && strcmp(ty->valuestring, type) == 0;
}

static int str_is(const cJSON *o, const char *s) { return cJSON_IsString(o) && strcmp(o->valuestring, s) == 0; }

/* s[0, n) with every U+2581 read as a space, into out (room for n bytes); its length */
static size_t to_decoded(const char *s, size_t n, unsigned char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (i + 3 <= n && memcmp(s + i, SP_SPACE, 3) == 0) {
            out[o++] = ' ';
            i += 3;
        } else {
            out[o++] = (unsigned char)s[i++];
        }
    }
    return o;
}

/* "<0xXX>" (upper-case hex, as SentencePiece writes it) -> XX, else -1 */
static int byte_token(const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    if (strlen(s) != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    const char *h = strchr(hex, s[3]), *l = strchr(hex, s[4]);
    return h && l && s[3] && s[4] ? (int)((h - hex) << 4 | (l - hex)) : -1;
}

static int is_sp_normalizer(const cJSON *n) { return is_type(n, "Replace") || is_type(n, "Prepend"); }

int tok_is_sp(const void *root_json) {
    const cJSON *root = root_json, *norm = get(root, "normalizer");
    if (cJSON_IsTrue(get(get(root, "model"), "byte_fallback")) || is_sp_normalizer(norm) ||
        is_type(get(root, "pre_tokenizer"), "Metaspace"))
        return 1;
    const cJSON *item;
    if (is_type(norm, "Sequence")) cJSON_ArrayForEach(item, get(norm, "normalizers")) if (is_sp_normalizer(item)) return 1;
    return 0;
}

/* One normalizer of the chain: Replace " " -> U+2581 (required), Prepend U+2581 (optional). */
static hpt_status one_normalizer(hpt_tokenizer *t, const char *path, const cJSON *n, int *replace) {
    if (is_type(n, "Replace") && str_is(get(get(n, "pattern"), "String"), " ") && str_is(get(n, "content"), SP_SPACE)) {
        *replace = 1;
        return HPT_OK;
    }
    if (is_type(n, "Prepend") && str_is(get(n, "prepend"), SP_SPACE)) {
        t->sp_prepend = SP_PREPEND_ALL;
        return HPT_OK;
    }
    const cJSON *ty = get(n, "type");
    return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: normalizer '%s' is not supported with SentencePiece-style "
                    "BPE (Replace \" \" -> \"\\u2581\", Prepend \"\\u2581\")", path,
                    cJSON_IsString(ty) ? ty->valuestring : "?");
}

/* Metaspace (newer conversions of Llama 2, Mistral): spaces become "\u2581" (as Replace), one is
 * put before a segment that does not start with one (prepend_scheme always; first: only the
 * text's first segment; never), and with split the segment is cut before each "\u2581". The
 * older add_prefix_space: true is "always", false "never". */
static hpt_status metaspace(hpt_tokenizer *t, const char *path, const cJSON *pre, int *replace) {
    const cJSON *scheme = get(pre, "prepend_scheme"), *split = get(pre, "split");
    if (!str_is(get(pre, "replacement"), SP_SPACE))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: a Metaspace replacement other than \"\\u2581\" is not "
                        "supported", path);
    if (t->sp_prepend)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: a Prepend normalizer and a Metaspace pre_tokenizer together "
                        "are not supported", path);
    if (cJSON_IsFalse(get(pre, "add_prefix_space")) || str_is(scheme, "never")) t->sp_prepend = 0;
    else if (str_is(scheme, "first")) t->sp_prepend = SP_META_FIRST;
    else if (!scheme || cJSON_IsNull(scheme) || str_is(scheme, "always")) t->sp_prepend = SP_META_ALWAYS;
    else return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: Metaspace prepend_scheme '%s' is not supported", path,
                         cJSON_IsString(scheme) ? scheme->valuestring : "?");
    t->sp_split_all = !cJSON_IsFalse(split); /* Hugging Face's default: split */
    *replace = 1;
    return HPT_OK;
}

static hpt_status check_pipeline(hpt_tokenizer *t, const char *path, const cJSON *root) {
    const cJSON *norm = get(root, "normalizer"), *pre = get(root, "pre_tokenizer"), *item;
    int replace = 0;
    if (is_type(norm, "Sequence")) {
        cJSON_ArrayForEach(item, get(norm, "normalizers")) HPT_CHECK(one_normalizer(t, path, item, &replace));
    } else if (cJSON_IsObject(norm)) {
        HPT_CHECK(one_normalizer(t, path, norm, &replace));
    }
    if (is_type(pre, "Metaspace")) HPT_CHECK(metaspace(t, path, pre, &replace));
    if (!replace)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: byte_fallback BPE without the normalizer Replace \" \" -> "
                        "\"\\u2581\" or a Metaspace pre_tokenizer is not supported", path);
    /* After Replace no space is left, so a Split on " " splits nothing: it is accepted, and
     * ignored, in every behavior but invert. */
    if (cJSON_IsObject(pre) && !is_type(pre, "Metaspace") &&
        !(is_type(pre, "Split") && str_is(get(get(pre, "pattern"), "String"), " ") && !cJSON_IsTrue(get(pre, "invert"))))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: with SentencePiece-style BPE the pre_tokenizer must be none, "
                        "Metaspace or a Split on the string \" \" (which splits nothing after the normalizer)", path);
    const cJSON *model = get(root, "model"), *dropout = get(model, "dropout");
    const cJSON *pfx = get(model, "continuing_subword_prefix"), *sfx = get(model, "end_of_word_suffix");
    if ((cJSON_IsNumber(dropout) && dropout->valuedouble > 0) || cJSON_IsTrue(get(model, "ignore_merges")) ||
        (cJSON_IsString(pfx) && pfx->valuestring[0]) || (cJSON_IsString(sfx) && sfx->valuestring[0]))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: dropout, ignore_merges or subword affixes are not supported "
                        "with SentencePiece-style BPE", path);
    cJSON_ArrayForEach(item, get(root, "added_tokens")) {
        if (cJSON_IsTrue(get(item, "lstrip")) || cJSON_IsTrue(get(item, "rstrip")) ||
            cJSON_IsTrue(get(item, "single_word")) || cJSON_IsTrue(get(item, "normalized"))) {
            const cJSON *c = get(item, "content");
            return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: added token '%.40s' has lstrip, rstrip, single_word or "
                            "normalized set: not supported", path, cJSON_IsString(c) ? c->valuestring : "?");
        }
    }
    return HPT_OK;
}

/* model.vocab and added_tokens -> the decoded token table; byte tokens noted in byte_of[id]
 * (-1: not one); the index over the other model.vocab tokens. */
static hpt_status load_vocab(hpt_tokenizer *t, const char *path, const cJSON *vocab, const cJSON *added,
                             int byte_fallback) {
    int V = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, vocab) {
        double d = item->valuedouble;
        if (!cJSON_IsNumber(item) || !(d >= 0 && d < TOK_MAX_VOCAB) || d != floor(d))
            return hpt_fail(HPT_ERR_FORMAT, "%s: model.vocab token \"%.40s\" has an id that is not an "
                            "integer in [0, %d)", path, item->string, TOK_MAX_VOCAB);
        V = HPT_MAX(V, (int)d + 1);
    }
    cJSON_ArrayForEach(item, added) {
        const cJSON *id = get(item, "id"), *content = get(item, "content");
        if (!cJSON_IsNumber(id) || !(id->valuedouble >= 0 && id->valuedouble < TOK_MAX_VOCAB) ||
            !cJSON_IsString(content))
            return hpt_fail(HPT_ERR_FORMAT, "%s: an added token lacks an integer id or a content", path);
        V = HPT_MAX(V, (int)id->valuedouble + 1);
    }
    const char **text = calloc((size_t)V + 1, sizeof *text); /* each id's string (not owned) */
    unsigned char *in_vocab = calloc((size_t)V + 1, 1);
    hpt_status s = HPT_OK;
    size_t total = 0, cap = 16;
    if (!text || !in_vocab) { s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path); goto done; }
    cJSON_ArrayForEach(item, vocab) {
        int id = (int)item->valuedouble;
        if (text[id]) { s = hpt_fail(HPT_ERR_FORMAT, "%s: id %d appears twice in model.vocab", path, id); goto done; }
        if (strchr(item->string, ' ')) {
            s = hpt_fail(HPT_ERR_UNSUPPORTED, "%s: token \"%.40s\" (id %d) has a space: not a SentencePiece "
                         "vocabulary (spaces are \"\\u2581\")", path, item->string, id);
            goto done;
        }
        text[id] = item->string;
        in_vocab[id] = 1;
    }
    cJSON_ArrayForEach(item, added) {
        int id = (int)get(item, "id")->valuedouble;
        if (!text[id]) text[id] = get(item, "content")->valuestring;
    }
    for (int i = 0; i < V; i++) {
        if (!text[i]) { s = hpt_fail(HPT_ERR_FORMAT, "%s: id %d has no token (a hole in the vocabulary)", path, i); goto done; }
        total += strlen(text[i]);
    }
    t->V = V;
    if (!(t->tok_off = malloc(((size_t)V + 1) * sizeof *t->tok_off)) || !(t->tok_bytes = malloc(total + 1))) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
        goto done;
    }
    size_t o = 0;
    for (int i = 0; i < V; i++) {
        t->tok_off[i] = (uint32_t)o;
        int b = in_vocab[i] ? byte_token(text[i]) : -1;
        if (b >= 0) {
            t->tok_bytes[o++] = (unsigned char)b;
            if (byte_fallback && t->byte_fb[b] < 0) t->byte_fb[b] = i;
            in_vocab[i] = 2; /* not indexed */
        } else {
            o += to_decoded(text[i], strlen(text[i]), t->tok_bytes + o);
        }
    }
    t->tok_off[V] = (uint32_t)o;
    while (cap < 2 * (size_t)V) cap *= 2;
    tok_index *ix = &t->ix;
    if (!(ix->slot = malloc(cap * sizeof *ix->slot))) { s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path); goto done; }
    ix->mask = cap - 1;
    memset(ix->slot, 0xff, cap * sizeof *ix->slot);
    for (int32_t id = 0; id < V; id++) {
        if (in_vocab[id] != 1) continue;
        size_t len = t->tok_off[id + 1] - t->tok_off[id];
        const unsigned char *b = t->tok_bytes + t->tok_off[id];
        int32_t other = tok_index_find(t, ix, b, len);
        if (other >= 0) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: tokens %d and %d are the same text (\"\\u2581\" read as a space)",
                         path, other, id);
            goto done;
        }
        size_t k = tok_hash_bytes(b, len) & ix->mask;
        while (ix->slot[k] >= 0) k = (k + 1) & ix->mask;
        ix->slot[k] = id;
    }
done:
    free(text);
    free(in_vocab);
    return s;
}

/* model.merges ("a b" strings or ["a", "b"] pairs): rank = index. */
static hpt_status load_merges(hpt_tokenizer *t, const char *path, const cJSON *merges) {
    int n = cJSON_GetArraySize(merges);
    if (tok_pairs_alloc(t, (size_t)n) != 0) return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
    unsigned char *buf = malloc(1 << 17);
    if (!buf) return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
    hpt_status s = HPT_OK;
    int32_t rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(m)) { /* a SentencePiece token has no space: the one space splits */
            const char *sp = strchr(m->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = m->valuestring;
                la = (size_t)(sp - a);
                b = sp + 1;
                lb = strlen(b);
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            a = cJSON_GetArrayItem(m, 0)->valuestring;
            b = cJSON_GetArrayItem(m, 1)->valuestring;
            la = strlen(a);
            lb = strlen(b);
        }
        if (!a || la == 0 || lb == 0 || la + lb > (1 << 17)) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: merge %d is not two tokens", path, rank);
            break;
        }
        size_t na = to_decoded(a, la, buf), nb = to_decoded(b, lb, buf + na);
        int32_t ia = tok_index_find(t, &t->ix, buf, na), ib = tok_index_find(t, &t->ix, buf + na, nb);
        int32_t im = ia < 0 || ib < 0 ? -1 : tok_index_find(t, &t->ix, buf, na + nb);
        if (im < 0) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: merge %d ('%.*s %.*s') %s", path, rank, (int)HPT_MIN(la, 40), a,
                         (int)HPT_MIN(lb, 40), b, ia < 0 || ib < 0 ? "merges a token that is not in model.vocab"
                                                                  : "makes a token that is not in model.vocab");
            break;
        }
        tok_pair_put(t, ia, ib, rank++, im);
    }
    free(buf);
    return s;
}

/* The characters that some token has right before a "\u2581" (Gemma 3: ">", in ">\u2581</"): a
 * segment may be cut into chunks before every other space, as no merge can cross there (every
 * merge makes a token), and the chunks are encoded apart and cached. More than
 * TOK_SP_GLUE_MAX such characters, or no token for "\u2581", and the segment stays whole. */
static void find_glue(hpt_tokenizer *t) {
    static const unsigned char space = ' ';
    t->sp_split = tok_index_find(t, &t->ix, &space, 1) >= 0;
    t->n_sp_glue = 0;
    for (int32_t id = 0; id < t->V && t->sp_split; id++) {
        const unsigned char *b = t->tok_bytes + t->tok_off[id];
        size_t n = t->tok_off[id + 1] - t->tok_off[id];
        if (tok_index_find(t, &t->ix, b, n) != id) continue; /* byte and added-only tokens never merge */
        for (size_t j = 1; j < n; j++) {
            if (b[j] != ' ' || b[j - 1] == ' ') continue;
            size_t s = j - 1;
            while (s > 0 && (b[s] & 0xc0) == 0x80) s--;
            uint32_t cp;
            if (tok_utf8_decode(b + s, j - s, &cp) != j - s) { t->sp_split = 0; break; }
            int known = 0;
            for (int k = 0; k < t->n_sp_glue; k++) known |= t->sp_glue[k] == cp;
            if (known) continue;
            if (t->n_sp_glue == TOK_SP_GLUE_MAX) { t->sp_split = 0; break; }
            t->sp_glue[t->n_sp_glue++] = cp;
        }
    }
}

hpt_status tok_load_sp(hpt_tokenizer *t, const char *path, const void *root_json) {
    const cJSON *root = root_json, *model = get(root, "model");
    const cJSON *vocab = get(model, "vocab"), *merges = get(model, "merges"), *added = get(root, "added_tokens");
    HPT_CHECK(check_pipeline(t, path, root));
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges) || (added && !cJSON_IsArray(added) && !cJSON_IsNull(added)))
        return hpt_fail(HPT_ERR_FORMAT, "%s: model.vocab (an object), model.merges and added_tokens (arrays) "
                        "are expected", path);
    if (!cJSON_IsArray(added)) added = NULL;
    HPT_CHECK(load_vocab(t, path, vocab, added, cJSON_IsTrue(get(model, "byte_fallback"))));
    HPT_CHECK(load_merges(t, path, merges));
    const cJSON *unk = get(model, "unk_token");
    if (cJSON_IsString(unk)) {
        unsigned char buf[256];
        size_t n = strlen(unk->valuestring);
        if (n > sizeof buf || (t->unk = tok_index_find(t, &t->ix, buf, to_decoded(unk->valuestring, n, buf))) < 0)
            return hpt_fail(HPT_ERR_FORMAT, "%s: unk_token '%.40s' is not in model.vocab", path, unk->valuestring);
    }
    t->fuse_unk = cJSON_IsTrue(get(model, "fuse_unk"));
    int n = added ? cJSON_GetArraySize(added) : 0, k = 0;
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    unsigned char *ctl = malloc((size_t)n + 1);
    const char **content = malloc(((size_t)n + 1) * sizeof *content);
    hpt_status s = HPT_OK;
    if (!ids || !ctl || !content) {
        free(ids);
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
    } else {
        const cJSON *item;
        if (added) cJSON_ArrayForEach(item, added) {
            ids[k] = (int32_t)get(item, "id")->valuedouble;
            ctl[k] = !cJSON_IsFalse(get(item, "special"));
            content[k++] = get(item, "content")->valuestring;
        }
        s = tok_set_specials(t, ids, ctl, content, k); /* t owns ids */
    }
    free(ctl);
    free(content);
    HPT_CHECK(s);
    if (!(t->cache = calloc(CACHE_SLOTS, sizeof *t->cache))) /* unused here; freed with t */
        return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
    find_glue(t);
    t->sp = 1;
    t->can_encode = 1;
    return HPT_OK;
}

/* ---- encode ---------------------------------------------------------------------------------- */

/* A character outside the vocabulary: its bytes' <0xXX> tokens, else the unknown token. */
static hpt_status push_fallback(hpt_tokenizer *t, const unsigned char *c, size_t k, size_t *n, size_t at) {
    int all = 1;
    for (size_t j = 0; j < k; j++) all &= t->byte_fb[c[j]] >= 0;
    if (all) {
        for (size_t j = 0; j < k; j++) t->sym_id[(*n)++] = t->byte_fb[c[j]];
        return HPT_OK;
    }
    if (t->unk < 0)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "encode: the character at byte %zu is not in %s's vocabulary, "
                        "which has neither byte fallback nor an unk_token", at, t->source);
    t->sym_id[(*n)++] = t->unk;
    return HPT_OK;
}

/* BPE of one chunk u[0, len) (the "\u2581" before it if prepend), appended to v, which has room. */
static hpt_status sp_chunk(hpt_tokenizer *t, const unsigned char *u, size_t len, int prepend, idvec *v) {
    cache_slot *slot = NULL;
    uint64_t hash = 0;
    if (!prepend && len >= 2 && len <= CACHE_KEY_MAX) {
        hash = tok_hash_bytes(u, len);
        slot = &t->cache[hash & (CACHE_SLOTS - 1)];
        if (slot->len == len && slot->hash == hash && memcmp(slot->key, u, len) == 0) {
            memcpy(v->ids + v->n, slot->ids, slot->n_ids * sizeof(int32_t));
            v->n += slot->n_ids;
            return HPT_OK;
        }
    }
    size_t n = 0;
    static const unsigned char space = ' ';
    if (prepend) {
        int32_t id = tok_index_find(t, &t->ix, &space, 1);
        if (id >= 0) t->sym_id[n++] = id;
        else HPT_CHECK(push_fallback(t, (const unsigned char *)SP_SPACE, 3, &n, 0));
    }
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = tok_utf8_decode(u + i, len - i, &cp);
        if (k == 0) { /* not UTF-8 (no counterpart in Hugging Face): the byte's token */
            HPT_CHECK(push_fallback(t, u + i, 1, &n, i));
            i++;
            continue;
        }
        int sp = cp == ' ' || cp == 0x2581; /* both are "\u2581" after the normalizer */
        int32_t id = tok_index_find(t, &t->ix, sp ? &space : u + i, sp ? 1 : k);
        if (id >= 0) t->sym_id[n++] = id;
        else HPT_CHECK(push_fallback(t, sp ? (const unsigned char *)SP_SPACE : u + i, sp ? 3 : k, &n, i));
        i += k;
    }
    for (size_t i = 0; i < n; i++) {
        t->sym_next[i] = i + 1 < n ? (int32_t)(i + 1) : -1;
        t->sym_prev[i] = (int32_t)i - 1;
    }
    tok_merge_symbols(t, n);
    size_t first = v->n;
    for (int32_t i = 0; i >= 0 && n > 0; i = t->sym_next[i]) {
        int32_t id = t->sym_id[i];
        if (t->fuse_unk && id == t->unk && v->n > first && v->ids[v->n - 1] == t->unk) continue;
        v->ids[v->n++] = id;
    }
    size_t n_ids = v->n - first;
    if (slot && n_ids <= CACHE_IDS_MAX) {
        slot->hash = hash;
        slot->len = (uint8_t)len;
        slot->n_ids = (uint8_t)n_ids;
        memcpy(slot->key, u, len);
        memcpy(slot->ids, v->ids + first, n_ids * sizeof(int32_t));
    }
    return HPT_OK;
}

/* 1 if a chunk may start at the space (or U+2581) after the character cp: no token has cp
 * followed by "\u2581" (t->sp_glue, found at load), so no merge crosses there. */
static int sp_cut_after(const hpt_tokenizer *t, uint32_t cp) {
    if (cp == ' ' || cp == 0x2581) return 0;
    for (int k = 0; k < t->n_sp_glue; k++)
        if (t->sp_glue[k] == cp) return 0;
    return 1;
}

hpt_status tok_sp_encode(hpt_tokenizer *t, const unsigned char *u, size_t len, unsigned where, idvec *v) {
    if (len == 0) return HPT_OK; /* Hugging Face prepends nothing to an empty segment */
    if (len > INT32_MAX - 2) return hpt_fail(HPT_ERR_UNSUPPORTED, "a segment of %zu bytes is too long", len);
    int spaced = u[0] == ' ' || (len >= 3 && memcmp(u, SP_SPACE, 3) == 0), cont = (where & TOK_SEG_CONT) != 0;
    int prepend = t->sp_prepend == SP_PREPEND_ALL ? !cont
                : t->sp_prepend == SP_META_ALWAYS ? !cont && !spaced
                : t->sp_prepend == SP_META_FIRST ? (where & TOK_SEG_FIRST) && !cont && !spaced : 0;
    if (!t->sp_split && !t->sp_split_all) {
        if (tok_scratch_reserve(t, len + 2) != 0 || tok_vec_reserve(v, len + 2) != 0)
            return hpt_fail(HPT_ERR_OOM, "out of memory encoding %zu bytes", len);
        return sp_chunk(t, u, len, prepend, v);
    }
    /* chunks: each starts at a space whose left neighbour no token glues to it (below) */
    if (tok_vec_reserve(v, len + 2) != 0) return hpt_fail(HPT_ERR_OOM, "out of memory encoding %zu bytes", len);
    size_t start = 0, i = 0;
    uint32_t prev = ' ';
    while (i <= len) {
        uint32_t cp = 0;
        size_t k = i < len ? tok_utf8_decode(u + i, len - i, &cp) : 0;
        int cut = i == len || (k > 0 && (cp == ' ' || cp == 0x2581) && i > start &&
                               (t->sp_split_all || sp_cut_after(t, prev)));
        if (cut) {
            if (tok_scratch_reserve(t, i - start + 2) != 0)
                return hpt_fail(HPT_ERR_OOM, "out of memory encoding %zu bytes", len);
            HPT_CHECK(sp_chunk(t, u + start, i - start, prepend, v));
            prepend = 0;
            start = i;
        }
        if (i == len) break;
        prev = k ? cp : 0xFFFFFFFFu; /* a byte that is not UTF-8: a fallback byte, never glued */
        i += k ? k : 1;
    }
    return HPT_OK;
}
