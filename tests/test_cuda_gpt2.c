/* test_cuda_gpt2.c: a GPT-2 training step made of the backend table's ops alone, against
 * PyTorch's reference state (../shared/reference/gpt2_tiny_*: L=2 C=64 NH=4 V=1000 Vp=1024,
 * B=2 T=16), on the CPU backend and, when a GPU is present, on the CUDA backend.
 * The step is written here from the ops (encoder, layernorm, matmul, flash attention, GELU,
 * cross-entropy, their backwards, AdamW), with every buffer from the backend's device tier and
 * only copies crossing to the host, so the same code runs unchanged on any backend. The CPU run
 * checks this test's own assembly of the step (it must reach the reference like hptrain's model
 * does); the CUDA run is the GPU's check. Tolerances: logits, loss and every gradient within
 * 1e-4 relative (the norm of the difference over the reference's norm, as hpt_verify), the
 * losses before each of 10 AdamW steps within 1e-4 relative, and the whole step's outputs the
 * same bits when it runs twice. Without a GPU (or a CUDA build) the GPU half prints
 * "SKIP: no GPU" and the test exits 77 (ctest's skip) after the CPU half passed. */
#include "testlib.h"

#include "core/core.h"
#include "kernels/backend.h"
#ifdef HPT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { L = 2, C = 64, NH = 4, V = 1000, VP = 1024, MAXT = 64, B = 2, T = 16, N = B * T };
enum { NSTEPS = 10 };

/* the checkpoint's tensors, in order, and their sizes */
enum { WTE, WPE, LN1W, LN1B, QKVW, QKVB, APW, APB, LN2W, LN2B, FCW, FCB, FPW, FPB, LNFW, LNFB, NT };
static const size_t k_size[NT] = {
    (size_t)VP * C, (size_t)MAXT * C, L * C, L * C, (size_t)L * 3 * C * C, L * 3 * C,
    (size_t)L * C * C, L * C, L * C, L * C, (size_t)L * 4 * C * C, L * 4 * C,
    (size_t)L * C * 4 * C, L * C, C, C};
static const char *k_name[NT] = {"wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw",
                                 "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb",
                                 "lnfw", "lnfb"};
static size_t g_off[NT + 1];

static hpt_mem *g_mem;
static const hpt_backend *be;

static void *dalloc(size_t bytes) {
    void *p = NULL;
    CHECK_OK(be->alloc(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, bytes, &p));
    return p;
}
static void dfree(void *p, size_t bytes) { be->free(g_mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, p, bytes); }

static int read_file(const char *path, void *dst, size_t off, size_t bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    int ok = fseek(f, (long)off, SEEK_SET) == 0 && fread(dst, 1, bytes, f) == bytes;
    fclose(f);
    return ok;
}

/* The reference data: parameters, batch, logits, loss, gradients, the 10 losses. */
static struct {
    float *params, *logits, *grads, loss, steps[NSTEPS];
    int32_t x[N], y[N];
} ref;

static int load_ref(void) {
    char p[600];
    int32_t h[256];
    size_t np = g_off[NT];
    ref.params = malloc(np * sizeof(float));
    ref.grads = malloc(np * sizeof(float));
    ref.logits = malloc((size_t)N * V * sizeof(float));
    snprintf(p, sizeof p, "%s/gpt2_tiny_model.bin", t_ref_dir());
    if (!read_file(p, h, 0, sizeof h) || h[0] != 20240326 || h[1] != 3 || h[2] != MAXT || h[3] != V ||
        h[4] != L || h[5] != NH || h[6] != C || h[7] != VP || !read_file(p, ref.params, 1024, np * 4))
        return 0;
    snprintf(p, sizeof p, "%s/gpt2_tiny_state.bin", t_ref_dir());
    size_t o = 1024;
    if (!read_file(p, h, 0, sizeof h) || h[0] != 20240327 || h[2] != B || h[3] != T ||
        !read_file(p, ref.x, o, sizeof ref.x) || !read_file(p, ref.y, o += sizeof ref.x, sizeof ref.y) ||
        !read_file(p, ref.logits, o += sizeof ref.y, (size_t)N * V * 4) ||
        !read_file(p, &ref.loss, o += (size_t)N * V * 4, 4) || !read_file(p, ref.grads, o + 4, np * 4))
        return 0;
    snprintf(p, sizeof p, "%s/gpt2_tiny_steps.json", t_ref_dir());
    char js[4096] = {0};
    FILE *f = fopen(p, "rb");
    if (!f) return 0;
    size_t n = fread(js, 1, sizeof js - 1, f);
    fclose(f);
    js[n] = 0;
    char *s = strstr(js, "\"losses\"");
    if (!s || !(s = strchr(s, '['))) return 0;
    for (int i = 0; i < NSTEPS; i++) {
        char *e = NULL;
        ref.steps[i] = strtof(s + 1, &e);
        if (e == s + 1) return 0;
        s = strchr(e, i + 1 < NSTEPS ? ',' : ']');
        if (!s) return 0;
    }
    return 1;
}

/* ---- the model's buffers on the backend ---- */
typedef struct {
    float *params, *grads, *m, *v;
    int32_t *x, *y;
    /* per layer (L) saved activations; r[l] the input of layer l, r[L] the final residual */
    float *r[L + 1], *ln1[L], *mu1[L], *rs1[L], *qkv[L], *atty[L], *lse[L], *r2[L], *ln2[L],
        *mu2[L], *rs2[L], *fch[L], *fcg[L];
    float *lnf, *muf, *rsf, *logits, *losses, *lsev;
    /* backward scratch */
    float *dres, *dln, *dqkv, *datty, *dfch, *dfcg, *dlnf, *attscr;
} model;

#define NB(x) (sizeof *(x))
static size_t g_live;
static float *fbuf(size_t n) { g_live += n * 4; return dalloc(n * sizeof(float)); }

static void model_open(model *m) {
    size_t np = g_off[NT];
    memset(m, 0, sizeof *m);
    m->params = fbuf(np), m->grads = fbuf(np), m->m = fbuf(np), m->v = fbuf(np);
    m->x = dalloc(sizeof ref.x), m->y = dalloc(sizeof ref.y);
    be->copy(m->params, ref.params, np * 4, HPT_COPY_H2D);
    be->copy(m->x, ref.x, sizeof ref.x, HPT_COPY_H2D);
    be->copy(m->y, ref.y, sizeof ref.y, HPT_COPY_H2D);
    for (int l = 0; l <= L; l++) m->r[l] = fbuf((size_t)N * C);
    for (int l = 0; l < L; l++) {
        m->ln1[l] = fbuf((size_t)N * C), m->mu1[l] = fbuf(N), m->rs1[l] = fbuf(N);
        m->qkv[l] = fbuf((size_t)N * 3 * C), m->atty[l] = fbuf((size_t)N * C), m->lse[l] = fbuf((size_t)B * NH * T);
        m->r2[l] = fbuf((size_t)N * C), m->ln2[l] = fbuf((size_t)N * C), m->mu2[l] = fbuf(N), m->rs2[l] = fbuf(N);
        m->fch[l] = fbuf((size_t)N * 4 * C), m->fcg[l] = fbuf((size_t)N * 4 * C);
    }
    m->lnf = fbuf((size_t)N * C), m->muf = fbuf(N), m->rsf = fbuf(N);
    m->logits = fbuf((size_t)N * VP), m->losses = fbuf(N), m->lsev = fbuf(N);
    m->dres = fbuf((size_t)N * C), m->dln = fbuf((size_t)N * C), m->dqkv = fbuf((size_t)N * 3 * C);
    m->datty = fbuf((size_t)N * C), m->dfch = fbuf((size_t)N * 4 * C), m->dfcg = fbuf((size_t)N * 4 * C);
    m->dlnf = fbuf((size_t)N * C), m->attscr = fbuf((size_t)B * NH * T);
}

/* Every buffer model_open made, freed in any order (sizes as allocated). */
static void model_close(model *m) {
    size_t np = g_off[NT];
    dfree(m->params, np * 4), dfree(m->grads, np * 4), dfree(m->m, np * 4), dfree(m->v, np * 4);
    dfree(m->x, sizeof ref.x), dfree(m->y, sizeof ref.y);
    for (int l = 0; l <= L; l++) dfree(m->r[l], (size_t)N * C * 4);
    for (int l = 0; l < L; l++) {
        dfree(m->ln1[l], (size_t)N * C * 4), dfree(m->mu1[l], N * 4), dfree(m->rs1[l], N * 4);
        dfree(m->qkv[l], (size_t)N * 3 * C * 4), dfree(m->atty[l], (size_t)N * C * 4);
        dfree(m->lse[l], (size_t)B * NH * T * 4), dfree(m->r2[l], (size_t)N * C * 4);
        dfree(m->ln2[l], (size_t)N * C * 4), dfree(m->mu2[l], N * 4), dfree(m->rs2[l], N * 4);
        dfree(m->fch[l], (size_t)N * 4 * C * 4), dfree(m->fcg[l], (size_t)N * 4 * C * 4);
    }
    dfree(m->lnf, (size_t)N * C * 4), dfree(m->muf, N * 4), dfree(m->rsf, N * 4);
    dfree(m->logits, (size_t)N * VP * 4), dfree(m->losses, N * 4), dfree(m->lsev, N * 4);
    dfree(m->dres, (size_t)N * C * 4), dfree(m->dln, (size_t)N * C * 4), dfree(m->dqkv, (size_t)N * 3 * C * 4);
    dfree(m->datty, (size_t)N * C * 4), dfree(m->dfch, (size_t)N * 4 * C * 4), dfree(m->dfcg, (size_t)N * 4 * C * 4);
    dfree(m->dlnf, (size_t)N * C * 4), dfree(m->attscr, (size_t)B * NH * T * 4);
}

/* tensor k's parameters (or gradients), layer l's slice of a stacked tensor */
static float *P(float *base, int k, int l) { return base + g_off[k] + (size_t)l * (k_size[k] / (k < LN1W || k > FPB ? 1 : L)); }

/* forward and backward: the mean loss; grads hold the gradients */
static float step(model *m) {
    float *w = m->params, *g = m->grads;
    be->encoder_forward(m->r[0], m->x, P(w, WTE, 0), P(w, WPE, 0), B, T, C);
    for (int l = 0; l < L; l++) {
        be->layernorm_forward(m->ln1[l], m->mu1[l], m->rs1[l], m->r[l], P(w, LN1W, l), P(w, LN1B, l), N, C);
        be->matmul_forward(m->qkv[l], m->ln1[l], P(w, QKVW, l), P(w, QKVB, l), N, C, 3 * C, 0);
        be->flash_attention_forward(m->atty[l], m->lse[l], m->qkv[l], B, T, C, NH);
        be->copy(m->r2[l], m->r[l], (size_t)N * C * 4, HPT_COPY_D2D);
        be->matmul_forward(m->r2[l], m->atty[l], P(w, APW, l), P(w, APB, l), N, C, C, 1);
        be->layernorm_forward(m->ln2[l], m->mu2[l], m->rs2[l], m->r2[l], P(w, LN2W, l), P(w, LN2B, l), N, C);
        be->matmul_forward(m->fch[l], m->ln2[l], P(w, FCW, l), P(w, FCB, l), N, C, 4 * C, 0);
        be->gelu_forward(m->fcg[l], m->fch[l], (int64_t)N * 4 * C);
        be->copy(m->r[l + 1], m->r2[l], (size_t)N * C * 4, HPT_COPY_D2D);
        be->matmul_forward(m->r[l + 1], m->fcg[l], P(w, FPW, l), P(w, FPB, l), N, 4 * C, C, 1);
    }
    be->layernorm_forward(m->lnf, m->muf, m->rsf, m->r[L], P(w, LNFW, 0), P(w, LNFB, 0), N, C);
    be->matmul_forward(m->logits, m->lnf, P(w, WTE, 0), NULL, N, C, VP, 0);
    float loss = be->crossentropy_forward(m->losses, m->lsev, m->logits, m->y, N, V, VP);
    /* backward: the logits become their gradient in place */
    be->memset(g, 0, g_off[NT] * 4);
    be->memset(m->dres, 0, (size_t)N * C * 4);
    be->crossentropy_backward(m->logits, m->lsev, m->y, N, V, VP, 1.0f / N);
    be->matmul_backward(m->dlnf, P(g, WTE, 0), NULL, m->logits, m->lnf, P(w, WTE, 0), N, C, VP, 0);
    be->layernorm_backward(m->dres, P(g, LNFW, 0), P(g, LNFB, 0), m->dlnf, m->r[L], P(w, LNFW, 0),
                           m->muf, m->rsf, N, C);
    for (int l = L - 1; l >= 0; l--) { /* dres: the gradient of r[l + 1], then of r2, then of r[l] */
        be->matmul_backward(m->dfcg, P(g, FPW, l), P(g, FPB, l), m->dres, m->fcg[l], P(w, FPW, l), N, 4 * C, C, 0);
        be->gelu_backward(m->dfch, m->fch[l], m->dfcg, (int64_t)N * 4 * C);
        be->matmul_backward(m->dln, P(g, FCW, l), P(g, FCB, l), m->dfch, m->ln2[l], P(w, FCW, l), N, C, 4 * C, 0);
        be->layernorm_backward(m->dres, P(g, LN2W, l), P(g, LN2B, l), m->dln, m->r2[l], P(w, LN2W, l),
                               m->mu2[l], m->rs2[l], N, C);
        be->matmul_backward(m->datty, P(g, APW, l), P(g, APB, l), m->dres, m->atty[l], P(w, APW, l), N, C, C, 0);
        be->flash_attention_backward(m->dqkv, m->attscr, m->datty, m->qkv[l], m->atty[l], m->lse[l], B, T, C, NH);
        be->matmul_backward(m->dln, P(g, QKVW, l), P(g, QKVB, l), m->dqkv, m->ln1[l], P(w, QKVW, l), N, C, 3 * C, 0);
        be->layernorm_backward(m->dres, P(g, LN1W, l), P(g, LN1B, l), m->dln, m->r[l], P(w, LN1W, l),
                               m->mu1[l], m->rs1[l], N, C);
    }
    be->encoder_backward(P(g, WTE, 0), P(g, WPE, 0), m->dres, m->x, B, T, C);
    be->sync();
    return loss;
}

static double norm_rel(const float *a, const float *b, size_t rows, size_t row, size_t sa, size_t sb) {
    double num = 0.0, den = 0.0;
    for (size_t r = 0; r < rows; r++)
        for (size_t j = 0; j < row; j++) {
            double x = a[r * sa + j], y = b[r * sb + j];
            num += (x - y) * (x - y), den += y * y;
        }
    return sqrt(num) / (den > 0.0 ? sqrt(den) : 1e-30);
}

/* One backend's run; 1 when every check passed. */
static int run(const hpt_backend *backend) {
    be = backend;
    int failed0 = t_failures;
    size_t np = g_off[NT];
    model m;
    model_open(&m);
    /* the logits before the backward overwrites them: a forward alone is the step's first half */
    float *lg = malloc((size_t)N * VP * 4), *gr = malloc(np * 4), *lg2 = malloc((size_t)N * VP * 4),
          *gr2 = malloc(np * 4);
    float loss = step(&m), loss2;
    be->copy(gr, m.grads, np * 4, HPT_COPY_D2H);
    /* the logits: recompute the forward's last matmul from the saved lnf */
    be->matmul_forward(m.logits, m.lnf, P(m.params, WTE, 0), NULL, N, C, VP, 0);
    be->sync();
    be->copy(lg, m.logits, (size_t)N * VP * 4, HPT_COPY_D2H);
    double el = norm_rel(lg, ref.logits, N, V, VP, V), eloss = fabs(loss - ref.loss) / fabs(ref.loss);
    printf("%s: loss %.6f (ref %.6f) rel %.2e; logits rel %.2e\n", be->name, (double)loss, (double)ref.loss, eloss, el);
    CHECK_MSG(eloss < 1e-4 && el < 1e-4, "%s: loss or logits beyond 1e-4", be->name);
    for (int k = 0; k < NT; k++) {
        double e = norm_rel(gr + g_off[k], ref.grads + g_off[k], 1, k == WTE ? (size_t)V * C : k_size[k], 0, 0);
        printf("  grad %-9s rel %.2e\n", k_name[k], e);
        CHECK_MSG(e < 1e-4, "%s: gradient %s %.3e", be->name, k_name[k], e);
    }
    /* the same bits twice in a row */
    loss2 = step(&m);
    be->copy(gr2, m.grads, np * 4, HPT_COPY_D2H);
    be->matmul_forward(m.logits, m.lnf, P(m.params, WTE, 0), NULL, N, C, VP, 0);
    be->sync();
    be->copy(lg2, m.logits, (size_t)N * VP * 4, HPT_COPY_D2H);
    int same = loss2 == loss && !memcmp(gr, gr2, np * 4) && !memcmp(lg, lg2, (size_t)N * VP * 4);
    printf("  the same bits twice in a row: %s\n", same ? "yes" : "NO");
    CHECK_MSG(same, "%s: two runs of the step differ", be->name);
    /* 10 AdamW steps (lr 1e-3, betas 0.9 0.999, eps 1e-8, weight decay 0.01 on every tensor) */
    be->memset(m.m, 0, np * 4), be->memset(m.v, 0, np * 4);
    be->copy(m.params, ref.params, np * 4, HPT_COPY_H2D);
    double worst = 0.0;
    for (int s = 0; s < NSTEPS; s++) {
        float l = step(&m);
        worst = fmax(worst, fabs(l - ref.steps[s]) / fabs(ref.steps[s]));
        be->adamw(m.params, m.grads, m.m, m.v, np, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, s + 1);
    }
    printf("  10 AdamW steps: largest loss error %.2e\n", worst);
    CHECK_MSG(worst < 1e-4, "%s: AdamW steps' losses %.3e", be->name, worst);
    free(lg), free(gr), free(lg2), free(gr2);
    model_close(&m);
    hpt_mem_stats st;
    hpt_mem_get_stats(g_mem, &st);
    CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_WORKSPACE] == 0);
    return t_failures == failed0;
}

int main(void) {
    for (int k = 0; k < NT; k++) g_off[k + 1] = g_off[k] + k_size[k];
    CHECK_MSG(load_ref(), "the reference files in %s", t_ref_dir());
    if (t_failures) return t_done("test_cuda_gpt2");
    hpt_set_threads(2);
    CHECK_OK(hpt_mem_create(&g_mem));
    run(hpt_backend_cpu());
    int skipped = 1;
#ifdef HPT_HAVE_CUDA
    const hpt_backend *cuda = hpt_backend_cuda();
    if (cuda) {
        skipped = 0;
        run(cuda);
        CHECK_OK(hpt_cuda_status());
    } else {
        printf("SKIP: no GPU: the GPT-2 step on the cuda backend did not run (%s)\n", hpt_last_error());
    }
#else
    printf("SKIP: no GPU: this build has no CUDA backend\n");
#endif
    hpt_mem_destroy(g_mem);
    free(ref.params), free(ref.grads), free(ref.logits);
    int rc = t_done("test_cuda_gpt2");
    return rc == 0 && skipped ? 77 : rc;
}
