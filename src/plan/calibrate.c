/* calibrate.c: this machine's rates for the cost model (src/plan/cost.c), measured with the
 * backend's own ops, and their cache file (JSON, versioned): block and head GEMMs at a step's
 * shapes, attention, a memory pass, each optimizer's update (team and one thread), the sharing
 * losses, host copies and the disk with O_DIRECT; --matmul bf16's GEMMs and flash pair through
 * the backend's _bf16 ops (the file's optional "matmul_bf16": an older file loads without it). Each is the best of a few repetitions of at
 * least 50-150 ms: the rate of the machine's quiet moments. What, at which shapes, and why:
 * docs/planner.md, "Calibration".
 * Invariants: library code, nothing printed; one calibration at a time (the repetition time is
 * a file-level setting); buffers are freed on every path; the threads used are the process's
 * (hpt_get_threads), recorded in the file; the disk's temporary file is removed after. */
#include "core/core.h"
#include "core/crc32c.h"
#include "kernels/backend.h"
#include "plan/calibrate_int.h"

#include <cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const int k_gemm_C[HPT_CAL_GEMM_SIZES] = {512, 768, 1024, 1280, 1600, 2048};

const char *hpt_calibration_path(char *buf, size_t n) {
    const char *env = getenv("HPT_CALIBRATION");
    if (env && *env) snprintf(buf, n, "%s", env);
    else snprintf(buf, n, "%s/.cache/hptrain/calibration.json", getenv("HOME") ? getenv("HOME") : ".");
    return buf;
}

/* ---- the file ------------------------------------------------------------------------------ */

static const char *k_optim_key[HPT_OPTIM_COUNT] = {"adamw", "lion", "adam-mini", "sgd"};

static cJSON *read_json(const char *path);

/* The block GEMMs' and the head's rates (fp32 or bf16) as j's "gemm" and "head" arrays, at c's
 * rows and widths. */
static void gemms_to_json(cJSON *j, const hpt_calibration *c,
                          const double fwd[HPT_CAL_GEMM_ROWS][HPT_CAL_GEMM_SIZES],
                          const double bwd[HPT_CAL_GEMM_ROWS][HPT_CAL_GEMM_SIZES],
                          const double head[HPT_CAL_GEMM_ROWS][2]) {
    cJSON *g = cJSON_AddArrayToObject(j, "gemm");
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++)
        for (int i = 0; i < HPT_CAL_GEMM_SIZES; i++) {
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "rows", c->gemm_rows[r]);
            cJSON_AddNumberToObject(e, "C", c->gemm_C[i]);
            cJSON_AddNumberToObject(e, "fwd_gflops", fwd[r][i]);
            cJSON_AddNumberToObject(e, "bwd_gflops", bwd[r][i]);
            cJSON_AddItemToArray(g, e);
        }
    cJSON *h = cJSON_AddArrayToObject(j, "head");
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "rows", c->gemm_rows[r]);
        cJSON_AddNumberToObject(e, "fwd_gflops", head[r][0]);
        cJSON_AddNumberToObject(e, "bwd_gflops", head[r][1]);
        cJSON_AddItemToArray(h, e);
    }
}

/* --matmul bf16's rates as the file's optional "matmul_bf16" object: {"gemm": [{rows, C,
 * fwd_gflops, bwd_gflops}, ...] (rows-major, the fp32 GEMMs' rows and widths), "head": [{rows,
 * fwd_gflops, bwd_gflops}, ...], "flash_fwd_gflops", "flash_bwd_gflops" (T = 128) and, when
 * measured, "flash_T512_fwd_gflops", "flash_T512_bwd_gflops"}. */
static cJSON *bf16_to_json(const hpt_calibration *c) {
    const hpt_cal_bf16 *b = &c->bf16;
    cJSON *j = cJSON_CreateObject();
    gemms_to_json(j, c, b->gemm_fwd_gflops, b->gemm_bwd_gflops, b->head_gflops);
    cJSON_AddNumberToObject(j, "flash_fwd_gflops", b->flash_gflops[0]);
    cJSON_AddNumberToObject(j, "flash_bwd_gflops", b->flash_gflops[1]);
    if (b->flash512_gflops[0] > 0) {
        cJSON_AddNumberToObject(j, "flash_T512_fwd_gflops", b->flash512_gflops[0]);
        cJSON_AddNumberToObject(j, "flash_T512_bwd_gflops", b->flash512_gflops[1]);
    }
    return j;
}

/* The "matmul_bf16" object into c->bf16, all or nothing (every rate > 0, the fp32 GEMMs' rows
 * and widths): 1 when whole. */
static int pos(const cJSON *j, const char *key, double *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(x) || !(x->valuedouble > 0)) return 0;
    *out = x->valuedouble;
    return 1;
}

static int bf16_from_json(const cJSON *j, hpt_calibration *c) {
    hpt_cal_bf16 b;
    memset(&b, 0, sizeof b);
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "gemm"), *h = cJSON_GetObjectItemCaseSensitive(j, "head");
    int ok = cJSON_IsArray(g) && cJSON_GetArraySize(g) == HPT_CAL_GEMM_ROWS * HPT_CAL_GEMM_SIZES &&
             cJSON_IsArray(h) && cJSON_GetArraySize(h) == HPT_CAL_GEMM_ROWS;
    for (int r = 0; ok && r < HPT_CAL_GEMM_ROWS; r++) {
        for (int i = 0; ok && i < HPT_CAL_GEMM_SIZES; i++) {
            const cJSON *e = cJSON_GetArrayItem(g, r * HPT_CAL_GEMM_SIZES + i);
            double rows = 0, C = 0;
            ok = pos(e, "rows", &rows) && (int)rows == c->gemm_rows[r] && pos(e, "C", &C) &&
                 (int)C == c->gemm_C[i] && pos(e, "fwd_gflops", &b.gemm_fwd_gflops[r][i]) &&
                 pos(e, "bwd_gflops", &b.gemm_bwd_gflops[r][i]);
        }
        const cJSON *e = cJSON_GetArrayItem(h, r);
        double rows = 0;
        ok = ok && pos(e, "rows", &rows) && (int)rows == c->gemm_rows[r] &&
             pos(e, "fwd_gflops", &b.head_gflops[r][0]) && pos(e, "bwd_gflops", &b.head_gflops[r][1]);
    }
    ok = ok && pos(j, "flash_fwd_gflops", &b.flash_gflops[0]) && pos(j, "flash_bwd_gflops", &b.flash_gflops[1]);
    if (!ok) return 0;
    double f = 0, bw = 0; /* T = 512: optional, both or neither */
    if (pos(j, "flash_T512_fwd_gflops", &f) && pos(j, "flash_T512_bwd_gflops", &bw))
        b.flash512_gflops[0] = f, b.flash512_gflops[1] = bw;
    b.have = 1;
    c->bf16 = b;
    return 1;
}

/* c as the file's object: the top level for the CPU's, an entry of "devices" for a GPU's. */
static cJSON *cal_to_json(const hpt_calibration *c) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "version", c->version);
    cJSON_AddNumberToObject(j, "threads", c->threads);
    cJSON_AddNumberToObject(j, "cores", c->cores);
    cJSON_AddStringToObject(j, "device", c->device[0] ? c->device : "cpu");
    gemms_to_json(j, c, c->gemm_fwd_gflops, c->gemm_bwd_gflops, c->head_gflops);
    cJSON_AddNumberToObject(j, "flash_fwd_gflops", c->attn_gflops[0][0]);
    cJSON_AddNumberToObject(j, "flash_bwd_gflops", c->attn_gflops[0][1]);
    cJSON_AddNumberToObject(j, "plain_fwd_gflops", c->attn_gflops[1][0]);
    cJSON_AddNumberToObject(j, "plain_bwd_gflops", c->attn_gflops[1][1]);
    if (c->attn512_gflops[0][0] > 0) {
        cJSON *a = cJSON_AddObjectToObject(j, "attention_T512");
        cJSON_AddNumberToObject(a, "flash_fwd_gflops", c->attn512_gflops[0][0]);
        cJSON_AddNumberToObject(a, "flash_bwd_gflops", c->attn512_gflops[0][1]);
        cJSON_AddNumberToObject(a, "plain_fwd_gflops", c->attn512_gflops[1][0]);
        cJSON_AddNumberToObject(a, "plain_bwd_gflops", c->attn512_gflops[1][1]);
    }
    cJSON_AddNumberToObject(j, "mem_gbps", c->mem_gbps);
    cJSON *o = cJSON_AddObjectToObject(j, "optim_ns_per_param");
    for (int k = 0; k < HPT_OPTIM_COUNT; k++) {
        cJSON *w = cJSON_AddObjectToObject(o, k_optim_key[k]);
        cJSON_AddNumberToObject(w, "32", c->optim_ns[k][0]);
        cJSON_AddNumberToObject(w, "8", c->optim_ns[k][1]);
    }
    cJSON *wo = cJSON_AddObjectToObject(j, "worker_ns_per_param");
    for (int k = 0; k < HPT_OPTIM_COUNT; k++) {
        cJSON *w = cJSON_AddObjectToObject(wo, k_optim_key[k]);
        cJSON_AddNumberToObject(w, "32", c->worker_ns[k][0]);
        cJSON_AddNumberToObject(w, "8", c->worker_ns[k][1]);
    }
    cJSON_AddNumberToObject(j, "share_loss", c->share_loss);
    cJSON_AddNumberToObject(j, "host_copy_gbps", c->host_copy_gbps);
    cJSON_AddNumberToObject(j, "disk_read_gbps", c->disk_read_gbps);
    cJSON_AddNumberToObject(j, "disk_write_gbps", c->disk_write_gbps);
    cJSON_AddNumberToObject(j, "disk_share_loss", c->disk_share_loss);
    cJSON *ea = NULL; /* the engine's own rates, one object per layout recorded */
    for (int k = 0; k < HPT_CAL_LAYOUTS; k++) {
        if (!(c->engine_disk_read_gbps[k] > 0 && c->engine_disk_write_gbps[k] > 0)) continue;
        if (!ea) ea = cJSON_AddArrayToObject(j, "engine_disk");
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(ea, e);
        cJSON_AddNumberToObject(e, "homes", k);
        cJSON_AddNumberToObject(e, "read_gbps", c->engine_disk_read_gbps[k]);
        cJSON_AddNumberToObject(e, "write_gbps", c->engine_disk_write_gbps[k]);
        cJSON_AddNumberToObject(e, "loss", c->engine_disk_loss[k]);
        cJSON_AddStringToObject(e, "source", c->engine_source[k]);
    }
    if (c->bf16.have) cJSON_AddItemToObject(j, "matmul_bf16", bf16_to_json(c));
    hpt_cal_arch_save(j, c);
    return j;
}

/* Writes c: a CPU's as the top level, the file's "devices" kept; a GPU's ("cuda ...") into
 * "devices" under its key, the rest of the file kept (docs/planner.md, "The cache file"). */
hpt_status hpt_calibration_save(const char *path, const hpt_calibration *c) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    for (char *s = dir + 1; *s; s++) /* mkdir -p of the directory */
        if (*s == '/') { *s = 0; mkdir(dir, 0755); *s = '/'; }
    cJSON *old = read_json(path), *j;
    if (!cJSON_IsObject(old)) cJSON_Delete(old), old = NULL;
    cJSON *devs = old ? cJSON_DetachItemFromObjectCaseSensitive(old, "devices") : NULL;
    if (!cJSON_IsObject(devs)) cJSON_Delete(devs), devs = cJSON_CreateObject();
    if (strncmp(c->device, "cuda", 4) == 0) {
        j = old ? old : cJSON_CreateObject(), old = NULL;
        cJSON_DeleteItemFromObjectCaseSensitive(devs, c->device);
        cJSON_AddItemToObject(devs, c->device, cal_to_json(c));
    } else {
        j = cal_to_json(c);
    }
    if (cJSON_GetArraySize(devs)) cJSON_AddItemToObject(j, "devices", devs);
    else cJSON_Delete(devs);
    cJSON_Delete(old);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    if (!text) return hpt_fail(HPT_ERR_OOM, "calibration: no memory for the JSON text");
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f)) ok = 0;
    free(text);
    if (!ok) return hpt_fail(HPT_ERR_IO, "calibration: cannot write %s: %s", path, strerror(errno));
    return HPT_OK;
}

static int num(const cJSON *j, const char *key, double *out) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!cJSON_IsNumber(x)) return 0;
    *out = x->valuedouble;
    return 1;
}

/* The file parsed; NULL (errno set for a missing file, 0 otherwise) if unreadable or not JSON. */
static cJSON *read_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    enum { CAP = 1 << 18 }; /* the file is a few KiB; 8 recorded layouts add 2 more, a GPU 4 */
    char *buf = malloc(CAP);
    size_t n = buf ? fread(buf, 1, CAP - 1, f) : 0;
    fclose(f);
    if (!buf) return NULL;
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    errno = 0;
    return j;
}

/* j's rates into c (all the required ones, the optional ones where present): 1 if valid. */
static int cal_from_json(const cJSON *j, hpt_calibration *c) {
    memset(c, 0, sizeof *c);
    double v = 0;
    int ok = num(j, "version", &v) && (int)v == HPT_CAL_VERSION;
    c->version = (int)v;
    if (ok && num(j, "threads", &v)) c->threads = (int)v;
    if (ok && num(j, "cores", &v)) c->cores = (int)v;
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(j, "device"); /* absent: a CPU's */
    snprintf(c->device, sizeof c->device, "%s", cJSON_IsString(dev) && dev->valuestring ? dev->valuestring : "cpu");
    /* the GEMMs: rows-major, [rows][C]; every rate > 0, the rows and widths ascending */
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "gemm");
    ok = ok && cJSON_IsArray(g) && cJSON_GetArraySize(g) == HPT_CAL_GEMM_ROWS * HPT_CAL_GEMM_SIZES;
    for (int r = 0; ok && r < HPT_CAL_GEMM_ROWS; r++)
        for (int i = 0; ok && i < HPT_CAL_GEMM_SIZES; i++) {
            const cJSON *e = cJSON_GetArrayItem(g, r * HPT_CAL_GEMM_SIZES + i);
            double rows = 0, C = 0;
            ok = num(e, "rows", &rows) && num(e, "C", &C) && C > 0 && rows > 0 &&
                 num(e, "fwd_gflops", &c->gemm_fwd_gflops[r][i]) &&
                 num(e, "bwd_gflops", &c->gemm_bwd_gflops[r][i]) && c->gemm_fwd_gflops[r][i] > 0 &&
                 c->gemm_bwd_gflops[r][i] > 0;
            if (!ok) break;
            if (r == 0) c->gemm_C[i] = (int)C;
            if (i == 0) c->gemm_rows[r] = (int)rows;
            ok = (int)C == c->gemm_C[i] && (int)rows == c->gemm_rows[r] &&
                 (i == 0 || c->gemm_C[i] > c->gemm_C[i - 1]) &&
                 (r == 0 || i || c->gemm_rows[r] > c->gemm_rows[r - 1]);
        }
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "head");
    ok = ok && cJSON_IsArray(h) && cJSON_GetArraySize(h) == HPT_CAL_GEMM_ROWS;
    for (int r = 0; ok && r < HPT_CAL_GEMM_ROWS; r++) {
        const cJSON *e = cJSON_GetArrayItem(h, r);
        double rows = 0;
        ok = num(e, "rows", &rows) && (int)rows == c->gemm_rows[r] &&
             num(e, "fwd_gflops", &c->head_gflops[r][0]) && num(e, "bwd_gflops", &c->head_gflops[r][1]) &&
             c->head_gflops[r][0] > 0 && c->head_gflops[r][1] > 0;
    }
    ok = ok && num(j, "flash_fwd_gflops", &c->attn_gflops[0][0]) &&
         num(j, "flash_bwd_gflops", &c->attn_gflops[0][1]) &&
         num(j, "plain_fwd_gflops", &c->attn_gflops[1][0]) &&
         num(j, "plain_bwd_gflops", &c->attn_gflops[1][1]) && num(j, "mem_gbps", &c->mem_gbps) &&
         num(j, "host_copy_gbps", &c->host_copy_gbps) && c->mem_gbps > 0 && c->host_copy_gbps > 0;
    for (int a = 0; ok && a < 2; a++)
        ok = c->attn_gflops[a][0] > 0 && c->attn_gflops[a][1] > 0;
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(j, "optim_ns_per_param");
    for (int k = 0; ok && k < HPT_OPTIM_COUNT; k++) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(o, k_optim_key[k]);
        ok = w && num(w, "32", &c->optim_ns[k][0]) && num(w, "8", &c->optim_ns[k][1]);
    }
    if (ok) { /* the disk, the worker's rates and the sharing loss are optional */
        const cJSON *wo = cJSON_GetObjectItemCaseSensitive(j, "worker_ns_per_param");
        for (int k = 0; wo && k < HPT_OPTIM_COUNT; k++) {
            const cJSON *w = cJSON_GetObjectItemCaseSensitive(wo, k_optim_key[k]);
            if (w) num(w, "32", &c->worker_ns[k][0]), num(w, "8", &c->worker_ns[k][1]);
        }
        num(j, "share_loss", &c->share_loss);
        num(j, "disk_read_gbps", &c->disk_read_gbps);
        num(j, "disk_write_gbps", &c->disk_write_gbps);
        num(j, "disk_share_loss", &c->disk_share_loss);
        /* the engine's own disk rates from training runs, per layout (optional; an entry
         * with any figure missing or out of range is skipped) */
        const cJSON *ea = cJSON_GetObjectItemCaseSensitive(j, "engine_disk");
        int ne = cJSON_IsArray(ea) ? cJSON_GetArraySize(ea) : 0;
        for (int i = 0; i < ne; i++) {
            const cJSON *ed = cJSON_GetArrayItem(ea, i);
            const cJSON *src = cJSON_GetObjectItemCaseSensitive(ed, "source");
            double hk = -1, er = 0, ew = 0, el = 0;
            if (!(num(ed, "homes", &hk) && hk >= 1 && hk < HPT_CAL_LAYOUTS && hk == (int)hk &&
                  num(ed, "read_gbps", &er) && num(ed, "write_gbps", &ew) && num(ed, "loss", &el) &&
                  er > 0 && ew > 0 && el >= 0))
                continue;
            int k = (int)hk;
            c->engine_disk_read_gbps[k] = er, c->engine_disk_write_gbps[k] = ew;
            c->engine_disk_loss[k] = el;
            snprintf(c->engine_source[k], sizeof c->engine_source[k], "%s",
                     cJSON_IsString(src) ? src->valuestring : "");
        }
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "attention_T512");
        double r[2][2] = {{0, 0}, {0, 0}};
        if (a && num(a, "flash_fwd_gflops", &r[0][0]) && num(a, "flash_bwd_gflops", &r[0][1]) &&
            num(a, "plain_fwd_gflops", &r[1][0]) && num(a, "plain_bwd_gflops", &r[1][1]) &&
            r[0][0] > 0 && r[0][1] > 0 && r[1][0] > 0 && r[1][1] > 0)
            memcpy(c->attn512_gflops, r, sizeof r);
        /* --matmul bf16's rates: optional (a file written before them has none: bf16 plans
         * are then costed at the fp32 rates); a partial object is ignored */
        const cJSON *mb = cJSON_GetObjectItemCaseSensitive(j, "matmul_bf16");
        if (cJSON_IsObject(mb)) bf16_from_json(mb, c);
        hpt_cal_arch_load(j, c);
    }
    return ok;
}

hpt_status hpt_calibration_load(const char *path, hpt_calibration *c) {
    memset(c, 0, sizeof *c);
    cJSON *j = read_json(path);
    if (!j && errno) return hpt_fail(HPT_ERR_IO, "calibration: cannot open %s: %s", path, strerror(errno));
    if (!j) return hpt_fail(HPT_ERR_FORMAT, "calibration: %s is not JSON", path);
    int ok = cal_from_json(j, c);
    cJSON_Delete(j);
    if (!ok) return hpt_fail(HPT_ERR_FORMAT, "calibration: %s is not a version-%d calibration "
                             "(run hptrain calibrate)", path, HPT_CAL_VERSION);
    return HPT_OK;
}

hpt_status hpt_calibration_load_device(const char *path, const char *key, hpt_calibration *c) {
    memset(c, 0, sizeof *c);
    cJSON *j = read_json(path);
    if (!j && errno) return hpt_fail(HPT_ERR_IO, "calibration: cannot open %s: %s", path, strerror(errno));
    if (!j) return hpt_fail(HPT_ERR_FORMAT, "calibration: %s is not JSON", path);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "devices"), key);
    int ok = e ? cal_from_json(e, c) : 0;
    cJSON_Delete(j);
    if (!e) return hpt_fail(HPT_ERR_INVALID, "calibration: %s has no calibration of %s (run hptrain "
                            "calibrate --device cuda)", path, key);
    if (!ok) return hpt_fail(HPT_ERR_FORMAT, "calibration: %s's entry for %s is not a version-%d "
                             "calibration (run hptrain calibrate --device cuda)", path, key, HPT_CAL_VERSION);
    return HPT_OK;
}

/* ---- the measurements ---------------------------------------------------------------------- */

static void fill(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] = s * (float)((i * 2654435761u) % 1000) / 1000.0f;
}

/* The best over reps (<= 15) repetitions of the time of one run of what the macro body does
 * (seconds). Each repetition runs the body again until g_min_s has passed and divides. */
static double g_min_s = 0.1;
#define BEST_OF(reps, best, body)                                          \
    do {                                                                   \
        double ts_[16];                                                    \
        int n_ = (reps) < 16 ? (reps) : 16;                                \
        for (int r_ = 0; r_ < n_; r_++) {                                  \
            double t0_ = hpt_now(), dt_;                                   \
            long k_ = 0;                                                   \
            do {                                                           \
                body;                                                      \
                k_++;                                                      \
            } while ((dt_ = hpt_now() - t0_) < g_min_s);                   \
            ts_[r_] = dt_ / (double)k_;                                    \
        }                                                                  \
        best = minimum(ts_, n_);                                            \
    } while (0)

static double minimum(const double *t, int n) {
    double m = n ? t[0] : 0;
    for (int i = 1; i < n; i++) m = t[i] < m ? t[i] : m;
    return m;
}

/* A block's GEMMs at each row count and width: (rows, C) against C -> 3C (qkv), C -> C
 * (projection), C -> 4C (MLP up) and (rows, 4C) against 4C -> C (MLP down), forward and backward
 * apart; the rate is their FLOPs over their summed time (the shapes differ in efficiency: the
 * 4C -> C forward runs slower per FLOP than the others here). Then the head's: C = 768 against
 * 32768 outputs (a vocabulary's, far wider than a block's) at each row count. */
static const int k_gemm_rows[HPT_CAL_GEMM_ROWS] = {64, 256};

/* The block's linear layers' ops at a precision: ws NULL, matmul_forward and matmul_backward;
 * else (--matmul bf16) their _bf16 forms with ws their workspace, as the model calls them. */
void hpt_cal_mm_fwd(const hpt_backend *be, void *ws, float *out, const float *inp, const float *w,
                    int64_t N, int64_t C, int64_t OC) {
    if (ws) be->matmul_forward_bf16(out, inp, w, NULL, N, C, OC, 0, ws);
    else be->matmul_forward(out, inp, w, NULL, N, C, OC, 0);
}
void hpt_cal_mm_bwd(const hpt_backend *be, void *ws, float *dinp, float *dw, const float *dout,
                    const float *inp, const float *w, int64_t N, int64_t C, int64_t OC) {
    if (ws) be->matmul_backward_bf16(dinp, dw, NULL, dout, inp, w, N, C, OC, 0, ws);
    else be->matmul_backward(dinp, dw, NULL, dout, inp, w, N, C, OC, 0);
}

/* ws NULL: the fp32 rates into c's gemm and head rates; else the bf16 ops' into c->bf16 (the
 * rows and widths are the fp32 pass's, which runs first). */
static hpt_status measure_gemm(const hpt_backend *be, int reps, void *ws, hpt_calibration *c) {
    const int64_t NMAX = k_gemm_rows[HPT_CAL_GEMM_ROWS - 1], CMAX = k_gemm_C[HPT_CAL_GEMM_SIZES - 1];
    const int64_t WMAX = 32768 * 768 > 4 * CMAX * CMAX ? 32768 * 768 : 4 * CMAX * CMAX;
    const int64_t XMAX = NMAX * (32768 > 4 * CMAX ? 32768 : 4 * CMAX);
    float *inp = malloc((size_t)XMAX * 4), *w = malloc((size_t)WMAX * 4);
    float *out = malloc((size_t)XMAX * 4), *dinp = malloc((size_t)XMAX * 4);
    float *dw = calloc((size_t)WMAX, 4);
    hpt_status s = HPT_OK;
    if (!inp || !w || !out || !dinp || !dw) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for the GEMM");
        goto done;
    }
    fill(inp, (size_t)XMAX, 1), fill(w, (size_t)WMAX, 0.01f), fill(out, (size_t)XMAX, 0.1f);
    for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++) {
        int64_t N = k_gemm_rows[r];
        c->gemm_rows[r] = (int)N;
        for (int i = 0; i <= HPT_CAL_GEMM_SIZES; i++) {
            int head = i == HPT_CAL_GEMM_SIZES;
            int64_t C = head ? 768 : k_gemm_C[i];
            /* (in, out) widths of the shapes measured together */
            int64_t sh[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
            if (head) sh[0][0] = C, sh[0][1] = 32768;
            int ns = head ? 1 : 4;
            double f = 0, tf, tb;
            for (int k = 0; k < ns; k++) {
                f += 2.0 * (double)(N * sh[k][0] * sh[k][1]);
                hpt_cal_mm_fwd(be, ws, out, inp, w, N, sh[k][0], sh[k][1]); /* warm */
            }
            /* the shapes one after the other in each repetition, as a block runs them */
            BEST_OF(reps, tf, for (int k = 0; k < ns; k++) hpt_cal_mm_fwd(be, ws, out, inp, w, N, sh[k][0], sh[k][1]));
            BEST_OF(reps, tb, for (int k = 0; k < ns; k++)
                                  hpt_cal_mm_bwd(be, ws, dinp, dw, out, inp, w, N, sh[k][0], sh[k][1]));
            double rf = f / tf / 1e9, rb = 2.0 * f / tb / 1e9;
            if (head && ws) c->bf16.head_gflops[r][0] = rf, c->bf16.head_gflops[r][1] = rb;
            else if (head) c->head_gflops[r][0] = rf, c->head_gflops[r][1] = rb;
            else if (ws) c->bf16.gemm_fwd_gflops[r][i] = rf, c->bf16.gemm_bwd_gflops[r][i] = rb;
            else {
                c->gemm_C[i] = (int)C;
                c->gemm_fwd_gflops[r][i] = rf, c->gemm_bwd_gflops[r][i] = rb;
            }
        }
    }
done:
    free(inp), free(w), free(out), free(dinp), free(dw);
    return s;
}

/* The bf16 flash pair (--matmul bf16) at measure_attention's shapes and FLOP count, into
 * r[forward, backward]; 0s where the backend has no pair for heads of 64. */
static hpt_status measure_attention_bf16(const hpt_backend *be, int reps, int T, double r[2]) {
    const int B = 1, C = 768, NH = 12;
    r[0] = r[1] = 0;
    if (!be->flash_attention_forward_bf16 || !be->flash_attention_bf16_heads(C / NH)) return HPT_OK;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nscr = (size_t)B * NH * T + 4 * nqkv;
    float *qkv = malloc(nqkv * 4), *out = malloc(nout * 4), *lse = malloc((size_t)B * NH * T * 4);
    float *dqkv = calloc(nqkv, 4), *scr = calloc(nscr, 4), *dout = malloc(nout * 4);
    hpt_status s = HPT_OK;
    if (!qkv || !out || !lse || !dqkv || !scr || !dout) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for the bf16 attention");
        goto done;
    }
    fill(qkv, nqkv, 1), fill(dout, nout, 0.1f);
    double f = 2.0 * C * (T + 1.0) * B * T, t;
    be->flash_attention_forward_bf16(out, lse, qkv, B, T, C, NH, NH, NULL, 0);
    BEST_OF(reps, t, be->flash_attention_forward_bf16(out, lse, qkv, B, T, C, NH, NH, NULL, 0));
    r[0] = f / t / 1e9;
    BEST_OF(reps, t, be->flash_attention_backward_bf16(dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NH, NULL, 0));
    r[1] = 2 * f / t / 1e9;
done:
    free(qkv), free(out), free(lse), free(dqkv), free(scr), free(dout);
    return s;
}

/* --matmul bf16's rates (c->bf16): the GEMMs through the _bf16 ops, and the bf16 flash pair,
 * with reps repetitions (hpt_calibrate gives fewer than the fp32 rates': on a CPU without fast
 * bf16 the bf16 GEMMs run at a third to a half of fp32's rate, and at 5 repetitions they would
 * more than double the calibration's time; docs/planner.md). Without the backend's bf16 ops
 * nothing is measured (have stays 0). */
static hpt_status measure_bf16(const hpt_backend *be, int reps, hpt_calibration *c) {
    if (!be->matmul_forward_bf16 || !be->matmul_backward_bf16) return HPT_OK;
    void *ws = NULL;
    if (posix_memalign(&ws, 4096, HPT_MM_BF16_WS_BYTES))
        return hpt_fail(HPT_ERR_OOM, "calibration: no memory for the bf16 GEMMs' workspace");
    hpt_status s = measure_gemm(be, reps, ws, c);
    free(ws);
    HPT_CHECK(s);
    HPT_CHECK(measure_attention_bf16(be, reps, 128, c->bf16.flash_gflops));
    HPT_CHECK(measure_attention_bf16(be, reps, 512, c->bf16.flash512_gflops));
    /* without the pair for these heads its rates are the fp32 pair's (the model refuses such
     * heads with --matmul bf16 anyway) */
    if (!(c->bf16.flash_gflops[0] > 0))
        for (int b = 0; b < 2; b++)
            c->bf16.flash_gflops[b] = c->attn_gflops[0][b], c->bf16.flash512_gflops[b] = c->attn512_gflops[0][b];
    c->bf16.have = 1;
    return HPT_OK;
}

/* Causal attention at B=1, T=128, C=768, NH=12, counted as the estimator counts it: 2 C (T+1)
 * FLOPs per token forward, twice that backward. */
/* Causal attention at B = 1, C = 768, NH = 12 and T (128 or 512: its rate per FLOP grows with
 * T, the cost model interpolates in log T), into r[flash, plain][forward, backward]. */
static hpt_status measure_attention(const hpt_backend *be, int reps, int T, double r[2][2]) {
    const int B = 1, C = 768, NH = 12;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T, nscr = natt + 4 * nqkv;
    float *qkv = malloc(nqkv * 4), *out = malloc(nout * 4), *att = malloc(natt * 4);
    float *lse = malloc((size_t)B * NH * T * 4), *dqkv = malloc(nqkv * 4);
    float *scr = calloc(nscr, 4), *dout = malloc(nout * 4);
    hpt_status s = HPT_OK;
    if (!qkv || !out || !att || !lse || !dqkv || !scr || !dout) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for the attention");
        goto done;
    }
    fill(qkv, nqkv, 1), fill(dout, nout, 0.1f);
    double f = 2.0 * C * (T + 1.0) * B * T, t;
    be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NH);
    BEST_OF(reps, t, be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NH));
    r[0][0] = f / t / 1e9;
    memset(dqkv, 0, nqkv * 4);
    BEST_OF(reps, t, be->flash_attention_backward(dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NH));
    r[0][1] = 2 * f / t / 1e9;
    be->attention_forward(out, att, qkv, B, T, C, NH, NH);
    BEST_OF(reps, t, be->attention_forward(out, att, qkv, B, T, C, NH, NH));
    r[1][0] = f / t / 1e9;
    BEST_OF(reps, t, be->attention_backward(dqkv, scr, dout, qkv, att, B, T, C, NH, NH));
    r[1][1] = 2 * f / t / 1e9;
done:
    free(qkv), free(out), free(att), free(lse), free(dqkv), free(scr), free(dout);
    return s;
}

static hpt_status measure_memory(const hpt_backend *be, int reps, hpt_calibration *c) {
    const size_t n = (size_t)64 << 20; /* 256 MiB of floats: past any last-level cache */
    float *a = malloc(n * 4), *b = malloc(n * 4);
    if (!a || !b) {
        free(a), free(b);
        return hpt_fail(HPT_ERR_OOM, "calibration: no memory for the bandwidth");
    }
    memset(a, 0, n * 4), memset(b, 0, n * 4);
    double t;
    BEST_OF(reps, t, be->scale(a, n, 0.999f));
    c->mem_gbps = 2.0 * (double)n * 4 / t / 1e9;
    BEST_OF(reps, t, memcpy(b, a, n * 4));
    c->host_copy_gbps = (double)n * 4 / t / 1e9;
    free(a), free(b);
    return HPT_OK;
}

static hpt_status measure_optim(const hpt_backend *be, int reps, hpt_calibration *c) {
    const size_t n = (size_t)16 << 20; /* 256 MiB of fp32 state: past the caches, as a model's */
    float *p = malloc(n * 4), *g = malloc(n * 4), *m = calloc(n, 4), *v = calloc(n, 4);
    uint8_t *mc = calloc(n, 1), *vc = calloc(n, 1);
    float *ma = calloc(n / 256 + 1, 4), *va = calloc(n / 256 + 1, 4), *mini = calloc(n / 256 + 1, 4);
    static float smap[256], umap[256];
    hpt_status s = HPT_OK;
    if (!p || !g || !m || !v || !mc || !vc || !ma || !va || !mini) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for the optimizer");
        goto done;
    }
    fill(p, n, 1), fill(g, n, 0.01f);
    be->q8_map(smap, 1), be->q8_map(umap, 0);
    hpt_be_param pp = hpt_be_param_f32(p);
    hpt_be_state m32 = {m, NULL, NULL, NULL, NULL}, v32 = {v, NULL, NULL, NULL, NULL};
    hpt_be_state m8 = {NULL, mc, ma, smap, be->q8_lut_of(1)}, v8 = {NULL, vc, va, umap, be->q8_lut_of(0)};
    double t, per = 1e9 / (double)n;
    int team = hpt_get_threads();
    /* with the team, then at one thread (the engine's worker runs its update so) */
    for (int one = 0; one < 2; one++) {
        double(*ns)[2] = one ? c->worker_ns : c->optim_ns;
        hpt_set_threads(one ? 1 : team);
        for (int bits = 0; bits < 2; bits++) {
            hpt_be_state M = bits ? m8 : m32, V = bits ? v8 : v32;
            if (bits) BEST_OF(reps, t, be->adamw_q(pp, g, M, V, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 2));
            else BEST_OF(reps, t, be->adamw(p, g, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 2));
            ns[HPT_OPTIM_ADAMW][bits] = t * per;
            BEST_OF(reps, t, be->lion(pp, g, M, n, 1e-4f, 0.9f, 0.99f, 0.1f, 1));
            ns[HPT_OPTIM_LION][bits] = t * per;
            BEST_OF(reps, t, be->sgd(pp, g, M, n, 1e-4f, 0.9f, 0, 1));
            ns[HPT_OPTIM_SGD][bits] = t * per;
            BEST_OF(reps, t, be->adam_mini(pp, g, M, mini, n, 256, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 2));
            ns[HPT_OPTIM_ADAM_MINI][bits] = t * per;
        }
    }
    hpt_set_threads(team);
done:
    free(p), free(g), free(m), free(v), free(mc), free(vc), free(ma), free(va), free(mini);
    return s;
}

/* The sharing loss: a one-thread AdamW update (the engine's worker's kind of work) run in a
 * thread beside the compute team's GEMMs (a block's, C = 768, 64 rows). The GEMMs' extra time
 * over their time alone, divided by the worker's work done meanwhile (its updates counted at
 * their one-thread time alone), is the compute's loss per second of the worker's work: about 0
 * with a spare core; 1 or more when the team takes every core (a statically scheduled team
 * runs at its slowest thread's speed, and waits spinning). Best of reps. */
typedef struct {
    const hpt_backend *be;
    float *p, *g, *m, *v;
    size_t n;
    int stop;  /* set by the main thread */
    long done; /* updates finished */
} share_arg;

static void *share_worker(void *a_) {
    share_arg *a = a_;
    hpt_set_threads(1);
    while (!__atomic_load_n(&a->stop, __ATOMIC_ACQUIRE)) {
        a->be->adamw(a->p, a->g, a->m, a->v, a->n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 2);
        __atomic_add_fetch(&a->done, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static hpt_status measure_sharing(const hpt_backend *be, int reps, hpt_calibration *c) {
    const int64_t N = 64, C = 768, sh[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    const size_t n = (size_t)4 << 20; /* 64 MiB of state: past the caches */
    share_arg a = {be, malloc(n * 4), malloc(n * 4), calloc(n, 4), calloc(n, 4), n, 0, 0};
    float *inp = malloc((size_t)(N * 4 * C) * 4), *w = malloc((size_t)(4 * C * C) * 4);
    float *out = malloc((size_t)(N * 4 * C) * 4);
    hpt_status s = HPT_OK;
    if (!a.p || !a.g || !a.m || !a.v || !inp || !w || !out) {
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for the sharing loss");
        goto done;
    }
    fill(a.p, n, 1), fill(a.g, n, 0.01f), fill(inp, (size_t)(N * 4 * C), 1), fill(w, (size_t)(4 * C * C), 0.01f);
    double t_upd, best = 1e30;
    int team = hpt_get_threads();
    hpt_set_threads(1);
    BEST_OF(reps, t_upd, be->adamw(a.p, a.g, a.m, a.v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 2));
    hpt_set_threads(team);
    /* the GEMMs alone: enough repetitions for about 0.3 s */
    double t0 = hpt_now(), t_alone;
    int k = 0;
    for (; hpt_now() - t0 < 0.1; k++)
        for (int i = 0; i < 4; i++) be->matmul_forward(out, inp, w, NULL, N, sh[i][0], sh[i][1], 0);
    int K = 3 * k > 1 ? 3 * k : 1;
    BEST_OF(reps, t_alone, for (int r = 0; r < K; r++) for (int i = 0; i < 4; i++)
                              be->matmul_forward(out, inp, w, NULL, N, sh[i][0], sh[i][1], 0));
    for (int r = 0; r < reps && r < 5; r++) {
        a.stop = 0, a.done = 0;
        pthread_t th;
        if (pthread_create(&th, NULL, share_worker, &a)) {
            s = hpt_fail(HPT_ERR_IO, "calibration: cannot start a thread");
            goto done;
        }
        while (!__atomic_load_n(&a.done, __ATOMIC_ACQUIRE)) sched_yield(); /* running */
        long d0 = __atomic_load_n(&a.done, __ATOMIC_ACQUIRE);
        t0 = hpt_now();
        for (int q = 0; q < K; q++)
            for (int i = 0; i < 4; i++) be->matmul_forward(out, inp, w, NULL, N, sh[i][0], sh[i][1], 0);
        double t_with = hpt_now() - t0;
        long d1 = __atomic_load_n(&a.done, __ATOMIC_ACQUIRE);
        __atomic_store_n(&a.stop, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        /* the worker's work meanwhile: whole updates counted, at least a part of one */
        double work = (double)(d1 - d0) * t_upd;
        if (work < 0.5 * t_upd) work = 0.5 * t_upd;
        double loss = (t_with - t_alone) / work;
        best = loss < best ? loss : best;
    }
    c->share_loss = best > 0 ? best : 0;
done:
    free(a.p), free(a.g), free(a.m), free(a.v), free(inp), free(w), free(out);
    return s;
}

/* The disk: O_DIRECT (where the file system takes it, else buffered with fsync) transfers of
 * 64 MiB (a large block's) over a 256 MiB temporary file, written once before the timed passes
 * (a read of never-written, fallocated space costs no disk: 26 GB/s here), then reps passes of
 * a write (with its fsync) and a read, the best of each kept, all in a thread beside the
 * compute team's block GEMMs (C = 768, 64 rows), as the engine's worker transfers beside the
 * step. The GEMMs' time over their time alone, per second of the transfers, is the disk's
 * sharing loss: the worker wakes at every transfer (and checksums its pages), and each wake
 * takes a core from a statically scheduled team that then waits for its slowest thread;
 * 0.22-0.77 on this 2-core machine in 13 runs, all under other sessions' load (never measured
 * on a quiet machine here).
 * Why many passes: this machine's virtual disk ran the same transfers at 0.9-2.8 GB/s read and
 * 2-6 GB/s write from one minute (and one process) to the next, in two states about 2x apart
 * (docs/planner.md, "The disk"); predictions are for a run's fastest steps. */
typedef struct {
    int fd;
    void *buf;
    size_t chunk, total;
    int reps, bad, stop; /* stop: set by the disk thread when it is done */
    double write_s, read_s, busy_s;
    uint32_t *crc;       /* a chunk's page checksums, as the engine's transfers keep them */
} disk_arg;

/* One transfer as the engine's worker makes it: the pages' checksums set before a write and
 * computed after a read (src/mem/disk.c). */
static int disk_xfer(disk_arg *a, size_t off, int write_) {
    size_t pages = a->chunk / 4096;
    if (write_) {
        crc32c_pages(a->buf, pages, a->crc);
        return pwrite(a->fd, a->buf, a->chunk, (off_t)off) != (ssize_t)a->chunk;
    }
    int bad = pread(a->fd, a->buf, a->chunk, (off_t)off) != (ssize_t)a->chunk;
    crc32c_pages(a->buf, pages, a->crc);
    return bad;
}

static void *disk_worker(void *a_) {
    disk_arg *a = a_;
    a->write_s = a->read_s = 1e30;
    double t_start = hpt_now();
    for (size_t off = 0; off < a->total && !a->bad; off += a->chunk) /* the space written once */
        a->bad |= pwrite(a->fd, a->buf, a->chunk, (off_t)off) != (ssize_t)a->chunk;
    for (int r = 0; r < a->reps && !a->bad; r++) {
        double t0 = hpt_now();
        for (size_t off = 0; off < a->total && !a->bad; off += a->chunk) a->bad |= disk_xfer(a, off, 1);
        a->bad |= fsync(a->fd) != 0;
        double t1 = hpt_now();
        for (size_t off = 0; off < a->total && !a->bad; off += a->chunk) a->bad |= disk_xfer(a, off, 0);
        double t2 = hpt_now();
        a->write_s = t1 - t0 < a->write_s ? t1 - t0 : a->write_s;
        a->read_s = t2 - t1 < a->read_s ? t2 - t1 : a->read_s;
    }
    a->busy_s = hpt_now() - t_start;
    __atomic_store_n(&a->stop, 1, __ATOMIC_RELEASE);
    return NULL;
}

static hpt_status measure_disk(const hpt_backend *be, const char *dir, int reps, hpt_calibration *c) {
    const int64_t N = 64, C = 768, sh[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    disk_arg a = {-1, NULL, (size_t)64 << 20, (size_t)256 << 20, reps, 0, 0, 0, 0, 0, NULL};
    char path[4096];
    snprintf(path, sizeof path, "%s/.hpt-calibrate-%d.tmp", dir, (int)getpid());
    a.fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (a.fd < 0) a.fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (a.fd < 0) return hpt_fail(HPT_ERR_IO, "calibration: cannot create %s: %s", path, strerror(errno));
    float *inp = malloc((size_t)(N * 4 * C) * 4), *w = malloc((size_t)(4 * C * C) * 4);
    float *out = malloc((size_t)(N * 4 * C) * 4);
    hpt_status s = HPT_OK;
    a.crc = malloc(a.chunk / 4096 * sizeof *a.crc);
    if (posix_memalign(&a.buf, 4096, a.chunk) || !inp || !w || !out || !a.crc) {
        a.buf = NULL;
        s = hpt_fail(HPT_ERR_OOM, "calibration: no memory for the disk buffer");
        goto done;
    }
    memset(a.buf, 1, a.chunk);
    fill(inp, (size_t)(N * 4 * C), 1), fill(w, (size_t)(4 * C * C), 0.01f);
    double t_alone; /* one set of the block's four GEMMs, alone */
    BEST_OF(reps, t_alone, for (int i = 0; i < 4; i++)
                               be->matmul_forward(out, inp, w, NULL, N, sh[i][0], sh[i][1], 0));
    pthread_t th;
    if (pthread_create(&th, NULL, disk_worker, &a)) {
        s = hpt_fail(HPT_ERR_IO, "calibration: cannot start a thread");
        goto done;
    }
    long sets = 0;
    double t0 = hpt_now();
    while (!__atomic_load_n(&a.stop, __ATOMIC_ACQUIRE)) {
        for (int i = 0; i < 4; i++) be->matmul_forward(out, inp, w, NULL, N, sh[i][0], sh[i][1], 0);
        sets++;
    }
    double t_with = hpt_now() - t0;
    pthread_join(th, NULL);
    if (a.bad) s = hpt_fail(HPT_ERR_IO, "calibration: disk I/O on %s failed", path);
    else {
        c->disk_write_gbps = (double)a.total / a.write_s / 1e9;
        c->disk_read_gbps = (double)a.total / a.read_s / 1e9;
        double lost = t_with - (double)sets * t_alone;
        c->disk_share_loss = lost > 0 && a.busy_s > 0 ? lost / a.busy_s : 0;
    }
done:
    free(a.buf), free(inp), free(w), free(out), free(a.crc);
    close(a.fd);
    unlink(path);
    return s;
}

hpt_status hpt_calibration_take_engine(hpt_calibration *c, const hpt_plan_opts *o,
                                       const hpt_offload_stats *st, int64_t steps, double step_s,
                                       const char *source) {
    if (steps < 1 || st->disk_read_s <= 0 || st->disk_write_s <= 0 || !st->disk_read_bytes ||
        !st->disk_write_bytes)
        return hpt_fail(HPT_ERR_INVALID, "calibration: the run read or wrote nothing through the "
                        "engine's disk homes after its first step");
    int dk = hpt_plan_disk_homes(o);
    if (!dk) return hpt_fail(HPT_ERR_INVALID, "calibration: the run's plan has no disk homes");
    hpt_calibration e = *c;
    e.engine_disk_read_gbps[dk] = (double)st->disk_read_bytes / st->disk_read_s / 1e9;
    e.engine_disk_write_gbps[dk] = (double)st->disk_write_bytes / st->disk_write_s / 1e9;
    e.engine_disk_loss[dk] = 0;
    /* The loss: the one figure the counters do not give directly. The compute thread, when
     * not waiting, took busy = step - waits; its own work alone is the cost model's compute_s
     * (the calibrated compute rates); the counters' loss, (busy - compute_s) per second of
     * disk transfer that ran beside it, is printed with the source. But the cost model's
     * block term is max(compute + loss x transfers, transfers): it does not add the waits of
     * the blocks whose transfer outlasted their compute to the slowed compute of the others,
     * so that figure does not reproduce the run. The loss kept is the one with which the cost
     * model reproduces the run's step (the model's step rises with the loss: bisection on
     * [0, 4]); the run's shape class is then predicted from the engine's rates and it. */
    hpt_cost k;
    HPT_CHECK(hpt_plan_cost(o, &e, &k));
    double busy = step_s - st->wait_s / (double)steps, beside = st->disk_beside_s / (double)steps;
    double counted = beside > 0 ? (busy - k.compute_s) / beside : 0;
    double loss = c->disk_share_loss;
    if (beside > 0.05 * step_s) {
        double lo = 0, hi = 4;
        e.engine_disk_loss[dk] = hi;
        HPT_CHECK(hpt_plan_cost(o, &e, &k));
        if (k.total_s <= step_s) lo = hi;
        for (int it = 0; it < 50 && hi - lo > 1e-6; it++) {
            e.engine_disk_loss[dk] = 0.5 * (lo + hi);
            HPT_CHECK(hpt_plan_cost(o, &e, &k));
            if (k.total_s < step_s) lo = e.engine_disk_loss[dk];
            else hi = e.engine_disk_loss[dk];
        }
        loss = lo;
    }
    e.engine_disk_loss[dk] = loss;
    snprintf(e.engine_source[dk], sizeof e.engine_source[dk], "%s (the counters' loss %.2f)",
             source ? source : "", counted);
    *c = e;
    return HPT_OK;
}

hpt_status hpt_calibrate(const char *disk_dir, int quick, hpt_calibration *c) {
    memset(c, 0, sizeof *c);
    c->version = HPT_CAL_VERSION;
    c->threads = hpt_get_threads();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    c->cores = cores > 0 ? (int)cores : 0;
    snprintf(c->device, sizeof c->device, "cpu"); /* the CPU backend's ops measure this CPU */
    const hpt_backend *be = hpt_backend_cpu();
    int reps = quick ? 3 : 5;
    g_min_s = quick ? 0.05 : 0.15;
    HPT_CHECK(measure_gemm(be, reps, NULL, c));
    HPT_CHECK(measure_attention(be, reps, 128, c->attn_gflops));
    HPT_CHECK(measure_attention(be, reps, 512, c->attn512_gflops));
    const int bf16_reps = quick ? 1 : 2; /* measure_bf16: why fewer */
    HPT_CHECK(measure_bf16(be, bf16_reps, c));
    HPT_CHECK(measure_memory(be, reps, c));
    HPT_CHECK(measure_optim(be, reps, c));
    HPT_CHECK(measure_sharing(be, reps, c));
    HPT_CHECK(hpt_cal_measure_arch(be, reps, bf16_reps, g_min_s, c));
    if (disk_dir) HPT_CHECK(measure_disk(be, disk_dir, quick ? 4 : 8, c));
    return HPT_OK;
}
