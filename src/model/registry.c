/* registry.c: the architectures this build has, one line each, at the index of their id
 * (hpt_model_config.arch, the public hpt_arch_id). Everything above the model module that
 * needs a family's name, label, shapes, planner ops or tensor names asks here
 * (hpt_arch_of, hpt_arch_at, hpt_arch_by_name; hpt_arch_count and hpt_arch_desc_of for the
 * public header). A new architecture is its file (model/<family>.c, filling struct hpt_arch
 * to the end) plus one line below. Invariant: k_archs[i]'s id is i. */
#include "model/arch.h"

#include <string.h>

static const hpt_arch *const k_archs[] = {
    &hpt_arch_gpt2,  /* HPT_ARCH_GPT2 */
    &hpt_arch_llama, /* HPT_ARCH_LLAMA */
};
#define N_ARCHS ((int)(sizeof k_archs / sizeof k_archs[0]))

int hpt_arch_count(void) { return N_ARCHS; }

const hpt_arch *hpt_arch_at(int i) { return i >= 0 && i < N_ARCHS ? k_archs[i] : NULL; }

const hpt_arch *hpt_arch_of(const hpt_model_config *cfg) { return hpt_arch_at(cfg->arch); }

const hpt_arch *hpt_arch_by_name(const char *name) {
    for (int i = 0; name && i < N_ARCHS; i++)
        if (!strcmp(k_archs[i]->name, name)) return k_archs[i];
    return NULL;
}

const hpt_arch_desc *hpt_arch_desc_of(int id) {
    const hpt_arch *a = hpt_arch_at(id);
    return a ? &a->desc : NULL;
}
