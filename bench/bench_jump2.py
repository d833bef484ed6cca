#!/usr/bin/env python3
"""bench_jump2.py: the report of bench/bench_jump2.sh (docs/predict.md, "Jumps at the issue's scale").

  bench_jump2.py [--jump NAME] [--svg PREFIX] OUT QUIET CORPUS SEED...
      per hybrid kind (NAME, default jump_chosen; adam; linear) and seed: steps and CPU time to
      reach full_s<seed>'s final validation loss; pictures PREFIX_jump.svg and
      PREFIX_perstep.svg (default OUT/curves_CORPUS_*.svg)

OUT/CORPUS holds each run's log (NAME_sSEED.jsonl) and its process CPU time (NAME_sSEED.time:
user, system, elapsed seconds; empty while the run is going).

Steps: for a jump run its real steps (the steps that back-propagate; a jump is counted apart
and enters the cost), for the per-step predictors every step, a predicted one included (their
real steps beside). The target: the same seed's FULL-only final validation loss; a run reaches
it at its first evaluation (every 100 steps) at or below it.

Cost to the target, three ways:
  cpu    the registered measure: the run's process CPU time (user + system) up to the crossing,
         taken as its whole-run CPU time x (logged step_ms summed to the crossing / summed over
         the run), over FULL-only's whole-run CPU time. The step_ms are wall time per step
         under the shared load, so the share assumes the load was even over the run.
  quiet  each logged step up to the crossing at its per-phase cost measured once quietly (a
         jump: its forwarded sequences at the quiet cost of one), over FULL-only's steps at
         its quiet cost. QUIET: a directory of the quiet runs' logs (fullq.jsonl, jumpfix.jsonl,
         adam.jsonl, linear.jsonl), or '-' for the medians recorded in docs/predict.md.
  wall   the logged step_ms summed to the crossing over FULL-only's sum (under the load)."""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_jump import full_steps_to, load  # noqa: E402
from bench_predict import panel, spread  # noqa: E402

KINDS = [("jump_chosen", "#d62728"), ("adam", "#2ca02c"), ("linear", "#9467bd")]

# the quiet per-phase medians (ms) recorded in docs/predict.md (11:46-12:05 UTC of the second
# session, one thread under the bench lock, Moby-Dick seed 1; the jump run after the fix; the
# per-step predictors compute AdamW's update norm in every real step, hence FULL 150-156 ms)
RECORDED = {("full", "full"): 107.3, ("jump", "full"): 107.0, ("jump", "correct"): 160.6,
            "fwd": 15.5, ("adam", "full"): 150.0, ("adam", "predict"): 47.7,
            ("adam", "correct"): 172.0, ("linear", "full"): 155.8,
            ("linear", "predict"): 9.5, ("linear", "correct"): 268.7}


def quiet_costs(qdir):
    """Median step_ms per (kind, phase) from the quiet runs; 'fwd': ms per jump-forwarded sequence."""
    if qdir == "-" or not os.path.isdir(qdir):
        return dict(RECORDED), "recorded in docs/predict.md"
    c = {}
    for kind, f in (("jump", "jumpfix"), ("adam", "adam"), ("linear", "linear"), ("full", "fullq")):
        rows = load(os.path.join(qdir, f + ".jsonl"))
        by = {}
        for r in rows[1:]:  # the first step allocates
            by.setdefault(r["phase"], []).append(r["step_ms"])
        for ph, v in by.items():
            c[(kind, ph)] = statistics.median(v)
        if kind == "jump":
            js = [r for r in rows if r["phase"] == "predict"]
            c["fwd"] = sum(r["step_ms"] for r in js) / sum(r["jump_forwards"] for r in js)
    return c, "measured in " + qdir


def step_cost(c, kind, r):
    k = "jump" if kind.startswith("jump") else kind
    if kind == "full":
        return c[("full", "full")]
    if r["phase"] in ("warmup", "full"):
        return c[(k, "full")]
    if k == "jump" and r["phase"] == "predict":
        return r["jump_forwards"] * c["fwd"]
    return c[(k, r["phase"])]


def cpu(path):
    """(user + system, elapsed) seconds from /usr/bin/time's file, or (None, None) while running."""
    try:
        with open(path) as f:
            u, s, e = f.read().split()[:3]
        return float(u) + float(s), float(e)
    except (OSError, ValueError):
        return None, None


def points(rows, kind, c, cpu_total):
    """Per evaluation: dict(quiet s, steps counted, val, wall s, real steps, cpu s or None)."""
    tq = tw = 0.0
    real = steps = 0
    total_ms = sum(r["step_ms"] for r in rows)
    pts = []
    for r in rows:
        tq += step_cost(c, kind, r) / 1e3
        tw += r["step_ms"] / 1e3
        if r["phase"] != "predict":
            real += 1
        if not (kind.startswith("jump") and r["phase"] == "predict"):
            steps += 1
        if "val_loss" in r:
            pts.append({"quiet": tq, "steps": steps, "val": r["val_loss"], "wall": tw, "real": real,
                        "cpu": cpu_total * tw * 1e3 / total_ms if cpu_total else None})
    return pts


def summary(d, kind, seed, c):
    fcpu, _ = cpu(os.path.join(d, "full_s%s.time" % seed))
    hcpu, _ = cpu(os.path.join(d, "%s_s%s.time" % (kind, seed)))
    full = load(os.path.join(d, "full_s%s.jsonl" % seed))
    hyb = load(os.path.join(d, "%s_s%s.jsonl" % (kind, seed)))
    fp, hp = points(full, "full", c, fcpu), points(hyb, kind, c, hcpu)
    if not fp or not hp:
        return None
    last, flast = hp[-1], fp[-1]
    s = {"seed": seed, "target": flast["val"], "final": last["val"], "gap": last["val"] - flast["val"],
         "n": last["steps"], "real": last["real"], "pts": hp, "full_pts": fp,
         "logged": hyb[-1]["step"], "running": hcpu is None, "full_running": fcpu is None}

    def at(x):  # FULL-only's validation loss interpolated at x steps
        for a, b in zip(fp, fp[1:]):
            if a["steps"] <= x <= b["steps"]:
                return a["val"] + (b["val"] - a["val"]) * (x - a["steps"]) / (b["steps"] - a["steps"])
        return None
    g = [p["val"] - at(p["steps"]) for p in hp if p["steps"] > 400 and at(p["steps"]) is not None]
    s["eq_gap"] = statistics.mean(g) if g else None
    s["eq_gap_n"] = len(g)
    s["eq"] = full_steps_to([(p["quiet"], p["steps"], p["val"]) for p in fp], last["val"])
    if fcpu and hcpu:
        s["cpu_ratio"], s["cpu"] = hcpu / fcpu, (hcpu, fcpu)
    js = [r for r in hyb if r["phase"] == "predict"]
    s["npred"] = len(js)
    if kind.startswith("jump"):
        s["taken"] = sum(1 for r in js if any(r.get("jump_scales") or [0]))
        s["scales"] = [r.get("jump_scales") for r in js]
        s["gains"] = [r.get("jump_gain") for r in js]
        s["jump_steps"] = [r["step"] for r in js]
    if s["full_running"]:
        return s  # no target yet
    for p in hp:
        if p["val"] <= s["target"]:
            s["steps_ratio"] = p["steps"] / flast["steps"]
            s["quiet_ratio"] = p["quiet"] / flast["quiet"]
            s["wall_ratio"] = p["wall"] / flast["wall"]
            if p["cpu"] is not None:
                s["cpu_to_ratio"] = p["cpu"] / flast["cpu"]
            s["reach"], s["reach_real"] = p["steps"], p["real"]
            break
    return s


def svg(path, corpus, allseries, legend):
    vals = [p[2] for s in allseries for p in s["pts"]]
    finals = [s["pts"][-1][2] for s in allseries]
    ylo = int(min(vals) * 10) / 10
    yhi = int((min(max(vals), max(finals) + 0.8)) * 10 + 1) / 10
    W, H = 1040, 470
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (W, H),
         '<rect width="%d" height="%d" fill="white"/>' % (W, H)]
    o += panel(70, 40, 420, 340, allseries, 0, "process CPU seconds (whole-run CPU time x step_ms share)",
               ylo, yhi, "%s: validation loss vs CPU time" % corpus)
    o += panel(590, 40, 420, 340, allseries, 1, "steps (a jump run: real steps)", ylo, yhi,
               "%s: validation loss vs steps" % corpus)
    for i, (name, col) in enumerate(legend):
        x = 70 + i * 130
        o.append('<line x1="%d" y1="440" x2="%d" y2="440" stroke="%s" stroke-width="2"/>' % (x, x + 28, col))
        o.append('<text x="%d" y="444" font-size="12">%s</text>' % (x + 33, name))
    o.append('<text x="%d" y="444" font-size="12">seeds %s: solid, dashed, dotted</text>' % (
        70 + len(legend) * 130, ", ".join(sorted({s["seed"] for s in allseries}))))
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def fmt(v, f="%.3f"):
    return f % v if v is not None else "-"


def table(corpus, kind, ss):
    print("**%s, %s**\n" % (corpus, kind))
    print("| seed | steps logged (counted; real) | FULL final val | final val | gap | FULL steps to that val | steps to FULL's final (real) | steps ratio | CPU-time ratio to it | quiet-cost ratio to it | wall (step_ms) ratio to it | whole-run CPU ratio (s / s) | %s | mean gap at equal steps after step 400 (n) |" % (
        "jumps (taken): at step, scales emb/mat/vec, gain" if kind.startswith("jump") else "predicted steps"))
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    for s in ss:
        if kind.startswith("jump"):
            extra = "%d (%d): %s" % (s["npred"], s["taken"], "; ".join(
                "%d %s %s" % (st, "/".join("%g" % x for x in (sc or [])), "-" if g is None or g >= 1e29 else "%.3g" % g)
                for st, sc, g in zip(s["jump_steps"], s["scales"], s["gains"])))
        else:
            extra = "%d" % s["npred"]
        print("| %s | %d%s (%d; %d) | %s | %.4f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            s["seed"], s["logged"], " running" if s["running"] else "", s["n"], s["real"],
            "(running)" if s["full_running"] else "%.4f" % s["target"], s["final"],
            "-" if s["full_running"] else "%+.4f" % s["gap"], fmt(s["eq"], "%.0f"),
            "-" if s["full_running"] else ("%d (%d)" % (s["reach"], s["reach_real"]) if "reach" in s else "not reached"),
            fmt(s.get("steps_ratio")), fmt(s.get("cpu_to_ratio")), fmt(s.get("quiet_ratio")),
            fmt(s.get("wall_ratio")),
            "%.3f (%.0f / %.0f)" % (s["cpu_ratio"], s["cpu"][0], s["cpu"][1]) if "cpu_ratio" in s else "-",
            extra, "%+.4f (%d)" % (s["eq_gap"], s["eq_gap_n"]) if s["eq_gap"] is not None else "-"))
    print()
    done = [s for s in ss if not s["running"] and not s["full_running"]]
    print("- pairs complete: %d of %d; reached FULL-only's final: %d of %d complete" % (
        len(done), len(ss), sum("steps_ratio" in s for s in done), len(done)))
    for k, label in (("steps_ratio", "steps ratio (reached only)"),
                     ("cpu_to_ratio", "CPU-time ratio to the target (reached only)"),
                     ("quiet_ratio", "quiet-cost ratio to the target (reached only)"),
                     ("wall_ratio", "wall (step_ms) ratio to the target (reached only)"),
                     ("cpu_ratio", "whole-run CPU time ratio"),
                     ("gap", "final val minus FULL-only's"),
                     ("eq_gap", "mean gap at equal steps")):
        print("- %s: %s" % (label, spread([s[k] for s in done if s.get(k) is not None])))
    print()


def main():
    args = sys.argv[1:]
    prefix = None
    while args and args[0].startswith("--"):
        if args[0] == "--jump":
            KINDS[0] = (args[1], KINDS[0][1])
        elif args[0] == "--svg":
            prefix = args[1]
        else:
            sys.exit(__doc__)
        args = args[2:]
    if len(args) < 4:
        sys.exit(__doc__)
    out, qdir, corpus, seeds = args[0], args[1], args[2], args[3:]
    c, src = quiet_costs(qdir)
    d = os.path.join(out, corpus)
    prefix = prefix or os.path.join(out, "curves_%s" % corpus)
    print("quiet costs (ms, %s): FULL-only %.1f; jump: FULL %.1f, CORRECT %.1f, %.2f per forwarded sequence; "
          "adam: FULL %.1f, predict %.1f, CORRECT %.1f; linear: FULL %.1f, predict %.1f, CORRECT %.1f\n" % (
              src, c[("full", "full")], c[("jump", "full")], c[("jump", "correct")], c["fwd"],
              c[("adam", "full")], c[("adam", "predict")], c[("adam", "correct")],
              c[("linear", "full")], c[("linear", "predict")], c[("linear", "correct")]))
    dashes = ["", "6,3", "2,3"]
    groups = {"jump": [], "perstep": []}
    full_done = {"jump": set(), "perstep": set()}
    for kind, col in KINDS:
        grp = "jump" if kind.startswith("jump") else "perstep"
        ss = []
        for seed in seeds:
            if (os.path.exists(os.path.join(d, "%s_s%s.jsonl" % (kind, seed))) and
                    os.path.exists(os.path.join(d, "full_s%s.jsonl" % seed))):
                s = summary(d, kind, seed, c)
                if s:
                    ss.append(s)
        if not ss:
            continue
        table(corpus, kind, ss)
        for s in ss:
            dash = dashes[seeds.index(s["seed"]) % 3]
            xy = lambda pts: [(p["cpu"], p["steps"], p["val"]) for p in pts]
            if s["full_running"] or s["running"]:
                continue  # no CPU time yet: pictures hold complete pairs only
            if s["seed"] not in full_done[grp]:
                full_done[grp].add(s["seed"])
                groups[grp].append({"name": "full", "seed": s["seed"], "color": "#1f77b4", "dash": dash,
                                    "pts": xy(s["full_pts"])})
            groups[grp].append({"name": kind, "seed": s["seed"], "color": col, "dash": dash, "pts": xy(s["pts"])})
    for grp, series in groups.items():
        if series:
            legend = [("FULL-only", "#1f77b4")] + [(k, col) for k, col in KINDS if any(x["name"] == k for x in series)]
            path = "%s_%s.svg" % (prefix, grp)
            svg(path, corpus, series, legend)
            print("picture: %s" % path)


if __name__ == "__main__":
    main()
