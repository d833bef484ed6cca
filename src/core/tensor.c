/* tensor.c: sizes and lookups over tensor descriptors and tables (tensor.h). Pure functions of
 * the descriptors: no storage is touched. */
#include "core/tensor.h"

#include <string.h>

#define Q8_BLOCK 256 /* HPT_Q8_BLOCK (kernels/backend.h), restated: core sits below kernels */

size_t hpt_tensor_numel(const hpt_tensor_desc *d) {
    size_t n = 1;
    for (int i = 0; i < d->ndim; i++) n *= (size_t)d->shape[i];
    return n;
}

size_t hpt_tensor_slice_numel(const hpt_tensor_desc *d, int L) {
    size_t n = hpt_tensor_numel(d);
    return d->layer == HPT_LAYER_STACKED && L > 0 ? n / (size_t)L : n;
}

size_t hpt_dtype_bytes(hpt_dtype dt, size_t n) {
    switch (dt) {
    case HPT_DT_BF16:
    case HPT_DT_F16:
    case HPT_DT_U16: return 2 * n;
    case HPT_DT_Q8: return n + (n + Q8_BLOCK - 1) / Q8_BLOCK * sizeof(float);
    default: return 4 * n;
    }
}

const char *hpt_dtype_name(hpt_dtype dt) {
    static const char *k[] = {"f32", "bf16", "f16", "q8", "i32", "u16", "u32"};
    return (unsigned)dt < HPT_DT_COUNT ? k[dt] : "?";
}

size_t hpt_table_numel(const hpt_tensor_table *t) {
    size_t n = 0;
    for (int i = 0; i < t->n; i++) n += hpt_tensor_numel(&t->t[i]);
    return n;
}

size_t hpt_table_block_numel(const hpt_tensor_table *t) {
    size_t n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->t[i].layer == HPT_LAYER_STACKED) n += hpt_tensor_slice_numel(&t->t[i], t->L);
    return n;
}

size_t hpt_table_offset(const hpt_tensor_table *t, int i) {
    size_t o = 0;
    for (int j = 0; j < i && j < t->n; j++) o += hpt_tensor_numel(&t->t[j]);
    return o;
}

int hpt_table_find(const hpt_tensor_table *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->t[i].name, name)) return i;
    return -1;
}

int hpt_table_slice_tensor(const hpt_tensor_table *t, int s) {
    for (int i = 0; i < t->n; i++)
        if (t->t[i].layer == HPT_LAYER_STACKED && t->t[i].slice == s) return i;
    return -1;
}
