/* actopts.c: the runner's reading of the activation options (hpt_act_opts): the recompute
 * segments every:N and full cut the blocks into, and the options' check, which is the plan's
 * (core/choices.c, hpt_act_check: the defaults, parsers and names live there too). Pure
 * functions of the options. */
#include "core/choices.h"
#include "core/core.h"
#include "model/gpt2_int.h"

int act_segment_len(const hpt_act_opts *o) {
    if (o->recompute == HPT_RECOMPUTE_FULL) return 1;
    if (o->recompute == HPT_RECOMPUTE_EVERY) return o->every;
    return 0;
}

int act_segment_end(int l, int N, int L) {
    int e = (l / N) * N + N - 1;
    return e < L - 1 ? e : L - 1;
}

hpt_status act_opts_check(const hpt_act_opts *o) { return hpt_act_check(o); }
