"""Structured (dataclass) schema of the training config in ``conf/``.

``experiments.train`` merges the composed YAML into ``TrainCfg``: a key that the schema does not
know is an error, not a silent default. The nodes that configure library objects are *derived* from
the library's dataclasses (``experiments.schema.node``): a field, its type and its default are
declared once, in ``RLConfig``'s parts / ``PrefixConfig`` / ``RunConfig``. The nodes mirror
``RLConfig`` one to one: ``algo`` holds its own fields (the step's shape), and ``rollout``, ``optim``,
``loss``, ``schedule``, ``eval`` hold its parts (``eval`` also ``RunConfig.eval_every``); ``method``
is the controller (``PrefixConfig``). ``rl_config`` builds the ``RLConfig``. A key of the earlier flat
layout (``algo.lr``, ``sampler.temperature``, ``method.schedule``) is refused with one line naming its
new place (``moved_key``); ``upgrade`` rewrites a recorded run's config of that layout (for replay
and resume). This module and ``experiments/*.py`` are the only places where a config becomes
objects; ``prs`` never imports Hydra.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import field
from typing import Any, Optional

from omegaconf import OmegaConf

from experiments.schema import node, rest_of, to_kwargs
from prs.core.prefix import PrefixConfig
from prs.rewards.custom import RewardConfig
from prs.rl.config import PARTS, RLConfig
from prs.rl.runner import RunConfig

METHOD_PREFIX = [f.name for f in dataclasses.fields(PrefixConfig) if f.name != "n"]  # n = algo.group_size
ALGO = rest_of(RLConfig, PARTS)  # RLConfig's own scalar fields
SFT = {"steps": "sft_steps", "batch": "sft_batch", "lr": "sft_lr", "seed": "sft_seed", "until_loss": "sft_until_loss",
       "max_cycles": "sft_max_cycles", "attempts": "sft_attempts", "base_dir": "base_dir"}
LOGGING = ["wandb_mode", "wandb_project", "progress", "save_hf_every"]


def _all(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


MethodCfg = node("MethodCfg", (PrefixConfig, METHOD_PREFIX), extra={"name": (str, "ps_ada")})
AlgoCfg = node("AlgoCfg", (RLConfig, ALGO))
RolloutCfg = node("RolloutCfg", (PARTS["rollout"], _all(PARTS["rollout"])))
OptimCfg = node("OptimCfg", (PARTS["optim"], _all(PARTS["optim"])))
LossCfg = node("LossCfg", (PARTS["loss"], _all(PARTS["loss"])))
ScheduleCfg = node("ScheduleCfg", (PARTS["schedule"], _all(PARTS["schedule"])))
EvalCfg = node("EvalCfg", (RunConfig, {"every": "eval_every"}), (PARTS["eval"], _all(PARTS["eval"])))
SftCfg = node("SftCfg", (RunConfig, SFT))
LoggingCfg = node("LoggingCfg", (RunConfig, LOGGING))
RewardCfg = node("RewardCfg", (RewardConfig, _all(RewardConfig)))  # a user's reward function (prs.rewards.custom)

# The earlier flat layout's keys -> their place now (a recorded run's config, an old command line).
MOVED = {
    **{f"algo.{k}": f"loss.{k}" for k in _all(PARTS["loss"]) if k not in ("algorithm", "rft_cap")},
    **{f"method.{k}": f"loss.{k}" for k in ("algorithm", "rft_cap")},
    **{f"method.{k}": f"schedule.{k}" for k in ("reroll", "reroll_fallback", "reroll_budget", "cut_spread", "sources",
                                                "control", "extra_share")},
    "method.schedule": "schedule.kind", "method.lr_scale": "optim.lr_scale",
    "algo.pool_size": "schedule.pool_size", "algo.pool_seed": "schedule.pool_seed",
    "algo.sampling_dtype": "rollout.sampling_dtype", "eval.temperature": "rollout.eval_temperature",
    **{f"sampler.{k}": f"rollout.{k}" for k in ("temperature", "top_k", "top_p", "max_new_tokens", "row_chunk",
                                                "row_parts", "attend_buckets", "continuous_slots",
                                                "reroll_group_buckets", "prefill_group")},
}


def moved_key(key: str) -> str | None:
    """The new place of a key of the earlier layout (``"algo.clip_high"`` -> ``"loss.clip_high"``), else None."""
    if key in MOVED:
        return MOVED[key]
    return "rollout" if key == "sampler" else None


def upgrade(config: dict) -> dict:
    """A recorded config of the earlier layout (``summary.json`` / ``config.json``) in today's layout;
    a config already in today's layout comes back unchanged. Values are moved, never changed."""
    out = copy.deepcopy(dict(config))
    for old, new in MOVED.items():
        top, key = old.split(".")
        if isinstance(out.get(top), dict) and key in out[top]:
            ntop, nkey = new.split(".")
            out.setdefault(ntop, {})[nkey] = out[top].pop(key)
    if isinstance(out.get("sampler"), dict) and not out["sampler"]:
        del out["sampler"]
    return out


def _first_moved(plain: dict) -> tuple[str, str] | None:
    for old, new in MOVED.items():
        top, key = old.split(".")
        if isinstance(plain.get(top), dict) and key in plain[top]:
            return old, new
    if "sampler" in plain:
        return "sampler", "rollout"
    return None


@dataclasses.dataclass
class TaskCfg:
    """A task from ``prs.tasks.registry``; ``params`` go to its factory (unknown ones are errors there)."""

    name: str = "arith"
    params: dict[str, Any] = field(default_factory=dict)


@dataclasses.dataclass
class ModelCfg:
    """``prs.models.qwen3.ModelConfig.preset(preset, **overrides)``; ``vocab_size`` defaults to the task's."""

    preset: str = "tiny"
    overrides: dict[str, Any] = field(default_factory=dict)
    checkpoint: Optional[str] = None


DEFAULT_COMPILE_CACHE = "~/.cache/prs/jax"  # experiments.train's persistent compilation cache (null: off)


@dataclasses.dataclass
class MeshCfg:
    """``prs.parallel.sharding.make_mesh(data=, fsdp=, tensor=, axis_types=)``; ``name: single`` =
    no mesh. ``axis_types``: ``explicit`` (JAX's sharding in types) or ``auto`` (the compiler
    propagates). ``devices``, ``device_gib`` and ``platform`` (``gpu``, the default when empty, or
    ``tpu``: whether ``XLA_PYTHON_CLIENT_MEM_FRACTION`` applies) describe the target for
    ``python -m experiments.plan`` only."""

    name: str = "single"
    data: int = 1
    fsdp: int = 1
    tensor: int = 1
    axis_types: str = "explicit"
    devices: int = 0
    device_gib: float = 0.0
    platform: str = ""


TrainCfg = node(
    "TrainCfg", (RunConfig, ["seed", "steps", "ckpt_every", "on_nonfinite"]),
    extra={"name": (str, "run"), "tag": (str, ""), "compile_cache": (Optional[str], DEFAULT_COMPILE_CACHE),
           **{key: (cls, field(default_factory=cls)) for key, cls in [
               ("method", MethodCfg), ("task", TaskCfg), ("model", ModelCfg), ("algo", AlgoCfg),
               ("rollout", RolloutCfg), ("optim", OptimCfg), ("loss", LossCfg), ("schedule", ScheduleCfg),
               ("eval", EvalCfg), ("sft", SftCfg), ("logging", LoggingCfg), ("mesh", MeshCfg),
               ("reward", RewardCfg)]}})


def validate(cfg) -> TrainCfg:
    """Merges a composed config into the schema (unknown keys and wrong types raise; a key of the
    earlier layout raises one line naming its new place) -> TrainCfg."""
    schema = OmegaConf.structured(TrainCfg)
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    moved = _first_moved(plain)
    if moved is not None:
        raise ValueError(f"config key {moved[0]} is now {moved[1]} (the config's nodes mirror "
                         "prs.rl.config.RLConfig)")
    merged = OmegaConf.merge(schema, plain)
    return OmegaConf.to_object(merged)


def rl_config(cfg: TrainCfg) -> RLConfig:
    """The ``RLConfig`` of a validated config: ``algo`` -> its own fields, each part's node -> the part."""
    parts = {name: part(**to_kwargs(getattr(cfg, name), part)) for name, part in PARTS.items()}
    return RLConfig(**to_kwargs(cfg.algo, RLConfig), **parts)
