/* test_backend_pack.h (included by test_backend.c after the attention, embedding and RoPE
 * tests, whose shapes and references it reuses): the ops of packed examples (docs/packing.md)
 * against double references. Rows of AT = 5 tokens cut into examples (row 0: 2, 1, 2 tokens;
 * row 1: 3, 2); attention with the document mask and sliding windows, packed and not (forward
 * out, att, lse; backward against central differences of the masked reference), both head
 * layouts; the encoder with wpe at
 * each token's position; RoPE at each token's position (forward and its transpose). */

#define ANH g_nh
#define AHS (AC / g_nh)
#define AW (AC + 2 * g_nkv * AHS)
static const int32_t k_apos[AB * AT] = {0, 1, 0, 0, 1, 0, 1, 2, 0, 1};
/* the case's mask: positions (k_apos, or NULL: causal) and sliding window (0: none) */
static const int32_t *g_apos = k_apos;
static int g_awin = 0;
/* the cases: heads, kv heads, positions, window (2 and 1 inside the examples and rows, 4: some
 * rows cut by the example, some by the window) */
static const struct { int nh, nkv, packed, win; } k_seg_cases[] = {
    {3, 3, 1, 0}, {6, 2, 1, 0}, {6, 2, 1, 2}, {3, 3, 0, 1}, {6, 2, 0, 4}, {3, 3, 1, 4}};
#define N_SEG_CASES (int)(sizeof k_seg_cases / sizeof k_seg_cases[0])
static void seg_case(int kase) {
    g_nh = k_seg_cases[kase].nh, g_nkv = k_seg_cases[kase].nkv;
    g_apos = k_seg_cases[kase].packed ? k_apos : NULL, g_awin = k_seg_cases[kase].win;
}

/* ref_attn with the document mask and window: query t sees keys t - pos[t] .. t, and t - win + 1
 * .. t */
static void ref_attn_seg(double *out, double *att, double *lse, const double *qkv) {
    double sc = 1.0 / sqrt((double)AHS);
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < ANH; h++)
            for (int t = 0; t < AT; t++) {
                const int kv = h / (ANH / g_nkv);
                int s0 = g_apos ? t - g_apos[b * AT + t] : 0;
                if (g_awin > 0 && t - g_awin + 1 > s0) s0 = t - g_awin + 1;
                const double *q = qkv + (b * AT + t) * AW + h * AHS;
                double s[AT] = {0}, mx = -INFINITY, z = 0.0;
                for (int u = s0; u <= t; u++) {
                    const double *k = qkv + (b * AT + u) * AW + AC + kv * AHS;
                    double d = 0.0;
                    for (int i = 0; i < AHS; i++) d += q[i] * k[i];
                    s[u] = d * sc;
                    mx = fmax(mx, s[u]);
                }
                for (int u = s0; u <= t; u++) z += exp(s[u] - mx);
                if (lse) lse[(b * ANH + h) * AT + t] = mx + log(z);
                double *o = out + (b * AT + t) * AC + h * AHS;
                for (int i = 0; i < AHS; i++) o[i] = 0.0;
                for (int u = 0; u < AT; u++) {
                    double p = u >= s0 && u <= t ? exp(s[u] - mx) / z : 0.0;
                    if (att) att[((b * ANH + h) * AT + t) * AT + u] = p;
                    if (p == 0.0) continue;
                    const double *v = qkv + (b * AT + u) * AW + AC + g_nkv * AHS + kv * AHS;
                    for (int i = 0; i < AHS; i++) o[i] += p * v[i];
                }
            }
}

static double t_attention_forward_seg_impl(int flash) {
    double e = 0.0;
    for (int kase = 0; kase < N_SEG_CASES; kase++) {
        seg_case(kase);
        const int nq = AB * AT * AW;
        float qkv[NQKV], out[NAO], att[NATT], lse[NLSE];
        const size_t natt = (size_t)AB * ANH * AT * AT, nlse = (size_t)AB * ANH * AT;
        fill_rand(qkv, (size_t)nq, 1.5f);
        static double qd[NQKV], ro[NAO], ra[NATT], rl[NLSE];
        to_d(qd, qkv, (size_t)nq);
        ref_attn_seg(ro, ra, rl, qd);
        float *dq = dput(qkv, (size_t)nq * 4), *dout = dput(NULL, sizeof out);
        int32_t *dp = g_apos ? dput(k_apos, sizeof k_apos) : NULL;
        if (!flash) {
            float *da = dput(NULL, natt * 4);
            g_be->attention_forward_seg(dout, da, dq, AB, AT, AC, ANH, g_nkv, dp, g_awin);
            dget(out, dout, sizeof out), dget(att, da, natt * 4);
            e = fmax(e, fmax(cmp_arr("attention_forward_seg out", out, ro, NAO, TOL),
                             cmp_arr("attention_forward_seg att", att, ra, natt, TOL)));
            emit(out, NAO), emit(att, natt);
        } else {
            float *dl = dput(NULL, nlse * 4);
            g_be->flash_attention_forward_seg(dout, dl, dq, AB, AT, AC, ANH, g_nkv, dp, g_awin);
            dget(out, dout, sizeof out), dget(lse, dl, nlse * 4);
            e = fmax(e, fmax(cmp_arr("flash_attention_forward_seg out", out, ro, NAO, TOL),
                             cmp_arr("flash_attention_forward_seg lse", lse, rl, nlse, TOL)));
            emit(out, NAO), emit(lse, nlse);
        }
        dfree_all();
    }
    seg_case(0);
    return e;
}
static double t_attention_forward_seg(void) { return t_attention_forward_seg_impl(0); }
static double t_flash_attention_forward_seg(void) { return t_attention_forward_seg_impl(1); }

static double at_seg_loss(const double *qkv, const void *vctx) {
    const at_ctx *c = vctx;
    static double out[NAO];
    ref_attn_seg(out, NULL, NULL, qkv);
    double L = 0.0;
    for (int i = 0; i < NAO; i++) L += c->R[i] * out[i];
    return L;
}

static double t_attention_backward_seg_impl(int flash) {
    double e = 0.0;
    for (int kase = 0; kase < N_SEG_CASES; kase++) {
        seg_case(kase);
        const int nq = AB * AT * AW;
        float qkv[NQKV], dout[NAO], g[NQKV];
        fill_rand(qkv, (size_t)nq, 1.5f);
        fill_rand(dout, NAO, 1.0f);
        float *dq = dput(qkv, (size_t)nq * 4), *dy = dput(NULL, NAO * 4), *ddy = dput(dout, sizeof dout);
        float *dg = dput(NULL, (size_t)nq * 4), *scr = dput(NULL, AB * ANH * AT * 4);
        int32_t *dp = g_apos ? dput(k_apos, sizeof k_apos) : NULL;
        g_be->memset(dg, 0x7f, (size_t)nq * 4); /* overwritten, not accumulated into */
        if (!flash) {
            float *da = dput(NULL, NATT * 4);
            g_be->attention_forward_seg(dy, da, dq, AB, AT, AC, ANH, g_nkv, dp, g_awin);
            g_be->attention_backward_seg(dg, scr, ddy, dq, da, AB, AT, AC, ANH, g_nkv, dp, g_awin);
        } else {
            float *dl = dput(NULL, NLSE * 4);
            g_be->flash_attention_forward_seg(dy, dl, dq, AB, AT, AC, ANH, g_nkv, dp, g_awin);
            g_be->flash_attention_backward_seg(dg, scr, ddy, dq, dy, dl, AB, AT, AC, ANH, g_nkv, dp,
                                               g_awin);
        }
        dget(g, dg, (size_t)nq * 4);
        static double th[NQKV], r[NQKV];
        to_d(th, qkv, (size_t)nq);
        at_ctx c = {dout};
        for (int i = 0; i < nq; i++) r[i] = fd(at_seg_loss, th, (size_t)i, &c);
        e = fmax(e, cmp_arr(flash ? "flash_attention_backward_seg" : "attention_backward_seg", g, r,
                            (size_t)nq, TOL_FD));
        emit(g, (size_t)nq);
        dfree_all();
    }
    seg_case(0);
    return e;
}
static double t_attention_backward_seg(void) { return t_attention_backward_seg_impl(0); }
static double t_flash_attention_backward_seg(void) { return t_attention_backward_seg_impl(1); }


/* the encoder at positions: EB x ET tokens, examples of 2, 3 and 1, 4 */
static const int32_t k_epos[EB * ET] = {0, 1, 0, 1, 2, 0, 0, 1, 2, 3};

static double t_encoder_forward_pos(void) {
    int32_t tok[EB * ET];
    float wte[EV * EC], wpe[ET * EC], out[EB * ET * EC];
    enc_inputs(tok, wte, wpe);
    double ref[EB * ET * EC];
    for (int r = 0; r < EB * ET; r++)
        for (int c = 0; c < EC; c++)
            ref[r * EC + c] = (double)wte[tok[r] * EC + c] + wpe[k_epos[r] * EC + c];
    float *d = dput(NULL, sizeof out);
    g_be->encoder_forward_pos(d, dput(tok, sizeof tok), dput(wte, sizeof wte), dput(wpe, sizeof wpe),
                              dput(k_epos, sizeof k_epos), EB, ET, EC);
    dget(out, d, sizeof out);
    double e = cmp_arr("encoder_forward_pos", out, ref, EB * ET * EC, TOL);
    emit(out, EB * ET * EC);
    dfree_all();
    return e;
}

static double t_encoder_backward_pos(void) {
    int32_t tok[EB * ET];
    float wte[EV * EC], wpe[ET * EC], dout[EB * ET * EC];
    enc_inputs(tok, wte, wpe); /* the initial gradients (accumulated into) */
    fill_rand(dout, EB * ET * EC, 1.0f);
    double rwte[EV * EC], rwpe[ET * EC];
    for (int i = 0; i < EV * EC; i++) rwte[i] = wte[i];
    for (int i = 0; i < ET * EC; i++) rwpe[i] = wpe[i];
    for (int r = 0; r < EB * ET; r++)
        for (int c = 0; c < EC; c++) {
            rwte[tok[r] * EC + c] += dout[r * EC + c];
            rwpe[k_epos[r] * EC + c] += dout[r * EC + c];
        }
    float *dwte = dput(wte, sizeof wte), *dwpe = dput(wpe, sizeof wpe);
    g_be->encoder_backward_pos(dwte, dwpe, dput(dout, sizeof dout), dput(tok, sizeof tok),
                               dput(k_epos, sizeof k_epos), EB, ET, EC);
    dget(wte, dwte, sizeof wte), dget(wpe, dwpe, sizeof wpe);
    double e = fmax(cmp_arr("encoder_backward_pos dwte", wte, rwte, EV * EC, TOL),
                    cmp_arr("encoder_backward_pos dwpe", wpe, rwpe, ET * EC, TOL));
    emit(wte, EV * EC), emit(wpe, ET * EC);
    /* dwte NULL: wpe's gradient only (chunked embeddings), the same dwpe from the same start */
    float wpe2[ET * EC];
    float *dwpe2 = dput(wpe, sizeof wpe); /* wpe holds the result above: run again from it */
    g_be->encoder_backward_pos(NULL, dwpe2, dput(dout, sizeof dout), dput(tok, sizeof tok),
                               dput(k_epos, sizeof k_epos), EB, ET, EC);
    dget(wpe2, dwpe2, sizeof wpe2);
    for (int r = 0; r < EB * ET; r++) /* the reference: one more pass of the scatter */
        for (int c = 0; c < EC; c++) rwpe[k_epos[r] * EC + c] += dout[r * EC + c];
    e = fmax(e, cmp_arr("encoder_backward_pos dwpe (dwte NULL)", wpe2, rwpe, ET * EC, TOL));
    emit(wpe2, ET * EC);
    dfree_all();
    return e;
}

/* the bf16 encoder at positions: each output one fp32 sum of two bf16 values (exact in double,
 * then rounded once), as encoder_forward_bf16's */
static double t_encoder_forward_bf16_pos(void) {
    int32_t tok[EB * ET];
    uint16_t wte[EV * EC], wpe[ET * EC];
    float out[EB * ET * EC];
    for (int i = 0; i < EB * ET; i++) tok[i] = (int32_t)((frand() + 1.0f) * 0.5f * EV) % EV;
    bf16_rand(wte, EV * EC);
    bf16_rand(wpe, ET * EC);
    float *d = dput(NULL, sizeof out);
    g_be->encoder_forward_bf16_pos(d, dput(tok, sizeof tok), dput(wte, sizeof wte),
                                   dput(wpe, sizeof wpe), dput(k_epos, sizeof k_epos), EB, ET, EC);
    dget(out, d, sizeof out);
    int exact = 1;
    for (int r = 0; r < EB * ET; r++)
        for (int c = 0; c < EC; c++)
            exact &= out[r * EC + c] == (float)(ref_bf16_value(wte[tok[r] * EC + c]) +
                                                ref_bf16_value(wpe[k_epos[r] * EC + c]));
    CHECK_MSG(exact, "%s: encoder_forward_bf16_pos", g_be->name);
    emit(out, EB * ET * EC);
    dfree_all();
    return exact ? 0.0 : 1.0;
}

/* RoPE at positions: QB x QT rows (examples of 3, 2 and 5), NH 4 over NKV 2 */
static const int32_t k_qpos[QB * QT] = {0, 1, 2, 0, 1, 0, 1, 2, 3, 4};

static double t_rope_pos_impl(int backward) {
    enum { NH = 4, NKV = 2, W = (NH + 2 * NKV) * QHD, N = QB * QT * W };
    static float x[N], y[N];
    static double xd[N], r[N];
    rope_tables(g_cs, g_sn);
    fill_rand(x, N, 2.0f);
    to_d(xd, x, N);
    for (int row = 0; row < QB * QT; row++) /* each row alone at its position */
        ref_rope(r + row * W, xd + row * W, g_cs, g_sn, 1, 1, NH, NKV, k_qpos[row], backward ? -1 : 1);
    float *dx = dput(x, sizeof x);
    int32_t *dp = dput(k_qpos, sizeof k_qpos);
    if (backward)
        g_be->rope_backward_pos(dx, dput(g_cs, sizeof g_cs), dput(g_sn, sizeof g_sn), QB, QT, NH, NKV, QHD, dp);
    else
        g_be->rope_forward_pos(dx, dput(g_cs, sizeof g_cs), dput(g_sn, sizeof g_sn), QB, QT, NH, NKV, QHD, dp);
    dget(y, dx, sizeof y);
    double e = cmp_arr(backward ? "rope_backward_pos" : "rope_forward_pos", y, r, N, TOL);
    emit(y, N);
    dfree_all();
    return e;
}
static double t_rope_forward_pos(void) { return t_rope_pos_impl(0); }
static double t_rope_backward_pos(void) { return t_rope_pos_impl(1); }

/* ---- the flash pair with bf16 operands (--matmul bf16), every mask case above ----
 * The double reference of backend.h's rule: S = bf16(q) bf16(k) scaled, P = exp(S - max) (AT =
 * 5 keys: one key tile, so the running max is the row's), out = sum bf16(P) bf16(v) / l, lse;
 * backward P = exp(S - lse), dP = bf16(dO) bf16(v), D = dO . out (the reference's out), dS =
 * scale P (dP - D), dq = sum bf16(dS) bf16(k), dk = sum bf16(dS) bf16(q), dv = sum bf16(P)
 * bf16(dO); bf16r (test_backend_nn.h) rounds. TOL as the fp32 ops: a P or dS whose rounding
 * flips between the op's fp32 and the reference's double would move a value by ~1e-3 (none
 * does on these inputs). Not rounding is ~1e-3 away: each test also checks that its op is
 * more than 30 TOL from the unrounded reference (ref_attn_seg's, the fp32 ops'). */
static double r16(double x) { return (double)bf16r((float)x); }

static void ref_attn_bf16(double *out, double *lse, double *dqkv, const double *qkv,
                          const double *dout) {
    const double sc = 1.0 / sqrt((double)AHS);
    if (dqkv) memset(dqkv, 0, (size_t)AB * AT * AW * sizeof(double));
    for (int b = 0; b < AB; b++)
        for (int h = 0; h < ANH; h++)
            for (int t = 0; t < AT; t++) {
                const int kv = h / (ANH / g_nkv);
                int s0 = g_apos ? t - g_apos[b * AT + t] : 0;
                if (g_awin > 0 && t - g_awin + 1 > s0) s0 = t - g_awin + 1;
                const double *q = qkv + (b * AT + t) * AW + h * AHS;
                double s[AT] = {0}, p[AT] = {0}, mx = -INFINITY, z = 0.0;
                for (int u = s0; u <= t; u++) {
                    const double *k = qkv + (b * AT + u) * AW + AC + kv * AHS;
                    double d = 0.0;
                    for (int i = 0; i < AHS; i++) d += r16(q[i]) * r16(k[i]);
                    s[u] = d * sc;
                    mx = fmax(mx, s[u]);
                }
                for (int u = s0; u <= t; u++) z += exp(s[u] - mx);
                const double L = mx + log(z);
                if (lse) lse[(b * ANH + h) * AT + t] = L;
                double *o = out + (b * AT + t) * AC + h * AHS;
                for (int i = 0; i < AHS; i++) o[i] = 0.0;
                for (int u = s0; u <= t; u++) {
                    const double *v = qkv + (b * AT + u) * AW + AC + g_nkv * AHS + kv * AHS;
                    const double pu = r16(exp(s[u] - mx));
                    for (int i = 0; i < AHS; i++) o[i] += pu * r16(v[i]);
                }
                for (int i = 0; i < AHS; i++) o[i] /= z;
                if (!dqkv) continue;
                const double *d = dout + (b * AT + t) * AC + h * AHS;
                double D = 0.0;
                for (int i = 0; i < AHS; i++) D += d[i] * o[i];
                for (int u = s0; u <= t; u++) {
                    const int64_t ko = (int64_t)(b * AT + u) * AW + AC + kv * AHS;
                    const int64_t vo = ko + g_nkv * AHS;
                    double dp = 0.0;
                    for (int i = 0; i < AHS; i++) dp += r16(d[i]) * r16(qkv[vo + i]);
                    p[u] = exp(s[u] - L);
                    const double ds = r16(sc * p[u] * (dp - D)), pr = r16(p[u]);
                    double *dq = dqkv + (b * AT + t) * AW + h * AHS;
                    for (int i = 0; i < AHS; i++) {
                        dq[i] += ds * r16(qkv[ko + i]);
                        dqkv[ko + i] += ds * r16(q[i]);
                        dqkv[vo + i] += pr * r16(d[i]);
                    }
                }
            }
}

static double t_flash_attention_forward_bf16(void) {
    double e = 0.0, apart = INFINITY;
    int skipped = 0;
    for (int kase = 0; kase < N_SEG_CASES; kase++) {
        seg_case(kase);
        if (!g_be->flash_attention_bf16_heads(AHS)) { /* CUDA: heads of 16, 32, 64, 128 */
            skipped++;
            continue;
        }
        const int nq = AB * AT * AW;
        const size_t nlse = (size_t)AB * ANH * AT;
        float qkv[NQKV], out[NAO], lse[NLSE];
        fill_rand(qkv, (size_t)nq, 1.5f);
        static double qd[NQKV], ro[NAO], rl[NLSE], r32[NAO];
        to_d(qd, qkv, (size_t)nq);
        ref_attn_bf16(ro, rl, NULL, qd, NULL);
        ref_attn_seg(r32, NULL, NULL, qd);
        float *dq = dput(qkv, (size_t)nq * 4), *dout = dput(NULL, sizeof out);
        float *dl = dput(NULL, nlse * 4);
        int32_t *dp = g_apos ? dput(k_apos, sizeof k_apos) : NULL;
        g_be->flash_attention_forward_bf16(dout, dl, dq, AB, AT, AC, ANH, g_nkv, dp, g_awin);
        dget(out, dout, sizeof out), dget(lse, dl, nlse * 4);
        e = fmax(e, fmax(cmp_arr("flash_attention_forward_bf16 out", out, ro, NAO, TOL),
                         cmp_arr("flash_attention_forward_bf16 lse", lse, rl, nlse, TOL)));
        double d32 = 0.0;
        for (int i = 0; i < NAO; i++) d32 = fmax(d32, rel(out[i], r32[i]));
        apart = fmin(apart, d32);
        emit(out, NAO), emit(lse, nlse);
        dfree_all();
    }
    if (skipped < N_SEG_CASES)
        CHECK_MSG(apart > 30 * TOL, "flash_attention_forward_bf16: only %.3g from the unrounded "
                  "reference: were the operands rounded?", apart);
    if (skipped)
        printf("  %s: flash_attention_*_bf16 not built for heads of 4 and 8 (%d cases skipped; "
               "test_cuda checks 64 and 128)\n", g_be->name, skipped);
    seg_case(0);
    return e;
}

static double t_flash_attention_backward_bf16(void) {
    double e = 0.0, apart = INFINITY;
    int skipped = 0;
    for (int kase = 0; kase < N_SEG_CASES; kase++) {
        seg_case(kase);
        if (!g_be->flash_attention_bf16_heads(AHS)) { /* CUDA: heads of 16, 32, 64, 128 */
            skipped++;
            continue;
        }
        const int nq = AB * AT * AW;
        float qkv[NQKV], dout[NAO], g[NQKV];
        fill_rand(qkv, (size_t)nq, 1.5f);
        fill_rand(dout, NAO, 1.0f);
        float *dq = dput(qkv, (size_t)nq * 4), *dy = dput(NULL, NAO * 4), *ddy = dput(dout, sizeof dout);
        float *dg = dput(NULL, (size_t)nq * 4), *scr = dput(NULL, AB * ANH * AT * 4);
        float *dl = dput(NULL, NLSE * 4);
        int32_t *dp = g_apos ? dput(k_apos, sizeof k_apos) : NULL;
        g_be->memset(dg, 0x7f, (size_t)nq * 4); /* overwritten, not accumulated into */
        g_be->flash_attention_forward_bf16(dy, dl, dq, AB, AT, AC, ANH, g_nkv, dp, g_awin);
        g_be->flash_attention_backward_bf16(dg, scr, ddy, dq, dy, dl, AB, AT, AC, ANH, g_nkv, dp,
                                            g_awin);
        dget(g, dg, (size_t)nq * 4);
        static double th[NQKV], dd[NAO], ro[NAO], r[NQKV], r32[NQKV];
        to_d(th, qkv, (size_t)nq);
        to_d(dd, dout, NAO);
        ref_attn_bf16(ro, NULL, r, th, dd);
        e = fmax(e, cmp_arr("flash_attention_backward_bf16", g, r, (size_t)nq, TOL));
        at_ctx c = {dout};
        for (int i = 0; i < nq; i++) r32[i] = fd(at_seg_loss, th, (size_t)i, &c);
        double d32 = 0.0;
        for (int i = 0; i < nq; i++) d32 = fmax(d32, rel(g[i], r32[i]));
        apart = fmin(apart, d32);
        emit(g, (size_t)nq);
        dfree_all();
    }
    if (skipped < N_SEG_CASES)
        CHECK_MSG(apart > 30 * TOL, "flash_attention_backward_bf16: only %.3g from the unrounded "
                  "gradient: were the operands rounded?", apart);
    seg_case(0);
    return e;
}

#undef ANH
#undef AHS
#undef AW
