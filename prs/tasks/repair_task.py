"""The repair-style agent tasks as the trainer sees them: an environment (``prs.tasks.agent_env.AgentEnv``)
+ multi-turn rollouts with replay through execution (``prs.tasks.agent_rollouts``).

``AgentTask`` is the trainer's task protocol written once over a class attribute ``environment``;
``RepairTask`` (registered as ``repair``) sets it to ``prs.tasks.repair.ENVIRONMENT``, and
``prs.tasks.trap_task.TrapTask`` to the trap environment."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from prs.tasks import agent_env
from prs.tasks import repair as _repair
from prs.tasks.agent_env import AgentEnv
from prs.tasks.agent_rollouts import AgentRollouts
from prs.tasks.registry import register_task
from prs.tasks.repair import RepairConfig


class AgentTask:
    """The trainer's task protocol (multi-turn: ``make_rollouts``) over the environment
    ``environment`` (an ``AgentEnv``). A subclass is a frozen dataclass with the fields ``cfg`` (the
    environment's config) and ``name``, and sets ``environment``."""

    environment: ClassVar[AgentEnv]
    cfg: agent_env.EnvConfig
    name: str

    @property
    def vocab_size(self) -> int:
        return len(self.environment.TOKENS)

    @property
    def pad_id(self) -> int:
        return self.environment.PAD

    @property
    def eos_id(self) -> int:
        return self.environment.EOS

    @property
    def eot_id(self) -> int:
        return self.environment.EOT

    @property
    def max_new_tokens(self) -> int:
        return self.environment.MAX_ACTION_TOKENS

    def train_problems(self, *, seed: int, step: int, count: int):
        return self.environment.make_problems(self.cfg, seed=int(seed) * 1_000_003 + int(step), count=count)

    def eval_problems(self, *, count: int):
        return self.environment.make_problems(self.cfg, seed=self.environment.EVAL_SEED, count=count)

    def take(self, problems, index):
        return agent_env.take(problems, index)

    def prompts(self, problems) -> tuple[np.ndarray, np.ndarray]:
        return self.environment.prompts(problems)

    def demonstrations(self, problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return self.environment.demonstrations(problems, self.cfg, seed=seed)

    def decode(self, ids) -> str:
        return self.environment.decode(ids)

    def make_rollouts(self, *, model_cfg, sampling, mesh=None):
        """The task's own rollouts (``AgentRollouts``) for a policy of ``model_cfg`` sampled with
        ``sampling`` (``prs.rl.episodes.SamplingSettings``) on ``mesh``."""
        return AgentRollouts(env=self.cfg, model_cfg=model_cfg, sampling=sampling, mesh=mesh, mode=self.cfg.replay,
                             environment=self.environment)


@dataclasses.dataclass(frozen=True)
class RepairTask(AgentTask):
    """The repair task (``prs.tasks.repair``) behind the trainer's task protocol."""

    cfg: RepairConfig = RepairConfig()
    name: str = "repair"
    environment: ClassVar[AgentEnv] = _repair.ENVIRONMENT


def task_factory(name: str, task_cls, cfg_cls, *, options: tuple[str, ...] = ()):
    """``factory(**params) -> task_cls(cfg_cls(**config params), **option params)`` for
    ``register_task``: ``options`` are the task's own fields (RL-only switches kept out of the
    environment's config); an unknown parameter is a ValueError naming the task and the parameters
    it knows."""
    fields = {f.name for f in dataclasses.fields(cfg_cls)} | set(options)

    def factory(**params):
        unknown = sorted(set(params) - fields)
        if unknown:
            raise ValueError(f"task {name!r}: unknown parameter(s) {unknown}; known: {sorted(fields)}")
        opts = {k: params.pop(k) for k in options if k in params}
        return task_cls(cfg_cls(**params), **opts)

    factory.task_cls = task_cls  # what it builds, for a check before building (experiments.plan)
    return factory


register_task("repair", task_factory("repair", RepairTask, RepairConfig))
