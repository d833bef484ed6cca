/* misc.cu: 16-bit conversions (gradient homes), saved-activation coding, inference's embedding
 * and key/value cache, the hybrid schedule's predictor loops and random initialisation on the
 * GPU.
 * In place: narrowing may write h over x's own bytes and widening x over h's (the CPU's
 * contract). A GPU has no "forward order", so the in-place case runs in ranges whose writes land
 * only on values already read: [0, S) in one block (all reads, a barrier, all writes), then
 * [a, 2a) for a = S, 2S, 4S, ..., which writes h's bytes of x's values [a/2, a), all consumed by
 * the earlier ranges (widening: the same ranges from the top down). Not in place: one launch.
 * Random numbers (init_normal, add_normal) are the CPU's own (core's generator, kernels/cpu's
 * chunking): made on the host in pieces through a pinned staging buffer and copied over, so the
 * values are the CPU's bits. Sums of squares returned to the host are in double, fixed partials. */
#include "kernels/cuda/cu_common.cuh"

#include <cuda_fp16.h>
#include <math.h>

#define FIRST_RANGE 1024

/* ---- 16-bit conversions ---- */
/* fp16 nearest even as F16C (the CPU's): a NaN keeps its sign and top mantissa bits, quieted
 * (CUDA's own conversion returns one canonical NaN) */
__device__ inline uint16_t cu_f16_rne(float f) {
    uint32_t b = __float_as_uint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(((b >> 16) & 0x8000u) | 0x7e00u | ((b >> 13) & 0x3ffu));
    return __half_as_ushort(__float2half_rn(f));
}
__device__ inline float cu_f16_widen(uint16_t h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
        return __uint_as_float(((uint32_t)(h & 0x8000u) << 16) | 0x7fc00000u | ((uint32_t)(h & 0x3ffu) << 13));
    return __half2float(__ushort_as_half(h));
}
template <int BF>
__global__ void d_narrow(uint16_t *h, const float *x, size_t lo, size_t hi, unsigned *flag, int one_block) {
    if (one_block) { /* the first range in place: every read before any write */
        float v[FIRST_RANGE / 256];
        int nv = 0;
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) v[nv++] = x[i];
        __syncthreads();
        unsigned over = 0;
        nv = 0;
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            float f = v[nv++];
            uint16_t r = BF ? cu_bf16_rne(f) : cu_f16_rne(f);
            over |= BF ? (r & 0x7f80u) == 0x7f80u : !(f <= 65504.0f && f >= -65504.0f);
            h[i] = r;
        }
        if (over) atomicOr(flag, 1u);
        return;
    }
    unsigned over = 0;
    for (size_t i = lo + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < hi; i += (size_t)gridDim.x * blockDim.x) {
        float f = x[i];
        uint16_t r = BF ? cu_bf16_rne(f) : cu_f16_rne(f);
        over |= BF ? (r & 0x7f80u) == 0x7f80u : !(f <= 65504.0f && f >= -65504.0f);
        h[i] = r;
    }
    if (over) atomicOr(flag, 1u); /* an integer OR: the same flag in any order */
}

template <int BF>
static int narrow(uint16_t *h, const float *x, size_t n) {
    cu_enter();
    unsigned *flag = (unsigned *)cu_red;
    cu_note(cudaMemsetAsync(flag, 0, sizeof(unsigned), cu_stream), "narrow");
    if (n) {
        if ((const void *)h == (const void *)x) {
            size_t s = n < FIRST_RANGE ? n : FIRST_RANGE;
            d_narrow<BF><<<1, 256, 0, cu_stream>>>(h, x, 0, s, flag, 1);
            for (size_t a = s; a < n; a *= 2) {
                size_t hi = 2 * a < n ? 2 * a : n;
                d_narrow<BF><<<cu_grid(hi - a), CU_T, 0, cu_stream>>>(h, x, a, hi, flag, 0);
            }
        } else {
            d_narrow<BF><<<cu_grid(n), CU_T, 0, cu_stream>>>(h, x, 0, n, flag, 0);
        }
        CU_LAUNCHED("narrow");
    }
    cu_read_red(1);
    return *(const unsigned *)cu_red_host != 0;
}
int cu_f16_narrow(uint16_t *h, const float *x, size_t n) { return narrow<0>(h, x, n); }
int cu_bf16_narrow(uint16_t *h, const float *x, size_t n) { return narrow<1>(h, x, n); }

template <int BF>
__global__ void d_widen(float *x, const uint16_t *h, size_t lo, size_t hi, int one_block) {
    if (one_block) {
        float v[FIRST_RANGE / 256];
        int nv = 0;
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x)
            v[nv++] = BF ? cu_bf16_widen(h[i]) : cu_f16_widen(h[i]);
        __syncthreads();
        nv = 0;
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) x[i] = v[nv++];
        return;
    }
    for (size_t i = lo + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < hi; i += (size_t)gridDim.x * blockDim.x)
        x[i] = BF ? cu_bf16_widen(h[i]) : cu_f16_widen(h[i]);
}

template <int BF>
static void widen(float *x, const uint16_t *h, size_t n) {
    if (!n) return;
    cu_enter();
    if ((const void *)h == (const void *)x) {
        size_t s = n < FIRST_RANGE ? n : FIRST_RANGE, starts[64];
        int nr = 0;
        for (size_t a = s; a < n; a *= 2) starts[nr++] = a;
        for (int k = nr - 1; k >= 0; k--) { /* the top range first, then down */
            size_t a = starts[k], hi = 2 * a < n ? 2 * a : n;
            d_widen<BF><<<cu_grid(hi - a), CU_T, 0, cu_stream>>>(x, h, a, hi, 0);
        }
        d_widen<BF><<<1, 256, 0, cu_stream>>>(x, h, 0, s, 1);
    } else {
        d_widen<BF><<<cu_grid(n), CU_T, 0, cu_stream>>>(x, h, 0, n, 0);
    }
    CU_LAUNCHED("widen");
}
void cu_f16_widen(float *x, const uint16_t *h, size_t n) { widen<0>(x, h, n); }
void cu_bf16_widen(float *x, const uint16_t *h, size_t n) { widen<1>(x, h, n); }

/* ---- saved activations, compressed ---- */
size_t cu_act_code_bytes(hpt_act_code k, size_t rows, size_t w) { return k_act_code_bytes(k, rows, w); }

__global__ void d_act_q8_store(char *dst, const float *x, size_t rows, size_t w) {
    __shared__ float red[32];
    const size_t r = blockIdx.x;
    float *scale = (float *)dst;
    int8_t *q = (int8_t *)(dst + rows * sizeof(float));
    const float *xr = x + r * w;
    float amax = 0.0f;
    for (size_t j = threadIdx.x; j < w; j += blockDim.x) amax = fmaxf(amax, fabsf(xr[j]));
    amax = cu_block_max(amax, red, 0.0f);
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    if (threadIdx.x == 0) scale[r] = amax / 127.0f;
    for (size_t j = threadIdx.x; j < w; j += blockDim.x) {
        float v = rintf(xr[j] * inv);
        q[r * w + j] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
    }
}
__global__ void d_act_q8_load(float *x, const char *src, size_t rows, size_t w) {
    const float *scale = (const float *)src;
    const int8_t *q = (const int8_t *)(src + rows * sizeof(float));
    CU_FOR(i, rows * w) x[i] = (float)q[i] * scale[i / w];
}
__global__ void d_act_bf16_store(uint16_t *h, const float *x, size_t n) {
    CU_FOR(i, n) { /* the CPU's activation rounding (actcode.c): nearest even, no special case */
        uint32_t b = __float_as_uint(x[i]);
        h[i] = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
}
void cu_act_code_store(hpt_act_code k, void *dst, const float *x, size_t rows, size_t w) {
    if (!rows || !w) return;
    cu_enter();
    if (k == HPT_ACT_CODE_INT8) d_act_q8_store<<<(unsigned)rows, CU_T, 0, cu_stream>>>((char *)dst, x, rows, w);
    else d_act_bf16_store<<<cu_grid(rows * w), CU_T, 0, cu_stream>>>((uint16_t *)dst, x, rows * w);
    CU_LAUNCHED("act_code_store");
}
void cu_act_code_load(hpt_act_code k, float *x, const void *src, size_t rows, size_t w, int par) {
    (void)par; /* the same kernel from any thread */
    if (!rows || !w) return;
    cu_enter();
    if (k == HPT_ACT_CODE_INT8) d_act_q8_load<<<cu_grid(rows * w), CU_T, 0, cu_stream>>>(x, (const char *)src, rows, w);
    else d_widen<1><<<cu_grid(rows * w), CU_T, 0, cu_stream>>>(x, (const uint16_t *)src, 0, rows * w, 0);
    CU_LAUNCHED("act_code_load");
}

/* ---- inference ---- */
__global__ void d_infer_embed(float *x, const int32_t *tok, size_t n, int pos0, const float *wte,
                              const int8_t *wte_q, const float *wte_scale, const float *wpe, int C) {
    CU_FOR(i, n * (size_t)C) {
        size_t t = i / (size_t)C, c = i % (size_t)C, row = (size_t)tok[t] * C + c;
        float e = wte_q ? (float)wte_q[row] * wte_scale[tok[t]] : wte[row];
        x[i] = wpe ? e + wpe[(size_t)(pos0 + (int)t) * C + c] : e; /* wpe NULL: rotary models */
    }
}
void cu_infer_embed(float *x, const int32_t *tok, size_t n, int pos0, const float *wte,
                    const int8_t *wte_q, const float *wte_scale, const float *wpe, int C) {
    if (!n) return;
    cu_enter();
    d_infer_embed<<<cu_grid(n * (size_t)C), CU_T, 0, cu_stream>>>(x, tok, n, pos0, wte, wte_q, wte_scale, wpe, C);
    CU_LAUNCHED("infer_embed");
}
/* K, V (ctx, KVC) rows pos0 .. = the k and v parts of qkv (n, C + 2 KVC), KVC = NKV * (C/NH) */
void cu_infer_kv_store(float *K, float *V, const float *qkv, int pos0, size_t n, int C, int NH,
                       int NKV) {
    if (!n) return;
    cu_enter();
    const size_t KVC = (size_t)NKV * (size_t)(C / NH), W = (size_t)C + 2 * KVC, row = KVC * sizeof(float);
    cu_note(cudaMemcpy2DAsync(K + (size_t)pos0 * KVC, row, qkv + C, W * sizeof(float), row, n,
                              cudaMemcpyDeviceToDevice, cu_stream), "infer_kv_store");
    cu_note(cudaMemcpy2DAsync(V + (size_t)pos0 * KVC, row, qkv + C + KVC, W * sizeof(float), row, n,
                              cudaMemcpyDeviceToDevice, cu_stream), "infer_kv_store");
}

/* ---- predictors ---- */
__global__ void d_fit_observe(float *s0, float *s1, const float *w, size_t n, float d) {
    CU_FOR(i, n) {
        float a = s0[i];
        s1[i] = d * (s1[i] + a);
        s0[i] = d * a + w[i];
    }
}
void cu_fit_observe(float *s0, float *s1, const float *w, size_t n, float d) {
    if (!n) return;
    cu_enter();
    d_fit_observe<<<cu_grid(n), CU_T, 0, cu_stream>>>(s0, s1, w, n, d);
    CU_LAUNCHED("fit_observe");
}
__global__ void d_fit_velocity(float *s1, const float *s0, size_t n, float cw, float ca) {
    CU_FOR(i, n) s1[i] = cw * s1[i] + ca * s0[i];
}
void cu_fit_velocity(float *s1, const float *s0, size_t n, float cw, float ca) {
    if (!n) return;
    cu_enter();
    d_fit_velocity<<<cu_grid(n), CU_T, 0, cu_stream>>>(s1, s0, n, cw, ca);
    CU_LAUNCHED("fit_velocity");
}

/* KIND 0: predict_adam, 1: predict_linear, 2: adam_step_sumsq; partial sums of u^2 per block */
template <int KIND>
__global__ void d_predict(double *red, float *p, const float *m, const float *v, size_t n, float lr,
                          float wd, float b2k, float bc1, float bc2, float eps) {
    __shared__ double sh[32];
    double s = 0.0;
    CU_FOR(i, n) {
        float u;
        if (KIND == 0) {
            float mk = m[i];
            float vk = b2k * v[i] + (1.0f - b2k) * mk * mk;
            u = lr * ((mk / bc1) / (sqrtf(vk / bc2) + eps) + wd * p[i]);
            p[i] -= u;
        } else if (KIND == 1) {
            u = lr * m[i]; /* lr: the scale, m: the velocity */
            p[i] += u;
        } else {
            u = (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps);
        }
        s += (double)u * (double)u;
    }
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) red[1 + blockIdx.x] = s;
}
template <int KIND>
static double predict(float *p, const float *m, const float *v, size_t n, float lr, float wd,
                      float b2k, float bc1, float bc2, float eps) {
    cu_enter();
    d_predict<KIND><<<CU_SUM_BLOCKS, CU_T, 0, cu_stream>>>(cu_red, p, m, v, n, lr, wd, b2k, bc1, bc2, eps);
    CU_LAUNCHED("predict");
    cu_finish_sum(1, 0);
    cu_read_red(1);
    return cu_red_host[0];
}
double cu_predict_adam(float *p, const float *m, const float *v, size_t n, float lr, float wd,
                       float b2k, float bc1, float bc2, float eps) {
    return predict<0>(p, m, v, n, lr, wd, b2k, bc1, bc2, eps);
}
double cu_predict_linear(float *p, const float *vel, size_t n, float scale) {
    return predict<1>(p, vel, NULL, n, scale, 0.0f, 0.0f, 1.0f, 1.0f, 0.0f);
}
double cu_adam_step_sumsq(const float *m, const float *v, size_t n, float bc1, float bc2, float eps) {
    return predict<2>(NULL, m, v, n, 0.0f, 0.0f, 0.0f, bc1, bc2, eps);
}

/* ---- random numbers: the CPU's, made on the host ---- */
static void stage_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind k) {
    cu_note(cudaMemcpyAsync(dst, src, bytes, k, cu_stream), "staging copy");
    cu_note(cudaStreamSynchronize(cu_stream), "staging copy");
}

double cu_add_normal(float *p, size_t n, uint64_t seed, float std) {
    cu_enter();
    hpt_be_note_trip(); /* one per call, as the CPU's (it waits per staged piece) */
    hpt_rng r;
    hpt_rng_seed(&r, seed);
    double s = 0.0;
    for (size_t lo = 0; lo < n; lo += CU_STAGE_FLOATS) { /* one stream in order, piece by piece */
        size_t len = n - lo < CU_STAGE_FLOATS ? n - lo : CU_STAGE_FLOATS;
        stage_copy(cu_stage, p + lo, len * sizeof(float), cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < len; i++) {
            float u = std * hpt_rng_normal(&r);
            cu_stage[i] += u;
            s += (double)u * (double)u;
        }
        stage_copy(p + lo, cu_stage, len * sizeof(float), cudaMemcpyHostToDevice);
    }
    return s;
}

void cu_init_normal(float *x, size_t lo, size_t hi, size_t total, float std, uint64_t key) {
    cu_enter();
    hpt_be_note_trip(); /* one per call, as the CPU's (it waits per staged piece) */
    for (size_t a = lo; a < hi; a += CU_STAGE_FLOATS) { /* values do not depend on the range asked */
        size_t b = hi - a < CU_STAGE_FLOATS ? hi : a + CU_STAGE_FLOATS;
        k_init_normal(cu_stage, a, b, total, std, key);
        stage_copy(x + (a - lo), cu_stage, (b - a) * sizeof(float), cudaMemcpyHostToDevice);
    }
}

/* dropout: the CPU's counter-based mask (kernels/cpu/init.c, splitmix64's finaliser of seed and
 * i against a 24-bit cut) and its one fp32 product: the same bits */
__device__ inline int d_dropout_keep(uint64_t seed, size_t i, uint32_t cut) {
    uint64_t z = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 40) >= cut;
}
__global__ void d_dropout(float *out, const float *in, size_t n, uint32_t cut, float keep, uint64_t seed,
                          int backward) {
    CU_FOR(i, n) {
        if (!backward) out[i] = d_dropout_keep(seed, i, cut) ? in[i] * keep : 0.0f;
        else if (d_dropout_keep(seed, i, cut)) out[i] += in[i] * keep;
    }
}
static void dropout(float *out, const float *in, size_t n, float p, uint64_t seed, int backward) {
    if (!n) return;
    cu_enter();
    d_dropout<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, in, n, (uint32_t)((double)p * 16777216.0),
                                                  1.0f / (1.0f - p), seed, backward);
    CU_LAUNCHED(backward ? "dropout_backward" : "dropout_forward");
}
void cu_dropout_forward(float *y, const float *x, size_t n, float p, uint64_t seed) { dropout(y, x, n, p, seed, 0); }
void cu_dropout_backward(float *dx, const float *dy, size_t n, float p, uint64_t seed) { dropout(dx, dy, n, p, seed, 1); }

__global__ void d_fill(float *x, size_t n, float value) { CU_FOR(i, n) x[i] = value; }
void cu_fill(float *x, size_t n, float value) {
    if (!n) return;
    cu_enter();
    d_fill<<<cu_grid(n), CU_T, 0, cu_stream>>>(x, n, value);
    CU_LAUNCHED("fill");
}
