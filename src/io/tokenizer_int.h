/* tokenizer_int.h: what the byte-level BPE tokenizers share (src/io/tokenizer*.c): the
 * tokenizer object, its merge table and piece cache, and the helpers that load and encode.
 * tokenizer.c holds GPT-2's files (encoder.json + vocab.bpe, llm.c's tokenizer.bin) and the
 * encoder (pre-tokenisation with PCRE2, the merge heap); tokenizer_hf.c loads Hugging Face's
 * tokenizer.json and tiktoken's tokenizer.model (Llama 3) into the same object;
 * tokenizer_unicode.c holds the code point tables the patterns are spelled with. Not public. */
#ifndef HPT_TOKENIZER_INT_H
#define HPT_TOKENIZER_INT_H

#include "core/core.h"
#include "io/io_int.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>

#define TOK_MAX_VOCAB (1 << 24)
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
    int n_special;             /* added tokens recognised in text with HPT_TOK_SPECIAL */
    int32_t *special;          /* (n_special) their ids, longest first */
    unsigned char special_first[256]; /* 1: some special token starts with this byte */
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
/* llm.c's tokenizer.bin (decode only); GPT-2's encoder.json and vocab.bpe in dir. */
hpt_status tok_load_llmc(const char *path, hpt_tokenizer **out);
hpt_status tok_load_gpt2_dir(const char *dir, hpt_tokenizer **out);

/* ---- tokenizer_hf.c ---- */
/* path: a Hugging Face tokenizer.json, or tiktoken's tokenizer.model (Meta's Llama 3 file). */
hpt_status tok_load_hf_json(const char *path, hpt_tokenizer **out);
hpt_status tok_load_tiktoken(const char *path, hpt_tokenizer **out);

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
