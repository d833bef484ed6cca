/* zero.c: ZeRO's sharded checkpoints (stages 1 and 2; docs/zero.md). Each rank writes its shard,
 * DIR/zero-<step>-<rank>of<N>.bin, atomically (io_atomic):
 *   "HPTZERO1", int64 h[8]: rank N u_lo u_hi p_lo p_hi step 0, uint64 bytes[6] (the state
 *   buffers' bytes for units [u_lo, u_hi): optim_units_bytes), float params[p_hi - p_lo] (the
 *   rank's owned weights), the six state buffers (hpt_optim_state_buffers' order, the owned
 *   units only), uint32 CRC-32C of every byte before it, "HPTEND\0\0";
 * then, once every rank's shard is on disk, rank 0 writes DIR/zero.manifest atomically (text):
 * the state's 32 header fields (state.c's, so the shape, optimizer settings, step, data position,
 * RNG and optimizer step are one process's), N and the stage, the CRC-32C of the whole weights
 * (the model's hash), the loss scaler's state when scaling, and one line per shard (its file,
 * units, values, bytes, CRC). The manifest names the shards of its own save, so a crash before it
 * is renamed leaves the previous manifest and the previous shards (other names) loadable; after
 * it, rank 0 removes the shards it does not name and a stage-0 state.bin (a stage-0 save removes
 * the manifest: trainer.c). Rank 0 also writes model.bin (every rank holds the whole weights).
 * Loading re-cuts: M processes each build their own run of units (optim_owner for M) and copy
 * every unit's state from the shard that holds it (the unit's place in both layouts:
 * optim_unit_place), and the whole weights from all shards, streaming each file once with its
 * checksum; M = 1 at stage 0 gets the whole state, so a sharded checkpoint resumes in one
 * process exactly. A state.bin resumed at stage 1 or 2 (zero_reshard) is loaded whole, then the
 * rank keeps its units' state (the whole state lives during the load). */
#include "core/core.h"
#include "io/io.h"
#include "model/model.h"
#include "optim/optim.h"
#include "dist/dist.h"
#include "train/train_int.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char k_magic[8] = {'H', 'P', 'T', 'Z', 'E', 'R', 'O', '1'};
static const char k_end[8] = {'H', 'P', 'T', 'E', 'N', 'D', 0, 0};
#define HEAD_BYTES (8 + 8 * 8 + 8 * HPT_OPTIM_NUM_BUFS)
#define MAX_SHARDS DP_MAX_PROCS

typedef struct {
    char file[64];
    uint64_t u_lo, u_hi, p_lo, p_hi, bytes;
    uint32_t crc;
} shard_rec;

typedef struct {
    int64_t f[STATE_NFIELDS];
    int procs, stage, has_ls;
    uint32_t weights_crc;
    int64_t ls[3];
    shard_rec sh[MAX_SHARDS];
} manifest;

int zero_manifest_exists(const char *dir) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/zero.manifest", dir);
    return access(p, R_OK) == 0;
}

/* ---- save ---- */

static hpt_status write_shard(const char *path, const dp_shard *z, int64_t step, const float *params,
                              const hpt_optim *opt, uint32_t *crc_out, uint64_t *bytes_out) {
    hpt_optim_buf bufs[HPT_OPTIM_NUM_BUFS];
    hpt_optim_state_buffers(opt, bufs);
    int r = z->rank;
    int64_t h[8] = {r, z->size, (int64_t)z->ulo[r], (int64_t)z->uhi[r], (int64_t)z->plo[r],
                    (int64_t)z->phi[r], step, 0};
    uint64_t nb[HPT_OPTIM_NUM_BUFS];
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++) nb[i] = bufs[i].bytes;
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    hpt_status s = io_atomic_write(&w, k_magic, 8);
    if (s == HPT_OK) s = io_atomic_write(&w, h, sizeof h);
    if (s == HPT_OK) s = io_atomic_write(&w, nb, sizeof nb);
    if (s == HPT_OK) s = io_atomic_write(&w, params + z->plo[r], (z->phi[r] - z->plo[r]) * sizeof(float));
    uint64_t total = HEAD_BYTES + (z->phi[r] - z->plo[r]) * sizeof(float) + 12;
    for (int i = 0; i < HPT_OPTIM_NUM_BUFS && s == HPT_OK; i++) {
        if (bufs[i].bytes) s = io_atomic_write(&w, bufs[i].data, bufs[i].bytes);
        total += bufs[i].bytes;
    }
    uint32_t crc = w.crc;
    if (s == HPT_OK) s = io_atomic_write(&w, &crc, 4);
    if (s == HPT_OK) s = io_atomic_write(&w, k_end, 8);
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    *crc_out = crc;
    *bytes_out = total;
    return io_atomic_commit(&w);
}

/* Rank 0: the shards of other saves and a stage-0 state.bin go, once the manifest names this
 * save's. */
static void remove_others(const char *dir, int64_t step, int procs) {
    char keep_a[64], keep_b[64], p[PATH_MAX];
    snprintf(keep_a, sizeof keep_a, "zero-%lld-", (long long)step);
    snprintf(keep_b, sizeof keep_b, "of%d.bin", procs);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        const char *n = de->d_name;
        size_t ln = strlen(n), lb = strlen(keep_b);
        if (strncmp(n, "zero-", 5) || ln < 9 || strcmp(n + ln - 4, ".bin")) continue;
        if (!strncmp(n, keep_a, strlen(keep_a)) && ln > lb && !strcmp(n + ln - lb, keep_b)) continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, n) < (int)sizeof p) unlink(p);
    }
    if (d) closedir(d);
    snprintf(p, sizeof p, "%s/state.bin", dir);
    unlink(p);
}

void zero_remove(const char *dir) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/zero.manifest", dir);
    unlink(p); /* first: shards without a manifest are never read */
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        size_t ln = strlen(de->d_name);
        if (strncmp(de->d_name, "zero-", 5) || ln < 9 || strcmp(de->d_name + ln - 4, ".bin")) continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < (int)sizeof p) unlink(p);
    }
    if (d) closedir(d);
}

static hpt_status write_manifest(const char *dir, const dp_shard *z, const int64_t *f,
                                 uint32_t weights_crc, const int64_t *ls, const shard_rec *sh) {
    char path[PATH_MAX], line[512];
    snprintf(path, sizeof path, "%s/zero.manifest", dir);
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    int n = snprintf(line, sizeof line, "hptrain-zero 1\nstage %d\nprocs %d\nweights_crc %08x\nfields",
                     z->stage, z->size, weights_crc);
    hpt_status s = io_atomic_write(&w, line, (size_t)n);
    for (int i = 0; i < STATE_NFIELDS && s == HPT_OK; i++) {
        n = snprintf(line, sizeof line, " %lld", (long long)f[i]);
        s = io_atomic_write(&w, line, (size_t)n);
    }
    if (s == HPT_OK) s = io_atomic_write(&w, "\n", 1);
    if (s == HPT_OK && ls) {
        n = snprintf(line, sizeof line, "loss_scale %lld %lld %lld\n", (long long)ls[0],
                     (long long)ls[1], (long long)ls[2]);
        s = io_atomic_write(&w, line, (size_t)n);
    }
    for (int q = 0; q < z->size && s == HPT_OK; q++) {
        n = snprintf(line, sizeof line, "shard %d %s units %llu %llu values %llu %llu bytes %llu crc %08x\n",
                     q, sh[q].file, (unsigned long long)sh[q].u_lo, (unsigned long long)sh[q].u_hi,
                     (unsigned long long)sh[q].p_lo, (unsigned long long)sh[q].p_hi,
                     (unsigned long long)sh[q].bytes, sh[q].crc);
        s = io_atomic_write(&w, line, (size_t)n);
    }
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w);
}

hpt_status zero_save(const dp_shard *z, const char *dir, hpt_gpt2 *model, const hpt_optim *opt,
                     const hpt_adamw_opts *ao, const hpt_train_pos *pos, const int64_t *ls) {
    char path[PATH_MAX];
    shard_rec mine = {0};
    int r = z->rank;
    snprintf(mine.file, sizeof mine.file, "zero-%lld-%dof%d.bin", (long long)pos->step, r, z->size);
    snprintf(path, sizeof path, "%s/%s", dir, mine.file);
    mine.u_lo = z->ulo[r];
    mine.u_hi = z->uhi[r];
    mine.p_lo = z->plo[r];
    mine.p_hi = z->phi[r];
    hpt_status s = write_shard(path, z, pos->step, model_params(model), opt, &mine.crc, &mine.bytes);
    /* every rank's outcome and record, so every rank returns the same status */
    struct { int32_t st, pad; shard_rec rec; } me, *all;
    memset(&me, 0, sizeof me); /* no padding's bytes reach the other ranks unset */
    me.st = (int32_t)s;
    me.rec = mine;
    all = calloc((size_t)z->size, sizeof *all);
    if (!all) return hpt_fail(HPT_ERR_OOM, "the checkpoint's records");
    hpt_status c = dist_allgather_raw(&me, sizeof me, all, "the checkpoint's shards");
    int bad = -1;
    for (int q = 0; c == HPT_OK && q < z->size; q++)
        if (all[q].st != HPT_OK && bad < 0) bad = q;
    if (c != HPT_OK || bad >= 0) {
        hpt_status st = bad >= 0 ? (hpt_status)all[bad].st : c;
        free(all);
        if (c != HPT_OK) return c;
        if (s != HPT_OK) return s;
        return hpt_fail(st, "rank %d could not write its checkpoint shard", bad);
    }
    if (r == 0) {
        shard_rec sh[MAX_SHARDS];
        for (int q = 0; q < z->size; q++) sh[q] = all[q].rec;
        int64_t f[STATE_NFIELDS];
        state_pack_fields(model, opt, ao, pos, f);
        uint32_t wc = io_crc32c(0, model_params(model), hpt_model_num_params(model) * sizeof(float));
        s = write_manifest(dir, z, f, wc, ls, sh);
        if (s == HPT_OK) remove_others(dir, pos->step, z->size);
    }
    free(all);
    return s; /* rank 0's manifest status: the caller shares it (dp_saved) */
}

/* ---- load ---- */

static hpt_status read_manifest(const char *dir, manifest *m) {
    char path[PATH_MAX], line[1024];
    snprintf(path, sizeof path, "%s/zero.manifest", dir);
    memset(m, 0, sizeof *m);
    FILE *fp = fopen(path, "r");
    if (!fp) return hpt_fail(HPT_ERR_IO, "cannot open %s", path);
    int ver = 0, nf = 0, nsh = 0;
    hpt_status s = HPT_OK;
    while (s == HPT_OK && fgets(line, sizeof line, fp)) {
        int q;
        char file[64];
        unsigned long long a, b, c, d, e;
        unsigned crc;
        if (sscanf(line, "hptrain-zero %d", &ver) == 1 || sscanf(line, "stage %d", &m->stage) == 1 ||
            sscanf(line, "procs %d", &m->procs) == 1 || sscanf(line, "weights_crc %x", &m->weights_crc) == 1)
            continue;
        if (!strncmp(line, "fields", 6)) {
            char *p = line + 6, *end;
            for (nf = 0; nf < STATE_NFIELDS; nf++, p = end) {
                m->f[nf] = strtoll(p, &end, 10);
                if (end == p) break;
            }
        } else if (sscanf(line, "loss_scale %lld %lld %lld", (long long *)&m->ls[0],
                          (long long *)&m->ls[1], (long long *)&m->ls[2]) == 3) {
            m->has_ls = 1;
        } else if (sscanf(line, "shard %d %63s units %llu %llu values %llu %llu bytes %llu crc %x", &q,
                          file, &a, &b, &c, &d, &e, &crc) == 8 && q == nsh && q < MAX_SHARDS &&
                   !strchr(file, '/')) {
            m->sh[q] = (shard_rec){.u_lo = a, .u_hi = b, .p_lo = c, .p_hi = d, .bytes = e, .crc = crc};
            snprintf(m->sh[q].file, sizeof m->sh[q].file, "%s", file);
            nsh++;
        } else {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: unexpected line '%.60s'", path, line);
        }
    }
    fclose(fp);
    if (s == HPT_OK && (ver != 1 || nf != STATE_NFIELDS || m->procs < 1 || nsh != m->procs))
        s = hpt_fail(HPT_ERR_FORMAT, "%s: malformed (version %d, %d fields, %d of %d shards)", path,
                     ver, nf, nsh, m->procs);
    return s;
}

typedef struct {
    uint64_t off, len; /* in the file */
    char *dst;
} region;

/* Streams path (size bytes) once: its checksum checked, each region copied where it goes. */
static hpt_status stream_file(const char *path, const shard_rec *rec, const region *rg, size_t n_rg) {
    FILE *fp;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &fp, &size));
    if (size != rec->bytes) {
        fclose(fp);
        return hpt_fail(HPT_ERR_FORMAT, "%s: %llu bytes, the manifest says %llu (truncated, or "
                        "another save's)", path, (unsigned long long)size, (unsigned long long)rec->bytes);
    }
    const size_t piece = (size_t)4 << 20;
    char *buf = malloc(piece);
    if (!buf) {
        fclose(fp);
        return hpt_fail(HPT_ERR_OOM, "the checkpoint's read buffer");
    }
    hpt_status s = HPT_OK;
    uint32_t crc = 0, crc_file = 0;
    char end[8];
    uint64_t body = size - 12;
    for (uint64_t o = 0; o < body && s == HPT_OK; o += piece) {
        size_t len = (size_t)HPT_MIN((uint64_t)piece, body - o);
        s = io_read_exact(fp, buf, len, path, "shard");
        if (s != HPT_OK) break;
        crc = io_crc32c(crc, buf, len);
        for (size_t k = 0; k < n_rg; k++) { /* the part of region k inside [o, o + len) */
            uint64_t a = HPT_MAX(rg[k].off, o), b = HPT_MIN(rg[k].off + rg[k].len, o + len);
            if (a < b) memcpy(rg[k].dst + (a - rg[k].off), buf + (a - o), (size_t)(b - a));
        }
    }
    if (s == HPT_OK) s = io_read_exact(fp, &crc_file, 4, path, "checksum");
    if (s == HPT_OK) s = io_read_exact(fp, end, 8, path, "end marker");
    fclose(fp);
    free(buf);
    if (s == HPT_OK && (memcmp(end, k_end, 8) || crc != crc_file || crc != rec->crc))
        s = hpt_fail(HPT_ERR_CHECKSUM, "%s: checksum mismatch (stored %08x, computed %08x, the "
                     "manifest's %08x): corrupt, or another save's", path, crc_file, crc, rec->crc);
    return s;
}

/* Shard k's header: what the manifest says it is. */
static hpt_status check_head(const char *path, const shard_rec *r, int k, int procs,
                             const uint64_t want[HPT_OPTIM_NUM_BUFS]) {
    FILE *fp;
    uint64_t size;
    HPT_CHECK(io_open_read(path, &fp, &size));
    char magic[8];
    int64_t h[8];
    uint64_t nb[HPT_OPTIM_NUM_BUFS];
    hpt_status s = io_read_exact(fp, magic, 8, path, "magic");
    if (s == HPT_OK) s = io_read_exact(fp, h, sizeof h, path, "header");
    if (s == HPT_OK) s = io_read_exact(fp, nb, sizeof nb, path, "header");
    fclose(fp);
    HPT_CHECK(s);
    if (memcmp(magic, k_magic, 8) || h[0] != k || h[1] != procs || (uint64_t)h[2] != r->u_lo ||
        (uint64_t)h[3] != r->u_hi || (uint64_t)h[4] != r->p_lo || (uint64_t)h[5] != r->p_hi ||
        memcmp(nb, want, sizeof nb))
        return hpt_fail(HPT_ERR_FORMAT, "%s is not shard %d of %d as the manifest describes it",
                        path, k, procs);
    return HPT_OK;
}

hpt_status zero_load(const char *dir, const hpt_train_opts *o, hpt_mem *mem, dp_shard *z,
                     hpt_gpt2 **model_out, hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                     hpt_train_pos *pos_out, hpt_state_section *sec, int *n_sec) {
    *model_out = NULL;
    *opt_out = NULL;
    *n_sec = 0;
    char path[PATH_MAX];
    manifest *m = malloc(sizeof *m);
    if (!m) return hpt_fail(HPT_ERR_OOM, "the checkpoint's manifest");
    hpt_status s = read_manifest(dir, m);
    hpt_model_config c;
    hpt_adamw_opts ao;
    int64_t t = 0;
    float prev = 0.0f;
    snprintf(path, sizeof path, "%s/zero.manifest", dir);
    if (s == HPT_OK) s = state_unpack_fields(m->f, path, &c, &ao, pos_out, &t, &prev);
    if (s == HPT_OK && hpt_offload_active(&o->offload))
        s = hpt_fail(HPT_ERR_UNSUPPORTED, "%s: a sharded checkpoint (--zero 1, 2) resumes without "
                     "the offload engine", path);
    hpt_gpt2 *model = NULL;
    hpt_optim *op = NULL;
    if (s == HPT_OK) s = hpt_gpt2_create_offload(mem, &c, NULL, &model);
    if (s == HPT_OK) s = dp_shard_init(o, model, z);
    if (s == HPT_OK) s = dp_optim_create(mem, model, &ao, z, &op);
    size_t nu = s == HPT_OK ? optim_units(model_table(model)) : 0;
    size_t np = s == HPT_OK ? hpt_model_num_params(model) : 0;
    /* the shards cover the units and the values, in order */
    for (int k = 0; s == HPT_OK && k < m->procs; k++) {
        const shard_rec *r = &m->sh[k];
        uint64_t u0 = k ? m->sh[k - 1].u_hi : 0, p0 = k ? m->sh[k - 1].p_hi : 0;
        if (r->u_lo != u0 || r->u_hi < r->u_lo || r->p_lo != p0 || r->p_hi < r->p_lo ||
            (k == m->procs - 1 && (r->u_hi != nu || r->p_hi != np)))
            s = hpt_fail(HPT_ERR_FORMAT, "%s: shard %d's ranges do not follow on", path, k);
    }
    size_t n_lo = s == HPT_OK ? z->ulo[z->rank] : 0, n_hi = s == HPT_OK ? (z->stage ? z->uhi[z->rank] : nu) : 0;
    hpt_optim_buf bufs[HPT_OPTIM_NUM_BUFS];
    if (s == HPT_OK) hpt_optim_state_buffers(op, bufs);
    region *rg = malloc((nu * HPT_OPTIM_NUM_BUFS + 1) * sizeof *rg);
    if (s == HPT_OK && !rg) s = hpt_fail(HPT_ERR_OOM, "the checkpoint's regions");
    for (int k = 0; s == HPT_OK && k < m->procs; k++) {
        const shard_rec *r = &m->sh[k];
        uint64_t nb[HPT_OPTIM_NUM_BUFS];
        optim_units_bytes(&c, &ao, r->u_lo, r->u_hi, nb);
        char fp[PATH_MAX];
        snprintf(fp, sizeof fp, "%s/%s", dir, r->file);
        s = check_head(fp, r, k, m->procs, nb);
        size_t n_rg = 0;
        uint64_t base = HEAD_BYTES;
        rg[n_rg++] = (region){base, (r->p_hi - r->p_lo) * sizeof(float),
                              (char *)(model_params(model) + r->p_lo)};
        base += (r->p_hi - r->p_lo) * sizeof(float);
        uint64_t start[HPT_OPTIM_NUM_BUFS];
        for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++) {
            start[i] = base;
            base += nb[i];
        }
        for (size_t u = HPT_MAX(r->u_lo, n_lo); s == HPT_OK && u < HPT_MIN(r->u_hi, n_hi); u++) {
            uint64_t fo[HPT_OPTIM_NUM_BUFS], fl[HPT_OPTIM_NUM_BUFS], to[HPT_OPTIM_NUM_BUFS], tl[HPT_OPTIM_NUM_BUFS];
            optim_unit_place(&c, &ao, r->u_lo, r->u_hi, u, fo, fl);
            optim_unit_place(&c, &ao, n_lo, n_hi, u, to, tl);
            for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++)
                if (fl[i]) rg[n_rg++] = (region){start[i] + fo[i], fl[i], (char *)bufs[i].data + to[i]};
        }
        if (s == HPT_OK && base + 12 != r->bytes)
            s = hpt_fail(HPT_ERR_FORMAT, "%s: the manifest's size does not match its shape", fp);
        if (s == HPT_OK) s = stream_file(fp, r, rg, n_rg);
    }
    free(rg);
    if (s == HPT_OK && io_crc32c(0, model_params(model), np * sizeof(float)) != m->weights_crc)
        s = hpt_fail(HPT_ERR_CHECKSUM, "%s: the weights put together from the shards are not the "
                     "saved ones (their CRC differs from the manifest's)", path);
    if (s == HPT_OK && m->has_ls) {
        hpt_mem_set_name(mem, "checkpoint section");
        s = hpt_mem_alloc(mem, HPT_TIER_HOST, HPT_CAT_IO, sizeof m->ls, &sec[0].data);
        if (s == HPT_OK) {
            memset(sec[0].name, 0, sizeof sec[0].name);
            strcpy(sec[0].name, "loss_scale");
            sec[0].bytes = sizeof m->ls;
            memcpy(sec[0].data, m->ls, sizeof m->ls);
            *n_sec = 1;
        }
    }
    free(m);
    if (s != HPT_OK) {
        hpt_optim_free(op);
        hpt_model_free(model);
        return s;
    }
    hpt_optim_set_t(op, t);
    hpt_optim_set_prev_norm(op, prev);
    *ao_out = ao;
    *model_out = model;
    *opt_out = op;
    return HPT_OK;
}

hpt_status zero_reshard(hpt_mem *mem, hpt_gpt2 *model, dp_shard *z, hpt_optim **opt) {
    if (!z->stage) {
        dp_optim_attach(*opt, z);
        return HPT_OK;
    }
    const hpt_adamw_opts *ao = hpt_optim_get_opts(*opt);
    const hpt_model_config *c = hpt_gpt2_get_config(model);
    size_t nu = optim_units(model_table(model)), lo = z->ulo[z->rank], hi = z->uhi[z->rank];
    hpt_optim *op;
    HPT_CHECK(dp_optim_create(mem, model, ao, z, &op));
    hpt_optim_buf from[HPT_OPTIM_NUM_BUFS], to[HPT_OPTIM_NUM_BUFS];
    hpt_optim_state_buffers(*opt, from);
    hpt_optim_state_buffers(op, to);
    for (size_t u = lo; u < hi; u++) {
        uint64_t fo[HPT_OPTIM_NUM_BUFS], fl[HPT_OPTIM_NUM_BUFS], oo[HPT_OPTIM_NUM_BUFS], ol[HPT_OPTIM_NUM_BUFS];
        optim_unit_place(c, ao, 0, nu, u, fo, fl);
        optim_unit_place(c, ao, lo, hi, u, oo, ol);
        for (int i = 0; i < HPT_OPTIM_NUM_BUFS; i++)
            if (fl[i]) memcpy((char *)to[i].data + oo[i], (const char *)from[i].data + fo[i], (size_t)fl[i]);
    }
    hpt_optim_set_t(op, hpt_optim_get_t(*opt));
    hpt_optim_set_prev_norm(op, hpt_optim_get_prev_norm(*opt));
    hpt_optim_free(*opt);
    *opt = op;
    return HPT_OK;
}
