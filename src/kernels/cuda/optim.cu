/* optim.cu: the optimizer updates (AdamW, Lion, SGD with momentum, Adam-mini) with fp32 or
 * 8-bit block-wise states and fp32 or bf16 parameters, and the 8-bit codec, on the GPU.
 * The CPU's rules exactly (kernels/cpu/optim.c, q8.h, bf16.h): one block of HPT_Q8_BLOCK threads
 * per 256-value quantisation block; the block's states are made fp32 (dequantised with the
 * same dynamic map, which lives in device memory, copied to shared memory per block), updated
 * in fp32, used for the parameter update and requantised with the block's new absmax (a block
 * maximum: exact in any order); the nearest code is the CPU's binary search, or its fast table
 * (a device copy of the CPU's, hpt_backend.q8_lut_of), which give the same code. bf16 parameters
 * round back stochastically with the CPU's random bits (splitmix64 of seed and the element's
 * index in the model) or with Kahan compensation. Scalars derived from the step (bias
 * corrections) are computed on the host as the CPU does, so elementwise results differ from the
 * CPU's only where the compilers' fp32 arithmetic does (nvcc builds this without FMA contraction,
 * as the CPU's ISO C build). */
#include "kernels/cuda/cu_common.cuh"
#include "kernels/q8_codec.h"

#include <math.h>
#include <string.h>

#define QB HPT_Q8_BLOCK

static hpt_be_state dev_state(hpt_be_state s); /* the state with a map the device reads */

/* ---- the codec (kernels/cpu/q8.h's rules) ---- */
__device__ inline uint8_t q8_encode_dev(float x, const float *map) { return hpt_q8_encode(x, map); }
__device__ inline uint8_t q8_encode_lut_dev(float x, const float *map, const int32_t *lut) {
    return hpt_q8_encode_lut(x, map, lut);
}

/* One state of a block: element j of the block at lo (threads past len hold 0). */
__device__ inline float state_load(const hpt_be_state &s, const float *map, size_t i, size_t blk, bool ok) {
    if (!ok) return 0.0f;
    return s.f32 ? s.f32[i] : map[s.codes[i]] * s.absmax[blk];
}
/* Writes back (requantises when 8-bit: every thread of the block calls it). */
__device__ inline void state_store(const hpt_be_state &s, const float *map, size_t i, size_t blk,
                                   bool ok, float val, float *red) {
    if (s.f32) {
        if (ok) s.f32[i] = val;
        return;
    }
    float mx = cu_block_max(ok ? fabsf(val) : 0.0f, red, 0.0f);
    float inv = mx > 0.0f ? 1.0f / mx : 0.0f;
    if (ok) s.codes[i] = s.lut ? q8_encode_lut_dev(val * inv, map, s.lut) : q8_encode_dev(val * inv, map);
    if (threadIdx.x == 0) s.absmax[blk] = mx;
}
__device__ inline float param_load(const hpt_be_param &p, size_t i) {
    if (p.f32) return p.f32[i];
    return cu_bf16_widen(p.bf16[i]) + (p.comp ? cu_bf16_widen(p.comp[i]) : 0.0f);
}
__device__ inline void param_store(const hpt_be_param &p, size_t i, float v) {
    if (p.f32) {
        p.f32[i] = v;
    } else if (p.comp) {
        uint16_t h = cu_bf16_rne(v);
        p.bf16[i] = h;
        p.comp[i] = cu_bf16_rne(v - cu_bf16_widen(h));
    } else {
        p.bf16[i] = cu_bf16_sr(v, cu_bf16_noise(p.seed, p.base + i));
    }
}
/* the maps of up to two states into shared memory */
__device__ inline void maps_load(float *mm, float *mv, const hpt_be_state &m, const hpt_be_state *v) {
    for (int k = threadIdx.x; k < 256; k += blockDim.x) {
        if (!m.f32) mm[k] = m.map[k];
        if (v && !v->f32) mv[k] = v->map[k];
    }
    __syncthreads();
}

typedef enum { U_ADAMW, U_LION, U_SGD, U_MINI } upd_kind;
typedef struct {
    float lr, beta1, beta2, eps, wd, gs, step, rbc2, decay;
    const float *vmini; /* Adam-mini: one second moment per `block` values */
    size_t block;
} upd_args;

/* one block of QB threads per quantisation block */
template <int KIND>
__global__ void d_update(hpt_be_param p, const float *g, hpt_be_state m, hpt_be_state v, size_t n, upd_args a) {
    __shared__ float mm[256], mv[256], red[32];
    maps_load(mm, mv, m, KIND == U_ADAMW ? &v : NULL);
    const size_t blk = blockIdx.x, i = blk * QB + threadIdx.x;
    const bool ok = i < n;
    float mi = state_load(m, mm, i, blk, ok);
    float vi = KIND == U_ADAMW ? state_load(v, mv, i, blk, ok) : 0.0f;
    float pi = ok ? param_load(p, i) : 0.0f;
    float gi = ok ? g[i] * a.gs : 0.0f;
    if (KIND == U_ADAMW) {
        const bool root = v.f32 == NULL; /* 8-bit: the codes hold sqrt(v) */
        float mn = a.beta1 * mi + (1.0f - a.beta1) * gi;
        float vn = a.beta2 * (root ? vi * vi : vi) + (1.0f - a.beta2) * gi * gi;
        float rn = sqrtf(vn);
        mi = mn;
        vi = root ? rn : vn;
        pi = pi * a.decay - a.step * mn / (rn * a.rbc2 + a.eps);
    } else if (KIND == U_LION) {
        float c = a.beta1 * mi + (1.0f - a.beta1) * gi;
        float sgn = (float)((c > 0.0f) - (c < 0.0f));
        pi = pi * a.decay - a.lr * sgn;
        mi = a.beta2 * mi + (1.0f - a.beta2) * gi;
    } else if (KIND == U_SGD) {
        float d = gi + a.wd * pi;
        float buf = a.beta1 * mi + d;
        mi = buf;
        pi = pi - a.lr * buf;
    } else {
        float mn = a.beta1 * mi + (1.0f - a.beta1) * gi;
        mi = mn;
        float vr = ok ? a.vmini[i / a.block] : 1.0f;
        pi = pi * a.decay - a.step * mn / (sqrtf(vr) * a.rbc2 + a.eps);
    }
    state_store(m, mm, i, blk, ok, mi, red);
    if (KIND == U_ADAMW) state_store(v, mv, i, blk, ok, vi, red);
    if (ok) param_store(p, i, pi);
}

static upd_args bias_args(float lr, float beta1, float beta2, float eps, float wd, float gs, int64_t t) {
    upd_args a = {};
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    a.lr = lr, a.beta1 = beta1, a.beta2 = beta2, a.eps = eps, a.wd = wd, a.gs = gs;
    a.step = lr / bc1, a.rbc2 = 1.0f / sqrtf(bc2), a.decay = 1.0f - lr * wd;
    return a;
}
static unsigned nblocks(size_t n) { return (unsigned)((n + QB - 1) / QB); }

void cu_adamw_q(hpt_be_param p, const float *g, hpt_be_state m, hpt_be_state v, size_t n,
                float lr, float beta1, float beta2, float eps, float wd, float grad_scale,
                int64_t t) {
    if (!n) return;
    cu_enter();
    m = dev_state(m), v = dev_state(v);
    d_update<U_ADAMW><<<nblocks(n), QB, 0, cu_stream>>>(p, g, m, v, n,
                                                       bias_args(lr, beta1, beta2, eps, wd, grad_scale, t));
    CU_LAUNCHED("adamw");
}

void cu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
              float beta2, float eps, float wd, float grad_scale, int64_t t) {
    hpt_be_state sm = {}, sv = {};
    sm.f32 = m, sv.f32 = v;
    cu_adamw_q(hpt_be_param_f32(p), g, sm, sv, n, lr, beta1, beta2, eps, wd, grad_scale, t);
}

void cu_lion(hpt_be_param p, const float *g, hpt_be_state m, size_t n, float lr, float beta1,
             float beta2, float wd, float grad_scale) {
    if (!n) return;
    cu_enter();
    upd_args a = {};
    a.lr = lr, a.beta1 = beta1, a.beta2 = beta2, a.wd = wd, a.gs = grad_scale, a.decay = 1.0f - lr * wd;
    m = dev_state(m);
    d_update<U_LION><<<nblocks(n), QB, 0, cu_stream>>>(p, g, m, m, n, a);
    CU_LAUNCHED("lion");
}

void cu_sgd(hpt_be_param p, const float *g, hpt_be_state m, size_t n, float lr, float momentum,
            float wd, float grad_scale) {
    if (!n) return;
    cu_enter();
    upd_args a = {};
    a.lr = lr, a.beta1 = momentum, a.wd = wd, a.gs = grad_scale;
    m = dev_state(m);
    d_update<U_SGD><<<nblocks(n), QB, 0, cu_stream>>>(p, g, m, m, n, a);
    CU_LAUNCHED("sgd");
}

/* Adam-mini's pass 1: one thread per row of `block` values (the last row n % block values when
 * that is not 0), its mean of g^2 in double in order; grid-stride, as cu_grid caps the grid */
__global__ void d_mini_v(float *v, const float *g, size_t n, size_t nv, size_t block, float beta2,
                         float gs) {
    CU_FOR(r, nv) {
        const float *gr = g + r * block;
        const size_t len = n - r * block < block ? n - r * block : block;
        double s = 0.0;
        for (size_t j = 0; j < len; j++) {
            double gi = (double)(gr[j] * gs);
            s += gi * gi;
        }
        v[r] = beta2 * v[r] + (1.0f - beta2) * (float)(s / (double)len);
    }
}

void cu_adam_mini(hpt_be_param p, const float *g, hpt_be_state m, float *v, size_t n,
                  size_t block, float lr, float beta1, float beta2, float eps, float wd,
                  float grad_scale, int64_t t) {
    if (!n || !block) return;
    cu_enter();
    size_t nv = (n + block - 1) / block; /* v's entries: a partial last block is one */
    d_mini_v<<<cu_grid(nv), CU_T, 0, cu_stream>>>(v, g, n, nv, block, beta2, grad_scale);
    CU_LAUNCHED("adam_mini v");
    upd_args a = bias_args(lr, beta1, beta2, eps, wd, grad_scale, t);
    a.vmini = v, a.block = block;
    m = dev_state(m);
    d_update<U_MINI><<<nblocks(n), QB, 0, cu_stream>>>(p, g, m, m, n, a);
    CU_LAUNCHED("adam_mini");
}

/* ---- maps, tables, quantisation ---- */
void cu_q8_map(float map[256], int is_signed) { k_q8_map(map, is_signed); } /* host data */

static int32_t *g_lut_dev[2];
/* The two maps (q8_map's host data) and their device copies, made with the tables at the
 * backend's start: an op given a map in pageable host memory (the optimizer keeps its maps in
 * its own object, as on the CPU) reads the device copy of the same values (cu_dev_map). */
static float g_map_host[2][256];
static float *g_map_dev[2];
const int32_t *cu_q8_lut_of(int is_signed) {
    int k = is_signed ? 1 : 0;
    if (!g_lut_dev[k]) { /* once per process, at the backend's start: a fixed 257 KiB */
        cu_enter();
        int32_t *d = NULL;
        float *dm = NULL;
        k_q8_map(g_map_host[k], k);
        cudaError_t e = cudaMalloc((void **)&dm, 256 * sizeof(float));
        if (e == cudaSuccess) e = cudaMemcpy(dm, g_map_host[k], 256 * sizeof(float), cudaMemcpyHostToDevice);
        if (e == cudaSuccess) g_map_dev[k] = dm;
        if (e == cudaSuccess) e = cudaMalloc((void **)&d, HPT_Q8_LUT_SIZE * sizeof(int32_t));
        if (e == cudaSuccess)
            e = cudaMemcpy(d, k_q8_lut_of(is_signed), HPT_Q8_LUT_SIZE * sizeof(int32_t), cudaMemcpyHostToDevice);
        cu_note(e, "q8_lut_of");
        if (e != cudaSuccess) return NULL; /* NULL: the binary search, the same codes */
        g_lut_dev[k] = d;
    }
    return g_lut_dev[k];
}
void cu_q8_release(void) {
    for (int k = 0; k < 2; k++) {
        if (g_lut_dev[k]) cudaFree(g_lut_dev[k]);
        if (g_map_dev[k]) cudaFree(g_map_dev[k]);
        g_lut_dev[k] = NULL;
        g_map_dev[k] = NULL;
    }
}

const float *cu_dev_map(const float *map) {
    if (!map) return map;
    cudaPointerAttributes at;
    memset(&at, 0, sizeof at);
    if (cudaPointerGetAttributes(&at, map) != cudaSuccess) (void)cudaGetLastError();
    else if (at.type != cudaMemoryTypeUnregistered) return map; /* device, managed or pinned */
    for (int k = 0; k < 2; k++)
        if (g_map_dev[k] && !memcmp(map, g_map_host[k], sizeof g_map_host[k])) return g_map_dev[k];
    cu_note(cudaErrorInvalidValue, "an 8-bit state's map in pageable host memory that is not "
            "hpt_backend.q8_map's");
    return map;
}
static hpt_be_state dev_state(hpt_be_state s) {
    if (!s.f32) s.map = cu_dev_map(s.map);
    return s;
}

__global__ void d_q8_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, const float *map) {
    __shared__ float mm[256], red[32];
    for (int k = threadIdx.x; k < 256; k += blockDim.x) mm[k] = map[k];
    __syncthreads();
    const size_t blk = blockIdx.x, i = blk * QB + threadIdx.x;
    const bool ok = i < n;
    hpt_be_state s = {};
    s.codes = codes, s.absmax = absmax, s.map = map;
    state_store(s, mm, i, blk, ok, ok ? x[i] : 0.0f, red);
}
void cu_q8_quantize(uint8_t *codes, float *absmax, const float *x, size_t n, const float *map) {
    if (!n) return;
    cu_enter();
    d_q8_quantize<<<nblocks(n), QB, 0, cu_stream>>>(codes, absmax, x, n, cu_dev_map(map));
    CU_LAUNCHED("q8_quantize");
}

__global__ void d_q8_dequantize(float *x, const uint8_t *codes, const float *absmax, size_t n, const float *map) {
    CU_FOR(i, n) x[i] = map[codes[i]] * absmax[i / QB];
}
void cu_q8_dequantize(float *x, const uint8_t *codes, const float *absmax, size_t n, const float *map) {
    if (!n) return;
    cu_enter();
    d_q8_dequantize<<<cu_grid(n), CU_T, 0, cu_stream>>>(x, codes, absmax, n, cu_dev_map(map));
    CU_LAUNCHED("q8_dequantize");
}
