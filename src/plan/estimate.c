/* estimate.c: the bytes and FLOPs of a run, from its configuration alone. It restates, category
 * by category, every hpt_mem_alloc call site a run goes through (the model's parameters,
 * gradients and arena, the optimizer's state, the data loader's buffers; the offload engine's
 * by eng_bytes, next to its own allocations), with the same sizes; the peak is the sum of
 * everything, reached when the first forward allocates the arena. docs/estimate.md.
 * Invariants: the estimate equals the measured peak byte for byte (tests/test_estimate.c): when a
 * call site changes, this file changes with it; nothing is allocated through hpt_mem and no
 * file is read; sizes are uint64_t and a run whose bytes cannot be counted in 64 bits is
 * refused; the fit search only calls hpt_plan_estimate, so any figure it reports is one the
 * estimator gives. */
#include "core/choices.h"
#include "core/core.h"
#include "model/model.h"
#include "offload/engine.h"
#include "optim/optim.h"

#include <string.h>

hpt_plan_opts hpt_plan_defaults(void) {
    hpt_plan_opts o;
    memset(&o, 0, sizeof o);
    hpt_model_config_parse("gpt2-124m", &o.cfg); /* the default model: a named SHAPE */
    o.B = 4;
    o.T = 64;
    o.training = 1;
    o.plan = hpt_plan_default_choices();
    return o;
}

/* The optimizer's state, restated from optim.c's layout over the model's tensor table: per
 * tensor, a moment costs 4 bytes per value in fp32, or 1 byte per value plus a 4-byte scale per
 * block of 256 values (blocks start at each slice's first value: a block tensor has L slices,
 * one per layer, any other tensor one) in 8 bits; the embeddings (the non-block tensors before
 * the blocks: wte, wpe) stay fp32 with state32_embeddings. AdamW keeps m and v, Lion and SGD
 * m, Adam-mini m plus one fp32 v per block: per row of the tensor's last dimension (C values
 * for wte, wpe, qkvw, attprojw, fcw; 4C for fcprojw; a per-layer vector whole: C, qkvb 3C,
 * fcb 4C). ZeRO stages 1, 2 over N processes: the units (a tensor's slice) of the process's run
 * only (optim_owner: the rule is optim.c's, the sizes restated here). HPT_ERR_INVALID for
 * settings optim.c refuses. */
static hpt_status optim_bytes(const hpt_plan_opts *o, size_t u_lo, size_t u_hi, uint64_t *out) {
    HPT_CHECK(hpt_optim_check(&o->adamw));
    int bits = o->adamw.state_bits == 0 ? 32 : o->adamw.state_bits;
    hpt_tensor_table t;
    model_describe(&o->cfg, &t);
    uint64_t per_moment = 0, mini_v = 0;
    int blocks = 0; /* a block tensor seen: the embeddings are behind */
    size_t unit = 0;
    for (int i = 0; i < t.n; i++) {
        const hpt_tensor_desc *d = &t.t[i];
        int stacked = d->layer == HPT_LAYER_STACKED;
        blocks |= stacked;
        uint64_t n = hpt_tensor_numel(d), slices = stacked ? (uint64_t)t.L : 1, sn = n / slices;
        /* the slices [a, b) of this tensor in the run [u_lo, u_hi) */
        uint64_t a = u_lo > unit ? HPT_MIN(u_lo - unit, slices) : 0;
        uint64_t b = u_hi > unit ? HPT_MIN(u_hi - unit, slices) : 0;
        uint64_t held = b > a ? b - a : 0;
        unit += slices;
        int q8 = bits == 8 && !(o->adamw.state32_embeddings && !blocks);
        per_moment += held * (q8 ? sn + ((sn + 255) / 256) * 4 : sn * 4);
        uint64_t row = (uint64_t)d->shape[d->ndim - 1];
        mini_v += held * sn / row * 4;
    }
    switch ((hpt_optim_kind)o->adamw.optimizer) {
    case HPT_OPTIM_ADAMW: *out = 2 * per_moment; break;
    case HPT_OPTIM_ADAM_MINI: *out = per_moment + mini_v; break;
    default: *out = per_moment; break; /* Lion, SGD */
    }
    return HPT_OK;
}


/* One data loader: raw window (B*T+1) uint16, inputs and targets (B, T) int32 each. */
static uint64_t loader_bytes(uint64_t BT) { return (BT + 1) * 2 + 2 * BT * 4; }

/* The hybrid schedule (src/train/trainer.c, predict.c): at the full-phase peak the linear
 * predictor's sums s0, s1 (device, optim), and on the host the rollback snapshot (params; it
 * lives through the first CORRECT step, whose forward is at the full peak) and the check batch
 * (io). During PREDICT: no gradients, no B-sized arena; the optimizer's state stays on the
 * device only for the adam predictor (which reads it), else it is on the host; the linear
 * predictor keeps s1 (velocities); checks run a forward of one sequence (its arena and, with
 * activation offload, its offload tier's bytes), or with int8 check weights an hpt_infer of
 * int8 copies (hpt_infer_create: weights, a cache of T positions, row scratch) and the loss's
 * logits (hpt_infer_loss), all freed after each check. Called after out->bytes holds the full
 * phase's figures without the schedule. */
static hpt_status hybrid_bytes(const hpt_plan_opts *o, hpt_estimate *out) {
    /* the jump predictor: forwards of one sequence on held-out batches (as fp32 checks), its
     * snapshots (K weights, host) instead of the rollback snapshot, and its held-out batches */
    int jump = o->sched.predictor == HPT_PREDICTOR_JUMP;
    int checks = o->sched.check_every > 0 || jump;
    if ((unsigned)o->sched.predictor >= HPT_PREDICTOR_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "unknown predictor %d", o->sched.predictor);
    if (checks && o->sched.check_weights != HPT_WEIGHTS_F32 && o->sched.check_weights != HPT_WEIGHTS_Q8)
        return hpt_fail(HPT_ERR_INVALID, "unknown check weights %d", o->sched.check_weights);
    HPT_CHECK(hpt_predictor_check_optim(o->sched.predictor, &o->adamw));
    uint64_t np = hpt_model_config_num_params(&o->cfg), pb = np * 4;
    uint64_t (*b)[HPT_CAT_COUNT] = out->bytes, *pp = out->predict_peak_bytes;
    uint64_t optim = b[HPT_TIER_DEVICE][HPT_CAT_OPTIM];
    uint64_t check_io = o->sched.check_every > 0 ? 2 * (uint64_t)o->B * (uint64_t)o->T * 4 : 0;
    if (jump) check_io += 2 * (uint64_t)(o->sched.jump_search_batches + 2) * (uint64_t)o->B * (uint64_t)o->T * 4;
    uint64_t snap = jump ? (uint64_t)o->sched.jump_snapshots * pb : pb;
    int linear = o->sched.predictor == HPT_PREDICTOR_LINEAR, adam = o->sched.predictor == HPT_PREDICTOR_ADAM;
    pp[HPT_TIER_DEVICE] = pb + (uint64_t)model_consts_floats(&o->cfg) * 4 + b[HPT_TIER_DEVICE][HPT_CAT_IO] + (adam ? optim : 0) + (linear ? pb : 0);
    pp[HPT_TIER_HOST] = snap + check_io + (adam ? 0 : optim);
    if (checks && !jump && o->sched.check_weights == HPT_WEIGHTS_Q8) { /* the check's int8 engine */
        pp[HPT_TIER_DEVICE] += hpt_infer_bytes_for(&o->cfg, HPT_WEIGHTS_Q8, o->T) +
                               hpt_infer_loss_bytes_for(&o->cfg);
    } else if (checks) {
        uint64_t at[HPT_TIER_COUNT];
        HPT_CHECK(hpt_model_act_tier_bytes(&o->cfg, 1, o->T, &o->act, at));
        pp[HPT_TIER_DEVICE] += at[HPT_TIER_DEVICE];
        pp[HPT_TIER_HOST] += at[HPT_TIER_HOST];
        pp[HPT_TIER_DISK] += at[HPT_TIER_DISK];
    }
    if (linear) b[HPT_TIER_DEVICE][HPT_CAT_OPTIM] += 2 * pb;
    b[HPT_TIER_HOST][HPT_CAT_PARAMS] += snap;
    b[HPT_TIER_HOST][HPT_CAT_IO] += check_io;
    return HPT_OK;
}

hpt_status hpt_plan_estimate(const hpt_plan_opts *o, hpt_estimate *out) {
    memset(out, 0, sizeof *out);
    const hpt_model_config *c = &o->cfg;
    HPT_CHECK(hpt_model_config_check(c));
    if (o->B < 1 || o->T < 1)
        return hpt_fail(HPT_ERR_INVALID, "batch %d and sequence %d must be >= 1", o->B, o->T);
    if (o->T > c->maxT)
        return hpt_fail(HPT_ERR_SHAPE, "sequence length %d exceeds the model's maxT %d", o->T,
                        c->maxT);
    if (o->accum < 0)
        return hpt_fail(HPT_ERR_INVALID, "accumulation %d must be >= 1", o->accum);
    /* An upper bound of the arena in floating point (every buffer end to end, plus the
     * alignment) before any size_t product that could wrap. */
    double B = o->B, T = o->T, C = c->C, L = c->L, NH = c->NH;
    double per_layer = B * T * (16.0 * C + 4.0) * 4.0 + B * NH * T * T * 4.0 + 13.0 * 64.0;
    double rest = B * T * (5.0 * C + 4.0 * C + (double)c->Vp + 5.0) * 4.0 + B * NH * T * 4.0;
    if (L * per_layer + rest > 4e18)
        return hpt_fail(HPT_ERR_INVALID, "B=%d T=%d with L=%d C=%d NH=%d is too large to count "
                        "(over 4 EB of activations)", o->B, o->T, c->L, c->C, c->NH);

    uint64_t np = hpt_model_config_num_params(c), BT = (uint64_t)o->B * (uint64_t)o->T;
    uint64_t *dev = out->bytes[HPT_TIER_DEVICE];
    dev[HPT_CAT_PARAMS] = np * 4;                     /* hpt_model_create_config */
    /* hpt_model_create_config; forward-only: hpt_model_load_forward, none (the engine's: below) */
    dev[HPT_CAT_GRADS] = o->training ? np * 4 : 0;
    /* ZeRO (docs/zero.md): stages 1, 2 over procs processes hold the optimizer state of process
     * rank's run of units; stage 2 also only its run's summed gradients (below) */
    int procs = o->procs > 1 ? o->procs : 1, stage = procs > 1 && o->zero > 0 ? o->zero : 0;
    if (hpt_offload_active(&o->offload)) stage = 0; /* every stage in the engine's homes: below */
    if (procs > 64) return hpt_fail(HPT_ERR_INVALID, "%d processes: at most 64", procs);
    if (o->rank < 0 || o->rank >= procs)
        return hpt_fail(HPT_ERR_INVALID, "process %d of %d: expected 0 to %d", o->rank, procs, procs - 1);
    size_t u_lo = 0, u_hi = SIZE_MAX, p_lo = 0, p_hi = np;
    if (stage) {
        hpt_tensor_table tab;
        model_describe(c, &tab);
        optim_owner(&tab, o->rank, procs, &u_lo, &u_hi, &p_lo, &p_hi);
    }
    if (o->training) HPT_CHECK(optim_bytes(o, u_lo, u_hi, &dev[HPT_CAT_OPTIM])); /* hpt_optim_create */
    /* stage 2: the flat gradients hold the non-block tensors only; the blocks' pass layer by
     * layer through two blocks' slots onto the owners (dp.c's sink: one block's exchange in
     * flight while the next one's backward writes the other), whose run holds the sums */
    if (stage == 2 && o->training) {
        hpt_tensor_table tab;
        model_describe(c, &tab);
        size_t nb_lo = 0, nb_hi = 0; /* the run's non-block values (before p_lo, before p_hi) */
        for (int i = 0; i < tab.n; i++) {
            if (tab.t[i].layer == HPT_LAYER_STACKED) continue;
            size_t off = hpt_table_offset(&tab, i), n = hpt_tensor_numel(&tab.t[i]);
            nb_lo += p_lo <= off ? 0 : HPT_MIN(p_lo - off, n);
            nb_hi += p_hi <= off ? 0 : HPT_MIN(p_hi - off, n);
        }
        /* + the run's block values; with accumulation its non-block ones' sum */
        dev[HPT_CAT_GRADS] = ((uint64_t)model_nonblock_floats(c) + 2 * (uint64_t)hpt_table_block_numel(&tab) +
                              ((p_hi - nb_hi) - (p_lo - nb_lo)) +
                              (o->accum > 1 ? nb_hi - nb_lo : 0)) * 4;
    }
    uint64_t apart_bytes = np * 4; /* the flat gradients' size (trainer.c's sum apart) */
    if (hpt_offload_active(&o->offload)) {
        HPT_CHECK(hpt_offload_check(&o->offload));
        HPT_CHECK(model_vocab_chunk_check(c, &o->offload));
        /* AdamW fp32: the blocks' m and v in the engine's homes; else the whole state in
         * optim.c's buffers (above), in the optim home's tier (device or host) */
        int mv_homes = hpt_optim_mv_homes(&o->adamw);
        if (o->training) HPT_CHECK(eng_check_optim(&o->offload, mv_homes));
        uint64_t nf = model_nonblock_floats(c), eb[HPT_TIER_COUNT][HPT_CAT_COUNT];
        /* hpt_model_create_config_offload, with the embeddings' own buffers (src/model/embed.c) */
        model_nonblock_bytes(c, &o->offload, &dev[HPT_CAT_PARAMS], &dev[HPT_CAT_GRADS]);
        apart_bytes = dev[HPT_CAT_GRADS]; /* the flat gradients: the blocks' are the engine's */
        hpt_tensor_table tab;
        model_describe(c, &tab);
        size_t sn[ENG_MAX_SLICES], rows[ENG_MAX_SLICES];
        for (int s = 0; s < tab.n_slices && s < ENG_MAX_SLICES; s++)
            sn[s] = hpt_tensor_slice_numel(&tab.t[hpt_table_slice_tensor(&tab, s)], c->L);
        eng_slice_rows(&tab, rows); /* bind.c's: the shards also on 8-bit blocks and rows */
        hpt_offload_opts so = o->offload;
        so.shards = o->zero >= 1 && procs > 1 ? procs : 0;
        so.zero = o->zero;
        /* ZeRO: the non-block tensors' state of this rank's part (engine_zemb.c) */
        size_t na[HPT_TABLE_MAX], nz[HPT_TABLE_MAX];
        eng_zemb_cut_of(&so, &tab, o->rank, na, nz);
        uint64_t nheld = 0;
        for (int i = 0; i < tab.n; i++)
            if (tab.t[i].layer != HPT_LAYER_STACKED) nheld += nz[i] - na[i];
        if (mv_homes) { /* hpt_optim_create: m, v (the non-block tensors') */
            dev[HPT_CAT_OPTIM] = o->training ? 2 * (so.shards > 1 && (o->offload.embeddings == HPT_EMB_FULL ||
                                                o->offload.embeddings == HPT_EMB_CHUNKED) ? nheld : nf) * 4 : 0;
        } else if (o->training && so.shards > 1) { /* ZeRO: the blocks' state of this rank's cut */
            size_t ca[ENG_MAX_SLICES], cz[ENG_MAX_SLICES];
            uint64_t ob[HPT_OPTIM_NUM_BUFS];
            eng_cut_of(&so, tab.n_slices, sn, rows, o->rank, ca, cz);
            optim_cut_bytes(c, &o->adamw, ca, cz, na, nz, ob);
            dev[HPT_CAT_OPTIM] = 0;
            for (int b = 0; b < HPT_OPTIM_NUM_BUFS; b++) dev[HPT_CAT_OPTIM] += ob[b];
        }
        if (!mv_homes && o->offload.optim != HPT_TIER_DEVICE) {
            out->bytes[o->offload.optim][HPT_CAT_OPTIM] = dev[HPT_CAT_OPTIM];
            dev[HPT_CAT_OPTIM] = 0;
        }
        /* eng_create, eng_attach_optim: one block is its tensors' slices */
        if (so.shards > 1) { /* ZeRO: one process's shard of each block's homes */
            eng_bytes_sharded(&so, c->L, tab.n_slices, sn, rows, o->training, mv_homes, eb);
        } else {
            eng_bytes(&o->offload, c->L, hpt_table_block_numel(&tab), o->training, mv_homes, eb);
        }
        /* a GPU's fused update on CPU threads: one pinned block of gradients (engine_gpu.c) */
        eng_gpu_bytes(&o->offload, o->device != 0, hpt_table_block_numel(&tab), o->training, eb);
        for (int t = 0; t < HPT_TIER_COUNT; t++)
            for (int k = 0; k < HPT_CAT_COUNT; k++) out->bytes[t][k] += eb[t][k];
    }
    dev[HPT_CAT_PARAMS] += (uint64_t)model_consts_floats(c) * 4; /* the arch's constants */
    /* --zero with accumulation sums the micro-batches' gradients apart (trainer.c): one more
     * gradient-sized buffer, allocated at the first step */
    if (o->training && (o->zero >= 0 || procs > 1) && o->accum > 1)
        dev[HPT_CAT_GRADS] += stage == 2 ? 0 : apart_bytes; /* stage 2: the run is the sum */
    uint64_t at[HPT_TIER_COUNT];
    int vc = hpt_offload_active(&o->offload) ? model_vocab_chunk(c, &o->offload)
             : o->training && o->lora.r > 0 ? -model_frozen_vocab_chunk(c, o->lora.base) : 0;
    HPT_CHECK(model_act_tier_bytes_vc(c, o->B, o->T, &o->act, vc, at));
    size_t acts = (size_t)at[HPT_TIER_DEVICE];
    if (acts == 0) return hpt_fail(HPT_ERR_OOM, "no memory to plan the activation arena");
    dev[HPT_CAT_ACTS] = acts;                         /* ensure_acts, at the first forward */
    dev[HPT_CAT_WORKSPACE] += model_matmul_ws_bytes(&o->act); /* with it: --matmul bf16 */
    /* activation offload (ensure_acts): the host buffer or the disk block (and the int8
     * staging buffer); disk I/O that is not 4096-aligned goes through the disk tier's 4 MiB
     * bounce buffer (host, io), allocated at the first such transfer: counted here */
    out->bytes[HPT_TIER_HOST][HPT_CAT_ACTS] = at[HPT_TIER_HOST];
    out->bytes[HPT_TIER_DISK][HPT_CAT_ACTS] = at[HPT_TIER_DISK];
    if (o->act.offload == HPT_OFFLOAD_DISK) out->bytes[HPT_TIER_HOST][HPT_CAT_IO] += 4u << 20;
    /* LoRA (model/lora.c): the base without gradients or optimizer state; the adapters, their
     * gradients, the frozen norms' sink, their state and their scratch (at the first forward) */
    if (o->training && o->lora.r > 0) {
        uint64_t lb[HPT_CAT_COUNT];
        HPT_CHECK(hpt_lora_bytes(c, &o->lora, o->B, o->T, 1, lb));
        dev[HPT_CAT_PARAMS] += lb[HPT_CAT_PARAMS];
        if (o->lora.base || o->lora.home) { /* --base-weights, --base-home (model/frozen.c): the
             * blocks stored narrow on their home; one fp32 block slot (and a staging block off
             * the device, two with prefetch, and on a GPU a disk home's pinned host block); a
             * narrow base's embeddings in bf16 with one fp32 vocabulary chunk */
            uint64_t fb[HPT_TIER_COUNT];
            model_frozen_bytes(c, o->lora.base, o->lora.home, o->device != 0,
                               model_frozen_reads_ahead(&o->lora, o->device), fb);
            dev[HPT_CAT_PARAMS] = dev[HPT_CAT_PARAMS] - np * 4 + fb[HPT_TIER_DEVICE];
            out->bytes[HPT_TIER_HOST][HPT_CAT_PARAMS] += fb[HPT_TIER_HOST];
            out->bytes[HPT_TIER_DISK][HPT_CAT_PARAMS] += fb[HPT_TIER_DISK];
        }
        dev[HPT_CAT_GRADS] = lb[HPT_CAT_GRADS];
        dev[HPT_CAT_OPTIM] = hpt_optim_lora_state_bytes(c, &o->lora, &o->adamw);
        dev[HPT_CAT_ACTS] += lb[HPT_CAT_ACTS];
    }
    int loaders = (o->no_data ? 0 : 1) + (o->has_val ? 1 : 0);
    dev[HPT_CAT_IO] = (uint64_t)loaders * loader_bytes(BT);
    /* packed examples (docs/packing.md): each loader's positions (B*T int32, io) and the
     * model's device copy of them (activations), from the first batch on */
    if (o->pack == HPT_PACK_ON && loaders) {
        dev[HPT_CAT_IO] += (uint64_t)loaders * BT * 4;
        dev[HPT_CAT_ACTS] += BT * 4;
    }
    if (o->training && o->sched.kind == HPT_SCHEDULE_HYBRID) HPT_CHECK(hybrid_bytes(o, out));
    for (int t = 0; t < HPT_TIER_COUNT; t++)
        for (int k = 0; k < HPT_CAT_COUNT; k++) out->peak_bytes[t] += out->bytes[t][k];
    out->num_params = np;
    out->activation_bytes = acts;
    /* Accumulation runs accum forwards and backwards of B sequences per optimizer step into
     * the same gradients: memory is that of B (above), tokens and FLOPs per step scale. */
    out->tokens_per_step = BT * (uint64_t)(o->accum > 1 ? o->accum : 1);

    /* FLOPs per token, matrix multiplies and attention (elementwise work is left out): the
     * architecture's count (its flops_per_token, model/arch.h: GEMMs over the blocks' weights and
     * the head at 2 FLOPs per multiply-add, causal attention 2*C*(T+1) per token and layer). Backward
     * does twice the forward's work in both (two GEMMs per forward GEMM; four dot products per
     * (query, key) pair). */
    out->flops_per_token_fwd = model_flops_per_token(c, o->T);
    out->flops_per_token = o->training ? 3.0 * out->flops_per_token_fwd : out->flops_per_token_fwd;
    if (o->training && o->lora.r > 0) { /* LoRA: no weight gradients for the base, the adapters' */
        double dw = 0.0, ad = 0.0;
        HPT_CHECK(model_lora_flops(c, &o->lora, &dw, &ad));
        out->flops_per_token += ad - dw;
    }
    return HPT_OK;
}

hpt_status hpt_plan_at_seq(const hpt_plan_opts *o, int T, hpt_plan_opts *out) {
    *out = *o;
    out->T = T;
    if (T > o->cfg.maxT) {
        if (o->cfg.arch == HPT_ARCH_GPT2)
            return hpt_fail(HPT_ERR_SHAPE, "sequence length %d exceeds the model's maxT %d: "
                            "GPT-2's learned position table (wpe) has maxT rows", T, o->cfg.maxT);
        out->cfg.maxT = T; /* rotary: the tables grow with maxT, and are counted */
    }
    return HPT_OK;
}

/* The device peak of o with B and T replaced (past a rotary model's maxT, maxT raised to T:
 * hpt_plan_at_seq); 0 if the estimator refuses that point. */
static uint64_t peak_at(const hpt_plan_opts *o, int B, int T) {
    hpt_plan_opts p;
    if (hpt_plan_at_seq(o, T, &p) != HPT_OK) return 0;
    p.B = B;
    hpt_estimate e;
    if (hpt_plan_estimate(&p, &e) != HPT_OK) return 0;
    return e.peak_bytes[HPT_TIER_DEVICE];
}

static int fits_at(const hpt_plan_opts *o, int B, int T, uint64_t budget, uint64_t *peak) {
    *peak = peak_at(o, B, T);
    return *peak > 0 && *peak <= budget;
}

/* The largest x in [1, hi] whose peak fits the budget, assuming the peak grows with x (it
 * does with B and with T); 0 if x = 1 does not fit. *peak_out gets the peak at the answer.
 * The peak is affine in B and convex in T, so the chord between x = 1 and x = hi is a good
 * first guess (exact for B up to alignment, below the answer for T); from there a galloping
 * search and a bisection finish: a handful of estimates, each costing one arena plan (25 ms
 * for L = 80), instead of a blind bisection over [1, 1 << 20]. */
static int search(const hpt_plan_opts *o, int vary_B, int fixed, int hi, uint64_t budget,
                  uint64_t *peak_out) {
    uint64_t pk;
#define FITS(x) (vary_B ? fits_at(o, (x), fixed, budget, &pk) : fits_at(o, fixed, (x), budget, &pk))
    *peak_out = 0;
    if (!FITS(1)) return 0;
    uint64_t p1 = pk;
    if (hi <= 1 || FITS(hi)) {
        *peak_out = pk;
        return hi < 1 ? 1 : hi;
    }
    uint64_t phi = pk; /* > budget, or 0 where the estimator refuses hi */
    long g = 1;
    if (phi > p1)
        g = 1 + (long)((double)(budget - p1) / (double)(phi - p1) * (double)(hi - 1));
    if (g < 1) g = 1;
    if (g >= hi) g = hi - 1;
    int lo, up;
    uint64_t lo_peak;
    if (FITS((int)g)) { /* gallop up: g+1, g+2, g+4, ... */
        lo = (int)g;
        lo_peak = pk;
        up = hi;
        for (long step = 1;; step *= 2) {
            long nx = lo + step < up ? lo + step : up;
            if (nx >= up) break;
            if (!FITS((int)nx)) { up = (int)nx; break; }
            lo = (int)nx;
            lo_peak = pk;
        }
    } else { /* gallop down: g-1, g-2, g-4, ... (1 fits) */
        up = (int)g;
        lo = 1;
        lo_peak = p1;
        for (long step = 1;; step *= 2) {
            long nx = up - step > 1 ? up - step : 1;
            if (nx <= 1) break;
            if (FITS((int)nx)) { lo = (int)nx; lo_peak = pk; break; }
            up = (int)nx;
        }
    }
    while (up - lo > 1) {
        int mid = lo + (up - lo) / 2;
        if (FITS(mid)) { lo = mid; lo_peak = pk; }
        else up = mid;
    }
#undef FITS
    *peak_out = lo_peak;
    return lo;
}

hpt_status hpt_plan_fit_budget(const hpt_plan_opts *o, uint64_t budget_bytes, hpt_plan_fit *out) {
    memset(out, 0, sizeof *out);
    hpt_estimate e;
    HPT_CHECK(hpt_plan_estimate(o, &e));
    const uint64_t *dev = e.bytes[HPT_TIER_DEVICE];
    out->peak_bytes = e.peak_bytes[HPT_TIER_DEVICE];
    out->fits = budget_bytes == 0 || out->peak_bytes <= budget_bytes;
    out->fixed_bytes = dev[HPT_CAT_PARAMS] + dev[HPT_CAT_GRADS] + dev[HPT_CAT_OPTIM];
    out->min_peak_bytes = peak_at(o, 1, 1);
    uint64_t budget = budget_bytes ? budget_bytes : UINT64_MAX;
    out->max_B = search(o, 1, o->T, 1 << 20, budget, &out->max_B_peak_bytes);
    out->max_T = search(o, 0, o->B, o->cfg.maxT, budget, &out->max_T_peak_bytes);
    out->max_T_B1 = search(o, 0, 1, o->cfg.maxT, budget, &out->max_T_B1_peak_bytes);
    return HPT_OK;
}

hpt_status hpt_plan_max_seq(const hpt_plan_opts *o, uint64_t budget_bytes, int limit, int *T,
                            uint64_t *peak_bytes) {
    *T = 0, *peak_bytes = 0;
    if (limit <= 0) limit = o->cfg.maxT;
    if (limit > HPT_MAX_SEQ_LIMIT) limit = HPT_MAX_SEQ_LIMIT;
    if (limit > o->cfg.maxT && o->cfg.arch == HPT_ARCH_GPT2)
        return hpt_fail(HPT_ERR_SHAPE, "a sequence limit of %d passes the model's maxT %d: GPT-2's "
                        "learned position table (wpe) has maxT rows, no position past it", limit,
                        o->cfg.maxT);
    hpt_plan_opts p = *o;
    p.T = 1; /* the search's points are its own; o's T may be past maxT */
    *T = search(&p, 0, o->B, limit, budget_bytes ? budget_bytes : UINT64_MAX, peak_bytes);
    return HPT_OK;
}

/* "512 B", "12.3 KiB", "45.6 MiB", "7.89 GiB", "1.23 TiB" */
static const char *fmt_size(char buf[32], uint64_t b) {
    double x = (double)b;
    if (b < 1024) snprintf(buf, 32, "%llu B", (unsigned long long)b);
    else if (x < 1048576.0) snprintf(buf, 32, "%.1f KiB", x / 1024.0);
    else if (x < 1073741824.0) snprintf(buf, 32, "%.1f MiB", x / 1048576.0);
    else if (x < 1099511627776.0) snprintf(buf, 32, "%.2f GiB", x / 1073741824.0);
    else snprintf(buf, 32, "%.2f TiB", x / 1099511627776.0);
    return buf;
}

hpt_status hpt_plan_check_budget(const hpt_plan_opts *o, uint64_t budget_bytes,
                                 uint64_t live_bytes) {
    if (budget_bytes == 0) return HPT_OK;
    hpt_estimate e;
    HPT_CHECK(hpt_plan_estimate(o, &e));
    const uint64_t *dev = e.bytes[HPT_TIER_DEVICE];
    uint64_t peak = e.peak_bytes[HPT_TIER_DEVICE];
    if (live_bytes <= budget_bytes && peak <= budget_bytes - live_bytes) return HPT_OK;
    uint64_t room = live_bytes < budget_bytes ? budget_bytes - live_bytes : 0;
    hpt_plan_fit fit;
    memset(&fit, 0, sizeof fit);
    if (room) HPT_CHECK(hpt_plan_fit_budget(o, room, &fit));
    char b[12][32];
    char msg[2048];
    int n = snprintf(msg, sizeof msg,
                     "device budget %s (%llu bytes) is too small for B=%d T=%d (%s): estimated "
                     "peak %s (%llu bytes) = params %s + grads %s + optim %s + acts %s + io %s",
                     fmt_size(b[0], budget_bytes), (unsigned long long)budget_bytes, o->B, o->T,
                     o->training ? "training" : "forward only", fmt_size(b[1], peak),
                     (unsigned long long)peak,
                     fmt_size(b[2], dev[HPT_CAT_PARAMS]), fmt_size(b[3], dev[HPT_CAT_GRADS]),
                     fmt_size(b[4], dev[HPT_CAT_OPTIM]), fmt_size(b[5], dev[HPT_CAT_ACTS]),
                     fmt_size(b[6], dev[HPT_CAT_IO]));
    if (live_bytes && n < (int)sizeof msg)
        n += snprintf(msg + n, sizeof msg - (size_t)n, ", with %s already allocated",
                      fmt_size(b[7], live_bytes));
    if (n < (int)sizeof msg) {
        if (fit.max_B > 0 && fit.max_T > 0)
            snprintf(msg + n, sizeof msg - (size_t)n, "; it fits with --batch %d (peak %s) or "
                     "--seq %d (peak %s)", fit.max_B, fmt_size(b[8], fit.max_B_peak_bytes),
                     fit.max_T, fmt_size(b[9], fit.max_T_peak_bytes));
        else if (fit.max_B > 0)
            snprintf(msg + n, sizeof msg - (size_t)n, "; it fits with --batch %d (peak %s)",
                     fit.max_B, fmt_size(b[8], fit.max_B_peak_bytes));
        else if (fit.max_T > 0 && fit.max_T_B1 > fit.max_T)
            snprintf(msg + n, sizeof msg - (size_t)n, "; it fits with --seq %d (peak %s) or "
                     "--batch 1 --seq %d (peak %s)", fit.max_T, fmt_size(b[9], fit.max_T_peak_bytes),
                     fit.max_T_B1, fmt_size(b[10], fit.max_T_B1_peak_bytes));
        else if (fit.max_T > 0)
            snprintf(msg + n, sizeof msg - (size_t)n, "; it fits with --seq %d (peak %s)",
                     fit.max_T, fmt_size(b[9], fit.max_T_peak_bytes));
        else if (fit.max_T_B1 > 0)
            snprintf(msg + n, sizeof msg - (size_t)n, "; it fits with --batch 1 --seq %d "
                     "(peak %s)", fit.max_T_B1, fmt_size(b[10], fit.max_T_B1_peak_bytes));
        else
            snprintf(msg + n, sizeof msg - (size_t)n, "; even --batch 1 --seq 1 needs %s: the "
                     "model itself (params, grads and optimizer state: %s) is too large for "
                     "this budget", fmt_size(b[10], peak_at(o, 1, 1)),
                     fmt_size(b[11], dev[HPT_CAT_PARAMS] + dev[HPT_CAT_GRADS] +
                                         dev[HPT_CAT_OPTIM]));
        n = (int)strlen(msg);
    }
    /* the memory techniques, one at a time, at this batch and sequence */
    enum { N_ALT = 10 };
    hpt_plan_opts alt[N_ALT];
    const char *flag[N_ALT] = {"--recompute full", "--act-offload host", "--state-bits 8",
                               "--recompute selective --act-offload host --act-compress int8",
                               "--head-chunk 128", "--fused-update",
                               "--offload host --fused-update",
                               "--offload disk --fused-update (with --offload-dir)",
                               "--mlp-tile 1024", "--recompute full --act-offload host"};
    for (int i = 0; i < N_ALT; i++) alt[i] = *o;
    alt[4].act.head_chunk = 128;
    alt[8].act.mlp_tile = HPT_AUTO_MLP_TILE;
    alt[0].act.recompute = HPT_RECOMPUTE_FULL;
    alt[0].act.every = 1;
    alt[0].act.offload = HPT_OFFLOAD_NONE;
    alt[1].act.offload = HPT_OFFLOAD_HOST;
    alt[9].act = alt[0].act;
    alt[9].act.offload = HPT_OFFLOAD_HOST;
    alt[2].adamw.state_bits = 8;
    alt[3].act.recompute = HPT_RECOMPUTE_SELECTIVE;
    alt[3].act.offload = HPT_OFFLOAD_HOST;
    alt[3].act.compress = HPT_COMPRESS_INT8;
    for (int i = 5; i < 8; i++) { /* the offload engine (host, disk: AdamW fp32 only) */
        alt[i].offload = hpt_offload_defaults();
        alt[i].offload.fused = 1;
        alt[i].offload.params = alt[i].offload.optim = i == 5 ? HPT_TIER_DEVICE
                                                   : i == 6 ? HPT_TIER_HOST : HPT_TIER_DISK;
    }
    const char *sep = "; at this batch and sequence: ";
    for (int i = 0; i < N_ALT && n < (int)sizeof msg; i++) {
        hpt_estimate ea;
        if (i == 9 && o->act.recompute == HPT_RECOMPUTE_FULL) continue; /* alt[1] is it */
        if (hpt_plan_estimate(&alt[i], &ea) != HPT_OK) continue;
        uint64_t pa = ea.peak_bytes[HPT_TIER_DEVICE];
        if (pa >= peak) continue; /* no saving (already chosen, or not applicable) */
        n += snprintf(msg + n, sizeof msg - (size_t)n, "%s%s %s (peak %s)", sep, flag[i],
                      pa <= room ? "fits" : "does not fit", fmt_size(b[11], pa));
        sep = ", ";
    }
    return hpt_fail(HPT_ERR_OOM, "%s", msg);
}
