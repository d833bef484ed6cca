/* nf4.h: 4-bit NormalFloat (NF4) with double-quantised scales, as QLoRA defines it (Dettmers et
 * al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs"): the frozen base's codec for
 * --base-weights nf4 (model/frozen.c, docs/lora.md). These are plain C on host memory: the CPU
 * backend's nf4_quantize and nf4_dequantize ops (kernels/backend.h); the CUDA backend's kernels
 * (kernels/cuda/nf4.cu) give their bits on device memory. Callers outside kernels/ go through
 * the ops.
 *
 * n values x, flattened, are cut into blocks of 64 (the last may be short). Block b has absmax
 * a_b = max |x|; each value's code is the index of the nearest of the 16 NF4 values to x / a_b
 * (0 when a_b is 0): the number of midpoints (c[j] + c[j+1]) / 2 strictly below it (a tie goes
 * to the lower code). Two codes a byte, the even element in the high nibble (bitsandbytes').
 * Double quantisation: mean = the absmaxes' mean (summed in order in double, then rounded to
 * fp32); c_b = a_b - mean; in groups of 256 blocks, scale_g = max |c_b| / 448 and q_b = c_b /
 * scale_g (clamped to +-448; 0 when scale_g is 0) as an 8-bit float, FP8 E4M3 (the paper's
 * "8-bit Floats"; round to nearest, ties to an even mantissa).
 * Dequantisation: a'_b = fp32(double(q_b) * scale_g + mean) and x' = c[code] * a'_b.
 *
 * Storage of n values (hpt_nf4_bytes(n), 4-aligned where dst is): fp32 mean, fp32 scale[ng],
 * fp8 q[nb], uint8 codes[(n + 1) / 2]; nb = ceil(n / 64), ng = ceil(nb / 256). tests/
 * make_ref_nf4.py is an independent implementation from the paper (test_nf4: bit for bit). */
#ifndef HPT_KERNELS_NF4_H
#define HPT_KERNELS_NF4_H
#include <stddef.h>

#define HPT_NF4_BLOCK 64
#define HPT_NF4_GROUP 256

/* The 16 NF4 values (QLoRA's appendix; bitsandbytes' table), ascending, c[7] = 0: one list for
 * the host's table and the CUDA kernels' constant one. */
#define HPT_NF4_VALUES_INIT                                                                        \
    {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,                    \
     -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,                   \
     0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,      \
     0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f}
extern const float hpt_nf4_values[16];
/* Bytes of n values' storage. */
size_t hpt_nf4_bytes(size_t n);
void hpt_nf4_quantize(unsigned char *dst, const float *x, size_t n);
void hpt_nf4_dequantize(float *x, const unsigned char *src, size_t n);
/* The dequantised absmax a'_b of block b (for tests and bounds). */
float hpt_nf4_block_absmax(const unsigned char *src, size_t n, size_t b);
#endif
