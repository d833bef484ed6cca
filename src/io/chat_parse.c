/* chat_parse.c: reads a chat template into a syntax tree (chat_int.h): the lexer (text, {{ }},
 * {% %}, {# #}, whitespace control with '-' and '+', and Hugging Face's environment: trim_blocks,
 * lstrip_blocks, one trailing newline dropped) and a recursive-descent parser with Jinja's
 * precedence (jinja2/parser.py: condexpr < or < and < not < compare < + - < ~ < * / // % < ** <
 * unary < postfix, filters and tests). The tree and its literals live in the template's arena and
 * are never changed after parsing. Every error names the template's line; nesting is bounded
 * (CT_MAX_DEPTH) so a hostile template cannot exhaust the stack. Loading tokenizer_config.json
 * is here too. */
#include "io/chat_int.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- lexer ------------------------------------------------------------------------------------ */

typedef enum { TK_TEXT, TK_VOPEN, TK_VCLOSE, TK_BOPEN, TK_BCLOSE, TK_NAME, TK_STR, TK_INT, TK_FLOAT,
               TK_OP, TK_EOF } tk_type;

typedef struct {
    tk_type t;
    int line;
    char *s;      /* TK_TEXT, TK_STR: n bytes; TK_NAME: NUL-terminated */
    size_t n;
    int64_t i;
    double f;
    char op[3];   /* TK_OP */
} tok;

typedef struct {
    ct_arena *ar;
    tok *t;
    size_t n, cap, i;
    int failed;
    hpt_status err;
    int depth;
} parser;

static void *perr(parser *p, hpt_status s, int line, const char *fmt, const char *arg) {
    if (!p->failed) {
        p->failed = 1;
        p->err = s;
        hpt_fail(s, "chat template, line %d: %s%s", line, fmt, arg ? arg : "");
    }
    return NULL;
}

static tok *push_tok(parser *p, tk_type t, int line) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        tok *nt = ct_alloc(p->ar, cap * sizeof *nt);
        if (!nt) return perr(p, HPT_ERR_OOM, line, "out of memory", NULL);
        if (p->n) memcpy(nt, p->t, p->n * sizeof *nt);
        p->t = nt;
        p->cap = cap;
    }
    tok *k = &p->t[p->n++];
    memset(k, 0, sizeof *k);
    k->t = t;
    k->line = line;
    return k;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int count_lines(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A string literal at src[*pos] (the quote), Python's escapes; an unknown escape stays as it is. */
static int lex_string(parser *p, const char *src, size_t len, size_t *pos, int *line) {
    char q = src[*pos];
    size_t i = *pos + 1, start_line = (size_t)*line, end = i;
    while (end < len && src[end] != q) end += src[end] == '\\' ? 2 : 1;
    char *o = ct_alloc(p->ar, (end < len ? end : len) - *pos + 1); /* decoded is never longer */
    if (!o) return perr(p, HPT_ERR_OOM, *line, "out of memory", NULL), -1;
    size_t n = 0;
    for (;;) {
        if (i >= len) return perr(p, HPT_ERR_FORMAT, (int)start_line, "unterminated string", NULL), -1;
        char c = src[i];
        if (c == q) { i++; break; }
        if (c == '\n') (*line)++;
        if (c != '\\' || i + 1 >= len) { o[n++] = c; i++; continue; }
        char e = src[i + 1];
        int ndig = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (ndig) {
            uint32_t cp = 0;
            int ok = i + 2 + (size_t)ndig <= len;
            for (int k = 0; ok && k < ndig; k++) {
                int h = hexval(src[i + 2 + (size_t)k]);
                if (h < 0) ok = 0; else cp = cp * 16 + (uint32_t)h;
            }
            if (!ok || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000))
                return perr(p, HPT_ERR_FORMAT, *line, "bad \\x, \\u or \\U escape in a string", NULL), -1;
            n += put_utf8(o + n, cp); /* at most 4 bytes for at least 4 source bytes */
            i += 2 + (size_t)ndig;
            continue;
        }
        const char *from = "ntrbfv0'\"\\", *to = "\n\t\r\b\f\v\0'\"\\";
        const char *k = e ? strchr(from, e) : NULL;
        if (k) { o[n++] = to[k - from]; i += 2; continue; }
        if (e == '\n') { (*line)++; i += 2; continue; } /* a backslash-newline continues the line */
        o[n++] = '\\';
        i++;
    }
    tok *t = push_tok(p, TK_STR, (int)start_line);
    if (!t) return -1;
    t->s = o;
    t->n = n;
    *pos = i;
    return 0;
}

/* Tokens inside {{ }} or {% %} from src[*pos] up to the closing delimiter (close: '}' or '%');
 * *strip_after: the closing had '-'. */
static int lex_tag(parser *p, const char *src, size_t len, size_t *pos, int *line, char close,
                   int *strip_after) {
    size_t i = *pos;
    for (;;) {
        while (i < len && is_ws(src[i])) { if (src[i] == '\n') (*line)++; i++; }
        if (i >= len) return perr(p, HPT_ERR_FORMAT, *line, "unclosed tag (no '}}' or '%}')", NULL), -1;
        char c = src[i];
        if (c == '-' && i + 2 < len + 0 && src[i + 1] == close && src[i + 2] == '}') {
            *strip_after = 1;
            *pos = i + 3;
            return 0;
        }
        if (c == '+' && i + 2 < len + 0 && src[i + 1] == close && src[i + 2] == '}') { *pos = i + 3; return 0; }
        if (c == close && i + 1 < len && src[i + 1] == '}') {
            *strip_after = 0;
            *pos = i + 2;
            return 0;
        }
        if (c == '\'' || c == '"') {
            if (lex_string(p, src, len, &i, line) != 0) return -1;
            continue;
        }
        if (is_name0(c)) {
            size_t j = i;
            while (j < len && (is_name0(src[j]) || is_digit(src[j]))) j++;
            tok *t = push_tok(p, TK_NAME, *line);
            if (!t || !(t->s = ct_alloc(p->ar, j - i + 1))) return perr(p, HPT_ERR_OOM, *line, "out of memory", NULL), -1;
            memcpy(t->s, src + i, j - i);
            t->n = j - i;
            i = j;
            continue;
        }
        if (is_digit(c)) {
            size_t j = i;
            int is_float = 0;
            while (j < len && (is_digit(src[j]) || src[j] == '_')) j++;
            if (j + 1 < len && src[j] == '.' && is_digit(src[j + 1])) {
                is_float = 1;
                j++;
                while (j < len && is_digit(src[j])) j++;
            }
            char num[64];
            size_t k = 0;
            for (size_t q = i; q < j && k < sizeof num - 1; q++)
                if (src[q] != '_') num[k++] = src[q];
            num[k] = 0;
            if (j - i >= sizeof num) return perr(p, HPT_ERR_FORMAT, *line, "number too long", NULL), -1;
            tok *t = push_tok(p, is_float ? TK_FLOAT : TK_INT, *line);
            if (!t) return -1;
            if (is_float) {
                t->f = strtod(num, NULL);
            } else {
                char *end;
                long long v = strtoll(num, &end, 10);
                if (v == LLONG_MAX) return perr(p, HPT_ERR_FORMAT, *line, "integer too large: ", num), -1;
                t->i = v;
            }
            i = j;
            continue;
        }
        static const char *const two[] = {"==", "!=", "<=", ">=", "//", "**"};
        tok *t = NULL;
        for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
            if (i + 1 < len && src[i] == two[k][0] && src[i + 1] == two[k][1]) {
                if (!(t = push_tok(p, TK_OP, *line))) return -1;
                memcpy(t->op, two[k], 2);
                i += 2;
                break;
            }
        if (t) continue;
        if (!strchr("+-*/%~<>=()[]{}.,:|", c)) {
            char what[2] = {c, 0};
            return perr(p, HPT_ERR_FORMAT, *line, "unexpected character in a tag: ", what), -1;
        }
        if (!(t = push_tok(p, TK_OP, *line))) return -1;
        t->op[0] = c;
        i++;
    }
}

static int lex(parser *p, const char *src, size_t len) {
    if (len && src[len - 1] == '\n') len--; /* Jinja's keep_trailing_newline=False */
    size_t pos = 0;
    int line = 1, strip_next = 0;
    while (pos <= len) {
        size_t k = pos;
        while (k + 1 < len && !(src[k] == '{' && (src[k + 1] == '{' || src[k + 1] == '%' || src[k + 1] == '#')))
            k++;
        if (k + 1 >= len) k = len;
        /* the text src[pos, k) */
        size_t a = pos, b = k;
        if (strip_next) while (a < b && is_ws(src[a])) a++;
        strip_next = 0;
        if (k < len) {
            char kind = src[k + 1], mod = k + 2 < len ? src[k + 2] : 0;
            if (mod == '-') {
                while (b > a && is_ws(src[b - 1])) b--;
            } else if (mod != '+' && kind != '{') { /* lstrip_blocks: spaces from a line's start */
                size_t j = b;
                while (j > a && (src[j - 1] == ' ' || src[j - 1] == '\t')) j--;
                size_t r = k;
                while (r > 0 && (src[r - 1] == ' ' || src[r - 1] == '\t')) r--;
                if (r == 0 || src[r - 1] == '\n') b = j;
            }
        }
        if (b > a) {
            tok *t = push_tok(p, TK_TEXT, line);
            if (!t || !(t->s = ct_alloc(p->ar, b - a))) return perr(p, HPT_ERR_OOM, line, "out of memory", NULL), -1;
            memcpy(t->s, src + a, b - a);
            t->n = b - a;
        }
        line += count_lines(src + pos, k - pos);
        if (k >= len) break;
        char kind = src[k + 1];
        pos = k + 2;
        if (pos < len && (src[pos] == '-' || src[pos] == '+')) pos++;
        int strip_after = 0;
        if (kind == '#') {
            size_t e = pos;
            while (e + 1 < len && !(src[e] == '#' && src[e + 1] == '}')) e++;
            if (e + 1 >= len) return perr(p, HPT_ERR_FORMAT, line, "unclosed comment", NULL), -1;
            strip_after = e > pos && src[e - 1] == '-';
            line += count_lines(src + pos, e - pos);
            pos = e + 2;
        } else {
            if (!push_tok(p, kind == '{' ? TK_VOPEN : TK_BOPEN, line)) return -1;
            if (lex_tag(p, src, len, &pos, &line, kind == '{' ? '}' : '%', &strip_after) != 0) return -1;
            if (!push_tok(p, kind == '{' ? TK_VCLOSE : TK_BCLOSE, line)) return -1;
        }
        if (strip_after) strip_next = 1;
        else if (kind != '{' && pos < len && src[pos] == '\n') { pos++; line++; } /* trim_blocks */
    }
    return push_tok(p, TK_EOF, line) ? 0 : -1;
}

/* ---- parser ----------------------------------------------------------------------------------- */

static tok *cur(parser *p) { return &p->t[p->i]; }
static int is_op(parser *p, const char *op) { return cur(p)->t == TK_OP && strcmp(cur(p)->op, op) == 0; }
static int is_kw(parser *p, const char *name) { return cur(p)->t == TK_NAME && strcmp(cur(p)->s, name) == 0; }
static int is_kw_at(parser *p, size_t k, const char *name) {
    return p->i + k < p->n && p->t[p->i + k].t == TK_NAME && strcmp(p->t[p->i + k].s, name) == 0;
}
static void adv(parser *p) { if (cur(p)->t != TK_EOF) p->i++; }

static int expect_op(parser *p, const char *op) {
    if (!is_op(p, op)) return perr(p, HPT_ERR_FORMAT, cur(p)->line, "expected ", op), -1;
    adv(p);
    return 0;
}

static ct_node *node(parser *p, ct_kind k) {
    ct_node *n = ct_alloc(p->ar, sizeof *n);
    if (!n) return perr(p, HPT_ERR_OOM, cur(p)->line, "out of memory", NULL);
    n->kind = k;
    n->line = cur(p)->line;
    return n;
}

static ct_val *lit(parser *p, ct_type t) {
    ct_val *v = ct_alloc(p->ar, sizeof *v);
    if (!v) return perr(p, HPT_ERR_OOM, cur(p)->line, "out of memory", NULL);
    v->t = t;
    return v;
}

static ct_node *parse_expr(parser *p);
static ct_node *parse_or(parser *p);
static ct_node *parse_unary(parser *p, int with_filter);
static ct_node *parse_primary(parser *p);
static ct_node *parse_postfix(parser *p, ct_node *n);

static ct_node *binary(parser *p, ct_kind k, ct_op op, ct_node *a, ct_node *b) {
    if (!a || !b) return NULL;
    ct_node *n = node(p, k);
    if (!n) return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

/* arguments of a call, a filter or a test, after '(' up to and with ')' */
static int parse_args(parser *p, ct_node *n) {
    ct_node *args[64];
    const char *kw[64];
    int k = 0;
    while (!is_op(p, ")")) {
        if (k == 64) return perr(p, HPT_ERR_UNSUPPORTED, cur(p)->line, "more than 64 arguments", NULL), -1;
        if (is_op(p, "*") || is_op(p, "**"))
            return perr(p, HPT_ERR_UNSUPPORTED, cur(p)->line, "*args and **kwargs are not supported", NULL), -1;
        kw[k] = NULL;
        if (cur(p)->t == TK_NAME && p->i + 1 < p->n && p->t[p->i + 1].t == TK_OP &&
            strcmp(p->t[p->i + 1].op, "=") == 0) {
            kw[k] = cur(p)->s;
            adv(p);
            adv(p);
        }
        if (!(args[k++] = parse_expr(p))) return -1;
        if (!is_op(p, ",")) break;
        adv(p);
    }
    if (expect_op(p, ")") != 0) return -1;
    n->nargs = k;
    n->args = ct_alloc(p->ar, (size_t)(k ? k : 1) * sizeof *n->args);
    n->kw = ct_alloc(p->ar, (size_t)(k ? k : 1) * sizeof *n->kw);
    if (!n->args || !n->kw) return perr(p, HPT_ERR_OOM, cur(p)->line, "out of memory", NULL), -1;
    memcpy(n->args, args, (size_t)k * sizeof *args);
    memcpy(n->kw, kw, (size_t)k * sizeof *kw);
    return 0;
}

/* comma-separated expressions up to `close`, into n->args (lists, tuples; dicts: key: value) */
static int parse_items(parser *p, ct_node *n, const char *close, int dict) {
    size_t cap = 8, k = 0;
    ct_node **items = ct_alloc(p->ar, cap * sizeof *items);
    if (!items) return perr(p, HPT_ERR_OOM, cur(p)->line, "out of memory", NULL), -1;
    while (!is_op(p, close)) {
        if (k + 2 > cap) {
            ct_node **ni = ct_alloc(p->ar, 2 * cap * sizeof *ni);
            if (!ni || k > INT_MAX / 2) return perr(p, HPT_ERR_OOM, cur(p)->line, "out of memory", NULL), -1;
            memcpy(ni, items, k * sizeof *ni);
            items = ni;
            cap *= 2;
        }
        if (!(items[k++] = parse_expr(p))) return -1;
        if (dict) {
            if (expect_op(p, ":") != 0 || !(items[k++] = parse_expr(p))) return -1;
        }
        if (!is_op(p, ",")) break;
        adv(p);
    }
    if (expect_op(p, close) != 0) return -1;
    n->args = items;
    n->nargs = (int)k;
    return 0;
}

static ct_node *parse_primary(parser *p) {
    tok *t = cur(p);
    ct_node *n;
    if (++p->depth > CT_MAX_DEPTH) return perr(p, HPT_ERR_INVALID, t->line, "expressions nested too deeply", NULL);
    switch (t->t) {
    case TK_NAME: {
        static const char *const names[] = {"true", "false", "none", "True", "False", "None"};
        for (int k = 0; k < 6; k++)
            if (strcmp(t->s, names[k]) == 0) {
                if (!(n = node(p, E_LIT)) || !(n->lit = lit(p, k % 3 == 2 ? V_NONE : V_BOOL))) return NULL;
                n->lit->b = k % 3 == 0;
                adv(p);
                goto done;
            }
        if (!(n = node(p, E_NAME))) return NULL;
        n->name = t->s;
        adv(p);
        break;
    }
    case TK_STR: { /* adjacent literals concatenate */
        size_t total = 0, j = p->i;
        for (; p->t[j].t == TK_STR; j++) total += p->t[j].n;
        if (!(n = node(p, E_LIT)) || !(n->lit = lit(p, V_STR))) return NULL;
        char *s = ct_alloc(p->ar, total + 1);
        if (!s) return perr(p, HPT_ERR_OOM, t->line, "out of memory", NULL);
        size_t o = 0;
        for (; p->i < j; p->i++) { memcpy(s + o, cur(p)->s, cur(p)->n); o += cur(p)->n; }
        n->lit->s = s;
        n->lit->n = total;
        break;
    }
    case TK_INT: case TK_FLOAT:
        if (!(n = node(p, E_LIT)) || !(n->lit = lit(p, t->t == TK_INT ? V_INT : V_FLOAT))) return NULL;
        n->lit->i = t->i;
        n->lit->f = t->f;
        adv(p);
        break;
    case TK_OP:
        if (is_op(p, "(")) {
            adv(p);
            if (is_op(p, ")")) { /* () : an empty tuple */
                adv(p);
                if (!(n = node(p, E_LIST))) return NULL;
                break;
            }
            ct_node *e = parse_expr(p);
            if (!e) return NULL;
            if (is_op(p, ",")) { /* a tuple: a list here */
                adv(p);
                if (!(n = node(p, E_LIST)) || parse_items(p, n, ")", 0) != 0) return NULL;
                ct_node **items = ct_alloc(p->ar, (size_t)(n->nargs + 1) * sizeof *items);
                if (!items) return perr(p, HPT_ERR_OOM, t->line, "out of memory", NULL);
                items[0] = e;
                memcpy(items + 1, n->args, (size_t)n->nargs * sizeof *items);
                n->args = items;
                n->nargs++;
                break;
            }
            if (expect_op(p, ")") != 0) return NULL;
            n = e;
            break;
        }
        if (is_op(p, "[") || is_op(p, "{")) {
            int dict = is_op(p, "{");
            adv(p);
            if (!(n = node(p, dict ? E_DICT : E_LIST)) || parse_items(p, n, dict ? "}" : "]", dict) != 0)
                return NULL;
            break;
        }
        return perr(p, HPT_ERR_FORMAT, t->line, "unexpected ", t->op);
    default:
        return perr(p, HPT_ERR_FORMAT, t->line, "expected an expression", NULL);
    }
done:
    p->depth--;
    return n;
}

static ct_node *parse_subscript(parser *p, ct_node *obj) {
    ct_node *parts[3] = {NULL, NULL, NULL};
    int k = 0, slice = 0;
    for (;;) {
        if (!is_op(p, ":") && !is_op(p, "]")) {
            if (!(parts[k] = parse_expr(p))) return NULL;
        }
        if (is_op(p, ":") && k < 2) { slice = 1; k++; adv(p); continue; }
        break;
    }
    if (expect_op(p, "]") != 0) return NULL;
    ct_node *n = node(p, slice ? E_SLICE : E_ITEM);
    if (!n) return NULL;
    n->a = obj;
    if (slice) { n->b = parts[0]; n->c = parts[1]; n->d = parts[2]; }
    else if (!(n->b = parts[0])) return perr(p, HPT_ERR_FORMAT, n->line, "empty subscript", NULL);
    return n;
}

static ct_node *parse_postfix(parser *p, ct_node *n) {
    while (n) {
        if (is_op(p, ".")) {
            adv(p);
            ct_node *a = node(p, E_ATTR);
            if (!a) return NULL;
            a->a = n;
            if (cur(p)->t == TK_NAME) {
                a->name = cur(p)->s;
            } else if (cur(p)->t == TK_INT) { /* x.0: an item */
                a->kind = E_ITEM;
                if (!(a->b = node(p, E_LIT)) || !(a->b->lit = lit(p, V_INT))) return NULL;
                a->b->lit->i = cur(p)->i;
            } else {
                return perr(p, HPT_ERR_FORMAT, cur(p)->line, "expected a name after '.'", NULL);
            }
            adv(p);
            n = a;
        } else if (is_op(p, "[")) {
            adv(p);
            n = parse_subscript(p, n);
        } else if (is_op(p, "(")) {
            adv(p);
            ct_node *c = node(p, E_CALL);
            if (!c) return NULL;
            c->a = n;
            if (parse_args(p, c) != 0) return NULL;
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static ct_node *parse_filter_expr(parser *p, ct_node *n) {
    while (n) {
        if (is_op(p, "|")) {
            adv(p);
            if (cur(p)->t != TK_NAME) return perr(p, HPT_ERR_FORMAT, cur(p)->line, "expected a filter's name", NULL);
            ct_node *f = node(p, E_FILTER);
            if (!f) return NULL;
            f->name = cur(p)->s;
            f->a = n;
            if (!ct_known(f->name, 0))
                return perr(p, HPT_ERR_UNSUPPORTED, f->line, "a filter beyond hptrain's Jinja subset (docs/chat.md): ", f->name);
            adv(p);
            if (is_op(p, "(")) { adv(p); if (parse_args(p, f) != 0) return NULL; }
            n = f;
        } else if (is_kw(p, "is")) {
            adv(p);
            ct_node *t = node(p, E_TEST);
            if (!t) return NULL;
            t->a = n;
            if (is_kw(p, "not")) { t->negate = 1; adv(p); }
            if (cur(p)->t != TK_NAME) return perr(p, HPT_ERR_FORMAT, cur(p)->line, "expected a test's name", NULL);
            t->name = cur(p)->s;
            if (!ct_known(t->name, 1))
                return perr(p, HPT_ERR_UNSUPPORTED, t->line, "a test beyond hptrain's Jinja subset (docs/chat.md): ", t->name);
            adv(p);
            tok *c = cur(p);
            if (is_op(p, "(")) {
                adv(p);
                if (parse_args(p, t) != 0) return NULL;
            } else if ((c->t == TK_NAME || c->t == TK_STR || c->t == TK_INT || c->t == TK_FLOAT ||
                        is_op(p, "[") || is_op(p, "{")) &&
                       !is_kw(p, "else") && !is_kw(p, "or") && !is_kw(p, "and")) {
                /* `is divisibleby 3`: one argument without parentheses */
                if (!(t->args = ct_alloc(p->ar, sizeof *t->args)) || !(t->kw = ct_alloc(p->ar, sizeof *t->kw)))
                    return perr(p, HPT_ERR_OOM, c->line, "out of memory", NULL);
                if (!(t->args[0] = parse_postfix(p, parse_primary(p)))) return NULL;
                t->nargs = 1;
            }
            n = t;
        } else if (is_op(p, "(")) {
            n = parse_postfix(p, n);
        } else {
            break;
        }
    }
    return n;
}

static ct_node *parse_unary(parser *p, int with_filter) {
    if (++p->depth > CT_MAX_DEPTH) return perr(p, HPT_ERR_INVALID, cur(p)->line, "expressions nested too deeply", NULL);
    ct_node *n;
    if (is_op(p, "-")) {
        adv(p);
        if (!(n = node(p, E_NEG)) || !(n->a = parse_unary(p, 0))) return NULL;
    } else if (is_op(p, "+")) {
        adv(p);
        n = parse_unary(p, 0);
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static ct_node *parse_pow(parser *p) {
    ct_node *a = parse_unary(p, 1);
    while (a && is_op(p, "**")) { adv(p); a = binary(p, E_BIN, OP_POW, a, parse_unary(p, 1)); }
    return a;
}

static ct_node *parse_math2(parser *p) {
    ct_node *a = parse_pow(p);
    for (;;) {
        ct_op op;
        if (is_op(p, "*")) op = OP_MUL;
        else if (is_op(p, "/")) op = OP_DIV;
        else if (is_op(p, "//")) op = OP_FLOORDIV;
        else if (is_op(p, "%")) op = OP_MOD;
        else return a;
        adv(p);
        a = binary(p, E_BIN, op, a, parse_pow(p));
    }
}

static ct_node *parse_concat(parser *p) {
    ct_node *a = parse_math2(p);
    while (a && is_op(p, "~")) { adv(p); a = binary(p, E_BIN, OP_CONCAT, a, parse_math2(p)); }
    return a;
}

static ct_node *parse_math1(parser *p) {
    ct_node *a = parse_concat(p);
    while (a && (is_op(p, "+") || is_op(p, "-"))) {
        ct_op op = is_op(p, "+") ? OP_ADD : OP_SUB;
        adv(p);
        a = binary(p, E_BIN, op, a, parse_concat(p));
    }
    return a;
}

static ct_node *parse_compare(parser *p) {
    ct_node *a = parse_math1(p);
    while (a) {
        static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
        static const ct_op codes[] = {OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE};
        int k = 0;
        for (; k < 6; k++) if (is_op(p, ops[k])) break;
        ct_op op;
        if (k < 6) { op = codes[k]; adv(p); }
        else if (is_kw(p, "in")) { op = OP_IN; adv(p); }
        else if (is_kw(p, "not") && is_kw_at(p, 1, "in")) { op = OP_NOTIN; adv(p); adv(p); }
        else break;
        a = binary(p, E_BIN, op, a, parse_math1(p));
    }
    return a;
}

static ct_node *parse_not(parser *p) {
    if (is_kw(p, "not")) {
        if (++p->depth > CT_MAX_DEPTH) return perr(p, HPT_ERR_INVALID, cur(p)->line, "expressions nested too deeply", NULL);
        adv(p);
        ct_node *n = node(p, E_NOT);
        if (!n || !(n->a = parse_not(p))) return NULL;
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static ct_node *parse_and(parser *p) {
    ct_node *a = parse_not(p);
    while (a && is_kw(p, "and")) { adv(p); a = binary(p, E_AND, OP_ADD, a, parse_not(p)); }
    return a;
}

static ct_node *parse_or(parser *p) {
    ct_node *a = parse_and(p);
    while (a && is_kw(p, "or")) { adv(p); a = binary(p, E_OR, OP_ADD, a, parse_and(p)); }
    return a;
}

static ct_node *parse_expr(parser *p) {
    if (++p->depth > CT_MAX_DEPTH) return perr(p, HPT_ERR_INVALID, cur(p)->line, "expressions nested too deeply", NULL);
    ct_node *a = parse_or(p);
    while (a && is_kw(p, "if")) {
        adv(p);
        ct_node *n = node(p, E_COND);
        if (!n) return NULL;
        n->a = a;
        if (!(n->b = parse_or(p))) return NULL;
        if (is_kw(p, "else")) { adv(p); if (!(n->c = parse_expr(p))) return NULL; }
        a = n;
    }
    p->depth--;
    return a;
}

/* ---- statements ------------------------------------------------------------------------------- */

static ct_node *parse_body(parser *p, const char *const *ends, const char **ended);

static int end_tag(parser *p) {
    if (cur(p)->t != TK_BCLOSE) return perr(p, HPT_ERR_FORMAT, cur(p)->line, "expected '%}'", NULL), -1;
    adv(p);
    return 0;
}

static ct_node *parse_stmt(parser *p) {
    tok *t = cur(p);
    if (t->t != TK_NAME) return perr(p, HPT_ERR_FORMAT, t->line, "expected a statement after '{%'", NULL);
    const char *kw = t->s;
    ct_node *n;
    const char *ended = NULL;
    adv(p);
    if (strcmp(kw, "if") == 0 || strcmp(kw, "elif") == 0) {
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        if (!(n = node(p, N_IF)) || !(n->a = parse_expr(p)) || end_tag(p) != 0) return NULL;
        n->b = parse_body(p, ends, &ended);
        if (p->failed) return NULL;
        if (strcmp(ended, "elif") == 0) {
            if (!(n->c = parse_stmt(p))) return NULL; /* consumes through endif */
            return n;
        }
        adv(p);
        if (end_tag(p) != 0) return NULL;
        if (strcmp(ended, "else") == 0) {
            static const char *const endif[] = {"endif", NULL};
            n->c = parse_body(p, endif, &ended);
            if (p->failed) return NULL;
            adv(p);
            if (end_tag(p) != 0) return NULL;
        }
        return n;
    }
    if (strcmp(kw, "for") == 0) {
        static const char *const ends[] = {"else", "endfor", NULL};
        if (!(n = node(p, N_FOR))) return NULL;
        if (cur(p)->t != TK_NAME) return perr(p, HPT_ERR_FORMAT, t->line, "expected a loop variable", NULL);
        n->name = cur(p)->s;
        adv(p);
        if (is_op(p, ",")) {
            adv(p);
            if (cur(p)->t != TK_NAME) return perr(p, HPT_ERR_FORMAT, t->line, "expected a loop variable", NULL);
            n->name2 = cur(p)->s;
            adv(p);
        }
        if (!is_kw(p, "in")) return perr(p, HPT_ERR_FORMAT, t->line, "expected 'in' in a for loop", NULL);
        adv(p);
        if (!(n->a = parse_or(p))) return NULL; /* not a conditional: `if` filters the loop */
        if (is_kw(p, "if")) { adv(p); if (!(n->d = parse_expr(p))) return NULL; }
        if (is_kw(p, "recursive")) return perr(p, HPT_ERR_UNSUPPORTED, t->line, "recursive loops are not supported", NULL);
        if (end_tag(p) != 0) return NULL;
        n->b = parse_body(p, ends, &ended);
        if (p->failed) return NULL;
        adv(p);
        if (end_tag(p) != 0) return NULL;
        if (strcmp(ended, "else") == 0) {
            static const char *const endfor[] = {"endfor", NULL};
            n->c = parse_body(p, endfor, &ended);
            if (p->failed) return NULL;
            adv(p);
            if (end_tag(p) != 0) return NULL;
        }
        return n;
    }
    if (strcmp(kw, "set") == 0) {
        if (cur(p)->t != TK_NAME) return perr(p, HPT_ERR_FORMAT, t->line, "expected a name after 'set'", NULL);
        if (!(n = node(p, N_SET))) return NULL;
        n->name = cur(p)->s;
        adv(p);
        if (is_op(p, ".")) {
            adv(p);
            if (cur(p)->t != TK_NAME) return perr(p, HPT_ERR_FORMAT, t->line, "expected an attribute after '.'", NULL);
            n->name2 = cur(p)->s;
            adv(p);
        }
        if (is_op(p, ",")) return perr(p, HPT_ERR_UNSUPPORTED, t->line, "set with several targets is not supported", NULL);
        if (cur(p)->t == TK_BCLOSE && !n->name2) { /* {% set x %}...{% endset %} */
            static const char *const ends[] = {"endset", NULL};
            adv(p);
            n->kind = N_SETBLOCK;
            n->a = parse_body(p, ends, &ended);
            if (p->failed) return NULL;
            adv(p);
            return end_tag(p) == 0 ? n : NULL;
        }
        if (expect_op(p, "=") != 0 || !(n->a = parse_expr(p)) || end_tag(p) != 0) return NULL;
        return n;
    }
    if (strcmp(kw, "break") == 0 || strcmp(kw, "continue") == 0) {
        if (!(n = node(p, kw[0] == 'b' ? N_BREAK : N_CONTINUE))) return NULL;
        return end_tag(p) == 0 ? n : NULL;
    }
    if (strcmp(kw, "generation") == 0) { /* a marker for assistant masks: its body as it is */
        static const char *const ends[] = {"endgeneration", NULL};
        if (end_tag(p) != 0) return NULL;
        if (!(n = node(p, N_IF)) || !(n->a = node(p, E_LIT))) return NULL;
        n->a->lit = &ct_true;
        n->b = parse_body(p, ends, &ended);
        if (p->failed) return NULL;
        adv(p);
        return end_tag(p) == 0 ? n : NULL;
    }
    static const char *const known[] = {"macro", "call", "filter", "include", "import", "from",
                                        "extends", "block", "raw", "with", "autoescape", "do", NULL};
    for (int k = 0; known[k]; k++)
        if (strcmp(kw, known[k]) == 0)
            return perr(p, HPT_ERR_UNSUPPORTED, t->line,
                        "this statement is beyond hptrain's Jinja subset (docs/chat.md): ", kw);
    return perr(p, HPT_ERR_FORMAT, t->line, "unknown statement: ", kw);
}

/* Statements up to one of the tags `ends` ({% name %}, left at its name; *ended names it) or, when
 * ends is NULL, the end of the template. */
static ct_node *parse_body(parser *p, const char *const *ends, const char **ended) {
    ct_node *head = NULL, **tail = &head;
    if (++p->depth > CT_MAX_DEPTH) return perr(p, HPT_ERR_INVALID, cur(p)->line, "statements nested too deeply", NULL);
    for (;;) {
        tok *t = cur(p);
        ct_node *n = NULL;
        if (t->t == TK_EOF) {
            if (ends) {
                int last = 0;
                while (ends[last + 1]) last++;
                return perr(p, HPT_ERR_FORMAT, t->line, "the template ends before {% ", ends[last]);
            }
            break;
        }
        if (t->t == TK_TEXT) {
            if (!(n = node(p, N_TEXT)) || !(n->lit = lit(p, V_STR))) return NULL;
            n->lit->s = t->s;
            n->lit->n = t->n;
            adv(p);
        } else if (t->t == TK_VOPEN) {
            adv(p);
            if (!(n = node(p, N_OUT)) || !(n->a = parse_expr(p))) return NULL;
            if (cur(p)->t != TK_VCLOSE) return perr(p, HPT_ERR_FORMAT, cur(p)->line, "expected '}}'", NULL);
            adv(p);
        } else if (t->t == TK_BOPEN) {
            adv(p);
            if (ends && cur(p)->t == TK_NAME)
                for (int k = 0; ends[k]; k++)
                    if (strcmp(cur(p)->s, ends[k]) == 0) { *ended = ends[k]; goto out; }
            if (cur(p)->t == TK_NAME && strncmp(cur(p)->s, "end", 3) == 0)
                return perr(p, HPT_ERR_FORMAT, cur(p)->line, "unexpected ", cur(p)->s);
            if (cur(p)->t == TK_NAME && (strcmp(cur(p)->s, "else") == 0 || strcmp(cur(p)->s, "elif") == 0))
                return perr(p, HPT_ERR_FORMAT, cur(p)->line, "unexpected ", cur(p)->s);
            if (!(n = parse_stmt(p))) return NULL;
        } else {
            return perr(p, HPT_ERR_FORMAT, t->line, "unexpected token outside a tag", NULL);
        }
        *tail = n;
        tail = &n->next;
    }
out:
    p->depth--;
    return head;
}

/* ---- templates -------------------------------------------------------------------------------- */

static ct_val *lit_copy(hpt_chat_template *ct, const char *s) {
    if (!s) return NULL;
    ct_val *v = ct_alloc(&ct->ar, sizeof *v);
    size_t n = strlen(s);
    char *c = ct_alloc(&ct->ar, n + 1);
    if (!v || !c) return NULL;
    memcpy(c, s, n);
    v->t = V_STR;
    v->s = c;
    v->n = n;
    return v;
}

hpt_status hpt_chat_template_parse(const char *source, size_t len, const char *bos, const char *eos,
                                   hpt_chat_template **out) {
    *out = NULL;
    if (!source && len) return hpt_fail(HPT_ERR_INVALID, "chat template: NULL source of %zu bytes", len);
    if (len > CT_MAX_SOURCE_BYTES)
        return hpt_fail(HPT_ERR_INVALID, "chat template of %zu bytes: more than the %u allowed", len,
                        CT_MAX_SOURCE_BYTES);
    hpt_chat_template *ct = calloc(1, sizeof *ct);
    if (!ct) return hpt_fail(HPT_ERR_OOM, "out of memory for a chat template");
    ct->ar.limit_bytes = 64ull * CT_MAX_SOURCE_BYTES;
    parser p = {.ar = &ct->ar};
    if (lex(&p, source, len) == 0) {
        p.i = 0;
        ct->body = parse_body(&p, NULL, NULL);
    }
    if (!p.failed && ((bos && !(ct->bos = lit_copy(ct, bos))) || (eos && !(ct->eos = lit_copy(ct, eos)))))
        perr(&p, HPT_ERR_OOM, 0, "out of memory", NULL);
    if (p.failed) {
        hpt_chat_template_free(ct);
        return p.err;
    }
    *out = ct;
    return HPT_OK;
}

void hpt_chat_template_free(hpt_chat_template *ct) {
    if (!ct) return;
    ct_arena_free(&ct->ar);
    free(ct);
}

/* bos_token / eos_token: a string, or {"content": "..."} (older files); else NULL */
static const char *token_field(const cJSON *cfg, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, name);
    if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

hpt_status hpt_chat_template_load(const char *dir, hpt_chat_template **out) {
    *out = NULL;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= (int)sizeof path)
        return hpt_fail(HPT_ERR_INVALID, "path too long: %s", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return hpt_fail(HPT_ERR_IO, "cannot open %s (a model directory's tokenizer_config.json, "
                            "which holds its chat template)", path);
    char *data = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            if (cap >= (64u << 20)) { fclose(f); free(data); return hpt_fail(HPT_ERR_FORMAT, "%s: larger than 64 MiB", path); }
            char *nd = realloc(data, (cap = cap ? 2 * cap : 1 << 16) + 1);
            if (!nd) { fclose(f); free(data); return hpt_fail(HPT_ERR_OOM, "out of memory reading %s", path); }
            data = nd;
        }
        size_t r = fread(data + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int rerr = ferror(f);
    fclose(f);
    if (rerr) { free(data); return hpt_fail(HPT_ERR_IO, "cannot read %s", path); }
    cJSON *cfg = cJSON_ParseWithLength(data, n);
    free(data);
    if (!cJSON_IsObject(cfg)) {
        cJSON_Delete(cfg);
        return hpt_fail(HPT_ERR_FORMAT, "%s: not a JSON object", path);
    }
    const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsArray(tpl)) { /* [{name, template}, ...]: the default one */
        const cJSON *e, *found = NULL;
        cJSON_ArrayForEach(e, tpl) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(nm) && strcmp(nm->valuestring, "default") == 0)
                found = cJSON_GetObjectItemCaseSensitive(e, "template");
        }
        tpl = found;
    }
    hpt_status s;
    if (cJSON_IsString(tpl)) {
        s = hpt_chat_template_parse(tpl->valuestring, strlen(tpl->valuestring), token_field(cfg, "bos_token"),
                                    token_field(cfg, "eos_token"), out);
    } else { /* newer directories keep it in chat_template.jinja */
        char jpath[4096];
        snprintf(jpath, sizeof jpath, "%s/chat_template.jinja", dir);
        FILE *jf = fopen(jpath, "rb");
        if (!jf) {
            cJSON_Delete(cfg);
            return hpt_fail(HPT_ERR_FORMAT, "%s has no chat_template (a string, or a list with one named "
                            "\"default\") and %s does not exist", path, jpath);
        }
        char *src = malloc(CT_MAX_SOURCE_BYTES + 1);
        size_t m = src ? fread(src, 1, CT_MAX_SOURCE_BYTES + 1, jf) : 0;
        fclose(jf);
        if (!src) { cJSON_Delete(cfg); return hpt_fail(HPT_ERR_OOM, "out of memory reading %s", jpath); }
        s = hpt_chat_template_parse(src, m, token_field(cfg, "bos_token"), token_field(cfg, "eos_token"), out);
        free(src);
    }
    cJSON_Delete(cfg);
    if (s != HPT_OK) return hpt_fail_ctx(s, "%s", path);
    return HPT_OK;
}
