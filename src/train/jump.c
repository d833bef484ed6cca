/* jump.c: the jump predictor of the hybrid schedule (docs/predict.md, "Jumps"). FULL keeps K
 * snapshots of the weights, S steps apart (host tier, params category: the estimator and the
 * profiler see them); a jump extrapolates each weight's trajectory H steps past the last
 * (linear or quadratic least squares: a fixed combination of the snapshots; exponential: a
 * geometric series of the differences), scales the direction by a line search on held-out
 * batches and confirms it on 2 others, or restores the last snapshot bit for bit.
 * Invariants: ring[K-1] holds the weights the jump starts from until the jump ends; the
 * direction overwrites ring[0] (no longer needed); every loop is sequential and in a fixed
 * order, so a jump gives the same bits after a resume. */
#include "core/core.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "train/train_int.h"

#include <math.h>
#include <string.h>

#define JUMP_MAX_SCALE 8.0
#define JUMP_MIN_SCALE 0.125
#define JUMP_VERIFY 2 /* held-out batches that confirm a jump, after the search's */

hpt_status jump_coeffs(int fit, int64_t K, int64_t S, int64_t H, double *c) {
    if (fit == HPT_JUMP_FIT_EXP) return hpt_fail(HPT_ERR_INVALID, "the exp fit has no coefficients");
    int deg = fit == HPT_JUMP_FIT_QUADRATIC ? 2 : 1;
    if (K < deg + 1 || K > 64) return hpt_fail(HPT_ERR_INVALID, "jump fit: %lld snapshots", (long long)K);
    /* times in strides, the last snapshot at 0: x_i = i - (K-1); the target x* = H / S.
     * c = X (X^T X)^-1 x*  with X's rows (1, x_i, x_i^2), solved by Gaussian elimination. */
    double A[3][4] = {{0}};
    int m = deg + 1;
    double xs = (double)H / (double)S, tpow[3] = {1.0, xs, xs * xs};
    for (int64_t i = 0; i < K; i++) {
        double x = (double)(i - (K - 1)), r[3] = {1.0, x, x * x};
        for (int a = 0; a < m; a++)
            for (int b = 0; b < m; b++) A[a][b] += r[a] * r[b];
    }
    for (int a = 0; a < m; a++) A[a][m] = tpow[a];
    for (int col = 0; col < m; col++) { /* A is positive definite: no pivoting needed */
        for (int row = col + 1; row < m; row++) {
            double f = A[row][col] / A[col][col];
            for (int k = col; k <= m; k++) A[row][k] -= f * A[col][k];
        }
    }
    double z[3];
    for (int a = m - 1; a >= 0; a--) {
        double s = A[a][m];
        for (int b = a + 1; b < m; b++) s -= A[a][b] * z[b];
        z[a] = s / A[a][a];
    }
    for (int64_t i = 0; i < K; i++) {
        double x = (double)(i - (K - 1)), r[3] = {1.0, x, x * x};
        c[i] = 0.0;
        for (int a = 0; a < m; a++) c[i] += r[a] * z[a];
    }
    return HPT_OK;
}

hpt_status jump_direction(int fit, int64_t K, int64_t S, int64_t H, float *const *ring, size_t n,
                          float *out) {
    if (fit == HPT_JUMP_FIT_EXP) {
        if (K < 3) return hpt_fail(HPT_ERR_INVALID, "the exp fit needs 3 snapshots");
        double terms = (double)H / (double)S;
        for (size_t j = 0; j < n; j++) {
            double num = 0.0, den = 0.0, dprev = (double)ring[1][j] - (double)ring[0][j], d = dprev;
            for (int64_t i = 2; i < K; i++) {
                d = (double)ring[i][j] - (double)ring[i - 1][j];
                num += d * dprev;
                den += dprev * dprev;
                dprev = d;
            }
            double r = den > 0.0 ? num / den : 0.0;
            r = r < 0.0 ? 0.0 : r > 0.999 ? 0.999 : r;
            /* the next `terms` differences: d r + d r^2 + ... = d r (1 - r^terms) / (1 - r) */
            out[j] = (float)(d * r * (1.0 - pow(r, terms)) / (1.0 - r));
        }
        return HPT_OK;
    }
    double c[64];
    HPT_CHECK(jump_coeffs(fit, K, S, H, c));
    c[K - 1] -= 1.0; /* minus the last snapshot */
    for (size_t j = 0; j < n; j++) {
        double s = 0.0;
        for (int64_t i = 0; i < K; i++) s += c[i] * (double)ring[i][j];
        out[j] = (float)s;
    }
    return HPT_OK;
}

hpt_status jump_init(jump_state *js, hpt_mem *mem, const hpt_schedule_opts *o, size_t n, int B,
                     int T) {
    memset(js, 0, sizeof *js);
    js->mem = mem;
    js->n = n;
    js->K = o->jump_snapshots;
    js->B = B;
    js->T = T;
    js->n_search = o->jump_search_batches;
    js->prev_step = -1;
    hpt_mem_set_name(mem, "jump snapshots"); /* one block: a checkpoint section spans slots */
    HPT_CHECK(hpt_backend_cpu()->alloc(mem, HPT_TIER_HOST, HPT_CAT_PARAMS,
                                       (size_t)js->K * n * sizeof(float), (void **)&js->ring[0]));
    for (int64_t i = 1; i < js->K; i++) js->ring[i] = js->ring[0] + (size_t)i * n;
    size_t held = jump_heldout_tokens(o, B, T) * sizeof(int32_t);
    hpt_mem_set_name(mem, "jump held-out inputs");
    HPT_CHECK(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_IO, held, (void **)&js->hx));
    hpt_mem_set_name(mem, "jump held-out targets");
    HPT_CHECK(hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_IO, held, (void **)&js->hy));
    return HPT_OK;
}

size_t jump_heldout_tokens(const hpt_schedule_opts *o, int B, int T) {
    return (size_t)(o->jump_search_batches + JUMP_VERIFY) * (size_t)B * (size_t)T;
}

int jump_heldout_batches(const hpt_schedule_opts *o) { return o->jump_search_batches + JUMP_VERIFY; }

void jump_free(jump_state *js) {
    if (!js->mem) return;
    if (js->ring[0])
        hpt_backend_cpu()->free(js->mem, HPT_TIER_HOST, HPT_CAT_PARAMS, js->ring[0],
                                (size_t)js->K * js->n * sizeof(float));
    size_t held = (size_t)(js->n_search + JUMP_VERIFY) * (size_t)js->B * (size_t)js->T * sizeof(int32_t);
    if (js->hx) hpt_mem_free(js->mem, HPT_TIER_HOST, HPT_CAT_IO, js->hx, held);
    if (js->hy) hpt_mem_free(js->mem, HPT_TIER_HOST, HPT_CAT_IO, js->hy, held);
    memset(js, 0, sizeof *js);
}

int64_t jump_slot(const hpt_schedule_opts *o, int64_t done_in_full) {
    int64_t back = schedule_full_len(o) - done_in_full; /* FULL steps after this one */
    if (back < 0 || back % o->jump_stride || back / o->jump_stride >= o->jump_snapshots) return -1;
    return o->jump_snapshots - 1 - back / o->jump_stride;
}

void jump_snapshot(jump_state *js, int64_t slot, const float *params) {
    hpt_backend_cpu()->copy(js->ring[slot], params, js->n * sizeof(float), HPT_COPY_D2H);
    hpt_mem_transfer(js->mem, HPT_TIER_DEVICE, HPT_TIER_HOST, HPT_CAT_PARAMS, js->n * sizeof(float));
}

/* The weights at per-group scales along the direction: p = ring[K-1] + a[group] * dir. */
static void place(jump_state *js, const jump_env *env, float *p, const double *a) {
    const float *w = js->ring[js->K - 1], *d = js->ring[0];
    for (int t = 0; t < env->n_tensors; t++) {
        float af = (float)a[env->group[t]];
        for (size_t j = env->off[t]; j < env->off[t + 1]; j++) p[j] = af == 0.0f ? w[j] : w[j] + af * d[j];
    }
}

/* The mean loss of held-out batches [first, first + count). */
static hpt_status heldout(jump_state *js, const jump_env *env, int first, int count, double *out) {
    size_t bt = (size_t)js->B * (size_t)js->T;
    double sum = 0.0;
    for (int b = first; b < first + count; b++) {
        double l;
        HPT_CHECK(env->loss(env->ctx, js->hx + (size_t)b * bt, js->hy + (size_t)b * bt, js->B, &l));
        sum += l;
        js->n_forwards += js->B;
    }
    *out = sum / count;
    return HPT_OK;
}

/* Sets the scale of group g (all groups: g = -1) to x and returns the search loss there. */
static hpt_status try_scale(jump_state *js, const jump_env *env, float *p, const double *a, int g,
                            double x, double *l) {
    double b[JUMP_GROUPS];
    for (int i = 0; i < JUMP_GROUPS; i++) b[i] = g < 0 || i == g ? x : a[i];
    place(js, env, p, b);
    return heldout(js, env, 0, js->n_search, l);
}

/* The global line search: scale 1, then doubling while the loss falls (up to JUMP_MAX_SCALE),
 * or halving until it beats staying (down to JUMP_MIN_SCALE); a[] gets the scale kept. */
static hpt_status search(jump_state *js, const jump_env *env, float *p, double *a, int g,
                         double *lbest) {
    double l, keep = 0.0;
    HPT_CHECK(try_scale(js, env, p, a, g, 1.0, &l));
    if (l < *lbest) {
        keep = 1.0;
        *lbest = l;
        for (double x = 2.0; x <= JUMP_MAX_SCALE; x *= 2.0) {
            HPT_CHECK(try_scale(js, env, p, a, g, x, &l));
            if (!(l < *lbest)) break;
            keep = x;
            *lbest = l;
        }
    } else {
        for (double x = 0.5; x >= JUMP_MIN_SCALE; x *= 0.5) {
            HPT_CHECK(try_scale(js, env, p, a, g, x, &l));
            if (l < *lbest) {
                keep = x;
                *lbest = l;
                break;
            }
        }
    }
    for (int i = 0; i < JUMP_GROUPS; i++)
        if (g < 0 || i == g) a[i] = keep;
    return HPT_OK;
}

/* One group alone: twice and half its scale (from 0: the smallest scale), the best kept. */
static hpt_status refine(jump_state *js, const jump_env *env, float *p, double *a, int g,
                         double *lbest) {
    double cand[2] = {a[g] > 0.0 ? 2.0 * a[g] : JUMP_MIN_SCALE, a[g] > 0.0 ? 0.5 * a[g] : 0.0};
    double keep = a[g], l;
    for (int c = 0; c < 2; c++) {
        if (cand[c] == 0.0 || cand[c] > JUMP_MAX_SCALE) continue;
        HPT_CHECK(try_scale(js, env, p, a, g, cand[c], &l));
        if (l < *lbest) {
            keep = cand[c];
            *lbest = l;
        }
    }
    a[g] = keep;
    return HPT_OK;
}

hpt_status jump_run(jump_state *js, const hpt_schedule_opts *o, const jump_env *env,
                    int64_t real_step, jump_result *r) {
    memset(r, 0, sizeof *r);
    float *p = env->params;
    double t0 = hpt_now();
    js->n_forwards = 0;
    /* the start: the last snapshot is the current weights (taken at FULL's last step) */
    double l0, v0;
    HPT_CHECK(heldout(js, env, 0, js->n_search, &l0));
    HPT_CHECK(heldout(js, env, js->n_search, JUMP_VERIFY, &v0));
    HPT_CHECK(jump_direction(o->jump_fit, js->K, o->jump_stride, o->jump_horizon, js->ring, js->n,
                             js->ring[0]));
    /* a global scale first (every group alike), then each group's alone: twice or half the
     * global one (the smallest scale when the global search kept none) */
    double a[JUMP_GROUPS] = {0}, lbest = l0;
    HPT_CHECK(search(js, env, p, a, -1, &lbest));
    for (int g = 0; g < JUMP_GROUPS; g++) HPT_CHECK(refine(js, env, p, a, g, &lbest));
    int any = 0;
    for (int g = 0; g < JUMP_GROUPS; g++) any |= a[g] > 0.0;
    double v1 = v0;
    if (any) {
        place(js, env, p, a);
        HPT_CHECK(heldout(js, env, js->n_search, JUMP_VERIFY, &v1));
    }
    r->search_ms = (hpt_now() - t0) * 1e3;
    for (int g = 0; g < JUMP_GROUPS; g++) r->scales[g] = a[g];
    r->scale = a[JUMP_GROUP_MATRICES];
    r->loss0 = v0;
    r->search_loss0 = l0;
    r->search_loss = lbest;
    if (!any || !(v1 < v0)) { /* rolled back: the start's bits */
        memset(a, 0, sizeof a);
        place(js, env, p, a);
        r->rolled_back = 1;
        r->scale = 0.0;
        memset(r->scales, 0, sizeof r->scales);
        v1 = v0;
    }
    r->loss1 = v1;
    /* the gain in real steps' worth of loss: the verify loss's fall per real step since the
     * last jump (none yet, or not falling: any gain counts as large) */
    double rate = js->prev_step >= 0 && real_step > js->prev_step
                      ? (js->prev_loss - v0) / (double)(real_step - js->prev_step) : 0.0;
    r->gain = r->rolled_back ? 0.0 : rate > 0.0 ? (v0 - v1) / rate : 1e30;
    js->prev_loss = v1;
    js->prev_step = real_step;
    if (!r->rolled_back && env->opt) {
        float *m = hpt_optim_m(env->opt), *v = hpt_optim_v(env->opt);
        if (o->jump_state == HPT_JUMP_STATE_RESET) {
            if (m) memset(m, 0, js->n * sizeof(float));
            if (v) memset(v, 0, js->n * sizeof(float));
            hpt_optim_set_t(env->opt, 0);
        } else if (o->jump_state == HPT_JUMP_STATE_ZERO_M && m) {
            memset(m, 0, js->n * sizeof(float));
        }
    }
    r->forwards = js->n_forwards;
    r->ms = (hpt_now() - t0) * 1e3;
    return HPT_OK;
}
