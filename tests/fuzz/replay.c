/* replay.c: a fuzz target as a plain program: runs LLVMFuzzerTestOneInput on every file named
 * and every file in every directory named (seed corpora, tests/fuzz/regress/<target>/). A
 * crash, a sanitizer report or a leak fails the run; 0 with the count otherwise. */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "replay: cannot open %s\n", path); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
    size_t got = n > 0 ? fread(b, 1, (size_t)n, f) : 0;
    fclose(f);
    if ((long)got != (n > 0 ? n : 0)) { free(b); fprintf(stderr, "replay: cannot read %s\n", path); return 1; }
    LLVMFuzzerTestOneInput(b, got);
    free(b);
    return 0;
}

int main(int argc, char **argv) {
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue; /* an empty regression directory is absent */
        if (!S_ISDIR(st.st_mode)) { bad += run_file(argv[i]); files++; continue; }
        DIR *d = opendir(argv[i]);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], de->d_name);
            if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) { bad += run_file(p); files++; }
        }
        if (d) closedir(d);
    }
    printf("replay: %d inputs, %d unreadable\n", files, bad);
    return bad ? 1 : (files ? 0 : 1);
}
