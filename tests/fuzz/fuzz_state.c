/* fuzz_state.c: hptrain's training-state checkpoint (src/train/state.c), loaded as a model in
 * memory and as one made with the offload engine (blocks on the host), with its sections.
 * An input that ends with the end marker gets its CRC-32C set to the checksum of the bytes
 * before it, so mutations reach the parser behind the checksum (a wrong checksum is one
 * branch, tested by test_state). */
#include "fuzz.h"
#include "core/crc32c.h"

#include <stdlib.h>
#include <string.h>

static void load(const char *path, const hpt_offload_opts *off) {
    hpt_mem *mem = fz_mem(64u << 20);
    hpt_model *m = NULL;
    hpt_optim *o = NULL;
    hpt_adamw_opts ao;
    hpt_train_pos pos;
    hpt_state_section sec[HPT_STATE_MAX_SECTIONS];
    int n_sec = 0;
    hpt_status s = hpt_state_load_offload_sections(path, mem, off, &m, &o, &ao, &pos, sec, &n_sec);
    if (s == HPT_OK) hpt_state_sections_free(mem, sec, n_sec);
    hpt_optim_free(o);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char k_end[8] = {'H', 'P', 'T', 'E', 'N', 'D', 0, 0};
    uint8_t *b = malloc(size ? size : 1);
    if (size) memcpy(b, data, size);
    if (size >= 20 && memcmp(b + size - 8, k_end, 8) == 0) {
        uint32_t c = crc32c(0, b, size - 12);
        memcpy(b + size - 12, &c, 4);
    }
    const char *path = fz_file("state.bin", b, size);
    load(path, NULL);
    hpt_offload_opts off = hpt_offload_defaults();
    off.params = off.grads = off.optim = HPT_TIER_HOST;
    load(path, &off);
    free(b);
    return 0;
}
