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
#include "kernels/cpu/bf16.h"

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
    int ta, bf16; /* ta: A stored (K, M) and used transposed; bf16: A and B hold bf16 */
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
    dnnl_dims_t as = {m->lda, 1}, as_t = {1, m->lda}, cs = {m->ldc, 1}, ds = {m->N, 1};
    dnnl_dims_t bs_t = {1, m->ldb}, bs_n = {m->ldb, 1}; /* B stored (N, K): ^T; or (K, N) */
    const dnnl_data_type_t ab = m->bf16 ? dnnl_bf16 : dnnl_f32;
    if (dnnl_memory_desc_init_by_strides(&m->a, 2, ad, ab, m->ta ? as_t : as) ||
        dnnl_memory_desc_init_by_strides(&m->b, 2, bd, ab, m->tb ? bs_t : bs_n) ||
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

/* C (M, N) = op(A) @ op(B) [+ bias (N) per row] [+ C]; op(B) = B^T (B stored (N, K), tb)
 * or B (stored (K, N)); op(A) = A^T (A stored (K, M), ta) or A; with both, C = C + (op(A)
 * op(B) + bias); bf16: A and B are bf16 (uint16), C fp32. dnnl_success or why not. */
static dnnl_status_t mm_run2(int64_t M, int64_t N, int64_t K, const void *A, int64_t lda,
                             int ta, int tb, const void *B, int64_t ldb, const float *bias,
                             int beta1, float *C, int64_t ldc, int bf16) {
    int hb = bias != NULL;
    int th = omp_get_max_threads();
    pthread_mutex_lock(&g_mm_mu);
    mm_entry *m = NULL;
    for (int i = 0; i < g_mm_n && !m; i++)
        if (g_mm[i].M == M && g_mm[i].N == N && g_mm[i].K == K && g_mm[i].lda == lda &&
            g_mm[i].ldb == ldb && g_mm[i].ldc == ldc && g_mm[i].tb == tb && g_mm[i].beta1 == beta1 && g_mm[i].bias == hb &&
            g_mm[i].threads == th && g_mm[i].ta == ta && g_mm[i].bf16 == bf16)
            m = &g_mm[i];
    if (!m) {
        int i = g_mm_n < MM_CACHE ? g_mm_n++ : g_mm_next++ % MM_CACHE;
        m = &g_mm[i];
        if (m->p) dnnl_primitive_destroy(m->p);
        *m = (mm_entry){.M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .tb = tb,
                        .beta1 = beta1, .bias = hb, .threads = th, .ta = ta, .bf16 = bf16};
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

static dnnl_status_t mm_run(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                            int tb, const float *B, int64_t ldb, const float *bias, int beta1,
                            float *C, int64_t ldc) {
    return mm_run2(M, N, K, A, lda, 0, tb, B, ldb, bias, beta1, C, ldc, 0);
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

/* ---- bf16 operands (--matmul bf16) ---------------------------------------------------------
 * C's tiles (mb, nb) over K panels of kt: each panel's two operands rounded to bf16 (bf16_rne,
 * nearest even) into the workspace, then the panel's product added into C's tile (beta for the
 * first panel, 1 after). Native: the panels stored as bf16 and oneDNN's bf16 matmul (fp32
 * destination; its bf16 kernels multiply exactly and sum in fp32), for alpha 1 and beta 0 or 1.
 * Reference (any CPU, any alpha and beta, and whenever oneDNN refuses): the panels widened back
 * to fp32 (bf16-representable values) and k_gemm. Both form the same products of the same
 * rounded operands; only the order of the fp32 sums differs. */
static int g_bf16_native = -1;       /* -1: not decided yet */
static _Atomic int g_bf16_force_ref; /* testing */
static pthread_once_t g_bf16_once = PTHREAD_ONCE_INIT;

static void bf16_init(void) {
    const char *e = getenv("HPT_GEMM_BF16");
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    g_bf16_native = !(e && !strcmp(e, "ref")) && mm_enabled() &&
                    (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

int k_gemm_bf16_native(void) {
    pthread_once(&g_bf16_once, bf16_init);
    return g_bf16_native && !atomic_load(&g_bf16_force_ref);
}

int k_gemm_bf16_force_ref(int on) { return atomic_exchange(&g_bf16_force_ref, on); }

/* dst (rows, cols) dense = the rectangle of src (ld) at (r0, c0) rounded to bf16: as bf16
 * (h) or widened back to fp32 (f: narrowed into the row's own bytes, then widened in place from
 * the end). Row by row through half.c's vectorised k_bf16_narrow (bf16_rne's bits); the
 * weights are rounded twice a step, so this pass is as long as a small-M GEMM if scalar. */
static void round_rect(uint16_t *h, float *f, const float *src, int64_t ld, int64_t r0,
                       int64_t c0, int64_t rows, int64_t cols) {
#pragma omp parallel for schedule(static) if (rows * cols >= K_PAR_MIN)
    for (int64_t i = 0; i < rows; i++) {
        const float *s = src + (r0 + i) * ld + c0;
        if (h) {
            (void)k_bf16_narrow(h + i * cols, s, (size_t)cols);
        } else {
            uint16_t *hf = (uint16_t *)(void *)(f + i * cols);
            (void)k_bf16_narrow(hf, s, (size_t)cols);
            k_bf16_widen(f + i * cols, hf, (size_t)cols);
        }
    }
}

/* C (m, n) = op(A) op(B) + beta C from dense bf16 panels (A (m, k) or (k, m), B (k, n) or
 * (n, k)): k_gemm_ref's loops, for a product oneDNN refused */
static void gemm_h16_plain(int ta, int tb, int64_t m, int64_t n, int64_t k, const uint16_t *A,
                           const uint16_t *B, float beta, float *C, int64_t ldc) {
#pragma omp parallel for schedule(static) if (m * n >= K_PAR_MIN)
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t q = 0; q < k; q++)
                s += bf16_widen(ta ? A[q * m + i] : A[i * k + q]) *
                     bf16_widen(tb ? B[j * k + q] : B[q * n + j]);
            C[i * ldc + j] = s + (beta == 0.0f ? 0.0f : beta * C[i * ldc + j]);
        }
}

void k_gemm_bf16(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc, void *ws) {
    if (M == 0 || N == 0) return;
    if (K <= 0) {
        k_gemm(transa, transb, M, N, 0, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const int ta = transa == 'T' || transa == 't', tb = transb == 'T' || transb == 't';
    int native = alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && k_gemm_bf16_native();
    const size_t esz = native ? sizeof(uint16_t) : sizeof(float);
    const int64_t R = (int64_t)(HPT_MM_BF16_WS_BYTES / esz); /* panel elements */
    const int64_t kt = K < 1024 ? K : 1024, rows = R / kt;
    const int64_t mb = M < rows / 2 ? M : rows / 2;
    const int64_t nb = N < rows - mb ? N : rows - mb;
    /* op(A)'s panel (mb, kt), or (kt, mb) transposed; op(B)'s (kt, nb), or (nb, kt) */
    char *pa = ws, *pb = (char *)ws + (size_t)(mb * kt) * esz;
    for (int64_t m0 = 0; m0 < M; m0 += mb) {
        const int64_t m = M - m0 < mb ? M - m0 : mb;
        for (int64_t n0 = 0; n0 < N; n0 += nb) {
            const int64_t n = N - n0 < nb ? N - n0 : nb;
            for (int64_t k0 = 0; k0 < K; k0 += kt) {
                const int64_t k = K - k0 < kt ? K - k0 : kt;
                uint16_t *ha = native ? (uint16_t *)pa : NULL, *hb = native ? (uint16_t *)pb : NULL;
                float *fa = native ? NULL : (float *)pa, *fb = native ? NULL : (float *)pb;
                if (ta) round_rect(ha, fa, A, lda, k0, m0, k, m);
                else round_rect(ha, fa, A, lda, m0, k0, m, k);
                if (tb) round_rect(hb, fb, B, ldb, n0, k0, n, k);
                else round_rect(hb, fb, B, ldb, k0, n0, k, n);
                const float b = k0 == 0 ? beta : 1.0f;
                float *Ct = C + m0 * ldc + n0;
                if (native && mm_run2(m, n, k, pa, ta ? m : k, ta, tb, pb, tb ? k : n, NULL,
                                      b == 1.0f, Ct, ldc, 1) == dnnl_success)
                    continue;
                if (native) { /* oneDNN refused: the plain loops on the bf16 panels, counted
                               * as k_gemm's fallbacks are */
                    atomic_fetch_add(&g_fallbacks, 1);
                    gemm_h16_plain(ta, tb, m, n, k, ha, hb, b, Ct, ldc);
                    continue;
                }
                k_gemm(transa, transb, m, n, k, alpha, fa, ta ? m : k, fb, tb ? k : n, b, Ct,
                       ldc);
            }
        }
    }
}

void k_matmul_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                           int64_t N, int64_t C, int64_t OC, int accumulate, void *ws) {
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) { /* fp32, added before the products (no operand of a product) */
        k_matmul_bias_init(out, bias, N, OC, accumulate);
        beta = 1.0f;
    }
    /* out (N,OC) (+)= bf16(inp) (N,C) @ bf16(w)^T (C,OC) */
    k_gemm_bf16('N', 'T', N, OC, C, 1.0f, inp, C, w, C, beta, out, OC, ws);
}

void k_matmul_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                            int accumulate_dinp, void *ws) {
    /* dinp (N,C) = bf16(dout) (N,OC) @ bf16(w) (OC,C) */
    k_gemm_bf16('N', 'N', N, C, OC, 1.0f, dout, OC, w, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C,
                ws);
    /* dw (OC,C) += bf16(dout)^T (OC,N) @ bf16(inp) (N,C) */
    k_gemm_bf16('T', 'N', OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C, ws);
    /* the bias's gradient is a sum of fp32 values: no product, nothing rounded */
    if (dbias) k_matmul_bias_grad(dbias, dout, N, OC);
}
