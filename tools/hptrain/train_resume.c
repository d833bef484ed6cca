/* train_resume.c: `train --resume DIR` continues the run as DIR/run.json recorded it
 * (docs/formats.md, "The run record"). The record holds the run's flags (each option's long
 * name and value, paths made absolute, their text as given beside them; after --plan auto the
 * plan chosen, as flags), rewritten with every save (src/train/run_record.c). A resume parses
 * the recorded flags, then each flag given: one of k_may_change replaces the recorded value;
 * any other must leave the parsed run unchanged (compared by effect: 2e-3 is 0.002; a flag
 * added since, which same_run does not know, by its text) or is refused, naming the flag, the
 * saved value and the given one.
 * Without a record (a state saved before records) the flags given are the run's, as before. */
#include "train_args.h"

#include <cJSON.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The flags a resume may change: the run's length, its cadence and outputs, where its bytes
 * live and how its work is split (the exact techniques; --accum and --zero with the number of
 * processes: the state checks that --accum times the processes is the saved run's). */
static const char *const k_may_change[] = {
    "steps", "eval-every", "val-batches", "save", "save-every", "log", "trace", "quiet",
    "stop-at", "threads", "memory", "host-memory", "disk-memory", "offload-dir", "offload",
    "max-active-layers", "prefetch", "recompute", "act-offload", "accum", "zero", "record-rates",
    "verbose", "resume", "force", NULL};
/* Flags of one invocation, never recorded (--plan auto's are replaced by the plan chosen;
 * --adapter only starts a run: its settings are in the saved adapter_config.json). */
static const char *const k_not_recorded[] = {
    "resume", "log", "trace", "quiet", "stop-at", "record-rates", "verbose", "plan", "allow",
    "tokens-per-step", "adapter", "force", NULL};
/* Flags whose value is a path: recorded absolute (a --model that names no file is a SHAPE). */
static const char *const k_paths[] = {"model", "data", "val", "offload-dir", "save", NULL};

static int in_list(const char *const *list, const char *name) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], name)) return 1;
    return 0;
}

/* value as an absolute path (malloc'd), or NULL when it needs none (a SHAPE, already absolute). */
static char *absolute(const char *name, const char *value) {
    if (!value || value[0] == '/' || !in_list(k_paths, name)) return NULL;
    if (!strcmp(name, "model") && access(value, F_OK) != 0) return NULL;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return NULL;
    while (value[0] == '.' && value[1] == '/') value += 2;
    size_t n = strlen(cwd) + strlen(value) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", cwd, value);
    return p;
}

static void free_argv(char **argv) {
    if (argv) free(argv[0]);
    free(argv);
}

/* cmd + the flags of args that known names (NULL: all), then the n words of given: an argv
 * (freed by free_argv) whose own words are one block at argv[0], its values args' strings and
 * given's; its length in *argc. NULL when out of memory. */
static char **record_argv(const char *cmd, const cJSON *args, const struct option *known,
                          char **given, int n, int *argc) {
    char **argv = calloc((size_t)(2 * cJSON_GetArraySize(args) + n + 2), sizeof *argv);
    size_t nb = strlen(cmd) + 1;
    const cJSON *f;
    cJSON_ArrayForEach(f, args) nb += strlen(cJSON_GetArrayItem(f, 0)->valuestring) + 3;
    char *w = argv ? malloc(nb) : NULL;
    if (!w) {
        free(argv);
        return NULL;
    }
    int k = 0;
    argv[k++] = w;
    w += sprintf(w, "%s", cmd) + 1;
    cJSON_ArrayForEach(f, args) {
        const char *name = cJSON_GetArrayItem(f, 0)->valuestring;
        const cJSON *v = cJSON_GetArrayItem(f, 1);
        int o = 0, takes = cJSON_IsString(v);
        while (known && known[o].name && strcmp(known[o].name, name)) o++;
        if (known && (!known[o].name || (known[o].has_arg && !takes))) continue; /* not cmd's */
        if (known) takes = known[o].has_arg;
        argv[k++] = w;
        w += sprintf(w, "--%s", name) + 1;
        if (takes) argv[k++] = v->valuestring;
    }
    for (int i = 0; i < n; i++) argv[k++] = given[i];
    *argc = k;
    return argv;
}

/* Parses "train" + the flags of args into *out: -1, or the exit status (printed). The argv
 * (when argv_out: kept, freed by free_argv; else freed here): record_argv's. */
static int parse_with(const cJSON *args, char ***argv_out, train_args *out) {
    int argc;
    char **argv = record_argv("train", args, NULL, NULL, 0, &argc);
    if (!argv) return cli_error("out of memory");
    int rc = cli_train_parse(argc, argv, out);
    if (argv_out) *argv_out = argv;
    else free_argv(argv);
    return rc;
}

/* The flags same_run compares by their effect: train's own (below) and the plan's options. */
static const char *const k_compared[] = {
    "model", "data", "val", "batch", "seq", "steps", "lr", "min-lr", "warmup", "grad-clip",
    "eval-every", "val-batches", "save", "save-every", "seed", "threads", NULL};

static int compared(const char *name) {
    const char *opt;
    int takes;
    for (int i = 0; (opt = hpt_plan_option_name(i, &takes)); i++)
        if (!strcmp(opt, name)) return 1;
    return in_list(k_compared, name);
}

static int same_str(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

/* 1 when a and b run the same: train's fields one by one, the plan as hpt_plan_print writes it
 * (its canonical text: every option away from its default). Struct bytes are not compared:
 * their padding is not the parse's. */
static int same_run(const train_args *a, const train_args *b) {
    const hpt_train_opts *x = &a->o, *y = &b->o;
    char px[4096], py[4096];
    if (hpt_plan_print(&x->plan, px, sizeof px) != HPT_OK ||
        hpt_plan_print(&y->plan, py, sizeof py) != HPT_OK)
        return 0;
    return same_str(x->model, y->model) && same_str(x->data, y->data) && same_str(x->val, y->val) &&
           same_str(x->save_dir, y->save_dir) && x->B == y->B && x->T == y->T &&
           x->steps == y->steps && x->lr == y->lr && x->min_lr == y->min_lr &&
           x->warmup == y->warmup && x->grad_clip == y->grad_clip && x->eval_every == y->eval_every &&
           x->val_batches == y->val_batches && x->save_every == y->save_every && x->seed == y->seed &&
           a->threads == b->threads && !strcmp(px, py);
}

/* The recorded value of a flag: its value, "on" for a flag without one, NULL when the record
 * does not name it (its default). */
static const char *saved_value(const cJSON *args, const char *name) {
    const char *v = NULL;
    const cJSON *f;
    cJSON_ArrayForEach(f, args) {
        if (strcmp(cJSON_GetArrayItem(f, 0)->valuestring, name)) continue;
        const cJSON *x = cJSON_GetArrayItem(f, 1);
        v = cJSON_IsString(x) ? x->valuestring : "on";
    }
    return v;
}

static size_t glob_count(const char *pattern) {
    glob_t g;
    size_t n = glob(pattern, 0, NULL, &g) == 0 ? g.gl_pathc : 0;
    if (n) globfree(&g);
    return n;
}

/* Checks the record's shape: {"args": [[name, value|null], ...], "plan_auto": bool, ...}. */
static int valid_record(const cJSON *r) {
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(r, "args"), *f;
    if (!cJSON_IsArray(args)) return 0;
    cJSON_ArrayForEach(f, args) {
        const cJSON *v = cJSON_GetArrayItem(f, 1);
        if (!cJSON_IsArray(f) || cJSON_GetArraySize(f) != 2 ||
            !cJSON_IsString(cJSON_GetArrayItem(f, 0)) || !(cJSON_IsString(v) || cJSON_IsNull(v)))
            return 0;
    }
    return 1;
}

/* Sets the flag name=value in arr: in the place of an earlier one of the same name, else last. */
static void put_flag(cJSON *arr, const char *name, const char *value) {
    cJSON *f = cJSON_CreateArray(), *g;
    cJSON_AddItemToArray(f, cJSON_CreateString(name));
    cJSON_AddItemToArray(f, value ? cJSON_CreateString(value) : cJSON_CreateNull());
    int i = 0;
    cJSON_ArrayForEach(g, arr) {
        if (!strcmp(cJSON_GetArrayItem(g, 0)->valuestring, name)) {
            cJSON_ReplaceItemInArray(arr, i, f);
            return;
        }
        i++;
    }
    cJSON_AddItemToArray(arr, f);
}

/* Another number of processes than the record's, --accum not given: the saved run's
 * micro-batches per step (--accum times processes) split over this run's processes. -1, or the
 * exit status (printed) when they do not divide. */
static int split_accum(const cJSON *rec, cJSON *run, const train_args *a, const char *dir) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(rec, "procs");
    int n = cJSON_IsNumber(p) && p->valueint > 0 ? p->valueint : 1, m = hpt_dist_size();
    for (int i = 0; i < a->n_flags; i++)
        if (!strcmp(a->flags[i].name, "accum")) return -1;
    if (n == m) return -1;
    const char *was = saved_value(run, "accum");
    long k = was ? strtol(was, NULL, 10) : 1, total = (k > 1 ? k : 1) * n;
    if (total % m)
        return cli_usage_error("train", "--resume %s: the run was saved by %d process%s with --accum "
                               "%ld (%ld micro-batches per step), which %d processes cannot share: "
                               "give --accum K with K x %d = %ld", dir, n, n > 1 ? "es" : "", k,
                               total, m, m, total);
    char b[32];
    snprintf(b, sizeof b, "%ld", total / m);
    put_flag(run, "accum", b);
    return -1;
}

static const char k_changeable_text[] =
    "--steps, the cadence and outputs, --threads, the budgets and exact techniques (hptrain "
    "train --help, --resume)";

int cli_resume_merge(train_args *a, cli_resume *rs) {
    const char *dir = a->o.resume;
    int64_t step;
    char sdir[PATH_MAX]; /* the state's directory: DIR.state beside a Hugging Face DIR, or DIR */
    hpt_status s = hpt_train_resume_dir(dir, sdir, sizeof sdir);
    if (s != HPT_OK) return cli_lib_error(s, "train: --resume");
    s = hpt_run_record_read(sdir, &rs->text, &step);
    if (s != HPT_OK) return cli_lib_error(s, "train: --resume");
    if (!rs->text) { /* saved before records: the flags given are the run's */
        if (a->o.data) return -1;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/state.bin", dir);
        if (access(p, F_OK) != 0 && access(dir, F_OK) != 0)
            return cli_error("train: --resume %s: cannot open %s (no such directory)", dir, dir);
        return cli_usage_error("train", "--resume %s: %s/run.json is missing (a state saved before "
                               "hptrain recorded its runs): give the run's flags again (--data, "
                               "--val, --batch, --seq, --accum, the plan and the hyper-parameters; "
                               "--model for a LoRA run)", dir, sdir);
    }
    cJSON *rec = cJSON_Parse(rs->text);
    rs->json = rec;
    if (!valid_record(rec))
        return cli_error("train: --resume %s: %s/run.json holds no run's flags", dir, sdir);
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(rec, "args");
    rs->plan_auto = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "plan_auto"));
    train_args saved;
    int rc = parse_with(args, NULL, &saved);
    cli_train_args_free(&saved);
    if (rc >= 0) return cli_error("train: --resume %s: this build refuses a flag of %s/run.json "
                                  "(above)", dir, sdir);
    /* every flag given, its path absolute, in the record's place of its name: one that may
     * not change must leave the run as recorded; the run is the record with those that may */
    cJSON *run = cJSON_Duplicate(args, 1);
    if (!run) return cli_error("out of memory");
    for (int i = 0, n = cJSON_GetArraySize(run); i < n; i++) /* --save: DIR's, unless given */
        if (!strcmp(cJSON_GetArrayItem(cJSON_GetArrayItem(run, i), 0)->valuestring, "save")) {
            cJSON_DeleteItemFromArray(run, i);
            break;
        }
    for (int i = 0; i < a->n_flags && rc < 0; i++) {
        const cli_flag *f = &a->flags[i];
        if (!strcmp(f->name, "plan")) {
            if (!rs->plan_auto)
                rc = cli_usage_error("train", "--plan auto: the run in %s was saved with its plan "
                                     "given as flags; resume without --plan auto", dir);
            continue; /* the plan chosen when the run began */
        }
        if (rs->plan_auto && (!strcmp(f->name, "allow") || !strcmp(f->name, "tokens-per-step") ||
                              !strcmp(f->name, "verbose")))
            continue;
        char *abs = absolute(f->name, f->value);
        const char *value = abs ? abs : f->value, *was = saved_value(args, f->name);
        int gone = (!strcmp(f->name, "data") || !strcmp(f->name, "val")) && was && !glob_count(was);
        if (in_list(k_may_change, f->name) || gone) { /* gone: the files' new place is taken */
            put_flag(run, f->name, value);
            free(abs);
            continue;
        }
        if (!strcmp(f->name, "adapter")) {
            rc = cli_usage_error("train", "--adapter starts a run from adapters; --resume continues "
                                 "one (give one of them)");
            free(abs);
            break;
        }
        cJSON *one = cJSON_Duplicate(args, 1);
        train_args x, y;
        memset(&x, 0, sizeof x);
        memset(&y, 0, sizeof y);
        int r1 = one ? (put_flag(one, f->name, value), parse_with(one, NULL, &x)) : cli_error("out of memory");
        int r0 = parse_with(args, NULL, &y);
        /* a flag same_run does not know (added since): its text must be the record's */
        int same = compared(f->name) ? same_run(&x, &y) : value ? same_str(value, was) : was != NULL;
        if (r1 >= 0) rc = r1;
        else if (r0 < 0 && !same)
            rc = cli_usage_error("train", "--%s: the run in %s was saved %s%s, given %s; a resume "
                                 "may change only %s", f->name, dir, was ? "with " : "",
                                 was ? was : f->value ? "with its default" : "without it",
                                 f->value ? f->value : "on", k_changeable_text);
        cli_train_args_free(&x);
        cli_train_args_free(&y);
        cJSON_Delete(one);
        free(abs);
    }
    if (rc < 0 && !saved_value(run, "save")) { /* saves go to DIR (a copy's to the copy) */
        char save[PATH_MAX];
        if (hpt_train_save_dir_of(sdir, save, sizeof save) != HPT_OK) snprintf(save, sizeof save, "%s", sdir);
        put_flag(run, "save", save);
    }
    if (rc < 0) rc = split_accum(rec, run, a, dir);
    cJSON_ReplaceItemInObjectCaseSensitive(rec, "args", run); /* rec owns run now */
    if (rc >= 0) return rc;
    train_args merged;
    rc = parse_with(run, &rs->argv, &merged);
    if (rc >= 0) {
        cli_train_args_free(&merged);
        return rc;
    }
    cli_train_args_free(a);
    *a = merged;
    a->auto_plan = 0; /* the record's plan is the one --plan auto chose */
    a->o.resume = dir; /* the argument given (the record holds no --resume) */
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "adapter_run"))) {
        int base = a->o.lora.base; /* a run started from --adapter: the adapters' settings */
        s = hpt_lora_read_config(sdir, &a->o.lora);
        if (s != HPT_OK) return cli_lib_error(s, "train: --resume");
        a->o.lora.base = base;
    }
    const char *globs[2][2] = {{"data", a->o.data}, {"val", a->o.val}};
    const cJSON *as_given = cJSON_GetObjectItemCaseSensitive(rec, "as_given");
    for (int i = 0; i < 2; i++) {
        if (!globs[i][1] || glob_count(globs[i][1])) continue;
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(as_given, globs[i][0]);
        return cli_error("train: --resume %s: the run's --%s %s%s%s%s matches no file now (moved or "
                         "deleted): give --%s with their new place", dir, globs[i][0], globs[i][1],
                         cJSON_IsString(g) ? " (given as " : "", cJSON_IsString(g) ? g->valuestring : "",
                         cJSON_IsString(g) ? ")" : "", globs[i][0]);
    }
    if (!a->quiet && hpt_dist_rank() == 0)
        fprintf(stderr, "hptrain: resuming the run recorded in %s/run.json at its step %lld\n", sdir,
                (long long)step);
    return -1;
}

int cli_resume_argv(const char *cmd, const struct option *known, int *argc, char ***argv,
                    cli_resume *rs) {
    const char *dir = NULL;
    for (int i = 1; i < *argc; i++) {
        if (!strcmp((*argv)[i], "--resume") && i + 1 < *argc) dir = (*argv)[i + 1];
        else if (!strncmp((*argv)[i], "--resume=", 9)) dir = (*argv)[i] + 9;
    }
    char sdir[PATH_MAX];
    int64_t step;
    if (!dir || hpt_train_resume_dir(dir, sdir, sizeof sdir) != HPT_OK ||
        hpt_run_record_read(sdir, &rs->text, &step) != HPT_OK || !rs->text)
        return -1; /* no record: the command's own reading of DIR, and its message */
    cJSON *rec = cJSON_Parse(rs->text);
    rs->json = rec;
    if (!valid_record(rec))
        return cli_error("%s: --resume %s: %s/run.json holds no run's flags", cmd, dir, sdir);
    /* the recorded flags the command takes, in their order; the flags given after them win */
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(rec, "args");
    int n;
    char **v = record_argv((*argv)[0], args, known, *argv + 1, *argc - 1, &n);
    if (!v) return cli_error("out of memory");
    rs->argv = v;
    *argc = n;
    *argv = v;
    fprintf(stderr, "hptrain: %s: the run recorded in %s/run.json at its step %lld, then the flags "
            "given\n", cmd, sdir, (long long)step);
    return -1;
}

/* The plan chosen (--plan auto) as flags, its budgets and directory aside (they are the user's
 * flags, recorded as given). */
static void put_plan(cJSON *arr, const hpt_plan *p) {
    hpt_plan q = *p;
    q.offload_dir = NULL;
    for (int t = 0; t < HPT_TIER_COUNT; t++) q.budget_bytes[t] = 0;
    char buf[2048];
    if (hpt_plan_print(&q, buf, sizeof buf) != HPT_OK) return;
    char *save = NULL;
    for (char *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        if (strncmp(w, "--", 2)) continue;
        const char *name = w + 2, *opt;
        int takes = 0;
        for (int i = 0; (opt = hpt_plan_option_name(i, &takes)); i++)
            if (!strcmp(opt, name)) break;
        put_flag(arr, name, opt && takes ? strtok_r(NULL, " ", &save) : NULL);
    }
}

char *cli_run_record(const train_args *a, const cli_resume *rs) {
    cJSON *rec = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(rec, "args");
    const cJSON *was = rs->json ? cJSON_GetObjectItemCaseSensitive(rs->json, "as_given") : NULL;
    cJSON *as_given = cJSON_IsObject(was) ? cJSON_Duplicate(was, 1) : cJSON_CreateObject();
    int auto_plan = a->auto_plan || rs->plan_auto;
    for (int i = 0; i < a->n_flags; i++) {
        const cli_flag *f = &a->flags[i];
        if (in_list(k_not_recorded, f->name)) continue;
        int plan_opt = 0, takes;
        const char *opt;
        for (int k = 0; (opt = hpt_plan_option_name(k, &takes)); k++)
            if (!strcmp(opt, f->name)) plan_opt = 1;
        if (auto_plan && (!strcmp(f->name, "batch") ||
                          (plan_opt && strcmp(f->name, "memory") && strcmp(f->name, "host-memory") &&
                           strcmp(f->name, "disk-memory") && strcmp(f->name, "offload-dir"))))
            continue; /* the plan chosen replaces them */
        char *abs = absolute(f->name, f->value);
        put_flag(arr, f->name, abs ? abs : f->value);
        if (abs) {
            cJSON_DeleteItemFromObjectCaseSensitive(as_given, f->name);
            cJSON_AddStringToObject(as_given, f->name, f->value);
        }
        free(abs);
    }
    if (auto_plan) {
        char b[32];
        snprintf(b, sizeof b, "%d", a->o.B);
        put_flag(arr, "batch", b);
        put_plan(arr, &a->o.plan);
    }
    cJSON_AddItemToObject(rec, "as_given", as_given);
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd)) cJSON_AddStringToObject(rec, "cwd", cwd);
    cJSON_AddBoolToObject(rec, "plan_auto", auto_plan);
    cJSON_AddNumberToObject(rec, "procs", hpt_dist_size()); /* --accum is per process */
    if (a->o.adapter || (rs->json && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rs->json, "adapter_run"))))
        cJSON_AddBoolToObject(rec, "adapter_run", 1);
    char *t = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    char *out = t ? strdup(t) : NULL;
    cJSON_free(t);
    return out;
}

void cli_resume_free(cli_resume *rs) {
    free(rs->text);
    cJSON_Delete(rs->json);
    free_argv(rs->argv);
    free(rs->record);
    memset(rs, 0, sizeof *rs);
}
