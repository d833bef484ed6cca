/* bench_mlptile.c: the tiled MLP's cost at short T (--mlp-tile; docs/activations.md), in one
 * process: one model's forward + backward at (B, T), untiled and with each tile in turns, ROUNDS
 * rounds of PASSES passes each; each variant's figure is its best round (CPU seconds of the
 * process per pass, and wall seconds), so that a shared machine's interference, which only
 * adds time, drops out; printed with the ratio of tokens/s to untiled.
 * Build and run (bench/bench_mlptile.sh builds it so and runs it, also against a base tree):
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/bench_mlptile.c build/libhptrain.a \
 *      -fopenmp -ldnnl -lpcre2-8 -lcjson -lutf8proc -lmvec -lm -o build/bench_mlptile
 *   build/bench_mlptile [SHAPE B T THREADS ROUNDS PASSES TILE...]
 *   (default llama:L=4,C=256,NH=4,NKV=2,FF=768,V=8192,T=1024 4 128 1 7 4 1024 128)
 * Compiled with -DHPT_BENCH_UNTILED_ONLY it runs the untiled variant alone, and so builds
 * against an hptrain from before the tiling: the two binaries run in turns compare the
 * untiled default's speed before and after. */
#include "hptrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double clk(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *shape = argc > 1 ? argv[1] : "llama:L=4,C=256,NH=4,NKV=2,FF=768,V=8192,T=1024";
    const int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 128;
    const int threads = argc > 4 ? atoi(argv[4]) : 1, rounds = argc > 5 ? atoi(argv[5]) : 7;
    const int passes = argc > 6 ? atoi(argv[6]) : 4;
    int tiles[8] = {0, 1024, 128}, nv = 3;
#ifdef HPT_BENCH_UNTILED_ONLY
    nv = 1;
#endif
    if (argc > 7 && nv > 1) {
        nv = 1;
        for (int i = 7; i < argc && nv < 8; i++) tiles[nv++] = atoi(argv[i]);
    }
    hpt_set_threads(threads);
    hpt_mem *mem;
    hpt_model_config cfg;
    hpt_model *m;
    if (hpt_mem_create(&mem) != HPT_OK || hpt_model_config_parse(shape, &cfg) != HPT_OK ||
        hpt_model_create_config(mem, &cfg, &m) != HPT_OK) {
        fprintf(stderr, "bench_mlptile: %s\n", hpt_last_error());
        return 1;
    }
    hpt_model_init_random(m, 1);
    int32_t *x = malloc((size_t)B * T * sizeof *x), *y = malloc((size_t)B * T * sizeof *y);
    for (int i = 0; i < B * T; i++) x[i] = (i * 37 + 11) % cfg.V, y[i] = (i * 53 + 7) % cfg.V;
    double best_cpu[8], best_wall[8];
    for (int v = 0; v < nv; v++) best_cpu[v] = best_wall[v] = 1e30;
    for (int r = 0; r < rounds; r++)
        for (int v = 0; v < nv; v++) {
            hpt_act_opts o = hpt_act_defaults();
#ifndef HPT_BENCH_UNTILED_ONLY
            o.mlp_tile = tiles[v];
#endif
            float loss;
            if (hpt_model_set_act_opts(m, &o) != HPT_OK ||
                hpt_model_forward(m, x, y, B, T, &loss) != HPT_OK) /* plans the arena */
                return 1;
            hpt_model_zero_grad(m);
            hpt_model_backward(m);
            double c0 = clk(CLOCK_PROCESS_CPUTIME_ID), w0 = clk(CLOCK_MONOTONIC);
            for (int p = 0; p < passes; p++) {
                hpt_model_forward(m, x, y, B, T, &loss);
                hpt_model_backward(m);
            }
            double c = (clk(CLOCK_PROCESS_CPUTIME_ID) - c0) / passes, w = (clk(CLOCK_MONOTONIC) - w0) / passes;
            if (c < best_cpu[v]) best_cpu[v] = c;
            if (w < best_wall[v]) best_wall[v] = w;
        }
    printf("bench_mlptile: %s B=%d T=%d, %d threads, best of %d rounds of %d passes\n", shape, B, T,
           threads, rounds, passes);
    for (int v = 0; v < nv; v++)
        printf("  mlp_tile %5d: %8.2f ms CPU, %8.2f ms wall per pass; tokens/s x%.3f (CPU), "
               "x%.3f (wall) of untiled\n", tiles[v], 1e3 * best_cpu[v], 1e3 * best_wall[v],
               best_cpu[0] / best_cpu[v], best_wall[0] / best_wall[v]);
    free(x);
    free(y);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    return 0;
}
