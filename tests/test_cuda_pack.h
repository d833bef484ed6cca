/* test_cuda_pack.h (included by test_cuda.c inside its HPT_HAVE_CUDA part): the packed
 * examples' ops on the GPU against the CPU's (docs/packing.md): document-masked attention, plain
 * and flash, forward and backward, at T = 300 with examples of 1 to 120 tokens (the per-row
 * kernels' 128-key tiles and the tiled kernels' 64- and 32-row tiles crossed), multi-head and
 * grouped-query, head sizes 64 and 128 (flash: the tiled kernels with the mask, their skipped
 * key tiles and the dk, dv walk's early stop) and 80 (the per-row kernels); plain's
 * probabilities 0 outside each
 * example; two runs' bits the same; pos NULL through the _seg ops = the causal ops' bits; GPT-2's
 * encoder at positions (forward, and the wpe and wte gradients) and RoPE at positions.
 * Sliding windows (kernels/backend.h's window) the same way, packed and not: 1 key, a few, across
 * the tiles, and one >= T (the bits of no window). */

static void pack_positions(int32_t *pos, int B, int T) {
    for (int b = 0; b < B; b++) {
        int t = 0;
        while (t < T) {
            int len = 1 + (int)((frand() + 1.0f) * 60.0f); /* 1 .. 120 */
            if (b == 0 && t == 0) len = 1;
            if (len > T - t) len = T - t;
            for (int i = 0; i < len; i++) pos[(size_t)b * T + t + i] = i;
            t += len;
        }
    }
}

/* the first key query t of row b sees (pos NULL: causal; window 0: none) */
static int pack_first_key(const int32_t *pos, int window, int b, int T, int t) {
    int s = pos ? t - pos[(size_t)b * T + t] : 0;
    return window > 0 && t - window + 1 > s ? t - window + 1 : s;
}

static void t_pack_attention(int AC, int nkv, int packed, int window) {
    enum { AB = 2, AT = 300, ANH = 4 };
    const int hs = AC / ANH;
    size_t nq = (size_t)AB * AT * (ANH + 2 * nkv) * hs, no = (size_t)AB * AT * AC;
    size_t na = (size_t)AB * ANH * AT * AT, nl = (size_t)AB * ANH * AT;
    int32_t *pos = NULL;
    if (packed) pos = malloc((size_t)AB * AT * sizeof(int32_t)), pack_positions(pos, AB, AT);
    float *qkv = rnd(nq, 1.0f), *dout = rnd(no, 1.0f);
    float *o_c = malloc(no * 4), *l_c = malloc(nl * 4), *dq_c = malloc(nq * 4), *att_c = malloc(na * 4);
    float *o_g = malloc(no * 4), *l_g = malloc(nl * 4), *dq_g = malloc(nq * 4), *dq_g2 = malloc(nq * 4);
    float *att_g = malloc(na * 4), *scr = malloc(nl * 4);
    int32_t *dpos = packed ? dput(pos, (size_t)AB * AT * sizeof(int32_t)) : NULL;
    for (int flash = 0; flash < 2; flash++) {
        if (flash) {
            cpu->flash_attention_forward_seg(o_c, l_c, qkv, AB, AT, AC, ANH, nkv, pos, window);
            cpu->flash_attention_backward_seg(dq_c, scr, dout, qkv, o_c, l_c, AB, AT, AC, ANH, nkv, pos, window);
        } else {
            cpu->attention_forward_seg(o_c, att_c, qkv, AB, AT, AC, ANH, nkv, pos, window);
            cpu->attention_backward_seg(dq_c, scr, dout, qkv, att_c, AB, AT, AC, ANH, nkv, pos, window);
        }
        float *dqkv = dput(qkv, nq * 4), *ddout = dput(dout, no * 4), *dO = dput(NULL, no * 4);
        float *dl = dput(NULL, nl * 4), *datt = flash ? NULL : dput(NULL, na * 4);
        float *ddq = dput(NULL, nq * 4), *dscr = dput(NULL, nl * 4);
        for (int rep = 0; rep < 2; rep++) {
            if (flash) {
                cu->flash_attention_forward_seg(dO, dl, dqkv, AB, AT, AC, ANH, nkv, dpos, window);
                cu->flash_attention_backward_seg(ddq, dscr, ddout, dqkv, dO, dl, AB, AT, AC, ANH, nkv, dpos, window);
            } else {
                cu->attention_forward_seg(dO, datt, dqkv, AB, AT, AC, ANH, nkv, dpos, window);
                cu->attention_backward_seg(ddq, dscr, ddout, dqkv, datt, AB, AT, AC, ANH, nkv, dpos, window);
            }
            dget(rep ? dq_g2 : dq_g, ddq, nq * 4);
        }
        dget(o_g, dO, no * 4);
        double eo = maxrel(o_g, o_c, no), ed = maxrel(dq_g, dq_c, nq), el = 0.0;
        if (flash) {
            dget(l_g, dl, nl * 4);
            el = maxrel(l_g, l_c, nl);
        } else { /* the probabilities outside each example: exactly 0 */
            dget(att_g, datt, na * 4);
            int leak = 0;
            for (int b = 0; b < AB; b++)
                for (int h = 0; h < ANH; h++)
                    for (int t = 0; t < AT; t++)
                        for (int j = 0; j < AT; j++)
                            leak += (j < pack_first_key(pos, window, b, AT, t) || j > t) &&
                                    att_g[(((size_t)b * ANH + h) * AT + t) * AT + j] != 0.0f;
            CHECK_MSG(leak == 0, "packed plain attention: %d probabilities outside a row's keys", leak);
        }
        printf("%s %s attention T=%d NH=%d NKV=%d hs=%d window %d: out %.2e, lse %.2e, dqkv %.2e "
               "against the cpu\n", packed ? "packed" : "causal", flash ? "flash" : "plain", AT,
               ANH, nkv, hs, window, eo, el, ed);
        CHECK_MSG(eo <= 1e-4 && el <= 1e-4 && ed <= 1e-4, "%s %s attention window %d beyond 1e-4",
                  packed ? "packed" : "causal", flash ? "flash" : "plain", window);
        CHECK_MSG(!memcmp(dq_g, dq_g2, nq * 4), "packed attention backward: two runs differ");
        /* the bits of the ops without the mask: the _seg op with pos NULL and window 0 against
         * the causal op (packed cases), and a window >= T against no window */
        if ((packed && !window) || window >= AT) {
            float *o_n = malloc(no * 4), *dq_n = malloc(nq * 4);
            const int32_t *dp_n = window ? dpos : NULL;
            if (window) { /* dO, ddq: the op with the window (the last run above) */
            } else if (flash) {
                cu->flash_attention_forward_seg(dO, dl, dqkv, AB, AT, AC, ANH, nkv, NULL, 0);
                cu->flash_attention_backward_seg(ddq, dscr, ddout, dqkv, dO, dl, AB, AT, AC, ANH, nkv, NULL, 0);
            } else {
                cu->attention_forward_seg(dO, datt, dqkv, AB, AT, AC, ANH, nkv, NULL, 0);
                cu->attention_backward_seg(ddq, dscr, ddout, dqkv, datt, AB, AT, AC, ANH, nkv, NULL, 0);
            }
            dget(o_n, dO, no * 4), dget(dq_n, ddq, nq * 4);
            if (window && flash) {
                cu->flash_attention_forward_seg(dO, dl, dqkv, AB, AT, AC, ANH, nkv, dp_n, 0);
                cu->flash_attention_backward_seg(ddq, dscr, ddout, dqkv, dO, dl, AB, AT, AC, ANH, nkv, dp_n, 0);
            } else if (window) {
                cu->attention_forward_seg(dO, datt, dqkv, AB, AT, AC, ANH, nkv, dp_n, 0);
                cu->attention_backward_seg(ddq, dscr, ddout, dqkv, datt, AB, AT, AC, ANH, nkv, dp_n, 0);
            } else if (flash) {
                cu->flash_attention_forward(dO, dl, dqkv, AB, AT, AC, ANH, nkv);
                cu->flash_attention_backward(ddq, dscr, ddout, dqkv, dO, dl, AB, AT, AC, ANH, nkv);
            } else {
                cu->attention_forward(dO, datt, dqkv, AB, AT, AC, ANH, nkv);
                cu->attention_backward(ddq, dscr, ddout, dqkv, datt, AB, AT, AC, ANH, nkv);
            }
            dget(o_g, dO, no * 4), dget(dq_g, ddq, nq * 4);
            CHECK_MSG(!memcmp(o_n, o_g, no * 4) && !memcmp(dq_n, dq_g, nq * 4),
                      "%s attention: the _seg op %s differs from the op without", flash ? "flash" : "plain",
                      window ? "with a window >= T" : "without positions");
            free(o_n), free(dq_n);
        }
        dfree(dqkv, nq * 4), dfree(ddout, no * 4), dfree(dO, no * 4), dfree(dl, nl * 4);
        if (datt) dfree(datt, na * 4);
        dfree(ddq, nq * 4), dfree(dscr, nl * 4);
    }
    if (dpos) dfree(dpos, (size_t)AB * AT * sizeof(int32_t));
    free(pos), free(qkv), free(dout), free(o_c), free(l_c), free(dq_c), free(att_c), free(o_g);
    free(l_g), free(dq_g), free(dq_g2), free(att_g), free(scr);
}

/* GPT-2's encoder and RoPE at each token's position in its example */
static void t_pack_positions(void) {
    enum { B = 3, T = 70, C = 48, V = 50, NH = 4, NKV = 2, HD = 16 };
    const size_t BT = (size_t)B * T;
    int32_t pos[B * T], inp[B * T];
    pack_positions(pos, B, T);
    for (size_t i = 0; i < BT; i++) inp[i] = (int32_t)((frand() + 1.0f) * 0.5f * (V - 1));
    float *wte = rnd((size_t)V * C, 1.0f), *wpe = rnd((size_t)T * C, 1.0f), *dout = rnd(BT * C, 1.0f);
    float *out_c = malloc(BT * C * 4), *out_g = malloc(BT * C * 4);
    float *dwte_c = calloc((size_t)V * C, 4), *dwpe_c = calloc((size_t)T * C, 4);
    float *dwte_g = malloc((size_t)V * C * 4), *dwpe_g = malloc((size_t)T * C * 4);
    int32_t *dpos = dput(pos, sizeof pos), *dinp = dput(inp, sizeof inp);
    float *dwte = dput(wte, (size_t)V * C * 4), *dwpe = dput(wpe, (size_t)T * C * 4);
    float *ddout = dput(dout, BT * C * 4), *dout_g = dput(NULL, BT * C * 4);
    float *gwte = dput(dwte_c, (size_t)V * C * 4), *gwpe = dput(dwpe_c, (size_t)T * C * 4);
    cpu->encoder_forward_pos(out_c, inp, wte, wpe, pos, B, T, C);
    cpu->encoder_backward_pos(dwte_c, dwpe_c, dout, inp, pos, B, T, C);
    cu->encoder_forward_pos(dout_g, dinp, dwte, dwpe, dpos, B, T, C);
    cu->encoder_backward_pos(gwte, gwpe, ddout, dinp, dpos, B, T, C);
    dget(out_g, dout_g, BT * C * 4), dget(dwte_g, gwte, (size_t)V * C * 4), dget(dwpe_g, gwpe, (size_t)T * C * 4);
    double e1 = maxrel(out_g, out_c, BT * C), e2 = maxrel(dwte_g, dwte_c, (size_t)V * C);
    double e3 = maxrel(dwpe_g, dwpe_c, (size_t)T * C);
    printf("packed encoder: out %.2e dwte %.2e dwpe %.2e against the cpu\n", e1, e2, e3);
    CHECK_MSG(e1 == 0.0 && e2 <= 1e-6 && e3 <= 1e-6, "packed encoder against the cpu");
    /* RoPE (tables of T rows) at positions, forward then backward */
    const size_t W = (size_t)(NH + 2 * NKV) * HD, nq = BT * W;
    float *cs = malloc((size_t)T * HD / 2 * 4), *sn = malloc((size_t)T * HD / 2 * 4);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HD / 2; i++) {
            const double f = t * pow(10000.0, -2.0 * i / HD);
            cs[t * HD / 2 + i] = (float)cos(f), sn[t * HD / 2 + i] = (float)sin(f);
        }
    float *q = rnd(nq, 1.0f), *q_c = malloc(nq * 4), *q_g = malloc(nq * 4);
    memcpy(q_c, q, nq * 4);
    float *dq = dput(q, nq * 4), *dcs = dput(cs, (size_t)T * HD / 2 * 4), *dsn = dput(sn, (size_t)T * HD / 2 * 4);
    double er[2];
    for (int bwd = 0; bwd < 2; bwd++) {
        if (bwd) {
            cpu->rope_backward_pos(q_c, cs, sn, B, T, NH, NKV, HD, pos);
            cu->rope_backward_pos(dq, dcs, dsn, B, T, NH, NKV, HD, dpos);
        } else {
            cpu->rope_forward_pos(q_c, cs, sn, B, T, NH, NKV, HD, pos);
            cu->rope_forward_pos(dq, dcs, dsn, B, T, NH, NKV, HD, dpos);
        }
        dget(q_g, dq, nq * 4);
        er[bwd] = maxrel(q_g, q_c, nq);
    }
    printf("packed rope: forward %.2e, backward %.2e against the cpu\n", er[0], er[1]);
    CHECK_MSG(er[0] <= 1e-6 && er[1] <= 1e-6, "packed rope against the cpu");
    dfree(dpos, sizeof pos), dfree(dinp, sizeof inp), dfree(dwte, (size_t)V * C * 4);
    dfree(dwpe, (size_t)T * C * 4), dfree(ddout, BT * C * 4), dfree(dout_g, BT * C * 4);
    dfree(gwte, (size_t)V * C * 4), dfree(gwpe, (size_t)T * C * 4), dfree(dq, nq * 4);
    dfree(dcs, (size_t)T * HD / 2 * 4), dfree(dsn, (size_t)T * HD / 2 * 4);
    free(wte), free(wpe), free(dout), free(out_c), free(out_g), free(dwte_c), free(dwpe_c);
    free(dwte_g), free(dwpe_g), free(cs), free(sn), free(q), free(q_c), free(q_g);
}

static void t_pack(void) {
    t_pack_attention(256, 4, 1, 0);
    t_pack_attention(256, 2, 1, 0);
    t_pack_attention(512, 2, 1, 0);
    t_pack_attention(320, 2, 1, 0);
    /* sliding windows: hs 64 and 128 (tiled flash), 80 (the per-row kernels) */
    t_pack_attention(256, 2, 0, 1);
    t_pack_attention(256, 4, 1, 2);
    t_pack_attention(512, 2, 0, 33);
    t_pack_attention(256, 2, 1, 70);
    t_pack_attention(320, 2, 0, 5);
    t_pack_attention(320, 2, 1, 130);
    t_pack_attention(256, 2, 1, 300);
    t_pack_positions();
}
