/* test_backend_optim.h: the tests of the optimizer, quantisation, 16-bit,
 * activation coding, predictor and initialisation ops, part of tests/test_backend.c,
 * which includes it once after its helpers (a test is one source file: tests/tests.cmake).
 * Each op's test runs it on g_be and compares with a double-precision reference written here. */
#ifndef HPT_TEST_BACKEND_OPTIM_H
#define HPT_TEST_BACKEND_OPTIM_H

/* ================================ optimizers ================================ */
enum { ON = 1003 }; /* four 256-value blocks, the last short */
#define LR 1e-2f
#define B1 0.9f
#define B2 0.95f
#define EPS 1e-8f
#define WD 0.1f
#define GS 0.5f
#define STEP 3
static void opt_inputs(float *p, float *g, float *m, float *v) {
    fill_rand(p, ON, 1.0f);
    fill_rand(g, ON, 1.0f);
    fill_rand(m, ON, 0.1f);
    for (int i = 0; i < ON; i++) v[i] = 0.01f * (frand() + 1.0f) + 1e-4f;
}
/* AdamW (PyTorch's): decoupled decay, bias-corrected moments. */
static void ref_adamw(double *p, double *m, double *v, const float *g, int n) {
    double bc1 = 1.0 - pow(B1, STEP), bc2 = 1.0 - pow(B2, STEP);
    for (int i = 0; i < n; i++) {
        double gi = (double)g[i] * GS;
        m[i] = B1 * m[i] + (1.0 - B1) * gi;
        v[i] = B2 * v[i] + (1.0 - B2) * gi * gi;
        p[i] = p[i] * (1.0 - (double)LR * WD) - LR * (m[i] / bc1) / (sqrt(v[i] / bc2) + EPS);
    }
}

static double t_adamw(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double rp[ON], rm[ON], rv[ON];
    to_d(rp, p, ON), to_d(rm, m, ON), to_d(rv, v, ON);
    ref_adamw(rp, rm, rv, g, ON);
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m), *dv = dput(v, sizeof v);
    g_be->adamw(dp, dput(g, sizeof g), dm, dv, ON, LR, B1, B2, EPS, WD, GS, STEP);
    dget(p, dp, sizeof p), dget(m, dm, sizeof m), dget(v, dv, sizeof v);
    double e = cmp_arr("adamw p", p, rp, ON, TOL);
    e = fmax(e, cmp_arr("adamw m", m, rm, ON, TOL));
    e = fmax(e, cmp_arr("adamw v", v, rv, ON, TOL));
    emit(p, ON), emit(m, ON), emit(v, ON);
    dfree_all();
    return e;
}

/* The dynamic maps' largest gap: twice a quantisation's worst error, relative to absmax. */
static double map_gap(const float *map) {
    double gap = 0.0;
    for (int i = 1; i < 256; i++) gap = fmax(gap, (double)map[i] - map[i - 1]);
    return gap;
}
/* A q8 state of n values on the device, from x (host); *codes_h, *absmax_h its host copies. */
static hpt_be_state q8_state(const float *x, size_t n, const float *map, int is_signed, int lut) {
    size_t nb = (n + HPT_Q8_BLOCK - 1) / HPT_Q8_BLOCK;
    hpt_be_state s = {0};
    s.codes = dput(NULL, n);
    s.absmax = dput(NULL, nb * sizeof(float));
    s.map = dput(map, 256 * sizeof(float));
    s.lut = lut ? g_be->q8_lut_of(is_signed) : NULL;
    g_be->q8_quantize(s.codes, s.absmax, dput(x, n * sizeof(float)), n, s.map);
    return s;
}
static void q8_host(double *x, const hpt_be_state *s, size_t n, const float *map) {
    size_t nb = (n + HPT_Q8_BLOCK - 1) / HPT_Q8_BLOCK;
    uint8_t *c = malloc(n);
    float *a = malloc(nb * sizeof(float));
    dget(c, s->codes, n), dget(a, s->absmax, nb * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (double)map[c[i]] * a[i / HPT_Q8_BLOCK];
    free(c), free(a);
}

static double t_adamw_q(void) {
    float p[ON], g[ON], m[ON], v[ON], ms[256], mu[256];
    opt_inputs(p, g, m, v);
    g_be->q8_map(ms, 1);
    g_be->q8_map(mu, 0);
    double e = 0.0;
    /* (a) fp32 state and weights: AdamW itself */
    double rp[ON], rm[ON], rv[ON];
    to_d(rp, p, ON), to_d(rm, m, ON), to_d(rv, v, ON);
    ref_adamw(rp, rm, rv, g, ON);
    float pa[ON], ma[ON], va[ON];
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m), *dv = dput(v, sizeof v), *dg = dput(g, sizeof g);
    g_be->adamw_q(hpt_be_param_f32(dp), dg, (hpt_be_state){.f32 = dm}, (hpt_be_state){.f32 = dv}, ON, LR,
                  B1, B2, EPS, WD, GS, STEP);
    dget(pa, dp, sizeof pa), dget(ma, dm, sizeof ma), dget(va, dv, sizeof va);
    e = fmax(e, cmp_arr("adamw_q fp32 p", pa, rp, ON, TOL));
    e = fmax(e, cmp_arr("adamw_q fp32 m", ma, rm, ON, TOL));
    e = fmax(e, cmp_arr("adamw_q fp32 v", va, rv, ON, TOL));
    emit(pa, ON);
    /* (b) 8-bit state (m signed, sqrt(v) unsigned): the reference starts from the dequantised
     * state; p within TOL, the new state within half the map's largest gap of its block's
     * absmax (plus TOL). The fast table and the binary search give the same bits. */
    float rootv[ON];
    for (int i = 0; i < ON; i++) rootv[i] = sqrtf(v[i]);
    float pq[2][ON];
    for (int lut = 0; lut < 2; lut++) {
        hpt_be_state sm = q8_state(m, ON, ms, 1, lut), sv = q8_state(rootv, ON, mu, 0, lut);
        double m0[ON], r0[ON];
        q8_host(m0, &sm, ON, ms), q8_host(r0, &sv, ON, mu);
        to_d(rp, p, ON);
        for (int i = 0; i < ON; i++) rm[i] = m0[i], rv[i] = r0[i] * r0[i];
        ref_adamw(rp, rm, rv, g, ON);
        float *dp2 = dput(p, sizeof p);
        g_be->adamw_q(hpt_be_param_f32(dp2), dg, sm, sv, ON, LR, B1, B2, EPS, WD, GS, STEP);
        dget(pq[lut], dp2, sizeof p);
        e = fmax(e, cmp_arr("adamw_q 8-bit p", pq[lut], rp, ON, TOL));
        double m1[ON], r1[ON], em = 0.0, ev = 0.0;
        q8_host(m1, &sm, ON, ms), q8_host(r1, &sv, ON, mu);
        for (int b = 0; b * HPT_Q8_BLOCK < ON; b++) {
            double am = 0.0, ar = 0.0;
            for (int i = b * HPT_Q8_BLOCK; i < ON && i < (b + 1) * HPT_Q8_BLOCK; i++)
                am = fmax(am, fabs(rm[i])), ar = fmax(ar, sqrt(rv[i]));
            for (int i = b * HPT_Q8_BLOCK; i < ON && i < (b + 1) * HPT_Q8_BLOCK; i++) {
                em = fmax(em, fabs(m1[i] - rm[i]) / (am * (map_gap(ms) / 2 + TOL)));
                ev = fmax(ev, fabs(r1[i] - sqrt(rv[i])) / (ar * (map_gap(mu) / 2 + TOL)));
            }
        }
        CHECK_MSG(em <= 1.0 && ev <= 1.0, "%s: adamw_q 8-bit state beyond its bound (%.3g, %.3g)",
                  g_be->name, em, ev);
    }
    CHECK_MSG(!memcmp(pq[0], pq[1], sizeof pq[0]), "%s: adamw_q with and without the fast table", g_be->name);
    emit(pq[1], ON);
    /* (c) bf16 weights: stochastic rounding lands on one of the two bf16 neighbours of the fp32
     * result; Kahan's h + c holds it within bf16's rounding of the residue */
    uint16_t h[ON], c[ON];
    for (int i = 0; i < ON; i++) {
        uint32_t u;
        memcpy(&u, &p[i], 4);
        h[i] = (uint16_t)(u >> 16);
        c[i] = 0;
    }
    double pb[ON], mb[ON], vb[ON];
    for (int i = 0; i < ON; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        float f;
        memcpy(&f, &u, 4);
        pb[i] = f;
    }
    to_d(mb, m, ON), to_d(vb, v, ON);
    ref_adamw(pb, mb, vb, g, ON);
    for (int kahan = 0; kahan < 2; kahan++) {
        uint16_t *dh = dput(h, sizeof h), *dc = kahan ? dput(c, sizeof c) : NULL;
        hpt_be_param bp = {NULL, dh, dc, 12345, 0};
        g_be->adamw_q(bp, dg, (hpt_be_state){.f32 = dput(m, sizeof m)}, (hpt_be_state){.f32 = dput(v, sizeof v)},
                      ON, LR, B1, B2, EPS, WD, GS, STEP);
        uint16_t hh[ON], cc[ON];
        dget(hh, dh, sizeof hh);
        if (kahan) dget(cc, dc, sizeof cc);
        double worst = 0.0;
        for (int i = 0; i < ON; i++) {
            uint32_t u = (uint32_t)hh[i] << 16, uc = kahan ? (uint32_t)cc[i] << 16 : 0;
            float f, fc;
            memcpy(&f, &u, 4), memcpy(&fc, &uc, 4);
            double got = (double)f + fc, ulp = ldexp(1.0, ilogb(pb[i]) - 7);
            /* sr: below one bf16 ulp; kahan: the residue's own bf16 rounding, 2^-8 of it */
            worst = fmax(worst, fabs(got - pb[i]) / (kahan ? ulp * 1e-2 : ulp * (1 + 1e-6)));
        }
        CHECK_MSG(worst <= 1.0, "%s: adamw_q bf16 weights (%s) %.3g of the bound", g_be->name,
                  kahan ? "kahan" : "sr", worst);
        float hf[ON];
        for (int i = 0; i < ON; i++) hf[i] = hh[i];
        emit(hf, ON);
    }
    dfree_all();
    return e;
}

static double t_lion(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double rp[ON], rm[ON];
    for (int i = 0; i < ON; i++) {
        double gi = (double)g[i] * GS, c = B1 * (double)m[i] + (1.0 - B1) * gi;
        rp[i] = p[i] * (1.0 - (double)LR * WD) - LR * (double)((c > 0) - (c < 0));
        rm[i] = B2 * (double)m[i] + (1.0 - B2) * gi;
    }
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m);
    g_be->lion(hpt_be_param_f32(dp), dput(g, sizeof g), (hpt_be_state){.f32 = dm}, ON, LR, B1, B2, WD, GS);
    dget(p, dp, sizeof p), dget(m, dm, sizeof m);
    double e = fmax(cmp_arr("lion p", p, rp, ON, TOL), cmp_arr("lion m", m, rm, ON, TOL));
    emit(p, ON), emit(m, ON);
    dfree_all();
    return e;
}

static double t_sgd(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double rp[ON], rm[ON];
    for (int i = 0; i < ON; i++) { /* PyTorch: d = g + wd p; buf = mom buf + d; p -= lr buf */
        double d = (double)g[i] * GS + WD * (double)p[i];
        rm[i] = B1 * (double)m[i] + d;
        rp[i] = p[i] - LR * rm[i];
    }
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m);
    g_be->sgd(hpt_be_param_f32(dp), dput(g, sizeof g), (hpt_be_state){.f32 = dm}, ON, LR, B1, WD, GS);
    dget(p, dp, sizeof p), dget(m, dm, sizeof m);
    double e = fmax(cmp_arr("sgd p", p, rp, ON, TOL), cmp_arr("sgd m", m, rm, ON, TOL));
    emit(p, ON), emit(m, ON);
    dfree_all();
    return e;
}

/* Adam-mini over ON values in blocks of row: rows of 17 (59 whole rows, blocks straddling rows)
 * and of 16 (62 whole rows and a last one of 11 values, a block of its own: v's 63rd entry, its
 * mean over its 11 values; nothing read or written past v's end). */
static double adam_mini_rows(int row) {
    const int nr = (ON + row - 1) / row;
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double rp[ON], rm[ON], rv[ON], bc1 = 1.0 - pow(B1, STEP), bc2 = 1.0 - pow(B2, STEP);
    for (int r = 0; r < nr; r++) {
        const int len = ON - r * row < row ? ON - r * row : row;
        double s = 0.0;
        for (int j = 0; j < len; j++) s += pow((double)g[r * row + j] * GS, 2);
        rv[r] = B2 * (double)v[r] + (1.0 - B2) * s / len;
    }
    for (int i = 0; i < ON; i++) {
        rm[i] = B1 * (double)m[i] + (1.0 - B1) * (double)g[i] * GS;
        rp[i] = p[i] * (1.0 - (double)LR * WD) - LR * (rm[i] / bc1) / (sqrt(rv[i / row] / bc2) + EPS);
    }
    float *dp = dput(p, sizeof p), *dm = dput(m, sizeof m), *dv = dput(v, (size_t)nr * sizeof(float));
    g_be->adam_mini(hpt_be_param_f32(dp), dput(g, sizeof g), (hpt_be_state){.f32 = dm}, dv, ON,
                    (size_t)row, LR, B1, B2, EPS, WD, GS, STEP);
    dget(p, dp, sizeof p), dget(m, dm, sizeof m), dget(v, dv, (size_t)nr * sizeof(float));
    double e = cmp_arr("adam_mini p", p, rp, ON, TOL);
    e = fmax(e, cmp_arr("adam_mini m", m, rm, ON, TOL));
    e = fmax(e, cmp_arr("adam_mini v", v, rv, (size_t)nr, TOL));
    emit(p, ON), emit(m, ON), emit(v, (size_t)nr);
    dfree_all();
    return e;
}

static double t_adam_mini(void) { return fmax(adam_mini_rows(17), adam_mini_rows(16)); }

/* ================================ quantisation ================================ */
static double t_q8_map(void) {
    float ms[256], mu[256];
    g_be->q8_map(ms, 1);
    g_be->q8_map(mu, 0);
    int asc = 1, zero = 0;
    for (int i = 1; i < 256; i++) asc &= ms[i] > ms[i - 1] && mu[i] > mu[i - 1];
    for (int i = 0; i < 256; i++) zero |= ms[i] == 0.0f;
    CHECK_MSG(asc, "%s: q8 maps not ascending", g_be->name);
    CHECK(zero && ms[255] == 1.0f && ms[0] >= -1.0f);
    CHECK(mu[0] == HPT_Q8_UNSIGNED_MIN && mu[255] == 1.0f);
    emit(ms, 256), emit(mu, 256);
    return asc ? 0.0 : 1.0;
}

/* q8_quantize's codes are the nearest (ties to the lower) of the map, checked by scanning all
 * 256; absmax is the block's largest |x|; the round trip within half the largest gap. */
static double t_q8_quantize(void) {
    float ms[256];
    g_be->q8_map(ms, 1);
    float x[ON], y[ON];
    fill_rand(x, ON, 3.0f);
    x[5] = 0.0f;
    size_t nb = (ON + HPT_Q8_BLOCK - 1) / HPT_Q8_BLOCK;
    uint8_t *dc = dput(NULL, ON), c[ON];
    float *da = dput(NULL, nb * sizeof(float)), *dm = dput(ms, sizeof ms), a[4], *dy = dput(NULL, sizeof y);
    g_be->q8_quantize(dc, da, dput(x, sizeof x), ON, dm);
    g_be->q8_dequantize(dy, dc, da, ON, dm);
    dget(c, dc, ON), dget(a, da, nb * sizeof(float)), dget(y, dy, sizeof y);
    int nearest = 1;
    double e = 0.0;
    for (size_t b = 0; b < nb; b++) {
        double am = 0.0;
        for (size_t i = b * HPT_Q8_BLOCK; i < ON && i < (b + 1) * HPT_Q8_BLOCK; i++) am = fmax(am, fabs(x[i]));
        CHECK(a[b] == (float)am);
        for (size_t i = b * HPT_Q8_BLOCK; i < ON && i < (b + 1) * HPT_Q8_BLOCK; i++) {
            double t = x[i] / (double)a[b];
            int best = 0;
            for (int k = 1; k < 256; k++)
                if (fabs(t - ms[k]) < fabs(t - ms[best])) best = k;
            /* ties to the lower code, and fp32 division may round a hair: accept a code
             * within 1e-6 of the best distance */
            nearest &= fabs(t - ms[c[i]]) <= fabs(t - ms[best]) + 1e-6;
            e = fmax(e, fabs(y[i] - x[i]) / (a[b] * map_gap(ms) / 2));
            nearest &= y[i] == ms[c[i]] * a[b];
        }
    }
    CHECK_MSG(nearest, "%s: q8_quantize not the nearest code", g_be->name);
    /* the code is chosen from fp32 x / absmax: the 1e-6 slack above, 1e-4 of half a gap */
    CHECK_MSG(e <= 1.0 + 1e-4, "%s: q8 round trip %.3g of half the largest gap", g_be->name, e);
    float cf[ON];
    for (int i = 0; i < ON; i++) cf[i] = c[i];
    emit(cf, ON), emit(y, ON);
    dfree_all();
    return e;
}

/* f16 in double: the value of bits h. */
static double ref_f16_value(uint16_t h) {
    int s = h >> 15, ex = (h >> 10) & 31, mant = h & 1023;
    double v = ex == 0 ? ldexp(mant, -24) : ex == 31 ? (mant ? NAN : INFINITY) : ldexp(1024 + mant, ex - 25);
    return s ? -v : v;
}
/* x rounded to the nearest f16 (ties to even), in double; overflow -> inf. */
static double ref_f16_round(double x) {
    if (!isfinite(x) || x == 0.0) return x;
    int e = ilogb(x);
    double q = ldexp(1.0, (e < -14 ? -14 : e) - 10); /* the quantum (subnormals: 2^-24) */
    double r = rint(x / q) * q;                      /* rint: nearest, ties to even */
    return fabs(r) > 65504.0 ? copysign(INFINITY, x) : r;
}
static double ref_bf16_round(double x) {
    if (!isfinite(x) || x == 0.0) return x;
    int e = ilogb(x);
    double q = ldexp(1.0, (e < -126 ? -126 : e) - 7);
    double r = rint(x / q) * q;
    return fabs(r) > 3.3895313892515355e38 ? copysign(INFINITY, x) : r;
}
static double bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void half_inputs(float *x, int n) {
    fill_rand(x, n, 1.0f);
    for (int i = 0; i < n; i++) x[i] = ldexpf(x[i], (i % 45) - 30); /* 2^-30 .. 2^14: f16 subnormals, no overflow */
    float sp[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -70000.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                  1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 3e38f, NAN};
    for (size_t i = 0; i < sizeof sp / sizeof *sp; i++) x[i] = sp[i];
}

static double t_narrow(int bf) {
    enum { HN = 301 };
    float x[HN];
    uint16_t h[HN];
    half_inputs(x, HN);
    double e = 0.0;
    /* without the overflowing values (and NaN) first: flag 0; then all of them: flag 1 */
    for (int all = 0; all < 2; all++) {
        int first = all ? 0 : 13;
        float *dx = dput(x + first, (HN - first) * sizeof(float));
        uint16_t *dh = dput(NULL, (HN - first) * sizeof(uint16_t));
        int ovf = bf ? g_be->bf16_narrow(dh, dx, HN - first) : g_be->f16_narrow(dh, dx, HN - first);
        dget(h, dh, (HN - first) * sizeof(uint16_t));
        int exact = 1, want_ovf = 0;
        for (int i = first; i < HN; i++) {
            double r = bf ? ref_bf16_round(x[i]) : ref_f16_round(x[i]);
            double got = bf ? bf16_value(h[i - first]) : ref_f16_value(h[i - first]);
            want_ovf |= !isfinite(r);
            exact &= isnan(r) ? isnan(got) : got == r && !signbit(got) == !signbit(r);
        }
        CHECK_MSG(exact, "%s: %s_narrow is not the nearest-even value", g_be->name, bf ? "bf16" : "f16");
        CHECK_MSG(ovf == want_ovf, "%s: %s_narrow overflow flag %d, expected %d", g_be->name,
                  bf ? "bf16" : "f16", ovf, want_ovf);
        e = fmax(e, exact ? 0.0 : 1.0);
        float hf[HN];
        for (int i = 0; i < HN - first; i++) hf[i] = h[i];
        emit(hf, (size_t)(HN - first));
        /* in place: h over x's own bytes */
        g_be->copy(dx, x + first, (HN - first) * sizeof(float), HPT_COPY_H2D);
        if (bf) g_be->bf16_narrow((uint16_t *)(void *)dx, dx, HN - first);
        else g_be->f16_narrow((uint16_t *)(void *)dx, dx, HN - first);
        uint16_t h2[HN];
        dget(h2, dx, (HN - first) * sizeof(uint16_t));
        CHECK_MSG(!memcmp(h, h2, (HN - first) * sizeof(uint16_t)), "%s: narrowing in place differs", g_be->name);
        dfree_all();
    }
    return e;
}
static double t_f16_narrow(void) { return t_narrow(0); }
static double t_bf16_narrow(void) { return t_narrow(1); }

/* Every one of the 65536 patterns, exactly (NaN as NaN). */
static double t_widen(int bf) {
    enum { WN = 65536 };
    uint16_t *h = malloc(WN * sizeof(uint16_t));
    float *x = malloc(WN * sizeof(float));
    for (int i = 0; i < WN; i++) h[i] = (uint16_t)i;
    float *dx = dput(NULL, WN * sizeof(float));
    if (bf) g_be->bf16_widen(dx, dput(h, WN * sizeof(uint16_t)), WN);
    else g_be->f16_widen(dx, dput(h, WN * sizeof(uint16_t)), WN);
    dget(x, dx, WN * sizeof(float));
    int exact = 1;
    for (int i = 0; i < WN; i++) {
        double r = bf ? bf16_value(h[i]) : ref_f16_value(h[i]);
        int ok = isnan(r) ? isnan(x[i]) : x[i] == r && !signbit(x[i]) == !signbit(r);
        exact &= ok;
    }
    CHECK_MSG(exact, "%s: %s_widen", g_be->name, bf ? "bf16" : "f16");
    emit(x, WN);
    free(h), free(x);
    dfree_all();
    return exact ? 0.0 : 1.0;
}
static double t_f16_widen(void) { return t_widen(0); }
static double t_bf16_widen(void) { return t_widen(1); }

static double t_bf16_split(void) {
    float x[ON];
    fill_rand(x, ON, 10.0f);
    uint16_t h[ON], c[ON], h0[ON];
    float *dx = dput(x, sizeof x);
    uint16_t *dh = dput(NULL, sizeof h), *dc = dput(NULL, sizeof c), *dh0 = dput(NULL, sizeof h0);
    g_be->bf16_split(dh, dc, dx, ON);
    g_be->bf16_split(dh0, NULL, dx, ON);
    dget(h, dh, sizeof h), dget(c, dc, sizeof c), dget(h0, dh0, sizeof h0);
    int exact = !memcmp(h, h0, sizeof h);
    for (int i = 0; i < ON; i++) {
        double hv = bf16_value(h[i]);
        exact &= hv == ref_bf16_round(x[i]);
        exact &= bf16_value(c[i]) == ref_bf16_round((double)x[i] - hv); /* the residue, rounded */
    }
    CHECK_MSG(exact, "%s: bf16_split", g_be->name);
    float hf[ON];
    for (int i = 0; i < ON; i++) hf[i] = h[i] * 65536.0f + c[i];
    emit(hf, ON);
    dfree_all();
    return exact ? 0.0 : 1.0;
}

enum { QOC = 13, QC = 24 };
static void q8w_host(const float *w, int8_t *q, float *s) {
    float *dw = dput(w, QOC * QC * sizeof(float));
    int8_t *dq = dput(NULL, QOC * QC);
    float *ds = dput(NULL, QOC * sizeof(float));
    g_be->q8w_quantize(dq, ds, dw, QOC, QC);
    dget(q, dq, QOC * QC), dget(s, ds, QOC * sizeof(float));
}

static double t_q8w_quantize(void) {
    float w[QOC * QC], s[QOC];
    int8_t q[QOC * QC];
    fill_rand(w, QOC * QC, 1.0f);
    q8w_host(w, q, s);
    double e = 0.0;
    for (int o = 0; o < QOC; o++) {
        double am = 0.0;
        for (int c = 0; c < QC; c++) am = fmax(am, fabs(w[o * QC + c]));
        e = fmax(e, rel(s[o], am / 127.0) / TOL);
        for (int c = 0; c < QC; c++) /* round to nearest: within half a step */
            e = fmax(e, fabs((double)q[o * QC + c] * s[o] - w[o * QC + c]) / (0.5 * s[o] * (1 + 1e-5)));
    }
    CHECK_MSG(e <= 1.0, "%s: q8w_quantize %.3g of its bound", g_be->name, e);
    float qf[QOC * QC];
    for (int i = 0; i < QOC * QC; i++) qf[i] = q[i];
    emit(qf, QOC * QC), emit(s, QOC);
    dfree_all();
    return e;
}

static double t_q8w_dequantize(void) {
    float w[QOC * QC], s[QOC], y[QOC * QC];
    int8_t q[QOC * QC];
    fill_rand(w, QOC * QC, 1.0f);
    q8w_host(w, q, s);
    float *dy = dput(NULL, sizeof y);
    g_be->q8w_dequantize(dy, dput(q, sizeof q), dput(s, sizeof s), QOC, QC);
    dget(y, dy, sizeof y);
    int exact = 1; /* one fp32 product each */
    for (int i = 0; i < QOC * QC; i++) exact &= y[i] == (float)((double)s[i / QC] * q[i]);
    CHECK_MSG(exact, "%s: q8w_dequantize", g_be->name);
    emit(y, QOC * QC);
    dfree_all();
    return exact ? 0.0 : 1.0;
}

static double t_q8w_matmul_forward(void) {
    float w[QOC * QC], s[QOC], b[QOC];
    int8_t q[QOC * QC];
    fill_rand(w, QOC * QC, 1.0f);
    fill_rand(b, QOC, 1.0f);
    q8w_host(w, q, s);
    double e = 0.0;
    int rows[2] = {3, 11}; /* the direct int8 path (<= 8 rows) and the GEMM path */
    for (int k = 0; k < 2; k++) {
        int N = rows[k];
        float inp[11 * QC], out[11 * QOC], out0[11 * QOC];
        fill_rand(inp, (size_t)N * QC, 1.0f);
        fill_rand(out0, (size_t)N * QOC, 1.0f);
        double ref[11 * QOC];
        for (int i = 0; i < N; i++)
            for (int o = 0; o < QOC; o++) {
                double acc = k ? out0[i * QOC + o] : 0.0;
                for (int c = 0; c < QC; c++) acc += (double)inp[i * QC + c] * ((double)s[o] * q[o * QC + c]);
                ref[i * QOC + o] = acc + (k ? 0.0 : b[o]);
            }
        float *dout = dput(out0, (size_t)N * QOC * sizeof(float));
        g_be->q8w_matmul_forward(dout, dput(inp, (size_t)N * QC * sizeof(float)), dput(q, sizeof q),
                                 dput(s, sizeof s), k ? NULL : dput(b, sizeof b), N, QC, QOC, k,
                                 dput(NULL, HPT_Q8W_TILE * QC * sizeof(float)));
        dget(out, dout, (size_t)N * QOC * sizeof(float));
        e = fmax(e, cmp_arr("q8w_matmul_forward", out, ref, (size_t)N * QOC, TOL));
        emit(out, (size_t)N * QOC);
        dfree_all();
    }
    return e;
}

/* ================================ activation coding ================================ */
enum { CR = 7, CW = 37 };
static double t_act_code_bytes(void) {
    int ok = g_be->act_code_bytes(HPT_ACT_CODE_INT8, CR, CW) == CR * CW + CR * sizeof(float) &&
             g_be->act_code_bytes(HPT_ACT_CODE_BF16, CR, CW) == CR * CW * sizeof(uint16_t);
    CHECK_MSG(ok, "%s: act_code_bytes (int8: a byte per value and an fp32 scale per row; bf16: two "
              "bytes per value)", g_be->name);
    emit1(ok);
    return ok ? 0.0 : 1.0;
}

/* int8: per-row scale absmax / 127, each value within half a step; bf16: nearest even. The
 * load on a helper thread (par 0) gives the same bits as on the team (par 1). */
static double t_act_code(void) {
    float x[CR * CW], y[CR * CW], y2[CR * CW];
    fill_rand(x, CR * CW, 4.0f);
    double e = 0.0;
    for (int k = 1; k <= 2; k++) {
        hpt_act_code code = (hpt_act_code)k;
        size_t bytes = g_be->act_code_bytes(code, CR, CW);
        void *dst = dput(NULL, bytes);
        float *dx = dput(x, sizeof x), *dy = dput(NULL, sizeof y);
        g_be->act_code_store(code, dst, dx, CR, CW);
        g_be->act_code_load(code, dy, dst, CR, CW, 1);
        dget(y, dy, sizeof y);
        g_be->act_code_load(code, dy, dst, CR, CW, 0);
        dget(y2, dy, sizeof y2);
        CHECK(!memcmp(y, y2, sizeof y));
        for (int r = 0; r < CR; r++) {
            double am = 0.0;
            for (int c = 0; c < CW; c++) am = fmax(am, fabs(x[r * CW + c]));
            for (int c = 0; c < CW; c++) {
                double xv = x[r * CW + c], bound = code == HPT_ACT_CODE_INT8 ? am / 254.0 * (1 + 1e-5) : 0.0;
                double err = code == HPT_ACT_CODE_INT8 ? fabs(y[r * CW + c] - xv) / bound
                                                       : (y[r * CW + c] == ref_bf16_round(xv) ? 0.0 : 2.0);
                e = fmax(e, err);
            }
        }
        emit(y, CR * CW);
        dfree_all();
    }
    CHECK_MSG(e <= 1.0, "%s: act_code round trip %.3g of its bound", g_be->name, e);
    return e;
}

/* ================================ predictors and initialisation ================================ */
static double t_fit(int velocity) {
    float s0[ON], s1[ON], w[ON];
    fill_rand(s0, ON, 1.0f), fill_rand(s1, ON, 1.0f), fill_rand(w, ON, 1.0f);
    double r0[ON], r1[ON];
    for (int i = 0; i < ON; i++) {
        r1[i] = velocity ? 0.3 * s1[i] - 0.7 * s0[i] : 0.9 * ((double)s1[i] + s0[i]);
        r0[i] = velocity ? s0[i] : 0.9 * (double)s0[i] + w[i];
    }
    float *d0 = dput(s0, sizeof s0), *d1 = dput(s1, sizeof s1);
    if (velocity) g_be->fit_velocity(d1, d0, ON, 0.3f, -0.7f);
    else g_be->fit_observe(d0, d1, dput(w, sizeof w), ON, 0.9f);
    dget(s0, d0, sizeof s0), dget(s1, d1, sizeof s1);
    double e = fmax(cmp_arr("fit s0", s0, r0, ON, TOL), cmp_arr("fit s1", s1, r1, ON, TOL));
    emit(s0, ON), emit(s1, ON);
    dfree_all();
    return e;
}
static double t_fit_observe(void) { return t_fit(0); }
static double t_fit_velocity(void) { return t_fit(1); }

static double t_predict_adam(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    const double b2k = 0.9, bc1 = 0.3, bc2 = 0.2;
    double r[ON], ss = 0.0;
    for (int i = 0; i < ON; i++) {
        double vk = b2k * v[i] + (1 - b2k) * (double)m[i] * m[i];
        double u = LR * ((m[i] / bc1) / (sqrt(vk / bc2) + EPS) + WD * (double)p[i]);
        r[i] = p[i] - u;
        ss += u * u;
    }
    float *dp = dput(p, sizeof p);
    double got = g_be->predict_adam(dp, dput(m, sizeof m), dput(v, sizeof v), ON, LR, WD, (float)b2k,
                                    (float)bc1, (float)bc2, EPS);
    dget(p, dp, sizeof p);
    double e = fmax(cmp_arr("predict_adam", p, r, ON, TOL), fabs(got - ss) / ss);
    CHECK_MSG(fabs(got - ss) / ss <= 1e-4, "%s: predict_adam's sum of squares", g_be->name);
    emit(p, ON), emit1(got);
    dfree_all();
    return e;
}

static double t_predict_linear(void) {
    float p[ON], vel[ON];
    fill_rand(p, ON, 1.0f), fill_rand(vel, ON, 1e-2f);
    double r[ON], ss = 0.0;
    for (int i = 0; i < ON; i++) {
        double u = 1.7 * (double)vel[i];
        r[i] = p[i] + u;
        ss += u * u;
    }
    float *dp = dput(p, sizeof p);
    double got = g_be->predict_linear(dp, dput(vel, sizeof vel), ON, 1.7f);
    dget(p, dp, sizeof p);
    double e = fmax(cmp_arr("predict_linear", p, r, ON, TOL), fabs(got - ss) / ss);
    CHECK_MSG(fabs(got - ss) / ss <= 1e-5, "%s: predict_linear's sum of squares", g_be->name);
    emit(p, ON), emit1(got);
    dfree_all();
    return e;
}

static double t_add_normal(void) {
    float p[ON];
    fill_rand(p, ON, 1.0f);
    hpt_rng rng;
    hpt_rng_seed(&rng, 99);
    double r[ON], ss = 0.0;
    for (int i = 0; i < ON; i++) { /* core's generator, in order */
        double u = 0.1 * (double)hpt_rng_normal(&rng);
        r[i] = p[i] + u;
        ss += u * u;
    }
    float *dp = dput(p, sizeof p);
    double got = g_be->add_normal(dp, ON, 99, 0.1f);
    dget(p, dp, sizeof p);
    double e = fmax(cmp_arr("add_normal", p, r, ON, TOL), fabs(got - ss) / ss);
    CHECK_MSG(fabs(got - ss) / ss <= 1e-5, "%s: add_normal's sum of squares", g_be->name);
    emit(p, ON);
    dfree_all();
    return e;
}

static double t_adam_step_sumsq(void) {
    float p[ON], g[ON], m[ON], v[ON];
    opt_inputs(p, g, m, v);
    double ss = 0.0;
    for (int i = 0; i < ON; i++) {
        double u = (m[i] / 0.3) / (sqrt(v[i] / 0.2) + EPS);
        ss += u * u;
    }
    double got = g_be->adam_step_sumsq(dput(m, sizeof m), dput(v, sizeof v), ON, 0.3f, 0.2f, EPS);
    double e = fabs(got - ss) / ss;
    CHECK_MSG(e <= 1e-5, "%s: adam_step_sumsq %g, reference %g", g_be->name, got, ss);
    emit1(got);
    dfree_all();
    return e;
}

/* Box-Muller in double from core's uniform stream: chunk k of 4096 from the seed key ^ k, both
 * outputs of each pair (cos then sin). libmvec's logf/cosf/sinf: 4 ulp, inside TOL. */
static double t_init_normal(void) {
    enum { TOTAL = 70003, LO = 4000, HI = 9001 }; /* above 65536: the threaded path */
    const uint64_t key = 0x1234567ull;
    const float sd = 0.02f;
    float *x = malloc(TOTAL * sizeof(float)), part[HI - LO];
    double *r = malloc(TOTAL * sizeof(double));
    for (size_t c0 = 0; c0 < TOTAL; c0 += 4096) {
        hpt_rng rng;
        hpt_rng_seed(&rng, key ^ (uint64_t)(c0 / 4096));
        size_t len = TOTAL - c0 < 4096 ? TOTAL - c0 : 4096;
        for (size_t i = 0; i < len; i += 2) {
            double u1 = 1.0f - hpt_rng_uniform(&rng), u2 = hpt_rng_uniform(&rng);
            double rad = sd * sqrt(-2.0 * log(u1)), a = 2.0 * PI * u2;
            r[c0 + i] = rad * cos(a);
            if (i + 1 < len) r[c0 + i + 1] = rad * sin(a);
        }
    }
    float *dx = dput(NULL, TOTAL * sizeof(float)), *dpart = dput(NULL, sizeof part);
    g_be->init_normal(dx, 0, TOTAL, TOTAL, sd, key);
    g_be->init_normal(dpart, LO, HI, TOTAL, sd, key);
    dget(x, dx, TOTAL * sizeof(float)), dget(part, dpart, sizeof part);
    /* absolute: the values are 0.02-scale, so relative to 0.02 */
    double e = 0.0;
    for (int i = 0; i < TOTAL; i++) e = fmax(e, fabs(x[i] - r[i]) / sd);
    CHECK_MSG(e <= TOL, "%s: init_normal %.3g", g_be->name, e);
    CHECK_MSG(!memcmp(part, x + LO, sizeof part), "%s: init_normal's range [%d, %d) differs", g_be->name, LO, HI);
    emit(x, TOTAL);
    free(x), free(r);
    dfree_all();
    return e;
}

static double t_fill(void) {
    float x[ON];
    float *dx = dput(NULL, sizeof x);
    g_be->fill(dx + 1, ON - 2, 1.25f);
    dget(x, dx, sizeof x);
    int ok = x[0] == 0.0f && x[ON - 1] == 0.0f;
    for (int i = 1; i < ON - 1; i++) ok &= x[i] == 1.25f;
    CHECK_MSG(ok, "%s: fill", g_be->name);
    emit(x, ON);
    dfree_all();
    return ok ? 0.0 : 1.0;
}

/* dropout, p = 0.25: every output 0 or x / (1 - p) exactly (one fp32 product by the rounded
 * 1 / (1 - p)), about 3/4 kept; the backward adds dy's share on the forward's mask alone */
static double t_dropout(void) {
    enum { DN = 4000 };
    static float x[DN], y[DN], dy[DN], dx[DN];
    const float p = 0.25f, keep = 1.0f / (1.0f - p);
    const uint64_t seed = 0x5eed1234ull;
    for (int i = 0; i < DN; i++) x[i] = 0.5f + 0.01f * (float)(i % 97), dy[i] = 1.0f + 0.001f * (float)i;
    float *dxs = dput(x, sizeof x), *dys = dput(NULL, sizeof y), *ddy = dput(dy, sizeof dy), *ddx = dput(NULL, sizeof dx);
    g_be->dropout_forward(dys, dxs, DN, p, seed);
    g_be->fill(ddx, DN, 2.0f);
    g_be->dropout_backward(ddx, ddy, DN, p, seed);
    dget(y, dys, sizeof y);
    dget(dx, ddx, sizeof dx);
    int ok = 1, kept = 0;
    for (int i = 0; i < DN; i++) {
        const int k = y[i] != 0.0f;
        kept += k;
        ok &= k ? y[i] == x[i] * keep : y[i] == 0.0f;
        ok &= k ? dx[i] == 2.0f + dy[i] * keep : dx[i] == 2.0f;
    }
    CHECK_MSG(ok, "%s: dropout outputs or mask", g_be->name);
    CHECK_MSG(kept > DN * 7 / 10 && kept < DN * 8 / 10, "%s: dropout kept %d of %d at p = 0.25", g_be->name, kept, DN);
    emit(y, DN);
    emit(dx, DN);
    dfree_all();
    return ok ? 0.0 : 1.0;
}

static double t_sync(void) {
    g_be->sync(); /* nothing issued: returns */
    return 0.0;
}

#endif
