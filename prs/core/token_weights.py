"""Per-token weights of the policy-gradient term: rollout correction and high-entropy token selection.

Both return a detached ``[R, T]`` array for ``policy_loss(..., pg_weights=w)``, which multiplies the
policy-gradient term only (never the KL or entropy terms), as verl (``rollout_is_weights``), TRL
(``importance_sampling_ratio``, ``entropy_mask``) and tunix (``sampler_is_weights``) do. Weights are 0
on masked tokens; NaN/Inf there is ignored (double ``where``). Combine them by multiplying.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from prs.core import _validate as v

IS_LEVELS = ("token", "sequence")
IS_MODES = ("truncate", "mask")
_SAFETY_BOUND = 20.0  # verl rollout_corr_helper.SAFETY_BOUND: log-ratio clamp before exp


def rollout_correction(
    old_logp: jax.Array,
    sampler_logp: jax.Array,
    loss_mask: jax.Array,
    *,
    level: str = "token",
    mode: str = "truncate",
    c_max: float = 2.0,
    c_min: float | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Importance weights for the sampler/trainer mismatch, ``[R, T]`` float32 (detached).

    With ``m`` the mask and ``δₜ = m·(old_logp − sampler_logp)`` (π_old the trainer's policy, π_s the
    distribution the sampler actually drew from)::

        ρₜ = exp(clamp(δₜ, ±20))                  level="token"
        ρₜ = exp(clamp(Σ_u δ_u, ±20)) for all t    level="sequence" (product of token ratios)
        w = clip(ρ, c_min, c_max)                  mode="truncate"   (TIS; c_min=None: upper only)
        w = ρ · [c_min <= ρ <= c_max]              mode="mask"       (MIS / IcePop; c_min=None: 0)

    - Token-TIS (verl ``decoupled_token_is``, tunix ``sampler_is="token"``, threshold 2):
      ``level="token", mode="truncate", c_max=2``. Seq-TIS: ``level="sequence"``.
    - IcePop (arXiv:2510.18855; TRL's ``token_mask`` with (0.5, 5.0)): ``level="token", mode="mask",
      c_min=0.5, c_max=5``. Seq-MIS (TRL default ``sequence_mask``, clip_max 3; verl
      ``decoupled_seq_is_rs``): ``level="sequence", mode="mask"``.

    Semantics follow TRL's ``vllm_importance_sampling_mode`` (``grpo_trainer.py``): a rejected token has
    weight 0 and stays in the loss denominator. verl's rejection sampling (``rollout_rs``) instead
    removes it from the mask; ``loss_mask & (w > 0)`` gives that. Rows are sequences (no packing).

    Args:
      old_logp: ``[R, T]`` log-probs of the trainer's behaviour policy (prs: ``Episodes.logprobs``).
      sampler_logp: ``[R, T]`` log-probs of the distribution sampled from (``Episodes.sampling_logprobs``).
      loss_mask: ``[R, T]``, non-zero on scored tokens.
      level, mode: see above (static).
      c_max: upper bound, > 0 (static).  c_min: lower bound in [0, c_max], or None (static).

    Returns:
      ``(w [R, T], metrics)``; metrics are token-means over the mask: ``is_weight_mean``,
      ``is_ratio_mean`` (ρ before truncation/masking) and ``is_rejected_frac`` (tokens with ρ outside
      the bounds: truncated or zeroed).
    """
    v.check_choice("level", level, IS_LEVELS)
    v.check_choice("mode", mode, IS_MODES)
    v.check_rank("old_logp", old_logp, 2)
    v.check_dtype_kind("old_logp", old_logp, "f")
    v.check_dtype_kind("sampler_logp", sampler_logp, "f")
    v.check_dtype_kind("loss_mask", loss_mask, "biuf")
    v.check_same_shape(old_logp=old_logp, sampler_logp=sampler_logp, loss_mask=loss_mask)
    if not (isinstance(c_max, (int, float)) and c_max > 0):
        raise ValueError(f"c_max must be a number > 0, got {c_max!r}")
    if c_min is not None and not (isinstance(c_min, (int, float)) and 0 <= c_min <= c_max):
        raise ValueError(f"c_min must be None or a number in [0, c_max={c_max!r}], got {c_min!r}")

    sg = jax.lax.stop_gradient
    f32 = jnp.float32
    m = jnp.asarray(loss_mask) != 0  # [R, T]
    safe = lambda x: jnp.where(m, sg(jnp.asarray(x)).astype(f32), 0.0)  # noqa: E731
    delta = safe(old_logp) - safe(sampler_logp)  # [R, T]
    if level == "sequence":
        delta = jnp.broadcast_to(jnp.sum(delta, axis=1, keepdims=True), m.shape)  # [R, T]
    rho = jnp.exp(jnp.clip(delta, -_SAFETY_BOUND, _SAFETY_BOUND))  # [R, T]
    lo = 0.0 if c_min is None else float(c_min)
    inside = (rho >= lo) & (rho <= c_max)  # [R, T]
    w = jnp.clip(rho, lo, c_max) if mode == "truncate" else jnp.where(inside, rho, 0.0)
    w = jnp.where(m, w, 0.0)

    n = jnp.maximum(jnp.sum(m, dtype=f32), 1.0)
    tok_mean = lambda x: jnp.sum(jnp.where(m, x, 0.0)) / n  # noqa: E731
    metrics = {"is_weight_mean": tok_mean(w), "is_ratio_mean": tok_mean(rho),
               "is_rejected_frac": tok_mean((~inside).astype(f32))}
    return sg(w), metrics


def high_entropy_mask(entropy: jax.Array, loss_mask: jax.Array, *, top_frac: float = 0.2, **renamed) -> jax.Array:
    """``[R, T]`` bool: the top-``top_frac`` fraction of scored tokens by entropy ("forking tokens").

    ``τ = quantile({Hₜ : mₜ ≠ 0}, 1 − top_frac)`` (linear interpolation, as ``torch.quantile``), keep
    ``m ∧ H >= τ`` (ties kept). Wang et al. 2025, "Beyond the 80/20 Rule", arXiv:2506.01939 (ρ = 0.2);
    TRL ``get_high_entropy_mask`` with ``top_entropy_quantile = top_frac`` (``top_frac = 1`` keeps every
    token, ``top_frac = 0`` only the highest-entropy one). The quantile runs over the whole array it is given
    (under ``jit`` with a sharded batch: the global batch, as TRL gathers across processes; per
    micro-batch if the caller splits the batch). An all-masked batch keeps nothing.

    Args:
      entropy: ``[R, T]`` per-token entropy (``token_entropy(logits)``); treated as a constant.
      loss_mask: ``[R, T]``, non-zero on scored tokens.
      top_frac: fraction in [0, 1] (static). ``rho=`` is refused with a TypeError naming ``top_frac``
        (in prs ρ is the prefix fraction).
    """
    if renamed:
        key = next(iter(renamed))
        hint = "; it is now top_frac= (the fraction of scored tokens kept)" if key == "rho" else ""
        raise TypeError(f"high_entropy_mask() got an unexpected keyword argument {key!r}{hint}")
    v.check_rank("entropy", entropy, 2)
    v.check_dtype_kind("entropy", entropy, "f")
    v.check_dtype_kind("loss_mask", loss_mask, "biuf")
    v.check_same_shape(entropy=entropy, loss_mask=loss_mask)
    if not (isinstance(top_frac, (int, float)) and 0 <= top_frac <= 1):
        raise ValueError(f"top_frac must be a number in [0, 1], got {top_frac!r}")
    m = jnp.asarray(loss_mask) != 0  # [R, T]
    h = jnp.where(m, jax.lax.stop_gradient(jnp.asarray(entropy)).astype(jnp.float32), jnp.nan)  # [R, T]
    h = jnp.where(m & ~jnp.isfinite(h), jnp.where(h > 0, 1e30, -1e30), h)  # non-finite scored entropy: ±1e30 ranks it last/first (finite quantile)
    tau = jnp.nanquantile(h, 1.0 - top_frac)  # [] (NaN when nothing is scored -> keeps nothing)
    return m & (jnp.where(m, h, -jnp.inf) >= tau)
