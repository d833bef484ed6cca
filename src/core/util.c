/* util.c: threads, sizes and the RNG. */
#include "core/core.h"

#include <ctype.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void hpt_set_threads(int n) { omp_set_num_threads(n < 1 ? 1 : n); }
int hpt_get_threads(void) { return omp_get_max_threads(); }

hpt_status hpt_parse_size(const char *text, uint64_t *bytes_out) {
    if (!text || !*text) return hpt_fail(HPT_ERR_INVALID, "empty size");
    char *end = NULL;
    double v = strtod(text, &end);
    if (end == text || !(v >= 0) || !isfinite(v))
        return hpt_fail(HPT_ERR_INVALID, "bad size '%s' (expected e.g. 512MB, 4GB, 1.5GiB)", text);
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"K", 1e3}, {"KB", 1e3}, {"M", 1e6}, {"MB", 1e6}, {"G", 1e9},
        {"GB", 1e9}, {"T", 1e12}, {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0},
        {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].suffix) == 0 &&
            (strchr(units[i].suffix, 'i') == NULL || strcmp(end, units[i].suffix) == 0)) {
            *bytes_out = (uint64_t)(v * units[i].mult + 0.5);
            return HPT_OK;
        }
    }
    return hpt_fail(HPT_ERR_INVALID, "bad size unit in '%s' (use B, KB, MB, GB, KiB, MiB, GiB)", text);
}

void hpt_rng_seed(hpt_rng *r, uint64_t seed) {
    /* splitmix64 of the seed: never zero, well mixed even for seeds 0, 1, 2 ... */
    uint64_t z = seed + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    r->s = z ? z : 0x2545F4914F6CDD1Dull;
}

uint32_t hpt_rng_u32(hpt_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return (uint32_t)((r->s * 0x2545F4914F6CDD1Dull) >> 32);
}

float hpt_rng_uniform(hpt_rng *r) { return (float)(hpt_rng_u32(r) >> 8) / 16777216.0f; }

float hpt_rng_normal(hpt_rng *r) {
    float u1 = hpt_rng_uniform(r), u2 = hpt_rng_uniform(r);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

uint64_t hpt_rss_peak_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports kilobytes */
}

double hpt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t hpt_rss_bytes(void) {
    /* /proc/self/statm: size resident shared ... in pages */
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, resident = 0;
    int n = fscanf(f, "%llu %llu", &size, &resident);
    fclose(f);
    return n == 2 ? (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}
