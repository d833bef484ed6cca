/* fuzz_safetensors.c: the safetensors reader (src/io/safetensors.c) on a file image in memory:
 * st_parse_buffer, then every tensor looked up by its name. */
#include "fuzz.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_header h;
    if (st_parse_buffer(data, size, "model.safetensors", &h) != HPT_OK) return 0;
    for (int i = 0; i < h.n; i++)
        if (st_find(&h, h.t[i].name) != &h.t[i]) __builtin_trap(); /* sorted by name: found */
    (void)st_find(&h, "wte");
    st_header_free(&h);
    return 0;
}
