/* q8w.c: linear layers on int8 weights with one fp32 scale per output channel (a row of w):
 * w[o][i] ~= scale[o] * q[o][i], q in [-127, 127], scale[o] = max_i |w[o][i]| / 127, round to
 * nearest. Sums run in fp32. A few rows (generation's one token) take a direct int8 dot
 * product, reading each weight byte once; more rows dequantise K_Q8W_TILE output channels at
 * a time into a scratch tile and run the GEMM on it, so the fp32 copy of a weight is never
 * larger than one tile. */
#include "kernels/kernels.h"

#include <math.h>
#include <string.h>

void k_q8w_quantize(int8_t *q, float *scale, const float *w, int64_t OC, int64_t C) {
#pragma omp parallel for schedule(static) if (OC * C >= K_PAR_MIN)
    for (int64_t o = 0; o < OC; o++) {
        const float *wr = w + o * C;
        float amax = 0.0f;
        for (int64_t i = 0; i < C; i++) amax = fmaxf(amax, fabsf(wr[i]));
        float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
        scale[o] = amax / 127.0f;
        for (int64_t i = 0; i < C; i++) {
            float v = nearbyintf(wr[i] * inv); /* |w| <= amax, so |v| <= 127 */
            q[o * C + i] = (int8_t)fmaxf(-127.0f, fminf(127.0f, v));
        }
    }
}

void k_q8w_dequantize(float *w, const int8_t *q, const float *scale, int64_t OC, int64_t C) {
#pragma omp parallel for schedule(static) if (OC * C >= K_PAR_MIN)
    for (int64_t o = 0; o < OC; o++) {
        const int8_t *qr = q + o * C;
        float *wr = w + o * C;
        const float s = scale[o];
#pragma omp simd
        for (int64_t i = 0; i < C; i++) wr[i] = (float)qr[i] * s;
    }
}

void k_q8w_matmul_forward(float *out, const float *inp, const int8_t *q, const float *scale,
                          const float *bias, int64_t N, int64_t C, int64_t OC, int accumulate,
                          float *scratch) {
    if (N <= K_Q8W_DIRECT_ROWS) {
        /* out[n][o] (+)= scale[o] * (inp[n] . q[o]) + bias[o] */
#pragma omp parallel for schedule(static) if (OC * C >= K_PAR_MIN)
        for (int64_t o = 0; o < OC; o++) {
            const int8_t *qr = q + o * C;
            for (int64_t n = 0; n < N; n++) {
                const float *x = inp + n * C;
                float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                for (int64_t i = 0; i < C; i++) acc += x[i] * (float)qr[i];
                float v = acc * scale[o] + (bias ? bias[o] : 0.0f);
                out[n * OC + o] = accumulate ? out[n * OC + o] + v : v;
            }
        }
        return;
    }
    for (int64_t o0 = 0; o0 < OC; o0 += K_Q8W_TILE) {
        int64_t no = OC - o0 < K_Q8W_TILE ? OC - o0 : K_Q8W_TILE;
        k_q8w_dequantize(scratch, q + o0 * C, scale + o0, no, C); /* (no, C) */
        k_gemm('N', 'T', N, no, C, 1.0f, inp, C, scratch, C, accumulate ? 1.0f : 0.0f, out + o0,
               OC);
    }
    if (bias) {
#pragma omp parallel for schedule(static) if (N * OC >= K_PAR_MIN)
        for (int64_t n = 0; n < N; n++) {
            float *o = out + n * OC;
#pragma omp simd
            for (int64_t j = 0; j < OC; j++) o[j] += bias[j];
        }
    }
}
