/* test_head.c ARCH: the chunked LM head (head_chunk > 0) computes the same loss and gradients
 * as the head that keeps all logits, with a smaller arena, and says so when asked for logits;
 * on every variant of the architecture's case (arch_cases.h: GPT-2's tied head, llama's untied
 * and tied). */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

static void check_head(const char *shape) {
    printf("%s\n", shape);
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(shape, &cfg));
    enum { B = 3, T = 23 }; /* 69 rows: not a multiple of the chunks below */
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) {
        x[i] = (i * 37 + 11) % cfg.V;
        y[i] = (i * 53 + 7) % cfg.V;
    }
    hpt_model *ref, *m;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &ref));
    CHECK_OK(hpt_model_create_config(mem, &cfg, &m));
    hpt_model_init_random(ref, 5);
    hpt_model_init_random(m, 5);
    size_t n = hpt_model_num_params(ref);
    float loss_ref;
    CHECK_OK(hpt_model_forward(ref, x, y, B, T, &loss_ref));
    hpt_model_zero_grad(ref);
    CHECK_OK(hpt_model_backward(ref));
    uint64_t full[HPT_TIER_COUNT];
    hpt_act_opts o = hpt_act_defaults();
    CHECK_OK(hpt_model_act_tier_bytes(&cfg, B, T, &o, full));
    static const int chunks[] = {1, 16, 32, 68, 69, 1000};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        o.head_chunk = chunks[k];
        CHECK_OK(hpt_model_set_act_opts(m, &o));
        float loss;
        CHECK_OK(hpt_model_forward(m, x, y, B, T, &loss));
        hpt_model_zero_grad(m);
        CHECK_OK(hpt_model_backward(m));
        double le = (double)(loss - loss_ref) / (double)loss_ref;
        double ge = t_rel_err(hpt_model_grads(m), hpt_model_grads(ref), n);
        printf("head_chunk %4d: loss rel %.2e, grads rel %.2e\n", chunks[k], le, ge);
        /* the same math; the GEMM may block fewer rows differently, so not always the same bits */
        CHECK_MSG(le < 1e-6 && le > -1e-6, "chunk %d loss %.3e", chunks[k], le);
        CHECK_MSG(ge < 1e-6, "chunk %d grads %.3e", chunks[k], ge);
        uint64_t bytes[HPT_TIER_COUNT];
        CHECK_OK(hpt_model_act_tier_bytes(&cfg, B, T, &o, bytes));
        if (chunks[k] < B * T) CHECK(bytes[HPT_TIER_DEVICE] < full[HPT_TIER_DEVICE]);
        else CHECK(bytes[HPT_TIER_DEVICE] == full[HPT_TIER_DEVICE]);
        /* the estimate is what the model allocates */
        hpt_mem_stats st;
        hpt_mem_get_stats(mem, &st);
        CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] ==
              bytes[HPT_TIER_DEVICE] + hpt_model_activation_bytes(&cfg, B, T, NULL));
    }
    o.head_chunk = 16;
    CHECK_OK(hpt_model_set_act_opts(m, &o));
    CHECK_STATUS(hpt_model_forward(m, x, NULL, B, T, NULL), HPT_ERR_UNSUPPORTED);
    o.head_chunk = -1;
    CHECK_STATUS(hpt_model_set_act_opts(m, &o), HPT_ERR_INVALID);
    hpt_model_free(m);
    hpt_model_free(ref);
    hpt_mem_destroy(mem);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_head");
    if (!a) return 2;
    hpt_set_threads(2);
    for (int v = 0; v < a->n_variants; v++) {
        char shape[T_SHAPE_MAX];
        check_head(t_arch_shape(a, shape, 2, 32, 4, 300, 32, v));
    }
    return t_done(t_arch_label(a, "test_head"));
}
