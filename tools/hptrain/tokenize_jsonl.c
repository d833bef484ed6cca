/* tokenize_jsonl.c: `hptrain tokenize`'s examples: JSONL lines -> tokens with a target flag
 * each and the examples' starts, for masked shards. A line is one example: {"segments": [...]}
 * (text already rendered, each segment a target or not, "special" segments encoding special
 * tokens as their ids) or {"prompt", "completion"} (the completion and end-of-text the
 * targets); the shapes and flags are in docs/targets.md. Segments are encoded apart, so a target
 * span's tokens never merge with their context's, each as the continuation it is (of text or of
 * a special token); long examples are truncated or dropped and counted; a bad line is an error
 * naming file and line. */
#include "cli.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

static int ex_push(tok_examples *e, const int32_t *ids, size_t n, uint8_t target) {
    if (e->n + n > e->cap) {
        size_t cap = e->cap ? e->cap : 1 << 16;
        while (cap < e->n + n) cap *= 2;
        uint32_t *t = realloc(e->tok, cap * sizeof *t);
        if (t) e->tok = t;
        uint8_t *g = t ? realloc(e->target, cap) : NULL;
        if (!g) return -1;
        e->target = g;
        e->cap = cap;
    }
    for (size_t i = 0; i < n; i++) {
        e->tok[e->n + i] = (uint32_t)ids[i];
        e->target[e->n + i] = target;
    }
    e->n += n;
    return 0;
}

static int ex_start(tok_examples *e) {
    if (e->n_ex == e->cap_ex) {
        size_t cap = e->cap_ex ? 2 * e->cap_ex : 1024;
        size_t *s = realloc(e->starts, cap * sizeof *s);
        if (!s) return -1;
        e->starts = s;
        e->cap_ex = cap;
    }
    e->starts[e->n_ex++] = e->n;
    return 0;
}

/* 1 if the ids of text (n of them, special tokens recognised) end with a special token: the
 * last id's bytes end the text and are not what they encode to as plain text. */
static int ends_special(hpt_tokenizer *tok, const char *text, const int32_t *ids, size_t n) {
    const char *b;
    size_t m = 0, len = strlen(text), k = 0;
    if (!n || hpt_tokenizer_decode(tok, ids[n - 1], &b, &m) != HPT_OK || !m || m > len ||
        memcmp(text + len - m, b, m) != 0)
        return 0;
    int32_t *plain = NULL;
    int special = hpt_tokenizer_encode_ex(tok, b, m, HPT_TOK_CONTINUE, &plain, &k) == HPT_OK &&
                  !(k == 1 && plain[0] == ids[n - 1]);
    free(plain);
    return special;
}

/* Encodes one piece of an example: flags say what it follows (nothing: the example's start;
 * HPT_TOK_CONTINUE: text; HPT_TOK_AFTER_SPECIAL: a special token), so that pieces encoded apart
 * give the whole text's ids wherever no merge crosses a cut (Llama 2's "\u2581" goes only where
 * the whole text has it). *after_special: the piece ended with a special token. */
static int add_text(hpt_tokenizer *tok, tok_examples *e, const char *text, int special,
                    uint8_t target, unsigned flags, int *after_special, const char *where) {
    int32_t *ids;
    size_t n;
    hpt_status s = hpt_tokenizer_encode_ex(tok, text, strlen(text),
                                           flags | (special ? HPT_TOK_SPECIAL : 0), &ids, &n);
    if (s != HPT_OK) return cli_lib_error(s, where);
    if (*text) *after_special = special && ends_special(tok, text, ids, n);
    int r = ex_push(e, ids, n, target);
    free(ids);
    return r ? cli_error("out of memory holding %zu tokens", e->n + n) : 0;
}

/* The flags of the next piece of an example: after n0's tokens, following a special or not */
static unsigned next_flags(const tok_examples *e, size_t n0, int after_special) {
    return e->n == n0 ? 0u : after_special ? HPT_TOK_AFTER_SPECIAL : HPT_TOK_CONTINUE;
}

static int add_id(tok_examples *e, int32_t id, uint8_t target) {
    if (id < 0) return 0;
    return ex_push(e, &id, 1, target) ? cli_error("out of memory holding %zu tokens", e->n) : 0;
}

/* One example (a parsed line) onto e. */
static int add_example(hpt_tokenizer *tok, const cJSON *j, int train_all, tok_examples *e,
                       const char *where) {
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(j, "segments");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    const cJSON *completion = cJSON_GetObjectItemCaseSensitive(j, "completion");
    size_t n0 = e->n;
    if (ex_start(e)) return cli_error("out of memory holding %zu examples", e->n_ex);
    int rc = 0, after = 0; /* after: the last piece ended with a special token */
    if (cJSON_IsArray(segs)) {
        const cJSON *sg;
        int k = 0;
        cJSON_ArrayForEach(sg, segs) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(sg, "text");
            const cJSON *target = cJSON_GetObjectItemCaseSensitive(sg, "target");
            const cJSON *special = cJSON_GetObjectItemCaseSensitive(sg, "special");
            if (!cJSON_IsString(text) || (target && !cJSON_IsBool(target)) ||
                (special && !cJSON_IsBool(special)))
                return cli_error("%s: segment %d needs \"text\" (a string) and may have "
                                 "\"target\" and \"special\" (true or false)", where, k);
            rc = add_text(tok, e, text->valuestring, cJSON_IsTrue(special),
                          (uint8_t)(train_all || cJSON_IsTrue(target)),
                          next_flags(e, n0, after), &after, where);
            if (rc) return rc;
            k++;
        }
    } else if (cJSON_IsString(prompt) && cJSON_IsString(completion)) {
        if ((rc = add_id(e, hpt_tokenizer_bos(tok), (uint8_t)train_all)) != 0) return rc;
        after = e->n > n0; /* after BOS */
        rc = add_text(tok, e, prompt->valuestring, 0, (uint8_t)train_all, next_flags(e, n0, after),
                      &after, where);
        if (rc) return rc;
        rc = add_text(tok, e, completion->valuestring, 0, 1, next_flags(e, n0, after), &after, where);
        if (rc) return rc;
        if ((rc = add_id(e, hpt_tokenizer_eot(tok), 1)) != 0) return rc;
    } else {
        return cli_error("%s: an example is {\"segments\": [{\"text\", \"target\"}...]} or "
                         "{\"prompt\": \"...\", \"completion\": \"...\"}", where);
    }
    if (e->n == n0) e->n_ex--; /* no tokens: no example */
    return 0;
}

/* An example over o->max_tokens: truncated to its first max_tokens, or dropped; one left
 * without a target is dropped too (it would add nothing to the loss). */
static void limit_example(const tok_jsonl_opts *o, tok_examples *e, size_t n0) {
    if (e->n_ex == 0 || e->starts[e->n_ex - 1] != n0) return; /* no example was added */
    int cut = 0;
    if (o->max_tokens && e->n - n0 > o->max_tokens) {
        if (o->drop_long) {
            e->n = n0;
            e->n_ex--;
            e->n_dropped++;
            return;
        }
        e->n = n0 + o->max_tokens;
        cut = 1;
    }
    size_t t = 0;
    for (size_t i = n0; i < e->n; i++) t += e->target[i];
    if (!t) { /* dropped, not counted as truncated */
        e->n = n0;
        e->n_ex--;
        e->n_dropped++;
    } else {
        e->n_truncated += cut;
    }
}

int tokenize_jsonl(hpt_tokenizer *tok, const char *name, const char *text, size_t len,
                   const tok_jsonl_opts *o, tok_examples *e) {
    size_t line = 0;
    for (size_t off = 0; off < len; line++) {
        const char *nl = memchr(text + off, '\n', len - off);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t a = off, b = end;
        while (a < b && (text[a] == ' ' || text[a] == '\t' || text[a] == '\r')) a++;
        while (b > a && (text[b - 1] == ' ' || text[b - 1] == '\t' || text[b - 1] == '\r')) b--;
        off = end + 1;
        if (a == b) continue;
        char where[600];
        snprintf(where, sizeof where, "%s, line %zu", name, line + 1);
        cJSON *j = cJSON_ParseWithLength(text + a, b - a);
        if (!j || !cJSON_IsObject(j)) {
            cJSON_Delete(j);
            return cli_error("%s: not a JSON object", where);
        }
        size_t n0 = e->n;
        int rc = add_example(tok, j, o->train_all, e, where);
        cJSON_Delete(j);
        if (rc) return rc;
        limit_example(o, e, n0);
    }
    return 0;
}

void tok_examples_free(tok_examples *e) {
    free(e->tok);
    free(e->target);
    free(e->starts);
    memset(e, 0, sizeof *e);
}
