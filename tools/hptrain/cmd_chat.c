/* cmd_chat.c: `hptrain chat`: a conversation with a model in its chat template, in the terminal
 * (a user line from stdin, the reply streamed to stdout) or one-shot (--prompt). Each turn
 * renders the whole conversation with add_generation_prompt, encodes it (special tokens only where
 * the template wrote them) and feeds the engine only what follows the longest prefix that the
 * cache already holds (a template that rewrites earlier turns costs a longer prefill, never a
 * wrong cache); generation stops at an end-of-turn token. docs/chat.md.
 * Invariants: fed[0 .. n_fed) are the tokens in the engine's cache, in order (n_fed ==
 * hpt_infer_get_pos); the conversation holds the user's lines and the replies as decoded text. */
#include "cli.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char k_help[] =
    "usage: hptrain chat --model DIR [--adapter DIR] [--system TEXT] [--prompt TEXT] [options]\n"
    "\n"
    "A conversation with a model in its chat template (DIR's tokenizer_config.json; docs/chat.md).\n"
    "Each line on standard input is a user turn; the reply is streamed to standard output, one\n"
    "line per turn, and ends at the template's end-of-turn token or an eos token of\n"
    "generation_config.json, config.json or tokenizer_config.json. The key/value cache is kept\n"
    "across turns: only the new turn's tokens are fed. /reset starts a new conversation; /exit\n"
    "or the end of the input ends. With --prompt: one reply, then exit.\n"
    "\n"
    "  --model DIR         a Hugging Face model directory (config.json, safetensors,\n"
    "                      tokenizer.json, tokenizer_config.json with the chat template)\n"
    "  --adapter DIR       LoRA adapters in PEFT's files, merged into the weights at load\n"
    "  --system TEXT       a system message at the start of the conversation\n"
    "  --prompt TEXT       one user turn: print the reply and exit\n"
    "  --max-new N         tokens per reply at most (default 512)\n"
    "  --temperature X     softmax temperature, > 0 (default 0.7)\n"
    "  --top-k K           sample among the K likeliest tokens, 0 for all; 1 is greedy (default 40)\n"
    "  --seed S            sampling seed (default 1337)\n"
    "  --context N         cache positions: the conversation's longest length (default: the\n"
    "                      model's maxT, at most 4096)\n"
    "  --weights W         fp32 | int8 (as sample's; default fp32)\n"
    "  --reprefill         feed the whole conversation again each turn (no cache across turns;\n"
    "                      the same tokens, slower: for checking)\n"
    "  --quiet             no information lines on standard error\n"
    "  --threads N         threads (default: all cores)\n";

#define MAX_STOP 16

typedef struct {
    cli_model md;
    hpt_chat_template *ct;
    cJSON *messages; /* [{"role", "content"}...] */
    int32_t *fed;    /* (ctx) the tokens in the cache */
    int n_fed, ctx;
    int32_t stop[MAX_STOP];
    int n_stop;
    float temperature;
    int top_k, max_new, reprefill, quiet;
    uint64_t rng;
} chat;

static void add_stop(chat *c, long id) {
    if (id < 0 || id >= c->md.cfg.V) return;
    for (int i = 0; i < c->n_stop; i++)
        if (c->stop[i] == id) return;
    if (c->n_stop < MAX_STOP) c->stop[c->n_stop++] = (int32_t)id;
}

/* The id of a special token's text (one id when encoded with special tokens), else -1. */
static long special_id(chat *c, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    long id = -1;
    if (hpt_tokenizer_encode_ex(c->md.tok, text, strlen(text), HPT_TOK_SPECIAL, &ids, &n) == HPT_OK &&
        n == 1)
        id = ids[0];
    free(ids);
    return id;
}

/* eos_token_id (an id or a list) of dir/name, eos_token (text or {"content"}) of
 * tokenizer_config.json; a missing or malformed file adds nothing. */
static void stops_from_file(chat *c, const char *name) {
    char path[4400], *data = NULL;
    snprintf(path, sizeof path, "%s/%s", c->md.dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t len = 0;
    if (fseek(f, 0, SEEK_END) == 0) {
        long m = ftell(f);
        if (m > 0 && m < (1L << 26) && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)m)))
            len = fread(data, 1, (size_t)m, f);
    }
    fclose(f);
    cJSON *j = data ? cJSON_ParseWithLength(data, len) : NULL;
    free(data);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id"), *x;
    if (cJSON_IsNumber(e)) add_stop(c, (long)e->valuedouble);
    if (cJSON_IsArray(e))
        for (x = e->child; x; x = x->next)
            if (cJSON_IsNumber(x)) add_stop(c, (long)x->valuedouble);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "eos_token");
    if (cJSON_IsObject(t)) t = cJSON_GetObjectItemCaseSensitive(t, "content");
    if (cJSON_IsString(t)) add_stop(c, special_id(c, t->valuestring));
    cJSON_Delete(j);
}

/* The template's end of turn: the special token the template writes right after an assistant
 * message's content (Llama 3's <|eot_id|>, Qwen's <|im_end|>, Gemma's <end_of_turn>). */
static void stop_of_template(chat *c) {
    static const char conv[] =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"A\"},{\"role\":\"assistant\",\"content\":\"B\"}]}";
    hpt_chat_opts o = hpt_chat_opts_defaults();
    hpt_chat_text r;
    if (hpt_chat_render(c->ct, conv, sizeof conv - 1, &o, &r) != HPT_OK) return;
    size_t i = r.len;
    while (i > 0 && !r.from_data[i - 1]) i--; /* after the content's last byte */
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    const char *rest = r.text + i;
    if (i > 0 &&
        hpt_tokenizer_encode_ex(c->md.tok, rest, strlen(rest), HPT_TOK_SPECIAL, &a, &na) == HPT_OK &&
        hpt_tokenizer_encode_ex(c->md.tok, rest, strlen(rest), 0, &b, &nb) == HPT_OK && na > 0 &&
        (nb == 0 || a[0] != b[0]))
        add_stop(c, a[0]); /* special: not what the text alone encodes to */
    free(a);
    free(b);
    hpt_chat_text_free(&r);
}

/* The conversation rendered with the generation prompt and encoded; *ids malloc'd. */
static int render_ids(chat *c, int32_t **ids, size_t *n) {
    cJSON *o = cJSON_CreateObject();
    char *json = NULL;
    if (o && cJSON_AddItemReferenceToObject(o, "messages", c->messages))
        json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!json) return cli_error("out of memory rendering the conversation");
    hpt_chat_opts opts = hpt_chat_opts_defaults();
    opts.add_generation_prompt = 1;
    hpt_chat_text r;
    hpt_status s = hpt_chat_render(c->ct, json, strlen(json), &opts, &r);
    cJSON_free(json);
    if (s != HPT_OK) return cli_lib_error(s, "rendering the conversation");
    s = hpt_chat_encode(c->md.tok, &r, ids, n);
    hpt_chat_text_free(&r);
    return s != HPT_OK ? cli_lib_error(s, "encoding the conversation") : 0;
}

/* Feeds ids (n <= ctx) after the longest prefix the cache holds (none with --reprefill; at
 * least the last token is fed, for its logits). *fresh: the tokens fed. */
static int prefill(chat *c, const int32_t *ids, int n, int *fresh) {
    int keep = 0;
    while (!c->reprefill && keep < c->n_fed && keep < n - 1 && c->fed[keep] == ids[keep]) keep++;
    hpt_status s = hpt_infer_truncate(c->md.inf, keep);
    if (s == HPT_OK) s = hpt_infer_feed(c->md.inf, ids + keep, n - keep);
    if (s != HPT_OK) {
        c->n_fed = 0;
        hpt_infer_reset(c->md.inf);
        return cli_lib_error(s, "feeding the conversation");
    }
    memcpy(c->fed + keep, ids + keep, (size_t)(n - keep) * sizeof *ids);
    c->n_fed = n;
    *fresh = n - keep;
    return 0;
}

static int add_message(chat *c, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddStringToObject(m, "role", role) ||
        !cJSON_AddStringToObject(m, "content", content) || !cJSON_AddItemToArray(c->messages, m)) {
        cJSON_Delete(m);
        return cli_error("out of memory holding the conversation");
    }
    return 0;
}

/* One user turn: the reply streamed to stdout. Returns 0, 1 on an error (the turn is taken
 * back), or 3 when the context is full (the reply so far is kept). */
static int turn(chat *c, const char *user) {
    if (add_message(c, "user", user)) return 1;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = render_ids(c, &ids, &n), fresh = 0;
    if (!rc && n + 1 > (size_t)c->ctx) {
        rc = cli_error("the conversation is %zu tokens and the context holds %d: it is full "
                       "(/reset starts a new one; --context sets its size)", n, c->ctx);
    }
    if (!rc) rc = prefill(c, ids, (int)n, &fresh);
    int kept = (int)n - fresh;
    free(ids);
    if (rc) {
        cJSON_DeleteItemFromArray(c->messages, cJSON_GetArraySize(c->messages) - 1);
        return rc;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    int n_new = 0, stopped = 0, full = 0, oom = 0;
    double t0 = hpt_now();
    hpt_status s = HPT_OK;
    for (; n_new < c->max_new; n_new++) {
        int32_t id;
        if ((s = hpt_infer_sample(c->md.inf, c->temperature, c->top_k, &c->rng, &id)) != HPT_OK) break;
        for (int i = 0; i < c->n_stop && !stopped; i++) stopped = id == c->stop[i];
        if (stopped) break;
        const char *bytes = "";
        size_t m = 0;
        if (hpt_tokenizer_decode(c->md.tok, id, &bytes, &m) != HPT_OK) m = 0;
        if (len + m + 1 > cap) {
            cap = 2 * (len + m + 1) + 256;
            char *t = realloc(text, cap);
            if (!t) { oom = 1; break; }
            text = t;
        }
        memcpy(text + len, bytes, m);
        len += m;
        fwrite(bytes, 1, m, stdout);
        fflush(stdout);
        if (c->n_fed == c->ctx) { full = 1; n_new++; break; }
        if ((s = hpt_infer_feed(c->md.inf, &id, 1)) != HPT_OK) break;
        c->fed[c->n_fed++] = id;
    }
    fputc('\n', stdout);
    fflush(stdout);
    if (text) text[len] = '\0';
    rc = oom ? cli_error("out of memory holding the reply")
       : s != HPT_OK ? cli_lib_error(s, "generating") : add_message(c, "assistant", text ? text : "");
    free(text);
    if (!rc && !c->quiet) {
        double secs = hpt_now() - t0;
        const char *why = stopped ? "end of turn" : full ? "context full" : "--max-new";
        fprintf(stderr, "chat: %d tokens fed (%d kept in the cache), %d generated (%s), %d of %d "
                "positions, %.1f tokens/s\n", fresh, kept, n_new, why, c->n_fed, c->ctx,
                secs > 0 ? n_new / secs : 0.0);
    }
    if (!rc && full) {
        cli_error("the context (%d positions) is full: the reply stops here; /reset starts a "
                  "new conversation (--context sets its size)", c->ctx);
        rc = 3;
    }
    return rc;
}

static int converse(chat *c, const char *system, const char *prompt) {
    if (system && add_message(c, "system", system)) return 1;
    if (prompt) return turn(c, prompt) ? 1 : 0;
    int tty = isatty(0), rc = 0;
    char *line = NULL;
    size_t cap = 0;
    for (;;) {
        if (tty) fputs("> ", stderr);
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (n == 0) continue;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            while (cJSON_GetArraySize(c->messages) > (system ? 1 : 0))
                cJSON_DeleteItemFromArray(c->messages, cJSON_GetArraySize(c->messages) - 1);
            continue;
        }
        rc = turn(c, line) == 1 ? 1 : rc; /* a full context is reported and the chat goes on */
    }
    free(line);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'}, {"adapter", 1, 0, 'a'}, {"system", 1, 0, 'S'}, {"prompt", 1, 0, 'p'},
        {"max-new", 1, 0, 'n'}, {"temperature", 1, 0, 't'}, {"top-k", 1, 0, 'k'},
        {"seed", 1, 0, 's'}, {"context", 1, 0, 'c'}, {"weights", 1, 0, 'w'},
        {"reprefill", 0, 0, 'r'}, {"quiet", 0, 0, 'q'}, {"threads", 1, 0, 'j'},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_arg = NULL, *adapter = NULL, *system = NULL, *prompt = NULL;
    long max_new = 512, top_k = 40, seed = 1337, ctx = 0, threads = 0;
    double temperature = 0.7;
    hpt_weights weights = HPT_WEIGHTS_F32;
    chat c;
    memset(&c, 0, sizeof c);
    int opt_rc = 0, ch;
    while ((ch = cli_getopt("chat", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (ch == CLI_OPT_EXIT) return opt_rc;
        int r = 0;
        switch (ch) {
        case 'm': model_arg = optarg; break;
        case 'a': adapter = optarg; break;
        case 'S': system = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n': r = cli_parse_long("chat", "--max-new", optarg, 1, 1 << 24, &max_new); break;
        case 't': r = cli_parse_float("chat", "--temperature", optarg, 1e-6, 100, &temperature); break;
        case 'k': r = cli_parse_long("chat", "--top-k", optarg, 0, 1 << 24, &top_k); break;
        case 's': r = cli_parse_long("chat", "--seed", optarg, 0, 0x7fffffffffffffffL, &seed); break;
        case 'c': r = cli_parse_long("chat", "--context", optarg, 2, 1 << 24, &ctx); break;
        case 'w':
            if (hpt_weights_parse(optarg, &weights) != HPT_OK)
                r = cli_usage_error("chat", "%s", hpt_last_error());
            break;
        case 'r': c.reprefill = 1; break;
        case 'q': c.quiet = 1; break;
        case 'j': r = cli_parse_long("chat", "--threads", optarg, 1, 1024, &threads); break;
        }
        if (r) return r;
    }
    if (optind < argc) return cli_unexpected_argument("chat", argv[optind]);
    if (!model_arg) return cli_usage_error("chat", "--model DIR is required");
    if (threads) hpt_set_threads((int)threads);
    int rc = cli_model_open(model_arg, NULL, 1, &c.md);
    if (rc) goto out;
    if (!c.md.dir) {
        rc = cli_error("chat needs a model directory with its chat template (tokenizer_config.json)");
        goto out;
    }
    hpt_status s = hpt_chat_template_load(c.md.dir, &c.ct);
    if (s != HPT_OK) { rc = cli_lib_error(s, "loading the chat template"); goto out; }
    c.ctx = (int)(ctx ? ctx : c.md.cfg.maxT < 4096 ? c.md.cfg.maxT : 4096);
    if (c.ctx > c.md.cfg.maxT) {
        rc = cli_error("--context %d exceeds the model's maxT %d", c.ctx, c.md.cfg.maxT);
        goto out;
    }
    c.temperature = (float)temperature;
    c.top_k = (int)top_k;
    c.max_new = (int)max_new;
    c.rng = hpt_infer_rng_seed((uint64_t)seed);
    stop_of_template(&c);
    static const char *const files[] = {"generation_config.json", "config.json", "tokenizer_config.json"};
    for (int i = 0; i < 3; i++) stops_from_file(&c, files[i]);
    add_stop(&c, hpt_tokenizer_eot(c.md.tok));
    if (!c.quiet) {
        char list[256] = "";
        for (int i = 0, o = 0; i < c.n_stop && o < (int)sizeof list - 16; i++)
            o += snprintf(list + o, sizeof list - (size_t)o, "%s%d", i ? " " : "", c.stop[i]);
        fprintf(stderr, "chat: %s weights, %d-position cache: %.1f MiB estimated; stop tokens: %s\n",
                hpt_weights_name(weights), c.ctx,
                (double)hpt_infer_bytes_for(&c.md.cfg, weights, c.ctx) / 1048576.0,
                c.n_stop ? list : "none");
    }
    c.messages = cJSON_CreateArray();
    c.fed = malloc((size_t)c.ctx * sizeof *c.fed);
    if (!c.messages || !c.fed) { rc = cli_error("out of memory"); goto out; }
    if ((rc = cli_engine_open(&c.md, adapter, weights, c.ctx)) != 0) goto out;
    rc = converse(&c, system, prompt);
out:
    cJSON_Delete(c.messages);
    free(c.fed);
    hpt_chat_template_free(c.ct);
    cli_model_close(&c.md);
    return rc;
}
