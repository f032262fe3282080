"""Every ``python -m experiments.X`` command line answers a mistake as ``experiments.train`` does
(issue #45): one ``error:`` line on stderr, a "did you mean" where a near name exists, exit status 2, and
``--help`` / ``-h`` print help. Each entry point's ``main`` runs in-process with bad arguments; nothing
past the argument check runs."""
from __future__ import annotations

import importlib

import pytest

from experiments import cli

ARGPARSE = ["analyze", "compare_schedules", "coverage", "engines_paired", "k_histogram", "mechanism", "notebooks",
            "reproduce", "sim_grid", "trap_calibrate", "trap_summary"]


def _one_error_line(capsys, main, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: "), (e.value.code, captured.err)
    assert "Traceback" not in captured.err + captured.out
    return err[0]


@pytest.mark.parametrize("name", ARGPARSE)
def test_a_bad_option_is_one_line(name, capsys):
    mod = importlib.import_module(f"experiments.{name}")
    line = _one_error_line(capsys, mod.main, ["--no-such-option"])
    assert line.startswith(f"error: python -m experiments.{name}: ") and "--help" in line, line


def test_a_misspelt_option_gets_a_suggestion(tmp_path, capsys):
    from experiments import analyze

    line = _one_error_line(capsys, analyze.main, [str(tmp_path), "--windw", "3"])
    assert "unrecognized arguments: --windw 3; did you mean '--window'?" in line, line


@pytest.mark.parametrize("argv, match", [
    (["+experiment=grpo_ps_qwen3_4b_h200x9"], "no such experiment; choose one of "),
    (["+experiment=grpo_ps_qwen3_4b_h200x8", "loss.clip_hgih=1"], "did you mean 'loss.clip_high'?"),
    (["lr=1e-3"], "did you mean 'optim.lr'"),
    (["--devics", "3"], "did you mean '--devices'?"),
    (["--devices"], "--devices needs a value"),
])
def test_plan_mistakes_are_one_line(argv, match, capsys):
    from experiments import plan

    assert match in _one_error_line(capsys, plan.main, argv)


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_plan_help(flag, capsys):
    from experiments import plan

    assert plan.main([flag]) == 0
    out = capsys.readouterr().out
    assert "--device-gib" in out and "Config groups" in out and "+experiment=NAME" in out


def test_analyze_on_a_missing_directory_is_one_line(tmp_path, capsys):
    from experiments import analyze

    line = _one_error_line(capsys, analyze.main, [str(tmp_path / "nope")])
    assert "is not a directory" in line and "nope" in line, line


@pytest.mark.parametrize("argv, match", [
    (["swep=full"], "did you mean 'sweep'?"),
    (["seeds=3"], "did you mean 'sweep.seeds'?"),
    (["sweep=ful"], "no such sweep; choose one of controls, full, quick"),
])
def test_simulate_mistakes_are_one_line(argv, match, capsys):
    from experiments import simulate

    assert match in _one_error_line(capsys, simulate.main, argv)


@pytest.mark.parametrize("key, keys, want", [
    ("lr", {"optim.lr", "optim.b1", "seed"}, "did you mean 'optim.lr'? "),
    ("optim.lrr", {"optim.lr", "seed"}, "did you mean 'optim.lr'? "),
    ("clip_hgih", {"loss.clip_high", "loss.clip_low"}, "did you mean 'loss.clip_high'? "),
    ("zzz", {"optim.lr"}, ""),
])
def test_did_you_mean_suggests_full_dotted_keys(key, keys, want):
    assert cli.did_you_mean(key, keys) == want
