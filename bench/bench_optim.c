/* bench_optim.c: training-state bytes per parameter of every optimizer and state width,
 * measured: a model and its optimizer are created in a fresh hpt_mem, and the accounted
 * device bytes of params + grads + optim are divided by the parameter count (nothing is
 * computed from formulas here). Each combination also with the fused update (--fused-update:
 * the model made with the offload engine, everything on the device; gradients only for wte,
 * wpe, the final layernorm and one block's slot). Also the unfused optimizer step's time per
 * parameter on random gradients (median of a few steps; a fused step runs inside the
 * backward and is not timed here). Last, AdamW fused with the blocks' weights in bf16
 * (--weights bf16-sr, bf16-kahan: 2 or 4 bytes per block weight; wte, wpe, lnf stay fp32), and
 * then with chunked or bf16 embeddings (--embeddings chunked: no whole wte gradient, one chunk
 * of it; bf16: wte, wpe also in bf16 with the blocks' rounding; src/model/embed.c).
 * Usage: bench_optim [SHAPE] [--steps N] [--q8-fused [--weights W] [--embeddings E]];
 * --q8-fused prints only 8-bit AdamW fused with fp32, bf16-sr and bf16-kahan weights, each with
 * full embeddings and then chunked (fp32 weights) or bf16 ones (about 8 bytes per parameter at
 * most: for shapes whose other rows would not fit in memory); --weights keeps only the rows of
 * W (fp32, bf16-sr or bf16-kahan), --embeddings only those of E (full, chunked or bf16). */
#include "hptrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One table row: a model (with the engine when f) and its optimizer in a fresh hpt_mem. */
static int row(const hpt_model_config *cfg, const hpt_offload_opts *f, int k, int bits, int emb,
               int steps) {
    hpt_mem *mem;
    hpt_model *m;
    hpt_optim *o;
    if (hpt_mem_create(&mem) != HPT_OK || hpt_model_create_config_offload(mem, cfg, f, &m) != HPT_OK) {
        fprintf(stderr, "bench_optim: %s\n", hpt_last_error());
        return 1;
    }
    hpt_adamw_opts ao = hpt_optim_defaults((hpt_optim_kind)k);
    ao.state_bits = bits;
    ao.state32_embeddings = emb;
    if (hpt_optim_create(mem, m, &ao, &o) != HPT_OK) {
        fprintf(stderr, "bench_optim: %s\n", hpt_last_error());
        return 1;
    }
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    double n = (double)hpt_model_num_params(m);
    const uint64_t *live = st.live_bytes[HPT_TIER_DEVICE];
    double p = (double)live[HPT_CAT_PARAMS] / n, g = (double)live[HPT_CAT_GRADS] / n,
           s = (double)live[HPT_CAT_OPTIM] / n;
    char tm[32] = "-";
    if (!f) { /* time: random gradients, the step at a tiny lr */
        float *gr = hpt_model_grads(m);
        uint32_t x = 1u;
        for (size_t i = 0; i < (size_t)n; i++) {
            x = x * 1664525u + 1013904223u;
            gr[i] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 1e-3f;
        }
        double t[64];
        for (int i = 0; i < steps; i++) {
            double t0 = hpt_now();
            hpt_optim_step(o, 1e-6f, 0.0f, NULL);
            t[i] = hpt_now() - t0;
        }
        qsort(t, (size_t)steps, sizeof t[0], cmp_double);
        snprintf(tm, sizeof tm, "%.2f", t[steps / 2] / n * 1e9);
    }
    char wb[48] = "";
    if (f && f->weights != HPT_BW_FP32)
        snprintf(wb, sizeof wb, ", %s weights",
                 hpt_block_weights_name((hpt_block_weights)f->weights));
    if (f && f->embeddings != HPT_EMB_FULL)
        snprintf(wb + strlen(wb), sizeof wb - strlen(wb), ", %s embeddings",
                 hpt_embeddings_name((hpt_embeddings)f->embeddings));
    printf("| %s | %d-bit%s%s%s | %.3f | %.3f | %.3f | %.3f | %s |\n",
           hpt_optim_name((hpt_optim_kind)k), bits, emb ? " (wte, wpe 32-bit)" : "",
           f ? ", fused" : "", wb, p, g, s, p + g + s, tm);
    hpt_optim_free(o);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    return 0;
}

int main(int argc, char **argv) {
    const char *shape = "gpt2-124m";
    int steps = 5, q8_fused = 0;
    const char *only = NULL, *only_emb = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--q8-fused")) q8_fused = 1;
        else if (!strcmp(argv[i], "--weights") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--embeddings") && i + 1 < argc) only_emb = argv[++i];
        else shape = argv[i];
    }
    hpt_block_weights wsel = HPT_BW_COUNT; /* every kind */
    if (only && hpt_block_weights_parse(only, &wsel) != HPT_OK) {
        fprintf(stderr, "bench_optim: %s\n", hpt_last_error());
        return 1;
    }
    hpt_embeddings esel = HPT_EMB_COUNT; /* every kind */
    if (only_emb && hpt_embeddings_parse(only_emb, &esel) != HPT_OK) {
        fprintf(stderr, "bench_optim: %s\n", hpt_last_error());
        return 1;
    }
    if (steps < 1 || steps > 64) steps = 5;
    hpt_model_config cfg;
    if (hpt_model_config_parse(shape, &cfg) != HPT_OK) {
        fprintf(stderr, "bench_optim: %s\n", hpt_last_error());
        return 1;
    }
    printf("training-state bytes per parameter, measured from hpt_mem (%s, %.2fM parameters, "
           "%d threads)\n\n", shape, (double)hpt_model_config_num_params(&cfg) / 1e6, hpt_get_threads());
    printf("| optimizer | state | params | grads | optim | total bytes/param | step ns/param |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
    const int bits[3] = {32, 8, 8}, emb[3] = {0, 0, 1};
    hpt_offload_opts fused = hpt_offload_defaults();
    fused.fused = 1;
    if (q8_fused) {
        for (int w = HPT_BW_FP32; w <= HPT_BW_BF16_KAHAN; w++) {
            if (wsel != HPT_BW_COUNT && w != (int)wsel) continue;
            for (int k = 0; k < 2; k++) {
                hpt_embeddings e = !k ? HPT_EMB_FULL : w == HPT_BW_FP32 ? HPT_EMB_CHUNKED : HPT_EMB_BF16;
                if (esel != HPT_EMB_COUNT && e != esel) continue;
                fused.weights = w;
                fused.embeddings = e;
                if (row(&cfg, &fused, HPT_OPTIM_ADAMW, 8, 0, steps)) return 1;
            }
        }
        return 0;
    }
    for (int r = 0; r < 2 * HPT_OPTIM_COUNT; r++) /* unfused rows, then fused rows */
        for (int w = 0; w < 3; w++)
            if (row(&cfg, r / HPT_OPTIM_COUNT ? &fused : NULL, r % HPT_OPTIM_COUNT, bits[w], emb[w],
                    steps))
                return 1;
    for (int w = HPT_BW_BF16_SR; w <= HPT_BW_BF16_KAHAN; w++) /* AdamW, fused, bf16 weights */
        for (int b = 0; b < 2; b++) {
            fused.weights = w;
            if (row(&cfg, &fused, HPT_OPTIM_ADAMW, bits[b], 0, steps)) return 1;
        }
    for (int w = HPT_BW_FP32; w <= HPT_BW_BF16_KAHAN; w++) /* and chunked / bf16 embeddings */
        for (int b = 0; b < 2; b++) {
            fused.weights = w;
            fused.embeddings = w == HPT_BW_FP32 ? HPT_EMB_CHUNKED : HPT_EMB_BF16;
            if (row(&cfg, &fused, HPT_OPTIM_ADAMW, bits[b], 0, steps)) return 1;
        }
    return 0;
}
