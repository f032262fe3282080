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

from prs.rl.episodes import fresh_rows
from prs.tasks import trap as env_lib
from prs.tasks.agent_env import AgentEnv
from prs.tasks.registry import register_task
from prs.tasks.repair_task import AgentTask, task_factory
from prs.tasks.trap import Problems, TrapConfig


STRATEGY_METRICS = ("hack_rate", "true_resolution_rate", "root_attempt_rate", "p_root", "mean_fraction_reward",
                    "mean_binary_reward")  # prs.tasks.trap.strategy_metrics' keys


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
        """Strategy metrics of the fresh episodes among ``episodes [R]`` of ``problems [B]`` (R = B·N,
        problem-major; re-rolls, whose replayed prefix is outside the policy mask, are left out:
        ``prs.rl.episodes.fresh_rows``, every metric None when none is fresh): their final states
        are rebuilt by executing their actions (``replay_final_states``), then labelled by the
        independent checker (``prs.tasks.trap.label``)."""
        b = np.asarray(problems.program).shape[0]
        rows, owner = fresh_rows(episodes.replayed, groups=b)
        if not rows.size:
            return dict.fromkeys(STRATEGY_METRICS)
        probs = self.take(problems, owner)
        states = env_lib.replay_final_states(probs, np.asarray(episodes.tokens)[rows],
                                             np.asarray(episodes.policy_mask)[rows], 1, self.cfg)
        return env_lib.strategy_metrics(probs, np.arange(rows.size), states)


register_task("trap", task_factory("trap", TrapTask, TrapConfig))
