/* shard_write.c: writes llm.c's token shards: a 256 x int32 header (magic 20240520, version 1,
 * token count), then the tokens as uint16. The file appears under its name only complete:
 * written to a temporary name in the same directory, synced, renamed (io_atomic_*). */
#include "core/core.h"
#include "io/io_int.h"

#define SHARD_MAGIC 20240520

hpt_status hpt_shard_write(const char *path, const uint16_t *tokens, size_t n) {
    if (n > INT32_MAX)
        return hpt_fail(HPT_ERR_INVALID, "%s: %zu tokens do not fit a shard (at most %d)", path, n,
                        INT32_MAX);
    if (n && !tokens) return hpt_fail(HPT_ERR_INVALID, "%s: NULL tokens", path);
    int32_t h[256] = {SHARD_MAGIC, 1, (int32_t)n};
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, h, sizeof h);
    if (s == HPT_OK) s = io_atomic_write(&w, tokens, n * sizeof *tokens);
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w);
}
