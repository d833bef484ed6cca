/* chat_int.h: what the chat template interpreter's files share: the arena, values (strings carry
 * a per-byte provenance mask: 1 where the byte came from the conversation), the syntax tree and
 * the render context. chat_parse.c lexes and parses a template into nodes; chat_eval.c walks
 * them; chat_value.c holds values, strings, filters, tests and methods. Not public. */
#ifndef HPT_CHAT_INT_H
#define HPT_CHAT_INT_H

#include "core/core.h"

#include <stdint.h>

/* Limits on untrusted input: each is an error (HPT_ERR_INVALID), never a crash. */
#define CT_MAX_SOURCE_BYTES (4u << 20)   /* a template */
#define CT_MAX_ARENA_BYTES (256ull << 20) /* all values of one render */
#define CT_MAX_OUTPUT_BYTES (256u << 20) /* one rendered text */
#define CT_MAX_DEPTH 200                 /* nesting of expressions and statements */
#define CT_MAX_STEPS 1000000ull          /* statements and loop iterations of one render */
#define CT_MAX_RANGE 100000              /* range()'s items (Jinja's sandbox: MAX_RANGE) */
#define CT_SMALL_INTS 256                /* ints 0..255 made once per render */

/* ---- arena: blocks of at least 64 KiB, freed together ---------------------------------- */
typedef struct ct_block ct_block;
typedef struct {
    ct_block *head;
    size_t used_bytes, limit_bytes;
} ct_arena;
void *ct_alloc(ct_arena *a, size_t bytes); /* zeroed; NULL past the limit or out of memory */
void ct_arena_free(ct_arena *a);

/* ---- values -------------------------------------------------------------------------------- */
typedef enum {
    V_UNDEF, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_LIST, V_DICT, V_NS
} ct_type;

typedef struct ct_val ct_val;
struct ct_val {
    ct_type t;
    int b;            /* V_BOOL */
    int64_t i;        /* V_INT */
    double f;         /* V_FLOAT */
    const char *s;    /* V_STR: n bytes (not NUL-terminated) */
    const uint8_t *m; /* V_STR: (n) provenance, 1 = the conversation's; NULL: all 0 */
    size_t n;         /* V_STR bytes; V_LIST, V_DICT, V_NS entries */
    size_t cap;
    ct_val **items;   /* V_LIST items; V_DICT, V_NS values */
    ct_val **keys;    /* V_DICT, V_NS keys (strings), in insertion order */
};
extern ct_val ct_undef, ct_none, ct_true, ct_false;

/* ---- the syntax tree ------------------------------------------------------------------------ */
typedef enum {
    /* statements */
    N_TEXT, N_OUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_BREAK, N_CONTINUE,
    /* expressions */
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NEG, E_NOT, E_BIN,
    E_AND, E_OR, E_COND, E_LIST, E_DICT
} ct_kind;

typedef enum {
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN
} ct_op;

typedef struct ct_node ct_node;
struct ct_node {
    ct_kind kind;
    int line;           /* of the template, for messages */
    ct_op op;           /* E_BIN */
    int negate;         /* E_TEST: `is not` */
    const char *name;   /* E_NAME, E_ATTR, E_FILTER, E_TEST; N_SET, N_SETBLOCK, N_FOR target */
    const char *name2;  /* N_FOR second target (k, v); N_SET: the attribute of `set ns.attr` */
    ct_val *lit;        /* E_LIT; N_TEXT's text */
    ct_node *a, *b, *c, *d; /* operands. N_IF: cond, body, else; N_FOR: iterable, body, else,
                               filter; E_SLICE: object, start, stop, step; E_COND: then, cond,
                               else; N_OUT, N_SET: the expression; N_SETBLOCK: body */
    ct_node **args;     /* E_CALL, E_FILTER, E_TEST arguments; E_LIST items; E_DICT k, v, k, v */
    const char **kw;    /* (nargs) keyword of each argument, NULL for positional ones */
    int nargs;
    ct_node *next;      /* the next statement of a body */
};

struct hpt_chat_template {
    ct_arena ar;        /* the tree and its literals */
    ct_node *body;
    ct_val *bos, *eos;  /* NULL: undefined */
};

/* ---- render context -------------------------------------------------------------------------- */
typedef struct ct_scope ct_scope;
struct ct_scope {
    ct_scope *parent;
    const char **names;
    ct_val **vals;
    size_t n, cap;
};

typedef struct {
    char *s;            /* malloc'd (cap) */
    uint8_t *m;         /* malloc'd (cap) provenance */
    size_t n, cap;
} ct_buf;

typedef struct {
    ct_arena ar;
    const hpt_chat_opts *o;
    ct_scope *sc;
    ct_buf out;
    int failed;         /* an error was recorded (hpt_fail); every caller unwinds */
    hpt_status err;
    int line;           /* the node being evaluated */
    int depth;
    int loopctl;        /* 1: break pending, 2: continue pending */
    uint64_t steps;
    ct_val *small_ints; /* (CT_SMALL_INTS), made on first use */
} ct_ctx;

/* Records the first error (with the template's line) and returns NULL, for `return ct_err(...)`. */
ct_val *ct_err(ct_ctx *c, hpt_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* chat_value.c */
ct_val *ct_str(ct_ctx *c, const char *s, size_t n, const uint8_t *m); /* copies */
ct_val *ct_cstr(ct_ctx *c, const char *s);                            /* template text */
ct_val *ct_int(ct_ctx *c, int64_t i);
ct_val *ct_float(ct_ctx *c, double f);
ct_val *ct_bool(int b);
ct_val *ct_list(ct_ctx *c, size_t cap);
ct_val *ct_dict(ct_ctx *c, ct_type t);
int ct_list_push(ct_ctx *c, ct_val *l, ct_val *v);
int ct_dict_set(ct_ctx *c, ct_val *d, ct_val *k, ct_val *v);
ct_val *ct_dict_get(const ct_val *d, const char *k, size_t n);
int ct_truthy(const ct_val *v);
int ct_equal(const ct_val *a, const ct_val *b);
const char *ct_type_name(const ct_val *v);
/* str(v) as Python prints it (None, True, [1, 'a'], ...); strings as they are */
ct_val *ct_to_str(ct_ctx *c, ct_val *v);
ct_val *ct_concat(ct_ctx *c, const ct_val *a, const ct_val *b);
ct_val *ct_from_json(ct_ctx *c, const void *cjson, int depth); /* a cJSON*; strings are data */
ct_val *ct_filter(ct_ctx *c, const char *name, ct_val *v, ct_val **args, const char **kw, int n);
/* 1 if name is a filter (test: a test) of the subset: the parser refuses others at load */
int ct_known(const char *name, int test);
ct_val *ct_test(ct_ctx *c, const char *name, ct_val *v, ct_val **args, int n);
ct_val *ct_method(ct_ctx *c, ct_val *self, const char *name, ct_val **args, const char **kw, int n);
ct_val *ct_getitem(ct_ctx *c, ct_val *obj, ct_val *key);
ct_val *ct_slice(ct_ctx *c, ct_val *obj, ct_val *start, ct_val *stop, ct_val *step);
ct_val *ct_binop(ct_ctx *c, ct_op op, ct_val *a, ct_val *b);
/* appends to the output buffer */
int ct_buf_add(ct_ctx *c, ct_buf *b, const char *s, size_t n, const uint8_t *m, uint8_t fill);

/* chat_eval.c */
ct_val *ct_eval(ct_ctx *c, const ct_node *e);

#endif
