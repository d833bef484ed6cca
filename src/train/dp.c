/* dp.c: the trainer's data parallel part (--zero 0, 1, 2; docs/zero.md): what N processes agree
 * on before they start, how a step's global batch is divided, how gradients and losses are
 * combined, and ZeRO's sharding (stages 1, 2: each rank owns a run of the optimizer's units,
 * optim_owner; the gradients are reduce-scattered onto the runs, the norm's terms gathered, the
 * updated weights all-gathered from their owners; at stage 2 layer by layer, through a
 * gradient sink at the runner's done point, so no process holds the blocks' whole gradients;
 * each block's exchange runs while the next block's backward writes the other of two slots).
 * Invariants: rank r of N with accum K takes windows r*K .. r*K+K-1 of the step's
 * N*K windows (the windows one process with --accum N*K reads, in that order), and every rank's
 * loader passes over all N*K, so every rank's data position after a step is that one process's;
 * gradients and losses are summed in rank order (dist.h), so every rank holds the same
 * gradients, weights and optimizer state, bit for bit, after every step. */
#include "core/core.h"
#include "dist/dist.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "optim/optim.h"
#include "train/train_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dp_size(void) { return hpt_dist_size(); }
int dp_rank(void) { return hpt_dist_rank(); }
int dp_apart(const hpt_train_opts *o) { return o->zero >= 0 || hpt_dist_size() > 1; }

/* The plan's flags ("--zero 1 --state-bits 8 --fused-update") as one "--key=value" line each
 * ("--key=given" for a flag without a value), so a difference names its option. */
static void plan_lines(const char *flags, char *out, size_t n) {
    size_t len = 0;
    out[0] = '\0';
    for (const char *a = strstr(flags, "--"); a && len < n;) {
        const char *next = strstr(a + 2, " --"), *end = next ? next : a + strlen(a);
        size_t kl = strcspn(a, " ");
        if (a + kl > end) kl = (size_t)(end - a);
        const char *v = a + kl + (a + kl < end);
        int w = v < end ? snprintf(out + len, n - len, "%.*s=%.*s\n", (int)kl, a, (int)(end - v), v)
                        : snprintf(out + len, n - len, "%.*s=given\n", (int)kl, a);
        if (w < 0) break;
        len += (size_t)w;
        a = next ? next + 1 : NULL;
    }
}

static const char *env_or(const char *v, const char *unset) { return v && *v ? v : unset; }

hpt_status dp_agree(const hpt_train_opts *o) {
    if (hpt_dist_size() == 1) return HPT_OK;
    char flags[2048] = "", plan[3072], text[4096];
    hpt_plan_print(&o->plan, flags, sizeof flags); /* a cut text still compares */
    plan_lines(flags, plan, sizeof plan);
    /* every choice that changes the bits or the run (the save directory aside: each host may
     * name its own), the transport's switches too (a rank alone on NCCL would wait forever) */
    snprintf(text, sizeof text,
             "--model=%s\n--data=%s\n--val=%s\n--resume=%s\n--batch=%d\n--seq=%d\n--steps=%lld\n"
             "--lr=%.9g\n--min-lr=%.9g\n--warmup=%lld\n--grad-clip=%.9g\n--eval-every=%lld\n"
             "--val-batches=%d\n--save-every=%lld\n--seed=%llu\n--threads=%d\n"
             "HPT_DIST_TRANSPORT=%s\nHPT_UNVERIFIED_NCCL=%s\n%s",
             o->model ? o->model : "", o->data ? o->data : "", o->val ? o->val : "",
             o->resume ? o->resume : "", o->B, o->T, (long long)o->steps, (double)o->lr,
             (double)o->min_lr, (long long)o->warmup, (double)o->grad_clip,
             (long long)o->eval_every, o->val_batches, (long long)o->save_every,
             (unsigned long long)o->seed, hpt_get_threads(), env_or(getenv("HPT_DIST_TRANSPORT"), "mpi"),
             env_or(getenv("HPT_UNVERIFIED_NCCL"), "unset"), plan);
    return dist_agree(text);
}

/* HPT_UNVERIFIED_NCCL=1: the nccl transport's many-process paths (not yet run on GPUs) allowed. */
static int nccl_unverified_ok(void) {
    const char *v = getenv("HPT_UNVERIFIED_NCCL");
    return v && !strcmp(v, "1");
}

hpt_status dp_check(const hpt_train_opts *o) {
    /* the transport first, in any process count: a wrong one is refused before anything runs */
    HPT_CHECK(dist_transport_check(o->plan.device != 0));
    if (hpt_dist_size() == 1) return HPT_OK;
    if (hpt_dist_size() > DP_MAX_PROCS)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%d processes: at most %d", hpt_dist_size(), DP_MAX_PROCS);
    if (o->zero > 2 && !(o->zero == 3 && hpt_offload_active(&o->offload))) /* 3: dp_engine.c */
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--zero %d is not built yet (--zero 0, 1 and 2 run)", o->zero);
    if (o->plan.device && !dist_transport_nccl()) /* MPI's sums are host code */
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%d processes on --device cuda need "
                        "HPT_DIST_TRANSPORT=nccl (the mpi transport sums host memory)", hpt_dist_size());
    if (o->plan.device && !nccl_unverified_ok())
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%d processes on --device cuda over NCCL: built, not yet "
                        "run on GPUs (HPT_UNVERIFIED_NCCL=1 lifts this for a check)", hpt_dist_size());
    if (o->plan.device && hpt_offload_active(&o->offload))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%d processes on --device cuda with the offload "
                        "engine: its exchanges sum host homes (not routed to NCCL)", hpt_dist_size());
    if (hpt_offload_active(&o->offload)) HPT_CHECK(dp_engine_check(o)); /* dp_engine.c */
    if (o->sched.kind == HPT_SCHEDULE_HYBRID)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "%d processes: the hybrid schedule does not run "
                        "data parallel", hpt_dist_size());
    return HPT_OK;
}

void dp_skip_before(hpt_dataloader *d, int K) { hpt_dataloader_skip(d, (int64_t)hpt_dist_rank() * K); }
void dp_skip_after(hpt_dataloader *d, int K) {
    hpt_dataloader_skip(d, (int64_t)(hpt_dist_size() - 1 - hpt_dist_rank()) * K);
}

/* dst (n) += src: the backend's add (each sum rounded once: dst[i] + src[i], on the device tier's
 * memory, the host's or a GPU's) */
void dp_add(const hpt_backend *be, float *dst, const float *src, size_t n) { be->add(dst, dst, src, n); }

hpt_status dp_reduce_grads(float *grads, size_t n) {
    if (hpt_dist_size() == 1) return HPT_OK;
    return dist_allreduce_f32(grads, n, "the gradients' sum");
}

hpt_status dp_loss_sum(double local, double *global) {
    int N = hpt_dist_size();
    if (N == 1) {
        *global = local;
        return HPT_OK;
    }
    double all[64];
    if (N > 64) return hpt_fail(HPT_ERR_UNSUPPORTED, "more than 64 processes");
    HPT_CHECK(dist_allgather_f64(local, all, "the losses"));
    double s = all[0];
    for (int q = 1; q < N; q++) s += all[q];
    *global = s;
    return HPT_OK;
}

hpt_status dp_saved(hpt_status s) {
    if (hpt_dist_size() == 1) return s;
    int32_t st = (int32_t)s;
    char why[512] = "";
    if (s != HPT_OK) snprintf(why, sizeof why, "%s", hpt_last_error());
    hpt_status c = dist_bcast(&st, sizeof st, 0, "the checkpoint's status");
    if (c == HPT_OK) c = dist_bcast(why, sizeof why, 0, "the checkpoint's status");
    if (c != HPT_OK) return c;
    if (st != HPT_OK) return hpt_fail((hpt_status)st, "rank 0 could not save: %s", why);
    return HPT_OK;
}

/* ---- ZeRO stages 1 and 2 ---- */

hpt_status dp_shard_init(const hpt_train_opts *o, hpt_model *model, dp_shard *z) {
    memset(z, 0, sizeof *z);
    z->size = hpt_dist_size();
    z->rank = hpt_dist_rank();
    /* with the offload engine every stage is its homes' (dp_engine.c): in memory 0 here */
    z->stage = z->size > 1 && o->zero > 0 && o->zero < 3 && !hpt_offload_active(&o->offload) ? o->zero : 0;
    const hpt_tensor_table *t = model_table(model);
    int n = z->stage ? z->size : 1;
    if (n > DP_MAX_PROCS) return hpt_fail(HPT_ERR_UNSUPPORTED, "more than %d processes", DP_MAX_PROCS);
    for (int q = 0; q < n; q++) optim_owner(t, q, n, &z->ulo[q], &z->uhi[q], &z->plo[q], &z->phi[q]);
    if (!z->stage) z->rank = 0; /* the one run that owns everything */
    return HPT_OK;
}

/* The norm's per-unit sums of squares of every owner (optim_gather_fn): each rank's array in
 * rank order, rank q's units [ulo[q], uhi[q]) taken from it. */
static hpt_status gather_sumsq(void *ctx, double *u, size_t n_units) {
    const dp_shard *z = ctx;
    double *all = malloc((size_t)z->size * n_units * sizeof(double)); /* a few KiB */
    if (!all) return hpt_fail(HPT_ERR_OOM, "the gradient norm's exchange");
    hpt_status s = dist_allgather_raw(u, n_units * sizeof(double), all, "the gradient norm");
    for (int q = 0; s == HPT_OK && q < z->size; q++)
        for (size_t k = z->ulo[q]; k < z->uhi[q]; k++) u[k] = all[(size_t)q * n_units + k];
    free(all);
    return s;
}

void dp_optim_attach(hpt_optim *op, dp_shard *z) {
    if (z->stage) optim_set_gather(op, gather_sumsq, z);
}

hpt_status dp_optim_create(hpt_mem *mem, hpt_model *model, const hpt_adamw_opts *ao,
                           dp_shard *z, hpt_optim **out) {
    HPT_CHECK(optim_create_units(mem, model, ao, z->ulo[z->rank], z->stage ? z->uhi[z->rank] : SIZE_MAX, out));
    dp_optim_attach(*out, z);
    return HPT_OK;
}

hpt_status dp_reduce_scatter(const dp_shard *z, float *grads, size_t n) {
    if (!z->stage) return dp_reduce_grads(grads, n);
    return dist_reduce_scatter_ranges(grads, z->plo, z->phi, "the gradients' sum");
}

hpt_status dp_gather_params(const dp_shard *z, float *params) {
    if (!z->stage) return HPT_OK;
    return dist_allgather_ranges(params, z->plo, z->phi, "the updated weights");
}

hpt_status dp_overflow(const dp_shard *z, const hpt_backend *be, const float *grads, int *overflow) {
    size_t lo = z->plo[z->rank], hi = z->phi[z->rank];
    /* stage 2: the sink's run and the non-block part, checked at once (one round trip) */
    const float *xs[2] = {z->run, grads + z->nb_lo};
    size_t ns[2] = {z->run_n, z->nb_n};
    int mine = hi > lo && (z->slot ? be->nonfinite_many(xs, ns, 2)
                                   : be->nonfinite(grads + lo, hi - lo));
    *overflow = hpt_dist_any(mine);
    return HPT_OK;
}

/* ---- stage 2's gradient sink (docs/zero.md): the blocks' gradients reduce-scattered layer by
 * layer from the runner's done point, so no process holds the whole gradient of the blocks:
 * block l's in slot l % 2, its exchange started at its done point and waited for when block
 * l - 2 needs the slot (or at the backward's end), so it overlaps block l - 1's backward. The
 * model's flat gradients hold the non-block tensors (the head and the encoder write wte's at
 * the two ends of the backward): reduce-scattered after the backward, the owner reads its part
 * there (the run holds the owned block values only). ---- */

int dp_sink_wanted(const hpt_train_opts *o) {
    return hpt_dist_size() > 1 && o->zero == 2 && !hpt_offload_active(&o->offload);
}

/* Non-block values before flat value x (the model's flat gradients hold them back to back in
 * checkpoint order): monotone, so the runs map onto ascending ranges of that buffer; x minus it
 * is the block values before x. */
static size_t nonblock_before(const hpt_tensor_table *t, size_t x) {
    size_t c = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->t[i].layer == HPT_LAYER_STACKED) continue;
        size_t off = hpt_table_offset(t, i), n = hpt_tensor_numel(&t->t[i]);
        c += x <= off ? 0 : x - off < n ? x - off : n;
    }
    return c;
}

/* Micro-batch k's n summed values at src folded into dst: k = 0 copies, the next ones add in
 * order (acc = g_0; acc += g_1; ...: the bits of trainer.c's sum apart). */
static void fold(const dp_shard *z, float *dst, const float *src, size_t n) {
    if (z->micro == 0) z->be->copy(dst, src, n * sizeof(float), HPT_COPY_D2D);
    else dp_add(z->be, dst, src, n);
}

/* Block l's placement: slice s's values in checkpoint order from fo[s], in the packed slot
 * from po[s] (po[n_slices]: the block's size). */
static void block_place(const dp_shard *z, int l, size_t po[HPT_TABLE_MAX + 1], size_t fo[HPT_TABLE_MAX]) {
    const hpt_tensor_table *t = model_table(z->model);
    po[0] = 0;
    for (int s = 0; s < t->n_slices; s++) {
        int ti = hpt_table_slice_tensor(t, s);
        size_t sn = hpt_tensor_slice_numel(&t->t[ti], t->L);
        fo[s] = hpt_table_offset(t, ti) + (size_t)l * sn; /* its place in checkpoint order */
        po[s + 1] = po[s] + sn;
    }
}

/* Slot i's exchange waited for, and the owner's summed slices of its block folded into the
 * run. */
static hpt_status slot_finish(dp_shard *z, int i) {
    if (z->slot_l[i] < 0) return HPT_OK;
    const hpt_tensor_table *t = model_table(z->model);
    size_t po[HPT_TABLE_MAX + 1], fo[HPT_TABLE_MAX];
    float *slot = z->slot + (size_t)i * z->slot_n;
    hpt_status s = dist_wait(z->rq[i]);
    z->rq[i] = NULL;
    if (s != HPT_OK) return s;
    block_place(z, z->slot_l[i], po, fo);
    for (int k = 0; k < t->n_slices; k++)
        if (fo[k] >= z->plo[z->rank] && fo[k] < z->phi[z->rank])
            fold(z, z->run + (fo[k] - z->run_lo), slot + po[k], po[k + 1] - po[k]);
    z->slot_l[i] = -1;
    return HPT_OK;
}

/* Block l writes slot l % 2, once block l + 2's exchange from it is in (the other slot's, block
 * l + 1's, runs on meanwhile). */
static hpt_status sink_slot(void *ctx, int l, float **g) {
    dp_shard *z = ctx;
    int i = l & 1;
    HPT_CHECK(slot_finish(z, i));
    float *slot = z->slot + (size_t)i * z->slot_n;
    z->be->memset(slot, 0, z->slot_n * sizeof(float));
    *g = slot;
    return HPT_OK;
}

/* Block l's packed slot (slice s of the table's block slices back to back) is complete: each
 * slice is one optimizer unit, so it lies in one owner's run, and the owners ascend with s:
 * the slot cut at the owners' slices gives the reduce-scatter's ranges (every value still
 * x_0 + x_1 + ... in rank order). Started on the slot's channel, not waited for: the next
 * block's backward runs while it moves (slot_finish folds the owner's sums into the run). */
static hpt_status sink_done(void *ctx, int l) {
    dp_shard *z = ctx;
    const hpt_tensor_table *t = model_table(z->model);
    size_t po[HPT_TABLE_MAX + 1], fo[HPT_TABLE_MAX], lo[DP_MAX_PROCS], hi[DP_MAX_PROCS];
    int i = l & 1, done;
    block_place(z, l, po, fo);
    for (int q = 0; q < z->size; q++) { /* the slices whose values lie in q's run */
        int a = 0, b;
        while (a < t->n_slices && fo[a] < z->plo[q]) a++;
        for (b = a; b < t->n_slices && fo[b] < z->phi[q];) b++;
        lo[q] = po[a];
        hi[q] = po[b];
    }
    HPT_CHECK(dist_reduce_scatter_start(z->slot + (size_t)i * z->slot_n, lo, hi, i,
                                        "the gradients' sum", &z->rq[i]));
    z->slot_l[i] = l;
    return dist_test(z->rq[i ^ 1], &done); /* the other slot's exchange moved on */
}

hpt_status dp_sink_attach(dp_shard *z, hpt_mem *mem, hpt_model *model, hpt_optim *op, int K) {
    if (z->stage != 2) return HPT_OK;
    const hpt_tensor_table *t = model_table(model);
    size_t blo = SIZE_MAX, bhi = 0, bn = 0, lo = z->plo[z->rank], hi = z->phi[z->rank];
    for (int i = 0; i < t->n; i++)
        if (t->t[i].layer == HPT_LAYER_STACKED) {
            blo = HPT_MIN(blo, hpt_table_offset(t, i));
            bhi = HPT_MAX(bhi, hpt_table_offset(t, i) + hpt_tensor_numel(&t->t[i]));
            bn += hpt_tensor_numel(&t->t[i]);
        }
    if (model_grads_floats(model) != model_nonblock_floats(hpt_model_get_config(model)) || bhi - blo != bn)
        return hpt_fail(HPT_ERR_INVALID, "ZeRO-2: the model's block tensors are not one run of "
                        "checkpoint order, or it was made with its blocks' gradients");
    z->mem = mem;
    z->be = hpt_backend_of(mem);
    z->model = model;
    z->accum = K;
    z->slot_n = hpt_table_block_numel(t);
    z->slot_l[0] = z->slot_l[1] = -1;
    /* the owned values: block ones in the run, non-block ones in the flat buffer (one range) */
    z->run_lo = HPT_MAX(lo, blo);
    z->run_n = (hi - nonblock_before(t, hi)) - (lo - nonblock_before(t, lo));
    z->nb_lo = nonblock_before(t, lo);
    z->nb_n = nonblock_before(t, hi) - z->nb_lo;
    hpt_status s;
    hpt_mem_set_name(mem, "gradient slots (ZeRO-2, two blocks)");
    s = z->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, 2 * z->slot_n * sizeof(float), (void **)&z->slot);
    hpt_mem_set_name(mem, "gradients of the owned blocks (ZeRO-2)");
    if (s == HPT_OK && z->run_n)
        s = z->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, z->run_n * sizeof(float), (void **)&z->run);
    hpt_mem_set_name(mem, "gradient sum (micro-batches apart)");
    if (s == HPT_OK && z->nb_n && K > 1) /* the flat buffer is zeroed between micro-batches */
        s = z->be->alloc(mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, z->nb_n * sizeof(float), (void **)&z->nb_acc);
    if (s != HPT_OK) {
        dp_sink_free(z);
        return s;
    }
    model_set_grad_sink(model, &(model_grad_sink){.ctx = z, .slot = sink_slot, .done = sink_done});
    optim_set_run_grads(op, z->run, z->run_lo);
    return HPT_OK;
}

void dp_sink_free(dp_shard *z) {
    if (!z->mem) return;
    for (int i = 0; i < 2; i++) { /* after a failure: the transport may still read the slot */
        if (z->rq[i]) {
            dist_abandon(z->rq[i]);
            z->slot = NULL; /* left allocated, uncounted from here on */
        }
        z->rq[i] = NULL;
    }
    if (z->slot) z->be->free(z->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, z->slot, 2 * z->slot_n * sizeof(float));
    z->be->free(z->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, z->run, z->run_n * sizeof(float));
    z->be->free(z->mem, HPT_TIER_DEVICE, HPT_CAT_GRADS, z->nb_acc, z->nb_n * sizeof(float));
    z->slot = z->run = z->nb_acc = NULL;
    z->mem = NULL;
}

void dp_sink_begin(dp_shard *z, int k) { z->micro = k; }

hpt_status dp_sink_end(dp_shard *z) {
    /* the last two blocks' exchanges (they ran beside the encoder's backward), older first */
    int first = z->slot_l[0] > z->slot_l[1] ? 0 : 1;
    HPT_CHECK(slot_finish(z, first));
    HPT_CHECK(slot_finish(z, first ^ 1));
    const hpt_tensor_table *t = model_table(z->model);
    float *g = model_grads(z->model); /* the non-block tensors, back to back */
    size_t lo[DP_MAX_PROCS], hi[DP_MAX_PROCS];
    for (int q = 0; q < z->size; q++) {
        lo[q] = nonblock_before(t, z->plo[q]);
        hi[q] = nonblock_before(t, z->phi[q]);
    }
    HPT_CHECK(dist_reduce_scatter_ranges(g, lo, hi, "the gradients' sum"));
    if (z->accum < 2 || !z->nb_n) return HPT_OK; /* the owner's sums are in place */
    /* micro-batches apart: the sum so far kept, and the last one's added to it in place */
    if (z->micro < z->accum - 1) fold(z, z->nb_acc, g + z->nb_lo, z->nb_n);
    else dp_add(z->be, g + z->nb_lo, z->nb_acc, z->nb_n);
    return HPT_OK;
}
