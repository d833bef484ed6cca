/* engine_opts.c: the offload options (hpt_offload_opts): defaults, the --offload text's
 * parser, the check of every rule the engine needs of them (eng_create calls it), and the names
 * and parsers of the block weights' precision, the gradient home's precision and the
 * embeddings' treatment. Invariant: a name table's index is its enum's value (the enums are
 * append-only), so a name and its parse are inverses. */
#include "core/core.h"
#include "hptrain.h"

#include <string.h>

hpt_offload_opts hpt_offload_defaults(void) {
    return (hpt_offload_opts){.params = HPT_TIER_DEVICE, .grads = HPT_TIER_DEVICE,
                              .optim = HPT_TIER_DEVICE, .max_active = 2, .prefetch = 1, .fused = 0};
}

int hpt_offload_active(const hpt_offload_opts *o) {
    return o && (o->params != HPT_TIER_DEVICE || o->grads != HPT_TIER_DEVICE ||
                 o->optim != HPT_TIER_DEVICE || o->fused || o->weights != HPT_BW_FP32 ||
                 o->grad_home != HPT_GH_FP32 || o->embeddings != HPT_EMB_FULL);
}

static int parse_tier(const char *t, size_t n, hpt_tier *out) {
    static const char *k[] = {"device", "host", "disk"};
    for (int i = 0; i < 3; i++)
        if (strlen(k[i]) == n && !strncmp(t, k[i], n)) {
            *out = (hpt_tier)i;
            return 1;
        }
    return 0;
}

hpt_status hpt_offload_parse(const char *text, hpt_offload_opts *o) {
    hpt_tier t;
    if (!strcmp(text, "none")) {
        o->params = o->grads = o->optim = HPT_TIER_DEVICE;
        return HPT_OK;
    }
    if (parse_tier(text, strlen(text), &t) && t != HPT_TIER_DEVICE) {
        o->params = o->grads = o->optim = t;
        return HPT_OK;
    }
    for (const char *p = text; *p;) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (!eq || eq > end || !parse_tier(eq + 1, (size_t)(end - eq - 1), &t))
            return hpt_fail(HPT_ERR_INVALID, "offload '%s': expected none, host, disk or "
                            "params=T,grads=T,optim=T with T device, host or disk", text);
        size_t kn = (size_t)(eq - p);
        if (kn == 6 && !strncmp(p, "params", 6)) o->params = t;
        else if (kn == 5 && !strncmp(p, "grads", 5)) o->grads = t;
        else if (kn == 5 && !strncmp(p, "optim", 5)) o->optim = t;
        else return hpt_fail(HPT_ERR_INVALID, "offload '%s': unknown key '%.*s' (params, grads, "
                             "optim)", text, (int)kn, p);
        p = *end ? end + 1 : end;
    }
    return HPT_OK;
}

hpt_status hpt_offload_check(const hpt_offload_opts *o) {
    if ((unsigned)o->params >= HPT_TIER_COUNT || (unsigned)o->grads >= HPT_TIER_COUNT ||
        (unsigned)o->optim >= HPT_TIER_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "offload: unknown tier");
    if ((unsigned)o->weights >= HPT_BW_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "offload: unknown weights precision %d", o->weights);
    if (o->weights == HPT_BW_BF16_KAHAN && o->params == HPT_TIER_DISK)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "bf16-kahan weights keep their home (and its "
                        "compensation) on the device or the host; bf16-sr may use the disk "
                        "(--offload params=disk given)");
    if ((unsigned)o->grad_home >= HPT_GH_COUNT)
        return hpt_fail(HPT_ERR_INVALID, "offload: unknown gradient home precision %d", o->grad_home);
    if (o->grad_home != HPT_GH_FP32 && o->fused)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--grad-home %s: with --fused-update gradients never "
                        "go to a home (each block is updated from its device slot)",
                        hpt_grad_home_name((hpt_grad_home)o->grad_home));
    if ((unsigned)o->embeddings >= HPT_EMB_COUNT || o->vocab_chunk < 0)
        return hpt_fail(HPT_ERR_INVALID, "offload: unknown embeddings %d or vocab chunk %d < 0",
                        o->embeddings, o->vocab_chunk);
    if (o->embeddings != HPT_EMB_FULL && !o->fused)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--embeddings %s updates wte chunk by chunk at the end "
                        "of the backward: it needs --fused-update",
                        hpt_embeddings_name((hpt_embeddings)o->embeddings));
    if (o->embeddings == HPT_EMB_BF16 && o->weights == HPT_BW_FP32)
        return hpt_fail(HPT_ERR_UNSUPPORTED, "--embeddings bf16 rounds as the blocks' weights do: "
                        "it needs --weights bf16-sr or bf16-kahan");
    if (o->max_active < 1 || o->prefetch < 0 || o->prefetch >= o->max_active)
        return hpt_fail(HPT_ERR_INVALID, "offload: --max-active-layers %d and --prefetch %d need "
                        "K >= 1 and 0 <= P < K", o->max_active, o->prefetch);
    return HPT_OK;
}

static const char *const k_weights_name[HPT_BW_COUNT] = {"fp32", "bf16-sr", "bf16-kahan"};

hpt_status hpt_block_weights_parse(const char *text, hpt_block_weights *out) {
    for (int i = 0; i < HPT_BW_COUNT; i++)
        if (!strcmp(text, k_weights_name[i])) {
            *out = (hpt_block_weights)i;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "weights '%s': expected fp32, bf16-sr or bf16-kahan", text);
}

const char *hpt_block_weights_name(hpt_block_weights w) {
    return (unsigned)w < HPT_BW_COUNT ? k_weights_name[w] : "?";
}

static const char *const k_grad_home_name[HPT_GH_COUNT] = {"fp32", "bf16", "fp16"};

hpt_status hpt_grad_home_parse(const char *text, hpt_grad_home *out) {
    for (int i = 0; i < HPT_GH_COUNT; i++)
        if (!strcmp(text, k_grad_home_name[i])) {
            *out = (hpt_grad_home)i;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "grad-home '%s': expected fp32, bf16 or fp16", text);
}

const char *hpt_grad_home_name(hpt_grad_home g) {
    return (unsigned)g < HPT_GH_COUNT ? k_grad_home_name[g] : "?";
}

static const char *const k_emb_name[HPT_EMB_COUNT] = {"full", "chunked", "bf16"};

hpt_status hpt_embeddings_parse(const char *text, hpt_embeddings *out) {
    for (int i = 0; i < HPT_EMB_COUNT; i++)
        if (!strcmp(text, k_emb_name[i])) {
            *out = (hpt_embeddings)i;
            return HPT_OK;
        }
    return hpt_fail(HPT_ERR_INVALID, "embeddings '%s': expected full, chunked or bf16", text);
}

const char *hpt_embeddings_name(hpt_embeddings e) {
    return (unsigned)e < HPT_EMB_COUNT ? k_emb_name[e] : "?";
}
