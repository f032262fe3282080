"""Faults a run must survive or report clearly (issue #21): a short run checkpoints at its end and
is not redone; kill -9 during a checkpoint write; a truncated metrics line; a non-finite loss (stop
or skip); an unwritable or full run directory; two processes building the shared warm start at
once (the run directory's own checks: ``test_rundir.py``). Tiny shapes (those of
``tests/rl/test_trainer.py``), a few steps each."""
from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.models.qwen3 import ModelConfig
from prs.rl import rundir, runner
from prs.rl.runner import NonFiniteError, RunConfig, RunDirError, run
from prs.rl.trainer import RLConfig, Trainer, TrainState, checkpoint_tree
from prs.rl.config import EvalConfig
from prs.tasks.registry import make_task

ROOT = pathlib.Path(__file__).resolve().parents[2]
TASK = make_task("arith", min_terms=2, max_terms=4)
MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                           head_dim=8, d_ff=64)
RL = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=16, samples=1))
PC = ps.PrefixConfig(mode="ps_ada", n=8)
COMMON = dict(seed=4, eval_every=2, ckpt_every=2, sft_steps=0, wandb_mode="disabled", progress=False)
QUIET = dict(log=lambda *a: None)

# The same run as a script, for the subprocess tests (kill -9 must hit a real process).
SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {root!r})
    import jax
    jax.config.update("jax_compilation_cache_dir", {cache!r})  # the suite's persistent cache (conftest)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    from prs.core import prefix as ps
    from prs.models.qwen3 import ModelConfig
    from prs.rl.runner import RunConfig, run
    from prs.rl.trainer import EvalConfig, RLConfig
    from prs.tasks.registry import make_task
    TASK = make_task("arith", min_terms=2, max_terms=4)
    MODEL = ModelConfig.preset("tiny", vocab_size=TASK.vocab_size, d_model=32, n_layers=2, n_heads=4,
                               n_kv_heads=2, head_dim=8, d_ff=64)
    RL = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=16, samples=1))
    {body}
""")


def _strip(records):
    return [{k: v for k, v in m.items() if not k.startswith("time_")} for m in records]


def _metrics(d):
    return [json.loads(x) for x in (pathlib.Path(d) / "metrics.jsonl").read_text().splitlines()]


def _python(body: str, *args, **kw):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    return subprocess.Popen([sys.executable, "-c", SCRIPT.format(root=str(ROOT), cache=str(jax.config.jax_compilation_cache_dir), body=textwrap.dedent(body)), *args],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 4-step run (checkpoints at 2 and 4)."""
    d = tmp_path_factory.mktemp("faults") / "full"
    run(TASK, MODEL, RL, PC, RunConfig(steps=4, **COMMON), d, **QUIET)
    return d


def test_short_run_checkpoints_at_its_end_and_a_rerun_is_already_complete(tmp_path, monkeypatch):
    d = tmp_path / "short"
    s1 = run(TASK, MODEL, RL, PC, RunConfig(steps=3, **{**COMMON, "ckpt_every": 50}), d, config_dict={"seed": 4}, **QUIET)
    assert sorted(p.name for p in (d / "checkpoints").iterdir() if p.name.isdigit()) == ["3"]
    before = (d / "summary.json").read_bytes(), (d / "metrics.jsonl").read_bytes()
    monkeypatch.setattr(runner, "base_params", lambda *a, **k: pytest.fail("a finished run was started again"))
    logs = []
    s2 = run(TASK, MODEL, RL, PC, RunConfig(steps=3, **{**COMMON, "ckpt_every": 50}), d, config_dict={"seed": 4},
             log=logs.append)
    assert any("already complete (step 3)" in line for line in logs), logs
    assert s2 == json.loads(before[0]) and s2["eval_final"] == s1["eval_final"]
    assert ((d / "summary.json").read_bytes(), (d / "metrics.jsonl").read_bytes()) == before


def test_raising_steps_extends_a_finished_run_with_one_line_and_lowering_is_refused(tmp_path, reference):
    import shutil

    d = tmp_path / "ext"
    shutil.copytree(reference, d)
    logs = []
    s = run(TASK, MODEL, RL, PC, RunConfig(steps=5, **COMMON), d, log=logs.append)
    assert [x for x in logs if "extending" in x] == ["[run] extending run ext from 4 to 5 steps"], logs
    assert s["steps"] == 5 and [m["step"] for m in _metrics(d) if m["kind"] == "train"] == [0, 1, 2, 3, 4]
    logs.clear()
    run(TASK, MODEL, RL, PC, RunConfig(steps=5, **COMMON), d, log=logs.append)  # finished: no extension line
    assert not [x for x in logs if "extending" in x] and any("already complete" in x for x in logs), logs
    with pytest.raises(RunDirError, match=r"finished run of 5 steps; steps=3 would not shorten it"):
        run(TASK, MODEL, RL, PC, RunConfig(steps=3, **COMMON), d, **QUIET)
    (d / "summary.json").unlink()  # an unfinished run with a checkpoint past the new length
    with pytest.raises(RunDirError, match=r"checkpoint at step 5, past steps=3"):
        run(TASK, MODEL, RL, PC, RunConfig(steps=3, **COMMON), d, **QUIET)


def test_a_run_directory_another_process_trains_into_is_refused_before_training(tmp_path, monkeypatch):
    """While ``rundir.run_lock`` is held on the directory (here by the test itself, a second open file), ``run``
    stops with one line before building a trainer; once it is released the same call trains."""
    d = tmp_path / "busy"
    built = []
    monkeypatch.setattr(runner, "Trainer", lambda *a, **k: built.append(1) or Trainer(*a, **k))
    with rundir.run_lock(d):
        with pytest.raises(RunDirError, match=r"busy is in use: process \d+ on .*; wait for it to end"):
            run(TASK, MODEL, RL, PC, RunConfig(steps=1, **COMMON), d, **QUIET)
    assert built == [] and not (d / "metrics.jsonl").exists()
    s = run(TASK, MODEL, RL, PC, RunConfig(steps=1, **COMMON), d, **QUIET)
    assert built == [1] and s["steps"] == 1


@pytest.mark.slow
def test_kill_9_during_a_checkpoint_write_resumes_from_the_previous_one(tmp_path, reference):
    """The process is SIGKILLed inside orbax's commit of the step-4 checkpoint (files written, not yet
    renamed into place); the re-run resumes from step 2 and writes the uninterrupted run's metrics."""
    d = tmp_path / "killed"
    p = _python(f"""
        import os, signal
        from orbax.checkpoint._src.path import atomicity
        orig = atomicity.AtomicRenameTemporaryPath.finalize
        async def finalize(self):
            if self._final_path.name == "4":
                os.kill(os.getpid(), signal.SIGKILL)
            return await orig(self)
        atomicity.AtomicRenameTemporaryPath.finalize = finalize
        run(TASK, MODEL, RL, ps.PrefixConfig(mode="ps_ada", n=8),
            RunConfig(steps=4, **{COMMON!r}), {str(d)!r}, log=lambda *a: None)
    """)
    out, _ = p.communicate(timeout=240)
    assert p.returncode == -9, out
    assert [p.name for p in (d / "checkpoints").iterdir() if p.name.isdigit()] == ["2"]  # 4 was never committed
    assert not (d / "summary.json").exists()
    logs = []
    s = run(TASK, MODEL, RL, PC, RunConfig(steps=4, **COMMON), d, log=logs.append)
    assert s["resumed_from_step"] == 2, logs
    assert _strip(_metrics(d)) == _strip(_metrics(reference))


def test_a_truncated_last_metrics_line_is_repaired_on_resume(tmp_path, reference):
    import shutil

    d = tmp_path / "trunc"
    shutil.copytree(reference, d)
    shutil.rmtree(d / "checkpoints" / "4")  # "killed" during step 3, after the step-2 checkpoint
    (d / "summary.json").unlink()
    lines = (d / "metrics.jsonl").read_text().splitlines(keepends=True)
    upto3 = [ln for ln in lines if json.loads(ln)["step"] < 3]
    (d / "metrics.jsonl").write_text("".join(upto3) + lines[len(upto3)][:37])  # half a line, no newline
    logs = []
    s = run(TASK, MODEL, RL, PC, RunConfig(steps=4, **COMMON), d, log=logs.append)
    assert any("truncated last line" in line for line in logs), logs
    assert s["resumed_from_step"] == 2
    assert _strip(_metrics(d)) == _strip(_metrics(reference))
    for f in ("summary.json", "curves.png"):
        assert (d / f).exists()
    # the run records the code it ran on, once per segment (start and resume)
    summ = json.loads((d / "summary.json").read_text())
    assert [sg["start_step"] for sg in summ["provenance_segments"]] == [0, 2]
    assert summ["provenance"]["commit"] is None or len(summ["provenance"]["commit"]) == 40


def _poison_at(monkeypatch, step: int):
    """Trainer.step returns a NaN loss and NaN params at ``step`` (as a diverging update would)."""
    orig = Trainer.step

    def step_fn(self, state):
        s = int(state.step)
        new, m = orig(self, state)
        if s == step:
            new = new._replace(params=jax.tree.map(lambda x: x * jnp.nan, new.params))
            m = {**m, "loss/loss": math.nan, "loss/grad_norm": math.inf}
        return new, m

    monkeypatch.setattr(Trainer, "step", step_fn)


def test_a_nonfinite_loss_stops_the_run_naming_the_step_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    from prs.analysis import load_run

    _poison_at(monkeypatch, 3)
    d = tmp_path / "nan"
    with pytest.raises(NonFiniteError, match=r"step 3: non-finite loss/loss=nan.*last good checkpoint \(step 2\)"):
        run(TASK, MODEL, RL, PC, RunConfig(steps=4, **COMMON), d, **QUIET)
    assert [p.name for p in (d / "checkpoints").iterdir() if p.name.isdigit()] == ["2"]
    assert max(m["step"] for m in _metrics(d)) == 2  # the bad step wrote no line
    err = json.loads((d / "error.json").read_text())
    assert err["step"] == 3 and "NonFiniteError" in err["error"]
    r = load_run(d)
    assert r.status == "failed" and "step 3" in r.describe()


def test_skip_drops_the_bad_update_and_trains_on(tmp_path, monkeypatch):
    import orbax.checkpoint as ocp

    from prs.models.qwen3 import init_params

    _poison_at(monkeypatch, 2)
    d = tmp_path / "skip"
    s = run(TASK, MODEL, RL, PC, RunConfig(steps=3, **{**COMMON, "ckpt_every": 1, "on_nonfinite": "skip"}), d, **QUIET)
    assert s["steps"] == 3 and s["steps_skipped"] == 1 and math.isfinite(s["eval_final"])
    train = [m for m in _metrics(d) if m["kind"] == "train"]
    assert [m.get("skipped", False) for m in train] == [False, False, True] and train[2]["loss/loss"] is None
    # the checkpoints before (2) and after (3) the skipped step hold identical params, optimiser and controller
    trainer = Trainer(TASK, MODEL, RL, PC, seed=4)
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, checkpoint_tree(
        jax.eval_shape(lambda k: trainer.init_state(init_params(MODEL, k)), jax.random.PRNGKey(0))))
    with ocp.CheckpointManager(d / "checkpoints") as mngr:
        assert sorted(mngr.all_steps()) == [2, 3]
        a, b = (TrainState(**mngr.restore(k, args=ocp.args.StandardRestore(abstract))) for k in (2, 3))
    assert int(a.step) == 2 and int(b.step) == 3
    same = jax.tree.map(lambda x, y: bool(np.array_equal(np.asarray(x), np.asarray(y))),
                        (a.params, a.opt_state, a.prefix), (b.params, b.opt_state, b.prefix))
    assert all(jax.tree.leaves(same))


def test_an_unwritable_or_full_run_directory_fails_before_training(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "base_params", lambda *a, **k: pytest.fail("training started"))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(RunDirError, match="not writable"):
        run(TASK, MODEL, RL, PC, RunConfig(steps=2, **COMMON), blocker / "run", **QUIET)
    import collections
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(rundir.shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 10**5, 10**5))
    with pytest.raises(RunDirError, match=r"MiB free on its disk, the run needs about"):
        run(TASK, MODEL, RL, PC, RunConfig(steps=2, **COMMON), tmp_path / "full_disk", **QUIET)
    assert not (tmp_path / "full_disk" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_two_processes_building_the_warm_start_at_once(tmp_path):
    """Two sweep jobs start together on a fresh base directory: one builds, the other waits and loads
    the winner's copy (before: both built and the second rename failed with errno 39). Slow tier (two
    processes); the fast tier keeps the build-then-load-from-cache path in one process
    (tests/rl/test_runner_reports.py::test_bar_names_the_eval_step_and_summary_records_the_warm_start)."""
    body = f"""
        import hashlib, jax, numpy as np
        from prs.rl.runner import base_params
        rc = RunConfig(steps=1, sft_steps=6, sft_batch=8, wandb_mode="disabled")
        p = base_params(TASK, MODEL, rc, __import__("pathlib").Path({str(tmp_path / 'base')!r}), log=print)
        print("digest", hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in jax.tree.leaves(p))).hexdigest())
    """
    procs = [_python(body) for _ in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    built = sum("supervised warm start" in o for o in outs)
    reused = sum("reusing warm-start" in o for o in outs)
    assert (built, reused) == (1, 1), outs
    digests = {line for o in outs for line in o.splitlines() if line.startswith("digest")}
    assert len(digests) == 1
    assert [p.name for p in (tmp_path / "base").iterdir()] == [next((tmp_path / "base").iterdir()).name]


def test_a_job_waiting_on_the_warm_start_lock_loads_the_copy_published_meanwhile(tmp_path):
    """The one-process half of test_two_processes_building_the_warm_start_at_once (slow tier): while
    another job holds the base directory's lock, ``base_params`` waits on it; the copy that job
    published meanwhile is loaded, not built again."""
    import shutil
    import threading

    from prs.rl.runner import base_params

    rc = RunConfig(steps=1, sft_steps=6, sft_batch=8, wandb_mode="disabled")
    built = base_params(TASK, MODEL, rc, tmp_path / "other", log=lambda *a: None)  # the other job's copy
    (name,) = [p.name for p in (tmp_path / "other").iterdir()]
    base, logs, got = tmp_path / "base", [], {}
    with rundir.dir_lock(base):  # the other job, building
        t = threading.Thread(target=lambda: got.update(p=base_params(TASK, MODEL, rc, base, log=logs.append)))
        t.start()
        t.join(timeout=1.0)
        assert t.is_alive() and not logs, logs  # waiting on the lock, nothing built
        shutil.copytree(tmp_path / "other" / name, base / name)  # ... published
    t.join(timeout=120)
    assert not t.is_alive() and len(logs) == 1 and "reusing warm-start" in logs[0], logs
    for a, b in zip(jax.tree.leaves(got["p"]), jax.tree.leaves(built)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_progress_eta_counts_this_process_steps_after_the_first(monkeypatch):
    """Resumed at 150 of 200: the first step took 500 s (compilation, restore, evaluation), then 10 s
    per step. The ETA after step 152 is 48 x 10 s (it said 48 x 255 s = 12240 s: the first step's time
    spread over the steps)."""
    import io

    now = [0.0]
    monkeypatch.setattr(runner.time, "perf_counter", lambda: now[0])
    out = io.StringIO()
    bar = runner.Progress(200, start=150, every_s=0.0, stream=out)  # t = 0
    for t, done, text in ((500.0, 151, "a"), (510.0, 152, lambda: "b"), (520.0, 153, "c")):
        now[0] = t
        bar.update(done, text)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("151/200 a eta --"), lines
    assert lines[1].endswith("152/200 b 0.10 step/s eta 480s"), lines
    assert lines[2].endswith("153/200 c 0.10 step/s eta 470s"), lines


def test_warm_start_shows_a_progress_display_and_logs_one_line():
    import io

    from prs.rl.trainer import supervised_warm_start

    out, logs = io.StringIO(), []
    bar = runner.Progress(3, every_s=0.0, stream=out, label="[sft] ")
    supervised_warm_start(TASK, MODEL, steps=3, batch=4, lr=1e-3, seed=0, log=logs.append, progress=bar)
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(x.startswith("[sft] [") and " loss " in x for x in lines), lines
    assert len(logs) == 1 and logs[0].startswith("[sft] 3 steps: loss "), logs
    logs.clear()  # without a display: a line every log_every steps, as before
    supervised_warm_start(TASK, MODEL, steps=3, batch=4, lr=1e-3, seed=0, log=logs.append, log_every=2)
    assert [x.split(" loss")[0] for x in logs] == ["[sft] step 1/3", "[sft] step 3/3"], logs
