/* pointwise.c: embeddings, GELU, softmax cross-entropy, and the optimizer's element loops. */
#include "kernels/kernels.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vmath.h"

#include <math.h>
#include <omp.h>
#include <string.h>

void k_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                       int B, int T, int C) {
#pragma omp parallel for collapse(2) schedule(static) if ((int64_t)B * T * C >= K_PAR_MIN)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((int64_t)b * T + t) * C;
            const float *e = wte + (int64_t)inp[b * T + t] * C, *p = wpe + (int64_t)t * C;
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        }
}

/* packed examples (docs/packing.md): wpe read at each token's position in its example */
void k_encoder_forward_pos(float *out, const int32_t *inp, const float *wte, const float *wpe,
                           const int32_t *pos, int B, int T, int C) {
    const int64_t BT = (int64_t)B * T;
#pragma omp parallel for schedule(static) if (BT * C >= K_PAR_MIN)
    for (int64_t r = 0; r < BT; r++) {
        float *o = out + r * C;
        const float *e = wte + (int64_t)inp[r] * C, *p = wpe + (int64_t)pos[r] * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
    }
}

/* dwpe[pos[r]] += dout[r]: rows in order within each channel block, as k_encoder_backward */
void k_encoder_backward_pos(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                            const int32_t *pos, int B, int T, int C) {
    const int64_t BT = (int64_t)B * T;
#pragma omp parallel for schedule(static) if (BT * C >= K_PAR_MIN)
    for (int c0 = 0; c0 < C; c0 += 16) {
        int c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int64_t r = 0; r < BT; r++) {
            const float *d = dout + r * C;
            float *p = dwpe + (int64_t)pos[r] * C;
            if (dwte) { /* NULL: wpe only (chunked embeddings update wte chunk by chunk) */
                float *e = dwte + (int64_t)inp[r] * C;
                for (int c = c0; c < c1; c++) e[c] += d[c];
            }
            for (int c = c0; c < c1; c++) p[c] += d[c];
        }
    }
}

void k_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
                        int T, int C) {
    /* Tokens repeat, so rows of dwte have many writers: split by channel blocks instead. */
#pragma omp parallel for schedule(static) if ((int64_t)B * T * C >= K_PAR_MIN)
    for (int c0 = 0; c0 < C; c0 += 16) {
        int c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *d = dout + ((int64_t)b * T + t) * C;
                float *e = dwte + (int64_t)inp[b * T + t] * C, *p = dwpe + (int64_t)t * C;
                for (int c = c0; c < c1; c++) {
                    e[c] += d[c];
                    p[c] += d[c];
                }
            }
    }
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */

void k_gelu_forward(float *out, const float *inp, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= K_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

void k_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n >= K_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + 0.044715f * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float local = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local * dout[i];
    }
}

float k_crossentropy_forward(float *losses, float *lse, const float *logits,
                             const int32_t *targets, int64_t N, int V, int Vp) {
#pragma omp parallel for schedule(static) if (N * V >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *l = logits + i * Vp;
        float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
        for (int v = 0; v < V; v++) maxv = l[v] > maxv ? l[v] : maxv;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < V; v++) sum += expf(l[v] - maxv);
        lse[i] = maxv + logf(sum);
        losses[i] = targets[i] < 0 ? 0.0f : lse[i] - l[targets[i]]; /* < 0: ignored */
    }
    double total = 0.0;
    for (int64_t i = 0; i < N; i++) total += (double)losses[i];
    return (float)(total / (double)N);
}

void k_crossentropy_backward(float *logits, const float *lse, const int32_t *targets,
                             int64_t N, int V, int Vp, float dloss) {
#pragma omp parallel for schedule(static) if (N * V >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        float *l = logits + i * Vp;
        float m = lse[i];
        if (targets[i] < 0) { /* ignored: no gradient */
            for (int v = 0; v < Vp; v++) l[v] = 0.0f;
            continue;
        }
#pragma omp simd
        for (int v = 0; v < V; v++) l[v] = expf(l[v] - m) * dloss;
        l[targets[i]] -= dloss;
        for (int v = V; v < Vp; v++) l[v] = 0.0f;
    }
}

/* Deterministic reductions: a fixed number of static chunks, each summed in order, then the
 * chunk sums added in order, whatever the thread count. A thread sums SUM_LANES chunks side
 * by side (element i of each in turn): each chunk's sum is still its own in-order sequence,
 * bit for bit, but the adds of different chunks overlap instead of each waiting on the one
 * before it (a lone in-order sum in double runs at the add's latency, not the memory's rate).
 * With AVX-512 or AVX2 the SUM_LANES chunks are a vector's lanes (simd.h): the same sums, so
 * the same bits on every ISA (tests/test_simd.c). More chunks side by side (more chains)
 * were slower: 32 streams a thread defeat the prefetchers (docs/benchmarks.md). */
#define K_CHUNKS 64
#define SUM_LANES 8

double k_sumsq(const float *x, size_t n) {
    double part[K_CHUNKS];
    size_t chunk = (n + K_CHUNKS - 1) / K_CHUNKS;
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (int q = 0; q < K_CHUNKS / SUM_LANES; q++) {
        const float *xs[SUM_LANES];
        size_t len[SUM_LANES], common = chunk;
        for (int k = 0; k < SUM_LANES; k++) {
            size_t lo = (size_t)(q * SUM_LANES + k) * chunk;
            lo = lo < n ? lo : n;
            len[k] = n - lo < chunk ? n - lo : chunk;
            xs[k] = x + lo;
            common = len[k] < common ? len[k] : common;
        }
        double *s = part + q * SUM_LANES;
        size_t i0 = 0;
        if (k_simd_avx512 || k_simd_avx2) {
            i0 = common & ~(size_t)7;
            if (k_simd_avx512) k_sumsq8_avx512(s, xs, i0);
            else k_sumsq8_avx2(s, xs, i0);
        } else {
            for (int k = 0; k < SUM_LANES; k++) s[k] = 0.0;
        }
        for (size_t i = i0; i < common; i++)
            for (int k = 0; k < SUM_LANES; k++) s[k] += (double)xs[k][i] * (double)xs[k][i];
        for (int k = 0; k < SUM_LANES; k++)
            for (size_t i = common; i < len[k]; i++) s[k] += (double)xs[k][i] * (double)xs[k][i];
    }
    double s = 0.0;
    for (int c = 0; c < K_CHUNKS; c++) s += part[c];
    return s;
}

void k_scale(float *x, size_t n, float s) {
#pragma omp parallel for simd schedule(static) if (n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

void k_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
             float beta2, float eps, float wd, float grad_scale, int64_t t) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    float step = lr / bc1, rbc2 = 1.0f / sqrtf(bc2), decay = 1.0f - lr * wd;
#pragma omp parallel for simd schedule(static) if (n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * rbc2 + eps);
    }
}
