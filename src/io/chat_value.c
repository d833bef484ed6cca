/* chat_value.c: the chat template interpreter's values and what works on them: strings with
 * their provenance (every operation that moves bytes moves their mask bytes with them, so a
 * byte of the output knows whether the conversation wrote it), Python's semantics where Jinja
 * borrows them (str(), ==, in, slices by code point, % and // by the divisor's sign, str.strip's
 * Unicode white space), and the filters, tests and methods of the subset (docs/chat.md). Values
 * live in the render's arena; only lists, dicts and namespaces grow, and only while being built
 * or through `set ns.attr`. Every failure is recorded through ct_err and returns NULL. */
#include "io/chat_int.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

ct_val ct_undef = {.t = V_UNDEF}, ct_none = {.t = V_NONE}, ct_true = {.t = V_BOOL, .b = 1},
       ct_false = {.t = V_BOOL, .b = 0};

ct_val *ct_err(ct_ctx *c, hpt_status s, const char *fmt, ...) {
    if (c->failed) return NULL;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->failed = 1;
    c->err = s;
    hpt_fail(s, "chat template, line %d: %s", c->line, msg);
    return NULL;
}

static void *alloc(ct_ctx *c, size_t bytes) {
    void *p = ct_alloc(&c->ar, bytes);
    if (!p) ct_err(c, HPT_ERR_OOM, "out of memory (a render may use at most %llu MiB)",
                   (unsigned long long)(c->ar.limit_bytes >> 20));
    return p;
}

/* ---- constructors ------------------------------------------------------------------------- */

ct_val *ct_str(ct_ctx *c, const char *s, size_t n, const uint8_t *m) {
    ct_val *v = alloc(c, sizeof *v);
    char *d = alloc(c, n + 1);
    if (!v || !d) return NULL;
    if (n) memcpy(d, s, n);
    v->t = V_STR;
    v->s = d;
    v->n = n;
    if (m) {
        uint8_t *dm = alloc(c, n + 1);
        if (!dm) return NULL;
        if (n) memcpy(dm, m, n);
        v->m = dm;
    }
    return v;
}

ct_val *ct_cstr(ct_ctx *c, const char *s) { return ct_str(c, s, strlen(s), NULL); }

ct_val *ct_int(ct_ctx *c, int64_t i) {
    if (i >= 0 && i < CT_SMALL_INTS) { /* loops make these by the million: once per render */
        if (!c->small_ints) {
            if (!(c->small_ints = alloc(c, CT_SMALL_INTS * sizeof *c->small_ints))) return NULL;
            for (int k = 0; k < CT_SMALL_INTS; k++) { c->small_ints[k].t = V_INT; c->small_ints[k].i = k; }
        }
        return &c->small_ints[i];
    }
    ct_val *v = alloc(c, sizeof *v);
    if (v) { v->t = V_INT; v->i = i; }
    return v;
}

ct_val *ct_float(ct_ctx *c, double f) {
    ct_val *v = alloc(c, sizeof *v);
    if (v) { v->t = V_FLOAT; v->f = f; }
    return v;
}

ct_val *ct_bool(int b) { return b ? &ct_true : &ct_false; }

ct_val *ct_list(ct_ctx *c, size_t cap) {
    ct_val *v = alloc(c, sizeof *v);
    if (!v) return NULL;
    v->t = V_LIST;
    v->cap = cap ? cap : 4;
    if (!(v->items = alloc(c, v->cap * sizeof *v->items))) return NULL;
    return v;
}

ct_val *ct_dict(ct_ctx *c, ct_type t) {
    ct_val *v = alloc(c, sizeof *v);
    if (!v) return NULL;
    v->t = t;
    v->cap = 4;
    v->items = alloc(c, v->cap * sizeof *v->items);
    v->keys = alloc(c, v->cap * sizeof *v->keys);
    return v->items && v->keys ? v : NULL;
}

static int grow(ct_ctx *c, ct_val *v) {
    if (v->n < v->cap) return 0;
    size_t cap = 2 * v->cap;
    ct_val **ni = alloc(c, cap * sizeof *ni), **nk = v->keys ? alloc(c, cap * sizeof *nk) : NULL;
    if (!ni || (v->keys && !nk)) return -1;
    memcpy(ni, v->items, v->n * sizeof *ni);
    if (nk) memcpy(nk, v->keys, v->n * sizeof *nk);
    v->items = ni;
    if (nk) v->keys = nk;
    v->cap = cap;
    return 0;
}

int ct_list_push(ct_ctx *c, ct_val *l, ct_val *v) {
    if (grow(c, l) != 0) return -1;
    l->items[l->n++] = v;
    return 0;
}

static ssize_t dict_find(const ct_val *d, const ct_val *k) {
    for (size_t i = 0; i < d->n; i++)
        if (ct_equal(d->keys[i], k)) return (ssize_t)i;
    return -1;
}

int ct_dict_set(ct_ctx *c, ct_val *d, ct_val *k, ct_val *v) {
    ssize_t i = dict_find(d, k);
    if (i >= 0) { d->items[i] = v; return 0; }
    if (grow(c, d) != 0) return -1;
    d->keys[d->n] = k;
    d->items[d->n++] = v;
    return 0;
}

ct_val *ct_dict_get(const ct_val *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++) {
        const ct_val *key = d->keys[i];
        if (key->t == V_STR && key->n == n && memcmp(key->s, k, n) == 0) return d->items[i];
    }
    return NULL;
}

/* ---- predicates ------------------------------------------------------------------------------ */

int ct_truthy(const ct_val *v) {
    switch (v->t) {
    case V_UNDEF: case V_NONE: return 0;
    case V_BOOL: return v->b;
    case V_INT: return v->i != 0;
    case V_FLOAT: return v->f != 0;
    case V_NS: return 1;
    default: return v->n > 0;
    }
}

static int is_num(const ct_val *v) { return v->t == V_INT || v->t == V_FLOAT || v->t == V_BOOL; }
static double num(const ct_val *v) { return v->t == V_FLOAT ? v->f : v->t == V_INT ? (double)v->i : v->b; }
static int64_t inum(const ct_val *v) { return v->t == V_INT ? v->i : v->b; }

int ct_equal(const ct_val *a, const ct_val *b) {
    if (is_num(a) && is_num(b)) {
        if (a->t != V_FLOAT && b->t != V_FLOAT) return inum(a) == inum(b);
        return num(a) == num(b);
    }
    if (a->t != b->t) return 0;
    switch (a->t) {
    case V_UNDEF: case V_NONE: return 1;
    case V_STR: return a->n == b->n && (a->n == 0 || memcmp(a->s, b->s, a->n) == 0);
    case V_LIST:
        if (a->n != b->n) return 0;
        for (size_t i = 0; i < a->n; i++) if (!ct_equal(a->items[i], b->items[i])) return 0;
        return 1;
    case V_DICT:
        if (a->n != b->n) return 0;
        for (size_t i = 0; i < a->n; i++) {
            ssize_t j = dict_find(b, a->keys[i]);
            if (j < 0 || !ct_equal(a->items[i], b->items[j])) return 0;
        }
        return 1;
    default: return a == b;
    }
}

const char *ct_type_name(const ct_val *v) {
    static const char *const names[] = {"undefined", "none", "bool", "int", "float", "str", "list",
                                        "dict", "namespace"};
    return names[v->t];
}

/* ---- UTF-8 -------------------------------------------------------------------------------------- */

/* The code point at s[i] and its length; a malformed byte is one code point of its own. */
static uint32_t utf8_at(const char *str, size_t n, size_t i, size_t *len) {
    const unsigned char *s = (const unsigned char *)str + i;
    size_t left = n - i;
    unsigned char b = s[0];
    size_t l = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
    if (l == 0 || l > left) { *len = 1; return b; }
    uint32_t cp = l == 1 ? b : l == 2 ? (b & 0x1Fu) : l == 3 ? (b & 0x0Fu) : (b & 0x07u);
    for (size_t k = 1; k < l; k++) {
        if ((s[k] & 0xC0) != 0x80) { *len = 1; return b; }
        cp = cp << 6 | (s[k] & 0x3Fu);
    }
    *len = l;
    return cp;
}

/* the code point before s[i] (i > 0), and its length */
static uint32_t utf8_before(const char *s, size_t i, size_t *len) {
    size_t j = i - 1, k = 0;
    while (j > 0 && k < 3 && ((unsigned char)s[j] & 0xC0) == 0x80) { j--; k++; }
    size_t l;
    uint32_t cp = utf8_at(s, i, j, &l);
    if (j + l != i) { *len = 1; return (unsigned char)s[i - 1]; }
    *len = l;
    return cp;
}

static size_t utf8_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0, l; i < n; i += l, k++) utf8_at(s, n, i, &l);
    return k;
}

/* Python's str.isspace() */
static int py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

static ct_val *sub(ct_ctx *c, const ct_val *v, size_t a, size_t b) {
    return ct_str(c, v->s + a, b - a, v->m ? v->m + a : NULL);
}

/* ---- buffers ------------------------------------------------------------------------------------ */

int ct_buf_add(ct_ctx *c, ct_buf *b, const char *s, size_t n, const uint8_t *m, uint8_t fill) {
    if (n > CT_MAX_OUTPUT_BYTES || b->n > CT_MAX_OUTPUT_BYTES - n) {
        ct_err(c, HPT_ERR_INVALID, "the rendered text passes %u MiB", CT_MAX_OUTPUT_BYTES >> 20);
        return -1;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *ns = realloc(b->s, cap);
        if (ns) b->s = ns;
        uint8_t *nm = ns ? realloc(b->m, cap) : NULL;
        if (nm) b->m = nm;
        if (!ns || !nm) { ct_err(c, HPT_ERR_OOM, "out of memory for the rendered text"); return -1; }
        b->cap = cap;
    }
    if (n) {
        memcpy(b->s + b->n, s, n);
        if (m) memcpy(b->m + b->n, m, n);
        else memset(b->m + b->n, fill, n);
    }
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

static int add_val_str(ct_ctx *c, ct_buf *b, const ct_val *v) { return ct_buf_add(c, b, v->s, v->n, v->m, 0); }
static int add_lit(ct_ctx *c, ct_buf *b, const char *s) { return ct_buf_add(c, b, s, strlen(s), NULL, 0); }

static ct_val *buf_to_val(ct_ctx *c, ct_buf *b) {
    ct_val *v = c->failed ? NULL : ct_str(c, b->s ? b->s : "", b->n, b->m);
    free(b->s);
    free(b->m);
    memset(b, 0, sizeof *b);
    return v;
}

static void fmt_float(double f, char *o, size_t n) {
    if (isnan(f)) { snprintf(o, n, "nan"); return; }
    if (isinf(f)) { snprintf(o, n, f > 0 ? "inf" : "-inf"); return; }
    for (int prec = 1; prec <= 17; prec++) { /* Python's repr: the shortest that reads back */
        snprintf(o, n, "%.*g", prec, f);
        if (strtod(o, NULL) == f) break;
    }
    if (!strpbrk(o, ".eninf")) strncat(o, ".0", n - strlen(o) - 1);
}

/* Python's repr() of a value into b (strings quoted) */
static int add_repr(ct_ctx *c, ct_buf *b, const ct_val *v, int depth, int quote) {
    char tmp[64];
    if (depth > CT_MAX_DEPTH) { ct_err(c, HPT_ERR_INVALID, "value nested too deeply"); return -1; }
    switch (v->t) {
    case V_UNDEF: return 0;
    case V_NONE: return add_lit(c, b, "None");
    case V_BOOL: return add_lit(c, b, v->b ? "True" : "False");
    case V_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); return add_lit(c, b, tmp);
    case V_FLOAT: fmt_float(v->f, tmp, sizeof tmp); return add_lit(c, b, tmp);
    case V_STR: {
        if (!quote) return add_val_str(c, b, v);
        int has_sq = memchr(v->s, '\'', v->n) != NULL, has_dq = memchr(v->s, '"', v->n) != NULL;
        char q = has_sq && !has_dq ? '"' : '\'';
        if (ct_buf_add(c, b, &q, 1, NULL, 0) != 0) return -1;
        for (size_t i = 0; i < v->n; i++) {
            unsigned char ch = (unsigned char)v->s[i];
            uint8_t m = v->m ? v->m[i] : 0;
            const char *e = ch == '\\' ? "\\\\" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : ch == '\t' ? "\\t"
                          : ch == (unsigned char)q ? (q == '\'' ? "\\'" : "\\\"") : NULL;
            if (!e && (ch < 0x20 || ch == 0x7F)) { snprintf(tmp, sizeof tmp, "\\x%02x", ch); e = tmp; }
            if (ct_buf_add(c, b, e ? e : (const char *)&v->s[i], e ? strlen(e) : 1, NULL, m) != 0) return -1;
        }
        return ct_buf_add(c, b, &q, 1, NULL, 0);
    }
    case V_LIST:
        if (add_lit(c, b, "[") != 0) return -1;
        for (size_t i = 0; i < v->n; i++)
            if ((i && add_lit(c, b, ", ") != 0) || add_repr(c, b, v->items[i], depth + 1, 1) != 0) return -1;
        return add_lit(c, b, "]");
    case V_DICT:
        if (add_lit(c, b, "{") != 0) return -1;
        for (size_t i = 0; i < v->n; i++)
            if ((i && add_lit(c, b, ", ") != 0) || add_repr(c, b, v->keys[i], depth + 1, 1) != 0 ||
                add_lit(c, b, ": ") != 0 || add_repr(c, b, v->items[i], depth + 1, 1) != 0)
                return -1;
        return add_lit(c, b, "}");
    case V_NS: return add_lit(c, b, "<Namespace>");
    }
    return 0;
}

ct_val *ct_to_str(ct_ctx *c, ct_val *v) {
    if (v->t == V_STR) return v;
    ct_buf b = {0};
    add_repr(c, &b, v, 0, 0);
    return buf_to_val(c, &b);
}

/* json.dumps(v, ensure_ascii=False, indent=indent) as transformers' tojson filter writes it */
static int add_json(ct_ctx *c, ct_buf *b, const ct_val *v, int64_t indent, int level) {
    char tmp[64];
    if (level > CT_MAX_DEPTH) { ct_err(c, HPT_ERR_INVALID, "value nested too deeply for tojson"); return -1; }
    switch (v->t) {
    case V_UNDEF: ct_err(c, HPT_ERR_INVALID, "tojson of an undefined value"); return -1;
    case V_NONE: return add_lit(c, b, "null");
    case V_BOOL: return add_lit(c, b, v->b ? "true" : "false");
    case V_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); return add_lit(c, b, tmp);
    case V_FLOAT:
        if (isnan(v->f)) return add_lit(c, b, "NaN");
        if (isinf(v->f)) return add_lit(c, b, v->f > 0 ? "Infinity" : "-Infinity");
        fmt_float(v->f, tmp, sizeof tmp);
        return add_lit(c, b, tmp);
    case V_STR: {
        uint8_t m = 0;
        for (size_t i = 0; v->m && i < v->n; i++) m |= v->m[i];
        if (ct_buf_add(c, b, "\"", 1, NULL, m) != 0) return -1;
        for (size_t i = 0; i < v->n; i++) {
            unsigned char ch = (unsigned char)v->s[i];
            const char *e = ch == '"' ? "\\\"" : ch == '\\' ? "\\\\" : ch == '\n' ? "\\n" : ch == '\r' ? "\\r"
                          : ch == '\t' ? "\\t" : ch == '\b' ? "\\b" : ch == '\f' ? "\\f" : NULL;
            if (!e && ch < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", ch); e = tmp; }
            if (ct_buf_add(c, b, e ? e : (const char *)&v->s[i], e ? strlen(e) : 1, NULL, m) != 0) return -1;
        }
        return ct_buf_add(c, b, "\"", 1, NULL, m);
    }
    case V_LIST: case V_DICT: case V_NS: {
        int dict = v->t != V_LIST;
        if (add_lit(c, b, dict ? "{" : "[") != 0) return -1;
        for (size_t i = 0; i < v->n; i++) {
            if (i && add_lit(c, b, indent >= 0 ? "," : ", ") != 0) return -1;
            if (indent >= 0) {
                if (add_lit(c, b, "\n") != 0) return -1;
                for (int64_t k = 0; k < indent * (level + 1); k++) if (add_lit(c, b, " ") != 0) return -1;
            }
            if (dict) {
                const ct_val *k = v->keys[i];
                if (k->t != V_STR) { ct_err(c, HPT_ERR_INVALID, "tojson: a key that is not a string"); return -1; }
                if (add_json(c, b, k, indent, level + 1) != 0 || add_lit(c, b, ": ") != 0) return -1;
            }
            if (add_json(c, b, v->items[i], indent, level + 1) != 0) return -1;
        }
        if (indent >= 0 && v->n) {
            if (add_lit(c, b, "\n") != 0) return -1;
            for (int64_t k = 0; k < indent * level; k++) if (add_lit(c, b, " ") != 0) return -1;
        }
        return add_lit(c, b, dict ? "}" : "]");
    }
    }
    return 0;
}

ct_val *ct_concat(ct_ctx *c, const ct_val *a, const ct_val *b) {
    ct_val *v = alloc(c, sizeof *v);
    if (!v) return NULL;
    char *s = alloc(c, a->n + b->n + 1);
    if (!s) return NULL;
    memcpy(s, a->s, a->n);
    memcpy(s + a->n, b->s, b->n);
    v->t = V_STR;
    v->s = s;
    v->n = a->n + b->n;
    if (a->m || b->m) {
        uint8_t *m = alloc(c, v->n + 1);
        if (!m) return NULL;
        if (a->m) memcpy(m, a->m, a->n);
        if (b->m) memcpy(m + a->n, b->m, b->n);
        v->m = m;
    }
    return v;
}

/* ---- JSON ---------------------------------------------------------------------------------------- */

ct_val *ct_from_json(ct_ctx *c, const void *json, int depth) {
    const cJSON *j = json;
    if (depth > CT_MAX_DEPTH) return ct_err(c, HPT_ERR_INVALID, "JSON nested more than %d deep", CT_MAX_DEPTH);
    if (cJSON_IsNull(j)) return &ct_none;
    if (cJSON_IsBool(j)) return ct_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0) return ct_int(c, (int64_t)d);
        return ct_float(c, d);
    }
    if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring);
        ct_val *v = ct_str(c, j->valuestring, n, NULL);
        uint8_t *m = v ? alloc(c, n + 1) : NULL;
        if (!m) return NULL;
        memset(m, 1, n);
        v->m = m;
        return v;
    }
    if (cJSON_IsArray(j)) {
        ct_val *l = ct_list(c, (size_t)cJSON_GetArraySize(j));
        const cJSON *e;
        if (!l) return NULL;
        cJSON_ArrayForEach(e, j) {
            ct_val *x = ct_from_json(c, e, depth + 1);
            if (!x || ct_list_push(c, l, x) != 0) return NULL;
        }
        return l;
    }
    if (cJSON_IsObject(j)) {
        ct_val *d = ct_dict(c, V_DICT);
        const cJSON *e;
        if (!d) return NULL;
        cJSON_ArrayForEach(e, j) {
            ct_val *k = ct_cstr(c, e->string ? e->string : ""), *x = k ? ct_from_json(c, e, depth + 1) : NULL;
            if (!x || ct_dict_set(c, d, k, x) != 0) return NULL;
        }
        return d;
    }
    return ct_err(c, HPT_ERR_INVALID, "unreadable JSON value");
}

/* ---- items and slices ---------------------------------------------------------------------------- */

/* byte offsets of each code point of s, and n (count + 1 entries) */
static size_t *cp_offsets(ct_ctx *c, const ct_val *s, size_t *count) {
    size_t k = utf8_count(s->s, s->n);
    size_t *off = alloc(c, (k + 1) * sizeof *off);
    if (!off) return NULL;
    size_t i = 0, j = 0, l;
    for (; i < s->n; i += l) { off[j++] = i; utf8_at(s->s, s->n, i, &l); }
    off[j] = s->n;
    *count = k;
    return off;
}

ct_val *ct_getitem(ct_ctx *c, ct_val *obj, ct_val *key) {
    if (obj->t == V_DICT || obj->t == V_NS) {
        ssize_t i = dict_find(obj, key);
        return i >= 0 ? obj->items[i] : &ct_undef;
    }
    if (obj->t == V_UNDEF) return ct_err(c, HPT_ERR_INVALID, "an item of an undefined value");
    if ((obj->t != V_LIST && obj->t != V_STR) || (key->t != V_INT && key->t != V_BOOL)) return &ct_undef;
    int64_t k = inum(key);
    if (obj->t == V_LIST) {
        if (k < 0) k += (int64_t)obj->n;
        return k >= 0 && (uint64_t)k < obj->n ? obj->items[k] : &ct_undef;
    }
    size_t n;
    size_t *off = cp_offsets(c, obj, &n);
    if (!off) return NULL;
    if (k < 0) k += (int64_t)n;
    if (k < 0 || (uint64_t)k >= n) return &ct_undef;
    return sub(c, obj, off[k], off[k + 1]);
}

/* Python's slice.indices() */
static int slice_bound(ct_ctx *c, ct_val *v, int64_t dflt, int64_t n, int64_t step, int64_t *out) {
    if (!v || v->t == V_NONE || v->t == V_UNDEF) { *out = dflt; return 0; }
    if (v->t != V_INT && v->t != V_BOOL) { ct_err(c, HPT_ERR_INVALID, "slice indices must be integers"); return -1; }
    int64_t x = inum(v);
    if (x < 0) { x += n; if (x < 0) x = step < 0 ? -1 : 0; }
    else if (x >= n) x = step < 0 ? n - 1 : n;
    *out = x;
    return 0;
}

ct_val *ct_slice(ct_ctx *c, ct_val *obj, ct_val *start, ct_val *stop, ct_val *step) {
    int64_t st = 1;
    if (step && step->t != V_NONE && step->t != V_UNDEF) {
        if (step->t != V_INT) return ct_err(c, HPT_ERR_INVALID, "slice step must be an integer");
        if ((st = step->i) == 0) return ct_err(c, HPT_ERR_INVALID, "slice step cannot be zero");
    }
    size_t n = obj->n, *off = NULL;
    if (obj->t == V_STR) { if (!(off = cp_offsets(c, obj, &n))) return NULL; }
    else if (obj->t != V_LIST) return ct_err(c, HPT_ERR_INVALID, "cannot slice a %s", ct_type_name(obj));
    int64_t a, b, len = (int64_t)n;
    if (slice_bound(c, start, st < 0 ? len - 1 : 0, len, st, &a) != 0 ||
        slice_bound(c, stop, st < 0 ? -1 : len, len, st, &b) != 0)
        return NULL;
    if (obj->t == V_LIST) {
        ct_val *l = ct_list(c, 0);
        for (int64_t i = a; l && (st > 0 ? i < b : i > b); i += st)
            if (ct_list_push(c, l, obj->items[i]) != 0) return NULL;
        return l;
    }
    ct_buf out = {0};
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
        if (ct_buf_add(c, &out, obj->s + off[i], off[i + 1] - off[i], obj->m ? obj->m + off[i] : NULL, 0) != 0)
            break;
    return buf_to_val(c, &out);
}

/* ---- operators ------------------------------------------------------------------------------------ */

static ct_val *type_error(ct_ctx *c, const char *op, const ct_val *a, const ct_val *b) {
    return ct_err(c, HPT_ERR_INVALID, "unsupported operand types for %s: '%s' and '%s'", op,
                  ct_type_name(a), ct_type_name(b));
}

static const void *find_bytes(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && memcmp(h + i, nd, nn) == 0) return h + i;
    return NULL;
}

ct_val *ct_binop(ct_ctx *c, ct_op op, ct_val *a, ct_val *b) {
    static const char *const names[] = {"+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<",
                                        "<=", ">", ">=", "in", "not in"};
    int both_int = (a->t == V_INT || a->t == V_BOOL) && (b->t == V_INT || b->t == V_BOOL);
    int64_t x = both_int ? inum(a) : 0, y = both_int ? inum(b) : 0, r;
    switch (op) {
    case OP_CONCAT: {
        ct_val *sa = ct_to_str(c, a), *sb = sa ? ct_to_str(c, b) : NULL;
        return sb ? ct_concat(c, sa, sb) : NULL;
    }
    case OP_EQ: return ct_bool(ct_equal(a, b));
    case OP_NE: return ct_bool(!ct_equal(a, b));
    case OP_IN: case OP_NOTIN: {
        int in;
        if (b->t == V_STR) {
            if (a->t != V_STR) return type_error(c, names[op], a, b);
            in = find_bytes(b->s, b->n, a->s, a->n) != NULL;
        } else if (b->t == V_LIST) {
            in = 0;
            for (size_t i = 0; i < b->n && !in; i++) in = ct_equal(a, b->items[i]);
        } else if (b->t == V_DICT || b->t == V_NS) {
            in = dict_find(b, a) >= 0;
        } else {
            return type_error(c, names[op], a, b);
        }
        return ct_bool(op == OP_IN ? in : !in);
    }
    case OP_LT: case OP_LE: case OP_GT: case OP_GE: {
        int cmp;
        if (is_num(a) && is_num(b)) {
            double p = num(a), q = num(b);
            cmp = both_int ? (x > y) - (x < y) : (p > q) - (p < q);
        } else if (a->t == V_STR && b->t == V_STR) {
            int m = memcmp(a->s, b->s, a->n < b->n ? a->n : b->n);
            cmp = m ? m : (a->n > b->n) - (a->n < b->n);
        } else {
            return type_error(c, names[op], a, b);
        }
        return ct_bool(op == OP_LT ? cmp < 0 : op == OP_LE ? cmp <= 0 : op == OP_GT ? cmp > 0 : cmp >= 0);
    }
    case OP_ADD:
        if (a->t == V_STR && b->t == V_STR) return ct_concat(c, a, b);
        if (a->t == V_LIST && b->t == V_LIST) {
            ct_val *l = ct_list(c, a->n + b->n);
            for (size_t i = 0; l && i < a->n + b->n; i++)
                if (ct_list_push(c, l, i < a->n ? a->items[i] : b->items[i - a->n]) != 0) return NULL;
            return l;
        }
        if (both_int) return __builtin_add_overflow(x, y, &r) ? ct_err(c, HPT_ERR_INVALID, "integer overflow") : ct_int(c, r);
        if (is_num(a) && is_num(b)) return ct_float(c, num(a) + num(b));
        return type_error(c, names[op], a, b);
    case OP_SUB:
        if (both_int) return __builtin_sub_overflow(x, y, &r) ? ct_err(c, HPT_ERR_INVALID, "integer overflow") : ct_int(c, r);
        if (is_num(a) && is_num(b)) return ct_float(c, num(a) - num(b));
        return type_error(c, names[op], a, b);
    case OP_MUL:
        if (both_int) return __builtin_mul_overflow(x, y, &r) ? ct_err(c, HPT_ERR_INVALID, "integer overflow") : ct_int(c, r);
        if (is_num(a) && is_num(b)) return ct_float(c, num(a) * num(b));
        if (a->t == V_STR && (b->t == V_INT || b->t == V_BOOL)) { /* 'ab' * 3 */
            ct_buf out = {0};
            for (int64_t i = 0; i < inum(b); i++)
                if (ct_buf_add(c, &out, a->s, a->n, a->m, 0) != 0) break;
            return buf_to_val(c, &out);
        }
        return type_error(c, names[op], a, b);
    case OP_DIV:
        if (!is_num(a) || !is_num(b)) return type_error(c, names[op], a, b);
        if (num(b) == 0) return ct_err(c, HPT_ERR_INVALID, "division by zero");
        return ct_float(c, num(a) / num(b));
    case OP_FLOORDIV: case OP_MOD:
        if (!is_num(a) || !is_num(b)) return type_error(c, names[op], a, b);
        if (num(b) == 0) return ct_err(c, HPT_ERR_INVALID, "division by zero");
        if (both_int) {
            if (x == INT64_MIN && y == -1) return ct_err(c, HPT_ERR_INVALID, "integer overflow");
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; } /* Python: the divisor's sign */
            return ct_int(c, op == OP_MOD ? m : q);
        } else {
            double p = num(a), q = num(b), fl = floor(p / q);
            return ct_float(c, op == OP_MOD ? p - fl * q : fl);
        }
    case OP_POW:
        if (both_int && y >= 0) {
            int64_t acc = 1;
            for (int64_t i = 0; i < y; i++)
                if (__builtin_mul_overflow(acc, x, &acc)) return ct_err(c, HPT_ERR_INVALID, "integer overflow");
            return ct_int(c, acc);
        }
        if (is_num(a) && is_num(b)) return ct_float(c, pow(num(a), num(b)));
        return type_error(c, names[op], a, b);
    }
    return type_error(c, "?", a, b);
}

/* ---- strings ------------------------------------------------------------------------------------ */

/* 1 if code point cp is in the code points of chars (NULL: Python's white space) */
static int in_chars(uint32_t cp, const ct_val *chars) {
    if (!chars) return py_space(cp);
    for (size_t i = 0, l; i < chars->n; i += l)
        if (utf8_at(chars->s, chars->n, i, &l) == cp) return 1;
    return 0;
}

/* str.strip / lstrip / rstrip (which: 1 left, 2 right, 3 both) */
static ct_val *strip(ct_ctx *c, ct_val *s, const ct_val *chars, int which) {
    size_t a = 0, b = s->n, l;
    if (which & 1)
        while (a < b && in_chars(utf8_at(s->s, s->n, a, &l), chars)) a += l;
    if (which & 2)
        while (b > a && in_chars(utf8_before(s->s, b, &l), chars)) b -= l;
    return sub(c, s, a, b);
}

static ct_val *split(ct_ctx *c, ct_val *s, const ct_val *sep, int64_t maxsplit) {
    ct_val *l = ct_list(c, 0);
    if (!l) return NULL;
    if (!sep) { /* runs of white space, none at the ends */
        size_t i = 0, len;
        for (;;) {
            while (i < s->n && py_space(utf8_at(s->s, s->n, i, &len))) i += len;
            if (i >= s->n) break;
            size_t j = i;
            if (maxsplit >= 0 && (int64_t)l->n == maxsplit) {
                j = s->n;
                while (j > i && py_space(utf8_before(s->s, j, &len))) j -= len;
            } else {
                while (j < s->n && !py_space(utf8_at(s->s, s->n, j, &len))) j += len;
            }
            ct_val *p = sub(c, s, i, j);
            if (!p || ct_list_push(c, l, p) != 0) return NULL;
            i = j;
        }
        return l;
    }
    if (sep->n == 0) return ct_err(c, HPT_ERR_INVALID, "split: empty separator");
    size_t i = 0;
    for (;;) {
        const char *f = (maxsplit < 0 || (int64_t)l->n < maxsplit) ? find_bytes(s->s + i, s->n - i, sep->s, sep->n) : NULL;
        size_t j = f ? (size_t)(f - s->s) : s->n;
        ct_val *p = sub(c, s, i, j);
        if (!p || ct_list_push(c, l, p) != 0) return NULL;
        if (!f) break;
        i = j + sep->n;
    }
    return l;
}

static ct_val *replace(ct_ctx *c, ct_val *s, const ct_val *old, const ct_val *new_, int64_t count) {
    ct_buf out = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old->n == 0) return ct_err(c, HPT_ERR_UNSUPPORTED, "replace with an empty string to find");
    while (i <= s->n) {
        const char *f = (count < 0 || done < count) ? find_bytes(s->s + i, s->n - i, old->s, old->n) : NULL;
        size_t j = f ? (size_t)(f - s->s) : s->n;
        if (ct_buf_add(c, &out, s->s + i, j - i, s->m ? s->m + i : NULL, 0) != 0) break;
        if (!f) break;
        if (ct_buf_add(c, &out, new_->s, new_->n, new_->m, 0) != 0) break;
        i = j + old->n;
        done++;
    }
    return buf_to_val(c, &out);
}

/* ASCII case mapping (mode 0 lower, 1 upper, 2 capitalize, 3 title) */
static ct_val *recase(ct_ctx *c, ct_val *s, int mode) {
    char *d = alloc(c, s->n + 1);
    ct_val *r = d ? ct_str(c, "", 0, NULL) : NULL;
    if (!r) return NULL;
    memcpy(d, s->s, s->n);
    r->s = d;
    r->n = s->n;
    r->m = s->m;
    int start = 1;
    for (size_t i = 0; i < r->n; i++) {
        char ch = d[i];
        int alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
        int up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && start);
        if (alpha) d[i] = up ? (char)(ch >= 'a' && ch <= 'z' ? ch - 32 : ch) : (char)(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch);
        start = !alpha && !(ch & 0x80);
    }
    return r;
}

/* the argument named kw, or the positional one at pos; NULL if not given */
static ct_val *arg(ct_val **args, const char **kw, int n, int pos, const char *name) {
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (kw && kw[i]) { if (strcmp(kw[i], name) == 0) return args[i]; }
        else if (k++ == pos) return args[i];
    }
    return NULL;
}

static ct_val *need_str(ct_ctx *c, ct_val *v, const char *what) {
    if (!v || v->t != V_STR) return ct_err(c, HPT_ERR_INVALID, "%s needs a string, not %s", what, v ? ct_type_name(v) : "nothing");
    return v;
}

static int64_t opt_int(ct_val *v, int64_t dflt) { return v && (v->t == V_INT || v->t == V_BOOL) ? inum(v) : dflt; }

ct_val *ct_method(ct_ctx *c, ct_val *self, const char *name, ct_val **args, const char **kw, int n) {
    ct_val *a0 = arg(args, kw, n, 0, "__0"), *a1 = arg(args, kw, n, 1, "__1");
    if (self->t == V_STR) {
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            int end = name[0] == 'e';
            ct_val *one = a0;
            if (!a0) return ct_err(c, HPT_ERR_INVALID, "%s needs an argument", name);
            size_t k = a0->t == V_LIST ? a0->n : 1;
            for (size_t i = 0; i < k; i++) {
                if (a0->t == V_LIST) one = a0->items[i];
                if (!need_str(c, one, name)) return NULL;
                if (one->n <= self->n && memcmp(self->s + (end ? self->n - one->n : 0), one->s, one->n) == 0)
                    return &ct_true;
            }
            return &ct_false;
        }
        if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
            if (a0 && a0->t != V_NONE && !need_str(c, a0, name)) return NULL;
            return strip(c, self, a0 && a0->t == V_STR ? a0 : NULL, name[0] == 'l' ? 1 : name[0] == 'r' ? 2 : 3);
        }
        if (!strcmp(name, "split")) {
            ct_val *sep = arg(args, kw, n, 0, "sep"), *mx = arg(args, kw, n, 1, "maxsplit");
            if (sep && sep->t != V_NONE && !need_str(c, sep, name)) return NULL;
            return split(c, self, sep && sep->t == V_STR ? sep : NULL, opt_int(mx, -1));
        }
        if (!strcmp(name, "lower") || !strcmp(name, "upper") || !strcmp(name, "capitalize") || !strcmp(name, "title"))
            return recase(c, self, name[0] == 'l' ? 0 : name[0] == 'u' ? 1 : name[0] == 'c' ? 2 : 3);
        if (!strcmp(name, "replace")) {
            if (!need_str(c, a0, name) || !need_str(c, a1, name)) return NULL;
            return replace(c, self, a0, a1, opt_int(arg(args, kw, n, 2, "count"), -1));
        }
        if (!strcmp(name, "find") || !strcmp(name, "count")) {
            if (!need_str(c, a0, name)) return NULL;
            if (name[0] == 'f') {
                const char *f = find_bytes(self->s, self->n, a0->s, a0->n);
                return ct_int(c, f ? (int64_t)utf8_count(self->s, (size_t)(f - self->s)) : -1);
            }
            int64_t k = 0;
            for (size_t i = 0; a0->n && i + a0->n <= self->n;) {
                const char *f = find_bytes(self->s + i, self->n - i, a0->s, a0->n);
                if (!f) break;
                k++;
                i = (size_t)(f - self->s) + a0->n;
            }
            return ct_int(c, k);
        }
        if (!strcmp(name, "join")) return ct_filter(c, "join", a0 ? a0 : &ct_undef, &self, NULL, 1);
    } else if (self->t == V_DICT) {
        if (!strcmp(name, "get")) {
            ssize_t i = a0 ? dict_find(self, a0) : -1;
            return i >= 0 ? self->items[i] : a1 ? a1 : &ct_none;
        }
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values")) {
            ct_val *l = ct_list(c, self->n);
            for (size_t i = 0; l && i < self->n; i++) {
                ct_val *e = name[0] == 'k' ? self->keys[i] : name[0] == 'v' ? self->items[i] : ct_list(c, 2);
                if (!e) return NULL;
                if (name[0] == 'i' && (ct_list_push(c, e, self->keys[i]) != 0 || ct_list_push(c, e, self->items[i]) != 0))
                    return NULL;
                if (ct_list_push(c, l, e) != 0) return NULL;
            }
            return l;
        }
    }
    return ct_err(c, HPT_ERR_UNSUPPORTED, "%s has no method '%s' in hptrain's Jinja subset", ct_type_name(self), name);
}

/* ---- filters and tests ---------------------------------------------------------------------------- */

static const char *const k_filters[] = {"trim", "length", "count", "tojson", "string", "safe", "lower",
    "upper", "capitalize", "title", "replace", "first", "last", "join", "default", "d", "reverse", "list",
    "items", "int", "abs", "map", NULL};
static const char *const k_tests[] = {"defined", "undefined", "none", "boolean", "false", "true", "string",
    "number", "integer", "float", "mapping", "iterable", "sequence", "callable", "odd", "even",
    "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in",
    "sameas", NULL};

int ct_known(const char *name, int test) {
    for (const char *const *k = test ? k_tests : k_filters; *k; k++)
        if (strcmp(*k, name) == 0) return 1;
    return 0;
}

ct_val *ct_filter(ct_ctx *c, const char *name, ct_val *v, ct_val **args, const char **kw, int n) {
    if (!strcmp(name, "trim")) {
        ct_val *chars = arg(args, kw, n, 0, "chars");
        ct_val *s = ct_to_str(c, v);
        return s ? strip(c, s, chars && chars->t == V_STR ? chars : NULL, 3) : NULL;
    }
    if (!strcmp(name, "length") || !strcmp(name, "count")) {
        if (v->t == V_STR) return ct_int(c, (int64_t)utf8_count(v->s, v->n));
        if (v->t == V_LIST || v->t == V_DICT || v->t == V_NS) return ct_int(c, (int64_t)v->n);
        if (v->t == V_UNDEF) return ct_int(c, 0);
        return ct_err(c, HPT_ERR_INVALID, "length of a %s", ct_type_name(v));
    }
    if (!strcmp(name, "tojson")) {
        ct_buf b = {0};
        add_json(c, &b, v, opt_int(arg(args, kw, n, 0, "indent"), -1), 0);
        return buf_to_val(c, &b);
    }
    if (!strcmp(name, "string")) return ct_to_str(c, v);
    if (!strcmp(name, "safe")) return v;
    if (!strcmp(name, "lower") || !strcmp(name, "upper") || !strcmp(name, "capitalize") || !strcmp(name, "title")) {
        ct_val *s = ct_to_str(c, v);
        return s ? ct_method(c, s, name, NULL, NULL, 0) : NULL;
    }
    if (!strcmp(name, "replace")) {
        ct_val *s = ct_to_str(c, v);
        return s ? ct_method(c, s, name, args, kw, n) : NULL;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        if (v->t != V_LIST && v->t != V_STR) return ct_err(c, HPT_ERR_INVALID, "%s of a %s", name, ct_type_name(v));
        if (v->n == 0) return &ct_undef;
        ct_val *k = ct_int(c, name[0] == 'f' ? 0 : -1);
        return k ? ct_getitem(c, v, k) : NULL;
    }
    if (!strcmp(name, "join")) {
        ct_val *sep = arg(args, kw, n, 0, "d"), *attr = arg(args, kw, n, 1, "attribute");
        if (v->t != V_LIST) return ct_err(c, HPT_ERR_INVALID, "join of a %s", ct_type_name(v));
        if (sep && !need_str(c, sep, "join")) return NULL;
        ct_buf b = {0};
        for (size_t i = 0; i < v->n; i++) {
            ct_val *e = v->items[i];
            if (attr) e = ct_getitem(c, e, attr);
            if (!e || !(e = ct_to_str(c, e))) break;
            if ((i && sep && add_val_str(c, &b, sep) != 0) || add_val_str(c, &b, e) != 0) break;
        }
        return buf_to_val(c, &b);
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        ct_val *dflt = arg(args, kw, n, 0, "default_value"), *boolean = arg(args, kw, n, 1, "boolean");
        int use = v->t == V_UNDEF || (boolean && ct_truthy(boolean) && !ct_truthy(v));
        return use ? (dflt ? dflt : ct_cstr(c, "")) : v;
    }
    if (!strcmp(name, "reverse") || !strcmp(name, "list")) {
        if (v->t == V_DICT) { /* the keys */
            ct_val *l = ct_list(c, v->n);
            for (size_t i = 0; l && i < v->n; i++) if (ct_list_push(c, l, v->keys[i]) != 0) return NULL;
            v = l;
            if (!v) return NULL;
        }
        if (v->t == V_STR && name[0] == 'l') {
            ct_val *l = ct_list(c, v->n);
            for (size_t i = 0, len; l && i < v->n; i += len) {
                utf8_at(v->s, v->n, i, &len);
                ct_val *ch = sub(c, v, i, i + len);
                if (!ch || ct_list_push(c, l, ch) != 0) return NULL;
            }
            return l;
        }
        if (name[0] == 'l') {
            if (v->t != V_LIST) return ct_err(c, HPT_ERR_INVALID, "list of a %s", ct_type_name(v));
            return ct_slice(c, v, NULL, NULL, NULL);
        }
        ct_val *m1 = ct_int(c, -1);
        return m1 ? ct_slice(c, v, NULL, NULL, m1) : NULL;
    }
    if (!strcmp(name, "items")) {
        if (v->t != V_DICT) return ct_err(c, HPT_ERR_INVALID, "items of a %s", ct_type_name(v));
        return ct_method(c, v, "items", NULL, NULL, 0);
    }
    if (!strcmp(name, "int")) {
        if (v->t == V_INT) return v;
        if (v->t == V_BOOL) return ct_int(c, v->b);
        if (v->t == V_FLOAT && fabs(v->f) < 9e18) return ct_int(c, (int64_t)v->f);
        if (v->t == V_STR) {
            char tmp[32];
            snprintf(tmp, sizeof tmp, "%.*s", (int)(v->n < 31 ? v->n : 31), v->s);
            char *end;
            long long x = strtoll(tmp, &end, 10);
            if (end != tmp && *end == 0 && v->n < 31) return ct_int(c, x);
        }
        return opt_int(arg(args, kw, n, 0, "default"), 0) ? ct_int(c, opt_int(arg(args, kw, n, 0, "default"), 0)) : ct_int(c, 0);
    }
    if (!strcmp(name, "abs")) {
        if (v->t == V_INT && v->i != INT64_MIN) return ct_int(c, v->i < 0 ? -v->i : v->i);
        if (v->t == V_FLOAT) return ct_float(c, fabs(v->f));
        return ct_err(c, HPT_ERR_INVALID, "abs of a %s", ct_type_name(v));
    }
    if (!strcmp(name, "map")) { /* map(attribute='x') only */
        ct_val *attr = arg(args, kw, n, 99, "attribute");
        if (!attr || v->t != V_LIST) return ct_err(c, HPT_ERR_UNSUPPORTED, "map: only map(attribute=...) over a list");
        ct_val *l = ct_list(c, v->n);
        for (size_t i = 0; l && i < v->n; i++) {
            ct_val *e = ct_getitem(c, v->items[i], attr);
            if (!e || ct_list_push(c, l, e) != 0) return NULL;
        }
        return l;
    }
    return ct_err(c, HPT_ERR_UNSUPPORTED, "the filter '%s' is not in hptrain's Jinja subset (docs/chat.md)", name);
}

ct_val *ct_test(ct_ctx *c, const char *name, ct_val *v, ct_val **args, int n) {
    ct_val *a = n > 0 ? args[0] : NULL;
    if (!strcmp(name, "defined")) return ct_bool(v->t != V_UNDEF);
    if (!strcmp(name, "undefined")) return ct_bool(v->t == V_UNDEF);
    if (!strcmp(name, "none")) return ct_bool(v->t == V_NONE);
    if (!strcmp(name, "boolean")) return ct_bool(v->t == V_BOOL);
    if (!strcmp(name, "false")) return ct_bool(v->t == V_BOOL && !v->b);
    if (!strcmp(name, "true")) return ct_bool(v->t == V_BOOL && v->b);
    if (!strcmp(name, "string")) return ct_bool(v->t == V_STR);
    if (!strcmp(name, "number")) return ct_bool(is_num(v));
    if (!strcmp(name, "integer")) return ct_bool(v->t == V_INT);
    if (!strcmp(name, "float")) return ct_bool(v->t == V_FLOAT);
    if (!strcmp(name, "mapping")) return ct_bool(v->t == V_DICT);
    if (!strcmp(name, "iterable") || !strcmp(name, "sequence"))
        return ct_bool(v->t == V_STR || v->t == V_LIST || v->t == V_DICT);
    if (!strcmp(name, "callable")) return &ct_false;
    if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        int64_t d = name[0] == 'd' ? opt_int(a, 0) : 2;
        if (v->t != V_INT || d == 0) return ct_err(c, HPT_ERR_INVALID, "the test %s needs integers", name);
        int64_t m = d == -1 ? 0 : v->i % d;
        return ct_bool(name[0] == 'o' ? m != 0 : m == 0);
    }
    static const char *const cmp[] = {"eq", "equalto", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">",
                                      "ge", ">=", "in", "sameas"};
    static const ct_op ops[] = {OP_EQ, OP_EQ, OP_EQ, OP_NE, OP_NE, OP_LT, OP_LT, OP_LE, OP_LE, OP_GT,
                                OP_GT, OP_GE, OP_GE, OP_IN, OP_EQ};
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
        if (!strcmp(name, cmp[k])) {
            if (!a) return ct_err(c, HPT_ERR_INVALID, "the test %s needs an argument", name);
            if (k == 14 && (v->t != a->t || (v->t != V_NONE && v->t != V_BOOL && v->t != V_UNDEF)))
                return ct_bool(v == a);
            return ct_binop(c, ops[k], v, a);
        }
    return ct_err(c, HPT_ERR_UNSUPPORTED, "the test '%s' is not in hptrain's Jinja subset (docs/chat.md)", name);
}
