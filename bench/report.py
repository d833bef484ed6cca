#!/usr/bin/python3
"""report.py: turns the files that bench/run.sh leaves in its output directory into the
comparison table (stdout), summary.md and summary.json. Run by run.sh; can be rerun by hand:

    /usr/bin/python3 bench/report.py OUT_DIR

Files read (a missing or failed one shows as n/a, never stops the report):
  meta.json                      written by run.sh: model shape, configs, warm-up, env, ...
  gemm_peak.json                 bench/gemm_peak output
  hptrain_B{B}_T{T}.jsonl        hptrain train --log (one object per step)
  hptrain_B{B}_T{T}.time         /usr/bin/time -f "%M %e %U %S %x" (maxrss KiB, wall, user,
                                 sys, exit status)
  torch_{best,default}_B{B}_T{T}.json / .time    bench/torch_gpt2.py output, same timing

Figures:
  tok/s       B*T / median step time of the steps after warm-up (the same rule both sides)
  peak RSS    /usr/bin/time's maximum resident set of the whole process (same tool both sides)
  MFU         model FLOPs per token * tok/s / GEMM peak, with model FLOPs per token
              6*N + 12*L*C*T (PaLM appendix B), N = every parameter, wte counted once
"""
import json
import os
import statistics
import sys


def load_json(path):
    """A whole-file JSON object, or else the first line of the file that is one."""
    try:
        with open(path) as f:
            text = f.read()
        try:
            return json.loads(text)
        except ValueError:
            pass
        for line in text.splitlines():
            try:
                if line.strip().startswith("{"):
                    return json.loads(line)
            except ValueError:
                continue
    except OSError:
        pass
    return None


def load_time(path):
    """(maxrss bytes, wall s, user s, sys s, exit status) from /usr/bin/time's last line."""
    try:
        with open(path) as f:
            lines = [ln.split() for ln in f if ln.strip()]
        for parts in reversed(lines):
            if len(parts) == 5:
                rss_kb, wall, user, syst, rc = parts
                return {"rss_bytes": int(rss_kb) * 1024, "wall_s": float(wall),
                        "user_s": float(user), "sys_s": float(syst), "exit": int(rc)}
    except (OSError, ValueError):
        pass
    return None


def load_hptrain(path, warmup):
    """Median step_ms of the records after the first `warmup`, last rss/mem peaks."""
    recs = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if isinstance(r, dict) and "step_ms" in r:
                    recs.append(r)
    except OSError:
        return None
    if not recs:
        return None
    timed = recs[warmup:] if len(recs) > warmup else recs[-1:]
    ms = [float(r["step_ms"]) for r in timed]
    last = recs[-1]
    return {"steps_logged": len(recs), "steps_timed": len(timed),
            "step_ms": statistics.median(ms), "step_ms_all": ms,
            "rss_peak_bytes_logged": last.get("rss_peak_bytes"),
            "mem_peak_bytes_logged": last.get("mem_peak_bytes"),
            "first_loss": recs[0].get("loss"), "last_loss": last.get("loss")}


def n_params(L, C, V, maxT):
    """GPT-2 parameters, wte (V rows, unpadded) counted once as it is tied to the lm head."""
    per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) \
        + (4 * C * C + C)
    return V * C + maxT * C + L * per_layer + 2 * C


def fmt_bytes(b):
    return "n/a" if b is None else "%.2f GiB" % (b / 2**30) if b >= 2**30 else \
        "%.0f MiB" % (b / 2**20)


def fmt(x, f="%.1f"):
    return "n/a" if x is None else f % x


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def main():
    if len(sys.argv) != 2:
        print("usage: report.py OUT_DIR", file=sys.stderr)
        return 2
    out = sys.argv[1]
    meta = load_json(os.path.join(out, "meta.json")) or {}
    L, C, NH = meta.get("L", 12), meta.get("C", 768), meta.get("NH", 12)
    V, maxT = meta.get("V", 50257), meta.get("maxT", 1024)
    warmup = meta.get("warmup", {})
    N = n_params(L, C, V, maxT)
    gemm = load_json(os.path.join(out, "gemm_peak.json"))
    # the quick GEMM checks run.sh makes before the first run and after each: (name, GFLOP/s)
    checks = []
    try:
        with open(os.path.join(out, "gemm_checks.txt")) as f:
            for name in f.read().split():
                c = load_json(os.path.join(out, "gemm_check_%s.json" % name))
                if c:
                    checks.append((name, c["peak_gflops"]))
    except OSError:
        pass
    peak_gf = max([gemm["peak_gflops"] if gemm else 0.0] + [g for _, g in checks]) or None
    peak = peak_gf * 1e9 if peak_gf else None
    speed = {}  # run name -> (GEMM GFLOP/s just before, just after)
    for i in range(1, len(checks)):
        speed[checks[i][0]] = (checks[i - 1][1], checks[i][1])

    rows, summary = [], {"meta": meta, "n_params": N, "gemm": gemm, "configs": []}
    for cfg in meta.get("configs", ["4x64", "4x256"]):
        B, T = (int(v) for v in cfg.split("x"))
        tag = "B%d_T%d" % (B, T)
        flop_tok = 6 * N + 12 * L * C * T
        w = int(warmup.get(cfg, 2))
        h = load_hptrain(os.path.join(out, "hptrain_%s.jsonl" % tag), w)
        ht = load_time(os.path.join(out, "hptrain_%s.time" % tag))
        entry = {"B": B, "T": T, "flops_per_token": flop_tok}
        res = {}
        if h and ht and ht["exit"] == 0:
            tps = B * T / (h["step_ms"] / 1e3)
            res["hptrain"] = dict(h, tokens_per_s=tps, rss_peak_bytes=ht["rss_bytes"],
                                  time=ht)
        else:
            res["hptrain"] = {"error": (meta.get("hptrain_note") or "no run") if not ht else
                              "exit %d" % ht["exit"] if ht["exit"] else "no log records"}
        for which in ("best", "default"):
            t = load_json(os.path.join(out, "torch_%s_%s.json" % (which, tag)))
            tt = load_time(os.path.join(out, "torch_%s_%s.time" % (which, tag)))
            if t and tt and tt["exit"] == 0:
                res["torch_" + which] = dict(t, rss_peak_bytes_internal=t["rss_peak_bytes"],
                                             rss_peak_bytes=tt["rss_bytes"], time=tt)
            else:
                res["torch_" + which] = {"error": "no run" if not tt else
                                         "exit %d" % tt["exit"] if tt["exit"] else "no output"}
        for k, r in res.items():
            if "tokens_per_s" in r and peak:
                r["mfu"] = flop_tok * r["tokens_per_s"] / peak
            run = "%s_%s" % (k, tag)
            if run in speed and peak_gf:
                r["gemm_check_gflops_before_after"] = list(speed[run])
                r["machine_speed"] = min(speed[run]) / peak_gf
        entry.update(res)
        summary["configs"].append(entry)
        hp, tb, td = res["hptrain"], res["torch_best"], res["torch_default"]
        rows.append(["B=%d T=%d" % (B, T),
                     fmt(hp.get("tokens_per_s")), fmt(tb.get("tokens_per_s")),
                     fmt(ratio(hp.get("tokens_per_s"), tb.get("tokens_per_s")), "%.2fx"),
                     fmt_bytes(hp.get("rss_peak_bytes")), fmt_bytes(tb.get("rss_peak_bytes")),
                     fmt(ratio(hp.get("rss_peak_bytes"), tb.get("rss_peak_bytes")), "%.2f"),
                     fmt(None if "mfu" not in hp else 100 * hp["mfu"], "%.1f%%"),
                     fmt(None if "mfu" not in tb else 100 * tb["mfu"], "%.1f%%"),
                     fmt(td.get("tokens_per_s")), fmt_bytes(td.get("rss_peak_bytes"))])

    head = ["config", "hptrain tok/s", "torch tok/s", "ratio", "hptrain peak RSS",
            "torch peak RSS", "RSS ratio", "hptrain MFU", "torch MFU",
            "torch default tok/s", "torch default RSS"]
    lines = []
    lines.append("GPT-2 L=%d C=%d NH=%d V=%d (hptrain Vp=%s), maxT=%d, N=%d parameters; fp32, "
                 "AdamW, %s threads" % (L, C, NH, V, meta.get("Vp", "?"), maxT, N,
                                        meta.get("threads", "?")))
    lines.append("GEMM peak: %s GFLOP/s (%s, best over model shapes and a 4096^3 square, "
                 "and over the quick checks between runs; full measurement %s)"
                 % (fmt(peak_gf), gemm["library"] if gemm else "n/a",
                    fmt(gemm and gemm["peak_gflops"])))
    summary["gemm_peak_gflops"] = peak_gf
    summary["gemm_checks"] = checks
    lines.append("torch best config: %s" % meta.get("torch_best_desc", "n/a"))
    lines.append("torch default config: only OPENBLAS_NUM_THREADS=%s (thread parity); OpenBLAS "
                 "picks its core itself, glibc malloc and OpenMP defaults; same script and "
                 "optimizer" % meta.get("threads", "?"))
    lines.append("")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    lines.append("")
    lines.append("ratio = hptrain tok/s / torch (best) tok/s; RSS ratio = hptrain / torch (best); "
                 "MFU = (6N + 12LCT) * tok/s / GEMM peak; tok/s from the median step after "
                 "warm-up; peak RSS from /usr/bin/time on both sides.")
    for e in summary["configs"]:
        for k in ("hptrain", "torch_best", "torch_default"):
            r = e[k]
            if "error" in r:
                lines.append("note: B=%d T=%d %s: %s" % (e["B"], e["T"], k, r["error"]))
        hp = e["hptrain"]
        fastest = []
        for k, key in (("hptrain", "step_ms_all"), ("torch_best", "step_ms_all"),
                       ("torch_default", "step_ms_all")):
            if e[k].get(key):
                fastest.append("%s %.0f ms (median %.0f)" % (k, min(e[k][key]), e[k]["step_ms"]))
        if fastest:
            lines.append("B=%d T=%d fastest timed step: %s" % (e["B"], e["T"], ", ".join(fastest)))
        if hp.get("rss_peak_bytes_logged") is not None:
            lines.append("B=%d T=%d hptrain logged: rss_peak_bytes %s, mem_peak_bytes %s "
                         "(accounted)" % (e["B"], e["T"], fmt_bytes(hp["rss_peak_bytes_logged"]),
                                          fmt_bytes(hp.get("mem_peak_bytes_logged"))))
    sp = []
    slow = []
    for e in summary["configs"]:
        for k in ("hptrain", "torch_best", "torch_default"):
            ms = e[k].get("machine_speed")
            if ms is not None:
                sp.append("%s B=%d T=%d %.0f%%" % (k, e["B"], e["T"], 100 * ms))
                if ms < 0.85:
                    slow.append("%s B=%d T=%d" % (k, e["B"], e["T"]))
    if sp:
        lines.append("machine speed around each run (the slower of the quick GEMM checks just "
                     "before and after, % of the peak): " + ", ".join(sp))
    if slow:
        lines.append("WARNING: the machine was slower than 85%% of its GEMM peak around: %s; "
                     "their figures are suspect, run again" % "; ".join(slow))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
