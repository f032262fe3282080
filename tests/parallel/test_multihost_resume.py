"""Checkpoints and resume on two localhost processes (``jax.distributed``, CPU backend, gloo, 2
devices each, ``fsdp = 4`` across both; run directories on a disk both processes share, as orbax
needs): a run stopped by a failure after its step-2 checkpoint and re-run resumes and writes the
metrics (every number but wall-clock times, to 1e-5) and reaches the final parameters (to 1e-5)
of the uninterrupted two-process run and of the plain single-process run. The ``next_visit``
schedule on a pool of 4 tasks (every step revisits every task) makes the resumed step depend on
the restored task memory and controller state, not only on (seed, step). Both processes return
process 0's summary."""
import json
import pathlib

import jax
import numpy as np
import pytest

from tests._arith_tiny import MODEL, TASK
from prs.core import prefix as ps
from prs.rl import runner
from prs.rl.trainer import RLConfig
from prs.rl.config import EvalConfig, ScheduleConfig
from tests.parallel.test_multihost_train import _records, _same
from tests._localhost import capturing_trainer, run_processes

STEPS, CRASH_AT = 3, 2  # checkpoints at 2 and 3; the failure hits step 2, after the step-2 checkpoint


def rl_cfg() -> RLConfig:
    return RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=16, samples=1), schedule=ScheduleConfig(kind="next_visit", pool_size=4, cut_spread=True, sources="all"))


def prefix_cfg() -> ps.PrefixConfig:
    return ps.PrefixConfig(n=8)


def run_cfg(base_dir) -> runner.RunConfig:
    return runner.RunConfig(steps=STEPS, eval_every=STEPS, ckpt_every=CRASH_AT, sft_steps=60, sft_batch=32,
                            sft_lr=3e-3, base_dir=str(base_dir), wandb_mode="disabled", progress=False)


def _tree(d: pathlib.Path):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*") if "checkpoints" not in p.parts[len(d.parts):][:1]) + \
        sorted(p.name for p in (d / "checkpoints").iterdir())


@pytest.mark.slow
def test_two_process_run_resumed_from_its_checkpoint_equals_the_uninterrupted_runs(tmp_path, monkeypatch):
    base_dir = tmp_path / "base"
    runner.base_params(TASK, MODEL, run_cfg(base_dir), base_dir, log=lambda *a: None)  # the shared warm start

    CapturingTrainer, captured = capturing_trainer()
    monkeypatch.setattr(runner, "Trainer", CapturingTrainer)
    runner.run(TASK, MODEL, rl_cfg(), prefix_cfg(), run_cfg(base_dir), tmp_path / "ref", log=lambda *a: None)
    want_params = captured[0].params

    run_processes("_multihost_resume_worker.py", lambda i: [tmp_path, base_dir], cwd=tmp_path, timeout=900, tail=6000)

    want = _records(tmp_path / "ref" / "metrics.jsonl")
    assert [m["kind"] for m in want] == ["eval"] + ["train"] * STEPS + ["eval"]
    # the resumed step depended on the restored memory and controller: it steered planned groups
    assert sum(m.get("groups_planned", 0) for m in want if m["kind"] == "train" and m["step"] >= CRASH_AT) > 0
    summaries = [json.loads((tmp_path / f"summary_p{i}.json").read_text()) for i in range(2)]
    assert summaries[0] == summaries[1]  # both processes return process 0's summary
    assert summaries[0]["full"]["resumed_from_step"] == 0 and summaries[0]["part"]["resumed_from_step"] == CRASH_AT
    assert [sg["start_step"] for sg in summaries[0]["part"]["provenance_segments"]] == [0, CRASH_AT]
    for name in ("full", "part"):
        d = tmp_path / name
        assert _tree(d) == _tree(tmp_path / "ref"), name  # same files (error.json cleared), checkpoints 2 and 3
        got = _records(d / "metrics.jsonl")
        assert [(m["kind"], m["step"]) for m in got] == [(m["kind"], m["step"]) for m in want], name
        for i, (w, g) in enumerate(zip(want, got)):
            assert sorted(g) == sorted(w)
            for key in w:
                _same(g[key], w[key], f"{name} record {i} ({w['kind']}, step {w['step']}) key {key}: {g[key]} vs {w[key]}")
        res = np.load(tmp_path / f"{name}.npz")
        for key, leaf in jax.tree_util.tree_leaves_with_path(want_params):
            # atol 1e-5 as in test_multihost_train (Adam amplifies the sharded reductions' rounding)
            np.testing.assert_allclose(res[jax.tree_util.keystr(key)], np.asarray(leaf), rtol=1e-5, atol=1e-5,
                                       err_msg=f"{name} {jax.tree_util.keystr(key)}")


@pytest.mark.slow
def test_a_kill_9_of_one_process_ends_the_job_and_a_rerun_resumes_to_the_same_run(tmp_path, monkeypatch):
    """Process 1 of two is SIGKILLed at the start of step 2 (after the step-2 checkpoint), as a
    preempted or OOM-killed host: process 0 does not hang, ``jax.distributed``'s heartbeat timeout
    ends it with an error; the same command re-run in the same directory resumes from step 2 and
    writes the single-process run's metrics (every number but wall-clock times, to 1e-5) and final
    parameters (to 1e-5)."""
    import time

    from tests._localhost import start_processes

    base_dir = tmp_path / "base"
    runner.base_params(TASK, MODEL, run_cfg(base_dir), base_dir, log=lambda *a: None)
    CapturingTrainer, captured = capturing_trainer()
    monkeypatch.setattr(runner, "Trainer", CapturingTrainer)
    runner.run(TASK, MODEL, rl_cfg(), prefix_cfg(), run_cfg(base_dir), tmp_path / "ref", log=lambda *a: None)
    want_params = captured[0].params

    t0 = time.monotonic()
    codes, logs = start_processes("_multihost_kill_worker.py", lambda i: [tmp_path, base_dir, "kill"], cwd=tmp_path,
                                  timeout=600, env={"PRS_HEARTBEAT_TIMEOUT_S": "10"})
    waited = time.monotonic() - t0
    assert codes[1] == -9, "\n".join(logs)[-4000:]  # killed
    assert codes[0] != 0, "\n".join(logs)[-4000:]   # ended by the lost peer, not finished, not hung
    assert (tmp_path / "killed" / "checkpoints" / str(CRASH_AT)).is_dir()
    run_processes("_multihost_kill_worker.py", lambda i: [tmp_path, base_dir, "resume"], cwd=tmp_path, timeout=900,
                  tail=6000)
    summary = json.loads((tmp_path / "killed_summary.json").read_text())
    assert summary["resumed_from_step"] == CRASH_AT
    want, got = _records(tmp_path / "ref" / "metrics.jsonl"), _records(tmp_path / "killed" / "metrics.jsonl")
    assert [(m["kind"], m["step"]) for m in got] == [(m["kind"], m["step"]) for m in want]
    for i, (w, g) in enumerate(zip(want, got)):
        assert sorted(g) == sorted(w)
        for key in w:
            _same(g[key], w[key], f"record {i} ({w['kind']}, step {w['step']}) key {key}: {g[key]} vs {w[key]}")
    res = np.load(tmp_path / "killed.npz")
    for key, leaf in jax.tree_util.tree_leaves_with_path(want_params):
        np.testing.assert_allclose(res[jax.tree_util.keystr(key)], np.asarray(leaf), rtol=1e-5, atol=1e-5,
                                   err_msg=jax.tree_util.keystr(key))
    print(f"kill phase ended after {waited:.0f} s; process 0 exit code {codes[0]}")
