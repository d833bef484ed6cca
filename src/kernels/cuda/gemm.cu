/* gemm.cu: matrix products through cuBLAS, the linear layers, and int8 weights.
 * The table's GEMM is row-major; cuBLAS is column-major, where a row-major X (ld) reads as X^T:
 * C^T (N,M) = op(B)^T op(A)^T, so the call swaps A and B and keeps each one's transposition.
 * fp32 GEMMs run in fp32 (CUBLAS_PEDANTIC_MATH, backend.cu) unless TF32 was asked for; the bf16
 * GEMM takes bf16 A and B and accumulates and writes fp32 (cublasGemmEx, CUBLAS_COMPUTE_32F).
 * cuBLAS gives the same bits for the same call on the same GPU with its fixed workspace; the
 * bias column sums run one thread per column over the rows in order (no atomics). */
#include "kernels/cuda/cu_common.cuh"

static cublasOperation_t op_of(char t) { return t == 'T' || t == 't' ? CUBLAS_OP_T : CUBLAS_OP_N; }

void cu_gemm(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
             int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    cu_enter();
    cu_note_blas(cublasSgemm_64(cu_blas, op_of(tb), op_of(ta), N, M, K, &alpha, B, ldb, A, lda,
                                &beta, C, ldc), "cublasSgemm");
}

extern "C" void hpt_cuda_gemm_bf16(char ta, char tb, int64_t M, int64_t N, int64_t K,
                                   float alpha, const uint16_t *A, int64_t lda, const uint16_t *B,
                                   int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    cu_enter();
    cu_note_blas(cublasGemmEx_64(cu_blas, op_of(tb), op_of(ta), N, M, K, &alpha, B, CUDA_R_16BF,
                                 ldb, A, CUDA_R_16BF, lda, &beta, C, CUDA_R_32F, ldc,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx (bf16)");
}

/* out (N,OC) = bias (OC) per row, or += it */
__global__ void d_bias_rows(float *out, const float *bias, int64_t N, int64_t OC, int add) {
    CU_FOR(i, (size_t)(N * OC)) {
        float b = bias[i % (size_t)OC];
        out[i] = add ? out[i] + b : b;
    }
}

void cu_matmul_forward(float *out, const float *inp, const float *w, const float *bias, int64_t N,
                       int64_t C, int64_t OC, int accumulate) {
    cu_enter();
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) {
        d_bias_rows<<<cu_grid((size_t)(N * OC)), CU_T, 0, cu_stream>>>(out, bias, N, OC, accumulate);
        CU_LAUNCHED("matmul_forward bias");
        beta = 1.0f;
    }
    cu_gemm('N', 'T', N, OC, C, 1.0f, inp, C, w, C, beta, out, OC);
}

/* dbias (OC) += column sums of dout (N,OC): one thread per column, rows in order (where OC is
 * beyond colsum.cu's scratch) */
__global__ void d_col_sums(float *dbias, const float *dout, int64_t N, int64_t OC) {
    int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (j >= OC) return;
    float s = dbias[j];
    for (int64_t i = 0; i < N; i++) s += dout[i * OC + j];
    dbias[j] = s;
}

void cu_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout, const float *inp,
                        const float *w, int64_t N, int64_t C, int64_t OC, int accumulate_dinp) {
    cu_enter();
    cu_gemm('N', 'N', N, C, OC, 1.0f, dout, OC, w, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C);
    cu_gemm('T', 'N', OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C);
    if (dbias && !cu_colsum(CU_COLSUM_BIAS, dbias, NULL, dout, NULL, NULL, NULL, N, OC)) {
        d_col_sums<<<cu_grid((size_t)OC), CU_T, 0, cu_stream>>>(dbias, dout, N, OC);
        CU_LAUNCHED("matmul_backward dbias");
    }
}

/* ---- bf16 operands (--matmul bf16; the CPU's k_gemm_bf16, kernels/cpu/gemm.c) ----
 * C's tiles (mb, nb) over K panels of kt: each panel's two operands rounded to bf16 (cu_bf16_rne,
 * nearest even, the CPU's bits) into the workspace (HPT_MM_BF16_WS_BYTES), then
 * hpt_cuda_gemm_bf16 (cublasGemmEx, CUBLAS_COMPUTE_32F) adds the panel's product into C's tile,
 * beta for the first panel and 1 after. Any alpha and beta. */
/* dst (rows, cols) dense = the rectangle of src (ld) at (r0, c0), rounded to bf16 */
__global__ void d_round_rect(uint16_t *dst, const float *src, int64_t ld, int64_t r0, int64_t c0,
                             int64_t rows, int64_t cols) {
    CU_FOR(i, (size_t)(rows * cols)) {
        int64_t r = (int64_t)i / cols, c = (int64_t)i % cols;
        dst[i] = cu_bf16_rne(src[(r0 + r) * ld + c0 + c]);
    }
}

static void round_rect(uint16_t *dst, const float *src, int64_t ld, int64_t r0, int64_t c0,
                       int64_t rows, int64_t cols) {
    d_round_rect<<<cu_grid((size_t)(rows * cols)), CU_T, 0, cu_stream>>>(dst, src, ld, r0, c0,
                                                                         rows, cols);
    CU_LAUNCHED("gemm_bf16 operand rounding");
}

void cu_gemm_bf16(char ta, char tb, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                  int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc,
                  void *ws) {
    if (M == 0 || N == 0) return;
    cu_enter();
    if (K <= 0) {
        cu_gemm(ta, tb, M, N, 0, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const int at = ta == 'T' || ta == 't', bt = tb == 'T' || tb == 't';
    const int64_t R = (int64_t)(HPT_MM_BF16_WS_BYTES / sizeof(uint16_t));
    const int64_t kt = K < 1024 ? K : 1024, rows = R / kt;
    const int64_t mb = M < rows / 2 ? M : rows / 2;
    const int64_t nb = N < rows - mb ? N : rows - mb;
    /* op(A)'s panel (mb, kt), or (kt, mb) transposed; op(B)'s (kt, nb), or (nb, kt) */
    uint16_t *pa = (uint16_t *)ws, *pb = pa + mb * kt;
    for (int64_t m0 = 0; m0 < M; m0 += mb) {
        const int64_t m = M - m0 < mb ? M - m0 : mb;
        for (int64_t n0 = 0; n0 < N; n0 += nb) {
            const int64_t n = N - n0 < nb ? N - n0 : nb;
            for (int64_t k0 = 0; k0 < K; k0 += kt) {
                const int64_t k = K - k0 < kt ? K - k0 : kt;
                if (at) round_rect(pa, A, lda, k0, m0, k, m);
                else round_rect(pa, A, lda, m0, k0, m, k);
                if (bt) round_rect(pb, B, ldb, n0, k0, n, k);
                else round_rect(pb, B, ldb, k0, n0, k, n);
                hpt_cuda_gemm_bf16(ta, tb, m, n, k, alpha, pa, at ? m : k, pb, bt ? k : n,
                                   k0 == 0 ? beta : 1.0f, C + m0 * ldc + n0, ldc);
            }
        }
    }
}

void cu_matmul_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                            int64_t N, int64_t C, int64_t OC, int accumulate, void *ws) {
    cu_enter();
    float beta = accumulate ? 1.0f : 0.0f;
    if (bias) { /* fp32, before the products, as on the CPU */
        d_bias_rows<<<cu_grid((size_t)(N * OC)), CU_T, 0, cu_stream>>>(out, bias, N, OC,
                                                                       accumulate);
        CU_LAUNCHED("matmul_forward_bf16 bias");
        beta = 1.0f;
    }
    cu_gemm_bf16('N', 'T', N, OC, C, 1.0f, inp, C, w, C, beta, out, OC, ws);
}

void cu_matmul_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int64_t N, int64_t C, int64_t OC,
                             int accumulate_dinp, void *ws) {
    cu_enter();
    cu_gemm_bf16('N', 'N', N, C, OC, 1.0f, dout, OC, w, C, accumulate_dinp ? 1.0f : 0.0f, dinp, C,
                 ws);
    cu_gemm_bf16('T', 'N', OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C, ws);
    if (dbias && !cu_colsum(CU_COLSUM_BIAS, dbias, NULL, dout, NULL, NULL, NULL, N, OC)) {
        d_col_sums<<<cu_grid((size_t)OC), CU_T, 0, cu_stream>>>(dbias, dout, N, OC);
        CU_LAUNCHED("matmul_backward_bf16 dbias");
    }
}

/* ---- int8 weights: one block per output channel ---- */
__global__ void d_q8w_quantize(int8_t *q, float *scale, const float *w, int64_t C) {
    __shared__ float sh[32];
    const int64_t o = blockIdx.x;
    const float *wr = w + o * C;
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) amax = fmaxf(amax, fabsf(wr[i]));
    amax = cu_block_max(amax, sh, 0.0f);
    float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    if (threadIdx.x == 0) scale[o] = amax / 127.0f;
    for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
        float v = rintf(wr[i] * inv);
        q[o * C + i] = (int8_t)fmaxf(-127.0f, fminf(127.0f, v));
    }
}

void cu_q8w_quantize(int8_t *q, float *scale, const float *w, int64_t OC, int64_t C) {
    if (OC <= 0) return;
    cu_enter();
    d_q8w_quantize<<<(unsigned)OC, CU_T, 0, cu_stream>>>(q, scale, w, C);
    CU_LAUNCHED("q8w_quantize");
}

__global__ void d_q8w_dequantize(float *w, const int8_t *q, const float *scale, int64_t OC, int64_t C) {
    CU_FOR(i, (size_t)(OC * C)) w[i] = (float)q[i] * scale[i / (size_t)C];
}

void cu_q8w_dequantize(float *w, const int8_t *q, const float *scale, int64_t OC, int64_t C) {
    if (OC * C <= 0) return;
    cu_enter();
    d_q8w_dequantize<<<cu_grid((size_t)(OC * C)), CU_T, 0, cu_stream>>>(w, q, scale, OC, C);
    CU_LAUNCHED("q8w_dequantize");
}

/* HPT_Q8W_TILE output channels at a time dequantised into scratch, then the GEMM on them (the
 * fp32 copy of a weight is never larger than one tile, as on the CPU). */
void cu_q8w_matmul_forward(float *out, const float *inp, const int8_t *q, const float *scale,
                           const float *bias, int64_t N, int64_t C, int64_t OC, int accumulate,
                           float *scratch) {
    cu_enter();
    for (int64_t o0 = 0; o0 < OC; o0 += HPT_Q8W_TILE) {
        int64_t no = OC - o0 < HPT_Q8W_TILE ? OC - o0 : HPT_Q8W_TILE;
        cu_q8w_dequantize(scratch, q + o0 * C, scale + o0, no, C);
        cu_gemm('N', 'T', N, no, C, 1.0f, inp, C, scratch, C, accumulate ? 1.0f : 0.0f, out + o0, OC);
    }
    if (bias) {
        d_bias_rows<<<cu_grid((size_t)(N * OC)), CU_T, 0, cu_stream>>>(out, bias, N, OC, 1);
        CU_LAUNCHED("q8w_matmul_forward bias");
    }
}
