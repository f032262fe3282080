"""The Prefix Sampling (PS) controller: buckets, source choice, cut points, adaptive prefix ratio.

Prefix Sampling (Zhu et al. 2026, "Rollout Pass-Rate Control", arXiv:2605.05112) re-rolls the
groups whose pass rate p = k/N is skewed but not degenerate. For N = 8:

    hard buckets  k in {1, 2}   replay a *success* prefix (the start of one of the group's
                                successful rollouts); the policy only writes the continuation.
    easy buckets  k in {6, 7}   replay a *failure* prefix (the start of a failed rollout) as a
                                handicap; the policy learns to recover.

In general the hard buckets are 1 <= k <= hard_max (default floor(N/4)) and the easy buckets are
easy_min <= k <= N - 1 (default N - floor(N/4)); every k in between, and k = 0 or k = N, is left
alone. There is one bucket per skewed k value, K of them, in increasing k order:
`bucket_ks(PrefixConfig(n=8)) == [1, 2, 6, 7]`. The state keeps, per bucket b,

    rho_b    the prefix fraction: the cut point is round(rho_b * source_len), see `cut_points`;
    ema_b    an exponential moving average of the pass rate of the bucket's re-rolled groups;
    count_b  how many steps observed the bucket (the first observation initialises the EMA, so
             the EMA is unbiased from the start: no zero-initialisation bias to correct).

The controller rule (ours; the paper does not publish its rule, only the converged re-rollout
pass rates 0.485 / 0.489 / 0.504 / 0.515 for the 1/8, 2/8, 6/8, 7/8 buckets). At every step, for
each bucket b observed this step (m_b = mean re-rollout pass rate of its groups this step):

    ema_b   <- m_b                                   if count_b = 0
    ema_b   <- d * ema_b + (1 - d) * m_b             otherwise                   (d = ema_decay)
    logit(rho_b) <- logit(rho_b) + g * s_b * (target - ema_b)                    (g = gain)
    rho_b   <- clip(rho_b, rho_min, rho_max)

with s_b = +1 for a hard bucket (a longer success prefix raises the pass rate) and s_b = -1 for an
easy bucket (a longer failure prefix lowers it), so in both directions rho moves to push the EMA
toward the target. Buckets not observed this step keep rho, ema and count. Why this form:

* it is integral control: rho is the integrator of the tracking error, so the only fixed point is
  ema_b = target (no steady-state offset however the pass-rate curve p_b(rho) is shaped), as long
  as the target is reachable inside [rho_min, rho_max]; otherwise rho rests at the bound;
* the step is taken in logit space, so rho never leaves (0, 1) before the clamp and the step in
  rho is g * rho (1 - rho) * error: large in the middle, geometrically small near the bounds,
  where a few replayed tokens already change the pass rate a lot (a success prefix that is almost
  the whole rollout makes the re-rollout almost surely succeed);
* the EMA (d = 0.8, a time constant of ~5 steps) averages the Binomial noise of a handful of
  groups per bucket; with g = 2 a bucket whose pass rate is 0.125 at rho = 0.5 moves rho by about
  0.18 in the first step and the closed loop settles in ~10-30 steps without sustained ringing for
  the pass-rate slopes met in practice (|dp/dlogit rho| <= 0.5; the loop gain g (1-d) |dp/dz| stays
  below ~0.2 per step). `tests/core/test_prefix.py` drives simulated buckets to the target from both
  sides.

`ps_fix` keeps rho at rho_init (the EMA is still tracked, for diagnostics); `ps_ada_hard` re-rolls
and adapts only the hard buckets; `baseline` re-rolls nothing. The state has the same shape [K] in
every mode, so switching modes never changes compiled shapes.

All functions are pure and jittable with the config static (it is a frozen, hashable dataclass):
`jax.jit(update, static_argnames="cfg")`.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

MODES = ("baseline", "ps_fix", "ps_ada_hard", "ps_ada")

__all__ = [
    "MODES",
    "PrefixConfig",
    "PrefixState",
    "bucket_ks",
    "bucket_direction",
    "bucket_enabled",
    "assign_buckets",
    "choose_sources",
    "cut_points",
    "prefix_mask",
    "init",
    "update",
]


@dataclasses.dataclass(frozen=True)
class PrefixConfig:
    """Static configuration of the prefix controller (hashable: usable as a static jit argument).

    Attributes:
      mode: one of MODES.
      n: rollouts per group N (>= 2).
      hard_max: hard buckets are 1 <= k <= hard_max (default floor(n/4)); 0 disables them.
      easy_min: easy buckets are easy_min <= k <= n-1 (default n - floor(n/4)); n disables them.
      target: the pass rate the adaptive controller steers each bucket's EMA to, in (0, 1).
      rho_init: initial prefix fraction in (0, 1): one value, or (hard, easy).
      ema_decay: EMA decay d in [0, 1).
      gain: controller step g >= 0 in logit(rho) per unit of pass-rate error.
      rho_min, rho_max: clamp for rho, 0 < rho_min <= rho_max < 1.
    """

    mode: str = "ps_ada"
    n: int = 8
    hard_max: int | None = None
    easy_min: int | None = None
    target: float = 0.5
    rho_init: float | tuple[float, float] = 0.5
    ema_decay: float = 0.8
    gain: float = 2.0
    rho_min: float = 0.05
    rho_max: float = 0.95

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if int(self.n) != self.n or self.n < 2:
            raise ValueError(f"n (rollouts per group) must be an integer >= 2, got {self.n!r}")
        if isinstance(self.rho_init, (list, tuple)):
            if len(self.rho_init) != 2:
                raise ValueError(f"rho_init must be a float or a (hard, easy) pair, got {self.rho_init!r}")
            object.__setattr__(self, "rho_init", tuple(float(r) for r in self.rho_init))
            inits = self.rho_init
        else:
            inits = (float(self.rho_init),)
        for name, v in [("rho_init", r) for r in inits] + [
            ("rho_min", self.rho_min), ("rho_max", self.rho_max), ("target", self.target)]:
            if not 0.0 < v < 1.0:
                raise ValueError(f"{name} must lie in the open interval (0, 1), got {v!r}")
        if self.rho_min > self.rho_max:
            raise ValueError(f"rho_min must be <= rho_max, got rho_min={self.rho_min}, rho_max={self.rho_max}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must lie in [0, 1), got {self.ema_decay!r}")
        if not self.gain >= 0.0:
            raise ValueError(f"gain must be >= 0, got {self.gain!r}")
        hm = self.hard_max_k
        em = self.easy_min_k
        if not 0 <= hm <= self.n - 1:
            raise ValueError(f"hard_max must lie in [0, n-1] = [0, {self.n - 1}], got {hm}")
        if not 1 <= em <= self.n:
            raise ValueError(f"easy_min must lie in [1, n] = [1, {self.n}], got {em}")
        if hm >= em:
            raise ValueError(f"hard_max must be < easy_min (buckets may not overlap), got hard_max={hm}, easy_min={em}")

    @property
    def hard_max_k(self) -> int:
        return self.n // 4 if self.hard_max is None else int(self.hard_max)

    @property
    def easy_min_k(self) -> int:
        return self.n - self.n // 4 if self.easy_min is None else int(self.easy_min)

    @property
    def num_buckets(self) -> int:
        return self.hard_max_k + (self.n - self.easy_min_k)


class PrefixState(NamedTuple):
    rho: jax.Array    # [K] float32 prefix fraction per bucket
    ema: jax.Array    # [K] float32 EMA of the bucket's re-rollout pass rate (target until observed)
    count: jax.Array  # [K] int32 number of steps that observed the bucket


def bucket_ks(cfg: PrefixConfig) -> np.ndarray:
    """[K] int32: the k (successes out of n) of each bucket, hard buckets first, increasing k."""
    return np.concatenate([np.arange(1, cfg.hard_max_k + 1),
                           np.arange(cfg.easy_min_k, cfg.n)]).astype(np.int32)


def bucket_direction(cfg: PrefixConfig) -> np.ndarray:
    """[K] int32: +1 for a hard bucket (success prefix), -1 for an easy bucket (failure prefix)."""
    return np.concatenate([np.ones(cfg.hard_max_k), -np.ones(cfg.n - cfg.easy_min_k)]).astype(np.int32)


def bucket_enabled(cfg: PrefixConfig) -> np.ndarray:
    """[K] bool: whether the mode re-rolls the bucket (baseline: none; ps_ada_hard: hard only)."""
    d = bucket_direction(cfg)
    if cfg.mode == "baseline":
        return np.zeros(d.shape, bool)
    if cfg.mode == "ps_ada_hard":
        return d > 0
    return np.ones(d.shape, bool)


def _adaptive(cfg: PrefixConfig) -> bool:
    return cfg.mode in ("ps_ada", "ps_ada_hard")


def assign_buckets(k: jax.Array, cfg: PrefixConfig) -> jax.Array:
    """Bucket index of each group: [B] int -> [B] int32, -1 where the group is not re-rolled.

    bucket(k) = k - 1                             for 1 <= k <= hard_max
              = hard_max + k - easy_min           for easy_min <= k <= n - 1
              = -1                                otherwise (k = 0, k = n, middle, out-of-range k,
                                                  or a direction the mode disables)
    """
    k = jnp.asarray(k)
    if k.ndim != 1:
        raise ValueError(f"k must have shape [B], got shape {k.shape}")
    k = k.astype(jnp.int32)
    hm, em = cfg.hard_max_k, cfg.easy_min_k
    en = bucket_enabled(cfg)
    hard_on = bool(en[:hm].all()) and hm > 0
    easy_on = bool(en[hm:].all()) and em < cfg.n
    b = jnp.full(k.shape, -1, jnp.int32)
    if hard_on:
        b = jnp.where((k >= 1) & (k <= hm), k - 1, b)
    if easy_on:
        b = jnp.where((k >= em) & (k <= cfg.n - 1), hm + k - em, b)
    return b


def _gather(table: jax.Array, bucket: jax.Array, fill) -> jax.Array:
    """table[bucket] with `fill` where bucket < 0 (works for K = 0)."""
    padded = jnp.concatenate([table, jnp.full((1,), fill, table.dtype)])  # [K+1]
    return padded[jnp.where(bucket < 0, table.shape[0], bucket)]


def choose_sources(key: jax.Array, rewards: jax.Array, bucket: jax.Array, cfg: PrefixConfig,
                   valid: jax.Array | None = None) -> jax.Array:
    """Index of the rollout whose prefix is replayed: [B, N] rewards -> [B] int32.

    source_i ~ Uniform{ j : valid_ij and r_ij >= 1 }   for a hard bucket (success prefix)
    source_i ~ Uniform{ j : valid_ij and r_ij < 1 }    for an easy bucket (failure prefix)
    source_i = -1                                       where bucket_i < 0 or the set is empty.

    A success is a full success (r >= 1) and a failure is anything less, exactly as the buckets
    count k = #{r >= 1}: with partial-credit rewards (a fraction of tests) a failure may score 0.5,
    and it is still a failure prefix. A skewed group always has a source (a hard group has k >= 1
    successes, an easy one k <= N - 1 failures) unless ``valid`` masks them all; callers must treat
    -1 in a steered bucket as an error, never as rollout 0.
    Uniform choice by the argmax of i.i.d. uniform scores over the candidates (seeded by `key`).
    """
    rewards = jnp.asarray(rewards)
    bucket = jnp.asarray(bucket)
    if rewards.ndim != 2 or rewards.shape[1] != cfg.n:
        raise ValueError(f"rewards must have shape [B, N={cfg.n}], got {rewards.shape}")
    if bucket.shape != rewards.shape[:1]:
        raise ValueError(f"bucket must have shape [B]={rewards.shape[:1]}, got {bucket.shape}")
    if valid is None:
        valid = jnp.ones(rewards.shape, bool)
    valid = jnp.asarray(valid, bool)
    if valid.shape != rewards.shape:
        raise ValueError(f"valid must have the shape of rewards {rewards.shape}, got {valid.shape}")
    direction = _gather(jnp.asarray(bucket_direction(cfg)), bucket, 0)  # [B]
    success = rewards >= 1.0  # [B, N] full successes, as the buckets count them
    cand = valid & jnp.where((direction > 0)[:, None], success, ~success) & (direction != 0)[:, None]  # [B, N]
    u = jax.random.uniform(key, rewards.shape)  # [B, N]
    src = jnp.argmax(jnp.where(cand, u, -1.0), axis=1).astype(jnp.int32)  # [B]
    return jnp.where(cand.any(axis=1), src, -1)


def cut_points(state: PrefixState, bucket: jax.Array, source_len: jax.Array, cfg: PrefixConfig) -> jax.Array:
    """Number of the source's policy tokens (or turns) to replay: [B] -> [B] int32.

    cut_i = clip(round(rho[bucket_i] * L_i), 1, L_i - 1)   (round half to even, in float32)
    cut_i = 0   where bucket_i < 0 or L_i < 2: a source of length < 2 has no proper prefix, so that
                group is NOT re-rolled (the caller keeps its original rollouts; check `cut > 0`).
    """
    del cfg  # the rule only needs the state; kept for a uniform signature
    bucket = jnp.asarray(bucket)
    source_len = jnp.asarray(source_len)
    if bucket.ndim != 1 or source_len.shape != bucket.shape:
        raise ValueError(f"bucket and source_len must both have shape [B], got {bucket.shape} and {source_len.shape}")
    rho = _gather(state.rho, bucket, 0.0)  # [B]
    return jnp.where(bucket >= 0, cuts_from_fractions(rho, source_len), 0)


def cuts_from_fractions(fraction: jax.Array, source_len: jax.Array) -> jax.Array:
    """The cut rule of ``cut_points`` for any prefix fractions f and source lengths L of one shape:

    c = clip(round(f · L), 1, L − 1)   (round half to even, in float32);   c = 0 where L < 2.
    """
    L = jnp.asarray(source_len).astype(jnp.int32)
    cut = jnp.round(jnp.asarray(fraction, jnp.float32) * L.astype(jnp.float32)).astype(jnp.int32)
    cut = jnp.clip(cut, 1, jnp.maximum(L - 1, 1))
    return jnp.where(L >= 2, cut, 0)


def prefix_mask(cut: jax.Array, width: int) -> jax.Array:
    """[B] cut -> [B, T=width] bool, True on the replayed positions t < cut_i (excluded from the loss).

    Prefix masking: loss_mask = response_mask & ~prefix_mask(cut, T).
    """
    cut = jnp.asarray(cut)
    if cut.ndim != 1:
        raise ValueError(f"cut must have shape [B], got {cut.shape}")
    return jnp.arange(width, dtype=jnp.int32)[None, :] < cut[:, None]


def init(cfg: PrefixConfig) -> PrefixState:
    """Initial state: rho = rho_init (per direction), ema = target, count = 0."""
    d = bucket_direction(cfg)
    hard, easy = cfg.rho_init if isinstance(cfg.rho_init, tuple) else (cfg.rho_init, cfg.rho_init)
    rho = np.where(d > 0, hard, easy)
    return PrefixState(rho=jnp.asarray(rho, jnp.float32),
                       ema=jnp.full(d.shape, cfg.target, jnp.float32),
                       count=jnp.zeros(d.shape, jnp.int32))


def update(state: PrefixState, bucket: jax.Array, reroll_pass_rate: jax.Array, cfg: PrefixConfig, *,
           target: float | jax.Array | None = None) -> PrefixState:
    """One controller step from this step's re-rolled groups (rule in the module docstring).

    m_b = mean{ reroll_pass_rate_i : bucket_i = b }; for observed b:
    ema_b <- m_b (first time) or d ema_b + (1-d) m_b; count_b += 1;
    adaptive modes: logit rho_b += g s_b (target - ema_b), then clip to [rho_min, rho_max].
    Entries with bucket_i < 0 are ignored (their pass rate may be anything, even NaN).
    `target` (optional, may be traced, e.g. vmapped in a sweep) overrides cfg.target.
    """
    bucket = jnp.asarray(bucket)
    rate = jnp.asarray(reroll_pass_rate, jnp.float32)
    if bucket.ndim != 1 or rate.shape != bucket.shape:
        raise ValueError(f"bucket and reroll_pass_rate must both have shape [B], got {bucket.shape} and {rate.shape}")
    K = state.rho.shape[0]
    if K != cfg.num_buckets:
        raise ValueError(f"state has {K} buckets, cfg has {cfg.num_buckets}")
    onehot = jax.nn.one_hot(bucket, K, dtype=jnp.float32)  # [B, K]; all zero where bucket < 0
    rate = jnp.where(bucket >= 0, rate, 0.0)  # [B] no NaN leaks through 0 * NaN
    n_obs = onehot.sum(axis=0)  # [K]
    mean = (onehot * rate[:, None]).sum(axis=0) / jnp.maximum(n_obs, 1.0)  # [K]
    seen = n_obs > 0  # [K]
    d = cfg.ema_decay
    ema = jnp.where(state.count > 0, d * state.ema + (1.0 - d) * mean, mean)
    ema = jnp.where(seen, ema, state.ema)
    count = state.count + seen.astype(jnp.int32)
    rho = state.rho
    if _adaptive(cfg):
        s = jnp.asarray(bucket_direction(cfg), jnp.float32)  # [K]
        tgt = cfg.target if target is None else jnp.asarray(target, jnp.float32)
        z = jnp.log(rho) - jnp.log1p(-rho) + cfg.gain * s * (tgt - ema)
        new_rho = jnp.clip(jax.nn.sigmoid(z), cfg.rho_min, cfg.rho_max)
        rho = jnp.where(seen & jnp.asarray(bucket_enabled(cfg)), new_rho, rho)
    return PrefixState(rho=rho, ema=ema, count=count)
