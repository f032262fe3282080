"""The README's main job starts from a warm start that has learned the task, on any machine.

A clean clone on an AVX2-only machine once trained a warm start that had not learned the addition
table (held-out pass@1 0.09 at step 0, 0.06 after RL) where the recording AVX-512 machine reached
0.46: the warm start sat on a loss plateau until late in its cosine schedule, so whether it escaped
before the learning rate decayed was decided by rounding. This builds the default warm start
(``conf/config.yaml``'s ``sft``) for two seeds, one of them with XLA limited to AVX2
(``--xla_cpu_max_isa=AVX2``: the code an AVX2-only machine runs), and requires the quality the
README's main job needs: held-out demonstration loss and step-0 held-out pass@1 past thresholds
that every failed warm start measured missed by a wide margin (failed: loss 0.73-0.86, pass@1
0.09-0.18; learned: loss <= 0.55, pass@1 >= 0.38)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAX_LOSS = 0.62       # held-out demonstration loss (token mean)
MIN_PASS = 0.30       # step-0 held-out pass@1 (256 problems x 2 samples)


@pytest.mark.slow
@pytest.mark.parametrize("seed,xla_flags", [(0, None), (1, "--xla_cpu_max_isa=AVX2")])
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
