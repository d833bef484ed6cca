/* calibrate_int.h: the planner's calibration parts shared between calibrate.c (the file and
 * the GPT-2 and machine rates) and calibrate_llama.c (a Llama block's own rates). */
#ifndef HPT_PLAN_CALIBRATE_INT_H
#define HPT_PLAN_CALIBRATE_INT_H
#include "core/core.h"
#include "kernels/backend.h"

#include <cJSON.h>

/* Measures the Llama block's GEMMs, grouped-query attention and pointwise kernels into c (its
 * gemm_rows set first). reps repetitions of at least min_s seconds each, the best kept. */
hpt_status hpt_cal_measure_llama(const hpt_backend *be, int reps, double min_s, hpt_calibration *c);
/* The "llama" object of the file: written when measured; read all or nothing (absent or
 * partial: llama_C[0] stays 0). */
void hpt_cal_llama_save(cJSON *j, const hpt_calibration *c);
void hpt_cal_llama_load(const cJSON *j, hpt_calibration *c);

#endif
