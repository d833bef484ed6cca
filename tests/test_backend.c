/* test_backend.c: every op of every backend (ggml's test-backend-ops). For each backend present
 * (the CPU always; the CUDA backend where HPT_HAVE_CUDA adds it to backends()) and every op of
 * the table, the op runs on small random inputs of odd sizes (N = 7 .. 10 rows, C = 24, NH = 3,
 * T = 5, n = 1003 and 100003 so the parallel paths run) and its outputs are compared with a
 * plain double-precision reference written here, independent of the kernels; backward ops get
 * a central-difference check in double too (layernorm's and attention's backward are compared
 * element by element with the whole finite-difference gradient). A backend other than the CPU
 * is also compared with the CPU backend's outputs, op by op.
 * A new op without a test fails to compile: the table below names every function pointer of
 * hpt_backend, and a static assert holds its size to that count.
 * Tolerances (each stated where used): fp32 arithmetic against double, 1e-5 relative to
 * max(1, |reference|) per element (reductions here are at most a few hundred terms); libmvec
 * (exp, tanh, log: 4 ulp) the same; finite differences 1e-4; rounding ops exact or within
 * their rounding's half unit. One line per op prints its largest error. The op tests live in
 * test_backend_nn.h, test_backend_optim.h, test_backend_model.h, test_backend_llama.h,
 * test_backend_pack.h and test_backend_nf4.h (included below). */
#include "testlib.h"

#include "core/core.h"
#include "kernels/backend.h"
#ifdef HPT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* The references compute in double from fp32 inputs on purpose: every promotion is wanted. */
#pragma GCC diagnostic ignored "-Wdouble-promotion"

#define PI 3.14159265358979323846
#define TOL 1e-5   /* fp32 op against the double reference, relative to max(1, |ref|) */
#define TOL_FD 1e-4 /* the op's gradient against central differences of the reference */

static hpt_mem *g_mem;
static const hpt_backend *g_be; /* the backend under test */

/* ---- device buffers of the backend under test (freed after each op's test) ---- */
typedef struct {
    void *p;
    size_t bytes;
} dbuf;
static dbuf g_d[64];
static int g_nd;

/* A device copy of h (bytes; h NULL: zeros). */
static void *dput(const void *h, size_t bytes) {
    void *d = NULL;
    CHECK_OK(g_be->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, bytes ? bytes : 1, &d));
    if (h && bytes) g_be->copy(d, h, bytes, HPT_COPY_H2D);
    g_d[g_nd++] = (dbuf){d, bytes ? bytes : 1};
    return d;
}
static void dget(void *h, const void *d, size_t bytes) {
    g_be->sync();
    g_be->copy(h, d, bytes, HPT_COPY_D2H);
}
static void dfree_all(void) {
    g_be->sync();
    for (int i = 0; i < g_nd; i++) g_be->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, g_d[i].p, g_d[i].bytes);
    g_nd = 0;
}

/* ---- outputs recorded for the comparison of two backends ---- */
typedef struct {
    float *x;
    size_t n;
} rec;
static rec g_rec[2][64];
static int g_nrec[2], g_side = -1; /* -1: not recording */

/* The outputs an op's test produced (host copies), in order. */
static void emit(const float *x, size_t n) {
    if (g_side < 0 || g_nrec[g_side] >= 64) return;
    rec *r = &g_rec[g_side][g_nrec[g_side]++];
    r->x = malloc(n * sizeof(float));
    memcpy(r->x, x, n * sizeof(float));
    r->n = n;
}
static void emit1(double v) {
    float f = (float)v;
    emit(&f, 1);
}
static void rec_clear(void) {
    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < g_nrec[s]; i++) free(g_rec[s][i].x);
        g_nrec[s] = 0;
    }
}

/* ---- inputs and errors ---- */
static uint64_t g_seed;
static float frand(void) { /* [-1, 1) */
    g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_seed >> 40) / 8388608.0 - 1.0);
}
static void fill_rand(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] = s * frand();
}
static double rel(double got, double ref) { return fabs(got - ref) / fmax(1.0, fabs(ref)); }
/* The largest rel() over n values; checked against tol. */
static double cmp_arr(const char *what, const float *got, const double *ref, size_t n, double tol) {
    double e = 0.0;
    for (size_t i = 0; i < n; i++) e = fmax(e, isnan(got[i]) ? INFINITY : rel(got[i], ref[i]));
    CHECK_MSG(e <= tol, "%s: %s max error %.3g > %.3g", g_be->name, what, e, tol);
    return e;
}

/* ---- finite differences (double) ---- */
typedef double (*loss_fn)(const double *theta, const void *ctx);
/* d loss / d theta[i], central, h 1e-5 (truncation ~1e-10, rounding ~1e-11 here). */
static double fd(loss_fn f, double *theta, size_t i, const void *ctx) {
    double h = 1e-5, t = theta[i];
    theta[i] = t + h;
    double a = f(theta, ctx);
    theta[i] = t - h;
    double b = f(theta, ctx);
    theta[i] = t;
    return (a - b) / (2.0 * h);
}

/* ================================ memory ================================ */
static double t_memory(void) {
    hpt_mem_stats s0, s1;
    hpt_mem_get_stats(g_mem, &s0);
    size_t n = 1003;
    float *d = NULL, *e = NULL, h[1003], k[1003];
    CHECK_OK(g_be->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, n * sizeof(float), (void **)&d));
    CHECK_OK(g_be->alloc(g_mem, HPT_TIER_HOST, HPT_CAT_IO, n * sizeof(float), (void **)&e));
    hpt_mem_get_stats(g_mem, &s1);
    CHECK(s1.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] ==
          s0.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] + n * sizeof(float));
    dget(k, d, n * sizeof(float)); /* zero-filled */
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= k[i] == 0.0f;
    CHECK(zero);
    fill_rand(h, n, 1.0f);
    g_be->copy(e, h, n * sizeof(float), HPT_COPY_H2H);
    g_be->copy(d, e, n * sizeof(float), HPT_COPY_H2D);
    float *d2 = dput(NULL, n * sizeof(float));
    g_be->copy(d2, d, n * sizeof(float), HPT_COPY_D2D);
    g_be->memset(d2 + 5, 0, 7 * sizeof(float));
    g_be->sync();
    g_be->copy(k, d2, n * sizeof(float), HPT_COPY_D2H);
    g_be->sync();
    int same = 1;
    for (size_t i = 0; i < n; i++) same &= k[i] == (i >= 5 && i < 12 ? 0.0f : h[i]);
    CHECK_MSG(same, "%s: copy H2H, H2D, D2D, D2H and memset", g_be->name);
    emit(k, n);
    g_be->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, d, n * sizeof(float));
    g_be->free(g_mem, HPT_TIER_HOST, HPT_CAT_IO, e, n * sizeof(float));
    dfree_all();
    hpt_mem_get_stats(g_mem, &s1);
    CHECK(s1.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] == s0.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS]);
    CHECK(s1.live_bytes[HPT_TIER_HOST][HPT_CAT_IO] == s0.live_bytes[HPT_TIER_HOST][HPT_CAT_IO]);
    return same ? 0.0 : 1.0;
}

/* The op tests (after the helpers above, which they use). */
#include "test_backend_nn.h"
#include "test_backend_optim.h"
#include "test_backend_model.h"
#include "test_backend_llama.h"
#include "test_backend_pack.h"
#include "test_backend_nf4.h"

/* ================================ the table ================================ */
typedef struct {
    const char *op;
    size_t off;        /* the op's pointer in hpt_backend */
    double (*fn)(void); /* NULL: checked by the test named in `with` */
    const char *with;
} op_test;
#define OP(name, fn) {#name, offsetof(hpt_backend, name), fn, NULL}
#define WITH(name, other) {#name, offsetof(hpt_backend, name), NULL, other}
static const op_test k_tests[] = {
    OP(alloc, t_memory), WITH(free, "alloc"), WITH(copy, "alloc"), WITH(memset, "alloc"),
    OP(sync, t_sync),
    OP(gemm, t_gemm), OP(matmul_forward, t_matmul_forward), OP(matmul_backward, t_matmul_backward),
    OP(gemm_bf16, t_gemm_bf16), OP(matmul_forward_bf16, t_matmul_forward_bf16),
    OP(matmul_backward_bf16, t_matmul_backward_bf16),
    OP(encoder_forward, t_encoder_forward), OP(encoder_backward, t_encoder_backward),
    OP(layernorm_forward, t_layernorm_forward), OP(layernorm_apply, t_layernorm_apply),
    OP(layernorm_backward, t_layernorm_backward),
    OP(rmsnorm_forward, t_rmsnorm_forward), OP(rmsnorm_apply, t_rmsnorm_apply),
    OP(rmsnorm_backward, t_rmsnorm_backward), OP(rope_forward, t_rope_forward),
    OP(rope_backward, t_rope_backward), OP(swiglu_forward, t_swiglu_forward),
    OP(swiglu_backward, t_swiglu_backward), OP(geglu_forward, t_geglu_forward),
    OP(geglu_backward, t_geglu_backward),
    OP(attention_forward, t_attention_forward), OP(attention_backward, t_attention_backward),
    OP(flash_attention_forward, t_flash_attention_forward),
    OP(flash_attention_backward, t_flash_attention_backward),
    OP(attention_forward_seg, t_attention_forward_seg),
    OP(attention_backward_seg, t_attention_backward_seg),
    OP(flash_attention_forward_seg, t_flash_attention_forward_seg),
    OP(flash_attention_backward_seg, t_flash_attention_backward_seg),
    OP(flash_attention_forward_bf16, t_flash_attention_forward_bf16),
    OP(flash_attention_backward_bf16, t_flash_attention_backward_bf16),
    WITH(flash_attention_bf16_heads, "flash_attention_forward_bf16 (the cases it accepts run)"),
    OP(encoder_forward_pos, t_encoder_forward_pos), OP(encoder_backward_pos, t_encoder_backward_pos),
    OP(encoder_forward_bf16_pos, t_encoder_forward_bf16_pos),
    OP(rope_forward_pos, t_rope_forward_pos), OP(rope_backward_pos, t_rope_backward_pos),
    OP(gelu_forward, t_gelu_forward), OP(gelu_backward, t_gelu_backward), OP(scale, t_scale),
    OP(add, t_add),
    OP(sumsq, t_sumsq), OP(nonfinite, t_nonfinite),
    OP(sumsq_many, t_sumsq_many), OP(sumsq_many_dev, t_sumsq_many_dev), OP(nonfinite_many, t_nonfinite_many),
    OP(crossentropy_forward, t_crossentropy_forward),
    OP(crossentropy_backward, t_crossentropy_backward),
    OP(loss_mean, t_loss_mean), OP(bf16_widen_par, t_bf16_widen_par),
    OP(bf16_split_par, t_bf16_split_par), OP(encoder_forward_bf16, t_encoder_forward_bf16),
    OP(encoder_backward_wpe, t_encoder_backward_wpe),
    OP(encoder_backward_rows, t_encoder_backward_rows), OP(logsumexp_chunk, t_logsumexp_chunk),
    OP(tied_loss, t_tied_loss), OP(crossentropy_dlogits, t_crossentropy_dlogits),
    OP(adamw, t_adamw), OP(adamw_q, t_adamw_q), OP(lion, t_lion), OP(sgd, t_sgd),
    OP(adam_mini, t_adam_mini),
    OP(q8_map, t_q8_map), WITH(q8_lut_of, "adamw_q (the fast table against the binary search)"),
    OP(q8_quantize, t_q8_quantize), WITH(q8_dequantize, "q8_quantize"),
    OP(f16_narrow, t_f16_narrow), OP(bf16_narrow, t_bf16_narrow), OP(f16_widen, t_f16_widen),
    OP(bf16_widen, t_bf16_widen), OP(bf16_split, t_bf16_split),
    OP(q8w_quantize, t_q8w_quantize), OP(q8w_dequantize, t_q8w_dequantize),
    OP(q8w_matmul_forward, t_q8w_matmul_forward),
    OP(infer_embed, t_infer_embed), OP(infer_kv_store, t_infer_kv_store),
    OP(infer_attend, t_infer_attend),
    OP(act_code_bytes, t_act_code_bytes), OP(act_code_store, t_act_code),
    WITH(act_code_load, "act_code_store"),
    OP(fit_observe, t_fit_observe), OP(fit_velocity, t_fit_velocity),
    OP(predict_adam, t_predict_adam), OP(predict_linear, t_predict_linear),
    OP(add_normal, t_add_normal), OP(adam_step_sumsq, t_adam_step_sumsq),
    OP(init_normal, t_init_normal), OP(fill, t_fill),
    OP(dropout_forward, t_dropout), WITH(dropout_backward, "dropout_forward"),
    OP(nf4_quantize, t_nf4_quantize), OP(nf4_dequantize, t_nf4_dequantize),
};
#define N_TESTS (sizeof k_tests / sizeof k_tests[0])
/* Every member after the name is an op's function pointer, and every one has an entry. */
_Static_assert(sizeof(hpt_backend) ==
                   offsetof(hpt_backend, alloc) + N_TESTS * sizeof(void (*)(void)),
               "hpt_backend has an op tests/test_backend.c does not cover: add its test");

/* Why the CUDA backend did not start (hpt_backend_cuda's error), for main's last line. */
static char g_cuda_why[256] = "this build has no CUDA backend";

/* The first CUDA error an op met (ops cannot fail: hpt_cuda_status keeps it); HPT_OK elsewhere. */
static hpt_status be_status(const hpt_backend *be) {
#ifdef HPT_HAVE_CUDA
    if (be != hpt_backend_cpu()) return hpt_cuda_status();
#endif
    (void)be;
    return HPT_OK;
}

/* The backends present. */
static const hpt_backend *backends(int i) {
    switch (i) {
    case 0: return hpt_backend_cpu();
#ifdef HPT_HAVE_CUDA
    case 1: { /* the CUDA backend, when built and a GPU is present (else main says why) */
        static int said;
        const hpt_backend *be = hpt_backend_cuda();
        if (!be && !said++) snprintf(g_cuda_why, sizeof g_cuda_why, "%s", hpt_last_error());
        return be;
    }
#endif
    default: return NULL;
    }
}

/* The largest difference of two runs' outputs: 1e-4 relative to max(1, |cpu|) (different
 * summation orders on a device; exact ops agree to the bit and show 0). */
static double cmp_runs(const char *op) {
    double e = 0.0;
    CHECK_MSG(g_nrec[0] == g_nrec[1], "%s: %d outputs on the cpu, %d on %s", op, g_nrec[0], g_nrec[1], g_be->name);
    for (int k = 0; k < g_nrec[0] && k < g_nrec[1]; k++) {
        CHECK(g_rec[0][k].n == g_rec[1][k].n);
        for (size_t i = 0; i < g_rec[0][k].n && i < g_rec[1][k].n; i++) {
            double a = g_rec[0][k].x[i], b = g_rec[1][k].x[i];
            e = fmax(e, isnan(a) && isnan(b) ? 0.0 : rel(b, a));
        }
    }
    CHECK_MSG(e <= 1e-4, "%s: %s against the cpu: %.3g", op, g_be->name, e);
    return e;
}

int main(void) {
    CHECK_OK(hpt_mem_create(&g_mem));
    const hpt_backend *cpu = hpt_backend_cpu();
    int n_be = 0;
    for (int b = 0; backends(b); b++) n_be++;
    for (int b = 0; b < n_be; b++) {
        const hpt_backend *be = backends(b);
        /* every op present, each slot named once */
        for (size_t i = 0; i < N_TESTS; i++) {
            void (*f)(void);
            memcpy(&f, (const char *)be + k_tests[i].off, sizeof f);
            CHECK_MSG(f != NULL, "%s: op %s missing", be->name, k_tests[i].op);
            for (size_t j = 0; j < i; j++) CHECK(k_tests[j].off != k_tests[i].off);
        }
        printf("backend %s: %zu ops\n", be->name, N_TESTS);
        for (size_t i = 0; i < N_TESTS; i++) {
            const op_test *t = &k_tests[i];
            if (!t->fn) {
                printf("  %-26s checked with %s\n", t->op, t->with);
                continue;
            }
            g_seed = 0x5eed0000u + i; /* the same inputs on every backend */
            g_be = be;
            g_side = be == cpu ? -1 : 1;
            double e = t->fn();
            CHECK_MSG(be_status(be) == HPT_OK, "%s on %s: %s", t->op, be->name, hpt_last_error());
            if (be == cpu) {
                printf("  %-26s max error %.3g\n", t->op, e);
                continue;
            }
            g_be = cpu; /* the same op on the CPU, for the comparison */
            g_seed = 0x5eed0000u + i;
            g_side = 0;
            (void)t->fn();
            g_be = be;
            g_side = -1;
            printf("  %-26s max error %.3g, against the cpu %.3g\n", t->op, e, cmp_runs(t->op));
            rec_clear();
        }
    }
    hpt_mem_destroy(g_mem);
    /* The CPU half is this test's own and passed or failed above: without a GPU it ends there
     * (exit 0, the SKIP line says the CUDA half did not run); with one present, a CUDA backend
     * that did not start is a failure, not a skip (t_gpu_skip). */
    if (n_be == 1) {
        printf("only the cpu backend is present: the comparison of backends is skipped\n");
        if (t_gpu_present()) return t_gpu_skip("test_backend", g_cuda_why);
        printf("SKIP: no GPU: the cuda backend did not run (%s)\n", g_cuda_why);
    }
    return t_done("test_backend");
}
