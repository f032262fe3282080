"""The partial-pass trap: a fractional test reward can make a surface patch beat an honest fix.

Toy model of the code-agent reward survey (see ``shared/context/code_agent_rewards.md``): a task
has ``s`` surface tests and ``m`` semantic tests, reward = fraction of tests passed.

- Strategy A (honest fix): succeeds with probability ``p_A`` (reward 1); on failure it earns
  ``fail_score``. The source gives 0.5 without deriving it from (s, m), so it is a free parameter
  (default 0.5), not ``s/(s+m)`` or any other formula.
- Strategy B (surface patch): passes exactly the ``s`` surface tests, reward ``r_B = s/(s+m)``.
  The source says "with probability ≈ 1"; we take it as 1 (B is deterministic).

``E[R|A] = p_A + (1 − p_A)·fail_score``, ``E[R|B] = r_B``; A is preferred iff
``p_A > p* = (r_B − fail_score)/(1 − fail_score)`` (0.4 for s = 7, m = 3, fail_score = 0.5; at
``p_A = 0.2``: E[R|A] = 0.6 < E[R|B] = 0.7).

GRPO view: each of the G rollouts of a group is independently B with probability ``q``
(``surface_fraction``), else A; so a rollout's type is A-success / A-fail / B with probabilities
``π = ((1−q)p_A, (1−q)(1−p_A), q)``. The expected advantage of a rollout of type t is
``E[A_i | type_i = t] = Σ_c Mult(c; G−1, π) · adv_t(c + e_t)``: the other G−1 rollouts' type counts
c are multinomial, and ``adv_t`` is ``prs.group_advantages`` (GRPO z-score by default) of the group
with composition ``c + e_t``. Exact by enumerating the ``G(G+1)/2`` compositions when that is small
enough, else Monte Carlo with a fixed seed.

Binary vs fraction reward: under the binary reward (1 iff all tests pass) only A-success scores 1
(B and A-fail score 0), so the trap disappears, but a group has contrast only with probability
``1 − π_s^G − (1 − π_s)^G``, ``π_s = (1−q)p_A``; under the fraction reward a group has contrast
unless all its rewards are equal: ``1 − Σ_v (Σ_{t: r_t = v} π_t)^G`` over distinct reward values v.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, xlogy

from theory import _checks as c

REWARDS = ("fraction", "binary")
TYPES = ("honest_success", "honest_fail", "surface")
_EXACT_LIMIT = 3_000_000  # compositions × 3 types × G reward slots enumerated at most


def _check_tests(surface_tests: Any, semantic_tests: Any) -> tuple[int, int]:
    (s,) = c.as_group_size("surface_tests", surface_tests, minimum=0).reshape(1).tolist()
    (mm,) = c.as_group_size("semantic_tests", semantic_tests, minimum=0).reshape(1).tolist()
    if s + mm < 1:
        raise ValueError(f"surface_tests + semantic_tests must be >= 1, got {s} + {mm}")
    return s, mm


def _check_score(name: str, x: Any) -> float:
    c.check_probability(name, x)
    if np.ndim(x) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {np.shape(x)}")
    return float(x)


def surface_reward(*, surface_tests: int = 7, semantic_tests: int = 3) -> float:
    """Reward of the surface patch B, ``r_B = s/(s+m)`` (0.7 for 7 surface + 3 semantic tests)."""
    s, mm = _check_tests(surface_tests, semantic_tests)
    return s / (s + mm)


def expected_reward_honest(p_honest: Any, *, fail_score: float = 0.5) -> jax.Array:
    """``E[R|A] = p_A + (1 − p_A)·fail_score`` (0.6 at p_A = 0.2, fail_score = 0.5)."""
    c.check_probability("p_honest", p_honest)
    f = _check_score("fail_score", fail_score)
    p = jnp.asarray(p_honest)
    p = p.astype(jnp.promote_types(p.dtype, jnp.float32))
    return p + (1.0 - p) * f


def break_even_p_honest(*, surface_tests: int = 7, semantic_tests: int = 3, fail_score: float = 0.5) -> float:
    """``p* = (r_B − fail_score)/(1 − fail_score)``: A has the higher expected reward iff p_A > p*.

    ``p* <= 0``: A always wins; ``p* >= 1``: A never wins. ``fail_score = 1`` raises ValueError.
    """
    f = _check_score("fail_score", fail_score)
    if f == 1.0:
        raise ValueError("fail_score must be < 1 (a failed honest fix scoring 1 has no break-even)")
    return (surface_reward(surface_tests=surface_tests, semantic_tests=semantic_tests) - f) / (1.0 - f)


def type_probabilities(p_honest: float, surface_fraction: float) -> np.ndarray:
    """``π = ((1−q)p_A, (1−q)(1−p_A), q)`` over (A-success, A-fail, B), ``[3]``."""
    pa = _check_score("p_honest", p_honest)
    q = _check_score("surface_fraction", surface_fraction)
    return np.array([(1.0 - q) * pa, (1.0 - q) * (1.0 - pa), q])


def contrast_probability(p_honest: Any, group_size: Any, *, surface_fraction: float = 0.0,
                         reward: str = "fraction", fail_score: float = 0.5, surface_tests: int = 7,
                         semantic_tests: int = 3) -> jax.Array:
    """Probability that a group of ``group_size`` rollouts has any reward contrast (see module doc).

    ``p_honest`` (any shape, may be traced) and ``group_size`` (concrete ints) broadcast.
    ``reward="binary"``: ``1 − π_s^G − (1−π_s)^G``; ``"fraction"``: ``1 − Σ_v P(value v)^G``.
    """
    c.check_choice("reward", reward, REWARDS)
    c.check_probability("p_honest", p_honest)
    q = _check_score("surface_fraction", surface_fraction)
    f = _check_score("fail_score", fail_score)
    r_b = surface_reward(surface_tests=surface_tests, semantic_tests=semantic_tests)
    g_np = c.as_group_size("group_size", group_size)
    p = jnp.asarray(p_honest)
    p = p.astype(jnp.promote_types(p.dtype, jnp.float32))
    shape = jnp.broadcast_shapes(p.shape, g_np.shape)
    p = jnp.broadcast_to(p, shape)
    g = jnp.broadcast_to(jnp.asarray(g_np, dtype=p.dtype), shape)
    probs = [(1.0 - q) * p, (1.0 - q) * (1.0 - p), jnp.full(shape, q, p.dtype)]
    values = (1.0, f, r_b) if reward == "fraction" else (1.0, 0.0, 0.0)
    same = 0.0
    for v in sorted(set(values)):  # static: at most three distinct reward values
        pv = sum(pr for pr, val in zip(probs, values) if val == v)
        same = same + pv**g
    return 1.0 - same


@dataclasses.dataclass(frozen=True)
class TypeAdvantages:
    """Expected advantage of a rollout given its type, and how it was computed."""

    honest_success: float
    honest_fail: float
    surface: float
    honest_mean: float  # p_A·honest_success + (1−p_A)·honest_fail: net push on honest attempts
    method: str  # "exact" or "monte_carlo(S samples, seed)"


def _compositions(m: int) -> np.ndarray:
    """All ``(a, b, c)`` with ``a + b + c = m``, ``[C, 3]``, C = (m+1)(m+2)/2."""
    a, b = np.meshgrid(np.arange(m + 1), np.arange(m + 1), indexing="ij")
    keep = a + b <= m
    a, b = a[keep], b[keep]
    return np.stack([a, b, m - a - b], axis=1)


def _advantages(rewards, estimator):
    from prs.core.advantages import group_advantages  # noqa: PLC0415

    return group_advantages(rewards, estimator=estimator)


def _exact(pi: jax.Array, values: jax.Array, g: int, estimator: str) -> jax.Array:
    """``E[A_i | type_i = t]`` ``[3]`` by enumerating the compositions of the other G−1 rollouts."""
    others = _compositions(g - 1)  # [C, 3]
    log_pmf = (gammaln(float(g)) - jnp.sum(gammaln(jnp.asarray(others + 1.0, pi.dtype)), axis=1)
               + jnp.sum(xlogy(jnp.asarray(others, pi.dtype), pi[None, :]), axis=1))  # [C]
    pmf = jnp.exp(log_pmf)
    counts = np.concatenate([others + np.eye(3, dtype=int)[t] for t in range(3)])  # [3C, 3]
    i = np.arange(g)[None, :]
    a, ab = counts[:, :1], counts[:, :1] + counts[:, 1:2]
    rewards = jnp.where(i < a, values[0], jnp.where(i < ab, values[1], values[2]))  # [3C, G]
    adv = _advantages(rewards, estimator).reshape(3, others.shape[0], g)  # [3, C, G]
    # The type-t rollout's slot: A-success first (slot 0), A-fail at slot a, B at slot a + b.
    pos = np.stack([np.zeros(len(others), int), others[:, 0], others[:, 0] + others[:, 1]])  # [3, C]
    own = jnp.take_along_axis(adv, jnp.asarray(pos)[..., None], axis=-1)[..., 0]  # [3, C]
    return jnp.sum(own * pmf[None, :], axis=1)


_exact_jit = jax.jit(_exact, static_argnums=(2, 3))


def grpo_type_advantages(p_honest: float = 0.2, surface_fraction: float = 0.75, *, group_size: int = 16,
                         fail_score: float = 0.5, surface_tests: int = 7, semantic_tests: int = 3,
                         estimator: str = "grpo", method: str = "auto", num_samples: int = 20_000,
                         seed: int = 0) -> TypeAdvantages:
    """Expected group-relative advantage of an A-success, an A-fail and a B rollout (module doc).

    ``method``: ``"exact"`` enumerates the multinomial compositions of the other G−1 rollouts,
    ``"monte_carlo"`` samples ``num_samples`` groups with ``jax.random.key(seed)``, ``"auto"`` is
    exact when ``(G(G+1)/2)·3·G <= 3e6`` (G <= ~110). The conditional advantage of a type with
    probability 0 is still defined by the exact method (the advantage such a rollout would get);
    Monte Carlo reports 0 for a type it never sampled. Computed in float64.
    """
    c.check_choice("method", method, ("auto", "exact", "monte_carlo"))
    (g,) = c.as_group_size("group_size", group_size, minimum=2).reshape(1).tolist()
    pi = type_probabilities(p_honest, surface_fraction)
    f = _check_score("fail_score", fail_score)
    values = np.array([1.0, f, surface_reward(surface_tests=surface_tests, semantic_tests=semantic_tests)])
    n_comp = g * (g + 1) // 2
    if method == "auto":
        method = "exact" if n_comp * 3 * g <= _EXACT_LIMIT else "monte_carlo"
    with jax.enable_x64(True):
        if method == "exact":
            exp_adv = np.asarray(_exact_jit(jnp.asarray(pi), jnp.asarray(values), g, estimator))  # [3]
            label = "exact"
        else:
            key = jax.random.key(seed)
            types = jax.random.categorical(key, jnp.log(jnp.asarray(pi)), shape=(num_samples, g))  # [S, G]
            rewards = jnp.asarray(values)[types]  # [S, G]
            adv = _advantages(rewards, estimator)
            onehot = jax.nn.one_hot(types, 3, dtype=adv.dtype)  # [S, G, 3]
            tot = jnp.einsum("sg,sgt->t", adv, onehot)
            cnt = jnp.sum(onehot, axis=(0, 1))
            exp_adv = np.asarray(jnp.where(cnt > 0, tot / jnp.maximum(cnt, 1.0), 0.0))
            label = f"monte_carlo({num_samples} groups, seed {seed})"
    pa = float(p_honest)
    return TypeAdvantages(float(exp_adv[0]), float(exp_adv[1]), float(exp_adv[2]),
                          pa * float(exp_adv[0]) + (1.0 - pa) * float(exp_adv[1]), label)


@dataclasses.dataclass(frozen=True)
class PartialPassReport:
    surface_tests: int
    semantic_tests: int
    p_honest: float
    fail_score: float
    group_size: int
    expected_reward_honest: float
    expected_reward_surface: float
    break_even_p_honest: float
    advantages: dict[float, TypeAdvantages]  # surface_fraction q -> expected advantages
    contrast_surface_fraction: float
    contrast_p: tuple[float, ...]
    contrast: dict[str, dict[int, tuple[float, ...]]]  # reward kind -> {G: P(contrast) per p_A}

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["advantages"] = {str(q): dataclasses.asdict(a) for q, a in self.advantages.items()}
        d["contrast"] = {kind: {str(g): list(v) for g, v in rows.items()} for kind, rows in self.contrast.items()}
        return d

    def format(self) -> str:
        lines = [
            f"partial-pass trap: {self.surface_tests} surface + {self.semantic_tests} semantic tests, "
            f"honest fix p_A = {self.p_honest:g} (failed fix scores {self.fail_score:g})",
            f"  E[R|A honest] = {self.expected_reward_honest:.3f}   E[R|B surface] = "
            f"{self.expected_reward_surface:.3f}   break-even p_A = {self.break_even_p_honest:.3f}",
            f"  GRPO (G = {self.group_size}) expected advantage by rollout type, q = fraction of B rollouts:",
            f"  {'q':>5} {'A success':>10} {'A fail':>10} {'B':>10} {'A overall':>10}  method",
        ]
        for q, a in self.advantages.items():
            lines.append(f"  {q:>5.2f} {a.honest_success:>10.4f} {a.honest_fail:>10.4f} {a.surface:>10.4f} "
                         f"{a.honest_mean:>10.4f}  {a.method}")
        lines.append(f"  P(group has any reward contrast), q = {self.contrast_surface_fraction:g}: "
                     "fraction reward vs binary reward (1 iff all tests pass)")
        lines.append("  " + f"{'reward':>9} {'G':>4}" + "".join(f"  p_A={p:<5g}" for p in self.contrast_p))
        for kind, rows in self.contrast.items():
            for g, vals in rows.items():
                lines.append("  " + f"{kind:>9} {g:>4}" + "".join(f"{v:>12.4f}" for v in vals))
        return "\n".join(lines)


def partial_pass_analysis(*, surface_tests: int = 7, semantic_tests: int = 3, p_honest: float = 0.2,
                          fail_score: float = 0.5, group_size: int = 16,
                          surface_fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9),
                          contrast_p: tuple[float, ...] = (0.01, 0.05, 0.1, 0.2, 0.4),
                          contrast_group_sizes: tuple[int, ...] = (4, 8, 16, 32),
                          contrast_surface_fraction: float = 0.75) -> PartialPassReport:
    """Everything above for one task: expected rewards, break-even, GRPO advantages per q, contrast.

    The contrast rows compare the fraction reward with the fully binary reward for groups with a
    fraction ``contrast_surface_fraction`` of B rollouts, for each ``p_A`` and group size. (With no
    B rollouts, q = 0, both rewards give contrast on the same event, a mix of A successes and
    failures, so they agree; the gap is what the surface patches add to the fraction reward.)
    """
    with jax.enable_x64(True):
        ps = jnp.asarray(contrast_p, dtype=jnp.float64)[None, :]  # [1, P]
        gs = np.asarray(contrast_group_sizes)[:, None]  # [Gs, 1]
        contrast = {}
        for kind in REWARDS:
            tab = np.asarray(contrast_probability(
                ps, gs, surface_fraction=contrast_surface_fraction, reward=kind, fail_score=fail_score,
                surface_tests=surface_tests, semantic_tests=semantic_tests))  # [Gs, P]
            contrast[kind] = {int(g): tuple(row.tolist()) for g, row in zip(gs[:, 0], tab)}
        era = float(expected_reward_honest(jnp.float64(p_honest), fail_score=fail_score))
    return PartialPassReport(
        surface_tests, semantic_tests, p_honest, fail_score, group_size, era,
        surface_reward(surface_tests=surface_tests, semantic_tests=semantic_tests),
        break_even_p_honest(surface_tests=surface_tests, semantic_tests=semantic_tests, fail_score=fail_score),
        {q: grpo_type_advantages(p_honest, q, group_size=group_size, fail_score=fail_score,
                                 surface_tests=surface_tests, semantic_tests=semantic_tests) for q in surface_fractions},
        contrast_surface_fraction, tuple(contrast_p), contrast)
