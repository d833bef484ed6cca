/* test_reference.c: forward, backward and 10 AdamW steps against PyTorch's reference state
 * made by tests/make_reference.sh in the build tree (gpt2_tiny: L=2 C=64 NH=4 V=1000 Vp=1024,
 * B=2 T=16). */
#include "testlib.h"

#include <math.h>
#include <stdio.h>

int main(void) {
    char model[512], state[512], steps[512];
    snprintf(model, sizeof model, "%s/gpt2_tiny_model.bin", t_ref_dir());
    snprintf(state, sizeof state, "%s/gpt2_tiny_state.bin", t_ref_dir());
    snprintf(steps, sizeof steps, "%s/gpt2_tiny_steps.json", t_ref_dir());
    hpt_set_threads(2);
    hpt_mem *mem;
    CHECK_OK(hpt_mem_create(&mem));
    hpt_verify_report r;
    CHECK_OK(hpt_verify(mem, model, state, steps, 1e-4, &r));
    printf("loss %.6f (ref %.6f) rel %.2e; logits rel %.2e\n", (double)r.loss, (double)r.ref_loss,
           r.loss_rel_err, r.logits_rel_err);
    CHECK(r.cfg.L == 2 && r.cfg.C == 64 && r.cfg.V == 1000 && r.cfg.Vp == 1024);
    CHECK(r.loss_rel_err < 1e-4);
    CHECK(r.logits_rel_err < 1e-4);
    for (int i = 0; i < HPT_VERIFY_MAX_TENSORS; i++) {
        printf("  grad %-9s rel %.2e\n", r.grad_name[i], r.grad_rel_err[i]);
        CHECK_MSG(r.grad_rel_err[i] < 1e-4, "%s %.3e", r.grad_name[i], r.grad_rel_err[i]);
    }
    CHECK(r.n_steps == 10);
    for (int i = 0; i < r.n_steps; i++)
        printf("  step %d loss %.6f ref %.6f\n", i, (double)r.step_loss[i], (double)r.ref_step_loss[i]);
    CHECK(r.max_step_rel_err < 1e-4);
    CHECK(r.passed);
    /* the PyTorch losses decrease: the steps really trained */
    CHECK(r.step_loss[9] < r.step_loss[0] - 1.0f);
    hpt_mem_stats st;
    hpt_mem_get_stats(mem, &st);
    for (int c = 0; c < HPT_CAT_COUNT; c++) CHECK(st.live_bytes[HPT_TIER_DEVICE][c] == 0);
    hpt_mem_destroy(mem);
    return t_done("test_reference");
}
