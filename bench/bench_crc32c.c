/* bench_crc32c.c: CRC-32C throughput (src/core/crc32c.c) over 4096-byte pages, as the disk
 * tier checks them, on a 64 MiB buffer: crc32c_pages (the disk tier's call), crc32c a page at a
 * time (the hardware path when the CPU has SSE4.2) and the table path; GB/s of CPU time, best
 * of 5. Used by bench/bench_disk_crc.sh. */
#include "core/crc32c.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); /* CPU time: steadier on a shared machine */
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double rate(uint32_t (*f)(uint32_t, const void *, size_t), const unsigned char *b, size_t n,
                   uint32_t *sink) {
    double best = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (size_t o = 0; o < n; o += 4096) *sink ^= f(0, b + o, 4096);
        double gbs = (double)n / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    return best;
}

int main(void) {
    size_t n = (size_t)64 << 20;
    unsigned char *b = malloc(n);
    if (!b) return 1;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 2654435761u >> 13);
    uint32_t sink = 0;
    double hw = rate(crc32c, b, n, &sink), sw = rate(crc32c_sw, b, n, &sink);
    /* crc32c_pages, as the disk tier calls it (48 pages a call on reads) */
    uint32_t *pc = malloc(n / 4096 * sizeof *pc);
    double best = 0;
    for (int r = 0; pc && r < 5; r++) {
        double t0 = now();
        for (size_t o = 0; o < n / 4096; o += 48) crc32c_pages(b + o * 4096, n / 4096 - o < 48 ? n / 4096 - o : 48, pc + o);
        double gbs = (double)n / (now() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    printf("crc32c over 4096-byte pages: crc32c_pages %.2f GB/s; one page a call: %s %.2f GB/s, table %.2f GB/s (%08x)\n",
           best, crc32c_hw() ? "crc32 instruction" : "table (no SSE4.2)", hw, sw, sink);
    free(pc);
    free(b);
    return 0;
}
