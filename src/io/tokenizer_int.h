/* tokenizer_int.h: what the byte-level BPE tokenizers share (src/io/tokenizer*.c): the
 * tokenizer object, its merge table and piece cache, and the helpers that load and encode.
 * tokenizer.c holds GPT-2's files (encoder.json + vocab.bpe, llm.c's tokenizer.bin) and the
 * encoder (pre-tokenisation with PCRE2, the merge heap); tokenizer_hf.c loads Hugging Face's
 * tokenizer.json and tiktoken's tokenizer.model (Llama 3, Qwen) into the same object;
 * tokenizer_sp.c loads and encodes SentencePiece-style BPE (Gemma 3, Llama 2); tokenizer_norm.c
 * finds added tokens and does NFC; tokenizer_unicode.c holds the code point tables the patterns
 * are spelled with. Not public. */
#ifndef HPT_TOKENIZER_INT_H
#define HPT_TOKENIZER_INT_H

#include "core/core.h"
#include "io/io_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>

#define TOK_MAX_VOCAB (1 << 24)
#define TOK_SP_GLUE_MAX 16
enum { SP_PREPEND_ALL = 1, SP_META_ALWAYS = 2, SP_META_FIRST = 3 };
#define TOK_MAX_FILE_BYTES (1ull << 30) /* encoder.json, vocab.bpe, tokenizer.bin, .json, .model */

/* Token bytes -> id (open addressing, power-of-two table of at least 2 V slots). */
typedef struct {
    int32_t *slot; /* (mask+1) ids, -1 empty */
    size_t mask;
} tok_index;

/* Piece cache: direct-mapped, CACHE_SLOTS slots of 64 bytes (4 MiB). Pieces of 2 to
 * CACHE_KEY_MAX bytes that give at most CACHE_IDS_MAX tokens are cached. */
#define CACHE_SLOTS (1u << 16)
#define CACHE_KEY_MAX 22
#define CACHE_IDS_MAX 8
typedef struct {
    uint64_t hash;
    uint8_t len;   /* 0: empty slot */
    uint8_t n_ids;
    char key[CACHE_KEY_MAX];
    int32_t ids[CACHE_IDS_MAX];
} cache_slot;

/* Merge table: open addressing on (left id << 32 | right id). */
#define PAIR_EMPTY UINT64_MAX
typedef struct {
    uint64_t key;
    int32_t rank;   /* vocab.bpe / merges line, or tiktoken's rank: lower merges first */
    int32_t merged; /* token id of left + right */
} pair_slot;

struct hpt_tokenizer {
    int V;                     /* vocabulary size */
    int eot;                   /* <|endoftext|> */
    int can_encode;            /* loaded from encoder.json + vocab.bpe */
    uint32_t *tok_off;         /* (V+1) offsets into tok_bytes */
    unsigned char *tok_bytes;  /* every token's bytes, concatenated */
    char source[256];          /* the path it was loaded from, for messages */
    /* encoder only */
    int32_t byte_id[256];      /* token of each single byte */
    pair_slot *pairs;          /* (pair_mask+1) merge table */
    size_t pair_mask;
    pcre2_code *re;
    pcre2_match_data *md;
    cache_slot *cache;         /* (CACHE_SLOTS) */
    /* merge scratch for one piece, grown to the longest piece so far */
    size_t scratch_cap;        /* bytes of piece the arrays below hold */
    int32_t *sym_id;           /* (cap) token of the symbol starting at byte i; -1: merged away */
    int32_t *sym_next, *sym_prev; /* (cap) neighbours in the piece; -1: none */
    uint64_t *heap;            /* (3 cap) rank << 32 | position of a pair's left symbol */
    /* Hugging Face tokenizer.json / tiktoken (tokenizer_hf.c); zero for GPT-2's files */
    int bos;                   /* <|begin_of_text|> (or <s>), -1 if none */
    int ignore_merges;         /* a piece that is a whole token is that token (tiktoken's rule) */
    tok_index ix;              /* token bytes -> id, kept when ignore_merges */
    /* added tokens, matched in the raw text before any normalisation (longest first): those
     * marked special only with HPT_TOK_SPECIAL, the others always (as Hugging Face does) */
    int n_special;             /* added tokens */
    int32_t *special;          /* (n_special) their ids, longest content first */
    uint32_t *special_off;     /* (n_special+1) offsets of their contents in special_text */
    unsigned char *special_text; /* the contents (raw text: for SentencePiece tokens not the
                                  * decoded bytes, e.g. "\u2581\u2581" and not two spaces) */
    unsigned char *special_ctl; /* (n_special) 1: special (HPT_TOK_SPECIAL), 0: always matched */
    unsigned char special_first[256]; /* bit 1: a special starts with this byte; bit 2: an
                                       * always-matched added token does */
    /* a trie over the contents: key (node << 8 | byte) + 1 -> child node, open addressing */
    uint64_t *trie_key;        /* (trie_mask+1) keys, 0 empty */
    uint32_t *trie_child;      /* (trie_mask+1) */
    size_t trie_mask;
    int32_t *trie_end;         /* (2 nodes) index in special of the special / other added token
                                * whose content ends at the node, -1 none */
    /* normalisation and the model beyond byte-level BPE (tokenizer.json; zero otherwise) */
    int nfc;                   /* NFC of each segment before the pattern (Qwen2.5, Qwen3) */
    int sp;                    /* SentencePiece-style BPE (tokenizer_sp.c): chars, "\u2581" for
                                * spaces, byte fallback; tok_bytes and ix are in the decoded
                                * domain ("\u2581" -> " ") */
    int sp_prepend;            /* the "\u2581" before a segment: 0 never; SP_PREPEND_ALL each
                                * (Llama 2's Prepend normalizer); SP_META_ALWAYS each that does not
                                * start with one, SP_META_FIRST the text's first one if it does not
                                * (Metaspace's prepend_scheme always, first) */
    int sp_split;              /* segments are cut into chunks before spaces (tokenizer_sp.c) */
    int sp_split_all;          /* before every space (Metaspace's split: true) */
    int n_sp_glue;             /* characters some token has right before a "\u2581": no cut there */
    uint32_t sp_glue[TOK_SP_GLUE_MAX];
    int unk;                   /* the unknown token, -1 if none */
    int fuse_unk;              /* consecutive unknown tokens are one */
    int32_t byte_fb[256];      /* <0xXX> byte-fallback tokens, -1 if absent (or no fallback) */
    unsigned char *norm;       /* (norm_cap) scratch: a normalised segment */
    size_t norm_cap;
};


typedef struct {
    int32_t *ids;
    size_t n, cap;
} idvec;

/* ---- tokenizer.c ---- */
hpt_tokenizer *tok_new(const char *path);
/* Reads a whole file into a NUL-terminated malloc'd buffer (at most TOK_MAX_FILE_BYTES). */
hpt_status tok_read_all(const char *path, char **data_out, size_t *len_out);
uint64_t tok_hash_bytes(const void *p, size_t n);
/* Token text in GPT-2's byte alphabet (Hugging Face's ByteLevel) -> bytes; out has room for n
 * bytes. -1 if a character is not in the alphabet. */
long tok_alphabet_to_bytes(const char *text, size_t n, unsigned char *out);
/* Builds t->ix over tokens [0, n) (the base vocabulary); dup_out gets the later id of two
 * tokens with the same bytes (-1: none). -1 if out of memory. */
int tok_index_build(hpt_tokenizer *t, int32_t n, int32_t *dup_out);
int32_t tok_index_find(const hpt_tokenizer *t, const tok_index *ix, const void *b, size_t n);
/* Allocates the merge table for n_pairs pairs; -1 if out of memory. */
int tok_pairs_alloc(hpt_tokenizer *t, size_t n_pairs);
int tok_pair_put(hpt_tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t merged);
/* Compiles the pre-tokenisation pattern (PCRE2, UTF, JIT when available); what names it in a
 * message. */
hpt_status tok_compile(hpt_tokenizer *t, const char *pattern, size_t len, const char *what);
/* GPT-2's pattern (with JavaScript's \p{L}, \p{N}, \s tables), compiled into t. */
hpt_status tok_compile_gpt2(hpt_tokenizer *t);
/* byte_id from t->ix, the cache: the last steps of every encoding tokenizer's load. */
hpt_status tok_finish_encoder(hpt_tokenizer *t);
int tok_vec_reserve(idvec *v, size_t extra);
/* Merge scratch for n symbols (sym_id, sym_next, sym_prev, heap); -1 if out of memory. */
int tok_scratch_reserve(hpt_tokenizer *t, size_t n);
/* BPE over the symbols t->sym_id[0..n) (sym_next / sym_prev set, -1 at the ends): the adjacent
 * pair of lowest rank merges first, the leftmost among equal ranks (Hugging Face's order). */
void tok_merge_symbols(hpt_tokenizer *t, size_t n);
/* The added tokens: ids[k] (ownership taken), ctl[k] 1 if special, content[k] its raw text
 * (NULL: the token's bytes); sorted longest first, then by id. */
hpt_status tok_set_added(hpt_tokenizer *t, int32_t *ids, const unsigned char *ctl,
                         const char *const *content, int n);
/* The added token whose content starts u[0, n), longest first, among the specials (want bit
 * 1) and the others (bit 2): its index in t->special, -1 if none. */
int tok_added_at(const hpt_tokenizer *t, const unsigned char *u, size_t n, unsigned want);
/* NFC of u[0, *len) into t->norm (runs of invalid UTF-8 kept as they are); *u, *len then
 * point there. */
hpt_status tok_nfc(hpt_tokenizer *t, const unsigned char **u, size_t *len);
/* One UTF-8 code point of s[0..n): its length, 0 if invalid (overlong, surrogate, > U+10FFFF). */
size_t tok_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);
/* llm.c's tokenizer.bin (decode only); GPT-2's encoder.json and vocab.bpe in dir. */
hpt_status tok_load_llmc(const char *path, hpt_tokenizer **out);
hpt_status tok_load_gpt2_dir(const char *dir, hpt_tokenizer **out);

/* ---- tokenizer_hf.c ---- */
/* path: a Hugging Face tokenizer.json, or tiktoken's tokenizer.model (Meta's Llama 3 file). */
hpt_status tok_load_hf_json(const char *path, hpt_tokenizer **out);
hpt_status tok_load_tiktoken(const char *path, hpt_tokenizer **out);
/* tok_set_added, then eot and bos found by their usual names among the special ones. */
hpt_status tok_set_specials(hpt_tokenizer *t, int32_t *ids, const unsigned char *ctl,
                            const char *const *content, int n);

/* ---- tokenizer_sp.c ---- */
/* 1 if the tokenizer.json root asks for SentencePiece-style BPE (byte_fallback, or a Replace /
 * Prepend normalizer): then tok_load_sp reads it into t (named path in messages). */
int tok_is_sp(const void *root_json);
hpt_status tok_load_sp(hpt_tokenizer *t, const char *path, const void *root_json);
/* Encodes one segment (no added tokens in it) the SentencePiece way, appending to v; where:
 * TOK_SEG_FIRST if it starts the text (TOK_SEG_CONT too if the text continues one cut before
 * it), which decides the "\u2581" before it (t->sp_prepend). */
#define TOK_SEG_FIRST 1u
#define TOK_SEG_CONT 2u
hpt_status tok_sp_encode(hpt_tokenizer *t, const unsigned char *u, size_t len, unsigned where, idvec *v);

/* ---- tokenizer_unicode.c ---- */
/* JavaScript's \p{L}, \p{N} and \s (node's Unicode TOK_UNICODE_VERSION), Unicode's
 * White_Space: inclusive ranges, first and last code point of each, n_* entries. */
#define TOK_UNICODE_VERSION "17.0"
extern const uint32_t tok_letter[], tok_number[], tok_space_js[], tok_white_space[];
extern const size_t n_tok_letter, n_tok_number, n_tok_space_js, n_tok_white_space;

typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} strbuf;
void sb_add(strbuf *b, const char *text);
void sb_addn(strbuf *b, const char *text, size_t n);
/* "\x{a}-\x{b}..." for the ranges (the inside of a character class). */
void sb_ranges(strbuf *b, const uint32_t *r, size_t n);

#endif
