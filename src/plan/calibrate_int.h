/* calibrate_int.h: the planner's calibration parts shared between calibrate.c (the file, the
 * reference block's and the machine's rates) and calibrate_arch.c (each architecture's own
 * block rates, from its op table). */
#ifndef HPT_PLAN_CALIBRATE_INT_H
#define HPT_PLAN_CALIBRATE_INT_H
#include "core/core.h"
#include "kernels/backend.h"

#include <cJSON.h>

/* Measures the own block rates of every registered architecture that has an op table
 * (hpt_arch.plan) into c->arch[id] (c->gemm_rows set first). reps repetitions of at least
 * min_s seconds each, the best kept; --matmul bf16's GEMMs with bf16_reps (fewer: they are
 * the slowest part of a calibration on a CPU without fast bf16; 0: not measured). */
hpt_status hpt_cal_measure_arch(const hpt_backend *be, int reps, int bf16_reps, double min_s,
                                hpt_calibration *c);
/* Each architecture's object of the file, named after it: written when measured; read all or
 * nothing (absent or partial: its C[0] stays 0). */
/* A block's linear layer at a precision: ws NULL, the fp32 ops; else (--matmul bf16) their
 * _bf16 forms with ws their workspace, as the model calls them. */
void hpt_cal_mm_fwd(const hpt_backend *be, void *ws, float *out, const float *inp, const float *w,
                    int64_t N, int64_t C, int64_t OC);
void hpt_cal_mm_bwd(const hpt_backend *be, void *ws, float *dinp, float *dw, const float *dout,
                    const float *inp, const float *w, int64_t N, int64_t C, int64_t OC);
void hpt_cal_arch_save(cJSON *j, const hpt_calibration *c);
void hpt_cal_arch_load(const cJSON *j, hpt_calibration *c);

#endif
