"""``make_engine``: a rollout engine by name (``prs.rollout.engine.ENGINES``)."""
from __future__ import annotations

from typing import Any

from prs.rollout.engine import ENGINES, RolloutEngine
from prs.rollout.jax_engine import JaxEngine


def make_engine(name: str, *, cfg, params=None, mesh=None, continuous_slots: int | None = None,
                **options: Any) -> RolloutEngine:
    """An engine by name (``ENGINES``): ``jax`` (``JaxEngine(cfg, mesh=, continuous_slots=)``) or
    ``vllm`` (``VLLMEngine(cfg, params, **options)``, needs the ``prs[vllm]`` extra)."""
    if name == "jax":
        if options:
            raise ValueError(f"make_engine: the jax engine takes no options, got {sorted(options)}")
        eng = JaxEngine(cfg, mesh=mesh, continuous_slots=continuous_slots)
        if params is not None:
            eng.update_params(params)
        return eng
    if name == "vllm":
        if mesh is not None or continuous_slots is not None:
            raise ValueError("make_engine: the vllm engine batches continuously by itself and runs on one "
                             "process: mesh and continuous_slots must be None")
        if params is None:
            raise ValueError("make_engine: the vllm engine needs params at construction (it writes a checkpoint)")
        from prs.rollout.vllm_engine import VLLMEngine

        return VLLMEngine(cfg, params, **options)
    raise ValueError(f"make_engine: unknown rollout engine {name!r}; choose from {ENGINES}")
