"""Episodes: rollouts as the trainer consumes them, and single-turn rollouts with prefix replay.

``Episodes`` is the one type every task's rollouts produce (single-turn here, multi-turn in
``prs.tasks.agent_rollouts``); ``SingleTurnRollouts`` samples a prompt's N rollouts and its
re-rollouts from prompt + a replayed prefix. Tasks depend on this module, never on the trainer.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from prs.models.lm_head import lm_head_logprobs
from prs.models.qwen3 import forward_hidden
from prs.models.sampler import Rollout, SamplerConfig
from prs.rl import multihost
from prs.rollout.registry import make_engine


def _pad_width(x: np.ndarray | jax.Array, width: int, fill) -> jax.Array:
    """Right-pads the last axis of ``x [R, L]`` to ``width``."""
    extra = width - x.shape[1]
    if extra < 0:
        raise ValueError(f"internal: rollout width {x.shape[1]} exceeds the training width {width}")
    return jnp.pad(jnp.asarray(x), ((0, 0), (0, extra)), constant_values=fill)


class Episodes(NamedTuple):
    """Rollouts as the trainer consumes them, whatever the task (single- or multi-turn).

    ``units`` are what a cut point counts: generated tokens for a single-turn task, policy turns
    for a multi-turn agent task (a prefix is cut at a turn boundary there).
    """

    tokens: jax.Array       # [R, L] int32 task prompt, (replayed prefix,) generated/observation tokens, pad
    positions: jax.Array    # [R, L] int32
    valid: jax.Array        # [R, L] bool
    policy_mask: jax.Array  # [R, L] bool, tokens the current policy generated in this call
    logprobs: jax.Array     # [R, L] f32, their sampling log-probs (raw policy, temperature 1)
    rewards: jax.Array      # [R] f32 binary outcome of the whole episode (prefix + continuation)
    units: jax.Array        # [R] int32 policy units of the episode (tokens or turns)
    replayed: jax.Array     # [R] int32 tokens replayed from a source instead of generated
    env_steps: jax.Array    # [R] int32 environment executions (replayed actions included)
    sampling_logprobs: jax.Array  # [R, L] f32 log q(y) under the temperature/top-k/top-p distribution sampled
    truncated: jax.Array    # [R] bool the last generation hit its token budget without a stop token


def episodes_from_rollout(ro: Rollout, rewards: jax.Array, width: int, pad_id: int, *, replayed=None) -> Episodes:
    """Single-turn ``Rollout`` -> ``Episodes`` padded to ``width``; units = generated tokens."""
    r = ro.tokens.shape[0]
    zeros = jnp.zeros((r,), jnp.int32)
    return Episodes(
        tokens=_pad_width(ro.tokens, width, pad_id),
        positions=_pad_width(ro.positions, width, 0),
        valid=_pad_width(ro.valid, width, False),
        policy_mask=_pad_width(ro.policy_mask, width, False),
        logprobs=_pad_width(ro.logprobs, width, 0.0),
        rewards=rewards.reshape(-1).astype(jnp.float32),
        units=jnp.sum(ro.policy_mask, axis=1).astype(jnp.int32),
        replayed=zeros if replayed is None else jnp.asarray(replayed, jnp.int32),
        env_steps=zeros,
        sampling_logprobs=_pad_width(ro.sampling_logprobs, width, 0.0),
        truncated=jnp.asarray(ro.truncated, bool),
    )


def take_rows(ep: Episodes, rows) -> Episodes:
    return Episodes(*(x[rows] for x in ep))


class SingleTurnRollouts:
    """Sampling and prefix replay for a single-turn task (prompt -> one generated answer).

    A re-rollout's input is the task prompt followed by the source's first ``cut`` generated
    tokens; the sampler generates the continuation. With ``RLConfig.reroll_budget="shared"``
    (default) the whole response, replayed prefix + continuation, gets the rollouts' budget T
    (the continuation at most T - cut tokens), so a re-roll never has more room than a rollout;
    ``"extra"`` gives the continuation the full T on top of the prefix.
    Two sampler shapes per run: ``[R, P]`` and ``[R, P + T]`` (prompt-width buckets).
    """

    def __init__(self, trainer: Any):
        task, rl = trainer.task, trainer.rl
        self.trainer, self.task = trainer, task
        t_new = rl.max_new_tokens or task.max_new_tokens
        prompt_w = int(task.prompts(task.eval_problems(count=1))[0].shape[1])
        self.scfg = SamplerConfig(max_new_tokens=t_new, temperature=rl.temperature, top_k=rl.top_k,
                                  top_p=rl.top_p, eos_id=task.eos_id, pad_id=task.pad_id,
                                  buckets=(prompt_w, prompt_w + t_new), row_chunk=rl.row_chunk,
                                  row_parts=rl.row_parts, attend_buckets=rl.attend_buckets)
        self.eval_scfg = dataclasses.replace(self.scfg, temperature=rl.eval_temperature, top_k=0, top_p=1.0)
        if rl.continuous_slots is not None and trainer.mesh is not None:
            raise ValueError("RLConfig.continuous_slots (sampler.continuous_slots) needs mesh=None (single device)")
        self.width = prompt_w + 2 * t_new  # L: fixed training width
        if rl.rollout_engine != "jax" and (trainer.mesh is not None or rl.continuous_slots is not None):
            raise ValueError(f"RLConfig.rollout_engine={rl.rollout_engine!r} runs on one process without a mesh and "
                             "batches continuously by itself: mesh and continuous_slots must be None")
        self.engine = None  # prs.rollout engine, built at the first call (vLLM needs the weights)
        self._pushed = None  # the parameters another engine holds (pushed once per new policy)
        self.mismatch: dict[str, list[float]] = {}  # per call since the last pop_metrics (engine != jax)
        if getattr(task, "rewards_jittable", True):
            self._rewards = jax.jit(task.rewards, static_argnames=("group_size",))
        else:
            self._rewards = task.rewards

    def _sample(self, params, rows, rows_len, key, scfg, budget=None):
        """The engine's rollout of input rows (prompt + replayed prefix). The jax engine (a mesh:
        each process feeds its own rows and all get the whole rollout on the host; continuous
        slots: same tokens) needs nothing more; another engine's rollout gets the trainer's own
        log-probs as ``logprobs`` (the update's ``old_logp``) and keeps the engine's as
        ``sampling_logprobs`` (the rollout correction's behaviour policy), the gap logged."""
        tr = self.trainer
        if self.engine is None:
            opts = {}
            if tr.rl.rollout_engine == "vllm":
                opts = dict(params=params, max_model_len=self.width,
                            dtype="bfloat16" if tr.rl.sampling_dtype == "bfloat16" else "float32")
            self.engine = make_engine(tr.rl.rollout_engine, cfg=tr.model_cfg, mesh=tr.mesh,
                                      continuous_slots=tr.rl.continuous_slots, **opts)
        if self.engine.name == "jax":  # a reference, no copy: held for this call only (a sampling-dtype
            self.engine.update_params(params)  # copy of the weights is freed after the step, as before)
            try:
                return self.engine.generate(rows, rows_len, key=key, scfg=scfg, budget=budget)
            finally:
                self.engine.update_params(None)
        if params is not self._pushed:  # a new policy: push it (vLLM: in place, timed)
            self.engine.update_params(params)
            self._pushed = params
            self.mismatch.setdefault("sync_s", []).append(float(self.engine.last_sync_s))
        ro = self.engine.generate(rows, rows_len, key=key, scfg=scfg, budget=budget)
        own = _policy_logprobs(params, ro.tokens, ro.positions, ro.valid, cfg=tr.model_cfg, chunk=tr.rl.logits_chunk)
        own = jnp.where(ro.policy_mask, own, 0.0)
        if scfg.temperature == 0:  # greedy (evaluation): q is a point mass, nothing to compare
            return ro.replace(logprobs=own)
        m = np.asarray(ro.policy_mask)
        d = (np.asarray(own) - np.asarray(ro.sampling_logprobs))[m]  # log p_trainer - log q_engine
        for name, v in (("logp_abs_diff", np.abs(d)), ("kl_k1", -d), ("kl_k3", np.expm1(d) - d)):
            self.mismatch.setdefault(name, []).append(float(v.mean()) if v.size else 0.0)
        return ro.replace(logprobs=own)

    def pop_metrics(self) -> dict[str, float]:
        """``rollout/*`` means over the calls since the last pop (another engine than jax): the mean
        |log p_trainer − log q_engine| per policy token, the engine-vs-trainer KL(q‖p) estimates k1
        and k3 (on tokens drawn from q), and the weight-sync seconds."""
        out = {f"rollout/{k}": float(np.mean(v)) for k, v in self.mismatch.items() if v}
        self.mismatch = {}
        return out

    def _score(self, problems, ro, group_size: int):
        if multihost.multi_process(self.trainer.mesh):  # each process scores its own rows
            return multihost.score_rows(self._rewards, self.task, problems, ro, group_size=group_size,
                                        mesh=self.trainer.mesh)
        return self._rewards(problems, ro, group_size=group_size)

    def rollout(self, params, problems, key, *, group_size: int, evaluation: bool = False) -> Episodes:
        prompt, plen = self.task.prompts(problems)
        ro = self._sample(params, np.repeat(prompt, group_size, axis=0), np.repeat(plen, group_size), key,
                          self.eval_scfg if evaluation else self.scfg)
        r = self._score(problems, ro, group_size)
        return episodes_from_rollout(ro, r, self.width, self.task.pad_id)

    def reroll(self, params, problems, source: Episodes, cut: np.ndarray, key, *, group_size: int) -> Episodes:
        """``group_size`` re-rollouts of each source row [G] continuing its first ``cut[g]`` units."""
        _, plen = self.task.prompts(problems)                                    # [G] task prompt lengths
        new_len = plen + cut                                                     # prompt + replayed prefix
        width = int(new_len.max())
        idx = np.arange(width)[None, :]
        rows = np.where(idx < new_len[:, None], np.asarray(source.tokens)[:, :width], self.task.pad_id)
        budget = None
        if self.trainer.rl.reroll_budget == "shared":
            budget = np.repeat(self.scfg.max_new_tokens - np.asarray(cut), group_size).astype(np.int32)  # [G*N]
            if budget.size and budget.min() < 1:
                raise ValueError(f"internal: re-roll cut {int(np.max(cut))} leaves no response budget "
                                 f"(max_new_tokens={self.scfg.max_new_tokens})")
        ro = self._sample(params, np.repeat(rows, group_size, axis=0), np.repeat(new_len, group_size), key, self.scfg,
                          budget=budget)
        r = self._score(problems, ro, group_size)
        return episodes_from_rollout(ro, r, self.width, self.task.pad_id, replayed=np.repeat(cut, group_size))


@functools.partial(jax.jit, static_argnames=("cfg", "chunk"))
def _policy_logprobs(params, tokens, positions, valid, *, cfg, chunk: int) -> jax.Array:
    """log π(tokens[:, t] | tokens[:, :t]) under ``params`` -> [R, L] (0 at t = 0): what the
    update's forward pass computes, for rollouts of another engine."""
    hidden = forward_hidden(params, tokens[:, :-1], cfg=cfg, positions=positions[:, :-1], valid=valid[:, :-1])
    lp, _ = lm_head_logprobs(params, hidden, tokens[:, 1:], cfg=cfg, chunk=chunk)
    return jnp.pad(lp, ((0, 0), (1, 0)))
