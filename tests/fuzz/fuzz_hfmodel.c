/* fuzz_hfmodel.c: a whole Hugging Face model directory through hpt_model_load_hf
 * (src/io/hfmodel.c: config.json, model.safetensors or its index and shards). The input is
 * uint32 n, config.json (n bytes), uint32 k, model.safetensors.index.json (k bytes; 0: none),
 * then the safetensors file (named by the index's weight_map when there is one: the
 * seeds' index names "model-00001-of-00001.safetensors"). */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int take(const uint8_t **p, size_t *n, size_t *len) {
    uint32_t k;
    if (*n < 4) return 0;
    memcpy(&k, *p, 4);
    *p += 4;
    *n -= 4;
    if (k > *n) k = (uint32_t)*n;
    *len = k;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char dir[600];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/hf", fz_dir());
        if (mkdir(dir, 0700) != 0) abort();
    }
    const uint8_t *p = data;
    size_t n = size, nc, ni;
    if (!take(&p, &n, &nc)) return 0;
    fz_file("hf/config.json", p, nc);
    p += nc;
    n -= nc;
    if (!take(&p, &n, &ni)) return 0;
    char path[700];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model-00001-of-00001.safetensors", dir);
    unlink(path);
    if (ni) {
        fz_file("hf/model.safetensors.index.json", p, ni);
        fz_file("hf/model-00001-of-00001.safetensors", p + ni, n - ni);
    } else {
        fz_file("hf/model.safetensors", p, n);
    }
    hpt_mem *mem = fz_mem(64u << 20);
    hpt_model *m = NULL;
    if (hpt_model_load_hf(mem, dir, NULL, &m) == HPT_OK) hpt_model_free(m);
    hpt_mem_destroy(mem);
    return 0;
}
