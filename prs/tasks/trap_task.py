"""The partial-pass trap task as the trainer sees it: environment (``prs.tasks.trap``) + multi-turn
rollouts with replay through execution (``prs.tasks.agent_rollouts``), registered as ``trap``.

Besides the task protocol it has ``episode_metrics(problems, episodes)``: the strategy metrics of
fresh episodes (``prs.tasks.trap.strategy_metrics``: hack rate, true resolution rate, p_root, mean
fraction reward, …), which ``Trainer.collect`` and ``Trainer.evaluate`` log when a task has it.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from prs.tasks import trap as env_lib
from prs.tasks.agent_env import AgentEnv
from prs.tasks.registry import register_task
from prs.tasks.repair_task import AgentTask, task_factory
from prs.tasks.trap import Problems, TrapConfig


@dataclasses.dataclass(frozen=True)
class TrapTask(AgentTask):
    """The trap task behind the trainer's task protocol (multi-turn: ``make_rollouts``): the agent
    tasks' protocol over the trap environment, plus ``warm_start_key`` and ``episode_metrics``."""

    cfg: TrapConfig = TrapConfig()
    name: str = "trap"
    environment: ClassVar[AgentEnv] = env_lib.ENVIRONMENT

    @property
    def warm_start_key(self):
        """What the supervised warm start depends on (``prs.rl.runner.base_params`` caches by it): the
        task without its RL-only fields ``reward`` and ``replay``, so the arms of a paired comparison
        (fraction vs binary reward, with or without PS) start from one and the same warm start."""
        return (self.name, dataclasses.replace(self.cfg, reward="fraction", replay="replay"))

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


register_task("trap", task_factory("trap", TrapTask, TrapConfig))
