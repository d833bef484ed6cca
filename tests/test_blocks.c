/* test_blocks.c: the block store seam (src/model/blocks.h) with a store that is not the offload
 * engine. A plain store (packed blocks in malloc'd memory, a scratch for block_dest so that
 * store_block runs, a log of every call) is bound to a model created without its blocks; the
 * same configuration without a store (flat buffers) is the reference. Checked:
 *   - initialisation through block_dest / store_block gives the flat model's parameters
 *     (gathered through the store by hpt_model_copy_params), bit for bit;
 *   - parameters scattered into the store (model_absorb) are those the store then holds;
 *   - two forward/backward passes (the second accumulating: grad_slot's accumulate) under
 *     every:2 recomputation give the flat model's losses and gradients, bit for bit;
 *   - the runner calls the store in the order blocks.h states (begin_pass, acquire/release
 *     per block, the recomputation's acquisitions, grad_slot and grads_done while held);
 *   - each pass's schedule (blocks.h) names exactly the acquires that follow, under every:2,
 *     full, selective and no recomputation;
 *   - hpt_model_offload_stats and the overflow check go to the store; hpt_model_free frees it. */
#include "testlib.h"

#include "core/core.h"
#include "model/blocks.h"
#include "model/gpt2_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 16, PASSES = 2 };

typedef struct {
    int L, ns;
    const size_t *slice_n;
    size_t bn;             /* floats per block */
    float *p, *g;          /* (L, bn) packed parameters and gradients */
    float *scratch;        /* (bn) block_dest's buffer */
    char log[16384];       /* the calls, one token each */
    size_t log_n;
    int held;              /* the block held, -1 none */
    int order_ok;          /* 0 once a call breaks the one-held-block rule */
    int sched[64], n_sched, pos; /* the pass's schedule; the acquires so far */
    int sched_ok;          /* 0 once an acquire is not the schedule's next, or a pass ends early */
    int n_passes;          /* schedules received */
    int *freed;            /* set by free */
} plain_store;

/* Logs "K ", "Kl " or "Kl.x " (l, x < 0: left out). */
static void note(plain_store *s, char kind, int l, int x) {
    char *at = s->log + s->log_n;
    size_t cap = sizeof s->log - s->log_n;
    int n = l < 0 ? snprintf(at, cap, "%c ", kind)
            : x < 0 ? snprintf(at, cap, "%c%d ", kind, l)
                    : snprintf(at, cap, "%c%d.%d ", kind, l, x);
    if (n > 0 && s->log_n + (size_t)n < sizeof s->log) s->log_n += (size_t)n;
}

static size_t slice_at(const plain_store *s, int i) {
    size_t o = 0;
    for (int k = 0; k < i; k++) o += s->slice_n[k];
    return o;
}

static hpt_status ps_begin(void *ctx, int dir) {
    plain_store *s = ctx;
    if (s->held != -1) s->order_ok = 0;
    if (s->pos != s->n_sched) s->sched_ok = 0; /* the last pass acquired less than it said */
    s->n_sched = s->pos = 0;
    note(s, dir > 0 ? 'F' : 'B', -1, -1);
    return HPT_OK;
}
static hpt_status ps_schedule(void *ctx, const int *order, int n) {
    plain_store *s = ctx;
    if (n > 64) return hpt_fail(HPT_ERR_INVALID, "plain store: a schedule of %d", n);
    memcpy(s->sched, order, (size_t)n * sizeof *order);
    s->n_sched = n;
    s->pos = 0;
    s->n_passes++;
    return HPT_OK;
}
static hpt_status ps_acquire(void *ctx, int l, float **p) {
    plain_store *s = ctx;
    if (s->held != -1) s->order_ok = 0;
    if (s->pos >= s->n_sched || s->sched[s->pos] != l) s->sched_ok = 0;
    s->pos++;
    s->held = l;
    note(s, 'a', l, -1);
    *p = s->p + (size_t)l * s->bn;
    return HPT_OK;
}
static void ps_release(void *ctx, int l) {
    plain_store *s = ctx;
    if (s->held != l) s->order_ok = 0;
    s->held = -1;
    note(s, 'r', l, -1);
}
static hpt_status ps_grad_slot(void *ctx, int l, int accumulate, float **g) {
    plain_store *s = ctx;
    if (s->held != l) s->order_ok = 0;
    note(s, 'g', l, accumulate);
    float *gl = s->g + (size_t)l * s->bn;
    if (!accumulate) memset(gl, 0, s->bn * sizeof(float));
    *g = gl;
    return HPT_OK;
}
static hpt_status ps_grads_done(void *ctx, int l) {
    plain_store *s = ctx;
    if (s->held != l) s->order_ok = 0;
    note(s, 'd', l, -1);
    return HPT_OK;
}
static hpt_status ps_overflow(void *ctx, int *overflow) {
    note(ctx, 'o', -1, -1);
    *overflow = 0;
    return HPT_OK;
}
static hpt_status ps_gather(void *ctx, int b, int l, int i, hpt_block_emit_fn emit, void *ectx) {
    plain_store *s = ctx;
    if (b != EB_P) return hpt_fail(HPT_ERR_UNSUPPORTED, "plain store: parameters only");
    return emit(ectx, s->p + (size_t)l * s->bn + slice_at(s, i), s->slice_n[i]);
}
static hpt_status ps_scatter(void *ctx, int b, int l, int i, hpt_block_read_fn read, void *rctx) {
    plain_store *s = ctx;
    if (b != EB_P) return hpt_fail(HPT_ERR_UNSUPPORTED, "plain store: parameters only");
    return read(rctx, s->p + (size_t)l * s->bn + slice_at(s, i), s->slice_n[i]);
}
static hpt_status ps_block_dest(void *ctx, int b, int l, float **dst, int *in_place) {
    plain_store *s = ctx;
    (void)b;
    note(s, 'i', l, -1);
    *dst = s->scratch;
    *in_place = 0;
    return HPT_OK;
}
static hpt_status ps_store_block(void *ctx, int b, int l, const float *src) {
    plain_store *s = ctx;
    (void)b;
    note(s, 's', l, -1);
    memcpy(s->p + (size_t)l * s->bn, src, s->bn * sizeof(float));
    return HPT_OK;
}
static void ps_stats(void *ctx, hpt_offload_stats *out) {
    (void)ctx;
    out->loads = 4242;
}
static void ps_free(void *ctx) {
    plain_store *s = ctx;
    *s->freed = 1;
    free(s->p);
    free(s->g);
    free(s->scratch);
}

typedef struct {
    const float *src;
} read_ctx;
static hpt_status read_from(void *ctx, float *dst, size_t n) {
    read_ctx *r = ctx;
    memcpy(dst, r->src, n * sizeof(float));
    r->src += n;
    return HPT_OK;
}

/* The call sequence blocks.h states for one forward and one backward under every:N. */
static void expected_step(char *out, size_t cap, int L, int N, int accumulate) {
    size_t n = 0;
#define PUT(...) n += (size_t)snprintf(out + n, cap - n, __VA_ARGS__)
    PUT("F ");
    for (int l = 0; l < L; l++) PUT("a%d r%d ", l, l);
    PUT("B ");
    for (int l = L - 1; l >= 0; l--) {
        int end = (l / N) * N + N - 1;
        if (end > L - 1) end = L - 1;
        if (l == end)
            for (int j = (l / N) * N; j <= l; j++) PUT("a%d r%d ", j, j);
        PUT("a%d g%d.%d d%d r%d ", l, l, accumulate, l, l);
    }
#undef PUT
}

int main(void) {
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse("gpt2:L=3,C=32,NH=4,V=64,T=32", &cfg));
    const int L = cfg.L, N = 2;
    hpt_act_opts ao = hpt_act_defaults();
    ao.recompute = HPT_RECOMPUTE_EVERY;
    ao.every = N;

    hpt_model *flat, *m;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &flat));
    hpt_offload_opts o;
    memset(&o, 0, sizeof o); /* embeddings FULL: the store holds the blocks only */
    CHECK_OK(model_create_unbound(mem, &cfg, &o, &m));
    plain_store st = {.held = -1, .order_ok = 1, .sched_ok = 1};
    int freed = 0;
    st.freed = &freed;
    model_block_layout(m, &st.L, &st.ns, &st.slice_n);
    CHECK(st.L == L && st.ns == GPT2_BLOCK_SLICES);
    for (int i = 0; i < st.ns; i++) st.bn += st.slice_n[i];
    st.p = malloc((size_t)L * st.bn * sizeof(float));
    st.g = malloc((size_t)L * st.bn * sizeof(float));
    st.scratch = malloc(st.bn * sizeof(float));
    hpt_block_store bs = {&st,       ps_begin,   ps_acquire,    ps_release,     ps_grad_slot,
                          ps_grads_done, ps_overflow, ps_gather, ps_scatter, ps_block_dest,
                          ps_store_block, ps_stats,  ps_free,        ps_schedule};
    model_bind_blocks(m, &bs, NULL);
    CHECK(hpt_model_params(m) == NULL && hpt_model_grads(m) == NULL);

    /* initialisation through the store: the flat model's values */
    const size_t np = hpt_model_num_params(flat);
    CHECK_OK(hpt_model_init_random(flat, 99));
    CHECK_OK(hpt_model_init_random(m, 99));
    char want[4096];
    size_t w = 0;
    for (int l = 0; l < L; l++) w += (size_t)snprintf(want + w, sizeof want - w, "i%d s%d ", l, l);
    CHECK_MSG(!strcmp(st.log, want), "initialisation calls: %s", st.log);
    float *got = malloc(np * sizeof(float));
    CHECK_OK(hpt_model_copy_params(m, got));
    CHECK(!memcmp(got, hpt_model_params(flat), np * sizeof(float)));

    /* scatter: perturbed parameters into both, through the checkpoint-order stream */
    float *perturbed = malloc(np * sizeof(float));
    memcpy(perturbed, hpt_model_params(flat), np * sizeof(float));
    for (size_t i = 0; i < np; i += 7) perturbed[i] *= 1.5f;
    memcpy(hpt_model_params(flat), perturbed, np * sizeof(float));
    read_ctx rc = {perturbed};
    CHECK_OK(model_absorb(m, EB_P, m->params, read_from, &rc));
    CHECK(rc.src == perturbed + np);
    CHECK_OK(hpt_model_copy_params(m, got));
    CHECK(!memcmp(got, perturbed, np * sizeof(float)));

    /* training passes: the same losses and gradients, the contract's call order */
    CHECK_OK(hpt_model_set_act_opts(flat, &ao));
    CHECK_OK(hpt_model_set_act_opts(m, &ao));
    hpt_model_zero_grad(flat);
    hpt_model_zero_grad(m);
    int32_t in[B * T], tg[B * T];
    for (int p = 0; p < PASSES; p++) {
        for (int i = 0; i < B * T; i++) {
            in[i] = (i * 13 + p * 5) % cfg.V;
            tg[i] = (i * 7 + 3 + p) % cfg.V;
        }
        float lf, lm;
        st.log_n = 0;
        st.log[0] = 0;
        CHECK_OK(hpt_model_forward(flat, in, tg, B, T, &lf));
        CHECK_OK(hpt_model_forward(m, in, tg, B, T, &lm));
        CHECK_MSG(!memcmp(&lf, &lm, sizeof lf), "pass %d: loss %.9g with the store, %.9g flat", p,
                  (double)lm, (double)lf);
        CHECK_OK(hpt_model_backward(flat));
        CHECK_OK(hpt_model_backward(m));
        expected_step(want, sizeof want, L, N, p > 0);
        CHECK_MSG(!strcmp(st.log, want), "pass %d calls:\n  %s\nexpected\n  %s", p, st.log, want);
    }
    CHECK(st.order_ok && st.held == -1);
    /* every block slice's gradient, and the non-block ones in the model's flat buffer */
    const float *gf = hpt_model_grads(flat);
    int same = 1;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < st.ns; i++)
            same &= !memcmp(st.g + (size_t)l * st.bn + slice_at(&st, i),
                            gf + m->slice_off[i] + (size_t)l * st.slice_n[i],
                            st.slice_n[i] * sizeof(float));
    CHECK_MSG(same, "block gradients differ from the flat model's");
    static const int nonblock[] = {0, 1, 14, 15};
    for (int k = 0; k < 4; k++) {
        int i = nonblock[k];
        CHECK_MSG(!memcmp(m->grads + model_nonblock_offset(&cfg, i),
                          gf + hpt_table_offset(&m->tab, i),
                          hpt_tensor_numel(&m->tab.t[i]) * sizeof(float)),
                  "non-block tensor %d's gradient differs", i);
    }

    /* the schedule under each recomputation policy: every acquire its next entry, none left */
    static const char *const policies[] = {"every:2", "full", "selective", "none"};
    for (int k = 0; k < 4; k++) {
        hpt_act_opts a = hpt_act_defaults();
        CHECK_OK(hpt_recompute_parse(policies[k], &a));
        CHECK_OK(hpt_model_set_act_opts(m, &a));
        int before = st.n_passes;
        CHECK_OK(hpt_model_forward(m, in, tg, B, T, NULL));
        CHECK_OK(hpt_model_backward(m));
        CHECK_MSG(st.sched_ok && st.pos == st.n_sched && st.n_passes == before + 2,
                  "--recompute %s: the acquires left the schedule at %d of %d", policies[k],
                  st.pos, st.n_sched);
    }
    CHECK_OK(hpt_model_set_act_opts(m, &ao));

    /* the rest of the table */
    int ovf = 1;
    st.log_n = 0;
    CHECK_OK(model_grads_overflow(m, &ovf));
    CHECK(ovf == 0 && st.log_n == 2 && !strncmp(st.log, "o ", 2));
    hpt_offload_stats os;
    hpt_model_offload_stats(m, &os);
    CHECK(os.loads == 4242);
    CHECK_STATUS(hpt_model_acquire_grads(m), HPT_OK); /* gradients still held: nothing to do */
    hpt_model_free(m);
    CHECK(freed == 1);
    hpt_model_free(flat);
    free(got);
    free(perturbed);
    hpt_mem_destroy(mem);
    return t_done("test_blocks");
}
