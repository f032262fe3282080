"""A committed run re-runs to the same records on today's code (results/repro/README.md).

The re-run is a subprocess with the recorded run's environment (no ``XLA_FLAGS``): this suite's 8 fake
CPU devices change XLA:CPU's numerics, and so the sampled tokens, of the very same program."""
import os
import pathlib
import subprocess
import sys

from experiments import reproduce

ROOT = pathlib.Path(__file__).resolve().parent.parent
RUN = ROOT / "results" / "repro" / "arith-ps_ada-s0"


def test_the_committed_run_reproduces_exactly():
    recorded = reproduce.read_records(RUN)
    assert sum(r["kind"] == "train" for r in recorded) == 4
    assert any(r.get("groups_rerolled") for r in recorded)  # the prefix path is exercised
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "experiments.reproduce", str(RUN)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0 and "identical records" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


def test_diff_reports_a_changed_record():
    recorded = reproduce.read_records(RUN)
    changed = [dict(r) for r in recorded]
    changed[1]["pass_rate"] = -1.0
    changed[1]["time_sample"] = 123.0  # wall-clock differences are ignored
    out = reproduce.diff(recorded, changed)
    assert len(out) == 1 and "pass_rate" in out[0] and "time_sample" not in out[0]
    assert reproduce.diff(recorded, changed[:-1])[0].endswith("re-run lines")
