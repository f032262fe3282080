"""Markdown tables of the analysis results (runs, convergence, equal-step, buckets) and JSON export."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from prs.analysis.runs import PAPER_ABLATION_SPEEDUP, PAPER_SETTLED_REROLL, Run


# ---------------------------------------------------------------------------------------------
# Tables


def fmt(x: float, nd: int = 2) -> str:
    """``x`` to ``nd`` decimals for a table cell; None / NaN -> "-", ±inf -> "inf"."""
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else "inf" if math.isinf(x) else f"{x:.{nd}f}"


def fmt_ci(d: dict, nd: int = 2, bound: bool = False) -> str:
    """``value [lo, hi]``; with ``bound`` the censoring mark of ``stats.censoring_bound`` (both arms
    censored: undefined, no direction)."""
    if bound and d.get("bound") == "both":
        return (f"undefined (censored both: {d['n_censored_baseline']} baseline, "
                f"{d['n_censored_method']} method seeds)")
    s = f"{fmt(d['value'], nd)} [{fmt(d['lo'], nd)}, {fmt(d['hi'], nd)}]"
    if bound and d.get("bound") == "upper":
        s += f" (<=, {d['n_censored_method']} censored)"
    elif bound and d.get("bound") == "lower":
        s += f" (>=, {d['n_censored_baseline']} baseline censored)"
    return s


BOUND_NOTE = {"exact": "estimate", "upper": "ceiling (method censored)", "lower": "floor (reference censored)",
              "both": "no bound (both censored)"}


def fmt_ratio(d: dict, nd: int = 2) -> str:
    """A speed-up ``{"value", "lo", "hi", "bound"}`` with its censoring bound in front (``stats.censoring_bound``).

    A method whose seed-mean curve never reaches the level by the horizon is counted there, so the ratio is
    only a ceiling of the speed-up (``bound="upper"``): ``"<= 0.72 [0.67, 0.77]"``, and its interval is
    that ceiling's, not an estimate's; a censored reference makes it a floor (``">= "``); censoring in
    both arms bounds it in neither direction (``"undefined (censored in both arms)"``). Uncensored
    (``"exact"`` or no ``bound`` key): ``fmt_ci``'s ``"value [lo, hi]"``."""
    b = d.get("bound", "exact")
    if b not in BOUND_NOTE:
        raise ValueError(f"bound must be one of {sorted(BOUND_NOTE)}, got {b!r}")
    if b == "both":
        return "undefined (censored in both arms)"
    return {"upper": "<= ", "lower": ">= ", "exact": ""}[b] + fmt_ci(d, nd)


def runs_table(runs: Sequence[Run]) -> str:
    """Markdown table of every run found, with its status (partial/killed runs included)."""
    lines = ["| run | task | method | seed | steps done / planned | evals | status | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r.name} | {r.task} | {r.method} | {r.seed} | {r.steps_done} / "
                     f"{'?' if r.planned_steps is None else r.planned_steps} | {r.eval_step.size} | {r.describe()} | "
                     f"{'; '.join(r.problems)} |")
    return "\n".join(lines)


def convergence_table(task_result: dict[str, Any]) -> str:
    """Markdown: steps/wall/tokens to converge and speed-ups (95% CIs), paper's speed-up beside."""
    t = task_result
    if "error" in t:
        return f"(no analysis: {t['error']})"
    ref = f"reference level {t['reference_level']:.3f} ({t['ref']} of the smoothed baseline seed-mean, window {t['window']})"
    clip = t.get("time_clip")
    ref += "; wall-clock: " + (f"step times above {clip:g}x the run's median counted as the median" if clip else "raw")
    if t.get("degenerate"):
        ref += (" -- DEGENERATE: the baseline never rose above its initial value, every curve 'converges' at step 0"
                " and the speed-ups are undefined")
    lines = [ref, "",
             "| method | runs (complete) | steps, mean curve | steps per seed (censored) | speed-up steps | "
             "speed-up wall-clock | speed-up tokens | censoring bound of the speed-ups | wall-clock to converge (s) | "
             "paper speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for m, r in t["methods"].items():
        if not r["n_runs"]:
            lines.append(f"| {m} | 0 (empty: {', '.join(r['excluded_empty'])}) |" + " - |" * 8)
            continue
        mc = (f">= {r['mean_curve_last_step']} (censored)" if r["mean_curve_censored"] else f"{r['mean_curve_steps']:.0f}")
        ps = ", ".join(f">={b:.0f}" if c else f"{s:.0f}" for s, b, c in
                       zip(r["per_seed"]["steps"], r["per_seed"]["steps_bound"], r["per_seed"]["censored"]))
        lines.append(f"| {m} | {r['n_runs']} ({r['n_complete']}) | {mc} | {ps} ({r['n_censored']}) | "
                     f"{fmt_ci(r['speedup_steps'], bound=True)} | {fmt_ci(r['speedup_wall'], bound=True)} | "
                     f"{fmt_ci(r['speedup_tokens'], bound=True)} | "
                     f"{BOUND_NOTE.get(r['speedup_steps'].get('bound', 'exact'), '-')} | {fmt_ci(r['wall_to_converge'], 1)} | "
                     f"{fmt(PAPER_ABLATION_SPEEDUP.get(m, math.nan))} |")
    return "\n".join(lines)


def equal_step_table(task_result: dict[str, Any]) -> str:
    """Markdown: held-out pass@1 at the fixed step and the improvement over the baseline (pp)."""
    t = task_result
    if "error" in t:
        return f"(no analysis: {t['error']})"
    lines = [f"| method | pass@1 at step {t['at_step']} | improvement over {t['baseline']} (pp) | final pass@1 | missing seeds |",
             "|---|---|---|---|---|"]
    for m, r in t["methods"].items():
        if not r["n_runs"]:
            lines.append(f"| {m} | - | - | - | all runs empty |")
            continue
        d = r["equal_step_improvement"]
        pp = {k: (v * 100 if isinstance(v, float) else v) for k, v in d.items()}
        lines.append(f"| {m} | {fmt_ci(r['pass_at_step'], 3)} | {fmt_ci(pp, 1)} | {fmt_ci(r['final_pass'], 3)} | "
                     f"{', '.join(map(str, r['equal_step_missing_seeds'])) or '-'} |")
    return "\n".join(lines)


def bucket_table(task_result: dict[str, Any]) -> str:
    """Markdown: settled re-rollout pass rate per bucket (95% CI over seeds) next to the paper's."""
    t = task_result
    if "error" in t:
        return f"(no analysis: {t['error']})"
    ks = sorted({int(k) for r in t["methods"].values() for k in r.get("settled_reroll", {})})
    lines = ["| method | " + " | ".join(f"k={k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for m, r in t["methods"].items():
        cells = [fmt_ci(r["settled_reroll"][str(k)], 3) if str(k) in r.get("settled_reroll", {}) else "-" for k in ks]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines.append("| paper (reported) | " + " | ".join(fmt(PAPER_SETTLED_REROLL.get(k, math.nan), 3) for k in ks) + " |")
    return "\n".join(lines)


def to_jsonable(x):
    """Replaces non-finite floats by None and numpy scalars/arrays by Python values (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return to_jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x
