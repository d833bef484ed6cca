/* test_init.c: GPT-2 initialisation: the statistics of each tensor, zero padding rows, and the
 * same bits whatever the thread count. */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void stats(const float *x, size_t n, double *mean, double *std) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) {
        s += (double)x[i];
        s2 += (double)x[i] * (double)x[i];
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
}

int main(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse("gpt2:L=4,C=128,NH=4,V=1000,T=64", &cfg));
    hpt_model *a, *b;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &a));
    CHECK_OK(hpt_model_create_config(mem, &cfg, &b));
    hpt_set_threads(1);
    hpt_model_init_random(a, 42);
    hpt_set_threads(2);
    hpt_model_init_random(b, 42);
    size_t n = hpt_model_num_params(a);
    CHECK_MSG(memcmp(hpt_model_params(a), hpt_model_params(b), n * 4) == 0,
              "initialisation depends on the thread count");
    hpt_model_init_random(b, 43);
    CHECK(memcmp(hpt_model_params(a), hpt_model_params(b), n * 4) != 0);

    t_tensor t[T_MAX_TENSORS];
    int nt = t_tensors_of(&cfg, t, NULL);
    CHECK(nt == 16);
    const float *p = hpt_model_params(a);
    double resid = 0.02 / sqrt(2.0 * cfg.L);
    for (int i = 0; i < nt; i++) {
        const float *x = p + t[i].offset;
        size_t m = t[i].numel;
        if (!strcmp(t[i].name, "wte")) {
            m = (size_t)cfg.V * cfg.C;
            int zero = 1;
            for (size_t j = m; j < t[i].numel; j++) zero &= x[j] == 0.0f;
            CHECK_MSG(zero, "wte padding rows are not zero");
        }
        double mean, std;
        stats(x, m, &mean, &std);
        if (t[i].is_matrix) {
            double want = !strcmp(t[i].name, "attprojw") || !strcmp(t[i].name, "fcprojw") ? resid : 0.02;
            /* n >= 8192 samples: the sample std is within 3% and the mean within 0.05 std */
            CHECK_MSG(fabs(std / want - 1) < 0.03, "%s std %.5f, want %.5f", t[i].name, std, want);
            CHECK_MSG(fabs(mean) < 0.05 * want, "%s mean %.6f", t[i].name, mean);
            /* normal, not uniform: about 4.6% of samples beyond 2 std */
            size_t tail = 0;
            for (size_t j = 0; j < m; j++) tail += fabs((double)x[j]) > 2 * want;
            double frac = (double)tail / (double)m;
            CHECK_MSG(frac > 0.035 && frac < 0.057, "%s tail fraction %.4f", t[i].name, frac);
        } else {
            double want = !strcmp(t[i].name, "ln1w") || !strcmp(t[i].name, "ln2w") || !strcmp(t[i].name, "lnfw") ? 1.0 : 0.0;
            CHECK_MSG(mean == want && std == 0.0, "%s is not constant %g", t[i].name, want);
        }
    }
    hpt_model_free(a);
    hpt_model_free(b);
    hpt_mem_destroy(mem);
    return t_done("test_init");
}
