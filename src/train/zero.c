/* zero.c: ZeRO's sharded checkpoints, written by the in-memory trainer's stages 1-2 and the
 * offload engine's stages 1-3 alike: each rank writes what it owns (zero_side.c says which
 * values) as pieces, values [a, z) of a unit, into its shard, then rank 0 the manifest; a load
 * re-cuts for any M and any stage, in memory or in the engine. The bytes: docs/formats.md,
 * "ZeRO's sharded checkpoints"; what is written and kept where: docs/zero.md, "Checkpoints".
 * Invariants: a shard says where each of its bytes lies in one process's state.bin; the
 * manifest names the shards of its own save and is renamed last, so a crash leaves the previous
 * manifest and shards loadable (after it rank 0 removes the shards it does not name and any
 * state.bin); a load checks that the pieces tile every unit exactly once and each shard's CRC
 * before keeping anything; nothing whole is gathered on either side (a 4 MiB read buffer and
 * the piece records), except a state.bin resumed at stage 1 or 2 in memory (zero_reshard). */
#include "core/core.h"
#include "io/io.h"
#include "model/model.h"
#include "optim/optim.h"
#include "dist/dist.h"
#include "offload/engine.h"
#include "train/train_int.h"
#include "train/zero_int.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char k_magic[8] = {'H', 'P', 'T', 'Z', 'E', 'R', 'O', '2'};
static const char k_end[8] = {'H', 'P', 'T', 'E', 'N', 'D', 0, 0};
#define NB HPT_OPTIM_NUM_BUFS
#define HEAD_BYTES (8 + 8 * 8 + 8 * NB)
#define REC 17 /* uint64 per piece record */
#define NO_COMP UINT64_MAX
#define MAX_SHARDS DP_MAX_PROCS

typedef struct {
    char file[64];
    uint64_t pieces, values, bytes;
    uint32_t crc;
} shard_rec;

typedef struct {
    int64_t f[STATE_NFIELDS];
    int procs, stage, has_ls;
    uint64_t comp_S;
    int64_t ls[3];
    shard_rec sh[MAX_SHARDS];
} manifest;

int zero_manifest_exists(const char *dir) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/zero.manifest", dir);
    return access(p, R_OK) == 0;
}

static uint64_t pad8(uint64_t n) { return (n + 7) / 8 * 8; }

/* A piece's record: where its bytes go in one process's state.bin. */
static void piece_rec(const zside *s, const zpiece *p, uint64_t r[REC]) {
    int i;
    size_t sl, sn, off;
    zs_unit(s, p->u, &i, &sl, &sn, &off);
    r[0] = p->u;
    r[1] = p->a;
    r[2] = p->z;
    r[3] = off + p->a;
    r[4] = s->comp_S && s->t->t[i].layer == HPT_LAYER_STACKED ? zs_comp_whole(s, p->u, p->a) : NO_COMP;
    optim_place_whole(&s->c, &s->ao, p->u, p->a, p->z, r + 5, r + 5 + NB);
}

/* ---- save ---- */

static hpt_status write_pad(io_atomic *w, uint64_t n) {
    static const char zeros[8] = {0};
    return n % 8 ? io_atomic_write(w, zeros, 8 - n % 8) : HPT_OK;
}

static hpt_status write_body(io_atomic *w, zside *s, const zpiece *pc, size_t np, const uint64_t *recs,
                             uint64_t nw, const uint64_t *nb, uint64_t nc) {
    hpt_status st = HPT_OK;
    for (size_t k = 0; k < np && st == HPT_OK; k++) { /* the weights */
        const float *p;
        st = zs_weights_get(s, pc[k].u, pc[k].a, pc[k].z - pc[k].a, &p);
        if (st == HPT_OK) st = io_atomic_write(w, p, (pc[k].z - pc[k].a) * sizeof(float));
    }
    if (st == HPT_OK) st = write_pad(w, nw * sizeof(float));
    for (int b = 0; b < NB && st == HPT_OK; b++) { /* each state buffer's pieces */
        for (size_t k = 0; k < np && st == HPT_OK; k++) {
            char *p;
            uint64_t len;
            int eb;
            st = zs_state_at(s, b, pc[k].u, pc[k].a, pc[k].z, &p, &len, &eb);
            if (st == HPT_OK && len != recs[k * REC + 5 + NB + b])
                st = hpt_fail(HPT_ERR_INVALID, "a checkpoint's piece: %llu bytes of state buffer %d, "
                              "the whole layout has %llu", (unsigned long long)len, b,
                              (unsigned long long)recs[k * REC + 5 + NB + b]);
            if (st == HPT_OK && eb >= 0) {
                const float *q;
                st = zs_state_get(s, eb, pc[k].u, pc[k].a, pc[k].z - pc[k].a, &q);
                p = (char *)(uintptr_t)q;
            }
            if (st == HPT_OK && len) st = io_atomic_write(w, p, (size_t)len);
        }
        if (st == HPT_OK) st = write_pad(w, nb[b]);
    }
    for (size_t k = 0; k < np && st == HPT_OK; k++) { /* the Kahan compensation */
        if (recs[k * REC + 4] == NO_COMP) continue;
        const uint16_t *c = zs_comp(s, pc[k].u, pc[k].a);
        if (!c) st = hpt_fail(HPT_ERR_INVALID, "a checkpoint's piece: no compensation kept for it");
        else st = io_atomic_write(w, c, (pc[k].z - pc[k].a) * sizeof(uint16_t));
    }
    if (st == HPT_OK) st = write_pad(w, nc * sizeof(uint16_t));
    return st;
}

static hpt_status write_shard(const char *path, zside *s, int64_t step, shard_rec *rec) {
    zpiece *pc;
    size_t np;
    HPT_CHECK(zs_pieces(s, &pc, &np));
    uint64_t *recs = malloc((np ? np : 1) * REC * sizeof *recs);
    if (!recs) {
        free(pc);
        return hpt_fail(HPT_ERR_OOM, "the checkpoint's piece records");
    }
    uint64_t nw = 0, nc = 0, nb[NB] = {0};
    for (size_t k = 0; k < np; k++) {
        piece_rec(s, &pc[k], recs + k * REC);
        nw += pc[k].z - pc[k].a;
        if (recs[k * REC + 4] != NO_COMP) nc += pc[k].z - pc[k].a;
        for (int b = 0; b < NB; b++) nb[b] += recs[k * REC + 5 + NB + b];
    }
    int64_t h[8] = {s->rank, s->size, (int64_t)np, step, (int64_t)nw, (int64_t)nc, 0, 0};
    uint64_t total = HEAD_BYTES + np * REC * 8 + pad8(nw * 4) + pad8(nc * 2) + 12;
    for (int b = 0; b < NB; b++) total += pad8(nb[b]);
    io_atomic w;
    hpt_status st = io_atomic_begin(&w, path);
    if (st == HPT_OK) {
        st = io_atomic_write(&w, k_magic, 8);
        if (st == HPT_OK) st = io_atomic_write(&w, h, sizeof h);
        if (st == HPT_OK) st = io_atomic_write(&w, nb, sizeof nb);
        if (st == HPT_OK && np) st = io_atomic_write(&w, recs, np * REC * sizeof *recs);
        if (st == HPT_OK) st = write_body(&w, s, pc, np, recs, nw, nb, nc);
        uint32_t crc = w.crc;
        if (st == HPT_OK) st = io_atomic_write(&w, &crc, 4);
        if (st == HPT_OK) st = io_atomic_write(&w, k_end, 8);
        rec->crc = crc;
        if (st == HPT_OK) st = io_atomic_commit(&w);
        else io_atomic_abort(&w);
    }
    rec->pieces = np;
    rec->values = nw;
    rec->bytes = total;
    free(recs);
    free(pc);
    return st;
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

static hpt_status write_manifest(const char *dir, int stage, int procs, uint64_t comp_S,
                                 const int64_t *f, const int64_t *ls, const shard_rec *sh) {
    char path[PATH_MAX], line[512];
    snprintf(path, sizeof path, "%s/zero.manifest", dir);
    io_atomic w;
    HPT_CHECK(io_atomic_begin(&w, path));
    int n = snprintf(line, sizeof line, "hptrain-zero 2\nstage %d\nprocs %d\n", stage, procs);
    hpt_status s = io_atomic_write(&w, line, (size_t)n);
    if (s == HPT_OK && comp_S) {
        n = snprintf(line, sizeof line, "comp %llu\n", (unsigned long long)comp_S);
        s = io_atomic_write(&w, line, (size_t)n);
    }
    if (s == HPT_OK) s = io_atomic_write(&w, "fields", 6);
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
    for (int q = 0; q < procs && s == HPT_OK; q++) {
        n = snprintf(line, sizeof line, "shard %d %s pieces %llu values %llu bytes %llu crc %08x\n",
                     q, sh[q].file, (unsigned long long)sh[q].pieces, (unsigned long long)sh[q].values,
                     (unsigned long long)sh[q].bytes, sh[q].crc);
        s = io_atomic_write(&w, line, (size_t)n);
    }
    if (s != HPT_OK) {
        io_atomic_abort(&w);
        return s;
    }
    return io_atomic_commit(&w);
}

hpt_status zero_save(const dp_shard *z, int stage, const char *dir, hpt_model *model,
                     const hpt_optim *opt, const hpt_adamw_opts *ao, const hpt_train_pos *pos,
                     const int64_t *ls) {
    char path[PATH_MAX];
    shard_rec mine = {0};
    zside sd;
    hpt_status s = zs_init(&sd, model, (hpt_optim *)(uintptr_t)opt, z);
    int r = sd.rank, N = sd.size;
    snprintf(mine.file, sizeof mine.file, "zero-%lld-%dof%d.bin", (long long)pos->step, r, N);
    snprintf(path, sizeof path, "%s/%s", dir, mine.file);
    if (s == HPT_OK) s = write_shard(path, &sd, pos->step, &mine);
    /* every rank's outcome and record, so every rank returns the same status */
    struct { int32_t st, pad; shard_rec rec; } me, *all;
    memset(&me, 0, sizeof me); /* no padding's bytes reach the other ranks unset */
    me.st = (int32_t)s;
    me.rec = mine;
    all = calloc((size_t)N, sizeof *all);
    if (!all) return hpt_fail(HPT_ERR_OOM, "the checkpoint's records");
    hpt_status c = dist_allgather_raw(&me, sizeof me, all, "the checkpoint's shards");
    int bad = -1;
    for (int q = 0; c == HPT_OK && q < N; q++)
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
        for (int q = 0; q < N; q++) sh[q] = all[q].rec;
        int64_t f[STATE_NFIELDS];
        state_pack_fields(model, opt, ao, pos, f);
        s = write_manifest(dir, stage, N, sd.comp_S, f, ls, sh);
        if (s == HPT_OK) remove_others(dir, pos->step, N);
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
        unsigned long long a, b, c, cs;
        unsigned crc;
        if (sscanf(line, "hptrain-zero %d", &ver) == 1 || sscanf(line, "stage %d", &m->stage) == 1 ||
            sscanf(line, "procs %d", &m->procs) == 1)
            continue;
        if (sscanf(line, "comp %llu", &cs) == 1) {
            m->comp_S = cs;
        } else if (!strncmp(line, "fields", 6)) {
            char *p = line + 6, *end;
            for (nf = 0; nf < STATE_NFIELDS; nf++, p = end) {
                m->f[nf] = strtoll(p, &end, 10);
                if (end == p) break;
            }
        } else if (sscanf(line, "loss_scale %lld %lld %lld", (long long *)&m->ls[0],
                          (long long *)&m->ls[1], (long long *)&m->ls[2]) == 3) {
            m->has_ls = 1;
        } else if (sscanf(line, "shard %d %63s pieces %llu values %llu bytes %llu crc %x", &q, file,
                          &a, &b, &c, &crc) == 6 && q == nsh && q < MAX_SHARDS && !strchr(file, '/')) {
            m->sh[q] = (shard_rec){.pieces = a, .values = b, .bytes = c, .crc = crc};
            snprintf(m->sh[q].file, sizeof m->sh[q].file, "%s", file);
            nsh++;
        } else {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: unexpected line '%.60s'%s", path, line,
                         ver == 1 ? " (a version-1 manifest: written before the engine's shards; "
                                    "resume it with the build that wrote it)" : "");
        }
    }
    fclose(fp);
    if (s == HPT_OK && (ver != 2 || nf != STATE_NFIELDS || m->procs < 1 || nsh != m->procs))
        s = hpt_fail(HPT_ERR_FORMAT, "%s: malformed (version %d, %d fields, %d of %d shards)", path,
                     ver, nf, nsh, m->procs);
    return s;
}

/* Where a piece's kept part goes: dst, or (dst NULL) zs_weights_put (eb -1) / zs_state_put. */
typedef struct {
    uint64_t off, len; /* in the file */
    char *dst;
    int eb;
    size_t u, x;
} region;

/* Streams path (size bytes) once: its checksum checked, each region put where it goes. Float
 * regions that are put (not copied) start on 4-byte file offsets (the sections are 8-aligned). */
static hpt_status stream_file(zside *sd, const char *path, const shard_rec *rec, const region *rg,
                              size_t n_rg) {
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
        for (size_t k = 0; k < n_rg && s == HPT_OK; k++) { /* region k's part in [o, o + len) */
            uint64_t a = HPT_MAX(rg[k].off, o), b = HPT_MIN(rg[k].off + rg[k].len, o + len);
            if (a >= b) continue;
            if (rg[k].dst) {
                memcpy(rg[k].dst + (a - rg[k].off), buf + (a - o), (size_t)(b - a));
                continue;
            }
            size_t at = rg[k].x + (size_t)(a - rg[k].off) / 4, n = (size_t)(b - a) / 4;
            const float *src = (const float *)(const void *)(buf + (a - o));
            s = rg[k].eb < 0 ? zs_weights_put(sd, rg[k].u, at, n, src)
                             : zs_state_put(sd, rg[k].eb, rg[k].u, at, n, src);
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

/* Shard k's header and piece records (*recs, malloc'd): what the manifest says, each record
 * what the geometry says; *nw, *nc, nb: its sections' sizes. */
static hpt_status read_head(const char *path, const zside *sd, const manifest *m, int k,
                            uint64_t **recs, uint64_t *nw, uint64_t *nc, uint64_t nb[NB]) {
    FILE *fp;
    uint64_t size;
    *recs = NULL;
    HPT_CHECK(io_open_read(path, &fp, &size));
    char magic[8];
    int64_t h[8];
    const shard_rec *r = &m->sh[k];
    hpt_status s = io_read_exact(fp, magic, 8, path, "magic");
    if (s == HPT_OK) s = io_read_exact(fp, h, sizeof h, path, "header");
    if (s == HPT_OK) s = io_read_exact(fp, nb, NB * sizeof *nb, path, "header");
    if (s == HPT_OK && (memcmp(magic, k_magic, 8) || h[0] != k || h[1] != m->procs ||
                        (uint64_t)h[2] != r->pieces || h[3] != m->f[12] || (uint64_t)h[4] != r->values ||
                        r->pieces > sd->nu))
        s = hpt_fail(HPT_ERR_FORMAT, "%s is not shard %d of %d as the manifest describes it",
                     path, k, m->procs);
    if (s == HPT_OK) {
        *recs = malloc((r->pieces ? r->pieces : 1) * REC * sizeof **recs);
        if (!*recs) s = hpt_fail(HPT_ERR_OOM, "the checkpoint's piece records");
    }
    if (s == HPT_OK && r->pieces) s = io_read_exact(fp, *recs, r->pieces * REC * 8, path, "pieces");
    fclose(fp);
    uint64_t w = 0, c = 0, b[NB] = {0}, want[REC];
    for (uint64_t p = 0; s == HPT_OK && p < r->pieces; p++) {
        const uint64_t *q = *recs + p * REC;
        int i;
        size_t sl, sn, off;
        if (q[0] < sd->nu) zs_unit(sd, q[0], &i, &sl, &sn, &off);
        if (q[0] >= sd->nu || q[1] >= q[2] || q[2] > sn) {
            s = hpt_fail(HPT_ERR_FORMAT, "%s: piece %llu is not part of a unit", path, (unsigned long long)p);
            break;
        }
        zside g = *sd; /* the geometry of the file's compensation (the engine's slices) */
        g.comp_S = sd->eng ? m->comp_S : 0;
        piece_rec(&g, &(zpiece){q[0], q[1], q[2]}, want);
        if (!g.comp_S) want[4] = q[4]; /* no engine here: the file's is not checked */
        if (memcmp(want, q, sizeof want))
            s = hpt_fail(HPT_ERR_FORMAT, "%s: piece %llu's places are not this shape's", path,
                         (unsigned long long)p);
        w += q[2] - q[1];
        if (q[4] != NO_COMP) c += q[2] - q[1];
        for (int j = 0; j < NB; j++) b[j] += q[5 + NB + j];
    }
    *nw = w;
    *nc = c;
    uint64_t total = HEAD_BYTES + r->pieces * REC * 8 + pad8(w * 4) + pad8(c * 2) + 12;
    for (int j = 0; j < NB; j++) total += pad8(nb[j]);
    if (s == HPT_OK && (memcmp(b, nb, sizeof b) || (uint64_t)h[5] != c || total != r->bytes))
        s = hpt_fail(HPT_ERR_FORMAT, "%s: its sizes do not add up (corrupt)", path);
    if (s != HPT_OK) {
        free(*recs);
        *recs = NULL;
    }
    return s;
}

static int cmp_piece(const void *x, const void *y) {
    const zpiece *a = x, *b = y;
    if (a->u != b->u) return a->u < b->u ? -1 : 1;
    return a->a < b->a ? -1 : a->a > b->a;
}

/* The pieces of all shards tile every unit once. */
static hpt_status check_tiling(const zside *sd, uint64_t *const *recs, const manifest *m,
                               const char *path) {
    size_t total = 0;
    for (int k = 0; k < m->procs; k++) total += m->sh[k].pieces;
    zpiece *all = malloc((total ? total : 1) * sizeof *all);
    if (!all) return hpt_fail(HPT_ERR_OOM, "the checkpoint's piece list");
    size_t n = 0;
    for (int k = 0; k < m->procs; k++)
        for (uint64_t p = 0; p < m->sh[k].pieces; p++)
            all[n++] = (zpiece){recs[k][p * REC], recs[k][p * REC + 1], recs[k][p * REC + 2]};
    qsort(all, n, sizeof *all, cmp_piece);
    hpt_status s = HPT_OK;
    size_t k = 0;
    for (size_t u = 0; u < sd->nu && s == HPT_OK; u++) {
        int i;
        size_t sl, sn, off, at = 0;
        zs_unit(sd, u, &i, &sl, &sn, &off);
        for (; k < n && all[k].u == u && all[k].a == at; k++) at = all[k].z;
        if (at != sn || (k < n && all[k].u == u))
            s = hpt_fail(HPT_ERR_FORMAT, "%s: the shards do not hold unit %zu exactly once "
                         "(values up to %zu of %zu)", path, u, at, sn);
    }
    free(all);
    return s;
}

/* Shard k's regions: of each piece the weights and state this process keeps, and the
 * compensation where it keeps one. */
static hpt_status shard_regions(zside *sd, const manifest *m, const uint64_t *recs, uint64_t np,
                                uint64_t nw, const uint64_t nb[NB], region *rg, size_t *n_rg) {
    uint64_t w0 = HEAD_BYTES + np * REC * 8, b0[NB], c0 = w0 + pad8(nw * 4);
    for (int b = 0; b < NB; b++) {
        b0[b] = c0;
        c0 += pad8(nb[b]);
    }
    uint64_t cw = 0, cb[NB] = {0}, cc = 0;
    *n_rg = 0;
    for (uint64_t p = 0; p < np; p++) {
        const uint64_t *q = recs + p * REC;
        size_t u = q[0], a = q[1], z = q[2], wa, wz, sa, sz;
        zs_held(sd, u, &wa, &wz, &sa, &sz);
        size_t x = HPT_MAX(a, wa), y = HPT_MIN(z, wz);
        if (x < y) {
            region r = {w0 + (cw + x - a) * 4, (y - x) * 4, NULL, -1, u, x};
            int i;
            size_t sl, sn, off;
            zs_unit(sd, u, &i, &sl, &sn, &off);
            if (!sd->eng || sd->t->t[i].layer != HPT_LAYER_STACKED) { /* memory: copied there */
                const float *dp;
                HPT_CHECK(zs_weights_get(sd, u, x, y - x, &dp));
                r.dst = (char *)(uintptr_t)dp;
            }
            rg[(*n_rg)++] = r;
        }
        x = HPT_MAX(a, sa);
        y = HPT_MIN(z, sz);
        for (int b = 0; b < NB && x < y; b++) {
            uint64_t fo[NB], fl[NB], lo[NB], ll[NB];
            optim_place_whole(&sd->c, &sd->ao, u, a, x, fo, fl); /* bytes of [a, x) */
            optim_place_whole(&sd->c, &sd->ao, u, x, y, lo, ll);
            if (!ll[b]) continue;
            char *dst;
            uint64_t len;
            int eb;
            HPT_CHECK(zs_state_at(sd, b, u, x, y, &dst, &len, &eb));
            if (len != ll[b])
                return hpt_fail(HPT_ERR_FORMAT, "a checkpoint's piece: %llu bytes of state buffer "
                                "%d, this run holds %llu", (unsigned long long)ll[b], b,
                                (unsigned long long)len);
            rg[(*n_rg)++] = (region){b0[b] + cb[b] + fl[b], ll[b], dst, eb, u, x};
        }
        if (q[4] != NO_COMP && x < y && sd->comp_S) { /* the compensation goes with the state's cut */
            uint16_t *c = zs_comp(sd, u, x);
            if (c) rg[(*n_rg)++] = (region){c0 + (cc + x - a) * 2, (y - x) * 2, (char *)c, -1, u, x};
        }
        cw += z - a;
        for (int b = 0; b < NB; b++) cb[b] += q[5 + NB + b];
        if (q[4] != NO_COMP) cc += z - a;
    }
    return HPT_OK;
}

hpt_status zero_load(const char *dir, const hpt_train_opts *o, hpt_mem *mem, dp_shard *z,
                     hpt_model **model_out, hpt_optim **opt_out, hpt_adamw_opts *ao_out,
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
    hpt_model *model = NULL;
    hpt_optim *op = NULL;
    const hpt_offload_opts *off = hpt_offload_active(&o->offload) ? &o->offload : NULL;
    if (s == HPT_OK) s = hpt_model_create_config_offload(mem, &c, off, &model);
    if (s == HPT_OK) s = dp_shard_init(o, model, z);
    if (s == HPT_OK) s = dp_optim_create(mem, model, &ao, z, &op);
    zside sd;
    if (s == HPT_OK) s = zs_init(&sd, model, op, z);
    uint64_t *recs[MAX_SHARDS] = {0}, nw[MAX_SHARDS], nc[MAX_SHARDS], nb[MAX_SHARDS][NB];
    for (int k = 0; s == HPT_OK && k < m->procs; k++) {
        char fp[PATH_MAX];
        snprintf(fp, sizeof fp, "%s/%s", dir, m->sh[k].file);
        s = read_head(fp, &sd, m, k, &recs[k], &nw[k], &nc[k], nb[k]);
        if (s == HPT_ERR_FORMAT) { /* a damaged header: say so when the checksum does */
            char why[512];
            snprintf(why, sizeof why, "%s", hpt_last_error());
            hpt_status c2 = stream_file(&sd, fp, &m->sh[k], NULL, 0);
            if (c2 == HPT_OK) s = hpt_fail(HPT_ERR_FORMAT, "%s", why);
            else s = c2;
        }
    }
    if (s == HPT_OK) s = check_tiling(&sd, recs, m, path);
    for (int k = 0; s == HPT_OK && k < m->procs; k++) {
        char fp[PATH_MAX];
        snprintf(fp, sizeof fp, "%s/%s", dir, m->sh[k].file);
        size_t n_rg = 0;
        region *rg = malloc((m->sh[k].pieces * (NB + 2) + 1) * sizeof *rg);
        if (!rg) s = hpt_fail(HPT_ERR_OOM, "the checkpoint's regions");
        if (s == HPT_OK) s = shard_regions(&sd, m, recs[k], m->sh[k].pieces, nw[k], nb[k], rg, &n_rg);
        if (s == HPT_OK) s = stream_file(&sd, fp, &m->sh[k], rg, n_rg);
        free(rg);
    }
    for (int k = 0; k < m->procs; k++) free(recs[k]);
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

hpt_status zero_reshard(hpt_mem *mem, hpt_model *model, dp_shard *z, hpt_optim **opt) {
    if (!z->stage) {
        dp_optim_attach(*opt, z);
        return HPT_OK;
    }
    const hpt_adamw_opts *ao = hpt_optim_get_opts(*opt);
    const hpt_model_config *c = hpt_model_get_config(model);
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
