"""Reward shaping and rollout filtering by length: DAPO's soft overlong penalty and overlong filtering.

Both act on per-rollout lengths / flags (``[R]`` or ``[B, N]``) before advantages are computed.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from prs.core import _validate as v


def overlong_penalty(lengths: jax.Array, *, max_len: int, cache_len: int, factor: float = 1.0) -> jax.Array:
    """DAPO's soft overlong punishment, added to the task reward (Yu et al. 2025, arXiv:2503.14476, Eq. 13).

    With ``L_exp = max_len − cache_len`` and ``|y|`` = ``lengths``::

        R_len(y) = 0                                   |y| <= L_exp
                 = factor · (L_exp − |y|) / cache_len   L_exp < |y| <= max_len
                 = −factor                             |y| > max_len

    TRL ``get_soft_overlong_punishment(max_completion_len, soft_punish_cache)`` (factor 1, floor −1);
    verl's DAPO reward manager (``overlong_buffer.len``, ``penalty_factor``) agrees up to ``max_len``
    and keeps falling beyond it (there lengths cannot exceed the budget).

    Args:
      lengths: response lengths, any shape, int or float.
      max_len: the generation budget ``L_max`` (static int >= 1).
      cache_len: ``L_cache`` in [1, max_len] (static).
      factor: penalty at ``|y| = max_len``, >= 0.

    Returns:
      float32 penalties, the shape of ``lengths`` (<= 0).
    """
    v.check_dtype_kind("lengths", lengths, "iuf")
    if not (isinstance(max_len, int) and max_len >= 1):
        raise ValueError(f"max_len must be an int >= 1, got {max_len!r}")
    if not (isinstance(cache_len, int) and 1 <= cache_len <= max_len):
        raise ValueError(f"cache_len must be an int in [1, max_len={max_len}], got {cache_len!r}")
    if not isinstance(factor, (int, float)):
        raise ValueError(f"factor must be a number >= 0, got {factor!r}")
    v.check_nonnegative("factor", factor)
    n = jnp.asarray(lengths).astype(jnp.float32)
    expected = float(max_len - cache_len)
    band = factor * (expected - n) / float(cache_len)
    return jnp.where(n <= expected, 0.0, jnp.where(n <= max_len, band, -float(factor)))


def drop_truncated(loss_mask: jax.Array, truncated: jax.Array) -> jax.Array:
    """Overlong filtering (DAPO §3.4; TRL ``mask_truncated_completions``): ``m ∧ ¬truncated``.

    A rollout that hit the generation budget without a stop token contributes no loss; its reward
    still enters its group's statistics (TRL). Returns a bool ``[R, T]`` mask.

    Args:
      loss_mask: ``[R, T]``.  truncated: ``[R]`` bool.
    """
    v.check_rank("loss_mask", loss_mask, 2)
    v.check_dtype_kind("truncated", truncated, "b")
    v.check_shape("truncated", truncated, (jnp.shape(loss_mask)[0],))
    return (jnp.asarray(loss_mask) != 0) & ~jnp.asarray(truncated)[:, None]
