"""The decisive comparison (issue #16, items 3 and 5): every arm against the baseline with the gap
statistics of ``prs.analysis.gap``, the head-to-head of Prefix Sampling against its controls at the
baseline's 80%-gap level, and a verdict computed from the confidence intervals by explicit rules.

Pure numpy over explicit arrays (``arm_stats``, ``verdict``, ``arms_table``); ``lm_arms`` is the only
function that reads ``Run`` objects (it builds the arrays of the LM runs). Used by
``experiments.analyze`` (LM runs) and ``experiments.sim_grid`` (the simulator), so both pages come
from the same rules.

Arms. An arm is a label ``<method>[-<schedule>]`` (``ps_ada-next_visit``; the schedule is left out for
``same_step``). Arm a has paired seeds ``seeds_a``, curves y_a [S_a, E] on common evaluation steps,
cumulative costs {name: c_a [S_a, T+1]} and optional per-seed mechanism measurements:

* ``density``: mean over training steps of p(1-p) of the groups trained on (LM: ``pq_trained``;
  simulator: ``energy``), the signal density of a step;
* ``survival``: mean groups kept by the filter per step (LM: ``groups_kept``).

Every arm is compared with the baseline of its own schedule when that exists (``baseline-next_visit``
for next_visit arms), else with ``baseline``: ``gap_compare`` on their common seeds.

Head-to-head at the 80%-gap level L of PS's baseline (``head_to_head``): for PS (the ps_ada arm with
the larger step speed-up point estimate: "best schedule") and a control C on their common seeds,
x_a = the interpolated first step at which arm a reaches L, restricted to the horizon h (the last
evaluation all their seeds reached; a seed that has not reached L by h counts h: restricted means,
``gap.restricted_steps``) and c_a = its cost before that step; then

    R_steps = mean(x_C) / mean(x_PS),     R_cost = mean(c_C) / mean(c_PS)

with paired bootstrap CIs (> 1: PS is faster). For the mechanism measurements the paired
difference PS - baseline with its CI.

Verdict rules (``verdict``; CI = the 95% paired bootstrap interval; "above 1" means lo > 1):

1. **effect**: S = PS vs baseline, speed-up in steps to 80% of the gap. S.lo > 1: PS is faster;
   S.hi < 1: PS is slower; otherwise no detectable effect. Without an effect the mechanism is
   ``none`` and the deciding control is the baseline itself.
2. **extra compute**: E = extra_rollouts vs PS at matched cost (``R_cost``). With an effect, if
   E.lo <= 1 the extra rollouts reach L for no more cost: ``extra compute`` (decided by
   extra_rollouts). Without an extra_rollouts arm, PS's own cost speed-up vs the baseline decides
   (lo > 1 excludes extra compute, otherwise ``extra compute`` is not excluded).
3. **filter survival**: R = reroll_noprefix vs PS in steps. If R.lo <= 1, re-rolling the same skewed
   groups from scratch does as well: what helps is another draw of the groups the filter would
   waste, not the prefix: ``filter survival`` (decided by reroll_noprefix).
4. **recovery**: H = ps_ada_hard vs PS in steps (same schedule; ps_ada_hard has no failure
   prefixes). If H.lo > 1: ``recovery from failure prefixes`` (decided by ps_ada_hard).
5. **signal density**: otherwise, if PS's density - baseline's density has lo > 0:
   ``signal density`` (decided by reroll_noprefix, which has the same re-rolls without the prefix,
   and the density measurement).
6. otherwise ``prefix, mechanism unresolved``.

A missing arm makes its rule ``undetermined`` and the verdict says which arm was missing. The
issue's goal (``goal_met``): S <= 1/2 of the steps, i.e. S.value >= 2, with S.hi > 1.9 and
S.lo > 1.3, and PS beating both reroll_noprefix and extra_rollouts at matched cost (R_cost.lo > 1).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from prs.analysis.gap import FRACTIONS, common_horizon, cost_at_steps, gap_compare, restricted_steps
from prs.analysis.runs import PAPER_ABLATION_SPEEDUP, PAPER_ABLATION_STEPS, PAPER_EQUAL_STEP_PP, Run
from prs.analysis.bootstrap import bootstrap_diff_of_means, bootstrap_ratio_of_means
from prs.analysis.stats import (censoring_bound, eval_matrix,
                                moving_average)

__all__ = ["arm_label", "baseline_for", "arm_stats", "head_to_head", "verdict", "arms_table", "lm_arms",
           "MECHANISMS", "CONTROLS"]

MECHANISMS = ("none", "extra compute", "filter survival", "recovery from failure prefixes", "signal density",
              "prefix, mechanism unresolved", "undetermined")
CONTROLS = ("reroll_noprefix", "extra_rollouts", "baseline_lr2", "ps_ada_hard")
ARM_ORDER = ("baseline", "ps_fix", "ps_ada_hard", "ps_ada", "reroll_noprefix", "extra_rollouts", "baseline_lr2")


def arm_label(method: str, schedule: str = "same_step") -> str:
    """``ps_ada`` + ``next_visit`` -> ``ps_ada-next_visit``; same_step adds nothing."""
    return method if schedule in ("same_step", "", None) else f"{method}-{schedule}"


def _split(arm: str) -> tuple[str, str]:
    """``ps_ada-next_visit[cut_spread=True]`` -> (``ps_ada``, ``next_visit``): method and schedule."""
    method, _, schedule = arm.split("[", 1)[0].partition("-")
    return method, schedule or "same_step"


def baseline_for(arm: str, arms: Sequence[str], baseline: str = "baseline") -> str:
    """The baseline of the arm's own schedule when present, else ``baseline``."""
    own = arm_label(baseline, _split(arm)[1])
    return own if own in arms else baseline


def _order_key(arm: str):
    m, s = _split(arm)
    return (ARM_ORDER.index(m) if m in ARM_ORDER else len(ARM_ORDER), m, s != "same_step", s)


def _common(a: Mapping[str, Any], b: Mapping[str, Any]) -> tuple[list[int], np.ndarray, np.ndarray]:
    sa, sb = list(a["seeds"]), list(b["seeds"])
    common = sorted(set(sa) & set(sb))
    return common, np.array([sa.index(s) for s in common], int), np.array([sb.index(s) for s in common], int)


def _check_arm(name: str, a: Mapping[str, Any], E: int) -> None:
    y = np.asarray(a["y"])
    if y.ndim != 2 or y.shape[1] != E or len(a["seeds"]) != y.shape[0]:
        raise ValueError(f"arm {name!r}: y must be [S={len(a['seeds'])}, E={E}], got {y.shape}")
    for key in ("density", "survival"):
        if a.get(key) is not None and np.shape(a[key]) != (y.shape[0],):
            raise ValueError(f"arm {name!r}: {key} must be [S={y.shape[0]}], got {np.shape(a[key])}")


def _at_level(steps, y, cost: Mapping[str, np.ndarray], level: float, window: int, horizon: float) -> dict[str, np.ndarray]:
    """Per seed: restricted steps to ``level`` (not reached by the horizon -> the horizon) and the cost before them."""
    x, cens = restricted_steps(steps, moving_average(y, window=window), level, horizon=horizon)
    out = {"steps": x, "censored": cens}
    for c, arr in cost.items():
        out[c] = cost_at_steps(arr, x)
    return out


def head_to_head(steps, ps: Mapping[str, Any], ctrl: Mapping[str, Any], level: float, *, window: int = 1,
                 n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Control vs PS at one fixed level on their common seeds: {"steps": R_steps, <cost>: R_cost, ...}
    (> 1: PS faster), restricted means at the horizon h = the last evaluation all their seeds reached."""
    common, ip, ic = _common(ps, ctrl)
    out: dict[str, Any] = {"level": level, "paired_seeds": common}
    if len(common) < 2 or not math.isfinite(level):
        out["error"] = f"{len(common)} common seeds" if len(common) < 2 else "no level (degenerate gap)"
        return out
    yp, yc = np.asarray(ps["y"], float)[ip], np.asarray(ctrl["y"], float)[ic]
    h = common_horizon(steps, yp, yc)
    if h is None:
        out["error"] = "no evaluation step that every seed reached"
        return out
    costs = sorted(set(ps.get("cost", {})) & set(ctrl.get("cost", {})))
    p = _at_level(steps, yp, {c: np.asarray(ps["cost"][c])[ip] for c in costs}, level, window, h)
    q = _at_level(steps, yc, {c: np.asarray(ctrl["cost"][c])[ic] for c in costs}, level, window, h)
    boot = dict(paired=True, n_boot=n_boot, seed=seed)
    out["horizon"] = h
    out["steps"] = bootstrap_ratio_of_means(q["steps"], p["steps"], **boot)
    out["n_censored_ps"], out["n_censored_control"] = int(p["censored"].sum()), int(q["censored"].sum())
    for c in costs:
        ok = np.isfinite(p[c]) & np.isfinite(q[c])
        out[c] = bootstrap_ratio_of_means(q[c][ok], p[c][ok], **boot)
    for key in ["steps"] + costs:
        out[key].update(estimator="restricted", horizon=h, bound=censoring_bound(q["censored"], p["censored"]))
    return out


def _diff(a: Mapping[str, Any], b: Mapping[str, Any], key: str, n_boot: int, seed: int) -> dict[str, Any] | None:
    if a.get(key) is None or b.get(key) is None:
        return None
    common, ia, ib = _common(a, b)
    va, vb = np.asarray(a[key], float)[ia], np.asarray(b[key], float)[ib]
    ok = np.isfinite(va) & np.isfinite(vb)
    if ok.sum() < 2:
        return None
    d = bootstrap_diff_of_means(va[ok], vb[ok], paired=True, n_boot=n_boot, seed=seed)
    d.update(a_mean=float(va[ok].mean()), b_mean=float(vb[ok].mean()))
    return d


def arm_stats(steps, arms: Mapping[str, Mapping[str, Any]], *, baseline: str = "baseline", k: int = 3,
              k_start: int | None = None, window: int = 1, fractions: Sequence[float] = FRACTIONS,
              n_boot: int = 2000, seed: int = 0, old_metric: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """All comparisons of the module docstring.

    steps [E]; arms {label: {"seeds": [S], "y": [S, E], "cost": {name: [S, T+1]}, "density": [S] | None,
    "survival": [S] | None}}; ``old_metric``: {label: speed-up dict} of the old steps-to-converge metric
    (``stats.analyze_task``), shown beside. Returns {"arms": {label: gap_compare + "vs"}, "ps": label,
    "head_to_head": {control: ...}, "density": diff, "survival": diff, "baseline": ..., "order": [...]}.
    """
    steps = np.asarray(steps, float)
    for name, a in arms.items():
        _check_arm(name, a, steps.size)
    if baseline not in arms:
        raise ValueError(f"baseline arm {baseline!r} not among the arms {sorted(arms)}")
    boot = dict(n_boot=n_boot, seed=seed)
    order = sorted(arms, key=_order_key)
    res: dict[str, Any] = {"baseline": baseline, "order": order, "arms": {}, "head_to_head": {},
                           "old_metric": dict(old_metric or {})}
    for name in order:
        b = baseline_for(name, list(arms), baseline)
        if name == b:
            continue
        common, ib, ia = _common(arms[b], arms[name])
        rec: dict[str, Any] = {"vs": b, "paired_seeds": common}
        if len(common) < 2:
            rec["error"] = f"{len(common)} common seeds with {b}"
        else:
            ya, yb = np.asarray(arms[name]["y"])[ia], np.asarray(arms[b]["y"])[ib]
            costs = sorted(set(arms[name].get("cost", {})) & set(arms[b].get("cost", {})))
            try:
                rec.update(gap_compare(steps, yb, ya, cost_base={c: np.asarray(arms[b]["cost"][c])[ib] for c in costs},
                                       cost_meth={c: np.asarray(arms[name]["cost"][c])[ia] for c in costs}, k=k,
                                       k_start=k_start, fractions=fractions, window=window, **boot))
            except ValueError as e:
                rec["error"] = str(e)
        res["arms"][name] = rec
    # PS = the ps_ada arm (any schedule) with the largest step speed-up to 80% of the gap
    f80 = max(fractions)
    cands = [a for a in order if _split(a)[0] == "ps_ada" and "error" not in res["arms"].get(a, {"error": 1})]
    def s80(a):
        v = res["arms"][a].get(f80, {}).get("speedup_steps", {}).get("value", math.nan)
        return v if math.isfinite(v) else -math.inf
    ps = max(cands, key=s80) if cands else None
    res["ps"], res["fraction"] = ps, f80
    if ps is None:
        return res
    psb = res["arms"][ps]["vs"]
    level = res["arms"][ps]["levels"]["levels"][f80]
    sched = _split(ps)[1]
    for c in CONTROLS:
        cand = [arm_label(c, sched), c]
        cname = next((x for x in cand if x in arms), None)
        if cname is not None:
            res["head_to_head"][c] = dict(head_to_head(steps, arms[ps], arms[cname], level, window=window, **boot),
                                          arm=cname)
    res["density"] = _diff(arms[ps], arms[psb], "density", n_boot, seed)
    res["survival"] = _diff(arms[ps], arms[psb], "survival", n_boot, seed)
    return res


def _above(d: Mapping[str, Any] | None, x: float) -> bool:
    return bool(d) and math.isfinite(d.get("lo", math.nan)) and d["lo"] > x


def _ci_text(d: Mapping[str, Any] | None, nd: int = 2) -> str:
    if not d:
        return "n/a"
    f = lambda v: "nan" if v is None or not math.isfinite(v) else f"{v:.{nd}f}"  # noqa: E731
    return f"{f(d.get('value'))} [{f(d.get('lo'))}, {f(d.get('hi'))}]"


def _pp(d: Mapping[str, Any]) -> dict[str, Any]:
    """A CI record of a difference in pass rate, in percentage points."""
    return {k: (None if d.get(k) is None else 100.0 * d[k]) for k in ("value", "lo", "hi")}


def verdict(res: Mapping[str, Any], *, cost: str = "tokens") -> dict[str, Any]:
    """The rules of the module docstring applied to ``arm_stats``' result; ``cost``: the matched-cost key
    ("tokens" for LM runs, "decisions" for the simulator). Returns {"effect", "mechanism", "decided_by",
    "rules": [(rule, outcome)], "goal_met", "text"}."""
    ps, f = res.get("ps"), res.get("fraction", 0.8)
    out: dict[str, Any] = {"ps": ps, "rules": [], "goal_met": False}
    if ps is None:
        out.update(effect="undetermined", mechanism="undetermined", decided_by=None,
                   text="Undetermined: no ps_ada arm with a usable comparison against the baseline.")
        return out
    rec = res["arms"][ps]
    S = rec.get(f, {}).get("speedup_steps")
    h2h = res.get("head_to_head", {})
    pct = int(round(100 * f))
    parts = []
    # rule 1: effect (restricted crossings of the seed-mean curves at the first evaluation or the
    # horizon in both arms say only "already above" / "not by the horizon": no timing)
    r1 = rec.get(f, {})
    xs = list(r1.get("mean_curve_steps") or [])
    timed = any(r1["first_step"] < x < r1["horizon"] for x in xs) if xs and r1.get("horizon") is not None else True
    if S is None or not math.isfinite(S.get("lo", math.nan)) or not timed:
        lv = rec.get("levels") or {}
        why = rec.get("error", "too few seeds or a degenerate gap")
        if lv.get("degenerate"):  # the baseline did not improve: no level to reach; say what it did instead
            why = (f"the baseline did not improve: held-out start {lv['start']:.3f} -> final {lv['final']:.3f}, "
                   "so there is no gap level to reach")
        elif rec.get(f, {}).get("n_censored_baseline") is not None and "error" not in rec:
            r = rec[f]
            at0 = sum(1 for x in (r.get("base_steps") or []) if x is not None and x == 0)
            u = (S or {}).get("undefined_share", math.nan)
            thr = (S or {}).get("max_undefined", math.nan)
            counts = (f"baseline start {lv.get('start', math.nan):.3f} -> final {lv.get('final', math.nan):.3f}; "
                      f"{r['n_censored_baseline']} baseline and {r['n_censored_method']} {ps} seeds of "
                      f"{len(rec['paired_seeds'])} never reach the level and {at0} baseline seeds start at or above it")
            if not timed:
                why = (f"{counts}; neither arm's seed-mean curve crosses the level between the first evaluation "
                       f"and the horizon (step {r1['horizon']:g}), so the restricted crossings carry no timing")
            elif math.isfinite(u) and math.isfinite(thr) and u > thr:
                why = (f"{counts}; {100 * u:.1f}% of the bootstrap resamples are undefined (a resampled baseline "
                       f"without a gap, or 0/0), more than the {100 * thr:.1f}% a percentile interval tolerates")
            else:
                why = f"{counts}; fewer than 2 paired seeds or no defined resample"
        text = f"Undetermined: {ps} vs {rec['vs']} has no CI for the steps to {pct}% of the gap ({why})."
        A, Q = (rec.get("auc") or {}).get("improvement"), (rec.get("equal_step") or {}).get("improvement")
        if A and A.get("value") is not None and Q and Q.get("value") is not None:
            text += (f" Without a level: AUC {ps} - {rec['vs']} {_ci_text(_pp(A), 1)} pp, at equal steps "
                     f"{_ci_text(_pp(Q), 1)} pp.")
        out.update(effect="undetermined", mechanism="undetermined", decided_by=None, text=text)
        return out
    effect = "faster" if S["lo"] > 1 else "slower" if S["hi"] < 1 else "none"
    out["effect"] = effect
    out["rules"].append(("1 effect", f"{ps} vs {rec['vs']}: {_ci_text(S)}x in steps to {pct}% of the gap -> {effect}"))
    parts.append(f"{ps} reaches {pct}% of {rec['vs']}'s gap {_ci_text(S)}x as fast in steps "
                 f"({len(rec['paired_seeds'])} paired seeds, {S.get('bound', 'exact')})")
    E = h2h.get("extra_rollouts", {}).get(cost)
    R = h2h.get("reroll_noprefix", {}).get("steps")
    H = h2h.get("ps_ada_hard", {}).get("steps")
    LR = h2h.get("baseline_lr2", {}).get("steps")
    D = res.get("density")
    V = res.get("survival")
    goal = (S["value"] >= 2.0 and S["hi"] > 1.9 and S["lo"] > 1.3
            and _above(h2h.get("reroll_noprefix", {}).get(cost), 1.0) and _above(E, 1.0))
    out["goal_met"] = bool(goal)
    if effect != "faster":
        mech, by = "none", rec["vs"]
        parts.append("so there is no speed-up for a mechanism to explain"
                     + ("; PS is slower" if effect == "slower" else ""))
    else:
        mech = by = None
        # rule 2: extra compute
        if E is not None:
            out["rules"].append(("2 extra compute", f"extra_rollouts / PS in {cost} to the level: {_ci_text(E)}"))
            if not _above(E, 1.0):
                mech, by = "extra compute", h2h["extra_rollouts"]["arm"]
                parts.append(f"but extra_rollouts reaches the same level for {_ci_text(E)}x PS's {cost} (not above 1): "
                             "the gain is bought with extra compute")
        else:
            Sc = rec.get(f, {}).get(f"speedup_{cost}")
            out["rules"].append(("2 extra compute", f"no extra_rollouts arm; PS vs baseline in {cost}: {_ci_text(Sc)}"))
            if not _above(Sc, 1.0):
                mech, by = "extra compute", f"{rec['vs']} ({cost}; no extra_rollouts arm)"
                parts.append(f"in {cost} it is {_ci_text(Sc)}x (not above 1) and there is no extra_rollouts arm: "
                             "extra compute is not excluded")
        # rule 3: filter survival
        if mech is None:
            if R is None:
                mech, by = "undetermined", "reroll_noprefix (missing)"
                parts.append("reroll_noprefix is missing, so the prefix cannot be told from re-rolling")
            else:
                out["rules"].append(("3 filter survival", f"reroll_noprefix / PS in steps: {_ci_text(R)}"))
                if not _above(R, 1.0):
                    mech, by = "filter survival", h2h["reroll_noprefix"]["arm"]
                    parts.append(f"re-rolling the same groups without a prefix is as fast ({_ci_text(R)}x, not above 1): "
                                 "the skewed groups' extra draw explains it, not the prefix"
                                 + (f"; kept groups per step +{_ci_text(V)}" if V else ""))
        # rule 4: recovery
        if mech is None:
            if H is not None:
                out["rules"].append(("4 recovery", f"ps_ada_hard / PS in steps: {_ci_text(H)}"))
            if _above(H, 1.0):
                mech, by = "recovery from failure prefixes", h2h["ps_ada_hard"]["arm"]
                parts.append(f"the prefix beats re-rolling ({_ci_text(R)}x) and ps_ada beats ps_ada_hard, which has "
                             f"no failure prefixes ({_ci_text(H)}x): recovery learning from failure prefixes")
        # rule 5: density
        if mech is None:
            out["rules"].append(("5 signal density", f"p(1-p) PS - baseline: {_ci_text(D, 3)}"))
            if _above(D, 0.0):
                mech, by = "signal density", h2h["reroll_noprefix"]["arm"]
                fp = ("ps_ada_hard was not run, so failure prefixes are untested" if H is None else
                      f"failure prefixes add nothing measurable (ps_ada_hard {_ci_text(H)})")
                parts.append(f"the prefix beats re-rolling ({_ci_text(R)}x), {fp}, and the trained groups' p(1-p) "
                             f"rises by {_ci_text(D, 3)}: signal density")
            else:
                mech, by = "prefix, mechanism unresolved", h2h["reroll_noprefix"]["arm"]
                parts.append(f"the prefix beats re-rolling ({_ci_text(R)}x) but neither failure prefixes "
                             f"({_ci_text(H)}) nor p(1-p) ({_ci_text(D, 3)}) separate: mechanism unresolved")
    if LR is not None:
        parts.append(f"for reference, baseline_lr2 / PS in steps {_ci_text(LR)}"
                     + (" (2x lr is faster still)" if LR.get("hi", math.inf) < 1 else ""))
    # context (not part of the rules): every head-to-head and the mechanism measurements
    ctx = [f"{h['arm']}/PS {_ci_text(h.get('steps'))} in steps, {_ci_text(h.get(cost))} in {cost}"
           for c, h in h2h.items() if "error" not in h and c != "baseline_lr2"]
    if D:
        ctx.append(f"p(1-p) of trained groups PS - baseline {_ci_text(D, 3)}")
    if V:
        ctx.append(f"kept groups per step PS - baseline {_ci_text(V, 2)}")
    if ctx:
        parts.append("context: " + "; ".join(ctx))
    out["context"] = ctx
    out.update(mechanism=mech, decided_by=by)
    out["text"] = (f"**{mech}** (decided by `{by}`). " + "; ".join(parts) + ". "
                   + ("The issue's goal is met." if goal else "The issue's goal (>= 2x, CI above 1.3 with upper bound "
                                                               "above 1.9, and beating both controls at matched cost) "
                                                               "is not met."))
    return out


def _cell(d: Mapping[str, Any] | None, nd: int = 2, scale: float = 1.0) -> str:
    """``value [lo, hi]`` plus the censoring mark: `` ≤`` an upper bound (censored method seeds), `` ≥``
    a lower bound (censored baseline seeds); censored seeds in both arms bound the ratio in neither
    direction, so that cell prints as undefined (``stats.censoring_bound``)."""
    if not d or not math.isfinite(d.get("value", math.nan)):
        return "-"
    restricted = str(d.get("estimator", "")).startswith("restricted")
    if d.get("bound") == "both" and not restricted:
        return "undefined (censored both)"
    f = lambda v: "?" if not math.isfinite(v) else f"{scale * v:.{nd}f}"  # noqa: E731
    s = f"{f(d['value'])} [{f(d.get('lo', math.nan))}, {f(d.get('hi', math.nan))}]"
    # a restricted mean is defined whatever the censoring; "both" then only says it bounds the
    # unrestricted speed-up in neither direction
    return s + (" ≤" if d.get("bound") == "upper" else " ≥" if d.get("bound") == "lower"
                else " (restricted; censored both)" if d.get("bound") == "both" else "")


def arms_table(res: Mapping[str, Any], *, cost: str = "tokens") -> str:
    """Markdown: every arm vs its baseline (speed-ups of the seed-mean curves' restricted crossings
    and, per seed, of the restricted mean steps, with paired 95% CIs, level re-estimated per resample;
    as bounds on the unrestricted speed-up ≤ = censored method seeds / curve, ≥ = censored baseline;
    censored in both: a restricted value is still defined, the old metric's is not), the paper's
    ablation beside, and
    the head-to-head of PS against each control."""
    costs = [cost] + sorted({k[len("speedup_"):] for r in res["arms"].values() for f in r.get("fractions", [])
                             for k in r.get(f, {}) if k.startswith("speedup_") and k != "speedup_steps"
                             and not k.endswith("_per_seed")} - {cost})
    lines = [f"| arm | vs | seeds | speed-up to 50% (steps) | to 80% (steps) | to 80% (steps, per seed) | "
             + " | ".join(f"to 80% ({c})" for c in costs) + " | AUC diff (pp) "
             f"| equal-step diff (pp) | old metric | paper steps / speed-up |",
             "|---|---|---|---|---|---|" + "---|" * len(costs) + "---|---|---|---|"]
    blank = " |" * len(costs)
    old = res.get("old_metric", {})
    for name in res["order"]:
        if name not in res["arms"]:
            lines.append(f"| {name} | (reference) | | 1 | 1 | 1 |" + " 1 |" * len(costs) + " 0 | 0 | 1 | "
                         f"{PAPER_ABLATION_STEPS.get(_split(name)[0], '-')} / 1.00 |" if _split(name)[0] == "baseline"
                         else f"| {name} | | | | | |" + blank + " | | | |")
            continue
        r = res["arms"][name]
        m = _split(name)[0]
        paper = (f"{PAPER_ABLATION_STEPS[m]} / {PAPER_ABLATION_SPEEDUP[m]:.2f}" if m in PAPER_ABLATION_STEPS else "-")
        if "error" in r:
            lines.append(f"| {name} | {r['vs']} | {len(r['paired_seeds'])} | {r['error']} | | |" + blank
                         + f" | | | {paper} |")
            continue
        fr = r["fractions"]
        lines.append(f"| {name} | {r['vs']} | {len(r['paired_seeds'])} | {_cell(r[fr[0]]['speedup_steps'])} | "
                     f"{_cell(r[fr[-1]]['speedup_steps'])} | {_cell(r[fr[-1]].get('speedup_steps_per_seed'))} | "
                     + " | ".join(_cell(r[fr[-1]].get(f"speedup_{c}")) for c in costs) + " | "
                     f"{_cell(r.get('auc', {}).get('improvement'), 1, 100)} | "
                     f"{_cell(r.get('equal_step', {}).get('improvement'), 1, 100)} | {_cell(old.get(name))} | {paper} |")
    if res.get("ps"):
        lines += ["", f"Head-to-head at the 80%-gap level, PS = `{res['ps']}` (ratio control / PS: > 1 = PS faster; "
                  "paired seeds):", "", f"| control | seeds | steps | " + " | ".join(costs) + " | censored PS / control |",
                  "|---|---|---|" + "---|" * len(costs) + "---|"]
        if not res["head_to_head"]:
            lines.append("| (none of reroll_noprefix, extra_rollouts, baseline_lr2, ps_ada_hard ran) | | |" + blank + " |")
        for c, h in res["head_to_head"].items():
            if "error" in h:
                lines.append(f"| {h['arm']} | {len(h['paired_seeds'])} | {h['error']} |" + blank + " |")
            else:
                lines.append(f"| {h['arm']} | {len(h['paired_seeds'])} | {_cell(h['steps'])} | "
                             + " | ".join(_cell(h.get(c)) for c in costs)
                             + f" | {h['n_censored_ps']} / {h['n_censored_control']} |")
        for key, label in (("density", "mean p(1-p) of trained groups"), ("survival", "kept groups per step")):
            d = res.get(key)
            if d:
                lines.append(f"\n{label}: PS {d['a_mean']:.3f} vs baseline {d['b_mean']:.3f}, paired difference "
                             f"{_cell(d, 3)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- LM runs

MECHANISM_SERIES = {"density": "pq_trained", "survival": "groups_kept"}


def group_arms(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """{arm: runs}: label ``arm_label(method.name, schedule.kind)``; runs of one label whose method
    configs differ in other fields (``cut_spread``, ``sources``, ``extra_share``, ...) are split, the
    label extended by ``[key=value,...]`` of the fields that differ (never pooled)."""
    lab: dict[str, dict[str, list[Run]]] = {}
    for r in runs:
        mp = {k: v for k, v in r.method_params.items() if k not in ("name", "schedule")}
        lab.setdefault(arm_label(r.method, r.schedule), {}).setdefault(repr(sorted(mp.items())), []).append(r)
    out: dict[str, list[Run]] = {}
    for label, groups in lab.items():
        if len(groups) == 1:
            out[label] = next(iter(groups.values()))
            continue
        params = [g[0].method_params for g in groups.values()]
        differ = sorted({k for p in params for k in p if len({repr(q.get(k)) for q in params}) > 1})
        for g in groups.values():
            out[label + "[" + ",".join(f"{k}={g[0].method_params.get(k)}" for k in differ) + "]"] = g
    return out


def lm_arms(runs: Sequence[Run], *, time_clip: float | None = 5.0) -> tuple[np.ndarray, dict[str, dict[str, Any]]]:
    """Runs of one task variant -> (steps [E], {arm: {"seeds", "y", "cost", "density", "survival", "runs"}}).

    Arms from each run's config (``method.name`` and ``schedule.kind``, via ``Run.method`` and
    ``Run.schedule``); runs without a train line are left out; a seed appearing twice in one arm is an
    error (two runs would claim the same pairing).
    """
    runs = [r for r in runs if r.status != "empty"]
    steps, _ = eval_matrix(runs)
    by = group_arms(runs)
    out = {}
    for arm, rs in by.items():
        rs = sorted(rs, key=lambda r: r.seed)
        seeds = [r.seed for r in rs]
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"arm {arm!r} has two runs of one seed: {[r.name for r in rs]}")
        y = np.full((len(rs), steps.size), np.nan)
        for i, r in enumerate(rs):
            idx = np.searchsorted(steps, r.eval_step)
            y[i, idx] = r.eval_pass
        T = max(r.steps_done for r in rs) + 1
        cost = {"tokens": np.full((len(rs), T), np.nan), "wall": np.full((len(rs), T), np.nan)}
        for i, r in enumerate(rs):
            wall, tok = r.cumulative_cost(clip=time_clip)
            cost["wall"][i, :wall.size], cost["tokens"][i, :tok.size] = wall, tok
        rec: dict[str, Any] = {"seeds": seeds, "y": y, "cost": cost, "runs": [r.name for r in rs]}
        for key, series in MECHANISM_SERIES.items():
            vals = [np.nanmean(r.series[series]) if series in r.series and np.isfinite(r.series[series]).any()
                    else math.nan for r in rs]
            rec[key] = np.asarray(vals, float) if np.isfinite(vals).any() else None
        out[arm] = rec
    return steps, out


def _strip_schedule(task: str, schedule: str) -> str:
    """``arith-late-next_visit`` (a Hydra tag naming the schedule) -> ``arith-late``: the schedules of one
    task are arms of one variant, compared with each other."""
    for sep in ("-", "_"):
        if task.endswith(sep + schedule):
            return task[: -len(schedule) - 1]
    return task


def task_variants(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """{variant: runs}: runs grouped by task (``Run.task``: config task name + tag, a trailing
    ``-<schedule>`` of the tag removed) and, where runs of one task name differ in ``task.params``, by
    those params (label ``task[key=value,...]`` naming the keys that differ), so variants of one task
    are never pooled."""
    by_task: dict[str, list[Run]] = {}
    for r in runs:
        by_task.setdefault(_strip_schedule(r.task, r.schedule), []).append(r)
    out: dict[str, list[Run]] = {}
    for task, rs in sorted(by_task.items()):
        keyed: dict[str, list[Run]] = {}
        for r in rs:
            keyed.setdefault(repr(sorted(r.task_params.items())), []).append(r)
        if len(keyed) == 1:
            out[task] = rs
            continue
        params = [dict(g[0].task_params) for g in keyed.values()]
        differ = sorted({k for p in params for k in p if len({repr(q.get(k)) for q in params}) > 1})
        for g in keyed.values():
            out[f"{task}[" + ",".join(f"{k}={g[0].task_params.get(k)}" for k in differ) + "]"] = g
    return out


def old_metric(by_arm: Mapping[str, Sequence[Run]], *, baseline: str = "baseline", n_boot: int = 2000,
               seed: int = 0) -> dict[str, Any]:
    """The old steps-to-converge speed-up (``stats.analyze_task``, paired, window 3, final level) of every
    arm vs its schedule's baseline: {arm: speed-up dict}; arms whose baseline is missing are left out."""
    from prs.analysis.stats import analyze_task
    out: dict[str, Any] = {}
    groups: dict[str, dict[str, Sequence[Run]]] = {}
    for arm, rs in by_arm.items():
        b = baseline_for(arm, list(by_arm), baseline)
        if b in by_arm:
            groups.setdefault(b, {b: by_arm[b]})[arm] = rs
    for b, g in groups.items():
        try:
            res = analyze_task(dict(g), baseline=b, paired=True, n_boot=n_boot, seed=seed)
        except ValueError:
            continue
        for arm, rec in res["methods"].items():
            if arm != b and "speedup_steps" in rec:
                out[arm] = rec["speedup_steps"]
    return out


def lm_variant(runs: Sequence[Run], *, baseline: str = "baseline", k: int = 3, k_start: int | None = None,
               n_boot: int = 2000, seed: int = 0, time_clip: float | None = 5.0) -> dict[str, Any]:
    """arm_stats + verdict of one task variant's LM runs (arms from their configs)."""
    runs = [r for r in runs if r.status != "empty"]
    steps, arms = lm_arms(runs, time_clip=time_clip)
    by_arm = group_arms(runs)
    if baseline not in arms:
        return {"error": f"no {baseline!r} arm (arms: {sorted(arms)})", "arms_found": sorted(arms)}
    res = arm_stats(steps, arms, baseline=baseline, k=k, k_start=k_start, n_boot=n_boot, seed=seed,
                    old_metric=old_metric(by_arm, baseline=baseline, n_boot=n_boot, seed=seed))
    res["verdict"] = verdict(res, cost="tokens")
    res["steps"] = steps.tolist()
    res["curves"] = {a: {"seeds": v["seeds"], "mean": np.nanmean(v["y"], 0).tolist(), "runs": v["runs"]}
                     for a, v in arms.items()}
    res["status"] = {a: [r.describe() for r in sorted(by_arm[a], key=lambda r: r.seed)] for a in by_arm}
    return res


def k_histogram(runs: Sequence[Run]) -> list[float] | None:
    """Share of groups by k at the first train step over the baseline runs given (None if unrecorded)."""
    hs = [r.k_hist0 for r in runs if r.k_hist0]
    if len({len(h) for h in hs}) > 1:
        raise ValueError(f"runs record k histograms of different group sizes: {sorted({len(h) for h in hs})}")
    if not hs:
        return None
    h = np.sum(hs, axis=0)
    return (h / h.sum()).tolist() if h.sum() > 0 else None


BEGIN, END = "<!-- decisive-experiment:begin -->", "<!-- decisive-experiment:end -->"


def slug(s: str) -> str:
    """``s`` as a file-name stem: characters other than letters, digits, ``_`` and ``-`` become ``_``."""
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in s).strip("_")


def variant_markdown(name: str, res: Mapping[str, Any], *, figures: Sequence[str] = (),
                     k_hist: Sequence[float] | None = None) -> str:
    """One task variant's part of the page: arms table beside the paper's, head-to-head, verdict."""
    lines = [f"### {name}", ""]
    if "error" in res:
        return "\n".join(lines + [f"Not analysed: {res['error']}.", ""])
    partial = {a: sum(not s.startswith("complete") for s in st) for a, st in res.get("status", {}).items()}
    if any(partial.values()):
        lines += ["Partial/failed runs (analysed as far as they got): "
                  + ", ".join(f"{a}: {n}" for a, n in partial.items() if n) + ".", ""]
    if k_hist:
        n = len(k_hist) - 1
        lines += ["Baseline groups by k at step 0: " + ", ".join(f"{k}/{n} {100 * v:.0f}%" for k, v in enumerate(k_hist))
                  + (f" (1/{n} + 2/{n}: {100 * (k_hist[1] + k_hist[2]):.0f}%)" if n >= 2 else "") + ".", ""]
    lines += [arms_table(res, cost="tokens"), "", "**Verdict:** " + res["verdict"]["text"], ""]
    lines += [f"![{name}: {f}]({f})" for f in figures]
    return "\n".join(lines) + "\n"


def section_markdown(parts: Sequence[str], *, commit: str | None, dirty: bool | None, command: str,
                     dirty_files: Sequence[str] = (), k: int = 3, k_start: int | None = None) -> str:
    """The decisive-experiment section of a study page (results/regime/README.md), between BEGIN / END markers."""
    state = ("unknown commit" if commit is None else f"commit `{commit[:10]}`" + (
        f" with uncommitted changes ({', '.join(dirty_files[:5])})" if dirty else " (clean tree)"))
    head = [BEGIN, "## The decisive experiment (issue #16): computed by `experiments.analyze`", "",
            f"Produced at {state} by `{command}`; do not edit by hand (regenerate). Statistics "
            f"(`prs.analysis.gap`, `experiments.studies.decisive`): start / final = mean of the baseline's first {k_start or k} "
            f"/ last {k} evaluations; steps to 50% / 80% of its gap: the crossing of the seed-mean curves, interpolated "
            "between evaluations and restricted to the horizon (the last evaluation all paired seeds reached; not "
            "reached by then counts the horizon); every CI is a paired percentile bootstrap over seeds (same seed = same "
            "warm start and problem stream) with the level re-estimated inside each resample, undefined resamples left "
            "out up to (1 - level)/2 of them; AUC and equal-step differences at the horizon, in percentage points, with "
            "expanded percentile intervals; actual coverage of these intervals by simulation: "
            "[coverage.md](coverage.md); the old metric is "
            "the steps-to-converge speed-up of the first table (window 3, the baseline's final level). The paper's "
            "ablation (" + ", ".join(f"{m} {v}" for m, v in PAPER_ABLATION_STEPS.items()) + " steps to converge; "
            + " / ".join(f"+{v} pp" for v in PAPER_EQUAL_STEP_PP.values()) + " at equal steps, "
            + " / ".join(PAPER_EQUAL_STEP_PP) + ") is beside. The verdict applies the rules in `experiments/studies/decisive.py`'s docstring to "
            "these CIs.", ""]
    return "\n".join(head + list(parts) + [END]) + "\n"


def replace_section(text: str, section: str) -> str:
    """``text`` with the BEGIN..END block replaced by ``section`` (appended when absent)."""
    if BEGIN in text and END in text:
        a, b = text.index(BEGIN), text.index(END) + len(END)
        return text[:a] + section.rstrip("\n") + text[b:]
    if (BEGIN in text) != (END in text):
        raise ValueError(f"the page has only one of the markers {BEGIN!r} / {END!r}; fix it by hand")
    return text.rstrip("\n") + "\n\n" + section
