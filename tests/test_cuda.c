/* test_cuda.c: what only a GPU can show about the CUDA backend, beside test_backend's op-by-op
 * comparison with the CPU (tiny shapes) and test_cuda_gpt2's training step:
 *   - memory: the CUDA context's and the backend's own overhead, measured with cudaMemGetInfo
 *     and printed; the device region taken once (the budget), cudaMemGetInfo's used bytes growing
 *     by the region's size (within the driver's 2 MiB granularity) and not moving while buffers
 *     are carved and given back (no cudaMalloc or cudaFree inside a step); the accounted bytes
 *     equal to the requests; a request past the budget refused with HPT_ERR_OOM; the host tier
 *     pinned, zero-filled, accounted;
 *   - copies on their own streams ordered by events: a D2H right after an op sees the op's result,
 *     an op right after an H2D sees the copied bytes (64 MiB, so the copy takes a while);
 *   - attention at T = 1, 2, 3 (at T = 1 dq and dk exactly 0, dv = dO: D summed as each dP is);
 *   - the bf16 flash pair (--matmul bf16, the tensor-core kernels) against the CPU's bf16 pair:
 *     heads of 64 and 128, NKV = NH and NH / 2, T = 1, 2, 300 and 300 packed, norm-wise 5e-5;
 *   - larger shapes than test_backend's: attention with T = 300 (several key tiles; NKV = NH and
 *     grouped-query; head sizes 32, 64, 128 and 80), the Llama ops (RMSNorm, SwiGLU, RoPE) at a 1B model's widths, layernorm,
 *     the embedding backward and in-place 16-bit conversions of 100003 values (several ranges),
 *     against the CPU within 1e-4 relative to max(1, |cpu|) and the same bits on a second run;
 *   - the column sums (bias and norm weight gradients) over 10007 rows, against the CPU;
 *   - the bf16 GEMM (bf16 inputs, fp32 accumulation) against the CPU's fp32 GEMM of the same
 *     bf16 values, within 2K 2^-23 sum|a b| per element (two fp32 summations, each add rounding
 *     by at most an ulp); TF32 when asked, within (2^-10 + 2K 2^-23) sum|a b|.
 * Without a GPU (or without a CUDA build) it prints "SKIP: no GPU" and exits 77 (ctest's skip);
 * with a GPU present (t_gpu_present) and the backend not started it fails. */
#include "testlib.h"

#include "core/core.h"
#include "kernels/backend.h"
#ifdef HPT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef HPT_HAVE_CUDA
/* The reference sums and bounds are in double from fp32 values on purpose. */
#pragma GCC diagnostic ignored "-Wdouble-promotion"

static hpt_mem *g_mem;
static const hpt_backend *cu, *cpu;

static uint64_t g_seed = 42;
static float frand(void) { /* [-1, 1) */
    g_seed = g_seed * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_seed >> 40) / 8388608.0 - 1.0);
}
static float *rnd(size_t n, float s) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = s * frand();
    return x;
}
static void *dput(const void *h, size_t bytes) {
    void *d = NULL;
    CHECK_OK(cu->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, bytes, &d));
    if (h) cu->copy(d, h, bytes, HPT_COPY_H2D);
    return d;
}
static void dget(void *h, const void *d, size_t bytes) {
    cu->sync();
    cu->copy(h, d, bytes, HPT_COPY_D2H);
}
static void dfree(void *d, size_t bytes) { cu->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, d, bytes); }
/* largest |a - b| / max(1, |b|) */
static double maxrel(const float *a, const float *b, size_t n) {
    double e = 0.0;
    for (size_t i = 0; i < n; i++) e = fmax(e, isnan(a[i]) ? INFINITY : fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i])));
    return e;
}
#define MiB (1024.0 * 1024.0)

/* f0: cudaMemGetInfo's free bytes once the context existed, before the backend's setup */
static void t_memory(size_t f0) {
    size_t tot, f1, f2, f3, region, used;
    CHECK_OK(hpt_cuda_mem_info(&f1, &tot));
    printf("GPU memory: total %.1f MiB, in use with the CUDA context alone %.1f MiB (and any other process's)\n",
           tot / MiB, (tot - f0) / MiB);
    hpt_cuda_region(&region, &used);
    CHECK(region == 0); /* nothing taken before the first device allocation */
    printf("the backend's fixed overhead (cuBLAS workspace, scratch, staging): %.1f MiB\n", ((double)f0 - (double)f1) / MiB);
    const uint64_t budget = 256u << 20;
    hpt_mem_set_budget(g_mem, HPT_TIER_DEVICE, budget);
    void *a = NULL, *b = NULL, *c = NULL, *h = NULL;
    CHECK_OK(cu->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, 1000003, &a));
    hpt_cuda_region(&region, &used);
    CHECK_OK(hpt_cuda_mem_info(&f2, &tot));
    double grew = (double)f1 - (double)f2;
    printf("device region %.1f MiB (budget %.1f MiB); cudaMemGetInfo's used bytes grew by %.1f MiB\n",
           region / MiB, budget / MiB, grew / MiB);
    CHECK(region == budget);
    /* the memory behind the region: what the allocator reached, in 64 MiB chunks (vmm.cu), or
     * the whole region (one cudaMalloc, HPT_CUDA_VMM=0) */
    const size_t backed2 = hpt_cuda_region_backed();
    printf("memory behind the region: %.1f MiB (%s)\n", backed2 / MiB,
           backed2 < region ? "mapped as the allocator reaches it" : "the whole region");
    CHECK(backed2 >= 1000192 && backed2 <= region);
    CHECK_MSG(fabs(grew - (double)backed2) <= 2.0 * MiB, "used bytes grew by %.0f, backed %zu", grew, backed2);
    CHECK_OK(cu->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, 77u << 20, &b));
    CHECK_OK(cu->alloc(g_mem, HPT_TIER_HOST, HPT_CAT_IO, 3u << 20, &h));
    hpt_mem_stats st;
    hpt_mem_get_stats(g_mem, &st);
    CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS] == 1000003);
    CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] == 77u << 20);
    CHECK(st.live_bytes[HPT_TIER_HOST][HPT_CAT_IO] == 3u << 20);
    hpt_cuda_region(&region, &used);
    CHECK(used == ((1000003 + 255) / 256 * 256) + (77u << 20)); /* 256-byte pieces */
    /* past the budget: refused, recoverably */
    CHECK(cu->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, 200u << 20, &c) == HPT_ERR_OOM && c == NULL);
    /* zero-filled, and the host tier is pinned memory the copies use */
    unsigned char *z = malloc(1000003);
    dget(z, a, 1000003);
    int zero = 1;
    for (size_t i = 0; i < 1000003; i++) zero &= z[i] == 0;
    CHECK(zero);
    free(z);
    CHECK_OK(hpt_cuda_mem_info(&f3, &tot));
    /* 78 MiB carved and 3 MiB pinned since f2: the used bytes move by what was mapped behind the
     * region since (a chunk, or nothing with one cudaMalloc) and nothing else; the driver's own
     * bookkeeping may move a page or two */
    const size_t backed3 = hpt_cuda_region_backed();
    CHECK(backed3 >= ((1000003 + 255) / 256 * 256) + (77u << 20) && backed3 <= region);
    CHECK_MSG(fabs((double)f2 - (double)f3 - ((double)backed3 - (double)backed2)) <= 4.0 * MiB,
              "cudaMemGetInfo moved by %.0f bytes while carving, the mapping by %.0f",
              (double)f2 - (double)f3, (double)backed3 - (double)backed2);
    cu->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_PARAMS, a, 1000003);
    cu->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, b, 77u << 20);
    cu->free(g_mem, HPT_TIER_HOST, HPT_CAT_IO, h, 3u << 20);
    hpt_cuda_region(&region, &used);
    CHECK(used == 0);
    hpt_mem_get_stats(g_mem, &st);
    CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS] == 0 && st.live_bytes[HPT_TIER_HOST][HPT_CAT_IO] == 0);
    hpt_mem_set_budget(g_mem, HPT_TIER_DEVICE, 0);
}

static void t_copies(void) {
    const size_t n = 16u << 20; /* 64 MiB */
    float *host = NULL, *d = dput(NULL, n * 4);
    CHECK_OK(cu->alloc(g_mem, HPT_TIER_HOST, HPT_CAT_IO, n * 4, (void **)&host));
    cu->fill(d, n, 3.5f);
    cu->copy(host, d, n * 4, HPT_COPY_D2H); /* no sync between: the copy waits for the fill */
    int ok = 1;
    for (size_t i = 0; i < n; i += 4097) ok &= host[i] == 3.5f;
    ok &= host[n - 1] == 3.5f;
    CHECK_MSG(ok, "a D2H copy did not wait for the op before it");
    for (size_t i = 0; i < n; i++) host[i] = (float)(i % 1000);
    cu->copy(d, host, n * 4, HPT_COPY_H2D);
    cu->scale(d, n, 2.0f); /* waits for the copy */
    cu->copy(host, d, n * 4, HPT_COPY_D2H);
    ok = 1;
    for (size_t i = 0; i < n; i += 4097) ok &= host[i] == 2.0f * (float)(i % 1000);
    CHECK_MSG(ok, "an op did not wait for the H2D copy before it");
    cu->free(g_mem, HPT_TIER_HOST, HPT_CAT_IO, host, n * 4);
    dfree(d, n * 4);
}

/* attention at T = 300 (five tiles of 64 rows, ten of 32), both versions, forward and backward,
 * twice; multi-head (NKV = NH) and grouped-query (NKV = NH / 2); head sizes 64 and 128 (the tiled
 * flash kernels' 64- and 32-row tiles), 32, and 80 (no tiled kernel: the per-row ones) */
static void t_attention_hs(int AC) {
    enum { AB = 2, AT = 300, ANH = 4 };
    for (int nkv = ANH; nkv >= ANH / 2; nkv /= 2) {
        const int hs = AC / ANH;
        size_t nq = (size_t)AB * AT * (ANH + 2 * nkv) * hs, no = (size_t)AB * AT * AC, na = (size_t)AB * ANH * AT * AT;
        size_t nl = (size_t)AB * ANH * AT;
        float *qkv = rnd(nq, 1.0f), *dout = rnd(no, 1.0f);
        float *o_c = malloc(no * 4), *l_c = malloc(nl * 4), *dq_c = malloc(nq * 4), *att_c = malloc(na * 4);
        float *o_g = malloc(no * 4), *l_g = malloc(nl * 4), *dq_g = malloc(nq * 4), *dq_g2 = malloc(nq * 4);
        float *scr = malloc(nl * 4);
        for (int flash = 0; flash < 2; flash++) {
            if (flash) {
                cpu->flash_attention_forward(o_c, l_c, qkv, AB, AT, AC, ANH, nkv);
                cpu->flash_attention_backward(dq_c, scr, dout, qkv, o_c, l_c, AB, AT, AC, ANH, nkv);
            } else {
                cpu->attention_forward(o_c, att_c, qkv, AB, AT, AC, ANH, nkv);
                cpu->attention_backward(dq_c, scr, dout, qkv, att_c, AB, AT, AC, ANH, nkv);
            }
            float *dqkv = dput(qkv, nq * 4), *ddout = dput(dout, no * 4), *dO = dput(NULL, no * 4);
            float *dl = dput(NULL, nl * 4), *datt = flash ? NULL : dput(NULL, na * 4);
            float *ddq = dput(NULL, nq * 4), *dscr = dput(NULL, nl * 4);
            for (int rep = 0; rep < 2; rep++) {
                if (flash) {
                    cu->flash_attention_forward(dO, dl, dqkv, AB, AT, AC, ANH, nkv);
                    cu->flash_attention_backward(ddq, dscr, ddout, dqkv, dO, dl, AB, AT, AC, ANH, nkv);
                } else {
                    cu->attention_forward(dO, datt, dqkv, AB, AT, AC, ANH, nkv);
                    cu->attention_backward(ddq, dscr, ddout, dqkv, datt, AB, AT, AC, ANH, nkv);
                }
                dget(rep ? dq_g2 : dq_g, ddq, nq * 4);
            }
            dget(o_g, dO, no * 4);
            double eo = maxrel(o_g, o_c, no), ed = maxrel(dq_g, dq_c, nq), el = 0.0;
            if (flash) {
                dget(l_g, dl, nl * 4);
                el = maxrel(l_g, l_c, nl);
            }
            printf("%s attention T=%d NH=%d NKV=%d hs=%d: out %.2e, lse %.2e, dqkv %.2e against the cpu\n",
                   flash ? "flash" : "plain", AT, ANH, nkv, hs, eo, el, ed);
            CHECK_MSG(eo <= 1e-4 && el <= 1e-4 && ed <= 1e-4, "%s attention NKV=%d beyond 1e-4", flash ? "flash" : "plain", nkv);
            CHECK_MSG(!memcmp(dq_g, dq_g2, nq * 4), "attention backward: two runs differ");
            dfree(dqkv, nq * 4), dfree(ddout, no * 4), dfree(dO, no * 4), dfree(dl, nl * 4);
            if (datt) dfree(datt, na * 4);
            dfree(ddq, nq * 4), dfree(dscr, nl * 4);
        }
        free(qkv), free(dout), free(o_c), free(l_c), free(dq_c), free(att_c), free(o_g), free(l_g), free(dq_g), free(dq_g2), free(scr);
    }
}

static void t_attention(void) {
    const int widths[] = {256, 512, 128, 320};
    for (int i = 0; i < 4; i++) t_attention_hs(widths[i]);
}

/* The flash pair with bf16 operands (--matmul bf16; attention_bf16.cu's tensor-core kernels)
 * against the CPU's bf16 pair: heads of 64 and 128, NH = 4 over NKV = 4 and 2, T = 1, 2, 300
 * (T = 300 also packed: examples of 37 tokens), forward and backward twice (the same bits).
 * Norm-wise within 5e-5 (test_matmul's ATTN_BOUND: the same bf16 operands and rule, only the
 * fp32 sums' order and expf differ, and a P or dS whose rounding flips moves by a bf16 step;
 * PyTorch against itself with fp64 sums moves dqkv by 2.9e-5). */
static void t_attention_bf16(void) {
    enum { AB = 2, ANH = 4 };
    const int hds[2] = {64, 128}, Ts[4] = {1, 2, 300, 300};
    for (int hi = 0; hi < 2; hi++)
        for (int nkv = ANH; nkv >= ANH / 2; nkv /= 2)
            for (int ti = 0; ti < 4; ti++) {
                const int hs = hds[hi], AC = ANH * hs, AT = Ts[ti], packed = ti == 3;
                const size_t nq = (size_t)AB * AT * (ANH + 2 * nkv) * hs, no = (size_t)AB * AT * AC;
                const size_t nl = (size_t)AB * ANH * AT;
                float *qkv = rnd(nq, 1.0f), *dout = rnd(no, 1.0f);
                float *o_c = malloc(no * 4), *l_c = malloc(nl * 4), *dq_c = malloc(nq * 4);
                float *o_g = malloc(no * 4), *l_g = malloc(nl * 4), *dq_g = malloc(nq * 4);
                float *dq_g2 = malloc(nq * 4), *scr = malloc(nl * 4);
                int32_t *pos = malloc((size_t)AB * AT * 4);
                for (int i = 0; i < AB * AT; i++) pos[i] = (i % AT) % 37;
                const int32_t *hp = packed ? pos : NULL;
                cpu->flash_attention_forward_bf16(o_c, l_c, qkv, AB, AT, AC, ANH, nkv, hp, 0);
                cpu->flash_attention_backward_bf16(dq_c, scr, dout, qkv, o_c, l_c, AB, AT, AC, ANH,
                                                   nkv, hp, 0);
                float *dqkv = dput(qkv, nq * 4), *ddout = dput(dout, no * 4), *dO = dput(NULL, no * 4);
                float *dl = dput(NULL, nl * 4), *ddq = dput(NULL, nq * 4), *dscr = dput(NULL, nl * 4);
                int32_t *dp = packed ? dput(pos, (size_t)AB * AT * 4) : NULL;
                for (int rep = 0; rep < 2; rep++) {
                    cu->flash_attention_forward_bf16(dO, dl, dqkv, AB, AT, AC, ANH, nkv, dp, 0);
                    cu->flash_attention_backward_bf16(ddq, dscr, ddout, dqkv, dO, dl, AB, AT, AC, ANH,
                                                      nkv, dp, 0);
                    dget(rep ? dq_g2 : dq_g, ddq, nq * 4);
                }
                dget(o_g, dO, no * 4), dget(l_g, dl, nl * 4);
                const double eo = t_rel_err(o_g, o_c, no), el = t_rel_err(l_g, l_c, nl);
                const double ed = t_rel_err(dq_g, dq_c, nq);
                printf("bf16 flash attention T=%d%s NH=%d NKV=%d hs=%d: out %.2e, lse %.2e, dqkv "
                       "%.2e against the cpu's bf16 pair (norm-wise; elementwise %.1e %.1e)\n", AT,
                       packed ? " packed" : "", ANH, nkv, hs, eo, el, ed, maxrel(o_g, o_c, no),
                       maxrel(dq_g, dq_c, nq));
                CHECK_MSG(eo <= 5e-5 && el <= 5e-5 && ed <= 5e-5, "bf16 flash attention T=%d hs=%d "
                          "NKV=%d beyond 5e-5: out %.3g lse %.3g dqkv %.3g", AT, hs, nkv, eo, el, ed);
                CHECK_MSG(!memcmp(dq_g, dq_g2, nq * 4), "bf16 attention backward: two runs differ");
                dfree(dqkv, nq * 4), dfree(ddout, no * 4), dfree(dO, no * 4), dfree(dl, nl * 4);
                dfree(ddq, nq * 4), dfree(dscr, nl * 4);
                if (dp) dfree(dp, (size_t)AB * AT * 4);
                free(qkv), free(dout), free(o_c), free(l_c), free(dq_c), free(o_g), free(l_g);
                free(dq_g), free(dq_g2), free(scr), free(pos);
            }
}

/* attention at T = 1, 2, 3, both versions, NKV = NH and grouped-query, against the CPU within
 * 1e-4; at T = 1 (one key: P = 1, O = v) dq and dk are exactly 0 and dv is dO, bit for bit: the
 * backward's D sums in the order of each dP (attention.cu), so dP - D is exactly 0 there */
static void t_attention_short(void) {
    enum { SB = 2, SC = 64, SNH = 4 };
    const int hs = SC / SNH;
    for (int T = 1; T <= 3; T++)
        for (int nkv = SNH; nkv >= SNH / 2; nkv /= 2)
            for (int flash = 0; flash < 2; flash++) {
                const int W = (SNH + 2 * nkv) * hs;
                size_t nq = (size_t)SB * T * W, no = (size_t)SB * T * SC, na = (size_t)SB * SNH * T * T;
                size_t nl = (size_t)SB * SNH * T;
                float *qkv = rnd(nq, 1.0f), *dout = rnd(no, 1.0f);
                float *o_c = malloc(no * 4), *l_c = malloc(nl * 4), *dq_c = malloc(nq * 4), *att_c = malloc(na * 4);
                float *dq_g = malloc(nq * 4), *scr = malloc(nl * 4);
                float *dqkv = dput(qkv, nq * 4), *ddout = dput(dout, no * 4), *dO = dput(NULL, no * 4);
                float *dl = dput(NULL, nl * 4), *datt = dput(NULL, na * 4), *ddq = dput(NULL, nq * 4);
                float *dscr = dput(NULL, nl * 4);
                if (flash) {
                    cpu->flash_attention_forward(o_c, l_c, qkv, SB, T, SC, SNH, nkv);
                    cpu->flash_attention_backward(dq_c, scr, dout, qkv, o_c, l_c, SB, T, SC, SNH, nkv);
                    cu->flash_attention_forward(dO, dl, dqkv, SB, T, SC, SNH, nkv);
                    cu->flash_attention_backward(ddq, dscr, ddout, dqkv, dO, dl, SB, T, SC, SNH, nkv);
                } else {
                    cpu->attention_forward(o_c, att_c, qkv, SB, T, SC, SNH, nkv);
                    cpu->attention_backward(dq_c, scr, dout, qkv, att_c, SB, T, SC, SNH, nkv);
                    cu->attention_forward(dO, datt, dqkv, SB, T, SC, SNH, nkv);
                    cu->attention_backward(ddq, dscr, ddout, dqkv, datt, SB, T, SC, SNH, nkv);
                }
                dget(dq_g, ddq, nq * 4);
                double ed = maxrel(dq_g, dq_c, nq);
                printf("%s attention T=%d NKV=%d: dqkv %.2e against the cpu\n", flash ? "flash" : "plain", T, nkv, ed);
                CHECK_MSG(ed <= 1e-4, "%s attention T=%d NKV=%d: dqkv %.3g beyond 1e-4", flash ? "flash" : "plain", T, nkv, ed);
                if (T == 1) { /* dq, dk exactly 0; dv = dO of the group's heads, summed in order */
                    int zero = 1, dv_ok = 1;
                    for (int b = 0; b < SB; b++) {
                        const float *r = dq_g + (size_t)b * W, *d = dout + (size_t)b * SC;
                        for (int i = 0; i < (SNH + nkv) * hs; i++) zero &= r[i] == 0.0f;
                        for (int kh = 0; kh < nkv; kh++)
                            for (int i = 0; i < hs; i++) {
                                float s = 0.0f;
                                for (int g = 0; g < SNH / nkv; g++) s += d[(kh * (SNH / nkv) + g) * hs + i];
                                dv_ok &= r[(SNH + nkv + kh) * hs + i] == s;
                            }
                    }
                    CHECK_MSG(zero, "%s attention T=1 NKV=%d: dq or dk not exactly 0", flash ? "flash" : "plain", nkv);
                    CHECK_MSG(dv_ok, "%s attention T=1 NKV=%d: dv is not the sum of dO", flash ? "flash" : "plain", nkv);
                }
                dfree(dqkv, nq * 4), dfree(ddout, no * 4), dfree(dO, no * 4), dfree(dl, nl * 4);
                dfree(datt, na * 4), dfree(ddq, nq * 4), dfree(dscr, nl * 4);
                free(qkv), free(dout), free(o_c), free(l_c), free(dq_c), free(att_c), free(dq_g), free(scr);
            }
}

/* the Llama ops at a 1B model's width (C 2048, FF 8192, hd 64, NH 32, NKV 8), twice */
static void t_llama(void) {
    enum { LN = 64, LC = 2048, FF = 8192, NHq = 32, NKVq = 8, HD = 64, LT = 16, MAXT = 64 };
    const size_t W = (size_t)(NHq + 2 * NKVq) * HD;
    float *x = rnd((size_t)LN * LC, 2.0f), *w = rnd(LC, 1.0f), *dy = rnd((size_t)LN * LC, 1.0f);
    float *h = rnd((size_t)LN * 2 * FF, 4.0f), *dsw = rnd((size_t)LN * FF, 1.0f), *qkv = rnd((size_t)LN * W, 1.0f);
    float *cs = malloc((size_t)MAXT * HD / 2 * 4), *sn = malloc((size_t)MAXT * HD / 2 * 4);
    for (int p = 0; p < MAXT; p++)
        for (int i = 0; i < HD / 2; i++) {
            double a = p * pow(500000.0, -2.0 * i / HD);
            cs[p * HD / 2 + i] = (float)cos(a), sn[p * HD / 2 + i] = (float)sin(a);
        }
    /* the CPU: rmsnorm out, rstd, dinp, dw; swiglu out, dh; rope forward then backward */
    size_t sz[7] = {(size_t)LN * LC, LN, (size_t)LN * LC, LC, (size_t)LN * FF, (size_t)LN * 2 * FF, (size_t)LN * W};
    float *c[7], *g[7], *g2[7];
    for (int k = 0; k < 7; k++) c[k] = calloc(sz[k], 4), g[k] = malloc(sz[k] * 4), g2[k] = malloc(sz[k] * 4);
    cpu->rmsnorm_forward(c[0], c[1], x, w, LN, LC, 1e-5f);
    cpu->rmsnorm_backward(c[2], c[3], dy, x, w, c[1], LN, LC);
    cpu->swiglu_forward(c[4], h, LN, FF);
    cpu->swiglu_backward(c[5], dsw, h, LN, FF);
    memcpy(c[6], qkv, sz[6] * 4);
    cpu->rope_forward(c[6], cs, sn, LN / LT, LT, NHq, NKVq, HD, 3);
    float *rot = malloc(sz[6] * 4);
    memcpy(rot, c[6], sz[6] * 4);
    for (int rep = 0; rep < 2; rep++) {
        float **o = rep ? g2 : g;
        float *dx = dput(x, sz[0] * 4), *dw = dput(w, LC * 4), *ddy = dput(dy, sz[0] * 4), *dh = dput(h, sz[5] * 4);
        float *ddsw = dput(dsw, sz[4] * 4), *dq = dput(qkv, sz[6] * 4), *dcs = dput(cs, (size_t)MAXT * HD / 2 * 4);
        float *dsn = dput(sn, (size_t)MAXT * HD / 2 * 4), *d[7];
        for (int k = 0; k < 6; k++) d[k] = dput(NULL, sz[k] * 4);
        d[6] = dq;
        cu->rmsnorm_forward(d[0], d[1], dx, dw, LN, LC, 1e-5f);
        cu->rmsnorm_backward(d[2], d[3], ddy, dx, dw, d[1], LN, LC);
        cu->swiglu_forward(d[4], dh, LN, FF);
        cu->swiglu_backward(d[5], ddsw, dh, LN, FF);
        cu->rope_forward(dq, dcs, dsn, LN / LT, LT, NHq, NKVq, HD, 3);
        for (int k = 0; k < 7; k++) dget(o[k], d[k], sz[k] * 4);
        cu->rope_backward(dq, dcs, dsn, LN / LT, LT, NHq, NKVq, HD, 3); /* back to qkv, within rounding */
        float *back = malloc(sz[6] * 4);
        dget(back, dq, sz[6] * 4);
        double eb = maxrel(back, qkv, sz[6]);
        CHECK_MSG(eb <= 1e-5, "rope backward of forward: %.3e from the input", eb);
        free(back);
        for (int k = 0; k < 6; k++) dfree(d[k], sz[k] * 4);
        dfree(dx, sz[0] * 4), dfree(dw, LC * 4), dfree(ddy, sz[0] * 4), dfree(dh, sz[5] * 4), dfree(ddsw, sz[4] * 4);
        dfree(dq, sz[6] * 4), dfree(dcs, (size_t)MAXT * HD / 2 * 4), dfree(dsn, (size_t)MAXT * HD / 2 * 4);
    }
    const char *nm[7] = {"rmsnorm out", "rmsnorm rstd", "rmsnorm dinp", "rmsnorm dw", "swiglu out", "swiglu dh", "rope"};
    for (int k = 0; k < 7; k++) {
        double e = maxrel(g[k], k == 6 ? rot : c[k], sz[k]);
        printf("%s: %.2e against the cpu\n", nm[k], e);
        CHECK_MSG(e <= 1e-4, "%s %.3e", nm[k], e);
        CHECK_MSG(!memcmp(g[k], g2[k], sz[k] * 4), "%s: two runs differ", nm[k]);
    }
    for (int k = 0; k < 7; k++) free(c[k]), free(g[k]), free(g2[k]);
    free(x), free(w), free(dy), free(h), free(dsw), free(qkv), free(cs), free(sn), free(rot);
}

/* the column sums (colsum.cu: chunks of rows across the GPU) at N = 10007 rows (several chunks,
 * the last one short) and C = 1000 columns (not a multiple of 32), accumulating into nonzero
 * gradients: matmul_backward's dbias, layernorm_backward's dw and db, rmsnorm_backward's dw,
 * against the CPU (rows in order) within 1e-4 and the same bits twice */
static void t_colsums(void) {
    enum { N = 10007, C = 1000, K = 8 };
    const size_t nc = (size_t)N * C;
    float *dy = rnd(nc, 1.0f), *x = rnd(nc, 2.0f), *w = rnd(C, 1.0f), *mu = rnd(N, 0.5f), *rs = rnd(N, 1.0f);
    float *g0 = rnd(C, 1.0f), *g1 = rnd(C, 1.0f), *xin = rnd((size_t)N * K, 1.0f), *wk = rnd((size_t)C * K, 1.0f);
    float *c_db = malloc(C * 4), *c_lw = malloc(C * 4), *c_lb = malloc(C * 4), *c_rw = malloc(C * 4);
    memcpy(c_db, g0, C * 4), memcpy(c_lw, g0, C * 4), memcpy(c_lb, g1, C * 4), memcpy(c_rw, g1, C * 4);
    float *c_dx = calloc(nc, 4), *c_din = calloc((size_t)N * K, 4), *c_dwk = calloc((size_t)C * K, 4);
    cpu->matmul_backward(c_din, c_dwk, c_db, dy, xin, wk, N, K, C, 0);
    cpu->layernorm_backward(c_dx, c_lw, c_lb, dy, x, w, mu, rs, N, C);
    memset(c_dx, 0, nc * 4);
    cpu->rmsnorm_backward(c_dx, c_rw, dy, x, w, rs, N, C);
    float *got[2][4];
    for (int rep = 0; rep < 2; rep++) {
        float *ddy = dput(dy, nc * 4), *dx = dput(x, nc * 4), *dw = dput(w, C * 4), *dmu = dput(mu, N * 4);
        float *drs = dput(rs, N * 4), *ddx = dput(NULL, nc * 4), *dxin = dput(xin, (size_t)N * K * 4);
        float *dwk = dput(wk, (size_t)C * K * 4), *ddin = dput(NULL, (size_t)N * K * 4), *ddwk = dput(NULL, (size_t)C * K * 4);
        float *o[4] = {dput(g0, C * 4), dput(g0, C * 4), dput(g1, C * 4), dput(g1, C * 4)};
        cu->fill(ddwk, (size_t)C * K, 0.0f);
        cu->matmul_backward(ddin, ddwk, o[0], ddy, dxin, dwk, N, K, C, 0);
        cu->fill(ddx, nc, 0.0f);
        cu->layernorm_backward(ddx, o[1], o[2], ddy, dx, dw, dmu, drs, N, C);
        cu->fill(ddx, nc, 0.0f);
        cu->rmsnorm_backward(ddx, o[3], ddy, dx, dw, drs, N, C);
        for (int k = 0; k < 4; k++) {
            got[rep][k] = malloc(C * 4);
            dget(got[rep][k], o[k], C * 4);
            dfree(o[k], C * 4);
        }
        dfree(ddy, nc * 4), dfree(dx, nc * 4), dfree(dw, C * 4), dfree(dmu, N * 4), dfree(drs, N * 4);
        dfree(ddx, nc * 4), dfree(dxin, (size_t)N * K * 4), dfree(dwk, (size_t)C * K * 4);
        dfree(ddin, (size_t)N * K * 4), dfree(ddwk, (size_t)C * K * 4);
    }
    const float *ref[4] = {c_db, c_lw, c_lb, c_rw};
    const char *nm[4] = {"matmul dbias", "layernorm dw", "layernorm db", "rmsnorm dw"};
    for (int k = 0; k < 4; k++) {
        double e = maxrel(got[0][k], ref[k], C);
        printf("%s (%d x %d, column sums): %.2e against the cpu\n", nm[k], N, C, e);
        CHECK_MSG(e <= 1e-4, "%s %.3e", nm[k], e);
        CHECK_MSG(!memcmp(got[0][k], got[1][k], C * 4), "%s: two runs differ", nm[k]);
        free(got[0][k]), free(got[1][k]);
    }
    free(dy), free(x), free(w), free(mu), free(rs), free(g0), free(g1), free(xin), free(wk);
    free(c_db), free(c_lw), free(c_lb), free(c_rw), free(c_dx), free(c_din), free(c_dwk);
}

/* layernorm and the embedding backward at a GPT-2-like width, twice */
static void t_rows(void) {
    enum { RN = 512, RC = 768, RV = 1000, RT = 128 };
    float *x = rnd((size_t)RN * RC, 2.0f), *w = rnd(RC, 1.0f), *b = rnd(RC, 1.0f), *dy = rnd((size_t)RN * RC, 1.0f);
    int32_t tok[RN];
    for (int i = 0; i < RN; i++) tok[i] = (int32_t)((unsigned)((frand() + 1.0f) * 60.0f) % RV); /* repeats */
    float *y_c = malloc((size_t)RN * RC * 4), *mu = malloc(RN * 4), *rs = malloc(RN * 4);
    float *dx_c = calloc((size_t)RN * RC, 4), *dw_c = calloc(RC, 4), *db_c = calloc(RC, 4);
    float *dwte_c = calloc((size_t)RV * RC, 4), *dwpe_c = calloc((size_t)RT * RC, 4);
    cpu->layernorm_forward(y_c, mu, rs, x, w, b, RN, RC);
    cpu->layernorm_backward(dx_c, dw_c, db_c, dy, x, w, mu, rs, RN, RC);
    cpu->encoder_backward(dwte_c, dwpe_c, dy, tok, RN / RT, RT, RC);
    float *g[2][5];
    for (int rep = 0; rep < 2; rep++) {
        float *dx = dput(x, (size_t)RN * RC * 4), *dw = dput(w, RC * 4), *db = dput(b, RC * 4), *ddy = dput(dy, (size_t)RN * RC * 4);
        float *dy_ = dput(NULL, (size_t)RN * RC * 4), *dmu = dput(NULL, RN * 4), *drs = dput(NULL, RN * 4);
        float *ddx = dput(NULL, (size_t)RN * RC * 4), *ddw = dput(NULL, RC * 4), *ddb = dput(NULL, RC * 4);
        float *dwte = dput(NULL, (size_t)RV * RC * 4), *dwpe = dput(NULL, (size_t)RT * RC * 4);
        int32_t *dtok = dput(tok, sizeof tok);
        cu->layernorm_forward(dy_, dmu, drs, dx, dw, db, RN, RC);
        cu->layernorm_backward(ddx, ddw, ddb, ddy, dx, dw, dmu, drs, RN, RC);
        cu->encoder_backward(dwte, dwpe, ddy, dtok, RN / RT, RT, RC);
        size_t sz[5] = {(size_t)RN * RC, (size_t)RN * RC, RC, (size_t)RV * RC, (size_t)RT * RC};
        float *src[5] = {dy_, ddx, ddw, dwte, dwpe};
        for (int k = 0; k < 5; k++) {
            g[rep][k] = malloc(sz[k] * 4);
            dget(g[rep][k], src[k], sz[k] * 4);
        }
        if (!rep) {
            const float *ref[5] = {y_c, dx_c, dw_c, dwte_c, dwpe_c};
            const char *nm[5] = {"layernorm out", "layernorm dinp", "layernorm dw", "dwte", "dwpe"};
            for (int k = 0; k < 5; k++) {
                double e = maxrel(g[0][k], ref[k], sz[k]);
                printf("%s (%d x %d): %.2e against the cpu\n", nm[k], RN, RC, e);
                CHECK_MSG(e <= 1e-4, "%s %.3e", nm[k], e);
            }
        } else {
            for (int k = 0; k < 5; k++) CHECK_MSG(!memcmp(g[0][k], g[1][k], sz[k] * 4), "run twice: output %d differs", k);
        }
        dfree(dx, (size_t)RN * RC * 4), dfree(dw, RC * 4), dfree(db, RC * 4), dfree(ddy, (size_t)RN * RC * 4);
        dfree(dy_, (size_t)RN * RC * 4), dfree(dmu, RN * 4), dfree(drs, RN * 4), dfree(ddx, (size_t)RN * RC * 4);
        dfree(ddw, RC * 4), dfree(ddb, RC * 4), dfree(dwte, (size_t)RV * RC * 4), dfree(dwpe, (size_t)RT * RC * 4);
        dfree(dtok, sizeof tok);
    }
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 5; k++) free(g[r][k]);
    free(x), free(w), free(b), free(dy), free(y_c), free(mu), free(rs), free(dx_c), free(dw_c), free(db_c), free(dwte_c), free(dwpe_c);
}

/* 16-bit conversions in place over several ranges: the same bits as out of place */
static void t_inplace(void) {
    const size_t n = 100003;
    float *x = rnd(n, 100.0f), *y = malloc(n * 4);
    uint16_t *h = malloc(n * 2), *h2 = malloc(n * 2);
    for (int bf = 0; bf < 2; bf++) {
        float *dx = dput(x, n * 4);
        uint16_t *dh = dput(NULL, n * 2);
        int o1 = bf ? cu->bf16_narrow(dh, dx, n) : cu->f16_narrow(dh, dx, n);
        int o2 = bf ? cu->bf16_narrow((uint16_t *)(void *)dx, dx, n) : cu->f16_narrow((uint16_t *)(void *)dx, dx, n);
        dget(h, dh, n * 2), dget(h2, dx, n * 2);
        CHECK_MSG(o1 == o2 && !memcmp(h, h2, n * 2), "%s_narrow in place differs", bf ? "bf16" : "f16");
        if (bf) cu->bf16_widen(dx, (uint16_t *)(void *)dx, n);
        else cu->f16_widen(dx, (uint16_t *)(void *)dx, n);
        dget(y, dx, n * 4);
        float *yw = malloc(n * 4);
        if (bf) cpu->bf16_widen(yw, h, n);
        else cpu->f16_widen(yw, h, n);
        CHECK_MSG(!memcmp(y, yw, n * 4), "%s_widen in place differs from the cpu's", bf ? "bf16" : "f16");
        free(yw);
        dfree(dx, n * 4), dfree(dh, n * 2);
    }
    free(x), free(y), free(h), free(h2);
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void t_gemm_16(void) {
    enum { M = 96, NN = 80, K = 768 };
    float *a = rnd((size_t)M * K, 1.0f), *b = rnd((size_t)NN * K, 1.0f), *c = malloc(M * NN * 4), *r = malloc(M * NN * 4);
    uint16_t *ah = malloc((size_t)M * K * 2), *bh = malloc((size_t)NN * K * 2);
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = from_bf16(ah[i] = to_bf16(a[i]));
    for (size_t i = 0; i < (size_t)NN * K; i++) b[i] = from_bf16(bh[i] = to_bf16(b[i]));
    /* the reference: C = A B^T in fp32 on the CPU from the same bf16 values, and sum |a b| */
    cpu->gemm('N', 'T', M, NN, K, 1.0f, a, K, b, K, 0.0f, r, NN);
    double *mag = malloc(M * NN * sizeof(double));
    for (int i = 0; i < M; i++)
        for (int j = 0; j < NN; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) s += fabs((double)a[i * K + k] * b[j * K + k]);
            mag[i * NN + j] = s;
        }
    uint16_t *dah = dput(ah, (size_t)M * K * 2), *dbh = dput(bh, (size_t)NN * K * 2);
    float *da = dput(a, (size_t)M * K * 4), *db = dput(b, (size_t)NN * K * 4), *dc = dput(NULL, M * NN * 4);
    for (int kind = 0; kind < 2; kind++) { /* bf16 inputs; then fp32 inputs under TF32 */
        if (kind) {
            hpt_cuda_set_tf32(1);
            cu->gemm('N', 'T', M, NN, K, 1.0f, da, K, db, K, 0.0f, dc, NN);
            hpt_cuda_set_tf32(0);
        } else {
            hpt_cuda_gemm_bf16('N', 'T', M, NN, K, 1.0f, dah, K, dbh, K, 0.0f, dc, NN);
        }
        dget(c, dc, M * NN * 4);
        /* both fp32 sums of exact products (bf16 x bf16 fits fp32): two summation orders, each
         * within K ulp of sum|ab| when every add may round by a whole ulp (tensor cores need not
         * round to nearest): 2 K 2^-23 sum|ab|; TF32 also rounds each input to 10 mantissa bits
         * (exact here: the inputs are bf16 values), bounded anyway by 2^-10 of each product */
        double worst = 0.0, f = 2.0 * K * ldexp(1.0, -23) + (kind ? ldexp(1.0, -10) : 0.0);
        for (int i = 0; i < M * NN; i++) worst = fmax(worst, fabs((double)c[i] - r[i]) / (f * mag[i]));
        printf("%s GEMM %dx%dx%d: %.3g of its bound\n", kind ? "TF32" : "bf16 (fp32 accumulation)", M, NN, K, worst);
        CHECK_MSG(worst <= 1.0, "%s GEMM beyond its bound", kind ? "TF32" : "bf16");
    }
    dfree(dah, (size_t)M * K * 2), dfree(dbh, (size_t)NN * K * 2), dfree(da, (size_t)M * K * 4), dfree(db, (size_t)NN * K * 4);
    dfree(dc, M * NN * 4);
    free(a), free(b), free(c), free(r), free(ah), free(bh), free(mag);
}
#endif

#ifdef HPT_HAVE_CUDA
#include "test_cuda_pack.h"
#endif

int main(void) {
#ifdef HPT_HAVE_CUDA
    cpu = hpt_backend_cpu();
    size_t f0 = 0, tot = 0;
    if (hpt_cuda_device_count() == 0 || hpt_cuda_mem_info(&f0, &tot) != HPT_OK || !(cu = hpt_backend_cuda()))
        return t_gpu_skip("test_cuda", hpt_cuda_device_count() ? hpt_last_error() : "no CUDA device (or no driver)");
    CHECK_OK(hpt_mem_create(&g_mem));
    t_memory(f0);
    t_copies();
    t_attention();
    t_attention_short();
    t_attention_bf16();
    t_pack();
    t_llama();
    t_rows();
    t_colsums();
    t_inplace();
    t_gemm_16();
    CHECK_OK(hpt_cuda_status());
    hpt_mem_destroy(g_mem);
    hpt_cuda_shutdown();
    return t_done("test_cuda");
#else
    return t_gpu_skip("test_cuda", "this build has no CUDA backend");
#endif
}
