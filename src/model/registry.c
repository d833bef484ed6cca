/* registry.c: the architectures this build has, one line each, at the index of their id
 * (hpt_model_config.arch, the public hpt_arch_id). Everything above the model module that
 * needs a family's name, label, shapes, planner ops or tensor names asks here
 * (hpt_arch_of, hpt_arch_at, hpt_arch_by_name; hpt_arch_count and hpt_arch_desc_of for the
 * public header); a SHAPE goes to its family (shape_prefixes, shape_parse) and every
 * configuration is filled and checked through it. A new architecture is its file
 * (model/<family>.c, filling struct hpt_arch to the end) plus one line below. Invariant:
 * k_archs[i]'s id is i. */
#include "model/arch.h"

#include "core/core.h"
#include "model/model.h"

#include <stdio.h>
#include <string.h>

static const hpt_arch *const k_archs[] = {
    &hpt_arch_gpt2,  /* HPT_ARCH_GPT2 */
    &hpt_arch_llama, /* HPT_ARCH_LLAMA */
    &hpt_arch_qwen2, /* HPT_ARCH_QWEN2 */
    &hpt_arch_qwen3, /* HPT_ARCH_QWEN3 */
    &hpt_arch_gemma3, /* HPT_ARCH_GEMMA3 */
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

/* ---- configurations through their architecture (config.c keeps the shared helpers) ---- */

void model_config_fill(hpt_model_config *c) {
    const hpt_arch *a = hpt_arch_of(c);
    if (a && a->config_fill) a->config_fill(c);
}

hpt_status hpt_model_config_check(const hpt_model_config *c) {
    const hpt_arch *a = hpt_arch_of(c);
    if (!a || !a->config_check) return hpt_fail(HPT_ERR_SHAPE, "unknown architecture id %d", c->arch);
    return a->config_check(c);
}

static int round_up(int x, int m) { return (x + m - 1) / m * m; }

hpt_status hpt_model_config_parse(const char *shape, hpt_model_config *out) {
    for (int i = 0; i < hpt_arch_count(); i++) {
        const hpt_arch *a = hpt_arch_at(i);
        for (const char *const *p = a->shape_prefixes; p && *p; p++) {
            if (strncmp(shape, *p, strlen(*p)) != 0) continue;
            hpt_model_config c;
            memset(&c, 0, sizeof c);
            HPT_CHECK(a->shape_parse(shape, &c));
            c.arch = i;
            if (!c.Vp) c.Vp = c.V % 128 ? round_up(c.V, 128) : c.V;
            model_config_fill(&c);
            HPT_CHECK(hpt_model_config_check(&c));
            *out = c;
            return HPT_OK;
        }
    }
    char list[1024];
    size_t n = 0;
    list[0] = 0;
    for (int i = 0; i < hpt_arch_count() && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? "; " : "", hpt_arch_at(i)->desc.shapes);
    return hpt_fail(HPT_ERR_INVALID, "unknown model shape '%s' (%s)", shape, list);
}
