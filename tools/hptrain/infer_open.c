/* infer_open.c: the model, tokenizer and inference engine of `sample` and `chat`, opened the
 * same way for both: --model is a checkpoint, a Hugging Face directory or a --save directory
 * (its model.bin); the tokenizer is --tokenizer, else the directory's own tokenizer.json or
 * tokenizer.model, else GPT-2's; --adapter merges LoRA adapters into an fp32 base that the
 * engine borrows. docs/inference.md. */
#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int cli_model_open(const char *model_arg, const char *tok_path, int need_encode, cli_model *m) {
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s", model_arg);
    struct stat st;
    if (stat(model_arg, &st) == 0 && S_ISDIR(st.st_mode)) {
        m->dir = model_arg;
        snprintf(m->path, sizeof m->path, "%s/config.json", model_arg);
        if (stat(m->path, &st) != 0) /* a --save directory; with config.json: Hugging Face's */
            snprintf(m->path, sizeof m->path, "%s/model.bin", model_arg);
        else
            snprintf(m->path, sizeof m->path, "%s", model_arg);
    }
    hpt_status s = hpt_model_read_config(m->path, &m->cfg);
    if (s != HPT_OK) return cli_lib_error(s, "loading the model");
    char own_path[4200];
    if (!tok_path && m->dir) {
        static const char *const own[] = {"tokenizer.json", "tokenizer.model"};
        for (size_t i = 0; i < 2 && !tok_path; i++) {
            snprintf(own_path, sizeof own_path, "%s/%s", m->dir, own[i]);
            if (stat(own_path, &st) == 0 && S_ISREG(st.st_mode)) tok_path = own_path;
        }
    }
    return cli_load_tokenizer(tok_path, need_encode, &m->tok);
}

int cli_engine_open(cli_model *m, const char *adapter, hpt_weights w, int ctx) {
    hpt_status s = hpt_mem_create(&m->mem);
    if (s == HPT_OK && adapter) {
        s = hpt_model_load_forward(m->mem, m->path, &m->base);
        if (s == HPT_OK) s = hpt_lora_load(m->base, adapter);
        if (s == HPT_OK) s = hpt_model_lora_merge(m->base);
        if (s == HPT_OK) s = hpt_infer_create(m->mem, m->base, w, ctx, &m->inf);
        if (s != HPT_OK) return cli_lib_error(s, "loading the model and the adapters");
    } else if (s != HPT_OK || (s = hpt_infer_load(m->mem, m->path, w, ctx, &m->inf)) != HPT_OK) {
        return cli_lib_error(s, "loading the model");
    }
    return 0;
}

void cli_model_close(cli_model *m) {
    hpt_infer_free(m->inf);
    hpt_model_free(m->base);
    hpt_mem_destroy(m->mem);
    hpt_tokenizer_free(m->tok);
    memset(m, 0, sizeof *m);
}
