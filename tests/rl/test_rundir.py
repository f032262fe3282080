"""The run directory's records (``prs.rl.rundir``): a corrupt metrics line is an error naming it, a
different configuration never reuses a directory (recorded vs current values, schema defaults), and
of two copies published at once the first wins. The faults of whole runs: ``test_runner_faults.py``."""
from __future__ import annotations

import json

import pytest

from prs.rl import rundir
from prs.rl.rundir import RunDirError


def test_a_corrupt_metrics_line_before_the_last_is_an_error_naming_it(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"kind": "train", "step": 0}\n{"kind": tr\n{"kind": "train", "step": 2}\n')
    with pytest.raises(RunDirError, match="line 2 is not JSON"):
        rundir.read_metrics(p)



def test_a_different_configuration_never_reuses_a_run_directory(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    cfg = {"seed": 0, "steps": 10, "algo": {"lr": 1e-3, "clip_high": 0.28}, "logging": {"progress": True}}
    rundir.check_config(d, cfg)
    assert json.loads((d / "config.json").read_text()) == cfg
    rundir.check_config(d, {**cfg, "steps": 20, "logging": {"progress": False}})  # length and display may change
    # a field added to the schema since the run was recorded: the record's value is the field's default
    defaults = {"seed": 0, "steps": 1, "algo": {"lr": 1e-3, "clip_high": 0.28, "new_field": 0}}
    rundir.check_config(d, {**cfg, "algo": {**cfg["algo"], "new_field": 0}}, defaults=defaults)
    with pytest.raises(RunDirError, match=r"algo\.new_field: 0 \(recorded\) vs 1 \(now\)"):
        rundir.check_config(d, {**cfg, "algo": {**cfg["algo"], "new_field": 1}}, defaults=defaults)
    with pytest.raises(RunDirError, match=r"algo\.new_field: '<absent>' \(recorded\) vs 0 \(now\)"):
        rundir.check_config(d, {**cfg, "algo": {**cfg["algo"], "new_field": 0}})  # no default known: a difference
    with pytest.raises(RunDirError, match=r"task\.params\.hard: '<absent>' \(recorded\) vs True"):
        rundir.check_config(d, {**cfg, "task": {"params": {"hard": True}}}, defaults=defaults)  # a free-form entry
    with pytest.raises(RunDirError, match=r"algo\.lr: 0\.001 \(recorded\) vs 0\.002 \(now\).*tag="):
        rundir.check_config(d, {**cfg, "algo": {"lr": 2e-3, "clip_high": 0.28}})
    # a directory from before config.json: the summary's config is the record
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.json").write_text(json.dumps({"config": cfg}))
    with pytest.raises(RunDirError, match=r"seed: 0 \(recorded\) vs 1"):
        rundir.check_config(old, {**cfg, "seed": 1})



def test_publish_dir_loser_discards_its_copy(tmp_path):
    win, lose, final = tmp_path / "a.tmp1", tmp_path / "a.tmp2", tmp_path / "a"
    for p, text in ((win, "winner"), (lose, "loser")):
        p.mkdir()
        (p / "f").write_text(text)
    assert rundir.publish_dir(win, final) is True
    assert rundir.publish_dir(lose, final) is False
    assert (final / "f").read_text() == "winner" and not lose.exists()


def test_run_lock_refuses_a_second_holder_naming_the_first_and_is_free_after(tmp_path):
    import os

    d = tmp_path / "run"
    with rundir.run_lock(d):
        assert (d / rundir.LOCK_FILE).read_text().startswith(f"process {os.getpid()} on ")
        # flock belongs to the open file: a second open, even in this process, is a second holder
        with pytest.raises(RunDirError, match=rf"{d} is in use: process {os.getpid()} on .* tag=<name>"):
            with rundir.run_lock(d):
                pass
    with rundir.run_lock(d):   # released at the end of the block: the next holder gets it
        pass


def test_run_lock_goes_with_a_killed_process(tmp_path):
    """A process holding the lock is killed with SIGKILL: the operating system releases it, so the run can be
    resumed at once (the lock file stays, unlocked)."""
    import signal
    import subprocess
    import sys

    d = tmp_path / "run"
    code = ("import pathlib, sys, time\nfrom prs.rl import rundir\n"
            f"with rundir.run_lock(pathlib.Path({str(d)!r})):\n    print('held', flush=True)\n    time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(RunDirError, match=rf"is in use: process {p.pid} on "):
            with rundir.run_lock(d):
                pass
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    with rundir.run_lock(d):
        pass
    assert (d / rundir.LOCK_FILE).exists()


def test_runner_run_takes_only_a_held_lock_on_its_own_directory(tmp_path):
    """``runner.run(lock=...)``: the caller's ``run_lock`` token is checked before anything runs."""
    from prs.rl import runner

    with rundir.run_lock(tmp_path / "a") as held:
        assert held.held and held.out == (tmp_path / "a").resolve()
        with pytest.raises(ValueError, match=r"the lock given is on .*/a; allowed: None or a held rundir.run_lock "
                                             r"on out_dir .*/b"):
            runner.run(None, None, None, None, None, tmp_path / "b", lock=held)
    assert not held.held
    with pytest.raises(ValueError, match=r"the lock given is released; allowed"):
        runner.run(None, None, None, None, None, tmp_path / "a", lock=held)
