/* tok_oracle.h: the tokenizer tests' oracle fixtures, read and compared in one place
 * (test_tokenizer.c: GPT-2 against gpt-3-encoder; test_tokenizer_llama3.c: Llama 3 against
 * llama3-tokenizer-js). node makes a fixture with the oracle's script (tests/tokenizer_oracle.js,
 * tests/llama3_oracle.js); its format, little-endian: an 8-byte magic, u32 FNV-1a hash of the
 * script's bytes (a fixture made by another version of the script is made again), u32 length +
 * the Unicode version of node, u32 record count, then per record: u32 name length, name, u32
 * flags, u32 text length, text, u32 id count, the ids (int32). Flags: 1 the ids depend on
 * Unicode's tables (skipped when node's version is not the tables'), 2 encode with special
 * tokens (HPT_TOK_SPECIAL), 4 Llama 3.1's specials only, 8 decode need not give the text back
 * (a normaliser changed it: counted as `lossy`, not checked).
 * Header-only (static inline), for the tests that include it. */
#ifndef HPT_TESTS_TOK_ORACLE_H
#define HPT_TESTS_TOK_ORACLE_H

#include "testlib.h"

#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define TOK_MIN(a, b) ((a) < (b) ? (a) : (b))

static inline double tok_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* FNV-1a of a file's bytes, as the oracle scripts stamp their fixtures; 0 if unreadable. */
static inline uint32_t tok_file_hash(const char *path) {
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return 0;
    uint32_t h = 0x811c9dc5u;
    for (int c; (c = fgetc(f)) != EOF;) h = (h ^ (uint32_t)c) * 0x01000193u;
    fclose(f);
    return h;
}

/* The fixture `name` in the directory argv[1] (else $HPT_TOKENIZER_FIXTURES, else the test's
 * temporary directory), made by `node script DIR` when it is missing or was made by another
 * version of the script (without the script, a fixture found is used); NULL, with the reason
 * on stderr, if there is none. */
static inline const char *tok_fixture(int argc, char **argv, const char *name, const char *script,
                                      const char *who) {
    const char *dir = argc > 1 ? argv[1] : getenv("HPT_TOKENIZER_FIXTURES");
    if (dir && !*dir) dir = NULL;
    static char fix[1024];
    snprintf(fix, sizeof fix, "%s/%s", dir ? dir : t_tmpdir(), name);
    int have_script = script && access(script, R_OK) == 0;
    FILE *f = dir ? fopen(fix, "rb") : NULL;
    if (f) {
        unsigned char head[12];
        uint32_t stamp = 0;
        if (fread(head, 1, sizeof head, f) == sizeof head) memcpy(&stamp, head + 8, 4);
        fclose(f);
        if (!have_script || stamp == tok_file_hash(script)) return fix;
        printf("%s: %s is from another %s; making it again\n", who, fix, script);
    }
    if (!have_script) {
        fprintf(stderr, "%s: the oracle's script %s is not found\n", who, script ? script : "");
        return NULL;
    }
    char a0[] = "node", a1[1024], a2[1024];
    snprintf(a1, sizeof a1, "%s", script);
    snprintf(a2, sizeof a2, "%s", dir ? dir : t_tmpdir());
    char *args[] = {a0, a1, a2, NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, "node", NULL, NULL, args, environ), status = 0;
    if (rc != 0) {
        fprintf(stderr, "%s: cannot run node (%s): install node and run `npm install` in the "
                "repository, or set HPT_ALLOW_NO_NODE=1 to skip the oracle\n", who, strerror(rc));
        return NULL;
    }
    double t0 = tok_now_s();
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: node %s failed (status %d)%s\n", who, script, status,
                WIFEXITED(status) && WEXITSTATUS(status) == 127
                    ? ": node not found; install node and run `npm install`, or set HPT_ALLOW_NO_NODE=1"
                    : "");
        return NULL;
    }
    printf("%s: oracle made by node in %.1f s\n", who, tok_now_s() - t0);
    return access(fix, R_OK) == 0 ? fix : NULL;
}

/* Without a fixture: 1 (skip, said) when HPT_ALLOW_NO_NODE=1, else a failed check and 0. */
static inline int tok_no_fixture_allowed(const char *who) {
    const char *allow = getenv("HPT_ALLOW_NO_NODE");
    if (allow && strcmp(allow, "1") == 0) {
        printf("%s: SKIPPED the comparison with the oracle (HPT_ALLOW_NO_NODE=1)\n", who);
        return 1;
    }
    CHECK_MSG(0, "%s: no oracle fixture (node or node_modules missing: npm install); "
              "HPT_ALLOW_NO_NODE=1 skips", who);
    return 0;
}

static inline uint32_t tok_rd32(const unsigned char **p, const unsigned char *end, int *ok) {
    uint32_t v = 0;
    if (end - *p < 4) { *ok = 0; return 0; }
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

/* 1 if ids[0..m) are valid ids whose bytes, in order, are exactly text[0..n) */
static inline int tok_decodes_to(hpt_tokenizer *t, const int32_t *ids, size_t m,
                                 const unsigned char *text, size_t n) {
    size_t pos = 0;
    for (size_t i = 0; i < m; i++) {
        const char *b;
        size_t l;
        if (hpt_tokenizer_decode(t, ids[i], &b, &l) != HPT_OK || pos + l > n ||
            memcmp(text + pos, b, l) != 0)
            return 0;
        pos += l;
    }
    return pos == n;
}

/* What a comparison found */
typedef struct {
    char unicode[32]; /* node's Unicode version */
    uint32_t n_rec;
    int well_formed;  /* the whole fixture was read, to its last byte */
    size_t ok, bad, skip, undecodable, lossy, bytes, ids, moby_bytes, moby_ids;
    double secs, moby_s; /* encode time, all and Moby-Dick's texts ("moby/...") */
} tok_totals;

/* Encodes every record of the fixture (data, size; magic checked) with t and compares the ids
 * with the oracle's (the first 10 differences printed: who, record, first differing id), and
 * decodes them back to the text. Records with a flag in `skip`, or flagged 1 when node's
 * Unicode is not `tables_unicode`, are skipped. */
static inline void tok_compare(hpt_tokenizer *t, const unsigned char *data, size_t size,
                               const char *magic, unsigned skip, const char *tables_unicode,
                               const char *who, tok_totals *s) {
    memset(s, 0, sizeof *s);
    const unsigned char *p = data + 8, *end = data + size;
    int ok = size >= 8 && memcmp(data, magic, 8) == 0;
    (void)tok_rd32(&p, end, &ok); /* the script's hash */
    uint32_t ulen = tok_rd32(&p, end, &ok);
    if (ok && ulen < sizeof s->unicode && (size_t)(end - p) >= ulen) {
        memcpy(s->unicode, p, ulen);
        p += ulen;
    } else {
        ok = 0;
    }
    s->n_rec = tok_rd32(&p, end, &ok);
    if (strcmp(s->unicode, tables_unicode) != 0) skip |= 1;
    for (uint32_t r = 0; ok && r < s->n_rec; r++) {
        uint32_t nlen = tok_rd32(&p, end, &ok);
        if (!ok || (size_t)(end - p) < nlen) { ok = 0; break; }
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)TOK_MIN(nlen, 63u), (const char *)p);
        p += nlen;
        uint32_t flags = tok_rd32(&p, end, &ok), tlen = tok_rd32(&p, end, &ok);
        if (!ok || (size_t)(end - p) < tlen) { ok = 0; break; }
        const unsigned char *text = p;
        p += tlen;
        uint32_t n_ids = tok_rd32(&p, end, &ok);
        if (!ok || (size_t)(end - p) / 4 < n_ids) { ok = 0; break; }
        const unsigned char *want = p;
        p += 4 * (size_t)n_ids;
        if (flags & skip) { s->skip++; continue; }
        int32_t *ids;
        size_t m;
        double t0 = tok_now_s();
        hpt_status st = hpt_tokenizer_encode_ex(t, (const char *)text, tlen,
                                                flags & 2 ? HPT_TOK_SPECIAL : 0, &ids, &m);
        double dt = tok_now_s() - t0;
        s->secs += dt;
        if (strncmp(name, "moby/", 5) == 0) { s->moby_bytes += tlen; s->moby_ids += n_ids; s->moby_s += dt; }
        s->bytes += tlen;
        s->ids += n_ids;
        if (st != HPT_OK) { CHECK_OK(st); s->bad++; continue; }
        size_t first = SIZE_MAX;
        for (size_t i = 0; i < TOK_MIN(m, (size_t)n_ids); i++) {
            int32_t w;
            memcpy(&w, want + 4 * i, 4);
            if (ids[i] != w) { first = i; break; }
        }
        if (first == SIZE_MAX && m != n_ids) first = TOK_MIN(m, (size_t)n_ids);
        if (first != SIZE_MAX) {
            if (++s->bad <= 10) {
                fprintf(stderr, "%s: %s: %zu ids, the oracle %u; first difference at id %zu:\n  ours:  ",
                        who, name, m, n_ids, first);
                for (size_t i = first; i < TOK_MIN(m, first + 8); i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, "\n  npm:   ");
                for (size_t i = first; i < TOK_MIN((size_t)n_ids, first + 8); i++) {
                    int32_t w;
                    memcpy(&w, want + 4 * i, 4);
                    fprintf(stderr, " %d", w);
                }
                fprintf(stderr, "\n");
            }
        } else {
            s->ok++;
        }
        if (flags & 8) s->lossy++;
        else s->undecodable += !tok_decodes_to(t, ids, m, text, tlen); /* and the ids give the text */
        free(ids);
    }
    s->well_formed = ok && p == end;
}

/* encode (flags) then decode; 1 if the bytes come back and every id is in range */
static inline int tok_round_trip(hpt_tokenizer *t, const unsigned char *s, size_t n, unsigned flags) {
    int32_t *ids;
    size_t m;
    if (hpt_tokenizer_encode_ex(t, (const char *)s, n, flags, &ids, &m) != HPT_OK) {
        fprintf(stderr, "encode failed: %s\n", hpt_last_error());
        return 0;
    }
    int ok = m <= n && tok_decodes_to(t, ids, m, s, n);
    free(ids);
    return ok;
}

#endif
