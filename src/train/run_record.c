/* run_record.c: the run's record beside its checkpoint: run.json in the state's directory
 * (hpt_trainer_state_dir: DIR, or DIR.state beside a Hugging Face DIR), what the command line
 * needs to continue the run from DIR alone (docs/formats.md, "The run record"). The record is
 * the caller's JSON object (hpt_train_opts.run_record; the trainer does not read it); this file
 * wraps it in a versioned envelope with the step it was written at and a CRC-32C, and writes it
 * after every save's state files. Layout: {"format": "hptrain run record", "version": 1,
 * "step": N, "record": {...}, "crc32c": "xxxxxxxx"}, the CRC over cJSON's unformatted print of
 * the envelope without "crc32c" (the print of a parsed print is the same text).
 * Invariants: written through io_atomic, so a crash leaves the previous record or the new one;
 * the first save of a run into a directory that is not the one it resumed from removes the
 * record there before writing any state (another run's record never describes this run's
 * state: a crash in between leaves a state without a record, which resumes as before records,
 * with the flags given again). */
#include "core/core.h"
#include "io/io.h"
#include "train/trainer_int.h"

#include <cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define RECORD_VERSION 1
static const char k_format[] = "hptrain run record";

static void record_path(char *out, size_t n, const char *dir) { snprintf(out, n, "%s/run.json", dir); }

/* 1 when a and b name the same directory. */
static int same_dir(const char *a, const char *b) {
    struct stat sa, sb;
    if (!a || !b || stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void run_record_before_save(hpt_trainer *tr) {
    if (tr->record_fresh) return;
    tr->record_fresh = 1;
    char rdir[PATH_MAX]; /* the resumed state's directory (DIR.state or DIR) */
    if (tr->o.resume && hpt_train_resume_dir(tr->o.resume, rdir, sizeof rdir) == HPT_OK &&
        same_dir(hpt_trainer_state_dir(tr), rdir))
        return; /* this run's own record */
    char path[PATH_MAX];
    record_path(path, sizeof path, hpt_trainer_state_dir(tr));
    unlink(path); /* absent: nothing to do */
}

/* The envelope's CRC-32C (of its unformatted print without "crc32c"). */
static int envelope_crc(const cJSON *env, uint32_t *crc) {
    char *t = cJSON_PrintUnformatted(env);
    if (!t) return 0;
    *crc = io_crc32c(0, t, strlen(t));
    cJSON_free(t);
    return 1;
}

hpt_status run_record_save(const hpt_trainer *tr) {
    if (!tr->o.run_record || !tr->o.save_dir) return HPT_OK;
    cJSON *rec = cJSON_Parse(tr->o.run_record);
    if (!cJSON_IsObject(rec)) {
        cJSON_Delete(rec);
        return hpt_fail(HPT_ERR_INVALID, "the run record is not a JSON object");
    }
    cJSON *env = cJSON_CreateObject();
    cJSON_AddStringToObject(env, "format", k_format);
    cJSON_AddNumberToObject(env, "version", RECORD_VERSION);
    cJSON_AddNumberToObject(env, "step", (double)tr->step);
    cJSON_AddItemToObject(env, "record", rec);
    uint32_t crc;
    char hex[16], *text = NULL;
    if (envelope_crc(env, &crc)) {
        snprintf(hex, sizeof hex, "%08x", crc);
        cJSON_AddStringToObject(env, "crc32c", hex);
        text = cJSON_Print(env);
    }
    cJSON_Delete(env);
    if (!text) return hpt_fail(HPT_ERR_OOM, "the run record's text");
    char path[PATH_MAX];
    record_path(path, sizeof path, hpt_trainer_state_dir(tr));
    io_atomic w;
    hpt_status s = io_atomic_begin(&w, path);
    if (s == HPT_OK) s = io_atomic_write(&w, text, strlen(text));
    if (s == HPT_OK) s = io_atomic_write(&w, "\n", 1);
    cJSON_free(text);
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w);
}

hpt_status hpt_run_record_read(const char *dir, char **record_out, int64_t *step_out) {
    *record_out = NULL;
    if (step_out) *step_out = 0;
    char path[PATH_MAX];
    record_path(path, sizeof path, dir);
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return HPT_OK; /* saved without a record */
    char *buf = NULL;
    FILE *fp;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &fp, &size));
    hpt_status s = size > (64u << 20) ? hpt_fail(HPT_ERR_FORMAT, "%s: %llu bytes: not a run record",
                                                path, (unsigned long long)size) : HPT_OK;
    if (s == HPT_OK && !(buf = malloc((size_t)size + 1))) s = hpt_fail(HPT_ERR_OOM, "reading %s", path);
    if (s == HPT_OK) s = io_read_exact(fp, buf, (size_t)size, path, "run record");
    fclose(fp);
    if (s != HPT_OK) {
        free(buf);
        return s;
    }
    buf[size] = '\0';
    cJSON *env = cJSON_Parse(buf);
    free(buf);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(env, "format");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(env, "version");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(env, "step");
    const cJSON *rec = cJSON_GetObjectItemCaseSensitive(env, "record");
    cJSON *crc = cJSON_DetachItemFromObjectCaseSensitive(env, "crc32c");
    uint32_t want = 0, got = 0;
    if (!cJSON_IsObject(env) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, k_format) ||
        !cJSON_IsNumber(ver) || !cJSON_IsNumber(step) || !cJSON_IsObject(rec) ||
        !cJSON_IsString(crc) || sscanf(crc->valuestring, "%8x", &want) != 1)
        s = hpt_fail(HPT_ERR_FORMAT, "%s is not an hptrain run record (malformed or truncated)", path);
    else if (ver->valuedouble != RECORD_VERSION)
        s = hpt_fail(HPT_ERR_FORMAT, "%s: run-record version %g is not supported (this build reads "
                     "version %d)", path, ver->valuedouble, RECORD_VERSION);
    else if (!envelope_crc(env, &got))
        s = hpt_fail(HPT_ERR_OOM, "checking %s", path);
    else if (got != want)
        s = hpt_fail(HPT_ERR_CHECKSUM, "%s: checksum mismatch (stored %08x, computed %08x): the "
                     "file is corrupt", path, want, got);
    char *t = s == HPT_OK ? cJSON_PrintUnformatted(rec) : NULL;
    if (s == HPT_OK && !t) s = hpt_fail(HPT_ERR_OOM, "reading %s", path);
    if (s == HPT_OK) {
        *record_out = strdup(t);
        if (!*record_out) s = hpt_fail(HPT_ERR_OOM, "reading %s", path);
        if (step_out) *step_out = (int64_t)step->valuedouble;
    }
    cJSON_free(t);
    cJSON_Delete(crc);
    cJSON_Delete(env);
    return s;
}
