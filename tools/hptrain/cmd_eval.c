/* cmd_eval.c: `hptrain eval`: the mean loss and perplexity of a model over the first N batches
 * of token shards, read in order from the start (shard 0, offset 0, no wrapping), forward only.
 * The model comes as `train` and `sample` take it (a checkpoint, a Hugging Face directory, a
 * --save directory, or a SHAPE with random weights), with the same plan flags and checks
 * (forward rules) and the plan's budgets set first; without the engine it is made forward-only
 * (no gradient buffer: the peak is hpt_plan_estimate's forward-only figure). docs/eval.md.
 * Invariants: loss = mean over batches of each batch's mean token loss (every batch has B*T
 * tokens), summed in double; with masked shards the mean over all the batches' targets (each
 * batch's mean weighed by its targets); perplexity = exp(loss); same model, data, plan and
 * thread count: the same bits. */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char k_help[] =
    "usage: hptrain eval --model PATH|DIR|SHAPE --data GLOB --batch B --seq T [--batches N]\n"
    "                    [plan flags]\n"
    "\n"
    "Prints the mean loss and perplexity of a model over the first N batches of B x T tokens\n"
    "of the token shards matching GLOB (uint16 or uint32 shards), read in order from the\n"
    "start, each batch the window after the last (as `train` reads them). Forward only: no\n"
    "gradients, no optimizer. The last line on standard output is\n"
    "  loss L perplexity P batches N tokens K targets M\n"
    "With masked shards (`hptrain tokenize` of chat JSONL) the loss is the mean over the M\n"
    "target tokens only (a line before it says so); otherwise M = K.\n"
    "\n"
    "  --model PATH|DIR|SHAPE  checkpoint, a Hugging Face model directory (config.json and\n"
    "                      safetensors), a directory holding model.bin (a --save directory),\n"
    "                      or a shape with random weights (--seed)\n"
    "  --data GLOB         token shards\n"
    "  --batch B, --seq T  batch size and sequence length (T <= the model's maxT)\n"
    "  --batches N         batches to evaluate (default: every batch of one pass over the data;\n"
    "                      more than the data holds is an error)\n"
    "  --seed S            the random weights of a SHAPE (default 1337)\n"
    "  --threads N         threads (default: all cores)\n"
    "  --adapter DIR       LoRA adapters in PEFT's files (`train --lora --save DIR`), merged into\n"
    "                      the model's weights at load (docs/lora.md)\n"
    "  --quiet             no information lines on standard error\n"
    "  --force             go on when the shards' tokenizer (tokenizer.json beside them) is not\n"
    "                      the model's (its directory's) or has more tokens than its vocabulary\n"
    "  plan flags          any of train's: --attention, --matmul, --recompute, --head-chunk,\n"
    "                      --offload, --weights, --embeddings, --memory, --host-memory, ...\n"
    "                      (hptrain train --help); those about the optimizer or the update are\n"
    "                      accepted and have no effect\n";

enum { OPT_FORCE = 1150 }; /* this command's own long option */

/* train's flags that have no meaning without training */
static int train_only(int c) { return c && strchr("vnlLwgeEsSroA", c) != NULL; }

int cmd_eval(int argc, char **argv) {
    static const struct option longopts[] = {
        CLI_TRAIN_LONGOPTS, {"batches", 1, 0, 'N'}, {"adapter", 1, 0, 'a'},
        {"force", 0, 0, OPT_FORCE}, {0, 0, 0, 0}};
    hpt_plan plan = hpt_plan_default_choices();
    const char *model_path = NULL, *data = NULL, *adapter = NULL;
    long B = 0, T = 0, n_batches = 0, threads = 0, seed = 1337;
    int quiet = 0, force = 0, opt_rc = 0, c;
    while ((c = cli_getopt("eval", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        int r = 0;
        switch (c) {
        case 'm': model_path = optarg; break;
        case 'd': data = optarg; break;
        case 'b': r = cli_parse_long("eval", "--batch", optarg, 1, 1 << 20, &B); break;
        case 't': r = cli_parse_long("eval", "--seq", optarg, 1, 1 << 20, &T); break;
        case 'N': r = cli_parse_long("eval", "--batches", optarg, 1, 1L << 40, &n_batches); break;
        case 'x': r = cli_parse_long("eval", "--seed", optarg, 0, 0x7fffffffffffffffL, &seed); break;
        case 'j': r = cli_parse_long("eval", "--threads", optarg, 1, 1024, &threads); break;
        case 'q': quiet = 1; break;
        case 'a': adapter = optarg; break;
        case OPT_FORCE: force = 1; break;
        case CLI_OPT_PLAN: r = cli_plan_flag("eval", &plan, cli_optname(), optarg); break;
        default:
            if (train_only(c)) r = cli_usage_error("eval", "--%s is a train option", cli_optname());
            break;
        }
        if (r) return r;
    }
    if (optind < argc) return cli_unexpected_argument("eval", argv[optind]);
    if (!model_path) return cli_usage_error("eval", "--model is required");
    if (!data) return cli_usage_error("eval", "--data is required");
    if (!B || !T) return cli_usage_error("eval", "--batch and --seq are required");
    hpt_plan_env env = {.training = 0, .has_val = -1, .need_disk_dir = 1};
    int rc = cli_plan_check("eval", &plan, &env);
    if (rc) return rc;
    if (threads) hpt_set_threads((int)threads);

    char path[4200];
    struct stat st;
    const char *model_arg = model_path; /* a directory's tokenizer is the model's */
    if (stat(model_path, &st) == 0 && S_ISDIR(st.st_mode)) {
        /* as sample: with config.json a Hugging Face directory (the loader reads it), else a
         * --save directory's model.bin */
        snprintf(path, sizeof path, "%s/config.json", model_path);
        if (stat(path, &st) != 0) {
            snprintf(path, sizeof path, "%s/model.bin", model_path);
            model_path = path;
        }
    }
    hpt_mem *mem = NULL;
    hpt_model *m = NULL;
    hpt_dataloader *dl = NULL;
    hpt_status s = hpt_mem_create(&mem);
    if (s != HPT_OK) return cli_lib_error(s, "starting");
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        if (plan.budget_bytes[t]) hpt_mem_set_budget(mem, (hpt_tier)t, plan.budget_bytes[t]);
    if (plan.offload_dir && (s = hpt_mem_set_disk_dir(mem, plan.offload_dir)) != HPT_OK) {
        rc = cli_lib_error(s, "eval");
        goto out;
    }
    hpt_mem_set_context(mem, 0, HPT_PHASE_SETUP, -1);
    int is_shape = stat(model_path, &st) != 0;
    /* forward only: without the engine the model never holds gradients (hpt_model_*_forward);
     * the engine's model keeps its flat ones until released below */
    int eng = hpt_offload_active(&plan.offload);
    if (is_shape) {
        s = eng ? hpt_model_create_offload(mem, model_path, &plan.offload, &m)
                : hpt_model_create_forward(mem, model_path, &m);
        if (s == HPT_OK) s = hpt_model_init_random(m, (uint64_t)seed);
    } else {
        s = eng ? hpt_model_load_offload(mem, model_path, &plan.offload, &m)
                : hpt_model_load_forward(mem, model_path, &m);
    }
    if (s != HPT_OK) { rc = cli_lib_error(s, "loading the model"); goto out; }
    if (adapter && eng) {
        rc = cli_error("--adapter merges the adapters into a base in memory: not with --offload");
        goto out;
    }
    if (adapter) { /* LoRA adapters merged into the base (docs/lora.md) */
        s = hpt_lora_load(m, adapter);
        if (s == HPT_OK) s = hpt_model_lora_merge(m);
        if (s != HPT_OK) { rc = cli_lib_error(s, "loading the adapters"); goto out; }
    }
    hpt_model_release_grads(m); /* forward only (nothing without the engine) */
    const hpt_model_config *cfg = hpt_model_get_config(m);
    if (T > cfg->maxT) {
        rc = cli_error("--seq %ld exceeds the model's maxT %d", T, cfg->maxT);
        goto out;
    }
    if (cli_check_shards_tokenizer("eval", data, model_arg, cfg->V, force)) { /* as train */
        rc = 1;
        goto out;
    }
    if ((s = hpt_model_set_act_opts(m, &plan.act)) != HPT_OK ||
        (s = hpt_dataloader_open(mem, data, (int)B, (int)T, cfg->V, &dl)) != HPT_OK ||
        (s = hpt_dataloader_set_pack(dl, plan.pack)) != HPT_OK) { /* docs/packing.md */
        rc = cli_lib_error(s, "eval");
        goto out;
    }
    size_t avail = hpt_dataloader_num_batches(dl);
    if (!n_batches) n_batches = (long)avail;
    if ((size_t)n_batches > avail) {
        rc = cli_error("--batches %ld: the data '%s' holds %zu batch%s of %ld x %ld tokens", n_batches,
                       data, avail, avail == 1 ? "" : "es", B, T);
        goto out;
    }
    if (!quiet) {
        char pb[2048];
        if (hpt_plan_print(&plan, pb, sizeof pb) != HPT_OK) pb[0] = '\0';
        fprintf(stderr, "eval: %s %s (%.2fM parameters, V=%d), %ld batch%s of %ld x %ld from %s; plan: %s\n",
                hpt_model_arch(m), is_shape ? model_path : "checkpoint",
                (double)hpt_model_num_params(m) / 1e6, cfg->V, n_batches, n_batches == 1 ? "" : "es", B,
                T, data, *pb ? pb : "(defaults)");
    }
    hpt_mem_set_context(mem, 0, HPT_PHASE_EVAL, -1);
    double sum = 0.0, wsum = 0.0, t0 = hpt_now(); /* wsum: over targets (masked shards) */
    int64_t n_targets = 0, n_real = 0; /* n_real: tokens that are not padding (--pack) */
    for (long i = 0; i < n_batches; i++) {
        const int32_t *x, *y;
        float loss;
        if ((s = hpt_dataloader_next(dl, &x, &y)) != HPT_OK ||
            (s = hpt_model_set_positions(m, hpt_dataloader_positions(dl), (int)B, (int)T)) != HPT_OK ||
            (s = hpt_model_forward(m, x, y, (int)B, (int)T, &loss)) != HPT_OK) {
            rc = cli_lib_error(s, "eval");
            goto out;
        }
        int64_t k = 0;
        n_real += hpt_dataloader_real_tokens(dl);
        for (long j = 0; j < B * T; j++) k += y[j] >= 0;
        sum += (double)loss;
        wsum += (double)loss * (double)k;
        n_targets += k;
    }
    /* every token a target: the mean of the batches' losses; else the mean over the targets
     * (docs/targets.md) */
    double secs = hpt_now() - t0, mean = n_targets == (int64_t)n_batches * B * T
                                             ? sum / (double)n_batches
                                             : n_targets ? wsum / (double)n_targets : 0.0;
    if (!quiet) {
        hpt_mem_stats ms;
        hpt_mem_get_stats(mem, &ms);
        fprintf(stderr, "eval: %.1f tokens/s, peak %.1f MiB accounted (device tier, %llu bytes), "
                "RSS peak %.1f MiB\n", (double)n_real / (secs > 0 ? secs : 1e-9),
                (double)ms.peak_bytes[HPT_TIER_DEVICE] / 1048576.0,
                (unsigned long long)ms.peak_bytes[HPT_TIER_DEVICE], (double)hpt_rss_peak_bytes() / 1048576.0);
    }
    if (n_targets < (int64_t)n_batches * B * T) /* masked shards: say which loss this is */
        printf("the loss on targets only: %lld of %ld tokens are targets (masked shards, "
               "docs/targets.md)\n", (long long)n_targets, n_batches * B * T);
    printf("loss %.9g perplexity %.9g batches %ld tokens %ld targets %lld\n", mean, exp(mean),
           n_batches, n_batches * B * T, (long long)n_targets);
    if (fflush(stdout) != 0) rc = cli_error("cannot write the result");
out:
    hpt_dataloader_free(dl);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
    return rc;
}
