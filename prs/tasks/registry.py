"""Tasks as the trainer sees them, and a registry so a config can pick one by name.

A *single-turn task* gives the trainer problems, their prompts, a binary verifier and supervised
demonstrations; everything else (sampling, prefix replay, advantages, updates) is the trainer's.

    task = make_task("arith", max_terms=6)
    problems = task.train_problems(seed=0, step=3, count=16)   # deterministic in (seed, step)
    prompt, prompt_len = task.prompts(problems)                 # [B, P], [B]
    rewards = task.rewards(problems, rollout, group_size=8)     # [B, N] float32 0/1

Task-specific knobs go through ``make_task(name, **params)``; an unknown knob is a ``ValueError``
naming the task and the knobs it accepts.

This module is the mechanism only and imports no task: each task module registers itself
(``register_task``), and ``prs/tasks/__init__.py`` imports every shipped task, so whoever imports
``prs.tasks.registry`` finds them all registered.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import jax.numpy as jnp
import numpy as np


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


TASKS: dict[str, Callable[..., Any]] = {}


def register_task(name: str, factory: Callable[..., Any]) -> None:
    """Adds a task factory ``factory(**params) -> task`` under ``name``."""
    TASKS[name] = factory


def make_task(name: str, **params):
    """The task registered as ``name``, built with its ``params``."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; registered: {sorted(TASKS)}")
    return TASKS[name](**params)


def available_tasks() -> list[str]:
    """The registered task names (every shipped task once ``prs.tasks`` is imported)."""
    return sorted(TASKS)
