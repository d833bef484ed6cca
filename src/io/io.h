/* io.h: the io module's file helpers for the modules above it (the training-state checkpoint,
 * src/train/state.c): whole reads with clear errors, atomic writes (temporary file in the same
 * directory, fsync, rename, fsync of the directory), so a crash never leaves a damaged file
 * under the final name, and CRC-32C. Not public. */
#ifndef HPT_IO_H
#define HPT_IO_H

#include "hptrain.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *f;
    char path[PATH_MAX];
    char tmp[PATH_MAX];
    uint32_t crc;   /* running CRC-32C of what was written since begin */
} io_atomic;

hpt_status io_atomic_begin(io_atomic *w, const char *path);
hpt_status io_atomic_write(io_atomic *w, const void *data, size_t bytes);
/* Flushes, syncs, renames over path; on failure removes the temporary file. */
hpt_status io_atomic_commit(io_atomic *w);
/* Closes and removes the temporary file (after an error). */
void io_atomic_abort(io_atomic *w);

/* Opens path for reading; sets *size_out to its size in bytes. */
hpt_status io_open_read(const char *path, FILE **f_out, uint64_t *size_out);
/* Reads exactly bytes or fails with HPT_ERR_FORMAT ("truncated") naming path and what. */
hpt_status io_read_exact(FILE *f, void *dst, size_t bytes, const char *path, const char *what);

/* CRC-32C (Castagnoli), incremental: crc = io_crc32c(crc, data, n), starting from 0. */
uint32_t io_crc32c(uint32_t crc, const void *data, size_t n);

#endif
