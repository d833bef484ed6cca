/* hptrain/profile.h: the memory profiler: traces, summaries, the SVG picture (src/mem/profile.c,
 * docs/memory.md). Part of hptrain.h. The section below has its manual. */
#ifndef HPTRAIN_PROFILE_H
#define HPTRAIN_PROFILE_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

/* ---- mem: profile summaries, traces (src/mem/profile.c) -------------------------------- */
/* (section owned by the profiler work; see docs/memory.md)
 *
 * A trace is the event timeline of a run plus what is needed to read it: budgets, model
 * shape, batch, and the process's RSS before and at its peak. A summary turns events into
 * figures: per-phase mean / max / min, the peak with what was live at it, spikes. The SVG is
 * memory over time stacked by category. Events are replayed, never sampled, so the summary's
 * peak is exactly hpt_mem_get_stats' peak when recording started with the hpt_mem.
 *
 *   hpt_mem_record(mem, 1);            ... run ...
 *   hpt_trace_meta meta = hpt_trace_meta_defaults();   (fill what is known)
 *   size_t n; const hpt_mem_event *ev = hpt_mem_events(mem, &n);
 *   hpt_trace_write_json("run.json", &meta, ev, n);
 *   hpt_trace *tr; hpt_trace_load("run.json", &tr);
 *   hpt_profile_summary s; hpt_profile_summarize(tr->events, tr->n_events, 25.0, &s);
 *   hpt_profile_render_svg(tr, &s, "run.svg");
 *   hpt_profile_summary_free(&s); hpt_trace_free(tr); */

#define HPT_TRACE_VERSION 1
typedef struct {
    int version;                                  /* HPT_TRACE_VERSION */
    uint64_t budget_bytes[HPT_TIER_COUNT];        /* 0: unlimited */
    hpt_model_config cfg;                          /* all zero when unknown */
    uint64_t num_params;
    int B, T;
    int has_val;                                  /* a validation set was evaluated */
    int threads;
    int64_t steps;                                /* optimizer steps completed in the trace */
    uint64_t rss_baseline_bytes;                  /* RSS before hptrain allocated anything */
    uint64_t rss_peak_bytes;                      /* the process's peak RSS at the end */
    uint64_t accounted_peak_bytes[HPT_TIER_COUNT]; /* hpt_mem_stats.peak_bytes at the end */
    int procs, rank;                              /* data parallel: the process count (0 is
                                                   * read as 1) and this trace's process */
    int has_plan;                                 /* plan below is the run's (0: a trace
                                                   * written before traces recorded it) */
    char plan[1024];                              /* the run's plan as flags (hpt_plan_print;
                                                   * hpt_plan_parse_flags reads it back); ""
                                                   * for the default plan */
} hpt_trace_meta;
hpt_trace_meta hpt_trace_meta_defaults(void);     /* version set, everything else 0 */

/* A trace read back. The events' names point into storage the trace owns. */
typedef struct {
    hpt_trace_meta meta;
    hpt_mem_event *events;                        /* (n_events) */
    size_t n_events;
    char *names;                                  /* owned: the distinct names, NUL-separated */
    const char *arch_label;                       /* borrowed: the picture's name for the model's
                                                   * architecture (the caller's, from
                                                   * hpt_arch_desc_of(meta.cfg.arch): the
                                                   * profiler knows no family); NULL: none */
} hpt_trace;

/* Writes meta and events as one JSON object {"format": "hptrain-trace", "version",
 * "meta": {...}, "events": [{...}, ...]}, one event per line; or as CSV: "# key=value" lines
 * with the metadata, a header row, one row per event. Names are quoted, enum fields are
 * written as their names (hpt_phase_name, ...). Atomic (temporary name, rename). */
hpt_status hpt_trace_write_json(const char *path, const hpt_trace_meta *meta,
                                const hpt_mem_event *ev, size_t n);
hpt_status hpt_trace_write_csv(const char *path, const hpt_trace_meta *meta,
                               const hpt_mem_event *ev, size_t n);
/* By the path's extension: ".csv" CSV, anything else JSON. */
hpt_status hpt_trace_write(const char *path, const hpt_trace_meta *meta,
                           const hpt_mem_event *ev, size_t n);
/* Reads a trace written by either writer (detected from the first byte). HPT_ERR_FORMAT with
 * the line or event index when malformed. */
hpt_status hpt_trace_load(const char *path, hpt_trace **out);
void hpt_trace_free(hpt_trace *tr);

/* Per phase: the device tier's accounted bytes and the bytes live inside activation arenas.
 * Means are time-weighted (a value holds until the next event), over the events tagged with
 * the phase; a phase with no time between its events takes the plain mean of its events. */
typedef struct {
    uint64_t n_events;
    double seconds;                    /* time attributed to the phase */
    double mean_bytes;
    uint64_t max_bytes, min_bytes;
    double arena_mean_bytes;
    uint64_t arena_max_bytes, arena_min_bytes;
} hpt_profile_phase;

typedef struct {
    const char *name;                  /* the buffer's name (borrowed from the events) */
    int layer;                         /* the layer context when it was born; -1 outside */
    uint64_t bytes;
} hpt_profile_buf;

/* A run of consecutive events whose in-use bytes stay above the threshold (the mean in-use bytes
 * of the event's phase times 1 + pct/100), at its highest. Setup has none: it only grows. */
typedef struct {
    size_t event;                      /* index of the highest event of the run */
    double t, duration_s;
    int64_t step;
    int phase, layer;
    uint64_t bytes;                    /* in-use bytes at the highest event */
    double threshold_bytes;            /* the phase's mean in-use bytes times (1 + pct/100) */
    const char *name;                  /* the latest buffer born at the top; NULL if unnamed */
} hpt_profile_spike;

/* "In use" on the device tier: accounted bytes, counting the activation category by what is
 * live inside arenas instead of the arenas' reserved size (activations on the device are only
 * allocated through the arena plan). */
typedef struct {
    size_t n_events;
    double duration_s;
    int64_t max_step;
    hpt_profile_phase phase[HPT_PHASE_COUNT];
    hpt_profile_phase in_use[HPT_PHASE_COUNT];   /* the same statistics of in-use bytes */
    uint64_t peak_bytes[HPT_TIER_COUNT];         /* max of the accounted total per tier */
    /* The device peak moment: the accounted total at its maximum and, among such events, the
     * one with the most bytes live inside arenas. */
    size_t peak_event;
    double peak_t;
    int64_t peak_step;
    int peak_phase, peak_layer;
    uint64_t peak_by_cat[HPT_CAT_COUNT];         /* device accounted bytes at that moment */
    uint64_t peak_unrecorded_bytes;              /* device bytes live before recording began */
    uint64_t peak_arena_live_bytes;
    hpt_profile_buf *peak_bufs;                  /* (n_peak_bufs) malloc'd, largest first */
    size_t n_peak_bufs;
    uint64_t arena_live_max_bytes;               /* over the whole trace */
    uint64_t in_use_max_bytes;
    double spike_pct;
    hpt_profile_spike *spikes;                   /* (n_spikes) malloc'd, in time order */
    size_t n_spikes;
    uint64_t n_allocs, n_frees, n_refused, n_transfers;
    uint64_t transfer_bytes[HPT_TIER_COUNT][HPT_TIER_COUNT]; /* [src][dst] */
} hpt_profile_summary;

/* Summarizes events (borrowed; the summary's names point into them). spike_pct >= 0. */
hpt_status hpt_profile_summarize(const hpt_mem_event *ev, size_t n, double spike_pct,
                                 hpt_profile_summary *out);
void hpt_profile_summary_free(hpt_profile_summary *s);
/* Renders the device tier over time as an SVG: stacked areas by category (the arena split into
 * its live part and its reserved-but-free part), phases shaded, steps marked, the peak marked
 * and labelled, the budget line when meta has one, axes with units, a legend. */
hpt_status hpt_profile_render_svg(const hpt_trace *tr, const hpt_profile_summary *s,
                                  const char *path);

#endif /* HPTRAIN_PROFILE_H */
