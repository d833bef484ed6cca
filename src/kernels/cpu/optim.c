/* optim.c: the element loops of AdamW (8-bit capable), Lion, SGD with momentum and Adam-mini.
 * Each kernel walks its tensor in blocks of K_Q8_BLOCK values, one OpenMP static partition of
 * blocks: a block's states are made fp32 (in place, or dequantised into a stack buffer),
 * updated in fp32, used for the parameter update, and requantised with the block's new absmax
 * (bitsandbytes' order). AdamW's 8-bit second moment is stored as sqrt(v) on the unsigned map,
 * whose smallest code is positive (quant.c; docs/optimizers.md, "the zero-point problem").
 * Invariants: blocks are independent, so the result does not depend on the thread count; no v
 * of a block with a nonzero absmax dequantises to 0; k_adamw (pointwise.c) stays the fp32 AdamW
 * path that the PyTorch reference checks. */
#include "kernels/cpu/bf16.h"
#include "kernels/cpu/q8.h"

#include <math.h>
#include <omp.h>

#define NBLOCKS(n) (((n) + K_Q8_BLOCK - 1) / K_Q8_BLOCK)
#define MINI_ROWS 8 /* Adam-mini: second-moment blocks summed side by side */
#define BLOCK_LEN(n, lo) ((int)((n) - (lo) < K_Q8_BLOCK ? (n) - (lo) : K_Q8_BLOCK))

void k_adamw_q(k_param p, const float *g, k_state m, k_state v, size_t n, float lr, float beta1,
               float beta2, float eps, float wd, float grad_scale, int64_t t) {
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    float step = lr / bc1, rbc2 = 1.0f / sqrtf(bc2), decay = 1.0f - lr * wd;
    size_t nb = NBLOCKS(n);
    k_q8_planes plm, plv;
    const k_q8_planes *pm = state_planes(&m, &plm), *pv = state_planes(&v, &plv);
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * K_Q8_BLOCK;
        int len = BLOCK_LEN(n, lo);
        float ms[K_Q8_BLOCK], vs[K_Q8_BLOCK], ps[K_Q8_BLOCK];
        float *mb = state_block(&m, lo, len, ms, pm), *vb = state_block(&v, lo, len, vs, pv);
        float *pb = param_block(&p, lo, len, ps);
        const float *gb = g + lo;
        int root = v.f32 == NULL; /* 8-bit: the codes hold sqrt(v) (top of the file) */
#pragma omp simd
        for (int j = 0; j < len; j++) {
            float gi = gb[j] * grad_scale;
            float mi = beta1 * mb[j] + (1.0f - beta1) * gi;
            float vi = beta2 * (root ? vb[j] * vb[j] : vb[j]) + (1.0f - beta2) * gi * gi;
            float ri = sqrtf(vi);
            mb[j] = mi;
            vb[j] = root ? ri : vi;
            pb[j] = pb[j] * decay - step * mi / (ri * rbc2 + eps);
        }
        state_commit(&m, lo, len, mb);
        state_commit(&v, lo, len, vb);
        param_commit(&p, lo, len, pb);
    }
}

void k_lion(k_param p, const float *g, k_state m, size_t n, float lr, float beta1, float beta2,
            float wd, float grad_scale) {
    float decay = 1.0f - lr * wd;
    size_t nb = NBLOCKS(n);
    k_q8_planes plm;
    const k_q8_planes *pm = state_planes(&m, &plm);
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * K_Q8_BLOCK;
        int len = BLOCK_LEN(n, lo);
        float ms[K_Q8_BLOCK], ps[K_Q8_BLOCK];
        float *mb = state_block(&m, lo, len, ms, pm), *pb = param_block(&p, lo, len, ps);
        const float *gb = g + lo;
#pragma omp simd
        for (int j = 0; j < len; j++) {
            float gi = gb[j] * grad_scale;
            float c = beta1 * mb[j] + (1.0f - beta1) * gi;
            float sgn = (float)((c > 0.0f) - (c < 0.0f)); /* sign(0) = 0, as torch.sign */
            pb[j] = pb[j] * decay - lr * sgn;
            mb[j] = beta2 * mb[j] + (1.0f - beta2) * gi;
        }
        state_commit(&m, lo, len, mb);
        param_commit(&p, lo, len, pb);
    }
}

void k_sgd(k_param p, const float *g, k_state m, size_t n, float lr, float momentum, float wd,
           float grad_scale) {
    size_t nb = NBLOCKS(n);
    k_q8_planes plm;
    const k_q8_planes *pm = state_planes(&m, &plm);
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * K_Q8_BLOCK;
        int len = BLOCK_LEN(n, lo);
        float ms[K_Q8_BLOCK], ps[K_Q8_BLOCK];
        float *mb = state_block(&m, lo, len, ms, pm), *pb = param_block(&p, lo, len, ps);
        const float *gb = g + lo;
#pragma omp simd
        for (int j = 0; j < len; j++) {
            float d = gb[j] * grad_scale + wd * pb[j];
            float buf = momentum * mb[j] + d; /* PyTorch's first step buf = d: 0*momentum + d */
            mb[j] = buf;
            pb[j] = pb[j] - lr * buf;
        }
        state_commit(&m, lo, len, mb);
        param_commit(&p, lo, len, pb);
    }
}

void k_adam_mini(k_param p, const float *g, k_state m, float *v, size_t n, size_t block, float lr,
                 float beta1, float beta2, float eps, float wd, float grad_scale, int64_t t) {
    /* v (ceil(n / block)): a last partial block of n % block values is a block of its own */
    size_t nv = (n + block - 1) / block, ng = (nv + MINI_ROWS - 1) / MINI_ROWS;
    /* pass 1: each block's mean of g^2, summed in order in double; MINI_ROWS whole blocks side
     * by side (independent sums, so the adds overlap instead of waiting on each other) */
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (size_t q = 0; q < ng; q++) {
        size_t r0 = q * MINI_ROWS, nr = nv - r0 < MINI_ROWS ? nv - r0 : MINI_ROWS;
        double s[MINI_ROWS] = {0};
        if (nr == MINI_ROWS && (r0 + MINI_ROWS) * block <= n) {
            for (size_t j = 0; j < block; j++)
                for (int k = 0; k < MINI_ROWS; k++) {
                    double gi = (double)(g[(r0 + (size_t)k) * block + j] * grad_scale);
                    s[k] += gi * gi;
                }
        } else {
            for (size_t k = 0; k < nr; k++)
                for (size_t j = 0; j < block && (r0 + k) * block + j < n; j++) {
                    double gi = (double)(g[(r0 + k) * block + j] * grad_scale);
                    s[k] += gi * gi;
                }
        }
        for (size_t k = 0; k < nr; k++) {
            size_t len = n - (r0 + k) * block < block ? n - (r0 + k) * block : block;
            v[r0 + k] = beta2 * v[r0 + k] + (1.0f - beta2) * (float)(s[k] / (double)len);
        }
    }
    float bc1 = 1.0f - powf(beta1, (float)t), bc2 = 1.0f - powf(beta2, (float)t);
    float step = lr / bc1, rbc2 = 1.0f / sqrtf(bc2), decay = 1.0f - lr * wd;
    size_t nb = NBLOCKS(n);
    k_q8_planes plm;
    const k_q8_planes *pm = state_planes(&m, &plm);
    /* pass 2: the first moment and the parameters, by quantisation block; the denominator
     * sqrt(v) * rbc2 + eps once per run of one Adam-mini block (the same value each element
     * computed before) */
#pragma omp parallel for schedule(static) if (n >= K_PAR_MIN)
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * K_Q8_BLOCK;
        int len = BLOCK_LEN(n, lo);
        float ms[K_Q8_BLOCK], ps[K_Q8_BLOCK];
        float *mb = state_block(&m, lo, len, ms, pm), *pb = param_block(&p, lo, len, ps);
        const float *gb = g + lo;
        for (int j0 = 0; j0 < len;) {
            size_t r = (lo + (size_t)j0) / block;
            int j1 = (int)((r + 1) * block - lo < (size_t)len ? (r + 1) * block - lo : (size_t)len);
            float den = sqrtf(v[r]) * rbc2 + eps;
#pragma omp simd
            for (int j = j0; j < j1; j++) {
                float gi = gb[j] * grad_scale;
                float mi = beta1 * mb[j] + (1.0f - beta1) * gi;
                mb[j] = mi;
                pb[j] = pb[j] * decay - step * mi / den;
            }
            j0 = j1;
        }
        state_commit(&m, lo, len, mb);
        param_commit(&p, lo, len, pb);
    }
}
