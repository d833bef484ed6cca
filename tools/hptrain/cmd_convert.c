/* cmd_convert.c: `hptrain convert`: llm.c checkpoint <-> Hugging Face model directory; and
 * `hptrain merge`: LoRA adapters (PEFT's files) merged into the base, written as a directory. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static const char k_help[] =
    "usage: hptrain convert IN OUT [--dtype f32|bf16] [--shard-size SIZE]\n"
    "       hptrain convert --model IN --save OUT [--format hf|llmc] ...\n"
    "\n"
    "Converts an llm.c checkpoint (a file) to a Hugging Face model directory (config.json and\n"
    "safetensors with Hugging Face's names, shapes and dtypes), or a Hugging Face directory to\n"
    "an llm.c checkpoint (fp32; GPT-2 only). The output format is the other one than the\n"
    "input's unless --format says (a directory to a directory re-writes it, e.g. in bf16 or in\n"
    "shards; the input directory's tokenizer files and token ids are kept). Weights stream\n"
    "through: the model is built in memory once.\n"
    "  --dtype K        f32 (default) or bf16 (rounded to nearest even) for a directory\n"
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

/* convert (merge 0) and merge (1): the same flags, merge's output always a directory */
static int convert(int argc, char **argv, int merge) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'}, {"save", 1, 0, 's'}, {"format", 1, 0, 'f'}, {"dtype", 1, 0, 'd'},
        {"shard-size", 1, 0, 'z'}, {"adapter", 1, 0, 'a'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *cmd = merge ? "merge" : "convert";
    const char *in = NULL, *out = NULL, *format = merge ? "hf" : NULL, *adapter = NULL;
    int dtype = HPT_DTYPE_F32;
    uint64_t shard = 0;
    int opt_rc = 0, c;
    while ((c = cli_getopt(cmd, argc, argv, longopts, merge ? k_merge_help : k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        switch (c) {
        case 'm': in = optarg; break;
        case 's': out = optarg; break;
        case 'a': adapter = optarg; break;
        case 'f':
            if (merge) return cli_usage_error(cmd, "merge writes a Hugging Face directory: no --format");
            if (strcmp(optarg, "hf") && strcmp(optarg, "llmc"))
                return cli_usage_error(cmd, "--format must be hf or llmc, not '%s'", optarg);
            format = optarg;
            break;
        case 'd':
            if (!strcmp(optarg, "f32")) dtype = HPT_DTYPE_F32;
            else if (!strcmp(optarg, "bf16")) dtype = HPT_DTYPE_BF16;
            else return cli_usage_error(cmd, "--dtype must be f32 or bf16, not '%s'", optarg);
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
    int to_hf = format ? !strcmp(format, "hf") : !is_dir(in);
    hpt_mem *mem;
    hpt_status s = hpt_mem_create(&mem);
    if (s != HPT_OK) return cli_lib_error(s, cmd);
    hpt_model *m = NULL;
    s = hpt_model_load_forward(mem, in, &m); /* weights only: nothing here trains */
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
    if (s == HPT_OK)
        s = to_hf ? hpt_model_save_hf_from(m, out, dtype, shard, is_dir(in) ? in : NULL)
                  : hpt_model_save(m, out);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    if (s != HPT_OK) return cli_lib_error(s, cmd);
    fprintf(stderr, "wrote %s (%s%s)\n", out, to_hf ? "Hugging Face directory" : "llm.c checkpoint",
            adapter ? ", the adapters merged" : "");
    return 0;
}

int cmd_convert(int argc, char **argv) { return convert(argc, argv, 0); }
int cmd_merge(int argc, char **argv) { return convert(argc, argv, 1); }
