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

#endif
