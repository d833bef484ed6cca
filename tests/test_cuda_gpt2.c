/* test_cuda_gpt2.c: a GPT-2 training step made of the backend table's ops alone, against
 * PyTorch's reference state (gpt2_tiny_*, made by tests/make_reference.sh: L=2 C=64 NH=4
 * V=1000 Vp=1024, B=2 T=16), on the CPU backend and, when a GPU is present, on the CUDA backend.
 * The step is written here from the ops (encoder, layernorm, matmul, flash attention, GELU,
 * cross-entropy, their backwards, AdamW), with every buffer from the backend's device tier and
 * only copies crossing to the host, so the same code runs unchanged on any backend. The CPU run
 * checks this test's own assembly of the step (it must reach the reference like hptrain's model
 * does); the CUDA run is the GPU's check. Tolerances: logits, loss and every gradient within
 * 1e-4 relative (the norm of the difference over the reference's norm, as hpt_verify), the
 * losses before each of 10 AdamW steps within 1e-4 relative, and the whole step's outputs the
 * same bits when it runs twice. Without a GPU (or a CUDA build) the GPU half prints
 * "SKIP: no GPU" and the test exits 77 (ctest's skip) after the CPU half passed; with a GPU
 * present and the backend not started it fails (t_gpu_skip). */
#include "testlib.h"

#include "core/core.h"
#include "kernels/backend.h"
#ifdef HPT_HAVE_CUDA
#include "kernels/cuda/cuda.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_ops.h"

enum { L = 2, C = 64, NH = 4, V = 1000, VP = 1024, MAXT = 64, B = 2, T = 16, N = B * T };
enum { NSTEPS = 10 };
static const g2_cfg k_cfg = {L, C, NH, V, VP, MAXT, B, T};
static size_t g_np; /* parameters, wte's padding included */

static hpt_mem *g_mem;

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
    size_t np = g_np;
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
static int run(const hpt_backend *be) {
    int failed0 = t_failures;
    size_t np = g_np;
    g2_model m;
    CHECK_OK(g2_open(&m, be, g_mem, k_cfg));
    if (t_failures != failed0) return 0;
    CHECK(m.off[G2_NT] == np); /* the layout's count is the checkpoint's */
    be->copy(m.params, ref.params, np * 4, HPT_COPY_H2D);
    be->copy(m.x, ref.x, sizeof ref.x, HPT_COPY_H2D);
    be->copy(m.y, ref.y, sizeof ref.y, HPT_COPY_H2D);
    float *lg = malloc((size_t)N * VP * 4), *gr = malloc(np * 4), *lg2 = malloc((size_t)N * VP * 4),
          *gr2 = malloc(np * 4);
    float loss = g2_step(&m), loss2;
    be->copy(gr, m.grads, np * 4, HPT_COPY_D2H);
    g2_logits(&m);
    be->copy(lg, m.logits, (size_t)N * VP * 4, HPT_COPY_D2H);
    double el = norm_rel(lg, ref.logits, N, V, VP, V), eloss = fabs(loss - ref.loss) / fabs(ref.loss);
    printf("%s: loss %.6f (ref %.6f) rel %.2e; logits rel %.2e\n", be->name, (double)loss, (double)ref.loss, eloss, el);
    CHECK_MSG(eloss < 1e-4 && el < 1e-4, "%s: loss or logits beyond 1e-4", be->name);
    for (int k = 0; k < G2_NT; k++) {
        size_t n = k == G2_WTE ? (size_t)V * C : m.size[k]; /* wte's padding rows: no gradient to compare */
        double e = norm_rel(gr + m.off[k], ref.grads + m.off[k], 1, n, 0, 0);
        printf("  grad %-9s rel %.2e\n", g2_name[k], e);
        CHECK_MSG(e < 1e-4, "%s: gradient %s %.3e", be->name, g2_name[k], e);
    }
    /* the same bits twice in a row */
    loss2 = g2_step(&m);
    be->copy(gr2, m.grads, np * 4, HPT_COPY_D2H);
    g2_logits(&m);
    be->copy(lg2, m.logits, (size_t)N * VP * 4, HPT_COPY_D2H);
    int same = loss2 == loss && !memcmp(gr, gr2, np * 4) && !memcmp(lg, lg2, (size_t)N * VP * 4);
    printf("  the same bits twice in a row: %s\n", same ? "yes" : "NO");
    CHECK_MSG(same, "%s: two runs of the step differ", be->name);
    /* 10 AdamW steps (lr 1e-3, betas 0.9 0.999, eps 1e-8, weight decay 0.01 on every tensor) */
    be->memset(m.m, 0, np * 4), be->memset(m.v, 0, np * 4);
    be->copy(m.params, ref.params, np * 4, HPT_COPY_H2D);
    double worst = 0.0;
    for (int s = 0; s < NSTEPS; s++) {
        float l = g2_step(&m);
        worst = fmax(worst, fabs(l - ref.steps[s]) / fabs(ref.steps[s]));
        be->adamw(m.params, m.grads, m.m, m.v, np, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, s + 1);
    }
    printf("  10 AdamW steps: largest loss error %.2e\n", worst);
    CHECK_MSG(worst < 1e-4, "%s: AdamW steps' losses %.3e", be->name, worst);
    free(lg), free(gr), free(lg2), free(gr2);
    g2_close(&m);
    hpt_mem_stats st;
    hpt_mem_get_stats(g_mem, &st);
    CHECK(st.live_bytes[HPT_TIER_DEVICE][HPT_CAT_WORKSPACE] == 0);
    return t_failures == failed0;
}

int main(void) {
    g_np = (size_t)VP * C + (size_t)MAXT * C + (size_t)L * (12 * C * C + 13 * C) + 2 * C;
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
        /* random initialisation on the GPU: the CPU's values, bit for bit (init_normal) */
        g2_model a, b;
        CHECK_OK(g2_open(&a, hpt_backend_cpu(), g_mem, k_cfg));
        CHECK_OK(g2_open(&b, cuda, g_mem, k_cfg));
        g2_init(&a, 7), g2_init(&b, 7);
        float *pa = malloc(g_np * 4), *pb = malloc(g_np * 4);
        hpt_backend_cpu()->copy(pa, a.params, g_np * 4, HPT_COPY_D2H);
        cuda->sync();
        cuda->copy(pb, b.params, g_np * 4, HPT_COPY_D2H);
        CHECK_MSG(!memcmp(pa, pb, g_np * 4), "GPT-2's initialisation differs on the GPU");
        free(pa), free(pb);
        g2_close(&a), g2_close(&b);
        CHECK_OK(hpt_cuda_status());
    }
    const char *why = cuda ? "" : hpt_last_error();
#else
    const char *why = "this build has no CUDA backend";
#endif
    hpt_mem_destroy(g_mem);
    free(ref.params), free(ref.grads), free(ref.logits);
    return skipped ? t_gpu_skip("test_cuda_gpt2", why) : t_done("test_cuda_gpt2");
}
