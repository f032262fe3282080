"""Rollout engines behind one interface (``engine.RolloutEngine``): ``jax_engine`` wraps the
KV-cached sampler of ``prs.models``, ``vllm_engine`` runs vLLM's offline ``LLM`` (optional extra).

May import ``prs.core``, ``prs.parallel`` and ``prs.models``; never ``prs.rl``, tasks or rewards
(the trainer imports this room, not the other way round).
"""
from prs.rollout.engine import ENGINES, EngineState, RolloutEngine, join_prefix, result_from_rows
from prs.rollout.jax_engine import JaxEngine
from prs.rollout.registry import make_engine

__all__ = ["ENGINES", "EngineState", "RolloutEngine", "JaxEngine", "join_prefix", "make_engine", "result_from_rows"]
