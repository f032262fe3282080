"""Tasks as the trainer sees them, and a registry so a config can pick one by name.

A *single-turn task* gives the trainer problems, their prompts, a binary verifier and supervised
demonstrations; everything else (sampling, prefix replay, advantages, updates) is the trainer's.

    task = make_task("arith", max_terms=6)
    problems = task.train_problems(seed=0, step=3, count=16)   # deterministic in (seed, step)
    prompt, prompt_len = task.prompts(problems)                 # [B, P], [B]
    rewards = task.rewards(problems, rollout, group_size=8)     # [B, N] float32 0/1

Task-specific knobs go through ``make_task(name, **params)``; an unknown knob is a ``ValueError``
naming the task and the knobs it accepts.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import jax.numpy as jnp
import numpy as np

from prs.tasks import arith


class SingleTurnTask(Protocol):
    name: str
    vocab_size: int
    pad_id: int
    eos_id: int
    max_new_tokens: int  # the generation budget a full solution needs

    def train_problems(self, *, seed: int, step: int, count: int) -> Any: ...
    def eval_problems(self, *, count: int) -> Any: ...
    def take(self, problems: Any, index: np.ndarray) -> Any: ...
    def prompts(self, problems: Any) -> tuple[np.ndarray, np.ndarray]: ...
    def rewards(self, problems: Any, rollout: Any, *, group_size: int) -> jnp.ndarray: ...
    def demonstrations(self, problems: Any, *, seed: int) -> tuple[np.ndarray, np.ndarray]: ...
    def decode(self, ids) -> str: ...


@dataclasses.dataclass(frozen=True)
class ArithTask:
    """The modular-addition chain task (`prs.tasks.arith`) behind the `SingleTurnTask` protocol."""

    cfg: arith.ArithConfig = arith.ArithConfig()
    name: str = "arith"

    @property
    def vocab_size(self) -> int:
        return self.cfg.vocab.size

    @property
    def pad_id(self) -> int:
        return self.cfg.vocab.pad_id

    @property
    def eos_id(self) -> int:
        return self.cfg.vocab.eos_id

    @property
    def max_new_tokens(self) -> int:
        return self.cfg.max_solution_len

    def train_problems(self, *, seed: int, step: int, count: int) -> arith.Problems:
        # one independent stream per (seed, step): a resumed run draws the same problems
        return arith.make_problems(self.cfg, seed=int(seed) * 1_000_003 + int(step), count=count)

    def eval_problems(self, *, count: int) -> arith.Problems:
        return arith.eval_problems(self.cfg, count=count)

    def take(self, problems: arith.Problems, index: np.ndarray) -> arith.Problems:
        return arith.Problems(*(np.asarray(x)[index] for x in problems))

    def prompts(self, problems: arith.Problems) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(problems.prompt), np.asarray(problems.prompt_len)

    def rewards(self, problems: arith.Problems, rollout, *, group_size: int) -> jnp.ndarray:
        """[B, N] 0/1. The response graded is everything after the *task* prompt: for a re-rollout,
        the replayed prefix plus the continuation (the rollout's own ``prompt_lengths`` would
        hide the prefix from the verifier)."""
        answer = jnp.repeat(jnp.asarray(problems.answer), group_size)  # [R]
        task_prompt_len = jnp.repeat(jnp.asarray(problems.prompt_len), group_size)  # [R]
        r = arith.verify(answer, rollout.tokens, task_prompt_len, rollout.lengths)
        return r.reshape(-1, group_size)  # [B, N]

    def demonstrations(self, problems: arith.Problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        d = arith.demonstrations(problems, self.cfg, seed=seed)
        return d.tokens, d.loss_mask

    def decode(self, ids) -> str:
        return self.cfg.vocab.decode([int(i) for i in ids])


def _arith(**params) -> ArithTask:
    fields = {f.name for f in dataclasses.fields(arith.ArithConfig)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ValueError(f"task 'arith': unknown parameter(s) {unknown}; known: {sorted(fields)}")
    if params.get("term_weights") is not None:
        params["term_weights"] = tuple(float(w) for w in params["term_weights"])
    return ArithTask(arith.ArithConfig(**params))


TASKS: dict[str, Callable[..., Any]] = {"arith": _arith}


def register_task(name: str, factory: Callable[..., Any]) -> None:
    """Adds a task factory ``factory(**params) -> task`` under ``name``."""
    TASKS[name] = factory


def make_task(name: str, **params):
    """The task registered as ``name``, built with its ``params``."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; registered: {sorted(TASKS)}")
    return TASKS[name](**params)


# Tasks defined in their own modules register themselves on import; importing them here means
# `make_task` knows every shipped task whoever imports the registry (prs code, Hydra, notebooks).
from prs.tasks import math_jsonl as _math_jsonl  # noqa: E402,F401  (registers "math_jsonl")
from prs.tasks import repair as _repair  # noqa: E402,F401  (registers the "repair" agent task)
