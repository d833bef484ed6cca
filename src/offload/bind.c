/* bind.c: a GPT-2 model whose blocks live in the offload engine. The model is created with its
 * non-block tensors only (model_create_unbound), the engine with the model's packed block
 * layout, and the engine is bound to the model as its block store (model/blocks.h); the model
 * then owns the engine (hpt_model_free frees it) and keeps it as m->eng for the modules above.
 * Allocation order (the profiler's events): the model's parameters, gradients and embedding
 * buffers, then the engine's. Without an active offload this is hpt_model_create_config. Loading into
 * such a model is io's (hpt_model_load_offload): the engine calls nothing above it. */
#include "core/core.h"
#include "model/blocks.h"
#include "model/model.h"
#include "offload/engine.h"

hpt_status hpt_model_create_config_offload(hpt_mem *mem, const hpt_model_config *cfg,
                                           const hpt_offload_opts *o, hpt_model **out) {
    *out = NULL;
    /* a LoRA run's frozen base in bf16 or int8 (the trainer's request: model/frozen.c) */
    if (model_frozen_base() || model_frozen_home())
        return hpt_model_create_frozen_on(mem, cfg, model_frozen_base(), model_frozen_home(), out);
    if (!hpt_offload_active(o)) return hpt_model_create_config(mem, cfg, out);
    HPT_CHECK(hpt_model_config_check(cfg));
    HPT_CHECK(hpt_offload_check(o));
    hpt_model *m;
    HPT_CHECK(model_create_unbound(mem, cfg, o, &m));
    int L, n_slices;
    const size_t *slice_n;
    model_block_layout(m, &L, &n_slices, &slice_n);
    offload_engine *e;
    size_t rows[ENG_MAX_SLICES];
    eng_slice_rows(model_table(m), rows); /* ZeRO: every optimizer's state cut at the shards */
    hpt_status s = eng_create_rows(mem, L, n_slices, slice_n, rows, o, &e);
    if (s != HPT_OK) {
        hpt_model_free(m);
        return hpt_fail_ctx(s, "allocating %zu parameters", hpt_model_config_num_params(cfg));
    }
    model_bind_blocks(m, eng_block_store(e), e);
    *out = m;
    return HPT_OK;
}

hpt_status hpt_model_create_offload(hpt_mem *mem, const char *shape, const hpt_offload_opts *o,
                                    hpt_model **out) {
    *out = NULL;
    if (!hpt_offload_active(o)) return hpt_model_create(mem, shape, out);
    hpt_model_config cfg;
    HPT_CHECK(hpt_model_config_parse(shape, &cfg));
    return hpt_model_create_config_offload(mem, &cfg, o, out);
}
