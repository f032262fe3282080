"""The partial-pass trap task as the trainer sees it: environment (``prs.tasks.trap``) + multi-turn
rollouts with replay through execution (``prs.tasks.agent_rollouts``), registered as ``trap``.

Besides the task protocol it has ``episode_metrics(problems, episodes)``: the strategy metrics of
fresh episodes (``prs.tasks.trap.strategy_metrics``: hack rate, true resolution rate, p_root, mean
fraction reward, …), which ``Trainer.collect`` and ``Trainer.evaluate`` log when a task has it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from prs.tasks import trap as env_lib
from prs.tasks.agent_rollouts import AgentRollouts
from prs.tasks.registry import register_task
from prs.tasks.trap import (EOS, EOT, EVAL_SEED, MAX_ACTION_TOKENS, PAD, TOKENS, Problems, TrapConfig, decode,
                            demonstrations, make_problems, prompts)


@dataclasses.dataclass(frozen=True)
class TrapTask:
    """The trap task behind the trainer's task protocol (multi-turn: ``make_rollouts``)."""

    cfg: TrapConfig = TrapConfig()
    name: str = "trap"

    vocab_size = len(TOKENS)
    pad_id = PAD
    eos_id = EOS
    eot_id = EOT

    @property
    def max_new_tokens(self) -> int:
        return MAX_ACTION_TOKENS

    @property
    def warm_start_key(self):
        """What the supervised warm start depends on (``prs.rl.runner.base_params`` caches by it): the
        task without its RL-only fields ``reward`` and ``replay``, so the arms of a paired comparison
        (fraction vs binary reward, with or without PS) start from one and the same warm start."""
        return (self.name, dataclasses.replace(self.cfg, reward="fraction", replay="replay"))

    def train_problems(self, *, seed: int, step: int, count: int) -> Problems:
        return make_problems(self.cfg, seed=int(seed) * 1_000_003 + int(step), count=count)

    def eval_problems(self, *, count: int) -> Problems:
        return make_problems(self.cfg, seed=EVAL_SEED, count=count)

    def take(self, problems: Problems, index) -> Problems:
        return env_lib.take(problems, index)

    def prompts(self, problems: Problems) -> tuple[np.ndarray, np.ndarray]:
        return prompts(problems)

    def demonstrations(self, problems: Problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return demonstrations(problems, self.cfg, seed=seed)

    def decode(self, ids) -> str:
        return decode(ids)

    def make_rollouts(self, trainer):
        return AgentRollouts(trainer, env=self.cfg, mode=self.cfg.replay, lib=env_lib)

    def episode_metrics(self, problems: Problems, episodes) -> dict[str, float]:
        """Strategy metrics of fresh episodes ``[R]`` of ``problems [B]`` (R = B·N, problem-major):
        their final states are rebuilt by executing their actions (``replay_final_states``), then
        labelled by the independent checker (``prs.tasks.trap.label``). Re-rolled episodes (a
        replayed prefix outside the policy mask) are refused with a ValueError."""
        b = np.asarray(problems.program).shape[0]
        r = np.asarray(episodes.tokens).shape[0]
        if r % b:
            raise ValueError(f"episode_metrics: {r} episodes are not a multiple of {b} problems")
        if np.any(np.asarray(episodes.replayed) > 0):
            raise ValueError("episode_metrics: needs fresh episodes (replayed == 0); re-rolls hide their prefix")
        n = r // b
        states = env_lib.replay_final_states(problems, episodes.tokens, episodes.policy_mask, n, self.cfg)
        return env_lib.strategy_metrics(problems, np.arange(r) // n, states)


def _trap(**params) -> TrapTask:
    fields = {f.name for f in dataclasses.fields(TrapConfig)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ValueError(f"task 'trap': unknown parameter(s) {unknown}; known: {sorted(fields)}")
    return TrapTask(TrapConfig(**params))


register_task("trap", _trap)
