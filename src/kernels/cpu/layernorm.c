/* layernorm.c: layer normalisation over the channel dimension, eps 1e-5 (GPT-2's).
 * Backward is two passes so that it is deterministic without per-thread scratch: rows in
 * parallel for dinp, then channel blocks in parallel for dw and db. */
#include "kernels/kernels.h"

#include <math.h>

void k_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, int64_t N, int C) {
#pragma omp parallel for schedule(static) if (N * C >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C; // (C)
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; c++) sum += x[c];
        float mu = sum / (float)C;
        float var = 0.0f;
#pragma omp simd reduction(+ : var)
        for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
        float rs = 1.0f / sqrtf(var / (float)C + 1e-5f);
        float *o = out + i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - mu) * rs * w[c] + b[c];
        mean[i] = mu;
        rstd[i] = rs;
    }
}

void k_layernorm_apply(float *out, const float *inp, const float *w, const float *b,
                       const float *mean, const float *rstd, int64_t N, int C) {
#pragma omp parallel for schedule(static) if (N * C >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C; // (C)
        const float mu = mean[i], rs = rstd[i];
        float *o = out + i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - mu) * rs * w[c] + b[c];
    }
}

void k_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                          const float *w, const float *mean, const float *rstd, int64_t N, int C) {
    /* out = norm * w + b, norm = (x - mean) * rstd.
     * dnorm = dout * w; dx = rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)). */
#pragma omp parallel for schedule(static) if (N * C >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *x = inp + i * C, *d = dout + i * C;
        float mu = mean[i], rs = rstd[i];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
        for (int c = 0; c < C; c++) {
            float dn = w[c] * d[c];
            dnorm_mean += dn;
            dnorm_norm_mean += dn * (x[c] - mu) * rs;
        }
        dnorm_mean /= (float)C;
        dnorm_norm_mean /= (float)C;
        float *dx = dinp + i * C;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - mu) * rs;
            dx[c] += rs * (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean);
        }
    }
    /* dw = sum_i dout * norm, db = sum_i dout, each channel block owned by one thread */
#pragma omp parallel for schedule(static) if (N * C >= K_PAR_MIN)
    for (int c0 = 0; c0 < C; c0 += 32) {
        int c1 = c0 + 32 < C ? c0 + 32 : C;
        for (int64_t i = 0; i < N; i++) {
            const float *x = inp + i * C, *d = dout + i * C;
            float mu = mean[i], rs = rstd[i];
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                dw[c] += d[c] * (x[c] - mu) * rs;
                db[c] += d[c];
            }
        }
    }
}
