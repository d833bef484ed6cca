/* gemm.c: matrix products through oneDNN, the GEMM library chosen by measurement
 * (docs/design.md): its sgemm, and its matmul primitive for the forward products (below); both
 * dispatch to this CPU's widest vector units at run time with no environment variable, and
 * run on the same OpenMP runtime as the other kernels.
 * Kernels cannot fail: should dnnl_sgemm refuse a call (it validates its arguments; the shapes
 * the library builds are valid), k_gemm computes the product with the plain reference loops
 * instead and counts the event (k_gemm_fallbacks), so the result is right and the slowdown
 * observable. */
#include "kernels/cpu/gemm.h"
#include "kernels/kernels.h"

#include <dnnl.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- oneDNN's matmul primitive for the forward products ('N','T') -------------------------
 * Chosen by measurement (bench/gemm_shapes.c, docs/benchmarks.md "Fourth pass"): on AVX-512
 * its brgemm kernels beat dnnl_sgemm on the forward shapes (weights (out, in) used as W^T:
 * up to 1.5x on fcproj, K = 4C), not on dX ('N','N') or dW ('T','N'), which stay with sgemm.
 * Every 'N','T' product with alpha 1 and beta 0 or 1 goes through it, so all paths of a
 * model (chunked head or not, recompute) share one implementation; HPT_GEMM=sgemm turns it
 * off (any refusal falls back to sgemm too). Primitives are cached by shape, strides, beta and the thread count (the
 * partition, hence the bits, may depend on it); the cache is a fixed table, its oldest entry
 * replaced when full (re-creating a primitive gives the same one). */
#define MM_CACHE 64
typedef struct {
    int64_t M, N, K, lda, ldb, ldc;
    int tb, beta1, bias, threads; /* tb: B stored (N, K) and used transposed, else (K, N) */
    dnnl_primitive_t p;
    dnnl_memory_desc_t a, b, c, d; /* d: the bias (1, N) when bias */
} mm_entry;
static mm_entry g_mm[MM_CACHE];
static int g_mm_n, g_mm_next;
static pthread_mutex_t g_mm_mu = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t g_eng;
static dnnl_stream_t g_strm;                /* the stream of whichever thread holds g_exec_mu */
static pthread_mutex_t g_exec_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_mm_on;
static pthread_once_t g_mm_once = PTHREAD_ONCE_INIT;

static void mm_init(void) {
    const char *e = getenv("HPT_GEMM");
    g_mm_on = !(e && !strcmp(e, "sgemm")) && dnnl_engine_create(&g_eng, dnnl_cpu, 0) == dnnl_success &&
              dnnl_stream_create(&g_strm, g_eng, dnnl_stream_default_flags) == dnnl_success;
}

static int mm_enabled(void) {
    pthread_once(&g_mm_once, mm_init);
    return g_mm_on;
}

static dnnl_primitive_t mm_create(mm_entry *m) {
    dnnl_dims_t ad = {m->M, m->K}, bd = {m->K, m->N}, cd = {m->M, m->N}, dd = {1, m->N};
    dnnl_dims_t as = {m->lda, 1}, cs = {m->ldc, 1}, ds = {m->N, 1};
    dnnl_dims_t bs_t = {1, m->ldb}, bs_n = {m->ldb, 1}; /* B stored (N, K): ^T; or (K, N) */
    if (dnnl_memory_desc_init_by_strides(&m->a, 2, ad, dnnl_f32, as) ||
        dnnl_memory_desc_init_by_strides(&m->b, 2, bd, dnnl_f32, m->tb ? bs_t : bs_n) ||
        dnnl_memory_desc_init_by_strides(&m->c, 2, cd, dnnl_f32, cs) ||
        (m->bias && dnnl_memory_desc_init_by_strides(&m->d, 2, dd, dnnl_f32, ds)))
        return NULL;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &m->a, &m->b, m->bias ? &m->d : NULL, &m->c)) return NULL;
    dnnl_primitive_attr_t attr = NULL;
    if (dnnl_primitive_attr_create(&attr)) return NULL;
    dnnl_post_ops_t po = NULL;
    if (m->beta1 && (dnnl_post_ops_create(&po) || dnnl_post_ops_append_sum(po, 1.0f) ||
                     dnnl_primitive_attr_set_post_ops(attr, po))) {
        dnnl_post_ops_destroy(po);
        dnnl_primitive_attr_destroy(attr);
        return NULL;
    }
    dnnl_post_ops_destroy(po);
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &md, attr, g_eng, NULL);
    dnnl_primitive_attr_destroy(attr);
    if (st) return NULL;
    dnnl_primitive_t p = NULL;
    st = dnnl_primitive_create(&p, pd);
    dnnl_primitive_desc_destroy(pd);
    return st ? NULL : p;
}

/* C (M, N) = A (M, K) @ op(B) [+ bias (N) per row] [+ C]; op(B) = B^T (B stored (N, K), tb)
 * or B (stored (K, N)); with both, C = C + (A op(B) + bias). dnnl_success or why not. */
static dnnl_status_t mm_run(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                            int tb, const float *B, int64_t ldb, const float *bias, int beta1,
                            float *C, int64_t ldc) {
    int hb = bias != NULL;
    int th = omp_get_max_threads();
    pthread_mutex_lock(&g_mm_mu);
    mm_entry *m = NULL;
    for (int i = 0; i < g_mm_n && !m; i++)
        if (g_mm[i].M == M && g_mm[i].N == N && g_mm[i].K == K && g_mm[i].lda == lda &&
            g_mm[i].ldb == ldb && g_mm[i].ldc == ldc && g_mm[i].tb == tb && g_mm[i].beta1 == beta1 && g_mm[i].bias == hb &&
            g_mm[i].threads == th)
            m = &g_mm[i];
    if (!m) {
        int i = g_mm_n < MM_CACHE ? g_mm_n++ : g_mm_next++ % MM_CACHE;
        m = &g_mm[i];
        if (m->p) dnnl_primitive_destroy(m->p);
        *m = (mm_entry){.M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .tb = tb,
                        .beta1 = beta1, .bias = hb, .threads = th};
        m->p = mm_create(m);
    }
    dnnl_primitive_t p = m->p;
    dnnl_memory_desc_t ad = m->a, bd = m->b, cd = m->c, dd = m->d;
    pthread_mutex_unlock(&g_mm_mu);
    if (!p) return dnnl_unimplemented;
    dnnl_memory_t ma = NULL, mb = NULL, mc = NULL, mdd = NULL;
    dnnl_status_t st = dnnl_memory_create(&ma, &ad, g_eng, (void *)(uintptr_t)A);
    if (!st) st = dnnl_memory_create(&mb, &bd, g_eng, (void *)(uintptr_t)B);
    if (!st) st = dnnl_memory_create(&mc, &cd, g_eng, C);
    if (!st && hb) st = dnnl_memory_create(&mdd, &dd, g_eng, (void *)(uintptr_t)bias);
    /* a stream is one thread's: the shared one, or a call's own beside another thread's */
    int own = pthread_mutex_trylock(&g_exec_mu) == 0;
    dnnl_stream_t strm = g_strm;
    if (!st && !own) st = dnnl_stream_create(&strm, g_eng, dnnl_stream_default_flags);
    if (!st) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc},
                                   {DNNL_ARG_BIAS, mdd}};
        st = dnnl_primitive_execute(p, strm, hb ? 4 : 3, args);
        if (!st) st = dnnl_stream_wait(strm);
    }
    if (own) pthread_mutex_unlock(&g_exec_mu);
    else if (strm != g_strm) dnnl_stream_destroy(strm);
    dnnl_memory_destroy(ma);
    dnnl_memory_destroy(mb);
    dnnl_memory_destroy(mc);
    dnnl_memory_destroy(mdd);
    return st;
}

/* The 'N','N' products (dX = dout @ W) sgemm runs far below its rate and the matmul does not:
 * measured on every dX shape of gpt2-124m (B*T 256 and 1024) and 1558m (128) with
 * bench/gemm_shapes.c, one class only: few rows, a wide output and a short sum (124M's fcproj
 * dX at B*T = 256: M 256, N 3072, K 768, sgemm 156 against 213 GFLOP/s median, 1.37x; at
 * B*T = 1024 or 1558M's K = 1600 the matmul is 5% slower). A rule of the shape alone, so
 * every call of a shape takes one path whatever the technique around it. */
static int mm_nn_pays(int64_t M, int64_t N, int64_t K) { return M <= 256 && N >= 4 * K && K <= 1024; }

static _Atomic uint64_t g_fallbacks; /* k_gemm calls served by k_gemm_ref */
static _Atomic uint64_t g_fail_next; /* testing: calls still to see a failed status */

uint64_t k_gemm_fallbacks(void) { return atomic_load(&g_fallbacks); }
void k_gemm_fail_next(uint64_t n) { atomic_store(&g_fail_next, n); }

void k_gemm_ref(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                int64_t ldc) {
    int ta = transa == 'T' || transa == 't', tb = transb == 'T' || transb == 't';
#pragma omp parallel for schedule(static) if (M * N >= K_PAR_MIN)
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            float s = 0.0f;
            for (int64_t k = 0; k < K; k++)
                s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
            /* beta 0 overwrites (C may hold NaN), as BLAS does */
            C[i * ldc + j] = alpha * s + (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]);
        }
}

void k_gemm(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
            const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
            int64_t ldc) {
    if (M == 0 || N == 0) return;
    dnnl_status_t st = dnnl_invalid_arguments;
    uint64_t f = atomic_load_explicit(&g_fail_next, memory_order_relaxed);
    if (!f || !atomic_compare_exchange_strong(&g_fail_next, &f, f - 1)) {
        int tb = transb == 'T';
        if (transa == 'N' && (tb || (transb == 'N' && mm_nn_pays(M, N, K))) && alpha == 1.0f &&
            (beta == 0.0f || beta == 1.0f) && K > 0 && mm_enabled())
            st = mm_run(M, N, K, A, lda, tb, B, ldb, NULL, beta == 1.0f, C, ldc);
        if (st != dnnl_success)
            st = dnnl_sgemm(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
    if (st != dnnl_success) {
        atomic_fetch_add(&g_fallbacks, 1);
        k_gemm_ref(transa, transb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}

void k_matmul_bias_init(float *out, const float *bias, int64_t N, int64_t OC, int accumulate) {
#pragma omp parallel for schedule(static) if (N * OC >= K_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        float *o = out + i * OC;
        if (accumulate) {
#pragma omp simd
            for (int64_t j = 0; j < OC; j++) o[j] += bias[j];
        } else {
            memcpy(o, bias, (size_t)OC * sizeof(float));
        }
    }
}

void k_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                      int64_t N, int64_t C, int64_t OC, int accumulate) {
    float beta = accumulate ? 1.0f : 0.0f;
    /* the bias inside the matmul: out = acc + bias, or out + (acc + bias) accumulating (one
     * pass over out fewer; 124M at B*T = 256: 19 ms of a 1.2 s step were the bias rows) */
    if (bias && N > 0 && OC > 0 && C > 0 && mm_enabled() &&
        mm_run(N, OC, C, inp, C, 1, w, C, bias, accumulate, out, OC) == dnnl_success)
        return;
    if (bias) {
        k_matmul_bias_init(out, bias, N, OC, accumulate);
        beta = 1.0f;
    }
    k_gemm('N', 'T', N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
}

void k_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                       const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                       int accumulate_dinp) {
    /* dinp (N,C) = dout (N,OC) @ w (OC,C) */
    k_gemm('N', 'N', N, C, OC, 1.0f, dout, OC, w, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    /* dw (OC,C) += dout^T (OC,N) @ inp (N,C) */
    k_gemm('T', 'N', OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias) k_matmul_bias_grad(dbias, dout, N, OC);
}

void k_matmul_bias_grad(float *dbias, const float *dout, int64_t N, int64_t OC) {
    /* column sums, parallel over columns so no two threads touch one output */
#pragma omp parallel for schedule(static) if (N * OC >= K_PAR_MIN)
    for (int64_t j0 = 0; j0 < OC; j0 += 64) {
        int64_t j1 = j0 + 64 < OC ? j0 + 64 : OC;
        for (int64_t i = 0; i < N; i++) {
            const float *d = dout + i * OC;
#pragma omp simd
            for (int64_t j = j0; j < j1; j++) dbias[j] += d[j];
        }
    }
}
