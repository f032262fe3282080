"""Expected GRPO-family advantages and policy gradients for a one-logit Bernoulli policy.

Policy ``π = sigmoid(θ)`` emits success ``y ~ Bernoulli(p)``, ``p = π``, reward ``r = y``;
``∇_θ log π(y) = y − p``. A group of ``n`` rollouts with ``k`` successes is, up to order, the
canonical reward vector ``[1]*k + [0]*(n−k)``; its advantages ``A_{k,i}`` come from
``prs.group_advantages`` on the ``[n+1, n]`` batch of canonical vectors (one row per ``k``), so the
numbers follow whatever convention that kernel implements (eps, ddof). Then, for
``k ~ Binomial(n, p)``:

- expected squared advantage  ``E[A²] = Σₖ P(k) · (1/n) Σᵢ A_{k,i}²``
- policy-gradient estimate    ``ĝ_k = (1/n) Σᵢ A_{k,i} (r_{k,i} − p)`` (mean over the group), and
  its expected magnitude ``E|ĝ| = Σₖ P(k) |ĝ_k|``.

The true gradient of ``J(θ) = E[r] = p`` is ``dJ/dθ = p(1−p)`` (the advantage energy). Closed forms
(derivations in the tests' reference): Dr.GRPO ``E[ĝ] = (n−1)p(1−p)/n``, RLOO ``E[ĝ] = p(1−p)``
(unbiased), Dr.GRPO ``E[A²] = (n−1)p(1−p)/n``, RLOO ``E[A²] = n p(1−p)/(n−1)``, GRPO
``E[A²] = Σₖ P(k)·(n−1)/n·σ_k²/(σ_k+eps)²`` with ``σ_k² = k(n−k)/(n(n−1))`` (``≈ (n−1)/n`` times
the survival probability). GRPO: Shao et al. 2024 (arXiv:2402.03300); Dr.GRPO: Liu et al. 2025
(arXiv:2503.20783); RLOO: Ahmadian et al. 2024 (arXiv:2402.14740).
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from theory import _checks as c
from theory import metrics as m

ESTIMATORS = ("grpo", "dr_grpo", "rloo")


def canonical_rewards(n: int, *, width: int | None = None, dtype: Any = None) -> tuple[jax.Array, jax.Array]:
    """``[n+1, W]`` canonical reward vectors (row k: k ones then zeros) and their valid mask.

    ``W = width`` (default ``n``) pads each row with masked-out zeros, so groups of different sizes
    share one shape. Returns ``(rewards [n+1, W], valid [n+1, W] bool)``.
    """
    (n,) = c.as_group_size("n", n).reshape(1).tolist()
    w = n if width is None else width
    if w < n:
        raise ValueError(f"width must be >= n, got width={w}, n={n}")
    i = np.arange(w)[None, :]  # [1, W]
    k = np.arange(n + 1)[:, None]  # [n+1, 1]
    rewards = (i < k).astype(np.float64)
    dtype = dtype or jnp.promote_types(jnp.float32, jnp.asarray(0.0).dtype)
    return jnp.asarray(rewards, dtype=dtype), jnp.asarray(np.broadcast_to(i < n, rewards.shape))


def _advantages(rewards, valid, estimator, std_ddof, eps):
    from prs.core.advantages import group_advantages  # noqa: PLC0415 (sibling package, imported lazily)

    return group_advantages(rewards, estimator=estimator, valid=valid, std_ddof=std_ddof, eps=eps)


def advantage_moments(n_values: Any, *, kmax: int | None = None, estimator: str = "grpo",
                      std_ddof: int = 1, eps: float = 1e-6, dtype: Any = None) -> dict[str, jax.Array]:
    """Per-composition advantage moments for every group size in ``n_values`` ``[M]``.

    Returns ``{"sq": [M, K], "ar": [M, K], "a": [M, K]}`` with ``K = kmax + 1`` and, for row ``m``
    (group size ``n_m``) and column ``k <= n_m``: ``sq = (1/n)Σᵢ A²``, ``ar = (1/n)Σᵢ A·r``,
    ``a = (1/n)Σᵢ A``; zero for ``k > n_m``. One ``prs.group_advantages`` call on an
    ``[M·K, K−1 or more]`` padded batch (invalid slots masked).
    """
    c.check_choice("estimator", estimator, ESTIMATORS)
    ns = c.as_group_size("n_values", n_values).reshape(-1)
    kmax = int(ns.max()) if kmax is None else kmax
    w = max(kmax, 1)
    i = np.arange(w)[None, None, :]  # [1, 1, W]
    k = np.arange(kmax + 1)[None, :, None]  # [1, K, 1]
    nn = ns[:, None, None]  # [M, 1, 1]
    valid = np.broadcast_to(i < nn, (ns.size, kmax + 1, w))  # [M, K, W]
    rewards = ((i < k) & valid).astype(np.float64)  # [M, K, W]
    dtype = dtype or jnp.promote_types(jnp.float32, jnp.asarray(0.0).dtype)
    r = jnp.asarray(rewards, dtype=dtype)  # [M, K, W]
    inv_n = jnp.asarray(1.0 / ns, dtype=dtype)[:, None]  # [M, 1]
    keep = jnp.asarray(k[..., 0] <= ns[:, None])  # [M, K]
    return _moments_jit(r, jnp.asarray(valid), inv_n, keep, estimator, std_ddof, eps)


def _moments(r, valid, inv_n, keep, estimator, std_ddof, eps):
    m_, k_, w = r.shape
    adv = _advantages(r.reshape(-1, w), valid.reshape(-1, w), estimator, std_ddof, eps).reshape(m_, k_, w)

    def mean(x):  # [M, K, W] -> [M, K]
        return jnp.where(keep, jnp.sum(x, axis=-1) * inv_n, 0.0)

    return {"sq": mean(adv * adv), "ar": mean(adv * r), "a": mean(adv)}


_moments_jit = jax.jit(_moments, static_argnums=(4, 5, 6))


def _table_expectation(table: jax.Array, p: jax.Array, n: jax.Array, kmax: int) -> jax.Array:
    """``Σₖ P(k; n, p)·table[n-row, k]`` where ``table`` is ``[..., K]`` aligned with ``p``/``n``."""
    def values(ks, ne):
        del ne
        idx = ks.astype(jnp.int32)
        return jnp.take_along_axis(table, idx, axis=-1)

    return m._binomial_sum(values, p, n, kmax)


def _prepare(p, n):
    p = m._as_p(p)
    ns = c.as_group_size("n", n)
    if ns.ndim != 0:
        raise ValueError(f"n must be a scalar integer here, got shape {ns.shape}")
    return p, int(ns)


def expected_squared_advantage(p: Any, n: int, *, estimator: str = "grpo", std_ddof: int = 1,
                               eps: float = 1e-6) -> jax.Array:
    """``E[(1/n)Σᵢ A_i²]`` over ``k ~ Binomial(n, p)`` for ``estimator`` in grpo/dr_grpo/rloo.

    Exact: enumerates ``k = 0..n`` through ``prs.group_advantages`` (see module docstring).
    ``p`` any shape (may be traced), ``n`` a concrete int. Returns ``p``'s shape.
    """
    p, n = _prepare(p, n)
    tab = advantage_moments(n, estimator=estimator, std_ddof=std_ddof, eps=eps, dtype=p.dtype)["sq"][0]
    table = jnp.broadcast_to(tab, p.shape + tab.shape)  # [..., K]
    return _table_expectation(table, p, jnp.full(p.shape, float(n), p.dtype), n)


def expected_policy_gradient(p: Any, n: int, *, estimator: str = "grpo", std_ddof: int = 1,
                             eps: float = 1e-6) -> jax.Array:
    """Expected magnitude ``E|ĝ|`` of the one-logit policy gradient, ``ĝ = (1/n)Σᵢ A_i (r_i − p)``.

    For the three estimators ``Σᵢ A_i = 0`` and ``ĝ_k ∝ Σᵢ (r_i − r̄)² >= 0``, so ``E|ĝ| = E[ĝ]``;
    compare with the true gradient ``p(1−p)``. ``p`` any shape, ``n`` a concrete int.
    """
    p, n = _prepare(p, n)
    mom = advantage_moments(n, estimator=estimator, std_ddof=std_ddof, eps=eps, dtype=p.dtype)
    ar = jnp.broadcast_to(mom["ar"][0], p.shape + (n + 1,))  # [..., K]
    a = jnp.broadcast_to(mom["a"][0], p.shape + (n + 1,))
    g = jnp.abs(ar - p[..., None] * a)  # [..., K]
    return _table_expectation(g, p, jnp.full(p.shape, float(n), p.dtype), n)
