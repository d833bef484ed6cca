/* fuzz_tokbin.c: llm.c's tokenizer file (magic 20240328; src/io/tokenizer.c): load, decode
 * every id and one past the end. */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_file("tokenizer.bin", data, size);
    hpt_tokenizer *t = NULL;
    if (hpt_tokenizer_load(path, &t) != HPT_OK) return 0;
    int V = hpt_tokenizer_vocab_size(t);
    for (int32_t id = 0; id <= V; id++) {
        const char *b;
        size_t n;
        (void)hpt_tokenizer_decode(t, id, &b, &n);
    }
    hpt_tokenizer_free(t);
    return 0;
}
