/* hf.h: Hugging Face model directories, private to the io module: config.json
 * (src/io/hfconfig.c) and the weights (src/io/hfmodel.c); what differs per architecture (its
 * classes, keys and tensor names) each architecture says (model/arch.h, its Hugging Face block). */
#ifndef HPT_IO_HF_H
#define HPT_IO_HF_H

#include "hptrain.h"

#include <stddef.h>

/* config.json, as read: the model configuration its architecture's keys map to (the
 * architecture's hf_config_read, model/arch.h), and what config.json says beyond it. */
typedef struct {
    int arch;                 /* hpt_arch_id */
    char arch_name[40];       /* architectures[0]: "GPT2LMHeadModel", "MistralForCausalLM", ... */
    hpt_model_config m;       /* Vp: 0 until hf_config_to_model */
    int bos;                  /* bos_token_id, -1 if absent */
    int n_eos;                /* eos_token_id: an int or a list */
    int eos[8];
    char torch_dtype[16];     /* "float32", "bfloat16", "float16", or "" */
} hf_config;


/* Parses config.json's text (n bytes; what names it in errors). Strict where hptrain cannot
 * follow (an architecture no registered one reads, a key its architecture refuses), lenient on
 * keys it does not use. */
hpt_status hf_config_parse(const char *text, size_t n, const char *what, hf_config *out);
/* Reads dir/config.json. */
hpt_status hf_config_read(const char *dir, hf_config *out);
/* Writes c as config.json at path (not atomic: the model-directory writer writes into a
 * temporary directory); dtype "float32" or "bfloat16". */
hpt_status hf_config_write(const char *path, const hf_config *c, const char *dtype);
/* The model configuration of c (Vp: V rounded up to 128), checked; HPT_ERR_UNSUPPORTED for
 * what hptrain's architecture cannot follow. */
hpt_status hf_config_to_model(const hf_config *c, hpt_model_config *out);
/* config.json's fields of a model configuration (its architecture's first class). */
void hf_config_from_model(const hpt_model_config *g, hf_config *out);

#endif
