/* profile.c: the profiler's side of the event timeline: traces (JSON and CSV, written and read
 * back), summaries (per-phase mean / max / min, the peak and what was live at it, spikes) and
 * the SVG picture of the device tier over time.
 *
 * Everything here is a replay of the recorded events, never a sample, so:
 *   - the summary's per-tier peak is the maximum of the events' tier_live_bytes, which is
 *     hpt_mem_stats.peak_bytes when recording began with the hpt_mem (the allocator updates
 *     both on the same allocation);
 *   - the breakdown by category at any event is the running sum of the allocations minus the
 *     frees before it; bytes live before recording began are reported apart ("unrecorded");
 *   - arena buffers are matched birth to death by name and size, last born first: a GPT-2
 *     step frees per-layer buffers in the reverse order of the forward that made them, so the
 *     layer a live buffer belongs to is the layer context of its birth.
 * A loaded trace owns its events and the names they point to; a summary borrows the names of
 * the events it was computed from. Nothing here prints: the command line does (cmd_profile.c). */
#include "core/core.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *const k_kind_names[] = {"alloc", "free", "refused", "transfer"};
#define N_KINDS 4

hpt_trace_meta hpt_trace_meta_defaults(void) {
    hpt_trace_meta m;
    memset(&m, 0, sizeof m);
    m.version = HPT_TRACE_VERSION;
    return m;
}

/* ---- writing ------------------------------------------------------------------------------ */

/* Writes to a temporary name beside path and renames it over path on success, so a reader
 * never sees half a trace. (mem sits below io in the module order, so io's helper is not used.) */
typedef struct {
    FILE *f;
    char *path, *tmp;
} out_file;

static hpt_status out_begin(out_file *o, const char *path) {
    memset(o, 0, sizeof *o);
    size_t len = strlen(path);
    o->path = malloc(len + 1);
    o->tmp = malloc(len + 32);
    if (!o->path || !o->tmp) {
        free(o->path);
        free(o->tmp);
        return hpt_fail(HPT_ERR_OOM, "writing %s", path);
    }
    memcpy(o->path, path, len + 1);
    snprintf(o->tmp, len + 32, "%s.tmp.%ld", path, (long)getpid());
    o->f = fopen(o->tmp, "wb");
    if (!o->f) {
        hpt_status s = hpt_fail(HPT_ERR_IO, "cannot write %s: %s", path, strerror(errno));
        free(o->path);
        free(o->tmp);
        return s;
    }
    setvbuf(o->f, NULL, _IOFBF, 1 << 20);
    return HPT_OK;
}

static hpt_status out_end(out_file *o) {
    int err = ferror(o->f) ? EIO : 0;
    if (fflush(o->f) != 0 && !err) err = errno;
    if (!err && fsync(fileno(o->f)) != 0) err = errno;
    if (fclose(o->f) != 0 && !err) err = errno;
    if (!err && rename(o->tmp, o->path) != 0) err = errno;
    hpt_status s = HPT_OK;
    if (err) {
        unlink(o->tmp);
        s = hpt_fail(HPT_ERR_IO, "cannot write %s: %s", o->path, strerror(err));
    }
    free(o->path);
    free(o->tmp);
    return s;
}

/* A JSON string literal (or null). */
static void json_str(FILE *f, const char *s) {
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static const char *kind_name(int k) { return (unsigned)k < N_KINDS ? k_kind_names[k] : "?"; }

static void json_tiers(FILE *f, const char *key, const uint64_t v[HPT_TIER_COUNT]) {
    fprintf(f, "\"%s\":{", key);
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        fprintf(f, "%s\"%s\":%llu", t ? "," : "", hpt_tier_name((hpt_tier)t), (unsigned long long)v[t]);
    fputc('}', f);
}

hpt_status hpt_trace_write_json(const char *path, const hpt_trace_meta *m,
                                const hpt_mem_event *ev, size_t n) {
    out_file o;
    HPT_CHECK(out_begin(&o, path));
    FILE *f = o.f;
    /* The header and each event on a line of their own: hpt_trace_load reads such a file line
     * by line, so a long run's trace never has to be one parsed tree in memory. */
    fprintf(f, "{\"format\":\"hptrain-trace\",\"version\":%d,\"meta\":{", HPT_TRACE_VERSION);
    json_tiers(f, "budget_bytes", m->budget_bytes);
    fprintf(f, ",\"model\":{\"L\":%d,\"C\":%d,\"NH\":%d,\"V\":%d,\"Vp\":%d,\"maxT\":%d}",
            m->cfg.L, m->cfg.C, m->cfg.NH, m->cfg.V, m->cfg.Vp, m->cfg.maxT);
    fprintf(f, ",\"num_params\":%llu,\"B\":%d,\"T\":%d,\"has_val\":%d,\"threads\":%d,\"steps\":%lld,"
            "\"rss_baseline_bytes\":%llu,\"rss_peak_bytes\":%llu,",
            (unsigned long long)m->num_params, m->B, m->T, m->has_val, m->threads,
            (long long)m->steps, (unsigned long long)m->rss_baseline_bytes,
            (unsigned long long)m->rss_peak_bytes);
    json_tiers(f, "accounted_peak_bytes", m->accounted_peak_bytes);
    fprintf(f, "},\"n_events\":%zu,\"events\":[\n", n);
    for (size_t i = 0; i < n; i++) {
        const hpt_mem_event *e = &ev[i];
        fprintf(f, "{\"t\":%.17g,\"step\":%lld,\"phase\":\"%s\",\"layer\":%d,\"kind\":\"%s\","
                "\"tier\":\"%s\",\"dst_tier\":\"%s\",\"category\":\"%s\",\"in_arena\":%d,"
                "\"bytes\":%llu,\"tier_live_bytes\":%llu,\"arena_live_bytes\":%llu,\"name\":",
                e->t, (long long)e->step, hpt_phase_name((hpt_phase)e->phase), (int)e->layer,
                kind_name(e->kind), hpt_tier_name((hpt_tier)e->tier),
                hpt_tier_name((hpt_tier)e->dst_tier), hpt_category_name((hpt_category)e->category),
                (int)e->in_arena, (unsigned long long)e->bytes,
                (unsigned long long)e->tier_live_bytes, (unsigned long long)e->arena_live_bytes);
        json_str(f, e->name);
        fputs(i + 1 < n ? "},\n" : "}\n", f);
    }
    fputs("]}\n", f);
    return out_end(&o);
}

static const char k_csv_header[] = "t,step,phase,layer,kind,tier,dst_tier,category,in_arena,bytes,"
                                   "tier_live_bytes,arena_live_bytes,name";

hpt_status hpt_trace_write_csv(const char *path, const hpt_trace_meta *m,
                               const hpt_mem_event *ev, size_t n) {
    out_file o;
    HPT_CHECK(out_begin(&o, path));
    FILE *f = o.f;
    fprintf(f, "# format=hptrain-trace\n# version=%d\n", HPT_TRACE_VERSION);
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        fprintf(f, "# budget_bytes.%s=%llu\n", hpt_tier_name((hpt_tier)t),
                (unsigned long long)m->budget_bytes[t]);
    fprintf(f, "# model.L=%d\n# model.C=%d\n# model.NH=%d\n# model.V=%d\n# model.Vp=%d\n"
            "# model.maxT=%d\n", m->cfg.L, m->cfg.C, m->cfg.NH, m->cfg.V, m->cfg.Vp, m->cfg.maxT);
    fprintf(f, "# num_params=%llu\n# B=%d\n# T=%d\n# has_val=%d\n# threads=%d\n# steps=%lld\n"
            "# rss_baseline_bytes=%llu\n# rss_peak_bytes=%llu\n",
            (unsigned long long)m->num_params, m->B, m->T, m->has_val, m->threads,
            (long long)m->steps, (unsigned long long)m->rss_baseline_bytes,
            (unsigned long long)m->rss_peak_bytes);
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        fprintf(f, "# accounted_peak_bytes.%s=%llu\n", hpt_tier_name((hpt_tier)t),
                (unsigned long long)m->accounted_peak_bytes[t]);
    fprintf(f, "# n_events=%zu\n%s\n", n, k_csv_header);
    for (size_t i = 0; i < n; i++) {
        const hpt_mem_event *e = &ev[i];
        fprintf(f, "%.17g,%lld,%s,%d,%s,%s,%s,%s,%d,%llu,%llu,%llu,", e->t, (long long)e->step,
                hpt_phase_name((hpt_phase)e->phase), (int)e->layer, kind_name(e->kind),
                hpt_tier_name((hpt_tier)e->tier), hpt_tier_name((hpt_tier)e->dst_tier),
                hpt_category_name((hpt_category)e->category), (int)e->in_arena,
                (unsigned long long)e->bytes, (unsigned long long)e->tier_live_bytes,
                (unsigned long long)e->arena_live_bytes);
        if (e->name) {
            fputc('"', f);
            for (const char *p = e->name; *p; p++) {
                if (*p == '"') fputc('"', f);
                if (*p == '\n' || *p == '\r') fputc(' ', f);
                else fputc(*p, f);
            }
            fputc('"', f);
        }
        fputc('\n', f);
    }
    return out_end(&o);
}

hpt_status hpt_trace_write(const char *path, const hpt_trace_meta *meta, const hpt_mem_event *ev,
                           size_t n) {
    size_t len = strlen(path);
    if (len >= 4 && strcasecmp(path + len - 4, ".csv") == 0)
        return hpt_trace_write_csv(path, meta, ev, n);
    return hpt_trace_write_json(path, meta, ev, n);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Names are interned while reading: each event keeps an index (-1: none) into a table of
 * distinct names, and the pool they end up in is allocated once at the end, so the events'
 * pointers never move afterwards. */
typedef struct {
    char **str;     /* (n) distinct names, malloc'd */
    size_t n, cap;
    int32_t *slot;  /* (n_slots) open addressing: index into str, -1 empty */
    size_t n_slots;
} name_table;

static uint64_t hash_str(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int names_grow(name_table *t) {
    size_t ns = t->n_slots ? t->n_slots * 2 : 64;
    int32_t *slot = malloc(ns * sizeof *slot);
    if (!slot) return -1;
    for (size_t i = 0; i < ns; i++) slot[i] = -1;
    for (size_t k = 0; k < t->n; k++) {
        size_t h = (size_t)hash_str(t->str[k], strlen(t->str[k])) & (ns - 1);
        while (slot[h] >= 0) h = (h + 1) & (ns - 1);
        slot[h] = (int32_t)k;
    }
    free(t->slot);
    t->slot = slot;
    t->n_slots = ns;
    return 0;
}

/* The index of the name (len bytes at s), added if new; -1 on out-of-memory. */
static int32_t names_intern(name_table *t, const char *s, size_t len) {
    if ((t->n + 1) * 2 > t->n_slots && names_grow(t) != 0) return -1;
    size_t h = (size_t)hash_str(s, len) & (t->n_slots - 1);
    while (t->slot[h] >= 0) {
        const char *c = t->str[t->slot[h]];
        if (strlen(c) == len && memcmp(c, s, len) == 0) return t->slot[h];
        h = (h + 1) & (t->n_slots - 1);
    }
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 32;
        char **str = realloc(t->str, cap * sizeof *str);
        if (!str) return -1;
        t->str = str;
        t->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return -1;
    memcpy(c, s, len);
    c[len] = '\0';
    t->str[t->n] = c;
    t->slot[h] = (int32_t)t->n;
    return (int32_t)t->n++;
}

static void names_free(name_table *t) {
    for (size_t i = 0; i < t->n; i++) free(t->str[i]);
    free(t->str);
    free(t->slot);
}

/* The trace being read: events, each one's name index (stashed in the name pointer's place
 * until the pool exists). */
typedef struct {
    hpt_trace *tr;
    int32_t *name_idx; /* (cap) */
    size_t cap;
    name_table names;
    const char *path;
} reader;

static hpt_status reader_push(reader *r, const hpt_mem_event *e, int32_t name_idx) {
    hpt_trace *tr = r->tr;
    if (tr->n_events == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 4096;
        hpt_mem_event *ev = realloc(tr->events, cap * sizeof *ev);
        if (!ev) return hpt_fail(HPT_ERR_OOM, "reading %s: %zu events", r->path, cap);
        tr->events = ev;
        int32_t *ni = realloc(r->name_idx, cap * sizeof *ni);
        if (!ni) return hpt_fail(HPT_ERR_OOM, "reading %s: %zu events", r->path, cap);
        r->name_idx = ni;
        r->cap = cap;
    }
    tr->events[tr->n_events] = *e;
    tr->events[tr->n_events].name = NULL;
    r->name_idx[tr->n_events++] = name_idx;
    return HPT_OK;
}

/* Moves the interned names into one pool the trace owns and points the events at it. */
static hpt_status reader_finish(reader *r) {
    size_t total = 1;
    for (size_t i = 0; i < r->names.n; i++) total += strlen(r->names.str[i]) + 1;
    r->tr->names = malloc(total);
    size_t *off = malloc((r->names.n + 1) * sizeof *off);
    if (!r->tr->names || !off) {
        free(off);
        return hpt_fail(HPT_ERR_OOM, "reading %s: names", r->path);
    }
    size_t pos = 0;
    for (size_t i = 0; i < r->names.n; i++) {
        size_t len = strlen(r->names.str[i]) + 1;
        memcpy(r->tr->names + pos, r->names.str[i], len);
        off[i] = pos;
        pos += len;
    }
    r->tr->names[pos] = '\0';
    for (size_t i = 0; i < r->tr->n_events; i++)
        if (r->name_idx[i] >= 0) r->tr->events[i].name = r->tr->names + off[r->name_idx[i]];
    free(off);
    return HPT_OK;
}

static int lookup(const char *s, size_t len, const char *(*name_of)(int), int count) {
    for (int i = 0; i < count; i++) {
        const char *nm = name_of(i);
        if (strlen(nm) == len && memcmp(nm, s, len) == 0) return i;
    }
    return -1;
}
static const char *phase_of(int i) { return hpt_phase_name((hpt_phase)i); }
static const char *tier_of(int i) { return hpt_tier_name((hpt_tier)i); }
static const char *cat_of(int i) { return hpt_category_name((hpt_category)i); }
static const char *kind_of(int i) { return kind_name(i); }

/* -- JSON -- */

static int j_u64(const cJSON *o, const char *key, uint64_t *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(it) || !(it->valuedouble >= 0.0) || it->valuedouble > 1.8e19) return -1;
    *out = (uint64_t)it->valuedouble;
    return 0;
}
static int j_i64(const cJSON *o, const char *key, int64_t *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(it) || !(fabs(it->valuedouble) < 9.2e18)) return -1;
    *out = (int64_t)it->valuedouble;
    return 0;
}
static int j_int(const cJSON *o, const char *key, int *out) {
    int64_t v;
    if (j_i64(o, key, &v) || v < INT32_MIN || v > INT32_MAX) return -1;
    *out = (int)v;
    return 0;
}
static int j_enum(const cJSON *o, const char *key, const char *(*name_of)(int), int count, int *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(it)) return -1;
    *out = lookup(it->valuestring, strlen(it->valuestring), name_of, count);
    return *out < 0 ? -1 : 0;
}

static void j_tiers(const cJSON *o, const char *key, uint64_t v[HPT_TIER_COUNT]) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        if (j_u64(it, hpt_tier_name((hpt_tier)t), &v[t])) v[t] = 0;
}

/* Metadata fields are optional (0 when missing); the format and version are not. */
static hpt_status read_json_header(reader *r, const cJSON *root) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "hptrain-trace") != 0)
        return hpt_fail(HPT_ERR_FORMAT, "%s is not an hptrain trace (no \"format\": \"hptrain-trace\")", r->path);
    int version;
    if (j_int(root, "version", &version) || version < 1 || version > HPT_TRACE_VERSION)
        return hpt_fail(HPT_ERR_FORMAT, "%s: unsupported trace version (this build reads 1..%d)",
                        r->path, HPT_TRACE_VERSION);
    hpt_trace_meta *m = &r->tr->meta;
    *m = hpt_trace_meta_defaults();
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "meta");
    if (!cJSON_IsObject(meta)) return HPT_OK;
    j_tiers(meta, "budget_bytes", m->budget_bytes);
    j_tiers(meta, "accounted_peak_bytes", m->accounted_peak_bytes);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(meta, "model");
    if (j_int(model, "L", &m->cfg.L)) m->cfg.L = 0;
    if (j_int(model, "C", &m->cfg.C)) m->cfg.C = 0;
    if (j_int(model, "NH", &m->cfg.NH)) m->cfg.NH = 0;
    if (j_int(model, "V", &m->cfg.V)) m->cfg.V = 0;
    if (j_int(model, "Vp", &m->cfg.Vp)) m->cfg.Vp = 0;
    if (j_int(model, "maxT", &m->cfg.maxT)) m->cfg.maxT = 0;
    if (j_u64(meta, "num_params", &m->num_params)) m->num_params = 0;
    if (j_int(meta, "B", &m->B)) m->B = 0;
    if (j_int(meta, "T", &m->T)) m->T = 0;
    if (j_int(meta, "has_val", &m->has_val)) m->has_val = 0;
    if (j_int(meta, "threads", &m->threads)) m->threads = 0;
    if (j_i64(meta, "steps", &m->steps)) m->steps = 0;
    if (j_u64(meta, "rss_baseline_bytes", &m->rss_baseline_bytes)) m->rss_baseline_bytes = 0;
    if (j_u64(meta, "rss_peak_bytes", &m->rss_peak_bytes)) m->rss_peak_bytes = 0;
    return HPT_OK;
}

static hpt_status read_json_event(reader *r, const cJSON *o) {
    size_t idx = r->tr->n_events;
    hpt_mem_event e;
    memset(&e, 0, sizeof e);
    int phase, kind, tier, dst, cat, layer, in_arena;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "t");
    const char *bad = NULL;
    if (!cJSON_IsObject(o)) bad = "an object";
    else if (!cJSON_IsNumber(t) || !isfinite(t->valuedouble)) bad = "\"t\"";
    else if (j_i64(o, "step", &e.step)) bad = "\"step\"";
    else if (j_enum(o, "phase", phase_of, HPT_PHASE_COUNT, &phase)) bad = "\"phase\"";
    else if (j_int(o, "layer", &layer)) bad = "\"layer\"";
    else if (j_enum(o, "kind", kind_of, N_KINDS, &kind)) bad = "\"kind\"";
    else if (j_enum(o, "tier", tier_of, HPT_TIER_COUNT, &tier)) bad = "\"tier\"";
    else if (j_enum(o, "dst_tier", tier_of, HPT_TIER_COUNT, &dst)) bad = "\"dst_tier\"";
    else if (j_enum(o, "category", cat_of, HPT_CAT_COUNT, &cat)) bad = "\"category\"";
    else if (j_int(o, "in_arena", &in_arena) || (in_arena != 0 && in_arena != 1)) bad = "\"in_arena\"";
    else if (j_u64(o, "bytes", &e.bytes)) bad = "\"bytes\"";
    else if (j_u64(o, "tier_live_bytes", &e.tier_live_bytes)) bad = "\"tier_live_bytes\"";
    else if (j_u64(o, "arena_live_bytes", &e.arena_live_bytes)) bad = "\"arena_live_bytes\"";
    if (bad)
        return hpt_fail(HPT_ERR_FORMAT, "%s: event %zu: missing or invalid %s", r->path, idx, bad);
    e.t = t->valuedouble;
    e.phase = (uint8_t)phase;
    e.layer = layer;
    e.kind = (uint8_t)kind;
    e.tier = (uint8_t)tier;
    e.dst_tier = (uint8_t)dst;
    e.category = (uint8_t)cat;
    e.in_arena = (uint8_t)in_arena;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
    int32_t ni = -1;
    if (cJSON_IsString(nm)) {
        ni = names_intern(&r->names, nm->valuestring, strlen(nm->valuestring));
        if (ni < 0) return hpt_fail(HPT_ERR_OOM, "reading %s: names", r->path);
    } else if (nm && !cJSON_IsNull(nm)) {
        return hpt_fail(HPT_ERR_FORMAT, "%s: event %zu: \"name\" must be a string or null", r->path, idx);
    }
    return reader_push(r, &e, ni);
}

static hpt_status read_json_tree(reader *r, const char *buf, size_t len) {
    cJSON *root = cJSON_ParseWithLength(buf, len);
    if (!root) return hpt_fail(HPT_ERR_FORMAT, "%s is not valid JSON (near byte %zu)", r->path,
                               (size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - buf : 0));
    hpt_status s = read_json_header(r, root);
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(root, "events");
    if (s == HPT_OK && !cJSON_IsArray(evs))
        s = hpt_fail(HPT_ERR_FORMAT, "%s: no \"events\" array", r->path);
    const cJSON *e;
    if (s == HPT_OK) cJSON_ArrayForEach(e, evs) {
        s = read_json_event(r, e);
        if (s != HPT_OK) break;
    }
    cJSON_Delete(root);
    return s;
}

/* The writer's layout: line 1 is the header ending in "events":[ , then one event per line
 * (a trailing comma after all but the last), then "]}". Returns 1 when buf has that layout
 * (and was read, or failed with *s set), 0 to fall back to the whole tree. */
static int read_json_lines(reader *r, char *buf, size_t len, hpt_status *s) {
    static const char k_tail[] = "\"events\":[";
    char *nl = memchr(buf, '\n', len);
    if (!nl) return 0;
    size_t hlen = (size_t)(nl - buf);
    if (hlen < sizeof k_tail - 1 || memcmp(nl - (sizeof k_tail - 1), k_tail, sizeof k_tail - 1) != 0)
        return 0;
    /* the header is an object once "events":[ is replaced by "events":[]} */
    char *head = malloc(hlen + 3);
    if (!head) {
        *s = hpt_fail(HPT_ERR_OOM, "reading %s", r->path);
        return 1;
    }
    memcpy(head, buf, hlen);
    memcpy(head + hlen, "]}", 3);
    cJSON *root = cJSON_Parse(head);
    free(head);
    if (!root) {
        *s = hpt_fail(HPT_ERR_FORMAT, "%s: line 1 is not a trace header", r->path);
        return 1;
    }
    *s = read_json_header(r, root);
    cJSON_Delete(root);
    char *p = nl + 1, *end = buf + len;
    size_t line = 2;
    int closed = 0;
    while (*s == HPT_OK && p < end) {
        char *q = memchr(p, '\n', (size_t)(end - p));
        if (!q) q = end;
        char *a = p, *b = q;
        while (a < b && (*a == ' ' || *a == '\t' || *a == '\r')) a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t' || b[-1] == '\r')) b--;
        if (b > a && b[-1] == ',') b--;
        if (b - a == 2 && a[0] == ']' && a[1] == '}') {
            closed = 1;
        } else if (b > a) {
            if (closed) {
                *s = hpt_fail(HPT_ERR_FORMAT, "%s: line %zu: text after the end of the trace", r->path, line);
                break;
            }
            cJSON *o = cJSON_ParseWithLength(a, (size_t)(b - a));
            if (!o) {
                *s = hpt_fail(HPT_ERR_FORMAT, "%s: line %zu is not a JSON event", r->path, line);
                break;
            }
            *s = read_json_event(r, o);
            cJSON_Delete(o);
        }
        p = q + 1;
        line++;
    }
    if (*s == HPT_OK && !closed)
        *s = hpt_fail(HPT_ERR_FORMAT, "%s is truncated (no closing \"]}\" after %zu events)",
                      r->path, r->tr->n_events);
    return 1;
}

/* -- CSV -- */

/* Splits off the next comma-separated field at *p (unquoted); returns its length. */
static size_t csv_field(const char **p, const char *end, const char **start) {
    *start = *p;
    const char *c = memchr(*p, ',', (size_t)(end - *p));
    if (!c) c = end;
    size_t len = (size_t)(c - *p);
    *p = c < end ? c + 1 : end;
    return len;
}

static int parse_u64(const char *s, size_t len, uint64_t *out) {
    char tmp[32];
    if (len == 0 || len >= sizeof tmp || s[0] == '-') return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    char *e;
    errno = 0;
    unsigned long long v = strtoull(tmp, &e, 10);
    if (*e || errno) return -1;
    *out = v;
    return 0;
}
static int parse_i64(const char *s, size_t len, int64_t *out) {
    char tmp[32];
    if (len == 0 || len >= sizeof tmp) return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    char *e;
    errno = 0;
    long long v = strtoll(tmp, &e, 10);
    if (*e || errno) return -1;
    *out = v;
    return 0;
}
static int parse_f64(const char *s, size_t len, double *out) {
    char tmp[64];
    if (len == 0 || len >= sizeof tmp) return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    char *e;
    errno = 0;
    double v = strtod(tmp, &e);
    if (*e || errno || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static void csv_meta(hpt_trace_meta *m, const char *key, size_t klen, const char *val, size_t vlen) {
    uint64_t u = 0;
    int64_t i = 0;
    int okU = parse_u64(val, vlen, &u) == 0, okI = parse_i64(val, vlen, &i) == 0;
#define KEY(k) (klen == sizeof(k) - 1 && memcmp(key, k, klen) == 0)
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        char k1[64], k2[64];
        snprintf(k1, sizeof k1, "budget_bytes.%s", hpt_tier_name((hpt_tier)t));
        snprintf(k2, sizeof k2, "accounted_peak_bytes.%s", hpt_tier_name((hpt_tier)t));
        if (okU && klen == strlen(k1) && memcmp(key, k1, klen) == 0) m->budget_bytes[t] = u;
        if (okU && klen == strlen(k2) && memcmp(key, k2, klen) == 0) m->accounted_peak_bytes[t] = u;
    }
    if (!okI) return;
    if (KEY("model.L")) m->cfg.L = (int)i;
    else if (KEY("model.C")) m->cfg.C = (int)i;
    else if (KEY("model.NH")) m->cfg.NH = (int)i;
    else if (KEY("model.V")) m->cfg.V = (int)i;
    else if (KEY("model.Vp")) m->cfg.Vp = (int)i;
    else if (KEY("model.maxT")) m->cfg.maxT = (int)i;
    else if (KEY("num_params") && okU) m->num_params = u;
    else if (KEY("B")) m->B = (int)i;
    else if (KEY("T")) m->T = (int)i;
    else if (KEY("has_val")) m->has_val = (int)i;
    else if (KEY("threads")) m->threads = (int)i;
    else if (KEY("steps")) m->steps = i;
    else if (KEY("rss_baseline_bytes") && okU) m->rss_baseline_bytes = u;
    else if (KEY("rss_peak_bytes") && okU) m->rss_peak_bytes = u;
#undef KEY
}

static hpt_status read_csv(reader *r, const char *buf, size_t len) {
    hpt_trace_meta *m = &r->tr->meta;
    *m = hpt_trace_meta_defaults();
    const char *p = buf, *end = buf + len;
    size_t line = 0;
    int have_header = 0, version_ok = 0;
    char *name = NULL;
    size_t name_cap = 0;
    hpt_status s = HPT_OK;
    while (s == HPT_OK && p < end) {
        const char *q = memchr(p, '\n', (size_t)(end - p));
        if (!q) q = end;
        const char *a = p, *b = q;
        p = q + 1;
        line++;
        if (b > a && b[-1] == '\r') b--;
        if (b == a) continue;
        if (*a == '#') {
            a++;
            while (a < b && *a == ' ') a++;
            const char *eq = memchr(a, '=', (size_t)(b - a));
            if (!eq) continue;
            size_t klen = (size_t)(eq - a);
            if (klen == 7 && memcmp(a, "version", 7) == 0) {
                int64_t v;
                if (parse_i64(eq + 1, (size_t)(b - eq - 1), &v) || v < 1 || v > HPT_TRACE_VERSION) {
                    s = hpt_fail(HPT_ERR_FORMAT, "%s: unsupported trace version (this build reads 1..%d)",
                                 r->path, HPT_TRACE_VERSION);
                    break;
                }
                version_ok = 1;
            }
            csv_meta(m, a, klen, eq + 1, (size_t)(b - eq - 1));
            continue;
        }
        if (!have_header) {
            if ((size_t)(b - a) != sizeof k_csv_header - 1 || memcmp(a, k_csv_header, (size_t)(b - a)) != 0) {
                s = hpt_fail(HPT_ERR_FORMAT, "%s: line %zu: expected the header '%s'", r->path, line,
                             k_csv_header);
                break;
            }
            if (!version_ok) {
                s = hpt_fail(HPT_ERR_FORMAT, "%s is not an hptrain trace (no '# version=' line)", r->path);
                break;
            }
            have_header = 1;
            continue;
        }
        hpt_mem_event e;
        memset(&e, 0, sizeof e);
        const char *f[12];
        size_t fl[12];
        const char *c = a;
        for (int k = 0; k < 12; k++) fl[k] = csv_field(&c, b, &f[k]);
        int phase = lookup(f[2], fl[2], phase_of, HPT_PHASE_COUNT);
        int kind = lookup(f[4], fl[4], kind_of, N_KINDS);
        int tier = lookup(f[5], fl[5], tier_of, HPT_TIER_COUNT);
        int dst = lookup(f[6], fl[6], tier_of, HPT_TIER_COUNT);
        int cat = lookup(f[7], fl[7], cat_of, HPT_CAT_COUNT);
        int64_t layer = 0, in_arena = 0;
        if (parse_f64(f[0], fl[0], &e.t) || parse_i64(f[1], fl[1], &e.step) || phase < 0 ||
            parse_i64(f[3], fl[3], &layer) || layer < INT32_MIN || layer > INT32_MAX || kind < 0 ||
            tier < 0 || dst < 0 || cat < 0 || parse_i64(f[8], fl[8], &in_arena) ||
            (in_arena != 0 && in_arena != 1) || parse_u64(f[9], fl[9], &e.bytes) ||
            parse_u64(f[10], fl[10], &e.tier_live_bytes) ||
            parse_u64(f[11], fl[11], &e.arena_live_bytes)) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: line %zu is not a trace event", r->path, line);
            break;
        }
        e.phase = (uint8_t)phase;
        e.layer = (int32_t)layer;
        e.kind = (uint8_t)kind;
        e.tier = (uint8_t)tier;
        e.dst_tier = (uint8_t)dst;
        e.category = (uint8_t)cat;
        e.in_arena = (uint8_t)in_arena;
        int32_t ni = -1;
        if (c < b) { /* the name: a quoted field, "" inside for a quote */
            if (*c != '"' || b - c < 2 || b[-1] != '"') {
                s = hpt_fail(HPT_ERR_FORMAT, "%s: line %zu: the name must be quoted", r->path, line);
                break;
            }
            size_t need = (size_t)(b - c);
            if (need > name_cap) {
                char *nn = realloc(name, need);
                if (!nn) {
                    s = hpt_fail(HPT_ERR_OOM, "reading %s", r->path);
                    break;
                }
                name = nn;
                name_cap = need;
            }
            size_t nlen = 0;
            for (const char *x = c + 1; x < b - 1; x++) {
                if (*x == '"' && x + 1 < b - 1 && x[1] == '"') x++;
                name[nlen++] = *x;
            }
            ni = names_intern(&r->names, name, nlen);
            if (ni < 0) {
                s = hpt_fail(HPT_ERR_OOM, "reading %s: names", r->path);
                break;
            }
        }
        s = reader_push(r, &e, ni);
    }
    free(name);
    if (s == HPT_OK && !have_header)
        s = hpt_fail(HPT_ERR_FORMAT, "%s is not an hptrain trace (no CSV header)", r->path);
    return s;
}

void hpt_trace_free(hpt_trace *tr) {
    if (!tr) return;
    free(tr->events);
    free(tr->names);
    free(tr);
}

hpt_status hpt_trace_load(const char *path, hpt_trace **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hpt_fail(HPT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    hpt_status s = HPT_OK;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            char *nb = realloc(buf, cap + 1);
            if (!nb) {
                s = hpt_fail(HPT_ERR_OOM, "reading %s", path);
                break;
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (s == HPT_OK && ferror(f)) s = hpt_fail(HPT_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    fclose(f);
    reader r;
    memset(&r, 0, sizeof r);
    r.path = path;
    if (s == HPT_OK) {
        buf[len] = '\0';
        r.tr = calloc(1, sizeof *r.tr);
        if (!r.tr) s = hpt_fail(HPT_ERR_OOM, "reading %s", path);
    }
    if (s == HPT_OK) {
        size_t i = 0;
        while (i < len && (buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\r' || buf[i] == '\t')) i++;
        if (i == len) s = hpt_fail(HPT_ERR_FORMAT, "%s is empty", path);
        else if (buf[i] == '{') {
            if (!read_json_lines(&r, buf + i, len - i, &s)) {
                /* not the writer's layout: a reformatted file, read as one tree */
                free(r.tr->events);
                r.tr->events = NULL;
                r.tr->n_events = 0;
                s = read_json_tree(&r, buf + i, len - i);
            }
        } else {
            s = read_csv(&r, buf + i, len - i);
        }
    }
    free(buf);
    if (s == HPT_OK) s = reader_finish(&r);
    free(r.name_idx);
    names_free(&r.names);
    if (s != HPT_OK) {
        hpt_trace_free(r.tr);
        return s;
    }
    *out = r.tr;
    return HPT_OK;
}

/* ---- the summary ---------------------------------------------------------------------------- */

/* The running state of a replay: accounted bytes by tier and category (signed: a free of a
 * block allocated before recording began goes below zero), each tier's total as the events
 * report it, and the arena buffers alive, oldest first. */
typedef struct {
    int64_t live[HPT_TIER_COUNT][HPT_CAT_COUNT];
    uint64_t total[HPT_TIER_COUNT];
    uint64_t arena_live;
    hpt_profile_buf *bufs;   /* (n_bufs) live arena buffers in birth order */
    size_t n_bufs, cap_bufs;
    const char *last_born;   /* name of the latest buffer or block born (NULL: unnamed) */
    int oom;
} replay;

static int same_name(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

static void replay_apply(replay *r, const hpt_mem_event *e) {
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

static uint64_t clamp0(int64_t v) { return v > 0 ? (uint64_t)v : 0; }

/* Device bytes in use: accounted, with the activation category counted by what is live inside
 * arenas instead of their reserved size. */
static uint64_t in_use_of(const replay *r) {
    uint64_t acts = clamp0(r->live[HPT_TIER_DEVICE][HPT_CAT_ACTS]);
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
    replay r;
    memset(&r, 0, sizeof r);
    phase_acc acc[HPT_PHASE_COUNT], acc_u[HPT_PHASE_COUNT];
    memset(acc, 0, sizeof acc);
    memset(acc_u, 0, sizeof acc_u);
    size_t best = SIZE_MAX;
    uint64_t best_tot = 0, best_arena = 0;
    for (size_t i = 0; i < n; i++) {
        const hpt_mem_event *e = &ev[i];
        replay_apply(&r, e);
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
        replay_apply(&r, &ev[i]);
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
                out->peak_by_cat[c] = clamp0(r.live[HPT_TIER_DEVICE][c]);
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

static void state_of(const replay *r, column *c) {
    const int64_t *lv = r->live[HPT_TIER_DEVICE];
    uint64_t acts = clamp0(lv[HPT_CAT_ACTS]);
    uint64_t live = r->arena_live < acts ? r->arena_live : acts;
    c->v[S_PARAMS] = (double)clamp0(lv[HPT_CAT_PARAMS]);
    c->v[S_GRADS] = (double)clamp0(lv[HPT_CAT_GRADS]);
    c->v[S_OPTIM] = (double)clamp0(lv[HPT_CAT_OPTIM]);
    c->v[S_IO] = (double)clamp0(lv[HPT_CAT_IO]);
    c->v[S_WORK] = (double)clamp0(lv[HPT_CAT_WORKSPACE]);
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
    replay r;
    memset(&r, 0, sizeof r);
    column cur, best;
    memset(&cur, 0, sizeof cur);
    best = cur;
    int col = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (int)(ev[i].t / tmax * NC);
        if (c >= NC) c = NC - 1;
        if (c < 0) c = 0;
        while (col < c) {
            cols[col++] = best;
            best = cur;
        }
        replay_apply(&r, &ev[i]);
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

    out_file o;
    hpt_status st = out_begin(&o, path);
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
    if (m->cfg.L) fprintf(f, " (GPT-2 L=%d C=%d NH=%d, B=%d T=%d)", m->cfg.L, m->cfg.C, m->cfg.NH, m->B, m->T);
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
    return out_end(&o);
}
