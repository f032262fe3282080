"""Blockwise (flash-style) attention for the training forward/backward (opt-in).

softmax(q kᵀ/√H + mask) v with grouped-query heads, computed per (row chunk, query block, key block)
tile with an online softmax (FlashAttention, Dao et al. 2022, arXiv:2205.14135) and a hand-written
backward that keeps only the output and the row statistics (max, 1/sum) and recomputes each tile's
probabilities (FlashAttention-2, Dao 2023, arXiv:2307.08691, Algorithms 1 and 2):

  forward, per query block i over its key blocks j:   S_ij = Q_i K_jᵀ/√H (masked to −∞),
    m_i' = max(m_i, rowmax S_ij),  P̃_ij = exp(S_ij − m_i'),  ℓ_i' = e^{m_i − m_i'} ℓ_i + rowsum P̃_ij,
    O_i' = e^{m_i − m_i'} O_i + P̃_ij V_j;   finally O_i = O_i / ℓ_i (m_i and 1/ℓ_i kept).
  backward:  D_i = rowsum(dO_i ⊙ O_i),  P_ij = exp(S_ij − m_i) / ℓ_i,  dV_j += P_ijᵀ dO_i,
    dP_ij = dO_i V_jᵀ,  dS_ij = mask ⊙ P_ij ⊙ (dP_ij − D_i) / √H,  dQ_i += dS_ij K_j,  dK_j += dS_ijᵀ Q_i.

XLA:CPU materialises every fusion's result in memory, so the win here is not SRAM residency as on a
GPU but (1) a ``lax.map`` over row chunks that keeps each chunk's [c, Kv, G, T, S] score tiles
small enough for the core's cache, (2) causal block skipping (``causal=True``: key blocks wholly
above a query block's diagonal are never computed), (3) no [R, Kv, G·T, S] probability tensor kept
from the forward for the backward, and (4) the heads-major layout ([c, Kv, T, G, H], "tg", or
[c, Kv, G, T, H], "gt") made inside the chunk (no whole-batch transposes; the mask is broadcast over
heads, never tiled). Its timings against the reference: benchmarks/README.md.

Same equation as ``qwen3._attention_einsum``; not bit-identical to the ``reference`` impl (different
summation order). A query row with no visible key gets the uniform average over the keys of the
blocks it visits (all S keys when ``causal=False``, as the reference does), finite, with zero
query/key gradient.

Shapes: q [R, T, K, H]; k, v [R, S, Kv, H]; mask [R, T, S] bool (True = may attend) -> [R, T, K·H].
"""
from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from prs.parallel import explicit

NEG = -1e30  # the finite "minus infinity" of qwen3.NEG_INF (fully masked rows stay finite)
f32 = jnp.float32

# dot_general numbers over the [c, Kv] batch axes of the chunk layout q [c,Kv,G,t,H], k/v [c,Kv,s,H]
_QK = (((4,), (3,)), ((0, 1), (0, 1)))  # [c,Kv,G,t,H] · [c,Kv,s,H] -> [c,Kv,G,t,s]
_PV = (((4,), (2,)), ((0, 1), (0, 1)))  # [c,Kv,G,t,s] · [c,Kv,s,H] -> [c,Kv,G,t,H]
_PT = (((2, 3), (2, 3)), ((0, 1), (0, 1)))  # [c,Kv,G,t,s] · [c,Kv,G,t,H] -> [c,Kv,s,H]


def _edges(n: int, blocks: int) -> list[int]:
    b = max(1, min(int(blocks), n))
    return [i * n // b for i in range(b + 1)]


def _tiles(T: int, S: int, q_blocks: int, k_blocks: int, causal: bool):
    """[(q_lo, q_hi, [(k_lo, k_hi), ...])]: with ``causal`` (S = T), key blocks starting after the
    query block's last query are dropped. ``k_blocks = 0``: one key block per query block, all the
    keys it can see ([0, q_hi) when causal, else [0, S)): a plain softmax, no online rescaling."""
    qe = _edges(T, q_blocks)
    if k_blocks == 0:
        return [(qlo, qhi, [(0, qhi if causal else S)]) for qlo, qhi in zip(qe[:-1], qe[1:])]
    ke = _edges(S, k_blocks)
    out = []
    for qlo, qhi in zip(qe[:-1], qe[1:]):
        ks = [(klo, khi) for klo, khi in zip(ke[:-1], ke[1:]) if not (causal and klo >= qhi)]
        out.append((qlo, qhi, ks))
    return out


# query layouts of a chunk: "gt" = [c, Kv, G, T, H] (query head g's rows contiguous, as the
# reference's heads-major [R, Kv, G·T, H]); "tg" = [c, Kv, T, G, H] (a query block's rows contiguous)
_TAXIS = {"gt": 3, "tg": 2}


def _to_h(x, layout):
    """[c, T, Kv, G, H] -> the chunk layout."""
    return x.transpose(0, 2, 3, 1, 4) if layout == "gt" else x.transpose(0, 2, 1, 3, 4)


def _from_h(x, layout):
    """The chunk layout -> [c, T, Kv, G, H]."""
    return x.transpose(0, 3, 1, 2, 4) if layout == "gt" else x.transpose(0, 2, 1, 3, 4)


def _tslice(x, lo, hi, layout):
    return jax.lax.slice_in_dim(x, lo, hi, axis=_TAXIS[layout])


def _tcat(xs, layout):
    return xs[0] if len(xs) == 1 else jnp.concatenate(xs, axis=_TAXIS[layout])


def _bmask(mij, layout):
    """[c, t, s] -> broadcastable against the scores [c, Kv, G, t, s] / [c, Kv, t, G, s]."""
    return mij[:, None, None] if layout == "gt" else mij[:, None, :, None, :]


def _layout(q, k, v, Kv, layout):
    """q [c,T,K,H] -> [c,Kv,G,T,H] ("gt") or [c,Kv,T,G,H] ("tg"); k, v [c,S,Kv,H] -> [c,Kv,S,H]."""
    c, T, K, H = q.shape
    return _to_h(q.reshape(c, T, Kv, K // Kv, H), layout), k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)


def _scores(qi, kj, mij, H, layout):
    s = jax.lax.dot_general(qi, kj, _QK, preferred_element_type=f32) / math.sqrt(H)
    return jnp.where(_bmask(mij, layout), s, NEG)  # [c, Kv, G, t, s] / [c, Kv, t, G, s]


def _fwd_chunk(q, k, v, mask, *, tiles, layout):
    """One row chunk: q [c,T,K,H], k/v [c,S,Kv,H], mask [c,T,S] -> out [c,T,K·H], stats [c,Kv,G,T,2]
    (row max m and 1/ℓ: kept apart rather than as L = m + log ℓ, which rounds to m = −1e30 on a
    fully masked row and would lose its 1/ℓ)."""
    c, T, K, H = q.shape
    Kv = k.shape[2]
    qh, kh, vh = _layout(q, k, v, Kv, layout)
    outs, lses = [], []
    for qlo, qhi, ks in tiles:
        qi = _tslice(qh, qlo, qhi, layout)
        m = l = acc = None
        for klo, khi in ks:
            s = _scores(qi, kh[:, :, klo:khi], mask[:, qlo:qhi, klo:khi], H, layout)
            mx = jnp.max(s, axis=-1, keepdims=True)
            if m is None:
                m_new = mx
                p = jnp.exp(s - m_new)
                l = jnp.sum(p, axis=-1, keepdims=True)
                acc = jax.lax.dot_general(p.astype(vh.dtype), vh[:, :, klo:khi], _PV, preferred_element_type=f32)
            else:
                m_new = jnp.maximum(m, mx)
                corr = jnp.exp(m - m_new)
                p = jnp.exp(s - m_new)
                l = l * corr + jnp.sum(p, axis=-1, keepdims=True)
                acc = acc * corr + jax.lax.dot_general(p.astype(vh.dtype), vh[:, :, klo:khi], _PV,
                                                       preferred_element_type=f32)
            m = m_new
        outs.append(acc / l)  # [c, Kv, G, t, H]
        lses.append(jnp.concatenate([m, 1.0 / l], axis=-1))  # [c, Kv, G, t, 2]: row max, 1 / row sum
    out = _from_h(_tcat(outs, layout), layout).reshape(c, T, K * H).astype(q.dtype)
    lse = _tcat(lses, layout)
    return out, lse


def _bwd_chunk(q, k, v, mask, out, lse, d_out, *, tiles, layout):
    """Gradients of one row chunk (FlashAttention-2 backward, P = exp(S − m) / ℓ recomputed per tile)."""
    c, T, K, H = q.shape
    S, Kv = k.shape[1], k.shape[2]
    G = K // Kv
    qh, kh, vh = _layout(q, k, v, Kv, layout)
    dOh = _to_h(d_out.reshape(c, T, Kv, G, H), layout).astype(f32)  # like qh
    Oh = _to_h(out.reshape(c, T, Kv, G, H), layout).astype(f32)
    delta = jnp.sum(dOh * Oh, axis=-1, keepdims=True)  # [c, Kv, G, T, 1]
    dq_blocks = []
    dk = jnp.zeros((c, Kv, S, H), f32)  # key/value gradients accumulated per key block
    dv = jnp.zeros((c, Kv, S, H), f32)
    for qlo, qhi, ks in tiles:
        qi, dOi = _tslice(qh, qlo, qhi, layout), _tslice(dOh, qlo, qhi, layout)
        li, di = _tslice(lse, qlo, qhi, layout), _tslice(delta, qlo, qhi, layout)
        dqi = None
        for klo, khi in ks:
            mij = mask[:, qlo:qhi, klo:khi]
            kj, vj = kh[:, :, klo:khi], vh[:, :, klo:khi]
            p = jnp.exp(_scores(qi, kj, mij, H, layout) - li[..., :1]) * li[..., 1:]  # [c, Kv, G, t, s]
            dv = dv.at[:, :, klo:khi].add(
                jax.lax.dot_general(p.astype(vh.dtype), dOi.astype(vh.dtype), _PT, preferred_element_type=f32))
            dp = jax.lax.dot_general(dOi.astype(vh.dtype), vj, _QK, preferred_element_type=f32)
            ds = (jnp.where(_bmask(mij, layout), p * (dp - di), 0.0) / math.sqrt(H)).astype(qh.dtype)
            t = jax.lax.dot_general(ds, kj, _PV, preferred_element_type=f32)
            dqi = t if dqi is None else dqi + t
            dk = dk.at[:, :, klo:khi].add(jax.lax.dot_general(ds, qi, _PT, preferred_element_type=f32))
        dq_blocks.append(dqi)
    dq = _from_h(_tcat(dq_blocks, layout), layout).reshape(c, T, K, H).astype(q.dtype)
    dkk = dk.transpose(0, 2, 1, 3).astype(k.dtype)
    dvv = dv.transpose(0, 2, 1, 3).astype(v.dtype)
    return dq, dkk, dvv


def _chunked(fn, args, rows: int):
    """``fn`` over row chunks of ``rows`` rows (``lax.map``; one call when rows covers R)."""
    R = args[0].shape[0]
    if rows >= R:
        return fn(*args)
    n = R // rows
    res = jax.lax.map(lambda xs: fn(*xs), tuple(a.reshape(n, rows, *a.shape[1:]) for a in args))
    return jax.tree.map(lambda x: x.reshape(R, *x.shape[2:]), res)


def _row_chunk(R: int, rows: int) -> int:
    """The largest divisor of R that is <= rows (so every chunk has the same shape: one compile)."""
    rows = max(1, min(int(rows), R))
    while R % rows:
        rows -= 1
    return rows


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7, 8))
def _blockwise(q, k, v, mask, rows, q_blocks, k_blocks, causal, layout):
    return _blockwise_fwd(q, k, v, mask, rows, q_blocks, k_blocks, causal, layout)[0]


def _blockwise_fwd(q, k, v, mask, rows, q_blocks, k_blocks, causal, layout):
    tiles = _tiles(q.shape[1], k.shape[1], q_blocks, k_blocks, causal)
    out, lse = _chunked(functools.partial(_fwd_chunk, tiles=tiles, layout=layout), (q, k, v, mask), rows)
    return out, (q, k, v, mask, out, lse)


def _blockwise_bwd(rows, q_blocks, k_blocks, causal, layout, res, d_out):
    q, k, v, mask, out, lse = res
    tiles = _tiles(q.shape[1], k.shape[1], q_blocks, k_blocks, causal)
    dq, dk, dv = _chunked(functools.partial(_bwd_chunk, tiles=tiles, layout=layout),
                          (q, k, v, mask, out, lse, d_out), rows)
    return dq, dk, dv, None


_blockwise.defvjp(_blockwise_fwd, _blockwise_bwd)


def blockwise_attention(q, k, v, mask, *, rows: int = 1, q_blocks: int = 1, k_blocks: int = 1,
                        causal: bool = False, layout: str = "gt"):
    """softmax(q kᵀ/√H + mask) v by tiles (module docstring). ``rows``: rows per ``lax.map`` chunk
    (rounded down to a divisor of R); ``q_blocks`` / ``k_blocks``: query / key blocks per chunk (``k_blocks=0``: each query block
    against all the keys it can see in one block);
    ``causal``: the caller promises ``mask`` ⊆ the causal mask (S = T), so key blocks above the
    diagonal are skipped; ``layout``: the chunk's query layout, ``"gt"`` [c, Kv, G, T, H] or ``"tg"``
    [c, Kv, T, G, H] (same numbers up to rounding). q [R,T,K,H]; k, v [R,S,Kv,H]; mask [R,T,S] bool -> [R, T, K·H]."""
    R, T, K, H = q.shape
    S, Kv = k.shape[1], k.shape[2]
    if k.shape != (R, S, Kv, H) or v.shape != k.shape or K % Kv or mask.shape != (R, T, S):
        raise ValueError(f"blockwise_attention: q {q.shape}, k {k.shape}, v {v.shape}, mask {mask.shape} disagree")
    if layout not in _TAXIS:
        raise ValueError(f"blockwise_attention: layout={layout!r}; choose from {tuple(_TAXIS)}")
    if causal and S != T:
        raise ValueError(f"blockwise_attention: causal=True needs S == T, got T={T}, S={S}")
    run = lambda q, k, v, m: _blockwise(q, k, v, m, _row_chunk(q.shape[0], rows), int(q_blocks),  # noqa: E731
                                        int(k_blocks), bool(causal), layout)
    if explicit.explicit_mesh() is None:
        return run(q, k, v, mask.astype(bool))
    return _per_shard(run, q, k, v, mask.astype(bool))


def _per_shard(run, q, k, v, mask=None):
    """Under an explicit mesh (whose types ``lax.map`` cannot scan over a split row axis): ``run``
    on each device's own rows and heads (``jax.shard_map``). Rows may be split over the batch axes
    and the heads K / Kv over one axis (query head j = kv·G + g: a contiguous split of K and of Kv
    by the same count keeps each query head with its key/value head); T, S and H must be whole.
    ``mask=None``: ``run(q, k, v)`` (a mask-free kernel, ``causal_attention``)."""
    sq, sk, sv = (explicit.spec(x) for x in (q, k, v))
    sm = explicit.spec(mask) if mask is not None else (sq[0], None, None)
    if sq[1] is not None or sq[3] is not None or sk[1] is not None or sk[3] is not None or sv != sk \
            or sm[1:] != (None, None) or sq[0] != sk[0] or sq[0] != sm[0] or sq[2] != sk[2]:
        raise ValueError(f"blockwise_attention: under an explicit mesh q {sq}, k {sk}, v {sv}, mask {sm} must be split "
                         "only along rows (alike) and heads (q and k/v alike)")
    P = jax.sharding.PartitionSpec
    specs, args = (P(*sq), P(*sk), P(*sv)), (q, k, v)
    if mask is not None:
        specs, args = specs + (P(*sm),), args + (mask,)
    return jax.shard_map(run, in_specs=specs, out_specs=P(sq[0], None, sq[2]))(*args)


# f32 bytes of one score tile [c, K, block, block] that ``causal_attention`` aims at when it picks
# its row chunk c (one tile and its exponentials are live at a time: the tiles run in loops)
TILE_BYTES = 256 * 2 ** 20


def _causal_chunk(q, k, v, *, block: int):
    """``causal_attention`` of one row chunk: q [c, T, K, H], k/v [c, T, Kv, H] -> [c, T, K·H].

    T is padded to nb·b (b = ``block``; padded keys lie after every real query, so the causal mask
    hides them; padded queries are dropped). ``lax.map`` over the nb query blocks; for query block
    i a ``fori_loop`` over its key blocks j = 0..i (the blocks above the diagonal are never
    visited) runs the online softmax of the module docstring on a [c, Kv, G, b, b] f32 tile whose
    mask key <= query (by index) is built from iotas. The loops make the tiles run one after the
    other, so only one tile's scores are live (a Python loop over tiles lets XLA keep them all)."""
    c, T, K, H = q.shape
    Kv = k.shape[2]
    G = K // Kv
    b = int(block)
    nb = -(-T // b)
    pad = nb * b - T
    if pad:
        q, k, v = (jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) for x in (q, k, v))
    # blocks first: q [nb, c, Kv, G, b, H], k/v [nb, c, Kv, b, H]
    qb = q.reshape(c, nb, b, Kv, G, H).transpose(1, 0, 3, 4, 2, 5)
    kb = k.reshape(c, nb, b, Kv, H).transpose(1, 0, 3, 2, 4)
    vb = v.reshape(c, nb, b, Kv, H).transpose(1, 0, 3, 2, 4)
    ar = jnp.arange(b)
    scale = 1.0 / math.sqrt(H)

    def q_block(xs):
        i, qi = xs  # qi [c, Kv, G, b, H]

        def key_block(j, carry):
            m, l, acc = carry
            kj = jax.lax.dynamic_index_in_dim(kb, j, 0, keepdims=False)  # [c, Kv, b, H]
            vj = jax.lax.dynamic_index_in_dim(vb, j, 0, keepdims=False)
            s = jax.lax.dot_general(qi, kj, _QK, preferred_element_type=f32) * scale  # [c, Kv, G, b, b]
            ok = (i * b + ar)[:, None] >= (j * b + ar)[None, :]  # [b, b] key <= query
            s = jnp.where(ok, s, NEG)
            m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
            corr = jnp.exp(m - m_new)
            p = jnp.exp(s - m_new)
            l = l * corr + jnp.sum(p, axis=-1, keepdims=True)
            acc = acc * corr + jax.lax.dot_general(p.astype(vj.dtype), vj, _PV, preferred_element_type=f32)
            return m_new, l, acc

        one = qi[..., :1].astype(f32)  # *_like of the block: varying like it inside a shard_map
        init = (jnp.full_like(one, NEG), jnp.zeros_like(one), jnp.zeros_like(qi, f32))
        _, l, acc = jax.lax.fori_loop(0, i + 1, key_block, init)
        return (acc / l).astype(q.dtype)  # [c, Kv, G, b, H]

    out = jax.lax.map(q_block, (jnp.arange(nb), qb))  # [nb, c, Kv, G, b, H]
    out = out.transpose(1, 0, 4, 2, 3, 5).reshape(c, nb * b, K * H)
    return out[:, :T]


def causal_attention(q, k, v, *, block: int = 512, rows: int | None = None):
    """Forward-only causal self-attention by flash tiles, for a prefill: query t attends keys
    s <= t (by index), softmax(q kᵀ/√H + causal) v (grouped-query heads), computed per (row
    chunk, query block, key block) tile with the online softmax of the module docstring, the key
    blocks above each query block's diagonal skipped and the mask built per tile from iotas
    (``_causal_chunk``): neither an [R, K, T, T] score tensor nor an [R, T, T] mask exists. No
    backward (the sampler never differentiates its prefill).

    ``block``: queries / keys per tile; ``rows``: rows per ``lax.map`` chunk (rounded down to a
    divisor of R); None = as many as keep one f32 tile [c, K, block, block] within ``TILE_BYTES``.
    Under an explicit mesh each device runs its own rows (and heads, if split; ``_per_shard``).
    q [R, T, K, H]; k, v [R, T, Kv, H] -> [R, T, K·H]."""
    R, T, K, H = q.shape
    Kv = k.shape[2]
    if k.shape != (R, T, Kv, H) or v.shape != k.shape or K % Kv:
        raise ValueError(f"causal_attention: q {q.shape}, k {k.shape}, v {v.shape} disagree (self-attention: S = T)")
    if int(block) < 1:
        raise ValueError(f"causal_attention: block={block} must be >= 1")
    b = min(int(block), T)

    def run(q, k, v):
        c = rows if rows is not None else max(1, TILE_BYTES // (q.shape[2] * b * b * 4))
        return _chunked(functools.partial(_causal_chunk, block=b), (q, k, v), _row_chunk(q.shape[0], c))

    if explicit.explicit_mesh() is None:
        return run(q, k, v)
    return _per_shard(run, q, k, v)


def parse_variant(name: str) -> dict | None:
    """``blockwise_r{rows}_q{q_blocks}_k{k_blocks}[_tg]`` -> its keyword arguments (benchmark variants)."""
    import re

    m = re.fullmatch(r"blockwise_r(\d+)_q(\d+)_k(\d+)(_tg|_gt)?", name)
    return None if m is None else dict(rows=int(m[1]), q_blocks=int(m[2]), k_blocks=int(m[3]),
                                       layout=(m[4] or "_gt")[1:])
