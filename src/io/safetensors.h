/* safetensors.h: the safetensors format (Hugging Face), read strictly and written, private to
 * the io module (src/io/safetensors.c; the model directories of src/io/hfmodel.c use it).
 *
 * A file is: 8 bytes N (unsigned, little-endian), N bytes of UTF-8 JSON beginning with '{'
 * (trailing spaces allowed), then the data. The JSON maps each tensor name to
 * {"dtype", "shape", "data_offsets": [begin, end]} (bytes from the start of the data) and may
 * hold "__metadata__" (string to string). The parser accepts a header only when every tensor's
 * byte count is its shape's elements times its dtype's size, and the tensors, sorted by
 * offset, cover the data exactly (no overlap, no hole, nothing past the end). Every refusal is
 * one line naming the file (or buffer) and the tensor.
 *
 * Fuzzing: st_parse_buffer parses a whole file image from memory; it never reads outside
 * [buf, buf + len) and never asserts on input. */
#ifndef HPT_IO_SAFETENSORS_H
#define HPT_IO_SAFETENSORS_H

#include "hptrain.h"

#include <stddef.h>
#include <stdint.h>

/* The largest header the reader accepts (the format's own reader's limit). */
#define ST_MAX_HEADER_BYTES 100000000ull
#define ST_MAX_DIMS 8

/* Dtypes: the three the reader converts to fp32, then the others the format names (parsed, so
 * a file holding them is valid; reading one is "unsupported dtype"). */
typedef enum {
    ST_F32 = 0, ST_BF16, ST_F16,
    ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_U16, ST_U32, ST_U64,
    ST_F8_E4M3, ST_F8_E5M2, ST_DTYPE_COUNT
} st_dtype;
const char *st_dtype_name(int dt);  /* "F32", ... */
size_t st_dtype_size(int dt);       /* bytes per element */

typedef struct {
    char *name;                      /* malloc'd, NUL-terminated */
    int dtype;                       /* st_dtype */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t numel;                  /* product of shape (1 for a scalar) */
    uint64_t begin, end;             /* bytes from the start of the data */
} st_tensor;

typedef struct {
    int n;
    st_tensor *t;                    /* (n), sorted by name (st_find bisects) */
    uint64_t data_start;             /* 8 + N: the data's offset in the file */
    uint64_t data_bytes;             /* file size - data_start */
} st_header;

/* Parses the N header bytes json (already read; N within bounds) of a file of file_bytes bytes
 * named what. On failure *out is empty. */
hpt_status st_parse_json(const char *json, size_t n, uint64_t file_bytes, const char *what,
                         st_header *out);
/* Parses a whole file image: the 8-byte size, its bounds, then st_parse_json. */
hpt_status st_parse_buffer(const void *buf, size_t len, const char *what, st_header *out);
void st_header_free(st_header *h);
/* The tensor named name, or NULL. */
const st_tensor *st_find(const st_header *h, const char *name);

/* fp32 from the 16-bit formats (exact) and bf16 from fp32 (round to nearest even; NaN stays a
 * quiet NaN). */
float st_bf16_to_f32(uint16_t b);
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);

/* hpt_fail with a message kept on one line: control characters of names and keys read from a
 * file (a JSON string may hold a newline) are shown as '?'. */
hpt_status st_fail(hpt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- an open file: the header, and tensors read through pread windows ---- */
typedef struct {
    int fd;
    char path[4096];
    st_header h;
} st_file;
hpt_status st_open(const char *path, st_file *out);
void st_close(st_file *f);
/* Elements [e0, e0 + n) of tensor t (row-major) as fp32 into dst (n floats, the caller's):
 * one pread of n * size bytes into dst's upper part, widened in place. */
hpt_status st_read_f32(const st_file *f, const st_tensor *t, uint64_t e0, size_t n, float *dst);

/* ---- a model directory: model.safetensors, or the shards of model.safetensors.index.json --- */
typedef struct {
    int n_files;
    st_file *files;                  /* (n_files) */
    int n;                           /* tensors over all files */
    struct st_entry { const st_tensor *t; int file; } *ent;   /* (n), sorted by name */
} st_dir;
hpt_status st_dir_open(const char *dir, st_dir *out);
void st_dir_close(st_dir *d);
/* The tensor named name and its file, or NULL. */
const st_tensor *st_dir_find(const st_dir *d, const char *name, const st_file **file);

/* ---- writing: tensors in file order, values streamed in that order ---- */
typedef struct {
    const char *name;                /* borrowed until st_writer_close */
    int dtype;                       /* ST_F32 or ST_BF16 */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
} st_wtensor;
typedef struct st_writer st_writer;
/* Plans the files in dir (an existing directory): one model.safetensors, or, when the tensors'
 * bytes pass shard_bytes, model-0000i-of-0000n.safetensors (a new file starts before a tensor
 * that would pass shard_bytes) and model.safetensors.index.json. */
hpt_status st_writer_open(const char *dir, const st_wtensor *t, int n, uint64_t shard_bytes,
                          st_writer **out);
/* The next n values in file order (fp32; converted to each tensor's dtype). */
hpt_status st_writer_put(st_writer *w, const float *x, size_t n);
/* Checks every value came, syncs and closes the files, writes the index. Frees w. */
hpt_status st_writer_close(st_writer *w);
void st_writer_abort(st_writer *w); /* closes and removes what it wrote; frees w */

#endif
