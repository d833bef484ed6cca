/* tokenize_jsonl.c: `hptrain tokenize`'s examples: JSONL lines -> tokens with a target flag
 * each and the examples' starts, for masked shards. A line is one example: {"segments": [...]}
 * (text already rendered, each segment a target or not, "special" segments encoding special
 * tokens as their ids), {"messages": [...]} (rendered with --model's chat template into the
 * segments `render --segments` prints, by the same code), {"prompt", "completion"} (the
 * completion and end-of-text the targets) or Alpaca's {"instruction", "input", "output"} (a
 * user and an assistant turn with a chat template, else Stanford Alpaca's prompt and the output
 * as prompt and completion); the keys can be renamed by flags; the shapes are in
 * docs/targets.md. Segments are encoded apart, so a target span's tokens never merge with their
 * context's, each as the continuation it is (of text or of a special token); long examples are
 * truncated or dropped and counted; a bad line is an error naming file and line. */
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

/* The segments (render --segments' shape) of one example onto e, after its first n0 tokens. */
static int add_segments(hpt_tokenizer *tok, const cJSON *segs, int train_all, tok_examples *e,
                        size_t n0, const char *where) {
    const cJSON *sg;
    int k = 0, after = 0; /* after: the last piece ended with a special token */
    cJSON_ArrayForEach(sg, segs) {
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(sg, "text");
        const cJSON *target = cJSON_GetObjectItemCaseSensitive(sg, "target");
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(sg, "special");
        if (!cJSON_IsString(text) || (target && !cJSON_IsBool(target)) ||
            (special && !cJSON_IsBool(special)))
            return cli_error("%s: segment %d needs \"text\" (a string) and may have "
                             "\"target\" and \"special\" (true or false)", where, k);
        int rc = add_text(tok, e, text->valuestring, cJSON_IsTrue(special),
                          (uint8_t)(train_all || cJSON_IsTrue(target)), next_flags(e, n0, after),
                          &after, where);
        if (rc) return rc;
        k++;
    }
    return 0;
}

/* BOS (where the tokenizer has one), the prompt (context), the completion and end of text. */
static int add_prompt_completion(hpt_tokenizer *tok, const char *prompt, const char *completion,
                                 int train_all, tok_examples *e, size_t n0, const char *where) {
    int rc, after;
    if ((rc = add_id(e, hpt_tokenizer_bos(tok), (uint8_t)train_all)) != 0) return rc;
    after = e->n > n0; /* after BOS */
    rc = add_text(tok, e, prompt, 0, (uint8_t)train_all, next_flags(e, n0, after), &after, where);
    if (rc) return rc;
    rc = add_text(tok, e, completion, 0, 1, next_flags(e, n0, after), &after, where);
    return rc ? rc : add_id(e, hpt_tokenizer_eot(tok), 1);
}

/* o->model_dir's chat template, loaded once: 1 there, 0 none (no --model, or its directory has
 * neither a "chat_template" in tokenizer_config.json nor chat_template.jinja), or an error's
 * exit status' negation after printing it (a template there that does not load). */
static int chat_template(tok_jsonl_opts *o, const char *where) {
    if (o->ct) return 1;
    if (!o->model_dir || o->ct_tried) return 0;
    o->ct_tried = 1;
    char p[4200];
    snprintf(p, sizeof p, "%s/chat_template.jinja", o->model_dir);
    FILE *f = fopen(p, "rb");
    int has = f != NULL;
    if (f) fclose(f);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", o->model_dir);
    if (!has && (f = fopen(p, "rb")) != NULL) {
        fclose(f);
        char *text = NULL;
        size_t len = 0;
        if (cli_read_file(p, &text, &len) != 0) return -1;
        cJSON *cfg = cJSON_ParseWithLength(text, len);
        free(text);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        has = !cJSON_IsObject(cfg) || (t && !cJSON_IsNull(t)); /* malformed: the loader says */
        cJSON_Delete(cfg);
    }
    if (!has) return 0;
    hpt_status s = hpt_chat_template_load(o->model_dir, &o->ct);
    if (s != HPT_OK) return -cli_lib_error(s, where);
    o->eot = chat_end_of_turn(o->ct);
    return 1;
}

/* A conversation (json, len bytes: {"messages": ...} with the template's other variables;
 * msgs: its messages) rendered with o's template, its segments onto e. */
static int add_conversation(hpt_tokenizer *tok, tok_jsonl_opts *o, const char *json, size_t len,
                            const cJSON *msgs, tok_examples *e, size_t n0, const char *where) {
    hpt_chat_opts co = hpt_chat_opts_defaults();
    hpt_chat_text r;
    hpt_status s = hpt_chat_render(o->ct, json, len, &co, &r);
    if (s != HPT_OK) return cli_error("%s: %s", where, hpt_last_error());
    cJSON *segs = chat_segments(&r, msgs, o->eot);
    hpt_chat_text_free(&r);
    if (!segs) return cli_error("out of memory finding the segments");
    int rc = add_segments(tok, segs, o->train_all, e, n0, where);
    cJSON_Delete(segs);
    return rc;
}

/* Renames key `from` of object j to `to` (replacing a `to` there); 0, or -1 out of memory. */
static int rename_key(cJSON *j, const char *from, const char *to) {
    if (!strcmp(from, to) || !cJSON_GetObjectItemCaseSensitive(j, from)) return 0;
    cJSON_DeleteItemFromObjectCaseSensitive(j, to);
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(j, from);
    if (cJSON_AddItemToObject(j, to, v)) return 0;
    cJSON_Delete(v);
    return -1;
}

/* A conversation line j (text line, len bytes) whose messages are under o's field names:
 * rendered as it is with the default names, else as a copy with the template's names. */
static int add_messages(hpt_tokenizer *tok, tok_jsonl_opts *o, const cJSON *j, const char *line,
                        size_t len, tok_examples *e, size_t n0, const char *where) {
    const char *mk = o->messages_key ? o->messages_key : "messages";
    const char *rk = o->role_key ? o->role_key : "role";
    const char *ck = o->content_key ? o->content_key : "content";
    if (!strcmp(mk, "messages") && !strcmp(rk, "role") && !strcmp(ck, "content"))
        return add_conversation(tok, o, line, len, cJSON_GetObjectItemCaseSensitive(j, mk), e, n0,
                                where);
    cJSON *c = cJSON_Duplicate(j, 1), *m;
    int bad = !c || rename_key(c, mk, "messages");
    cJSON *msgs = c ? cJSON_GetObjectItemCaseSensitive(c, "messages") : NULL;
    cJSON_ArrayForEach(m, msgs) {
        if (cJSON_IsObject(m)) bad |= rename_key(m, rk, "role") | rename_key(m, ck, "content");
    }
    char *json = bad ? NULL : cJSON_PrintUnformatted(c);
    int rc = json ? add_conversation(tok, o, json, strlen(json), msgs, e, n0, where)
                  : cli_error("out of memory renaming the fields of %s", where);
    cJSON_free(json);
    cJSON_Delete(c);
    return rc;
}

/* Stanford Alpaca's prompts (its train.py's PROMPT_DICT), for a model without a chat template */
#define ALPACA_HEAD "Below is an instruction that describes a task"
#define ALPACA_ASK \
    "Write a response that appropriately completes the request.\n\n### Instruction:\n"
#define ALPACA_INPUT ALPACA_HEAD ", paired with an input that provides further context. " \
    ALPACA_ASK "%s\n\n### Input:\n%s\n\n### Response:"
#define ALPACA_NO_INPUT ALPACA_HEAD ". " ALPACA_ASK "%s\n\n### Response:"

/* An Alpaca example: with a chat template, a user turn (the instruction, then a blank line and
 * the input where there is one) and an assistant turn (the output); without one, Stanford
 * Alpaca's prompt and the output as its completion. */
static int add_alpaca(hpt_tokenizer *tok, tok_jsonl_opts *o, const char *ins, const char *in,
                      const char *out, tok_examples *e, size_t n0, const char *where) {
    int has = chat_template(o, where);
    if (has < 0) return -has;
    size_t cap = strlen(ins) + strlen(in) + sizeof ALPACA_INPUT;
    char *prompt = malloc(cap);
    if (!prompt) return cli_error("out of memory");
    if (!has) {
        if (*in) snprintf(prompt, cap, ALPACA_INPUT, ins, in);
        else snprintf(prompt, cap, ALPACA_NO_INPUT, ins);
        int rc = add_prompt_completion(tok, prompt, out, o->train_all, e, n0, where);
        free(prompt);
        return rc;
    }
    snprintf(prompt, cap, "%s%s%s", ins, *in ? "\n\n" : "", in);
    cJSON *c = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(c, "messages");
    cJSON *u = cJSON_CreateObject(), *a = cJSON_CreateObject();
    int ok = msgs && u && a && cJSON_AddItemToArray(msgs, u) && cJSON_AddItemToArray(msgs, a);
    if (!ok) { cJSON_Delete(u); cJSON_Delete(a); } /* else msgs holds them */
    ok = ok && cJSON_AddStringToObject(u, "role", "user") &&
         cJSON_AddStringToObject(u, "content", prompt) &&
         cJSON_AddStringToObject(a, "role", "assistant") &&
         cJSON_AddStringToObject(a, "content", out);
    free(prompt);
    char *json = ok ? cJSON_PrintUnformatted(c) : NULL;
    int rc = json ? add_conversation(tok, o, json, strlen(json), msgs, e, n0, where)
                  : cli_error("out of memory");
    cJSON_free(json);
    cJSON_Delete(c);
    return rc;
}

/* The error for a line of no shape known: its keys (the first few) and the shapes. */
static int unknown_shape(const cJSON *j, const tok_jsonl_opts *o, const char *where) {
    char keys[400] = "";
    size_t n = 0;
    const cJSON *it;
    int k = 0;
    cJSON_ArrayForEach(it, j) {
        if (k++ == 8) { snprintf(keys + n, sizeof keys - n, ", ..."); break; }
        int w = snprintf(keys + n, sizeof keys - n, "%s\"%.40s\"", n ? ", " : "", it->string);
        if (w < 0 || (n += (size_t)w) >= sizeof keys) break;
    }
    return cli_error("%s: an example is {\"%s\": [...]} (with --model), {\"%s\", \"%s\"}, "
                     "{\"instruction\", \"input\", \"output\"} or {\"segments\": [...]}, the "
                     "values of their types; this line has keys %s (--messages-field, "
                     "--prompt-field, --completion-field name other keys)",
                     where, o->messages_key ? o->messages_key : "messages",
                     o->prompt_key ? o->prompt_key : "prompt",
                     o->completion_key ? o->completion_key : "completion", k ? keys : "none");
}

/* One example (a parsed line j; line: its text, len bytes) onto e. */
static int add_example(hpt_tokenizer *tok, const cJSON *j, const char *line, size_t len,
                       tok_jsonl_opts *o, tok_examples *e, const char *where) {
#define FIELD(key, def) cJSON_GetObjectItemCaseSensitive(j, o->key ? o->key : def)
    const cJSON *segs = cJSON_GetObjectItemCaseSensitive(j, "segments");
    const cJSON *msgs = FIELD(messages_key, "messages");
    const cJSON *prompt = FIELD(prompt_key, "prompt");
    const cJSON *completion = FIELD(completion_key, "completion");
#undef FIELD
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(j, "instruction");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(j, "input");
    const cJSON *out = cJSON_GetObjectItemCaseSensitive(j, "output");
    size_t n0 = e->n;
    if (ex_start(e)) return cli_error("out of memory holding %zu examples", e->n_ex);
    int rc;
    if (cJSON_IsArray(segs)) {
        rc = add_segments(tok, segs, o->train_all, e, n0, where);
    } else if (cJSON_IsArray(msgs)) {
        int has = chat_template(o, where);
        if (has < 0) return -has;
        if (!has && !o->model_dir)
            return cli_error("%s: a conversation is rendered with a model's chat template: pass "
                             "--model DIR (a directory with tokenizer_config.json's chat_template)",
                             where);
        if (!has)
            return cli_error("%s: a conversation needs a chat template, and %s has none (no "
                             "chat_template in tokenizer_config.json, no chat_template.jinja)",
                             where, o->model_dir);
        rc = add_messages(tok, o, j, line, len, e, n0, where);
    } else if (cJSON_IsString(prompt) && cJSON_IsString(completion)) {
        rc = add_prompt_completion(tok, prompt->valuestring, completion->valuestring,
                                   o->train_all, e, n0, where);
    } else if (cJSON_IsString(ins) && cJSON_IsString(out) && (!in || cJSON_IsString(in))) {
        rc = add_alpaca(tok, o, ins->valuestring, in ? in->valuestring : "", out->valuestring, e,
                        n0, where);
    } else {
        return unknown_shape(j, o, where);
    }
    if (rc) return rc;
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
                   tok_jsonl_opts *o, tok_examples *e) {
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
        int rc = add_example(tok, j, text + a, b - a, o, e, where);
        cJSON_Delete(j);
        if (rc) return rc;
        limit_example(o, e, n0);
    }
    return 0;
}

void tok_jsonl_opts_free(tok_jsonl_opts *o) {
    hpt_chat_template_free(o->ct);
    free(o->eot);
    o->ct = NULL;
    o->eot = NULL;
}

void tok_examples_free(tok_examples *e) {
    free(e->tok);
    free(e->target);
    free(e->starts);
    memset(e, 0, sizeof *e);
}
