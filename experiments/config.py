"""Structured (dataclass) schema of the training config in ``conf/``.

``experiments.train`` merges the composed YAML into ``TrainCfg``: a key that the schema does not
know is an error, not a silent default. The nodes that configure library objects are *derived* from
the library's dataclasses (``experiments.schema.node``): a field, its type and its default are
declared once, in ``RLConfig`` / ``PrefixConfig`` / ``RunConfig``. ``algo`` takes every
``RLConfig`` field that no other node claims, so a new loss or loop option appears as ``algo.<name>``
without touching this file. This module and ``experiments/*.py`` are the only places where a config
becomes objects; ``prs`` never imports Hydra.
"""
from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Optional

from omegaconf import OmegaConf

from experiments.schema import node, rest_of
from prs.core.prefix import PrefixConfig
from prs.rl.runner import RunConfig
from prs.rl.trainer import RLConfig

# Which library field lives in which node (node key -> field where they differ).
METHOD_PREFIX = [f.name for f in dataclasses.fields(PrefixConfig) if f.name != "n"]  # n = algo.group_size
METHOD_RL = ["reroll", "reroll_fallback", "reroll_budget", "algorithm", "rft_cap", "schedule", "cut_spread", "sources",
             "control", "extra_share", "lr_scale"]
OPTIM = ["lr", "b1", "b2", "weight_decay", "grad_clip", "warmup_steps"]
SAMPLER = ["temperature", "top_k", "top_p", "max_new_tokens", "row_chunk", "row_parts", "attend_buckets",
           "continuous_slots", "reroll_group_buckets", "prefill_group"]
EVAL_RL = {"count": "eval_count", "samples": "eval_samples", "temperature": "eval_temperature"}
ROLLOUT = {"engine": "rollout_engine", "gpu_memory_utilization": "rollout_memory_utilization",
           "tensor_parallel_size": "rollout_tensor_parallel"}
ALGO = rest_of(RLConfig, METHOD_RL, OPTIM, SAMPLER, EVAL_RL.values(), ROLLOUT.values())
SFT = {"steps": "sft_steps", "batch": "sft_batch", "lr": "sft_lr", "seed": "sft_seed", "until_loss": "sft_until_loss",
       "max_cycles": "sft_max_cycles", "attempts": "sft_attempts", "base_dir": "base_dir"}
LOGGING = ["wandb_mode", "wandb_project", "progress"]

MethodCfg = node("MethodCfg", (PrefixConfig, METHOD_PREFIX), (RLConfig, METHOD_RL), extra={"name": (str, "ps_ada")})
OptimCfg = node("OptimCfg", (RLConfig, OPTIM))
SamplerCfg = node("SamplerCfg", (RLConfig, SAMPLER))
RolloutCfg = node("RolloutCfg", (RLConfig, ROLLOUT))
AlgoCfg = node("AlgoCfg", (RLConfig, ALGO))
EvalCfg = node("EvalCfg", (RunConfig, {"every": "eval_every"}), (RLConfig, EVAL_RL))
SftCfg = node("SftCfg", (RunConfig, SFT))
LoggingCfg = node("LoggingCfg", (RunConfig, LOGGING))


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
               ("method", MethodCfg), ("task", TaskCfg), ("model", ModelCfg), ("optim", OptimCfg),
               ("sampler", SamplerCfg), ("rollout", RolloutCfg), ("algo", AlgoCfg), ("eval", EvalCfg), ("sft", SftCfg),
               ("logging", LoggingCfg), ("mesh", MeshCfg)]}})


def validate(cfg) -> TrainCfg:
    """Merges a composed config into the schema (unknown keys and wrong types raise) -> TrainCfg."""
    schema = OmegaConf.structured(TrainCfg)
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    merged = OmegaConf.merge(schema, plain)
    return OmegaConf.to_object(merged)
