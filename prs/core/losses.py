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
import numpy as np

from prs.core import _validate as v

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_TYPES = ("k1", "k2", "k3", "abs", "k1+", "k3+")
RATIO_LEVELS = ("token", "sequence")
LOSS_TYPES = ("ppo", "cispo")
_LOG_RATIO_CLAMP = 20.0  # verl: clamp(logp - old_logp, -20, 20) before exp
_SEQ_LOG_RATIO_MAX = 10.0  # verl/tunix GSPO: clamp(log s, max=10)
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
    return _pick_last(z, tokens) - lse


def _take_last(z, tokens):
    """``z [..., V]``, ``tokens [...]`` -> ``z[..., tokens]`` (an out-of-range id gives NaN)."""
    return jnp.take_along_axis(z, tokens[..., None], axis=-1, mode="fill")[..., 0]


def _pick_last(z: jax.Array, tokens: jax.Array) -> jax.Array:
    """``_take_last(z, tokens)``, also under a mesh with ``AxisType.Explicit`` axes (``jax.set_mesh``).

    There a gather from a ``V``-split (``tensor``) ``z`` has no unambiguous output sharding (a
    ``ShardingTypeError``): it runs in an ``auto_axes`` region (the compiler partitions the
    gather as under ``AxisType.Auto``) and comes back split like ``z``'s leading axes, ``V`` dropped
    (``prs.parallel.explicit.like_rows``; this room cannot import it). No explicit mesh: the plain
    gather.
    """
    am = jax.sharding.get_abstract_mesh()
    if am.empty or not am.explicit_axes:
        return _take_last(z, tokens)
    spec = tuple(jax.typeof(z).sharding.spec) + (None,) * z.ndim
    out = jax.sharding.PartitionSpec(*spec[: z.ndim - 1])  # [..., V] -> [...]
    return jax.sharding.auto_axes(_take_last, out_sharding=out)(z, tokens)


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


def agg_denominator(loss_mask: jax.Array, *, agg: str = "token-mean", segment_ids: jax.Array | None = None,
                    num_segments: int | None = None) -> jax.Array:
    """The count that ``policy_loss``'s aggregation divides by, as a float32 scalar.

    ``token-mean``: ``Σ m`` (tokens); every ``seq-*`` mode: the number of sequences with at least one
    unmasked token (with ``segment_ids``: the number of active packed segments, see ``policy_loss``).
    Sum it over micro-batches (or ``psum`` it over devices) and pass the total as ``global_norm`` so
    that summed micro-batch losses equal the full-batch loss (verl #5625).
    """
    v.check_choice("agg", agg, AGG_MODES)
    v.check_rank("loss_mask", loss_mask, 2)
    m = jnp.asarray(loss_mask) != 0  # [R, T]
    seg = _check_segments(segment_ids, num_segments, m)
    if seg is not None:
        m = m & (seg > 0)
    if agg == "token-mean":
        return jnp.sum(m, dtype=jnp.float32)
    if seg is not None:
        return jnp.sum(_segment_sum(m.astype(jnp.float32), seg, num_segments)[:, 1:] > 0, dtype=jnp.float32)
    return jnp.sum(jnp.any(m, axis=1), dtype=jnp.float32)


def _is_concrete(x) -> bool:
    return x is not None and not isinstance(x, jax.core.Tracer)


def _check_segments(segment_ids, num_segments, m):
    """Validates packing arguments; returns ``segment_ids`` as an int array ``[R, T]`` or None.

    Segment 0 is padding (tunix ``segmented_sum``); ids live in ``[0, num_segments)``. On concrete
    arrays an unmasked token in segment 0 or an id out of range is a ValueError; under ``jit`` such
    tokens are excluded from the loss (they cannot be checked there).
    """
    if segment_ids is None:
        if num_segments is not None:
            raise ValueError(f"num_segments={num_segments!r} needs segment_ids [R, T], got segment_ids=None")
        return None
    v.check_dtype_kind("segment_ids", segment_ids, "iu")
    v.check_same_shape(loss_mask=m, segment_ids=segment_ids)
    if not (isinstance(num_segments, int) and num_segments >= 2):
        raise ValueError(f"num_segments must be a static int >= 2 (segments 1.. plus the padding id 0) "
                         f"when segment_ids is given, got {num_segments!r}")
    if _is_concrete(segment_ids):
        seg_np = np.asarray(segment_ids)
        if seg_np.size and (seg_np.min() < 0 or seg_np.max() >= num_segments):
            raise ValueError(f"segment_ids must lie in [0, num_segments={num_segments}), "
                             f"got range [{seg_np.min()}, {seg_np.max()}]")
        if _is_concrete(m) and np.any((np.asarray(m) != 0) & (seg_np == 0)):
            raise ValueError("loss_mask is non-zero on a token with segment_ids == 0 (the padding segment); "
                             "give every scored token a segment id >= 1")
    seg = jnp.asarray(segment_ids).astype(jnp.int32)
    return jnp.where((seg >= 0) & (seg < num_segments), seg, 0)


def _segment_sum(x, seg, num_segments):
    """Per-row segment sums: ``x [R, T]``, ``seg [R, T]`` -> ``[R, S]`` (tunix ``segmented_sum``)."""
    return jax.vmap(lambda xr, sr: jax.ops.segment_sum(xr, sr, num_segments=num_segments))(x, seg)


def _global_denominator(global_norm):
    """``global_norm`` as a float32 scalar; concrete values must be finite and > 0 (else ValueError)."""
    v.check_rank("global_norm", global_norm, 0)
    if _is_concrete(global_norm):
        g = np.asarray(global_norm)
        if g.dtype.kind not in "iuf" or not (np.isfinite(g) and g > 0):
            raise ValueError(f"global_norm must be a finite number > 0 (the summed agg_denominator of all "
                             f"micro-batches/devices, possibly fractional, e.g. count / dp_size), got {global_norm!r}")
    return jnp.asarray(global_norm, jnp.float32)


def _aggregate(x, m, mf, *, agg, norm_len, global_norm, seg=None, num_segments=None):
    """Aggregates per-token values ``x [R, T]`` (already 0 where masked) as in peer_conventions.md.

    ``seg``: packed segment ids ``[R, T]`` (validated); sequences are then (row, segment) pairs.
    """
    if agg == "seq-mean-token-mean":
        if seg is None:
            per_seq = jnp.sum(x, axis=1) / jnp.maximum(jnp.sum(mf, axis=1), 1.0)  # [R]
        else:
            per_seq = _segment_sum(x, seg, num_segments) / jnp.maximum(_segment_sum(mf, seg, num_segments), 1.0)  # [R, S]
        num = jnp.sum(per_seq)
    else:
        num = jnp.sum(x)
    scale = float(norm_len) if agg == "seq-mean-token-sum-norm" else 1.0  # Dr.GRPO: Σ m·ℓ / (B·L)
    if global_norm is None:
        denom = agg_denominator(m, agg=agg, segment_ids=seg, num_segments=num_segments)
        return num / (jnp.maximum(denom, 1.0) * scale)  # empty batch -> 0 loss, not NaN (verl guards the same way)
    # A traced global_norm cannot raise: 0 (an empty global batch) gives 0 loss, < 0 or NaN a NaN loss.
    g = _global_denominator(global_norm)
    pos = g > 0
    out = num / (jnp.where(pos, g, 1.0) * scale)
    return jnp.where(pos, out, jnp.where((g == 0) & (num == 0), 0.0, jnp.nan))


def _kl(logp, ref_logp, kl_type, kl_clamp=None):
    """Per-token KL estimate to the reference (verl ``kl_penalty``), x = ref_logp − logp.

    ``"…+"``: the value of the estimator with the k2 gradient (straight-through, verl PR #2953).
    ``kl_clamp``: None = the estimator's own clamp (k3 ±10, verl), else ``clip(kl, ±kl_clamp)`` (tunix).
    """
    base = kl_type.rstrip("+")
    x = ref_logp - logp
    if base == "k1":
        kl = -x
    elif base == "abs":
        kl = x * jnp.sign(x)  # |x| with a zero (sub)gradient at x = 0, as torch.abs
    elif base == "k2":
        kl = 0.5 * x * x
    else:
        xc = jnp.clip(x, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
        kl = jnp.exp(xc) - xc - 1.0
        if kl_clamp is None:
            kl = jnp.clip(kl, -_K3_CLAMP, _K3_CLAMP)
    if kl_clamp is not None:
        kl = jnp.clip(kl, -kl_clamp, kl_clamp)
    if kl_type.endswith("+"):
        k2 = 0.5 * x * x
        kl = k2 - jax.lax.stop_gradient(k2) + jax.lax.stop_gradient(kl)
    return kl


def check_clip_low(clip_low, *, loss_type: str, name: str = "clip_low") -> None:
    """One ValueError naming ``name`` unless ``clip_low`` (ε_low) is a number in [0, 1) for
    ``loss_type="ppo"`` (the lower clip 1 − ε_low stays positive) or a finite number >= 0 for
    ``"cispo"`` (>= 1: no lower bound). ``policy_loss`` and ``RLConfig`` both check with it."""
    number = isinstance(clip_low, (int, float)) and not isinstance(clip_low, bool)
    if not (number and (0 <= clip_low < 1 if loss_type == "ppo" else 0 <= clip_low < float("inf"))):
        want = "[0, 1)" if loss_type == "ppo" else ">= 0 (>= 1: no lower bound)"
        raise ValueError(f"{name} must be a number {want} for loss_type={loss_type!r}, got {clip_low!r}")


def policy_loss(
    logp: jax.Array,
    old_logp: jax.Array,
    advantages: jax.Array,
    loss_mask: jax.Array,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = None,
    loss_type: str = "ppo",
    ratio_level: str = "token",
    pg_weights: jax.Array | None = None,
    agg: str = "token-mean",
    norm_len: int | None = None,
    segment_ids: jax.Array | None = None,
    num_segments: int | None = None,
    ref_logp: jax.Array | None = None,
    kl_coef: float = 0.0,
    kl_type: str = "k3",
    kl_clamp: float | None = None,
    entropy: jax.Array | None = None,
    entropy_coef: float = 0.0,
    global_norm: jax.Array | float | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Masked clipped surrogate loss with optional KL penalty and entropy bonus.

    Per token (``A`` the advantage, ``m`` the mask, ``w`` = ``pg_weights`` or 1, ``sg`` stop-gradient)::

        ρ = exp(clamp(logp − old_logp, −20, 20))                          ratio_level="token"
        ρ = exp(min(logp − sg(logp) + sg(Σₜ m·(logp − old)/Σₜ m), 10))     ratio_level="sequence"
        ℓ = max(−A·ρ, −A·clip(ρ, 1 − clip_low, 1 + clip_high))          loss_type="ppo" (arXiv:1707.06347;
                                                                          clip-higher, DAPO 2503.14476)
        ℓ = min(ℓ, −A·c)  where A < 0, if dual_clip = c                   (Ye et al. 2020, 1912.09729)
        ℓ = −sg(clip(ρ, 1 − clip_low, 1 + clip_high))·A·logp              loss_type="cispo"
        ℓ = w·ℓ + kl_coef · KL(logp, ref_logp) − entropy_coef · entropy

    then ``loss = agg(ℓ, m)``:

    - ``token-mean``:               ``Σ m·ℓ / Σ m``
    - ``seq-mean-token-sum``:       ``Σᵢ Σₜ m·ℓ / B``
    - ``seq-mean-token-mean``:      ``Σᵢ (Σₜ m·ℓ / Σₜ m) / B``
    - ``seq-mean-token-sum-norm``:  ``Σ m·ℓ / (B · L)`` (Dr.GRPO, arXiv:2503.20783)

    with ``B`` the number of sequences with at least one unmasked token and ``L = norm_len`` (default:
    the padded width T). ``global_norm`` replaces the local count (``Σ m`` for token-mean, ``B``
    otherwise; see ``agg_denominator``) so that the sum of micro-batch losses equals the full-batch
    loss and its gradient (verl #5625); it is used as given (a fractional value such as
    ``count / dp_size`` is honoured); a concrete value that is not finite and > 0 is a ValueError,
    a traced 0 gives loss 0 and a traced negative value NaN. The local count is floored at 1 (empty
    batch: loss 0, never NaN).

    GSPO (Zheng et al. 2025, arXiv:2507.18071): ``ratio_level="sequence"`` is the GSPO-token form
    (verl ``compute_policy_loss_gspo``, tunix ``gspo-token``): its value is the sequence ratio
    ``sᵢ = exp(mean log-ratio)`` on every token and its gradient ``sᵢ·∇logp_t``. With per-sequence
    advantages and any of the four aggregations (uniform weights within a sequence) it gives the same
    loss and gradient as TRL's ``importance_sampling_level="sequence"``; it also takes ``[R, T]``
    advantages. The paper's setting: ``clip_low=3e-4, clip_high=4e-4, agg="seq-mean-token-mean"``
    (verl hard-codes that aggregation and has no dual clip; here both are the caller's choice).

    CISPO (MiniMax-M1, arXiv:2506.13585; verl ``compute_policy_loss_cispo``): the clipped ratio is a
    detached weight of ``logp``; ``clip_low >= 1`` removes the lower bound (verl's example:
    ``clip_low=10, clip_high=0.2``; TRL's ``epsilon_high=5.0`` is an absolute cap, i.e.
    ``clip_high=4.0``). No dual clip. The loss *value* is ``−w·A·logp``, not comparable to PPO's.

    ``pg_weights [R, T]`` (detached) multiplies the policy-gradient term only, after clipping and
    never the KL or entropy terms (verl ``rollout_is_weights``, TRL ``importance_sampling_ratio`` and
    ``entropy_mask``): rollout correction (``prs.core.token_weights.rollout_correction``) and
    high-entropy token selection (``high_entropy_mask``), or their product. A zero weight keeps the
    token in the denominator (TRL).

    Packing (tunix ``_aggregate_loss_segmented``): ``segment_ids [R, T]`` (0 = padding, 1.. the packed
    sequences of a row, static ``num_segments`` = max id + 1): every ``seq-*`` mode and the sequence
    ratio then treat each (row, segment) as one sequence, and ``B`` counts active segments, so a
    packed batch gives the unpacked loss (``seq-mean-token-sum-norm`` too when ``norm_len`` is set).

    KL with ``x = ref_logp − logp`` (verl ``kl_penalty``): ``k1 = −x``, ``abs = |x|``, ``k2 = ½x²``,
    ``k3 = eˣ − x − 1`` with ``x`` clamped to ±20 ("low_var_kl", Schulman 2020 blog); ``"k1+"``,
    ``"k3+"``: that value with the k2 gradient ``logp − ref_logp`` (straight-through, verl PR #2953 as
    documented; verl itself raises NotImplementedError on "+" types). ``kl_clamp=None`` keeps verl's
    ±10 on k3 and leaves the others unclamped; a number ``c`` clamps any estimator to ±c (tunix
    ``clamp_value``). ``dual_clip=3.0`` reproduces verl's vanilla loss, which always applies it; our
    default is off.

    Args:
      logp: ``[R, T]`` log-probs under the current policy (differentiable).
      old_logp: ``[R, T]`` log-probs under the behaviour policy (treated as constants).
      advantages: ``[R]`` (one per rollout, broadcast over T) or ``[R, T]``.
      loss_mask: ``[R, T]`` bool/int/float; non-zero exactly on tokens the current policy generated.
      clip_low, clip_high: ``ε_low``, ``ε_high`` (DAPO 0.2 / 0.28); ``clip_low`` must be in [0, 1) for
        ``"ppo"`` and >= 0 for ``"cispo"``.
      dual_clip: ``c > 1`` or None (``"ppo"`` only).
      loss_type: ``"ppo"`` or ``"cispo"`` (static).
      ratio_level: ``"token"`` or ``"sequence"`` (GSPO-token; static).
      pg_weights: ``[R, T]`` per-token weights of the policy-gradient term, or None.
      agg: one of ``AGG_MODES`` (static).
      norm_len: ``L`` of ``seq-mean-token-sum-norm`` (static int); default T.
      segment_ids, num_segments: packed sequences (see above), or None.
      ref_logp: ``[R, T]`` reference log-probs; required when ``kl_coef`` is non-zero.
      kl_coef, kl_type, kl_clamp: KL weight, estimator (``KL_TYPES``) and output clamp.
      entropy: ``[R, T]`` per-token entropy (e.g. ``token_entropy(logits)``); bonus weight
        ``entropy_coef``.
      global_norm: scalar denominator (see above) or None for the local count.

    Returns:
      ``(loss, metrics)``; metrics (token-means over the mask unless stated): ``pg_loss`` (aggregated
      like the loss), ``clip_frac_low`` (A < 0 and ρ < 1 − ε_low; for CISPO any token with
      ρ < 1 − ε_low), ``clip_frac_high`` (A > 0 and ρ > 1 + ε_high; CISPO: ρ > 1 + ε_high),
      ``dual_clip_frac`` (A < 0 and ρ > c; 0 without dual clip), ``ratio_mean``, ``approx_kl`` (k3
      estimate of KL(π_old ‖ π_θ): ``ρ − 1 − log ρ``), ``token_count`` (``Σ m``, local), and ``kl`` /
      ``entropy`` (aggregated like the loss) when given.
    """
    # ---- static checks (shapes, dtypes, modes)
    v.check_choice("agg", agg, AGG_MODES)
    v.check_choice("kl_type", kl_type, KL_TYPES)
    v.check_choice("loss_type", loss_type, LOSS_TYPES)
    v.check_choice("ratio_level", ratio_level, RATIO_LEVELS)
    v.check_rank("logp", logp, 2)
    v.check_dtype_kind("logp", logp, "f")
    v.check_dtype_kind("old_logp", old_logp, "f")
    v.check_same_shape(logp=logp, old_logp=old_logp, loss_mask=loss_mask, ref_logp=ref_logp, entropy=entropy,
                       pg_weights=pg_weights)
    v.check_dtype_kind("loss_mask", loss_mask, "biuf")
    v.check_rank("advantages", advantages, (1, 2))
    v.check_dtype_kind("advantages", advantages, "f")
    advantages = jnp.asarray(advantages)
    r_, t_ = jnp.shape(logp)
    v.check_shape("advantages", advantages, (r_,) if advantages.ndim == 1 else (r_, t_))
    for name, x in (("ref_logp", ref_logp), ("entropy", entropy)):
        if x is not None:
            v.check_dtype_kind(name, x, "f")
    if pg_weights is not None:
        v.check_dtype_kind("pg_weights", pg_weights, "biuf")
    check_clip_low(clip_low, loss_type=loss_type)
    if not (isinstance(clip_high, (int, float)) and clip_high >= 0):
        raise ValueError(f"clip_high must be a number >= 0, got {clip_high!r}")
    if dual_clip is not None and not (isinstance(dual_clip, (int, float)) and dual_clip > 1):
        raise ValueError(f"dual_clip must be None or a number > 1, got {dual_clip!r}")
    if dual_clip is not None and loss_type != "ppo":
        raise ValueError(f"dual_clip={dual_clip!r} applies to loss_type='ppo' only, got loss_type={loss_type!r}")
    if kl_clamp is not None and not (isinstance(kl_clamp, (int, float)) and kl_clamp > 0):
        raise ValueError(f"kl_clamp must be None or a number > 0, got {kl_clamp!r}")
    if ref_logp is None and not (isinstance(kl_coef, (int, float)) and kl_coef == 0):
        raise ValueError(f"kl_coef={kl_coef!r} needs ref_logp [R, T] = {(r_, t_)}, got ref_logp=None")
    if entropy is None and not (isinstance(entropy_coef, (int, float)) and entropy_coef == 0):
        raise ValueError(f"entropy_coef={entropy_coef!r} needs entropy [R, T] = {(r_, t_)}, got entropy=None")
    if norm_len is None:
        norm_len = t_
    if not (isinstance(norm_len, int) and norm_len >= 1):
        raise ValueError(f"norm_len must be an int >= 1, got {norm_len!r}")
    seg = _check_segments(segment_ids, num_segments, loss_mask)
    if global_norm is not None:
        _global_denominator(global_norm)  # static validation when concrete

    # ---- double-where: masked positions are replaced by constants BEFORE any arithmetic
    f32 = jnp.float32
    sg = jax.lax.stop_gradient
    m = jnp.asarray(loss_mask) != 0  # [R, T]
    if seg is not None:
        m = m & (seg > 0)  # padding segment never scored (a ValueError above when concrete)
    mf = m.astype(f32)  # [R, T]
    safe = lambda x: jnp.where(m, jnp.asarray(x).astype(f32), 0.0)  # noqa: E731
    lp = safe(logp)  # [R, T]
    old = safe(sg(old_logp))  # [R, T]
    adv = advantages[:, None] if advantages.ndim == 1 else advantages
    a = jnp.where(m, jnp.broadcast_to(sg(adv).astype(f32), m.shape), 0.0)  # [R, T]

    log_ratio = jnp.clip(lp - old, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)  # [R, T]
    if ratio_level == "sequence":  # GSPO-token: value s_i, gradient s_i·∇logp_t
        if seg is None:
            seq_lr = jnp.sum(log_ratio, axis=1, keepdims=True) / jnp.maximum(jnp.sum(mf, axis=1, keepdims=True), 1.0)
            seq_lr = jnp.broadcast_to(seq_lr, m.shape)  # [R, T]
        else:
            per_seg = _segment_sum(log_ratio, seg, num_segments) / jnp.maximum(_segment_sum(mf, seg, num_segments), 1.0)
            seq_lr = jnp.take_along_axis(per_seg, seg, axis=1)  # [R, S] -> [R, T]
        log_ratio = jnp.where(m, jnp.minimum(lp - sg(lp) + sg(seq_lr), _SEQ_LOG_RATIO_MAX), 0.0)  # [R, T]
    ratio = jnp.exp(log_ratio)  # [R, T]
    clipped = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)  # [R, T]
    if loss_type == "cispo":
        pg = -sg(clipped) * a * lp  # [R, T]
    else:
        pg = jnp.maximum(-a * ratio, -a * clipped)  # [R, T]
        if dual_clip is not None:
            pg = jnp.where(a < 0, jnp.minimum(pg, -a * dual_clip), pg)
    if pg_weights is not None:
        pg = pg * safe(sg(pg_weights))
    per_token = pg
    agg_kw = dict(agg=agg, norm_len=norm_len, global_norm=global_norm, seg=seg, num_segments=num_segments)
    metrics: dict[str, Any] = {}
    if ref_logp is not None:
        kl = jnp.where(m, _kl(lp, safe(sg(ref_logp)), kl_type, kl_clamp), 0.0)  # [R, T]
        per_token = per_token + kl_coef * kl
        metrics["kl"] = _aggregate(kl, m, mf, **agg_kw)
    if entropy is not None:
        ent = safe(entropy)  # [R, T]
        per_token = per_token - entropy_coef * ent
        metrics["entropy"] = _aggregate(ent, m, mf, **agg_kw)
    per_token = jnp.where(m, per_token, 0.0)
    loss = _aggregate(per_token, m, mf, **agg_kw)

    # ---- diagnostics (no gradient)
    n_tok = jnp.sum(mf)
    tok_mean = lambda x: jnp.sum(jnp.where(m, sg(x), 0.0)) / jnp.maximum(n_tok, 1.0)  # noqa: E731
    metrics["pg_loss"] = sg(_aggregate(jnp.where(m, pg, 0.0), m, mf, **agg_kw))
    if loss_type == "cispo":
        low, high = ratio < 1.0 - clip_low, ratio > 1.0 + clip_high
    else:
        low, high = (a < 0) & (ratio < 1.0 - clip_low), (a > 0) & (ratio > 1.0 + clip_high)
    metrics["clip_frac_low"] = tok_mean(low.astype(f32))
    metrics["clip_frac_high"] = tok_mean(high.astype(f32))
    if dual_clip is not None:
        metrics["dual_clip_frac"] = tok_mean(((a < 0) & (ratio > dual_clip)).astype(f32))
    else:
        metrics["dual_clip_frac"] = jnp.zeros((), f32)
    metrics["ratio_mean"] = tok_mean(ratio)
    metrics["approx_kl"] = tok_mean(ratio - 1.0 - log_ratio)
    metrics["token_count"] = n_tok
    metrics = {k: sg(x) for k, x in metrics.items()}
    return loss, metrics
