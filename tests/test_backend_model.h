/* test_backend_model.h: the tests of the model-side helpers (the chunked head and the bf16 tied
 * embeddings of model/embed.c) and of the inference helpers (model/infer.c), part of
 * tests/test_backend.c, which includes it once after the other parts (it uses their
 * references: ref_bf16_round, ce_inputs, enc_inputs). Each op's test runs it on g_be and
 * compares with a double-precision reference written here; each runs at a small size and at
 * one past HPT_PAR_MIN (or the op's own threshold) so the threaded path runs too.
 * Tolerances: exact where the op is one correctly rounded operation or a copy (widening,
 * rounding, one fp32 sum, the cache's stores); TOL (1e-5 relative to max(1, |ref|)) where it
 * sums in fp32 or calls expf/logf (at most 40 terms here); TOL_FD for finite differences. The
 * chunked ops are also held to the unchunked ops' bits where the model relies on it (the loss
 * mean, the scatters: bit identity of the chunked head). */
#ifndef HPT_TEST_BACKEND_MODEL_H
#define HPT_TEST_BACKEND_MODEL_H

/* bf16 in double from its fields (not from the bits' reinterpretation the kernels use). */
static double ref_bf16_value(uint16_t h) {
    int s = h >> 15, ex = (h >> 7) & 255, mant = h & 127;
    double v = ex == 0 ? ldexp(mant, -133) : ex == 255 ? (mant ? NAN : INFINITY) : ldexp(128 + mant, ex - 134);
    return s ? -v : v;
}
/* exact equality, NaN equal to NaN and the sign of zero kept */
static int same_value(double got, double ref) {
    return isnan(ref) ? isnan(got) : got == ref && !signbit(got) == !signbit(ref);
}
/* bf16 bits of x rounded to nearest even (x finite, in range): from the double reference */
static uint16_t ref_bf16_bits(double x) {
    float f = (float)ref_bf16_round(x); /* a bf16 value: exact in fp32 */
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}
/* n bf16 values of random size (2^-20 .. 2^8) and sign */
static void bf16_rand(uint16_t *h, size_t n) {
    for (size_t i = 0; i < n; i++) h[i] = ref_bf16_bits(ldexp(frand(), (int)(i % 29) - 20));
}

/* ================================ loss mean ================================ */
static double t_loss_mean(void) {
    double e = 0.0;
    size_t sizes[3] = {7, 100003, 7};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        float *l = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) l[i] = 5.0f + 4.0f * frand();
        if (k == 2) /* the order shows: in order, 5 + 2^60 loses the 5 (mean 0); any other, 5/7 */
            for (size_t i = 0; i < n; i++) l[i] = i < 5 ? 1.0f : i == 5 ? 0x1p60f : -0x1p60f;
        double s = 0.0; /* the op's definition: in order, in double, rounded once */
        for (size_t i = 0; i < n; i++) s += l[i];
        float got = g_be->loss_mean(dput(l, n * sizeof(float)), n);
        CHECK_MSG(got == (float)(s / (double)n), "%s: loss_mean n=%zu %.9g, reference %.9g", g_be->name, n,
                  got, s / (double)n);
        e = fmax(e, rel(got, s / (double)n));
        emit1(got);
        free(l);
        dfree_all();
    }
    /* the chunked head's loss is crossentropy_forward's mean to the bit */
    float lg[XN * XVP], losses[XN];
    int32_t tg[XN];
    ce_inputs(lg, tg);
    float *dl = dput(NULL, sizeof losses);
    float mean = g_be->crossentropy_forward(dl, dput(NULL, sizeof losses), dput(lg, sizeof lg),
                                            dput(tg, sizeof tg), XN, XV, XVP);
    float got = g_be->loss_mean(dl, XN);
    dget(losses, dl, sizeof losses);
    CHECK_MSG(got == mean, "%s: loss_mean %.9g, crossentropy_forward's mean %.9g", g_be->name, got, mean);
    emit1(got);
    dfree_all();
    return e;
}

/* ================================ bf16, in pieces ================================ */
enum { PARN = 100003 }; /* above the ops' 4 pieces of 16384: the threaded path, a short last piece */

static double t_bf16_widen_par(void) {
    size_t sizes[2] = {1003, PARN};
    int exact = 1;
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        uint16_t *h = malloc(n * sizeof(uint16_t));
        float *x = malloc(n * sizeof(float)), *x1 = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) h[i] = (uint16_t)(i * 40503u); /* every pattern, mixed */
        uint16_t *dh = dput(h, n * sizeof(uint16_t));
        float *dx = dput(NULL, n * sizeof(float)), *dx1 = dput(NULL, n * sizeof(float));
        g_be->bf16_widen_par(dx, dh, n);
        g_be->bf16_widen(dx1, dh, n);
        dget(x, dx, n * sizeof(float)), dget(x1, dx1, n * sizeof(float));
        for (size_t i = 0; i < n; i++) exact &= same_value(x[i], ref_bf16_value(h[i]));
        CHECK_MSG(exact, "%s: bf16_widen_par n=%zu is not the exact value", g_be->name, n);
        CHECK_MSG(!memcmp(x, x1, n * sizeof(float)), "%s: bf16_widen_par differs from bf16_widen", g_be->name);
        emit(x, n);
        free(h), free(x), free(x1);
        dfree_all();
    }
    return exact ? 0.0 : 1.0;
}

static double t_bf16_split_par(void) {
    size_t sizes[2] = {1003, PARN};
    int exact = 1;
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        float *x = malloc(n * sizeof(float)), *hf = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) x[i] = ldexpf(frand(), (int)(i % 41) - 25);
        float ties[] = {0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -(1.0f + 5.0f / 256), 1e-39f};
        for (size_t i = 0; i < sizeof ties / sizeof *ties; i++) x[n - 1 - i] = ties[i]; /* the last piece too */
        uint16_t *h = malloc(n * sizeof(uint16_t)), *c = malloc(n * sizeof(uint16_t));
        uint16_t *h0 = malloc(n * sizeof(uint16_t)), *hs = malloc(n * sizeof(uint16_t));
        uint16_t *cs = malloc(n * sizeof(uint16_t));
        float *dx = dput(x, n * sizeof(float));
        uint16_t *dh = dput(NULL, n * 2), *dc = dput(NULL, n * 2), *dh0 = dput(NULL, n * 2);
        uint16_t *dhs = dput(NULL, n * 2), *dcs = dput(NULL, n * 2);
        g_be->bf16_split_par(dh, dc, dx, n);
        g_be->bf16_split_par(dh0, NULL, dx, n);
        g_be->bf16_split(dhs, dcs, dx, n);
        dget(h, dh, n * 2), dget(c, dc, n * 2), dget(h0, dh0, n * 2);
        dget(hs, dhs, n * 2), dget(cs, dcs, n * 2);
        for (size_t i = 0; i < n; i++) {
            double hv = ref_bf16_value(h[i]);
            exact &= same_value(hv, ref_bf16_round(x[i]));
            exact &= ref_bf16_value(c[i]) == ref_bf16_round((double)x[i] - hv); /* the residue, rounded */
        }
        CHECK_MSG(exact, "%s: bf16_split_par n=%zu is not the nearest even and its residue", g_be->name, n);
        CHECK_MSG(!memcmp(h, h0, n * 2), "%s: bf16_split_par without c differs", g_be->name);
        CHECK_MSG(!memcmp(h, hs, n * 2) && !memcmp(c, cs, n * 2), "%s: bf16_split_par differs from bf16_split",
                  g_be->name);
        for (size_t i = 0; i < n; i++) hf[i] = h[i] * 65536.0f + c[i];
        emit(hf, n);
        free(x), free(hf), free(h), free(c), free(h0), free(hs), free(cs);
        dfree_all();
    }
    return exact ? 0.0 : 1.0;
}

/* ================================ embeddings ================================ */
enum { MC_ = 37, MV = 11 }; /* C odd and not a multiple of the scatters' 16-channel blocks */

static double t_encoder_forward_bf16(void) {
    int shapes[2][2] = {{2, 5}, {4, 223}}; /* B, T; the second: B*T*C above HPT_PAR_MIN */
    int exact = 1;
    for (int k = 0; k < 2; k++) {
        int B = shapes[k][0], T = shapes[k][1];
        size_t BT = (size_t)B * T;
        int32_t *tok = malloc(BT * sizeof(int32_t));
        uint16_t *wte = malloc(MV * MC_ * 2), *wpe = malloc((size_t)T * MC_ * 2);
        float *out = malloc(BT * MC_ * sizeof(float));
        for (size_t i = 0; i < BT; i++) tok[i] = (int32_t)((frand() + 1.0f) * 0.5f * MV) % MV;
        bf16_rand(wte, MV * MC_);
        bf16_rand(wpe, (size_t)T * MC_);
        float *dout = dput(NULL, BT * MC_ * sizeof(float));
        g_be->encoder_forward_bf16(dout, dput(tok, BT * sizeof(int32_t)), dput(wte, MV * MC_ * 2),
                                   dput(wpe, (size_t)T * MC_ * 2), B, T, MC_);
        dget(out, dout, BT * MC_ * sizeof(float));
        /* one fp32 sum of two bf16 values: exact in double, then rounded once */
        for (size_t i = 0; i < BT; i++)
            for (int c = 0; c < MC_; c++)
                exact &= out[i * MC_ + c] == (float)(ref_bf16_value(wte[tok[i] * MC_ + c]) +
                                                     ref_bf16_value(wpe[(i % (size_t)T) * MC_ + c]));
        CHECK_MSG(exact, "%s: encoder_forward_bf16 B=%d T=%d", g_be->name, B, T);
        emit(out, BT * MC_);
        free(tok), free(wte), free(wpe), free(out);
        dfree_all();
    }
    return exact ? 0.0 : 1.0;
}

/* dwte (MV,C) and dwpe (T,C) of encoder_backward from the same inputs, on the device */
static void enc_bwd_whole(float *gwte, float *gwpe, const float *wte0, const float *wpe0, const float *dout,
                          const int32_t *tok, int B, int T) {
    size_t BT = (size_t)B * T;
    float *dwte = dput(wte0, MV * MC_ * sizeof(float)), *dwpe = dput(wpe0, (size_t)T * MC_ * sizeof(float));
    g_be->encoder_backward(dwte, dwpe, dput(dout, BT * MC_ * sizeof(float)), dput(tok, BT * sizeof(int32_t)), B,
                           T, MC_);
    dget(gwte, dwte, MV * MC_ * sizeof(float)), dget(gwpe, dwpe, (size_t)T * MC_ * sizeof(float));
}

/* the scatters' inputs: tokens (one repeated), dout, and the gradients accumulated into */
static void enc_bwd_inputs(int32_t *tok, float *dout, float *wte0, float *wpe0, size_t BT, int T) {
    for (size_t i = 0; i < BT; i++) tok[i] = (int32_t)((frand() + 1.0f) * 0.5f * MV) % MV;
    tok[3] = tok[BT - 1];
    fill_rand(dout, BT * MC_, 1.0f);
    fill_rand(wte0, MV * MC_, 1.0f);
    fill_rand(wpe0, (size_t)T * MC_, 1.0f);
}

/* Both scatters: dwpe (T,C) += sum over b (rows of position t); dwte rows [v0, v0 + nv) +=
 * dout rows of those tokens, asked for in three chunks with a guard row after each. The forward
 * is linear, so its finite difference is the scatter itself (the double reference); beyond it,
 * the chunks must give encoder_backward's bits (the chunked head is bit-identical). */
static double t_encoder_backward_impl(int rows) {
    int shapes[2][2] = {{2, 5}, {5, 181}}; /* the second: B*T*C above HPT_PAR_MIN */
    double e = 0.0;
    for (int k = 0; k < 2; k++) {
        int B = shapes[k][0], T = shapes[k][1];
        size_t BT = (size_t)B * T;
        int32_t *tok = malloc(BT * sizeof(int32_t));
        float *dout = malloc(BT * MC_ * sizeof(float)), *wte0 = malloc(MV * MC_ * sizeof(float));
        float *wpe0 = malloc((size_t)T * MC_ * sizeof(float));
        float *g = malloc((size_t)(T > MV ? T : MV + 1) * MC_ * sizeof(float)); /* dwpe, or a chunk + guard */
        float *gwte = malloc(MV * MC_ * sizeof(float)), *gwpe = malloc((size_t)T * MC_ * sizeof(float));
        double *r = malloc((size_t)(T > MV ? T : MV) * MC_ * sizeof(double));
        enc_bwd_inputs(tok, dout, wte0, wpe0, BT, T);
        float *ddout = dput(dout, BT * MC_ * sizeof(float));
        int32_t *dtok = dput(tok, BT * sizeof(int32_t));
        if (!rows) {
            for (size_t i = 0; i < (size_t)T * MC_; i++) r[i] = wpe0[i];
            for (size_t i = 0; i < BT; i++)
                for (int c = 0; c < MC_; c++) r[(i % (size_t)T) * MC_ + c] += dout[i * MC_ + c];
            float *d = dput(wpe0, (size_t)T * MC_ * sizeof(float));
            g_be->encoder_backward_wpe(d, ddout, BT, T, MC_);
            dget(g, d, (size_t)T * MC_ * sizeof(float));
            e = fmax(e, cmp_arr("encoder_backward_wpe", g, r, (size_t)T * MC_, TOL));
            emit(g, (size_t)T * MC_);
            enc_bwd_whole(gwte, gwpe, wte0, wpe0, dout, tok, B, T);
            CHECK_MSG(!memcmp(g, gwpe, (size_t)T * MC_ * sizeof(float)),
                      "%s: encoder_backward_wpe differs from encoder_backward's dwpe", g_be->name);
        } else {
            for (size_t i = 0; i < MV * MC_; i++) r[i] = wte0[i];
            for (size_t i = 0; i < BT; i++)
                for (int c = 0; c < MC_; c++) r[tok[i] * MC_ + c] += dout[i * MC_ + c];
            enc_bwd_whole(gwte, gwpe, wte0, wpe0, dout, tok, B, T);
            size_t chunks[3][2] = {{0, 4}, {4, 5}, {9, 2}}; /* v0, nv */
            for (int ch = 0; ch < 3; ch++) {
                size_t v0 = chunks[ch][0], nv = chunks[ch][1];
                float guard = 12345.0f;
                memcpy(g, wte0 + v0 * MC_, nv * MC_ * sizeof(float));
                for (int c = 0; c < MC_; c++) g[nv * MC_ + c] = guard;
                float *d = dput(g, (nv + 1) * MC_ * sizeof(float));
                g_be->encoder_backward_rows(d, ddout, dtok, BT, MC_, v0, nv);
                dget(g, d, (nv + 1) * MC_ * sizeof(float));
                e = fmax(e, cmp_arr("encoder_backward_rows", g, r + v0 * MC_, nv * MC_, TOL));
                int kept = 1;
                for (int c = 0; c < MC_; c++) kept &= g[nv * MC_ + c] == guard;
                CHECK_MSG(kept, "%s: encoder_backward_rows wrote past its nv rows", g_be->name);
                CHECK_MSG(!memcmp(g, gwte + v0 * MC_, nv * MC_ * sizeof(float)),
                          "%s: encoder_backward_rows differs from encoder_backward's dwte", g_be->name);
                emit(g, nv * MC_);
            }
        }
        free(tok), free(dout), free(wte0), free(wpe0), free(g), free(gwte), free(gwpe), free(r);
        dfree_all();
    }
    return e;
}
static double t_encoder_backward_wpe(void) { return t_encoder_backward_impl(0); }
static double t_encoder_backward_rows(void) { return t_encoder_backward_impl(1); }

/* ================================ the chunked head ================================ */
/* logits (n, HV) in vocabulary chunks of 13, 13, 11 columns (the last short) */
enum { HV = 37, HBIG = 2531 }; /* HBIG * 13 above HPT_PAR_MIN */
static const size_t k_chunk[4] = {0, 13, 26, HV};

/* rows' logsumexp in double: mx (n) the maximum, sum (n) of exp(l - mx) */
static void ref_lse_rows(double *mx, double *sum, const float *lg, size_t n) {
    for (size_t i = 0; i < n; i++) {
        double m = -INFINITY, s = 0.0;
        for (int v = 0; v < HV; v++) m = fmax(m, lg[i * HV + v]);
        for (int v = 0; v < HV; v++) s += exp(lg[i * HV + v] - m);
        mx[i] = m, sum[i] = s;
    }
}
/* columns [v0, v1) of lg (n, HV) as a chunk (n, v1 - v0) */
static void chunk_of(float *dst, const float *lg, size_t n, size_t v0, size_t v1) {
    for (size_t i = 0; i < n; i++) memcpy(dst + i * (v1 - v0), lg + i * HV + v0, (v1 - v0) * sizeof(float));
}
/* logits with rows of different offsets, the largest value in a later chunk for some */
static void head_logits(float *lg, size_t n) {
    fill_rand(lg, n * HV, 4.0f);
    for (size_t i = 0; i < n; i++)
        for (int v = 0; v < HV; v++)
            lg[i * HV + v] += (float)(i % 5) - 2.0f + (v >= 26 && i % 3 == 0 ? 6.0f : 0.0f);
}

static double t_logsumexp_chunk(void) {
    size_t sizes[2] = {7, HBIG};
    double e = 0.0;
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        float *lg = malloc(n * HV * sizeof(float)), *ch = malloc(n * HV * sizeof(float));
        float *mx = malloc(n * sizeof(float)), *sum = malloc(n * sizeof(float));
        double *rm = malloc(n * sizeof(double)), *rs = malloc(n * sizeof(double));
        head_logits(lg, n);
        ref_lse_rows(rm, rs, lg, n);
        float *dmx = dput(NULL, n * sizeof(float)), *dsum = dput(NULL, n * sizeof(float));
        for (int c = 0; c < 3; c++) {
            chunk_of(ch, lg, n, k_chunk[c], k_chunk[c + 1]);
            float *dch = dput(ch, n * (k_chunk[c + 1] - k_chunk[c]) * sizeof(float));
            g_be->logsumexp_chunk(dmx, dsum, dch, n, k_chunk[c + 1] - k_chunk[c], c == 0);
        }
        dget(mx, dmx, n * sizeof(float)), dget(sum, dsum, n * sizeof(float));
        int mx_exact = 1; /* a maximum is exact */
        for (size_t i = 0; i < n; i++) mx_exact &= mx[i] == rm[i];
        CHECK_MSG(mx_exact, "%s: logsumexp_chunk's maximum n=%zu", g_be->name, n);
        /* expf (4 ulp) and 37 fp32 terms of at most 1 each, rescaled twice */
        e = fmax(e, cmp_arr("logsumexp_chunk sum", sum, rs, n, TOL));
        e = fmax(e, mx_exact ? 0.0 : 1.0);
        emit(mx, n), emit(sum, n);
        free(lg), free(ch), free(mx), free(sum), free(rm), free(rs);
        dfree_all();
    }
    return e;
}

static double t_tied_loss(void) {
    size_t sizes[2] = {7, 907}; /* 907 * C above HPT_PAR_MIN */
    double e = 0.0;
    for (int k = 0; k < 2; k++)
        for (int bf = 0; bf < 2; bf++) {
            size_t n = sizes[k];
            float *lnf = malloc(n * MC_ * sizeof(float)), *wte = malloc(MV * MC_ * sizeof(float));
            float *mx = malloc(n * sizeof(float)), *sum = malloc(n * sizeof(float));
            float *losses = malloc(n * sizeof(float)), *lse = malloc(n * sizeof(float));
            double *rl = malloc(n * sizeof(double)), *rs = malloc(n * sizeof(double));
            int32_t *tg = malloc(n * sizeof(int32_t));
            uint16_t wh[MV * MC_];
            fill_rand(lnf, n * MC_, 1.0f);
            fill_rand(wte, MV * MC_, 1.0f);
            for (size_t i = 0; i < MV * MC_; i++) wh[i] = ref_bf16_bits(wte[i]);
            for (size_t i = 0; i < n; i++) {
                mx[i] = 4.0f * frand();
                sum[i] = 1.0f + 18.0f * (frand() + 1.0f); /* 1 .. 37: a sum of exp(l - max) */
                tg[i] = i % 5 == 2 ? -1 : (int32_t)(i * 7 % MV); /* -1: ignored, loss 0 */
            }
            for (size_t i = 0; i < n; i++) {
                double dot = 0.0;
                for (int c = 0; c < MC_ && tg[i] >= 0; c++)
                    dot += (double)lnf[i * MC_ + c] *
                           (bf ? ref_bf16_value(wh[tg[i] * MC_ + c]) : (double)wte[tg[i] * MC_ + c]);
                rs[i] = (double)mx[i] + log(sum[i]);
                rl[i] = tg[i] < 0 ? 0.0 : rs[i] - dot;
            }
            float *dl = dput(mx, n * sizeof(float)), *ds = dput(sum, n * sizeof(float));
            g_be->tied_loss(dl, ds, dput(lnf, n * MC_ * sizeof(float)),
                            bf ? NULL : dput(wte, MV * MC_ * sizeof(float)), dput(wh, sizeof wh),
                            dput(tg, n * sizeof(int32_t)), n, MC_);
            dget(losses, dl, n * sizeof(float)), dget(lse, ds, n * sizeof(float));
            /* logf (4 ulp) and a 37-term fp32 dot product */
            e = fmax(e, cmp_arr(bf ? "tied_loss (bf16 wte) losses" : "tied_loss losses", losses, rl, n, TOL));
            e = fmax(e, cmp_arr(bf ? "tied_loss (bf16 wte) lse" : "tied_loss lse", lse, rs, n, TOL));
            emit(losses, n), emit(lse, n);
            free(lnf), free(wte), free(mx), free(sum), free(losses), free(lse), free(rl), free(rs), free(tg);
            dfree_all();
        }
    return e;
}

typedef struct {
    const int32_t *tg;
    size_t n;
    double dloss;
} dl_ctx;
/* dloss * the sum of the rows' cross-entropies of logits (n, HV), in double */
static double dl_loss(const double *lg, const void *vctx) {
    const dl_ctx *c = vctx;
    double L = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        if (c->tg[i] < 0) continue; /* ignored: no loss */
        double m = -INFINITY, s = 0.0;
        for (int v = 0; v < HV; v++) m = fmax(m, lg[i * HV + v]);
        for (int v = 0; v < HV; v++) s += exp(lg[i * HV + v] - m);
        L += c->dloss * (m + log(s) - lg[i * HV + c->tg[i]]);
    }
    return L;
}

static double t_crossentropy_dlogits(void) {
    size_t sizes[2] = {7, HBIG};
    const double dloss = 0.8; /* not 1/n: the values stay large next to TOL's absolute floor */
    double e = 0.0;
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        float *lg = malloc(n * HV * sizeof(float)), *ch = malloc(n * HV * sizeof(float));
        float *lse = malloc(n * sizeof(float));
        double *rm = malloc(n * sizeof(double)), *rs = malloc(n * sizeof(double));
        double *r = malloc(n * HV * sizeof(double));
        int32_t *tg = malloc(n * sizeof(int32_t));
        head_logits(lg, n);
        for (size_t i = 0; i < n; i++) /* in each of the chunks; every 4th ignored (-1) */
            tg[i] = i % 4 == 1 ? -1 : (int32_t)(i * 11 % HV);
        ref_lse_rows(rm, rs, lg, n);
        for (size_t i = 0; i < n; i++) lse[i] = (float)(rm[i] + log(rs[i])); /* the saved lse, fp32 */
        float *dlse = dput(lse, n * sizeof(float));
        int32_t *dtg = dput(tg, n * sizeof(int32_t));
        for (int c = 0; c < 3; c++) {
            size_t v0 = k_chunk[c], nv = k_chunk[c + 1] - v0;
            chunk_of(ch, lg, n, v0, v0 + nv);
            for (size_t i = 0; i < n; i++)
                for (size_t v = 0; v < nv; v++)
                    r[i * nv + v] = tg[i] < 0 ? 0.0 : (exp((double)ch[i * nv + v] - lse[i]) -
                                                       (v0 + v == (size_t)tg[i])) * dloss;
            float *dch = dput(ch, n * nv * sizeof(float));
            g_be->crossentropy_dlogits(dch, dlse, dtg, n, v0, nv, (float)dloss);
            dget(ch, dch, n * nv * sizeof(float));
            e = fmax(e, cmp_arr("crossentropy_dlogits", ch, r, n * nv, TOL)); /* one expf, one product */
            emit(ch, n * nv);
            if (k == 0) /* finite differences of the double loss, one entry per row */
                for (size_t i = 0; i < n; i++) {
                    static double th[7 * HV];
                    if (i == 0) to_d(th, lg, n * HV); /* fd() puts each entry back */
                    dl_ctx cx = {tg, n, dloss};
                    size_t v = (i * 5 + (size_t)c) % nv;
                    if (i % 3 == 0) v = (size_t)tg[i] >= v0 && (size_t)tg[i] < v0 + nv ? tg[i] - v0 : v;
                    double err = rel(ch[i * nv + v], fd(dl_loss, th, i * HV + v0 + v, &cx));
                    CHECK_MSG(err <= TOL_FD, "crossentropy_dlogits finite difference at (%zu, %zu): %.3g", i,
                              v0 + v, err);
                    e = fmax(e, err);
                }
        }
        free(lg), free(ch), free(lse), free(rm), free(rs), free(r), free(tg);
        dfree_all();
    }
    return e;
}

/* ================================ inference ================================ */
enum { IC = 24, INH = 3, IHS = IC / INH, IV = 11, ICTX = 171 };

static double t_infer_embed(void) {
    enum { N = 3, POS0 = 4 };
    int32_t tok[N] = {7, 2, 7};
    float wte[IV * IC], wpe[ICTX * IC], sc[IV], x[N * IC];
    int8_t q[IV * IC];
    fill_rand(wte, IV * IC, 1.0f);
    fill_rand(wpe, ICTX * IC, 1.0f);
    for (int i = 0; i < IV * IC; i++) q[i] = (int8_t)(int)(127.0f * frand());
    q[7 * IC] = -127, q[7 * IC + 1] = 127;
    for (int i = 0; i < IV; i++) sc[i] = 0.01f * (frand() + 1.5f);
    double e = 0.0;
    for (int kase = 0; kase < 4; kase++) { /* fp32 or int8 wte; with wpe or none (rotary) */
        const int qz = kase & 1, pe = kase < 2;
        double r[N * IC];
        for (int t = 0; t < N; t++)
            for (int c = 0; c < IC; c++)
                r[t * IC + c] = (qz ? (double)q[tok[t] * IC + c] * sc[tok[t]] : (double)wte[tok[t] * IC + c]) +
                                (pe ? wpe[(POS0 + t) * IC + c] : 0.0);
        float *dx = dput(NULL, sizeof x);
        g_be->infer_embed(dx, dput(tok, sizeof tok), N, POS0, qz ? NULL : dput(wte, sizeof wte),
                          qz ? dput(q, sizeof q) : NULL, qz ? dput(sc, sizeof sc) : NULL,
                          pe ? dput(wpe, sizeof wpe) : NULL, IC);
        dget(x, dx, sizeof x);
        if (qz) { /* a product and a sum in fp32 */
            e = fmax(e, cmp_arr("infer_embed (int8 wte)", x, r, N * IC, TOL));
        } else { /* one fp32 sum (or a copy): exact in double, rounded once */
            int exact = 1;
            for (int i = 0; i < N * IC; i++) exact &= x[i] == (float)r[i];
            CHECK_MSG(exact, "%s: infer_embed is not the rounded sum", g_be->name);
            e = fmax(e, exact ? 0.0 : 1.0);
        }
        emit(x, N * IC);
        dfree_all();
    }
    return e;
}

/* (NH, NKV) of the cache tests: GPT-2's layout, then grouped-query (hd 4 and 8) */
static const int k_kv_cases[3][2] = {{INH, INH}, {6, 2}, {3, 1}};

static double t_infer_kv_store(void) {
    enum { N = 3, POS0 = 4, CTX = 9 };
    double e = 0.0;
    for (int kase = 0; kase < 3; kase++) {
        const int NH = k_kv_cases[kase][0], NKV = k_kv_cases[kase][1];
        const int KVC = NKV * (IC / NH), W = IC + 2 * KVC;
        float K[CTX * IC], V[CTX * IC], qkv[N * 3 * IC], gK[CTX * IC], gV[CTX * IC];
        fill_rand(K, (size_t)CTX * KVC, 1.0f);
        fill_rand(V, (size_t)CTX * KVC, 1.0f);
        fill_rand(qkv, (size_t)N * W, 1.0f);
        float *dK = dput(K, (size_t)CTX * KVC * 4), *dV = dput(V, (size_t)CTX * KVC * 4);
        g_be->infer_kv_store(dK, dV, dput(qkv, (size_t)N * W * 4), POS0, N, IC, NH, NKV);
        dget(gK, dK, (size_t)CTX * KVC * 4), dget(gV, dV, (size_t)CTX * KVC * 4);
        int exact = 1; /* a copy: rows POS0 .. POS0 + N - 1 from qkv, every other row as it was */
        for (int p = 0; p < CTX; p++)
            for (int c = 0; c < KVC; c++) {
                int in = p >= POS0 && p < POS0 + N;
                exact &= gK[p * KVC + c] == (in ? qkv[(p - POS0) * W + IC + c] : K[p * KVC + c]);
                exact &= gV[p * KVC + c] == (in ? qkv[(p - POS0) * W + IC + KVC + c] : V[p * KVC + c]);
            }
        CHECK_MSG(exact, "%s: infer_kv_store NH=%d NKV=%d", g_be->name, NH, NKV);
        emit(gK, (size_t)CTX * KVC), emit(gV, (size_t)CTX * KVC);
        e = fmax(e, exact ? 0.0 : 1.0);
        dfree_all();
    }
    return e;
}

/* atty (n,C): row t's query at position pos0 + t over K, V (ctx, KVC) rows 0 .. pos0 + t (win
 * > 0: the last win of them), in double; query head h reads kv head h / (NH/NKV) */
static void ref_attend(double *o, const float *qkv, const float *K, const float *V, int pos0, int n,
                       int NH, int NKV, int win) {
    const int hs = IC / NH, KVC = NKV * hs, W = IC + 2 * KVC;
    double sc = 1.0 / sqrt((double)hs), s[ICTX];
    for (int t = 0; t < n; t++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + t * W + h * hs;
            const int kh = h / (NH / NKV) * hs;
            double mx = -INFINITY, z = 0.0;
            const int j0 = win > 0 && pos0 + t - win + 1 > 0 ? pos0 + t - win + 1 : 0;
            for (int j = j0; j <= pos0 + t; j++) {
                double d = 0.0;
                for (int i = 0; i < hs; i++) d += (double)q[i] * K[j * KVC + kh + i];
                s[j] = d * sc;
                mx = fmax(mx, s[j]);
            }
            for (int j = j0; j <= pos0 + t; j++) z += exp(s[j] - mx);
            for (int i = 0; i < hs; i++) {
                double a = 0.0;
                for (int j = j0; j <= pos0 + t; j++) a += exp(s[j] - mx) / z * V[j * KVC + kh + i];
                o[t * IC + h * hs + i] = a;
            }
        }
}

static double t_infer_attend(void) {
    /* pos0, n, the sliding window (0: none); the third and fifth above HPT_PAR_MIN */
    int cases[6][3] = {{0, 5, 0}, {6, 3, 0}, {163, 8, 0}, {6, 3, 1}, {163, 8, 50}, {0, 5, 2}};
    double e = 0.0;
    for (int kv = 0; kv < 3; kv++) {
        const int NH = k_kv_cases[kv][0], NKV = k_kv_cases[kv][1];
        const int KVC = NKV * (IC / NH), W = IC + 2 * KVC;
        for (int k = 0; k < 6; k++) {
            int pos0 = cases[k][0], n = cases[k][1], win = cases[k][2];
            static float K[ICTX * IC], V[ICTX * IC], qkv[8 * 3 * IC], y[8 * IC];
            static double r[8 * IC];
            fill_rand(qkv, (size_t)n * W, 1.5f);
            fill_rand(K, (size_t)ICTX * KVC, 1.5f);
            fill_rand(V, (size_t)ICTX * KVC, 1.0f);
            for (int t = 0; t < n; t++) /* the fed rows' keys and values, as the cache holds them */
                for (int c = 0; c < KVC; c++) {
                    K[(pos0 + t) * KVC + c] = qkv[t * W + IC + c];
                    V[(pos0 + t) * KVC + c] = qkv[t * W + IC + KVC + c];
                }
            for (int p = pos0 + n; p < ICTX; p++) /* beyond the last position: never read */
                for (int c = 0; c < KVC; c++) K[p * KVC + c] = V[p * KVC + c] = NAN;
            for (int p = 0; win > 0 && p < pos0 + 1 - win; p++) /* before every window: unread */
                for (int c = 0; c < KVC; c++) K[p * KVC + c] = V[p * KVC + c] = NAN;
            ref_attend(r, qkv, K, V, pos0, n, NH, NKV, win);
            float *dy = dput(NULL, (size_t)n * IC * sizeof(float));
            g_be->infer_attend(dy, dput(qkv, (size_t)n * W * sizeof(float)), dput(K, (size_t)ICTX * KVC * 4),
                               dput(V, (size_t)ICTX * KVC * 4), pos0, (size_t)n, IC, NH, NKV, win);
            dget(y, dy, (size_t)n * IC * sizeof(float));
            /* expf (4 ulp), an 8-term dot, a running softmax over at most 171 positions */
            e = fmax(e, cmp_arr("infer_attend", y, r, (size_t)n * IC, TOL));
            emit(y, (size_t)n * IC);
            dfree_all();
        }
    }
    return e;
}

#endif
