/* cmd_estimate.c: `hptrain estimate`: what `hptrain train` with the same flags would allocate,
 * by category and tier, its peak, whether it fits --memory, and its FLOPs, from the estimator
 * (src/plan/estimate.c). Nothing is allocated for the model and no data is read: a SHAPE is
 * parsed, a checkpoint's header is read for its shape. Text on stdout, or JSON with --json. */
#include "train_args.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char k_help[] =
    "usage: hptrain estimate --model PATH|DIR|SHAPE [options]\n"
    "\n"
    "Prints what `hptrain train` with the same options would allocate, by category and tier,\n"
    "its peak, whether it fits the budgets given (--memory, --host-memory, --disk-memory; if\n"
    "not, the budget that binds, the --batch / --seq that would fit and whether --plan auto\n"
    "would find a plan), the parameter count, the FLOPs per token and, from a calibration of\n"
    "the device it is for, the step time. Nothing is allocated and no data is read; a\n"
    "checkpoint's header (a model directory's config.json) is read for its shape. It takes\n"
    "every option of `hptrain train`; those that do not change memory (--data, --steps, --lr,\n"
    "--log, ...) are accepted and ignored. Exit status: 0 when it fits (or no budget was\n"
    "given), 1 when it does not fit a budget given (the report is printed all the same; the\n"
    "reason is the last line on standard error), 2 for a usage error.\n"
    "\n"
    "  --model PATH|DIR|SHAPE  llm.c checkpoint file, Hugging Face model directory (its\n"
    "                       config.json) or shape: @SHAPES@\n"
    "  --resume DIR         the run saved in DIR: its model, --batch, --seq, --accum, plan and\n"
    "                       budgets from its record (run.json), then the flags given; a state\n"
    "                       saved without a record: the shape of DIR/model.bin\n"
    "  --batch B            sequences per micro-batch (default 4)\n"
    "  --accum K            micro-batches per optimizer step (default 1): gradients summed and\n"
    "                       scaled by 1/K, the update of one batch of K*B; memory of B only\n"
    "  --seq T              tokens per sequence (default 64)\n"
    "  --val GLOB           a validation loader is open (its buffers count)\n"
    "  --memory SIZE        device budget, e.g. 512MB, 4GB, 1.5GiB: says whether the run fits\n"
    "  --host-memory SIZE   host-tier budget: says whether the host tier's peak fits\n"
    "  --disk-memory SIZE   disk-tier budget: says whether the disk tier's peak fits\n"
    "  --forward-only       forward passes only (evaluation): no optimizer state\n"
    CLI_HELP_OFFLOAD
    CLI_HELP_AUTO
    "  --optimizer K        adamw (default), lion, adam-mini or sgd (docs/optimizers.md; Lion\n"
    "                       wants a 3-10x smaller --lr than AdamW, SGD a far larger one)\n"
    "  --state-bits N       optimizer state in 32 (default) or 8 bits (block-wise quantised)\n"
    "  --state-32bit-embeddings  with --state-bits 8: keep wte and wpe state in 32 bits\n"
    "  --attention K        flash (default) or plain attention\n"
    "  --recompute P        none (default), selective, every:N or full\n"
    "  --act-offload K      none (default), host or disk: saved activations on that tier\n"
    "  --act-compress K     none (default), int8 or bf16 saved activations\n"
    "  --schedule K         full (default) or hybrid (docs/predict.md): adds the predictor's\n"
    "                       state and prints the predict phase's peak per tier\n"
    "  --predictor K        hybrid: adam (default) or linear\n"
    "  --check-every K      hybrid: predict-phase checks (their one-sequence arena) when K > 0\n"
    "  --check-weights W    hybrid: fp32 (default) or int8 checks (an int8 copy of the weights\n"
    "                       and its cache instead of the arena)\n"
    "  --procs N            data parallel over N processes (docs/zero.md): with --zero 1 or 2\n"
    "                       each process holds its run of the optimizer state; the figures\n"
    "                       are one process's (--rank), every process's peak listed; with\n"
    "                       --zero 3 and --offload its homes hold 1/N of each block\n"
    "                       (docs/zero_engine.md)\n"
    "  --rank R             which process's bytes (default 0)\n"
    "  --max-seq            the longest --seq at --batch that fits --memory (needed), by a\n"
    "                       search over the estimator; with --plan auto, the best plan at each\n"
    "                       T searched. Prints `max_seq N` first, then the report at T = N\n"
    "  --seq-limit N        --max-seq searches T up to N (default the model's maxT); a llama or\n"
    "                       Qwen (rotary positions) past its maxT, maxT raised; GPT-2's wpe\n"
    "                       has maxT rows: no T past it\n"
    "  --json               machine-readable output (docs/estimate.md lists the keys)\n";

/* --max-seq: the search's answer and what bounds it */
enum { MS_BUDGET, MS_MAXT, MS_LIMIT };
typedef struct {
    int on, auto_plan, limit, T, bound, maxT; /* maxT: the model's own, before any raise */
    uint64_t peak, next_peak;                 /* the peaks at T and T + 1 (0: not estimated) */
} max_seq_info;

static void fmt_bytes(char *buf, size_t n, uint64_t b) {
    double x = (double)b;
    if (b == 0) snprintf(buf, n, "0");
    else if (b < 1024) snprintf(buf, n, "%llu B", (unsigned long long)b);
    else if (x < 1048576.0) snprintf(buf, n, "%.1f KiB", x / 1024.0);
    else if (x < 1073741824.0) snprintf(buf, n, "%.1f MiB", x / 1048576.0);
    else if (x < 1099511627776.0) snprintf(buf, n, "%.2f GiB", x / 1073741824.0);
    else snprintf(buf, n, "%.2f TiB", x / 1099511627776.0);
}

static void fmt_flops(char *buf, size_t n, double f) {
    if (f >= 1e12) snprintf(buf, n, "%.2f TFLOP", f / 1e12);
    else if (f >= 1e9) snprintf(buf, n, "%.2f GFLOP", f / 1e9);
    else if (f >= 1e6) snprintf(buf, n, "%.2f MFLOP", f / 1e6);
    else snprintf(buf, n, "%.0f FLOP", f);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* A Hugging Face model directory (its config.json gives the shape). */
static int is_hf_dir(const char *p) {
    char q[4200];
    snprintf(q, sizeof q, "%s/config.json", p);
    return is_file(q);
}

/* A tier's peak: the full phase's, or the predict phase's when higher (hybrid schedule). */
static uint64_t tier_peak(const hpt_estimate *e, int t) {
    return e->peak_bytes[t] > e->predict_peak_bytes[t] ? e->peak_bytes[t] : e->predict_peak_bytes[t];
}

static const char *const k_bound[] = {"budget", "maxT", "limit"};

/* bf16_at_fp32: pred is a --matmul bf16 run's at the fp32 rates (a calibration without bf16's) */
static void print_json(const hpt_plan_opts *po, const hpt_estimate *e, uint64_t budget,
                       const hpt_plan_fit *fit, double pred, int bf16_at_fp32, const uint64_t *per,
                       const max_seq_info *ms) {
    const hpt_model_config *c = &po->cfg;
    printf("{\"version\":1,\"model\":{\"L\":%d,\"C\":%d,\"NH\":%d,\"V\":%d,\"Vp\":%d,\"maxT\":%d},",
           c->L, c->C, c->NH, c->V, c->Vp, c->maxT);
    printf("\"B\":%d,\"T\":%d,\"training\":%s,\"has_val\":%s,", po->B, po->T,
           po->training ? "true" : "false", po->has_val ? "true" : "false");
    printf("\"optimizer\":\"%s\",\"state_bits\":%d,\"state32_embeddings\":%s,",
           hpt_optim_name((hpt_optim_kind)po->adamw.optimizer), po->adamw.state_bits ? po->adamw.state_bits : 32,
           po->adamw.state32_embeddings ? "true" : "false");
    if (po->training && po->lora.r > 0) { /* docs/lora.md */
        static const char *const base[] = {"f32", "bf16", "int8", "nf4"};
        char ls[96];
        hpt_lora_name(&po->lora, ls, sizeof ls);
        printf("\"lora\":{\"spec\":\"%s\",\"targets\":\"", ls);
        for (const char *t = po->lora.targets; *t; t++) /* names: letters, digits, _ . , */
            if (*t != '"' && *t != '\\' && (unsigned char)*t >= 0x20) putchar(*t);
        printf("\",\"adapter_values\":%zu,\"base_weights\":\"%s\",\"base_home\":\"%s\"},",
               hpt_lora_num_params(&po->cfg, &po->lora),
               base[po->lora.base >= 0 && po->lora.base <= 3 ? po->lora.base : 0],
               hpt_tier_name((hpt_tier)po->lora.home));
    }
    printf("\"peak_bytes\":%llu,\"bytes\":{", (unsigned long long)e->peak_bytes[HPT_TIER_DEVICE]);
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        printf("%s\"%s\":{", t ? "," : "", hpt_tier_name((hpt_tier)t));
        for (int k = 0; k < HPT_CAT_COUNT; k++)
            printf("%s\"%s\":%llu", k ? "," : "", hpt_category_name((hpt_category)k),
                   (unsigned long long)e->bytes[t][k]);
        printf("}");
    }
    printf("},\"peak_bytes_by_tier\":{");
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        printf("%s\"%s\":%llu", t ? "," : "", hpt_tier_name((hpt_tier)t),
               (unsigned long long)e->peak_bytes[t]);
    char rb[32];
    printf("},\"attention\":\"%s\",\"recompute\":\"%s\",\"act_offload\":\"%s\","
           "\"act_compress\":\"%s\"", hpt_attention_name(po->act.attention),
           hpt_recompute_name(&po->act, rb, sizeof rb), hpt_act_offload_name(po->act.offload),
           hpt_act_compress_name(po->act.compress));
    const hpt_offload_opts *of = &po->offload;
    printf(",\"offload\":{\"params\":\"%s\",\"grads\":\"%s\",\"optim\":\"%s\","
           "\"max_active_layers\":%d,\"prefetch\":%d,\"fused_update\":%s,\"grad_home\":\"%s\","
           "\"embeddings\":\"%s\"}",
           hpt_tier_name(of->params), hpt_tier_name(of->grads), hpt_tier_name(of->optim),
           of->max_active, of->prefetch, of->fused ? "true" : "false",
           hpt_grad_home_name((hpt_grad_home)of->grad_home),
           hpt_embeddings_name((hpt_embeddings)of->embeddings));
    printf(",\"activation_bytes\":%llu,\"num_params\":%llu,", (unsigned long long)e->activation_bytes,
           (unsigned long long)e->num_params);
    if (po->sched.kind == HPT_SCHEDULE_HYBRID) {
        printf("\"schedule\":\"hybrid\",\"predictor\":\"%s\",\"checks\":%s,\"check_weights\":\"%s\","
               "\"predict_peak_bytes_by_tier\":{", hpt_predictor_name((hpt_predictor_kind)po->sched.predictor),
               (po->sched.check_every > 0) ? "true" : "false", hpt_weights_name((hpt_weights)po->sched.check_weights));
        for (int t = 0; t < HPT_TIER_COUNT; t++)
            printf("%s\"%s\":%llu", t ? "," : "", hpt_tier_name((hpt_tier)t),
                   (unsigned long long)e->predict_peak_bytes[t]);
        printf("},");
    }
    printf("\"flops_per_token\":%.6g,\"flops_per_token_fwd\":%.6g,\"tokens_per_step\":%llu,"
           "\"flops_per_step\":%.6g,", e->flops_per_token, e->flops_per_token_fwd,
           (unsigned long long)e->tokens_per_step, e->flops_per_token * (double)e->tokens_per_step);
    if (budget) {
        printf("\"budget_bytes\":%llu,\"fits\":%s,\"max_batch\":%d,\"max_batch_peak_bytes\":%llu,"
               "\"max_seq\":%d,\"max_seq_peak_bytes\":%llu,\"min_peak_bytes\":%llu",
               (unsigned long long)budget, fit->fits ? "true" : "false", fit->max_B,
               (unsigned long long)fit->max_B_peak_bytes, fit->max_T,
               (unsigned long long)fit->max_T_peak_bytes, (unsigned long long)fit->min_peak_bytes);
    } else {
        printf("\"budget_bytes\":0,\"fits\":true");
    }
    if (ms->on)
        printf(",\"max_seq_search\":{\"limit\":%d,\"bound\":\"%s\",\"plan\":\"%s\","
               "\"model_maxT\":%d,\"next_peak_bytes\":%llu}", ms->limit, k_bound[ms->bound],
               ms->auto_plan ? "auto" : "given", ms->maxT, (unsigned long long)ms->next_peak);
    for (int t = HPT_TIER_HOST; t < HPT_TIER_COUNT; t++)
        if (po->budget_bytes[t])
            printf(",\"%s_budget_bytes\":%llu,\"%s_fits\":%s", hpt_tier_name((hpt_tier)t),
                   (unsigned long long)po->budget_bytes[t], hpt_tier_name((hpt_tier)t),
                   tier_peak(e, t) <= po->budget_bytes[t] ? "true" : "false");
    if (pred >= 0) printf(",\"predicted_step_s\":%.6g", pred);
    if (pred >= 0 && bf16_at_fp32) printf(",\"predicted_bf16_at_fp32_rates\":true");
    if (pred < 0 && po->training && po->plan.device) { /* no GPU calibration: floors, labelled */
        double fl = e->flops_per_token * (double)e->tokens_per_step;
        printf(",\"gpu_floor_s\":[");
        for (int i = 0; hpt_gpu_rates_known(i); i++) {
            const hpt_gpu_rates *g = hpt_gpu_rates_known(i);
            printf("%s{\"gpu\":\"%s\",\"fp32\":%.6g,\"tf32\":%.6g,\"bf16\":%.6g}", i ? "," : "", g->name,
                   fl / (g->fp32_tflops * 1e12), fl / (g->tf32_tflops * 1e12), fl / (g->bf16_tflops * 1e12));
        }
        printf("]");
    }
    int procs = po->procs > 1 ? po->procs : 1;
    printf(",\"procs\":%d,\"rank\":%d,\"per_process_peak_bytes\":[", procs, po->rank);
    for (int q = 0; q < procs; q++) printf("%s%llu", q ? "," : "", (unsigned long long)per[q]);
    printf("]}\n");
}

static void print_text(const char *model, const hpt_plan_opts *po, const hpt_estimate *e,
                       uint64_t budget, const hpt_plan_fit *fit) {
    const hpt_model_config *c = &po->cfg;
    char b[HPT_TIER_COUNT][32], x[32], y[32];
    char how[96];
    snprintf(how, sizeof how, "training (forward, backward, %s with %d-bit state%s)",
             hpt_optim_name((hpt_optim_kind)po->adamw.optimizer), po->adamw.state_bits ? po->adamw.state_bits : 32,
             po->adamw.state32_embeddings ? ", wte and wpe 32-bit" : "");
    printf("estimate: %s: %s L=%d C=%d NH=%d NKV=%d V=%d (Vp %d) maxT=%d; B=%d T=%d; %s%s\n",
           model, cli_arch_label(c->arch), c->L, c->C, c->NH,
           c->NKV ? c->NKV : c->NH, c->V, c->Vp, c->maxT, po->B, po->T,
           po->training ? how : "forward only", po->has_val ? ", with a validation loader" : "");
    /* on a GPU the host tier is pinned memory (cudaHostAlloc), which the copies need */
    printf("\n  %-10s %12s %12s %12s %18s\n", "category", "device",
           po->plan.device ? "pinned host" : "host", "disk", "device bytes");
    for (int k = 0; k < HPT_CAT_COUNT; k++) {
        for (int t = 0; t < HPT_TIER_COUNT; t++) fmt_bytes(b[t], sizeof b[t], e->bytes[t][k]);
        printf("  %-10s %12s %12s %12s %18llu\n", hpt_category_name((hpt_category)k), b[0], b[1],
               b[2], (unsigned long long)e->bytes[HPT_TIER_DEVICE][k]);
    }
    for (int t = 0; t < HPT_TIER_COUNT; t++) fmt_bytes(b[t], sizeof b[t], e->peak_bytes[t]);
    printf("  %-10s %12s %12s %12s %18llu\n", "peak", b[0], b[1], b[2],
           (unsigned long long)e->peak_bytes[HPT_TIER_DEVICE]);
    if (po->sched.kind == HPT_SCHEDULE_HYBRID) {
        for (int t = 0; t < HPT_TIER_COUNT; t++) fmt_bytes(b[t], sizeof b[t], e->predict_peak_bytes[t]);
        printf("  %-10s %12s %12s %12s %18llu   (hybrid schedule, %s predictor: no gradients, no\n"
               "  %-10s %12s %12s %12s %18s    B-sized arena; %s; docs/predict.md)\n", "predict",
               b[0], b[1], b[2], (unsigned long long)e->predict_peak_bytes[HPT_TIER_DEVICE],
               hpt_predictor_name((hpt_predictor_kind)po->sched.predictor), "", "", "", "", "",
               !(po->sched.check_every > 0) ? "no checks"
               : po->sched.check_weights == HPT_WEIGHTS_Q8 ? "int8 checks" : "fp32 checks");
    }
    printf("\n");
    char rb[32];
    printf("  activations: attention %s, recompute %s, offload %s, compress %s\n",
           hpt_attention_name(po->act.attention), hpt_recompute_name(&po->act, rb, sizeof rb),
           hpt_act_offload_name(po->act.offload), hpt_act_compress_name(po->act.compress));
    if (hpt_offload_active(&po->offload))
        printf("  offload engine: blocks' params on %s, grads on %s, optimizer state on %s; %d "
               "blocks' params on the device, prefetch %d%s, weights %s, grad home %s, "
               "embeddings %s (docs/offload.md)\n",
               hpt_tier_name(po->offload.params), po->offload.fused ? "the device (fused: two "
               "blocks)" : hpt_tier_name(po->offload.grads), hpt_tier_name(po->offload.optim),
               po->offload.max_active, po->offload.prefetch,
               po->offload.fused ? ", fused update" : "",
               hpt_block_weights_name((hpt_block_weights)po->offload.weights),
               hpt_grad_home_name((hpt_grad_home)po->offload.grad_home),
               hpt_embeddings_name((hpt_embeddings)po->offload.embeddings));
    printf("  the peak is the sum: everything is allocated at setup or at the first forward and\n"
           "  kept; acts is the activation arena planned from buffer lifetimes\n");
    cli_budgets bs;
    cli_budgets_given(&po->plan, &bs);
    char bt[512];
    if (budget) {
        cli_budget_text(&po->plan, &bs, HPT_TIER_DEVICE, bt, sizeof bt);
        if (fit->fits) {
            fmt_bytes(y, sizeof y, budget - e->peak_bytes[HPT_TIER_DEVICE]);
            printf("  budget     %s: fits, %s to spare", bt, y);
            if (fit->max_B > po->B) printf("; up to --batch %d fits", fit->max_B);
            printf("\n");
        } else {
            printf("  budget     %s: does NOT fit", bt);
            if (fit->max_B > 0) {
                fmt_bytes(y, sizeof y, fit->max_B_peak_bytes);
                printf("; fits with --batch %d (peak %s)", fit->max_B, y);
            }
            if (fit->max_T > 0) {
                fmt_bytes(y, sizeof y, fit->max_T_peak_bytes);
                printf("%s --seq %d (peak %s)", fit->max_B > 0 ? " or" : "; fits with", fit->max_T, y);
            }
            if (fit->max_B == 0) {
                if (fit->max_T_B1 > fit->max_T) {
                    fmt_bytes(y, sizeof y, fit->max_T_B1_peak_bytes);
                    printf("%s --batch 1 --seq %d (peak %s)", fit->max_T > 0 ? " or" : "; fits with",
                           fit->max_T_B1, y);
                } else if (fit->max_T == 0) { /* then nothing fits at B = 1 either */
                    fmt_bytes(y, sizeof y, fit->min_peak_bytes);
                    printf("; even --batch 1 --seq 1 needs %s: the model's weights, gradients and "
                           "optimizer state are too large for the device in this plan", y);
                }
            }
            printf("\n");
        }
    } else {
        printf("  budget     none given (--memory SIZE checks one)\n");
    }
    if (budget && po->plan.device)
        printf("  on the GPU the CUDA context's fixed overhead (measured when the run starts) and "
               "%llu MiB\n  for kernels loaded later come out of the budget before the device "
               "tier's share\n", (unsigned long long)(HPT_DEVICE_LAZY_RESERVE >> 20));
    for (int t = HPT_TIER_HOST; t < HPT_TIER_COUNT; t++) { /* --host-memory, --disk-memory */
        if (!po->budget_bytes[t]) continue;
        uint64_t peak = tier_peak(e, t);
        cli_budget_text(&po->plan, &bs, t, bt, sizeof bt);
        if (peak <= po->budget_bytes[t]) {
            fmt_bytes(y, sizeof y, po->budget_bytes[t] - peak);
            printf("  budget     %s: fits, %s to spare\n", bt, y);
        } else {
            fmt_bytes(y, sizeof y, peak);
            printf("  budget     %s: does NOT fit (the %s tier's peak is %s)\n", bt,
                   hpt_tier_name((hpt_tier)t), y);
        }
    }
    char pb[2048];
    if (hpt_plan_print(&po->plan, pb, sizeof pb) == HPT_OK)
        printf("  plan       %s\n", *pb ? pb : "(defaults)");
    printf("  parameters %.2fM (%llu, wte padding included)\n", (double)e->num_params / 1e6,
           (unsigned long long)e->num_params);
    if (po->training && po->lora.r > 0) {
        static const char *const base[] = {"fp32", "bf16", "int8", "nf4"};
        size_t n = hpt_lora_num_params(&po->cfg, &po->lora);
        printf("  lora       %.3fM adapter values trained (%.2f%% of the base); the base frozen "
               "(%s, its blocks on the %s)\n", (double)n / 1e6,
               100.0 * (double)n / (double)e->num_params,
               base[po->lora.base >= 0 && po->lora.base <= 3 ? po->lora.base : 0],
               hpt_tier_name((hpt_tier)po->lora.home));
    }
    fmt_flops(x, sizeof x, e->flops_per_token);
    fmt_flops(y, sizeof y, e->flops_per_token_fwd);
    if (po->training && po->lora.r > 0)
        printf("  FLOPs/token %s (forward %s, backward without the frozen weights' gradients, "
               "the adapters)\n", x, y);
    else if (po->training)
        printf("  FLOPs/token %s (3 x forward %s; matmuls and causal attention)\n", x, y);
    else
        printf("  FLOPs/token %s (forward; matmuls and causal attention)\n", y);
    fmt_flops(x, sizeof x, e->flops_per_token * (double)e->tokens_per_step);
    printf("  tokens/step %llu (accum x B x T), %s per optimizer step\n",
           (unsigned long long)e->tokens_per_step, x);
}

/* --max-seq's lines: `max_seq N` (a line of its own, for scripts), then what bounds N. */
static void print_max_seq(const hpt_plan_opts *po, const max_seq_info *ms, uint64_t peak) {
    cli_budgets bs;
    cli_budgets_given(&po->plan, &bs);
    char bt[512], x[32], y[32];
    cli_budget_text(&po->plan, &bs, HPT_TIER_DEVICE, bt, sizeof bt);
    printf("max_seq %d\n", ms->T);
    const char *how = ms->auto_plan ? " (--plan auto: the best plan searched at each T)" : "";
    if (ms->T == 0) {
        printf("  even --seq 1 at --batch %d does not fit %s%s\n", po->B, bt, how);
        return;
    }
    fmt_bytes(x, sizeof x, peak);
    printf("  the longest --seq at --batch %d that fits %s%s: peak %s", po->B, bt, how, x);
    if (ms->bound == MS_BUDGET && ms->next_peak) {
        fmt_bytes(y, sizeof y, ms->next_peak);
        printf("; --seq %d needs %s\n", ms->T + 1, y);
    } else if (ms->bound == MS_BUDGET) {
        printf("; at --seq %d no plan of the search fits\n", ms->T + 1);
    } else if (ms->bound == MS_LIMIT) {
        printf("; the search's limit (--seq-limit %d) reached\n", ms->limit);
    } else if (po->cfg.arch == HPT_ARCH_GPT2) {
        printf("; the model's maxT %d reached: GPT-2's learned position table (wpe) has maxT "
               "rows, no longer sequence\n", ms->maxT);
    } else {
        printf("; the model's maxT %d reached: rotary positions have no hard limit, --seq-limit "
               "N searches past it\n", ms->maxT);
    }
    if (ms->T > ms->maxT)
        printf("  past the model's maxT %d: the run needs a model whose maxT is at least %d (a "
               "SHAPE's T=%d, or config.json's max_position_embeddings); its rotary tables "
               "(maxT rows) are counted\n", ms->maxT, ms->T, ms->T);
    printf("  the report is at --seq %d\n\n", ms->T);
}

/* A budget given and not met: in text, what would fit (--plan auto, with --offload-dir or
 * --allow lossy when they make a plan fit: cli_fit_hints); then the reason on stderr and exit
 * status 1. 0 when every budget given is met. */
static int not_fit(const hpt_plan_opts *po, const hpt_estimate *e, uint64_t budget,
                   const hpt_plan_fit *fit, int json, int lossy) {
    int bad = budget && !fit->fits ? HPT_TIER_DEVICE : -1;
    for (int t = HPT_TIER_HOST; t < HPT_TIER_COUNT && bad < 0; t++)
        if (po->budget_bytes[t] && tier_peak(e, t) > po->budget_bytes[t]) bad = t;
    if (bad < 0) return 0;
    cli_budgets bs;
    cli_budgets_given(&po->plan, &bs);
    if (!json && po->training) { /* --plan auto plans training runs only */
        hpt_plan_opts o = *po;
        cli_budgets hb = bs;
        cli_budgets_defaults(&o.plan, &hb);
        cli_fit_hints(&o, &hb, lossy, 0, "  what fits: ", stdout);
    }
    char bt[512], p[32], over[32];
    cli_budget_text(&po->plan, &bs, bad, bt, sizeof bt);
    fmt_bytes(p, sizeof p, tier_peak(e, bad));
    fmt_bytes(over, sizeof over, tier_peak(e, bad) - po->budget_bytes[bad]);
    fflush(stdout);
    const char *src = bt + strlen(hpt_tier_name((hpt_tier)bad)) + 1; /* "22.35 GiB (given: ...)" */
    return cli_error("estimate: does not fit the %s budget, %s: the peak %s passes it by %s%s",
                     hpt_tier_name((hpt_tier)bad), src, p, over,
                     json || !po->training ? "" : " (what fits: above)");
}

/* --max-seq: the longest T (ms->T, 0: none) at po's batch that fits the device budget, in
 * po's plan by the estimator's fit search, or with --plan auto the best plan searched at each
 * T; po is then set at that T (hpt_plan_at_seq: a rotary model's maxT raised past its own). */
static int find_max_seq(hpt_plan_opts *po, uint64_t budget, int auto_plan, int lossy,
                        long tokens, int seq_limit, max_seq_info *ms) {
    if (!budget)
        return cli_usage_error("estimate", "--max-seq needs --memory SIZE (the device budget the "
                               "sequence must fit)");
    if (tokens)
        return cli_usage_error("estimate", "--max-seq searches --seq: --tokens-per-step does not "
                               "apply");
    ms->auto_plan = auto_plan;
    ms->maxT = po->cfg.maxT;
    ms->limit = seq_limit ? seq_limit : po->cfg.maxT;
    if (ms->limit > po->cfg.maxT && po->cfg.arch == HPT_ARCH_GPT2)
        return cli_usage_error("estimate", "--seq-limit %d passes the model's maxT %d: GPT-2's "
                               "learned position table (wpe) has maxT rows, no position past it",
                               ms->limit, po->cfg.maxT);
    hpt_status s = HPT_OK;
    if (auto_plan) {
        if (!po->training) return cli_usage_error("estimate", "--plan auto plans training runs");
        int rc = cli_auto_max_seq("estimate", po, lossy, ms->limit, &ms->T);
        if (rc) return rc;
    } else {
        s = hpt_plan_max_seq(po, budget, ms->limit, &ms->T, &ms->peak);
        if (s != HPT_OK) return cli_lib_error(s, "estimate");
    }
    if (ms->T == 0) return 0;
    ms->bound = ms->T < ms->limit ? MS_BUDGET : ms->limit == ms->maxT ? MS_MAXT : MS_LIMIT;
    hpt_plan_opts next;
    hpt_estimate e;
    if (!auto_plan && ms->T < ms->limit && hpt_plan_at_seq(po, ms->T + 1, &next) == HPT_OK &&
        hpt_plan_estimate(&next, &e) == HPT_OK)
        ms->next_peak = e.peak_bytes[HPT_TIER_DEVICE];
    s = hpt_plan_at_seq(po, ms->T, po);
    return s == HPT_OK ? 0 : cli_lib_error(s, "estimate");
}

static const struct option longopts[] = {
    CLI_TRAIN_LONGOPTS, CLI_AUTO_LONGOPTS, {"json", 0, 0, 'J'}, {"forward-only", 0, 0, 'F'},
    {"procs", 1, 0, 'P' + 2000}, {"rank", 1, 0, 'R' + 2000}, {"max-seq", 0, 0, 'M' + 2000},
    {"seq-limit", 1, 0, 'Q' + 2000}, {"val-split", 1, 0, 'V' + 2000}, {"shuffle", 1, 0, 'U' + 2000},
    {"data-seed", 1, 0, 'D' + 2000}, {0, 0, 0, 0}};

/* recorded: argv holds a run record's flags before those given (cli_resume_argv) */
static int estimate(int argc, char **argv, int recorded) {
    const char *model = NULL, *resume = NULL;
    hpt_plan_opts po = hpt_plan_defaults();
    int json = 0, opt_rc = 0, c, auto_plan = 0, lossy = 0, verbose = 0, seq_limit = 0;
    max_seq_info ms;
    memset(&ms, 0, sizeof ms);
    long lv, tokens = 0;
    double dv;
    while ((c = cli_getopt("estimate", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        int r = 0;
        switch (c) {
        case 'm': model = optarg; break;
        case 'v': po.has_val = 1; break;
        case 'V' + 2000: /* train's --val-split: a validation loader (docs/data.md) */
            r = cli_parse_float("estimate", "--val-split", optarg, 0, 0.99, &dv);
            po.has_val = dv > 0;
            break;
        case 'U' + 2000: case 'D' + 2000: break; /* the rows' order: no effect on memory */
        case 'b': r = cli_parse_long("estimate", "--batch", optarg, 1, 1 << 20, &lv); po.B = (int)lv; break;
        case 't': r = cli_parse_long("estimate", "--seq", optarg, 1, 1 << 20, &lv); po.T = (int)lv; break;
        case 'r': resume = optarg; break;
        case 'J': json = 1; break;
        case 'M' + 2000: ms.on = 1; break;
        case 'Q' + 2000:
            r = cli_parse_long("estimate", "--seq-limit", optarg, 1, HPT_MAX_SEQ_LIMIT, &lv);
            seq_limit = (int)lv;
            break;
        case 'P' + 2000: r = cli_parse_long("estimate", "--procs", optarg, 1, 64, &lv); po.procs = (int)lv; break;
        case 'R' + 2000: r = cli_parse_long("estimate", "--rank", optarg, 0, 63, &lv); po.rank = (int)lv; break;
        case CLI_OPT_AUTO_PLAN:
            if (strcmp(optarg, "auto")) return cli_usage_error("estimate", "--plan: only 'auto' (got '%s')", optarg);
            auto_plan = 1;
            break;
        case CLI_OPT_ALLOW:
            if (strcmp(optarg, "lossy")) return cli_usage_error("estimate", "--allow: only 'lossy' (got '%s')", optarg);
            lossy = 1;
            break;
        case CLI_OPT_TOKENS: r = cli_parse_long("estimate", "--tokens-per-step", optarg, 1, 1L << 40, &tokens); break;
        case CLI_OPT_VERBOSE: verbose = 1; break;
        case 'F': po.training = 0; break;
        /* every technique choice and the budgets: the plan, parsed as train parses it */
        case CLI_OPT_PLAN: r = cli_plan_flag("estimate", &po.plan, cli_optname(), optarg); break;
        /* accepted for symmetry with train, checked as train checks them, no effect on memory */
        case 'n': r = cli_parse_long("estimate", "--steps", optarg, 1, 1L << 40, &lv); break;
        case 'l': r = cli_parse_float("estimate", "--lr", optarg, 0, 10, &dv); break;
        case 'L': r = cli_parse_float("estimate", "--min-lr", optarg, 0, 10, &dv); break;
        case 'w': r = cli_parse_long("estimate", "--warmup", optarg, 0, 1L << 40, &lv); break;
        case 'g': r = cli_parse_float("estimate", "--grad-clip", optarg, 0, 1e9, &dv); break;
        case 'e': r = cli_parse_long("estimate", "--eval-every", optarg, 0, 1L << 40, &lv); break;
        case 'E': r = cli_parse_long("estimate", "--val-batches", optarg, 1, 1 << 20, &lv); break;
        case 'S': r = cli_parse_long("estimate", "--save-every", optarg, 0, 1L << 40, &lv); break;
        case 'x': r = cli_parse_long("estimate", "--seed", optarg, 0, 0x7fffffffffffffffL, &lv); break;
        case 'j': r = cli_parse_long("estimate", "--threads", optarg, 1, 1024, &lv); break;
        case 'A': r = cli_parse_long("estimate", "--stop-at", optarg, 1, 1L << 40, &lv); break;
        case 'd': case 's': case 'o': case 'q': break;
        }
        if (r) return r;
    }
    if (optind < argc) return cli_unexpected_argument("estimate", argv[optind]);
    if (!model && !resume) return cli_usage_error("estimate", "--model (or --resume) is required");
    /* validation data and the disk directory are the run's business, not the estimate's */
    hpt_plan_env env = {.training = po.training, .has_val = -1, .need_disk_dir = 0};
    int rc0 = cli_plan_check("estimate", &po.plan, &env);
    if (rc0) return rc0;
    uint64_t budget = po.budget_bytes[HPT_TIER_DEVICE];

    char path[4096];
    const char *ckpt = NULL;
    if (resume && !recorded) { /* a state saved before records: model.bin's header, the shape */
        snprintf(path, sizeof path, "%s/model.bin", resume);
        if (!is_file(path))
            return cli_error("estimate: --resume %s: %s is missing (it holds the run's shape); "
                             "pass --model with the shape instead", resume, path);
        ckpt = path;
    } else if (is_file(model) || is_hf_dir(model)) {
        ckpt = model;
    }
    hpt_status s;
    if (ckpt) {
        s = hpt_model_read_config(ckpt, &po.cfg);
        model = ckpt;
    } else {
        s = hpt_model_config_parse(model, &po.cfg);
        if (s != HPT_OK && (strchr(model, '/') || strstr(model, ".bin")))
            return cli_error("estimate: cannot open %s: no such file", model);
    }
    if (s != HPT_OK) return cli_lib_error(s, "estimate");
    if ((lossy || tokens) && !auto_plan)
        return cli_usage_error("estimate", "--allow and --tokens-per-step are for --plan auto");
    if (ms.on) {
        int rc = find_max_seq(&po, budget, auto_plan, lossy, tokens, seq_limit, &ms);
        if (rc) return rc;
        if (ms.T == 0) { /* nothing to report at: the answer and why */
            if (json) printf("{\"version\":1,\"max_seq\":0,\"budget_bytes\":%llu,\"fits\":false}\n",
                             (unsigned long long)budget);
            else print_max_seq(&po, &ms, 0);
            fflush(stdout);
            return cli_error("estimate: --max-seq: even --seq 1 at --batch %d does not fit the device "
                             "budget%s", po.B, auto_plan ? " in any plan of the search" : "");
        }
    } else if (seq_limit) {
        return cli_usage_error("estimate", "--seq-limit is for --max-seq");
    }
    if (auto_plan) { /* the chosen plan replaces the techniques; its estimate follows */
        if (!po.training) return cli_usage_error("estimate", "--plan auto plans training runs");
        int rc = cli_auto_plan("estimate", &po, tokens, lossy, verbose, json ? stderr : stdout);
        if (rc) return rc;
        budget = po.budget_bytes[HPT_TIER_DEVICE];
        if (!json) printf("\n");
    }
    hpt_estimate e;
    s = hpt_plan_estimate(&po, &e);
    if (s != HPT_OK) return cli_lib_error(s, "estimate");
    if (ms.on && !json) print_max_seq(&po, &ms, e.peak_bytes[HPT_TIER_DEVICE]);
    hpt_plan_fit fit;
    memset(&fit, 0, sizeof fit);
    fit.fits = 1;
    if (budget) {
        s = hpt_plan_fit_budget(&po, budget, &fit);
        if (s != HPT_OK) return cli_lib_error(s, "estimate");
    }
    if (ms.on) { /* the search's answer, past maxT where asked, and the plan's at each T */
        fit.max_T = ms.T;
        fit.max_T_peak_bytes = ms.T ? e.peak_bytes[HPT_TIER_DEVICE] : 0;
    }
    /* the cost model's step time, when this machine has a cached calibration (docs/planner.md) */
    double pred = -1;
    char cdev[64] = "";
    int bf16_at_fp32 = 0; /* --matmul bf16 predicted at the fp32 rates (an older calibration) */
    if (po.training) {
        hpt_calibration cal;
        hpt_cost cost;
        /* only from a calibration of the device the run is for: a CPU's says nothing of a GPU */
        if (cli_device_calibration(po.plan.device, &cal) &&
            hpt_calibration_for_device(&cal, po.plan.device) && hpt_plan_cost(&po, &cal, &cost) == HPT_OK)
            pred = cost.total_s, snprintf(cdev, sizeof cdev, "%s", cal.device),
            bf16_at_fp32 = cost.bf16_at_fp32;
    }
    /* every process's device peak (ZeRO's runs differ by rank) */
    uint64_t per[64];
    int procs = po.procs > 1 ? po.procs : 1;
    for (int q = 0; q < procs; q++) {
        hpt_plan_opts pq = po;
        hpt_estimate eq;
        pq.rank = q;
        s = hpt_plan_estimate(&pq, &eq);
        if (s != HPT_OK) return cli_lib_error(s, "estimate");
        per[q] = eq.peak_bytes[HPT_TIER_DEVICE];
    }
    if (json) {
        print_json(&po, &e, budget, &fit, pred, bf16_at_fp32, per, &ms);
    }
    else {
        print_text(model, &po, &e, budget, &fit);
        if (pred >= 0 && po.plan.device)
            printf("  predicted step %.3f s (cost model, calibration: %s, hptrain calibrate --device "
                   "cuda's rates)\n", pred, cdev);
        else if (pred >= 0) printf("  predicted step %.3f s (cost model, this CPU's calibration: hptrain "
                              "calibrate's rates)\n", pred);
        if (pred >= 0 && bf16_at_fp32)
            printf("  --matmul bf16 costed at the fp32 GEMM and attention rates: the calibration has "
                   "no bf16 rates (hptrain calibrate%s measures them)\n", po.plan.device ? " --device cuda" : "");
        else if (po.training && po.plan.device) {
            printf("  step time  not predicted: no calibration of a GPU here (hptrain calibrate "
                   "--device cuda on it makes one)\n");
            cli_gpu_floor(e.flops_per_token * (double)e.tokens_per_step, "             ", stdout);
        }
    }
    if (procs > 1 && !json) {
        printf("  per process (%d processes, --zero %d; device peak):", procs, po.zero > 0 ? po.zero : 0);
        for (int q = 0; q < procs; q++) printf(" %s%.1f MiB", q ? "| " : "", (double)per[q] / 1048576.0);
        printf("\n");
    }
    return not_fit(&po, &e, budget, &fit, json, lossy);
}

int cmd_estimate(int argc, char **argv) {
    cli_resume rs;
    memset(&rs, 0, sizeof rs);
    int rc = cli_resume_argv("estimate", longopts, &argc, &argv, &rs);
    if (rc < 0) rc = estimate(argc, argv, rs.text != NULL);
    cli_resume_free(&rs);
    return rc;
}
