/* test_model_api.c: the architecture-independent model API (hpt_model_*). A shape picks its
 * architecture; the tensor table it exposes agrees with GPT-2's checkpoint layout as
 * gpt2_ref lists it here (written separately from the arch's describe); the
 * offload variant computes the same losses and gradients' effect as the plain model; an unknown
 * shape is refused. */
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

#define SHAPE "gpt2:L=2,C=64,NH=4,V=1000,T=32"

/* GPT-2's 16 tensors in llm.c's checkpoint order, from the format (docs/design.md's table). */
static void gpt2_ref(const hpt_model_config *cfg, t_tensor out[16]) {
    size_t L = (size_t)cfg->L, C = (size_t)cfg->C;
    static const char *const names[16] = {
        "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
        "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};
    const size_t numel[16] = {
        (size_t)cfg->Vp * C, (size_t)cfg->maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C,
        L * C * C, L * C, L * C, L * C, L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C};
    static const int matrix[16] = {1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};
    size_t off = 0;
    for (int i = 0; i < 16; i++) {
        out[i] = (t_tensor){names[i], off, numel[i], matrix[i]};
        off += numel[i];
    }
}

static void check_table(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model *m;
    CHECK_OK(hpt_model_create(mem, SHAPE, &m));
    CHECK(!strcmp(hpt_model_arch(m), "gpt2"));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(SHAPE, &cfg));
    t_tensor ref[16];
    gpt2_ref(&cfg, ref);
    CHECK(hpt_model_num_tensors(m) == 16);
    size_t total = 0;
    for (int i = 0; i < hpt_model_num_tensors(m); i++) {
        hpt_tensor_info t;
        CHECK_OK(hpt_model_tensor(m, i, &t));
        CHECK_MSG(!strcmp(t.name, ref[i].name), "tensor %d: %s, expected %s", i, t.name, ref[i].name);
        CHECK_MSG(t.numel == ref[i].numel, "%s: %zu values, expected %zu", t.name, t.numel, ref[i].numel);
        CHECK_MSG(t.is_matrix == ref[i].is_matrix, "%s: is_matrix", t.name);
        CHECK_MSG(total == ref[i].offset, "%s: offset %zu, expected %zu", t.name, total, ref[i].offset);
        CHECK(t.dtype == HPT_DTYPE_F32);
        size_t prod = 1;
        for (int k = 0; k < t.ndim; k++) prod *= (size_t)t.shape[k];
        CHECK_MSG(prod == t.numel, "%s: shape and numel disagree", t.name);
        /* per-layer tensors are stacked over L: the first dimension is the layer */
        CHECK_MSG(!t.per_layer || t.shape[0] == cfg.L, "%s: stacked over %lld, L = %d", t.name,
                  (long long)t.shape[0], cfg.L);
        total += t.numel;
    }
    CHECK(total == hpt_model_num_params(m));
    CHECK(total == hpt_model_config_num_params(&cfg));
    hpt_tensor_info t;
    CHECK_STATUS(hpt_model_tensor(m, hpt_model_num_tensors(m), &t), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_model_tensor(m, -1, &t), HPT_ERR_INVALID);
    /* the qkv weight: (L, 3C, C); wte: (Vp, C), a matrix, not per layer */
    CHECK_OK(hpt_model_tensor(m, 4, &t));
    CHECK(!strcmp(t.name, "qkvw") && t.ndim == 3 && t.shape[1] == 3 * cfg.C && t.shape[2] == cfg.C);
    CHECK_OK(hpt_model_tensor(m, 0, &t));
    CHECK(!strcmp(t.name, "wte") && !t.per_layer && t.shape[0] == cfg.Vp && t.is_matrix);
    hpt_model_free(m);
    hpt_model *bad = (hpt_model *)&bad;
    CHECK_STATUS(hpt_model_create(mem, "llama-nonexistent", &bad), HPT_ERR_INVALID);
    CHECK(bad == NULL);
    hpt_mem_destroy(mem);
}

/* The offload variant: with blocks homed on the host, the same loss and
 * the same gathered weights as the plain model after the same initialisation. */
static void check_offload(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_offload_opts o = hpt_offload_defaults();
    CHECK_OK(hpt_offload_parse("host", &o));
    hpt_model *a, *b;
    CHECK_OK(hpt_model_create(mem, SHAPE, &a));
    CHECK_OK(hpt_model_create_offload(mem, SHAPE, &o, &b));
    CHECK(hpt_model_params(a) != NULL && hpt_model_params(b) == NULL);
    CHECK_OK(hpt_model_init_random(a, 7));
    CHECK_OK(hpt_model_init_random(b, 7));
    enum { B = 2, T = 16 };
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) { x[i] = (i * 37) % 1000; y[i] = (i * 53 + 1) % 1000; }
    float la, lb;
    CHECK_OK(hpt_model_forward(a, x, y, B, T, &la));
    CHECK_OK(hpt_model_forward(b, x, y, B, T, &lb));
    CHECK_MSG(la == lb, "loss %.9g (plain) vs %.9g (host offload)", (double)la, (double)lb);
    size_t n = hpt_model_num_params(a);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    CHECK_OK(hpt_model_copy_params(a, pa));
    CHECK_OK(hpt_model_copy_params(b, pb));
    CHECK(memcmp(pa, pb, n * sizeof *pa) == 0);
    free(pa);
    free(pb);
    hpt_model_free(a);
    hpt_model_free(b);
    hpt_mem_destroy(mem);
}

int main(void) {
    check_table();
    check_offload();
    return t_done("test_model_api");
}
