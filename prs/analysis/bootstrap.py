"""Percentile bootstrap over seeds: the one resampling module of the project (analysis, the
simulator's sweep ``experiments.simulate``, the trap study). Seeded, vectorised over resamples.

Every interval is a percentile interval of resampled statistics (Efron & Tibshirani 1993, ch. 13),
computed by ``percentile_ci``, which leaves undefined replicates (0/0) out and reports their share;
``expand`` gives the expanded percentile interval (Hesterberg 2015, sec. 4.3) for small samples.
Two-sample statistics resample both arms with one index per resample when ``paired``.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np


def expanded_tail(n: int, level: float = 0.95) -> float:
    """Tail mass of the expanded percentile interval for a mean of n observations (Hesterberg 2015,
    "What teachers should know about the bootstrap", sec. 4.3): Phi(-sqrt(n/(n-1)) t_{(1+level)/2, n-1}),
    so the percentile interval of a bootstrap mean gets the width of the t interval with the sample
    sd; n = 8 at 95%: 0.0057 per tail instead of 0.025."""
    if n < 2:
        raise ValueError(f"the expanded percentile needs n >= 2, got {n}")
    from scipy import stats as sps  # scipy: a dependency of jax

    return float(sps.norm.cdf(-math.sqrt(n / (n - 1)) * sps.t.ppf((1 + level) / 2, n - 1)))


def percentile_ci(samples, *, level: float = 0.95, max_undefined: float | None = None,
                  n: int | None = None) -> dict[str, float]:
    """Percentile interval of bootstrap replicates that leaves the undefined ones out.

    samples [n_boot]: NaN = an undefined replicate (0/0, a resample without a gap); ±inf are defined,
    ordered values (x/0 with x > 0). With u the share of NaN replicates, the interval is the
    ((1 - level)/2, (1 + level)/2) quantiles of the defined ones, reported with u; it is undefined
    (lo = hi = NaN) only when u > ``max_undefined``, default (1 - level)/2: the mass of one tail, so an
    interval is given only when the undefined replicates, wherever they would fall, could move either
    end by at most one tail's share of the replicates. Efron & Tibshirani 1993, ch. 13.

    With ``n`` (the number of resampled units, n >= 2) the tails are those of the expanded percentile
    interval (``expanded_tail``), which corrects the percentile interval's small-sample
    under-coverage of a mean; the default threshold is then that tail mass.

    Returns {"lo", "hi", "undefined_share", "max_undefined"}. The one CI helper of ``prs.analysis``.
    """
    x = np.asarray(samples, float).reshape(-1)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")
    tail = (1.0 - level) / 2 if n is None else expanded_tail(n, level)
    thr = tail if max_undefined is None else float(max_undefined)
    if not 0.0 <= thr < 1.0:
        raise ValueError(f"max_undefined must lie in [0, 1), got {max_undefined!r}")
    if x.size == 0:
        return {"lo": math.nan, "hi": math.nan, "undefined_share": math.nan, "max_undefined": thr}
    ok = ~np.isnan(x)
    u = float(1.0 - ok.mean())
    if u > thr or not ok.any():
        return {"lo": math.nan, "hi": math.nan, "undefined_share": u, "max_undefined": thr}
    q = [tail, 1.0 - tail]
    with np.errstate(invalid="ignore"):                       # inf - inf between two infinite replicates
        lo, hi = np.where(np.isnan(v := np.quantile(x[ok], q)), np.quantile(x[ok], q, method="nearest"), v)
    return {"lo": float(lo), "hi": float(hi), "undefined_share": u, "max_undefined": thr}


def check_boot(n_boot: int, level: float) -> None:
    """Argument checks shared by every bootstrap here: n_boot >= 1, level in (0, 1)."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")


def safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den without warnings: x/0 = inf for x > 0, 0/0 = NaN (undefined: both reached at step 0)."""
    num, den = np.broadcast_arrays(np.asarray(num, float), np.asarray(den, float))
    fill = np.where(num == 0, np.nan, np.inf)
    return np.divide(num, den, out=fill, where=den != 0)


def bootstrap_mean(x, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0, expand: bool = False) -> dict[str, Any]:
    """Mean of x [S] with a percentile bootstrap CI: {"value", "lo", "hi", "n"} (NaN CI if S < 2);
    ``expand``: the expanded percentile interval (``percentile_ci`` with n = S)."""
    x = np.asarray(x, float)
    if x.ndim != 1:
        raise ValueError(f"x must be [S], got shape {x.shape}")
    check_boot(n_boot, level)
    if x.size == 0:
        return {"value": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    if x.size < 2:
        return {"value": float(x.mean()), "lo": math.nan, "hi": math.nan, "n": 1}
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))  # [n_boot, S]
    return {"value": float(x.mean()), **percentile_ci(x[idx].mean(1), level=level, n=x.size if expand else None),
            "n": int(x.size)}


def _two_sample(a, b, stat, *, paired: bool, n_boot: int, level: float, seed: int,
                expand: bool = False) -> dict[str, Any]:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"samples must be 1-D [S], got shapes {a.shape} and {b.shape}")
    if paired and a.shape != b.shape:
        raise ValueError(f"paired bootstrap needs equal sample counts, got {a.size} and {b.size}")
    check_boot(n_boot, level)
    out = {"value": math.nan, "lo": math.nan, "hi": math.nan, "n_a": int(a.size), "n_b": int(b.size),
           "paired": bool(paired)}
    if a.size == 0 or b.size == 0:
        return out
    out["value"] = float(stat(a.mean(), b.mean()))
    if min(a.size, b.size) < 2:
        return out
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, a.size, size=(n_boot, a.size))                     # [n_boot, Sa]
    ib = ia if paired else rng.integers(0, b.size, size=(n_boot, b.size))   # [n_boot, Sb]
    out.update(percentile_ci(stat(a[ia].mean(1), b[ib].mean(1)), level=level,
                             n=(a.size if paired else min(a.size, b.size)) if expand else None))
    return out


def bootstrap_ratio_of_means(num, den, *, paired: bool = False, n_boot: int = 2000, level: float = 0.95,
                             seed: int = 0) -> dict[str, Any]:
    """mean(num) / mean(den) with a seeded percentile bootstrap CI (inf when mean(den) = 0).

    Speed-up = mean_s(steps_base) / mean_s(steps_method). Unpaired: num [Sa] and den [Sb] resampled
    independently; paired: one index per resample for both (equal S). Efron & Tibshirani 1993, ch. 13.
    """
    return _two_sample(num, den, safe_ratio, paired=paired, n_boot=n_boot, level=level, seed=seed)


def bootstrap_diff_of_means(a, b, *, paired: bool = False, n_boot: int = 2000, level: float = 0.95,
                            seed: int = 0, expand: bool = False) -> dict[str, Any]:
    """mean(a) - mean(b) with a seeded percentile bootstrap CI (the equal-step improvement, a = method);
    ``expand``: the expanded percentile interval (``percentile_ci``; n = the paired count, or the
    smaller sample)."""
    return _two_sample(a, b, np.subtract, paired=paired, n_boot=n_boot, level=level, seed=seed, expand=expand)


def bootstrap_band(y, *, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seed-mean curve of y [S, E] and its pointwise bootstrap CI band (lo [E], hi [E]); NaN-skipping.

    y may carry leading axes, [..., S, E] -> ([..., E], [..., E], [..., E]): every leading row is
    resampled with the *same* seed indices (a paired band: row a and row b of one resample hold the
    same seeds), so arms measured on the same seeds share their resampling noise.
    """
    y = np.asarray(y, float)
    if y.ndim < 2:
        raise ValueError(f"y must be [S, E] or [..., S, E], got shape {y.shape}")
    check_boot(n_boot, level)
    ok0 = np.isfinite(y)
    mean = np.where(ok0.any(-2), np.where(ok0, y, 0.0).sum(-2) / np.maximum(ok0.sum(-2), 1), np.nan)  # [..., E]
    S = y.shape[-2]
    if S < 2:
        return mean, mean.copy(), mean.copy()
    idx = np.random.default_rng(seed).integers(0, S, size=(n_boot, S))                     # [n_boot, S]
    yb = np.take(y, idx, axis=-2)                                                          # [..., n_boot, S, E]
    ok = np.isfinite(yb)
    mb = np.where(ok.any(-2), np.where(ok, yb, 0.0).sum(-2) / np.maximum(ok.sum(-2), 1), np.nan)  # [..., n_boot, E]
    with np.errstate(all="ignore"):
        lo, hi = (np.nanquantile(mb, [(1 - level) / 2, (1 + level) / 2], axis=-2) if np.isfinite(mb).any()
                  else (mean, mean))
    return mean, np.asarray(lo), np.asarray(hi)


def bootstrap_ci(data, stat: Callable = np.mean, *, n_boot: int = 2000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """(stat(data), lo, hi): percentile bootstrap of any statistic over the leading (seed) axis, seeded.

    ``data`` is an array [S, ...] or a tuple of arrays sharing S, resampled jointly (paired) and
    passed to ``stat`` as separate arguments; the interval is ``percentile_ci`` of the replicates.
    """
    arrays = tuple(np.asarray(a) for a in (data if isinstance(data, tuple) else (data,)))
    S = arrays[0].shape[0]
    if S < 2 or any(a.shape[0] != S for a in arrays):
        raise ValueError(f"need >= 2 samples sharing the leading axis, got shapes {[a.shape for a in arrays]}")
    check_boot(n_boot, level)
    idx = np.random.default_rng(seed).integers(0, S, size=(n_boot, S))  # [n_boot, S]
    boots = np.array([stat(*(a[i] for a in arrays)) for i in idx], float)  # [n_boot]
    ci = percentile_ci(boots, level=level)
    return float(stat(*arrays)), ci["lo"], ci["hi"]


def speedup_ci(base_steps, method_steps, **kw) -> tuple[float, float, float]:
    """Speed-up mean(base) / mean(method) over paired seeds [S], with its bootstrap CI (``bootstrap_ci``)."""
    return bootstrap_ci((np.asarray(base_steps, float), np.asarray(method_steps, float)),
                        lambda b, m: b.mean() / m.mean(), **kw)
