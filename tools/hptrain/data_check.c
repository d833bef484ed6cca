/* data_check.c: the shards' tokenizer against the model's, before a run reads a batch
 * (docs/formats.md, "The shards' tokenizer"). `hptrain tokenize` writes tokenizer.bin beside the
 * shards; a model directory holds tokenizer.json (or tokenizer.model). Checked: the shards'
 * vocabulary fits the model's (V), and, when both tokenizers are known, they are the same one:
 * the same number of tokens with the same bytes each. A mismatch is refused in one line;
 * --force goes on with the same line as a warning. No tokenizer beside the shards: nothing is
 * known, nothing is checked (a token id >= V is still refused when a batch reads it). */
#include "cli.h"

#include <glob.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The tokenizer file beside the first shard of pattern, into path; 0 when there is none. */
static int shards_tokenizer(const char *pattern, char *path, size_t n) {
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0 || g.gl_pathc == 0) {
        globfree(&g);
        return 0;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", g.gl_pathv[0]);
    globfree(&g);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    static const char *const names[] = {"tokenizer.bin", "tokenizer.json"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, n, "%s/%s", dir, names[i]);
        if (is_file(path)) return 1;
    }
    return 0;
}

/* The first id whose bytes differ between a and b (over the shorter), or -1. */
static int first_difference(const hpt_tokenizer *a, const hpt_tokenizer *b) {
    int n = hpt_tokenizer_vocab_size(a) < hpt_tokenizer_vocab_size(b) ? hpt_tokenizer_vocab_size(a)
                                                                       : hpt_tokenizer_vocab_size(b);
    for (int id = 0; id < n; id++) {
        const char *x, *y;
        size_t lx, ly;
        if (hpt_tokenizer_decode(a, id, &x, &lx) != HPT_OK || hpt_tokenizer_decode(b, id, &y, &ly) != HPT_OK)
            return id;
        if (lx != ly || memcmp(x, y, lx)) return id;
    }
    return -1;
}

int cli_check_shards_tokenizer(const char *cmd, const char *data, const char *model, int V,
                               int force) {
    char tpath[4200];
    if (!data || !shards_tokenizer(data, tpath, sizeof tpath)) return 0;
    hpt_tokenizer *st = NULL, *mt = NULL;
    if (hpt_tokenizer_load(tpath, &st) != HPT_OK) return 0; /* unreadable: nothing known */
    char why[10000] = "";
    int sv = hpt_tokenizer_vocab_size(st);
    struct stat sb;
    if (V > 0 && sv > V)
        snprintf(why, sizeof why, "the shards' tokenizer %s has %d tokens, more than the model's "
                 "vocabulary (%d)", tpath, sv, V);
    else if (model && stat(model, &sb) == 0 && S_ISDIR(sb.st_mode) &&
             hpt_tokenizer_load(model, &mt) == HPT_OK) {
        int mv = hpt_tokenizer_vocab_size(mt), d = first_difference(st, mt);
        if (mv != sv || d >= 0) {
            char at[64] = "";
            if (d >= 0) snprintf(at, sizeof at, ", token %d differs", d);
            snprintf(why, sizeof why, "the shards were tokenized with another tokenizer than the "
                     "model's (%s: %d tokens; %s's: %d%s)", tpath, sv, model, mv, at);
        }
    }
    hpt_tokenizer_free(st);
    hpt_tokenizer_free(mt);
    if (!*why) return 0;
    if (force) {
        fprintf(stderr, "hptrain: warning: %s; going on (--force)\n", why);
        return 0;
    }
    return cli_error("%s: %s: tokenize with the model's (hptrain tokenize --model DIR), or "
                     "--force to go on", cmd, why);
}
