/* choices.c: the plan's choices one part at a time: for each option struct of hptrain.h
 * (activations, optimizer, offload, loss scale, schedule) its defaults, the parser of each
 * choice's text, its name back, and the check of that struct on its own. Pure functions of
 * their arguments; hpt_plan_set, hpt_plan_check and hpt_plan_print (src/core/plan.c) are built
 * from them, and the modules that take one part of a plan (model, offload engine, estimator)
 * call the same checks (choices.h), so every rule is written here once.
 * Invariant: a name table's index is its enum's value (the enums are append-only), so a name
 * and its parse are inverses. */
#include "core/choices.h"
#include "core/core.h"
#include "testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tiers ------------------------------------------------------------------------------- */

static const char *const k_tier_names[HPT_TIER_COUNT] = {"device", "host", "disk"};

const char *hpt_tier_name(hpt_tier t) { return (unsigned)t < HPT_TIER_COUNT ? k_tier_names[t] : "?"; }

/* The tier the n bytes at t name. */
static int parse_tier(const char *t, size_t n, hpt_tier *out) {
    for (int i = 0; i < HPT_TIER_COUNT; i++)
        if (strlen(k_tier_names[i]) == n && !strncmp(t, k_tier_names[i], n)) {
            *out = (hpt_tier)i;
            return 1;
        }
    return 0;
}

/* ---- activations (hpt_act_opts) ------------------------------------------------------ */

hpt_act_opts hpt_act_defaults(void) {
    hpt_act_opts o = {HPT_ATTN_FLASH, HPT_RECOMPUTE_NONE, 1, HPT_OFFLOAD_NONE,
                           HPT_COMPRESS_NONE, 0, 0, HPT_MATMUL_FP32};
    return o;
}

hpt_status hpt_act_check(const hpt_act_opts *o) {
    if (o->head_chunk < 0)
        return hpt_fail(HPT_ERR_INVALID, "head chunk %d must be >= 0 (0: all logits)", o->head_chunk);
    if (o->mlp_tile < 0)
        return hpt_fail(HPT_ERR_INVALID, "MLP tile %d must be >= 0 (0: untiled)", o->mlp_tile);
    if (o->attention != HPT_ATTN_FLASH && o->attention != HPT_ATTN_PLAIN)
        return hpt_fail(HPT_ERR_INVALID, "unknown attention kind %d", (int)o->attention);
    if ((unsigned)o->recompute > HPT_RECOMPUTE_FULL)
        return hpt_fail(HPT_ERR_INVALID, "unknown recompute policy %d", (int)o->recompute);
    if (o->recompute == HPT_RECOMPUTE_EVERY && o->every < 1)
        return hpt_fail(HPT_ERR_INVALID, "recompute every:%d: N must be >= 1", o->every);
    if ((unsigned)o->offload > HPT_OFFLOAD_DISK)
        return hpt_fail(HPT_ERR_INVALID, "unknown activation offload %d", (int)o->offload);
    if ((unsigned)o->compress > HPT_COMPRESS_BF16)
        return hpt_fail(HPT_ERR_INVALID, "unknown activation compression %d", (int)o->compress);
    if ((unsigned)o->matmul > HPT_MATMUL_BF16)
        return hpt_fail(HPT_ERR_INVALID, "unknown matmul precision %d", (int)o->matmul);
    /* --matmul bf16 covers the flash pair's products (backend.h's flash_attention_*_bf16);
     * the plain pair keeps its (T,T) probabilities in fp32 and has no bf16 rule */
    if (o->matmul == HPT_MATMUL_BF16 && o->attention == HPT_ATTN_PLAIN)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--matmul bf16 covers flash attention only: "
                        "--attention plain has no bf16 path (use --attention flash or --matmul "
                        "fp32)");
    return HPT_OK;
}

hpt_status hpt_act_offload_parse(const char *text, hpt_act_opts *o) {
    if (!strcmp(text, "none")) o->offload = HPT_OFFLOAD_NONE;
    else if (!strcmp(text, "host")) o->offload = HPT_OFFLOAD_HOST;
    else if (!strcmp(text, "disk")) o->offload = HPT_OFFLOAD_DISK;
    else return hpt_fail(HPT_ERR_INVALID, "act-offload '%s': expected none, host or disk", text);
    return HPT_OK;
}

hpt_status hpt_act_compress_parse(const char *text, hpt_act_opts *o) {
    if (!strcmp(text, "none")) o->compress = HPT_COMPRESS_NONE;
    else if (!strcmp(text, "int8")) o->compress = HPT_COMPRESS_INT8;
    else if (!strcmp(text, "bf16")) o->compress = HPT_COMPRESS_BF16;
    else return hpt_fail(HPT_ERR_INVALID, "act-compress '%s': expected none, int8 or bf16", text);
    return HPT_OK;
}

const char *hpt_act_offload_name(hpt_act_offload x) {
    return x == HPT_OFFLOAD_HOST ? "host" : x == HPT_OFFLOAD_DISK ? "disk" : "none";
}

const char *hpt_act_compress_name(hpt_act_compress x) {
    return x == HPT_COMPRESS_INT8 ? "int8" : x == HPT_COMPRESS_BF16 ? "bf16" : "none";
}

hpt_status hpt_matmul_parse(const char *text, hpt_act_opts *o) {
    if (!strcmp(text, "fp32")) o->matmul = HPT_MATMUL_FP32;
    else if (!strcmp(text, "bf16")) o->matmul = HPT_MATMUL_BF16;
    else return hpt_fail(HPT_ERR_INVALID, "matmul '%s': expected fp32 or bf16", text);
    return HPT_OK;
}

const char *hpt_matmul_name(hpt_matmul x) { return x == HPT_MATMUL_BF16 ? "bf16" : "fp32"; }

hpt_status hpt_attention_parse(const char *text, hpt_act_opts *o) {
    if (!strcmp(text, "flash")) o->attention = HPT_ATTN_FLASH;
    else if (!strcmp(text, "plain")) o->attention = HPT_ATTN_PLAIN;
    else return hpt_fail(HPT_ERR_INVALID, "attention '%s': expected flash or plain", text);
    return HPT_OK;
}

hpt_status hpt_recompute_parse(const char *text, hpt_act_opts *o) {
    if (!strcmp(text, "none")) o->recompute = HPT_RECOMPUTE_NONE;
    else if (!strcmp(text, "selective")) o->recompute = HPT_RECOMPUTE_SELECTIVE;
    else if (!strcmp(text, "full")) o->recompute = HPT_RECOMPUTE_FULL;
    else if (!strncmp(text, "every:", 6)) {
        char *end;
        long n = strtol(text + 6, &end, 10);
        if (end == text + 6 || *end || n < 1 || n > 1000000)
            return hpt_fail(HPT_ERR_INVALID, "recompute '%s': N of every:N must be an integer >= 1", text);
        o->recompute = HPT_RECOMPUTE_EVERY;
        o->every = (int)n;
    } else {
        return hpt_fail(HPT_ERR_INVALID, "recompute '%s': expected none, selective, every:N or full", text);
    }
    return HPT_OK;
}

const char *hpt_attention_name(hpt_attention a) { return a == HPT_ATTN_PLAIN ? "plain" : "flash"; }

const char *hpt_recompute_name(const hpt_act_opts *o, char *buf, size_t n) {
    switch (o->recompute) {
    case HPT_RECOMPUTE_SELECTIVE: snprintf(buf, n, "selective"); break;
    case HPT_RECOMPUTE_EVERY: snprintf(buf, n, "every:%d", o->every); break;
    case HPT_RECOMPUTE_FULL: snprintf(buf, n, "full"); break;
    default: snprintf(buf, n, "none"); break;
    }
    return buf;
}

/* ---- the optimizer (hpt_adamw_opts) ------------------------------------------------------- */

static const char *const k_optim_names[HPT_OPTIM_COUNT] = {"adamw", "lion", "adam-mini", "sgd"};

const char *hpt_optim_name(hpt_optim_kind k) {
    return (unsigned)k < HPT_OPTIM_COUNT ? k_optim_names[k] : "?";
}

hpt_status hpt_optim_parse(const char *name, hpt_optim_kind *out) {
    for (int k = 0; k < HPT_OPTIM_COUNT; k++)
        if (!strcmp(name, k_optim_names[k])) {
            *out = (hpt_optim_kind)k;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "unknown optimizer '%s' (adamw, lion, adam-mini or sgd)", name);
}

hpt_adamw_opts hpt_adamw_defaults(void) {
    hpt_adamw_opts o = {.lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                        .weight_decay = 0.1f, .decay_all = 0, .optimizer = HPT_OPTIM_ADAMW,
                        .state_bits = 32, .state32_embeddings = 0};
    return o;
}

hpt_adamw_opts hpt_optim_defaults(hpt_optim_kind k) {
    hpt_adamw_opts o = hpt_adamw_defaults();
    o.optimizer = (int)k;
    if (k == HPT_OPTIM_LION) {
        o.lr = 1e-4f;
        o.beta2 = 0.99f;
    } else if (k == HPT_OPTIM_SGD) {
        o.lr = 0.1f;
        o.weight_decay = 0.0f;
    }
    return o;
}

static int state_bits(const hpt_adamw_opts *o) { return o->state_bits == 0 ? 32 : o->state_bits; }

hpt_status hpt_optim_check(const hpt_adamw_opts *o) {
    int bits = state_bits(o);
    if ((unsigned)o->optimizer >= HPT_OPTIM_COUNT || (bits != 32 && bits != 8))
        return hpt_fail(HPT_ERR_INVALID, "optimizer %d with %d-bit state is not an optimizer",
                        o->optimizer, bits);
    return HPT_OK;
}

int hpt_optim_mv_homes(const hpt_adamw_opts *o) {
    return o->optimizer == HPT_OPTIM_ADAMW && state_bits(o) == 32;
}

/* ---- the offload engine (hpt_offload_opts) ------------------------------------------------ */

hpt_offload_opts hpt_offload_defaults(void) {
    return (hpt_offload_opts){.params = HPT_TIER_DEVICE, .grads = HPT_TIER_DEVICE,
                              .optim = HPT_TIER_DEVICE, .max_active = 2, .prefetch = 1, .fused = 0};
}

int hpt_offload_active(const hpt_offload_opts *o) {
    return o && (o->params != HPT_TIER_DEVICE || o->grads != HPT_TIER_DEVICE ||
                 o->optim != HPT_TIER_DEVICE || o->fused || o->weights != HPT_BW_FP32 ||
                 o->grad_home != HPT_GH_FP32 || o->embeddings != HPT_EMB_FULL);
}

hpt_status hpt_offload_parse(const char *text, hpt_offload_opts *o) {
    hpt_tier t;
    if (!strcmp(text, "none")) {
        o->params = o->grads = o->optim = HPT_TIER_DEVICE;
        return HPT_OK;
    }
    if (parse_tier(text, strlen(text), &t) && t != HPT_TIER_DEVICE) {
        o->params = o->grads = o->optim = t;
        return HPT_OK;
    }
    for (const char *p = text; *p;) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (!eq || eq > end || !parse_tier(eq + 1, (size_t)(end - eq - 1), &t))
            return hpt_fail(HPT_ERR_INVALID, "offload '%s': expected none, host, disk or "
                            "params=T,grads=T,optim=T with T device, host or disk", text);
        size_t kn = (size_t)(eq - p);
        if (kn == 6 && !strncmp(p, "params", 6)) o->params = t;
        else if (kn == 5 && !strncmp(p, "grads", 5)) o->grads = t;
        else if (kn == 5 && !strncmp(p, "optim", 5)) o->optim = t;
        else return hpt_fail(HPT_ERR_INVALID, "offload '%s': unknown key '%.*s' (params, grads, "
                             "optim)", text, (int)kn, p);
        p = *end ? end + 1 : end;
    }
    return HPT_OK;
}

hpt_status hpt_offload_check(const hpt_offload_opts *o) {
    if ((unsigned)o->params >= HPT_TIER_COUNT || (unsigned)o->grads >= HPT_TIER_COUNT ||
        (unsigned)o->optim >= HPT_TIER_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "offload: unknown tier");
    if ((unsigned)o->weights >= HPT_BW_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "offload: unknown weights precision %d", o->weights);
    if (o->weights == HPT_BW_BF16_KAHAN && o->params == HPT_TIER_DISK)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "bf16-kahan weights keep their home (and its "
                        "compensation) on the device or the host; bf16-sr may use the disk "
                        "(--offload params=disk given)");
    if ((unsigned)o->grad_home >= HPT_GH_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "offload: unknown gradient home precision %d", o->grad_home);
    if (o->grad_home != HPT_GH_FP32 && o->fused)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--grad-home %s: with --fused-update gradients never "
                        "go to a home (each block is updated from its device slot)",
                        hpt_grad_home_name((hpt_grad_home)o->grad_home));
    if ((unsigned)o->embeddings >= HPT_EMB_COUNT || o->vocab_chunk < 0)
        return hpt_fail(HPT_ERR_INVALID, "offload: unknown embeddings %d or vocab chunk %d < 0",
                        o->embeddings, o->vocab_chunk);
    if (o->embeddings != HPT_EMB_FULL && !o->fused)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--embeddings %s updates wte chunk by chunk at the end "
                        "of the backward: it needs --fused-update",
                        hpt_embeddings_name((hpt_embeddings)o->embeddings));
    if (o->embeddings == HPT_EMB_BF16 && o->weights == HPT_BW_FP32)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--embeddings bf16 rounds as the blocks' weights do: "
                        "it needs --weights bf16-sr or bf16-kahan");
    if (o->max_active < 1 || o->prefetch < 0 || o->prefetch >= o->max_active)
        return hpt_fail(HPT_ERR_INVALID, "offload: --max-active-layers %d and --prefetch %d need "
                        "K >= 1 and 0 <= P < K", o->max_active, o->prefetch);
    return HPT_OK;
}

hpt_status hpt_offload_check_optim(const hpt_offload_opts *o, int mv_homes) {
    if (!mv_homes && o->optim == HPT_TIER_DISK)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "the offload engine keeps optimizer state other than "
                        "AdamW's 32-bit m and v on the device or the host only (--offload "
                        "optim=device or optim=host; optim=disk given)");
    return HPT_OK;
}

static const char *const k_weights_name[HPT_BW_COUNT] = {"fp32", "bf16-sr", "bf16-kahan"};

hpt_status hpt_block_weights_parse(const char *text, hpt_block_weights *out) {
    for (int i = 0; i < HPT_BW_COUNT; i++)
        if (!strcmp(text, k_weights_name[i])) {
            *out = (hpt_block_weights)i;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "weights '%s': expected fp32, bf16-sr or bf16-kahan", text);
}

const char *hpt_block_weights_name(hpt_block_weights w) {
    return (unsigned)w < HPT_BW_COUNT ? k_weights_name[w] : "?";
}

static const char *const k_grad_home_name[HPT_GH_COUNT] = {"fp32", "bf16", "fp16"};

hpt_status hpt_grad_home_parse(const char *text, hpt_grad_home *out) {
    for (int i = 0; i < HPT_GH_COUNT; i++)
        if (!strcmp(text, k_grad_home_name[i])) {
            *out = (hpt_grad_home)i;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "grad-home '%s': expected fp32, bf16 or fp16", text);
}

const char *hpt_grad_home_name(hpt_grad_home g) {
    return (unsigned)g < HPT_GH_COUNT ? k_grad_home_name[g] : "?";
}

static const char *const k_emb_name[HPT_EMB_COUNT] = {"full", "chunked", "bf16"};

hpt_status hpt_embeddings_parse(const char *text, hpt_embeddings *out) {
    for (int i = 0; i < HPT_EMB_COUNT; i++)
        if (!strcmp(text, k_emb_name[i])) {
            *out = (hpt_embeddings)i;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "embeddings '%s': expected full, chunked or bf16", text);
}

const char *hpt_embeddings_name(hpt_embeddings e) {
    return (unsigned)e < HPT_EMB_COUNT ? k_emb_name[e] : "?";
}

/* ---- loss scaling (hpt_loss_scale_opts) --------------------------------------------------- */

hpt_loss_scale_opts hpt_loss_scale_defaults(void) {
    return (hpt_loss_scale_opts){.mode = HPT_LOSS_SCALE_OFF, .init = 65536.0f, .window = 2000};
}

/* A loss scale S is a power of two from 1 to 2^64 (the trainer's scaler keeps the same rule
 * for a restored scale). */
int hpt_loss_scale_valid(float x) {
    int e;
    return x >= 1.0f && x <= 18446744073709551616.0f && frexpf(x, &e) == 0.5f;
}

hpt_status hpt_loss_scale_parse(const char *text, hpt_loss_scale_opts *o) {
    if (!strcmp(text, "off")) {
        o->mode = HPT_LOSS_SCALE_OFF;
        return HPT_OK;
    }
    if (!strcmp(text, "dynamic")) {
        o->mode = HPT_LOSS_SCALE_DYNAMIC;
        return HPT_OK;
    }
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end || !hpt_loss_scale_valid((float)v) || (double)(float)v != v)
        return hpt_fail(HPT_ERR_INVALID, "loss scale '%s': expected off, dynamic or a power of two "
                        "from 1 to 2^64", text);
    o->mode = HPT_LOSS_SCALE_STATIC;
    o->init = (float)v;
    return HPT_OK;
}

/* ---- the hybrid schedule (hpt_schedule_opts) ---------------------------------------------- */

static const char *const k_pred_names[HPT_PREDICTOR_COUNT] = {"adam", "linear", "zero", "garbage",
                                                                "jump"};

const char *hpt_predictor_name(hpt_predictor_kind k) {
    return (unsigned)k < HPT_PREDICTOR_COUNT ? k_pred_names[k] : "?";
}

/* The public parse knows the user's predictors only; the testing ones (src/testing.h) are
 * reachable from tests, never from a flag. */
static hpt_status predictor_parse(const char *name, int n, hpt_predictor_kind *out) {
    if (!strcmp(name, "jump")) { /* a user's, after the testing ones */
        *out = HPT_PREDICTOR_JUMP;
        return HPT_OK;
    }
    for (int k = 0; k < n; k++)
        if (!strcmp(name, k_pred_names[k])) {
            *out = (hpt_predictor_kind)k;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "unknown predictor '%s' (adam, linear or jump)", name);
}

hpt_status hpt_predictor_parse(const char *name, hpt_predictor_kind *out) {
    return predictor_parse(name, HPT_PREDICTOR_LINEAR + 1, out);
}

hpt_status hpt_predictor_parse_testing(const char *name, hpt_predictor_kind *out) {
    return predictor_parse(name, HPT_PREDICTOR_COUNT, out);
}

const char *hpt_weights_name(hpt_weights w) { return w == HPT_WEIGHTS_Q8 ? "int8" : "fp32"; }

hpt_status hpt_weights_parse(const char *text, hpt_weights *out) {
    if (!strcmp(text, "fp32")) *out = HPT_WEIGHTS_F32;
    else if (!strcmp(text, "int8")) *out = HPT_WEIGHTS_Q8;
    else return hpt_fail(HPT_ERR_INVALID, "unknown weight format '%s' (fp32, int8)", text);
    return HPT_OK;
}

hpt_status hpt_predictor_check_optim(int predictor, const hpt_adamw_opts *o) {
    if (predictor == HPT_PREDICTOR_ADAM && !hpt_optim_mv_homes(o))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "the adam predictor reads AdamW's 32-bit moments: "
                        "use --optimizer adamw --state-bits 32, or --predictor linear");
    return HPT_OK;
}

hpt_schedule_opts hpt_schedule_defaults(void) {
    hpt_schedule_opts o = {.kind = HPT_SCHEDULE_FULL, .warmup_steps = 50, .full_steps = 20,
                           .max_predict_steps = 20, .confidence = 0.5f, .correct_steps = 2,
                           .predictor = HPT_PREDICTOR_ADAM, .check_every = 0, .band = 0.05f,
                           .rollback = 0.2f, .fit_decay = 0.9f, .jump_stride = 40,
                           .jump_snapshots = 5, .jump_horizon = 200,
                           .jump_fit = HPT_JUMP_FIT_LINEAR, .jump_state = HPT_JUMP_STATE_KEEP,
                           .jump_search_batches = 4, .jump_min_gain = 2.0f};
    return o;
}

hpt_status hpt_schedule_check(const hpt_schedule_opts *o) {
    if (o->kind != HPT_SCHEDULE_FULL && o->kind != HPT_SCHEDULE_HYBRID)
        return hpt_fail(HPT_ERR_INVALID, "unknown schedule %d", o->kind);
    if (o->kind == HPT_SCHEDULE_FULL) return HPT_OK;
    if (o->warmup_steps < 0 || o->full_steps < 1 || o->max_predict_steps < 1 ||
        o->correct_steps < 1 || o->check_every < 0)
        return hpt_fail(HPT_ERR_INVALID, "hybrid schedule: warmup (%lld) and check interval (%lld) "
                        "must be >= 0, full (%lld), max predict (%lld) and correct (%lld) steps >= 1",
                        (long long)o->warmup_steps, (long long)o->check_every,
                        (long long)o->full_steps, (long long)o->max_predict_steps,
                        (long long)o->correct_steps);
    if (!(o->confidence >= 0.0f && o->confidence <= 1.0f))
        return hpt_fail(HPT_ERR_INVALID, "confidence threshold %g must be in [0, 1]", (double)o->confidence);
    if (!(o->band > 0.0f) || !(o->rollback >= o->band) || !isfinite(o->rollback))
        return hpt_fail(HPT_ERR_INVALID, "band %g must be > 0 and the rollback bound %g >= it",
                        (double)o->band, (double)o->rollback);
    if (!(o->fit_decay > 0.0f && o->fit_decay < 1.0f))
        return hpt_fail(HPT_ERR_INVALID, "fit decay %g must be in (0, 1)", (double)o->fit_decay);
    if ((unsigned)o->predictor >= HPT_PREDICTOR_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "unknown predictor %d", o->predictor);
    if (o->check_weights != HPT_WEIGHTS_F32 && o->check_weights != HPT_WEIGHTS_Q8)
        return hpt_fail(HPT_ERR_INVALID, "unknown check weights %d (fp32 or int8)", o->check_weights);
    if (o->predictor != HPT_PREDICTOR_JUMP) return HPT_OK;
    if (o->jump_stride < 1 || o->jump_horizon < 1 || o->jump_search_batches < 1 ||
        o->jump_snapshots < (o->jump_fit == HPT_JUMP_FIT_LINEAR ? 2 : 3) || o->jump_snapshots > 64)
        return hpt_fail(HPT_ERR_INVALID, "jump: stride (%lld), horizon (%lld) and search batches (%d) "
                        "must be >= 1, snapshots (%lld) from 2 (linear fit) or 3 (quadratic, exp) "
                        "to 64", (long long)o->jump_stride, (long long)o->jump_horizon,
                        o->jump_search_batches, (long long)o->jump_snapshots);
    if ((unsigned)o->jump_fit > HPT_JUMP_FIT_EXP || (unsigned)o->jump_state > HPT_JUMP_STATE_ZERO_M ||
        !(o->jump_min_gain >= 0.0f) || !isfinite(o->jump_min_gain))
        return hpt_fail(HPT_ERR_INVALID, "jump: unknown fit %d or state %d, or min gain %g not >= 0",
                        o->jump_fit, o->jump_state, (double)o->jump_min_gain);
    return HPT_OK;
}

/* ---- LoRA adapters (hpt_lora_opts) --------------------------------------------------- */

hpt_lora_opts hpt_lora_defaults(void) {
    hpt_lora_opts o;
    memset(&o, 0, sizeof o);
    o.alpha = 8.0f;
    return o;
}

hpt_status hpt_lora_check(const hpt_lora_opts *o) {
    if (o->base < HPT_BASE_F32 || o->base > HPT_BASE_NF4)
        return hpt_fail(HPT_ERR_INVALID, "base-weights %d: f32, bf16, int8 or nf4", o->base);
    if (o->r == 0) return HPT_OK; /* off: the other settings are not read */
    if (o->r < 0 || o->r > 65536 || !(o->alpha > 0.0f) || !isfinite(o->alpha) ||
        !(o->dropout >= 0.0f && o->dropout < 1.0f))
        return hpt_fail(HPT_ERR_INVALID, "lora: r=%d alpha=%g dropout=%g: r from 1 to 65536, "
                        "alpha > 0, dropout in [0, 1)", o->r, (double)o->alpha, (double)o->dropout);
    return HPT_OK;
}

float hpt_lora_scale(const hpt_lora_opts *o) {
    if (o->r < 1) return 0.0f;
    return o->rslora ? o->alpha / sqrtf((float)o->r) : o->alpha / (float)o->r;
}

hpt_status hpt_lora_parse(const char *text, hpt_lora_opts *o) {
    hpt_lora_opts q = *o;
    q.r = 8; /* PEFT's default rank when r= is not given */
    const char *t = text;
    while (*t) {
        size_t len = strcspn(t, ",");
        char item[64];
        if (len >= sizeof item) len = sizeof item - 1;
        memcpy(item, t, len);
        item[len] = 0;
        t += strcspn(t, ",");
        if (*t == ',') t++;
        char *eq = strchr(item, '='), *end = NULL;
        if (!strcmp(item, "rslora")) { q.rslora = 1; continue; }
        if (!eq)
            return hpt_fail(HPT_ERR_INVALID, "lora: '%s': expected r=N, alpha=X, dropout=P or rslora",
                            item);
        *eq = 0;
        double v = strtod(eq + 1, &end);
        if (!eq[1] || *end || !isfinite(v))
            return hpt_fail(HPT_ERR_INVALID, "lora: %s='%s' is not a number", item, eq + 1);
        if (!strcmp(item, "r") && v == floor(v) && v >= 1 && v <= 65536) q.r = (int)v;
        else if (!strcmp(item, "alpha")) q.alpha = (float)v;
        else if (!strcmp(item, "dropout")) q.dropout = (float)v;
        else if (!strcmp(item, "rslora") && (v == 0 || v == 1)) q.rslora = (int)v;
        else
            return hpt_fail(HPT_ERR_INVALID, "lora: %s=%s: expected r (an integer >= 1), alpha, "
                            "dropout or rslora", item, eq + 1);
    }
    HPT_CHECK(hpt_lora_check(&q));
    *o = q;
    return HPT_OK;
}

void hpt_lora_name(const hpt_lora_opts *o, char *buf, size_t n) {
    snprintf(buf, n, "r=%d,alpha=%.9g,dropout=%.9g%s", o->r, (double)o->alpha, (double)o->dropout,
             o->rslora ? ",rslora" : "");
}
