"""Per-token log-probabilities, entropy and the masked clipped policy-gradient loss (GRPO family).

Shapes: R rollouts (= B·N), T response tokens, V vocabulary. ``loss_mask [R, T]`` is 1 only on tokens
the CURRENT policy generated: padding, prompt and replayed prefix tokens (Prefix Sampling,
arXiv:2605.05112; the ms-swift #10106 bug) are 0. Masked tokens get exactly zero gradient and any
value (NaN/Inf included) there is ignored: inputs are selected with the double-``where`` trick before
any arithmetic.

Conventions follow verl's "vanilla" policy loss, ``agg_loss`` and ``kl_penalty`` (verl @1dda039);
see ``shared/context/peer_conventions.md``.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from prs.core import _validate as v

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("k1", "k2", "k3")
_LOG_RATIO_CLAMP = 20.0  # verl: clamp(logp - old_logp, -20, 20) before exp
_K3_CLAMP = 10.0  # verl low_var_kl: result clamped to [-10, 10]


def token_logprobs(logits: jax.Array, tokens: jax.Array) -> jax.Array:
    """``log π(tokens | ·)`` per position, ``[R, T]`` float32.

    ``log_softmax(z)[y] = z_y − logsumexp(z)``, gathered with ``take_along_axis`` (no ``[R, T, V]``
    one-hot) and computed in float32 whatever the logits dtype (bf16 logits are upcast), so huge
    logits stay finite. A token id outside ``[0, V)`` (e.g. a ``-1`` pad) gives NaN rather than wrapping
    around; ``policy_loss`` ignores NaN on masked positions.

    Args:
      logits: ``[R, T, V]`` floating.
      tokens: ``[R, T]`` integer token ids.
    """
    v.check_rank("logits", logits, 3)
    v.check_dtype_kind("logits", logits, "f")
    v.check_dtype_kind("tokens", tokens, "iu")
    logits = jnp.asarray(logits)
    v.check_shape("tokens", tokens, logits.shape[:2])
    z = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))  # [R, T, V]
    lse = jax.nn.logsumexp(z, axis=-1)  # [R, T]
    tokens = jnp.asarray(tokens)
    tokens = jnp.where(tokens < 0, z.shape[-1], tokens)  # negative ids must not wrap around: -> NaN
    picked = jnp.take_along_axis(z, tokens[..., None], axis=-1, mode="fill")[..., 0]  # [R, T]
    return picked - lse


def token_entropy(logits: jax.Array) -> jax.Array:
    """Entropy of the next-token distribution, ``[R, T]`` float32.

    ``H(z) = logsumexp(z) − Σ_v softmax(z)_v · z_v`` (verl ``entropy_from_logits``); ``−inf`` logits
    (banned tokens) contribute 0 rather than NaN.

    Args:
      logits: ``[R, T, V]`` (or any ``[..., V]``) floating.
    """
    v.check_rank("logits", logits, (2, 3))
    v.check_dtype_kind("logits", logits, "f")
    logits = jnp.asarray(logits)
    z = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))  # [R, T, V]
    lse = jax.nn.logsumexp(z, axis=-1, keepdims=True)  # [R, T, 1]
    p = jnp.exp(z - lse)  # [R, T, V]
    live = p > 0
    pz = jnp.where(live, p * jnp.where(live, z, 0.0), 0.0)
    return lse[..., 0] - jnp.sum(pz, axis=-1)


def agg_denominator(loss_mask: jax.Array, *, agg: str = "token-mean") -> jax.Array:
    """The count that ``policy_loss``'s aggregation divides by, as a float32 scalar.

    ``token-mean``: ``Σ m`` (tokens); every ``seq-*`` mode: the number of sequences with at least one
    unmasked token. Sum it over micro-batches (or ``psum`` it over devices) and pass the total as
    ``global_norm`` so that summed micro-batch losses equal the full-batch loss (verl #5625).
    """
    v.check_choice("agg", agg, AGG_MODES)
    v.check_rank("loss_mask", loss_mask, 2)
    m = jnp.asarray(loss_mask) != 0  # [R, T]
    if agg == "token-mean":
        return jnp.sum(m, dtype=jnp.float32)
    return jnp.sum(jnp.any(m, axis=1), dtype=jnp.float32)


def _aggregate(x, m, mf, *, agg, norm_len, global_norm):
    """Aggregates per-token values ``x [R, T]`` (already 0 where masked) as in peer_conventions.md."""
    if global_norm is not None:
        denom = jnp.asarray(global_norm, jnp.float32)
    else:
        denom = agg_denominator(m, agg=agg)
    denom = jnp.maximum(denom, 1.0)  # empty batch -> 0 loss, not NaN (verl guards the same way)
    if agg == "token-mean":
        return jnp.sum(x) / denom
    if agg == "seq-mean-token-sum":
        return jnp.sum(x) / denom
    if agg == "seq-mean-token-mean":
        per_seq = jnp.sum(x, axis=1) / jnp.maximum(jnp.sum(mf, axis=1), 1.0)  # [R]
        return jnp.sum(per_seq) / denom
    # seq-mean-token-sum-norm (Dr.GRPO): Σ m·ℓ / (B·L)
    return jnp.sum(x) / (denom * norm_len)


def _kl(logp, ref_logp, kl_type):
    """Per-token KL estimate to the reference (verl ``kl_penalty``), x = ref_logp − logp."""
    x = ref_logp - logp
    if kl_type == "k1":
        return -x
    if kl_type == "k2":
        return 0.5 * x * x
    x = jnp.clip(x, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return jnp.clip(jnp.exp(x) - x - 1.0, -_K3_CLAMP, _K3_CLAMP)


def policy_loss(
    logp: jax.Array,
    old_logp: jax.Array,
    advantages: jax.Array,
    loss_mask: jax.Array,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = None,
    agg: str = "token-mean",
    norm_len: int | None = None,
    ref_logp: jax.Array | None = None,
    kl_coef: float = 0.0,
    kl_type: str = "k3",
    entropy: jax.Array | None = None,
    entropy_coef: float = 0.0,
    global_norm: jax.Array | float | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Masked clipped surrogate loss with optional KL penalty and entropy bonus.

    Per token (``A`` the advantage, ``m`` the mask)::

        ρ = exp(clamp(logp − old_logp, −20, 20))
        ℓ = max(−A·ρ, −A·clip(ρ, 1 − clip_low, 1 + clip_high))          (PPO, arXiv:1707.06347;
                                                                          clip-higher, DAPO 2503.14476)
        ℓ = min(ℓ, −A·c)  where A < 0, if dual_clip = c                   (Ye et al. 2020, 1912.09729)
        ℓ += kl_coef · KL(logp, ref_logp) − entropy_coef · entropy

    then ``loss = agg(ℓ, m)``:

    - ``token-mean``:               ``Σ m·ℓ / Σ m``
    - ``seq-mean-token-sum``:       ``Σᵢ Σₜ m·ℓ / B``
    - ``seq-mean-token-mean``:      ``Σᵢ (Σₜ m·ℓ / Σₜ m) / B``
    - ``seq-mean-token-sum-norm``:  ``Σ m·ℓ / (B · L)`` (Dr.GRPO, arXiv:2503.20783)

    with ``B`` the number of sequences with at least one unmasked token and ``L = norm_len`` (default:
    the padded width T). ``global_norm`` replaces the local count (``Σ m`` for token-mean, ``B``
    otherwise; see ``agg_denominator``) so that the sum of micro-batch losses equals the full-batch
    loss and its gradient (verl #5625). Empty denominators are floored at 1 (loss 0, never NaN).

    KL with ``x = ref_logp − logp`` (verl ``kl_penalty``): ``k1 = −x``, ``k2 = ½x²``,
    ``k3 = clamp(eˣ − x − 1, ±10)`` with ``x`` clamped to ±20 ("low_var_kl", Schulman 2020 blog).
    ``dual_clip=3.0`` reproduces verl's vanilla loss, which always applies it; our default is off.

    Args:
      logp: ``[R, T]`` log-probs under the current policy (differentiable).
      old_logp: ``[R, T]`` log-probs under the behaviour policy (treated as constants).
      advantages: ``[R]`` (one per rollout, broadcast over T) or ``[R, T]``.
      loss_mask: ``[R, T]`` bool/int/float; non-zero exactly on tokens the current policy generated.
      clip_low, clip_high: ``ε_low``, ``ε_high`` (DAPO 0.2 / 0.28); ``clip_low`` must be in [0, 1).
      dual_clip: ``c > 1`` or None.
      agg: one of ``AGG_MODES`` (static).
      norm_len: ``L`` of ``seq-mean-token-sum-norm`` (static int); default T.
      ref_logp: ``[R, T]`` reference log-probs; required when ``kl_coef`` is non-zero.
      kl_coef, kl_type: KL weight and estimator (``"k1"``, ``"k2"``, ``"k3"``).
      entropy: ``[R, T]`` per-token entropy (e.g. ``token_entropy(logits)``); bonus weight
        ``entropy_coef``.
      global_norm: scalar denominator (see above) or None for the local count.

    Returns:
      ``(loss, metrics)``; metrics (token-means over the mask unless stated): ``pg_loss`` (aggregated
      like the loss), ``clip_frac_low`` (A < 0 and ρ < 1 − ε_low), ``clip_frac_high`` (A > 0 and
      ρ > 1 + ε_high), ``dual_clip_frac`` (A < 0 and ρ > c; 0 without dual clip), ``ratio_mean``,
      ``approx_kl`` (k3 estimate of KL(π_old ‖ π_θ): ``ρ − 1 − log ρ``), ``token_count`` (``Σ m``,
      local), and ``kl`` / ``entropy`` (aggregated like the loss) when given.
    """
    # ---- static checks (shapes, dtypes, modes)
    v.check_choice("agg", agg, AGG_MODES)
    v.check_choice("kl_type", kl_type, KL_TYPES)
    v.check_rank("logp", logp, 2)
    v.check_dtype_kind("logp", logp, "f")
    v.check_dtype_kind("old_logp", old_logp, "f")
    v.check_same_shape(logp=logp, old_logp=old_logp, loss_mask=loss_mask, ref_logp=ref_logp, entropy=entropy)
    v.check_dtype_kind("loss_mask", loss_mask, "biuf")
    v.check_rank("advantages", advantages, (1, 2))
    v.check_dtype_kind("advantages", advantages, "f")
    advantages = jnp.asarray(advantages)
    r_, t_ = jnp.shape(logp)
    v.check_shape("advantages", advantages, (r_,) if advantages.ndim == 1 else (r_, t_))
    for name, x in (("ref_logp", ref_logp), ("entropy", entropy)):
        if x is not None:
            v.check_dtype_kind(name, x, "f")
    if not (isinstance(clip_low, (int, float)) and 0 <= clip_low < 1):
        raise ValueError(f"clip_low must be a number in [0, 1), got {clip_low!r}")
    if not (isinstance(clip_high, (int, float)) and clip_high >= 0):
        raise ValueError(f"clip_high must be a number >= 0, got {clip_high!r}")
    if dual_clip is not None and not (isinstance(dual_clip, (int, float)) and dual_clip > 1):
        raise ValueError(f"dual_clip must be None or a number > 1, got {dual_clip!r}")
    if ref_logp is None and not (isinstance(kl_coef, (int, float)) and kl_coef == 0):
        raise ValueError(f"kl_coef={kl_coef!r} needs ref_logp [R, T] = {(r_, t_)}, got ref_logp=None")
    if entropy is None and not (isinstance(entropy_coef, (int, float)) and entropy_coef == 0):
        raise ValueError(f"entropy_coef={entropy_coef!r} needs entropy [R, T] = {(r_, t_)}, got entropy=None")
    if norm_len is None:
        norm_len = t_
    if not (isinstance(norm_len, int) and norm_len >= 1):
        raise ValueError(f"norm_len must be an int >= 1, got {norm_len!r}")

    # ---- double-where: masked positions are replaced by constants BEFORE any arithmetic
    f32 = jnp.float32
    m = jnp.asarray(loss_mask) != 0  # [R, T]
    mf = m.astype(f32)  # [R, T]
    safe = lambda x: jnp.where(m, jnp.asarray(x).astype(f32), 0.0)  # noqa: E731
    lp = safe(logp)  # [R, T]
    old = safe(jax.lax.stop_gradient(old_logp))  # [R, T]
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    a = jnp.where(m, jnp.broadcast_to(jax.lax.stop_gradient(adv).astype(f32), m.shape), 0.0)  # [R, T]

    log_ratio = jnp.clip(lp - old, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)  # [R, T]
    ratio = jnp.exp(log_ratio)  # [R, T]
    pg1 = -a * ratio
    pg2 = -a * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = jnp.maximum(pg1, pg2)  # [R, T]
    if dual_clip is not None:
        pg = jnp.where(a < 0, jnp.minimum(pg, -a * dual_clip), pg)
    per_token = pg
    agg_kw = dict(agg=agg, norm_len=norm_len, global_norm=global_norm)
    metrics: dict[str, Any] = {}
    if ref_logp is not None:
        kl = jnp.where(m, _kl(lp, safe(jax.lax.stop_gradient(ref_logp)), kl_type), 0.0)  # [R, T]
        per_token = per_token + kl_coef * kl
        metrics["kl"] = _aggregate(kl, m, mf, **agg_kw)
    if entropy is not None:
        ent = safe(entropy)  # [R, T]
        per_token = per_token - entropy_coef * ent
        metrics["entropy"] = _aggregate(ent, m, mf, **agg_kw)
    per_token = jnp.where(m, per_token, 0.0)
    loss = _aggregate(per_token, m, mf, **agg_kw)

    # ---- diagnostics (no gradient)
    sg = jax.lax.stop_gradient
    n_tok = jnp.sum(mf)
    tok_mean = lambda x: jnp.sum(jnp.where(m, sg(x), 0.0)) / jnp.maximum(n_tok, 1.0)  # noqa: E731
    metrics["pg_loss"] = sg(_aggregate(jnp.where(m, pg, 0.0), m, mf, **agg_kw))
    metrics["clip_frac_low"] = tok_mean(((a < 0) & (ratio < 1.0 - clip_low)).astype(f32))
    metrics["clip_frac_high"] = tok_mean(((a > 0) & (ratio > 1.0 + clip_high)).astype(f32))
    if dual_clip is not None:
        metrics["dual_clip_frac"] = tok_mean(((a < 0) & (ratio > dual_clip)).astype(f32))
    else:
        metrics["dual_clip_frac"] = jnp.zeros((), f32)
    metrics["ratio_mean"] = tok_mean(ratio)
    metrics["approx_kl"] = tok_mean(ratio - 1.0 - log_ratio)
    metrics["token_count"] = n_tok
    metrics = {k: sg(x) for k, x in metrics.items()}
    return loss, metrics
