/* test_corrupt_disk.c: CRC-32C (core/crc32c.c) and the disk tier's page checksums (mem/disk.c).
 *   (a) crc32c: the check value "123456789" -> 0xE3069283 and RFC 3720's iSCSI vectors (32
 *       zeros, 32 0xFF, 0..31, 31..0); the hardware path equals the table path on every length
 *       0..600 at every alignment 0..15 and on 1 MiB; a checksum continued piece by piece
 *       equals the one in one call; crc32c_pages gives each page's checksum (0..7 pages);
 *   (b) hpt_mem_disk_*: one flipped byte in a block's file (through a second descriptor, as
 *       another process would) makes the next read that covers its page HPT_ERR_CHECKSUM, one
 *       line naming the category, the block and the page; reads of other pages still work; the
 *       unaligned path (bounce buffer) checks too, and refuses a partial write into a bad page
 *       (its read-modify-write would bless the damage); flipping the byte back heals it; a
 *       write of the whole page makes it valid again;
 *   (c) the offload engine, paused between steps of a run with weights, gradients and AdamW
 *       state on disk (exact and fused): a byte flipped in the middle of block 2 of each of its
 *       disk files in turn (found through /proc/self/fd, as the files have no name) ends either
 *       in HPT_ERR_CHECKSUM naming "block 2" within the next steps, or, where the step rewrites
 *       the page before reading it (gradients), in the clean run's bits: never in other bits.
 *       Every file that the engine reads before writing (weights, m, v) is detected.
 * test_corrupt_disk ARCH: (c) on the architecture's case (arch_cases.h), (a) and (b) once, in
 * the first case's run. */
#include "testlib.h"
#include "core/crc32c.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void test_crc(void) {
    CHECK(crc32c(0, "123456789", 9) == 0xE3069283u);
    CHECK(crc32c_sw(0, "123456789", 9) == 0xE3069283u);
    unsigned char v[32];
    memset(v, 0, 32);
    CHECK(crc32c(0, v, 32) == 0x8A9136AAu);
    memset(v, 0xff, 32);
    CHECK(crc32c(0, v, 32) == 0x62A8AB43u);
    for (int i = 0; i < 32; i++) v[i] = (unsigned char)i;
    CHECK(crc32c(0, v, 32) == 0x46DD794Eu);
    for (int i = 0; i < 32; i++) v[i] = (unsigned char)(31 - i);
    CHECK(crc32c(0, v, 32) == 0x113FDB5Cu);
    size_t big = 1u << 20;
    unsigned char *b = malloc(big + 16);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < big + 16; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        b[i] = (unsigned char)x;
    }
    int bad = 0;
    for (size_t n = 0; n <= 600; n++)
        for (size_t a = 0; a < 16; a++) bad += crc32c(7, b + a, n) != crc32c_sw(7, b + a, n);
    for (size_t n = 4070; n <= 4200; n++) bad += crc32c(0, b + 3, n) != crc32c_sw(0, b + 3, n);
    CHECK_MSG(bad == 0, "%d lengths where the hardware and table paths differ", bad);
    CHECK(crc32c(0, b, big) == crc32c_sw(0, b, big));
    uint32_t c = 0;
    for (size_t o = 0, k = 1; o < big; o += k, k = k * 3 + 1) c = crc32c(c, b + o, (k < big - o ? k : big - o));
    CHECK(c == crc32c(0, b, big));
    /* pages: each the checksum of its 4096 bytes, whatever the count (3 at a time + the rest) */
    uint32_t pc[7];
    for (size_t np = 0; np <= 7; np++) {
        memset(pc, 0, sizeof pc);
        crc32c_pages(b + 8, np, pc);
        for (size_t i = 0; i < np; i++) bad += pc[i] != crc32c_sw(0, b + 8 + i * 4096, 4096);
    }
    CHECK_MSG(bad == 0, "crc32c_pages differs from the table path");
    printf("crc32c: %s path\n", crc32c_hw() ? "SSE4.2 crc32" : "table");
    free(b);
}


static void test_mem_pages(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    char dir[600];
    snprintf(dir, sizeof dir, "%s/pages", t_tmpdir());
    CHECK_OK(hpt_mem_set_disk_dir(mem, dir));
    size_t n = 10 * 4096 + 100;
    hpt_disk_ref r;
    CHECK_OK(hpt_mem_disk_alloc(mem, HPT_CAT_OPTIM, n, &r));
    r.unit_bytes = 4 * 4096; /* blocks of 4 pages */
    unsigned char *a, *b;
    CHECK_OK(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, n, (void **)&a));
    CHECK_OK(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, n, (void **)&b));
    if (!a || !b || r.fd < 0) return;
    for (size_t i = 0; i < n; i++) a[i] = (unsigned char)(i * 7 + 3);
    CHECK_OK(hpt_mem_disk_read(mem, &r, 0, b, n, HPT_TIER_HOST, HPT_CAT_OPTIM)); /* zeros: valid */
    CHECK_OK(hpt_mem_disk_write(mem, &r, 0, a, n, HPT_TIER_HOST, HPT_CAT_OPTIM));
    t_flip_byte(r.fd, 5 * 4096 + 17); /* page 5, block 1 */
    CHECK_STATUS(hpt_mem_disk_read(mem, &r, 0, b, n, HPT_TIER_HOST, HPT_CAT_OPTIM), HPT_ERR_CHECKSUM);
    const char *e = hpt_last_error();
    CHECK_MSG(strstr(e, "checksum mismatch") && strstr(e, "block 1,") && strstr(e, "page 5,") &&
              strstr(e, "optim") && !strchr(e, '\n'), "error: %s", e);
    /* other pages read; the unaligned path checks the page it touches */
    CHECK_OK(hpt_mem_disk_read(mem, &r, 0, b, 5 * 4096, HPT_TIER_HOST, HPT_CAT_OPTIM));
    CHECK(memcmp(a, b, 5 * 4096) == 0);
    CHECK_STATUS(hpt_mem_disk_read(mem, &r, 5 * 4096 + 1000, b, 10, HPT_TIER_HOST, HPT_CAT_OPTIM),
                 HPT_ERR_CHECKSUM);
    /* an unaligned write inside the bad page reads it first: refused, the damage not blessed */
    CHECK_STATUS(hpt_mem_disk_write(mem, &r, 5 * 4096 + 1000, a, 10, HPT_TIER_HOST, HPT_CAT_OPTIM),
                 HPT_ERR_CHECKSUM);
    t_flip_byte(r.fd, 5 * 4096 + 17); /* back */
    CHECK_OK(hpt_mem_disk_read(mem, &r, 0, b, n, HPT_TIER_HOST, HPT_CAT_OPTIM));
    CHECK(memcmp(a, b, n) == 0);
    /* the tail page past the requested size is checked too */
    t_flip_byte(r.fd, 10 * 4096 + 50);
    CHECK_STATUS(hpt_mem_disk_read(mem, &r, 10 * 4096, b, 100, HPT_TIER_HOST, HPT_CAT_OPTIM),
                 HPT_ERR_CHECKSUM);
    t_flip_byte(r.fd, 10 * 4096 + 50);
    /* rewriting a whole damaged page makes it valid again (no read-modify-write) */
    t_flip_byte(r.fd, 3 * 4096 + 9);
    CHECK_STATUS(hpt_mem_disk_read(mem, &r, 0, b, n, HPT_TIER_HOST, HPT_CAT_OPTIM), HPT_ERR_CHECKSUM);
    CHECK_OK(hpt_mem_disk_write(mem, &r, 3 * 4096, a + 3 * 4096, 4096, HPT_TIER_HOST, HPT_CAT_OPTIM));
    CHECK_OK(hpt_mem_disk_read(mem, &r, 0, b, n, HPT_TIER_HOST, HPT_CAT_OPTIM));
    CHECK(memcmp(a, b, n) == 0);
    hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, a, n);
    hpt_mem_free(mem, HPT_TIER_HOST, HPT_CAT_OPTIM, b, n);
    hpt_mem_disk_free(mem, HPT_CAT_OPTIM, &r);
    hpt_mem_destroy(mem);
}


#define L_ 4
static char SHAPE[T_SHAPE_MAX]; /* L_ layers */
static void test_engine(int fused) {
    char train[512], dir[600];
    t_make_shards(77, 23, 5, 8, 4000, 0, train, NULL);
    snprintf(dir, sizeof dir, "%s/eng%d", t_tmpdir(), fused);
    hpt_train_opts o = t_train_opts(SHAPE, train, 2, 16, 5, 2);
    o.grad_clip = fused ? 0.0f : 1.0f;
    o.offload = hpt_offload_defaults();
    o.offload.params = o.offload.grads = o.offload.optim = HPT_TIER_DISK;
    o.offload.max_active = 2;
    o.offload.prefetch = 1;
    o.offload.fused = fused;
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(o.model, &cfg));
    size_t np = hpt_model_config_num_params(&cfg);
    float *clean = calloc(np, 4), *got = calloc(np, 4);
    float losses[8];
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    CHECK_OK(hpt_mem_set_disk_dir(mem, dir));
    t_train_run(mem, &o, 0, losses, NULL, clean);
    hpt_mem_destroy(mem);
    int files = -1, detected = 0, silent_same = 0;
    for (int which = 0; files < 0 || which < files; which++) {
        CHECK_OK(hpt_mem_create(&mem));
        CHECK_OK(hpt_mem_set_disk_dir(mem, dir));
        hpt_trainer *tr = NULL;
        CHECK_OK(hpt_trainer_create(mem, &o, &tr));
        if (!tr) break;
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
        CHECK_OK(hpt_trainer_step(tr, &p));
        int fds[16];
        off_t sizes[16];
        int nf = t_disk_fds(dir, fds, sizes, 16);
        if (files < 0) files = nf;
        CHECK(nf == files && nf >= 3);
        if (which >= nf) { hpt_trainer_free(tr); hpt_mem_destroy(mem); break; }
        off_t blk = sizes[which] / L_; /* each file holds L_ blocks of one stride */
        t_flip_byte(fds[which], 2 * blk + blk / 2);
        hpt_status s = HPT_OK;
        while (s == HPT_OK && !hpt_trainer_done(tr)) s = hpt_trainer_step(tr, &p);
        if (s != HPT_OK) {
            const char *e = hpt_last_error();
            CHECK_MSG(s == HPT_ERR_CHECKSUM && strstr(e, "checksum mismatch") &&
                      strstr(e, "block 2,") && !strchr(e, '\n'),
                      "file %d: %s: %s", which, hpt_status_str(s), e);
            detected++;
            printf("fused=%d, file %d of %d: %s\n", fused, which, nf, e);
        } else {
            CHECK_OK(hpt_model_copy_params(hpt_trainer_model(tr), got));
            int same = memcmp(got, clean, np * 4) == 0;
            CHECK_MSG(same, "fused=%d file %d: corruption undetected and the weights differ",
                      fused, which);
            silent_same += same;
            printf("fused=%d, file %d of %d: rewritten before read, the clean run's bits\n",
                   fused, which, nf);
        }
        hpt_trainer_free(tr);
        hpt_mem_destroy(mem);
    }
    CHECK_MSG(detected >= 3, "fused=%d: %d of %d corruptions detected", fused, detected, files);
    printf("fused=%d: %d of %d files' corruptions detected, %d rewritten harmlessly\n", fused,
           detected, files, silent_same);
    free(clean);
    free(got);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_corrupt_disk");
    if (!a) return 2;
    t_arch_shape(a, SHAPE, L_, 32, 4, 64, 16, 0);
    if (t_arch_first(a)) {
        test_crc();
        test_mem_pages();
    }
    test_engine(0);
    test_engine(1);
    return t_done(t_arch_label(a, "test_corrupt_disk"));
}
