/* gpt2_ops.h: a GPT-2 training step made of the backend table's ops alone, for any backend and
 * any shape (included once by tests/test_cuda_gpt2.c, against PyTorch's reference, and by
 * bench/bench_cuda.c, for timing). Every buffer comes from the backend's device tier and only
 * copies cross to the host, so the same code runs on the CPU and on a GPU.
 * The step (llm.c's structure): encoder; per layer ln1 -> qkv -> flash attention -> proj
 * (+ residual) -> ln2 -> fc -> GELU -> fcproj (+ residual); lnf -> tied lm head -> softmax
 * cross-entropy; then the backward in reverse, every gradient accumulated into one flat buffer in
 * the checkpoint's order (llm.c's layout: wte padded to Vp rows, per-layer tensors stacked). */
#ifndef HPT_TEST_GPT2_OPS_H
#define HPT_TEST_GPT2_OPS_H

#include "kernels/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int L, C, NH, V, Vp, maxT, B, T;
} g2_cfg;

/* the checkpoint's tensors, in order */
enum { G2_WTE, G2_WPE, G2_LN1W, G2_LN1B, G2_QKVW, G2_QKVB, G2_APW, G2_APB, G2_LN2W, G2_LN2B,
       G2_FCW, G2_FCB, G2_FPW, G2_FPB, G2_LNFW, G2_LNFB, G2_NT };
static const char *const g2_name[G2_NT] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb",
                                           "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
                                           "fcprojw", "fcprojb", "lnfw", "lnfb"};

/* one saved buffer: its pointer and size, freed together */
typedef struct {
    float *p;
    size_t bytes;
} g2_buf;
#define G2_MAX_BUFS 512

typedef struct {
    const hpt_backend *be;
    hpt_mem *mem;
    g2_cfg c;
    size_t size[G2_NT], off[G2_NT + 1]; /* off[G2_NT]: the number of parameters */
    float *params, *grads, *m, *v;
    int32_t *x, *y;                      /* (B*T) */
    /* per layer; r[l] the input of layer l, r[L] the last residual */
    float **r, **ln1, **mu1, **rs1, **qkv, **atty, **lse, **r2, **ln2, **mu2, **rs2, **fch, **fcg;
    float *lnf, *muf, *rsf, *logits, *losses, *lsev;
    float *dres, *dln, *dqkv, *datty, *dfch, *dfcg, *dlnf, *attscr;
    g2_buf bufs[G2_MAX_BUFS];
    int nbufs;
    hpt_status status;
} g2_model;

static float *g2_alloc(g2_model *m, size_t n) {
    void *p = NULL;
    if (m->status != HPT_OK || m->nbufs == G2_MAX_BUFS) return NULL;
    m->status = m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, n * sizeof(float), &p);
    if (m->status == HPT_OK) m->bufs[m->nbufs++] = (g2_buf){p, n * sizeof(float)};
    return p;
}

static float **g2_layers(g2_model *m, int n, size_t each) {
    float **a = calloc((size_t)n, sizeof *a);
    for (int l = 0; a && l < n; l++) a[l] = g2_alloc(m, each);
    return a;
}

static inline void g2_close(g2_model *m) {
    m->be->sync();
    for (int i = 0; i < m->nbufs; i++)
        m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, m->bufs[i].p, m->bufs[i].bytes);
    m->nbufs = 0;
    float **arr[] = {m->r, m->ln1, m->mu1, m->rs1, m->qkv, m->atty, m->lse, m->r2, m->ln2, m->mu2, m->rs2, m->fch, m->fcg};
    for (size_t i = 0; i < sizeof arr / sizeof arr[0]; i++) free(arr[i]);
}

/* Allocates everything; the parameters are zero (copy them in, or g2_init). HPT_OK or the
 * allocation's status (everything given back). */
static inline hpt_status g2_open(g2_model *m, const hpt_backend *be, hpt_mem *mem, g2_cfg c) {
    memset(m, 0, sizeof *m);
    m->be = be, m->mem = mem, m->c = c;
    const size_t L = (size_t)c.L, C = (size_t)c.C, N = (size_t)c.B * (size_t)c.T;
    const size_t sz[G2_NT] = {(size_t)c.Vp * C, (size_t)c.maxT * C, L * C, L * C, L * 3 * C * C,
                              L * 3 * C, L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C,
                              L * C * 4 * C, L * C, C, C};
    for (int k = 0; k < G2_NT; k++) m->size[k] = sz[k], m->off[k + 1] = m->off[k] + sz[k];
    size_t np = m->off[G2_NT], nh = (size_t)c.B * c.NH * c.T;
    m->params = g2_alloc(m, np), m->grads = g2_alloc(m, np), m->m = g2_alloc(m, np), m->v = g2_alloc(m, np);
    m->x = (int32_t *)(void *)g2_alloc(m, N), m->y = (int32_t *)(void *)g2_alloc(m, N);
    m->r = g2_layers(m, c.L + 1, N * C);
    m->ln1 = g2_layers(m, c.L, N * C), m->mu1 = g2_layers(m, c.L, N), m->rs1 = g2_layers(m, c.L, N);
    m->qkv = g2_layers(m, c.L, N * 3 * C), m->atty = g2_layers(m, c.L, N * C), m->lse = g2_layers(m, c.L, nh);
    m->r2 = g2_layers(m, c.L, N * C), m->ln2 = g2_layers(m, c.L, N * C);
    m->mu2 = g2_layers(m, c.L, N), m->rs2 = g2_layers(m, c.L, N);
    m->fch = g2_layers(m, c.L, N * 4 * C), m->fcg = g2_layers(m, c.L, N * 4 * C);
    m->lnf = g2_alloc(m, N * C), m->muf = g2_alloc(m, N), m->rsf = g2_alloc(m, N);
    m->logits = g2_alloc(m, N * (size_t)c.Vp), m->losses = g2_alloc(m, N), m->lsev = g2_alloc(m, N);
    m->dres = g2_alloc(m, N * C), m->dln = g2_alloc(m, N * C), m->dqkv = g2_alloc(m, N * 3 * C);
    m->datty = g2_alloc(m, N * C), m->dfch = g2_alloc(m, N * 4 * C), m->dfcg = g2_alloc(m, N * 4 * C);
    m->dlnf = g2_alloc(m, N * C), m->attscr = g2_alloc(m, nh);
    hpt_status s = m->status;
    if (s != HPT_OK || !m->r || !m->ln1 || !m->fcg) {
        g2_close(m);
        return s != HPT_OK ? s : HPT_ERR_OOM;
    }
    return HPT_OK;
}

/* GPT-2's initialisation on the backend: N(0, 0.02) weights (projections 0.02/sqrt(2L)), zero
 * biases, unit layernorm weights, wte's padding rows zero. */
static inline void g2_init(g2_model *m, uint64_t seed) {
    const hpt_backend *be = m->be;
    be->memset(m->params, 0, m->off[G2_NT] * sizeof(float));
    for (int k = 0; k < G2_NT; k++) {
        float *p = m->params + m->off[k];
        size_t n = k == G2_WTE ? (size_t)m->c.V * m->c.C : m->size[k];
        if (k == G2_LN1W || k == G2_LN2W || k == G2_LNFW) be->fill(p, n, 1.0f);
        else if (k == G2_WTE || k == G2_WPE || k == G2_QKVW || k == G2_FCW)
            be->init_normal(p, 0, n, n, 0.02f, seed ^ (uint64_t)(k + 1));
        else if (k == G2_APW || k == G2_FPW)
            be->init_normal(p, 0, n, n, 0.02f / sqrtf(2.0f * (float)m->c.L), seed ^ (uint64_t)(k + 1));
    }
}

/* tensor k of base (parameters or gradients), layer l's slice of a stacked tensor */
static float *g2_t(const g2_model *m, float *base, int k, int l) {
    int stacked = k >= G2_LN1W && k <= G2_FPB;
    return base + m->off[k] + (stacked ? (size_t)l * (m->size[k] / (size_t)m->c.L) : 0);
}

/* forward and backward on the batch in m->x, m->y: returns the mean loss; m->grads holds the
 * gradients, m->logits the logits' gradient */
static inline float g2_step(g2_model *m) {
    const hpt_backend *be = m->be;
    const int B = m->c.B, T = m->c.T, C = m->c.C, NH = m->c.NH, L = m->c.L, V = m->c.V, VP = m->c.Vp;
    const int64_t N = (int64_t)B * T;
    float *w = m->params, *g = m->grads;
    be->encoder_forward(m->r[0], m->x, g2_t(m, w, G2_WTE, 0), g2_t(m, w, G2_WPE, 0), B, T, C);
    for (int l = 0; l < L; l++) {
        be->layernorm_forward(m->ln1[l], m->mu1[l], m->rs1[l], m->r[l], g2_t(m, w, G2_LN1W, l), g2_t(m, w, G2_LN1B, l), N, C);
        be->matmul_forward(m->qkv[l], m->ln1[l], g2_t(m, w, G2_QKVW, l), g2_t(m, w, G2_QKVB, l), N, C, 3 * C, 0);
        be->flash_attention_forward(m->atty[l], m->lse[l], m->qkv[l], B, T, C, NH, NH);
        be->copy(m->r2[l], m->r[l], (size_t)N * C * sizeof(float), HPT_COPY_D2D);
        be->matmul_forward(m->r2[l], m->atty[l], g2_t(m, w, G2_APW, l), g2_t(m, w, G2_APB, l), N, C, C, 1);
        be->layernorm_forward(m->ln2[l], m->mu2[l], m->rs2[l], m->r2[l], g2_t(m, w, G2_LN2W, l), g2_t(m, w, G2_LN2B, l), N, C);
        be->matmul_forward(m->fch[l], m->ln2[l], g2_t(m, w, G2_FCW, l), g2_t(m, w, G2_FCB, l), N, C, 4 * C, 0);
        be->gelu_forward(m->fcg[l], m->fch[l], N * 4 * C);
        be->copy(m->r[l + 1], m->r2[l], (size_t)N * C * sizeof(float), HPT_COPY_D2D);
        be->matmul_forward(m->r[l + 1], m->fcg[l], g2_t(m, w, G2_FPW, l), g2_t(m, w, G2_FPB, l), N, 4 * C, C, 1);
    }
    be->layernorm_forward(m->lnf, m->muf, m->rsf, m->r[L], g2_t(m, w, G2_LNFW, 0), g2_t(m, w, G2_LNFB, 0), N, C);
    be->matmul_forward(m->logits, m->lnf, g2_t(m, w, G2_WTE, 0), NULL, N, C, VP, 0);
    float loss = be->crossentropy_forward(m->losses, m->lsev, m->logits, m->y, N, V, VP);
    /* backward: the logits become their gradient in place; dres is the gradient of r[l + 1],
     * then of r2[l], then of r[l] */
    be->memset(g, 0, m->off[G2_NT] * sizeof(float));
    be->memset(m->dres, 0, (size_t)N * C * sizeof(float));
    be->crossentropy_backward(m->logits, m->lsev, m->y, N, V, VP, 1.0f / (float)N);
    be->matmul_backward(m->dlnf, g2_t(m, g, G2_WTE, 0), NULL, m->logits, m->lnf, g2_t(m, w, G2_WTE, 0), N, C, VP, 0);
    be->layernorm_backward(m->dres, g2_t(m, g, G2_LNFW, 0), g2_t(m, g, G2_LNFB, 0), m->dlnf, m->r[L],
                           g2_t(m, w, G2_LNFW, 0), m->muf, m->rsf, N, C);
    for (int l = L - 1; l >= 0; l--) {
        be->matmul_backward(m->dfcg, g2_t(m, g, G2_FPW, l), g2_t(m, g, G2_FPB, l), m->dres, m->fcg[l],
                            g2_t(m, w, G2_FPW, l), N, 4 * C, C, 0);
        be->gelu_backward(m->dfch, m->fch[l], m->dfcg, N * 4 * C);
        be->matmul_backward(m->dln, g2_t(m, g, G2_FCW, l), g2_t(m, g, G2_FCB, l), m->dfch, m->ln2[l],
                            g2_t(m, w, G2_FCW, l), N, C, 4 * C, 0);
        be->layernorm_backward(m->dres, g2_t(m, g, G2_LN2W, l), g2_t(m, g, G2_LN2B, l), m->dln, m->r2[l],
                               g2_t(m, w, G2_LN2W, l), m->mu2[l], m->rs2[l], N, C);
        be->matmul_backward(m->datty, g2_t(m, g, G2_APW, l), g2_t(m, g, G2_APB, l), m->dres, m->atty[l],
                            g2_t(m, w, G2_APW, l), N, C, C, 0);
        be->flash_attention_backward(m->dqkv, m->attscr, m->datty, m->qkv[l], m->atty[l], m->lse[l], B, T, C, NH, NH);
        be->matmul_backward(m->dln, g2_t(m, g, G2_QKVW, l), g2_t(m, g, G2_QKVB, l), m->dqkv, m->ln1[l],
                            g2_t(m, w, G2_QKVW, l), N, C, 3 * C, 0);
        be->layernorm_backward(m->dres, g2_t(m, g, G2_LN1W, l), g2_t(m, g, G2_LN1B, l), m->dln, m->r[l],
                               g2_t(m, w, G2_LN1W, l), m->mu1[l], m->rs1[l], N, C);
    }
    be->encoder_backward(g2_t(m, g, G2_WTE, 0), g2_t(m, g, G2_WPE, 0), m->dres, m->x, B, T, C);
    be->sync();
    return loss;
}

/* the logits of the last forward again (the backward turned them into their gradient) */
static inline void g2_logits(g2_model *m) {
    const int64_t N = (int64_t)m->c.B * m->c.T;
    m->be->matmul_forward(m->logits, m->lnf, g2_t(m, m->params, G2_WTE, 0), NULL, N, m->c.C, m->c.Vp, 0);
    m->be->sync();
}

/* training FLOPs per token of the step (docs/estimate.md's count: 6 per weight of the matmuls,
 * lm head included, plus attention as computed) */
static inline double g2_flops_per_token(const g2_cfg *c) {
    double L = c->L, C = c->C, T = c->T, Vp = c->Vp;
    return 3.0 * (2.0 * (12.0 * L * C * C + Vp * C) + 2.0 * L * C * (T + 1.0));
}

#endif
