#!/usr/bin/env python3
"""bench_predict.py: the report of bench/bench_predict.sh (standard library only).

  bench_predict.py OUT SEED...   evaluation report: OUT/full_sS.jsonl and OUT/hybrid_sS.jsonl per
                                 seed, OUT/trace.json (memory); writes OUT/curves.svg, prints
                                 markdown
  bench_predict.py --tune OUT    the tuning grid's table (OUT/tune_*.jsonl, seed 1)

Wall-clock is the sum of the logged step_ms (forward, backward, update or prediction, checks;
not evaluation or saving), so evaluation cost, identical for both schedules, is left out.
"""
import glob
import json
import math
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def curve(rows):
    """(seconds, step, val_loss) at each evaluation."""
    t, pts = 0.0, []
    for r in rows:
        t += r["step_ms"] / 1e3
        if "val_loss" in r:
            pts.append((t, r["step"], r["val_loss"]))
    return pts


def total_s(rows):
    return sum(r["step_ms"] for r in rows) / 1e3


def reach(pts, target):
    """The (seconds, step) at which the curve first reaches target, interpolated linearly
    between evaluations; None if it never does."""
    prev = None
    for p in pts:
        if p[2] <= target:
            if prev is None or prev[2] == p[2]:
                return p[0], float(p[1])
            f = (prev[2] - target) / (prev[2] - p[2])
            return prev[0] + f * (p[0] - prev[0]), prev[1] + f * (p[1] - prev[1])
        prev = p
    return None


def at_time(pts, t):
    """The curve's validation loss at t seconds, interpolated linearly between evaluations
    (None before the first one or after the last)."""
    prev = None
    for p in pts:
        if p[0] >= t:
            if prev is None:
                return None
            f = (t - prev[0]) / (p[0] - prev[0])
            return prev[2] + f * (p[2] - prev[2])
        prev = p
    return None


def phase_stats(rows):
    out = {}
    for r in rows:
        out.setdefault(r["phase"], []).append(r["step_ms"])
    return {k: (len(v), statistics.median(v)) for k, v in out.items()}


def spread(xs):
    if not xs:
        return "-"
    m = statistics.mean(xs)
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return "%.3f (min %.3f, max %.3f, sd %.3f, n=%d)" % (m, min(xs), max(xs), sd, len(xs))


# ---- SVG ----

COLORS = {"full": "#1f77b4", "hybrid": "#d62728"}
DASHES = ["", "6,3", "2,3", "8,3,2,3"]


def nice_ticks(lo, hi, n=5):
    span = hi - lo if hi > lo else 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    t = math.ceil(lo / step) * step
    ticks = []
    while t <= hi + 1e-9:
        ticks.append(round(t, 10))
        t += step
    return ticks


def panel(x0, y0, w, h, series, xkey, xlabel, ylo, yhi, title):
    xs = [p[xkey] for s in series for p in s["pts"]]
    xlo, xhi = 0.0, max(xs) if xs else 1.0
    sx = lambda v: x0 + (v - xlo) / (xhi - xlo) * w
    sy = lambda v: y0 + h - (v - ylo) / (yhi - ylo) * h
    o = ['<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#444"/>' % (x0, y0, w, h)]
    o.append('<text x="%g" y="%g" font-size="14" text-anchor="middle">%s</text>' % (x0 + w / 2, y0 - 10, title))
    for t in nice_ticks(xlo, xhi):
        o.append('<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#ddd"/>' % (sx(t), y0, sx(t), y0 + h))
        o.append('<text x="%g" y="%g" font-size="11" text-anchor="middle">%g</text>' % (sx(t), y0 + h + 15, t))
    for t in nice_ticks(ylo, yhi):
        o.append('<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="#ddd"/>' % (x0, sy(t), x0 + w, sy(t)))
        o.append('<text x="%g" y="%g" font-size="11" text-anchor="end">%g</text>' % (x0 - 5, sy(t) + 4, t))
    o.append('<text x="%g" y="%g" font-size="12" text-anchor="middle">%s</text>' % (x0 + w / 2, y0 + h + 34, xlabel))
    o.append('<text x="%g" y="%g" font-size="12" text-anchor="middle" transform="rotate(-90 %g %g)">'
             'validation loss</text>' % (x0 - 42, y0 + h / 2, x0 - 42, y0 + h / 2))
    for s in series:
        pts = " ".join("%.2f,%.2f" % (sx(p[xkey]), sy(min(max(p[2], ylo), yhi))) for p in s["pts"])
        dash = ' stroke-dasharray="%s"' % s["dash"] if s["dash"] else ""
        o.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6"%s/>' % (pts, s["color"], dash))
    return o


def write_svg(path, series):
    vals = [p[2] for s in series for p in s["pts"]]
    finals = [s["pts"][-1][2] for s in series if s["pts"]]
    ylo = math.floor(min(vals) * 10) / 10
    yhi = min(max(vals), max(finals) + 1.5)  # the first evaluations are far above; clip them
    yhi = math.ceil(yhi * 10) / 10
    W, H = 1040, 470
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, H),
         '<rect width="%d" height="%d" fill="white"/>' % (W, H)]
    o += panel(70, 40, 420, 340, series, 0, "wall-clock seconds (training steps only)", ylo, yhi,
               "validation loss vs wall-clock")
    o += panel(590, 40, 420, 340, series, 1, "optimizer steps", ylo, yhi, "validation loss vs steps")
    lx = 70
    for i, s in enumerate(series):
        y = 440 + (i % 2) * 0
        x = lx + i * 160
        dash = ' stroke-dasharray="%s"' % s["dash"] if s["dash"] else ""
        o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>' % (x, y, x + 28, y, s["color"], dash))
        o.append('<text x="%d" y="%d" font-size="12">%s</text>' % (x + 33, y + 4, s["name"]))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


# ---- memory from the trace ----

def trace_peaks(path):
    with open(path) as f:
        tr = json.load(f)
    peak = {}
    for e in tr["events"]:
        if e.get("tier") != "device" or e.get("kind") == "transfer":
            continue
        ph = e.get("phase")
        peak[ph] = max(peak.get(ph, 0), e.get("tier_live_bytes", 0))
    return peak


def mib(b):
    return "%.2f MiB" % (b / 1048576.0)


def report(out, seeds):
    print("## hybrid vs FULL-only (bench/bench_predict.sh)\n")
    load_txt = os.path.join(out, "load.txt")
    if os.path.exists(load_txt):
        print("machine load (1, 5, 15 min): " + "; ".join(open(load_txt).read().split("\n")).strip("; ") + "\n")
    print("| seed | FULL final val | FULL s | hybrid final val | hybrid s | FULL's val at hybrid's s | hybrid reaches FULL's final val at | time ratio | step ratio | predict steps |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |")
    series, ratios, sratios, gaps, tratio, eqt = [], [], [], [], [], []
    ph_full, ph_hyb = {}, {}
    for i, s in enumerate(seeds):
        full, hyb = load(os.path.join(out, "full_s%s.jsonl" % s)), load(os.path.join(out, "hybrid_s%s.jsonl" % s))
        cf, ch = curve(full), curve(hyb)
        target = cf[-1][2]
        tf, th = total_s(full), total_s(hyb)
        r = reach(ch, target)
        pst = phase_stats(hyb)
        n_pred = pst.get("predict", (0, 0))[0]
        for k, v in phase_stats(full).items():
            ph_full.setdefault(k, []).append(v[1])
        for k, v in pst.items():
            ph_hyb.setdefault(k, []).append(v[1])
        gaps.append(ch[-1][2] - target)
        tratio.append(th / tf)
        if r:
            ratios.append(r[0] / tf)
            sratios.append(r[1] / cf[-1][1])
            at = "%.1f s, step %.0f" % r
            rat, srat = "%.3f" % (r[0] / tf), "%.3f" % (r[1] / cf[-1][1])
        else:
            at, rat, srat = "not reached (gap %+.4f)" % (ch[-1][2] - target), "-", "-"
        fe = at_time(cf, th)
        if fe is not None:
            eqt.append(ch[-1][2] - fe)
        print("| %s | %.4f | %.1f | %.4f | %.1f | %s | %s | %s | %s | %d of %d |" % (
            s, target, tf, ch[-1][2], th, "%.4f" % fe if fe is not None else "-", at, rat, srat,
            n_pred, len(hyb)))
        series.append({"name": "FULL-only seed %s" % s, "pts": cf, "color": COLORS["full"], "dash": DASHES[i % 4]})
        series.append({"name": "hybrid seed %s" % s, "pts": ch, "color": COLORS["hybrid"], "dash": DASHES[i % 4]})
    print()
    print("- wall-clock ratio to reach FULL-only's final validation loss (below 1: hybrid faster): %s"
          % (spread(ratios) if ratios else "not reached in any seed"))
    print("- seeds where hybrid reached it: %d of %d" % (len(ratios), len(seeds)))
    print("- step ratio to reach it: %s" % (spread(sratios) if sratios else "-"))
    print("- final validation loss, hybrid minus FULL-only: %s" % spread(gaps))
    print("- whole-run wall-clock, hybrid / FULL-only: %s" % spread(tratio))
    print("- at equal wall-clock (hybrid's whole run), hybrid's final val minus FULL-only's val then: %s"
          % spread(eqt))
    print("- median step time by phase (ms, mean over seeds): FULL-only %s; hybrid %s" % (
        ", ".join("%s %.1f" % (k, statistics.mean(v)) for k, v in sorted(ph_full.items())),
        ", ".join("%s %.1f" % (k, statistics.mean(v)) for k, v in sorted(ph_hyb.items()))))
    svg = os.path.join(out, "curves.svg")
    write_svg(svg, series)
    print("- picture: %s" % svg)
    tp = os.path.join(out, "trace.json")
    if os.path.exists(tp):
        pk = trace_peaks(tp)
        full_pk = max(pk.get(k, 0) for k in ("warmup", "full", "correct"))
        pred_pk = pk.get("predict", 0)
        print("\nmemory (device tier, accounted; a 200-step hybrid run with checks every 4, seed 1, "
              "recorded with --trace; picture: %s):\n" % os.path.join(out, "profile.svg"))
        print("| phase | device peak |")
        print("| --- | ---: |")
        for k in ("setup", "warmup", "full", "predict", "correct", "eval"):
            if k in pk:
                print("| %s | %s |" % (k, mib(pk[k])))
        if full_pk:
            print("\npredict-phase peak / full-phase peak (warmup, full, correct): %s / %s = %.3f"
                  % (mib(pred_pk), mib(full_pk), pred_pk / full_pk))


def tune(out):
    rows = []
    base = load(os.path.join(out, "tune_full.jsonl"))
    bf = curve(base)[-1][2]
    for p in sorted(glob.glob(os.path.join(out, "tune_*.jsonl"))):
        name = os.path.basename(p)[5:-6]
        r = load(p)
        c = curve(r)
        pst = phase_stats(r)
        rows.append((c[-1][2], name, total_s(r), pst.get("predict", (0, 0))[0], len(r)))
    print("## tuning grid, seed 1 (FULL-only final val %.4f)\n" % bf)
    print("| setting | final val | vs FULL-only | train s | predict steps |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for v, name, t, npred, n in sorted(rows):
        print("| %s | %.4f | %+.4f | %.1f | %d of %d |" % (name, v, v - bf, t, npred, n))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--tune":
        tune(sys.argv[2])
    elif len(sys.argv) >= 3:
        report(sys.argv[1], sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
