/* shard_write.c: writes llm.c's token shards: a 256 x int32 header (magic, version, token
 * count), then the tokens: magic 20240520 version 1 with uint16 tokens (GPT-2), magic 20240801
 * version 7 with uint32 tokens (vocabularies above 65,536, Llama 3), as llm.c writes them. The
 * file appears under its name only complete: written to a temporary name in the same
 * directory, synced, renamed (io_atomic_*). */
#include "core/core.h"
#include "io/io_int.h"

#define SHARD_MAGIC 20240520
#define SHARD_MAGIC_U32 20240801

static hpt_status write_shard(const char *path, int32_t magic, int32_t version, const void *tokens,
                              size_t n, size_t width) {
    if (n > INT32_MAX)
        return hpt_fail(HPT_ERR_INVALID, "%s: %zu tokens do not fit a shard (at most %d)", path, n,
                        INT32_MAX);
    if (n && !tokens) return hpt_fail(HPT_ERR_INVALID, "%s: NULL tokens", path);
    int32_t h[256] = {magic, version, (int32_t)n};
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, h, sizeof h);
    if (s == HPT_OK) s = io_atomic_write(&w, tokens, n * width);
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w);
}

hpt_status hpt_shard_write(const char *path, const uint16_t *tokens, size_t n) {
    return write_shard(path, SHARD_MAGIC, 1, tokens, n, sizeof *tokens);
}

hpt_status hpt_shard_write_u32(const char *path, const uint32_t *tokens, size_t n) {
    return write_shard(path, SHARD_MAGIC_U32, 7, tokens, n, sizeof *tokens);
}
