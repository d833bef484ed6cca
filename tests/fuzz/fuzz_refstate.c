/* fuzz_refstate.c: llm.c's reference state (magic 20240327; src/io/llmc.c), the file hptrain
 * verify reads, for a fixed small model (L=1, C=8, NH=2, V=16, maxT=8). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_file("state.bin", data, size);
    hpt_model_config cfg;
    if (hpt_model_config_parse("gpt2:L=1,C=8,NH=2,V=16,T=8", &cfg) != HPT_OK) return 0;
    hpt_mem *mem = fz_mem(64u << 20);
    hpt_ref_state st;
    if (hpt_ref_state_load(path, mem, &cfg, &st) == HPT_OK) hpt_ref_state_free(mem, &cfg, &st);
    hpt_mem_destroy(mem);
    return 0;
}
