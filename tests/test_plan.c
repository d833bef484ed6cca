/* test_plan.c: the plan (src/plan/plan_opts.c). Every rule of hpt_plan_check refuses the plan
 * that breaks it, with a message naming the option; hpt_plan_set refuses bad text and leaves
 * the plan as it was; hpt_plan_print's flags parse back into the same plan, for many random
 * plans; each tier's budget is compared with the estimate's peak on that tier; the trainer
 * takes the device budget from the plan. */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

static hpt_plan P(void) { return hpt_plan_default_choices(); }

static void set(hpt_plan *p, const char *opt, const char *val) {
    CHECK_OK(hpt_plan_set(p, opt, val));
}

/* p must be refused with status want and a message holding each needle (NULL-terminated);
 * the default plan under the same env must pass (so p's change is the cause). */
static void refused_(int line, const hpt_plan *p, const hpt_plan_env *env, hpt_status want,
                     const char *n1, const char *n2) {
    hpt_plan d = P();
    CHECK_MSG(hpt_plan_check(&d, env) == HPT_OK, "line %d: default plan refused: %s", line,
              hpt_last_error());
    hpt_status s = hpt_plan_check(p, env);
    const char *m = hpt_last_error();
    CHECK_MSG(s == want, "line %d: status %s, expected %s (%s)", line, hpt_status_str(s),
              hpt_status_str(want), m);
    CHECK_MSG(s != HPT_OK && strstr(m, n1), "line %d: '%s' not in '%s'", line, n1, m);
    CHECK_MSG(s != HPT_OK && (!n2 || strstr(m, n2)), "line %d: '%s' not in '%s'", line,
              n2 ? n2 : "", m);
    CHECK_MSG(strchr(m, '\n') == NULL, "line %d: message has a newline", line);
}
#define REFUSED(p, env, want, n1, n2) refused_(__LINE__, p, env, want, n1, n2)

static void test_rules(void) {
    const hpt_plan_env train = {.training = 1, .has_val = 1, .need_disk_dir = 0};
    const hpt_plan_env cli = {.training = 1, .has_val = 0, .need_disk_dir = 1};
    const hpt_plan_env fwd = {.training = 0, .has_val = -1, .need_disk_dir = 0};
    hpt_plan p;
    /* what was given together (the command line's rules) */
    p = P(); set(&p, "grad-home", "bf16");
    REFUSED(&p, &train, HPT_ERR_INVALID, "--grad-home bf16", "needs --offload");
    set(&p, "offload", "none"); /* given: the engine with device homes */
    CHECK_OK(hpt_plan_check(&p, &train));
    p = P(); set(&p, "loss-scale-init", "1024");
    REFUSED(&p, &train, HPT_ERR_INVALID, "--loss-scale-init", "--loss-scale dynamic");
    set(&p, "loss-scale", "dynamic");
    CHECK_OK(hpt_plan_check(&p, &train));
    CHECK(p.loss_scale.init == 1024.0f && p.loss_scale.mode == HPT_LOSS_SCALE_DYNAMIC);
    p = P(); set(&p, "state-32bit-embeddings", NULL);
    REFUSED(&p, &train, HPT_ERR_INVALID, "--state-32bit-embeddings", "--state-bits 8");
    p = P(); set(&p, "act-offload", "disk");
    REFUSED(&p, &cli, HPT_ERR_INVALID, "--act-offload disk", "--offload-dir");
    CHECK_OK(hpt_plan_check(&p, &train)); /* a library caller sets the directory on mem */
    set(&p, "offload-dir", "/tmp");
    CHECK_OK(hpt_plan_check(&p, &cli));
    p = P(); set(&p, "offload", "params=disk");
    REFUSED(&p, &cli, HPT_ERR_INVALID, "--offload", "--offload-dir");
    /* the activation arena's choices (gpt2.c's check_act_opts) */
    p = P(); p.act.head_chunk = -1;
    REFUSED(&p, &train, HPT_ERR_INVALID, "head chunk", NULL);
    p = P(); p.act.attention = (hpt_attention)7;
    REFUSED(&p, &train, HPT_ERR_INVALID, "attention", NULL);
    p = P(); p.act.recompute = (hpt_recompute)9;
    REFUSED(&p, &train, HPT_ERR_INVALID, "recompute", NULL);
    p = P(); p.act.recompute = HPT_RECOMPUTE_EVERY; p.act.every = 0;
    REFUSED(&p, &train, HPT_ERR_INVALID, "recompute every:0", NULL);
    p = P(); p.act.offload = (hpt_act_offload)5;
    REFUSED(&p, &train, HPT_ERR_INVALID, "activation offload", NULL);
    p = P(); p.act.compress = (hpt_act_compress)5;
    REFUSED(&p, &train, HPT_ERR_INVALID, "activation compression", NULL);
    /* every:N and full store their kept block inputs (docs/activations.md) */
    p = P(); set(&p, "act-compress", "int8"); set(&p, "recompute", "full");
    CHECK_OK(hpt_plan_check(&p, &train));
    p = P(); set(&p, "act-offload", "host"); set(&p, "recompute", "every:2");
    CHECK_OK(hpt_plan_check(&p, &train));
    /* the optimizer */
    p = P(); p.adamw.optimizer = 9;
    REFUSED(&p, &train, HPT_ERR_INVALID, "optimizer 9", NULL);
    p = P(); p.adamw.state_bits = 4;
    REFUSED(&p, &train, HPT_ERR_INVALID, "4-bit state", NULL);
    /* the offload engine (engine.c's hpt_offload_check, eng_check_optim) */
    p = P(); p.offload.grads = (hpt_tier)7;
    REFUSED(&p, &train, HPT_ERR_INVALID, "offload", "tier");
    p = P(); p.offload.weights = 9;
    REFUSED(&p, &train, HPT_ERR_INVALID, "weights", NULL);
    p = P(); set(&p, "weights", "bf16-kahan"); set(&p, "offload", "params=disk");
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "bf16-kahan", "--offload params=disk");
    p = P(); p.offload.grad_home = 9;
    REFUSED(&p, &train, HPT_ERR_INVALID, "gradient home", NULL);
    p = P(); set(&p, "offload", "host"); set(&p, "grad-home", "bf16"); set(&p, "fused-update", NULL);
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "--grad-home bf16", "--fused-update");
    p = P(); p.offload.embeddings = 9;
    REFUSED(&p, &train, HPT_ERR_INVALID, "embeddings", NULL);
    p = P(); set(&p, "fused-update", NULL); p.offload.vocab_chunk = -1;
    REFUSED(&p, &train, HPT_ERR_INVALID, "vocab chunk", NULL);
    p = P(); set(&p, "embeddings", "chunked");
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "--embeddings chunked", "--fused-update");
    p = P(); set(&p, "embeddings", "bf16"); set(&p, "fused-update", NULL);
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "--embeddings bf16", "--weights bf16-sr");
    p = P(); set(&p, "offload", "host"); set(&p, "max-active-layers", "2"); set(&p, "prefetch", "2");
    REFUSED(&p, &train, HPT_ERR_INVALID, "--max-active-layers 2", "--prefetch 2");
    p = P(); set(&p, "offload", "optim=disk"); set(&p, "optimizer", "lion");
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "--offload", "optim=disk");
    CHECK_OK(hpt_plan_check(&p, &fwd)); /* forward only: no optimizer state */
    set(&p, "optimizer", "adamw");
    CHECK_OK(hpt_plan_check(&p, &train));
    /* the step: accumulation, the fused update (trainer.c) */
    p = P(); p.accum = -1;
    REFUSED(&p, &train, HPT_ERR_INVALID, "accumulation (-1)", NULL);
    p = P(); set(&p, "fused-update", NULL); set(&p, "accum", "2");
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "--fused-update", "--accum 2");
    /* the schedule (schedule.c's hpt_schedule_check) */
    p = P(); p.sched.kind = 5;
    REFUSED(&p, &train, HPT_ERR_INVALID, "schedule 5", NULL);
    p = P(); set(&p, "schedule", "hybrid"); p.sched.full_steps = 0;
    REFUSED(&p, &train, HPT_ERR_INVALID, "full (0)", NULL);
    p = P(); set(&p, "schedule", "hybrid"); p.sched.confidence = 2.0f;
    REFUSED(&p, &train, HPT_ERR_INVALID, "confidence", NULL);
    p = P(); set(&p, "schedule", "hybrid"); set(&p, "band", "0.5"); set(&p, "rollback-bound", "0.1");
    REFUSED(&p, &train, HPT_ERR_INVALID, "band", "rollback bound");
    p = P(); set(&p, "schedule", "hybrid"); p.sched.fit_decay = 1.0f;
    REFUSED(&p, &train, HPT_ERR_INVALID, "fit decay", NULL);
    p = P(); set(&p, "schedule", "hybrid"); p.sched.predictor = 9;
    REFUSED(&p, &train, HPT_ERR_INVALID, "predictor", NULL);
    p = P(); set(&p, "schedule", "hybrid"); p.sched.check_weights = 9;
    REFUSED(&p, &train, HPT_ERR_INVALID, "check weights", NULL);
    /* loss scaling (trainer.c's check_loss_scale) */
    p = P(); set(&p, "offload", "host"); set(&p, "grad-home", "fp16");
    CHECK(p.loss_scale.mode == HPT_LOSS_SCALE_DYNAMIC); /* fp16 homes turn it on */
    CHECK_OK(hpt_plan_check(&p, &train));
    set(&p, "loss-scale", "off");
    REFUSED(&p, &train, HPT_ERR_INVALID, "fp16 gradient homes", "--loss-scale");
    p = P(); p.loss_scale.mode = 9;
    REFUSED(&p, &train, HPT_ERR_INVALID, "loss-scale mode", NULL);
    p = P(); set(&p, "loss-scale", "dynamic"); p.loss_scale.init = 1000.0f;
    REFUSED(&p, &train, HPT_ERR_INVALID, "loss scale 1000", "power of two");
    p = P(); set(&p, "loss-scale", "dynamic"); p.loss_scale.window = 0;
    REFUSED(&p, &train, HPT_ERR_INVALID, "loss-scale window", NULL);
    p = P(); set(&p, "loss-scale", "256"); set(&p, "offload", "host"); set(&p, "fused-update", NULL);
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "loss scaling", "--fused-update");
    p = P(); set(&p, "loss-scale", "dynamic"); set(&p, "schedule", "hybrid");
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "loss scaling", "hybrid schedule");
    /* the hybrid schedule with the rest */
    p = P(); set(&p, "schedule", "hybrid"); set(&p, "offload", "host");
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "hybrid schedule", "--offload");
    p = P(); set(&p, "schedule", "hybrid"); set(&p, "state-bits", "8");
    REFUSED(&p, &train, HPT_ERR_UNSUPPORTED, "--state-bits 32", "--predictor linear");
    set(&p, "predictor", "linear");
    CHECK_OK(hpt_plan_check(&p, &train));
    p = P(); set(&p, "schedule", "hybrid"); set(&p, "check-every", "2");
    REFUSED(&p, &cli, HPT_ERR_INVALID, "check every 2", "--val");
    CHECK_OK(hpt_plan_check(&p, &train)); /* validation data given */
    CHECK_OK(hpt_plan_check(&p, &fwd));   /* not known: the estimate's */
    CHECK_OK(hpt_plan_check(&p, NULL));
}

/* hpt_plan_set must refuse text, say why starting with the option's name, change nothing. */
static void bad_(int line, const char *opt, const char *val, const char *start) {
    hpt_plan p = P(), q = p;
    hpt_status s = hpt_plan_set(&p, opt, val);
    const char *m = hpt_last_error();
    CHECK_MSG(s == HPT_ERR_INVALID, "line %d: %s %s: %s", line, opt, val ? val : "", hpt_status_str(s));
    CHECK_MSG(!strncmp(m, start, strlen(start)), "line %d: '%s' does not start with '%s'", line, m, start);
    CHECK_MSG(!memcmp(&p, &q, sizeof p), "line %d: a refused option changed the plan", line);
}
#define BAD(opt, val, start) bad_(__LINE__, opt, val, start)

static void test_parse_errors(void) {
    BAD("bogus", "1", "bogus: not an option");
    BAD("recompute", NULL, "recompute needs a value");
    BAD("fused-update", "1", "fused-update takes no value");
    BAD("accum", "0", "accum expects an integer in [1, 1048576], got '0'");
    BAD("accum", "2x", "accum expects");
    BAD("head-chunk", "-1", "head-chunk expects");
    BAD("max-active-layers", "0", "max-active-layers expects");
    BAD("prefetch", "", "prefetch expects");
    BAD("vocab-chunk", "x", "vocab-chunk expects");
    BAD("state-bits", "4", "state-bits: 32 or 8 (got '4')");
    BAD("attention", "fast", "attention: ");
    BAD("recompute", "every:0", "recompute: ");
    BAD("act-offload", "gpu", "act-offload: ");
    BAD("act-compress", "int4", "act-compress: ");
    BAD("optimizer", "adam", "optimizer: ");
    BAD("weight-decay", "11", "weight-decay expects a number");
    BAD("offload", "params=gpu", "offload: ");
    BAD("weights", "bf16", "weights: ");
    BAD("grad-home", "fp8", "grad-home: ");
    BAD("embeddings", "half", "embeddings: ");
    BAD("loss-scale", "1000", "loss-scale: ");
    BAD("loss-scale-init", "0.5", "loss-scale-init expects");
    BAD("loss-scale-window", "0", "loss-scale-window expects");
    BAD("schedule", "half", "schedule: full or hybrid (got 'half')");
    BAD("full-steps", "0", "full-steps expects");
    BAD("confidence", "1.5", "confidence expects");
    BAD("predictor", "oracle", "predictor: ");
    BAD("device", "gpu", "device: ");
    BAD("device", "cuda:x", "device: ");
    BAD("check-weights", "int4", "check-weights: ");
    BAD("band", "0", "band expects");
    BAD("memory", "12XB", "memory: ");
    BAD("host-memory", "lots", "host-memory: ");
    BAD("disk-memory", "1.5XB", "disk-memory: ");
    BAD("lora", "rank=4", "lora: ");
    BAD("lora", "r=0", "lora: ");
    BAD("lora", "dropout=1", "lora: ");
    BAD("base-weights", "nf8", "base-weights: f32, bf16, int8 or nf4 (got 'nf8')");
    /* every option the table lists is one hpt_plan_set knows */
    int takes = 0, n = 0;
    for (const char *name; (name = hpt_plan_option_name(n, &takes)) != NULL; n++) {
        hpt_plan p = P();
        hpt_status s = hpt_plan_set(&p, name, takes ? "" : NULL);
        /* an empty value is refused for a value-taking option (offload-dir takes any text,
         * offload's spec reads "" as no change, as hpt_offload_parse always has) */
        if (takes && strcmp(name, "offload-dir") && strcmp(name, "offload")) CHECK_MSG(s == HPT_ERR_INVALID, "%s ''", name);
        if (!takes) CHECK_MSG(s == HPT_OK && (p.given >> n & 1u), "%s", name);
    }
    CHECK(n >= 36 && n <= 64);
}

/* ---- round trip -------------------------------------------------------------------------- */

static int plans_equal(const hpt_plan *a, const hpt_plan *b) {
    const hpt_act_opts *x = &a->act, *y = &b->act;
    if (x->attention != y->attention || x->recompute != y->recompute || x->every != y->every ||
        x->offload != y->offload || x->compress != y->compress || x->head_chunk != y->head_chunk)
        return 0;
    const hpt_adamw_opts *m = &a->adamw, *n = &b->adamw;
    if (m->lr != n->lr || m->beta1 != n->beta1 || m->beta2 != n->beta2 || m->eps != n->eps ||
        m->weight_decay != n->weight_decay || m->decay_all != n->decay_all ||
        m->optimizer != n->optimizer || m->state_bits != n->state_bits ||
        m->state32_embeddings != n->state32_embeddings)
        return 0;
    const hpt_offload_opts *f = &a->offload, *g = &b->offload;
    if (f->params != g->params || f->grads != g->grads || f->optim != g->optim ||
        f->max_active != g->max_active || f->prefetch != g->prefetch || f->fused != g->fused ||
        f->weights != g->weights || f->grad_home != g->grad_home ||
        f->embeddings != g->embeddings || f->vocab_chunk != g->vocab_chunk)
        return 0;
    if (a->loss_scale.mode != b->loss_scale.mode || a->loss_scale.init != b->loss_scale.init ||
        a->loss_scale.window != b->loss_scale.window)
        return 0;
    const hpt_schedule_opts *s = &a->sched, *t = &b->sched;
    if (s->kind != t->kind || s->warmup_steps != t->warmup_steps ||
        s->full_steps != t->full_steps || s->max_predict_steps != t->max_predict_steps ||
        s->confidence != t->confidence || s->correct_steps != t->correct_steps ||
        s->predictor != t->predictor || s->check_every != t->check_every ||
        s->check_weights != t->check_weights || s->band != t->band ||
        s->rollback != t->rollback || s->fit_decay != t->fit_decay)
        return 0;
    if (a->accum != b->accum) return 0;
    for (int k = 0; k < HPT_TIER_COUNT; k++)
        if (a->budget_bytes[k] != b->budget_bytes[k]) return 0;
    if (a->device != b->device || a->zero != b->zero || a->pack != b->pack) return 0;
    if (a->lora.r != b->lora.r || a->lora.alpha != b->lora.alpha ||
        a->lora.dropout != b->lora.dropout || a->lora.rslora != b->lora.rslora ||
        a->lora.base != b->lora.base ||
        strcmp(a->lora.targets, b->lora.targets))
        return 0;
    if (!a->offload_dir != !b->offload_dir) return 0;
    return !a->offload_dir || !strcmp(a->offload_dir, b->offload_dir);
}

static uint64_t g_rng = 88172645463325252ull;
static unsigned rnd(unsigned n) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (unsigned)(g_rng % n);
}

/* A value for option name (valid for hpt_plan_set), into buf. */
static const char *random_value(const char *name, char *buf, size_t n) {
#define PICK(...) do { static const char *const v_[] = {__VA_ARGS__}; \
    return v_[rnd(sizeof v_ / sizeof v_[0])]; } while (0)
    if (!strcmp(name, "attention")) PICK("flash", "plain");
    if (!strcmp(name, "recompute")) {
        int k = (int)rnd(4);
        if (k == 3) { snprintf(buf, n, "every:%u", 1 + rnd(6)); return buf; }
        PICK("none", "selective", "full");
    }
    if (!strcmp(name, "act-offload")) PICK("none", "host", "disk");
    if (!strcmp(name, "act-compress")) PICK("none", "int8", "bf16");
    if (!strcmp(name, "matmul")) PICK("fp32", "bf16");
    if (!strcmp(name, "optimizer")) PICK("adamw", "lion", "adam-mini", "sgd");
    if (!strcmp(name, "state-bits")) PICK("32", "8");
    if (!strcmp(name, "weight-decay")) PICK("0", "0.1", "0.05", "0.3333", "1e-3");
    if (!strcmp(name, "offload"))
        PICK("none", "host", "disk", "params=host", "grads=disk,optim=host", "params=disk,grads=host");
    if (!strcmp(name, "weights")) PICK("fp32", "bf16-sr", "bf16-kahan");
    if (!strcmp(name, "grad-home")) PICK("fp32", "bf16", "fp16");
    if (!strcmp(name, "embeddings")) PICK("full", "chunked", "bf16");
    if (!strcmp(name, "loss-scale")) PICK("off", "dynamic", "1", "256", "65536", "1099511627776");
    if (!strcmp(name, "loss-scale-init")) PICK("1024", "65536", "2", "4294967296");
    if (!strcmp(name, "schedule")) PICK("full", "hybrid");
    if (!strcmp(name, "predictor")) PICK("adam", "linear", "jump");
    if (!strcmp(name, "check-weights")) PICK("fp32", "int8");
    if (!strcmp(name, "jump-fit")) PICK("linear", "quadratic", "exp");
    if (!strcmp(name, "jump-state")) PICK("keep", "reset", "zero-m");
    if (!strcmp(name, "jump-min-gain")) PICK("0", "2", "0.5", "12.25");
    if (!strcmp(name, "jump-snapshots")) { snprintf(buf, n, "%u", 2 + rnd(63)); return buf; }
    if (!strcmp(name, "confidence")) PICK("0", "0.25", "0.7", "1");
    if (!strcmp(name, "band") || !strcmp(name, "rollback-bound")) PICK("0.01", "0.05", "0.2", "0.123456");
    if (!strcmp(name, "memory") || !strcmp(name, "host-memory") || !strcmp(name, "disk-memory"))
        PICK("512MB", "4GB", "1.5GiB", "123456");
    if (!strcmp(name, "offload-dir")) PICK("/tmp/x", "runs/offload");
    if (!strcmp(name, "device")) PICK("cpu", "cuda", "cuda:0", "cuda:3");
    if (!strcmp(name, "zero")) PICK("0", "1", "2", "3");
    if (!strcmp(name, "lora")) PICK("r=8,alpha=16", "r=4", "r=16,alpha=32,dropout=0.05,rslora", "alpha=2.5");
    if (!strcmp(name, "lora-targets")) PICK("q,v", "c_attn", "q,k,v,o,gate,up,down");
    if (!strcmp(name, "base-weights")) PICK("f32", "bf16", "int8", "nf4");
    if (!strcmp(name, "base-home")) PICK("device", "host", "disk");
    if (!strcmp(name, "base-prefetch")) PICK("0", "1");
    if (!strcmp(name, "pack")) PICK("stream", "on", "off");
    /* the rest are integers: accum, head-chunk, K, P, vocab chunk, schedule lengths */
    unsigned lo = !strcmp(name, "max-active-layers") || !strcmp(name, "accum") ||
                  !strcmp(name, "full-steps") || !strcmp(name, "max-predict-steps") ||
                  !strcmp(name, "correct-steps") || !strcmp(name, "loss-scale-window") ||
                  !strcmp(name, "jump-stride") || !strcmp(name, "jump-horizon") ||
                  !strcmp(name, "jump-search-batches");
    snprintf(buf, n, "%u", lo + rnd(!strcmp(name, "vocab-chunk") ? 4096 : 100));
    return buf;
#undef PICK
}

static void test_round_trip(void) {
    char text[4096];
    hpt_plan d = P();
    CHECK_OK(hpt_plan_print(&d, text, sizeof text));
    CHECK(text[0] == '\0');
    hpt_plan p = P();
    set(&p, "recompute", "selective");
    set(&p, "fused-update", NULL);
    CHECK_OK(hpt_plan_print(&p, text, sizeof text));
    CHECK_MSG(!strcmp(text, "--recompute selective --fused-update"), "%s", text);
    CHECK(hpt_plan_print(&p, text, 12) == HPT_ERR_INVALID && strlen(text) < 12);
    int n_opts = 0;
    while (hpt_plan_option_name(n_opts, NULL)) n_opts++;
    int n_diff = 0;
    for (int iter = 0; iter < 2000; iter++) {
        /* a random plan: a random set of options, each once, in a random order */
        p = P();
        int order[64];
        for (int i = 0; i < n_opts; i++) order[i] = i;
        for (int i = n_opts - 1; i > 0; i--) {
            int j = (int)rnd((unsigned)i + 1), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        int k = (int)rnd((unsigned)n_opts + 1);
        char vb[64];
        for (int i = 0; i < k; i++) {
            int takes;
            const char *name = hpt_plan_option_name(order[i], &takes);
            CHECK_OK(hpt_plan_set(&p, name, takes ? random_value(name, vb, sizeof vb) : NULL));
        }
        CHECK_OK(hpt_plan_print(&p, text, sizeof text));
        /* parse the flags back */
        char copy[4096];
        snprintf(copy, sizeof copy, "%s", text);
        hpt_plan q = P();
        char *save = NULL;
        for (char *tok = strtok_r(copy, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            CHECK_MSG(!strncmp(tok, "--", 2), "%s in %s", tok, text);
            int takes = 0, i = 0;
            const char *name;
            while ((name = hpt_plan_option_name(i, &takes)) && strcmp(name, tok + 2)) i++;
            CHECK_MSG(name != NULL, "%s in %s", tok, text);
            if (!name) break;
            const char *val = takes ? strtok_r(NULL, " ", &save) : NULL;
            CHECK_OK(hpt_plan_set(&q, name, val));
        }
        CHECK_MSG(plans_equal(&p, &q), "plan %d: %s", iter, text);
        hpt_plan r = P(); /* the library's reader agrees with the one above */
        char words[4096];
        snprintf(words, sizeof words, "%s", text);
        CHECK_OK(hpt_plan_parse_flags(&r, words));
        CHECK_MSG(plans_equal(&p, &r), "plan %d (hpt_plan_parse_flags): %s", iter, text);
        n_diff += !plans_equal(&p, &d);
    }
    CHECK(n_diff > 1900); /* the generator really makes plans other than the default */
    /* what the reader refuses, naming the word */
    static const char *const bad[] = {"--no-such-option", "recompute selective", "--recompute",
                                      "--fused-update --accum", "--recompute sometimes"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        hpt_plan r = P();
        char words[64];
        snprintf(words, sizeof words, "%s", bad[i]);
        CHECK_MSG(hpt_plan_parse_flags(&r, words) == HPT_ERR_INVALID, "%s", bad[i]);
    }
    hpt_plan r = P();
    char blank[] = "  ";
    CHECK_OK(hpt_plan_parse_flags(&r, blank));
    CHECK(plans_equal(&r, &d));
}

/* ---- budgets per tier ---------------------------------------------------------------------- */

static void test_budgets(void) {
    const char *shape = "gpt2:L=2,C=32,NH=4,V=64,T=32";
    hpt_plan_opts po = hpt_plan_defaults();
    CHECK_OK(hpt_model_config_parse(shape, &po.cfg));
    po.B = 2;
    po.T = 16;
    set(&po.plan, "offload", "params=host,grads=disk,optim=host");
    set(&po.plan, "act-offload", "host");
    hpt_estimate e;
    CHECK_OK(hpt_plan_estimate(&po, &e));
    CHECK(e.peak_bytes[HPT_TIER_HOST] > 0 && e.peak_bytes[HPT_TIER_DISK] > 0);
    CHECK_OK(hpt_plan_check_tiers(&po.plan, &e)); /* no budgets */
    static const char *const flag[HPT_TIER_COUNT] = {"--memory", "--host-memory", "--disk-memory"};
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        hpt_plan p = po.plan;
        p.budget_bytes[t] = e.peak_bytes[t];
        CHECK_OK(hpt_plan_check_tiers(&p, &e)); /* exactly the peak fits */
        p.budget_bytes[t] = e.peak_bytes[t] - 1;
        CHECK_STATUS(hpt_plan_check_tiers(&p, &e), HPT_ERR_OOM);
        CHECK_MSG(strstr(hpt_last_error(), flag[t]) &&
                  strstr(hpt_last_error(), hpt_tier_name((hpt_tier)t)) &&
                  strstr(hpt_last_error(), "by 1 bytes"), "%s", hpt_last_error());
    }
    /* parsed budgets: the plan holds them in bytes */
    hpt_plan p = P();
    set(&p, "host-memory", "1.5GiB");
    set(&p, "disk-memory", "2GB");
    CHECK(p.budget_bytes[HPT_TIER_HOST] == 1610612736ull && p.budget_bytes[HPT_TIER_DISK] == 2000000000ull);

    /* the trainer takes the device budget from the plan (mem has none of its own) and sets the
     * plan's budgets on mem */
    char train[512];
    t_make_shards(3, 32, 8, 4, 4000, 0, train, NULL); /* tokens < 60 < V */
    hpt_train_opts o = hpt_train_defaults();
    o.model = shape; o.data = train; o.B = 2; o.T = 16; o.steps = 1;
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(shape, &cfg));
    hpt_plan_opts to = hpt_train_plan_opts(&o, &cfg);
    CHECK_OK(hpt_plan_estimate(&to, &e));
    uint64_t peak = e.peak_bytes[HPT_TIER_DEVICE];
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    o.plan.budget_bytes[HPT_TIER_DEVICE] = peak - 1;
    o.plan.budget_bytes[HPT_TIER_HOST] = 1u << 30;
    hpt_trainer *tr = NULL;
    CHECK_STATUS(hpt_trainer_create(mem, &o, &tr), HPT_ERR_OOM);
    CHECK(strstr(hpt_last_error(), "budget") != NULL);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    CHECK(st.n_allocs == 0);
    CHECK(st.budget_bytes[HPT_TIER_DEVICE] == peak - 1 && st.budget_bytes[HPT_TIER_HOST] == 1u << 30);
    hpt_mem_destroy(mem);
    CHECK_OK(hpt_mem_create(&mem));
    o.plan.budget_bytes[HPT_TIER_DEVICE] = peak;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    hpt_train_progress pr;
    if (tr) CHECK_OK(hpt_trainer_step(tr, &pr));
    hpt_mem_get_stats(mem, &st);
    CHECK(st.peak_bytes[HPT_TIER_DEVICE] <= peak && st.n_refused == 0);
    hpt_trainer_free(tr);
    hpt_mem_destroy(mem);
    /* and refuses a plan the check refuses, before allocating */
    CHECK_OK(hpt_mem_create(&mem));
    o.plan.budget_bytes[HPT_TIER_DEVICE] = 0;
    set(&o.plan, "fused-update", NULL);
    set(&o.plan, "accum", "2");
    CHECK_STATUS(hpt_trainer_create(mem, &o, &tr), HPT_ERR_UNSUPPORTED);
    CHECK(strstr(hpt_last_error(), "--accum 2") != NULL);
    hpt_mem_get_stats(mem, &st);
    CHECK(st.n_allocs == 0);
    hpt_mem_destroy(mem);
}

int main(void) {
    test_rules();
    test_parse_errors();
    test_round_trip();
    test_budgets();
    return t_done("test_plan");
}
