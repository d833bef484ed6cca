/* test_backend_nf4.h: the tests of the NF4 ops (kernels/nf4.h), part of tests/test_backend.c,
 * which includes it once after its helpers. Each size is odd for the codec: one value, 7 (one
 * short block), 63, 65 (a full block and one value), 1003, 16411 (257 blocks: two groups, the
 * second of one short block) and 100003 (seven groups; the host routine's OpenMP path). The op's storage is
 * compared byte for byte with the host routine's (hpt_nf4_quantize; on the CPU backend that is
 * the op itself, so there the test checks the table's plumbing, and on a GPU the kernels), and
 * the op's widened values bit for bit with each value's formula, written here from nf4.h's rules:
 * NF4[code] * a'_b, code the nibble, a'_b hpt_nf4_block_absmax. test_nf4 checks the host
 * routine against an independent numpy implementation of the paper. */
#ifndef HPT_TEST_BACKEND_NF4_H
#define HPT_TEST_BACKEND_NF4_H

#include "kernels/nf4.h"

static const size_t k_nf4_sizes[] = {1, 7, 63, 65, 1003, 16411, 100003};
#define NF4_NSIZES (sizeof k_nf4_sizes / sizeof k_nf4_sizes[0])

/* n values with heavy tails (cubes), a zero block and a few outliers where there is room */
static void nf4_inputs(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float u = frand();
        x[i] = 0.05f * u * u * u + 0.01f * frand();
    }
    if (n >= 128) memset(x + 64, 0, 64 * sizeof(float));
    for (size_t i = 1000; i < n; i += 7919) x[i] = 3.0f * frand();
}

static double t_nf4_quantize(void) {
    size_t bad = 0;
    for (size_t k = 0; k < NF4_NSIZES; k++) {
        size_t n = k_nf4_sizes[k], nbytes = hpt_nf4_bytes(n);
        float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
        unsigned char *ref = malloc(nbytes), *got = malloc(nbytes);
        nf4_inputs(x, n);
        hpt_nf4_quantize(ref, x, n);
        unsigned char *d = dput(NULL, nbytes);
        g_be->nf4_quantize(d, dput(x, n * sizeof(float)), n);
        dget(got, d, nbytes);
        size_t diff = 0;
        for (size_t i = 0; i < nbytes; i++) diff += got[i] != ref[i];
        CHECK_MSG(diff == 0, "%s: nf4_quantize of %zu values: %zu of %zu bytes differ from the host "
                  "routine's", g_be->name, n, diff, nbytes);
        bad += diff;
        hpt_nf4_dequantize(y, got, n); /* the op's storage, widened on the host: compared too */
        emit(y, n);
        free(x), free(y), free(ref), free(got);
        dfree_all();
    }
    return (double)bad;
}

static double t_nf4_dequantize(void) {
    size_t bad = 0;
    for (size_t k = 0; k < NF4_NSIZES; k++) {
        size_t n = k_nf4_sizes[k], nbytes = hpt_nf4_bytes(n);
        size_t nb = (n + HPT_NF4_BLOCK - 1) / HPT_NF4_BLOCK, ng = (nb + HPT_NF4_GROUP - 1) / HPT_NF4_GROUP;
        float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float)),
              *h = malloc(n * sizeof(float));
        unsigned char *st = malloc(nbytes);
        nf4_inputs(x, n);
        hpt_nf4_quantize(st, x, n);
        float *d = dput(NULL, n * sizeof(float));
        g_be->nf4_dequantize(d, dput(st, nbytes), n);
        dget(y, d, n * sizeof(float));
        hpt_nf4_dequantize(h, st, n);
        const unsigned char *codes = st + 4 + 4 * ng + nb;
        size_t diff = 0, diff_host = 0;
        for (size_t i = 0; i < n; i++) {
            int c = codes[i / 2] >> (i % 2 ? 0 : 4) & 15;
            float want = hpt_nf4_values[c] * hpt_nf4_block_absmax(st, n, i / HPT_NF4_BLOCK);
            diff += memcmp(&y[i], &want, 4) != 0;
            diff_host += memcmp(&y[i], &h[i], 4) != 0;
        }
        CHECK_MSG(diff == 0 && diff_host == 0, "%s: nf4_dequantize of %zu values: %zu differ from "
                  "NF4[code] * a', %zu from the host routine", g_be->name, n, diff, diff_host);
        bad += diff + diff_host;
        emit(y, n);
        free(x), free(y), free(h), free(st);
        dfree_all();
    }
    return (double)bad;
}

#endif
