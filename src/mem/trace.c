/* trace.c: traces of the event timeline, written (JSON or CSV) and read back. A trace is the
 * run's metadata (shape, options, budgets, RSS) and every recorded event in order; the summary
 * (profile.c) and the picture (profile_svg.c) are computed from the events.
 *
 * Invariants:
 *   - a trace is written under a temporary name beside its path and renamed over it on success
 *     (prof_out_begin / prof_out_end), so a reader never sees half a trace;
 *   - what the writers write, hpt_trace_load reads back as the same events (times print with
 *     %.17g, which round-trips; CSV turns a newline inside a name into a space), the JSON line by
 *     line, so a long run's trace is never one parsed tree in memory;
 *   - a loaded trace owns its events and the names they point to: names are interned while
 *     reading and land in one pool allocated at the end, so the events' pointers never move.
 * Nothing here prints: the command line does (cmd_profile.c). */
#include "mem/profile_int.h"

#include <cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stddef.h>
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

/* The atomic writer the picture shares (profile_int.h). */
hpt_status prof_out_begin(prof_out *o, const char *path) {
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

hpt_status prof_out_end(prof_out *o) {
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
    prof_out o;
    HPT_CHECK(prof_out_begin(&o, path));
    FILE *f = o.f;
    /* The header and each event on a line of their own: hpt_trace_load reads such a file line
     * by line, so a long run's trace never has to be one parsed tree in memory. */
    fprintf(f, "{\"format\":\"hptrain-trace\",\"version\":%d,\"meta\":{", HPT_TRACE_VERSION);
    json_tiers(f, "budget_bytes", m->budget_bytes);
    fprintf(f, ",\"model\":{\"arch\":%d,\"L\":%d,\"C\":%d,\"NH\":%d,\"NKV\":%d,\"FF\":%d,\"V\":%d,"
            "\"Vp\":%d,\"maxT\":%d,\"tied\":%d,\"attn_bias\":%d,\"mlp_bias\":%d", m->cfg.arch, m->cfg.L,
            m->cfg.C, m->cfg.NH, m->cfg.NKV, m->cfg.FF, m->cfg.V, m->cfg.Vp, m->cfg.maxT, m->cfg.tied,
            m->cfg.attn_bias, m->cfg.mlp_bias);
    fprintf(f, ",\"norm_eps\":%.9g,\"rope_theta\":%.9g,\"rope_factor\":%.9g,\"rope_low_freq\":%.9g,"
            "\"rope_high_freq\":%.9g,\"rope_orig_maxT\":%d,\"init_range\":%.9g",
            (double)m->cfg.norm_eps, (double)m->cfg.rope_theta, (double)m->cfg.rope_factor,
            (double)m->cfg.rope_low_freq, (double)m->cfg.rope_high_freq, m->cfg.rope_orig_maxT,
            (double)m->cfg.init_range);
    if (m->cfg.hd) fprintf(f, ",\"hd\":%d", m->cfg.hd); /* Qwen3's head width: only where set */
    if (m->cfg.window) fprintf(f, ",\"window\":%d", m->cfg.window); /* a sliding window: the same */
    if (m->cfg.arch == HPT_ARCH_GEMMA3) /* Gemma 3's layer pattern, local base and scalar */
        fprintf(f, ",\"swa_pattern\":%d,\"rope_local_theta\":%.9g,\"attn_scalar\":%.9g",
                m->cfg.swa_pattern, (double)m->cfg.rope_local_theta, (double)m->cfg.attn_scalar);
    fputc('}', f);
    fprintf(f, ",\"num_params\":%llu,\"B\":%d,\"T\":%d,\"has_val\":%d,\"threads\":%d,\"steps\":%lld,"
            "\"rss_baseline_bytes\":%llu,\"rss_peak_bytes\":%llu,",
            (unsigned long long)m->num_params, m->B, m->T, m->has_val, m->threads,
            (long long)m->steps, (unsigned long long)m->rss_baseline_bytes,
            (unsigned long long)m->rss_peak_bytes);
    json_tiers(f, "accounted_peak_bytes", m->accounted_peak_bytes);
    fprintf(f, ",\"procs\":%d,\"rank\":%d", m->procs, m->rank);
    if (m->has_plan) {
        fputs(",\"plan\":", f);
        json_str(f, m->plan);
    }
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
    return prof_out_end(&o);
}

static const char k_csv_header[] = "t,step,phase,layer,kind,tier,dst_tier,category,in_arena,bytes,"
                                   "tier_live_bytes,arena_live_bytes,name";

hpt_status hpt_trace_write_csv(const char *path, const hpt_trace_meta *m,
                               const hpt_mem_event *ev, size_t n) {
    prof_out o;
    HPT_CHECK(prof_out_begin(&o, path));
    FILE *f = o.f;
    fprintf(f, "# format=hptrain-trace\n# version=%d\n", HPT_TRACE_VERSION);
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        fprintf(f, "# budget_bytes.%s=%llu\n", hpt_tier_name((hpt_tier)t),
                (unsigned long long)m->budget_bytes[t]);
    fprintf(f, "# model.arch=%d\n# model.L=%d\n# model.C=%d\n# model.NH=%d\n# model.NKV=%d\n"
            "# model.FF=%d\n# model.V=%d\n# model.Vp=%d\n# model.maxT=%d\n# model.tied=%d\n"
            "# model.attn_bias=%d\n# model.mlp_bias=%d\n", m->cfg.arch, m->cfg.L, m->cfg.C,
            m->cfg.NH, m->cfg.NKV, m->cfg.FF, m->cfg.V, m->cfg.Vp, m->cfg.maxT, m->cfg.tied,
            m->cfg.attn_bias, m->cfg.mlp_bias);
    fprintf(f, "# model.norm_eps=%.9g\n# model.rope_theta=%.9g\n# model.rope_factor=%.9g\n"
            "# model.rope_low_freq=%.9g\n# model.rope_high_freq=%.9g\n# model.rope_orig_maxT=%d\n"
            "# model.init_range=%.9g\n", (double)m->cfg.norm_eps, (double)m->cfg.rope_theta,
            (double)m->cfg.rope_factor, (double)m->cfg.rope_low_freq, (double)m->cfg.rope_high_freq,
            m->cfg.rope_orig_maxT, (double)m->cfg.init_range);
    if (m->cfg.hd) fprintf(f, "# model.hd=%d\n", m->cfg.hd);
    if (m->cfg.window) fprintf(f, "# model.window=%d\n", m->cfg.window);
    if (m->cfg.arch == HPT_ARCH_GEMMA3)
        fprintf(f, "# model.swa_pattern=%d\n# model.rope_local_theta=%.9g\n# model.attn_scalar=%.9g\n",
                m->cfg.swa_pattern, (double)m->cfg.rope_local_theta, (double)m->cfg.attn_scalar);
    fprintf(f, "# num_params=%llu\n# B=%d\n# T=%d\n# has_val=%d\n# threads=%d\n# steps=%lld\n"
            "# rss_baseline_bytes=%llu\n# rss_peak_bytes=%llu\n",
            (unsigned long long)m->num_params, m->B, m->T, m->has_val, m->threads,
            (long long)m->steps, (unsigned long long)m->rss_baseline_bytes,
            (unsigned long long)m->rss_peak_bytes);
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        fprintf(f, "# accounted_peak_bytes.%s=%llu\n", hpt_tier_name((hpt_tier)t),
                (unsigned long long)m->accounted_peak_bytes[t]);
    fprintf(f, "# procs=%d\n# rank=%d\n", m->procs, m->rank);
    if (m->has_plan) { /* to the end of its line: flags hold no newline */
        fputs("# plan=", f);
        for (const char *c = m->plan; *c; c++) fputc(*c == '\n' || *c == '\r' ? ' ' : *c, f);
        fputc('\n', f);
    }
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
    return prof_out_end(&o);
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
/* a finite number into *out; else *out stays (0: the meta's defaults) */
static void j_float(const cJSON *o, const char *key, float *out) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (cJSON_IsNumber(it) && isfinite(it->valuedouble) && fabs(it->valuedouble) < 3e38)
        *out = (float)it->valuedouble;
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
    /* arch, NKV, FF, tied and the biases came with the second architecture: a trace without
     * them is the first's, id 0 (0: the model fills that architecture's values) */
    if (j_int(model, "arch", &m->cfg.arch)) m->cfg.arch = 0;
    if (j_int(model, "NKV", &m->cfg.NKV)) m->cfg.NKV = 0;
    if (j_int(model, "FF", &m->cfg.FF)) m->cfg.FF = 0;
    if (j_int(model, "tied", &m->cfg.tied)) m->cfg.tied = 0;
    if (j_int(model, "attn_bias", &m->cfg.attn_bias)) m->cfg.attn_bias = 0;
    if (j_int(model, "mlp_bias", &m->cfg.mlp_bias)) m->cfg.mlp_bias = 0;
    if (j_int(model, "rope_orig_maxT", &m->cfg.rope_orig_maxT)) m->cfg.rope_orig_maxT = 0;
    if (j_int(model, "hd", &m->cfg.hd)) m->cfg.hd = 0;
    if (j_int(model, "window", &m->cfg.window)) m->cfg.window = 0;
    if (j_int(model, "swa_pattern", &m->cfg.swa_pattern)) m->cfg.swa_pattern = 0;
    j_float(model, "rope_local_theta", &m->cfg.rope_local_theta);
    j_float(model, "attn_scalar", &m->cfg.attn_scalar);
    j_float(model, "norm_eps", &m->cfg.norm_eps);
    j_float(model, "rope_theta", &m->cfg.rope_theta);
    j_float(model, "rope_factor", &m->cfg.rope_factor);
    j_float(model, "rope_low_freq", &m->cfg.rope_low_freq);
    j_float(model, "rope_high_freq", &m->cfg.rope_high_freq);
    j_float(model, "init_range", &m->cfg.init_range);
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
    if (j_int(meta, "procs", &m->procs)) m->procs = 0;
    if (j_int(meta, "rank", &m->rank)) m->rank = 0;
    const cJSON *plan = cJSON_GetObjectItemCaseSensitive(meta, "plan");
    if (cJSON_IsString(plan)) {
        if (strlen(plan->valuestring) >= sizeof m->plan)
            return hpt_fail(HPT_ERR_FORMAT, "%s: the plan's flags are longer than %zu bytes", r->path,
                            sizeof m->plan - 1);
        snprintf(m->plan, sizeof m->plan, "%s", plan->valuestring);
        m->has_plan = 1;
    }
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
    if (KEY("plan")) { /* read_csv refused a longer one */
        memcpy(m->plan, val, vlen);
        m->plan[vlen] = '\0';
        m->has_plan = 1;
        return;
    }
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        char k1[64], k2[64];
        snprintf(k1, sizeof k1, "budget_bytes.%s", hpt_tier_name((hpt_tier)t));
        snprintf(k2, sizeof k2, "accounted_peak_bytes.%s", hpt_tier_name((hpt_tier)t));
        if (okU && klen == strlen(k1) && memcmp(key, k1, klen) == 0) m->budget_bytes[t] = u;
        if (okU && klen == strlen(k2) && memcmp(key, k2, klen) == 0) m->accounted_peak_bytes[t] = u;
    }
    static const struct { const char *key; size_t off; } reals[] = {
        {"model.norm_eps", offsetof(hpt_model_config, norm_eps)},
        {"model.rope_theta", offsetof(hpt_model_config, rope_theta)},
        {"model.rope_factor", offsetof(hpt_model_config, rope_factor)},
        {"model.rope_low_freq", offsetof(hpt_model_config, rope_low_freq)},
        {"model.rope_high_freq", offsetof(hpt_model_config, rope_high_freq)},
        {"model.init_range", offsetof(hpt_model_config, init_range)},
        {"model.rope_local_theta", offsetof(hpt_model_config, rope_local_theta)},
        {"model.attn_scalar", offsetof(hpt_model_config, attn_scalar)}};
    double d;
    for (size_t k = 0; k < sizeof reals / sizeof reals[0]; k++)
        if (klen == strlen(reals[k].key) && memcmp(key, reals[k].key, klen) == 0 &&
            parse_f64(val, vlen, &d) == 0 && fabs(d) < 3e38)
            *(float *)((char *)&m->cfg + reals[k].off) = (float)d;
    if (!okI) return;
    if (KEY("model.arch")) m->cfg.arch = (int)i;
    else if (KEY("model.NKV")) m->cfg.NKV = (int)i;
    else if (KEY("model.FF")) m->cfg.FF = (int)i;
    else if (KEY("model.tied")) m->cfg.tied = (int)i;
    else if (KEY("model.attn_bias")) m->cfg.attn_bias = (int)i;
    else if (KEY("model.mlp_bias")) m->cfg.mlp_bias = (int)i;
    else if (KEY("model.rope_orig_maxT")) m->cfg.rope_orig_maxT = (int)i;
    else if (KEY("model.hd")) m->cfg.hd = (int)i;
    else if (KEY("model.window")) m->cfg.window = (int)i;
    else if (KEY("model.swa_pattern")) m->cfg.swa_pattern = (int)i;
    else if (KEY("model.L")) m->cfg.L = (int)i;
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
    else if (KEY("procs")) m->procs = (int)i;
    else if (KEY("rank")) m->rank = (int)i;
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
            if (klen == 4 && memcmp(a, "plan", 4) == 0 && (size_t)(b - eq - 1) >= sizeof m->plan) {
                s = hpt_fail(HPT_ERR_FORMAT, "%s: line %zu: the plan's flags are longer than %zu bytes",
                             r->path, line, sizeof m->plan - 1);
                break;
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
