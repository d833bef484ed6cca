/* optime.c: the CPU backend's op timer (optime.h). When a program turns it on, hpt_backend_cpu()
 * returns a copy of the CPU table whose ops of a training step are wrapped: each call's wall
 * time is added to a row named by the op (and, for the products, by part and shape: a matmul's
 * dX, dW and bias gradient are timed apart by calling the same kernels in the same order as
 * k_matmul_backward, so the bits do not change; the forward whole, its bias inside). Calls come from the
 * compute thread; a mutex keeps the rows right should another thread call too. The wrappers
 * cost one clock read on each side of a call (tens of nanoseconds against ops of microseconds
 * and more). Off, nothing here runs. */
#include "kernels/cpu/optime.h"
#include "kernels/cpu/gemm.h"
#include "kernels/kernels.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define OT_ROWS 256
static k_optime_row g_rows[OT_ROWS];
static int g_n;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_on;
static const hpt_backend *g_base;
static hpt_backend g_timed;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void add(const char *key, double s, double flop) {
    pthread_mutex_lock(&g_mu);
    int i = 0;
    while (i < g_n && strcmp(g_rows[i].key, key)) i++;
    if (i == g_n && g_n < OT_ROWS) {
        snprintf(g_rows[i].key, sizeof g_rows[i].key, "%s", key);
        g_rows[i].s = g_rows[i].flop = 0.0;
        g_rows[i].n = 0;
        g_n++;
    }
    if (i < g_n) {
        g_rows[i].s += s;
        g_rows[i].n++;
        g_rows[i].flop += flop;
    }
    pthread_mutex_unlock(&g_mu);
}

void k_optime_enable(int on) { atomic_store(&g_on, on); }
int k_optime_enabled(void) { return atomic_load(&g_on); }

void k_optime_reset(void) {
    pthread_mutex_lock(&g_mu);
    g_n = 0;
    pthread_mutex_unlock(&g_mu);
}

int k_optime_read(k_optime_row *rows, int max) {
    pthread_mutex_lock(&g_mu);
    int n = g_n;
    memcpy(rows, g_rows, (size_t)(n < max ? n : max) * sizeof *rows);
    pthread_mutex_unlock(&g_mu);
    return n;
}

/* a void op: time the base table's call under its own name */
#define TIMED(name, params, args)                                                              \
    static void t_##name params {                                                              \
        double t0 = now_s();                                                                   \
        g_base->name args;                                                                     \
        add(#name, now_s() - t0, 0.0);                                                         \
    }

TIMED(copy, (void *dst, const void *src, size_t bytes, hpt_copy_kind kind), (dst, src, bytes, kind))
TIMED(memset, (void *dst, int value, size_t bytes), (dst, value, bytes))
TIMED(encoder_forward, (float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C),
      (out, inp, wte, wpe, B, T, C))
TIMED(encoder_backward, (float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C),
      (dwte, dwpe, dout, inp, B, T, C))
TIMED(layernorm_forward, (float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                          int64_t N, int C),
      (out, mean, rstd, inp, w, b, N, C))
TIMED(layernorm_apply, (float *out, const float *inp, const float *w, const float *b, const float *mean,
                        const float *rstd, int64_t N, int C),
      (out, inp, w, b, mean, rstd, N, C))
TIMED(layernorm_backward, (float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                           const float *mean, const float *rstd, int64_t N, int C),
      (dinp, dw, db, dout, inp, w, mean, rstd, N, C))
TIMED(attention_forward, (float *out, float *att, const float *qkv, int B, int T, int C, int NH, int NKV),
      (out, att, qkv, B, T, C, NH, NKV))
TIMED(attention_backward, (float *dqkv, float *scratch, const float *dout, const float *qkv, const float *att,
                           int B, int T, int C, int NH, int NKV),
      (dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV))
TIMED(flash_attention_forward, (float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV),
      (out, lse, qkv, B, T, C, NH, NKV))
TIMED(flash_attention_backward, (float *dqkv, float *scratch, const float *dout, const float *qkv,
                                 const float *out, const float *lse, int B, int T, int C, int NH, int NKV),
      (dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV))
/* the document-masked ops (the model calls these, pos NULL unpacked) under the plain ops'
 * names: a profile reads the same */
#define TIMED_AS(label, name, params, args)                                                   \
    static void t_##name params {                                                              \
        double t0 = now_s();                                                                   \
        g_base->name args;                                                                     \
        add(#label, now_s() - t0, 0.0);                                                        \
    }
TIMED_AS(attention_forward, attention_forward_seg, (float *out, float *att, const float *qkv, int B, int T, int C,
         int NH, int NKV, const int32_t *pos, int window), (out, att, qkv, B, T, C, NH, NKV, pos, window))
TIMED_AS(attention_backward, attention_backward_seg, (float *dqkv, float *scratch, const float *dout,
         const float *qkv, const float *att, int B, int T, int C, int NH, int NKV, const int32_t *pos,
         int window), (dqkv, scratch, dout, qkv, att, B, T, C, NH, NKV, pos, window))
TIMED_AS(flash_attention_forward, flash_attention_forward_seg, (float *out, float *lse, const float *qkv, int B,
         int T, int C, int NH, int NKV, const int32_t *pos, int window),
         (out, lse, qkv, B, T, C, NH, NKV, pos, window))
TIMED_AS(flash_attention_backward, flash_attention_backward_seg, (float *dqkv, float *scratch, const float *dout,
         const float *qkv, const float *out, const float *lse, int B, int T, int C, int NH, int NKV,
         const int32_t *pos, int window), (dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, pos,
         window))
TIMED_AS(flash_attention_forward_bf16, flash_attention_forward_bf16, (float *out, float *lse,
         const float *qkv, int B, int T, int C, int NH, int NKV, const int32_t *pos, int window),
         (out, lse, qkv, B, T, C, NH, NKV, pos, window))
TIMED_AS(flash_attention_backward_bf16, flash_attention_backward_bf16, (float *dqkv, float *scratch,
         const float *dout, const float *qkv, const float *out, const float *lse, int B, int T, int C,
         int NH, int NKV, const int32_t *pos, int window), (dqkv, scratch, dout, qkv, out, lse, B, T, C,
         NH, NKV, pos, window))
TIMED_AS(encoder_forward, encoder_forward_pos, (float *out, const int32_t *inp, const float *wte,
         const float *wpe, const int32_t *pos, int B, int T, int C), (out, inp, wte, wpe, pos, B, T, C))
TIMED_AS(encoder_backward, encoder_backward_pos, (float *dwte, float *dwpe, const float *dout,
         const int32_t *inp, const int32_t *pos, int B, int T, int C), (dwte, dwpe, dout, inp, pos, B, T, C))
TIMED(gelu_forward, (float *out, const float *inp, int64_t n), (out, inp, n))
TIMED(gelu_backward, (float *dinp, const float *inp, const float *dout, int64_t n), (dinp, inp, dout, n))
TIMED(scale, (float *x, size_t n, float s), (x, n, s))
TIMED(crossentropy_backward, (float *logits, const float *lse, const int32_t *targets, int64_t N, int V, int Vp,
                              float dloss),
      (logits, lse, targets, N, V, Vp, dloss))
TIMED(adamw, (float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1, float beta2,
              float eps, float wd, float grad_scale, int64_t t),
      (p, g, m, v, n, lr, beta1, beta2, eps, wd, grad_scale, t))
TIMED(encoder_backward_wpe, (float *dwpe, const float *dout, size_t BT, int T, size_t C), (dwpe, dout, BT, T, C))
TIMED(encoder_backward_rows, (float *dwte, const float *dout, const int32_t *inp, size_t BT, size_t C, size_t v0,
                              size_t nv),
      (dwte, dout, inp, BT, C, v0, nv))

static double t_sumsq(const float *x, size_t n) {
    double t0 = now_s(), r = g_base->sumsq(x, n);
    add("sumsq", now_s() - t0, 0.0);
    return r;
}

/* the gradient norm's sums, all units at once: one row per call, as the per-unit calls' rows
 * were per call (the bench tables' "sumsq" row, now with one call a step) */
static void t_sumsq_many(double *sums, const float *const *xs, const size_t *ns, size_t k) {
    double t0 = now_s();
    g_base->sumsq_many(sums, xs, ns, k);
    add("sumsq", now_s() - t0, 0.0);
}
static void t_sumsq_many_dev(double *sums, const float *const *xs, const size_t *ns, size_t k) {
    double t0 = now_s();
    g_base->sumsq_many_dev(sums, xs, ns, k);
    add("sumsq", now_s() - t0, 0.0);
}
static int t_nonfinite(const float *x, size_t n) {
    double t0 = now_s();
    int r = g_base->nonfinite(x, n);
    add("nonfinite", now_s() - t0, 0.0);
    return r;
}

static float t_crossentropy_forward(float *losses, float *lse, const float *logits, const int32_t *targets,
                                    int64_t N, int V, int Vp) {
    double t0 = now_s();
    float r = g_base->crossentropy_forward(losses, lse, logits, targets, N, V, Vp);
    add("crossentropy_forward", now_s() - t0, 0.0);
    return r;
}

static float t_loss_mean(const float *losses, size_t n) {
    double t0 = now_s();
    float r = g_base->loss_mean(losses, n);
    add("loss_mean", now_s() - t0, 0.0);
    return r;
}

static void gemm_key(char *k, size_t n, const char *part, int64_t N, int64_t C, int64_t OC) {
    snprintf(k, n, "%s N=%lld C=%lld OC=%lld", part, (long long)N, (long long)C, (long long)OC);
}

static void t_gemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                   int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    char key[80];
    snprintf(key, sizeof key, "gemm.%c%c M=%lld N=%lld K=%lld", transa, transb, (long long)M, (long long)N,
             (long long)K);
    double t0 = now_s();
    k_gemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    add(key, now_s() - t0, 2.0 * (double)M * (double)N * (double)K);
}

/* k_matmul_forward whole: the bias is inside the product (the matmul primitive's bias) */
static void t_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int64_t N, int64_t C,
                             int64_t OC, int accumulate) {
    char key[80];
    double t0 = now_s();
    k_matmul_forward(out, inp, w, bias, N, C, OC, accumulate);
    gemm_key(key, sizeof key, bias ? "gemm.fwd+bias" : "gemm.fwd", N, C, OC);
    add(key, now_s() - t0, 2.0 * (double)N * (double)C * (double)OC);
}

/* k_matmul_backward's three parts, timed apart */
static void t_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                              const float *w, int64_t N, int64_t C, int64_t OC, int accumulate_dinp) {
    char key[80];
    double f = 2.0 * (double)N * (double)C * (double)OC, t0 = now_s();
    k_gemm('N', 'N', N, C, OC, 1.0f, dout, OC, w, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    gemm_key(key, sizeof key, "gemm.dX", N, C, OC);
    add(key, now_s() - t0, f);
    t0 = now_s();
    k_gemm('T', 'N', OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    gemm_key(key, sizeof key, "gemm.dW", N, C, OC);
    add(key, now_s() - t0, f);
    if (dbias) {
        t0 = now_s();
        k_matmul_bias_grad(dbias, dout, N, OC);
        gemm_key(key, sizeof key, "bias.dW", N, C, OC);
        add(key, now_s() - t0, 0.0);
    }
}

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static const hpt_backend *g_base_arg;

static void build(void) {
    g_base = g_base_arg;
    g_timed = *g_base;
    hpt_backend *t = &g_timed;
    t->copy = t_copy;
    t->memset = t_memset;
    t->gemm = t_gemm;
    t->matmul_forward = t_matmul_forward;
    t->matmul_backward = t_matmul_backward;
    t->encoder_forward = t_encoder_forward;
    t->encoder_backward = t_encoder_backward;
    t->layernorm_forward = t_layernorm_forward;
    t->layernorm_apply = t_layernorm_apply;
    t->layernorm_backward = t_layernorm_backward;
    t->attention_forward = t_attention_forward;
    t->attention_backward = t_attention_backward;
    t->flash_attention_forward = t_flash_attention_forward;
    t->flash_attention_backward = t_flash_attention_backward;
    t->attention_forward_seg = t_attention_forward_seg;
    t->attention_backward_seg = t_attention_backward_seg;
    t->flash_attention_forward_seg = t_flash_attention_forward_seg;
    t->flash_attention_backward_seg = t_flash_attention_backward_seg;
    if (g_base->flash_attention_forward_bf16) {
        t->flash_attention_forward_bf16 = t_flash_attention_forward_bf16;
        t->flash_attention_backward_bf16 = t_flash_attention_backward_bf16;
    }
    t->encoder_forward_pos = t_encoder_forward_pos;
    t->encoder_backward_pos = t_encoder_backward_pos;
    t->gelu_forward = t_gelu_forward;
    t->gelu_backward = t_gelu_backward;
    t->scale = t_scale;
    t->sumsq = t_sumsq;
    t->nonfinite = t_nonfinite;
    t->sumsq_many = t_sumsq_many;
    t->sumsq_many_dev = t_sumsq_many_dev;
    t->crossentropy_forward = t_crossentropy_forward;
    t->crossentropy_backward = t_crossentropy_backward;
    t->loss_mean = t_loss_mean;
    t->adamw = t_adamw;
    t->encoder_backward_wpe = t_encoder_backward_wpe;
    t->encoder_backward_rows = t_encoder_backward_rows;
}

const hpt_backend *k_optime_table(const hpt_backend *base) {
    g_base_arg = base;
    pthread_once(&g_once, build);
    return &g_timed;
}
