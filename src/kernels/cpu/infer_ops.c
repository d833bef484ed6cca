/* infer_ops.c: the kernels of inference with a key/value cache (model/infer.c): the n fed
 * rows' embedding (fp32 or int8 wte, learned positions or none), the cache's append of their
 * keys and values, and causal attention of their queries over the cache, one pass per
 * (row, head) with a running softmax (no (T,T) buffer: the cache may be long, the rows few).
 * Grouped-query attention: a qkv row (C + 2*KVC), KVC = NKV*hd, hd = C/NH, holds NH query
 * heads, NKV key heads, NKV value heads; the cache keeps the NKV heads only, K, V (ctx, KVC),
 * and query head h reads kv head h / (NH/NKV) (GPT-2: NKV = NH, KVC = C). Deterministic for a
 * fixed thread count: each (row, head) is one thread's work. */
#include "kernels/cpu/infer_ops.h"
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

/* x (n, C) = wte[tok] + wpe[pos0 + t]; wte as int8 rows times their scale when wte_q is set;
 * wpe NULL (rotary models): wte[tok] alone, added to zeros (the same rounding: x + 0 = x). */
void k_infer_embed(float *x, const int32_t *tok, size_t n, int pos0, const float *wte,
                   const int8_t *wte_q, const float *wte_scale, const float *wpe, int C) {
    const size_t Cz = (size_t)C;
    for (size_t t = 0; t < n; t++) {
        float *xr = x + t * Cz;
        if (!wpe) {
            if (wte_q) {
                const int8_t *qr = wte_q + (size_t)tok[t] * Cz;
                float s = wte_scale[tok[t]];
                for (size_t i = 0; i < Cz; i++) xr[i] = (float)qr[i] * s;
            } else {
                memcpy(xr, wte + (size_t)tok[t] * Cz, Cz * sizeof(float));
            }
            continue;
        }
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

/* K, V (ctx, KVC) rows pos0 .. pos0 + n - 1 = the k and v parts of qkv (n, C + 2 KVC). */
void k_infer_kv_store(float *K, float *V, const float *qkv, int pos0, size_t n, int C, int NH,
                      int NKV) {
    const size_t Cz = (size_t)C, KVC = (size_t)NKV * (size_t)(C / NH), W = Cz + 2 * KVC;
    for (size_t t = 0; t < n; t++) {
        memcpy(K + (size_t)(pos0 + (int)t) * KVC, qkv + t * W + Cz, KVC * sizeof(float));
        memcpy(V + (size_t)(pos0 + (int)t) * KVC, qkv + t * W + Cz + KVC, KVC * sizeof(float));
    }
}

/* atty (n, C) = causal attention of the n rows' queries (qkv (n, C + 2 KVC)) at positions
 * pos0 .. pos0 + n - 1 over the cache's keys and values K, V (ctx, KVC) up to each row's
 * position, from its window's first key (window > 0: the last `window` keys). */
void k_infer_attend(float *atty, const float *qkv, const float *K, const float *V, int pos0,
                    size_t n, int C, int NH, int NKV, int window) {
    const int hs = C / NH, G = NH / NKV;
    const size_t KVC = (size_t)NKV * (size_t)hs, W = (size_t)C + 2 * KVC;
    const float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for collapse(2) schedule(static) if ((size_t)(pos0 + n) * n * C >= K_PAR_MIN)
    for (int64_t t = 0; t < (int64_t)n; t++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)t * W + (size_t)h * hs;
            const size_t kh = (size_t)(h / G) * hs; /* the kv head's column in K, V */
            float *o = atty + (size_t)t * C + (size_t)h * hs;
            float mx = -INFINITY, sum = 0.0f;
            memset(o, 0, (size_t)hs * sizeof(float));
            const int tp = pos0 + (int)t; /* the query's position */
            for (int j = window > 0 && tp - window + 1 > 0 ? tp - window + 1 : 0; j <= tp; j++) {
                const float *k = K + (size_t)j * KVC + kh;
                const float *v = V + (size_t)j * KVC + kh;
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
