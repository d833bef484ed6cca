/* plan.c: the plan (hpt_plan, include/hptrain/plan.h): every technique choice of a run and its
 * budgets. One parser (hpt_plan_set: the flag's name without dashes, and its text) serves
 * `train` and `estimate`; one check (hpt_plan_check) holds every rule on how the choices
 * combine, built from choices.c's per-part checks, which the model, the engine and the
 * estimator call for their own part, so each rule is written once; one printer (hpt_plan_print)
 * writes the flags that reproduce a plan.
 * Invariants: hpt_plan_set changes only what its option names, plus the choices whose default
 * follows it (--optimizer resets its kind's settings, keeping the state width and a given weight
 * decay; --grad-home sets the loss scale's mode unless --loss-scale was given; --zero 3 homes the
 * engine on the host unless --offload was given), and records the option in p->given; setting
 * each option hpt_plan_print writes, from hpt_plan_default_choices, gives the plan back. */
#include "core/choices.h"
#include "core/core.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The options, in the order hpt_plan_option_name lists them and p->given's bits. */
enum {
    O_ATTENTION, O_RECOMPUTE, O_ACT_OFFLOAD, O_ACT_COMPRESS, O_HEAD_CHUNK,
    O_OPTIMIZER, O_STATE_BITS, O_STATE32_EMB, O_WEIGHT_DECAY,
    O_OFFLOAD, O_MAX_ACTIVE, O_PREFETCH, O_FUSED, O_WEIGHTS, O_GRAD_HOME, O_EMBEDDINGS,
    O_VOCAB_CHUNK,
    O_LOSS_SCALE, O_LOSS_SCALE_INIT, O_LOSS_SCALE_WINDOW,
    O_ACCUM,
    O_SCHEDULE, O_WARMUP_STEPS, O_FULL_STEPS, O_MAX_PREDICT, O_CONFIDENCE, O_CORRECT_STEPS,
    O_PREDICTOR, O_CHECK_EVERY, O_CHECK_WEIGHTS, O_BAND, O_ROLLBACK,
    O_JUMP_STRIDE, O_JUMP_SNAPSHOTS, O_JUMP_HORIZON, O_JUMP_FIT, O_JUMP_STATE, O_JUMP_SEARCH,
    O_JUMP_MIN_GAIN,
    O_MEMORY, O_HOST_MEMORY, O_DISK_MEMORY, O_OFFLOAD_DIR,
    O_DEVICE, O_ZERO,
    O_LORA, O_LORA_TARGETS, O_BASE_WEIGHTS, O_PACK, O_BASE_HOME, O_MLP_TILE,
    O_BASE_PREFETCH, O_MATMUL,
    O_COUNT
};

static const struct {
    const char *name;
    int takes_value;
} k_opts[O_COUNT] = {
    {"attention", 1}, {"recompute", 1}, {"act-offload", 1}, {"act-compress", 1},
    {"head-chunk", 1}, {"optimizer", 1}, {"state-bits", 1}, {"state-32bit-embeddings", 0},
    {"weight-decay", 1}, {"offload", 1}, {"max-active-layers", 1}, {"prefetch", 1},
    {"fused-update", 0}, {"weights", 1}, {"grad-home", 1}, {"embeddings", 1},
    {"vocab-chunk", 1}, {"loss-scale", 1}, {"loss-scale-init", 1}, {"loss-scale-window", 1},
    {"accum", 1}, {"schedule", 1}, {"warmup-steps", 1}, {"full-steps", 1},
    {"max-predict-steps", 1}, {"confidence", 1}, {"correct-steps", 1}, {"predictor", 1},
    {"check-every", 1}, {"check-weights", 1}, {"band", 1}, {"rollback-bound", 1},
    {"jump-stride", 1}, {"jump-snapshots", 1}, {"jump-horizon", 1}, {"jump-fit", 1},
    {"jump-state", 1}, {"jump-search-batches", 1}, {"jump-min-gain", 1},
    {"memory", 1}, {"host-memory", 1}, {"disk-memory", 1}, {"offload-dir", 1},
    {"device", 1}, {"zero", 1}, {"lora", 1}, {"lora-targets", 1},
    {"base-weights", 1}, {"pack", 1}, {"base-home", 1}, {"mlp-tile", 1},
    {"base-prefetch", 1}, {"matmul", 1},
};

static const char *const k_base_names[] = {"f32", "bf16", "int8", "nf4"};
static const char *const k_jump_fits[] = {"linear", "quadratic", "exp"};
static const char *const k_jump_states[] = {"keep", "reset", "zero-m"};

#define GIVEN(p, i) (((p)->given >> (i)) & 1u)

hpt_plan hpt_plan_default_choices(void) {
    hpt_plan p;
    memset(&p, 0, sizeof p);
    p.act = hpt_act_defaults();
    p.adamw = hpt_adamw_defaults();
    p.offload = hpt_offload_defaults();
    p.loss_scale = hpt_loss_scale_defaults();
    p.sched = hpt_schedule_defaults();
    p.accum = 1;
    p.zero = -1;
    p.lora = hpt_lora_defaults();
    return p;
}

const char *hpt_plan_option_name(int i, int *takes_value) {
    if (i < 0 || i >= O_COUNT) return NULL;
    if (takes_value) *takes_value = k_opts[i].takes_value;
    return k_opts[i].name;
}

/* ---- parsing ----------------------------------------------------------------------------- */

/* The integer in [min, max] that text spells in full; the message names the option. */
static hpt_status parse_long(int opt, const char *text, long min, long max, long *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!*text || *end || errno || v < min || v > max)
        return hpt_fail(HPT_ERR_INVALID, "%s expects an integer in [%ld, %ld], got '%s'",
                        k_opts[opt].name, min, max, text);
    *out = v;
    return HPT_OK;
}

static hpt_status parse_float(int opt, const char *text, double min, double max, float *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno || !isfinite(v) || v < min || v > max)
        return hpt_fail(HPT_ERR_INVALID, "%s expects a number in [%g, %g], got '%s'",
                        k_opts[opt].name, min, max, text);
    *out = (float)v;
    return HPT_OK;
}

/* parse_long into an int or int64_t field. */
static hpt_status set_int(int opt, const char *text, long min, long max, int *dst) {
    long v = 0;
    HPT_CHECK(parse_long(opt, text, min, max, &v));
    *dst = (int)v;
    return HPT_OK;
}

static hpt_status set_i64(int opt, const char *text, long min, long max, int64_t *dst) {
    long v = 0;
    HPT_CHECK(parse_long(opt, text, min, max, &v));
    *dst = v;
    return HPT_OK;
}

/* A parse helper's failure, its message prefixed by the option's name. */
static hpt_status named(int opt, hpt_status s) {
    if (s == HPT_OK) return s;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", hpt_last_error());
    return hpt_fail(s, "%s: %s", k_opts[opt].name, msg);
}

/* "cpu" -> 0, "cuda" -> 1, "cuda:N" -> 1 + N */
static hpt_status parse_device(const char *text, int *device) {
    if (!strcmp(text, "cpu")) return *device = 0, HPT_OK;
    if (!strcmp(text, "cuda")) return *device = 1, HPT_OK;
    if (!strncmp(text, "cuda:", 5)) {
        long n = 0;
        if (parse_long(O_DEVICE, text + 5, 0, 1023, &n) == HPT_OK) return *device = 1 + (int)n, HPT_OK;
    }
    return hpt_fail(HPT_ERR_INVALID, "device: '%s': expected cpu, cuda or cuda:N", text);
}

static hpt_status set_option(hpt_plan *p, int opt, const char *v) {
    switch (opt) {
    case O_ATTENTION: return named(opt, hpt_attention_parse(v, &p->act));
    case O_RECOMPUTE: return named(opt, hpt_recompute_parse(v, &p->act));
    case O_ACT_OFFLOAD: return named(opt, hpt_act_offload_parse(v, &p->act));
    case O_ACT_COMPRESS: return named(opt, hpt_act_compress_parse(v, &p->act));
    case O_HEAD_CHUNK: return set_int(opt, v, 0, 1L << 30, &p->act.head_chunk);
    case O_MLP_TILE: return set_int(opt, v, 0, 1L << 30, &p->act.mlp_tile);
    case O_MATMUL: return named(opt, hpt_matmul_parse(v, &p->act));
    case O_OPTIMIZER: { /* the kind's own settings (betas, SGD's weight decay), then the flags' */
        hpt_optim_kind k;
        HPT_CHECK(named(opt, hpt_optim_parse(v, &k)));
        hpt_adamw_opts was = p->adamw;
        p->adamw = hpt_optim_defaults(k);
        p->adamw.state_bits = was.state_bits;
        p->adamw.state32_embeddings = was.state32_embeddings;
        if (GIVEN(p, O_WEIGHT_DECAY)) p->adamw.weight_decay = was.weight_decay;
        return HPT_OK;
    }
    case O_STATE_BITS:
        if (strcmp(v, "32") && strcmp(v, "8"))
            return hpt_fail(HPT_ERR_INVALID, "state-bits: 32 or 8 (got '%s')", v);
        p->adamw.state_bits = atoi(v);
        return HPT_OK;
    case O_STATE32_EMB: p->adamw.state32_embeddings = 1; return HPT_OK;
    case O_WEIGHT_DECAY: return parse_float(opt, v, 0, 10, &p->adamw.weight_decay);
    case O_OFFLOAD: return named(opt, hpt_offload_parse(v, &p->offload));
    case O_MAX_ACTIVE: return set_int(opt, v, 1, 1 << 20, &p->offload.max_active);
    case O_PREFETCH: return set_int(opt, v, 0, 1 << 20, &p->offload.prefetch);
    case O_FUSED: p->offload.fused = 1; return HPT_OK;
    case O_WEIGHTS: {
        hpt_block_weights w;
        HPT_CHECK(named(opt, hpt_block_weights_parse(v, &w)));
        p->offload.weights = (int)w;
        return HPT_OK;
    }
    case O_GRAD_HOME: { /* fp16 homes turn on dynamic loss scaling unless a scale was given */
        hpt_grad_home g;
        HPT_CHECK(named(opt, hpt_grad_home_parse(v, &g)));
        p->offload.grad_home = (int)g;
        if (!GIVEN(p, O_LOSS_SCALE))
            p->loss_scale.mode = g == HPT_GH_FP16 ? HPT_LOSS_SCALE_DYNAMIC : HPT_LOSS_SCALE_OFF;
        return HPT_OK;
    }
    case O_EMBEDDINGS: {
        hpt_embeddings e;
        HPT_CHECK(named(opt, hpt_embeddings_parse(v, &e)));
        p->offload.embeddings = (int)e;
        return HPT_OK;
    }
    case O_VOCAB_CHUNK: return set_int(opt, v, 0, 1L << 30, &p->offload.vocab_chunk);
    case O_LOSS_SCALE: return named(opt, hpt_loss_scale_parse(v, &p->loss_scale));
    case O_LOSS_SCALE_INIT:
        return parse_float(opt, v, 1, 1.8446744073709552e19, &p->loss_scale.init);
    case O_LOSS_SCALE_WINDOW: return set_i64(opt, v, 1, 1L << 40, &p->loss_scale.window);
    case O_ACCUM: return set_int(opt, v, 1, 1 << 20, &p->accum);
    case O_SCHEDULE:
        if (!strcmp(v, "full")) p->sched.kind = HPT_SCHEDULE_FULL;
        else if (!strcmp(v, "hybrid")) p->sched.kind = HPT_SCHEDULE_HYBRID;
        else return hpt_fail(HPT_ERR_INVALID, "schedule: full or hybrid (got '%s')", v);
        return HPT_OK;
    case O_WARMUP_STEPS: return set_i64(opt, v, 0, 1L << 40, &p->sched.warmup_steps);
    case O_FULL_STEPS: return set_i64(opt, v, 1, 1L << 40, &p->sched.full_steps);
    case O_MAX_PREDICT: return set_i64(opt, v, 1, 1L << 40, &p->sched.max_predict_steps);
    case O_CONFIDENCE: return parse_float(opt, v, 0, 1, &p->sched.confidence);
    case O_CORRECT_STEPS: return set_i64(opt, v, 1, 1L << 40, &p->sched.correct_steps);
    case O_PREDICTOR: {
        hpt_predictor_kind k;
        HPT_CHECK(named(opt, hpt_predictor_parse(v, &k)));
        p->sched.predictor = (int)k;
        return HPT_OK;
    }
    case O_CHECK_EVERY: return set_i64(opt, v, 0, 1L << 40, &p->sched.check_every);
    case O_CHECK_WEIGHTS: {
        hpt_weights w;
        HPT_CHECK(named(opt, hpt_weights_parse(v, &w)));
        p->sched.check_weights = (int)w;
        return HPT_OK;
    }
    case O_BAND: return parse_float(opt, v, 1e-6, 1e6, &p->sched.band);
    case O_ROLLBACK: return parse_float(opt, v, 1e-6, 1e6, &p->sched.rollback);
    case O_JUMP_STRIDE: return set_i64(opt, v, 1, 1L << 40, &p->sched.jump_stride);
    case O_JUMP_SNAPSHOTS: return set_i64(opt, v, 2, 64, &p->sched.jump_snapshots);
    case O_JUMP_HORIZON: return set_i64(opt, v, 1, 1L << 40, &p->sched.jump_horizon);
    case O_JUMP_FIT:
        for (int i = 0; i <= HPT_JUMP_FIT_EXP; i++)
            if (!strcmp(v, k_jump_fits[i])) { p->sched.jump_fit = i; return HPT_OK; }
        return hpt_fail(HPT_ERR_INVALID, "jump-fit: linear, quadratic or exp (got '%s')", v);
    case O_JUMP_STATE:
        for (int i = 0; i <= HPT_JUMP_STATE_ZERO_M; i++)
            if (!strcmp(v, k_jump_states[i])) { p->sched.jump_state = i; return HPT_OK; }
        return hpt_fail(HPT_ERR_INVALID, "jump-state: keep, reset or zero-m (got '%s')", v);
    case O_JUMP_SEARCH: return set_int(opt, v, 1, 1 << 20, &p->sched.jump_search_batches);
    case O_JUMP_MIN_GAIN: return parse_float(opt, v, 0, 1e12, &p->sched.jump_min_gain);
    case O_MEMORY: return named(opt, hpt_parse_size(v, &p->budget_bytes[HPT_TIER_DEVICE]));
    case O_HOST_MEMORY: return named(opt, hpt_parse_size(v, &p->budget_bytes[HPT_TIER_HOST]));
    case O_DISK_MEMORY: return named(opt, hpt_parse_size(v, &p->budget_bytes[HPT_TIER_DISK]));
    case O_OFFLOAD_DIR: p->offload_dir = v; return HPT_OK;
    case O_DEVICE: return parse_device(v, &p->device);
    case O_PACK:
        if (!strcmp(v, "stream")) p->pack = 0;
        else if (!strcmp(v, "on")) p->pack = 1;
        else if (!strcmp(v, "off")) p->pack = 2;
        else return hpt_fail(HPT_ERR_INVALID, "pack: stream, on or off (got '%s')", v);
        return HPT_OK;
    case O_ZERO:
        HPT_CHECK(set_int(opt, v, 0, 3, &p->zero));
        /* stage 3 shards the parameters in the offload engine's homes: without --offload they
         * are the host's (on the CPU the same memory as the device's; docs/zero.md) */
        if (p->zero == 3 && !GIVEN(p, O_OFFLOAD)) HPT_CHECK(hpt_offload_parse("host", &p->offload));
        return HPT_OK;
    case O_LORA:
        if (!*v) return hpt_fail(HPT_ERR_INVALID, "lora: expected r=N,alpha=X,dropout=P[,rslora]");
        return hpt_lora_parse(v, &p->lora);
    case O_BASE_WEIGHTS:
        for (int i = 0; i <= HPT_BASE_NF4; i++)
            if (!strcmp(v, k_base_names[i])) { p->lora.base = i; return HPT_OK; }
        return hpt_fail(HPT_ERR_INVALID, "base-weights: f32, bf16, int8 or nf4 (got '%s')", v);
    case O_BASE_HOME:
        for (int i = 0; i < HPT_TIER_COUNT; i++)
            if (!strcmp(v, hpt_tier_name((hpt_tier)i))) { p->lora.home = i; return HPT_OK; }
        return hpt_fail(HPT_ERR_INVALID, "base-home: device, host or disk (got '%s')", v);
    case O_BASE_PREFETCH: {
        int on = 1;
        HPT_CHECK(set_int(opt, v, 0, 1, &on));
        p->lora.no_prefetch = !on;
        return HPT_OK;
    }
    case O_LORA_TARGETS:
        if (!*v) return hpt_fail(HPT_ERR_INVALID, "lora-targets: expected a list of layers (q,v)");
        if (strlen(v) >= sizeof p->lora.targets)
            return hpt_fail(HPT_ERR_INVALID, "lora-targets: at most %zu characters",
                            sizeof p->lora.targets - 1);
        snprintf(p->lora.targets, sizeof p->lora.targets, "%s", v);
        return HPT_OK;
    }
    return hpt_fail(HPT_ERR_INVALID, "unknown option %d", opt);
}

hpt_status hpt_plan_set(hpt_plan *p, const char *option, const char *value) {
    int opt = 0;
    while (opt < O_COUNT && strcmp(k_opts[opt].name, option ? option : "")) opt++;
    if (opt == O_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "%s: not an option of the plan", option ? option : "");
    if (k_opts[opt].takes_value && !value)
        return hpt_fail(HPT_ERR_INVALID, "%s needs a value", option);
    if (!k_opts[opt].takes_value && value)
        return hpt_fail(HPT_ERR_INVALID, "%s takes no value (got '%s')", option, value);
    hpt_plan q = *p; /* a failed option leaves the plan as it was */
    HPT_CHECK(set_option(&q, opt, value));
    q.given |= 1ull << opt;
    *p = q;
    return HPT_OK;
}

/* ---- the check ---------------------------------------------------------------------------- */

static int any_home_on(const hpt_offload_opts *o, hpt_tier t) {
    return o->params == t || o->grads == t || o->optim == t;
}

/* Loss scaling: its own fields, then how it meets the gradient homes, the fused update and the
 * schedule. */
static hpt_status check_loss_scale(const hpt_plan *p) {
    const hpt_loss_scale_opts *l = &p->loss_scale;
    if (l->mode == HPT_LOSS_SCALE_OFF) {
        if (p->offload.grad_home == HPT_GH_FP16)
            return hpt_fail(HPT_ERR_INVALID, "fp16 gradient homes need a loss scale (--loss-scale "
                            "dynamic or N): fp16 holds neither small gradients nor ones above 65504");
        return HPT_OK;
    }
    if (l->mode != HPT_LOSS_SCALE_STATIC && l->mode != HPT_LOSS_SCALE_DYNAMIC)
        return hpt_fail(HPT_ERR_INVALID, "unknown loss-scale mode %d", l->mode);
    if (!hpt_loss_scale_valid(l->init))
        return hpt_fail(HPT_ERR_INVALID, "loss scale %g: a power of two from 1 to 2^64",
                        (double)l->init);
    if (l->window < 1)
        return hpt_fail(HPT_ERR_INVALID, "loss-scale window %lld must be >= 1", (long long)l->window);
    if (p->offload.fused)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "loss scaling skips a step whose gradients overflow, "
                        "which --fused-update has already applied block by block");
    if (p->sched.kind == HPT_SCHEDULE_HYBRID)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "loss scaling does not run with the hybrid schedule");
    return HPT_OK;
}

hpt_status hpt_plan_check(const hpt_plan *p, const hpt_plan_env *env) {
    hpt_plan_env e = {.training = 1, .has_val = -1, .need_disk_dir = 0};
    if (env) e = *env;
    const hpt_offload_opts *of = &p->offload;
    int bits = p->adamw.state_bits == 0 ? 32 : p->adamw.state_bits;
    int mv_homes = hpt_optim_mv_homes(&p->adamw);
    /* what was given together (the command line's rules) */
    if (GIVEN(p, O_GRAD_HOME) && of->grad_home != HPT_GH_FP32 && !GIVEN(p, O_OFFLOAD))
        return hpt_fail(HPT_ERR_INVALID, "--grad-home %s needs --offload (the offload engine keeps "
                        "the blocks' gradient homes)", hpt_grad_home_name((hpt_grad_home)of->grad_home));
    if (GIVEN(p, O_LOSS_SCALE_INIT) && p->loss_scale.mode != HPT_LOSS_SCALE_DYNAMIC)
        return hpt_fail(HPT_ERR_INVALID, "--loss-scale-init is for --loss-scale dynamic (a fixed "
                        "scale is --loss-scale N)");
    if (p->adamw.state32_embeddings && bits != 8)
        return hpt_fail(HPT_ERR_INVALID, "--state-32bit-embeddings needs --state-bits 8");
    if (e.need_disk_dir && !p->offload_dir) {
        if (p->act.offload == HPT_OFFLOAD_DISK)
            return hpt_fail(HPT_ERR_INVALID, "--act-offload disk needs --offload-dir DIR");
        if (any_home_on(of, HPT_TIER_DISK))
            return hpt_fail(HPT_ERR_INVALID, "--offload to disk needs --offload-dir DIR");
    }
    /* LoRA (docs/lora.md): a frozen base in memory, on the CPU, one process, the full schedule */
    HPT_CHECK(hpt_lora_check(&p->lora));
    if (GIVEN(p, O_LORA_TARGETS) && p->lora.r < 1)
        return hpt_fail(HPT_ERR_INVALID, "--lora-targets needs --lora");
    if (p->lora.base && p->lora.r < 1)
        return hpt_fail(HPT_ERR_INVALID, "--base-weights stores a frozen base: it needs --lora");
    if (p->lora.home && p->lora.r < 1)
        return hpt_fail(HPT_ERR_INVALID, "--base-home homes a frozen base: it needs --lora");
    if (GIVEN(p, O_BASE_PREFETCH) && p->lora.r < 1)
        return hpt_fail(HPT_ERR_INVALID, "--base-prefetch reads a frozen base ahead: it needs --lora");
    if (p->lora.home == HPT_TIER_DISK && !p->offload_dir)
        return hpt_fail(HPT_ERR_INVALID, "--base-home disk needs --offload-dir DIR");
    if (p->lora.r > 0 && e.training) {
        /* LoRA on a GPU is built (every op and codec is in the CUDA table) but no GPU has run
         * it yet: HPT_UNVERIFIED_CUDA_LORA=1 lifts the refusal for scripts/gpu_check.sh's lora
         * stage, which compares it with the CPU (docs/cuda.md) */
        const char *gpu_lora = getenv("HPT_UNVERIFIED_CUDA_LORA");
        int gpu_ok = gpu_lora && !strcmp(gpu_lora, "1");
        const char *why = hpt_offload_active(of) || of->fused ? "--offload or --fused-update"
                          : p->zero >= 0 ? "--zero"
                          : p->sched.kind == HPT_SCHEDULE_HYBRID ? "--schedule hybrid"
                          : p->device && !gpu_ok ? "--device cuda (not yet run on a GPU; "
                                                   "HPT_UNVERIFIED_CUDA_LORA=1 lifts this for a check)"
                          : p->loss_scale.mode != HPT_LOSS_SCALE_OFF ? "--loss-scale" : NULL;
        if (why)
            return hpt_fail(HPT_ERR_UNSUPPORTED, "--lora runs on the CPU over a base in memory in "
                            "this version: not with %s (docs/lora.md)", why);
    }
    if (p->lora.r > 0 && p->lora.dropout > 0.0f && p->act.mlp_tile > 0)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--mlp-tile with LoRA dropout %g: the adapters' "
                        "dropout masks are drawn per call, not per tile (dropout=0 tiles)",
                        (double)p->lora.dropout);
    /* data parallel: stages 0-2 (docs/zero.md) */
    if (p->zero < -1 || p->zero > 3) return hpt_fail(HPT_ERR_INVALID, "--zero %d: expected 0 to 3", p->zero);
    /* in the engine's homes every stage takes bf16 weights (on disk too), 16-bit gradient homes
     * and loss scaling (docs/zero_engine.md); stage 3 only there */
    if (p->zero > 2 && !hpt_offload_active(&p->offload)) {
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--zero 3 (sharded optimizer state, gradients and "
                        "parameters) runs in the offload engine's homes, not with --offload none "
                        "(leave --offload out for host homes, or give host|disk; "
                        "docs/zero_engine.md); --zero 1 and 2 shard the in-memory optimizer "
                        "state and the gradients");
    }
    /* the engine's exact mode sums them apart in its fp32 gradient homes, through a slot
     * (engine_dist.c; --fused-update with --accum is refused below) */
    if (p->zero >= 0 && p->accum > 1 && hpt_offload_active(&p->offload) && !p->offload.fused &&
        (p->offload.grad_home != HPT_GH_FP32 || p->offload.grads == HPT_TIER_DEVICE))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--zero with --accum sums the micro-batches' "
                        "gradients apart: with --offload, in fp32 gradient homes off the device "
                        "(--offload grads=host|disk, no --grad-home fp16|bf16)");
    if (p->zero >= 0 && p->sched.kind == HPT_SCHEDULE_HYBRID)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--zero does not combine with the hybrid schedule "
                        "(its predict phases move the weights without gradients to reduce)");
    /* whether the device is here is hpt_device_ready's (estimates for a GPU run anywhere) */
    if (p->device < 0) return hpt_fail(HPT_ERR_INVALID, "--device: bad device %d", p->device);
    /* each family's own choices */
    HPT_CHECK(hpt_act_check(&p->act));
    HPT_CHECK(hpt_optim_check(&p->adamw));
    HPT_CHECK(hpt_offload_check(of));
    /* AdamW fp32 keeps the blocks' m and v in the engine's homes; any other state is optim.c's
     * buffers, on the device or the host */
    if (e.training && hpt_offload_active(of)) HPT_CHECK(hpt_offload_check_optim(of, mv_homes));
    /* examples (docs/packing.md): the hybrid schedule's checks run one sequence at a time */
    if (p->pack < 0 || p->pack > 2) return hpt_fail(HPT_ERR_INVALID, "--pack %d: stream, on or off", p->pack);
    if (p->pack == 1 && p->sched.kind == HPT_SCHEDULE_HYBRID)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--pack on does not combine with the hybrid schedule "
                        "yet (its checks run one packed row at a time); use --pack off");
    /* the step: accumulation, the fused update, loss scaling, the schedule (trainer.c) */
    if (p->accum < 0)
        return hpt_fail(HPT_ERR_INVALID, "accumulation (%d) must be >= 1", p->accum);
    if (of->fused && p->accum > 1)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--fused-update updates each block as its gradients "
                        "complete: it cannot accumulate micro-batches (--accum %d)", p->accum);
    HPT_CHECK(hpt_schedule_check(&p->sched));
    HPT_CHECK(check_loss_scale(p));
    if (p->sched.kind == HPT_SCHEDULE_HYBRID) {
        if (hpt_offload_active(of))
            return hpt_fail(HPT_ERR_UNSUPPORTED, "the hybrid schedule does not run with the offload "
                            "engine yet (--offload, --fused-update): its predict phase moves the "
                            "whole flat weights and gradients");
        if (e.training) HPT_CHECK(hpt_predictor_check_optim(p->sched.predictor, &p->adamw));
        if (e.has_val == 0 && p->sched.check_every > 0)
            return hpt_fail(HPT_ERR_INVALID, "predict-phase checks (check every %lld) need "
                            "validation data (--val)", (long long)p->sched.check_every);
    }
    return HPT_OK;
}

/* ---- the printer -------------------------------------------------------------------------- */

typedef struct {
    char *buf;
    size_t n, len;
    int cut;
} out_buf;

static void emit(out_buf *o, int opt, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void emit(out_buf *o, int opt, const char *fmt, ...) {
    char v[512] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(v, sizeof v, fmt, ap);
        va_end(ap);
    }
    size_t room = o->len < o->n ? o->n - o->len : 0;
    int w = snprintf(o->buf + o->len, room, "%s--%s%s%s", o->len ? " " : "", k_opts[opt].name,
                     fmt ? " " : "", v);
    if (w < 0 || (size_t)w >= room) {
        o->cut = 1;
        o->len = o->n ? o->n - 1 : 0;
    } else {
        o->len += (size_t)w;
    }
}

/* bytes as hpt_parse_size reads them back exactly: the unit (TiB ... KiB, TB ... KB, or none)
 * that divides them with the fewest digits */
static void exact_size(uint64_t bytes, char *out, size_t n) {
    static const struct { const char *unit; uint64_t size; } k[] = {
        {"TiB", 1ull << 40}, {"TB", 1000000000000ull}, {"GiB", 1ull << 30}, {"GB", 1000000000ull},
        {"MiB", 1ull << 20}, {"MB", 1000000ull}, {"KiB", 1ull << 10}, {"KB", 1000ull}};
    int digits = snprintf(out, n, "%llu", (unsigned long long)bytes);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        char q[24];
        int d = snprintf(q, sizeof q, "%llu", (unsigned long long)(bytes / k[i].size));
        if (bytes % k[i].size == 0 && d < digits) {
            digits = d;
            snprintf(out, n, "%s%s", q, k[i].unit);
        }
    }
}

hpt_status hpt_plan_print(const hpt_plan *p, char *buf, size_t n) {
    const hpt_plan d = hpt_plan_default_choices();
    out_buf o = {buf, n, 0, 0};
    if (n) buf[0] = '\0';
    char rb[32];
    /* activations */
    if (p->act.attention != d.act.attention) emit(&o, O_ATTENTION, "%s", hpt_attention_name(p->act.attention));
    if (p->act.recompute != d.act.recompute)
        emit(&o, O_RECOMPUTE, "%s", hpt_recompute_name(&p->act, rb, sizeof rb));
    if (p->act.offload != d.act.offload) emit(&o, O_ACT_OFFLOAD, "%s", hpt_act_offload_name(p->act.offload));
    if (p->act.compress != d.act.compress) emit(&o, O_ACT_COMPRESS, "%s", hpt_act_compress_name(p->act.compress));
    if (p->act.head_chunk != d.act.head_chunk) emit(&o, O_HEAD_CHUNK, "%d", p->act.head_chunk);
    if (p->act.mlp_tile != d.act.mlp_tile) emit(&o, O_MLP_TILE, "%d", p->act.mlp_tile);
    if (p->act.matmul != d.act.matmul) emit(&o, O_MATMUL, "%s", hpt_matmul_name(p->act.matmul));
    /* the optimizer: its kind first (it resets the settings the later options then change) */
    const hpt_adamw_opts kd = hpt_optim_defaults((hpt_optim_kind)p->adamw.optimizer);
    if (p->adamw.optimizer != d.adamw.optimizer)
        emit(&o, O_OPTIMIZER, "%s", hpt_optim_name((hpt_optim_kind)p->adamw.optimizer));
    if (p->adamw.state_bits != d.adamw.state_bits) emit(&o, O_STATE_BITS, "%d", p->adamw.state_bits);
    if (p->adamw.state32_embeddings) emit(&o, O_STATE32_EMB, NULL);
    if (p->adamw.weight_decay != kd.weight_decay)
        emit(&o, O_WEIGHT_DECAY, "%.9g", (double)p->adamw.weight_decay);
    /* the offload engine ("none" too when a gradient home was chosen: it needs --offload) */
    const hpt_offload_opts *of = &p->offload;
    if (of->params != HPT_TIER_DEVICE || of->grads != HPT_TIER_DEVICE ||
        of->optim != HPT_TIER_DEVICE)
        emit(&o, O_OFFLOAD, "params=%s,grads=%s,optim=%s", hpt_tier_name(of->params),
             hpt_tier_name(of->grads), hpt_tier_name(of->optim));
    else if (of->grad_home != HPT_GH_FP32 || p->zero == 3) /* --zero 3 alone: host homes */
        emit(&o, O_OFFLOAD, "none");
    if (of->max_active != d.offload.max_active) emit(&o, O_MAX_ACTIVE, "%d", of->max_active);
    if (of->prefetch != d.offload.prefetch) emit(&o, O_PREFETCH, "%d", of->prefetch);
    if (of->fused) emit(&o, O_FUSED, NULL);
    if (of->weights != d.offload.weights)
        emit(&o, O_WEIGHTS, "%s", hpt_block_weights_name((hpt_block_weights)of->weights));
    if (of->grad_home != d.offload.grad_home)
        emit(&o, O_GRAD_HOME, "%s", hpt_grad_home_name((hpt_grad_home)of->grad_home));
    if (of->embeddings != d.offload.embeddings)
        emit(&o, O_EMBEDDINGS, "%s", hpt_embeddings_name((hpt_embeddings)of->embeddings));
    if (of->vocab_chunk != d.offload.vocab_chunk) emit(&o, O_VOCAB_CHUNK, "%d", of->vocab_chunk);
    /* loss scaling, after --grad-home (which sets the mode unless --loss-scale follows) */
    const hpt_loss_scale_opts *ls = &p->loss_scale;
    int implied = of->grad_home == HPT_GH_FP16 ? HPT_LOSS_SCALE_DYNAMIC : HPT_LOSS_SCALE_OFF;
    if (ls->mode == HPT_LOSS_SCALE_STATIC) /* exact: the parser wants the power of two itself */
        emit(&o, O_LOSS_SCALE, "%.17g", (double)ls->init);
    else if (ls->mode != implied)
        emit(&o, O_LOSS_SCALE, "%s", ls->mode == HPT_LOSS_SCALE_DYNAMIC ? "dynamic" : "off");
    if (ls->mode != HPT_LOSS_SCALE_STATIC && ls->init != d.loss_scale.init)
        emit(&o, O_LOSS_SCALE_INIT, "%.17g", (double)ls->init);
    if (ls->window != d.loss_scale.window) emit(&o, O_LOSS_SCALE_WINDOW, "%lld", (long long)ls->window);
    if (p->accum != d.accum) emit(&o, O_ACCUM, "%d", p->accum);
    /* the schedule */
    const hpt_schedule_opts *s = &p->sched, *sd = &d.sched;
    if (s->kind != sd->kind) emit(&o, O_SCHEDULE, "%s", s->kind == HPT_SCHEDULE_HYBRID ? "hybrid" : "full");
    if (s->warmup_steps != sd->warmup_steps) emit(&o, O_WARMUP_STEPS, "%lld", (long long)s->warmup_steps);
    if (s->full_steps != sd->full_steps) emit(&o, O_FULL_STEPS, "%lld", (long long)s->full_steps);
    if (s->max_predict_steps != sd->max_predict_steps)
        emit(&o, O_MAX_PREDICT, "%lld", (long long)s->max_predict_steps);
    if (s->confidence != sd->confidence) emit(&o, O_CONFIDENCE, "%.9g", (double)s->confidence);
    if (s->correct_steps != sd->correct_steps) emit(&o, O_CORRECT_STEPS, "%lld", (long long)s->correct_steps);
    if (s->predictor != sd->predictor)
        emit(&o, O_PREDICTOR, "%s", hpt_predictor_name((hpt_predictor_kind)s->predictor));
    if (s->check_every != sd->check_every) emit(&o, O_CHECK_EVERY, "%lld", (long long)s->check_every);
    if (s->check_weights != sd->check_weights)
        emit(&o, O_CHECK_WEIGHTS, "%s", hpt_weights_name((hpt_weights)s->check_weights));
    if (s->band != sd->band) emit(&o, O_BAND, "%.9g", (double)s->band);
    if (s->rollback != sd->rollback) emit(&o, O_ROLLBACK, "%.9g", (double)s->rollback);
    if (s->jump_stride != sd->jump_stride) emit(&o, O_JUMP_STRIDE, "%lld", (long long)s->jump_stride);
    if (s->jump_snapshots != sd->jump_snapshots)
        emit(&o, O_JUMP_SNAPSHOTS, "%lld", (long long)s->jump_snapshots);
    if (s->jump_horizon != sd->jump_horizon) emit(&o, O_JUMP_HORIZON, "%lld", (long long)s->jump_horizon);
    if (s->jump_fit != sd->jump_fit && (unsigned)s->jump_fit <= HPT_JUMP_FIT_EXP)
        emit(&o, O_JUMP_FIT, "%s", k_jump_fits[s->jump_fit]);
    if (s->jump_state != sd->jump_state && (unsigned)s->jump_state <= HPT_JUMP_STATE_ZERO_M)
        emit(&o, O_JUMP_STATE, "%s", k_jump_states[s->jump_state]);
    if (s->jump_search_batches != sd->jump_search_batches)
        emit(&o, O_JUMP_SEARCH, "%d", s->jump_search_batches);
    if (s->jump_min_gain != sd->jump_min_gain) emit(&o, O_JUMP_MIN_GAIN, "%.9g", (double)s->jump_min_gain);
    if (p->lora.r > 0) {
        char lb[96];
        hpt_lora_name(&p->lora, lb, sizeof lb);
        emit(&o, O_LORA, "%s", lb);
    }
    if (p->lora.targets[0]) emit(&o, O_LORA_TARGETS, "%s", p->lora.targets);
    if (p->lora.base > 0 && p->lora.base <= HPT_BASE_NF4)
        emit(&o, O_BASE_WEIGHTS, "%s", k_base_names[p->lora.base]);
    if (p->lora.home > 0 && p->lora.home < HPT_TIER_COUNT)
        emit(&o, O_BASE_HOME, "%s", hpt_tier_name((hpt_tier)p->lora.home));
    if (p->lora.no_prefetch) emit(&o, O_BASE_PREFETCH, "0");
    /* budgets, exactly: in the unit that divides them with the fewest digits (2GB, 40MiB) */
    static const int k_budget_opt[HPT_TIER_COUNT] = {O_MEMORY, O_HOST_MEMORY, O_DISK_MEMORY};
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        if (p->budget_bytes[t]) {
            char size[32];
            exact_size(p->budget_bytes[t], size, sizeof size);
            emit(&o, k_budget_opt[t], "%s", size);
        }
    if (p->offload_dir) emit(&o, O_OFFLOAD_DIR, "%s", p->offload_dir);
    if (p->device) emit(&o, O_DEVICE, "cuda:%d", p->device - 1);
    if (p->zero != d.zero) emit(&o, O_ZERO, "%d", p->zero);
    if (p->pack != d.pack && (unsigned)p->pack <= 2)
        emit(&o, O_PACK, "%s", p->pack == 1 ? "on" : "off");
    if (o.cut) return hpt_fail(HPT_ERR_INVALID, "the plan's flags need more than %zu bytes", n);
    return HPT_OK;
}

/* The next space-separated word of *s, NUL-terminated in place; NULL at the end. */
static char *next_word(char **s) {
    char *w = *s + strspn(*s, " ");
    if (!*w) return NULL;
    char *e = w + strcspn(w, " ");
    *s = *e ? e + 1 : e;
    *e = '\0';
    return w;
}

hpt_status hpt_plan_parse_flags(hpt_plan *p, char *flags) {
    char empty[1] = "", *s = flags ? flags : empty, *word;
    while ((word = next_word(&s))) {
        if (strncmp(word, "--", 2) != 0)
            return hpt_fail(HPT_ERR_INVALID, "'%.64s' in the plan's flags is not an option", word);
        int opt = 0, takes = 0;
        const char *name;
        while ((name = hpt_plan_option_name(opt, &takes)) && strcmp(name, word + 2)) opt++;
        if (!name) return hpt_fail(HPT_ERR_INVALID, "%.64s in the plan's flags is not an option", word);
        char *v = takes ? next_word(&s) : NULL;
        if (takes && !v) return hpt_fail(HPT_ERR_INVALID, "%s in the plan's flags has no value", word);
        HPT_CHECK(hpt_plan_set(p, name, v));
    }
    return HPT_OK;
}

/* ---- budgets per tier --------------------------------------------------------------------- */

hpt_status hpt_plan_check_tiers(const hpt_plan *p, const hpt_estimate *e) {
    static const int k_budget_opt[HPT_TIER_COUNT] = {O_MEMORY, O_HOST_MEMORY, O_DISK_MEMORY};
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        uint64_t b = p->budget_bytes[t];
        uint64_t peak = e->peak_bytes[t] > e->predict_peak_bytes[t] ? e->peak_bytes[t]
                                                                     : e->predict_peak_bytes[t];
        if (b && peak > b)
            return hpt_fail(HPT_ERR_OOM, "the %s tier's estimated peak of %llu bytes passes "
                            "--%s %llu by %llu bytes", hpt_tier_name((hpt_tier)t),
                            (unsigned long long)peak, k_opts[k_budget_opt[t]].name,
                            (unsigned long long)b, (unsigned long long)(peak - b));
    }
    return HPT_OK;
}
