/* test_forward_only.c ARCH: forward-only models (hpt_model_create_forward,
 * hpt_model_load_forward) of the architecture's case (arch_cases.h) allocate no gradients: the
 * device tier's peak after creation or a load is the parameters' bytes alone (and the
 * architecture's constants), and a backward is refused; hpt_model_acquire_grads then gives them
 * gradients, and their forward and backward give the same bits as a model made with gradients
 * from the same seed (or the same checkpoint: llm.c's, where the case has that format). */
#include "testlib.h"

#include "model/arch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char SHAPE[T_SHAPE_MAX];
#define B 2
#define T 16

static void batch(int32_t *x, int32_t *y) {
    for (int i = 0; i < B * T; i++) {
        x[i] = (i * 37 + 11) % 1000;
        y[i] = (i * 53 + 7) % 1000;
    }
}

/* Forward and backward of the model with gradients (ref) against the forward-only one (m),
 * which is first checked to hold none. */
static void check_against(hpt_mem *mem, hpt_model *m, hpt_model *ref, const char *what) {
    size_t np = hpt_model_num_params(m);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    CHECK_MSG(hpt_model_grads(m) == NULL, "%s: a gradient buffer", what);
    CHECK_MSG(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_GRADS] == 0, "%s: %llu bytes of grads live",
              what, (unsigned long long)st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_GRADS]);
    /* the parameters, and the architecture's constants (llama's rotary tables) beside them */
    const hpt_model_config *cfg = hpt_model_get_config(m);
    const hpt_arch *A = hpt_arch_of(cfg);
    size_t consts = A && A->consts_floats ? A->consts_floats(cfg) * sizeof(float) : 0;
    CHECK_MSG(st.peak_bytes[HPT_TIER_DEVICE] == np * sizeof(float) + consts, "%s: device peak "
              "%llu, parameters %zu and constants %zu", what,
              (unsigned long long)st.peak_bytes[HPT_TIER_DEVICE], np * sizeof(float), consts);
    int32_t x[B * T], y[B * T];
    batch(x, y);
    float l0, l1;
    CHECK_OK(hpt_model_forward(m, x, y, B, T, &l0));
    CHECK_MSG(hpt_model_backward(m) != HPT_OK, "%s: backward without gradients accepted", what);
    CHECK_OK(hpt_model_acquire_grads(m));
    CHECK(hpt_model_grads(m) != NULL);
    hpt_model_zero_grad(m);
    hpt_model_zero_grad(ref);
    CHECK_OK(hpt_model_forward(m, x, y, B, T, &l0));
    CHECK_OK(hpt_model_backward(m));
    CHECK_OK(hpt_model_forward(ref, x, y, B, T, &l1));
    CHECK_OK(hpt_model_backward(ref));
    CHECK_MSG(memcmp(&l0, &l1, sizeof l0) == 0, "%s: loss %.9g, with gradients %.9g", what, (double)l0,
              (double)l1);
    CHECK_MSG(memcmp(hpt_model_grads(m), hpt_model_grads(ref), np * sizeof(float)) == 0,
              "%s: gradients after acquire differ", what);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_forward_only");
    if (!a) return 2;
    t_arch_shape(a, SHAPE, 2, 64, 4, 1000, 32, 0);
    printf("%s\n", SHAPE);
    hpt_mem *mem_ref, *mem;
    CHECK_OK(hpt_mem_create(&mem_ref));
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *ref, *m;
    CHECK_OK(hpt_model_create(mem_ref, SHAPE, &ref));
    CHECK(hpt_model_grads(ref) != NULL); /* the ordinary create keeps its gradients */
    CHECK_OK(hpt_model_init_random(ref, 7));
    CHECK_OK(hpt_model_create_forward(mem, SHAPE, &m));
    CHECK_OK(hpt_model_init_random(m, 7));
    check_against(mem, m, ref, "create_forward");
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    if (!a->llmc) { /* hpt_model_load_forward reads llm.c's checkpoints: GPT-2's */
        hpt_model_free(ref);
        hpt_mem_destroy(mem_ref);
        return t_done(t_arch_label(a, "test_forward_only"));
    }

    char path[64];
    snprintf(path, sizeof path, "/tmp/hpt_fwd_only_%d.bin", (int)getpid());
    CHECK_OK(hpt_model_save(ref, path));
    CHECK_OK(hpt_mem_create(&mem));
    CHECK_OK(hpt_model_load_forward(mem, path, &m));
    CHECK(memcmp(hpt_model_params(m), hpt_model_params(ref),
                 hpt_model_num_params(m) * sizeof(float)) == 0);
    check_against(mem, m, ref, "load_forward");
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    remove(path);
    hpt_model_free(ref);
    hpt_mem_destroy(mem_ref);
    return t_done(t_arch_label(a, "test_forward_only"));
}
