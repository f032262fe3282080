"""The trainer's optional loss/advantage menu, assembled from ``prs.core`` kernels from ``RLConfig``.

Kept out of ``trainer.py`` so that the trainer calls each piece from one line:

- ``shaped_rewards_and_mask``: DAPO overlong reward shaping and overlong filtering;
- ``batch_advantages``: group advantages (REINFORCE++ estimators included), optional batch whitening;
- ``pg_weights``: rollout correction (TIS / MIS / IcePop) times high-entropy token selection.

``rl`` is a ``prs.rl.config.RLConfig`` and ``loss`` its ``LossConfig`` (duck-typed here: ``prs.rl.config``
imports this module).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from prs.core.advantages import group_advantages, whiten_advantages
from prs.core.losses import check_clip_low
from prs.core.shaping import drop_truncated, overlong_penalty
from prs.core.token_weights import IS_MODES, high_entropy_mask, rollout_correction
from prs.parallel import explicit

ROLLOUT_CORRECTIONS = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")  # TRL's names


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_config(loss, *, loss_types, ratio_levels) -> None:
    """``LossConfig.__post_init__``'s checks of the menu fields: one ValueError naming the field."""
    if loss.loss_type not in loss_types:
        raise ValueError(f"LossConfig.loss_type={loss.loss_type!r}; choose from {loss_types}")
    if loss.ratio_level not in ratio_levels:
        raise ValueError(f"LossConfig.ratio_level={loss.ratio_level!r}; choose from {ratio_levels}")
    check_clip_low(loss.clip_low, loss_type=loss.loss_type, name="LossConfig.clip_low")
    if loss.dual_clip is not None:
        if not (_number(loss.dual_clip) and loss.dual_clip > 1):
            raise ValueError(f"LossConfig.dual_clip={loss.dual_clip!r} must be None or a number > 1 (verl: 3.0)")
        if loss.loss_type != "ppo":
            raise ValueError(f"LossConfig.dual_clip={loss.dual_clip!r} applies to loss_type='ppo' only, "
                             f"got loss_type={loss.loss_type!r}")
    if loss.rollout_correction is not None and loss.rollout_correction not in ROLLOUT_CORRECTIONS:
        raise ValueError(f"LossConfig.rollout_correction={loss.rollout_correction!r}; choose from "
                         f"{ROLLOUT_CORRECTIONS} or None")
    if not (_number(loss.rollout_is_max) and loss.rollout_is_max > 0):
        raise ValueError(f"LossConfig.rollout_is_max={loss.rollout_is_max!r} must be a number > 0")
    if loss.rollout_is_min is not None and not (_number(loss.rollout_is_min) and 0 <= loss.rollout_is_min <= loss.rollout_is_max):
        raise ValueError(f"LossConfig.rollout_is_min={loss.rollout_is_min!r} must be None or a number in "
                         f"[0, rollout_is_max={loss.rollout_is_max!r}]")
    if not (_number(loss.top_entropy_quantile) and 0 <= loss.top_entropy_quantile <= 1):
        raise ValueError(f"LossConfig.top_entropy_quantile={loss.top_entropy_quantile!r} must be a number in [0, 1]")
    if loss.whiten_advantages and loss.estimator.startswith("reinforce_pp"):
        raise ValueError(f"LossConfig.whiten_advantages=True: estimator={loss.estimator!r} already whitens over the batch")
    if not (isinstance(loss.overlong_cache, int) and not isinstance(loss.overlong_cache, bool) and loss.overlong_cache >= 0):
        raise ValueError(f"LossConfig.overlong_cache={loss.overlong_cache!r} must be an int >= 0 (0 = off)")
    if not (_number(loss.overlong_factor) and loss.overlong_factor >= 0):
        raise ValueError(f"LossConfig.overlong_factor={loss.overlong_factor!r} must be a number >= 0")
    assert set(m for rc in ROLLOUT_CORRECTIONS for m in rc.split("_")[1:]) <= set(IS_MODES)


def length_budget(rollouts, rl) -> int:
    """The generation budget the overlong options measure against: ``rollouts.token_budget`` (T of a
    single-turn task; None for rollouts without a per-call token budget, e.g. multi-turn agents -> 0)."""
    budget = rollouts.token_budget
    if rl.loss.overlong_cache > 0 or rl.loss.overlong_filter:
        if budget is None:
            raise ValueError("RLConfig.loss.overlong_cache / overlong_filter are defined for single-turn rollouts "
                             f"(a per-call token budget); this task's rollouts are {type(rollouts).__name__}")
        if rl.loss.overlong_cache > budget:
            raise ValueError(f"RLConfig.loss.overlong_cache={rl.loss.overlong_cache} exceeds the generation budget "
                             f"max_new_tokens={budget}")
    return 0 if budget is None else int(budget)


def response_lengths(rl, episodes) -> jax.Array:
    """``[R]`` response length measured against the generation budget: generated tokens, plus the
    replayed prefix when a re-roll shares the rollouts' budget (``rl.schedule.reroll_budget="shared"``)."""
    gen = jnp.sum(episodes.policy_mask, axis=1)  # [R]
    if rl.schedule.reroll_budget == "shared":
        gen = gen + episodes.replayed
    return gen


def shaped_rewards_and_mask(rl, rewards: jax.Array, episodes, loss_mask: jax.Array, *,
                            budget: int) -> tuple[jax.Array, jax.Array]:
    """``(rewards for the advantages [G, N], loss_mask [R, L])`` after DAPO's length options.

    ``rl.loss.overlong_cache > 0``: adds ``overlong_penalty(response_lengths, max_len=budget, cache_len=
    rl.loss.overlong_cache, factor=rl.loss.overlong_factor)``. Pass counts, buckets and the no-contrast filter
    keep the raw rewards (DAPO filters on accuracy). ``rl.loss.overlong_filter``: drops truncated rollouts
    (``Episodes.truncated``: the budget ran out before a stop token) from the loss
    (``drop_truncated``); their rewards stay in the group statistics (TRL).
    """
    if rl.loss.overlong_cache > 0:
        lengths = response_lengths(rl, episodes).reshape(rewards.shape)  # [G, N]
        rewards = rewards + overlong_penalty(lengths, max_len=budget, cache_len=rl.loss.overlong_cache,
                                             factor=rl.loss.overlong_factor)
    if rl.loss.overlong_filter:
        loss_mask = drop_truncated(loss_mask, episodes.truncated)
    return rewards, loss_mask


def batch_advantages(rl, rewards: jax.Array, loss_mask: jax.Array) -> jax.Array:
    """``[G, N]`` advantages; REINFORCE++ and ``rl.loss.whiten_advantages`` whiten over the rollouts that
    train (any unmasked token), token-weighted like verl's ``masked_whiten``."""
    batch_stats = rl.loss.estimator.startswith("reinforce_pp") or rl.loss.whiten_advantages
    if not batch_stats:
        return group_advantages(rewards, estimator=rl.loss.estimator, std_ddof=rl.loss.std_ddof)
    lengths = jnp.sum(loss_mask, axis=1).reshape(rewards.shape).astype(jnp.float32)  # [G, N]
    valid = lengths > 0
    if rl.loss.estimator.startswith("reinforce_pp"):
        return group_advantages(rewards, estimator=rl.loss.estimator, valid=valid, lengths=lengths,
                                std_ddof=rl.loss.std_ddof, eps=1e-8)
    adv = group_advantages(rewards, estimator=rl.loss.estimator, std_ddof=rl.loss.std_ddof)
    return whiten_advantages(adv, valid, lengths=lengths, std_ddof=rl.loss.std_ddof)


def entropy_selection(rl, entropy: jax.Array, loss_mask: jax.Array) -> jax.Array:
    """``[R, T]`` bool ``high_entropy_mask(entropy, loss_mask, top_frac=rl.loss.top_entropy_quantile)`` over all
    R rows; under an explicit mesh in an ``auto_axes`` region (the quantile sorts along the split
    rows, a ``ShardingTypeError`` otherwise), the result split like the rows."""
    return explicit.like_rows(lambda e, m: high_entropy_mask(e, m, top_frac=rl.loss.top_entropy_quantile), entropy, loss_mask)


def pg_weights(rl, old_logp: jax.Array, sampler_logp: jax.Array | None, loss_mask: jax.Array,
               entropy: jax.Array | None, *, entropy_mask: jax.Array | None = None
               ) -> tuple[jax.Array | None, dict[str, jax.Array]]:
    """``(pg_weights [R, T] or None, metrics)`` for ``policy_loss`` from ``rl.loss.rollout_correction``
    (weights exp(old_logp − sampler_logp), bounds ``rl.loss.rollout_is_min/max``) and
    ``rl.loss.top_entropy_quantile`` < 1 (needs ``entropy``; ``entropy_mask [R, T]``: the selection made
    on the whole batch when this is one micro-batch of it, else ``high_entropy_mask(entropy)``)."""
    w, metrics = None, {}
    if rl.loss.rollout_correction is not None:
        if sampler_logp is None:
            raise ValueError(f"RLConfig.loss.rollout_correction={rl.loss.rollout_correction!r} needs the sampler's "
                             "log-probs (Batch.sampler_logp), got None")
        level, mode = rl.loss.rollout_correction.split("_")
        w, metrics = rollout_correction(old_logp, sampler_logp, loss_mask, level=level, mode=mode,
                                        c_max=rl.loss.rollout_is_max, c_min=rl.loss.rollout_is_min)
    if rl.loss.top_entropy_quantile < 1.0:
        sel = (entropy_selection(rl, entropy, loss_mask) if entropy_mask is None
               else (loss_mask != 0) & entropy_mask).astype(jnp.float32)
        metrics["entropy_selected_frac"] = jnp.sum(sel) / jnp.maximum(jnp.sum(loss_mask != 0), 1)
        w = sel if w is None else w * sel
    return w, metrics
