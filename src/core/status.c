/* status.c: status names and the per-thread last-error text.
 * The text is thread-local so kernels on worker threads and callers on other threads never
 * overwrite one another's detail. hpt_fail_ctx keeps the inner detail and adds context. */
#include "core/core.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char g_err[1024];

const char *hpt_status_str(hpt_status s) {
    switch (s) {
    case HPT_OK: return "ok";
    case HPT_ERR_OOM: return "out of memory";
    case HPT_ERR_IO: return "i/o error";
    case HPT_ERR_FORMAT: return "bad file format";
    case HPT_ERR_CHECKSUM: return "checksum mismatch";
    case HPT_ERR_SHAPE: return "shape mismatch";
    case HPT_ERR_INVALID: return "invalid argument";
    case HPT_ERR_UNSUPPORTED: return "unsupported";
    case HPT_ERR_MISMATCH: return "verification failed";
    }
    return "unknown status";
}

const char *hpt_last_error(void) { return g_err; }
void hpt_clear_error(void) { g_err[0] = '\0'; }

hpt_status hpt_fail(hpt_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
    return s;
}

hpt_status hpt_fail_ctx(hpt_status s, const char *fmt, ...) {
    char inner[sizeof g_err];
    char prefix[256];
    memcpy(inner, g_err, sizeof inner);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* prefix, ": ", then as much of the inner text as fits */
    size_t np = strlen(prefix), cap = sizeof g_err - 1;
    const char *in = inner[0] ? inner : hpt_status_str(s);
    size_t ni = strlen(in);
    if (np > cap) np = cap;
    memcpy(g_err, prefix, np);
    size_t n = np;
    if (n + 2 <= cap) { g_err[n++] = ':'; g_err[n++] = ' '; }
    if (ni > cap - n) ni = cap - n;
    memcpy(g_err + n, in, ni);
    g_err[n + ni] = '\0';
    return s;
}
