/* test_nf4.c REF: the NF4 codec (model/nf4.h, --base-weights nf4) against tests/
 * make_ref_nf4.py, an independent numpy implementation from the QLoRA paper: every stored byte
 * (the mean, the groups' scales, the int8 absmax constants, the packed codes) and every
 * dequantised value bit for bit; the dequantisation error of each value within half the code
 * spacing on its side times the block's absmax, plus the double quantisation's absmax error
 * times the code's magnitude; each absmax constant within half an FP8 step (of its distance
 * from the mean, in its group's scale). */
#include "testlib.h"
#include "kernels/nf4.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rd(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_nf4 REF\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    CHECK_MSG(f != NULL, "cannot open %s", argv[1]);
    if (!f) return t_done("test_nf4");
    char magic[4];
    int32_t nc = 0;
    CHECK(rd(f, magic, 4) && !memcmp(magic, "NF4R", 4) && rd(f, &nc, 4) && nc > 0);
    double v[16];
    for (int k = 0; k < 16; k++) v[k] = (double)hpt_nf4_values[k];
    size_t codes_total = 0, codes_same = 0, consts_total = 0, consts_same = 0, deq_same = 0,
           n_total = 0, over = 0;
    double worst_ratio = 0.0, worst_abs = 0.0, worst_const = 0.0;
    for (int c = 0; c < nc; c++) {
        int64_t n = 0, nbytes = 0;
        CHECK(rd(f, &n, 8) && n > 0);
        float *x = malloc((size_t)n * 4), *deq = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
        CHECK(rd(f, x, (size_t)n * 4) && rd(f, &nbytes, 8));
        CHECK_MSG((size_t)nbytes == hpt_nf4_bytes((size_t)n), "case %d: %lld bytes, hpt_nf4_bytes %zu",
                  c, (long long)nbytes, hpt_nf4_bytes((size_t)n));
        unsigned char *ref = malloc((size_t)nbytes), *st = calloc(1, hpt_nf4_bytes((size_t)n));
        CHECK(rd(f, ref, (size_t)nbytes) && rd(f, deq, (size_t)n * 4));
        hpt_nf4_quantize(st, x, (size_t)n);
        size_t nb = ((size_t)n + 63) / 64, ng = (nb + 255) / 256, head = 4 + 4 * ng + nb;
        consts_total += 1 + ng + nb; /* the mean, the scales, the int8 constants */
        consts_same += !memcmp(st, ref, 4);
        for (size_t g = 0; g < ng; g++) consts_same += !memcmp(st + 4 + 4 * g, ref + 4 + 4 * g, 4);
        for (size_t b = 0; b < nb; b++) consts_same += st[4 + 4 * ng + b] == ref[4 + 4 * ng + b];
        for (int64_t i = 0; i < n; i++) {
            int sh = i % 2 ? 0 : 4;
            codes_same += (st[head + i / 2] >> sh & 15) == (ref[head + i / 2] >> sh & 15);
        }
        codes_total += (size_t)n;
        CHECK_MSG(!memcmp(st, ref, (size_t)nbytes), "case %d (n %lld): the storage differs from the "
                  "reference's", c, (long long)n);
        hpt_nf4_dequantize(got, st, (size_t)n);
        for (int64_t i = 0; i < n; i++) deq_same += !memcmp(&got[i], &deq[i], 4);
        n_total += (size_t)n;
        float s0f, meanf;
        memcpy(&meanf, st, 4);
        double mean = (double)meanf;
        for (size_t b = 0; b < nb; b++) {
            double a = 0.0;
            for (int64_t i = (int64_t)b * 64; i < n && i < (int64_t)b * 64 + 64; i++)
                a = fmax(a, fabs((double)x[i]));
            double a2 = (double)hpt_nf4_block_absmax(st, (size_t)n, b);
            memcpy(&s0f, st + 4 + 4 * (b / 256), 4);
            double s0 = (double)s0f;
            /* half an FP8 E4M3 step of (a - mean) / scale: 2^-4 of it, 2^-10 among subnormals */
            double e = fabs(a - a2), r = s0 > 0 ? fabs(a - mean) / s0 : 0.0;
            double cb = s0 * fmax(r / 16, 1.0 / 1024) * (1 + 1e-5) + 0x1p-23 * fabs(a2) + 1e-30;
            if (e > cb) over++;
            if (e / cb > worst_const) worst_const = e / cb;
            for (int64_t i = (int64_t)b * 64; i < n && i < (int64_t)b * 64 + 64; i++) {
                int k = st[head + i / 2] >> (i % 2 ? 0 : 4) & 15;
                /* the spacing on x's side of its code value, halved */
                double xn = a > 0 ? (double)x[i] / a : 0.0;
                double gap = xn >= v[k] ? (k < 15 ? v[k + 1] - v[k] : 0.0) : (k > 0 ? v[k] - v[k - 1] : 0.0);
                double gi = (double)got[i], err = fabs((double)x[i] - gi);
                double bound = a * gap / 2 * (1 + 1e-5) + fabs(v[k]) * e + 1e-7 * fabs(gi) + 1e-30;
                if (err > bound) over++;
                if (err / bound > worst_ratio) worst_ratio = err / bound;
                if (a > 0 && e == 0 && err / a > worst_abs) worst_abs = err / a;
            }
        }
        free(x), free(deq), free(got), free(ref), free(st);
    }
    fclose(f);
    CHECK_MSG(codes_same == codes_total && consts_same == consts_total && deq_same == n_total,
              "codes %zu of %zu, constants %zu of %zu, dequantised %zu of %zu identical",
              codes_same, codes_total, consts_same, consts_total, deq_same, n_total);
    CHECK_MSG(over == 0, "%zu values or constants beyond their bound", over);
    printf("nf4: %d cases: codes %zu/%zu, constants (means, scales, FP8 absmaxes) %zu/%zu, "
           "dequantised %zu/%zu identical to the reference; each value's error at most %.4f of "
           "its bound (absmax x half the code spacing on its side + |code| x the absmax's "
           "error; %.4f of the absmax in blocks whose absmax is exact); absmax constants' errors at most "
           "%.4f of half an FP8 step\n", nc, codes_same, codes_total, consts_same, consts_total,
           deq_same, n_total, worst_ratio, worst_abs, worst_const);
    return t_done("test_nf4");
}
