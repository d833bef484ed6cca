/* bench_infer.c: generation speed of GPT-2 124M (random weights, one thread count): the
 * training forward over the whole window per new token (how `sample` worked before the
 * inference engine), the engine's key/value cache on fp32 weights, and on int8 weights.
 * Prints tokens/s of each and their ratios, and the engine's accounted bytes.
 * Usage: bench_infer [shape] [prompt tokens] [new tokens] */
#include "hptrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *shape = argc > 1 ? argv[1] : "gpt2-124m";
    int n_prompt = argc > 2 ? atoi(argv[2]) : 64, n_new = argc > 3 ? atoi(argv[3]) : 64;
    hpt_model_config cfg;
    hpt_mem *mem;
    hpt_model *m;
    if (hpt_model_config_parse(shape, &cfg) || hpt_mem_create(&mem) || hpt_model_create_config(mem, &cfg, &m)) {
        fprintf(stderr, "bench_infer: %s\n", hpt_last_error());
        return 1;
    }
    hpt_model_init_random(m, 1);
    int n = n_prompt + n_new;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    for (int i = 0; i < n; i++) tok[i] = (i * 7919) % cfg.V;
    /* 1: the whole window through the training forward, per token (greedy: the argmax) */
    double t0 = hpt_now();
    for (int k = n_prompt; k < n; k++) {
        if (hpt_model_forward(m, tok, NULL, 1, k, NULL)) { fprintf(stderr, "%s\n", hpt_last_error()); return 1; }
    }
    double full = (double)n_new / (hpt_now() - t0);
    hpt_model_free_activations(m);
    double rate[2];
    uint64_t bytes[2];
    for (int w = 0; w < 2; w++) {
        hpt_infer *inf;
        if (hpt_infer_create(mem, m, w ? HPT_WEIGHTS_Q8 : HPT_WEIGHTS_F32, n, &inf)) {
            fprintf(stderr, "%s\n", hpt_last_error());
            return 1;
        }
        hpt_infer_feed(inf, tok, n_prompt);
        t0 = hpt_now();
        for (int k = n_prompt; k < n; k++) hpt_infer_feed(inf, tok + k, 1);
        rate[w] = (double)n_new / (hpt_now() - t0);
        bytes[w] = hpt_infer_weight_bytes_for(&cfg, w ? HPT_WEIGHTS_Q8 : HPT_WEIGHTS_F32);
        hpt_infer_free(inf);
    }
    printf("%s, prompt %d, %d new tokens, %d threads\n", shape, n_prompt, n_new, hpt_get_threads());
    printf("| path | tokens/s | vs full forward | weight bytes |\n|---|---|---|---|\n");
    printf("| training forward over the window | %.1f | 1.00 | %.1f MiB |\n", full,
           (double)bytes[0] / 1048576.0);
    printf("| kv cache, fp32 weights | %.1f | %.2f | %.1f MiB |\n", rate[0], rate[0] / full,
           (double)bytes[0] / 1048576.0);
    printf("| kv cache, int8 weights | %.1f | %.2f | %.1f MiB |\n", rate[1], rate[1] / full,
           (double)bytes[1] / 1048576.0);
    free(tok);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    return 0;
}
