/* fuzz_tokjson.c: Hugging Face tokenizer.json (src/io/tokenizer_hf.c) through
 * hpt_tokenizer_load on a model directory (fz_tokenizer_dir: fuzz_common.c). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fz_tokenizer_dir("tj", "tokenizer.json", data, size);
}
