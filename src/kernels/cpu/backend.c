/* backend.c: the CPU backend's table (kernels/backend.h). Device and host tiers are both RAM from
 * the budgeted manager, a copy is memcpy in any direction, and every op has finished when it
 * returns, so sync has nothing to wait for. The ops are the kernels of this directory; the ops
 * whose result the host reads, copies but D2D and sync note a host round trip (backend.h).
 * Copies and memsets of K_PAR_BYTES or more are cut into 1 MiB pieces over the calling
 * thread's OpenMP team (one core's memset of gpt2-124m's 498 MB of gradients was 2% of a
 * two-thread step, the other thread spinning meanwhile); the bytes are the same. */
#include "kernels/cpu/embed_kernels.h"
#include "kernels/cpu/infer_ops.h"
#include "kernels/cpu/llama_ops.h"
#include "kernels/cpu/optime.h"
#include "kernels/cpu/simd.h"
#include "kernels/kernels.h"
#include "kernels/nf4.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

#define K_PAR_BYTES ((size_t)4 << 20)
#define K_PIECE ((size_t)1 << 20)
#define K_STREAM_BYTES ((size_t)32 << 20)

static hpt_status cpu_alloc(hpt_mem *mem, hpt_tier tier, hpt_category cat, size_t bytes,
                            void **out) {
    return hpt_mem_alloc(mem, tier, cat, bytes, out);
}

static void cpu_free(hpt_mem *mem, hpt_tier tier, hpt_category cat, void *p, size_t bytes) {
    hpt_transfer_check_freed(p, bytes); /* the checking transfers: no queued copy uses it */
    hpt_mem_free(mem, tier, cat, p, bytes);
}

static void cpu_copy(void *dst, const void *src, size_t bytes, hpt_copy_kind kind) {
    (void)kind;
    if (bytes < K_PAR_BYTES || omp_in_parallel()) {
        if (bytes) memcpy(dst, src, bytes);
        return;
    }
    size_t n = (bytes + K_PIECE - 1) / K_PIECE;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        size_t o = i * K_PIECE;
        memcpy((char *)dst + o, (const char *)src + o, bytes - o < K_PIECE ? bytes - o : K_PIECE);
    }
}

static void cpu_memset(void *dst, int value, size_t bytes) {
    if (bytes < K_PAR_BYTES || omp_in_parallel()) {
        if (bytes) memset(dst, value, bytes);
        return;
    }
    /* zeroing more than the L3 (an engine's gradient slot, a model's gradients) streams past
     * the caches (AVX-512): 1558M's 123 MB slot 4.2 -> 2.3 ms on 2 threads; whole pieces only */
    int nt = value == 0 && bytes >= K_STREAM_BYTES && k_simd_avx512 && (uintptr_t)dst % 64 == 0;
    size_t n = (bytes + K_PIECE - 1) / K_PIECE;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        size_t o = i * K_PIECE, len = bytes - o < K_PIECE ? bytes - o : K_PIECE;
        if (nt && len == K_PIECE) k_zero_nt_avx512((char *)dst + o, len);
        else memset((char *)dst + o, value, len);
    }
}

static void cpu_sync(void) {
    hpt_be_note_trip();
    hpt_transfer_check_sync();
}

/* The ops whose result the host reads: each notes a round trip where the CUDA backend waits
 * (backend.h, "host round trips"); the kernels stay free of it (the CUDA backend calls some). */
static void cpu_copy_noted(void *dst, const void *src, size_t bytes, hpt_copy_kind kind) {
    if (kind != HPT_COPY_D2D) hpt_be_note_trip();
    cpu_copy(dst, src, bytes, kind);
}
static double cpu_sumsq(const float *x, size_t n) {
    hpt_be_note_trip();
    return k_sumsq(x, n);
}
static int cpu_nonfinite(const float *x, size_t n) {
    hpt_be_note_trip();
    return k_nonfinite(x, n);
}
static void cpu_sumsq_many(double *sums, const float *const *xs, const size_t *ns, size_t k) {
    hpt_be_note_trip();
    for (size_t j = 0; j < k; j++) sums[j] = k_sumsq(xs[j], ns[j]);
}
static void cpu_sumsq_many_dev(double *sums, const float *const *xs, const size_t *ns,
                               size_t k) {
    for (size_t j = 0; j < k; j++) sums[j] = k_sumsq(xs[j], ns[j]); /* stays on the device */
}
static int cpu_nonfinite_many(const float *const *xs, const size_t *ns, size_t k) {
    hpt_be_note_trip();
    int any = 0;
    for (size_t j = 0; j < k && !any; j++) any = k_nonfinite(xs[j], ns[j]);
    return any;
}
static float cpu_crossentropy_forward(float *losses, float *lse, const float *logits,
                                      const int32_t *targets, int64_t N, int V, int Vp) {
    hpt_be_note_trip();
    return k_crossentropy_forward(losses, lse, logits, targets, N, V, Vp);
}
static float cpu_loss_mean(const float *losses, size_t n) {
    hpt_be_note_trip();
    return k_loss_mean(losses, n);
}
static int cpu_f16_narrow(uint16_t *h, const float *x, size_t n) {
    hpt_be_note_trip();
    return k_f16_narrow(h, x, n);
}
static int cpu_bf16_narrow(uint16_t *h, const float *x, size_t n) {
    hpt_be_note_trip();
    return k_bf16_narrow(h, x, n);
}
static double cpu_predict_adam(float *p, const float *m, const float *v, size_t n, float lr,
                               float wd, float b2k, float bc1, float bc2, float eps) {
    hpt_be_note_trip();
    return k_predict_adam(p, m, v, n, lr, wd, b2k, bc1, bc2, eps);
}
static double cpu_predict_linear(float *p, const float *vel, size_t n, float scale) {
    hpt_be_note_trip();
    return k_predict_linear(p, vel, n, scale);
}
static double cpu_add_normal(float *p, size_t n, uint64_t seed, float std) {
    hpt_be_note_trip();
    return k_add_normal(p, n, seed, std);
}
static double cpu_adam_step_sumsq(const float *m, const float *v, size_t n, float bc1,
                                  float bc2, float eps) {
    hpt_be_note_trip();
    return k_adam_step_sumsq(m, v, n, bc1, bc2, eps);
}
static void cpu_init_normal(float *x, size_t lo, size_t hi, size_t total, float std,
                            uint64_t key) {
    hpt_be_note_trip();
    k_init_normal(x, lo, hi, total, std, key);
}

static const hpt_backend k_cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .copy = cpu_copy_noted,
    .memset = cpu_memset,
    .sync = cpu_sync,
    .gemm = k_gemm,
    .matmul_forward = k_matmul_forward,
    .matmul_backward = k_matmul_backward,
    .gemm_bf16 = k_gemm_bf16,
    .matmul_forward_bf16 = k_matmul_forward_bf16,
    .matmul_backward_bf16 = k_matmul_backward_bf16,
    .encoder_forward = k_encoder_forward,
    .encoder_backward = k_encoder_backward,
    .layernorm_forward = k_layernorm_forward,
    .layernorm_apply = k_layernorm_apply,
    .layernorm_backward = k_layernorm_backward,
    .rmsnorm_forward = k_rmsnorm_forward,
    .rmsnorm_apply = k_rmsnorm_apply,
    .rmsnorm_backward = k_rmsnorm_backward,
    .rope_forward = k_rope_forward,
    .rope_backward = k_rope_backward,
    .swiglu_forward = k_swiglu_forward,
    .swiglu_backward = k_swiglu_backward,
    .geglu_forward = k_geglu_forward,
    .geglu_backward = k_geglu_backward,
    .attention_forward = k_attention_forward,
    .attention_backward = k_attention_backward,
    .flash_attention_forward = k_flash_attention_forward,
    .flash_attention_backward = k_flash_attention_backward,
    .attention_forward_seg = k_attention_forward_seg,
    .attention_backward_seg = k_attention_backward_seg,
    .flash_attention_forward_seg = k_flash_attention_forward_seg,
    .flash_attention_backward_seg = k_flash_attention_backward_seg,
    .flash_attention_forward_bf16 = k_flash_attention_forward_bf16,
    .flash_attention_backward_bf16 = k_flash_attention_backward_bf16,
    .flash_attention_bf16_heads = k_flash_attention_bf16_heads,
    .encoder_forward_pos = k_encoder_forward_pos,
    .encoder_backward_pos = k_encoder_backward_pos,
    .encoder_forward_bf16_pos = k_encoder_forward_bf16_pos,
    .rope_forward_pos = k_rope_forward_pos,
    .rope_backward_pos = k_rope_backward_pos,
    .gelu_forward = k_gelu_forward,
    .gelu_backward = k_gelu_backward,
    .scale = k_scale,
    .add = k_add,
    .sumsq = cpu_sumsq,
    .nonfinite = cpu_nonfinite,
    .sumsq_many = cpu_sumsq_many,
    .sumsq_many_dev = cpu_sumsq_many_dev,
    .nonfinite_many = cpu_nonfinite_many,
    .crossentropy_forward = cpu_crossentropy_forward,
    .crossentropy_backward = k_crossentropy_backward,
    .loss_mean = cpu_loss_mean,
    .bf16_widen_par = k_bf16_widen_par,
    .bf16_split_par = k_bf16_split_par,
    .encoder_forward_bf16 = k_encoder_forward_bf16,
    .encoder_backward_wpe = k_encoder_backward_wpe,
    .encoder_backward_rows = k_encoder_backward_rows,
    .logsumexp_chunk = k_logsumexp_chunk,
    .tied_loss = k_tied_loss,
    .crossentropy_dlogits = k_crossentropy_dlogits,
    .adamw = k_adamw,
    .adamw_q = k_adamw_q,
    .lion = k_lion,
    .sgd = k_sgd,
    .adam_mini = k_adam_mini,
    .q8_map = k_q8_map,
    .q8_lut_of = k_q8_lut_of,
    .q8_quantize = k_q8_quantize,
    .q8_dequantize = k_q8_dequantize,
    .f16_narrow = cpu_f16_narrow,
    .bf16_narrow = cpu_bf16_narrow,
    .f16_widen = k_f16_widen,
    .bf16_widen = k_bf16_widen,
    .bf16_split = k_bf16_split,
    .q8w_quantize = k_q8w_quantize,
    .q8w_dequantize = k_q8w_dequantize,
    .q8w_matmul_forward = k_q8w_matmul_forward,
    .infer_embed = k_infer_embed,
    .infer_kv_store = k_infer_kv_store,
    .infer_attend = k_infer_attend,
    .act_code_bytes = k_act_code_bytes,
    .act_code_store = k_act_code_store,
    .act_code_load = k_act_code_load,
    .fit_observe = k_fit_observe,
    .fit_velocity = k_fit_velocity,
    .predict_adam = cpu_predict_adam,
    .predict_linear = cpu_predict_linear,
    .add_normal = cpu_add_normal,
    .adam_step_sumsq = cpu_adam_step_sumsq,
    .init_normal = cpu_init_normal,
    .fill = k_fill,
    .dropout_forward = k_dropout_forward,
    .dropout_backward = k_dropout_backward,
    .nf4_quantize = hpt_nf4_quantize,
    .nf4_dequantize = hpt_nf4_dequantize,
};

/* the op timer's copy when a benchmark turned it on (optime.h), else the table */
const hpt_backend *hpt_backend_cpu(void) { return k_optime_enabled() ? k_optime_table(&k_cpu) : &k_cpu; }
