/* test_mlptile.c ARCH: the sequence-tiled MLP (mlp_tile > 0; docs/activations.md, "The tiled
 * MLP") computes the untiled run's loss and gradients, with a smaller arena that the estimate
 * names exactly. On each variant of the architecture's case (odd sizes: C 50, 5 heads, the
 * Llama family's FF 75, V 301; B*T = 69 rows), with each attention kind and recompute policy, for tiles
 * that do and do not divide B*T (1, 16, 23, 32, 68, 69, 1000): the loss and every gradient
 * against the same policy untiled (the activations and the input gradients are each a row's
 * own, the weights' gradients sums over tiles: within 1e-6 relative, and it prints how many
 * bits match), and with saved activations offloaded to the host; the arena equals
 * hpt_model_act_tier_bytes; LoRA adapters without dropout tile,
 * with dropout they are refused; a short training run's device peak equals the estimator's;
 * the plan's option parses, prints back and is refused with LoRA dropout. */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

enum { B = 3, T = 23 }; /* 69 rows: a prime's multiple, divided by few tiles */

static void batch(const hpt_model_config *cfg, int32_t *x, int32_t *y) {
    for (int i = 0; i < B * T; i++) {
        x[i] = (i * 37 + 11) % cfg->V;
        y[i] = (i * 53 + 7) % cfg->V;
    }
}

/* One forward and backward of m under o: its loss, and its gradients into g (n floats). */
static float step(hpt_model *m, const hpt_act_opts *o, const int32_t *x, const int32_t *y,
                  float *g, size_t n, const float *src) {
    float loss;
    CHECK_OK(hpt_model_set_act_opts(m, o));
    CHECK_OK(hpt_model_forward(m, x, y, B, T, &loss));
    hpt_model_zero_grad(m);
    CHECK_OK(hpt_model_backward(m));
    memcpy(g, src ? src : hpt_model_grads(m), n * sizeof(float));
    return loss;
}

/* A model of shape on a fresh *mem (seed 5), its configuration and the batch. */
static hpt_model *model_of(const char *shape, hpt_mem **mem, hpt_model_config *cfg, int32_t *x,
                           int32_t *y) {
    hpt_model *m = NULL;
    CHECK_OK(hpt_mem_create(mem));
    CHECK_OK(hpt_model_config_parse(shape, cfg));
    batch(cfg, x, y);
    CHECK_OK(hpt_model_create_config(*mem, cfg, &m));
    hpt_model_init_random(m, 5);
    return m;
}

static void check_policies(const char *shape) {
    printf("%s\n", shape);
    hpt_mem *mem;
    hpt_model_config cfg;
    int32_t x[B * T], y[B * T];
    hpt_model *m = model_of(shape, &mem, &cfg, x, y);
    const size_t n = hpt_model_num_params(m);
    float *gref = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    float *gnone = malloc(n * sizeof(float));
    CHECK(gref && g && gnone);
    static const char *const recs[] = {"none", "selective", "every:2", "full"};
    static const int tiles[] = {1, 16, 23, 32, 68, 69, 1000};
    size_t same_total = 0, n_total = 0;
    for (int at = 0; at < 2; at++)
        for (size_t r = 0; r < sizeof recs / sizeof *recs; r++) {
            hpt_act_opts o = hpt_act_defaults();
            o.attention = at ? HPT_ATTN_PLAIN : HPT_ATTN_FLASH;
            CHECK_OK(hpt_recompute_parse(recs[r], &o));
            const float lref = step(m, &o, x, y, gref, n, NULL);
            uint64_t untiled[HPT_TIER_COUNT];
            CHECK_OK(hpt_model_act_tier_bytes(&cfg, B, T, &o, untiled));
            for (size_t k = 0; k < sizeof tiles / sizeof *tiles; k++) {
                o.mlp_tile = tiles[k];
                const float loss = step(m, &o, x, y, g, n, NULL);
                double le = (double)(loss - lref) / (double)lref, ge = t_rel_err(g, gref, n);
                size_t same = 0;
                for (size_t i = 0; i < n; i++) same += !memcmp(&g[i], &gref[i], sizeof(float));
                same_total += same, n_total += n;
                CHECK_MSG(le < 1e-6 && le > -1e-6, "%s %s tile %d: loss %.3e", at ? "plain" : "flash",
                          recs[r], tiles[k], le);
                CHECK_MSG(ge < 1e-6, "%s %s tile %d: grads %.3e", at ? "plain" : "flash", recs[r],
                          tiles[k], ge);
                if (o.recompute == HPT_RECOMPUTE_EVERY || o.recompute == HPT_RECOMPUTE_FULL) {
                    /* recomputation is exact at the same tile: the bits of recompute none (the
                     * Llama family's block backward then works in its own dead fields, the
                     * tiles rebuilding ln2's rows: arch.h's HPT_FIELD_NORM2) */
                    hpt_act_opts on = o;
                    on.recompute = HPT_RECOMPUTE_NONE;
                    const float lnone = step(m, &on, x, y, gnone, n, NULL);
                    CHECK_MSG(!memcmp(&lnone, &loss, sizeof loss) && !memcmp(gnone, g, n * sizeof(float)),
                              "%s %s tile %d: not recompute none's bits", at ? "plain" : "flash",
                              recs[r], tiles[k]);
                    CHECK_OK(hpt_model_set_act_opts(m, &o)); /* the arena check below: o's */
                    CHECK_OK(hpt_model_forward(m, x, y, B, T, NULL));
                }
                /* the arena is the plan's, and smaller than the untiled one's */
                uint64_t bytes[HPT_TIER_COUNT];
                CHECK_OK(hpt_model_act_tier_bytes(&cfg, B, T, &o, bytes));
                hpt_mem_stats st;
                hpt_mem_get_stats(mem, &st);
                CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] == bytes[HPT_TIER_DEVICE]);
                if (o.recompute == HPT_RECOMPUTE_NONE || o.recompute == HPT_RECOMPUTE_SELECTIVE)
                    CHECK_MSG(tiles[k] > 32 || bytes[HPT_TIER_DEVICE] < untiled[HPT_TIER_DEVICE],
                              "%s tile %d: arena %llu, untiled %llu", recs[r], tiles[k],
                              (unsigned long long)bytes[HPT_TIER_DEVICE],
                              (unsigned long long)untiled[HPT_TIER_DEVICE]);
                if (r == 0 && at == 0)
                    printf("  tile %4d: loss rel %+.2e, grads rel %.2e, %zu of %zu gradients "
                           "bit-equal, arena %llu (untiled %llu)\n", tiles[k], le, ge, same, n,
                           (unsigned long long)bytes[HPT_TIER_DEVICE],
                           (unsigned long long)untiled[HPT_TIER_DEVICE]);
            }
        }
    printf("  all policies: %zu of %zu gradients bit-equal to the untiled run's\n", same_total,
           n_total);
    /* saved activations offloaded to the host: the tiles' buffers stay on the device */
    hpt_act_opts o = hpt_act_defaults();
    o.recompute = HPT_RECOMPUTE_SELECTIVE;
    o.offload = HPT_OFFLOAD_HOST;
    const float lref = step(m, &o, x, y, gref, n, NULL);
    o.mlp_tile = 16;
    const float loss = step(m, &o, x, y, g, n, NULL);
    CHECK_MSG(loss == lref && t_rel_err(g, gref, n) < 1e-6, "act offload host, tile 16: loss "
              "%.9g vs %.9g, grads %.3e", (double)loss, (double)lref, t_rel_err(g, gref, n));
    uint64_t bytes[HPT_TIER_COUNT];
    CHECK_OK(hpt_model_act_tier_bytes(&cfg, B, T, &o, bytes));
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_ACTS] == bytes[HPT_TIER_DEVICE]);
    hpt_act_opts bad = hpt_act_defaults();
    bad.mlp_tile = -1;
    CHECK_STATUS(hpt_model_set_act_opts(m, &bad), HPT_ERR_INVALID);
    free(g);
    free(gref);
    free(gnone);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

/* LoRA: the adapters' gradients tiled = untiled (B random, so that A's are not 0); dropout's
 * masks are per call: refused. */
static void check_lora(const char *shape) {
    hpt_mem *mem;
    hpt_model_config cfg;
    int32_t x[B * T], y[B * T];
    hpt_model *m = model_of(shape, &mem, &cfg, x, y);
    hpt_lora_opts lo = hpt_lora_defaults();
    CHECK_OK(hpt_lora_parse("r=4,alpha=8", &lo));
    CHECK_OK(hpt_model_lora_attach(m, &lo, 3));
    const size_t n = hpt_model_lora_num_params(m);
    float *p = hpt_model_lora_params(m), *gref = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
    CHECK(gref && g);
    for (size_t i = 0; i < n; i++) p[i] = 0.01f * (float)((int)(i * 7919 % 201) - 100) / 100.0f;
    hpt_act_opts o = hpt_act_defaults();
    o.recompute = HPT_RECOMPUTE_SELECTIVE;
    const float lref = step(m, &o, x, y, gref, n, hpt_model_lora_grads(m));
    o.mlp_tile = 16;
    const float loss = step(m, &o, x, y, g, n, hpt_model_lora_grads(m));
    double le = (double)(loss - lref) / (double)lref, ge = t_rel_err(g, gref, n);
    printf("  LoRA r4, tile 16: loss rel %+.2e, adapters' grads rel %.2e\n", le, ge);
    CHECK(le < 1e-6 && le > -1e-6 && ge < 1e-6);
    /* full recomputation at the same tile, its checkpoints (the embedding's output among them)
     * on the host or not: recompute none's bits */
    o.recompute = HPT_RECOMPUTE_NONE;
    const float lnone = step(m, &o, x, y, gref, n, hpt_model_lora_grads(m));
    for (int off = 0; off < 2; off++) {
        o.recompute = HPT_RECOMPUTE_FULL;
        o.offload = off ? HPT_OFFLOAD_HOST : HPT_OFFLOAD_NONE;
        const float lfull = step(m, &o, x, y, g, n, hpt_model_lora_grads(m));
        CHECK_MSG(!memcmp(&lfull, &lnone, sizeof lfull) && !memcmp(g, gref, n * sizeof(float)),
                  "LoRA, full, tile 16, offload %d: not recompute none's bits", off);
    }
    o.offload = HPT_OFFLOAD_NONE;
    hpt_model_lora_detach(m);
    CHECK_OK(hpt_lora_parse("r=4,alpha=8,dropout=0.1", &lo));
    CHECK_OK(hpt_model_lora_attach(m, &lo, 3));
    CHECK_STATUS(hpt_model_forward(m, x, y, B, T, NULL), HPT_ERR_UNSUPPORTED);
    free(g);
    free(gref);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

/* A trainer's run with a tiled MLP: its device peak per tier is the estimator's. */
static void check_estimate(const char *shape) {
    char train[512];
    t_make_shards(91, 50, 5, 3, 4000, 0, train, NULL);
    static const struct { const char *rec; int tile; hpt_act_offload off; } runs[] = {
        {"none", 16, HPT_OFFLOAD_NONE}, {"selective", 23, HPT_OFFLOAD_NONE},
        {"full", 7, HPT_OFFLOAD_NONE}, {"none", 1000, HPT_OFFLOAD_NONE},
        {"full", 7, HPT_OFFLOAD_HOST}, {"every:2", 16, HPT_OFFLOAD_HOST}};
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        hpt_mem *mem;
        CHECK_OK(hpt_mem_create(&mem));
        hpt_train_opts o = t_train_opts(shape, train, B, T, 2, 1);
        CHECK_OK(hpt_recompute_parse(runs[i].rec, &o.act));
        o.act.mlp_tile = runs[i].tile;
        o.act.offload = runs[i].off;
        float losses[2];
        t_train_run(mem, &o, 0, losses, NULL, NULL); /* to the end, unsaved */
        char what[64];
        snprintf(what, sizeof what, "recompute %s, mlp tile %d, act offload %d", runs[i].rec,
                 runs[i].tile, (int)runs[i].off);
        t_check_estimate(mem, &o, what);
        hpt_mem_destroy(mem);
    }
}

/* The plan's option: parsed, printed back, refused negative and with LoRA dropout. */
static void check_plan(void) {
    hpt_plan p = hpt_plan_default_choices();
    CHECK_OK(hpt_plan_set(&p, "mlp-tile", "64"));
    CHECK(p.act.mlp_tile == 64);
    char flags[1024];
    CHECK_OK(hpt_plan_print(&p, flags, sizeof flags));
    CHECK_MSG(strstr(flags, "--mlp-tile 64") != NULL, "printed '%s'", flags);
    CHECK_STATUS(hpt_plan_set(&p, "mlp-tile", "-1"), HPT_ERR_INVALID);
    hpt_plan_env env = {.training = 1, .has_val = -1};
    CHECK_OK(hpt_plan_check(&p, &env));
    CHECK_OK(hpt_plan_set(&p, "lora", "r=4,alpha=8"));
    CHECK_OK(hpt_plan_check(&p, &env));
    CHECK_OK(hpt_plan_set(&p, "lora", "r=4,alpha=8,dropout=0.1"));
    CHECK_STATUS(hpt_plan_check(&p, &env), HPT_ERR_UNSUPPORTED);
}

/* Gemma 3 refuses a tiled MLP (its MLP's output norm; model/actopts.c): the model and the
 * estimator alike, and --plan auto does not try it. */
static void check_refused(const char *shape) {
    hpt_mem *mem;
    hpt_model *m;
    CHECK_OK(hpt_mem_create(&mem));
    CHECK_OK(hpt_model_create(mem, shape, &m));
    hpt_act_opts o = hpt_act_defaults();
    o.mlp_tile = 16;
    CHECK_STATUS(hpt_model_set_act_opts(m, &o), HPT_ERR_UNSUPPORTED);
    o.mlp_tile = 0;
    CHECK_OK(hpt_model_set_act_opts(m, &o));
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    hpt_plan_opts p = hpt_plan_defaults();
    CHECK_OK(hpt_model_config_parse(shape, &p.cfg));
    p.B = B, p.T = T;
    p.plan.act.mlp_tile = 16;
    hpt_estimate e;
    CHECK_STATUS(hpt_plan_estimate(&p, &e), HPT_ERR_UNSUPPORTED);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_mlptile");
    if (!a) return 2;
    hpt_set_threads(2);
    char shape[T_SHAPE_MAX];
    if (a->id == HPT_ARCH_GEMMA3) {
        check_refused(t_arch_shape(a, shape, 2, 50, 5, 301, 32, 0));
        return t_done(t_arch_label(a, "test_mlptile"));
    }
    for (int v = 0; v < a->n_variants; v++)
        check_policies(t_arch_shape(a, shape, 2, 50, 5, 301, 32, v));
    t_arch_shape(a, shape, 2, 50, 5, 301, 32, 0);
    check_lora(shape);
    check_estimate(shape);
    if (t_arch_first(a)) check_plan();
    return t_done(t_arch_label(a, "test_mlptile"));
}
