"""``experiments.train.train`` on a process other than 0 of a multi-host job writes nothing: not
``config.json``, not ``.hydra/``, not the Hydra job log, not even the run directory; it still
refuses a directory holding another configuration (a read-only check every process makes before
the multi-host start-up). The start-up and ``prs.rl.runner.run`` are stubbed (the run's own files
are process 0's: tests/parallel/test_multihost_train.py checks that process 1's run directory stays empty)."""
import dataclasses
import json
import logging
import pathlib

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _snapshot(d: pathlib.Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def process_1(monkeypatch):
    """``train`` as process 1 of 2 sees it; returns the list of calls to the stubbed start-up and run."""
    from prs.parallel import distributed
    from prs.rl import runner

    calls = []
    monkeypatch.setattr(distributed, "initialize", lambda *a, **k: calls.append("initialize"))
    monkeypatch.setattr(jax, "process_index", lambda *a: 1)
    monkeypatch.setattr(runner, "run", lambda *a, **k: calls.append("run") or {"eval_final": 0.5})
    return calls


def _dcfg(tmp_path, *overrides):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose("config", overrides=[f"sft.base_dir={tmp_path / 'base'}", *overrides])


def test_process_1_writes_nothing_into_a_new_or_a_started_run_directory(tmp_path, process_1):
    from experiments import train as T
    from experiments.config import validate

    dcfg = _dcfg(tmp_path)
    new = tmp_path / "new"
    assert T.train(dcfg, new) == 0.5 and process_1 == ["initialize", "run"]
    assert not new.exists()  # process 0 creates it

    started = tmp_path / "started"  # process 0 got there first: its config.json, no job log yet
    started.mkdir()
    (started / "config.json").write_text(json.dumps(dataclasses.asdict(validate(dcfg))))
    before = _snapshot(started)
    root = logging.getLogger()
    job_log = logging.FileHandler(started / "train.log", delay=True)  # Hydra's job log (delay: true)
    level = root.level
    root.addHandler(job_log)
    root.setLevel(logging.INFO)
    try:
        assert T.train(dcfg, started) == 0.5
        logging.getLogger("experiments.train").info("a line after the start-up")
    finally:
        root.removeHandler(job_log)
        root.setLevel(level)
        job_log.close()
    assert _snapshot(started) == before  # no train.log, no .hydra/, config.json untouched


def test_process_1_still_refuses_a_directory_of_another_configuration(tmp_path, process_1):
    from experiments import train as T
    from experiments.config import validate
    from prs.rl.rundir import RunDirError

    d = tmp_path / "other"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(dataclasses.asdict(validate(_dcfg(tmp_path, "loss.clip_high=0.5")))))
    with pytest.raises(RunDirError, match=r"loss\.clip_high"):
        T.train(_dcfg(tmp_path), d)
    assert process_1 == []  # refused before the multi-host start-up
