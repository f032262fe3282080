"""``python -m experiments.train`` as a user meets it (issue #21): one clear line for a mistake,
nothing written into a finished run's directory by a rejected run, a differing configuration
refused by name, and a sweep that runs past a failed job and reports it (also to prs.analysis)."""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys

import pytest

from experiments import cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = ["eval.every=1", "eval.count=8", "ckpt_every=1", "sft.steps=0", "algo.tasks_per_step=2",
        "logging.wandb_mode=disabled", "logging.progress=false", "model.overrides.d_model=32",
        "model.overrides.head_dim=8", "model.overrides.d_ff=64"]


def _train(cwd, *args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "experiments.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


# the method group's options, read from conf/method/ (the CLI must list exactly these)
_METHODS = sorted(p.stem for p in (pathlib.Path(__file__).resolve().parents[2] / "conf" / "method").glob("*.yaml"))


@pytest.mark.parametrize("argv, match", [
    (["metod=baseline"], r"unknown key 'metod'; did you mean 'method'\?"),
    (["+metod=baseline"], r"unknown key 'metod'; did you mean 'method'\?"),
    (["loss.clip_hihg=0.3"], r"did you mean 'loss.clip_high'\?"),
    (["lr=1e-3"], r"unknown key 'lr'; did you mean 'optim.lr'"),  # a leaf: the full dotted keys that end in it
    (["method=nope"], r"method=nope: no such method; choose one of " + ", ".join(_METHODS)),
    (["-m", "method=baseline,nope"], r"method=nope: no such method"),
    (["experiment=ablation_arith_cpu"], r"write \+experiment=ablation_arith_cpu"),
])
def test_typos_are_one_clear_error(argv, match):
    with pytest.raises(cli.UsageError, match=match):
        cli.check_overrides(argv)


def test_valid_overrides_pass_and_schema_keys_become_force_adds():
    argv = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "method=baseline,ps_ada", "seed=range(3)",
            "+experiment=ablation_arith_cpu", "task.params.max_terms=3", "model.overrides.d_model=32",
            "~loss.kl_coef", "--cfg", "job", "sft.base_dir=/x", "tag=_a", "+method.hard_max=3"]
    assert cli.check_overrides(argv) == [
        "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "method=baseline,ps_ada", "++seed=range(3)",
        "+experiment=ablation_arith_cpu", "++task.params.max_terms=3", "++model.overrides.d_model=32",
        "~loss.kl_coef", "--cfg", "job", "++sft.base_dir=/x", "++tag=_a", "+method.hard_max=3"]


def test_a_schema_key_missing_from_the_yaml_is_overridable_without_plus():
    """Every schema field can be set as key=value, although the YAML lists only some (e.g.
    schedule.pool_seed): Hydra's 'Could not override ... use +key' used to end such a run."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from experiments.config import validate

    def flat(d, p=""):
        return {k2 for k, v in d.items() for k2 in ({p + k} | (flat(v, p + k + ".") if isinstance(v, dict) else set()))}

    keys, _ = cli._schema_keys()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        yaml_keys = flat(OmegaConf.to_container(compose("config", overrides=["sft.base_dir=/x"]), resolve=False))
        base = validate(compose("config", overrides=["sft.base_dir=/x"]))

        def get(cfg, key):
            node, name = key.split(".")
            return getattr(getattr(cfg, node), name)

        unlisted = sorted(k for k in keys - yaml_keys if k.count(".") == 1 and not k.startswith(("task.", "model."))
                          and type(get(base, k)) is int)
        assert unlisted, "every schema key is in the YAML: nothing to check"
        key = unlisted[0]
        with pytest.raises(Exception, match="Could not override"):
            compose("config", overrides=[f"{key}=3", "sft.base_dir=/x"])
        cfg = validate(compose("config", overrides=cli.check_overrides([f"{key}=3", "sft.base_dir=/x"])))
    assert get(cfg, key) == 3 != get(base, key)


def _fake_finished_run(cwd: pathlib.Path) -> pathlib.Path:
    """A finished run's directory as Hydra and the runner leave it (contents are what matters)."""
    d = cwd / "runs" / "arith-ps_ada-s0"
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "config.yaml").write_text("steps: 150\n")
    (d / ".hydra" / "overrides.yaml").write_text("[]\n")
    (d / "summary.json").write_text(json.dumps({"steps": 150, "config": {}}))
    (d / "metrics.jsonl").write_text('{"kind": "eval", "step": 150, "eval/pass_at_1": 0.5}\n')
    return d


def _snapshot(d: pathlib.Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_rejected_value_is_one_line_and_writes_nothing(tmp_path):
    d = _fake_finished_run(tmp_path)
    before = _snapshot(d)
    r = _train(tmp_path, "steps=-3")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1] == "error: RunConfig.steps must be >= 1, got -3", r.stderr
    assert "Traceback" not in r.stderr and "HYDRA_FULL_ERROR" not in r.stderr
    assert _snapshot(d) == before  # Hydra used to rewrite .hydra/config.yaml with steps: -3
    r = _train(tmp_path, "steps=-3", "tag=_new")
    assert r.returncode == 2 and not (tmp_path / "runs" / "arith-ps_ada_new-s0").exists()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["arith-ps_ada-s0"]


def test_a_different_configuration_is_refused_naming_the_keys(tmp_path):
    from hydra import compose, initialize_config_dir

    from experiments.config import validate

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = dataclasses.asdict(validate(compose("config", overrides=["sft.base_dir=/elsewhere"])))
    cfg["loss"]["clip_high"] = 0.5
    d = tmp_path / "runs" / "arith-ps_ada-s0"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg))
    before = _snapshot(d)
    r = _train(tmp_path)
    assert r.returncode == 2, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "holds a run with a different configuration (loss.clip_high: 0.5 (recorded) vs 0.28 (now))" in last
    assert "tag=" in last and "Traceback" not in r.stderr
    assert _snapshot(d) == before


def test_a_run_directory_in_use_is_refused_before_a_line_lands_in_its_job_log(tmp_path):
    """A second `experiments.train` on the directory of a run still training (another process holds its
    ``rundir.run_lock``) stops with the lock's one error line, and leaves that run's files as they were: no
    line appended to its train.log (the job log used to open before the runner took the lock), no .hydra/
    or config.json rewritten."""
    import signal

    d = tmp_path / "runs" / "arith-ps_ada-s0"
    d.mkdir(parents=True)
    (d / "train.log").write_text("[the running run's log]\n")
    code = ("import pathlib, time\nfrom prs.rl import rundir\n"
            f"with rundir.run_lock(pathlib.Path({str(d)!r})):\n    print('held', flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        before = _snapshot(d)
        r = _train(tmp_path)
        assert r.returncode == 2, r.stderr
        last = r.stderr.strip().splitlines()[-1]
        assert f"is in use: process {holder.pid} on " in last and "Traceback" not in r.stderr, r.stderr
        assert _snapshot(d) == before
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_a_field_the_record_lacks_compares_as_its_default(tmp_path):
    """A run recorded before ``rollout.row_parts`` existed ran with its default (1): resuming it with
    ``rollout.row_parts=2`` is a different configuration (it used to pass unnoticed)."""
    from hydra import compose, initialize_config_dir

    from experiments.config import validate

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = dataclasses.asdict(validate(compose("config", overrides=["sft.base_dir=/elsewhere"])))
    del cfg["rollout"]["row_parts"]
    d = tmp_path / "runs" / "arith-ps_ada-s0"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(cfg))
    r = _train(tmp_path, "rollout.row_parts=2")
    assert r.returncode == 2, r.stderr
    assert "(rollout.row_parts: 1 (recorded) vs 2 (now))" in r.stderr.strip().splitlines()[-1], r.stderr


@pytest.mark.slow
def test_a_sweep_runs_past_a_failed_job_and_reports_it(tmp_path):
    from prs.analysis import load_runs

    r = _train(tmp_path, "-m", "task=arith,repair", "++task.params.max_terms=3", "steps=2", *TINY)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "sweep: 1 job(s) failed" in r.stderr and "repair-ps_ada-s0" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    sweep = tmp_path / "runs" / "sweep"
    assert json.loads((sweep / "arith-ps_ada-s0" / "summary.json").read_text())["steps"] == 2
    runs = {x.name: x for x in load_runs(sweep)}
    assert runs["arith-ps_ada-s0"].status == "complete"
    assert runs["repair-ps_ada-s0"].status == "failed" and "max_terms" in runs["repair-ps_ada-s0"].describe()


def test_help_lists_the_training_groups_only_and_how_to_add_an_experiment():
    text = cli.help_text()
    assert "method   " + ", ".join(_METHODS) in text
    assert "+experiment=NAME" in text and "ablation_arith_cpu" in text
    assert "simulate" not in text and "learner" not in text


@pytest.mark.slow
def test_ctrl_c_stops_at_the_end_of_a_step_checkpoints_and_a_rerun_resumes(tmp_path):
    """One SIGINT while training: the step finishes, a checkpoint is written, one ``interrupted: ...``
    line, exit status 130, no traceback, no error.json; re-running resumes from that checkpoint, and
    one SIGINT stops the resumed run the same way. It used to print a 42-line traceback (fresh run)
    or be swallowed by jax's gc callback (resumed run)."""
    import signal
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    args = [sys.executable, "-m", "experiments.train", *TINY, "ckpt_every=1000", "eval.every=1000", "steps=200"]
    d = tmp_path / "runs" / "arith-ps_ada-s0"
    metrics = d / "metrics.jsonl"

    def steps_done():
        return sum('"kind": "train"' in x for x in metrics.read_text().splitlines()) if metrics.exists() else 0

    def interrupt_after(done_before):
        p = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while p.poll() is None and time.monotonic() < deadline and steps_done() <= done_before:
            time.sleep(0.2)
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=300)
        assert p.returncode == 130, (out, err)
        assert "Traceback" not in out + err, err
        done = steps_done()
        lines = [x for x in (out + err).splitlines() if "interrupted" in x.lower()]
        assert done_before < done < 200
        assert lines == [err.strip().splitlines()[-1]], err
        assert lines[0].startswith(f"interrupted: stopped after step {done}/200 (Ctrl-C); checkpoint in"), lines
        assert (d / "checkpoints" / str(done)).is_dir() and not (d / "error.json").exists()
        return done, out + err

    first, _ = interrupt_after(0)
    second, text = interrupt_after(first)
    assert f"resumed from checkpoint at step {first}" in text and "extending" not in text
