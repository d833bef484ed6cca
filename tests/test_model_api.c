/* test_model_api.c ARCH: the architecture-independent model API (hpt_model_*) on the
 * architecture's case (arch_cases.h). A shape picks its architecture; the tensor table it
 * exposes agrees with GPT-2's checkpoint layout as gpt2_ref lists it (here, written separately
 * from the arch's describe; the case with llm.c's format); the offload variant
 * initialises the same weights and computes the same loss as the plain model (every variant);
 * an unknown shape is refused. The registry (model/registry.c; once, in the first case's run):
 * every architecture at its id, its named SHAPEs parsing to it, verify's names covering its
 * tables, its planner table consistent with its tensor table. */
#include "model/arch.h"
#include "testlib.h"

#include <stdlib.h>
#include <string.h>

static char SHAPE[T_SHAPE_MAX];

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

/* The offload variant: with blocks homed on the host, the same loss and the same gathered
 * weights as the plain model after the same initialisation (every variant of the case). */
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

/* Every name describe() gives for cfg is one of the architecture's param_names. */
static void check_names(const hpt_arch *a, const hpt_model_config *cfg, const char *what) {
    hpt_tensor_table t;
    a->describe(cfg, &t);
    for (int i = 0; i < t.n; i++) {
        int found = 0;
        for (const char *const *k = a->param_names; k && *k; k++) found |= !strcmp(*k, t.t[i].name);
        CHECK_MSG(found, "%s: %s's tensor %s is not in its param_names", what, a->name, t.t[i].name);
    }
}

static void check_registry(void) {
    int n = hpt_arch_count();
    CHECK(n >= 2 && n <= HPT_CAL_ARCHS); /* the calibration has a slot for each */
    CHECK(!hpt_arch_at(n) && !hpt_arch_at(-1) && !hpt_arch_desc_of(n) && !hpt_arch_by_name("nope"));
    for (int id = 0; id < n; id++) {
        const hpt_arch *a = hpt_arch_at(id);
        const hpt_arch_desc *d = hpt_arch_desc_of(id);
        CHECK(a && d == &a->desc && hpt_arch_by_name(a->name) == a && !strcmp(d->name, a->name));
        CHECK_MSG(d->label && *d->label && d->shapes && *d->shapes, "%s: label, shapes", a->name);
        /* its named SHAPEs (no ':') parse to it, and verify's names cover their tables */
        char list[512];
        snprintf(list, sizeof list, "%s", d->shapes);
        for (char *sh = list, *e; sh; sh = e ? e + 2 : NULL) { /* ", " between them */
            if ((e = strstr(sh, ", "))) *e = 0;
            if (strchr(sh, ':')) continue;
            hpt_model_config c;
            CHECK_OK(hpt_model_config_parse(sh, &c));
            CHECK_MSG(c.arch == id, "%s parses to arch %d, listed under %s", sh, c.arch, a->name);
            hpt_model_config h = c; /* the optional tensors too */
            h.tied = !c.tied, h.attn_bias = h.mlp_bias = 1;
            check_names(a, &c, sh), check_names(a, &h, sh);
        }
        const hpt_arch_plan *p = a->plan;
        CHECK_MSG(!p == !d->block, "%s: an op table and the report's titles go together", a->name);
        if (!p) continue;
        CHECK(p->n_cal >= 1 && p->n_cal <= HPT_CAL_ARCH_WIDTHS && p->n_ops <= HPT_ARCH_MAX_OPS);
        CHECK(p->attn_key && d->attention && p->gemms);
        for (int k = 0; k < HPT_ARCH_MAX_OPS; k++)
            CHECK_MSG(!d->op[k] == (k >= p->n_ops), "%s: op %d's title", a->name, k);
        for (int i = 0; i < p->n_cal; i++) {
            const hpt_model_config *c = &p->cal[i];
            CHECK(c->arch == id && (i == 0 || c->C > p->cal[i - 1].C));
            /* the GEMMs it lists are its block's matrices, FLOP for FLOP */
            int64_t io[HPT_ARCH_MAX_GEMMS][2], g = 0, w = 0;
            int ng = p->gemms(c, io);
            CHECK(ng >= 1 && ng <= HPT_ARCH_MAX_GEMMS);
            for (int k = 0; k < ng; k++) g += io[k][0] * io[k][1];
            hpt_model_config full = *c;
            full.V = full.Vp = 256, full.maxT = 64, full.norm_eps = 1e-5f, full.rope_theta = 1e4f;
            hpt_tensor_table t;
            a->describe(&full, &t);
            for (int k = 0; k < t.n; k++)
                if (t.t[k].layer == HPT_LAYER_STACKED && t.t[k].is_matrix)
                    w += (int64_t)hpt_tensor_numel(&t.t[k]) / c->L;
            CHECK_MSG(g == w, "%s width %d: the op table's GEMMs %lld values, the block's matrices %lld",
                      a->name, c->C, (long long)g, (long long)w);
            for (int k = 0; k < p->n_ops; k++)
                CHECK(p->ops[k].per_token(c) > 0 && p->ops[k].floats(c, 512) > 0 && p->ops[k].run);
        }
    }
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_model_api");
    if (!a) return 2;
    if (t_arch_first(a)) check_registry();
    t_arch_shape(a, SHAPE, 2, 64, 4, 1000, 32, 0);
    if (a->llmc) check_table(); /* llm.c's layout: GPT-2's */
    for (int v = 0; v < a->n_variants; v++) {
        t_arch_shape(a, SHAPE, 2, 64, 4, 1000, 32, v);
        printf("%s\n", SHAPE);
        check_offload();
    }
    return t_done(t_arch_label(a, "test_model_api"));
}
