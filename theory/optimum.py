"""Numerical check that every pass-rate metric is maximised at p = 1/2 (Zhu et al. 2026, Sec. 2).

For each metric ``f(p, n)`` and every group size ``n`` (default 2..64), all at once on a
``[G, M]`` array (G grid points, M group sizes), in float64 (``jax.enable_x64`` context):

1. grid ``pᵢ = (i + 1/2)/G`` (symmetric about 1/2, excludes 0, 1/2 and 1); values ``f`` and
   derivatives ``f' = ∂f/∂p`` by autodiff: ``jax.grad`` for the metrics of p, one ``jax.jvp`` for
   all finite-n expectations together (each is ``Σₖ P(k; n, p)·t_k`` for a fixed table ``t``, so
   the binomial pmf ``[G, M, K]`` is built once);
2. symmetry: ``|f(pᵢ) − f(1 − pᵢ)| <= sym_rtol · max|f|``;
3. unimodality: ``f' > 0`` on every grid point left of 1/2 and ``f' < 0`` right of it (so the
   grid has exactly one ascending→descending sign change and values rise then fall);
4. maximiser: bisection of ``f'`` (64 halvings) inside the grid cell holding the sign change; the
   root must be within ``tol`` (1e-9) of 1/2 and ``f(root)`` must not be below the grid maximum.

A broken claim raises ``OptimumClaimError`` naming the metric, ``n`` and the claim.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from theory import _checks as c
from theory import grpo
from theory import metrics as m

MetricFn = Callable[[jax.Array, jax.Array], jax.Array]


class OptimumClaimError(AssertionError):
    """A metric broke one of the claims (symmetric, unimodal, maximised at 1/2) for some n."""

    def __init__(self, metric: str, n: int, claim: str, detail: str):
        self.metric, self.n, self.claim = metric, n, claim
        super().__init__(f"metric {metric!r}, n={n}: claim '{claim}' fails: {detail}")


@dataclasses.dataclass(frozen=True)
class MetricOptimum:
    """Result of the check for one metric over all n."""

    metric: str
    argmax: tuple[float, ...]  # per n, root of f' near 1/2
    max_abs_error: float  # max over n of |argmax − 1/2|
    max_symmetry_error: float  # max over n and grid of |f(p) − f(1−p)| / max|f|
    unimodal: bool


@dataclasses.dataclass(frozen=True)
class OptimumReport:
    """Outcome of ``check_optimum``; every listed metric passed (a failure raises instead)."""

    n_values: tuple[int, ...]
    grid_size: int
    tol: float
    results: tuple[MetricOptimum, ...]

    @property
    def max_abs_error(self) -> float:
        return max(r.max_abs_error for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_values": list(self.n_values), "grid_size": self.grid_size, "tol": self.tol,
            "max_abs_error": self.max_abs_error,
            "metrics": {r.metric: {"max_abs_error": r.max_abs_error,
                                   "max_symmetry_error": r.max_symmetry_error,
                                   "unimodal": r.unimodal} for r in self.results},
        }

    def summary(self) -> str:
        lines = [f"optimum check: {len(self.results)} metrics x n in {self.n_values[0]}..{self.n_values[-1]}"
                 f" ({len(self.n_values)} sizes), grid {self.grid_size}, tol {self.tol:g}: all maximised at p = 1/2"]
        for r in self.results:
            lines.append(f"  {r.metric:<28} max|argmax-1/2| = {r.max_abs_error:.1e}  "
                         f"max sym err = {r.max_symmetry_error:.1e}  unimodal = {r.unimodal}")
        return "\n".join(lines)


def _entropy(p, n, kmax):
    del n, kmax
    return -(jax.scipy.special.xlogy(p, p) + jax.scipy.special.xlog1py(1.0 - p, -p)) / math.log(2.0)


def _energy(p, n, kmax):
    del kmax
    return p * (1.0 - p) + 0.0 * n


def _survival(p, n, kmax):
    del kmax
    return 1.0 - p**n - (1.0 - p) ** n


def _centred_expectation(pmf, t, n):
    """``E[t] = t_c + Σₖ P(k)(t_k − t_c)`` (centring as in ``metrics._binomial_sum``).

    ``pmf [..., M, K]`` and ``t [..., M, K]`` aligned on the leading axes; ``n [1, M]``.
    """
    mid = jnp.broadcast_to(jnp.floor(n / 2.0).astype(jnp.int32)[..., None], t.shape[:-1] + (1,))
    centre = jnp.take_along_axis(t, mid, axis=-1)  # [..., M, 1]
    return centre[..., 0] + jnp.sum(pmf * (t - centre), axis=-1)


def _tables_grid(p, n, kmax, t1, t0):
    """``E[t1_k − p·t0_k]`` ``[Q, G, M]`` for Q tables at every grid point; p ``[G, M]``, n ``[1, M]``,
    ``t1``, ``t0`` ``[Q, M, K]``. The pmf ``[G, M, K]`` is computed once for all Q tables."""
    pmf = m._binomial_pmf(p, n, kmax)[0]  # [G, M, K]
    mid = jnp.broadcast_to(jnp.floor(n / 2.0).astype(jnp.int32)[..., None], t1.shape[:-1] + (1,))

    def expect(t):  # [Q, M, K] -> [Q, G, M]
        centre = jnp.take_along_axis(t, mid, axis=-1)  # [Q, M, 1]
        return centre[:, None, :, 0] + jnp.einsum("gmk,qmk->qgm", pmf, t - centre)

    return expect(t1) - p[None] * expect(t0)


def _tables_aligned(p, n, kmax, t1, t0):
    """``E[t1_k − p·t0_k]`` ``[Q, M]`` with one ``p`` per table and size: p ``[Q, M]``."""
    pmf = m._binomial_pmf(p, n, kmax)[0]  # [Q, M, K]
    return _centred_expectation(pmf, t1, n) - p * _centred_expectation(pmf, t0, n)


def _plain(fn):
    def f(p, n, kmax):
        del kmax
        return fn(p, n)
    return f


def _k_tables(ns: np.ndarray, kmax: int, h) -> np.ndarray:
    """``[M, K]`` table of ``h(k, n_m)`` for ``k <= n_m``, zero beyond."""
    k = np.arange(kmax + 1, dtype=np.float64)[None, :]
    n = ns.astype(np.float64)[:, None]
    with jax.enable_x64(True):
        vals = np.asarray(jax.jit(h)(jnp.asarray(np.minimum(k, n)), jnp.asarray(n)))
    return np.where(k <= n, vals, 0.0)


def _builtin_metrics(ns: np.ndarray, kmax: int, include_advantages: bool):
    """``({name: plain f(p, n, kmax)}, names of the tables, t1 [Q, M, K], t0 [Q, M, K])``.

    Every finite-n expectation is ``Σₖ P(k)(t1_k − p·t0_k)`` for a fixed table: ``t0 = 0`` except
    for the policy gradient ``ĝ_k = (1/n)Σᵢ A_i r_i − p·(1/n)Σᵢ A_i``. For these estimators
    ``ĝ_k >= 0`` (module ``theory.grpo``), so ``E[ĝ] = E|ĝ|`` is checked without the ``abs``.
    """
    plain = {"reward_entropy": _entropy, "advantage_energy": _energy, "filter_survival": _survival}
    names, t1, t0 = [], [], []
    zeros = np.zeros((ns.size, kmax + 1))
    for name, h in (("E[empirical_entropy]", m._h_entropy), ("E[group_reward_variance]", m._h_variance),
                    ("E[contrast_pairs]", m._h_pairs), ("E[group_survives]", m._h_survives)):
        names.append(name), t1.append(_k_tables(ns, kmax, h)), t0.append(zeros)
    if include_advantages:
        for est in grpo.ESTIMATORS:
            mom = grpo.advantage_moments(ns, kmax=kmax, estimator=est, dtype=jnp.float64)
            names += [f"E[A^2] {est}", f"E|grad| {est}"]
            t1 += [np.asarray(mom["sq"]), np.asarray(mom["ar"])]
            t0 += [zeros, np.asarray(mom["a"])]
    return plain, names, np.stack(t1), np.stack(t0)


def metric_names(*, include_advantages: bool = True) -> tuple[str, ...]:
    """Names of the built-in metrics checked by ``check_optimum``."""
    names = ("reward_entropy", "advantage_energy", "filter_survival", "E[empirical_entropy]",
             "E[group_reward_variance]", "E[contrast_pairs]", "E[group_survives]")
    if include_advantages:
        names += tuple(f"{k} {e}" for e in grpo.ESTIMATORS for k in ("E[A^2]", "E|grad|"))
    return names


def _evaluate(f, p, n, kmax):
    """Values and elementwise derivatives ``[G, M]`` of a plain metric (each entry its own p)."""
    vals = f(p, n, kmax)
    grads = jax.grad(lambda q: jnp.sum(f(q, n, kmax)))(p)
    return vals, grads


def _evaluate_tables(p, n, kmax, t1, t0):
    """Values and derivatives ``[Q, G, M]`` of all table metrics: one forward-mode pass (``jax.jvp``
    with a tangent of ones gives ``∂/∂p`` of every entry, as each depends on its own p only)."""
    return jax.jvp(lambda q: _tables_grid(q, n, kmax, t1, t0), (p,), (jnp.ones_like(p),))


def _bisect(f, lo, hi, n, kmax, steps, *extra):
    """Root of ``∂f/∂p`` in ``[lo, hi]`` (``f' > 0`` at lo, ``<= 0`` at hi), elementwise; and f(root)."""
    dfn = jax.grad(lambda q: jnp.sum(f(q, n, kmax, *extra)))

    def body(_, lh):
        lo, hi = lh
        mid = 0.5 * (lo + hi)
        up = dfn(mid) > 0
        return jnp.where(up, mid, lo), jnp.where(up, hi, mid)

    lo, hi = jax.lax.fori_loop(0, steps, body, (lo, hi))
    root = 0.5 * (lo + hi)
    return root, f(root, n, kmax, *extra)


_evaluate_jit = jax.jit(_evaluate, static_argnums=(0, 3))
_evaluate_tables_jit = jax.jit(_evaluate_tables, static_argnums=2)
_bisect_jit = jax.jit(_bisect, static_argnums=(0, 4, 5))


def check_optimum(*, n_values: Any = range(2, 65), metrics: Mapping[str, MetricFn] | None = None,
                  include_advantages: bool = True, grid_size: int = 512, tol: float = 1e-9,
                  sym_rtol: float = 1e-10, bisect_steps: int = 64) -> OptimumReport:
    """Checks that each metric is symmetric about 1/2, unimodal and maximised at 1/2 within ``tol``.

    Args:
      n_values: group sizes (concrete integers >= 1).
      metrics: optional ``{name: f(p, n)}`` of elementwise jnp functions of float64 arrays
        ``p [G, M]`` and ``n [1, M]`` (same rank, broadcast), replacing the built-in set (four metrics of p, the finite-n expectations of the
        realised-k metrics and, with ``include_advantages``, ``E[A²]`` and ``E|ĝ|`` for grpo,
        dr_grpo and rloo from ``theory.grpo``).
      grid_size: even number of grid points in (0, 1).
      tol: allowed ``|argmax − 1/2|``.
      sym_rtol: allowed ``|f(p) − f(1−p)|`` relative to ``max|f|``.

    Returns:
      ``OptimumReport``. Raises ``OptimumClaimError`` on the first broken claim.
    """
    ns = c.as_group_size("n_values", np.asarray(list(n_values) if not np.isscalar(n_values) else n_values))
    ns = ns.reshape(-1)
    if ns.size == 0:
        raise ValueError("n_values must not be empty")
    if not isinstance(grid_size, int) or grid_size < 4 or grid_size % 2:
        raise ValueError(f"grid_size must be an even int >= 4, got {grid_size!r}")
    kmax = int(ns.max())
    g = grid_size
    grid = (np.arange(g) + 0.5) / g  # [G]
    with jax.enable_x64(True):
        if metrics is None:
            plain, names, t1, t0 = _builtin_metrics(ns, kmax, include_advantages)
        else:
            plain, names, t1, t0 = {name: _plain(fn) for name, fn in metrics.items()}, [], None, None
        p = jnp.asarray(np.broadcast_to(grid[:, None], (g, ns.size)), dtype=jnp.float64)  # [G, M]
        n = jnp.asarray(ns[None, :], dtype=jnp.float64)  # [1, M]
        results = []
        for name, f in plain.items():
            vals, d = (np.asarray(x) for x in _evaluate_jit(f, p, n, kmax))
            lo, hi = _shape_checks(name, vals, d, grid, ns, sym_rtol)
            root, at_root = _bisect_jit(f, lo[None], hi[None], n, kmax, bisect_steps)
            results.append(_root_checks(name, np.asarray(root)[0], np.asarray(at_root)[0], vals, d, ns, tol))
        if names:
            t1, t0 = jnp.asarray(t1, dtype=jnp.float64), jnp.asarray(t0, dtype=jnp.float64)  # [Q, M, K]
            vals, d = (np.asarray(x) for x in _evaluate_tables_jit(p, n, kmax, t1, t0))  # [Q, G, M]
            brackets = [_shape_checks(name, vals[q], d[q], grid, ns, sym_rtol) for q, name in enumerate(names)]
            lo = jnp.asarray(np.stack([b[0] for b in brackets]))  # [Q, M]
            hi = jnp.asarray(np.stack([b[1] for b in brackets]))
            root, at_root = (np.asarray(x) for x in _bisect_jit(_tables_aligned, lo, hi, n, kmax, bisect_steps, t1, t0))
            results += [_root_checks(name, root[q], at_root[q], vals[q], d[q], ns, tol) for q, name in enumerate(names)]
    return OptimumReport(tuple(int(x) for x in ns), grid_size, tol, tuple(results))


def _shape_checks(name, vals, d, grid, ns, sym_rtol):
    """Finite, symmetric, unimodal on the grid (``vals``, ``d`` ``[G, M]``); returns the bracket
    ``(lo [M], hi [M])`` around the sign change of ``f'``."""
    if not np.all(np.isfinite(vals)) or not np.all(np.isfinite(d)):
        j = int(np.argmax(~(np.isfinite(vals).all(0) & np.isfinite(d).all(0))))
        raise OptimumClaimError(name, int(ns[j]), "finite", "NaN/Inf in values or derivative")
    scale = np.maximum(np.max(np.abs(vals), axis=0), np.finfo(np.float64).tiny)  # [M]
    sym = np.max(np.abs(vals - vals[::-1]), axis=0) / scale  # [M]
    if np.any(sym > sym_rtol):
        j = int(np.argmax(sym))
        raise OptimumClaimError(name, int(ns[j]), "symmetric about 1/2",
                                f"max |f(p) - f(1-p)|/max|f| = {sym[j]:.3g} > {sym_rtol:g}")
    left, right = grid < 0.5, grid > 0.5
    rising = np.all(d[left] > 0, axis=0) & np.all(d[right] < 0, axis=0)  # [M]
    if not np.all(rising):
        j = int(np.argmin(rising))
        bad = np.flatnonzero((left & (d[:, j] <= 0)) | (right & (d[:, j] >= 0)))
        raise OptimumClaimError(name, int(ns[j]), "unimodal (f' > 0 left of 1/2, < 0 right)",
                                f"derivative has the wrong sign at p = {grid[bad[:3]].tolist()}")
    first_down = np.argmax(d <= 0, axis=0)  # [M]: the sign change of f' sits in [lo, hi]
    return grid[first_down - 1], grid[first_down]


def _root_checks(name, root, at_root, vals, d, ns, tol) -> MetricOptimum:
    """``|root − 1/2| <= tol`` and ``f(root) >=`` every grid value, per n (``root`` ``[M]``)."""
    scale = np.maximum(np.max(np.abs(vals), axis=0), np.finfo(np.float64).tiny)
    err = np.abs(root - 0.5)
    if np.any(err > tol):
        j = int(np.argmax(err))
        raise OptimumClaimError(name, int(ns[j]), "maximised at p = 1/2",
                                f"root of f' at p = {root[j]!r}, |p - 1/2| = {err[j]:.3g} > {tol:g}")
    short = np.max(vals, axis=0) - at_root
    if np.any(short > 1e-12 * scale):
        j = int(np.argmax(short))
        raise OptimumClaimError(name, int(ns[j]), "global maximum at the root",
                                f"grid value exceeds f(root) by {short[j]:.3g}")
    sym = np.max(np.abs(vals - vals[::-1]), axis=0) / scale
    return MetricOptimum(name, tuple(float(r) for r in root), float(err.max()), float(sym.max()), True)
