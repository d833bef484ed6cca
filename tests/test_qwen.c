/* test_qwen.c: the Qwen architectures' configurations (model/qwen.c): the named shapes against
 * their published config.json dimensions and parameter counts, Hugging Face config.json files of
 * both classes read into the same configurations, the tensor table with Qwen3's head width free
 * of C/NH, custom shapes' defaults, and refusals. (Correctness against PyTorch, Hugging Face
 * directories and training: test_hf_qwen.sh; every technique: the techniques' own tests, run for
 * each architecture of tests/arch_cases.h.) */
#include "testlib.h"

#include "io/hf.h"

#include <string.h>

/* Parameter counts from the config values (model/qwen.c's k_qwen) and the published figures:
 * the model cards' (Qwen2.5-0.5B 0.49B, ...) and the hub's counts of the safetensors files,
 * which for Qwen3-0.6B and -1.7B hold the tied head's copy too (lm_head.weight): 0.6B's
 * 751,632,384 and 1.7B's 2.03B count the embedding twice. */
static void test_counts(void) {
    static const struct {
        const char *shape;
        size_t params;   /* hptrain's count: the tied head once */
        double published; /* the published figure, in the units of its precision */
        double unit;
        int head_twice;  /* the published figure counts a tied head's copy */
    } k[] = {
        {"qwen2.5-0.5b", 494032768, 494, 1e6, 0},  {"qwen2.5-1.5b", 1543714304, 1.54, 1e9, 0},
        {"qwen2.5-7b", 7615616512, 7.62, 1e9, 0},  {"qwen3-0.6b", 596049920, 751632384, 1, 1},
        {"qwen3-1.7b", 1720574976, 2.03, 1e9, 1},  {"qwen3-4b", 4022468096, 4.02, 1e9, 0},
        {"qwen3-8b", 8190735360, 8.19, 1e9, 0},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        hpt_model_config c;
        CHECK_OK(hpt_model_config_parse(k[i].shape, &c));
        size_t n = hpt_model_config_num_params(&c);
        CHECK_MSG(n == k[i].params, "%s: %zu parameters, want %zu", k[i].shape, n, k[i].params);
        CHECK(c.Vp == c.V); /* 151936 and 152064 are multiples of 128: no padding counted */
        double pub = (double)n + (k[i].head_twice ? (double)c.V * c.C : 0.0);
        double digits = k[i].unit == 1 ? pub : (double)(long long)(pub / k[i].unit * 100 + 0.5) / 100;
        if (k[i].unit == 1e6) digits = (double)(long long)(pub / 1e6 + 0.5);
        CHECK_MSG(digits == k[i].published, "%s: %.0f rounds to %g, published %g", k[i].shape,
                  pub, digits, k[i].published);
        if (k[i].head_twice)
            printf("  %-13s %13zu parameters (%.0f with the tied head's copy)\n", k[i].shape, n, pub);
        else
            printf("  %-13s %13zu parameters\n", k[i].shape, n);
    }
}

static void test_named(void) {
    hpt_model_config c;
    CHECK_OK(hpt_model_config_parse("qwen2.5-0.5b", &c));
    CHECK(c.arch == HPT_ARCH_QWEN2 && c.L == 24 && c.C == 896 && c.NH == 14 && c.NKV == 2);
    CHECK(c.FF == 4864 && c.V == 151936 && c.tied == 1 && c.attn_bias == 1 && c.hd == 0);
    CHECK(c.rope_theta == 1000000.0f && c.norm_eps == 1e-6f && c.maxT == 32768);
    CHECK_OK(hpt_model_config_parse("qwen2.5-7b", &c));
    CHECK(c.C == 3584 && c.NH == 28 && c.NKV == 4 && c.FF == 18944 && c.V == 152064 && !c.tied);
    CHECK_OK(hpt_model_config_parse("qwen3-0.6b", &c));
    CHECK(c.arch == HPT_ARCH_QWEN3 && c.L == 28 && c.C == 1024 && c.NH == 16 && c.NKV == 8);
    CHECK(c.hd == 128 && c.FF == 3072 && c.tied == 1 && c.attn_bias == 0 && c.maxT == 40960);
    CHECK_OK(hpt_model_config_parse("qwen3-8b", &c));
    CHECK(c.L == 36 && c.C == 4096 && c.NH == 32 && c.FF == 12288 && !c.tied);
}

/* the tensor table of qwen3-0.6b: attention width NH*hd = 2048 against C = 1024 */
static void test_table(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *m = NULL;
    CHECK_OK(hpt_model_create_forward(mem, "qwen3:L=2,C=64,NH=4,NKV=2,hd=24,FF=96,V=300,T=16", &m));
    if (m) {
        const char *const names[] = {"wte", "ln1w", "qkvw", "qknw", "attprojw", "ln2w", "fcw",
                               "fcprojw", "lnfw", "lm_head"};
        const int64_t shapes[][3] = {{384, 64}, {2, 64}, {2, 192, 64}, {2, 48}, {2, 64, 96},
                                     {2, 64}, {2, 192, 64}, {2, 64, 96}, {64}, {384, 64}};
        t_check_table(m, names, shapes, 10, "qwen3");
        hpt_model_free(m);
    }
    CHECK_OK(hpt_model_create_forward(mem, "qwen2:L=1,C=32,NH=4,NKV=2,FF=48,V=64,T=8,tied=1", &m));
    if (m) { /* wte, ln1w, qkvw, qkvb (no o bias), attprojw, ln2w, fcw, fcprojw, lnfw */
        hpt_tensor_info t;
        CHECK(hpt_model_num_tensors(m) == 9);
        CHECK_OK(hpt_model_tensor(m, 3, &t));
        CHECK(!strcmp(t.name, "qkvb") && t.shape[1] == 64);
        CHECK_OK(hpt_model_tensor(m, 4, &t));
        CHECK(!strcmp(t.name, "attprojw"));
        hpt_model_free(m);
    }
    hpt_mem_destroy(mem);
}

/* the published config.json files (abridged to the keys hptrain reads, plus some it ignores) */
static void test_hf_config(void) {
    static const char q3[] =
        "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, "
        "\"attention_dropout\": 0.0, \"bos_token_id\": 151643, \"eos_token_id\": 151645, "
        "\"head_dim\": 128, \"hidden_act\": \"silu\", \"hidden_size\": 1024, "
        "\"initializer_range\": 0.02, \"intermediate_size\": 3072, "
        "\"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\", "
        "\"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8, "
        "\"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000, "
        "\"sliding_window\": null, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", "
        "\"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    static const char q2[] =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, "
        "\"bos_token_id\": 151643, \"eos_token_id\": 151643, \"hidden_act\": \"silu\", "
        "\"hidden_size\": 896, \"initializer_range\": 0.02, \"intermediate_size\": 4864, "
        "\"max_position_embeddings\": 32768, \"max_window_layers\": 24, \"model_type\": \"qwen2\", "
        "\"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2, "
        "\"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768, "
        "\"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"use_cache\": true, "
        "\"use_mrope\": false, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    const struct { const char *text, *shape; } k[] = {{q3, "qwen3-0.6b"}, {q2, "qwen2.5-0.5b"}};
    for (int i = 0; i < 2; i++) {
        hf_config h;
        hpt_model_config got, want;
        CHECK_OK(hf_config_parse(k[i].text, strlen(k[i].text), "config.json", &h));
        CHECK_OK(hf_config_to_model(&h, &got));
        CHECK_OK(hpt_model_config_parse(k[i].shape, &want));
        CHECK_MSG(memcmp(&got, &want, sizeof got) == 0, "%s's config.json reads as another "
                  "configuration", k[i].shape);
    }
    /* what hptrain cannot follow is refused by name */
    const struct { const char *text, *what; } bad[] = {
        {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 96, "
         "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"use_sliding_window\": true}",
         "use_sliding_window"},
        {"{\"architectures\": [\"Qwen3ForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 96, "
         "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": "
         "\"yarn\", \"factor\": 4.0}}", "yarn"},
        {"{\"architectures\": [\"Qwen2ForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 96, "
         "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"head_dim\": 32}", "head_dim"},
    };
    for (int i = 0; i < 3; i++) {
        hf_config h;
        hpt_status s = hf_config_parse(bad[i].text, strlen(bad[i].text), "config.json", &h);
        CHECK_MSG(s != HPT_OK && strstr(hpt_last_error(), bad[i].what), "%s: status %d, '%s'",
                  bad[i].what, s, hpt_last_error());
    }
}

static void test_custom_and_refusals(void) {
    hpt_model_config c;
    CHECK_OK(hpt_model_config_parse("qwen3:L=2,C=48,NH=6,FF=80", &c));
    CHECK(c.NKV == 6 && c.hd == 0 && c.V == 151936 && c.maxT == 32768 && !c.tied);
    CHECK(c.rope_theta == 10000.0f && c.norm_eps == 1e-6f && c.attn_bias == 0);
    CHECK_OK(hpt_model_config_parse("qwen2:L=2,C=48,NH=6,FF=80,V=300", &c));
    CHECK(c.attn_bias == 1 && c.Vp == 384);
    /* Qwen3's widths need not divide: C 50, NH 4, hd 8 */
    CHECK_OK(hpt_model_config_parse("qwen3:L=1,C=50,NH=4,hd=8,FF=80,V=64", &c));
    const char *const refused[] = {
        "qwen3:L=1,C=48,NH=4,hd=7,FF=80",     /* odd head width: rope rotates pairs */
        "qwen2:L=1,C=48,NH=4,hd=8,FF=80",     /* Qwen2's head width is C/NH */
        "qwen2:L=1,C=48,NH=4,FF=80,attn_bias=0", /* Qwen2 has its q/k/v biases */
        "qwen2:L=1,C=50,NH=4,FF=80",          /* C/NH not whole */
        "qwen3:L=1,C=48,NH=6,NKV=4,FF=80",    /* NKV does not divide NH */
        "qwen3:L=1,C=48,NH=4,FF=80,factor=8", /* no rope scaling key */
        "qwen2.5-3b",                         /* no such named shape */
    };
    t_check_refused(refused, sizeof refused / sizeof refused[0]);
}

int main(void) {
    test_counts();
    test_named();
    test_table();
    test_hf_config();
    test_custom_and_refusals();
    return t_done("test_qwen");
}
