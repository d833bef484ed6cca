/* profile_svg.c: the SVG picture of a trace: the device tier's accounted bytes over time,
 * stacked by category (the activation arena split into what is live inside it and what is
 * reserved but free), phases shaded, steps marked, the peak, the budget and the process RSS
 * growth drawn as lines, and a legend.
 *
 * Invariants: the picture replays the events with the summary's replay (prof_replay_apply);
 * each column's stack adds up to the device tier's accounted total at its moment (bytes live
 * before recording began show as "unrecorded"); each pixel column shows the highest moment
 * inside it, so a peak narrower than a pixel is never lost; the file is written under a
 * temporary name and renamed (prof_out_begin / prof_out_end). Nothing here prints: the command
 * line does (cmd_profile.c). */
#include "mem/profile_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the picture ---------------------------------------------------------------------------- */

/* Series of the stacked area, bottom to top. The arena (activation category) is split into
 * what is live inside it and what is reserved but free at that moment. */
enum { S_PARAMS, S_GRADS, S_OPTIM, S_IO, S_WORK, S_UNREC, S_ACTS_LIVE, S_ACTS_FREE, N_SERIES };
static const char *const k_series_name[N_SERIES] = {
    "params", "grads", "optim", "io", "workspace", "unrecorded (live before recording)",
    "activations live (arena)", "activation arena, reserved but free"};
static const char *const k_series_color[N_SERIES] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2",
                                                     "#59a14f", "#bab0ac", "#edc948", "#f6e4a3"};
static const char *const k_phase_color[HPT_PHASE_COUNT] = {"#eef3fa", "#e6f4e6", "#f3e8f6",
                                                           "#fbe9e9", "#fdf1d6", "#e9e9e9"};

typedef struct {
    double v[N_SERIES];
    uint64_t total, arena;
} column;

static void state_of(const prof_replay *r, column *c) {
    const int64_t *lv = r->live[HPT_TIER_DEVICE];
    uint64_t acts = prof_clamp0(lv[HPT_CAT_ACTS]);
    uint64_t live = r->arena_live < acts ? r->arena_live : acts;
    c->v[S_PARAMS] = (double)prof_clamp0(lv[HPT_CAT_PARAMS]);
    c->v[S_GRADS] = (double)prof_clamp0(lv[HPT_CAT_GRADS]);
    c->v[S_OPTIM] = (double)prof_clamp0(lv[HPT_CAT_OPTIM]);
    c->v[S_IO] = (double)prof_clamp0(lv[HPT_CAT_IO]);
    c->v[S_WORK] = (double)prof_clamp0(lv[HPT_CAT_WORKSPACE]);
    c->v[S_ACTS_LIVE] = (double)live;
    c->v[S_ACTS_FREE] = (double)(acts - live);
    double sum = 0;
    for (int k = 0; k < N_SERIES; k++)
        if (k != S_UNREC) sum += c->v[k];
    c->total = r->total[HPT_TIER_DEVICE];
    c->v[S_UNREC] = (double)c->total > sum ? (double)c->total - sum : 0.0;
    c->arena = r->arena_live;
}

static int col_better(const column *a, const column *b) {
    return a->total > b->total || (a->total == b->total && a->arena > b->arena);
}

/* A "nice" tick step (1, 2 or 5 times a power of ten) giving about n ticks over span. */
static double nice_step(double span, int n) {
    if (!(span > 0)) return 1;
    double raw = span / n, p = pow(10.0, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

static void fmt_bytes(char *buf, size_t len, double b) {
    if (b >= 1073741824.0) snprintf(buf, len, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, len, "%.1f MiB", b / 1048576.0);
    else if (b >= 1024.0) snprintf(buf, len, "%.1f KiB", b / 1024.0);
    else snprintf(buf, len, "%.0f B", b);
}

hpt_status hpt_profile_render_svg(const hpt_trace *tr, const hpt_profile_summary *s,
                                  const char *path) {
    enum { W = 1180, H = 640, X0 = 90, X1 = 840, Y0 = 70, Y1 = 560, NC = X1 - X0 };
    const hpt_mem_event *ev = tr->events;
    size_t n = tr->n_events;
    const hpt_trace_meta *m = &tr->meta;
    column *cols = calloc(NC, sizeof *cols);
    if (!cols) return hpt_fail(HPT_ERR_OOM, "rendering %s", path);
    double tmax = n ? ev[n - 1].t : 0.0;
    if (!(tmax > 0)) tmax = 1e-3;

    /* each pixel column shows the highest moment inside it (accounted total, then arena
     * live), or the state carried in from the left when no event falls in it */
    prof_replay r;
    memset(&r, 0, sizeof r);
    column cur, best;
    memset(&cur, 0, sizeof cur);
    best = cur;
    int col = 0;
    for (size_t i = 0; i < n; i++) {
        /* clamped as a double: a trace read from a file may hold times past the last event's
         * (or not finite), whose column would not fit an int */
        double x = ev[i].t / tmax * NC;
        int c = x >= (double)NC ? NC - 1 : x > 0 ? (int)x : 0;
        while (col < c) {
            cols[col++] = best;
            best = cur;
        }
        prof_replay_apply(&r, &ev[i]);
        state_of(&r, &cur);
        if (col_better(&cur, &best) || i == 0) best = cur;
    }
    while (col < NC) {
        cols[col++] = best;
        best = cur;
    }
    free(r.bufs);

    /* vertical scale: the peak, the budget when it is not far above it, RSS growth */
    double peak = (double)s->peak_bytes[HPT_TIER_DEVICE];
    double budget = (double)m->budget_bytes[HPT_TIER_DEVICE];
    double rss_growth = m->rss_peak_bytes > m->rss_baseline_bytes && m->rss_baseline_bytes
                            ? (double)(m->rss_peak_bytes - m->rss_baseline_bytes) : 0.0;
    double ymax = peak;
    if (budget > 0 && budget <= 3 * peak) ymax = fmax(ymax, budget);
    if (rss_growth > 0 && rss_growth <= 3 * peak) ymax = fmax(ymax, rss_growth);
    if (!(ymax > 0)) ymax = 1;
    ymax *= 1.08;
    const char *unit = ymax >= 2.0 * 1073741824.0 ? "GiB" : ymax >= 2.0 * 1048576.0 ? "MiB" : "KiB";
    double ud = unit[0] == 'G' ? 1073741824.0 : unit[0] == 'M' ? 1048576.0 : 1024.0;
#define XS(t) (X0 + (t) / tmax * (double)NC)
#define YS(b) (Y1 - (b) / ymax * (double)(Y1 - Y0))

    prof_out o;
    hpt_status st = prof_out_begin(&o, path);
    if (st != HPT_OK) {
        free(cols);
        return st;
    }
    FILE *f = o.f;
    char b1[32], b2[32];
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" font-size=\"12\">\n", W, H, W, H);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fmt_bytes(b1, sizeof b1, peak);
    fprintf(f, "<text x=\"%d\" y=\"24\" font-size=\"16\" font-weight=\"bold\">hptrain: device memory over time",
            X0);
    if (m->cfg.L)
        fprintf(f, " (%s%sL=%d C=%d NH=%d, B=%d T=%d)", tr->arch_label ? tr->arch_label : "",
                tr->arch_label ? " " : "", m->cfg.L, m->cfg.C, m->cfg.NH, m->B, m->T);
    fputs("</text>\n", f);
    fprintf(f, "<text x=\"%d\" y=\"44\" fill=\"#444\">accounted peak %s; %zu events over %.2f s, %lld steps",
            X0, b1, n, n ? ev[n - 1].t : 0.0, (long long)s->max_step);
    if (rss_growth > 0) {
        fmt_bytes(b2, sizeof b2, rss_growth);
        fprintf(f, "; process RSS grew %s above its start (%.0f%% accounted)", b2, 100.0 * peak / rss_growth);
    }
    fputs("</text>\n", f);

    /* phases shaded: one rectangle per run of events in the same phase */
    fprintf(f, "<g class=\"phases\">\n");
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && ev[j].phase == ev[i].phase) j++;
        double ta = i == 0 ? 0.0 : ev[i].t, tb = j < n ? ev[j].t : tmax;
        int ph = ev[i].phase < HPT_PHASE_COUNT ? ev[i].phase : 0;
        double xa = XS(ta), xb = XS(tb);
        if (xb - xa < 0.5) xb = xa + 0.5;
        fprintf(f, "<rect class=\"phase\" data-phase=\"%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/>\n",
                hpt_phase_name((hpt_phase)ph), xa, Y0, xb - xa, Y1 - Y0, k_phase_color[ph]);
        i = j;
    }
    fprintf(f, "</g>\n");

    /* steps: a light line where each step's first event is, labels for a few */
    int64_t nsteps = s->max_step;
    int64_t every = nsteps > 40 ? (nsteps + 39) / 40 : 1;
    int64_t label_every = nsteps > 10 ? (nsteps + 9) / 10 : 1;
    fprintf(f, "<g class=\"steps\" stroke=\"#888\" stroke-width=\"0.6\" stroke-opacity=\"0.5\">\n");
    int64_t last = 0;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].step <= last || ev[i].phase == HPT_PHASE_SETUP) continue;
        last = ev[i].step;
        if (last % every && last != 1) continue;
        double x = XS(ev[i].t);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\"/>", x, Y0, x, Y1);
        if (last % label_every == 0 || last == 1)
            fprintf(f, "<text x=\"%.2f\" y=\"%d\" font-size=\"10\" fill=\"#666\" stroke=\"none\" "
                    "text-anchor=\"middle\">%lld</text>", x, Y0 - 4, (long long)last);
        fputc('\n', f);
    }
    if (nsteps > 0)
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"10\" fill=\"#666\" stroke=\"none\" "
                "text-anchor=\"end\">step</text>\n", X0 - 6, Y0 - 4);
    fprintf(f, "</g>\n");

    /* the stacked areas */
    double base[NC];
    for (int c = 0; c < NC; c++) base[c] = 0;
    int drawn[N_SERIES] = {0};
    fprintf(f, "<g class=\"series\">\n");
    for (int k = 0; k < N_SERIES; k++) {
        int any = 0;
        for (int c = 0; c < NC; c++) any |= cols[c].v[k] > 0;
        if (k == S_UNREC && !any) continue; /* only when recording began late */
        drawn[k] = 1;
        fprintf(f, "<path class=\"area\" data-series=\"%s\" fill=\"%s\" stroke=\"none\"%s d=\"M%d %.2f",
                k_series_name[k], k_series_color[k],
                k == S_ACTS_FREE ? " fill-opacity=\"0.9\"" : "", X0, YS(base[0]));
        for (int c = 0; c < NC; c++) {
            double top = base[c] + cols[c].v[k];
            fprintf(f, " L%d %.2f L%d %.2f", X0 + c, YS(top), X0 + c + 1, YS(top));
        }
        for (int c = NC - 1; c >= 0; c--) fprintf(f, " L%d %.2f L%d %.2f", X0 + c + 1, YS(base[c]), X0 + c, YS(base[c]));
        fputs(" Z\"/>\n", f);
        for (int c = 0; c < NC; c++) base[c] += cols[c].v[k];
    }
    fprintf(f, "</g>\n");

    /* axes, ticks and units */
    fprintf(f, "<g class=\"axes\" stroke=\"#333\" stroke-width=\"1\">"
            "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/><line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\"/></g>\n",
            X0, Y1, X1, Y1, X0, Y0, X0, Y1);
    double ys = nice_step(ymax / ud, 6);
    for (double v = 0; v <= ymax / ud + 1e-9; v += ys) {
        double y = YS(v * ud);
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#ccc\" stroke-width=\"0.5\"/>"
                "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\">%g</text>\n",
                X0, y, X1, y, X0 - 6, y + 4, v);
    }
    double xs = nice_step(tmax, 8);
    for (double v = 0; v <= tmax + 1e-12; v += xs) {
        double x = XS(v);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/>"
                "<text x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">%g</text>\n", x, Y1, x, Y1 + 5, x, Y1 + 18, v);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">time since recording began (s)</text>\n",
            (X0 + X1) / 2, Y1 + 38);
    fprintf(f, "<text transform=\"translate(24 %d) rotate(-90)\" text-anchor=\"middle\">device memory, "
            "accounted (%s)</text>\n", (Y0 + Y1) / 2, unit);

    /* budget and RSS lines */
    if (budget > 0) {
        fmt_bytes(b1, sizeof b1, budget);
        if (budget <= ymax) {
            fprintf(f, "<g class=\"budget\"><line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#c00\" "
                    "stroke-width=\"1.5\" stroke-dasharray=\"8 4\"/><text x=\"%d\" y=\"%.2f\" fill=\"#c00\" "
                    "text-anchor=\"end\">budget %s</text></g>\n",
                    X0, YS(budget), X1, YS(budget), X1 - 4, YS(budget) - 5, b1);
        } else {
            fprintf(f, "<g class=\"budget\"><text x=\"%d\" y=\"%d\" fill=\"#c00\" text-anchor=\"end\">"
                    "budget %s (above the plot)</text></g>\n", X1 - 4, Y0 + 14, b1);
        }
    }
    if (rss_growth > 0 && rss_growth <= ymax) {
        fmt_bytes(b1, sizeof b1, rss_growth);
        /* the label on the side away from the peak's label */
        int left = n && XS(s->peak_t) > (X0 + X1) / 2;
        fprintf(f, "<g class=\"rss\"><line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#555\" "
                "stroke-width=\"1\" stroke-dasharray=\"2 3\"/><text x=\"%d\" y=\"%.2f\" fill=\"#555\" "
                "text-anchor=\"%s\">process RSS peak above its start: %s</text></g>\n",
                X0, YS(rss_growth), X1, YS(rss_growth), left ? X0 + 6 : X1 - 6, YS(rss_growth) - 5,
                left ? "start" : "end", b1);
    }

    /* the peak */
    if (n) {
        double x = XS(s->peak_t), y = YS(peak);
        fmt_bytes(b1, sizeof b1, peak);
        fprintf(f, "<g class=\"peak\"><line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%d\" stroke=\"#000\" "
                "stroke-dasharray=\"3 3\"/><circle cx=\"%.2f\" cy=\"%.2f\" r=\"4\" fill=\"#000\"/>",
                x, y, x, Y1, x, y);
        int right = x > (X0 + X1) / 2;
        fprintf(f, "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"%s\" font-weight=\"bold\">peak %s",
                right ? x - 8 : x + 8, fmax(y - 8, (double)Y0 + 12), right ? "end" : "start", b1);
        fprintf(f, " (step %lld, %s", (long long)s->peak_step, hpt_phase_name((hpt_phase)s->peak_phase));
        if (s->peak_layer >= 0) fprintf(f, ", layer %d", s->peak_layer);
        fputs(")</text></g>\n", f);
    }

    /* legend: series top first, with their bytes at the peak, then the phases present */
    int ly = Y0 + 4;
    fprintf(f, "<g class=\"legend\">\n<text x=\"%d\" y=\"%d\" font-weight=\"bold\">at the peak</text>\n", X1 + 20, ly);
    ly += 10;
    double at_peak[N_SERIES] = {0};
    at_peak[S_PARAMS] = (double)s->peak_by_cat[HPT_CAT_PARAMS];
    at_peak[S_GRADS] = (double)s->peak_by_cat[HPT_CAT_GRADS];
    at_peak[S_OPTIM] = (double)s->peak_by_cat[HPT_CAT_OPTIM];
    at_peak[S_IO] = (double)s->peak_by_cat[HPT_CAT_IO];
    at_peak[S_WORK] = (double)s->peak_by_cat[HPT_CAT_WORKSPACE];
    at_peak[S_UNREC] = (double)s->peak_unrecorded_bytes;
    double acts_pk = (double)s->peak_by_cat[HPT_CAT_ACTS];
    at_peak[S_ACTS_LIVE] = fmin((double)s->peak_arena_live_bytes, acts_pk);
    at_peak[S_ACTS_FREE] = acts_pk - at_peak[S_ACTS_LIVE];
    for (int k = N_SERIES - 1; k >= 0; k--) {
        if (!drawn[k]) continue;
        fmt_bytes(b1, sizeof b1, at_peak[k]);
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"#666\" stroke-width=\"0.5\"/>"
                "<text x=\"%d\" y=\"%d\">%s</text><text x=\"%d\" y=\"%d\" fill=\"#555\">%s</text>\n",
                X1 + 20, ly, k_series_color[k], X1 + 40, ly + 11, k_series_name[k], X1 + 40, ly + 25, b1);
        ly += 36;
    }
    ly += 8;
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">phases</text>\n", X1 + 20, ly);
    ly += 10;
    int seen[HPT_PHASE_COUNT] = {0}; /* in the order the phases first appear */
    for (size_t i = 0; i < n; i++) {
        int p = ev[i].phase < HPT_PHASE_COUNT ? ev[i].phase : 0;
        if (seen[p]) continue;
        seen[p] = 1;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\" stroke=\"#999\" stroke-width=\"0.5\"/>"
                "<text x=\"%d\" y=\"%d\">%s</text>\n", X1 + 20, ly, k_phase_color[p], X1 + 40, ly + 11,
                hpt_phase_name((hpt_phase)p));
        ly += 20;
    }
    ly += 8;
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#000\" stroke-dasharray=\"3 3\"/>"
            "<text x=\"%d\" y=\"%d\">the peak</text>\n", X1 + 20, ly + 7, X1 + 34, ly + 7, X1 + 40, ly + 11);
    ly += 20;
    if (budget > 0) {
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#c00\" stroke-width=\"1.5\" "
                "stroke-dasharray=\"8 4\"/><text x=\"%d\" y=\"%d\">budget</text>\n",
                X1 + 20, ly + 7, X1 + 34, ly + 7, X1 + 40, ly + 11);
        ly += 20;
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#888\" stroke-width=\"0.6\"/>"
            "<text x=\"%d\" y=\"%d\">start of a step</text>\n", X1 + 27, ly, X1 + 27, ly + 14, X1 + 40, ly + 11);
    fprintf(f, "</g>\n</svg>\n");
#undef XS
#undef YS
    free(cols);
    return prof_out_end(&o);
}
