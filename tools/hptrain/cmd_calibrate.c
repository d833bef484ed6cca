/* cmd_calibrate.c: `hptrain calibrate` (this machine's rates for the cost model, cached in a
 * JSON file) and `--plan auto` of `train` and `estimate`: the budgets' defaults, the search
 * (src/plan/auto.c), and what it prints: the chosen plan as flags, its predicted peaks and step
 * time, the runners-up and why each lost. Also the plans the doctor proposes when a budget is
 * refused (cli_auto_advice). docs/planner.md. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char k_help[] =
    "usage: hptrain calibrate [--device cpu|cuda[:N]] [--offload-dir DIR] [--threads N] [--quick]\n"
    "                         [--out FILE]\n"
    "\n"
    "Measures this machine's rates for the planner's cost model (docs/planner.md): GEMM GFLOP/s\n"
    "at a step's shapes, causal attention, a read+write memory pass, each optimizer's update in\n"
    "ns per parameter (32- and 8-bit state), memcpy, and with --offload-dir the disk's O_DIRECT\n"
    "read and write. Writes them to FILE (default $HPT_CALIBRATION, else\n"
    "~/.cache/hptrain/calibration.json), which `--plan auto` and `estimate` read. Takes seconds.\n"
    "Without --device (or --device cpu) it measures this CPU (\"device\": \"cpu\", the file's top\n"
    "level), which predicts --device cpu runs only. --device cuda[:N] measures GPU N through the\n"
    "CUDA backend's ops (GEMMs at a GPU step's rows, fp32 or TF32 as HPT_CUDA_TF32 sets, attention,\n"
    "a memory pass, the fp32 updates, pinned host<->device copies; the disk is the CPU entry's) and\n"
    "keeps it under \"devices\" keyed by the GPU (\"cuda NVIDIA H200 sm_90\"), beside the CPU's,\n"
    "never replacing it; estimate and --plan auto with --device cuda then predict from it. Without\n"
    "one, no step time is predicted for a GPU, only a labelled floor at a known GPU's GEMM peaks.\n"
    "Without the CUDA backend or GPU N, --device cuda is refused: \"no CUDA device: ...\".\n"
    "\n"
    "  --device D         cpu (default), cuda or cuda:N: the device to measure\n"
    "  --offload-dir DIR  measure the disk tier there (a temporary file, removed after)\n"
    "  --threads N        threads (default: all cores; record the count training uses)\n"
    "  --quick            fewer repetitions\n"
    "  --out FILE         where to write the rates\n";

static void fmt_b(char *buf, size_t n, double b) {
    if (b == 0) snprintf(buf, n, "0");
    else if (b < 1024.0 * 1024) snprintf(buf, n, "%.1f KiB", b / 1024);
    else if (b < 1024.0 * 1024 * 1024) snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
}

static void print_calibration(FILE *f, const hpt_calibration *c) {
    fprintf(f, "  threads %d\n", c->threads);
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++) {
        fprintf(f, "  block GEMMs GFLOP/s (%d rows):", c->gemm_rows[r]);
        for (int i = 0; i < HPT_CAL_GEMM_SIZES; i++)
            fprintf(f, " C=%d fwd %.1f bwd %.1f%s", c->gemm_C[i], c->gemm_fwd_gflops[r][i],
                    c->gemm_bwd_gflops[r][i], i + 1 < HPT_CAL_GEMM_SIZES ? ";" : "\n");
    }
    fprintf(f, "  head GEMM GFLOP/s (768 -> 32768):");
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++)
        fprintf(f, " %d rows fwd %.1f bwd %.1f%s", c->gemm_rows[r], c->head_gflops[r][0],
                c->head_gflops[r][1], r + 1 < HPT_CAL_GEMM_ROWS ? ";" : "\n");
    fprintf(f, "  attention GFLOP/s (T=128): flash fwd %.1f bwd %.1f; plain fwd %.1f bwd %.1f\n",
            c->attn_gflops[0][0], c->attn_gflops[0][1], c->attn_gflops[1][0], c->attn_gflops[1][1]);
    if (c->attn512_gflops[0][0] > 0)
        fprintf(f, "  attention GFLOP/s (T=512): flash fwd %.1f bwd %.1f; plain fwd %.1f bwd %.1f\n",
                c->attn512_gflops[0][0], c->attn512_gflops[0][1], c->attn512_gflops[1][0],
                c->attn512_gflops[1][1]);
    if (c->bf16.have) { /* --matmul bf16's */
        for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++) {
            fprintf(f, "  bf16 block GEMMs GFLOP/s (%d rows):", c->gemm_rows[r]);
            for (int i = 0; i < HPT_CAL_GEMM_SIZES; i++)
                fprintf(f, " C=%d fwd %.1f bwd %.1f%s", c->gemm_C[i], c->bf16.gemm_fwd_gflops[r][i],
                        c->bf16.gemm_bwd_gflops[r][i], i + 1 < HPT_CAL_GEMM_SIZES ? ";" : "\n");
        }
        fprintf(f, "  bf16 head GEMM GFLOP/s:");
        for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++)
            fprintf(f, " %d rows fwd %.1f bwd %.1f%s", c->gemm_rows[r], c->bf16.head_gflops[r][0],
                    c->bf16.head_gflops[r][1], r + 1 < HPT_CAL_GEMM_ROWS ? ";" : "\n");
        fprintf(f, "  bf16 flash attention GFLOP/s: T=128 fwd %.1f bwd %.1f; T=512 fwd %.1f bwd %.1f\n",
                c->bf16.flash_gflops[0], c->bf16.flash_gflops[1], c->bf16.flash512_gflops[0],
                c->bf16.flash512_gflops[1]);
    } else {
        fprintf(f, "  bf16 GEMMs: not measured (--matmul bf16 is costed at the fp32 rates)\n");
    }
    for (int id = 0; id < hpt_arch_count() && id < HPT_CAL_ARCHS; id++) { /* own block rates */
        const hpt_arch_desc *d = hpt_arch_desc_of(id);
        const hpt_cal_arch *a = &c->arch[id];
        if (!d->block || a->C[0] <= 0) continue;
        int nw = 1;
        while (nw < HPT_CAL_ARCH_WIDTHS && a->C[nw] > 0) nw++;
        fprintf(f, "  %s block GEMMs GFLOP/s:", d->block);
        for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++)
            for (int i = 0; i < nw; i++)
                fprintf(f, " %d rows C=%d FF=%d fwd %.1f bwd %.1f%s", c->gemm_rows[r], a->C[i],
                        a->FF[i], a->gemm_gflops[r][i][0], a->gemm_gflops[r][i][1],
                        r + 1 < HPT_CAL_GEMM_ROWS || i + 1 < nw ? ";" : "\n");
        fprintf(f, "  %s: flash fwd %.1f bwd %.1f; plain fwd %.1f bwd %.1f; ns/element:", d->attention,
                a->attn_gflops[0][0], a->attn_gflops[0][1], a->attn_gflops[1][0], a->attn_gflops[1][1]);
        for (int k = 0; k < HPT_ARCH_MAX_OPS && d->op[k]; k++)
            fprintf(f, "%s %s %.2f / %.2f", k ? "," : "", d->op[k], a->op_ns[k][0], a->op_ns[k][1]);
        fprintf(f, " (fwd / bwd)\n");
        if (a->bf16_C0 > 0) {
            fprintf(f, "  %s bf16 block GEMMs GFLOP/s:", d->block);
            for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++)
                for (int i = 0; i < nw; i++)
                    fprintf(f, " %d rows C=%d fwd %.1f bwd %.1f%s", c->gemm_rows[r], a->C[i],
                            a->gemm_bf16_gflops[r][i][0], a->gemm_bf16_gflops[r][i][1],
                            r + 1 < HPT_CAL_GEMM_ROWS || i + 1 < nw ? ";" : "; ");
            fprintf(f, "bf16 flash fwd %.1f bwd %.1f\n", a->flash_bf16_gflops[0], a->flash_bf16_gflops[1]);
        }
    }
    fprintf(f, "  memory pass %.2f GB/s (read+write); memcpy %.2f GB/s; disk read %.2f GB/s, "
            "write %.2f GB/s%s\n", c->mem_gbps, c->host_copy_gbps, c->disk_read_gbps,
            c->disk_write_gbps, c->disk_read_gbps > 0 ? " (O_DIRECT)" : " (not measured)");
    fprintf(f, "  update ns/param, 32-bit / 8-bit state:");
    for (int k = 0; k < HPT_OPTIM_COUNT; k++)
        fprintf(f, " %s %.2f / %.2f%s", hpt_optim_name((hpt_optim_kind)k), c->optim_ns[k][0],
                c->optim_ns[k][1], k + 1 < HPT_OPTIM_COUNT ? ";" : "\n");
    fprintf(f, "  at one thread (the offload worker's):");
    for (int k = 0; k < HPT_OPTIM_COUNT; k++)
        fprintf(f, " %s %.2f / %.2f%s", hpt_optim_name((hpt_optim_kind)k), c->worker_ns[k][0],
                c->worker_ns[k][1], k + 1 < HPT_OPTIM_COUNT ? ";" : "\n");
    fprintf(f, "  sharing loss %.2f compute s per s of one-thread work beside the team\n", c->share_loss);
    if (c->disk_read_gbps > 0)
        fprintf(f, "  disk sharing loss %.2f compute s per s of disk transfers beside the team\n",
                c->disk_share_loss);
    for (int k = 1; k < HPT_CAL_LAYOUTS; k++)
        if (c->engine_disk_read_gbps[k] > 0)
            fprintf(f, "  the engine's own disk, %s%s%son disk: read %.2f GB/s, write %.2f GB/s, loss "
                    "%.2f compute s per s beside the compute (from: %s)\n", k & 1 ? "params " : "",
                    k & 2 ? "grads " : "", k & 4 ? "optim " : "", c->engine_disk_read_gbps[k],
                    c->engine_disk_write_gbps[k], c->engine_disk_loss[k], c->engine_source[k]);
}

/* The engine's disk rates recorded by training runs (train --record-rates) are not what a
 * standalone calibration measures (docs/planner.md): a new calibration keeps those of the file
 * it replaces when it was measured with the same thread count. Returns how many it kept. */
static int keep_recorded(const char *path, hpt_calibration *cal) {
    hpt_calibration old;
    if (hpt_calibration_load(path, &old) != HPT_OK || old.threads != cal->threads) return 0;
    int n = 0;
    for (int k = 0; k < HPT_CAL_LAYOUTS; k++) {
        if (!(old.engine_disk_read_gbps[k] > 0 && old.engine_disk_write_gbps[k] > 0)) continue;
        cal->engine_disk_read_gbps[k] = old.engine_disk_read_gbps[k];
        cal->engine_disk_write_gbps[k] = old.engine_disk_write_gbps[k];
        cal->engine_disk_loss[k] = old.engine_disk_loss[k];
        memcpy(cal->engine_source[k], old.engine_source[k], sizeof cal->engine_source[k]);
        n++;
    }
    return n;
}

int cli_device_calibration(int device, hpt_calibration *cal) {
    char path[4096], key[sizeof cal->device];
    hpt_calibration_path(path, sizeof path);
    if (device == 0) return hpt_calibration_load(path, cal) == HPT_OK;
    return hpt_calibration_device_name(device, key, sizeof key) == HPT_OK &&
           hpt_calibration_load_device(path, key, cal) == HPT_OK;
}

/* calibrate --device cuda[:N]: the GPU's entry in the file's "devices" (the CPU's kept), the
 * disk rates the CPU's entry's; "no CUDA device: ..." without the backend or the GPU. */
static int calibrate_gpu(int device, int quick, const char *out) {
    hpt_calibration cal, cpu;
    double t0 = hpt_now();
    if (hpt_calibrate_device(device, quick, &cal) != HPT_OK) {
        const char *e = hpt_last_error();
        return cli_error("calibrate: %s%s", strncmp(e, "no CUDA device", 14) ? "no CUDA device: " : "", e);
    }
    int disk = hpt_calibration_load(out, &cpu) == HPT_OK && cpu.disk_read_gbps > 0;
    if (disk) {
        cal.disk_read_gbps = cpu.disk_read_gbps, cal.disk_write_gbps = cpu.disk_write_gbps;
        cal.disk_share_loss = cpu.disk_share_loss;
    }
    hpt_status s = hpt_calibration_save(out, &cal);
    if (s != HPT_OK) return cli_lib_error(s, "calibrate");
    printf("calibrate: %s measured in %.1f s, written to %s under \"devices\" (the CPU's entry "
           "kept)%s\n", cal.device, hpt_now() - t0, out, disk ? "; disk rates the CPU's" : "");
    print_calibration(stdout, &cal);
    return 0;
}

int cmd_calibrate(int argc, char **argv) {
    static const struct option longopts[] = {
        {"offload-dir", 1, 0, 'd'}, {"threads", 1, 0, 'j'}, {"quick", 0, 0, 'Q'},
        {"out", 1, 0, 'o'}, {"device", 1, 0, 'D'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *dir = NULL, *out = NULL, *device = NULL;
    int quick = 0, opt_rc = 0, c;
    long threads = 0;
    while ((c = cli_getopt("calibrate", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        int r = 0;
        switch (c) {
        case 'd': dir = optarg; break;
        case 'j': r = cli_parse_long("calibrate", "--threads", optarg, 1, 1024, &threads); break;
        case 'Q': quick = 1; break;
        case 'o': out = optarg; break;
        case 'D': device = optarg; break;
        }
        if (r) return r;
    }
    if (optind < argc) return cli_unexpected_argument("calibrate", argv[optind]);
    if (device) {
        hpt_plan p = hpt_plan_default_choices();
        hpt_status s = hpt_plan_set(&p, "device", device);
        if (s != HPT_OK) return cli_lib_error(s, "calibrate");
        if (p.device) {
            char gp[4096];
            return calibrate_gpu(p.device, quick, out ? out : hpt_calibration_path(gp, sizeof gp));
        }
    }
    if (threads) hpt_set_threads((int)threads);
    /* the disk's directory made (as train's disk tier makes it) or refused now, not after the
     * minute of measurements before the disk's */
    if (dir && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "hptrain: error: calibrate: --offload-dir %s: cannot create it: %s\n", dir,
                strerror(errno));
        return 1;
    }
    struct stat dst;
    if (dir && (stat(dir, &dst) != 0 || !S_ISDIR(dst.st_mode))) {
        fprintf(stderr, "hptrain: error: calibrate: --offload-dir %s is not a directory\n", dir);
        return 1;
    }
    char path[4096];
    if (!out) out = hpt_calibration_path(path, sizeof path);
    hpt_calibration cal;
    double t0 = hpt_now();
    hpt_status s = hpt_calibrate(dir, quick, &cal);
    if (s != HPT_OK) return cli_lib_error(s, "calibrate");
    int kept = keep_recorded(out, &cal);
    s = hpt_calibration_save(out, &cal);
    if (s != HPT_OK) return cli_lib_error(s, "calibrate");
    printf("calibrate: measured in %.1f s, written to %s\n", hpt_now() - t0, out);
    if (kept)
        printf("calibrate: kept the engine's rates recorded by %d training run(s) (train "
               "--record-rates) from the previous file at the same thread count\n", kept);
    print_calibration(stdout, &cal);
    return 0;
}

/* ---- --plan auto --------------------------------------------------------------------------- */

static int cli_calibration(const char *cmd, const char *disk_dir, int verbose, hpt_calibration *cal) {
    char path[4096];
    hpt_calibration_path(path, sizeof path);
    hpt_status s = hpt_calibration_load(path, cal);
    if (s == HPT_OK && (!disk_dir || cal->disk_read_gbps > 0)) {
        if (verbose) {
            fprintf(stderr, "hptrain: %s: calibration from %s:\n", cmd, path);
            print_calibration(stderr, cal);
        }
        return 0;
    }
    fprintf(stderr, "hptrain: %s: %s; running a quick calibration (hptrain calibrate) ...\n", cmd,
            s == HPT_OK ? "the cached calibration has no disk rates" : "no calibration cached");
    s = hpt_calibrate(disk_dir, 1, cal);
    if (s != HPT_OK) return cli_lib_error(s, cmd);
    keep_recorded(path, cal);
    if (hpt_calibration_save(path, cal) == HPT_OK)
        fprintf(stderr, "hptrain: %s: calibration written to %s\n", cmd, path);
    if (verbose) print_calibration(stderr, cal);
    return 0;
}

/* "--batch B --seq T <plan flags>" of a candidate */
static void cand_flags(const hpt_plan_opts *o, char *buf, size_t n, int budgets) {
    hpt_plan p = o->plan;
    if (!budgets) {
        memset(p.budget_bytes, 0, sizeof p.budget_bytes);
        p.offload_dir = NULL;
    }
    char pb[2048];
    if (hpt_plan_print(&p, pb, sizeof pb) != HPT_OK) snprintf(pb, sizeof pb, "(too long)");
    snprintf(buf, n, "--batch %d --seq %d%s%s", o->B, o->T, *pb ? " " : "", pb);
}

static void print_peaks(FILE *f, const hpt_auto_cand *k) {
    char b[HPT_TIER_COUNT][32];
    for (int t = 0; t < HPT_TIER_COUNT; t++) fmt_b(b[t], sizeof b[t], (double)k->e.peak_bytes[t]);
    fprintf(f, "device %s, host %s, disk %s", b[0], b[1], b[2]);
}

static void print_inputs(FILE *f, const hpt_cost *c, int arch) {
    char x[32], y[32], z[32];
    fprintf(f, "    inputs: %.0f tokens x accum %d; GEMM %.3g FLOP fwd (blocks %.3g at %.1f/%.1f "
            "GFLOP/s fwd/bwd, the head at %.1f/%.1f); attention %.3g FLOP at %.1f/%.1f; pointwise "
            "%.3g B; %.4g params at %.2f ns\n", c->tokens, c->accum, c->gemm_flops_fwd,
            c->block_gemm_flops_fwd, c->gemm_fwd_gflops, c->gemm_bwd_gflops, c->head_fwd_gflops,
            c->head_bwd_gflops, c->attn_flops_fwd, c->attn_fwd_gflops,
            c->attn_bwd_gflops, c->pointwise_bytes, c->params, c->optim_ns);
    fmt_b(x, sizeof x, c->load_bytes), fmt_b(y, sizeof y, c->grad_out_bytes);
    fmt_b(z, sizeof z, c->state_in_bytes + c->state_out_bytes);
    fprintf(f, "    engine: loads %s, gradient write-backs %s, state streamed %s; activation "
            "offload %.3g B each way\n", x, y, z, c->act_out_bytes);
    if (c->disk_read_gbps > 0)
        fprintf(f, "    disk: read %.2f GB/s, write %.2f GB/s, %.2f compute s lost per s of the "
                "worker's disk transfers beside it (%.3f s of them): %s\n", c->disk_read_gbps,
                c->disk_write_gbps, c->disk_loss, c->disk_beside_s, c->disk_from_engine
                ? "the engine's own rates, from a training run (train --record-rates)"
                : "calibrate's standalone O_DIRECT rates");
    const hpt_arch_desc *d = hpt_arch_desc_of(arch);
    int own = c->arch_rates && d && d->block;
    if (c->engine_inline || own)
        fprintf(f, "    %s%s%s%s\n", c->engine_inline ? "engine: jobs inline on the compute thread (no disk "
                "home: no worker), serial with the compute" : "", c->engine_inline && own ? "; " : "",
                own ? d->block : "", own ? " block at its own measured rates" : "");
    fprintf(f, "    parts: forward %.3f s, backward %.3f s, recompute %.3f s, pointwise %.3f s, "
            "update %.3f s, transfers %.3f s of which exposed %.3f s\n", c->fwd_s, c->bwd_s,
            c->recompute_s, c->pointwise_s, c->optim_s, c->transfer_s, c->exposed_s);
}

void cli_gpu_floor(double flops, const char *lead, FILE *f) {
    char x[32];
    if (flops >= 1e12) snprintf(x, sizeof x, "%.2f TFLOP", flops / 1e12);
    else snprintf(x, sizeof x, "%.2f GFLOP", flops / 1e9);
    for (int i = 0; hpt_gpu_rates_known(i); i++) {
        const hpt_gpu_rates *g = hpt_gpu_rates_known(i);
        fprintf(f, "%sa floor, not a prediction: the step's %s at an %s's measured GEMM peak take "
                "%.3g s in fp32 (%.1f TFLOP/s: the exact mode), %.3g s in TF32 (%.0f), %.3g s in "
                "bf16 (%.0f) (%s)\n", lead, x, g->name, flops / (g->fp32_tflops * 1e12),
                g->fp32_tflops, flops / (g->tf32_tflops * 1e12), g->tf32_tflops,
                flops / (g->bf16_tflops * 1e12), g->bf16_tflops, g->source);
    }
}

/* --plan auto's budgets (the given ones, this machine's defaults for the rest, into po->plan
 * and bs) and the calibration the plans are ranked by. 0, or the exit status after printing. */
static int auto_setup(const char *cmd, hpt_plan_opts *po, int verbose, cli_budgets *bs,
                      char bt[HPT_TIER_COUNT][512], hpt_calibration *cal) {
    if (po->plan.device && !po->plan.budget_bytes[HPT_TIER_DEVICE])
        return cli_usage_error(cmd, "--plan auto --device cuda needs --memory SIZE (the GPU's memory "
                               "to plan for)");
    cli_budgets_given(&po->plan, bs);
    cli_budgets_defaults(&po->plan, bs);
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        cli_budget_text(&po->plan, bs, t, bt[t], 512);
        if (verbose) fprintf(stderr, "hptrain: budget %s\n", bt[t]);
    }
    char cpath[4096];
    if (po->plan.device) { /* the GPU's own calibration, else ranked, no step time predicted */
        if (!cli_device_calibration(po->plan.device, cal) &&
            hpt_calibration_load(hpt_calibration_path(cpath, sizeof cpath), cal) != HPT_OK)
            cli_nominal_calibration(cal);
        if (!(cal->disk_read_gbps > 0)) cal->disk_read_gbps = cal->disk_write_gbps = 1;
        return 0;
    }
    return cli_calibration(cmd, po->offload_dir, verbose, cal);
}

int cli_auto_max_seq(const char *cmd, const hpt_plan_opts *po, int allow_lossy, int limit,
                     int *T_out) {
    *T_out = 0;
    hpt_plan_opts base = *po;
    cli_budgets bs;
    char bt[HPT_TIER_COUNT][512];
    hpt_calibration cal;
    int rc = auto_setup(cmd, &base, 0, &bs, bt, &cal);
    if (rc) return rc;
    hpt_auto_opts a = {.allow_lossy = allow_lossy, .allow_disk = po->offload_dir != NULL,
                       .sequences = (int64_t)po->B * (po->accum > 1 ? po->accum : 1),
                       .shared_bytes = bs.shared, .first_fit = 1};
    hpt_auto_result *r = malloc(sizeof *r);
    if (!r) return cli_error("%s: out of memory", cmd);
    /* whether any plan of the space fits at T: monotone in T (a plan that fits at T fits at
     * T - 1, its peak growing with T). From a T that fits, the plan found there is followed by
     * the estimator's own fit search as far as it fits the device (checked by the search), and
     * the search is asked only one T past it: each step costs one search that fits, and only
     * the last one that does not (a search that finds nothing estimates every plan). */
#define AUTO_FITS(x) (hpt_plan_at_seq(&base, (x), &at) == HPT_OK && hpt_plan_auto(&at, &cal, &a, r) == HPT_OK)
    hpt_plan_opts at;
    int lo = 0, hi = limit + 1; /* lo fits (0: none known), hi does not */
    /* the first guess: the longest sequence of the smallest plans of the space, by the
     * estimator alone (the device budget; the search then checks every tier) */
    int g = po->T < limit ? po->T : limit, best = 0;
    hpt_plan_opts sp;
    for (int i = 0, k; (k = cli_small_plan(&base, a.allow_disk, allow_lossy, i, &sp)) >= 0; i++) {
        int t = 0;
        uint64_t pk;
        if (k && hpt_plan_max_seq(&sp, sp.budget_bytes[HPT_TIER_DEVICE], limit, &t, &pk) == HPT_OK &&
            t > best)
            best = t;
    }
    if (best > 0) g = best;
    if (AUTO_FITS(g)) lo = g;
    else hi = g;
    if (lo == 0) { /* gallop down, then bisect */
        for (int x = hi / 2; x >= 1; x /= 2) {
            if (AUTO_FITS(x)) { lo = x; break; }
            hi = x;
        }
        while (lo > 0 && hi - lo > 1) {
            int mid = lo + (hi - lo) / 2;
            if (AUTO_FITS(mid)) lo = mid;
            else hi = mid;
        }
    }
    while (lo > 0 && lo < limit && hi > lo + 1) {
        if ((r->n == 0 || r->cand[0].o.T != lo) && !AUTO_FITS(lo)) break; /* r: lo's plan */
        hpt_plan_opts p = r->cand[0].o;
        int t1 = lo;
        uint64_t pk;
        if (hpt_plan_max_seq(&p, p.budget_bytes[HPT_TIER_DEVICE], hi - 1, &t1, &pk) != HPT_OK ||
            t1 <= lo) {
            t1 = lo;
        } else if (!AUTO_FITS(t1)) { /* another tier binds first: bisect in (lo, t1) */
            hi = t1;
            while (hi - lo > 1) {
                int mid = lo + (hi - lo) / 2;
                if (AUTO_FITS(mid)) lo = mid;
                else hi = mid;
            }
            break;
        }
        lo = t1;
        if (lo >= limit || hi == lo + 1) break;
        if (!AUTO_FITS(lo + 1)) break;
        lo++;
    }
#undef AUTO_FITS
    free(r);
    *T_out = lo;
    return 0;
}

int cli_auto_plan(const char *cmd, hpt_plan_opts *po, int64_t tokens_per_step, int allow_lossy,
                  int verbose, FILE *f) {
    int64_t S = (int64_t)po->B * (po->accum > 1 ? po->accum : 1);
    if (tokens_per_step > 0) {
        if (tokens_per_step % po->T)
            return cli_usage_error(cmd, "--tokens-per-step %lld is not a multiple of --seq %d",
                                   (long long)tokens_per_step, po->T);
        S = tokens_per_step / po->T;
    }
    cli_budgets bs;
    char bt[HPT_TIER_COUNT][512];
    hpt_calibration cal;
    int rc = auto_setup(cmd, po, verbose, &bs, bt, &cal);
    if (rc) return rc;
    const int timed = hpt_calibration_for_device(&cal, po->plan.device);
    hpt_auto_opts a = {.allow_lossy = allow_lossy, .allow_disk = po->offload_dir != NULL, .sequences = S,
                       .shared_bytes = bs.shared};
    hpt_auto_result *r = malloc(sizeof *r);
    if (!r) return cli_error("%s: out of memory", cmd);
    hpt_status s = hpt_plan_auto(po, &cal, &a, r);
    char fl[2300], why[96];
    if (s == HPT_ERR_OOM) { /* every budget with its source, the one that binds, what would fit */
        const hpt_auto_cand *least = r->n_nofit ? &r->nofit[0] : NULL;
        cli_explain_nofit(cmd, po, &bs, least, stderr);
        fprintf(stderr, "hptrain: %s: what would fit:\n", cmd);
        cli_fit_hints(po, &bs, allow_lossy, 1, "  ", stderr);
        int n = r->n_tried, bad = least ? least->bad_tier : -2;
        free(r);
        if (bad == -2) return cli_error("%s: no plan of the %d searched fits the budgets", cmd, n);
        if (bad == -1)
            return cli_error("%s: no plan of the %d searched fits the budgets: the device and host "
                             "tiers together pass this machine's free RAM", cmd, n);
        return cli_error("%s: no plan of the %d searched fits the budgets: the %s budget binds "
                         "(%s)", cmd, n, hpt_tier_name((hpt_tier)bad), bs.src[bad] == CLI_BUDGET_GIVEN
                         ? "given" : "this machine's default; see above");
    }
    if (s != HPT_OK) {
        free(r);
        return cli_lib_error(s, cmd);
    }
    const hpt_auto_cand *best = &r->cand[0];
    hpt_plan_opts shown = best->o; /* the budgets the user gave, no default's byte count */
    cli_budgets_strip(&shown.plan, &bs);
    cand_flags(&shown, fl, sizeof fl, 1);
    fprintf(f, "plan auto: %d plans searched (%s, %s); the fastest that fits:\n  %s\n", r->n_tried,
            allow_lossy ? "lossy choices allowed" : "exact choices only (--allow lossy adds 8-bit "
            "state, bf16 weights, compressed activations, a narrow LoRA base)",
            a.allow_disk ? "disk homes with --offload-dir" : "no disk tier (give --offload-dir)", fl);
    if (timed) { /* below 10 tokens/s two digits, not "0 tokens/s" (an 8B from disk on a CPU) */
        double tps = (double)best->e.tokens_per_step / best->cost.total_s;
        fprintf(f, "  predicted: %.3f s per step (%.*f tokens/s), calibration \"%s\"; peak ",
                best->cost.total_s, tps < 10 ? 2 : 0, tps, cal.device);
    }
    else
        fprintf(f, "  predicted: no step time (no calibration of a GPU; the plans ranked by %s); peak ",
                strcmp(cal.device, "nominal") ? "this CPU's calibration" : "placeholder rates");
    print_peaks(f, best);
    fprintf(f, "\n  budgets: %s; %s; %s\n", bt[0], bt[1], bt[2]);
    if (!timed) cli_gpu_floor(best->e.flops_per_token * (double)best->e.tokens_per_step, "  ", f);
    if (timed && best->cost.disk_read_gbps > 0)
        fprintf(f, "  disk costed at %s: read %.2f GB/s, write %.2f GB/s, loss %.2f%s%s%s\n",
                best->cost.disk_from_engine ? "the engine's own rates" : "calibrate's rates",
                best->cost.disk_read_gbps, best->cost.disk_write_gbps, best->cost.disk_loss,
                best->cost.disk_from_engine ? " (from: " : "",
                best->cost.disk_from_engine ? cal.engine_source[best->cost.disk_from_engine - 1] : "",
                best->cost.disk_from_engine ? ")" : "");
    if (verbose) print_inputs(f, &best->cost, po->cfg.arch);
    if (r->n > 1 || r->n_nofit) fprintf(f, "  runners-up:\n");
    for (int i = 1; i < r->n; i++) {
        cand_flags(&r->cand[i].o, fl, sizeof fl, 0);
        if (!timed) fprintf(f, "    %s\n", fl);
        else fprintf(f, "    %.3f s (slower by %.1f%%): %s\n", r->cand[i].cost.total_s,
                     100.0 * (r->cand[i].cost.total_s / best->cost.total_s - 1.0), fl);
        if (verbose) print_inputs(f, &r->cand[i].cost, po->cfg.arch);
    }
    for (int i = 0; i < r->n_nofit; i++) {
        cand_flags(&r->nofit[i].o, fl, sizeof fl, 0);
        fmt_b(why, sizeof why, (double)r->nofit[i].over_bytes);
        int nb = r->nofit[i].bad_tier;
        char ts[32] = "";
        if (timed) snprintf(ts, sizeof ts, "%.3f s but ", r->nofit[i].cost.total_s);
        fprintf(f, "    %sdoes not fit %s%s%s by %s: %s\n", ts,
                nb < 0 ? "this machine's free RAM (device and host)" : "the ",
                nb < 0 ? "" : hpt_tier_name((hpt_tier)nb), nb < 0 ? "" : " tier", why, fl);
    }
    po->B = best->o.B;
    po->plan = best->o.plan; /* the run carries the budgets given, as the printed flags do */
    cli_budgets_strip(&po->plan, &bs);
    po->plan.given = 0;
    free(r);
    return 0;
}

void cli_auto_advice(const char *cmd, const hpt_plan_opts *po, FILE *f) {
    hpt_calibration cal;
    char path[4096];
    const int have = cli_device_calibration(po->device, &cal) ||
                     hpt_calibration_load(hpt_calibration_path(path, sizeof path), &cal) == HPT_OK;
    if (!have) cli_nominal_calibration(&cal); /* what fits needs no rates; the order does */
    hpt_auto_opts a = {.allow_lossy = 0, .allow_disk = po->offload_dir != NULL && cal.disk_read_gbps > 0,
                       .sequences = (int64_t)po->B * (po->accum > 1 ? po->accum : 1)};
    hpt_plan_opts base = *po;
    cli_budgets bs;
    cli_budgets_given(&base.plan, &bs);
    cli_budgets_defaults(&base.plan, &bs);
    a.shared_bytes = bs.shared;
    hpt_auto_result *r = malloc(sizeof *r);
    if (!r) return;
    for (int lossy = 0; lossy < 2; lossy++) {
        a.allow_lossy = lossy;
        if (hpt_plan_auto(&base, &cal, &a, r) == HPT_OK) break;
    }
    if (r->n == 0) { /* then with a disk tier, or nothing: cli_fit_hints says which */
        char lead[64];
        snprintf(lead, sizeof lead, "hptrain: %s: what fits: ", cmd);
        cli_fit_hints(&base, &bs, 0, 0, lead, f);
        free(r);
        return;
    }
    const int timed = have && hpt_calibration_for_device(&cal, po->device);
    const char *al = a.allow_lossy ? " --allow lossy" : "";
    if (timed)
        fprintf(f, "hptrain: %s: whole plans that fit (predicted step time; --plan auto%s picks the "
                "first):\n", cmd, al);
    else if (po->device)
        fprintf(f, "hptrain: %s: whole plans that fit (no calibration of a GPU: no step time; "
                "--plan auto%s --memory SIZE chooses one):\n", cmd, al);
    else
        fprintf(f, "hptrain: %s: whole plans that fit (no calibration cached: no step time; --plan "
                "auto%s measures this machine once and picks the fastest):\n", cmd, al);
    char fl[2300];
    for (int i = 0; i < r->n && i < 3; i++) {
        cand_flags(&r->cand[i].o, fl, sizeof fl, 0);
        if (timed) fprintf(f, "  %.3f s/step: %s\n", r->cand[i].cost.total_s, fl);
        else fprintf(f, "  %s\n", fl);
    }
    free(r);
}

int cli_record_rates(const hpt_plan_opts *po, const hpt_offload_stats *st, int64_t steps,
                     double step_s, FILE *f) {
    char path[4096], src[256], pb[2048];
    hpt_calibration_path(path, sizeof path);
    hpt_calibration cal;
    hpt_status s = hpt_calibration_load(path, &cal);
    if (s != HPT_OK) return cli_lib_error(s, "train: --record-rates (run hptrain calibrate first)");
    hpt_plan p = po->plan;
    memset(p.budget_bytes, 0, sizeof p.budget_bytes);
    p.offload_dir = NULL;
    if (hpt_plan_print(&p, pb, sizeof pb) != HPT_OK) snprintf(pb, sizeof pb, "(too long)");
    int w = snprintf(src, sizeof src, "train L=%d C=%d B=%d T=%d, the fastest step after the "
                     "first (%.3f s): ", po->cfg.L, po->cfg.C, po->B, po->T, step_s);
    if (w > 0 && (size_t)w < sizeof src) /* the plan's flags, cut at the field's end */
    {
        size_t room = sizeof src - (size_t)w - 1, len = strlen(pb);
        memcpy(src + w, pb, len < room ? len + 1 : room);
        src[sizeof src - 1] = 0;
    }
    s = hpt_calibration_take_engine(&cal, po, st, steps, step_s, src);
    int dk = hpt_plan_disk_homes(po);
    if (s == HPT_OK) s = hpt_calibration_save(path, &cal);
    if (s != HPT_OK) return cli_lib_error(s, "train: --record-rates");
    fprintf(f, "engine rates recorded in %s (homes on disk: %d): disk read %.2f GB/s, write %.2f GB/s, loss %.2f "
            "compute s per s of disk transfers beside the compute (calibrate's own: %.2f, %.2f, "
            "%.2f)\n", path, dk, cal.engine_disk_read_gbps[dk], cal.engine_disk_write_gbps[dk],
            cal.engine_disk_loss[dk], cal.disk_read_gbps, cal.disk_write_gbps, cal.disk_share_loss);
    return 0;
}
