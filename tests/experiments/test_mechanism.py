"""Tests of ``experiments.mechanism``'s run rebuild: the teacher-forced report must load the warm start a
run trained from, so it rebuilds the run's task and ``sft`` settings from the run's ``config.json``."""
from __future__ import annotations

import json

from experiments.mechanism import _build, run_overrides


def test_run_overrides_rebuild_every_task_parameter_and_sft_field():
    # a config.json as experiments.train writes it (the fields the warm start's cache key depends on)
    cfg = {"task": {"name": "arith_deep",
                    "params": {"easy_steps": 12, "demo_error_rate": 0.05, "demo_hard_error_rate": 0.55,
                               "warm_start_min_terms": 3, "oracle_max_k": 2, "fixed_cut": False,
                               "warm_start_ramp": 50}},
           "sft": {"steps": 800, "batch": 64, "lr": 0.003, "seed": 0, "until_loss": 0.35, "max_cycles": 3,
                   "attempts": 1, "base_dir": "/tmp/base"}}
    task, _, _, _, run = _build(run_overrides(json.loads(json.dumps(cfg))))
    assert task.cfg.demo_hard_error_rate == 0.55 and task.warm_start_ramp == 50 and task.oracle_max_k == 2
    assert (run.sft_until_loss, run.sft_max_cycles, run.sft_attempts, str(run.base_dir)) == (0.35, 3, 1, "/tmp/base")
    cfg["sft"]["until_loss"] = None
    _, _, _, _, run = _build(run_overrides(cfg))
    assert run.sft_until_loss is None


def test_never_retry_floor_runs_the_environment_and_meets_the_closed_form():
    from experiments.mechanism import never_retry_rate
    from prs.tasks.flaky import FlakyConfig

    for g in (0.05, 0.3):
        cfg = FlakyConfig(easy_steps=4, crash_rate=0.0, error_rate=g, max_retries=3)
        n = 2000
        p = (1 - g) ** 4
        assert abs(never_retry_rate(cfg, episodes=n) - p) < 4 * (p * (1 - p) / n) ** 0.5
    # no errors: a policy that writes every value right always passes
    assert never_retry_rate(FlakyConfig(easy_steps=4, crash_rate=0.0), episodes=50) == 1.0
