/* fileio.c: whole reads, atomic writes and the CRC-32C checksum of the io module. */
#include "core/core.h"
#include "io/io_int.h"
#include "core/crc32c.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

hpt_status io_atomic_begin(io_atomic *w, const char *path) {
    memset(w, 0, sizeof *w);
    if (strlen(path) + 32 >= sizeof w->path)
        return hpt_fail(HPT_ERR_INVALID, "path too long: %s", path);
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp.%ld", path, (long)getpid());
    w->f = fopen(w->tmp, "wb");
    if (!w->f) return hpt_fail(HPT_ERR_IO, "cannot create %s: %s", w->tmp, strerror(errno));
    return HPT_OK;
}

hpt_status io_atomic_write(io_atomic *w, const void *data, size_t bytes) {
    if (bytes && fwrite(data, 1, bytes, w->f) != bytes)
        return hpt_fail(HPT_ERR_IO, "cannot write %s: %s", w->tmp, strerror(errno));
    w->crc = io_crc32c(w->crc, data, bytes);
    return HPT_OK;
}

void io_atomic_abort(io_atomic *w) {
    if (w->f) fclose(w->f);
    w->f = NULL;
    if (w->tmp[0]) unlink(w->tmp);
}

hpt_status io_atomic_commit(io_atomic *w) {
    int err = 0;
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0) err = errno;
    if (fclose(w->f) != 0 && !err) err = errno;
    w->f = NULL;
    if (!err && rename(w->tmp, w->path) != 0) err = errno;
    if (err) {
        unlink(w->tmp);
        return hpt_fail(HPT_ERR_IO, "cannot write %s: %s", w->path, strerror(err));
    }
    /* make the rename itself durable */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", w->path);
    int fd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
    return HPT_OK;
}

hpt_status io_open_read(const char *path, FILE **f_out, uint64_t *size_out) {
    struct stat st;
    if (stat(path, &st) != 0) return hpt_fail(HPT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return hpt_fail(HPT_ERR_IO, "%s is a directory, not a file", path);
    FILE *f = fopen(path, "rb");
    if (!f) return hpt_fail(HPT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    *f_out = f;
    *size_out = (uint64_t)st.st_size;
    return HPT_OK;
}

hpt_status io_read_exact(FILE *f, void *dst, size_t bytes, const char *path, const char *what) {
    size_t got = bytes ? fread(dst, 1, bytes, f) : 0;
    if (got != bytes) {
        if (ferror(f)) return hpt_fail(HPT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        return hpt_fail(HPT_ERR_FORMAT, "%s is truncated (reading %s: %zu of %zu bytes)", path,
                        what, got, bytes);
    }
    return HPT_OK;
}

hpt_status io_read_header(FILE *f, int32_t hdr[256], const char *path) {
    return io_read_exact(f, hdr, 256 * sizeof(int32_t), path, "the 1024-byte header");
}

/* core/crc32c.c: the crc32 instruction where the CPU has it, else a table. */
uint32_t io_crc32c(uint32_t crc, const void *data, size_t n) { return crc32c(crc, data, n); }

int io_is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
