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
log-probs agree up to float rounding. ``append_and_resume`` re-prefills the conversation
(``sampler.append_and_resume`` with ``cache=None``: nothing is held between turns).
"""
from __future__ import annotations

import jax
import numpy as np

from prs.models import sampler as S
from prs.models.continuous import sample_continuous
from prs.models.qwen3 import ModelConfig
from prs.models.sampler import Rollout, SamplerConfig
from prs.parallel.sharding import batch_size_multiple, pad_rows
from prs.rollout.engine import check_budget, join_prefix


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
                 prefix_lengths=None, budget=None) -> Rollout:
        params = self._need_params()
        rows, lengths = join_prefix(prompts, prompt_lengths, prefixes, prefix_lengths, pad_id=scfg.pad_id)
        if budget is not None:
            budget = check_budget(budget, rows.shape[0], scfg.max_new_tokens)
        if self.mesh is not None:  # rows the batch shards do not divide: padded, the padding dropped (pad_rows)
            r = rows.shape[0]
            fill = pad_rows(r, batch_size_multiple(self.mesh))
            if fill.size > r:
                rows, lengths = np.asarray(rows)[fill], np.asarray(lengths)[fill]
                budget = None if budget is None else np.asarray(budget)[fill]
            ro = S.sample_all_rows(params, rows, lengths, key, cfg=self.cfg, scfg=scfg, mesh=self.mesh, budget=budget)
            return jax.tree.map(lambda x: S.all_rows_on_host(x)[:r], ro)
        if self.continuous_slots is not None:
            return sample_continuous(params, rows, lengths, key, cfg=self.cfg, scfg=scfg, slots=self.continuous_slots,
                                     budget=budget)
        return S.sample(params, rows, lengths, key, cfg=self.cfg, scfg=scfg, budget=budget)

    def append_and_resume(self, rollout: Rollout, obs_tokens, obs_lengths, *, key: jax.Array,
                          scfg: SamplerConfig) -> Rollout:
        return S.append_and_resume(self._need_params(), rollout, np.asarray(obs_tokens), np.asarray(obs_lengths), key,
                                   cfg=self.cfg, scfg=scfg, mesh=self.mesh)

    def close(self) -> None:
        self.params = None
