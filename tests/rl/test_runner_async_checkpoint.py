"""Checkpoints are written asynchronously (issue #29 item 3f): the step after a save runs while the
save's files are still being committed, the run waits for the last one before it ends, and a
resumed run still equals the uninterrupted one (``tests/rl/test_trainer.py::test_resume_continues_exactly``,
``tests/rl/test_runner_faults.py``'s kill -9 during a commit). Reference: the order of events as orbax
commits (its ``finalize``, slowed down here) and the trainer steps."""
from __future__ import annotations

import asyncio
import pathlib
import pytest

from orbax.checkpoint._src.path import atomicity

from prs.rl import trainer as trainer_lib
from prs.rl.runner import RunConfig, run
from tests.rl.test_runner_faults import COMMON, MODEL, PC, QUIET, RL, TASK


@pytest.mark.slow
def test_the_next_step_overlaps_the_checkpoint_write(tmp_path, monkeypatch):
    events = []
    orig_finalize = atomicity.AtomicRenameTemporaryPath.finalize
    orig_step = trainer_lib.Trainer.step

    async def slow_finalize(self, *a, **k):
        await asyncio.sleep(3.0)  # a slow file system: the commit of a checkpoint takes 3 s
        out = await orig_finalize(self, *a, **k)
        events.append(f"committed {self._final_path.name}")
        return out

    def step(self, state):
        events.append(f"step {int(state.step)}")
        return orig_step(self, state)

    monkeypatch.setattr(atomicity.AtomicRenameTemporaryPath, "finalize", slow_finalize)
    monkeypatch.setattr(trainer_lib.Trainer, "step", step)
    d = tmp_path / "run"
    s = run(TASK, MODEL, RL, PC, RunConfig(steps=3, **COMMON), d, **QUIET)
    # step 2 started before checkpoint 2 was committed (a synchronous save commits first)
    assert events.index("step 2") < events.index("committed 2"), events
    # the run ended only after its last checkpoint was committed
    assert "committed 3" in events and s["resumed_from_step"] == 0
    assert sorted(p.name for p in (d / "checkpoints").iterdir() if p.name.isdigit()) == ["2", "3"]
    assert pathlib.Path(d / "summary.json").exists()
