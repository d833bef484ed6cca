/* colsum.cu: sums over the rows of a (N, C) gradient, column by column (the bias gradients, the
 * norm weight gradients), across the whole GPU and deterministic. Stage 1: a block per (32
 * columns, chunk of rows); its 8 row lanes each sum every 8th row of the chunk in order, then
 * lane 0 adds the 8 lane sums in lane order into the chunk's partial (cu_colred). Stage 2: a
 * thread per column adds the chunks' partials in chunk order to the gradient (which it
 * accumulates into, as the CPU's ops do). The same inputs give the same bits on every run; the
 * CPU's order (row by row) is another, so the two agree to rounding (test_backend, test_cuda).
 * The first GPU run measured the one-thread-per-column kernels these replace at 40% of gpt2-124m's
 * step (docs/cuda.md). */
#include "kernels/cuda/cu_common.cuh"

#define CS_COLS 32
#define CS_LANES 8
#define CS_MAX_CHUNKS 64
#define CS_MIN_ROWS 64 /* rows a chunk sums at least */

template <int KIND>
__device__ inline void cs_term(float &a, float &b, float d, const float *inp, const float *mean,
                               const float *rstd, int64_t i, int64_t ic) {
    if (KIND == CU_COLSUM_BIAS) {
        a += d;
    } else if (KIND == CU_COLSUM_LAYERNORM) { /* dw += d (x - mean) rstd, db += d */
        a += d * (inp[ic] - mean[i]) * rstd[i];
        b += d;
    } else { /* RMSNorm: dw += d x rstd */
        a += d * inp[ic] * rstd[i];
    }
}

/* grid (ceil(C / 32), chunks), block (32, 8) */
template <int KIND>
__global__ void d_colsum_part(float *part, const float *dout, const float *inp, const float *mean,
                              const float *rstd, int64_t N, int64_t C, int64_t rows, int chunks) {
    __shared__ float sh[2][CS_LANES][CS_COLS];
    const int64_t c = (int64_t)blockIdx.x * CS_COLS + threadIdx.x;
    const int chunk = blockIdx.y;
    const int64_t r0 = (int64_t)chunk * rows, r1 = r0 + rows < N ? r0 + rows : N;
    float a = 0.0f, b = 0.0f;
    if (c < C)
        for (int64_t i = r0 + threadIdx.y; i < r1; i += CS_LANES)
            cs_term<KIND>(a, b, dout[i * C + c], inp, mean, rstd, i, i * C + c);
    sh[0][threadIdx.y][threadIdx.x] = a;
    sh[1][threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float s0 = 0.0f, s1 = 0.0f;
        for (int l = 0; l < CS_LANES; l++) s0 += sh[0][l][threadIdx.x], s1 += sh[1][l][threadIdx.x];
        part[(size_t)chunk * C + c] = s0;
        if (KIND == CU_COLSUM_LAYERNORM) part[((size_t)chunks + chunk) * C + c] = s1;
    }
}

__global__ void d_colsum_finish(float *out0, float *out1, const float *part, int64_t C, int chunks) {
    CU_FOR(c, (size_t)C) {
        float s = out0[c];
        for (int k = 0; k < chunks; k++) s += part[(size_t)k * C + c];
        out0[c] = s;
        if (out1) {
            float t = out1[c];
            for (int k = 0; k < chunks; k++) t += part[((size_t)chunks + k) * C + c];
            out1[c] = t;
        }
    }
}

bool cu_colsum(int kind, float *out0, float *out1, const float *dout, const float *inp,
               const float *mean, const float *rstd, int64_t N, int64_t C) {
    const int64_t per = kind == CU_COLSUM_LAYERNORM ? 2 * C : C; /* partial floats per chunk */
    if (per <= 0 || per > (int64_t)CU_COLRED_FLOATS) return false; /* the caller's row loop */
    if (N <= 0) return true;
    int64_t chunks = (N + CS_MIN_ROWS - 1) / CS_MIN_ROWS;
    if (chunks > CS_MAX_CHUNKS) chunks = CS_MAX_CHUNKS;
    if (chunks > (int64_t)CU_COLRED_FLOATS / per) chunks = (int64_t)CU_COLRED_FLOATS / per;
    const int64_t rows = (N + chunks - 1) / chunks;
    chunks = (N + rows - 1) / rows; /* no empty chunk */
    cu_enter();
    const dim3 grid((unsigned)((C + CS_COLS - 1) / CS_COLS), (unsigned)chunks), block(CS_COLS, CS_LANES);
    switch (kind) {
    case CU_COLSUM_BIAS:
        d_colsum_part<CU_COLSUM_BIAS><<<grid, block, 0, cu_stream>>>(cu_colred, dout, inp, mean, rstd, N, C, rows, (int)chunks);
        break;
    case CU_COLSUM_LAYERNORM:
        d_colsum_part<CU_COLSUM_LAYERNORM><<<grid, block, 0, cu_stream>>>(cu_colred, dout, inp, mean, rstd, N, C, rows, (int)chunks);
        break;
    default:
        d_colsum_part<CU_COLSUM_RMSNORM><<<grid, block, 0, cu_stream>>>(cu_colred, dout, inp, mean, rstd, N, C, rows, (int)chunks);
        break;
    }
    CU_LAUNCHED("column sums (partials)");
    d_colsum_finish<<<cu_grid((size_t)C), CU_T, 0, cu_stream>>>(out0, out1, cu_colred, C, (int)chunks);
    CU_LAUNCHED("column sums");
    return true;
}
