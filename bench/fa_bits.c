/* fa_bits.c: do two builds of the flash attention kernels give the same bits? Links the
 * current kernels (k_flash_attention_*) and an older object whose symbols were renamed to
 * old_fwd / old_bwd, runs both on the same random inputs over 9 shapes (T 1 to 256, heads of
 * 40, 64 and 128, GQA with 2 and 4 query heads per kv head; the backward of both from the
 * old forward's out and lse) and counts the values of out, lse and dqkv whose bits differ.
 * Exit status 1 when any does. Used for the sixth pass's changes (docs/benchmarks.md), which
 * had to keep every bit:
 *
 *   git show REV:src/kernels/cpu/flash_attention.c > /tmp/fa_old.c
 *   F="-O3 -march=native -fno-math-errno -fno-trapping-math -std=c11 -D_GNU_SOURCE -fopenmp"
 *   F="$F -Iinclude -Isrc"
 *   cc $F -c /tmp/fa_old.c -o /tmp/fa_old.o
 *   cc $F -c src/kernels/cpu/flash_attention.c -o /tmp/fa_new.o
 *   objcopy --redefine-sym k_flash_attention_forward=old_fwd \
 *           --redefine-sym k_flash_attention_backward=old_bwd /tmp/fa_old.o /tmp/fa_old_r.o
 *   cc -O2 -fopenmp bench/fa_bits.c /tmp/fa_old_r.o /tmp/fa_new.o -lmvec -lm -o /tmp/fa_bits
 *   OMP_NUM_THREADS=2 /tmp/fa_bits
 *
 * (-march=haswell or -march=x86-64 in F for the AVX2 and SSE2 paths.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void k_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                               int NH, int NKV);
void k_flash_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                                const float *out, const float *lse, int B, int T, int C, int NH,
                                int NKV);
void old_fwd(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int NKV);
void old_bwd(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *out,
             const float *lse, int B, int T, int C, int NH, int NKV);

static float *randv(size_t n, uint32_t seed) {
    float *p = malloc(n * sizeof *p);
    if (!p) exit(2);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 2.0f;
    }
    return p;
}

static size_t differ(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(a + i, b + i, sizeof(float)) != 0;
    return d;
}

int main(void) {
    static const int cfg[][5] = {{2, 256, 768, 12, 12}, {1, 100, 768, 12, 12}, {2, 65, 192, 3, 3},
                                 {1, 1, 128, 2, 2},     {2, 130, 512, 8, 2},   {1, 77, 256, 2, 1},
                                 {1, 64, 384, 3, 3},    {1, 200, 256, 2, 2},   {1, 70, 80, 2, 2}};
    int bad = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        const int B = cfg[c][0], T = cfg[c][1], C = cfg[c][2], NH = cfg[c][3], NKV = cfg[c][4];
        const int hs = C / NH, W = C + 2 * NKV * hs;
        size_t nq = (size_t)B * T * W, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
        float *qkv = randv(nq, 1), *dout = randv(no, 2), *d1 = randv(nq, 3), *d2 = randv(nq, 3);
        float *o1 = calloc(no, 4), *o2 = calloc(no, 4), *l1 = calloc(nl, 4), *l2 = calloc(nl, 4);
        float *s1 = calloc(nl, 4), *s2 = calloc(nl, 4);
        if (!o1 || !o2 || !l1 || !l2 || !s1 || !s2) return 2;
        old_fwd(o1, l1, qkv, B, T, C, NH, NKV);
        k_flash_attention_forward(o2, l2, qkv, B, T, C, NH, NKV);
        old_bwd(d1, s1, dout, qkv, o1, l1, B, T, C, NH, NKV);
        k_flash_attention_backward(d2, s2, dout, qkv, o1, l1, B, T, C, NH, NKV);
        size_t a = differ(o1, o2, no), b = differ(l1, l2, nl), d = differ(d1, d2, nq);
        printf("B=%d T=%d C=%d NH=%d NKV=%d hs=%d: out %zu, lse %zu, dqkv %zu values differ\n", B,
               T, C, NH, NKV, hs, a, b, d);
        bad |= a + b + d > 0;
        free(qkv), free(dout), free(d1), free(d2), free(o1), free(o2), free(l1), free(l2);
        free(s1), free(s2);
    }
    return bad;
}
