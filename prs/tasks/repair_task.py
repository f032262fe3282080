"""The repair agent task as the trainer sees it: environment (``prs.tasks.repair``) + multi-turn
rollouts with replay through execution (``prs.tasks.agent_rollouts``), registered as ``repair``."""
from __future__ import annotations

import dataclasses

import numpy as np

from prs.tasks.agent_rollouts import AgentRollouts
from prs.tasks.registry import register_task
from prs.tasks.repair import (EOS, EOT, EVAL_SEED, MAX_ACTION_TOKENS, PAD, TOKENS, Problems, RepairConfig, decode,
                              demonstrations, make_problems, prompts)


@dataclasses.dataclass(frozen=True)
class RepairTask:
    """The repair task behind the trainer's task protocol (multi-turn: ``make_rollouts``)."""

    cfg: RepairConfig = RepairConfig()
    name: str = "repair"

    vocab_size = len(TOKENS)
    pad_id = PAD
    eos_id = EOS
    eot_id = EOT

    @property
    def max_new_tokens(self) -> int:
        return MAX_ACTION_TOKENS

    def train_problems(self, *, seed: int, step: int, count: int) -> Problems:
        return make_problems(self.cfg, seed=int(seed) * 1_000_003 + int(step), count=count)

    def eval_problems(self, *, count: int) -> Problems:
        return make_problems(self.cfg, seed=EVAL_SEED, count=count)

    def take(self, problems: Problems, index) -> Problems:
        return Problems(*(np.asarray(x)[np.asarray(index)] for x in problems))

    def prompts(self, problems: Problems) -> tuple[np.ndarray, np.ndarray]:
        return prompts(problems)

    def demonstrations(self, problems: Problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        return demonstrations(problems, self.cfg, seed=seed)

    def decode(self, ids) -> str:
        return decode(ids)

    def make_rollouts(self, trainer):
        return AgentRollouts(trainer, env=self.cfg, mode=self.cfg.replay)


def _repair(**params) -> RepairTask:
    fields = {f.name for f in dataclasses.fields(RepairConfig)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ValueError(f"task 'repair': unknown parameter(s) {unknown}; known: {sorted(fields)}")
    return RepairTask(RepairConfig(**params))


register_task("repair", _repair)
