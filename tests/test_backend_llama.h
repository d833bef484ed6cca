/* test_backend_llama.h: the tests of the Llama family's ops (RMSNorm, rotary embeddings, SwiGLU),
 * part of tests/test_backend.c, which includes it once after its helpers. Each op runs on odd
 * sizes (C = 21, hd = 20, FF = 13: no multiple of a vector width) and on a second size above
 * HPT_PAR_MIN, so the threaded path runs; its outputs are compared with a double-precision
 * reference written here from the op's definition, and each backward with central differences
 * of that reference (small sizes: the whole gradient) and with its double analytic form (large).
 * Rows are independent in these ops: the first rows of RMSNorm's and SwiGLU's large runs must
 * equal their small runs' to the bit on the CPU (the threaded path computes what one thread
 * does). */
#ifndef HPT_TEST_BACKEND_LLAMA_H
#define HPT_TEST_BACKEND_LLAMA_H

/* ================================ RMSNorm ================================ */
enum { RN = 7, RC = 21, RNL = 1601 }; /* RNL * RC = 33621 > HPT_PAR_MIN */
#define REPS 1e-5f

static void ref_rms(double *out, double *rstd, const double *x, const double *w, int N) {
    for (int i = 0; i < N; i++) {
        double ss = 0.0;
        for (int c = 0; c < RC; c++) ss += x[i * RC + c] * x[i * RC + c];
        double r = 1.0 / sqrt(ss / RC + (double)REPS);
        for (int c = 0; c < RC; c++) out[i * RC + c] = x[i * RC + c] * r * w[c];
        if (rstd) rstd[i] = r;
    }
}

static void rms_inputs(float *x, float *w, int N) {
    fill_rand(x, (size_t)N * RC, 2.0f);
    for (int i = 0; i < N; i++) x[i * RC + i % RC] += (float)(i % 5); /* rows of unequal scale */
    fill_rand(w, RC, 1.5f);
}

static int is_cpu(void) { return g_be == hpt_backend_cpu(); }

static double t_rmsnorm_forward(void) {
    static float x[RNL * RC], w[RC], out[RNL * RC], rstd[RNL], out_s[RN * RC], rstd_s[RN];
    static double xd[RNL * RC], wd[RC], ro[RNL * RC], rr[RNL];
    rms_inputs(x, w, RNL);
    to_d(xd, x, (size_t)RNL * RC), to_d(wd, w, RC);
    ref_rms(ro, rr, xd, wd, RNL);
    double e = 0.0;
    int sizes[2] = {RN, RNL};
    for (int k = 0; k < 2; k++) {
        int N = sizes[k];
        float *dy = dput(NULL, (size_t)N * RC * 4), *dr = dput(NULL, (size_t)N * 4);
        g_be->rmsnorm_forward(dy, dr, dput(x, (size_t)N * RC * 4), dput(w, sizeof w), N, RC, REPS);
        dget(out, dy, (size_t)N * RC * 4), dget(rstd, dr, (size_t)N * 4);
        e = fmax(e, cmp_arr("rmsnorm_forward out", out, ro, (size_t)N * RC, TOL));
        e = fmax(e, cmp_arr("rmsnorm_forward rstd", rstd, rr, (size_t)N, TOL));
        emit(out, (size_t)N * RC), emit(rstd, (size_t)N);
        if (k == 0) {
            memcpy(out_s, out, sizeof out_s), memcpy(rstd_s, rstd, sizeof rstd_s);
        } else if (is_cpu()) {
            CHECK_MSG(!memcmp(out, out_s, sizeof out_s) && !memcmp(rstd, rstd_s, sizeof rstd_s),
                      "rmsnorm_forward: the threaded rows differ from the one-thread rows");
        }
        dfree_all();
    }
    return e;
}

static double t_rmsnorm_apply(void) {
    static float x[RN * RC], w[RC], out[RN * RC], out2[RN * RC];
    static double xd[RN * RC], wd[RC], ro[RN * RC];
    rms_inputs(x, w, RN);
    to_d(xd, x, RN * RC), to_d(wd, w, RC);
    ref_rms(ro, NULL, xd, wd, RN);
    float *dx = dput(x, sizeof x), *dw = dput(w, sizeof w), *dr = dput(NULL, RN * 4);
    float *dy = dput(NULL, sizeof out), *dy2 = dput(NULL, sizeof out2);
    g_be->rmsnorm_forward(dy, dr, dx, dw, RN, RC, REPS);
    g_be->rmsnorm_apply(dy2, dx, dw, dr, RN, RC);
    dget(out, dy, sizeof out), dget(out2, dy2, sizeof out2);
    double e = cmp_arr("rmsnorm_apply", out2, ro, RN * RC, TOL);
    /* recomputation relies on it: the forward's bits from its saved rstd */
    CHECK_MSG(!memcmp(out, out2, sizeof out), "%s: rmsnorm_apply differs from the forward's out", g_be->name);
    emit(out2, RN * RC);
    dfree_all();
    return e;
}

typedef struct {
    const float *R;
} rms_ctx;
static double rms_loss(const double *th, const void *vctx) { /* theta = [x (RN, RC) | w (RC)] */
    const rms_ctx *c = vctx;
    static double out[RN * RC];
    ref_rms(out, NULL, th, th + RN * RC, RN);
    double L = 0.0;
    for (int i = 0; i < RN * RC; i++) L += c->R[i] * out[i];
    return L;
}

static double t_rmsnorm_backward(void) {
    static float x[RNL * RC], w[RC], dout[RNL * RC], dinp[RNL * RC], dw[RC], gi[RNL * RC], gw[RC];
    static double th[RN * RC + RC], ri[RNL * RC], rw[RC], xd[RNL * RC], wd[RC], rr[RNL], tmp[RNL * RC];
    rms_inputs(x, w, RNL);
    fill_rand(dout, (size_t)RNL * RC, 1.0f);
    fill_rand(dinp, (size_t)RNL * RC, 1.0f); /* accumulated into */
    fill_rand(dw, RC, 1.0f);
    double e = 0.0;
    int sizes[2] = {RN, RNL};
    for (int k = 0; k < 2; k++) {
        int N = sizes[k];
        size_t NC = (size_t)N * RC;
        float *dx = dput(x, NC * 4), *dW = dput(w, sizeof w), *dr = dput(NULL, (size_t)N * 4);
        g_be->rmsnorm_forward(dput(NULL, NC * 4), dr, dx, dW, N, RC, REPS);
        float *ddi = dput(dinp, NC * 4), *ddw = dput(dw, sizeof dw);
        g_be->rmsnorm_backward(ddi, ddw, dput(dout, NC * 4), dx, dW, dr, N, RC);
        dget(gi, ddi, NC * 4), dget(gw, ddw, sizeof gw);
        if (k == 0) { /* the whole central-difference gradient of sum(dout * rmsnorm) */
            to_d(th, x, RN * RC), to_d(th + RN * RC, w, RC);
            rms_ctx c = {dout};
            for (int i = 0; i < RN * RC; i++) ri[i] = dinp[i] + fd(rms_loss, th, (size_t)i, &c);
            for (int i = 0; i < RC; i++) rw[i] = dw[i] + fd(rms_loss, th, (size_t)(RN * RC + i), &c);
            e = fmax(e, cmp_arr("rmsnorm_backward dinp (finite differences)", gi, ri, NC, TOL_FD));
            e = fmax(e, cmp_arr("rmsnorm_backward dw (finite differences)", gw, rw, RC, TOL_FD));
        } else { /* the analytic gradient in double (the threaded path) */
            to_d(xd, x, NC), to_d(wd, w, RC);
            ref_rms(tmp, rr, xd, wd, N);
            for (int c = 0; c < RC; c++) rw[c] = dw[c];
            for (int i = 0; i < N; i++) {
                const double *xi = xd + (size_t)i * RC, r = rr[i];
                const float *d = dout + (size_t)i * RC;
                double dot = 0.0;
                for (int c = 0; c < RC; c++) dot += wd[c] * d[c] * xi[c];
                for (int c = 0; c < RC; c++) {
                    ri[(size_t)i * RC + c] = dinp[(size_t)i * RC + c] + r * (wd[c] * d[c] - xi[c] * r * r * dot / RC);
                    rw[c] += d[c] * xi[c] * r;
                }
            }
            e = fmax(e, cmp_arr("rmsnorm_backward dinp", gi, ri, NC, TOL));
            /* dw sums 1601 rows in fp32: 1e-5 of the sum's magnitude (~40) */
            e = fmax(e, cmp_arr("rmsnorm_backward dw", gw, rw, RC, 1e-4));
        }
        emit(gi, NC), emit(gw, RC);
        dfree_all();
    }
    return e;
}

/* ================================ rotary embeddings ================================ */
enum { QB = 2, QT = 5, QHD = 20, QHALF = QHD / 2, QPOS0 = 3, QMAXT = 140 };
static float g_cs[QMAXT * QHALF], g_sn[QMAXT * QHALF]; /* the tables */
/* the tables (maxT, hd/2): cos, sin of p * 10000^(-2i/hd), rounded to fp32 (the arch's job) */
static void rope_tables(float *cs, float *sn) {
    for (int p = 0; p < QMAXT; p++)
        for (int i = 0; i < QHALF; i++) {
            double a = p * pow(10000.0, -2.0 * i / QHD);
            cs[p * QHALF + i] = (float)cos(a), sn[p * QHALF + i] = (float)sin(a);
        }
}

/* y = the forward rotation (dir 1) or its transpose (dir -1) of the q and k heads of x
 * (B,T,(NH+2NKV)*hd), v copied, in double from the fp32 tables. */
static void ref_rope(double *y, const double *x, const float *cs, const float *sn, int B, int T,
                     int NH, int NKV, int pos0, int dir) {
    int W = (NH + 2 * NKV) * QHD;
    for (int r = 0; r < B * T; r++) {
        int p = pos0 + r % T;
        for (int j = 0; j < W; j++) y[r * W + j] = x[r * W + j];
        for (int h = 0; h < NH + NKV; h++)
            for (int i = 0; i < QHALF; i++) {
                double a = x[r * W + h * QHD + i], b = x[r * W + h * QHD + QHALF + i];
                double c = cs[p * QHALF + i], s = dir * (double)sn[p * QHALF + i];
                y[r * W + h * QHD + i] = a * c - b * s;
                y[r * W + h * QHD + QHALF + i] = b * c + a * s;
            }
    }
}

typedef struct {
    const float *dy; /* the loss's weights */
    int B, T, NH, NKV, pos0;
} rope_ctx;
static double rope_loss(const double *x, const void *vctx) { /* sum dy * rope(x) */
    const rope_ctx *c = vctx;
    static double y[2 * QT * 9 * QHD];
    ref_rope(y, x, g_cs, g_sn, c->B, c->T, c->NH, c->NKV, c->pos0, 1);
    double L = 0.0;
    for (int j = 0; j < c->B * c->T * (c->NH + 2 * c->NKV) * QHD; j++) L += c->dy[j] * y[j];
    return L;
}

/* (B, T, NH, NKV, pos0): GQA groups of 3, 2 and 1; one above HPT_PAR_MIN, from pos0 0; then
 * inference's use, B = 1 and n = 4 new tokens at positions 131 .. 134 */
enum { N_ROPE_CASES = 5, ROPE_BIG = 3 };
static const int k_rope_cases[N_ROPE_CASES][5] = {
    {QB, QT, 3, 1, QPOS0}, {QB, QT, 4, 2, QPOS0}, {QB, QT, 3, 3, 0}, {2, 140, 4, 2, 0}, {1, 4, 4, 2, 131}};

static double t_rope_impl(int backward) {
    float *cs = g_cs, *sn = g_sn;
    static float x[2 * 140 * 8 * QHD], y[2 * 2 * 140 * 8 * QHD];
    static double xd[2 * 140 * 8 * QHD], r[2 * 140 * 8 * QHD];
    rope_tables(cs, sn);
    double e = 0.0;
    for (int k = 0; k < N_ROPE_CASES; k++) {
        int B = k_rope_cases[k][0], T = k_rope_cases[k][1], NH = k_rope_cases[k][2];
        int NKV = k_rope_cases[k][3], pos0 = k_rope_cases[k][4];
        size_t n = (size_t)B * T * (NH + 2 * NKV) * QHD;
        fill_rand(x, n, 2.0f);
        to_d(xd, x, n);
        ref_rope(r, xd, cs, sn, B, T, NH, NKV, pos0, backward ? -1 : 1);
        float *dx = dput(x, n * 4);
        if (backward)
            g_be->rope_backward(dx, dput(cs, sizeof g_cs), dput(sn, sizeof g_sn), B, T, NH, NKV, QHD, pos0);
        else
            g_be->rope_forward(dx, dput(cs, sizeof g_cs), dput(sn, sizeof g_sn), B, T, NH, NKV, QHD, pos0);
        dget(y, dx, n * 4);
        e = fmax(e, cmp_arr(backward ? "rope_backward" : "rope_forward", y, r, n, TOL));
        int v_same = 1; /* the v heads are not touched */
        int W = (NH + 2 * NKV) * QHD;
        for (int row = 0; row < B * T; row++)
            v_same &= !memcmp(y + (size_t)row * W + (NH + NKV) * QHD, x + (size_t)row * W + (NH + NKV) * QHD,
                              (size_t)NKV * QHD * 4);
        CHECK_MSG(v_same, "%s: %s wrote v", g_be->name, backward ? "rope_backward" : "rope_forward");
        if (backward && k != ROPE_BIG) { /* dx = d/dx0 sum(dy * rope(x0)) by central differences */
            static double th[2 * QT * 9 * QHD];
            fill_rand(y + n, n, 1.0f); /* x0: any point (rope is linear), here random */
            to_d(th, y + n, n);
            rope_ctx c = {x, B, T, NH, NKV, pos0};
            double worst = 0.0;
            for (size_t i = 0; i < n; i += 7) worst = fmax(worst, rel(y[i], fd(rope_loss, th, i, &c)));
            CHECK_MSG(worst <= TOL_FD, "%s: rope_backward finite differences %.3g", g_be->name, worst);
            e = fmax(e, worst);
        }
        emit(y, n);
        dfree_all();
    }
    return e;
}
static double t_rope_forward(void) { return t_rope_impl(0); }
static double t_rope_backward(void) { return t_rope_impl(1); }

/* ========================= SwiGLU and GeGLU (Gemma) ========================= */
enum { SN = 7, SFF = 13, SNL = 2600 }; /* SNL * SFF = 33800 > HPT_PAR_MIN */
/* the activation a(g) of the gate and its derivative, in double: SiLU (gelu 0) or the tanh
 * GELU (gelu 1) */
static double ref_act(int gelu, double g) {
    if (!gelu) return g / (1.0 + exp(-g));
    const double k = 0.7978845608028654;
    return 0.5 * g * (1.0 + tanh(k * (g + 0.044715 * g * g * g)));
}
static double ref_dact(int gelu, double g) {
    if (!gelu) {
        double sg = 1.0 / (1.0 + exp(-g));
        return sg * (1.0 + g * (1.0 - sg));
    }
    const double k = 0.7978845608028654, th = tanh(k * (g + 0.044715 * g * g * g));
    return 0.5 * (1.0 + th) + 0.5 * g * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * g * g);
}

static void swiglu_inputs(float *h, int N) {
    fill_rand(h, (size_t)N * 2 * SFF, 6.0f);
    h[0] = -95.0f, h[1] = 95.0f; /* exp(-g) overflows and underflows in fp32: no NaN */
}

static double t_glu_forward(int gelu) {
    const char *nm = gelu ? "geglu_forward" : "swiglu_forward";
    static float h[SNL * 2 * SFF], out[SNL * SFF], out_s[SN * SFF];
    static double r[SNL * SFF];
    swiglu_inputs(h, SNL);
    for (int i = 0; i < SNL; i++)
        for (int j = 0; j < SFF; j++)
            r[i * SFF + j] = ref_act(gelu, h[i * 2 * SFF + j]) * h[i * 2 * SFF + SFF + j];
    double e = 0.0;
    int sizes[2] = {SN, SNL};
    for (int k = 0; k < 2; k++) {
        int N = sizes[k];
        float *dy = dput(NULL, (size_t)N * SFF * 4);
        (gelu ? g_be->geglu_forward : g_be->swiglu_forward)(dy, dput(h, (size_t)N * 2 * SFF * 4), N, SFF);
        dget(out, dy, (size_t)N * SFF * 4);
        e = fmax(e, cmp_arr(nm, out, r, (size_t)N * SFF, TOL));
        emit(out, (size_t)N * SFF);
        if (k == 0)
            memcpy(out_s, out, sizeof out_s);
        else if (is_cpu())
            CHECK_MSG(!memcmp(out, out_s, sizeof out_s), "%s: threaded rows differ", nm);
        dfree_all();
    }
    return e;
}
static double t_swiglu_forward(void) { return t_glu_forward(0); }
static double t_geglu_forward(void) { return t_glu_forward(1); }

typedef struct {
    const float *R;
    int gelu;
} sw_ctx;
static double sw_loss(const double *h, const void *vctx) { /* sum R * glu(h), SN rows */
    const sw_ctx *c = vctx;
    double L = 0.0;
    for (int i = 0; i < SN; i++)
        for (int j = 0; j < SFF; j++)
            L += c->R[i * SFF + j] * ref_act(c->gelu, h[i * 2 * SFF + j]) * h[i * 2 * SFF + SFF + j];
    return L;
}

static double t_glu_backward(int gelu) {
    const char *nm = gelu ? "geglu_backward" : "swiglu_backward";
    static float h[SNL * 2 * SFF], dout[SNL * SFF], g[SNL * 2 * SFF];
    static double r[SNL * 2 * SFF], th[SN * 2 * SFF];
    swiglu_inputs(h, SNL);
    fill_rand(dout, (size_t)SNL * SFF, 1.0f);
    for (int i = 0; i < SNL; i++) /* the analytic gradient in double */
        for (int j = 0; j < SFF; j++) {
            double gt = h[i * 2 * SFF + j], u = h[i * 2 * SFF + SFF + j], d = dout[i * SFF + j];
            r[i * 2 * SFF + j] = d * u * ref_dact(gelu, gt);
            r[i * 2 * SFF + SFF + j] = d * ref_act(gelu, gt);
        }
    double e = 0.0;
    int sizes[2] = {SN, SNL};
    for (int k = 0; k < 2; k++) {
        int N = sizes[k];
        size_t n2 = (size_t)N * 2 * SFF;
        float *dg = dput(NULL, n2 * 4);
        g_be->memset(dg, 0x7f, n2 * 4); /* overwritten, not accumulated into */
        (gelu ? g_be->geglu_backward : g_be->swiglu_backward)(dg, dput(dout, (size_t)N * SFF * 4),
                                                             dput(h, n2 * 4), N, SFF);
        dget(g, dg, n2 * 4);
        e = fmax(e, cmp_arr(nm, g, r, n2, TOL));
        if (k == 0) { /* the whole central-difference gradient of sum(dout * glu) */
            to_d(th, h, n2);
            static double rf[SN * 2 * SFF];
            sw_ctx c = {dout, gelu};
            for (size_t i = 0; i < n2; i++) rf[i] = fd(sw_loss, th, i, &c);
            e = fmax(e, cmp_arr(gelu ? "geglu_backward (finite differences)"
                                     : "swiglu_backward (finite differences)", g, rf, n2, TOL_FD));
        }
        emit(g, n2);
        dfree_all();
    }
    return e;
}
static double t_swiglu_backward(void) { return t_glu_backward(0); }
static double t_geglu_backward(void) { return t_glu_backward(1); }

#endif
