"""The README's main job starts from a warm start that has learned the task, on any machine.

A clean clone on an AVX2-only machine once trained a warm start that had not learned the addition
table (held-out pass@1 0.09 at step 0, 0.06 after RL) where the recording AVX-512 machine reached
0.46: the warm start sat on a loss plateau until late in its cosine schedule, so whether it escaped
before the learning rate decayed was decided by rounding, and some initialisations stop on a second
plateau (~0.75) that no restart leaves. The default now restarts the schedule (``sft.until_loss`` /
``sft.max_cycles``) while the loss stays on a plateau and starts from a fresh initialisation after two
failed cycles (``sft.attempts``). This builds the default warm start for three cases that failed
without these (seed 0 as this machine compiles it, which failed with one long cycle; seeds 1 and 2
with XLA limited to AVX2, ``--xla_cpu_max_isa=AVX2``: the code an AVX2-only machine runs; seed 1
needs a second cycle, seed 2 a second attempt), and requires the quality the README's main job
needs: held-out demonstration loss and step-0 held-out pass@1 past thresholds that every failed warm
start measured missed by a wide margin (failed: loss 0.71-0.86, pass@1 0.09-0.21; learned: loss
<= 0.55, pass@1 >= 0.38). It guards the main job against a change that breaks it; it does not prove
that every seed on every machine learns."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MAX_LOSS = 0.62       # held-out demonstration loss (token mean)
MIN_PASS = 0.30       # step-0 held-out pass@1 (256 problems x 2 samples)


@pytest.mark.slow
@pytest.mark.parametrize("seed,xla_flags", [(0, None), (1, "--xla_cpu_max_isa=AVX2"), (2, "--xla_cpu_max_isa=AVX2")])
def test_default_warm_start_learns_the_task(tmp_path, seed, xla_flags):
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    if xla_flags:
        env["XLA_FLAGS"] = xla_flags
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "tests._warm_start_worker", str(tmp_path / "base"), f"sft.seed={seed}"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    print(f"sft.seed={seed} XLA_FLAGS={xla_flags}: {got}")
    assert got["heldout_demo_loss"] <= MAX_LOSS and got["pass_at_1"] >= MIN_PASS, got


class _Spy:
    """The tiny arith task, recording which stream steps the warm start draws."""

    def __init__(self, task):
        self.task, self.steps = task, []

    def warm_start_problems(self, *, seed, step, count):
        self.steps.append(step)
        return getattr(self.task, "warm_start_problems", self.task.train_problems)(seed=seed, step=step, count=count)

    def train_problems(self, **kw):
        return self.task.train_problems(**kw)

    def demonstrations(self, probs, *, seed):
        return self.task.demonstrations(probs, seed=seed)


def test_warm_restarts_run_another_cycle_only_while_the_loss_is_above_the_target():
    import jax
    import numpy as np

    from prs.rl.trainer import supervised_warm_start
    from tests._arith_tiny import MODEL, TASK

    kw = dict(steps=4, batch=8, lr=3e-3, seed=0)
    one = _Spy(TASK)
    p1 = supervised_warm_start(one, MODEL, **kw, log=None)
    met = _Spy(TASK)   # a target every loss meets: one cycle, identical to no target
    p_met = supervised_warm_start(met, MODEL, **kw, until_loss=float("inf"), max_cycles=3, log=None)
    lines = []
    two = _Spy(TASK)   # a target no loss meets: every cycle runs, on the next problems of the stream
    p2 = supervised_warm_start(two, MODEL, **kw, until_loss=-1.0, max_cycles=2, log=lines.append)
    assert one.steps == met.steps == [0, 1, 2, 3] and two.steps == list(range(8))
    same = jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), p1, p_met)
    assert all(jax.tree.leaves(same))
    assert not all(jax.tree.leaves(jax.tree.map(lambda a, b: bool(np.array_equal(a, b)), p1, p2)))
    cyc = [ln for ln in lines if "cycle" in ln]
    assert len(cyc) == 2 and "another cycle" in cyc[0] and "sft.max_cycles=2" in cyc[1], lines
    with pytest.raises(ValueError, match="max_cycles"):
        supervised_warm_start(TASK, MODEL, **kw, max_cycles=0, log=None)


def test_random_restarts_start_fresh_after_failed_cycles_and_keep_the_best_attempt():
    import re

    import jax
    import numpy as np

    from prs.rl.trainer import supervised_warm_start
    from tests._arith_tiny import MODEL, TASK

    kw = dict(steps=4, batch=8, lr=3e-3, seed=0)
    same = lambda a, b: all(jax.tree.leaves(jax.tree.map(lambda x, y: bool(np.array_equal(x, y)), a, b)))  # noqa: E731
    p1 = supervised_warm_start(_Spy(TASK), MODEL, **kw, log=None)
    met = _Spy(TASK)    # the first attempt meets the target: no other attempt, identical to one attempt
    assert same(p1, supervised_warm_start(met, MODEL, **kw, until_loss=float("inf"), attempts=3, log=None))
    assert met.steps == [0, 1, 2, 3]
    lines, two = [], _Spy(TASK)   # no attempt meets the target: both run, the stream goes on, the best is kept
    p2 = supervised_warm_start(two, MODEL, **kw, until_loss=-1.0, attempts=2, log=lines.append)
    assert two.steps == list(range(8))
    tails = [float(m) for ln in lines for m in re.findall(r"attempt \d cycle 1: mean loss of its last steps ([\d.]+)", ln)]
    assert len(tails) == 2 and tails[0] != tails[1], lines
    kept = int(re.search(r"keeping attempt (\d)", lines[-1]).group(1))
    assert kept == 1 + int(np.argmin(tails))
    assert same(p2, p1) == (kept == 1)
    # a target between the two attempts' losses: the attempt that meets it ends the warm start
    if tails[1] < tails[0]:
        third = _Spy(TASK)
        p3 = supervised_warm_start(third, MODEL, **kw, until_loss=(tails[0] + tails[1]) / 2, attempts=3, log=None)
        assert third.steps == list(range(8)) and same(p3, p2)
    with pytest.raises(ValueError, match="attempts=2 needs until_loss"):
        supervised_warm_start(_Spy(TASK), MODEL, **kw, attempts=2, log=None)
