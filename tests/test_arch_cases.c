/* test_arch_cases.c NAME...: the technique tests' architecture cases (arch_cases.h) cover the
 * model's registry. The names given (tests.cmake's HPT_TEST_ARCHS, for which the technique
 * tests are registered), the cases of k_arch_cases and the registry's architectures are the
 * same families in the same order; each case's shapes (every variant) parse as its family and
 * build a model that names itself so. A family registered without a test case fails here, so
 * it cannot go without the technique tests. */
#include "testlib.h"

#include "model/arch.h"

#include <string.h>

/* The registry's architectures in order (model/registry.c) */
static int registry(const hpt_arch *out[8]) {
    int n = 0;
    for (int id = 0; id < hpt_arch_count() && n < 8; id++) out[n++] = hpt_arch_at(id);
    return n;
}

int main(int argc, char **argv) {
    const hpt_arch *reg[8];
    int n = registry(reg);
    CHECK(n >= 2);
    CHECK_MSG(t_arch_count() == n, "%d architectures registered, %d test cases", n, t_arch_count());
    CHECK_MSG(argc - 1 == n, "%d architectures registered, %d in HPT_TEST_ARCHS", n, argc - 1);
    for (int i = 0; i < n; i++) {
        const t_arch *a = t_arch_at(i);
        CHECK_MSG(a && !strcmp(a->name, reg[i]->name), "registry's architecture %d is %s, its "
                  "test case %s", i, reg[i]->name, a ? a->name : "(none)");
        const char *listed = i + 1 < argc ? argv[i + 1] : "(none)";
        CHECK_MSG(!strcmp(listed, reg[i]->name), "registry's architecture %d is %s, "
                  "HPT_TEST_ARCHS's %s", i, reg[i]->name, listed);
        if (!a) continue;
        CHECK(t_arch_named(a->name) == a && t_arch_first(a) == (i == 0));
        CHECK(a->n_variants >= 1 && a->n_variants <= T_ARCH_MAX_VARIANTS && !a->variants[0][0]);
        hpt_mem *mem;
        CHECK_OK(hpt_mem_create(&mem));
        for (int v = 0; v < a->n_variants; v++) {
            char shape[T_SHAPE_MAX];
            t_arch_shape(a, shape, 2, 32, 4, 64, 16, v);
            hpt_model_config c;
            CHECK_OK(hpt_model_config_parse(shape, &c));
            CHECK_MSG((int)c.arch == (int)a->id, "%s: arch %d, expected %d", shape, (int)c.arch,
                      (int)a->id);
            hpt_model *m = NULL;
            CHECK_OK(hpt_model_create(mem, shape, &m));
            CHECK(m && !strcmp(hpt_model_arch(m), a->name));
            printf("  %-6s %s\n", a->name, shape);
            hpt_model_free(m);
        }
        hpt_mem_destroy(mem);
    }
    CHECK(t_arch_named("nonexistent") == NULL && t_arch_at(n) == NULL && t_arch_at(-1) == NULL);
    return t_done("test_arch_cases");
}
