/* test_llama.c: the llama architecture's configuration and model: named shapes against their
 * published config.json dimensions and parameter counts, custom shapes with Hugging Face
 * LlamaConfig's defaults, bad shapes; GPT-2's shapes fill the wide configuration's GPT-2
 * values; the tensor table, Hugging Face's initialisation, the FLOPs count, refusals.
 * (Correctness against PyTorch: test_verify_torch; every technique on llama: the techniques'
 * own tests, run for each architecture of tests/arch_cases.h.) */
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_named(void) {
    hpt_model_config c;
    CHECK_OK(hpt_model_config_parse("llama3.2-1b", &c));
    CHECK(c.arch == HPT_ARCH_LLAMA && c.L == 16 && c.C == 2048 && c.NH == 32 && c.NKV == 8);
    CHECK(c.FF == 8192 && c.V == 128256 && c.Vp == 128256 && c.tied == 1);
    CHECK(c.rope_theta == 500000.0f && c.rope_factor == 32.0f && c.rope_low_freq == 1.0f);
    CHECK(c.rope_high_freq == 4.0f && c.rope_orig_maxT == 8192 && c.norm_eps == 1e-5f);
    CHECK(c.attn_bias == 0 && c.mlp_bias == 0 && c.init_range == 0.02f);
    CHECK_OK(hpt_model_config_parse("llama3.2-3b", &c));
    CHECK(c.L == 28 && c.C == 3072 && c.NH == 24 && c.NKV == 8 && c.FF == 8192 && c.tied == 1);
    CHECK(c.rope_factor == 32.0f);
    CHECK_OK(hpt_model_config_parse("llama3.1-8b", &c));
    CHECK(c.L == 32 && c.C == 4096 && c.NH == 32 && c.NKV == 8 && c.FF == 14336 && c.tied == 0);
    CHECK(c.rope_factor == 8.0f && c.V == 128256);
    CHECK_OK(hpt_model_config_parse("llama2-7b", &c));
    CHECK(c.L == 32 && c.C == 4096 && c.NKV == 32 && c.FF == 11008 && c.V == 32000);
    CHECK(c.rope_theta == 10000.0f && c.rope_factor == 0.0f && c.maxT == 4096 && c.tied == 0);
    CHECK_OK(hpt_model_config_parse("mistral-7b", &c));
    CHECK(c.NKV == 8 && c.FF == 14336 && c.V == 32000 && c.rope_theta == 10000.0f && !c.tied);
}

static void test_custom(void) {
    hpt_model_config c;
    CHECK_OK(hpt_model_config_parse("llama:L=2,C=96,NH=6,NKV=2,FF=200,V=500,T=64,theta=5000,"
                                    "factor=8,orig=16,tied=0", &c));
    CHECK(c.L == 2 && c.C == 96 && c.NH == 6 && c.NKV == 2 && c.FF == 200);
    CHECK(c.V == 500 && c.Vp == 512 && c.maxT == 64 && c.rope_theta == 5000.0f);
    CHECK(c.rope_factor == 8.0f && c.rope_low_freq == 1.0f && c.rope_high_freq == 4.0f);
    CHECK(c.rope_orig_maxT == 16 && c.norm_eps == 1e-6f && c.tied == 0);
    CHECK_OK(hpt_model_config_parse("llama:L=1,C=64,NH=4,FF=128", &c));
    CHECK(c.NKV == 4 && c.V == 32000 && c.maxT == 2048 && c.rope_factor == 0.0f);
    CHECK_OK(hpt_model_config_parse("llama:L=1,C=64,NH=4,FF=128,attn_bias=1,mlp_bias=1,eps=1e-5", &c));
    CHECK(c.attn_bias == 1 && c.mlp_bias == 1 && fabsf(c.norm_eps - 1e-5f) < 1e-12f);
    /* bad shapes */
    CHECK_STATUS(hpt_model_config_parse("llama:L=1,C=64,NH=4,NKV=3,FF=128", &c), HPT_ERR_SHAPE);
    CHECK_STATUS(hpt_model_config_parse("llama:L=1,C=60,NH=4,FF=128", &c), HPT_ERR_SHAPE); /* hd 15 */
    CHECK_STATUS(hpt_model_config_parse("llama:L=1,C=64,NH=4", &c), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_model_config_parse("llama:L=1,C=64,NH=4,FF=128,tied=2", &c), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_model_config_parse("llama:L=1,C=64,NH=4,FF=128,bogus=1", &c), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_model_config_parse("llama:L=1.5,C=64,NH=4,FF=128", &c), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_model_config_parse("llama:L=1,C=64,NH=4,FF=128,factor=8", &c), HPT_ERR_SHAPE);
    CHECK_STATUS(hpt_model_config_parse("llama7", &c), HPT_ERR_INVALID);
}

static void test_gpt2_fill(void) {
    hpt_model_config c;
    CHECK_OK(hpt_model_config_parse("gpt2:L=2,C=64,NH=4,V=100", &c));
    CHECK(c.arch == HPT_ARCH_GPT2 && c.NKV == 4 && c.FF == 256 && c.tied == 1);
    CHECK(c.norm_eps == 1e-5f && c.init_range == 0.02f && c.rope_theta == 0.0f && c.Vp == 128);
    hpt_model_config g;
    CHECK_OK(hpt_model_config_parse("gpt2-124m", &g));
    CHECK(g.L == 12 && g.C == 768 && g.NKV == 12 && g.FF == 3072 && g.V == 50257 && g.Vp == 50304);
    /* a hand-written GPT-2 configuration (only the six legacy fields) is filled on create */
    hpt_mem *mem = NULL;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model_config h = {.L = 1, .C = 32, .NH = 2, .V = 50, .Vp = 64, .maxT = 16};
    hpt_model *m = NULL;
    CHECK_OK(hpt_model_create_config(mem, &h, &m));
    if (m) {
        const hpt_model_config *mc = hpt_model_get_config(m);
        CHECK(mc->NKV == 2 && mc->FF == 128 && mc->tied == 1 && mc->norm_eps == 1e-5f);
        CHECK(hpt_model_num_params(m) == hpt_model_config_num_params(mc));
    }
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

/* Parameter counts of the named shapes against the published models' (Hugging Face's
 * num_parameters(): Llama-3.2-1B 1,235,814,400 with its tied head; Llama-3.2-3B 3,212,749,824;
 * Llama-3.1-8B 8,030,261,248; Llama-2-7b 6,738,415,616; Mistral-7B-v0.1 7,241,732,096): the
 * table's shapes are the real ones. */
static void test_counts(void) {
    static const struct { const char *shape; size_t n; } k[] = {
        {"llama3.2-1b", 1235814400u}, {"llama3.2-3b", 3212749824u}, {"llama3.1-8b", 8030261248u},
        {"llama2-7b", 6738415616u},   {"mistral-7b", 7241732096u}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        hpt_model_config c;
        CHECK_OK(hpt_model_config_parse(k[i].shape, &c));
        size_t n = hpt_model_config_num_params(&c);
        CHECK_MSG(n == k[i].n, "%s: %zu parameters, published %zu", k[i].shape, n, k[i].n);
    }
}

/* The tensor table (the contract's order and shapes, optional tensors present only when asked)
 * and the initialisation: N(0, init_range) for every linear weight and the embedding, unit norm
 * weights, zero biases, zero padding rows of wte and lm_head; the same values with the offload
 * engine. */
static void test_table_and_init(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *m = NULL;
    CHECK_OK(hpt_model_create(mem, "llama:L=3,C=96,NH=6,NKV=2,FF=160,V=500,T=32,range=0.05,"
                                   "attn_bias=1,mlp_bias=1", &m));
    if (!m) return;
    CHECK(!strcmp(hpt_model_arch(m), "llama"));
    static const char *const names[] = {"wte", "ln1w", "qkvw", "qkvb", "attprojw", "attprojb",
                                        "ln2w", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw",
                                        "lm_head"};
    const int64_t shapes[13][3] = {{512, 96}, {3, 96}, {3, 160, 96}, {3, 160}, {3, 96, 96},
                                   {3, 96}, {3, 96}, {3, 320, 96}, {3, 320}, {3, 96, 160},
                                   {3, 96}, {96}, {512, 96}};
    CHECK(hpt_model_num_tensors(m) == 13);
    CHECK_OK(hpt_model_init_random(m, 5));
    const float *p = hpt_model_params(m);
    size_t off = 0;
    for (int i = 0; i < 13 && i < hpt_model_num_tensors(m); i++) {
        hpt_tensor_info t;
        CHECK_OK(hpt_model_tensor(m, i, &t));
        CHECK_MSG(!strcmp(t.name, names[i]), "tensor %d is %s, expected %s", i, t.name, names[i]);
        for (int d = 0; d < t.ndim; d++) CHECK(t.shape[d] == shapes[i][d]);
        CHECK(t.per_layer == (t.ndim == 3 || (t.ndim == 2 && t.shape[0] == 3)));
        size_t n = t.numel, live = n;
        if (!strcmp(t.name, "wte") || !strcmp(t.name, "lm_head")) {
            live = 500 * 96;
            int zero = 1;
            for (size_t k = live; k < n; k++) zero &= p[off + k] == 0.0f;
            CHECK_MSG(zero, "%s: padding rows not zero", t.name);
        }
        double s1 = 0, s2 = 0;
        int ones = 1, zeros = 1;
        for (size_t k = 0; k < live; k++) {
            double v = p[off + k];
            s1 += v;
            s2 += v * v;
            ones &= v == 1.0;
            zeros &= v == 0.0;
        }
        if (t.name[0] == 'l' && t.name[1] != 'm') { /* ln1w, ln2w, lnfw */
            CHECK_MSG(ones, "%s: not all 1", t.name);
        } else if (!t.is_matrix) {
            CHECK_MSG(zeros, "%s: bias not 0", t.name);
        } else {
            double mean = s1 / (double)live, sd = sqrt(s2 / (double)live - mean * mean);
            CHECK_MSG(fabs(sd - 0.05) < 0.05 * 0.03 && fabs(mean) < 0.002, "%s: mean %.4g std %.4g "
                      "(N(0, 0.05) expected)", t.name, mean, sd);
        }
        off += n;
    }
    CHECK(off == hpt_model_num_params(m));
    /* (the same values with the offload engine: test_model_api, on every architecture) */
    /* chunked embeddings without the fused update: refused (they update as they go) */
    hpt_offload_opts o = hpt_offload_defaults();
    o.params = o.grads = o.optim = HPT_TIER_HOST;
    hpt_model *r = NULL;
    o.embeddings = HPT_EMB_CHUNKED;
    CHECK_STATUS(hpt_model_create_offload(mem, "llama:L=1,C=32,NH=2,FF=40,V=64", &o, &r),
                 HPT_ERR_UNSUPPORTED);
    /* llm.c's checkpoint format is GPT-2's */
    char path[512];
    snprintf(path, sizeof path, "%s/llama.bin", t_tmpdir());
    CHECK_STATUS(hpt_model_save(m, path), HPT_ERR_UNSUPPORTED);
    hpt_model_free(m);
    CHECK(t_device_live(mem) == 0);
    hpt_mem_destroy(mem);
}

/* FLOPs per token (docs/estimate.md's rule, restated): 2 per multiply-add of the GEMMs (q, k,
 * v, o, gate, up, down, the head) and causal attention 2 C (T + 1) per layer (4 C per key a
 * query sees; with a sliding window, fewer keys). */
static void test_flops(void) {
    hpt_plan_opts po = hpt_plan_defaults();
    CHECK_OK(hpt_model_config_parse("llama3.1-8b", &po.cfg));
    po.B = 1;
    po.T = 1024;
    po.training = 0;
    hpt_estimate e;
    CHECK_OK(hpt_plan_estimate(&po, &e));
    double C = 4096, kv = 8 * 128, FF = 14336, V = 128256, L = 32, T = 1024;
    double gemm = L * (C * C + 2 * C * kv + C * C + 3 * C * FF) + V * C;
    double want = 2 * gemm + 2 * L * C * (T + 1);
    CHECK_MSG(fabs(e.flops_per_token_fwd - want) <= 1e-9 * want, "FLOPs %.6g, expected %.6g",
              e.flops_per_token_fwd, want);
    /* Mistral's sliding window of 4096: below it causal; above, query t sees min(t + 1, W) keys
     * at 4 C FLOPs each: (W (W + 1) / 2 + (T - W) W) / T per token */
    CHECK_OK(hpt_model_config_parse("mistral-7b", &po.cfg));
    CHECK(po.cfg.window == 4096);
    FF = 14336, V = 32000, gemm = L * (C * C + 2 * C * kv + C * C + 3 * C * FF) + V * C;
    const int Ts[2] = {1024, 8192};
    for (int i = 0; i < 2; i++) {
        po.T = Ts[i], T = Ts[i];
        CHECK_OK(hpt_plan_estimate(&po, &e));
        const double W = 4096, keys = T <= W ? (T + 1) / 2 : (W * (W + 1) / 2 + (T - W) * W) / T;
        want = 2 * gemm + 4 * L * C * keys;
        CHECK_MSG(fabs(e.flops_per_token_fwd - want) <= 1e-9 * want, "mistral-7b T=%d: FLOPs "
                  "%.6g, expected %.6g", Ts[i], e.flops_per_token_fwd, want);
    }
}

int main(void) {
    test_counts();
    test_table_and_init();
    test_flops();
    test_named();
    test_custom();
    test_gpt2_fill();
    return t_done("test_llama");
}
