/* save_dir.c: where a training run's save goes, and in which dtype (docs/formats.md, "Where a
 * save goes"). --save DIR receives the weights: llm.c's model.bin (GPT-2) and, for a run from a
 * Hugging Face directory or of an architecture llm.c's file does not hold, a Hugging Face
 * directory (config.json and safetensors, in the save dtype). The training state (state.bin,
 * ZeRO's manifest and shards, and any side file kept with them) goes to the state directory:
 * DIR itself when DIR is no Hugging Face directory, else DIR.state beside it, so an exported
 * directory holds the model only. hpt_train_state_dir is the one place that decides; --resume
 * takes either directory (hpt_train_resume_dir). A LoRA save is PEFT's directory, its state
 * (lora_state.bin) inside as before (docs/lora.md). */
#include "core/core.h"
#include "model/model.h"
#include "train/trainer_int.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int is_dir(const char *p) {
    struct stat st;
    return p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir without its trailing slashes, into buf ("/" stays). */
static hpt_status trim(const char *dir, char *buf, size_t n) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len + 7 > n) return hpt_fail(HPT_ERR_INVALID, "path too long: %s", dir);
    snprintf(buf, n, "%.*s", (int)len, dir);
    return HPT_OK;
}

hpt_status hpt_train_state_dir(const char *save_dir, int hf, char *buf, size_t n) {
    HPT_CHECK(trim(save_dir, buf, n));
    if (hf) strcat(buf, ".state");
    return HPT_OK;
}

/* 1 when dir holds a training state (state.bin or ZeRO's manifest). */
static int holds_state(const char *dir) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s/state.bin", dir) < (int)sizeof p && is_file(p)) return 1;
    return snprintf(p, sizeof p, "%s/zero.manifest", dir) < (int)sizeof p && is_file(p);
}

hpt_status hpt_train_save_dir_of(const char *state_dir, char *buf, size_t n) {
    const size_t len = strlen(state_dir), k = sizeof ".state" - 1;
    char cfg[PATH_MAX];
    if (len >= n) return hpt_fail(HPT_ERR_INVALID, "path too long: %s", state_dir);
    snprintf(buf, n, "%s", state_dir);
    /* hpt_train_state_dir's side directory: DIR.state beside a Hugging Face DIR */
    if (len > k && !strcmp(state_dir + len - k, ".state") &&
        snprintf(cfg, sizeof cfg, "%.*s/config.json", (int)(len - k), state_dir) < (int)sizeof cfg &&
        is_file(cfg))
        buf[len - k] = '\0';
    return HPT_OK;
}

hpt_status hpt_train_resume_dir(const char *dir, char *buf, size_t n) {
    char side[PATH_MAX];
    HPT_CHECK(hpt_train_state_dir(dir, 1, side, sizeof side));
    /* DIR.state first: an older save may have left a state.bin inside the exported DIR */
    if (holds_state(side)) {
        if (strlen(side) >= n) return hpt_fail(HPT_ERR_INVALID, "path too long: %s", side);
        snprintf(buf, n, "%s", side);
        return HPT_OK;
    }
    return trim(dir, buf, n);
}

int trainer_saves_hf(const hpt_trainer *tr) {
    return is_dir(tr->o.model) || hpt_model_get_config(tr->model)->arch != HPT_ARCH_GPT2;
}

/* The Hugging Face directory the run's weights came from, into buf: --model DIR, or on a resume
 * the directory the state was saved beside (--resume DIR or DIR.state); 0 when none. */
static int weights_source(const hpt_train_opts *o, char *buf, size_t n) {
    if (is_dir(o->model)) {
        snprintf(buf, n, "%s", o->model);
        return 1;
    }
    if (!o->resume || trim(o->resume, buf, n) != HPT_OK) return 0;
    size_t len = strlen(buf);
    if (len > 6 && !strcmp(buf + len - 6, ".state")) buf[len - 6] = '\0';
    char cfg[PATH_MAX + 16];
    snprintf(cfg, sizeof cfg, "%s/config.json", buf);
    return is_file(cfg);
}

hpt_status trainer_save_paths(hpt_trainer *tr) {
    const hpt_train_opts *o = &tr->o;
    const int hf = !hpt_model_lora_on(tr->model) && trainer_saves_hf(tr);
    tr->save_dtype = HPT_DTYPE_F32;
    if (o->save_dtype == HPT_DTYPE_F32 || o->save_dtype == HPT_DTYPE_BF16) {
        if (o->save_dtype == HPT_DTYPE_BF16 && !hf)
            return hpt_fail(HPT_ERR_INVALID, "--save-dtype bf16 is for Hugging Face directories; "
                            "this run saves %s (fp32)", hpt_model_lora_on(tr->model)
                            ? "LoRA adapters" : "llm.c's model.bin");
        tr->save_dtype = o->save_dtype;
    } else if (hf) { /* the dtype the weights came in */
        char src[PATH_MAX];
        if (weights_source(o, src, sizeof src)) HPT_CHECK(hpt_hf_weights_dtype(src, &tr->save_dtype));
    }
    if (!o->save_dir) {
        tr->state_dir[0] = '\0';
        return HPT_OK;
    }
    return hpt_train_state_dir(o->save_dir, hf, tr->state_dir, sizeof tr->state_dir);
}

const char *hpt_trainer_state_dir(const hpt_trainer *tr) {
    return tr->state_dir[0] ? tr->state_dir : NULL;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends to buf ("DIR/a, DIR/b") the files of dir whose names pass keep, sorted. */
static void list_files(char *buf, size_t n, const char *dir, int (*keep)(const char *)) {
    DIR *d = opendir(dir);
    char *names[256];
    int k = 0;
    struct dirent *e;
    while (d && k < 256 && (e = readdir(d)))
        if (e->d_name[0] != '.' && keep(e->d_name) && (names[k] = strdup(e->d_name))) k++;
    if (d) closedir(d);
    qsort(names, (size_t)k, sizeof *names, cmp_names);
    for (int i = 0; i < k; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%s%s/%s", len ? ", " : "", dir, names[i]);
        free(names[i]);
    }
}

/* the files a Hugging Face save writes or keeps; not llm.c's model.bin (named apart) nor a
 * state left by an older save */
static int hf_file(const char *name) {
    return strcmp(name, "model.bin") && strcmp(name, "state.bin") && !strstr(name, ".tmp.");
}

static int adapter_file(const char *name) {
    return !strncmp(name, "adapter_", 8) && !strstr(name, ".tmp.");
}

static int state_file(const char *name) {
    return (!strcmp(name, "state.bin") || !strcmp(name, "lora_state.bin") || !strcmp(name, "zero.manifest") ||
            !strncmp(name, "zero-", 5)) && !strstr(name, ".tmp.");
}

hpt_status hpt_trainer_saved_files(const hpt_trainer *tr, char *buf, size_t n) {
    if (!tr->o.save_dir || n == 0) return hpt_fail(HPT_ERR_INVALID, "no save directory given");
    char dir[PATH_MAX];
    HPT_CHECK(trim(tr->o.save_dir, dir, sizeof dir));
    buf[0] = '\0';
    if (hpt_model_lora_on(tr->model)) { /* PEFT's files, lora_state.bin beside them */
        char files[16384] = "";
        list_files(files, sizeof files, dir, adapter_file);
        snprintf(buf, n, "the adapters (PEFT's files) %s", files);
    } else if (hpt_model_get_config(tr->model)->arch == HPT_ARCH_GPT2) {
        snprintf(buf, n, "%s/model.bin", dir);
    }
    if (!hpt_model_lora_on(tr->model) && trainer_saves_hf(tr)) {
        size_t len = strlen(buf);
        snprintf(buf + len, n - len, "%sa Hugging Face directory in %s (", len ? "; " : "",
                 tr->save_dtype == HPT_DTYPE_BF16 ? "bf16" : "f32");
        len = strlen(buf);
        char files[16384] = "";
        list_files(files, sizeof files, dir, hf_file);
        snprintf(buf + len, n - len, "%s)", files);
    }
    size_t len = strlen(buf);
    char files[16384] = "";
    list_files(files, sizeof files, tr->state_dir, state_file);
    snprintf(buf + len, n - len, "%sthe training state %s", len ? "; " : "", files);
    return HPT_OK;
}
