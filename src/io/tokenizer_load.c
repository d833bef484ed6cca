/* tokenizer_load.c: hpt_tokenizer_load, which picks the loader a path asks for: llm.c's
 * tokenizer.bin or GPT-2's encoder.json + vocab.bpe (tokenizer.c), Hugging Face's
 * tokenizer.json or tiktoken's tokenizer.model (tokenizer_hf.c), a file by its first bytes and
 * a directory by the files it holds. Apart so that the loaders need not know one another. */
#include "core/core.h"
#include "io/tokenizer_int.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Which loader a file's first bytes ask for: '{' Hugging Face's tokenizer.json; a line
 * "BASE64 RANK" tiktoken's tokenizer.model; anything else llm.c's tokenizer.bin (whose loader
 * names what is wrong with it). */
static hpt_status load_file(const char *path, hpt_tokenizer **out) {
    unsigned char head[64];
    size_t n = 0;
    FILE *f = fopen(path, "rb");
    if (f) {
        n = fread(head, 1, sizeof head, f);
        fclose(f);
    }
    size_t i = 0;
    while (i < n && (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t')) i++;
    if (i < n && head[i] == '{') return tok_load_hf_json(path, out);
    size_t b64 = 0;
    while (b64 < n && (isalnum(head[b64]) || head[b64] == '+' || head[b64] == '/' || head[b64] == '='))
        b64++;
    if (b64 > 0 && b64 + 1 < n && head[b64] == ' ' && head[b64 + 1] >= '0' && head[b64 + 1] <= '9')
        return tok_load_tiktoken(path, out);
    return tok_load_llmc(path, out);
}

static int file_in(const char *dir, const char *name, char *buf, size_t cap) {
    struct stat st;
    snprintf(buf, cap, "%s/%s", dir, name);
    return stat(buf, &st) == 0 && S_ISREG(st.st_mode);
}

hpt_status hpt_tokenizer_load(const char *path, hpt_tokenizer **out) {
    *out = NULL;
    struct stat st;
    if (!path || !*path) return hpt_fail(HPT_ERR_INVALID, "no tokenizer path given");
    if (stat(path, &st) != 0)
        return hpt_fail(HPT_ERR_IO, "cannot open tokenizer %s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return load_file(path, out);
    /* a directory: GPT-2's two files, else a model directory's tokenizer.json or .model */
    char p[4096];
    if (!file_in(path, "encoder.json", p, sizeof p)) {
        if (file_in(path, "tokenizer.json", p, sizeof p)) return tok_load_hf_json(p, out);
        if (file_in(path, "tokenizer.model", p, sizeof p)) return tok_load_tiktoken(p, out);
    }
    return tok_load_gpt2_dir(path, out);
}
