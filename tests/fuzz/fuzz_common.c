/* fuzz_common.c: the temporary files and the budgeted memory manager of the fuzz targets. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <sys/stat.h>

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

static void tok_encode(hpt_tokenizer *t, const char *text, size_t len, unsigned flags) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (hpt_tokenizer_encode_ex(t, text, len, flags, &ids, &n) == HPT_OK) {
        for (size_t i = 0; i < n; i++) {
            const char *b;
            size_t k;
            (void)hpt_tokenizer_decode(t, ids[i], &b, &k);
        }
    }
    free(ids);
}

int fz_tokenizer_dir(const char *sub, const char *name, const uint8_t *data, size_t size) {
    char dir[600], file[700];
    snprintf(dir, sizeof dir, "%s/%s", fz_dir(), sub);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) abort();
    snprintf(file, sizeof file, "%s/%s", sub, name);
    fz_file(file, data, size);
    hpt_tokenizer *t = NULL;
    if (hpt_tokenizer_load(dir, &t) != HPT_OK) return 0;
    static const char k_text[] = "Hello world, it's 2024!\n\n  \tabc   def?! \xc3\xbc" "n\xc3\xaf"
                                 "c\xc3\xb6" "d\xc3\xa9 \xf0\x9f\x99\x82 <|endoftext|> 'll 've\r\n";
    tok_encode(t, k_text, sizeof k_text - 1, 0);
    tok_encode(t, k_text, sizeof k_text - 1, HPT_TOK_SPECIAL);
    tok_encode(t, (const char *)data, size < 300 ? size : 300, HPT_TOK_SPECIAL);
    hpt_tokenizer_free(t);
    return 0;
}
