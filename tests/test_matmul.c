/* test_matmul.c: --matmul bf16 (docs/design.md, "Matmul precision"): every linear layer's GEMM
 * and flash attention's products with their two operands rounded to bf16 and fp32 sums, against
 * PyTorch. The attention pair alone first (check_attn), then the models.
 *
 * PyTorch (GPT-2 and Llama; tests/make_ref_matmul.py, the fixture make_ref_matmul): the packed
 * batch of make_ref_pack.py with every linear layer through out = bf16(x) bf16(w)^T + b, its
 * backward dx = bf16(dout) bf16(w), dw = bf16(dout)^T bf16(x), torch's .bfloat16().float()
 * rounding: the loss within LOSS_BOUND and the gradients within GRAD_BOUND (norm-wise relative),
 * on both CPU paths of the bf16 GEMM (oneDNN's bf16 matmul where this CPU has it, and the
 * reference: rounded fp32 panels and sgemm, forced by kernels/cpu/gemm.h's hook); the fp32 model
 * on the same reference is at least DISCRIM x further away (the reference tells the two apart);
 * HPT_TEST_VERBOSE=1 prints each tensor's error. With --recompute full the bf16 model's loss and
 * gradients are the same bits (recomputation stays exact).
 * Trainer (GPT-2 and Llama): 4 steps with --matmul bf16, the estimate equal to the measured
 * peak on every tier (the 8 MiB workspace included), losses within 1e-3 of the fp32 run's. */
#include "testlib.h"

#include "core/core.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The loss within 1e-5. The gradients within 2e-3 norm-wise: a bf16-operand model is
 * discontinuous (a last-bit difference before a rounding moves a value by a whole bf16 step, and
 * the backward compounds these), so two correct implementations differ far beyond fp32's
 * rounding: PyTorch against itself with fp64 sums in the linear layers moves the gradients by
 * 4.0e-5 (GPT-2) and 4.8e-4 (Llama) (make_ref_matmul.py --spread; 2.3e-4 for GPT-2 before
 * attention's products were rounded too), and hptrain's two paths, whose every GEMM agrees
 * within 4e-7, differ by up to 6.5e-4 on Llama (docs/design.md, "Matmul precision"). The fp32 model must be at
 * least DISCRIM x further from the bf16 reference than the bf16 model. */
#define LOSS_BOUND 1e-5
#define GRAD_BOUND 2e-3
#define DISCRIM 4.0

static void check_torch(const char *arch) {
    char path[600];
    snprintf(path, sizeof path, "%s/matmul_%s.bin", t_ref_dir(), arch);
    size_t len;
    unsigned char *f = t_read_file(path, &len);
    CHECK_MSG(f != NULL, "%s is missing (tests/make_ref_matmul.py: the fixture make_ref_matmul)",
              path);
    if (!f) return;
    int32_t h[256];
    memcpy(h, f, sizeof h);
    const int B = h[3], T = h[4];
    const size_t n = (size_t)h[5], BT = (size_t)B * T;
    CHECK(h[0] == 20261129 && len == 1024 + 128 + 3 * BT * 4 + 2 * n * 4 + 4);
    if (h[0] != 20261129 || len != 1024 + 128 + 3 * BT * 4 + 2 * n * 4 + 4) {
        free(f);
        return;
    }
    char shape[129] = {0};
    memcpy(shape, f + 1024, 128);
    const unsigned char *p = f + 1024 + 128;
    const int32_t *x = (const int32_t *)p, *y = x + BT, *pos = y + BT;
    const float *params = (const float *)(pos + BT), *loss_p = params + n, *grads = loss_p + 1;
    const double loss_ref = *loss_p;
    /* 0: --matmul fp32 (the discrimination check); 1: bf16, native path; 2: bf16, reference */
    double el[3] = {0}, eg[3] = {0};
    for (int run = 0; run < 3; run++) {
        if (run == 1 && !k_gemm_bf16_native()) {
            printf("  %s: no native bf16 GEMM on this CPU (or HPT_GEMM_BF16=ref): the reference "
                   "path only\n", arch);
            continue;
        }
        int prev = k_gemm_bf16_force_ref(run == 2);
        hpt_mem *mem;
        CHECK_OK(hpt_mem_create(&mem));
        hpt_model_config cfg;
        CHECK_OK(hpt_model_config_parse(shape, &cfg));
        hpt_model *m;
        CHECK_OK(hpt_model_create_config(mem, &cfg, &m));
        hpt_act_opts ao = hpt_act_defaults();
        ao.matmul = run ? HPT_MATMUL_BF16 : HPT_MATMUL_FP32;
        CHECK_OK(hpt_model_set_act_opts(m, &ao));
        CHECK(hpt_model_num_params(m) == n);
        if (hpt_model_num_params(m) == n) {
            memcpy(hpt_model_params(m), params, n * 4);
            float loss;
            CHECK_OK(hpt_model_set_positions(m, pos, B, T));
            CHECK_OK(hpt_model_forward(m, x, y, B, T, &loss));
            hpt_model_zero_grad(m);
            CHECK_OK(hpt_model_backward(m));
            el[run] = fabs((double)loss - loss_ref) / fabs(loss_ref);
            eg[run] = t_rel_err(hpt_model_grads(m), grads, n);
            printf("  %s, --matmul %s%s: loss %.7f vs PyTorch's bf16-operand %.7f (rel %.1e), "
                   "gradients rel %.1e\n", arch, run ? "bf16" : "fp32",
                   run == 1 ? " (oneDNN bf16 matmul)" : run == 2 ? " (reference path)" : "",
                   (double)loss, loss_ref, el[run], eg[run]);
            if (getenv("HPT_TEST_VERBOSE")) {
                t_tensor tt[T_MAX_TENSORS];
                int nt = t_tensors_of(&cfg, tt, NULL);
                for (int i = 0; i < nt; i++)
                    printf("    %-12s rel %.1e\n", tt[i].name,
                           t_rel_err(hpt_model_grads(m) + tt[i].offset, grads + tt[i].offset,
                                     tt[i].numel));
            }
            if (run)
                CHECK_MSG(el[run] <= LOSS_BOUND && eg[run] <= GRAD_BOUND,
                          "%s --matmul bf16 path %d vs PyTorch: loss %.3g gradients %.3g", arch,
                          run, el[run], eg[run]);
        }
        hpt_model_free(m);
        hpt_mem_destroy(mem);
        k_gemm_bf16_force_ref(prev);
    }
    /* recomputation stays exact with --matmul bf16: full recomputation reruns each block's
     * forward (the bf16 attention pair included) and gives the same gradients, bit for bit */
    {
        float *g[2] = {NULL, NULL};
        float loss[2] = {0.0f, 0.0f};
        for (int rc = 0; rc < 2; rc++) {
            hpt_mem *mem;
            CHECK_OK(hpt_mem_create(&mem));
            hpt_model_config cfg;
            CHECK_OK(hpt_model_config_parse(shape, &cfg));
            hpt_model *m;
            CHECK_OK(hpt_model_create_config(mem, &cfg, &m));
            hpt_act_opts ao = hpt_act_defaults();
            ao.matmul = HPT_MATMUL_BF16;
            ao.recompute = rc ? HPT_RECOMPUTE_FULL : HPT_RECOMPUTE_NONE;
            CHECK_OK(hpt_model_set_act_opts(m, &ao));
            if (hpt_model_num_params(m) == n) {
                memcpy(hpt_model_params(m), params, n * 4);
                CHECK_OK(hpt_model_set_positions(m, pos, B, T));
                CHECK_OK(hpt_model_forward(m, x, y, B, T, &loss[rc]));
                hpt_model_zero_grad(m);
                CHECK_OK(hpt_model_backward(m));
                g[rc] = malloc(n * 4);
                memcpy(g[rc], hpt_model_grads(m), n * 4);
            }
            hpt_model_free(m);
            hpt_mem_destroy(mem);
        }
        const int same = g[0] && g[1] && loss[0] == loss[1] && !memcmp(g[0], g[1], n * 4);
        CHECK_MSG(same, "%s --matmul bf16: --recompute full changed the loss or gradients", arch);
        printf("  %s, --matmul bf16: --recompute full gives the same loss and gradients, bit for "
               "bit: %s\n", arch, same ? "yes" : "no");
        free(g[0]), free(g[1]);
    }
    for (int run = 1; run < 3; run++)
        if (eg[run] > 0.0)
            CHECK_MSG(eg[0] >= DISCRIM * eg[run], "%s: the fp32 model's gradients (rel %.3g) are "
                      "not %g x further from the bf16 reference than path %d's (%.3g)", arch,
                      eg[0], DISCRIM, run, eg[run]);
    free(f);
}

/* The flash pair with bf16 operands alone (tests/make_ref_matmul.py's matmul_attn.bin: causal,
 * grouped-query, T over several key tiles of 64, heads of 64, 128 and 32) against PyTorch's
 * Bf16Flash: out, lse and dqkv norm-wise within ATTN_BOUND; the fp32 pair on the same inputs
 * is at least DISCRIM x further. The same bf16 operands, so only the fp32 sums' order and expf
 * differ, but a P or dS whose rounding flips with them moves by a whole bf16 step: PyTorch
 * against itself with fp64 sums moves dqkv by up to 2.9e-5 and out by up to 1.6e-5 on these
 * cases (make_ref_matmul.py --spread), so the bound is 5e-5, not fp32's 1e-6. */
#define ATTN_BOUND 5e-5
static void check_attn(void) {
    char path[600];
    snprintf(path, sizeof path, "%s/matmul_attn.bin", t_ref_dir());
    size_t len;
    unsigned char *f = t_read_file(path, &len);
    CHECK_MSG(f != NULL, "%s is missing (tests/make_ref_matmul.py)", path);
    if (!f) return;
    int32_t h[256];
    memcpy(h, f, sizeof h);
    CHECK(h[0] == 20261130);
    const hpt_backend *be = hpt_backend_cpu();
    size_t off = 1024;
    for (int c = 0; h[0] == 20261130 && c < h[1]; c++) {
        int32_t d[8];
        CHECK(off + sizeof d <= len);
        if (off + sizeof d > len) break;
        memcpy(d, f + off, sizeof d);
        off += sizeof d;
        const int B = d[0], T = d[1], NH = d[2], NKV = d[3], hd = d[4], C = NH * hd;
        const size_t nq = (size_t)B * T * (NH + 2 * NKV) * hd, no = (size_t)B * T * C,
                     nl = (size_t)B * NH * T;
        CHECK(off + (2 * nq + 2 * no + nl) * 4 <= len);
        if (off + (2 * nq + 2 * no + nl) * 4 > len) break;
        const float *qkv = (const float *)(f + off), *dout = qkv + nq, *out_ref = dout + no,
                    *lse_ref = out_ref + no, *dqkv_ref = lse_ref + nl;
        off += (2 * nq + 2 * no + nl) * 4;
        float *out = malloc(no * 4), *lse = malloc(nl * 4), *dqkv = malloc(nq * 4),
              *scr = malloc(nl * 4);
        double e[2][3];
        for (int bf = 1; bf >= 0; bf--) {
            if (bf) {
                be->flash_attention_forward_bf16(out, lse, qkv, B, T, C, NH, NKV, NULL, 0);
                be->flash_attention_backward_bf16(dqkv, scr, dout, qkv, out, lse, B, T, C, NH,
                                                  NKV, NULL, 0);
            } else {
                be->flash_attention_forward(out, lse, qkv, B, T, C, NH, NKV);
                be->flash_attention_backward(dqkv, scr, dout, qkv, out, lse, B, T, C, NH, NKV);
            }
            e[bf][0] = t_rel_err(out, out_ref, no);
            e[bf][1] = t_rel_err(lse, lse_ref, nl);
            e[bf][2] = t_rel_err(dqkv, dqkv_ref, nq);
        }
        printf("  attention B=%d T=%d NH=%d NKV=%d hd=%d: bf16 pair vs PyTorch out %.1e lse "
               "%.1e dqkv %.1e (rel, norm-wise); the fp32 pair %.1e %.1e %.1e\n", B, T, NH, NKV,
               hd, e[1][0], e[1][1], e[1][2], e[0][0], e[0][1], e[0][2]);
        CHECK_MSG(e[1][0] <= ATTN_BOUND && e[1][1] <= ATTN_BOUND && e[1][2] <= ATTN_BOUND,
                  "bf16 flash attention hd=%d vs PyTorch: out %.3g lse %.3g dqkv %.3g", hd,
                  e[1][0], e[1][1], e[1][2]);
        CHECK_MSG(e[0][0] >= DISCRIM * e[1][0] && e[0][2] >= DISCRIM * e[1][2],
                  "hd=%d: the fp32 pair (out %.3g, dqkv %.3g) is not %g x further than the bf16 "
                  "pair", hd, e[0][0], e[0][2], DISCRIM);
        free(out), free(lse), free(dqkv), free(scr);
    }
    free(f);
}

/* What --matmul bf16 refuses, each with its one line: plain attention (no bf16 rule), and heads
 * wider than the backend's bf16 flash pair (the CPU's: 256) */
static void check_refusals(void) {
    hpt_act_opts ao = hpt_act_defaults();
    ao.matmul = HPT_MATMUL_BF16;
    ao.attention = HPT_ATTN_PLAIN;
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_model_config cfg;
    CHECK_OK(hpt_model_config_parse("gpt2:L=1,C=64,NH=4,V=256,T=16", &cfg));
    hpt_model *m;
    CHECK_OK(hpt_model_create_config(mem, &cfg, &m));
    hpt_status s = hpt_model_set_act_opts(m, &ao);
    CHECK_MSG(s == HPT_ERR_UNSUPPORTED && strstr(hpt_last_error(), "plain"),
              "matmul bf16 with plain attention: status %d, '%s'", (int)s, hpt_last_error());
    printf("  refused: %s\n", hpt_last_error());
    ao.attention = HPT_ATTN_FLASH;
    CHECK_OK(hpt_model_set_act_opts(m, &ao));
    hpt_model_free(m);
    CHECK_OK(hpt_model_config_parse("gpt2:L=1,C=512,NH=1,V=256,T=16", &cfg)); /* a head of 512 */
    CHECK_OK(hpt_model_create_config(mem, &cfg, &m));
    s = hpt_model_set_act_opts(m, &ao);
    CHECK_MSG(s == HPT_ERR_UNSUPPORTED && strstr(hpt_last_error(), "heads of 512"),
              "matmul bf16 with heads of 512: status %d, '%s'", (int)s, hpt_last_error());
    printf("  refused: %s\n", hpt_last_error());
    hpt_model_free(m);
    hpt_mem_destroy(mem);
}

/* 4 training steps, fp32 and bf16: the bf16 run's estimate equals its measured peak */
static void check_trainer(const char *shape, const char *pattern) {
    float losses[2][4];
    for (int bf = 0; bf < 2; bf++) {
        hpt_train_opts o = t_train_opts(shape, pattern, 2, 64, 4, 1);
        o.plan.act.matmul = bf ? HPT_MATMUL_BF16 : HPT_MATMUL_FP32;
        hpt_mem *mem;
        CHECK_OK(hpt_mem_create(&mem));
        t_train_run(mem, &o, 0, losses[bf], NULL, NULL); /* 0: to the end, no save */
        t_check_estimate(mem, &o, bf ? "matmul bf16" : "matmul fp32");
        hpt_mem_destroy(mem);
    }
    double worst = 0.0;
    for (int s = 0; s < 4; s++) {
        double d = fabs((double)losses[1][s] - (double)losses[0][s]) / fabs((double)losses[0][s]);
        worst = d > worst ? d : worst;
    }
    CHECK_MSG(worst < 1e-3, "%s: bf16 losses %.3g from fp32's", shape, worst);
    printf("  trainer --matmul bf16 (%s): losses %.5f .. %.5f, fp32's %.5f .. %.5f (worst rel "
           "%.1e); estimate = measured\n", shape, (double)losses[1][0], (double)losses[1][3],
           (double)losses[0][0], (double)losses[0][3], worst);
}

int main(void) {
    hpt_set_threads(2);
    printf("--matmul bf16 against PyTorch (bf16-rounded operands of every linear layer and of "
           "flash attention's products):\n");
    check_attn();
    check_refusals();
    check_torch("gpt2");
    check_torch("llama");
    char train[512];
    t_make_shards(7, 200, 11, 3, 20000, 0, train, NULL);
    check_trainer("gpt2:L=2,C=64,NH=4,V=256,T=64", train);
    check_trainer("llama:L=2,C=64,NH=4,NKV=2,FF=96,V=256,T=64", train);
    return t_done("test_matmul");
}
