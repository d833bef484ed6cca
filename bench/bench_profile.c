/* bench_profile.c: issue 3's memory benchmark. For the GPT-2 124M shape (random weights, AdamW)
 * at B=4 T=64 and B=4 T=256 it prints the estimator's peak (hpt_plan_estimate), the measured
 * accounted peak (hpt_mem_get_stats), the process's peak RSS and how much of its growth the
 * accounted bytes explain, and the profiler's overhead, measured two ways:
 *   - timed: training steps with event recording on and off, interleaved (on-off, off-on, ...
 *     so drift cancels); the median over pairs of (on - off) / off. On a shared machine the noise of one step
 *     is larger than the effect, so this figure can come out negative or a few percent;
 *   - counted: the cost of one recorded event (a tight loop of arena events, recording on
 *     minus off) times the events a step records, divided by the step's median time. This is
 *     the recording's own cost without the scheduler's noise.
 * The goal is an overhead under 1% of step time.
 *
 * Each configuration runs in a child process (this program re-executed), so each RSS peak is
 * its own. The load average is printed: the development machines are shared.
 *
 * Build and run: bench/bench_profile.sh [--pairs N] [--threads N]
 */
#include "hptrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
static double mib(uint64_t b) { return (double)b / 1048576.0; }

static void loadavg(char *buf, size_t n) {
    FILE *f = fopen("/proc/loadavg", "r");
    buf[0] = '\0';
    if (f) {
        if (!fgets(buf, (int)n, f)) buf[0] = '\0';
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = '\0';
}

/* The cost of one recorded event in nanoseconds: arena events with recording on minus off. */
static double ns_per_event(hpt_mem *mem) {
    const int n = 1 << 20, chunk = 1 << 16;
    double t[2];
    for (int on = 0; on < 2; on++) {
        hpt_mem_record(mem, on);
        double t0 = hpt_now();
        for (int i = 0; i < n; i++) {
            if (on && i % chunk == 0) hpt_mem_record(mem, 1); /* reuse the buffer */
            hpt_mem_arena_event(mem, HPT_CAT_ACTS, 64, !(i & 1), "bench");
        }
        t[on] = hpt_now() - t0;
    }
    hpt_mem_record(mem, 0);
    return (t[1] - t[0]) / n * 1e9;
}

static int child(const char *data, int B, int T, int pairs, int threads) {
    uint64_t rss0 = hpt_rss_bytes();
    if (threads) hpt_set_threads(threads);
    hpt_mem *mem;
    if (hpt_mem_create(&mem) != HPT_OK) return 1;
    hpt_mem_record(mem, 1);
    hpt_train_opts o = hpt_train_defaults();
    o.model = "gpt2-124m";
    o.data = data;
    o.B = B;
    o.T = T;
    o.steps = 1 + 2 * pairs;
    o.eval_every = 0;
    hpt_trainer *tr;
    if (hpt_trainer_create(mem, &o, &tr) != HPT_OK) {
        fprintf(stderr, "bench_profile: %s\n", hpt_last_error());
        return 1;
    }
    hpt_train_progress p;
    if (hpt_trainer_step(tr, &p) != HPT_OK) return 1; /* warm-up: the arena, oneDNN's JIT */
    double *on = malloc((size_t)pairs * sizeof *on), *off = malloc((size_t)pairs * sizeof *off);
    size_t events_per_step = 0;
    for (int i = 0; i < pairs && on && off; i++) {
        for (int k = 0; k < 2; k++) {
            int rec = (i + k) % 2 == 0; /* on-off, off-on, ... */
            hpt_mem_record(mem, rec);
            if (hpt_trainer_step(tr, &p) != HPT_OK) return 1;
            if (rec) {
                on[i] = p.step_ms;
                hpt_mem_events(mem, &events_per_step);
            } else {
                off[i] = p.step_ms;
            }
        }
    }
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    uint64_t rss_peak = hpt_rss_peak_bytes();
    const hpt_model_config *cfg = hpt_model_get_config(hpt_trainer_model(tr));
    hpt_plan_opts po = hpt_plan_defaults();
    po.cfg = *cfg;
    po.B = B;
    po.T = T;
    po.training = 1;
    hpt_estimate est;
    uint64_t est_peak = hpt_plan_estimate(&po, &est) == HPT_OK ? est.peak_bytes[HPT_TIER_DEVICE] : 0;
    double *rel = malloc((size_t)pairs * sizeof *rel);
    if (!rel) return 1;
    for (int i = 0; i < pairs; i++) rel[i] = 100.0 * (on[i] - off[i]) / off[i];
    double timed = median(rel, pairs); /* the median of the pairs' relative differences */
    free(rel);
    double m_on = median(on, pairs), m_off = median(off, pairs);
    double ns = ns_per_event(mem);
    double counted = 100.0 * ns * 1e-9 * (double)events_per_step / (m_off * 1e-3);
    uint64_t acc = st.peak_bytes[HPT_TIER_DEVICE];
    double growth = rss_peak > rss0 ? (double)(rss_peak - rss0) : 0.0;
    char la[128];
    loadavg(la, sizeof la);
    printf("B=%d T=%-4d %10.1f MiB %10.1f MiB %10.1f MiB %8.1f%%   %8.1f / %8.1f   %+7.2f%% %9.4f%%   "
           "(%zu events/step, %.1f ns/event; load %s)\n",
           B, T, mib(est_peak), mib(acc), mib(rss_peak), growth > 0 ? 100.0 * (double)acc / growth : 0.0,
           m_off, m_on, timed, counted, events_per_step, ns, la);
    printf("{\"B\":%d,\"T\":%d,\"estimated_peak_bytes\":%llu,\"accounted_peak_bytes\":%llu,"
           "\"rss_peak_bytes\":%llu,\"rss_baseline_bytes\":%llu,\"rss_explained_pct\":%.2f,"
           "\"step_ms_off\":%.2f,\"step_ms_on\":%.2f,\"overhead_timed_pct\":%.3f,"
           "\"overhead_counted_pct\":%.5f,\"events_per_step\":%zu,\"ns_per_event\":%.2f,"
           "\"threads\":%d,\"pairs\":%d,\"loadavg\":\"%s\"}\n",
           B, T, (unsigned long long)est_peak, (unsigned long long)acc, (unsigned long long)rss_peak,
           (unsigned long long)rss0, growth > 0 ? 100.0 * (double)acc / growth : 0.0, m_off, m_on,
           timed, counted, events_per_step, ns, hpt_get_threads(), pairs, la);
    fflush(stdout);
    free(on);
    free(off);
    hpt_trainer_free(tr);
    hpt_mem_destroy(mem);
    return 0;
}

int main(int argc, char **argv) {
    int pairs = 5, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--child") && i + 4 < argc)
            return child(argv[i + 1], atoi(argv[i + 2]), atoi(argv[i + 3]), atoi(argv[i + 4]),
                         i + 5 < argc ? atoi(argv[i + 5]) : 0);
        if (!strcmp(argv[i], "--pairs") && i + 1 < argc) pairs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_profile [--pairs N] [--threads N]\n");
            return 2;
        }
    }
    if (pairs < 1) pairs = 1;
    /* random tokens for 124M's vocabulary, enough for every step of the largest config */
    char dir[] = "/tmp/hpt_bench_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char data[64];
    snprintf(data, sizeof data, "%s/train_000000.bin", dir);
    size_t ntok = (size_t)4 * 256 * (2 * (size_t)pairs + 2) + 1;
    uint16_t *tok = malloc(ntok * sizeof *tok);
    if (!tok) return 1;
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < ntok; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (uint16_t)(x % 50257);
    }
    if (hpt_shard_write(data, tok, ntok) != HPT_OK) {
        fprintf(stderr, "bench_profile: %s\n", hpt_last_error());
        return 1;
    }
    free(tok);
    char la[128];
    loadavg(la, sizeof la);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("bench_profile: GPT-2 124M (random weights), AdamW, %d interleaved pairs of steps with "
           "recording on/off per config; %ld cores, load average at start: %s\n", pairs, cores, la);
    printf("%-10s %14s %14s %14s %9s   %-19s   %8s %10s\n", "config", "estimated", "accounted",
           "RSS peak", "RSS expl.", "step ms off / on", "timed", "counted");
    static const int Ts[] = {64, 256};
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        char sB[16], sT[16], sP[16], sJ[16];
        snprintf(sB, sizeof sB, "%d", 4);
        snprintf(sT, sizeof sT, "%d", Ts[k]);
        snprintf(sP, sizeof sP, "%d", Ts[k] > 64 ? (pairs + 1) / 2 : pairs);
        snprintf(sJ, sizeof sJ, "%d", threads);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            char *args[] = {argv[0], "--child", data, sB, sT, sP, sJ, NULL};
            execv("/proc/self/exe", args);
            _exit(127);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) rc = 1;
    }
    unlink(data);
    rmdir(dir);
    printf("(estimated: hpt_plan_estimate; accounted: hpt_mem's device peak; RSS expl.: accounted "
           "peak / (RSS peak - RSS at the child's start); timed: median over interleaved pairs of (on - off) / "
           "off; counted: ns per event x events per step / median step time. Goal: < 1%%.)\n");
    return rc;
}
