/* actplan.c: the activation arena, planned from the architecture's fields (ggml-alloc's habit).
 * A step's buffers are the arch's non-block buffers (hpt_arch.globals, symbolic lifetimes) and,
 * per block, its saved fields (hpt_arch.fields); the recompute policy and the store decide how
 * many buffers a field is and when each lives (kept: forward to backward; dropped: a transient
 * forward buffer and a rebuilt one; stored: a transient, a stored copy and a buffer born before
 * the backward). hpt_arena_plan assigns offsets; the arena is one device allocation, grown when
 * a plan needs more and kept otherwise. docs/activations.md has the lifetimes table.
 * Invariants: the plan's bytes per tier are what the run allocates (hpt_model_act_tier_bytes,
 * which the estimator reports, plans with this same function); the profiler sees each buffer's
 * birth and death as arena events (act_enter). */
#include "core/core.h"
#include "mem/arena.h"
#include "model/gpt2_int.h"

#include <stdlib.h>
#include <string.h>

/* Whether the options store anything (offload or compression). */
static int stores(const hpt_act_opts *o) {
    return o->offload != HPT_OFFLOAD_NONE || o->compress != HPT_COMPRESS_NONE;
}

/* Whether a stored (offloaded or compressed) field: the large ones a block's backward reads;
 * under every:N and full, the kept segment ends' outputs (the next segment's input), but the
 * last block's (the head's input); and there the embedding's output (plan_acts, a global). */
static int stored(const hpt_act_opts *o, int L, int l, const hpt_arch_field *f) {
    if (!stores(o)) return 0;
    if (act_segment_len(o)) return (f->flags & HPT_FIELD_OUTPUT) && l < L - 1;
    return (f->flags & HPT_FIELD_STORE) != 0;
}

/* Whether the policy drops field f of block l (recomputes it in backward). */
static int dropped(const hpt_act_opts *o, int L, int l, const hpt_arch_field *f) {
    int N = act_segment_len(o);
    if (N) return !((f->flags & HPT_FIELD_OUTPUT) && l == act_segment_end(l, N, L));
    if (o->recompute == HPT_RECOMPUTE_SELECTIVE) return (f->flags & HPT_FIELD_RECOMPUTE) != 0;
    return 0;
}

/* Whether field f takes the NORM1 field's buffers (arch.h's HPT_FIELD_NORM2): under every:N
 * and full, where both are rebuilt in backward with the same lifetimes (neither is an output
 * nor stored) and the block rebuilds NORM1 after NORM2's last reader (x->norm_rebuild). */
static int shares_norm(const hpt_act_opts *o, const hpt_arch_field *f) {
    return act_segment_len(o) > 0 && (f->flags & HPT_FIELD_NORM2);
}

/* a stored field is up to three buffers: forward, store, backward (the embedding's output
 * too, a global) */
static int n_bufs_for(const hpt_arch *A, const hpt_model_config *c) {
    return 3 * A->n_fields * c->L + A->n_globals + 2;
}

/* Where the stored copies go: filled by plan_acts (arrays of L * n_fields + 1, zeroed: the
 * last, the embedding's output, actstore.c's slots). */
typedef struct {
    void **astore;     /* compressed copies in the arena (compression without offload) */
    size_t *soff;      /* offsets in the offload space (host buffer or disk block) */
    size_t *sbytes;    /* bytes of each stored copy, 0: not stored */
    size_t off_bytes;  /* the offload space */
    size_t max_store;  /* the largest stored copy (disk + compressed staging) */
    void **enc_b;      /* where the backward's copy of a stored embedding output goes */
} store_plan;

/* The time point of a symbolic lifetime. */
static int time_of(const hpt_arch_ctx *x, hpt_arch_time t, int L, int vc) {
    switch (t) {
    case HPT_TP_SCRATCH_END:
        return x->norm_rebuild && x->mlp_rows ? TP_HEAD_B(L) : TP_BLOCK_B(L, 0);
    case HPT_TP_HEAD_F: return TP_HEAD_F(L);
    case HPT_TP_HEAD_B: return TP_HEAD_B(L);
    /* chunked embeddings: the head's buffers live on to the encoder's backward (wte's deferred
     * update) */
    case HPT_TP_HEAD_END: return vc ? TP_ENC_B(L) : TP_HEAD_B(L);
    case HPT_TP_BLOCKS_B: return TP_BLOCK_B(L, L - 1);
    case HPT_TP_BLOCK0_B: return TP_BLOCK_B(L, 0);
    case HPT_TP_EMBED_B: return TP_ENC_B(L);
    case HPT_TP_BLOCKS_F: return TP_BLOCK_F(L - 1);
    default: return 0;
    }
}

/* Lists the buffers of a step at x's (B, T) with their sizes and lifetimes, plans their
 * offsets, and returns the arena's size and the number of buffers. Pointers are set later
 * (act_ensure). */
static size_t plan_acts(const hpt_arch *A, const hpt_arch_ctx *x, const hpt_act_opts *o,
                        int vc, void *acts, char *layers, char *flayers, hpt_act_buf *bufs,
                        int *n_out, store_plan *sp) {
    const int L = x->cfg->L, N = act_segment_len(o);
    const size_t f = sizeof(float);
    const hpt_backend *be = x->be;
    int n = 0;
#define BUF(p, nm, lay, nbytes, t0, t1) \
    bufs[n++] = (hpt_act_buf){(void **)(p), nm, lay, nbytes, t0, t1, 0}
    for (int g = 0; g < A->n_globals; g++) {
        const hpt_arch_global *gl = &A->globals[g];
        if (gl->after_blocks) continue;
        size_t rows, w;
        A->global_shape(x, g, &rows, &w);
        if (rows * w == 0) { /* not in this plan (an untiled MLP's tile buffers) */
            *(void **)((char *)acts + gl->off) = NULL;
            continue;
        }
        if (gl->off == A->off_encoded && N && stores(o)) {
            /* every:N, full: block 0's input stored like the other segments' inputs: the
             * forward's copy until block 0's forward, the stored one, and the backward's from
             * the point before segment 0's last block's backward to block 0's */
            int t_in = TP_BLOCK_B(L, act_segment_end(0, N, L)) - 1;
            size_t idx = (size_t)L * (size_t)A->n_fields;
            size_t sb = be->act_code_bytes((hpt_act_code)o->compress, rows, w);
            sp->sbytes[idx] = sb;
            sp->max_store = sb > sp->max_store ? sb : sp->max_store;
            BUF((char *)acts + gl->off, gl->name, -1, rows * w * f, 0, TP_BLOCK_F(0));
            if (o->offload == HPT_OFFLOAD_NONE) {
                BUF(&sp->astore[idx], o->compress == HPT_COMPRESS_INT8 ? "int8 store" : "bf16 store",
                    -1, sb, 0, t_in);
            } else {
                sp->soff[idx] = sp->off_bytes;
                sp->off_bytes += (sb + 63) & ~(size_t)63;
            }
            BUF(sp->enc_b, gl->name, -1, rows * w * f, t_in, TP_BLOCK_B(L, 0));
            continue;
        }
        BUF((char *)acts + gl->off, gl->name, -1, rows * w * f, time_of(x, gl->first, L, vc),
            time_of(x, gl->last, L, vc));
    }
    for (int l = 0; l < L; l++) {
        int tf = TP_BLOCK_F(l), tb = TP_BLOCK_B(L, l);
        /* the block's output is the next block's input (read by its forward and its first
         * norm's backward) or the final norm's */
        int next_b = l + 1 < L ? TP_BLOCK_B(L, l + 1) : TP_HEAD_B(L);
        int t_re = N ? TP_BLOCK_B(L, act_segment_end(l, N, L)) : tb; /* when it is recomputed */
        for (int i = 0; i < A->n_fields; i++) {
            const hpt_arch_field *fd = &A->fields[i];
            const char *nm = fd->name;
            int is_out = (fd->flags & HPT_FIELD_OUTPUT) != 0;
            if (fd->attention >= 0 && fd->attention != (int)x->attention) continue;
            if ((fd->flags & HPT_FIELD_MLP) && x->mlp_rows) continue; /* the tiles' (globals) */
            if (shares_norm(o, fd)) continue; /* the NORM1 field's buffers (act_ensure) */
            size_t rows, w;
            A->field_shape(x, i, &rows, &w);
            size_t bytes = rows * w * f;
            if (!dropped(o, L, l, fd) && stored(o, L, l, fd)) {
                /* forward writes a transient buffer, copied out at the end of the block's
                 * forward; copied back at tb - 1 (the next block's backward or the head's)
                 * into the buffer the backward reads. A segment's input (every:N, full):
                 * read by the next block's forward, copied back before the backward of the
                 * segment's last block e (which reruns it), read until block l + 1's. */
                int t_in = N ? TP_BLOCK_B(L, act_segment_end(l + 1, N, L)) - 1 : tb - 1;
                int t_fl = N ? tf + 1 : tf, t_end = N ? next_b : tb;
                size_t idx = (size_t)l * (size_t)A->n_fields + (size_t)i;
                size_t sb = be->act_code_bytes((hpt_act_code)o->compress, rows, w);
                sp->sbytes[idx] = sb;
                sp->max_store = sb > sp->max_store ? sb : sp->max_store;
                BUF(act_field(A, flayers, l, i), nm, l, bytes, tf, t_fl);
                if (o->offload == HPT_OFFLOAD_NONE) {
                    BUF(&sp->astore[idx], o->compress == HPT_COMPRESS_INT8 ? "int8 store" : "bf16 store",
                        l, sb, tf, t_in);
                } else {
                    sp->soff[idx] = sp->off_bytes;
                    sp->off_bytes += (sb + 63) & ~(size_t)63;
                }
                BUF(act_field(A, layers, l, i), nm, l, bytes, t_in, t_end);
            } else if (!dropped(o, L, l, fd)) {
                BUF(act_field(A, layers, l, i), nm, l, bytes, tf, is_out ? next_b : tb);
            } else {
                BUF(act_field(A, flayers, l, i), nm, l, bytes, tf, is_out ? tf + 1 : tf);
                BUF(act_field(A, layers, l, i), nm, l, bytes, t_re, is_out ? next_b : tb);
            }
        }
    }
    for (int g = 0; g < A->n_globals; g++) {
        const hpt_arch_global *gl = &A->globals[g];
        if (!gl->after_blocks) continue;
        size_t rows, w;
        A->global_shape(x, g, &rows, &w);
        if (rows * w == 0) { /* not in this plan (an untiled MLP's tile buffers) */
            *(void **)((char *)acts + gl->off) = NULL;
            continue;
        }
        BUF((char *)acts + gl->off, gl->name, -1, rows * w * f, time_of(x, gl->first, L, vc),
            time_of(x, gl->last, L, vc));
    }
#undef BUF
    *n_out = n;
    hpt_arena_buf *ab = malloc((size_t)n * sizeof *ab);
    size_t size = 0;
    if (ab) {
        for (int i = 0; i < n; i++) ab[i] = (hpt_arena_buf){bufs[i].bytes, bufs[i].first, bufs[i].last, 0};
        size = hpt_arena_plan(ab, n);
        for (int i = 0; i < n; i++) bufs[i].offset = ab[i].offset;
        free(ab);
    } else { /* no room to plan: end to end */
        for (int i = 0; i < n; i++) {
            bufs[i].offset = size;
            size += (bufs[i].bytes + 63) & ~(size_t)63;
        }
    }
    return size;
}

/* The plan's bytes per tier (see hpt_model_act_tier_bytes); HPT_ERR_OOM when it cannot plan. */
static hpt_status plan_tiers(const hpt_model_config *cfg, int B, int T, const hpt_act_opts *o,
                             int vc, uint64_t out[HPT_TIER_COUNT]) {
    const hpt_arch *A = hpt_arch_of(cfg);
    for (int t = 0; t < HPT_TIER_COUNT; t++) out[t] = 0;
    if (!A) return hpt_fail(HPT_ERR_INVALID, "unknown architecture id %d", cfg->arch);
    HPT_CHECK(act_opts_check(cfg, o));
    hpt_arch_ctx x = act_ctx_for(cfg, o, vc < 0 ? -vc : vc, B, T);
    size_t nf = (size_t)cfg->L * (size_t)A->n_fields + 1;
    void *acts = calloc(1, A->acts_size);
    char *layers = calloc((size_t)cfg->L, A->block_acts_size);
    char *flayers = calloc((size_t)cfg->L, A->block_acts_size);
    hpt_act_buf *bufs = calloc((size_t)n_bufs_for(A, cfg), sizeof *bufs);
    void *enc_b = NULL;
    store_plan sp = {calloc(nf, sizeof(void *)), calloc(nf, sizeof(size_t)),
                     calloc(nf, sizeof(size_t)), 0, 0, &enc_b};
    hpt_status s = HPT_ERR_OOM;
    int n;
    if (acts && layers && flayers && bufs && sp.astore && sp.soff && sp.sbytes) {
        out[HPT_TIER_DEVICE] = plan_acts(A, &x, o, vc > 0 ? vc : 0, acts, layers, flayers, bufs, &n, &sp);
        if (o->offload == HPT_OFFLOAD_HOST) out[HPT_TIER_HOST] = sp.off_bytes;
        if (o->offload == HPT_OFFLOAD_DISK) {
            out[HPT_TIER_DISK] = sp.off_bytes;
            if (o->compress != HPT_COMPRESS_NONE) out[HPT_TIER_HOST] = sp.max_store;
        }
        s = HPT_OK;
    }
    free(acts);
    free(layers);
    free(flayers);
    free(bufs);
    free(sp.astore);
    free(sp.soff);
    free(sp.sbytes);
    return s == HPT_OK ? s : hpt_fail(s, "no memory to plan the activations");
}

hpt_status hpt_model_act_tier_bytes(const hpt_model_config *cfg, int B, int T,
                                    const hpt_act_opts *o, uint64_t out[HPT_TIER_COUNT]) {
    hpt_act_opts d = hpt_act_defaults();
    return plan_tiers(cfg, B, T, o ? o : &d, 0, out);
}

hpt_status model_act_tier_bytes_vc(const hpt_model_config *cfg, int B, int T,
                                  const hpt_act_opts *o, int vc, uint64_t out[HPT_TIER_COUNT]) {
    return plan_tiers(cfg, B, T, o, vc, out);
}

size_t hpt_model_activation_bytes(const hpt_model_config *cfg, int B, int T,
                                  const hpt_act_opts *o) {
    uint64_t t[HPT_TIER_COUNT];
    if (hpt_model_act_tier_bytes(cfg, B, T, o, t) != HPT_OK) return 0;
    return (size_t)t[HPT_TIER_DEVICE];
}

void hpt_model_free_activations(hpt_model *m) {
    if (!m) return;
    hpt_run *r = &m->run;
    actstore_wait(m);
    if (r->act_mem) act_enter(m, -1);
    m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, r->act_mem, r->act_bytes);
    r->act_mem = NULL;
    r->act_bytes = 0;
    if (r->mm_ws)
        m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE, r->mm_ws, HPT_MM_BF16_WS_BYTES);
    r->mm_ws = NULL;
    r->st.enc_b = NULL;
    actstore_release(m);
    r->aB = r->aT = 0;
    m->B = m->T = 0;
    m->has_targets = 0;
}

hpt_status hpt_model_set_act_opts(hpt_model *m, const hpt_act_opts *o) {
    HPT_CHECK(act_opts_check(&m->cfg, o));
    /* --matmul bf16: the backend's bf16 flash pair must be built for the model's heads */
    const int hd = m->cfg.hd ? m->cfg.hd : m->cfg.C / m->cfg.NH;
    if (o->matmul == HPT_MATMUL_BF16 &&
        (!m->be->flash_attention_bf16_heads || !m->be->flash_attention_bf16_heads(hd)))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "matmul bf16: the %s backend's bf16 flash attention "
                        "is not built for heads of %d (use matmul fp32)", m->be->name, hd);
    hpt_model_free_activations(m);
    m->act = *o;
    return HPT_OK;
}

hpt_act_opts hpt_model_get_act_opts(const hpt_model *m) { return m->act; }

void act_enter(hpt_model *m, int t) {
    hpt_run *r = &m->run;
    /* deaths first, then births: the profiler's live bytes never count two buffers that share
     * bytes */
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < r->n_bufs; i++) {
            const hpt_act_buf *b = &r->bufs[i];
            int was = r->t_now >= 0 && b->first <= r->t_now && r->t_now <= b->last;
            int now = t >= 0 && b->first <= t && t <= b->last;
            if (pass == 0 && was && !now) hpt_mem_arena_event(m->mem, HPT_CAT_ACTS, b->bytes, 0, b->name);
            if (pass == 1 && !was && now) hpt_mem_arena_event(m->mem, HPT_CAT_ACTS, b->bytes, 1, b->name);
        }
    r->t_now = t;
}

void act_plan_free(hpt_model *m) {
    hpt_run *r = &m->run;
    free(r->layers);
    free(r->flayers);
    free(r->bufs);
    free(r->st.astore);
    free(r->st.soff);
    free(r->st.sbytes);
    r->layers = r->flayers = NULL;
    r->bufs = NULL;
    r->st.astore = NULL;
    r->st.soff = r->st.sbytes = NULL;
}

hpt_status act_ensure(hpt_model *m, int B, int T) {
    const hpt_arch *A = m->arch;
    hpt_run *r = &m->run;
    hpt_actstore *st = &r->st;
    if (r->act_mem && r->aB == B && r->aT == T) return HPT_OK;
    if (r->act_mem) act_enter(m, -1);
    const size_t L = (size_t)m->cfg.L, nf = L * (size_t)A->n_fields + 1;
    if (!r->layers) {
        r->layers = calloc(L, A->block_acts_size);
        r->flayers = calloc(L, A->block_acts_size);
        r->bufs = calloc((size_t)n_bufs_for(A, &m->cfg), sizeof *r->bufs);
        st->astore = calloc(nf, sizeof *st->astore);
        st->soff = calloc(nf, sizeof *st->soff);
        st->sbytes = calloc(nf, sizeof *st->sbytes);
        if (!r->layers || !r->flayers || !r->bufs || !st->astore || !st->soff || !st->sbytes)
            return hpt_fail(HPT_ERR_OOM, "activation plan");
    }
    memset(st->astore, 0, nf * sizeof *st->astore);
    memset(st->soff, 0, nf * sizeof *st->soff);
    memset(st->sbytes, 0, nf * sizeof *st->sbytes);
    st->enc_b = NULL;
    store_plan sp = {st->astore, st->soff, st->sbytes, 0, 0, &st->enc_b};
    memset(r->layers, 0, L * A->block_acts_size);
    memset(r->flayers, 0, L * A->block_acts_size);
    hpt_arch_ctx x = act_ctx_for(&m->cfg, &m->act, m->emb != HPT_EMB_FULL ? m->Vc : 0, B, T);
    x.be = m->be;
    /* LoRA: no deferred embedding gradient, the head's buffers end with its backward */
    size_t need = plan_acts(A, &x, &m->act, m->emb != HPT_EMB_FULL && !m->lora ? m->Vc : 0,
                            m->acts, r->layers, r->flayers, r->bufs, &r->n_bufs, &sp);
    if (!r->act_mem || need > r->act_bytes) {
        m->be->free(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, r->act_mem, r->act_bytes);
        r->act_mem = NULL;
        r->act_bytes = 0;
        void *p;
        hpt_mem_set_name(m->mem, "activation arena");
        hpt_status s = m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_ACTS, need, &p);
        if (s != HPT_OK) {
            r->aB = r->aT = 0;
            return hpt_fail_ctx(s, "activations for B=%d T=%d", B, T);
        }
        r->act_mem = p;
        r->act_bytes = need;
    }
    /* --matmul bf16: the bf16 GEMMs' workspace (model_matmul_ws_bytes), with the arena */
    if (model_matmul_ws_bytes(&m->act) && !r->mm_ws) {
        if (!m->be->gemm_bf16)
            return hpt_fail(HPT_ERR_UNSUPPORTED, "matmul bf16: the %s backend has no bf16 GEMM",
                            m->be->name);
        void *p;
        hpt_mem_set_name(m->mem, "bf16 GEMM workspace");
        hpt_status s = m->be->alloc(m->mem, HPT_TIER_DEVICE, HPT_CAT_WORKSPACE,
                                    model_matmul_ws_bytes(&m->act), &p);
        if (s != HPT_OK) {
            r->aB = r->aT = 0;
            return hpt_fail_ctx(s, "the bf16 GEMMs' workspace");
        }
        r->mm_ws = p;
    }
    hpt_status s = actstore_reserve(m, sp.off_bytes, sp.max_store);
    if (s != HPT_OK) {
        r->aB = r->aT = 0;
        return hpt_fail_ctx(s, "offloaded activations for B=%d T=%d", B, T);
    }
    for (int i = 0; i < r->n_bufs; i++) *r->bufs[i].ptr = (char *)r->act_mem + r->bufs[i].offset;
    /* every:N, full: the second norm's output in the first's buffers */
    int n1 = -1;
    for (int i = 0; i < A->n_fields; i++)
        if (A->fields[i].flags & HPT_FIELD_NORM1) n1 = i;
    for (int l = 0; l < (int)L; l++)
        for (int i = 0; i < A->n_fields && n1 >= 0; i++)
            if (shares_norm(&m->act, &A->fields[i])) {
                *act_field(A, r->layers, l, i) = *act_field(A, r->layers, l, n1);
                *act_field(A, r->flayers, l, i) = *act_field(A, r->flayers, l, n1);
            }
    /* a kept field: the forward writes the buffer the backward reads */
    for (int l = 0; l < (int)L; l++)
        for (int i = 0; i < A->n_fields; i++)
            if (!*act_field(A, r->flayers, l, i))
                *act_field(A, r->flayers, l, i) = *act_field(A, r->layers, l, i);
    r->aB = B;
    r->aT = T;
    r->t_now = -1;
    return HPT_OK;
}
