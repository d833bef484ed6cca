/* cmd_train.c: `hptrain train`: the trainer with a live progress line, a JSONL log, a
 * summary and a memory report. Ctrl-C (SIGINT) and SIGTERM (schedulers, `kill`) stop after the
 * current step and save (with --save); exit status 130 and 143. A --memory or --host-memory
 * beyond the machine's RAM is warned about with the numbers (it would not protect the run from
 * the kernel's out-of-memory killer). */
#include "cli.h"
#include "train_args.h"

#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HPT_MIN_D(a, b) ((a) < (b) ? (a) : (b))

static volatile sig_atomic_t g_stop;
static atomic_int g_armed; /* the training loop runs: SIGINT/SIGTERM stop it (stop_signals) */
static int g_shared_fail; /* every rank knows the run failed (no MPI_Abort needed) */
static uint64_t g_rss0; /* RSS when the command began, before hptrain allocated anything */

/* SIGINT and SIGTERM are never delivered to a computing thread: oneDNN's JIT GEMM kernels
 * (Debian 12's libdnnl 2.7; fixed upstream in 3.11, oneDNN issue 4845) point rsp into the heap
 * while they run, so a signal frame pushed there corrupts the heap (seen here: "corrupted size
 * vs. prev_size" in about one SIGTERM in three at one thread). The signals are blocked in the
 * main thread before any other thread exists (every later thread, OpenMP's and MPI's, inherits
 * the mask), and this thread takes them with sigwait: before the loop is armed, the default
 * action (the process ends, as before a run starts); then a stop after the current step. */
static void *signal_thread(void *arg) {
    sigset_t set = *(sigset_t *)arg;
    free(arg);
    for (;;) {
        int sig;
        if (sigwait(&set, &sig) != 0) continue;
        if (!atomic_load(&g_armed)) {
            sigset_t one;
            sigemptyset(&one);
            sigaddset(&one, sig);
            signal(sig, SIG_DFL);
            pthread_sigmask(SIG_UNBLOCK, &one, NULL);
            raise(sig); /* ends the process */
        }
        g_stop = sig == SIGTERM ? 3 : 1;
    }
    return NULL;
}

/* Blocks SIGINT and SIGTERM in this thread and starts signal_thread; call before any thread. */
static void stop_signals(void) {
    sigset_t *set = malloc(sizeof *set);
    if (!set) return;
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigset_t old;
    pthread_sigmask(SIG_BLOCK, set, &old);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &at, signal_thread, set) != 0) { /* signals as they were */
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        free(set);
    }
    pthread_attr_destroy(&at);
}

static const char k_help[] =
    "usage: hptrain train --model PATH|DIR|SHAPE --data GLOB [options]\n"
    "       hptrain train --resume DIR [--steps N] [options that may change]\n"
    "\n"
    "Trains a model of any registered architecture on llm.c token shards, from an llm.c\n"
    "checkpoint, a Hugging Face model directory or a shape with random initialisation (SHAPE:\n"
    "@SHAPES@).\n"
    "\n"
    "  --model PATH|DIR|SHAPE  llm.c checkpoint file, Hugging Face model directory (config.json\n"
    "                       and safetensors) or shape (not needed with --resume)\n"
    "  --data GLOB          training shards (quote the glob)\n"
    "  --val GLOB           validation shards; evaluated every --eval-every steps and at the end\n"
    "  --val-split F        instead of --val: whole documents of --data, about F of its tokens\n"
    "                       (chosen by --data-seed), are the validation set (docs/data.md)\n"
    "  --shuffle on|off     on (default): the training rows in a new seeded order each epoch;\n"
    "                       off: the shards' windows in order\n"
    "  --data-seed N        the seed of --val-split and --shuffle (default 1234)\n"
    "  --batch B            sequences per micro-batch (default 4)\n"
    "  --accum K            micro-batches per optimizer step (default 1): gradients summed and\n"
    "                       scaled by 1/K, the update of one batch of K*B; memory of B only\n"
    "  --seq T              tokens per sequence (default 64; at most the model's maxT)\n"
    "  --steps N            total optimizer steps (default 100)\n"
    "  --lr X               peak learning rate (default 6e-4)\n"
    "  --min-lr X           final learning rate of the cosine schedule (default lr/10)\n"
    "  --warmup N           linear warmup steps (default 10)\n"
    "  --weight-decay X     weight decay on matrices (default 0.1; sgd: 0, coupled as PyTorch)\n"
    "  --grad-clip X        global gradient-norm clip, 0 to disable (default 1.0)\n"
    "  --eval-every N       validation interval in steps (default 100)\n"
    "  --val-batches N      batches per validation (default 10)\n"
    "  --save DIR           at the end: the weights into DIR (GPT-2: llm.c's model.bin; a run\n"
    "                       from a Hugging Face directory or of another family: a Hugging Face\n"
    "                       directory), the training state (state.bin) and the run's flags\n"
    "                       (run.json) into DIR, or into DIR.state beside a Hugging Face DIR\n"
    "                       (docs/formats.md)\n"
    "  --save-every N       also every N steps\n"
    "  --save-dtype K       a Hugging Face save's weights: f32 or bf16 (rounded to nearest even;\n"
    "                       default: the --model directory's dtype, else f32)\n"
    "  --resume DIR         continue the run saved in DIR (its state: DIR.state/ or DIR/) as it\n"
    "                       was (its flags: run.json), saving into DIR unless --save is given;\n"
    "                       flags given again must agree, but for --steps (extend the run), the\n"
    "                       cadence and outputs (--eval-every, --val-batches, --save,\n"
    "                       --save-every, --log, --trace, --quiet, --stop-at), --threads, the\n"
    "                       budgets (--memory, --host-memory, --disk-memory, --offload-dir) and\n"
    "                       the exact techniques (--offload, --max-active-layers, --prefetch,\n"
    "                       --recompute, --act-offload; --accum and --zero with the processes:\n"
    "                       --accum x processes as saved) (docs/formats.md)\n"
    "  --force              train on shards whose tokenizer (tokenizer.bin beside them) is not\n"
    "                       the model's, with a warning (refused otherwise)\n"
    "  --stop-at N          stop after step N of the run and save (split a run across sessions)\n"
    "  --log FILE.jsonl     one JSON object per step (under mpirun rank 0's; a FILE with %r:\n"
    "                       every rank's, %r replaced by the rank)\n"
    "  --trace FILE         record every allocation, free and arena buffer; write the trace as\n"
    "                       JSON, or CSV when FILE ends in .csv (see hptrain profile); under\n"
    "                       mpirun rank 0's, or every rank's with %r in FILE, as for --log\n"
    "  --device cpu|cuda[:N] where to compute (default cpu; cuda: docs/cuda.md)\n"
    "  --memory SIZE        device memory budget, e.g. 512MB, 4GB, 1.5GiB (default: none)\n"
    "  --host-memory SIZE   host-tier budget (default: none)\n"
    "  --disk-memory SIZE   disk-tier budget (default: none)\n"
    "  --offload-dir DIR    directory of the disk tier's files\n"
    "  --attention K        flash (default: memory linear in T) or plain (saves the (T,T)\n"
    "                       probabilities; the reference)\n"
    "  --head-chunk N       compute the loss N token rows at a time and keep only (N, Vp)\n"
    "                       logits (recomputed in backward: one more head GEMM); 0: all (default)\n"
    "  --mlp-tile N         run each block's MLP N token rows at a time and keep none of its\n"
    "                       (B*T, FF) intermediates (recomputed per tile in backward: one more\n"
    "                       fc GEMM); 0: untiled (default; docs/activations.md)\n"
    "  --matmul P           fp32 (default) or bf16: each linear layer's GEMMs (forward, dX, dW;\n"
    "                       the head's) and flash attention's products round their two operands\n"
    "                       to bf16 (nearest even) and sum and write fp32; weights, activations\n"
    "                       and optimizer stay fp32; lossy; not with --attention plain\n"
    "                       (docs/design.md, \"Matmul precision\")\n"
    "  --recompute P        none (default), selective (ln1, ln2, GELU output; probabilities\n"
    "                       with plain attention), every:N (keep every N-th block's input) or\n"
    "                       full (keep each block's input); exact (docs/activations.md)\n"
    "  --act-offload K      none (default), host or disk (needs --offload-dir): saved\n"
    "                       activations leave the device after each block's forward and come\n"
    "                       back before its backward; exact; with every:N and full, the kept\n"
    "                       block inputs move (docs/activations.md)\n"
    "  --act-compress K     none (default), int8 (per-row absmax scale) or bf16: saved\n"
    "                       activations stored compressed (lossy, docs/activations.md)\n"
    CLI_HELP_OFFLOAD
    CLI_HELP_AUTO
    "  --optimizer K        adamw (default), lion, adam-mini or sgd (docs/optimizers.md; Lion\n"
    "                       wants a 3-10x smaller --lr than AdamW, SGD a far larger one)\n"
    "  --state-bits N       optimizer state in 32 (default) or 8 bits (block-wise quantised)\n"
    "  --state-32bit-embeddings  with --state-bits 8: keep wte and wpe state in 32 bits\n"
    "  --schedule K         full (default): every step back-propagates; hybrid: the predict\n"
    "                       schedule (docs/predict.md): WARMUP, FULL, then PREDICT phases whose\n"
    "                       steps move the weights by predicted updates (no data, no backward,\n"
    "                       gradients and activations released) and CORRECT steps after each\n"
    "  --warmup-steps N     hybrid: ordinary steps before any prediction (default 50; not the\n"
    "                       learning-rate --warmup)\n"
    "  --full-steps N       hybrid: ordinary steps that fit the predictor before each predict\n"
    "                       phase (default 20)\n"
    "  --max-predict-steps N  hybrid: the longest predict phase (default 20); each phase's\n"
    "                       length grows with the loss model's confidence above the threshold\n"
    "  --confidence X       hybrid: predict only when the confidence (1 - recent relative loss\n"
    "                       prediction error / band) is at least X in [0, 1] (default 0.5)\n"
    "  --correct-steps N    hybrid: ordinary steps after each predict phase (default 2)\n"
    "  --predictor K        hybrid: adam (AdamW's m/(sqrt(v)+eps) under the lr schedule; needs\n"
    "                       AdamW with 32-bit state) or linear (per-parameter linear fit of the\n"
    "                       recent weights; the optimizer state moves to the host while\n"
    "                       predicting) (default adam), or jump (every FULL round keeps\n"
    "                       --jump-snapshots K weights --jump-stride S steps apart, then one\n"
    "                       predict step jumps along a per-weight --jump-fit linear, quadratic\n"
    "                       or exp fit --jump-horizon H steps ahead, scaled by a line search\n"
    "                       on --jump-search-batches held-out validation batches after the\n"
    "                       evaluation's, confirmed on 2 more or rolled back; --jump-state\n"
    "                       keep, reset or zero-m: the moments after it; jumping stops after\n"
    "                       2 jumps in a row worth less than --jump-min-gain real steps;\n"
    "                       defaults S 40, K 5, H 200, linear, 4, keep, 2; docs/predict.md)\n"
    "  --check-every K      hybrid: a forward on the first validation batch every K predict\n"
    "                       steps (needs --val); 0: none (default); a phase that runs its\n"
    "                       course is measured on its first CORRECT step either way\n"
    "  --check-weights W    hybrid: the checks' weights: fp32 (default: the model's) or int8\n"
    "                       (per-output-channel int8 copies of the current weights, made for\n"
    "                       each check and freed after it: less memory than fp32 checks at long\n"
    "                       --seq, more at short ones; slower; docs/predict.md)\n"
    "  --band X             hybrid: relative loss excess over the prediction that ends a predict\n"
    "                       phase early (default 0.05)\n"
    "  --rollback-bound X   hybrid: excess beyond which the weights roll back to the phase's\n"
    "                       start (default 0.2)\n"
    "  --seed S             initialisation seed (default 1337)\n"
    "  --threads N          threads (default: all cores)\n"
    "  --zero 0|1|2|3       data parallel (mpirun -np N hptrain train ...): 0, every process holds\n"
    "                       the state, gradients summed in rank order; 1, each process keeps the\n"
    "                       optimizer state of its ~1/N of the parameters and updates them; 2,\n"
    "                       also the summed gradients; one process with --accum N and --zero 0\n"
    "                       computes the same bits (docs/zero.md); 3, with --offload: each\n"
    "                       process's homes hold 1/N of every block (docs/zero_engine.md)\n"
    "  --pack stream|on|off examples of masked shards (hptrain tokenize of *.jsonl;\n"
    "                       docs/packing.md): stream (default), windows of the token stream;\n"
    "                       on, whole examples packed per row, positions and attention per\n"
    "                       example; off, one example per row, padded. tok/s counts real tokens\n"
    "  --lora r=N,alpha=X,dropout=P[,rslora]\n"
    "                       fine-tune LoRA adapters over a frozen base (PEFT's defaults: r 8,\n"
    "                       alpha 8, dropout 0); --save writes them in PEFT's files (docs/lora.md)\n"
    "  --lora-targets LIST  the adapted layers: llama q,k,v,o,gate,up,down; GPT-2 c_attn,\n"
    "                       attn.c_proj, c_fc, mlp.c_proj (c_proj: both); default every one\n"
    "  --base-weights K     LoRA: the frozen base's block matrices stored as f32 (default),\n"
    "                       bf16, int8 (one scale per row) or nf4 (QLoRA's 4-bit NormalFloat,\n"
    "                       CPU), widened a block at a time; with bf16, int8 or nf4 the\n"
    "                       embedding and head in bf16, widened 2048 vocabulary rows at a time\n"
    "  --base-home T        LoRA: the frozen base's stored blocks on T = device (default), host\n"
    "                       or disk (--offload-dir), read-only, each brought in whole when used\n"
    "  --base-prefetch 0|1  LoRA, base on the host or disk: 1 (default) a thread reads the next\n"
    "                       block while one computes (one more staging block on the device);\n"
    "                       0 each block read when used\n"
    "  --adapter DIR        start LoRA from saved adapters (PEFT's files): their r, alpha,\n"
    "                       dropout and layers replace --lora's; a fresh optimizer\n"
    "  --quiet              the summary only: no setup lines, no progress line, the memory\n"
    "                       report in one line (warnings and errors still print)\n"
    "  --record-rates       with disk homes: the engine's own disk rates and the compute's loss\n"
    "                       beside its transfers (the fastest step after the first) into the calibration\n"
    "                       file, which the planner's cost model then uses (docs/planner.md)\n";

static void fmt_bytes(char *buf, size_t n, uint64_t b) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / 1073741824.0);
    else snprintf(buf, n, "%.1f MiB", (double)b / 1048576.0);
}

static void fmt_time(char *buf, size_t n, double s) {
    if (s < 0 || !isfinite(s)) snprintf(buf, n, "?");
    else if (s < 60) snprintf(buf, n, "%.0fs", s);
    else if (s < 3600) snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* The accounted peaks per tier against their budgets and the process's peak RSS: a table
 * with the RSS explained, or (brief: --quiet's summary) one line. */
static void memory_report(const hpt_mem *mem, int brief) {
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    char b[32];
    if (brief) {
        fmt_bytes(b, sizeof b, st.peak_bytes[HPT_TIER_DEVICE]);
        fprintf(stderr, "memory: device peak %s", b);
        if (st.budget_bytes[HPT_TIER_DEVICE]) {
            fmt_bytes(b, sizeof b, st.budget_bytes[HPT_TIER_DEVICE]);
            fprintf(stderr, " of budget %s", b);
        }
        for (int t = HPT_TIER_DEVICE + 1; t < HPT_TIER_COUNT; t++) {
            if (!st.peak_bytes[t]) continue;
            fmt_bytes(b, sizeof b, st.peak_bytes[t]);
            fprintf(stderr, ", %s peak %s", t == HPT_TIER_HOST ? "host" : "disk", b);
            if (st.budget_bytes[t]) {
                fmt_bytes(b, sizeof b, st.budget_bytes[t]);
                fprintf(stderr, " of budget %s", b);
            }
        }
        fmt_bytes(b, sizeof b, hpt_rss_peak_bytes());
        fprintf(stderr, "; process peak RSS %s\n", b);
        return;
    }
    fprintf(stderr, "memory (device tier, accounted by hptrain)\n");
    fprintf(stderr, "  %-10s %12s\n", "category", "at peak");
    for (int c = 0; c < HPT_CAT_COUNT; c++) {
        fmt_bytes(b, sizeof b, st.peak_live_bytes[HPT_TIER_DEVICE][c]);
        fprintf(stderr, "  %-10s %12s\n", hpt_category_name((hpt_category)c), b);
    }
    fmt_bytes(b, sizeof b, st.peak_bytes[HPT_TIER_DEVICE]);
    fprintf(stderr, "  %-10s %12s", "peak", b);
    if (st.budget_bytes[HPT_TIER_DEVICE]) {
        fmt_bytes(b, sizeof b, st.budget_bytes[HPT_TIER_DEVICE]);
        fprintf(stderr, "  of budget %s", b);
    }
    /* the other tiers' high-water marks: what --offload and --act-offload moved off the device */
    for (int t = HPT_TIER_DEVICE + 1; t < HPT_TIER_COUNT; t++) {
        if (!st.peak_bytes[t]) continue;
        fmt_bytes(b, sizeof b, st.peak_bytes[t]);
        fprintf(stderr, "\n  %-10s %12s", t == HPT_TIER_HOST ? "host peak" : "disk peak", b);
        if (st.budget_bytes[t]) {
            fmt_bytes(b, sizeof b, st.budget_bytes[t]);
            fprintf(stderr, "  of budget %s", b);
        }
    }
    uint64_t rss = hpt_rss_peak_bytes();
    fmt_bytes(b, sizeof b, rss);
    fprintf(stderr, "\n  process peak RSS %s (includes code, libraries and allocator overhead)\n", b);
    if (g_rss0 && rss > g_rss0) {
        char b0[32];
        fmt_bytes(b0, sizeof b0, g_rss0);
        fmt_bytes(b, sizeof b, rss - g_rss0);
        double pct = 100.0 * (double)st.peak_bytes[HPT_TIER_DEVICE] / (double)(rss - g_rss0);
        fprintf(stderr, "  RSS growth above baseline explained by accounted bytes: %.0f%% (RSS grew %s "
                "above the %s at start%s)\n", pct, b, b0, pct < 100.0 ? "; the rest: the libraries' "
                "own buffers (oneDNN, OpenMP, libc), allocator overhead, hptrain's bookkeeping" : "");
    }
}

/* What the offload engine moved per step and how much of its time the compute thread waited. */
static void offload_report(const hpt_model *m, int64_t steps) {
    hpt_offload_stats st;
    hpt_model_offload_stats(m, &st);
    if (steps < 1 || (st.io_s == 0.0 && st.update_s == 0.0 && st.loads == 0)) return;
    fprintf(stderr, "offload: per step: host in %.1f MiB out %.1f MiB, disk in %.1f MiB out %.1f MiB; "
            "%.1f block loads of %.1f acquisitions; worker I/O %.3f s, updates %.3f s; compute-thread "
            "updates %.3f s; compute waited %.3f s (%.0f%% of the worker's time hidden)\n",
            (double)st.bytes_in[HPT_TIER_HOST] / 1048576.0 / (double)steps,
            (double)st.bytes_out[HPT_TIER_HOST] / 1048576.0 / (double)steps,
            (double)st.bytes_in[HPT_TIER_DISK] / 1048576.0 / (double)steps,
            (double)st.bytes_out[HPT_TIER_DISK] / 1048576.0 / (double)steps,
            (double)st.loads / (double)steps, (double)st.acquires / (double)steps, st.io_s / (double)steps,
            st.update_s / (double)steps, st.compute_update_s / (double)steps, st.wait_s / (double)steps,
            st.io_s + st.update_s > 0 ? 100.0 * (1.0 - HPT_MIN_D(st.wait_s, st.io_s + st.update_s) /
                                                     (st.io_s + st.update_s)) : 100.0);
    /* by direction, each transfer timed where it ran (the first step included) */
    double ds = (double)steps;
    if (st.disk_read_s > 0 || st.disk_write_s > 0 || st.host_copy_s > 0)
        fprintf(stderr, "offload: per step: disk read %.1f MiB in %.3f s (%.2f GB/s), disk write %.1f "
                "MiB in %.3f s (%.2f GB/s), host copies %.1f MiB in %.3f s; %.3f s of disk transfers "
                "beside the compute; compute waited on disk reads %.3f s, disk writes %.3f s, host "
                "copies %.3f s, updates %.3f s\n", (double)st.disk_read_bytes / 1048576.0 / ds,
                st.disk_read_s / ds, st.disk_read_s > 0 ? (double)st.disk_read_bytes / st.disk_read_s / 1e9 : 0,
                (double)st.disk_write_bytes / 1048576.0 / ds, st.disk_write_s / ds,
                st.disk_write_s > 0 ? (double)st.disk_write_bytes / st.disk_write_s / 1e9 : 0,
                (double)st.host_copy_bytes / 1048576.0 / ds, st.host_copy_s / ds, st.disk_beside_s / ds,
                st.wait_disk_read_s / ds, st.wait_disk_write_s / ds, st.wait_host_s / ds,
                st.wait_update_s / ds);
}

/* path with its first %r replaced by this process's rank, into buf; without %r, path on rank
 * 0 and NULL on the others (one file, rank 0's). */
static const char *per_rank_path(const char *path, char *buf, size_t n) {
    const char *pr = path ? strstr(path, "%r") : NULL;
    if (!pr) return hpt_dist_rank() == 0 ? path : NULL;
    snprintf(buf, n, "%.*s%d%s", (int)(pr - path), path, hpt_dist_rank(), pr + 2);
    return buf;
}

/* Writes the recorded timeline with the run's metadata (--trace); returns 0 or prints why not. */
static int write_trace(const char *path, hpt_mem *mem, const hpt_trace_meta *known) {
    hpt_trace_meta m = *known;
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        m.budget_bytes[t] = st.budget_bytes[t];
        m.accounted_peak_bytes[t] = st.peak_bytes[t];
    }
    m.threads = hpt_get_threads();
    m.procs = hpt_dist_size();
    m.rank = hpt_dist_rank();
    m.rss_baseline_bytes = g_rss0;
    m.rss_peak_bytes = hpt_rss_peak_bytes();
    size_t n;
    const hpt_mem_event *ev = hpt_mem_events(mem, &n);
    hpt_status s = hpt_trace_write(path, &m, ev, n);
    if (s != HPT_OK) return cli_lib_error(s, "writing the trace");
    fprintf(stderr, "trace: %zu events written to %s (hptrain profile %s --out FILE.svg)\n", n, path, path);
    return 0;
}

/* Physical memory and what the kernel says is available now (/proc/meminfo), in bytes. */
static void machine_memory(uint64_t *total, uint64_t *avail) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    *total = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
    *avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) *avail = (uint64_t)kb * 1024;
    if (f) fclose(f);
}

/* The device tier is RAM on the CPU, like the host tier: budgets past the machine's memory
 * cannot be honoured by it. */
static void warn_budgets(const hpt_plan *p) {
    uint64_t total, avail;
    machine_memory(&total, &avail);
    uint64_t dev = p->budget_bytes[HPT_TIER_DEVICE], host = p->budget_bytes[HPT_TIER_HOST];
    if (!total || dev + host <= total) return;
    char b1[32], b2[32], b3[32];
    fmt_bytes(b1, sizeof b1, (double)(dev + host));
    fmt_bytes(b2, sizeof b2, (double)total);
    fmt_bytes(b3, sizeof b3, (double)avail);
    fprintf(stderr, "hptrain: warning: %s %s is more than this machine's memory (%s, %s available "
            "now): the budget cannot keep the run from being killed for memory\n",
            host ? "--memory plus --host-memory" : "--memory", b1, b2, b3);
}

static int train_main(int argc, char **argv);
enum { OPT_VAL_SPLIT = 1100, OPT_SHUFFLE, OPT_DATA_SEED }; /* this command's own options */

enum { OPT_SAVE_DTYPE = 1140, OPT_FORCE }; /* this command's own long options */

/* The files a save wrote and the command that resumes from them (the state's directory:
 * hpt_trainer_state_dir); done: the run reached --steps (a larger one trains on). */
static void print_saved(const hpt_trainer *tr, const hpt_train_opts *o, int done) {
    char files[8192];
    if (hpt_trainer_saved_files(tr, files, sizeof files) == HPT_OK) fprintf(stderr, "saved %s\n", files);
    if (o->run_record) { /* the run's flags are in its record */
        fprintf(stderr, "%s: hptrain train --resume %s%s\n", done ? "train further with" : "resume with",
                o->save_dir, done ? " --steps N (N larger than now)" : "");
        return;
    }
    char accum[32] = "";
    if (o->accum > 1) snprintf(accum, sizeof accum, " --accum %d", o->accum);
    fprintf(stderr, "%s: hptrain train --resume %s --data '%s' --batch %d --seq %d%s --steps %lld "
            "--save %s%s\n", done ? "train further with" : "resume with", hpt_trainer_state_dir(tr),
            o->data, o->B, o->T, accum, (long long)o->steps, o->save_dir,
            done ? " (a larger --steps)" : "");
}

/* Under mpirun each process is one rank of a data-parallel run (docs/zero.md): rank 0 prints
 * the progress, the summary and the log; every rank prints its errors. A rank that fails alone
 * aborts the job (hpt_dist_finalize), so no other waits for it. */
int cmd_train(int argc, char **argv) {
    stop_signals(); /* first: before MPI's and OpenMP's threads */
    hpt_status s = hpt_dist_init();
    if (s != HPT_OK) return cli_lib_error(s, "train: starting MPI");
    int rc = train_main(argc, argv);
    /* a stop by signal (130, 143) is every rank's, after the same step: no abort */
    hpt_dist_finalize(rc != 0 && rc != 130 && rc != 143 && !g_shared_fail);
    return rc;
}

/* The data's order and --val-split's sets (docs/data.md), in one line. */
static void print_data(const hpt_trainer *tr, const hpt_train_opts *o) {
    hpt_data_split v, t;
    hpt_trainer_data_split(tr, 1, &v);
    hpt_trainer_data_split(tr, 0, &t);
    if (o->val_split > 0 && !o->val)
        fprintf(stderr, "hptrain: data: validation %zu of %zu documents, %.1f%% of the tokens "
                "(--val-split %g, --data-seed %llu)\n", v.docs, v.docs_total,
                v.tokens_total ? 100.0 * (double)v.tokens / (double)v.tokens_total : 0.0,
                o->val_split, (unsigned long long)o->data_seed);
    if (o->shuffle && t.tokens)
        fprintf(stderr, "hptrain: data: %llu training tokens, rows shuffled each epoch "
                "(--shuffle on, --data-seed %llu)\n", (unsigned long long)t.tokens,
                (unsigned long long)o->data_seed);
    else if (o->shuffle) /* a resumed walk */
        fprintf(stderr, "hptrain: data: the checkpoint's position is the walk in order (saved with "
                "--shuffle off, or before shuffling): the run continues it\n");
}

static const struct option k_longopts[] = {
    CLI_TRAIN_LONGOPTS, CLI_AUTO_LONGOPTS, {"trace", 1, 0, 'P'},
    {"record-rates", 0, 0, CLI_OPT_RECORD_RATES}, {"adapter", 1, 0, 'a'},
    {"save-dtype", 1, 0, OPT_SAVE_DTYPE}, {"force", 0, 0, OPT_FORCE},
    {"val-split", 1, 0, OPT_VAL_SPLIT}, {"shuffle", 1, 0, OPT_SHUFFLE},
    {"data-seed", 1, 0, OPT_DATA_SEED}, {0, 0, 0, 0}};

int cli_train_parse(int argc, char **argv, train_args *a) {
    memset(a, 0, sizeof *a);
    hpt_train_opts o = hpt_train_defaults();
    o.shuffle = 1; /* the command's default (the library's is the walk in order) */
    int min_lr_set = 0;
    int opt_rc = 0;
    int c;
    long lv;
    double dv;
    if (!(a->flags = malloc((size_t)(argc + 1) * sizeof *a->flags))) return cli_error("out of memory");
    optind = 0; /* a fresh scan: the command line, or a record's (train_resume.c) */
    while ((c = cli_getopt("train", argc, argv, k_longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        a->flags[a->n_flags++] = (cli_flag){cli_optname(), optarg};
        int r = 0;
        switch (c) {
        case 'm': o.model = optarg; break;
        case 'd': o.data = optarg; break;
        case 'v': o.val = optarg; break;
        case 'b': r = cli_parse_long("train", "--batch", optarg, 1, 1 << 20, &lv); o.B = (int)lv; break;
        case 't': r = cli_parse_long("train", "--seq", optarg, 1, 1 << 20, &lv); o.T = (int)lv; break;
        case 'n': r = cli_parse_long("train", "--steps", optarg, 1, 1L << 40, &lv); o.steps = lv; break;
        case 'l': r = cli_parse_float("train", "--lr", optarg, 0, 10, &dv); o.lr = (float)dv; break;
        case 'L': r = cli_parse_float("train", "--min-lr", optarg, 0, 10, &dv); o.min_lr = (float)dv; min_lr_set = 1; break;
        case 'w': r = cli_parse_long("train", "--warmup", optarg, 0, 1L << 40, &lv); o.warmup = lv; break;
        case 'g': r = cli_parse_float("train", "--grad-clip", optarg, 0, 1e9, &dv); o.grad_clip = (float)dv; break;
        case 'e': r = cli_parse_long("train", "--eval-every", optarg, 0, 1L << 40, &lv); o.eval_every = lv; break;
        case 'E': r = cli_parse_long("train", "--val-batches", optarg, 1, 1 << 20, &lv); o.val_batches = (int)lv; break;
        case 's': o.save_dir = optarg; break;
        case 'S': r = cli_parse_long("train", "--save-every", optarg, 0, 1L << 40, &lv); o.save_every = lv; break;
        case 'r': o.resume = optarg; break;
        case 'a': o.adapter = optarg; break;
        case 'o': a->log_path = optarg; break;
        case 'P': a->trace_path = optarg; break;
        case 'x': r = cli_parse_long("train", "--seed", optarg, 0, 0x7fffffffffffffffL, &lv); o.seed = (uint64_t)lv; break;
        case 'j': r = cli_parse_long("train", "--threads", optarg, 1, 1024, &a->threads); break;
        case 'q': a->quiet = 1; break;
        case CLI_OPT_PLAN: r = cli_plan_flag("train", &o.plan, cli_optname(), optarg); break;
        case 'A': r = cli_parse_long("train", "--stop-at", optarg, 1, 1L << 40, &a->stop_at); break;
        case CLI_OPT_AUTO_PLAN:
            if (strcmp(optarg, "auto")) return cli_usage_error("train", "--plan: only 'auto' (got '%s')", optarg);
            a->auto_plan = 1;
            break;
        case CLI_OPT_ALLOW:
            if (strcmp(optarg, "lossy")) return cli_usage_error("train", "--allow: only 'lossy' (got '%s')", optarg);
            a->lossy = 1;
            break;
        case CLI_OPT_TOKENS: r = cli_parse_long("train", "--tokens-per-step", optarg, 1, 1L << 40, &a->tokens); break;
        case CLI_OPT_VERBOSE: a->verbose = 1; break;
        case CLI_OPT_RECORD_RATES: a->record_rates = 1; break;
        case OPT_FORCE: a->force = 1; break;
        case OPT_SAVE_DTYPE:
            if (!strcmp(optarg, "f32")) o.save_dtype = HPT_DTYPE_F32;
            else if (!strcmp(optarg, "bf16")) o.save_dtype = HPT_DTYPE_BF16;
            else return cli_usage_error("train", "--save-dtype must be f32 or bf16, not '%s'", optarg);
            break;
        case OPT_VAL_SPLIT: r = cli_parse_float("train", "--val-split", optarg, 0, 0.99, &dv); o.val_split = dv; break;
        case OPT_DATA_SEED: r = cli_parse_long("train", "--data-seed", optarg, 0, 0x7fffffffffffffffL, &lv); o.data_seed = (uint64_t)lv; break;
        case OPT_SHUFFLE:
            if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                return cli_usage_error("train", "--shuffle: on or off (got '%s')", optarg);
            o.shuffle = !strcmp(optarg, "on");
            break;
        }
        if (r) return r;
    }
    if (optind < argc) return cli_unexpected_argument("train", argv[optind]);
    if (!min_lr_set) o.min_lr = o.lr / 10.0f;
    a->o = o;
    return -1;
}

void cli_train_args_free(train_args *a) {
    free(a->flags);
    a->flags = NULL;
    a->n_flags = 0;
}

static int train_run(train_args *a, cli_resume *rs);

static int train_main(int argc, char **argv) {
    g_rss0 = hpt_rss_bytes();
    train_args a;
    cli_resume rs;
    memset(&rs, 0, sizeof rs);
    int rc = cli_train_parse(argc, argv, &a);
    if (rc < 0 && a.o.resume) rc = cli_resume_merge(&a, &rs); /* the recorded run */
    if (rc < 0) rc = train_run(&a, &rs);
    cli_train_args_free(&a);
    cli_resume_free(&rs);
    return rc;
}

static int train_run(train_args *a, cli_resume *rs) {
    hpt_train_opts o = a->o;
    const char *log_path = a->log_path, *trace_path = a->trace_path;
    int quiet = a->quiet;
    long threads = a->threads, stop_at = a->stop_at, tokens = a->tokens;
    int auto_plan = a->auto_plan, lossy = a->lossy, verbose = a->verbose, record_rates = a->record_rates;
    int force = a->force;
    if (!o.data) return cli_usage_error("train", "--data is required");
    if (!o.model && !o.resume) return cli_usage_error("train", "--model (or --resume) is required");
    if (o.val && o.val_split > 0) return cli_usage_error("train", "give --val or --val-split, not both");
    const int lead = hpt_dist_rank() == 0;
    /* a log or trace path with %r: every rank writes its own, %r replaced by its rank;
     * without: rank 0's only */
    char rank_log[4096], rank_trace[4096];
    log_path = per_rank_path(log_path, rank_log, sizeof rank_log);
    trace_path = per_rank_path(trace_path, rank_trace, sizeof rank_trace);
    if (!lead) quiet = 1;
    if (threads) hpt_set_threads((int)threads);

    if ((lossy || tokens) && !auto_plan)
        return cli_usage_error("train", "--allow and --tokens-per-step are for --plan auto");
    /* the estimator's view of the run: for --plan auto and for the doctor after a refusal */
    hpt_plan_opts po = hpt_plan_defaults();
    int have_shape = o.model && (hpt_model_config_parse(o.model, &po.cfg) == HPT_OK ||
                                 hpt_model_read_config(o.model, &po.cfg) == HPT_OK);
    po.B = o.B, po.T = o.T, po.has_val = o.val || o.val_split > 0, po.plan = o.plan;
    if (cli_check_shards_tokenizer("train", o.data, o.model, have_shape ? po.cfg.V : 0, force)) return 1;
    if (auto_plan) {
        if (o.resume) /* a record's plan is resumed (train_resume.c): here there is none */
            return cli_usage_error("train", "--plan auto: %s/run.json, with the plan chosen when "
                                   "the run began, is missing (a state saved before runs were "
                                   "recorded): give the plan's flags", o.resume);
        if (!have_shape) return cli_error("train: --plan auto: cannot read the shape of %s", o.model);
        /* --quiet: the chosen plan in one line, not the search's report */
        FILE *af = quiet ? fopen("/dev/null", "w") : NULL;
        int rc = cli_auto_plan("train", &po, tokens, lossy, verbose, af ? af : stderr);
        if (af) fclose(af);
        if (rc) return rc;
        o.B = po.B;
        o.plan = po.plan;
        char pb[2048];
        if (quiet && lead && hpt_plan_print(&o.plan, pb, sizeof pb) == HPT_OK)
            fprintf(stderr, "plan auto: --batch %d --seq %d%s%s\n", o.B, o.T, *pb ? " " : "", pb);
    }
    /* the cached calibration is this CPU's: a GPU run's rates would mislead its predictions */
    if (record_rates && o.plan.device)
        return cli_usage_error("train", "--record-rates records into this CPU's calibration; a "
                               "--device cuda run's rates are not its");
    if (o.save_dir) { /* DIR/run.json beside every save: --resume DIR alone continues the run */
        train_args ran = *a;
        ran.o = o; /* --plan auto's choice */
        if (!(rs->record = cli_run_record(&ran, rs))) return cli_error("out of memory");
        o.run_record = rs->record;
    }
    hpt_plan_env env = {.training = 1, .has_val = o.val || o.val_split > 0, .need_disk_dir = 1};
    int rc0 = cli_plan_check("train", &o.plan, &env);
    if (rc0) return rc0;
    if (hpt_device_ready(o.plan.device) != HPT_OK) return cli_error("%s", hpt_last_error());
    warn_budgets(&o.plan);
    hpt_mem *mem;
    hpt_status s = hpt_mem_create(&mem);
    if (s != HPT_OK) return cli_lib_error(s, "starting");
    if (trace_path) hpt_mem_record(mem, 1);
    hpt_trace_meta tmeta = hpt_trace_meta_defaults();
    tmeta.B = o.B;
    tmeta.T = o.T;
    tmeta.has_val = o.val || o.val_split > 0;
    hpt_plan traced = o.plan; /* the plan as run, for profile's estimates; the directory aside
                               * (a path is no estimate's business, and may hold spaces) */
    traced.offload_dir = NULL;
    tmeta.has_plan = hpt_plan_print(&traced, tmeta.plan, sizeof tmeta.plan) == HPT_OK;
    if (!tmeta.has_plan) tmeta.plan[0] = '\0';
    hpt_trainer *tr;
    s = hpt_trainer_create(mem, &o, &tr);
    if (hpt_dist_size() > 1 && hpt_dist_any(s != HPT_OK)) { /* every rank gets here */
        g_shared_fail = 1;
        if (s == HPT_OK) {
            hpt_trainer_free(tr);
            hpt_mem_destroy(mem);
            return cli_error("train: another process failed to start (its error is above)");
        }
    }
    if (s != HPT_OK) {
        /* the breakdown of what was allocated when the budget ran out (a refusal before any
         * allocation carries its own estimate-based breakdown in the error line) */
        hpt_mem_stats st;
        hpt_mem_get_stats(mem, &st);
        if (s == HPT_ERR_OOM && st.n_allocs > 0) memory_report(mem, 0);
        int rc;
        if (s == HPT_ERR_OOM && st.n_allocs == 0 && have_shape) {
            /* the whole plans that fit first: the error stays the last line */
            char why[4096];
            snprintf(why, sizeof why, "%s", hpt_last_error());
            cli_auto_advice("train", &po, stderr);
            rc = cli_error("train: %s", *why ? why : hpt_status_str(s));
        } else {
            rc = cli_lib_error(s, "train");
        }
        hpt_model_config shape;
        if (trace_path && o.model && hpt_model_config_parse(o.model, &shape) == HPT_OK) {
            tmeta.cfg = shape;
            tmeta.num_params = hpt_model_config_num_params(&shape);
        }
        if (trace_path) write_trace(trace_path, mem, &tmeta);
        hpt_mem_destroy(mem);
        return rc;
    }
    FILE *log = NULL;
    if (log_path && !(log = fopen(log_path, "w"))) {
        hpt_trainer_free(tr);
        hpt_mem_destroy(mem);
        return cli_error("cannot write the log %s", log_path);
    }
    const hpt_model_config *cfg = hpt_model_get_config(hpt_trainer_model(tr));
    tmeta.cfg = *cfg;
    tmeta.num_params = hpt_model_num_params(hpt_trainer_model(tr));
    if (!quiet) { /* the setup lines: --quiet prints the summary only */
        fprintf(stderr, "hptrain: %s L=%d C=%d NH=%d V=%d maxT=%d, %.2fM parameters; %zu training "
                "tokens; B=%d T=%d accum=%d, %d threads%s\n",
                cli_arch_label(cfg->arch), cfg->L, cfg->C, cfg->NH, cfg->V, cfg->maxT,
                (double)hpt_model_num_params(hpt_trainer_model(tr)) / 1e6,
                hpt_trainer_train_tokens(tr), o.B, o.T, o.accum, hpt_get_threads(),
                hpt_trainer_start_step(tr) ? " (resumed)" : "");
        {
            char rb[32], ab[32];
            fmt_bytes(ab, sizeof ab, hpt_model_activation_bytes(cfg, o.B, o.T, &o.act));
            fprintf(stderr, "hptrain: attention %s, recompute %s, act-offload %s, act-compress %s: "
                    "activation arena %s\n", hpt_attention_name(o.act.attention),
                    hpt_recompute_name(&o.act, rb, sizeof rb), hpt_act_offload_name(o.act.offload),
                    hpt_act_compress_name(o.act.compress), ab);
        }
        {
            const hpt_adamw_opts *ao = hpt_trainer_optim_opts(tr);
            char sb[32];
            int lora = o.lora.r > 0; /* the adapters' state alone (the base is frozen) */
            fmt_bytes(sb, sizeof sb, lora ? hpt_optim_lora_state_bytes(cfg, &o.lora, ao)
                                          : hpt_optim_state_bytes(cfg, ao));
            fprintf(stderr, "hptrain: optimizer %s, %d-bit state%s: %s of optimizer state%s\n",
                    hpt_optim_name((hpt_optim_kind)ao->optimizer), ao->state_bits ? ao->state_bits : 32,
                    ao->state32_embeddings ? " (wte, wpe in 32 bits)" : "", sb,
                    lora ? " (the LoRA adapters')" : "");
        }
        if (o.sched.kind == HPT_SCHEDULE_HYBRID)
            fprintf(stderr, "hptrain: hybrid schedule: warmup %lld, full %lld, predict up to %lld at "
                    "confidence >= %g, correct %lld, predictor %s, checks %s%lld%s, band %g, "
                    "rollback %g\n",
                    (long long)o.sched.warmup_steps, (long long)o.sched.full_steps,
                    (long long)o.sched.max_predict_steps, (double)o.sched.confidence,
                    (long long)o.sched.correct_steps, hpt_predictor_name((hpt_predictor_kind)o.sched.predictor),
                    o.sched.check_every ? "every " : "", (long long)o.sched.check_every,
                    !o.sched.check_every ? ""
                    : o.sched.check_weights == HPT_WEIGHTS_Q8 ? " on int8 weights" : " on fp32 weights",
                    (double)o.sched.band, (double)o.sched.rollback);
        {
            char pb[2048];
            if (hpt_plan_print(&o.plan, pb, sizeof pb) == HPT_OK)
                fprintf(stderr, "hptrain: plan: %s\n", *pb ? pb : "(defaults)");
        }
        print_data(tr, &o);
        if (hpt_trainer_start_step(tr))
            fprintf(stderr, "hptrain: resuming at step %lld of %lld\n",
                    (long long)hpt_trainer_start_step(tr), (long long)o.steps);
    }
    if (hpt_trainer_done(tr)) { /* resumed at its last step: no step, no summary of none */
        if (lead)
            fprintf(stderr, "hptrain: %s is at step %lld, the run's last (--steps %lld): nothing to "
                    "do (--steps N extends the run)\n", o.resume, (long long)hpt_trainer_start_step(tr),
                    (long long)o.steps);
        if (log) fclose(log);
        hpt_trainer_free(tr);
        hpt_mem_destroy(mem);
        return 0;
    }
    atomic_store(&g_armed, 1); /* SIGINT, SIGTERM: stop after the step (signal_thread) */
    int tty = isatty(2) && !quiet;
    int64_t every = o.steps / 20 > 0 ? o.steps / 20 : 1;
    double t_start = hpt_now(), tok_time = 0;
    int64_t tok_steps = 0;
    float last_val = NAN;
    double ema = 0.0, ema_w = 0.0; /* the progress line's smoothed loss: EMA 0.9, bias-corrected */
    int64_t phase_steps[HPT_PHASE_COUNT] = {0};
    hpt_train_progress p = {0};
    hpt_offload_stats eng0, eng_best; /* the engine's counters after the last step; the fastest step's */
    memset(&eng0, 0, sizeof eng0);
    memset(&eng_best, 0, sizeof eng_best);
    double best_ms = 1e300;
    int rc = 0;
    while (!hpt_trainer_done(tr) && !g_stop) {
        s = hpt_trainer_step(tr, &p);
        if (s != HPT_OK) { rc = cli_lib_error(s, "train"); break; }
        if (p.step > hpt_trainer_start_step(tr) + 1 && p.phase != HPT_PHASE_PREDICT) {
            tok_time += p.step_ms;
            tok_steps++;
        }
        phase_steps[p.phase]++;
        if (record_rates && p.step > hpt_trainer_start_step(tr) && p.phase != HPT_PHASE_PREDICT) {
            /* the engine's counters of the fastest step after the first (predictions are for
             * a run's fastest steps: docs/planner.md) */
            hpt_offload_stats cur;
            hpt_model_offload_stats(hpt_trainer_model(tr), &cur);
            if (p.step > hpt_trainer_start_step(tr) + 1 && p.step_ms < best_ms) {
                best_ms = p.step_ms;
                eng_best = cur;
                eng_best.disk_read_bytes -= eng0.disk_read_bytes, eng_best.disk_write_bytes -= eng0.disk_write_bytes;
                eng_best.disk_read_s -= eng0.disk_read_s, eng_best.disk_write_s -= eng0.disk_write_s;
                eng_best.disk_beside_s -= eng0.disk_beside_s, eng_best.wait_s -= eng0.wait_s;
            }
            eng0 = cur;
        }
        if (p.evaluated) last_val = p.val_loss;
        if (stop_at && p.step >= stop_at && !hpt_trainer_done(tr)) g_stop = 2;
        /* a signal seen by one process stops them all after the same step */
        if (hpt_dist_size() > 1 && hpt_dist_any(g_stop) && !g_stop) g_stop = 3;
        if (log) {
            fprintf(log, "{\"step\":%lld,\"phase\":\"%s\"", (long long)p.step,
                    hpt_phase_name((hpt_phase)p.phase));
            if (!isnan(p.loss)) fprintf(log, ",\"loss\":%.6f", (double)p.loss);
            if (p.checked) fprintf(log, ",\"checked\":true");
            if (!isnan(p.pred_loss)) fprintf(log, ",\"pred_loss\":%.6f", (double)p.pred_loss);
            if (o.sched.kind == HPT_SCHEDULE_HYBRID)
                fprintf(log, ",\"confidence\":%.4f", (double)p.confidence);
            if (p.diverged) fprintf(log, ",\"diverged\":\"%s\"", p.diverged == 2 ? "rollback" : "early");
            if (p.jumped)
                fprintf(log, ",\"jump_scales\":[%.6g,%.6g,%.6g],\"jump_gain\":%.6g,"
                        "\"jump_search_ms\":%.3f,\"jump_forwards\":%lld", p.jump_scales[0],
                        p.jump_scales[1], p.jump_scales[2], p.jump_gain, p.jump_search_ms,
                        (long long)p.jump_forwards);
            if (p.evaluated) fprintf(log, ",\"val_loss\":%.6f", (double)p.val_loss);
            if (o.loss_scale.mode != HPT_LOSS_SCALE_OFF)
                fprintf(log, ",\"loss_scale\":%.0f,\"skipped\":%d", (double)p.loss_scale, p.skipped);
            fprintf(log, ",\"lr\":%.6g", (double)p.lr);
            if (!p.skipped) fprintf(log, ",\"grad_norm\":%.6g", (double)p.grad_norm);
            if (hpt_dist_size() > 1) /* the layer's count of this process, since the start */
                fprintf(log, ",\"dist_sent_bytes\":%llu", (unsigned long long)hpt_dist_bytes_sent());
            fprintf(log, ",\"tokens_per_s\":%.1f,\"step_ms\":%.3f,"
                    "\"mem_peak_bytes\":%llu,\"rss_peak_bytes\":%llu",
                    p.tokens_per_s, p.step_ms,
                    (unsigned long long)p.mem_peak_bytes, (unsigned long long)p.rss_peak_bytes);
            /* the engine's homes, or a LoRA base off the device (its store's reads: frozen.c):
             * per tier, exactly */
            if (hpt_offload_active(&o.offload) || (o.lora.r > 0 && o.lora.home != HPT_TIER_DEVICE)) {
                hpt_mem_stats ms;
                hpt_mem_get_stats(mem, &ms);
                fprintf(log, ",\"host_peak_bytes\":%llu,\"disk_peak_bytes\":%llu",
                        (unsigned long long)ms.peak_bytes[HPT_TIER_HOST],
                        (unsigned long long)ms.peak_bytes[HPT_TIER_DISK]);
                hpt_offload_stats es; /* the engine's transfers since the start, by direction */
                hpt_model_offload_stats(hpt_trainer_model(tr), &es);
                fprintf(log, ",\"eng_disk_read_bytes\":%llu,\"eng_disk_read_s\":%.4f,"
                        "\"eng_disk_write_bytes\":%llu,\"eng_disk_write_s\":%.4f,"
                        "\"eng_host_copy_bytes\":%llu,\"eng_host_copy_s\":%.4f,\"eng_wait_s\":%.4f,"
                        "\"eng_disk_beside_s\":%.4f", (unsigned long long)es.disk_read_bytes,
                        es.disk_read_s, (unsigned long long)es.disk_write_bytes, es.disk_write_s,
                        (unsigned long long)es.host_copy_bytes, es.host_copy_s, es.wait_s,
                        es.disk_beside_s);
            }
            if (hpt_dist_size() > 1) /* the layer's count so far (checkpoints' gathers too) */
                fprintf(log, ",\"dist_sent_bytes\":%llu", (unsigned long long)hpt_dist_bytes_sent());
            fprintf(log, "}\n");
        }
        double elapsed = hpt_now() - t_start;
        double eta = elapsed / (double)(p.step - hpt_trainer_start_step(tr)) * (double)(p.total - p.step);
        char mb[32], et[32], vl[32], ls[48], sc[64] = "";
        fmt_bytes(mb, sizeof mb, p.mem_peak_bytes);
        if (!isnan(p.loss)) { /* a predicted step's loss is not measured: not in the mean */
            ema = 0.9 * ema + 0.1 * (double)p.loss;
            ema_w = 0.9 * ema_w + 0.1;
        }
        if (p.phase == HPT_PHASE_PREDICT && !p.checked) snprintf(ls, sizeof ls, "~%.4f", (double)p.pred_loss);
        else snprintf(ls, sizeof ls, "%.4f", (double)p.loss);
        if (ema_w > 0) snprintf(ls + strlen(ls), sizeof ls - strlen(ls), " (ema %.4f)", ema / ema_w);
        fmt_time(et, sizeof et, eta);
        if (o.loss_scale.mode != HPT_LOSS_SCALE_OFF)
            snprintf(sc, sizeof sc, " | scale %.0f%s, %lld skipped", (double)p.loss_scale,
                     p.skipped ? " SKIP" : "", (long long)p.skipped_total);
        /* the phase is the hybrid schedule's word: a plain run's steps are all alike */
        char ph[16] = "";
        if (o.sched.kind == HPT_SCHEDULE_HYBRID)
            snprintf(ph, sizeof ph, " %-7s", hpt_phase_name((hpt_phase)p.phase));
        if (isnan(last_val)) snprintf(vl, sizeof vl, "-");
        else snprintf(vl, sizeof vl, "%.4f", (double)last_val);
        if (tty) {
            fprintf(stderr, "\rstep %lld/%lld%s | loss %s | val %s | lr %.2e%s | %.0f tok/s | mem %s | ETA %s   ",
                    (long long)p.step, (long long)p.total, ph, ls,
                    vl, (double)p.lr, sc, p.tokens_per_s, mb, et);
            if (p.evaluated || p.step == p.total) fputc('\n', stderr);
        } else if (!quiet && (p.step % every == 0 || p.evaluated || p.step == p.total)) {
            fprintf(stderr, "step %lld/%lld%s | loss %s | val %s | lr %.2e%s | %.0f tok/s | mem %s | ETA %s\n",
                    (long long)p.step, (long long)p.total, ph, ls,
                    vl, (double)p.lr, sc, p.tokens_per_s, mb, et);
        }
    }
    if (g_stop && rc == 0) {
        fprintf(stderr, "%shptrain: %s at step %lld\n", tty ? "\n" : "",
                g_stop == 2 ? "stopped (--stop-at)" : g_stop == 3 ? "terminated (SIGTERM)"
                : "interrupted", (long long)p.step);
        if (o.save_dir) {
            s = hpt_trainer_save(tr);
            if (s != HPT_OK) rc = cli_lib_error(s, "saving");
            else if (lead)
                print_saved(tr, &o, 0); /* a LoRA run's: the adapters and lora_state.bin */
        }
        if (g_stop == 1) rc = rc ? rc : 130;
        if (g_stop == 3) rc = rc ? rc : 143;
    }
    if (log) fclose(log);
    if (rc == 0 && !g_stop && lead) {
        double total = hpt_now() - t_start;
        char tt[32];
        fmt_time(tt, sizeof tt, total);
        fprintf(stderr, "done: %lld steps in %s | final loss %.4f", (long long)(p.step - hpt_trainer_start_step(tr)),
                tt, (double)p.loss);
        if (!isnan(last_val)) fprintf(stderr, " | val loss %.4f", (double)last_val);
        if (tok_steps) fprintf(stderr, " | %.0f tok/s", (double)o.accum * hpt_dist_size() * o.B * o.T * (double)tok_steps / (tok_time / 1e3));
        fputc('\n', stderr);
        if (hpt_dist_size() > 1) /* the layer's own count: the gradients' sum, losses, flags */
            fprintf(stderr, "data parallel: %d processes, --zero %d; sent per step by rank 0: %.2f "
                    "MiB (%.3f x the parameters' fp32 bytes)\n", hpt_dist_size(), o.zero > 0 ? o.zero : 0,
                    (double)hpt_dist_bytes_sent() / (double)(p.step - hpt_trainer_start_step(tr)) / 1048576.0,
                    (double)hpt_dist_bytes_sent() / (double)(p.step - hpt_trainer_start_step(tr)) /
                    (4.0 * (double)hpt_model_num_params(hpt_trainer_model(tr))));
        if (o.loss_scale.mode != HPT_LOSS_SCALE_OFF)
            fprintf(stderr, "loss scale: %s, %.0f at the end; %lld step%s skipped (gradient overflow)\n",
                    o.loss_scale.mode == HPT_LOSS_SCALE_DYNAMIC ? "dynamic" : "fixed",
                    (double)p.loss_scale, (long long)p.skipped_total, p.skipped_total == 1 ? "" : "s");
        if (o.sched.kind == HPT_SCHEDULE_HYBRID) {
            const hpt_schedule *sc = hpt_trainer_schedule(tr);
            fprintf(stderr, "schedule: %lld warmup, %lld full, %lld predict (%lld phases, %lld ended "
                    "early, %lld rolled back), %lld correct steps\n",
                    (long long)phase_steps[HPT_PHASE_WARMUP], (long long)phase_steps[HPT_PHASE_FULL],
                    (long long)phase_steps[HPT_PHASE_PREDICT], (long long)sc->n_predict_phases,
                    (long long)sc->n_early, (long long)sc->n_rollback,
                    (long long)phase_steps[HPT_PHASE_CORRECT]);
            if (o.sched.predictor == HPT_PREDICTOR_JUMP)
                fprintf(stderr, "jumps: %lld (%lld rolled back)%s\n", (long long)sc->n_predict_phases,
                        (long long)sc->n_rollback, sc->stopped ? "; stopped: jumps no longer paid" : "");
        }
        if (o.save_dir) print_saved(tr, &o, 1);
        memory_report(mem, quiet);
        offload_report(hpt_trainer_model(tr), p.step - hpt_trainer_start_step(tr));
        if (record_rates) { /* the fastest step after the first */
            po.B = o.B, po.plan = o.plan;
            if (best_ms > 1e299) fprintf(stderr, "hptrain: --record-rates needs 2 steps or more\n");
            else if (cli_record_rates(&po, &eng_best, 1, best_ms / 1e3, stderr)) rc = 1;
        }
    }
    tmeta.steps = p.step; /* the trace ends with the run, before the teardown's frees */
    if (trace_path && write_trace(trace_path, mem, &tmeta) && rc == 0) rc = 1;
    hpt_trainer_free(tr);
    hpt_mem_destroy(mem);
    return rc;
}
