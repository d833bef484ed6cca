/* fuzz_chat.c: a chat template and a conversation (src/io/chat_*.c), both untrusted: the input
 * is the template's source, a NUL byte, then the conversation's JSON (without a NUL, a fixed
 * conversation). A template that parses is rendered with and without add_generation_prompt. */
#include "fuzz.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char k_conv[] = "{\"messages\":[{\"role\":\"system\",\"content\":\" s \"},{\"role\":\"user\","
                                 "\"content\":\"Hi <|eot_id|>\"},{\"role\":\"assistant\",\"content\":\"<think>\\nr\\n"
                                 "</think>\\n\\nYo\"}],\"tools\":[{\"name\":\"f\",\"x\":[1,2.5,null]}]}";
    const uint8_t *nul = memchr(data, 0, size);
    size_t tl = nul ? (size_t)(nul - data) : size;
    const char *conv = nul ? (const char *)nul + 1 : k_conv;
    size_t cl = nul ? size - tl - 1 : strlen(k_conv);
    hpt_chat_template *ct;
    if (hpt_chat_template_parse((const char *)data, tl, "<s>", "</s>", &ct) != HPT_OK) return 0;
    for (int agp = 0; agp < 2; agp++) {
        hpt_chat_opts o = hpt_chat_opts_defaults();
        o.add_generation_prompt = agp;
        hpt_chat_text r;
        if (hpt_chat_render(ct, conv, cl, &o, &r) == HPT_OK) hpt_chat_text_free(&r);
    }
    hpt_chat_template_free(ct);
    return 0;
}
