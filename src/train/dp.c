/* dp.c: the trainer's data parallel part (--zero 0; docs/zero.md): what N processes agree on
 * before they start, how a step's global batch is divided, and how gradients and losses are
 * combined. Invariants: rank r of N with accum K takes windows r*K .. r*K+K-1 of the step's
 * N*K windows (the windows one process with --accum N*K reads, in that order), and every rank's
 * loader passes over all N*K, so every rank's data position after a step is that one process's;
 * gradients and losses are summed in rank order (dist.h), so every rank holds the same
 * gradients, weights and optimizer state, bit for bit, after every step. */
#include "core/core.h"
#include "dist/dist.h"
#include "train/train_int.h"

#include <stdio.h>
#include <string.h>

int dp_size(void) { return hpt_dist_size(); }
int dp_rank(void) { return hpt_dist_rank(); }
int dp_apart(const hpt_train_opts *o) { return o->zero >= 0 || hpt_dist_size() > 1; }

hpt_status dp_agree(const hpt_train_opts *o) {
    if (hpt_dist_size() == 1) return HPT_OK;
    char flags[2048] = "", text[4096];
    hpt_plan_print(&o->plan, flags, sizeof flags); /* a cut text still compares */
    /* every choice that changes the bits or the run (the save directory aside: each host may
     * name its own) */
    snprintf(text, sizeof text,
             "--model=%s\n--data=%s\n--val=%s\n--resume=%s\n--batch=%d\n--seq=%d\n--steps=%lld\n"
             "--lr=%.9g\n--min-lr=%.9g\n--warmup=%lld\n--grad-clip=%.9g\n--eval-every=%lld\n"
             "--val-batches=%d\n--save-every=%lld\n--seed=%llu\n--threads=%d\nplan=%s\n",
             o->model ? o->model : "", o->data ? o->data : "", o->val ? o->val : "",
             o->resume ? o->resume : "", o->B, o->T, (long long)o->steps, (double)o->lr,
             (double)o->min_lr, (long long)o->warmup, (double)o->grad_clip,
             (long long)o->eval_every, o->val_batches, (long long)o->save_every,
             (unsigned long long)o->seed, hpt_get_threads(), flags);
    return dist_agree(text);
}

hpt_status dp_check(const hpt_train_opts *o) {
    if (hpt_dist_size() == 1) return HPT_OK;
    if (o->zero > 0 && !(o->zero == 3 && hpt_offload_active(&o->offload))) /* 3: dp_engine.c */
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--zero %d is not built yet (--zero 0 runs)", o->zero);
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

void dp_add(float *dst, const float *src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

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
