/* attention.c: the two attention kernel pairs a plan chooses between (flash: the output and
 * each row's log-sum-exp saved; plain: the (T, T) probabilities saved), as one set of ops
 * (arch.h's hpt_attn_ops) that an architecture calls without asking which: the choice is the
 * runner's (act_ctx), the maths stays free of it. Each op takes both saved-state pointers and
 * uses its own; the other is the field the plan did not keep (NULL). NKV (key/value heads,
 * grouped-query attention) passes through to the kernels; GPT-2 passes NH. With --matmul bf16
 * the flash pair's products take bf16 operands (the backend's _bf16 pair, backend.h); the plain
 * pair is refused with it (core/choices.c, hpt_act_check). */
#include "model/arch.h"

static void flash_forward(const hpt_backend *be, float *out, float *att, float *lse,
                          const float *qkv, int B, int T, int C, int NH, int NKV, const int32_t *pos,
                          int window) {
    (void)att;
    be->flash_attention_forward_seg(out, lse, qkv, B, T, C, NH, NKV, pos, window);
}

/* flash keeps only what selective recomputation never drops: nothing to rebuild */
static void flash_rebuild(const hpt_backend *be, float *out, float *att, float *lse,
                          const float *qkv, int B, int T, int C, int NH, int NKV, const int32_t *pos,
                          int window) {
    (void)be, (void)out, (void)att, (void)lse, (void)qkv;
    (void)B, (void)T, (void)C, (void)NH, (void)NKV, (void)pos, (void)window;
}

static void flash_backward(const hpt_backend *be, float *dqkv, float *scratch, const float *dout,
                           const float *qkv, const float *out, const float *att, const float *lse,
                           int B, int T, int C, int NH, int NKV, const int32_t *pos,
                           int window) {
    (void)att;
    be->flash_attention_backward_seg(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, pos,
                                     window);
}

static void flash_forward_bf16(const hpt_backend *be, float *out, float *att, float *lse,
                               const float *qkv, int B, int T, int C, int NH, int NKV,
                               const int32_t *pos, int window) {
    (void)att;
    be->flash_attention_forward_bf16(out, lse, qkv, B, T, C, NH, NKV, pos, window);
}

static void flash_backward_bf16(const hpt_backend *be, float *dqkv, float *scratch,
                                const float *dout, const float *qkv, const float *out,
                                const float *att, const float *lse, int B, int T, int C, int NH,
                                int NKV, const int32_t *pos, int window) {
    (void)att;
    be->flash_attention_backward_bf16(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, pos,
                                      window);
}

/* plain: the forward, and its rerun rebuilding dropped probabilities (out rewritten with the
 * same bits) */
static void plain_forward(const hpt_backend *be, float *out, float *att, float *lse,
                          const float *qkv, int B, int T, int C, int NH, int NKV, const int32_t *pos,
                          int window) {
    (void)lse;
    be->attention_forward_seg(out, att, qkv, B, T, C, NH, NKV, pos, window);
}

static void plain_backward(const hpt_backend *be, float *dqkv, float *scratch, const float *dout,
                           const float *qkv, const float *out, const float *att, const float *lse,
                           int B, int T, int C, int NH, int NKV, const int32_t *pos,
                           int window) {
    (void)out, (void)lse;
    be->attention_backward_seg(dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, pos, window);
}

static const hpt_attn_ops k_flash = {flash_forward, flash_rebuild, flash_backward};
static const hpt_attn_ops k_plain = {plain_forward, plain_forward, plain_backward};

static const hpt_attn_ops k_flash_bf16 = {flash_forward_bf16, flash_rebuild, flash_backward_bf16};

const hpt_attn_ops *hpt_attn_ops_of(hpt_attention a) {
    return a == HPT_ATTN_PLAIN ? &k_plain : &k_flash;
}

const hpt_attn_ops *hpt_attn_ops_for(hpt_attention a, hpt_matmul mm) {
    return a == HPT_ATTN_FLASH && mm == HPT_MATMUL_BF16 ? &k_flash_bf16 : hpt_attn_ops_of(a);
}
