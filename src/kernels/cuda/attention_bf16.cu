/* attention_bf16.cu: the flash pair with bf16 operands (--matmul bf16; backend.h's
 * flash_attention_forward_bf16, docs/design.md "Matmul precision") on the tensor cores: WMMA
 * bf16 16x16x16 products with fp32 accumulators, FlashAttention-2's blocking as
 * attention_tiled.cu's. A block of 4 warps holds 64 query rows (forward, dq) or 64 key rows
 * (dk, dv) of one head; warp w owns rows 16w .. 16w + 15 of every tile, so the softmax and
 * the dS step need only __syncwarp. Operands are rounded to bf16 (nearest even) as they are
 * copied into shared memory; P and dS are rounded after their fp32 computation; the softmax
 * statistics, D = dO . O and every accumulator stay fp32. The online softmax walks key tiles of
 * 64 aligned at 0 with P relative to the running max, the CPU's FA_BC, so CPU and GPU round
 * the same P: they differ by the order of the fp32 sums (and expf) only.
 * Deterministic without atomics: dq by query tile, dk and dv by key tile summed over the
 * group's query heads in order (attention_tiled.cu's split); each output element is written
 * once. Packed examples and the sliding window as attention_tiled.cu (fa_seg, attention_args.cuh; the tile skips).
 * Heads of 16, 32, 64, 128 (cu_flash_attention_bf16_heads); sm_80 or newer.
 * Status: compiled, not run (docs/cuda.md). */
#include "kernels/cuda/attention_args.cuh"
#include "kernels/cuda/cu_common.cuh"

#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

using namespace nvcuda;

#define AB_R 64        /* rows of a block's tile: query rows (forward, dq), key rows (dk, dv) */
#define AB_C 64        /* keys (or query rows, dk/dv) per inner tile: the online softmax's 64 */
#define AB_THREADS 128 /* 4 warps of 16 rows */

typedef __nv_bfloat16 bf16_t;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> ab_acc;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16_t, wmma::row_major> ab_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::row_major> ab_b_row;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16_t, wmma::col_major> ab_b_col;

/* the first key tile (a multiple of AB_C) any of rows q0 .. q0 + AB_R - 1 sees */
__device__ inline int ab_first_tile(const fa_args &a, int b, int q0) {
    if (!a.pos && a.window <= 0) return 0;
    int smin = q0;
    for (int r = q0; r < q0 + AB_R && r < a.T; r++) smin = min(smin, fa_seg(a, b, r));
    return smin / AB_C * AB_C;
}

/* query r may see key c */
__device__ inline bool ab_sees(const fa_args &a, int b, int r, int c) {
    return r < a.T && c <= r && c >= fa_seg(a, b, r);
}

/* rows r0 .. r0 + 63 of a row-major fp32 source (row stride ld, HS columns) rounded to bf16
 * into a tile with rows of LD (rows at or past T: zeros) */
template <int HS, int LD>
__device__ inline void ab_load(bf16_t *tile, const float *src, size_t ld, int r0, int T) {
    for (int e = threadIdx.x; e < AB_R * HS; e += AB_THREADS) {
        const int r = e / HS, d = e % HS;
        tile[r * LD + d] = __float2bfloat16_rn(r0 + r < T ? src[(size_t)(r0 + r) * ld + d] : 0.0f);
    }
}

/* dst (the warp's 16 rows x 64 columns, fp32, row stride LS) = A (16 rows at A, stride LA) times
 * B^T, B's 64 rows at Bm (stride LB): S = Q K^T, dP = dO V^T (and their transposes) */
template <int HS, int LA, int LB, int LS>
__device__ inline void ab_abt(float *dst, const bf16_t *A, const bf16_t *Bm) {
#pragma unroll
    for (int j = 0; j < AB_C / 16; j++) {
        ab_acc acc;
        wmma::fill_fragment(acc, 0.0f);
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            ab_a fa;
            ab_b_col fb; /* B^T's (k, j) block: B's rows 16j.. as columns */
            wmma::load_matrix_sync(fa, A + 16 * kk, LA);
            wmma::load_matrix_sync(fb, Bm + 16 * j * LB + 16 * kk, LB);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(dst + 16 * j, acc, LS, wmma::mem_row_major);
    }
}

/* acc[n] += P (the warp's 16 rows x 64, bf16, stride LP) times V (64 rows x HS, stride LV) */
template <int HS, int LP, int LV>
__device__ inline void ab_pv(ab_acc (&acc)[HS / 16], const bf16_t *P, const bf16_t *V) {
#pragma unroll
    for (int kk = 0; kk < AB_C / 16; kk++) {
        ab_a fa;
        wmma::load_matrix_sync(fa, P + 16 * kk, LP);
#pragma unroll
        for (int n = 0; n < HS / 16; n++) {
            ab_b_row fb;
            wmma::load_matrix_sync(fb, V + 16 * kk * LV + 16 * n, LV);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
        }
    }
}

__device__ inline float ab_wmax(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline float ab_wsum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* the shared-memory strides (elements): bf16 rows padded by 8, fp32 rows by 4 (WMMA's ldm
 * multiples; every fragment's address stays 32-byte aligned) */
template <int HS>
struct ab_ld {
    static constexpr int Q = HS + 8, P = AB_C + 8, S = AB_C + 4, O = HS + 4;
};

/* grid (ceil(T / 64), NH, B): query rows q0 .. q0 + 63 of head h in sequence b over the key
 * tiles up to the diagonal, O kept in shared memory (rescaled by each tile's correction, then
 * loaded into the accumulators for P V) */
template <int HS>
__global__ void __launch_bounds__(AB_THREADS) d_ab_forward(fa_args a) {
    typedef ab_ld<HS> L;
    extern __shared__ __align__(128) unsigned char ab_sm[];
    bf16_t *Qs = (bf16_t *)ab_sm, *Ks = Qs + AB_R * L::Q, *Vs = Ks + AB_C * L::Q;
    bf16_t *Ps = Vs + AB_C * L::Q;
    float *Ss = (float *)(Ps + AB_R * L::P), *Os = Ss + AB_R * L::S;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = blockIdx.x * AB_R, h = blockIdx.y, b = blockIdx.z, kh = h / a.group;
    const float *base = a.qkv + (size_t)b * a.T * a.W;
    const float *kb = base + (size_t)(a.NH + kh) * HS, *vb = kb + (size_t)a.NKV * HS;
    ab_load<HS, L::Q>(Qs, base + (size_t)h * HS, a.W, q0, a.T);
    for (int e = threadIdx.x; e < AB_R * HS; e += AB_THREADS) Os[(e / HS) * L::O + e % HS] = 0.0f;
    float m[16], l[16]; /* the warp's rows' running max and sum (the same in every lane) */
#pragma unroll
    for (int i = 0; i < 16; i++) m[i] = -INFINITY, l[i] = 0.0f;
    const int kend = min(a.T, q0 + AB_R);
    for (int k0 = ab_first_tile(a, b, q0); k0 < kend; k0 += AB_C) {
        __syncthreads(); /* the last tile's K and V are used */
        ab_load<HS, L::Q>(Ks, kb, a.W, k0, a.T);
        ab_load<HS, L::Q>(Vs, vb, a.W, k0, a.T);
        __syncthreads();
        ab_abt<HS, L::Q, L::Q, L::S>(Ss + 16 * w * L::S, Qs + 16 * w * L::Q, Ks);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const int rl = 16 * w + i, r = q0 + rl;
            float s[2], mt = -INFINITY;
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const int c = k0 + lane + 32 * u;
                s[u] = ab_sees(a, b, r, c) ? Ss[rl * L::S + lane + 32 * u] * a.scale : -INFINITY;
                mt = fmaxf(mt, s[u]);
            }
            const float mnew = fmaxf(m[i], ab_wmax(mt));
            const bool none = mnew == -INFINITY; /* no key of this row so far: nothing changes */
            const float corr = none ? 1.0f : expf(m[i] - mnew);
            float ps = 0.0f;
#pragma unroll
            for (int u = 0; u < 2; u++) {
                const float p = none ? 0.0f : expf(s[u] - mnew); /* masked: exp(-inf) = 0 */
                ps += p;
                Ps[rl * L::P + lane + 32 * u] = __float2bfloat16_rn(p);
            }
            l[i] = l[i] * corr + ab_wsum(ps);
            m[i] = mnew;
            for (int d = lane; d < HS; d += 32) Os[rl * L::O + d] *= corr;
        }
        __syncwarp();
        ab_acc acc[HS / 16];
#pragma unroll
        for (int n = 0; n < HS / 16; n++)
            wmma::load_matrix_sync(acc[n], Os + 16 * w * L::O + 16 * n, L::O, wmma::mem_row_major);
        ab_pv<HS, L::P, L::Q>(acc, Ps + 16 * w * L::P, Vs);
#pragma unroll
        for (int n = 0; n < HS / 16; n++)
            wmma::store_matrix_sync(Os + 16 * w * L::O + 16 * n, acc[n], L::O, wmma::mem_row_major);
        __syncwarp();
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int rl = 16 * w + i, r = q0 + rl;
        if (r >= a.T) continue;
        const float inv = 1.0f / l[i];
        float *orow = a.out_w + ((size_t)b * a.T + r) * a.C + (size_t)h * HS;
        for (int d = lane; d < HS; d += 32) orow[d] = Os[rl * L::O + d] * inv;
        if (lane == 0) a.lse[((size_t)b * a.NH + h) * a.T + r] = m[i] + logf(l[i]);
    }
}

/* grid (ceil(T / 64), NH, B): dq of query rows q0 .. q0 + 63 of head h: S = Q K^T and dP = dO V^T
 * per key tile, P = exp(scale S - lse), dS = P (dP - D) scale, dq += bf16(dS) K */
template <int HS>
__global__ void __launch_bounds__(AB_THREADS) d_ab_dq(fa_args a) {
    typedef ab_ld<HS> L;
    extern __shared__ __align__(128) unsigned char ab_sm[];
    bf16_t *Qs = (bf16_t *)ab_sm, *dOs = Qs + AB_R * L::Q, *Ks = dOs + AB_R * L::Q;
    bf16_t *Vs = Ks + AB_C * L::Q, *dSs = Vs + AB_C * L::Q;
    float *Ss = (float *)(dSs + AB_R * L::P), *dPs = Ss + AB_R * L::S, *Os = dPs + AB_R * L::S;
    float *ls = Os + AB_R * L::O, *Ds = ls + AB_R;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = blockIdx.x * AB_R, h = blockIdx.y, b = blockIdx.z, kh = h / a.group;
    const float *base = a.qkv + (size_t)b * a.T * a.W;
    const float *kb = base + (size_t)(a.NH + kh) * HS, *vb = kb + (size_t)a.NKV * HS;
    ab_load<HS, L::Q>(Qs, base + (size_t)h * HS, a.W, q0, a.T);
    ab_load<HS, L::Q>(dOs, a.dout + (size_t)b * a.T * a.C + (size_t)h * HS, a.C, q0, a.T);
    const size_t row0 = ((size_t)b * a.NH + h) * a.T;
    for (int r = threadIdx.x; r < AB_R; r += AB_THREADS) {
        ls[r] = q0 + r < a.T ? a.lse_in[row0 + q0 + r] : 0.0f;
        Ds[r] = q0 + r < a.T ? a.D[row0 + q0 + r] : 0.0f;
    }
    ab_acc dq[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dq[n], 0.0f);
    const int kend = min(a.T, q0 + AB_R);
    for (int k0 = ab_first_tile(a, b, q0); k0 < kend; k0 += AB_C) {
        __syncthreads();
        ab_load<HS, L::Q>(Ks, kb, a.W, k0, a.T);
        ab_load<HS, L::Q>(Vs, vb, a.W, k0, a.T);
        __syncthreads();
        ab_abt<HS, L::Q, L::Q, L::S>(Ss + 16 * w * L::S, Qs + 16 * w * L::Q, Ks);
        ab_abt<HS, L::Q, L::Q, L::S>(dPs + 16 * w * L::S, dOs + 16 * w * L::Q, Vs);
        __syncwarp();
        for (int e = lane; e < 16 * AB_C; e += 32) {
            const int rl = 16 * w + e / AB_C, j = e % AB_C, r = q0 + rl, c = k0 + j;
            float ds = 0.0f;
            if (ab_sees(a, b, r, c)) {
                const float p = expf(Ss[rl * L::S + j] * a.scale - ls[rl]);
                ds = p * (dPs[rl * L::S + j] - Ds[rl]) * a.scale;
            }
            dSs[rl * L::P + j] = __float2bfloat16_rn(ds);
        }
        __syncwarp();
        ab_pv<HS, L::P, L::Q>(dq, dSs + 16 * w * L::P, Ks);
    }
#pragma unroll
    for (int n = 0; n < HS / 16; n++)
        wmma::store_matrix_sync(Os + 16 * w * L::O + 16 * n, dq[n], L::O, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 16 * HS; e += 32) {
        const int rl = 16 * w + e / HS, d = e % HS, r = q0 + rl;
        if (r < a.T) a.dqkv[((size_t)b * a.T + r) * a.W + (size_t)h * HS + d] = Os[rl * L::O + d];
    }
}

/* grid (ceil(T / 64), NKV, B): dk, dv of key rows c0 .. c0 + 63 of kv head kh over the group's
 * query heads and, for each, the query tiles from the diagonal on: the score tile computed
 * transposed (key rows by the warps), dv += bf16(P)^T dO, dk += bf16(dS)^T Q */
template <int HS>
__global__ void __launch_bounds__(AB_THREADS) d_ab_dkv(fa_args a) {
    typedef ab_ld<HS> L;
    extern __shared__ __align__(128) unsigned char ab_sm[];
    bf16_t *Ks = (bf16_t *)ab_sm, *Vs = Ks + AB_R * L::Q, *Qs = Vs + AB_R * L::Q;
    bf16_t *dOs = Qs + AB_C * L::Q, *Pt = dOs + AB_C * L::Q, *dSt = Pt + AB_R * L::P;
    float *St = (float *)(dSt + AB_R * L::P), *dPt = St + AB_R * L::S, *Os = dPt + AB_R * L::S;
    float *ls = Os + AB_R * L::O, *Ds = ls + AB_C;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c0 = blockIdx.x * AB_R, kh = blockIdx.y, b = blockIdx.z;
    const float *base = a.qkv + (size_t)b * a.T * a.W;
    ab_load<HS, L::Q>(Ks, base + (size_t)(a.NH + kh) * HS, a.W, c0, a.T);
    ab_load<HS, L::Q>(Vs, base + (size_t)(a.NH + a.NKV + kh) * HS, a.W, c0, a.T);
    ab_acc dk[HS / 16], dv[HS / 16];
#pragma unroll
    for (int n = 0; n < HS / 16; n++) wmma::fill_fragment(dk[n], 0.0f), wmma::fill_fragment(dv[n], 0.0f);
    const int c_last = min(a.T, c0 + AB_R) - 1;
    for (int g = 0; g < a.group; g++) {
        const int h = kh * a.group + g;
        const size_t row0 = ((size_t)b * a.NH + h) * a.T;
        /* query rows past this tile's keys' examples or windows see none of them */
        for (int q0 = c0; q0 < a.T && fa_seg(a, b, q0) <= c_last; q0 += AB_C) {
            __syncthreads(); /* the last tile's Q, dO, P and dS are used */
            ab_load<HS, L::Q>(Qs, base + (size_t)h * HS, a.W, q0, a.T);
            ab_load<HS, L::Q>(dOs, a.dout + (size_t)b * a.T * a.C + (size_t)h * HS, a.C, q0, a.T);
            for (int r = threadIdx.x; r < AB_C; r += AB_THREADS) {
                ls[r] = q0 + r < a.T ? a.lse_in[row0 + q0 + r] : 0.0f;
                Ds[r] = q0 + r < a.T ? a.D[row0 + q0 + r] : 0.0f;
            }
            __syncthreads();
            ab_abt<HS, L::Q, L::Q, L::S>(St + 16 * w * L::S, Ks + 16 * w * L::Q, Qs);
            ab_abt<HS, L::Q, L::Q, L::S>(dPt + 16 * w * L::S, Vs + 16 * w * L::Q, dOs);
            __syncwarp();
            for (int e = lane; e < 16 * AB_C; e += 32) {
                const int cl = 16 * w + e / AB_C, rl = e % AB_C, c = c0 + cl, r = q0 + rl;
                float p = 0.0f, ds = 0.0f;
                if (ab_sees(a, b, r, c)) {
                    p = expf(St[cl * L::S + rl] * a.scale - ls[rl]);
                    ds = p * (dPt[cl * L::S + rl] - Ds[rl]) * a.scale;
                }
                Pt[cl * L::P + rl] = __float2bfloat16_rn(p);
                dSt[cl * L::P + rl] = __float2bfloat16_rn(ds);
            }
            __syncwarp();
            ab_pv<HS, L::P, L::Q>(dv, Pt + 16 * w * L::P, dOs);
            ab_pv<HS, L::P, L::Q>(dk, dSt + 16 * w * L::P, Qs);
        }
    }
    float *dst = a.dqkv + (size_t)b * a.T * a.W + (size_t)(a.NH + kh) * HS;
    for (int part = 0; part < 2; part++) { /* dk, then dv (NKV heads further along the row) */
#pragma unroll
        for (int n = 0; n < HS / 16; n++)
            wmma::store_matrix_sync(Os + 16 * w * L::O + 16 * n, part ? dv[n] : dk[n], L::O,
                                    wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 16 * HS; e += 32) {
            const int cl = 16 * w + e / HS, d = e % HS, c = c0 + cl;
            if (c < a.T) dst[(size_t)c * a.W + (size_t)part * a.NKV * HS + d] = Os[cl * L::O + d];
        }
        __syncwarp();
    }
}

/* ---- launches ---- */
template <int HS>
static void ab_forward(const fa_args &a, int B, const char *what) {
    typedef ab_ld<HS> L;
    const size_t smem = (size_t)(3 * AB_R * L::Q + AB_R * L::P) * sizeof(bf16_t) +
                        (size_t)(AB_R * L::S + AB_R * L::O) * sizeof(float);
    cu_note(cudaFuncSetAttribute(d_ab_forward<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem), what);
    dim3 grid((unsigned)((a.T + AB_R - 1) / AB_R), (unsigned)a.NH, (unsigned)B);
    d_ab_forward<HS><<<grid, AB_THREADS, smem, cu_stream>>>(a);
    CU_LAUNCHED(what);
}

template <int HS>
static void ab_backward(const fa_args &a, int B, const char *what) {
    typedef ab_ld<HS> L;
    const size_t n = (size_t)B * a.T * a.NH;
    d_fa_D<<<(unsigned)((n + 255) / 256), 256, 0, cu_stream>>>(a, HS);
    CU_LAUNCHED(what);
    const size_t sm = (size_t)(4 * AB_R * L::Q + 2 * AB_R * L::P) * sizeof(bf16_t) +
                      (size_t)(2 * AB_R * L::S + AB_R * L::O + 2 * AB_R) * sizeof(float);
    const unsigned tiles = (unsigned)((a.T + AB_R - 1) / AB_R);
    cu_note(cudaFuncSetAttribute(d_ab_dq<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm),
            what);
    d_ab_dq<HS><<<dim3(tiles, (unsigned)a.NH, (unsigned)B), AB_THREADS, sm, cu_stream>>>(a);
    CU_LAUNCHED(what);
    cu_note(cudaFuncSetAttribute(d_ab_dkv<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm),
            what);
    d_ab_dkv<HS><<<dim3(tiles, (unsigned)a.NKV, (unsigned)B), AB_THREADS, sm, cu_stream>>>(a);
    CU_LAUNCHED(what);
}

int cu_flash_attention_bf16_heads(int hd) { return hd == 16 || hd == 32 || hd == 64 || hd == 128; }

void cu_flash_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T, int C,
                                     int NH, int NKV, const int32_t *pos, int window) {
    if (B <= 0 || T <= 0) return;
    cu_enter();
    fa_args a = fa_make(qkv, B, T, C, NH, NKV, pos, window);
    a.out_w = out, a.lse = lse;
    const char *what = "flash_attention_forward_bf16";
    switch (C / NH) {
    case 16: ab_forward<16>(a, B, what); break;
    case 32: ab_forward<32>(a, B, what); break;
    case 64: ab_forward<64>(a, B, what); break;
    case 128: ab_forward<128>(a, B, what); break;
    default: cu_note(cudaErrorInvalidValue, "flash_attention_forward_bf16: head size"); break;
    }
}

void cu_flash_attention_backward_bf16(float *dqkv, float *scratch, const float *dout,
                                      const float *qkv, const float *out, const float *lse, int B,
                                      int T, int C, int NH, int NKV, const int32_t *pos,
                                      int window) {
    if (B <= 0 || T <= 0) return;
    cu_enter();
    fa_args a = fa_make(qkv, B, T, C, NH, NKV, pos, window);
    a.dout = dout, a.out = out, a.lse_in = lse, a.dqkv = dqkv, a.D = scratch;
    const char *what = "flash_attention_backward_bf16";
    switch (C / NH) {
    case 16: ab_backward<16>(a, B, what); break;
    case 32: ab_backward<32>(a, B, what); break;
    case 64: ab_backward<64>(a, B, what); break;
    case 128: ab_backward<128>(a, B, what); break;
    default: cu_note(cudaErrorInvalidValue, "flash_attention_backward_bf16: head size"); break;
    }
}
