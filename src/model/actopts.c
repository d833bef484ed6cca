/* actopts.c: the activation options (hpt_gpt2_act_opts): defaults, the one validity check,
 * parsing each choice from its text and naming it back, and the recompute segments every:N
 * and full cut the blocks into. Pure functions of the options; the plan parser (core/plan.c)
 * calls the parse and name functions. */
#include "core/core.h"
#include "model/gpt2_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hpt_gpt2_act_opts hpt_gpt2_act_defaults(void) {
    hpt_gpt2_act_opts o = {HPT_ATTN_FLASH, HPT_RECOMPUTE_NONE, 1, HPT_OFFLOAD_NONE,
                           HPT_COMPRESS_NONE, 0};
    return o;
}

int act_segment_len(const hpt_gpt2_act_opts *o) {
    if (o->recompute == HPT_RECOMPUTE_FULL) return 1;
    if (o->recompute == HPT_RECOMPUTE_EVERY) return o->every;
    return 0;
}

int act_segment_end(int l, int N, int L) {
    int e = (l / N) * N + N - 1;
    return e < L - 1 ? e : L - 1;
}

hpt_status act_opts_check(const hpt_gpt2_act_opts *o) {
    if (o->head_chunk < 0)
        return hpt_fail(HPT_ERR_INVALID, "head chunk %d must be >= 0 (0: all logits)", o->head_chunk);
    if (o->attention != HPT_ATTN_FLASH && o->attention != HPT_ATTN_PLAIN)
        return hpt_fail(HPT_ERR_INVALID, "unknown attention kind %d", (int)o->attention);
    if ((unsigned)o->recompute > HPT_RECOMPUTE_FULL)
        return hpt_fail(HPT_ERR_INVALID, "unknown recompute policy %d", (int)o->recompute);
    if (o->recompute == HPT_RECOMPUTE_EVERY && o->every < 1)
        return hpt_fail(HPT_ERR_INVALID, "recompute every:%d: N must be >= 1", o->every);
    if ((unsigned)o->offload > HPT_OFFLOAD_DISK)
        return hpt_fail(HPT_ERR_INVALID, "unknown activation offload %d", (int)o->offload);
    if ((unsigned)o->compress > HPT_COMPRESS_BF16)
        return hpt_fail(HPT_ERR_INVALID, "unknown activation compression %d", (int)o->compress);
    if ((o->offload != HPT_OFFLOAD_NONE || o->compress != HPT_COMPRESS_NONE) && act_segment_len(o))
        return hpt_fail(HPT_ERR_UNSUPPORTED, "activation offload and compression work with "
                        "recompute none or selective, not every:N or full");
    return HPT_OK;
}

hpt_status hpt_act_offload_parse(const char *text, hpt_gpt2_act_opts *o) {
    if (!strcmp(text, "none")) o->offload = HPT_OFFLOAD_NONE;
    else if (!strcmp(text, "host")) o->offload = HPT_OFFLOAD_HOST;
    else if (!strcmp(text, "disk")) o->offload = HPT_OFFLOAD_DISK;
    else return hpt_fail(HPT_ERR_INVALID, "act-offload '%s': expected none, host or disk", text);
    return HPT_OK;
}

hpt_status hpt_act_compress_parse(const char *text, hpt_gpt2_act_opts *o) {
    if (!strcmp(text, "none")) o->compress = HPT_COMPRESS_NONE;
    else if (!strcmp(text, "int8")) o->compress = HPT_COMPRESS_INT8;
    else if (!strcmp(text, "bf16")) o->compress = HPT_COMPRESS_BF16;
    else return hpt_fail(HPT_ERR_INVALID, "act-compress '%s': expected none, int8 or bf16", text);
    return HPT_OK;
}

const char *hpt_act_offload_name(hpt_act_offload x) {
    return x == HPT_OFFLOAD_HOST ? "host" : x == HPT_OFFLOAD_DISK ? "disk" : "none";
}

const char *hpt_act_compress_name(hpt_act_compress x) {
    return x == HPT_COMPRESS_INT8 ? "int8" : x == HPT_COMPRESS_BF16 ? "bf16" : "none";
}

hpt_status hpt_attention_parse(const char *text, hpt_gpt2_act_opts *o) {
    if (!strcmp(text, "flash")) o->attention = HPT_ATTN_FLASH;
    else if (!strcmp(text, "plain")) o->attention = HPT_ATTN_PLAIN;
    else return hpt_fail(HPT_ERR_INVALID, "attention '%s': expected flash or plain", text);
    return HPT_OK;
}

hpt_status hpt_recompute_parse(const char *text, hpt_gpt2_act_opts *o) {
    if (!strcmp(text, "none")) o->recompute = HPT_RECOMPUTE_NONE;
    else if (!strcmp(text, "selective")) o->recompute = HPT_RECOMPUTE_SELECTIVE;
    else if (!strcmp(text, "full")) o->recompute = HPT_RECOMPUTE_FULL;
    else if (!strncmp(text, "every:", 6)) {
        char *end;
        long n = strtol(text + 6, &end, 10);
        if (end == text + 6 || *end || n < 1 || n > 1000000)
            return hpt_fail(HPT_ERR_INVALID, "recompute '%s': N of every:N must be an integer >= 1", text);
        o->recompute = HPT_RECOMPUTE_EVERY;
        o->every = (int)n;
    } else {
        return hpt_fail(HPT_ERR_INVALID, "recompute '%s': expected none, selective, every:N or full", text);
    }
    return HPT_OK;
}

const char *hpt_attention_name(hpt_attention a) { return a == HPT_ATTN_PLAIN ? "plain" : "flash"; }

const char *hpt_recompute_name(const hpt_gpt2_act_opts *o, char *buf, size_t n) {
    switch (o->recompute) {
    case HPT_RECOMPUTE_SELECTIVE: snprintf(buf, n, "selective"); break;
    case HPT_RECOMPUTE_EVERY: snprintf(buf, n, "every:%d", o->every); break;
    case HPT_RECOMPUTE_FULL: snprintf(buf, n, "full"); break;
    default: snprintf(buf, n, "none"); break;
    }
    return buf;
}
