"""experiments/mathds_sweep.sh's argument handling, without training: ``DRY=1`` prints the
``experiments.train`` command lines the sweep would run (seed-major, one per arm and seed, a complete run
skipped), bad settings are one ``error:`` line with exit status 2, and every default arm's overrides compose
into the schema (Hydra's compose API, no training)."""
from __future__ import annotations

import os
import pathlib
import shlex
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "experiments" / "mathds_sweep.sh"
ARMS = ["baseline", "ps_ada", "dynamic_sampling", "selective", "screen", "predicted", "ps_ds", "oracle"]
ARM_OVERRIDES = {"baseline": ["method=baseline"], "ps_ada": ["method=ps_ada"],
                 "dynamic_sampling": ["method=baseline", "schedule.select=dynamic_sampling"],
                 "selective": ["method=baseline", "schedule.select=selective"],
                 "screen": ["method=baseline", "schedule.select=screen"],
                 "predicted": ["method=baseline", "schedule.select=predicted"],
                 "ps_ds": ["method=ps_ada", "schedule.select=dynamic_sampling"],
                 "oracle": ["method=baseline", "schedule.select=oracle"]}


def sweep(out, *args, **env):
    e = {k: v for k, v in os.environ.items() if k not in ("W", "SEEDS", "ARMS", "STEPS", "EXTRA", "OUT", "DRY")}
    e.update({"DRY": "1", "SHA": "0123456789abcdef", "PY": "py", **env})
    return subprocess.run(["bash", str(SCRIPT), *args, str(out)], capture_output=True, text=True, env=e, cwd=ROOT,
                          timeout=60)


def test_dry_run_prints_the_train_commands_seed_major(tmp_path):
    r = sweep(tmp_path, SEEDS="0 1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 * len(ARMS)
    names = [f"mathds-w0-{a}-s{s}" for s in (0, 1) for a in ARMS]               # seed-major
    for line, name in zip(lines, names):
        arm = name.split("-")[2]
        assert line == (f"PYTHONPATH={tmp_path}/code-0123456789 py -m experiments.train +experiment=mathds "
                        f"sft.seed=0 seed={name[-1]} sft.base_dir={tmp_path}/base {' '.join(ARM_OVERRIDES[arm])} "
                        f"logging.progress=false logging.wandb_mode=disabled name={name} "
                        f"hydra.run.dir={tmp_path}/runs/{name}")
    assert not (tmp_path / "runs").exists() and not any(tmp_path.iterdir())   # DRY makes no worktree


def test_dry_run_warm_start_steps_extra_arms_and_skip(tmp_path):
    done = tmp_path / "runs" / "mathds-w1-base-s3"
    done.mkdir(parents=True)
    (done / "summary.json").write_text("{}")
    r = sweep(tmp_path, W="1", SEEDS="3 4", STEPS="7", EXTRA="eval.count=8 sft.steps=2",
              ARMS="base=method=baseline\nds=method=baseline,schedule.select=dynamic_sampling")
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == "skip mathds-w1-base-s3"
    lines = r.stdout.splitlines()
    assert [shlex.split(x)[-1].rsplit("/", 1)[-1] for x in lines] == ["mathds-w1-ds-s3", "mathds-w1-base-s4",
                                                                       "mathds-w1-ds-s4"]
    assert "sft.seed=1 seed=3 " in lines[0]
    assert "schedule.select=dynamic_sampling steps=7 eval.count=8 sft.steps=2 logging.progress=false" in lines[0]


@pytest.mark.parametrize("env, msg", [({"W": "a"}, "W=a"), ({"SEEDS": "0 x"}, "SEEDS: 'x'"), ({"STEPS": "0"}, "STEPS=0"),
                                      ({"ARMS": "baseline"}, "ARMS: 'baseline'")])
def test_bad_settings_are_one_error_line(tmp_path, env, msg):
    r = sweep(tmp_path, **env)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: ") and msg in r.stderr


def test_unknown_option_is_refused(tmp_path):
    r = sweep(tmp_path, "--colect")
    assert r.returncode == 2 and "unknown option --colect" in r.stderr


def test_every_printed_command_composes_and_validates(tmp_path):
    """The overrides of each printed line (seed 0) compose and pass the schema (``experiments.config.validate``),
    with the arm's selector and the run's seeds in place."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from experiments import cli
    from experiments import config as C

    r = sweep(tmp_path, W="1", SEEDS="2")
    assert r.returncode == 0, r.stderr
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        for line, arm in zip(r.stdout.splitlines(), ARMS):
            words = shlex.split(line)
            ov = words[words.index("experiments.train") + 1:-1]                  # without hydra.run.dir
            cfg = compose("config", overrides=cli.check_overrides(ov))
            C.validate(cfg)
            c = OmegaConf.to_container(cfg, resolve=True)
            assert c["seed"] == 2 and c["sft"]["seed"] == 1 and c["task"]["name"] == "mathds", arm
            want = dict(o.split("=") for o in ARM_OVERRIDES[arm])
            assert c["schedule"]["select"] == want.get("schedule.select", "uniform"), arm
            assert c["method"]["name"] == want["method"], arm


TINY = ("model.overrides.d_model=32 model.overrides.n_layers=1 model.overrides.n_heads=2 model.overrides.n_kv_heads=1 "
        "model.overrides.head_dim=16 model.overrides.d_ff=64 sft.steps=2 eval.count=12 eval.every=1 "
        "task.params.eval_extrapolate=9")


@pytest.mark.slow
def test_end_to_end_two_steps_then_collect_and_read(tmp_path):
    """The sweep's printed commands for the baseline and the oracle (a tiny model, 2 steps; ~1 min) run, their
    records collect into a committed folder and load: the oracle's estimation rollouts are in the ledger's
    side column (C·R = 4B · 16), its ``time_oracle`` is not in its wall-clock."""
    import json
    import sys

    from experiments.studies import mathds

    r = sweep(tmp_path, SEEDS="0", STEPS="2", EXTRA=TINY, ARMS="baseline=method=baseline\n"
              "oracle=method=baseline,schedule.select=oracle", PY=sys.executable)
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines():
        words = shlex.split(line)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.run(words[1:], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-2000:]
    committed = tmp_path / "committed"
    (tmp_path / "p.md").write_text("x\n")
    assert mathds.main(["--collect", str(tmp_path / "runs"), "--runs", str(committed), "--page", str(tmp_path / "p.md"),
                        "--figures", str(tmp_path), "--print", "--boot", "50"]) == 0
    data = mathds.load(committed)
    assert sorted(data) == ["baseline", "oracle"] and sorted(data["oracle"]) == [0]
    led = {x["arm"]: x for x in mathds.ledger(data)}
    assert led["oracle"]["oracle_rollouts"] == 4 * 16 * 16 and led["baseline"]["oracle_rollouts"] is None
    recs = [json.loads(x) for x in (tmp_path / "runs" / "mathds-w0-oracle-s0" / "metrics.jsonl").read_text().splitlines()]
    train = [x for x in recs if x["kind"] == "train"]
    assert len(train) == 2 and all(x["time_oracle"] > 0 for x in train)
    wall = sum(mathds.step_wall(x) for x in train)          # 2 steps: the clip at 5x the median never bites
    assert data["oracle"][0]["cum_wall"][-1] == pytest.approx(wall)
    assert data["oracle"][0]["cum_tokens"][-1] == sum(x["tokens_generated"] for x in train)
    assert [int(s) for s in data["oracle"][0]["steps"]] == [0, 1, 2]


def test_only_keeps_the_named_arms_in_their_order(tmp_path):
    r = sweep(tmp_path, SEEDS="0", ONLY="oracle ps_ds")
    assert r.returncode == 0, r.stderr
    assert [shlex.split(x)[-1].rsplit("/", 1)[-1] for x in r.stdout.splitlines()] == ["mathds-w0-ps_ds-s0",
                                                                                    "mathds-w0-oracle-s0"]
    r = sweep(tmp_path, ONLY="ps_ada orcale")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: ONLY: 'orcale' is not an arm; allowed: baseline ps_ada ")


QUEUE = ROOT / "experiments" / "mathds_queue.sh"


def queue(tmp_path, *args):
    e = {k: v for k, v in os.environ.items() if k not in ("OUT", "RESULTS")}
    e.update({"DRY": "1", "OUT": str(tmp_path / "out"), "RESULTS": str(tmp_path / "committed")})
    return subprocess.run(["bash", str(QUEUE), *args], capture_output=True, text=True, env=e, cwd=ROOT, timeout=60)


def test_queue_plans_the_missing_runs_seed_major_and_skips_complete_and_running_ones(tmp_path):
    """experiments/mathds_queue.sh (DRY): the plan is every (W, arm, seed) seed-major over the sweep's own
    arms; a run complete in OUT or committed is skipped, and so is one whose lock names a live training
    process; given items keep their order."""
    import signal

    r = queue(tmp_path)
    assert r.returncode == 0, r.stderr
    plan = [x.split()[1] for x in r.stdout.splitlines()]
    assert not (tmp_path / "out").exists()                                    # DRY writes nothing
    assert plan == [f"mathds-w{w}-{a}-s{s}" for s in range(8) for a in ARMS for w in (0, 1)]
    for root in (tmp_path / "out" / "runs", tmp_path / "committed"):
        d = root / ("mathds-w0-baseline-s0" if "out" in str(root) else "mathds-w1-baseline-s0")
        d.mkdir(parents=True)
        (d / "summary.json").write_text("{}")
    busy = subprocess.Popen(["bash", "-c", "sleep 60; true", "experiments.train"])   # $0 in its command line
    try:
        lock = tmp_path / "out" / "runs" / "mathds-w0-ps_ada-s0" / ".run.lock"
        lock.parent.mkdir(parents=True)
        lock.write_text(f"process {busy.pid} on host\n")
        stale = tmp_path / "out" / "runs" / "mathds-w1-ps_ada-s0" / ".run.lock"   # a finished holder: not skipped
        stale.parent.mkdir(parents=True)
        stale.write_text("process 999999999 on host\n")
        out = queue(tmp_path).stdout.splitlines()
    finally:
        busy.send_signal(signal.SIGKILL)
        busy.wait()
    assert out[:4] == ["skip mathds-w0-baseline-s0 (complete)", "skip mathds-w1-baseline-s0 (complete)",
                       f"skip mathds-w0-ps_ada-s0 (process {busy.pid} is training it)", "launch mathds-w1-ps_ada-s0"]
    r = queue(tmp_path, "1:oracle:5", "0:ps_ds:6")
    assert r.stdout.splitlines() == ["launch mathds-w1-oracle-s5", "launch mathds-w0-ps_ds-s6"]


@pytest.mark.parametrize("args, msg", [(["1:orcale:5"], "item '1:orcale:5' is not W:ARM:SEED"),
                                       (["0:ps_ada"], "item '0:ps_ada' is not W:ARM:SEED"),
                                       (["--lanes", "0"], "--lanes 0: a positive integer"),
                                       (["--window", "x"], "--window x: minutes"),
                                       (["--wait"], "unknown option --wait")])
def test_queue_bad_arguments_are_one_error_line(tmp_path, args, msg):
    r = queue(tmp_path, *args)
    assert r.returncode == 2 and r.stdout == "" and r.stderr.count("\n") == 1 and msg in r.stderr


def test_queue_arms_are_the_sweeps_default_arms(tmp_path):
    r = sweep(tmp_path, SEEDS="0")
    sweep_arms = [shlex.split(x)[-1].rsplit("/", 1)[-1].split("-")[2] for x in r.stdout.splitlines()]
    text = QUEUE.read_text()
    assert f"ARMS=({' '.join(sweep_arms)})" in text and sweep_arms == ARMS
