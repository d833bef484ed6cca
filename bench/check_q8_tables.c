/* check_q8_tables.c: exhaustive check of the 8-bit encoder's step tables (kernels/cpu/simd.h):
 * for every one of the 2^32 float bit patterns whose bucket is not marked slow, the step
 * table's code equals q8_encode_lut's, for both maps; and, where the CPU has AVX-512 VBMI, the
 * gather-free encoder's (q8enc.c) code equals q8_encode_lut's for every float of magnitude below 2
 * (which every value divided by its block's absmax is), and it flags every block holding
 * another value. Too long for a unit test (a minute on
 * two threads); tests/test_simd.c samples every bucket and every threshold instead.
 * Build: cc -O3 -march=native -fopenmp -Iinclude -Isrc bench/check_q8_tables.c
 *        build/libhptrain.a -ldnnl -lpcre2-8 -lcjson -lmvec -lm */
#include "kernels/cpu/q8.h"
#include "kernels/cpu/simd.h"

#include <stdio.h>

int main(void) {
    int fails = 0;
    for (int sgn = 0; sgn < 2; sgn++) {
        float map[256];
        k_q8_map(map, sgn);
        const int32_t *lut = k_q8_lut_of(sgn);
        const uint32_t *thr = k_q8_thr_of(lut);
        long differ = 0, checked = 0;
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : differ, checked)
        for (uint32_t key = 0; key < 65536; key++) {
            uint32_t e = thr[key];
            if (e >> 24 == 2) continue;
            int c0 = (int)(e & 0xffu), d = (int8_t)(e >> 24);
            uint32_t t = e >> 8 & 0xffffu;
            for (uint32_t low = 0; low < 65536; low++) {
                uint32_t bits = key << 16 | low;
                float x;
                memcpy(&x, &bits, sizeof x);
                differ += q8_encode_lut(x, map, lut) != c0 + (low >= t ? d : 0);
            }
            checked += 65536;
        }
        printf("map %s: %ld floats checked, %ld codes differ\n", sgn ? "signed" : "unsigned",
               checked, differ);
        fails += differ != 0;
        const k_q8_enc *enc = k_simd_vbmi ? k_q8_enc_of(lut) : NULL;
        if (!enc) {
            printf("map %s: no gather-free encoder here (%s)\n", sgn ? "signed" : "unsigned",
                   k_simd_vbmi ? "the map does not fit it" : "no VBMI");
            continue;
        }
        long ediffer = 0, eflag = 0;
#pragma omp parallel for schedule(dynamic, 64) reduction(+ : ediffer, eflag)
        for (uint32_t key = 0; key < 65536; key++) {
            float x[256];
            uint8_t got[256];
            for (uint32_t blk = 0; blk < 256; blk++) {
                for (uint32_t i = 0; i < 256; i++) {
                    uint32_t bits = key << 16 | blk << 8 | i;
                    memcpy(&x[i], &bits, sizeof x[i]);
                }
                int slow = k_q8_encode_vbmi(got, x, 1.0f, 256, enc);
                int finite = (key & 0x4000u) == 0; /* |x| < 2: exponent below 128 */
                eflag += slow != !finite;
                if (finite)
                    for (int i = 0; i < 256; i++) ediffer += got[i] != q8_encode_lut(x[i], map, lut);
            }
        }
        printf("map %s: gather-free encoder: %ld codes differ, %ld blocks flagged wrongly\n",
               sgn ? "signed" : "unsigned", ediffer, eflag);
        fails += ediffer != 0 || eflag != 0;
    }
    return fails;
}
