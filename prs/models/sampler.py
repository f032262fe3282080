"""Prefix-conditioned, KV-cached, jit-compiled, data-sharded sampler (with multi-turn resume).

Input rows ``tokens [R, P]`` hold the task prompt followed by a replayed prefix (Prefix Sampling:
the prefix is *not* policy output of this call), right-padded, with ``lengths [R]``. ``sample``
pads ``P`` up to a length bucket (``bucket_length``), fills a KV cache of ``S = P + T`` slots with
one forward pass (``prefill``), then runs one ``lax.while_loop`` inside one ``jax.jit``: sample a
token from the current logits, write it at each row's end, feed it through ``decode_step``. A row
stops after ``eos_id`` or any ``stop_ids`` token (kept, and marked as policy output) or after
``max_new_tokens`` tokens; the loop exits when every row has stopped. One compile per
(R, P bucket, T, SamplerConfig, ModelConfig, sharding).

Sampling distribution at step t, logits z (float32, from the cached decode):
    z' = z / temperature;  top-k: keep z'_v >= (k-th largest z');  top-p (nucleus, Holtzman et al.
    2019, arXiv:1904.09751, HF order: temperature, then top-k, then top-p on the renormalised
    top-k distribution): keep the smallest set of highest-probability tokens whose mass reaches p
    (a token is kept iff the mass of strictly more probable tokens, in sorted order, is < p).
    Ties at a threshold are all kept. ``temperature == 0`` is greedy argmax.

Log-probabilities recorded for each generated token y (exact statement):
  * ``logprobs``          = log softmax(z)_y : the RAW policy at temperature 1, no truncation,
    computed from the same cached-decode logits that drove sampling. This is the ``old_logp`` of
    the PPO ratio. It equals ``log_softmax(forward(params, tokens, positions=..., valid=...))``
    at the previous index up to float rounding (~1e-6 in fp32; larger in bf16).
  * ``sampling_logprobs`` = log q(y), q the temperature/top-k/top-p-adjusted distribution actually
    sampled from (0 for greedy: q is a point mass). Useful for importance corrections.

Multi-turn (an agent environment): generate with ``stop_ids=(end_of_turn,)``; the caller appends
observation tokens and resumes with ``append_and_resume``. Observation tokens get policy_mask 0.
Rows with ``obs_lengths == 0`` are not resumed (they keep their tokens and flags); which rows to
resume (e.g. not those that stopped on ``eos_id``, see ``stop_token``) is the caller's choice.
Two paths, same result (same tokens for the same key; tested):
  * ``cache`` given (the common, fast path): ``sample(..., return_cache=True)`` hands back the KV
    cache, which already holds every token of every row (the loop feeds each sampled token,
    including the stop token). A resume runs the model over only the O observation tokens
    (one ``extend``) and then the T decode steps. The cache is padded to ``S + O + T`` slots,
    one copy per turn (it grows, so it cannot be donated; drop the old one).
  * ``cache=None``: re-prefill the conversation so far (one parallel forward over S tokens,
    O(S²) attention), then the same path. Nothing to hold between turns; the extra cost is one
    prefill per turn, small next to T sequential decode steps for short conversations.
Within one call the cache never leaves the jit: the ``while_loop`` carries it and XLA updates it in
place. Inside the loop the cache is one buffer per layer (and per slot block, ``attend_buckets``,
and per row part, ``row_parts``),
the decode step's layers are unrolled and the weights are split per layer once per call, so a
step copies neither cache nor weights (``split_cache``, ``qwen3.decode_weights``; keys are held as
[R, Kv, H, S], values as [R, Kv, S, H], so attention reads them in place); the model's stacked
``[L, R, S, Kv, H]`` layout is restored only for ``return_cache``. Row r draws from its own key
stream ``fold_in(key, r)``, so ``row_chunk`` and sharding never change the tokens. Buffers grow by
``O + T`` per turn, so each turn compiles once per (R, width) shape.

The model itself is ``qwen3.decoder_layer``, the layer ``forward`` trains with: the decode step
(``decode_token``) and the chunked prefill (``_prefill_blocks``) pass it their own attention, which
writes and reads this module's slot-block cache.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from prs.models import qwen3 as model_lib
from prs.models.qwen3 import Cache, ModelConfig, Params
from prs.parallel import explicit
from prs.parallel.sharding import (batch_axes, batch_size_multiple, data_sharding, process_rows, sampler_placement,
                                   shard_batch, shard_rows)

WEIGHTS_LAYOUTS = ("joined", "training")
DEFAULT_BUCKETS: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
    """Static sampler settings (hashable; a change recompiles).

    Attributes:
      max_new_tokens: T, tokens generated per row per call (>= 1).
      temperature: 0 = greedy; otherwise logits are divided by it.
      top_k: keep the k most likely tokens (0 = off).
      top_p: nucleus mass in (0, 1] (1 = off).
      eos_id: end-of-sequence id (None = none); the row stops and ``finished`` is set.
      stop_ids: extra stop ids (end-of-turn); same effect as ``eos_id``.
      pad_id: written after each row's end.
      buckets: prompt-width buckets; None = use the given width as is.
      max_len: optional cache capacity; ``P_bucket + T > max_len`` raises ValueError.
      attend_buckets: attended-length buckets of the decode loop: the loop runs in segments, and a
        segment attends only the first ``A`` cache slots, ``A`` the smallest bucket (or ``P + T``)
        that holds every slot the segment can fill (``_segments``); one compiled body per segment,
        all in the same jit. None (the default) = attend all ``S = P + T`` slots at every step
        (one segment). Off by default: XLA:CPU fuses the multi-block attention worse than the
        single-block one, so at short T it is slower (benchmarks/README.md); it is meant for
        T >> P, where attention dominates.
      row_chunk: ``sample`` runs R rows as ceil(R / row_chunk) calls of ``row_chunk`` rows each
        (the last padded with dummy rows), so the KV cache of only ``row_chunk`` rows is live;
        the output equals one call over all rows (per-row keys; tested). None = one call.
      row_parts: the decode step's cache writes and attention run as this many independent ops
        over equal row ranges (each with its own cache buffers), which XLA:CPU's thunk executor
        runs concurrently on its threads; the matmuls still see all rows (``decode_token``).
        Must divide the rows of a call; > 1 needs a single device (no ``mesh``). Same tokens;
        the log-probs move by float rounding (XLA fuses the attention differently). Default 1
        (the one-part program, so committed runs replay bit-exactly,
        tests/experiments/test_reproduce.py); 2 lets two cores share the attention
        (benchmarks/README.md). None = 2 on a single device for an even R >= 8, else 1.
      prefill_group: G; rows ``g·G .. g·G + G − 1`` of a call hold the same input (a GRPO group's
        N rollouts of one prompt, or a Prefix Sampling re-roll group's prompt + replayed prefix):
        the prefill runs on the first row of each group only (R / G rows) and its KV cache and
        next-token logits are broadcast to the G rows, which then decode on their own (per-row
        keys). Prefill work and its working set / G; the same tokens as G = 1 (the prefill of
        identical rows is row-wise; the log-probs may move by float rounding: the matmuls see R / G
        rows). ``sample`` checks that the rows of each group are equal; G must divide the rows
        of a call (``row_chunk``) and, on a mesh, R / G the batch shards. Default 1.
      weights_layout: the weights the decode step and the chunked prefill read: ``joined``
        (``qwen3.decode_weights``: per-layer copies made once per call, q/k/v and gate/up joined
        into one matmul each, the tied head transposed, all cast to ``cfg.dtype``: a second copy of
        the model's matmul weights while the call runs) or ``training`` (the parameters as given,
        each layer's weights sliced from the [L, ...] stacks where the step uses them, the same
        numbers up to the joined matmuls' float summation order). On XLA:CPU ``training`` saves no
        memory: the compiler hoists the loop-invariant slices out of the decode loop as copies
        (benchmarks/README.md); whether a GPU/TPU compiler keeps the slices in place is
        unmeasured. Default ``joined`` (committed runs replay bit-exactly).
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    eos_id: int | None = None
    stop_ids: tuple[int, ...] = ()
    pad_id: int = 0
    buckets: tuple[int, ...] | None = DEFAULT_BUCKETS
    max_len: int | None = None
    attend_buckets: tuple[int, ...] | None = None
    row_chunk: int | None = None
    row_parts: int | None = 1
    prefill_group: int = 1
    weights_layout: str = "joined"

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplerConfig.max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"SamplerConfig.temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"SamplerConfig.top_k must be >= 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplerConfig.top_p must be in (0, 1], got {self.top_p}")
        object.__setattr__(self, "stop_ids", tuple(int(s) for s in self.stop_ids))
        if self.buckets is not None:
            object.__setattr__(self, "buckets", tuple(sorted(int(b) for b in self.buckets)))
        if self.attend_buckets is not None:
            object.__setattr__(self, "attend_buckets", tuple(sorted(int(b) for b in self.attend_buckets)))
            if not self.attend_buckets or self.attend_buckets[0] < 1:
                raise ValueError(f"SamplerConfig.attend_buckets must be None or non-empty integers >= 1, "
                                 f"got {self.attend_buckets}")
        if self.row_chunk is not None and int(self.row_chunk) < 1:
            raise ValueError(f"SamplerConfig.row_chunk must be >= 1 or None, got {self.row_chunk}")
        if self.row_parts is not None and int(self.row_parts) < 1:
            raise ValueError(f"SamplerConfig.row_parts must be >= 1 or None, got {self.row_parts}")
        if isinstance(self.prefill_group, bool) or not isinstance(self.prefill_group, (int, np.integer)) \
                or self.prefill_group < 1:
            raise ValueError(f"SamplerConfig.prefill_group must be an integer >= 1, got {self.prefill_group!r}")
        if self.weights_layout not in WEIGHTS_LAYOUTS:
            raise ValueError(f"SamplerConfig.weights_layout={self.weights_layout!r}; choose from {WEIGHTS_LAYOUTS}")

    @property
    def all_stop_ids(self) -> tuple[int, ...]:
        return self.stop_ids + (() if self.eos_id is None else (int(self.eos_id),))


@flax.struct.dataclass
class Rollout:
    """Sampler output. L = P_bucket + T (+ O + T per resumed turn).

    tokens            [R, L] int32: each row's input followed directly by its generated tokens, then pad_id.
    policy_mask       [R, L] bool: True exactly on tokens this sampler generated (over all turns).
    logprobs          [R, L] f32: raw policy log p_θ(y) at temperature 1 on policy tokens, else 0.
    sampling_logprobs [R, L] f32: log q(y) under the adjusted sampling distribution, else 0.
    valid             [R, L] bool: index < lengths.
    positions         [R, L] int32: max(cumsum(valid) - 1, 0) (= index on valid tokens).
    prompt_lengths    [R] int32: length of the input rows of the first call (prompt + prefix).
    lengths           [R] int32: total length.
    finished          [R] bool: the last turn ended on eos_id or a stop id.
    truncated         [R] bool: the last turn hit max_new_tokens without a stop token.
    stop_token        [R] int32: the stop token that ended the last turn, -1 if none.
    """

    tokens: jax.Array
    policy_mask: jax.Array
    logprobs: jax.Array
    sampling_logprobs: jax.Array
    valid: jax.Array
    positions: jax.Array
    prompt_lengths: jax.Array
    lengths: jax.Array
    finished: jax.Array
    truncated: jax.Array
    stop_token: jax.Array


# ----------------------------------------------------------------------------- shape buckets


def bucket_length(n: int, buckets: Sequence[int] = DEFAULT_BUCKETS) -> int:
    """Smallest bucket >= n. Raises ValueError if n exceeds the largest bucket or n < 0."""
    if n < 0:
        raise ValueError(f"bucket_length: n={n} must be >= 0")
    for b in sorted(buckets):
        if b >= n:
            return int(b)
    raise ValueError(f"bucket_length: n={n} exceeds the largest bucket {max(buckets)}")


def pad_to_bucket(tokens, lengths, *, pad_id: int = 0,
                  buckets: Sequence[int] | None = DEFAULT_BUCKETS) -> np.ndarray:
    """Right-pads (or trims trailing padding of) ``tokens [R, P]`` to width
    ``bucket_length(max(lengths))`` with ``pad_id`` -> [R, P_bucket] (numpy, host side)."""
    tokens = np.asarray(tokens)
    lengths = np.asarray(lengths)
    if tokens.ndim != 2 or lengths.shape != (tokens.shape[0],):
        raise ValueError(f"pad_to_bucket: tokens {tokens.shape} must be [R, P] and lengths {lengths.shape} [R]")
    need = int(lengths.max()) if lengths.size else 0
    width = need if buckets is None else bucket_length(need, buckets)
    width = max(width, 1)
    out = np.full((tokens.shape[0], width), pad_id, dtype=np.int32)
    keep = min(width, tokens.shape[1])
    out[:, :keep] = tokens[:, :keep]
    idx = np.arange(width)[None, :]
    return np.where(idx < lengths[:, None], out, np.int32(pad_id)).astype(np.int32)


# ----------------------------------------------------------------------------- token choice


def adjust_logits(logits: jax.Array, *, temperature: float, top_k: int = 0, top_p: float = 1.0) -> jax.Array:
    """Temperature, then top-k, then top-p (see module docstring). logits [R, V] -> [R, V] with
    excluded tokens at -inf. ``temperature`` must be > 0 here (greedy is handled by the caller)."""
    V = logits.shape[-1]
    x = logits.astype(jnp.float32) / temperature
    if 0 < top_k < V:
        kth = jax.lax.top_k(x, top_k)[0][:, -1:]  # [R, 1]
        x = jnp.where(x >= kth, x, -jnp.inf)
    if top_p < 1.0:
        desc = -jnp.sort(-x, axis=-1)  # [R, V] descending
        probs = jax.nn.softmax(desc, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly earlier tokens
        keep = before < top_p  # the first token is always kept
        cutoff = jnp.min(jnp.where(keep, desc, jnp.inf), axis=-1, keepdims=True)  # [R, 1]
        x = jnp.where(x >= cutoff, x, -jnp.inf)
    return x


def _categorical(key: jax.Array, logits: jax.Array) -> jax.Array:
    """One draw per row of ``logits [R, V]``: with one key, a single [R, V] Gumbel draw; with per-row
    keys ``[R]`` (typed), row r's draw depends only on its own key (so it does not depend on R, the
    chunking or the sharding of the batch)."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key) and key.ndim == 1:
        return jax.vmap(lambda k, z: jax.random.categorical(k, z))(key, logits)
    return jax.random.categorical(key, logits, axis=-1)


def choose_tokens(logits: jax.Array, key: jax.Array, scfg: SamplerConfig):
    """logits [R, V] -> (tokens [R], raw log p [R], sampling log q [R]). ``key``: one PRNG key, or
    typed per-row keys [R] (what the decode loop passes)."""
    logits = explicit.keep_rows(logits)  # explicit mesh: V whole (sort, top-p, the picked id's log p)
    raw = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [R, V]
    if scfg.temperature == 0:
        tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        samp = jnp.zeros(tok.shape, jnp.float32)
    elif scfg.temperature == 1 and scfg.top_k in (0, logits.shape[-1]) and scfg.top_p == 1:
        tok = _categorical(key, raw).astype(jnp.int32)  # q = p: one softmax
    else:
        adj = adjust_logits(logits, temperature=scfg.temperature, top_k=scfg.top_k, top_p=scfg.top_p)
        tok = _categorical(key, adj).astype(jnp.int32)
        samp = jnp.take_along_axis(jax.nn.log_softmax(adj, axis=-1), tok[:, None], axis=-1)[:, 0]
    lp = jnp.take_along_axis(raw, tok[:, None], axis=-1)[:, 0]
    if scfg.temperature == 1 and scfg.top_k in (0, logits.shape[-1]) and scfg.top_p == 1:
        samp = lp
    return tok, lp, samp


def row_keys(key: jax.Array, row0: jax.Array, R: int) -> jax.Array:
    """Per-row keys ``fold_in(key, row0 + r)`` [R] (typed). Row r of a batch always gets the same
    stream, whatever the batch's size, chunking (``row_chunk``: ``row0`` = the chunk's first row)
    or sharding."""
    if not jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)  # a raw uint32 PRNGKey: same bits as fold_in on it
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, row0 + jnp.arange(R, dtype=jnp.int32))


# ----------------------------------------------------------------------------- the loop


@flax.struct.dataclass
class LoopState:
    """The decode loop's carry (static ``sample`` / resume loop; ``prs.models.continuous`` builds one
    for ``finish_rollout``). R rows, L = P + T buffer width."""

    step: jax.Array  # []
    tokens: jax.Array  # [R, L]
    policy_mask: jax.Array  # [R, L]
    logprobs: jax.Array  # [R, L]
    sampling_logprobs: jax.Array  # [R, L]
    cur: jax.Array  # [R] next write index
    n_new: jax.Array  # [R] tokens generated this turn
    done: jax.Array  # [R]
    stop_token: jax.Array  # [R]
    limit: jax.Array  # [R] tokens this row may generate this turn (<= T)
    logits: jax.Array  # [R, V] next-token logits
    cache: tuple  # (k, v): per layer, per slot block b: k [R, Kv, H, S_b], v [R, Kv, S_b, H] (``split_cache``)


def _constrain(x, mesh: Mesh | None, axis: int = 0, head_axis: int | None = None):
    """``x`` constrained to rows (axis ``axis``) over the mesh's batch axes; a KV cache's head axis
    ``head_axis`` also over ``tensor`` where ``explicit.head_split`` splits it (explicit meshes)."""
    if mesh is None:
        return x
    spec = [None] * x.ndim
    spec[axis] = batch_axes(mesh)  # rows over (data, fsdp): each device holds only its rows' KV cache
    if head_axis is not None:
        spec[head_axis] = explicit.head_split(x.shape[head_axis], mesh)  # and only its kv heads (tensor)
    return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec(*spec)))


def split_cache(cache: Cache, bounds: tuple[int, ...], mesh, *, bits: bool = False) -> tuple:
    """The model's stacked cache {"k", "v": [L, R, S, Kv, H]} -> ``(k, v)``, each a tuple over layers
    of a tuple over slot blocks ``[bounds[b], bounds[b+1])``: keys [R, Kv, H, S_b] (slots minor),
    values [R, Kv, S_b, H] (one copy per call, which also does the transpose).

    In the decode loop every (layer, block) is its own loop-carried buffer, written in place by a
    one-slot scatter, and a segment attends whole blocks (no slicing: a slice of a loop-carried
    cache is a copy on XLA:CPU). With the stacked layout the layer scan would slice (copy) every
    layer's cache out of the carry at every step.
    The layouts make both attention contractions reductions over a non-minor axis, vectorised
    along the minor one (``_block_attention``). ``bits``: a 16-bit float cache held as its
    unsigned-integer bits (``_bits_dtype``; the decode loop of ``sample_jit`` / ``_resume_jit``)."""
    cv = _to_bits if bits else (lambda x: x)
    return tuple(tuple(tuple(_constrain(cv(c[l, :, a:b].transpose(perm)), mesh, 0, 1) for a, b in zip(bounds[:-1], bounds[1:]))
                       for l in range(c.shape[0]))
                 for c, perm in ((cache["k"], (0, 2, 3, 1)), (cache["v"], (0, 2, 1, 3))))


def _stack_cache(cache: tuple, dtype=None) -> Cache:
    """Inverse of ``split_cache``: back to the model's stacked [L, R, S, Kv, H] (of ``dtype`` when
    the blocks hold its bits)."""
    k, v = cache
    fb = (lambda x: x) if dtype is None else (lambda x: _from_bits(x, dtype))
    return {"k": jnp.stack([fb(jnp.concatenate(blocks, axis=3)).transpose(0, 3, 1, 2) for blocks in k]),
            "v": jnp.stack([fb(jnp.concatenate(blocks, axis=2)).transpose(0, 2, 1, 3) for blocks in v])}


def _block_attention(q: jax.Array, ks, vs, pos: jax.Array, bounds, cfg: ModelConfig) -> jax.Array:
    """``qwen3._decode_attention`` over the slot blocks ``ks`` [R, Kv, H, S_b], ``vs`` [R, Kv, S_b, H]
    (slots ``[bounds[b], bounds[b+1])``), without joining them. Each block is attended on its own,
    exactly as ``_decode_attention`` (o_b = softmax_b(x_b) v_b, x_b = q k_bᵀ/√H, with m_b = max x_b,
    l_b = sum exp(x_b - m_b)), and the blocks are merged as in flash attention (Dao et al. 2022,
    arXiv:2205.14135): o = sum_b o_b l_b exp(m_b - m) / sum_b l_b exp(m_b - m), m = max_b m_b; this
    equals the softmax over all slots. A block with no attendable slot has m_b = -1e30 and weight
    exactly 0 (slot 0, in block 0, is always attendable). With one block this is exactly
    ``_decode_attention`` up to float summation order. Both contractions reduce a non-minor axis
    (H for q·k with slots minor, S for p·v with H minor), so XLA:CPU vectorises them along the
    minor axis and reads the cache in place (the alternatives' timings: benchmarks/README.md).
    q: [R, 1, K, H]; pos [R]: a query attends slots <= pos -> [R, 1, K·H]."""
    R, _, K, H = q.shape
    Kv = ks[0].shape[1]
    G = K // Kv
    qg = explicit.reshape_rows(q, (R, Kv, G, H)).astype(jnp.float32)  # [R, Kv, G, H]
    outs, ms, ls = [], [], []
    for kb, vb, a, b in zip(ks, vs, bounds[:-1], bounds[1:]):
        sc = jnp.sum(qg[..., None] * kb.astype(jnp.float32)[:, :, None], axis=-2) / math.sqrt(H)  # [R, Kv, G, S_b]
        ok = (a + jnp.arange(b - a))[None, :] <= pos[:, None]  # [R, S_b]
        sc = jnp.where(ok[:, None, None, :], sc, model_lib.NEG_INF)
        probs = jax.nn.softmax(sc, axis=-1).astype(vb.dtype)
        outs.append(jnp.sum(probs[..., None] * vb[:, :, None], axis=-2).astype(jnp.float32))  # [R, Kv, G, H]
        if len(ks) > 1:
            ms.append(jnp.max(sc, axis=-1))  # [R, Kv, G]
            ls.append(jnp.sum(jnp.exp(sc - ms[-1][..., None]), axis=-1))
    if len(ks) == 1:
        out = outs[0]
    else:
        m = functools.reduce(jnp.maximum, ms)
        wts = [l * jnp.exp(mb - m) for l, mb in zip(ls, ms)]  # [R, Kv, G]
        z = functools.reduce(jnp.add, wts)
        out = functools.reduce(jnp.add, [o * (wt / z)[..., None] for o, wt in zip(outs, wts)])
    return explicit.reshape_rows(out, (R, 1, K * H)).astype(vs[0].dtype)


def decode_token(w: dict, parts: tuple, tok, pos, active, *, bounds: tuple[int, ...], cfg: ModelConfig):
    """One decode step of every row, layers unrolled, against per-layer block caches: writes the
    token's k/v at slot ``pos`` (active rows only) into the block holding it, and attends the
    blocks ``[bounds[0], bounds[-1])`` only (the caller guarantees ``pos < bounds[-1]``; later
    blocks pass through untouched). Same equations as ``qwen3.extend`` with C = 1 (masked slots
    add exact zeros there, so leaving them out changes nothing but float summation order).

    ``parts``: the cache as a tuple over P_r equal row ranges (``_split_parts``), each its own
    buffers. The matmuls run on all R rows at once; the cache writes and the attention, which
    XLA:CPU runs on one thread per op, run per part as independent ops, which its thunk executor
    runs concurrently on its threads (``_row_parts``). Attention is row-wise (each row reduces only
    its own slots), so the parts change the numbers only through XLA's different fusion of the
    attention (float rounding; the same tokens, tested).
    tok, pos, active: [R] -> (float32 logits [R, V], cache as a tuple over parts)."""
    nb = len(bounds) - 1  # blocks attended
    R = tok.shape[0]
    n_parts = len(parts)
    n = R // n_parts
    piece = (lambda x, i: x) if n_parts == 1 else (lambda x, i: x[i * n:(i + 1) * n])  # rows of part i
    slots = []  # per block: [R, 1] index within the block, out of range (dropped) if not there
    for a, b in zip(bounds[:-1], bounds[1:]):
        inside = active & (pos >= a) & (pos < b)
        slots.append(jnp.where(inside, pos - a, b - a)[:, None])
    positions = pos[:, None]  # [R, 1]
    h = explicit.gather_rows(w["embed_tokens"], tok[:, None]).astype(cfg.dtype)  # [R, 1, D]
    heads = explicit.head_split(cfg.n_kv_heads)  # explicit mesh: the cache's kv heads split over tensor too

    def write_attend(q, k, v, pos, slots, kb, vb):
        """One part's cache writes at slot ``pos`` and its attention (all of its rows, or one
        device's (rows, heads) block): kb, vb the layer's first nb key / value blocks."""
        rows = jnp.arange(q.shape[0])[:, None]  # [n, 1]
        if heads is None:
            rows = explicit.constrain_rows(rows[:, 0])[:, None]
        # c[rows, :, :, sl] (keys) and c[rows, :, sl] (values) are [n, 1, Kv, H]: the advanced
        # indices' axes come first, so k and v go in as they are
        ck = tuple(c.at[rows, :, :, sl].set(_store(k, c.dtype, cfg), mode="drop", out_sharding=explicit.same(c))
                   for c, sl in zip(kb, slots))
        cv = tuple(c.at[rows, :, sl].set(_store(v, c.dtype, cfg), mode="drop", out_sharding=explicit.same(c))
                   for c, sl in zip(vb, slots))
        att = _block_attention(q, [_load(c, cfg) for c in ck], [_load(c, cfg) for c in cv], pos, bounds, cfg)
        return att, ck, cv

    new = [([], []) for _ in parts]
    for l in range(cfg.n_layers):
        lp = model_lib.layer_weights(w, l)

        def attend(q, k, v, l=l):  # decode mode: write slot ``pos`` of the blocks, attend them
            if heads is None:
                q, k, v = (explicit.keep_rows(x) for x in (q, k, v))  # explicit mesh: the cache's layout, rows split
            else:
                q, k, v = (explicit.constrain_rows_heads(x, head_axis=2, heads=heads) for x in (q, k, v))
            atts, blocks = [], []
            for i, (pk, pv) in enumerate(parts):
                args = (piece(q, i), piece(k, i), piece(v, i), piece(pos, i), [piece(sl, i) for sl in slots],
                        pk[l][:nb], pv[l][:nb])
                if heads is None:
                    att, ck, cv = write_attend(*args)
                else:  # each device writes and attends its own rows' and kv heads' block of the cache
                    r = explicit.row_spec(jax.sharding.get_abstract_mesh(), 1)[0]
                    qs, cs = PartitionSpec(r, None, heads, None), PartitionSpec(r, heads, None, None)
                    att, ck, cv = explicit.per_shard(
                        write_attend, args, (qs, qs, qs, PartitionSpec(r), [PartitionSpec(r, None)] * nb,
                                             (cs,) * nb, (cs,) * nb),
                        (PartitionSpec(r, None, heads), (cs,) * nb, (cs,) * nb))
                atts.append(att)
                blocks.append((tuple(ck) + pk[l][nb:], tuple(cv) + pv[l][nb:]))
            return (atts[0] if n_parts == 1 else jnp.concatenate(atts)), blocks  # [R, 1, K·H]

        h, blocks = model_lib.decoder_layer(lp, h, positions, attend, cfg=cfg)
        for i, (ck, cv) in enumerate(blocks):
            new[i][0].append(ck)
            new[i][1].append(cv)
    logits = model_lib.logits_from_hidden(w, h[:, 0], cfg=cfg)  # [R, V]
    return logits, tuple((tuple(nk), tuple(nv)) for nk, nv in new)


def _store(x, cache_dtype, cfg: ModelConfig):
    """k or v as a cache block of ``cache_dtype`` holds it: cast, or ``cfg.dtype``'s bits."""
    if cache_dtype == jnp.uint16:
        return _to_bits(x.astype(cfg.dtype))
    return x.astype(cache_dtype)


def _load(c, cfg: ModelConfig):
    """A cache block in ``cfg.dtype`` (from its bits if it holds them)."""
    return (_from_bits(c, cfg.dtype) if c.dtype == jnp.uint16 else c).astype(cfg.dtype)


def _row_parts(R: int, mesh, scfg: SamplerConfig) -> int:
    """How many row parts the decode step's cache writes and attention run in (``decode_token``):
    ``scfg.row_parts``; None = 2 on a single device for an even R >= 8, else 1.

    Why 2 (benchmarks/README.md): XLA:CPU runs each attention reduce and cache scatter on one
    thread; as two independent ops they run on both threads."""
    single = mesh is None and explicit.explicit_mesh() is None
    if scfg.row_parts is None:
        return 2 if single and R % 2 == 0 and R >= 8 else 1
    if scfg.row_parts > 1 and not single:
        raise ValueError(f"SamplerConfig.row_parts={scfg.row_parts} needs a single device (no mesh); use 1 or None")
    if R % scfg.row_parts:
        raise ValueError(f"SamplerConfig.row_parts={scfg.row_parts} must divide the rows of a call, {R}")
    return scfg.row_parts


def _split_parts(cache: Cache, bounds: tuple[int, ...], mesh, parts: int) -> tuple:
    """``split_cache`` of each of ``parts`` equal row ranges: a tuple over parts; a 16-bit cache as
    its bits (``_bits_dtype``: XLA:CPU runs a bf16 scatter as an f32 one on a converted copy of the
    whole block, +2× the cache per layer in the decode loop; on integers it does not)."""
    R = cache["k"].shape[1]
    n = R // parts
    if parts == 1:
        return (split_cache(cache, bounds, mesh, bits=True),)
    return tuple(split_cache(jax.tree.map(lambda c: c[:, i * n:(i + 1) * n], cache), bounds, mesh, bits=True)
                 for i in range(parts))


def _stack_parts(parts: tuple, dtype) -> Cache:
    """Inverse of ``_split_parts`` (the blocks hold ``dtype``'s bits, ``_bits_dtype``)."""
    stacked = [_stack_cache(p, dtype) for p in parts]
    if len(stacked) == 1:
        return stacked[0]
    return jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *stacked)


def advance(tok, done, cur, n_new, limit, stop_ids, L: int):
    """One decode step's row bookkeeping (shared by the static and the continuous loop), rows [R]:
    ``active`` = not done; ``wi`` = the slot the new token goes to (``L``, out of range, for a done
    row: the write is dropped); ``hit`` = an active row drew a stop id; the row's new-token count and
    cursor advance if active; it is done after a stop id, its budget ``limit`` or the buffer's end."""
    active = ~done  # [R]
    wi = jnp.where(active, cur, L)  # [R]
    hit = active & jnp.any(tok[:, None] == stop_ids[None, :], axis=-1)
    n_new = n_new + active.astype(jnp.int32)
    cur = cur + active.astype(jnp.int32)
    return active, wi, hit, n_new, cur, done | hit | (n_new >= limit) | (cur >= L)


def _segments(P: int, T: int, attend_buckets) -> tuple[tuple[int, int], ...]:
    """Static decode segments ``(end_step, A)``: steps ``[prev_end, end_step)`` attend ``A = P +
    end_step`` slots. At step t a row writes and attends slot ``<= P + t`` (rows start at <= P and
    grow by one per step), so ``A`` holds every slot the segment can touch. Segment ends are where
    ``P + t`` crosses a bucket of ``attend_buckets``, and T; e.g. P=16, T=64 with the power-of-two
    buckets -> ((16, 32), (48, 64), (64, 80))."""
    if attend_buckets is None:
        return ((T, P + T),)
    ends = sorted({b - P for b in attend_buckets if P < b < P + T} | {T})
    return tuple((e, P + e) for e in ends)


def _rows_split(s: LoopState) -> LoopState:
    """Under an explicit mesh every per-row field (all but ``step``) split over the batch axes along
    its rows and whole otherwise (the cache blocks' kv heads also over ``tensor`` where
    ``explicit.head_split`` splits them), so that the decode loop's carry keeps one type; else ``s``."""
    if explicit.explicit_mesh() is None:
        return s
    heads = lambda c: explicit.constrain_rows_heads(c, head_axis=1, heads=explicit.head_split(c.shape[1]))  # noqa: E731
    return s.replace(**{f.name: jax.tree.map(heads if f.name == "cache" else explicit.constrain_rows, getattr(s, f.name))
                        for f in dataclasses.fields(s) if f.name != "step"})


def _bits_dtype(dtype):
    """The unsigned integer type of a 2-byte float ``dtype`` (bf16, f16: ``jnp.uint16``), else ``dtype``.

    ``_prefill_blocks`` keeps a 16-bit cache as these bits while it writes and reads it chunk by
    chunk (bitcasts: free): XLA:CPU normalises a bf16 dynamic-update-slice / dynamic-slice to f32
    by converting the *whole* operand, an f32 copy of the layer's cache per chunk, and hoists the
    loop-invariant one out of the key-block loop; on integers it does not. Same bits, same numbers."""
    return jnp.uint16 if jnp.dtype(dtype).itemsize == 2 and jnp.issubdtype(dtype, jnp.floating) else dtype


def _to_bits(x):
    bits = _bits_dtype(x.dtype)
    return x if bits == x.dtype else jax.lax.bitcast_convert_type(x, bits)


def _from_bits(x, dtype):
    return x if x.dtype == jnp.dtype(dtype) else jax.lax.bitcast_convert_type(x, dtype)


def _chunk_attention(q, k, v, kc, vc, i, *, block: int):
    """Query block ``i`` (positions ``i·b .. i·b + b − 1``, b = ``block``) of a prefill: flash
    attention (the online softmax of ``prs.models.blockwise``) over the block's own keys and values
    k, v [R, b, Kv, H] (the diagonal tile, mask key <= query from iotas), then over the earlier
    prompt keys in the decode layout's cache block 0, kc [R, Kv, H, S₀], vc [R, Kv, S₀, H], blocks
    j = 0..i−1 (unmasked) in a ``fori_loop``; the blocks after the diagonal are never read. One
    [R, Kv, G, b, b] f32 tile at a time. q [R, b, K, H] -> [R, b, K·H].

    ``kc``, ``vc`` may hold a 16-bit cache as its unsigned-integer bits (``_prefill_blocks``),
    sliced as such and each tile cast to f32 after its slice."""
    R, b, K, H = q.shape
    Kv = kc.shape[1]
    G = K // Kv
    f32 = jnp.float32
    qh = q.reshape(R, b, Kv, G, H).transpose(0, 2, 3, 1, 4).astype(f32)  # [R, Kv, G, b, H]
    qk = (((4,), (2,)), ((0, 1), (0, 1)))  # [R,Kv,G,b,H] · [R,Kv,H,b] -> [R,Kv,G,b,b]
    pv = (((4,), (2,)), ((0, 1), (0, 1)))  # [R,Kv,G,b,b] · [R,Kv,b,H] -> [R,Kv,G,b,H]
    scale = 1.0 / math.sqrt(H)

    def tile(carry, kj, vj, mask):
        m, l, acc = carry
        sc = jax.lax.dot_general(qh, kj, qk, preferred_element_type=f32) * scale
        if mask is not None:
            sc = jnp.where(mask, sc, model_lib.NEG_INF)
        m_new = jnp.maximum(m, jnp.max(sc, axis=-1, keepdims=True))
        corr = jnp.exp(m - m_new)
        p = jnp.exp(sc - m_new)
        l = l * corr + jnp.sum(p, axis=-1, keepdims=True)
        return m_new, l, acc * corr + jax.lax.dot_general(p, vj, pv, preferred_element_type=f32)

    one = qh[..., :1]
    init = (jnp.full_like(one, model_lib.NEG_INF), jnp.zeros_like(one), jnp.zeros_like(qh))
    ar = jnp.arange(b)
    carry = tile(init, k.transpose(0, 2, 3, 1).astype(f32), v.transpose(0, 2, 1, 3).astype(f32),
                 ar[:, None] >= ar[None, :])  # the diagonal tile

    def key_block(j, carry):
        kj = jax.lax.dynamic_slice_in_dim(kc, j * b, b, axis=3)  # [R, Kv, H, b]
        vj = jax.lax.dynamic_slice_in_dim(vc, j * b, b, axis=2)  # [R, Kv, b, H]
        return tile(carry, _from_bits(kj, k.dtype).astype(f32), _from_bits(vj, v.dtype).astype(f32), None)

    _, l, acc = jax.lax.fori_loop(0, i, key_block, carry)
    out = (acc / l).astype(q.dtype).transpose(0, 3, 1, 2, 4)  # [R, b, Kv, G, H]
    return explicit.reshape_rows(out, (R, b, K * H))


def _prefill_blocks(w: dict, tokens, lengths, *, bounds: tuple[int, ...], cfg: ModelConfig, mesh):
    """A long prompt's prefill straight into the decode loop's cache layout (``split_cache``: per
    layer, per slot block, keys [R, Kv, H, S_b], values [R, Kv, S_b, H]) on the decode weights
    ``w`` (``qwen3.decode_weights``), instead of ``qwen3.prefill``'s stacked [L, R, S, Kv, H] cache
    followed by the split, which holds the cache twice, and its whole-prompt activations.

    Layers unrolled (as the decode step); within a layer a ``lax.scan`` over the P / b prompt chunks
    of b = ``cfg.prefill_block`` tokens (P a multiple of b): chunk i's q, k, v from the layer's
    input, k and v written at slots [i·b, (i+1)·b) of block 0 (every slot, the padding after a
    row's length too: the decode loop overwrites slot ``cur`` before it attends it), flash
    attention against slots [0, (i+1)·b) (``_chunk_attention``), o_proj and the MLP. Live at a
    time: the cache, the hidden states [P/b, R, b, D] twice and one chunk's activations. Same
    equations as ``qwen3.prefill`` (the queries a row's length covers attend only that row's own
    prompt keys); the numbers differ by float rounding. Returns (float32 logits [R, V] after each
    row's last prompt token, the cache as ``split_cache`` gives it)."""
    R, P = tokens.shape
    b = int(cfg.prefill_block)
    nb = P // b
    Kv, H = cfg.n_kv_heads, cfg.head_dim
    dt = cfg.dtype
    toks = tokens.astype(jnp.int32).reshape(R, nb, b).transpose(1, 0, 2)  # [nb, R, b]
    h = jax.vmap(lambda t: explicit.gather_rows(w["embed_tokens"], t).astype(dt))(toks)  # [nb, R, b, D]
    heads = explicit.head_split(Kv)  # explicit mesh: the cache's kv heads split over tensor too

    def write_attend(q, k, v, kc, vc, i):
        """Chunk i's attention and its k, v written at slots [i·b, (i+1)·b) of block 0."""
        k, v = k.astype(dt), v.astype(dt)  # attended as the cache holds them
        att = _chunk_attention(q, k, v, kc, vc, i, block=b)
        return (att, jax.lax.dynamic_update_slice_in_dim(kc, _to_bits(k.transpose(0, 2, 3, 1)), i * b, axis=3),
                jax.lax.dynamic_update_slice_in_dim(vc, _to_bits(v.transpose(0, 2, 1, 3)), i * b, axis=2))

    ks, vs = [], []
    for lp in (model_lib.layer_weights(w, l) for l in range(cfg.n_layers)):
        def chunk(carry, xs, lp=lp):
            kc, vc = carry
            hi, i = xs  # [R, b, D], []
            pos = jnp.broadcast_to(i * b + jnp.arange(b, dtype=jnp.int32), (R, b))

            def attend(q, k, v):  # chunked prefill mode: flash over the chunk and the cached chunks before it
                if heads is None:
                    q, k, v = (explicit.keep_rows(x) for x in (q, k, v))
                    att, kn, vn = write_attend(q, k, v, kc, vc, i)
                else:  # each device its own rows' and kv heads' block of the cache
                    q, k, v = (explicit.constrain_rows_heads(x, head_axis=2, heads=heads) for x in (q, k, v))
                    r = explicit.row_spec(jax.sharding.get_abstract_mesh(), 1)[0]
                    qs, cs = PartitionSpec(r, None, heads, None), PartitionSpec(r, heads, None, None)
                    att, kn, vn = explicit.per_shard(write_attend, (q, k, v, kc, vc, i), (qs, qs, qs, cs, cs, PartitionSpec()),
                                                     (PartitionSpec(r, None, heads), cs, cs))
                return att, (kn, vn)

            hi, (kc, vc) = model_lib.decoder_layer(lp, hi, pos, attend, cfg=cfg)
            return (kc, vc), hi

        S0, bits = bounds[1], _bits_dtype(dt)
        init = (_constrain(explicit.zeros((R, Kv, H, S0), bits, row_axis=0, head_axis=1), mesh, 0, 1),
                _constrain(explicit.zeros((R, Kv, S0, H), bits, row_axis=0, head_axis=1), mesh, 0, 1))
        (kc, vc), h = jax.lax.scan(chunk, init, (h, jnp.arange(nb, dtype=jnp.int32)))  # bits, as the loop holds them
        rest = [(_constrain(explicit.zeros((R, Kv, H, bb - a), bits, row_axis=0, head_axis=1), mesh, 0, 1),
                 _constrain(explicit.zeros((R, Kv, bb - a, H), bits, row_axis=0, head_axis=1), mesh, 0, 1))
                for a, bb in zip(bounds[1:-1], bounds[2:])]
        ks.append((kc,) + tuple(x for x, _ in rest))
        vs.append((vc,) + tuple(y for _, y in rest))
    last = jnp.maximum(lengths - 1, 0).astype(jnp.int32)  # [R]
    hr = explicit.reshape_rows(h.transpose(1, 0, 2, 3), (R, P, h.shape[-1]))  # [R, P, D]
    hl = jnp.take_along_axis(hr, last[:, None, None], axis=1)[:, 0]  # [R, D]
    return model_lib.logits_from_hidden(w, hl, cfg=cfg), (tuple(ks), tuple(vs))


def _long_prefill(P: int, cfg: ModelConfig, parts: int) -> bool:
    """Whether ``_sample_state`` prefills with ``_prefill_blocks``: prompts of at least
    ``cfg.prefill_flash_from`` slots that are a multiple of ``cfg.prefill_block``, one row part."""
    return (cfg.prefill_flash_from is not None and P >= cfg.prefill_flash_from and P % cfg.prefill_block == 0
            and parts == 1)


def _decode_loop(params, state: LoopState, key, row0, *, cfg: ModelConfig, scfg: SamplerConfig,
                 mesh: Mesh | None, w: dict | None = None) -> LoopState:
    """The decode ``while_loop``, in ``_segments`` (each its own loop over a static attended length);
    each segment exits early when every row has stopped, and the next one then runs no step."""
    T = scfg.max_new_tokens
    R, L = state.tokens.shape
    stop_ids = jnp.asarray(scfg.all_stop_ids or (-1,), jnp.int32)
    ar = explicit.constrain_rows(jnp.arange(R))  # [R]; explicit mesh: split like the rows
    keys = explicit.constrain_rows(row_keys(key, row0, R))  # [R]; explicit mesh: split like the rows
    w = _weights(params, cfg, scfg) if w is None else w
    bounds = (0,) + tuple(A for _, A in _segments(L - T, T, scfg.attend_buckets))  # the cache's blocks

    def body(s: LoopState, nb: int):
        step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, s.step)
        tok, lp, samp = choose_tokens(s.logits, step_keys, scfg)
        active, wi, hit, n_new, cur, done = advance(tok, s.done, s.cur, s.n_new, s.limit, stop_ids, L)
        logits, cache = decode_token(w, s.cache, tok, s.cur, active, bounds=bounds[:nb + 1], cfg=cfg)
        cache = jax.tree.map(lambda c: _constrain(c, mesh, 0, 1), cache)
        return _rows_split(LoopState(
            step=s.step + 1,
            tokens=_constrain(s.tokens.at[ar, wi].set(tok, mode="drop", out_sharding=explicit.same(s.tokens)), mesh),
            policy_mask=s.policy_mask.at[ar, wi].set(True, mode="drop", out_sharding=explicit.same(s.policy_mask)),
            logprobs=s.logprobs.at[ar, wi].set(lp, mode="drop", out_sharding=explicit.same(s.logprobs)),
            sampling_logprobs=s.sampling_logprobs.at[ar, wi].set(samp, mode="drop", out_sharding=explicit.same(s.sampling_logprobs)),
            cur=cur, n_new=n_new, done=done,
            stop_token=jnp.where(hit, tok, s.stop_token), limit=s.limit,
            logits=logits,  # rows already done get junk logits, never used
            cache=cache,
        ))

    state = _rows_split(state)
    for nb, (end, _) in enumerate(_segments(L - T, T, scfg.attend_buckets), start=1):
        state = jax.lax.while_loop(lambda s, end=end: (s.step < end) & ~jnp.all(s.done),
                                   functools.partial(body, nb=nb), state)
    return state


def finish_rollout(s: LoopState, prompt_lengths, prev: Rollout | None, resumed, scfg: SamplerConfig) -> Rollout:
    """The ``Rollout`` of a finished loop state: tokens / masks / log-probs zeroed past each row's
    length ``s.cur``, positions = max(cumsum(valid) − 1, 0); ``prev`` and ``resumed [R]`` (a resumed
    turn): rows not resumed keep ``prev``'s flags."""
    L = s.tokens.shape[1]
    idx = jnp.arange(L)[None, :]
    valid = idx < s.cur[:, None]
    positions = jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1, 0)
    finished = s.stop_token >= 0
    truncated = ~finished
    if prev is not None:
        finished = jnp.where(resumed, finished, prev.finished)
        truncated = jnp.where(resumed, truncated, prev.truncated)
    return Rollout(
        tokens=jnp.where(valid, s.tokens, scfg.pad_id).astype(jnp.int32),
        policy_mask=s.policy_mask & valid,
        logprobs=jnp.where(valid, s.logprobs, 0.0),
        sampling_logprobs=jnp.where(valid, s.sampling_logprobs, 0.0),
        valid=valid, positions=positions, prompt_lengths=prompt_lengths, lengths=s.cur,
        finished=finished, truncated=truncated,
        stop_token=s.stop_token if prev is None else jnp.where(resumed, s.stop_token, prev.stop_token),
    )


@functools.partial(jax.jit, static_argnames=("cfg", "scfg", "mesh", "return_cache"))
@explicit.in_mesh  # an explicit-axes mesh: shardings are in the traced types
def sample_jit(params, tokens, lengths, key, budget, row0=0, *, cfg: ModelConfig, scfg: SamplerConfig, mesh,
                return_cache: bool = True):
    s = _sample_state(params, tokens, lengths, key, budget, row0, cfg=cfg, scfg=scfg, mesh=mesh)
    return finish_rollout(s, lengths.astype(jnp.int32), None, None, scfg), (_stack_parts(s.cache, cfg.dtype) if return_cache else None)


def _sample_state(params, tokens, lengths, key, budget, row0=0, *, cfg: ModelConfig, scfg: SamplerConfig,
                  mesh) -> LoopState:
    """Prefill and the decode loop; the final loop state (``step`` = decode steps run: the loop
    exits as soon as every row has stopped, tested). ``budget [R]``: tokens each row may generate;
    ``row0``: index of the first row in the whole batch (per-row keys, ``row_chunk``)."""
    R, P = tokens.shape
    L = P + scfg.max_new_tokens
    parts = _row_parts(R, mesh, scfg)
    G = scfg.prefill_group
    first = (lambda x: x) if G == 1 else (lambda x: _group_firsts(x, G))  # one row per group prefilled
    spread = (lambda x, axis, head_axis=None: x) if G == 1 else functools.partial(_repeat_rows, G=G)
    w = None
    if _long_prefill(P, cfg, parts):  # the prefill writes the decode layout itself (no stacked copy)
        w = _weights(params, cfg, scfg)
        logits, split = _prefill_blocks(w, first(tokens), first(lengths), bounds=_blocks(P, scfg), cfg=cfg, mesh=mesh)
        split = (jax.tree.map(lambda c: _constrain(spread(c, 0, 1), mesh, 0, 1), split),)
    else:
        logits, cache = model_lib.prefill(params, first(tokens), first(lengths), cfg=cfg, max_len=L)
        split = _split_parts(jax.tree.map(lambda c: spread(c, 1, 3), cache), _blocks(P, scfg), mesh, parts)
    logits = spread(logits, 0)
    buf = jnp.pad(tokens.astype(jnp.int32), ((0, 0), (0, L - P)), constant_values=scfg.pad_id)
    zeros = jnp.zeros((R, L), jnp.float32)
    state = LoopState(
        step=jnp.zeros((), jnp.int32), tokens=_constrain(buf, mesh),
        policy_mask=jnp.zeros((R, L), bool), logprobs=zeros, sampling_logprobs=zeros,
        cur=lengths.astype(jnp.int32), n_new=jnp.zeros((R,), jnp.int32),
        done=jnp.zeros((R,), bool), stop_token=jnp.full((R,), -1, jnp.int32), limit=budget.astype(jnp.int32),
        logits=logits, cache=split,
    )
    return _decode_loop(params, state, key, row0, cfg=cfg, scfg=scfg, mesh=mesh, w=w)


def _group_firsts(x: jax.Array, G: int) -> jax.Array:
    """Row 0 of every group of ``G`` consecutive rows: x [R, ...] -> [R / G, ...] (under an explicit
    mesh in an ``auto_axes`` region, the output's rows split over the batch axes)."""
    take = lambda y: y[::G]  # noqa: E731
    if explicit.explicit_mesh() is None:
        return take(x)
    return jax.sharding.auto_axes(take, out_sharding=explicit.rows_heads_spec(x.ndim))(x)


def _repeat_rows(x: jax.Array, axis: int, head_axis: int | None = None, *, G: int) -> jax.Array:
    """Each row (along ``axis``) repeated ``G`` times: a group's prefill broadcast to its G rows.
    Under an explicit mesh in an ``auto_axes`` region, rows split over the batch axes and the KV
    cache's ``head_axis`` over ``tensor`` where ``explicit.head_split`` splits it."""
    rep = lambda y: jnp.repeat(y, G, axis=axis)  # noqa: E731
    if explicit.explicit_mesh() is None:
        return rep(x)
    heads = None if head_axis is None else explicit.head_split(x.shape[head_axis])
    return jax.sharding.auto_axes(rep, out_sharding=explicit.rows_heads_spec(x.ndim, row_axis=axis, head_axis=head_axis,
                                                                             heads=heads))(x)


def _weights(params: Params, cfg: ModelConfig, scfg: SamplerConfig) -> Params:
    """The decode loop's weights (``SamplerConfig.weights_layout``): ``qwen3.decode_weights`` (joined,
    split per layer once per call: a second copy of the matmul weights) or the parameters as they
    are (the training layout, sliced per layer inside each step)."""
    return model_lib.decode_weights(params, cfg) if scfg.weights_layout == "joined" else params


def _blocks(P: int, scfg: SamplerConfig) -> tuple[int, ...]:
    """Slot-block bounds of the decode cache: 0 and each segment's attended length (``_segments``)."""
    return (0,) + tuple(A for _, A in _segments(P, scfg.max_new_tokens, scfg.attend_buckets))


@functools.partial(jax.jit, static_argnames=("cfg", "scfg", "mesh"))
@explicit.in_mesh  # an explicit-axes mesh: shardings are in the traced types
def _resume_jit(params, prev: Rollout, cache, obs, obs_lengths, key, *, cfg: ModelConfig,
                scfg: SamplerConfig, mesh):
    R, L0 = prev.tokens.shape
    O = obs.shape[1]
    T = scfg.max_new_tokens
    L = L0 + O + T
    grow = lambda x, v: jnp.pad(x, ((0, 0), (0, L - L0)), constant_values=v)
    cache = jax.tree.map(lambda c: _constrain(jnp.pad(c, ((0, 0), (0, 0), (0, L - L0), (0, 0), (0, 0))), mesh, 1, 3),
                         cache)
    resumed = obs_lengths > 0  # [R]
    pos = prev.lengths[:, None] + jnp.arange(O, dtype=jnp.int32)[None, :]  # [R, O]
    write = jnp.arange(O)[None, :] < obs_lengths[:, None]  # [R, O]
    h, cache = model_lib.extend(params, cache, obs.astype(jnp.int32), pos, write, cfg=cfg, kv_len=L0 + O)
    last = jnp.take_along_axis(h, jnp.maximum(obs_lengths - 1, 0)[:, None, None].astype(jnp.int32), axis=1)[:, 0]
    logits = model_lib.logits_from_hidden(params, last, cfg=cfg)
    tokens = grow(prev.tokens, scfg.pad_id)
    rows = jnp.arange(R)[:, None]
    tokens = tokens.at[rows, jnp.where(write, pos, L)].set(obs.astype(jnp.int32), mode="drop",
                                                           out_sharding=explicit.same(tokens))
    cur = prev.lengths + obs_lengths.astype(jnp.int32)
    state = LoopState(
        step=jnp.zeros((), jnp.int32), tokens=_constrain(tokens, mesh),
        policy_mask=grow(prev.policy_mask, False), logprobs=grow(prev.logprobs, 0.0),
        sampling_logprobs=grow(prev.sampling_logprobs, 0.0),
        cur=cur, n_new=jnp.zeros((R,), jnp.int32), done=~resumed,
        stop_token=jnp.full((R,), -1, jnp.int32), limit=jnp.full((R,), T, jnp.int32), logits=logits,
        cache=_split_parts(cache, _blocks(L0 + O, scfg), mesh, _row_parts(R, mesh, scfg)),
    )
    s = _decode_loop(params, state, key, 0, cfg=cfg, scfg=scfg, mesh=mesh)
    return finish_rollout(s, prev.prompt_lengths, prev, resumed, scfg), _stack_parts(s.cache, cfg.dtype)


# ----------------------------------------------------------------------------- public API


def validate_rows(name, tokens, lengths, cfg: ModelConfig, *, allow_empty: bool):
    """Host copies of ``tokens [R, P]`` and ``lengths [R]`` after the checks every entry point makes
    (rank, integer ids inside the vocabulary, lengths in [1 or 0, P]); a ValueError naming ``name``."""
    tokens_np, lengths_np = np.asarray(tokens), np.asarray(lengths)
    if tokens_np.ndim != 2:
        raise ValueError(f"{name} must be [R, P], got shape {tokens_np.shape}")
    if not np.issubdtype(tokens_np.dtype, np.integer):
        raise ValueError(f"{name} must be integer token ids, got dtype {tokens_np.dtype}")
    R, P = tokens_np.shape
    if lengths_np.shape != (R,):
        raise ValueError(f"lengths for {name} must have shape {(R,)}, got {lengths_np.shape}")
    lo = 0 if allow_empty else 1
    if R and (lengths_np.min() < lo or lengths_np.max() > P):
        bad = np.flatnonzero((lengths_np < lo) | (lengths_np > P))
        raise ValueError(f"lengths for {name} must be in [{lo}, {P}] (empty rows are not allowed for prompts); "
                         f"rows {bad[:8].tolist()} have lengths {lengths_np[bad[:8]].tolist()}")
    in_row = np.arange(P)[None, :] < lengths_np[:, None]
    if np.any(in_row & ((tokens_np < 0) | (tokens_np >= cfg.vocab_size))):
        raise ValueError(f"{name} has token ids outside [0, {cfg.vocab_size}) within the row lengths")
    return tokens_np, lengths_np


def _place(mesh, params, *arrays):
    if mesh is None:
        return (params, *arrays)
    return (sampler_placement(params, mesh), *shard_batch(tuple(arrays), mesh))


def _all_rows_over_mesh(mesh, tree):
    """On a mesh: every leaf of ``tree`` (all R rows: host-built, or a previous call's global
    output) as an array row-split over ``mesh`` (with several processes each feeds its own rows),
    so the jitted resume sees the rows' split in its types (Explicit axes); no mesh: ``tree``."""
    if mesh is None:
        return tree
    return jax.tree.map(lambda x: shard_rows(x, data_sharding(mesh, np.ndim(x))), tree)


def all_rows_on_host(x) -> np.ndarray:
    """A host copy of all rows of ``x`` (gathered from every process if it spans several)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils as mhu

        return np.asarray(mhu.process_allgather(x, tiled=True))
    return np.asarray(x)


def _place_all_rows(mesh, params, *arrays):
    """``_place`` for arrays of *all* R rows that every process holds in full (observations, a
    rebuilt context): with several processes each feeds only its own rows
    (``prs.parallel.sharding.shard_rows``), global arrays are left as they are."""
    if mesh is None or jax.process_count() == 1:
        return _place(mesh, params, *arrays)
    return (sampler_placement(params, mesh),
            *(shard_rows(a, data_sharding(mesh, np.ndim(a))) for a in arrays))


def _check_groups(padded: np.ndarray, lengths: np.ndarray, chunk: int, mesh, scfg: SamplerConfig) -> None:
    """``SamplerConfig.prefill_group`` G's promises, on the host: G divides the rows of a call, each
    group's rows are equal (tokens within the length, lengths), on a mesh R / G splits evenly."""
    G = scfg.prefill_group
    if G == 1:
        return
    R = lengths.shape[0]
    if chunk % G or R % G:
        raise ValueError(f"SamplerConfig.prefill_group={G} must divide the rows of a call ({R}, row_chunk {chunk})")
    grouped = padded.reshape(R // G, G, -1)
    if np.any(lengths.reshape(-1, G) != lengths.reshape(-1, G)[:, :1]) or np.any(grouped != grouped[:, :1]):
        raise ValueError(f"SamplerConfig.prefill_group={G}: the rows of each group of {G} must be equal "
                         f"(one prompt + prefix per group)")
    if mesh is not None:
        n_dev = batch_size_multiple(mesh)
        if (chunk // G) % n_dev:
            raise ValueError(f"SamplerConfig.prefill_group={G}: rows per call / G = {chunk // G} must be divisible "
                             f"by the mesh's batch shards {n_dev}")


def sample(params: Params, tokens, lengths, key: jax.Array, *, cfg: ModelConfig, scfg: SamplerConfig,
           mesh: Mesh | None = None, return_cache: bool = False, budget=None):
    """Generates up to ``scfg.max_new_tokens`` tokens after each row of ``tokens [R, P]``.

    Args:
      params: model parameters (replicated on ``mesh`` if given).
      tokens: [R, P] int, prompt + replayed prefix, right-padded. lengths: [R] int in [1, P].
      key: PRNG key. Row r samples from its own stream ``fold_in(key, r)`` (then ``fold_in(., step)``),
        so the same key gives the same tokens for any sharding or ``scfg.row_chunk`` of the batch.
      cfg, scfg: model and sampler configs (static). With ``scfg.row_chunk`` the rows are sampled
        in chunks of that many rows (see ``SamplerConfig``); ``append_and_resume`` does not chunk.
      mesh: if given, the batch is split over its ``data`` axis (R divisible by its size).
      return_cache: also return the KV cache for ``append_and_resume``.
      budget: optional [R] int in [1, T]: row r stops after ``budget[r]`` generated tokens (a
        re-rollout whose replayed prefix already used part of the response budget); default T.
        The shapes stay those of T, so a budget never causes a compile.
    Returns:
      ``Rollout`` (or ``(Rollout, cache)``); see its docstring.
    Raises:
      ValueError on bad shapes, empty rows, out-of-vocabulary ids, or ``P_bucket + T > scfg.max_len``.
    """
    tokens_np, lengths_np = validate_rows("tokens", tokens, lengths, cfg, allow_empty=False)
    padded = pad_to_bucket(tokens_np, lengths_np, pad_id=scfg.pad_id, buckets=scfg.buckets)
    need = padded.shape[1] + scfg.max_new_tokens
    if scfg.max_len is not None and need > scfg.max_len:
        raise ValueError(f"sample: prompt width {padded.shape[1]} (bucketed from max length "
                         f"{int(lengths_np.max())}) + max_new_tokens {scfg.max_new_tokens} = {need} "
                         f"exceeds the cache length max_len={scfg.max_len}")
    T = scfg.max_new_tokens
    if budget is None:
        budget_np = np.full(lengths_np.shape, T, np.int32)
    else:
        budget_np = np.asarray(budget)
        if budget_np.shape != lengths_np.shape or not np.issubdtype(budget_np.dtype, np.integer):
            raise ValueError(f"sample: budget must be an int array of shape {lengths_np.shape}, got "
                             f"{budget_np.dtype} {budget_np.shape}")
        if budget_np.size and (budget_np.min() < 1 or budget_np.max() > T):
            raise ValueError(f"sample: budget must lie in [1, max_new_tokens={T}], got "
                             f"[{budget_np.min()}, {budget_np.max()}]")
    R = lengths_np.shape[0]
    chunk = R if scfg.row_chunk is None else min(int(scfg.row_chunk), R)
    _check_groups(padded, lengths_np, chunk, mesh, scfg)
    core = dataclasses.replace(scfg, row_chunk=None)  # chunked and whole calls share one compile
    if mesh is not None and scfg.row_chunk is not None:
        ax = batch_axes(mesh)
        n_dev = int(np.prod([mesh.shape[a] for a in ((ax,) if isinstance(ax, str) else ax or ())]))
        if chunk % n_dev:
            raise ValueError(f"sample: row_chunk={scfg.row_chunk} must be divisible by the mesh's batch size {n_dev}")
    lengths_np, budget_np = lengths_np.astype(np.int32), budget_np.astype(np.int32)
    n_chunks = -(-R // chunk)
    if n_chunks > 1 and R % chunk:  # pad with dummy rows (length 1, budget 1) to whole chunks
        extra = n_chunks * chunk - R
        padded = np.concatenate([padded, np.full((extra, padded.shape[1]), scfg.pad_id, np.int32)])
        lengths_np = np.concatenate([lengths_np, np.ones(extra, np.int32)])
        budget_np = np.concatenate([budget_np, np.ones(extra, np.int32)])
    parts = []
    for c in range(n_chunks):
        sl = slice(c * chunk, (c + 1) * chunk)
        p_j, tok_j, len_j, bud_j = _place(mesh, params, padded[sl], lengths_np[sl], budget_np[sl])
        parts.append(sample_jit(p_j, tok_j, len_j, key, bud_j, np.int32(c * chunk), cfg=cfg, scfg=core,
                                 mesh=mesh, return_cache=return_cache))
    if n_chunks == 1:
        rollout, cache = parts[0]
    else:  # rows back in order; the dummy rows dropped
        rollout = jax.tree.map(lambda *xs: jnp.concatenate(xs)[:R], *[r for r, _ in parts])
        cache = (jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1)[:, :R], *[c for _, c in parts])
                 if return_cache else None)
    return (rollout, cache) if return_cache else rollout


def sample_all_rows(params: Params, tokens, lengths, key: jax.Array, *, cfg: ModelConfig, scfg: SamplerConfig,
                    mesh: Mesh | None = None, return_cache: bool = False, budget=None):
    """``sample`` for rows ``tokens [R, P]`` (``lengths``, ``budget`` [R]) that every process holds
    in full (the same values everywhere), as ``append_and_resume`` takes its observations. One
    process: ``sample`` itself. Several (``mesh`` spans them): each process feeds only its own
    rows (``prs.parallel.sharding.process_rows``), all padded to the width of the longest row of
    the *whole* batch, and the rows are decoded as one SPMD program, so the tokens are those of a
    single-process call with the same key; the outputs are global arrays (``all_rows_on_host``
    gathers them)."""
    if mesh is None or jax.process_count() == 1:
        return sample(params, tokens, lengths, key, cfg=cfg, scfg=scfg, mesh=mesh, return_cache=return_cache,
                      budget=budget)
    tokens, lengths = np.asarray(tokens), np.asarray(lengths)
    need = int(lengths.max()) if lengths.size else 0
    width = need if scfg.buckets is None else bucket_length(need, scfg.buckets)
    scfg = dataclasses.replace(scfg, buckets=(max(width, 1),))  # one width on every process
    mine = process_rows(mesh, tokens.shape[0])
    return sample(params, tokens[mine], lengths[mine], key, cfg=cfg, scfg=scfg, mesh=mesh, return_cache=return_cache,
                  budget=None if budget is None else np.asarray(budget)[mine])


def append_and_resume(params: Params, rollout: Rollout, obs_tokens, obs_lengths, key: jax.Array, *,
                      cfg: ModelConfig, scfg: SamplerConfig, cache: Cache | None = None,
                      mesh: Mesh | None = None, return_cache: bool = False):
    """Appends observation tokens ``obs_tokens [R, O]`` (``obs_lengths [R]``, right-padded; policy
    mask 0) after each row and generates the next turn. Rows with ``obs_lengths == 0`` are left
    as they are. With ``cache`` (from ``sample(..., return_cache=True)`` or a previous resume; it is
    donated) only the observation tokens are run through the model; with ``cache=None`` the whole
    conversation is re-prefilled. Returns a ``Rollout`` widened by ``O + T`` (or ``(Rollout, cache)``).
    """
    obs_np, ol_np = validate_rows("obs_tokens", obs_tokens, obs_lengths, cfg, allow_empty=True)
    R, L0 = rollout.tokens.shape
    if obs_np.shape[0] != R:
        raise ValueError(f"obs_tokens has {obs_np.shape[0]} rows, the rollout has {R}")
    if obs_np.shape[1] == 0:
        raise ValueError("obs_tokens must have width O >= 1 (use obs_lengths == 0 to skip rows)")
    if scfg.max_len is not None and L0 + obs_np.shape[1] + scfg.max_new_tokens > scfg.max_len:
        raise ValueError(f"append_and_resume: {L0} + O={obs_np.shape[1]} + T={scfg.max_new_tokens} "
                         f"exceeds max_len={scfg.max_len}")
    if cache is None:
        return _resume_by_prefill(params, rollout, obs_np, ol_np, key, cfg=cfg, scfg=scfg, mesh=mesh,
                                  return_cache=return_cache)
    if cache["k"].shape[1:3] != (R, L0):
        raise ValueError(f"cache has rows/slots {tuple(cache['k'].shape[1:3])}, the rollout is {(R, L0)}")
    params, obs_j, ol_j = _place_all_rows(mesh, params, obs_np.astype(np.int32), ol_np.astype(np.int32))
    rollout = _all_rows_over_mesh(mesh, rollout)
    out, cache = _resume_jit(params, rollout, cache, obs_j, ol_j, key, cfg=cfg, scfg=scfg, mesh=mesh)
    return (out, cache) if return_cache else out


def _resume_by_prefill(params, rollout: Rollout, obs_np, ol_np, key, *, cfg, scfg, mesh, return_cache):
    """Re-prefill path: run the cached path on a freshly prefilled cache of the same shape.

    Same shapes and the same loop as the cache path, so the same key gives the same tokens."""
    R, L0 = rollout.tokens.shape
    rows_tokens, lengths = all_rows_on_host(rollout.tokens), all_rows_on_host(rollout.lengths).astype(np.int32)
    params_p, toks_j, len_j = _place_all_rows(mesh, params, rows_tokens.astype(np.int32), lengths)
    cache = _prefill_jit(params_p, toks_j, len_j, cfg=cfg, mesh=mesh)
    params_p, obs_j, ol_j = _place_all_rows(mesh, params, obs_np.astype(np.int32), ol_np.astype(np.int32))
    rollout = _all_rows_over_mesh(mesh, rollout)  # several processes: a host-built rollout placed like the cache
    out, cache = _resume_jit(params_p, rollout, cache, obs_j, ol_j, key, cfg=cfg, scfg=scfg, mesh=mesh)
    return (out, cache) if return_cache else out


@functools.partial(jax.jit, static_argnames=("cfg", "mesh"))
@explicit.in_mesh  # an explicit-axes mesh: shardings are in the traced types
def _prefill_jit(params, tokens, lengths, *, cfg, mesh):
    _, cache = model_lib.prefill(params, tokens, lengths, cfg=cfg, max_len=tokens.shape[1])
    return jax.tree.map(lambda c: _constrain(c, mesh, 1, 3), cache)
