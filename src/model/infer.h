/* infer.h: what a checkpoint loader needs of the inference engine (model/infer.c). The loader
 * lives above the model (io/llmc.c: hpt_infer_load) and hands the engine each tensor's rows in
 * checkpoint order; the engine stores them (int8 with a scale per row, or fp32). */
#ifndef HPT_MODEL_INFER_H
#define HPT_MODEL_INFER_H

#include "hptrain.h"

#include <stddef.h>

/* An engine with its cache and scratch, and no weights yet (the loader's errors are its own). */
hpt_status infer_new(hpt_mem *mem, const hpt_model_config *cfg, hpt_weights kind, int ctx,
                     hpt_infer **out);
/* Gives the engine weights of its own (int8 and scales for the quantised tensors, fp32 for
 * the others), zero until ingested. */
hpt_status infer_alloc_weights(hpt_infer *inf);
/* The width of one row of tensor k (the configuration's table index) as the engine stores it:
 * each quantised matrix has one scale per row (output channel). Tensors are ingested in whole
 * rows. */
size_t infer_row_width(const hpt_model_config *cfg, int k);
/* Stores rows [row0, row0 + n) of tensor k (a table index; rows: n x infer_row_width floats,
 * host memory; borrowed) into an engine with weights of its own. */
void infer_ingest(hpt_infer *inf, int k, size_t row0, const float *rows, size_t n);

#endif
