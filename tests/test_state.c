/* test_state.c ARCH: training-state and llm.c checkpoint round trips, exact resume, and clear
 * errors for corrupt, truncated, wrong-version and missing files; data-shard errors. The
 * training state on the architecture's case (arch_cases.h), llm.c's checkpoints where the case
 * has that format, the shards once, in the first case's run. */
#include "testlib.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VOCAB 64

static char g_train[512], g_val[512];
static char SHAPE[T_SHAPE_MAX];

static void make_shards(void) {
    t_make_shards(12345, 17, 3, 7, 2500, 500, g_train, g_val);
}

static hpt_train_opts opts(const char *save, const char *resume) {
    hpt_train_opts o = t_train_opts(SHAPE, g_train, 2, 16, 12, 3);
    o.val = g_val;
    o.eval_every = 4;
    o.val_batches = 2;
    o.save_dir = save;
    o.resume = resume;
    return o;
}


static void test_resume_exact(hpt_mem *mem) {
    char dir_a[512], dir_b[512];
    snprintf(dir_a, sizeof dir_a, "%s/run_a", t_tmpdir());
    snprintf(dir_b, sizeof dir_b, "%s/run_b", t_tmpdir());
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse(SHAPE, &cfg));
    size_t n = hpt_model_config_num_params(&cfg);
    float la[12] = {0}, va[12] = {0}, lb[12] = {0}, vb[12] = {0};
    float *pa = calloc(n, sizeof(float)), *pb = calloc(n, sizeof(float));
    hpt_train_opts oa = opts(dir_a, NULL), ob = opts(dir_b, NULL);
    t_train_run(mem, &oa, 12, la, va, pa);                   /* uninterrupted */
    t_train_run(mem, &ob, 5, lb, vb, NULL);                  /* stops after step 5, saves */
    hpt_train_opts oc = opts(dir_b, dir_b);
    t_train_run(mem, &oc, 12, lb, vb, pb);                   /* resumes at 5, runs to 12 */
    int same = 1;
    for (int i = 0; i < 12; i++) {
        if (memcmp(&la[i], &lb[i], 4) != 0 || memcmp(&va[i], &vb[i], 4) != 0) same = 0;
        printf("  step %2d loss %.7f / resumed %.7f  val %.7f / %.7f\n", i + 1, (double)la[i],
               (double)lb[i], (double)va[i], (double)vb[i]);
    }
    CHECK_MSG(same, "resumed run's losses differ from the uninterrupted run's");
    CHECK_MSG(memcmp(pa, pb, n * sizeof(float)) == 0, "final weights differ after resume");
    /* it trained: 12 small steps take each family's loss down by 0.18 to 0.26 (one batch's
     * loss, noisy by a few hundredths) */
    CHECK(la[11] < la[0] - 0.15f);
    free(pa);
    free(pb);
}

static void corrupt_copy(const char *src, const char *dst, long flip_at, long truncate_to,
                         int set_version) {
    FILE *f = fopen(src, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n);
    if (fread(b, 1, (size_t)n, f) != (size_t)n) abort();
    fclose(f);
    if (flip_at >= 0) b[flip_at] ^= 0x40;
    if (set_version) { uint32_t v = (uint32_t)set_version; memcpy(b + 8, &v, 4); }
    FILE *g = fopen(dst, "wb");
    fwrite(b, 1, truncate_to >= 0 ? (size_t)truncate_to : (size_t)n, g);
    fclose(g);
    free(b);
}

static void test_state_errors(hpt_mem *mem) {
    char good[512], bad[512];
    t_tmp_state_file(good, sizeof good, "run_a");
    snprintf(bad, sizeof bad, "%s/bad_state.bin", t_tmpdir());
    hpt_model *m;
    hpt_optim *o;
    hpt_adamw_opts ao;
    hpt_train_pos pos;
    CHECK_OK(hpt_state_load(good, mem, &m, &o, &ao, &pos));
    CHECK(pos.step == 12 && pos.B == 2 && pos.T == 16 && hpt_optim_get_t(o) == 12);
    /* round trip: save what was loaded, reload, compare everything */
    char again[512];
    snprintf(again, sizeof again, "%s/again.bin", t_tmpdir());
    CHECK_OK(hpt_state_save(again, m, o, &ao, &pos));
    hpt_model *m2;
    hpt_optim *o2;
    hpt_adamw_opts ao2;
    hpt_train_pos pos2;
    CHECK_OK(hpt_state_load(again, mem, &m2, &o2, &ao2, &pos2));
    size_t n = hpt_model_num_params(m);
    CHECK(memcmp(hpt_model_params(m), hpt_model_params(m2), n * 4) == 0);
    CHECK(memcmp(hpt_optim_m(o), hpt_optim_m(o2), n * 4) == 0);
    CHECK(memcmp(hpt_optim_v(o), hpt_optim_v(o2), n * 4) == 0);
    CHECK(memcmp(&pos, &pos2, sizeof pos) == 0 && memcmp(&ao, &ao2, sizeof ao) == 0);
    hpt_optim_free(o2);
    hpt_model_free(m2);
    /* a failed save (directory missing) reports an I/O error and leaves nothing behind */
    char nodir[512];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/state.bin", t_tmpdir());
    CHECK_STATUS(hpt_state_save(nodir, m, o, &ao, &pos), HPT_ERR_IO);
    hpt_optim_free(o);
    hpt_model_free(m);

    struct stat st;
    stat(good, &st);
    long size = (long)st.st_size;
    corrupt_copy(good, bad, size / 2, -1, 0); /* a flipped bit inside the weights */
    CHECK_STATUS(hpt_state_load(bad, mem, &m, &o, &ao, &pos), HPT_ERR_CHECKSUM);
    CHECK(strstr(hpt_last_error(), "checksum") != NULL);
    corrupt_copy(good, bad, -1, size - 100, 0);
    CHECK_STATUS(hpt_state_load(bad, mem, &m, &o, &ao, &pos), HPT_ERR_FORMAT);
    CHECK(strstr(hpt_last_error(), "truncated") != NULL);
    corrupt_copy(good, bad, -1, 20, 0);
    CHECK_STATUS(hpt_state_load(bad, mem, &m, &o, &ao, &pos), HPT_ERR_FORMAT);
    corrupt_copy(good, bad, -1, -1, 99);
    CHECK_STATUS(hpt_state_load(bad, mem, &m, &o, &ao, &pos), HPT_ERR_FORMAT);
    CHECK(strstr(hpt_last_error(), "version 99") != NULL);
    corrupt_copy(good, bad, 0, -1, 0);
    CHECK_STATUS(hpt_state_load(bad, mem, &m, &o, &ao, &pos), HPT_ERR_FORMAT);
    CHECK(m == NULL && o == NULL);
    snprintf(bad, sizeof bad, "%s/missing.bin", t_tmpdir());
    CHECK_STATUS(hpt_state_load(bad, mem, &m, &o, &ao, &pos), HPT_ERR_IO);
    /* the good file is untouched by all of this */
    CHECK_OK(hpt_state_load(good, mem, &m, &o, &ao, &pos));
    hpt_optim_free(o);
    hpt_model_free(m);
}

static void test_checkpoint(hpt_mem *mem) {
    char path[512], bad[512];
    snprintf(path, sizeof path, "%s/run_a/model.bin", t_tmpdir());
    snprintf(bad, sizeof bad, "%s/bad_model.bin", t_tmpdir());
    hpt_model *m, *m2 = NULL;
    CHECK_OK(hpt_model_load(mem, path, &m));
    size_t n = hpt_model_num_params(m);
    /* version 5 (bf16): the same weights rounded toward zero to bf16 */
    FILE *f = fopen(bad, "wb");
    const hpt_model_config *c = hpt_model_get_config(m);
    int32_t h[256] = {20240326, 5, c->maxT, c->V, c->L, c->NH, c->C, c->Vp};
    fwrite(h, 4, 256, f);
    const float *p = hpt_model_params(m);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        uint16_t b = (uint16_t)(u >> 16);
        fwrite(&b, 2, 1, f);
    }
    fclose(f);
    CHECK_OK(hpt_model_load(mem, bad, &m2));
    if (m2) {
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)hpt_model_params(m2)[i] - (double)p[i]);
            double r = d / (fabs((double)p[i]) + 1e-30);
            if (p[i] != 0.0f && r > worst) worst = r;
        }
        CHECK_MSG(worst < 1.0 / 128, "bf16 load error %g", worst); /* 8 significant bits */
        hpt_model_free(m2);
    }
    /* the llm.c file round trip is exact */
    char again[512];
    snprintf(again, sizeof again, "%s/again_model.bin", t_tmpdir());
    CHECK_OK(hpt_model_save(m, again));
    CHECK_OK(hpt_model_load(mem, again, &m2));
    if (m2) {
        CHECK(memcmp(hpt_model_params(m), hpt_model_params(m2), n * 4) == 0);
        hpt_model_free(m2);
    }
    hpt_model_free(m);
    struct stat st;
    stat(path, &st);
    corrupt_copy(path, bad, -1, (long)st.st_size - 4, 0);
    CHECK_STATUS(hpt_model_load(mem, bad, &m2), HPT_ERR_FORMAT);
    corrupt_copy(path, bad, 0, -1, 0);
    CHECK_STATUS(hpt_model_load(mem, bad, &m2), HPT_ERR_FORMAT);
    CHECK(strstr(hpt_last_error(), "magic") != NULL);
    int32_t seven = 7;
    corrupt_copy(path, bad, -1, -1, 0);
    f = fopen(bad, "r+b");
    fseek(f, 4, SEEK_SET);
    fwrite(&seven, 4, 1, f);
    fclose(f);
    CHECK_STATUS(hpt_model_load(mem, bad, &m2), HPT_ERR_FORMAT);
    CHECK(strstr(hpt_last_error(), "version 7") != NULL);
    CHECK_STATUS(hpt_model_load(mem, "/nonexistent/model.bin", &m2), HPT_ERR_IO);
}

static void test_shards(hpt_mem *mem) {
    hpt_dataloader *d;
    char bad[512];
    snprintf(bad, sizeof bad, "%s/bad_shard.bin", t_tmpdir());
    corrupt_copy(g_train, bad, -1, 1024 + 100, 0); /* truncated: header says 2500 tokens */
    CHECK_STATUS(hpt_dataloader_open(mem, bad, 2, 16, VOCAB, &d), HPT_ERR_FORMAT);
    corrupt_copy(g_train, bad, 1, -1, 0);
    CHECK_STATUS(hpt_dataloader_open(mem, bad, 2, 16, VOCAB, &d), HPT_ERR_FORMAT);
    CHECK_STATUS(hpt_dataloader_open(mem, "/nonexistent/*.bin", 2, 16, VOCAB, &d), HPT_ERR_IO);
    CHECK_STATUS(hpt_dataloader_open(mem, g_train, 200, 16, VOCAB, &d), HPT_ERR_INVALID); /* too small */
    /* token ids must be below the vocabulary */
    CHECK_OK(hpt_dataloader_open(mem, g_train, 2, 16, 10, &d));
    const int32_t *x, *y;
    CHECK_STATUS(hpt_dataloader_next(d, &x, &y), HPT_ERR_FORMAT);
    hpt_dataloader_free(d);
    /* batches are consecutive windows; the position restores exactly */
    CHECK_OK(hpt_dataloader_open(mem, g_train, 2, 16, VOCAB, &d));
    int32_t first[32];
    CHECK_OK(hpt_dataloader_next(d, &x, &y));
    memcpy(first, x, sizeof first);
    CHECK(x[1] == y[0] && x[31] == y[30]);
    int64_t sh, off;
    hpt_dataloader_get_pos(d, &sh, &off);
    CHECK(sh == 0 && off == 32);
    CHECK_OK(hpt_dataloader_set_pos(d, 0, 0));
    CHECK_OK(hpt_dataloader_next(d, &x, &y));
    CHECK(memcmp(first, x, sizeof first) == 0);
    CHECK_STATUS(hpt_dataloader_set_pos(d, 3, 0), HPT_ERR_INVALID);
    hpt_dataloader_free(d);
}

int main(int argc, char **argv) {
    const t_arch *a = t_arch_arg(argc, argv, "test_state");
    if (!a) return 2;
    t_arch_shape(a, SHAPE, 2, 32, 4, VOCAB, 16, 0);
    printf("%s\n", SHAPE);
    hpt_set_threads(2);
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    make_shards();
    test_resume_exact(mem);
    test_state_errors(mem);
    if (a->llmc) test_checkpoint(mem);
    if (t_arch_first(a)) test_shards(mem);
    uint64_t live = t_device_live(mem);
    CHECK_MSG(live == 0, "%llu bytes still live", (unsigned long long)live);
    hpt_mem_destroy(mem);
    return t_done(t_arch_label(a, "test_state"));
}
