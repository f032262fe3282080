"""The jax engine: ``prs.models.sampler`` (static batches, sharded over a mesh) and
``prs.models.continuous`` (continuous batching) behind ``prs.rollout.engine.RolloutEngine``.

Nothing is copied: ``update_params`` keeps a reference to the parameters (the sampler takes them
as traced arguments, so a new step's weights never recompile). Which sampler runs:

  * ``mesh`` given: ``sampler.sample_all_rows`` (each process feeds its own rows of the full input,
    one SPMD program), then every row gathered to the host (``sampler.all_rows_on_host``), so the
    host glue that follows sees the same numpy arrays on every process;
  * ``continuous_slots`` given (one device): ``continuous.sample_continuous`` over that many slots;
  * else ``sampler.sample``.

All three give the same tokens for the same key (per-row key streams ``fold_in(key, r)``); the
log-probs agree up to float rounding. On a mesh the rows the batch shards do not divide are padded
with copies of the first rows and the padding dropped (``prs.parallel.sharding.pad_rows``).

Multi-turn (``sampler.append_and_resume``): the engine state (``keep_state=True``) is the KV cache
the sampler hands back (``return_cache``), every row's tokens so far, so a resume runs the model
over the observation tokens only and then decodes; ``state=None`` re-prefills the conversation.
A resume hands back a new, wider cache (the old one is dropped). On a mesh the state keeps the
padded rows; a resume pads the rollout the same way (its padding rows are not resumed) and drops
them again. Continuous batching keeps no cache (``keep_state`` is refused there).
"""
from __future__ import annotations

import jax
import numpy as np

from prs.models import sampler as S
from prs.models.continuous import sample_continuous
from prs.models.qwen3 import ModelConfig
from prs.models.sampler import Rollout, SamplerConfig
from prs.parallel.sharding import batch_size_multiple, pad_rows
from prs.rollout.engine import EngineState, check_budget, join_prefix


class JaxEngine:
    """``RolloutEngine`` over the jax sampler (module docstring)."""

    name = "jax"

    def __init__(self, cfg: ModelConfig, *, mesh=None, continuous_slots: int | None = None):
        if continuous_slots is not None and mesh is not None:
            raise ValueError("JaxEngine: continuous_slots needs mesh=None (continuous batching runs on one device)")
        self.cfg, self.mesh, self.continuous_slots = cfg, mesh, continuous_slots
        self.params = None

    def update_params(self, params) -> None:
        self.params = params

    def _need_params(self):
        if self.params is None:
            raise ValueError("JaxEngine: no parameters yet; call update_params(params) first")
        return self.params

    def generate(self, prompts, prompt_lengths, *, key: jax.Array, scfg: SamplerConfig, prefixes=None,
                 prefix_lengths=None, budget=None, keep_state: bool = False):
        params = self._need_params()
        rows, lengths = join_prefix(prompts, prompt_lengths, prefixes, prefix_lengths, pad_id=scfg.pad_id)
        if budget is not None:
            budget = check_budget(budget, rows.shape[0], scfg.max_new_tokens)
        if keep_state and self.continuous_slots is not None:
            raise ValueError("JaxEngine.generate: keep_state needs continuous_slots=None (continuous batching keeps "
                             "no per-row cache)")
        if self.mesh is not None:
            r = rows.shape[0]
            fill = self._fill(r)
            if fill.size > r:
                rows, lengths = np.asarray(rows)[fill], np.asarray(lengths)[fill]
                budget = None if budget is None else np.asarray(budget)[fill]
            out = S.sample_all_rows(params, rows, lengths, key, cfg=self.cfg, scfg=scfg, mesh=self.mesh, budget=budget,
                                    return_cache=keep_state)
            return self._host_rows(out, r, keep_state)
        if self.continuous_slots is not None:
            return sample_continuous(params, rows, lengths, key, cfg=self.cfg, scfg=scfg, slots=self.continuous_slots,
                                     budget=budget)
        return S.sample(params, rows, lengths, key, cfg=self.cfg, scfg=scfg, budget=budget, return_cache=keep_state)

    def append_and_resume(self, rollout: Rollout, obs_tokens, obs_lengths, *, key: jax.Array, scfg: SamplerConfig,
                          state: EngineState = None, keep_state: bool = False):
        params = self._need_params()
        obs, ol = np.asarray(obs_tokens), np.asarray(obs_lengths)
        if self.mesh is None:
            return S.append_and_resume(params, rollout, obs, ol, key, cfg=self.cfg, scfg=scfg, cache=state,
                                       return_cache=keep_state)
        r = obs.shape[0]
        fill = self._fill(r)
        if fill.size > r:  # the padding rows of the generate call: kept as they are (obs length 0)
            rollout = jax.tree.map(lambda x: S.all_rows_on_host(x)[fill], rollout)
            obs, ol = obs[fill], np.where(np.arange(fill.size) < r, ol[fill], 0)
        out = S.append_and_resume(params, rollout, obs, ol, key, cfg=self.cfg, scfg=scfg, cache=state, mesh=self.mesh,
                                  return_cache=keep_state)
        return self._host_rows(out, r, keep_state)

    def _fill(self, r: int) -> np.ndarray:
        """Row ids padding ``r`` rows to the mesh's batch shards (``pad_rows``)."""
        return pad_rows(r, batch_size_multiple(self.mesh))

    @staticmethod
    def _host_rows(out, r: int, keep_state: bool):
        """A mesh call's rollout (and state): the first ``r`` rows of the rollout gathered to the host
        (every process sees all rows); the state stays on the devices, padding rows included."""
        ro, state = out if keep_state else (out, None)
        ro = jax.tree.map(lambda x: S.all_rows_on_host(x)[:r], ro)
        return (ro, state) if keep_state else ro

    def close(self) -> None:
        self.params = None
