/* tensor.h: tensor descriptors and tables, apart from their storage (ggml's habit).
 *
 * A descriptor says what a tensor is: its name, dtype, shape, role (parameter, gradient,
 * optimizer state, activation), and where it sits in a model made of L identical blocks:
 * `layer` -1 for a tensor outside the blocks (embeddings, final norm), or the block it belongs
 * to; a per-layer tensor stacked over the blocks (llm.c's checkpoint layout: (L, ...)) has
 * layer HPT_LAYER_STACKED and `slice` its index among one block's tensors (the block's packed
 * order, which the offload engine and the optimizer use). A table lists a model's parameters in
 * checkpoint order; an architecture describes a configuration as one (src/model/arch.h), and
 * the optimizer, the checkpoint readers and writers, the estimator and the offload engine
 * iterate it instead of knowing a model's fields.
 *
 *   hpt_tensor_table t;   arch->describe(cfg, &t);
 *   for (int i = 0; i < t.n; i++)  printf("%s %zu\n", t.t[i].name, hpt_tensor_numel(&t.t[i]));
 *
 * Tables are plain values (no pointers to free): at most HPT_TABLE_MAX tensors, names up to 31
 * characters. */
#ifndef HPT_CORE_TENSOR_H
#define HPT_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

/* Element types. Q8 is block-wise 8-bit: codes plus one fp32 absmax per block of
 * HPT_Q8_BLOCK values (backend.h), the optimizer states' format. */
typedef enum {
    HPT_DT_F32 = 0,
    HPT_DT_BF16,
    HPT_DT_F16,
    HPT_DT_Q8,
    HPT_DT_I32,
    HPT_DT_U16,
    HPT_DT_U32,
    HPT_DT_COUNT
} hpt_dtype;

typedef enum { HPT_ROLE_PARAM = 0, HPT_ROLE_GRAD, HPT_ROLE_OPTIM, HPT_ROLE_ACT } hpt_role;

#define HPT_TENSOR_MAX_DIMS 4
#define HPT_LAYER_STACKED (-2) /* a per-layer tensor stacked over the L blocks */

typedef struct {
    char name[32];           /* checkpoint name: "wte", "qkvw", ... */
    hpt_dtype dtype;
    int ndim;
    int64_t shape[HPT_TENSOR_MAX_DIMS]; /* row-major; a stacked tensor's shape[0] is L */
    hpt_role role;
    int layer;               /* -1 outside the blocks, HPT_LAYER_STACKED, or a block index */
    int slice;               /* a stacked tensor's index among one block's tensors; -1 else */
    int is_matrix;           /* 2-D weights (weight decay's default set), embeddings included */
    int tied;                /* the tied embedding (wte: also the head) */
} hpt_tensor_desc;

#define HPT_TABLE_MAX 32
typedef struct {
    int n;                   /* tensors, in checkpoint order */
    hpt_tensor_desc t[HPT_TABLE_MAX];
    int L;                   /* blocks */
    int n_slices;            /* tensors per block (the stacked ones, in block order) */
} hpt_tensor_table;

/* Elements of a tensor (all of its layers for a stacked one). */
size_t hpt_tensor_numel(const hpt_tensor_desc *d);
/* Elements of one block's slice of a stacked tensor (numel / L); numel for the others. */
size_t hpt_tensor_slice_numel(const hpt_tensor_desc *d, int L);
/* Bytes of n elements of dtype (Q8: codes plus one fp32 absmax per started block). */
size_t hpt_dtype_bytes(hpt_dtype dt, size_t n);
const char *hpt_dtype_name(hpt_dtype dt); /* "f32", "bf16", "f16", "q8", "i32", "u16", "u32" */
/* Elements of all of a table's tensors; of one block (the stacked tensors' slices); offset
 * (elements) of tensor i in checkpoint order. */
size_t hpt_table_numel(const hpt_tensor_table *t);
size_t hpt_table_block_numel(const hpt_tensor_table *t);
size_t hpt_table_offset(const hpt_tensor_table *t, int i);
/* Index of the tensor named name, or -1. */
int hpt_table_find(const hpt_tensor_table *t, const char *name);
/* Index of the table's tensor that is block slice s, or -1. */
int hpt_table_slice_tensor(const hpt_tensor_table *t, int s);

#endif
