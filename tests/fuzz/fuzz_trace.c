/* fuzz_trace.c: memory traces as hptrain profile reads them (src/mem/trace.c: JSON lines, a
 * reformatted JSON tree, CSV), then summarised and drawn (src/mem/profile*.c), as the command
 * does. */
#include "fuzz.h"

#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_file("trace.json", data, size);
    hpt_trace *tr = NULL;
    if (hpt_trace_load(path, &tr) != HPT_OK) return 0;
    hpt_profile_summary sum;
    if (hpt_profile_summarize(tr->events, tr->n_events, 25.0, &sum) == HPT_OK) {
        char svg[700];
        snprintf(svg, sizeof svg, "%s/trace.svg", fz_dir());
        (void)hpt_profile_render_svg(tr, &sum, svg);
        hpt_profile_summary_free(&sum);
    }
    hpt_trace_free(tr);
    return 0;
}
