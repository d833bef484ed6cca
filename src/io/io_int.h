/* io_int.h: the io module's private helpers (llm.c's header, the checkpoint streamer), beside
 * the file helpers it shares with the modules above it (io/io.h). */
#ifndef HPT_IO_INT_H
#define HPT_IO_INT_H

#include "hptrain.h"
#include "io/io.h"

#include <stdint.h>
#include <stdio.h>

/* Reads the 256 x int32 header of llm.c's files. */
hpt_status io_read_header(FILE *f, int32_t hdr[256], const char *path);

/* Streams the llm.c GPT-2 checkpoint at path (shape cfg, already checked) to fn: each tensor of
 * the model's table (model_describe) in checkpoint order, in pieces of whole rows (row_width[k]
 * floats each, one per tensor) of at most stage_bytes, as fp32 (version 5's bf16 widened) in a
 * host staging buffer (io category) that fn borrows. */
typedef void (*io_llmc_rows_fn)(void *ctx, int k, size_t row0, const float *rows, size_t n_rows);
hpt_status io_llmc_stream(hpt_mem *mem, const char *path, const hpt_model_config *cfg,
                          const size_t *row_width, size_t stage_bytes, io_llmc_rows_fn fn,
                          void *ctx);

/* Hugging Face model directories (src/io/hfmodel.c): the model configuration of dir/config.json, and
 * io_llmc_stream's contract over a directory's safetensors. */
hpt_status io_hf_read_config(const char *dir, hpt_model_config *out);
hpt_status io_hf_stream(hpt_mem *mem, const char *dir, const hpt_model_config *cfg,
                        const size_t *row_width, size_t stage_bytes, io_llmc_rows_fn fn,
                        void *ctx);
/* 1 if path names a directory. */
int io_is_dir(const char *path);

/* The loader's order and split (src/io/data_order.c, docs/data.md): row i of epoch's seeded
 * permutation of [0, n); the validation documents (is_val, n_docs) of those of doc_len tokens,
 * a fraction of the tokens within one document's; fn(ctx, offset) at each token of a raw shard
 * (width 2 or 4 bytes, count tokens) that is delim. */
uint64_t io_data_perm(uint64_t i, uint64_t n, uint64_t seed, uint64_t epoch);
hpt_status io_data_choose(const uint64_t *doc_len, size_t n_docs, double fraction, uint64_t seed,
                          uint8_t *is_val, size_t *n_val);
hpt_status io_scan_delims(const char *path, int width, uint64_t count, uint32_t delim,
                          hpt_status (*fn)(void *ctx, uint64_t offset), void *ctx);

#endif
