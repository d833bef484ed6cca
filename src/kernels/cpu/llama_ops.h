/* llama_ops.h: the kernels the Llama family adds to GPT-2's (llama_ops.c): RMSNorm, rotary
 * position embeddings (rotate_half convention), the SwiGLU activation and Gemma's GeGLU. Internal to the
 * kernels; the architectures call them through the backend table (kernels/backend.h, whose
 * comments state each op's contract: shapes, in place or not). */
#ifndef HPT_KERNELS_CPU_LLAMA_OPS_H
#define HPT_KERNELS_CPU_LLAMA_OPS_H

#include <stddef.h>
#include <stdint.h>

void k_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t N, int C,
                       float eps);
void k_rmsnorm_apply(float *out, const float *inp, const float *w, const float *rstd, int64_t N,
                     int C);
void k_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                        const float *w, const float *rstd, int64_t N, int C);
/* packed examples: row r rotated at position pos[r] (its position in its example) */
void k_rope_forward_pos(float *qkv, const float *cos, const float *sin, int B, int T, int NH,
                        int NKV, int hd, const int32_t *pos);
void k_rope_backward_pos(float *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                         int NKV, int hd, const int32_t *pos);
void k_rope_forward(float *qkv, const float *cos, const float *sin, int B, int T, int NH, int NKV,
                    int hd, int pos0);
void k_rope_backward(float *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                     int NKV, int hd, int pos0);
void k_swiglu_forward(float *out, const float *h, int64_t N, int FF);
void k_swiglu_backward(float *dh, const float *dout, const float *h, int64_t N, int FF);
void k_geglu_forward(float *out, const float *h, int64_t N, int FF);
void k_geglu_backward(float *dh, const float *dout, const float *h, int64_t N, int FF);

#endif
