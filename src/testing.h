/* testing.h: test hooks, internal. Fault injection (the n-th allocation, the n-th disk
 * transfer), an injected gradient for the loss scaler, and the predictors that exist only to
 * test the hybrid schedule (zero, garbage). Tests include this header; the library's own files
 * include it where they implement a hook. The command line must not (scripts/check_layers.sh
 * fails if tools/ does): nothing here is reachable from a flag. */
#ifndef HPT_TESTING_H
#define HPT_TESTING_H

#include "hptrain.h"

/* Make the n-th allocation from now fail with HPT_ERR_OOM (0 disables). */
void hpt_mem_fail_nth(hpt_mem *m, uint64_t n);

/* 1 where hpt_mem_free checks the size it is told against its record of live blocks and aborts
 * on a mismatch or an unknown pointer (debug and sanitizer builds); 0 in release builds. */
int hpt_mem_checks_frees(void);

/* The nth disk transfer from now (any thread, read or write) fails as kind: SHORT_WRITE
 * (a write stops after half its bytes), ENOSPC (a write finds the disk full), EIO (any
 * transfer), VANISHED (the block's file is truncated to nothing underneath, as if removed, so a
 * read finds its end). Each ends in HPT_ERR_IO with the cause in hpt_last_error(). nth 0: off.
 * SHORT_WRITE and ENOSPC count writes only. */
typedef enum {
    HPT_DISK_FAULT_NONE = 0,
    HPT_DISK_FAULT_SHORT_WRITE,
    HPT_DISK_FAULT_ENOSPC,
    HPT_DISK_FAULT_EIO,
    HPT_DISK_FAULT_VANISHED
} hpt_disk_fault;
void hpt_mem_disk_fail(hpt_mem *m, hpt_disk_fault kind, uint64_t nth);

/* Environment hooks, for tests that drive the command line (which cannot call the functions
 * here): HPT_TEST_DISK_DELAY_US=N sleeps N microseconds after each disk-tier transfer (any
 * thread), widening the window in which tests/test_crash.sh's kills land in the disk tier's
 * I/O. Read once per process; unset: no cost but one branch. */

/* At step `step` (1-based; its first micro-batch) element 0 of block layer's gradients is set
 * to value right after that block's backward, before it goes to its home: an injected
 * overflow for the loss scaler (inf, or a value fp16 cannot hold). step 0: off. */
void hpt_trainer_inject_grad(hpt_trainer *tr, int64_t step, int layer, float value);
/* The trainer's optimizer (tests read its moments around a jump). */
hpt_optim *hpt_trainer_optim(hpt_trainer *tr);

/* LoRA's dropout masks change with each forward pass (model/lora.c); hold 1 keeps the current
 * pass's masks for the forwards that follow (finite differences through dropout), 0 lets
 * them change again. Nothing without adapters. */
void hpt_model_lora_hold_masks(hpt_model *m, int hold);

/* A frozen base (model/frozen.c, --base-weights) made from now on, on this thread, widens its
 * bf16 embeddings and head `rows` vocabulary rows at a time (0: the default, 2048 rows), so a
 * small test vocabulary spans several chunks; model_frozen_bytes and the estimator follow it. */
void hpt_frozen_vocab_chunk(int rows);
/* A frozen base made from now on, on this thread, with a disk home moves its blocks between the
 * disk and the device through one host block (on 1), as on a GPU, whose device memory the disk
 * tier cannot read into: the path runs on the CPU (test_lora's check_homes); the estimator's
 * --device cuda counts that block. */
void hpt_frozen_disk_via_host(int on);

/* The testing predictors of the hybrid schedule (hpt_predictor_kind values; checkpoints store
 * them, so the values never change). hpt_predictor_parse refuses their names;
 * hpt_predictor_parse_testing accepts every predictor. */
#define HPT_PREDICTOR_ZERO ((hpt_predictor_kind)2)    /* no change: weights stay bit-identical */
#define HPT_PREDICTOR_GARBAGE ((hpt_predictor_kind)3) /* large random updates: divergence */
hpt_status hpt_predictor_parse_testing(const char *name, hpt_predictor_kind *out);

#endif
