/* test_lora.c REF SHAPE TARGETS R ALPHA RSLORA: LoRA adapters over a frozen base
 * (src/model/lora.c) against the plain-PyTorch reference of tests/make_ref_lora.py (REF): the
 * logits, the loss, every adapter's gradient and the losses and adapters of 10 AdamW steps on
 * the adapters, each within 1e-4; the base is untouched by the steps. Then the memory: the
 * base has no gradient buffer, and what the run accounts (params, grads, optim, acts) equals
 * hpt_lora_bytes, hpt_optim_lora_state_bytes and the arena's bytes; the initialisation is
 * PEFT's (A within 1/sqrt(in), B zero); the base's bits are those of a model without
 * adapters when B is zero; bad targets and settings are refused; dropout against central
 * differences and under full recomputation (check_dropout); a bf16, int8 or nf4 base (its
 * embeddings bf16) against the fp32 model of its values (check_frozen); its embeddings and head
 * widened a few vocabulary rows at a time (check_vocab_chunks); the base homed on the host or
 * the disk against the device home, the disk also through a host block as on a GPU
 * (check_homes); read ahead or not (--base-prefetch) under four recompute policies, the same
 * bits, reads and errors (check_prefetch). */
#include "testlib.h"
#include "model/arch.h"
#include "model/model.h"
#include "testing.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static double max_abs(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - (double)b[i]));
    return m;
}

static void *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc((size_t)len);
    if (p && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)len;
    return p;
}

/* Dropout (the adapters' input): the gradients against central differences through a held
 * mask (hpt_model_lora_hold_masks), and the same bits with full recomputation, whose
 * backward regenerates the masks instead of keeping them. */
static void check_dropout(const char *shape, const float *base, size_t np, const float *lora0,
                          size_t nl, const int32_t *x, const int32_t *y, int B, int T,
                          hpt_lora_opts lo) {
    lo.dropout = 0.25f;
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *m[2] = {NULL, NULL};
    float loss[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(hpt_model_create_forward(mem, shape, &m[k]));
        if (!m[k]) break;
        memcpy(hpt_model_params(m[k]), base, np * sizeof(float));
        CHECK_OK(hpt_model_lora_attach(m[k], &lo, 99));
        memcpy(hpt_model_lora_params(m[k]), lora0, nl * sizeof(float));
        hpt_act_opts a = hpt_act_defaults();
        if (k) CHECK_OK(hpt_recompute_parse("full", &a));
        CHECK_OK(hpt_model_set_act_opts(m[k], &a));
        hpt_model_zero_grad(m[k]);
        CHECK_OK(hpt_model_forward(m[k], x, y, B, T, &loss[k]));
        CHECK_OK(hpt_model_backward(m[k]));
    }
    if (!m[0] || !m[1]) return;
    const float *g = hpt_model_lora_grads(m[0]);
    CHECK_MSG(memcmp(&loss[0], &loss[1], sizeof loss[0]) == 0, "dropout: loss %.9g, with full "
              "recomputation %.9g", (double)loss[0], (double)loss[1]);
    CHECK_MSG(memcmp(g, hpt_model_lora_grads(m[1]), nl * sizeof(float)) == 0,
              "dropout: gradients differ with full recomputation");
    /* the 8 largest gradients against (L(p + h) - L(p - h)) / 2h under the same masks */
    hpt_model_lora_hold_masks(m[0], 1);
    float *P = hpt_model_lora_params(m[0]);
    size_t idx[8];
    for (int k = 0; k < 8; k++) {
        size_t best = (size_t)-1;
        for (size_t i = 0; i < nl; i++) {
            int taken = 0;
            for (int q = 0; q < k; q++) taken |= idx[q] == i;
            if (!taken && (best == (size_t)-1 || fabsf(g[i]) > fabsf(g[best]))) best = i;
        }
        idx[k] = best;
    }
    double worst = 0;
    for (int k = 0; k < 8; k++) {
        const float h = 1e-2f, p0 = P[idx[k]];
        float lp, lm;
        P[idx[k]] = p0 + h;
        CHECK_OK(hpt_model_forward(m[0], x, y, B, T, &lp));
        P[idx[k]] = p0 - h;
        CHECK_OK(hpt_model_forward(m[0], x, y, B, T, &lm));
        P[idx[k]] = p0;
        double fd = ((double)lp - (double)lm) / (2.0 * (double)h), e = fabs(fd - (double)g[idx[k]]);
        worst = fmax(worst, e / fabs((double)g[idx[k]]));
        CHECK_MSG(e <= 2e-3 + 0.05 * fabs((double)g[idx[k]]), "dropout: gradient %zu is %g, "
                  "central difference %g", idx[k], (double)g[idx[k]], fd);
    }
    printf("%s: dropout 0.25: full recomputation the same bits; 8 largest gradients within %.2g "
           "(relative) of central differences\n", shape, worst);
    hpt_model_free(m[0]);
    hpt_model_free(m[1]);
    hpt_mem_destroy(mem);
}

/* --base-weights (model/frozen.c): a base whose blocks' matrices are stored in bf16, int8 or
 * NF4 computes the bits of an fp32 model holding the widened values (saved and reloaded),
 * adapters and all; the values are the initialisation's rounded (bf16: within 2^-8 relative;
 * int8: within half a step, absmax/254 of the row; nf4: within a quarter of a 6-sigma absmax,
 * test_nf4 bounds it exactly); its params are exactly what the estimator says,
 * and it has no gradients. */
static void check_frozen(const hpt_model_config *cfg, const char *shape, int kind,
                         const float *lora0, size_t nl, const int32_t *x, const int32_t *y,
                         int B, int T, hpt_lora_opts lo) {
    const char *name = kind == HPT_BASE_BF16 ? "bf16" : kind == HPT_BASE_NF4 ? "nf4" : "int8";
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *f = NULL, *r = NULL, *p = NULL;
    CHECK_OK(hpt_model_create_frozen(mem, cfg, kind, &f));
    if (!f) return;
    CHECK_OK(hpt_model_init_random(f, 5));
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    hpt_plan_opts po = hpt_plan_defaults();
    po.cfg = *hpt_model_get_config(f);
    po.B = B, po.T = T, po.no_data = 1;
    po.lora = lo;
    po.lora.base = kind;
    hpt_estimate e;
    CHECK_OK(hpt_plan_estimate(&po, &e));
    uint64_t lb[HPT_CAT_COUNT];
    CHECK_OK(hpt_lora_bytes(cfg, &lo, B, T, 1, lb));
    CHECK_MSG(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS] + lb[HPT_CAT_PARAMS] ==
                  e.bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS],
              "%s base: params %llu + adapters %llu, estimated %llu", name,
              (unsigned long long)st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS],
              (unsigned long long)lb[HPT_CAT_PARAMS],
              (unsigned long long)e.bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS]);
    CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_GRADS] == 0);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/frozen_%s", t_tmpdir(), name);
    CHECK_OK(hpt_model_save_hf(f, dir, HPT_DTYPE_F32, 0));
    CHECK_OK(hpt_model_load_forward(mem, dir, &r));
    CHECK_OK(hpt_model_create_forward(mem, shape, &p));
    if (!r || !p) return;
    CHECK_OK(hpt_model_init_random(p, 5));
    /* the stored values: the fp32 initialisation rounded, blocks' matrices only */
    const float *rv = hpt_model_params(r), *pv = hpt_model_params(p);
    size_t np = hpt_model_num_params(p), changed = 0, bad = 0;
    for (size_t i = 0; i < np; i++) {
        changed += rv[i] != pv[i];
        bad += fabsf(rv[i] - pv[i]) > (kind == HPT_BASE_BF16 ? fabsf(pv[i]) / 256.0f
                                       : kind == HPT_BASE_NF4 ? 0.02f * 6.0f * 0.25f
                                                              : 0.02f / 254.0f * 6.0f);
    }
    CHECK_MSG(changed > np / 20 && bad == 0, "%s base: %zu of %zu values rounded, %zu too far",
              name, changed, np, bad);
    float l[2];
    const float *g[2];
    hpt_model *m[2] = {f, r};
    for (int k = 0; k < 2; k++) {
        CHECK_OK(hpt_model_lora_attach(m[k], &lo, 3));
        memcpy(hpt_model_lora_params(m[k]), lora0, nl * sizeof(float));
        hpt_model_zero_grad(m[k]);
        CHECK_OK(hpt_model_forward(m[k], x, y, B, T, &l[k]));
        CHECK_OK(hpt_model_backward(m[k]));
        g[k] = hpt_model_lora_grads(m[k]);
    }
    CHECK_MSG(memcmp(&l[0], &l[1], sizeof l[0]) == 0, "%s base: loss %.9g, fp32 model of its "
              "values %.9g", name, (double)l[0], (double)l[1]);
    CHECK_MSG(memcmp(g[0], g[1], nl * sizeof(float)) == 0, "%s base: adapter gradients differ "
              "from the fp32 model's of its values", name);
    CHECK_STATUS(hpt_model_lora_merge(f), HPT_ERR_UNSUPPORTED);
    printf("%s: --base-weights %s: the fp32 model of its values' bits (loss %.7f)\n", shape, name,
           (double)l[0]);
    hpt_model_free(f);
    hpt_model_free(r);
    hpt_model_free(p);
    hpt_mem_destroy(mem);
}

/* The bf16 embeddings and head of a frozen base widened 64 vocabulary rows at a time (several
 * chunks of the test's vocabulary), with and without a row-chunked head (5 rows), against the
 * one-chunk base of the same values: the loss and every adapter gradient within fp32 rounding
 * (only the order of the head's sums differs); params, grads and the activations after the
 * step exactly what the estimator says. */
static void check_vocab_chunks(const hpt_model_config *cfg, const float *lora0, size_t nl,
                               const int32_t *x, const int32_t *y, int B, int T,
                               hpt_lora_opts lo) {
    float l[3];
    float *g[3] = {0};
    for (int k = 0; k < 3; k++) {
        hpt_mem *mem;
        CHECK_OK(hpt_mem_create(&mem));
        hpt_model *f = NULL;
        hpt_frozen_vocab_chunk(k ? 64 : 0);
        CHECK_OK(hpt_model_create_frozen(mem, cfg, HPT_BASE_BF16, &f));
        if (!f) return;
        CHECK_OK(hpt_model_init_random(f, 5));
        hpt_act_opts act = hpt_act_defaults();
        act.head_chunk = k == 2 ? 5 : 0;
        CHECK_OK(hpt_model_set_act_opts(f, &act));
        CHECK_OK(hpt_model_lora_attach(f, &lo, 3));
        memcpy(hpt_model_lora_params(f), lora0, nl * sizeof(float));
        hpt_model_zero_grad(f);
        CHECK_OK(hpt_model_forward(f, x, y, B, T, &l[k]));
        CHECK_OK(hpt_model_backward(f));
        g[k] = malloc(nl * sizeof(float));
        if (g[k]) memcpy(g[k], hpt_model_lora_grads(f), nl * sizeof(float));
        hpt_plan_opts po = hpt_plan_defaults();
        po.cfg = *hpt_model_get_config(f);
        po.B = B, po.T = T, po.no_data = 1;
        po.act = act;
        po.lora = lo;
        po.lora.base = HPT_BASE_BF16;
        hpt_estimate e;
        CHECK_OK(hpt_plan_estimate(&po, &e));
        hpt_mem_stats st;
        hpt_mem_get_stats(mem, &st);
        for (int c = HPT_CAT_PARAMS; c <= HPT_CAT_ACTS; c++) /* no optimizer here */
            CHECK_MSG(c == HPT_CAT_OPTIM ||
                          st.live_bytes[HPT_TIER_DEVICE][c] == e.bytes[HPT_TIER_DEVICE][c],
                      "vocabulary chunk %d, head chunk %d: category %d measured %llu, estimated "
                      "%llu", k ? 64 : 0, act.head_chunk, c,
                      (unsigned long long)st.live_bytes[HPT_TIER_DEVICE][c],
                      (unsigned long long)e.bytes[HPT_TIER_DEVICE][c]);
        hpt_model_free(f);
        hpt_mem_destroy(mem);
    }
    hpt_frozen_vocab_chunk(0);
    if (!g[0] || !g[1] || !g[2]) CHECK(!"allocating the gradients' copies");
    double gmax = 0.0;
    for (size_t i = 0; g[0] && i < nl; i++) gmax = fmax(gmax, fabs((double)g[0][i]));
    for (int k = 1; k < 3 && g[0] && g[k]; k++) {
        double eg = max_abs(g[k], g[0], nl);
        CHECK_MSG(fabs((double)l[k] - (double)l[0]) <= 1e-6 * fabs((double)l[0]) &&
                      eg <= 1e-5 * gmax,
                  "vocabulary chunks of 64 rows%s: loss %.9g against %.9g, gradients max err "
                  "%.3g (largest %.3g)", k == 2 ? ", head chunk 5" : "", (double)l[k],
                  (double)l[0], eg, gmax);
        printf("bf16 base, vocabulary chunks of 64 rows%s: loss err %.3g, gradients max err %.3g "
               "(largest %.3g)\n", k == 2 ? " and a head chunk of 5 rows" : "",
               fabs((double)l[k] - (double)l[0]), eg, gmax);
    }
    for (int k = 0; k < 3; k++) free(g[k]);
}

/* --base-home (model/frozen.c): the frozen base's stored blocks on the host or the disk tier
 * give the device home's bits (loss and every adapter gradient, two steps: the blocks are read
 * again, nothing written back), for an f32 base (against the plain model in memory) and a
 * narrow one (its bf16 embeddings then on the host too); each tier's params exactly what the
 * estimator says. */
static void check_homes(const hpt_model_config *cfg, const char *shape, const float *lora0,
                        size_t nl, const int32_t *x, const int32_t *y, int B, int T,
                        hpt_lora_opts lo) {
    /* via_host: the disk home through a host block, a GPU's path (hpt_frozen_disk_via_host) */
    static const struct { int kind, home, via_host; } k_cases[] = {
        {HPT_BASE_F32, HPT_TIER_HOST, 0}, {HPT_BASE_F32, HPT_TIER_DISK, 0},
        {HPT_BASE_NF4, HPT_TIER_HOST, 0}, {HPT_BASE_BF16, HPT_TIER_DISK, 0},
        {HPT_BASE_NF4, HPT_TIER_DISK, 1}};
    for (size_t c = 0; c < sizeof k_cases / sizeof k_cases[0]; c++) {
        int kind = k_cases[c].kind, home = k_cases[c].home, via = k_cases[c].via_host;
        hpt_mem *mem;
        CHECK_OK(hpt_mem_create(&mem));
        char dir[600];
        snprintf(dir, sizeof dir, "%s/frozen_home", t_tmpdir());
        CHECK_OK(hpt_mem_set_disk_dir(mem, dir));
        hpt_model *m[2] = {NULL, NULL};
        hpt_frozen_disk_via_host(via);
        CHECK_OK(hpt_model_create_frozen_on(mem, cfg, kind, home, &m[0]));
        hpt_frozen_disk_via_host(0);
        hpt_mem_stats st;
        hpt_mem_get_stats(mem, &st);
        uint64_t live[HPT_TIER_COUNT];
        for (int t = 0; t < HPT_TIER_COUNT; t++) live[t] = st.live_bytes[t][HPT_CAT_PARAMS];
        if (kind == HPT_BASE_F32) CHECK_OK(hpt_model_create_forward(mem, shape, &m[1]));
        else CHECK_OK(hpt_model_create_frozen(mem, cfg, kind, &m[1]));
        if (!m[0] || !m[1]) return;
        float l[2][2];
        float *g[2] = {0};
        for (int k = 0; k < 2; k++) {
            CHECK_OK(hpt_model_init_random(m[k], 5));
            CHECK_OK(hpt_model_lora_attach(m[k], &lo, 3));
            memcpy(hpt_model_lora_params(m[k]), lora0, nl * sizeof(float));
            for (int step = 0; step < 2; step++) {
                hpt_model_zero_grad(m[k]);
                CHECK_OK(hpt_model_forward(m[k], x, y, B, T, &l[k][step]));
                CHECK_OK(hpt_model_backward(m[k]));
            }
            g[k] = hpt_model_lora_grads(m[k]);
        }
        const char *kn = kind == HPT_BASE_F32 ? "f32" : kind == HPT_BASE_NF4 ? "nf4" : "bf16";
        const char *tn = via ? "disk (through a host block)" : hpt_tier_name((hpt_tier)home);
        CHECK_MSG(memcmp(l[0], l[1], sizeof l[0]) == 0 &&
                      memcmp(g[0], g[1], nl * sizeof(float)) == 0,
                  "%s base on the %s: loss %.9g, %.9g against the device's %.9g, %.9g or the "
                  "gradients differ", kn, tn, (double)l[0][0], (double)l[0][1], (double)l[1][0],
                  (double)l[1][1]);
        hpt_plan_opts po = hpt_plan_defaults();
        po.cfg = *hpt_model_get_config(m[0]);
        po.B = B, po.T = T, po.no_data = 1;
        po.lora = lo;
        po.lora.base = kind;
        po.lora.home = home;
        po.device = via; /* the estimate of a GPU's run counts the host block */
        hpt_estimate e;
        CHECK_OK(hpt_plan_estimate(&po, &e));
        uint64_t lb[HPT_CAT_COUNT];
        CHECK_OK(hpt_lora_bytes(cfg, &lo, B, T, 1, lb));
        CHECK(live[home] > 0);
        for (int t = 0; t < HPT_TIER_COUNT; t++)
            CHECK_MSG(live[t] + (t == HPT_TIER_DEVICE ? lb[HPT_CAT_PARAMS] : 0) ==
                          e.bytes[t][HPT_CAT_PARAMS],
                      "%s base on the %s: params on the %s %llu (+ adapters %llu on the device), "
                      "estimated %llu", kn, tn, hpt_tier_name((hpt_tier)t),
                      (unsigned long long)live[t], (unsigned long long)lb[HPT_CAT_PARAMS],
                      (unsigned long long)e.bytes[t][HPT_CAT_PARAMS]);
        printf("%s: %s base on the %s: the device home's bits (losses %.7f, %.7f); params: "
               "device %llu, host %llu, disk %llu, as estimated\n", shape, kn, tn,
               (double)l[0][0], (double)l[0][1], (unsigned long long)live[HPT_TIER_DEVICE],
               (unsigned long long)live[HPT_TIER_HOST], (unsigned long long)live[HPT_TIER_DISK]);
        hpt_model_free(m[0]);
        hpt_model_free(m[1]);
        hpt_mem_get_stats(mem, &st);
        for (int t = 0; t < HPT_TIER_COUNT; t++)
            for (int k = 0; k < HPT_CAT_COUNT; k++) CHECK(st.live_bytes[t][k] == 0 || k == HPT_CAT_IO);
        hpt_mem_destroy(mem);
    }
}

/* The descriptor of this process's one disk-tier file in dir, -1 if not exactly one. */
static int disk_fd(const char *dir) {
    int fds[2];
    off_t sizes[2];
    return t_disk_fds(dir, fds, sizes, 2) == 1 ? fds[0] : -1;
}


/* Prefetch of a base off the device (--base-prefetch, model/frozen.c), on the shape with L = 5
 * (more blocks than staging blocks, so each pass reads): under each recompute policy (the
 * schedule's orders) two steps with and without prefetch give the same loss and adapter
 * gradients bit for bit (adapters set to a pattern: every gradient non-zero), read whole blocks
 * and no more of them than without (the second staging block keeps one more), and params per
 * tier are as the estimator says for each (the second staging block); a failed read (EIO, a
 * file truncated underneath, a flipped byte's checksum) is the same status and one-line text
 * with and without, and the store is freed cleanly after it. */
static void check_prefetch(const hpt_model_config *cfg2, const char *shape, const int32_t *x,
                           const int32_t *y, int B, int T, hpt_lora_opts lo) {
    hpt_model_config cfg5 = *cfg2;
    cfg5.L = 5;
    const hpt_model_config *cfg = &cfg5;
    static const struct { int kind, home; } k_cases[] = {{HPT_BASE_BF16, HPT_TIER_DISK},
                                                         {HPT_BASE_NF4, HPT_TIER_HOST}};
    static const char *const policies[] = {"none", "full", "every:2", "selective"};
    size_t nl = 0;
    for (size_t c = 0; c < sizeof k_cases / sizeof k_cases[0]; c++) {
        int kind = k_cases[c].kind, home = k_cases[c].home;
        const char *tn = hpt_tier_name((hpt_tier)home);
        for (int pol = 0; pol < 4; pol++) {
            float l[2][2];
            float *g[2] = {0};
            hpt_offload_stats os[2];
            hpt_model *m[2] = {NULL, NULL};
            hpt_mem *mem[2];
            for (int pf = 0; pf < 2; pf++) {
                CHECK_OK(hpt_mem_create(&mem[pf]));
                char dir[600];
                snprintf(dir, sizeof dir, "%s/frozen_prefetch", t_tmpdir());
                CHECK_OK(hpt_mem_set_disk_dir(mem[pf], dir));
                model_set_frozen_prefetch(pf);
                CHECK_OK(hpt_model_create_frozen_on(mem[pf], cfg, kind, home, &m[pf]));
                model_set_frozen_prefetch(1);
                if (!m[pf]) return;
                hpt_mem_stats st;
                hpt_mem_get_stats(mem[pf], &st);
                hpt_plan_opts po = hpt_plan_defaults();
                po.cfg = *hpt_model_get_config(m[pf]);
                po.B = B, po.T = T, po.no_data = 1;
                po.lora = lo;
                po.lora.base = kind, po.lora.home = home, po.lora.no_prefetch = !pf;
                hpt_estimate e;
                CHECK_OK(hpt_plan_estimate(&po, &e));
                uint64_t lb[HPT_CAT_COUNT];
                CHECK_OK(hpt_lora_bytes(cfg, &lo, B, T, 1, lb));
                for (int t = 0; t < HPT_TIER_COUNT; t++)
                    CHECK_MSG(st.live_bytes[t][HPT_CAT_PARAMS] +
                                      (t == HPT_TIER_DEVICE ? lb[HPT_CAT_PARAMS] : 0) ==
                                  e.bytes[t][HPT_CAT_PARAMS],
                              "prefetch %d, base on the %s: params on the %s %llu, estimated %llu",
                              pf, tn, hpt_tier_name((hpt_tier)t),
                              (unsigned long long)st.live_bytes[t][HPT_CAT_PARAMS],
                              (unsigned long long)e.bytes[t][HPT_CAT_PARAMS]);
                CHECK_OK(hpt_model_init_random(m[pf], 5));
                CHECK_OK(hpt_model_lora_attach(m[pf], &lo, 3));
                nl = hpt_model_lora_num_params(m[pf]);
                float *P = hpt_model_lora_params(m[pf]);
                for (size_t i = 0; i < nl; i++) P[i] = 0.02f * sinf(0.37f * (float)i);
                hpt_act_opts a = hpt_act_defaults();
                CHECK_OK(hpt_recompute_parse(policies[pol], &a));
                CHECK_OK(hpt_model_set_act_opts(m[pf], &a));
                for (int step = 0; step < 2; step++) {
                    hpt_model_zero_grad(m[pf]);
                    CHECK_OK(hpt_model_forward(m[pf], x, y, B, T, &l[pf][step]));
                    CHECK_OK(hpt_model_backward(m[pf]));
                }
                g[pf] = hpt_model_lora_grads(m[pf]);
                hpt_model_offload_stats(m[pf], &os[pf]);
            }
            CHECK_MSG(memcmp(l[0], l[1], sizeof l[0]) == 0 &&
                          memcmp(g[0], g[1], nl * sizeof(float)) == 0,
                      "base on the %s, --recompute %s: loss %.9g, %.9g with prefetch, %.9g, %.9g "
                      "without, or the gradients differ", tn, policies[pol], (double)l[1][0],
                      (double)l[1][1], (double)l[0][0], (double)l[0][1]);
            CHECK_MSG(os[1].loads > 0 && os[1].loads <= os[0].loads &&
                          os[0].bytes_in[home] * os[1].loads == os[1].bytes_in[home] * os[0].loads &&
                          os[0].acquires == os[1].acquires,
                      "base on the %s, --recompute %s: %llu reads of %llu bytes in %llu acquires "
                      "with prefetch, %llu of %llu in %llu without", tn, policies[pol],
                      (unsigned long long)os[1].loads, (unsigned long long)os[1].bytes_in[home],
                      (unsigned long long)os[1].acquires, (unsigned long long)os[0].loads,
                      (unsigned long long)os[0].bytes_in[home], (unsigned long long)os[0].acquires);
            printf("%s, L=5: base on the %s, --recompute %s: prefetch gives the same bits (losses "
                   "%.7f, %.7f); block reads %llu with prefetch, %llu without, in %llu acquires\n",
                   shape, tn, policies[pol], (double)l[1][0], (double)l[1][1],
                   (unsigned long long)os[1].loads, (unsigned long long)os[0].loads,
                   (unsigned long long)os[1].acquires);
            for (int pf = 0; pf < 2; pf++) {
                hpt_model_free(m[pf]);
                hpt_mem_destroy(mem[pf]);
            }
        }
    }
    /* failed reads of a base on the disk: the same error with and without prefetch */
    static const char *const faults[] = {"EIO", "a truncated file", "a flipped byte"};
    for (int f = 0; f < 3; f++) {
        hpt_status st[2];
        char msg[2][1024];
        for (int pf = 0; pf < 2; pf++) {
            hpt_mem *mem;
            CHECK_OK(hpt_mem_create(&mem));
            char dir[600];
            snprintf(dir, sizeof dir, "%s/frozen_prefetch_fault", t_tmpdir());
            CHECK_OK(hpt_mem_set_disk_dir(mem, dir));
            hpt_model *m = NULL;
            model_set_frozen_prefetch(pf);
            CHECK_OK(hpt_model_create_frozen_on(mem, cfg, HPT_BASE_BF16, HPT_TIER_DISK, &m));
            model_set_frozen_prefetch(1);
            if (!m) return;
            CHECK_OK(hpt_model_init_random(m, 5));
            CHECK_OK(hpt_model_lora_attach(m, &lo, 3));
            if (f == 0) hpt_mem_disk_fail(mem, HPT_DISK_FAULT_EIO, 2); /* block 1's read */
            else if (f == 1) hpt_mem_disk_fail(mem, HPT_DISK_FAULT_VANISHED, 2);
            else {
                int fd = disk_fd(dir);
                CHECK(fd >= 0);
                struct stat sb;
                if (fd >= 0 && fstat(fd, &sb) == 0)
                    t_flip_byte(fd, (off_t)(sb.st_size / cfg->L + 100)); /* block 1: L strides */
            }
            hpt_model_zero_grad(m);
            float loss;
            st[pf] = hpt_model_forward(m, x, y, B, T, &loss);
            snprintf(msg[pf], sizeof msg[pf], "%s", hpt_last_error());
            hpt_mem_disk_fail(mem, HPT_DISK_FAULT_NONE, 0);
            hpt_model_free(m);
            hpt_mem_destroy(mem);
        }
        CHECK_MSG(st[0] != HPT_OK && st[0] == st[1] && !strcmp(msg[0], msg[1]) &&
                      strstr(msg[1], "block 1") && !strchr(msg[1], '\n'),
                  "%s: status %d '%s' with prefetch, %d '%s' without", faults[f], (int)st[1],
                  msg[1], (int)st[0], msg[0]);
        printf("%s, L=5: %s in block 1 of a base on the disk, with and without prefetch: %s\n", shape,
               faults[f], msg[1]);
    }
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: test_lora REF SHAPE TARGETS R ALPHA RSLORA\n");
        return 2;
    }
    size_t len = 0;
    int32_t *h = read_all(argv[1], &len);
    if (!h || len < 1024 || h[0] != 20261128) {
        fprintf(stderr, "test_lora: cannot read the reference %s\n", argv[1]);
        return 1;
    }
    const int B = h[2], T = h[3], steps = h[6];
    const size_t BT = (size_t)B * T, np = (size_t)h[4], nl = (size_t)h[5];
    const int32_t *x = h + 256, *y = x + BT;
    const float *base = (const float *)(y + BT), *lora0 = base + np;
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(argv[2], &cfg));
    const int V = cfg.V, Vp = cfg.Vp;
    const float *logits = lora0 + nl, *loss_ref = logits + BT * (size_t)V;
    const float *grads = loss_ref + 1, *losses = grads + nl, *lora10 = losses + steps;
    if ((size_t)((const char *)(lora10 + nl) - (const char *)h) != len) {
        fprintf(stderr, "test_lora: %s has %zu bytes, not what its header says\n", argv[1], len);
        return 1;
    }

    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *m = NULL;
    CHECK_OK(hpt_model_create_forward(mem, argv[2], &m));
    CHECK(hpt_model_num_params(m) == np);
    memcpy(hpt_model_params(m), base, np * sizeof(float));
    hpt_lora_opts lo = hpt_lora_defaults();
    char spec[128];
    snprintf(spec, sizeof spec, "r=%s,alpha=%s%s", argv[4], argv[5], atoi(argv[6]) ? ",rslora" : "");
    CHECK_OK(hpt_lora_parse(spec, &lo));
    snprintf(lo.targets, sizeof lo.targets, "%s", argv[3]);

    /* with B zero the adapters change no bit of the base's forward */
    float l_base, l_zero;
    CHECK_OK(hpt_model_forward(m, x, y, B, T, &l_base));
    CHECK_OK(hpt_model_lora_attach(m, &lo, 1234));
    CHECK(hpt_model_lora_num_params(m) == nl);
    CHECK(hpt_lora_num_params(&cfg, &lo) == nl);
    float *P = hpt_model_lora_params(m), *G = hpt_model_lora_grads(m);
    size_t off = 0, bad_init = 0;
    for (int i = 0; i < hpt_model_lora_num_tensors(m); i++) {
        hpt_tensor_info ti;
        CHECK_OK(hpt_model_lora_tensor(m, i, &ti));
        float bound = i % 2 ? 0.0f : 1.0f / sqrtf((float)ti.shape[2]);
        double sum = 0;
        for (size_t k = 0; k < ti.numel; k++) {
            bad_init += fabsf(P[off + k]) > bound;
            sum += fabs((double)P[off + k]);
        }
        if (i % 2 == 0) CHECK_MSG(sum / (double)ti.numel > 0.4 * (double)bound, "%s: mean |A| %g, bound %g",
                                  ti.name, sum / (double)ti.numel, (double)bound);
        off += ti.numel;
    }
    CHECK_MSG(bad_init == 0, "%zu initial values outside PEFT's range", bad_init);
    CHECK_OK(hpt_model_forward(m, x, y, B, T, &l_zero));
    CHECK_MSG(memcmp(&l_base, &l_zero, sizeof l_base) == 0, "B = 0: loss %.9g, base %.9g",
              (double)l_zero, (double)l_base);

    /* the reference's adapters: logits, loss, gradients */
    memcpy(P, lora0, nl * sizeof(float));
    float loss;
    CHECK_OK(hpt_model_forward(m, x, y, B, T, &loss));
    const float *lg = hpt_model_logits(m);
    double el = 0;
    for (size_t i = 0; i < BT; i++) el = fmax(el, max_abs(lg + i * Vp, logits + i * V, (size_t)V));
    hpt_model_zero_grad(m);
    CHECK_OK(hpt_model_backward(m));
    double eg = max_abs(G, grads, nl), gmax = 0;
    for (size_t i = 0; i < nl; i++) gmax = fmax(gmax, fabs((double)grads[i]));
    printf("%s: logits max err %.3g, loss %.7f (PyTorch %.7f), adapter grads max err %.3g "
           "(largest %.3g)\n", argv[2], el, (double)loss, (double)*loss_ref, eg, gmax);
    CHECK_MSG(el < 1e-4, "logits err %g", el);
    CHECK_MSG(fabs((double)loss - (double)*loss_ref) < 1e-4, "loss %g, PyTorch %g", (double)loss,
              (double)*loss_ref);
    CHECK_MSG(eg < 1e-4, "adapter gradients err %g", eg);
    size_t zero_g = 0;
    for (size_t i = 0; i < nl; i++) zero_g += G[i] == 0.0f;
    CHECK_MSG(zero_g < nl / 100, "%zu adapter gradients are zero", zero_g);

    /* 10 AdamW steps on the adapters */
    hpt_adamw_opts ao = hpt_adamw_defaults();
    ao.lr = 1e-2f;
    ao.beta1 = 0.9f;
    ao.beta2 = 0.999f;
    ao.eps = 1e-8f;
    ao.weight_decay = 0.01f;
    ao.decay_all = 1;
    hpt_optim *opt = NULL;
    CHECK_OK(hpt_optim_create(mem, m, &ao, &opt));
    double es = 0;
    for (int s = 0; s < steps && opt; s++) {
        float l;
        CHECK_OK(hpt_model_forward(m, x, y, B, T, &l));
        es = fmax(es, fabs((double)l - (double)losses[s]));
        hpt_model_zero_grad(m);
        CHECK_OK(hpt_model_backward(m));
        CHECK_OK(hpt_optim_step(opt, 1e-2f, 0.0f, NULL));
    }
    double ea = max_abs(P, lora10, nl);
    printf("%s: 10 AdamW steps: losses max err %.3g, adapters max err %.3g\n", argv[2], es, ea);
    CHECK_MSG(es < 1e-4, "step losses err %g", es);
    CHECK_MSG(ea < 1e-4, "adapters after 10 steps err %g", ea);
    CHECK_MSG(memcmp(hpt_model_params(m), base, np * sizeof(float)) == 0, "the base changed");

    /* the memory: no base gradients; every category as the estimator's figures */
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    uint64_t lb[HPT_CAT_COUNT];
    CHECK_OK(hpt_lora_bytes(&cfg, &lo, B, T, 1, lb));
    hpt_act_opts act = hpt_act_defaults();
    const uint64_t *live = st.live_bytes[HPT_TIER_DEVICE];
    CHECK(hpt_model_grads(m) == NULL);
    CHECK_MSG(live[HPT_CAT_GRADS] == lb[HPT_CAT_GRADS], "grads %llu, estimated %llu",
              (unsigned long long)live[HPT_CAT_GRADS], (unsigned long long)lb[HPT_CAT_GRADS]);
    CHECK_MSG(live[HPT_CAT_OPTIM] == hpt_optim_lora_state_bytes(&cfg, &lo, &ao),
              "optim %llu, estimated %llu", (unsigned long long)live[HPT_CAT_OPTIM],
              (unsigned long long)hpt_optim_lora_state_bytes(&cfg, &lo, &ao));
    CHECK_MSG(live[HPT_CAT_OPTIM] == 2 * 4 * nl, "AdamW state %llu for %zu adapter values",
              (unsigned long long)live[HPT_CAT_OPTIM], nl);
    uint64_t acts = hpt_model_activation_bytes(&cfg, B, T, &act) + lb[HPT_CAT_ACTS];
    CHECK_MSG(live[HPT_CAT_ACTS] == acts, "acts %llu, estimated %llu",
              (unsigned long long)live[HPT_CAT_ACTS], (unsigned long long)acts);
    const hpt_arch *arch = hpt_arch_of(&cfg); /* the rotary tables beside the parameters */
    uint64_t consts = arch && arch->consts_floats ? arch->consts_floats(&cfg) * 4 : 0;
    CHECK_MSG(live[HPT_CAT_PARAMS] == np * 4 + lb[HPT_CAT_PARAMS] + consts,
              "params %llu: base %zu, adapters %llu, constants %llu",
              (unsigned long long)live[HPT_CAT_PARAMS], np * 4,
              (unsigned long long)lb[HPT_CAT_PARAMS], (unsigned long long)consts);

    /* refusals */
    hpt_lora_opts bad = lo;
    snprintf(bad.targets, sizeof bad.targets, "%s,nope", argv[3]);
    CHECK_STATUS(hpt_lora_bytes(&cfg, &bad, B, T, 1, lb), HPT_ERR_INVALID);
    CHECK(strstr(hpt_last_error(), "nope") != NULL);
    CHECK_STATUS(hpt_model_lora_attach(m, &lo, 1), HPT_ERR_INVALID); /* already attached */
    hpt_lora_opts q = hpt_lora_defaults();
    CHECK_STATUS(hpt_lora_parse("r=0", &q), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_lora_parse("dropout=1", &q), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_lora_parse("rank=4", &q), HPT_ERR_INVALID);
    CHECK_OK(hpt_lora_parse("r=16,alpha=32,dropout=0.05,rslora", &q));
    CHECK(q.r == 16 && q.alpha == 32.0f && q.dropout == 0.05f && q.rslora == 1);
    CHECK(fabsf(hpt_lora_scale(&q) - 8.0f) < 1e-6f);

    check_dropout(argv[2], base, np, lora0, nl, x, y, B, T, lo);
    check_frozen(&cfg, argv[2], HPT_BASE_BF16, lora0, nl, x, y, B, T, lo);
    check_frozen(&cfg, argv[2], HPT_BASE_INT8, lora0, nl, x, y, B, T, lo);
    check_frozen(&cfg, argv[2], HPT_BASE_NF4, lora0, nl, x, y, B, T, lo);
    check_vocab_chunks(&cfg, lora0, nl, x, y, B, T, lo);
    check_homes(&cfg, argv[2], lora0, nl, x, y, B, T, lo);
    check_prefetch(&cfg, argv[2], x, y, B, T, lo);
    hpt_optim_free(opt);
    hpt_model_free(m);
    hpt_mem_get_stats(mem, &st);
    for (int c = 0; c < HPT_CAT_COUNT; c++) CHECK(st.live_bytes[HPT_TIER_DEVICE][c] == 0);
    hpt_mem_destroy(mem);
    free(h);
    return t_done("test_lora");
}
