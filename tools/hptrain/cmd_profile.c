/* cmd_profile.c: `hptrain profile TRACE --out FILE.svg`: reads a trace written by
 * `hptrain train --trace`, renders the picture (src/mem/profile.c) and prints the "memory
 * doctor": the peak and what it is made of, what dominates, the largest activation buffers at
 * the peak, per-phase figures, spikes, the RSS cross-check, and which options of today's
 * command line would lower the peak and by how much (figures from the estimator, never
 * guessed). Techniques that are planned but not built are named as such, never as flags. */
#include "cli.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char k_help[] =
    "usage: hptrain profile TRACE [--out FILE.svg] [--threshold PCT] [--top N]\n"
    "\n"
    "Reads a trace recorded by `hptrain train --trace TRACE` (JSON or CSV), draws the device\n"
    "memory over time as an SVG (stacked by category, phases shaded, steps marked, the peak and\n"
    "the budget line), and prints a plain-language summary: the peak and its breakdown, what\n"
    "dominates, the largest activation buffers at the peak, per-phase mean / max / min, spikes,\n"
    "the process RSS beside the accounted bytes, and which options would lower the peak.\n"
    "\n"
    "  --out FILE.svg    write the picture (default: no picture)\n"
    "  --threshold PCT   a spike is in-use memory above its phase's mean by more than PCT%\n"
    "                    (default 25)\n"
    "  --top N           activation buffers and spikes to list (default 8)\n";

static void fmt_bytes(char *buf, size_t n, double b) {
    if (b >= 1073741824.0) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    else if (b >= 1024.0) snprintf(buf, n, "%.1f KiB", b / 1024.0);
    else snprintf(buf, n, "%.0f B", b);
}

/* What each activation-arena buffer holds, in words. */
static const struct { const char *name, *what; } k_buf_words[] = {
    {"inputs", "input token ids (B,T)"},
    {"targets", "target token ids (B,T)"},
    {"encoded", "token + position embeddings (B,T,C)"},
    {"ln1", "first layernorm outputs (B,T,C)"},
    {"ln1_mean", "first layernorm means (B,T)"},
    {"ln1_rstd", "first layernorm inverse deviations (B,T)"},
    {"qkv", "query, key and value projections (B,T,3C)"},
    {"atty", "attention outputs before the projection (B,T,C)"},
    {"att", "attention probabilities (B,NH,T,T)"},
    {"res2", "residual stream after attention (B,T,C)"},
    {"ln2", "second layernorm outputs (B,T,C)"},
    {"ln2_mean", "second layernorm means (B,T)"},
    {"ln2_rstd", "second layernorm inverse deviations (B,T)"},
    {"fch", "MLP pre-activations (B,T,4C)"},
    {"fch_gelu", "MLP GELU outputs (B,T,4C)"},
    {"res3", "block outputs, the residual stream (B,T,C)"},
    {"lnf", "final layernorm output (B,T,C)"},
    {"lnf_mean", "final layernorm means (B,T)"},
    {"lnf_rstd", "final layernorm inverse deviations (B,T)"},
    {"logits", "logits, then their gradient in place (B,T,Vp)"},
    {"lse", "log-sum-exp of each logits row (B,T)"},
    {"losses", "per-token losses (B,T)"},
    {"dres", "backward scratch: gradient of the residual stream (B,T,C)"},
    {"dsmall", "backward scratch (B,T,C)"},
    {"dbig", "backward scratch: MLP and qkv gradients (B,T,4C)"},
    {"attscr", "backward scratch of attention (B,NH,T)"},
};

static const char *buf_words(const char *name) {
    for (size_t i = 0; i < sizeof k_buf_words / sizeof *k_buf_words; i++)
        if (name && !strcmp(name, k_buf_words[i].name)) return k_buf_words[i].what;
    return NULL;
}

/* One line on what a category is, for "what dominates". */
static void explain_category(int c, const hpt_trace_meta *m, double bytes) {
    double np = (double)m->num_params;
    switch (c) {
    case HPT_CAT_OPTIM:
        if (np > 0)
            printf("%.1f bytes per parameter: AdamW's two moments (m and v) in fp32", bytes / np);
        else
            printf("AdamW's two moments (m and v) in fp32");
        break;
    case HPT_CAT_PARAMS:
        if (np > 0) printf("%.1f bytes per parameter: the fp32 weights", bytes / np);
        else printf("the fp32 weights");
        break;
    case HPT_CAT_GRADS:
        if (np > 0) printf("%.1f bytes per parameter: one fp32 gradient per weight", bytes / np);
        else printf("one fp32 gradient per weight");
        break;
    case HPT_CAT_ACTS:
        printf("the activation arena: what the forward keeps for the backward, and the backward's "
               "scratch, planned for B=%d T=%d", m->B, m->T);
        break;
    case HPT_CAT_IO: printf("data buffers"); break;
    default: printf("kernel temporaries"); break;
    }
}

/* Techniques not built yet that would target a category: named, clearly marked. */
static void later_techniques(int c, double bytes) {
    (void)bytes;
    switch (c) {
    case HPT_CAT_PARAMS:
    case HPT_CAT_GRADS:
        printf("  later (planned, not yet available): bf16 weights would halve the parameters.\n");
        break;
    default: break;
    }
}

/* The memory techniques that exist, one at a time, on the recorded configuration: the
 * estimator's peak for each (the trace does not record the run's own technique flags, so the
 * base is the default configuration: flash attention, no recomputation, fp32 AdamW). */
static void technique_what_ifs(const hpt_plan_opts *po, double est_now, int has_plan) {
    static const char *const flags[] = {
        "--state-bits 8 --state-32bit-embeddings", "--state-bits 8", "--recompute selective",
        "--recompute full", "--head-chunk 128", "--act-offload host",
        "--recompute full --head-chunk 128", "--recompute full --act-offload host",
        "--fused-update", "--offload host --fused-update",
        "--offload disk --fused-update"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        hpt_plan_opts q = *po;
        switch (i) {
        case 0: q.adamw.state_bits = 8; q.adamw.state32_embeddings = 1; break;
        case 1: q.adamw.state_bits = 8; break;
        case 2: q.act.recompute = HPT_RECOMPUTE_SELECTIVE; break;
        case 3: q.act.recompute = HPT_RECOMPUTE_FULL; q.act.every = 1; break;
        case 4: q.act.head_chunk = 128; break;
        case 5: q.act.offload = HPT_OFFLOAD_HOST; break;
        case 6: q.act.recompute = HPT_RECOMPUTE_FULL; q.act.every = 1; q.act.head_chunk = 128; break;
        case 7: q.act.recompute = HPT_RECOMPUTE_FULL; q.act.every = 1; q.act.offload = HPT_OFFLOAD_HOST; break;
        default: /* the offload engine (docs/offload.md) */
            q.offload = hpt_offload_defaults();
            q.offload.fused = 1;
            q.offload.params = q.offload.optim = i == 8 ? HPT_TIER_DEVICE
                                                : i == 9 ? HPT_TIER_HOST : HPT_TIER_DISK;
            break;
        }
        hpt_estimate e;
        if (hpt_plan_estimate(&q, &e) != HPT_OK) continue;
        double pk = (double)e.peak_bytes[HPT_TIER_DEVICE];
        if (pk >= est_now) continue;
        char b1[32], b2[32], b3[32];
        fmt_bytes(b1, sizeof b1, pk);
        fmt_bytes(b2, sizeof b2, est_now - pk);
        printf("  %-42s peak %s (-%s, %.1f%% lower)", flags[i], b1, b2, 100.0 * (est_now - pk) / est_now);
        if (e.peak_bytes[HPT_TIER_HOST]) {
            fmt_bytes(b3, sizeof b3, (double)e.peak_bytes[HPT_TIER_HOST]);
            printf(", %s on the host", b3);
        }
        if (e.peak_bytes[HPT_TIER_DISK]) {
            fmt_bytes(b3, sizeof b3, (double)e.peak_bytes[HPT_TIER_DISK]);
            printf(", %s on disk", b3);
        }
        printf("\n");
    }
    if (!has_plan)
        printf("  (technique figures assume the default configuration; this trace is older than "
               "traces that record the run's own technique flags)\n");
}

typedef struct {
    const char *name;
    int n, layer_min, layer_max;
    uint64_t bytes;
} buf_group;

static int cmp_group(const void *pa, const void *pb) {
    const buf_group *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
    return strcmp(a->name ? a->name : "", b->name ? b->name : "");
}

static void print_arena(const hpt_profile_summary *s, int top) {
    char b1[32], b2[32];
    fmt_bytes(b1, sizeof b1, (double)s->peak_by_cat[HPT_CAT_ACTS]);
    fmt_bytes(b2, sizeof b2, (double)s->peak_arena_live_bytes);
    printf("\nactivations: the arena reserves %s; at the peak %s is live inside it in %zu buffers",
           b1, b2, s->n_peak_bufs);
    if (!s->n_peak_bufs) {
        printf(".\n");
        return;
    }
    buf_group *g = calloc(s->n_peak_bufs, sizeof *g);
    if (!g) {
        printf(".\n");
        return;
    }
    size_t ng = 0;
    for (size_t i = 0; i < s->n_peak_bufs; i++) {
        const hpt_profile_buf *pb = &s->peak_bufs[i];
        size_t k = 0;
        while (k < ng && !(g[k].name == pb->name || (g[k].name && pb->name && !strcmp(g[k].name, pb->name)))) k++;
        if (k == ng) g[ng++] = (buf_group){pb->name, 0, pb->layer, pb->layer, 0};
        g[k].n++;
        g[k].bytes += pb->bytes;
        if (pb->layer < g[k].layer_min) g[k].layer_min = pb->layer;
        if (pb->layer > g[k].layer_max) g[k].layer_max = pb->layer;
    }
    qsort(g, ng, sizeof *g, cmp_group);
    printf("; the largest:\n");
    for (size_t k = 0; k < ng && (int)k < top; k++) {
        const char *w = buf_words(g[k].name);
        fmt_bytes(b1, sizeof b1, (double)g[k].bytes);
        printf("  %-9s %10s  %5.1f%%  ", g[k].name ? g[k].name : "?", b1,
               100.0 * (double)g[k].bytes / (double)(s->peak_arena_live_bytes ? s->peak_arena_live_bytes : 1));
        if (g[k].n > 1 && g[k].layer_min >= 0)
            printf("%s of %d layers (%d..%d)", w ? w : "buffers", g[k].n, g[k].layer_min, g[k].layer_max);
        else if (g[k].layer_min >= 0)
            printf("%s of layer %d", w ? w : "buffer", g[k].layer_min);
        else
            printf("%s", w ? w : "buffer");
        putchar('\n');
    }
    if ((int)ng > top) printf("  ... and %zu more kinds of buffer\n", ng - (size_t)top);
    free(g);
}

/* Phases in the order they first appear in the trace. */
static int phase_order(const hpt_trace *tr, int order[HPT_PHASE_COUNT]) {
    int n = 0, seen[HPT_PHASE_COUNT] = {0};
    for (size_t i = 0; i < tr->n_events && n < HPT_PHASE_COUNT; i++) {
        int p = tr->events[i].phase;
        if (p < HPT_PHASE_COUNT && !seen[p]) {
            seen[p] = 1;
            order[n++] = p;
        }
    }
    return n;
}

static void print_phases(const hpt_trace *tr, const hpt_profile_summary *s) {
    char a[32], b[32], c[32], d[32], e[32], f[32], h[32];
    printf("\nper phase (device tier; \"in use\" counts the arena by what is live inside it):\n");
    printf("  %-8s %8s %8s   %-30s   %-30s   %s\n", "phase", "time", "events",
           "accounted mean / min / max", "in use mean / min / max", "arena live mean / max");
    int order[HPT_PHASE_COUNT], np = phase_order(tr, order);
    for (int k = 0; k < np; k++) {
        int p = order[k];
        const hpt_profile_phase *ph = &s->phase[p], *u = &s->in_use[p];
        fmt_bytes(a, sizeof a, ph->mean_bytes);
        fmt_bytes(b, sizeof b, (double)ph->min_bytes);
        fmt_bytes(c, sizeof c, (double)ph->max_bytes);
        fmt_bytes(d, sizeof d, u->mean_bytes);
        fmt_bytes(e, sizeof e, (double)u->min_bytes);
        fmt_bytes(f, sizeof f, (double)u->max_bytes);
        char acc[112], use[112];
        snprintf(acc, sizeof acc, "%s / %s / %s", a, b, c);
        snprintf(use, sizeof use, "%s / %s / %s", d, e, f);
        fmt_bytes(a, sizeof a, ph->arena_mean_bytes);
        fmt_bytes(h, sizeof h, (double)ph->arena_max_bytes);
        printf("  %-8s %7.2fs %8llu   %-30s   %-30s   %s / %s\n", hpt_phase_name((hpt_phase)p),
               ph->seconds, (unsigned long long)ph->n_events, acc, use, a, h);
    }
}

static int cmp_spike(const void *pa, const void *pb) {
    const hpt_profile_spike *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
    return a->t < b->t ? -1 : a->t > b->t;
}

static void print_spikes(const hpt_profile_summary *s, int top) {
    char b1[32], b2[32];
    printf("\nspikes (in use above its phase's mean by more than %g%%): ", s->spike_pct);
    if (!s->n_spikes) {
        printf("none.\n");
        return;
    }
    hpt_profile_spike *sp = malloc(s->n_spikes * sizeof *sp);
    if (!sp) return;
    memcpy(sp, s->spikes, s->n_spikes * sizeof *sp);
    qsort(sp, s->n_spikes, sizeof *sp, cmp_spike);
    /* the most common buffer at the top of a spike says what drives them */
    const char *common = NULL;
    size_t best = 0;
    for (size_t i = 0; i < s->n_spikes; i++) {
        size_t c = 0;
        for (size_t j = 0; j < s->n_spikes; j++)
            c += sp[j].name && sp[i].name && !strcmp(sp[i].name, sp[j].name);
        if (c > best) { best = c; common = sp[i].name; }
    }
    printf("%zu", s->n_spikes);
    if (s->max_step > 0) printf(" over %lld steps", (long long)s->max_step);
    if (common && s->n_spikes == 1) printf(", right after '%s' is born", common);
    else if (common) printf("; %zu of them peak right after '%s' is born", best, common);
    printf(". The highest:\n");
    for (size_t i = 0; i < s->n_spikes && (int)i < top; i++) {
        fmt_bytes(b1, sizeof b1, (double)sp[i].bytes);
        fmt_bytes(b2, sizeof b2, sp[i].threshold_bytes);
        printf("  %10s at %8.3fs (step %lld, %s", b1, sp[i].t, (long long)sp[i].step,
               hpt_phase_name((hpt_phase)sp[i].phase));
        if (sp[i].layer >= 0) printf(", layer %d", sp[i].layer);
        printf("), above %s for %.3fs", b2, sp[i].duration_s);
        if (sp[i].name) printf(", after '%s'", sp[i].name);
        putchar('\n');
    }
    free(sp);
}

static void print_rss(const hpt_trace *tr, const hpt_profile_summary *s) {
    const hpt_trace_meta *m = &tr->meta;
    char b1[32], b2[32], b3[32], b4[32];
    printf("\nRSS cross-check: ");
    if (!m->rss_peak_bytes || !m->rss_baseline_bytes || m->rss_peak_bytes <= m->rss_baseline_bytes) {
        printf("the trace has no RSS figures.\n");
        return;
    }
    double growth = (double)(m->rss_peak_bytes - m->rss_baseline_bytes);
    double acc = (double)s->peak_bytes[HPT_TIER_DEVICE];
    fmt_bytes(b1, sizeof b1, (double)m->rss_peak_bytes);
    fmt_bytes(b2, sizeof b2, (double)m->rss_baseline_bytes);
    fmt_bytes(b3, sizeof b3, growth);
    printf("process peak RSS %s, %s at start: it grew %s. The accounted peak explains %.1f%% of that "
           "growth (target: at least 95%%).", b1, b2, b3, 100.0 * acc / growth);
    if (acc < growth) {
        fmt_bytes(b4, sizeof b4, growth - acc);
        fmt_bytes(b1, sizeof b1, (double)tr->n_events * (double)sizeof(hpt_mem_event));
        printf(" The other %s is not hptrain's tensors: the libraries' own buffers and code pages "
               "(oneDNN, OpenMP, libc), allocator overhead, and bookkeeping such as this trace's "
               "events (%s).", b4, b1);
    } else {
        printf(" Accounted bytes are all resident (each allocation is zero-filled, so every page is "
               "touched).");
    }
    putchar('\n');
}

/* The options of today's command line that change the peak, with the estimator's figures.
 * dominant: the largest category at the measured peak, -1 when nothing was allocated. */
static void print_options(const hpt_trace *tr, const hpt_profile_summary *s, int dominant) {
    const hpt_trace_meta *m = &tr->meta;
    char b1[32], b2[32];
    printf("\nwhat would lower the peak:\n");
    if (!m->cfg.L || m->B < 1 || m->T < 1) {
        printf("  (the trace does not name the model shape and batch, so nothing can be estimated)\n");
        if (dominant >= 0) later_techniques(dominant, (double)s->peak_by_cat[dominant]);
        return;
    }
    hpt_plan_opts po = hpt_plan_defaults();
    po.cfg = m->cfg;
    po.B = m->B;
    po.T = m->T;
    po.training = 1;
    po.has_val = m->has_val;
    po.procs = m->procs; /* with --zero 1 or 2 each process's bytes differ */
    po.rank = m->rank;
    if (m->has_plan) { /* the run's own techniques: the estimate is of the run as it was */
        char words[sizeof m->plan];
        snprintf(words, sizeof words, "%s", m->plan);
        if (hpt_plan_parse_flags(&po.plan, words) != HPT_OK) {
            printf("  (the trace's plan '%s' cannot be read: %s)\n", m->plan, hpt_last_error());
            return;
        }
        printf("  the run's plan: %s\n", *m->plan ? m->plan : "the default (no technique flags)");
        if (m->procs > 1) printf("  process %d of %d (the estimates are this process's)\n", m->rank, m->procs);
    }
    hpt_estimate now;
    if (hpt_plan_estimate(&po, &now) != HPT_OK) {
        printf("  (the estimator refused this configuration: %s)\n", hpt_last_error());
        return;
    }
    double measured = (double)s->peak_bytes[HPT_TIER_DEVICE];
    double est_now = (double)now.peak_bytes[HPT_TIER_DEVICE];
    fmt_bytes(b1, sizeof b1, est_now);
    fmt_bytes(b2, sizeof b2, measured);
    if (measured > 0)
        printf("  the estimator gives %s for this run as recorded (measured %s, %+.2f%%)\n", b1, b2,
               100.0 * (est_now - measured) / measured);
    else
        printf("  the estimator gives %s for this configuration\n", b1);
    if (dominant < 0) /* nothing was measured: the estimate's largest category */
        for (int c = dominant = 0; c < HPT_CAT_COUNT; c++)
            if (now.bytes[HPT_TIER_DEVICE][c] > now.bytes[HPT_TIER_DEVICE][dominant]) dominant = c;
    typedef struct { const char *flag; int B, T; } what_if;
    what_if tries[4];
    int nt = 0;
    if (m->B > 1) tries[nt++] = (what_if){"--batch", m->B / 2, m->T};
    if (m->B > 2) tries[nt++] = (what_if){"--batch", 1, m->T};
    if (m->T > 1) tries[nt++] = (what_if){"--seq", m->B, m->T / 2};
    if (m->T > 2 && m->B > 1) tries[nt++] = (what_if){"--batch/--seq", m->B / 2, m->T / 2};
    for (int i = 0; i < nt; i++) {
        hpt_plan_opts q = po;
        q.B = tries[i].B;
        q.T = tries[i].T;
        hpt_estimate e;
        if (hpt_plan_estimate(&q, &e) != HPT_OK) continue;
        double pk = (double)e.peak_bytes[HPT_TIER_DEVICE];
        fmt_bytes(b1, sizeof b1, pk);
        fmt_bytes(b2, sizeof b2, est_now - pk);
        char flag[64];
        if (!strcmp(tries[i].flag, "--batch")) snprintf(flag, sizeof flag, "--batch %d", q.B);
        else if (!strcmp(tries[i].flag, "--seq")) snprintf(flag, sizeof flag, "--seq %d", q.T);
        else snprintf(flag, sizeof flag, "--batch %d --seq %d", q.B, q.T);
        printf("  %-22s peak %s (-%s, %.1f%% lower; %d tokens per step instead of %d)\n", flag, b1,
               b2, 100.0 * (est_now - pk) / est_now, q.B * q.T, m->B * m->T);
    }
    technique_what_ifs(&po, est_now, m->has_plan);
    double fixed = (double)(now.bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS] + now.bytes[HPT_TIER_DEVICE][HPT_CAT_GRADS]);
    fmt_bytes(b1, sizeof b1, fixed);
    printf("  parameters and gradients (%s, %.0f%% of the peak) depend on neither --batch nor "
           "--seq: --fused-update keeps one block's gradients, --offload moves the blocks' "
           "weights, gradients and optimizer state to the host or disk.\n", b1,
           100.0 * fixed / est_now);
    uint64_t budget = m->budget_bytes[HPT_TIER_DEVICE];
    if (budget) {
        hpt_plan_fit fit;
        if (hpt_plan_fit_budget(&po, budget, &fit) == HPT_OK) {
            fmt_bytes(b1, sizeof b1, (double)budget);
            if (fit.fits) printf("  it fits the --memory budget of %s", b1);
            else printf("  it does not fit the --memory budget of %s", b1);
            if (fit.max_B > 0) printf("; the largest --batch at --seq %d that fits is %d", m->T, fit.max_B);
            if (fit.max_T > 0) printf("; the largest --seq at --batch %d is %d", m->B, fit.max_T);
            if (!fit.max_B && !fit.max_T_B1) printf("; not even --batch 1 --seq 1 fits");
            printf(".\n");
        }
        hpt_plan_opts ap = po; /* whole plans for the run's budgets, with predicted step times */
        for (int t = 0; t < HPT_TIER_COUNT; t++) ap.budget_bytes[t] = m->budget_bytes[t];
        cli_auto_advice("profile", &ap, stdout);
    }
    later_techniques(dominant, measured > 0 ? (double)s->peak_by_cat[dominant]
                                            : (double)now.bytes[HPT_TIER_DEVICE][dominant]);
}

int cmd_profile(int argc, char **argv) {
    static const struct option longopts[] = {{"out", 1, 0, 'o'}, {"threshold", 1, 0, 'p'},
                                             {"top", 1, 0, 'n'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *out = NULL;
    double pct = 25.0;
    long top = 8;
    int opt_rc = 0, c;
    while ((c = cli_getopt("profile", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        int r = 0;
        switch (c) {
        case 'o': out = optarg; break;
        case 'p': r = cli_parse_float("profile", "--threshold", optarg, 0, 1e6, &pct); break;
        case 'n': r = cli_parse_long("profile", "--top", optarg, 1, 1000, &top); break;
        }
        if (r) return r;
    }
    if (optind >= argc) return cli_usage_error("profile", "a trace file is required");
    if (optind + 1 < argc) return cli_unexpected_argument("profile", argv[optind + 1]);
    const char *path = argv[optind];
    hpt_trace *tr;
    hpt_status s = hpt_trace_load(path, &tr);
    if (s != HPT_OK) {
        size_t len = strlen(path);
        if (s == HPT_ERR_FORMAT && len > 6 && !strcmp(path + len - 6, ".jsonl"))
            return cli_error("%s looks like a --log file, which has no timeline; record one with "
                             "hptrain train --trace FILE.json", path);
        return cli_lib_error(s, "reading the trace");
    }
    hpt_profile_summary sum;
    s = hpt_profile_summarize(tr->events, tr->n_events, pct, &sum);
    if (s != HPT_OK) {
        hpt_trace_free(tr);
        return cli_lib_error(s, "summarizing the trace");
    }
    int rc = 0;
    if (out) {
        tr->arch_label = cli_arch_label(tr->meta.cfg.arch);
        s = hpt_profile_render_svg(tr, &sum, out);
        if (s != HPT_OK) rc = cli_lib_error(s, "drawing the picture");
    }
    const hpt_trace_meta *m = &tr->meta;
    char b1[32], b2[32];

    printf("hptrain profile: %s\n", path);
    if (m->cfg.L)
        printf("  %s L=%d C=%d NH=%d V=%d (%.2fM parameters), B=%d T=%d, %lld steps, %d threads\n",
               cli_arch_label(m->cfg.arch), m->cfg.L, m->cfg.C, m->cfg.NH,
               m->cfg.V, (double)m->num_params / 1e6, m->B, m->T, (long long)m->steps, m->threads);
    printf("  %zu events over %.2f s:", tr->n_events, sum.duration_s);
    int porder[HPT_PHASE_COUNT], np = phase_order(tr, porder);
    for (int k = 0; k < np; k++)
        printf("%s %s %.2f s", k ? "," : "", hpt_phase_name((hpt_phase)porder[k]), sum.phase[porder[k]].seconds);
    printf("\n");
    if (out && rc == 0) printf("  picture: %s\n", out);
    if (!tr->n_events) {
        printf("\nthe trace has no events: nothing was allocated while recording. (The trainer refuses a "
               "run whose estimated peak does not fit the budget before it allocates anything.)\n");
        if (m->budget_bytes[HPT_TIER_DEVICE]) {
            fmt_bytes(b1, sizeof b1, (double)m->budget_bytes[HPT_TIER_DEVICE]);
            printf("the device budget was %s.\n", b1);
        }
        print_options(tr, &sum, -1);
        hpt_profile_summary_free(&sum);
        hpt_trace_free(tr);
        return rc;
    }

    double peak = (double)sum.peak_bytes[HPT_TIER_DEVICE];
    fmt_bytes(b1, sizeof b1, peak);
    printf("\npeak: %s accounted on the device tier, at %.3f s (step %lld, %s, ", b1, sum.peak_t,
           (long long)sum.peak_step, hpt_phase_name((hpt_phase)sum.peak_phase));
    if (sum.peak_layer >= 0) printf("layer %d)", sum.peak_layer);
    else printf("outside the blocks)");
    if (m->budget_bytes[HPT_TIER_DEVICE]) {
        fmt_bytes(b2, sizeof b2, (double)m->budget_bytes[HPT_TIER_DEVICE]);
        printf(", %.0f%% of the %s budget", 100.0 * peak / (double)m->budget_bytes[HPT_TIER_DEVICE], b2);
    }
    printf("\n");
    int order[HPT_CAT_COUNT];
    for (int k = 0; k < HPT_CAT_COUNT; k++) order[k] = k;
    for (int i = 1; i < HPT_CAT_COUNT; i++)
        for (int j = i; j > 0 && sum.peak_by_cat[order[j]] > sum.peak_by_cat[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (int k = 0; k < HPT_CAT_COUNT; k++) {
        int cat = order[k];
        if (!sum.peak_by_cat[cat]) continue;
        fmt_bytes(b1, sizeof b1, (double)sum.peak_by_cat[cat]);
        printf("  %-10s %11s  %5.1f%%", hpt_category_name((hpt_category)cat), b1,
               100.0 * (double)sum.peak_by_cat[cat] / peak);
        if (cat == HPT_CAT_ACTS) {
            fmt_bytes(b2, sizeof b2, (double)sum.peak_arena_live_bytes);
            printf("  (arena; %s live inside it at this moment)", b2);
        }
        printf("\n");
    }
    if (sum.peak_unrecorded_bytes) {
        fmt_bytes(b1, sizeof b1, (double)sum.peak_unrecorded_bytes);
        printf("  %-10s %11s  %5.1f%%  (live before recording began)\n", "unrecorded", b1,
               100.0 * (double)sum.peak_unrecorded_bytes / peak);
    }
    for (int t = 1; t < HPT_TIER_COUNT; t++)
        if (sum.peak_bytes[t]) {
            fmt_bytes(b1, sizeof b1, (double)sum.peak_bytes[t]);
            printf("  (the %s tier peaked at %s)\n", hpt_tier_name((hpt_tier)t), b1);
        }

    int dominant = order[0];
    printf("\nwhat dominates: %s, %.0f%% of the peak: ",
           dominant == HPT_CAT_OPTIM ? "optimizer state" : dominant == HPT_CAT_ACTS ? "activation memory"
           : dominant == HPT_CAT_PARAMS ? "the parameters" : dominant == HPT_CAT_GRADS ? "the gradients"
           : hpt_category_name((hpt_category)dominant),
           100.0 * (double)sum.peak_by_cat[dominant] / peak);
    explain_category(dominant, m, (double)sum.peak_by_cat[dominant]);
    printf(".\n");
    if (sum.n_refused) {
        for (size_t i = 0; i < tr->n_events; i++)
            if (tr->events[i].kind == HPT_EV_REFUSED) {
                const hpt_mem_event *e = &tr->events[i];
                fmt_bytes(b1, sizeof b1, (double)e->bytes);
                printf("%llu allocation(s) refused; the first: %s of %s on the %s tier at step %lld "
                       "(%s), with %s live\n", (unsigned long long)sum.n_refused, b1,
                       hpt_category_name((hpt_category)e->category), hpt_tier_name((hpt_tier)e->tier),
                       (long long)e->step, hpt_phase_name((hpt_phase)e->phase),
                       (fmt_bytes(b2, sizeof b2, (double)e->tier_live_bytes), b2));
                break;
            }
    }

    if (sum.peak_by_cat[HPT_CAT_ACTS] || sum.n_peak_bufs) print_arena(&sum, (int)top);
    print_phases(tr, &sum);
    print_spikes(&sum, (int)top < 5 ? (int)top : 5);
    print_rss(tr, &sum);
    print_options(tr, &sum, dominant);

    hpt_profile_summary_free(&sum);
    hpt_trace_free(tr);
    return rc;
}
