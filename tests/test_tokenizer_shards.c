/* test_tokenizer_shards.c: llm.c's token shards, uint16 (20240520, version 1) and uint32
 * (20240801, version 7), written by hpt_shard_write[_u32] and read by the data loader:
 *   (a) the u32 header and payload bytes as llm.c lays them out;
 *   (b) the same token sequence in a uint16 and a uint32 shard gives the same batches, and a
 *       glob over both kinds walks them in name order; ids above 65,535 come back exactly;
 *   (c) truncated and corrupt shards (magic, version, count against size, a token at or above
 *       the vocabulary) fail with HPT_ERR_FORMAT and a one-line message naming the file.
 */
#include "testlib.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char *path_in(const char *dir, const char *name) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

/* <tmp>/name, created; a static buffer per name (path_in's buffers rotate) */
static const char *subdir(const char *name) {
    static char dirs[4][512];
    static int k;
    char *p = dirs[k++ % 4];
    snprintf(p, sizeof dirs[0], "%s/%s", t_tmpdir(), name);
    mkdir(p, 0755);
    return p;
}

static void write_raw(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(data, 1, len, f) == len);
    fclose(f);
}

/* every batch of the loader over pattern equals the windows of want (n tokens, walked as the
 * loader documents: offset += B*T, next shard when the rest is shorter than a window) */
static void check_batches(hpt_mem *mem, const char *pattern, int B, int T, int V, const uint32_t *want,
                          size_t n, int n_batches) {
    hpt_dataloader *d = NULL;
    CHECK_OK(hpt_dataloader_open(mem, pattern, B, T, V, &d));
    if (!d) return;
    size_t BT = (size_t)B * T, off = 0;
    int bad = 0;
    for (int b = 0; b < n_batches; b++) {
        const int32_t *x, *y;
        CHECK_OK(hpt_dataloader_next(d, &x, &y));
        if (off + BT + 1 > n) off = 0;
        for (size_t i = 0; i < BT; i++)
            bad += x[i] != (int32_t)want[off + i] || y[i] != (int32_t)want[off + i + 1];
        off += BT;
    }
    CHECK_MSG(bad == 0, "%s: %d tokens differ from the written ones", pattern, bad);
    hpt_dataloader_free(d);
}

static void expect_open_error(hpt_mem *mem, const char *path, const char *part) {
    hpt_dataloader *d = (hpt_dataloader *)&d;
    hpt_status s = hpt_dataloader_open(mem, path, 2, 4, 200000, &d);
    CHECK_MSG(s == HPT_ERR_FORMAT, "%s: %s (%s)", path, hpt_status_str(s), hpt_last_error());
    const char *msg = hpt_last_error();
    CHECK_MSG(strstr(msg, path) && strstr(msg, part) && !strchr(msg, '\n'), "message '%s' lacks '%s'",
              msg, part);
    if (s == HPT_OK) hpt_dataloader_free(d);
}

int main(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    const char *dir = subdir("shards");
    enum { N = 1000 };
    uint32_t tok[N];
    uint16_t tok16[N];
    uint64_t x = 7;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        tok[i] = (uint32_t)(x >> 33) % 60000u;
        tok16[i] = (uint16_t)tok[i];
    }
    /* (a) the u32 layout */
    const char *p32 = path_in(dir, "a_000000.bin"), *p16 = path_in(dir, "b_000000.bin");
    CHECK_OK(hpt_shard_write_u32(p32, tok, N));
    CHECK_OK(hpt_shard_write(p16, tok16, N));
    size_t size;
    unsigned char *d = t_read_file(p32, &size);
    CHECK(d && size == 1024 + 4 * N);
    if (d) {
        int32_t h[256];
        memcpy(h, d, sizeof h);
        int zero = 1;
        for (int i = 3; i < 256; i++) zero &= h[i] == 0;
        CHECK(h[0] == 20240801 && h[1] == 7 && h[2] == N && zero);
        CHECK(memcmp(d + 1024, tok, 4 * N) == 0);
    }
    CHECK_STATUS(hpt_shard_write_u32(path_in(dir, "null.bin"), NULL, 5), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_shard_write_u32("/nonexistent-dir/x.bin", tok, 5), HPT_ERR_IO);

    /* (b) the same batches from either width; a mixed glob; large ids */
    check_batches(mem, p16, 2, 16, 65536, tok, N, 40);
    check_batches(mem, p32, 2, 16, 65536, tok, N, 40);
    check_batches(mem, p32, 3, 7, 60000, tok, N, 100);
    const char *mixdir = subdir("mix");
    CHECK_OK(hpt_shard_write(path_in(mixdir, "train_000000.bin"), tok16, 500));
    CHECK_OK(hpt_shard_write_u32(path_in(mixdir, "train_000001.bin"), tok + 500, 500));
    {   /* windows of 33 tokens: 15 from the first shard (offsets 0..448), then the second's */
        hpt_dataloader *dl = NULL;
        CHECK_OK(hpt_dataloader_open(mem, path_in(mixdir, "train_*.bin"), 1, 32, 65536, &dl));
        int bad = 0;
        for (int b = 0; b < 30 && dl; b++) {
            const int32_t *xi, *yi;
            CHECK_OK(hpt_dataloader_next(dl, &xi, &yi));
            size_t base = b < 15 ? (size_t)b * 32 : 500 + (size_t)(b - 15) * 32;
            for (int i = 0; i < 32; i++) bad += xi[i] != (int32_t)tok[base + i] || yi[i] != (int32_t)tok[base + i + 1];
        }
        CHECK_MSG(bad == 0, "mixed shards: %d tokens differ", bad);
        hpt_dataloader_free(dl);
    }
    uint32_t big[N];
    for (int i = 0; i < N; i++) big[i] = 128255u - (uint32_t)(i * 131 % 128256);
    const char *pbig = path_in(dir, "big_000000.bin");
    CHECK_OK(hpt_shard_write_u32(pbig, big, N));
    check_batches(mem, pbig, 4, 8, 128256, big, N, 50);
    {   /* a token at or above the vocabulary: refused when its window is read */
        hpt_dataloader *dl = NULL;
        CHECK_OK(hpt_dataloader_open(mem, pbig, 4, 8, 128000, &dl));
        hpt_status s = HPT_OK;
        for (int b = 0; b < 40 && s == HPT_OK && dl; b++) {
            const int32_t *xi, *yi;
            s = hpt_dataloader_next(dl, &xi, &yi);
        }
        CHECK_STATUS(s, HPT_ERR_FORMAT);
        CHECK(strstr(hpt_last_error(), "not below the model's vocabulary size 128000") != NULL);
        hpt_dataloader_free(dl);
    }

    /* (c) truncated and corrupt */
    const char *bad = subdir("bad");
    static const size_t cut[] = {0, 3, 1000, 1023, 1024 + 3, 1024 + 4 * N - 1};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "cut%zu.bin", cut[i]);
        const char *p = path_in(bad, name);
        write_raw(p, d, cut[i]);
        expect_open_error(mem, p, cut[i] < 1024 ? "truncated" : "truncated or corrupt");
    }
    unsigned char *c = malloc(1024 + 4 * N);
    int32_t hdr[][3] = {{20240802, 7, N}, {20240801, 1, N}, {20240520, 7, N}, {20240801, 7, N + 1},
                        {20240801, 7, N / 2}, {20240801, 7, -1}};
    const char *part[] = {"not a token shard", "version 1", "version 7", "truncated or corrupt",
                          "truncated or corrupt", "truncated or corrupt"};
    for (size_t i = 0; d && c && i < sizeof hdr / sizeof hdr[0]; i++) {
        memcpy(c, d, 1024 + 4 * N);
        memcpy(c, hdr[i], sizeof hdr[i]);
        char name[64];
        snprintf(name, sizeof name, "hdr%zu.bin", i);
        const char *p = path_in(bad, name);
        write_raw(p, c, 1024 + 4 * N);
        expect_open_error(mem, p, part[i]);
    }
    free(c);
    free(d);
    hpt_mem_destroy(mem);
    return t_done("test_tokenizer_shards");
}
