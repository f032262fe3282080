"""No XLA compiles after warm-up: a training step compiles nothing once steps 0-2 have run, for
every method, although the number of re-rolled and replaced groups changes from step to step
(issue #20, item 5). Counts what ``JAX_LOG_COMPILES=1`` prints ("Compiling <fn> ...")."""
from __future__ import annotations

import collections
import contextlib
import logging

import jax
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.models.qwen3 import ModelConfig
from prs.rl.trainer import RLConfig, Trainer, supervised_warm_start
from prs.rl.config import EvalConfig, LossConfig, OptimConfig, ScheduleConfig
from prs.tasks.registry import make_task

TASK = make_task("arith", min_terms=2, max_terms=4)
MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size)


class _Count(logging.Handler):
    def __init__(self):
        super().__init__()
        self.names = collections.Counter()

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Compiling "):
            self.names[msg.split()[1]] += 1


@contextlib.contextmanager
def count_compiles():
    """Counts XLA programs lowered inside the block (persistent-cache hits included: each one
    is a trace + lowering + cache lookup the step pays for)."""
    handler, logger = _Count(), logging.getLogger("jax")
    old = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)
    logger.addHandler(handler)
    try:
        yield handler.names
    finally:
        logger.removeHandler(handler)
        jax.config.update("jax_log_compiles", old)


def test_count_compiles_sees_a_new_shape():
    f = jax.jit(lambda x: x + 1)
    with count_compiles() as names:
        f(np.ones(3, np.float32))
        f(np.ones(3, np.float32))
    with count_compiles() as again:
        f(np.ones(4, np.float32))
    assert dict(names) == {"jit(<lambda>)": 1} and dict(again) == {"jit(<lambda>)": 1}


@pytest.fixture(scope="module")
def base_params():
    return supervised_warm_start(TASK, MODEL, steps=60, batch=32, lr=3e-3, seed=0, log=None)


METHODS = {  # name -> (PrefixConfig kwargs, RLConfig kwargs)
    "grpo": (dict(mode="baseline"), {}),
    "ps_fix": (dict(mode="ps_fix", hard_max=3, easy_min=5), {}),
    "ps_ada_hard": (dict(mode="ps_ada_hard", hard_max=3, easy_min=5), {}),
    "ps_ada": (dict(mode="ps_ada", hard_max=3, easy_min=5), {}),
    "ps_ada_append": (dict(mode="ps_ada", hard_max=3, easy_min=5), dict(schedule=ScheduleConfig(reroll="append"))),
    "rft": (dict(mode="baseline"), dict(loss=LossConfig(algorithm="rft"))),
}


NEW_WIDTH_OK = {"jit(update_step)", "jit(dynamic_slice)", "jit(broadcast_in_dim)", "jit(_longest_row)"}


@pytest.mark.slow
def test_training_steps_3_to_6_compile_nothing(base_params, monkeypatch):
    """After steps 0-2 a step compiles nothing, unless its update width is a bucket (``update_width``:
    a quarter of the run's width, at most 4 per run) no earlier step had: that step may compile the
    update once for the new bucket, and a later step with that bucket again compiles nothing."""
    import prs.rl.trainer as trainer_module

    widths = []
    orig = trainer_module.update_width
    monkeypatch.setattr(trainer_module, "update_width", lambda valid, width: widths.append(orig(valid, width)) or widths[-1])
    new_shapes = 0
    for name, (pkw, rkw) in METHODS.items():
        rl = RLConfig(tasks_per_step=8, group_size=8, eval=EvalConfig(count=16, samples=1), optim=OptimConfig(lr=1e-5),
                      **rkw)
        trainer = Trainer(TASK, MODEL, rl, ps.PrefixConfig(n=8, **pkw), seed=1)
        state = trainer.init_state(base_params)
        seen, seen_w, new_width_steps = set(), set(), 0
        for i in range(7):
            with count_compiles() as names:
                state, m = trainer.step(state)
            shape, w = (m["groups_rerolled"], m["groups_replaced"]), widths[-1]
            if i >= 3:
                if w in seen_w:
                    assert not names, f"{name}: step {i} compiled {dict(names)} (re-rolled, replaced = {shape}, width {w})"
                else:  # a new width bucket: its update, the batch's cut to it and their eager glue compile once
                    new_width_steps += 1
                    assert "jit(update_step)" in names and set(names) <= NEW_WIDTH_OK, \
                        f"{name}: step {i} (new width {w}) compiled {dict(names)}"
            if i >= 3 and w in seen_w:
                new_shapes += shape not in seen
            seen.add(shape)
            seen_w.add(w)
        assert new_width_steps <= 3, f"{name}: {new_width_steps} new width buckets in steps 3-6"  # at most 4 per run
    # the test has teeth: some method met a (re-rolled, replaced) count in steps 3-6 that steps 0-2
    # never had, which compiled new programs before the host glue went numpy / fixed-shape
    assert new_shapes >= 1
