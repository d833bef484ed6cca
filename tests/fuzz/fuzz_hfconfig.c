/* fuzz_hfconfig.c: Hugging Face config.json (src/io/hfconfig.c) from memory, and the model
 * configuration made of what it read. */
#include "fuzz.h"
#include "io/hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hf_config c;
    hpt_model_config m;
    if (hf_config_parse((const char *)data, size, "config.json", &c) == HPT_OK)
        (void)hf_config_to_model(&c, &m);
    return 0;
}
