/* auto.c: `--plan auto`: the fastest plan that fits every tier's budget. It enumerates the
 * space (micro-batch, attention, recompute, activation offload, a head chunk, the engine's homes
 * with K, P and the fused update, embeddings; with allow_lossy 8-bit state, bf16 weights,
 * compressed activations and --matmul bf16 when calibrated), keeps what passes hpt_plan_check, costs each (cost.c), and takes
 * them fastest first through the exact estimator until HPT_AUTO_KEEP fit. docs/planner.md,
 * "The search".
 * Invariants: only the estimator decides what fits, so the chosen plan is the fastest predicted
 * one the estimator says fits; deterministic for a given calibration (ties keep the enumeration
 * order: qsort is given the index as the last key); nothing is allocated through hpt_mem. */
#include "core/core.h"
#include "kernels/backend.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    hpt_plan_opts o;
    double t;
    int idx;
} cand;

typedef struct {
    cand *v;
    int n, cap;
} cands;

/* the activation figures of one (B, act) pair, computed once */
typedef struct {
    int B;
    hpt_act_opts act;
    uint64_t none_arena, at[HPT_TIER_COUNT];
    int ok;
} act_memo;

typedef struct {
    act_memo *v;
    int n, cap;
} memos;

static const act_memo *memo_get(memos *ms, const hpt_plan_opts *o) {
    for (int i = 0; i < ms->n; i++)
        if (ms->v[i].B == o->B && !memcmp(&ms->v[i].act, &o->act, sizeof o->act)) return &ms->v[i];
    if (ms->n == ms->cap) {
        int cap = ms->cap ? 2 * ms->cap : 64;
        act_memo *v = realloc(ms->v, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        ms->v = v, ms->cap = cap;
    }
    act_memo *m = &ms->v[ms->n++];
    memset(m, 0, sizeof *m);
    m->B = o->B, m->act = o->act;
    hpt_act_opts d = hpt_act_defaults();
    d.attention = o->act.attention;
    uint64_t none[HPT_TIER_COUNT];
    m->ok = hpt_model_act_tier_bytes(&o->cfg, o->B, o->T, &d, none) == HPT_OK &&
            hpt_model_act_tier_bytes(&o->cfg, o->B, o->T, &o->act, m->at) == HPT_OK;
    m->none_arena = none[HPT_TIER_DEVICE];
    return m;
}

static int add(cands *cs, memos *ms, const hpt_plan_opts *o, const hpt_calibration *c) {
    hpt_plan_env env = {.training = 1, .has_val = -1, .need_disk_dir = 0};
    if (hpt_plan_check(&o->plan, &env) != HPT_OK) return 0;
    const act_memo *m = memo_get(ms, o);
    if (!m) return -1;
    hpt_cost k;
    if (!m->ok || hpt_plan_cost_acts(o, c, m->none_arena, m->at, &k) != HPT_OK) return 0;
    if (cs->n == cs->cap) {
        int cap = cs->cap ? 2 * cs->cap : 1024;
        cand *v = realloc(cs->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        cs->v = v, cs->cap = cap;
    }
    cs->v[cs->n] = (cand){*o, k.total_s, cs->n};
    cs->n++;
    return 0;
}

static int by_time(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->idx - y->idx;
}

/* The homes the engine may take: none, fused on the device, host, disk, host with state on disk. */
enum { H_NONE, H_FUSED_DEVICE, H_HOST, H_DISK, H_MIXED, H_COUNT };

static void set_homes(hpt_offload_opts *of, int h) {
    *of = hpt_offload_defaults();
    hpt_tier p = HPT_TIER_DEVICE, s = HPT_TIER_DEVICE;
    if (h == H_HOST) p = s = HPT_TIER_HOST;
    if (h == H_DISK) p = s = HPT_TIER_DISK;
    if (h == H_MIXED) p = HPT_TIER_HOST, s = HPT_TIER_DISK;
    of->params = of->grads = p;
    of->optim = s;
    if (h == H_FUSED_DEVICE) of->fused = 1;
}

/* A LoRA run's frozen base (docs/lora.md): its storage, f32 unless lossy choices are allowed
 * (bf16, int8, nf4 round the base), and its stored blocks' home (device, host, disk with
 * allow_disk). A --base-weights or --base-home given (not the default) is kept. */
enum { BASE_CHOICES = 4 * HPT_TIER_COUNT };

static int base_choice(const hpt_plan_opts *base, const hpt_auto_opts *a, int i, hpt_lora_opts *lo) {
    int kind = i / HPT_TIER_COUNT, home = i % HPT_TIER_COUNT;
    *lo = base->lora;
    if (lo->r < 1) return i == 0;
    if (lo->base != HPT_BASE_F32 ? kind != lo->base : kind != HPT_BASE_F32 && !a->allow_lossy)
        return 0;
    if (lo->home != HPT_TIER_DEVICE ? home != lo->home
                                    : home == HPT_TIER_DISK && (!a->allow_disk || !base->offload_dir))
        return 0;
    lo->base = kind, lo->home = home;
    return 1;
}

/* Every candidate of the space, costed, into cs. */
/* Whether the search tries --matmul bf16 beside fp32: lossy choices allowed, --matmul not given
 * (the user's is kept, as is a bf16 base), the calibration with bf16 rates (without them bf16
 * would be costed at the fp32 rates, plus its workspace: no honest comparison), and heads the
 * backends' bf16 flash pair takes (the CPU's up to HPT_ATTN_BF16_MAX_HS, CUDA's 16, 32, 64 and
 * 128; the model refuses others at setup). */
static int bf16_choice(const hpt_plan_opts *base, const hpt_calibration *c, const hpt_auto_opts *a) {
    int takes = 0, opt = 0;
    for (const char *n; (n = hpt_plan_option_name(opt, &takes)) && strcmp(n, "matmul"); opt++) {}
    if (!a->allow_lossy || !c->bf16.have || base->act.matmul != HPT_MATMUL_FP32) return 0;
    if (hpt_plan_option_name(opt, &takes) && (base->plan.given >> opt & 1)) return 0;
    const int hd = base->cfg.NH > 0 ? base->cfg.C / base->cfg.NH : 0;
    if (base->device) return hd == 16 || hd == 32 || hd == 64 || hd == 128;
    return hd >= 1 && hd <= HPT_ATTN_BF16_MAX_HS;
}

static hpt_status enumerate(const hpt_plan_opts *base, const hpt_calibration *c, const hpt_auto_opts *a,
                            cands *cs, memos *ms) {
    const hpt_model_config *cfg = &base->cfg;
    int64_t S = a->sequences > 0 ? a->sequences : 1;
    int Bs[8], nB = 0;
    for (int64_t d = 1; d <= S && nB < 8; d++) /* the largest divisors first, then 1 */
        if (S % d == 0 && S / d <= (1 << 20)) Bs[nB++] = (int)(S / d);
    int every = 1;
    while ((every + 1) * (every + 1) <= cfg->L) every++;
    const int n_rec = every > 1 && every < cfg->L ? 4 : 3;
    for (int bi = 0; bi < nB; bi++)
    for (int attn = 0; attn < 2; attn++)
    for (int rec = 0; rec < n_rec; rec++)
    for (int ao = 0; ao < 3; ao++)
    for (int comp = 0; comp < 3; comp++)
    for (int hc = 0; hc < 3; hc++) /* 1: a head chunk; 2: and a tiled MLP */
    for (int h = 0; h < H_COUNT; h++)
    for (int kp = 0; kp < 3; kp++)
    for (int fused = 0; fused < 2; fused++)
    for (int s8 = 0; s8 < 2; s8++)
    for (int bw = 0; bw < 2; bw++)
    for (int emb = 0; emb < HPT_EMB_COUNT; emb++)
    for (int lb = 0; lb < BASE_CHOICES; lb++)
    for (int mm = 0; mm < 2; mm++) { /* --matmul fp32, bf16 */
        if (mm && !bf16_choice(base, c, a)) continue;
        hpt_lora_opts lo;
        if (!base_choice(base, a, lb, &lo)) continue;
        /* the embeddings chunked (fused only) or bf16 (lossy: with bf16 weights): wte's
         * gradient one chunk, its state (and with bf16 its weights) smaller on the device:
         * a large vocabulary's (128256 x 2048: 263M of a 1.24B-parameter model) */
        if (emb && !(fused && (h == H_HOST || h == H_DISK || h == H_MIXED))) continue;
        if (emb == HPT_EMB_BF16 && !bw) continue;
        if ((ao == 2 || h == H_DISK || h == H_MIXED) && !a->allow_disk) continue;
        if ((comp || s8 || bw) && !a->allow_lossy) continue;
        int engine_homes = h == H_HOST || h == H_DISK || h == H_MIXED;
        if (!engine_homes && (kp || fused)) continue; /* K, P, fused: with homes only */
        if (bw && h == H_NONE) continue;
        hpt_plan_opts o = *base;
        o.B = Bs[bi];
        o.accum = (int)(S / Bs[bi]);
        if (hc && (int64_t)o.B * o.T <= 128) continue;
        if (hc == 2 && base->lora.r > 0 && base->lora.dropout > 0.0f) continue; /* refused */
        if (hc == 2 && base->cfg.arch == HPT_ARCH_GEMMA3) continue; /* no tiled MLP (actopts.c) */
        o.act = hpt_act_defaults();
        o.act.attention = attn ? HPT_ATTN_PLAIN : HPT_ATTN_FLASH;
        o.act.recompute = rec == 0 ? HPT_RECOMPUTE_NONE : rec == 1 ? HPT_RECOMPUTE_SELECTIVE
                        : rec == 2 ? HPT_RECOMPUTE_FULL : HPT_RECOMPUTE_EVERY;
        o.act.every = rec == 3 ? every : 1;
        o.act.offload = (hpt_act_offload)ao;
        o.act.compress = comp == 0 ? HPT_COMPRESS_NONE : comp == 1 ? HPT_COMPRESS_BF16 : HPT_COMPRESS_INT8;
        o.act.head_chunk = hc ? 128 : 0;
        o.act.mlp_tile = hc == 2 ? HPT_AUTO_MLP_TILE : 0;
        /* --matmul: the user's when given (or bf16), else bf16 tried beside fp32 (bf16_choice) */
        o.act.matmul = mm ? HPT_MATMUL_BF16 : base->act.matmul;
        if (attn && o.act.matmul == HPT_MATMUL_BF16) continue; /* refused (hpt_act_check) */
        set_homes(&o.offload, h);
        if (engine_homes) {
            o.offload.max_active = kp == 0 ? 2 : 4;
            o.offload.prefetch = kp == 2 ? 3 : 1;
            o.offload.fused = fused;
        }
        if (o.offload.fused && o.accum > 1) continue;
        o.adamw.state_bits = s8 ? 8 : base->adamw.state_bits;
        o.adamw.state32_embeddings = 0;
        o.offload.weights = bw ? HPT_BW_BF16_SR : HPT_BW_FP32;
        o.offload.embeddings = emb;
        o.lora = lo;
        o.plan.given = 0;
        if (add(cs, ms, &o, c)) return hpt_fail(HPT_ERR_OOM, "plan search: no memory");
    }
    return HPT_OK;
}

/* 1 when a kept plan differs from o only in K and P (the runners-up should show other
 * choices; K and P rarely change the prediction) */
static int near_duplicate(const hpt_auto_result *r, const hpt_plan_opts *o) {
    hpt_plan_opts x = *o;
    x.offload.max_active = 0, x.offload.prefetch = 0;
    for (int i = 0; i < r->n; i++) {
        hpt_plan_opts y = r->cand[i].o;
        y.offload.max_active = 0, y.offload.prefetch = 0;
        if (!memcmp(&x, &y, sizeof x)) return 1;
    }
    return 0;
}

static void check_fit(hpt_auto_cand *k, uint64_t shared) {
    k->fits = 1;
    uint64_t both = 0;
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        uint64_t b = k->o.budget_bytes[t], p = k->e.peak_bytes[t];
        if (k->e.predict_peak_bytes[t] > p) p = k->e.predict_peak_bytes[t];
        if (b && p > b) {
            k->fits = 0, k->bad_tier = t, k->over_bytes = p - b;
            return;
        }
        if (t != HPT_TIER_DISK) both += p;
    }
    if (shared && both > shared) k->fits = 0, k->bad_tier = -1, k->over_bytes = both - shared;
}

hpt_status hpt_plan_auto(const hpt_plan_opts *base, const hpt_calibration *c,
                         const hpt_auto_opts *a, hpt_auto_result *out) {
    memset(out, 0, sizeof *out);
    cands cs = {0};
    memos ms = {0};
    hpt_status s = enumerate(base, c, a, &cs, &ms);
    free(ms.v);
    if (s != HPT_OK) {
        free(cs.v);
        return s;
    }
    qsort(cs.v, (size_t)cs.n, sizeof *cs.v, by_time);
    out->n_tried = cs.n;
    hpt_auto_cand k;
    uint64_t smallest = UINT64_MAX;
    hpt_auto_cand least;
    memset(&least, 0, sizeof least);
    const int keep = a->first_fit ? 1 : HPT_AUTO_KEEP;
    for (int i = 0; i < cs.n && out->n < keep; i++) {
        memset(&k, 0, sizeof k);
        k.o = cs.v[i].o;
        if (hpt_plan_estimate(&k.o, &k.e) != HPT_OK) continue;
        if (hpt_plan_cost(&k.o, c, &k.cost) != HPT_OK) continue;
        check_fit(&k, a->shared_bytes);
        if (k.fits) {
            out->n_fit++;
            if (out->n == 0 || !near_duplicate(out, &k.o)) out->cand[out->n++] = k;
        } else {
            if (out->n == 0 && out->n_nofit < 2) out->nofit[out->n_nofit++] = k;
            /* the nearest to fitting: the least bytes over the budgets, all tiers summed (a
             * plan's disk bytes, plentiful, do not make it look far) */
            uint64_t sum = 0, both = 0;
            for (int t = 0; t < HPT_TIER_COUNT; t++) {
                uint64_t b = k.o.budget_bytes[t], p = k.e.peak_bytes[t];
                if (k.e.predict_peak_bytes[t] > p) p = k.e.predict_peak_bytes[t];
                if (b && p > b) sum += p - b;
                if (t != HPT_TIER_DISK) both += p;
            }
            if (a->shared_bytes && both > a->shared_bytes) sum += both - a->shared_bytes;
            if (sum < smallest) smallest = sum, least = k;
        }
    }
    free(cs.v);
    if (out->n == 0) {
        if (smallest != UINT64_MAX) out->nofit[0] = least, out->n_nofit = 1;
        return hpt_fail(HPT_ERR_OOM, "no plan of the %d searched fits the budgets", out->n_tried);
    }
    return HPT_OK;
}
