/* disk.c: the disk tier of the memory manager: one unnamed file per block (O_TMPFILE, or
 * created and unlinked at once), space reserved with posix_fallocate at allocation (ENOSPC is
 * HPT_ERR_OOM there), O_DIRECT where allowed, unaligned requests through one 4 MiB bounce buffer
 * (host, io) in read-modify-write pages; mem_disk_rw is the offload worker's thread-safe path
 * (aligned only, no bounce buffer, no timeline event). docs/memory.md, "The disk tier", and
 * docs/hardening.md (checksums; -DHPT_DISK_NO_VERIFY only to measure their cost).
 * Invariants: no file outlives the process; every transfer reaches the file in whole 4096-byte
 * pages, each with a CRC-32C in memory set by each write and checked by each read before the
 * bytes are handed out (a mismatch is HPT_ERR_CHECKSUM, never wrong values); every transfer
 * checks the full count and the file's size (HPT_ERR_IO naming directory, offset and cause);
 * concurrent transfers touch disjoint pages, so their CRC entries never race. */
#include "core/core.h"
#include "testing.h"
#include "mem/mem_int.h"
#include "core/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DISK_ALIGN 4096u
#define BOUNCE_BYTES (4u << 20)

static uint64_t round_up(uint64_t x) { return (x + DISK_ALIGN - 1) / DISK_ALIGN * DISK_ALIGN; }

/* Test hook (testing.h): HPT_TEST_DISK_DELAY_US, microseconds slept after each transfer, so a
 * test that kills a run lands inside the disk tier's I/O often (tests/test_crash.sh). */
static unsigned g_delay_us;
static pthread_once_t g_delay_once = PTHREAD_ONCE_INIT;
static void delay_init(void) {
    const char *e = getenv("HPT_TEST_DISK_DELAY_US");
    g_delay_us = e ? (unsigned)strtoul(e, NULL, 10) : 0;
}

static uint32_t g_zero_crc; /* CRC-32C of a page of zeros */
static pthread_once_t g_zero_once = PTHREAD_ONCE_INIT;
static void zero_crc_init(void) {
    static const unsigned char zero[DISK_ALIGN];
    g_zero_crc = crc32c(0, zero, sizeof zero);
}

hpt_status hpt_mem_set_disk_dir(hpt_mem *m, const char *dir) {
    if (strlen(dir) >= sizeof m->disk_dir) return hpt_fail(HPT_ERR_INVALID, "path too long: %s", dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return hpt_fail(HPT_ERR_IO, "cannot create %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return hpt_fail(HPT_ERR_IO, "%s is not a directory", dir);
    strcpy(m->disk_dir, dir);
    return HPT_OK;
}

static int open_block(const char *dir, int *direct) {
    int fd = open(dir, O_TMPFILE | O_RDWR | O_DIRECT, 0600);
    *direct = 1;
    if (fd < 0) {
        fd = open(dir, O_TMPFILE | O_RDWR, 0600); /* O_DIRECT refused (tmpfs) */
        *direct = 0;
    }
    if (fd < 0) { /* no O_TMPFILE: a named file, unlinked at once */
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/hpt-disk-XXXXXX", dir);
        fd = mkstemp(path);
        if (fd >= 0) unlink(path);
    }
    return fd;
}

hpt_status hpt_mem_disk_alloc(hpt_mem *m, hpt_category cat, size_t bytes, hpt_disk_ref *out) {
    out->fd = -1;
    out->bytes = 0;
    out->crc = NULL;
    out->cat = (int)cat;
    out->unit_bytes = 0;
    if (!m->disk_dir[0])
        return hpt_fail(HPT_ERR_INVALID, "the disk tier needs a directory (--offload-dir)");
    if (bytes == 0) return HPT_OK;
    hpt_status s = mem_reserve(m, HPT_TIER_DISK, cat, bytes);
    if (s != HPT_OK) return s;
    int direct;
    int fd = open_block(m->disk_dir, &direct);
    int err = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)round_up(bytes));
    if (fd < 0 || err != 0) {
        if (fd >= 0) close(fd);
        mem_unreserve(m, HPT_TIER_DISK, cat, bytes);
        if (err == ENOSPC)
            return hpt_fail(HPT_ERR_OOM, "disk tier: %.1f MiB do not fit on the disk of %s (full)",
                            (double)bytes / 1048576.0, m->disk_dir);
        return hpt_fail(HPT_ERR_IO, "disk tier: cannot create a block in %s: %s", m->disk_dir,
                        strerror(err));
    }
    /* the pages' checksums: metadata (4 bytes per 4096), outside the budget like the fd */
    size_t pages = (size_t)(round_up(bytes) / DISK_ALIGN);
    uint32_t *crc = malloc(pages * sizeof *crc);
    if (!crc) {
        close(fd);
        mem_unreserve(m, HPT_TIER_DISK, cat, bytes);
        return hpt_fail(HPT_ERR_OOM, "disk tier: no memory for the checksums of %zu pages", pages);
    }
    pthread_once(&g_zero_once, zero_crc_init);
    for (size_t i = 0; i < pages; i++) crc[i] = g_zero_crc;
    out->fd = fd;
    out->bytes = bytes;
    out->crc = crc;
    m->disk_direct = direct;
    return HPT_OK;
}

void hpt_mem_disk_free(hpt_mem *m, hpt_category cat, hpt_disk_ref *ref) {
    if (!ref || ref->fd < 0) return;
    close(ref->fd);
    free(ref->crc);
    mem_unreserve(m, HPT_TIER_DISK, cat, ref->bytes);
    ref->fd = -1;
    ref->bytes = 0;
    ref->crc = NULL;
}

static hpt_status bounce(hpt_mem *m) {
    if (m->bounce) return HPT_OK;
    hpt_mem_set_name(m, "disk bounce buffer");
    return hpt_mem_alloc(m, HPT_TIER_HOST, HPT_CAT_IO, BOUNCE_BYTES, &m->bounce);
}

void hpt_mem_disk_fail(hpt_mem *m, hpt_disk_fault kind, uint64_t nth) {
    __atomic_store_n(&m->disk_fault_kind, (int)kind, __ATOMIC_SEQ_CST);
    __atomic_store_n(&m->disk_fault_countdown, nth, __ATOMIC_SEQ_CST);
}

/* The fault to inject into this transfer (HPT_DISK_FAULT_NONE mostly); any thread. Faults of
 * writes (short write, disk full) count writes only. */
static hpt_disk_fault take_fault(hpt_mem *m, int write_) {
    int kind = __atomic_load_n(&m->disk_fault_kind, __ATOMIC_SEQ_CST);
    if (!write_ && (kind == HPT_DISK_FAULT_SHORT_WRITE || kind == HPT_DISK_FAULT_ENOSPC))
        return HPT_DISK_FAULT_NONE;
    uint64_t c = __atomic_load_n(&m->disk_fault_countdown, __ATOMIC_SEQ_CST);
    while (c) {
        if (__atomic_compare_exchange_n(&m->disk_fault_countdown, &c, c - 1, 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST))
            return c == 1 ? (hpt_disk_fault)__atomic_load_n(&m->disk_fault_kind, __ATOMIC_SEQ_CST)
                          : HPT_DISK_FAULT_NONE;
    }
    return HPT_DISK_FAULT_NONE;
}

/* Checks the pages [off, off + n) just read into buf against their CRCs (read) or records
 * theirs (write). off and n are whole pages (full_io's invariant). */
static hpt_status pages_crc(hpt_mem *m, const hpt_disk_ref *ref, const void *buf, size_t n,
                            uint64_t off, int write_) {
#ifdef HPT_DISK_NO_VERIFY
    (void)m; (void)ref; (void)buf; (void)n; (void)off; (void)write_;
    return HPT_OK;
#else
    const unsigned char *p = buf;
    size_t np = n / DISK_ALIGN;
    uint64_t p0 = off / DISK_ALIGN;
    if (write_) {
        crc32c_pages(p, np, ref->crc + p0);
        return HPT_OK;
    }
    uint32_t got[48]; /* a read's CRCs, 48 pages at a time, compared with the written ones */
    for (size_t i = 0; i < np; i++) {
        if (i % 48 == 0) crc32c_pages(p + i * DISK_ALIGN, HPT_MIN(np - i, (size_t)48), got);
        uint64_t page = p0 + i;
        uint32_t c = got[i % 48];
        if (c == ref->crc[page]) continue;
        uint64_t at = page * DISK_ALIGN;
        char blk[64] = "";
        if (ref->unit_bytes)
            snprintf(blk, sizeof blk, "block %llu, ", (unsigned long long)(at / ref->unit_bytes));
        return hpt_fail(HPT_ERR_CHECKSUM, "disk tier: checksum mismatch in the %s file in %s "
                        "(%spage %llu, bytes %llu..%llu: CRC-32C 0x%08x, written 0x%08x): the "
                        "file was changed on disk", hpt_category_name((hpt_category)ref->cat),
                        m->disk_dir, blk, (unsigned long long)page, (unsigned long long)at,
                        (unsigned long long)(at + DISK_ALIGN - 1), c, ref->crc[page]);
    }
    return HPT_OK;
#endif
}

/* file_bytes: the block's reserved size; a file found shorter was truncated or taken away
 * underneath (reading it would meet its end, writing it would leave holes that read as zeros).
 * off and n are whole pages; the pages' CRCs are checked (read) or set (write) on success. */
static hpt_status full_io(hpt_mem *m, const hpt_disk_ref *ref, void *buf, size_t n, uint64_t off,
                          int write_, uint64_t file_bytes) {
    const char *what = write_ ? "write" : "read";
    int fd = ref->fd;
    void *buf0 = buf;
    uint64_t off0 = off;
    if ((off | n) % DISK_ALIGN != 0)
        return hpt_fail(HPT_ERR_INVALID, "disk tier: a transfer of %zu bytes at %llu is not whole "
                        "pages", n, (unsigned long long)off);
    size_t total = n, done = 0;
    hpt_disk_fault f = take_fault(m, write_);
    if (f == HPT_DISK_FAULT_VANISHED && ftruncate(fd, 0) != 0) f = HPT_DISK_FAULT_EIO;
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size < file_bytes)
        return hpt_fail(HPT_ERR_IO, "disk tier: the block's file in %s was truncated or removed "
                        "(%lld of %llu bytes left)", m->disk_dir, (long long)st.st_size,
                        (unsigned long long)file_bytes);
    while (n) {
        ssize_t r;
        if (f == HPT_DISK_FAULT_EIO) { r = -1; errno = EIO; }
        else if (f == HPT_DISK_FAULT_ENOSPC && write_) { r = -1; errno = ENOSPC; }
        else if (f == HPT_DISK_FAULT_SHORT_WRITE && write_ && done) r = 0; /* no more progress */
        else {
            size_t k = f == HPT_DISK_FAULT_SHORT_WRITE && write_ ? (n + 1) / 2 : n;
            r = write_ ? pwrite(fd, buf, k, (off_t)off) : pread(fd, buf, k, (off_t)off);
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == ENOSPC)
            return hpt_fail(HPT_ERR_IO, "disk tier: %s of %zu bytes at offset %llu in %s failed: "
                            "the disk is full (%s)", what, total, (unsigned long long)(off - done),
                            m->disk_dir, strerror(ENOSPC));
        if (r < 0)
            return hpt_fail(HPT_ERR_IO, "disk tier: %s of %zu bytes at offset %llu in %s failed: %s",
                            what, total, (unsigned long long)(off - done), m->disk_dir,
                            strerror(errno));
        if (r == 0)
            return hpt_fail(HPT_ERR_IO, write_ ? "disk tier: short write in %s: %zu of %zu bytes "
                            "at offset %llu written, then no progress" : "disk tier: read in %s "
                            "stopped after %zu of %zu bytes at offset %llu: the block's file was "
                            "truncated or removed", m->disk_dir, done, total,
                            (unsigned long long)(off - done));
        buf = (char *)buf + r;
        n -= (size_t)r;
        done += (size_t)r;
        off += (uint64_t)r;
    }
    pthread_once(&g_delay_once, delay_init);
    if (g_delay_us) usleep(g_delay_us);
    return pages_crc(m, ref, buf0, total, off0, write_);
}

hpt_status mem_disk_rw(hpt_mem *m, const hpt_disk_ref *ref, uint64_t offset, void *buf,
                       size_t bytes, int write_) {
    if (ref->fd < 0 || offset > ref->bytes || bytes > round_up(ref->bytes) - offset)
        return hpt_fail(HPT_ERR_INVALID, "disk tier: %zu bytes at %llu are outside the block of %llu",
                        bytes, (unsigned long long)offset, (unsigned long long)ref->bytes);
    if (((uintptr_t)buf | offset | bytes) % DISK_ALIGN != 0)
        return hpt_fail(HPT_ERR_INVALID, "disk tier: unaligned transfer on the engine's path");
    return full_io(m, ref, buf, bytes, offset, write_, round_up(ref->bytes));
}

/* Moves bytes between mem and the block at offset, directly when everything is aligned. */
static hpt_status disk_io(hpt_mem *m, const hpt_disk_ref *ref, uint64_t offset, void *mem_ptr,
                          size_t bytes, int write_) {
    if (ref->fd < 0 || offset > ref->bytes || bytes > ref->bytes - offset)
        return hpt_fail(HPT_ERR_INVALID, "disk tier: %zu bytes at %llu are outside the block of %llu",
                        bytes, (unsigned long long)offset, (unsigned long long)ref->bytes);
    /* whole pages straight; anything else through the bounce buffer, even without direct
     * I/O, so every transfer covers whole pages and each page's checksum stays exact */
    if (((uintptr_t)mem_ptr | offset | bytes) % DISK_ALIGN == 0)
        return full_io(m, ref, mem_ptr, bytes, offset, write_, round_up(ref->bytes));
    HPT_CHECK(bounce(m));
    char *b = m->bounce;
    while (bytes) {
        uint64_t lo = offset / DISK_ALIGN * DISK_ALIGN;        /* aligned window over offset */
        size_t head = (size_t)(offset - lo);
        size_t n = HPT_MIN(bytes, (size_t)BOUNCE_BYTES - head);
        size_t span = (size_t)round_up(head + n);
        if (lo + span > round_up(ref->bytes)) span = (size_t)(round_up(ref->bytes) - lo);
        if (write_) {
            /* read-modify-write the edges the request does not cover */
            if (head || n % DISK_ALIGN) HPT_CHECK(full_io(m, ref, b, span, lo, 0, round_up(ref->bytes)));
            memcpy(b + head, mem_ptr, n);
            HPT_CHECK(full_io(m, ref, b, span, lo, 1, round_up(ref->bytes)));
        } else {
            HPT_CHECK(full_io(m, ref, b, span, lo, 0, round_up(ref->bytes)));
            memcpy(mem_ptr, b + head, n);
        }
        mem_ptr = (char *)mem_ptr + n;
        offset += n;
        bytes -= n;
    }
    return HPT_OK;
}

hpt_status hpt_mem_disk_write(hpt_mem *m, const hpt_disk_ref *ref, uint64_t offset,
                              const void *src, size_t bytes, hpt_tier from, hpt_category cat) {
    HPT_CHECK(disk_io(m, ref, offset, (void *)(uintptr_t)src, bytes, 1));
    hpt_mem_transfer(m, from, HPT_TIER_DISK, cat, bytes);
    return HPT_OK;
}

hpt_status hpt_mem_disk_read(hpt_mem *m, const hpt_disk_ref *ref, uint64_t offset, void *dst,
                             size_t bytes, hpt_tier to, hpt_category cat) {
    HPT_CHECK(disk_io(m, ref, offset, dst, bytes, 0));
    hpt_mem_transfer(m, HPT_TIER_DISK, to, cat, bytes);
    return HPT_OK;
}
