"""Coverage of the speed-up intervals by simulation: plant a known speed-up in
synthetic learning curves with the evaluation noise of the committed runs, run the estimators of
``prs.analysis.gap`` on many simulated studies, and count how often their nominal-95% interval holds
the truth.

A **study** (``Scenario``, S paired seeds, evaluations every ``every`` steps up to the horizon h):

* seed s has a learning time constant ``τ_s = tau · exp(seed_sd · z_s)``, z_s ~ N(0, 1), the same in
  both arms (paired seeds share a warm start and a problem stream);
* baseline curve ``p^b_s(t) = y0 + (y1 - y0)(1 - exp(-t / τ_s))``; method curve
  ``p^m_s(t) = p^b_s(speedup · t)``: the method learns ``speedup`` times as fast in steps, so every
  level is reached after 1/speedup of the baseline's steps, seed by seed (the planted truth);
* each evaluation is ``Binomial(episodes, p(t)) / episodes`` (128 = 64 problems x 2 samples, as the
  committed runs), independently per seed, arm and step; the runs end at the horizon, so a seed that
  has not reached the level by then is censored there.

A **pooled study** (``Mixture``) stacks the units of several such designs (one per warm start: own start
level, gain, τ and noise) and analyses them as one study, as an interval pooled over warm starts is.

**Truths** (``truths``): the planted speed-up; the population level ``L = start + f (final - start)``
with start / final the means of the first / last ``k`` points of the expected seed-mean curve; the
restricted-mean speed-up ``E_s[min(x^b_s, h)] / E_s[min(x^b_s / speedup, h)]`` with x^b_s the
continuous crossing of L (equal to the planted speed-up when no seed is censored); the area and
equal-step differences of the expected curves on the evaluation grid (exact: the binomial noise has
mean zero). Expectations over seeds by quadrature on 4001 normal quantiles.

**Estimators** (95% percentile bootstrap, 2000 resamples unless told):

* ``old``: the fixed-level comparator: the level from the whole sample, each seed's interpolated
  first crossing, a censored seed at its last evaluation, the paired ratio of means and its CI with
  the level held fixed; no interval as soon as one resample is NaN (``_old_ci``);
* ``restricted``: ``gap.restricted_speedup``: restricted means at the horizon, the level re-estimated
  inside every resample, undefined resamples left out (``stats.percentile_ci``);
* ``mean_curve``: the crossing of the seed-mean curves (``gap_compare``'s ``mean_curve``);
* ``auc`` / ``equal_step``: paired differences of the normalised area and of the mean of the last k
  points (``gap_compare``: expanded percentile intervals), and ``auc_plain`` / ``equal_step_plain``:
  the same with the plain percentile interval.

``coverage_study`` returns per estimator the median and mean estimate, the share of studies whose
interval holds the truth (coverage, with its Monte Carlo standard error sqrt(c (1 - c) / n)), the
share without an interval, and the median interval width. ``experiments.coverage`` writes the table
to ``results/coverage/coverage.md``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from statistics import NormalDist

import numpy as np

from prs.analysis.gap import auc, crossing_steps, gap_compare, gap_levels, restricted_speedup
from prs.analysis.bootstrap import bootstrap_diff_of_means, safe_ratio

__all__ = ["Scenario", "Mixture", "SCENARIOS", "simulate_study", "truths", "old_speedup", "estimate_study", "coverage_study",
           "coverage_markdown"]


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One simulated design (module docstring); defaults: the committed regime runs (8 seeds, an
    evaluation every 5 steps to step 80 on 64 x 2 problems)."""

    name: str = "committed"
    speedup: float = 1.9
    seeds: int = 8
    episodes: int = 128
    every: int = 5
    horizon: int = 80
    y0: float = 0.15
    y1: float = 0.6
    tau: float = 25.0
    seed_sd: float = 0.3
    fraction: float = 0.8
    k: int = 3

    @property
    def steps(self) -> np.ndarray:
        return np.arange(0, self.horizon + 1, self.every, dtype=float)


SCENARIOS = (
    Scenario("committed"),
    Scenario("censored", tau=40.0, seed_sd=0.4),       # slower baseline: many seeds censored at the horizon
    Scenario("64 episodes", episodes=64),
)


def _curve(sc: Scenario, t, tau):
    return sc.y0 + (sc.y1 - sc.y0) * (1.0 - np.exp(-np.asarray(t, float) / np.asarray(tau, float)))


@dataclasses.dataclass(frozen=True)
class Mixture:
    """A pooled study over several designs (warm starts): part i contributes ``parts[i].seeds`` paired
    units drawn from its own ``Scenario`` (own start level, gain, τ, spread and noise), all units
    analysed together as one study - the design of an interval pooled over warm starts. The parts share
    the planted speed-up, the evaluation grid, the level fraction and k (refused otherwise). Truths
    (``truths``) are the pooled population's: the expected curves averaged over the parts with weights
    ``seeds_i / seeds``, the level from that averaged curve, crossings per part (a part whose curve never
    reaches the pooled level is censored at the horizon, one that starts above it crosses at 0)."""

    name: str
    parts: tuple[Scenario, ...]

    def __post_init__(self):
        if not self.parts:
            raise ValueError("Mixture.parts: give at least one Scenario")
        shared = ("speedup", "every", "horizon", "fraction", "k")
        for f in shared:
            vals = {getattr(p, f) for p in self.parts}
            if len(vals) > 1:
                raise ValueError(f"Mixture.parts: every part must share {f} (got {sorted(vals)}); shared fields: "
                                 + ", ".join(shared))

    speedup = property(lambda self: self.parts[0].speedup)
    every = property(lambda self: self.parts[0].every)
    horizon = property(lambda self: self.parts[0].horizon)
    fraction = property(lambda self: self.parts[0].fraction)
    k = property(lambda self: self.parts[0].k)
    seeds = property(lambda self: sum(p.seeds for p in self.parts))
    steps = property(lambda self: self.parts[0].steps)


def _parts(sc: Scenario | Mixture) -> tuple[Scenario, ...]:
    return sc.parts if isinstance(sc, Mixture) else (sc,)


def simulate_study(sc: Scenario | Mixture, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One study: (steps [E], y_base [S, E], y_meth [S, E]) with binomial evaluation noise; a ``Mixture``'s
    parts' units stacked in order."""
    t = sc.steps
    yb, ym = [], []
    for p in _parts(sc):
        tau = p.tau * np.exp(p.seed_sd * rng.normal(size=(p.seeds, 1)))          # [S_i, 1]
        pb, pm = _curve(p, t, tau), _curve(p, p.speedup * t, tau)                  # [S_i, E]
        yb.append(rng.binomial(p.episodes, pb) / p.episodes)
        ym.append(rng.binomial(p.episodes, pm) / p.episodes)
    return t, np.concatenate(yb), np.concatenate(ym)


def truths(sc: Scenario | Mixture, *, nodes: int = 4001) -> dict[str, float]:
    """The estimands' true values (module docstring; a ``Mixture``'s: its docstring)."""
    z = np.array([NormalDist().inv_cdf((i + 0.5) / nodes) for i in range(nodes)])  # equal-mass quadrature
    t, h = sc.steps, float(sc.horizon)
    parts = _parts(sc)
    w = np.array([p.seeds for p in parts], float) / sum(p.seeds for p in parts)  # [P] part weights
    taus = [p.tau * np.exp(p.seed_sd * z)[:, None] for p in parts]              # P x [Q, 1]
    pb = [_curve(p, t, tau) for p, tau in zip(parts, taus)]                     # P x [Q, E]
    pm = [_curve(p, p.speedup * t, tau) for p, tau in zip(parts, taus)]
    mb = sum(wi * b.mean(0) for wi, b in zip(w, pb))                            # [E] pooled expected curve
    start, final = mb[: sc.k].mean(), mb[-sc.k:].mean()
    L = start + sc.fraction * (final - start)
    xb = []                                                                     # P x [Q] continuous crossings
    for p, tau in zip(parts, taus):
        u = (L - p.y0) / (p.y1 - p.y0) if p.y1 != p.y0 else (math.inf if L > p.y0 else 0.0)
        x = 0.0 if u <= 0 else (math.inf if u >= 1 else -math.log(1.0 - u))
        xb.append(tau[:, 0] * x if math.isfinite(x) else np.full(nodes, math.inf))
    area = lambda p: (0.5 * (p[:, 1:] + p[:, :-1]) * np.diff(t)).sum(1) / (t[-1] - t[0])  # noqa: E731
    avg = lambda vals: float(sum(wi * v for wi, v in zip(w, vals)))  # noqa: E731  (the pooled population mean)
    return {"speedup": sc.speedup, "level": float(L),
            "restricted": avg([np.minimum(x, h).mean() for x in xb]) / avg([np.minimum(x / sc.speedup, h).mean() for x in xb]),
            "censored_share_base": avg([np.mean(x > h) for x in xb]),
            "censored_share_method": avg([np.mean(x / sc.speedup > h) for x in xb]),
            "auc": avg([(area(m) - area(b)).mean() for b, m in zip(pb, pm)]),
            "equal_step": avg([(m[:, -sc.k:].mean(1) - b[:, -sc.k:].mean(1)).mean() for b, m in zip(pb, pm)])}


def _old_ci(samples: np.ndarray, level: float) -> tuple[float, float]:
    """Percentile interval of ``samples`` at ``level``; NaN (no interval) when a sample is NaN or
    fewer than half are finite: the interval of the ``old`` comparator (module docstring)."""
    finite = samples[np.isfinite(samples)]
    if finite.size < samples.size / 2:
        return math.nan, math.nan
    lo, hi = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def old_speedup(steps, yb, ym, *, fraction: float = 0.8, k: int = 3, n_boot: int = 2000, level: float = 0.95,
                seed: int = 0) -> dict[str, float]:
    """The ``old`` comparator's step speed-up (module docstring): per-seed first crossings of a level
    fixed from the whole sample, a censored seed at the last evaluation, the paired ratio of means."""
    lv = gap_levels(steps, yb, k=k, fractions=(fraction,))
    L = lv["levels"][fraction]
    if lv["degenerate"]:
        return {"value": math.nan, "lo": math.nan, "hi": math.nan}
    last = np.full(yb.shape[0], float(steps[-1]))
    xb, cb = crossing_steps(steps, yb, L)
    xm, cm = crossing_steps(steps, ym, L)
    bb, bm = np.where(cb, last, xb), np.where(cm, last, xm)
    idx = np.random.default_rng(seed).integers(0, bb.size, size=(n_boot, bb.size))
    lo, hi = _old_ci(safe_ratio(bb[idx].mean(1), bm[idx].mean(1)), level)
    return {"value": float(safe_ratio(bb.mean(), bm.mean())), "lo": lo, "hi": hi}


def estimate_study(sc: Scenario | Mixture, steps, yb, ym, *, n_boot: int = 2000, seed: int = 0,
                   level: float = 0.95) -> dict[str, dict[str, float]]:
    """Every estimator of the module docstring on one study, its interval at ``level``:
    {name: {"value", "lo", "hi"}}."""
    f = sc.fraction
    out = {"old": old_speedup(steps, yb, ym, fraction=f, k=sc.k, n_boot=n_boot, seed=seed, level=level)}
    r = restricted_speedup(steps, yb, ym, fraction=f, horizon=float(steps[-1]), k=sc.k, n_boot=n_boot, seed=seed,
                           level=level)
    out["restricted"] = r["steps"]
    for w in (3,):
        out[f"restricted_w{w}"] = restricted_speedup(steps, yb, ym, fraction=f, horizon=float(steps[-1]), k=sc.k,
                                                     window=w, n_boot=n_boot, seed=seed, level=level)["steps"]
    out["restricted_mean_curve"] = restricted_speedup(steps, yb, ym, fraction=f, horizon=float(steps[-1]), k=sc.k,
                                                      n_boot=n_boot, seed=seed, by="mean_curve", level=level)["steps"]
    g = gap_compare(steps, yb, ym, k=sc.k, fractions=(f,), n_boot=n_boot, seed=seed, level=level)
    if f in g and "mean_curve" in g[f]:
        out["mean_curve"] = g[f]["mean_curve"]
    else:
        out["mean_curve"] = {"value": math.nan, "lo": math.nan, "hi": math.nan}
    out["auc"] = g["auc"]["improvement"]
    out["equal_step"] = g["equal_step"]["improvement"]
    h = float(steps[-1])
    plain = {"auc": (auc(steps, yb, horizon=h), auc(steps, ym, horizon=h)),
             "equal_step": (yb[:, -sc.k:].mean(1), ym[:, -sc.k:].mean(1))}
    for key, (xb, xm) in plain.items():
        out[key + "_plain"] = bootstrap_diff_of_means(xm, xb, paired=True, n_boot=n_boot, seed=seed, level=level)
    return {k: {"value": float(v["value"]), "lo": float(v["lo"]), "hi": float(v["hi"])} for k, v in out.items()}


# the truth each estimator is scored against (the first) and, for the speed-ups, the planted one too
TARGETS = {"old": ("speedup",), "restricted": ("restricted", "speedup"), "restricted_w3": ("speedup",),
           "restricted_mean_curve": ("speedup",), "mean_curve": ("speedup",),
           "auc": ("auc",), "auc_plain": ("auc",), "equal_step": ("equal_step",),
           "equal_step_plain": ("equal_step",)}


def coverage_study(sc: Scenario | Mixture, *, studies: int = 400, n_boot: int = 2000, seed: int = 0,
                   level: float = 0.95) -> dict[str, Any]:
    """``studies`` simulated studies of ``sc``: per estimator and target, the median / mean estimate,
    the coverage of its interval at nominal ``level`` (with its Monte Carlo SE), the share without an
    interval and the median width. Deterministic in ``seed``."""
    truth = truths(sc)
    rng = np.random.default_rng([seed, 0xC0FE])
    recs = [estimate_study(sc, *simulate_study(sc, rng), n_boot=n_boot, seed=seed + i, level=level)
            for i in range(studies)]
    out: dict[str, Any] = {"scenario": dataclasses.asdict(sc), "truths": truth, "studies": studies, "n_boot": n_boot,
                           "level": level, "estimators": {}}
    for name, targets in TARGETS.items():
        v = np.array([r[name]["value"] for r in recs])
        lo, hi = np.array([r[name]["lo"] for r in recs]), np.array([r[name]["hi"] for r in recs])
        has = np.isfinite(lo) & np.isfinite(hi) | (np.isfinite(lo) & np.isinf(hi))
        fin = np.isfinite(v)
        for tgt in targets:
            t = truth[tgt]
            cov = float(np.mean(has & (lo <= t) & (t <= hi)))
            out["estimators"][f"{name}:{tgt}"] = {
                "estimator": name, "target": tgt, "truth": t,
                "median": float(np.median(v[fin])) if fin.any() else math.nan,
                "mean": float(np.mean(v[fin])) if fin.any() else math.nan,
                "coverage": cov, "coverage_se": math.sqrt(cov * (1 - cov) / studies),
                "no_interval": float(np.mean(~has)),
                "median_width": float(np.median((hi - lo)[has])) if has.any() else math.nan}
    return out


LABELS = {"old": "old: per-seed crossing, fixed level, censored at last step",
          "restricted": "per-seed restricted mean, level per resample (`speedup_steps_per_seed`)",
          "restricted_w3": "per-seed restricted mean, trailing window 3",
          "restricted_mean_curve": "**new headline** (`speedup_steps`): restricted seed-mean-curve crossing, level per resample",
          "mean_curve": "seed-mean curve crossing (unrestricted)",
          "auc": "new: AUC difference, expanded percentile", "auc_plain": "old: AUC difference, plain percentile",
          "equal_step": "new: equal-step difference, expanded percentile",
          "equal_step_plain": "old: equal-step difference, plain percentile"}


def coverage_markdown(results: Sequence[dict[str, Any]], *, command: str, commit: str | None = None) -> str:
    """The coverage page (results/coverage/coverage.md)."""
    lines = ["# Coverage of the speed-up intervals (simulation)", "",
             f"Produced by `{command}`" + (f" at commit `{commit[:10]}`" if commit else "")
             + "; do not edit by hand. Design and estimators: `prs/analysis/coverage.py`'s docstring. "
             "Each study: paired seeds whose baseline curve is y0 + (y1 - y0)(1 - exp(-t/τ_s)) (τ_s log-normal "
             "across seeds), the method's the same curve at speedup·t (the planted speed-up), each evaluation "
             "binomial over its episodes, runs ending at the horizon (seeds not at the level by then are "
             "censored). Coverage = share of studies whose nominal-95% interval holds the truth (± its Monte "
             "Carlo SE); 'no CI' = share of studies without an interval (counted as not covering).", ""]
    summary = []
    for res in results:
        e = res["estimators"]
        summary.append(f"{res['scenario']['name']}: old {100 * e['old:speedup']['coverage']:.1f}%, headline "
                       f"{100 * e['restricted_mean_curve:speedup']['coverage']:.1f}% (median "
                       f"{e['old:speedup']['median']:.2f} vs {e['restricted_mean_curve:speedup']['median']:.2f}), AUC "
                       f"{100 * e['auc_plain:auc']['coverage']:.1f}% -> {100 * e['auc:auc']['coverage']:.1f}%, equal-step "
                       f"{100 * e['equal_step_plain:equal_step']['coverage']:.1f}% -> "
                       f"{100 * e['equal_step:equal_step']['coverage']:.1f}%")
    lines += ["**Reading.** Coverage of the planted speed-up by the nominal-95% interval, old -> new: "
              + "; ".join(summary) + ". Per-seed first crossings of noisy curves come early, and more so for "
              "the slower baseline (more evaluations near the level), so per-seed ratios read low whatever the "
              "censoring rule; the seed-mean curves average the noise first, and averaging commutes with a time "
              "compression, so their crossing ratio estimates the planted factor itself.", ""]
    for res in results:
        sc, truth = res["scenario"], res["truths"]
        lines += [f"## {sc['name']}: {sc['seeds']} seeds, {sc['episodes']} episodes per evaluation, every {sc['every']} "
                  f"steps to {sc['horizon']}, planted speed-up {sc['speedup']}", "",
                  f"τ = {sc['tau']}, seed spread {sc['seed_sd']} (log sd), y0 = {sc['y0']}, y1 = {sc['y1']}, level = "
                  f"{100 * sc['fraction']:.0f}% of the gap (true level {truth['level']:.3f}); true restricted speed-up "
                  f"{truth['restricted']:.3f} (baseline seeds censored at the horizon: "
                  f"{100 * truth['censored_share_base']:.1f}%); "
                  f"{res['studies']} studies, {res['n_boot']} resamples each.", "",
                  "| estimator | target | truth | median estimate | mean estimate | coverage of nominal 95% | no CI | median CI width |",
                  "|---|---|---|---|---|---|---|---|"]
        for e in res["estimators"].values():
            nd = 4 if e["target"] in ("auc", "equal_step") else 3
            lines.append(f"| {LABELS[e['estimator']]} | {e['target']} | {e['truth']:.{nd}f} | {e['median']:.{nd}f} | "
                         f"{e['mean']:.{nd}f} | {100 * e['coverage']:.1f}% ± {100 * e['coverage_se']:.1f} | "
                         f"{100 * e['no_interval']:.1f}% | {e['median_width']:.{nd}f} |")
        lines.append("")
    return "\n".join(lines) + "\n"
