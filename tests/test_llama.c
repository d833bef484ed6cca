/* test_llama.c: the llama architecture's configuration: named shapes against their published
 * config.json dimensions, custom shapes with Hugging Face LlamaConfig's defaults, bad shapes;
 * GPT-2's shapes fill the wide configuration's GPT-2 values. */
#include "testlib.h"

#include <math.h>
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
    CHECK_STATUS(hpt_gpt2_config_parse("llama3.2-1b", &c), HPT_ERR_INVALID);
}

static void test_gpt2_fill(void) {
    hpt_model_config c;
    CHECK_OK(hpt_model_config_parse("gpt2:L=2,C=64,NH=4,V=100", &c));
    CHECK(c.arch == HPT_ARCH_GPT2 && c.NKV == 4 && c.FF == 256 && c.tied == 1);
    CHECK(c.norm_eps == 1e-5f && c.init_range == 0.02f && c.rope_theta == 0.0f && c.Vp == 128);
    hpt_gpt2_config g;
    CHECK_OK(hpt_gpt2_config_parse("gpt2-124m", &g));
    CHECK(g.L == 12 && g.C == 768 && g.NKV == 12 && g.FF == 3072 && g.V == 50257 && g.Vp == 50304);
    /* a hand-written GPT-2 configuration (only the six legacy fields) is filled on create */
    hpt_mem *mem = NULL;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_gpt2_config h = {.L = 1, .C = 32, .NH = 2, .V = 50, .Vp = 64, .maxT = 16};
    hpt_gpt2 *m = NULL;
    CHECK_OK(hpt_gpt2_create(mem, &h, &m));
    if (m) {
        const hpt_model_config *mc = hpt_model_get_config(m);
        CHECK(mc->NKV == 2 && mc->FF == 128 && mc->tied == 1 && mc->norm_eps == 1e-5f);
        CHECK(hpt_model_num_params(m) == hpt_model_config_num_params(mc));
    }
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

int main(void) {
    test_named();
    test_custom();
    test_gpt2_fill();
    return t_done("test_llama");
}
