"""Gap statistics that do not hinge on one point of the baseline's curve.

The "steps to converge" of ``prs.analysis.stats`` asks when a curve first reaches the baseline's
*final* smoothed level, which can rest on one late jump of the baseline. The statistics here use the
baseline's whole gap instead and pair every comparison by seed (same seed = same warm start and
problem stream, so the per-seed difference cancels the warm-start and problem-stream noise). All
functions are pure numpy over explicit arrays; ``gap_task`` is the only one that reads ``Run``
objects.

Definitions (S paired seeds, E evaluation points at steps s_0 < ... < s_{E-1}, y [S, E] held-out
pass@1, NaN = no point):

* **Start and final level of the baseline.** On the baseline's seed-mean curve ȳ_e (``seed_mean``),
  restricted to its finite points: ``start = mean(ȳ_0 .. ȳ_{k-1})`` and
  ``final = mean(ȳ_{E'-k} .. ȳ_{E'-1})`` (the first / last ``k`` points, default k = 3), so neither
  rests on one evaluation (``k_start`` points for the start if given; with k > 1 the start includes the first k-1 evaluations' progress, so
  the levels sit slightly higher than from step 0 alone: a documented, seed-independent shift).
  ``gap = final - start``; a gap <= 0 (the baseline never improved) makes
  every level statistic undefined (``degenerate``, NaN values), never a silent 0.
* **Gap level** for a fraction f (default 0.5 and 0.8): ``L_f = start + f * gap``.
* **Steps to L_f** of one curve: the first crossing, linearly interpolated between the evaluation
  points around it: with e the first point where y_e >= L_f,
  ``x = s_{e-1} + (L_f - y_{e-1}) / (y_e - y_{e-1}) * (s_e - s_{e-1})`` (x = s_0 if e = 0; x = s_e if
  the point before is missing). Interpolation keeps the statistic from moving in steps of the
  evaluation interval. On a concave curve the chord lies below it, so the interpolated crossing is a
  little late, the more so the fewer evaluation intervals lie before it. Optional trailing smoothing
  of each curve (``window``; default 1 = raw).
* **Horizon and censoring (restricted mean).** The horizon h is the last evaluation step that every
  paired seed of both arms reached (``common_horizon``; stated in every record). A seed's steps to
  L_f are ``min(x, h)``: a seed that has not crossed by h is censored and counted at h
  (``restricted_steps``), so every arm's mean is the *restricted* mean steps to L_f over [s_0, h]
  (Royston & Parmar 2013), a well-defined quantity whatever the censoring, and the same h for all
  seeds (a run that went on longer is not credited with a crossing after h). As a bound on the
  unrestricted speed-up, censored *method* seeds make it an upper bound, censored *baseline* seeds a
  lower bound, both no bound (``bound``: "exact", "upper", "lower", "both"; ``stats.censoring_bound``);
  both counts are reported.
* **Generated tokens and wall-clock to L_f**: the seed's cumulative cost before train step t,
  c [S, T+1] (``Run.cumulative_cost``), linearly interpolated at the restricted crossing step.
* **Speed-up** at L_f (``restricted_speedup``): ``mean_s(x^base_s) / mean_s(x^method_s)`` of the
  restricted steps (or costs), with a **paired** percentile bootstrap CI (one resample index for both
  methods) in which the **level is re-estimated inside every resample** from the resampled baseline
  (start*, final*, L_f*), so the CI carries the uncertainty of the level too; a resample whose
  baseline has no gap, or 0/0, is undefined and left out (``stats.percentile_ci``: its share is
  reported, no interval when it exceeds (1 - level)/2). A second, smoother estimate ``mean_curve``: the
  crossing of the seed-mean curves, bootstrapped the same way. ``experiments.coverage`` measures
  the actual coverage of these intervals on synthetic curves with a planted speed-up.
* **Area under the learning curve** (normalised): ``AUC = (1 / (h - s_0)) ∫_{s_0}^{h} y(s) ds`` by the
  trapezoid rule on the evaluation points, i.e. the mean pass@1 over the horizon h (default the
  last evaluation step that every paired seed of both methods reached); seeds missing a point in
  [s_0, h] are excluded and listed. Reported per method, their paired difference with a CI, and
  that difference as a fraction of the baseline's gap. The two differences' CIs are *expanded*
  percentile intervals (``stats.percentile_ci`` with n = the paired seeds): the plain percentile
  interval of a mean of a few seeds covers less than its nominal level (``experiments.coverage``
  measures it).
* **Equal-step improvement** at step s* (default: the horizon h): the paired difference of the mean
  of the last ``k`` evaluation points up to s* (k = 1 is the single point at s*, as in
  ``stats.analyze_task``).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from prs.analysis.bootstrap import (bootstrap_diff_of_means, bootstrap_mean, bootstrap_ratio_of_means, check_boot,
                                    percentile_ci, safe_ratio)
from prs.analysis.runs import Run
from prs.analysis.stats import censoring_bound, eval_matrix, last_step, moving_average, seed_mean

__all__ = ["gap_levels", "crossing_steps", "cost_at_steps", "auc", "window_mean_at", "common_horizon", "restricted_steps",
           "restricted_speedup", "gap_compare", "gap_task"]

FRACTIONS = (0.5, 0.8)


def _check_curves(steps, y) -> tuple[np.ndarray, np.ndarray]:
    steps = np.asarray(steps, float)
    y = np.asarray(y, float)
    if steps.ndim != 1 or y.ndim != 2 or y.shape[1] != steps.size:
        raise ValueError(f"steps must be [E] and y [S, E], got {steps.shape} and {y.shape}")
    if steps.size and np.any(np.diff(steps) <= 0):
        raise ValueError("steps must be strictly increasing")
    return steps, y


def _check_k(k) -> int:
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return int(k)


def _check_fractions(fractions) -> tuple[float, ...]:
    fr = tuple(float(f) for f in fractions)
    if not fr or any(not 0.0 < f <= 1.0 for f in fr):
        raise ValueError(f"fractions must be a non-empty list of values in (0, 1], got {fractions!r}")
    return fr


def _start_final(curve: np.ndarray, k: int, k_start: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """curve [..., E] -> (start [...], final [...]): means of its first k_start (default k) / last k finite points."""
    k_start = k if k_start is None else k_start
    ok = np.isfinite(curve)                                           # [..., E]
    rank = np.cumsum(ok, axis=-1)                                     # 1-based rank of finite points
    n = ok.sum(-1, keepdims=True)                                     # [..., 1]
    first = ok & (rank <= k_start)
    last = ok & (rank > n - k)
    z = np.where(ok, curve, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        start = (z * first).sum(-1) / first.sum(-1)
        final = (z * last).sum(-1) / last.sum(-1)
    return start, final


def gap_levels(steps, y_base, *, k: int = 3, k_start: int | None = None,
               fractions: Sequence[float] = FRACTIONS) -> dict[str, Any]:
    """Start, final and gap levels of the baseline's seed-mean curve (module docstring).

    steps [E], y_base [S, E] -> {"start", "final", "gap", "k", "k_start", "degenerate", "levels": {f: L_f}}.
    ``k_start`` (default k): points averaged for the start; 1 where the step-0 value has no noise
    (the simulator's closed-form curves).
    """
    steps, y = _check_curves(steps, y_base)
    k, fr = _check_k(k), _check_fractions(fractions)
    ks = k if k_start is None else _check_k(k_start)
    curve = seed_mean(y)
    n = int(np.isfinite(curve).sum())
    if n < k + ks:
        raise ValueError(f"the baseline's curve has {n} finite points; start and final levels need >= "
                         f"k_start + k = {ks + k} (2k when k_start = k)")
    start, final = (float(v) for v in _start_final(curve, k, ks))
    gap = final - start
    degenerate = not gap > 0
    levels = {f: (math.nan if degenerate else start + f * gap) for f in fr}
    return {"start": start, "final": final, "gap": gap, "k": k, "k_start": ks, "degenerate": degenerate, "levels": levels}


def crossing_steps(steps, y, level) -> tuple[np.ndarray, np.ndarray]:
    """Interpolated first crossing of ``level`` by each row: steps [E], y [R, E], level [R] or scalar.

    Returns (x [R] float, inf where never reached; censored [R] bool). NaN points never count.
    """
    steps, y = _check_curves(steps, y)
    level = np.broadcast_to(np.asarray(level, float), y.shape[:1])   # [R]
    hit = y >= level[:, None]                                         # [R, E] (NaN -> False)
    ever = hit.any(1)
    if steps.size == 0:
        return np.full(y.shape[0], np.inf), np.ones(y.shape[0], bool)
    e = np.argmax(hit, axis=1)                                        # [R]
    r = np.arange(y.shape[0])
    ep = np.maximum(e - 1, 0)
    y1, y0 = y[r, e], y[r, ep]
    s1, s0 = steps[e], steps[ep]
    interp_ok = (e > 0) & np.isfinite(y0) & (y1 > y0)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(interp_ok, (level - y0) / np.where(interp_ok, y1 - y0, 1.0), 1.0)
    x = np.where(e == 0, s1, s0 + np.clip(frac, 0.0, 1.0) * (s1 - s0))
    return np.where(ever, x, np.inf), ~ever


def cost_at_steps(cum_cost, x) -> np.ndarray:
    """Cost spent before the (fractional) step x of each row: cum_cost [R, T+1] (NaN past a run's end),
    x [R] -> [R] by linear interpolation between steps floor(x) and ceil(x); inf for x = inf; NaN when
    the run has no cost line there."""
    c = np.asarray(cum_cost, float)
    x = np.asarray(x, float)
    if c.ndim != 2 or x.shape != c.shape[:1]:
        raise ValueError(f"cum_cost must be [R, T+1] and x [R], got {c.shape} and {x.shape}")
    fin = np.isfinite(x)
    xc = np.where(fin, np.clip(x, 0, c.shape[1] - 1), 0.0)
    lo = np.floor(xc).astype(int)
    hi = np.minimum(lo + 1, c.shape[1] - 1)
    r = np.arange(c.shape[0])
    w = xc - lo
    val = np.where(w > 0, (1 - w) * c[r, lo] + w * c[r, hi], c[r, lo])
    val = np.where(fin & (x > c.shape[1] - 1), np.nan, val)  # beyond the cost lines
    return np.where(fin, val, np.inf)


def auc(steps, y, *, horizon: float) -> np.ndarray:
    """Normalised area under each row's curve over [s_0, horizon], trapezoid rule: y [S, E] -> [S]
    (mean pass@1 over the horizon); NaN for a row missing a point in that range."""
    steps, y = _check_curves(steps, y)
    if not steps.size or not (horizon > steps[0]) or not np.any(steps == horizon):
        raise ValueError(f"horizon must be an evaluation step after the first ({steps[:1]}), got {horizon!r}")
    sel = steps <= horizon
    s, v = steps[sel], y[:, sel]
    area = (0.5 * (v[:, 1:] + v[:, :-1]) * np.diff(s)).sum(1)       # NaN if any point is missing
    return area / (horizon - s[0])


def window_mean_at(steps, y, *, at_step: float, k: int = 1) -> np.ndarray:
    """Mean of the last k evaluation points up to ``at_step`` (which must be an evaluation step):
    y [S, E] -> [S]; NaN for a row missing any of them."""
    steps, y = _check_curves(steps, y)
    k = _check_k(k)
    idx = np.flatnonzero(steps == at_step)
    if idx.size != 1:
        raise ValueError(f"at_step {at_step!r} is not an evaluation step (steps {steps.tolist()})")
    e = int(idx[0])
    if e + 1 < k:
        raise ValueError(f"at_step {at_step!r} has only {e + 1} evaluation points up to it, k = {k}")
    return y[:, e + 1 - k: e + 1].mean(1)


def _nanmean_rows(y: np.ndarray) -> np.ndarray:
    """NaN-skipping mean over axis 1: [R, S, E] -> [R, E] (NaN where no seed has the point)."""
    ok = np.isfinite(y)
    return np.where(ok.any(1), np.where(ok, y, 0.0).sum(1) / np.maximum(ok.sum(1), 1), np.nan)


def common_horizon(steps, *ys) -> float | None:
    """The last evaluation step at which every row of every y [S, E] has a point (None if none)."""
    steps = np.asarray(steps, float)
    ok = np.all([np.isfinite(np.asarray(y, float)).all(0) for y in ys], axis=0) if ys else np.zeros(steps.shape, bool)
    return float(steps[ok][-1]) if np.any(ok) else None


def restricted_steps(steps, y, level, *, horizon: float) -> tuple[np.ndarray, np.ndarray]:
    """Restricted steps to ``level``: ``min(x, h)`` with x the interpolated first crossing
    (``crossing_steps``) on the points up to the horizon h; a row that has not crossed by h counts h.

    steps [E], y [R, E], level [R] or scalar -> (x [R] float, NaN where the level is NaN;
    censored [R] bool: not crossed by h). Every row must have its points up to h (``common_horizon``).
    """
    steps, y = _check_curves(steps, y)
    lev = np.broadcast_to(np.asarray(level, float), y.shape[:1])
    sel = steps <= horizon
    if not sel.any():
        raise ValueError(f"horizon {horizon!r} lies before the first evaluation step {steps[:1]}")
    x, cens = crossing_steps(steps[sel], y[:, sel], np.where(np.isfinite(lev), lev, np.inf))
    ok = np.isfinite(lev)
    return np.where(ok, np.where(cens, float(horizon), np.minimum(x, horizon)), np.nan), cens & ok


def restricted_speedup(steps, y_base, y_meth, *, fraction: float, horizon: float, k: int = 3,
                       k_start: int | None = None, window: int = 1,
                       cost_base: Mapping[str, np.ndarray] | None = None,
                       cost_meth: Mapping[str, np.ndarray] | None = None, n_boot: int = 2000, level: float = 0.95,
                       seed: int = 0, by: str = "seed", return_boot: bool = False) -> dict[str, Any]:
    """Speed-up in restricted mean steps (and costs) to ``fraction`` of the baseline's gap, paired
    bootstrap with the level re-estimated inside every resample.

    ``by="seed"``: the ratio of the seeds' mean restricted steps (below). ``by="mean_curve"``: the ratio
    of the restricted crossings of the two arms' seed-mean curves (x = ``restricted_steps`` of the
    resample's seed-mean curve, costs at x of the seed-mean cumulative cost); averaging over seeds
    commutes with a time compression (ȳ^m(t) = ȳ^b(a t) when every seed's y^m_s(t) = y^b_s(a t)), so this
    one's estimand is the compression factor a itself whenever the level is reached by the horizon.

    With the resample's seeds s_1..s_S (drawn jointly for both arms), its level
    ``L* = start* + f (final* - start*)`` from the resampled baseline seed-mean (``gap_levels``' rule;
    undefined when final* <= start*), x_s = ``restricted_steps`` of each curve at L* with horizon h,

        R_steps = mean_s x^base_s / mean_s x^meth_s,   R_c = mean_s c^base_s(x^base_s) / mean_s c^meth_s(x^meth_s)

    the restricted-mean speed-up (Royston & Parmar 2013 for restricted mean times; the percentile
    bootstrap of Efron & Tibshirani 1993, ch. 13, via ``percentile_ci``). The point value uses the
    sample itself. Returns {"steps": ci, c: ci, "horizon", "level", "censored_base" [S], "censored_method" [S],
    "x_base" [S], "x_method" [S]}; each ci = {"value", "lo", "hi", "undefined_share", "max_undefined",
    "paired", "estimator": "restricted", "horizon"}; with ``return_boot`` also "boot": {name: replicates [n_boot]}
    (NaN = undefined), for a statistic of two studies' speed-ups (a ratio of ratios, resampled apart).
    """
    steps, yb = _check_curves(steps, y_base)
    _, ym = _check_curves(steps, y_meth)
    k = _check_k(k)
    ks = k if k_start is None else _check_k(k_start)
    check_boot(n_boot, level)
    S, E = yb.shape
    cost_base, cost_meth = dict(cost_base or {}), dict(cost_meth or {})
    sb, sm = moving_average(yb, window=window), moving_average(ym, window=window)

    if by not in ("seed", "mean_curve"):
        raise ValueError(f"by must be 'seed' or 'mean_curve', got {by!r}")

    def stat(idx):  # idx [R, S] -> {name: ratio [R]}, plus the per-seed details of the first row
        R = idx.shape[0]
        mb = _nanmean_rows(yb[idx])                                            # [R, E]
        st, fi = _start_final(mb, k, ks)                                       # [R]
        lev = np.where(fi > st, st + fraction * (fi - st), np.nan)             # [R]
        if by == "mean_curve":
            cb_ = moving_average(mb, window=window)
            cm_ = moving_average(_nanmean_rows(ym[idx]), window=window)
            xb, cb = restricted_steps(steps, cb_, lev, horizon=horizon)        # [R]
            xm, cm = restricted_steps(steps, cm_, lev, horizon=horizon)
            out = {"steps": safe_ratio(xb, xm)}
            for c in cost_base:
                mcb = _nanmean_rows(np.asarray(cost_base[c], float)[idx])      # [R, T+1]
                mcm = _nanmean_rows(np.asarray(cost_meth[c], float)[idx])
                out[c] = safe_ratio(cost_at_steps(mcb, np.nan_to_num(xb)), cost_at_steps(mcm, np.nan_to_num(xm)))
            for c in out:
                out[c] = np.where(np.isfinite(lev), out[c], np.nan)
            return out, (lev, xb, xm, cb, cm)
        levs = np.repeat(lev, S)                                               # [R*S]
        xb, cb = restricted_steps(steps, sb[idx].reshape(R * S, E), levs, horizon=horizon)
        xm, cm = restricted_steps(steps, sm[idx].reshape(R * S, E), levs, horizon=horizon)
        out = {"steps": safe_ratio(xb.reshape(R, S).mean(1), xm.reshape(R, S).mean(1))}
        for c in cost_base:
            vb = cost_at_steps(np.asarray(cost_base[c], float)[idx.reshape(-1)], np.nan_to_num(xb))
            vm = cost_at_steps(np.asarray(cost_meth[c], float)[idx.reshape(-1)], np.nan_to_num(xm))
            out[c] = safe_ratio(vb.reshape(R, S).mean(1), vm.reshape(R, S).mean(1))
        for c in out:
            out[c] = np.where(np.isfinite(lev), out[c], np.nan)                # no gap: undefined
        return out, (lev, xb, xm, cb, cm)

    point, (lev, xb, xm, cb, cm) = stat(np.arange(S)[None])
    boots = stat(np.random.default_rng(seed).integers(0, S, size=(n_boot, S)))[0] if S >= 2 else None
    res: dict[str, Any] = {"horizon": float(horizon), "level": float(lev[0]), "x_base": xb.tolist(),
                           "x_method": xm.tolist(), "censored_base": cb.tolist(), "censored_method": cm.tolist()}
    for c, v in point.items():
        ci = (percentile_ci(boots[c], level=level) if boots is not None
              else {"lo": math.nan, "hi": math.nan, "undefined_share": math.nan, "max_undefined": math.nan})
        res[c] = {"value": float(v[0]), **ci, "paired": True, "estimator": f"restricted ({by})",
                  "horizon": float(horizon), "n": S}
    if return_boot:
        res["boot"] = {c: (np.asarray(boots[c], float) if boots is not None else np.full(0, np.nan)) for c in point}
    return res


def _mean_curve_boot(steps, yb, ym, *, k, k_start, fractions, n_boot, level, seed) -> dict[float, dict[str, Any]]:
    """Speed-up of the seed-mean curves' crossings, paired bootstrap with levels recomputed per resample."""
    S = yb.shape[0]
    def stats(ib):  # ib [R, S] -> ratio [F, R], base x [F, R], method x [F, R]
        mb, mm = _nanmean_rows(yb[ib]), _nanmean_rows(ym[ib])           # [R, E]
        st, fi = _start_final(mb, k, k_start)                         # [R]
        out = []
        for f in fractions:
            lev = np.where(fi > st, st + f * (fi - st), np.nan)
            xb, _ = crossing_steps(steps, mb, lev)
            xm, _ = crossing_steps(steps, mm, lev)
            xb = np.where(np.isfinite(lev), xb, np.nan)
            out.append((safe_ratio(xb, xm), xb, xm))
        return out
    point = stats(np.arange(S)[None])
    res = {}
    boots = stats(np.random.default_rng(seed).integers(0, S, size=(n_boot, S))) if S >= 2 else None
    for j, f in enumerate(fractions):
        r, xb, xm = point[j]
        # a resample whose baseline has no gap (NaN level) or 0/0 is undefined: left out (percentile_ci)
        ci = (percentile_ci(boots[j][0], level=level) if boots is not None
              else {"lo": math.nan, "hi": math.nan, "undefined_share": math.nan, "max_undefined": math.nan})
        res[f] = {"value": float(r[0]), **ci, "base_steps": float(xb[0]), "method_steps": float(xm[0]),
                  "censored": bool(not np.isfinite(xm[0])), "paired": True}
    return res


def gap_compare(steps, y_base, y_meth, *, cost_base: Mapping[str, np.ndarray] | None = None,
                cost_meth: Mapping[str, np.ndarray] | None = None, k: int = 3, k_start: int | None = None,
                fractions: Sequence[float] = FRACTIONS, window: int = 1, horizon: float | None = None,
                at_step: float | None = None, at_k: int | None = None, n_boot: int = 2000, level: float = 0.95,
                seed: int = 0) -> dict[str, Any]:
    """Paired gap statistics of a method against the baseline (module docstring).

    steps [E]; y_base, y_meth [S, E] with row s = the same seed in both; cost_base / cost_meth:
    {"tokens": [S, T+1], "wall": [S, T+1]} cumulative costs before each train step (optional).
    Returns {"levels": gap_levels(...), "n_seeds", f: {...per fraction...}, "auc": ..., "equal_step": ...}.
    """
    steps, yb = _check_curves(steps, y_base)
    _, ym = _check_curves(steps, y_meth)
    if yb.shape != ym.shape:
        raise ValueError(f"paired curves need equal shapes, got y_base {yb.shape} and y_meth {ym.shape}")
    check_boot(n_boot, level)
    k, fr = _check_k(k), _check_fractions(fractions)
    at_k = k if at_k is None else _check_k(at_k)
    boot = dict(n_boot=n_boot, level=level, seed=seed)
    cost_base, cost_meth = dict(cost_base or {}), dict(cost_meth or {})
    if set(cost_base) != set(cost_meth):
        raise ValueError(f"cost_base and cost_meth need the same keys, got {sorted(cost_base)} and {sorted(cost_meth)}")
    for name, c in list(cost_base.items()) + list(cost_meth.items()):
        if np.ndim(c) != 2 or np.shape(c)[0] != yb.shape[0]:
            raise ValueError(f"cost {name!r} must be [S={yb.shape[0]}, T+1], got shape {np.shape(c)}")
    lv = gap_levels(steps, yb, k=k, k_start=k_start, fractions=fr)
    S = yb.shape[0]
    out: dict[str, Any] = {"levels": lv, "n_seeds": S, "window": window, "fractions": list(fr)}
    sb, sm = moving_average(yb, window=window), moving_average(ym, window=window)
    h_common = common_horizon(steps, yb, ym)
    h = h_common if horizon is None else float(horizon)
    if h is not None and h_common is not None and h > h_common:
        raise ValueError(f"horizon {h} lies beyond the last evaluation step every paired seed reached ({h_common})")
    out["horizon"] = h
    for f in fr:
        L = lv["levels"][f]
        xb, cb = crossing_steps(steps, sb, L)
        xm, cm = crossing_steps(steps, sm, L)
        rec: dict[str, Any] = {"level": L, "base_steps": xb.tolist(), "method_steps": xm.tolist(), "horizon": h,
                               "first_step": float(steps[0])}
        if lv["degenerate"] or h is None or h <= steps[0]:
            nan = {"value": math.nan, "lo": math.nan, "hi": math.nan, "paired": True, "estimator": "restricted",
                   "horizon": h}
            rec.update(n_censored_baseline=int(cb.sum()), n_censored_method=int(cm.sum()),
                       bound=censoring_bound(cb, cm), speedup_steps=dict(nan),
                       **{f"speedup_{c}": dict(nan) for c in cost_base})
        else:
            kw = dict(fraction=f, horizon=h, k=k, k_start=lv["k_start"], window=window, cost_base=cost_base,
                      cost_meth=cost_meth, **boot)
            r = restricted_speedup(steps, yb, ym, by="seed", **kw)               # per seed
            mc = restricted_speedup(steps, yb, ym, by="mean_curve", **kw)        # the headline
            rcb, rcm = np.asarray(r["censored_base"], bool), np.asarray(r["censored_method"], bool)
            rb, rm = np.asarray(r["x_base"]), np.asarray(r["x_method"])
            rec.update(n_censored_baseline=int(rcb.sum()), n_censored_method=int(rcm.sum()),
                       bound=censoring_bound(rcb, rcm), restricted_base_steps=rb.tolist(),
                       restricted_method_steps=rm.tolist(), speedup_steps=mc["steps"], speedup_steps_per_seed=r["steps"],
                       mean_curve_steps=[mc["x_base"][0], mc["x_method"][0]],
                       mean_curve_censored=[bool(mc["censored_base"][0]), bool(mc["censored_method"][0])])
            rec["steps_base"], rec["steps_method"] = bootstrap_mean(rb, **boot), bootstrap_mean(rm, **boot)
            for c in cost_base:
                rec[f"{c}_base"] = cost_at_steps(np.asarray(cost_base[c], float), rb).tolist()
                rec[f"{c}_method"] = cost_at_steps(np.asarray(cost_meth[c], float), rm).tolist()
                rec[f"speedup_{c}"], rec[f"speedup_{c}_per_seed"] = mc[c], r[c]
            for key in ["speedup_steps_per_seed"] + [f"speedup_{c}_per_seed" for c in cost_base]:
                rec[key]["bound"] = rec["bound"]
        mcc = rec.get("mean_curve_censored", [False, False])
        for key in ["speedup_steps"] + [f"speedup_{c}" for c in cost_base]:
            rec[key]["bound"] = censoring_bound(np.array(mcc[:1]), np.array(mcc[1:]))
        out[f] = rec
    if not lv["degenerate"]:
        mc = _mean_curve_boot(steps, yb, ym, k=k, k_start=lv["k_start"], fractions=fr, **boot)
        for f in fr:
            out[f]["mean_curve"] = mc[f]
    # area under the curve and equal-step improvement on the same horizon
    if h is not None and h > steps[0]:
        ab, am = auc(steps, yb, horizon=h), auc(steps, ym, horizon=h)
        ok = np.isfinite(ab) & np.isfinite(am)
        d = bootstrap_diff_of_means(am[ok], ab[ok], paired=True, expand=True, **boot)
        out["auc"] = {"horizon": h, "base": bootstrap_mean(ab[ok], **boot), "method": bootstrap_mean(am[ok], **boot),
                      "improvement": d, "improvement_gap_fraction": (d["value"] / lv["gap"] if not lv["degenerate"]
                                                                     else math.nan),
                      "excluded_seeds": np.flatnonzero(~ok).tolist()}
    s_star = h if at_step is None else at_step
    if s_star is not None:
        wb, wm = window_mean_at(steps, yb, at_step=s_star, k=at_k), window_mean_at(steps, ym, at_step=s_star, k=at_k)
        ok = np.isfinite(wb) & np.isfinite(wm)
        out["equal_step"] = {"at_step": s_star, "k": at_k, "base": bootstrap_mean(wb[ok], **boot),
                             "method": bootstrap_mean(wm[ok], **boot),
                             "improvement": bootstrap_diff_of_means(wm[ok], wb[ok], paired=True, expand=True, **boot),
                             "excluded_seeds": np.flatnonzero(~ok).tolist()}
    return out


def _cost_matrix(runs: Sequence[Run], which: int, clip) -> np.ndarray:
    """[S, T+1] cumulative cost (0 = wall, 1 = tokens) of each run, NaN-padded to the longest run."""
    cs = [r.cumulative_cost(clip=clip)[which] for r in runs]
    T = max((c.size for c in cs), default=1)
    out = np.full((len(runs), T), np.nan)
    for i, c in enumerate(cs):
        out[i, :c.size] = c
    return out


def gap_task(by_method: Mapping[str, Sequence[Run]], *, baseline: str = "baseline", k: int = 3,
             k_start: int | None = None,
             fractions: Sequence[float] = FRACTIONS, window: int = 1, time_clip: float | None = 5.0,
             n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """``gap_compare`` of every method against the baseline on their common seeds ({method: ...}).

    Runs without a train line are left out; seeds present in only one method are listed, not used.
    """
    if baseline not in by_method:
        raise ValueError(f"baseline method {baseline!r} not among the runs' methods {sorted(by_method)}")
    base = {r.seed: r for r in by_method[baseline] if r.status != "empty"}
    out: dict[str, Any] = {"baseline": baseline, "methods": {}}
    for method, runs in by_method.items():
        if method == baseline:
            continue
        meth = {r.seed: r for r in runs if r.status != "empty"}
        common = sorted(set(base) & set(meth))
        rec: dict[str, Any] = {"paired_seeds": common,
                               "unpaired_seeds": sorted(set(base) ^ set(meth))}
        if len(common) < 1:
            rec["error"] = "no common seed with the baseline"
            out["methods"][method] = rec
            continue
        rb, rm = [base[s] for s in common], [meth[s] for s in common]
        steps, y = eval_matrix(rb + rm)
        S = len(common)
        cb = {"wall": _cost_matrix(rb, 0, time_clip), "tokens": _cost_matrix(rb, 1, time_clip)}
        cm = {"wall": _cost_matrix(rm, 0, time_clip), "tokens": _cost_matrix(rm, 1, time_clip)}
        try:
            rec.update(gap_compare(steps, y[:S], y[S:], cost_base=cb, cost_meth=cm, k=k, k_start=k_start,
                                   fractions=fractions,
                                   window=window, n_boot=n_boot, level=level, seed=seed))
        except ValueError as e:
            rec["error"] = str(e)
        out["methods"][method] = rec
    return out
