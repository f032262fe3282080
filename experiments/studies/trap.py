"""The partial-pass trap experiment (issue #18): strategy dynamics of the four arms with paired CIs.

Arms (``arm_of``: the task's ``reward`` and whether the method uses Prefix Sampling): ``fraction``,
``binary``, ``binary_ps``, ``fraction_ps``; each at a target p_A (``task.params.demo_root_cause_accuracy``)
with seeds 0..S-1. At one p_A every arm starts from the same warm start and sees the same problem
stream for the same seed, so arms are compared **paired by seed**. Everything below is numpy over the
run records (``metrics.jsonl``, ``summary.json`` / ``config.json``, ``provenance.jsonl``); the theory's
predictions (``theory.partial_pass``, JAX) are computed only in ``theory_predictions``.

Definitions (S seeds, E evaluation points at steps s_0 = 0 < ... < s_{E-1}, T train steps):

* **Curves over steps** (held-out, ``eval/`` lines, 64 problems x 2 samples in the sweep):
  ``true_resolution`` (share of episodes whose final program is the root-cause fix, labelled by the
  task's independent checker), ``hack`` (share labelled surface patch), ``fraction_reward`` (mean
  fraction-of-tests reward), ``root_attempt`` (share of root-cause attempts), ``p_root``
  (P(root cause | attempt); NaN at a point without attempts). Train lines give ``contrast`` =
  ``groups_mixed / tasks_per_step`` (share of the step's groups with any reward contrast in the
  arm's own reward; with PS it counts the prefixed groups, which is what trains).
* **Which runs count.** Only ``complete`` runs (``prs.analysis.load_run``: summary written, all
  planned steps, final evaluation) enter a statistic; partial, failed or empty runs are listed with
  their status and never averaged in.
* **Paired seed sets.** A comparison of arms a and b at one p_A uses exactly the seeds complete in
  both (``common_seeds``); seeds present in only one are listed, not used. Curves of all arms at
  one p_A (the figures) use the seeds complete in *every* arm present there (the balanced set), and
  are resampled with one seed index per bootstrap draw for all arms (``stats.bootstrap_band`` on
  [A, S, E]). Per-arm scalars are over that arm's own complete seeds (``n`` reported).
* **Bootstrap.** Percentile bootstrap over seeds (``prs.analysis.bootstrap``; seeded; 95% by default);
  a paired difference resamples the seed-wise differences (``bootstrap_diff_of_means(paired=True)``),
  a paired ratio resamples seeds jointly (``bootstrap_ratio_of_means(paired=True)``). NaN CI with < 2 seeds.
* **Warm start** (per p_A): the step-0 evaluation, identical in every arm for one seed; measured
  p_A = ``Σ_s true_resolution_s / Σ_s root_attempt_s`` (pooled over seeds, a ratio of means with a
  paired bootstrap CI), surface share among the two strategies
  q = ``Σ_s hack_s / Σ_s (hack_s + root_attempt_s)``.
* **(a) Drift.** Per seed of an arm: ``Δ_early = y(s_1) - y(s_0)`` and ``Δ = y(s_last) - y(s_0)`` of the
  hack rate; its sign is "up" if the CI lies above 0, "down" if below, else "no clear drift". The
  theory's prediction: break-even p* (``break_even_p_honest``) and the expected GRPO advantage of a
  surface rollout ``E[A | B]`` (``grpo_type_advantages`` with the runs' group size and estimator) at
  the measured (p_A, q); > 0 predicts a drift toward surface patches. Along the trajectory the same
  prediction at each evaluation's measured (p_A, q) of the arm is set beside the measured change of
  the hack rate over the next interval.
* **(b) Stall.** Per seed: mean contrast share over all train steps and over the first / last
  ``window`` steps; the OLS slope of true resolution over the evaluation points (per 10 steps);
  ``Δ`` of true resolution. The theory's contrast probability of a group at the warm start
  (``contrast_probability``, binary and fraction).
* **(c) Escape.** Final true resolution (at the last common evaluation step), its normalised area
  under the curve over [0, last] (``gap.auc``: mean true resolution over training) and their
  paired differences; steps and generated tokens to reach 50% / 80% of the reference arm's gap
  (``gap.gap_compare``: start = step 0, final = mean of the last 2 evaluations, interpolated
  crossings, censored seeds as lower bounds on their steps); generated (and sampled, incl. the agent
  path's discarded rows) tokens per step as a paired ratio to the arm without PS.
"""
from __future__ import annotations

import dataclasses
import json
import math
import pathlib
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from prs.analysis.gap import auc, gap_compare
from prs.analysis.runs import read_jsonl, find_run_dirs, load_run
from prs.analysis.bootstrap import bootstrap_band, bootstrap_diff_of_means, bootstrap_mean, bootstrap_ratio_of_means

__all__ = ["ARMS", "EVAL_METRICS", "TrapRun", "arm_of", "load_trap_run", "load_trap_runs", "trap_cells",
           "common_seeds", "curve_matrix", "paired_curves", "drift", "ols_slope", "paired_diff", "window_mean",
           "analyze_trap", "budget_cuts", "design_gaps", "theory_predictions", "trap_section", "plot_trap_curves", "plot_trap_theory",
           "collect_trap_records"]

ARMS = ("fraction", "binary", "binary_ps", "fraction_ps")
ARM_LABELS = {"fraction": "fraction reward", "binary": "binary reward", "binary_ps": "binary + PS",
              "fraction_ps": "fraction + PS"}
EVAL_METRICS = {"true_resolution": "eval/true_resolution_rate", "hack": "eval/hack_rate",
                "fraction_reward": "eval/mean_fraction_reward", "p_root": "eval/p_root",
                "root_attempt": "eval/root_attempt_rate"}
METRIC_LABELS = {"true_resolution": "held-out true resolution rate", "hack": "held-out hack rate (surface patches)",
                 "fraction_reward": "held-out mean fraction reward", "p_root": "held-out p_root = P(fix | root attempt)",
                 "root_attempt": "held-out root-cause attempt rate",
                 "contrast": "share of groups with contrast (train)"}
PAIRS_C = (("binary_ps", "binary"), ("binary_ps", "fraction"), ("binary", "fraction"), ("fraction_ps", "fraction"))


# ---------------------------------------------------------------------------------------------
# Records


@dataclasses.dataclass(frozen=True)
class TrapRun:
    """One trap run directory as arrays. evals: {metric: [E]} (EVAL_METRICS keys, NaN = null);
    contrast, tokens_generated, tokens_sampled: [T] per train step. settings: what the theory needs
    (group_size, estimator, tasks_per_step, n_surface, n_semantic)."""

    name: str
    path: str
    arm: str
    p_target: float
    seed: int
    status: str
    describe: str
    planned_steps: int | None
    commits: tuple[str, ...]
    dirty: bool | None
    eval_step: np.ndarray
    evals: dict[str, np.ndarray]
    train_step: np.ndarray
    contrast: np.ndarray
    tokens_generated: np.ndarray
    tokens_sampled: np.ndarray
    settings: dict[str, Any]
    problems: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.status == "complete"


def arm_of(config: Mapping[str, Any]) -> str:
    """``fraction`` / ``binary`` + ``_ps`` when the method is not the baseline (its ``mode``)."""
    reward = ((config.get("task") or {}).get("params") or {}).get("reward")
    if reward not in ("fraction", "binary"):
        raise ValueError(f"task.params.reward must be 'fraction' or 'binary', got {reward!r}")
    mode = (config.get("method") or {}).get("mode", (config.get("method") or {}).get("name", "baseline"))
    return reward + ("" if mode == "baseline" else "_ps")


def _config(path: pathlib.Path) -> dict[str, Any]:
    for name in ("summary.json", "config.json"):
        f = path / name
        if f.exists():
            try:
                d = json.loads(f.read_text())
            except json.JSONDecodeError:
                continue
            return d.get("config", {}) if name == "summary.json" else d
    return {}


def _provenance(path: pathlib.Path) -> tuple[tuple[str, ...], bool | None]:
    segs = []
    f = path / "provenance.jsonl"
    if f.exists():
        for line in f.read_text().splitlines():
            try:
                segs.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    if not segs and (path / "summary.json").exists():
        try:
            s = json.loads((path / "summary.json").read_text())
            segs = s.get("provenance_segments") or ([s["provenance"]] if s.get("provenance") else [])
        except json.JSONDecodeError:
            pass
    commits = tuple(sorted({s["commit"] for s in segs if s.get("commit")}))
    dirty = any(bool(s.get("dirty")) for s in segs) if segs else None
    return commits, dirty


def _model_desc(m: Mapping[str, Any]) -> str:
    o = m.get("overrides") or {}
    return (f"decoder (preset {m.get('preset', '?')}" + (f", d_model {o['d_model']}, {o.get('n_layers', '?')} layers"
                                                          if "d_model" in o else "") + ")"
            + (f" from {m['checkpoint']}" if m.get("checkpoint") else ""))


def budget_cuts(result: Mapping[str, Any]) -> list[str]:
    """What the records say was cut (from the runs' configs), in words for the results page."""
    cells = list(result["cells"].values())
    if not cells:
        return []
    st = cells[0]["settings"]
    seeds = sorted({len(v) for c in cells for v in c["seeds"].values()})
    return [f"{st.get('steps')} RL steps per run (the presets' default is 100)",
            f"held-out evaluation every {st.get('eval_every')} steps on {st.get('eval_count')} problems x "
            f"{st.get('eval_samples')} samples (the presets' default 128 x 2), so a single evaluation's rate has a binomial "
            f"standard error up to ~{0.5 / math.sqrt(max(1, (st.get('eval_count') or 1) * (st.get('eval_samples') or 1))):.3f}",
            f"a small {st.get('model')} with a supervised warm start on demonstrations of the toy trap task (6 digit "
            "lines, 7 surface + 3 semantic tests), on a shared CPU, not an LLM",
            f"{st.get('tasks_per_step')} tasks x {st.get('group_size')} rollouts per step over a pool of {st.get('pool_size')} tasks",
            f"{'/'.join(map(str, seeds))} complete seeds per arm and p_A"]


def _nan(x) -> float:
    return math.nan if x is None else float(x)


def load_trap_run(path) -> TrapRun | None:
    """One run directory, or None if it is not a run of task ``trap`` (never raises on a partial run)."""
    path = pathlib.Path(path)
    cfg = _config(path)
    if (cfg.get("task") or {}).get("name") != "trap":
        return None
    base = load_run(path)
    records, problems = read_jsonl(path / "metrics.jsonl")
    train = sorted((r for r in records if r.get("kind") == "train"), key=lambda r: r["step"])
    evals = sorted((r for r in records if r.get("kind") == "eval"), key=lambda r: r["step"])
    algo, params = cfg.get("algo") or {}, (cfg.get("task") or {}).get("params") or {}
    # the nested layout's loss / schedule nodes; a record of the flat layout kept these keys in algo / method
    loss, sched = {**algo, **(cfg.get("loss") or {})}, {**algo, **(cfg.get("method") or {}), **(cfg.get("schedule") or {})}
    b = int(algo.get("tasks_per_step", 0)) or math.nan
    commits, dirty = _provenance(path)
    return TrapRun(
        name=path.name, path=str(path), arm=arm_of(cfg), p_target=float(params.get("demo_root_cause_accuracy", math.nan)),
        seed=int(cfg.get("seed", base.seed)), status=base.status, describe=_describe(base, cfg, len(train)),
        planned_steps=base.planned_steps if base.planned_steps is not None else cfg.get("steps"), commits=commits, dirty=dirty,
        eval_step=np.array([r["step"] for r in evals], int),
        evals={k: np.array([_nan(r.get(key)) for r in evals], float) for k, key in EVAL_METRICS.items()},
        train_step=np.array([r["step"] for r in train], int),
        contrast=np.array([_nan(r.get("groups_mixed")) / b for r in train], float),
        tokens_generated=np.array([_nan(r.get("tokens_generated")) for r in train], float),
        tokens_sampled=np.array([_nan(r.get("tokens_sampled", r.get("tokens_generated"))) for r in train], float),
        settings={"group_size": int(algo.get("group_size", 8)), "estimator": str(loss.get("estimator", "rloo")),
                  "tasks_per_step": algo.get("tasks_per_step"), "n_surface": int(params.get("n_surface", 7)),
                  "n_semantic": int(params.get("n_semantic", 3)), "steps": cfg.get("steps"),
                  "eval_every": (cfg.get("eval") or {}).get("every"), "eval_count": (cfg.get("eval") or {}).get("count"),
                  "eval_samples": (cfg.get("eval") or {}).get("samples"), "pool_size": sched.get("pool_size"),
                  "model": _model_desc(cfg.get("model") or {}), "schedule": sched.get("kind", sched.get("schedule"))},
        problems=tuple(base.problems) + tuple(p for p in problems if p not in base.problems))


def _describe(base, cfg: Mapping[str, Any], done: int) -> str:
    """``Run.describe`` with the planned steps from config.json when summary.json is not written yet
    (a run still in progress reads as partial)."""
    if base.status != "partial":
        return base.describe()
    planned = cfg.get("steps", base.planned_steps)
    return f"partial (in progress or killed): {done}/{'?' if planned is None else planned} steps"


def load_trap_runs(root) -> list[TrapRun]:
    """Every trap run under ``root`` (itself, children, grandchildren), sorted by (p_A, arm, seed)."""
    runs = [r for r in (load_trap_run(p) for p in find_run_dirs(root)) if r is not None]
    return sorted(runs, key=lambda r: (r.p_target, ARMS.index(r.arm) if r.arm in ARMS else 9, r.seed, r.name))


def trap_cells(runs: Sequence[TrapRun]) -> dict[tuple[str, float], dict[int, TrapRun]]:
    """{(arm, p_A): {seed: run}} of the complete runs. Two complete runs of one cell and seed raise."""
    out: dict[tuple[str, float], dict[int, TrapRun]] = {}
    for r in runs:
        if not r.complete:
            continue
        cell = out.setdefault((r.arm, r.p_target), {})
        if r.seed in cell:
            raise ValueError(f"two complete runs for arm {r.arm}, p_A {r.p_target}, seed {r.seed}: "
                             f"{cell[r.seed].path} and {r.path}")
        cell[r.seed] = r
    return out


def common_seeds(*cells: Mapping[int, Any]) -> list[int]:
    """Seeds present in every cell (the pairing rule)."""
    if not cells:
        return []
    s = set(cells[0])
    for c in cells[1:]:
        s &= set(c)
    return sorted(s)


def curve_matrix(runs: Sequence[TrapRun], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps [E] or [T], y [S, E]) on the union of the runs' points; NaN where a run has none.
    ``metric``: an EVAL_METRICS key (evaluation steps) or ``contrast`` / ``tokens_generated`` /
    ``tokens_sampled`` (train steps)."""
    train = metric in ("contrast", "tokens_generated", "tokens_sampled")
    if not train and metric not in EVAL_METRICS:
        raise ValueError(f"metric must be one of {sorted(EVAL_METRICS) + ['contrast', 'tokens_generated', 'tokens_sampled']}, "
                         f"got {metric!r}")
    xs = [r.train_step if train else r.eval_step for r in runs]
    ys = [getattr(r, metric) if train else r.evals[metric] for r in runs]
    steps = np.unique(np.concatenate(xs)) if xs else np.zeros(0, int)
    y = np.full((len(runs), steps.size), np.nan)
    for i, (x, v) in enumerate(zip(xs, ys)):
        y[i, np.searchsorted(steps, x)] = v
    return steps, y


# ---------------------------------------------------------------------------------------------
# Statistics over arrays (pure numpy)


def paired_curves(y, *, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> dict[str, np.ndarray]:
    """Seed means of y [A, S, E] (row s = the same seed in every arm) with paired pointwise bootstrap
    bands: {"mean", "lo", "hi" [A, E], "n" [A, E] seeds with the point}."""
    y = np.asarray(y, float)
    if y.ndim != 3:
        raise ValueError(f"y must be [A, S, E], got shape {y.shape}")
    mean, lo, hi = bootstrap_band(y, n_boot=n_boot, level=level, seed=seed)
    return {"mean": mean, "lo": lo, "hi": hi, "n": np.isfinite(y).sum(1)}


def drift(steps, y, *, early: bool = False) -> np.ndarray:
    """Per-seed change y(s_1) - y(s_0) (early) or y(s_last) - y(s_0): steps [E], y [S, E] -> [S]
    (s_last: the last step every row has; NaN for a row missing an endpoint)."""
    steps = np.asarray(steps)
    y = np.asarray(y, float)
    if y.ndim != 2 or y.shape[1] != steps.size or steps.size < 2:
        raise ValueError(f"steps must be [E >= 2] and y [S, E], got {steps.shape} and {y.shape}")
    common = np.flatnonzero(np.isfinite(y).all(0))
    j = 1 if early else (int(common[-1]) if common.size else steps.size - 1)
    return y[:, j] - y[:, 0]


def ols_slope(steps, y) -> np.ndarray:
    """Least-squares slope of each row of y [S, E] against steps [E] over its finite points (NaN
    with fewer than 2): Σ (s - s̄)(y - ȳ) / Σ (s - s̄)², in y units per step."""
    s = np.asarray(steps, float)[None, :]
    y = np.asarray(y, float)
    ok = np.isfinite(y)
    n = ok.sum(1, keepdims=True)
    sm = np.where(ok, s, 0.0).sum(1, keepdims=True) / np.maximum(n, 1)
    ym = np.where(ok, y, 0.0).sum(1, keepdims=True) / np.maximum(n, 1)
    ds, dy = np.where(ok, s - sm, 0.0), np.where(ok, y - ym, 0.0)
    den = (ds * ds).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n[:, 0] >= 2) & (den > 0), (ds * dy).sum(1) / np.where(den > 0, den, 1.0), np.nan)


def window_mean(y, *, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """NaN-skipping mean of each row of y [S, T] over columns lo..hi-1 -> [S]."""
    y = np.asarray(y, float)[:, lo:hi]
    ok = np.isfinite(y)
    return np.where(ok.any(1), np.where(ok, y, 0.0).sum(1) / np.maximum(ok.sum(1), 1), np.nan)


def paired_diff(xa, xb, seeds: Sequence[int] | None = None, **boot) -> dict[str, Any]:
    """mean(xa - xb) over the seeds finite in both (xa, xb [S], row s = the same seed) with the paired
    bootstrap CI; adds "seeds" (the seeds used) and "dropped" (seeds with a NaN in either)."""
    xa, xb = np.asarray(xa, float), np.asarray(xb, float)
    if xa.shape != xb.shape or xa.ndim != 1:
        raise ValueError(f"paired samples must be [S] of equal length, got {xa.shape} and {xb.shape}")
    seeds = list(range(xa.size)) if seeds is None else list(seeds)
    ok = np.isfinite(xa) & np.isfinite(xb)
    d = bootstrap_diff_of_means(xa[ok], xb[ok], paired=True, **boot)
    d["seeds"] = [s for s, k in zip(seeds, ok) if k]
    d["dropped"] = [s for s, k in zip(seeds, ok) if not k]
    return d


def _sign(d: Mapping[str, Any]) -> str:
    lo, hi = d.get("lo", math.nan), d.get("hi", math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "n/a"
    return "up" if lo > 0 else "down" if hi < 0 else "no clear drift"


def _mean(x, **boot) -> dict[str, Any]:
    x = np.asarray(x, float)
    return bootstrap_mean(x[np.isfinite(x)], **boot)


# ---------------------------------------------------------------------------------------------
# Theory (theory.partial_pass; JAX, imported here only)


def theory_predictions(p_honest: float, q: float, *, group_size: int = 8, estimator: str = "rloo",
                       n_surface: int = 7, n_semantic: int = 3, fail_score: float = 0.5) -> dict[str, float]:
    """The toy's prediction at (p_A, q): E[R|A], E[R|B], break-even, E[A | type] for GRPO with the
    runs' group size and estimator, and P(contrast) per group under both rewards. NaN outside [0, 1]."""
    from theory import partial_pass as pp

    nan = {k: math.nan for k in ("expected_reward_honest", "expected_reward_surface", "adv_surface", "adv_honest",
                                 "adv_honest_success", "adv_honest_fail", "contrast_binary", "contrast_fraction")}
    be = pp.break_even_p_honest(surface_tests=n_surface, semantic_tests=n_semantic, fail_score=fail_score)
    if not (math.isfinite(p_honest) and math.isfinite(q) and 0 <= p_honest <= 1 and 0 <= q <= 1):
        return {**nan, "break_even": be, "p_honest": p_honest, "q": q}
    a = pp.grpo_type_advantages(p_honest, q, group_size=group_size, fail_score=fail_score, surface_tests=n_surface,
                                semantic_tests=n_semantic, estimator=estimator)
    kw = dict(surface_fraction=q, fail_score=fail_score, surface_tests=n_surface, semantic_tests=n_semantic)
    import jax

    with jax.enable_x64(True):  # as grpo_type_advantages: float64
        cb = float(pp.contrast_probability(float(p_honest), group_size, reward="binary", **kw))
        cf = float(pp.contrast_probability(float(p_honest), group_size, reward="fraction", **kw))
    return {"p_honest": p_honest, "q": q, "break_even": be,
            "expected_reward_honest": float(pp.expected_reward_honest(p_honest, fail_score=fail_score)),
            "expected_reward_surface": pp.surface_reward(surface_tests=n_surface, semantic_tests=n_semantic),
            "adv_surface": a.surface, "adv_honest": a.honest_mean, "adv_honest_success": a.honest_success,
            "adv_honest_fail": a.honest_fail,
            "contrast_binary": cb, "contrast_fraction": cf}


# ---------------------------------------------------------------------------------------------
# The analysis


def _warm_start(cells: Mapping[str, Mapping[int, TrapRun]], boot) -> dict[str, Any]:
    """Step-0 evaluation per seed (first arm in ARMS order that has the seed), pooled estimates."""
    first: dict[int, TrapRun] = {}
    for arm in ARMS:
        for s, r in (cells.get(arm) or {}).items():
            first.setdefault(s, r)
    seeds = sorted(first)
    def at0(k):
        return np.array([first[s].evals[k][0] if first[s].eval_step.size and first[s].eval_step[0] == 0 else math.nan
                         for s in seeds], float)
    tr, att, hack = at0("true_resolution"), at0("root_attempt"), at0("hack")
    ok = np.isfinite(tr) & np.isfinite(att) & np.isfinite(hack)
    out = {"seeds": [s for s, k in zip(seeds, ok) if k],
           "p_A": bootstrap_ratio_of_means(tr[ok], att[ok], paired=True, **boot),
           "q": bootstrap_ratio_of_means(hack[ok], (hack + att)[ok], paired=True, **boot),
           "hack": bootstrap_mean(hack[ok], **boot), "root_attempt": bootstrap_mean(att[ok], **boot),
           "true_resolution": bootstrap_mean(tr[ok], **boot)}
    # the step-0 evaluation is the same policy and the same evaluation key in every arm of one seed
    spread = [float(np.nanmax(np.abs(r.evals["hack"][:1] - first[s].evals["hack"][:1])))
              for arm in ARMS for s, r in (cells.get(arm) or {}).items() if r.eval_step.size and first[s].eval_step.size]
    out["max_step0_mismatch"] = max(spread, default=0.0)
    return out


def _cell_stats(arm_runs: Mapping[int, TrapRun], boot, window: int) -> dict[str, Any]:
    """Per-arm scalars over the arm's own complete seeds."""
    rs = [arm_runs[s] for s in sorted(arm_runs)]
    out: dict[str, Any] = {"seeds": sorted(arm_runs), "n": len(rs)}
    if not rs:
        return out
    steps, _ = curve_matrix(rs, "hack")
    for m in EVAL_METRICS:
        _, y = curve_matrix(rs, m)
        out[m] = {"start": _mean(y[:, 0], **boot), "final": _mean(y[:, -1], **boot),
                  "delta_early": _mean(drift(steps, y, early=True), **boot) if steps.size >= 2 else None,
                  "delta": _mean(drift(steps, y), **boot) if steps.size >= 2 else None,
                  "final_step": int(steps[-1])}
    _, y = curve_matrix(rs, "true_resolution")
    out["true_resolution"]["slope_per_10"] = _mean(10 * ols_slope(steps, y), **boot)
    _, hk = curve_matrix(rs, "hack")
    _, att = curve_matrix(rs, "root_attempt")
    other = 1.0 - hk - att  # neither a submitted surface patch nor a root-cause attempt (the two are disjoint)
    out["other"] = {"start": _mean(other[:, 0], **boot), "final": _mean(other[:, -1], **boot)}
    if steps.size >= 2 and steps[-1] > steps[0]:
        out["true_resolution"]["auc"] = _mean(auc(steps, y, horizon=float(steps[-1])), **boot)
    for d in ("hack",):
        out[d]["drift_early"] = _sign(out[d]["delta_early"]) if out[d]["delta_early"] else "n/a"
        out[d]["drift"] = _sign(out[d]["delta"]) if out[d]["delta"] else "n/a"
    _, c = curve_matrix(rs, "contrast")
    out["contrast"] = {"all": _mean(window_mean(c), **boot), "first": _mean(window_mean(c, hi=window), **boot),
                       "last": _mean(window_mean(c, lo=max(c.shape[1] - window, 0)), **boot), "window": window}
    for k in ("tokens_generated", "tokens_sampled"):
        _, t = curve_matrix(rs, k)
        out[k] = {"per_step": _mean(window_mean(t), **boot), "total": _mean(np.nansum(t, 1), **boot)}
    return out


def _pair_stats(ra: Mapping[int, TrapRun], rb: Mapping[int, TrapRun], boot, window: int,
                gap_k: int = 2) -> dict[str, Any]:
    """Paired differences a - b on their common seeds; gap statistics of a against reference b."""
    seeds = common_seeds(ra, rb)
    out: dict[str, Any] = {"seeds": seeds, "n": len(seeds), "only_a": sorted(set(ra) - set(rb)),
                           "only_b": sorted(set(rb) - set(ra))}
    if not seeds:
        return out
    A, B = [ra[s] for s in seeds], [rb[s] for s in seeds]
    steps, y = curve_matrix(A + B, "true_resolution")
    S = len(seeds)
    ya, yb = y[:S], y[S:]
    both = np.isfinite(ya).all(0) & np.isfinite(yb).all(0)
    last = int(np.flatnonzero(both)[-1]) if both.any() else steps.size - 1
    pd = lambda xa, xb: paired_diff(xa, xb, seeds, **boot)  # noqa: E731
    out["at_step"] = int(steps[last]) if steps.size else None
    out["true_resolution_final"] = pd(ya[:, last], yb[:, last])
    if steps.size >= 2 and steps[last] > steps[0]:
        out["true_resolution_auc"] = pd(auc(steps[: last + 1], ya[:, : last + 1], horizon=float(steps[last])),
                                        auc(steps[: last + 1], yb[:, : last + 1], horizon=float(steps[last])))
    out["true_resolution_curve"] = dict(zip(("mean", "lo", "hi"), (v.tolist() for v in bootstrap_band(ya - yb, **_band(boot)))))
    out["steps"] = steps.tolist()
    _, h = curve_matrix(A + B, "hack")
    out["hack_final"] = pd(h[:S, last], h[S:, last])
    out["hack_delta"] = pd(h[:S, last] - h[:S, 0], h[S:, last] - h[S:, 0])
    _, c = curve_matrix(A + B, "contrast")
    out["contrast_all"] = pd(window_mean(c[:S]), window_mean(c[S:]))
    out["contrast_first"] = pd(window_mean(c[:S], hi=window), window_mean(c[S:], hi=window))
    for k in ("tokens_generated", "tokens_sampled"):
        _, t = curve_matrix(A + B, k)
        ta, tb = window_mean(t[:S]), window_mean(t[S:])
        ok = np.isfinite(ta) & np.isfinite(tb)
        out[f"{k}_ratio"] = bootstrap_ratio_of_means(ta[ok], tb[ok], paired=True, **boot)
    # steps / tokens to 50% and 80% of the reference arm's (b's) gap in true resolution
    if both.sum() >= 1 + gap_k:
        sel = slice(0, last + 1)
        cum = lambda rs: np.stack([np.concatenate([[0.0], np.cumsum(np.nan_to_num(r.tokens_generated))]) for r in rs])  # noqa: E731
        try:
            ca, cb = cum(A), cum(B)
            T = min(ca.shape[1], cb.shape[1])
            g = gap_compare(steps[sel], yb[:, sel], ya[:, sel], cost_base={"tokens": cb[:, :T]},
                            cost_meth={"tokens": ca[:, :T]}, k=gap_k, k_start=1, **boot)
            out["gap"] = {"levels": g["levels"], **{str(f): {k: g[f].get(k) for k in
                          ("level", "bound", "n_censored_baseline", "n_censored_method", "speedup_steps",
                           "speedup_tokens", "steps_base", "steps_method")} for f in g["fractions"]}}
        except ValueError as e:
            out["gap"] = {"error": str(e)}
    return out


def _band(boot):
    return {"n_boot": boot["n_boot"], "level": boot["level"], "seed": boot["seed"]}


def analyze_trap(runs: Sequence[TrapRun], *, n_boot: int = 2000, level: float = 0.95, seed: int = 0,
                 window: int = 10, theory: bool | Callable[..., dict] = True) -> dict[str, Any]:
    """Every statistic of the module docstring, per target p_A: {"runs": [...], "cells": {p: {...}}}.

    ``theory``: True computes the predictions with ``theory_predictions`` (JAX), False leaves them
    out, or a callable with its signature (tests). Never raises on a partial sweep: a cell without
    runs is absent, a comparison without common seeds has n = 0.
    """
    boot = dict(n_boot=n_boot, level=level, seed=seed)
    predict = theory_predictions if theory is True else (theory or None)
    cells = trap_cells(runs)
    out: dict[str, Any] = {
        "options": {"n_boot": n_boot, "level": level, "seed": seed, "window": window},
        "runs": [{"name": r.name, "arm": r.arm, "p_target": r.p_target, "seed": r.seed, "status": r.status,
                  "describe": r.describe, "commits": list(r.commits), "dirty": r.dirty, "problems": list(r.problems)}
                 for r in runs],
        "commits": sorted({c for r in runs for c in r.commits}),
        "dirty_runs": [r.name for r in runs if r.dirty],
        "cells": {}}
    for p in sorted({p for (_, p) in cells}):
        by_arm = {a: cells[(a, p)] for a in ARMS if (a, p) in cells}
        present = list(by_arm)
        balanced = common_seeds(*by_arm.values())
        rec: dict[str, Any] = {"p_target": p, "arms": present, "seeds": {a: sorted(by_arm[a]) for a in present},
                               "balanced_seeds": balanced}
        settings = next(iter(next(iter(by_arm.values())).values())).settings
        rec["settings"] = settings
        rec["warm_start"] = ws = _warm_start(by_arm, boot)
        rec["arm"] = {a: _cell_stats(by_arm[a], boot, window) for a in present}
        # curves of every present arm on the balanced seed set, paired bands
        curves: dict[str, Any] = {}
        if balanced:
            for m in (*EVAL_METRICS, "contrast"):
                rs = [by_arm[a][s] for a in present for s in balanced]
                steps, y = curve_matrix(rs, m)
                pc = paired_curves(y.reshape(len(present), len(balanced), -1), **_band(boot))
                curves[m] = {"steps": steps.tolist(),
                             **{a: {k: pc[k][i].tolist() for k in ("mean", "lo", "hi", "n")} for i, a in enumerate(present)}}
        rec["curves"] = curves
        rec["pairs"] = {f"{a}-{b}": _pair_stats(by_arm[a], by_arm[b], boot, window)
                        for a, b in PAIRS_C if a in by_arm and b in by_arm}
        if predict is not None:
            kw = dict(group_size=settings["group_size"], estimator=settings["estimator"],
                      n_surface=settings["n_surface"], n_semantic=settings["n_semantic"])
            pa, q = ws["p_A"], ws["q"]
            th = {"at_measured": predict(pa["value"], q["value"], **kw),
                  "at_measured_lo": predict(pa["lo"], q["value"], **kw) if math.isfinite(pa["lo"]) else None,
                  "at_measured_hi": predict(pa["hi"], q["value"], **kw) if math.isfinite(pa["hi"]) else None,
                  "at_target": predict(p, q["value"], **kw) if math.isfinite(q["value"]) else None}
            # along the trajectory: the prediction at each evaluation's measured (p_A, q) of the arm, next to
            # the measured change of its hack rate over the following interval
            traj = {}
            for a in ("fraction", "fraction_ps", "binary"):
                if a not in by_arm:
                    continue
                rs = [by_arm[a][s] for s in sorted(by_arm[a])]
                steps, tr = curve_matrix(rs, "true_resolution")
                _, att = curve_matrix(rs, "root_attempt")
                _, hk = curve_matrix(rs, "hack")
                rows = []
                for e in range(steps.size - 1):
                    ok = np.isfinite(tr[:, e]) & np.isfinite(att[:, e]) & np.isfinite(hk[:, e])
                    pe = float(tr[ok, e].sum() / att[ok, e].sum()) if att[ok, e].sum() > 0 else math.nan
                    qe = float(hk[ok, e].sum() / (hk[ok, e] + att[ok, e]).sum()) if (hk[ok, e] + att[ok, e]).sum() > 0 else math.nan
                    pr = predict(pe, qe, **kw)
                    dh = _mean(hk[:, e + 1] - hk[:, e], **boot)
                    rows.append({"step": int(steps[e]), "next_step": int(steps[e + 1]), "p_A": pe, "q": qe,
                                 "adv_surface": pr["adv_surface"], "hack_change": dh,
                                 "agree": _agree(pr["adv_surface"], dh)})
                traj[a] = rows
            th["trajectory"] = traj
            rec["theory"] = th
        out["cells"][f"{p:g}"] = rec
    if predict is not None and out["cells"]:
        s0 = next(iter(out["cells"].values()))["settings"]
        kw = dict(group_size=s0["group_size"], estimator=s0["estimator"], n_surface=s0["n_surface"],
                  n_semantic=s0["n_semantic"])
        grid = np.linspace(0.0, 1.0, 41)
        qs = sorted({round(c["warm_start"]["q"]["value"], 2) for c in out["cells"].values()
                     if math.isfinite(c["warm_start"]["q"]["value"])}) or [0.5]
        at = {q: [predict(float(x), q, **kw) for x in grid] for q in qs}
        out["theory_curve"] = {"p_A": grid.tolist(), "q": qs,
                               "adv_surface": {str(q): [t["adv_surface"] for t in at[q]] for q in qs},
                               "contrast_binary": {str(q): [t["contrast_binary"] for t in at[q]] for q in qs},
                               "contrast_fraction": {str(q): [t["contrast_fraction"] for t in at[q]] for q in qs},
                               "reward_gap": [t["expected_reward_surface"] - t["expected_reward_honest"] for t in at[qs[0]]],
                               "break_even": at[qs[0]][0]["break_even"]}
    return out


def _agree(adv: float, change: Mapping[str, Any]) -> str:
    """"yes" if the measured change's CI excludes 0 on the side the predicted sign says, "no" if it
    excludes 0 on the other side, "unclear" if it includes 0."""
    s = _sign(change)
    if s in ("n/a", "no clear drift") or not math.isfinite(adv):
        return "unclear"
    return "yes" if (s == "up") == (adv > 0) else "no"


# ---------------------------------------------------------------------------------------------
# The results-page section


def _f(x, nd: int = 3, sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:+.{nd}f}" if sign else f"{x:.{nd}f}"


def _ci(d: Mapping[str, Any] | None, nd: int = 3, sign: bool = False) -> str:
    if not d:
        return "–"
    s = _f(d.get("value"), nd, sign)
    if math.isfinite(d.get("lo", math.nan)):
        s += f" [{_f(d['lo'], nd, sign)}, {_f(d['hi'], nd, sign)}]"
    return s


def _n(d: Mapping[str, Any] | None) -> str:
    if not d:
        return "0"
    return str(d.get("n", d.get("n_a", len(d.get("seeds", [])))))


DESIGN = {"p": (0.1, 0.3, 0.5), "arms": ARMS, "seeds": 8}  # issue #18's sweep


def design_gaps(result: Mapping[str, Any], design: Mapping[str, Any] = DESIGN) -> list[str]:
    """The cells of ``design`` ({"p", "arms", "seeds"}) with fewer complete seeds than planned, in words."""
    gaps = []
    for p in design["p"]:
        c = result["cells"].get(f"{p:g}")
        for a in design["arms"]:
            n = len(c["seeds"].get(a, [])) if c else 0
            if n < design["seeds"]:
                gaps.append(f"{a} at p_A {p:g}: {n}/{design['seeds']}")
    return gaps


def trap_section(result: Mapping[str, Any], *, command: str = "", commit: str | None = None, dirty: bool | None = None,
                 figures: Mapping[str, str] | None = None, cuts: Sequence[str] = (),
                 design: Mapping[str, Any] | None = DESIGN) -> str:
    """Markdown of the results-page section: provenance, the plain-language answers with numbers and
    CIs, the tables, what was cut. ``figures``: {"p<p>" or "theory": relative image path}; ``design``:
    the planned sweep, whose missing cells are listed (None: not checked)."""
    cells = result["cells"]
    lvl = int(round(100 * result["options"]["level"]))
    figures = dict(figures or {})
    L: list[str] = ["## The partial-pass trap in training (issue #18)", ""]
    runs = result["runs"]
    n_complete = sum(r["status"] == "complete" for r in runs)
    prov = (f"Generated by `{command}`" if command else "Generated by `experiments.analyze --trap`")
    prov += f" at commit `{commit or 'unknown'}`" + (" (**uncommitted code changes**)" if dirty else "" if dirty is None
                                                      else " (analysis code clean)")
    prov += (f" from {len(runs)} run records ({n_complete} complete) made at commit"
             f"{'s' if len(result['commits']) != 1 else ''} {', '.join(f'`{c[:10]}`' for c in result['commits']) or 'unknown'}")
    prov += (f"; runs on a dirty tree: {', '.join(result['dirty_runs'])}." if result["dirty_runs"] else " (clean trees).")
    L += [prov, ""]
    L += [f"Seed means with {lvl}% percentile-bootstrap CIs over seeds ({result['options']['n_boot']} resamples); "
          "differences between arms are **paired by seed** (same warm start, same problem stream) over the seeds "
          "complete in both arms; only complete runs count (definitions: `experiments/studies/trap.py`). "
          "Arms: fraction reward, binary reward, binary + PS, fraction + PS (PS = PS-ada on the next_visit "
          "schedule with cut_spread + sources=all); every arm on the same next_visit pool.", ""]
    if cuts:
        L += ["**What was cut to fit the budget:** " + "; ".join(cuts) + ".", ""]
    gaps = design_gaps(result, design) if design else []
    if gaps:
        planned = len(design["p"]) * len(design["arms"]) * design["seeds"]
        L += [f"**Incomplete sweep: a partial result.** The design is {len(design['arms'])} arms x {len(design['p'])} target "
              f"p_A x {design['seeds']} seeds = {planned} runs; {n_complete} complete runs are analysed here. Complete "
              "seeds / planned: " + "; ".join(gaps) + ". Every number below is over the seeds present (n given).", ""]
    bad0 = {pk: c["warm_start"]["max_step0_mismatch"] for pk, c in cells.items() if c["warm_start"]["max_step0_mismatch"] > 0}
    if bad0:
        L += ["**Warning: the step-0 evaluations differ between arms of one seed** (max |Δ hack rate| "
              + ", ".join(f"{v:.3f} at p_A {k}" for k, v in bad0.items())
              + "): the arms did not start from the same warm start, and the pairing by seed is weaker than assumed.", ""]
    missing = [r for r in runs if r["status"] != "complete"]
    if missing:
        L += ["**Not complete (left out of every statistic):** "
              + ", ".join(f"{r['name']} ({r['describe']})" for r in missing), ""]
    # the answers
    L += ["### Answers", ""]
    L += _answers(cells, lvl)
    # the tables
    L += ["", "### Per arm and target p_A", "",
          "Warm start = step-0 evaluation pooled over seeds (identical in every arm); measured p_A = P(root-cause fix | "
          "root-cause attempt). Start → final = held-out evaluation at step 0 and at the last step; Δ with CI; other = "
          "1 − hack rate − root-cause attempts (episodes that are neither a submitted surface patch nor a root-cause "
          "attempt: unsubmitted, or changing no root-cause line).", ""]
    L += ["| target p_A | arm | seeds | true resolution 0 → final | Δ true resolution | slope /10 steps "
          "| AUC (mean over training) | hack rate 0 → final | Δ hack early (0→10) | Δ hack | mean fraction R 0 → final "
          "| p_root final | root attempts final "
          "| other final | contrast share (all / first 10 / last 10 steps) | generated tokens / step |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pk, c in cells.items():
        for a in c["arms"]:
            s = c["arm"][a]
            tr, hk, fr = s["true_resolution"], s["hack"], s["fraction_reward"]
            L.append(f"| {pk} | {a} | {s['n']} | {_f(tr['start']['value'])} → {_f(tr['final']['value'])} | "
                     f"{_ci(tr['delta'], sign=True)} | {_ci(tr['slope_per_10'], sign=True)} | {_ci(tr.get('auc'))} | "
                     f"{_f(hk['start']['value'])} → {_f(hk['final']['value'])} | {_ci(hk['delta_early'], sign=True)} | "
                     f"{_ci(hk['delta'], sign=True)} | {_f(fr['start']['value'])} → {_f(fr['final']['value'])} | "
                     f"{_ci(s['p_root']['final'])} | {_ci(s['root_attempt']['final'])} | {_ci(s['other']['final'])} | "
                     f"{_f(s['contrast']['all']['value'], 2)} / {_f(s['contrast']['first']['value'], 2)} / "
                     f"{_f(s['contrast']['last']['value'], 2)} | {_f(s['tokens_generated']['per_step']['value'], 0)} |")
    L += ["", "### Paired differences (a − b, same seeds)", "",
          "Final and AUC of the held-out true resolution; steps / generated tokens to reach 50% and 80% of b's gap "
          "(b's start = step 0, b's final = mean of its last 2 evaluations; speed-up = b's / a's crossing of the seed-mean "
          "curves, > 1: a is faster, restricted to the horizon = the last evaluation (not reached by then counts the "
          "horizon; `<=` / `>=`: a's / b's curve did not reach it, so an upper / lower bound on the unrestricted speed-up), "
          "level re-estimated in each resample (`prs.analysis.gap`); then the restricted mean steps of a vs b per seed); "
          "tokens per step a / b (sampled includes the agent path's discarded fresh rows of steered tasks).", ""]
    L += ["| target p_A | a − b | seeds | at step | Δ final true resolution | Δ AUC | Δ final hack rate | Δ contrast share "
          "| speed-up steps to 50% | to 80% | speed-up tokens to 50% | generated tok/step a/b | sampled tok/step a/b |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for pk, c in cells.items():
        for name, d in c["pairs"].items():
            if not d["n"]:
                L.append(f"| {pk} | {name} | 0 (a only: {d['only_a']}, b only: {d['only_b']}) |" + " – |" * 10)
                continue
            g = d.get("gap") or {}
            def sp(f, key="speedup_steps"):
                r = g.get(str(f)) if isinstance(g, dict) else None
                if not r:
                    return "– (" + g.get("error", "no gap") + ")" if isinstance(g, dict) and "error" in g else "–"
                if g["levels"]["degenerate"]:
                    return "– (b has no gap)"
                b = {"upper": " <=", "lower": " >=", "both": " (both censored)"}.get(r[key].get("bound", r["bound"]), "")
                u = r[key].get("undefined_share", math.nan)
                undefined = (math.isfinite(r[key].get("value", math.nan)) and not math.isfinite(r[key].get("lo", math.nan))
                             and math.isfinite(u) and u > r[key].get("max_undefined", math.inf))
                steps = (f"; restricted mean steps {_f(r['steps_method']['value'], 1)} vs {_f(r['steps_base']['value'], 1)}"
                         if key == "speedup_steps" and r.get("steps_method") else "")
                return _ci(r[key], 2) + b + (f" (no CI: {100 * u:.1f}% of resamples undefined)"
                                             if undefined else "") + steps
            L.append(f"| {pk} | {name} | {d['n']} | {d['at_step']} | {_ci(d['true_resolution_final'], sign=True)} | "
                     f"{_ci(d.get('true_resolution_auc'), sign=True)} | {_ci(d['hack_final'], sign=True)} | "
                     f"{_ci(d['contrast_all'], 2, sign=True)} | {sp(0.5)} | {sp(0.8)} | {sp(0.5, 'speedup_tokens')} | "
                     f"{_ci(d['tokens_generated_ratio'], 2)} | {_ci(d['tokens_sampled_ratio'], 2)} |")
    if any("theory" in c for c in cells.values()):
        L += ["", "### The theory beside the measurement", "",
              "`theory.partial_pass` at the warm start's measured p_A (CI from p_A's CI) and surface share q among the two "
              "strategies: E[R | root-cause attempt] vs E[R | surface patch] = 0.7 (break-even p_A = 0.4), the expected "
              "GRPO advantage of a surface rollout (the runs' estimator and group size; > 0 predicts a drift toward surface "
              "patches under the fraction reward) and P(a group has contrast).", ""]
        L += ["| target p_A | measured p_A | q | E[R\\|A] | E[R\\|B] | E[adv \\| surface] | predicted drift "
              "| measured Δ hack early (fraction) | measured Δ hack (fraction) | P(contrast) binary / fraction, theory "
              "| measured contrast binary / fraction, first 10 steps |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
        for pk, c in cells.items():
            if "theory" not in c:
                continue
            t, ws = c["theory"], c["warm_start"]
            m, lo, hi = t["at_measured"], t.get("at_measured_lo") or {}, t.get("at_measured_hi") or {}
            adv = _f(m["adv_surface"], 3, True)
            if lo and hi:
                a_lo, a_hi = sorted([lo["adv_surface"], hi["adv_surface"]])
                adv += f" [{_f(a_lo, 3, True)}, {_f(a_hi, 3, True)}]"
            fa = c["arm"].get("fraction", {})
            cb = c["arm"].get("binary", {}).get("contrast", {}).get("first")
            cf = fa.get("contrast", {}).get("first")
            L.append(f"| {pk} | {_ci(ws['p_A'])} | {_ci(ws['q'], 2)} | {_f(m['expected_reward_honest'])} | "
                     f"{_f(m['expected_reward_surface'])} | {adv} | {_pred(m['adv_surface'])} | "
                     f"{_ci((fa.get('hack') or {}).get('delta_early'), sign=True)} | "
                     f"{_ci((fa.get('hack') or {}).get('delta'), sign=True)} | "
                     f"{_f(m['contrast_binary'], 2)} / {_f(m['contrast_fraction'], 2)} | "
                     f"{_f((cb or {}).get('value'), 2)} / {_f((cf or {}).get('value'), 2)} |")
        rows = [(pk, a, r) for pk, c in cells.items() if "theory" in c for a, rs in c["theory"]["trajectory"].items()
                if a == "fraction" for r in rs]
        if rows:
            agree = sum(r["agree"] == "yes" for _, _, r in rows)
            disagree = sum(r["agree"] == "no" for _, _, r in rows)
            L += ["", f"Along the trajectory (fraction arm, every evaluation interval): the prediction at the interval's "
                  f"start (measured p_A, q) agrees with the sign of the measured hack-rate change in {agree}, contradicts it in "
                  f"{disagree}, and {len(rows) - agree - disagree} intervals show no change distinguishable from 0.", "",
                  "| target p_A | steps | measured p_A | q | E[adv \\| surface] | measured Δ hack | agrees |", "|---|---|---|---|---|---|---|"]
            for pk, _, r in rows:
                L.append(f"| {pk} | {r['step']}→{r['next_step']} | {_f(r['p_A'])} | {_f(r['q'], 2)} | "
                         f"{_f(r['adv_surface'], 3, True)} | {_ci(r['hack_change'], sign=True)} | {r['agree']} |")
    if figures:
        L += ["", "### Figures", ""]
        for k, path in figures.items():
            cap = ("the theory's prediction vs p_A with the measured drift" if k == "theory"
                   else f"target p_A {k[1:]}: the four arms over training (seed mean, {lvl}% paired bootstrap band)")
            L += [f"![{cap}]({path})", ""]
    return "\n".join(L).rstrip() + "\n"


def _pred(adv: float) -> str:
    if not math.isfinite(adv):
        return "–"
    return "toward surface patches" if adv > 0 else "away from surface patches" if adv < 0 else "none"


def _flip_summary(cells: Mapping[str, Any]) -> list[str]:
    """One sentence: the measured drift sign of the fraction arm ordered by measured warm-start p_A,
    against the break-even."""
    pts = sorted((c["warm_start"]["p_A"]["value"], pk, c["arm"]["fraction"]["hack"]["drift"])
                 for pk, c in cells.items() if c["arm"].get("fraction") and math.isfinite(c["warm_start"]["p_A"]["value"]))
    if not pts:
        return []
    be = next((c["theory"]["at_measured"]["break_even"] for c in cells.values() if "theory" in c), 0.4)
    below = [d for x, _, d in pts if x < be]
    above = [d for x, _, d in pts if x >= be]
    seq = ", ".join(f"{d} at measured p_A {x:.2f} (target {pk})" for x, pk, d in pts)
    if below and above:
        flip = ("**yes**: it drifts up below and down above the break-even" if all(d == "up" for d in below)
                and all(d == "down" for d in above) else "**no clean flip at the break-even**")
    else:
        flip = ("not testable yet: every measured warm start lies " + ("below" if below else "above")
                + f" the break-even {be:.2f}")
    return [f"  Fraction-reward hack-rate drift over the run, by measured warm-start p_A: {seq}. Sign flip at "
            f"p_A = {be:.2f}: {flip}.", ""]


def _trajectory_summary(cells: Mapping[str, Any]) -> list[str]:
    """The local test: the prediction at each evaluation's measured (p_A, q) vs the next interval's change."""
    rows = [(pk, r) for pk, c in cells.items() for r in ((c.get("theory") or {}).get("trajectory") or {}).get("fraction", [])]
    if not rows:
        return []
    yes = sum(r["agree"] == "yes" for _, r in rows)
    no = sum(r["agree"] == "no" for _, r in rows)
    per = "; ".join(f"target {pk}: p_A {_f(rs[0]['p_A'], 2)} → {_f(rs[-1]['p_A'], 2)} by step {rs[-1]['step']}"
                    for pk, rs in ((pk, [r for q, r in rows if q == pk]) for pk in cells) if rs)
    return [f"  Locally (the prediction re-evaluated at each evaluation's measured p_A and q of the fraction arm, against the "
            f"hack-rate change over the next interval): {yes} of {len(rows)} intervals agree, {no} contradict, "
            f"{len(rows) - yes - no} show no change distinguishable from 0. The measured p_A itself moves during training "
            f"({per}), so a warm start's p_A alone does not fix the direction.", ""]


def _answers(cells: Mapping[str, Any], lvl: int) -> list[str]:
    """The plain-language answers, written from the numbers (every claim carries its CI and n)."""
    out: list[str] = []
    # (a) drift of the fraction reward
    a_lines = []
    for pk, c in cells.items():
        fa = c["arm"].get("fraction")
        if not fa:
            a_lines.append(f"  - target p_A {pk}: no complete fraction run yet.")
            continue
        hk = fa["hack"]
        th = (c.get("theory") or {}).get("at_measured") or {}
        ws = c["warm_start"]["p_A"]
        pred = _pred(th.get("adv_surface", math.nan))
        pred_txt = (f"theory at the measured p_A {_ci(ws)}: E[adv | surface] = {_f(th.get('adv_surface'), 3, True)}, "
                    f"predicts {pred}" if th else f"measured p_A {_ci(ws)}")
        meas = hk["drift"]
        verdict = ""
        if th and math.isfinite(th.get("adv_surface", math.nan)) and meas in ("up", "down"):
            verdict = (" — **agrees** with the prediction at the warm start" if (meas == "up") == (th["adv_surface"] > 0)
                       else " — **contradicts the prediction at the warm start**")
            early = hk["drift_early"]
            if early != meas:
                verdict += f" (over the first interval: {early})"
        elif th:
            verdict = " — not distinguishable from 0"
        a_lines.append(f"  - target p_A {pk} ({pred_txt}): hack rate {_f(hk['start']['value'])} → {_f(hk['final']['value'])} "
                       f"(Δ {_ci(hk['delta'], sign=True)}, first 10 steps {_ci(hk['delta_early'], sign=True)}, "
                       f"n = {fa['n']}): drift **{meas}**{verdict}.")
    out += ["**(a) Does the fraction reward drift to surface patches below the break-even p_A = 0.4 and not above?**", ""]
    out += _flip_summary(cells) + a_lines + [""] + _trajectory_summary(cells)
    # (b) binary stall
    b_lines = []
    for pk, c in cells.items():
        b = c["arm"].get("binary")
        if not b:
            b_lines.append(f"  - target p_A {pk}: no complete binary run yet.")
            continue
        tr = b["true_resolution"]
        d = c["pairs"].get("binary-fraction", {})
        th = (c.get("theory") or {}).get("at_measured") or {}
        stall = ("rises" if math.isfinite(tr["delta"]["lo"]) and tr["delta"]["lo"] > 0 else
                 "falls" if math.isfinite(tr["delta"]["hi"]) and tr["delta"]["hi"] < 0 else
                 "no rise distinguishable from 0 (stalls)" if math.isfinite(tr["delta"]["lo"]) else "n/a (< 2 seeds)")
        b_lines.append(f"  - target p_A {pk}: contrast share {_ci(b['contrast']['first'], 2)} in the first "
                       f"{b['contrast']['window']} steps, {_ci(b['contrast']['all'], 2)} over the run"
                       + (f" (theory at the warm start: {_f(th.get('contrast_binary'), 2)})" if th else "")
                       + (f"; vs fraction (paired, n = {d['n']}): {_ci(d.get('contrast_all'), 2, True)}" if d.get("n") else "")
                       + f". True resolution {_f(tr['start']['value'])} → {_f(tr['final']['value'])} "
                       f"(Δ {_ci(tr['delta'], sign=True)}, slope {_ci(tr['slope_per_10'], sign=True)} per 10 steps, "
                       f"n = {b['n']}): **{stall}**.")
    out += ["**(b) Does the binary reward stall (no contrast, no progress)?**", ""] + b_lines + [""]
    # (c) binary + PS
    c_lines = []
    for pk, c in cells.items():
        parts = []
        for other in ("binary", "fraction"):
            d = c["pairs"].get(f"binary_ps-{other}")
            if not d or not d["n"]:
                continue
            f = d["true_resolution_final"]
            word = ("higher" if math.isfinite(f["lo"]) and f["lo"] > 0 else "lower" if math.isfinite(f["hi"]) and f["hi"] < 0
                    else "not distinguishable")
            g = (d.get("gap") or {}).get("0.5")
            bound = {"upper": " (an upper bound: censored binary + PS seeds)", "lower": f" (a lower bound: censored {other} seeds)",
                     "both": " (censored seeds in both arms)"}.get(g["speedup_steps"].get("bound", g["bound"]), "") if g else ""
            sp = (f", steps to 50% of {other}'s gap: speed-up {_ci(g['speedup_steps'], 2)}{bound}, "
                  f"in generated tokens {_ci(g['speedup_tokens'], 2)}"
                  if g and not d["gap"]["levels"]["degenerate"] else f", {other} has no gap to measure steps against"
                  if g else "")
            parts.append(f"vs {other} (n = {d['n']}): final true resolution {_ci(f, sign=True)} (**{word}**), "
                         f"AUC {_ci(d.get('true_resolution_auc'), sign=True)}{sp}; generated tokens per step "
                         f"{_ci(d['tokens_generated_ratio'], 2)}x, sampled {_ci(d['tokens_sampled_ratio'], 2)}x")
        bp = c["arm"].get("binary_ps")
        if not bp:
            c_lines.append(f"  - target p_A {pk}: no complete binary + PS run yet.")
            continue
        c_lines.append(f"  - target p_A {pk}: binary + PS ends at true resolution {_ci(bp['true_resolution']['final'])} "
                       f"(n = {bp['n']}; hack rate {_f(bp['hack']['final']['value'])}, root-cause attempts "
                       f"{_f(bp['root_attempt']['final']['value'])}, other {_f(bp['other']['final']['value'])}); "
                       + ("; ".join(parts) if parts else "no paired comparison yet") + ".")
    out += ["**(c) Does binary + PS reach a higher true resolution than fraction and binary, and at what cost?**", ""]
    out += c_lines
    return out


# ---------------------------------------------------------------------------------------------
# Figures (matplotlib; the backend is the caller's choice)

_COLORS = {"fraction": "tab:red", "binary": "tab:blue", "binary_ps": "tab:green", "fraction_ps": "tab:orange"}


def plot_trap_curves(result: Mapping[str, Any], p: str, *, smooth: int = 5):
    """The four arms at target p_A ``p`` over training: six panels (true resolution, hack rate, mean
    fraction reward, contrast share (train, trailing mean over ``smooth`` steps), p_root, root-cause
    attempts), seed means on the balanced seed set with paired bootstrap bands."""
    import matplotlib.pyplot as plt

    from prs.analysis.stats import moving_average

    c = result["cells"][p]
    lvl = int(round(100 * result["options"]["level"]))
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    panels = ("true_resolution", "hack", "fraction_reward", "contrast", "p_root", "root_attempt")
    for ax, m in zip(axes.ravel(), panels):
        cur = c["curves"].get(m)
        if not cur:
            ax.text(0.5, 0.5, "no arm with complete seeds in common", ha="center", transform=ax.transAxes)
            continue
        x = np.asarray(cur["steps"], float)
        for a in c["arms"]:
            mean, lo, hi = (np.asarray(cur[a][k], float) for k in ("mean", "lo", "hi"))
            if m == "contrast":
                mean, lo, hi = (moving_average(v, window=smooth) for v in (mean, lo, hi))
            ax.plot(x, mean, ("--" if a.endswith("_ps") else "-") + ("" if m == "contrast" else ("s" if a.endswith("_ps") else "o")),
                    ms=3, color=_COLORS.get(a), label=ARM_LABELS.get(a, a))
            ax.fill_between(x, lo, hi, color=_COLORS.get(a), alpha=0.15)
        if m == "p_root":
            ax.axhline(0.4, color="k", ls="--", lw=0.8, label="break-even p_A = 0.4")
        ax.set(xlabel="training step (updates)", ylabel=METRIC_LABELS[m], ylim=(-0.02, 1.02),
               title=METRIC_LABELS[m] + (f" (trailing mean, {smooth} steps)" if m == "contrast" else ""))
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    axes[1, 1].legend(fontsize=8)
    ws = c["warm_start"]["p_A"]
    fig.suptitle(f"Partial-pass trap, target p_A {p} (warm start: measured p_A {_ci(ws)})\nseed mean ± {lvl}% paired "
                 f"bootstrap band over the {len(c['balanced_seeds'])} seeds complete in every arm shown "
                 f"({', '.join(map(str, c['balanced_seeds']))})")
    fig.tight_layout()
    return fig


def plot_trap_theory(result: Mapping[str, Any]):
    """Four panels. (1) The theory's expected GRPO advantage of a surface rollout vs p_A (at the measured
    surface shares q) and the toy's reward gap E[R|B] - E[R|A], break-even line, the measured warm
    starts marked. (2) Measured change of the hack rate (fraction arm: first interval and whole run;
    binary arm as control) vs measured warm-start p_A, with CIs. (3) Along the trajectory, the
    prediction at each evaluation vs the measured hack-rate change over the next interval (fraction
    arms). (4) P(a group has contrast) vs p_A under both rewards, with each arm's measured contrast
    share over its first train steps."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9.5))
    ax = axes.ravel()
    tc = result.get("theory_curve")
    cells = result["cells"]
    if tc:
        x = np.asarray(tc["p_A"])
        for q, v in tc["adv_surface"].items():
            ax[0].plot(x, v, "-", color="0.3", lw=1 + tc["q"].index(float(q)), label=f"E[adv | surface patch], GRPO, q = {q}")
        ax[0].plot(x, tc["reward_gap"], "k:", label="E[R|surface] − E[R|root-cause attempt] (toy)")
        for a in ax[:2]:
            a.axvline(tc["break_even"], color="k", ls="--", lw=0.8, label=f"break-even p_A = {tc['break_even']:.1f}")
    for pk, c in cells.items():
        th = (c.get("theory") or {}).get("at_measured")
        ws = c["warm_start"]["p_A"]
        if th and math.isfinite(th.get("adv_surface", math.nan)):
            ax[0].errorbar([ws["value"]], [th["adv_surface"]], xerr=_xerr(ws), fmt="D", ms=6, mec="k",
                           color=f"C{list(cells).index(pk)}", label=f"measured warm start, target p_A {pk}")
    ax[0].axhline(0, color="k", lw=0.6)
    ax[0].set(xlabel="p_A = P(root-cause fix | attempt)", ylabel="predicted push on surface patches",
              title="theory: > 0 = drift toward surface patches (fraction reward)")
    for arm, key, mk, off in (("fraction", "delta_early", "o", -0.006), ("fraction", "delta", "s", 0.0),
                              ("binary", "delta", "^", 0.006)):
        xs, ys, xe, ye = [], [], [], []
        for pk, c in cells.items():
            s = c["arm"].get(arm)
            d = s and s["hack"].get(key)
            if not d:
                continue
            ws = c["warm_start"]["p_A"]
            xs.append(ws["value"] + off)
            ys.append(d["value"])
            xe.append(_xerr(ws)[:, 0] if _xerr(ws) is not None else [0, 0])
            ye.append([d["value"] - d["lo"], d["hi"] - d["value"]] if math.isfinite(d["lo"]) else [0, 0])
        if xs:
            ax[1].errorbar(xs, ys, xerr=np.array(xe).T, yerr=np.array(ye).T, fmt=mk, capsize=3, color=_COLORS[arm],
                           alpha=1.0 if arm == "fraction" else 0.6, mfc="white" if key == "delta_early" else _COLORS[arm],
                           label=f"{ARM_LABELS[arm]}: Δ hack, " + ("first 10 steps" if key == "delta_early" else "whole run"))
    ax[1].axhline(0, color="k", lw=0.6)
    ax[1].set(xlabel="measured warm-start p_A (CI)", ylabel="measured change of the held-out hack rate",
              title="measured: > 0 = drifted toward surface patches", xlim=(0, 1))
    ax[0].set_xlim(0, 1)
    pcol = {pk: f"C{i}" for i, pk in enumerate(cells)}
    for pk, c in cells.items():
        for arm, rows in ((c.get("theory") or {}).get("trajectory") or {}).items():
            if arm not in ("fraction", "fraction_ps") or not rows:
                continue
            xs = [r["adv_surface"] for r in rows]
            ys = [r["hack_change"]["value"] for r in rows]
            ye = np.array([[r["hack_change"]["value"] - r["hack_change"]["lo"], r["hack_change"]["hi"] - r["hack_change"]["value"]]
                           if math.isfinite(r["hack_change"]["lo"]) else [0, 0] for r in rows]).T
            ax[2].errorbar(xs, ys, yerr=ye, fmt="o" if arm == "fraction" else "x", capsize=2, alpha=0.8, color=pcol[pk],
                           label=f"{ARM_LABELS[arm]}, target p_A {pk}")
    ax[2].axhline(0, color="k", lw=0.6)
    ax[2].axvline(0, color="k", lw=0.6)
    ax[2].set(xlabel="predicted E[adv | surface] at the interval's start (measured p_A, q)",
              ylabel="measured Δ hack rate over the next 10 steps",
              title="along training: agreement = the ++ and −− quadrants")
    # the signal: P(a group has contrast) at the warm start, theory vs measured (first `window` train steps)
    if tc:
        for i, q in enumerate(tc["q"]):
            ls = "-" if i == 0 else ":"
            ax[3].plot(x, tc["contrast_binary"][str(q)], ls, color=_COLORS["binary"], label=f"theory, binary reward, q = {q}")
            ax[3].plot(x, tc["contrast_fraction"][str(q)], ls, color=_COLORS["fraction"], label=f"theory, fraction reward, q = {q}")
        ax[3].axvline(tc["break_even"], color="k", ls="--", lw=0.8)
    for arm in ("binary", "fraction", "binary_ps", "fraction_ps"):
        xs, ys, ye = [], [], []
        for pk, c in cells.items():
            s = c["arm"].get(arm)
            if not s:
                continue
            d = s["contrast"]["first"]
            xs.append(c["warm_start"]["p_A"]["value"])
            ys.append(d["value"])
            ye.append([d["value"] - d["lo"], d["hi"] - d["value"]] if math.isfinite(d["lo"]) else [0, 0])
        if xs:
            w = next(iter(cells.values()))["arm"][arm]["contrast"]["window"] if arm in next(iter(cells.values()))["arm"] else ""
            ax[3].errorbar(xs, ys, yerr=np.array(ye).T, fmt="o" if arm in ("binary", "fraction") else "x", capsize=3,
                           color=_COLORS[arm], label=f"measured, {ARM_LABELS[arm]}, first {w} steps")
    ax[3].set(xlabel="p_A (measured at the warm start for the points)", ylabel="share of groups with contrast",
              title="signal: P(group of G has contrast), theory vs measured", xlim=(0, 1), ylim=(-0.02, 1.02))
    for a in ax:
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.suptitle("The partial-pass trap: theory.partial_pass's prediction next to the measured dynamics")
    fig.tight_layout()
    return fig


def _xerr(d: Mapping[str, Any]):
    if not math.isfinite(d.get("lo", math.nan)):
        return None
    return np.array([[d["value"] - d["lo"]], [d["hi"] - d["value"]]])


# ---------------------------------------------------------------------------------------------
# Committing the records


def collect_trap_records(src, dst, *, complete_only: bool = True) -> list[pathlib.Path]:
    """``prs.analysis.runs.copy_run_records`` for each trap run under ``src`` (complete ones by default) into
    ``dst/<run name>/`` (``load_trap_run`` reads the gzipped metrics). Returns the directories written."""
    from prs.analysis.runs import copy_run_records
    return [copy_run_records(r.path, pathlib.Path(dst) / r.name) for r in load_trap_runs(src)
            if r.complete or not complete_only]
