/* hptrain/io.h: files: llm.c token shards and the data loader, tokenizers, the training-state
 * checkpoint, the PyTorch reference state, a checkpoint's shape. Part of hptrain.h.
 *
 * llm.c's formats are read and written as llm.c writes them (DESIGN.md, "File formats"); every
 * file hptrain writes is written to a temporary name, synced and renamed, so a crash never
 * damages the last good one. Readers check magic, version and size and fail with
 * HPT_ERR_FORMAT (HPT_ERR_CHECKSUM for the training state) rather than read past the end. */
#ifndef HPTRAIN_IO_H
#define HPTRAIN_IO_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

/* ---- io: llm.c data shards and the data loader -------------------------------------- */

/* Writes an llm.c token shard (magic 20240520, version 1, uint16 tokens), atomically. */
hpt_status hpt_shard_write(const char *path, const uint16_t *tokens, size_t n);
/* The same for vocabularies above 65,536 tokens: magic 20240801, version 7, uint32 tokens. */
hpt_status hpt_shard_write_u32(const char *path, const uint32_t *tokens, size_t n);

/* A masked shard (chat data; docs/formats.md): tokens (n), target (n: 1 where the token is a
 * target of the loss, 0 where it is context only) and the examples' first tokens starts
 * (n_examples, 0 first, increasing). width 2: magic 20240520 version 2 (tokens below 65,536);
 * 4: magic 20240801 version 8. Atomic; HPT_ERR_INVALID for inconsistent arguments. */
hpt_status hpt_shard_write_masked(const char *path, const uint32_t *tokens, const uint8_t *target,
                                  size_t n, const uint32_t *starts, size_t n_examples, int width);
/* Reads any shard whole, checked: tokens (n), target flags (n; an unmasked shard's all 1) and
 * starts (n_examples; 0 of them for an unmasked shard), each malloc'd (the caller frees). */
hpt_status hpt_shard_read(const char *path, uint32_t **tokens, uint8_t **target, size_t *n,
                          uint32_t **starts, size_t *n_examples);

typedef struct hpt_dataloader hpt_dataloader;
/* Opens the shards matching a glob pattern (sorted by name), uint16 or uint32 ones (both may
 * mix); each token must be below vocab. Batches are consecutive
 * windows of B*T+1 tokens, walking the shards in order and wrapping at the end. */
hpt_status hpt_dataloader_open(hpt_mem *mem, const char *pattern, int B, int T, int vocab,
                               hpt_dataloader **out);
void hpt_dataloader_free(hpt_dataloader *d);
/* inputs, targets: (B, T) int32, owned by the loader until the next call. A masked shard's
 * target that is not a target of the loss reads -1 (the model's loss ignores any target < 0,
 * as PyTorch's cross_entropy(ignore_index=)); an unmasked shard's are all tokens. */
hpt_status hpt_dataloader_next(hpt_dataloader *d, const int32_t **inputs,
                               const int32_t **targets);
size_t hpt_dataloader_num_tokens(const hpt_dataloader *d);
/* Passes over the next n windows without reading them: the position next would reach after n
 * calls (each of N processes takes its own windows of a step's global batch: docs/zero.md). */
void hpt_dataloader_skip(hpt_dataloader *d, int64_t n);
/* Batches in one pass over the data from the start (each shard's windows before the walk wraps). */
size_t hpt_dataloader_num_batches(const hpt_dataloader *d);
/* Position for exact resume: (shard index, token offset within the shard); after
 * hpt_dataloader_order (-1 - epoch, row index in the epoch's order). */
void hpt_dataloader_get_pos(const hpt_dataloader *d, int64_t *shard, int64_t *offset);
hpt_status hpt_dataloader_set_pos(hpt_dataloader *d, int64_t shard, int64_t offset);
/* Back to the first window of the first shard (evaluation reads the same batches each time). */
hpt_status hpt_dataloader_rewind(hpt_dataloader *d);
/* Examples (docs/packing.md): STREAM (default) walks windows as above; ON fills each row with
 * whole examples in order while the next fits (one longer than T alone, truncated), OFF puts one
 * example per row (truncated to T); the rest of a row is padding (input 0, not a target), an
 * example's last token has no target. Both need masked shards (their example starts); ON keeps
 * a (B, T) int32 position buffer (device tier, io: the estimator counts it). Rewinds. */
typedef enum { HPT_PACK_STREAM = 0, HPT_PACK_ON, HPT_PACK_OFF } hpt_pack_mode;
hpt_status hpt_dataloader_set_pack(hpt_dataloader *d, int mode);
/* After next: with ON, (B, T) each token's position in its example (hpt_model_set_positions);
 * NULL otherwise */
const int32_t *hpt_dataloader_positions(const hpt_dataloader *d);
/* After next: the batch's tokens that are not padding (B*T unless packed or padded) */
int64_t hpt_dataloader_real_tokens(const hpt_dataloader *d);
/* Rows by index (docs/data.md): val_fraction > 0 keeps one set of the documents (val 1: the
 * validation documents, a seeded choice of about val_fraction of the tokens; 0: the others);
 * documents start at each example's start (masked shards) or at each occurrence of the first
 * shard's first token (raw shards: llm.c's end-of-text before each document); a single
 * document is refused. Stream: a row is T+1 tokens of the set's tokens end to end, at stride T;
 * packed (after set_pack on|off): the rows of set_pack's walk over the set's examples (a row
 * ends before the other set's example). shuffle: each epoch
 * reads the rows in a permutation chosen by (seed, epoch), else in order; a batch is B rows,
 * an epoch the first rows / B * B of its order. get_pos then gives (-1 - epoch, row index).
 * info (may be NULL): the set's documents and tokens of all (documents: 0 without a split).
 * Rewinds. */
typedef struct {
    size_t docs, docs_total;
    uint64_t tokens, tokens_total;
} hpt_data_split;
hpt_status hpt_dataloader_order(hpt_dataloader *d, double val_fraction, int val, int shuffle,
                                uint64_t seed, hpt_data_split *info);

/* ---- io: tokenizers (GPT-2 BPE, Hugging Face BPE: Llama 3, Qwen, Gemma 3, Llama 2) ------- */

typedef struct hpt_tokenizer hpt_tokenizer;
/* path, one of:
 *   a directory holding GPT-2's encoder.json and vocab.bpe (encode and decode);
 *   llm.c's tokenizer file (magic 20240328; decode only);
 *   a Hugging Face tokenizer.json of a byte-level BPE model (Llama 3, GPT-2, Qwen2.5/3 with
 *     their NFC normalizer, ...): model.vocab, model.merges, added_tokens and the pre_tokenizer's
 *     Split pattern (read from the file); or of a SentencePiece-style BPE (Gemma 3, Llama 2:
 *     "\u2581" for spaces, byte_fallback, Prepend); other model types, normalizers and
 *     pre-tokenizers are refused (HPT_ERR_UNSUPPORTED; docs/tokenizer.md);
 *   tiktoken's tokenizer.model (Meta's Llama 3 file: "base64-token rank" per line), with
 *     Llama 3's split pattern and Llama 3.1's 256 special tokens from id 128000;
 *   a model directory holding tokenizer.json (else tokenizer.model). */
hpt_status hpt_tokenizer_load(const char *path, hpt_tokenizer **out);
void hpt_tokenizer_free(hpt_tokenizer *t);
int hpt_tokenizer_vocab_size(const hpt_tokenizer *t); /* 1 + the largest id (128256 for Llama 3) */
/* <|endoftext|> (50256 for GPT-2; Qwen), <|end_of_text|> (Llama 3), <eos> (Gemma), </s>; -1 if none */
int hpt_tokenizer_eot(const hpt_tokenizer *t);
/* <|begin_of_text|>, <bos> (Gemma) or <s> (Llama 2); -1 if none (GPT-2, Qwen) */
int hpt_tokenizer_bos(const hpt_tokenizer *t);
int hpt_tokenizer_can_encode(const hpt_tokenizer *t);
/* Encodes len bytes of UTF-8 text (invalid UTF-8 is encoded byte-wise, losslessly). Special
 * tokens spelled in the text ("<|eot_id|>") are ordinary text, and no BOS is added; added tokens
 * that tokenizer.json does not mark special (Qwen's <think>, Gemma's "\n") are found, as Hugging
 * Face finds them. A normalizer may change the text: decode gives NFC (Qwen), or a space for
 * each U+2581 and one before the text (Llama 2).
 * *ids_out is malloc'd (caller frees); *n_out its length. */
hpt_status hpt_tokenizer_encode(hpt_tokenizer *t, const char *text, size_t len,
                                int32_t **ids_out, size_t *n_out);
/* HPT_TOK_SPECIAL: special tokens (the added tokens of tokenizer.json, tiktoken's specials,
 * GPT-2's <|endoftext|>) spelled in the text are their ids, the longest at a position first,
 * and the text between them is encoded on its own: Hugging Face's encode(text,
 * add_special_tokens=False). */
#define HPT_TOK_SPECIAL 1u
/* HPT_TOK_CONTINUE: the text continues one cut before it (hptrain tokenize encodes long
 * documents in parts): no "\u2581" is prepended to it (Llama 2's Prepend normalizer), so the
 * parts' ids are the whole text's where the cut is safe (docs/tokenizer.md). */
#define HPT_TOK_CONTINUE 2u
/* HPT_TOK_AFTER_SPECIAL: the text follows a special token it was cut after (a chat example's
 * segments, encoded apart): encoded as the text after a special token within one text is (Llama
 * 2's Prepend normalizer: "\u2581" again; Metaspace's prepend_scheme "first": none). */
#define HPT_TOK_AFTER_SPECIAL 4u
hpt_status hpt_tokenizer_encode_ex(hpt_tokenizer *t, const char *text, size_t len,
                                   unsigned flags, int32_t **ids_out, size_t *n_out);
/* The bytes of one token (not NUL-terminated); HPT_ERR_INVALID for an id out of range. */
hpt_status hpt_tokenizer_decode(const hpt_tokenizer *t, int32_t id, const char **bytes_out,
                                size_t *len_out);
/* Writes llm.c's tokenizer file (version 2), atomically. */
hpt_status hpt_tokenizer_write_llmc(const hpt_tokenizer *t, const char *path);


/* ---- io: the training-state checkpoint ------------------------------------------------ */

/* Data and RNG position of a run, saved with weights and optimizer state. */
typedef struct {
    int64_t step;         /* optimizer steps completed */
    int64_t data_shard;   /* dataloader position */
    int64_t data_offset;
    uint64_t rng_state;   /* the trainer's RNG (sampling, future dropout) */
    int64_t total_steps;  /* the run's planned steps (schedule) */
    int32_t B, T;
    int32_t accum;        /* micro-batches per optimizer step (0 is read as 1) */
} hpt_train_pos;

/* Writes model weights, the optimizer's settings and state (moments, 8-bit codes and their
 * scales) and position to path (a file), atomically: a temporary file in the same directory,
 * fsync, rename, fsync of the directory. A CRC-32C checksum over the whole payload is
 * verified on load. Version 2; version-1 files (AdamW, fp32 moments) load as AdamW fp32. */
hpt_status hpt_state_save(const char *path, const hpt_model *model, const hpt_optim *opt,
                          const hpt_adamw_opts *ao, const hpt_train_pos *pos);
/* Creates model and optimizer from a state file (both owned by the caller); *ao_out gets the
 * optimizer settings saved with it. */
hpt_status hpt_state_load(const char *path, hpt_mem *mem, hpt_model **model_out,
                          hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                          hpt_train_pos *pos_out);
/* hpt_state_load into a model made with the offload engine (off NULL or inactive: none); the
 * same files either way. */
hpt_status hpt_state_load_offload(const char *path, hpt_mem *mem, const hpt_offload_opts *off,
                                  hpt_model **model_out, hpt_optim **opt_out,
                                  hpt_adamw_opts *ao_out, hpt_train_pos *pos_out);
/* Named extra sections of a training state (version 3): the hybrid schedule's controller,
 * predictor and rollback snapshot. Saving borrows data; loading allocates each section's data
 * on the host tier (category io), released with hpt_state_sections_free. Files of versions 1
 * and 2 load with no sections. At most HPT_STATE_MAX_SECTIONS, names up to 15 characters.
 * The state adds one of its own for a model with bf16-kahan weights, "bf16_comp" (their
 * compensation; a caller's section may not take that name, and at most
 * HPT_STATE_MAX_SECTIONS - 1 go beside it), which a load restores and does not hand back. */
#define HPT_STATE_MAX_SECTIONS 16
typedef struct {
    char name[16];
    void *data;
    uint64_t bytes;
} hpt_state_section;
hpt_status hpt_state_save_sections(const char *path, const hpt_model *model, const hpt_optim *opt,
                                   const hpt_adamw_opts *ao, const hpt_train_pos *pos,
                                   const hpt_state_section *sec, int n_sec);
hpt_status hpt_state_load_sections(const char *path, hpt_mem *mem, hpt_model **model_out,
                                   hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                                   hpt_train_pos *pos_out,
                                   hpt_state_section sec_out[HPT_STATE_MAX_SECTIONS],
                                   int *n_sec_out);
/* hpt_state_load_sections into a model made with the offload engine (off NULL or inactive:
 * none). */
hpt_status hpt_state_load_offload_sections(const char *path, hpt_mem *mem,
                                           const hpt_offload_opts *off, hpt_model **model_out,
                                           hpt_optim **opt_out, hpt_adamw_opts *ao_out,
                                           hpt_train_pos *pos_out,
                                           hpt_state_section sec_out[HPT_STATE_MAX_SECTIONS],
                                           int *n_sec_out);
void hpt_state_sections_free(hpt_mem *mem, hpt_state_section *sec, int n_sec);

/* ---- io: llm.c reference state (verification) ------------------------------------------ */

typedef struct {
    int B, T, V, Vp;   /* V, Vp from the model the state belongs to */
    int32_t *x, *y;    /* (B, T) */
    float *logits;     /* (B, T, V), unpadded */
    float loss;
    float *grads;      /* (num_params) in checkpoint order with padding */
} hpt_ref_state;
/* Reads a reference state (magic 20240327, version 2) for the given model config; buffers
 * come from mem (IO category). */
hpt_status hpt_ref_state_load(const char *path, hpt_mem *mem, const hpt_model_config *cfg,
                              hpt_ref_state *out);
void hpt_ref_state_free(hpt_mem *mem, const hpt_model_config *cfg, hpt_ref_state *s);


/* ---- io: a GPT-2 checkpoint's shape --------------------------------------------------- */

/* The shape in an llm.c GPT-2 checkpoint's header, checked as hpt_model_load checks it (magic,
 * version, shape, file size); the payload is not read (src/io/llmc.c). */
hpt_status hpt_model_read_config(const char *path, hpt_model_config *out);

/* ---- io: Hugging Face model directories (docs/formats.md) ------------------------------- */

/* A model from a Hugging Face directory: config.json (GPT2LMHeadModel; LlamaForCausalLM,
 * MistralForCausalLM) and model.safetensors or the shards of model.safetensors.index.json.
 * F32, BF16 and F16 tensors are converted to fp32 as they stream into the model's storage (with
 * off active, straight into the engine's host or disk homes, slice by slice): no copy of the
 * checkpoint is ever whole in memory. Names, shapes and dtypes are checked before anything is
 * read; errors name the file and the tensor. The llm.c loaders (hpt_model_load,
 * hpt_model_load_offload, hpt_model_read_config, hpt_infer_load) take a directory too. */
hpt_status hpt_model_load_hf(hpt_mem *mem, const char *dir, const hpt_offload_opts *off,
                             hpt_model **out);
/* Writes config.json and safetensors (dtype HPT_DTYPE_F32 or HPT_DTYPE_BF16, rounded to nearest
 * even) with Hugging Face's names and shapes (GPT-2's Conv1D weights transposed, as stored
 * there), split into shards above shard_bytes (0: 5 GB) with model.safetensors.index.json.
 * Atomic: written into DIR.tmp.<pid>, synced, renamed over dir; files of an existing dir that
 * are not weights (tokenizer.json, ...) are kept. */
#define HPT_HF_SHARD_DEFAULT (5ull * 1000 * 1000 * 1000)
hpt_status hpt_model_save_hf(const hpt_model *m, const char *dir, int dtype, uint64_t shard_bytes);
/* LoRA adapters in PEFT's files (src/io/peft.c, docs/lora.md): adapter_config.json and
 * adapter_model.safetensors in dir (an existing directory), written atomically; base_model (may
 * be NULL) is recorded as base_model_name_or_path. hpt_lora_load attaches the adapters dir
 * describes to m (a base without adapters) with the file's values: HPT_ERR_FORMAT or
 * HPT_ERR_SHAPE naming a missing or misshapen tensor, HPT_ERR_INVALID an unknown target. */
hpt_status hpt_lora_save(hpt_model *m, const char *dir, const char *base_model);
hpt_status hpt_lora_load(hpt_model *m, const char *dir);
/* Its two halves: the options of dir's adapter_config.json, and the values of
 * adapter_model.safetensors into the adapters already attached to m (the same layers and r). */
hpt_status hpt_lora_read_config(const char *dir, hpt_lora_opts *o);
hpt_status hpt_lora_read_values(hpt_model *m, const char *dir);
/* hpt_model_save_hf of a model that came from the Hugging Face directory src (NULL: none):
 * src's config.json gives what the model does not carry (bos/eos token ids, the architecture's
 * name), and its other files (tokenizer.json, generation_config.json, ...) are copied. */
hpt_status hpt_model_save_hf_from(const hpt_model *m, const char *dir, int dtype,
                                  uint64_t shard_bytes, const char *src);
/* The dtype a Hugging Face directory's weights are stored in, read from the safetensors
 * headers: HPT_DTYPE_BF16 when every tensor is bf16, else HPT_DTYPE_F32 (the default dtype of
 * a save of a model loaded from dir: docs/formats.md). */
hpt_status hpt_hf_weights_dtype(const char *dir, int *dtype_out);

#endif /* HPTRAIN_IO_H */
