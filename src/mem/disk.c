/* disk.c: the disk tier of the memory manager.
 * One file per block in the chosen directory, created with O_TMPFILE where the file system
 * supports it (else created and unlinked at once), so no file outlives the process. Space is
 * reserved with posix_fallocate at allocation: ENOSPC becomes HPT_ERR_OOM there, never a short
 * write later. I/O is O_DIRECT when the file system allows it: aligned requests go straight
 * between memory and disk; unaligned ones go through one 4 MiB bounce buffer (host tier, io
 * category) in read-modify-write blocks. Accounting: the disk tier's live bytes are the
 * requested sizes, under the disk budget like every tier. */
#include "core/core.h"
#include "mem/mem_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DISK_ALIGN 4096u
#define BOUNCE_BYTES (4u << 20)

static uint64_t round_up(uint64_t x) { return (x + DISK_ALIGN - 1) / DISK_ALIGN * DISK_ALIGN; }

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
    out->fd = fd;
    out->bytes = bytes;
    m->disk_direct = direct;
    return HPT_OK;
}

void hpt_mem_disk_free(hpt_mem *m, hpt_category cat, hpt_disk_ref *ref) {
    if (!ref || ref->fd < 0) return;
    close(ref->fd);
    mem_unreserve(m, HPT_TIER_DISK, cat, ref->bytes);
    ref->fd = -1;
    ref->bytes = 0;
}

static hpt_status bounce(hpt_mem *m) {
    if (m->bounce) return HPT_OK;
    hpt_mem_set_name(m, "disk bounce buffer");
    return hpt_mem_alloc(m, HPT_TIER_HOST, HPT_CAT_IO, BOUNCE_BYTES, &m->bounce);
}

static hpt_status full_io(int fd, void *buf, size_t n, uint64_t off, int write_) {
    while (n) {
        ssize_t r = write_ ? pwrite(fd, buf, n, (off_t)off) : pread(fd, buf, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return hpt_fail(HPT_ERR_IO, "disk tier: %s failed: %s", write_ ? "write" : "read",
                            r < 0 ? strerror(errno) : "end of file");
        buf = (char *)buf + r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return HPT_OK;
}

/* Moves bytes between mem and the block at offset, directly when everything is aligned. */
static hpt_status disk_io(hpt_mem *m, const hpt_disk_ref *ref, uint64_t offset, void *mem_ptr,
                          size_t bytes, int write_) {
    if (ref->fd < 0 || offset > ref->bytes || bytes > ref->bytes - offset)
        return hpt_fail(HPT_ERR_INVALID, "disk tier: %zu bytes at %llu are outside the block of %llu",
                        bytes, (unsigned long long)offset, (unsigned long long)ref->bytes);
    if (((uintptr_t)mem_ptr | offset | bytes) % DISK_ALIGN == 0 || !m->disk_direct)
        return full_io(ref->fd, mem_ptr, bytes, offset, write_);
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
            if (head || n % DISK_ALIGN) HPT_CHECK(full_io(ref->fd, b, span, lo, 0));
            memcpy(b + head, mem_ptr, n);
            HPT_CHECK(full_io(ref->fd, b, span, lo, 1));
        } else {
            HPT_CHECK(full_io(ref->fd, b, span, lo, 0));
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
