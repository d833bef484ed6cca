/* test_loss_mask.c: chat data's masked shards and the loss on targets only (docs/targets.md).
 *   (a) masked shards (versions 2 and 8) round-trip through hpt_shard_write_masked and
 *       hpt_shard_read; the loader's targets are the tokens where the flag is 1 and -1 where it
 *       is 0; an llm.c shard (version 1) reads as before, every token a target; truncated or
 *       corrupt files (size, flags, starts, header) fail with one clear HPT_ERR_FORMAT line;
 *   (b) PyTorch's cross_entropy(ignore_index) on a masked batch (tests/make_ref_mask.py): the
 *       loss and every gradient within 1e-5 (norm-wise relative), with the head whole and in
 *       row chunks, and the inference path's loss; a batch with no target gives loss 0 and
 *       zero gradients;
 *   (c) accumulation: 2 micro-batches of one row with 4 and 11 targets through the trainer
 *       (SGD, one step) give the batch of two rows' weights and loss within fp32 rounding, and
 *       so do the fused update and the chunked embeddings' head; the trainer's gradient is
 *       PyTorch's. */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n);
    if (f) fclose(f);
}

/* A masked shard of n tokens: examples of 10 tokens, the first 6 a prompt (flag 0). */
static void make_masked(const char *path, size_t n, int width, uint32_t *tok, uint8_t *tgt,
                        uint32_t *starts, size_t *n_ex) {
    *n_ex = 0;
    for (size_t i = 0; i < n; i++) {
        tok[i] = (uint32_t)((i * 7919u + 13u) % (width == 2 ? 997u : 70000u));
        tgt[i] = i % 10 >= 6;
        if (i % 10 == 0) starts[(*n_ex)++] = (uint32_t)i;
    }
    CHECK_OK(hpt_shard_write_masked(path, tok, tgt, n, starts, *n_ex, width));
}

static void test_shards(hpt_mem *mem) {
    char path[600], bad[600];
    enum { N = 200, B = 2, T = 8 };
    uint32_t tok[N], starts[N];
    uint8_t tgt[N];
    size_t n_ex;
    for (int width = 2; width <= 4; width += 2) {
        snprintf(path, sizeof path, "%s/masked%d.bin", t_tmpdir(), width);
        make_masked(path, N, width, tok, tgt, starts, &n_ex);
        uint32_t *rt, *rs;
        uint8_t *rg;
        size_t rn, re;
        CHECK_OK(hpt_shard_read(path, &rt, &rg, &rn, &rs, &re));
        CHECK(rn == N && re == n_ex && re == 20);
        CHECK(rt && memcmp(rt, tok, sizeof tok) == 0 && memcmp(rg, tgt, N) == 0 &&
              memcmp(rs, starts, re * 4) == 0);
        free(rt);
        free(rg);
        free(rs);
        hpt_dataloader *d = NULL;
        CHECK_OK(hpt_dataloader_open(mem, path, B, T, 70000, &d));
        if (!d) continue;
        int bad_y = 0;
        for (int w = 0; w < 3; w++) { /* windows at 0, 16, 32 */
            const int32_t *x, *y;
            CHECK_OK(hpt_dataloader_next(d, &x, &y));
            for (int i = 0; i < B * T; i++) {
                size_t at = (size_t)w * B * T + (size_t)i;
                bad_y += x[i] != (int32_t)tok[at];
                bad_y += y[i] != (tgt[at + 1] ? (int32_t)tok[at + 1] : -1);
            }
        }
        CHECK_MSG(bad_y == 0, "width %d: %d inputs or targets differ from the shard", width, bad_y);
        hpt_dataloader_free(d);
        /* damaged copies: each a one-line HPT_ERR_FORMAT at open (or at the window) */
        size_t len;
        unsigned char *f = t_read_file(path, &len);
        CHECK(f && len == 1024 + (size_t)width * N + N + 4 * n_ex);
        if (!f) continue;
        snprintf(bad, sizeof bad, "%s/bad%d.bin", t_tmpdir(), width);
        write_bytes(bad, f, len - 1); /* truncated */
        CHECK_STATUS(hpt_dataloader_open(mem, bad, B, T, 70000, &d), HPT_ERR_FORMAT);
        CHECK(strstr(hpt_last_error(), "truncated") && !strchr(hpt_last_error(), '\n'));
        unsigned char *g = malloc(len);
        memcpy(g, f, len);
        g[1024 + (size_t)width * N + 3] = 2; /* a flag that is neither 0 nor 1 */
        write_bytes(bad, g, len);
        CHECK_OK(hpt_dataloader_open(mem, bad, B, T, 70000, &d));
        const int32_t *x, *y;
        if (d) CHECK_STATUS(hpt_dataloader_next(d, &x, &y), HPT_ERR_FORMAT);
        hpt_dataloader_free(d);
        d = NULL;
        CHECK_STATUS(hpt_shard_read(bad, &rt, &rg, &rn, &rs, &re), HPT_ERR_FORMAT);
        memcpy(g, f, len);
        uint32_t s5 = 30; /* example 5 starts where example 3 does: not increasing */
        memcpy(g + len - 4 * n_ex + 5 * 4, &s5, 4);
        write_bytes(bad, g, len);
        CHECK_STATUS(hpt_dataloader_open(mem, bad, B, T, 70000, &d), HPT_ERR_FORMAT);
        CHECK(strstr(hpt_last_error(), "example 5"));
        memcpy(g, f, len);
        int32_t e = N + 1; /* more examples than tokens */
        memcpy(g + 12, &e, 4);
        write_bytes(bad, g, len);
        CHECK_STATUS(hpt_dataloader_open(mem, bad, B, T, 70000, &d), HPT_ERR_FORMAT);
        int32_t v = width == 2 ? 3 : 9; /* a version that does not exist */
        memcpy(g, f, len);
        memcpy(g + 4, &v, 4);
        write_bytes(bad, g, len);
        CHECK_STATUS(hpt_dataloader_open(mem, bad, B, T, 70000, &d), HPT_ERR_FORMAT);
        free(g);
        free(f);
    }
    /* the writer refuses what it cannot write consistently */
    uint32_t st0 = 1, big = 70000;
    uint8_t one = 1, two = 2;
    snprintf(bad, sizeof bad, "%s/never.bin", t_tmpdir());
    CHECK_STATUS(hpt_shard_write_masked(bad, tok, tgt, 10, &st0, 1, 2), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_shard_write_masked(bad, &big, &one, 1, starts, 1, 2), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_shard_write_masked(bad, tok, &two, 1, starts, 1, 4), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_shard_write_masked(bad, tok, tgt, 10, starts, 1, 3), HPT_ERR_INVALID);
    /* llm.c's version 1: every token a target, as before; read whole, no example starts */
    uint16_t t16[N];
    for (int i = 0; i < N; i++) t16[i] = (uint16_t)(tok[i] % 997u);
    snprintf(path, sizeof path, "%s/plain.bin", t_tmpdir());
    CHECK_OK(hpt_shard_write(path, t16, N));
    hpt_dataloader *d = NULL;
    CHECK_OK(hpt_dataloader_open(mem, path, B, T, 1000, &d));
    const int32_t *x = NULL, *y = NULL;
    if (d) CHECK_OK(hpt_dataloader_next(d, &x, &y));
    int differ = 0;
    for (int i = 0; x && y && i < B * T; i++) differ += x[i] != t16[i] || y[i] != t16[i + 1];
    CHECK(d && differ == 0);
    hpt_dataloader_free(d);
    uint32_t *rt, *rs;
    uint8_t *rg;
    size_t rn, re;
    CHECK_OK(hpt_shard_read(path, &rt, &rg, &rn, &rs, &re));
    CHECK(rn == N && re == 0 && rg && rg[0] == 1 && rg[N - 1] == 1 && rt && rt[5] == t16[5]);
    free(rt);
    free(rg);
    free(rs);
}

/* (b) */
typedef struct {
    int B, T, count[2];
    int32_t *x, *y;
    float loss;
    float *grads;
} mask_ref;

static int load_ref(mask_ref *r, size_t n_params) {
    char path[600];
    snprintf(path, sizeof path, "%s/mask_state.bin", t_ref_dir());
    size_t len;
    unsigned char *f = t_read_file(path, &len);
    CHECK_MSG(f != NULL, "%s is missing (tests/make_ref_mask.py: the fixture make_ref_mask)", path);
    if (!f) return 0;
    int32_t h[6];
    memcpy(h, f, sizeof h);
    r->B = h[2];
    r->T = h[3];
    r->count[0] = h[4];
    r->count[1] = h[5];
    size_t BT = (size_t)r->B * r->T;
    CHECK(h[0] == 20261128 && len == 1024 + BT * 8 + 4 + n_params * 4);
    r->x = malloc(BT * 4);
    r->y = malloc(BT * 4);
    r->grads = malloc(n_params * 4);
    memcpy(r->x, f + 1024, BT * 4);
    memcpy(r->y, f + 1024 + BT * 4, BT * 4);
    memcpy(&r->loss, f + 1024 + BT * 8, 4);
    memcpy(r->grads, f + 1024 + BT * 8 + 4, n_params * 4);
    free(f);
    return 1;
}

static void test_reference(hpt_mem *mem, int head_chunk) {
    char path[600];
    snprintf(path, sizeof path, "%s/mask_model.bin", t_ref_dir());
    hpt_model *m = NULL;
    CHECK_OK(hpt_model_load(mem, path, &m));
    if (!m) return;
    const hpt_model_config *cfg = hpt_model_get_config(m);
    size_t n = hpt_model_num_params(m);
    mask_ref r;
    if (!load_ref(&r, n)) {
        hpt_model_free(m);
        return;
    }
    if (head_chunk) {
        hpt_act_opts ao = hpt_act_defaults();
        ao.head_chunk = head_chunk;
        CHECK_OK(hpt_model_set_act_opts(m, &ao));
    }
    float loss;
    CHECK_OK(hpt_model_forward(m, r.x, r.y, r.B, r.T, &loss));
    hpt_model_zero_grad(m);
    CHECK_OK(hpt_model_backward(m));
    double lrel = fabs((double)loss - (double)r.loss) / fabs((double)r.loss);
    printf("head chunk %d: loss %.7f (PyTorch %.7f) rel %.2e\n", head_chunk, (double)loss,
           (double)r.loss, lrel);
    CHECK_MSG(lrel < 1e-5, "loss rel %.3e", lrel);
    t_tensor t[T_MAX_TENSORS];
    int nt = t_tensors_of(cfg, t, NULL);
    const float *g = hpt_model_grads(m);
    double worst = 0.0;
    for (int i = 0; i < nt; i++) {
        double e = t_rel_err(g + t[i].offset, r.grads + t[i].offset, t[i].numel);
        worst = fmax(worst, e);
        CHECK_MSG(e < 1e-5, "grad %s rel %.3e", t[i].name, e);
    }
    printf("head chunk %d: gradients' worst norm-wise relative error %.2e over %d tensors\n",
           head_chunk, worst, nt);
    if (!head_chunk) { /* the inference path's loss (hpt_infer_loss) over the same targets */
        hpt_infer *inf = NULL;
        float il = -1.0f;
        CHECK_OK(hpt_infer_create(mem, m, HPT_WEIGHTS_F32, 0, &inf));
        if (inf) CHECK_OK(hpt_infer_loss(inf, r.x, r.y, r.B, r.T, &il));
        double irel = fabs((double)il - (double)r.loss) / fabs((double)r.loss);
        printf("hpt_infer_loss %.7f: rel %.2e\n", (double)il, irel);
        CHECK_MSG(irel < 1e-5, "hpt_infer_loss rel %.3e", irel);
        hpt_infer_free(inf);
    }
    /* no target at all: loss 0, gradients 0 */
    size_t BT = (size_t)r.B * r.T;
    int32_t *none = malloc(BT * 4);
    for (size_t i = 0; i < BT; i++) none[i] = -1;
    CHECK_OK(hpt_model_forward(m, r.x, none, r.B, r.T, &loss));
    hpt_model_zero_grad(m);
    CHECK_OK(hpt_model_backward(m));
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++) nonzero += g[i] != 0.0f;
    CHECK_MSG(loss == 0.0f && nonzero == 0, "no targets: loss %g, %zu gradients not 0",
              (double)loss, nonzero);
    free(none);
    free(r.x);
    free(r.y);
    free(r.grads);
    hpt_model_free(m);
}

/* (c): a masked shard whose first window's two rows are the reference batch's rows; one SGD
 * step over it as one batch of 2 and as 2 micro-batches of 1 */
static void test_accum(hpt_mem *mem) {
    char model[600], data[600];
    snprintf(model, sizeof model, "%s/mask_model.bin", t_ref_dir());
    hpt_model *m0 = NULL;
    CHECK_OK(hpt_model_load(mem, model, &m0));
    if (!m0) return;
    size_t n = hpt_model_num_params(m0);
    hpt_model_free(m0);
    mask_ref r;
    if (!load_ref(&r, n)) return;
    /* the shard: x's tokens (the last target is not one: the token after x is any), four
     * windows of them; y is x shifted by one where it is a target */
    const size_t BT = (size_t)r.B * r.T, N = 4 * BT + 1;
    uint32_t *tok = calloc(N, 4), starts[1] = {0};
    uint8_t *tgt = calloc(N, 1);
    for (size_t i = 0; i < N; i++) tok[i] = (uint32_t)r.x[i % BT];
    CHECK(r.y[BT - 1] < 0);
    for (size_t j = 0; j + 1 < BT; j++) {
        CHECK(r.y[j] < 0 || r.y[j] == r.x[j + 1]);
        tgt[j + 1] = r.y[j] >= 0;
    }
    snprintf(data, sizeof data, "%s/accum.bin", t_tmpdir());
    CHECK_OK(hpt_shard_write_masked(data, tok, tgt, N, starts, 1, 2));
    float *p1 = malloc(n * 4), *p2 = malloc(n * 4), l1[2], l2[2];
    hpt_train_opts o = t_train_opts(model, data, 2, r.T, 1, 0);
    o.adamw = hpt_optim_defaults(HPT_OPTIM_SGD);
    o.adamw.beta1 = 0.0f;
    o.adamw.weight_decay = 0.0f;
    o.grad_clip = 0.0f;
    o.lr = 0.5f;
    t_train_run(mem, &o, 0, l1, NULL, p1);
    o.B = 1;
    o.accum = 2;
    t_train_run(mem, &o, 0, l2, NULL, p2);
    double wrel = 0.0, moved = 0.0;
    hpt_model *m = NULL;
    CHECK_OK(hpt_model_load(mem, model, &m));
    const float *w0 = m ? hpt_model_params(m) : NULL;
    float *d1 = malloc(n * 4), *d2 = malloc(n * 4);
    for (size_t i = 0; w0 && i < n; i++) {
        d1[i] = p1[i] - w0[i];
        d2[i] = p2[i] - w0[i];
        moved = fmax(moved, fabs((double)d1[i]));
    }
    wrel = w0 ? t_rel_err(d2, d1, n) : 1.0;
    double lrel = fabs((double)l2[0] - (double)l1[0]) / fabs((double)l1[0]);
    printf("accum 2 x B 1 (targets %d and %d) vs B 2: update rel %.2e (largest step %.2e), "
           "loss %.7f vs %.7f (rel %.2e; PyTorch %.7f)\n", r.count[0], r.count[1], wrel, moved,
           (double)l2[0], (double)l1[0], lrel, (double)r.loss);
    CHECK(r.count[0] != r.count[1]);
    CHECK(moved > 1e-4);
    CHECK_MSG(wrel < 1e-5, "the accumulated update differs: rel %.3e", wrel);
    CHECK_MSG(lrel < 1e-6, "the accumulated loss differs: rel %.3e", lrel);
    CHECK(fabs((double)l1[0] - (double)r.loss) / (double)r.loss < 1e-5);
    /* the fused update (the step's target count known before the backward), with the whole
     * embeddings and with chunked ones (embed.c's vocabulary-chunked head and its loss) */
    for (int emb = 0; emb < 2; emb++) {
        hpt_train_opts f = o;
        f.B = 2;
        f.accum = 1;
        f.offload = hpt_offload_defaults();
        f.offload.fused = 1;
        if (emb) {
            f.offload.embeddings = HPT_EMB_CHUNKED;
            f.offload.vocab_chunk = 256;
        }
        float lf[2];
        t_train_run(mem, &f, 0, lf, NULL, p2);
        for (size_t i = 0; w0 && i < n; i++) d2[i] = p2[i] - w0[i];
        double frel = w0 ? t_rel_err(d2, d1, n) : 1.0;
        double flrel = fabs((double)lf[0] - (double)l1[0]) / fabs((double)l1[0]);
        printf("fused update%s vs unfused: update rel %.2e, loss rel %.2e\n",
               emb ? ", chunked embeddings" : "", frel, flrel);
        CHECK_MSG(frel < 1e-5 && flrel < 1e-6, "fused%s: update rel %.3e, loss rel %.3e",
                  emb ? " chunked" : "", frel, flrel);
    }
    /* the SGD update is -lr x the gradient: PyTorch's gradient too */
    for (size_t i = 0; i < n; i++) d1[i] = -d1[i] / 0.5f;
    double grel = t_rel_err(d1, r.grads, n);
    printf("trainer's gradient (from the SGD step) vs PyTorch: rel %.2e\n", grel);
    CHECK_MSG(grel < 1e-5, "trainer's gradient rel %.3e", grel);
    hpt_model_free(m);
    free(d1);
    free(d2);
    free(p1);
    free(p2);
    free(tok);
    free(tgt);
    free(r.x);
    free(r.y);
    free(r.grads);
}

int main(void) {
    hpt_set_threads(2);
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    test_shards(mem);
    test_reference(mem, 0);
    test_reference(mem, 5);
    test_accum(mem);
    hpt_mem_destroy(mem);
    return t_done("test_loss_mask");
}
