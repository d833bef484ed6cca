#!/usr/bin/env python3
"""bench_jump2.py: the report of bench/bench_jump2.sh (docs/predict.md, "Jumps at the issue's scale").

  bench_jump2.py [--jump NAME] OUT QUIET CORPUS SEED...
      per hybrid kind (NAME, default jump_chosen; adam; linear) and seed: steps and cost to
      reach full_s<seed>'s final validation loss; curves_<CORPUS>.svg in OUT

OUT/CORPUS holds each run's log (NAME_sSEED.jsonl) and its process CPU time (NAME_sSEED.time:
user, system, elapsed seconds). QUIET holds the runs that measured the per-phase costs quietly
(fullq.jsonl: FULL-only; jump.jsonl: the jump schedule as the runs ran, its real steps
computing AdamW's update norm; jumpfix.jsonl: after the fix; adam.jsonl, linear.jsonl): the
median step_ms per phase, a jump's cost per forwarded sequence. Steps: for a jump run its real steps (the steps that back-propagate; a jump
is counted apart and enters the cost), for the per-step predictors every step, a predicted one
included (their real steps beside). Cost to a point: each logged step up to it at its quiet
phase cost (a jump: its forwards at the quiet cost of one); measured: the sum of the logged
step_ms (under the shared load)."""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_jump import full_steps_to, load  # noqa: E402
from bench_predict import panel, spread  # noqa: E402

KINDS = [("jump_chosen", "#d62728"), ("adam", "#2ca02c"), ("linear", "#9467bd")]


def quiet_costs(qdir, jumpfile):
    """Median step_ms per (kind, phase) from the quiet runs; 'fwd': ms per jump-forwarded sequence."""
    c = {}
    for kind, f in (("jump", jumpfile), ("adam", "adam"), ("linear", "linear"), ("full", "fullq")):
        rows = load(os.path.join(qdir, f + ".jsonl"))
        by = {}
        for r in rows[1:]:  # the first step allocates
            by.setdefault(r["phase"], []).append(r["step_ms"])
        for ph, v in by.items():
            c[(kind, ph)] = statistics.median(v)
        if kind == "jump":
            js = [r for r in rows if r["phase"] == "predict"]
            c["fwd"] = sum(r["step_ms"] for r in js) / sum(r["jump_forwards"] for r in js)
    return c


def step_cost(c, kind, r):
    k = "jump" if kind.startswith("jump") else kind
    if kind == "full":
        return c[("full", "full")]
    if r["phase"] in ("warmup", "full"):
        return c[(k, "full")]
    if k == "jump" and r["phase"] == "predict":
        return r["jump_forwards"] * c["fwd"]
    return c[(k, r["phase"])]


def points(rows, kind, c):
    """Per evaluation: (quiet-cost s, steps counted, val_loss, measured s, real steps)."""
    t = tm = 0.0
    real = steps = 0
    pts = []
    for r in rows:
        t += step_cost(c, kind, r) / 1e3
        tm += r["step_ms"] / 1e3
        if r["phase"] != "predict":
            real += 1
        if not (kind.startswith("jump") and r["phase"] == "predict"):
            steps += 1
        if "val_loss" in r:
            pts.append((t, steps, r["val_loss"], tm, real))
    return pts


def cpu(path):
    try:
        with open(path) as f:
            u, s, e = f.read().split()[:3]
        return float(u) + float(s), float(e)
    except (OSError, ValueError):
        return None, None


def summary(d, kind, seed, c, cfix):
    full = load(os.path.join(d, "full_s%s.jsonl" % seed))
    hyb = load(os.path.join(d, "%s_s%s.jsonl" % (kind, seed)))
    fp, hp = points(full, "full", c), points(hyb, kind, c)
    target, n_full = fp[-1][2], fp[-1][1]
    s = {"seed": seed, "target": target, "final": hp[-1][2], "gap": hp[-1][2] - target,
         "n": hp[-1][1], "real": hp[-1][4], "pts": hp, "full_pts": fp,
         "done": hyb[-1]["step"] if hyb else 0}
    # the gap at equal steps, averaged over the evaluations both runs made (the same windows)
    # (FULL-only interpolated at the hybrid run's step count)
    def at(x):
        for a, b in zip(fp, fp[1:]):
            if a[1] <= x <= b[1]:
                return a[2] + (b[2] - a[2]) * (x - a[1]) / (b[1] - a[1])
        return None
    g = [p[2] - at(p[1]) for p in hp if p[1] > 400 and at(p[1]) is not None]
    s["eq_gap"] = statistics.mean(g) if g else None
    s["eq_gap_n"] = len(g)
    s["eq"] = full_steps_to([(p[0], p[1], p[2]) for p in fp], hp[-1][2])
    fc, hc = cpu(os.path.join(d, "full_s%s.time" % seed)), cpu(os.path.join(d, "%s_s%s.time" % (kind, seed)))
    if fc[0] and hc[0]:
        s["cpu_ratio"] = hc[0] / fc[0]
        s["cpu"] = (hc[0], fc[0])
    js = [r for r in hyb if r["phase"] == "predict"]
    s["npred"] = len(js)
    s["whole_cost"] = hp[-1][0] / fp[-1][0]  # the whole run at the quiet costs (as run)
    if kind.startswith("jump"):
        s["whole_cost_fix"] = points(hyb, kind, cfix)[-1][0] / points(full, "full", cfix)[-1][0]
    if kind.startswith("jump"):
        s["taken"] = sum(1 for r in js if any(r.get("jump_scales") or [0]))
        s["scales"] = [r.get("jump_scales") for r in js]
        s["gains"] = [r.get("jump_gain") for r in js]
    for p in hp:
        if p[2] <= target:
            s["steps_ratio"] = p[1] / n_full
            s["cost_ratio"] = p[0] / fp[-1][0]
            if kind.startswith("jump"):
                hf, ff = points(hyb, kind, cfix), points(full, "full", cfix)
                s["cost_ratio_fix"] = hf[hp.index(p)][0] / ff[-1][0]
            s["meas_ratio"] = p[3] / fp[-1][3]
            s["reach"], s["reach_real"] = p[1], p[4]
            break
    return s


def svg(path, corpus, allseries, xkey_title):
    vals = [p[2] for s in allseries for p in s["pts"]]
    finals = [s["pts"][-1][2] for s in allseries]
    ylo = int(min(vals) * 10) / 10
    yhi = int((min(max(vals), max(finals) + 0.8)) * 10 + 1) / 10
    W, H = 1040, 470
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, H),
         '<rect width="%d" height="%d" fill="white"/>' % (W, H)]
    o += panel(70, 40, 420, 340, allseries, 0, "seconds at the quiet per-phase costs", ylo, yhi,
               "%s: validation loss vs cost" % corpus)
    o += panel(590, 40, 420, 340, allseries, 1, "steps (a jump run: real steps)", ylo, yhi,
               "%s: validation loss vs steps" % corpus)
    legend = [("FULL-only", "#1f77b4")] + [(k, col) for k, col in KINDS if any(x["name"] == k for x in allseries)]
    for i, (name, col) in enumerate(legend):
        x = 70 + i * 170
        o.append('<line x1="%d" y1="440" x2="%d" y2="440" stroke="%s" stroke-width="2"/>' % (x, x + 28, col))
        o.append('<text x="%d" y="444" font-size="12">%s</text>' % (x + 33, name))
    o.append('<text x="%d" y="444" font-size="12">seeds in the order given: solid, dashed, dotted</text>' % (70 + len(legend) * 170))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def fmt(v, f="%.3f"):
    return f % v if v is not None else "-"


def main():
    args = sys.argv[1:]
    if len(args) >= 2 and args[0] == "--jump":
        KINDS[0] = (args[1], KINDS[0][1])
        args = args[2:]
    if len(args) < 4:
        sys.exit(__doc__)
    out, qdir, corpus, seeds = args[0], args[1], args[2], args[3:]
    c, cfix = quiet_costs(qdir, "jump"), quiet_costs(qdir, "jumpfix")
    d = os.path.join(out, corpus)
    print("quiet costs (ms): FULL-only %.1f; jump as run: FULL %.1f, CORRECT %.1f, %.2f per forwarded sequence; jump fixed: FULL %.1f, CORRECT %.1f, %.2f; adam: FULL %.1f, predict %.1f, CORRECT %.1f; linear: FULL %.1f, predict %.1f, CORRECT %.1f\n" % (
        c[("full", "full")], c[("jump", "full")], c[("jump", "correct")], c["fwd"], cfix[("jump", "full")],
        cfix[("jump", "correct")], cfix["fwd"], c[("adam", "full")], c[("adam", "predict")], c[("adam", "correct")],
        c[("linear", "full")], c[("linear", "predict")], c[("linear", "correct")]))
    dashes = ["", "6,3", "2,3"]
    series, full_done = [], set()
    for kind, col in KINDS:
        ss = []
        for seed in seeds:
            if not (os.path.exists(os.path.join(d, "%s_s%s.jsonl" % (kind, seed))) and
                    os.path.exists(os.path.join(d, "full_s%s.jsonl" % seed))):
                continue
            ss.append(summary(d, kind, seed, c, cfix))
        if not ss:
            continue
        print("**%s, %s**\n" % (corpus, kind))
        print("| seed | steps run (real) | FULL final val | final val | gap | FULL steps to that val | steps to FULL's final (real) | steps ratio | cost ratio to it (quiet per-phase; jump: as run / fixed) | measured step_ms ratio to it | whole-run CPU time ratio (s / s) | jumps or predicted steps (taken) | mean gap at equal steps, evaluations after step 400 (n) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
        for s in ss:
            print("| %s | %d (%d) | %.4f | %.4f | %+.4f | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                s["seed"], s["n"], s["real"], s["target"], s["final"], s["gap"], fmt(s["eq"], "%.0f"),
                "%d (%d)" % (s["reach"], s["reach_real"]) if "reach" in s else "not reached",
                fmt(s.get("steps_ratio")), fmt(s.get("cost_ratio")) + (" / " + fmt(s["cost_ratio_fix"]) if "cost_ratio_fix" in s else ""),
                fmt(s.get("meas_ratio")),
                "%.3f (%.0f / %.0f)" % (s["cpu_ratio"], s["cpu"][0], s["cpu"][1]) if "cpu_ratio" in s else "-",
                "%d (%d)" % (s["npred"], s["taken"]) if "taken" in s else "%d" % s["npred"],
                "%+.4f (%d)" % (s["eq_gap"], s["eq_gap_n"]) if s["eq_gap"] is not None else "-"))
        print()
        print("- reached FULL-only's final: %d of %d seeds" % (sum("steps_ratio" in s for s in ss), len(ss)))
        for k, label in (("steps_ratio", "steps ratio"), ("cost_ratio", "cost ratio (quiet per-phase, as run)"),
                         ("cost_ratio_fix", "cost ratio (quiet per-phase, the jump's steps fixed)"),
                         ("meas_ratio", "measured step_ms ratio"), ("cpu_ratio", "whole-run CPU time ratio"),
                         ("whole_cost", "whole-run cost ratio (quiet per-phase, as run)"),
                         ("whole_cost_fix", "whole-run cost ratio (quiet per-phase, the jump's steps fixed)"),
                         ("gap", "final val minus FULL-only's")):
            print("- %s: %s" % (label, spread([s[k] for s in ss if k in s])))
        if kind.startswith("jump"):
            for s in ss:
                print("- seed %s jumps: scales (emb/mat/vec) %s; gains %s" % (
                    s["seed"], " ".join("/".join("%g" % x for x in (sc or [])) for sc in s["scales"]),
                    " ".join("%.3g" % g for g in s["gains"] if g is not None)))
        print()
        for s in ss:
            if s["seed"] not in full_done:
                full_done.add(s["seed"])
                series.append({"name": "full", "color": "#1f77b4", "dash": dashes[seeds.index(s["seed"]) % 3], "pts": s["full_pts"]})
            series.append({"name": kind, "color": col, "dash": dashes[seeds.index(s["seed"]) % 3], "pts": s["pts"]})
    if series:
        path = os.path.join(out, "curves_%s.svg" % corpus)
        svg(path, corpus, series, None)
        print("picture: %s" % path)


if __name__ == "__main__":
    main()
