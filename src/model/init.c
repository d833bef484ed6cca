/* init.c: GPT-2 initialisation: N(0, 0.02) for embeddings and linear weights, N(0, 0.02 /
 * sqrt(2L)) for the residual projections (attention and MLP output), zero biases, unit
 * layernorm weights, zero padding rows of wte.
 * Normals come from chunks of 4096 values, each with its own RNG seeded from (seed, tensor,
 * chunk), filled by Box-Muller on vectors (both outputs used): the chunks are independent,
 * so they are generated in parallel and the result does not depend on the thread count. */
#include "core/core.h"
#include "kernels/cpu/vmath.h"
#include "model/gpt2_int.h"

#include <math.h>
#include <string.h>

#define INIT_CHUNK 4096

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
float cosf(float) __attribute__((simd("notinbranch")));
float sinf(float) __attribute__((simd("notinbranch")));
#endif

/* x[0..n) = std * N(0, 1), n <= INIT_CHUNK, from its own stream. */
static void normal_chunk(float *x, size_t n, float std, uint64_t stream) {
    float u1[INIT_CHUNK / 2], u2[INIT_CHUNK / 2];
    hpt_rng rng;
    hpt_rng_seed(&rng, stream);
    size_t half = (n + 1) / 2;
    for (size_t i = 0; i < half; i++) {
        u1[i] = 1.0f - hpt_rng_uniform(&rng); /* (0, 1]: log is finite */
        u2[i] = hpt_rng_uniform(&rng);
    }
#pragma omp simd
    for (size_t i = 0; i < half; i++) {
        float r = std * sqrtf(-2.0f * logf(u1[i]));
        float a = 6.2831853071795864f * u2[i];
        u1[i] = r * cosf(a);
        u2[i] = r * sinf(a);
    }
    for (size_t i = 0; i < n; i++) x[i] = i % 2 ? u2[i / 2] : u1[i / 2];
}

void hpt_gpt2_init_random(hpt_gpt2 *m, uint64_t seed) {
    const hpt_gpt2_config *c = &m->cfg;
    hpt_gpt2_tensor t[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(c, t);
    float resid_std = 0.02f / sqrtf(2.0f * (float)c->L);
    for (int i = 0; i < HPT_GPT2_NUM_TENSORS; i++) {
        float *x = m->params + t[i].offset;
        const char *n = t[i].name;
        if (!strcmp(n, "ln1w") || !strcmp(n, "ln2w") || !strcmp(n, "lnfw")) {
            for (size_t j = 0; j < t[i].numel; j++) x[j] = 1.0f;
        } else if (!t[i].is_matrix) {
            memset(x, 0, t[i].numel * sizeof(float)); /* biases */
        } else {
            float std = (!strcmp(n, "attprojw") || !strcmp(n, "fcprojw")) ? resid_std : 0.02f;
            size_t n_init = t[i].numel;
            if (!strcmp(n, "wte")) n_init = (size_t)c->V * c->C; /* padding rows stay 0 */
            int64_t chunks = (int64_t)((n_init + INIT_CHUNK - 1) / INIT_CHUNK);
#pragma omp parallel for schedule(static) if (n_init >= 65536)
            for (int64_t k = 0; k < chunks; k++) {
                size_t lo = (size_t)k * INIT_CHUNK;
                size_t len = n_init - lo < INIT_CHUNK ? n_init - lo : INIT_CHUNK;
                uint64_t stream = seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i << 48) ^ (uint64_t)k;
                normal_chunk(x + lo, len, std, stream);
            }
            memset(x + n_init, 0, (t[i].numel - n_init) * sizeof(float));
        }
    }
}
