"""Continuous batching for rollouts: a fixed set of decode slots, refilled as rows finish.

RL rollouts have very uneven lengths (most answers stop early, a few run to the budget), and a
static batch (``sampler.sample``) runs until its longest row stops: the finished rows ride along
as padding. Continuous batching (iteration-level scheduling, Yu et al. 2022, "Orca: A Distributed
Serving System for Transformer-Based Generative Models", OSDI '22; as in vLLM, Kwon et al. 2023,
arXiv:2309.06180) keeps ``S`` decode slots busy instead: N pending requests (prompt rows
``tokens [N, P]``, ``lengths [N]``, per-request ``budget [N]``) fill the slots in request order;
when a slot's row stops (a stop id / ``eos_id``, or its budget) the slot takes the next pending
request at the next step.

The scheme, all inside ONE ``jax.jit`` (one compile per (N, S, P bucket, T, SamplerConfig,
ModelConfig)); S = ``min(slots, N)``, L = P + T slots of KV cache per slot:
  * the first S requests are prefilled together (``qwen3.prefill``, [S, P]), as a static batch is;
  * one ``lax.while_loop`` over decode steps, whose state holds the request cursor ``c`` (next
    pending request), ``req [S]`` (the request each slot holds) and per-slot ``cur``, ``n_new``,
    ``done``, ``limit``, next-token ``logits [S, V]`` and the KV cache (per layer keys ``[S, Kv, H, L]``,
    values ``[S, Kv, L, H]``). Each iteration first refills: an inner ``while_loop``, while some slot is done and
    ``c < N``, prefills request ``c`` alone with the same ``qwen3.prefill`` the static path uses
    ([1, P], a fixed shape), writes its P cache slots into the first free slot with
    ``dynamic_update_slice`` (the slot's later cache entries, left over from its previous request,
    lie beyond its position and are masked: a masked score is -1e30 and its weight exactly 0) and
    resets the slot's state; then one decode step of every slot (``sampler.decode_token``, the
    static loop's step). Generated tokens are scattered straight into the request-ordered output
    buffers ``[N, L]``. The loop ends when every request has been taken and every slot has stopped.
  * Keys: request i draws from ``fold_in(key, i)`` (``sampler.row_keys``), then ``fold_in(.,
    n)`` with n its own generated-token index. In the static loop every row starts at step 0, so
    its global step is that index: request i's draws are those of row i of ``sample`` with the
    same key, whatever slot it lands in or when.

So ``sample_continuous`` returns the ``Rollout`` of ``sample`` (rows in request order, the same
width P + T): same tokens, masks, lengths, flags, and log-probs up to float rounding (the
matmuls run on S or 1 rows instead of N, which changes XLA:CPU's blocking: ~1e-6 in fp32, as
with ``SamplerConfig.row_chunk``; tested on greedy and temperature-1 sampling).

Cost: a refill is one [1, P] prefill (P token-forwards, like the static path's prefill of that
row); the decode steps run S rows each until the last request stops. The rows are taken in
request order (lengths are unknown before sampling), so the tail, where the last requests finish
and slots idle, is up to T steps. ``scfg.row_chunk`` is ignored (``slots`` bounds the live KV
cache); ``scfg.attend_buckets`` (static segments over a global step) does not apply and must be
None. Single device (``mesh`` must be None).
"""
from __future__ import annotations

import dataclasses
import functools

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from prs.models import qwen3 as model_lib
from prs.models import sampler as S
from prs.models.qwen3 import ModelConfig, Params
from prs.models.sampler import SamplerConfig


@flax.struct.dataclass
class _ContState:
    cursor: jax.Array  # [] next pending request
    steps: jax.Array  # [] decode steps run
    refills: jax.Array  # [] requests prefilled into a freed slot
    req: jax.Array  # [S] request held by each slot
    cur: jax.Array  # [S] next write index of the slot's row
    n_new: jax.Array  # [S] tokens the slot's request has generated
    done: jax.Array  # [S] the slot's request has stopped (the slot is free)
    limit: jax.Array  # [S] the slot's request's budget
    logits: jax.Array  # [S, V] next-token logits
    cache: tuple  # (k, v): per layer, one block: k [S, Kv, H, L], v [S, Kv, L, H] (``sampler.split_cache``)
    tokens: jax.Array  # [N, L] request-ordered outputs from here on
    policy_mask: jax.Array  # [N, L]
    logprobs: jax.Array  # [N, L]
    sampling_logprobs: jax.Array  # [N, L]
    lengths: jax.Array  # [N] total length so far
    stop_token: jax.Array  # [N]


def _refill(s: _ContState, params, tokens, lengths, budget, *, cfg: ModelConfig) -> _ContState:
    """Prefills request ``s.cursor`` ([1, P], ``qwen3.prefill``) into the first free slot."""
    P = tokens.shape[1]
    j = jnp.argmax(s.done)  # [] first free slot
    i = s.cursor
    row = jax.lax.dynamic_slice_in_dim(tokens, i, 1, axis=0)  # [1, P]
    n = jax.lax.dynamic_slice_in_dim(lengths, i, 1)  # [1]
    logits, c = model_lib.prefill(params, row, n, cfg=cfg, max_len=P)  # [1, V]; [Lyr, 1, P, Kv, H]
    # the decode loop's layouts (``sampler.split_cache``): keys [S, Kv, H, L], values [S, Kv, L, H]
    put = lambda blocks, new, perm: (jax.lax.dynamic_update_slice(
        blocks[0], new.transpose(perm).astype(blocks[0].dtype), (j, 0, 0, 0)),)
    cache = tuple(tuple(put(blocks, c[name][l], perm) for l, blocks in enumerate(layers))
                  for name, perm, layers in zip(("k", "v"), ((0, 2, 3, 1), (0, 2, 1, 3)), s.cache))
    return s.replace(
        cursor=i + 1, refills=s.refills + 1, req=s.req.at[j].set(i), cur=s.cur.at[j].set(n[0]),
        n_new=s.n_new.at[j].set(0), done=s.done.at[j].set(False), limit=s.limit.at[j].set(budget[i]),
        logits=s.logits.at[j].set(logits[0]), cache=cache)


def _decode(s: _ContState, w, keys, stop_ids, *, cfg: ModelConfig, scfg: SamplerConfig) -> _ContState:
    """One decode step of every slot: ``sampler._decode_loop``'s body with per-request keys at the
    request's own token index, writing into the request-ordered buffers."""
    N, L = s.tokens.shape
    step_keys = jax.vmap(jax.random.fold_in)(keys[s.req], s.n_new)  # [S]
    tok, lp, samp = S.choose_tokens(s.logits, step_keys, scfg)  # [S] each
    active, wi, hit, n_new, cur, done = S.advance(tok, s.done, s.cur, s.n_new, s.limit, stop_ids, L)  # [S] each
    logits, (cache,) = S.decode_token(w, (s.cache,), tok, s.cur, active, bounds=(0, L), cfg=cfg)
    rq = s.req
    return s.replace(
        steps=s.steps + 1, n_new=n_new, cur=cur, done=done, logits=logits, cache=cache,
        tokens=s.tokens.at[rq, wi].set(tok, mode="drop"),
        policy_mask=s.policy_mask.at[rq, wi].set(True, mode="drop"),
        logprobs=s.logprobs.at[rq, wi].set(lp, mode="drop"),
        sampling_logprobs=s.sampling_logprobs.at[rq, wi].set(samp, mode="drop"),
        lengths=s.lengths.at[jnp.where(active, rq, N)].set(cur, mode="drop"),
        stop_token=s.stop_token.at[jnp.where(hit, rq, N)].set(tok, mode="drop"),
    )


@functools.partial(jax.jit, static_argnames=("cfg", "scfg", "slots"))
def _continuous_jit(params, tokens, lengths, budget, key, *, cfg: ModelConfig, scfg: SamplerConfig, slots: int):
    """tokens [N, P], lengths [N], budget [N] -> (Rollout [N, P + T], decode steps, refills)."""
    N, P = tokens.shape
    T = scfg.max_new_tokens
    L = P + T
    tokens = tokens.astype(jnp.int32)
    lengths = lengths.astype(jnp.int32)
    budget = budget.astype(jnp.int32)
    logits, cache = model_lib.prefill(params, tokens[:slots], lengths[:slots], cfg=cfg, max_len=L)
    zeros = jnp.zeros((N, L), jnp.float32)
    state = _ContState(
        cursor=jnp.int32(slots), steps=jnp.zeros((), jnp.int32), refills=jnp.zeros((), jnp.int32),
        req=jnp.arange(slots, dtype=jnp.int32), cur=lengths[:slots], n_new=jnp.zeros((slots,), jnp.int32),
        done=jnp.zeros((slots,), bool), limit=budget[:slots], logits=logits,
        cache=S.split_cache(cache, (0, L), None),
        tokens=jnp.pad(tokens, ((0, 0), (0, T)), constant_values=scfg.pad_id),
        policy_mask=jnp.zeros((N, L), bool), logprobs=zeros, sampling_logprobs=zeros,
        lengths=lengths, stop_token=jnp.full((N,), -1, jnp.int32),
    )
    keys = S.row_keys(key, 0, N)  # [N]
    w = model_lib.decode_weights(params, cfg)
    stop_ids = jnp.asarray(scfg.all_stop_ids or (-1,), jnp.int32)

    def body(s):
        s = jax.lax.while_loop(lambda s: jnp.any(s.done) & (s.cursor < N),
                               lambda s: _refill(s, params, tokens, lengths, budget, cfg=cfg), s)
        return _decode(s, w, keys, stop_ids, cfg=cfg, scfg=scfg)

    s = jax.lax.while_loop(lambda s: (s.cursor < N) | ~jnp.all(s.done), body, state)
    final = S.LoopState(step=s.steps, tokens=s.tokens, policy_mask=s.policy_mask, logprobs=s.logprobs,
                        sampling_logprobs=s.sampling_logprobs, cur=s.lengths, n_new=None, done=None,
                        stop_token=s.stop_token, limit=None, logits=None, cache=None)
    return S.finish_rollout(final, lengths, None, None, scfg), s.steps, s.refills


def _check_slots(slots) -> int:
    if isinstance(slots, (bool, np.bool_)) or not isinstance(slots, (int, np.integer)) or slots < 1:
        raise ValueError(f"sample_continuous: slots must be an integer >= 1, got {slots!r}")
    return int(slots)


def sample_continuous(params: Params, tokens, lengths, key: jax.Array, *, cfg: ModelConfig, scfg: SamplerConfig,
                      slots: int, budget=None, mesh=None, return_stats: bool = False):
    """``sampler.sample`` with continuous batching over ``slots`` decode slots (module docstring).

    Args:
      params, tokens [N, P], lengths [N], key, cfg, scfg, budget [N]: as ``sampler.sample``
        (request i = row i; ``budget`` in [1, T], default T = ``scfg.max_new_tokens``).
      slots: decode slots S >= 1 (rows decoded together; at most N are used).
      mesh: must be None (single device).
      return_stats: also return ``{"steps": decode steps run, "refills": requests prefilled into a
        freed slot}`` (host ints; one device sync).
    Returns:
      the ``Rollout`` of ``sample(params, tokens, lengths, key, ..., budget=budget)`` (rows in request
      order; tokens equal, log-probs up to float rounding), or ``(Rollout, stats)``.
    Raises:
      ValueError on bad ``slots``, a ``mesh``, ``scfg.attend_buckets``, ``scfg.prefill_group`` > 1, or
      ``sample``'s bad inputs.
    """
    slots = _check_slots(slots)
    if mesh is not None:
        raise ValueError("sample_continuous: mesh must be None (continuous batching runs on one device; "
                         "use sample for a sharded batch)")
    if scfg.prefill_group != 1:
        raise ValueError(f"sample_continuous: scfg.prefill_group must be 1 (requests are prefilled one by one), "
                         f"got {scfg.prefill_group}")
    if scfg.attend_buckets is not None:
        raise ValueError(f"sample_continuous: scfg.attend_buckets must be None (rows start at different steps), "
                         f"got {scfg.attend_buckets}")
    tokens_np, lengths_np = S.validate_rows("tokens", tokens, lengths, cfg, allow_empty=False)
    padded = S.pad_to_bucket(tokens_np, lengths_np, pad_id=scfg.pad_id, buckets=scfg.buckets)
    T = scfg.max_new_tokens
    need = padded.shape[1] + T
    if scfg.max_len is not None and need > scfg.max_len:
        raise ValueError(f"sample_continuous: prompt width {padded.shape[1]} (bucketed from max length "
                         f"{int(lengths_np.max())}) + max_new_tokens {T} = {need} exceeds the cache length "
                         f"max_len={scfg.max_len}")
    N = lengths_np.shape[0]
    if N == 0:
        raise ValueError("sample_continuous: tokens must have at least one row")
    if budget is None:
        budget_np = np.full((N,), T, np.int32)
    else:
        budget_np = np.asarray(budget)
        if budget_np.shape != (N,) or not np.issubdtype(budget_np.dtype, np.integer):
            raise ValueError(f"sample_continuous: budget must be an int array of shape {(N,)}, got "
                             f"{budget_np.dtype} {budget_np.shape}")
        if budget_np.min() < 1 or budget_np.max() > T:
            raise ValueError(f"sample_continuous: budget must lie in [1, max_new_tokens={T}], got "
                             f"[{budget_np.min()}, {budget_np.max()}]")
    core = dataclasses.replace(scfg, row_chunk=None)
    ro, steps, refills = _continuous_jit(params, padded, lengths_np.astype(np.int32), budget_np.astype(np.int32),
                                         key, cfg=cfg, scfg=core, slots=min(slots, N))
    if return_stats:
        return ro, {"steps": int(steps), "refills": int(refills)}
    return ro
