/* init.c: GPT-2 initialisation: N(0, 0.02) for embeddings and linear weights, N(0, 0.02 /
 * sqrt(2L)) for the residual projections (attention and MLP output), zero biases, unit
 * layernorm weights, zero padding rows of wte.
 * Normals come from chunks of 4096 values, each with its own RNG seeded from (seed, tensor,
 * chunk), filled by Box-Muller on vectors (both outputs used): the chunks are independent,
 * so they are generated in parallel and the result does not depend on the thread count, nor
 * on the ranges asked for: with the offload engine each block's slices are generated as ranges
 * of their tensors, the same values as the flat buffer gets without it. */
#include "core/core.h"
#include "kernels/cpu/vmath.h"
#include "model/gpt2_int.h"
#include "offload/engine.h"

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

/* Values [lo, lo + n) of tensor i (of t) into x: the same values whichever range is asked,
 * since each chunk's stream depends only on (seed, tensor, chunk). */
static void init_range(const hpt_gpt2_config *c, const hpt_gpt2_tensor *t, int i, uint64_t seed,
                       float *x, size_t lo, size_t n) {
    const char *name = t[i].name;
    if (!strcmp(name, "ln1w") || !strcmp(name, "ln2w") || !strcmp(name, "lnfw")) {
        for (size_t j = 0; j < n; j++) x[j] = 1.0f;
        return;
    }
    if (!t[i].is_matrix) {
        memset(x, 0, n * sizeof(float)); /* biases */
        return;
    }
    float std = (!strcmp(name, "attprojw") || !strcmp(name, "fcprojw"))
                    ? 0.02f / sqrtf(2.0f * (float)c->L) : 0.02f;
    size_t n_init = t[i].numel;
    if (!strcmp(name, "wte")) n_init = (size_t)c->V * c->C; /* padding rows stay 0 */
    size_t hi = lo + n, gen_hi = HPT_MIN(hi, n_init);
    if (hi > HPT_MAX(lo, n_init)) memset(x + (HPT_MAX(lo, n_init) - lo), 0,
                                         (hi - HPT_MAX(lo, n_init)) * sizeof(float));
    if (gen_hi <= lo) return;
    int64_t k0 = (int64_t)(lo / INIT_CHUNK), k1 = (int64_t)((gen_hi - 1) / INIT_CHUNK);
#pragma omp parallel for schedule(static) if (gen_hi - lo >= 65536)
    for (int64_t k = k0; k <= k1; k++) {
        size_t c0 = (size_t)k * INIT_CHUNK, len = HPT_MIN((size_t)INIT_CHUNK, n_init - c0);
        uint64_t stream = seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i << 48) ^ (uint64_t)k;
        size_t a = HPT_MAX(c0, lo), b = HPT_MIN(c0 + len, gen_hi);
        if (a == c0 && b == c0 + len) {
            normal_chunk(x + (c0 - lo), len, std, stream);
        } else { /* a chunk cut by the range: generate it whole, keep the overlap */
            float tmp[INIT_CHUNK];
            normal_chunk(tmp, len, std, stream);
            memcpy(x + (a - lo), tmp + (a - c0), (b - a) * sizeof(float));
        }
    }
}

hpt_status hpt_gpt2_init_random(hpt_gpt2 *m, uint64_t seed) {
    const hpt_gpt2_config *c = &m->cfg;
    hpt_gpt2_tensor t[HPT_GPT2_NUM_TENSORS];
    hpt_gpt2_tensors(c, t);
    for (int i = 0; i < HPT_GPT2_NUM_TENSORS; i++) {
        if (!m->eng) {
            init_range(c, t, i, seed, m->params + t[i].offset, 0, t[i].numel);
        } else if (m->emb == HPT_EMB_BF16 && i < 2) { /* through the chunk scratch, rounded */
            size_t piece = (size_t)m->Vc * (size_t)c->C;
            for (size_t lo = 0; lo < t[i].numel; lo += piece) {
                size_t n = HPT_MIN(piece, t[i].numel - lo);
                init_range(c, t, i, seed, m->emb_rows, lo, n);
                emb_put(m, i, lo, m->emb_rows, n);
            }
        } else if (!gpt2_is_block_tensor(i)) {
            init_range(c, t, i, seed, gpt2_nonblock_param(m, i).f32, 0, t[i].numel);
        }
    }
    if (!m->eng) return HPT_OK;
    /* block by block into the engine: each block's slices are ranges of the block tensors */
    for (int l = 0; l < c->L; l++) {
        float *dst;
        int in_place;
        HPT_CHECK(eng_block_dest(m->eng, EB_P, l, &dst, &in_place));
        for (int i = 0; i < GPT2_BLOCK_SLICES; i++) {
            int ti = GPT2_FIRST_BLOCK_TENSOR + i;
            size_t sn = t[ti].numel / (size_t)c->L;
            init_range(c, t, ti, seed, dst + eng_slice_offset(m->eng, i), (size_t)l * sn, sn);
        }
        if (!in_place) HPT_CHECK(eng_store_block(m->eng, EB_P, l, dst));
    }
    return HPT_OK;
}
