/* engine_opts.c: the offload engine's part of the plan's rules. The offload options' defaults,
 * parsers, names and their own check (hpt_offload_check) are the plan's (core/choices.c); the
 * engine and the estimator ask here where an optimizer's state may live, which is the same
 * rule hpt_plan_check holds (core/choices.c, hpt_offload_check_optim). */
#include "core/choices.h"
#include "core/core.h"
#include "offload/engine.h"

hpt_status eng_check_optim(const hpt_offload_opts *o, int mv_homes) {
    return hpt_offload_check_optim(o, mv_homes);
}
