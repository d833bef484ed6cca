/* cmd_verify.c: `hptrain verify`: forward, backward and AdamW against a PyTorch state. */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

static const char k_help[] =
    "usage: hptrain verify --model PATH|SHAPE --state PATH [--steps PATH.json] [--tol X]\n"
    "\n"
    "Checks hptrain against a PyTorch reference state: logits, loss and every gradient of\n"
    "one batch, and with --steps the loss before each AdamW step. --model PATH: an llm.c\n"
    "checkpoint with llm.c's state (version 2); --model SHAPE: the parameters come from the\n"
    "state (version 3, as the tests' reference scripts write it). SHAPE: @SHAPES@.\n"
    "Exit status 0 when every figure is within --tol (relative, norm-wise; default 1e-4).\n";

int cmd_verify(int argc, char **argv) {
    static const struct option longopts[] = {
        {"model", 1, 0, 'm'}, {"state", 1, 0, 's'}, {"steps", 1, 0, 'n'}, {"tol", 1, 0, 't'},
        {"threads", 1, 0, 'j'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *model = NULL, *state = NULL, *steps = NULL;
    double tol = 1e-4;
    long threads = 0;
    int opt_rc = 0;
    int c;
    while ((c = cli_getopt("verify", argc, argv, longopts, k_help, &opt_rc)) != -1) {
        if (c == CLI_OPT_EXIT) return opt_rc;
        int r = 0;
        switch (c) {
        case 'm': model = optarg; break;
        case 's': state = optarg; break;
        case 'n': steps = optarg; break;
        case 't': r = cli_parse_float("verify", "--tol", optarg, 0, 1, &tol); break;
        case 'j': r = cli_parse_long("verify", "--threads", optarg, 1, 1024, &threads); break;
        }
        if (r) return r;
    }
    if (optind < argc) return cli_unexpected_argument("verify", argv[optind]);
    if (!model || !state) return cli_usage_error("verify", "--model and --state are required");
    if (threads) hpt_set_threads((int)threads);
    hpt_mem *mem;
    hpt_status s = hpt_mem_create(&mem);
    if (s != HPT_OK) return cli_lib_error(s, "verify");
    hpt_verify_report r;
    s = hpt_verify(mem, model, state, steps, tol, &r);
    hpt_mem_destroy(mem);
    if (s != HPT_OK) return cli_lib_error(s, "verify");
    char win[32] = ""; /* a sliding window (Mistral), where the model has one */
    if (r.cfg.window) snprintf(win, sizeof win, " window=%d", r.cfg.window);
    printf("model %s L=%d C=%d NH=%d NKV=%d V=%d Vp=%d maxT=%d%s, batch B=%d T=%d, tolerance %.1e\n",
           cli_arch_name(r.cfg.arch), r.cfg.L, r.cfg.C, r.cfg.NH, r.cfg.NKV,
           r.cfg.V, r.cfg.Vp, r.cfg.maxT, win, r.B, r.T, r.tol);
    printf("%-10s %-12s %s\n", "check", "rel. error", "");
    printf("%-10s %-12.3e %s\n", "logits", r.logits_rel_err, r.logits_rel_err <= tol ? "ok" : "FAIL");
    printf("%-10s %-12.3e %s (%.6f vs %.6f)\n", "loss", r.loss_rel_err,
           r.loss_rel_err <= tol ? "ok" : "FAIL", (double)r.loss, (double)r.ref_loss);
    for (int i = 0; i < r.n_grads; i++)
        printf("d%-9s %-12.3e %s\n", r.grad_name[i], r.grad_rel_err[i],
               r.grad_rel_err[i] <= tol ? "ok" : "FAIL");
    for (int i = 0; i < r.n_steps; i++)
        printf("step %-5d %-12.3e loss %.6f vs %.6f\n", i, 0.0 + (double)(r.step_loss[i] - r.ref_step_loss[i]) /
               (double)r.ref_step_loss[i], (double)r.step_loss[i], (double)r.ref_step_loss[i]);
    if (r.n_steps) printf("%-10s %-12.3e %s\n", "steps max", r.max_step_rel_err,
                          r.max_step_rel_err <= tol ? "ok" : "FAIL");
    printf("%s\n", r.passed ? "PASSED" : "FAILED");
    return r.passed ? 0 : 1;
}
