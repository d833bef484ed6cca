/* test_plan_auto.c: the calibration file, the cost model's arithmetic and the automatic plan
 * search (src/plan/calibrate.c, cost.c, auto.c), deterministically: a fake calibration file
 * gives the rates, so nothing is timed.
 *
 * What must hold: every plan the search keeps fits every tier by the exact estimator (checked
 * again here); with rates chosen so one choice is faster by construction (the formula's inputs:
 * attention FLOPs > 0 at a far higher rate for one kind; an update 1000 times cheaper with
 * 8-bit state), the search picks it; the lossy choices appear only with allow_lossy; disk
 * homes only with allow_disk; the plan's printed flags, set one by one, give the plan back. */
#include "core/core.h"
#include "model/model.h"
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A calibration file: the block GEMMs at g64 GFLOP/s at 64 rows and g256 at 256 rows (every
 * width), the head's at h64 and h256, the given attention rates (flash, plain) and AdamW ns per
 * param (32-bit, 8-bit); every other rate a round figure. */
static const char *g_cal_extra = ""; /* more JSON members, each with a leading comma */
static void write_cal_rows(const char *path, double g64, double g256, double h64, double h256,
                           double flash, double plain, double ns32, double ns8) {
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"version\":2,\"threads\":1,\"gemm\":[");
    static const int Cs[HPT_CAL_GEMM_SIZES] = {512, 768, 1024, 1280, 1600, 2048};
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < HPT_CAL_GEMM_SIZES; i++)
            fprintf(f, "%s{\"rows\":%d,\"C\":%d,\"fwd_gflops\":%g,\"bwd_gflops\":%g}", r + i ? "," : "",
                    r ? 256 : 64, Cs[i], r ? g256 : g64, r ? g256 : g64);
    fprintf(f, "],\"head\":[{\"rows\":64,\"fwd_gflops\":%g,\"bwd_gflops\":%g},"
               "{\"rows\":256,\"fwd_gflops\":%g,\"bwd_gflops\":%g}],", h64, h64, h256, h256);
    fprintf(f, "\"flash_fwd_gflops\":%g,\"flash_bwd_gflops\":%g,\"plain_fwd_gflops\":%g,"
               "\"plain_bwd_gflops\":%g,\"mem_gbps\":10,\"optim_ns_per_param\":{"
               "\"adamw\":{\"32\":%g,\"8\":%g},\"lion\":{\"32\":1,\"8\":1},\"adam-mini\":{\"32\":1,\"8\":1},"
               "\"sgd\":{\"32\":1,\"8\":1}},\"host_copy_gbps\":5,\"disk_read_gbps\":1,"
               "\"disk_write_gbps\":1%s}\n", flash, flash, plain, plain, ns32, ns8, g_cal_extra);
    fclose(f);
}

/* Every GEMM at 10 GFLOP/s. */
static void write_cal(const char *path, double flash, double plain, double ns32, double ns8) {
    write_cal_rows(path, 10, 10, 10, 10, flash, plain, ns32, ns8);
}

static hpt_plan_opts small_model(void) {
    hpt_plan_opts o = hpt_plan_defaults();
    hpt_model_config_parse("gpt2:L=4,C=64,NH=4,V=256,T=64", &o.cfg);
    o.B = 2;
    o.T = 64;
    return o;
}

static int is_lossy(const hpt_plan_opts *o) {
    return o->adamw.state_bits == 8 || o->offload.weights != HPT_BW_FP32 ||
           o->act.compress != HPT_COMPRESS_NONE || o->act.matmul == HPT_MATMUL_BF16;
}

static int uses_disk(const hpt_plan_opts *o) {
    int eng = hpt_offload_active(&o->offload);
    return o->act.offload == HPT_OFFLOAD_DISK ||
           (eng && (o->offload.params == HPT_TIER_DISK || o->offload.optim == HPT_TIER_DISK ||
                    o->offload.grads == HPT_TIER_DISK));
}

/* Every kept plan: fits by a fresh estimate; the sequences per step are kept. */
static void check_kept(const hpt_auto_result *r, const hpt_plan_opts *base, int64_t S) {
    for (int i = 0; i < r->n; i++) {
        const hpt_plan_opts *o = &r->cand[i].o;
        hpt_estimate e;
        CHECK_OK(hpt_plan_estimate(o, &e));
        for (int t = 0; t < HPT_TIER_COUNT; t++)
            CHECK(!base->budget_bytes[t] || e.peak_bytes[t] <= base->budget_bytes[t]);
        CHECK((int64_t)o->B * (o->accum > 1 ? o->accum : 1) == S);
        CHECK(o->T == base->T);
        if (i) CHECK(r->cand[i].cost.total_s >= r->cand[i - 1].cost.total_s);
    }
    for (int i = 0; i < r->n_nofit; i++) CHECK(!r->nofit[i].fits);
}

/* Splits the printed flags and sets them one by one on a default plan. */
static hpt_plan reparse(const char *flags) {
    hpt_plan p = hpt_plan_default_choices();
    char buf[2048];
    snprintf(buf, sizeof buf, "%s", flags);
    char *save = NULL, *tok = strtok_r(buf, " ", &save);
    while (tok) {
        CHECK(!strncmp(tok, "--", 2));
        const char *name = tok + 2;
        int takes = 0;
        for (int i = 0;; i++) {
            const char *n = hpt_plan_option_name(i, &takes);
            if (!n) { CHECK_MSG(0, "unknown flag %s", tok); return p; }
            if (!strcmp(n, name)) break;
        }
        char *val = takes ? strtok_r(NULL, " ", &save) : NULL;
        CHECK_OK(hpt_plan_set(&p, name, val));
        tok = strtok_r(NULL, " ", &save);
    }
    return p;
}

static void check_reproduces(const hpt_plan_opts *o) {
    char flags[2048];
    CHECK_OK(hpt_plan_print(&o->plan, flags, sizeof flags));
    hpt_plan p = reparse(flags);
    CHECK(!memcmp(&p.act, &o->act, sizeof p.act));
    CHECK(!memcmp(&p.adamw, &o->adamw, sizeof p.adamw));
    CHECK(!memcmp(&p.offload, &o->offload, sizeof p.offload));
    CHECK(p.accum == (o->accum ? o->accum : 1) || (p.accum == 1 && o->accum == 0));
    CHECK(!memcmp(p.budget_bytes, o->budget_bytes, sizeof p.budget_bytes));
    CHECK(!memcmp(&p.lora, &o->lora, sizeof p.lora));
}

/* --lora (docs/lora.md): the planner chooses the frozen base's storage and home. Exact choices
 * keep it f32 (bf16, int8 and nf4 round it: allow_lossy only); the device home while the device
 * budget allows (the host's copies cost time), the host's when only that fits, the disk's only
 * with allow_disk and a directory; each kept plan fits by the estimator and prints as chosen. */
/* The cost of a LoRA step: the frozen base's backward is one GEMM per forward GEMM (dX, no
 * weight gradient), the update over the adapters alone, and a narrow base adds the widening
 * passes' bytes; the full step's parts from the same rates. */
static void check_lora_cost(const hpt_calibration *cal) {
    hpt_plan_opts full = hpt_plan_defaults();
    CHECK_OK(hpt_model_config_parse("llama:L=4,C=256,NH=4,NKV=2,FF=512,V=4096,T=64", &full.cfg));
    full.B = 1, full.T = 64;
    hpt_plan_opts lo = full;
    CHECK_OK(hpt_lora_parse("r=4", &lo.lora));
    hpt_cost cf, cl, cn;
    CHECK_OK(hpt_plan_cost(&full, cal, &cf));
    CHECK_OK(hpt_plan_cost(&lo, cal, &cl));
    double dw = 0, ad = 0;
    CHECK_OK(model_lora_flops(&lo.cfg, &lo.lora, &dw, &ad));
    /* the blocks' and the head's backward GEMMs halve (dX alone); the adapters' FLOPs come
     * at the forward's rate */
    double less = cf.block_gemm_flops_fwd / (cf.gemm_bwd_gflops * 1e9) +
                  (cf.gemm_flops_fwd - cf.block_gemm_flops_fwd) / (cf.head_bwd_gflops * 1e9) -
                  cl.tokens * ad / (cl.gemm_fwd_gflops * 1e9);
    CHECK(less > 0 && fabs((cf.bwd_s - cl.bwd_s) - less) < 1e-9 * cf.bwd_s);
    CHECK(cl.params == (double)hpt_lora_num_params(&lo.cfg, &lo.lora));
    CHECK(cl.optim_s < cf.optim_s * cl.params / cf.params * 1.0001 + 1e-12);
    lo.lora.base = HPT_BASE_NF4;
    CHECK_OK(hpt_plan_cost(&lo, cal, &cn));
    uint64_t fb[HPT_TIER_COUNT];
    model_frozen_bytes(&lo.cfg, HPT_BASE_NF4, HPT_TIER_DISK, 0, 0, fb);
    hpt_tensor_table tab;
    model_describe(&lo.cfg, &tab);
    double widen = 2.0 * ((double)lo.cfg.L * 4.0 * (double)hpt_table_block_numel(&tab) +
                          (double)fb[HPT_TIER_DISK]);
    CHECK(fabs(cn.pointwise_bytes - cl.pointwise_bytes - widen) < 1.0 && cn.total_s > cl.total_s);
    /* the base on the host, read ahead (--base-prefetch 1) or not: the same reads; with them
     * beside the compute the step costs less while the reader's share loss is below 1 (each
     * block's compute hides some of its read), and more than the base on the device by at
     * least that share of the reads */
    hpt_cost ch[2];
    lo.lora.home = HPT_TIER_HOST;
    for (int pf = 0; pf < 2; pf++) {
        lo.lora.no_prefetch = !pf;
        CHECK_OK(hpt_plan_cost(&lo, cal, &ch[pf]));
    }
    double reads = ch[0].total_s - cn.total_s;
    CHECK(ch[0].load_bytes == ch[1].load_bytes && ch[0].load_bytes > 0 && reads > 0);
    if (cal->share_loss < 1)
        CHECK_MSG(ch[1].total_s < ch[0].total_s &&
                      ch[1].total_s >= cn.total_s + cal->share_loss * reads * (1 - 1e-9),
                  "a base on the host: %.6g s with prefetch, %.6g without, %.6g on the device",
                  ch[1].total_s, ch[0].total_s, cn.total_s);
}

static void check_lora(const hpt_calibration *cal) {
    hpt_plan_opts base = hpt_plan_defaults();
    CHECK_OK(hpt_model_config_parse("llama:L=4,C=128,NH=4,NKV=2,FF=256,V=4096,T=64", &base.cfg));
    base.B = 1, base.T = 64;
    CHECK_OK(hpt_lora_parse("r=4", &base.lora));
    hpt_auto_opts a = {.allow_lossy = 0, .allow_disk = 0, .sequences = 1};
    hpt_auto_result *r = malloc(sizeof *r);
    if (!r) return;
    CHECK_OK(hpt_plan_auto(&base, cal, &a, r));
    for (int i = 0; i < r->n; i++) CHECK(r->cand[i].o.lora.base == HPT_BASE_F32);
    CHECK(r->cand[0].o.lora.home == HPT_TIER_DEVICE);
    check_reproduces(&r->cand[0].o);
    /* the device budget of the f32 base homed on the host, fully recomputed */
    hpt_plan_opts h = base;
    h.act.recompute = HPT_RECOMPUTE_FULL;
    hpt_estimate e[3];
    h.lora.home = HPT_TIER_DEVICE;
    CHECK_OK(hpt_plan_estimate(&h, &e[0]));
    h.lora.home = HPT_TIER_HOST;
    CHECK_OK(hpt_plan_estimate(&h, &e[1]));
    h.lora.base = HPT_BASE_NF4;
    CHECK_OK(hpt_plan_estimate(&h, &e[2]));
    CHECK(e[2].peak_bytes[HPT_TIER_DEVICE] < e[1].peak_bytes[HPT_TIER_DEVICE] &&
          e[1].peak_bytes[HPT_TIER_DEVICE] < e[0].peak_bytes[HPT_TIER_DEVICE]);
    base.budget_bytes[HPT_TIER_DEVICE] = e[1].peak_bytes[HPT_TIER_DEVICE];
    base.budget_bytes[HPT_TIER_HOST] = (uint64_t)1 << 34;
    CHECK_OK(hpt_plan_auto(&base, cal, &a, r));
    check_kept(r, &base, 1);
    CHECK(r->cand[0].o.lora.base == HPT_BASE_F32 && r->cand[0].o.lora.home == HPT_TIER_HOST);
    check_reproduces(&r->cand[0].o);
    /* only a narrow base fits: refused without allow_lossy, chosen with it */
    base.budget_bytes[HPT_TIER_DEVICE] = e[2].peak_bytes[HPT_TIER_DEVICE];
    CHECK_STATUS(hpt_plan_auto(&base, cal, &a, r), HPT_ERR_OOM);
    a.allow_lossy = 1;
    CHECK_OK(hpt_plan_auto(&base, cal, &a, r));
    check_kept(r, &base, 1);
    CHECK(r->cand[0].o.lora.base != HPT_BASE_F32);
    check_reproduces(&r->cand[0].o);
    /* the f32 base with no room on the host either: the disk's home, with allow_disk and a
     * directory only */
    a.allow_lossy = 0;
    base.budget_bytes[HPT_TIER_DEVICE] = e[1].peak_bytes[HPT_TIER_DEVICE];
    base.budget_bytes[HPT_TIER_HOST] = 4096;
    CHECK_STATUS(hpt_plan_auto(&base, cal, &a, r), HPT_ERR_OOM);
    a.allow_disk = 1;
    base.offload_dir = t_tmpdir();
    CHECK_OK(hpt_plan_auto(&base, cal, &a, r));
    check_kept(r, &base, 1);
    CHECK(r->cand[0].o.lora.home == HPT_TIER_DISK);
    /* a storage given is kept */
    base.lora.base = HPT_BASE_INT8;
    base.budget_bytes[HPT_TIER_DEVICE] = base.budget_bytes[HPT_TIER_HOST] = 0;
    CHECK_OK(hpt_plan_auto(&base, cal, &a, r));
    for (int i = 0; i < r->n; i++) CHECK(r->cand[i].o.lora.base == HPT_BASE_INT8);
    free(r);
    check_lora_cost(cal);
}

/* Inline jobs (no disk home: engine.c runs them on the compute thread, serially): the
 * worker's one-thread rate and the sharing loss no longer enter (the file's worker_ns and
 * share_loss changed: the same step); the fused update runs at the team's rate, serially, so
 * raising the team's AdamW ns per parameter by 1 adds 1 ns x every parameter (the blocks' in
 * the engine and the rest), exactly; and the host copies are serial: the step equals the same
 * plan's compute (every home on the device, not fused) plus, per block, the load forward, the
 * reload of the blocks not resident and the weights' write-back (each blk x 4 bytes at the
 * host copy rate, write_cal's 5 GB/s). */
static void check_inline(const char *path, const hpt_plan_opts *fh) {
    hpt_calibration cal;
    hpt_cost k;
    double t[3];
    for (int i = 0; i < 3; i++) {
        char extra[512];
        snprintf(extra, sizeof extra, ",\"share_loss\":%d,\"worker_ns_per_param\":{\"adamw\":"
                 "{\"32\":%d,\"8\":1},\"lion\":{\"32\":1,\"8\":1},\"adam-mini\":{\"32\":1,"
                 "\"8\":1},\"sgd\":{\"32\":1,\"8\":1}}", i ? 2 : 1, i ? 7 : 1);
        g_cal_extra = extra;
        write_cal(path, 1, 1, i == 2 ? 2 : 1, 1); /* the team's AdamW: 1 ns, then 2 */
        g_cal_extra = "";
        CHECK_OK(hpt_calibration_load(path, &cal));
        CHECK_OK(hpt_plan_cost(fh, &cal, &k));
        CHECK(k.engine_inline);
        CHECK(fabs(k.compute_s - k.total_s) < 1e-12 && k.disk_beside_s == 0);
        t[i] = k.total_s;
    }
    CHECK(fabs(t[1] - t[0]) < 1e-12 * t[0]);
    double want = 1e-9 * k.params;
    CHECK(fabs((t[2] - t[1]) - want) < 1e-6 * want);
    /* serial against the plan without the engine (the same compute and update, every home on
     * the device) plus the copies */
    hpt_plan_opts dev = *fh;
    dev.offload = hpt_offload_defaults();
    hpt_cost kd;
    CHECK_OK(hpt_plan_cost(&dev, &cal, &kd));
    int L = fh->cfg.L, K = fh->offload.max_active < L ? fh->offload.max_active : L;
    double blk = k.block_params / L, cp = blk * 4 / 5e9;
    double copies = L * cp + (L - K) * cp + L * cp;
    CHECK(blk > 0 && fabs(k.total_s - (kd.total_s + copies)) < 1e-9 * k.total_s);
    /* a disk home: the worker thread, not inline */
    hpt_plan_opts fd = *fh;
    fd.offload.optim = HPT_TIER_DISK;
    CHECK(!hpt_plan_engine_inline(&fd));
}

/* A Llama block at its own rates: the file's "llama" object (round trip), its GEMM rate
 * interpolated linearly in C between its two widths (flat outside), its attention at the GQA
 * rate, and each pointwise kernel's ns per element entering the forward exactly (1 ns more per
 * element of RMSNorm's forward adds tokens x L x 2C ns: two norms per block); a file without
 * the object costs a Llama block at the GPT-2 block's rates. */
static void check_llama(const char *path) {
    g_cal_extra = ",\"llama\":{\"gemm\":[{\"rows\":64,\"C\":512,\"FF\":1536,\"fwd_gflops\":2,"
                  "\"bwd_gflops\":4},{\"rows\":64,\"C\":2048,\"FF\":8192,\"fwd_gflops\":8,"
                  "\"bwd_gflops\":16},{\"rows\":256,\"C\":512,\"FF\":1536,\"fwd_gflops\":2,"
                  "\"bwd_gflops\":4},{\"rows\":256,\"C\":2048,\"FF\":8192,\"fwd_gflops\":8,"
                  "\"bwd_gflops\":16}],\"gqa_flash_fwd_gflops\":3,\"gqa_flash_bwd_gflops\":3,"
                  "\"gqa_plain_fwd_gflops\":5,\"gqa_plain_bwd_gflops\":5,\"rmsnorm_fwd_ns\":1,"
                  "\"rmsnorm_bwd_ns\":1,\"swiglu_fwd_ns\":1,\"swiglu_bwd_ns\":1,\"rope_fwd_ns\":1,"
                  "\"rope_bwd_ns\":1}";
    write_cal(path, 1, 1, 1, 1);
    g_cal_extra = "";
    hpt_calibration cal, cal2;
    CHECK_OK(hpt_calibration_load(path, &cal));
    const hpt_cal_arch *la = &cal.arch[HPT_ARCH_LLAMA];
    CHECK(la->C[0] == 512 && la->C[1] == 2048 && la->FF[1] == 8192 &&
          la->gemm_gflops[1][1][1] == 16 && la->attn_gflops[1][0] == 5 &&
          la->op_ns[1][1] == 1); /* RoPE's backward (the ops: RMSNorm, RoPE, SwiGLU) */
    char p2[4200];
    snprintf(p2, sizeof p2, "%s.2", path);
    CHECK_OK(hpt_calibration_save(p2, &cal));
    CHECK_OK(hpt_calibration_load(p2, &cal2));
    CHECK(!memcmp(&cal, &cal2, sizeof cal));
    const int Cs[3] = {256, 1280, 4096};
    const double want_f[3] = {2, 5, 8};
    hpt_cost k;
    for (int i = 0; i < 3; i++) {
        hpt_plan_opts o = hpt_plan_defaults();
        char shape[128];
        snprintf(shape, sizeof shape, "llama:L=2,C=%d,NH=%d,NKV=%d,FF=%d,V=256,T=64", Cs[i],
                 Cs[i] / 64, Cs[i] / 256, 3 * Cs[i]);
        CHECK_OK(hpt_model_config_parse(shape, &o.cfg));
        o.B = 1, o.T = 64;
        CHECK_OK(hpt_plan_cost(&o, &cal, &k));
        CHECK(k.arch_rates && fabs(k.gemm_fwd_gflops - want_f[i]) < 1e-9 &&
              fabs(k.gemm_bwd_gflops - 2 * want_f[i]) < 1e-9);
        CHECK(fabs(k.attn_fwd_gflops - 3) < 1e-9); /* flash: the GQA rate (GPT-2's is 1) */
    }
    /* RMSNorm's forward 1 -> 2 ns per element */
    hpt_plan_opts o = hpt_plan_defaults();
    CHECK_OK(hpt_model_config_parse("llama:L=2,C=256,NH=4,NKV=2,FF=768,V=256,T=64", &o.cfg));
    o.B = 1, o.T = 64;
    CHECK_OK(hpt_plan_cost(&o, &cal, &k));
    double f0 = k.fwd_s;
    cal.arch[HPT_ARCH_LLAMA].op_ns[0][0] = 2;
    CHECK_OK(hpt_plan_cost(&o, &cal, &k));
    double want = 64.0 * 2 * 2 * 256 * 1e-9;
    CHECK(fabs((k.fwd_s - f0) - want) < 1e-6 * want);
    /* without the object: the GPT-2 block's rate (write_cal's 10 GFLOP/s) */
    write_cal(path, 1, 1, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK(cal.arch[HPT_ARCH_LLAMA].C[0] == 0);
    CHECK_OK(hpt_plan_cost(&o, &cal, &k));
    CHECK(!k.arch_rates && k.gemm_fwd_gflops == 10);
}

/* --matmul bf16's rates as JSON members (leading comma): the reference block's GEMMs at b64
 * GFLOP/s at 64 rows and b256 at 256 (every width), the head's at hb, the bf16 flash pair at fl
 * (T 128 only); partial: the head left out. */
static void bf16_extra(char *buf, size_t n, double b64, double b256, double hb, double fl, int partial) {
    static const int Cs[HPT_CAL_GEMM_SIZES] = {512, 768, 1024, 1280, 1600, 2048};
    size_t k = (size_t)snprintf(buf, n, ",\"matmul_bf16\":{\"gemm\":[");
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < HPT_CAL_GEMM_SIZES; i++)
            k += (size_t)snprintf(buf + k, n - k, "%s{\"rows\":%d,\"C\":%d,\"fwd_gflops\":%g,\"bwd_gflops\":%g}",
                                  r + i ? "," : "", r ? 256 : 64, Cs[i], r ? b256 : b64, r ? b256 : b64);
    k += (size_t)snprintf(buf + k, n - k, "]");
    if (!partial)
        k += (size_t)snprintf(buf + k, n - k, ",\"head\":[{\"rows\":64,\"fwd_gflops\":%g,\"bwd_gflops\":%g},"
                              "{\"rows\":256,\"fwd_gflops\":%g,\"bwd_gflops\":%g}]", hb, hb, hb, hb);
    snprintf(buf + k, n - k, ",\"flash_fwd_gflops\":%g,\"flash_bwd_gflops\":%g}", fl, fl);
}

/* A Llama object (check_llama's rates: GEMMs 2 / 4 GFLOP/s at C 512, 8 / 16 at 2048, flash 3),
 * with own_bf16: its bf16 GEMMs at half those and its bf16 flash pair at 6. */
static void llama_extra(char *buf, size_t n, int own_bf16) {
    size_t k = (size_t)snprintf(buf, n,
        ",\"llama\":{\"gemm\":[{\"rows\":64,\"C\":512,\"FF\":1536,\"fwd_gflops\":2,"
        "\"bwd_gflops\":4},{\"rows\":64,\"C\":2048,\"FF\":8192,\"fwd_gflops\":8,"
        "\"bwd_gflops\":16},{\"rows\":256,\"C\":512,\"FF\":1536,\"fwd_gflops\":2,"
        "\"bwd_gflops\":4},{\"rows\":256,\"C\":2048,\"FF\":8192,\"fwd_gflops\":8,"
        "\"bwd_gflops\":16}],\"gqa_flash_fwd_gflops\":3,\"gqa_flash_bwd_gflops\":3,"
        "\"gqa_plain_fwd_gflops\":5,\"gqa_plain_bwd_gflops\":5,\"rmsnorm_fwd_ns\":1,"
        "\"rmsnorm_bwd_ns\":1,\"swiglu_fwd_ns\":1,\"swiglu_bwd_ns\":1,\"rope_fwd_ns\":1,"
        "\"rope_bwd_ns\":1");
    if (own_bf16)
        k += (size_t)snprintf(buf + k, n - k,
            ",\"gemm_bf16\":[{\"rows\":64,\"C\":512,\"fwd_gflops\":1,\"bwd_gflops\":2},"
            "{\"rows\":64,\"C\":2048,\"fwd_gflops\":4,\"bwd_gflops\":8},{\"rows\":256,\"C\":512,"
            "\"fwd_gflops\":1,\"bwd_gflops\":2},{\"rows\":256,\"C\":2048,\"fwd_gflops\":4,"
            "\"bwd_gflops\":8}],\"gqa_flash_bf16_fwd_gflops\":6,\"gqa_flash_bf16_bwd_gflops\":6");
    snprintf(buf + k, n - k, "}");
}

/* --matmul bf16 (docs/planner.md, "bf16 GEMMs"): a file without its rates (every file before
 * them) loads, and a bf16 plan is costed at the fp32 rates and says so; with them (the file's
 * "matmul_bf16", an architecture's "gemm_bf16": round trip) a bf16 plan's block GEMMs, head and
 * flash attention take the bf16 rates and its forward and backward follow the formula, while an
 * fp32 plan's cost is unchanged; LoRA's adapters (fp32 GEMMs) stay at the fp32 rate; a partial
 * object is ignored; an architecture without bf16 rates of its own scales its fp32 ones by the
 * reference's ratio; and the search takes bf16 when its rates are faster, with allow_lossy
 * only, never over a --matmul the user gave. */
static void check_bf16(const char *path) {
    static char extra[8192];
    hpt_calibration cal, cal2;
    hpt_cost kf, kb, k2;
    hpt_plan_opts fp = small_model(), bf = fp; /* 2 x 64 = 128 rows: halfway in log(rows) */
    bf.act.matmul = HPT_MATMUL_BF16;
    /* an older file: no bf16 rates */
    write_cal_rows(path, 10, 30, 20, 60, 1, 1, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK(!cal.bf16.have);
    CHECK_OK(hpt_plan_cost(&fp, &cal, &kf));
    CHECK_OK(hpt_plan_cost(&bf, &cal, &kb));
    CHECK(!kf.bf16_at_fp32 && kb.bf16_at_fp32);
    CHECK(kb.total_s == kf.total_s && kb.gemm_fwd_gflops == 20 && kb.head_fwd_gflops == 40);
    /* with them: GEMMs 5 (64 rows) and 15 (256), 10 at 128 rows; head 8; flash 0.25 */
    bf16_extra(extra, sizeof extra, 5, 15, 8, 0.25, 0);
    g_cal_extra = extra;
    write_cal_rows(path, 10, 30, 20, 60, 1, 1, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK(cal.bf16.have && cal.bf16.gemm_fwd_gflops[1][5] == 15 && cal.bf16.head_gflops[0][1] == 8 &&
          cal.bf16.flash_gflops[1] == 0.25 && cal.bf16.flash512_gflops[0] == 0);
    char p2[4200];
    snprintf(p2, sizeof p2, "%s.bf16", path);
    CHECK_OK(hpt_calibration_save(p2, &cal));
    CHECK_OK(hpt_calibration_load(p2, &cal2));
    CHECK(!memcmp(&cal, &cal2, sizeof cal));
    CHECK_OK(hpt_plan_cost(&fp, &cal, &k2));
    CHECK(k2.total_s == kf.total_s); /* an fp32 plan ignores them */
    CHECK_OK(hpt_plan_cost(&bf, &cal, &kb));
    CHECK(!kb.bf16_at_fp32 && fabs(kb.gemm_fwd_gflops - 10) < 1e-9 && fabs(kb.gemm_bwd_gflops - 10) < 1e-9 &&
          kb.head_fwd_gflops == 8 && kb.head_bwd_gflops == 8 && kb.attn_fwd_gflops == 0.25 &&
          kb.attn_bwd_gflops == 0.25);
    double head = kb.gemm_flops_fwd - kb.block_gemm_flops_fwd;
    double want_f = kb.block_gemm_flops_fwd / 10e9 + head / 8e9 + kb.attn_flops_fwd / 0.25e9;
    double want_b = 2 * kb.block_gemm_flops_fwd / 10e9 + 2 * head / 8e9 + 2 * kb.attn_flops_fwd / 0.25e9;
    CHECK_MSG(fabs(kb.fwd_s - want_f) < 1e-9 * want_f && fabs(kb.bwd_s - want_b) < 1e-9 * want_b,
              "bf16: fwd %.9g s (want %.9g), bwd %.9g (want %.9g)", kb.fwd_s, want_f, kb.bwd_s, want_b);
    CHECK(kb.total_s - kf.total_s > 0.5 * ((kb.fwd_s + kb.bwd_s) - (kf.fwd_s + kf.bwd_s)));
    /* LoRA (a Llama at the reference rates: 64 rows, fp32 GEMMs 10, bf16 5): the adapters at 10 */
    hpt_plan_opts lo = hpt_plan_defaults();
    CHECK_OK(hpt_model_config_parse("llama:L=4,C=256,NH=4,NKV=2,FF=512,V=4096,T=64", &lo.cfg));
    lo.B = 1, lo.T = 64;
    CHECK_OK(hpt_lora_parse("r=4", &lo.lora));
    lo.act.matmul = HPT_MATMUL_BF16;
    CHECK_OK(hpt_plan_cost(&lo, &cal, &k2));
    double dw = 0, ad = 0;
    CHECK_OK(model_lora_flops(&lo.cfg, &lo.lora, &dw, &ad));
    double lb = k2.block_gemm_flops_fwd / 5e9 + (k2.gemm_flops_fwd - k2.block_gemm_flops_fwd) / 8e9 +
                2 * k2.attn_flops_fwd / 0.25e9;
    CHECK(!k2.arch_rates && k2.gemm_fwd_gflops == 5 && ad > 0);
    CHECK_MSG(fabs(k2.bwd_s - (lb + k2.tokens * ad / 10e9)) < 1e-9 * k2.bwd_s,
              "LoRA bf16 backward %.9g s, want %.9g (adapters at the fp32 rate)", k2.bwd_s,
              lb + k2.tokens * ad / 10e9);
    /* a partial object: ignored */
    bf16_extra(extra, sizeof extra, 5, 15, 8, 0.25, 1);
    write_cal_rows(path, 10, 30, 20, 60, 1, 1, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK(!cal.bf16.have);
    /* a Llama block at its own bf16 rates (C 256: flat at C 512's), then without them: its fp32
     * ones (2, flash 3) times the reference's bf16/fp32 ratio (GEMMs 5/10, flash 0.25/1) */
    hpt_plan_opts ll = hpt_plan_defaults();
    CHECK_OK(hpt_model_config_parse("llama:L=2,C=256,NH=4,NKV=2,FF=768,V=256,T=64", &ll.cfg));
    ll.B = 1, ll.T = 64;
    ll.act.matmul = HPT_MATMUL_BF16;
    for (int own = 1; own >= 0; own--) {
        size_t n = (size_t)snprintf(extra, sizeof extra, "%s", "");
        bf16_extra(extra, sizeof extra, 5, 15, 8, 0.25, 0);
        n = strlen(extra);
        llama_extra(extra + n, sizeof extra - n, own);
        write_cal_rows(path, 10, 30, 20, 60, 1, 1, 1, 1);
        CHECK_OK(hpt_calibration_load(path, &cal));
        CHECK(cal.arch[HPT_ARCH_LLAMA].C[0] == 512 && (cal.arch[HPT_ARCH_LLAMA].bf16_C0 == 512) == own);
        if (own) {
            CHECK(cal.arch[HPT_ARCH_LLAMA].gemm_bf16_gflops[1][1][1] == 8 &&
                  cal.arch[HPT_ARCH_LLAMA].flash_bf16_gflops[0] == 6);
            CHECK_OK(hpt_calibration_save(p2, &cal));
            CHECK_OK(hpt_calibration_load(p2, &cal2));
            CHECK(!memcmp(&cal, &cal2, sizeof cal));
        }
        CHECK_OK(hpt_plan_cost(&ll, &cal, &k2));
        CHECK_MSG(k2.arch_rates && fabs(k2.gemm_fwd_gflops - 1) < 1e-9 && fabs(k2.gemm_bwd_gflops - 2) < 1e-9 &&
                      fabs(k2.attn_fwd_gflops - (own ? 6 : 0.75)) < 1e-9,
                  "llama bf16 (own %d): GEMM %g / %g, flash %g", own, k2.gemm_fwd_gflops,
                  k2.gemm_bwd_gflops, k2.attn_fwd_gflops);
    }
    /* the search: bf16 100x faster everywhere wins with allow_lossy; never without it, nor over
     * a given --matmul; slower, fp32 stays */
    hpt_auto_result *r = malloc(sizeof *r);
    hpt_auto_opts a = {.allow_lossy = 1, .allow_disk = 0, .sequences = 4};
    hpt_plan_opts base = small_model();
    bf16_extra(extra, sizeof extra, 1000, 1000, 1000, 100, 0);
    write_cal(path, 1, 1, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK_OK(hpt_plan_auto(&base, &cal, &a, r));
    CHECK(r->n >= 1 && r->cand[0].o.act.matmul == HPT_MATMUL_BF16);
    check_kept(r, &base, 4);
    check_reproduces(&r->cand[0].o);
    a.allow_lossy = 0;
    CHECK_OK(hpt_plan_auto(&base, &cal, &a, r));
    for (int i = 0; i < r->n; i++) CHECK(r->cand[i].o.act.matmul == HPT_MATMUL_FP32);
    a.allow_lossy = 1;
    hpt_plan_opts given = base;
    CHECK_OK(hpt_plan_set(&given.plan, "matmul", "fp32"));
    CHECK_OK(hpt_plan_auto(&given, &cal, &a, r));
    for (int i = 0; i < r->n; i++) CHECK(r->cand[i].o.act.matmul == HPT_MATMUL_FP32);
    bf16_extra(extra, sizeof extra, 0.1, 0.1, 0.1, 0.1, 0);
    write_cal(path, 1, 1, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK_OK(hpt_plan_auto(&base, &cal, &a, r));
    CHECK(r->n >= 1 && r->cand[0].o.act.matmul == HPT_MATMUL_FP32);
    free(r);
    g_cal_extra = "";
}

int main(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/cal.json", t_tmpdir());
    hpt_calibration cal;

    /* the file: a round trip, and a wrong version refused */
    write_cal(path, 1, 1000, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK(cal.attn_gflops[1][0] == 1000 && cal.attn_gflops[0][1] == 1 && cal.gemm_C[4] == 1600);
    char path2[4096];
    snprintf(path2, sizeof path2, "%s/sub/cal2.json", t_tmpdir());
    CHECK_OK(hpt_calibration_save(path2, &cal));
    hpt_calibration cal2;
    CHECK_OK(hpt_calibration_load(path2, &cal2));
    CHECK(!memcmp(&cal, &cal2, sizeof cal));
    /* a GPU's entry beside the CPU's (the file's "devices"): each save keeps the other's */
    hpt_calibration gpu = cal, back;
    snprintf(gpu.device, sizeof gpu.device, "cuda Fake GPU sm_90");
    gpu.mem_gbps = 4000;
    CHECK_OK(hpt_calibration_save(path2, &gpu));
    CHECK_OK(hpt_calibration_load(path2, &cal2));
    CHECK(!memcmp(&cal, &cal2, sizeof cal));
    CHECK_OK(hpt_calibration_load_device(path2, "cuda Fake GPU sm_90", &back));
    CHECK(!memcmp(&gpu, &back, sizeof gpu));
    CHECK(hpt_calibration_for_device(&back, 1) && !hpt_calibration_for_device(&back, 0));
    CHECK_STATUS(hpt_calibration_load_device(path2, "cuda Other sm_80", &back), HPT_ERR_INVALID);
    CHECK_OK(hpt_calibration_save(path2, &cal));
    CHECK_OK(hpt_calibration_load_device(path2, "cuda Fake GPU sm_90", &back));
    CHECK(!memcmp(&gpu, &back, sizeof gpu));
    CHECK_STATUS(hpt_calibration_load_device(path, "cuda Fake GPU sm_90", &back), HPT_ERR_INVALID);
    FILE *f = fopen(path2, "w");
    fputs("{\"version\":99}", f);
    fclose(f);
    CHECK_STATUS(hpt_calibration_load(path2, &cal2), HPT_ERR_FORMAT);

    /* the cost's arithmetic on its inputs: forward = tokens (gemm/Rf + attn/Raf) */
    hpt_plan_opts base = small_model();
    hpt_cost k;
    CHECK_OK(hpt_plan_cost(&base, &cal, &k));
    double want_fwd = k.gemm_flops_fwd / 10e9 + k.attn_flops_fwd / 1e9; /* flash at 1 GFLOP/s */
    CHECK(k.fwd_s > 0.999 * want_fwd && k.fwd_s < 1.001 * want_fwd);
    CHECK(k.attn_flops_fwd > 0 && k.gemm_flops_fwd > 0);
    CHECK(k.optim_s > 0.999 * k.params * 1e-9 && k.optim_s < 1.001 * k.params * 1e-9);

    /* the GEMM rate at the micro-batch's rows: the measured rate at 64 and 256 rows, linear in
     * log(rows) between (128 rows: halfway), flat outside; the forward time follows */
    write_cal_rows(path, 10, 30, 20, 60, 1, 1, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK(cal.gemm_rows[0] == 64 && cal.gemm_rows[1] == 256 && cal.head_gflops[1][1] == 60);
    const int rows_of[4][2] = {{1, 32}, {1, 64}, {2, 64}, {8, 64}}; /* B, T: 32 64 128 512 rows */
    const double g_want[4] = {10, 10, 20, 30}, h_want[4] = {20, 20, 40, 60};
    for (int i = 0; i < 4; i++) {
        hpt_plan_opts o = base;
        o.B = rows_of[i][0], o.T = rows_of[i][1];
        CHECK_OK(hpt_plan_cost(&o, &cal, &k));
        CHECK(fabs(k.gemm_fwd_gflops - g_want[i]) < 1e-9 && fabs(k.gemm_bwd_gflops - g_want[i]) < 1e-9);
        CHECK(fabs(k.head_fwd_gflops - h_want[i]) < 1e-9 && fabs(k.head_bwd_gflops - h_want[i]) < 1e-9);
        double head = k.gemm_flops_fwd - k.block_gemm_flops_fwd;
        double want = k.block_gemm_flops_fwd / (g_want[i] * 1e9) + head / (h_want[i] * 1e9) +
                      k.attn_flops_fwd / 1e9;
        CHECK(head > 0 && k.fwd_s > 0.999 * want && k.fwd_s < 1.001 * want);
    }
    /* the offload worker's update: at its one-thread rate, and the compute loses share_loss
     * seconds per second of it. With fused updates on host homes every block's worker work
     * includes blk x worker_ns; raising worker_ns by 2 ns with share_loss 2 (the compute side
     * of each block's max, since the worker's own side holds the same work once) adds
     * 2 x 2 ns x the blocks' parameters to the step */
    hpt_plan_opts fh = base;
    fh.offload.params = fh.offload.grads = fh.offload.optim = HPT_TIER_HOST;
    fh.offload.fused = 1;
    double tot[2];
    CHECK(hpt_plan_engine_inline(&fh)); /* no disk home: inline by default, as the engine */
    setenv("HPT_ENGINE_WORKER", "thread", 1); /* the worker thread's formula, forced */
    CHECK(!hpt_plan_engine_inline(&fh));
    for (int i = 0; i < 2; i++) {
        char extra[512];
        snprintf(extra, sizeof extra, ",\"share_loss\":2,\"worker_ns_per_param\":{\"adamw\":"
                 "{\"32\":%d,\"8\":1},\"lion\":{\"32\":1,\"8\":1},\"adam-mini\":{\"32\":1,"
                 "\"8\":1},\"sgd\":{\"32\":1,\"8\":1}}", i ? 3 : 1);
        g_cal_extra = extra;
        write_cal(path, 1, 1, 1, 1);
        g_cal_extra = "";
        CHECK_OK(hpt_calibration_load(path, &cal));
        CHECK(cal.share_loss == 2 && cal.worker_ns[HPT_OPTIM_ADAMW][0] == (i ? 3 : 1));
        CHECK_OK(hpt_plan_cost(&fh, &cal, &k));
        tot[i] = k.total_s;
    }
    double want_d = 2 * 2e-9 * k.block_params;
    CHECK(k.block_params > 0 && fabs((tot[1] - tot[0]) - want_d) < 1e-6 * want_d + 1e-12);
    CHECK(!k.engine_inline);
    unsetenv("HPT_ENGINE_WORKER");
    check_inline(path, &fh);
    /* the disk's sharing loss: the compute loses disk_share_loss seconds per second of the
     * worker's disk transfers beside it. Every home on disk, fused, the disk (1 GB/s, the
     * file's) fast enough against this small model's compute (10 GFLOP/s) that the compute
     * side of every block's max holds: raising the loss from 0 to 1 adds each forward
     * load and each backward block's transfers (the reload of the blocks not resident, m and v
     * read and written, the weights written) once per block */
    hpt_plan_opts fd = base;
    fd.offload.params = fd.offload.grads = fd.offload.optim = HPT_TIER_DISK;
    fd.offload.fused = 1;
    const double R = 1e9; /* bytes/s, read and write: write_cal's */
    for (int i = 0; i < 2; i++) {
        char extra[256];
        snprintf(extra, sizeof extra, ",\"disk_share_loss\":%d", i);
        g_cal_extra = extra;
        write_cal(path, 1, 1, 1, 1);
        g_cal_extra = "";
        CHECK_OK(hpt_calibration_load(path, &cal));
        CHECK(cal.disk_share_loss == i && cal.disk_read_gbps == 1 && cal.disk_write_gbps == 1);
        CHECK_OK(hpt_plan_cost(&fd, &cal, &k));
        tot[i] = k.total_s;
    }
    {
        int L = fd.cfg.L, K = fd.offload.max_active < L ? fd.offload.max_active : L;
        double blk = k.block_params / L, load = blk * 4 / R;
        double wdisk = load * (L - K) / L + blk * 8 / R + blk * 8 / R + blk * 4 / R;
        double want = L * load + L * wdisk;
        CHECK(blk > 0 && K >= 1 && fabs((tot[1] - tot[0]) - want) < 1e-6 * want + 1e-15);
    }
    /* the engine's own disk rates (a training run's): when the file has them they replace
     * calibrate's for the engine's homes, exactly: the cost equals that of a file whose
     * standalone rates and loss are the engine's figures */
    {
        hpt_cost ke, ks;
        /* every home on disk: layout 7; layout 4 (the state alone) at other rates, unused here */
        g_cal_extra = ",\"disk_share_loss\":0.5,\"engine_disk\":[{\"homes\":7,\"read_gbps\":2,"
                      "\"write_gbps\":4,\"loss\":0.25,\"source\":\"a run\"},{\"homes\":4,"
                      "\"read_gbps\":8,\"write_gbps\":8,\"loss\":3,\"source\":\"another\"}]";
        write_cal(path, 1, 1, 1, 1);
        CHECK_OK(hpt_calibration_load(path, &cal));
        CHECK(hpt_plan_disk_homes(&fd) == 7);
        CHECK(cal.engine_disk_read_gbps[7] == 2 && cal.engine_disk_write_gbps[7] == 4 &&
              cal.engine_disk_loss[7] == 0.25 && !strcmp(cal.engine_source[7], "a run"));
        CHECK(cal.engine_disk_read_gbps[4] == 8 && cal.engine_disk_read_gbps[1] == 0);
        CHECK_OK(hpt_plan_cost(&fd, &cal, &ke));
        CHECK(ke.disk_from_engine == 1 + 7 && ke.disk_read_gbps == 2 && ke.disk_write_gbps == 4 &&
              ke.disk_loss == 0.25);
        /* a plan with the state alone on disk takes layout 4's set; one with the weights
         * alone (no set recorded) calibrate's */
        {
            hpt_plan_opts f4 = fd;
            f4.offload.params = f4.offload.grads = HPT_TIER_HOST;
            hpt_cost k4;
            CHECK_OK(hpt_plan_cost(&f4, &cal, &k4));
            CHECK(k4.disk_from_engine == 1 + 4 && k4.disk_read_gbps == 8 && k4.disk_loss == 3);
            f4.offload.params = HPT_TIER_DISK;
            f4.offload.optim = HPT_TIER_HOST;
            CHECK(hpt_plan_disk_homes(&f4) == 1);
            CHECK_OK(hpt_plan_cost(&f4, &cal, &k4));
            CHECK(k4.disk_from_engine == 0 && k4.disk_read_gbps == 1 && k4.disk_loss == 0.5);
        }
        /* saved and loaded again: the same figures */
        CHECK_OK(hpt_calibration_save(path2, &cal));
        hpt_calibration c2;
        CHECK_OK(hpt_calibration_load(path2, &c2));
        CHECK(c2.engine_disk_read_gbps[7] == 2 && c2.engine_disk_loss[7] == 0.25 &&
              !strcmp(c2.engine_source[7], "a run") && c2.engine_disk_loss[4] == 3);
        /* the same rates as calibrate's own (a file with no engine entry) */
        g_cal_extra = ",\"disk_share_loss\":0.25";
        write_cal(path, 1, 1, 1, 1);
        g_cal_extra = "";
        CHECK_OK(hpt_calibration_load(path, &c2));
        c2.disk_read_gbps = 2, c2.disk_write_gbps = 4;
        CHECK_OK(hpt_plan_cost(&fd, &c2, &ks));
        CHECK(ks.disk_from_engine == 0 && fabs(ks.total_s - ke.total_s) < 1e-9 * ks.total_s);
        /* and not the standalone ones: at 1 GB/s (and a loss of 1: the loop above) it costs more */
        CHECK(k.total_s > ke.total_s);
        /* a run's counters into the file: the rates are bytes over seconds; the loss is the
         * one with which the cost model at those rates gives the run's step: a step made by
         * the model itself at a loss of 0.7 gives 0.7 back */
        hpt_offload_stats st;
        memset(&st, 0, sizeof st);
        const int64_t steps = 3;
        st.disk_read_bytes = 3000000000ull, st.disk_read_s = 1.5;  /* 2 GB/s */
        st.disk_write_bytes = 2000000000ull, st.disk_write_s = 0.5; /* 4 GB/s */
        double wait = 0.1, beside = 0.4, lambda = 0.7;              /* per step */
        st.wait_s = wait * steps, st.disk_beside_s = beside * steps;
        hpt_calibration c1 = cal; /* the rates 2 and 4 GB/s, the loss 0.25 */
        c1.engine_disk_loss[7] = lambda;
        hpt_cost kl;
        CHECK_OK(hpt_plan_cost(&fd, &c1, &kl));
        double step_s = kl.total_s;
        CHECK(step_s > ke.total_s); /* the loss enters this plan's step */
        hpt_calibration c3 = c2;
        CHECK(c3.engine_disk_read_gbps[7] == 0);
        CHECK_OK(hpt_calibration_take_engine(&c3, &fd, &st, steps, step_s, "test run"));
        CHECK(fabs(c3.engine_disk_read_gbps[7] - 2) < 1e-12 && fabs(c3.engine_disk_write_gbps[7] - 4) < 1e-12);
        CHECK(fabs(c3.engine_disk_loss[7] - lambda) < 1e-5 && !strncmp(c3.engine_source[7], "test run", 8));
        CHECK(c3.engine_disk_read_gbps[4] == 0); /* another layout's set untouched */
        CHECK(c3.disk_read_gbps == 2); /* calibrate's own are kept beside them */
        /* a compute faster than its own work alone: no negative loss */
        c3 = c2;
        CHECK_OK(hpt_calibration_take_engine(&c3, &fd, &st, steps, ke.compute_s * 0.5, "fast"));
        CHECK(c3.engine_disk_loss[7] == 0);
        /* disk beside the compute under 5% of the step: too little to say, the calibrated loss */
        st.disk_beside_s = 0.01 * step_s * steps;
        c3 = c2;
        CHECK_OK(hpt_calibration_take_engine(&c3, &fd, &st, steps, step_s, "little"));
        CHECK(c3.engine_disk_loss[7] == c2.disk_share_loss);
        /* a run that moved nothing through the disk is refused */
        memset(&st, 0, sizeof st);
        CHECK_STATUS(hpt_calibration_take_engine(&c3, &fd, &st, steps, step_s, "none"), HPT_ERR_INVALID);
    }
    /* attention's rate at T: the T = 128 rates at and below 128, the T = 512 ones at and above
     * 512, linear in log T between (256: halfway); without T = 512 rates, T = 128's everywhere */
    g_cal_extra = ",\"attention_T512\":{\"flash_fwd_gflops\":5,\"flash_bwd_gflops\":7,"
                  "\"plain_fwd_gflops\":9,\"plain_bwd_gflops\":11}";
    write_cal(path, 1, 3, 1, 1); /* flash 1, plain 3 at T = 128 */
    g_cal_extra = "";
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK(cal.attn512_gflops[0][0] == 5 && cal.attn512_gflops[1][1] == 11);
    const int Ts[4] = {64, 128, 256, 1024};
    const double fl_f[4] = {1, 1, 3, 5}, fl_b[4] = {1, 1, 4, 7}, pl_f[4] = {3, 3, 6, 9};
    for (int i = 0; i < 4; i++) {
        hpt_plan_opts o = base;
        o.T = o.cfg.maxT = Ts[i];
        CHECK_OK(hpt_plan_cost(&o, &cal, &k));
        CHECK(fabs(k.attn_fwd_gflops - fl_f[i]) < 1e-9 && fabs(k.attn_bwd_gflops - fl_b[i]) < 1e-9);
        o.act.attention = HPT_ATTN_PLAIN;
        CHECK_OK(hpt_plan_cost(&o, &cal, &k));
        CHECK(fabs(k.attn_fwd_gflops - pl_f[i]) < 1e-9);
    }
    write_cal(path, 1, 3, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK(cal.attn512_gflops[0][0] == 0);
    {
        hpt_plan_opts o = base;
        o.T = o.cfg.maxT = 1024;
        CHECK_OK(hpt_plan_cost(&o, &cal, &k));
        CHECK(k.attn_fwd_gflops == 1 && k.attn_bwd_gflops == 1);
    }
    check_llama(path);
    check_bf16(path);
    write_cal(path, 1, 1000, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));

    /* unlimited budgets: plain attention at 1000 GFLOP/s against flash at 1 must win, with no
     * recompute (which only adds work to every term it enters) */
    hpt_auto_opts a = {.allow_lossy = 0, .allow_disk = 0, .sequences = 4};
    hpt_auto_result *r = malloc(sizeof *r);
    CHECK_OK(hpt_plan_auto(&base, &cal, &a, r));
    CHECK(r->n >= 1 && r->n_fit >= 1);
    CHECK(r->cand[0].o.act.attention == HPT_ATTN_PLAIN);
    CHECK(r->cand[0].o.act.recompute == HPT_RECOMPUTE_NONE);
    check_kept(r, &base, 4);
    check_reproduces(&r->cand[0].o);
    /* and the other way round */
    write_cal(path, 1000, 1, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK_OK(hpt_plan_auto(&base, &cal, &a, r));
    CHECK(r->cand[0].o.act.attention == HPT_ATTN_FLASH);
    check_kept(r, &base, 4);

    /* lossy gating: an 8-bit update 1000x cheaper wins only when allowed */
    write_cal(path, 1000, 1000, 1000, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    CHECK_OK(hpt_plan_auto(&base, &cal, &a, r));
    for (int i = 0; i < r->n; i++) CHECK(!is_lossy(&r->cand[i].o));
    for (int i = 0; i < r->n_nofit; i++) CHECK(!is_lossy(&r->nofit[i].o));
    CHECK(r->cand[0].o.adamw.state_bits != 8);
    a.allow_lossy = 1;
    CHECK_OK(hpt_plan_auto(&base, &cal, &a, r));
    CHECK(r->cand[0].o.adamw.state_bits == 8);
    check_reproduces(&r->cand[0].o);
    a.allow_lossy = 0;

    /* a device budget the in-memory plans pass: the plan chosen fits by the estimator, keeps its
     * state off the device, and no disk home without allow_disk */
    write_cal(path, 10, 10, 1, 1);
    CHECK_OK(hpt_calibration_load(path, &cal));
    hpt_plan_opts host = base;
    host.B = 1;
    host.offload.params = host.offload.grads = host.offload.optim = HPT_TIER_HOST;
    host.offload.fused = 1;
    hpt_plan_opts dev = base;
    dev.B = 1;
    dev.act.recompute = HPT_RECOMPUTE_FULL;
    dev.act.every = 1;
    dev.offload.fused = 1;
    hpt_estimate eh, ed;
    CHECK_OK(hpt_plan_estimate(&host, &eh));
    CHECK_OK(hpt_plan_estimate(&dev, &ed));
    /* the smallest all-device plan's peak is above what the host plan needs */
    CHECK(eh.peak_bytes[HPT_TIER_DEVICE] < ed.peak_bytes[HPT_TIER_DEVICE]);
    base.budget_bytes[HPT_TIER_DEVICE] = eh.peak_bytes[HPT_TIER_DEVICE];
    base.budget_bytes[HPT_TIER_HOST] = (uint64_t)1 << 34;
    CHECK_OK(hpt_plan_auto(&base, &cal, &a, r));
    check_kept(r, &base, 4);
    CHECK(r->cand[0].o.offload.params != HPT_TIER_DEVICE || r->cand[0].o.offload.optim != HPT_TIER_DEVICE);
    for (int i = 0; i < r->n; i++) CHECK(!uses_disk(&r->cand[i].o));
    for (int i = 0; i < r->n_nofit; i++) /* a faster one that lost: over the device budget */
        CHECK(r->nofit[i].bad_tier == HPT_TIER_DEVICE && r->nofit[i].cost.total_s <= r->cand[0].cost.total_s);
    check_reproduces(&r->cand[0].o);
    /* the host tier too small as well: only disk homes remain, and only with allow_disk */
    base.budget_bytes[HPT_TIER_HOST] = 4096;
    CHECK_STATUS(hpt_plan_auto(&base, &cal, &a, r), HPT_ERR_OOM);
    a.allow_disk = 1;
    base.offload_dir = t_tmpdir();
    if (hpt_plan_auto(&base, &cal, &a, r) == HPT_OK) {
        check_kept(r, &base, 4);
        CHECK(uses_disk(&r->cand[0].o));
    }
    check_lora(&cal);
    free(r);
    return t_done("test_plan_auto");
}
