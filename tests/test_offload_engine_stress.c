/* test_offload_engine_stress.c: the offload engine's residency state machine under a
 * deterministic random schedule: random block counts, slice sizes, K, P, homes (host or disk),
 * fused or exact updates (exact: fp32, bf16 or fp16 gradient homes in turn), passes forward and backward that stop early at random blocks (a
 * failed step), re-acquisitions out of order. After every call the residency records are
 * consistent (eng_check: slots and blocks inverse, at most K resident, the held block has a
 * slot) and every acquired block holds exactly the values its home should: each block's
 * weights are tagged with (block, version) and each update adds 1 to every weight, so a stale
 * slot, a lost write-back or a load from the wrong block shows. */
#include "testlib.h"

#include "core/core.h"
#include "kernels/kernels.h" /* k_param: the update callback's parameter type */
#include "offload/engine.h"

#include <stdlib.h>
#include <string.h>

/* updates: p += g (g is 1 everywhere), m += 1, v += 2 */
static void upd(void *ctx, int l, int slice, size_t off, k_param kp, const float *g, float *m,
                float *v, size_t n) {
    float *p = kp.f32;
    (void)off;
    (void)l;
    (void)ctx;
    (void)slice;
    for (size_t i = 0; i < n; i++) {
        p[i] += g[i];
        m[i] += 1.0f;
        v[i] += 2.0f;
    }
}

static float tag(int l, size_t i) { return (float)(l * 4096 + (int)(i % 4096)); }

/* block l's values equal tag + version everywhere */
static int block_ok(const float *p, size_t bn, int l, int version) {
    for (size_t i = 0; i < bn; i++)
        if (p[i] != tag(l, i) + (float)version) return 0;
    return 1;
}

typedef struct {
    float *dst;
} gather;

static hpt_status emit(void *ctx, const float *x, size_t n) {
    gather *g = ctx;
    memcpy(g->dst, x, n * sizeof(float));
    g->dst += n;
    return HPT_OK;
}

static void one_schedule(hpt_rng *r, int round) {
    int L = 1 + (int)(hpt_rng_u32(r) % 9), ns = 1 + (int)(hpt_rng_u32(r) % 4);
    size_t sn[ENG_MAX_SLICES], bn = 0;
    for (int i = 0; i < ns; i++) {
        sn[i] = 1 + hpt_rng_u32(r) % 1500;
        bn += sn[i];
    }
    hpt_offload_opts o = hpt_offload_defaults();
    o.max_active = 1 + (int)(hpt_rng_u32(r) % 4);
    o.prefetch = (int)(hpt_rng_u32(r) % (uint32_t)o.max_active);
    o.params = hpt_rng_u32(r) % 2 ? HPT_TIER_DISK : HPT_TIER_HOST;
    o.optim = hpt_rng_u32(r) % 2 ? HPT_TIER_DISK : HPT_TIER_HOST;
    o.grads = hpt_rng_u32(r) % 3 == 0 ? HPT_TIER_DEVICE : HPT_TIER_DISK;
    o.fused = (int)(hpt_rng_u32(r) % 2);
    if (!o.fused) o.grad_home = round % 3; /* fp32, bf16, fp16 (1s and 0s are exact in each) */
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    char dir[600];
    snprintf(dir, sizeof dir, "%s/stress", t_tmpdir());
    CHECK_OK(hpt_mem_set_disk_dir(mem, dir));
    offload_engine *e = NULL;
    CHECK_OK(eng_create(mem, L, ns, sn, &o, &e));
    if (!e) {
        hpt_mem_destroy(mem);
        return;
    }
    CHECK_OK(eng_attach_optim(e, upd, NULL, 1));
    int *ver = calloc((size_t)L, sizeof *ver);
    int *gh = calloc((size_t)L, sizeof *gh); /* exact mode: the gradient home holds 1s (or 0s) */
    for (int l = 0; l < L; l++) {
        float *d;
        int in_place;
        CHECK_OK(eng_block_dest(e, EB_P, l, &d, &in_place));
        for (size_t i = 0; i < bn; i++) d[i] = tag(l, i);
        if (!in_place) CHECK_OK(eng_store_block(e, EB_P, l, d));
    }
    int bad = 0, resident;
    int passes = 4 + (int)(hpt_rng_u32(r) % 8);
    for (int ps = 0; ps < passes && !bad; ps++) {
        int dir_ = hpt_rng_u32(r) % 2 ? 1 : -1;
        int stop = hpt_rng_u32(r) % 4 == 0 ? (int)(hpt_rng_u32(r) % (uint32_t)L) : L; /* early stop */
        int with_grads = dir_ < 0 && hpt_rng_u32(r) % 3 != 0;
        CHECK_OK(eng_begin_pass(e, dir_));
        int n_upd = 0;
        int *touched = calloc((size_t)L, sizeof *touched);
        for (int k = 0; k < stop && !bad; k++) {
            int l = dir_ > 0 ? k : L - 1 - k;
            if (hpt_rng_u32(r) % 10 == 0) l = (int)(hpt_rng_u32(r) % (uint32_t)L); /* out of order */
            float *p;
            CHECK_OK(eng_acquire(e, l, &p));
            if (!p || !block_ok(p, bn, l, ver[l])) {
                bad = 1;
                CHECK_MSG(0, "round %d: block %d (version %d) wrong after acquire (L %d K %d P %d "
                          "fused %d)", round, l, ver[l], L, o.max_active, o.prefetch, o.fused);
            }
            if (with_grads && !touched[l] && !bad) {
                float *g;
                CHECK_OK(eng_grad_slot(e, l, 0, &g));
                for (size_t i = 0; g && i < bn; i++) g[i] = 1.0f;
                CHECK_OK(eng_grads_done(e, l));
                touched[l] = 1;
                if (o.fused) ver[l]++;
                else gh[l] = 1;
                n_upd++;
            }
            CHECK_OK(eng_check(e, &resident));
            CHECK(resident <= o.max_active);
            eng_release(e, l);
        }
        if (with_grads && !o.fused && n_upd && stop == L && !bad) {
            /* exact mode: the streaming pass updates every block with its gradient home (the
             * 1s of this pass or an earlier stopped one, or the zeros it started with) */
            CHECK_OK(eng_stream_update(e));
            for (int l = 0; l < L; l++) ver[l] += gh[l];
        }
        free(touched);
        CHECK_OK(eng_check(e, NULL));
    }
    CHECK_OK(eng_drain(e));
    /* every block's home, gathered */
    float *all = malloc(bn * sizeof(float));
    for (int l = 0; l < L && !bad; l++) {
        gather g = {all};
        for (int i = 0; i < ns; i++) CHECK_OK(eng_emit_slice(e, EB_P, l, i, emit, &g));
        CHECK_MSG(block_ok(all, bn, l, ver[l]), "round %d: block %d's home is not at version %d", round, l, ver[l]);
    }
    free(all);
    free(ver);
    free(gh);
    eng_free(e);
    CHECK(t_device_live(mem) == 0);
    hpt_mem_destroy(mem);
}

int main(void) {
    hpt_rng r;
    hpt_rng_seed(&r, 2026);
    for (int round = 0; round < 60; round++) one_schedule(&r, round);
    return t_done("test_offload_engine_stress");
}
