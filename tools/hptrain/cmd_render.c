/* cmd_render.c: `hptrain render`: each conversation of a JSONL file rendered with a model
 * directory's chat template, as the model will see it: one JSON line {"text": ...} each (and its
 * "ids" with --tokens, its per-role "segments" with --segments). A bad line is named by its number on stderr and the rest still render;
 * the exit status is then 1. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "usage: hptrain render --model DIR [--tokens] [--segments] [--generation-prompt]\n"
    "                      [--date-string S] FILE.jsonl\n"
    "\n"
    "Renders each line of FILE.jsonl (\"-\": standard input), a conversation\n"
    "{\"messages\": [{\"role\": ..., \"content\": ...}, ...]} (its other fields are variables of the\n"
    "template: \"tools\", \"enable_thinking\", ...), with the chat template of DIR's\n"
    "tokenizer_config.json, and prints one JSON line {\"text\": ...} per conversation. Empty lines\n"
    "are skipped. A line that is not such JSON, or that the template refuses, is named by its\n"
    "number on standard error; the others are still printed, and the exit status is 1.\n"
    "The template language is a subset of Jinja (docs/chat.md).\n"
    "\n"
    "  --model DIR          tokenizer_config.json (and, for --tokens, tokenizer.json)\n"
    "  --tokens             also \"ids\": the text's token ids, with special tokens only where the\n"
    "                       template wrote them (a user's \"<|eot_id|>\" stays text)\n"
    "  --segments           also \"segments\": the text cut into runs of one message and one\n"
    "                       writer, [{\"role\", \"start\", \"end\" (characters), \"target\",\n"
    "                       \"special\" (the template's text), \"text\"}...]; the targets are the\n"
    "                       assistant's contents and ends of turn. `hptrain tokenize` reads these\n"
    "                       lines as they are (masked shards: docs/targets.md), and makes the\n"
    "                       same of the conversations themselves with --model DIR\n"
    "  --generation-prompt  add_generation_prompt: end with the assistant's header\n"
    "  --date-string S      the template variable date_string (Llama 3.1's system header)\n";

/* ---- --segments: who wrote each byte, and which bytes are targets --------------------------
 * A message's content is found in the rendered text, in order, as a run of the conversation's
 * bytes (from_data; as given, else trimmed as templates do); the template's bytes before it are
 * its header, and its end of turn follows it: the template's text after an assistant message
 * in a probe conversation (Llama 3's <|eot_id|>, Qwen's <|im_end|>, Gemma's <end_of_turn>,
 * Llama 2's </s>), where it follows the content. An assistant's content and end of turn are
 * the targets. Bytes after
 * the last message (a generation prompt) belong to none. Segments are the runs of equal
 * (message, target, writer); start and end count characters (code points) of the text. */

typedef struct {
    int *owner;      /* (len) the message index, -1: none */
    uint8_t *target; /* (len) */
} byte_roles;

char *chat_end_of_turn(const hpt_chat_template *ct) {
    static const char conv[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"A\"},{\"role\":\"assistant\",\"content\":\"B\"}]}";
    hpt_chat_opts o = hpt_chat_opts_defaults();
    hpt_chat_text r;
    if (hpt_chat_render(ct, conv, sizeof conv - 1, &o, &r) != HPT_OK) return NULL;
    size_t a = r.len, b = r.len;
    while (a > 0 && !r.from_data[a - 1]) a--;
    while (a < b && strchr(" \t\r\n", r.text[a])) a++;
    while (b > a && strchr(" \t\r\n", r.text[b - 1])) b--;
    char *e = a > 0 && b > a ? strndup(r.text + a, b - a) : NULL;
    hpt_chat_text_free(&r);
    return e;
}

/* Where s (n bytes) occurs at or after from as the conversation's bytes, a whole run of them
 * preferred; r->len if nowhere. */
static size_t find_data(const hpt_chat_text *r, size_t from, const char *s, size_t n) {
    size_t any = r->len;
    for (size_t p = from; n && p + n <= r->len; p++) {
        if (memcmp(r->text + p, s, n) != 0 || memchr(r->from_data + p, 0, n)) continue;
        if ((p == 0 || !r->from_data[p - 1]) && (p + n == r->len || !r->from_data[p + n])) return p;
        if (any == r->len) any = p;
    }
    return any;
}

static int roles_of(const hpt_chat_text *r, const cJSON *msgs, const char *eot, byte_roles *br) {
    br->owner = malloc((r->len + 1) * sizeof *br->owner);
    br->target = calloc(r->len + 1, 1);
    if (!br->owner || !br->target) return -1;
    for (size_t i = 0; i < r->len; i++) br->owner[i] = -1;
    size_t done = 0; /* bytes given to messages so far */
    const cJSON *m;
    int k = 0;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        int assistant = cJSON_IsString(role) && !strcmp(role->valuestring, "assistant");
        const char *c = cJSON_IsString(content) ? content->valuestring : "";
        size_t n = strlen(c), p = find_data(r, done, c, n);
        if (p == r->len) { /* templates trim the content: Python's white space, ASCII's here */
            while (n && strchr(" \t\r\n\v\f", *c)) { c++; n--; }
            while (n && strchr(" \t\r\n\v\f", c[n - 1])) n--;
            p = find_data(r, done, c, n);
        }
        k++;
        if (p == r->len) continue; /* not rendered (or empty): its header goes to the next */
        size_t e = p + n;
        for (size_t i = done; i < e; i++) br->owner[i] = k - 1;
        if (assistant) memset(br->target + p, 1, n);
        done = e;
        size_t j = e, l = eot ? strlen(eot) : 0;
        while (j < r->len && !r->from_data[j] && strchr(" \t\r\n", r->text[j])) j++;
        if (l && j + l <= r->len && !memcmp(r->text + j, eot, l) && !memchr(r->from_data + j, 1, l)) {
            for (size_t i = e; i < j + l; i++) { br->owner[i] = k - 1; br->target[i] = (uint8_t)assistant; }
            done = j + l;
        }
    }
    return 0;
}

/* One segment [s, e) of the text: its role, characters, flags and text; NULL on out of memory. */
static cJSON *segment(const hpt_chat_text *r, const cJSON *msgs, const byte_roles *br,
                      const size_t *chars, size_t s, size_t e) {
    const cJSON *role = br->owner[s] < 0 ? NULL
        : cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(msgs, br->owner[s]), "role");
    char *t = strndup(r->text + s, e - s);
    cJSON *g = cJSON_CreateObject();
    int ok = t && g &&
             (role ? cJSON_AddStringToObject(g, "role", role->valuestring) != NULL
                   : cJSON_AddNullToObject(g, "role") != NULL) &&
             cJSON_AddNumberToObject(g, "start", (double)chars[s]) &&
             cJSON_AddNumberToObject(g, "end", (double)chars[e]) &&
             cJSON_AddBoolToObject(g, "target", br->target[s]) &&
             cJSON_AddBoolToObject(g, "special", !r->from_data[s]) &&
             cJSON_AddStringToObject(g, "text", t);
    free(t);
    if (!ok) { cJSON_Delete(g); return NULL; }
    return g;
}

static cJSON *segments_json(const hpt_chat_text *r, const cJSON *msgs, const byte_roles *br) {
    size_t *chars = malloc((r->len + 1) * sizeof *chars); /* code points before each byte */
    cJSON *a = chars ? cJSON_CreateArray() : NULL;
    if (!a) { free(chars); return NULL; }
    chars[0] = 0;
    for (size_t i = 0; i < r->len; i++) chars[i + 1] = chars[i] + (((unsigned char)r->text[i] & 0xC0) != 0x80);
    for (size_t i = 1, s = 0; i <= r->len; i++) {
        if (i < r->len && br->owner[i] == br->owner[s] && br->target[i] == br->target[s] &&
            r->from_data[i] == r->from_data[s])
            continue;
        cJSON *g = segment(r, msgs, br, chars, s, i);
        if (!g || !cJSON_AddItemToArray(a, g)) {
            cJSON_Delete(g);
            cJSON_Delete(a);
            a = NULL;
            break;
        }
        s = i;
    }
    free(chars);
    return a;
}

cJSON *chat_segments(const hpt_chat_text *r, const cJSON *msgs, const char *eot) {
    byte_roles br;
    cJSON *segs = roles_of(r, msgs, eot, &br) == 0 ? segments_json(r, msgs, &br) : NULL;
    free(br.owner);
    free(br.target);
    return segs;
}

static int print_line(const hpt_chat_text *r, const int32_t *ids, size_t n, cJSON *segs) {
    cJSON *o = cJSON_CreateObject();
    cJSON *t = o ? cJSON_AddStringToObject(o, "text", r->text) : NULL;
    cJSON *a = t && ids ? cJSON_AddArrayToObject(o, "ids") : NULL;
    int ok = t && (!ids || a) && (!segs || cJSON_AddItemToObject(o, "segments", segs));
    if (!ok) cJSON_Delete(segs);
    for (size_t i = 0; ok && ids && i < n; i++) {
        cJSON *x = cJSON_CreateNumber(ids[i]);
        ok = x && cJSON_AddItemToArray(a, x);
    }
    char *s = ok ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    if (!s) return cli_error("out of memory printing a rendered conversation");
    int rc = puts(s) < 0 ? cli_error("cannot write: %s", strerror(errno)) : 0;
    cJSON_free(s);
    return rc;
}

int cmd_render(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'}, {"tokens", 0, 0, 't'}, {"generation-prompt", 0, 0, 'g'},
        {"date-string", 1, 0, 'd'}, {"segments", 0, 0, 's'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_dir = NULL;
    int want_ids = 0, want_segs = 0, opt_rc = 0, c;
    hpt_chat_opts o = hpt_chat_opts_defaults();
    while ((c = cli_getopt("render", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 't': want_ids = 1; break;
        case 'g': o.add_generation_prompt = 1; break;
        case 'd': o.date_string = optarg; break;
        case 's': want_segs = 1; break;
        }
    }
    if (!model_dir) return cli_usage_error("render", "--model DIR is required");
    if (optind + 1 != argc) return cli_usage_error("render", "expected one FILE.jsonl");
    const char *path = argv[optind];
    hpt_chat_template *ct = NULL;
    hpt_status s = hpt_chat_template_load(model_dir, &ct);
    if (s != HPT_OK) return cli_lib_error(s, "loading the chat template");
    hpt_tokenizer *tok = NULL;
    if (want_ids) {
        int prc = cli_pick_tokenizer("render", NULL, model_dir, 1, &tok);
        if (prc) { hpt_chat_template_free(ct); return prc; }
    }
    char *data = NULL;
    size_t len = 0;
    if (cli_read_file(path, &data, &len) != 0) {
        hpt_chat_template_free(ct);
        hpt_tokenizer_free(tok);
        return 1;
    }
    int rc = 0;
    size_t line = 0;
    char *eot = want_segs ? chat_end_of_turn(ct) : NULL;
    for (size_t pos = 0; pos < len;) {
        char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - data) : len, n = end - pos;
        line++;
        const char *l = data + pos;
        pos = end + 1;
        size_t k = 0;
        while (k < n && (l[k] == ' ' || l[k] == '\t' || l[k] == '\r')) k++;
        if (k == n) continue;
        hpt_chat_text r;
        s = hpt_chat_render(ct, l, n, &o, &r);
        if (s != HPT_OK) {
            fprintf(stderr, "hptrain: error: %s:%zu: %s\n", path, line, hpt_last_error());
            rc = 1;
            continue;
        }
        int32_t *ids = NULL;
        size_t m = 0;
        cJSON *segs = NULL;
        if (want_segs) {
            cJSON *j = cJSON_ParseWithLength(l, n); /* hpt_chat_render parsed it */
            segs = chat_segments(&r, cJSON_IsArray(j) ? j
                                         : cJSON_GetObjectItemCaseSensitive(j, "messages"), eot);
            cJSON_Delete(j);
            if (!segs) {
                hpt_chat_text_free(&r);
                rc = cli_error("out of memory finding the segments");
                break;
            }
        }
        if (tok && (s = hpt_chat_encode(tok, &r, &ids, &m)) != HPT_OK) {
            fprintf(stderr, "hptrain: error: %s:%zu: %s\n", path, line, hpt_last_error());
            cJSON_Delete(segs);
            rc = 1;
        } else if (print_line(&r, ids, m, segs) != 0) {
            hpt_chat_text_free(&r);
            free(ids);
            rc = 1;
            break;
        }
        hpt_chat_text_free(&r);
        free(ids);
    }
    free(data);
    free(eot);
    hpt_chat_template_free(ct);
    hpt_tokenizer_free(tok);
    if (fflush(stdout) != 0) return cli_error("cannot write: %s", strerror(errno));
    return rc;
}
