"""``prs.tasks.agent_env``: the base the repair-style environments share.

The problems, prompts and demonstrations of both environments equal the output recorded from the
code before the base existed (each environment a module of its own); the shared config checks
name the config class; an ``AgentEnv`` answers what ``AgentRollouts`` reads from its ``environment``.
"""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest

from prs.tasks import agent_env, repair, trap
from prs.tasks.registry import make_task

# sha256[:16] of (problem arrays), (prompt tokens, lengths), (demonstration tokens, loss mask) for
# train_problems(seed=3, step=1, count=64) and demonstrations(seed=11), default configs, recorded
# with the code at commit 47fe832
RECORDED = {"repair": ("d6c94b874ceb4fd6", "c31dfe82f2c1da18", "e89124204cb81f12"),
            "trap": ("3e5446f404cb8cfd", "76e356fe10a06b67", "4460659f1644ce44")}


def _sha(*arrays) -> str:
    d = hashlib.sha256()
    for x in arrays:
        d.update(np.ascontiguousarray(np.asarray(x)).tobytes())
    return d.hexdigest()[:16]


@pytest.mark.parametrize("name", ["repair", "trap"])
def test_problems_prompts_and_demonstrations_equal_the_recorded_output(name):
    task = make_task(name)
    problems = task.train_problems(seed=3, step=1, count=64)
    tokens, mask = task.demonstrations(problems, seed=11)
    assert tokens.shape == (64, task.cfg.episode_width) == (64, 86)
    assert (_sha(*problems), _sha(*task.prompts(problems)), _sha(tokens, mask)) == RECORDED[name]


@pytest.mark.parametrize("cfg_cls, kw, match", [
    (repair.RepairConfig, dict(n_lines=0), r"RepairConfig.n_lines must be in \[1, 10\], got 0"),
    (trap.TrapConfig, dict(n_lines=1), r"TrapConfig.n_lines must be in \[2, 10\], got 1"),
    (repair.RepairConfig, dict(max_turns=1), "RepairConfig.max_turns must be >= 2, got 1"),
    (trap.TrapConfig, dict(reward="pass"), "TrapConfig.reward='pass'; choose 'binary' or 'fraction'"),
    (repair.RepairConfig, dict(replay="cache"), "RepairConfig.replay='cache'; choose 'replay' or 'regenerate'"),
    (repair.RepairConfig, dict(demo_undo_rate=1.5), r"RepairConfig.demo_undo_rate must be in \[0, 1\], got 1.5"),
    (trap.TrapConfig, dict(demo_root_cause_share=-0.1), r"TrapConfig.demo_root_cause_share must be in \[0, 1\]"),
    (repair.RepairConfig, dict(report_max=0), "RepairConfig.report_max must be >= 1, got 0"),
    (trap.TrapConfig, dict(root_lines=6), r"TrapConfig.root_lines must be in \[1, n_lines - 1 = 5\], got 6"),
])
def test_config_checks_name_the_config_and_the_field(cfg_cls, kw, match):
    with pytest.raises(ValueError, match=match):
        cfg_cls(**kw)


def test_widths_and_config_fields_are_the_environments_own():
    r, t = repair.RepairConfig(n_lines=4, max_turns=3, report_max=1), trap.TrapConfig(n_lines=5, root_lines=3)
    assert (r.prompt_width, r.max_obs_tokens, r.episode_width) == (6, 5, 6 + 3 * (4 + 5))
    assert (t.prompt_width, t.max_obs_tokens, t.episode_width) == (7, 13, 7 + 6 * (4 + 13))
    assert [f.name for f in dataclasses.fields(r)][:3] == ["n_lines", "min_bugs", "max_bugs"]  # no base fields
    assert repr(make_task("repair", n_lines=4)).startswith("RepairTask(cfg=RepairConfig(n_lines=4, min_bugs=1,")


@pytest.mark.parametrize("module", [repair, trap])
def test_an_environment_object_answers_what_the_rollouts_read(module):
    env = module.ENVIRONMENT
    assert isinstance(env, agent_env.AgentEnv) and env.name == module.__name__
    for attr in ("prompts", "reset", "execute", "verify", "PAD", "EOS", "EOT", "MAX_ACTION_TOKENS"):
        assert getattr(env, attr) is getattr(module, attr)
    assert env.TOKENS == module.TOKENS and env.EVAL_SEED == module.EVAL_SEED
    task = make_task(module.__name__.rsplit(".", 1)[1])
    assert task.environment is env and task.vocab_size == len(module.TOKENS)
