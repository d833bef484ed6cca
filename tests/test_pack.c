/* test_pack.c: packed examples without cross-talk (docs/packing.md): document-masked attention
 * and per-example positions against the same examples run one by one.
 *
 * Kernels (first case's run): rows of B x T tokens cut into examples of random lengths (1 token,
 * shorter than a vector, across the 64-row/64-key tiles, a whole row), grouped-query and not;
 * for each kernel (plain, flash) the packed call's out and dqkv restricted to each example
 * against the kernel run on that example alone (B = 1, T = its length, no positions), within
 * BOUND = 1e-5 norm-wise relative per example (the tiles fall elsewhere, so equality is to
 * fp32 rounding); the plain kernel's probabilities are exactly 0 outside the example; flash
 * against plain; pos NULL through the _seg entry gives the causal kernels' bits; the bits do not
 * depend on the thread count.
 *
 * Model (test_pack ARCH: GPT-2's learned positions; Llama's, Qwen2's, Qwen3's RoPE): a packed
 * batch (B = 2, T = 80, examples of 1 to 80 tokens, some targets ignored) through
 * hpt_model_set_positions, forward and backward, against each example alone (B = 1, T = its
 * length): the packed loss (mean over all targets) equals sum_e n_e loss_e / n, and the packed
 * gradient sum_e n_e grad_e / n, within BOUND; and the padded form (one example per row, the
 * rest padding that is not a target, no positions) the same.
 *
 * PyTorch (GPT-2 and Llama; tests/make_ref_pack.py, the fixture make_ref_pack): a batch of two
 * rows of 48 with 4 and 2 examples and padding, through an explicit block-diagonal causal mask,
 * wpe or the rotary tables at each example's positions, cross_entropy(ignore_index): the loss
 * and every gradient within BOUND, flash and plain.
 *
 * Loader (first case): one pass of --pack on and off over two masked shards (uint16 and uint32
 * tokens) against the shards read whole (every example in order, whole or truncated to T, its
 * targets and positions; padding; rows within one shard; real tokens). Trainer (each case):
 * --pack on and off, the estimate equal to the measured peak, and exact resume; GPT-2's chunked
 * and bf16 embeddings packed against the full ones (the first case). */
#include "testlib.h"

#include "core/core.h"
#include "kernels/kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BOUND 1e-5

static hpt_rng rng;

static float *rand_f(size_t n) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = hpt_rng_normal(&rng);
    return x;
}

/* cuts each of B rows of T into examples: pos[b*T+t] = position in its example; lengths drawn
 * from a mix of short and long; returns the number of examples, their (row, start, len) */
static int cut_rows(int B, int T, int32_t *pos, int (*ex)[3], int max_ex) {
    int n = 0;
    for (int b = 0; b < B; b++) {
        int t = 0;
        while (t < T) {
            int r = (int)(hpt_rng_uniform(&rng) * 4);
            int len = r == 0 ? 1 : r == 1 ? 2 + (int)(hpt_rng_uniform(&rng) * 6)
                                          : 1 + (int)(hpt_rng_uniform(&rng) * 90);
            if (B >= 3 && b == B - 1 && t == 0 && T <= 200) len = T; /* one whole row */
            if (len > T - t) len = T - t;
            for (int i = 0; i < len; i++) pos[(size_t)b * T + t + i] = i;
            if (n < max_ex) ex[n][0] = b, ex[n][1] = t, ex[n][2] = len;
            n++;
            t += len;
        }
    }
    return n < max_ex ? n : max_ex;
}

static void kern(int flash, float *out, float *st, float *dqkv, float *scr, const float *dout,
                 const float *qkv, int B, int T, int C, int NH, int NKV, const int32_t *pos) {
    if (flash) {
        k_flash_attention_forward_seg(out, st, qkv, B, T, C, NH, NKV, pos, 0);
        k_flash_attention_backward_seg(dqkv, scr, dout, qkv, out, st, B, T, C, NH, NKV, pos, 0);
    } else {
        k_attention_forward_seg(out, st, qkv, B, T, C, NH, NKV, pos, 0);
        k_attention_backward_seg(dqkv, scr, dout, qkv, st, B, T, C, NH, NKV, pos, 0);
    }
}

static void check_kernel(int B, int T, int NH, int NKV, int hd, double worst[3]) {
    const int C = NH * hd, W = C + 2 * NKV * hd;
    const size_t BT = (size_t)B * T, nq = BT * W, no = BT * C;
    float *qkv = rand_f(nq), *dout = rand_f(no);
    int32_t *pos = malloc(BT * sizeof(int32_t));
    int ex[256][3];
    const int n_ex = cut_rows(B, T, pos, ex, 256);
    float *out[2], *dq[2], *st[2];
    float *scr = malloc((size_t)B * NH * T * 4);
    for (int f = 0; f < 2; f++) {
        out[f] = malloc(no * 4), dq[f] = malloc(nq * 4);
        st[f] = malloc((f ? (size_t)B * NH * T : (size_t)B * NH * T * T) * 4);
        for (size_t i = 0; i < no; i++) out[f][i] = NAN;
        for (size_t i = 0; i < nq; i++) dq[f][i] = NAN;
        kern(f, out[f], st[f], dq[f], scr, dout, qkv, B, T, C, NH, NKV, pos);
    }
    /* plain's probabilities: 0 outside the query's example, rows summing to 1 */
    int leak = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *a = st[0] + (((size_t)b * NH + h) * T + t) * T;
                const int s0 = t - pos[(size_t)b * T + t];
                double sum = 0;
                for (int j = 0; j < T; j++) {
                    if ((j < s0 || j > t) && a[j] != 0.0f) leak++;
                    sum += (double)a[j];
                }
                if (fabs(sum - 1.0) > 1e-5) leak++;
            }
    CHECK_MSG(leak == 0, "B=%d T=%d: %d probabilities outside an example (or rows not 1)", B, T, leak);
    /* each example alone */
    float *o1 = malloc((size_t)T * C * 4), *d1 = malloc((size_t)T * W * 4);
    float *q1 = malloc((size_t)T * W * 4), *g1 = malloc((size_t)T * C * 4);
    float *s1 = malloc((size_t)NH * T * T * 4), *sc1 = malloc((size_t)NH * T * 4);
    float *po = malloc((size_t)T * C * 4), *pd = malloc((size_t)T * W * 4);
    for (int e = 0; e < n_ex; e++) {
        const int b = ex[e][0], t0 = ex[e][1], len = ex[e][2];
        memcpy(q1, qkv + ((size_t)b * T + t0) * W, (size_t)len * W * 4);
        memcpy(g1, dout + ((size_t)b * T + t0) * C, (size_t)len * C * 4);
        for (int f = 0; f < 2; f++) {
            kern(f, o1, s1, d1, sc1, g1, q1, 1, len, C, NH, NKV, NULL);
            memcpy(po, out[f] + ((size_t)b * T + t0) * C, (size_t)len * C * 4);
            memcpy(pd, dq[f] + ((size_t)b * T + t0) * W, (size_t)len * W * 4);
            double eo = t_rel_err(po, o1, (size_t)len * C), ed = t_rel_err(pd, d1, (size_t)len * W);
            /* a one-token example: dq = dk = 0 exactly in both */
            if (len == 1) {
                int nz = 0;
                for (int i = 0; i < C + NKV * hd; i++) nz += pd[i] != 0.0f;
                CHECK_MSG(nz == 0, "one-token example: %d of dq, dk not 0", nz);
                ed = t_rel_err(pd + C + NKV * hd, d1 + C + NKV * hd, (size_t)NKV * hd);
            }
            CHECK_MSG(eo <= BOUND && ed <= BOUND, "%s B=%d T=%d NH=%d NKV=%d example %d (row %d, "
                      "%d at %d): out %.3g dqkv %.3g", f ? "flash" : "plain", B, T, NH, NKV, e, b,
                      len, t0, eo, ed);
            worst[0] = fmax(worst[0], eo), worst[1] = fmax(worst[1], ed);
        }
    }
    double fo = t_rel_err(out[1], out[0], no), fd = t_rel_err(dq[1], dq[0], nq);
    CHECK_MSG(fo <= BOUND && fd <= BOUND, "flash vs plain packed: %.3g %.3g", fo, fd);
    worst[2] = fmax(worst[2], fmax(fo, fd));
    /* the bits do not depend on the thread count */
    int threads = hpt_get_threads();
    hpt_set_threads(threads == 1 ? 2 : 1);
    for (int f = 0; f < 2; f++) {
        float *o3 = malloc(no * 4), *d3 = malloc(nq * 4);
        kern(f, o3, st[f], d3, scr, dout, qkv, B, T, C, NH, NKV, pos);
        CHECK_MSG(!memcmp(o3, out[f], no * 4) && !memcmp(d3, dq[f], nq * 4),
                  "%s packed: bits differ with the thread count", f ? "flash" : "plain");
        free(o3), free(d3);
    }
    hpt_set_threads(threads);
    /* pos NULL: the causal kernels' bits */
    for (int f = 0; f < 2; f++) {
        float *o3 = malloc(no * 4), *d3 = malloc(nq * 4), *o4 = malloc(no * 4), *d4 = malloc(nq * 4);
        kern(f, o3, st[f], d3, scr, dout, qkv, B, T, C, NH, NKV, NULL);
        if (f) {
            k_flash_attention_forward(o4, st[f], qkv, B, T, C, NH, NKV);
            k_flash_attention_backward(d4, scr, dout, qkv, o4, st[f], B, T, C, NH, NKV);
        } else {
            k_attention_forward(o4, st[f], qkv, B, T, C, NH, NKV);
            k_attention_backward(d4, scr, dout, qkv, st[f], B, T, C, NH, NKV);
        }
        CHECK(!memcmp(o3, o4, no * 4) && !memcmp(d3, d4, nq * 4));
        free(o3), free(d3), free(o4), free(d4);
    }
    printf("  B=%d T=%3d NH=%d NKV=%d hd=%d: %d examples\n", B, T, NH, NKV, hd, n_ex);
    free(o1), free(d1), free(q1), free(g1), free(s1), free(sc1), free(po), free(pd);
    for (int f = 0; f < 2; f++) free(out[f]), free(dq[f]), free(st[f]);
    free(qkv), free(dout), free(pos), free(scr);
}

static void check_kernels(void) {
    hpt_rng_seed(&rng, 4321);
    double worst[3] = {0};
    printf("packed attention against each example alone:\n");
    check_kernel(1, 5, 2, 2, 16, worst);
    check_kernel(2, 63, 4, 2, 16, worst);
    check_kernel(2, 65, 2, 2, 32, worst);
    check_kernel(3, 150, 6, 3, 20, worst);
    check_kernel(2, 200, 2, 1, 64, worst);
    check_kernel(1, 300, 2, 2, 96, worst); /* heads wider than the compact tiles */
    printf("  worst: out %.2e dqkv %.2e, flash vs plain %.2e (bound %.0e)\n", worst[0], worst[1],
           worst[2], BOUND);
}

/* ---- the model ---- */

enum { MB = 2, MT = 80, MAXEX = 64 };

typedef struct {
    int n;
    int row[MAXEX], start[MAXEX], len[MAXEX];
} layout;

static hpt_model *make_model(hpt_mem *mem, const char *shape, hpt_attention kind) {
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(shape, &cfg));
    hpt_model *m;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &m));
    hpt_model_init_random(m, 11);
    hpt_act_opts ao = hpt_act_defaults();
    ao.attention = kind;
    CHECK_OK(hpt_model_set_act_opts(m, &ao));
    return m;
}

/* forward + backward of x, y at (B, T) (pos may be NULL); the loss, the gradients (copied into
 * g, np floats), the number of targets */
static float run(hpt_model *m, const int32_t *x, const int32_t *y, const int32_t *pos, int B,
                 int T, float *g) {
    float loss;
    CHECK_OK(hpt_model_set_positions(m, pos, B, T));
    CHECK_OK(hpt_model_forward(m, x, y, B, T, &loss));
    hpt_model_zero_grad(m);
    CHECK_OK(hpt_model_backward(m));
    memcpy(g, hpt_model_grads(m), hpt_model_num_params(m) * sizeof(float));
    CHECK_OK(hpt_model_set_positions(m, NULL, B, T));
    return loss;
}

static void check_model(const char *shape, hpt_attention kind) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *m = make_model(mem, shape, kind);
    const size_t np = hpt_model_num_params(m);
    hpt_rng_seed(&rng, 77);
    int32_t x[MB * MT], y[MB * MT], pos[MB * MT];
    layout L = {0};
    for (int b = 0; b < MB; b++) { /* examples of 1 .. 40 tokens, one of 80 (a whole row) */
        int t = 0;
        while (t < MT) {
            int len = b == 1 && t == 0 ? MT : 1 + (int)(hpt_rng_uniform(&rng) * 40);
            if (len > MT - t) len = MT - t;
            L.row[L.n] = b, L.start[L.n] = t, L.len[L.n] = len, L.n++;
            for (int i = 0; i < len; i++) pos[b * MT + t + i] = i;
            t += len;
        }
    }
    int64_t n_all = 0;
    for (int i = 0; i < MB * MT; i++) {
        x[i] = (int32_t)(hpt_rng_uniform(&rng) * 256) % 256;
        /* an example's last token has no next token in it: ignored; others 3 in 4 targets */
        const int last = i % MT == MT - 1 || pos[i + 1] == 0;
        y[i] = last || (double)hpt_rng_uniform(&rng) < 0.25 ? -1 : (int32_t)(hpt_rng_uniform(&rng) * 256) % 256;
        n_all += y[i] >= 0;
    }
    float *gp = malloc(np * 4), *ge = malloc(np * 4), *gsum = calloc(np, 4), *gpad = malloc(np * 4);
    const float lp = run(m, x, y, pos, MB, MT, gp);
    double lsum = 0;
    for (int e = 0; e < L.n; e++) {
        const int off = L.row[e] * MT + L.start[e], len = L.len[e];
        int64_t ne = 0;
        for (int i = 0; i < len; i++) ne += y[off + i] >= 0;
        if (ne == 0) continue;
        const float le = run(m, x + off, y + off, NULL, 1, len, ge);
        lsum += (double)le * ne;
        for (size_t i = 0; i < np; i++) gsum[i] += ge[i] * (float)((double)ne / n_all);
    }
    lsum /= (double)n_all;
    const double el = fabs((double)lp - lsum) / fabs(lsum), eg = t_rel_err(gp, gsum, np);
    /* padded: one example per row (the first MB*2 examples), the rest not targets */
    enum { PB = 4 };
    int32_t px[PB * MT], py[PB * MT];
    int64_t n_pad = 0;
    double lpad_ref = 0;
    float *gpad_ref = calloc(np, 4);
    for (int r = 0; r < PB; r++) {
        const int off = L.row[r] * MT + L.start[r], len = L.len[r];
        for (int t = 0; t < MT; t++) {
            px[r * MT + t] = t < len ? x[off + t] : 0;
            py[r * MT + t] = t < len ? y[off + t] : -1;
            n_pad += py[r * MT + t] >= 0;
        }
    }
    for (int r = 0; r < PB; r++) {
        const int off = L.row[r] * MT + L.start[r], len = L.len[r];
        int64_t ne = 0;
        for (int i = 0; i < len; i++) ne += y[off + i] >= 0;
        if (ne == 0) continue;
        const float le = run(m, x + off, y + off, NULL, 1, len, ge);
        lpad_ref += (double)le * ne / (double)n_pad;
        for (size_t i = 0; i < np; i++) gpad_ref[i] += ge[i] * (float)((double)ne / n_pad);
    }
    const float lpad = run(m, px, py, NULL, PB, MT, gpad);
    const double epl = fabs((double)lpad - lpad_ref) / fabs(lpad_ref), epg = t_rel_err(gpad, gpad_ref, np);
    printf("  %s %s: %d examples, %lld targets: packed loss %.7f, one by one %.7f (rel %.1e), "
           "gradients rel %.1e; padded loss rel %.1e, gradients %.1e\n", shape,
           kind == HPT_ATTN_FLASH ? "flash" : "plain", L.n, (long long)n_all, (double)lp, lsum,
           el, eg, epl, epg);
    CHECK_MSG(el <= BOUND && eg <= BOUND, "packed vs one by one: loss %.3g gradients %.3g", el, eg);
    CHECK_MSG(epl <= BOUND && epg <= BOUND, "padded vs one by one: loss %.3g gradients %.3g", epl, epg);
    /* positions that do not run 0, 1, 2, ... are refused; a forward at another shape too */
    const int32_t keep = pos[5];
    pos[5] = pos[4] + 2;
    CHECK(hpt_model_set_positions(m, pos, MB, MT) == HPT_ERR_INVALID);
    pos[5] = keep;
    CHECK_OK(hpt_model_set_positions(m, pos, MB, MT));
    float loss;
    CHECK(hpt_model_forward(m, x, y, 1, MT, &loss) == HPT_ERR_INVALID);
    free(gp), free(ge), free(gsum), free(gpad), free(gpad_ref);
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

/* ---- the loader and the trainer ---- */

/* two masked shards (uint16, then uint32 tokens) of examples of 1 to 100 tokens (some longer
 * than T = 64): tokens below 256,
 * each example's first token context, the rest targets 3 in 4; their paths' pattern into glob */
static void make_examples(const char *dir, char glob_out[512]) {
    hpt_rng_seed(&rng, 99);
    for (int sh = 0; sh < 2; sh++) {
        enum { NMAX = 6000 };
        uint32_t *tok = malloc(NMAX * 4), starts[400];
        uint8_t *tgt = malloc(NMAX);
        size_t n = 0, ne = 0;
        while (ne < 150) {
            int len = 1 + (int)(hpt_rng_uniform(&rng) * 30);
            if (hpt_rng_uniform(&rng) < 0.1f) len = 50 + (int)(hpt_rng_uniform(&rng) * 50);
            starts[ne++] = (uint32_t)n;
            for (int i = 0; i < len; i++, n++) {
                tok[n] = (uint32_t)(hpt_rng_uniform(&rng) * 256) % 256;
                tgt[n] = i > 0 && hpt_rng_uniform(&rng) < 0.75f;
            }
        }
        char path[600];
        snprintf(path, sizeof path, "%s/train_%06d.bin", dir, sh);
        CHECK_OK(hpt_shard_write_masked(path, tok, tgt, n, starts, ne, sh ? 4 : 2)); /* 16, 32 bit */
        free(tok), free(tgt);
    }
    snprintf(glob_out, 512, "%s/train_*.bin", dir);
}

/* One pass of the loader (ON or OFF) against the shards read whole: every example in order,
 * whole (truncated to T), its tokens, targets (flagged next tokens within it) and positions;
 * rows never mix shards; padding is input 0, no target; real tokens counted. */
static void check_loader(const char *pattern, const char *dir, int mode) {
    enum { B = 3, T = 64 };
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_dataloader *d;
    CHECK_OK(hpt_dataloader_open(mem, pattern, B, T, 256, &d));
    CHECK_OK(hpt_dataloader_set_pack(d, mode));
    CHECK((hpt_dataloader_positions(d) == NULL) == (mode == HPT_PACK_OFF));
    const size_t nb = hpt_dataloader_num_batches(d);
    int bad = 0, sh = 0;
    size_t e = 0, n_ex = 0, n_tok = 0;
    uint32_t *tok = NULL, *st = NULL;
    uint8_t *tgt = NULL;
    char path[600];
    int64_t real = 0, want_real = 0;
    for (size_t it = 0; it < nb && !bad; it++) {
        const int32_t *x, *y;
        CHECK_OK(hpt_dataloader_next(d, &x, &y));
        const int32_t *pos = hpt_dataloader_positions(d);
        real += hpt_dataloader_real_tokens(d);
        for (int b = 0; b < B && !bad; b++) {
            int t = 0;
            while (t < T) { /* the next example, if it starts here */
                if (!tok || e == n_ex) {
                    if (tok && t > 0) break; /* a row never spans two shards */
                    free(tok), free(tgt), free(st);
                    snprintf(path, sizeof path, "%s/train_%06d.bin", dir, sh++);
                    CHECK_OK(hpt_shard_read(path, &tok, &tgt, &n_tok, &st, &n_ex));
                    e = 0;
                }
                const size_t s0 = st[e], s1 = e + 1 < n_ex ? st[e + 1] : n_tok;
                int len = (int)(s1 - s0);
                if (t > 0 && (mode == HPT_PACK_OFF || t + len > T)) break;
                if (len > T) len = T;
                for (int q = 0; q < len; q++) {
                    const size_t i = (size_t)b * T + t + q, k = s0 + (size_t)q;
                    const int32_t want_y = k + 1 < s1 && tgt[k + 1] ? (int32_t)tok[k + 1] : -1;
                    bad += x[i] != (int32_t)tok[k] || y[i] != want_y || (pos && pos[i] != q);
                }
                want_real += len;
                t += len;
                e++;
            }
            for (; t < T; t++) bad += x[(size_t)b * T + t] != 0 || y[(size_t)b * T + t] != -1;
        }
    }
    CHECK_MSG(!bad, "--pack %s: %d tokens, targets or positions differ from the shards",
              mode == HPT_PACK_ON ? "on" : "off", bad);
    CHECK(real == want_real);
    printf("  loader --pack %s: %zu batches of %d x %d, %lld real tokens (%.0f%%)\n",
           mode == HPT_PACK_ON ? "on" : "off", nb, B, T, (long long)real,
           100.0 * (double)real / ((double)nb * B * T));
    /* resume: the position after a batch is an example's first token; a token inside one is
     * refused */
    int64_t psh, poff;
    hpt_dataloader_get_pos(d, &psh, &poff);
    CHECK_OK(hpt_dataloader_set_pos(d, psh, poff));
    CHECK(hpt_dataloader_set_pos(d, 0, 1) == HPT_ERR_INVALID || st == NULL);
    free(tok), free(tgt), free(st);
    hpt_dataloader_free(d);
    hpt_mem_destroy(mem);
}

/* The trainer with --pack on and off: the estimate equals the measured peak (the positions'
 * buffers counted) and a stopped and resumed run ends with the whole run's bits. */
static void check_trainer(const char *shape, const char *pattern, int mode) {
    hpt_train_opts o = t_train_opts(shape, pattern, 2, 64, 6, 2);
    o.pack = mode;
    const char *name = mode == HPT_PACK_ON ? "pack_on" : "pack_off";
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    float losses[6];
    char save[600];
    snprintf(save, sizeof save, "%s/%s_run", t_tmpdir(), name);
    o.save_dir = save;
    t_train_run(mem, &o, 6, losses, NULL, NULL);
    o.save_dir = NULL;
    t_check_estimate(mem, &o, name);
    hpt_mem_destroy(mem);
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(shape, &cfg));
    CHECK_OK(hpt_mem_create(&mem));
    t_check_resume(mem, &o, 3, hpt_model_config_num_params(&cfg), name, name, NULL, NULL);
    hpt_mem_destroy(mem);
    printf("  trainer --pack %s: losses %.4f .. %.4f; estimate = measured; resume exact\n",
           mode == HPT_PACK_ON ? "on" : "off", (double)losses[0], (double)losses[5]);
}

/* Against PyTorch (tests/make_ref_pack.py: an explicit block-diagonal causal mask, positions
 * per example, ignore_index): the loss and every gradient within BOUND, flash and plain. */
static void check_torch(const char *arch) {
    if (strcmp(arch, "gpt2") && strcmp(arch, "llama")) { /* make_ref_pack.py has these two */
        printf("  %s: no PyTorch reference of packed examples (tests/make_ref_pack.py: GPT-2 and "
               "Llama)\n", arch);
        return;
    }
    char path[600];
    snprintf(path, sizeof path, "%s/pack_%s.bin", t_ref_dir(), arch);
    size_t len;
    unsigned char *f = t_read_file(path, &len);
    CHECK_MSG(f != NULL, "%s is missing (tests/make_ref_pack.py: the fixture make_ref_pack)", path);
    if (!f) return;
    int32_t h[256];
    memcpy(h, f, sizeof h);
    const int B = h[3], T = h[4];
    const size_t n = (size_t)h[5], BT = (size_t)B * T;
    CHECK(h[0] == 20261129 && h[1] == 1 && len == 1024 + 128 + 3 * BT * 4 + 2 * n * 4 + 4);
    if (h[0] != 20261129 || len != 1024 + 128 + 3 * BT * 4 + 2 * n * 4 + 4) {
        free(f);
        return;
    }
    char shape[129] = {0};
    memcpy(shape, f + 1024, 128);
    const unsigned char *p = f + 1024 + 128;
    int32_t *x = malloc(BT * 4), *y = malloc(BT * 4), *pos = malloc(BT * 4);
    float *params = malloc(n * 4), *grads = malloc(n * 4), loss_ref;
    memcpy(x, p, BT * 4), p += BT * 4;
    memcpy(y, p, BT * 4), p += BT * 4;
    memcpy(pos, p, BT * 4), p += BT * 4;
    memcpy(params, p, n * 4), p += n * 4;
    memcpy(&loss_ref, p, 4), p += 4;
    memcpy(grads, p, n * 4);
    for (int kind = 0; kind < 2; kind++) {
        hpt_mem *mem;
        CHECK_OK(hpt_mem_create(&mem));
        hpt_model *m = make_model(mem, shape, kind ? HPT_ATTN_PLAIN : HPT_ATTN_FLASH);
        CHECK(hpt_model_num_params(m) == n);
        if (hpt_model_num_params(m) == n) {
            memcpy(hpt_model_params(m), params, n * 4);
            float *g = malloc(n * 4);
            const float loss = run(m, x, y, pos, B, T, g);
            const double el = fabs((double)loss - (double)loss_ref) / fabs((double)loss_ref);
            const double eg = t_rel_err(g, grads, n);
            printf("  %s against PyTorch (block-diagonal mask, positions per example), %s: loss "
                   "%.7f vs %.7f (rel %.1e), gradients rel %.1e\n", arch, kind ? "plain" : "flash",
                   (double)loss, (double)loss_ref, el, eg);
            CHECK_MSG(el <= BOUND && eg <= BOUND, "%s vs PyTorch: loss %.3g gradients %.3g", arch,
                      el, eg);
            free(g);
        }
        hpt_model_free(m);
        hpt_mem_destroy(mem);
    }
    free(x), free(y), free(pos), free(params), free(grads), free(f);
}

/* GPT-2's chunked embeddings (the fused update; model/embed.c reads wpe at each position) with
 * --pack on: each step's loss and the final weights as with the full embeddings, within the
 * chunked head's rounding (test_embed.c's bounds: 1e-6 per loss, 1e-5 the weights); bf16
 * embeddings within 0.1% of the mean loss */
static void check_chunked(const char *shape, const char *pattern) {
    enum { S = 6 };
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(shape, &cfg));
    const size_t np = hpt_model_config_num_params(&cfg);
    float loss[2][S], *w[2] = {malloc(np * 4), malloc(np * 4)};
    for (int k = 0; k < 2; k++) {
        hpt_train_opts o = t_train_opts(shape, pattern, 2, 64, S, 2);
        o.pack = HPT_PACK_ON;
        o.offload.fused = 1;
        o.offload.vocab_chunk = 48;
        if (k) o.offload.embeddings = HPT_EMB_CHUNKED;
        char save[600];
        snprintf(save, sizeof save, "%s/chunked_%d", t_tmpdir(), k);
        o.save_dir = save;
        hpt_mem *mem;
        CHECK_OK(hpt_mem_create(&mem));
        t_train_run(mem, &o, S, loss[k], NULL, w[k]);
        hpt_mem_destroy(mem);
    }
    double el = 0.0;
    for (int i = 0; i < S; i++) el = fmax(el, fabs((double)loss[1][i] - (double)loss[0][i]) / fabs((double)loss[0][i]));
    const double ew = t_rel_err(w[1], w[0], np);
    printf("  --pack on with chunked embeddings (fused): losses rel %.1e, weights rel %.1e\n", el, ew);
    CHECK_MSG(el <= 1e-6 && ew <= 1e-5, "chunked vs full embeddings, packed: %.3g %.3g", el, ew);
    /* bf16 embeddings (bf16 block weights, stochastic rounding; encoder_forward_bf16_pos): the
     * mean loss within test_embed's bound of the fp32 run's, and the loss falling */
    hpt_train_opts o = t_train_opts(shape, pattern, 2, 64, S, 2);
    o.pack = HPT_PACK_ON;
    o.offload.fused = 1;
    o.offload.vocab_chunk = 48;
    o.offload.weights = HPT_BW_BF16_SR;
    o.offload.embeddings = HPT_EMB_BF16;
    char save[600];
    snprintf(save, sizeof save, "%s/bf16", t_tmpdir());
    o.save_dir = save;
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    float lb[S];
    t_train_run(mem, &o, S, lb, NULL, NULL);
    hpt_mem_destroy(mem);
    double mb = 0.0, mf = 0.0;
    for (int i = 0; i < S; i++) mb += (double)lb[i] / S, mf += (double)loss[0][i] / S;
    const double eb = fabs(mb - mf) / mf;
    printf("  --pack on with bf16 embeddings (bf16-sr weights): mean loss %.5f vs fp32 %.5f (rel "
           "%.1e)\n", mb, mf, eb);
    CHECK_MSG(eb <= 1e-3, "bf16 embeddings, packed: mean loss %.3g from fp32's", eb);
    free(w[0]), free(w[1]);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_pack");
    if (!a) return 2;
    if (t_arch_first(a)) check_kernels();
    char shape[T_SHAPE_MAX];
    t_arch_shape(a, shape, 2, 64, 4, 256, 96, 0);
    printf("the model, packed and padded, against each example alone:\n");
    check_model(shape, HPT_ATTN_FLASH);
    check_model(shape, HPT_ATTN_PLAIN);
    check_torch(a->name);
    const char *dir = t_tmpdir();
    char pattern[512];
    make_examples(dir, pattern);
    if (t_arch_first(a)) {
        check_loader(pattern, dir, HPT_PACK_ON);
        check_loader(pattern, dir, HPT_PACK_OFF);
    }
    if (a->id == HPT_ARCH_GPT2) check_chunked(shape, pattern);
    check_trainer(shape, pattern, HPT_PACK_ON);
    check_trainer(shape, pattern, HPT_PACK_OFF);
    return t_done(t_arch_label(a, "test_pack"));
}
