/* step_budget.c: where one gpt2-124m training step's time goes, op by op (issue 20). It turns
 * on the CPU backend's op timer (src/kernels/cpu/optime.h), runs W warm-up steps and S timed
 * steps of `hptrain train`'s default plan (fp32, AdamW, flash attention, no offload) on random
 * tokens, and prints per step: each op's wall milliseconds (the GEMMs by part and shape: the
 * forward product, dX, dW, the bias), its share of the step, the GEMMs' GFLOP/s and their
 * fraction of --peak, and the time outside every op (the trainer's and runner's own code).
 * Optionally, S more steps with the timer off (a fresh process) give the timer's overhead.
 * The wall time of an op includes its threads' waits at its barriers (imbalance, a core taken
 * by another process): perf shows how much of it is libgomp's spinning.
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Isrc bench/step_budget.c build/libhptrain.a \
 *      -fopenmp -ldnnl -lpcre2-8 -lcjson -lmvec -lm -o build/step_budget
 *   build/step_budget [--B 4] [--T 64] [--threads 2] [--warmup 2] [--steps 4] [--peak GFLOPS]
 *                     [--off]      (--off: the timer off, step times only)
 */
#include "hptrain.h"
#include "kernels/cpu/optime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp_row(const void *a, const void *b) {
    const k_optime_row *x = a, *y = b;
    return x->s < y->s ? 1 : x->s > y->s ? -1 : 0;
}

int main(int argc, char **argv) {
    int B = 4, T = 64, threads = 2, warm = 2, steps = 4, off = 0;
    double peak = 0.0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--B") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--T") && i + 1 < argc) T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--peak") && i + 1 < argc) peak = atof(argv[++i]);
        else if (!strcmp(argv[i], "--off")) off = 1;
        else {
            fprintf(stderr, "usage: step_budget [--B N] [--T N] [--threads N] [--warmup W] [--steps S] "
                            "[--peak GFLOPS] [--off]\n");
            return 2;
        }
    }
    hpt_set_threads(threads);
    char dir[] = "/tmp/hpt_budget_XXXXXX", data[96];
    if (!mkdtemp(dir)) return 1;
    snprintf(data, sizeof data, "%s/train_000000.bin", dir);
    size_t ntok = (size_t)B * T * (size_t)(warm + steps + 2) + 1;
    uint16_t *tok = malloc(ntok * sizeof *tok);
    if (!tok) return 1;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < ntok; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (uint16_t)(x % 50257);
    }
    if (hpt_shard_write(data, tok, ntok) != HPT_OK) return 1;
    free(tok);

    k_optime_enable(!off);
    hpt_mem *mem;
    if (hpt_mem_create(&mem) != HPT_OK) return 1;
    hpt_train_opts o = hpt_train_defaults();
    o.model = "gpt2-124m";
    o.data = data;
    o.B = B;
    o.T = T;
    o.steps = warm + steps;
    o.eval_every = 0;
    hpt_trainer *tr;
    if (hpt_trainer_create(mem, &o, &tr) != HPT_OK) {
        fprintf(stderr, "step_budget: %s\n", hpt_last_error());
        return 1;
    }
    hpt_train_progress p;
    for (int i = 0; i < warm; i++)
        if (hpt_trainer_step(tr, &p) != HPT_OK) return 1;
    k_optime_reset();
    double total = 0.0;
    printf("step_budget: gpt2-124m B=%d T=%d, %d threads, timer %s; step ms:", B, T, threads, off ? "off" : "on");
    for (int i = 0; i < steps; i++) {
        if (hpt_trainer_step(tr, &p) != HPT_OK) return 1;
        total += (double)p.step_ms;
        printf(" %.1f (loss %.6f)", (double)p.step_ms, (double)p.loss);
    }
    double step = total / steps;
    printf("\nmean step %.1f ms\n", step);
    if (!off) {
        k_optime_row rows[256];
        int n = k_optime_read(rows, 256);
        if (n > 256) n = 256;
        qsort(rows, (size_t)n, sizeof rows[0], cmp_row);
        double sum = 0.0, gflop = 0.0, gs = 0.0;
        printf("%-44s %9s %9s %7s %9s %7s\n", "op (part, shape)", "calls/st", "ms/step", "share", "GFLOP/s",
               "peak");
        for (int i = 0; i < n; i++) {
            double ms = rows[i].s * 1e3 / steps;
            sum += ms;
            printf("%-44s %9.1f %9.2f %6.1f%%", rows[i].key, (double)rows[i].n / steps, ms, 100.0 * ms / step);
            if (rows[i].flop > 0) {
                double r = rows[i].flop / rows[i].s * 1e-9;
                gflop += rows[i].flop / steps;
                gs += ms;
                printf(" %9.1f", r);
                if (peak > 0) printf(" %6.1f%%", 100.0 * r / peak);
            }
            printf("\n");
        }
        printf("%-44s %9s %9.2f %6.1f%%\n", "(outside every op)", "", step - sum, 100.0 * (step - sum) / step);
        printf("GEMMs: %.1f ms/step, %.3f GFLOP/step, %.1f GFLOP/s", gs, gflop * 1e-9, gflop * 1e-9 / gs * 1e3);
        if (peak > 0) printf(" (%.1f%% of the peak); at the peak they would take %.1f ms", 100.0 * gflop * 1e-9 / gs * 1e3 / peak,
                             gflop * 1e-9 / peak * 1e3);
        printf("\n");
    }
    hpt_trainer_free(tr);
    hpt_mem_destroy(mem);
    unlink(data);
    rmdir(dir);
    return 0;
}
