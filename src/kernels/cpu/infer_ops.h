/* infer_ops.h: the inference engine's kernels (infer_ops.c): the rows' embedding, the key/value
 * cache's append and attention over it. Internal to the kernels; the engine calls them through
 * the backend table (kernels/backend.h, "inference helpers"). */
#ifndef HPT_KERNELS_CPU_INFER_OPS_H
#define HPT_KERNELS_CPU_INFER_OPS_H

#include <stddef.h>
#include <stdint.h>

void k_infer_embed(float *x, const int32_t *tok, size_t n, int pos0, const float *wte,
                   const int8_t *wte_q, const float *wte_scale, const float *wpe, int C);
void k_infer_kv_store(float *K, float *V, const float *qkv, int pos0, size_t n, int C, int NH,
                      int NKV);
void k_infer_attend(float *atty, const float *qkv, const float *K, const float *V, int pos0,
                    size_t n, int C, int NH, int NKV, int window);

#endif
