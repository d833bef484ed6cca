/* fuzz.h: what the fuzz targets share. Each target (fuzz_*.c) defines LLVMFuzzerTestOneInput;
 * built with clang's libFuzzer (cmake -DHPT_FUZZ=ON) it is a fuzzer, built with replay.c it
 * is a plain program that runs the inputs it is given (seed corpora and tests/fuzz/regress/:
 * the crashes once found, replayed by ctest in every build).
 * The readers take paths, so a target writes its input to a file in a private temporary
 * directory (fz_file) and reads that: the reader's code is the one the command line runs. */
#ifndef HPT_FUZZ_H
#define HPT_FUZZ_H

#include "hptrain.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes n bytes to <private dir>/name and returns the path (static storage, one per name
 * slot: valid until the next call with the same name). */
const char *fz_file(const char *name, const void *data, size_t n);
/* The private directory (created at the first call, removed at exit). */
const char *fz_dir(void);
/* A memory manager whose host and device budgets are bytes (a reader must refuse a header
 * that asks for more, not try). */
hpt_mem *fz_mem(uint64_t bytes);
/* A tokenizer file: data written as <private dir>/sub/name and loaded as a model directory's;
 * a tokenizer that loads encodes a fixed text with and without its special tokens and the
 * input's first bytes, and decodes what it made. Returns 0. */
int fz_tokenizer_dir(const char *sub, const char *name, const uint8_t *data, size_t size);

#endif
