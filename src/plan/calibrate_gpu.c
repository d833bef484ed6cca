/* calibrate_gpu.c: a GPU's rates for the cost model (calibrate --device cuda[:N]), measured
 * through the CUDA backend's own ops on device buffers from a budget-less hpt_mem bound to the
 * GPU: block and head GEMMs at a GPU step's row counts (fp32, or TF32 when HPT_CUDA_TF32=1 as
 * training would run them), flash and plain attention at T = 128 and 512, a read+write pass
 * (scale), each optimizer's 32-bit update, pinned host<->device copies, and --matmul bf16's
 * GEMMs (cublasGemmEx through matmul_*_bf16) and bf16 flash pair; the disk is the CPU's
 * (taken from the CPU's entry by the caller). Timed with the device synchronised around each
 * repetition (be->sync). What is not measured on a GPU: docs/planner.md, "Calibration".
 * Invariants: library code, nothing printed; every buffer freed and the hpt_mem destroyed on
 * every path; without the CUDA backend or GPU N, HPT_ERR_UNSUPPORTED with its one-line reason. */
#include "core/core.h"
#include "kernels/backend.h"
#include "mem/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Without starting the backend (estimate stays cheap): the device's properties alone. */
hpt_status hpt_calibration_device_name(int device, char *buf, size_t n) {
    if (device < 1) return hpt_fail(HPT_ERR_INVALID, "calibration: device %d is not a GPU", device);
    return hpt_device_name(device, buf, n);
}

#ifdef HPT_HAVE_CUDA
/* The GPU's row counts: a step's B*T on a GPU is thousands of rows (the CPU's 64 and 256 would
 * measure launch latency); the cost model interpolates in log(rows) between them. */
static const int k_rows[HPT_CAL_GEMM_ROWS] = {1024, 8192};
static const int k_C[HPT_CAL_GEMM_SIZES] = {512, 768, 1024, 1280, 1600, 2048};

typedef struct {
    const hpt_backend *be;
    hpt_mem *mem;
    double min_s;
    int reps;
} gpu_ctx;

/* The best over g->reps repetitions of one run of body (seconds), the device synchronised
 * before and after each; a repetition runs body until g->min_s has passed and divides. */
#define GPU_BEST(g, best, body)                                             \
    do {                                                                    \
        best = 1e30;                                                        \
        for (int r_ = 0; r_ < (g)->reps; r_++) {                            \
            long k_ = 0;                                                    \
            double dt_;                                                     \
            (g)->be->sync();                                                \
            double t0_ = hpt_now();                                         \
            do {                                                            \
                body;                                                       \
                (g)->be->sync();                                            \
                k_++;                                                       \
            } while ((dt_ = hpt_now() - t0_) < (g)->min_s);                 \
            if (dt_ / (double)k_ < best) best = dt_ / (double)k_;           \
        }                                                                   \
    } while (0)

/* A measurement's buffers: each *p NULL, then allocated in order (zero-filled: the rates do
 * not depend on the values); bufs_free frees those allocated. */
typedef struct {
    float **p;
    size_t floats;
    hpt_tier tier;
} gpu_buf;

static hpt_status bufs_alloc(gpu_ctx *g, gpu_buf *b, int n) {
    for (int i = 0; i < n; i++) *b[i].p = NULL;
    for (int i = 0; i < n; i++)
        HPT_CHECK(g->be->alloc(g->mem, b[i].tier, HPT_CAT_ACTS, b[i].floats * 4, (void **)b[i].p));
    return HPT_OK;
}

static void bufs_free(gpu_ctx *g, gpu_buf *b, int n) {
    for (int i = 0; i < n; i++)
        if (*b[i].p) g->be->free(g->mem, b[i].tier, HPT_CAT_ACTS, *b[i].p, b[i].floats * 4);
}

/* The linear layers' ops at a precision: ws NULL the fp32 ones; else (--matmul bf16) the
 * _bf16 forms with ws their device workspace, as the model calls them. */
static void mm_fwd(gpu_ctx *g, void *ws, float *out, const float *inp, const float *w, int64_t N,
                   int64_t C, int64_t OC) {
    if (ws) g->be->matmul_forward_bf16(out, inp, w, NULL, N, C, OC, 0, ws);
    else g->be->matmul_forward(out, inp, w, NULL, N, C, OC, 0);
}
static void mm_bwd(gpu_ctx *g, void *ws, float *dinp, float *dw, const float *dout, const float *inp,
                   const float *w, int64_t N, int64_t C, int64_t OC) {
    if (ws) g->be->matmul_backward_bf16(dinp, dw, NULL, dout, inp, w, N, C, OC, 0, ws);
    else g->be->matmul_backward(dinp, dw, NULL, dout, inp, w, N, C, OC, 0);
}

/* ws NULL: the fp32 (or TF32) rates into c's gemm and head rates; else the bf16 ops' into
 * c->bf16 (the rows and widths the fp32 pass's). */
static hpt_status gpu_gemm(gpu_ctx *g, void *ws, hpt_calibration *c) {
    const size_t XMAX = (size_t)k_rows[HPT_CAL_GEMM_ROWS - 1] * 32768, WMAX = (size_t)32768 * 768;
    float *inp, *w, *out, *dinp, *dw;
    gpu_buf b[] = {{&inp, XMAX, HPT_TIER_DEVICE}, {&out, XMAX, HPT_TIER_DEVICE},
                   {&dinp, XMAX, HPT_TIER_DEVICE}, {&w, WMAX, HPT_TIER_DEVICE}, {&dw, WMAX, HPT_TIER_DEVICE}};
    const int nb = (int)(sizeof b / sizeof b[0]);
    hpt_status s = bufs_alloc(g, b, nb);
    for (int r = 0; s == HPT_OK && r < HPT_CAL_GEMM_ROWS; r++) {
        const int64_t N = k_rows[r];
        c->gemm_rows[r] = (int)N;
        for (int i = 0; i <= HPT_CAL_GEMM_SIZES; i++) { /* the last: the head, 768 -> 32768 */
            const int head = i == HPT_CAL_GEMM_SIZES;
            const int64_t C = head ? 768 : k_C[i];
            int64_t sh[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
            if (head) sh[0][1] = 32768;
            const int ns = head ? 1 : 4;
            double f = 0, tf, tb;
            for (int k = 0; k < ns; k++) {
                f += 2.0 * (double)(N * sh[k][0] * sh[k][1]);
                mm_fwd(g, ws, out, inp, w, N, sh[k][0], sh[k][1]); /* warm */
            }
            GPU_BEST(g, tf, for (int k = 0; k < ns; k++) mm_fwd(g, ws, out, inp, w, N, sh[k][0], sh[k][1]));
            GPU_BEST(g, tb, for (int k = 0; k < ns; k++)
                                mm_bwd(g, ws, dinp, dw, out, inp, w, N, sh[k][0], sh[k][1]));
            const double rf = f / tf / 1e9, rb = 2.0 * f / tb / 1e9;
            if (head && ws) c->bf16.head_gflops[r][0] = rf, c->bf16.head_gflops[r][1] = rb;
            else if (head) c->head_gflops[r][0] = rf, c->head_gflops[r][1] = rb;
            else if (ws) c->bf16.gemm_fwd_gflops[r][i] = rf, c->bf16.gemm_bwd_gflops[r][i] = rb;
            else {
                c->gemm_C[i] = (int)C;
                c->gemm_fwd_gflops[r][i] = rf, c->gemm_bwd_gflops[r][i] = rb;
            }
        }
    }
    bufs_free(g, b, nb);
    return s;
}

/* Causal attention at B = 8 (a GPU's micro-batch, not the CPU's 1), C = 768, NH = 12, counted
 * as the estimator counts it, into r[flash, plain][forward, backward]. */
static hpt_status gpu_attention(gpu_ctx *g, int T, double r[2][2]) {
    const int B = 8, C = 768, NH = 12;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    const size_t natt = (size_t)B * NH * T * T, nscr = natt + 4 * nqkv, nlse = (size_t)B * NH * T;
    float *qkv, *out, *att, *lse, *dqkv, *scr, *dout;
    gpu_buf b[] = {{&qkv, nqkv, HPT_TIER_DEVICE}, {&out, nout, HPT_TIER_DEVICE},
                   {&att, natt, HPT_TIER_DEVICE}, {&lse, nlse, HPT_TIER_DEVICE},
                   {&dqkv, nqkv, HPT_TIER_DEVICE}, {&scr, nscr, HPT_TIER_DEVICE},
                   {&dout, nout, HPT_TIER_DEVICE}};
    const int nb = (int)(sizeof b / sizeof b[0]);
    hpt_status s = bufs_alloc(g, b, nb);
    if (s == HPT_OK) {
        const double f = 2.0 * C * (T + 1.0) * B * T;
        double t;
        g->be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NH);
        GPU_BEST(g, t, g->be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NH));
        r[0][0] = f / t / 1e9;
        GPU_BEST(g, t, g->be->flash_attention_backward(dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NH));
        r[0][1] = 2 * f / t / 1e9;
        g->be->attention_forward(out, att, qkv, B, T, C, NH, NH);
        GPU_BEST(g, t, g->be->attention_forward(out, att, qkv, B, T, C, NH, NH));
        r[1][0] = f / t / 1e9;
        GPU_BEST(g, t, g->be->attention_backward(dqkv, scr, dout, qkv, att, B, T, C, NH, NH));
        r[1][1] = 2 * f / t / 1e9;
    }
    bufs_free(g, b, nb);
    return s;
}

/* The bf16 flash pair (--matmul bf16) at gpu_attention's shapes, into r[forward, backward];
 * left 0 where the backend has no pair for heads of 64. */
static hpt_status gpu_attention_bf16(gpu_ctx *g, int T, double r[2]) {
    const int B = 8, C = 768, NH = 12;
    if (!g->be->flash_attention_forward_bf16 || !g->be->flash_attention_bf16_heads(C / NH)) return HPT_OK;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    const size_t nscr = (size_t)B * NH * T + 4 * nqkv, nlse = (size_t)B * NH * T;
    float *qkv, *out, *lse, *dqkv, *scr, *dout;
    gpu_buf b[] = {{&qkv, nqkv, HPT_TIER_DEVICE}, {&out, nout, HPT_TIER_DEVICE},
                   {&lse, nlse, HPT_TIER_DEVICE}, {&dqkv, nqkv, HPT_TIER_DEVICE},
                   {&scr, nscr, HPT_TIER_DEVICE}, {&dout, nout, HPT_TIER_DEVICE}};
    const int nb = (int)(sizeof b / sizeof b[0]);
    hpt_status s = bufs_alloc(g, b, nb);
    if (s == HPT_OK) {
        const double f = 2.0 * C * (T + 1.0) * B * T;
        double t;
        g->be->flash_attention_forward_bf16(out, lse, qkv, B, T, C, NH, NH, NULL, 0);
        GPU_BEST(g, t, g->be->flash_attention_forward_bf16(out, lse, qkv, B, T, C, NH, NH, NULL, 0));
        r[0] = f / t / 1e9;
        GPU_BEST(g, t, g->be->flash_attention_backward_bf16(dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NH,
                                                            NULL, 0));
        r[1] = 2 * f / t / 1e9;
    }
    bufs_free(g, b, nb);
    return s;
}

/* --matmul bf16's rates (c->bf16): the GEMMs through the _bf16 ops with their device workspace,
 * and the bf16 flash pair (without it for heads of 64: the fp32 pair's rates). */
static hpt_status gpu_bf16(gpu_ctx *g, hpt_calibration *c) {
    if (!g->be->matmul_forward_bf16 || !g->be->matmul_backward_bf16) return HPT_OK;
    float *ws;
    gpu_buf b[] = {{&ws, HPT_MM_BF16_WS_BYTES / 4, HPT_TIER_DEVICE}};
    hpt_status s = bufs_alloc(g, b, 1);
    if (s == HPT_OK) s = gpu_gemm(g, ws, c);
    bufs_free(g, b, 1);
    if (s == HPT_OK) s = gpu_attention_bf16(g, 128, c->bf16.flash_gflops);
    if (s == HPT_OK) s = gpu_attention_bf16(g, 512, c->bf16.flash512_gflops);
    if (s == HPT_OK && !(c->bf16.flash_gflops[0] > 0))
        for (int d = 0; d < 2; d++)
            c->bf16.flash_gflops[d] = c->attn_gflops[0][d], c->bf16.flash512_gflops[d] = c->attn512_gflops[0][d];
    if (s == HPT_OK) c->bf16.have = 1;
    return s;
}

/* A read+write pass over 1 GiB of device floats (scale), pinned host<->device copies of 256 MiB
 * (the slower direction kept: the cost model has one host rate), each optimizer's fp32 update
 * over 64 Mi parameters (the 8-bit state is not measured on a GPU: its 32-bit figure stands). */
static hpt_status gpu_memory_optim(gpu_ctx *g, hpt_calibration *c) {
    const size_t n = (size_t)256 << 20, nh = (size_t)64 << 20, np = (size_t)64 << 20;
    const size_t nmini = np / 256 + 1;
    float *a, *h, *p, *gr, *m, *v, *mini;
    gpu_buf b[] = {{&a, n, HPT_TIER_DEVICE}, {&h, nh, HPT_TIER_HOST}, {&p, np, HPT_TIER_DEVICE},
                   {&gr, np, HPT_TIER_DEVICE}, {&m, np, HPT_TIER_DEVICE}, {&v, np, HPT_TIER_DEVICE},
                   {&mini, nmini, HPT_TIER_DEVICE}};
    const int nb = (int)(sizeof b / sizeof b[0]);
    hpt_status s = bufs_alloc(g, b, nb);
    if (s == HPT_OK) {
        double t, t2;
        GPU_BEST(g, t, g->be->scale(a, n, 0.999f));
        c->mem_gbps = 2.0 * (double)n * 4 / t / 1e9;
        GPU_BEST(g, t, g->be->copy(a, h, nh * 4, HPT_COPY_H2D));
        GPU_BEST(g, t2, g->be->copy(h, a, nh * 4, HPT_COPY_D2H));
        c->host_copy_gbps = (double)nh * 4 / (t > t2 ? t : t2) / 1e9;
        const double per = 1e9 / (double)np;
        hpt_be_param pp = hpt_be_param_f32(p);
        hpt_be_state M = {m, NULL, NULL, NULL, NULL};
        GPU_BEST(g, t, g->be->adamw(p, gr, m, v, np, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 2));
        c->optim_ns[HPT_OPTIM_ADAMW][0] = t * per;
        GPU_BEST(g, t, g->be->lion(pp, gr, M, np, 1e-4f, 0.9f, 0.99f, 0.1f, 1));
        c->optim_ns[HPT_OPTIM_LION][0] = t * per;
        GPU_BEST(g, t, g->be->sgd(pp, gr, M, np, 1e-4f, 0.9f, 0, 1));
        c->optim_ns[HPT_OPTIM_SGD][0] = t * per;
        GPU_BEST(g, t, g->be->adam_mini(pp, gr, M, mini, np, 256, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 2));
        c->optim_ns[HPT_OPTIM_ADAM_MINI][0] = t * per;
        for (int k = 0; k < HPT_OPTIM_COUNT; k++) {
            c->optim_ns[k][1] = c->optim_ns[k][0];
            c->worker_ns[k][0] = c->worker_ns[k][1] = c->optim_ns[k][0]; /* updates run on the GPU */
        }
    }
    bufs_free(g, b, nb);
    return s;
}
#endif

hpt_status hpt_calibrate_device(int device, int quick, hpt_calibration *c) {
    memset(c, 0, sizeof *c);
    HPT_CHECK(hpt_calibration_device_name(device, c->device, sizeof c->device));
    HPT_CHECK(hpt_device_ready(device));
#ifdef HPT_HAVE_CUDA
    c->version = HPT_CAL_VERSION;
    c->threads = hpt_get_threads();
    gpu_ctx g = {NULL, NULL, quick ? 0.05 : 0.15, quick ? 3 : 5};
    HPT_CHECK(hpt_mem_create(&g.mem));
    hpt_status s = hpt_device_bind(g.mem, device, NULL);
    if (s == HPT_OK) {
        g.be = hpt_backend_of(g.mem);
        s = gpu_gemm(&g, NULL, c);
    }
    if (s == HPT_OK) s = gpu_attention(&g, 128, c->attn_gflops);
    if (s == HPT_OK) s = gpu_attention(&g, 512, c->attn512_gflops);
    if (s == HPT_OK) s = gpu_bf16(&g, c);
    if (s == HPT_OK) s = gpu_memory_optim(&g, c);
    if (s == HPT_OK) s = hpt_device_status(); /* an op's CUDA error */
    hpt_mem_destroy(g.mem);
    return s;
#else
    (void)quick;
    return HPT_ERR_UNSUPPORTED;
#endif
}
