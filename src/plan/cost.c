/* cost.c: a plan's predicted training step, in seconds, from this machine's measured rates
 * (calibrate.c) and the plan's work and bytes: forward, backward, recompute, pointwise passes,
 * the update, activation offload and the offload engine's loads, write-backs and updates
 * (overlapped by a worker thread, or inline as engine.c runs them), an architecture with an op
 * table (hpt_arch.plan) at its own rates when calibrated, a --matmul bf16 plan's GEMMs and
 * flash attention at the bf16 rates (when the file has them). docs/planner.md, "The cost
 * model", gives each term's formula.
 * Invariants: the work comes from the architecture and the estimator (model_flops_per_token,
 * the tensor table, the arena plan), never restated here; library code, nothing allocated
 * through hpt_mem; the result depends only on (o, c), so the search's choice is deterministic
 * for a given calibration file. */
#include "core/choices.h"
#include "core/core.h"
#include "model/arch.h"
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A GEMM rate at model width C: linear in C between the measured widths, flat outside. */
static double gemm_rate_C(const int *Cs, const double *r, int C) {
    if (C <= Cs[0]) return r[0];
    for (int i = 1; i < HPT_CAL_GEMM_SIZES; i++)
        if (C <= Cs[i]) {
            double f = (double)(C - Cs[i - 1]) / (double)(Cs[i] - Cs[i - 1]);
            return r[i - 1] + f * (r[i] - r[i - 1]);
        }
    return r[HPT_CAL_GEMM_SIZES - 1];
}

/* The weight of the row count measured at index i + 1 against i for `rows` rows: linear in
 * log(rows) between the measured counts, flat outside; *i the lower index. */
static double rows_weight(const hpt_calibration *c, double rows, int *i) {
    *i = 0;
    if (rows <= c->gemm_rows[0]) return 0;
    for (int k = 1; k < HPT_CAL_GEMM_ROWS; k++)
        if (rows <= c->gemm_rows[k]) {
            *i = k - 1;
            return log(rows / c->gemm_rows[k - 1]) / log((double)c->gemm_rows[k] / c->gemm_rows[k - 1]);
        }
    *i = HPT_CAL_GEMM_ROWS - 2;
    return 1;
}

/* A block GEMM rate (GFLOP/s) at width C and `rows` rows; bwd 0 forward, 1 backward. */
static double gemm_rate(const hpt_calibration *c, int bwd, int C, double rows) {
    int i;
    double f = rows_weight(c, rows, &i);
    const double(*r)[HPT_CAL_GEMM_SIZES] = bwd ? c->gemm_bwd_gflops : c->gemm_fwd_gflops;
    return (1 - f) * gemm_rate_C(c->gemm_C, r[i], C) + f * gemm_rate_C(c->gemm_C, r[i + 1], C);
}

/* The head GEMM rate at `rows` rows. */
static double head_rate(const hpt_calibration *c, int bwd, double rows) {
    int i;
    double f = rows_weight(c, rows, &i);
    return (1 - f) * c->head_gflops[i][bwd] + f * c->head_gflops[i + 1][bwd];
}

/* An architecture's own block GEMM rate (GFLOP/s) at width C and `rows` rows from its n
 * measured widths (calibrate_arch.c): linear in C between neighbouring widths, flat outside. */
static double arch_gemm_rate(const hpt_calibration *c, const hpt_cal_arch *a, int n, int bwd, int C,
                             double rows) {
    int i, j = 1;
    double f = rows_weight(c, rows, &i), r[2];
    while (j < n - 1 && C > a->C[j]) j++;
    for (int k = 0; k < 2; k++) {
        if (n < 2) {
            r[k] = a->gemm_gflops[i + k][0][bwd];
            continue;
        }
        const double lo = a->gemm_gflops[i + k][j - 1][bwd], hi = a->gemm_gflops[i + k][j][bwd];
        double u = (double)(C - a->C[j - 1]) / (double)(a->C[j] - a->C[j - 1]);
        u = u < 0 ? 0 : u > 1 ? 1 : u;
        r[k] = lo + u * (hi - lo);
    }
    return (1 - f) * r[0] + f * r[1];
}

/* Whether the engine runs its jobs inline, on the compute thread and its team, serially with
 * the compute (src/offload/engine.c, inline_jobs): on the CPU backend with no home on disk and
 * one shard; HPT_ENGINE_WORKER=thread|inline forces either, as it does the engine's. */
int hpt_plan_engine_inline(const hpt_plan_opts *o) {
    const hpt_offload_opts *of = &o->offload;
    const char *env = getenv("HPT_ENGINE_WORKER");
    if (env && !strcmp(env, "thread")) return 0;
    if (env && !strcmp(env, "inline")) return 1;
    return of->params != HPT_TIER_DISK && of->grads != HPT_TIER_DISK && of->optim != HPT_TIER_DISK &&
           of->shards <= 1;
}

int hpt_plan_disk_homes(const hpt_plan_opts *o) {
    const hpt_offload_opts *of = &o->offload;
    if (!hpt_offload_active(of)) return 0;
    return (of->params == HPT_TIER_DISK) | (of->grads == HPT_TIER_DISK) << 1 |
           (of->optim == HPT_TIER_DISK) << 2;
}

/* 1 + the layout when c holds the engine's own disk rates for layout k (a training run's
 * counters); else 0. */
static int engine_rates(const hpt_calibration *c, int k) {
    return c->engine_disk_read_gbps[k] > 0 && c->engine_disk_write_gbps[k] > 0 ? 1 + k : 0;
}

/* Seconds of moving bytes to or from a home on tier t; the device's own memory costs nothing
 * to reach (0 seconds). The disk at the engine's own rates when c has them: the engine's
 * transfers ran about twice as fast as calibrate's here (docs/planner.md). */
static double tier_s(const hpt_calibration *c, int k, hpt_tier t, double bytes, int write) {
    if (bytes <= 0 || t == HPT_TIER_DEVICE) return 0;
    if (t == HPT_TIER_HOST) return bytes / (c->host_copy_gbps * 1e9);
    int e = engine_rates(c, k);
    double g = write ? (e ? c->engine_disk_write_gbps[k] : c->disk_write_gbps)
                     : (e ? c->engine_disk_read_gbps[k] : c->disk_read_gbps);
    return bytes / (g * 1e9);
}

static double maxd(double a, double b) { return a > b ? a : b; }

int hpt_calibration_for_device(const hpt_calibration *c, int device) {
    const int gpu = strncmp(c->device, "cuda", 4) == 0;
    return device ? gpu : !gpu;
}

const hpt_gpu_rates *hpt_gpu_rates_known(int i) {
    static const hpt_gpu_rates k[] = {
        {"NVIDIA H200", 51.2, 406, 775, "cuBLAS peaks measured by scripts/gpu_check.sh, 2026-11-28"},
    };
    return i >= 0 && i < (int)(sizeof k / sizeof k[0]) ? &k[i] : NULL;
}

/* The calibration a --matmul bf16 plan's GEMMs and attention are costed with: c with its block,
 * head and flash attention rates (the reference's and each architecture's) replaced by the
 * bf16 ones (hpt_calibration.bf16, hpt_cal_arch.gemm_bf16_gflops). An architecture with fp32
 * rates of its own but no bf16 ones (a hand-made file) keeps its own scaled by the reference
 * block's bf16/fp32 ratio at each of its widths; a T = 512 attention rate without its bf16
 * figure, likewise by the T = 128 ratio. */
static void bf16_view(const hpt_calibration *c, hpt_calibration *v) {
    *v = *c;
    const hpt_cal_bf16 *b = &c->bf16;
    memcpy(v->gemm_fwd_gflops, b->gemm_fwd_gflops, sizeof v->gemm_fwd_gflops);
    memcpy(v->gemm_bwd_gflops, b->gemm_bwd_gflops, sizeof v->gemm_bwd_gflops);
    memcpy(v->head_gflops, b->head_gflops, sizeof v->head_gflops);
    for (int d = 0; d < 2; d++) {
        v->attn_gflops[0][d] = b->flash_gflops[d];
        v->attn512_gflops[0][d] = b->flash512_gflops[d] > 0 ? b->flash512_gflops[d]
                                  : c->attn512_gflops[0][d] * b->flash_gflops[d] / c->attn_gflops[0][d];
    }
    for (int id = 0; id < HPT_CAL_ARCHS; id++) {
        hpt_cal_arch *a = &v->arch[id];
        if (a->C[0] <= 0) continue;
        if (a->bf16_C0 > 0) {
            memcpy(a->gemm_gflops, a->gemm_bf16_gflops, sizeof a->gemm_gflops);
            a->attn_gflops[0][0] = a->flash_bf16_gflops[0], a->attn_gflops[0][1] = a->flash_bf16_gflops[1];
            continue;
        }
        for (int r = 0; r < HPT_CAL_GEMM_ROWS; r++)
            for (int i = 0; i < HPT_CAL_ARCH_WIDTHS && a->C[i] > 0; i++)
                for (int d = 0; d < 2; d++)
                    a->gemm_gflops[r][i][d] *= gemm_rate(v, d, a->C[i], c->gemm_rows[r]) /
                                               gemm_rate(c, d, a->C[i], c->gemm_rows[r]);
        for (int d = 0; d < 2; d++) a->attn_gflops[0][d] *= b->flash_gflops[d] / c->attn_gflops[0][d];
    }
}

hpt_status hpt_plan_cost(const hpt_plan_opts *o, const hpt_calibration *c, hpt_cost *out) {
    uint64_t none[HPT_TIER_COUNT], mine[HPT_TIER_COUNT];
    hpt_act_opts d = hpt_act_defaults();
    d.attention = o->act.attention;
    HPT_CHECK(hpt_model_act_tier_bytes(&o->cfg, o->B, o->T, &d, none));
    HPT_CHECK(hpt_model_act_tier_bytes(&o->cfg, o->B, o->T, &o->act, mine));
    return hpt_plan_cost_acts(o, c, none[HPT_TIER_DEVICE], mine, out);
}

hpt_status hpt_plan_cost_acts(const hpt_plan_opts *o, const hpt_calibration *c, uint64_t none_arena,
                              const uint64_t aoff[HPT_TIER_COUNT], hpt_cost *out) {
    memset(out, 0, sizeof *out);
    /* --matmul bf16: the linear layers (the blocks', the head's, a LoRA base's) and flash
     * attention at the bf16 rates (cg); the rest, LoRA's adapters (fp32 GEMMs) among it, at
     * c's. A calibration without bf16 rates costs them at the fp32 ones, and says so. */
    const int mm_bf16 = o->act.matmul == HPT_MATMUL_BF16;
    hpt_calibration view;
    const hpt_calibration *cg = c;
    if (mm_bf16 && c->bf16.have) bf16_view(c, &view), cg = &view;
    out->bf16_at_fp32 = mm_bf16 && !c->bf16.have;
    const hpt_model_config *cfg = &o->cfg;
    const hpt_act_opts *act = &o->act;
    const hpt_offload_opts *of = &o->offload;
    int engine = hpt_offload_active(of);
    int base_home = o->lora.r > 0 ? o->lora.home : HPT_TIER_DEVICE; /* --base-home */
    int disk_used = act->offload == HPT_OFFLOAD_DISK || base_home == HPT_TIER_DISK ||
                    (engine && (of->params == HPT_TIER_DISK || of->grads == HPT_TIER_DISK ||
                                of->optim == HPT_TIER_DISK));
    if (disk_used && (c->disk_read_gbps <= 0 || c->disk_write_gbps <= 0))
        return hpt_fail(HPT_ERR_INVALID, "the calibration has no disk rates (calibrate with "
                        "--offload-dir DIR)");
    int T = o->T, L = cfg->L, m = o->accum > 1 ? o->accum : 1;
    int dk = hpt_plan_disk_homes(o); /* the layout whose engine rates apply */
    double tok = (double)o->B * T;
    /* the architecture's FLOPs: a + b (T + 1) per token without a sliding window, b (T + 1)
     * attention; with a window W < T, attention is the rest over the GEMMs' a */
    hpt_model_config full = *cfg;
    full.window = 0;
    double f1 = model_flops_per_token(&full, 1), f2 = model_flops_per_token(&full, 2);
    double b = f2 - f1, attn = b * (T + 1.0), gemm = model_flops_per_token(&full, T) - attn;
    if (cfg->window > 0 && cfg->window < T) attn = model_flops_per_token(cfg, T) - gemm;
    hpt_tensor_table tab;
    model_describe(cfg, &tab);
    double blk = (double)hpt_table_block_numel(&tab);
    double block_gemm = 2.0 * L * blk, head_gemm = maxd(0, gemm - block_gemm);
    double np = (double)(o->training && o->lora.r > 0 ? hpt_lora_num_params(cfg, &o->lora)
                                                      : hpt_model_config_num_params(cfg));
    out->tokens = tok, out->accum = m;
    out->gemm_flops_fwd = gemm * tok, out->block_gemm_flops_fwd = block_gemm * tok;
    out->attn_flops_fwd = attn * tok;
    /* the GEMMs run over the micro-batch's B*T rows (the head over its chunk's rows) */
    double hrows = act->head_chunk > 0 && act->head_chunk < tok ? act->head_chunk : tok;
    out->gemm_fwd_gflops = gemm_rate(cg, 0, cfg->C, tok);
    out->gemm_bwd_gflops = gemm_rate(cg, 1, cfg->C, tok);
    out->head_fwd_gflops = head_rate(cg, 0, hrows);
    out->head_bwd_gflops = head_rate(cg, 1, hrows);
    double Hf = out->head_fwd_gflops * 1e9, Hb = out->head_bwd_gflops * 1e9;
    int ak = act->attention == HPT_ATTN_PLAIN ? 1 : 0;
    /* attention's rate at T: measured at 128 and 512, linear in log T between, flat outside */
    double fa = 0;
    if (cg->attn512_gflops[ak][0] > 0 && T > 128) fa = T >= 512 ? 1 : log(T / 128.0) / log(4.0);
    out->attn_fwd_gflops = (1 - fa) * cg->attn_gflops[ak][0] + fa * cg->attn512_gflops[ak][0];
    out->attn_bwd_gflops = (1 - fa) * cg->attn_gflops[ak][1] + fa * cg->attn512_gflops[ak][1];
    /* an architecture with an op table at its own measured rates (calibrate_arch.c): its
     * GEMMs' shapes, and its attention at T = 128 scaled in T as the reference attention's
     * rate scales */
    const hpt_arch *A = hpt_arch_of(cfg);
    const hpt_arch_plan *ap = A ? A->plan : NULL;
    const hpt_cal_arch *own = ap && ap->n_cal >= 1 && cfg->arch >= 0 && cfg->arch < HPT_CAL_ARCHS &&
                              cg->arch[cfg->arch].C[0] > 0 ? &cg->arch[cfg->arch] : NULL;
    out->arch_rates = own != NULL;
    if (own) {
        out->gemm_fwd_gflops = arch_gemm_rate(cg, own, ap->n_cal, 0, cfg->C, tok);
        out->gemm_bwd_gflops = arch_gemm_rate(cg, own, ap->n_cal, 1, cfg->C, tok);
        out->attn_fwd_gflops *= own->attn_gflops[ak][0] / cg->attn_gflops[ak][0];
        out->attn_bwd_gflops *= own->attn_gflops[ak][1] / cg->attn_gflops[ak][1];
    }
    double Rf = out->gemm_fwd_gflops * 1e9, Rb = out->gemm_bwd_gflops * 1e9;
    /* LoRA's adapters' GEMMs are fp32 at any --matmul (be->gemm): the fp32 forward rate */
    double Ra = !mm_bf16 ? Rf : 1e9 * (own ? arch_gemm_rate(c, &c->arch[cfg->arch], ap->n_cal, 0, cfg->C, tok)
                                           : gemm_rate(c, 0, cfg->C, tok));
    double Raf = out->attn_fwd_gflops * 1e9, Rab = out->attn_bwd_gflops * 1e9;
    double Rm = c->mem_gbps * 1e9;

    /* compute, per micro-batch: the blocks and the rest (head, embeddings) apart, since the
     * engine overlaps transfers with the blocks' compute only */
    double fwd_blocks = tok * (block_gemm / Rf + attn / Raf), fwd_rest = tok * head_gemm / Hf;
    double bwd_blocks = tok * (2 * block_gemm / Rb + 2 * attn / Rab), bwd_rest = tok * 2 * head_gemm / Hb;
    /* LoRA (docs/lora.md): the frozen base's GEMMs compute dX only (no weight gradient: one
     * backward GEMM per forward one, the head's too), the adapters add their thin GEMMs
     * (model_lora_flops: forward and backward, at the forward's rate); only the adapters are
     * updated */
    const int lora = o->training && o->lora.r > 0;
    if (lora) {
        double dw = 0, ad = 0;
        HPT_CHECK(model_lora_flops(cfg, &o->lora, &dw, &ad));
        bwd_blocks = tok * (block_gemm / Rb + 2 * attn / Rab + ad / Ra);
        bwd_rest = tok * head_gemm / Hb;
    }
    /* the architecture's pointwise ops at their measured ns per element (per token), each
     * as often as a block runs it in the forward, the backward and a selective recomputation,
     * in its table's order, and the forward's other memory traffic (fwd_bytes). They replace
     * the block's share of the arena's memory passes below. */
    double op_fwd = 0, op_bwd = 0, op_sel = 0, layer_bytes = 0;
    if (own) {
        double fw = 0, bw = 0, sl = 0;
        for (int k = 0; k < ap->n_ops; k++) {
            const hpt_arch_op *op = &ap->ops[k];
            double w = op->per_token(cfg);
            if (op->fwd) fw += op->fwd * w * own->op_ns[k][0];
            if (op->bwd) bw += op->bwd * w * own->op_ns[k][1];
            if (op->sel) sl += op->sel * w * own->op_ns[k][0];
        }
        op_fwd = fw * 1e-9 + (ap->fwd_bytes ? ap->fwd_bytes(cfg) : 0.0) / (c->mem_gbps * 1e9);
        op_bwd = bw * 1e-9;
        op_sel = sl * 1e-9;
        /* the block's share of the arena: one layer's activations (the arena at L - 1) */
        hpt_model_config c1 = *cfg;
        c1.L = L - 1;
        uint64_t a1[HPT_TIER_COUNT];
        hpt_act_opts d = hpt_act_defaults();
        d.attention = act->attention;
        if (L > 1 && hpt_model_act_tier_bytes(&c1, o->B, T, &d, a1) == HPT_OK && none_arena > a1[HPT_TIER_DEVICE])
            layer_bytes = (double)(none_arena - a1[HPT_TIER_DEVICE]);
        fwd_blocks += tok * L * op_fwd;
        bwd_blocks += tok * L * op_bwd;
    }
    /* a tiled MLP (docs/activations.md): the backward reruns each tile's fc GEMM (at a tile's
     * rows' rate), and a full or every:N recomputation skips the MLP, which that rerun serves;
     * fc (C, H) and proj (F, C): GPT-2 H = F = FF (4C), the SwiGLU families H = 2FF */
    double mlp_bwd = 0, mlp_fwd = 0;
    if (act->mlp_tile > 0) {
        const double F = cfg->FF ? cfg->FF : 4.0 * cfg->C, H = cfg->arch == HPT_ARCH_GPT2 ? F : 2 * F;
        const double rows = act->mlp_tile < tok ? act->mlp_tile : tok;
        mlp_bwd = tok * L * 2.0 * cfg->C * H / (gemm_rate(cg, 0, cfg->C, rows) * 1e9);
        mlp_fwd = tok * L * 2.0 * cfg->C * (H + F) / Rf;
        bwd_blocks += mlp_bwd;
    }
    double rec = 0, rec_bytes = 0;
    if (act->recompute == HPT_RECOMPUTE_FULL || act->recompute == HPT_RECOMPUTE_EVERY)
        rec = maxd(0, fwd_blocks - mlp_fwd);
    else if (act->recompute == HPT_RECOMPUTE_SELECTIVE) {
        if (own) rec = tok * L * op_sel;
        else rec_bytes = tok * L * 2.0 * (2.0 * cfg->C + (cfg->FF ? cfg->FF : 4.0 * cfg->C)) * 4.0;
        if (ak) rec += tok * attn / Raf;
    }
    double rec_rest = 0;
    if (act->head_chunk > 0 || (engine && of->embeddings != HPT_EMB_FULL)) rec_rest = tok * head_gemm / Hf;
    /* pointwise: the activations a recompute-none arena holds, three times */
    double pw = (3.0 * ((double)none_arena - L * layer_bytes) + rec_bytes) * m + 2.0 * np * 4.0;
    /* activation offload and compression */
    double act_bytes = act->offload == HPT_OFFLOAD_HOST ? (double)aoff[HPT_TIER_HOST]
                     : act->offload == HPT_OFFLOAD_DISK ? (double)aoff[HPT_TIER_DISK] : 0;
    if (act->compress != HPT_COMPRESS_NONE) pw += 3.0 * (double)none_arena * m;
    if (lora && o->lora.base != HPT_BASE_F32) { /* a narrow base: each acquire widens its block
        * into the fp32 slot (frozen.c), in the forward and again in the backward: the stored
        * bytes read, 4 a weight written */
        uint64_t fb[HPT_TIER_COUNT];
        model_frozen_bytes(cfg, o->lora.base, HPT_TIER_DISK, 0, 0, fb); /* the blocks alone there */
        pw += m * 2.0 * ((double)L * 4.0 * blk + (double)fb[HPT_TIER_DISK]);
    }
    double act_out_s = 0, act_back_s = 0;
    if (act->offload == HPT_OFFLOAD_HOST) {
        act_out_s = act_bytes / (c->host_copy_gbps * 1e9);
        act_back_s = act_out_s;
    } else if (act->offload == HPT_OFFLOAD_DISK) {
        act_out_s = act_bytes / (c->disk_write_gbps * 1e9) + act_bytes / (c->disk_read_gbps * 1e9);
    }
    out->act_out_bytes = act_bytes * m;
    /* the update */
    int kind = o->adamw.optimizer, bits8 = o->adamw.state_bits == 8;
    double ns = c->optim_ns[kind][bits8] * 1e-9;
    out->params = np;
    out->optim_ns = ns * 1e9;
    out->pointwise_bytes = pw;

    double fwd = m * (fwd_blocks + fwd_rest), bwd = m * (bwd_blocks + bwd_rest);
    double recs = m * (rec + rec_rest), pws = pw / Rm, opt = np * ns;
    double total = fwd + bwd + recs + pws + opt + m * act_out_s;
    double transfer = m * act_out_s;
    if (base_home != HPT_TIER_DEVICE) { /* a LoRA base off the device (model/frozen.c): each
        * block read whole, in the forward and again in the backward; without prefetch waited
        * for when acquired, with it read beside the previous block's compute (a block then
        * costs max(compute, read), plus the compute the reading thread takes: share_loss per
        * second of memcpy from the host, disk_share_loss per second of disk reads) */
        uint64_t fb[HPT_TIER_COUNT];
        model_frozen_bytes(cfg, o->lora.base, base_home, o->device != 0, 0, fb); /* the home's bytes */
        double blk_s = tier_s(c, 0, (hpt_tier)base_home, (double)fb[base_home] / L, 0);
        double reads = m * 2.0 * L * blk_s;
        if (model_frozen_reads_ahead(&o->lora, o->device)) {
            double cf = fwd_blocks / L, cb = (bwd_blocks + rec) / L;
            double loss = base_home == HPT_TIER_DISK ? c->disk_share_loss : c->share_loss;
            total += m * L * (maxd(0, blk_s - cf) + maxd(0, blk_s - cb)) + loss * reads;
        } else {
            total += reads;
        }
        transfer += reads;
        out->load_bytes = m * 2.0 * (double)fb[base_home];
    }
    /* the copies back of host-offloaded activations run beside the backward */
    if (act_back_s > 0) {
        transfer += m * act_back_s;
        total += m * maxd(0, act_back_s - (bwd_blocks + bwd_rest));
    }
    if (engine) {
        out->block_params = blk * L;
        double wb = of->weights == HPT_BW_BF16_SR ? 2 : 4; /* Kahan: bf16 and its compensation */
        double gw = of->grad_home == HPT_GH_FP32 ? 4 : 2;
        int K = of->max_active < L ? of->max_active : L, P = of->prefetch;
        double load = tier_s(c, dk, of->params, blk * wb, 0);
        double cf = fwd_blocks / L, cb = (bwd_blocks + rec) / L;
        /* The worker shares the CPU with the compute threads: its CPU-bound work (memcpy from
         * and to host homes, in-memory updates at one thread: wcpu) costs the compute team
         * share_loss seconds per second of it (calibrated: about 0 with a spare core; 1 or
         * more when the team takes every core, since a statically scheduled team runs at its
         * slowest thread's speed and waits spinning). Disk waits take no CPU. A block then
         * costs max(compute + share_loss * wcpu, worker). */
        int cores = c->cores > 0 ? c->cores : c->threads;
        double n = c->share_loss > 0 ? 1.0 / c->share_loss : c->threads >= cores ? 1 : 1e30;
        double wns = c->worker_ns[kind][bits8] > 0 ? c->worker_ns[kind][bits8] * 1e-9 : ns;
        double lcpu = of->params == HPT_TIER_HOST ? load : 0;
        /* The worker's disk transfers cost the compute beside them too: the worker wakes at
         * each (and checksums its pages), taking a core from the team for a moment; calibrated
         * per second of transfer (disk_share_loss: 0.22-0.77 measured here, under other
         * sessions' load). */
        double dl = engine_rates(c, dk) ? c->engine_disk_loss[dk] : c->disk_share_loss;
        double ldisk = of->params == HPT_TIER_DISK ? load : 0;
        if (disk_used) { /* which disk rates this plan was costed at */
            out->disk_from_engine = engine_rates(c, dk);
            out->disk_read_gbps = engine_rates(c, dk) ? c->engine_disk_read_gbps[dk] : c->disk_read_gbps;
            out->disk_write_gbps = engine_rates(c, dk) ? c->engine_disk_write_gbps[dk] : c->disk_write_gbps;
            out->disk_loss = dl;
        }
        /* forward: L loads; backward: the blocks not still resident */
        double f_work = P >= 1 ? L * maxd(cf + lcpu / n + dl * ldisk, load) + load : L * (cf + load);
        double reload = (double)(L - K) / L;
        double wk = load * reload, ck = cb, wcpu = lcpu * reload, wdisk = ldisk * reload;
        double st_in = 0, st_out = 0;
        if (of->fused) {
            if (of->optim == HPT_TIER_DISK) { /* the worker streams m, v; the compute thread updates */
                double mv = tier_s(c, dk, HPT_TIER_DISK, blk * 8, 0) + tier_s(c, dk, HPT_TIER_DISK, blk * 8, 1);
                double pwb = tier_s(c, dk, of->params, blk * wb, 1);
                wk += mv + pwb;
                wdisk += mv + (of->params == HPT_TIER_DISK ? pwb : 0);
                ck += blk * ns;
                st_in = blk * 8 * L, st_out = blk * (8 + wb) * L;
            } else if (of->optim == HPT_TIER_DEVICE && of->params == HPT_TIER_DEVICE) {
                ck += blk * ns; /* no homes: the compute thread updates in the backward */
            } else { /* the worker updates in place, then writes the weights home */
                double wback = tier_s(c, dk, of->params, blk * wb, 1);
                wk += blk * wns + wback;
                wdisk += of->params == HPT_TIER_DISK ? wback : 0;
                wcpu += blk * wns + (of->params == HPT_TIER_HOST ? wback : 0);
                st_out = of->params != HPT_TIER_DEVICE ? blk * wb * L : 0;
            }
        } else {
            double gout = tier_s(c, dk, of->grads, blk * gw, 1);
            wk += gout;
            wcpu += of->grads == HPT_TIER_HOST ? gout : 0;
            wdisk += of->grads == HPT_TIER_DISK ? gout : 0;
        }
        double b_work = P >= 1 ? L * maxd(ck + wcpu / n + dl * wdisk, wk) : L * (ck + wk);
        /* Inline (no disk home, the CPU backend: engine.c's inline_jobs): no worker thread; each
         * job runs on the compute thread and its team when queued, serially with the compute:
         * loads and write-backs as the team's copies (bf16 weights: a widening pass, 2 bytes
         * read and 4 written per weight), the fused update at the team's rate. Nothing
         * overlaps and nothing is lost beside a worker. */
        int inl = hpt_plan_engine_inline(o);
        out->engine_inline = inl;
        if (inl) {
            int bf = of->weights != HPT_BW_FP32;
            double hp = of->params == HPT_TIER_HOST
                            ? (bf ? blk * (wb + 4) / Rm : tier_s(c, dk, HPT_TIER_HOST, blk * 4, 0)) : 0;
            double bk = ck + hp * reload; /* ck has the update when every home is the device's */
            if (of->fused && !(of->optim == HPT_TIER_DEVICE && of->params == HPT_TIER_DEVICE))
                bk += blk * ns + hp; /* the update, then the weights home (bf16: widened again) */
            else if (!of->fused && of->grads == HPT_TIER_HOST)
                bk += gw == 4 ? tier_s(c, dk, HPT_TIER_HOST, blk * 4, 1) : blk * (4 + gw) / Rm;
            f_work = L * (cf + hp);
            b_work = L * bk;
        }
        double upd = 0, upd_own = 0, upd_disk = 0;
        if (!of->fused) { /* streamed after the backward, block by block */
            double io = 0;
            if (of->params == HPT_TIER_DISK || of->grads == HPT_TIER_DISK || of->optim == HPT_TIER_DISK) {
                int mv = hpt_optim_mv_homes(&o->adamw) && of->optim == HPT_TIER_DISK;
                io = tier_s(c, dk, of->params, blk * wb, 0) + tier_s(c, dk, of->grads, blk * gw, 0) +
                     (mv ? tier_s(c, dk, HPT_TIER_DISK, blk * 8, 0) + tier_s(c, dk, HPT_TIER_DISK, blk * 8, 1) : 0) +
                     tier_s(c, dk, of->params, blk * wb, 1);
                st_in = blk * (wb + gw + (mv ? 8 : 0)) * L, st_out = blk * (wb + (mv ? 8 : 0)) * L;
            }
            upd = L * maxd(blk * ns + dl * io, io) + io;
            upd_own = L * blk * ns, upd_disk = L * io;
        }
        double rest_opt = (np - blk * L) * ns;
        double eng_total = m * (f_work + b_work) + upd;
        /* replace the blocks' compute and the update in total by the engine's schedule */
        double outside = total - m * (fwd_blocks + bwd_blocks + rec) - opt + rest_opt;
        total = outside + eng_total;
        /* the compute thread's own work (what it does when it is not waiting), without the
         * loss beside the disk worker: the base against which a run's counters measure it */
        out->compute_s = outside + upd_own +
                         m * L * (P >= 1 ? cf + lcpu / n + ck + wcpu / n : cf + ck);
        out->disk_beside_s = (P >= 1 ? m * L * (ldisk + wdisk) : 0) + upd_disk;
        if (inl) out->compute_s = outside + eng_total, out->disk_beside_s = 0;
        double moved = m * (L + L * reload) * load + (of->fused ? 0 : m * L * tier_s(c, dk, of->grads, blk * gw, 1));
        transfer += moved + (upd > L * blk * ns ? upd - L * blk * ns : 0);
        out->load_bytes = m * (L + (L - K)) * blk * wb * (of->params != HPT_TIER_DEVICE);
        out->grad_out_bytes = of->fused ? 0 : m * L * blk * gw * (of->grads != HPT_TIER_DEVICE);
        out->state_in_bytes = st_in, out->state_out_bytes = st_out;
    }
    out->fwd_s = fwd, out->bwd_s = bwd, out->recompute_s = recs, out->pointwise_s = pws;
    out->optim_s = opt;
    out->transfer_s = transfer;
    out->total_s = total;
    if (!engine) out->compute_s = total; /* everything on the compute thread */
    out->exposed_s = maxd(0, total - (fwd + bwd + recs + pws + opt));
    if (!isfinite(total) || total <= 0)
        return hpt_fail(HPT_ERR_INVALID, "the calibration gives no finite step time");
    return HPT_OK;
}
