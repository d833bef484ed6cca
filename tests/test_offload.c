/* test_offload.c: saved-activation offload is exact, shrinks the device arena, and is
 * estimated byte for byte; int8 compression stays within a stated error.
 *
 * test_offload ARCH, on the architecture's case (arch_cases.h). Exact part: for each attention
 * kind (flash, plain), recompute policy (none, selective, every:2, full: the kept block inputs
 * move) and offload tier (host, disk), a
 * small model (L = 4) takes a few plain-SGD steps from the same
 * initialisation and batches as without offload: every loss, the final gradients and the final
 * parameters must be the same bits (memcmp). The device arena must be smaller than without
 * offload, and the live activation bytes on each tier (device arena, host buffer, disk block)
 * must equal hpt_model_act_tier_bytes (the estimator's figures); transfers must be recorded.
 * Full recompute with offload: the planned device bytes are the same at L = 4 and 16; under
 * LoRA over an NF4 base, untiled and with a tiled MLP, bit-identical to no offload.
 * Lossy part (--act-compress int8, per-row absmax, and bf16): against the exact gradients of
 * one forward+backward, the relative norm error ||g8 - g|| / ||g|| must be below GRAD_TOL
 * (int8) or GRAD_TOL_BF16 for each storage (device arena, host, disk); and 100 AdamW steps on a learnable synthetic sequence
 * must lower the loss like the exact run: final losses within LOSS_TOL (relative) of each
 * other and both below half the initial loss. */
#include "testlib.h"

#include "core/core.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { STEPS = 3, B = 2, T = 40 };
#define GRAD_TOL 0.05
#define GRAD_TOL_BF16 0.01
#define LOSS_TOL 0.05

static char k_shape[T_SHAPE_MAX];
static char g_dir[64];

typedef struct {
    float losses[STEPS];
    float *grads, *params;
    size_t np;
    uint64_t tier_bytes[HPT_TIER_COUNT];
    uint64_t n_transfers;
} run_out;

static hpt_model *make(hpt_mem **mem, const hpt_act_opts *ao) {
    CHECK_OK(hpt_mem_create(mem));
    CHECK_OK(hpt_mem_set_disk_dir(*mem, g_dir));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(k_shape, &cfg));
    hpt_model *m;
    CHECK_OK(hpt_model_create_config(*mem, &cfg, &m));
    hpt_model_init_random(m, 11);
    CHECK_OK(hpt_model_set_act_opts(m, ao));
    return m;
}

static void run(const hpt_act_opts *ao, int steps, run_out *out) {
    hpt_mem *mem;
    hpt_model *m = make(&mem, ao);
    hpt_mem_record(mem, 1);
    t_sgd_steps(m, B, T, steps, out->losses);
    size_t n_ev;
    const hpt_mem_event *ev = hpt_mem_events(mem, &n_ev);
    out->n_transfers = 0;
    for (size_t i = 0; i < n_ev; i++) out->n_transfers += ev[i].kind == HPT_EV_TRANSFER;
    hpt_mem_record(mem, 0);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    uint64_t want[HPT_TIER_COUNT];
    CHECK_OK(hpt_model_act_tier_bytes(hpt_model_get_config(m), B, T, ao, want));
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        out->tier_bytes[t] = st.live_bytes[t][HPT_CAT_ACTS];
        CHECK_MSG(out->tier_bytes[t] == want[t], "%s: acts %llu, estimated %llu",
                  hpt_tier_name((hpt_tier)t), (unsigned long long)out->tier_bytes[t],
                  (unsigned long long)want[t]);
    }
    out->np = hpt_model_num_params(m);
    out->grads = malloc(out->np * sizeof(float));
    out->params = malloc(out->np * sizeof(float));
    memcpy(out->grads, hpt_model_grads(m), out->np * sizeof(float));
    memcpy(out->params, hpt_model_params(m), out->np * sizeof(float));
    t_replan(m, B, T);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

/* 100 AdamW steps on a learnable sequence (each token determines the next: t -> (5t + 3) mod
 * 64, from a random start per row); first and last losses. */
static void train(const hpt_act_opts *ao, float *first, float *last) {
    hpt_mem *mem;
    hpt_model *m = make(&mem, ao);
    hpt_adamw_opts oo = hpt_adamw_defaults();
    hpt_optim *opt;
    CHECK_OK(hpt_optim_create(mem, m, &oo, &opt));
    int32_t x[B * T], y[B * T];
    hpt_rng r;
    hpt_rng_seed(&r, 9);
    for (int s = 0; s < 100; s++) {
        for (int b = 0; b < B; b++) {
            int32_t tok = (int32_t)(hpt_rng_uniform(&r) * 64) % 64;
            for (int t = 0; t < T; t++) {
                x[b * T + t] = tok;
                tok = (5 * tok + 3) % 64;
                y[b * T + t] = tok;
            }
        }
        float loss, gn;
        CHECK_OK(hpt_model_forward(m, x, y, B, T, &loss));
        hpt_model_zero_grad(m);
        CHECK_OK(hpt_model_backward(m));
        CHECK_OK(hpt_optim_step(opt, 1e-3f, 1.0f, &gn));
        if (s == 0) *first = loss;
        *last = loss;
    }
    hpt_optim_free(opt);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

/* Full recompute with offload: the device's activation bytes do not grow with L (the block
 * inputs in flight are two), against the kept inputs' L - 1 without offload (the plan alone). */
static void depth_free(const t_arch *a) {
    uint64_t dev[2][2];
    for (int li = 0; li < 2; li++)
        for (int off = 0; off < 2; off++) {
            char shape[T_SHAPE_MAX];
            t_arch_shape(a, shape, li ? 16 : 4, 64, 4, 256, 512, 0);
            hpt_model_config cfg;
            CHECK_OK(hpt_model_config_parse(shape, &cfg));
            hpt_act_opts o = hpt_act_defaults();
            CHECK_OK(hpt_recompute_parse("full", &o));
            o.head_chunk = 128;
            o.offload = off ? HPT_OFFLOAD_HOST : HPT_OFFLOAD_NONE;
            uint64_t t[HPT_TIER_COUNT];
            CHECK_OK(hpt_model_act_tier_bytes(&cfg, 1, 512, &o, t));
            dev[li][off] = t[HPT_TIER_DEVICE];
        }
    printf("full recompute, T=512: device acts L=4 %llu, L=16 %llu; with host offload %llu, %llu\n",
           (unsigned long long)dev[0][0], (unsigned long long)dev[1][0],
           (unsigned long long)dev[0][1], (unsigned long long)dev[1][1]);
    CHECK(dev[1][0] > dev[0][0] && dev[1][1] == dev[0][1] && dev[0][1] < dev[0][0]);
}

/* Full recompute with offload under LoRA over an NF4 base on the host, untiled and with a
 * tiled MLP: the loss and the adapters' gradients are the same bits as without offload, and
 * the store's host and disk bytes are the estimator's. */
static void lora_full(void) {
    hpt_mem *mem;
    hpt_act_opts d = hpt_act_defaults();
    hpt_model *m = make(&mem, &d);
    hpt_lora_opts lo = hpt_lora_defaults();
    CHECK_OK(hpt_lora_parse("r=4,alpha=8", &lo));
    lo.base = HPT_BASE_NF4;
    lo.home = HPT_TIER_HOST;
    CHECK_OK(hpt_model_lora_attach(m, &lo, 3));
    const size_t n = hpt_model_lora_num_params(m);
    float *p = hpt_model_lora_params(m), *g[3] = {malloc(n * 4), malloc(n * 4), malloc(n * 4)};
    CHECK(g[0] && g[1] && g[2]);
    for (size_t i = 0; i < n; i++) p[i] = 0.01f * (float)((int)(i * 7919 % 201) - 100) / 100.0f;
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) x[i] = (i * 37 + 11) % 256, y[i] = (i * 53 + 7) % 256;
    /* Gemma 3 refuses a tiled MLP (model/actopts.c, test_mlptile) */
    const int tiles = hpt_model_get_config(m)->arch == HPT_ARCH_GEMMA3 ? 0 : 16;
    for (int tile = 0; tile <= tiles; tile += 16) {
        float loss[3];
        for (int ti = 0; ti < 3; ti++) {
            hpt_act_opts o = hpt_act_defaults();
            CHECK_OK(hpt_recompute_parse("full", &o));
            o.mlp_tile = tile;
            o.offload = (hpt_act_offload)ti;
            CHECK_OK(hpt_model_set_act_opts(m, &o));
            CHECK_OK(hpt_model_forward(m, x, y, B, T, &loss[ti]));
            hpt_model_zero_grad(m);
            CHECK_OK(hpt_model_backward(m));
            memcpy(g[ti], hpt_model_lora_grads(m), n * sizeof(float));
            uint64_t want[HPT_TIER_COUNT];
            CHECK_OK(hpt_model_act_tier_bytes(hpt_model_get_config(m), B, T, &o, want));
            hpt_mem_stats st;
            hpt_mem_get_stats(mem, &st);
            CHECK(st.live_bytes[HPT_TIER_DISK][HPT_CAT_ACTS] == want[HPT_TIER_DISK]);
            CHECK(ti != 1 || st.live_bytes[HPT_TIER_HOST][HPT_CAT_ACTS] == want[HPT_TIER_HOST]);
            CHECK_MSG(!memcmp(&loss[ti], &loss[0], sizeof(float)) &&
                      !memcmp(g[ti], g[0], n * sizeof(float)), "LoRA nf4, tile %d, offload %s: "
                      "loss or adapters' gradients differ", tile, hpt_act_offload_name(o.offload));
        }
        printf("LoRA r4 over nf4 (host), full recompute, mlp tile %d: loss %.6f, host and disk "
               "offload bit-identical\n", tile, (double)loss[0]);
    }
    for (int i = 0; i < 3; i++) free(g[i]);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_offload");
    if (!a) return 2;
    t_arch_shape(a, k_shape, 4, 64, 4, 256, 64, 0);
    snprintf(g_dir, sizeof g_dir, "/tmp/hpt_offload_%d", (int)getpid());
    static const char *policies[] = {"none", "selective", "every:2", "full"};
    static const char *tiers[] = {"host", "disk"};
    for (int k = 0; k < 2; k++)
        for (int pi = 0; pi < 4; pi++) {
            hpt_act_opts base = hpt_act_defaults();
            base.attention = k == 0 ? HPT_ATTN_FLASH : HPT_ATTN_PLAIN;
            CHECK_OK(hpt_recompute_parse(policies[pi], &base));
            run_out ref;
            run(&base, STEPS, &ref);
            printf("%s attention, recompute %s, %s B=%d T=%d: device arena %llu bytes\n",
                   hpt_attention_name(base.attention), policies[pi], k_shape, B, T,
                   (unsigned long long)ref.tier_bytes[HPT_TIER_DEVICE]);
            for (int ti = 0; ti < 2; ti++) {
                hpt_act_opts ao = base;
                CHECK_OK(hpt_act_offload_parse(tiers[ti], &ao));
                run_out o;
                run(&ao, STEPS, &o);
                int same = memcmp(o.losses, ref.losses, sizeof o.losses) == 0 &&
                           memcmp(o.grads, ref.grads, o.np * sizeof(float)) == 0 &&
                           memcmp(o.params, ref.params, o.np * sizeof(float)) == 0;
                CHECK_MSG(same, "offload %s: losses, gradients or parameters differ", tiers[ti]);
                /* every:2 at L = 4 moves one block input, which the head's peak hides */
                CHECK_MSG(o.tier_bytes[HPT_TIER_DEVICE] < ref.tier_bytes[HPT_TIER_DEVICE] + (pi == 2),
                          "offload %s: arena not smaller", tiers[ti]);
                CHECK_MSG(o.n_transfers > 0, "offload %s: no transfer recorded", tiers[ti]);
                printf("  offload %-4s device %9llu (%.2f x), host %9llu, disk %9llu; "
                       "bit-identical: %s\n", tiers[ti],
                       (unsigned long long)o.tier_bytes[HPT_TIER_DEVICE],
                       (double)o.tier_bytes[HPT_TIER_DEVICE] / (double)ref.tier_bytes[HPT_TIER_DEVICE],
                       (unsigned long long)o.tier_bytes[HPT_TIER_HOST],
                       (unsigned long long)o.tier_bytes[HPT_TIER_DISK], same ? "yes" : "NO");
                free(o.grads);
                free(o.params);
            }
            /* int8 and bf16: one step's gradients against the exact ones (every:2's stored
             * input is full's) */
            run_out one;
            run(&base, 1, &one);
            for (int ci = 0; ci < 6 * (pi != 2); ci++) {
                hpt_act_opts ao = base;
                ao.compress = ci < 3 ? HPT_COMPRESS_INT8 : HPT_COMPRESS_BF16;
                ao.offload = (hpt_act_offload)(ci % 3);
                run_out o;
                run(&ao, 1, &o);
                double e = t_rel_err(o.grads, one.grads, o.np);
                double tol = ci < 3 ? GRAD_TOL : GRAD_TOL_BF16;
                CHECK_MSG(e < tol, "%s (%s): gradient error %.4f", hpt_act_compress_name(ao.compress),
                          hpt_act_offload_name(ao.offload), e);
                printf("  %s, offload %-4s device %9llu, host %9llu, disk %9llu; "
                       "gradient rel. error %.4f, loss %.6f vs %.6f\n",
                       hpt_act_compress_name(ao.compress), hpt_act_offload_name(ao.offload),
                       (unsigned long long)o.tier_bytes[HPT_TIER_DEVICE],
                       (unsigned long long)o.tier_bytes[HPT_TIER_HOST],
                       (unsigned long long)o.tier_bytes[HPT_TIER_DISK], e, (double)o.losses[0], (double)one.losses[0]);
                free(o.grads);
                free(o.params);
            }
            free(one.grads);
            free(one.params);
            free(ref.grads);
            free(ref.params);
        }
    depth_free(a);
    lora_full();
    /* int8 training against exact training */
    hpt_act_opts ex = hpt_act_defaults(), q = ex;
    q.compress = HPT_COMPRESS_INT8;
    q.offload = HPT_OFFLOAD_HOST;
    float f0, l0, f1, l1;
    train(&ex, &f0, &l0);
    train(&q, &f1, &l1);
    printf("100 AdamW steps: exact %.4f -> %.4f, int8 (host) %.4f -> %.4f\n", (double)f0,
           (double)l0, (double)f1, (double)l1);
    CHECK(l0 < 0.5f * f0 && l1 < 0.5f * f1);
    CHECK_MSG(fabs((double)l1 - (double)l0) <= LOSS_TOL * (double)l0 + 0.02,
              "final losses %.4f vs %.4f", (double)l1, (double)l0);
    if (!t_arch_first(a)) {
        rmdir(g_dir);
        return t_done(t_arch_label(a, "test_offload"));
    }
    /* flags and refusals (once: they name no architecture) */
    hpt_act_opts o = hpt_act_defaults();
    CHECK(o.offload == HPT_OFFLOAD_NONE && o.compress == HPT_COMPRESS_NONE);
    CHECK_OK(hpt_act_offload_parse("disk", &o));
    CHECK(o.offload == HPT_OFFLOAD_DISK && !strcmp(hpt_act_offload_name(o.offload), "disk"));
    CHECK_OK(hpt_act_compress_parse("int8", &o));
    CHECK(!strcmp(hpt_act_compress_name(o.compress), "int8"));
    CHECK_OK(hpt_act_compress_parse("bf16", &o));
    CHECK(o.compress == HPT_COMPRESS_BF16 && !strcmp(hpt_act_compress_name(o.compress), "bf16"));
    CHECK_STATUS(hpt_act_offload_parse("gpu", &o), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_act_compress_parse("int4", &o), HPT_ERR_INVALID);
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(k_shape, &cfg));
    hpt_model *m;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &m));
    /* disk offload without a directory: a clear error at the first forward */
    hpt_act_opts d = hpt_act_defaults();
    d.offload = HPT_OFFLOAD_DISK;
    CHECK_OK(hpt_model_set_act_opts(m, &d));
    int32_t x[4] = {1, 2, 3, 4};
    float loss;
    CHECK(hpt_model_forward(m, x, x, 1, 4, &loss) != HPT_OK);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    rmdir(g_dir);
    return t_done(t_arch_label(a, "test_offload"));
}
