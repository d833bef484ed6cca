/* testlib.c: helpers of the test harness. */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int t_checks, t_failures;

int t_done(const char *name) {
    printf("%s: %d checks, %d failed\n", name, t_checks, t_failures);
    return t_failures ? 1 : 0;
}

const char *t_ref_dir(void) {
    const char *e = getenv("HPT_REF_DIR");
    return e && *e ? e : HPT_TEST_REF_DIR;
}

const char *t_tokenizer_dir(void) {
    const char *e = getenv("HPT_TOKENIZER");
    if (e && *e) return e;
    return HPT_TEST_TOKENIZER_DIR[0] ? HPT_TEST_TOKENIZER_DIR : NULL;
}

const char *t_tmpdir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/hpt_test_XXXXXX");
        if (!mkdtemp(dir)) { perror("mkdtemp"); exit(1); }
    }
    return dir;
}

double t_rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return sqrt(num) / (sqrt(den) > 1e-30 ? sqrt(den) : 1e-30);
}
