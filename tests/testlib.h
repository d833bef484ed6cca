/* testlib.h: a minimal assertion harness. Every CHECK counts; a test executable exits 1 if
 * any check failed, and prints each failure with file and line. */
#ifndef HPT_TESTLIB_H
#define HPT_TESTLIB_H

#include "hptrain.h"
#include "arch_cases.h"

#include <stdio.h>
#include <sys/types.h>

extern int t_checks, t_failures;

#define CHECK(cond) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECK_MSG(cond, ...) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_OK(expr) do { hpt_status s_ = (expr); t_checks++; if (s_ != HPT_OK) { t_failures++; \
    fprintf(stderr, "%s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr, hpt_status_str(s_), \
            hpt_last_error()); } } while (0)
#define CHECK_STATUS(expr, want) do { hpt_status s_ = (expr); t_checks++; if (s_ != (want)) { \
    t_failures++; fprintf(stderr, "%s:%d: %s -> %s, expected %s (%s)\n", __FILE__, __LINE__, \
    #expr, hpt_status_str(s_), hpt_status_str(want), hpt_last_error()); } } while (0)

/* Prints "<name>: N checks, M failed" and returns the process's exit status. */
int t_done(const char *name);
/* Whether this machine has a GPU: HPT_REQUIRE_GPU=1 (or 0) says so; else an NVIDIA driver's
 * device (/dev/nvidia0, /proc/driver/nvidia/gpus/). */
int t_gpu_present(void);
/* The end of a GPU test whose CUDA half could not run (why: the reason): with no GPU present,
 * prints "SKIP: no GPU: why" and returns 77 (ctest's skip; 1 if a CPU-side check failed); with a
 * GPU present (or HPT_REQUIRE_GPU=1) the backend should have run: prints a FAIL line, counts a
 * failure and returns 1. */
int t_gpu_skip(const char *name, const char *why);
/* The build tree's reference/ (tests/make_reference.sh); the HPT_REF_DIR environment variable
 * overrides. */
const char *t_ref_dir(void);
/* Directory with GPT-2 encoder.json / vocab.bpe (HPT_TOKENIZER env), or NULL. */
const char *t_tokenizer_dir(void);
/* A fresh temporary directory for this test (removed by the OS's tmp cleaning only). */
const char *t_tmpdir(void);
/* ||a-b||_2 / ||b||_2: the norm-wise relative error of a against the reference b. */
double t_rel_err(const float *a, const float *b, size_t n);
/* Checks that model m's tensor table is names[0..n) with shapes[i] (up to 3 dimensions), in
 * order, and that m's architecture is arch; and that each of the n shapes `refused` is refused
 * by hpt_model_config_parse (the family tests test_qwen, test_gemma). */
void t_check_table(hpt_model *m, const char *const *names, const int64_t (*shapes)[3], int n,
                   const char *arch);
void t_check_refused(const char *const *refused, size_t n);

/* Runs a trainer built from o until it is done or has completed step `stop` (then saves).
 * losses[step-1] (and vals[step-1], -1 when not evaluated; vals may be NULL) record each step;
 * params_out (may be NULL) gets the final weights. */
void t_train_run(hpt_mem *mem, const hpt_train_opts *o, int64_t stop, float *losses, float *vals,
                 float *params_out);
/* `steps` forward/backward passes on random tokens below 256 (seed 5), with plain SGD (lr 0.05)
 * between them: the gradients of the last pass are left in place. losses[s] records each. */
void t_sgd_steps(hpt_model *m, int B, int T, int steps, float *losses);
/* After a training pass at (B, T): a forward without targets at (B, T), then a forward and
 * backward at (1, 17), which replans the arena (T of the model >= 17). */
void t_replan(hpt_model *m, int B, int T);
/* Synthetic token shards with learnable structure: token i = (x_i >> 16) % mod + (i % period)
 * * stride, x the LCG x = x * 1103515245 + 12345 from seed. The first n_train tokens go to
 * <tmp>/train_000000.bin (its path into train), the next n_val (if any) to
 * <tmp>/val_000000.bin (into val, which may be NULL when n_val is 0). */
void t_make_shards(uint32_t seed, int mod, int period, int stride, size_t n_train, size_t n_val,
                   char train[512], char val[512]);
/* The tests' training options: model on the shards at data, batch B x T, steps steps with
 * lr 3e-3 after warmup steps of warmup; the rest hpt_train_defaults'. */
hpt_train_opts t_train_opts(const char *model, const char *data, int B, int T, int64_t steps,
                            int64_t warmup);
/* The whole file at path (malloc'd; NULL, with *n 0, when it cannot be read). */
unsigned char *t_read_file(const char *path, size_t *n);
/* The state.bin a save to dir wrote: dir's, or dir.state's beside a Hugging Face dir
 * (hpt_train_resume_dir); t_tmp_state_file: of the save dir t_tmpdir()/name. */
void t_state_file(char *buf, size_t n, const char *dir);
void t_tmp_state_file(char *buf, size_t n, const char *name);
/* Exact resume: trains o on mem uninterrupted (saving into <tmp>/<tag>_whole), then stopped
 * after step stop (<tmp>/<tag>_at) and resumed from there (<tmp>/<tag>_resumed); checks that
 * the resumed run ends with the uninterrupted run's n weights, its losses after stop and its
 * state.bin, byte for byte (what names the case in a failure). The uninterrupted run's
 * state.bin is returned in *state (free it) when state is not NULL. */
void t_check_resume(hpt_mem *mem, const hpt_train_opts *o, int64_t stop, size_t n,
                    const char *tag, const char *what, unsigned char **state, size_t *state_n);
/* Checks that the estimator's peak of every tier for the run o (hpt_train_plan_opts) equals the
 * peak measured on mem; what names the run in a failure. */
void t_check_estimate(const hpt_mem *mem, const hpt_train_opts *o, const char *what);
/* The tensors of cfg's table (any architecture) in checkpoint order, from a model's
 * hpt_tensor_info, with their offsets in the flat buffer (name a static string; offset, numel,
 * is_matrix), and each one's last dimension into last (may be NULL); returns their count. */
#define T_MAX_TENSORS 32
typedef struct {
    const char *name;
    size_t offset, numel; /* floats */
    int is_matrix;
} t_tensor;
int t_tensors_of(const hpt_model_config *cfg, t_tensor t[T_MAX_TENSORS], size_t *last);
/* Bytes live on the device tier, all categories. */
uint64_t t_device_live(const hpt_mem *mem);
/* The descriptors (and sizes) of this process's regular files in dir, at most cap: the disk
 * tier's, which have no name, found through /proc/self/fd. Returns how many. */
int t_disk_fds(const char *dir, int *fds, off_t *sizes, int cap);
/* Flips bit 4 of the byte at `at` of the file behind fd through a descriptor of its own (no
 * O_DIRECT), as another process would. */
void t_flip_byte(int fd, off_t at);

#endif
