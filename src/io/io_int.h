/* io_int.h: file helpers of the io module: whole reads with clear errors, and atomic writes
 * (temporary file in the same directory, fsync, rename, fsync of the directory), so a crash
 * never leaves a damaged file under the final name. */
#ifndef HPT_IO_INT_H
#define HPT_IO_INT_H

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
/* Reads the 256 x int32 header of llm.c's files. */
hpt_status io_read_header(FILE *f, int32_t hdr[256], const char *path);

/* Streams the llm.c GPT-2 checkpoint at path (shape cfg, already checked) to fn: each tensor in
 * checkpoint order, in pieces of whole rows (row_width[k] floats each) of at most stage_bytes,
 * as fp32 (version 5's bf16 widened) in a host staging buffer (io category) that fn borrows. */
typedef void (*io_llmc_rows_fn)(void *ctx, int k, size_t row0, const float *rows, size_t n_rows);
hpt_status io_llmc_stream(hpt_mem *mem, const char *path, const hpt_gpt2_config *cfg,
                          const size_t row_width[HPT_GPT2_NUM_TENSORS], size_t stage_bytes,
                          io_llmc_rows_fn fn, void *ctx);

/* CRC-32C (Castagnoli), incremental: crc = io_crc32c(crc, data, n), starting from 0. */
uint32_t io_crc32c(uint32_t crc, const void *data, size_t n);

#endif
