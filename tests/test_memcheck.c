/* test_memcheck.c: a memory check that is not circular. The estimate == measured tests compare
 * the planner with the allocator, which share the planner's tables; this test compares each
 * with something outside them.
 *   (a) A closed-form count of one GPT-2 block's activation bytes, written here from the
 *       model's equations, against the planner's per-layer growth: the arena bytes of an
 *       L+1-layer model minus those of the L-layer model (the embeddings, the head and the
 *       backward scratch cancel). Several shapes, flash and plain attention, recompute none
 *       and full. Shapes are chosen so every buffer is a multiple of 64 bytes (the arena's
 *       alignment), so the counts are equal, not close.
 *   (b) The operating system's view: after the first training step of a model whose tensors
 *       dominate, the bytes the memory manager accounts explain at least 95% of the process's
 *       RSS growth since before the trainer was created (hpt_mem_alloc zero-fills every block,
 *       so its pages are resident), and the accounting does not claim more than is resident.
 *       Not under the sanitizers: their shadow memory and quarantine are RSS the program never
 *       asked for.
 *   (c) The long-context plan's device bytes a token for a Llama block (recompute full, a tiled
 *       MLP, a chunked head, checkpoints offloaded to the host), written here from what the
 *       MLP's backward of one block holds, against the planner's growth from T to 2T; and the
 *       host's, L block inputs (docs/activations.md, "Growth with T"). */
#include "testlib.h"

#include <string.h>

/* One block's activation floats at (B, T), C channels, NH heads, from the equations:
 *   ln1 = layernorm(x)           ln1 (B,T,C), mean and rstd (B,T) each
 *   qkv = ln1 @ Wqkv^T + b       (B,T,3C)
 *   atty = attention(qkv)        (B,T,C); flash keeps the log-sum-exp (B,NH,T), plain keeps
 *                                the probabilities (B,NH,T,T)
 *   res2 = x + atty @ Wp^T + b   (B,T,C)
 *   ln2 = layernorm(res2)        (B,T,C), mean and rstd (B,T) each
 *   fch = ln2 @ Wfc^T + b        (B,T,4C)
 *   fch_gelu = gelu(fch)         (B,T,4C)
 *   res3 = res2 + fch_gelu @ Wp2^T + b   (B,T,C): the block's output, the next block's input
 * Recompute none keeps all of it until the block's backward: B*T*(16C + 4) + the attention's
 * part. Recompute full keeps only each block's input (B,T,C); the rerun block's activations
 * live once, whatever L. */
static uint64_t block_floats(int64_t B, int64_t T, int64_t C, int64_t NH, int flash, int full) {
    if (full) return (uint64_t)(B * T * C);
    int64_t per_token = C + 1 + 1      /* ln1, its mean and rstd */
                        + 3 * C        /* qkv */
                        + C            /* atty */
                        + C            /* res2 */
                        + C + 1 + 1    /* ln2, its mean and rstd */
                        + 4 * C        /* fch */
                        + 4 * C        /* fch_gelu */
                        + C;           /* res3 */
    int64_t attn = flash ? B * NH * T : B * NH * T * T;
    return (uint64_t)(B * T * per_token + attn);
}

static uint64_t planned_device_bytes(int L, int C, int NH, int B, int T, int flash, int full) {
    char shape[128];
    snprintf(shape, sizeof shape, "gpt2:L=%d,C=%d,NH=%d,V=250,T=%d", L, C, NH, T);
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(shape, &cfg));
    hpt_act_opts o = hpt_act_defaults();
    o.attention = flash ? HPT_ATTN_FLASH : HPT_ATTN_PLAIN;
    o.recompute = full ? HPT_RECOMPUTE_FULL : HPT_RECOMPUTE_NONE;
    o.every = 1;
    uint64_t by_tier[HPT_TIER_COUNT] = {0};
    CHECK_OK(hpt_model_act_tier_bytes(&cfg, B, T, &o, by_tier));
    return by_tier[HPT_TIER_DEVICE];
}

static void test_closed_form(void) {
    /* B, T, C, NH: B*T and B*NH*T multiples of 16 */
    static const int shapes[][4] = {{2, 8, 64, 4}, {4, 16, 128, 8}, {1, 32, 96, 2},
                                    {2, 16, 48, 3}, {1, 64, 256, 4}};
    printf("(a) activation bytes per layer: closed form vs the planner's growth from L to L+1\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int flash = 1; flash >= 0; flash--)
            for (int full = 0; full <= 1; full++) {
                int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
                uint64_t want = 4 * block_floats(B, T, C, NH, flash, full);
                for (int L = 1; L <= 3; L += 2) {
                    uint64_t a = planned_device_bytes(L, C, NH, B, T, flash, full);
                    uint64_t b = planned_device_bytes(L + 1, C, NH, B, T, flash, full);
                    CHECK_MSG(b - a == want, "B=%d T=%d C=%d NH=%d %s %s L=%d->%d: planner "
                              "grows %llu bytes, the equations say %llu", B, T, C, NH,
                              flash ? "flash" : "plain", full ? "full" : "none", L, L + 1,
                              (unsigned long long)(b - a), (unsigned long long)want);
                }
                printf("  B=%d T=%-2d C=%-3d NH=%d %-5s recompute %-4s  %8llu bytes per layer\n",
                       B, T, C, NH, flash ? "flash" : "plain", full ? "full" : "none",
                       (unsigned long long)want);
            }
}

/* Under --recompute full --mlp-tile N --head-chunk N --act-offload host, at T past the tile's
 * floor, the peak is one block's MLP backward, which holds, a token: six (C) rows (ln2, which
 * receives dln2, in ln1's buffer; res2; atty; the residual gradient; the block's input and the
 * one prefetched), qkv and its gradient (QKV each), flash's log-sum-exp and its backward's row
 * term (NH each), the two norms' rstd and the input token: 6 C + 2 QKV + 2 NH + 3 floats. */
static void test_long_context(void) {
    const int L = 3, C = 64, NH = 4, NKV = 2, QKV = C + 2 * NKV * (C / NH), T1 = 512;
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse("llama:L=3,C=64,NH=4,NKV=2,FF=96,V=256,T=2048", &cfg));
    hpt_act_opts o = hpt_act_defaults();
    o.recompute = HPT_RECOMPUTE_FULL;
    o.every = 1;
    o.mlp_tile = 16;
    o.head_chunk = 16;
    o.offload = HPT_OFFLOAD_HOST;
    uint64_t a[HPT_TIER_COUNT], b[HPT_TIER_COUNT];
    CHECK_OK(hpt_model_act_tier_bytes(&cfg, 1, T1, &o, a));
    CHECK_OK(hpt_model_act_tier_bytes(&cfg, 1, 2 * T1, &o, b));
    uint64_t want = 4 * (uint64_t)(6 * C + 2 * QKV + 2 * NH + 3) * (uint64_t)T1;
    CHECK_MSG(b[HPT_TIER_DEVICE] - a[HPT_TIER_DEVICE] == want, "long context: device grows %llu "
              "bytes from T %d to %d, the equations say %llu",
              (unsigned long long)(b[HPT_TIER_DEVICE] - a[HPT_TIER_DEVICE]), T1, 2 * T1,
              (unsigned long long)want);
    CHECK_MSG(b[HPT_TIER_HOST] - a[HPT_TIER_HOST] == 4 * (uint64_t)L * C * T1,
              "long context: host grows %llu bytes, L block inputs say %llu",
              (unsigned long long)(b[HPT_TIER_HOST] - a[HPT_TIER_HOST]),
              (unsigned long long)(4 * (uint64_t)L * C * T1));
    printf("(c) long-context Llama block: %llu device bytes a token (6 C + 2 QKV + 2 NH + 3 "
           "floats), %d host\n", (unsigned long long)(want / (uint64_t)T1), 4 * L * C);
}

#ifndef HPT_SANITIZED
static uint64_t accounted(const hpt_mem_stats *st, int peak) {
    uint64_t n = 0;
    for (int t = 0; t < HPT_TIER_COUNT; t++) {
        if (t == HPT_TIER_DISK) continue; /* files, not resident memory */
        if (peak) n += st->peak_bytes[t];
        else
            for (int c = 0; c < HPT_CAT_COUNT; c++) n += st->live_bytes[t][c];
    }
    return n;
}

#endif

static void test_rss(void) {
#ifdef HPT_SANITIZED
    printf("(b) RSS check: skipped under the sanitizers (shadow memory is RSS too)\n");
#else
    char train[512];
    t_make_shards(77, 200, 5, 11, 20000, 0, train, NULL);
    hpt_train_opts o = t_train_opts("gpt2:L=8,C=512,NH=8,V=256,T=64", train, 4, 64, 2, 0);
    o.val = NULL;
    o.eval_every = 0;
    uint64_t rss0 = hpt_rss_bytes();
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_trainer *tr = NULL;
    CHECK_OK(hpt_trainer_create(mem, &o, &tr));
    if (!tr) return;
    hpt_train_progress p;
    CHECK_OK(hpt_trainer_step(tr, &p));
    uint64_t rss1 = hpt_rss_bytes(), rss_peak = hpt_rss_peak_bytes();
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    uint64_t live = accounted(&st, 0), peak = accounted(&st, 1);
    double grow = (double)(rss1 - rss0), grow_peak = (double)(rss_peak - rss0);
    printf("(b) gpt2:L=8,C=512 B=4 T=64, one AdamW step: RSS %.1f -> %.1f MiB (peak %.1f); "
           "accounted live %.1f MiB = %.1f%% of the RSS growth, accounted peak %.1f MiB = "
           "%.1f%% of the peak RSS growth\n", (double)rss0 / 1048576.0, (double)rss1 / 1048576.0,
           (double)rss_peak / 1048576.0, (double)live / 1048576.0, 100.0 * (double)live / grow,
           (double)peak / 1048576.0, 100.0 * (double)peak / grow_peak);
    CHECK_MSG(rss1 > rss0 && (double)live >= 0.95 * grow, "the accounting explains %.1f%% of "
              "the RSS growth", 100.0 * (double)live / grow);
    CHECK_MSG((double)live <= 1.01 * grow, "accounted %.1f MiB but only %.1f MiB became "
              "resident", (double)live / 1048576.0, grow / 1048576.0);
    CHECK_MSG((double)peak >= 0.95 * grow_peak && (double)peak <= 1.01 * grow_peak,
              "accounted peak %.1f MiB vs peak RSS growth %.1f MiB", (double)peak / 1048576.0,
              grow_peak / 1048576.0);
    hpt_trainer_free(tr);
    hpt_mem_destroy(mem);
#endif
}

int main(void) {
    hpt_set_threads(2);
    test_rss(); /* first: the process's peak RSS is still its baseline */
    test_closed_form();
    test_long_context();
    return t_done("test_memcheck");
}
