/* fuzz_tiktoken.c: tiktoken's tokenizer.model (src/io/tokenizer_hf.c: "base64-bytes rank"
 * lines) through
 * hpt_tokenizer_load on a model directory (fz_tokenizer_dir: fuzz_common.c). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fz_tokenizer_dir("tm", "tokenizer.model", data, size);
}
