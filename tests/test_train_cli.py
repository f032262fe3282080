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

ROOT = pathlib.Path(__file__).resolve().parent.parent
TINY = ["eval.every=1", "eval.count=8", "ckpt_every=1", "sft.steps=0", "algo.tasks_per_step=2",
        "logging.wandb_mode=disabled", "logging.progress=false", "model.overrides.d_model=32",
        "model.overrides.head_dim=8", "model.overrides.d_ff=64"]


def _train(cwd, *args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, "-m", "experiments.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("argv, match", [
    (["metod=baseline"], r"unknown key 'metod'; did you mean 'method'\?"),
    (["+metod=baseline"], r"unknown key 'metod'; did you mean 'method'\?"),
    (["algo.clip_hihg=0.3"], r"did you mean 'algo.clip_high'\?"),
    (["method=nope"], r"method=nope: no such method; choose one of baseline, ps_ada, ps_ada_hard, ps_fix"),
    (["-m", "method=baseline,nope"], r"method=nope: no such method"),
    (["experiment=ablation_arith_cpu"], r"write \+experiment=ablation_arith_cpu"),
])
def test_typos_are_one_clear_error(argv, match):
    with pytest.raises(cli.UsageError, match=match):
        cli.check_overrides(argv)


def test_valid_overrides_pass_and_schema_keys_become_force_adds():
    argv = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "method=baseline,ps_ada", "seed=range(3)",
            "+experiment=ablation_arith_cpu", "task.params.max_terms=3", "model.overrides.d_model=32",
            "~algo.kl_coef", "--cfg", "job", "sft.base_dir=/x", "tag=_a", "+method.hard_max=3"]
    assert cli.check_overrides(argv) == [
        "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "method=baseline,ps_ada", "++seed=range(3)",
        "+experiment=ablation_arith_cpu", "++task.params.max_terms=3", "++model.overrides.d_model=32",
        "~algo.kl_coef", "--cfg", "job", "++sft.base_dir=/x", "++tag=_a", "+method.hard_max=3"]


def test_a_schema_key_missing_from_the_yaml_is_overridable_without_plus():
    """Every schema field can be set as key=value, although the YAML lists only some (e.g.
    method.hard_max): Hydra's 'Could not override ... use +key' used to end such a run."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from experiments.config import validate

    def flat(d, p=""):
        return {k2 for k, v in d.items() for k2 in ({p + k} | (flat(v, p + k + ".") if isinstance(v, dict) else set()))}

    keys, _ = cli._schema_keys()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        yaml_keys = flat(OmegaConf.to_container(compose("config", overrides=["sft.base_dir=/x"]), resolve=False))
        unlisted = sorted(k for k in keys - yaml_keys if isinstance(
            getattr(validate(compose("config", overrides=["sft.base_dir=/x"])).method, k.split(".")[-1], None), int))
        assert unlisted, "every schema key is in the YAML: nothing to check"
        key = unlisted[0]
        with pytest.raises(Exception, match="Could not override"):
            compose("config", overrides=[f"{key}=3", "sft.base_dir=/x"])
        cfg = validate(compose("config", overrides=cli.check_overrides([f"{key}=3", "sft.base_dir=/x"])))
    assert getattr(cfg.method, key.split(".")[-1]) == 3
