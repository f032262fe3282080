"""Shared pieces of the benchmark scripts: timing, load average, this CPU's f32 matmul rate, and
model FLOPs per token (for the roofline fraction). Not a test; not imported by ``prs``."""
from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

SIZES = ("tiny", "small", "10m")


def sampler_arguments(ap):
    """The decode benchmarks' shape flags: --size, --rows, --prompt (longest prompt), --new."""
    ap.add_argument("--size", default="10m", choices=SIZES)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=64)
    return ap


def ragged_prompts(vocab_size: int, rows: int, prompt: int, seed: int = 0):
    """The sampler benchmarks' input: ``rows`` right-padded prompts of lengths drawn in [4, prompt]
    (random ids in [1, vocab_size), pad 0) -> (tokens [rows, prompt] int32, lengths [rows] int32)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, prompt + 1, rows).astype(np.int32)
    tokens = rng.integers(1, vocab_size, (rows, prompt)).astype(np.int32)
    return np.where(np.arange(prompt)[None] < lengths[:, None], tokens, 0), lengths


def best_of(fn, repeats: int = 3) -> tuple[float, float]:
    """Best wall-clock and best process-CPU seconds of ``fn()`` over ``repeats`` calls (warm-up excluded
    by the caller). CPU time is the steadier figure on a machine shared with other jobs."""
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu


def load() -> str:
    return "load avg " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def matmul_flops(n: int = 1024, repeats: int = 5) -> float:
    """Measured f32 matmul FLOP/s of this machine through XLA (``[n, n] @ [n, n]``, best of ``repeats``)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    wall, _ = best_of(lambda: jax.block_until_ready(f(a)), repeats)
    return 2 * n**3 / wall


def forward_flops_per_token(cfg, ctx: int, *, lm_head: bool = True) -> float:
    """Matmul FLOPs of one token's forward: 2·(weights touched) + attention 4·ctx·K·H per layer
    (q·k and p·v over ``ctx`` attended slots); norms, softmax and RoPE are not counted."""
    L, D, K, Kv, H, F, V = (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                            cfg.d_ff, cfg.vocab_size)
    per_layer = 2 * (D * K * H + 2 * D * Kv * H + K * H * D + 3 * D * F) + 4 * ctx * K * H
    return L * per_layer + (2 * D * V if lm_head else 0)


def table(rows: list[dict], cols: list[str]) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |")
    return "\n".join(out)


def timed(fn, repeats: int) -> float:
    """Best wall-clock seconds of ``fn()`` (its result waited for) over ``repeats`` calls."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t0)
    return best


def hf_qwen3_config(cfg):
    """The ``transformers.Qwen3Config`` of a ``prs`` ``ModelConfig``."""
    import transformers

    return transformers.Qwen3Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads, num_key_value_heads=cfg.n_kv_heads,
        head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_norm_eps, tie_word_embeddings=cfg.tie_embeddings,
        max_position_embeddings=40_960, attention_bias=False, rope_theta=cfg.rope_theta,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta})


def hf_model(cfg, params=None):
    """HF ``Qwen3ForCausalLM`` (fp32, eval mode) with ``params``' weights (``prs.models.hf`` names)."""
    import torch
    import transformers

    from prs.models import hf

    model = transformers.Qwen3ForCausalLM(hf_qwen3_config(cfg)).float()
    if params is not None:
        sd = {k: torch.from_numpy(np.ascontiguousarray(v, np.float32)) for k, v in hf.to_hf_state_dict(params, cfg).items()}
        load_hf_state(model, sd, cfg)
    return model.eval()


def load_hf_state(model, sd: dict, cfg) -> None:
    """Loads ``prs.models.hf``-named torch tensors into an HF Qwen3 model; a missing tensor other than
    a tied LM head, or an unexpected one, is an error; a tied head is re-tied to the embedding."""
    missing, unexpected = model.load_state_dict(sd, strict=False)
    bad = [m for m in missing if not m.endswith("lm_head.weight")] + list(unexpected)
    if bad:
        raise RuntimeError(f"HF state dict mismatch: {bad[:5]}")
    if cfg.tie_embeddings:
        model.tie_weights()
