/* test_data_order.c: the loader's seeded order and validation split (docs/data.md):
 *   (a) io_data_perm is a permutation of [0, n) for every n tried, the same for the same
 *       (seed, epoch), another for another epoch or seed;
 *   (b) shuffled stream rows: in an epoch each row of the data at most once, every token's
 *       target its successor; epochs differ; a second loader with the same seed reads the same
 *       batches; a loader put at a saved mid-epoch position (get_pos, set_pos) reads on as the
 *       first; positions of the other kind refused;
 *   (c) --val-split: no document (one spans two shards) in both sets; the validation tokens
 *       within one document of the fraction; the sets' documents and tokens add up; the
 *       choice changes with the seed; a single document refused;
 *   (d) packed rows shuffled: each of set_pack's rows at most once an epoch, none cut; packed
 *       rows of a split: each set's rows hold its examples only, no example in both.
 * Tokens are distinct ids (uint32 shards), so a row's first token says where it was read. */
#include "testlib.h"
#include "io/io_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define V (1 << 21)
#define DELIM 2000000u

static char *path_in(const char *name) {
    static char buf[4][1024];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", t_tmpdir(), name);
    return p;
}

static void check_perm(void) {
    static const uint64_t ns[] = {1, 2, 3, 5, 64, 1000, 4097};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        const uint64_t n = ns[k];
        uint8_t *seen = calloc(n, 1);
        int dup = 0, range = 0, same = 1, other_epoch = 0, other_seed = 0;
        for (uint64_t i = 0; i < n; i++) {
            uint64_t r = io_data_perm(i, n, 1234, 3);
            if (r >= n) { range++; continue; }
            dup += seen[r]++;
            same &= io_data_perm(i, n, 1234, 3) == r;
            other_epoch += io_data_perm(i, n, 1234, 4) != r;
            other_seed += io_data_perm(i, n, 99, 3) != r;
        }
        CHECK_MSG(!dup && !range, "n %llu: %d repeated, %d out of range", (unsigned long long)n, dup, range);
        CHECK(same);
        if (n >= 5) CHECK_MSG(other_epoch && other_seed, "n %llu: epoch 4 or seed 99 gives epoch 3's order",
                              (unsigned long long)n);
        free(seen);
    }
}

/* batches of a loader: each row's first input (B per batch) into first[] */
static void read_rows(hpt_dataloader *d, int B, int T, int batches, uint32_t *first, int *bad_next) {
    for (int b = 0; b < batches; b++) {
        const int32_t *x, *y;
        CHECK_OK(hpt_dataloader_next(d, &x, &y));
        for (int r = 0; r < B; r++) {
            first[(size_t)b * B + r] = (uint32_t)x[(size_t)r * T];
            for (int t = 0; t < T; t++) *bad_next += y[(size_t)r * T + t] != x[(size_t)r * T + t] + 1;
        }
    }
}

static void check_shuffle(hpt_mem *mem) {
    enum { N0 = 3001, N1 = 2000, B = 4, T = 16 };
    uint32_t *tok = malloc((N0 + N1) * 4);
    for (uint32_t i = 0; i < N0 + N1; i++) tok[i] = i;
    CHECK_OK(hpt_shard_write_u32(path_in("s_000.bin"), tok, N0));
    CHECK_OK(hpt_shard_write_u32(path_in("s_001.bin"), tok + N0, N1));
    const char *glob = path_in("s_*.bin");
    hpt_dataloader *a = NULL, *c = NULL;
    CHECK_OK(hpt_dataloader_open(mem, glob, B, T, V, &a));
    CHECK_OK(hpt_dataloader_open(mem, glob, B, T, V, &c));
    if (!a || !c) return;
    CHECK_OK(hpt_dataloader_order(a, 0, 0, 1, 7, NULL));
    CHECK_OK(hpt_dataloader_order(c, 0, 0, 1, 7, NULL));
    const size_t rows = (N0 + N1 - 1) / T, nb = rows / B; /* the shards end to end */
    CHECK_MSG(hpt_dataloader_num_batches(a) == nb, "%zu batches, want %zu", hpt_dataloader_num_batches(a), nb);
    uint32_t *e0 = malloc(nb * B * 4), *e1 = malloc(nb * B * 4), *e1c = malloc(nb * B * 4);
    int bad_next = 0;
    read_rows(a, B, T, (int)nb, e0, &bad_next);
    /* the second loader: half an epoch, a saved position, a fresh loader resumed from it */
    read_rows(c, B, T, (int)nb, e1c, &bad_next);
    read_rows(c, B, T, (int)nb / 2, e1c, &bad_next);
    int64_t sh, off;
    hpt_dataloader_get_pos(c, &sh, &off);
    CHECK_MSG(sh == -2 && off == (int64_t)(nb / 2) * B, "position (%lld, %lld) in epoch 1",
              (long long)sh, (long long)off);
    hpt_dataloader_free(c);
    CHECK_OK(hpt_dataloader_open(mem, glob, B, T, V, &c));
    CHECK_OK(hpt_dataloader_order(c, 0, 0, 1, 7, NULL));
    CHECK_STATUS(hpt_dataloader_set_pos(c, 0, 0), HPT_ERR_INVALID); /* a walk's position */
    CHECK_OK(hpt_dataloader_set_pos(c, sh, off));
    read_rows(c, B, T, (int)(nb - nb / 2), e1c + nb / 2 * B, &bad_next);
    read_rows(a, B, T, (int)nb, e1, &bad_next);
    CHECK_MSG(bad_next == 0, "%d targets are not their input's successor", bad_next);
    uint8_t *seen = calloc(rows, 1);
    int dup = 0, misplaced = 0, diff = 0, resumed = 0;
    for (size_t i = 0; i < nb * B; i++) {
        misplaced += e0[i] % T != 0;
        if (e0[i] / T < rows) dup += seen[e0[i] / T]++;
        diff += e0[i] != e1[i];
        resumed += e1[i] != e1c[i];
    }
    CHECK_MSG(!dup && !misplaced, "epoch 0: %d rows twice, %d not at a row's start", dup, misplaced);
    CHECK_MSG(diff > (int)(nb * B / 2), "epochs 0 and 1 share %zu of %zu places", nb * B - (size_t)diff, nb * B);
    CHECK_MSG(resumed == 0, "the resumed loader read %d rows the first did not", resumed);
    /* a walk in order refuses an indexed position */
    hpt_dataloader *w = NULL;
    CHECK_OK(hpt_dataloader_open(mem, glob, B, T, V, &w));
    if (w) CHECK_STATUS(hpt_dataloader_set_pos(w, -1, 0), HPT_ERR_INVALID);
    hpt_dataloader_free(w);
    free(seen);
    free(e0);
    free(e1);
    free(e1c);
    free(tok);
    hpt_dataloader_free(a);
    hpt_dataloader_free(c);
}

/* docs documents of 20..300 tokens, each opened by DELIM, over two shards cut inside one;
 * doc_of[id] the document of token id */
static void write_docs(const char *prefix, int docs, uint32_t seed, uint32_t *doc_of, uint64_t *len,
                       uint64_t *total) {
    uint32_t *tok = malloc((size_t)docs * 301 * 4);
    size_t n = 0;
    uint32_t id = 0, rng = seed;
    for (int d = 0; d < docs; d++) {
        rng = rng * 1664525u + 1013904223u;
        uint32_t L = 20 + (rng >> 8) % 281;
        tok[n++] = DELIM;
        for (uint32_t i = 1; i < L; i++, id++) {
            doc_of[id] = (uint32_t)d;
            tok[n++] = id;
        }
        len[d] = L;
    }
    size_t cut = n / 2 + 7; /* inside a document (the next shard does not open with DELIM) */
    while (tok[cut] == DELIM) cut++;
    char p[256];
    snprintf(p, sizeof p, "%s_000.bin", prefix);
    CHECK_OK(hpt_shard_write_u32(path_in(p), tok, cut));
    snprintf(p, sizeof p, "%s_001.bin", prefix);
    CHECK_OK(hpt_shard_write_u32(path_in(p), tok + cut, n - cut));
    *total = n;
    free(tok);
}

/* the documents of the tokens of one pass of a set (in order), into in_set */
static void set_docs(hpt_mem *mem, const char *glob, double f, int val, uint64_t seed,
                     const uint32_t *doc_of, uint8_t *in_set, hpt_data_split *info) {
    enum { B = 2, T = 8 };
    hpt_dataloader *d = NULL;
    CHECK_OK(hpt_dataloader_open(mem, glob, B, T, V, &d));
    if (!d) return;
    CHECK_OK(hpt_dataloader_order(d, f, val, 0, seed, info));
    size_t nb = hpt_dataloader_num_batches(d);
    for (size_t b = 0; b < nb; b++) {
        const int32_t *x, *y;
        CHECK_OK(hpt_dataloader_next(d, &x, &y));
        for (int i = 0; i < B * T; i++)
            if ((uint32_t)x[i] != DELIM) in_set[doc_of[x[i]]] = 1;
    }
    hpt_dataloader_free(d);
}

static void check_split(hpt_mem *mem) {
    enum { DOCS = 60 };
    uint32_t *doc_of = malloc((size_t)DOCS * 301 * 4);
    uint64_t len[DOCS], total, longest = 0;
    write_docs("d", DOCS, 11, doc_of, len, &total);
    for (int i = 0; i < DOCS; i++) longest = len[i] > longest ? len[i] : longest;
    const char *glob = path_in("d_*.bin");
    uint8_t tr[DOCS] = {0}, va[DOCS] = {0}, va2[DOCS] = {0};
    hpt_data_split ti, vi, v2;
    set_docs(mem, glob, 0.2, 0, 1234, doc_of, tr, &ti);
    set_docs(mem, glob, 0.2, 1, 1234, doc_of, va, &vi);
    set_docs(mem, glob, 0.2, 1, 99, doc_of, va2, &v2);
    int both = 0, seen = 0, other = 0;
    for (int i = 0; i < DOCS; i++) {
        both += tr[i] && va[i];
        seen += tr[i] || va[i];
        other += va[i] != va2[i];
    }
    CHECK_MSG(both == 0, "%d documents in both sets", both);
    CHECK_MSG(seen >= DOCS - 4, "only %d of %d documents read", seen, DOCS);
    CHECK_MSG(other > 0, "seeds 1234 and 99 chose the same validation documents");
    CHECK(ti.docs_total == DOCS && vi.docs_total == DOCS && ti.docs + vi.docs == DOCS);
    CHECK(ti.tokens + vi.tokens == total && vi.tokens_total == total);
    double want = 0.2 * (double)total;
    CHECK_MSG((double)vi.tokens >= want && (double)vi.tokens < want + (double)longest,
              "validation %llu tokens for 0.2 of %llu (the longest document %llu)",
              (unsigned long long)vi.tokens, (unsigned long long)total, (unsigned long long)longest);
    /* a single document: refused */
    write_docs("one", 1, 5, doc_of, len, &total);
    hpt_dataloader *d = NULL;
    CHECK_OK(hpt_dataloader_open(mem, path_in("one_*.bin"), 2, 8, V, &d));
    if (d) CHECK_STATUS(hpt_dataloader_order(d, 0.1, 0, 1, 1234, NULL), HPT_ERR_INVALID);
    hpt_dataloader_free(d);
    free(doc_of);
}

static void check_pack(hpt_mem *mem) {
    enum { B = 2, T = 16, EX = 90 };
    uint32_t tok[EX * 12], starts[EX];
    uint8_t tgt[EX * 12];
    size_t n = 0;
    for (int e = 0; e < EX; e++) {
        starts[e] = (uint32_t)n;
        int L = 3 + (e * 7) % 10;
        for (int i = 0; i < L; i++, n++) {
            tok[n] = (uint32_t)n;
            tgt[n] = i > 0;
        }
    }
    CHECK_OK(hpt_shard_write_masked(path_in("p_000.bin"), tok, tgt, n, starts, EX, 4));
    hpt_dataloader *walk = NULL, *sh = NULL;
    CHECK_OK(hpt_dataloader_open(mem, path_in("p_*.bin"), B, T, V, &walk));
    CHECK_OK(hpt_dataloader_open(mem, path_in("p_*.bin"), B, T, V, &sh));
    if (!walk || !sh) return;
    CHECK_OK(hpt_dataloader_set_pack(walk, HPT_PACK_ON));
    CHECK_OK(hpt_dataloader_set_pack(sh, HPT_PACK_ON));
    CHECK_OK(hpt_dataloader_order(sh, 0, 0, 1, 3, NULL));
    size_t nb = hpt_dataloader_num_batches(walk);
    CHECK(hpt_dataloader_num_batches(sh) == nb);
    /* the walk's rows (their first tokens and real lengths), then the shuffled epoch's */
    uint32_t first[2][64];
    int real[2][64], count[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        for (size_t b = 0; b < nb && b * B < 64; b++) {
            const int32_t *x, *y;
            CHECK_OK(hpt_dataloader_next(k ? sh : walk, &x, &y));
            const int32_t *pos = hpt_dataloader_positions(k ? sh : walk);
            for (int r = 0; r < B; r++) {
                int m = 0;
                while (m < T && !(m > 0 && pos[r * T + m] == 0)) m++; /* its first example */
                first[k][count[k]] = (uint32_t)x[r * T];
                real[k][count[k]++] = m;
            }
        }
    int missing = 0, dup = 0, cut = 0;
    for (int i = 0; i < count[1]; i++) {
        int hits = 0;
        for (int j = 0; j < count[0]; j++)
            if (first[0][j] == first[1][i]) hits++, cut += real[0][j] != real[1][i];
        missing += hits == 0;
        for (int j = 0; j < i; j++) dup += first[1][j] == first[1][i];
    }
    CHECK_MSG(!missing && !dup && !cut, "shuffled packed rows: %d not the walk's, %d twice, %d "
              "with another first example", missing, dup, cut);
    hpt_dataloader_free(walk);
    hpt_dataloader_free(sh);
    /* a split of the examples (a document each), packed: each set's rows, its examples only */
    int ex_of[EX * 12], set_of[EX];
    for (int e = 0; e < EX; e++) {
        set_of[e] = -1;
        for (size_t i = starts[e]; i < (e + 1 < EX ? starts[e + 1] : n); i++) ex_of[i] = e;
    }
    int both = 0, foreign = 0;
    uint64_t val_tokens = 0;
    for (int val = 0; val < 2; val++) {
        hpt_dataloader *d = NULL;
        hpt_data_split info;
        CHECK_OK(hpt_dataloader_open(mem, path_in("p_*.bin"), B, T, V, &d));
        if (!d) return;
        CHECK_OK(hpt_dataloader_set_pack(d, HPT_PACK_ON));
        CHECK_OK(hpt_dataloader_order(d, 0.3, val, 0, 1234, &info));
        if (val) val_tokens = info.tokens;
        for (size_t b = 0; b < hpt_dataloader_num_batches(d); b++) {
            const int32_t *x, *y;
            CHECK_OK(hpt_dataloader_next(d, &x, &y));
            const int32_t *pos = hpt_dataloader_positions(d);
            for (int i = 0; i < B * T; i++) {
                if (x[i] == 0 && !(pos[i] == 0 && y[i] >= 0)) continue; /* padding (input 0) */
                int e = ex_of[x[i]];
                both += set_of[e] >= 0 && set_of[e] != val;
                set_of[e] = val;
                /* an example's tokens in one row, in order, from its first */
                foreign += x[i] - (int32_t)starts[e] != pos[i];
            }
        }
        hpt_dataloader_free(d);
    }
    CHECK_MSG(!both && !foreign, "packed split: %d examples in both sets, %d tokens off their "
              "example's place", both, foreign);
    CHECK_MSG((double)val_tokens >= 0.3 * (double)n && (double)val_tokens < 0.3 * (double)n + 13,
              "packed split: validation %llu of %zu tokens", (unsigned long long)val_tokens, n);
}

int main(void) {
    hpt_mem *mem = NULL;
    CHECK_OK(hpt_mem_create(&mem));
    check_perm();
    check_shuffle(mem);
    check_split(mem);
    check_pack(mem);
    hpt_mem_destroy(mem);
    return t_done("test_data_order");
}
