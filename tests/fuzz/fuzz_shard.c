/* fuzz_shard.c: llm.c token shards (uint16, version 1; uint32, version 7) and their masked
 * versions (2 and 8: target flags and example starts) through the data loader
 * (src/io/dataloader.c): open, a few batches (wrapping to the start), a position set; and the
 * whole-shard reader (hpt_shard_read). */
#include "fuzz.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_file("train_000.bin", data, size);
    hpt_mem *mem = fz_mem(64u << 20);
    hpt_dataloader *d = NULL;
    if (hpt_dataloader_open(mem, path, 2, 4, 1000, &d) == HPT_OK) {
        const int32_t *x, *y;
        for (int i = 0; i < 6; i++)
            if (hpt_dataloader_next(d, &x, &y) != HPT_OK) break;
        (void)hpt_dataloader_set_pos(d, 0, 3);
        (void)hpt_dataloader_next(d, &x, &y);
        hpt_dataloader_free(d);
    }
    uint32_t *tok, *starts;
    uint8_t *target;
    size_t n, n_ex;
    if (hpt_shard_read(path, &tok, &target, &n, &starts, &n_ex) == HPT_OK) {
        free(tok);
        free(target);
        free(starts);
    }
    hpt_mem_destroy(mem);
    return 0;
}
