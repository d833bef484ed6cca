/* test_backend_nn.h: the tests of the GEMM, linear, embedding, layernorm, attention,
 * pointwise and loss ops, part of tests/test_backend.c,
 * which includes it once after its helpers (a test is one source file: tests/tests.cmake).
 * Each op's test runs it on g_be and compares with a double-precision reference written here. */
#ifndef HPT_TEST_BACKEND_NN_H
#define HPT_TEST_BACKEND_NN_H

/* ================================ GEMM and linear ================================ */
static double t_gemm(void) {
    enum { M = 5, N = 7, K = 9, PAD = 2 };
    const char tr[2] = {'N', 'T'};
    double e = 0.0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int64_t lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
            float A[(K + PAD) * (M + PAD)], B[(K + PAD) * (N + PAD)], C[M * (N + PAD)];
            fill_rand(A, sizeof A / sizeof *A, 1.0f);
            fill_rand(B, sizeof B / sizeof *B, 1.0f);
            fill_rand(C, sizeof C / sizeof *C, 1.0f);
            double ref[M * (N + PAD)];
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N + PAD; j++) {
                    double s = 0.0;
                    for (int k = 0; k < K; k++)
                        s += (double)(ta ? A[k * lda + i] : A[i * lda + k]) *
                             (double)(tb ? B[j * ldb + k] : B[k * ldb + j]);
                    /* columns past N are outside C: untouched */
                    ref[i * ldc + j] = j < N ? 0.7 * s + 0.3 * C[i * ldc + j] : C[i * ldc + j];
                }
            float *dA = dput(A, sizeof A), *dB = dput(B, sizeof B), *dC = dput(C, sizeof C);
            g_be->gemm(tr[ta], tr[tb], M, N, K, 0.7f, dA, lda, dB, ldb, 0.3f, dC, ldc);
            dget(C, dC, sizeof C);
            e = fmax(e, cmp_arr("gemm", C, ref, M * (N + PAD), TOL));
            emit(C, M * (N + PAD));
            dfree_all();
        }
    return e;
}

enum { MN = 7, MC = 24, MOC = 13 };
static void ref_matmul(double *out, const float *inp, const float *w, const float *bias, int N,
                       int C, int OC) {
    for (int i = 0; i < N; i++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += (double)inp[i * C + c] * w[o * C + c];
            out[i * OC + o] = s;
        }
}

static double t_matmul_forward(void) {
    float inp[MN * MC], w[MOC * MC], b[MOC], out[MN * MOC], out0[MN * MOC];
    fill_rand(inp, MN * MC, 1.0f);
    fill_rand(w, MOC * MC, 0.5f);
    fill_rand(b, MOC, 0.5f);
    fill_rand(out0, MN * MOC, 1.0f);
    double ref[MN * MOC], e = 0.0;
    for (int acc = 0; acc < 2; acc++) {
        const float *bias = acc ? NULL : b;
        ref_matmul(ref, inp, w, bias, MN, MC, MOC);
        if (acc)
            for (int i = 0; i < MN * MOC; i++) ref[i] += out0[i];
        float *dout = dput(out0, sizeof out0);
        g_be->matmul_forward(dout, dput(inp, sizeof inp), dput(w, sizeof w), bias ? dput(b, sizeof b) : NULL,
                             MN, MC, MOC, acc);
        dget(out, dout, sizeof out);
        e = fmax(e, cmp_arr("matmul_forward", out, ref, MN * MOC, TOL));
        emit(out, MN * MOC);
        dfree_all();
    }
    return e;
}

typedef struct {
    const float *R; /* (N, OC) the loss's weights: loss = sum R * out */
} mm_ctx;
/* theta = [inp (N*C) | w (OC*C) | b (OC)] */
static double mm_loss(const double *th, const void *vctx) {
    const mm_ctx *c = vctx;
    const double *inp = th, *w = th + MN * MC, *b = w + MOC * MC;
    double L = 0.0;
    for (int i = 0; i < MN; i++)
        for (int o = 0; o < MOC; o++) {
            double s = b[o];
            for (int k = 0; k < MC; k++) s += inp[i * MC + k] * w[o * MC + k];
            L += c->R[i * MOC + o] * s;
        }
    return L;
}

/* matmul_backward's gradients in double: dinp (+ dinp0 when acc), dw (+ dw0), dbias (+ db0);
 * the products from dp, inp, w, the bias's sums from db (the same dout, or its unrounded copy) */
static void ref_matmul_backward(double *ri, double *rw, double *rb, const float *dp, const float *db,
                                const float *inp, const float *w, const float *dinp0,
                                const float *dw0, const float *db0, int acc) {
    for (int i = 0; i < MN; i++)
        for (int c = 0; c < MC; c++) {
            double s = acc ? dinp0[i * MC + c] : 0.0;
            for (int o = 0; o < MOC; o++) s += (double)dp[i * MOC + o] * w[o * MC + c];
            ri[i * MC + c] = s;
        }
    for (int o = 0; o < MOC; o++) {
        double sb = db0[o];
        for (int i = 0; i < MN; i++) sb += db[i * MOC + o];
        rb[o] = sb;
        for (int c = 0; c < MC; c++) {
            double s = dw0[o * MC + c];
            for (int i = 0; i < MN; i++) s += (double)dp[i * MOC + o] * inp[i * MC + c];
            rw[o * MC + c] = s;
        }
    }
}

static double t_matmul_backward(void) {
    float inp[MN * MC], w[MOC * MC], dout[MN * MOC], dinp0[MN * MC], dw0[MOC * MC], db0[MOC];
    fill_rand(inp, MN * MC, 1.0f);
    fill_rand(w, MOC * MC, 0.5f);
    fill_rand(dout, MN * MOC, 1.0f);
    fill_rand(dinp0, MN * MC, 1.0f);
    fill_rand(dw0, MOC * MC, 1.0f);
    fill_rand(db0, MOC, 1.0f);
    double e = 0.0;
    for (int acc = 0; acc < 2; acc++) {
        float *ddinp = dput(dinp0, sizeof dinp0), *ddw = dput(dw0, sizeof dw0), *ddb = dput(db0, sizeof db0);
        g_be->matmul_backward(ddinp, ddw, ddb, dput(dout, sizeof dout), dput(inp, sizeof inp),
                              dput(w, sizeof w), MN, MC, MOC, acc);
        float gi[MN * MC], gw[MOC * MC], gb[MOC];
        dget(gi, ddinp, sizeof gi);
        dget(gw, ddw, sizeof gw);
        dget(gb, ddb, sizeof gb);
        double ri[MN * MC], rw[MOC * MC], rb[MOC];
        ref_matmul_backward(ri, rw, rb, dout, dout, inp, w, dinp0, dw0, db0, acc);
        e = fmax(e, cmp_arr("matmul_backward dinp", gi, ri, MN * MC, TOL));
        e = fmax(e, cmp_arr("matmul_backward dw", gw, rw, MOC * MC, TOL));
        e = fmax(e, cmp_arr("matmul_backward dbias", gb, rb, MOC, TOL));
        emit(gi, MN * MC);
        emit(gw, MOC * MC);
        emit(gb, MOC);
        if (!acc) { /* finite differences: the gradient of sum(dout * forward) */
            static double th[MN * MC + MOC * MC + MOC];
            for (int i = 0; i < MN * MC; i++) th[i] = inp[i];
            for (int i = 0; i < MOC * MC; i++) th[MN * MC + i] = w[i];
            for (int i = 0; i < MOC; i++) th[MN * MC + MOC * MC + i] = 0.0;
            mm_ctx c = {dout};
            size_t idx[4] = {3, MN * MC + 17, MN * MC + MOC * MC - 1, MN * MC + MOC * MC + 5};
            double got[4] = {gi[3], gw[17] - dw0[17], gw[MOC * MC - 1] - dw0[MOC * MC - 1], gb[5] - db0[5]};
            for (int k = 0; k < 4; k++) {
                double err = rel(got[k], fd(mm_loss, th, idx[k], &c));
                CHECK_MSG(err <= TOL_FD, "matmul_backward finite difference %d: %.3g", k, err);
                e = fmax(e, err);
            }
        }
        dfree_all();
    }
    return e;
}

/* ---- the bf16 operand GEMMs: the same references with each operand rounded to bf16 ----
 * bf16r rounds to 8 significant bits, nearest even, through frexp/nearbyint (not the kernels'
 * bit trick); values are O(1), far from bf16's range limits. A GEMM that did not round would be
 * off by ~1e-3 relative, 100 x TOL. */
static float bf16r(float x) {
    int ex;
    double m = frexp((double)x, &ex); /* x = m 2^ex, 0.5 <= |m| < 1 */
    return (float)ldexp(nearbyint(m * 256.0), ex - 8);
}
static void bf16r_arr(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16r(src[i]);
}

static double t_gemm_bf16(void) {
    enum { M = 5, N = 7, K = 9, PAD = 2 };
    const char tr[2] = {'N', 'T'};
    const float ab[2][2] = {{1.0f, 1.0f}, {0.7f, 0.3f}}; /* oneDNN's case, the general one */
    double e = 0.0;
    for (int v = 0; v < 2; v++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int64_t lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
                float A[(K + PAD) * (M + PAD)], B[(K + PAD) * (N + PAD)], C[M * (N + PAD)];
                float Ar[(K + PAD) * (M + PAD)], Br[(K + PAD) * (N + PAD)];
                fill_rand(A, sizeof A / sizeof *A, 1.0f);
                fill_rand(B, sizeof B / sizeof *B, 1.0f);
                fill_rand(C, sizeof C / sizeof *C, 1.0f);
                bf16r_arr(Ar, A, sizeof A / sizeof *A);
                bf16r_arr(Br, B, sizeof B / sizeof *B);
                double ref[M * (N + PAD)];
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N + PAD; j++) {
                        double s = 0.0;
                        for (int k = 0; k < K; k++)
                            s += (double)(ta ? Ar[k * lda + i] : Ar[i * lda + k]) *
                                 (double)(tb ? Br[j * ldb + k] : Br[k * ldb + j]);
                        ref[i * ldc + j] = j < N ? ab[v][0] * s + ab[v][1] * C[i * ldc + j]
                                                 : C[i * ldc + j];
                    }
                float *dA = dput(A, sizeof A), *dB = dput(B, sizeof B), *dC = dput(C, sizeof C);
                g_be->gemm_bf16(tr[ta], tr[tb], M, N, K, ab[v][0], dA, lda, dB, ldb, ab[v][1], dC,
                                ldc, dput(NULL, HPT_MM_BF16_WS_BYTES));
                dget(C, dC, sizeof C);
                e = fmax(e, cmp_arr("gemm_bf16", C, ref, M * (N + PAD), TOL));
                emit(C, M * (N + PAD));
                dfree_all();
            }
    return e;
}

static double t_matmul_forward_bf16(void) {
    float inp[MN * MC], w[MOC * MC], b[MOC], out[MN * MOC], out0[MN * MOC];
    float ir[MN * MC], wr[MOC * MC];
    fill_rand(inp, MN * MC, 1.0f);
    fill_rand(w, MOC * MC, 0.5f);
    fill_rand(b, MOC, 0.5f);
    fill_rand(out0, MN * MOC, 1.0f);
    bf16r_arr(ir, inp, MN * MC);
    bf16r_arr(wr, w, MOC * MC);
    double ref[MN * MOC], e = 0.0;
    for (int acc = 0; acc < 2; acc++)
        for (int hb = 0; hb < 2; hb++) {
            const float *bias = hb ? b : NULL; /* the bias stays fp32 */
            ref_matmul(ref, ir, wr, bias, MN, MC, MOC);
            if (acc)
                for (int i = 0; i < MN * MOC; i++) ref[i] += out0[i];
            float *dout = dput(out0, sizeof out0);
            g_be->matmul_forward_bf16(dout, dput(inp, sizeof inp), dput(w, sizeof w),
                                      bias ? dput(b, sizeof b) : NULL, MN, MC, MOC, acc,
                                      dput(NULL, HPT_MM_BF16_WS_BYTES));
            dget(out, dout, sizeof out);
            e = fmax(e, cmp_arr("matmul_forward_bf16", out, ref, MN * MOC, TOL));
            emit(out, MN * MOC);
            dfree_all();
        }
    return e;
}

static double t_matmul_backward_bf16(void) {
    float inp[MN * MC], w[MOC * MC], dout[MN * MOC], dinp0[MN * MC], dw0[MOC * MC], db0[MOC];
    float ir[MN * MC], wr[MOC * MC], dr[MN * MOC];
    fill_rand(inp, MN * MC, 1.0f);
    fill_rand(w, MOC * MC, 0.5f);
    fill_rand(dout, MN * MOC, 1.0f);
    fill_rand(dinp0, MN * MC, 1.0f);
    fill_rand(dw0, MOC * MC, 1.0f);
    fill_rand(db0, MOC, 1.0f);
    bf16r_arr(ir, inp, MN * MC);
    bf16r_arr(wr, w, MOC * MC);
    bf16r_arr(dr, dout, MN * MOC);
    double e = 0.0;
    for (int acc = 0; acc < 2; acc++) {
        float *ddinp = dput(dinp0, sizeof dinp0), *ddw = dput(dw0, sizeof dw0),
              *ddb = dput(db0, sizeof db0);
        g_be->matmul_backward_bf16(ddinp, ddw, ddb, dput(dout, sizeof dout), dput(inp, sizeof inp),
                                   dput(w, sizeof w), MN, MC, MOC, acc,
                                   dput(NULL, HPT_MM_BF16_WS_BYTES));
        float gi[MN * MC], gw[MOC * MC], gb[MOC];
        dget(gi, ddinp, sizeof gi);
        dget(gw, ddw, sizeof gw);
        dget(gb, ddb, sizeof gb);
        double ri[MN * MC], rw[MOC * MC], rb[MOC];
        ref_matmul_backward(ri, rw, rb, dr, dout, ir, wr, dinp0, dw0, db0, acc); /* dbias: fp32 dout */
        e = fmax(e, cmp_arr("matmul_backward_bf16 dinp", gi, ri, MN * MC, TOL));
        e = fmax(e, cmp_arr("matmul_backward_bf16 dw", gw, rw, MOC * MC, TOL));
        e = fmax(e, cmp_arr("matmul_backward_bf16 dbias", gb, rb, MOC, TOL));
        emit(gi, MN * MC);
        emit(gw, MOC * MC);
        emit(gb, MOC);
        dfree_all();
    }
    return e;
}

/* ================================ embedding ================================ */
enum { EB = 2, ET = 5, EC = 24, EV = 11 };
static void enc_inputs(int32_t *tok, float *wte, float *wpe) {
    for (int i = 0; i < EB * ET; i++) tok[i] = (int32_t)((frand() + 1.0f) * 0.5f * EV) % EV;
    tok[3] = tok[7]; /* a repeated token: dwte's rows have several writers */
    fill_rand(wte, EV * EC, 1.0f);
    fill_rand(wpe, ET * EC, 1.0f);
}

static double t_encoder_forward(void) {
    int32_t tok[EB * ET];
    float wte[EV * EC], wpe[ET * EC], out[EB * ET * EC];
    enc_inputs(tok, wte, wpe);
    double ref[EB * ET * EC];
    for (int b = 0; b < EB; b++)
        for (int t = 0; t < ET; t++)
            for (int c = 0; c < EC; c++)
                ref[(b * ET + t) * EC + c] = (double)wte[tok[b * ET + t] * EC + c] + wpe[t * EC + c];
    float *d = dput(NULL, sizeof out);
    g_be->encoder_forward(d, dput(tok, sizeof tok), dput(wte, sizeof wte), dput(wpe, sizeof wpe), EB, ET, EC);
    dget(out, d, sizeof out);
    double e = cmp_arr("encoder_forward", out, ref, EB * ET * EC, TOL);
    emit(out, EB * ET * EC);
    dfree_all();
    return e;
}

static double t_encoder_backward(void) {
    int32_t tok[EB * ET];
    float wte[EV * EC], wpe[ET * EC], dout[EB * ET * EC];
    enc_inputs(tok, wte, wpe); /* wte, wpe: the initial gradients (accumulated into) */
    fill_rand(dout, EB * ET * EC, 1.0f);
    double rwte[EV * EC], rwpe[ET * EC];
    for (int i = 0; i < EV * EC; i++) rwte[i] = wte[i];
    for (int i = 0; i < ET * EC; i++) rwpe[i] = wpe[i];
    for (int b = 0; b < EB; b++)
        for (int t = 0; t < ET; t++)
            for (int c = 0; c < EC; c++) {
                rwte[tok[b * ET + t] * EC + c] += dout[(b * ET + t) * EC + c];
                rwpe[t * EC + c] += dout[(b * ET + t) * EC + c];
            }
    float *dwte = dput(wte, sizeof wte), *dwpe = dput(wpe, sizeof wpe);
    g_be->encoder_backward(dwte, dwpe, dput(dout, sizeof dout), dput(tok, sizeof tok), EB, ET, EC);
    dget(wte, dwte, sizeof wte);
    dget(wpe, dwpe, sizeof wpe);
    double e = fmax(cmp_arr("encoder_backward dwte", wte, rwte, EV * EC, TOL),
                    cmp_arr("encoder_backward dwpe", wpe, rwpe, ET * EC, TOL));
    /* the forward is linear: its finite difference is the scatter itself, checked above */
    emit(wte, EV * EC);
    emit(wpe, ET * EC);
    dfree_all();
    return e;
}

/* ================================ layernorm ================================ */
enum { LN = 7, LC = 24 };
static void ref_ln(double *out, double *mean, double *rstd, const double *x, const double *w,
                   const double *b) {
    for (int i = 0; i < LN; i++) {
        double m = 0.0, v = 0.0;
        for (int c = 0; c < LC; c++) m += x[i * LC + c];
        m /= LC;
        for (int c = 0; c < LC; c++) v += (x[i * LC + c] - m) * (x[i * LC + c] - m);
        double r = 1.0 / sqrt(v / LC + 1e-5);
        for (int c = 0; c < LC; c++) out[i * LC + c] = (x[i * LC + c] - m) * r * w[c] + b[c];
        if (mean) mean[i] = m;
        if (rstd) rstd[i] = r;
    }
}
static void to_d(double *d, const float *f, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = f[i];
}

static void ln_inputs(float *x, float *w, float *b) {
    fill_rand(x, LN * LC, 2.0f);
    for (int i = 0; i < LN * LC; i++) x[i] += (float)(i / LC); /* rows with different means */
    fill_rand(w, LC, 1.0f);
    fill_rand(b, LC, 1.0f);
}

static double t_layernorm_forward(void) {
    float x[LN * LC], w[LC], b[LC], out[LN * LC], mean[LN], rstd[LN];
    ln_inputs(x, w, b);
    double xd[LN * LC], wd[LC], bd[LC], ro[LN * LC], rm[LN], rr[LN];
    to_d(xd, x, LN * LC), to_d(wd, w, LC), to_d(bd, b, LC);
    ref_ln(ro, rm, rr, xd, wd, bd);
    float *dout = dput(NULL, sizeof out), *dm = dput(NULL, sizeof mean), *dr = dput(NULL, sizeof rstd);
    g_be->layernorm_forward(dout, dm, dr, dput(x, sizeof x), dput(w, sizeof w), dput(b, sizeof b), LN, LC);
    dget(out, dout, sizeof out), dget(mean, dm, sizeof mean), dget(rstd, dr, sizeof rstd);
    double e = cmp_arr("layernorm_forward out", out, ro, LN * LC, TOL);
    e = fmax(e, cmp_arr("layernorm_forward mean", mean, rm, LN, TOL));
    e = fmax(e, cmp_arr("layernorm_forward rstd", rstd, rr, LN, TOL));
    emit(out, LN * LC), emit(mean, LN), emit(rstd, LN);
    dfree_all();
    return e;
}

static double t_layernorm_apply(void) {
    float x[LN * LC], w[LC], b[LC], out[LN * LC], out2[LN * LC];
    ln_inputs(x, w, b);
    double xd[LN * LC], wd[LC], bd[LC], ro[LN * LC];
    to_d(xd, x, LN * LC), to_d(wd, w, LC), to_d(bd, b, LC);
    ref_ln(ro, NULL, NULL, xd, wd, bd);
    float *dx = dput(x, sizeof x), *dw = dput(w, sizeof w), *db = dput(b, sizeof b);
    float *dout = dput(NULL, sizeof out), *dm = dput(NULL, LN * 4), *dr = dput(NULL, LN * 4);
    float *dout2 = dput(NULL, sizeof out);
    g_be->layernorm_forward(dout, dm, dr, dx, dw, db, LN, LC);
    g_be->layernorm_apply(dout2, dx, dw, db, dm, dr, LN, LC);
    dget(out, dout, sizeof out), dget(out2, dout2, sizeof out2);
    double e = cmp_arr("layernorm_apply", out2, ro, LN * LC, TOL);
    /* recomputation relies on it: the forward's bits from its saved statistics */
    CHECK_MSG(!memcmp(out, out2, sizeof out), "%s: layernorm_apply differs from the forward's out", g_be->name);
    emit(out2, LN * LC);
    dfree_all();
    return e;
}

typedef struct {
    const float *R;
} ln_ctx;
static double ln_loss(const double *th, const void *vctx) { /* theta = [x | w | b] */
    const ln_ctx *c = vctx;
    static double out[LN * LC];
    ref_ln(out, NULL, NULL, th, th + LN * LC, th + LN * LC + LC);
    double L = 0.0;
    for (int i = 0; i < LN * LC; i++) L += c->R[i] * out[i];
    return L;
}

static double t_layernorm_backward(void) {
    float x[LN * LC], w[LC], b[LC], dout[LN * LC], dinp[LN * LC], dw[LC], db[LC];
    ln_inputs(x, w, b);
    fill_rand(dout, LN * LC, 1.0f);
    fill_rand(dinp, LN * LC, 1.0f); /* accumulated into */
    fill_rand(dw, LC, 1.0f);
    fill_rand(db, LC, 1.0f);
    float gi[LN * LC], gw[LC], gb[LC];
    float *dx = dput(x, sizeof x), *dW = dput(w, sizeof w), *dB = dput(b, sizeof b);
    float *dm = dput(NULL, LN * 4), *dr = dput(NULL, LN * 4), *dy = dput(NULL, sizeof x);
    g_be->layernorm_forward(dy, dm, dr, dx, dW, dB, LN, LC);
    float *ddi = dput(dinp, sizeof dinp), *ddw = dput(dw, sizeof dw), *ddb = dput(db, sizeof db);
    g_be->layernorm_backward(ddi, ddw, ddb, dput(dout, sizeof dout), dx, dW, dm, dr, LN, LC);
    dget(gi, ddi, sizeof gi), dget(gw, ddw, sizeof gw), dget(gb, ddb, sizeof gb);
    /* the reference: the whole central-difference gradient of sum(dout * layernorm) in double */
    static double th[LN * LC + 2 * LC], ri[LN * LC], rw[LC], rb[LC];
    to_d(th, x, LN * LC), to_d(th + LN * LC, w, LC), to_d(th + LN * LC + LC, b, LC);
    ln_ctx c = {dout};
    for (int i = 0; i < LN * LC; i++) ri[i] = dinp[i] + fd(ln_loss, th, (size_t)i, &c);
    for (int i = 0; i < LC; i++) rw[i] = dw[i] + fd(ln_loss, th, (size_t)(LN * LC + i), &c);
    for (int i = 0; i < LC; i++) rb[i] = db[i] + fd(ln_loss, th, (size_t)(LN * LC + LC + i), &c);
    double e = cmp_arr("layernorm_backward dinp", gi, ri, LN * LC, TOL_FD);
    e = fmax(e, cmp_arr("layernorm_backward dw", gw, rw, LC, TOL_FD));
    e = fmax(e, cmp_arr("layernorm_backward db", gb, rb, LC, TOL_FD));
    emit(gi, LN * LC), emit(gw, LC), emit(gb, LC);
    dfree_all();
    return e;
}

/* ================================ attention ================================ */
/* Two cases: NH = 3 query heads over NKV = 3 (GPT-2's layout), and NH = 6 over NKV = 2
 * key/value heads (grouped-query, groups of 3: head h reads kv head h / 3, not h % 2) */
enum { AB = 2, AT = 5, AC = 24, ANHMAX = 6 };
static int g_nh = 3, g_nkv = 3; /* the case under test */
#define ANH g_nh
#define AHS (AC / g_nh)
#define AW (AC + 2 * g_nkv * AHS) /* a row of qkv */
/* out (B,T,C), att (B,NH,T,T), lse (B,NH,T) from qkv (B,T,W), causal, scale 1/sqrt(hs); query
 * head h reads kv head h / (NH/NKV). */
static void ref_attn(double *out, double *att, double *lse, const double *qkv) {
    double sc = 1.0 / sqrt((double)AHS);
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < ANH; h++)
            for (int t = 0; t < AT; t++) {
                const int kv = h / (ANH / g_nkv);
                const double *q = qkv + (b * AT + t) * AW + h * AHS;
                double s[AT] = {0}, mx = -INFINITY, z = 0.0;
                for (int u = 0; u <= t; u++) {
                    const double *k = qkv + (b * AT + u) * AW + AC + kv * AHS;
                    double d = 0.0;
                    for (int i = 0; i < AHS; i++) d += q[i] * k[i];
                    s[u] = d * sc;
                    mx = fmax(mx, s[u]);
                }
                for (int u = 0; u <= t; u++) z += exp(s[u] - mx);
                if (lse) lse[(b * ANH + h) * AT + t] = mx + log(z);
                double *o = out + (b * AT + t) * AC + h * AHS;
                for (int i = 0; i < AHS; i++) o[i] = 0.0;
                for (int u = 0; u < AT; u++) {
                    double p = u <= t ? exp(s[u] - mx) / z : 0.0;
                    if (att) att[((b * ANH + h) * AT + t) * AT + u] = p;
                    if (u > t) continue;
                    const double *v = qkv + (b * AT + u) * AW + AC + g_nkv * AHS + kv * AHS;
                    for (int i = 0; i < AHS; i++) o[i] += p * v[i];
                }
            }
}
enum { NQKV = AB * AT * 3 * AC, NAO = AB * AT * AC, NATT = AB * ANHMAX * AT * AT, NLSE = AB * ANHMAX * AT };

static double t_attention_forward_impl(int flash) {
    double e = 0.0;
    for (int kase = 0; kase < 2; kase++) {
        g_nh = kase ? 6 : 3, g_nkv = kase ? 2 : 3;
        const int nq = AB * AT * AW;
        float qkv[NQKV], out[NAO], att[NATT], lse[NLSE];
        const size_t natt = (size_t)AB * ANH * AT * AT, nlse = (size_t)AB * ANH * AT;
        fill_rand(qkv, (size_t)nq, 1.5f);
        static double qd[NQKV], ro[NAO], ra[NATT], rl[NLSE];
        to_d(qd, qkv, (size_t)nq);
        ref_attn(ro, ra, rl, qd);
        float *dq = dput(qkv, (size_t)nq * 4), *dout = dput(NULL, sizeof out);
        if (!flash) {
            float *da = dput(NULL, natt * 4);
            g_be->attention_forward(dout, da, dq, AB, AT, AC, ANH, g_nkv);
            dget(out, dout, sizeof out), dget(att, da, natt * 4);
            e = fmax(e, fmax(cmp_arr("attention_forward out", out, ro, NAO, TOL),
                             cmp_arr("attention_forward att", att, ra, natt, TOL)));
            emit(out, NAO), emit(att, natt);
        } else {
            float *dl = dput(NULL, nlse * 4);
            g_be->flash_attention_forward(dout, dl, dq, AB, AT, AC, ANH, g_nkv);
            dget(out, dout, sizeof out), dget(lse, dl, nlse * 4);
            e = fmax(e, fmax(cmp_arr("flash_attention_forward out", out, ro, NAO, TOL),
                             cmp_arr("flash_attention_forward lse", lse, rl, nlse, TOL)));
            emit(out, NAO), emit(lse, nlse);
        }
        dfree_all();
    }
    g_nh = 3, g_nkv = 3;
    return e;
}
static double t_attention_forward(void) { return t_attention_forward_impl(0); }
static double t_flash_attention_forward(void) { return t_attention_forward_impl(1); }

typedef struct {
    const float *R;
} at_ctx;
static double at_loss(const double *qkv, const void *vctx) {
    const at_ctx *c = vctx;
    static double out[NAO];
    ref_attn(out, NULL, NULL, qkv);
    double L = 0.0;
    for (int i = 0; i < NAO; i++) L += c->R[i] * out[i];
    return L;
}

static double t_attention_backward_impl(int flash) {
    double e = 0.0;
    for (int kase = 0; kase < 2; kase++) {
        g_nh = kase ? 6 : 3, g_nkv = kase ? 2 : 3; /* grouped: dk, dv sum over 3 query heads */
        const int nq = AB * AT * AW;
        float qkv[NQKV], dout[NAO], g[NQKV];
        fill_rand(qkv, (size_t)nq, 1.5f);
        fill_rand(dout, NAO, 1.0f);
        float *dq = dput(qkv, (size_t)nq * 4), *dy = dput(NULL, NAO * 4), *ddy = dput(dout, sizeof dout);
        float *dg = dput(NULL, (size_t)nq * 4), *scr = dput(NULL, AB * ANH * AT * 4);
        g_be->memset(dg, 0x7f, (size_t)nq * 4); /* overwritten, not accumulated into */
        if (!flash) {
            float *da = dput(NULL, NATT * 4);
            g_be->attention_forward(dy, da, dq, AB, AT, AC, ANH, g_nkv);
            g_be->attention_backward(dg, scr, ddy, dq, da, AB, AT, AC, ANH, g_nkv);
        } else {
            float *dl = dput(NULL, NLSE * 4);
            g_be->flash_attention_forward(dy, dl, dq, AB, AT, AC, ANH, g_nkv);
            g_be->flash_attention_backward(dg, scr, ddy, dq, dy, dl, AB, AT, AC, ANH, g_nkv);
        }
        dget(g, dg, (size_t)nq * 4);
        /* the reference: the whole central-difference gradient of sum(dout * attention) */
        static double th[NQKV], r[NQKV];
        to_d(th, qkv, (size_t)nq);
        at_ctx c = {dout};
        for (int i = 0; i < nq; i++) r[i] = fd(at_loss, th, (size_t)i, &c);
        e = fmax(e, cmp_arr(flash ? "flash_attention_backward" : "attention_backward", g, r, (size_t)nq, TOL_FD));
        emit(g, (size_t)nq);
        dfree_all();
    }
    g_nh = 3, g_nkv = 3;
    return e;
}
static double t_attention_backward(void) { return t_attention_backward_impl(0); }
static double t_flash_attention_backward(void) { return t_attention_backward_impl(1); }

#undef ANH
#undef AHS
#undef AW

/* ================================ pointwise ================================ */
enum { PN = 1003 };
static double ref_gelu(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / PI) * (x + 0.044715 * x * x * x)));
}
static double ref_gelu_grad(double x) {
    double k = sqrt(2.0 / PI), u = k * (x + 0.044715 * x * x * x), th = tanh(u);
    return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

static double t_gelu_forward(void) {
    float x[PN], y[PN];
    fill_rand(x, PN, 5.0f);
    double r[PN];
    for (int i = 0; i < PN; i++) r[i] = ref_gelu(x[i]);
    float *dy = dput(NULL, sizeof y);
    g_be->gelu_forward(dy, dput(x, sizeof x), PN);
    dget(y, dy, sizeof y);
    double e = cmp_arr("gelu_forward", y, r, PN, TOL);
    emit(y, PN);
    dfree_all();
    return e;
}

static double gelu_loss(const double *x, const void *ctx) {
    (void)ctx;
    return ref_gelu(x[0]);
}

static double t_gelu_backward(void) {
    float x[PN], d[PN], g[PN];
    fill_rand(x, PN, 5.0f);
    fill_rand(d, PN, 1.0f);
    double r[PN];
    for (int i = 0; i < PN; i++) r[i] = ref_gelu_grad(x[i]) * d[i];
    float *dx = dput(x, sizeof x), *dd = dput(d, sizeof d), *dg = dput(NULL, sizeof g);
    g_be->gelu_backward(dg, dx, dd, PN);
    dget(g, dg, sizeof g);
    double e = cmp_arr("gelu_backward", g, r, PN, TOL);
    g_be->gelu_backward(dd, dx, dd, PN); /* dinp aliasing dout */
    float g2[PN];
    dget(g2, dd, sizeof g2);
    CHECK_MSG(!memcmp(g, g2, sizeof g), "%s: gelu_backward in place differs", g_be->name);
    for (int i = 0; i < PN; i += 250) { /* finite differences of the double forward */
        double th = x[i], err = rel(g[i] / d[i], fd(gelu_loss, &th, 0, NULL));
        CHECK_MSG(err <= TOL_FD * fmax(1.0, 1.0 / fabs(d[i])), "gelu finite difference at %d: %.3g", i, err);
    }
    emit(g, PN);
    dfree_all();
    return e;
}

static double t_scale(void) {
    float x[PN], y[PN];
    fill_rand(x, PN, 3.0f);
    float *dx = dput(x, sizeof x);
    g_be->scale(dx, PN, 0.37f);
    dget(y, dx, sizeof y);
    int exact = 1; /* one fp32 product: correctly rounded */
    for (int i = 0; i < PN; i++) exact &= y[i] == (float)((double)x[i] * (double)0.37f);
    CHECK_MSG(exact, "%s: scale is not the rounded product", g_be->name);
    emit(y, PN);
    dfree_all();
    return exact ? 0.0 : 1.0;
}

static double t_add(void) {
    float a[PN], b[PN], y[PN];
    fill_rand(a, PN, 3.0f);
    fill_rand(b, PN, 2.0f);
    float *da = dput(a, sizeof a), *db = dput(b, sizeof b);
    g_be->add(da, da, db, PN); /* in place on a */
    dget(y, da, sizeof y);
    int exact = 1; /* one fp32 sum: correctly rounded */
    for (int i = 0; i < PN; i++) exact &= y[i] == (float)((double)a[i] + (double)b[i]);
    CHECK_MSG(exact, "%s: add is not the rounded sum", g_be->name);
    emit(y, PN);
    dfree_all();
    return exact ? 0.0 : 1.0;
}

static double t_sumsq(void) {
    double e = 0.0;
    size_t sizes[2] = {PN, 100003}; /* the second above HPT_PAR_MIN: the threaded path */
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        float *x = malloc(n * sizeof(float));
        fill_rand(x, n, 2.0f);
        double r = 0.0;
        for (size_t i = 0; i < n; i++) r += (double)x[i] * x[i];
        double got = g_be->sumsq(dput(x, n * sizeof(float)), n);
        double err = fabs(got - r) / r; /* summed in double: 1e-12 */
        CHECK_MSG(err <= 1e-12, "%s: sumsq n=%zu error %.3g", g_be->name, n, err);
        e = fmax(e, err);
        emit1(got);
        free(x);
        dfree_all();
    }
    return e;
}

static double t_nonfinite(void) {
    float x[PN];
    fill_rand(x, PN, 1e30f);
    float *dx = dput(x, sizeof x);
    int bad = g_be->nonfinite(dx, PN) != 0;
    float specials[3] = {INFINITY, -INFINITY, NAN};
    size_t at[3] = {0, 517, PN - 1};
    for (int k = 0; k < 3; k++) {
        g_be->copy(dx + at[k], &specials[k], sizeof(float), HPT_COPY_H2D);
        bad |= g_be->nonfinite(dx, PN) != 1;
        g_be->copy(dx + at[k], &x[at[k]], sizeof(float), HPT_COPY_H2D);
    }
    bad |= g_be->nonfinite(dx, PN) != 0;
    CHECK_MSG(!bad, "%s: nonfinite", g_be->name);
    emit1(bad);
    dfree_all();
    return bad;
}

/* sumsq_many: each range's sum the bits of sumsq's on the same backend, one round trip for
 * up to 700 ranges (the CUDA backend reads back 767 at a time); 900 ranges read in pieces */
static double t_sumsq_many(void) {
    enum { NR = 900 };
    size_t big = 100003, n = PN + big + NR * 37;
    float *x = malloc(n * sizeof(float));
    fill_rand(x, n, 2.0f);
    float *dx = dput(x, n * sizeof(float));
    const float **xs = malloc((NR + 2) * sizeof *xs);
    size_t *ns = malloc((NR + 2) * sizeof *ns), at = 0;
    double *got = malloc((NR + 2) * sizeof *got);
    xs[0] = dx, ns[0] = PN, at = PN;
    xs[1] = dx + at, ns[1] = big, at += big; /* the threaded path of the CPU's sumsq */
    for (int j = 2; j < NR + 2; j++) xs[j] = dx + at, ns[j] = (size_t)(j % 37), at += 37;
    int bad = 0;
    uint64_t t0 = hpt_be_trips();
    g_be->sumsq_many(got, xs, ns, 700);
    bad |= hpt_be_trips() - t0 != 1;
    for (int j = 0; j < 700; j++) {
        double one = g_be->sumsq(xs[j], ns[j]);
        bad |= memcmp(&one, &got[j], sizeof one) != 0;
    }
    g_be->sumsq_many(got, xs, ns, NR + 2);
    for (int j = 0; j < NR + 2; j++) {
        double one = g_be->sumsq(xs[j], ns[j]);
        bad |= memcmp(&one, &got[j], sizeof one) != 0;
    }
    double r = 0.0; /* and against the double reference */
    for (size_t i = 0; i < big; i++) r += (double)x[PN + i] * x[PN + i];
    double e = fabs(got[1] - r) / r;
    CHECK_MSG(!bad && e <= 1e-12, "%s: sumsq_many (bits or one round trip) %d, error %.3g",
              g_be->name, bad, e);
    emit1(got[0]), emit1(got[1]), emit1(got[NR + 1]);
    free(x), free(xs), free(ns), free(got);
    dfree_all();
    return bad ? 1.0 : e;
}

/* sumsq_many_dev: sumsq_many's bits into device memory, no round trip until they are read */
static double t_sumsq_many_dev(void) {
    enum { NR = 40 };
    size_t big = 100003, n = big + NR * 53;
    float *x = malloc(n * sizeof(float));
    fill_rand(x, n, 2.0f);
    float *dx = dput(x, n * sizeof(float));
    const float *xs[NR];
    size_t ns[NR], at = big;
    xs[0] = dx, ns[0] = big;
    for (int j = 1; j < NR; j++) xs[j] = dx + at, ns[j] = (size_t)(j * 7 % 53), at += 53;
    double want[NR], got[NR];
    g_be->sumsq_many(want, xs, ns, NR);
    double zero[NR] = {0};
    double *ds = dput(zero, sizeof zero);
    uint64_t t0 = hpt_be_trips();
    g_be->sumsq_many_dev(ds, xs, ns, NR);
    int bad = hpt_be_trips() != t0; /* device work only */
    dget(got, ds, sizeof got);
    bad |= memcmp(got, want, sizeof got) != 0;
    CHECK_MSG(!bad, "%s: sumsq_many_dev (bits of sumsq_many, no round trip)", g_be->name);
    emit1(got[0]), emit1(got[NR - 1]);
    free(x);
    dfree_all();
    return bad;
}

static double t_nonfinite_many(void) {
    enum { NR = 800, W = 33 };
    float *x = malloc(NR * W * sizeof(float));
    fill_rand(x, NR * W, 1e30f);
    float *dx = dput(x, NR * W * sizeof(float));
    const float **xs = malloc(NR * sizeof *xs);
    size_t *ns = malloc(NR * sizeof *ns);
    for (int j = 0; j < NR; j++) xs[j] = dx + (size_t)j * W, ns[j] = W;
    uint64_t t0 = hpt_be_trips();
    int bad = g_be->nonfinite_many(xs, ns, 700) != 0;
    bad |= hpt_be_trips() - t0 != 1;
    bad |= g_be->nonfinite_many(xs, ns, NR) != 0;
    float specials[3] = {INFINITY, -INFINITY, NAN};
    size_t at[3] = {0, 517 * W + 5, (size_t)NR * W - 1}; /* the last range: past 767 */
    for (int k = 0; k < 3; k++) {
        g_be->copy(dx + at[k], &specials[k], sizeof(float), HPT_COPY_H2D);
        bad |= g_be->nonfinite_many(xs, ns, NR) != 1;
        bad |= g_be->nonfinite_many(xs, ns, at[k] / W) != 0; /* the ranges before it */
        g_be->copy(dx + at[k], &x[at[k]], sizeof(float), HPT_COPY_H2D);
    }
    bad |= g_be->nonfinite_many(xs, ns, NR) != 0;
    CHECK_MSG(!bad, "%s: nonfinite_many", g_be->name);
    emit1(bad);
    free(x), free(xs), free(ns);
    dfree_all();
    return bad;
}

/* ================================ cross-entropy ================================ */
enum { XN = 7, XV = 11, XVP = 16 };
static void ref_ce(double *losses, double *lse, const double *lg, const int32_t *tg) {
    for (int i = 0; i < XN; i++) {
        double mx = -INFINITY, z = 0.0;
        for (int v = 0; v < XV; v++) mx = fmax(mx, lg[i * XVP + v]);
        for (int v = 0; v < XV; v++) z += exp(lg[i * XVP + v] - mx);
        double l = mx + log(z);
        if (lse) lse[i] = l;
        losses[i] = tg[i] < 0 ? 0.0 : l - lg[i * XVP + tg[i]]; /* < 0: ignored */
    }
}

static void ce_inputs(float *lg, int32_t *tg) {
    fill_rand(lg, XN * XVP, 4.0f);
    for (int i = 0; i < XN; i++) tg[i] = (int32_t)(i * 5 % XV);
    tg[3] = -1; /* an ignored target (docs/targets.md): loss 0, no gradient */
}

static double t_crossentropy_forward(void) {
    float lg[XN * XVP], losses[XN], lse[XN];
    int32_t tg[XN];
    ce_inputs(lg, tg);
    double lgd[XN * XVP], rl[XN], rs[XN], mean = 0.0;
    to_d(lgd, lg, XN * XVP);
    ref_ce(rl, rs, lgd, tg);
    for (int i = 0; i < XN; i++) mean += rl[i] / XN;
    float *dl = dput(NULL, sizeof losses), *ds = dput(NULL, sizeof lse);
    float got = g_be->crossentropy_forward(dl, ds, dput(lg, sizeof lg), dput(tg, sizeof tg), XN, XV, XVP);
    dget(losses, dl, sizeof losses), dget(lse, ds, sizeof lse);
    double e = fmax(cmp_arr("crossentropy_forward losses", losses, rl, XN, TOL),
                    cmp_arr("crossentropy_forward lse", lse, rs, XN, TOL));
    e = fmax(e, rel(got, mean));
    CHECK_MSG(rel(got, mean) <= TOL, "%s: crossentropy mean %g, reference %g", g_be->name, got, mean);
    emit(losses, XN), emit(lse, XN), emit1(got);
    dfree_all();
    return e;
}

typedef struct {
    const int32_t *tg;
    double dloss;
} ce_ctx;
static double ce_loss(const double *lg, const void *vctx) {
    const ce_ctx *c = vctx;
    double l[XN], L = 0.0;
    ref_ce(l, NULL, lg, c->tg);
    for (int i = 0; i < XN; i++) L += c->dloss * l[i];
    return L;
}

static double t_crossentropy_backward(void) {
    float lg[XN * XVP], lse[XN], g[XN * XVP];
    int32_t tg[XN];
    ce_inputs(lg, tg);
    double lgd[XN * XVP], rl[XN], rs[XN], r[XN * XVP], dloss = 1.0 / XN;
    to_d(lgd, lg, XN * XVP);
    ref_ce(rl, rs, lgd, tg);
    for (int i = 0; i < XN; i++)
        for (int v = 0; v < XVP; v++)
            r[i * XVP + v] = v < XV && tg[i] >= 0
                                 ? (exp(lgd[i * XVP + v] - rs[i]) - (v == tg[i])) * dloss : 0.0;
    float *dlg = dput(lg, sizeof lg), *ds = dput(NULL, sizeof lse);
    int32_t *dt = dput(tg, sizeof tg);
    (void)g_be->crossentropy_forward(dput(NULL, sizeof lse), ds, dlg, dt, XN, XV, XVP);
    g_be->crossentropy_backward(dlg, ds, dt, XN, XV, XVP, (float)dloss);
    dget(g, dlg, sizeof g);
    double e = cmp_arr("crossentropy_backward", g, r, XN * XVP, TOL);
    ce_ctx c = {tg, dloss};
    for (int k = 0; k < 4; k++) {
        size_t i = (size_t)(k * 23 % (XN * XVP));
        if (i % XVP >= XV) continue;
        double err = rel(g[i], fd(ce_loss, lgd, i, &c));
        CHECK_MSG(err <= TOL_FD, "crossentropy finite difference at %zu: %.3g", i, err);
        e = fmax(e, err);
    }
    emit(g, XN * XVP);
    dfree_all();
    return e;
}

#endif
