"""The repair agent task as the trainer sees it: environment (``prs.tasks.repair``) + multi-turn
rollouts with replay through execution (``prs.tasks.agent_rollouts``), registered as ``repair``.

``RepairTask`` is written over its environment module ``lib`` (a class attribute), so a variant with
another executor and vocabulary (``prs.tasks.trap_task.TrapTask``) subclasses it and sets ``lib``."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from prs.tasks import repair as _repair
from prs.tasks.agent_rollouts import AgentRollouts
from prs.tasks.registry import register_task
from prs.tasks.repair import Problems, RepairConfig


@dataclasses.dataclass(frozen=True)
class RepairTask:
    """The repair task behind the trainer's task protocol (multi-turn: ``make_rollouts``)."""

    cfg: RepairConfig = RepairConfig()
    name: str = "repair"
    lib: ClassVar = _repair  # the environment module: tokens, problems, prompts, demonstrations

    @property
    def vocab_size(self) -> int:
        return len(self.lib.TOKENS)

    @property
    def pad_id(self) -> int:
        return self.lib.PAD

    @property
    def eos_id(self) -> int:
        return self.lib.EOS

    @property
    def eot_id(self) -> int:
        return self.lib.EOT

    @property
    def max_new_tokens(self) -> int:
        return self.lib.MAX_ACTION_TOKENS

    def train_problems(self, *, seed: int, step: int, count: int) -> Problems:
        return self.lib.make_problems(self.cfg, seed=int(seed) * 1_000_003 + int(step), count=count)

    def eval_problems(self, *, count: int) -> Problems:
        return self.lib.make_problems(self.cfg, seed=self.lib.EVAL_SEED, count=count)

    def take(self, problems, index):
        return type(problems)(*(np.asarray(x)[np.asarray(index)] for x in problems))

    def prompts(self, problems) -> tuple[np.ndarray, np.ndarray]:
        return self.lib.prompts(problems)

    def demonstrations(self, problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return self.lib.demonstrations(problems, self.cfg, seed=seed)

    def decode(self, ids) -> str:
        return self.lib.decode(ids)

    def make_rollouts(self, *, model_cfg, sampling, mesh=None):
        """The task's own rollouts (``AgentRollouts``) for a policy of ``model_cfg`` sampled with
        ``sampling`` (``prs.rl.episodes.SamplingSettings``) on ``mesh``."""
        return AgentRollouts(env=self.cfg, model_cfg=model_cfg, sampling=sampling, mesh=mesh, mode=self.cfg.replay,
                             lib=self.lib)


def task_factory(name: str, task_cls, cfg_cls):
    """``factory(**params) -> task_cls(cfg_cls(**params))`` for ``register_task``; an unknown
    parameter is a ValueError naming the task and the parameters it knows."""
    fields = {f.name for f in dataclasses.fields(cfg_cls)}

    def factory(**params):
        unknown = sorted(set(params) - fields)
        if unknown:
            raise ValueError(f"task {name!r}: unknown parameter(s) {unknown}; known: {sorted(fields)}")
        return task_cls(cfg_cls(**params))

    return factory


register_task("repair", task_factory("repair", RepairTask, RepairConfig))
