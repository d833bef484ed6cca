/* data_order.c: the order and the split of a loader's rows, as pure functions of a seed
 * (docs/data.md). io_data_perm is a permutation of [0, n) chosen by (seed, epoch): a Feistel
 * network over the smallest even power of two >= n, walked in cycles until the value falls
 * below n, so row i of an epoch is found from (seed, epoch, i) alone: no table, no state,
 * and a resumed run that knows its (epoch, position) reads the rows it would have read.
 * io_data_choose picks the validation documents: the documents in the order of a seeded
 * permutation, taken while the chosen tokens are below the fraction asked, so the set is
 * within one document's tokens of the fraction. io_scan_delims finds a raw shard's document
 * starts (each occurrence of the delimiter token). */
#include "core/core.h"
#include "io/io_int.h"

#include <stdlib.h>

static uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t io_data_perm(uint64_t i, uint64_t n, uint64_t seed, uint64_t epoch) {
    if (n <= 1) return 0;
    int bits = 2;
    while (bits < 64 && (1ull << bits) < n) bits++;
    bits += bits & 1; /* two halves of the same width */
    const int half = bits / 2;
    const uint64_t mask = (1ull << half) - 1;
    const uint64_t key = mix64(seed ^ mix64(epoch + 0x5EEDull));
    uint64_t x = i;
    do { /* cycle walking: a bijection of [0, 2^bits) restricted to [0, n) */
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = 0; round < 6; round++) {
            uint64_t f = mix64(key ^ (round << 56) ^ r) & mask;
            uint64_t t = l ^ f;
            l = r;
            r = t;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

hpt_status io_data_choose(const uint64_t *doc_len, size_t n_docs, double fraction, uint64_t seed,
                          uint8_t *is_val, size_t *n_val) {
    uint64_t total = 0, chosen = 0;
    for (size_t i = 0; i < n_docs; i++) total += doc_len[i];
    *n_val = 0;
    for (size_t i = 0; i < n_docs; i++) is_val[i] = 0;
    if (!(fraction > 0.0 && fraction < 1.0))
        return hpt_fail(HPT_ERR_INVALID, "the validation fraction %g is not between 0 and 1", fraction);
    if (n_docs < 2)
        return hpt_fail(HPT_ERR_INVALID, "the validation split is by document and the data holds "
                        "%zu document%s (%llu tokens): give validation shards (--val), or "
                        "tokenize the text as several documents (one file each)", n_docs,
                        n_docs == 1 ? "" : "s", (unsigned long long)total);
    const double want = fraction * (double)total;
    /* the last document of the order is never taken: training keeps at least one */
    for (size_t k = 0; k + 1 < n_docs && (double)chosen < want; k++) {
        size_t i = (size_t)io_data_perm(k, n_docs, seed, UINT64_MAX);
        is_val[i] = 1;
        chosen += doc_len[i];
        (*n_val)++;
    }
    return HPT_OK;
}

hpt_status io_scan_delims(const char *path, int width, uint64_t count, uint32_t delim,
                          hpt_status (*fn)(void *ctx, uint64_t offset), void *ctx) {
    FILE *f;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &f, &size));
    enum { CHUNK = 1 << 16 };
    uint32_t *buf = malloc(CHUNK * 4);
    hpt_status s = buf ? HPT_OK : hpt_fail(HPT_ERR_OOM, "scanning %s", path);
    if (s == HPT_OK && fseek(f, 1024, SEEK_SET) != 0) s = hpt_fail(HPT_ERR_IO, "cannot seek in %s", path);
    for (uint64_t at = 0; s == HPT_OK && at < count; at += CHUNK) {
        size_t k = (size_t)(count - at < CHUNK ? count - at : CHUNK);
        s = io_read_exact(f, buf, k * (size_t)width, path, "tokens");
        const uint16_t *narrow = (const uint16_t *)(void *)buf;
        for (size_t i = 0; s == HPT_OK && i < k; i++)
            if ((width == 2 ? narrow[i] : buf[i]) == delim) s = fn(ctx, at + i);
    }
    free(buf);
    fclose(f);
    return s;
}
