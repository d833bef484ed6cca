/* test_safetensors.c: the safetensors reader and writer (src/io/safetensors.c, st_write.c),
 * config.json (src/io/hfconfig.c) and Hugging Face model directories (src/io/hfmodel.c).
 *
 *   1. Files written by tests/hf_write.py (torch, from the specification; argv[1] is the script)
 *      read back with the values torch gives for them (F32, BF16, F16, specials, scalars,
 *      empty tensors; a sharded directory), and bf16 rounding equals torch's.
 *   2. The writer's files read back exactly (F32) or as rounded (BF16); shards and the index.
 *   3. Corrupt headers: each rule of the format, one-line errors naming the file and tensor.
 *   4. config.json: GPT-2 and llama keys, Llama 3 rope scaling, eos lists, refusals.
 *   5. Model directories: save then load bit-exact (fp32, with and without the offload
 *      engine), bf16 as rounded, sharded, names and shapes checked, other files kept. */
#include "core/core.h"
#include "io/hf.h"
#include "io/safetensors.h"
#include "testlib.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *g_tmp;

static char *path_in(const char *name) {
    static char p[8][1024];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", g_tmp, name);
    return p[k];
}

/* ---- 1. files written by torch ---- */

static uint32_t f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static void check_expected_file(const char *fixdir) {
    char p[1200];
    snprintf(p, sizeof p, "%s/fix.safetensors", fixdir);
    st_file f;
    CHECK_OK(st_open(p, &f));
    st_dir d;
    snprintf(p, sizeof p, "%s/sharded", fixdir);
    CHECK_OK(st_dir_open(p, &d));
    CHECK(d.n_files == 2);
    snprintf(p, sizeof p, "%s/fix.expected", fixdir);
    FILE *e = fopen(p, "r");
    CHECK(e != NULL);
    char name[64];
    unsigned long n;
    int tensors = 0;
    while (e && fscanf(e, "%63s %lu", name, &n) == 2) {
        uint32_t *want = malloc((n + 1) * 4);
        for (unsigned long i = 0; i < n; i++) CHECK(fscanf(e, "%x", &want[i]) == 1);
        const st_tensor *t = st_find(&f.h, name);
        CHECK_MSG(t && t->numel == n, "%s", name);
        const st_file *sf;
        const st_tensor *ts = st_dir_find(&d, name, &sf);
        CHECK_MSG(ts && ts->numel == n, "%s in the sharded directory", name);
        float *got = malloc((n + 1) * 4);
        if (t && t->numel == n) {
            CHECK_OK(st_read_f32(&f, t, 0, n, got));
            int same = 1;
            for (unsigned long i = 0; i < n; i++) same &= f32_bits(got[i]) == want[i];
            CHECK_MSG(same, "%s: values differ from torch's", name);
            if (n > 40) { /* a window: elements [37, 37 + 3) */
                CHECK_OK(st_read_f32(&f, t, 37, 3, got));
                CHECK(f32_bits(got[0]) == want[37] && f32_bits(got[2]) == want[39]);
            }
        }
        if (ts && ts->numel == n) {
            CHECK_OK(st_read_f32(sf, ts, 0, n, got));
            int same = 1;
            for (unsigned long i = 0; i < n; i++) same &= f32_bits(got[i]) == want[i];
            CHECK_MSG(same, "%s (sharded): values differ", name);
        }
        free(got);
        free(want);
        tensors++;
    }
    CHECK(tensors == 8);
    if (e) fclose(e);
    st_dir_close(&d);
    st_close(&f);
    /* bf16 rounding: torch's float -> bfloat16 */
    snprintf(p, sizeof p, "%s/round.expected", fixdir);
    e = fopen(p, "r");
    CHECK(e != NULL);
    int total = 0, bad = 0;
    if (e && fscanf(e, "%d", &total) == 1)
        for (int i = 0; i < total; i++) {
            unsigned a, b;
            if (fscanf(e, "%x %x", &a, &b) != 2) { bad++; break; }
            float x;
            memcpy(&x, &a, 4);
            bad += st_f32_to_bf16(x) != (uint16_t)b;
        }
    CHECK_MSG(total > 4000 && bad == 0, "%d of %d bf16 roundings differ from torch's", bad, total);
    if (e) fclose(e);
}

/* ---- 2. writer round trips ---- */

static void round_trip(void) {
    enum { NT = 5 };
    static const int64_t shapes[NT][2] = {{7, 5}, {33, 1}, {4, 0}, {100, 3}, {1, 1}};
    st_wtensor wt[NT];
    char names[NT][32];
    size_t total = 0;
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "t%d.weight", i);
        wt[i] = (st_wtensor){.name = names[i], .dtype = i % 2 ? ST_BF16 : ST_F32, .ndim = 2,
                             .shape = {shapes[i][0], shapes[i][1]}};
        total += (size_t)(shapes[i][0] * shapes[i][1]);
    }
    float *x = malloc(total * 4), *y = malloc(total * 4);
    hpt_rng r;
    hpt_rng_seed(&r, 3);
    for (size_t i = 0; i < total; i++) x[i] = hpt_rng_normal(&r) * 10;
    for (int shard = 0; shard < 2; shard++) {
        const char *dir = path_in(shard ? "rt_sharded" : "rt_one");
        mkdir(dir, 0755);
        st_writer *w;
        CHECK_OK(st_writer_open(dir, wt, NT, shard ? 400 : 1u << 30, &w));
        CHECK_OK(st_writer_put(w, x, 10));        /* pieces crossing tensor boundaries */
        CHECK_OK(st_writer_put(w, x + 10, total - 10));
        CHECK_OK(st_writer_close(w));
        st_dir d;
        CHECK_OK(st_dir_open(dir, &d));
        CHECK(shard ? d.n_files >= 2 : d.n_files == 1);
        for (int i = 0; i < d.n_files; i++) CHECK(d.files[i].h.data_start % 8 == 0);
        size_t off = 0;
        for (int i = 0; i < NT; i++) {
            const st_file *f;
            const st_tensor *t = st_dir_find(&d, names[i], &f);
            size_t n = (size_t)(shapes[i][0] * shapes[i][1]);
            CHECK(t && t->numel == n && t->dtype == wt[i].dtype && t->shape[0] == shapes[i][0]);
            if (t) CHECK_OK(st_read_f32(f, t, 0, n, y + off));
            int same = 1;
            for (size_t k = 0; k < n; k++)
                same &= wt[i].dtype == ST_F32 ? f32_bits(y[off + k]) == f32_bits(x[off + k])
                                              : f32_bits(y[off + k]) ==
                                                    (uint32_t)st_f32_to_bf16(x[off + k]) << 16;
            CHECK_MSG(same, "%s (%s)", names[i], dir);
            off += n;
        }
        st_dir_close(&d);
    }
    /* too many values, too few */
    const char *dir = path_in("rt_bad");
    mkdir(dir, 0755);
    st_writer *w;
    CHECK_OK(st_writer_open(dir, wt, 1, 1u << 30, &w));
    CHECK_STATUS(st_writer_put(w, x, 36), HPT_ERR_INVALID);
    st_writer_abort(w);
    CHECK_OK(st_writer_open(dir, wt, 1, 1u << 30, &w));
    CHECK_OK(st_writer_put(w, x, 34));
    CHECK_STATUS(st_writer_close(w), HPT_ERR_INVALID);
    struct stat st;
    CHECK(stat(path_in("rt_bad/model.safetensors"), &st) != 0); /* removed */
    free(x);
    free(y);
}

/* ---- 3. corrupt headers ---- */

/* A file image: size, json, data_len bytes of data. */
static unsigned char *image(const char *json, size_t data_len, size_t *len) {
    size_t n = strlen(json);
    *len = 8 + n + data_len;
    unsigned char *b = calloc(*len, 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    return b;
}

/* Parsing fails with status want and a one-line message holding each of the needles. */
static void refuse(const char *json, size_t data_len, hpt_status want, const char *needle) {
    size_t len;
    unsigned char *b = image(json, data_len, &len);
    st_header h;
    hpt_status s = st_parse_buffer(b, len, "x.safetensors", &h);
    const char *msg = hpt_last_error();
    CHECK_MSG(s == want, "%s: got %s (%s)", json, hpt_status_str(s), msg);
    CHECK_MSG(strstr(msg, "x.safetensors") && strstr(msg, needle) && !strchr(msg, '\n'),
              "%s: message '%s' lacks '%s'", json, msg, needle);
    CHECK(h.n == 0 && h.t == NULL);
    free(b);
}

static void corrupt(void) {
    const hpt_status F = HPT_ERR_FORMAT;
    const char *ok = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                     "\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"BF16\",\"shape\":[],"
                     "\"data_offsets\":[8,10]}}   ";
    size_t len;
    unsigned char *b = image(ok, 10, &len);
    st_header h;
    CHECK_OK(st_parse_buffer(b, len, "x.safetensors", &h));
    CHECK(h.n == 2 && st_find(&h, "b") && st_find(&h, "b")->numel == 1 && !st_find(&h, "c"));
    st_header_free(&h);
    /* the 8-byte size */
    CHECK_STATUS(st_parse_buffer(b, 7, "x.safetensors", &h), F);
    CHECK_STATUS(st_parse_buffer(b, 8 + strlen(ok) - 1, "x.safetensors", &h), F); /* truncated */
    CHECK(strstr(hpt_last_error(), "passes the end"));
    unsigned char big[16] = {0x01, 0xe1, 0xf5, 0x05, 0, 0, 0, 0, '{', '}'};       /* 100000001 */
    CHECK_STATUS(st_parse_buffer(big, sizeof big, "x.safetensors", &h), F);
    CHECK(strstr(hpt_last_error(), "outside"));
    unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
    CHECK_STATUS(st_parse_buffer(huge, sizeof huge, "x.safetensors", &h), F);
    free(b);
    /* the JSON */
    refuse("[1,2]", 0, F, "'{'");
    refuse("{\"a\":", 0, F, "not valid JSON");
    refuse("{} x", 0, F, "after its JSON");
    refuse("{\"a\x01\":1}", 0, F, "not UTF-8 JSON text (byte 3: 0x01)");
    refuse("{\"\xc0\xaf\":1}", 0, F, "not UTF-8");          /* overlong '/' */
    refuse("{\"\xed\xa0\x80\":1}", 0, F, "not UTF-8");      /* a surrogate */
    refuse("{\"\xe2\x82\":1}", 0, F, "not UTF-8");          /* cut short */
    refuse("{\"\xf4\x90\x80\x80\":1}", 0, F, "not UTF-8"); /* past U+10FFFF */
    refuse("{}\n", 0, F, "after its JSON");
    refuse("{\"__metadata__\":[1]}", 0, F, "__metadata__");
    refuse("{\"__metadata__\":{\"k\":1}}", 0, F, "'k'");
    refuse("{\"w\":[0]}", 0, F, "tensor 'w'");
    refuse("{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1, F, "unknown dtype");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, F, "tensor 'w': missing data_offsets");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, F,
           "unknown key 'x'");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, F, "tensor 'w'");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 4, F, "tensor 'w'");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, F, "tensor 'w'");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, F, "tensor 'w'");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", 12, F,
           "tensor 'w': 12 bytes");
    refuse("{\"w\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,4]}}", 4, F, "tensor 'w'");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, F,
           "tensor 'w': data_offsets [0, 8] outside");
    refuse("{\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, F,
           "tensor 'w': data_offsets [4, 12] overlap 'v'");
    refuse("{\"v\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, F,
           "tensor 'w': hole of 4 bytes");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, F,
           "tensor 'w': hole");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6, F,
           "tensor 'w': the last tensor ends at 4");
    refuse("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
           "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, F,
           "tensor 'w' appears twice");
    refuse("{\"\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, F, "empty name");
    refuse("{}", 4, F, "no tensors");
    /* valid UTF-8 names, tabs and newlines between tokens */
    b = image("{\n\t\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\": {\"dtype\": \"F32\", \"shape\": [1], "
              "\"data_offsets\": [0, 4]}}", 4, &len);
    CHECK_OK(st_parse_buffer(b, len, "x.safetensors", &h));
    CHECK(h.n == 1 && st_find(&h, "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"));
    st_header_free(&h);
    free(b);
    /* a valid file with an I64 tensor: parsed, but reading it is unsupported */
    const char *i64 = "{\"ids\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,16]}}";
    b = image(i64, 16, &len);
    FILE *f = fopen(path_in("i64.safetensors"), "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    st_file sf;
    CHECK_OK(st_open(path_in("i64.safetensors"), &sf));
    float y[4];
    CHECK_STATUS(st_read_f32(&sf, st_find(&sf.h, "ids"), 0, 2, y), HPT_ERR_UNSUPPORTED);
    CHECK(strstr(hpt_last_error(), "tensor 'ids': unsupported dtype I64"));
    st_close(&sf);
    /* a file cut after its header was read: the read says truncated */
    f = fopen(path_in("cut.safetensors"), "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    CHECK_OK(st_open(path_in("cut.safetensors"), &sf));
    CHECK(truncate(path_in("cut.safetensors"), (off_t)len - 4) == 0);
    sf.h.t[0].dtype = ST_F32; /* as if it were readable: the data is gone */
    sf.h.t[0].numel = 4;
    CHECK_STATUS(st_read_f32(&sf, &sf.h.t[0], 0, 4, y), HPT_ERR_FORMAT);
    CHECK(strstr(hpt_last_error(), "truncated"));
    st_close(&sf);
    CHECK_STATUS(st_open(path_in("cut.safetensors"), &sf), HPT_ERR_FORMAT); /* now: the offsets */
    free(b);
    /* an index that disagrees with its shards */
    const char *dir = path_in("badidx");
    mkdir(dir, 0755);
    b = image("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, &len);
    f = fopen(path_in("badidx/s1.safetensors"), "wb");
    fwrite(b, 1, len, f);
    fclose(f);
    free(b);
    static const struct { const char *json, *needle; } idx[] = {
        {"{\"weight_map\":{\"w\":\"s1.safetensors\",\"v\":\"s1.safetensors\"}}", "tensor 'v'"},
        {"{\"weight_map\":{}}", "empty"},
        {"{\"weight_map\":{\"w\":\"../s1.safetensors\"}}", "tensor 'w'"},
        {"{\"weight_map\":{\"w\":\"s2.safetensors\"}}", "s2.safetensors"},
        {"{\"weight_map\":[]}", "weight_map"},
    };
    for (size_t i = 0; i < sizeof idx / sizeof *idx; i++) {
        f = fopen(path_in("badidx/model.safetensors.index.json"), "wb");
        fputs(idx[i].json, f);
        fclose(f);
        st_dir d;
        hpt_status s = st_dir_open(dir, &d);
        CHECK_MSG(s != HPT_OK && strstr(hpt_last_error(), idx[i].needle), "%s: %s", idx[i].json,
                  hpt_last_error());
    }
}

/* Mutations of a valid file image (byte changes, insertions of JSON's punctuation, cuts): every
 * result is a clean status, a refused header is left empty, and an accepted one tiles the data
 * (the sanitizer build checks that no byte outside the buffer is read). */
static void mutations(void) {
    size_t len;
    unsigned char *orig = t_read_file(path_in("rt_one/model.safetensors"), &len);
    CHECK(orig && len > 64);
    if (!orig) return;
    unsigned char *b = malloc(len + 8);
    hpt_rng r;
    hpt_rng_seed(&r, 17);
    static const char punct[] = "{}[]\",:0123456789-.e \\";
    int accepted = 0, refused = 0, bad = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(b, orig, len);
        size_t n = len;
        int edits = 1 + (int)(hpt_rng_u32(&r) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = hpt_rng_u32(&r) % n;
            switch (hpt_rng_u32(&r) % 4) {
            case 0: b[at] = (unsigned char)hpt_rng_u32(&r); break;
            case 1: b[at] = (unsigned char)punct[hpt_rng_u32(&r) % (sizeof punct - 1)]; break;
            case 2: n = at + 1; break;                                   /* cut */
            default: if (at < 8) b[at] ^= (unsigned char)(1u << (hpt_rng_u32(&r) % 8)); break;
            }
        }
        st_header h;
        hpt_status s = st_parse_buffer(b, n, "m.safetensors", &h);
        if (s == HPT_OK) {
            accepted++;
            uint64_t sum = 0;
            for (int i = 0; i < h.n; i++) sum += h.t[i].end - h.t[i].begin;
            bad += sum != h.data_bytes || h.data_start + h.data_bytes != n;
            st_header_free(&h);
        } else {
            refused++;
            int b1 = !(s == HPT_ERR_FORMAT || s == HPT_ERR_OOM) || h.n || h.t ||
                     strchr(hpt_last_error(), '\n') != NULL;
            bad += b1;
        }
    }
    CHECK_MSG(bad == 0 && refused > 10000, "%d accepted, %d refused, %d bad", accepted, refused, bad);
    free(b);
    free(orig);
}

/* ---- 4. config.json ---- */

static hpt_status cfg(const char *json, hf_config *c) {
    return hf_config_parse(json, strlen(json), "config.json", c);
}

static void configs(void) {
    hf_config c;
    CHECK_OK(cfg("{\"architectures\":[\"GPT2LMHeadModel\"],\"n_embd\":768,\"n_layer\":12,"
                 "\"n_head\":12,\"n_positions\":1024,\"vocab_size\":50257,"
                 "\"layer_norm_epsilon\":1e-05,\"eos_token_id\":50256,\"bos_token_id\":50256}", &c));
    CHECK(c.arch == HPT_ARCH_GPT2 && c.m.C == 768 && c.m.L == 12 && c.m.NH == 12 && c.m.NKV == 12 &&
          c.m.FF == 3072 && c.m.maxT == 1024 && c.m.V == 50257 && c.m.tied && c.n_eos == 1 &&
          c.eos[0] == 50256 && c.bos == 50256);
    hpt_model_config g;
    CHECK_OK(hf_config_to_model(&c, &g));
    CHECK(g.Vp == 50304 && g.V == 50257 && g.L == 12);
    /* Llama 3.2 1B's keys */
    const char *llama = "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":2048,"
        "\"intermediate_size\":8192,\"num_attention_heads\":32,\"num_key_value_heads\":8,"
        "\"num_hidden_layers\":16,\"vocab_size\":128256,\"max_position_embeddings\":131072,"
        "\"rms_norm_eps\":1e-05,\"rope_theta\":500000.0,\"rope_scaling\":{\"factor\":32.0,"
        "\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,\"original_max_position_embeddings\":8192,"
        "\"rope_type\":\"llama3\"},\"tie_word_embeddings\":true,\"head_dim\":64,"
        "\"eos_token_id\":[128001,128008,128009],\"bos_token_id\":128000,\"torch_dtype\":\"bfloat16\","
        "\"hidden_act\":\"silu\",\"attention_bias\":false,\"mlp_bias\":false}";
    CHECK_OK(cfg(llama, &c));
    CHECK(c.arch == HPT_ARCH_LLAMA && c.m.C == 2048 && c.m.FF == 8192 && c.m.NH == 32 && c.m.NKV == 8 &&
          c.m.L == 16 && c.m.V == 128256 && c.m.maxT == 131072 && c.m.norm_eps == 1e-5f &&
          c.m.rope_theta == 500000.f && c.m.rope_factor == 32.f && c.m.rope_low_freq == 1.f &&
          c.m.rope_high_freq == 4.f && c.m.rope_orig_maxT == 8192 && c.m.tied && !c.m.attn_bias &&
          c.n_eos == 3 && c.eos[2] == 128009 && c.bos == 128000 && !strcmp(c.torch_dtype, "bfloat16"));
    CHECK_OK(hf_config_to_model(&c, &g));
    CHECK(g.arch == HPT_ARCH_LLAMA && g.NKV == 8 && g.FF == 8192 && g.Vp == 128256 && g.tied &&
          g.rope_factor == 32.f && g.rope_orig_maxT == 8192 && g.norm_eps == 1e-5f);
    /* written and read back */
    CHECK_OK(hf_config_write(path_in("cfg.json"), &c, "float32"));
    size_t n;
    unsigned char *text = t_read_file(path_in("cfg.json"), &n);
    hf_config c2;
    CHECK_OK(hf_config_parse((const char *)text, n, "cfg.json", &c2));
    free(text);
    CHECK(c2.m.C == c.m.C && c2.m.NKV == c.m.NKV && c2.m.rope_factor == c.m.rope_factor &&
          c2.m.rope_orig_maxT == 8192 && c2.n_eos == 3 && c2.eos[1] == 128008 && c2.m.tied &&
          c2.m.norm_eps == c.m.norm_eps && c2.m.rope_theta == c.m.rope_theta && c2.m.maxT == c.m.maxT);
    /* rope_parameters (newer transformers), theta inside; Mistral; defaults */
    CHECK_OK(cfg("{\"model_type\":\"mistral\",\"hidden_size\":64,\"intermediate_size\":96,"
                 "\"num_attention_heads\":4,\"num_hidden_layers\":2,\"vocab_size\":300,"
                 "\"rope_parameters\":{\"rope_type\":\"llama3\",\"rope_theta\":1000.0,"
                 "\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
                 "\"original_max_position_embeddings\":64}}", &c));
    CHECK(c.arch == HPT_ARCH_LLAMA && !strcmp(c.arch_name, "MistralForCausalLM") && c.m.NKV == 4 &&
          c.m.rope_theta == 1000.f && c.m.rope_factor == 8.f && c.m.rope_orig_maxT == 64 && !c.m.tied &&
          c.m.norm_eps == 1e-6f && c.n_eos == 0 && c.bos == -1);
    /* mutations of a valid config.json: OK, or a one-line FORMAT / UNSUPPORTED */
    {
        size_t n0 = strlen(llama);
        char *t = malloc(n0 + 1);
        hpt_rng r;
        hpt_rng_seed(&r, 23);
        int bad = 0, ok = 0;
        for (int it = 0; it < 20000; it++) {
            memcpy(t, llama, n0 + 1);
            size_t m = n0;
            for (int e = 0; e < 3; e++) {
                size_t at = hpt_rng_u32(&r) % m;
                if (hpt_rng_u32(&r) % 8 == 0) m = at + 1;
                else t[at] = "{}[]\",:0123456789-.eE \\\n\x01\xff"[hpt_rng_u32(&r) % 25];
            }
            hpt_status s = hf_config_parse(t, m, "config.json", &c);
            ok += s == HPT_OK;
            bad += s != HPT_OK && ((s != HPT_ERR_FORMAT && s != HPT_ERR_UNSUPPORTED) ||
                                   strchr(hpt_last_error(), '\n'));
        }
        CHECK_MSG(bad == 0, "%d mutated configs ended badly (%d accepted)", bad, ok);
        free(t);
    }
    /* refusals name the key */
    static const struct { const char *json, *needle; } bad[] = {
        {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":9,"
         "\"num_attention_heads\":4,\"num_hidden_layers\":1,\"vocab_size\":9,\"head_dim\":32}", "head_dim 32"},
        {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":9,"
         "\"num_attention_heads\":4,\"num_hidden_layers\":1,\"vocab_size\":9,"
         "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2}}", "yarn"},
        {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"intermediate_size\":9,"
         "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"num_hidden_layers\":1,\"vocab_size\":9}",
         "num_key_value_heads"},
        {"{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":64,\"num_attention_heads\":4,"
         "\"num_hidden_layers\":1,\"vocab_size\":9}", "'intermediate_size' is missing"},
        {"{\"architectures\":[\"BertModel\"]}", "BertModel"},
        {"{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_layer\":1,\"n_head\":4,\"vocab_size\":9,"
         "\"activation_function\":\"relu\"}", "relu"},
        {"{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_layer\":1,\"n_head\":4,\"vocab_size\":9,"
         "\"eos_token_id\":[\"x\"]}", "eos_token_id"},
        {"{\"model_type\":\"gpt2\",\"n_embd\":64,\"n_layer\":1.5,\"n_head\":4,\"vocab_size\":9}", "n_layer"},
        {"[]", "not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        hpt_status s = cfg(bad[i].json, &c);
        CHECK_MSG(s != HPT_OK && strstr(hpt_last_error(), bad[i].needle) &&
                  strstr(hpt_last_error(), "config.json"), "%s: %s", bad[i].json, hpt_last_error());
    }
}

/* ---- 5. model directories ---- */

static void model_dirs(hpt_mem *mem) {
    hpt_model *m, *m2;
    CHECK_OK(hpt_model_create(mem, "gpt2:L=3,C=32,NH=4,V=100,T=16", &m));
    CHECK_OK(hpt_model_init_random(m, 11));
    size_t n = hpt_model_num_params(m);
    const float *p = hpt_model_params(m);
    float *q = malloc(n * 4);
    /* fp32: save then load, bit-exact */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path_in("m32"));
    CHECK_OK(hpt_model_save_hf(m, dir, HPT_DTYPE_F32, 0));
    CHECK_OK(hpt_model_load_hf(mem, dir, NULL, &m2));
    CHECK(m2 && hpt_model_num_params(m2) == n && !memcmp(hpt_model_params(m2), p, n * 4));
    hpt_model_free(m2);
    /* with the offload engine (host homes): the same values */
    hpt_offload_opts off = hpt_offload_defaults();
    CHECK_OK(hpt_offload_parse("host", &off));
    CHECK_OK(hpt_model_load_hf(mem, dir, &off, &m2));
    if (m2) {
        CHECK_OK(hpt_model_copy_params(m2, q));
        CHECK(!memcmp(q, p, n * 4));
        /* and saved from the engine: the same files' values */
        CHECK_OK(hpt_model_save_hf(m2, path_in("m32e"), HPT_DTYPE_F32, 0));
        hpt_model_free(m2);
        CHECK_OK(hpt_model_load_hf(mem, path_in("m32e"), NULL, &m2));
        CHECK(m2 && !memcmp(hpt_model_params(m2), p, n * 4));
        hpt_model_free(m2);
    }
    /* bf16: each value rounded to nearest even */
    CHECK_OK(hpt_model_save_hf(m, path_in("m16"), HPT_DTYPE_BF16, 0));
    CHECK_OK(hpt_model_load_hf(mem, path_in("m16"), NULL, &m2));
    if (m2) {
        const float *r = hpt_model_params(m2);
        int same = 1;
        for (size_t i = 0; i < n; i++) same &= f32_bits(r[i]) == (uint32_t)st_f32_to_bf16(p[i]) << 16;
        CHECK(same);
        hpt_model_free(m2);
    }
    /* sharded above 10 kB, over the fp32 directory: stale shards go, other files stay */
    FILE *f = fopen(path_in("m32/tokenizer.json"), "w");
    fputs("{}", f);
    fclose(f);
    CHECK_OK(hpt_model_save_hf(m, dir, HPT_DTYPE_F32, 10000));
    struct stat st;
    CHECK(stat(path_in("m32/tokenizer.json"), &st) == 0);
    CHECK(stat(path_in("m32/model.safetensors"), &st) != 0);
    CHECK(stat(path_in("m32/model.safetensors.index.json"), &st) == 0);
    st_dir d;
    CHECK_OK(st_dir_open(dir, &d));
    CHECK(d.n_files > 3);
    st_dir_close(&d);
    CHECK_OK(hpt_model_load_hf(mem, dir, NULL, &m2));
    CHECK(m2 && !memcmp(hpt_model_params(m2), p, n * 4));
    hpt_model_free(m2);
    /* config.json that disagrees with the files: one line naming the tensor */
    hf_config hc;
    CHECK_OK(hf_config_read(path_in("m16"), &hc));
    hc.m.L = 4;
    CHECK_OK(hf_config_write(path_in("m16/config.json"), &hc, "bfloat16"));
    CHECK_STATUS(hpt_model_load_hf(mem, path_in("m16"), NULL, &m2), HPT_ERR_FORMAT);
    CHECK(strstr(hpt_last_error(), "tensor 'transformer.h.3.ln_1.weight' is missing"));
    hc.m.L = 2;
    CHECK_OK(hf_config_write(path_in("m16/config.json"), &hc, "bfloat16"));
    CHECK_STATUS(hpt_model_load_hf(mem, path_in("m16"), NULL, &m2), HPT_ERR_FORMAT);
    CHECK(strstr(hpt_last_error(), "tensor 'transformer.h.2.") &&
          strstr(hpt_last_error(), "is not a tensor of GPT2LMHeadModel"));
    hc.m.L = 3;
    hc.m.maxT = 17;
    CHECK_OK(hf_config_write(path_in("m16/config.json"), &hc, "bfloat16"));
    CHECK_STATUS(hpt_model_load_hf(mem, path_in("m16"), NULL, &m2), HPT_ERR_SHAPE);
    CHECK(strstr(hpt_last_error(), "tensor 'transformer.wpe.weight': shape (16, 32), expected (17, 32)"));
    CHECK(!strchr(hpt_last_error(), '\n'));
    free(q);
    hpt_model_free(m);
}

/* A checkpoint larger than the device budget goes straight to the engine's disk homes: the
 * device and host peaks stay below its size, and the values are the file's. */
static void streamed(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *m, *m2 = NULL;
    CHECK_OK(hpt_model_create(mem, "gpt2:L=8,C=128,NH=4,V=128,T=16", &m));
    CHECK_OK(hpt_model_init_random(m, 5));
    size_t n = hpt_model_num_params(m);
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path_in("big"));
    CHECK_OK(hpt_model_save_hf(m, dir, HPT_DTYPE_F32, 0));
    hpt_mem *m2mem;
    CHECK_OK(hpt_mem_create(&m2mem));
    CHECK_OK(hpt_mem_set_disk_dir(m2mem, g_tmp));
    const uint64_t ckpt = n * 4, budget = ckpt * 3 / 5;
    hpt_mem_set_budget(m2mem, HPT_TIER_DEVICE, budget);
    CHECK_STATUS(hpt_model_load_hf(m2mem, dir, NULL, &m2), HPT_ERR_OOM); /* whole: too big */
    hpt_offload_opts off = hpt_offload_defaults();
    CHECK_OK(hpt_offload_parse("disk", &off));
    hpt_mem_reset_peak(m2mem);
    CHECK_OK(hpt_model_load_hf(m2mem, dir, &off, &m2));
    hpt_mem_stats st;
    hpt_mem_get_stats(m2mem, &st);
    printf("test_safetensors: a %llu-byte checkpoint loaded into disk homes: device peak %llu "
           "(budget %llu), host peak %llu\n", (unsigned long long)ckpt,
           (unsigned long long)st.peak_bytes[HPT_TIER_DEVICE], (unsigned long long)budget,
           (unsigned long long)st.peak_bytes[HPT_TIER_HOST]);
    CHECK_MSG(st.peak_bytes[HPT_TIER_DEVICE] <= budget && st.peak_bytes[HPT_TIER_HOST] < ckpt / 2,
              "device peak %llu, host peak %llu, checkpoint %llu bytes",
              (unsigned long long)st.peak_bytes[HPT_TIER_DEVICE],
              (unsigned long long)st.peak_bytes[HPT_TIER_HOST], (unsigned long long)ckpt);
    if (m2) {
        float *q = malloc(n * 4);
        CHECK_OK(hpt_model_copy_params(m2, q));
        CHECK(!memcmp(q, hpt_model_params(m), n * 4));
        free(q);
        hpt_model_free(m2);
    }
    hpt_model_free(m);
    hpt_mem_destroy(m2mem);
    hpt_mem_destroy(mem);
}

/* ---- 6. llama directories written by torch (tests/make_ref_state_llama.py's model) ---- */

/* Same names, shapes and dtypes in two directories. */
static int same_names(const char *a, const char *b) {
    st_dir x, y;
    if (st_dir_open(a, &x) != HPT_OK) return 0;
    if (st_dir_open(b, &y) != HPT_OK) { st_dir_close(&x); return 0; }
    int ok = x.n == y.n;
    for (int i = 0; ok && i < x.n; i++) {
        const st_tensor *t = x.ent[i].t, *u = st_dir_find(&y, t->name, NULL);
        ok = u && u->dtype == t->dtype && u->ndim == t->ndim &&
             !memcmp(u->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
        if (!ok) fprintf(stderr, "tensor %s differs between %s and %s\n", t->name, a, b);
    }
    st_dir_close(&x);
    st_dir_close(&y);
    return ok;
}

static void llama_dir(hpt_mem *mem, const char *script, const char *tag, const char *shape,
                      const char *extra, int B, int T) {
    char out[1024], cmd[4096], p[1200];
    snprintf(out, sizeof out, "%s/%s", g_tmp, tag);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s llama %s '%s' %d %d 5 %s", script, out, shape, B,
             T, extra);
    int rc = system(cmd);
    if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) {
        printf("test_safetensors: %s: no llama reference model yet: skipped\n", tag);
        return;
    }
    CHECK_MSG(rc == 0, "%s", cmd);
    snprintf(p, sizeof p, "%s/hf", out);
    hpt_model *m = NULL;
    hpt_status s = hpt_model_load_hf(mem, p, NULL, &m);
    if (s == HPT_ERR_UNSUPPORTED && strstr(hpt_last_error(), "no llama architecture")) {
        printf("test_safetensors: %s: this build has no llama architecture yet: skipped\n", tag);
        return;
    }
    CHECK_OK(s);
    if (!m) return;
    CHECK(!strcmp(hpt_model_arch(m), "llama"));
    snprintf(p, sizeof p, "%s/ref.bin", out);
    size_t len;
    unsigned char *ref = t_read_file(p, &len);
    const int32_t *x = (const int32_t *)(ref + 8), *y = x + B * T;
    float loss_ref;
    int64_t np;
    memcpy(&loss_ref, y + B * T, 4);
    memcpy(&np, (const unsigned char *)(y + B * T) + 4, 8);
    const float *params = (const float *)((const unsigned char *)(y + B * T) + 12);
    const float *logits_ref = params + np;
    const hpt_model_config *c = hpt_model_get_config(m);
    CHECK(len == 8 + 8 * (size_t)(B * T) + 12 + 4 * (size_t)np + 4 * (size_t)(B * T) * (size_t)c->V);
    CHECK((size_t)np == hpt_model_num_params(m));
    CHECK_MSG(!memcmp(hpt_model_params(m), params, (size_t)np * 4),
              "%s: the loaded parameters differ from PyTorch's", tag);
    float loss = -1;
    CHECK_OK(hpt_model_forward(m, x, y, B, T, &loss));
    double rel = fabs((double)loss - (double)loss_ref) / fabs((double)loss_ref);
    CHECK_MSG(rel < 1e-5, "%s: loss %.7f, PyTorch's %.7f", tag, (double)loss, (double)loss_ref);
    const float *lg = hpt_model_logits(m);
    double num = 0, den = 0;
    for (int i = 0; i < B * T; i++)
        for (int v = 0; v < c->V; v++) {
            double a = lg[(size_t)i * c->Vp + v], b = logits_ref[(size_t)i * c->V + v];
            num += (a - b) * (a - b);
            den += b * b;
        }
    CHECK_MSG(sqrt(num / den) < 1e-4, "%s: logits rel. error %.3e", tag, sqrt(num / den));
    /* save, load: bit-exact, and Hugging Face's names, shapes and dtypes as torch wrote them */
    snprintf(p, sizeof p, "%s/saved", out);
    CHECK_OK(hpt_model_save_hf(m, p, strstr(extra, "bf16") ? HPT_DTYPE_BF16 : HPT_DTYPE_F32,
                               strstr(extra, "--shard") ? 20000 : 0));
    hpt_model *m2 = NULL;
    CHECK_OK(hpt_model_load_hf(mem, p, NULL, &m2));
    CHECK(m2 && !memcmp(hpt_model_params(m2), params, (size_t)np * 4));
    hpt_model_free(m2);
    char q[1200];
    snprintf(q, sizeof q, "%s/hf", out);
    CHECK(same_names(q, p));
    /* the engine's homes (host) get the same values */
    hpt_offload_opts off = hpt_offload_defaults();
    CHECK_OK(hpt_offload_parse("host", &off));
    CHECK_OK(hpt_model_load_hf(mem, q, &off, &m2));
    if (m2) {
        float *buf = malloc((size_t)np * 4);
        CHECK_OK(hpt_model_copy_params(m2, buf));
        CHECK(!memcmp(buf, params, (size_t)np * 4));
        free(buf);
        hpt_model_free(m2);
    }
    free(ref);
    hpt_model_free(m);
}

int main(int argc, char **argv) {
    g_tmp = t_tmpdir();
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    if (argc > 1 && system("/usr/bin/python3 -c 'import torch' 2>/dev/null") == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s fixtures %s/fx", argv[1], g_tmp);
        CHECK(system(cmd) == 0);
        check_expected_file(path_in("fx"));
    } else {
        printf("test_safetensors: python3-torch not found: torch's fixtures skipped\n");
    }
    if (argc > 1 && system("/usr/bin/python3 -c 'import torch' 2>/dev/null") == 0) {
        /* odd sizes: NH/NKV = 3, C = 48, T = 13, Llama 3 rope scaling, untied head */
        llama_dir(mem, argv[1], "llama_odd",
                  "llama:L=2,C=48,NH=6,NKV=3,FF=80,V=300,T=64,theta=10000,eps=1e-5,factor=8,"
                  "low=1,high=4,orig=16", "", 2, 13);
        /* tied, biases, rope_parameters, bf16 files in shards */
        llama_dir(mem, argv[1], "llama_tied",
                  "llama:L=3,C=40,NH=4,NKV=2,FF=72,V=260,T=32,theta=500000,eps=1e-6,tied=1,"
                  "attn_bias=1,mlp_bias=1", "--rope-parameters --dtype bf16 --shard 20000", 3, 9);
    }
    round_trip();
    mutations();
    corrupt();
    configs();
    model_dirs(mem);
    streamed();
    hpt_mem_destroy(mem);
    return t_done("test_safetensors");
}
