/* mlptile.c: the sequence-tiled MLP (arch.h's arch_mlp), which the block codes (gpt2.c,
 * llama.c, qwen.c) call when the plan tiles it (hpt_act_opts.mlp_tile, x->mlp_rows > 0): the
 * forward, and the backward that first recomputes each tile's intermediates from the block's
 * saved MLP input (or, arch_mlp's norm_x, from the norm's input and saved rstd, a tile's rows
 * at a time: llama under every:N and full), so that a block's working set is its (B*T, C)
 * fields plus one tile's (rows, H + F). docs/activations.md, "The tiled MLP".
 * Invariants: tiles run in ascending row order, forward and backward alike, and the weights'
 * gradients are sums of per-tile products in that order (their bits depend on the tile size;
 * the activations' and the input's gradients are each a row's own); the backward's recomputed
 * tile is the forward's, bit for bit (the same kernels on the same rows). */
#include "core/core.h"
#include "model/arch.h"

void arch_mlp_gelu_fwd(const hpt_backend *be, float *y, const float *h, int64_t rows, int64_t F) {
    be->gelu_forward(y, h, rows * F);
}

void arch_mlp_gelu_bwd(const hpt_backend *be, float *dh, const float *dy, const float *h,
                       int64_t rows, int64_t F) {
    be->gelu_backward(dh, h, dy, rows * F);
}

void arch_mlp_swiglu_fwd(const hpt_backend *be, float *y, const float *h, int64_t rows, int64_t F) {
    be->swiglu_forward(y, h, rows, (int)F);
}

void arch_mlp_swiglu_bwd(const hpt_backend *be, float *dh, const float *dy, const float *h,
                         int64_t rows, int64_t F) {
    be->swiglu_backward(dh, dy, h, rows, (int)F);
}

void arch_mlp_forward(const hpt_arch_ctx *x, const arch_mlp *m, float *out, const float *in,
                      float *h, float *y) {
    const int64_t BT = (int64_t)x->B * x->T, R = (int64_t)x->mlp_rows, C = m->C;
    for (int64_t r0 = 0; r0 < BT; r0 += R) {
        const int64_t n = HPT_MIN(R, BT - r0);
        /* h (n, H) = in[r0:] @ w1^T (+ b1); y (n, F) = act(h) */
        arch_linear_forward(x, h, in + r0 * C, m->w1, m->b1, n, C, m->H, 0);
        m->act_fwd(x->be, y, h, n, m->F);
        /* out[r0:] (n, C) += y @ w2^T (+ b2) */
        arch_linear_forward(x, out + r0 * C, y, m->w2, m->b2, n, m->F, C, 1);
    }
}

void arch_mlp_backward(const hpt_arch_ctx *x, const arch_mlp *m, float *din, const float *dout,
                       const float *in, float *h, float *y, float *dy, float *dh) {
    const int64_t BT = (int64_t)x->B * x->T, R = (int64_t)x->mlp_rows, C = m->C;
    for (int64_t r0 = 0; r0 < BT; r0 += R) {
        const int64_t n = HPT_MIN(R, BT - r0);
        /* in[r0:] = rmsnorm(norm_x[r0:]) * norm_w from the saved rstd: the forward's bits */
        const float *xin = in ? in + r0 * C : m->in_tile;
        if (!in)
            x->be->rmsnorm_apply(m->in_tile, m->norm_x + r0 * C, m->norm_w, m->norm_rstd + r0, n, C);
        /* the tile's forward again: h = in[r0:] @ w1^T (+ b1), y = act(h) */
        arch_linear_forward(x, h, xin, m->w1, m->b1, n, C, m->H, 0);
        m->act_fwd(x->be, y, h, n, m->F);
        /* out += y @ w2^T (+ b2): dy (n, F) = dout[r0:] @ w2; dw2 += dout^T @ y */
        arch_linear_backward(x, dy, m->dw2, m->db2, dout + r0 * C, y, m->w2, n, m->F, C, 0);
        /* y = act(h): dh (n, H) */
        m->act_bwd(x->be, dh, dy, h, n, m->F);
        /* h = in @ w1^T (+ b1): din[r0:] (n, C) = dh @ w1; dw1 += dh^T @ in */
        arch_linear_backward(x, din + r0 * C, m->dw1, m->db1, dh, xin, m->w1, n, C, m->H, 0);
    }
}
