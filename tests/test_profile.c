/* test_profile.c: the profiler. A tiny training run is recorded through the trainer; its event
 * stream must keep the timeline's invariants (running totals, every arena birth matched by a
 * death by the end of its step, phase / step / layer tags); its summary must agree with the
 * allocator's own statistics; the JSON and CSV exports must read back field for field (also a
 * reformatted JSON); bad trace files must fail with a clear status; the SVG must be produced
 * with every series, the peak label and the budget line. */
#include "testlib.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 64
#define L_LAYERS 2
#define STEPS 3
#define BUDGET (64ull << 20)

static char g_train[512], g_val[512];

static void make_shards(void) {
    t_make_shards(777, VOCAB, 1, 0, 2500, 500, g_train, g_val);
}

static hpt_train_opts opts(void) {
    hpt_train_opts o = hpt_train_defaults();
    o.model = "gpt2:L=2,C=32,NH=2,V=64,T=16";
    o.data = g_train;
    o.val = g_val;
    o.B = 2;
    o.T = 8;
    o.steps = STEPS;
    o.warmup = 1;
    o.eval_every = 2; /* validation after steps 2 and 3 */
    o.val_batches = 2;
    return o;
}

/* A copy of the recorded events (the allocator's array is only valid until its next call). */
static hpt_mem_event *copy_events(const hpt_mem *mem, size_t *n) {
    const hpt_mem_event *ev = hpt_mem_events(mem, n);
    hpt_mem_event *c = malloc((*n ? *n : 1) * sizeof *c);
    if (c && *n) memcpy(c, ev, *n * sizeof *c);
    return c;
}

/* Live arena buffers, matched last born first by name and size. */
typedef struct { const char *name; uint64_t bytes; } live_buf;

static void check_invariants(const hpt_mem_event *ev, size_t n, const hpt_mem_stats *st) {
    int64_t run[HPT_TIER_COUNT] = {0};
    uint64_t arena = 0;
    live_buf stack[1024];
    int depth = 0;
    size_t bad_total = 0, bad_arena = 0, unmatched = 0, bad_layer = 0, bad_setup = 0;
    size_t bad_step_order = 0, open_at_step_end = 0, arena_at_step_end = 0;
    int seen_full = 0, seen_step[STEPS + 1] = {0}, eval_at[STEPS + 1] = {0};
    int64_t last_full_step = 0;
    for (size_t i = 0; i < n; i++) {
        const hpt_mem_event *e = &ev[i];
        if (e->in_arena) {
            if (e->kind == HPT_EV_ALLOC) {
                arena += e->bytes;
                if (depth < 1024) stack[depth++] = (live_buf){e->name, e->bytes};
            } else {
                arena -= e->bytes;
                int k = depth - 1;
                while (k >= 0 && !(stack[k].bytes == e->bytes && e->name && stack[k].name &&
                                   !strcmp(stack[k].name, e->name)))
                    k--;
                if (k < 0) unmatched++;
                else {
                    memmove(&stack[k], &stack[k + 1], (size_t)(depth - k - 1) * sizeof *stack);
                    depth--;
                }
            }
            if (e->tier != HPT_TIER_DEVICE || e->category != HPT_CAT_ACTS) bad_arena++;
        } else if (e->kind == HPT_EV_ALLOC) {
            run[e->tier] += (int64_t)e->bytes;
        } else if (e->kind == HPT_EV_FREE) {
            run[e->tier] -= (int64_t)e->bytes;
        }
        if ((int64_t)e->tier_live_bytes != run[e->tier]) bad_total++;
        if (e->arena_live_bytes != arena) bad_arena++;
        if (e->layer < -1 || e->layer >= L_LAYERS) bad_layer++;
        if (e->phase == HPT_PHASE_FULL) {
            seen_full = 1;
            if (e->step < 1 || e->step > STEPS || e->step < last_full_step) bad_step_order++;
            else seen_step[e->step] = 1;
            last_full_step = e->step;
            /* the last event of a training step: nothing may stay live in the arena */
            int step_ends = i + 1 == n || ev[i + 1].phase != HPT_PHASE_FULL || ev[i + 1].step != e->step;
            if (step_ends && depth != 0) open_at_step_end++;
            if (step_ends && e->arena_live_bytes != 0) arena_at_step_end++;
        } else if (!seen_full && (e->phase != HPT_PHASE_SETUP || e->step != 0)) {
            bad_setup++;
        }
        if (e->phase == HPT_PHASE_EVAL && e->step >= 0 && e->step <= STEPS) eval_at[e->step] = 1;
        if (seen_full && e->phase == HPT_PHASE_SETUP) bad_setup++;
    }
    CHECK_MSG(bad_total == 0, "%zu events whose tier_live_bytes is not the running total", bad_total);
    CHECK_MSG(bad_arena == 0, "%zu arena events with a wrong running total or tier", bad_arena);
    CHECK_MSG(unmatched == 0, "%zu arena deaths without a live birth", unmatched);
    CHECK_MSG(depth == 0 && arena == 0, "%d arena buffers (%llu bytes) live at the end", depth,
              (unsigned long long)arena);
    CHECK_MSG(open_at_step_end == 0 && arena_at_step_end == 0,
              "%zu steps end with arena buffers live", open_at_step_end + arena_at_step_end);
    CHECK_MSG(bad_layer == 0, "%zu events with a layer outside [-1, %d)", bad_layer, L_LAYERS);
    CHECK_MSG(bad_setup == 0, "%zu events before step 1 not tagged setup/0", bad_setup);
    CHECK_MSG(bad_step_order == 0, "%zu full events with a step outside 1..%d or out of order",
              bad_step_order, STEPS);
    for (int s = 1; s <= STEPS; s++) CHECK_MSG(seen_step[s], "no events tagged full, step %d", s);
    CHECK(ev[0].phase == HPT_PHASE_SETUP);
    CHECK(!eval_at[1] && eval_at[2] && eval_at[3]);
    CHECK(run[HPT_TIER_DEVICE] == 0); /* everything was freed */
    /* the allocations counted by the allocator are the ones recorded */
    uint64_t na = 0, nf = 0;
    for (size_t i = 0; i < n; i++)
        if (!ev[i].in_arena) {
            na += ev[i].kind == HPT_EV_ALLOC;
            nf += ev[i].kind == HPT_EV_FREE;
        }
    CHECK(na == st->n_allocs && nf == st->n_frees);
}

static void check_summary(const hpt_mem_event *ev, size_t n, const hpt_mem_stats *st) {
    hpt_profile_summary s;
    CHECK_OK(hpt_profile_summarize(ev, n, 5.0, &s));
    CHECK(s.n_events == n);
    CHECK_MSG(s.peak_bytes[HPT_TIER_DEVICE] == st->peak_bytes[HPT_TIER_DEVICE], "%llu vs %llu",
              (unsigned long long)s.peak_bytes[HPT_TIER_DEVICE],
              (unsigned long long)st->peak_bytes[HPT_TIER_DEVICE]);
    uint64_t sum = 0;
    for (int c = 0; c < HPT_CAT_COUNT; c++) {
        CHECK_MSG(s.peak_by_cat[c] == st->peak_live_bytes[HPT_TIER_DEVICE][c], "%s: %llu vs %llu",
                  hpt_category_name((hpt_category)c), (unsigned long long)s.peak_by_cat[c],
                  (unsigned long long)st->peak_live_bytes[HPT_TIER_DEVICE][c]);
        sum += s.peak_by_cat[c];
    }
    CHECK(s.peak_unrecorded_bytes == 0 && sum == s.peak_bytes[HPT_TIER_DEVICE]);
    CHECK(ev[s.peak_event].tier_live_bytes == s.peak_bytes[HPT_TIER_DEVICE]);
    CHECK(s.peak_t == ev[s.peak_event].t && s.peak_step == ev[s.peak_event].step);
    /* among the moments at the accounted peak, the one with the most live in the arena */
    uint64_t best_arena = 0;
    for (size_t i = 0; i < n; i++)
        if (ev[i].tier == HPT_TIER_DEVICE && ev[i].tier_live_bytes == s.peak_bytes[HPT_TIER_DEVICE] &&
            ev[i].arena_live_bytes > best_arena)
            best_arena = ev[i].arena_live_bytes;
    CHECK(s.peak_arena_live_bytes == best_arena && best_arena > 0);
    uint64_t bufs = 0;
    for (size_t k = 0; k < s.n_peak_bufs; k++) {
        bufs += s.peak_bufs[k].bytes;
        CHECK(s.peak_bufs[k].name != NULL);
        CHECK(s.peak_bufs[k].layer >= -1 && s.peak_bufs[k].layer < L_LAYERS);
        if (k) CHECK(s.peak_bufs[k - 1].bytes >= s.peak_bufs[k].bytes);
    }
    CHECK_MSG(bufs == s.peak_arena_live_bytes, "live buffers %llu vs arena live %llu",
              (unsigned long long)bufs, (unsigned long long)s.peak_arena_live_bytes);
    uint64_t ne = 0;
    for (int p = 0; p < HPT_PHASE_COUNT; p++) {
        const hpt_profile_phase *ph = &s.phase[p];
        ne += ph->n_events;
        if (!ph->n_events) continue;
        CHECK(ph->min_bytes <= ph->mean_bytes + 0.5 && ph->mean_bytes <= (double)ph->max_bytes + 0.5);
        CHECK(ph->arena_min_bytes <= ph->arena_mean_bytes + 0.5 &&
              ph->arena_mean_bytes <= (double)ph->arena_max_bytes + 0.5);
        CHECK(ph->max_bytes <= s.peak_bytes[HPT_TIER_DEVICE]);
    }
    CHECK(ne == n);
    CHECK(s.phase[HPT_PHASE_SETUP].n_events > 0 && s.phase[HPT_PHASE_FULL].n_events > 0 &&
          s.phase[HPT_PHASE_EVAL].n_events > 0);
    CHECK(s.phase[HPT_PHASE_FULL].max_bytes == s.peak_bytes[HPT_TIER_DEVICE]);
    CHECK(s.phase[HPT_PHASE_SETUP].min_bytes > 0); /* the first allocation is an event */
    CHECK(s.max_step == STEPS);
    CHECK(s.n_allocs == st->n_allocs && s.n_frees == st->n_frees && s.n_refused == 0);
    for (size_t k = 0; k < s.n_spikes; k++) {
        CHECK((double)s.spikes[k].bytes > s.spikes[k].threshold_bytes);
        if (k) CHECK(s.spikes[k - 1].t <= s.spikes[k].t);
        CHECK(s.spikes[k].phase != HPT_PHASE_SETUP && s.spikes[k].step >= 1);
    }
    hpt_profile_summary_free(&s);
    hpt_profile_summary_free(&s); /* idempotent */
    /* Each step's rise above its phase's mean is a spike. The mean is time-weighted, so with the
     * run's own clock a stall (a loaded machine) can lift it over a step's rise: counted on the
     * same events one time unit apart, the count depends on the events alone. */
    hpt_mem_event *u = malloc(n * sizeof *u);
    CHECK(u != NULL);
    if (!u) return;
    for (size_t i = 0; i < n; i++) {
        u[i] = ev[i];
        u[i].t = (double)i;
    }
    CHECK_OK(hpt_profile_summarize(u, n, 5.0, &s));
    CHECK_MSG(s.n_spikes >= STEPS, "%zu spikes in %d steps", s.n_spikes, STEPS);
    hpt_profile_summary_free(&s);
    free(u);
}

static int same_name(const char *a, const char *b) {
    return (!a && !b) || (a && b && !strcmp(a, b));
}

/* t_tol: 0 for our writers (%.17g round-trips); cJSON's own printer keeps 15 digits. */
static void check_same_trace(const hpt_trace *tr, const hpt_trace_meta *m, const hpt_mem_event *ev,
                             size_t n, const char *what, double t_tol) {
    CHECK_MSG(tr->n_events == n, "%s: %zu events read, %zu written", what, tr->n_events, n);
    const hpt_trace_meta *r = &tr->meta;
    CHECK_MSG(r->version == m->version && r->cfg.L == m->cfg.L && r->cfg.C == m->cfg.C &&
              r->cfg.NH == m->cfg.NH && r->cfg.V == m->cfg.V && r->cfg.Vp == m->cfg.Vp &&
              r->cfg.maxT == m->cfg.maxT && r->num_params == m->num_params && r->B == m->B &&
              r->T == m->T && r->has_val == m->has_val && r->threads == m->threads &&
              r->steps == m->steps && r->rss_baseline_bytes == m->rss_baseline_bytes &&
              r->rss_peak_bytes == m->rss_peak_bytes, "%s: metadata differs", what);
    CHECK_MSG(r->has_plan == m->has_plan && !strcmp(r->plan, m->plan), "%s: the plan differs: '%s'",
              what, r->plan);
    CHECK_MSG(r->procs == m->procs && r->rank == m->rank, "%s: process %d of %d read back", what,
              r->rank, r->procs);
    /* the whole model configuration (every field 4 bytes: no padding; floats written with 9
     * significant digits read back to the same float) */
    CHECK_MSG(memcmp(&r->cfg, &m->cfg, sizeof r->cfg) == 0, "%s: the model configuration differs", what);
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        CHECK(r->budget_bytes[t] == m->budget_bytes[t] &&
              r->accounted_peak_bytes[t] == m->accounted_peak_bytes[t]);
    size_t bad = 0;
    for (size_t i = 0; i < n && i < tr->n_events; i++) {
        const hpt_mem_event *a = &tr->events[i], *b = &ev[i];
        if (fabs(a->t - b->t) > t_tol * fabs(b->t) || a->step != b->step || a->layer != b->layer || a->kind != b->kind ||
            a->tier != b->tier || a->dst_tier != b->dst_tier || a->category != b->category ||
            a->phase != b->phase || a->in_arena != b->in_arena || a->bytes != b->bytes ||
            a->tier_live_bytes != b->tier_live_bytes || a->arena_live_bytes != b->arena_live_bytes ||
            !same_name(a->name, b->name)) {
            if (!bad) fprintf(stderr, "%s: event %zu differs\n", what, i);
            bad++;
        }
    }
    CHECK_MSG(bad == 0, "%s: %zu events differ", what, bad);
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz + 1);
    if (buf && fread(buf, 1, (size_t)sz, f) != (size_t)sz) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) buf[sz] = '\0';
    *len = (size_t)sz;
    return buf;
}

static void spit(const char *path, const char *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(data, 1, len, f);
    fclose(f);
}

static size_t count(const char *hay, const char *needle) {
    size_t c = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) c++;
    return c;
}

static void check_bad_files(const char *json_path) {
    char path[600];
    hpt_trace *tr = (hpt_trace *)1;
    snprintf(path, sizeof path, "%s/missing.json", t_tmpdir());
    CHECK_STATUS(hpt_trace_load(path, &tr), HPT_ERR_IO);
    CHECK(tr == NULL);
    size_t len;
    char *good = slurp(json_path, &len);
    if (!good) { CHECK(0); return; }
    snprintf(path, sizeof path, "%s/bad.json", t_tmpdir());
    spit(path, good, len / 2); /* cut in the middle of the events */
    CHECK_STATUS(hpt_trace_load(path, &tr), HPT_ERR_FORMAT);
    spit(path, "", 0);
    CHECK_STATUS(hpt_trace_load(path, &tr), HPT_ERR_FORMAT);
    spit(path, "{\"format\":\"something else\",\"version\":1,\"events\":[]}", 52);
    CHECK_STATUS(hpt_trace_load(path, &tr), HPT_ERR_FORMAT);
    spit(path, "{\"format\":\"hptrain-trace\",\"version\":99,\"events\":[]}", 52);
    CHECK_STATUS(hpt_trace_load(path, &tr), HPT_ERR_FORMAT);
    /* an event with an unknown phase name */
    char *p = strstr(good, "\"phase\":\"full\"");
    if (p) {
        memcpy(p, "\"phase\":\"fuul\"", 14);
        spit(path, good, len);
        CHECK_STATUS(hpt_trace_load(path, &tr), HPT_ERR_FORMAT);
        CHECK(strstr(hpt_last_error(), "phase") != NULL);
    }
    free(good);
    snprintf(path, sizeof path, "%s/bad.csv", t_tmpdir());
    const char *csv = "# format=hptrain-trace\n# version=1\n"
                      "t,step,phase,layer,kind,tier,dst_tier,category,in_arena,bytes,tier_live_bytes,arena_live_bytes,name\n"
                      "0.5,1,full,-1,alloc,device,device,params,0,12x,12,0,\"p\"\n";
    spit(path, csv, strlen(csv));
    CHECK_STATUS(hpt_trace_load(path, &tr), HPT_ERR_FORMAT);
    CHECK(strstr(hpt_last_error(), "line 4") != NULL);
    hpt_profile_summary s;
    CHECK_STATUS(hpt_profile_summarize(NULL, 0, -1.0, &s), HPT_ERR_INVALID);
    CHECK_OK(hpt_profile_summarize(NULL, 0, 10.0, &s));
    CHECK(s.n_events == 0 && s.peak_bufs == NULL);
    hpt_profile_summary_free(&s);
    hpt_profile_summary_free(NULL);
    hpt_trace_free(NULL);
}

/* Recording that begins after setup: what was live before is reported apart. */
static void check_late_recording(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_train_opts o = opts();
    o.val = NULL;
    o.steps = 1;
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (!tr) { hpt_mem_destroy(mem); return; }
    hpt_mem_record(mem, 1);
    hpt_train_progress p;
    CHECK_OK(hpt_trainer_step(tr, &p));
    size_t n;
    hpt_mem_event *ev = copy_events(mem, &n);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    hpt_profile_summary s;
    CHECK_OK(hpt_profile_summarize(ev, n, 10.0, &s));
    CHECK(s.peak_bytes[HPT_TIER_DEVICE] == st.peak_bytes[HPT_TIER_DEVICE]);
    uint64_t sum = s.peak_unrecorded_bytes;
    for (int c = 0; c < HPT_CAT_COUNT; c++) sum += s.peak_by_cat[c];
    CHECK(sum == s.peak_bytes[HPT_TIER_DEVICE]);
    CHECK(s.peak_unrecorded_bytes == st.peak_live_bytes[HPT_TIER_DEVICE][HPT_CAT_PARAMS] +
                                         st.peak_live_bytes[HPT_TIER_DEVICE][HPT_CAT_GRADS] +
                                         st.peak_live_bytes[HPT_TIER_DEVICE][HPT_CAT_OPTIM] +
                                         st.peak_live_bytes[HPT_TIER_DEVICE][HPT_CAT_IO]);
    hpt_trace t = {hpt_trace_meta_defaults(), ev, n, NULL, NULL};
    char path[600];
    snprintf(path, sizeof path, "%s/late.svg", t_tmpdir());
    CHECK_OK(hpt_profile_render_svg(&t, &s, path));
    size_t len;
    char *svg = slurp(path, &len);
    CHECK(svg && count(svg, "class=\"area\"") == 8); /* the unrecorded series appears */
    free(svg);
    free(ev);
    hpt_profile_summary_free(&s);
    hpt_trainer_free(tr);
    hpt_mem_destroy(mem);
}

int main(void) {
    make_shards();
    hpt_set_threads(1);
    uint64_t rss0 = hpt_rss_bytes();
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_mem_set_budget(mem, HPT_TIER_DEVICE, BUDGET);
    hpt_mem_record(mem, 1);
    hpt_train_opts o = opts();
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (!tr) return t_done("test_profile");
    hpt_trace_meta meta = hpt_trace_meta_defaults();
    meta.cfg = *hpt_model_get_config(hpt_trainer_model(tr));
    meta.num_params = hpt_model_num_params(hpt_trainer_model(tr));
    int evaluated = 0;
    while (!hpt_trainer_done(tr)) {
        hpt_train_progress p;
        CHECK_OK(hpt_trainer_step(tr, &p));
        evaluated += p.evaluated;
        meta.steps = p.step;
    }
    CHECK(evaluated == 2);
    hpt_trainer_free(tr);
    size_t n;
    hpt_mem_event *ev = copy_events(mem, &n);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    CHECK(n > 100 && ev);
    if (!ev || n == 0) return t_done("test_profile");

    check_invariants(ev, n, &st);
    check_summary(ev, n, &st);

    meta.budget_bytes[HPT_TIER_DEVICE] = BUDGET;
    meta.B = o.B;
    meta.T = o.T;
    meta.has_val = 1;
    meta.threads = hpt_get_threads();
    meta.rss_baseline_bytes = rss0;
    meta.rss_peak_bytes = hpt_rss_peak_bytes();
    for (int t = 0; t < HPT_TIER_COUNT; t++) meta.accounted_peak_bytes[t] = st.peak_bytes[t];

    char json[600], csv[600], pretty[600], svg_path[600];
    snprintf(json, sizeof json, "%s/trace.json", t_tmpdir());
    snprintf(csv, sizeof csv, "%s/trace.csv", t_tmpdir());
    snprintf(pretty, sizeof pretty, "%s/pretty.json", t_tmpdir());
    snprintf(svg_path, sizeof svg_path, "%s/trace.svg", t_tmpdir());
    CHECK_OK(hpt_trace_write(json, &meta, ev, n));
    CHECK_OK(hpt_trace_write(csv, &meta, ev, n));
    hpt_trace *tj = NULL, *tc = NULL, *tp = NULL;
    CHECK_OK(hpt_trace_load(json, &tj));
    CHECK_OK(hpt_trace_load(csv, &tc));
    if (tj) check_same_trace(tj, &meta, ev, n, "json", 0.0);
    if (tc) check_same_trace(tc, &meta, ev, n, "csv", 0.0);
    { /* a llama configuration (arch, NKV, FF, untied head, rope) round-trips in both formats */
        hpt_trace_meta lm = meta;
        CHECK_OK(hpt_model_config_parse("llama3.2-1b", &lm.cfg));
        lm.cfg.rope_theta = 123456.7f; /* not a round number */
        /* and the run's plan, which profile's estimates start from */
        hpt_plan lp = hpt_plan_default_choices();
        CHECK_OK(hpt_plan_set(&lp, "recompute", "selective"));
        CHECK_OK(hpt_plan_set(&lp, "state-bits", "8"));
        CHECK_OK(hpt_plan_set(&lp, "memory", "40MiB"));
        CHECK_OK(hpt_plan_print(&lp, lm.plan, sizeof lm.plan));
        lm.has_plan = 1;
        lm.procs = 3; /* and which process of how many */
        lm.rank = 2;
        CHECK(meta.has_plan == 0 && strstr(lm.plan, "--state-bits 8"));
        char lj[600], lc[600];
        snprintf(lj, sizeof lj, "%s/llama.json", t_tmpdir());
        snprintf(lc, sizeof lc, "%s/llama.csv", t_tmpdir());
        CHECK_OK(hpt_trace_write(lj, &lm, ev, n));
        CHECK_OK(hpt_trace_write(lc, &lm, ev, n));
        hpt_trace *a = NULL, *b = NULL;
        CHECK_OK(hpt_trace_load(lj, &a));
        CHECK_OK(hpt_trace_load(lc, &b));
        if (a) check_same_trace(a, &lm, ev, n, "llama json", 0.0);
        if (b) check_same_trace(b, &lm, ev, n, "llama csv", 0.0);
        CHECK(a && a->meta.cfg.arch == HPT_ARCH_LLAMA && a->meta.cfg.NKV == 8 && a->meta.cfg.FF == 8192 &&
              a->meta.cfg.rope_factor == 32.0f && a->meta.cfg.rope_theta == 123456.7f);
        for (int k = 0; k < 2; k++) { /* the plan read back is the plan written */
            const hpt_trace *x = k ? b : a;
            hpt_plan rp = hpt_plan_default_choices();
            char words[sizeof lm.plan];
            snprintf(words, sizeof words, "%s", x ? x->meta.plan : "");
            CHECK(x && hpt_plan_parse_flags(&rp, words) == HPT_OK &&
                  rp.act.recompute == HPT_RECOMPUTE_SELECTIVE && rp.adamw.state_bits == 8 &&
                  rp.budget_bytes[HPT_TIER_DEVICE] == 40ull << 20);
        }
        hpt_trace_free(a);
        hpt_trace_free(b);
    }
    /* the CSV really is CSV: the header row, then one row per event */
    size_t len;
    char *text = slurp(csv, &len);
    CHECK(text && strstr(text, "\nt,step,phase,layer,kind,") && count(text, "\n") > n);
    free(text);
    /* a reformatted JSON (another tool's pretty-printer) reads back too */
    text = slurp(json, &len);
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    CHECK(root != NULL);
    if (root) {
        char *pr = cJSON_Print(root);
        if (pr) spit(pretty, pr, strlen(pr));
        free(pr);
        cJSON_Delete(root);
        CHECK_OK(hpt_trace_load(pretty, &tp));
        if (tp) check_same_trace(tp, &meta, ev, n, "pretty json", 1e-13);
    }
    free(text);
    /* names are owned by the loaded trace, not the writer's static strings */
    if (tj)
        for (size_t i = 0; i < tj->n_events; i++)
            if (tj->events[i].name) {
                CHECK(tj->events[i].name >= tj->names);
                break;
            }

    /* the picture, from the trace read back */
    if (tj) {
        hpt_profile_summary s;
        CHECK_OK(hpt_profile_summarize(tj->events, tj->n_events, 20.0, &s));
        CHECK_OK(hpt_profile_render_svg(tj, &s, svg_path));
        char *svg = slurp(svg_path, &len);
        CHECK(svg && len > 20000);
        if (svg) {
            CHECK(strncmp(svg, "<?xml", 5) == 0 && strstr(svg, "</svg>"));
            CHECK_MSG(count(svg, "class=\"area\"") == 7, "%zu series", count(svg, "class=\"area\""));
            CHECK(count(svg, "class=\"phase\"") >= 5); /* setup, full, eval, full, eval */
            CHECK(strstr(svg, "data-phase=\"eval\"") && strstr(svg, "data-phase=\"setup\""));
            CHECK(strstr(svg, "class=\"peak\"") && strstr(svg, ">peak "));
            CHECK(strstr(svg, "class=\"budget\"") && strstr(svg, "budget 64.0 MiB"));
            CHECK(strstr(svg, "(s)</text>") && strstr(svg, "accounted (KiB)</text>")); /* < 2 MiB */
        }
        free(svg);
        tj->meta.budget_bytes[HPT_TIER_DEVICE] = 0; /* no budget: no budget line */
        CHECK_OK(hpt_profile_render_svg(tj, &s, svg_path));
        svg = slurp(svg_path, &len);
        CHECK(svg && !strstr(svg, "class=\"budget\""));
        free(svg);
        hpt_profile_summary_free(&s);
        char bad_dir[700];
        snprintf(bad_dir, sizeof bad_dir, "%s/no/such/dir/x.svg", t_tmpdir());
        CHECK_STATUS(hpt_profile_render_svg(tj, &s, bad_dir), HPT_ERR_IO);
    }
    check_bad_files(json);
    check_late_recording();
    hpt_trace_free(tj);
    hpt_trace_free(tc);
    hpt_trace_free(tp);
    free(ev);
    hpt_mem_destroy(mem);
    return t_done("test_profile");
}
