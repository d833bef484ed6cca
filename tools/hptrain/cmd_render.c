/* cmd_render.c: `hptrain render`: each conversation of a JSONL file rendered with a model
 * directory's chat template, as the model will see it: one JSON line {"text": ...} each (and its
 * "ids" with --tokens). A bad line is named by its number on stderr and the rest still render;
 * the exit status is then 1. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "usage: hptrain render --model DIR [--tokens] [--generation-prompt] [--date-string S] FILE.jsonl\n"
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
    "  --generation-prompt  add_generation_prompt: end with the assistant's header\n"
    "  --date-string S      the template variable date_string (Llama 3.1's system header)\n";

static int print_line(const hpt_chat_text *r, const int32_t *ids, size_t n) {
    cJSON *o = cJSON_CreateObject();
    cJSON *t = o ? cJSON_AddStringToObject(o, "text", r->text) : NULL;
    cJSON *a = t && ids ? cJSON_AddArrayToObject(o, "ids") : NULL;
    int ok = t && (!ids || a);
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
        {"date-string", 1, 0, 'd'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_dir = NULL;
    int want_ids = 0, opt_rc = 0, c;
    hpt_chat_opts o = hpt_chat_opts_defaults();
    while ((c = cli_getopt("render", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        switch (c) {
        case 'm': model_dir = optarg; break;
        case 't': want_ids = 1; break;
        case 'g': o.add_generation_prompt = 1; break;
        case 'd': o.date_string = optarg; break;
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
        if (tok && (s = hpt_chat_encode(tok, &r, &ids, &m)) != HPT_OK) {
            fprintf(stderr, "hptrain: error: %s:%zu: %s\n", path, line, hpt_last_error());
            rc = 1;
        } else if (print_line(&r, ids, m) != 0) {
            hpt_chat_text_free(&r);
            free(ids);
            rc = 1;
            break;
        }
        hpt_chat_text_free(&r);
        free(ids);
    }
    free(data);
    hpt_chat_template_free(ct);
    hpt_tokenizer_free(tok);
    if (fflush(stdout) != 0) return cli_error("cannot write: %s", strerror(errno));
    return rc;
}
