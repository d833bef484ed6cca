#!/usr/bin/env python3
"""bench_jump.py: the report of bench/bench_jump.sh (docs/predict.md, "Jumps: the evaluation").

  bench_jump.py --tune OUT            the tuning grid on seed 1 and the choice by the rule
  bench_jump.py OUT NAME SEED...      per seed: real steps and wall-clock for run NAME_s<seed>
                                      to reach full_s<seed>'s final validation loss; curves.svg

Real steps are the steps that back-propagate (WARMUP, FULL, CORRECT); a jump step is counted
apart, and its time enters the wall-clock. Wall-clock two ways: measured (the sum of the logged
step_ms, over the FULL-only run's total; noisy on a shared machine) and from per-phase costs
measured inside the hybrid run (real steps x its median FULL step + its jump steps' time, over
the FULL-only run's steps x the same median)."""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_predict import spread, write_svg  # noqa: E402


def load(path):
    """The log's complete records (a run still going may end in a partial line)."""
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except ValueError:
                break
    return rows


def full_steps_to(fp, v):
    """Steps (interpolated between evaluations) at which the FULL-only curve first reaches v."""
    prev = None
    for p in fp:
        if p[2] <= v:
            if prev is None or prev[2] == p[2]:
                return float(p[1])
            f = (prev[2] - v) / (prev[2] - p[2])
            return prev[1] + f * (p[1] - prev[1])
        prev = p
    return None


def points(rows):
    """(seconds, real steps, val_loss) at each evaluation, and per point the jump time so far."""
    t, real, jump_ms, pts = 0.0, 0, 0.0, []
    for r in rows:
        t += r["step_ms"] / 1e3
        if r["phase"] == "predict":
            jump_ms += r["step_ms"]
        else:
            real += 1
        if "val_loss" in r:
            pts.append((t, real, r["val_loss"], jump_ms))
    return pts


def first_reach(pts, target):
    """The first evaluation point at or below target (no interpolation), or None."""
    for p in pts:
        if p[2] <= target:
            return p
    return None


def med_full(rows):
    v = [r["step_ms"] for r in rows if r["phase"] in ("full", "warmup")][1:]
    return statistics.median(v) if v else float("nan")


def jumps(rows):
    return [r for r in rows if r["phase"] == "predict"]


def summary(out, name, seed):
    full = load(os.path.join(out, "full_s%s.jsonl" % seed))
    hyb = load(os.path.join(out, "%s_s%s.jsonl" % (name, seed)))
    fp, hp = points(full), points(hyb)
    target, n_full = fp[-1][2], fp[-1][1]
    full_ms = sum(r["step_ms"] for r in full)
    js = jumps(hyb)
    taken = [j for j in js if j.get("diverged") != "rollback"]
    d = {"seed": seed, "target": target, "final": hp[-1][2], "gap": hp[-1][2] - target,
         "jumps": len(js), "taken": len(taken), "real": hp[-1][1],
         "jump_ms_mean": statistics.mean([j["step_ms"] for j in js]) if js else 0.0,
         "med_full": med_full(hyb), "full_med_full": med_full(full),
         "scales": [j.get("jump_scales") for j in js], "gains": [j.get("jump_gain") for j in js],
         "pts": hp, "full_pts": fp}
    # equivalence at the hybrid run's last evaluation: the FULL-only steps that reach its loss
    eq = full_steps_to(fp, hp[-1][2])
    d["last_real"], d["eq_full_steps"] = hp[-1][1], eq
    d["gap_same_step"] = hp[-1][2] - next((q[2] for q in fp if q[1] >= hp[-1][1]), float("nan"))
    p = first_reach(hp, target)
    if p:
        d["steps_ratio"] = p[1] / n_full
        d["wall_measured"] = p[0] * 1e3 / full_ms
        d["wall_model"] = (p[1] * d["med_full"] + p[3]) / (n_full * d["med_full"])
        d["reach_real"] = p[1]
    return d


def tune(out):
    names = sorted(f[:-len("_s1.jsonl")] for f in os.listdir(out)
                   if f.startswith("jump_") and f.endswith("_s1.jsonl"))
    rows = []
    for n in names:
        try:
            rows.append((n, summary(out, n, 1)))
        except (OSError, IndexError, KeyError):
            continue
    print("| setting (seed 1) | real steps run | val there | FULL-only's val at that step | FULL-only steps to the same val | final val (FULL-only's final) | real steps to FULL-only's final | jumps (taken) | jump ms mean / median FULL ms | gains (real steps) | scales (emb/mat/vec) of the taken jumps |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for n, d in rows:
        print("| %s | %d | %.4f | %.4f | %s | %.4f (%.4f) | %s | %d (%d) | %.0f / %.0f | %s | %s |" % (
            n, d["last_real"], d["final"], d["final"] - d["gap_same_step"],
            "%.1f" % d["eq_full_steps"] if d["eq_full_steps"] is not None else "-",
            d["final"], d["target"], d.get("reach_real", "not reached"), d["jumps"], d["taken"],
            d["jump_ms_mean"], d["med_full"],
            " ".join("%.3g" % g for g in d["gains"]) or "-",
            " ".join("/".join("%g" % x for x in s) for s in d["scales"] if s and any(s)) or "-"))
    reached = [(d["reach_real"], d["jumps"], n) for n, d in rows if "reach_real" in d]
    if reached:
        best = min(reached)[2]
    elif rows:
        best = min((d["final"], d["jumps"], n) for n, d in rows)[2]
    else:
        return
    print("\nchosen by the rule: %s" % best[len("jump_"):])
    with open(os.path.join(out, "chosen.txt"), "w") as f:
        f.write(best[len("jump_"):] + "\n")


def report(out, name, seeds):
    ds = [summary(out, name, s) for s in seeds]
    print("| seed | FULL final val | %s final val | gap | real steps to FULL's final (of 500) | steps ratio | wall-clock measured | wall-clock from costs | jumps (taken) | jump ms (mean) | median FULL step ms (hybrid run / FULL run) |" % name)
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for d in ds:
        print("| %s | %.4f | %.4f | %+.4f | %s | %s | %s | %s | %d (%d) | %.0f | %.1f / %.1f |" % (
            d["seed"], d["target"], d["final"], d["gap"], d.get("reach_real", "not reached"),
            "%.3f" % d["steps_ratio"] if "steps_ratio" in d else "-",
            "%.3f" % d["wall_measured"] if "wall_measured" in d else "-",
            "%.3f" % d["wall_model"] if "wall_model" in d else "-",
            d["jumps"], d["taken"], d["jump_ms_mean"], d["med_full"], d["full_med_full"]))
    print()
    print("- reached FULL-only's final validation loss: %d of %d seeds" % (sum("steps_ratio" in d for d in ds), len(ds)))
    print("- steps ratio: %s" % spread([d["steps_ratio"] for d in ds if "steps_ratio" in d]))
    print("- wall-clock ratio, measured: %s" % spread([d["wall_measured"] for d in ds if "wall_measured" in d]))
    print("- wall-clock ratio, from per-phase costs: %s" % spread([d["wall_model"] for d in ds if "wall_model" in d]))
    print("- final validation loss, %s minus FULL-only: %s" % (name, spread([d["gap"] for d in ds])))
    dashes = ["", "6,3", "2,3", "8,3,2,3"]
    series = []
    for i, d in enumerate(ds):
        series.append({"name": "FULL s%s" % d["seed"], "color": "#1f77b4", "dash": dashes[i % 4],
                       "pts": [(p[0], p[1], p[2]) for p in d["full_pts"]]})
        series.append({"name": "%s s%s" % (name, d["seed"]), "color": "#d62728", "dash": dashes[i % 4],
                       "pts": [(p[0], p[1], p[2]) for p in d["pts"]]})
    write_svg(os.path.join(out, "curves_%s.svg" % name), series)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--tune":
        tune(sys.argv[2])
    elif len(sys.argv) >= 4:
        report(sys.argv[1], sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
