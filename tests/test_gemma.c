/* test_gemma.c: the Gemma 3 architecture's configurations (model/gemma.c): the named shapes
 * against their published parameter counts, Hugging Face config.json files (layer_types and
 * sliding_window_pattern, transformers 5's per-layer-type rope_parameters) read into the same
 * configurations, the tensor table, custom shapes' defaults, and refusals. (Correctness against
 * PyTorch, Hugging Face directories and training: test_hf_gemma.sh; every technique: the
 * techniques' own tests, run for each architecture of tests/arch_cases.h.) */
#include "testlib.h"

#include "io/hf.h"

#include <string.h>

/* Non-embedding parameters against the published figures: the Gemma 3 technical report's
 * Table 1 (1b 698M, 4b 3,209M, 12b 10,759M, 27b 25,600M) and the 270m's model card (100M in
 * the blocks, 170M of embeddings); the embedding V*C once (tied). The report's embedding counts
 * (4b 675M, 12b 1,012M, 27b 1,416M) include the multimodal projector, which the text models
 * have not. */
static void test_counts(void) {
    static const struct {
        const char *shape;
        size_t params;      /* hptrain's count: the tied head once, wte's padding rows too */
        double non_emb_m;   /* published non-embedding parameters, millions */
    } k[] = {
        {"gemma3-270m", 268098176, 100},      {"gemma3-1b", 999885952, 698},
        {"gemma3-4b", 3880427008, 3209},      {"gemma3-12b", 11766279936, 10759},
        {"gemma3-27b", 27009690368, 25600},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        hpt_model_config c;
        CHECK_OK(hpt_model_config_parse(k[i].shape, &c));
        size_t n = hpt_model_config_num_params(&c);
        CHECK_MSG(n == k[i].params, "%s: %zu parameters, want %zu", k[i].shape, n, k[i].params);
        const double emb = (double)c.V * c.C, non = (double)n - (double)c.Vp * c.C;
        CHECK_MSG((double)(long long)(non / 1e6 + 0.5) == k[i].non_emb_m, "%s: %.0f "
                  "non-embedding parameters, published %gM", k[i].shape, non, k[i].non_emb_m);
        printf("  %-12s %12zu parameters: %.0f embedding (V*C), %.0f in the blocks and the "
               "final norm\n", k[i].shape, n, emb, non);
    }
}

static void test_named(void) {
    hpt_model_config c;
    CHECK_OK(hpt_model_config_parse("gemma3-1b", &c));
    CHECK(c.arch == HPT_ARCH_GEMMA3 && c.L == 26 && c.C == 1152 && c.NH == 4 && c.NKV == 1);
    CHECK(c.hd == 256 && c.FF == 6912 && c.V == 262144 && c.tied == 1 && c.maxT == 32768);
    CHECK(c.window == 512 && c.swa_pattern == 6 && c.attn_scalar == 256.0f);
    CHECK(c.rope_theta == 1000000.0f && c.rope_local_theta == 10000.0f && c.rope_factor == 0.0f);
    CHECK_OK(hpt_model_config_parse("gemma3-4b", &c));
    CHECK(c.L == 34 && c.C == 2560 && c.NKV == 4 && c.V == 262208 && c.rope_factor == 8.0f);
    CHECK(c.window == 1024 && c.Vp == 262272);
    CHECK_OK(hpt_model_config_parse("gemma3-27b", &c));
    CHECK(c.hd == 128 && c.attn_scalar == 168.0f);
}

static void test_table(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *m = NULL;
    CHECK_OK(hpt_model_create_forward(mem, "gemma3:L=2,C=64,NH=4,NKV=2,hd=24,FF=96,V=300,T=16", &m));
    if (m) {
        const char *const names[] = {"wte", "ln1w", "qkvw", "qknw", "attprojw", "ln2w", "fcw",
                               "fcprojw", "postw", "lnfw"};
        const int64_t shapes[][3] = {{384, 64}, {2, 64}, {2, 192, 64}, {2, 48}, {2, 64, 96},
                                     {2, 64}, {2, 192, 64}, {2, 64, 96}, {2, 128}, {64}};
        t_check_table(m, names, shapes, 10, "gemma3");
        hpt_model_free(m);
    }
    hpt_mem_destroy(mem);
}

static void parse_cfg(const char *text, hpt_model_config *out) {
    hf_config h;
    CHECK_OK(hf_config_parse(text, strlen(text), "config.json", &h));
    CHECK_OK(hf_config_to_model(&h, out));
}

/* the published config.json files (as remembered; abridged to the keys hptrain reads, plus
 * some it ignores) */
static void test_hf_config(void) {
    static const char g1b[] =
        "{\"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false, "
        "\"attention_dropout\": 0.0, \"attn_logit_softcapping\": null, \"bos_token_id\": 2, "
        "\"cache_implementation\": \"hybrid\", \"eos_token_id\": [1, 106], "
        "\"final_logit_softcapping\": null, \"head_dim\": 256, \"hidden_activation\": "
        "\"gelu_pytorch_tanh\", \"hidden_size\": 1152, \"initializer_range\": 0.02, "
        "\"intermediate_size\": 6912, \"max_position_embeddings\": 32768, \"model_type\": "
        "\"gemma3_text\", \"num_attention_heads\": 4, \"num_hidden_layers\": 26, "
        "\"num_key_value_heads\": 1, \"pad_token_id\": 0, \"query_pre_attn_scalar\": 256, "
        "\"rms_norm_eps\": 1e-06, \"rope_local_base_freq\": 10000, \"rope_scaling\": null, "
        "\"rope_theta\": 1000000, \"sliding_window\": 512, \"sliding_window_pattern\": 6, "
        "\"torch_dtype\": \"bfloat16\", \"use_cache\": true, \"vocab_size\": 262144}";
    hpt_model_config got, want;
    parse_cfg(g1b, &got);
    CHECK_OK(hpt_model_config_parse("gemma3-1b", &want));
    CHECK_MSG(memcmp(&got, &want, sizeof got) == 0, "gemma3-1b's config.json reads as another "
              "configuration");
    /* transformers 5: layer_types and rope_parameters per layer type (a 4b text model's) */
    char g4b[2048], types[1024] = "";
    for (int l = 0; l < 34; l++)
        snprintf(types + strlen(types), sizeof types - strlen(types), "%s\"%s\"", l ? ", " : "",
                 (l + 1) % 6 ? "sliding_attention" : "full_attention");
    snprintf(g4b, sizeof g4b,
             "{\"architectures\": [\"Gemma3ForCausalLM\"], \"head_dim\": 256, \"hidden_size\": "
             "2560, \"intermediate_size\": 10240, \"max_position_embeddings\": 131072, "
             "\"num_attention_heads\": 8, \"num_hidden_layers\": 34, \"num_key_value_heads\": 4, "
             "\"query_pre_attn_scalar\": 256, \"sliding_window\": 1024, \"vocab_size\": 262208, "
             "\"layer_types\": [%s], \"rope_parameters\": {\"full_attention\": {\"rope_type\": "
             "\"linear\", \"factor\": 8.0, \"rope_theta\": 1000000.0}, \"sliding_attention\": "
             "{\"rope_type\": \"default\", \"rope_theta\": 10000.0}}}", types);
    parse_cfg(g4b, &got);
    CHECK_OK(hpt_model_config_parse("gemma3-4b", &want));
    CHECK_MSG(memcmp(&got, &want, sizeof got) == 0, "gemma3-4b's config.json reads as another "
              "configuration");
    /* what hptrain cannot follow is refused by name */
#define G3 "{\"architectures\": [\"Gemma3ForCausalLM\"], \"hidden_size\": 64, " \
           "\"intermediate_size\": 96, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, " \
           "\"num_key_value_heads\": 2, \"head_dim\": 16, "
    const struct { const char *text, *what; } bad[] = {
        {G3 "\"final_logit_softcapping\": 30.0}", "final_logit_softcapping"},
        {G3 "\"attn_logit_softcapping\": 50.0}", "attn_logit_softcapping"},
        {G3 "\"hidden_activation\": \"gelu\"}", "hidden_activation"},
        {G3 "\"layer_types\": [\"sliding_attention\", \"full_attention\", \"full_attention\"]}",
         "layer_types"},
        {G3 "\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", "yarn"},
        {G3 "\"text_config\": {}}", "text_config"},
        {G3 "\"use_bidirectional_attention\": true}", "bidirectional"},
    };
#undef G3
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hf_config h;
        hpt_status s = hf_config_parse(bad[i].text, strlen(bad[i].text), "config.json", &h);
        if (s == HPT_OK) s = hf_config_to_model(&h, &got);
        CHECK_MSG(s != HPT_OK && strstr(hpt_last_error(), bad[i].what), "%s: status %d, '%s'",
                  bad[i].what, s, hpt_last_error());
    }
}

static void test_custom_and_refusals(void) {
    hpt_model_config c;
    CHECK_OK(hpt_model_config_parse("gemma3:L=2,C=48,NH=6,FF=80", &c));
    CHECK(c.NKV == 6 && c.hd == 8 && c.V == 262208 && c.maxT == 131072 && c.tied);
    CHECK(c.window == 4096 && c.swa_pattern == 6 && c.attn_scalar == 0.0f);
    CHECK(c.rope_theta == 1000000.0f && c.rope_local_theta == 10000.0f && c.norm_eps == 1e-6f);
    /* the widths need not divide: C 50, NH 4, hd 8 */
    CHECK_OK(hpt_model_config_parse("gemma3:L=1,C=50,NH=4,hd=8,FF=80,V=64", &c));
    const char *const refused[] = {
        "gemma3:L=1,C=48,NH=4,hd=7,FF=80",        /* odd head width: rope rotates pairs */
        "gemma3:L=1,C=48,NH=6,NKV=4,FF=80",       /* NKV does not divide NH */
        "gemma3:L=1,C=48,NH=4,FF=80,factor=0.5",  /* linear scaling shrinks nothing */
        "gemma3:L=1,C=48,NH=4,FF=80,ltheta=1",    /* no local base */
        "gemma3:L=1,C=48,NH=4,FF=80,orig=8",      /* no Llama 3 scaling key */
        "gemma3-2b",                              /* no such named shape */
    };
    t_check_refused(refused, sizeof refused / sizeof refused[0]);
}

int main(void) {
    test_counts();
    test_named();
    test_table();
    test_hf_config();
    test_custom_and_refusals();
    return t_done("test_gemma");
}
