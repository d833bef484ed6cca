/* attention.cu: causal attention on the GPU, grouped-query aware (query head h reads kv head
 * h / (NH / NKV)), with the CPU's saved-state contract: plain saves out and the probabilities
 * (B,NH,T,T); flash saves out and each row's lse (B,NH,T), no (T,T) buffer. Forward: one block
 * per (query row, head) over key tiles of AT_TILE with the online softmax (inference: the same
 * kernel over the cache's rows); backward: D = dO . O, then dq by query row and dk, dv by key
 * row. Correctness first: no shared-memory reuse across rows, no tensor cores (docs/cuda.md).
 * The flash ops go to attention_tiled.cu's kernels for the head sizes it is built for; these
 * kernels serve the other head sizes, plain attention and inference.
 * Invariants: each output element is written by one thread, its sums in a fixed order (over
 * the group's query heads and the later query rows): deterministic, no atomics; dqkv is
 * overwritten; D is summed in the order of each dP (T = 1: dq = dk = 0 exactly).
 * Packed examples (docs/packing.md): pos (B*T, device) each token's position in its example;
 * query t then sees keys t - pos[t] .. t only (pos NULL: all keys <= t); a sliding window
 * (window > 0) keeps keys t - window + 1 .. t besides. The _seg ops with a pos or a window run
 * the tiled kernels with the same mask where they are built, these elsewhere. */
#include "kernels/cuda/cu_common.cuh"

#include <math.h>

#define AT_TILE 128
#define AT_THREADS 128

typedef struct {
    const float *q, *k, *v;  /* element 0 of head 0 in row 0 of each */
    size_t q_row, kv_row;    /* elements between rows */
    float *out;
    size_t out_row;
    float *lse;              /* (B,NH,Tq) or NULL */
    float *att;              /* (B,NH,Tq,Tq) or NULL */
    int Tq, Tk, NH, group, hs, pos0;
    float scale;
    const int32_t *pos;      /* (B,Tq) positions in each example, or NULL: causal */
    int window;              /* keys pos0 + t - window + 1 .. pos0 + t only (> 0); 0: all */
} at_fwd;

/* grid (Tq * NH, B): query row t of sequence b, head h; keys 0 .. pos0 + t */
__global__ void d_attn_forward(at_fwd a) {
    extern __shared__ float sm[];
    float *qs = sm, *os = sm + a.hs, *s = sm + 2 * a.hs;
    __shared__ float red[32];
    const int b = blockIdx.y, t = blockIdx.x / a.NH, h = blockIdx.x % a.NH, kh = h / a.group;
    const float *q = a.q + ((size_t)b * a.Tq + t) * a.q_row + (size_t)h * a.hs;
    const float *kb = a.k + (size_t)b * a.Tk * a.kv_row + (size_t)kh * a.hs;
    const float *vb = a.v + (size_t)b * a.Tk * a.kv_row + (size_t)kh * a.hs;
    for (int i = threadIdx.x; i < a.hs; i += blockDim.x) qs[i] = q[i], os[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int nk = a.pos0 + t + 1;
    int s0 = a.pos ? t - a.pos[(size_t)b * a.Tq + t] : 0; /* the example's first key */
    if (a.window > 0) s0 = max(s0, nk - a.window);       /* the window's */
    for (int k0 = s0; k0 < nk; k0 += AT_TILE) {
        const int n = nk - k0 < AT_TILE ? nk - k0 : AT_TILE;
        __syncthreads();
        float mt = -INFINITY;
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            const float *kr = kb + (size_t)(k0 + j) * a.kv_row;
            float d = 0.0f;
            for (int i = 0; i < a.hs; i++) d += qs[i] * kr[i];
            s[j] = d * a.scale;
            mt = fmaxf(mt, s[j]);
        }
        mt = cu_block_max(mt, red, -INFINITY);
        const float mnew = fmaxf(m, mt), corr = expf(m - mnew); /* 0 on the first tile */
        float ps = 0.0f;
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            s[j] = expf(s[j] - mnew);
            ps += s[j];
        }
        ps = cu_block_sum(ps, red); /* its __syncthreads also publishes s[] */
        l = l * corr + ps;
        m = mnew;
        for (int i = threadIdx.x; i < a.hs; i += blockDim.x) {
            float acc = os[i] * corr;
            for (int j = 0; j < n; j++) acc += s[j] * vb[(size_t)(k0 + j) * a.kv_row + i];
            os[i] = acc;
        }
    }
    float *o = a.out + ((size_t)b * a.Tq + t) * a.out_row + (size_t)h * a.hs;
    const float inv = 1.0f / l, lse = m + logf(l);
    for (int i = threadIdx.x; i < a.hs; i += blockDim.x) o[i] = os[i] * inv;
    const size_t row = ((size_t)b * a.NH + h) * a.Tq + t;
    if (a.lse && threadIdx.x == 0) a.lse[row] = lse;
    if (a.att) { /* the probabilities of the row, and zeros past the diagonal */
        float *ar = a.att + row * a.Tq;
        for (int j = threadIdx.x; j < a.Tq; j += blockDim.x) {
            float p = 0.0f;
            if (j >= s0 && j < nk) {
                const float *kr = kb + (size_t)j * a.kv_row;
                float d = 0.0f;
                for (int i = 0; i < a.hs; i++) d += qs[i] * kr[i];
                p = expf(d * a.scale - lse);
            }
            ar[j] = p;
        }
    }
}

static size_t fwd_smem(int hs) { return (size_t)(2 * hs + AT_TILE) * sizeof(float); }

static at_fwd train_args(const float *qkv, float *out, int B, int T, int C, int NH, int NKV) {
    at_fwd a;
    const int hs = C / NH;
    const size_t W = (size_t)(NH + 2 * NKV) * hs;
    a.q = qkv;
    a.k = qkv + (size_t)NH * hs;
    a.v = qkv + (size_t)(NH + NKV) * hs;
    a.q_row = a.kv_row = W;
    a.out = out;
    a.out_row = (size_t)NH * hs;
    a.lse = NULL;
    a.att = NULL;
    a.Tq = a.Tk = T;
    a.NH = NH;
    a.group = NH / NKV;
    a.hs = hs;
    a.pos0 = 0;
    a.scale = 1.0f / sqrtf((float)hs);
    a.pos = NULL;
    a.window = 0;
    (void)B;
    return a;
}

static void launch_forward(const at_fwd &a, int B, const char *what) {
    if (a.Tq <= 0 || B <= 0) return;
    cu_enter();
    dim3 grid((unsigned)(a.Tq * a.NH), (unsigned)B);
    d_attn_forward<<<grid, AT_THREADS, fwd_smem(a.hs), cu_stream>>>(a);
    CU_LAUNCHED(what);
}

void cu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                          int NKV) {
    at_fwd a = train_args(qkv, out, B, T, C, NH, NKV);
    a.att = att;
    launch_forward(a, B, "attention_forward");
}

void cu_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                int NH, int NKV) {
    if (cu_tiled_attention_supported(C, NH)) {
        cu_tiled_flash_forward(out, lse, qkv, B, T, C, NH, NKV, NULL, 0);
        return;
    }
    at_fwd a = train_args(qkv, out, B, T, C, NH, NKV);
    a.lse = lse;
    launch_forward(a, B, "flash_attention_forward");
}

void cu_infer_attend(float *atty, const float *qkv, const float *K, const float *V, int pos0,
                     size_t n, int C, int NH, int NKV, int window) {
    at_fwd a;
    a.hs = C / NH;
    const size_t KVC = (size_t)NKV * (size_t)a.hs;
    a.q = qkv;
    a.q_row = (size_t)C + 2 * KVC;
    a.k = K;
    a.v = V;
    a.kv_row = KVC;
    a.out = atty;
    a.out_row = (size_t)C;
    a.lse = NULL;
    a.att = NULL;
    a.Tq = (int)n;
    a.Tk = 0; /* one sequence: no offset between sequences */
    a.NH = NH;
    a.group = NH / NKV;
    a.pos0 = pos0;
    a.scale = 1.0f / sqrtf((float)a.hs);
    a.pos = NULL;
    a.window = window;
    launch_forward(a, 1, "infer_attend");
}

/* ---- backward ---- */
typedef struct {
    const float *qkv, *dout, *att, *lse, *out;
    float *dqkv, *D;
    int T, NH, NKV, group, hs;
    size_t W;
    float scale;
    const int32_t *pos;      /* (B,T) positions in each example, or NULL: causal */
    int window;              /* keys t - window + 1 .. t only (> 0); 0: all */
} at_bwd;

/* the first key query t of sequence b sees (its example's, its window's); never decreasing in t */
__device__ inline int at_seg(const at_bwd &a, int b, int t) {
    const int s = a.pos ? t - a.pos[(size_t)b * a.T + t] : 0;
    return a.window > 0 ? max(s, t - a.window + 1) : s;
}

/* P_tj of head h in sequence b */
__device__ inline float at_prob(const at_bwd &a, int b, int h, int t, int j, const float *q,
                                const float *kr) {
    const size_t row = ((size_t)b * a.NH + h) * a.T + t;
    if (a.att) return a.att[row * a.T + j];
    float d = 0.0f;
    for (int i = 0; i < a.hs; i++) d += q[i] * kr[i];
    return expf(d * a.scale - a.lse[row]);
}

/* grid (T * NH, B): D_t = dO_t . O_t (flash), sum_j P_tj (dO_t . v_j) (plain). Each sum runs in
 * order, as each dP = dO_t . v_j is summed in d_attn_dq / d_attn_dkv (i = 0 .. hs-1; j = 0 .. t):
 * a row with one key (t = 0: P = 1, O = v_0) then gets dP - D = 0 and dS = 0 exactly, so T = 1's
 * dq and dk are exactly 0 as on the CPU (kernels/cpu/flash_attention.c) instead of the rounding
 * noise a reduction tree's partial sums leave. The dP of a tile are made in parallel; the O(T hs)
 * in-order sums are small beside the backward's O(T^2 hs). */
__global__ void d_attn_D(at_bwd a) {
    __shared__ float pd[AT_TILE];
    const int b = blockIdx.y, t = blockIdx.x / a.NH, h = blockIdx.x % a.NH, kh = h / a.group;
    const float *d = a.dout + ((size_t)b * a.T + t) * a.NH * a.hs + (size_t)h * a.hs;
    float acc = 0.0f;
    if (a.out) {
        const float *o = a.out + ((size_t)b * a.T + t) * a.NH * a.hs + (size_t)h * a.hs;
        if (threadIdx.x == 0)
            for (int i = 0; i < a.hs; i++) acc += d[i] * o[i];
    } else {
        for (int k0 = at_seg(a, b, t); k0 <= t; k0 += AT_TILE) {
            const int n = t + 1 - k0 < AT_TILE ? t + 1 - k0 : AT_TILE;
            __syncthreads(); /* the previous tile's pd[] is summed */
            for (int j = threadIdx.x; j < n; j += blockDim.x) {
                const float *vr = a.qkv + ((size_t)b * a.T + k0 + j) * a.W + (size_t)(a.NH + a.NKV + kh) * a.hs;
                float dp = 0.0f;
                for (int i = 0; i < a.hs; i++) dp += d[i] * vr[i];
                pd[j] = a.att[(((size_t)b * a.NH + h) * a.T + t) * a.T + k0 + j] * dp;
            }
            __syncthreads();
            if (threadIdx.x == 0)
                for (int j = 0; j < n; j++) acc += pd[j];
        }
    }
    if (threadIdx.x == 0) a.D[((size_t)b * a.NH + h) * a.T + t] = acc;
}

/* grid (T * NH, B): dq_t = sum_{j <= t} dS_tj d_j, dS = P (dP - D) scale, dP = dO_t . v_j */
__global__ void d_attn_dq(at_bwd a) {
    extern __shared__ float sm[];
    float *qs = sm, *acc = sm + a.hs, *ds = sm + 2 * a.hs;
    const int b = blockIdx.y, t = blockIdx.x / a.NH, h = blockIdx.x % a.NH, kh = h / a.group;
    const float *q = a.qkv + ((size_t)b * a.T + t) * a.W + (size_t)h * a.hs;
    const float *d = a.dout + ((size_t)b * a.T + t) * a.NH * a.hs + (size_t)h * a.hs;
    const float Dt = a.D[((size_t)b * a.NH + h) * a.T + t];
    for (int i = threadIdx.x; i < a.hs; i += blockDim.x) qs[i] = q[i], acc[i] = 0.0f;
    for (int k0 = at_seg(a, b, t); k0 <= t; k0 += AT_TILE) {
        const int n = t + 1 - k0 < AT_TILE ? t + 1 - k0 : AT_TILE;
        __syncthreads();
        for (int j = threadIdx.x; j < n; j += blockDim.x) {
            const float *kr = a.qkv + ((size_t)b * a.T + k0 + j) * a.W + (size_t)(a.NH + kh) * a.hs;
            const float *vr = kr + (size_t)a.NKV * a.hs;
            float dp = 0.0f;
            for (int i = 0; i < a.hs; i++) dp += d[i] * vr[i];
            float p = at_prob(a, b, h, t, k0 + j, qs, kr);
            ds[j] = p * (dp - Dt) * a.scale;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < a.hs; i += blockDim.x) {
            float s = acc[i];
            for (int j = 0; j < n; j++)
                s += ds[j] * a.qkv[((size_t)b * a.T + k0 + j) * a.W + (size_t)(a.NH + kh) * a.hs + i];
            acc[i] = s;
        }
    }
    float *dq = a.dqkv + ((size_t)b * a.T + t) * a.W + (size_t)h * a.hs;
    for (int i = threadIdx.x; i < a.hs; i += blockDim.x) dq[i] = acc[i];
}

/* grid (T * NKV, B): key row j of kv head kh: dk_j = sum over the group's heads h and t >= j of
 * dS_tj q_t; dv_j = sum of P_tj dO_t */
__global__ void d_attn_dkv(at_bwd a) {
    extern __shared__ float sm[];
    float *ds = sm, *ps = sm + AT_TILE, *ak = sm + 2 * AT_TILE, *av = ak + a.hs;
    const int b = blockIdx.y, j = blockIdx.x / a.NKV, kh = blockIdx.x % a.NKV;
    const float *kr = a.qkv + ((size_t)b * a.T + j) * a.W + (size_t)(a.NH + kh) * a.hs;
    const float *vr = kr + (size_t)a.NKV * a.hs;
    for (int i = threadIdx.x; i < a.hs; i += blockDim.x) ak[i] = 0.0f, av[i] = 0.0f;
    for (int g = 0; g < a.group; g++) {
        const int h = kh * a.group + g;
        /* rows from the first that does not see key j on see none (at_seg never decreases) */
        for (int t0 = j; t0 < a.T && at_seg(a, b, t0) <= j; t0 += AT_TILE) {
            const int n = a.T - t0 < AT_TILE ? a.T - t0 : AT_TILE;
            __syncthreads();
            for (int r = threadIdx.x; r < n; r += blockDim.x) {
                const int t = t0 + r;
                const float *q = a.qkv + ((size_t)b * a.T + t) * a.W + (size_t)h * a.hs;
                const float *d = a.dout + ((size_t)b * a.T + t) * a.NH * a.hs + (size_t)h * a.hs;
                float dp = 0.0f;
                for (int i = 0; i < a.hs; i++) dp += d[i] * vr[i];
                /* rows of a later example or past the window do not see key j */
                float p = at_seg(a, b, t) > j ? 0.0f : at_prob(a, b, h, t, j, q, kr);
                ps[r] = p;
                ds[r] = p * (dp - a.D[((size_t)b * a.NH + h) * a.T + t]) * a.scale;
            }
            __syncthreads();
            for (int i = threadIdx.x; i < a.hs; i += blockDim.x) {
                float sk = ak[i], sv = av[i];
                for (int r = 0; r < n; r++) {
                    const size_t rowq = ((size_t)b * a.T + t0 + r);
                    sk += ds[r] * a.qkv[rowq * a.W + (size_t)h * a.hs + i];
                    sv += ps[r] * a.dout[rowq * a.NH * a.hs + (size_t)h * a.hs + i];
                }
                ak[i] = sk, av[i] = sv;
            }
        }
    }
    float *dk = a.dqkv + ((size_t)b * a.T + j) * a.W + (size_t)(a.NH + kh) * a.hs;
    float *dv = dk + (size_t)a.NKV * a.hs;
    for (int i = threadIdx.x; i < a.hs; i += blockDim.x) dk[i] = ak[i], dv[i] = av[i];
}

static void backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                     const float *att, const float *out, const float *lse, int B, int T, int C,
                     int NH, int NKV, const int32_t *pos, int window, const char *what) {
    if (B <= 0 || T <= 0) return;
    cu_enter();
    at_bwd a;
    a.qkv = qkv, a.dout = dout, a.att = att, a.lse = lse, a.out = out;
    a.dqkv = dqkv, a.D = scratch;
    a.T = T, a.NH = NH, a.NKV = NKV, a.group = NH / NKV, a.hs = C / NH;
    a.W = (size_t)(NH + 2 * NKV) * a.hs;
    a.scale = 1.0f / sqrtf((float)a.hs);
    a.pos = pos;
    a.window = window;
    d_attn_D<<<dim3((unsigned)(T * NH), (unsigned)B), AT_THREADS, 0, cu_stream>>>(a);
    CU_LAUNCHED(what);
    d_attn_dq<<<dim3((unsigned)(T * NH), (unsigned)B), AT_THREADS,
                (size_t)(2 * a.hs + AT_TILE) * sizeof(float), cu_stream>>>(a);
    CU_LAUNCHED(what);
    d_attn_dkv<<<dim3((unsigned)(T * NKV), (unsigned)B), AT_THREADS,
                 (size_t)(2 * AT_TILE + 2 * a.hs) * sizeof(float), cu_stream>>>(a);
    CU_LAUNCHED(what);
}

void cu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH, int NKV) {
    backward(dqkv, scratch, dout, qkv, att, NULL, NULL, B, T, C, NH, NKV, NULL, 0,
             "attention_backward");
}

void cu_flash_attention_backward(float *dqkv, float *scratch, const float *dout,
                                 const float *qkv, const float *out, const float *lse, int B,
                                 int T, int C, int NH, int NKV) {
    if (cu_tiled_attention_supported(C, NH)) {
        cu_tiled_flash_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, NULL, 0);
        return;
    }
    backward(dqkv, scratch, dout, qkv, NULL, out, lse, B, T, C, NH, NKV, NULL, 0,
             "flash_attention_backward");
}

/* ---- the document-masked ops (pos NULL, window 0: the ops above, tiled where they are) ---- */
void cu_attention_forward_seg(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH, int NKV, const int32_t *pos, int window) {
    at_fwd a = train_args(qkv, out, B, T, C, NH, NKV);
    a.att = att;
    a.pos = pos;
    a.window = window;
    launch_forward(a, B, "attention_forward");
}

void cu_attention_backward_seg(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH, int NKV,
                               const int32_t *pos, int window) {
    backward(dqkv, scratch, dout, qkv, att, NULL, NULL, B, T, C, NH, NKV, pos, window,
             "attention_backward");
}

void cu_flash_attention_forward_seg(float *out, float *lse, const float *qkv, int B, int T, int C,
                                    int NH, int NKV, const int32_t *pos, int window) {
    if (cu_tiled_attention_supported(C, NH)) {
        cu_tiled_flash_forward(out, lse, qkv, B, T, C, NH, NKV, pos, window);
        return;
    }
    at_fwd a = train_args(qkv, out, B, T, C, NH, NKV);
    a.lse = lse;
    a.pos = pos;
    a.window = window;
    launch_forward(a, B, "flash_attention_forward");
}

void cu_flash_attention_backward_seg(float *dqkv, float *scratch, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH, int NKV, const int32_t *pos,
                                     int window) {
    if (cu_tiled_attention_supported(C, NH)) {
        cu_tiled_flash_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH, NKV, pos, window);
        return;
    }
    backward(dqkv, scratch, dout, qkv, NULL, out, lse, B, T, C, NH, NKV, pos, window,
             "flash_attention_backward");
}
