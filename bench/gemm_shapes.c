/* gemm_shapes.c: oneDNN's dnnl_sgemm against its matmul primitive at the exact GEMM shapes of
 * a GPT-2 training step (the shapes k_matmul_forward / k_matmul_backward call), so the GEMM
 * path of src/kernels/cpu/gemm.c is chosen by measurement, shape by shape.
 *
 * For each shape and each method the product runs once untimed (JIT, page faults, the
 * primitive's creation), then the methods alternate, one call each, until the time budget is
 * spent, so both see the same machine; the best and the median call give GFLOP/s
 * (2*M*N*K / seconds). Matmul primitives are created once per shape (cached, as a library
 * would) and take the row-major operands as they are, transposes expressed as strides; beta
 * = 1 is the primitive's sum post-op. The matmul's implementation name (oneDNN's
 * "impl_info_str", e.g. brg:avx512_core or gemm:jit) is printed. One thread count per run.
 *
 * Build: cc -O2 -fopenmp bench/gemm_shapes.c -ldnnl -o build/gemm_shapes
 * Run:   build/gemm_shapes [--threads N] [--budget SECONDS_PER_SHAPE] [--model 124m|1558m|all]
 *                          [--bt N] (B*T; default 256 and 1024 for 124m, 128 for 1558m)
 * Output: a table on stdout, one line per shape: sgemm best/median, matmul best/median,
 * their ratio, and the largest difference between the two results relative to the largest
 * magnitude (the summation orders differ, so the bits may). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <oneapi/dnnl/dnnl.h>

#include "bench_util.h"

typedef struct {
    char name[32];
    char ta, tb;     /* 'N' or 'T', as dnnl_sgemm */
    int64_t M, N, K; /* C (M, N) = op(A) (M, K) @ op(B) (K, N), row-major */
    float beta;
} shape;


static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The linear layers of one block and the tied head at BT rows, C wide, in the calls the model
 * makes: forward inp @ W^T ('N','T'), dX = dout @ W ('N','N'), dW += dout^T @ inp ('T','N'). */
static int add_model(shape *sh, int n, int64_t BT, int64_t C, int64_t Vp, const char *tag) {
    const struct {
        const char *nm;
        int64_t in, out;
    } L[] = {{"qkv", C, 3 * C}, {"attproj", C, C}, {"fc", C, 4 * C}, {"fcproj", 4 * C, C},
             {"head", C, Vp}};
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        shape f = {"", 'N', 'T', BT, L[i].out, L[i].in, 0.0f};
        shape dx = {"", 'N', 'N', BT, L[i].in, L[i].out, 0.0f};
        shape dw = {"", 'T', 'N', L[i].out, L[i].in, BT, 1.0f};
        snprintf(f.name, sizeof f.name, "%s %s fwd", tag, L[i].nm);
        snprintf(dx.name, sizeof dx.name, "%s %s dX", tag, L[i].nm);
        snprintf(dw.name, sizeof dw.name, "%s %s dW", tag, L[i].nm);
        sh[n++] = f;
        sh[n++] = dx;
        sh[n++] = dw;
    }
    return n;
}

typedef struct {
    dnnl_engine_t eng;
    dnnl_stream_t strm;
} ctx;

/* A matmul primitive computing the sgemm call's product on the given buffers (row-major,
 * strides for transposes); NULL when oneDNN refuses. */
static dnnl_primitive_t make_matmul(ctx *c, const shape *s, const char **impl) {
    dnnl_memory_desc_t a, b, d;
    dnnl_dims_t ad = {s->M, s->K}, bd = {s->K, s->N}, dd = {s->M, s->N};
    /* op(A) (M, K): A stored (M, K) rows, or (K, M) rows when transposed */
    dnnl_dims_t as = {s->ta == 'N' ? s->K : 1, s->ta == 'N' ? 1 : s->M};
    dnnl_dims_t bs = {s->tb == 'N' ? s->N : 1, s->tb == 'N' ? 1 : s->K};
    dnnl_dims_t ds = {s->N, 1};
    if (dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_f32, as) ||
        dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_f32, bs) ||
        dnnl_memory_desc_init_by_strides(&d, 2, dd, dnnl_f32, ds))
        return NULL;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &a, &b, NULL, &d)) return NULL;
    dnnl_primitive_attr_t attr;
    dnnl_primitive_attr_create(&attr);
    if (s->beta != 0.0f) {
        dnnl_post_ops_t po;
        dnnl_post_ops_create(&po);
        dnnl_post_ops_append_sum(po, s->beta);
        dnnl_primitive_attr_set_post_ops(attr, po);
        dnnl_post_ops_destroy(po);
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, attr, c->eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st) return NULL;
    const char *info = NULL;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &info);
    *impl = info ? strdup(info) : "?";
    dnnl_primitive_t p;
    st = dnnl_primitive_create(&p, pd);
    dnnl_primitive_desc_destroy(pd);
    return st ? NULL : p;
}

static void run_matmul(ctx *c, dnnl_primitive_t p, const shape *s, float *A, float *B, float *C) {
    dnnl_memory_desc_t a, b, d;
    dnnl_dims_t ad = {s->M, s->K}, bd = {s->K, s->N}, dd = {s->M, s->N};
    dnnl_dims_t as = {s->ta == 'N' ? s->K : 1, s->ta == 'N' ? 1 : s->M};
    dnnl_dims_t bs = {s->tb == 'N' ? s->N : 1, s->tb == 'N' ? 1 : s->K};
    dnnl_dims_t ds = {s->N, 1};
    dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_f32, as);
    dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_f32, bs);
    dnnl_memory_desc_init_by_strides(&d, 2, dd, dnnl_f32, ds);
    dnnl_memory_t ma, mb, mc;
    dnnl_memory_create(&ma, &a, c->eng, A);
    dnnl_memory_create(&mb, &b, c->eng, B);
    dnnl_memory_create(&mc, &d, c->eng, C);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    dnnl_primitive_execute(p, c->strm, 3, args);
    dnnl_stream_wait(c->strm);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
}

int main(int argc, char **argv) {
    int threads = 2;
    double budget = 1.0;
    const char *model = "all";
    int64_t bt = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--budget") && i + 1 < argc) budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--bt") && i + 1 < argc) bt = atoll(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--threads N] [--budget S] [--model 124m|1558m|all] [--bt N]\n",
                    argv[0]);
            return 2;
        }
    }
    omp_set_num_threads(threads);
    static shape sh[128];
    int n = 0;
    if (!strcmp(model, "124m") || !strcmp(model, "all")) {
        if (bt) n = add_model(sh, n, bt, 768, 50304, "124m");
        else {
            n = add_model(sh, n, 256, 768, 50304, "124m/256");
            n = add_model(sh, n, 1024, 768, 50304, "124m/1024");
        }
    }
    if (!strcmp(model, "1558m") || !strcmp(model, "all"))
        n = add_model(sh, n, bt ? bt : 128, 1600, 50304, "1558m/128");
    ctx c;
    if (dnnl_engine_create(&c.eng, dnnl_cpu, 0) || dnnl_stream_create(&c.strm, c.eng, dnnl_stream_default_flags)) {
        fprintf(stderr, "gemm_shapes: no oneDNN CPU engine\n");
        return 1;
    }
    const dnnl_version_t *v = dnnl_version();
    printf("oneDNN %d.%d.%d, %d threads, budget %.1f s per shape\n", v->major, v->minor, v->patch,
           threads, budget);
    printf("%-20s %2s %6s %6s %6s | %8s %8s | %8s %8s | %6s %8s  %s\n", "shape", "op", "M", "N", "K",
           "sgemm", "med", "matmul", "med", "mm/sg", "rel diff", "matmul impl");
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    double tot_sg = 0, tot_mm = 0, tot_best = 0;
    for (int i = 0; i < n; i++) {
        const shape *s = &sh[i];
        int64_t lda = s->ta == 'N' ? s->K : s->M, ldb = s->tb == 'N' ? s->N : s->K;
        float *A = alloc_fill((size_t)(s->M * s->K), &rng), *B = alloc_fill((size_t)(s->K * s->N), &rng);
        float *C0 = alloc_fill((size_t)(s->M * s->N), &rng), *C1 = malloc((size_t)(s->M * s->N) * 4);
        if (!A || !B || !C0 || !C1) return 1;
        memcpy(C1, C0, (size_t)(s->M * s->N) * 4);
        const char *impl = "none";
        dnnl_primitive_t p = make_matmul(&c, s, &impl);
        /* one call each on the same C: the results compared */
        dnnl_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, s->beta, C0, s->N);
        if (p) run_matmul(&c, p, s, A, B, C1);
        double mx = 0, df = 0;
        for (int64_t k = 0; k < s->M * s->N; k++) {
            mx = fmax(mx, fabs(C0[k]));
            df = fmax(df, fabs((double)C0[k] - C1[k]));
        }
        /* beta = 1 accumulates forever: alpha small keeps it finite (timing only) */
        float alpha = s->beta != 0.0f ? 1e-6f : 1.0f;
        static double t0s[4000], t1s[4000];
        int r = 0;
        double start = now_s();
        while (r < 4000 && (r < 3 || now_s() - start < budget)) {
            double t = now_s();
            dnnl_sgemm(s->ta, s->tb, s->M, s->N, s->K, alpha, A, lda, B, ldb, s->beta, C0, s->N);
            t0s[r] = now_s() - t;
            t = now_s();
            if (p) run_matmul(&c, p, s, A, B, C1);
            t1s[r] = now_s() - t;
            r++;
        }
        qsort(t0s, (size_t)r, sizeof(double), cmp_double);
        qsort(t1s, (size_t)r, sizeof(double), cmp_double);
        double f = 2.0 * (double)s->M * (double)s->N * (double)s->K / 1e9;
        printf("%-20s %c%c %6lld %6lld %6lld | %8.1f %8.1f | %8.1f %8.1f | %6.3f %8.1e  %s\n", s->name,
               s->ta, s->tb, (long long)s->M, (long long)s->N, (long long)s->K, f / t0s[0], f / t0s[r / 2],
               p ? f / t1s[0] : 0.0, p ? f / t1s[r / 2] : 0.0, p ? t0s[r / 2] / t1s[r / 2] : 0.0,
               mx > 0 ? df / mx : 0.0, impl);
        fflush(stdout);
        tot_sg += t0s[r / 2];
        tot_mm += p ? t1s[r / 2] : t0s[r / 2];
        tot_best += p && t1s[r / 2] < t0s[r / 2] ? t1s[r / 2] : t0s[r / 2];
        if (p) dnnl_primitive_destroy(p);
        free(A);
        free(B);
        free(C0);
        free(C1);
    }
    printf("sum of medians: sgemm %.2f ms, matmul %.2f ms, best of the two per shape %.2f ms\n",
           tot_sg * 1e3, tot_mm * 1e3, tot_best * 1e3);
    return 0;
}
