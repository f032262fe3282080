"""The rollout-engine interface: what a trainer or an agent loop may ask of any sampler.

An engine holds a copy of the policy's weights (``update_params``) and turns rows of token ids
into a ``prs.models.sampler.Rollout``:

    engine.update_params(params)                       # after every optimizer update
    ro = engine.generate(prompts, prompt_lengths, key=k, scfg=scfg,
                         prefixes=pre, prefix_lengths=c, budget=b)      # [R, P_bucket + T]
    ro = engine.append_and_resume(ro, obs, obs_lengths, key=k2, scfg=scfg)  # multi-turn
    engine.close()

A multi-turn loop (an agent: generate, execute, append the observations, resume) asks the engine
to carry its own per-conversation state from one turn to the next:

    ro, st = engine.generate(prompts, plen, key=k, scfg=scfg, keep_state=True)
    ro, st = engine.append_and_resume(ro, obs, olen, key=k2, scfg=scfg, state=st, keep_state=True)

``st`` (``EngineState``) is opaque to the caller and belongs to the rollout it came with: pass it
only to the next ``append_and_resume`` of that rollout, which consumes it. The jax engine's is the
KV cache of every row (``prs.models.sampler``'s ``{"k", "v"}`` ``[L, R, S, Kv, H]``), so a resume
runs the model over the observation tokens only; vLLM's is None (its automatic prefix cache keeps
the blocks of the earlier turns by itself). ``state=None`` always works: the engine then reads the
whole conversation again (the jax engine re-prefills it, which equals the carried cache up to float
rounding).

Contract of ``generate`` (every engine, tested in tests/rollout/test_engine.py and, for vLLM,
tests/rollout/test_vllm_engine.py):
  * input row r is ``prompts[r, :prompt_lengths[r]]`` followed by the replayed prefix
    ``prefixes[r, :prefix_lengths[r]]`` (Prefix Sampling: the prefix is *input*, not policy output
    of this call); ``join_prefix`` builds these rows.
  * ``tokens [R, L]``, ``L = bucket(max input length) + T`` (``T = scfg.max_new_tokens``, the
    bucket from ``scfg.buckets``): the input row verbatim, then the generated tokens, then
    ``scfg.pad_id``; ``policy_mask`` is True exactly on the generated tokens (0 on the prompt and
    on the replayed prefix); ``lengths [R]`` the total length; ``prompt_lengths [R]`` the input
    length (prompt + prefix).
  * ``logprobs``: the engine's log p(y) of each generated token under the raw policy (temperature
    1, no truncation); ``sampling_logprobs``: log q(y) under the distribution actually sampled
    (equal to ``logprobs`` for plain sampling, 0 for greedy).
  * row r generates at most ``budget[r]`` (default T) tokens and stops after a token of
    ``scfg.all_stop_ids`` (kept, policy output); ``finished`` / ``truncated`` / ``stop_token`` as
    the sampler's.
  * rows draw from distinct random streams derived from ``key`` (the jax engine: ``fold_in(key, r)``;
    vLLM: one seed per row from the same ``fold_in``), so the same key gives the same rollouts on
    the same engine, and two rows with the same input give independent samples.

Contract of ``append_and_resume`` (multi-turn): the observations ``obs_tokens[r, :obs_lengths[r]]``
are appended after each row's ``lengths[r]`` tokens (policy mask 0) and the row generates its next
turn (at most T tokens, the same stop rule); rows with ``obs_lengths == 0`` are returned as they
were. Width ``L0 + O + T``; the earlier turns' tokens, masks and log-probs are kept verbatim.

Engines differ in speed and in float rounding, not in the contract: the trainer recomputes
nothing for the jax engine (its log-probs are the trainer's own forward pass up to ~1e-6) and
treats another engine's log-probs as the behaviour policy of a rollout correction (TIS).
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from prs.models.sampler import Rollout, SamplerConfig, pad_to_bucket

ENGINES = ("jax", "vllm")

EngineState = Any
"""What an engine carries between the turns of one rollout (module docstring): the jax engine's KV
cache, or None."""


@runtime_checkable
class RolloutEngine(Protocol):
    """One sampler behind the interface of the module docstring."""

    name: str

    def update_params(self, params) -> None:
        """Makes ``params`` (prs layout) the weights of every later call."""

    def generate(self, prompts, prompt_lengths, *, key: jax.Array, scfg: SamplerConfig, prefixes=None,
                 prefix_lengths=None, budget=None,
                 keep_state: bool = False) -> Rollout | tuple[Rollout, EngineState]:
        """Input rows (prompt + replayed prefix) -> ``Rollout`` (module docstring); with
        ``keep_state`` -> ``(Rollout, EngineState)`` for ``append_and_resume``."""

    def append_and_resume(self, rollout: Rollout, obs_tokens, obs_lengths, *, key: jax.Array,
                          scfg: SamplerConfig, state: EngineState = None,
                          keep_state: bool = False) -> Rollout | tuple[Rollout, EngineState]:
        """Appends observation tokens (policy mask 0) after each row with ``obs_lengths > 0`` and
        generates the next turn; the ``Rollout`` is widened by ``O + T``. ``state``: the previous
        call's (None: read the conversation again); with ``keep_state`` -> ``(Rollout, EngineState)``."""

    def close(self) -> None:
        """Frees the engine's resources; the engine is unusable afterwards."""


def join_prefix(prompts, prompt_lengths, prefixes=None, prefix_lengths=None, *, pad_id: int = 0):
    """Rows ``prompt[:p] + prefix[:c]`` right-padded with ``pad_id`` -> (rows [R, W] int32,
    lengths [R] int32), ``W = max(p + c)`` (host numpy). No prefix: the prompts themselves."""
    prompts, plen = np.asarray(prompts), np.asarray(prompt_lengths)
    if prompts.ndim != 2 or plen.shape != (prompts.shape[0],):
        raise ValueError(f"join_prefix: prompts {prompts.shape} must be [R, P] and prompt_lengths {plen.shape} [R]")
    if prefixes is None:
        if prefix_lengths is not None:
            raise ValueError("join_prefix: prefix_lengths given without prefixes")
        return prompts.astype(np.int32), plen.astype(np.int32)
    pre = np.asarray(prefixes)
    clen = np.zeros(plen.shape, np.int32) if prefix_lengths is None else np.asarray(prefix_lengths)
    if pre.ndim != 2 or pre.shape[0] != prompts.shape[0] or clen.shape != plen.shape:
        raise ValueError(f"join_prefix: prefixes {pre.shape} must be [R, C] and prefix_lengths {clen.shape} [R] "
                         f"with R = {prompts.shape[0]}")
    if clen.size and (clen.min() < 0 or clen.max() > pre.shape[1]):
        raise ValueError(f"join_prefix: prefix_lengths must lie in [0, {pre.shape[1]}], got "
                         f"[{clen.min()}, {clen.max()}]")
    total = (plen + clen).astype(np.int32)
    R, W = prompts.shape[0], max(int(total.max()) if total.size else 0, 1)
    rows = np.full((R, W), pad_id, np.int32)
    for r in range(R):  # host glue over R rows of a few hundred ids
        p, c = int(plen[r]), int(clen[r])
        rows[r, :p] = prompts[r, :p]
        rows[r, p:p + c] = pre[r, :c]
    return rows, total


def check_budget(budget, R: int, T: int) -> np.ndarray:
    """``budget`` (None or an int array [R] in [1, T]) -> int32 [R]; ValueError naming the argument."""
    if budget is None:
        return np.full((R,), T, np.int32)
    b = np.asarray(budget)
    if b.shape != (R,) or not np.issubdtype(b.dtype, np.integer):
        raise ValueError(f"budget must be an int array of shape {(R,)}, got {b.dtype} {b.shape}")
    if b.size and (b.min() < 1 or b.max() > T):
        raise ValueError(f"budget must lie in [1, max_new_tokens={T}], got [{b.min()}, {b.max()}]")
    return b.astype(np.int32)


def result_from_rows(rows, lengths, generated, logprobs, *, scfg: SamplerConfig, sampling_logprobs=None) -> Rollout:
    """Assembles a ``Rollout`` on the host from input ``rows [R, P]`` (``lengths [R]``) and each
    row's generated ids ``generated[r]`` (a sequence of at most T ids) with their log-probs
    ``logprobs[r]``: the layout ``prs.models.sampler.sample`` returns (width ``bucket(P) + T``, the
    stop token kept and marked as policy output, ``finished`` iff the last generated id is a stop
    id). ``sampling_logprobs`` defaults to ``logprobs`` (plain sampling), zeros for greedy."""
    rows, lengths = np.asarray(rows), np.asarray(lengths).astype(np.int32)
    R = rows.shape[0]
    if len(generated) != R or len(logprobs) != R:
        raise ValueError(f"result_from_rows: {len(generated)} generated rows / {len(logprobs)} log-prob rows for "
                         f"{R} input rows")
    T = scfg.max_new_tokens
    padded = pad_to_bucket(rows, lengths, pad_id=scfg.pad_id, buckets=scfg.buckets)  # [R, Pb]
    L = padded.shape[1] + T
    tokens = np.full((R, L), scfg.pad_id, np.int32)
    tokens[:, :padded.shape[1]] = padded
    mask = np.zeros((R, L), bool)
    lp = np.zeros((R, L), np.float32)
    slp = np.zeros((R, L), np.float32)
    if sampling_logprobs is None:
        sampling_logprobs = ([np.zeros(len(g), np.float32) for g in generated] if scfg.temperature == 0
                             else logprobs)
    stops = set(scfg.all_stop_ids)
    total = lengths.copy()
    stop_token = np.full((R,), -1, np.int32)
    for r in range(R):
        g = np.asarray(generated[r], np.int64)
        n = len(g)
        if n > T or len(logprobs[r]) != n or len(sampling_logprobs[r]) != n:
            raise ValueError(f"result_from_rows: row {r} has {n} generated ids (max_new_tokens={T}), "
                             f"{len(logprobs[r])} log-probs, {len(sampling_logprobs[r])} sampling log-probs")
        a = int(lengths[r])
        tokens[r, a:a + n] = g
        mask[r, a:a + n] = True
        lp[r, a:a + n] = logprobs[r]
        slp[r, a:a + n] = sampling_logprobs[r]
        total[r] = a + n
        if n and int(g[-1]) in stops:
            stop_token[r] = int(g[-1])
    valid = np.arange(L)[None, :] < total[:, None]
    positions = np.maximum(np.cumsum(valid, axis=1) - 1, 0).astype(np.int32)
    finished = stop_token >= 0
    return Rollout(tokens=jnp.asarray(tokens), policy_mask=jnp.asarray(mask), logprobs=jnp.asarray(lp),
                   sampling_logprobs=jnp.asarray(slp), valid=jnp.asarray(valid), positions=jnp.asarray(positions),
                   prompt_lengths=jnp.asarray(lengths), lengths=jnp.asarray(total), finished=jnp.asarray(finished),
                   truncated=jnp.asarray(~finished), stop_token=jnp.asarray(stop_token))


def row_seeds(key: jax.Array, R: int) -> np.ndarray:
    """R distinct-stream integer seeds in [0, 2**31) from ``key``: row r's is drawn from
    ``fold_in(key, r)`` (the jax engine's per-row stream), so a row's seed does not depend on R."""
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, jnp.arange(R, dtype=jnp.int32))
    return np.asarray(jax.vmap(lambda k: jax.random.randint(k, (), 0, 2**31 - 1))(keys)).astype(np.int64)


def resume_rows(prev: Rollout, obs_tokens, obs_lengths, generated, logprobs, *, scfg: SamplerConfig,
                sampling_logprobs=None) -> Rollout:
    """The ``Rollout`` of ``prs.models.sampler.append_and_resume`` assembled on the host from the
    previous turn ``prev [R, L0]``, the observations ``obs_tokens [R, O]`` (``obs_lengths [R]``;
    policy mask 0) and each resumed row's new ids ``generated[r]`` (at most T) with their
    log-probs: width ``L0 + O + T``; rows with ``obs_lengths == 0`` are kept as they were (no new
    ids allowed); ``finished`` / ``truncated`` / ``stop_token`` are the new turn's on resumed rows."""
    obs, ol = np.asarray(obs_tokens), np.asarray(obs_lengths).astype(np.int32)
    tok0 = np.asarray(prev.tokens)
    R, L0 = tok0.shape
    O, T = obs.shape[1], scfg.max_new_tokens
    L = L0 + O + T
    if sampling_logprobs is None:
        sampling_logprobs = ([np.zeros(len(g), np.float32) for g in generated] if scfg.temperature == 0
                             else logprobs)
    grow = lambda x, v: np.pad(np.asarray(x), ((0, 0), (0, L - L0)), constant_values=v)  # noqa: E731
    tokens = grow(tok0, scfg.pad_id).astype(np.int32)
    mask, lp, slp = grow(prev.policy_mask, False), grow(prev.logprobs, 0.0), grow(prev.sampling_logprobs, 0.0)
    cur = np.asarray(prev.lengths).astype(np.int32).copy()
    finished, truncated = np.asarray(prev.finished).copy(), np.asarray(prev.truncated).copy()
    stop_token = np.asarray(prev.stop_token).astype(np.int32).copy()
    stops = set(scfg.all_stop_ids)
    for r in range(R):
        g = np.asarray(generated[r], np.int64)
        n = len(g)
        if ol[r] == 0:
            if n:
                raise ValueError(f"resume_rows: row {r} was not resumed (obs_lengths 0) but has {n} new ids")
            continue
        if n > T or len(logprobs[r]) != n or len(sampling_logprobs[r]) != n:
            raise ValueError(f"resume_rows: row {r} has {n} new ids (max_new_tokens={T}), {len(logprobs[r])} "
                             f"log-probs, {len(sampling_logprobs[r])} sampling log-probs")
        a = int(cur[r])
        tokens[r, a:a + ol[r]] = obs[r, :ol[r]]
        b = a + int(ol[r])
        tokens[r, b:b + n] = g
        mask[r, b:b + n] = True
        lp[r, b:b + n] = logprobs[r]
        slp[r, b:b + n] = sampling_logprobs[r]
        cur[r] = b + n
        stop_token[r] = int(g[-1]) if n and int(g[-1]) in stops else -1
        finished[r], truncated[r] = stop_token[r] >= 0, stop_token[r] < 0
    valid = np.arange(L)[None, :] < cur[:, None]
    positions = np.maximum(np.cumsum(valid, axis=1) - 1, 0).astype(np.int32)
    return Rollout(tokens=jnp.asarray(np.where(valid, tokens, scfg.pad_id).astype(np.int32)),
                   policy_mask=jnp.asarray(mask & valid), logprobs=jnp.asarray(np.where(valid, lp, 0.0)),
                   sampling_logprobs=jnp.asarray(np.where(valid, slp, 0.0)), valid=jnp.asarray(valid),
                   positions=jnp.asarray(positions), prompt_lengths=jnp.asarray(prev.prompt_lengths),
                   lengths=jnp.asarray(cur), finished=jnp.asarray(finished), truncated=jnp.asarray(truncated),
                   stop_token=jnp.asarray(stop_token))
