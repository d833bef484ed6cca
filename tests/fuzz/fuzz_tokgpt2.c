/* fuzz_tokgpt2.c: GPT-2's tokenizer files, encoder.json and vocab.bpe (src/io/tokenizer.c).
 * The input is encoder.json, a NUL byte, then vocab.bpe (no NUL: vocab.bpe is empty). A
 * tokenizer that loads encodes a fixed text and the input's first bytes, and decodes what it
 * made. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void encode(hpt_tokenizer *t, const char *text, size_t len) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (hpt_tokenizer_encode(t, text, len, &ids, &n) == HPT_OK) {
        for (size_t i = 0; i < n; i++) {
            const char *b;
            size_t k;
            (void)hpt_tokenizer_decode(t, ids[i], &b, &k);
        }
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[600];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/tok", fz_dir());
        if (mkdir(dir, 0700) != 0) abort();
    }
    const uint8_t *nul = memchr(data, 0, size);
    size_t nj = nul ? (size_t)(nul - data) : size;
    fz_file("tok/encoder.json", data, nj);
    fz_file("tok/vocab.bpe", nul ? nul + 1 : data, nul ? size - nj - 1 : 0);
    hpt_tokenizer *t = NULL;
    if (hpt_tokenizer_load(dir, &t) != HPT_OK) return 0;
    static const char k_text[] = "Hello world, it's 2024!\n\n  \tabc   def?! \xc3\xbc" "n\xc3\xaf" "c\xc3\xb6"
                                 "d\xc3\xa9 \xf0\x9f\x99\x82 <|endoftext|> 'll 've\r\n";
    encode(t, k_text, sizeof k_text - 1);
    encode(t, (const char *)data, size < 300 ? size : 300);
    hpt_tokenizer_free(t);
    return 0;
}
