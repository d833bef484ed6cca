/* hptrain/chat.h: chat templates: a model directory's Jinja chat template (tokenizer_config.json's
 * `chat_template`) rendered over a conversation, and its tokens. Part of hptrain.h.
 *
 *   hpt_chat_template *ct;
 *   if (hpt_chat_template_load("models/llama", &ct) != HPT_OK) puts(hpt_last_error());
 *   hpt_chat_opts o = hpt_chat_opts_defaults();
 *   o.add_generation_prompt = 1;
 *   hpt_chat_text r;
 *   hpt_chat_render(ct, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", len, &o, &r);
 *   ... r.text (r.len bytes, NUL-terminated); r.from_data[i] is 1 where byte i came from the
 *   conversation (a message's content or role), 0 where the template wrote it ...
 *   hpt_chat_encode(tok, &r, &ids, &n);   // special tokens only where the template wrote them
 *   hpt_chat_text_free(&r); hpt_chat_template_free(ct);
 *
 * The interpreter is a subset of Jinja as Hugging Face runs it (trim_blocks, lstrip_blocks,
 * loop controls): docs/chat.md lists what is supported. Templates and conversations are
 * untrusted: any error (syntax, a type error, raise_exception, a size or step limit) is a status
 * with the line of the template in the last-error text, never a crash. A template object is
 * read-only after loading (cJSON keeps its last parse error in a global, so concurrent renders
 * are not claimed free of races). */
#ifndef HPTRAIN_CHAT_H
#define HPTRAIN_CHAT_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

typedef struct hpt_chat_template hpt_chat_template;

/* dir/tokenizer_config.json: chat_template (a string, or a list of {name, template}: the one
 * named "default"; else dir/chat_template.jinja), bos_token and eos_token (a string or
 * {"content": ...}; absent or null: undefined in the template). HPT_ERR_FORMAT for a
 * malformed file or template (line named), HPT_ERR_UNSUPPORTED for Jinja beyond the subset. */
hpt_status hpt_chat_template_load(const char *dir, hpt_chat_template **out);
/* The same from a template's source (len bytes); bos, eos may be NULL (undefined). */
hpt_status hpt_chat_template_parse(const char *source, size_t len, const char *bos, const char *eos,
                                   hpt_chat_template **out);
void hpt_chat_template_free(hpt_chat_template *ct);

typedef struct {
    int add_generation_prompt; /* 0 (default): the template's add_generation_prompt */
    const char *date_string;   /* NULL (default): undefined; set, the variable date_string */
    int64_t now_s;             /* strftime_now()'s time, seconds since 1970 UTC (pinned, so a
                                  render is reproducible; default 1721952000: 26 Jul 2024) */
} hpt_chat_opts;
hpt_chat_opts hpt_chat_opts_defaults(void);

typedef struct {
    char *text;         /* (len + 1) bytes, NUL-terminated; malloc'd */
    uint8_t *from_data; /* (len) 1: the byte came from the conversation's strings */
    size_t len;
} hpt_chat_text;
void hpt_chat_text_free(hpt_chat_text *r);

/* Renders one conversation: json (len bytes) is an object with "messages" (a list of objects
 * with "role" and "content", and whatever else the template reads) and optionally other fields,
 * each a variable of the template ("tools", "enable_thinking", ...); or a bare list of messages.
 * On failure *out is zeroed. */
hpt_status hpt_chat_render(const hpt_chat_template *ct, const char *json, size_t len,
                           const hpt_chat_opts *o, hpt_chat_text *out);

/* The ids of a rendered text: tok's special (added) tokens are recognised where every byte of
 * one was written by the template, never in the conversation's text (a user writing
 * "<|eot_id|>" gets the ids of that text); the text between them is encoded as text.
 * *ids_out is malloc'd. */
hpt_status hpt_chat_encode(hpt_tokenizer *tok, const hpt_chat_text *r, int32_t **ids_out,
                           size_t *n_out);

#endif
