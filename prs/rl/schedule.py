"""When Prefix Sampling steers a group: ``same_step`` (re-roll after seeing k, in the same step) or
``next_visit`` (over a finite task pool, at the task's next visit, from its stored sources), and the
controls that isolate the prefix (``RLConfig.schedule.control``).

Each schedule is a strategy object (``make_schedule``: ``SameStep`` or ``NextVisit``, the controls
inside): ``sample(state, params, keys, rollouts)`` draws the step's rollouts through the task's
rollouts object and returns a ``Sampled`` (what trains, the measured k, the steered groups and their
pass rates, the new controller state and task memory, its own metrics); ``prs.rl.trainer.Trainer.collect``
assembles the batch and the common metrics from it for every schedule. Nothing is written to the
trainer: the task memory and the next-visit sources are return values.

``next_visit`` (``RLConfig.schedule.kind="next_visit"``):

* **Pool.** Training draws from a finite pool of M = ``RLConfig.schedule.pool_size`` problems
  (``task.train_problems(seed=pool_seed, step=POOL_STEP, count=M)``; a problem's id is its index in
  the pool). Epoch e visits the pool in the order ``default_rng([seed, e, 0x9E57]).permutation(M)``;
  step s takes positions s·B … s·B + B − 1 of that endless stream (M must be a multiple of B, so an
  epoch is M/B steps and no step holds a task twice). Pool and order are deterministic in the seed.
* **Task memory** (``TaskMemory``, fixed shapes, part of ``TrainState``, so it is checkpointed and a
  resumed run continues exactly). Per task t: the k of its last group, the bucket its next visit
  uses (``plan``), and S source rollouts from its last *unprefixed* visit: for ``sources="one"``
  S = 2, slot 0 a success and slot 1 a failure (chosen uniformly, seeded); for ``sources="all"``
  S = N, the whole group. A slot holds the rollout's tokens and policy mask [L] (for the agent task:
  its action turns, which the replay executes again), its policy units (tokens or turns), whether
  it succeeded, and its global rollout id ``step·R + row``.
* **A visit.** Task t with ``plan_t = b >= 0`` (its last bucket was skewed) gets its N rollouts this
  step from prefixes of its stored sources: a success for a hard bucket, a failure for an easy
  one; with ``sources="all"`` continuation i uses the (i mod m)-th of the m candidates. Cut of
  continuation i (units of the source, L_i):

      f_i   = ρ_b                                                     (cut_spread = False)
      f_i   = ρ_b/2 + (min(1, 3ρ_b/2) − ρ_b/2) · i/(N−1)              (cut_spread = True)
      c_i   = clip(round(f_i · L_i), 1, L_i − 1)                      (round half to even)

  A task whose source has L < 2 is not steered (its N rollouts are fresh). **No rollout is added**:
  every step samples exactly B·N rollouts, and a steered rollout generates only its continuation
  (the replayed prefix shares the rollout budget), so a step generates at most the tokens of a
  baseline step. The controller (``prs.core.prefix.update``) observes the pass rate of the
  prefixed groups. 0/N and N/N tasks (and middle ones) get no prefix.
* **Memory update.** An unprefixed group sets k_t, stores its sources and plans
  ``plan_t = assign_buckets(k_t)``. A prefixed group records its k but keeps the sources (its
  rollouts start from an old prefix and are not full policy rollouts) and keeps the plan, unless it
  overshot (a success-prefixed group came back N/N, a failure-prefixed one 0/N): then the next
  visit is unprefixed and re-measures k. So a skewed task stays steered while the prefix has not
  made it trivial, and re-enters the bucket system from a fresh measurement otherwise.

Metrics (both schedules, on top of the trainer's): ``groups_steered`` (groups that got a prefix /
a re-roll), ``groups_planned`` (next_visit: tasks PS would steer; the controls steer none),
``groups_kept``, ``pq_trained`` (mean p(1-p) over trained groups), ``steered_mixed_share`` and
``pq_steered`` (over steered groups), ``rollouts_sampled``, ``tokens_generated`` vs
``tokens_replayed``, ``loss/grad_norm``, ``time_sample`` / ``time_replay`` (agent rebuilds) /
``time_update``, ``bucket/<k>/count`` (groups whose k is in the bucket) and ``bucket/<k>/steered``
(groups steered with the bucket's prefix: the ones ``bucket/<k>/reroll_pass_rate`` averages), and a
task's ``episode_metrics`` of the step's fresh rollouts (next_visit agent: all B tasks' fresh call;
single-turn: the unsteered groups). In next_visit ``pass_rate`` includes the prefixed groups (it is
what was trained on); ``pass_rate_unsteered`` leaves them out.

Controls (``RLConfig.schedule.control``, methods ``reroll_noprefix`` and ``extra_rollouts`` in
``conf/method/``; ``baseline_lr2`` is ``mode=baseline`` with ``lr_scale=2``):

* ``reroll_noprefix``: ``same_step``: the groups PS would re-roll are re-rolled exactly as PS would
  (same selection, fallback, replace/append), from an empty prefix; ``next_visit``: the tasks PS
  would steer get N fresh rollouts (= the baseline on the same pool).
* ``extra_rollouts``: the baseline plus N extra from-scratch rollouts, appended as an extra group,
  for a share ``extra_share`` of the skewed groups (chosen uniformly, seeded; ``same_step``: this
  step's skewed groups, ``next_visit``: tasks whose plan is skewed). ``extra_share`` is the knob
  that matches PS's generated tokens per step (set it from the PS run's ``tokens_generated``).

Host glue here is numpy over fixed shapes ([B], [B, N], [R], [M, S, L]); the model calls see fixed
row counts (B·N, or 2·B·N rows when an agent step has a re-roll or an extra group), so nothing
recompiles with the number of steered groups. The price, for the agent task only: its fresh call
runs all B tasks and the steered tasks' fresh rows are discarded (the agent's re-roll cannot start
a row from an empty prefix), logged as ``rollouts_wasted`` / ``tokens_sampled``; the single-turn
path samples exactly B·N rows in one call (an unsteered row is a re-roll with cut 0).
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from prs.core import prefix as ps
from prs.core.advantages import mixed_groups
from prs.rl.episodes import Episodes, take_rows

SCHEDULES = ("same_step", "next_visit")
SOURCES = ("one", "all")
CONTROLS = ("none", "reroll_noprefix", "extra_rollouts")
POOL_STEP = 999_999  # the train_problems "step" the pool is drawn at (no run reaches it)


class TaskMemory(NamedTuple):
    """Per-task memory of the ``next_visit`` schedule; M pool tasks, S source slots, L width."""

    k: jax.Array           # [M] int32 successes of the task's last group (-1: never visited)
    plan: jax.Array        # [M] int32 bucket its next visit is steered with (-1: no prefix)
    visits: jax.Array      # [M] int32 visits so far
    src_tokens: jax.Array  # [M, S, L] int32 stored source rollouts (prompt + response)
    src_mask: jax.Array    # [M, S, L] bool their policy tokens (agent: the action turns)
    src_units: jax.Array   # [M, S] int32 their policy units (tokens or turns)
    src_success: jax.Array  # [M, S] bool reward >= 1
    src_valid: jax.Array   # [M, S] bool slot holds a rollout
    src_id: jax.Array      # [M, S] int32 global rollout id step * R + row (-1: empty)


def source_slots(rl, n: int) -> int:
    return 2 if rl.schedule.sources == "one" else n


def init_memory(pool_size: int, slots: int, width: int) -> TaskMemory:
    m, s, l = pool_size, slots, width
    return TaskMemory(k=jnp.full((m,), -1, jnp.int32), plan=jnp.full((m,), -1, jnp.int32),
                      visits=jnp.zeros((m,), jnp.int32), src_tokens=jnp.zeros((m, s, l), jnp.int32),
                      src_mask=jnp.zeros((m, s, l), bool), src_units=jnp.zeros((m, s), jnp.int32),
                      src_success=jnp.zeros((m, s), bool), src_valid=jnp.zeros((m, s), bool),
                      src_id=jnp.full((m, s), -1, jnp.int32))


def pool_ids(seed: int, step: int, count: int, pool_size: int) -> np.ndarray:
    """[B] pool ids visited at ``step``: positions step·B … of the epoch stream (module docstring)."""
    pos = step * count
    epoch, off = divmod(pos, pool_size)
    perm = np.random.default_rng([int(seed), int(epoch), 0x9E57]).permutation(pool_size)
    return perm[off: off + count].astype(np.int64)


def cut_fractions(rho: np.ndarray, n: int, *, spread: bool) -> np.ndarray:
    """[B] ρ_b -> [B, N] prefix fractions f_i (module docstring): ρ_b, or evenly over
    [ρ_b/2, min(1, 3ρ_b/2)] when ``spread``."""
    rho = np.asarray(rho, np.float32)[:, None]                                # [B, 1]
    if not spread:
        return np.repeat(rho, n, axis=1)
    t = np.linspace(0.0, 1.0, n, dtype=np.float32)[None, :]                   # [1, N]
    lo, hi = rho / 2, np.minimum(np.float32(1.0), 1.5 * rho)
    return (lo + (hi - lo) * t).astype(np.float32)


def steer_cuts(rho, plan, units, *, spread: bool) -> np.ndarray:
    """[B, N] cuts of a next visit: task b's N continuations of sources with ``units [B, N]``, its
    plan's prefix fraction ``rho[plan_b]`` (``rho [K]``, the controller's; plan < 0: any, the caller
    does not steer it) spread by ``cut_fractions``, cut by ``prefix.cuts_from_fractions`` (the rule
    of ``prefix.cut_points``, so an unspread next visit cuts where same_step would)."""
    rho, plan = np.asarray(rho), np.asarray(plan)
    units = np.asarray(units)
    r = rho[np.where(plan >= 0, plan, 0)] if rho.size else np.zeros(plan.shape, np.float32)  # [B]
    return np.asarray(ps.cuts_from_fractions(cut_fractions(r, units.shape[1], spread=spread), units))


def signal_metrics(train_rewards, keep, steered_rates) -> dict[str, Any]:
    """Signal-density metrics of a step: mean p(1-p) over trained groups; over steered groups the
    share that came back mixed and their mean p(1-p) (``steered_rates [B]``: pass rate of each
    steered group, NaN elsewhere)."""
    p = np.mean(np.asarray(train_rewards) >= 1.0, axis=1)                       # [G]
    keep = np.asarray(keep, bool)
    pq = p * (1 - p)
    rates = np.asarray(steered_rates, np.float64)
    st = rates[np.isfinite(rates)]
    return {"pq_trained": float(pq[keep].mean()) if keep.any() else 0.0,
            "steered_mixed_share": float(np.mean((st > 0) & (st < 1))) if st.size else None,
            "pq_steered": float(np.mean(st * (1 - st))) if st.size else None}


# ---------------------------------------------------------------------- what a schedule returns


class StepKeys(NamedTuple):
    """A step's random keys, split from ``fold_in(PRNGKey(seed), step)`` in this order."""

    sample: jax.Array   # the step's rollouts
    source: jax.Array   # source choice (same_step), source slots (next_visit), RFT's success cap
    reroll: jax.Array   # re-rolls, the controls' draws and extra groups


def step_keys(seed: int, step: int) -> StepKeys:
    return StepKeys(*jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed), step), 3))


@dataclasses.dataclass
class Sampled:
    """A schedule's sampling phase of one step: what trains, what the controller and the metrics see.

    B groups measured this step, G >= B groups in the update (``reroll="append"`` / extra groups).
    """

    train: Episodes               # [G*N] rollouts the update trains on
    train_rewards: Any            # [G, N] their rewards
    k: np.ndarray                 # [B] int32 successes of each measured group
    k_bucket: np.ndarray          # [B] int32 bucket of k (-1: none)
    steered: np.ndarray           # [B] bool groups steered this step (re-rolled / prefixed)
    steer_bucket: np.ndarray      # [B] int32 the bucket a steered group was steered with
    rate: np.ndarray              # [B] f32 steered groups' pass rate, NaN elsewhere
    prefix: ps.PrefixState        # the controller after this step's observations
    memory: Any                   # next_visit: the new TaskMemory; same_step: unchanged (None)
    metrics: dict[str, Any]       # the schedule's own step metrics
    fresh: tuple[Any, Episodes] | None = None  # (problems, unsteered fresh episodes) for episode_metrics
    groups: tuple[Any, np.ndarray] | None = None  # (problems [B], [G] problem of each train group) for batch_metrics
    sources: dict[str, Any] | None = None      # next_visit: ids, steered, source ids, cuts (tests, debugging)
    select: Any = None                         # schedule.select != uniform: the new prs.rl.select.SelectState


def make_schedule(task, rl, prefix_cfg: ps.PrefixConfig, *, seed: int, width: int):
    """The schedule strategy of ``rl.schedule.kind``: ``SameStep`` or ``NextVisit`` (controls included)."""
    cls = {"same_step": SameStep, "next_visit": NextVisit}[rl.schedule.kind]
    return cls(task, rl, prefix_cfg, seed=seed, width=width)


def reroll_groups(sel: np.ndarray, b: int, *, bucketed: bool) -> np.ndarray:
    """The groups of a re-roll call for the g = |sel| steered groups ``sel``: ``sel`` then copies of
    ``sel[0]`` (dropped after the call) up to B groups, or, ``bucketed``, up to the smallest power
    of two >= g (at most B): the call compiles once per bucket (log2 B + 1 shapes) instead of once,
    and samples about g instead of B groups. Row r keeps its key stream (``fold_in(key, r)``), so
    the first g groups sample the same tokens either way."""
    g = int(sel.size)
    if not 1 <= g <= b:
        raise ValueError(f"internal: {g} steered groups for a re-roll call of at most {b}")
    size = min(b, 1 << (g - 1).bit_length()) if bucketed else b
    return np.concatenate([sel, np.full(size - g, sel[0])]).astype(np.int64)


def _pad_groups(ep: Episodes, rows: int) -> Episodes:
    """``ep`` [r, ...] padded to ``rows`` with empty rows (zeros: no valid or policy token, reward 0)."""
    extra = rows - ep.tokens.shape[0]
    if extra == 0:
        return ep
    # zeros put from the host: an eager jnp.zeros compiles a program per shape
    return Episodes(*(jnp.concatenate([v, jax.device_put(np.zeros((extra, *v.shape[1:]), v.dtype))]) for v in ep))


# ---------------------------------------------------------------------- same_step


@functools.partial(jax.jit, static_argnames=("n",))
def _merge_groups(ep: Episodes, ep2: Episodes, from_group: jax.Array, *, n: int) -> Episodes:
    """Group g of the result is ``ep``'s group ``from_group[g]`` if < B, else ``ep2``'s group
    ``from_group[g] - B`` (all N rows of it). ep, ep2: [B*N, ...]; from_group [B] int32. One
    compile per run whatever the number of replaced groups."""
    rows = (from_group[:, None] * n + jnp.arange(n)[None, :]).reshape(-1)  # [B*N] into concat([ep, ep2])
    return Episodes(*(jnp.concatenate([v, v2])[rows] for v, v2 in zip(ep, ep2)))


class SameStep:
    """``same_step``: sample B groups, re-roll the skewed ones from a prefix of a source rollout in
    the same step (``prs.rl.trainer`` module docstring, steps 1-4), replace or append them.
    Controls: ``reroll_noprefix`` re-rolls the same groups from scratch; ``extra_rollouts`` appends
    N fresh rollouts for a seeded share of the skewed groups."""

    def __init__(self, task, rl, prefix_cfg: ps.PrefixConfig, *, seed: int, width: int):
        self.task, self.rl, self.prefix_cfg, self.seed, self.width = task, rl, prefix_cfg, int(seed), int(width)
        self._pool = None

    pool = property(lambda self: NextVisit.pool.fget(self), doc="The pool a selector draws from (``NextVisit.pool``).")

    def init_memory(self):
        return None

    def _selection(self, sel: np.ndarray, key, b: int) -> np.ndarray:
        """``extra_rollouts``: a seeded share ``extra_share`` of the skewed groups ``sel``; else ``sel``."""
        rl = self.rl
        if rl.schedule.control != "extra_rollouts" or not sel.size:
            return sel
        u = np.asarray(jax.random.uniform(jax.random.fold_in(key, 17), (b,)))  # [B]
        return sel[u[sel] < rl.schedule.extra_share]

    def _reroll(self, rollouts, params, problems, source: Episodes, cut, key, *, group_size: int) -> Episodes:
        """The re-roll: from the source prefix, or from scratch for the controls."""
        if self.rl.schedule.control in ("reroll_noprefix", "extra_rollouts"):
            return rollouts.rollout(params, problems, key, group_size=group_size)
        return rollouts.reroll(params, problems, source, cut, key, group_size=group_size)

    def sample(self, state, params, keys: StepKeys, rollouts, *, ids=None, fresh: Episodes | None = None) -> Sampled:
        """One step's rollouts and re-rolls with the sampler's ``params``; ``state`` gives the step
        and the controller. A selector (``prs.rl.select``) passes the pool ``ids [B]`` to sample
        and, for ``screen``, their first N rollouts ``fresh [B*N]``; else the step's own B tasks."""
        rl, prefix_cfg, task = self.rl, self.prefix_cfg, self.task
        step = int(state.step)
        n, b = rl.group_size, (rl.tasks_per_step if ids is None else len(ids))
        t0 = time.perf_counter()
        problems = task.train_problems(seed=self.seed, step=step, count=b) if ids is None else task.take(self.pool, ids)
        ep = rollouts.rollout(params, problems, keys.sample, group_size=n) if fresh is None else fresh  # [R, L]
        rewards = ep.rewards.reshape(b, n)                                      # [B, N]
        # k counts full successes (reward 1): the same as Σ r for a binary reward, and the pass
        # count when a task trains on a partial-credit reward (fraction of tests, similarity)
        k = jnp.sum(rewards >= 1.0, axis=1).astype(jnp.int32)                  # [B]
        bucket = ps.assign_buckets(k, prefix_cfg)                               # [B]
        cost = {"gen": int(jnp.sum(ep.policy_mask)), "replayed": 0, "env": int(jnp.sum(ep.env_steps))}
        t_sample = time.perf_counter() - t0

        train, train_rewards = ep, rewards
        gidx = np.arange(b)                                                     # [G] problem of each train group
        bucket_np = np.asarray(bucket)
        sel = np.nonzero(bucket_np >= 0)[0]                                     # re-rolled groups
        reroll_rate = np.full((b,), np.nan, np.float32)
        new_prefix = state.prefix
        replaced = 0
        if sel.size:
            src = np.asarray(ps.choose_sources(keys.source, rewards, bucket, prefix_cfg))  # [B]
            if np.any(src[sel] < 0):  # a steered group always has a source (prefix.choose_sources)
                bad = sel[src[sel] < 0]
                raise RuntimeError(f"step {step}: no prefix source for steered groups {bad.tolist()} "
                                   f"(rewards {np.asarray(rewards)[bad].tolist()})")
            src_row = np.arange(b) * n + np.where(src >= 0, src, 0)             # unsteered rows: unused
            cut = np.asarray(ps.cut_points(state.prefix, bucket, ep.units[src_row], prefix_cfg))  # [B] units
            sel = sel[cut[sel] > 0]                                             # sources too short to cut
            sel = self._selection(sel, keys.reroll, b)                          # extra_rollouts: a share
        if sel.size:
            g = sel.size
            pick = reroll_groups(sel, b, bucketed=rl.rollout.reroll_group_buckets)     # [Gb] groups: a few shapes;
            t1 = time.perf_counter()                                            # the padding copies are dropped
            ep2 = self._reroll(rollouts, params, task.take(problems, pick), take_rows(ep, src_row[pick]),
                               cut[pick], keys.reroll, group_size=n)            # [Gb*N, L]
            t_sample += time.perf_counter() - t1
            r2 = ep2.rewards.reshape(-1, n)                                     # [Gb, N], first g real
            # host glue in numpy or on the call's [Gb*N] shapes only: g varies per step, and an eager
            # jnp op on a g-sized slice compiles a new XLA program for every new g
            r2_np = np.asarray(r2)
            cost["gen"] += int(np.asarray(jnp.sum(ep2.policy_mask, axis=1))[: g * n].sum())
            cost["replayed"] += int(np.asarray(ep2.replayed)[: g * n].sum())
            cost["env"] += int(np.asarray(ep2.env_steps)[: g * n].sum())
            reroll_rate[sel] = np.mean(r2_np >= 1.0, axis=1)[:g]
            obs_bucket = np.full((b,), -1, np.int32)
            obs_bucket[sel] = bucket_np[sel]
            new_prefix = ps.update(state.prefix, jnp.asarray(obs_bucket), jnp.asarray(np.nan_to_num(reroll_rate)),
                                   prefix_cfg)
            if rl.schedule.reroll == "replace":
                use = np.asarray(mixed_groups(r2))[:g] if rl.schedule.reroll_fallback else np.ones((g,), bool)
                swap = sel[use]                                                 # groups actually replaced
                from_group = np.arange(b)                                       # [B] row source per group:
                from_group[swap] = b + np.nonzero(use)[0]                       # >= b means ep2's group - b
                train = _merge_groups(ep, ep2, jnp.asarray(from_group, jnp.int32), n=n)
                train_rewards = np.asarray(rewards).copy()
                train_rewards[swap] = r2_np[:g][use]
                replaced = int(use.sum())
            else:  # append: keep the original groups, add the re-rolled ones (padding copies masked out)
                ep2 = _pad_groups(ep2, b * n)                                   # [B*N]: one update shape
                r2 = ep2.rewards.reshape(b, n)
                keep_extra = jnp.repeat(jnp.arange(b) < g, n)[:, None]
                ep2 = ep2._replace(policy_mask=ep2.policy_mask & keep_extra)
                train = Episodes(*(jnp.concatenate([v, v2]) for v, v2 in zip(ep, ep2)))
                train_rewards = jnp.concatenate([rewards, r2])
                gidx = np.concatenate([gidx, pick, np.full(b - pick.size, pick[0])])  # padding rows: no loss
                replaced = g
        if rl.schedule.reroll == "append" and train_rewards.shape[0] == b:
            # no re-roll this step: pad with empty groups so that the update sees one shape
            # (zeros put from the host: an eager jnp.zeros_like compiles a broadcast per shape the first
            # time a step takes this branch; the concatenation is the re-roll branch's program)
            empty = lambda v: jax.device_put(np.zeros(v.shape, v.dtype))  # noqa: E731
            train = Episodes(*(jnp.concatenate([v, empty(v)]) for v in train))
            train_rewards = jnp.concatenate([train_rewards, empty(train_rewards)])
            gidx = np.concatenate([gidx, np.zeros(b, np.int64)])               # empty groups: no loss
        steered = np.zeros((b,), bool)
        steered[sel] = True
        metrics = {
            "pass_rate": float(jnp.mean(rewards >= 1.0)),
            "pass_rate_train": float(np.mean(
                np.asarray(train_rewards)[: b if rl.schedule.reroll == "replace" else b + sel.size] >= 1.0)),
            "reward_mean": float(jnp.mean(rewards)),
            "groups_mixed": int(jnp.sum(mixed_groups(rewards))),
            "groups_rerolled": int(sel.size),
            "groups_replaced": replaced,
            "groups_steered": int(sel.size),
            "rollouts_sampled": b * n + int(sel.size) * n,
            "tokens_generated": cost["gen"],
            "tokens_replayed": cost["replayed"],
            "env_steps": cost["env"],
            "time_sample": t_sample,
        }
        return Sampled(train=train, train_rewards=train_rewards, k=np.asarray(k), k_bucket=bucket_np, steered=steered,
                       steer_bucket=bucket_np, rate=reroll_rate, prefix=new_prefix, memory=state.memory,
                       metrics=metrics, fresh=(problems, ep), groups=(problems, gidx))


# ---------------------------------------------------------------------- next_visit


def _episodes_rows(tokens, mask, width, units) -> Episodes:
    """A source ``Episodes`` [R] holding only what a replay reads: tokens, policy mask and its policy
    ``units`` [R] (what a task's own cut rule clamps to, ``fixed_cut``)."""
    r = tokens.shape[0]
    z = jnp.zeros((r,), jnp.int32)
    return Episodes(tokens=jnp.asarray(tokens), positions=jnp.zeros((r, width), jnp.int32),
                    valid=jnp.asarray(tokens != 0), policy_mask=jnp.asarray(mask),
                    logprobs=jnp.zeros((r, width), jnp.float32), rewards=z.astype(jnp.float32),
                    units=jnp.asarray(units, jnp.int32),
                    replayed=z, env_steps=z, sampling_logprobs=jnp.zeros((r, width), jnp.float32),
                    truncated=jnp.zeros((r,), bool))


class NextVisit:
    """``next_visit`` (module docstring): a finite pool, each task steered at its next visit from
    the sources stored in ``TaskMemory``. Controls: ``reroll_noprefix`` steers nothing (the
    baseline on the pool); ``extra_rollouts`` appends N fresh rollouts for a seeded share of the
    tasks PS would steer."""

    def __init__(self, task, rl, prefix_cfg: ps.PrefixConfig, *, seed: int, width: int):
        self.task, self.rl, self.prefix_cfg, self.seed, self.width = task, rl, prefix_cfg, int(seed), int(width)
        self._pool = None

    @property
    def pool(self):
        """The M pool problems (``task.train_problems`` at ``POOL_STEP``, seeded by ``pool_seed``)."""
        if self._pool is None:
            sc = self.rl.schedule
            self._pool = self.task.train_problems(seed=sc.pool_seed, step=POOL_STEP, count=sc.pool_size)
        return self._pool

    def init_memory(self) -> TaskMemory:
        return init_memory(self.rl.schedule.pool_size, source_slots(self.rl, self.rl.group_size), self.width)

    def sample(self, state, params, keys: StepKeys, rollouts, *, ids=None) -> Sampled:
        """One step's B·N rollouts (steered tasks from their sources' prefixes) with the sampler's
        ``params``; ``state`` gives the step, the controller and the task memory; ``ids [B]``: the
        pool tasks a selector chose (``prs.rl.select``), else the step's place in the pool order."""
        rl, prefix_cfg, task = self.rl, self.prefix_cfg, self.task
        step = int(state.step)
        n, b = rl.group_size, (rl.tasks_per_step if ids is None else len(ids))
        R, L = b * n, self.width
        k_sample, k_src, k_reroll = keys
        mem = TaskMemory(*(np.array(x) for x in jax.device_get(state.memory)))  # host copies, mutable
        ids = pool_ids(self.seed, step, b, rl.schedule.pool_size) if ids is None else np.asarray(ids)  # [B]
        problems = task.take(self.pool, ids)
        rows_g = np.repeat(np.arange(b), n)                                        # [R] group of each row
        t0 = time.perf_counter()

        # ---- which tasks are steered, from which sources, cut where
        plan = mem.plan[ids]                                                       # [B]
        direction = np.concatenate([ps.bucket_direction(prefix_cfg), [0]])[np.where(plan >= 0, plan, -1)]  # [B]
        cand = mem.src_valid[ids] & np.where((direction > 0)[:, None], mem.src_success[ids],
                                             ~mem.src_success[ids]) & (direction != 0)[:, None]  # [B, S]
        n_cand = cand.sum(1)                                                       # [B]
        order = np.argsort(~cand, axis=1, kind="stable")                           # candidates first
        pick = order[np.arange(b)[:, None], np.arange(n)[None, :] % np.maximum(n_cand, 1)[:, None]]  # [B, N] slot
        units = np.take_along_axis(mem.src_units[ids], pick, axis=1)               # [B, N]
        cut = steer_cuts(state.prefix.rho, plan, units, spread=rl.schedule.cut_spread)       # [B, N]
        planned = (plan >= 0) & (n_cand > 0) & (cut > 0).all(1)                    # [B] tasks PS steers
        steered = planned & (rl.schedule.control == "none")                                 # [B] get a prefix
        cut = np.where(steered[:, None], cut, 0)                                   # [B, N]
        src_tok = mem.src_tokens[ids[:, None], pick]                               # [B, N, L]
        src_msk = mem.src_mask[ids[:, None], pick]
        used_ids = np.where(steered[:, None], mem.src_id[ids[:, None], pick], -1)  # [B, N]

        # ---- sample: exactly B*N rollouts (plus, for extra_rollouts, the extra groups)
        costs0 = dict(getattr(rollouts, "costs", {}))
        wasted = 0
        if not rollouts.multi_turn:
            # one call: a steered row starts from prompt + prefix, an unsteered row from the prompt
            prompt, plen = task.prompts(problems)
            base = np.full((b, L), task.pad_id, np.int32)
            base[:, : prompt.shape[1]] = prompt
            tok = np.where(steered[:, None, None], src_tok, base[:, None, :]).reshape(R, L)
            ep = rollouts.reroll(params, task.take(problems, rows_g),
                                 _episodes_rows(tok, np.zeros_like(tok, bool), L, np.where(steered[:, None], units, 0).reshape(-1)),
                                 cut.reshape(-1), k_sample, group_size=1)
            fresh_ep = None                                                          # only unsteered rows are fresh
        else:
            # multi-turn: fresh episodes for all B tasks, then the steered rows' continuations (replay
            # through execution), padded to B groups so the shapes do not depend on how many
            ep = rollouts.rollout(params, problems, k_sample, group_size=n)
            fresh_ep = ep                                                            # all B tasks, no prefix
            if steered.any():
                sel = np.nonzero(steered)[0]
                padg = reroll_groups(sel, b, bucketed=rl.rollout.reroll_group_buckets)       # [Gb] groups
                prow = (padg[:, None] * n + np.arange(n)[None, :]).reshape(-1)       # [Gb*N] rows
                ep2 = rollouts.reroll(params, task.take(problems, rows_g[prow]),
                                      _episodes_rows(src_tok.reshape(R, L)[prow], src_msk.reshape(R, L)[prow], L,
                                                     units.reshape(R)[prow]),
                                      cut.reshape(-1)[prow], k_reroll, group_size=1)
                where = np.full((b,), -1)
                where[sel] = np.arange(sel.size)                                     # group -> slot in ep2
                take = np.where(steered[rows_g], R + where[rows_g] * n + np.tile(np.arange(n), b), np.arange(R))
                ep = Episodes(*(jnp.concatenate([v, v2])[take] for v, v2 in zip(ep, ep2)))
                wasted = sel.size * n + (padg.size - sel.size) * n                    # discarded fresh rows + padding
        rewards = np.asarray(ep.rewards).reshape(b, n)                             # [B, N]
        k = (rewards >= 1.0).sum(1).astype(np.int32)                               # [B]
        n_rollouts = R
        train, train_rewards = ep, rewards
        gidx = np.arange(b)                                                        # [G] problem of each train group
        extra = np.zeros((b,), bool)
        gen = int(np.asarray(ep.policy_mask).sum())
        if rl.schedule.control == "extra_rollouts":
            u = np.asarray(jax.random.uniform(jax.random.fold_in(k_reroll, 17), (b,)))
            extra = planned & (u < rl.schedule.extra_share)                                 # [B]
            if extra.any():
                sel = np.nonzero(extra)[0]
                padg = reroll_groups(sel, b, bucketed=rl.rollout.reroll_group_buckets)
                ep3 = _pad_groups(rollouts.rollout(params, task.take(problems, padg), k_reroll, group_size=n), R)
                live = np.repeat(np.arange(b) < sel.size, n)                         # [R] padding off
                ep3 = ep3._replace(policy_mask=ep3.policy_mask & jnp.asarray(live)[:, None])
                gidx = np.concatenate([gidx, padg, np.full(b - padg.size, padg[0])])  # padding rows: no loss
            else:                                                                  # empty groups: one shape
                ep3 = Episodes(*(jnp.zeros_like(v) for v in ep))
                live = np.zeros((R,), bool)
                gidx = np.concatenate([gidx, np.zeros(b, np.int64)])
            train = Episodes(*(jnp.concatenate([v, v3]) for v, v3 in zip(ep, ep3)))
            r3 = np.asarray(ep3.rewards).reshape(b, n)
            train_rewards = np.concatenate([rewards, np.where(live.reshape(b, n), r3, 0.0)])
            n_rollouts += int(live.sum())
            gen += int(np.asarray(ep3.policy_mask).sum())
        t_sample = time.perf_counter() - t0
        costs1 = getattr(rollouts, "costs", {})
        t_replay = costs1.get("time_rebuild_s", 0.0) - costs0.get("time_rebuild_s", 0.0)

        # ---- controller: the prefixed groups' pass rates
        rate = np.where(steered, k / n, np.nan).astype(np.float32)                 # [B]
        obs = np.where(steered, plan, -1).astype(np.int32)
        new_prefix = ps.update(state.prefix, jnp.asarray(obs), jnp.asarray(np.nan_to_num(rate)), prefix_cfg) \
            if steered.any() else state.prefix

        # ---- memory update (numpy, fixed shapes)
        pm = np.asarray(ep.policy_mask).reshape(b, n, L)
        toks = np.asarray(ep.tokens).reshape(b, n, L)
        ep_units = np.asarray(ep.units).reshape(b, n)
        succ = rewards >= 1.0
        fresh = ~steered                                                           # [B] unprefixed groups
        over = steered & (((direction > 0) & (k == n)) | ((direction < 0) & (k == 0)))
        k_bucket = np.asarray(ps.assign_buckets(jnp.asarray(k), prefix_cfg))       # [B]
        new_plan = np.where(fresh, k_bucket, np.where(over, -1, plan))
        mem.k[ids], mem.plan[ids] = k, new_plan
        mem.visits[ids] += 1
        gid = (step * R + np.arange(R)).reshape(b, n).astype(np.int32)            # global rollout ids
        if rl.schedule.sources == "one":
            u = np.asarray(jax.random.uniform(k_src, (b, n)))
            s_row = np.argmax(np.where(succ, u, -1.0), axis=1)                     # a success (if any)
            f_row = np.argmax(np.where(~succ, u, -1.0), axis=1)                    # a failure (if any)
            rows = np.stack([s_row, f_row], 1)                                     # [B, 2]
            valid = np.stack([succ.any(1), (~succ).any(1)], 1)                     # [B, 2]
        else:
            rows = np.broadcast_to(np.arange(n), (b, n))
            valid = np.ones((b, n), bool)
        g = np.arange(b)[:, None]
        upd = ids[fresh]
        mem.src_tokens[upd] = toks[g, rows][fresh]
        mem.src_mask[upd] = pm[g, rows][fresh]
        mem.src_units[upd] = ep_units[g, rows][fresh]
        mem.src_success[upd] = succ[g, rows][fresh]
        mem.src_valid[upd] = valid[fresh]
        mem.src_id[upd] = np.where(valid, gid[g, rows], -1)[fresh]

        sources = {"step": step, "ids": ids, "steered": steered, "source_ids": used_ids, "cut": cut,
                   "generated": np.asarray(ep.policy_mask).sum(1)}
        metrics: dict[str, Any] = {
            "epoch": step * b // rl.schedule.pool_size,
            "pass_rate": float(np.mean(rewards >= 1.0)),
            "pass_rate_train": float(np.mean(rewards >= 1.0)),
            "pass_rate_unsteered": float(np.mean(rewards[~steered] >= 1.0)) if (~steered).any() else None,
            "reward_mean": float(np.mean(rewards)),
            "groups_mixed": int(np.sum(np.asarray(mixed_groups(jnp.asarray(rewards))))),
            "groups_planned": int(planned.sum()),
            "groups_steered": int(steered.sum()),
            "groups_rerolled": int(steered.sum()),
            "groups_replaced": int(steered.sum()),
            "groups_extra": int(extra.sum()),
            "rollouts_sampled": n_rollouts,
            # rows the sampler ran but the batch does not use (multi-turn: the steered tasks' fresh rows
            # and the re-roll call's padding, the price of fixed shapes; their tokens are in tokens_sampled)
            "rollouts_wasted": int(wasted),
            "tokens_sampled": int(costs1["tokens_generated"] - costs0["tokens_generated"])
            if "tokens_generated" in costs1 else gen,
            "tokens_generated": gen,
            "tokens_replayed": int(np.asarray(ep.replayed).sum()),
            "env_steps": int(np.asarray(ep.env_steps).sum()),
            "time_sample": t_sample - t_replay,
            "time_replay": t_replay,
        }
        if fresh_ep is not None:  # task metrics of fresh rollouts (trap: hack rate, ...), as same_step logs
            fresh_view = (problems, fresh_ep)
        elif (~steered).any():
            gs = np.nonzero(~steered)[0]
            rows_f = (gs[:, None] * n + np.arange(n)[None, :]).reshape(-1)
            fresh_view = (task.take(problems, gs), Episodes(*(v[rows_f] for v in ep)))
        else:
            fresh_view = None
        return Sampled(train=train, train_rewards=train_rewards, k=k, k_bucket=k_bucket, steered=steered,
                       steer_bucket=plan, rate=rate, prefix=new_prefix,
                       memory=TaskMemory(*(jnp.asarray(x) for x in mem)), metrics=metrics, fresh=fresh_view,
                       sources=sources, groups=(problems, gidx))
