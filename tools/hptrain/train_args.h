/* train_args.h: `train`'s parsed command line (cmd_train.c) and its resume from a run record
 * (train_resume.c): --resume DIR alone continues the run as DIR/run.json recorded it. */
#ifndef HPT_TRAIN_ARGS_H
#define HPT_TRAIN_ARGS_H

#include "cli.h"

#include <getopt.h>

typedef struct {
    const char *name;  /* the long option's name, without the dashes */
    const char *value; /* its value (borrowed from argv), NULL for a flag without one */
} cli_flag;

typedef struct {
    hpt_train_opts o;
    const char *log_path, *trace_path;
    int quiet, auto_plan, lossy, verbose, record_rates, force;
    long threads, stop_at, tokens;
    cli_flag *flags; /* every option in the order given (malloc'd: cli_train_args_free) */
    int n_flags;
} train_args;

/* Parses train's argv (argv[0] the command's name) into *a: -1 when parsed, else the exit
 * status to return now (0 after --help, 2 for a usage error, printed). */
int cli_train_parse(int argc, char **argv, train_args *a);
void cli_train_args_free(train_args *a);

/* What a resume from a record keeps alive for the run: the record's tree (its "args" the run's
 * flags), the argv made of them. */
typedef struct {
    char *text;      /* the record (hpt_run_record_read) */
    void *json;      /* its parsed tree (cJSON), whose strings the merged options borrow */
    char **argv;     /* the run's argv, made of the tree's strings */
    int plan_auto;   /* the run's plan was chosen by --plan auto */
    char *record;    /* the record this run saves (cli_run_record), or NULL */
} cli_resume;

/* --resume DIR: with DIR/run.json, *a becomes the recorded run with the flags given that may
 * change; a flag given that may not and disagrees is refused (naming the flag, the saved value
 * and the given one). Without a record, *a stays as given (the run's flags must be given
 * again, as before records). -1 to go on, else the exit status (printed). */
int cli_resume_merge(train_args *a, cli_resume *rs);
/* A command that takes train's flags (estimate) with --resume DIR in *argv: when DIR has a run
 * record, *argv becomes the record's flags that `known` names, then the flags given (getopt
 * keeps the last of each), and *argc their count; rs holds them (cli_resume_free). -1 to go
 * on (also without a record: *argv unchanged), else the exit status (printed). */
int cli_resume_argv(const char *cmd, const struct option *known, int *argc, char ***argv,
                    cli_resume *rs);
/* The record of the run a describes (after --plan auto: the plan chosen): a JSON object's text,
 * malloc'd, for hpt_train_opts.run_record; NULL if out of memory. */
char *cli_run_record(const train_args *a, const cli_resume *rs);
void cli_resume_free(cli_resume *rs);

#endif
