/* shard_write.c: writes llm.c's token shards: a 256 x int32 header (magic, version, token
 * count), then the tokens: magic 20240520 version 1 with uint16 tokens (GPT-2), magic 20240801
 * version 7 with uint32 tokens (vocabularies above 65,536, Llama 3), as llm.c writes them; and
 * hptrain's masked shards for chat data (docs/formats.md): the same magics with version 2
 * (uint16) or 8 (uint32), the example count in header[3], then after the tokens one byte per
 * token (1: a target of the loss, 0: context only) and the examples' first tokens (uint32,
 * increasing from 0). The file appears under its name only complete: written to a temporary
 * name in the same directory, synced, renamed (io_atomic_*). */
#include "core/core.h"
#include "io/io_int.h"

#include <stdlib.h>

#define SHARD_MAGIC 20240520
#define SHARD_MAGIC_U32 20240801

static hpt_status write_shard(const char *path, int32_t magic, int32_t version, const void *tokens,
                              size_t n, size_t width, const uint8_t *target,
                              const uint32_t *starts, size_t n_ex) {
    if (n > INT32_MAX || n_ex > INT32_MAX)
        return hpt_fail(HPT_ERR_INVALID, "%s: %zu tokens do not fit a shard (at most %d)", path, n,
                        INT32_MAX);
    if (n && !tokens) return hpt_fail(HPT_ERR_INVALID, "%s: NULL tokens", path);
    int32_t h[256] = {magic, version, (int32_t)n, (int32_t)n_ex};
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, h, sizeof h);
    if (s == HPT_OK) s = io_atomic_write(&w, tokens, n * width);
    if (s == HPT_OK && target) s = io_atomic_write(&w, target, n);
    if (s == HPT_OK && target) s = io_atomic_write(&w, starts, n_ex * sizeof *starts);
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w);
}

hpt_status hpt_shard_write(const char *path, const uint16_t *tokens, size_t n) {
    return write_shard(path, SHARD_MAGIC, 1, tokens, n, sizeof *tokens, NULL, NULL, 0);
}

hpt_status hpt_shard_write_u32(const char *path, const uint32_t *tokens, size_t n) {
    return write_shard(path, SHARD_MAGIC_U32, 7, tokens, n, sizeof *tokens, NULL, NULL, 0);
}

hpt_status hpt_shard_write_masked(const char *path, const uint32_t *tokens, const uint8_t *target,
                                  size_t n, const uint32_t *starts, size_t n_examples, int width) {
    if (width != 2 && width != 4)
        return hpt_fail(HPT_ERR_INVALID, "%s: token width %d (2 or 4 bytes)", path, width);
    if (n && (!target || !tokens))
        return hpt_fail(HPT_ERR_INVALID, "%s: NULL tokens or targets", path);
    if (n_examples && !starts) return hpt_fail(HPT_ERR_INVALID, "%s: NULL example starts", path);
    if (n && (n_examples == 0 || starts[0] != 0))
        return hpt_fail(HPT_ERR_INVALID, "%s: the first example must start at token 0", path);
    for (size_t i = 0; i < n; i++) {
        if (target[i] > 1)
            return hpt_fail(HPT_ERR_INVALID, "%s: target flag %u at token %zu (0 or 1)", path,
                            target[i], i);
        if (width == 2 && tokens[i] > UINT16_MAX)
            return hpt_fail(HPT_ERR_INVALID, "%s: token %u at %zu does not fit 16 bits", path,
                            tokens[i], i);
    }
    for (size_t e = 0; e < n_examples; e++)
        if (starts[e] >= n || (e && starts[e] <= starts[e - 1]))
            return hpt_fail(HPT_ERR_INVALID, "%s: example %zu starts at %u: starts must increase "
                            "and lie below the token count %zu", path, e, starts[e], n);
    if (width == 4)
        return write_shard(path, SHARD_MAGIC_U32, 8, tokens, n, 4,
                           target ? target : (const uint8_t *)"", starts, n_examples);
    uint16_t *narrow = n ? malloc(n * sizeof *narrow) : NULL;
    if (n && !narrow) return hpt_fail(HPT_ERR_OOM, "%s: %zu tokens", path, n);
    for (size_t i = 0; i < n; i++) narrow[i] = (uint16_t)tokens[i];
    hpt_status s = write_shard(path, SHARD_MAGIC, 2, narrow, n, 2,
                               target ? target : (const uint8_t *)"", starts, n_examples);
    free(narrow);
    return s;
}
