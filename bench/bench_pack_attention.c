/* bench_pack_attention.c: the CPU's flash attention (forward + backward) on one row of T tokens
 * of GPT-2 124M's shapes (C 768, 12 heads of 64), causal over the row against the same row
 * packed with examples whose lengths follow bench/bench_pack.sh's distribution (log-normal,
 * median ~155 tokens, cut at T): the document mask skips every 64-key tile before a query
 * tile's examples, so the work follows sum(len^2) instead of T^2 (docs/packing.md). Prints
 * the fastest of R runs of each, and the ideal ratio (the (query, key) pairs each computes).
 * --window W: the second column is the causal row with a sliding window of W keys instead
 * (Mistral's; the key tiles before each query tile's window skipped: O(T W), docs/llama.md).
 *   cc -O3 -march=native -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_pack_attention.c \
 *     build/libhptrain.a -fopenmp -ldnnl -lpcre2-8 -lcjson -lmvec -lm -o build/bench_pack_attention
 * Usage: bench_pack_attention [--threads N] [--runs R] [--T 1024,2048,4096] [--window W] */
#include "hptrain.h"
#include "kernels/backend.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_s = 88172645463325252ull;
static double unif(void) { /* (0, 1) */
    g_s ^= g_s << 13, g_s ^= g_s >> 7, g_s ^= g_s << 17;
    return ((double)(g_s >> 11) + 0.5) / 9007199254740992.0;
}

int main(int argc, char **argv) {
    int threads = 2, runs = 3, Ts[8] = {1024, 2048, 4096}, nT = 3, window = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc) window = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) {
            nT = 0;
            for (char *s = strtok(argv[++i], ","); s && nT < 8; s = strtok(NULL, ","))
                Ts[nT++] = atoi(s);
        }
    }
    omp_set_num_threads(threads);
    const hpt_backend *be = hpt_backend_cpu();
    const int B = 1, C = 768, NH = 12;
    printf("flash attention forward + backward (CPU), B=%d C=%d NH=%d, %d thread(s), fastest of %d\n\n",
           B, C, NH, threads, runs);
    if (window > 0) printf("| T | window | causal ms | window ms | speed-up | pairs ratio |\n");
    else printf("| T | examples | causal ms | packed ms | speed-up | pairs ratio |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int ti = 0; ti < nT; ti++) {
        const int T = Ts[ti];
        const size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
        float *qkv = malloc(nq * 4), *dout = malloc(no * 4), *out = malloc(no * 4);
        float *lse = malloc(nl * 4), *scr = malloc(nl * 4), *dqkv = malloc(nq * 4);
        int32_t *pos = malloc((size_t)B * T * 4);
        for (size_t i = 0; i < nq; i++) qkv[i] = (float)unif() - 0.5f;
        for (size_t i = 0; i < no; i++) dout[i] = (float)unif() - 0.5f;
        /* examples: prompt + completion of log-normal words, ~1.2 tokens a word, cut at T */
        int n_ex = 0;
        double pairs = 0.0;
        for (int t = 0; t < T;) {
            double z1 = sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif());
            double z2 = sqrt(-2.0 * log(unif())) * cos(6.283185307179586 * unif());
            int len = (int)(1.2 * (exp(3.9 + 0.9 * z1) + exp(4.4 + 0.9 * z2))) + 4;
            if (len > T - t) len = T - t;
            for (int i = 0; i < len; i++) pos[t + i] = i;
            pairs += (double)len * (len + 1) / 2.0;
            t += len, n_ex++;
        }
        if (window > 0) { /* query t sees min(t + 1, W) keys */
            const double W = window < T ? window : T;
            pairs = W * (W + 1) / 2.0 + (T - W) * W, n_ex = window;
        }
        double best[2] = {1e30, 1e30};
        for (int mode = 0; mode < 2; mode++) {
            const int32_t *p = mode && !window ? pos : NULL;
            const int w = mode ? window : 0;
            be->flash_attention_forward_seg(out, lse, qkv, B, T, C, NH, NH, p, w); /* warm */
            for (int r = 0; r < runs; r++) {
                double t0 = hpt_now();
                be->flash_attention_forward_seg(out, lse, qkv, B, T, C, NH, NH, p, w);
                be->flash_attention_backward_seg(dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NH, p, w);
                double t = hpt_now() - t0;
                best[mode] = t < best[mode] ? t : best[mode];
            }
        }
        printf("| %d | %d | %.1f | %.1f | %.2fx | %.2fx |\n", T, n_ex, best[0] * 1e3,
               best[1] * 1e3, best[0] / best[1], (double)T * (T + 1) / 2.0 / pairs);
        free(qkv), free(dout), free(out), free(lse), free(scr), free(dqkv), free(pos);
    }
    return 0;
}
