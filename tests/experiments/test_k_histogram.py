"""Tests of ``experiments.k_histogram`` (the step-0 pass-count histogram of a run's warm start).

References: ``np.bincount`` by hand on a fixed k vector, and the trainer's own step-0 metrics
(``pass_rate`` of ``Trainer.collect`` from the same warm start and seed): the tool's first drawn step
must be exactly the run's first step.
"""
import json

import numpy as np
import pytest

from experiments import k_histogram as kh

TINY = ["task=arith_chain_late", "task.params.min_terms=3", "task.params.max_terms=4", "sft.steps=20",
        "sft.batch=16", "model.overrides.d_model=32", "model.overrides.n_layers=1", "model.overrides.head_dim=8",
        "model.overrides.d_ff=64", "algo.tasks_per_step=4", "eval.count=8", "eval.samples=1", "method=baseline"]


def test_histogram_counts_and_shares():
    k = np.array([0, 1, 1, 2, 8, 3, 1, 0])
    h = kh.histogram(k, 8)
    assert h["counts"] == [2, 3, 1, 1, 0, 0, 0, 0, 1] and h["groups"] == 8
    assert h["share_k1_k2"] == pytest.approx(4 / 8) and h["share_mixed"] == pytest.approx(5 / 8)
    assert h["pass_rate"] == pytest.approx(16 / 64)
    with pytest.raises(ValueError, match=r"k must be"):
        kh.histogram(np.array([9]), 8)


@pytest.mark.slow
def test_tool_matches_the_runs_first_step(tmp_path):
    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build
    from prs.rl.runner import base_params
    from prs.rl.trainer import Trainer

    ov = [*TINY, f"sft.base_dir={tmp_path / 'base'}"]
    rep = kh.main(["--problems", "6", "--out", str(tmp_path / "h0.6"), *ov])  # a dot in the name is kept
    h = rep["histogram"]
    assert h["groups"] == 6 and sum(h["counts"]) == 6 and len(h["counts"]) == 9
    assert len(rep["step_pass_rates"]) == 2  # ceil(6 / 4) drawn steps
    assert json.loads((tmp_path / "h0.6.json").read_text())["histogram"] == h
    assert "share of k in {1, 2}" in (tmp_path / "h0.6.md").read_text()
    # the run's step 0, from the cached warm start the tool built (same key as experiments.train)
    with initialize_config_dir(config_dir=str(kh.pathlib.Path(kh.__file__).resolve().parent.parent / "conf"),
                               version_base=None):
        cfg = validate(compose("config", overrides=ov))
    task, model_cfg, rl, prefix, run_cfg = build(cfg)
    params = base_params(task, model_cfg, run_cfg, tmp_path / "base", log=lambda *a: None)
    assert len(list((tmp_path / "base").glob("base-*"))) == 1  # reused, not rebuilt
    tr = Trainer(task, model_cfg, rl, prefix, seed=run_cfg.seed)
    m = tr.collect(tr.init_state(params)).metrics  # the step's sampling, without compiling the update
    assert rep["step_pass_rates"][0] == pytest.approx(m["pass_rate"])
    assert rep["eval_pass_at_1"] == pytest.approx(tr.evaluate(params, 0)["eval/pass_at_1"])


def test_task_metrics_are_averaged_over_calls_and_shown():
    calls = [{"mech/recovery_rate": 0.25, "mech/clean_pass_rate": 1.0, "mech/note": "x"},
             {"mech/recovery_rate": None, "mech/clean_pass_rate": 0.5},
             {"mech/recovery_rate": 0.75, "mech/clean_pass_rate": 0.0}]
    got = kh._mean_metrics(calls)                                   # None and non-numbers skipped
    assert got == {"mech/clean_pass_rate": pytest.approx(0.5), "mech/recovery_rate": pytest.approx(0.5)}
    rep = {"name": "r", "overrides": [], "histogram": kh.histogram(np.array([7, 6, 8]), 8), "eval_episodes": 4,
           "eval_pass_at_1": 0.5, "gen_tokens_per_rollout": 6.0, "time_sample_s_per_call": 0.1, "tasks_per_call": 3,
           "time_eval_s": 1.0, "train_metrics": got, "eval_metrics": {"mech/recovery_rate": 0.4, "mech/x": None}}
    md = kh.markdown(rep)
    assert "training rollouts (mean over calls): clean_pass_rate 0.500, recovery_rate 0.500" in md
    assert "held-out eval: recovery_rate 0.400, x n/a" in md
