"""A Qwen3-shaped decoder-only policy as pure functions over a parameter pytree.

Architecture (Qwen3, Yang et al. 2025, arXiv:2505.09388; HF ``transformers`` ``modeling_qwen3``):

    h₀ = E[x]
    for each layer ℓ:
      a  = RMSNorm(h; γ_in)
      q, k, v = a W_q (+ b_q), a W_k (+ b_k), a W_v (+ b_v)  (grouped-query: K query heads, K_kv
                                               key/value heads; biases if ``qkv_bias``, Qwen2)
      q, k = RMSNorm_H(q; γ_q), RMSNorm_H(k; γ_k)   (per-head norm over H, if ``qk_norm``, Qwen3)
      q, k = RoPE(q, pos), RoPE(k, pos)        (rotate-half convention, as HF)
      h  = h + softmax(q kᵀ / √H + mask) v W_o
      m  = RMSNorm(h; γ_post)
      h  = h + (silu(m W_gate) ⊙ m W_up) W_down   (SwiGLU, Shazeer 2020, arXiv:2002.05202)
    logits = RMSNorm(h; γ_final) W_lm       (W_lm = Eᵀ when ``tie_embeddings``)

RMSNorm(x; γ) = x / √(mean(x²) + eps) · γ  (Zhang & Sennrich 2019, arXiv:1910.07467; γ initialised
to ones, no ``1 + γ`` offset). RoPE (Su et al. 2021, arXiv:2104.09864) with inverse frequencies
θ^(−2i/H), i < H/2, applied as ``x·cos + rotate_half(x)·sin`` with
``rotate_half([x₁, x₂]) = [−x₂, x₁]`` (the HF layout, not the interleaved one). With
``rope_scaling`` of type ``llama3`` (Llama 3.1, Grattafiori et al. 2024, arXiv:2407.21783; HF
``modeling_rope_utils._compute_llama3_parameters``) each ω_i of wavelength λ_i = 2π/ω_i becomes
ω_i / s when λ_i > C / f_lo, stays ω_i when λ_i < C / f_hi, and in between
(1 − a)·ω_i / s + a·ω_i with a = (C / λ_i − f_lo) / (f_hi − f_lo) (s ``factor``, C
``original_max_position_embeddings``, f_lo / f_hi ``low_freq_factor`` / ``high_freq_factor``).

The same code serves three Hugging Face families (``prs.models.hf``): Qwen3 (``qk_norm``), Qwen2 /
Qwen2.5 (``qkv_bias``, no q/k norm) and Llama / Mistral (neither; Llama 3.1+ with ``rope_scaling``).

Parameter layout (``init_params``): a plain dict; every kernel is stored ``[in, out]`` (HF
``nn.Linear.weight`` is ``[out, in]``: transpose when loading). Per-layer tensors are stacked on a
leading ``[L]`` axis so the layer loop is one ``lax.scan`` (one compile for any depth)::

    embed_tokens                 [V, D]      <- model.embed_tokens.weight
    layers/input_layernorm       [L, D]      <- model.layers.{i}.input_layernorm.weight
    layers/q_proj                [L, D, K·H] <- model.layers.{i}.self_attn.q_proj.weight.T
    layers/k_proj                [L, D, Kv·H]<- ...self_attn.k_proj.weight.T
    layers/v_proj                [L, D, Kv·H]<- ...self_attn.v_proj.weight.T
    layers/o_proj                [L, K·H, D] <- ...self_attn.o_proj.weight.T
    layers/q_norm, layers/k_norm [L, H]      <- ...self_attn.{q,k}_norm.weight   (if qk_norm)
    layers/q_bias                [L, K·H]    <- ...self_attn.q_proj.bias          (if qkv_bias)
    layers/k_bias, layers/v_bias [L, Kv·H]   <- ...self_attn.{k,v}_proj.bias     (if qkv_bias)
    layers/post_attention_layernorm [L, D]   <- model.layers.{i}.post_attention_layernorm.weight
    layers/gate_proj, up_proj    [L, D, F]   <- ...mlp.{gate,up}_proj.weight.T
    layers/down_proj             [L, F, D]   <- ...mlp.down_proj.weight.T
    norm                         [D]         <- model.norm.weight
    lm_head                      [D, V]      <- lm_head.weight.T        (absent if tie_embeddings)

Qwen3 and Llama have no attention biases (Qwen2 has q/k/v ones, none on o). Head ``j`` of ``q_proj``'s output occupies columns
``[j·H, (j+1)·H)`` (the HF ``view(..., K, H)`` order); query head ``j`` uses key/value head
``j // (K / Kv)`` (HF ``repeat_kv``).

Key/value cache (``init_cache``): ``{"k": [L, R, S, Kv, H], "v": [L, R, S, Kv, H]}`` where cache slot
``s`` of row ``r`` holds the token at *position* ``s`` (rows are right-padded, so slot = index =
position). A query at position ``p`` attends to slots ``0..p``; slots beyond a row's length hold
junk that is never attended and is overwritten when the row grows. ``decode_step`` and ``prefill``
write with a scatter that drops out-of-range slots, so the cache can be donated and updated in place.
Under an explicit-axes mesh the cache's rows are split over the batch axes and its Kv heads over
``tensor`` (where ``tensor`` divides Kv; ``prs.parallel.explicit.head_split``): each device writes
and attends its own (rows, heads) block.

One layer for every mode: ``decoder_layer`` is the loop body above; ``forward`` (training, scoring),
``extend`` (prefill, decode) and the sampler's decode step and chunked prefill pass it their own
attention (where the cache is written and read), as maxtext's one ``DecoderLayer`` serves its
train / prefill / autoregressive modes.

Numerics: matmuls run in ``cfg.dtype`` (parameters are cast from ``cfg.param_dtype``); norms,
attention softmax and logits are float32.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec

from prs.models import blockwise as _bw
from prs.parallel import explicit

Params = dict[str, Any]
Cache = dict[str, jax.Array]

NEG_INF = _bw.NEG  # finite "minus infinity" for masked attention scores: fully masked rows stay finite.

# ModelConfig.remat -> jax.checkpoint policy (None: no checkpoint). Each policy's compiled temp
# bytes: benchmarks/README.md; tests/models/test_qwen3_gradients.py checks their order on a small shape.
LLAMA3_ROPE_KEYS = ("rope_type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")

REMAT_POLICIES = {
    "none": None,
    "full": jax.checkpoint_policies.nothing_saveable,
    "dots_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of the Qwen3-style decoder (hashable: usable as a static jit argument).

    Attributes:
      vocab_size: V.            d_model: D.              n_layers: L.
      n_heads: K query heads.   n_kv_heads: Kv key/value heads (K % Kv == 0; Kv == K is MHA).
      head_dim: H (Qwen3 decouples H from D / K).        d_ff: F, SwiGLU inner width.
      rope_theta: RoPE base θ.  rms_norm_eps: RMSNorm ε. tie_embeddings: W_lm = Eᵀ.
      qk_norm: per-head RMSNorm on q and k (Qwen3).
      qkv_bias: biases on the q, k and v projections (Qwen2 / Qwen2.5).
      rope_scaling: RoPE frequency scaling as sorted ``(key, value)`` pairs of HF's ``rope_scaling``
        dict (a dict is accepted and converted); ``()`` = plain RoPE. Only ``rope_type: llama3``
        (keys ``factor``, ``low_freq_factor``, ``high_freq_factor``,
        ``original_max_position_embeddings``; the module docstring's formula).
      dtype: compute dtype of matmuls.  param_dtype: storage dtype of parameters.
      remat: rematerialisation of the layer scan in ``forward_hidden`` (``REMAT_POLICIES``):
        ``none`` keeps every layer's activations for the backward pass; ``full`` keeps only each
        layer's input and recomputes the layer (``nothing_saveable``, maxtext's ``full``);
        ``dots_saveable`` keeps the x·W projections and recomputes attention and elementwise ops
        (``dots_with_no_batch_dims_saveable``: the [R, K, T, S] score einsums, which have batch
        dims, are *not* kept; plain ``dots_saveable`` would keep them).
      attention_impl: ``reference`` (the softmax below, heads-major with a hand-written backward
        pass, ``_attention_reference``), ``einsum`` (the same equation as einsums under plain
        autodiff, the slower test reference), ``xla`` / ``cudnn`` (``jax.nn.dot_product_attention``
        with that implementation; ``cudnn`` needs a GPU and bf16/fp16), ``blockwise`` (opt-in,
        ``prs.models.blockwise``: flash-style tiles per row with causal block skipping and a
        backward that recomputes the probabilities; same numbers to ~1e-6, not bit-identical;
        timings in benchmarks/README.md), or a name added with ``register_attention`` (e.g. a Pallas
        splash kernel on TPU).
      scan_unroll: layers per iteration of the layer ``lax.scan`` (``unroll``; 1 = a rolled loop,
        ``n_layers`` = fully unrolled). Same numbers; unrolling removes the loop's stacked
        per-layer residual buffers (zero-filled, then written by dynamic-update-slice) at the cost
        of compile time growing with the unrolled depth.
      causal_blocks: query blocks of the causal self-attention in ``forward_hidden`` (1 = one dense
        [T, T] block). With B > 1 the T queries are cut into B contiguous blocks and block i attends
        only to the keys up to its last query (``_attention_causal_blocks``): the blocks above the
        diagonal, fully masked, are skipped (≈ (B − 1) / 2B of the score work; torch's CPU SDPA
        flash kernel skips them the same way). Same numbers except on a query row that may attend
        to nothing (no valid key up to it), whose meaningless output is the uniform average over
        its block's keys instead of all T keys. Default 1: B > 1 changes float rounding, so committed
        runs would not re-run to the same records, and on CPU its saving is within noise
        (benchmarks/README.md).
      prefill_flash_from: prompt widths P >= this run ``prefill``'s attention as causal flash tiles
        (``blockwise.causal_attention``: online softmax over ``prefill_block``-sized query/key
        blocks, blocks above the diagonal skipped, no [R, K, P, P] scores and no [R, P, P] mask)
        instead of ``attention_impl`` on the dense causal mask, and the sampler prefills such
        prompts chunk by chunk straight into its decode cache layout
        (``prs.models.sampler._prefill_blocks``); None = never. Default 512: the dense scores of
        a 4,608-token Prefix Sampling re-roll bucket are 162 GiB per 64 rows and layer in f32,
        while the short prompts of the test tasks keep the dense path (committed runs
        replay bit-exactly, tests/experiments/test_reproduce.py). Same numbers to float rounding.
      prefill_block: queries / keys per flash tile of the prefill (above); the sampler's prefill
        chunk. A [rows, K, b, b] f32 tile is live at a time (64 rows, K = 32, b = 256: 512 MiB).
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = True
    qk_norm: bool = True
    qkv_bias: bool = False
    rope_scaling: Any = ()
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32
    remat: str = "none"
    attention_impl: str = "reference"
    scan_unroll: int = 1
    causal_blocks: int = 1
    prefill_flash_from: int | None = 512
    prefill_block: int = 256

    def __post_init__(self):
        scaling = self.rope_scaling
        if isinstance(scaling, dict) or hasattr(scaling, "items"):
            scaling = tuple(sorted((str(k), v) for k, v in scaling.items()))
        object.__setattr__(self, "rope_scaling", tuple(tuple(kv) for kv in (scaling or ())))
        if self.rope_scaling:
            sd = dict(self.rope_scaling)
            if sd.get("rope_type") != "llama3" or set(sd) != set(LLAMA3_ROPE_KEYS):
                raise ValueError(f"ModelConfig.rope_scaling={sd!r}: only rope_type 'llama3' with keys "
                                 f"{sorted(LLAMA3_ROPE_KEYS)} is supported (or () for plain RoPE)")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"ModelConfig.remat={self.remat!r}; choose from {tuple(REMAT_POLICIES)}")
        if self.attention_impl not in _ATTENTION_IMPLS:
            raise ValueError(f"ModelConfig.attention_impl={self.attention_impl!r}; choose from {tuple(_ATTENTION_IMPLS)}")
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "d_ff", "scan_unroll",
                     "causal_blocks", "prefill_block"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ModelConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.prefill_flash_from is not None and int(self.prefill_flash_from) < 1:
            raise ValueError(f"ModelConfig.prefill_flash_from must be >= 1 or None, got {self.prefill_flash_from}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"ModelConfig.n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim={self.head_dim} must be even for RoPE")

    @staticmethod
    def preset(name: str, **overrides) -> "ModelConfig":
        """Named shapes. ``tiny`` (tests), ``small`` (~2.5M params), ``10m`` (~10M), and the real
        Qwen3 shapes ``qwen3_0_6b``, ``qwen3_1_7b``, ``qwen3_4b``, ``qwen3_8b`` (HF ``config.json``).
        Keyword ``overrides`` replace fields (e.g. ``dtype=jnp.bfloat16``)."""
        presets = {
            "tiny": dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                         head_dim=8, d_ff=64, rope_theta=10_000.0),
            "small": dict(vocab_size=512, d_model=192, n_layers=6, n_heads=6, n_kv_heads=2,
                          head_dim=32, d_ff=512, rope_theta=10_000.0),
            "10m": dict(vocab_size=2048, d_model=256, n_layers=10, n_heads=8, n_kv_heads=4,
                        head_dim=32, d_ff=1024, rope_theta=10_000.0),
            "qwen3_0_6b": dict(vocab_size=151_936, d_model=1024, n_layers=28, n_heads=16,
                               n_kv_heads=8, head_dim=128, d_ff=3072, tie_embeddings=True),
            "qwen3_1_7b": dict(vocab_size=151_936, d_model=2048, n_layers=28, n_heads=16,
                               n_kv_heads=8, head_dim=128, d_ff=6144, tie_embeddings=True),
            "qwen3_4b": dict(vocab_size=151_936, d_model=2560, n_layers=36, n_heads=32,
                             n_kv_heads=8, head_dim=128, d_ff=9728, tie_embeddings=True),
            "qwen3_8b": dict(vocab_size=151_936, d_model=4096, n_layers=36, n_heads=32,
                             n_kv_heads=8, head_dim=128, d_ff=12288, tie_embeddings=False),
        }
        if name not in presets:
            raise ValueError(f"ModelConfig.preset: unknown name {name!r}; choose from {sorted(presets)}")
        return ModelConfig(**{**presets[name], **overrides})

    def param_shapes(self) -> Params:
        """``jax.ShapeDtypeStruct`` per parameter (the layout of ``init_params``), no allocation."""
        return jax.eval_shape(lambda: init_params(self, jax.random.PRNGKey(0)))

    def param_logical_axes(self) -> Params:
        """Logical axis names per parameter (``param_logical_axes``), for ``prs.sharding``."""
        return param_logical_axes(self)


def param_logical_axes(cfg: ModelConfig) -> Params:
    """A tuple of logical axis names per parameter dimension, in maxtext's vocabulary
    (``vocab``, ``embed``, ``heads``, ``kv_heads``, ``mlp``, ``layers``, ``norm``, ``head_dim``).
    ``prs.parallel.sharding.LOGICAL_RULES`` maps them to mesh axes: q/k/v/gate/up are column-
    parallel (output split over ``tensor``), o/down row-parallel, ``embed`` split over ``fsdp``."""
    layers = {
        "q_proj": ("layers", "embed", "heads"), "k_proj": ("layers", "embed", "kv_heads"),
        "v_proj": ("layers", "embed", "kv_heads"), "o_proj": ("layers", "heads", "embed"),
        "gate_proj": ("layers", "embed", "mlp"), "up_proj": ("layers", "embed", "mlp"),
        "down_proj": ("layers", "mlp", "embed"),
        "input_layernorm": ("layers", "norm"), "post_attention_layernorm": ("layers", "norm"),
    }
    if cfg.qk_norm:
        layers["q_norm"] = ("layers", "head_dim")
        layers["k_norm"] = ("layers", "head_dim")
    if cfg.qkv_bias:
        layers["q_bias"] = ("layers", "heads")
        layers["k_bias"] = ("layers", "kv_heads")
        layers["v_bias"] = ("layers", "kv_heads")
    out = {"embed_tokens": ("vocab", "embed"), "layers": layers, "norm": ("norm",)}
    if not cfg.tie_embeddings:
        out["lm_head"] = ("embed", "vocab")
    return out


def param_count(params: Params) -> int:
    """Total number of scalars in ``params``."""
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(params)))


def init_params(cfg: ModelConfig, key: jax.Array, *, std: float = 0.02) -> Params:
    """Random parameters in the layout of the module docstring: kernels and the embedding
    ~ N(0, std²) (HF ``initializer_range`` 0.02), norm scales = 1, q/k/v biases (``qkv_bias``) = 0."""
    L, D, K, Kv, H, F, V = (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads,
                            cfg.head_dim, cfg.d_ff, cfg.vocab_size)
    shapes = {
        "q_proj": (L, D, K * H), "k_proj": (L, D, Kv * H), "v_proj": (L, D, Kv * H),
        "o_proj": (L, K * H, D), "gate_proj": (L, D, F), "up_proj": (L, D, F), "down_proj": (L, F, D),
    }
    keys = jax.random.split(key, len(shapes) + 2)
    pd = cfg.param_dtype
    layers = {name: (std * jax.random.normal(k, s)).astype(pd) for (name, s), k in zip(shapes.items(), keys)}
    layers["input_layernorm"] = jnp.ones((L, D), pd)
    layers["post_attention_layernorm"] = jnp.ones((L, D), pd)
    if cfg.qk_norm:
        layers["q_norm"] = jnp.ones((L, H), pd)
        layers["k_norm"] = jnp.ones((L, H), pd)
    if cfg.qkv_bias:
        layers["q_bias"] = jnp.zeros((L, K * H), pd)
        layers["k_bias"] = jnp.zeros((L, Kv * H), pd)
        layers["v_bias"] = jnp.zeros((L, Kv * H), pd)
    params = {
        "embed_tokens": (std * jax.random.normal(keys[-2], (V, D))).astype(pd),
        "layers": layers,
        "norm": jnp.ones((D,), pd),
    }
    if not cfg.tie_embeddings:
        params["lm_head"] = (std * jax.random.normal(keys[-1], (D, V))).astype(pd)
    return params


# ----------------------------------------------------------------------------- building blocks


def rms_norm(x: jax.Array, scale: jax.Array, *, eps: float) -> jax.Array:
    """RMSNorm(x; γ) = x / √(mean(x²) + ε) · γ over the last axis, computed in float32."""
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    scale = scale.astype(jnp.float32).reshape((1,) * (x.ndim - 1) + (-1,))
    return (y * scale).astype(x.dtype)


def rope_inv_freq(H: int, *, theta: float, scaling: tuple = ()) -> jax.Array:
    """RoPE inverse frequencies ω_i = θ^(−2i/H), i < H/2, float32 [H/2]; with ``scaling`` (a
    ``ModelConfig.rope_scaling`` of type ``llama3``) rescaled by wavelength as in the module
    docstring (HF ``_compute_llama3_parameters``, the same float32 operations)."""
    inv_freq = 1.0 / (theta ** (jnp.arange(0, H, 2, dtype=jnp.float32) / H))  # [H/2]
    if not scaling:
        return inv_freq
    sd = dict(scaling)
    factor, lo, hi = float(sd["factor"]), float(sd["low_freq_factor"]), float(sd["high_freq_factor"])
    ctx = float(sd["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv_freq
    scaled = jnp.where(wavelen > ctx / lo, inv_freq / factor, inv_freq)
    smooth = (ctx / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < ctx / hi) & ~(wavelen > ctx / lo)
    return jnp.where(medium, smoothed, scaled)


def rope(x: jax.Array, positions: jax.Array, *, theta: float, scaling: tuple = ()) -> jax.Array:
    """Rotary embedding, HF rotate-half layout. x: [R, T, K, H]; positions: [R, T] int.

    x·cos(pos·ω) + rotate_half(x)·sin(pos·ω), ω_i = θ^(−2i/H) repeated twice (``rope_inv_freq``;
    ``scaling``: llama3's rescaled ω), rotate_half([a, b]) = [−b, a].
    """
    H = x.shape[-1]
    inv_freq = rope_inv_freq(H, theta=theta, scaling=scaling)  # [H/2]
    ang = positions.astype(jnp.float32)[..., None] * inv_freq[None, None, :]  # [R, T, H/2]
    ang = jnp.concatenate([ang, ang], axis=-1)[:, :, None, :]  # [R, T, 1, H]
    x32 = x.astype(jnp.float32)
    x1, x2 = x32[..., : H // 2], x32[..., H // 2:]
    rot = jnp.concatenate([-x2, x1], axis=-1)
    return (x32 * jnp.cos(ang) + rot * jnp.sin(ang)).astype(x.dtype)


def dense(x: jax.Array, w: jax.Array, *, dtype: Any = None, preferred_element_type: Any = None) -> jax.Array:
    """``x @ w`` for x [..., I], w [I, O] -> [..., O], computed as one 2-D matmul [N, I] @ [I, O].

    Same numbers as ``x @ w``; the flattening is for speed. With a 3-D ``x`` [R, T, I] the
    weight gradient contracts two axes (r, t), and XLA:CPU lowers it with a strided transposing
    copy of the [R, T, O] cotangent fused into the elementwise producer; flat, the dot contracts
    one axis and needs no copy (timings: ``benchmarks/bench_update.py``, benchmarks/README.md)."""
    dt = x.dtype if dtype is None else dtype
    lead = x.shape[:-1]
    y = explicit.matmul(x.reshape(-1, x.shape[-1]).astype(dt), w.astype(dt), preferred_element_type=preferred_element_type)
    return y.reshape(*lead, w.shape[-1])


def project_qkv(lp: Params, a: jax.Array, positions: jax.Array, cfg: ModelConfig):
    """a: [R, T, D] -> q [R, T, K, H], k, v [R, T, Kv, H] (biased, normed, rotated).

    ``lp`` is one layer's weights in the stacked layout's slice (``q_proj``, ``k_proj``, ``v_proj``:
    three matmuls) or in the joined layout of ``decode_weights`` (``qkv`` = [W_q | W_k | W_v]
    [D, (K + 2 Kv) H]: one matmul whose columns are the same dot products; ``qkv_bias`` = [b_q | b_k | b_v])."""
    R, T, _ = a.shape
    dt = cfg.dtype
    K, Kv, H = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    if "qkv" in lp:
        y = dense(a, lp["qkv"], dtype=dt)  # [R, T, (K + 2 Kv) H]
        if cfg.qkv_bias:
            y = y + lp["qkv_bias"].astype(dt)[None, None, :]
        q = y[..., :K * H].reshape(R, T, K, H)
        k = y[..., K * H:(K + Kv) * H].reshape(R, T, Kv, H)
        v = y[..., (K + Kv) * H:].reshape(R, T, Kv, H)
    else:
        q, k, v = (dense(a, lp[f"{n}_proj"], dtype=dt) for n in "qkv")  # [R, T, K·H], [R, T, Kv·H] x 2
        if cfg.qkv_bias:
            q, k, v = (x + lp[f"{n}_bias"].astype(dt)[None, None, :] for x, n in zip((q, k, v), "qkv"))
        q, k, v = q.reshape(R, T, K, H), k.reshape(R, T, Kv, H), v.reshape(R, T, Kv, H)
    if cfg.qk_norm:
        q = rms_norm(q, lp["q_norm"], eps=cfg.rms_norm_eps)
        k = rms_norm(k, lp["k_norm"], eps=cfg.rms_norm_eps)
    q = rope(q, positions, theta=cfg.rope_theta, scaling=cfg.rope_scaling)
    k = rope(k, positions, theta=cfg.rope_theta, scaling=cfg.rope_scaling)
    return q, k, v


def mlp(lp: Params, m: jax.Array, cfg: ModelConfig) -> jax.Array:
    """SwiGLU: (silu(m W_gate) ⊙ m W_up) W_down. m: [..., D] -> [..., D]. ``lp`` in the stacked
    layout's slice (``gate_proj``, ``up_proj``) or the joined one of ``decode_weights``
    (``gate_up`` = [W_gate | W_up] [D, 2F]: one matmul for both)."""
    dt = cfg.dtype
    if "gate_up" in lp:
        F = lp["down_proj"].shape[0]
        gu = dense(m, lp["gate_up"], dtype=dt)  # [..., 2F]
        return dense(jax.nn.silu(gu[..., :F]) * gu[..., F:], lp["down_proj"], dtype=dt)
    g = dense(m, lp["gate_proj"], dtype=dt)
    u = dense(m, lp["up_proj"], dtype=dt)
    return dense(jax.nn.silu(g) * u, lp["down_proj"], dtype=dt)


def decoder_layer(lp: Params, h: jax.Array, positions: jax.Array, attend, *, cfg: ModelConfig):
    """One decoder layer (the module docstring's loop body), the one shared by every mode:

        a = RMSNorm(h; γ_in);  q, k, v = RoPE(RMSNorm_H(a W_{q,k,v}));  h += attend(q, k, v) W_o
        h += SwiGLU(RMSNorm(h; γ_post))

    The modes differ only in ``attend(q, k, v) -> (att [R, T, K·H], aux)``, which is where a
    key/value cache is read and written (maxtext's ``model_mode`` train / prefill / autoregressive
    of one ``DecoderLayer``, whose attention alone handles the cache):
      * train / scoring (``forward_hidden``): causal self-attention over the T tokens, no cache;
      * cached prefill and decode (``extend``): write k, v into the stacked cache at the rows'
        positions, attend the cached slots;
      * the sampler's decode loop (``prs.models.sampler.decode_token``) and its chunked prefill:
        per-layer slot-block caches and the flash merge of their blocks.
    ``aux`` is the mode's cache update (or None), returned as is. ``lp``: one layer's weights,
    stacked layout or ``decode_weights``' joined one (``project_qkv``, ``mlp``).
    h: [R, T, D]; positions: [R, T] -> (h [R, T, D], aux)."""
    eps = cfg.rms_norm_eps
    a = rms_norm(h, lp["input_layernorm"], eps=eps)
    q, k, v = project_qkv(lp, a, positions, cfg)
    att, aux = attend(q, k, v)
    h = h + dense(att, lp["o_proj"], dtype=cfg.dtype)
    m = rms_norm(h, lp["post_attention_layernorm"], eps=eps)
    return h + mlp(lp, m, cfg), aux


def _attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, cfg: ModelConfig) -> jax.Array:
    """softmax(q kᵀ/√H + mask) v through ``cfg.attention_impl``; shapes as ``_attention_reference``."""
    return _ATTENTION_IMPLS[cfg.attention_impl](q, k, v, mask, cfg)


def _attention_causal_blocks(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, cfg: ModelConfig) -> jax.Array:
    """``_attention`` for causal self-attention (S = T, ``mask`` ⊆ the causal mask) in
    ``cfg.causal_blocks`` = B query blocks: block i (queries [t_i, t_{i+1}), t_i = ⌊i·T/B⌋) attends
    to keys [0, t_{i+1}) only, since every later key is masked for it. Score work Σ_i (t_{i+1} −
    t_i)·t_{i+1} ≈ T²(B + 1)/2B instead of T². Outputs are concatenated over T; shapes as
    ``_attention_reference``."""
    if cfg.attention_impl in _CAUSAL_IMPLS:  # an impl that skips the masked blocks itself (``blockwise``)
        return _CAUSAL_IMPLS[cfg.attention_impl](q, k, v, mask, cfg)
    T = q.shape[1]
    nb = min(cfg.causal_blocks, T)
    if nb == 1:
        return _attention(q, k, v, mask, cfg)
    edges = [i * T // nb for i in range(nb + 1)]
    outs = [_attention(q[:, lo:hi], k[:, :hi], v[:, :hi], mask[:, lo:hi, :hi], cfg)
            for lo, hi in zip(edges[:-1], edges[1:])]
    return jnp.concatenate(outs, axis=1)  # [R, T, K·H]


# cuDNN's fused attention turns the dense mask into a bias, and with a bias its training kernels take
# only even T and S (jax's ``check_is_flash_attention``), while the trainer feeds W - 1 tokens; the cudnn
# path pads both to a multiple of its 64-long tiles (<= 63 masked slots) and slices the queries back.
_CUDNN_SEQ_MULTIPLE = 64


def _attention_dpa(q, k, v, mask, cfg: ModelConfig, *, implementation: str, seq_multiple: int = 1) -> jax.Array:
    """``jax.nn.dot_product_attention`` (native GQA: q [R, T, K, H], k/v [R, S, Kv, H]); the bool
    mask broadcasts to [R, K, T, S]. Equal to the reference einsum in float32 (fully masked rows
    included). cuDNN turns a dense mask into a bias; its flash path needs ``is_causal`` instead.
    ``seq_multiple``: T and S are zero-padded up to a multiple of it first; padded keys are masked
    for every query and padded queries are dropped, so the result (and its gradient) is unchanged; a
    fully masked query row, which the kernel would average over the padded keys too, is set to the
    mean of the S real values (what the unpadded kernel and the einsum give)."""
    R, T, K, H = q.shape
    S, Kv = k.shape[1], k.shape[2]
    Tp, Sp = -(-T // seq_multiple) * seq_multiple, -(-S // seq_multiple) * seq_multiple
    if (Tp, Sp) == (T, S):
        out = jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], implementation=implementation)
        return out.reshape(R, T, K * H)
    qp = jnp.pad(q, ((0, 0), (0, Tp - T), (0, 0), (0, 0)))
    kp = jnp.pad(k, ((0, 0), (0, Sp - S), (0, 0), (0, 0)))
    vp = jnp.pad(v, ((0, 0), (0, Sp - S), (0, 0), (0, 0)))
    mp = jnp.pad(mask, ((0, 0), (0, Tp - T), (0, Sp - S)))  # False: never attended
    out = jax.nn.dot_product_attention(qp, kp, vp, mask=mp[:, None], implementation=implementation)[:, :T]
    v_mean = jnp.repeat(jnp.mean(v, axis=1), K // Kv, axis=1)  # [R, K, H]: head j reads kv head j // G
    out = jnp.where(jnp.any(mask, axis=-1)[:, :, None, None], out, v_mean[:, None].astype(out.dtype))
    return out.reshape(R, T, K * H)


def _attention_einsum(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, cfg: ModelConfig) -> jax.Array:
    """softmax(q kᵀ/√H + mask) v with grouped-query heads, written out with einsums (the equation
    ``_attention_reference`` computes, differentiated by plain autodiff; the test reference).

    q: [R, T, K, H]; k, v: [R, S, Kv, H]; mask: [R, T, S] bool (True = may attend). -> [R, T, K·H].
    Fully masked query rows give a uniform average (finite), never NaN.
    """
    R, T, K, H = q.shape
    Kv = k.shape[2]
    G = K // Kv
    qg = q.reshape(R, T, Kv, G, H)
    scores = jnp.einsum("rtkgh,rskh->rkgts", qg, k, preferred_element_type=jnp.float32)
    scores = scores / math.sqrt(H)
    scores = jnp.where(mask[:, None, None, :, :], scores, NEG_INF)  # [R, Kv, G, T, S]
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    out = jnp.einsum("rkgts,rskh->rtkgh", probs, v)
    return out.reshape(R, T, K * H)


def _heads_major(q, k, v, mask):
    """q [R,T,K,H] -> [R,Kv,M=G·T,H] (query head j = kv·G + g, row m = g·T + t); k, v [R,S,Kv,H] ->
    [R,Kv,S,H]; mask [R,T,S] -> [R,1,M,S] (broadcast over kv, tiled over g)."""
    R, T, K, H = q.shape
    Kv = k.shape[2]
    G = K // Kv
    qh = q.reshape(R, T, Kv, G, H).transpose(0, 2, 3, 1, 4).reshape(R, Kv, G * T, H)
    mh = explicit.reshape_rows(jnp.broadcast_to(mask[:, None, :, :], (R, G) + mask.shape[1:]), (R, 1, G * T, mask.shape[2]))
    return qh, k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3), mh


def _from_heads_major(oh, R, T, K, H):
    """[R, Kv, G·T, H] -> [R, T, K·H] (the inverse of ``_heads_major``'s q layout)."""
    Kv = oh.shape[1]
    return oh.reshape(R, Kv, K // Kv, T, H).transpose(0, 3, 1, 2, 4).reshape(R, T, K * H)


# dot_general dimension numbers over the [R, Kv] batch axes of the heads-major layout
_NT = (((3,), (3,)), ((0, 1), (0, 1)))  # [.., m, h] · [.., s, h] -> [.., m, s]
_NN = (((3,), (2,)), ((0, 1), (0, 1)))  # [.., m, s] · [.., s, h] -> [.., m, h]
_TN = (((2,), (2,)), ((0, 1), (0, 1)))  # [.., m, h] · [.., m, s] -> [.., h, s]


def _attn_fwd_core(qh, kh, vh, mh):
    H = qh.shape[-1]
    scores = jax.lax.dot_general(qh, kh, _NT, preferred_element_type=jnp.float32) / math.sqrt(H)
    scores = jnp.where(mh, scores, NEG_INF)  # [R, Kv, M, S]
    mx = jnp.max(scores, axis=-1, keepdims=True)
    e = jnp.exp(scores - mx)
    probs = (e / jnp.sum(e, axis=-1, keepdims=True)).astype(vh.dtype)
    return jax.lax.dot_general(probs, vh, _NN), probs  # [R, Kv, M, H], [R, Kv, M, S]


@jax.custom_vjp
def _attention_hm(qh, kh, vh, mh):
    return _attn_fwd_core(qh, kh, vh, mh)[0]


def _attention_hm_fwd(qh, kh, vh, mh):
    out, probs = _attn_fwd_core(qh, kh, vh, mh)
    return out, (qh, kh, vh, mh, out, probs)


def _attention_hm_bwd(res, d_out):
    """O = P V, P = softmax(where(mask, Q Kᵀ/√H, −∞)):  dV = Pᵀ dO;  dP = dO Vᵀ;
    dS = mask ⊙ P ⊙ (dP − rowsum(dO ⊙ O)) / √H;  dQ = dS K;  dK = dSᵀ Q  (rowsum(dP ⊙ P) =
    rowsum(dO ⊙ O), the FlashAttention-2 identity, Dao 2023, arXiv:2307.08691). Written so that
    every [M, S]-sized operand enters its matmul untransposed (dVᵀ = dOᵀ P, dKᵀ = Qᵀ dS)."""
    qh, kh, vh, mh, out, probs = res
    H = qh.shape[-1]
    f32 = jnp.float32
    d_out = d_out.astype(vh.dtype)
    d_vt = jax.lax.dot_general(d_out, probs, _TN, preferred_element_type=f32)  # [R, Kv, H, S]
    d_p = jax.lax.dot_general(d_out, vh, _NT, preferred_element_type=f32)  # [R, Kv, M, S]
    delta = jnp.sum(d_out.astype(f32) * out.astype(f32), axis=-1, keepdims=True)  # [R, Kv, M, 1]
    d_s = jnp.where(mh, probs.astype(f32) * (d_p - delta), 0.0) / math.sqrt(H)
    d_s = d_s.astype(qh.dtype)
    d_q = jax.lax.dot_general(d_s, kh, _NN, preferred_element_type=f32)  # [R, Kv, M, H]
    d_kt = jax.lax.dot_general(qh, d_s, _TN, preferred_element_type=f32)  # [R, Kv, H, S]
    untranspose = lambda x, like: x.swapaxes(2, 3).astype(like.dtype)  # noqa: E731  [R, Kv, H, S] -> [R, Kv, S, H]
    return d_q.astype(qh.dtype), untranspose(d_kt, kh), untranspose(d_vt, vh), None


_attention_hm.defvjp(_attention_hm_fwd, _attention_hm_bwd)


def _attention_reference(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, cfg: ModelConfig) -> jax.Array:
    """softmax(q kᵀ/√H + mask) v with grouped-query heads (the equation of ``_attention_einsum``),
    computed in a heads-major layout [R, Kv, G·T, H] with a hand-written backward pass
    (``_attention_hm_bwd``) that keeps only the probabilities [R, Kv, G·T, S] and the output.

    Plain autodiff of the einsum form keeps the scores, the unnormalised exponentials and the
    probabilities (three [R, K, T, S] f32 buffers per layer) and transposes [R, K, T, S] tensors for
    the key/value gradients (benchmarks/README.md profiles the update). Same forward arithmetic;
    gradients equal autodiff's to float rounding (``tests/models/test_qwen3_gradients.py``).

    q: [R, T, K, H]; k, v: [R, S, Kv, H]; mask: [R, T, S] bool (True = may attend). -> [R, T, K·H].
    Fully masked query rows give a uniform average (finite), never NaN.
    """
    R, T, K, H = q.shape
    return _from_heads_major(_attention_hm(*_heads_major(q, k, v, mask)), R, T, K, H)


_ATTENTION_IMPLS = {
    "reference": _attention_reference,
    "einsum": _attention_einsum,
    "xla": lambda q, k, v, mask, cfg: _attention_dpa(q, k, v, mask, cfg, implementation="xla"),
    "cudnn": lambda q, k, v, mask, cfg: _attention_dpa(q, k, v, mask, cfg, implementation="cudnn",
                                                       seq_multiple=_CUDNN_SEQ_MULTIPLE),
}
# impls with their own path for the causal self-attention of ``forward_hidden`` (mask ⊆ causal, S = T)
_CAUSAL_IMPLS: dict = {}


def register_attention(name: str, fn, *, causal=None) -> None:
    """Adds an attention kernel ``fn(q [R,T,K,H], k [R,S,Kv,H], v, mask [R,T,S] bool, cfg) -> [R,T,K·H]``
    selectable as ``ModelConfig(attention_impl=name)`` (the hook for a Pallas splash/ragged kernel).
    ``causal``: optionally a kernel of the same signature used for ``forward_hidden``'s causal
    self-attention instead (it may skip the key blocks above the diagonal; ``causal_blocks`` is then
    not applied)."""
    if name in _ATTENTION_IMPLS:
        raise ValueError(f"register_attention: {name!r} is already registered")
    _ATTENTION_IMPLS[name] = fn
    if causal is not None:
        _CAUSAL_IMPLS[name] = causal


def register_blockwise(name: str, *, rows: int, q_blocks: int, k_blocks: int, layout: str = "gt") -> None:
    """Registers ``prs.models.blockwise.blockwise_attention`` with these tile sizes as ``name``
    (causal block skipping in ``forward_hidden``). ``blockwise`` is registered below."""
    kw = dict(rows=rows, q_blocks=q_blocks, k_blocks=k_blocks, layout=layout)
    register_attention(name, lambda q, k, v, mask, cfg: _bw.blockwise_attention(q, k, v, mask, **kw),
                       causal=lambda q, k, v, mask, cfg: _bw.blockwise_attention(q, k, v, mask, causal=True, **kw))


register_blockwise("blockwise", rows=1, q_blocks=4, k_blocks=4, layout="tg")  # best of benchmarks/ab_attention.py at 10m


def constrain_batch(x: jax.Array) -> jax.Array:
    """Pins the leading (row) axis of an activation to the mesh's batch axes (``data``, ``fsdp``)
    when traced under ``jax.set_mesh``; a no-op without a mesh (single device)."""
    am = jax.sharding.get_abstract_mesh()
    if am.empty:
        return x
    if am.explicit_axes:
        return explicit.constrain_rows(x)
    axes = tuple(a for a in explicit.BATCH_AXES if a in am.axis_names)
    if not axes:
        return x
    spec = jax.sharding.PartitionSpec(axes, *([None] * (x.ndim - 1)))
    return jax.lax.with_sharding_constraint(x, spec)


def _decode_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, cfg: ModelConfig) -> jax.Array:
    """``_attention`` for one query per row (T = 1), in the cache's own [R, S, Kv, H] layout.

    Same equation; written as broadcast-multiply-reduce so that XLA reads each cache slot once in
    place. The ``einsum`` form contracts k/v with batch axes (r, kv) that are not leading in the
    cache layout, and XLA:CPU then copies the layer's whole cache into [R, Kv, S, H] every decode
    step (``benchmarks/bench_sampler.py`` times it).
    q: [R, 1, K, H]; k, v: [R, S, Kv, H]; mask: [R, 1, S] -> [R, 1, K·H].
    """
    R, _, K, H = q.shape
    Kv = k.shape[2]
    G = K // Kv
    qg = q.reshape(R, 1, Kv, G, H).astype(jnp.float32)  # [R, 1, Kv, G, H]
    scores = jnp.sum(qg * k.astype(jnp.float32)[:, :, :, None, :], axis=-1) / math.sqrt(H)  # [R, S, Kv, G]
    scores = jnp.where(mask[:, 0, :, None, None], scores, NEG_INF)
    probs = jax.nn.softmax(scores, axis=1).astype(v.dtype)  # over S
    out = jnp.sum(probs[..., None] * v[:, :, :, None, :], axis=1)  # [R, Kv, G, H]
    return out.reshape(R, 1, K * H).astype(v.dtype)


def _embed(params: Params, tokens: jax.Array, cfg: ModelConfig) -> jax.Array:
    return explicit.gather_rows(params["embed_tokens"], tokens).astype(cfg.dtype)  # [R, T, D]


def logits_from_hidden(params: Params, h: jax.Array, *, cfg: ModelConfig) -> jax.Array:
    """Final norm and LM head: h [..., D] -> float32 logits [..., V]. ``params``: the stacked layout
    or ``decode_weights``' (whose ``head`` is W_lm already in ``cfg.dtype``)."""
    h = rms_norm(h, params["norm"], eps=cfg.rms_norm_eps)
    if "head" in params:
        w = params["head"]  # [D, V]
    else:
        w = params["embed_tokens"].T if cfg.tie_embeddings else params["lm_head"]  # [D, V]
    return dense(h, w, dtype=cfg.dtype, preferred_element_type=jnp.float32)


MATMUL_WEIGHTS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def layer_weights(w: Params, l: int) -> Params:
    """Layer ``l``'s weights for ``decoder_layer``: from ``decode_weights``' per-layer tuple, or
    sliced from the stacked [L, ...] layout (the training layout)."""
    layers = w["layers"]
    if isinstance(layers, tuple):
        return layers[l]
    return {n: x[l] for n, x in layers.items()}


def decode_weights(params: Params, cfg: ModelConfig) -> Params:
    """The weights in the layout of a layer-unrolled decode step: ``{"layers": (layer 0, ...),
    "embed_tokens", "norm", "head"}``, each layer a dict of ``decoder_layer``'s weights split from
    the [L, ...] stacks (the matmul weights cast to ``cfg.dtype``), with the projections that read
    the same input joined: ``qkv`` = [W_q | W_k | W_v] [D, (K + 2 Kv) H] and ``gate_up`` =
    [W_gate | W_up] [D, 2F]; ``head`` = W_lm [D, V] in ``cfg.dtype``.

    Built once per sampler call, outside its decode loop: a layer ``scan`` over the stacks inside
    the loop copies every layer's weights out of the stack at every step, and a joined projection is
    one matmul per step instead of three (two). Same numbers as the stacked layout up to float
    summation order: column j of x [W_a | W_b] is x W_a or x W_b column j (only the matmul kernel's
    blocking may change the order of its sum); ``dense`` casts to ``cfg.dtype`` anyway."""
    def layer(l):
        lp = {n: (w[l].astype(cfg.dtype) if n in MATMUL_WEIGHTS else w[l]) for n, w in params["layers"].items()}
        lp["qkv"] = jnp.concatenate([lp.pop("q_proj"), lp.pop("k_proj"), lp.pop("v_proj")], axis=1)
        if cfg.qkv_bias:
            lp["qkv_bias"] = jnp.concatenate([lp.pop("q_bias"), lp.pop("k_bias"), lp.pop("v_bias")], axis=0)
        lp["gate_up"] = jnp.concatenate([lp.pop("gate_proj"), lp.pop("up_proj")], axis=1)
        return lp
    head = params["embed_tokens"].T if cfg.tie_embeddings else params["lm_head"]  # [D, V]
    return {"layers": tuple(layer(l) for l in range(cfg.n_layers)), "embed_tokens": params["embed_tokens"],
            "norm": params["norm"], "head": head.astype(cfg.dtype)}


def _check_tokens(name: str, tokens, cfg: ModelConfig, ndim: int):
    if tokens.ndim != ndim:
        raise ValueError(f"{name} must have rank {ndim}, got shape {tuple(tokens.shape)}")
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise ValueError(f"{name} must be an integer array, got dtype {tokens.dtype}")


# ----------------------------------------------------------------------------- full forward


def forward_hidden(params: Params, tokens: jax.Array, *, cfg: ModelConfig,
                   positions: jax.Array | None = None, valid: jax.Array | None = None) -> jax.Array:
    """``forward`` without the final norm/LM head: hidden states [R, T, D] (pre final norm)."""
    _check_tokens("tokens", tokens, cfg, 2)
    R, T = tokens.shape
    if valid is None:
        valid = jnp.ones((R, T), bool)
    if valid.shape != (R, T):
        raise ValueError(f"valid has shape {tuple(valid.shape)}, expected tokens' shape {(R, T)}")
    valid = valid.astype(bool)
    if positions is None:
        positions = jnp.maximum(jnp.cumsum(valid.astype(jnp.int32), axis=1) - 1, 0)
    if positions.shape != (R, T):
        raise ValueError(f"positions has shape {tuple(positions.shape)}, expected tokens' shape {(R, T)}")
    idx = jnp.arange(T)
    causal = idx[None, :, None] >= idx[None, None, :]  # [1, T, S=T]
    mask = causal & valid[:, None, :]  # [R, T, T]

    def attend(q, k, v):  # train mode: causal self-attention over the T tokens, no cache
        return _attention_causal_blocks(q, k, v, mask, cfg), None

    def layer(h, lp):
        h, _ = decoder_layer(lp, h, positions, attend, cfg=cfg)
        return constrain_batch(h), None

    policy = REMAT_POLICIES[cfg.remat]
    if cfg.remat != "none":  # maxtext: remat the layer, then scan it (the scan prevents CSE)
        layer = jax.checkpoint(layer, policy=policy, prevent_cse=False)
    h, _ = jax.lax.scan(layer, constrain_batch(_embed(params, tokens, cfg)), params["layers"],
                        unroll=cfg.scan_unroll)
    return h


def forward(params: Params, tokens: jax.Array, *, cfg: ModelConfig,
            positions: jax.Array | None = None, valid: jax.Array | None = None) -> jax.Array:
    """Logits of every position: tokens [R, T] int -> float32 logits [R, T, V].

    Token ``t`` attends to tokens ``s <= t`` (by index) with ``valid[r, s]``; invalid tokens
    still get (meaningless, finite) logits. ``positions`` (RoPE) default ``max(cumsum(valid) - 1, 0)``,
    i.e. the index for right-padded rows. For a sampler ``Rollout`` pass
    ``positions=rollout.positions, valid=rollout.valid``.
    """
    return logits_from_hidden(params, forward_hidden(params, tokens, cfg=cfg, positions=positions,
                                                     valid=valid), cfg=cfg)


# ----------------------------------------------------------------------------- cached decoding


def init_cache(cfg: ModelConfig, batch: int, max_len: int, *, dtype: Any = None) -> Cache:
    """Zero KV cache ``{"k", "v"}`` of shape [L, R, S, Kv, H] (R = ``batch``, S = ``max_len``)."""
    if batch < 1 or max_len < 1:
        raise ValueError(f"init_cache: batch={batch} and max_len={max_len} must be >= 1")
    shape = (cfg.n_layers, batch, max_len, cfg.n_kv_heads, cfg.head_dim)
    dt = cfg.dtype if dtype is None else dtype
    return {"k": explicit.zeros(shape, dt, row_axis=1, head_axis=3), "v": explicit.zeros(shape, dt, row_axis=1, head_axis=3)}


def extend(params: Params, cache: Cache, tokens: jax.Array, positions: jax.Array,
           write: jax.Array | None = None, *, cfg: ModelConfig,
           kv_len: int | None = None, causal_block: int = 0) -> tuple[jax.Array, Cache]:
    """Runs a block of C new tokens per row against the cache; returns hidden [R, C, D] and the cache.

    tokens, positions: [R, C] (positions = cache slots, contiguous after the row's cached tokens);
    write: [R, C] bool, which tokens to store (others are dropped; default all). Query (r, c)
    attends to cache slots ``s <= positions[r, c]`` (after this block's writes), which equals the
    causal mask of ``forward`` for right-padded rows. ``decode_step`` is C = 1; ``prefill`` is
    C = P on an empty cache. ``kv_len`` (static) attends only to slots ``[0, kv_len)`` — a
    caller's promise that every position is < kv_len (``prefill`` uses P, not S).
    ``causal_block`` > 0 (static): the caller's promise that ``positions[r] = 0..C-1`` and
    ``kv_len = C`` (a prefill), so the mask is the causal one; the attention then runs as causal
    flash tiles of that many queries / keys (``blockwise.causal_attention``) on the same cached
    keys and values.
    """
    _check_tokens("tokens", tokens, cfg, 2)
    R, C = tokens.shape
    L, Rc, S = cache["k"].shape[:3]
    if Rc != R or positions.shape != (R, C):
        raise ValueError(f"extend: tokens {tuple(tokens.shape)}, positions {tuple(positions.shape)} "
                         f"and cache rows {Rc} disagree")
    positions = positions.astype(jnp.int32)
    if write is None:
        write = jnp.ones((R, C), bool)
    slots = jnp.where(write, positions, S)  # [R, C]; S is out of range -> dropped
    rows = jnp.arange(R)[:, None]  # [R, 1]
    A = S if kv_len is None else min(int(kv_len), S)  # attended slots
    if causal_block and A != C:
        raise ValueError(f"extend: causal_block needs kv_len == C (a prefill), got kv_len={kv_len}, C={C}, S={S}")
    mask = jnp.arange(A)[None, None, :] <= positions[:, :, None]  # [R, C, A]

    def write_attend(q, k, v, ck_all, cv_all, slots, mask, l):
        """Writes this block's k, v at ``slots`` of layer ``l`` and attends the first A slots
        (on all rows, or on one device's (rows, heads) block of the cache)."""
        rows = jnp.arange(q.shape[0])[:, None]  # [R, 1]
        ck = ck_all.at[l, rows, slots].set(k.astype(ck_all.dtype), mode="drop", out_sharding=explicit.same(ck_all))
        cv = cv_all.at[l, rows, slots].set(v.astype(cv_all.dtype), mode="drop", out_sharding=explicit.same(cv_all))
        kl = jax.lax.dynamic_index_in_dim(ck, l, 0, keepdims=False)[:, :A].astype(cfg.dtype)  # [R, A, Kv, H]
        vl = jax.lax.dynamic_index_in_dim(cv, l, 0, keepdims=False)[:, :A].astype(cfg.dtype)
        if causal_block and C > 1:
            att = _bw.causal_attention(q, kl, vl, block=causal_block)
        else:
            att = (_decode_attention if C == 1 else _attention)(q, kl, vl, mask, cfg)
        return att, ck, cv

    heads = explicit.head_split(cfg.n_kv_heads)  # explicit mesh: the cache's Kv split over tensor too

    def layer(carry, xs):
        # The whole cache rides in the carry and is written by scatter, so XLA updates it in
        # place; scanning it as xs/ys instead copies all L layers every call.
        h, ck_all, cv_all = carry  # [L, R, S, Kv, H]
        lp, l = xs

        def cached(q, k, v):  # prefill / decode mode: write this block's k, v, attend the cache
            if heads is None:
                q, k, v = (explicit.keep_rows(x) for x in (q, k, v))  # explicit mesh: the cache's layout, rows split
                att, ck, cv = write_attend(q, k, v, ck_all, cv_all, slots, mask, l)
            else:  # each device writes and attends its own rows' and heads' block of the cache
                q, k, v = (explicit.constrain_rows_heads(x, head_axis=2, heads=heads) for x in (q, k, v))
                r = explicit.row_spec(jax.sharding.get_abstract_mesh(), 1)[0]
                qs, cs = PartitionSpec(r, None, heads, None), PartitionSpec(None, r, None, heads, None)
                att, ck, cv = explicit.per_shard(
                    write_attend, (q, k, v, ck_all, cv_all, slots, mask, l),
                    (qs, qs, qs, cs, cs, PartitionSpec(r, None), PartitionSpec(r, None, None), PartitionSpec()),
                    (PartitionSpec(r, None, heads), cs, cs))
            return att, (ck, cv)

        h, (ck_all, cv_all) = decoder_layer(lp, h, positions, cached, cfg=cfg)
        return (h, ck_all, cv_all), None

    (h, ks, vs), _ = jax.lax.scan(layer, (_embed(params, tokens, cfg), cache["k"], cache["v"]),
                                  (params["layers"], jnp.arange(L)))
    return h, {"k": ks, "v": vs}


def decode_step(params: Params, cache: Cache, tokens: jax.Array, positions: jax.Array, *,
                cfg: ModelConfig) -> tuple[jax.Array, Cache]:
    """One token per row: tokens [R], positions [R] (= the cache slot it is written to) ->
    (float32 logits [R, V] of the next token, updated cache). Equal to ``forward``'s logits at
    that position when the cache holds the row's earlier tokens at slots ``0..positions-1``."""
    if tokens.ndim != 1 or positions.shape != tokens.shape:
        raise ValueError(f"decode_step: tokens {tuple(tokens.shape)} and positions "
                         f"{tuple(positions.shape)} must both be [R]")
    h, cache = extend(params, cache, tokens[:, None], positions[:, None], cfg=cfg)
    return logits_from_hidden(params, h[:, 0], cfg=cfg), cache


def prefill(params: Params, tokens: jax.Array, lengths: jax.Array, *, cfg: ModelConfig,
            max_len: int, cache_dtype: Any = None) -> tuple[jax.Array, Cache]:
    """Fills a fresh cache of ``max_len`` slots from right-padded prompts in one forward pass.

    tokens: [R, P]; lengths: [R] valid tokens per row (>= 1). Returns (float32 logits [R, V] of the
    token after each row's last prompt token, cache). Only the last-token logits are projected
    to the vocabulary (no [R, P, V] tensor). From ``P >= cfg.prefill_flash_from`` on, attention runs
    in causal flash tiles of ``cfg.prefill_block`` (``extend``'s ``causal_block``).
    """
    _check_tokens("tokens", tokens, cfg, 2)
    R, P = tokens.shape
    if P > max_len:
        raise ValueError(f"prefill: prompt width P={P} exceeds the cache length max_len={max_len}")
    if lengths.shape != (R,):
        raise ValueError(f"prefill: lengths has shape {tuple(lengths.shape)}, expected {(R,)}")
    cache = init_cache(cfg, R, max_len, dtype=cache_dtype)
    positions = jnp.broadcast_to(jnp.arange(P, dtype=jnp.int32), (R, P))
    flash = cfg.prefill_flash_from is not None and P >= cfg.prefill_flash_from
    h, cache = extend(params, cache, tokens, positions, positions < lengths[:, None], cfg=cfg, kv_len=P,
                      causal_block=cfg.prefill_block if flash else 0)
    last = jnp.take_along_axis(h, jnp.maximum(lengths - 1, 0)[:, None, None].astype(jnp.int32), axis=1)[:, 0]
    return logits_from_hidden(params, last, cfg=cfg), cache


# ----------------------------------------------------------------------------- Hugging Face names

HF_LAYER_NAMES = {  # our stacked name -> (HF suffix under model.layers.{i}., transpose)
    "input_layernorm": ("input_layernorm.weight", False),
    "q_proj": ("self_attn.q_proj.weight", True),
    "k_proj": ("self_attn.k_proj.weight", True),
    "v_proj": ("self_attn.v_proj.weight", True),
    "o_proj": ("self_attn.o_proj.weight", True),
    "q_norm": ("self_attn.q_norm.weight", False),
    "k_norm": ("self_attn.k_norm.weight", False),
    "q_bias": ("self_attn.q_proj.bias", False),
    "k_bias": ("self_attn.k_proj.bias", False),
    "v_bias": ("self_attn.v_proj.bias", False),
    "post_attention_layernorm": ("post_attention_layernorm.weight", False),
    "gate_proj": ("mlp.gate_proj.weight", True),
    "up_proj": ("mlp.up_proj.weight", True),
    "down_proj": ("mlp.down_proj.weight", True),
}
