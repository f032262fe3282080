"""Chunked LM head: per-token log-probabilities (and entropy) without an ``[R, T, V]`` tensor.

For hidden states ``h [R, T, D]`` (before the final norm) and targets ``y [R, T]``::

    z_t   = RMSNorm(h_t; γ_final) W_lm                        (float32, [V]; W_lm = Eᵀ if tied)
    logp_t = z_t[y_t] − logsumexp(z_t)
    H_t    = logsumexp(z_t) − Σ_v softmax(z_t)_v z_t,v         (entropy, verl ``entropy_from_logits``)

The time axis is cut into ``T / chunk`` blocks that a ``lax.scan`` visits one at a time; the body
runs under ``jax.checkpoint`` (``nothing_saveable``), so the forward pass keeps only the
``[R, chunk]`` outputs and the backward pass recomputes one block's logits at a time. Peak
temporary memory is O(R · chunk · V) instead of O(R · T · V) (tunix ``compute_chunked_logps``;
maxtext ``vocabulary_tiling``). Chunking over T (not over R·T) keeps every block's batch axis
sharded like the activations. When ``chunk >= T`` the head runs as one block without a scan —
exactly the unchunked computation.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from prs.parallel import explicit
from prs.models.qwen3 import ModelConfig, Params, rms_norm


def _pick(z, y):
    """z [R, C, V], y [R, C] -> z[r, c, y[r, c]] [R, C] (out-of-range ids give NaN)."""
    return jnp.take_along_axis(z, y[..., None], axis=-1, mode="fill")[..., 0]


def _block_stats(h, w, y, *, with_entropy: bool):
    """h [R, C, D] (normed), w [D, V], y [R, C] -> logp [R, C] (and entropy [R, C] or None)."""
    R, C, D = h.shape
    V = w.shape[-1]
    # one 2-D matmul [R·C, D] @ [D, V]: the weight gradient then contracts a single axis (XLA:CPU
    # otherwise transposes the [R, C, V] cotangent; same numbers)
    z = explicit.matmul(h.reshape(R * C, D), w, preferred_element_type=jnp.float32).reshape(R, C, V)  # [R, C, V]
    lse = jax.nn.logsumexp(z, axis=-1)  # [R, C]
    y = jnp.where(y < 0, V, y)  # negative ids must not wrap around: -> NaN (as token_logprobs)
    picked = explicit.like_rows(_pick, z, y)  # [R, C]
    logp = picked - lse
    if not with_entropy:
        return logp, None
    p = jnp.exp(z - lse[..., None])  # [R, C, V]
    return logp, lse - jnp.sum(p * z, axis=-1)


def lm_head_weight(params: Params, *, cfg: ModelConfig) -> jax.Array:
    """W_lm [D, V] in the compute dtype (Eᵀ when ``tie_embeddings``)."""
    w = params["embed_tokens"].T if cfg.tie_embeddings else params["lm_head"]
    return w.astype(cfg.dtype)


def lm_head_logprobs(params: Params, hidden: jax.Array, targets: jax.Array, *, cfg: ModelConfig,
                     chunk: int, with_entropy: bool = False) -> tuple[jax.Array, jax.Array | None]:
    """``log π(targets | ·)`` (and the entropy) per position from pre-norm hidden states.

    Args:
      params: model parameters (``norm``, ``embed_tokens`` / ``lm_head`` are used).
      hidden: ``[R, T, D]`` output of ``prs.models.qwen3.forward_hidden``.
      targets: ``[R, T]`` integer ids (a negative id gives NaN, never a wrapped-around index).
      cfg: the model config.  chunk: time steps per block (static int >= 1); T is padded to a
        multiple of it and the padding dropped.  with_entropy: also return the entropy.

    Returns:
      ``(logp [R, T] float32, entropy [R, T] float32 or None)``; equal to
      ``token_logprobs(forward(...), targets)`` / ``token_entropy(forward(...))``.
    """
    if hidden.ndim != 3:
        raise ValueError(f"lm_head_logprobs: hidden must be [R, T, D], got shape {tuple(hidden.shape)}")
    R, T, D = hidden.shape
    if targets.shape != (R, T):
        raise ValueError(f"lm_head_logprobs: targets has shape {tuple(targets.shape)}, expected {(R, T)}")
    if not jnp.issubdtype(targets.dtype, jnp.integer):
        raise ValueError(f"lm_head_logprobs: targets must be integer ids, got dtype {targets.dtype}")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"lm_head_logprobs: chunk must be an int >= 1, got {chunk!r}")
    w = lm_head_weight(params, cfg=cfg)  # [D, V]
    h = rms_norm(hidden, params["norm"], eps=cfg.rms_norm_eps)  # [R, T, D]
    if chunk >= T:
        return _block_stats(h, w, targets, with_entropy=with_entropy)
    n = -(-T // chunk)
    pad = n * chunk - T
    if pad:
        h = jnp.pad(h, ((0, 0), (0, pad), (0, 0)))
        targets = jnp.pad(targets, ((0, 0), (0, pad)))
    hs = h.reshape(R, n, chunk, D).swapaxes(0, 1)  # [n, R, C, D]
    ys = targets.reshape(R, n, chunk).swapaxes(0, 1)  # [n, R, C]

    def body(carry, xs):
        lp, ent = _block_stats(xs[0], w, xs[1], with_entropy=with_entropy)
        return carry, (lp, ent if with_entropy else jnp.zeros((), jnp.float32))

    body = jax.checkpoint(body, policy=jax.checkpoint_policies.nothing_saveable, prevent_cse=False)
    _, (lp, ent) = jax.lax.scan(body, None, (hs, ys))  # [n, R, C]
    unchunk = lambda x: x.swapaxes(0, 1).reshape(R, n * chunk)[:, :T]  # noqa: E731
    return unchunk(lp), (unchunk(ent) if with_entropy else None)
