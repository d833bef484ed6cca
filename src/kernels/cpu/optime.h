/* optime.h: the CPU backend's op timer, for benchmarks that account a step phase by phase
 * (bench/step_budget.c). Internal to the library; off unless a program turns it on. */
#ifndef HPT_KERNELS_CPU_OPTIME_H
#define HPT_KERNELS_CPU_OPTIME_H

#include "kernels/backend.h"

#include <stdint.h>

/* One timed key: an op's name, with the GEMM's part and shape where it has one
 * ("gemm.fwd N=256 K=768 OC=2304", "gemm.dX ...", "gemm.dW ...", "bias.fwd ..."). */
typedef struct {
    char key[80];
    double s;      /* wall seconds summed over the calls */
    uint64_t n;    /* calls */
    double flop;   /* GEMM FLOPs summed (2 M N K a call), else 0 */
} k_optime_row;

/* On (before the model is made: hpt_backend_cpu() returns the timed table from then on, so
 * a model made earlier keeps the untimed one) or off. */
void k_optime_enable(int on);
int k_optime_enabled(void);
/* The timed copy of the CPU table: every op of a training step wrapped, the rest as they are. */
const hpt_backend *k_optime_table(const hpt_backend *base);
/* Forget every row. */
void k_optime_reset(void);
/* Copies up to max rows into rows; returns how many rows there are. */
int k_optime_read(k_optime_row *rows, int max);

#endif
