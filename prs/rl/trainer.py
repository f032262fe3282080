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
from prs.core.advantages import ESTIMATORS, mixed_groups
from prs.core.losses import LOSS_TYPES, RATIO_LEVELS, agg_denominator, policy_loss, token_logprobs
from prs.rl import loss_menu
from prs.models.lm_head import lm_head_logprobs
from prs.models.qwen3 import ModelConfig, forward, forward_hidden, init_params
from prs.parallel.sharding import place, shard_rows
from prs.parallel import multihost
from prs.rl import schedule
from prs.rl import select as selector
from prs.rl.config import (ALGORITHMS, REROLL_BUDGETS, REROLL_MODES, EvalConfig, LossConfig, OptimConfig,  # noqa: F401
                           RLConfig, ScheduleConfig)
from prs.rl.episodes import SAMPLING_DTYPES, Episodes, RolloutConfig, SingleTurnRollouts  # noqa: F401
from prs.rollout.engine import ENGINES
from prs.rewards.verifiers import cap_successes_per_task

class Collected(NamedTuple):
    """``Trainer.collect``'s result: the update's batch and what the step hands to the next one."""

    batch: "Batch"
    prefix: ps.PrefixState     # the controller after this step's observations
    metrics: dict[str, Any]
    memory: Any = None         # next_visit: the new TaskMemory; same_step: None
    sources: dict[str, Any] | None = None  # next_visit: ids, steered, source ids, cuts (tests, debugging)
    select: Any = None         # schedule.select != uniform: the new prs.rl.select.SelectState


class TrainState(NamedTuple):
    """Everything a step reads and a resume needs besides the configuration and the seed; a
    checkpoint holds it whole (``checkpoint_tree``), so a restored run continues exactly."""

    step: jax.Array            # [] int32, the next step to run
    params: Any                # model parameters
    opt_state: Any             # optax state
    prefix: ps.PrefixState     # controller state, [K] per bucket
    memory: Any = None         # next_visit: prs.rl.schedule.TaskMemory ([M] tasks); same_step: None
    ref_params: Any = None     # kl_coef > 0: the frozen KL reference (the parameters the run started from); else None
    select: Any = None         # schedule.select != uniform: prs.rl.select.SelectState ([M] tasks); uniform: None


def checkpoint_tree(state: TrainState) -> dict[str, Any]:
    """``state`` as orbax saves and restores it: its fields by name, ``ref_params`` left out when
    there is none (``kl_coef == 0``), so such a checkpoint holds exactly step, parameters,
    optimiser state, controller and task memory. ``TrainState(**tree)`` is the inverse."""
    tree = state._asdict()
    for name in ("ref_params", "select"):  # absent when unused: a uniform run's checkpoint is what it always was
        if tree[name] is None:
            del tree[name]
    return tree


class Batch(NamedTuple):
    """What the update sees; L = the run's fixed training width."""

    tokens: jax.Array       # [R, L] int32
    positions: jax.Array    # [R, L] int32
    valid: jax.Array        # [R, L] bool
    loss_mask: jax.Array    # [R, L] bool, policy tokens of kept groups
    old_logp: jax.Array     # [R, L] f32, sampler log-probs (temperature 1, raw policy)
    advantages: jax.Array   # [R] f32
    sampler_logp: jax.Array | None = None  # [R, L] f32 log q(y) actually sampled; only with rollout_correction


class Trainer:
    """Holds the static configuration and the jitted pieces of one run.

    Args:
      task: a ``prs.tasks.registry.SingleTurnTask`` (sampled by ``prs.rl.episodes.SingleTurnRollouts``),
        or any task with ``make_rollouts(model_cfg=, sampling=, mesh=)`` returning its own
        ``prs.rl.episodes.Rollouts`` (multi-turn agent tasks).
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
        if rl.loss.algorithm == "rft" and prefix.mode != "baseline":
            raise ValueError(f"RLConfig.loss.algorithm='rft' runs without Prefix Sampling; got prefix mode {prefix.mode!r}")
        self.task, self.model_cfg, self.rl, self.prefix_cfg = task, model_cfg, rl, prefix
        self.seed, self.mesh = int(seed), mesh
        multihost.multi_process(mesh)  # several processes need a mesh over all of them (ValueError)
        # A task may bring its own rollouts (multi-turn agents): ``task.make_rollouts(model_cfg=, sampling=, mesh=)``.
        make = getattr(task, "make_rollouts", None)
        if make is not None:
            if rl.schedule.reroll_budget != "shared":  # an agent's prefix turns always count against max_turns
                raise ValueError(f"ScheduleConfig.reroll_budget={rl.schedule.reroll_budget!r} (schedule.reroll_budget) "
                                 "with a multi-turn agent task, whose replayed turns count against its turn budget; "
                                 "allowed reroll_budget='shared'")
            self.rollouts = make(model_cfg=model_cfg, sampling=rl.rollout, mesh=mesh)
        else:
            # a single-turn task may name a SingleTurnRollouts subclass (its own prefix sources: prs.tasks.mechanism)
            cls = getattr(task, "rollouts_class", SingleTurnRollouts)
            self.rollouts = cls.from_settings(task, rl.rollout, model_cfg=model_cfg, mesh=mesh,
                                              reroll_budget=rl.schedule.reroll_budget, logits_chunk=rl.logits_chunk)
        self.width = self.rollouts.width
        self.budget = loss_menu.length_budget(self.rollouts, rl)
        self.schedule = schedule.make_schedule(task, rl, prefix, seed=self.seed, width=self.width)
        # which tasks get rollouts (schedule.select); uniform: none, the schedule draws its own
        self.selector = None if rl.schedule.select == "uniform" else selector.Selector(task, rl, self.schedule,
                                                                                        seed=self.seed)
        opt = rl.optim
        self.tx = optax.chain(
            optax.clip_by_global_norm(opt.grad_clip),
            optax.adamw(optax.linear_schedule(0.0, opt.lr * opt.lr_scale, max(opt.warmup_steps, 1)) if opt.warmup_steps
                        else opt.lr * opt.lr_scale,
                        b1=opt.b1, b2=opt.b2, weight_decay=opt.weight_decay),
        )
        update = functools.partial(update_step, cfg=model_cfg, rl=rl, tx=self.tx, norm_len=self.width - 1)
        self.param_shardings = self.opt_shardings = None
        self._cast = None  # jitted cast to the sampling dtype (sampling_params)
        if mesh is None:
            self._update = jax.jit(update, donate_argnums=(0, 1))
        else:  # parameters AND optimizer state laid out by prs.parallel.sharding's logical rules
            from prs.parallel import sharding as shd

            self.param_shardings = shd.param_shardings(model_cfg, mesh)
            self.opt_shardings = shd.opt_state_shardings(self.tx, model_cfg.param_shapes(), self.param_shardings, mesh)
            rows = self._rows = Batch(*(shd.data_sharding(mesh, nd) for nd in (2, 2, 2, 2, 2, 1)),
                                      sampler_logp=shd.data_sharding(mesh, 2) if rl.loss.rollout_correction else None)
            ref = (self.param_shardings,) if rl.loss.kl_coef else ()  # the reference is laid out like the policy
            self._update = jax.jit(update, donate_argnums=(0, 1),
                                   in_shardings=(self.param_shardings, self.opt_shardings, rows, *ref),
                                   out_shardings=(self.param_shardings, self.opt_shardings, shd.replicated(mesh)))
        self._eval_problems = task.eval_problems(count=rl.eval.count)

    # ------------------------------------------------------------------ state
    def init_state(self, params) -> TrainState:
        """A fresh state at step 0. ``params`` are copied: ``step`` donates the state's buffers.
        With ``kl_coef > 0`` a second copy becomes the frozen reference policy ``ref_params`` (a
        resumed run restores the one its checkpoint holds)."""
        params = jax.tree.map(jnp.copy, params)
        if self.mesh is None:
            opt_state = self.tx.init(params)
        else:
            params = place(params, self.param_shardings)  # several processes: each places its own slices
            opt_state = jax.jit(self.tx.init, out_shardings=self.opt_shardings)(params)
        # the reference policy: the parameters the run starts from, never updated
        ref_params = jax.tree.map(jnp.copy, params) if self.rl.loss.kl_coef else None
        memory = self.schedule.init_memory()  # next_visit: the task memory; same_step: None
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=opt_state,
                          prefix=ps.init(self.prefix_cfg), memory=memory, ref_params=ref_params,
                          select=None if self.selector is None else self.selector.init_state())

    def step_keys(self, step: int) -> schedule.StepKeys:
        """The step's keys (sample, source choice, re-roll), split from ``fold_in(PRNGKey(seed), step)``."""
        return schedule.step_keys(self.seed, step)

    # ------------------------------------------------------------------ one step
    def step(self, state: TrainState) -> tuple[TrainState, dict[str, Any]]:
        """Collects the step's batch (``collect``) and applies one update."""
        c = self.collect(state)
        batch, metrics = c.batch, c.metrics
        metrics.update(self.rollouts.pop_metrics())  # rollout/*: another engine's mismatch
        t2 = time.perf_counter()
        params, opt_state, lm = self.update(state.params, state.opt_state, batch, ref_params=state.ref_params)
        lm = jax.device_get(lm)
        metrics["time_update"] = time.perf_counter() - t2
        metrics.update({f"loss/{key}": float(val) for key, val in lm.items()})
        return TrainState(step=state.step + 1, params=params, opt_state=opt_state, prefix=c.prefix,
                          memory=c.memory, ref_params=state.ref_params, select=c.select), metrics

    def update(self, params, opt_state, batch: "Batch", ref_params=None):
        """The jitted optax step on ``batch`` cut to its bucketed longest row (``update_width``);
        under the trainer's mesh when it has one; ``ref_params``: the state's KL reference (needed
        with ``kl_coef > 0``). Returns (params, opt_state, loss metrics)."""
        w = update_width(batch.valid, self.width)
        if w < batch.tokens.shape[1]:
            batch = Batch(*(x[:, :w] if x is not None and x.ndim == 2 else x for x in batch))
        _check_reference(ref_params, self.rl)
        ref = (ref_params,) if self.rl.loss.kl_coef else ()
        if self.mesh is None:
            return self._update(params, opt_state, batch, *ref)
        batch = shard_rows(batch, self._rows)  # rows over the batch axes; each process feeds its own rows
        with jax.set_mesh(self.mesh):
            return self._update(params, opt_state, batch, *ref)

    def sampling_params(self, params):
        """The parameters the sampler runs on: ``params`` themselves (``sampling_dtype="param"``) or
        a copy cast to ``rl.rollout.sampling_dtype`` (e.g. bf16: half the bytes of fp32 masters), laid out
        for the sampler (``prs.parallel.sharding.sampling_shardings``: replicated over the batch
        axes, split over ``tensor``); made from the current parameters at every step, i.e.
        refreshed after each update."""
        if self.rl.rollout.sampling_dtype == "param":
            return params
        if self._cast is None:
            dt = jnp.dtype(self.rl.rollout.sampling_dtype)
            cast = lambda p: jax.tree.map(lambda x: x.astype(dt), p)  # noqa: E731
            out = None
            if self.mesh is not None:  # laid out for the sampler: whole over the batch axes, split over tensor
                from prs.parallel.sharding import sampling_shardings

                out = sampling_shardings(self.model_cfg, self.mesh)
            self._cast = jax.jit(cast, out_shardings=out)
        return self._cast(params)

    def loss(self, params, batch: "Batch", logp_offset=None, ref_params=None):
        """The step's loss on ``batch`` (what ``step`` differentiates); ``logp_offset [R, L-1]`` is
        added to the per-token log-probs so tests can read the per-token gradient; ``ref_params``:
        the state's KL reference (needed with ``kl_coef > 0``)."""
        return _loss_fn(params, batch, cfg=self.model_cfg, rl=self.rl, logp_offset=logp_offset,
                        norm_len=self.width - 1, ref_params=ref_params)[0]

    def collect(self, state: TrainState) -> "Collected":
        """Steps 1-5 of the module docstring: the schedule strategy samples (``self.schedule``:
        ``same_step`` or ``next_visit``, controls included), then one skeleton for every schedule
        assembles the batch (advantages, filters, loss mask) and the step's metrics."""
        prefix_cfg, n = self.prefix_cfg, self.rl.group_size
        step = int(state.step)
        keys = self.step_keys(step)
        policy = self.sampling_params(state.params)  # the sampler's copy of this step's policy
        if self.selector is None:
            s = self.schedule.sample(state, policy, keys, self.rollouts)
        else:  # the selector picks the tasks and drives the schedule over them (prs.rl.select)
            s = self.selector.sample(state, policy, keys, self.rollouts)
        t2 = time.perf_counter()
        batch, kept = self.assemble(s.train, s.train_rewards, key=keys.source)
        metrics: dict[str, Any] = {"step": step, **s.metrics, "groups_kept": int(kept.sum())}
        metrics["time_batch"] = time.perf_counter() - t2
        metrics.update(ledger_metrics(batch, kept, s.train_rewards, s.metrics))
        metrics.update(schedule.signal_metrics(s.train_rewards, kept, s.rate))
        metrics["k_hist"] = np.bincount(np.asarray(s.k), minlength=n + 1).tolist()
        rho_np, ema_np = np.asarray(s.prefix.rho), np.asarray(s.prefix.ema)
        for j, kb in enumerate(ps.bucket_ks(prefix_cfg)):
            in_b = s.steered & (s.steer_bucket == j)
            # count: groups whose k falls in the bucket; steered: the groups steered with this bucket's
            # prefix, over which reroll_pass_rate is averaged (its weight)
            metrics[f"bucket/{kb}/count"] = int(np.sum(s.k_bucket == j))
            metrics[f"bucket/{kb}/steered"] = int(in_b.sum())
            metrics[f"bucket/{kb}/reroll_pass_rate"] = float(np.mean(s.rate[in_b])) if in_b.any() else None
            metrics[f"bucket/{kb}/rho"] = float(rho_np[j])
            metrics[f"bucket/{kb}/ema"] = float(ema_np[j])
        if hasattr(self.task, "episode_metrics") and s.fresh is not None:  # the fresh rollouts' task metrics
            metrics.update(self.task.episode_metrics(*s.fresh))            # (trap: hack rate, ...)
        if hasattr(self.task, "batch_metrics") and s.groups is not None:   # the update's whole batch: row r of
            probs, gidx = s.groups                                         # train group r // n, on problem gidx[r // n]
            if batch.advantages.shape[0] != gidx.size * n:
                raise RuntimeError(f"internal: {batch.advantages.shape[0]} batch rows for {gidx.size} groups of {n}")
            metrics.update(self.task.batch_metrics(self.task.take(probs, gidx), batch))
        return Collected(batch=batch, prefix=s.prefix, metrics=metrics, memory=s.memory, sources=s.sources,
                         select=s.select)

    def assemble(self, train: Episodes, train_rewards, *, key) -> tuple["Batch", np.ndarray]:
        """Step 5: ``(Batch, kept [G])`` from the rollouts ``train [G*N]`` with rewards ``[G, N]``:
        the kept groups (mixed ones, DAPO's filter, or RFT's capped successes drawn with ``key``),
        the loss menu's shaped rewards and masks, the advantages. ``kept``: groups that train (kept
        AND with loss tokens: append mode's padding copies are kept but have none)."""
        rl, n = self.rl, self.rl.group_size
        train_rewards = jnp.asarray(train_rewards)
        groups = train_rewards.shape[0]
        if rl.loss.algorithm == "rft":  # SWE-Gym: successes only, at most rft_cap per task
            chosen = cap_successes_per_task(jnp.repeat(jnp.arange(groups), n), train_rewards.reshape(-1) >= 1.0,
                                            key=key, cap=rl.loss.rft_cap)            # [R]
            keep = jnp.any(chosen.reshape(groups, n), axis=1)
            loss_mask = train.policy_mask & chosen[:, None]
        else:
            keep = mixed_groups(train_rewards) if rl.loss.drop_no_contrast else jnp.ones((groups,), bool)
            loss_mask = train.policy_mask & jnp.repeat(keep, n)[:, None]
        adv_rewards, loss_mask = loss_menu.shaped_rewards_and_mask(rl, train_rewards, train, loss_mask, budget=self.budget)
        adv = loss_menu.batch_advantages(rl, adv_rewards, loss_mask)                 # [G, N]
        batch = Batch(tokens=train.tokens, positions=train.positions, valid=train.valid,
                      loss_mask=loss_mask, old_logp=train.logprobs, advantages=adv.reshape(-1),
                      sampler_logp=train.sampling_logprobs if rl.loss.rollout_correction else None)
        return batch, np.asarray(keep & jnp.any(loss_mask.reshape(groups, -1), axis=1))

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, params, step: int) -> dict[str, float]:
        """Held-out pass@1: mean reward over the fixed eval problems × ``eval_samples``, with the task's
        ``episode_metrics`` of those episodes and its ``policy_metrics(params, model_cfg=)`` when it has them."""
        key = jax.random.fold_in(jax.random.PRNGKey(self.seed + 7_919), step)
        ep = self.rollouts.rollout(self.sampling_params(params), self._eval_problems, key,
                                   group_size=self.rl.eval.samples, evaluation=True)
        out = {"eval/pass_at_1": float(jnp.mean(ep.rewards >= 1.0)), "eval/reward_mean": float(jnp.mean(ep.rewards))}
        out.update({f"eval/{k}": v for k, v in self.rollouts.pop_metrics().items()})
        if hasattr(self.task, "episode_metrics"):
            out.update({f"eval/{k}": v for k, v in self.task.episode_metrics(self._eval_problems, ep).items()})
        if hasattr(self.task, "policy_metrics"):  # measured on the parameters themselves (no RNG of the run's)
            out.update({f"eval/{k}": v for k, v in self.task.policy_metrics(params, model_cfg=self.model_cfg).items()})
        return out


def ledger_metrics(batch: Batch, kept, train_rewards, sampled: dict) -> dict[str, Any]:
    """The compute ledger's per-step entries every control logs (``prs.rl.select`` docstring):
    ``tokens_trained`` (policy tokens with loss weight), ``groups_contrast`` (trained groups whose
    accuracy has std > 0), ``rollouts_skipped`` and ``gen_batches`` (a selector's, else 0 and 1)."""
    contrast = np.asarray(kept, bool) & selector.mixed(train_rewards)
    return {"tokens_trained": int(np.asarray(batch.loss_mask).sum()), "groups_contrast": int(contrast.sum()),
            "rollouts_skipped": int(sampled.get("rollouts_skipped", 0)), "gen_batches": int(sampled.get("gen_batches", 1)),
            "time_select": float(sampled.get("time_select", 0.0))}


def _loss_fn(params, batch: Batch, *, cfg: ModelConfig, rl: RLConfig, logp_offset=None,
             global_norm=None, norm_len=None, ref_params=None, entropy_mask=None):
    """The clipped surrogate on ``batch``. Logits at t predict token t + 1, so every per-token
    array is taken on [:, 1:] against logits of [:, :-1]. The LM head is chunked over time
    (``rl.logits_chunk``), so no [R, L-1, V] tensor is kept. ``global_norm`` (the whole batch's
    count, see ``agg_denominator``) and ``norm_len`` (the run's full width L-1, for
    ``seq-mean-token-sum-norm`` when the batch was cut to its longest row) go to the loss;
    ``ref_params`` (frozen, no gradient) give the KL reference log-probs when ``rl.loss.kl_coef > 0``;
    ``entropy_mask [R, L-1]`` (the whole batch's high-entropy selection, ``_entropy_selection``) for a
    micro-batch when ``rl.loss.top_entropy_quantile < 1``."""
    hidden = forward_hidden(params, batch.tokens[:, :-1], cfg=cfg, positions=batch.positions[:, :-1],
                            valid=batch.valid[:, :-1])                           # [R, L-1, D]
    logp, ent = lm_head_logprobs(params, hidden, batch.tokens[:, 1:], cfg=cfg, chunk=rl.logits_chunk,
                                 with_entropy=bool(rl.loss.entropy_coef or rl.loss.top_entropy_quantile < 1.0))  # [R, L-1]
    if logp_offset is not None:
        logp = logp + logp_offset
    if rl.loss.algorithm == "rft":  # token-mean negative log-likelihood of the selected rollouts
        m = batch.loss_mask[:, 1:].astype(jnp.float32)
        count = jnp.sum(m) if global_norm is None else global_norm
        nll = -jnp.sum(jnp.where(m > 0, logp, 0.0)) / jnp.maximum(count, 1.0)
        return nll, {"nll": nll, "token_count": jnp.sum(m)}
    ref_logp = _ref_logprobs(ref_params, batch, cfg=cfg, rl=rl) if rl.loss.kl_coef else None
    sampler_logp = None if batch.sampler_logp is None else batch.sampler_logp[:, 1:]
    w, w_metrics = loss_menu.pg_weights(rl, batch.old_logp[:, 1:], sampler_logp, batch.loss_mask[:, 1:], ent,
                                        entropy_mask=entropy_mask)
    loss, metrics = policy_loss(logp, batch.old_logp[:, 1:], batch.advantages, batch.loss_mask[:, 1:],
                                clip_low=rl.loss.clip_low, clip_high=rl.loss.clip_high, agg=rl.loss.agg,
                                entropy=ent, entropy_coef=rl.loss.entropy_coef, dual_clip=rl.loss.dual_clip,
                                loss_type=rl.loss.loss_type, ratio_level=rl.loss.ratio_level, pg_weights=w,
                                ref_logp=ref_logp, kl_coef=rl.loss.kl_coef, global_norm=global_norm, norm_len=norm_len)
    return loss, {**metrics, **w_metrics}


def _check_reference(ref_params, rl: RLConfig) -> None:
    if rl.loss.kl_coef and ref_params is None:
        raise ValueError(f"RLConfig.loss.kl_coef={rl.loss.kl_coef} needs the reference policy: pass ref_params="
                         f"state.ref_params (Trainer.init_state sets it)")


def _ref_logprobs(ref_params, batch: Batch, *, cfg: ModelConfig, rl: RLConfig):
    """log π_ref(tokens[:, 1:]) [R, L-1] under the frozen reference (chunked head, no gradient)."""
    _check_reference(ref_params, rl)
    ref_params = jax.lax.stop_gradient(ref_params)
    hidden = forward_hidden(ref_params, batch.tokens[:, :-1], cfg=cfg, positions=batch.positions[:, :-1],
                            valid=batch.valid[:, :-1])
    return jax.lax.stop_gradient(lm_head_logprobs(ref_params, hidden, batch.tokens[:, 1:], cfg=cfg,
                                                  chunk=rl.logits_chunk)[0])


# Metrics of ``_loss_fn`` that are already divided by the whole batch's count (with
# ``global_norm``), so micro-batch values add up; every other metric is a token mean over the
# micro-batch and is recombined weighted by ``token_count``.
_SUMMED_METRICS = ("pg_loss", "kl", "entropy", "nll", "token_count")


def _micro_batches(batch: Batch, m: int) -> Batch:
    """[R, ...] -> [M, R/M, ...] with micro-batch j = rows j, j+M, j+2M, ... (strided, so that
    every device's contiguous block of rows contributes to every micro-batch)."""
    def split(x):
        r = x.shape[0]
        return x.reshape(r // m, m, *x.shape[1:]).swapaxes(0, 1)
    return jax.tree.map(split, batch)


def _entropy_selection(params, mb: Batch, *, cfg: ModelConfig, rl: RLConfig):
    """``[M, R/M, L-1]`` bool: ``loss_menu.entropy_selection`` of the whole batch, given as micro-batches ``mb``
    ([M, R/M, ...]). A forward-only ``lax.scan`` gives every token's entropy under ``params``, then
    one cut-off τ (the ``1 − top_entropy_quantile`` quantile) over all R rows, so every micro-batch
    trains on the tokens the full batch would (a per-micro-batch τ does not)."""
    def body(_, b):
        hidden = forward_hidden(params, b.tokens[:, :-1], cfg=cfg, positions=b.positions[:, :-1],
                                valid=b.valid[:, :-1])
        ent = lm_head_logprobs(params, hidden, b.tokens[:, 1:], cfg=cfg, chunk=rl.logits_chunk, with_entropy=True)[1]
        return None, jax.lax.stop_gradient(ent)                                   # [R/M, L-1]
    _, ent = jax.lax.scan(body, None, mb)                                         # [M, R/M, L-1]
    # back to the batch's row order (the inverse of _micro_batches: under an explicit mesh the
    # sharded R/M axis must stay the major one of the merge)
    rows = lambda x: x.swapaxes(0, 1).reshape(-1, x.shape[-1])  # noqa: E731     [R, L-1]
    sel = loss_menu.entropy_selection(rl, rows(ent), rows(mb.loss_mask[:, :, 1:]))
    return _micro_batches(sel, ent.shape[0])


def _grads(params, batch: Batch, ref_params=None, *, cfg: ModelConfig, rl: RLConfig, norm_len=None):
    """(loss, metrics, grads) of ``_loss_fn`` on ``batch``; with ``rl.micro_batches = M > 1`` a
    ``lax.scan`` over M micro-batches accumulates float32 gradients (sum of micro-batch losses,
    each normalised by the full batch's count = the full-batch loss; with ``top_entropy_quantile
    < 1`` every micro-batch selects tokens by the whole batch's entropy cut-off, one extra
    forward-only pass)."""
    grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
    m_count = rl.micro_batches
    if m_count == 1:
        (loss, m), grads = grad_fn(params, batch, cfg=cfg, rl=rl, norm_len=norm_len, ref_params=ref_params)
        return loss, m, grads
    r = batch.tokens.shape[0]
    if r % m_count:
        raise ValueError(f"RLConfig.micro_batches={m_count} must divide the update's rows R={r}")
    mask = batch.loss_mask[:, 1:]
    gn = jnp.sum(mask != 0, dtype=jnp.float32) if rl.loss.algorithm == "rft" else agg_denominator(mask, agg=rl.loss.agg)
    mb = _micro_batches(batch, m_count)
    select = rl.loss.top_entropy_quantile < 1.0 and rl.loss.algorithm != "rft"
    sel = _entropy_selection(params, mb, cfg=cfg, rl=rl) if select else None    # [M, R/M, L-1]
    kw = dict(cfg=cfg, rl=rl, global_norm=gn, norm_len=norm_len, ref_params=ref_params)

    def body(acc, xs):
        mb, sel = xs
        (loss, m), g = grad_fn(params, mb, entropy_mask=sel, **kw)
        g_acc, l_acc, m_acc = acc
        g_acc = jax.tree.map(lambda a, b: a + b.astype(jnp.float32), g_acc, g)
        w = m["token_count"]
        m_acc = {k: m_acc[k] + (m[k] if k in _SUMMED_METRICS else m[k] * w) for k in m_acc}
        return (g_acc, l_acc + loss, m_acc), None

    first = jax.tree.map(lambda x: x[0], (mb, sel))
    m_shape = jax.eval_shape(lambda b, s: _loss_fn(params, b, entropy_mask=s, **kw)[1], *first)
    zeros = lambda t: jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), t)  # noqa: E731
    g0 = jax.tree.map(lambda x: jnp.zeros_like(x, jnp.float32), params)  # laid out like params (explicit mesh)
    init = (g0, jnp.zeros((), jnp.float32), zeros(m_shape))
    (grads, loss, m), _ = jax.lax.scan(body, init, (mb, sel))
    n_tok = jnp.maximum(m["token_count"], 1.0)
    m = {k: (v if k in _SUMMED_METRICS else v / n_tok) for k, v in m.items()}
    grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, params)
    return loss, m, grads


def update_step(params, opt_state, batch: Batch, ref_params=None, *, cfg: ModelConfig, rl: RLConfig, tx,
                norm_len=None):
    """One optax step on the clipped surrogate (micro-batched when ``rl.micro_batches > 1``)."""
    loss, m, grads = _grads(params, batch, ref_params, cfg=cfg, rl=rl, norm_len=norm_len)
    updates, opt_state = tx.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    m = {**m, "loss": loss, "grad_norm": optax.tree.norm(grads)}
    return params, opt_state, m


@jax.jit
def _longest_row(valid):
    """Last valid column + 1 over all rows of ``valid [R, L]`` (0 if none), a replicated scalar."""
    return jnp.max(jnp.where(jnp.any(valid, axis=0), jnp.arange(1, valid.shape[1] + 1), 0))


def update_width(valid, width: int) -> int:
    """The update's width: the batch's longest row (last valid token + 1), rounded up to a quarter
    of the run's width L (at most 4 compiled shapes per run), at least 2 (targets are [:, 1:])."""
    longest = max(int(_longest_row(valid)), 1)  # on device: valid may span several hosts
    q = -(-width // 4)
    return max(2, min(width, -(-longest // q) * q))


# ---------------------------------------------------------------------- supervised warm start


def sft_loss(params, tokens, loss_mask, *, cfg: ModelConfig):
    """Token-mean cross-entropy on the demonstration tokens: −Σ m·log π(yₜ|y<t) / Σ m."""
    logits = forward(params, tokens[:, :-1], cfg=cfg)
    logp = token_logprobs(logits, tokens[:, 1:])
    m = loss_mask[:, 1:].astype(jnp.float32)
    return -jnp.sum(logp * m) / jnp.maximum(jnp.sum(m), 1.0)


def heldout_demo_loss(task, model_cfg: ModelConfig, params, *, seed: int, count: int = 512, chunk: int = 64) -> float:
    """``sft_loss`` (token mean) on ``count`` demonstrations of problems the warm start never drew: step
    10⁷ of its stream (``task.warm_start_problems(seed=10_000_000 + seed, ...)``, else ``train_problems``
    with seed 99), demonstration seed 424 242 - the measure ``tests/rl/test_trainer_warm_start.py`` bounds.
    Evaluated ``chunk`` rows at a time (the largest power of two <= ``chunk`` that divides ``count``:
    one compile); the chunks' token sums are pooled, so the value is the whole set's token mean."""
    probs = task.warm_start_problems(seed=10_000_000 + seed, step=10**7, count=count) \
        if hasattr(task, "warm_start_problems") else task.train_problems(seed=99, step=10**7, count=count)
    tokens, mask = task.demonstrations(probs, seed=424_242)  # [count, T]
    width = 1
    while width * 2 <= chunk and count % (width * 2) == 0:
        width *= 2
    loss = jax.jit(functools.partial(sft_loss, cfg=model_cfg))
    num = den = 0.0
    for a in range(0, count, width):
        m = float(np.sum(np.asarray(mask)[a:a + width, 1:]))  # the tokens sft_loss averages over
        num += float(loss(params, jnp.asarray(tokens[a:a + width]), jnp.asarray(mask[a:a + width]))) * max(m, 1.0)
        den += m
    return num / max(den, 1.0)


def supervised_warm_start(task, model_cfg: ModelConfig, *, steps: int, batch: int, lr: float, seed: int,
                          until_loss: float | None = None, max_cycles: int = 1, attempts: int = 1,
                          log_every: int = 50, log=print, progress=None, report: dict | None = None):
    """Trains a fresh model on the task's (imperfect) demonstrations; returns params.

    Data: ``steps × batch`` problems drawn from a stream disjoint from RL's (seed offset), each
    with a seeded demonstration; a task may draw them from a wider warm-start distribution
    (``task.warm_start_problems``, same signature as ``train_problems``). AdamW with cosine decay;
    one jit compile. ``progress`` (``prs.rl.runner.Progress``): updated every step, and ``log`` gets one
    line at the end; None: ``log`` gets a line every ``log_every`` steps.

    Warm restarts (SGDR, Loshchilov & Hutter 2017): the arith warm start sits on a loss plateau
    until it learns the running sum, and the step it leaves it at depends on the seed and on the
    machine's rounding (``results/regime/README.md``); a cosine schedule that has decayed by then
    keeps it there. With ``until_loss``, a cycle of ``steps`` whose last ``min(50, steps)`` losses
    average above it is followed by another cycle (the same warm-up and cosine schedule, fresh
    optimizer moments, the next problems of the stream), at most ``max_cycles`` per attempt.

    Random restarts: some initialisations leave the first plateau for a second, lower one that
    further cycles, or a constant learning rate, do not leave. With ``attempts > 1``, an attempt
    whose last cycle still ends above ``until_loss`` is followed by a fresh initialisation
    (``fold_in(PRNGKey(seed), attempt)``; the data stream goes on); the first attempt that reaches
    the target is returned, else the attempt with the lowest final loss (logged).
    ``until_loss=None`` (default) is one cycle of one attempt.

    ``report`` (a dict, filled in place): ``cycle_losses`` (per attempt, the mean loss of each cycle's
    last ``min(50, steps)`` steps), ``attempts`` (started), ``kept_attempt`` (1-based), ``reached_target``
    (None without ``until_loss``), ``steps_total`` (demonstration batches drawn) and ``seconds``.
    """
    report = {} if report is None else report
    report.update(steps_per_cycle=steps, until_loss=until_loss, cycle_losses=[], attempts=0, kept_attempt=None,
                  reached_target=None, steps_total=0, seconds=None)

    def done(params, attempt, reached):
        report.update(kept_attempt=attempt + 1, reached_target=reached, steps_total=i,
                      seconds=round(time.perf_counter() - t0, 3))
        return params

    if not (isinstance(max_cycles, int) and max_cycles >= 1):
        raise ValueError(f"supervised_warm_start: max_cycles must be an int >= 1, got {max_cycles!r}")
    if not (isinstance(attempts, int) and attempts >= 1):
        raise ValueError(f"supervised_warm_start: attempts must be an int >= 1, got {attempts!r}")
    if attempts > 1 and until_loss is None:
        raise ValueError(f"supervised_warm_start: attempts={attempts} needs until_loss (the target that decides "
                         "whether an attempt learned); set until_loss or attempts=1")
    sched = optax.warmup_cosine_decay_schedule(0.0, lr, max(steps // 20, 1), max(steps, 2))
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(sched, weight_decay=0.01))

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def upd(p, o, tokens, mask):
        loss, g = jax.value_and_grad(sft_loss)(p, tokens, mask, cfg=model_cfg)
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o, loss

    t0 = time.perf_counter()
    i = 0               # the step of the demonstration stream (continues across cycles and attempts)
    best = None         # (final mean loss, attempt, params) of the best attempt so far
    for attempt in range(attempts):
        key = jax.random.PRNGKey(seed)
        params = init_params(model_cfg, key if attempt == 0 else jax.random.fold_in(key, attempt))
        report["attempts"] = attempt + 1
        report["cycle_losses"].append([])
        for cycle in range(max_cycles):
            opt = tx.init(params)
            losses = []
            for j in range(steps):
                probs = getattr(task, "warm_start_problems", task.train_problems)(seed=10_000_000 + seed, step=i,
                                                                                  count=batch)
                tokens, mask = task.demonstrations(probs, seed=seed * 100_003 + i)
                params, opt, loss = upd(params, opt, jnp.asarray(tokens), jnp.asarray(mask))
                losses.append(loss)
                i += 1
                if progress is not None:
                    progress.update(j + 1, lambda: f"loss {float(loss):.4f}")
                elif log and (j % log_every == 0 or j == steps - 1):
                    log(f"[sft] step {i}/{steps * (cycle + 1)} loss {float(loss):.4f} ({time.perf_counter() - t0:.1f}s)")
            if log and progress is not None and steps:
                log(f"[sft] {i} steps: loss {float(loss):.4f} ({time.perf_counter() - t0:.1f}s)")
            if not steps:
                return done(params, attempt, None)
            tail = float(jnp.mean(jnp.stack(losses[-min(50, steps):])))
            report["cycle_losses"][-1].append(round(tail, 6))
            if until_loss is None:
                return done(params, attempt, None)
            if tail <= until_loss:
                return done(params, attempt, True)
            last = cycle + 1 == max_cycles
            if log:
                log(f"[sft] attempt {attempt + 1} cycle {cycle + 1}: mean loss of its last steps {tail:.4f} > "
                    f"sft.until_loss {until_loss}: "
                    + ("another cycle of %d steps (warm restart)" % steps if not last else
                       "a fresh initialisation (sft.attempts)" if attempt + 1 < attempts else
                       f"stopping after sft.max_cycles={max_cycles} x sft.attempts={attempts}"))
        if best is None or tail < best[0]:
            best = (tail, attempt, params)
    if log:
        log(f"[sft] no attempt reached sft.until_loss {until_loss}: keeping attempt {best[1] + 1} (final mean loss "
            f"{best[0]:.4f}); the warm start may not have learned the task")
    return done(best[2], best[1], False)
