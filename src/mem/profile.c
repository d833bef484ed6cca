/* profile.c: the summary of a trace's events: per-tier peaks and what was live at the device
 * peak (by category, and the arena buffers with their layers), per-phase mean / max / min of the
 * accounted and in-use bytes, and spikes above their phase's mean; and the replay that both the
 * summary and the picture (profile_svg.c) step through the events with. docs/memory.md,
 * "Summaries".
 * Invariants: everything is a replay of the recorded events, never a sample, so the per-tier
 * peak is hpt_mem_stats.peak_bytes when recording began with the hpt_mem; bytes live before
 * recording are reported apart ("unrecorded"); arena buffers are matched birth to death by name
 * and size, last born first; a summary borrows its events' names; nothing here prints. */
#include "mem/profile_int.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the replay (profile_int.h) ------------------------------------------------------------- */

static int same_name(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

void prof_replay_apply(prof_replay *r, const hpt_mem_event *e) {
    int tier = e->tier < HPT_TIER_COUNT ? e->tier : 0;
    int cat = e->category < HPT_CAT_COUNT ? e->category : 0;
    if (e->in_arena) {
        if (e->kind == HPT_EV_ALLOC) {
            if (r->n_bufs == r->cap_bufs) {
                size_t cap = r->cap_bufs ? r->cap_bufs * 2 : 256;
                hpt_profile_buf *nb = realloc(r->bufs, cap * sizeof *nb);
                if (!nb) {
                    r->oom = 1;
                    return;
                }
                r->bufs = nb;
                r->cap_bufs = cap;
            }
            r->bufs[r->n_bufs++] = (hpt_profile_buf){e->name, e->layer, e->bytes};
            r->last_born = e->name;
        } else if (e->kind == HPT_EV_FREE) {
            for (size_t k = r->n_bufs; k-- > 0;)
                if (r->bufs[k].bytes == e->bytes && same_name(r->bufs[k].name, e->name)) {
                    memmove(&r->bufs[k], &r->bufs[k + 1], (r->n_bufs - k - 1) * sizeof *r->bufs);
                    r->n_bufs--;
                    break;
                }
        }
        r->arena_live = e->arena_live_bytes;
        r->total[tier] = e->tier_live_bytes;
        return;
    }
    if (e->kind == HPT_EV_ALLOC) {
        r->live[tier][cat] += (int64_t)e->bytes;
        r->last_born = e->name;
    } else if (e->kind == HPT_EV_FREE) {
        r->live[tier][cat] -= (int64_t)e->bytes;
    }
    r->total[tier] = e->tier_live_bytes;
    r->arena_live = e->arena_live_bytes;
}

/* ---- the summary ---------------------------------------------------------------------------- */

/* Device bytes in use: accounted, with the activation category counted by what is live inside
 * arenas instead of their reserved size. */
static uint64_t in_use_of(const prof_replay *r) {
    uint64_t acts = prof_clamp0(r->live[HPT_TIER_DEVICE][HPT_CAT_ACTS]);
    uint64_t tot = r->total[HPT_TIER_DEVICE];
    uint64_t base = tot > acts ? tot - acts : 0;
    return base + r->arena_live;
}

typedef struct {
    double w, v, av;               /* time weight, weighted sums */
    double sum_plain, asum_plain;  /* plain sums (fallback when no time passes) */
} phase_acc;

static void stat_add(hpt_profile_phase *p, phase_acc *a, uint64_t v, uint64_t av, double dt, int first) {
    if (first) {
        p->max_bytes = p->min_bytes = v;
        p->arena_max_bytes = p->arena_min_bytes = av;
    }
    if (v > p->max_bytes) p->max_bytes = v;
    if (v < p->min_bytes) p->min_bytes = v;
    if (av > p->arena_max_bytes) p->arena_max_bytes = av;
    if (av < p->arena_min_bytes) p->arena_min_bytes = av;
    p->n_events++;
    p->seconds += dt;
    a->w += dt;
    a->v += dt * (double)v;
    a->av += dt * (double)av;
    a->sum_plain += (double)v;
    a->asum_plain += (double)av;
}

static void stat_finish(hpt_profile_phase *p, const phase_acc *a) {
    if (!p->n_events) return;
    if (a->w > 0) {
        p->mean_bytes = a->v / a->w;
        p->arena_mean_bytes = a->av / a->w;
    } else {
        p->mean_bytes = a->sum_plain / (double)p->n_events;
        p->arena_mean_bytes = a->asum_plain / (double)p->n_events;
    }
}

static int cmp_buf(const void *pa, const void *pb) {
    const hpt_profile_buf *a = pa, *b = pb;
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
    if (a->layer != b->layer) return a->layer < b->layer ? -1 : 1;
    return strcmp(a->name ? a->name : "", b->name ? b->name : "");
}

void hpt_profile_summary_free(hpt_profile_summary *s) {
    if (!s) return;
    free(s->peak_bufs);
    free(s->spikes);
    s->peak_bufs = NULL;
    s->spikes = NULL;
    s->n_peak_bufs = s->n_spikes = 0;
}

hpt_status hpt_profile_summarize(const hpt_mem_event *ev, size_t n, double spike_pct,
                                 hpt_profile_summary *out) {
    memset(out, 0, sizeof *out);
    if (n && !ev) return hpt_fail(HPT_ERR_INVALID, "no events given");
    if (!(spike_pct >= 0.0) || !isfinite(spike_pct))
        return hpt_fail(HPT_ERR_INVALID, "spike threshold %g%% must be >= 0", spike_pct);
    out->n_events = n;
    out->spike_pct = spike_pct;
    if (n == 0) return HPT_OK;
    out->duration_s = ev[n - 1].t;
    uint64_t *in_use = malloc(n * sizeof *in_use);
    if (!in_use) return hpt_fail(HPT_ERR_OOM, "summarizing %zu events", n);

    /* pass 1: peaks, counts, per-phase statistics, the in-use series */
    prof_replay r;
    memset(&r, 0, sizeof r);
    phase_acc acc[HPT_PHASE_COUNT], acc_u[HPT_PHASE_COUNT];
    memset(acc, 0, sizeof acc);
    memset(acc_u, 0, sizeof acc_u);
    size_t best = SIZE_MAX;
    uint64_t best_tot = 0, best_arena = 0;
    for (size_t i = 0; i < n; i++) {
        const hpt_mem_event *e = &ev[i];
        prof_replay_apply(&r, e);
        int tier = e->tier < HPT_TIER_COUNT ? e->tier : 0;
        if (e->tier_live_bytes > out->peak_bytes[tier]) out->peak_bytes[tier] = e->tier_live_bytes;
        if (!e->in_arena) {
            if (e->kind == HPT_EV_ALLOC) out->n_allocs++;
            else if (e->kind == HPT_EV_FREE) out->n_frees++;
            else if (e->kind == HPT_EV_REFUSED) out->n_refused++;
            else if (e->kind == HPT_EV_TRANSFER) {
                out->n_transfers++;
                if (e->dst_tier < HPT_TIER_COUNT) out->transfer_bytes[tier][e->dst_tier] += e->bytes;
            }
        }
        if (e->step > out->max_step) out->max_step = e->step;
        if (tier == HPT_TIER_DEVICE &&
            (best == SIZE_MAX || e->tier_live_bytes > best_tot ||
             (e->tier_live_bytes == best_tot && e->arena_live_bytes > best_arena))) {
            best = i;
            best_tot = e->tier_live_bytes;
            best_arena = e->arena_live_bytes;
        }
        if (r.arena_live > out->arena_live_max_bytes) out->arena_live_max_bytes = r.arena_live;
        in_use[i] = in_use_of(&r);
        if (in_use[i] > out->in_use_max_bytes) out->in_use_max_bytes = in_use[i];
        double dt = i + 1 < n ? ev[i + 1].t - e->t : 0.0;
        if (dt < 0) dt = 0;
        int ph = e->phase < HPT_PHASE_COUNT ? e->phase : HPT_PHASE_FULL;
        int first = out->phase[ph].n_events == 0;
        stat_add(&out->phase[ph], &acc[ph], r.total[HPT_TIER_DEVICE], r.arena_live, dt, first);
        stat_add(&out->in_use[ph], &acc_u[ph], in_use[i], r.arena_live, dt, first);
    }
    for (int p = 0; p < HPT_PHASE_COUNT; p++) {
        stat_finish(&out->phase[p], &acc[p]);
        stat_finish(&out->in_use[p], &acc_u[p]);
    }
    hpt_status s = HPT_OK;
    if (r.oom) s = hpt_fail(HPT_ERR_OOM, "summarizing %zu events", n);

    /* pass 2: the state at the peak moment, and spikes */
    free(r.bufs);
    memset(&r, 0, sizeof r);
    double thr[HPT_PHASE_COUNT];
    for (int p = 0; p < HPT_PHASE_COUNT; p++) thr[p] = out->in_use[p].mean_bytes * (1.0 + spike_pct / 100.0);
    size_t cap_sp = 0;
    int in_run = 0;
    size_t run_start = 0;
    for (size_t i = 0; i < n && s == HPT_OK; i++) {
        prof_replay_apply(&r, &ev[i]);
        if (r.oom) {
            s = hpt_fail(HPT_ERR_OOM, "summarizing %zu events", n);
            break;
        }
        if (i == best) {
            out->peak_event = i;
            out->peak_t = ev[i].t;
            out->peak_step = ev[i].step;
            out->peak_phase = ev[i].phase;
            out->peak_layer = ev[i].layer;
            out->peak_arena_live_bytes = ev[i].arena_live_bytes;
            uint64_t sum = 0;
            for (int c = 0; c < HPT_CAT_COUNT; c++) {
                out->peak_by_cat[c] = prof_clamp0(r.live[HPT_TIER_DEVICE][c]);
                sum += out->peak_by_cat[c];
            }
            out->peak_unrecorded_bytes = best_tot > sum ? best_tot - sum : 0;
            if (r.n_bufs) {
                out->peak_bufs = malloc(r.n_bufs * sizeof *out->peak_bufs);
                if (!out->peak_bufs) {
                    s = hpt_fail(HPT_ERR_OOM, "summarizing %zu events", n);
                    break;
                }
                memcpy(out->peak_bufs, r.bufs, r.n_bufs * sizeof *r.bufs);
                out->n_peak_bufs = r.n_bufs;
                qsort(out->peak_bufs, r.n_bufs, sizeof *r.bufs, cmp_buf);
            }
        }
        int ph = ev[i].phase < HPT_PHASE_COUNT ? ev[i].phase : HPT_PHASE_FULL;
        int above = ph != HPT_PHASE_SETUP && (double)in_use[i] > thr[ph]; /* setup only grows */
        if (above && !in_run) {
            if (out->n_spikes == cap_sp) {
                size_t cap = cap_sp ? cap_sp * 2 : 64;
                hpt_profile_spike *ns = realloc(out->spikes, cap * sizeof *ns);
                if (!ns) {
                    s = hpt_fail(HPT_ERR_OOM, "summarizing %zu events", n);
                    break;
                }
                out->spikes = ns;
                cap_sp = cap;
            }
            in_run = 1;
            run_start = i;
            out->n_spikes++;
            out->spikes[out->n_spikes - 1].bytes = 0;
        }
        if (in_run) {
            hpt_profile_spike *sp = &out->spikes[out->n_spikes - 1];
            if (in_use[i] > sp->bytes) {
                sp->event = i;
                sp->t = ev[i].t;
                sp->step = ev[i].step;
                sp->phase = ev[i].phase;
                sp->layer = ev[i].layer;
                sp->bytes = in_use[i];
                sp->threshold_bytes = thr[ph];
                sp->name = r.last_born;
            }
            if (!above || i + 1 == n) { /* the run ends at this event */
                sp->duration_s = ev[i].t - ev[run_start].t;
                in_run = 0;
            }
        }
    }
    free(r.bufs);
    free(in_use);
    if (s != HPT_OK) hpt_profile_summary_free(out);
    return s;
}
