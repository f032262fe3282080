"""Structured (dataclass) schema of the training config in ``conf/``.

``experiments.train`` merges the composed YAML into ``TrainCfg``: a key that the schema does not
know is an error, not a silent default. This module and ``experiments/*.py`` are the only places
where a config becomes objects; ``prs`` never imports Hydra.
"""
from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Optional

from omegaconf import OmegaConf


@dataclasses.dataclass
class MethodCfg:
    """Ablation method. ``mode`` is the prefix controller's (baseline, ps_fix, ps_ada_hard, ps_ada)."""

    name: str = "ps_ada"
    mode: str = "ps_ada"
    target: float = 0.5
    rho_init: float = 0.5
    ema_decay: float = 0.8
    gain: float = 2.0
    rho_min: float = 0.05
    rho_max: float = 0.95
    hard_max: Optional[int] = None
    easy_min: Optional[int] = None
    reroll: str = "replace"
    reroll_fallback: bool = True
    algorithm: str = "grpo"
    rft_cap: int = 2


@dataclasses.dataclass
class TaskCfg:
    """A task from ``prs.tasks.registry``; ``params`` go to its factory (unknown ones are errors there)."""

    name: str = "arith"
    params: dict[str, Any] = field(default_factory=dict)


@dataclasses.dataclass
class ModelCfg:
    """``prs.model.ModelConfig.preset(preset, **overrides)``; ``vocab_size`` defaults to the task's."""

    preset: str = "tiny"
    overrides: dict[str, Any] = field(default_factory=dict)
    checkpoint: Optional[str] = None


@dataclasses.dataclass
class OptimCfg:
    lr: float = 3e-4
    b1: float = 0.9
    b2: float = 0.99
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    warmup_steps: int = 0


@dataclasses.dataclass
class SamplerCfg:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: Optional[int] = None


@dataclasses.dataclass
class AlgoCfg:
    """Advantage and loss settings; the defaults are the GRPO++ recipe."""

    tasks_per_step: int = 16
    group_size: int = 8
    estimator: str = "rloo"
    std_ddof: int = 1
    drop_no_contrast: bool = True
    clip_low: float = 0.2
    clip_high: float = 0.28
    agg: str = "seq-mean-token-sum"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0


@dataclasses.dataclass
class EvalCfg:
    every: int = 10
    count: int = 256
    samples: int = 2
    temperature: float = 1.0


@dataclasses.dataclass
class SftCfg:
    steps: int = 400
    batch: int = 64
    lr: float = 3e-3
    seed: int = 0
    base_dir: Optional[str] = None


@dataclasses.dataclass
class LoggingCfg:
    wandb_mode: str = "offline"
    wandb_project: str = "prs"
    progress: bool = True


@dataclasses.dataclass
class TrainCfg:
    seed: int = 0
    steps: int = 200
    ckpt_every: int = 50
    name: str = "run"
    tag: str = ""
    method: MethodCfg = field(default_factory=MethodCfg)
    task: TaskCfg = field(default_factory=TaskCfg)
    model: ModelCfg = field(default_factory=ModelCfg)
    optim: OptimCfg = field(default_factory=OptimCfg)
    sampler: SamplerCfg = field(default_factory=SamplerCfg)
    algo: AlgoCfg = field(default_factory=AlgoCfg)
    eval: EvalCfg = field(default_factory=EvalCfg)
    sft: SftCfg = field(default_factory=SftCfg)
    logging: LoggingCfg = field(default_factory=LoggingCfg)


def validate(cfg) -> TrainCfg:
    """Merges a composed config into the schema (unknown keys and wrong types raise) -> TrainCfg."""
    schema = OmegaConf.structured(TrainCfg)
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("hydra", None)
    merged = OmegaConf.merge(schema, plain)
    return OmegaConf.to_object(merged)
