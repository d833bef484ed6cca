/* vmath.h: lets `#pragma omp simd` loops call glibc's vector math library (libmvec) for
 * expf, logf and tanhf. glibc declares these vector variants only under -ffast-math, which
 * we do not want (it breaks NaN checks and reorders sums); the declarations are the same as
 * glibc's own. libmvec is accurate to 4 ulp. */
#ifndef HPT_VMATH_H
#define HPT_VMATH_H

#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
float expf(float) __attribute__((simd("notinbranch")));
float logf(float) __attribute__((simd("notinbranch")));
float tanhf(float) __attribute__((simd("notinbranch")));
#endif

#endif
