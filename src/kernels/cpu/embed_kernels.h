/* embed_kernels.h: the CPU kernels of the model-side helpers (backend.h's "chunked head,
 * embeddings" section): the chunked head's running log-sum-exp and dlogits, and the bf16 tied
 * embeddings' conversions, gather and gradient scatter (embed_kernels.c). */
#ifndef HPT_EMBED_KERNELS_H
#define HPT_EMBED_KERNELS_H

#include <stddef.h>
#include <stdint.h>

float k_loss_mean(const float *losses, size_t n);
void k_bf16_widen_par(float *x, const uint16_t *h, size_t n);
void k_bf16_split_par(uint16_t *h, uint16_t *c, const float *x, size_t n);
void k_encoder_forward_bf16(float *out, const int32_t *inp, const uint16_t *wte,
                            const uint16_t *wpe, int B, int T, int C);
void k_encoder_forward_bf16_pos(float *out, const int32_t *inp, const uint16_t *wte,
                                const uint16_t *wpe, const int32_t *pos, int B, int T, int C);
void k_encoder_backward_wpe(float *dwpe, const float *dout, size_t BT, int T, size_t C);
void k_encoder_backward_rows(float *dwte, const float *dout, const int32_t *inp, size_t BT,
                             size_t C, size_t v0, size_t nv);
void k_logsumexp_chunk(float *mx, float *sum, const float *logits, size_t n, size_t nv,
                       int first);
void k_tied_loss(float *losses, float *lse, const float *lnf, const float *wte,
                 const uint16_t *wte_h, const int32_t *targets, size_t n, size_t C);
void k_crossentropy_dlogits(float *logits, const float *lse, const int32_t *targets, size_t n,
                            size_t v0, size_t nv, float dloss);

#endif
