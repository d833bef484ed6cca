/* nn.cu: embeddings, layer normalisation, GELU, the loss (softmax cross-entropy, whole or over
 * vocabulary chunks), the model-side helpers of the chunked head and bf16 embeddings, and the
 * reductions (sum of squares, non-finite check) on the GPU.
 * Row ops run one block per row (a fixed tree per row: deterministic). The scatters of the
 * embedding backward run one thread per channel over the rows in order, the CPU's order, so
 * dwte and dwpe are deterministic without atomics (and equal the CPU's sums bit for bit). Sums
 * returned to the host (the loss, sums of squares) are in double: CU_SUM_BLOCKS fixed partials,
 * then one block's fixed tree; the mean loss sums the rows in order, as the CPU does. */
#include "kernels/cuda/cu_common.cuh"

#include <math.h>

/* ---- deterministic sums ---- */
__global__ void d_finish_sum(double *red, int first, int out) {
    __shared__ double sh[32];
    double v = threadIdx.x < CU_SUM_BLOCKS ? red[first + threadIdx.x] : 0.0;
    v = cu_block_sum(v, sh);
    if (threadIdx.x == 0) red[out] = v;
}
void cu_finish_sum(int first, int out) {
    d_finish_sum<<<1, CU_SUM_BLOCKS, 0, cu_stream>>>(cu_red, first, out);
    CU_LAUNCHED("sum");
}

__global__ void d_sumsq(double *red, const float *x, size_t n) {
    __shared__ double sh[32];
    double s = 0.0;
    CU_FOR(i, n) s += (double)x[i] * (double)x[i];
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) red[1 + blockIdx.x] = s;
}
double cu_sumsq(const float *x, size_t n) {
    cu_enter();
    d_sumsq<<<CU_SUM_BLOCKS, CU_T, 0, cu_stream>>>(cu_red, x, n);
    CU_LAUNCHED("sumsq");
    cu_finish_sum(1, 0);
    cu_read_red(1);
    return cu_red_host[0];
}

__global__ void d_nonfinite(double *red, const float *x, size_t n) {
    int any = 0;
    CU_FOR(i, n) any |= (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
    any = __syncthreads_or(any);
    if (threadIdx.x == 0) red[1 + blockIdx.x] = any ? 1.0 : 0.0;
}
int cu_nonfinite(const float *x, size_t n) {
    cu_enter();
    d_nonfinite<<<CU_SUM_BLOCKS, CU_T, 0, cu_stream>>>(cu_red, x, n);
    CU_LAUNCHED("nonfinite");
    cu_finish_sum(1, 0);
    cu_read_red(1);
    return cu_red_host[0] != 0.0;
}

/* The many-range forms: each range's kernels exactly as sumsq's or nonfinite's (the same
 * launch shapes, so the same bits), its result finished into its own slot of cu_red past the
 * partials; the host reads the slots at once, a round trip per CU_MANY_SLOTS ranges. */
#define CU_MANY_FIRST (1 + CU_SUM_BLOCKS)
#define CU_MANY_SLOTS (CU_RED_SLOTS - CU_MANY_FIRST)
void cu_sumsq_many(double *sums, const float *const *xs, const size_t *ns, size_t k) {
    cu_enter();
    for (size_t a = 0; a < k; a += CU_MANY_SLOTS) {
        int m = (int)(k - a < CU_MANY_SLOTS ? k - a : CU_MANY_SLOTS);
        for (int j = 0; j < m; j++) { /* the partials' slots are reused in stream order */
            d_sumsq<<<CU_SUM_BLOCKS, CU_T, 0, cu_stream>>>(cu_red, xs[a + j], ns[a + j]);
            CU_LAUNCHED("sumsq_many");
            cu_finish_sum(1, CU_MANY_FIRST + j);
        }
        cu_read_red_at(CU_MANY_FIRST, m);
        for (int j = 0; j < m; j++) sums[a + j] = cu_red_host[CU_MANY_FIRST + j];
    }
}
/* d_finish_sum's tree, its result into dst (device memory) */
__global__ void d_finish_sum_to(const double *red, int first, double *dst) {
    __shared__ double sh[32];
    double v = threadIdx.x < CU_SUM_BLOCKS ? red[first + threadIdx.x] : 0.0;
    v = cu_block_sum(v, sh);
    if (threadIdx.x == 0) *dst = v;
}
void cu_sumsq_many_dev(double *sums, const float *const *xs, const size_t *ns, size_t k) {
    cu_enter();
    for (size_t j = 0; j < k; j++) { /* the partials' slots are reused in stream order */
        d_sumsq<<<CU_SUM_BLOCKS, CU_T, 0, cu_stream>>>(cu_red, xs[j], ns[j]);
        CU_LAUNCHED("sumsq_many_dev");
        d_finish_sum_to<<<1, CU_SUM_BLOCKS, 0, cu_stream>>>(cu_red, 1, sums + j);
        CU_LAUNCHED("sumsq_many_dev");
    }
}
int cu_nonfinite_many(const float *const *xs, const size_t *ns, size_t k) {
    cu_enter();
    int any = 0;
    for (size_t a = 0; a < k; a += CU_MANY_SLOTS) {
        int m = (int)(k - a < CU_MANY_SLOTS ? k - a : CU_MANY_SLOTS);
        for (int j = 0; j < m; j++) {
            d_nonfinite<<<CU_SUM_BLOCKS, CU_T, 0, cu_stream>>>(cu_red, xs[a + j], ns[a + j]);
            CU_LAUNCHED("nonfinite_many");
            cu_finish_sum(1, CU_MANY_FIRST + j);
        }
        cu_read_red_at(CU_MANY_FIRST, m);
        for (int j = 0; j < m; j++) any |= cu_red_host[CU_MANY_FIRST + j] != 0.0;
    }
    return any;
}

__global__ void d_scale(float *x, size_t n, float s) { CU_FOR(i, n) x[i] *= s; }
void cu_scale(float *x, size_t n, float s) {
    if (!n) return;
    cu_enter();
    d_scale<<<cu_grid(n), CU_T, 0, cu_stream>>>(x, n, s);
    CU_LAUNCHED("scale");
}
__global__ void d_add(float *out, const float *a, const float *b, size_t n) {
    CU_FOR(i, n) out[i] = a[i] + b[i];
}
void cu_add(float *out, const float *a, const float *b, size_t n) {
    if (!n) return;
    cu_enter();
    d_add<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, a, b, n);
    CU_LAUNCHED("add");
}

/* ---- embeddings ---- */
__global__ void d_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe,
                                  int T, int C, size_t n) {
    CU_FOR(i, n) {
        size_t row = i / (size_t)C, c = i % (size_t)C;
        out[i] = wte[(size_t)inp[row] * C + c] + wpe[(row % (size_t)T) * C + c];
    }
}
void cu_encoder_forward(float *out, const int32_t *inp, const float *wte, const float *wpe, int B,
                        int T, int C) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    cu_enter();
    d_encoder_forward<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, inp, wte, wpe, T, C, n);
    CU_LAUNCHED("encoder_forward");
}

__global__ void d_encoder_forward_bf16(float *out, const int32_t *inp, const uint16_t *wte,
                                       const uint16_t *wpe, int T, int C, size_t n) {
    CU_FOR(i, n) {
        size_t row = i / (size_t)C, c = i % (size_t)C;
        out[i] = cu_bf16_widen(wte[(size_t)inp[row] * C + c]) + cu_bf16_widen(wpe[(row % (size_t)T) * C + c]);
    }
}
void cu_encoder_forward_bf16(float *out, const int32_t *inp, const uint16_t *wte,
                             const uint16_t *wpe, int B, int T, int C) {
    size_t n = (size_t)B * T * C;
    if (!n) return;
    cu_enter();
    d_encoder_forward_bf16<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, inp, wte, wpe, T, C, n);
    CU_LAUNCHED("encoder_forward_bf16");
}

/* one thread per channel, rows in order: dwte rows of tokens in [v0, v0 + nv) (dwte NULL: none),
 * dwpe (T rows, NULL: none) */
__global__ void d_embed_scatter(float *dwte, float *dwpe, const float *dout, const int32_t *inp,
                                size_t BT, int T, size_t C, size_t v0, size_t nv) {
    size_t c = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (size_t i = 0; i < BT; i++) {
        float d = dout[i * C + c];
        if (dwte) {
            size_t t = (size_t)inp[i];
            if (t >= v0 && t < v0 + nv) dwte[(t - v0) * C + c] += d;
        }
        if (dwpe) dwpe[(i % (size_t)T) * C + c] += d;
    }
}
void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
                         int T, int C) {
    if (!B || !T || !C) return;
    cu_enter();
    d_embed_scatter<<<cu_grid((size_t)C, 64), 64, 0, cu_stream>>>(dwte, dwpe, dout, inp, (size_t)B * T,
                                                                  T, (size_t)C, 0, (size_t)-1);
    CU_LAUNCHED("encoder_backward");
}
void cu_encoder_backward_wpe(float *dwpe, const float *dout, size_t BT, int T, size_t C) {
    if (!BT || !C) return;
    cu_enter();
    d_embed_scatter<<<cu_grid(C, 64), 64, 0, cu_stream>>>(NULL, dwpe, dout, NULL, BT, T, C, 0, 0);
    CU_LAUNCHED("encoder_backward_wpe");
}
void cu_encoder_backward_rows(float *dwte, const float *dout, const int32_t *inp, size_t BT,
                              size_t C, size_t v0, size_t nv) {
    if (!BT || !C || !nv) return;
    cu_enter();
    d_embed_scatter<<<cu_grid(C, 64), 64, 0, cu_stream>>>(dwte, NULL, dout, inp, BT, 1, C, v0, nv);
    CU_LAUNCHED("encoder_backward_rows");
}

__global__ void d_bf16_widen_n(float *x, const uint16_t *h, size_t n) { CU_FOR(i, n) x[i] = cu_bf16_widen(h[i]); }
void cu_bf16_widen_par(float *x, const uint16_t *h, size_t n) {
    if (!n) return;
    cu_enter();
    d_bf16_widen_n<<<cu_grid(n), CU_T, 0, cu_stream>>>(x, h, n);
    CU_LAUNCHED("bf16_widen_par");
}
__global__ void d_bf16_split(uint16_t *h, uint16_t *c, const float *x, size_t n) {
    CU_FOR(i, n) {
        float v = x[i];
        uint16_t r = cu_bf16_rne(v);
        h[i] = r;
        if (c) c[i] = cu_bf16_rne(v - cu_bf16_widen(r));
    }
}
void cu_bf16_split_par(uint16_t *h, uint16_t *c, const float *x, size_t n) { cu_bf16_split(h, c, x, n); }
void cu_bf16_split(uint16_t *h, uint16_t *c, const float *x, size_t n) {
    if (!n) return;
    cu_enter();
    d_bf16_split<<<cu_grid(n), CU_T, 0, cu_stream>>>(h, c, x, n);
    CU_LAUNCHED("bf16_split");
}

/* ---- layer normalisation: one block per row ---- */
__global__ void d_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                    const float *w, const float *b, int C) {
    __shared__ float sh[32];
    const float *x = inp + blockIdx.x * (size_t)C; // (C)
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) s += x[c];
    float mu = cu_block_sum(s, sh) / (float)C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) v += (x[c] - mu) * (x[c] - mu);
    float rs = 1.0f / sqrtf(cu_block_sum(v, sh) / (float)C + 1e-5f);
    float *o = out + blockIdx.x * (size_t)C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = (x[c] - mu) * rs * w[c] + b[c];
    if (threadIdx.x == 0) mean[blockIdx.x] = mu, rstd[blockIdx.x] = rs;
}
void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, int64_t N, int C) {
    if (N <= 0) return;
    cu_enter();
    d_layernorm_forward<<<(unsigned)N, CU_T, 0, cu_stream>>>(out, mean, rstd, inp, w, b, C);
    CU_LAUNCHED("layernorm_forward");
}

__global__ void d_layernorm_apply(float *out, const float *inp, const float *w, const float *b,
                                  const float *mean, const float *rstd, int C, size_t n) {
    CU_FOR(i, n) {
        size_t r = i / (size_t)C, c = i % (size_t)C;
        out[i] = (inp[i] - mean[r]) * rstd[r] * w[c] + b[c];
    }
}
void cu_layernorm_apply(float *out, const float *inp, const float *w, const float *b,
                        const float *mean, const float *rstd, int64_t N, int C) {
    size_t n = (size_t)N * (size_t)C;
    if (!n) return;
    cu_enter();
    d_layernorm_apply<<<cu_grid(n), CU_T, 0, cu_stream>>>(out, inp, w, b, mean, rstd, C, n);
    CU_LAUNCHED("layernorm_apply");
}

/* dinp += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm)), dnorm = dout w; one block per row */
__global__ void d_layernorm_dinp(float *dinp, const float *dout, const float *inp, const float *w,
                                 const float *mean, const float *rstd, int C) {
    __shared__ float sh[32];
    const size_t r = blockIdx.x;
    const float *x = inp + r * C, *d = dout + r * C;
    const float mu = mean[r], rs = rstd[r];
    float a = 0.0f, bsum = 0.0f;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dn = w[c] * d[c];
        a += dn;
        bsum += dn * (x[c] - mu) * rs;
    }
    a = cu_block_sum(a, sh) / (float)C;
    bsum = cu_block_sum(bsum, sh) / (float)C;
    float *dx = dinp + r * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float norm = (x[c] - mu) * rs;
        dx[c] += rs * (w[c] * d[c] - a - norm * bsum);
    }
}
/* dw, db: one thread per channel over the rows in order (where C is beyond colsum.cu's scratch) */
__global__ void d_layernorm_dwdb(float *dw, float *db, const float *dout, const float *inp,
                                 const float *mean, const float *rstd, int64_t N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float sw = dw[c], sb = db[c];
    for (int64_t i = 0; i < N; i++) {
        float d = dout[i * C + c];
        sw += d * (inp[i * C + c] - mean[i]) * rstd[i];
        sb += d;
    }
    dw[c] = sw, db[c] = sb;
}
void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, int64_t N, int C) {
    if (N <= 0) return;
    cu_enter();
    d_layernorm_dinp<<<(unsigned)N, CU_T, 0, cu_stream>>>(dinp, dout, inp, w, mean, rstd, C);
    CU_LAUNCHED("layernorm_backward dinp");
    if (!cu_colsum(CU_COLSUM_LAYERNORM, dw, db, dout, inp, mean, rstd, N, C)) {
        d_layernorm_dwdb<<<cu_grid((size_t)C, 64), 64, 0, cu_stream>>>(dw, db, dout, inp, mean, rstd, N, C);
        CU_LAUNCHED("layernorm_backward dw");
    }
}

/* ---- GELU, tanh form ---- */
#define GELU_K 0.7978845608028654f
__global__ void d_gelu_forward(float *out, const float *inp, size_t n) {
    CU_FOR(i, n) {
        float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_K * (x + 0.044715f * x * x * x)));
    }
}
__global__ void d_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    CU_FOR(i, n) {
        float x = inp[i];
        float th = tanhf(GELU_K * (x + 0.044715f * x * x * x));
        float local = 0.5f * (1.0f + th) +
                      0.5f * x * (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = local * dout[i];
    }
}
void cu_gelu_forward(float *out, const float *inp, int64_t n) {
    if (n <= 0) return;
    cu_enter();
    d_gelu_forward<<<cu_grid((size_t)n), CU_T, 0, cu_stream>>>(out, inp, (size_t)n);
    CU_LAUNCHED("gelu_forward");
}
void cu_gelu_backward(float *dinp, const float *inp, const float *dout, int64_t n) {
    if (n <= 0) return;
    cu_enter();
    d_gelu_backward<<<cu_grid((size_t)n), CU_T, 0, cu_stream>>>(dinp, inp, dout, (size_t)n);
    CU_LAUNCHED("gelu_backward");
}

/* ---- the loss ---- */
/* one block per row: lse = max + log(sum exp(l - max)) over the first V; loss = lse - l[target] */
__global__ void d_crossentropy_forward(float *losses, float *lse, const float *logits,
                                       const int32_t *targets, int V, int Vp) {
    __shared__ float sh[32];
    const float *l = logits + blockIdx.x * (size_t)Vp;
    float mx = -INFINITY;
    for (int v = threadIdx.x; v < V; v += blockDim.x) mx = fmaxf(mx, l[v]);
    mx = cu_block_max(mx, sh, -INFINITY);
    float s = 0.0f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(l[v] - mx);
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) {
        float m = mx + logf(s);
        lse[blockIdx.x] = m;
        int t = targets[blockIdx.x];
        losses[blockIdx.x] = t < 0 ? 0.0f : m - l[t]; /* < 0: ignored */
    }
}
/* the mean of n values summed in order in double (the CPU's sum) */
__global__ void d_mean_in_order(double *red, const float *x, size_t n) {
    double t = 0.0;
    for (size_t i = 0; i < n; i++) t += (double)x[i];
    red[0] = t / (double)n;
}
float cu_loss_mean(const float *losses, size_t n) {
    cu_enter();
    d_mean_in_order<<<1, 1, 0, cu_stream>>>(cu_red, losses, n);
    CU_LAUNCHED("loss_mean");
    cu_read_red(1);
    return (float)cu_red_host[0];
}
float cu_crossentropy_forward(float *losses, float *lse, const float *logits,
                              const int32_t *targets, int64_t N, int V, int Vp) {
    if (N <= 0) return 0.0f;
    cu_enter();
    d_crossentropy_forward<<<(unsigned)N, CU_T * 2, 0, cu_stream>>>(losses, lse, logits, targets, V, Vp);
    CU_LAUNCHED("crossentropy_forward");
    return cu_loss_mean(losses, (size_t)N);
}

__global__ void d_crossentropy_backward(float *logits, const float *lse, const int32_t *targets,
                                        int V, int Vp, float dloss, size_t n) {
    CU_FOR(i, n) {
        size_t r = i / (size_t)Vp;
        int v = (int)(i % (size_t)Vp);
        float g = 0.0f;
        if (v < V && targets[r] >= 0) { /* an ignored row: no gradient */
            g = expf(logits[i] - lse[r]) * dloss;
            if (v == targets[r]) g -= dloss;
        }
        logits[i] = g;
    }
}
void cu_crossentropy_backward(float *logits, const float *lse, const int32_t *targets, int64_t N,
                              int V, int Vp, float dloss) {
    size_t n = (size_t)N * (size_t)Vp;
    if (!n) return;
    cu_enter();
    d_crossentropy_backward<<<cu_grid(n), CU_T, 0, cu_stream>>>(logits, lse, targets, V, Vp, dloss, n);
    CU_LAUNCHED("crossentropy_backward");
}

/* one block per row: the running (max, sum) updated by one chunk of nv logits */
__global__ void d_logsumexp_chunk(float *mxs, float *sums, const float *logits, size_t nv, int first) {
    __shared__ float sh[32];
    const size_t r = blockIdx.x;
    const float *l = logits + r * nv;
    const float mx0 = first ? -INFINITY : mxs[r], s0 = first ? 0.0f : sums[r];
    float mx = mx0;
    for (size_t v = threadIdx.x; v < nv; v += blockDim.x) mx = fmaxf(mx, l[v]);
    mx = cu_block_max(mx, sh, -INFINITY);
    float s = 0.0f;
    for (size_t v = threadIdx.x; v < nv; v += blockDim.x) s += expf(l[v] - mx);
    s = cu_block_sum(s, sh);
    if (threadIdx.x == 0) {
        mxs[r] = mx;
        sums[r] = s + s0 * expf(mx0 - mx); /* first chunk: 0 * 0 */
    }
}
void cu_logsumexp_chunk(float *mx, float *sum, const float *logits, size_t n, size_t nv, int first) {
    if (!n) return;
    cu_enter();
    d_logsumexp_chunk<<<(unsigned)n, CU_T, 0, cu_stream>>>(mx, sum, logits, nv, first);
    CU_LAUNCHED("logsumexp_chunk");
}

/* one block per row: lse = mx + log(sum) (lse holds sum, losses mx), losses = lse - x . wte[t] */
__global__ void d_tied_loss(float *losses, float *lse, const float *lnf, const float *wte,
                            const uint16_t *wte_h, const int32_t *targets, size_t C) {
    __shared__ float sh[32];
    const size_t r = blockIdx.x, t = targets[r] < 0 ? 0 : (size_t)targets[r] * C;
    const float *x = lnf + r * C;
    float dot = 0.0f;
    if (targets[r] >= 0) /* an ignored row's loss is 0 (below) */
        for (size_t k = threadIdx.x; k < C; k += blockDim.x)
            dot += x[k] * (wte ? wte[t + k] : cu_bf16_widen(wte_h[t + k]));
    dot = cu_block_sum(dot, sh);
    if (threadIdx.x == 0) {
        float m = losses[r] + logf(lse[r]);
        lse[r] = m;
        losses[r] = targets[r] < 0 ? 0.0f : m - dot;
    }
}
void cu_tied_loss(float *losses, float *lse, const float *lnf, const float *wte,
                  const uint16_t *wte_h, const int32_t *targets, size_t n, size_t C) {
    if (!n) return;
    cu_enter();
    d_tied_loss<<<(unsigned)n, CU_T, 0, cu_stream>>>(losses, lse, lnf, wte, wte_h, targets, C);
    CU_LAUNCHED("tied_loss");
}

__global__ void d_crossentropy_dlogits(float *logits, const float *lse, const int32_t *targets,
                                       size_t v0, size_t nv, float dloss, size_t n) {
    CU_FOR(i, n) {
        size_t r = i / nv, v = i % nv;
        float g = targets[r] < 0 ? 0.0f : expf(logits[i] - lse[r]) * dloss; /* < 0: ignored */
        if (targets[r] >= 0 && (size_t)targets[r] == v0 + v) g -= dloss;
        logits[i] = g;
    }
}
void cu_crossentropy_dlogits(float *logits, const float *lse, const int32_t *targets, size_t n,
                             size_t v0, size_t nv, float dloss) {
    if (!n || !nv) return;
    cu_enter();
    d_crossentropy_dlogits<<<cu_grid(n * nv), CU_T, 0, cu_stream>>>(logits, lse, targets, v0, nv, dloss, n * nv);
    CU_LAUNCHED("crossentropy_dlogits");
}
