/* predict.c: the hybrid schedule's per-parameter loops (src/train/predict.c calls them through
 * the backend table): the linear fit's running sums, the predicted AdamW and linear updates,
 * the garbage predictor's noise, and the norm of AdamW's last step from its moments.
 * Invariants: every loop partitions statically; every sum of squares is summed in PRED_CHUNKS
 * fixed chunks (each in order, then the chunks in order), so the bits depend on neither the
 * thread count nor the schedule, and a resumed phase gives the same bits. */
#include "kernels/kernels.h"
#include "core/core.h"

#include <math.h>

#define PRED_CHUNKS 64

/* Chunk c of PRED_CHUNKS over n: [lo, hi). */
static void chunk_range(size_t n, int c, size_t *lo, size_t *hi) {
    size_t chunk = (n + PRED_CHUNKS - 1) / PRED_CHUNKS;
    *lo = (size_t)c * chunk < n ? (size_t)c * chunk : n;
    *hi = *lo + chunk < n ? *lo + chunk : n;
}

void k_fit_observe(float *s0, float *s1, const float *w, size_t n, float d) {
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float a = s0[i];
        s1[i] = d * (s1[i] + a);
        s0[i] = d * a + w[i];
    }
}

void k_fit_velocity(float *s1, const float *s0, size_t n, float cw, float ca) {
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (size_t i = 0; i < n; i++) s1[i] = cw * s1[i] + ca * s0[i];
}

double k_predict_adam(float *p, const float *m, const float *v, size_t n, float lr, float wd,
                      float b2k, float bc1, float bc2, float eps) {
    double part[PRED_CHUNKS];
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (int c = 0; c < PRED_CHUNKS; c++) {
        size_t lo, hi;
        chunk_range(n, c, &lo, &hi);
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) {
            float mk = m[i];
            float vk = b2k * v[i] + (1.0f - b2k) * mk * mk;
            float u = lr * ((mk / bc1) / (sqrtf(vk / bc2) + eps) + wd * p[i]);
            p[i] -= u;
            s += (double)u * (double)u;
        }
        part[c] = s;
    }
    double s = 0.0;
    for (int c = 0; c < PRED_CHUNKS; c++) s += part[c];
    return s;
}

double k_predict_linear(float *p, const float *vel, size_t n, float scale) {
    double part[PRED_CHUNKS];
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (int c = 0; c < PRED_CHUNKS; c++) {
        size_t lo, hi;
        chunk_range(n, c, &lo, &hi);
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) {
            float u = scale * vel[i];
            p[i] += u;
            s += (double)u * (double)u;
        }
        part[c] = s;
    }
    double s = 0.0;
    for (int c = 0; c < PRED_CHUNKS; c++) s += part[c];
    return s;
}

double k_add_normal(float *p, size_t n, uint64_t seed, float std) {
    /* one stream, in order: sequential by nature (tests only) */
    hpt_rng r;
    hpt_rng_seed(&r, seed);
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        float u = std * hpt_rng_normal(&r);
        p[i] += u;
        s += (double)u * (double)u;
    }
    return s;
}

double k_adam_step_sumsq(const float *m, const float *v, size_t n, float bc1, float bc2,
                         float eps) {
    double part[PRED_CHUNKS];
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (int c = 0; c < PRED_CHUNKS; c++) {
        size_t lo, hi;
        chunk_range(n, c, &lo, &hi);
        double s = 0.0;
        for (size_t i = lo; i < hi; i++) {
            float u = (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps);
            s += (double)u * (double)u;
        }
        part[c] = s;
    }
    double s = 0.0;
    for (int c = 0; c < PRED_CHUNKS; c++) s += part[c];
    return s;
}
