/* embed_kernels.c: loops of the chunked head and the bf16 tied embeddings (model/embed.c) as
 * backend ops. Each keeps the order of its sums fixed (static partitions, channel blocks of 16
 * for the scatters as k_encoder_backward), so results do not depend on the thread count beyond
 * what k_encoder_backward's do; the running log-sum-exp's first chunk starts from (-inf, 0),
 * whose contribution 0 * exp(-inf) adds nothing. */
#include "kernels/cpu/embed_kernels.h"
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/vmath.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

#define EMB_PIECE 16384 /* values per thread's piece of a long conversion */
#define EMB_STREAM ((size_t)1 << 23) /* 32 MiB of floats: the L3 of the machines here */

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

float k_loss_mean(const float *losses, size_t n) {
    double total = 0.0; /* in order, as k_crossentropy_forward sums */
    for (size_t i = 0; i < n; i++) total += (double)losses[i];
    return (float)(total / (double)n);
}

void k_bf16_widen_par(float *x, const uint16_t *h, size_t n) {
    /* x apart from h here (pieces in parallel); past EMB_STREAM values the floats are streamed
     * past the caches (an engine block: 123 MB at 1558M), the same bits */
    int nt = k_simd_avx512 && n >= EMB_STREAM;
#pragma omp parallel for schedule(static) if (n >= 4 * EMB_PIECE)
    for (size_t j = 0; j < n; j += EMB_PIECE) {
        if (nt) k_bf16_widen_nt_avx512(x + j, h + j, min_size(EMB_PIECE, n - j));
        else k_bf16_widen(x + j, h + j, min_size(EMB_PIECE, n - j));
    }
}

void k_bf16_split_par(uint16_t *h, uint16_t *c, const float *x, size_t n) {
#pragma omp parallel for schedule(static) if (n >= 4 * EMB_PIECE)
    for (size_t j = 0; j < n; j += EMB_PIECE)
        k_bf16_split(h + j, c ? c + j : NULL, x + j, min_size(EMB_PIECE, n - j));
}

void k_encoder_forward_bf16(float *out, const int32_t *inp, const uint16_t *wte,
                            const uint16_t *wpe, int B, int T, int C) {
    int64_t BT = (int64_t)B * T;
#pragma omp parallel for schedule(static) if (BT * C >= K_PAR_MIN)
    for (int64_t i = 0; i < BT; i++) {
        const uint16_t *e = wte + (size_t)inp[i] * (size_t)C;
        const uint16_t *p = wpe + (size_t)(i % T) * (size_t)C;
        float *o = out + (size_t)i * (size_t)C;
        for (int c = 0; c < C; c++) o[c] = bf16_widen(e[c]) + bf16_widen(p[c]);
    }
}

/* packed examples (docs/packing.md): wpe read at pos[i], each token's position in its example */
void k_encoder_forward_bf16_pos(float *out, const int32_t *inp, const uint16_t *wte,
                                const uint16_t *wpe, const int32_t *pos, int B, int T, int C) {
    int64_t BT = (int64_t)B * T;
#pragma omp parallel for schedule(static) if (BT * C >= K_PAR_MIN)
    for (int64_t i = 0; i < BT; i++) {
        const uint16_t *e = wte + (size_t)inp[i] * (size_t)C;
        const uint16_t *p = wpe + (size_t)pos[i] * (size_t)C;
        float *o = out + (size_t)i * (size_t)C;
        for (int c = 0; c < C; c++) o[c] = bf16_widen(e[c]) + bf16_widen(p[c]);
    }
}

void k_encoder_backward_wpe(float *dwpe, const float *dout, size_t BT, int T, size_t C) {
#pragma omp parallel for schedule(static) if ((int64_t)(BT * C) >= K_PAR_MIN)
    for (size_t c0 = 0; c0 < C; c0 += 16) {
        size_t c1 = min_size(c0 + 16, C);
        for (size_t i = 0; i < BT; i++) {
            const float *d = dout + i * C;
            float *p = dwpe + (i % (size_t)T) * C;
            for (size_t k = c0; k < c1; k++) p[k] += d[k];
        }
    }
}

void k_encoder_backward_rows(float *dwte, const float *dout, const int32_t *inp, size_t BT,
                             size_t C, size_t v0, size_t nv) {
#pragma omp parallel for schedule(static) if ((int64_t)(BT * C) >= K_PAR_MIN)
    for (size_t c0 = 0; c0 < C; c0 += 16) {
        size_t c1 = min_size(c0 + 16, C);
        for (size_t i = 0; i < BT; i++) {
            size_t t = (size_t)inp[i];
            if (t < v0 || t >= v0 + nv) continue;
            const float *d = dout + i * C;
            float *e = dwte + (t - v0) * C;
            for (size_t k = c0; k < c1; k++) e[k] += d[k];
        }
    }
}

void k_logsumexp_chunk(float *mxs, float *sums, const float *logits, size_t n, size_t nv,
                       int first) {
#pragma omp parallel for schedule(static) if ((int64_t)(n * nv) >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float *l = logits + i * nv;
        const float mx0 = first ? -INFINITY : mxs[i], s0 = first ? 0.0f : sums[i];
        float mx = mx0;
        const int n_v = (int)nv;
#pragma omp simd reduction(max : mx)
        for (int v = 0; v < n_v; v++) mx = l[v] > mx ? l[v] : mx;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int v = 0; v < n_v; v++) sum += expf(l[v] - mx);
        sum += s0 * expf(mx0 - mx); /* first chunk: 0 * 0 */
        mxs[i] = mx;
        sums[i] = sum;
    }
}

void k_tied_loss(float *losses, float *lse, const float *lnf, const float *wte,
                 const uint16_t *wte_h, const int32_t *targets, size_t n, size_t C) {
    int bf = wte == NULL;
#pragma omp parallel for schedule(static) if ((int64_t)(n * C) >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        const float *x = lnf + i * C;
        lse[i] = losses[i] + logf(lse[i]);
        if (targets[i] < 0) { /* ignored */
            losses[i] = 0.0f;
            continue;
        }
        size_t t = (size_t)targets[i] * C;
        float dot = 0.0f;
        for (size_t k = 0; k < C; k++) dot += x[k] * (bf ? bf16_widen(wte_h[t + k]) : wte[t + k]);
        losses[i] = lse[i] - dot;
    }
}

void k_crossentropy_dlogits(float *logits, const float *lse, const int32_t *targets, size_t n,
                            size_t v0, size_t nv, float dloss) {
#pragma omp parallel for schedule(static) if ((int64_t)(n * nv) >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float *l = logits + i * nv, m = lse[i];
        const int n_v = (int)nv;
        if (targets[i] < 0) { /* ignored: no gradient */
            for (int v = 0; v < n_v; v++) l[v] = 0.0f;
            continue;
        }
#pragma omp simd
        for (int v = 0; v < n_v; v++) l[v] = expf(l[v] - m) * dloss;
        size_t t = (size_t)targets[i];
        if (t >= v0 && t < v0 + nv) l[t - v0] -= dloss;
    }
}
