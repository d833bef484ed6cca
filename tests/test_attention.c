/* test_attention.c: flash attention (kernels/cpu/flash_attention.c) against the plain
 * reference kernel (attention.c), and the whole model with each.
 *
 * Kernel: on shapes that cross the 64-row/64-key tiles (T = 1, 63, 64, 65 = tile + 1, 100,
 * 130, 200), with B > 1 and NH > 1, the same qkv and dout go to both kernels; out, and dq, dk,
 * dv separately, must agree within BOUND = 1e-5 norm-wise relative (both are fp32 with sums
 * of at most T products; the online softmax rescales partial sums, so equality is to rounding,
 * ~1e-7, not bitwise). The output is pre-filled with NaN (every element must be written), and
 * the flash lse is checked against log(sum(exp(s))) in double. Flash is also run twice with 1
 * and 2 threads: the bits must not change (each output element has one writer).
 *
 * Model: a small GPT-2 trained for a few SGD steps with flash and with plain attention from
 * the same initialisation and batches: each step's loss and the gradients of the last step
 * agree within BOUND. */
#include "testlib.h"

#include "core/core.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BOUND 1e-5

static hpt_rng rng;

static float *rand_f(size_t n, float std) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = std * hpt_rng_normal(&rng);
    return x;
}

/* dq, dk or dv (which = 0, 1, 2) of dqkv (B,T,3C) into dst (B,T,C). */
static void part(float *dst, const float *dqkv, size_t BT, int C, int which) {
    for (size_t r = 0; r < BT; r++) memcpy(dst + r * C, dqkv + r * 3 * C + which * C, (size_t)C * sizeof(float));
}

static void check_kernel(int B, int T, int C, int NH, double *worst) {
    size_t BT = (size_t)B * T;
    float *qkv = rand_f(BT * 3 * C, 1.0f), *dout = rand_f(BT * C, 1.0f);
    float *o1 = malloc(BT * C * sizeof(float)), *o2 = malloc(BT * C * sizeof(float));
    float *att = malloc((size_t)B * NH * T * T * sizeof(float));
    float *lse = malloc((size_t)B * NH * T * sizeof(float));
    float *scr = malloc((size_t)B * NH * T * sizeof(float));
    float *d1 = malloc(BT * 3 * C * sizeof(float)), *d2 = malloc(BT * 3 * C * sizeof(float));
    float *p1 = malloc(BT * C * sizeof(float)), *p2 = malloc(BT * C * sizeof(float));
    for (size_t i = 0; i < BT * C; i++) o1[i] = o2[i] = NAN;
    for (size_t i = 0; i < BT * 3 * C; i++) d1[i] = d2[i] = NAN;
    k_attention_forward(o1, att, qkv, B, T, C, NH);
    k_flash_attention_forward(o2, lse, qkv, B, T, C, NH);
    double e = t_rel_err(o2, o1, BT * C);
    CHECK_MSG(e <= BOUND, "B=%d T=%d C=%d NH=%d: out rel err %.3g", B, T, C, NH, e);
    if (e > worst[0]) worst[0] = e;
    /* lse against double */
    int hs = C / NH;
    double lerr = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, s[1024];
                for (int u = 0; u <= t; u++) {
                    const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += (double)q[i] * (double)k[i];
                    s[u] = d / sqrt((double)hs);
                    if (s[u] > mx) mx = s[u];
                }
                double sum = 0;
                for (int u = 0; u <= t; u++) sum += exp(s[u] - mx);
                double ref = mx + log(sum), got = lse[((size_t)b * NH + h) * T + t];
                double r = fabs(got - ref) / (fabs(ref) > 1 ? fabs(ref) : 1);
                if (r > lerr) lerr = r;
            }
    CHECK_MSG(lerr <= BOUND, "B=%d T=%d: lse err %.3g", B, T, lerr);
    k_attention_backward(d1, scr, dout, qkv, att, B, T, C, NH);
    k_flash_attention_backward(d2, scr, dout, qkv, o2, lse, B, T, C, NH);
    static const char *nm[3] = {"dq", "dk", "dv"};
    for (int w = 0; w < 3; w++) {
        part(p1, d1, BT, C, w);
        part(p2, d2, BT, C, w);
        double g = t_rel_err(p2, p1, BT * C);
        CHECK_MSG(g <= BOUND, "B=%d T=%d C=%d NH=%d: %s rel err %.3g", B, T, C, NH, nm[w], g);
        if (g > worst[1 + w]) worst[1 + w] = g;
    }
    printf("  B=%d T=%4d C=%3d NH=%d: out %.2e lse %.2e", B, T, C, NH, e, lerr);
    for (int w = 0; w < 3; w++) {
        part(p1, d1, BT, C, w);
        part(p2, d2, BT, C, w);
        printf(" %s %.2e", nm[w], t_rel_err(p2, p1, BT * C));
    }
    printf("\n");
    /* the bits do not depend on the thread count */
    int threads = hpt_get_threads();
    float *o3 = malloc(BT * C * sizeof(float)), *d3 = malloc(BT * 3 * C * sizeof(float));
    hpt_set_threads(threads == 1 ? 2 : 1);
    k_flash_attention_forward(o3, lse, qkv, B, T, C, NH);
    k_flash_attention_backward(d3, scr, dout, qkv, o3, lse, B, T, C, NH);
    hpt_set_threads(threads);
    CHECK(memcmp(o3, o2, BT * C * sizeof(float)) == 0);
    CHECK(memcmp(d3, d2, BT * 3 * C * sizeof(float)) == 0);
    free(o3); free(d3);
    free(qkv); free(dout); free(o1); free(o2); free(att); free(lse); free(scr);
    free(d1); free(d2); free(p1); free(p2);
}

/* Trains a small model for n steps with the given attention; losses (n) and the last step's
 * gradients (num_params, malloc'd) out. */
static void train(hpt_attention kind, int n, float *losses, float **grads_out, size_t *np_out) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_gpt2_config cfg;
    CHECK_OK(hpt_gpt2_config_parse("gpt2:L=2,C=64,NH=4,V=256,T=96", &cfg));
    hpt_gpt2 *m;
    CHECK_OK(hpt_gpt2_create(mem, &cfg, &m));
    hpt_gpt2_init_random(m, 7);
    hpt_gpt2_act_opts ao = hpt_gpt2_act_defaults();
    ao.attention = kind;
    CHECK_OK(hpt_gpt2_set_act_opts(m, &ao));
    enum { B = 2, T = 80 }; /* T crosses a 64 tile */
    int32_t x[B * T], y[B * T];
    hpt_rng r;
    hpt_rng_seed(&r, 99);
    for (int s = 0; s < n; s++) {
        for (int i = 0; i < B * T; i++) {
            x[i] = (int32_t)(hpt_rng_uniform(&r) * 256) % 256;
            y[i] = (int32_t)(hpt_rng_uniform(&r) * 256) % 256;
        }
        CHECK_OK(hpt_gpt2_forward(m, x, y, B, T, &losses[s]));
        hpt_gpt2_zero_grad(m);
        CHECK_OK(hpt_gpt2_backward(m));
        if (s + 1 < n) { /* plain SGD: the test needs updates, not a particular optimizer */
            float *p = hpt_gpt2_params(m), *g = hpt_gpt2_grads(m);
            for (size_t i = 0; i < hpt_gpt2_get_num_params(m); i++) p[i] -= 0.1f * g[i];
        }
    }
    size_t np = hpt_gpt2_get_num_params(m);
    *grads_out = malloc(np * sizeof(float));
    memcpy(*grads_out, hpt_gpt2_grads(m), np * sizeof(float));
    *np_out = np;
    hpt_gpt2_free(m);
    hpt_mem_destroy(mem);
}

int main(void) {
    hpt_rng_seed(&rng, 1234);
    double worst[4] = {0};
    printf("flash vs plain attention, norm-wise relative errors:\n");
    check_kernel(1, 1, 16, 1, worst);
    check_kernel(2, 1, 32, 2, worst);
    check_kernel(1, 63, 32, 2, worst);
    check_kernel(2, 64, 64, 4, worst);
    check_kernel(2, 65, 64, 4, worst);
    check_kernel(3, 100, 48, 3, worst);
    check_kernel(1, 130, 128, 2, worst);
    check_kernel(2, 200, 64, 4, worst);
    printf("  worst: out %.2e dq %.2e dk %.2e dv %.2e (bound %.0e)\n", worst[0], worst[1],
           worst[2], worst[3], BOUND);

    enum { STEPS = 4 };
    float lf[STEPS], lp[STEPS];
    float *gf, *gp;
    size_t np;
    train(HPT_ATTN_FLASH, STEPS, lf, &gf, &np);
    train(HPT_ATTN_PLAIN, STEPS, lp, &gp, &np);
    double lmax = 0;
    for (int s = 0; s < STEPS; s++) {
        double e = fabs((double)lf[s] - (double)lp[s]) / fabs((double)lp[s]);
        printf("  model step %d: loss flash %.7f plain %.7f rel %.2e\n", s, (double)lf[s], (double)lp[s], e);
        if (e > lmax) lmax = e;
    }
    CHECK_MSG(lmax <= BOUND, "loss rel err %.3g", lmax);
    double ge = t_rel_err(gf, gp, np);
    printf("  model gradients after %d steps: rel err %.2e\n", STEPS, ge);
    CHECK_MSG(ge <= BOUND, "gradient rel err %.3g", ge);
    free(gf);
    free(gp);
    return t_done("test_attention");
}
