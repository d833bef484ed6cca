/* fuzz_tokjson.c: Hugging Face tokenizer.json (src/io/tokenizer_hf.c) through
 * hpt_tokenizer_load on a model directory; a tokenizer that loads encodes a fixed text with
 * and without its special tokens and the input's first bytes, and decodes what it made. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static void encode(hpt_tokenizer *t, const char *text, size_t len, unsigned flags) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (hpt_tokenizer_encode_ex(t, text, len, flags, &ids, &n) == HPT_OK) {
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
        snprintf(dir, sizeof dir, "%s/tj", fz_dir());
        if (mkdir(dir, 0700) != 0) abort();
    }
    fz_file("tj/tokenizer.json", data, size);
    hpt_tokenizer *t = NULL;
    if (hpt_tokenizer_load(dir, &t) != HPT_OK) return 0;
    static const char k_text[] = "Hello world, it's 2024!\n\n  \tabc   def?! \xc3\xbc" "n\xc3\xaf"
                                 "c\xc3\xb6" "d\xc3\xa9 \xf0\x9f\x99\x82 <|endoftext|> 'll 've\r\n";
    encode(t, k_text, sizeof k_text - 1, 0);
    encode(t, k_text, sizeof k_text - 1, HPT_TOK_SPECIAL);
    encode(t, (const char *)data, size < 300 ? size : 300, HPT_TOK_SPECIAL);
    hpt_tokenizer_free(t);
    return 0;
}
