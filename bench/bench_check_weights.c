/* bench_check_weights.c: the hybrid schedule's predict-phase check (docs/predict.md) with fp32
 * and with int8 weights, as src/train/trainer.c's check_loss runs it, on the same weights and
 * the same check batch (the validation set's first window): fp32, B forwards of one sequence
 * on the model (a B=1 arena, freed after); int8, an hpt_infer quantised from the model's weights
 * (one scale per output channel), hpt_infer_loss over the batch, freed. Prints each one's time
 * (median of R checks), the device bytes it adds while it runs (the accounted peak above what
 * was live before it), the check losses and their relative difference, and the estimator's
 * predict-phase device peak of a hybrid run (adam predictor, checks on) with each.
 * Usage: bench_check_weights MODEL VAL_GLOB B T [R]   (MODEL: an llm.c checkpoint or a SHAPE,
 * randomly initialised) */
#include "hptrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t device_live(hpt_mem *mem) {
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    uint64_t live = 0;
    for (int c = 0; c < HPT_CAT_COUNT; c++) live += st.live_bytes[HPT_TIER_DEVICE][c];
    return live;
}

static uint64_t device_peak(hpt_mem *mem) {
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    return st.peak_bytes[HPT_TIER_DEVICE];
}

/* One check on weights w: its loss into *loss, the int8 engine's making (quantisation) in
 * *quant_ms; HPT_OK or the failure. */
static hpt_status check(hpt_mem *mem, hpt_model *m, hpt_weights w, const int32_t *x,
                        const int32_t *y, int B, int T, double *loss, double *quant_ms) {
    *quant_ms = 0.0;
    if (w == HPT_WEIGHTS_Q8) {
        hpt_infer *inf;
        float l;
        double t0 = hpt_now();
        hpt_status s = hpt_infer_create(mem, m, HPT_WEIGHTS_Q8, T, &inf);
        *quant_ms = (hpt_now() - t0) * 1e3;
        if (s != HPT_OK) return s;
        s = hpt_infer_loss(inf, x, y, B, T, &l);
        hpt_infer_free(inf);
        *loss = (double)l;
        return s;
    }
    double sum = 0.0;
    for (int b = 0; b < B; b++) {
        float l;
        hpt_status s = hpt_model_forward(m, x + (size_t)b * T, y + (size_t)b * T, 1, T, &l);
        if (s != HPT_OK) return s;
        sum += (double)l;
    }
    hpt_model_free_activations(m);
    *loss = sum / B;
    return HPT_OK;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: bench_check_weights MODEL VAL_GLOB B T [R]\n");
        return 2;
    }
    const char *model = argv[1], *val = argv[2];
    int B = atoi(argv[3]), T = atoi(argv[4]), R = argc > 5 ? atoi(argv[5]) : 5;
    hpt_mem *mem;
    hpt_model *m = NULL;
    hpt_model_config cfg;
    hpt_dataloader *dl = NULL;
    const int32_t *x, *y;
    int random = hpt_model_config_parse(model, &cfg) == HPT_OK;
    if (hpt_mem_create(&mem) ||
        (random ? hpt_model_create_config(mem, &cfg, &m) || hpt_model_init_random(m, 1)
                : hpt_model_load(mem, model, &m)) ||
        hpt_dataloader_open(mem, val, B, T, hpt_model_get_config(m)->V, &dl) ||
        hpt_dataloader_next(dl, &x, &y)) {
        fprintf(stderr, "bench_check_weights: %s\n", hpt_last_error());
        return 1;
    }
    cfg = *hpt_model_get_config(m);
    double ms[2] = {0.0, 0.0}, loss[2] = {0.0, 0.0}, qms[2] = {0.0, 0.0};
    uint64_t extra[2];
    if (R < 1) R = 1;
    double *t = malloc((size_t)R * sizeof *t), *tq = malloc((size_t)R * sizeof *tq);
    for (int w = 0; w < 2; w++) {
        uint64_t live0 = device_live(mem);
        hpt_mem_reset_peak(mem);
        for (int r = 0; r < R; r++) {
            double t0 = hpt_now();
            if (check(mem, m, w ? HPT_WEIGHTS_Q8 : HPT_WEIGHTS_F32, x, y, B, T, &loss[w], &tq[r])) {
                fprintf(stderr, "bench_check_weights: %s\n", hpt_last_error());
                return 1;
            }
            t[r] = (hpt_now() - t0) * 1e3;
        }
        qsort(t, (size_t)R, sizeof *t, cmp_double);
        qsort(tq, (size_t)R, sizeof *tq, cmp_double);
        ms[w] = t[R / 2];
        qms[w] = tq[R / 2];
        extra[w] = device_peak(mem) - live0;
    }
    uint64_t pp[2];
    for (int w = 0; w < 2; w++) {
        hpt_plan_opts po = hpt_plan_defaults();
        po.cfg = cfg;
        po.B = B;
        po.T = T;
        po.has_val = 1;
        po.sched.kind = HPT_SCHEDULE_HYBRID;
        po.sched.predictor = HPT_PREDICTOR_ADAM;
        po.sched.check_every = 1;
        po.sched.check_weights = w ? HPT_WEIGHTS_Q8 : HPT_WEIGHTS_F32;
        hpt_estimate e;
        if (hpt_plan_estimate(&po, &e)) {
            fprintf(stderr, "bench_check_weights: %s\n", hpt_last_error());
            return 1;
        }
        pp[w] = e.predict_peak_bytes[HPT_TIER_DEVICE];
    }
    printf("%s (%s, %.2fM parameters), check batch B=%d T=%d, %d threads, median of %d checks\n",
           model, random ? "random weights" : "checkpoint", (double)hpt_model_config_num_params(&cfg) / 1e6,
           B, T, hpt_get_threads(), R);
    printf("| check weights | check ms | of which quantising | device bytes added by a check | "
           "check loss | predict-phase device peak (estimate, adam) |\n"
           "|---|---:|---:|---:|---:|---:|\n");
    for (int w = 0; w < 2; w++)
        printf("| %s | %.1f | %.1f | %.2f MiB | %.6f | %.2f MiB |\n", w ? "int8" : "fp32", ms[w],
               qms[w], (double)extra[w] / 1048576.0, loss[w], (double)pp[w] / 1048576.0);
    printf("int8 / fp32: check time %.2fx, check bytes %.2fx, predict peak %.3fx; check loss "
           "relative difference %.2e\n", ms[1] / ms[0], (double)extra[1] / (double)extra[0],
           (double)pp[1] / (double)pp[0], (loss[1] - loss[0]) / loss[0]);
    free(t);
    free(tq);
    hpt_dataloader_free(dl);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    return 0;
}
