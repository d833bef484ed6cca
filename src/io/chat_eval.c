/* chat_eval.c: renders a chat template's tree over a conversation (hpt_chat_render) and encodes
 * the result (hpt_chat_encode). Scopes follow Jinja: a for loop's body has its own scope (so
 * `set` inside a loop does not leak out; namespace() objects carry state across), `if` has none.
 * The output keeps, per byte, whether the conversation wrote it; hpt_chat_encode recognises
 * special tokens only in the template's bytes, so text a user typed never becomes control tokens.
 * Bounded: steps (CT_MAX_STEPS), nesting (CT_MAX_DEPTH), memory (CT_MAX_ARENA_BYTES) and output
 * (CT_MAX_OUTPUT_BYTES); reaching one is an error, never a hang or a crash. */
#include "io/chat_int.h"
#include "io/tokenizer_int.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- scopes ----------------------------------------------------------------------------------- */

static ct_scope *push_scope(ct_ctx *c) {
    ct_scope *s = ct_alloc(&c->ar, sizeof *s);
    if (!s) return ct_err(c, HPT_ERR_OOM, "out of memory"), NULL;
    s->parent = c->sc;
    c->sc = s;
    return s;
}

static ct_val *lookup(ct_ctx *c, const char *name) {
    for (ct_scope *s = c->sc; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (strcmp(s->names[i], name) == 0) return s->vals[i];
    return NULL;
}

static int assign(ct_ctx *c, const char *name, ct_val *v) {
    ct_scope *s = c->sc;
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->names[i], name) == 0) { s->vals[i] = v; return 0; }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        const char **nn = ct_alloc(&c->ar, cap * sizeof *nn);
        ct_val **nv = ct_alloc(&c->ar, cap * sizeof *nv);
        if (!nn || !nv) { ct_err(c, HPT_ERR_OOM, "out of memory"); return -1; }
        if (s->n) { memcpy(nn, s->names, s->n * sizeof *nn); memcpy(nv, s->vals, s->n * sizeof *nv); }
        s->names = nn;
        s->vals = nv;
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
    return 0;
}

/* ---- expressions -------------------------------------------------------------------------------- */

static ct_val *eval_args(ct_ctx *c, const ct_node *e, ct_val ***out) {
    *out = ct_alloc(&c->ar, (size_t)(e->nargs + 1) * sizeof **out);
    if (!*out) return ct_err(c, HPT_ERR_OOM, "out of memory");
    for (int i = 0; i < e->nargs; i++)
        if (!((*out)[i] = ct_eval(c, e->args[i]))) return NULL;
    return &ct_none;
}

static ct_val *call(ct_ctx *c, const ct_node *e) {
    ct_val **args;
    if (!eval_args(c, e, &args)) return NULL;
    const ct_node *f = e->a;
    if (f->kind == E_ATTR) { /* a method: s.strip(), d.items(), ... */
        ct_val *self = ct_eval(c, f->a);
        if (!self) return NULL;
        c->line = e->line;
        return ct_method(c, self, f->name, args, e->kw, e->nargs);
    }
    if (f->kind != E_NAME) return ct_err(c, HPT_ERR_INVALID, "this expression cannot be called");
    if (strcmp(f->name, "raise_exception") == 0) {
        ct_val *m = e->nargs > 0 ? ct_to_str(c, args[0]) : ct_cstr(c, "raise_exception()");
        if (!m) return NULL;
        return ct_err(c, HPT_ERR_INVALID, "the template refuses this conversation: %.*s", (int)(m->n < 400 ? m->n : 400), m->s);
    }
    if (strcmp(f->name, "namespace") == 0) {
        ct_val *ns = ct_dict(c, V_NS);
        for (int i = 0; ns && i < e->nargs; i++) {
            if (!e->kw[i]) return ct_err(c, HPT_ERR_UNSUPPORTED, "namespace() takes keyword arguments only");
            ct_val *k = ct_cstr(c, e->kw[i]);
            if (!k || ct_dict_set(c, ns, k, args[i]) != 0) return NULL;
        }
        return ns;
    }
    if (strcmp(f->name, "range") == 0) {
        int64_t a = 0, b = 0, st = 1;
        for (int i = 0; i < e->nargs; i++)
            if (args[i]->t != V_INT) return ct_err(c, HPT_ERR_INVALID, "range() takes integers");
        if (e->nargs == 1) b = args[0]->i;
        else if (e->nargs >= 2) { a = args[0]->i; b = args[1]->i; if (e->nargs > 2) st = args[2]->i; }
        if (st == 0 || e->nargs == 0 || e->nargs > 3) return ct_err(c, HPT_ERR_INVALID, "bad range()");
        if ((b - a) / st > CT_MAX_RANGE)
            return ct_err(c, HPT_ERR_INVALID, "range() of more than %d items (Jinja's sandbox limit)", CT_MAX_RANGE);
        ct_val *l = ct_list(c, 0);
        for (int64_t i = a; l && (st > 0 ? i < b : i > b); i += st) {
            if (++c->steps > CT_MAX_STEPS) return ct_err(c, HPT_ERR_INVALID, "range() too long");
            ct_val *x = ct_int(c, i);
            if (!x || ct_list_push(c, l, x) != 0) return NULL;
        }
        return l;
    }
    if (strcmp(f->name, "strftime_now") == 0) { /* the pinned time of the options */
        if (e->nargs != 1 || args[0]->t != V_STR) return ct_err(c, HPT_ERR_INVALID, "strftime_now(format)");
        char fmt[128], out[256];
        snprintf(fmt, sizeof fmt, "%.*s", (int)(args[0]->n < 127 ? args[0]->n : 127), args[0]->s);
        time_t t = (time_t)c->o->now_s;
        struct tm tm;
        if (!gmtime_r(&t, &tm)) return ct_err(c, HPT_ERR_INVALID, "strftime_now: bad time");
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t n = strftime(out, sizeof out, fmt, &tm); /* the template's own format */
#pragma GCC diagnostic pop
        return ct_str(c, out, n, NULL);
    }
    return ct_err(c, HPT_ERR_UNSUPPORTED, "the function '%s' is not in hptrain's Jinja subset", f->name);
}

static ct_val *eval_inner(ct_ctx *c, const ct_node *e) {
    ct_val *a, *b;
    switch (e->kind) {
    case E_LIT: return e->lit;
    case E_NAME: {
        ct_val *v = lookup(c, e->name);
        return v ? v : &ct_undef;
    }
    case E_ATTR:
        if (!(a = ct_eval(c, e->a))) return NULL;
        if (a->t == V_UNDEF) return ct_err(c, HPT_ERR_INVALID, "'%s' of an undefined value", e->name);
        if (a->t == V_DICT || a->t == V_NS) {
            ct_val *v = ct_dict_get(a, e->name, strlen(e->name));
            return v ? v : &ct_undef;
        }
        return &ct_undef;
    case E_ITEM:
        if (!(a = ct_eval(c, e->a)) || !(b = ct_eval(c, e->b))) return NULL;
        c->line = e->line;
        return ct_getitem(c, a, b);
    case E_SLICE: {
        ct_val *x = NULL, *y = NULL, *z = NULL;
        if (!(a = ct_eval(c, e->a))) return NULL;
        if ((e->b && !(x = ct_eval(c, e->b))) || (e->c && !(y = ct_eval(c, e->c))) || (e->d && !(z = ct_eval(c, e->d))))
            return NULL;
        c->line = e->line;
        return ct_slice(c, a, x, y, z);
    }
    case E_CALL: return call(c, e);
    case E_FILTER: case E_TEST: {
        ct_val **args;
        if (!(a = ct_eval(c, e->a)) || !eval_args(c, e, &args)) return NULL;
        c->line = e->line;
        if (e->kind == E_FILTER) return ct_filter(c, e->name, a, args, e->kw, e->nargs);
        ct_val *r = ct_test(c, e->name, a, args, e->nargs);
        return r && e->negate ? ct_bool(!ct_truthy(r)) : r;
    }
    case E_NEG:
        if (!(a = ct_eval(c, e->a))) return NULL;
        if (a->t == V_INT && a->i != INT64_MIN) return ct_int(c, -a->i);
        if (a->t == V_FLOAT) return ct_float(c, -a->f);
        return ct_err(c, HPT_ERR_INVALID, "bad operand type for unary -: '%s'", ct_type_name(a));
    case E_NOT:
        if (!(a = ct_eval(c, e->a))) return NULL;
        return ct_bool(!ct_truthy(a));
    case E_AND: case E_OR: /* Python's: the deciding operand's value */
        if (!(a = ct_eval(c, e->a))) return NULL;
        if (ct_truthy(a) == (e->kind == E_OR)) return a;
        return ct_eval(c, e->b);
    case E_BIN:
        if (!(a = ct_eval(c, e->a)) || !(b = ct_eval(c, e->b))) return NULL;
        c->line = e->line;
        return ct_binop(c, e->op, a, b);
    case E_COND:
        if (!(b = ct_eval(c, e->b))) return NULL;
        if (ct_truthy(b)) return ct_eval(c, e->a);
        return e->c ? ct_eval(c, e->c) : &ct_undef;
    case E_LIST: {
        ct_val *l = ct_list(c, (size_t)e->nargs);
        for (int i = 0; l && i < e->nargs; i++) {
            if (!(a = ct_eval(c, e->args[i])) || ct_list_push(c, l, a) != 0) return NULL;
        }
        return l;
    }
    case E_DICT: {
        ct_val *d = ct_dict(c, V_DICT);
        for (int i = 0; d && i + 1 < e->nargs; i += 2) {
            if (!(a = ct_eval(c, e->args[i])) || !(b = ct_eval(c, e->args[i + 1])) || ct_dict_set(c, d, a, b) != 0)
                return NULL;
        }
        return d;
    }
    default: return ct_err(c, HPT_ERR_INVALID, "not an expression");
    }
}

ct_val *ct_eval(ct_ctx *c, const ct_node *e) {
    if (c->failed) return NULL;
    if (++c->depth > CT_MAX_DEPTH) return ct_err(c, HPT_ERR_INVALID, "expressions nested too deeply");
    int line = c->line;
    c->line = e->line;
    ct_val *v = eval_inner(c, e);
    c->line = line;
    c->depth--;
    return v;
}

/* ---- statements ----------------------------------------------------------------------------------- */

static int exec_body(ct_ctx *c, const ct_node *n);

static int exec_for(ct_ctx *c, const ct_node *n) {
    ct_val *it = ct_eval(c, n->a);
    if (!it) return -1;
    ct_val *seq = it;
    if (it->t == V_DICT) { /* the keys */
        if (!(seq = ct_list(c, it->n))) return -1;
        for (size_t i = 0; i < it->n; i++) if (ct_list_push(c, seq, it->keys[i]) != 0) return -1;
    } else if (it->t == V_STR) {
        if (!(seq = ct_filter(c, "list", it, NULL, NULL, 0))) return -1;
    } else if (it->t == V_UNDEF || it->t == V_NONE) {
        seq = NULL; /* Jinja iterates an undefined value as empty; None is an error there */
        if (it->t == V_NONE) { ct_err(c, HPT_ERR_INVALID, "cannot iterate over none"); return -1; }
    } else if (it->t != V_LIST) {
        ct_err(c, HPT_ERR_INVALID, "cannot iterate over a %s", ct_type_name(it));
        return -1;
    }
    ct_scope *outer = c->sc;
    if (!push_scope(c)) return -1;
    /* the loop filter picks the items first, so loop.index and loop.last count only those */
    ct_val *items = seq;
    if (seq && n->d) {
        if (!(items = ct_list(c, seq->n))) return -1;
        for (size_t i = 0; i < seq->n; i++) {
            if (assign(c, n->name, seq->items[i]) != 0) return -1;
            ct_val *ok = ct_eval(c, n->d);
            if (!ok) return -1;
            if (ct_truthy(ok) && ct_list_push(c, items, seq->items[i]) != 0) return -1;
        }
    }
    size_t len = items ? items->n : 0;
    static const char *const keys[] = {"index", "index0", "revindex", "revindex0", "first", "last",
                                       "length", "previtem", "nextitem"};
    ct_val *kv[9];
    for (int k = 0; k < 9; k++) if (!(kv[k] = ct_cstr(c, keys[k]))) return -1;
    ct_val *loop = ct_dict(c, V_DICT); /* one object, updated each iteration (as Jinja's) */
    if (!loop) return -1;
    for (size_t i = 0; i < len; i++) {
        if (++c->steps > CT_MAX_STEPS) { ct_err(c, HPT_ERR_INVALID, "the template runs too long"); return -1; }
        ct_val *x = items->items[i];
        if (n->name2) {
            if (x->t != V_LIST || x->n != 2) { ct_err(c, HPT_ERR_INVALID, "cannot unpack into two names"); return -1; }
            if (assign(c, n->name, x->items[0]) != 0 || assign(c, n->name2, x->items[1]) != 0) return -1;
        } else if (assign(c, n->name, x) != 0) {
            return -1;
        }
        ct_val *vals[9] = {ct_int(c, (int64_t)i + 1), ct_int(c, (int64_t)i), ct_int(c, (int64_t)(len - i)),
                           ct_int(c, (int64_t)(len - i - 1)), ct_bool(i == 0), ct_bool(i + 1 == len),
                           ct_int(c, (int64_t)len), i > 0 ? items->items[i - 1] : &ct_undef,
                           i + 1 < len ? items->items[i + 1] : &ct_undef};
        for (int k = 0; k < 9; k++)
            if (!vals[k] || ct_dict_set(c, loop, kv[k], vals[k]) != 0) return -1;
        if (assign(c, "loop", loop) != 0) return -1;
        if (exec_body(c, n->b) != 0) return -1;
        if (c->loopctl == 1) { c->loopctl = 0; break; }
        c->loopctl = 0;
    }
    c->sc = outer;
    if (len == 0 && n->c) return exec_body(c, n->c);
    return 0;
}

static int exec_body(ct_ctx *c, const ct_node *n) {
    if (++c->depth > CT_MAX_DEPTH) { ct_err(c, HPT_ERR_INVALID, "statements nested too deeply"); return -1; }
    for (; n && !c->loopctl; n = n->next) {
        if (++c->steps > CT_MAX_STEPS) { ct_err(c, HPT_ERR_INVALID, "the template runs too long"); return -1; }
        c->line = n->line;
        ct_val *v;
        switch (n->kind) {
        case N_TEXT:
            if (ct_buf_add(c, &c->out, n->lit->s, n->lit->n, NULL, 0) != 0) return -1;
            break;
        case N_OUT:
            if (!(v = ct_eval(c, n->a)) || !(v = ct_to_str(c, v))) return -1;
            if (ct_buf_add(c, &c->out, v->s, v->n, v->m, 0) != 0) return -1;
            break;
        case N_IF:
            if (!(v = ct_eval(c, n->a))) return -1;
            if (exec_body(c, ct_truthy(v) ? n->b : n->c) != 0) return -1;
            break;
        case N_FOR:
            if (exec_for(c, n) != 0) return -1;
            break;
        case N_SET:
            if (!(v = ct_eval(c, n->a))) return -1;
            if (n->name2) {
                ct_val *ns = lookup(c, n->name);
                if (!ns || ns->t != V_NS) {
                    ct_err(c, HPT_ERR_INVALID, "set %s.%s: %s is not a namespace", n->name, n->name2, n->name);
                    return -1;
                }
                ct_val *k = ct_cstr(c, n->name2);
                if (!k || ct_dict_set(c, ns, k, v) != 0) return -1;
            } else if (assign(c, n->name, v) != 0) {
                return -1;
            }
            break;
        case N_SETBLOCK: { /* the body rendered into a string */
            ct_buf saved = c->out;
            memset(&c->out, 0, sizeof c->out);
            int rc = exec_body(c, n->a);
            ct_buf mine = c->out;
            c->out = saved;
            v = rc == 0 ? ct_str(c, mine.s ? mine.s : "", mine.n, mine.m) : NULL;
            free(mine.s);
            free(mine.m);
            if (!v || assign(c, n->name, v) != 0) return -1;
            break;
        }
        case N_BREAK: c->loopctl = 1; break;
        case N_CONTINUE: c->loopctl = 2; break;
        default: ct_err(c, HPT_ERR_INVALID, "not a statement"); return -1;
        }
    }
    c->depth--;
    return c->failed ? -1 : 0;
}

/* ---- the API -------------------------------------------------------------------------------------- */

hpt_chat_opts hpt_chat_opts_defaults(void) {
    hpt_chat_opts o = {0};
    o.now_s = 1721952000; /* 2024-07-26 00:00 UTC */
    return o;
}

void hpt_chat_text_free(hpt_chat_text *r) {
    if (!r) return;
    free(r->text);
    free(r->from_data);
    memset(r, 0, sizeof *r);
}

hpt_status hpt_chat_render(const hpt_chat_template *ct, const char *json, size_t len,
                           const hpt_chat_opts *o, hpt_chat_text *out) {
    memset(out, 0, sizeof *out);
    hpt_chat_opts dflt = hpt_chat_opts_defaults();
    if (!o) o = &dflt;
    if (!json && len) return hpt_fail(HPT_ERR_INVALID, "chat render: NULL conversation of %zu bytes", len);
    cJSON *j = cJSON_ParseWithLength(json ? json : "", len);
    if (!j) return hpt_fail(HPT_ERR_FORMAT, "the conversation is not JSON (near byte %zu)",
                            cJSON_GetErrorPtr() && json ? (size_t)(cJSON_GetErrorPtr() - json) : (size_t)0);
    const cJSON *msgs = cJSON_IsArray(j) ? j : cJSON_GetObjectItemCaseSensitive(j, "messages");
    if (!cJSON_IsArray(msgs)) {
        cJSON_Delete(j);
        return hpt_fail(HPT_ERR_FORMAT, "the conversation has no \"messages\" list");
    }
    const cJSON *m;
    int k = 0;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            cJSON_Delete(j);
            return hpt_fail(HPT_ERR_FORMAT, "message %d is not an object with a string \"role\"", k);
        }
        k++;
    }
    ct_ctx c = {.o = o};
    c.ar.limit_bytes = CT_MAX_ARENA_BYTES;
    hpt_status s = HPT_OK;
    if (push_scope(&c)) {
        if (cJSON_IsObject(j)) { /* every field of the object is a variable */
            const cJSON *f;
            cJSON_ArrayForEach(f, j) {
                ct_val *v = ct_from_json(&c, f, 0);
                if (!v || assign(&c, f->string, v) != 0) break;
            }
        } else {
            ct_val *v = ct_from_json(&c, j, 0);
            if (v) assign(&c, "messages", v);
        }
        if (!c.failed && ct->bos) assign(&c, "bos_token", ct->bos);
        if (!c.failed && ct->eos) assign(&c, "eos_token", ct->eos);
        if (!c.failed) assign(&c, "add_generation_prompt", ct_bool(o->add_generation_prompt));
        if (!c.failed && o->date_string) {
            ct_val *d = ct_cstr(&c, o->date_string);
            if (d) assign(&c, "date_string", d);
        }
        if (!c.failed && ct_buf_add(&c, &c.out, "", 0, NULL, 0) == 0) exec_body(&c, ct->body);
    }
    if (c.failed) {
        s = c.err;
        free(c.out.s);
        free(c.out.m);
    } else {
        out->text = c.out.s;
        out->from_data = c.out.m;
        out->len = c.out.n;
    }
    ct_arena_free(&c.ar);
    cJSON_Delete(j);
    return s;
}

hpt_status hpt_chat_encode(hpt_tokenizer *t, const hpt_chat_text *r, int32_t **ids_out, size_t *n_out) {
    *ids_out = NULL;
    *n_out = 0;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0, start = 0;
    const unsigned char *u = (const unsigned char *)r->text;
    hpt_status s = HPT_OK;
    /* a special token where all its bytes are the template's, longest first; text between them
     * encoded as text (as Hugging Face splits added tokens before pre-tokenising) */
    for (size_t i = 0; i <= r->len; i++) {
        int32_t id = -1;
        size_t l = 0;
        if (i < r->len && !r->from_data[i] && t->special_first[u[i]]) {
            for (int k = 0; k < t->n_special && id < 0; k++) { /* contents, longest first */
                l = t->special_off[k + 1] - t->special_off[k];
                if (l && l <= r->len - i && memcmp(u + i, t->special_text + t->special_off[k], l) == 0 &&
                    !memchr(r->from_data + i, 1, l))
                    id = t->special[k];
            }
        }
        if (id < 0 && i < r->len) continue;
        int32_t *seg = NULL;
        size_t m = 0;
        if (i > start && (s = hpt_tokenizer_encode(t, r->text + start, i - start, &seg, &m)) != HPT_OK) break;
        if (n + m + 1 > cap) {
            size_t nc = (n + m + 1) * 2;
            int32_t *ni = realloc(ids, nc * sizeof *ni);
            if (!ni) { free(seg); s = hpt_fail(HPT_ERR_OOM, "out of memory encoding a chat"); break; }
            ids = ni;
            cap = nc;
        }
        if (m) memcpy(ids + n, seg, m * sizeof *ids);
        n += m;
        free(seg);
        if (id >= 0) {
            ids[n++] = id;
            i += l - 1;
            start = i + 1;
        }
    }
    if (s != HPT_OK) { free(ids); return s; }
    if (!ids && !(ids = malloc(sizeof *ids))) return hpt_fail(HPT_ERR_OOM, "out of memory encoding a chat");
    *ids_out = ids;
    *n_out = n;
    return HPT_OK;
}
