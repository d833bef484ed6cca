/* cmd_convert.c: `hptrain convert`: llm.c checkpoint <-> Hugging Face model directory, or a
 * shape randomly initialised as `train` initialises it, written as either (with a tokenizer
 * copied in); and `hptrain merge`: LoRA adapters (PEFT's files) merged into the base, written
 * as a directory. */
#include "cli.h"

#include <cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char k_help[] =
    "usage: hptrain convert IN OUT [--save-dtype f32|bf16] [--shard-size SIZE]\n"
    "       hptrain convert --model IN --save OUT [--format hf|llmc] ...\n"
    "       hptrain convert SHAPE --save OUT [--seed S] [--tokenizer FILE] ...\n"
    "\n"
    "Converts an llm.c checkpoint (a file) to a Hugging Face model directory (config.json and\n"
    "safetensors with Hugging Face's names, shapes and dtypes), or a Hugging Face directory to\n"
    "an llm.c checkpoint (fp32; GPT-2 only). The output format is the other one than the\n"
    "input's unless --format says, or the input is a directory of another family than GPT-2\n"
    "(and OUT does not end in .bin) or --save-dtype is given: then a directory to a directory\n"
    "re-writes it (e.g. in bf16 or\n"
    "in shards; the input directory's tokenizer files and token ids are kept). A SHAPE (as train\n"
    "--model takes it: @SHAPES@) is\n"
    "initialised as `train --model SHAPE --seed S` initialises it and written as a Hugging Face\n"
    "directory (or --format llmc, GPT-2). Weights stream through: the model is built in memory\n"
    "once.\n"
    "  --save-dtype K   a directory's weights: f32 or bf16 (rounded to nearest even); default:\n"
    "                   the input directory's dtype, else f32 (--dtype: the same)\n"
    "  --seed S         a SHAPE's initialisation seed (default 1337, train's)\n"
    "  --tokenizer FILE copy a tokenizer.json (or tokenizer.model) into the directory, with the\n"
    "                   tokenizer_config.json beside it if there is one; a SHAPE's config.json\n"
    "                   gets the tokenizer's begin- and end-of-text ids (bos_token_id,\n"
    "                   eos_token_id) where it has them\n"
    "  --shard-size S   split the safetensors files above S bytes (default 5GB; 512MB, ...)\n"
    "  --adapter DIR    merge LoRA adapters (PEFT's files) into the weights first\n";

static const char k_merge_help[] =
    "usage: hptrain merge --model PATH|DIR --adapter DIR --save OUT [--dtype f32|bf16]\n"
    "                     [--shard-size SIZE]\n"
    "\n"
    "Merges LoRA adapters in PEFT's files (adapter_config.json, adapter_model.safetensors: a\n"
    "`train --lora --save DIR`) into the base, W += alpha/r B A on each adapted layer, and\n"
    "writes the result as a Hugging Face model directory (the base directory's tokenizer files\n"
    "and token ids kept): `convert --adapter DIR` to a directory (docs/lora.md).\n";

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* A tokenizer to copy into a model of V tokens: it loads, and its ids fit; ids[0], ids[1] its
 * begin- and end-of-text tokens (-1: none). 0, or 1 printed. */
static int check_tokenizer(const char *path, int V, int from_shape, int ids[2]) {
    hpt_tokenizer *t;
    hpt_status s = hpt_tokenizer_load(path, &t);
    if (s != HPT_OK) return cli_lib_error(s, "convert: --tokenizer");
    int tv = hpt_tokenizer_vocab_size(t);
    ids[0] = hpt_tokenizer_bos(t);
    ids[1] = hpt_tokenizer_eot(t);
    hpt_tokenizer_free(t);
    char hint[48] = "";
    if (from_shape) snprintf(hint, sizeof hint, ": give V=%d in the SHAPE", tv);
    if (tv > V) return cli_error("convert: --tokenizer %s has %d tokens, more than the model's "
                                 "vocabulary (V=%d)%s", path, tv, V, hint);
    return 0;
}

/* A SHAPE's config.json carries no token ids (a model directory's are kept): the tokenizer's
 * bos and eos, where it has them, as bos_token_id and eos_token_id. 0, or 1 printed. */
static int set_token_ids(const char *dir, const int ids[2]) {
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "rb");
    char *text = NULL;
    long n = f && fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (text = calloc(1, (size_t)n + 1)) &&
        fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    if (f) fclose(f);
    cJSON *r = text ? cJSON_Parse(text) : NULL;
    free(text);
    const char *key[2] = {"bos_token_id", "eos_token_id"};
    for (int i = 0; r && i < 2; i++)
        if (ids[i] >= 0) {
            cJSON_DeleteItemFromObjectCaseSensitive(r, key[i]);
            cJSON_AddNumberToObject(r, key[i], ids[i]);
        }
    char *out = r ? cJSON_Print(r) : NULL;
    cJSON_Delete(r);
    f = out ? fopen(p, "wb") : NULL;
    int rc = f && fputs(out, f) >= 0 && fputc('\n', f) != EOF ? 0 : 1;
    if (f && fclose(f) != 0) rc = 1;
    cJSON_free(out);
    return rc ? cli_error("convert: cannot write the token ids into %s", p) : 0;
}

/* Copies file a to b; 0, or 1 printed. */
static int copy_one(const char *a, const char *b) {
    FILE *in = fopen(a, "rb"), *out = in ? fopen(b, "wb") : NULL;
    int rc = in && out ? 0 : cli_error("convert: cannot copy %s to %s", a, b);
    char buf[1 << 16];
    size_t n;
    while (!rc && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) rc = cli_error("convert: cannot write %s", b);
    if (in) fclose(in);
    if (out && fclose(out) != 0 && !rc) rc = cli_error("convert: cannot write %s", b);
    return rc;
}

/* --tokenizer FILE into dir: as tokenizer.json (tiktoken's file: tokenizer.model), and the
 * tokenizer_config.json beside FILE (its chat template, special tokens) when there is one. */
static int copy_tokenizer(const char *path, const char *dir) {
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char b[4200], a[4200];
    snprintf(b, sizeof b, "%s/%s", dir, strcmp(base, "tokenizer.model") ? "tokenizer.json" : "tokenizer.model");
    if (copy_one(path, b)) return 1;
    snprintf(a, sizeof a, "%.*stokenizer_config.json", (int)(base - path), path);
    snprintf(b, sizeof b, "%s/tokenizer_config.json", dir);
    struct stat st;
    return stat(a, &st) == 0 && S_ISREG(st.st_mode) ? copy_one(a, b) : 0;
}

/* convert (merge 0) and merge (1): the same flags, merge's output always a directory */
static int convert(int argc, char **argv, int merge) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'}, {"save", 1, 0, 's'}, {"format", 1, 0, 'f'}, {"dtype", 1, 0, 'd'},
        {"shard-size", 1, 0, 'z'}, {"adapter", 1, 0, 'a'}, {"help", 0, 0, 'h'},
        {"save-dtype", 1, 0, 'd'}, {"seed", 1, 0, 'x'}, {"tokenizer", 1, 0, 't'}, {0, 0, 0, 0}};
    const char *cmd = merge ? "merge" : "convert";
    const char *in = NULL, *out = NULL, *format = merge ? "hf" : NULL, *adapter = NULL;
    const char *tok = NULL;
    int dtype = -1; /* the input directory's, else f32 */
    long seed = 1337;
    uint64_t shard = 0;
    int opt_rc = 0, c;
    while ((c = cli_getopt(cmd, argc, argv, longopts, merge ? k_merge_help : k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        switch (c) {
        case 'm': in = optarg; break;
        case 's': out = optarg; break;
        case 'a': adapter = optarg; break;
        case 't': tok = optarg; break;
        case 'x':
            if (cli_parse_long(cmd, "--seed", optarg, 0, 0x7fffffffffffffffL, &seed)) return 2;
            break;
        case 'f':
            if (merge) return cli_usage_error(cmd, "merge writes a Hugging Face directory: no --format");
            if (strcmp(optarg, "hf") && strcmp(optarg, "llmc"))
                return cli_usage_error(cmd, "--format must be hf or llmc, not '%s'", optarg);
            format = optarg;
            break;
        case 'd':
            if (!strcmp(optarg, "f32")) dtype = HPT_DTYPE_F32;
            else if (!strcmp(optarg, "bf16")) dtype = HPT_DTYPE_BF16;
            else return cli_usage_error(cmd, "--%s must be f32 or bf16, not '%s'", cli_optname(), optarg);
            break;
        case 'z':
            if (hpt_parse_size(optarg, &shard) != HPT_OK || shard == 0)
                return cli_usage_error(cmd, "--shard-size: '%s' is not a size", optarg);
            break;
        }
    }
    if (!merge && !in && optind < argc) in = argv[optind++];
    if (!merge && !out && optind < argc) out = argv[optind++];
    if (optind < argc) return cli_unexpected_argument(cmd, argv[optind]);
    if (merge && (!in || !out || !adapter))
        return cli_usage_error(cmd, "--model, --adapter and --save are required");
    if (!in || !out) return cli_usage_error(cmd, "an input and an output are required");
    struct stat st;
    hpt_model_config shape;
    /* no such file and no path's look: a SHAPE, whose parse error names the problem */
    const int from_shape = !merge && stat(in, &st) != 0 && !strchr(in, '/') && !strstr(in, ".bin");
    if (from_shape && hpt_model_config_parse(in, &shape) != HPT_OK)
        return cli_lib_error(HPT_ERR_INVALID, cmd);
    /* a directory becomes llm.c's file only as GPT-2 and without --save-dtype (llm.c's is fp32);
     * an OUT named like llm.c's file (*.bin) asks for it: refused below for another family */
    hpt_model_config icfg;
    const size_t olen = strlen(out);
    const int bin_out = olen > 4 && !strcmp(out + olen - 4, ".bin");
    int to_hf = format ? !strcmp(format, "hf")
                       : from_shape || !is_dir(in) || dtype >= 0 ||
                         (!bin_out && hpt_model_read_config(in, &icfg) == HPT_OK &&
                          icfg.arch != HPT_ARCH_GPT2);
    if (tok && !to_hf) return cli_usage_error(cmd, "--tokenizer is for a Hugging Face directory");
    if (dtype < 0 && is_dir(in) && hpt_hf_weights_dtype(in, &dtype) != HPT_OK) dtype = HPT_DTYPE_F32;
    if (dtype < 0) dtype = HPT_DTYPE_F32;
    hpt_mem *mem;
    hpt_status s = hpt_mem_create(&mem);
    if (s != HPT_OK) return cli_lib_error(s, cmd);
    hpt_model *m = NULL;
    if (from_shape) { /* train's initialisation: hpt_model_init_random with the run's seed */
        s = hpt_model_create_config(mem, &shape, &m);
        if (s == HPT_OK) s = hpt_model_init_random(m, (uint64_t)seed);
    } else {
        s = hpt_model_load_forward(mem, in, &m); /* weights only: nothing here trains */
    }
    if (s == HPT_OK && adapter) {
        s = hpt_lora_load(m, adapter);
        if (s == HPT_OK) s = hpt_model_lora_merge(m);
    }
    if (s == HPT_OK && !to_hf && strcmp(hpt_model_arch(m), "gpt2")) {
        char arch[32];
        snprintf(arch, sizeof arch, "%s", hpt_model_arch(m));
        hpt_model_free(m);
        hpt_mem_destroy(mem);
        return cli_error("convert: llm.c's checkpoint holds GPT-2 only; %s is %s (write a "
                         "Hugging Face directory: --format hf)", in, arch);
    }
    int ids[2] = {-1, -1};
    if (s == HPT_OK && tok && check_tokenizer(tok, hpt_model_get_config(m)->V, from_shape, ids)) {
        hpt_model_free(m);
        hpt_mem_destroy(mem);
        return 1;
    }
    if (s == HPT_OK)
        s = to_hf ? hpt_model_save_hf_from(m, out, dtype, shard, is_dir(in) ? in : NULL)
                  : hpt_model_save(m, out);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    if (s != HPT_OK) return cli_lib_error(s, cmd);
    if (tok && copy_tokenizer(tok, out)) return 1;
    if (tok && from_shape && set_token_ids(out, ids)) return 1;
    fprintf(stderr, "wrote %s (%s%s%s%s%s)\n", out, to_hf ? "Hugging Face directory" : "llm.c checkpoint",
            to_hf ? (dtype == HPT_DTYPE_BF16 ? ", bf16" : ", f32") : "",
            from_shape ? ", randomly initialised" : "", adapter ? ", the adapters merged" : "",
            tok ? ", the tokenizer copied in" : "");
    return 0;
}

int cmd_convert(int argc, char **argv) { return convert(argc, argv, 0); }
int cmd_merge(int argc, char **argv) { return convert(argc, argv, 1); }
