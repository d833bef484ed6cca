/* core.h: internal helpers every module uses: error text, RNG, small utilities. */
#ifndef HPT_CORE_H
#define HPT_CORE_H

#include "hptrain.h"

#include <stdio.h>

/* Records detail for hpt_last_error() and returns s, so callers write
 *   return hpt_fail(HPT_ERR_IO, "cannot open %s: %s", path, strerror(errno)); */
hpt_status hpt_fail(hpt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefixes the current last-error text with context ("loading x.bin: ..."). */
hpt_status hpt_fail_ctx(hpt_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hpt_clear_error(void);

/* xorshift64* generator: small state (one uint64) that checkpoints save and restore. */
typedef struct { uint64_t s; } hpt_rng;
void hpt_rng_seed(hpt_rng *r, uint64_t seed);
uint32_t hpt_rng_u32(hpt_rng *r);
float hpt_rng_uniform(hpt_rng *r);            /* [0, 1) */
float hpt_rng_normal(hpt_rng *r);             /* N(0, 1), Box-Muller */

#define HPT_CHECK(expr) do { hpt_status s_ = (expr); if (s_ != HPT_OK) return s_; } while (0)
#define HPT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define HPT_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
