/* fuzz_common.c: the temporary files and the budgeted memory manager of the fuzz targets. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[512];

static void cleanup(void) {
    char cmd[600];
    if (!g_dir[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) { /* nothing to do: a leftover temporary directory */ }
}

const char *fz_dir(void) {
    if (!g_dir[0]) {
        /* memory-backed where there is one: a file per execution on a disk costs ~1 ms */
        const char *t = getenv("TMPDIR");
        if (!t || !*t) t = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(g_dir, sizeof g_dir, "%s/hpt_fuzz_XXXXXX", t);
        if (!mkdtemp(g_dir)) abort(); /* the harness, not the library under test */
        atexit(cleanup);
    }
    return g_dir;
}

const char *fz_file(const char *name, const void *data, size_t n) {
    static char path[4][600];
    static const char *names[4];
    int k = 0;
    while (k < 3 && names[k] && strcmp(names[k], name) != 0) k++;
    names[k] = name;
    snprintf(path[k], sizeof path[k], "%s/%s", fz_dir(), name);
    FILE *f = fopen(path[k], "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) abort();
    return path[k];
}

hpt_mem *fz_mem(uint64_t bytes) {
    hpt_mem *m = NULL;
    if (hpt_mem_create(&m) != HPT_OK) abort();
    hpt_mem_set_budget(m, HPT_TIER_DEVICE, bytes);
    hpt_mem_set_budget(m, HPT_TIER_HOST, bytes);
    return m;
}
