/* lora_state.c: the training state of a LoRA run (docs/lora.md, "Resuming"). A LoRA --save
 * writes PEFT's adapter files (io/peft.c) and beside them lora_state.bin: what else the next
 * step depends on (the step, the data position, the trainer's RNG, dropout's pass count, the
 * optimizer's step count and its state buffers); the frozen base is not saved: --resume takes
 * it from --model again. Layout (little-endian): "HPTLORA1", then int64 fields (K_FIELDS,
 * below), then each of the optimizer's HPT_OPTIM_NUM_BUFS buffers (int64 bytes, then the
 * bytes), then the CRC-32C of everything before it. Written atomically (io_atomic); read
 * back with its size and checksum verified and every field compared with the run's, so a
 * resume continues bit for bit or is refused with the reason. */
#include "core/core.h"
#include "io/io.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "train/trainer_int.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { F_VERSION, F_STEP, F_TOTAL, F_B, F_T, F_ACCUM, F_SHARD, F_OFFSET, F_RNG, F_OPT_T, F_PASS,
       F_NPARAMS, F_OPTIMIZER, F_BITS, K_FIELDS };
static const char k_magic[8] = {'H', 'P', 'T', 'L', 'O', 'R', 'A', '1'};

static void state_path(char *out, size_t n, const char *dir) {
    snprintf(out, n, "%s/lora_state.bin", dir);
}

static void fields_of(const hpt_trainer *tr, int64_t f[K_FIELDS]) {
    const hpt_adamw_opts *ao = hpt_optim_get_opts(tr->opt);
    f[F_VERSION] = 1;
    f[F_STEP] = tr->step;
    f[F_TOTAL] = tr->o.steps;
    f[F_B] = tr->o.B;
    f[F_T] = tr->o.T;
    f[F_ACCUM] = tr->o.accum > 1 ? tr->o.accum : 1;
    hpt_dataloader_get_pos(tr->train, &f[F_SHARD], &f[F_OFFSET]);
    f[F_RNG] = (int64_t)tr->rng.s;
    f[F_OPT_T] = hpt_optim_get_t(tr->opt);
    f[F_PASS] = (int64_t)model_lora_pass(tr->model);
    f[F_NPARAMS] = (int64_t)hpt_model_lora_num_params(tr->model);
    f[F_OPTIMIZER] = ao->optimizer;
    f[F_BITS] = ao->state_bits == 0 ? 32 : ao->state_bits;
}

hpt_status lora_state_save(const hpt_trainer *tr, const char *dir) {
    char path[PATH_MAX];
    state_path(path, sizeof path, dir);
    int64_t f[K_FIELDS];
    fields_of(tr, f);
    hpt_optim_buf b[HPT_OPTIM_NUM_BUFS];
    hpt_optim_state_buffers(tr->opt, b);
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, k_magic, sizeof k_magic);
    if (s == HPT_OK) s = io_atomic_write(&w, f, sizeof f);
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS && s == HPT_OK; i++) {
        int64_t n = (int64_t)b[i].bytes;
        s = io_atomic_write(&w, &n, sizeof n);
        if (s != HPT_OK || !n) continue;
        void *host = malloc(b[i].bytes);
        if (!host) {
            s = hpt_fail(HPT_ERR_OOM, "writing %s: %zu bytes of optimizer state", path, b[i].bytes);
            break;
        }
        tr->be->copy(host, b[i].data, b[i].bytes, HPT_COPY_D2H);
        s = io_atomic_write(&w, host, b[i].bytes);
        free(host);
    }
    uint32_t crc = w.crc;
    if (s == HPT_OK) s = io_atomic_write(&w, &crc, sizeof crc);
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w);
}

/* Reads n bytes at *at of the file image (size bytes), or fails naming path. */
static hpt_status take(const char *img, uint64_t size, uint64_t *at, void *dst, uint64_t n,
                       const char *path) {
    if (n > size || *at > size - n)
        return hpt_fail(HPT_ERR_FORMAT, "%s is truncated (%llu bytes)", path, (unsigned long long)size);
    memcpy(dst, img + *at, n);
    *at += n;
    return HPT_OK;
}

hpt_status lora_state_load(hpt_trainer *tr, const char *dir) {
    char path[PATH_MAX];
    state_path(path, sizeof path, dir);
    FILE *fp;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &fp, &size));
    char *img = size >= sizeof k_magic + 4 ? malloc(size) : NULL;
    hpt_status s = size < sizeof k_magic + 4
                       ? hpt_fail(HPT_ERR_FORMAT, "%s is truncated (%llu bytes)", path,
                                  (unsigned long long)size)
                   : img ? io_read_exact(fp, img, size, path, "the LoRA training state")
                         : hpt_fail(HPT_ERR_OOM, "reading %s", path);
    fclose(fp);
    uint32_t crc = 0;
    if (s == HPT_OK) memcpy(&crc, img + size - 4, 4);
    if (s == HPT_OK && memcmp(img, k_magic, sizeof k_magic))
        s = hpt_fail(HPT_ERR_FORMAT, "%s is not a LoRA training state (bad magic)", path);
    else if (s == HPT_OK && io_crc32c(0, img, size - 4) != crc)
        s = hpt_fail(HPT_ERR_FORMAT, "%s is damaged (checksum mismatch)", path);
    uint64_t at = sizeof k_magic;
    int64_t f[K_FIELDS], want[K_FIELDS];
    if (s == HPT_OK) s = take(img, size - 4, &at, f, sizeof f, path);
    fields_of(tr, want);
    static const struct { int k; const char *what; } same[] = {
        {F_VERSION, "version"}, {F_B, "--batch"}, {F_T, "--seq"},
        {F_ACCUM, "--accum"}, {F_NPARAMS, "adapter size (--lora r, --lora-targets)"},
        {F_OPTIMIZER, "--optimizer"}, {F_BITS, "--state-bits"}};
    for (size_t i = 0; s == HPT_OK && i < sizeof same / sizeof same[0]; i++)
        if (f[same[i].k] != want[same[i].k])
            s = hpt_fail(HPT_ERR_INVALID, "%s was saved with %s %lld; this run has %lld: resume "
                         "with the same", path, same[i].what, (long long)f[same[i].k],
                         (long long)want[same[i].k]);
    if (s == HPT_OK && f[F_STEP] > tr->o.steps)
        s = hpt_fail(HPT_ERR_INVALID, "%s is at step %lld, beyond --steps %lld", path,
                     (long long)f[F_STEP], (long long)tr->o.steps);
    hpt_optim_buf b[HPT_OPTIM_NUM_BUFS];
    hpt_optim_state_buffers(tr->opt, b);
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS && s == HPT_OK; i++) {
        int64_t n = 0;
        s = take(img, size - 4, &at, &n, sizeof n, path);
        if (s == HPT_OK && (uint64_t)n != b[i].bytes)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: optimizer buffer %s has %lld bytes, the run's %zu",
                         path, b[i].name, (long long)n, b[i].bytes);
        if (s != HPT_OK || !n) continue;
        if (at + (uint64_t)n > size - 4) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s is truncated", path);
            break;
        }
        tr->be->copy(b[i].data, img + at, b[i].bytes, HPT_COPY_H2D);
        at += (uint64_t)n;
    }
    if (s == HPT_OK && at != size - 4)
        s = hpt_fail(HPT_ERR_FORMAT, "%s has %llu bytes after its state", path,
                     (unsigned long long)(size - 4 - at));
    if (s == HPT_OK) s = hpt_dataloader_set_pos(tr->train, f[F_SHARD], f[F_OFFSET]);
    free(img);
    HPT_CHECK(s);
    tr->step = tr->start_step = f[F_STEP];
    tr->rng.s = (uint64_t)f[F_RNG];
    hpt_optim_set_t(tr->opt, f[F_OPT_T]);
    model_lora_set_pass(tr->model, (uint64_t)f[F_PASS]);
    return HPT_OK;
}
