/* hf.h: Hugging Face model directories, private to the io module: config.json
 * (src/io/hfconfig.c) and the weights' names per architecture (src/io/hfmodel.c). */
#ifndef HPT_IO_HF_H
#define HPT_IO_HF_H

#include "hptrain.h"

#include <stddef.h>

typedef enum { HF_GPT2 = 0, HF_LLAMA = 1 } hf_arch;

/* config.json, as read (the fields every architecture's keys map to). */
typedef struct {
    int arch;                 /* hf_arch */
    char arch_name[40];       /* "GPT2LMHeadModel", "LlamaForCausalLM", "MistralForCausalLM" */
    int L, C, NH, NKV, FF, V, maxT;
    float norm_eps;           /* layer_norm_epsilon | rms_norm_eps */
    float rope_theta;         /* 0 for GPT-2 */
    float rope_factor;        /* rope_type "llama3": factor; 0 none */
    float rope_low_freq, rope_high_freq;
    int rope_orig_maxT;
    int tied;                 /* tie_word_embeddings */
    int attn_bias, mlp_bias;
    float init_range;         /* initializer_range */
    int bos;                  /* bos_token_id, -1 if absent */
    int n_eos;                /* eos_token_id: an int or a list */
    int eos[8];
    char torch_dtype[16];     /* "float32", "bfloat16", "float16", or "" */
} hf_config;

/* Parses config.json's text (n bytes; what names it in errors). Strict where hptrain cannot
 * follow (an unknown architecture, head_dim != hidden/heads, an unknown rope_type, an
 * activation other than GPT-2's tanh GELU or llama's SiLU), lenient on keys it does not use. */
hpt_status hf_config_parse(const char *text, size_t n, const char *what, hf_config *out);
/* Reads dir/config.json. */
hpt_status hf_config_read(const char *dir, hf_config *out);
/* Writes c as config.json at path (not atomic: the model-directory writer writes into a
 * temporary directory); dtype "float32" or "bfloat16". */
hpt_status hf_config_write(const char *path, const hf_config *c, const char *dtype);
/* The model configuration of c (Vp: V rounded up to 128), checked; HPT_ERR_UNSUPPORTED for
 * what hptrain's architecture cannot follow. */
hpt_status hf_config_to_model(const hf_config *c, hpt_model_config *out);
/* config.json's fields of a model configuration (llama: LlamaForCausalLM). */
void hf_config_from_model(const hpt_model_config *g, hf_config *out);

#endif
