/* pack.c: packed examples (docs/packing.md). The trainer gives the model, with a batch, each
 * token's position in its example; the model keeps a device copy (activations category, B*T
 * int32: the estimator counts it) that the ops' context carries (hpt_arch_ctx.pos): GPT-2's
 * encoder reads wpe there, RoPE rotates there, and attention masks every key outside the
 * query's example. */
#include "core/core.h"
#include "model/gpt2_int.h"
#include "model/runner_int.h"

void model_pos_free(hpt_model *m) {
    if (!m->pos) return;
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, m->pos,
                (size_t)m->pos_B * (size_t)m->pos_T * sizeof(int32_t));
    m->pos = NULL;
    m->pos_B = m->pos_T = 0;
}

hpt_status hpt_model_set_positions(hpt_model *m, const int32_t *pos, int B, int T) {
    if (!pos) {
        model_pos_free(m);
        return HPT_OK;
    }
    if (B < 1 || T < 1 || T > m->cfg.maxT)
        return hpt_fail(HPT_ERR_INVALID, "positions for batch %d and sequence %d (maxT %d)", B, T,
                        m->cfg.maxT);
    /* each example a run of positions 0, 1, 2, ... within its row */
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const int32_t p = pos[(size_t)b * T + t];
            if (t == 0 ? p != 0 : p != 0 && p != pos[(size_t)b * T + t - 1] + 1)
                return hpt_fail(HPT_ERR_INVALID, "position %d at row %d, token %d: an example's "
                                "positions run 0, 1, 2, ... from its first token", p, b, t);
        }
    if (!m->pos || m->pos_B != B || m->pos_T != T) {
        model_pos_free(m);
        HPT_CHECK(m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS,
                               (size_t)B * (size_t)T * sizeof(int32_t), (void **)&m->pos));
        m->pos_B = B;
        m->pos_T = T;
    }
    m->be->copy(m->pos, pos, (size_t)B * T * sizeof(int32_t), HPT_COPY_H2D);
    return HPT_OK;
}
