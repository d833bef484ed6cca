/* arch_cases.h: the architectures the technique tests run over, one case per family in the
 * model's registry. A technique test takes a case's name as its first argument (tests.cmake:
 * `hpt_add_test(test_x test_x.c ARCHS)` registers test_x_<name> for each name of
 * HPT_TEST_ARCHS), builds its shapes with t_arch_shape and compares the technique's run with
 * the plain run on them. A new family adds its case to k_arch_cases (testlib.c) and its name to
 * HPT_TEST_ARCHS, and inherits every such test; test_arch_cases fails until it has (it checks
 * that the registry, the table and the ctest list name the same families).
 *
 *   int main(int argc, char **argv) {
 *       const t_arch *a = t_arch_arg(argc, argv, "test_x");
 *       if (!a) return 2;
 *       char shape[T_SHAPE_MAX];
 *       t_arch_shape(a, shape, 2, 32, 4, 64, 16, 0);   // L C NH V T, the family's first variant
 *       ...
 *       if (t_arch_first(a)) { checks that name no architecture: run once }
 *       return t_done(t_arch_label(a, "test_x"));
 *   } */
#ifndef HPT_TEST_ARCH_CASES_H
#define HPT_TEST_ARCH_CASES_H

#include "hptrain.h"

#define T_SHAPE_MAX 160
#define T_ARCH_MAX_VARIANTS 2

typedef struct {
    const char *name;  /* the registry's name (hpt_model_arch) and the tests' suffix */
    hpt_arch_id id;    /* hpt_model_config.arch */
    int llmc;          /* llm.c's checkpoint format is this family's own (GPT-2) */
    /* A shape from the generic dimensions with the family's own features on (see testlib.c) */
    void (*shape)(char buf[T_SHAPE_MAX], int L, int C, int NH, int V, int T);
    /* the family's variants appended to a shape (variant 0 is "": the shape itself); e.g.
     * llama's tied head with biases */
    int n_variants;
    const char *variants[T_ARCH_MAX_VARIANTS];
} t_arch;

int t_arch_count(void);
const t_arch *t_arch_at(int i);
/* The case named name, or NULL */
const t_arch *t_arch_named(const char *name);
/* argv[1]'s case, the first case without one (tests.cmake's vector-path runs: the checks that
 * run once, and the first case's); NULL after printing a usage line naming test and the cases
 * when argv[1] names none */
const t_arch *t_arch_arg(int argc, char **argv, const char *test);
/* The table's first case: the one whose run also makes the checks that no architecture changes
 * (flag parsing, kernels, refusals), so they run once */
int t_arch_first(const t_arch *a);
/* A shape of family a into buf (returned): L layers, width C, NH heads, vocabulary V, context T;
 * then a->variants[variant] (0 <= variant < a->n_variants) */
const char *t_arch_shape(const t_arch *a, char buf[T_SHAPE_MAX], int L, int C, int NH, int V,
                         int T, int variant);
/* "test name" in a static buffer: the name t_done prints */
const char *t_arch_label(const t_arch *a, const char *test);

#endif
