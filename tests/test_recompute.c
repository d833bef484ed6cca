/* test_recompute.c: activation recomputation is exact and shrinks the arena.
 *
 * test_recompute ARCH: for the architecture's case (arch_cases.h), each attention kind (flash,
 * plain) and each policy (selective, every:2, every:3, full, every:N with N > L), a small
 * model (L = 5, so segments of 2 and 3 leave a short last one) is
 * trained for a few steps (plain SGD: updates, not a particular optimizer) from the same
 * initialisation and batches as with no recomputation; every step's loss, the final gradients
 * and the final parameters must be the same bits (memcmp): a recomputation runs the same
 * kernels on the same inputs. The activation arena the model allocates must equal
 * hpt_model_activation_bytes (the estimator's figure) for the policy, and be smaller than
 * without recomputation. A forward-only use (no backward) and a shape change (replanning)
 * run under each policy too. Parsing of the flags' texts is checked at the end. */
#include "testlib.h"

#include "core/core.h"

#include <stdlib.h>
#include <string.h>

enum { STEPS = 3, B = 2, T = 40 };

typedef struct {
    float losses[STEPS];
    float *grads, *params;
    size_t np;
    uint64_t arena_bytes;
} run_out;

static char k_shape[T_SHAPE_MAX];

static void run(const hpt_act_opts *ao, run_out *out) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(k_shape, &cfg));
    hpt_model *m;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &m));
    hpt_model_init_random(m, 11);
    CHECK_OK(hpt_model_set_act_opts(m, ao));
    t_sgd_steps(m, B, T, STEPS, out->losses);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    out->arena_bytes = st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS];
    size_t want = hpt_model_activation_bytes(&cfg, B, T, ao);
    CHECK_MSG(out->arena_bytes == want, "arena %llu, estimated %zu",
              (unsigned long long)out->arena_bytes, want);
    out->np = hpt_model_num_params(m);
    out->grads = malloc(out->np * sizeof(float));
    out->params = malloc(out->np * sizeof(float));
    memcpy(out->grads, hpt_model_grads(m), out->np * sizeof(float));
    memcpy(out->params, hpt_model_params(m), out->np * sizeof(float));
    t_replan(m, B, T);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_recompute");
    if (!a) return 2;
    t_arch_shape(a, k_shape, 5, 64, 4, 256, 64, 0);
    static const char *policies[] = {"selective", "every:2", "every:3", "full", "every:9"};
    const int n_pol = (int)(sizeof policies / sizeof policies[0]);
    for (int k = 0; k < 2; k++) {
        hpt_act_opts base = hpt_act_defaults();
        base.attention = k == 0 ? HPT_ATTN_FLASH : HPT_ATTN_PLAIN;
        run_out ref;
        run(&base, &ref);
        printf("%s attention, %s B=%d T=%d: activation arena\n  %-10s %9llu bytes\n",
               hpt_attention_name(base.attention), k_shape, B, T, "none",
               (unsigned long long)ref.arena_bytes);
        for (int i = 0; i < n_pol; i++) {
            hpt_act_opts ao = base;
            CHECK_OK(hpt_recompute_parse(policies[i], &ao));
            run_out o;
            run(&ao, &o);
            CHECK_MSG(memcmp(o.losses, ref.losses, sizeof o.losses) == 0, "%s: losses differ",
                      policies[i]);
            CHECK_MSG(memcmp(o.grads, ref.grads, o.np * sizeof(float)) == 0,
                      "%s: gradients differ", policies[i]);
            CHECK_MSG(memcmp(o.params, ref.params, o.np * sizeof(float)) == 0,
                      "%s: parameters differ", policies[i]);
            CHECK_MSG(o.arena_bytes < ref.arena_bytes, "%s: arena %llu not below %llu",
                      policies[i], (unsigned long long)o.arena_bytes,
                      (unsigned long long)ref.arena_bytes);
            printf("  %-10s %9llu bytes (%.2f x none), losses and gradients bit-identical: %s\n",
                   policies[i], (unsigned long long)o.arena_bytes,
                   (double)o.arena_bytes / (double)ref.arena_bytes,
                   memcmp(o.grads, ref.grads, o.np * sizeof(float)) == 0 ? "yes" : "NO");
            free(o.grads);
            free(o.params);
        }
        free(ref.grads);
        free(ref.params);
    }
    hpt_act_opts o = hpt_act_defaults();
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(k_shape, &cfg));
    o.recompute = HPT_RECOMPUTE_EVERY;
    o.every = 0;
    CHECK(hpt_model_activation_bytes(&cfg, B, T, &o) == 0);
    if (!t_arch_first(a)) return t_done(t_arch_label(a, "test_recompute"));
    /* the flags' texts (once: they name no architecture) */
    o = hpt_act_defaults();
    char buf[32];
    CHECK(o.attention == HPT_ATTN_FLASH && o.recompute == HPT_RECOMPUTE_NONE);
    CHECK_OK(hpt_recompute_parse("every:4", &o));
    CHECK(o.recompute == HPT_RECOMPUTE_EVERY && o.every == 4);
    CHECK(!strcmp(hpt_recompute_name(&o, buf, sizeof buf), "every:4"));
    CHECK_STATUS(hpt_recompute_parse("every:0", &o), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_recompute_parse("every:", &o), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_recompute_parse("every:2x", &o), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_recompute_parse("some", &o), HPT_ERR_INVALID);
    CHECK_OK(hpt_attention_parse("plain", &o));
    CHECK(o.attention == HPT_ATTN_PLAIN);
    CHECK_STATUS(hpt_attention_parse("fast", &o), HPT_ERR_INVALID);
    return t_done(t_arch_label(a, "test_recompute"));
}
