/* attention_tiled.cu: flash attention's training kernels over tiles, FlashAttention-2's blocking
 * in fp32 on the CUDA cores: a block holds a tile of BR query rows (forward, dq) or BR key rows
 * (dk, dv) of one head in shared memory with the key/value (query/dO) tiles it meets, and each of
 * its 128 threads (8 row groups x 16 column groups) computes a (BR/8) x (BR/16) piece of the
 * score tile and a (BR/8) x (HS/16) piece of the output. attention.cu's kernels, one block per
 * (row, head) with no reuse across rows, stay for the head sizes these are not built for, for
 * plain attention (the saved probabilities) and for inference.
 *
 * Same contract as attention.cu: out and lse (B,NH,T) saved; D_t = dO_t . O_t in scratch; dqkv
 * overwritten; dq by query tile and dk, dv by key tile, each element written by one thread with
 * its sums in a fixed order (the group's heads, then the query rows in order): deterministic, no
 * atomics. Every dot product over the head (scores, dP, D) is one thread's fmaf chain from
 * d = 0 up, the same in the forward and both backward kernels, so a recomputed score is the
 * forward's bit for bit and, at T = 1 (P = 1, O = v), dP - D is exactly 0: dq = dk = 0 exactly
 * and dv = dO, as on the CPU. Other rows agree with the CPU to rounding (test_cuda: 1e-4).
 * Packed examples (docs/packing.md): with pos (B*T: each token's position in its example) a
 * query row r sees keys seg(r) = r - pos[r] .. r only; key tiles before every row's example are
 * skipped (forward, dq), and a key tile's dk, dv stop at the first query tile past its
 * examples (dkv). A sliding window (window > 0) moves seg(r) up to r - window + 1 at most, with
 * the same skipping: O(T window) work. Without pos and window every branch below takes the
 * causal path: the same bits. */
#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/cu_common.cuh"

#include <math.h>

#define TA_THREADS 128 /* 8 row groups x 16 column groups */

/* the first key tile (a multiple of BR) any of query rows q0 .. q0 + BR - 1 sees: 0 without pos
 * and window */
__device__ inline int ta_first_tile(const fa_args &a, int b, int q0, int BR) {
    if (!a.pos && a.window <= 0) return 0;
    int smin = q0;
    for (int r = q0; r < q0 + BR && r < a.T; r++) smin = min(smin, fa_seg(a, b, r));
    return smin / BR * BR;
}

/* rows r0 .. r0 + BR - 1 of a row-major source (row stride ld, HS columns) into a tile with rows
 * of HS + 1 floats (the padding keeps a column's reads across threads on distinct banks); rows at
 * or past T are zeros */
template <int HS, int BR>
__device__ inline void ta_load(float *tile, const float *src, size_t ld, int r0, int T) {
    for (int e = threadIdx.x; e < BR * HS; e += TA_THREADS) {
        const int r = e / HS, d = e % HS;
        tile[r * (HS + 1) + d] = r0 + r < T ? src[(size_t)(r0 + r) * ld + d] : 0.0f;
    }
}

/* s[i][j] = A row (rg + 8 i) . B row (cg + 16 j), one fmaf chain over d = 0 .. HS-1 each */
template <int HS, int RM, int CN>
__device__ inline void ta_dots(float (&s)[RM][CN], const float *A, const float *Bt, int rg, int cg) {
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int j = 0; j < CN; j++) s[i][j] = 0.0f;
#pragma unroll 4
    for (int d = 0; d < HS; d++) {
        float av[RM], bv[CN];
#pragma unroll
        for (int i = 0; i < RM; i++) av[i] = A[(rg + 8 * i) * (HS + 1) + d];
#pragma unroll
        for (int j = 0; j < CN; j++) bv[j] = Bt[(cg + 16 * j) * (HS + 1) + d];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < CN; j++) s[i][j] = fmaf(av[i], bv[j], s[i][j]);
    }
}

/* acc[i][k] += sum over c = 0 .. BR-1 of P[row (rg + 8 i)][c] * V[c][cg + 16 k], c in order;
 * P's rows of BR + 1 floats, V's of HS + 1 */
template <int HS, int BR, int RM, int DN>
__device__ inline void ta_pv(float (&acc)[RM][DN], const float *P, const float *V, int rg, int cg) {
#pragma unroll 4
    for (int c = 0; c < BR; c++) {
        float pv[RM], vv[DN];
#pragma unroll
        for (int i = 0; i < RM; i++) pv[i] = P[(rg + 8 * i) * (BR + 1) + c];
#pragma unroll
        for (int k = 0; k < DN; k++) vv[k] = V[c * (HS + 1) + cg + 16 * k];
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int k = 0; k < DN; k++) acc[i][k] = fmaf(pv[i], vv[k], acc[i][k]);
    }
}

/* the 16 column groups of a row group are lanes 0-15 or 16-31 of one warp */
__device__ inline float ta_max16(float v) {
    for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline float ta_sum16(float v) {
    for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* grid (ceil(T / BR), NH, B): query rows q0 .. q0 + BR - 1 of head h in sequence b, over the key
 * tiles up to the diagonal with the online softmax */
template <int HS, int BR>
__global__ void __launch_bounds__(TA_THREADS) d_ta_forward(fa_args a) {
    constexpr int RM = BR / 8, CN = BR / 16, DN = HS / 16, LD = HS + 1, LP = BR + 1;
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + BR * LD, *Vs = Ks + BR * LD, *Ps = Vs + BR * LD;
    const int rg = threadIdx.x >> 4, cg = threadIdx.x & 15;
    const int q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z, kh = h / a.group;
    const float *base = a.qkv + (size_t)b * a.T * a.W;
    const float *kb = base + (size_t)(a.NH + kh) * HS, *vb = kb + (size_t)a.NKV * HS;
    ta_load<HS, BR>(Qs, base + (size_t)h * HS, a.W, q0, a.T);
    float o[RM][DN], m[RM], l[RM];
#pragma unroll
    for (int i = 0; i < RM; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < DN; k++) o[i][k] = 0.0f;
    }
    const int kend = min(a.T, q0 + BR);
    int seg[RM]; /* each row's first key (0 without pos) */
#pragma unroll
    for (int i = 0; i < RM; i++) seg[i] = fa_seg(a, b, q0 + rg + 8 * i);
    for (int k0 = ta_first_tile(a, b, q0, BR); k0 < kend; k0 += BR) {
        __syncthreads(); /* the last tile's K, V and P are used */
        ta_load<HS, BR>(Ks, kb, a.W, k0, a.T);
        ta_load<HS, BR>(Vs, vb, a.W, k0, a.T);
        __syncthreads();
        float s[RM][CN];
        ta_dots<HS, RM, CN>(s, Qs, Ks, rg, cg);
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const int r = q0 + rg + 8 * i;
            float mt = -INFINITY;
#pragma unroll
            for (int j = 0; j < CN; j++) {
                const int c = k0 + cg + 16 * j;
                s[i][j] = c <= r && c < a.T && c >= seg[i] ? s[i][j] * a.scale : -INFINITY;
                mt = fmaxf(mt, s[i][j]);
            }
            /* causal: key 0 is in the first tile, so m is finite from then on; packed or
             * windowed, a row may see no key of a tile before its first (mnew -inf: nothing
             * changes) */
            const float mnew = fmaxf(m[i], ta_max16(mt));
            const bool none = mnew == -INFINITY;
            const float corr = none ? 1.0f : expf(m[i] - mnew);
            float ps = 0.0f;
#pragma unroll
            for (int j = 0; j < CN; j++) {
                s[i][j] = none ? 0.0f : expf(s[i][j] - mnew);
                ps += s[i][j];
                Ps[(rg + 8 * i) * LP + cg + 16 * j] = s[i][j];
            }
            l[i] = l[i] * corr + ta_sum16(ps);
            m[i] = mnew;
#pragma unroll
            for (int k = 0; k < DN; k++) o[i][k] *= corr;
        }
        __syncthreads();
        ta_pv<HS, BR, RM, DN>(o, Ps, Vs, rg, cg);
    }
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int r = q0 + rg + 8 * i;
        if (r >= a.T) continue;
        const float inv = 1.0f / l[i];
        float *orow = a.out_w + ((size_t)b * a.T + r) * a.C + (size_t)h * HS;
#pragma unroll
        for (int k = 0; k < DN; k++) orow[cg + 16 * k] = o[i][k] * inv;
        if (cg == 0) a.lse[((size_t)b * a.NH + h) * a.T + r] = m[i] + logf(l[i]);
    }
}

/* grid (ceil(T / BR), NH, B): dq of query rows q0 .. q0 + BR - 1 of head h: dS = P (dP - D) scale
 * over the key tiles up to the diagonal, dq = dS K */
template <int HS, int BR>
__global__ void __launch_bounds__(TA_THREADS) d_ta_dq(fa_args a) {
    constexpr int RM = BR / 8, CN = BR / 16, DN = HS / 16, LD = HS + 1, LP = BR + 1;
    extern __shared__ float sm[];
    float *Qs = sm, *dOs = Qs + BR * LD, *Ks = dOs + BR * LD, *Vs = Ks + BR * LD;
    float *dSs = Vs + BR * LD, *ls = dSs + BR * LP, *Ds = ls + BR;
    const int rg = threadIdx.x >> 4, cg = threadIdx.x & 15;
    const int q0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z, kh = h / a.group;
    const float *base = a.qkv + (size_t)b * a.T * a.W;
    const float *kb = base + (size_t)(a.NH + kh) * HS, *vb = kb + (size_t)a.NKV * HS;
    ta_load<HS, BR>(Qs, base + (size_t)h * HS, a.W, q0, a.T);
    ta_load<HS, BR>(dOs, a.dout + (size_t)b * a.T * a.C + (size_t)h * HS, a.C, q0, a.T);
    const size_t row0 = ((size_t)b * a.NH + h) * a.T;
    for (int r = threadIdx.x; r < BR; r += TA_THREADS) {
        ls[r] = q0 + r < a.T ? a.lse_in[row0 + q0 + r] : 0.0f;
        Ds[r] = q0 + r < a.T ? a.D[row0 + q0 + r] : 0.0f;
    }
    float dq[RM][DN];
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int k = 0; k < DN; k++) dq[i][k] = 0.0f;
    const int kend = min(a.T, q0 + BR);
    int seg[RM];
#pragma unroll
    for (int i = 0; i < RM; i++) seg[i] = fa_seg(a, b, q0 + rg + 8 * i);
    for (int k0 = ta_first_tile(a, b, q0, BR); k0 < kend; k0 += BR) {
        __syncthreads();
        ta_load<HS, BR>(Ks, kb, a.W, k0, a.T);
        ta_load<HS, BR>(Vs, vb, a.W, k0, a.T);
        __syncthreads();
        float s[RM][CN], dp[RM][CN];
        ta_dots<HS, RM, CN>(s, Qs, Ks, rg, cg);
        ta_dots<HS, RM, CN>(dp, dOs, Vs, rg, cg);
#pragma unroll
        for (int i = 0; i < RM; i++) {
            const int rl = rg + 8 * i, r = q0 + rl;
#pragma unroll
            for (int j = 0; j < CN; j++) {
                const int c = k0 + cg + 16 * j;
                float ds = 0.0f;
                if (c <= r && r < a.T && c >= seg[i]) {
                    const float p = expf(s[i][j] * a.scale - ls[rl]);
                    ds = p * (dp[i][j] - Ds[rl]) * a.scale;
                }
                dSs[rl * LP + cg + 16 * j] = ds;
            }
        }
        __syncthreads();
        ta_pv<HS, BR, RM, DN>(dq, dSs, Ks, rg, cg);
    }
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int r = q0 + rg + 8 * i;
        if (r >= a.T) continue;
        float *dst = a.dqkv + ((size_t)b * a.T + r) * a.W + (size_t)h * HS;
#pragma unroll
        for (int k = 0; k < DN; k++) dst[cg + 16 * k] = dq[i][k];
    }
}

/* grid (ceil(T / BR), NKV, B): dk, dv of key rows c0 .. c0 + BR - 1 of kv head kh, over the
 * group's query heads and, for each, the query tiles from the diagonal on: dv = P^T dO,
 * dk = dS^T Q (the score tile computed transposed: key rows by the row groups) */
template <int HS, int BR>
__global__ void __launch_bounds__(TA_THREADS) d_ta_dkv(fa_args a) {
    constexpr int RM = BR / 8, CN = BR / 16, DN = HS / 16, LD = HS + 1, LP = BR + 1;
    extern __shared__ float sm[];
    float *Ks = sm, *Vs = Ks + BR * LD, *Qs = Vs + BR * LD, *dOs = Qs + BR * LD;
    float *Pt = dOs + BR * LD, *dSt = Pt + BR * LP, *ls = dSt + BR * LP, *Ds = ls + BR;
    const int rg = threadIdx.x >> 4, cg = threadIdx.x & 15;
    const int c0 = blockIdx.x * BR, kh = blockIdx.y, b = blockIdx.z;
    const float *base = a.qkv + (size_t)b * a.T * a.W;
    ta_load<HS, BR>(Ks, base + (size_t)(a.NH + kh) * HS, a.W, c0, a.T);
    ta_load<HS, BR>(Vs, base + (size_t)(a.NH + a.NKV + kh) * HS, a.W, c0, a.T);
    float dk[RM][DN], dv[RM][DN];
#pragma unroll
    for (int i = 0; i < RM; i++)
#pragma unroll
        for (int k = 0; k < DN; k++) dk[i][k] = 0.0f, dv[i][k] = 0.0f;
    for (int g = 0; g < a.group; g++) {
        const int h = kh * a.group + g;
        const size_t row0 = ((size_t)b * a.NH + h) * a.T;
        /* packed or windowed: query rows past this tile's keys' examples or windows see none
         * of them (seg grows with the row), so the walk stops at the first tile whose first
         * row starts after them */
        const int c_last = min(a.T, c0 + BR) - 1;
        for (int q0 = c0; q0 < a.T && fa_seg(a, b, q0) <= c_last; q0 += BR) {
            __syncthreads(); /* the last tile's Q, dO, P and dS are used */
            ta_load<HS, BR>(Qs, base + (size_t)h * HS, a.W, q0, a.T);
            ta_load<HS, BR>(dOs, a.dout + (size_t)b * a.T * a.C + (size_t)h * HS, a.C, q0, a.T);
            for (int r = threadIdx.x; r < BR; r += TA_THREADS) {
                ls[r] = q0 + r < a.T ? a.lse_in[row0 + q0 + r] : 0.0f;
                Ds[r] = q0 + r < a.T ? a.D[row0 + q0 + r] : 0.0f;
            }
            __syncthreads();
            float st[RM][CN], dpt[RM][CN];
            ta_dots<HS, RM, CN>(st, Ks, Qs, rg, cg);   /* fmaf(k, q): the forward's products */
            ta_dots<HS, RM, CN>(dpt, Vs, dOs, rg, cg); /* fmaf(v, dO): D's */
#pragma unroll
            for (int i = 0; i < RM; i++) {
                const int cl = rg + 8 * i, c = c0 + cl;
#pragma unroll
                for (int j = 0; j < CN; j++) {
                    const int rl = cg + 16 * j, r = q0 + rl;
                    float p = 0.0f, ds = 0.0f;
                    if (c <= r && r < a.T && c >= fa_seg(a, b, r)) {
                        p = expf(st[i][j] * a.scale - ls[rl]);
                        ds = p * (dpt[i][j] - Ds[rl]) * a.scale;
                    }
                    Pt[cl * LP + rl] = p;
                    dSt[cl * LP + rl] = ds;
                }
            }
            __syncthreads();
            ta_pv<HS, BR, RM, DN>(dv, Pt, dOs, rg, cg);
            ta_pv<HS, BR, RM, DN>(dk, dSt, Qs, rg, cg);
        }
    }
#pragma unroll
    for (int i = 0; i < RM; i++) {
        const int c = c0 + rg + 8 * i;
        if (c >= a.T) continue;
        float *dst = a.dqkv + ((size_t)b * a.T + c) * a.W + (size_t)(a.NH + kh) * HS;
#pragma unroll
        for (int k = 0; k < DN; k++) {
            dst[cg + 16 * k] = dk[i][k];
            dst[(size_t)a.NKV * HS + cg + 16 * k] = dv[i][k];
        }
    }
}

/* ---- launches ---- */
template <int HS, int BR>
static void ta_forward(const fa_args &a, int B, const char *what) {
    const size_t smem = (size_t)(3 * BR * (HS + 1) + BR * (BR + 1)) * sizeof(float);
    cu_note(cudaFuncSetAttribute(d_ta_forward<HS, BR>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem), what);
    dim3 grid((unsigned)((a.T + BR - 1) / BR), (unsigned)a.NH, (unsigned)B);
    d_ta_forward<HS, BR><<<grid, TA_THREADS, smem, cu_stream>>>(a);
    CU_LAUNCHED(what);
}

template <int HS, int BR>
static void ta_backward(const fa_args &a, int B, const char *what) {
    const size_t n = (size_t)B * a.T * a.NH;
    d_fa_D<<<(unsigned)((n + 255) / 256), 256, 0, cu_stream>>>(a, HS);
    CU_LAUNCHED(what);
    const size_t sq = (size_t)(4 * BR * (HS + 1) + BR * (BR + 1) + 2 * BR) * sizeof(float);
    cu_note(cudaFuncSetAttribute(d_ta_dq<HS, BR>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sq), what);
    const unsigned tiles = (unsigned)((a.T + BR - 1) / BR);
    d_ta_dq<HS, BR><<<dim3(tiles, (unsigned)a.NH, (unsigned)B), TA_THREADS, sq, cu_stream>>>(a);
    CU_LAUNCHED(what);
    const size_t sk = (size_t)(4 * BR * (HS + 1) + 2 * BR * (BR + 1) + 2 * BR) * sizeof(float);
    cu_note(cudaFuncSetAttribute(d_ta_dkv<HS, BR>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sk), what);
    d_ta_dkv<HS, BR><<<dim3(tiles, (unsigned)a.NKV, (unsigned)B), TA_THREADS, sk, cu_stream>>>(a);
    CU_LAUNCHED(what);
}

/* the head sizes with a tiled kernel: 16, 32, 64 (64-row tiles), 128 (32-row tiles) */
bool cu_tiled_attention_supported(int C, int NH) {
    const int hs = C / NH;
    return hs == 16 || hs == 32 || hs == 64 || hs == 128;
}

void cu_tiled_flash_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                            int NKV, const int32_t *pos, int window) {
    if (B <= 0 || T <= 0) return;
    cu_enter();
    fa_args a = fa_make(qkv, B, T, C, NH, NKV, pos, window);
    a.out_w = out, a.lse = lse;
    const char *what = "flash_attention_forward (tiled)";
    switch (C / NH) {
    case 16: ta_forward<16, 64>(a, B, what); break;
    case 32: ta_forward<32, 64>(a, B, what); break;
    case 64: ta_forward<64, 64>(a, B, what); break;
    default: ta_forward<128, 32>(a, B, what); break;
    }
}

void cu_tiled_flash_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                             const float *out, const float *lse, int B, int T, int C, int NH, int NKV,
                             const int32_t *pos, int window) {
    if (B <= 0 || T <= 0) return;
    cu_enter();
    fa_args a = fa_make(qkv, B, T, C, NH, NKV, pos, window);
    a.dout = dout, a.out = out, a.lse_in = lse, a.dqkv = dqkv, a.D = scratch;
    const char *what = "flash_attention_backward (tiled)";
    switch (C / NH) {
    case 16: ta_backward<16, 64>(a, B, what); break;
    case 32: ta_backward<32, 64>(a, B, what); break;
    case 64: ta_backward<64, 64>(a, B, what); break;
    default: ta_backward<128, 32>(a, B, what); break;
    }
}
