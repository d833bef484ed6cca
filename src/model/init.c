/* init.c: initialisation over the tensor table. GPT-2: N(0, 0.02) for embeddings and linear
 * weights, N(0, 0.02 / sqrt(2L)) for the residual projections (attention and MLP output);
 * llama and Qwen (Hugging Face's): N(0, init_range) for every linear weight and embedding. All: zero
 * biases, unit norm weights, zero padding rows of wte (and of an untied lm_head).
 * Normals come from chunks of 4096 values, each with its own RNG seeded from (seed, tensor,
 * chunk), filled by Box-Muller on vectors (both outputs used; the backend's init_normal): the
 * chunks are independent, so they are generated in parallel and the result does not depend
 * on the thread count, nor on the ranges asked for: with a block store (model/blocks.h; the
 * offload engine's) each block's slices are generated as ranges of their tensors, the same
 * values as the flat buffer gets without it. */
#include "core/core.h"
#include "kernels/backend.h"
#include "model/blocks.h"
#include "model/gpt2_int.h"

#include <math.h>
#include <string.h>

/* Values [lo, lo + n) of tensor i (of the table t) into x: the same values whichever range is
 * asked, since each chunk's stream depends only on (seed, tensor, chunk). */
static void init_range(const hpt_backend *be, const hpt_model_config *c, const hpt_tensor_table *t,
                       int i, uint64_t seed, float *x, size_t lo, size_t n) {
    const char *name = t->t[i].name;
    if (!strcmp(name, "ln1w") || !strcmp(name, "ln2w") || !strcmp(name, "lnfw") ||
        !strcmp(name, "qknw")) { /* norm weights (qknw: Qwen3's per-head q and k norms) */
        be->fill(x, n, c->arch == HPT_ARCH_GEMMA3 ? 0.0f : 1.0f); /* Gemma 3's scale 1 + w */
        return;
    }
    if (!t->t[i].is_matrix) {
        be->memset(x, 0, n * sizeof(float)); /* biases */
        return;
    }
    /* GPT-2: N(0, 0.02), the residual projections N(0, 0.02 / sqrt(2L)); others (Hugging
     * Face's _init_weights): every linear weight and embedding N(0, initializer_range) */
    float std = c->arch != HPT_ARCH_GPT2 ? c->init_range
              : (!strcmp(name, "attprojw") || !strcmp(name, "fcprojw"))
                    ? 0.02f / sqrtf(2.0f * (float)c->L) : 0.02f;
    size_t numel = hpt_tensor_numel(&t->t[i]), n_init = numel;
    if (!strcmp(name, "wte") || !strcmp(name, "lm_head"))
        n_init = (size_t)c->V * c->C; /* padding rows stay 0 */
    size_t hi = lo + n, gen_hi = HPT_MIN(hi, n_init);
    if (hi > HPT_MAX(lo, n_init)) be->memset(x + (HPT_MAX(lo, n_init) - lo), 0,
                                             (hi - HPT_MAX(lo, n_init)) * sizeof(float));
    be->init_normal(x, lo, gen_hi, n_init, std, seed * 0x9E3779B97F4A7C15ull ^ ((uint64_t)i << 48));
}

hpt_status hpt_model_init_random(hpt_model *m, uint64_t seed) {
    const hpt_model_config *c = &m->cfg;
    const hpt_tensor_table *t = &m->tab;
    const hpt_backend *be = m->be;
    for (int i = 0; i < t->n; i++) {
        size_t numel = hpt_tensor_numel(&t->t[i]);
        int block = t->t[i].layer == HPT_LAYER_STACKED;
        if (!m->blocks) {
            init_range(be, c, t, i, seed, m->params + hpt_table_offset(t, i), 0, numel);
        } else if (emb_stored(m, i)) { /* through the chunk scratch, rounded */
            size_t piece = (size_t)m->Vc * (size_t)c->C;
            for (size_t lo = 0; lo < numel; lo += piece) {
                size_t n = HPT_MIN(piece, numel - lo);
                init_range(be, c, t, i, seed, m->emb_rows, lo, n);
                emb_put(m, i, lo, m->emb_rows, n);
            }
        } else if (!block) {
            init_range(be, c, t, i, seed, model_nonblock_param(m, i).f32, 0, numel);
        }
    }
    const hpt_block_store *bs = m->blocks;
    if (!bs) return HPT_OK;
    /* block by block into the store: each block's slices are ranges of the block tensors,
     * packed back to back (blocks.h) */
    for (int l = 0; l < c->L; l++) {
        float *dst;
        int in_place;
        HPT_CHECK(bs->block_dest(bs->ctx, EB_P, l, &dst, &in_place));
        size_t off = 0;
        for (int s = 0; s < t->n_slices; s++) {
            int ti = hpt_table_slice_tensor(t, s);
            size_t sn = hpt_tensor_slice_numel(&t->t[ti], t->L);
            init_range(be, c, t, ti, seed, dst + off, (size_t)l * sn, sn);
            off += sn;
        }
        if (!in_place) HPT_CHECK(bs->store_block(bs->ctx, EB_P, l, dst));
    }
    return HPT_OK;
}
