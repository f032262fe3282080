"""Statistics of training runs: steps to converge, speed-ups with bootstrap CIs, settled controller
rates, equal-step improvement, and the figures.

Reads the run directories written by ``prs.rl.runner.run`` (``metrics.jsonl``, ``summary.json``) and
turns them into numbers comparable to Zhu et al. 2026 (arXiv 2605.05112). All statistics are
numpy functions over explicit arrays; the ``Run`` loader is the only place that touches files.

Definitions (S seeds, E evaluation points, T training steps, K controller buckets):

* **Evaluation step.** ``{"kind": "eval", "step": s}`` is the held-out pass@1 of the parameters
  after ``s`` updates; it is preceded by the train lines ``0 .. s-1``.
* **Smoothing.** A trailing (causal) moving average over evaluation points,
  ``ỹ_e = mean(y_{max(0, e-w+1)} .. y_e)`` with window ``w`` (``window``, default 3; ``w = 1`` = no
  smoothing). Trailing, so the convergence step never uses evaluations from its future; missing
  points (NaN) are skipped in the mean.
* **Seed-mean curve.** ``ȳ_e = mean_s y_{s,e}`` over the seeds that have point ``e`` (partial runs
  contribute to the points they reached), then smoothed.
* **Reference level** ``L`` (per task): the baseline's smoothed seed-mean curve at its last point
  (``ref="final"``, default) or its maximum (``ref="peak"``), computed from the baseline runs that
  completed (all baseline runs if none completed).
* **Steps to converge** of a curve: the first evaluation step ``s_e`` with ``ỹ_e >= L``
  ("baseline's step 300 reached at 170"). Computed (a) per seed, on each run's own smoothed curve,
  and (b) once per method, on the smoothed seed-mean curve (the headline number). A curve that
  never reaches ``L`` is **censored**: steps = ``inf``, reported as ``>= last evaluated step``;
  censored and partial (killed) runs stay in the tables with their status, never dropped. A run
  with no train line at all (``empty``) is listed in the tables but excluded from the statistics.
* **Cost to converge.** Wall-clock ``Σ_{t < s} (time_sample_t + time_replay_t + time_batch_t + time_update_t)``
  (seconds) and generated tokens
  ``Σ_{t < s} tokens_generated_t`` over the train lines before the convergence step ``s``.
  Compilation makes some steps (the first, a first re-roll of a new width) far slower than the
  rest, and in a sweep only the first run of a process pays it; so by default (``time_clip=5``)
  a step time above 5 × the run's median step time counts as the median. ``time_clip=None``
  gives the raw sums.
  If the baseline's smoothed seed-mean starts at or above ``L`` (it never improved), the task is
  flagged ``degenerate`` (every curve converges at step 0; speed-ups 0/0 are NaN).
* **Speed-up** of a method over the baseline: the ratio of means over seeds
  ``mean_s(steps_base) / mean_s(steps_method)`` (likewise for wall-clock and tokens), with a seeded
  percentile bootstrap 95% CI (Efron & Tibshirani 1993, ch. 13). Default **unpaired**: baseline
  seeds and method seeds are resampled independently (runs of different methods share no state
  beyond the warm start, and unpaired uses every seed); ``paired=True`` resamples common seeds
  jointly. A censored seed enters the ratio with its last evaluated step (a lower bound on its
  steps), so censored method seeds make the speed-up an upper bound (``bound="upper"``, ``<=``),
  censored baseline seeds a lower bound (``"lower"``, ``>=``), and censored seeds in both arms
  leave it no bound at all (``"both"``, printed as undefined): ``censoring_bound``. Baseline
  seeds below ``L`` at their last evaluation enter with their run length: with ``ref="final"``
  about half of them are, by construction, and the baseline's steps are then its run length, as
  in the paper's "baseline's step 300". Both censoring counts are reported.
* **CIs** of every statistic here and in ``prs.analysis.gap``: ``prs.analysis.bootstrap.percentile_ci``, which
  leaves undefined resamples (0/0, a resample without a gap) out, reports their share, and gives no
  interval when the share exceeds one tail's mass ((1 - level)/2).
* **Settled re-roll pass rate** of bucket ``k`` in one run: the mean of ``bucket/k/reroll_pass_rate``
  over the last ``settle_frac`` (default 50%) of its train steps, weighted by ``bucket/k/steered``
  (the groups re-rolled / steered with the bucket's prefix that step: the ones the rate averages;
  ``settled_reroll_rates`` for runs that did not log it); steps without re-rolls are skipped. Per method: the mean over
  seeds with a bootstrap CI. The paper reports 0.485/0.489/0.504/0.515 for k = 1, 2, 6, 7 of 8.
* **Equal-step improvement**: ``mean_s y^method_s(s*) - mean_s y^base_s(s*)`` (raw pass@1, in
  probability units) at a fixed evaluation step ``s*`` (default: the baseline's last planned
  step), with a bootstrap CI; seeds without an evaluation at ``s*`` are listed as missing.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from prs.analysis.bootstrap import (  # noqa: F401  (re-exported: the statistics' CIs)
    bootstrap_band, bootstrap_diff_of_means, bootstrap_mean, bootstrap_ratio_of_means, expanded_tail, percentile_ci)
from prs.analysis.runs import Run, group_runs


# ---------------------------------------------------------------------------------------------
# Curves and convergence (pure numpy)


def moving_average(y, *, window: int) -> np.ndarray:
    """Trailing NaN-skipping moving average along the last axis: ỹ_e = mean(y_{e-w+1} .. y_e).

    y [..., E] -> [..., E]; a point whose whole window is NaN stays NaN.
    """
    y = np.asarray(y, float)
    if not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    if y.ndim < 1:
        raise ValueError(f"y must have at least one axis, got shape {y.shape}")
    ok = np.isfinite(y)
    pad = [(0, 0)] * (y.ndim - 1) + [(1, 0)]
    cs = np.pad(np.cumsum(np.where(ok, y, 0.0), axis=-1), pad)   # [..., E+1]
    cn = np.pad(np.cumsum(ok, axis=-1), pad)                      # [..., E+1]
    e = np.arange(y.shape[-1])
    lo = np.maximum(e + 1 - window, 0)
    tot = cs[..., e + 1] - cs[..., lo]
    cnt = cn[..., e + 1] - cn[..., lo]
    return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def eval_matrix(runs: Sequence[Run]) -> tuple[np.ndarray, np.ndarray]:
    """(steps [E], pass [S, E]) on the union of evaluation steps; NaN where a run has no point."""
    steps = np.unique(np.concatenate([r.eval_step for r in runs])) if runs else np.zeros(0, int)
    y = np.full((len(runs), steps.size), np.nan)
    for i, r in enumerate(runs):
        y[i, np.searchsorted(steps, r.eval_step)] = r.eval_pass
    return steps, y


def seed_mean(y) -> np.ndarray:
    """NaN-skipping mean over seeds: y [S, E] -> [E] (NaN where no seed has the point)."""
    y = np.asarray(y, float)
    ok = np.isfinite(y)
    return np.where(ok.any(0), np.where(ok, y, 0.0).sum(0) / np.maximum(ok.sum(0), 1), np.nan)


def reference_level(y, *, window: int, ref: str = "final") -> float:
    """Baseline reference level L from its per-seed curves y [S, E]: smoothed seed-mean, last point or max."""
    if ref not in ("final", "peak"):
        raise ValueError(f"ref must be 'final' or 'peak', got {ref!r}")
    curve = moving_average(seed_mean(y), window=window)
    curve = curve[np.isfinite(curve)]
    if curve.size == 0:
        return math.nan
    return float(curve[-1] if ref == "final" else curve.max())


def first_reach(steps, curve, level) -> tuple[np.ndarray, np.ndarray]:
    """First step at which ``curve >= level``: steps [E], curve [..., E], level [...] or scalar.

    Returns (step [...] float, inf where never reached; censored [...] bool). NaN points never count.
    """
    steps = np.asarray(steps)
    curve = np.asarray(curve, float)
    if steps.ndim != 1 or curve.shape[-1:] != steps.shape:
        raise ValueError(f"steps must be [E] and curve [..., E], got {steps.shape} and {curve.shape}")
    hit = curve >= np.asarray(level, float)[..., None]             # [..., E]
    ever = hit.any(-1)
    if steps.size == 0:
        return np.full(ever.shape, np.inf), np.ones(ever.shape, bool)
    first = np.where(ever, steps[np.argmax(hit, axis=-1)], np.inf)
    return first.astype(float), ~ever


def last_step(steps, y) -> np.ndarray:
    """Last evaluated step of each row of y [S, E] (-1 if none)."""
    ok = np.isfinite(np.asarray(y, float))
    if ok.shape[-1] == 0:
        return np.full(ok.shape[:-1], -1)
    idx = ok.shape[-1] - 1 - np.argmax(ok[..., ::-1], axis=-1)
    return np.where(ok.any(-1), np.asarray(steps)[idx], -1)


def censoring_bound(censored_base, censored_method) -> str:
    """Which way censoring biases a speed-up ``mean(x_base) / mean(x_method)``.

    A censored seed enters with a step below its true steps (its last evaluated step, or the horizon):
    censored *method* seeds shrink the denominator, so the ratio can only overstate the true speed-up
    (``"upper"``: the true value is <= the estimate); censored *baseline* seeds shrink the numerator
    (``"lower"``: true >= estimate); censored seeds in both arms push both ways, so the estimate bounds
    the true speed-up in neither direction (``"both"``: no bound); none: ``"exact"``.
    """
    b, m = bool(np.any(censored_base)), bool(np.any(censored_method))
    return "both" if b and m else "upper" if m else "lower" if b else "exact"


def curves_vs_wallclock(runs: Sequence[Run], *, num: int = 50, clip: float | None = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Held-out pass@1 on a common wall-clock grid: (t [G] s, pass [S, G]) by linear interpolation.

    Each run's evaluation after s updates sits at its cumulative train time before step s; the grid
    spans 0 .. the longest run, NaN beyond a run's own last evaluation.
    """
    xs, ys = [], []
    for r in runs:
        wall, _ = r.cumulative_cost(clip=clip)
        idx = np.minimum(r.eval_step, r.steps_done)
        xs.append(wall[idx] if r.steps_done else np.zeros(r.eval_step.shape))
        ys.append(r.eval_pass)
    tmax = max((float(x[-1]) for x in xs if x.size), default=0.0)
    grid = np.linspace(0.0, tmax, num)
    out = np.full((len(runs), num), np.nan)
    for i, (x, y) in enumerate(zip(xs, ys)):
        if x.size:
            out[i] = np.where(grid <= x[-1] + 1e-9, np.interp(grid, x, y), np.nan)
    return grid, out


# ---------------------------------------------------------------------------------------------
# Per-method statistics


def settled_reroll_rates(run: Run, *, settle_frac: float = 0.5) -> np.ndarray:
    """[K] mean re-rollout pass rate per bucket over the last ``settle_frac`` of the run's train steps,
    each step weighted by the groups its rate averages: ``bucket/k/steered`` (NaN for a bucket with no
    re-roll there). Runs that did not log ``steered``: same_step weights by ``bucket/k/count``
    (max(count, 1)), which there counts the same groups but for sources too short to cut; next_visit
    weights every step with a rate equally, because there ``count`` counts this step's k, not the
    groups steered with the bucket's prefix."""
    if not 0.0 < settle_frac <= 1.0:
        raise ValueError(f"settle_frac must lie in (0, 1], got {settle_frac!r}")
    t0 = int(math.floor(run.steps_done * (1.0 - settle_frac)))
    rate, cnt = run.reroll_rate[t0:], run.count[t0:]         # [T', K]
    st = run.steered[t0:] if run.steered is not None and run.steered.shape == run.reroll_rate.shape \
        else np.full(rate.shape, np.nan)
    fallback = np.ones(rate.shape) if run.schedule == "next_visit" else np.maximum(np.nan_to_num(cnt), 1.0)
    w = np.where(np.isfinite(rate), np.where(np.isfinite(st), st, fallback), 0.0)
    tot = (np.nan_to_num(rate) * w).sum(0)
    return np.where(w.sum(0) > 0, tot / np.maximum(w.sum(0), 1e-12), np.nan)


def per_seed_convergence(runs: Sequence[Run], level: float, *, window: int,
                         clip: float | None = 5.0) -> dict[str, np.ndarray]:
    """Per-seed steps to reach ``level`` on each run's smoothed curve, with costs and censoring.

    Returns arrays [S]: steps (inf if censored), censored, last (last evaluated step),
    steps_bound (steps, or the last step for censored seeds), wall, tokens (to steps_bound).
    """
    steps, y = eval_matrix(runs)
    hit, cens = first_reach(steps, moving_average(y, window=window), level) if runs else (np.zeros(0), np.zeros(0, bool))
    last = last_step(steps, y).astype(float) if runs else np.zeros(0)
    bound = np.where(cens, last, hit)
    cost = np.array([r.cost_at(b, clip=clip) for r, b in zip(runs, bound)], float).reshape(len(runs), 2)
    return {"steps": hit, "censored": cens, "last": last, "steps_bound": bound, "wall": cost[:, 0], "tokens": cost[:, 1]}


def _pair(base: Sequence[Run], meth: Sequence[Run], bx: np.ndarray, mx: np.ndarray):
    common = sorted({r.seed for r in base} & {r.seed for r in meth})
    bi = [next(i for i, r in enumerate(base) if r.seed == s) for s in common]
    mi = [next(i for i, r in enumerate(meth) if r.seed == s) for s in common]
    return bx[bi], mx[mi], common


def analyze_task(by_method: dict[str, list[Run]], *, baseline: str = "baseline", window: int = 3,
                 ref: str = "final", settle_frac: float = 0.5, at_step: int | None = None, paired: bool = False,
                 n_boot: int = 2000, level: float = 0.95, seed: int = 0, time_clip: float | None = 5.0) -> dict[str, Any]:
    """All statistics of one task: {method: {...}} plus the reference level. See the module docstring."""
    if baseline not in by_method:
        raise ValueError(f"baseline method {baseline!r} not among the runs' methods {sorted(by_method)}")
    boot = dict(n_boot=n_boot, level=level, seed=seed)
    all_runs = by_method
    by_method = {m: [r for r in rs if r.steps_done] for m, rs in by_method.items()}  # empty (or failed at once)
    base_runs = by_method[baseline]
    if not base_runs:
        raise ValueError(f"baseline method {baseline!r} has no run with a train line ({len(all_runs[baseline])} empty)")
    ref_runs = [r for r in base_runs if r.complete] or base_runs
    bsteps, by = eval_matrix(ref_runs)
    level_ = reference_level(by, window=window, ref=ref)
    if at_step is None:
        planned = [r.planned_steps for r in ref_runs if r.planned_steps is not None]
        at_step = int(max(planned)) if planned else int(bsteps[-1]) if bsteps.size else 0
    base_conv = per_seed_convergence(base_runs, level_, window=window, clip=time_clip)
    start = moving_average(seed_mean(by), window=window)[:1]
    degenerate = bool(start.size and start[0] >= level_)
    out: dict[str, Any] = {"baseline": baseline, "reference_level": level_, "ref": ref, "window": window,
                           "degenerate": degenerate, "time_clip": time_clip,
                           "settle_frac": settle_frac, "at_step": at_step, "paired": paired, "methods": {}}
    for method, runs in by_method.items():
        if not runs:
            out["methods"][method] = {"seeds": [], "status": [], "n_runs": 0, "n_complete": 0,
                                      "excluded_empty": [r.name for r in all_runs[method]]}
            continue
        steps, y = eval_matrix(runs)
        mean_curve = moving_average(seed_mean(y), window=window)
        mc_step, mc_cens = first_reach(steps, mean_curve, level_)
        conv = base_conv if method == baseline else per_seed_convergence(runs, level_, window=window, clip=time_clip)
        rec: dict[str, Any] = {
            "seeds": [r.seed for r in runs], "status": [r.describe() for r in runs],
            "n_runs": len(runs), "n_complete": sum(r.complete for r in runs),
            "excluded_empty": [r.name for r in all_runs[method] if not r.steps_done],
            "mean_curve_steps": float(mc_step), "mean_curve_censored": bool(mc_cens),
            "mean_curve_last_step": int(steps[np.isfinite(mean_curve)][-1]) if np.isfinite(mean_curve).any() else -1,
            "per_seed": {k: v.tolist() for k, v in conv.items()},
            "n_censored": int(conv["censored"].sum()),
        }
        for key in ("steps_bound", "wall", "tokens"):
            bx, mx = base_conv[key], conv[key]
            if paired:
                bx, mx, common = _pair(base_runs, runs, bx, mx)
                rec["paired_seeds"] = common
            name = {"steps_bound": "speedup_steps", "wall": "speedup_wall", "tokens": "speedup_tokens"}[key]
            rec[name] = (bootstrap_ratio_of_means(bx, mx, paired=paired, **boot) if method != baseline else
                         {"value": 1.0, "lo": 1.0, "hi": 1.0, "n_a": int(bx.size), "n_b": int(mx.size),
                          "paired": paired})  # the reference itself, by definition
            rec[name]["bound"] = (censoring_bound(base_conv["censored"], conv["censored"]) if method != baseline
                                  else "exact")
            rec[name]["n_censored_method"] = int(conv["censored"].sum())
            rec[name]["n_censored_baseline"] = int(base_conv["censored"].sum())
        for key in ("wall", "tokens", "steps_bound"):
            rec[f"{key}_to_converge"] = bootstrap_mean(conv[key], **boot)
        # equal-step improvement
        def at(rs):
            vals = [r.eval_pass[r.eval_step == at_step] for r in rs]
            return np.array([v[0] for v in vals if v.size], float), [r.seed for r, v in zip(rs, vals) if not v.size]
        m_at, m_missing = at(runs)
        b_at, _ = at(base_runs)
        if paired:
            ms = [r.seed for r in runs if (r.eval_step == at_step).any()]
            bs = [r.seed for r in base_runs if (r.eval_step == at_step).any()]
            common = sorted(set(ms) & set(bs))
            m_at = np.array([m_at[ms.index(s)] for s in common]); b_at = np.array([b_at[bs.index(s)] for s in common])
        rec["pass_at_step"] = bootstrap_mean(m_at, **boot)
        rec["equal_step_improvement"] = bootstrap_diff_of_means(m_at, b_at, paired=paired, **boot)
        rec["equal_step_missing_seeds"] = m_missing
        rec["final_pass"] = bootstrap_mean(np.array([r.eval_pass[-1] for r in runs if r.eval_pass.size]), **boot)
        # controller
        ks = runs[0].ks if runs else ()
        settled = np.array([settled_reroll_rates(r, settle_frac=settle_frac) for r in runs if r.ks == ks], float)
        rec["ks"] = list(ks)
        rec["settled_reroll"] = {str(k): bootstrap_mean(settled[:, j][np.isfinite(settled[:, j])], **boot)
                                 for j, k in enumerate(ks)} if settled.size else {}
        out["methods"][method] = rec
    return out


def analyze(runs: Sequence[Run], **kw) -> dict[str, Any]:
    """``analyze_task`` for every task among ``runs`` ({task: ...}); tasks without the baseline are
    reported with an "error" entry, not dropped. Keywords as ``analyze_task``."""
    out = {}
    for task, by_method in group_runs(runs).items():
        try:
            out[task] = analyze_task(by_method, **kw)
        except ValueError as e:
            out[task] = {"error": str(e), "methods": {m: {"seeds": [r.seed for r in rs],
                                                          "status": [r.describe() for r in rs]}
                                                      for m, rs in by_method.items()}}
    return out
