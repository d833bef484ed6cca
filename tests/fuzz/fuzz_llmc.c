/* fuzz_llmc.c: llm.c GPT-2 checkpoints (src/io/llmc.c), version 3 (fp32) and 5 (bf16): the
 * header check alone, the whole load into a model, and the inference engine's streaming load
 * (fp32 or int8, by the input's size's parity). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_file("model.bin", data, size);
    hpt_model_config cfg;
    (void)hpt_model_read_config(path, &cfg);
    hpt_mem *mem = fz_mem(64u << 20);
    hpt_model *m = NULL;
    if (hpt_model_load(mem, path, &m) == HPT_OK) hpt_model_free(m);
    /* one of the two weight kinds per input (the engine's setup costs ~35 ms a load): both
     * read the file through the same stream, the kind changes what is kept */
    hpt_infer *inf = NULL;
    if (hpt_infer_load(mem, path, size & 1 ? HPT_WEIGHTS_Q8 : HPT_WEIGHTS_F32, 0, &inf) == HPT_OK)
        hpt_infer_free(inf);
    hpt_mem_destroy(mem);
    return 0;
}
