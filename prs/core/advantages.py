"""Group-relative advantages, pass rates and the mixed-group filter for binary-reward RL.

All functions take one reward per rollout laid out as ``[B, N]`` (B groups/tasks, N rollouts per
group) and an optional ``valid`` mask ``[B, N]`` (bool) marking the rollouts that take part in
training. An excluded rollout (``valid = False``) gets advantage exactly 0 and does not move its
group's baseline or std (the bug fixed by verl PR #6452). Everything is vectorised over groups (no
Python loop over group ids, unlike verl's torch ``compute_grpo_outcome_advantage``) and jittable;
``estimator``/``rule``/``singleton`` are static configuration.

Conventions follow verl @1dda039, TRL @f2cd577, tunix, rLLM and OpenRLHF (see
``shared/context/peer_conventions.md``). For ``r = [1, 0, 0, 0]``:
GRPO ``[1.5, -0.5, -0.5, -0.5]``, Dr.GRPO ``[0.75, -0.25, ...]``, RLOO ``[1, -1/3, ...]``;
TRL's ``eps=1e-4`` gives ``[1.4997, ...]`` and rLLM's ``std_ddof=0`` gives ``[1.732, -0.577, ...]``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from prs.core import _validate as v

ESTIMATORS = ("grpo", "dr_grpo", "rloo", "rloo_std", "reinforce_pp", "reinforce_pp_baseline")
SINGLETON_MODES = ("zero", "raw")
MIXED_RULES = ("std", "minmax")


def _prepare(rewards, valid):
    """Checks ``rewards [B, N]`` / ``valid [B, N]`` and returns (r in compute dtype, mask, out dtype)."""
    v.check_rank("rewards", rewards, 2)
    v.check_dtype_kind("rewards", rewards, "biuf")
    rewards = jnp.asarray(rewards)
    out_dtype = rewards.dtype if jnp.issubdtype(rewards.dtype, jnp.floating) else jnp.float32
    # Compute in at least float32 (bf16/f16 sums over N lose too much), hand back the input dtype.
    compute_dtype = jnp.promote_types(out_dtype, jnp.float32)
    r = rewards.astype(compute_dtype)  # [B, N]
    if valid is None:
        mask = jnp.ones(r.shape, dtype=bool)  # [B, N]
    else:
        v.check_dtype_kind("valid", valid, "b")
        v.check_same_shape(rewards=rewards, valid=valid)
        mask = jnp.asarray(valid)
    return r, mask, out_dtype


def _group_moments(r, mask):
    """Masked count, sum, mean and "all valid rewards equal" flag per group.

    Returns n ``[B, 1]`` (float), s ``[B, 1]``, mean ``[B, 1]`` (0 for an empty group) and
    constant ``[B, 1]`` (True when max == min over the valid rewards, or fewer than 2 are valid).
    """
    m = mask.astype(r.dtype)  # [B, N]
    n = jnp.sum(m, axis=1, keepdims=True)  # [B, 1]
    s = jnp.sum(r * m, axis=1, keepdims=True)  # [B, 1]
    mean = s / jnp.maximum(n, 1.0)  # [B, 1]
    hi = jnp.max(jnp.where(mask, r, -jnp.inf), axis=1, keepdims=True)  # [B, 1]
    lo = jnp.min(jnp.where(mask, r, jnp.inf), axis=1, keepdims=True)  # [B, 1]
    constant = ~(hi > lo)  # [B, 1]; empty groups: -inf > inf is False -> constant
    return n, s, mean, constant


def _group_std(r, mask, n, mean, ddof):
    """Masked std with ``ddof``; 0 where the group has <= ddof valid rollouts. Safe-gradient sqrt."""
    m = mask.astype(r.dtype)
    dev = jnp.where(mask, r - mean, 0.0)  # [B, N]
    var = jnp.sum(dev * dev * m, axis=1, keepdims=True) / jnp.maximum(n - ddof, 1.0)  # [B, 1]
    pos = var > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, var, 1.0)), 0.0)  # [B, 1]


def group_advantages(
    rewards: jax.Array,
    *,
    estimator: str = "grpo",
    valid: jax.Array | None = None,
    std_ddof: int = 1,
    eps: float = 1e-6,
    singleton: str = "zero",
    lengths: jax.Array | None = None,
) -> jax.Array:
    """Group-relative advantage of each rollout, ``[B, N]``.

    With ``m`` the valid mask, ``n = Σ m``, ``μ = Σ m·r / n`` and
    ``σ = sqrt(Σ m·(r − μ)² / (n − std_ddof))`` per group:

    - ``"grpo"``:     ``A = (r − μ) / (σ + eps)``  (Shao et al. 2024, arXiv:2402.03300; verl/tunix
      ``eps=1e-6``, TRL ``eps=1e-4``, OpenRLHF ``eps=1e-9``; rLLM ``std_ddof=0``).
    - ``"dr_grpo"``:  ``A = r − μ``  (Liu et al. 2025, "Understanding R1-Zero-Like Training",
      arXiv:2503.20783).
    - ``"rloo"``:     ``A = r − (Σ m·r − r) / (n − 1) = n/(n−1)·(r − μ)``  (Ahmadian et al. 2024,
      arXiv:2402.14740; the GRPO++/DeepSWE recipe's leave-one-out baseline without std).
    - ``"reinforce_pp"``: ``A = whiten_advantages(r)`` over the whole batch, no group baseline
      (REINFORCE++, Hu et al. 2025, arXiv:2501.03262; verl
      ``compute_reinforce_plus_plus_outcome_advantage`` with γ = 1 on an outcome reward).
    - ``"reinforce_pp_baseline"``: ``A = whiten_advantages(r − μ)`` (verl
      ``compute_reinforce_plus_plus_baseline_outcome_advantage``: group mean, then batch whitening).
      For both, ``eps`` is added to the batch *variance* (verl ``masked_whiten``: ``1e-8``) and
      ``lengths`` (tokens per rollout) weights the batch statistics as verl's per-token whitening does.
    - ``"rloo_std"``: ``A = (r − (Σ m·r − r)/(n − 1)) / (σ + eps)`` with σ the std of the WHOLE group,
      not a leave-one-out std. The leave-one-out std is 0 for the lone success in ``[1, 0, 0, 0]``,
      which is how NeMo-RL #1518 reached ±1e6; the whole-group σ is > 0 whenever the numerator is
      non-zero, and since ``|r − μ| <= sqrt(n − 1)·σ`` for any group, ``|A| <= n / sqrt(n − 1)``.

    The variance is never floored at ``eps`` (verl PR #6348 floored it and shrank low-variance
    advantages ~100×); ``eps`` is added to σ, as in every peer.

    Degenerate groups give 0, never NaN/Inf: excluded rollouts get 0; a group whose valid rewards are
    all equal (all 0, all 1, one valid rollout, none valid) gives exactly 0 (we test max == min rather
    than σ > 0, so rounding in μ cannot turn a constant group into ±tiny/eps noise).

    Singletons: with ``singleton="zero"`` (default) a group with one valid rollout gives 0: one
    rollout has no group to be relative to, and pushing its raw reward would reward easy tasks with no
    contrast. ``singleton="raw"`` reproduces verl, which sets μ = 0, σ = 1 for a singleton group, so
    its advantage is ``r / (1 + eps)`` for ``"grpo"``/``"rloo_std"`` and ``r`` for ``"dr_grpo"``/
    ``"rloo"`` (verl's RLOO leaves a singleton's score unchanged).

    Args:
      rewards: ``[B, N]`` rewards (bool/int/float; ints and bools are treated as float32).
      estimator: one of ``"grpo"``, ``"dr_grpo"``, ``"rloo"``, ``"rloo_std"`` (static).
      valid: optional ``[B, N]`` bool; False marks rollouts excluded from training.
      std_ddof: delta degrees of freedom of σ (1 = sample std as in verl/TRL, 0 = population std).
      eps: added to σ in the denominator.
      singleton: ``"zero"`` or ``"raw"`` (verl), see above.
      lengths: optional ``[B, N]`` token counts for the ``reinforce_pp*`` batch statistics.

    Returns:
      ``[B, N]`` advantages in the rewards' float dtype (float32 for int/bool rewards).
    """
    if estimator in ("reinforce_pp", "reinforce_pp_baseline"):
        v.check_choice("singleton", singleton, SINGLETON_MODES)
        if estimator == "reinforce_pp":
            r, _, out_dtype = _prepare(rewards, valid)
            x = r
        else:
            x = group_advantages(rewards, estimator="dr_grpo", valid=valid, singleton=singleton)
        w = whiten_advantages(x, valid, lengths=lengths, std_ddof=std_ddof, eps=eps)
        return w.astype(x.dtype if estimator != "reinforce_pp" else out_dtype)
    if lengths is not None:
        raise ValueError(f"lengths is used by the 'reinforce_pp*' estimators only, got estimator={estimator!r}")
    v.check_choice("estimator", estimator, ESTIMATORS)
    v.check_choice("singleton", singleton, SINGLETON_MODES)
    if not isinstance(std_ddof, int) or std_ddof < 0:
        raise ValueError(f"std_ddof must be an int >= 0, got {std_ddof!r}")
    v.check_nonnegative("eps", eps)
    r, mask, out_dtype = _prepare(rewards, valid)

    n, s, mean, constant = _group_moments(r, mask)  # [B, 1] each
    if estimator in ("grpo", "dr_grpo"):
        centred = r - mean  # [B, N]
    else:  # leave-one-out baseline; only used where n >= 2 (constant covers n < 2)
        centred = r - (s - r) / jnp.maximum(n - 1.0, 1.0)  # [B, N]
    if estimator in ("grpo", "rloo_std"):
        sigma = _group_std(r, mask, n, mean, std_ddof)  # [B, 1]
        adv = centred / (sigma + eps)
    else:
        adv = centred
    adv = jnp.where(constant, 0.0, adv)  # [B, N]

    if singleton == "raw":
        scale = 1.0 / (1.0 + eps) if estimator in ("grpo", "rloo_std") else 1.0
        adv = jnp.where(n == 1, r * scale, adv)
    adv = jnp.where(mask, adv, 0.0)
    return adv.astype(out_dtype)


def group_pass_rates(
    rewards: jax.Array, valid: jax.Array | None = None, *, threshold: float = 0.0
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Successes ``k``, valid rollouts ``n`` and pass rate ``p = k / n`` per group.

    A rollout succeeds iff its reward ``> threshold`` (0/1 and ±1 rewards both work with the default
    0). ``k = Σ m·[r > threshold]``, ``n = Σ m``, ``p = k / n`` and ``p = 0`` where ``n = 0``
    (Zhu et al. 2026, arXiv:2605.05112: p = k/N buckets the group).

    Args:
      rewards: ``[B, N]`` rewards.
      valid: optional ``[B, N]`` bool mask of rollouts that count.
      threshold: success threshold (static or traced scalar).

    Returns:
      ``(k [B] int32, n [B] int32, p [B] float32)``.
    """
    r, mask, _ = _prepare(rewards, valid)
    k = jnp.sum(mask & (r > threshold), axis=1, dtype=jnp.int32)  # [B]
    n = jnp.sum(mask, axis=1, dtype=jnp.int32)  # [B]
    p = jnp.where(n > 0, k.astype(jnp.float32) / jnp.maximum(n, 1).astype(jnp.float32), 0.0)  # [B]
    return k, n, p


def mixed_groups(rewards: jax.Array, valid: jax.Array | None = None, *, rule: str = "std") -> jax.Array:
    """``[B]`` bool: keep a group iff its valid rewards are not all equal (DAPO dynamic sampling).

    - ``rule="std"`` (DAPO, Yu et al. 2025, arXiv:2503.14476; verl recipe keeps iff std(r) > 0):
      evaluated exactly as ``max r > min r`` over valid rollouts, so a constant group of non-binary
      rewards is dropped even if a rounded float std would be ~1e-17.
    - ``rule="minmax"`` (OpenRLHF): keep iff ``min r < μ < max r`` with μ the float mean over valid
      rollouts. Mathematically the same set as ``"std"``; they can differ only through rounding of μ.

    Groups with fewer than two valid rollouts are never mixed.
    """
    v.check_choice("rule", rule, MIXED_RULES)
    r, mask, _ = _prepare(rewards, valid)
    n, _, mean, constant = _group_moments(r, mask)
    if rule == "std":
        keep = ~constant
    else:
        hi = jnp.max(jnp.where(mask, r, -jnp.inf), axis=1, keepdims=True)
        lo = jnp.min(jnp.where(mask, r, jnp.inf), axis=1, keepdims=True)
        keep = (lo < mean) & (mean < hi) & (n >= 2)
    return keep[:, 0]


def whiten_advantages(
    advantages: jax.Array,
    valid: jax.Array | None = None,
    *,
    lengths: jax.Array | None = None,
    std_ddof: int = 1,
    eps: float = 1e-8,
) -> jax.Array:
    """Batch whitening ``(A − μ) / sqrt(σ² + eps)`` over every valid rollout of ``[B, N]``.

    With weights ``w = m · lengths`` (``lengths=None``: ``w = m``), ``W = Σ w``::

        μ = Σ w·A / W,   σ² = Σ w·(A − μ)² / (W − std_ddof)

    verl ``masked_whiten`` (``verl/utils/torch_functional.py``; tunix ``algo_core.masked_whiten`` is
    the same) whitens per TOKEN with Bessel's correction on the token count: passing ``lengths = Σₜ
    loss_mask`` reproduces it exactly (a rollout of L tokens counts L times). Used by REINFORCE++
    (arXiv:2501.03262) and as an option after any group estimator.

    Degenerate batches give 0, never NaN: excluded rollouts get 0; when every valid advantage is
    equal, or ``W <= std_ddof`` (verl raises there), the result is 0.

    Args:
      advantages: ``[B, N]`` floating.  valid: optional ``[B, N]`` bool.
      lengths: optional ``[B, N]`` non-negative token counts (weights).
      std_ddof: 1 (verl's unbiased variance) or 0.  eps: added to the variance, >= 0.
    """
    if not isinstance(std_ddof, int) or std_ddof < 0:
        raise ValueError(f"std_ddof must be an int >= 0, got {std_ddof!r}")
    v.check_nonnegative("eps", eps)
    v.check_dtype_kind("advantages", advantages, "f")
    x, mask, out_dtype = _prepare(advantages, valid)
    x = jnp.where(mask, x, 0.0)  # [B, N]; NaN on excluded rollouts never enters the sums
    if lengths is None:
        w = mask.astype(x.dtype)
    else:
        v.check_dtype_kind("lengths", lengths, "iuf")
        v.check_same_shape(advantages=advantages, lengths=lengths)
        w = jnp.where(mask, jnp.asarray(lengths).astype(x.dtype), 0.0)  # [B, N]
    total = jnp.sum(w)
    mean = jnp.sum(w * x) / jnp.maximum(total, 1e-30)
    dev = jnp.where(mask, x - mean, 0.0)
    var = jnp.sum(w * dev * dev) / jnp.maximum(total - std_ddof, 1e-30)
    live = mask & (w > 0)
    hi = jnp.max(jnp.where(live, x, -jnp.inf))
    lo = jnp.min(jnp.where(live, x, jnp.inf))
    ok = (hi > lo) & (total > std_ddof)
    out = jnp.where(ok & mask, dev * jax.lax.rsqrt(jnp.where(ok, var + eps, 1.0)), 0.0)
    return out.astype(out_dtype)
