/* budgets.c: where each tier's budget comes from and what a refusal says about it (issue 34).
 * --plan auto fills the budgets not given with this machine's defaults (its free RAM, which on
 * the CPU the device and host tiers share; the free space of --offload-dir); a refusal names
 * every budget with its source (given, this machine's default, none) and the flag that sets
 * it, the plan nearest to fitting with the budgets it passes, and what would fit: --plan auto,
 * with --offload-dir or --allow lossy when a few of the search's smallest plans show they make
 * one fit. Flags printed here carry only the budgets the user gave (never a default's byte
 * count), and the run carries the same (cli_budgets_strip). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

static const char *const k_flag[HPT_TIER_COUNT] = {"--memory", "--host-memory", "--disk-memory"};

static void fmt_b(char *buf, size_t n, double b) {
    if (b == 0) snprintf(buf, n, "0");
    else if (b < 1024.0 * 1024) snprintf(buf, n, "%.1f KiB", b / 1024);
    else if (b < 1024.0 * 1024 * 1024) snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
}

uint64_t cli_mem_available(void) {
    /* a SIZE in the environment stands for the machine's free RAM: tests, and planning for
     * another machine's */
    const char *env = getenv("HPT_MEM_AVAILABLE");
    uint64_t v;
    if (env && *env && hpt_parse_size(env, &v) == HPT_OK) return v;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (uint64_t)kb * 1024;
}

void cli_budgets_given(const hpt_plan *p, cli_budgets *b) {
    memset(b, 0, sizeof *b);
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        b->src[t] = p->budget_bytes[t] ? CLI_BUDGET_GIVEN : CLI_BUDGET_NONE;
    b->device = p->device;
    b->dir = p->offload_dir;
}

void cli_budgets_defaults(hpt_plan *p, cli_budgets *b) {
    b->ram_avail = cli_mem_available();
    if (!p->budget_bytes[HPT_TIER_DEVICE] && !p->device) { /* a GPU's memory: --memory only */
        p->budget_bytes[HPT_TIER_DEVICE] = b->ram_avail;
        b->src[HPT_TIER_DEVICE] = CLI_BUDGET_DEFAULT;
    }
    if (!p->budget_bytes[HPT_TIER_HOST]) {
        p->budget_bytes[HPT_TIER_HOST] = b->ram_avail ? b->ram_avail : 1;
        b->src[HPT_TIER_HOST] = CLI_BUDGET_DEFAULT;
    }
    /* on the CPU the device tier is the same RAM as the host's: a default takes both together
     * within it, not a split that one of them may not need */
    if (!p->device && (b->src[HPT_TIER_DEVICE] == CLI_BUDGET_DEFAULT || b->src[HPT_TIER_HOST] == CLI_BUDGET_DEFAULT))
        b->shared = b->ram_avail;
    struct statvfs sv;
    if (!p->budget_bytes[HPT_TIER_DISK] && p->offload_dir && !statvfs(p->offload_dir, &sv)) {
        p->budget_bytes[HPT_TIER_DISK] = (uint64_t)sv.f_bavail * sv.f_frsize;
        b->src[HPT_TIER_DISK] = CLI_BUDGET_DEFAULT;
    }
}

void cli_budgets_strip(hpt_plan *p, const cli_budgets *b) {
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        if (b->src[t] != CLI_BUDGET_GIVEN) p->budget_bytes[t] = 0;
}

void cli_budget_text(const hpt_plan *p, const cli_budgets *b, int t, char *buf, size_t n) {
    char x[32], y[96];
    uint64_t v = p->budget_bytes[t];
    fmt_b(x, sizeof x, (double)v);
    if (b->src[t] == CLI_BUDGET_GIVEN) {
        hpt_plan q = hpt_plan_default_choices(); /* the flag as hpt_plan_print writes it */
        q.budget_bytes[t] = v;
        if (hpt_plan_print(&q, y, sizeof y) != HPT_OK) snprintf(y, sizeof y, "%s", k_flag[t]);
        snprintf(buf, n, "%s %s (given: %s)", hpt_tier_name((hpt_tier)t), x, y);
        return;
    }
    if (b->src[t] == CLI_BUDGET_NONE) {
        snprintf(buf, n, "%s none (%s)", hpt_tier_name((hpt_tier)t),
                 t == HPT_TIER_DISK ? "no --offload-dir DIR: no disk homes"
                 : t == HPT_TIER_DEVICE && b->device ? "the GPU's memory: --memory SIZE" : "no limit");
        return;
    }
    char ram[32];
    fmt_b(ram, sizeof ram, (double)b->ram_avail);
    if (t != HPT_TIER_DISK && !b->device)
        snprintf(buf, n, "%s %s (this machine's default: its free RAM, which on the CPU the device "
                 "and host tiers share: their peaks together at most %s; %s SIZE sets it)",
                 hpt_tier_name((hpt_tier)t), x, ram, k_flag[t]);
    else if (t == HPT_TIER_HOST)
        snprintf(buf, n, "host %s (this machine's default: the free RAM of the machine running "
                 "hptrain, for the GPU's pinned host memory; --host-memory SIZE sets it)", x);
    else
        snprintf(buf, n, "disk %s (this machine's default: the free space of %s; --disk-memory SIZE "
                 "sets it)", x, b->dir ? b->dir : "--offload-dir");
}

/* Rates for a search that only asks what fits (no calibration cached): the order of the plans
 * found is not a prediction, so none is printed from them. */
void cli_nominal_calibration(hpt_calibration *c) {
    static const int Cs[HPT_CAL_GEMM_SIZES] = {512, 768, 1024, 1280, 1600, 2048};
    memset(c, 0, sizeof *c);
    c->version = HPT_CAL_VERSION;
    snprintf(c->device, sizeof c->device, "nominal"); /* measured on nothing */
    c->threads = c->cores = 1;
    c->gemm_rows[0] = 64, c->gemm_rows[1] = 256;
    for (int i = 0; i < HPT_CAL_GEMM_SIZES; i++) {
        c->gemm_C[i] = Cs[i];
        for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++) c->gemm_fwd_gflops[r][i] = c->gemm_bwd_gflops[r][i] = 100;
    }
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++) c->head_gflops[r][0] = c->head_gflops[r][1] = 100;
    for (int a = 0; a < 2; a++)
        for (int d = 0; d < 2; d++) c->attn_gflops[a][d] = 50;
    c->mem_gbps = 20, c->host_copy_gbps = 10, c->share_loss = 1;
    c->disk_read_gbps = c->disk_write_gbps = 1;
    for (int k = 0; k < HPT_OPTIM_COUNT; k++)
        for (int w = 0; w < 2; w++) c->optim_ns[k][w] = c->worker_ns[k][w] = 1;
}

/* The plan's flags without budgets or the directory. */
static void plan_words(const hpt_plan_opts *o, char *buf, size_t n) {
    hpt_plan p = o->plan;
    memset(p.budget_bytes, 0, sizeof p.budget_bytes);
    p.offload_dir = NULL;
    char pb[2048];
    if (hpt_plan_print(&p, pb, sizeof pb) != HPT_OK) snprintf(pb, sizeof pb, "(too long)");
    snprintf(buf, n, "--batch %d --seq %d%s%s", o->B, o->T, *pb ? " " : "", pb);
}

static uint64_t tier_peak(const hpt_estimate *e, int t) {
    return e->peak_bytes[t] > e->predict_peak_bytes[t] ? e->peak_bytes[t] : e->predict_peak_bytes[t];
}

static void peaks_text(const hpt_estimate *e, char *buf, size_t n) {
    char x[HPT_TIER_COUNT][32];
    for (int t = 0; t < HPT_TIER_COUNT; t++) fmt_b(x[t], sizeof x[t], (double)tier_peak(e, t));
    snprintf(buf, n, "device %s, host %s, disk %s", x[0], x[1], x[2]);
}

void cli_explain_nofit(const char *cmd, const hpt_plan_opts *po, const cli_budgets *b,
                       const hpt_auto_cand *least, FILE *f) {
    char t[512];
    fprintf(f, "hptrain: %s: the budgets:\n", cmd);
    for (int k = 0; k < HPT_TIER_COUNT; k++) {
        cli_budget_text(&po->plan, b, k, t, sizeof t);
        fprintf(f, "  %s\n", t);
    }
    if (!least) return;
    char fl[2300], pk[160], over[32];
    plan_words(&least->o, fl, sizeof fl);
    peaks_text(&least->e, pk, sizeof pk);
    fprintf(f, "hptrain: %s: the plan searched nearest to fitting, %s, needs %s:", cmd, fl, pk);
    const char *sep = "";
    for (int k = 0; k < HPT_TIER_COUNT; k++) {
        uint64_t bud = po->plan.budget_bytes[k], p = tier_peak(&least->e, k);
        if (!bud || p <= bud) continue;
        fmt_b(over, sizeof over, (double)(p - bud));
        fprintf(f, "%s over the %s budget (%s) by %s", sep, hpt_tier_name((hpt_tier)k),
                b->src[k] == CLI_BUDGET_GIVEN ? "given" : "this machine's default", over);
        sep = ";";
    }
    uint64_t both = tier_peak(&least->e, HPT_TIER_DEVICE) + tier_peak(&least->e, HPT_TIER_HOST);
    if (b->shared && both > b->shared) {
        fmt_b(over, sizeof over, (double)(both - b->shared));
        fprintf(f, "%s device and host together over this machine's free RAM by %s", sep, over);
    }
    fprintf(f, "\n");
}

int cli_small_plan(const hpt_plan_opts *po, int disk, int lossy, int i, hpt_plan_opts *out) {
    static const hpt_tier homes[3][2] = {{HPT_TIER_HOST, HPT_TIER_HOST}, {HPT_TIER_HOST, HPT_TIER_DISK},
                                         {HPT_TIER_DISK, HPT_TIER_DISK}};
    /* then the same plans with the block inputs offloaded to the host (--act-offload host) */
    const int n = disk ? 6 : 2, ao = i >= n;
    if (ao) i -= n;
    int h = i / 2, one = i % 2;
    if (i < 0 || h >= (disk ? 3 : 1)) return -1;
    int64_t S = (int64_t)po->B * (po->accum > 1 ? po->accum : 1);
    hpt_plan_env env = {.training = 1, .has_val = -1, .need_disk_dir = 0};
    hpt_plan_opts o = *po;
    if (disk && !o.plan.offload_dir) o.plan.offload_dir = "DIR", o.plan.budget_bytes[HPT_TIER_DISK] = 0;
    o.B = one ? 1 : (int)S;
    o.accum = one ? (int)S : 1;
    o.act = hpt_act_defaults();
    o.act.recompute = HPT_RECOMPUTE_FULL;
    if (ao) o.act.offload = HPT_OFFLOAD_HOST;
    if ((int64_t)o.B * o.T > 128) o.act.head_chunk = 128;
    if ((int64_t)o.B * o.T > 128 && !(o.lora.r > 0 && o.lora.dropout > 0.0f) &&
        o.cfg.arch != HPT_ARCH_GEMMA3) /* Gemma 3 has no tiled MLP (model/actopts.c) */
        o.act.mlp_tile = HPT_AUTO_MLP_TILE;
    o.offload = hpt_offload_defaults();
    o.offload.params = o.offload.grads = homes[h][0];
    o.offload.optim = homes[h][1];
    o.offload.fused = !one;
    o.offload.embeddings = one ? HPT_EMB_FULL : lossy ? HPT_EMB_BF16 : HPT_EMB_CHUNKED;
    if (lossy) { /* 8-bit state lives on the device or the host only: a disk home keeps 32 */
        if (o.offload.optim != HPT_TIER_DISK) o.adamw.state_bits = 8, o.adamw.state32_embeddings = 0;
        o.offload.weights = HPT_BW_BF16_SR;
    }
    if (hpt_plan_check(&o.plan, &env) != HPT_OK) return 0;
    *out = o;
    return 1;
}

/* Whether some plan of a variant fits, from a handful of the smallest plans the search would
 * consider (cli_small_plan): the estimator alone, no search. */
static int small_plan_fits(const hpt_plan_opts *po, const cli_budgets *b, int disk, int lossy,
                           hpt_plan_opts *out, hpt_estimate *out_e) {
    hpt_plan_opts o;
    for (int i = 0, k; (k = cli_small_plan(po, disk, lossy, i, &o)) >= 0; i++) {
        hpt_estimate e;
        if (!k || hpt_plan_estimate(&o, &e) != HPT_OK) continue;
        int ok = 1;
        for (int t = 0; t < HPT_TIER_COUNT; t++)
            if (o.plan.budget_bytes[t] && tier_peak(&e, t) > o.plan.budget_bytes[t]) ok = 0;
        if (b->shared && tier_peak(&e, HPT_TIER_DEVICE) + tier_peak(&e, HPT_TIER_HOST) > b->shared) ok = 0;
        if (ok) {
            *out = o, *out_e = e;
            return 1;
        }
    }
    return 0;
}

int cli_fit_hints(const hpt_plan_opts *po, const cli_budgets *b, int lossy_given, int skip_first,
                  const char *lead, FILE *f) {
    const int have_dir = po->plan.offload_dir != NULL;
    /* the least change first: --plan auto as asked, then a disk tier, then lossy choices */
    const int v[4][2] = {{have_dir, lossy_given}, {1, lossy_given}, {have_dir, 1}, {1, 1}};
    for (int i = skip_first ? 1 : 0; i < 4; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= v[j][0] == v[i][0] && v[j][1] == v[i][1];
        hpt_plan_opts o;
        hpt_estimate e;
        if (dup || !small_plan_fits(po, b, v[i][0], v[i][1], &o, &e)) continue;
        /* that plan is in the search's space, so --plan auto finds it or a faster one */
        char fl[2300], pk[160];
        plan_words(&o, fl, sizeof fl);
        peaks_text(&e, pk, sizeof pk);
        fprintf(f, "%s--plan auto%s%s finds a plan that fits; one is %s (peaks %s)\n", lead,
                v[i][0] && !have_dir ? " --offload-dir DIR" : "", v[i][1] && !lossy_given ? " --allow lossy" : "",
                fl, pk);
        return 1;
    }
    if (po->B > 1 || po->accum > 1) { /* no micro-batch of B fits: one sequence per step may */
        hpt_plan_opts one = *po;
        one.B = 1, one.accum = 1;
        for (int i = 0; i < 4; i++) {
            hpt_plan_opts o;
            hpt_estimate e;
            if (!small_plan_fits(&one, b, v[i][0], v[i][1], &o, &e)) continue;
            char fl[2300], pk[160];
            plan_words(&o, fl, sizeof fl);
            peaks_text(&e, pk, sizeof pk);
            fprintf(f, "%sno plan at --batch %d fits; --batch 1 --plan auto%s%s finds one (%d tokens "
                    "per step); one is %s (peaks %s)\n", lead, po->B,
                    v[i][0] && !have_dir ? " --offload-dir DIR" : "",
                    v[i][1] && !lossy_given ? " --allow lossy" : "", po->T, fl, pk);
            return 1;
        }
    }
    char ram[32];
    fmt_b(ram, sizeof ram, (double)b->ram_avail);
    fprintf(f, "%sno plan fits even with --plan auto --offload-dir DIR --allow lossy%s%s%s\n", lead,
            b->shared ? " within this machine's free RAM (" : "", b->shared ? ram : "", b->shared ? ")" : "");
    return 0;
}
