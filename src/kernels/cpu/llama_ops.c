/* llama_ops.c: the Llama family's own kernels, fp32: RMSNorm (forward, apply from the saved
 * rstd, backward), rotary position embeddings on the q and k heads of a qkv buffer in place
 * (rotate_half convention: element i of a head pairs with i + hd/2) and SwiGLU on h = [gate | up].
 *
 * Work and determinism (kernels.h): row loops split rows statically over threads, each row
 * summed in a fixed order by one thread; RMSNorm's dw sums over rows inside one channel block's
 * task, in row order, into a local block added to dw once (RMS_DW channels per task: fewer,
 * longer row streams than layernorm.c's 32). Nothing depends on the schedule, so the bits are
 * those of one thread for any thread count. Loops under HPT_PAR_MIN elements stay on one
 * thread. expf is glibc's vector variant (vmath.h) in the simd loops. */
#include "kernels/cpu/llama_ops.h"
#include "kernels/cpu/vmath.h"
#include "kernels/kernels.h"

#include <math.h>

/* ---- RMSNorm: out = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) per row ---- */

void k_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int64_t N, int C,
                       float eps) {
#pragma omp parallel for schedule(static) if (N * C >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C; // (C)
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        const float rs = 1.0f / sqrtf(ss / (float)C + eps);
        float *o = out + i * C; // (C)
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * rs * w[c];
        rstd[i] = rs;
    }
}

/* The forward's expression from its saved rstd: the same bits (recomputation). */
void k_rmsnorm_apply(float *out, const float *inp, const float *w, const float *rstd, int64_t N,
                     int C) {
#pragma omp parallel for schedule(static) if (N * C >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C; // (C)
        const float rs = rstd[i];
        float *o = out + i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = x[c] * rs * w[c];
    }
}

#define RMS_DW 128 /* channels of one dw task (bench/bench_llama_ops.sh: 32 1.26, 64 0.9, 128 0.76
                          * ns per element on one thread at N = 1024, C = 2048) */

void k_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                        const float *w, const float *rstd, int64_t N, int C) {
    /* out_c = x_c r w_c with r = (mean(x^2) + eps)^(-1/2), so dr/dx_j = -r^3 x_j / C:
     * dx_j = r (w_j d_j - x_j r^2 mean_c(w_c d_c x_c)); dw_c = sum over rows of d_c x_c r. */
#pragma omp parallel for schedule(static) if (N * C >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *d = dout + i * C; // (C) each
        const float rs = rstd[i];
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int c = 0; c < C; c++) dot += w[c] * d[c] * x[c];
        const float k = dot / (float)C * rs * rs;
        float *dx = dinp + i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) dx[c] += rs * (w[c] * d[c] - x[c] * k);
    }
    /* dw: each block of RMS_DW channels owned by one thread; its rows summed in order in
     * registers (acc), then added to dw once */
#pragma omp parallel for schedule(static) if (N * C >= K_PAR_MIN)
    for (int c0 = 0; c0 < C; c0 += RMS_DW) {
        const int nc = c0 + RMS_DW < C ? RMS_DW : C - c0;
        float acc[RMS_DW] = {0};
        for (int64_t i = 0; i < N; i++) {
            const float *x = inp + i * C + c0, *d = dout + i * C + c0;
            const float rs = rstd[i];
#pragma omp simd
            for (int c = 0; c < nc; c++) acc[c] += d[c] * x[c] * rs;
        }
        for (int c = 0; c < nc; c++) dw[c0 + c] += acc[c];
    }
}

/* ---- rotary position embeddings ----
 * Head vector x (hd), half = hd / 2, position p, c = cos[p][i], s = sin[p][i]:
 *   y[i] = x[i] c - x[i + half] s,   y[i + half] = x[i + half] c + x[i] s   (i < half),
 * Hugging Face's q * cos + rotate_half(q) * sin. The backward is the transpose rotation
 * (s -> -s): the rotation is linear and orthogonal, so nothing is saved. */
static void rope_rows(float *qkv, const float *cos, const float *sin, int B, int T, int NH,
                      int NKV, int hd, int pos0, float sign, const int32_t *pos) {
    const int half = hd / 2;
    const int64_t W = (int64_t)(NH + 2 * NKV) * hd; /* a row of qkv */
    const int64_t N = (int64_t)B * T;
    const int nrot = NH + NKV;                      /* the q heads, then the k heads */
#pragma omp parallel for schedule(static) if (N * nrot * hd >= K_PAR_MIN)
    for (int64_t r = 0; r < N; r++) {
        const int t = pos ? pos[r] : (int)(r % T); /* packed: the position in its example */
        const float *cr = cos + (int64_t)(pos0 + t) * half; // (half)
        const float *sr = sin + (int64_t)(pos0 + t) * half; // (half)
        float *row = qkv + r * W;
        for (int h = 0; h < nrot; h++) {
            float *x1 = row + (int64_t)h * hd, *x2 = x1 + half; // (half) each
#pragma omp simd
            for (int i = 0; i < half; i++) {
                const float a = x1[i], b = x2[i], c = cr[i], s = sign * sr[i];
                x1[i] = a * c - b * s;
                x2[i] = b * c + a * s;
            }
        }
    }
}

void k_rope_forward(float *qkv, const float *cos, const float *sin, int B, int T, int NH, int NKV,
                    int hd, int pos0) {
    rope_rows(qkv, cos, sin, B, T, NH, NKV, hd, pos0, 1.0f, NULL);
}

void k_rope_forward_pos(float *qkv, const float *cos, const float *sin, int B, int T, int NH,
                        int NKV, int hd, const int32_t *pos) {
    rope_rows(qkv, cos, sin, B, T, NH, NKV, hd, 0, 1.0f, pos);
}

void k_rope_backward_pos(float *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                         int NKV, int hd, const int32_t *pos) {
    rope_rows(dqkv, cos, sin, B, T, NH, NKV, hd, 0, -1.0f, pos);
}

/* dx = R^T dy: the same loop with the sine negated (exact: a sign flip rounds nothing) */
void k_rope_backward(float *dqkv, const float *cos, const float *sin, int B, int T, int NH,
                     int NKV, int hd, int pos0) {
    rope_rows(dqkv, cos, sin, B, T, NH, NKV, hd, pos0, -1.0f, NULL);
}

/* ---- SwiGLU and GeGLU (Gemma): h (N, 2FF) = [gate | up] per row, out (N, FF) = a(gate) * up ----
 * SwiGLU: a = silu, silu(g) = g sigmoid(g), sigmoid(g) = 1 / (1 + exp(-g)) (0 when exp
 * overflows: no NaN). GeGLU: a = gelu(g) = 0.5 g (1 + tanh(k (g + 0.044715 g^3))), k =
 * sqrt(2/pi): the tanh form, as pointwise.c's gelu and PyTorch's gelu(approximate="tanh").
 * One row loop for both; gelu a constant at each call, so each inlined copy has one body. */
#define GEGLU_K 0.7978845608028654f

static inline __attribute__((always_inline)) void glu_forward(float *out, const float *h,
                                                              int64_t N, int FF, int gelu) {
#pragma omp parallel for schedule(static) if (N * FF >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *g = h + i * 2 * FF, *u = g + FF; // (FF) each
        float *o = out + i * FF;                      // (FF)
#pragma omp simd
        for (int j = 0; j < FF; j++) {
            const float x = g[j];
            if (gelu) {
                o[j] = 0.5f * x * (1.0f + tanhf(GEGLU_K * (x + 0.044715f * x * x * x))) * u[j];
            } else {
                const float sg = 1.0f / (1.0f + expf(-x));
                o[j] = x * sg * u[j];
            }
        }
    }
}

/* SwiGLU, out = g sig(g) u: du = dout silu(g); dg = dout u sig(g) (1 + g (1 - sig(g))).
 * GeGLU, out = gelu(g) u: du = dout gelu(g); dg = dout u gelu'(g), gelu'(g) = 0.5 (1 + th) +
 * 0.5 g (1 - th^2) k (1 + 3 0.044715 g^2), th = tanh(k (g + 0.044715 g^3)). */
static inline __attribute__((always_inline)) void glu_backward(float *dh, const float *dout,
                                                               const float *h, int64_t N, int FF,
                                                               int gelu) {
#pragma omp parallel for schedule(static) if (N * FF >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *g = h + i * 2 * FF, *u = g + FF, *d = dout + i * FF;
        float *dg = dh + i * 2 * FF, *du = dg + FF;
#pragma omp simd
        for (int j = 0; j < FF; j++) {
            const float x = g[j];
            if (gelu) {
                const float th = tanhf(GEGLU_K * (x + 0.044715f * x * x * x));
                const float da = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * GEGLU_K *
                                                          (1.0f + 3.0f * 0.044715f * x * x);
                du[j] = d[j] * 0.5f * x * (1.0f + th);
                dg[j] = d[j] * u[j] * da;
            } else {
                const float sg = 1.0f / (1.0f + expf(-x));
                du[j] = d[j] * x * sg;
                dg[j] = d[j] * u[j] * sg * (1.0f + x * (1.0f - sg));
            }
        }
    }
}

void k_swiglu_forward(float *out, const float *h, int64_t N, int FF) { glu_forward(out, h, N, FF, 0); }
void k_swiglu_backward(float *dh, const float *dout, const float *h, int64_t N, int FF) {
    glu_backward(dh, dout, h, N, FF, 0);
}
void k_geglu_forward(float *out, const float *h, int64_t N, int FF) { glu_forward(out, h, N, FF, 1); }
void k_geglu_backward(float *dh, const float *dout, const float *h, int64_t N, int FF) {
    glu_backward(dh, dout, h, N, FF, 1);
}
