"""Pass-rate metrics of a binary-reward group and their finite-n expectations.

A task with true success probability ``p`` is rolled out ``n`` times; ``k ~ Binomial(n, p)`` of the
rollouts succeed and the group's empirical pass rate is ``k / n``. The four metrics of Zhu et al.
2026 ("Rollout Pass-Rate Control", arXiv:2605.05112, Sec. 2 / Fig. 2) all peak at ``p = 1/2``:

- reward entropy          ``H(p) = −p log₂ p − (1−p) log₂(1−p)``              (bits)
- advantage energy        ``p(1−p)``; realised: group reward variance ``k(n−k)/n²``
- contrast pairs          ``k(n−k)`` (success/failure pairs in the group)
- filter survival         ``1 − pⁿ − (1−p)ⁿ`` (probability that the group is mixed and survives
                          DAPO-style group filtering); realised: ``1[0 < k < n]``

``expected_*`` functions sum ``Σₖ C(n,k) pᵏ(1−p)ⁿ⁻ᵏ h(k, n)`` exactly over ``k = 0..n``; the
``*_closed_form`` functions give the known closed forms (tests check that both agree):
``E[k(n−k)] = n(n−1)p(1−p)``, ``E[k(n−k)/n²] = (n−1)p(1−p)/n``, ``E[1[0<k<n]] = 1 − pⁿ − (1−p)ⁿ``.
``E[H(k/n)]`` has no closed form.

Precision: everything is computed in the dtype of ``p`` promoted to at least float32. Nothing here
turns on ``jax_enable_x64``; callers that need float64 (``check_optimum``, the bucket table, the CLI)
wrap the call in ``with jax.enable_x64(True):`` and pass float64 ``p``. ``p`` may be traced under
``jax.jit``; ``n`` must be concrete (static) because it fixes the number of terms.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.scipy.special import gammaln, xlog1py, xlogy

from theory import _checks as c

_LN2 = math.log(2.0)


def _float(x: Any) -> jax.Array:
    x = jnp.asarray(x)
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def _as_p(p: Any, name: str = "p") -> jax.Array:
    c.check_probability(name, p)
    return _float(p)


def _broadcast(*xs: jax.Array) -> list[jax.Array]:
    shape = jnp.broadcast_shapes(*(x.shape for x in xs))
    return [jnp.broadcast_to(x, shape) for x in xs]


# ----------------------------------------------------------------------------------- metrics of p
def reward_entropy(p: Any) -> jax.Array:
    """Entropy of a Bernoulli(p) reward in bits, ``H(p) = −p log₂ p − (1−p) log₂(1−p)``.

    ``H(0) = H(1) = 0`` exactly (``xlogy``), ``H(1/2) = 1``. Zhu et al. 2026, arXiv:2605.05112, Fig. 2.
    """
    p = _as_p(p)
    return (0.0 - xlogy(p, p) - xlog1py(1.0 - p, -p)) / _LN2  # 0.0 - ...: H(0) = +0.0, not -0.0


def advantage_energy(p: Any) -> jax.Array:
    """GRPO advantage energy ``p(1−p)``: the variance of a Bernoulli(p) reward.

    The expected squared (un-normalised) advantage ``E[(r − p)²]``; ``1/4`` at ``p = 1/2``.
    Zhu et al. 2026, arXiv:2605.05112, Sec. 2.
    """
    p = _as_p(p)
    return p * (1.0 - p)


def filter_survival(p: Any, n: Any) -> jax.Array:
    """Probability that a group of ``n`` Bernoulli(p) rewards is mixed: ``1 − pⁿ − (1−p)ⁿ``.

    A mixed group (``0 < k < n``) survives group filtering (DAPO dynamic sampling, Yu et al. 2025,
    arXiv:2503.14476). Zhu et al. 2026 (arXiv:2605.05112) quote 0.656 at p = 1/8 and 0.992 at
    p = 1/2 for n = 8. ``n`` (int or integer array, concrete) broadcasts against ``p``.
    """
    p = _as_p(p)
    nn = jnp.asarray(c.as_group_size("n", n), dtype=p.dtype)
    p, nn = _broadcast(p, nn)
    return 1.0 - p**nn - (1.0 - p) ** nn


# ---------------------------------------------------------------------- metrics of a realised k
def _kn(k: Any, n: Any) -> tuple[jax.Array, jax.Array]:
    nn = c.as_group_size("n", n)
    c.check_successes(k, nn)
    kk = _float(k)
    return _broadcast(kk, jnp.asarray(nn, dtype=kk.dtype))


def group_reward_variance(k: Any, n: Any) -> jax.Array:
    """Population variance of a group with ``k`` ones among ``n`` rewards: ``k(n−k)/n²``.

    The realised advantage energy (Zhu et al. 2026, arXiv:2605.05112: 7/64 at k = 1, n = 8).
    """
    k, n = _kn(k, n)
    return k * (n - k) / (n * n)


def contrast_pairs(k: Any, n: Any) -> jax.Array:
    """Number of (success, failure) pairs in the group, ``k(n−k)`` (7 at k=1, 16 at k=4 for n=8)."""
    k, n = _kn(k, n)
    return k * (n - k)


def empirical_entropy(k: Any, n: Any) -> jax.Array:
    """Reward entropy of the empirical pass rate, ``H(k/n)`` in bits."""
    k, n = _kn(k, n)
    return reward_entropy(k / n)


def group_survives(k: Any, n: Any) -> jax.Array:
    """``1[0 < k < n]`` as a float: the group is mixed and survives group filtering."""
    k, n = _kn(k, n)
    return ((k > 0) & (k < n)).astype(k.dtype)


# ------------------------------------------------------------------------------- expectations
def _binomial_pmf(p: jax.Array, n: jax.Array, kmax: int) -> tuple[jax.Array, ...]:
    """Binomial pmf ``C(n,k) pᵏ(1−p)ⁿ⁻ᵏ`` on a static ``k = 0..kmax`` axis, 0 for ``k > n``.

    ``p``, ``n`` of one rank ``[...]`` (broadcastable). Returns ``(pmf [..., K], k, n[..., None],
    inside)`` with ``k`` set to 0 where ``k > n`` (``inside`` False there). Log space (``gammaln``, ``xlogy``); the end terms
    ``k ∈ {0, n}`` use ``C = 1`` exactly, so the pmf is exact at ``p ∈ {0, 1}``.
    """
    ndim = max(p.ndim, n.ndim)
    k = jnp.arange(kmax + 1, dtype=p.dtype).reshape((1,) * ndim + (kmax + 1,))  # [..., K]
    pe, ne = p[..., None], n[..., None]  # [..., 1]
    inside = k <= ne  # [..., K]
    ks = jnp.where(inside, k, 0.0)
    log_comb = gammaln(ne + 1.0) - gammaln(ks + 1.0) - gammaln(ne - ks + 1.0)
    log_comb = jnp.where((ks == 0) | (ks == ne), 0.0, log_comb)  # exact pmf at p ∈ {0, 1}
    log_pmf = log_comb + xlogy(ks, pe) + xlog1py(ne - ks, -pe)  # [..., K]
    return jnp.where(inside, jnp.exp(log_pmf), 0.0), ks, ne, inside


def _binomial_sum(values: Callable[[jax.Array, jax.Array], jax.Array], p: jax.Array,
                  n: jax.Array, kmax: int) -> jax.Array:
    """``Σₖ₌₀ⁿ C(n,k) pᵏ (1−p)ⁿ⁻ᵏ values(k, n)`` for ``p``, ``n`` of one shape ``[...]``.

    ``k`` runs over a static axis ``0..kmax`` (``kmax >= max n``); terms with ``k > n`` are masked,
    so one compiled shape serves every ``n <= kmax``. The pmf is formed in log space
    (``gammaln``, ``xlogy``), exact at ``p ∈ {0, 1}``.
    """
    pmf, ks, ne, inside = _binomial_pmf(p, n, kmax)  # [..., K]
    vals = jnp.where(inside, values(ks, ne), 0.0)
    # Σₖ P(k) = 1, so E[h] = h_c + Σₖ P(k)(h(k) − h_c) for any constant h_c. Centring on the middle
    # term h_c = h(⌊n/2⌋) removes most of the cancellation in flat metrics (survival at large n),
    # which keeps the sign of ∂E/∂p right near p = 1/2 (check_optimum bisects on it).
    centre = jnp.take_along_axis(vals, jnp.floor(ne / 2.0).astype(jnp.int32), axis=-1)  # [..., 1]
    return centre[..., 0] + jnp.sum(pmf * (vals - centre), axis=-1)


# One compile per (values function, shape, kmax) instead of ~20 eager dispatches per call.
_binomial_sum_jit = jax.jit(_binomial_sum, static_argnums=(0, 3))


def binomial_expectation(values: Callable[[jax.Array, jax.Array], jax.Array], p: Any, n: Any) -> jax.Array:
    """``E[h(k, n)] = Σₖ₌₀ⁿ C(n,k) pᵏ(1−p)ⁿ⁻ᵏ h(k, n)`` for ``k ~ Binomial(n, p)``.

    ``values(k, n)`` is an elementwise jnp function of float ``k`` and ``n`` arrays. ``p`` and ``n``
    (concrete ints) broadcast; the result has their broadcast shape.
    """
    p = _as_p(p)
    nn = c.as_group_size("n", n)
    p, nf = _broadcast(p, jnp.asarray(nn, dtype=p.dtype))
    return _binomial_sum_jit(values, p, nf, int(nn.max()))


def _h_entropy(k, n):
    return reward_entropy(k / n)


def _h_variance(k, n):
    return k * (n - k) / (n * n)


def _h_pairs(k, n):
    return k * (n - k)


def _h_survives(k, n):
    return ((k > 0) & (k < n)).astype(k.dtype)


def expected_empirical_entropy(p: Any, n: Any) -> jax.Array:
    """``E[H(k/n)]``, ``k ~ Binomial(n, p)``: exact sum over k (no closed form). ``< H(p)`` (Jensen)."""
    return binomial_expectation(_h_entropy, p, n)


def expected_group_variance(p: Any, n: Any) -> jax.Array:
    """``E[k(n−k)/n²]`` by exact summation over ``k``; closed form ``(n−1)p(1−p)/n``."""
    return binomial_expectation(_h_variance, p, n)


def expected_contrast_pairs(p: Any, n: Any) -> jax.Array:
    """``E[k(n−k)]`` by exact summation over ``k``; closed form ``n(n−1)p(1−p)``."""
    return binomial_expectation(_h_pairs, p, n)


def expected_survival(p: Any, n: Any) -> jax.Array:
    """``E[1[0<k<n]]`` by exact summation over ``k``; closed form ``1 − pⁿ − (1−p)ⁿ``."""
    return binomial_expectation(_h_survives, p, n)


def expected_group_variance_closed_form(p: Any, n: Any) -> jax.Array:
    """``E[k(n−k)/n²] = (n−1)p(1−p)/n``: ``E[k(n−k)] = nE[k] − E[k²] = n²p − np(1−p) − n²p²``."""
    p = _as_p(p)
    nf = jnp.asarray(c.as_group_size("n", n), dtype=p.dtype)
    p, nf = _broadcast(p, nf)
    return (nf - 1.0) * p * (1.0 - p) / nf


def expected_contrast_pairs_closed_form(p: Any, n: Any) -> jax.Array:
    """``E[k(n−k)] = n(n−1)p(1−p)`` (Zhu et al. 2026, arXiv:2605.05112)."""
    p = _as_p(p)
    nf = jnp.asarray(c.as_group_size("n", n), dtype=p.dtype)
    p, nf = _broadcast(p, nf)
    return nf * (nf - 1.0) * p * (1.0 - p)
