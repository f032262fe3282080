"""The nested configuration: ``RLConfig``'s parts, the config nodes that mirror them, and the earlier flat layout.

``data/config_flat_layout.json`` holds ``asdict(TrainCfg)`` as the flat layout composed it (before the
parts), for every method file, the sweeps' experiments and a command line of old override paths. The
nested layout must compose the same values for the same command (old paths written at their new place).
"""
import dataclasses
import json
import pathlib

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from experiments import cli
from experiments import config as C
from prs.core.prefix import PrefixConfig
from prs.rl.config import EvalConfig, LossConfig, OptimConfig, RLConfig, RolloutConfig, ScheduleConfig, nested_key
from prs.rl.rundir import config_diff

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
FLAT = json.loads((pathlib.Path(__file__).parents[1] / "data" / "config_flat_layout.json").read_text())


def _compose(overrides):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return C.validate(compose("config", overrides=cli.check_overrides(["sft.base_dir=/tmp/base", *overrides])))


def test_the_nested_layout_composes_what_the_flat_layout_composed():
    defaults = dataclasses.asdict(C.TrainCfg())
    for command, recorded in FLAT.items():
        moved = []
        for arg in command.split():
            key, value = arg.split("=", 1)
            moved.append(f"{C.MOVED.get(key, key)}={value}")
        now = dataclasses.asdict(_compose(moved))
        assert config_diff(C.upgrade(recorded), now, defaults=defaults, ignore=("compile_cache",)) == {}, command
        assert now["name"] == recorded["name"]  # run directories keep their names (tags read schedule.kind)
    assert len(FLAT) >= 20 and any("rft" in c for c in FLAT) and any("sampler." in c for c in FLAT)


def test_upgrade_moves_every_value_and_changes_none():
    rec = FLAT["method=ps_ada algo.clip_high=0.3 sampler.row_parts=2 eval.temperature=0.7 algo.micro_batches=2 "
               "method.reroll=append algo.pool_size=64 optim.lr=1e-3"]
    up = C.upgrade(rec)
    assert "sampler" not in up and "clip_high" not in up["algo"] and "reroll" not in up["method"]
    assert (up["loss"]["clip_high"], up["rollout"]["row_parts"], up["rollout"]["eval_temperature"],
            up["algo"]["micro_batches"], up["schedule"]["reroll"], up["schedule"]["pool_size"]) == (0.3, 2, 0.7, 2,
                                                                                                   "append", 64)

    def leaves(d):
        return sorted(repr(v) for x in d.values() for v in (leaves(x) if isinstance(x, dict) else [x]))

    assert leaves(up) == leaves(rec)
    assert C.upgrade(up) == up  # today's layout passes unchanged
    rl = C.rl_config(C.validate(OmegaConf.create(up)))
    assert (rl.loss.clip_high, rl.rollout.row_parts, rl.schedule.pool_size, rl.optim.lr) == (0.3, 2, 64, 1e-3)


@pytest.mark.parametrize("arg, new", [("algo.clip_high=0.3", "loss.clip_high"), ("sampler.row_parts=2", "rollout.row_parts"),
                                      ("method.schedule=next_visit", "schedule.kind"), ("method.lr_scale=2", "optim.lr_scale"),
                                      ("eval.temperature=0.5", "rollout.eval_temperature"),
                                      ("algo.pool_size=64", "schedule.pool_size"), ("sampler=default", "rollout")])
def test_an_old_override_path_is_one_line_naming_the_new_key(arg, new):
    with pytest.raises(cli.UsageError) as e:
        cli.check_overrides([arg])
    assert f"is now {new} " in str(e.value) and "\n" not in str(e.value)


def test_an_old_key_in_a_yaml_node_is_one_line_naming_the_new_key():
    with pytest.raises(ValueError, match=r"^config key algo.estimator is now loss.estimator \(") as e:
        C.validate(OmegaConf.create({"algo": {"estimator": "grpo"}}))
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="config key sampler.temperature is now rollout.temperature"):
        C.validate(OmegaConf.create({"sampler": {"temperature": 1.0}}))


@pytest.mark.parametrize("flat, where", [("lr", "optim.lr"), ("clip_high", "loss.clip_high"), ("temperature", "rollout.temperature"),
                                         ("rollout_engine", "rollout.engine"), ("eval_count", "eval.count"),
                                         ("schedule", "schedule.kind"), ("pool_size", "schedule.pool_size"),
                                         ("eval_temperature", "rollout.eval_temperature")])
def test_flat_rlconfig_keywords_are_refused_naming_the_part(flat, where):
    assert nested_key(flat) == where
    with pytest.raises(TypeError, match=rf"^RLConfig\({flat}=\.\.\.\): the field is {where}; write RLConfig\("):
        RLConfig(**{flat: 1})
    with pytest.raises(TypeError, match=where):
        dataclasses.replace(RLConfig(), **{flat: 1})


def test_nested_construction_and_cross_part_checks():
    rl = RLConfig(tasks_per_step=4, optim=OptimConfig(lr=1e-3), loss=LossConfig(clip_high=0.3),
                  rollout=RolloutConfig(row_parts=2), schedule=ScheduleConfig(kind="next_visit", pool_size=8),
                  eval=EvalConfig(count=8))
    assert (rl.optim.lr, rl.loss.clip_high, rl.rollout.row_parts, rl.schedule.kind, rl.eval.count) == \
        (1e-3, 0.3, 2, "next_visit", 8)
    with pytest.raises(ValueError, match="pool_size"):  # a pool is a multiple of the batch: spans two parts
        RLConfig(tasks_per_step=3, schedule=ScheduleConfig(kind="next_visit", pool_size=8))
    with pytest.raises(ValueError, match="rollout_correction"):  # an adjusted sampler needs the IS weights
        RLConfig(rollout=RolloutConfig(temperature=0.7))
    with pytest.raises(TypeError, match="RLConfig.loss must be a LossConfig"):
        RLConfig(loss=OptimConfig())
    assert RLConfig(rollout=RolloutConfig(engine="vllm")).loss.rollout_correction == "token_truncate"


def _base() -> dict:
    """What a method file may differ from: conf/config.yaml and the dataclass defaults, composed with no method."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=["sft.base_dir=/tmp/base", "~method"])
    return OmegaConf.to_container(cfg, resolve=False)


def test_method_files_state_only_what_differs_from_the_base():
    base = dataclasses.asdict(C.validate(OmegaConf.create({k: v for k, v in _base().items() if k not in ("hydra", "name")})))
    prefix_defaults = {f.name: f.default for f in dataclasses.fields(PrefixConfig)}
    files = sorted((CONF / "method").glob("*.yaml"))
    assert len(files) == 14
    for path in files:
        text = path.read_text()
        assert text.startswith("# @package _global_\n"), path.name
        for node, keys in yaml.safe_load(text).items():
            for key, value in keys.items():
                if (node, key) in (("method", "name"), ("method", "mode")):
                    continue
                was = prefix_defaults[key] if node == "method" else base[node][key]
                assert value != was, f"{path.name}: {node}.{key}={value!r} is the base's value"


def test_a_run_directory_recorded_in_the_flat_layout_resumes(tmp_path):
    """``config.json`` of the flat layout is upgraded before the resume check: the same run resumes, a
    changed value is still named (at its new key)."""
    from prs.rl import rundir

    defaults = dataclasses.asdict(C.TrainCfg())
    (tmp_path / "config.json").write_text(json.dumps(FLAT["method=rft"]))
    now = dataclasses.asdict(_compose(["method=rft"]))
    now["compile_cache"] = FLAT["method=rft"]["compile_cache"]
    rundir.check_config(tmp_path, now, defaults=defaults, upgrade=C.upgrade, write=False)
    with pytest.raises(rundir.RunDirError, match=r"algo.agg: 'seq-mean-token-sum' \(recorded\) vs '<absent>'"):
        rundir.check_config(tmp_path, now, defaults=defaults, write=False)
    changed = {**now, "loss": {**now["loss"], "clip_high": 0.5}}
    with pytest.raises(rundir.RunDirError, match=r"loss.clip_high: 0.28 \(recorded\) vs 0.5 \(now\)"):
        rundir.check_config(tmp_path, changed, defaults=defaults, upgrade=C.upgrade, write=False)
