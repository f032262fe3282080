"""The GRPO trainer with Prefix Sampling (PS), for single-turn tasks with a binary verifier.

One step (``Trainer.step``), all shapes fixed per run so that every jitted piece compiles once:

    1. B problems (deterministic in (seed, step)), each prompt repeated N times     -> [R, P]
    2. sample N rollouts per problem, reward them with the task's verifier          -> r [B, N]
    3. buckets by k = Σ r (``prs.core.prefix.assign_buckets``); for every skewed group:
       a source rollout (a success for a hard group, a failure for an easy one), a cut point
       c = round(ρ_b · len(source's policy tokens)) clamped to [1, len − 1], and N re-rollouts
       whose input is prompt + the source's first c generated tokens: the policy generates only
       the continuation, and the replayed tokens are *inputs*, so the sampler's ``policy_mask``
       is 0 on them and they get no gradient (prefix masking, Zhu et al. 2026, §3)
    4. the re-rolled group replaces the original (``reroll="replace"``) or is added beside it
       (``reroll="append"``); the controller sees each re-rolled group's pass rate
       (``prs.core.prefix.update``)
    5. advantages per group (default leave-one-out without std: the GRPO++ recipe), groups
       without reward contrast dropped (DAPO's filter, as a mask so shapes stay fixed)
    6. the clipped surrogate (``prs.policy_loss``, clip-high 0.28, no KL by default) on the
       policy tokens, one optax update.

Randomness: every step draws its keys from ``fold_in(PRNGKey(seed), step)`` and its problems from
``(seed, step)``, so a run resumed from a checkpoint at step s continues exactly as the
uninterrupted run (``prs.rl.runner`` tests this).

The host drives the loop: sampling stops rows at EOS inside one jitted ``while_loop`` per call,
rewards are jitted, and only small per-group vectors (k, buckets, sources, cuts) come back to the
host to assemble the re-roll batch. The trainer never imports Hydra.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from prs.core import prefix as ps
from prs.core.advantages import group_advantages, mixed_groups
from prs.core.losses import policy_loss, token_entropy, token_logprobs
from prs.models.qwen3 import ModelConfig, forward, init_params
from prs.rl.episodes import Episodes, SingleTurnRollouts, take_rows
from prs.rewards.verifiers import cap_successes_per_task

ESTIMATORS = ("grpo", "dr_grpo", "rloo")
REROLL_MODES = ("replace", "append")
ALGORITHMS = ("grpo", "rft")


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Hyper-parameters of the RL loop (the defaults are the GRPO++ recipe at N = 8).

    Attributes:
      tasks_per_step: B, problems per step.        group_size: N, rollouts per problem.
      estimator: advantage estimator (``grpo``, ``dr_grpo``, ``rloo``).
      std_ddof: ddof of the GRPO std.              drop_no_contrast: mask groups with zero reward std.
      clip_low, clip_high: PPO ratio clip (DAPO's 0.2 / 0.28).
      agg: loss aggregation (``prs.core.losses.AGG_MODES``); GRPO++ uses seq-mean-token-sum.
      kl_coef, entropy_coef: no KL and no entropy loss in GRPO++.
      lr, b1, b2, weight_decay, grad_clip, warmup_steps: AdamW with linear warm-up.
      algorithm: ``grpo`` (the clipped policy gradient above) or ``rft``: SWE-Gym's rejection-
        sampling fine-tuning, i.e. token-mean cross-entropy on successful rollouts only, at most
        ``rft_cap`` per task chosen at random (``prs.rewards.verifiers.cap_successes_per_task``; Pan et
        al. 2025, arXiv:2412.21139). RFT runs without Prefix Sampling (``mode="baseline"``).
      reroll: ``replace`` or ``append`` re-rolled groups.
      reroll_fallback: with ``replace``, keep the original group when its re-rolled group has no
        reward contrast (all N continuations succeed or all fail). A prefix often decides the
        outcome for the whole group, and swapping a mixed group for a degenerate one would *remove*
        signal (measured on arith: kept groups fell from 6.4 to 3.1 per step without it). The
        controller still sees the re-rolled group's pass rate either way.
      temperature, top_k, top_p: sampling of training rollouts (temperature 1 keeps the sampler's
        log-probabilities equal to the policy's, so the PPO ratio starts at exactly 1).
      max_new_tokens: generation budget per rollout (and per re-rollout continuation).
      eval_count, eval_samples, eval_temperature: held-out pass@1 = mean reward over
        ``eval_count`` fixed problems × ``eval_samples`` samples.
    """

    tasks_per_step: int = 16
    group_size: int = 8
    estimator: str = "rloo"
    std_ddof: int = 1
    drop_no_contrast: bool = True
    clip_low: float = 0.2
    clip_high: float = 0.28
    agg: str = "seq-mean-token-sum"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    lr: float = 3e-4
    b1: float = 0.9
    b2: float = 0.99
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    warmup_steps: int = 0
    reroll: str = "replace"
    reroll_fallback: bool = True
    algorithm: str = "grpo"
    rft_cap: int = 2
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int | None = None
    eval_count: int = 256
    eval_samples: int = 2
    eval_temperature: float = 1.0

    def __post_init__(self):
        if self.group_size < 2:
            raise ValueError(f"RLConfig.group_size (N) must be >= 2, got {self.group_size}")
        if self.tasks_per_step < 1:
            raise ValueError(f"RLConfig.tasks_per_step must be >= 1, got {self.tasks_per_step}")
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"RLConfig.estimator={self.estimator!r}; choose from {ESTIMATORS}")
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"RLConfig.algorithm={self.algorithm!r}; choose from {ALGORITHMS}")
        if self.rft_cap < 1:
            raise ValueError(f"RLConfig.rft_cap must be >= 1, got {self.rft_cap}")
        if self.reroll not in REROLL_MODES:
            raise ValueError(f"RLConfig.reroll={self.reroll!r}; choose from {REROLL_MODES}")
        if not self.lr > 0:
            raise ValueError(f"RLConfig.lr must be > 0, got {self.lr}")
        if self.eval_count < 1 or self.eval_samples < 1:
            raise ValueError(f"RLConfig.eval_count={self.eval_count} and eval_samples={self.eval_samples} must be >= 1")


class TrainState(NamedTuple):
    step: jax.Array            # [] int32, the next step to run
    params: Any                # model parameters
    opt_state: Any             # optax state
    prefix: ps.PrefixState     # controller state, [K] per bucket


class Batch(NamedTuple):
    """What the update sees; L = the run's fixed training width."""

    tokens: jax.Array       # [R, L] int32
    positions: jax.Array    # [R, L] int32
    valid: jax.Array        # [R, L] bool
    loss_mask: jax.Array    # [R, L] bool, policy tokens of kept groups
    old_logp: jax.Array     # [R, L] f32, sampler log-probs (temperature 1, raw policy)
    advantages: jax.Array   # [R] f32


class Trainer:
    """Holds the static configuration and the jitted pieces of one run.

    Args:
      task: a ``prs.tasks.registry.SingleTurnTask``, or any task with ``make_rollouts(trainer)``
        returning an object with ``width``, ``rollout(...)`` and ``reroll(...)`` like
        ``SingleTurnRollouts`` (multi-turn agent tasks).
      model_cfg: ``prs.models.qwen3.ModelConfig`` (``vocab_size`` must equal the task's).
      rl: ``RLConfig``.  prefix: ``prs.core.prefix.PrefixConfig`` (its ``n`` must equal ``rl.group_size``).
      seed: the run's seed.  mesh: optional ``prs.parallel.sharding`` mesh for the sampler's batch.
    """

    def __init__(self, task, model_cfg: ModelConfig, rl: RLConfig, prefix: ps.PrefixConfig, *,
                 seed: int = 0, mesh=None):
        if model_cfg.vocab_size != task.vocab_size:
            raise ValueError(f"model vocab_size={model_cfg.vocab_size} != task {task.name!r} vocab_size={task.vocab_size}")
        if prefix.n != rl.group_size:
            raise ValueError(f"prefix.n={prefix.n} must equal rl.group_size={rl.group_size}")
        if rl.algorithm == "rft" and prefix.mode != "baseline":
            raise ValueError(f"RLConfig.algorithm='rft' runs without Prefix Sampling; got prefix mode {prefix.mode!r}")
        self.task, self.model_cfg, self.rl, self.prefix_cfg = task, model_cfg, rl, prefix
        self.seed, self.mesh = int(seed), mesh
        # A task may bring its own rollouts (multi-turn agents): ``task.make_rollouts(trainer)``.
        make = getattr(task, "make_rollouts", None)
        self.rollouts = make(self) if make is not None else SingleTurnRollouts(self)
        self.width = self.rollouts.width
        self.tx = optax.chain(
            optax.clip_by_global_norm(rl.grad_clip),
            optax.adamw(optax.linear_schedule(0.0, rl.lr, max(rl.warmup_steps, 1)) if rl.warmup_steps else rl.lr,
                        b1=rl.b1, b2=rl.b2, weight_decay=rl.weight_decay),
        )
        self._update = jax.jit(functools.partial(_update_fn, cfg=model_cfg, rl=rl, tx=self.tx), donate_argnums=(0, 1))
        self._eval_problems = task.eval_problems(count=rl.eval_count)

    # ------------------------------------------------------------------ state
    def init_state(self, params) -> TrainState:
        """A fresh state at step 0. ``params`` are copied: ``step`` donates the state's buffers."""
        params = jax.tree.map(jnp.copy, params)
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=self.tx.init(params),
                          prefix=ps.init(self.prefix_cfg))

    def _keys(self, step: int):
        k = jax.random.fold_in(jax.random.PRNGKey(self.seed), step)
        return jax.random.split(k, 3)  # sample, source choice, re-roll

    # ------------------------------------------------------------------ one step
    def step(self, state: TrainState) -> tuple[TrainState, dict[str, Any]]:
        """Collects the step's batch (``collect``) and applies one update."""
        batch, new_prefix, metrics = self.collect(state)
        t2 = time.perf_counter()
        params, opt_state, lm = self._update(state.params, state.opt_state, batch)
        lm = jax.device_get(lm)
        metrics["time_update"] = time.perf_counter() - t2
        metrics.update({f"loss/{key}": float(val) for key, val in lm.items()})
        return TrainState(step=state.step + 1, params=params, opt_state=opt_state, prefix=new_prefix), metrics

    def loss(self, params, batch: "Batch", logp_offset=None):
        """The step's loss on ``batch`` (what ``step`` differentiates); ``logp_offset [R, L-1]`` is
        added to the per-token log-probs so tests can read the per-token gradient."""
        return _loss_fn(params, batch, cfg=self.model_cfg, rl=self.rl, logp_offset=logp_offset)[0]

    def collect(self, state: TrainState) -> tuple["Batch", ps.PrefixState, dict[str, Any]]:
        """Steps 1-5 of the module docstring: the training batch, the new controller state, metrics."""
        rl, pc, task = self.rl, self.prefix_cfg, self.task
        step = int(state.step)
        n, b = rl.group_size, rl.tasks_per_step
        k_sample, k_src, k_reroll = self._keys(step)
        t0 = time.perf_counter()
        problems = task.train_problems(seed=self.seed, step=step, count=b)
        ep = self.rollouts.rollout(state.params, problems, k_sample, group_size=n)  # [R, L]
        rewards = ep.rewards.reshape(b, n)                                      # [B, N]
        # k counts full successes (reward 1): the same as Σ r for a binary reward, and the pass
        # count when a task trains on a partial-credit reward (fraction of tests, similarity)
        k = jnp.sum(rewards >= 1.0, axis=1).astype(jnp.int32)                  # [B]
        bucket = ps.assign_buckets(k, pc)                                       # [B]
        cost = {"gen": int(jnp.sum(ep.policy_mask)), "replayed": 0, "env": int(jnp.sum(ep.env_steps))}
        t_sample = time.perf_counter() - t0

        train, train_rewards = ep, rewards
        bucket_np = np.asarray(bucket)
        sel = np.nonzero(bucket_np >= 0)[0]                                     # re-rolled groups
        reroll_rate = np.full((b,), np.nan, np.float32)
        new_prefix = state.prefix
        replaced = 0
        if sel.size:
            src = np.asarray(ps.choose_sources(k_src, rewards, bucket, pc))     # [B]
            src_row = np.arange(b) * n + np.maximum(src, 0)
            cut = np.asarray(ps.cut_points(state.prefix, bucket, ep.units[src_row], pc))  # [B] units
            sel = sel[cut[sel] > 0]                                             # sources too short to cut
        if sel.size:
            g = sel.size
            pick = np.concatenate([sel, np.full(b - g, sel[0])])                # B groups: one re-roll shape;
            t1 = time.perf_counter()                                            # the padding copies are dropped
            ep2 = self.rollouts.reroll(state.params, task.take(problems, pick), take_rows(ep, src_row[pick]),
                                       cut[pick], k_reroll, group_size=n)      # [B*N, L]
            t_sample += time.perf_counter() - t1
            r2 = ep2.rewards.reshape(b, n)                                      # [B, N], first g real
            # host glue in numpy or on fixed [B*N] shapes only: g varies per step, and an eager
            # jnp op on a g-sized slice compiles a new XLA program for every new g
            r2_np = np.asarray(r2)
            cost["gen"] += int(np.asarray(jnp.sum(ep2.policy_mask, axis=1))[: g * n].sum())
            cost["replayed"] += int(np.asarray(ep2.replayed)[: g * n].sum())
            cost["env"] += int(np.asarray(ep2.env_steps)[: g * n].sum())
            reroll_rate[sel] = np.mean(r2_np >= 1.0, axis=1)[:g]
            obs_bucket = np.full((b,), -1, np.int32)
            obs_bucket[sel] = bucket_np[sel]
            new_prefix = ps.update(state.prefix, jnp.asarray(obs_bucket), jnp.asarray(np.nan_to_num(reroll_rate)), pc)
            if rl.reroll == "replace":
                use = np.asarray(mixed_groups(r2))[:g] if rl.reroll_fallback else np.ones((g,), bool)
                swap = sel[use]                                                 # groups actually replaced
                from_group = np.arange(b)                                       # [B] row source per group:
                from_group[swap] = b + np.nonzero(use)[0]                       # >= b means ep2's group - b
                train = _merge_groups(ep, ep2, jnp.asarray(from_group, jnp.int32), n=n)
                train_rewards = np.asarray(rewards).copy()
                train_rewards[swap] = r2_np[:g][use]
                replaced = int(use.sum())
            else:  # append: keep the original groups, add the re-rolled ones (padding copies masked out)
                keep_extra = jnp.repeat(jnp.arange(b) < g, n)[:, None]
                ep2 = ep2._replace(policy_mask=ep2.policy_mask & keep_extra)
                train = Episodes(*(jnp.concatenate([v, v2]) for v, v2 in zip(ep, ep2)))
                train_rewards = jnp.concatenate([rewards, r2])
                replaced = g
        t2 = time.perf_counter()
        if rl.reroll == "append" and train_rewards.shape[0] == b:
            # no re-roll this step: pad with empty groups so that the update sees one shape
            train = Episodes(*(jnp.concatenate([v, jnp.zeros_like(v)]) for v in train))
            train_rewards = jnp.concatenate([train_rewards, jnp.zeros_like(train_rewards)])
        groups = train_rewards.shape[0]
        adv = group_advantages(train_rewards, estimator=rl.estimator, std_ddof=rl.std_ddof)  # [G, N]
        if rl.algorithm == "rft":  # SWE-Gym: successes only, at most rft_cap per task
            chosen = cap_successes_per_task(jnp.repeat(jnp.arange(groups), n), train_rewards.reshape(-1) >= 1.0,
                                            key=k_src, cap=rl.rft_cap)          # [R]
            keep = jnp.any(chosen.reshape(groups, n), axis=1)
            loss_mask = train.policy_mask & chosen[:, None]
        else:
            keep = mixed_groups(train_rewards) if rl.drop_no_contrast else jnp.ones((groups,), bool)
            loss_mask = train.policy_mask & jnp.repeat(keep, n)[:, None]
        batch = Batch(tokens=train.tokens, positions=train.positions, valid=train.valid,
                      loss_mask=loss_mask, old_logp=train.logprobs, advantages=adv.reshape(-1))

        metrics: dict[str, Any] = {
            "step": step,
            "pass_rate": float(jnp.mean(rewards >= 1.0)),
            "pass_rate_train": float(np.mean(np.asarray(train_rewards)[: b if rl.reroll == "replace" else b + sel.size] >= 1.0)),
            "reward_mean": float(jnp.mean(rewards)),
            "groups_mixed": int(jnp.sum(mixed_groups(rewards))),
            "groups_kept": int(jnp.sum(keep)),
            "groups_rerolled": int(sel.size),
            "groups_replaced": replaced,
            "tokens_generated": cost["gen"],
            "tokens_replayed": cost["replayed"],
            "env_steps": cost["env"],
            "time_sample": t_sample,
            "time_batch": time.perf_counter() - t2,
        }
        hist = np.bincount(np.asarray(k), minlength=n + 1)
        metrics["k_hist"] = hist.tolist()
        rho_np, ema_np = np.asarray(new_prefix.rho), np.asarray(new_prefix.ema)
        for j, kb in enumerate(ps.bucket_ks(pc)):
            in_b = sel[bucket_np[sel] == j]
            metrics[f"bucket/{kb}/count"] = int(np.sum(bucket_np == j))
            metrics[f"bucket/{kb}/reroll_pass_rate"] = float(np.mean(reroll_rate[in_b])) if in_b.size else None
            metrics[f"bucket/{kb}/rho"] = float(rho_np[j])
            metrics[f"bucket/{kb}/ema"] = float(ema_np[j])
        return batch, new_prefix, metrics

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, params, step: int) -> dict[str, float]:
        """Held-out pass@1: mean reward over the fixed eval problems × ``eval_samples``."""
        key = jax.random.fold_in(jax.random.PRNGKey(self.seed + 7_919), step)
        ep = self.rollouts.rollout(params, self._eval_problems, key, group_size=self.rl.eval_samples, evaluation=True)
        return {"eval/pass_at_1": float(jnp.mean(ep.rewards >= 1.0)), "eval/reward_mean": float(jnp.mean(ep.rewards))}


@functools.partial(jax.jit, static_argnames=("n",))
def _merge_groups(ep: Episodes, ep2: Episodes, from_group: jax.Array, *, n: int) -> Episodes:
    """Group g of the result is ``ep``'s group ``from_group[g]`` if < B, else ``ep2``'s group
    ``from_group[g] - B`` (all N rows of it). ep, ep2: [B*N, ...]; from_group [B] int32. One
    compile per run whatever the number of replaced groups."""
    rows = (from_group[:, None] * n + jnp.arange(n)[None, :]).reshape(-1)  # [B*N] into concat([ep, ep2])
    return Episodes(*(jnp.concatenate([v, v2])[rows] for v, v2 in zip(ep, ep2)))


def _loss_fn(params, batch: Batch, *, cfg: ModelConfig, rl: RLConfig, logp_offset=None):
    """The clipped surrogate on ``batch``. Logits at t predict token t + 1, so every per-token
    array is taken on [:, 1:] against logits of [:, :-1]."""
    logits = forward(params, batch.tokens[:, :-1], cfg=cfg, positions=batch.positions[:, :-1],
                     valid=batch.valid[:, :-1])                                   # [R, L-1, V]
    logp = token_logprobs(logits, batch.tokens[:, 1:])                            # [R, L-1]
    if logp_offset is not None:
        logp = logp + logp_offset
    if rl.algorithm == "rft":  # token-mean negative log-likelihood of the selected rollouts
        m = batch.loss_mask[:, 1:].astype(jnp.float32)
        count = jnp.sum(m)
        nll = -jnp.sum(jnp.where(m > 0, logp, 0.0)) / jnp.maximum(count, 1.0)
        return nll, {"nll": nll, "token_count": count}
    ent = token_entropy(logits) if rl.entropy_coef else None
    return policy_loss(logp, batch.old_logp[:, 1:], batch.advantages, batch.loss_mask[:, 1:],
                       clip_low=rl.clip_low, clip_high=rl.clip_high, agg=rl.agg,
                       entropy=ent, entropy_coef=rl.entropy_coef)


def _update_fn(params, opt_state, batch: Batch, *, cfg: ModelConfig, rl: RLConfig, tx):
    """One optax step on the clipped surrogate."""
    (loss, m), grads = jax.value_and_grad(_loss_fn, has_aux=True)(params, batch, cfg=cfg, rl=rl)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    m = {**m, "loss": loss, "grad_norm": optax.tree.norm(grads)}
    return params, opt_state, m


# ---------------------------------------------------------------------- supervised warm start


def sft_loss(params, tokens, loss_mask, *, cfg: ModelConfig):
    """Token-mean cross-entropy on the demonstration tokens: −Σ m·log π(yₜ|y<t) / Σ m."""
    logits = forward(params, tokens[:, :-1], cfg=cfg)
    logp = token_logprobs(logits, tokens[:, 1:])
    m = loss_mask[:, 1:].astype(jnp.float32)
    return -jnp.sum(logp * m) / jnp.maximum(jnp.sum(m), 1.0)


def supervised_warm_start(task, model_cfg: ModelConfig, *, steps: int, batch: int, lr: float, seed: int,
                          log_every: int = 50, log=print):
    """Trains a fresh model on the task's (imperfect) demonstrations; returns params.

    Data: ``steps × batch`` problems drawn from a stream disjoint from RL's (seed offset), each
    with a seeded demonstration. AdamW with cosine decay; one jit compile.
    """
    params = init_params(model_cfg, jax.random.PRNGKey(seed))
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, max(steps // 20, 1), max(steps, 2))
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))
    opt = tx.init(params)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def upd(p, o, tokens, mask):
        loss, g = jax.value_and_grad(sft_loss)(p, tokens, mask, cfg=model_cfg)
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o, loss

    t0 = time.perf_counter()
    for i in range(steps):
        probs = task.train_problems(seed=10_000_000 + seed, step=i, count=batch)
        tokens, mask = task.demonstrations(probs, seed=seed * 100_003 + i)
        params, opt, loss = upd(params, opt, jnp.asarray(tokens), jnp.asarray(mask))
        if log and (i % log_every == 0 or i == steps - 1):
            log(f"[sft] step {i + 1}/{steps} loss {float(loss):.4f} ({time.perf_counter() - t0:.1f}s)")
    return params
