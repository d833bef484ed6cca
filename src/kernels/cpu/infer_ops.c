/* infer_ops.c: the kernels of GPT-2 inference with a key/value cache (model/infer.c): the n fed
 * rows' embedding (fp32 or int8 wte), the cache's append of their keys and values, and causal
 * attention of their queries over the cache, one pass per (row, head) with a running softmax
 * (no (T,T) buffer: the cache may be long, the rows few). Deterministic for a fixed thread
 * count: each (row, head) is one thread's work. */
#include "kernels/cpu/infer_ops.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

/* x (n, C) = wte[tok] + wpe[pos0 + t]; wte as int8 rows times their scale when wte_q is set. */
void k_infer_embed(float *x, const int32_t *tok, size_t n, int pos0, const float *wte,
                   const int8_t *wte_q, const float *wte_scale, const float *wpe, int C) {
    const size_t Cz = (size_t)C;
    for (size_t t = 0; t < n; t++) {
        float *xr = x + t * Cz;
        const float *pe = wpe + (size_t)(pos0 + (int)t) * Cz;
        if (wte_q) {
            const int8_t *qr = wte_q + (size_t)tok[t] * Cz;
            float s = wte_scale[tok[t]];
            for (size_t i = 0; i < Cz; i++) xr[i] = (float)qr[i] * s + pe[i];
        } else {
            const float *er = wte + (size_t)tok[t] * Cz;
            for (size_t i = 0; i < Cz; i++) xr[i] = er[i] + pe[i];
        }
    }
}

/* K, V (ctx, C) rows pos0 .. pos0 + n - 1 = the k and v thirds of qkv (n, 3C). */
void k_infer_kv_store(float *K, float *V, const float *qkv, int pos0, size_t n, int C) {
    const size_t Cz = (size_t)C;
    for (size_t t = 0; t < n; t++) {
        memcpy(K + (size_t)(pos0 + (int)t) * Cz, qkv + t * 3 * Cz + Cz, Cz * sizeof(float));
        memcpy(V + (size_t)(pos0 + (int)t) * Cz, qkv + t * 3 * Cz + 2 * Cz, Cz * sizeof(float));
    }
}

/* atty (n, C) = causal attention of the n rows' queries (qkv (n, 3C)) at positions
 * pos0 .. pos0 + n - 1 over the cache's keys and values K, V (ctx, C) up to each row's
 * position. */
void k_infer_attend(float *atty, const float *qkv, const float *K, const float *V, int pos0,
                    size_t n, int C, int NH) {
    const int hs = C / NH;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)(pos0 + n) * n * C >= K_PAR_MIN)
    for (int64_t t = 0; t < (int64_t)n; t++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)t * 3 * C + (size_t)h * hs;
            float *o = atty + (size_t)t * C + (size_t)h * hs;
            float mx = -INFINITY, sum = 0.0f;
            memset(o, 0, (size_t)hs * sizeof(float));
            for (int j = 0; j <= pos0 + (int)t; j++) {
                const float *k = K + (size_t)j * C + (size_t)h * hs;
                const float *v = V + (size_t)j * C + (size_t)h * hs;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int i = 0; i < hs; i++) s += q[i] * k[i];
                s *= scale;
                if (s > mx) { /* rescale what was summed against the old maximum */
                    float corr = expf(mx - s);
                    sum *= corr;
                    for (int i = 0; i < hs; i++) o[i] *= corr;
                    mx = s;
                }
                float p = expf(s - mx);
                sum += p;
#pragma omp simd
                for (int i = 0; i < hs; i++) o[i] += p * v[i];
            }
            float inv = 1.0f / sum;
            for (int i = 0; i < hs; i++) o[i] *= inv;
        }
    }
}
