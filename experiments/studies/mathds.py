"""The mathds study's reading (issue 48, results/mathds/README.md), computed from its committed records.

    python -m experiments.studies.mathds                     # rewrite the page's generated section and figures
    python -m experiments.studies.mathds --check             # exit 1 if the committed section differs
    python -m experiments.studies.mathds --print             # print the section, write nothing
    python -m experiments.studies.mathds --coverage 200 --coverage-warm 1 --coverage-sizes 4 6 8   # + the intervals'
        # coverage in a design fitted to warm start 1's baseline runs (results/mathds/coverage_w1.json)
    python -m experiments.studies.mathds --coverage 200 --coverage-mixture --coverage-sizes 6 7 8  # pooled over warm
        # starts (coverage_mix.json); with --coverage-level 0.991667 --coverage-boot 2500 at the family-wise
        # table's level (coverage_mix_l0.9917.json)
    python -m experiments.studies.mathds --collect runs/mathds/runs   # copy complete runs' records first

Runs are ``results/mathds/runs/mathds-w<W>-<arm>-s<S>`` (``experiments/mathds_sweep.sh``, then its
``--collect``); only complete runs (a ``summary.json``) are read. The paired unit is (W, S): the same warm
start (``sft.seed=W``) and problem stream (``seed=S``) in every arm, ``W * WARM_STRIDE + S`` as in
``experiments.studies.mechanism``. Every arm is compared with ``baseline`` on the units both completed.

The axes. An evaluation at step s follows s updates, so its **cumulative generated tokens** are
``C_tok(s) = Σ_{t<s} tokens_generated_t`` over the train records (the ledger of ``prs.rl.select``:
screening rollouts, discarded generation batches and re-rolls included; the oracle's estimation rollouts
are NOT: ``oracle/tokens`` is logged apart), and its **cumulative wall-clock** ``C_wall(s) = Σ_{t<s} w_t``
with ``w_t`` the sum of ``WALL_KEYS`` of step t (``time_select``, ``time_sample``, ``time_replay``,
``time_batch``, ``time_update``; evaluation time not counted), step times above 5x the run's median
(compilation) counted as the median (``prs.analysis.runs.clipped_step_time``, as ``gap.gap_task``). The
oracle's estimation time ``time_oracle`` is logged apart and is in no key of ``WALL_KEYS``
(``Selector.sample`` subtracts it from ``time_select``): its wall-clock is the total minus ``time_oracle``,
left out by design (it bounds what task selection can buy, it is not a control one would run).

Per arm against the baseline, on ``eval/interpolate/pass_at_1`` (then the same on
``eval/extrapolate/pass_at_1``), with ``prs.analysis.gap.gap_compare``:

  * **tokens (and wall-clock, and steps) to 80% of the baseline's gain**: the baseline's start / final level
    (first / last 3 evaluations of its seed-mean curve), L = start + 0.8 gap re-estimated in every paired
    resample; the restricted crossing of the seed-mean curves (censored at the last common evaluation,
    Royston & Parmar 2013), its cost read off the seed-mean cumulative cost (``gap.cost_at_steps``); the
    ratio baseline / arm (> 1: the arm needs less), with its censoring bound;
  * **AUC over tokens** (``token_auc``): each run's pass@1 as a piecewise-linear function of C_tok, its mean
    over [0, H] with H the smallest final cumulative tokens among the two arms' paired runs (the common token
    horizon; ``gap.auc`` on the union of the runs' evaluation points), the paired difference arm - baseline;
  * **equal-compute difference** (``equal_compute``): for each paired unit, the arm's pass@1 at the
    baseline run's final cumulative tokens (linear interpolation on the token axis) minus the baseline's
    final pass@1; a unit whose arm run ended with fewer tokens is censored and counts the arm's final
    pass@1 (a value at less compute), the count is stated;
  * a per-warm-start column: the tokens-to-80% ratio within each warm start at its own baseline's level.
  * the A/A negative control (``aa_split``): the baseline's seeds 0-3 against its seeds 4-7 through the
    same estimators; its ratio's interval must hold 1.0.

Differences carry paired expanded percentile intervals (``prs.analysis.bootstrap``), 95%, seeded.
"""
from __future__ import annotations

import json
import math
import pathlib
import re
import sys

import numpy as np

from experiments.studies import command_line
from experiments.studies.mechanism import WARM_STRIDE, by_warm_start
from prs.analysis.bootstrap import bootstrap_band, bootstrap_diff_of_means, bootstrap_mean
from prs.analysis.gap import FRACTIONS, auc, gap_compare
from prs.analysis.runs import clipped_step_time, collect_records, read_records
from prs.analysis.tables import BOUND_NOTE, fmt, fmt_ci, fmt_ratio, to_jsonable

ROOT = pathlib.Path(__file__).resolve().parents[2]
OUT = ROOT / "results" / "mathds"
RUNS = OUT / "runs"
PAGE = OUT / "README.md"
BEGIN = "<!-- mathds-results:begin -->"
END = "<!-- mathds-results:end -->"
ARMS = ("baseline", "ps_ada", "dynamic_sampling", "selective", "screen", "predicted", "ps_ds", "oracle")
LABEL = {"baseline": "baseline (GRPO++)", "ps_ada": "PS-ada", "dynamic_sampling": "dynamic sampling (DAPO)",
         "selective": "selective rollouts (GRESO)", "screen": "screening (SPEED)", "predicted": "predicted pass rate",
         "ps_ds": "PS-ada + dynamic sampling", "oracle": "oracle selector (positive control, its cost left out)"}
WARM_STARTS, SEEDS = (0, 1), 8  # the plan: 8 arms x 8 seeds x 2 warm starts
METRICS = {"interp": "eval/interpolate/pass_at_1", "extrap": "eval/extrapolate/pass_at_1"}
SPLIT = {"interp": "interpolate", "extrap": "extrapolate"}
WALL_KEYS = ("time_select", "time_sample", "time_replay", "time_batch", "time_update")  # not time_oracle
TIME_CLIP = 5.0  # a step time above 5x the run's median (compilation) counts as the median
NAME = re.compile(r"^mathds-w(?P<w>\d+)-(?P<arm>[a-z0-9_]+)-s(?P<seed>\d+)$")
MIN_COVERAGE_SEEDS = 4
# The theory's row for each arm (``theory.controls.compare_controls``; PS as the arm runs it, reroll="replace"
# with fallback; the theory's "predicted" row is the oracle's top B of 4B; no row for ps_ds nor for the
# Beta-posterior ``predicted`` selector) and the step-0 pool histogram it is read on.
THEORY_ROW = {"baseline": "uniform", "ps_ada": "ps_reroll", "dynamic_sampling": "dynamic_sampling",
              "selective": "selective", "screen": "screen", "oracle": "predicted"}
CALIBRATION = OUT / "calibration" / "w0_sft3000_pool4800.json"
CALIBRATIONS = {0: CALIBRATION, 1: OUT / "calibration" / "w1_sft3000_pool4800.json"}  # each warm start's step 0
GROUPS = 16  # the preset's B (conf/experiment/mathds.yaml: algo.tasks_per_step)
# An arm is compared with the baseline on >= MIN_PAIRED paired (W, S) units: the gate's size, the smallest at
# which the intervals' coverage was measured (coverage.json); a paired bootstrap over 2 or 3 units has only 3 or
# 10 distinct resamples, so its "interval" would print a number that is not one.
MIN_PAIRED = 4
# the family of the family-wise reading: the six real controls (the oracle is the positive control, not a claim)
FAMILY = ("ps_ada", "dynamic_sampling", "selective", "screen", "predicted", "ps_ds")
FAMILY_ALPHA, FAMILY_BOOT_FACTOR = 0.05, 5   # the family-wise intervals' tails are 6x thinner: 5x the resamples
# The pre-registration amendment's gap rule (page, "The gap rule, restated with a measured error"): a baseline
# gain below 3 x 0.0048 (the largest measured evaluation SD at 1,139 x 4), written there as 0.015, is one the
# evaluation resolves only barely; its ratios to 80% are flagged and its AUC / equal-compute cells are the ones
# to read.
GAP_RULE = 0.015


def step_wall(rec: dict) -> float:
    """One train record's wall-clock: the sum of ``WALL_KEYS`` present (``time_oracle`` is not among them:
    the oracle's estimation is left out of the ledger by design, ``prs.rl.select``)."""
    return float(sum(float(rec.get(k) or 0.0) for k in WALL_KEYS))


def _column(recs: list[dict], key: str) -> np.ndarray:
    """[len(recs)] float: ``key`` of each record, NaN where it is absent or None."""
    return np.array([np.nan if r.get(key) is None else r[key] for r in recs], float)


def load(runs: pathlib.Path = RUNS) -> dict[str, dict[int, dict]]:
    """arm -> unit (``W * WARM_STRIDE + S``) -> {"steps" [E], "interp" [E], "extrap" [E] (pass@1 at each
    evaluation), "cum_tokens" [T+1], "cum_wall" [T+1] (before each train step: index s = after s updates),
    "tokens", "contrast", "rollouts", "oracle_rollouts", "oracle_tokens", "oracle_time" [T] (per step), the
    selectors' counters "pass_train", "gen_batches", "rerolled", "replaced", "skipped", "accepted",
    "unvisited" [T] (NaN where not logged), "pool" (``schedule.pool_size`` from ``config.json``, None without one), "commits": the provenance
    commits} of every complete run (a ``summary.json``) named
    ``mathds-w<W>-<arm>-s<S>`` under ``runs``; {} when ``runs`` does not exist."""
    out: dict[str, dict[int, dict]] = {}
    if not pathlib.Path(runs).is_dir():
        return out
    for d in sorted(pathlib.Path(runs).iterdir()):
        m = NAME.match(d.name)
        if not m or not d.is_dir() or not (d / "summary.json").exists():
            continue
        recs = read_records(d)
        ev = sorted((r for r in recs if r.get("kind") == "eval"), key=lambda r: r["step"])
        tr = sorted((r for r in recs if r.get("kind") == "train"), key=lambda r: r["step"])
        if [r["step"] for r in tr] != list(range(len(tr))):
            raise ValueError(f"{d}: train records are not steps 0..{len(tr) - 1} once each")
        tokens = _column(tr, "tokens_generated")
        wall = clipped_step_time(np.array([step_wall(r) for r in tr]), clip=TIME_CLIP)
        prov = d / "provenance.jsonl"
        plines = [json.loads(x) for x in prov.read_text().splitlines() if x.strip()] if prov.exists() else []
        commits = sorted({x.get("commit") or "?" for x in plines})
        machines = sorted({machine_name(x.get("machine")) for x in plines})
        unit = int(m["w"]) * WARM_STRIDE + int(m["seed"])
        out.setdefault(m["arm"], {})[unit] = {
            "steps": np.array([r["step"] for r in ev]), "interp": _column(ev, METRICS["interp"]),
            "extrap": _column(ev, METRICS["extrap"]), "cum_tokens": np.r_[0.0, np.cumsum(tokens)],
            "cum_wall": np.r_[0.0, np.cumsum(wall)], "tokens": tokens, "contrast": _column(tr, "groups_contrast"),
            "rollouts": _column(tr, "rollouts_sampled"), "oracle_rollouts": _column(tr, "oracle/rollouts"),
            "oracle_tokens": _column(tr, "oracle/tokens"), "oracle_time": _column(tr, "time_oracle"),
            "pass_train": _column(tr, "pass_rate_train"), "gen_batches": _column(tr, "gen_batches"),
            "rerolled": _column(tr, "groups_rerolled"), "replaced": _column(tr, "groups_replaced"),
            "skipped": _column(tr, "select/skipped_easy") + _column(tr, "select/skipped_hard"),
            "accepted": _column(tr, "select/accepted_share"), "unvisited": _column(tr, "select/unvisited"),
            "pool": int(json.loads((d / "config.json").read_text())["schedule"]["pool_size"])
            if (d / "config.json").exists() else None, "commits": commits, "machines": machines}
    return out


def machine_name(m: dict | None) -> str:
    """A provenance record's machine as ``"<cpu model> (<cpu id>, <widest vector ISA>)"``: what decides
    XLA:CPU's numerics and speed (``prs.rl.provenance``); ``"?"`` when the record has none."""
    if not m:
        return "?"
    isa = m.get("isa") or []
    widest = "avx512" if any(i.startswith("avx512") for i in isa) else "avx2" if "avx2" in isa else "no avx2"
    return f"{m.get('cpu_model', '?')} ({m.get('cpu_id', '?')}, {widest})"


def paired(data: dict[str, dict[int, dict]], arm: str, key: str, ref: str = "baseline"):
    """``(units, steps [E], y_ref [U, E], y_arm [U, E], cost_ref, cost_arm)`` of ``key`` on the units both arms
    completed and the evaluation steps all of them share, cost_* = {"tokens", "wall": [U, T+1]} (each arm's
    runs cut to its shortest); None when an arm is missing or fewer than ``MIN_PAIRED`` units are paired."""
    if arm not in data or ref not in data:
        return None
    units = sorted(set(data[arm]) & set(data[ref]))
    if len(units) < MIN_PAIRED:
        return None
    runs = [data[a][u] for a in (ref, arm) for u in units]
    steps = np.array(sorted(set.intersection(*(set(r["steps"].tolist()) for r in runs))))

    def y(a):  # [U, E]
        return np.array([[data[a][u][key][list(data[a][u]["steps"]).index(t)] for t in steps] for u in units], float)

    def cost(a, c):  # [U, T+1]
        t = min(data[a][u][c].size for u in units)
        return np.array([data[a][u][c][:t] for u in units])

    return (units, steps, y(ref), y(arm), {"tokens": cost(ref, "cum_tokens"), "wall": cost(ref, "cum_wall")},
            {"tokens": cost(arm, "cum_tokens"), "wall": cost(arm, "cum_wall")})


def axis_at(steps, cum) -> np.ndarray:
    """The cost axis of each run's evaluations: steps [E], cum [U, T+1] -> [U, E] (``cum[:, s]``, the cost of
    the s updates before the evaluation at step s); an evaluation past the cost lines is an error."""
    steps = np.asarray(steps, int)
    if steps.size and steps[-1] >= cum.shape[1]:
        raise ValueError(f"evaluation step {steps[-1]} lies past the runs' {cum.shape[1] - 1} train records")
    return np.asarray(cum, float)[:, steps]


def token_auc(x_ref, y_ref, x_arm, y_arm, *, n_boot: int = 2000, level: float = 0.95) -> dict:
    """Paired difference of the normalised area under pass@1 over a cost axis up to the common horizon.

    x_* [U, E] the cost at each evaluation (increasing along E), y_* [U, E] pass@1. Each run is the piecewise-
    linear function through its points; H = min over every run of its final cost; on the grid G of every
    run's points below H and H itself, ``gap.auc(G, y(G), horizon=H) = (1/H') ∫_{G_0}^{H} y dx`` (trapezoid:
    exact for the piecewise-linear curve, G_0 = 0 when every run starts at zero cost). Returns {"horizon",
    "base", "method" (bootstrap means), "improvement" (arm - ref, paired, expanded interval at ``level``)}."""
    xs = [np.asarray(x, float) for x in (x_ref, x_arm)]
    ys = [np.asarray(y, float) for y in (y_ref, y_arm)]
    h = float(min(x[:, -1].min() for x in xs))
    grid = np.unique(np.r_[np.concatenate([x[x < h] for x in xs]), h])       # [G]
    if grid.size < 2:
        raise ValueError(f"the common cost horizon {h} leaves no interval to integrate")
    areas = [auc(grid, np.array([np.interp(grid, xr, yr) for xr, yr in zip(x, y)]), horizon=h) for x, y in zip(xs, ys)]
    return {"horizon": h, "base": bootstrap_mean(areas[0], n_boot=n_boot, level=level),
            "method": bootstrap_mean(areas[1], n_boot=n_boot, level=level),
            "improvement": bootstrap_diff_of_means(areas[1], areas[0], paired=True, expand=True, n_boot=n_boot, level=level)}


def equal_compute(x_ref, y_ref, x_arm, y_arm, *, n_boot: int = 2000, level: float = 0.95) -> dict:
    """The arm's pass@1 at the baseline's final cost minus the baseline's final pass@1, per paired unit.

    x_* [U, E] the cost at each evaluation, y_* [U, E] pass@1: d_u = y_arm,u(x_ref,u[-1]) - y_ref,u[-1], with
    y_arm,u linearly interpolated on its cost axis; a unit whose arm run ends below x_ref,u[-1] is censored and
    counts its final pass@1 (at less compute). Returns {"improvement" (paired, expanded interval at ``level``),
    "censored" (count), "at" [U] the costs read, "arm_at" [U]}."""
    x_ref, y_ref, x_arm, y_arm = (np.asarray(a, float) for a in (x_ref, y_ref, x_arm, y_arm))
    at = x_ref[:, -1]                                                                   # [U]
    cens = at > x_arm[:, -1]
    arm_at = np.array([np.interp(a, xr, yr) for a, xr, yr in zip(at, x_arm, y_arm)])   # clamps at the end
    return {"improvement": bootstrap_diff_of_means(arm_at, y_ref[:, -1], paired=True, expand=True, n_boot=n_boot,
                                                   level=level),
            "censored": int(cens.sum()), "at": at.tolist(), "arm_at": arm_at.tolist()}


def compare(data: dict[str, dict[int, dict]], arm: str, key: str = "interp", *, n_boot: int = 2000,
            warm_split: bool = True, costs: tuple[str, ...] = ("tokens", "wall"), level: float = 0.95,
            fractions: tuple[float, ...] = FRACTIONS) -> dict | None:
    """``gap.gap_compare`` of ``arm`` against the baseline on ``key`` with generated tokens and wall-clock as
    costs, plus ``token_auc`` and ``equal_compute`` on both cost axes and (``warm_split``, when the paired units
    span more than one warm start) per warm start, each on its own >= ``MIN_PAIRED`` units and at its own
    baseline's level: the tokens-to-80% ratio (its fields at the top level of ``by_warm_start[w]``), ``n``,
    ``levels``, the steps ratio ``steps`` and the token axis's ``auc_tokens`` / ``equal_tokens``; None when
    fewer than ``MIN_PAIRED`` units are paired. ``costs``: the cost axes computed (the per-warm-start readings
    use the token axis only). ``level``: every interval's nominal level; ``fractions``: gap_compare's gap
    fractions."""
    p = paired(data, arm, key)
    if p is None:
        return None
    units, steps, yb, ym, cb, cm = p
    cb, cm = {c: cb[c] for c in costs}, {c: cm[c] for c in costs}
    g = gap_compare(steps, yb, ym, cost_base=cb, cost_meth=cm, fractions=fractions, n_boot=n_boot, level=level)
    g["units"] = units
    for c in costs:
        xb, xm = axis_at(steps, cb[c]), axis_at(steps, cm[c])
        g[f"auc_{c}"] = token_auc(xb, yb, xm, ym, n_boot=n_boot, level=level)
        g[f"equal_{c}"] = equal_compute(xb, yb, xm, ym, n_boot=n_boot, level=level)
    g["by_warm_start"] = {}
    if warm_split:
        split = by_warm_start({a: {u: data[a][u] for u in units} for a in ("baseline", arm)})
        if len(split) > 1:
            for w, sub in split.items():
                gw = compare(sub, arm, key, n_boot=n_boot, warm_split=False, costs=("tokens",))
                if gw is not None:
                    g["by_warm_start"][w] = {**gw[0.8]["speedup_tokens"], "n": len(gw["units"]),
                                             "levels": gw["levels"], "steps": gw[0.8]["speedup_steps"],
                                             "auc_tokens": gw["auc_tokens"], "equal_tokens": gw["equal_tokens"]}
    return g


def aa_split(data: dict[str, dict[int, dict]], *, half: int = SEEDS // 2) -> dict[str, dict[int, dict]]:
    """The A/A negative control's data: ``{"baseline": seeds < half, "baseline_b": seed s + half renamed to
    unit s}`` within each warm start, for the s with both runs complete. The two halves are independent runs
    (different problem streams), so pairing them by index is arbitrary: resampling the index pairs resamples
    both halves together, which gives the difference of two independent means its variance. Both halves are the
    same arm, so an interval for their ratio that excludes 1.0 says the intervals are too narrow."""
    base = data.get("baseline", {})
    a, b = {}, {}
    for u, run in base.items():
        w, s = divmod(u, WARM_STRIDE)
        if s < half and w * WARM_STRIDE + s + half in base:
            a[u], b[u] = run, base[w * WARM_STRIDE + s + half]
    return {"baseline": a, "baseline_b": b}


def aa_lines(data: dict[str, dict[int, dict]], *, n_boot: int) -> tuple[list[str], dict | None]:
    """The A/A table (``aa_split``, interpolate pass@1): tokens to 80%, AUC and equal-compute differences, and
    whether the ratio's interval holds 1.0."""
    lines = ["### Negative control of the statistics: the baseline against itself (A/A)", "",
             f"The baseline's seeds 0-{SEEDS // 2 - 1} against its seeds {SEEDS // 2}-{SEEDS - 1} within each warm "
             "start (`aa_split`: independent runs paired by index), through the same estimators as the arms. Its "
             "tokens-to-80% ratio's interval must hold 1.0; one that excludes it says the intervals are too narrow.", ""]
    sub = aa_split(data)
    try:
        g = compare(sub, "baseline_b", "interp", n_boot=n_boot)
    except ValueError as e:
        return lines + [f"Not computed: {e}.", ""], None
    if g is None:
        return lines + [f"Not computed yet: {len(sub['baseline'])} index pairs of baseline runs "
                        f"(seeds s and s + {SEEDS // 2}) complete, {MIN_PAIRED} needed.", ""], None
    t, at, et = g[0.8].get("speedup_tokens", _nan_ci()), g["auc_tokens"], g["equal_tokens"]
    holds = t["lo"] <= 1.0 <= t["hi"] if np.isfinite(t["lo"]) and np.isfinite(t["hi"]) else None
    lines += ["| pairs | tokens to 80%: A / B | its censoring bound | interval holds 1.0 | AUC over tokens: B - A | "
              "equal-compute difference: B - A |", "|---|---|---|---|---|---|",
              f"| {len(g['units'])} | {fmt_ratio(t)} | {BOUND_NOTE[t.get('bound', 'exact')]} | "
              f"{'-' if holds is None else ('yes' if holds else 'NO')} | {fmt_ci(at['improvement'], 3)} | "
              f"{fmt_ci(et['improvement'], 3)} |", ""]
    return lines, {"pairs": len(g["units"]), "holds_one": holds, "compare": to_jsonable(g)}


COMPONENTS = (("ps_ds", "dynamic_sampling"), ("ps_ds", "ps_ada"))  # a combination against each of its parts


def component_lines(data: dict[str, dict[int, dict]], *, n_boot: int) -> tuple[list[str], dict]:
    """A combined arm against each of its components (``COMPONENTS``) on interpolate pass@1: ``compare`` with
    the component in the reference's place (so the level is 80% of the component's own gain), paired on the
    units both completed. Does adding PS to dynamic sampling pay, and does adding dynamic sampling to PS?"""
    lines = ["### A combination against its components (interpolate)", "",
             "`ps_ds` (PS-ada + dynamic sampling) against each component in the baseline's place: tokens and steps "
             "to 80% of the component's own gain (component / combination; > 1 = the combination is cheaper), AUC "
             "over tokens and the equal-compute difference (combination - component), paired bootstrap.", "",
             "| combination vs component | paired runs | component's gain | tokens to 80%: component / combination | "
             "steps to 80% | AUC over tokens: combination - component | equal-compute difference |",
             "|---|---|---|---|---|---|---|"]
    out = {}
    for arm, ref in COMPONENTS:
        sub = {"baseline": data.get(ref, {}), arm: data.get(arm, {})}
        n = len(set(sub["baseline"]) & set(sub[arm]))
        try:
            g = compare(sub, arm, "interp", n_boot=n_boot, warm_split=False) if sub["baseline"] and sub[arm] else None
        except ValueError as e:
            lines.append(f"| `{arm}` vs `{ref}` | {n} | not compared: {e} |" + " |" * 4)
            continue
        if g is None:
            lines.append(f"| `{arm}` vs `{ref}` | {n}: not compared (< {MIN_PAIRED}) |" + " - |" * 5)
            continue
        c = g[0.8]
        lines.append(f"| `{arm}` vs `{ref}` | {len(g['units'])} | {gain_text(g['levels'])} | {fmt_ratio(c.get('speedup_tokens', _nan_ci()))} | "
                     f"{fmt_ratio(c.get('speedup_steps', _nan_ci()))} | {fmt_ci(g['auc_tokens']['improvement'], 3)} | "
                     f"{fmt_ci(g['equal_tokens']['improvement'], 3)} |")
        out[f"{arm}|{ref}"] = to_jsonable(g)
    return lines + [""], out


def ledger(data: dict[str, dict[int, dict]]) -> list[dict]:
    """Per warm start ``w`` and arm (mean over its units of each run's per-step mean): generated tokens,
    rollouts sampled and groups with reward contrast per step, contrast groups per 1000 generated rollouts
    (each run's 1000 Σ groups_contrast / Σ rollouts_sampled, the quantity ``python -m theory controls``
    predicts per rollout from that warm start's histogram), its ratio to the same warm start's baseline
    (``ratio``; NaN where that warm start has no baseline run or its rate is 0, as on a run of a few steps
    whose groups are all-same), and the oracle's estimation rollouts / tokens per step (left out of the other
    columns). Rows in warm-start order, then ``ARMS`` order."""
    rows = []
    for w, sub in by_warm_start(data).items():
        part = []
        for arm in ARMS:
            runs = list(sub.get(arm, {}).values())
            if not runs:
                continue
            mean = lambda f: float(np.mean([f(r) for r in runs]))  # noqa: E731
            orc = [r for r in runs if np.isfinite(r["oracle_rollouts"]).any()]
            part.append({"w": w, "arm": arm, "runs": len(runs), "tokens": mean(lambda r: r["tokens"].mean()),
                         "rollouts": mean(lambda r: r["rollouts"].mean()), "contrast": mean(lambda r: r["contrast"].mean()),
                         "contrast_per_1000": mean(lambda r: 1000.0 * r["contrast"].sum() / r["rollouts"].sum()),
                         "oracle_rollouts": float(np.mean([np.nanmean(r["oracle_rollouts"]) for r in orc])) if orc else None,
                         "oracle_tokens": float(np.mean([np.nanmean(r["oracle_tokens"]) for r in orc])) if orc else None})
        base = next((r["contrast_per_1000"] for r in part if r["arm"] == "baseline"), float("nan"))
        for r in part:
            r["ratio"] = r["contrast_per_1000"] / base if np.isfinite(base) and base > 0 else float("nan")
        rows += part
    return rows


def selector_counters(data: dict[str, dict[int, dict]]) -> list[dict]:
    """Per warm start ``w`` and arm (mean over its runs of that warm start of each run's per-step mean, NaN
    where the arm does not log it; rows in warm-start order, then ``ARMS`` order): the
    trained groups' pass rate (``pass_rate_train``: what the selector chose to train on), dynamic sampling's
    generation batches per step, Prefix Sampling's re-rolled groups per step and the share of them that
    replaced their group (Σ groups_replaced / Σ groups_rerolled: with ``reroll_fallback`` only a re-roll with
    contrast replaces), selective's (GRESO) skipped tasks per step, screen's accepted share of
    screened candidates, and predicted's distinct tasks trained by the end of the run (``pool_size`` minus its
    final ``select/unvisited``: the tasks it ever visited)."""
    def nanmean(vals):
        vals = [v for v in vals if np.isfinite(v)]
        return float(np.mean(vals)) if vals else float("nan")

    def last_visited(r):
        u = r["unvisited"][np.isfinite(r["unvisited"])]
        return float(r["pool"] - u[-1]) if u.size and r["pool"] is not None else float("nan")

    rows = []
    for w, sub in by_warm_start(data).items():
        for arm in ARMS:
            runs = list(sub.get(arm, {}).values())
            if not runs:
                continue
            per_run = lambda key: nanmean([np.nanmean(r[key]) if np.isfinite(r[key]).any() else np.nan  # noqa: E731
                                           for r in runs])
            kept = [np.nansum(r["replaced"]) / np.nansum(r["rerolled"]) if np.nansum(r["rerolled"]) > 0 else np.nan
                    for r in runs]
            rows.append({"w": w, "arm": arm, "runs": len(runs), "pass_train": per_run("pass_train"),
                         "gen_batches": per_run("gen_batches"), "rerolled": per_run("rerolled"),
                         "reroll_kept": nanmean(kept), "skipped": per_run("skipped"),
                         "accepted": per_run("accepted"), "visited": nanmean([last_visited(r) for r in runs])})
    return rows


def theory_ratios(calibration: pathlib.Path = CALIBRATION, *, groups: int = GROUPS,
                  reroll: str = "replace") -> dict[str, float]:
    """arm -> the theory's informative groups per 1000 generated rollouts relative to uniform's, on the step-0
    pool histogram ``pool_hist`` of ``calibration`` (``scripts/mathds_calibration.py``): ``python -m theory
    controls --hist <its shares> --groups 16 --reroll <reroll>``, each arm's ``THEORY_ROW``. ``reroll="replace"``
    models PS as the arm runs it; ``"add"`` is the pre-registered row. {} when the file does not exist."""
    path = pathlib.Path(calibration)
    if not path.exists():
        return {}
    from theory import controls as tc  # noqa: PLC0415 (scipy; only the ledger needs it)

    hist = np.asarray(json.loads(path.read_text())["pool_hist"], float)
    pool, _ = tc.hist_pool(hist / hist.sum())
    rates = {r.control: r.per_1000_rollouts() for r in
             tc.compare_controls(pool, n=hist.size - 1, groups=groups, reroll=reroll)}
    return {arm: rates[row] / rates["uniform"] for arm, row in THEORY_ROW.items()}


def h3(value: float, bound: str, theory: float | None) -> str:
    """The pre-registered H3 for one arm: its tokens-to-80% ratio within a factor 2 of the theory's ratio
    (``theory / 2 <= value <= 2 theory``). A censored ratio is a ceiling (``bound="upper"``) or a floor
    (``"lower"``): a ceiling below the band, or a floor above it, fails H3; one inside the band decides
    nothing (the true ratio may lie anywhere below the ceiling or above the floor)."""
    if theory is None or not np.isfinite(value) or bound == "both":
        return "-"
    lo, hi = theory / 2, 2 * theory
    if bound == "upper":
        return "fails (ceiling below theory / 2)" if value < lo else "undecided (a ceiling)"
    if bound == "lower":
        return "fails (floor above 2 x theory)" if value > hi else "undecided (a floor)"
    return "holds" if lo <= value <= hi else "fails"


# H2's falsifiable clauses: (arm, the side of 1.0 first pre-registered, whether the amendment replaced it with
# "the interval holds 1.0" - selective and predicted on the 4,800-pool, section "Pre-registration amendment")
H2_CLAUSES = (("dynamic_sampling", "below", False), ("selective", "above", True))


def h2_line(arm: str, t: dict, want: str, amended: bool) -> str:
    """One H2 clause read from ``arm``'s tokens-to-80% interval ``t``: which side of 1.0 it lies on against the
    side first pre-registered (``want``) and, ``amended``, the amendment's "the interval holds 1.0"."""
    side = "below" if t["hi"] < 1.0 else "above" if t["lo"] > 1.0 else "contains"
    word = "holds" if side == want else "fails" if side != "contains" else "fails (the interval holds 1.0)"
    line = (f"`{arm}`'s interval {fmt_ci(t)} is {side if side != 'contains' else 'around'} 1.0: "
            f"H2's clause as first written ({want} 1.0) {word}")
    if amended:
        line += f"; the amendment's (the interval holds 1.0) {'holds' if side == 'contains' else 'fails'}"
    return line


def hypotheses_lines(comps: dict[str, dict], pre: dict[str, float], run: dict[str, float], *,
                     pre_w: dict[int, dict[str, float]] | None = None,
                     run_w: dict[int, dict[str, float]] | None = None) -> list[str]:
    """H2 and H3 read from the interpolate comparisons on generated tokens (``comps``: ``compare`` per arm with
    >= ``MIN_PAIRED`` pairs) against the theory's ratios as pre-registered (``pre``: PS modelled
    ``reroll="add"``) and as the arms run (``run``: ``reroll="replace"``); then, with ``pre_w`` / ``run_w``
    (warm start -> that warm start's theory rows, from its own step-0 histogram), the same per warm start from
    each comparison's ``by_warm_start`` (each warm start at its own baseline's level)."""
    lines = ["### The hypotheses read from these runs (interpolate, generated tokens)", "",
             "H3: an arm's tokens-to-80% ratio (baseline / arm) within a factor 2 of the theory's ratio for it, "
             "as pre-registered (PS modelled with both groups trained, `--reroll add`); the theory for PS as the arm "
             "runs it (`--reroll replace`) beside it. H2's falsifiable parts: dynamic sampling's interval below 1.0, "
             "selective's above 1.0. Read only for arms with >= "
             f"{MIN_PAIRED} pairs; `predicted` and `ps_ds` have no theory row.", "",
             "| arm | paired runs | tokens to 80%: baseline / arm | theory, pre-registered | theory, as run | "
             "H3 (within x2 of the pre-registered) |", "|---|---|---|---|---|---|"]
    for arm, g in comps.items():
        t = g[0.8].get("speedup_tokens", _nan_ci())
        lines.append(f"| `{arm}` | {len(g['units'])} | {fmt_ratio(t)} | {fmt(pre.get(arm))} | {fmt(run.get(arm))} | "
                     f"{h3(t['value'], t.get('bound', 'exact'), pre.get(arm))} |")
    if not comps:
        lines.append("| - | no arm has enough pairs yet | | | | |")
    falsifiable = [h2_line(arm, comps[arm][0.8].get("speedup_tokens", _nan_ci()), want, amended)
                   for arm, want, amended in H2_CLAUSES if arm in comps]
    lines += [""] + ([("- " + x) for x in falsifiable] + [""] if falsifiable else [])
    rows = [(arm, w, v) for arm, g in comps.items() for w, v in sorted(g.get("by_warm_start", {}).items())]
    if pre_w is None or not rows:
        return lines
    run_w = run_w or {}
    lines += ["#### The hypotheses per warm start (each at its own baseline's level, against its own theory)", "",
              "The same H3 and H2 readings on each warm start's >= "
              f"{MIN_PAIRED} pairs, the theory's ratios from that warm start's step-0 pool histogram (a gain below "
              "the gap rule is flagged in the per-warm-start table above; a warm start's intervals at few pairs can "
              "cover less than 95%: coverage table, rows fitted on one warm start).", "",
              "| arm | W | paired runs | tokens to 80%: baseline / arm | theory, pre-registered | theory, as run | "
              "H3 (within x2 of the pre-registered) |", "|---|---|---|---|---|---|---|"]
    for arm, w, v in rows:
        pw, rw = pre_w.get(w, {}), run_w.get(w, {})
        lines.append(f"| `{arm}` | {w} | {v['n']} | {fmt_ratio(v)} | {fmt(pw.get(arm))} | {fmt(rw.get(arm))} | "
                     f"{h3(v['value'], v.get('bound', 'exact'), pw.get(arm))} |")
    per_w = [f"W = {w}: " + h2_line(arm, v, want, amended) for arm, want, amended in H2_CLAUSES if arm in comps
             for w, v in sorted(comps[arm].get("by_warm_start", {}).items())]
    return lines + [""] + ([("- " + x) for x in per_w] + [""] if per_w else [])


def transfer(data: dict[str, dict[int, dict]], *, n_boot: int = 2000) -> list[dict]:
    """Does extrapolate move with interpolate? Per arm, over all its runs (``w`` = "all") and then over each
    warm start's (``w`` = W, when it has runs of more than one): each run's gain g = final - first evaluation
    on both splits, their means (bootstrap CIs) and their Pearson correlation across the runs (>= 3 runs,
    both gains varying), ``r``. On the "all" row ``r_within`` is the correlation of the gains less their warm
    start's mean gains (g_u - mean_{v in W(u)} g_v): the run-to-run relation with the warm starts' different
    levels taken out, which a pooled ``r`` mixes in."""
    def corr(a, b):
        return float(np.corrcoef(a, b)[0, 1]) if a.size >= 3 and a.std() > 0 and b.std() > 0 else math.nan

    def row(arm, w, gi, ge, r_within=math.nan):
        return {"arm": arm, "w": w, "runs": gi.size, "gain_interp": bootstrap_mean(gi, n_boot=n_boot),
                "gain_extrap": bootstrap_mean(ge, n_boot=n_boot), "r": corr(gi, ge), "r_within": r_within}

    rows = []
    for arm in ARMS:
        units = sorted(data.get(arm, {}))
        if not units:
            continue
        gi = np.array([data[arm][u]["interp"][-1] - data[arm][u]["interp"][0] for u in units])   # [U]
        ge = np.array([data[arm][u]["extrap"][-1] - data[arm][u]["extrap"][0] for u in units])   # [U]
        w = np.array([u // WARM_STRIDE for u in units])                                          # [U]
        ws = sorted(set(w.tolist()))
        less = lambda g: g - np.array([g[w == x].mean() for x in w])  # noqa: E731  [U]: minus its warm start's mean
        rows.append(row(arm, "all", gi, ge, corr(less(gi), less(ge)) if len(ws) > 1 else math.nan))
        rows += [row(arm, x, gi[w == x], ge[w == x]) for x in ws if len(ws) > 1]
    return rows


def measure_coverage(data: dict[str, dict[int, dict]], *, studies: int, n_boot: int = 1000,
                     sizes: tuple[int, ...] | None = None, warm: int | None = None, mixture: bool = False,
                     level: float = 0.95) -> dict:
    """Coverage of these intervals by simulation (``prs.analysis.coverage.coverage_study``) in a design fitted
    to the baseline's interpolate pass@1 curves (``experiments.studies.mechanism.fit_scenario``: every baseline
    run's exponential fit, their spread, binomial noise) with a planted 1.9x and 1.0x speed-up, simulated at
    each study size in ``sizes`` (paired units per arm; default: the number of baseline runs), so that the
    coverage is read at the number of pairs the page's comparisons have. Keys ``"mathds|<speed-up>|<size>"``.
    ``warm`` = W fits the design to warm start W's baseline runs only (its own start level, gain and noise: the
    per-warm-start table's intervals), keys ``"mathds|<speed-up>|<size>|w<W>"``; None fits all baseline runs.
    ``mixture`` fits one design per warm start and simulates their pooled study (``prs.analysis.coverage.Mixture``:
    ``sizes`` units per arm from each warm start, analysed together: the pooled table's intervals), keys
    ``"mathds|<speed-up>|<size x warm starts>|mix"``; default sizes: the fewest baseline runs of a warm start.
    ``level``: the intervals' nominal level (the family-wise table's 1 - 0.05 / 6, say); keys end ``|l<level>``
    when it is not 0.95. Needs >= ``MIN_COVERAGE_SEEDS`` baseline runs (of W; of every warm start for ``mixture``). The simulated
    statistic is the steps axis' (the planted speed-up is one in tokens too when an arm's tokens per step match
    the baseline's)."""
    import dataclasses

    from experiments.studies.mechanism import fit_scenario
    from prs.analysis.coverage import Mixture, coverage_study

    if mixture and warm is not None:
        raise ValueError("measure_coverage: give warm (one warm start's design) or mixture (all of them pooled), not both")
    if not 0.5 <= level < 1.0:
        raise ValueError(f"--coverage-level {level}: a nominal interval level; allowed: 0.5 <= level < 1")
    base = data.get("baseline", {})
    groups = ({w: {u: r for u, r in base.items() if u // WARM_STRIDE == w} for w in sorted({u // WARM_STRIDE for u in base})}
              if mixture else {warm: base if warm is None else {u: r for u, r in base.items() if u // WARM_STRIDE == warm}})
    for w, g in groups.items():
        if len(g) < MIN_COVERAGE_SEEDS:
            of = "" if w is None else f" of warm start W={w}"
            raise ValueError(f"--coverage needs >= {MIN_COVERAGE_SEEDS} complete baseline runs{of}, found {len(g)}")
    if mixture and len(groups) < 2:
        raise ValueError(f"--coverage-mixture needs baseline runs of >= 2 warm starts, found W = {sorted(groups)}")
    sizes = (min(len(g) for g in groups.values()),) if sizes is None else tuple(sizes)
    bad = [n for n in sizes if not (isinstance(n, int) and n >= 2)]
    if bad:
        raise ValueError(f"--coverage-sizes: {bad} are not study sizes; allowed: integers >= 2 (paired units per arm)")
    tail = "" if level == 0.95 else f"|l{level:.4f}"
    out = {}
    for sp in (1.9, 1.0):
        fits = {w: fit_scenario({u: {"steps": r["steps"], "tf": r["interp"]} for u, r in g.items()}, e="mathds",
                                speedup=sp, name="mathds, fitted to baseline" + ("" if w is None else f" of W={w}"))
                for w, g in groups.items()}
        for n in sizes:
            if mixture:
                mix = Mixture(f"mathds, pooled over W = {', '.join(map(str, fits))}",
                              tuple(dataclasses.replace(sc, seeds=n) for sc, _ in fits.values()))
                out[f"mathds|{sp}|{n * len(fits)}|mix{tail}"] = {
                    "fit": {str(w): fit for w, (_, fit) in fits.items()}, "warm": "mix",
                    **coverage_study(mix, studies=studies, n_boot=n_boot, level=level)}
            else:
                sc, fit = fits[warm]
                out[f"mathds|{sp}|{n}" + ("" if warm is None else f"|w{warm}") + tail] = {
                    "fit": fit, "warm": warm,
                    **coverage_study(dataclasses.replace(sc, seeds=n), studies=studies, n_boot=n_boot, level=level)}
    return out


def coverage_lines(cov: dict | None, n_base: int) -> list[str]:
    """The coverage table of ``measure_coverage``'s result, or why it is not measured."""
    lines = ["### Coverage of the intervals (simulation)", ""]
    if not cov:
        why = (f"needs >= {MIN_COVERAGE_SEEDS} baseline runs, {n_base} exist" if n_base < MIN_COVERAGE_SEEDS
               else "run `python -m experiments.studies.mathds --coverage STUDIES`")
        return lines + [f"Not yet measured ({why}).", ""]
    lines += ["A planted speed-up (1.9x; 1.0x, none) in a design fitted to the baseline's interpolate pass@1 curves "
              "(`experiments.studies.mechanism.fit_scenario`: per-run exponential fits, their spread, binomial noise "
              "with the residuals' variance; fitted on all baseline runs, or on one warm start's (`--coverage-warm W`: its "
              "own start level, gain and noise, the design of the per-warm-start table; `of W = w` says the fit's runs "
              "are all of warm start w), simulated at each study size: "
              "paired runs per arm), analysed with the estimators above on the steps axis "
              "(`python -m experiments.studies.mathds --coverage STUDIES --coverage-sizes N ... [--coverage-warm W]`; "
              "coverage.json, coverage_w<W>.json). Coverage = share "
              "of simulated studies "
              "whose nominal-95% interval holds the truth (± Monte Carlo SE).", "",
              "| planted | fitted design | headline speed-up: median, coverage | AUC difference: coverage | "
              "equal-step difference: coverage |", "|---|---|---|---|---|"]
    # row order: the fit on all baseline runs, then each warm start's, then the pooled mixtures
    warm = lambda res: -1 if res.get("warm") is None else (10**6 if res["warm"] == "mix" else res["warm"])  # noqa: E731
    design = lambda sc: (f"y0 {sc['y0']:.3f} -> y1 {sc['y1']:.3f}, τ {sc['tau']:.1f} (log sd {sc['seed_sd']:.2f}), "  # noqa: E731
                         f"noise as {sc['episodes']} episodes")
    order = lambda kv: (kv[1].get("level", 0.95), warm(kv[1]), -float(kv[0].split("|")[1]), int(kv[0].split("|")[2]))  # noqa: E731
    for key, res in sorted(cov.items(), key=order):
        sc, est = res["scenario"], res["estimators"]
        c = lambda k: f"{100 * est[k]['coverage']:.1f}% ± {100 * est[k]['coverage_se']:.1f}"  # noqa: E731
        if res.get("warm") == "mix":   # a pooled study: one design per warm start, their units analysed together
            parts = sc["parts"]
            head = (f"{sum(p['seeds'] for p in parts)} runs per arm pooled: " + " + ".join(
                f"{p['seeds']} of W = {w} (fitted on {len(res['fit'][w]['seeds'])}; {design(p)})"
                for w, p in zip(res["fit"], parts)) + f", every {parts[0]['every']} to {parts[0]['horizon']}")
            sp = parts[0]["speedup"]
        else:
            ws = sorted({int(u) // WARM_STRIDE for u in res["fit"]["seeds"]})   # the warm starts the design was fitted on
            of = f" of W = {ws[0]}" if len(ws) == 1 else ""
            head = (f"{sc['seeds']} runs per arm (fitted on {len(res['fit']['seeds'])}{of}), {design(sc)}, "
                    f"every {sc['every']} to {sc['horizon']}")
            sp = sc["speedup"]
        lv = res.get("level", 0.95)
        lvl = "" if lv == 0.95 else f"; intervals at {100 * lv:.2f}%"
        lines.append(f"| {sp:.1f}x | {head}; {res['studies']} studies x {res['n_boot']} resamples{lvl} | "
                     f"{est['restricted_mean_curve:speedup']['median']:.2f}, {c('restricted_mean_curve:speedup')} | "
                     f"{c('auc:auc')} | {c('equal_step:equal_step')} |")
    return lines + [""]


def runs_line(data: dict[str, dict[int, dict]]) -> list[str]:
    """How many of the planned runs exist, and which (arm: units per warm start), the records' commits, and
    the machines they ran on (runs per machine; a run resumed on another machine counts on each)."""
    n = sum(len(v) for v in data.values())
    plan = len(ARMS) * SEEDS * len(WARM_STARTS)
    lines = [f"Runs: {n} complete of the planned {plan} ({len(ARMS)} arms x {SEEDS} seeds x {len(WARM_STARTS)} warm "
             f"starts), read from `results/mathds/runs/`."]
    for arm in sorted(data, key=lambda a: (ARMS.index(a) if a in ARMS else len(ARMS), a)):
        per_w = by_warm_start({arm: data[arm]})
        lines.append(f"- `{arm}`: " + "; ".join(f"W={w}: seeds {', '.join(str(u % WARM_STRIDE) for u in sorted(s[arm]))}"
                                                for w, s in per_w.items()))
    commits = sorted({c for runs in data.values() for r in runs.values() for c in r["commits"]})
    if commits:
        lines.append(f"- records made by commit{'s' if len(commits) > 1 else ''} "
                     + ", ".join(f"`{c[:10]}`" for c in commits) + " (each run's `provenance.jsonl`)")
    machines: dict[str, int] = {}
    for runs in data.values():
        for r in runs.values():
            for m in r.get("machines", []):
                machines[m] = machines.get(m, 0) + 1
    if machines:
        lines.append("- machines (each run's `provenance.jsonl`; XLA:CPU's rounding and speed differ between them, "
                     "so wall-clock is comparable only within one): "
                     + "; ".join(f"{m}: {k} run{'s' if k > 1 else ''}" for m, k in sorted(machines.items())))
    return lines + [""]


def gain_text(levels: dict) -> str:
    """The reference's gain as a table cell, ``"start -> final"`` (``gap_compare``'s levels), marked when the
    gain is below ``GAP_RULE``, or "no gain"."""
    if levels["degenerate"]:
        return "no gain"
    small = levels["final"] - levels["start"] < GAP_RULE
    return f"{levels['start']:.3f} -> {levels['final']:.3f}" + (f" (< gap rule {GAP_RULE:.3f})" if small else "")


def _nan_ci() -> dict:
    return {"value": math.nan, "lo": math.nan, "hi": math.nan}


def same_machine(data: dict[str, dict[int, dict]], arm: str, units, ref: str = "baseline") -> int:
    """How many of the paired ``units`` ran, in both ``arm``'s and ``ref``'s records, on one and the same machine
    type (each record's ``machines``: every machine a run's provenance names; a resumed run may name two; an
    unrecorded one, ``"?"``, matches nothing)."""
    def one(r):   # the run's single recorded machine, or None
        m = set(r.get("machines", []))
        return next(iter(m)) if len(m) == 1 and m != {"?"} else None

    return sum(1 for u in units if one(data[arm][u]) is not None and one(data[arm][u]) == one(data[ref][u]))


def comparison_lines(data: dict[str, dict[int, dict]], key: str, *, n_boot: int) -> tuple[list[str], dict]:
    """The comparison tables on ``key`` (every arm vs the baseline): tokens, then wall-clock."""
    split = SPLIT[key]
    tok = [f"#### Held-out {split} pass@1 against generated tokens", "",
           "| arm vs baseline | paired runs | baseline's gain (start -> final) | tokens to 80%: baseline / arm | "
           "its censoring bound | censored runs (baseline / arm) | per warm start: tokens to 80% | steps to 80% | "
           f"AUC over tokens: arm - baseline (horizon, tokens) | equal-compute difference (censored) |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    wall = [f"#### Held-out {split} pass@1 against wall-clock (the oracle's estimation time left out)", "",
            "A pair's two runs compare in wall-clock only when they ran on one machine type under the same load; "
            "the last column counts the pairs whose runs did (`same_machine`: the same single machine in both "
            "records). The others mix the arms' cost with their machines' speeds and with how many lanes shared "
            "the cores, so where it is far below the paired runs this table is descriptive.", "",
            "| arm vs baseline | paired runs | wall-clock to 80%: baseline / arm | its censoring bound | "
            "AUC over wall-clock: arm - baseline (horizon, s) | equal-wall-clock difference (censored) | "
            "pairs on one machine type |",
            "|---|---|---|---|---|---|---|"]
    comps = {}
    for arm in ARMS[1:]:
        if arm not in data:
            continue
        n = len(set(data[arm]) & set(data.get("baseline", {})))
        try:
            g = compare(data, arm, key, n_boot=n_boot)
        except ValueError as e:  # e.g. a baseline curve too short for its levels
            tok.append(f"| `{arm}` | {n} | not compared: {e} |" + " |" * 7)
            continue
        if g is None:
            runs = f"{len(data[arm])} run{'s' * (len(data[arm]) != 1)}, {n} paired: not compared (< {MIN_PAIRED})"
            tok.append(f"| `{arm}` | {runs} |" + " - |" * 8)
            wall.append(f"| `{arm}` | {runs} |" + " - |" * 5)
            continue
        comps[arm] = g
        c = g[0.8]
        gap = gain_text(g["levels"])
        t, s, wl = c.get("speedup_tokens", _nan_ci()), c.get("speedup_steps", _nan_ci()), c.get("speedup_wall", _nan_ci())
        per_w = "; ".join(f"W={w}: {fmt_ratio(v)} ({v['n']})" for w, v in sorted(g["by_warm_start"].items())) or "-"
        at, et = g["auc_tokens"], g["equal_tokens"]
        aw, ew = g["auc_wall"], g["equal_wall"]
        tok.append(f"| `{arm}` | {len(g['units'])} | {gap} | {fmt_ratio(t)} | {BOUND_NOTE[t.get('bound', 'exact')]} | "
                   f"{c['n_censored_baseline']} / {c['n_censored_method']} | {per_w} | {fmt_ratio(s)} | "
                   f"{fmt_ci(at['improvement'], 3)} ({at['horizon']:,.0f}) | {fmt_ci(et['improvement'], 3)} ({et['censored']}) |")
        wall.append(f"| `{arm}` | {len(g['units'])} | {fmt_ratio(wl)} | {BOUND_NOTE[wl.get('bound', 'exact')]} | "
                    f"{fmt_ci(aw['improvement'], 3)} ({aw['horizon']:,.1f}) | {fmt_ci(ew['improvement'], 3)} ({ew['censored']}) | "
                    f"{same_machine(data, arm, g['units'])} |")
    return tok + [""] + wall + [""] + per_warm_start_lines(comps, split), comps


def familywise(data: dict[str, dict[int, dict]], arm: str, *, n_boot: int,
               alpha: float = FAMILY_ALPHA, family: int = len(FAMILY)) -> dict | None:
    """The pooled interpolate comparison of ``arm`` read family-wise: the tokens-to-80% ratio
    (``gap.gap_compare``'s headline, the same estimator and level rule as the pooled table) and the AUC over
    tokens (``token_auc``): ``compare`` on the token axis at level ``1 - alpha / family`` (Bonferroni over the
    ``family`` real controls: the probability that any of their intervals misses its truth is <= alpha when
    each covers at its level). None when fewer than ``MIN_PAIRED`` units are paired."""
    level = 1.0 - alpha / family
    g = compare(data, arm, "interp", n_boot=n_boot, warm_split=False, costs=("tokens",), level=level, fractions=(0.8,))
    if g is None:
        return None
    return {"n": len(g["units"]), "level": level, "n_boot": n_boot, "ratio": g[0.8].get("speedup_tokens", _nan_ci()),
            "auc": g["auc_tokens"]["improvement"]}


def familywise_lines(data: dict[str, dict[int, dict]], *, n_boot: int, cov: dict | None = None) -> tuple[list[str], dict]:
    """The family-wise table: every compared arm of ``FAMILY`` at the Bonferroni level (``familywise``);
    ``cov`` (``measure_coverage``'s results) says whether intervals at that level have had their coverage measured."""
    level = 1.0 - FAMILY_ALPHA / len(FAMILY)
    measured = any(abs(r.get("level", 0.95) - level) < 5e-4 for r in (cov or {}).values())
    where = (f"coverage at {100 * level:.2f}% measured: coverage table, rows 'intervals at {100 * level:.2f}%'"
             if measured else "measured for the 95% intervals only: coverage table")
    rows, out = [], {}
    for arm in FAMILY:
        f = familywise(data, arm, n_boot=n_boot) if arm in data and "baseline" in data else None
        if f is None:
            continue
        out[arm] = f
        r, a = f["ratio"], f["auc"]
        side = lambda lo, hi, one: ("below " if hi < one else "above " if lo > one else "holds ") + f"{one:g}"  # noqa: E731
        rows.append(f"| `{arm}` | {f['n']} | {fmt_ratio(r)} | {side(r['lo'], r['hi'], 1.0)} | {fmt_ci(a, 3)} | "
                    f"{side(a['lo'], a['hi'], 0.0)} |")
    if not rows:
        return [], out
    return [f"#### Family-wise reading: the {len(FAMILY)} real controls at once", "",
            f"The pooled interpolate comparisons above are each a 95% interval; read together, six of them can "
            f"exclude 1.0 (or 0) by chance. Here each is at {100 * level:.2f}% (Bonferroni: 1 - 0.05 / "
            f"{len(FAMILY)}; the oracle, the positive control, is not in the family), {n_boot:,} paired resamples, "
            f"the same estimators: a reading that survives this table holds for the family at 95% whenever each "
            f"interval covers at its level ({where}). Added in the eighth "
            f"session, after the 95% readings had been seen: a stricter reading of them, not a pre-registered test "
            f"(the pre-registration named H2's two clauses, dynamic sampling below 1.0 and selective above).", "",
            "| arm vs baseline | paired runs | tokens to 80%: baseline / arm | 1.0 | AUC over tokens: arm - baseline | 0 |",
            "|---|---|---|---|---|---|"] + rows + [""], out


def per_warm_start_lines(comps: dict[str, dict], split: str) -> list[str]:
    """A table of ``compare``'s per-warm-start readings on the token axis (each warm start at its own baseline's
    gain): the ratios to 80%, the AUC over tokens and the equal-compute difference; [] when no arm has one.
    A warm start whose baseline gains little is read on its AUC and equal-compute cells (no crossing level)."""
    rows = [(arm, w, v) for arm, g in comps.items() for w, v in sorted(g["by_warm_start"].items())]
    if not rows:
        return []
    lines = [f"#### Held-out {split} pass@1 per warm start (generated tokens; each warm start at its own baseline's "
             "gain)", "",
             "| arm vs baseline | W | paired runs | baseline's gain (start -> final) | tokens to 80%: baseline / arm | "
             "steps to 80% | AUC over tokens: arm - baseline (horizon, tokens) | equal-compute difference (censored) |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| `{arm}` | {w} | {v['n']} | {gain_text(v['levels'])} | {fmt_ratio(v)} | {fmt_ratio(v['steps'])} | "
              f"{fmt_ci(v['auc_tokens']['improvement'], 3)} ({v['auc_tokens']['horizon']:,.0f}) | "
              f"{fmt_ci(v['equal_tokens']['improvement'], 3)} ({v['equal_tokens']['censored']}) |" for arm, w, v in rows]
    return lines + [""]


def section(data: dict[str, dict[int, dict]], *, n_boot: int = 2000, cov: dict | None = None,
            replays: pathlib.Path | None = None, runs: pathlib.Path = RUNS) -> tuple[str, dict]:
    """The page's generated section (markdown between ``BEGIN`` and ``END``) and its summary."""
    lines = [BEGIN, "", "## Results (generated)", "",
             "Generated by `python -m experiments.studies.mathds` (experiments/studies/mathds.py; `--check` compares) "
             "from the complete runs' committed records. Every arm is compared with the baseline on the (warm start, "
             "seed) units both completed. Cumulative generated tokens at an evaluation = the ledger's "
             "`tokens_generated` summed over the updates before it (screening, discarded generation batches and "
             "re-rolls included; the oracle's estimation rollouts are not); wall-clock = the train steps' "
             "`time_select + time_sample + time_replay + time_batch + time_update` (evaluation not counted; "
             "compilation spikes above 5x a run's median step counted as the median), without the oracle's "
             "`time_oracle`: the oracle's estimation cost is left out by design. To 80%: the baseline's start -> "
             "final gain (first / last 3 evaluations of its seed-mean curve), the level re-estimated in every paired "
             "resample, the restricted crossing of the seed-mean curves (censored runs counted at the last common "
             "evaluation); a ratio > 1 means the arm needs less. The pooled ratio reads one level from all paired units; the "
             "per-warm-start column reads each warm start at its own baseline's level (a warm start that learns more "
             "slowly can sit below the pooled level in both arms and pull the pooled ratio towards 1). AUC: mean pass@1 over [0, the smallest final "
             "cumulative cost among the paired runs]. Equal compute: the arm's pass@1 at the baseline run's final "
             "cumulative cost minus the baseline's final (a run that ended below that cost counts its final, "
             "censored). 95% paired bootstrap intervals (expanded percentile for differences), "
             f"{n_boot:,} resamples.", ""]
    lines += runs_line(data)
    summary: dict = {"runs": {a: sorted(v) for a, v in data.items()}}
    comps_interp: dict = {}
    theory = {w: theory_ratios(c) for w, c in CALIBRATIONS.items()}   # as the arms run (reroll="replace")
    for key in ("interp", "extrap"):
        lines += [f"### Held-out {SPLIT[key]} pass@1 (`{METRICS[key]}`)", ""]
        if "baseline" not in data:
            lines += ["No complete baseline run yet: nothing compared.", ""]
            continue
        t, comps = comparison_lines(data, key, n_boot=n_boot)
        lines += t
        summary[key] = {a: to_jsonable(g) for a, g in comps.items()}
        if key == "interp":
            comps_interp = comps
            fw, summary["familywise"] = familywise_lines(data, n_boot=FAMILY_BOOT_FACTOR * n_boot, cov=cov)
            lines += fw
    if "interp" in summary:
        pre_w = {w: theory_ratios(c, reroll="add") for w, c in CALIBRATIONS.items()}
        lines += hypotheses_lines(comps_interp, pre_w.get(0, {}), theory.get(0, {}), pre_w=pre_w, run_w=theory)
    comp_lines, summary["components"] = component_lines(data, n_boot=n_boot)
    lines += comp_lines
    tr = transfer(data, n_boot=n_boot)
    lines += ["### Does extrapolate move with interpolate?", "",
              "Per run: gain = final - first evaluation on each split; the arm's mean gains (95% CI) and the Pearson "
              "correlation of the two gains across its runs (>= 3 runs), over all its runs (W: all) and over each warm "
              "start's. The two warm starts gain at different levels, so a correlation over all runs mixes the "
              "difference of their means with the run-to-run relation; the last column takes it out (each run's gains "
              "less its warm start's mean gains, `transfer`).", "",
              "| arm | W | runs | interpolate gain | extrapolate gain | correlation | within warm starts |",
              "|---|---|---|---|---|---|---|"]
    lines += [f"| `{r['arm']}` | {r['w']} | {r['runs']} | {fmt_ci(r['gain_interp'], 3)} | {fmt_ci(r['gain_extrap'], 3)} | "
              f"{fmt(r['r'], 2)} | {fmt(r['r_within'], 2)} |" for r in tr] or ["", "No complete run yet."]
    led = ledger(data)
    for r in led:
        r["theory_ratio"] = theory.get(r["w"], {}).get(r["arm"])
    lines += ["", "### The ledger (measured, per step; mean over each arm's runs of one warm start)", "",
              "Contrast groups per 1000 generated rollouts is what `python -m theory controls` predicts from the "
              "step-0 histogram (its informative groups per rollout); the oracle's estimation rollouts are apart. "
              "Measured / baseline is against the same warm start's baseline. The theory's ratio to uniform is "
              "computed from that warm start's step-0 pool histogram ("
              + ", ".join(f"W = {w}: `{c.relative_to(ROOT)}`" for w, c in CALIBRATIONS.items())
              + "; `theory_ratios`: PS as the arm runs it, `--reroll replace`; the "
              "oracle on the theory's top-B-of-4B row; no row for ps_ds and the Beta-posterior `predicted`).", "",
              "| W | arm | runs | generated tokens / step | rollouts sampled / step | groups with contrast / step | "
              "contrast groups per 1000 generated rollouts | measured / baseline | theory / uniform | "
              "oracle's estimation rollouts / step (tokens) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['w']} | `{r['arm']}` | {r['runs']} | {r['tokens']:.0f} | {r['rollouts']:.1f} | {r['contrast']:.2f} | "
              f"{r['contrast_per_1000']:.1f} | {fmt(r['ratio'], 2)} | "
              + ("-" if r["theory_ratio"] is None else f"{r['theory_ratio']:.2f}") + " | "
              + ("-" if r["oracle_rollouts"] is None else f"{r['oracle_rollouts']:.0f} ({r['oracle_tokens']:.0f})")
              + " |" for r in led] or ["", "No complete run yet."]
    sel = selector_counters(data)
    show = lambda v, f: "-" if not np.isfinite(v) else format(v, f)  # noqa: E731
    lines += ["", "### What each selector did (its own counters; mean over each arm's runs of one warm start)", "",
              "The trained groups' pass rate (`pass_rate_train`, per step); dynamic sampling's generation batches "
              "per step; Prefix Sampling's re-rolled groups per step and the share of re-rolls that replaced their "
              "group (with `reroll_fallback`, only a re-roll with contrast does); selective's (GRESO) skipped "
              "tasks per step; screen's accepted share of screened "
              "candidates; predicted's distinct tasks trained in the run (`pool_size` minus its final "
              "`select/unvisited`). A dash: the arm does not log it.", "",
              "| W | arm | runs | trained groups' pass rate | generation batches / step | re-rolled groups / step | "
              "re-rolls that replaced | tasks skipped / step | accepted share | distinct tasks trained |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['w']} | `{r['arm']}` | {r['runs']} | {show(r['pass_train'], '.3f')} | {show(r['gen_batches'], '.2f')} | "
              f"{show(r['rerolled'], '.2f')} | {show(r['reroll_kept'], '.2f')} | {show(r['skipped'], '.2f')} | {show(r['accepted'], '.3f')} | {show(r['visited'], '.0f')} |"
              for r in sel] or ["", "No complete run yet."]
    aa, aa_summary = aa_lines(data, n_boot=n_boot)
    lines += [""] + aa + coverage_lines(cov, len(data.get("baseline", {})))
    lines += (replay_lines(replays, runs) if replays is not None else []) + [END]
    summary.update(transfer=to_jsonable(tr), ledger=to_jsonable(led), selectors=to_jsonable(sel), aa=aa_summary)
    return "\n".join(lines), summary


def replay_compare(recorded: pathlib.Path, replay: pathlib.Path) -> dict:
    """A shortened re-run (``replay``, e.g. ``steps=10``) against the committed run it replays (``recorded``):
    every replayed (kind, step) record is matched to the recorded one and each field both have (wall-clock
    ``time_*`` left out) is compared. Returns {"records": matched records, "missing": replayed records the
    record lacks, "identical_records", "fields": compared field names, "differ": {field: (max |a - b|, max
    |a - b| / max(|a|, |b|))} for the fields that differ anywhere, "machines": (recorded, replay)
    ``machine_name``s}."""
    first = lambda d: machine_name(json.loads((d / "provenance.jsonl").read_text().splitlines()[0]).get("machine"))  # noqa: E731
    rec = {(r.get("kind"), r.get("step")): r for r in read_records(recorded)}
    new = read_records(replay)
    missing = [(r.get("kind"), r.get("step")) for r in new if (r.get("kind"), r.get("step")) not in rec]
    fields, differ, identical, n = set(), {}, 0, 0
    for r in new:
        x = rec.get((r.get("kind"), r.get("step")))
        if x is None:
            continue
        n += 1
        common = [k for k in r if k in x and not k.startswith("time_")]
        fields.update(common)
        same = True
        for k in common:
            a, b = x[k], r[k]
            if a == b:
                continue
            same = False
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
                d = abs(float(a) - float(b))
                rel = d / max(abs(float(a)), abs(float(b)))
                old = differ.get(k, (0.0, 0.0))
                differ[k] = (max(old[0], d), max(old[1], rel))
            else:
                differ[k] = (math.inf, math.inf)   # a non-numeric field (a histogram, a string) differs
        identical += same
    return {"records": n, "missing": missing, "identical_records": identical, "fields": sorted(fields),
            "differ": dict(sorted(differ.items())), "machines": (first(recorded), first(replay))}


def replay_lines(replays: pathlib.Path, runs: pathlib.Path) -> list[str]:
    """The replay table: each ``replays/<run name>`` against ``runs/<run name>`` (``replay_compare``)."""
    dirs = sorted(d for d in replays.iterdir() if (d / "metrics.jsonl.gz").exists() or (d / "metrics.jsonl").exists()) \
        if replays.is_dir() else []
    if not dirs:
        return []
    lines = ["### Replays of committed runs (a seed fixes a run)", "",
             f"A committed run re-run for its first steps from its recorded command with `steps=` shortened (records in "
             f"`{replays.relative_to(ROOT) if replays.is_relative_to(ROOT) else replays}/`), each record matched to the "
             "committed one by (kind, step), every field but wall-clock compared (`replay_compare`). XLA:CPU compiles for "
             "the host, so bit-equality is promised only on the recording machine type.", "",
             "| run | records compared | identical records | fields compared | fields that differ: max abs (max rel) "
             "difference | machines: recorded -> replay |", "|---|---|---|---|---|---|"]
    for d in dirs:
        c = replay_compare(runs / d.name, d)
        dif = ", ".join(f"`{k}` {a:.1e} ({r:.1e})" for k, (a, r) in c["differ"].items()) or "none"
        lines.append(f"| `{d.name}` | {c['records']}" + (f" ({len(c['missing'])} unmatched)" if c["missing"] else "")
                     + f" | {c['identical_records']} | {len(c['fields'])} | {dif} | {c['machines'][0]} -> "
                     f"{c['machines'][1]} |")
    return lines + [""]


def figure(data: dict[str, dict[int, dict]], path: pathlib.Path, *, axis: str = "tokens", grid: int = 101) -> None:
    """``plot`` saved to ``path`` (the Agg back end; the figure closed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plot(data, axis=axis, grid=grid)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(data: dict[str, dict[int, dict]], *, axis: str = "tokens", grid: int = 101):
    """Held-out pass@1 (columns: interpolate, extrapolate) against cumulative generated tokens
    (``axis="tokens"``) or wall-clock (``"wall"``), one row per warm start (its arms' runs only: pooling
    would mix the warm starts' levels in each arm's own proportion): per arm the mean over its runs on a
    common grid (each run linearly interpolated on its cost axis; an arm's curve stops at its runs' smallest
    final cost) with a pointwise 95% bootstrap band (``bootstrap_band``). Returns the matplotlib figure (the
    notebook shows it; ``figure`` saves it)."""
    import matplotlib.pyplot as plt

    c = {"tokens": "cum_tokens", "wall": "cum_wall"}[axis]
    parts = by_warm_start(data) or {0: {}}
    fig, axes = plt.subplots(len(parts), 2, figsize=(12, 4.4 * len(parts)), squeeze=False)
    for row, (w, sub) in zip(axes, parts.items()):
        pts = {a: [(axis_at(r["steps"], r[c][None])[0], r) for r in runs.values()] for a, runs in sub.items()}
        top = max((min(x[-1] for x, _ in p) for p in pts.values() if p), default=1.0)
        xg = np.linspace(0.0, top, grid)                                                   # [G]
        for ax, key in zip(row, ("interp", "extrap")):
            for arm in sorted(pts, key=lambda a: (ARMS.index(a) if a in ARMS else len(ARMS), a)):
                end = min(x[-1] for x, _ in pts[arm])
                xa = np.r_[xg[xg < end], end]                                                # [G'] this arm's reach
                y = np.array([np.interp(xa, x, r[key]) for x, r in pts[arm]])                # [U, G']
                m, lo, hi = bootstrap_band(y)
                col = f"C{ARMS.index(arm) if arm in ARMS else len(ARMS)}"
                n = len(pts[arm])
                ax.plot(xa, m, color=col, label=f"{LABEL.get(arm, arm)} ({n} run{'s' * (n != 1)})")
                ax.fill_between(xa, lo, hi, color=col, alpha=0.15)
            ax.set_xlabel("cumulative generated tokens" if axis == "tokens" else
                          "cumulative wall-clock of the train steps, s (oracle's estimation left out)")
            ax.set_ylabel(f"held-out {SPLIT[key]} pass@1")
            ax.set_title(f"warm start W = {w}: {SPLIT[key]} pass@1", fontsize=9)
            if pts:
                ax.legend(fontsize=7)
    fig.suptitle(f"mathds: held-out pass@1 vs {'generated tokens' if axis == 'tokens' else 'wall-clock'} "
                 "(per arm: mean over its runs, pointwise 95% bootstrap band)", fontsize=10)
    fig.tight_layout()
    return fig


def write_section(page: pathlib.Path, text: str) -> None:
    """Replaces the text between ``BEGIN`` and ``END`` on ``page`` (appends it at the end when absent); the
    prose outside the markers is left as it is."""
    s = page.read_text()
    if BEGIN in s:
        s = s[:s.index(BEGIN)] + text + s[s.index(END) + len(END):]
    else:
        s = s.rstrip("\n") + "\n\n" + text + "\n"
    page.write_text(s)


@command_line.command("experiments.studies.mathds")
def main(argv=None) -> int:
    ap = command_line.ArgumentParser(prog="python -m experiments.studies.mathds", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page's generated section differs; write nothing")
    ap.add_argument("--print", action="store_true", help="print the section; write nothing")
    ap.add_argument("--runs", default=str(RUNS), help="the committed records (default results/mathds/runs)")
    ap.add_argument("--page", default=str(PAGE), help="the page (default results/mathds/README.md)")
    ap.add_argument("--figures", default=str(OUT), help="where the figures and summary.json go (default results/mathds)")
    ap.add_argument("--collect", default=None, metavar="SWEEP_RUNS",
                    help="first copy the complete mathds-w*-*-s* runs under SWEEP_RUNS into --runs "
                         "(prs.analysis.runs.collect_records; a different record of the same name is refused)")
    ap.add_argument("--coverage", type=int, default=0, metavar="STUDIES",
                    help=f"simulate STUDIES studies for the coverage table (needs >= {MIN_COVERAGE_SEEDS} baseline runs)")
    ap.add_argument("--coverage-boot", type=int, default=1000, help="resamples per simulated study (default 1000)")
    ap.add_argument("--coverage-sizes", type=int, nargs="+", default=None, metavar="N",
                    help="paired runs per arm in the simulated studies (default: the number of baseline runs)")
    ap.add_argument("--coverage-warm", type=int, default=None, metavar="W",
                    help="fit the simulated design to warm start W's baseline runs only (written to coverage_w<W>.json; "
                         "default: all baseline runs, coverage.json)")
    ap.add_argument("--coverage-mixture", action="store_true",
                    help="fit one design per warm start and simulate their pooled study (--coverage-sizes N: N runs of "
                         "each warm start; written to coverage_mix.json)")
    ap.add_argument("--coverage-level", type=float, default=0.95, metavar="LEVEL",
                    help="the simulated intervals' nominal level (default 0.95; the family-wise table's: 0.991667); "
                         "another level's results go to their own file, <name>_l<LEVEL>.json")
    ap.add_argument("--boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    a = ap.parse_args(argv)
    if a.coverage_mixture and a.coverage_warm is not None:
        ap.error("--coverage-mixture pools every warm start's design; --coverage-warm fits one: give one of them")
    if a.check and (a.print or a.collect or a.coverage):
        ap.error("--check writes nothing: it takes no --print, --collect or --coverage")
    if (a.coverage_sizes or a.coverage_warm is not None or a.coverage_mixture or a.coverage_level != 0.95) and not a.coverage:
        ap.error("--coverage-sizes, --coverage-warm, --coverage-mixture and --coverage-level act only with --coverage "
                 "STUDIES; give it too")
    if a.coverage_warm is not None and a.coverage_warm < 0:
        ap.error(f"--coverage-warm {a.coverage_warm}: a warm start is a non-negative integer (the study's: 0, 1)")
    runs, page, figs = pathlib.Path(a.runs), pathlib.Path(a.page), pathlib.Path(a.figures)
    if a.collect:
        copied = collect_records(a.collect, runs, prefix="mathds-w")
        print(f"copied the records of {len(copied)} complete runs to {runs}", file=sys.stderr)
    data = load(runs)
    if a.coverage:   # one file per fitted design: all baseline runs, or one warm start's
        stem = ("coverage_mix" if a.coverage_mixture else "coverage" if a.coverage_warm is None
                else f"coverage_w{a.coverage_warm}")
        cov_file = figs / (stem + ("" if a.coverage_level == 0.95 else f"_l{a.coverage_level:.4f}") + ".json")
        cov_file.write_text(json.dumps(to_jsonable(measure_coverage(
            data, studies=a.coverage, n_boot=a.coverage_boot, sizes=a.coverage_sizes, warm=a.coverage_warm,
            mixture=a.coverage_mixture, level=a.coverage_level)), indent=1) + "\n")
    files = sorted(figs.glob("coverage.json")) + sorted(figs.glob("coverage_w*.json")) + sorted(figs.glob("coverage_mix*.json"))
    files += sorted(figs.glob("coverage_l*.json"))
    cov = {k: v for f in files for k, v in json.loads(f.read_text()).items()} or None
    text, summary = section(data, n_boot=a.boot, cov=cov, replays=runs.parent / "replay", runs=runs)
    if a.check:
        s = page.read_text()
        got = s[s.index(BEGIN): s.index(END) + len(END)] if BEGIN in s and END in s else ""
        if got != text:
            print(f"{page}: the generated section differs from its records (run python -m experiments.studies.mathds)")
            return 1
        return 0
    print(text)
    if not a.print:
        write_section(page, text)
        (figs / "summary.json").write_text(json.dumps(to_jsonable(summary), indent=1) + "\n")
        if data:
            figure(data, figs / "pass_at_1_vs_tokens.png", axis="tokens")
            figure(data, figs / "pass_at_1_vs_wall.png", axis="wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
