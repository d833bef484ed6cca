/* tokenizer_hf.c: loads the byte-level BPE tokenizers of the Llama and Qwen families into the
 * encoder of tokenizer.c: Hugging Face's tokenizer.json (model.type BPE, vocab, merges,
 * ignore_merges, added tokens, a Split or ByteLevel pre-tokenizer, an NFC normalizer) and
 * tiktoken's tokenizer.model (Meta's Llama 3: ranks, no merges: every split of a token into two
 * tokens is given its rank); a SentencePiece-style file (byte_fallback, a Replace normalizer)
 * goes to tokenizer_sp.c. The file's pattern is rewritten for PCRE2 (\p{L}, \p{N} from
 * tokenizer_unicode.c, \s as Unicode's White_Space). What is read and refused, and why:
 * docs/tokenizer.md, "Llama 3" and "Qwen".
 * Invariants (on success): ids 0..V-1 each have bytes (added tokens: their content); the base
 * vocabulary's bytes are distinct and indexed in t->ix; every merge's parts and result are base
 * tokens; each special's id is in [0, V); a normalizer other than NFC, subword affixes, a prefix
 * space or added-token flags other than special are refused, never ignored (they would change
 * the ids). */
#include "io/tokenizer_int.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Meta's tokenizer.py pat_str for Llama 3 (tiktoken files carry no pattern). */
static const char k_llama3_pattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* ---- the pattern ------------------------------------------------------------------------- */

/* Rewrites a Hugging Face / tiktoken pattern for PCRE2 (the classes above). */
static void translate_pattern(const char *p, size_t n, strbuf *out) {
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            const uint32_t *r = NULL;
            size_t nr = 0, skip = 1;
            int negate = 0;
            if ((e == 'p' || e == 'P') && i + 4 < n && p[i + 2] == '{' && p[i + 4] == '}' &&
                (p[i + 3] == 'L' || p[i + 3] == 'N')) {
                r = p[i + 3] == 'L' ? tok_letter : tok_number;
                nr = p[i + 3] == 'L' ? n_tok_letter : n_tok_number;
                negate = e == 'P';
                skip = 4;
            } else if (e == 's' || e == 'S') {
                r = tok_white_space;
                nr = n_tok_white_space;
                negate = e == 'S';
            }
            if (r && !(in_class && negate)) {
                if (!in_class) sb_add(out, negate ? "[^" : "[");
                sb_ranges(out, r, nr);
                if (!in_class) sb_add(out, "]");
                i += skip;
            } else { /* any other escape (or a negated class inside a class): PCRE2's */
                sb_addn(out, p + i, 2);
                i++;
            }
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = 1;
        } else if (c == ']' && in_class) {
            in_class = 0;
        }
        sb_addn(out, &c, 1);
    }
}

static hpt_status compile_hf_pattern(hpt_tokenizer *t, const char *pat, size_t n) {
    strbuf b = {0};
    translate_pattern(pat, n, &b);
    hpt_status s = b.oom ? hpt_fail(HPT_ERR_OOM, "out of memory building the tokenizer's pattern")
                         : tok_compile(t, b.s, b.len, "the tokenizer's pre-tokenizer pattern");
    free(b.s);
    return s;
}

/* ---- shared steps ------------------------------------------------------------------------- */

/* The special (ctl) added token spelt text, -1 if none. */
static int find_special(const hpt_tokenizer *t, const char *text) {
    size_t n = strlen(text);
    for (int k = 0; k < t->n_special; k++)
        if (t->special_ctl[k] && t->special_off[k + 1] - t->special_off[k] == n &&
            memcmp(t->special_text + t->special_off[k], text, n) == 0)
            return t->special[k];
    return -1;
}

/* The added tokens (ids, ctl, content: tok_set_added's), then eot and bos by their usual names
 * among the special ones (Gemma's "<s>" is an HTML tag, not its begin-of-text). */
hpt_status tok_set_specials(hpt_tokenizer *t, int32_t *ids, const unsigned char *ctl,
                            const char *const *content, int n) {
    HPT_CHECK(tok_set_added(t, ids, ctl, content, n));
    static const char *const eot[] = {"<|end_of_text|>", "<|endoftext|>", "<eos>", "</s>"};
    static const char *const bos[] = {"<|begin_of_text|>", "<bos>", "<s>"};
    t->eot = -1;
    for (size_t i = 0; i < 4 && t->eot < 0; i++) t->eot = find_special(t, eot[i]);
    for (size_t i = 0; i < 3 && t->bos < 0; i++) t->bos = find_special(t, bos[i]);
    return HPT_OK;
}

/* ---- tokenizer.json ----------------------------------------------------------------------- */

static const cJSON *get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

static int is_true(const cJSON *o, const char *key) { return cJSON_IsTrue(get(o, key)); }

/* A subword affix that is set (an empty string is none) */
static int affix_set(const cJSON *model, const char *key) {
    const cJSON *a = get(model, key);
    return cJSON_IsString(a) && a->valuestring[0] != '\0';
}

/* The added tokens' flags hptrain does not implement: lstrip, rstrip, single_word, and
 * normalized where a normalizer would apply (they change where a token is found). */
static hpt_status check_added(const char *path, const cJSON *added, int has_normalizer) {
    const cJSON *item;
    cJSON_ArrayForEach(item, added) {
        const cJSON *c = get(item, "content");
        if (is_true(item, "lstrip") || is_true(item, "rstrip") || is_true(item, "single_word") ||
            (has_normalizer && is_true(item, "normalized")))
            return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: added token '%.40s' has lstrip, rstrip, single_word "
                            "or (with a normalizer) normalized set: not supported", path,
                            cJSON_IsString(c) ? c->valuestring : "?");
    }
    return HPT_OK;
}

/* ctl[k]: 1 if added token k is special ("special" absent: special) */
static unsigned char *added_ctl(const cJSON *added, int n) {
    unsigned char *ctl = malloc((size_t)n + 1);
    int k = 0;
    const cJSON *item;
    if (ctl && added) cJSON_ArrayForEach(item, added) ctl[k++] = !cJSON_IsFalse(get(item, "special"));
    return ctl;
}

/* Finds the pre-tokenizer's pattern: a Split's Regex, or ByteLevel's use_regex (GPT-2's). Sets
 * *pat (NULL: GPT-2's) and *byte_level. */
static hpt_status find_pattern(const char *path, const cJSON *pt, const char **pat, int *byte_level,
                               int depth) {
    const cJSON *type = get(pt, "type");
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(ty, "Sequence") && depth == 0) {
        const cJSON *item;
        cJSON_ArrayForEach(item, get(pt, "pretokenizers")) HPT_CHECK(find_pattern(path, item, pat, byte_level, 1));
        return HPT_OK;
    }
    if (!strcmp(ty, "Split")) {
        const cJSON *re = get(get(pt, "pattern"), "Regex"), *beh = get(pt, "behavior");
        if (*pat || !cJSON_IsString(re) || is_true(pt, "invert") ||
            (cJSON_IsString(beh) && strcmp(beh->valuestring, "Isolated") != 0))
            return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: a pre_tokenizer Split other than one Regex with "
                            "behavior Isolated is not supported", path);
        *pat = re->valuestring;
        return HPT_OK;
    }
    if (!strcmp(ty, "ByteLevel")) {
        if (is_true(pt, "add_prefix_space"))
            return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: ByteLevel add_prefix_space is not supported", path);
        *byte_level = cJSON_IsFalse(get(pt, "use_regex")) ? 1 : 2; /* 2: with GPT-2's pattern */
        return HPT_OK;
    }
    return hpt_fail(HPT_ERR_UNSUPPORTED, "%s: pre_tokenizer type '%s' is not supported (byte-level "
                    "BPE: Split and ByteLevel)", path, ty);
}

/* model.vocab and added_tokens -> the token table; t->V, n_base (1 + the largest vocab id). */
static hpt_status load_vocab(hpt_tokenizer *t, const char *path, const cJSON *vocab,
                             const cJSON *added, int32_t *n_base) {
    int V = 0, nb = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, vocab) {
        double d = item->valuedouble;
        if (!cJSON_IsNumber(item) || !(d >= 0 && d < TOK_MAX_VOCAB) || d != floor(d))
            return hpt_fail(HPT_ERR_FORMAT, "%s: model.vocab token \"%.40s\" has an id that is not an "
                            "integer in [0, %d)", path, item->string, TOK_MAX_VOCAB);
        nb = HPT_MAX(nb, (int)d + 1);
    }
    V = nb;
    cJSON_ArrayForEach(item, added) {
        const cJSON *id = get(item, "id"), *content = get(item, "content");
        if (!cJSON_IsNumber(id) || !(id->valuedouble >= 0 && id->valuedouble < TOK_MAX_VOCAB) ||
            !cJSON_IsString(content))
            return hpt_fail(HPT_ERR_FORMAT, "%s: an added token lacks an integer id or a content", path);
        V = HPT_MAX(V, (int)id->valuedouble + 1);
    }
    if (nb < 256) return hpt_fail(HPT_ERR_FORMAT, "%s: model.vocab has %d tokens (a byte-level BPE has "
                                  "at least 256)", path, nb);
    /* lengths: a token's bytes are at most its UTF-8 length */
    uint32_t *len = calloc((size_t)V + 1, sizeof *len);
    unsigned char *have = calloc((size_t)V, 1);
    size_t total = 0;
    hpt_status s = HPT_OK;
    if (!len || !have) { s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path); goto done; }
    cJSON_ArrayForEach(item, vocab) {
        int id = (int)item->valuedouble;
        if (have[id]) { s = hpt_fail(HPT_ERR_FORMAT, "%s: id %d appears twice in model.vocab", path, id); goto done; }
        have[id] = 1;
        len[id] = (uint32_t)strlen(item->string);
    }
    cJSON_ArrayForEach(item, added) {
        int id = (int)get(item, "id")->valuedouble;
        if (!have[id]) len[id] = (uint32_t)strlen(get(item, "content")->valuestring);
        have[id] |= 2;
    }
    for (int i = 0; i < V; i++) {
        if (!have[i]) { s = hpt_fail(HPT_ERR_FORMAT, "%s: id %d has no token (a hole in the vocabulary)", path, i); goto done; }
        total += len[i];
    }
    t->V = V;
    if (!(t->tok_off = malloc(((size_t)V + 1) * sizeof *t->tok_off)) || !(t->tok_bytes = malloc(total + 1))) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
        goto done;
    }
    size_t o = 0;
    for (int i = 0; i < V; i++) {
        t->tok_off[i] = (uint32_t)o;
        o += len[i];
    }
    t->tok_off[V] = (uint32_t)o;
    memset(len, 0, ((size_t)V + 1) * sizeof *len); /* now: bytes written */
    cJSON_ArrayForEach(item, vocab) {
        int id = (int)item->valuedouble;
        long k = tok_alphabet_to_bytes(item->string, strlen(item->string), t->tok_bytes + t->tok_off[id]);
        if (k < 0) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: token \"%.40s\" (id %d) has a character outside the "
                         "byte-level alphabet", path, item->string, id);
            goto done;
        }
        len[id] = (uint32_t)k;
    }
    cJSON_ArrayForEach(item, added) {
        int id = (int)get(item, "id")->valuedouble;
        if (have[id] & 1) continue; /* also in model.vocab (GPT-2's <|endoftext|>) */
        const char *c = get(item, "content")->valuestring;
        len[id] = (uint32_t)strlen(c);
        memcpy(t->tok_bytes + t->tok_off[id], c, len[id]);
    }
    o = 0; /* pack: alphabet tokens are shorter in bytes than in UTF-8 */
    for (int i = 0; i < V; i++) {
        memmove(t->tok_bytes + o, t->tok_bytes + t->tok_off[i], len[i]);
        t->tok_off[i] = (uint32_t)o;
        o += len[i];
    }
    t->tok_off[V] = (uint32_t)o;
    *n_base = nb;
done:
    free(len);
    free(have);
    return s;
}

/* model.merges: rank = index; each "a b" (or ["a", "b"]) resolved to ids. */
static hpt_status load_merges(hpt_tokenizer *t, const char *path, const cJSON *merges) {
    int n = cJSON_GetArraySize(merges);
    if (tok_pairs_alloc(t, (size_t)n) != 0) return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
    unsigned char *buf = malloc(1 << 16);
    if (!buf) return hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
    hpt_status s = HPT_OK;
    int32_t rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *b = NULL;
        size_t la = 0, lb = 0;
        if (cJSON_IsString(m)) {
            const char *sp = strchr(m->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = m->valuestring;
                la = (size_t)(sp - a);
                b = sp + 1;
                lb = strlen(b);
            }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 0)) && cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            a = cJSON_GetArrayItem(m, 0)->valuestring;
            b = cJSON_GetArrayItem(m, 1)->valuestring;
            la = strlen(a);
            lb = strlen(b);
        }
        if (!a || la == 0 || lb == 0 || la + lb > (1 << 16)) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: merge %d is not two tokens", path, rank);
            break;
        }
        long na = tok_alphabet_to_bytes(a, la, buf);
        long nb = na < 0 ? -1 : tok_alphabet_to_bytes(b, lb, buf + na);
        int32_t ia = na < 0 ? -1 : tok_index_find(t, &t->ix, buf, (size_t)na);
        int32_t ib = nb < 0 ? -1 : tok_index_find(t, &t->ix, buf + na, (size_t)nb);
        int32_t im = ia < 0 || ib < 0 ? -1 : tok_index_find(t, &t->ix, buf, (size_t)(na + nb));
        if (im < 0) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: merge %d ('%.*s %.*s') %s", path, rank, (int)HPT_MIN(la, 40),
                         a, (int)HPT_MIN(lb, 40), b,
                         na < 0 || nb < 0 ? "has a character outside the byte-level alphabet"
                         : ia < 0 || ib < 0 ? "merges a token that is not in model.vocab"
                                            : "makes a token that is not in model.vocab");
            break;
        }
        tok_pair_put(t, ia, ib, rank++, im);
    }
    free(buf);
    return s;
}

hpt_status tok_load_hf_json(const char *path, hpt_tokenizer **out) {
    *out = NULL;
    char *text;
    size_t size;
    HPT_CHECK(tok_read_all(path, &text, &size));
    cJSON *root = cJSON_ParseWithLength(text, size);
    free(text);
    if (!root) return hpt_fail(HPT_ERR_FORMAT, "%s is not valid JSON", path);
    hpt_tokenizer *t = tok_new(path);
    int32_t *specials = NULL;
    hpt_status s = HPT_OK;
    const cJSON *model = get(root, "model"), *type = get(model, "type");
    const char *pat = NULL;
    int byte_level = 0, n_special = 0;
    int32_t n_base = 0, dup;
    if (!t) { s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path); goto done; }
    if (!cJSON_IsObject(model)) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s has no \"model\" object: not a Hugging Face tokenizer.json", path);
        goto done;
    }
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0) {
        s = hpt_fail(HPT_ERR_UNSUPPORTED, "%s: model type %s is not BPE; hptrain reads byte-level BPE "
                     "tokenizers (GPT-2, Llama 3) only", path, cJSON_IsString(type) ? type->valuestring : "(none)");
        goto done;
    }
    if (tok_is_sp(root)) { /* Gemma, Llama 2: tokenizer_sp.c */
        if ((s = tok_load_sp(t, path, root)) != HPT_OK) goto done;
        cJSON_Delete(root);
        *out = t;
        return HPT_OK;
    }
    const cJSON *norm = get(root, "normalizer");
    const cJSON *norm_type = get(norm, "type");
    if (cJSON_IsObject(norm) && !(cJSON_IsString(norm_type) && !strcmp(norm_type->valuestring, "NFC"))) {
        s = hpt_fail(HPT_ERR_UNSUPPORTED, "%s: normalizer '%s' is not supported (byte-level BPE: none or "
                     "NFC; SentencePiece-style BPE: Replace \" \" -> \"\u2581\", Prepend)", path,
                     cJSON_IsString(norm_type) ? norm_type->valuestring : "?");
        goto done;
    }
    t->nfc = cJSON_IsObject(norm);
    if (affix_set(model, "continuing_subword_prefix") || affix_set(model, "end_of_word_suffix")) {
        s = hpt_fail(HPT_ERR_UNSUPPORTED, "%s: subword affixes (continuing_subword_prefix, "
                     "end_of_word_suffix) are not supported", path);
        goto done;
    }
    if ((s = find_pattern(path, get(root, "pre_tokenizer"), &pat, &byte_level, 0)) != HPT_OK) goto done;
    if (!byte_level) {
        s = hpt_fail(HPT_ERR_UNSUPPORTED, "%s: no ByteLevel pre_tokenizer: not a byte-level BPE", path);
        goto done;
    }
    if (!pat && byte_level != 2) {
        s = hpt_fail(HPT_ERR_UNSUPPORTED, "%s: no pre-tokenizer pattern (no Split Regex, ByteLevel "
                     "without use_regex)", path);
        goto done;
    }
    const cJSON *vocab = get(model, "vocab"), *merges = get(model, "merges"), *added = get(root, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges) || (added && !cJSON_IsArray(added) && !cJSON_IsNull(added))) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s: model.vocab (an object), model.merges and added_tokens (arrays) "
                     "are expected", path);
        goto done;
    }
    if (!cJSON_IsArray(added)) added = NULL;
    if ((s = check_added(path, added, t->nfc)) != HPT_OK) goto done;
    if ((s = load_vocab(t, path, vocab, added, &n_base)) != HPT_OK) goto done;
    if (tok_index_build(t, n_base, &dup) != 0) { s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path); goto done; }
    if (dup >= 0) { s = hpt_fail(HPT_ERR_FORMAT, "%s: token %d repeats an earlier token's bytes", path, dup); goto done; }
    if ((s = load_merges(t, path, merges)) != HPT_OK) goto done;
    t->ignore_merges = is_true(model, "ignore_merges");
    s = pat ? compile_hf_pattern(t, pat, strlen(pat)) : tok_compile_gpt2(t);
    if (s != HPT_OK) goto done;
    n_special = added ? cJSON_GetArraySize(added) : 0;
    if (!(specials = malloc(((size_t)n_special + 1) * sizeof *specials))) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
        goto done;
    }
    int k = 0;
    const cJSON *item;
    if (added) cJSON_ArrayForEach(item, added) specials[k++] = (int32_t)get(item, "id")->valuedouble;
    unsigned char *ctl = added_ctl(added, k);
    if (!ctl) { s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path); goto done; }
    s = tok_set_specials(t, specials, ctl, NULL, k);
    free(ctl);
    specials = NULL; /* t owns it */
    if (s == HPT_OK) s = tok_finish_encoder(t);
done:
    cJSON_Delete(root);
    free(specials);
    if (s != HPT_OK) { hpt_tokenizer_free(t); return s; }
    *out = t;
    return HPT_OK;
}

/* ---- tiktoken's tokenizer.model ------------------------------------------------------------- */

static int b64_value(int c) {
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26
         : c >= '0' && c <= '9' ? c - '0' + 52 : c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes n base64 characters (with '=' padding) into out; -1 if malformed. */
static long b64_decode(const char *s, size_t n, unsigned char *out) {
    if (n % 4 != 0) return -1;
    long o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            if (s[i + k] == '=' && i + 4 == n && k >= 2) { v[k] = 0; pad++; continue; }
            if (pad || (v[k] = b64_value((unsigned char)s[i + k])) < 0) return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2) out[o++] = (unsigned char)(w >> 8);
        if (pad < 1) out[o++] = (unsigned char)w;
    }
    return o;
}

#define LLAMA3_N_SPECIAL 256

static void llama31_special(int k, char *buf, size_t cap) {
    static const char *const named[11] = {
        "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
        "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
        "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
    if (k < 11) snprintf(buf, cap, "%s", named[k]);
    else snprintf(buf, cap, "<|reserved_special_token_%d|>", k - 11 + 3);
}

hpt_status tok_load_tiktoken(const char *path, hpt_tokenizer **out) {
    *out = NULL;
    char *text;
    size_t size;
    HPT_CHECK(tok_read_all(path, &text, &size));
    hpt_tokenizer *t = tok_new(path);
    int32_t *specials = NULL;
    size_t n_lines = 0, line_no = 0;
    for (size_t i = 0; i < size; i++) n_lines += text[i] == '\n';
    if (size && text[size - 1] != '\n') n_lines++;
    hpt_status s = HPT_OK;
    if (!t || n_lines + LLAMA3_N_SPECIAL > TOK_MAX_VOCAB ||
        !(t->tok_off = malloc((n_lines + LLAMA3_N_SPECIAL + 1) * sizeof *t->tok_off)) ||
        !(t->tok_bytes = malloc(size + LLAMA3_N_SPECIAL * 40))) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
        goto done;
    }
    /* lines "BASE64 RANK"; ranks 0, 1, 2, ... in order (they are the ids) */
    size_t o = 0, pairs = 0;
    int32_t V = 0;
    for (char *p = text, *end = text + size; p < end; line_no++) {
        char *nl = memchr(p, '\n', (size_t)(end - p)), *e = nl ? nl : end;
        if (e > p && e[-1] == '\r') e--;
        if (e == p) { p = nl ? nl + 1 : end; continue; }
        char *sp = memchr(p, ' ', (size_t)(e - p));
        long k = sp ? b64_decode(p, (size_t)(sp - p), t->tok_bytes + o) : -1;
        char *rend = NULL;
        long rank = sp ? strtol(sp + 1, &rend, 10) : -1;
        if (k <= 0 || rend != e) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s line %zu: expected \"base64-token rank\"", path, line_no + 1);
            goto done;
        }
        if (rank != V) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s line %zu: rank %ld, expected %d (ranks are the ids, in "
                         "order)", path, line_no + 1, rank, V);
            goto done;
        }
        t->tok_off[V++] = (uint32_t)o;
        o += (size_t)k;
        pairs += (size_t)k - 1;
        p = nl ? nl + 1 : end;
    }
    int32_t n_base = V, dup;
    if (n_base < 256) {
        s = hpt_fail(HPT_ERR_FORMAT, "%s: %d tokens (a byte-level BPE has at least 256)", path, n_base);
        goto done;
    }
    for (int k = 0; k < LLAMA3_N_SPECIAL; k++) {
        char name[40];
        llama31_special(k, name, sizeof name);
        t->tok_off[V++] = (uint32_t)o;
        memcpy(t->tok_bytes + o, name, strlen(name));
        o += strlen(name);
    }
    t->tok_off[V] = (uint32_t)o;
    t->V = V;
    if (tok_index_build(t, n_base, &dup) != 0 || tok_pairs_alloc(t, pairs) != 0) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
        goto done;
    }
    if (dup >= 0) { s = hpt_fail(HPT_ERR_FORMAT, "%s: token %d repeats an earlier token's bytes", path, dup); goto done; }
    /* every split of a token into two tokens merges with the token's rank */
    for (int32_t id = 0; id < n_base; id++) {
        const unsigned char *b = t->tok_bytes + t->tok_off[id];
        size_t n = t->tok_off[id + 1] - t->tok_off[id];
        for (size_t cut = 1; cut < n; cut++) {
            int32_t a = tok_index_find(t, &t->ix, b, cut), c = a < 0 ? -1 : tok_index_find(t, &t->ix, b + cut, n - cut);
            if (c >= 0) tok_pair_put(t, a, c, id, id);
        }
    }
    t->ignore_merges = 1;
    if ((s = compile_hf_pattern(t, k_llama3_pattern, strlen(k_llama3_pattern))) != HPT_OK) goto done;
    if (!(specials = malloc(LLAMA3_N_SPECIAL * sizeof *specials))) {
        s = hpt_fail(HPT_ERR_OOM, "out of memory loading %s", path);
        goto done;
    }
    for (int k = 0; k < LLAMA3_N_SPECIAL; k++) specials[k] = n_base + k;
    unsigned char all_ctl[LLAMA3_N_SPECIAL];
    memset(all_ctl, 1, sizeof all_ctl);
    s = tok_set_specials(t, specials, all_ctl, NULL, LLAMA3_N_SPECIAL);
    specials = NULL;
    if (s == HPT_OK) s = tok_finish_encoder(t);
done:
    free(text);
    free(specials);
    if (s != HPT_OK) { hpt_tokenizer_free(t); return s; }
    *out = t;
    return HPT_OK;
}
