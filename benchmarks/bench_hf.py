"""Real-model path: first-principles memory / throughput per accelerator, and what a CPU can measure.

    python benchmarks/bench_hf.py                 # estimates + CPU measurements (~1 min on 2 cores)
    python benchmarks/bench_hf.py --estimates     # the tables of docs/real_models.md only
    python benchmarks/bench_hf.py --cpu-0.6b      # also: Qwen3-0.6B shapes (random bf16 weights) on this CPU

Estimates (``estimate``) from the ``ModelConfig`` presets:
  * weights: P params x bytes; RL training state: fp32 master weights + fp32 grads + AdamW m, v
    = 16 B/param (the qwen3_* configs keep fp32 masters: ``param_dtype: float32``);
  * KV cache per token: 2 (k, v) x L x Kv x H x 2 B (bf16 cache, ``cfg.dtype``);
  * decode: memory-bound; one step of R rows reads the weights once (bf16 copy, 2P bytes) and the
    whole cache of S slots per row (``prs.models.qwen3.extend`` attends all S slots, not only 0..pos):
    t_step ≈ (2P + R·S·kv) / BW, tokens/s = R / t_step, capped by compute R·2P / FLOPs;
  * the training loss's float32 logits are [R, T, V]: 4·V bytes per token (0.6 MB at V = 151,936).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from prs.models import hf  # noqa: E402
from prs.rewards import math_verify as mv  # noqa: E402
from prs.models.qwen3 import ModelConfig, init_params  # noqa: E402

GIB = 1024**3
HARDWARE = {  # public datasheet figures: HBM bytes/s, dense bf16 FLOP/s, memory bytes
    "H200": dict(bw=4.8e12, flops=989e12, mem=141e9),
    "H100-SXM": dict(bw=3.35e12, flops=989e12, mem=80e9),
}


def n_params(cfg: ModelConfig) -> int:
    shapes = jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))
    return int(sum(np.prod(x.shape) for x in jax.tree.leaves(shapes)))


def estimate(name: str, *, rows: int, cache_len: int, hw: dict) -> dict:
    """First-principles figures for preset ``name`` (see the module docstring)."""
    cfg = ModelConfig.preset(name)
    p = n_params(cfg)
    kv = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 2  # bytes per cached token, bf16
    t_mem = (2 * p + rows * cache_len * kv) / hw["bw"]
    t_flop = rows * 2 * p / hw["flops"]
    t = max(t_mem, t_flop)
    return {
        "model": name, "params_B": p / 1e9, "weights_bf16_GiB": 2 * p / GIB, "train_state_GiB": 16 * p / GIB,
        "kv_KiB_per_token": kv / 1024, "kv_cache_GiB": rows * cache_len * kv / GIB,
        "logits_f32_GiB_per_4k_row": 4 * cfg.vocab_size * 4096 / GIB,
        "decode_step_ms": 1e3 * t, "decode_tok_per_s": rows / t,
        "max_rows_in_memory": int((hw["mem"] * 0.9 - 16 * p - 2 * p) // (cache_len * kv)),
    }


def print_estimates() -> list[dict]:
    out = []
    for hw_name, hw in HARDWARE.items():
        print(f"\n## {hw_name}: {hw['bw'] / 1e12:.2f} TB/s, {hw['flops'] / 1e12:.0f} TFLOP/s bf16, {hw['mem'] / 1e9:.0f} GB")
        print("| model | params (B) | bf16 weights GiB | fp32 train state GiB | KV KiB/token | R | S | "
              "KV cache GiB | decode ms/step | decode tokens/s | rows that fit (S) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for name in ("qwen3_0_6b", "qwen3_4b", "qwen3_8b"):
            for rows in (64, 256):
                e = estimate(name, rows=rows, cache_len=4608, hw=hw)
                e["hw"], e["rows"] = hw_name, rows
                out.append(e)
                print(f"| {name} | {e['params_B']:.2f} | {e['weights_bf16_GiB']:.1f} | {e['train_state_GiB']:.1f} | "
                      f"{e['kv_KiB_per_token']:.0f} | {rows} | 4608 | {e['kv_cache_GiB']:.1f} | {e['decode_step_ms']:.1f} | "
                      f"{e['decode_tok_per_s']:,.0f} | {max(e['max_rows_in_memory'], 0)} |")
    print(f"\nfloat32 logits of one 4096-token row: {out[0]['logits_f32_GiB_per_4k_row']:.2f} GiB")
    return out


def _time(fn, *, repeat: int = 3) -> float:
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts)


def bench_load(tmp: pathlib.Path) -> dict:
    """Checkpoint read + conversion throughput (bf16 safetensors -> fp32 params) for preset ``10m``."""
    cfg = ModelConfig.preset("10m", param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
    params = init_params(cfg, jax.random.key(0))
    hf.save_checkpoint(tmp / "10m", params, cfg)
    size = (tmp / "10m" / "model.safetensors").stat().st_size

    def load():
        _, p = hf.load_checkpoint(tmp / "10m", param_dtype=jnp.float32)
        jax.block_until_ready(p)
    t = _time(load)
    return {"load_10m_s": t, "load_MB_per_s": size / 1e6 / t, "file_MB": size / 1e6}


def bench_verify() -> dict:
    """Responses graded per second (shipped solutions, each also with a wrong gold answer)."""
    from prs.tasks.math_jsonl import SHIPPED, load_rows

    rows = load_rows(str(SHIPPED))
    pairs = [(r["solution"], r["answer"]) for r in rows] + [(r["solution"], "(" + r["answer"] + ")+1") for r in rows]
    out = {}
    for be in ["fallback"] + (["math-verify"] if mv.has_math_verify() else []):
        t = _time(lambda: [mv.verify_answer(s, g, backend=be) for s, g in pairs])
        out[f"verify_{be}_per_s"] = len(pairs) / t
    return out


def bench_tokenizer(tmp: pathlib.Path) -> dict:
    from prs.tasks.math_jsonl import make_math_jsonl

    from prs.tasks.math_jsonl import tokenizer_texts

    hf.make_tiny_checkpoint(tmp / "tiny", texts=tokenizer_texts())
    t0 = time.perf_counter()
    task = make_math_jsonl(tokenizer=str(tmp / "tiny"))
    return {"task_build_24_problems_s": time.perf_counter() - t0, "prompt_width": task.width}


def bench_cpu_qwen3_0_6b(tmp: pathlib.Path) -> dict:
    """Qwen3-0.6B shapes with random bf16 weights on this CPU: checkpoint load, prefill, decode."""
    from prs.models.qwen3 import decode_step, prefill

    cfg = ModelConfig.preset("qwen3_0_6b", param_dtype=jnp.bfloat16, dtype=jnp.bfloat16)
    params = jax.jit(lambda k: init_params(cfg, k), static_argnums=())(jax.random.key(0))
    hf.save_checkpoint(tmp / "q06", params, cfg)
    del params
    t0 = time.perf_counter()
    cfg2, params = hf.load_checkpoint(tmp / "q06")
    jax.block_until_ready(params)
    t_load = time.perf_counter() - t0
    R, P, S = 1, 32, 64
    tok = jnp.ones((R, P), jnp.int32)
    pf = jax.jit(lambda p, t: prefill(p, t, jnp.full((R,), P, jnp.int32), cfg=cfg2, max_len=S))
    logits, cache = pf(params, tok)
    jax.block_until_ready(logits)
    t_prefill = _time(lambda: jax.block_until_ready(pf(params, tok)[0]), repeat=2)
    step = jax.jit(lambda p, c, t, pos: decode_step(p, c, t, pos, cfg=cfg2), donate_argnums=(1,))
    pos = jnp.full((R,), P, jnp.int32)
    logits, cache = step(params, cache, jnp.ones((R,), jnp.int32), pos)
    jax.block_until_ready(logits)
    n = 8
    t0 = time.perf_counter()
    for i in range(n):
        logits, cache = step(params, cache, jnp.argmax(logits, -1).astype(jnp.int32), pos + 1 + i)
    jax.block_until_ready(logits)
    t_dec = (time.perf_counter() - t0) / n
    return {"q06_load_s": t_load, "q06_prefill_32_s": t_prefill, "q06_decode_step_s": t_dec,
            "q06_weights_GB": 2 * n_params(cfg) / 1e9}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--estimates", action="store_true", help="only the first-principles tables")
    ap.add_argument("--cpu-0.6b", dest="cpu06", action="store_true", help="also run Qwen3-0.6B shapes on the CPU")
    args = ap.parse_args()
    print_estimates()
    if args.estimates:
        return
    res = {"backend": jax.default_backend(), "devices": jax.device_count()}
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        res |= bench_load(tmp)
        res |= bench_verify()
        res |= bench_tokenizer(tmp)
        if args.cpu06:
            res |= bench_cpu_qwen3_0_6b(tmp)
    print("\nmeasured:", json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in res.items()}, indent=1))


if __name__ == "__main__":
    main()
