/* state.c: hptrain's training-state checkpoint (weights, AdamW moments, position, config).
 *
 * Layout (little-endian), version 1:
 *   "HPTSTATE" (8 bytes), uint32 version, uint32 header fields count (32)
 *   int64 fields[32]: L C NH V Vp maxT | lr beta1 beta2 eps wd (float bits) decay_all |
 *                     step shard offset rng total_steps B T | optim_t | num_params | 0...
 *   float params[n], m[n], v[n]
 *   uint32 CRC-32C of every byte before it, then "HPTEND\0\0"
 * Written through io_atomic (temporary file, fsync, rename, directory fsync): the previous
 * checkpoint under the same name survives any crash. Load checks the size first, then the
 * checksum over everything, before handing out a model. */
#include "core/core.h"
#include "io/io_int.h"
#include "model/gpt2_int.h"

#include <stdlib.h>
#include <string.h>

#define STATE_VERSION 1
#define NFIELDS 32
static const char k_magic[8] = {'H', 'P', 'T', 'S', 'T', 'A', 'T', 'E'};
static const char k_end[8] = {'H', 'P', 'T', 'E', 'N', 'D', 0, 0};

static int64_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return (int64_t)u; }
static float bitsf(int64_t b) { uint32_t u = (uint32_t)b; float f; memcpy(&f, &u, 4); return f; }

hpt_status hpt_state_save(const char *path, const hpt_gpt2 *model, const hpt_optim *opt,
                          const hpt_adamw_opts *ao, const hpt_train_pos *pos) {
    const hpt_gpt2_config *c = &model->cfg;
    int64_t f[NFIELDS] = {c->L, c->C, c->NH, c->V, c->Vp, c->maxT,
                          fbits(ao->lr), fbits(ao->beta1), fbits(ao->beta2), fbits(ao->eps),
                          fbits(ao->weight_decay), ao->decay_all,
                          pos->step, pos->data_shard, pos->data_offset, (int64_t)pos->rng_state,
                          pos->total_steps, pos->B, pos->T,
                          hpt_optim_get_t(opt), (int64_t)model->num_params};
    uint32_t ver[2] = {STATE_VERSION, NFIELDS};
    size_t nb = model->num_params * sizeof(float);
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, k_magic, 8);
    if (s == HPT_OK) s = io_atomic_write(&w, ver, sizeof ver);
    if (s == HPT_OK) s = io_atomic_write(&w, f, sizeof f);
    if (s == HPT_OK) s = io_atomic_write(&w, model->params, nb);
    if (s == HPT_OK) s = io_atomic_write(&w, hpt_optim_m(opt), nb);
    if (s == HPT_OK) s = io_atomic_write(&w, hpt_optim_v(opt), nb);
    uint32_t crc = w.crc;
    if (s == HPT_OK) s = io_atomic_write(&w, &crc, 4);
    if (s == HPT_OK) s = io_atomic_write(&w, k_end, 8);
    if (s != HPT_OK) { io_atomic_abort(&w); return s; }
    return io_atomic_commit(&w);
}

hpt_status hpt_state_load(const char *path, hpt_mem *mem, hpt_gpt2 **model_out,
                          hpt_optim **opt_out, hpt_adamw_opts *ao_out, hpt_train_pos *pos_out) {
    *model_out = NULL;
    *opt_out = NULL;
    FILE *fp;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &fp, &size));
    char magic[8];
    uint32_t ver[2];
    int64_t f[NFIELDS];
    hpt_status s = io_read_exact(fp, magic, 8, path, "magic");
    if (s == HPT_OK && memcmp(magic, k_magic, 8) != 0)
        s = hpt_fail(HPT_ERR_FORMAT, "%s is not an hptrain training state (bad magic)", path);
    if (s == HPT_OK) s = io_read_exact(fp, ver, sizeof ver, path, "version");
    if (s == HPT_OK && (ver[0] != STATE_VERSION || ver[1] != NFIELDS))
        s = hpt_fail(HPT_ERR_FORMAT, "%s: training-state version %u is not supported (this build "
                     "reads version %d)", path, ver[0], STATE_VERSION);
    if (s == HPT_OK) s = io_read_exact(fp, f, sizeof f, path, "header");
    hpt_gpt2_config c = {0};
    if (s == HPT_OK) {
        c = (hpt_gpt2_config){.L = (int)f[0], .C = (int)f[1], .NH = (int)f[2], .V = (int)f[3],
                              .Vp = (int)f[4], .maxT = (int)f[5]};
        s = hpt_gpt2_config_check(&c);
        if (s != HPT_OK) s = hpt_fail_ctx(s, "%s", path);
    }
    size_t n = 0;
    if (s == HPT_OK) {
        n = hpt_gpt2_num_params(&c);
        uint64_t want = 16 + sizeof f + 3 * (uint64_t)n * 4 + 12;
        if ((uint64_t)f[20] != n)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: parameter count %lld does not match its shape", path,
                         (long long)f[20]);
        else if (size != want)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: %llu bytes, expected %llu (truncated or corrupt)",
                         path, (unsigned long long)size, (unsigned long long)want);
    }
    hpt_gpt2 *m = NULL;
    hpt_optim *o = NULL;
    hpt_adamw_opts ao = {0};
    if (s == HPT_OK) {
        ao = (hpt_adamw_opts){.lr = bitsf(f[6]), .beta1 = bitsf(f[7]), .beta2 = bitsf(f[8]),
                              .eps = bitsf(f[9]), .weight_decay = bitsf(f[10]),
                              .decay_all = (int)f[11]};
        s = hpt_gpt2_create(mem, &c, &m);
    }
    if (s == HPT_OK) s = hpt_optim_create(mem, m, &ao, &o);
    if (s == HPT_OK) s = io_read_exact(fp, m->params, n * 4, path, "parameters");
    if (s == HPT_OK) s = io_read_exact(fp, hpt_optim_m(o), n * 4, path, "first moments");
    if (s == HPT_OK) s = io_read_exact(fp, hpt_optim_v(o), n * 4, path, "second moments");
    uint32_t crc_file = 0;
    char end[8];
    if (s == HPT_OK) s = io_read_exact(fp, &crc_file, 4, path, "checksum");
    if (s == HPT_OK) s = io_read_exact(fp, end, 8, path, "end marker");
    fclose(fp);
    if (s == HPT_OK) {
        uint32_t crc = io_crc32c(0, k_magic, 8);
        crc = io_crc32c(crc, ver, sizeof ver);
        crc = io_crc32c(crc, f, sizeof f);
        crc = io_crc32c(crc, m->params, n * 4);
        crc = io_crc32c(crc, hpt_optim_m(o), n * 4);
        crc = io_crc32c(crc, hpt_optim_v(o), n * 4);
        if (memcmp(end, k_end, 8) != 0)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: end marker missing (truncated or corrupt)", path);
        else if (crc != crc_file)
            s = hpt_fail(HPT_ERR_CHECKSUM, "%s: checksum mismatch (stored %08x, computed %08x): "
                         "the file is corrupt", path, crc_file, crc);
    }
    if (s != HPT_OK) {
        hpt_optim_free(o);
        hpt_gpt2_free(m);
        return s;
    }
    hpt_optim_set_t(o, f[19]);
    *ao_out = ao;
    *pos_out = (hpt_train_pos){.step = f[12], .data_shard = f[13], .data_offset = f[14],
                               .rng_state = (uint64_t)f[15], .total_steps = f[16],
                               .B = (int32_t)f[17], .T = (int32_t)f[18]};
    *model_out = m;
    *opt_out = o;
    return HPT_OK;
}
