"""Device check: one run on one accelerator that says whether the presets' assumptions hold there,
and writes one JSON file. ``benchmarks/device_check.sh`` is the wrapper to run (it sets the
environment); ``--cpu`` runs the same checks at tiny shapes on the CPU backend (what
tests/benchmarks/test_device_check.py runs, so the script cannot rot).

    benchmarks/device_check.sh $OUT/device_check.json            # one GPU, <= 8 minutes
    benchmarks/device_check.sh /tmp/dc.json --cpu                # CPU, tiny shapes

Checks (each in its own child process on an accelerator, so one crash, OOM or hang costs only that
check and each reads a clean ``peak_bytes_in_use``; in-process with ``--cpu``):

* ``env``: versions, device kind and count, the allocator's ``bytes_limit``; the bf16 matmul rate
  and copy bandwidth measured here beside the vendor's peak (``PEAKS``), the rooflines' denominators.
* ``weights``: the preset's random-weight model (Qwen3-0.6B shape on a GPU) written once as an HF
  checkpoint (``prs.models.hf.save_checkpoint``), which every later check, torch's included, reads.
* ``attention``: ``attention_impl=cudnn`` (on CPU: ``xla``, cudnn is skipped with the reason) against
  the reference attention on ragged right-padded rows, bf16, both measured against a float32
  reference run: the training forward's per-token log-probs and the gradients of their masked mean
  (``forward``), and ``qwen3.prefill``'s last-token logits and KV cache. It passes when
  err(impl) <= 2·err(reference bf16) + 1e-3 for each quantity.
* ``update`` (and ``update_cudnn``): the trainer's jitted update (``prs.rl.trainer.update_step``,
  AdamW, micro-batched, remat full) at the one-GPU preset: ``prs.plan``'s ``update_total`` against
  the compiled program's ``memory_analysis()`` and against ``memory_stats()['peak_bytes_in_use']``
  after three steps (fails if the planner is below the measured peak, i.e. unsafe); step time and
  MFU = 3 · forward matmul FLOPs (causal attention over the average W/2 keys; remat's recompute
  not counted, as MFU is defined) / time / peak bf16 FLOP/s; then the prs forward (hidden states +
  chunked LM head log-probs) on ``fwd_rows`` rows, timed, its log-probs kept for torch.
* ``sampling``: the sampler (``prs.models.sampler.sample_jit``, bf16 copy, greedy, no stop id so
  every row generates its budget) on a fresh call (R rows of ragged prompts in the P bucket, T new
  tokens) and a Prefix Sampling re-roll call (rows of prompt + prefix in the P + T bucket: P + 2T
  cache slots): ``prs.plan``'s ``sampling_total`` against ``memory_analysis()`` and the peak;
  decode tokens/s against the HBM roofline, R / (bytes one decode step reads / bandwidth), where a
  step reads the bf16 weights once and the whole static cache (``sampler`` attends all P + T slots;
  also given: the bound if only the filled slots were read).
* ``torch``: HF ``Qwen3ForCausalLM`` (bf16, eager, default attention) built from the same checkpoint:
  its forward on the same rows (time, MFU, |log-prob difference| against prs's) and ``generate``
  (greedy, left-padded, the same prompts and T) tokens/s against the same roofline, with the share
  of rows whose first generated token equals prs's.

Every check records ``status`` (``ok``, ``fail``, ``error`` with the exception, ``skipped`` with the
reason); the JSON is rewritten after each check, so a kill leaves the finished ones. No number in
this docstring is a measurement; measured numbers go to benchmarks/README.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import traceback

SCHEMA = 1
GIB = 2 ** 30
STATUSES = ("ok", "fail", "error", "skipped")
ORDER = ("env", "weights", "attention", "update", "sampling", "torch", "update_cudnn")

# Vendor peaks (dense bf16 FLOP/s, HBM bytes/s) by a substring of ``device.device_kind``.
PEAKS = {
    "H200": (989e12, 4.8e12),
    "H100": (989e12, 3.35e12),   # SXM; PCIe is lower (756e12, 2.0e12)
    "A100": (312e12, 2.039e12),
    "TPU v5p": (459e12, 2.765e12),
    "TPU v5 lite": (197e12, 0.819e12),
    "TPU v4": (275e12, 1.2e12),
}


@dataclasses.dataclass(frozen=True)
class Preset:
    """The shapes one run uses. ``model``: ``ModelConfig`` fields (bf16 compute, fp32 masters).
    Update: R = ``rows`` rows of W = P + 2T tokens in ``micro_batches``; sampling: R rows, prompt
    bucket P = ``prompt``, budget T = ``budget``; attention check: ``att_model`` on ``att_rows`` x
    ``att_len``; forward side by side on ``fwd_rows`` rows of W."""

    name: str
    model: dict
    rows: int
    prompt: int
    budget: int
    micro_batches: int
    logits_chunk: int
    att_model: dict
    att_rows: int
    att_len: int
    fwd_rows: int
    repeats: int


_QWEN3_0_6B = dict(vocab_size=151_936, d_model=1024, n_layers=28, n_heads=16, n_kv_heads=8, head_dim=128,
                   d_ff=3072, rope_theta=1_000_000.0, tie_embeddings=True)
_TINY = dict(vocab_size=512, d_model=64, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128,
             rope_theta=10_000.0, tie_embeddings=True)
PRESETS = {
    "qwen3_0_6b_1gpu": Preset("qwen3_0_6b_1gpu", _QWEN3_0_6B, rows=64, prompt=512, budget=512, micro_batches=8,
                              logits_chunk=512, att_model={**_QWEN3_0_6B, "n_layers": 2, "vocab_size": 1024},
                              att_rows=8, att_len=1024, fwd_rows=4, repeats=3),
    "cpu_tiny": Preset("cpu_tiny", _TINY, rows=8, prompt=32, budget=16, micro_batches=2, logits_chunk=16,
                       att_model={**_TINY, "n_layers": 2}, att_rows=4, att_len=32, fwd_rows=2, repeats=2),
}


# ----------------------------------------------------------------------------- helpers


def model_cfg(fields: dict, **over):
    import jax.numpy as jnp

    from prs.models.qwen3 import ModelConfig

    base = dict(dtype=jnp.bfloat16, param_dtype=jnp.float32, remat="full")
    return ModelConfig(**{**fields, **base, **over})


def peaks(device_kind: str) -> tuple[float | None, float | None]:
    for key, val in PEAKS.items():
        if key.lower() in device_kind.lower():
            return val
    return None, None


def memory_stats() -> dict | None:
    import jax

    try:
        return jax.devices()[0].memory_stats()
    except Exception:  # some backends raise instead of returning None
        return None


def gib(b) -> float | None:
    return None if b is None else round(float(b) / GIB, 4)


def flops_per_token(cfg, ctx: float, *, lm_head: bool = True) -> float:
    """Matmul FLOPs of one token's forward: 2·(matmul weights) + 4·ctx·K·H per layer (q·k, p·v over
    ``ctx`` keys) + the LM head 2·D·V (``benchmarks/_common.forward_flops_per_token``)."""
    L, D, K, Kv, H, F, V = (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff,
                            cfg.vocab_size)
    per_layer = 2 * (D * K * H + 2 * D * Kv * H + K * H * D + 3 * D * F) + 4 * ctx * K * H
    return L * per_layer + (2 * D * V if lm_head else 0)


def decode_step_bytes(cfg, *, rows: int, slots: float, weight_bytes: int = 2, cache_bytes: int = 2) -> float:
    """Bytes one decode step reads from HBM: every matmul weight once (layers, and the LM head) and
    ``slots`` cache slots of K and V per row and layer."""
    L, D, K, Kv, H, F, V = (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff,
                            cfg.vocab_size)
    weights = L * (D * (K + 2 * Kv) * H + K * H * D + 3 * D * F) + D * V
    return weights * weight_bytes + 2 * L * rows * slots * Kv * H * cache_bytes


def ragged_prompts(vocab: int, rows: int, width: int, lo: int, seed: int):
    """Right-padded rows of random ids in [1, vocab) with lengths in [lo, width] -> (ids [R, W], lengths [R])."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(lo, width + 1, rows).astype(np.int32)
    ids = rng.integers(1, vocab, (rows, width)).astype(np.int32)
    return np.where(np.arange(width)[None] < lengths[:, None], ids, 0).astype(np.int32), lengths


def update_batch(cfg, ps: Preset, rows: int | None = None):
    """The update's synthetic batch: ragged rows of W = P + 2T (lengths in [W/2, W]), loss on the
    tokens after the prompt, ``old_logp`` = −log V (ratio near 1 for a random model), N(0, 1) advantages."""
    import numpy as np

    R = rows or ps.rows
    W = ps.prompt + 2 * ps.budget
    tokens, lengths = ragged_prompts(cfg.vocab_size, R, W, W // 2, seed=1)
    valid = np.arange(W)[None] < lengths[:, None]
    positions = np.maximum(np.cumsum(valid, 1) - 1, 0).astype(np.int32)
    loss_mask = valid & (np.arange(W)[None] >= ps.prompt)
    old = np.where(loss_mask, -math.log(cfg.vocab_size), 0.0).astype(np.float32)
    adv = np.random.default_rng(2).standard_normal(R).astype(np.float32)
    return dict(tokens=tokens, positions=positions, valid=valid, loss_mask=loss_mask, old_logp=old, advantages=adv)


def _common():
    """``benchmarks/_common.py``, imported on first use (it imports jax, which must see the
    environment this script sets first)."""
    here = str(pathlib.Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import _common

    return _common


def timed(fn, repeats: int) -> float:
    return _common().timed(fn, repeats)


def load_params(wd: pathlib.Path, cfg):
    from prs.models import hf

    return hf.load_params(hf.checkpoint_tensors(wd / "ckpt"), cfg)


def compiled_memory(compiled, compile_s: float):
    """``prs.plan_compiled.Memory`` of a compiled program, or None where the backend gives no
    ``memory_analysis()`` (the checks go on without it)."""
    from prs import plan_compiled as PC

    try:
        return PC.Memory.of(compiled, compile_s)
    except Exception:
        return None


def env_peaks(env: dict) -> tuple[float, float]:
    """The FLOP/s and bytes/s the rooflines divide by: the vendor's peak where known, else measured."""
    return (env.get("peak_flops") or env.get("measured_matmul_flops") or float("nan"),
            env.get("peak_hbm_bytes_per_s") or env.get("measured_copy_bytes_per_s") or float("nan"))


# ----------------------------------------------------------------------------- checks


def check_env(ps: Preset, wd: pathlib.Path, ctx: dict) -> dict:
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    out = {"jax": jax.__version__, "backend": jax.default_backend(), "device_kind": dev.device_kind,
           "device_count": jax.device_count(), "preset": ps.name,
           "env": {k: os.environ.get(k) for k in ("XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_PREALLOCATE",
                                                  "XLA_PYTHON_CLIENT_ALLOCATOR", "XLA_FLAGS", "JAX_PLATFORMS")}}
    ms = memory_stats()
    out["bytes_limit_gib"] = gib(ms.get("bytes_limit")) if ms else None
    out["peak_flops"], out["peak_hbm_bytes_per_s"] = peaks(dev.device_kind)
    cpu = out["backend"] == "cpu"
    n = 512 if cpu else 8192
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32 if cpu else jnp.bfloat16)  # CPU: no bf16 units
    mm = jax.jit(lambda x: x @ x)
    mm(a).block_until_ready()
    out["measured_matmul_flops"] = 2 * n ** 3 / timed(lambda: mm(a), 5)
    m = (1 << 22) if cpu else (1 << 28)  # f32 elements: 1 GiB / 16 MiB
    b = jnp.ones((m,), jnp.float32)
    cp = jax.jit(lambda x: x * 2.0)
    cp(b).block_until_ready()
    out["measured_copy_bytes_per_s"] = 2 * 4 * m / timed(lambda: cp(b), 5)  # read + write
    from importlib import metadata

    for name in ("jaxlib", "torch", "transformers", "flax", "optax", "orbax-checkpoint", "safetensors"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:  # absent is information, not an error
            out[name] = None
    out["status"] = "ok"
    return out


def check_weights(ps: Preset, wd: pathlib.Path, ctx: dict) -> dict:
    import jax

    from prs.models import hf
    from prs.models.qwen3 import init_params, param_count

    cfg = model_cfg(ps.model)
    t0 = time.perf_counter()
    params = init_params(cfg, jax.random.key(0), std=0.02)
    hf.save_checkpoint(wd / "ckpt", params, cfg)
    return {"status": "ok", "params": param_count(params), "path": str(wd / "ckpt"),
            "seconds": round(time.perf_counter() - t0, 1)}


def _attention_run(cfg, params, tokens, lengths):
    """(log-probs [R, T-1] at every target, grads of their masked mean, prefill logits [R, V], cache)."""
    import jax
    import jax.numpy as jnp

    from prs.core.losses import token_logprobs
    from prs.models import qwen3 as M

    R, T1 = tokens.shape  # T1 = T + 1: the forward and the prefill both see T tokens
    T = T1 - 1
    valid = jnp.arange(T1)[None] < lengths[:, None]
    tgt_mask = valid[:, 1:]

    def loss(p):
        logp = token_logprobs(M.forward(p, tokens[:, :-1], cfg=cfg, valid=valid[:, :-1]), tokens[:, 1:])
        return jnp.sum(jnp.where(tgt_mask, logp, 0.0)) / jnp.maximum(tgt_mask.sum(), 1), logp

    def both(p):  # one program: the training forward/backward and the prefill
        (_, logp), grads = jax.value_and_grad(loss, has_aux=True)(p)
        return (logp, grads, *M.prefill(p, tokens[:, :-1], jnp.minimum(lengths, T), cfg=cfg, max_len=T))

    return jax.jit(both)(params)


def _errors(run, truth, tokens, lengths) -> dict:
    import jax
    import numpy as np

    T1 = tokens.shape[1]
    valid = np.arange(T1)[None] < np.asarray(lengths)[:, None]  # [R, T + 1]
    tm = valid[:, 1:]
    valid = valid[:, :-1]  # the prefill's T slots
    lp, lp0 = np.asarray(run[0], np.float64), np.asarray(truth[0], np.float64)
    g = np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(run[1])])
    g0 = np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(truth[1])])
    cache_err = 0.0
    for k in ("k", "v"):
        c, c0 = np.asarray(run[3][k], np.float64), np.asarray(truth[3][k], np.float64)  # [L, R, S, Kv, H]
        m = valid[None, :, :, None, None]
        cache_err = max(cache_err, float(np.abs(np.where(m, c - c0, 0)).max() / max(np.abs(np.where(m, c0, 0)).max(), 1e-30)))
    return {"train_logp_max_abs": float(np.abs(np.where(tm, lp - lp0, 0)).max()),
            "train_grad_rel": float(np.linalg.norm(g - g0) / max(np.linalg.norm(g0), 1e-30)),
            "prefill_logits_max_abs": float(np.abs(np.asarray(run[2], np.float64) - np.asarray(truth[2], np.float64)).max()),
            "prefill_cache_rel": cache_err}


def check_attention(ps: Preset, wd: pathlib.Path, ctx: dict) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from prs.models.qwen3 import init_params

    backend = jax.default_backend()
    R, T = ps.att_rows, ps.att_len
    # ragged rows: full, about 3/4, 1/2, a short one, ..., down to one token (no target)
    lengths = np.array([max(1, round((T + 1) * f)) for f in np.linspace(1.0, 0.0, R)], np.int32)
    lengths[-1] = 1
    tokens = np.where(np.arange(T + 1)[None] < lengths[:, None],  # one extra column: the last targets
                      np.random.default_rng(3).integers(1, ps.att_model["vocab_size"], (R, T + 1)), 0).astype(np.int32)
    over = dict(remat="none", prefill_flash_from=None)  # prefill through attention_impl, not the flash tiles
    c32 = model_cfg(ps.att_model, dtype=jnp.float32, attention_impl="reference", **over)
    params = init_params(c32, jax.random.key(1), std=0.05)
    tok, ln = jnp.asarray(tokens), jnp.asarray(lengths)
    truth = _attention_run(c32, params, tok, ln)
    ref = _errors(_attention_run(model_cfg(ps.att_model, attention_impl="reference", **over), params, tok, ln),
                  truth, tokens, lengths)
    impls = {}
    wanted = ["cudnn"] + (["xla"] if backend == "cpu" else [])
    for impl in wanted:
        if impl == "cudnn" and backend != "gpu":
            impls[impl] = {"status": "skipped", "reason": f"cudnn needs a CUDA GPU (backend {backend})"}
            continue
        try:
            err = _errors(_attention_run(model_cfg(ps.att_model, attention_impl=impl, **over), params, tok, ln),
                          truth, tokens, lengths)
            bad = [k for k in err if not err[k] <= 2 * ref[k] + 1e-3]
            impls[impl] = {"status": "fail" if bad else "ok", "errors": err, "over_tolerance": bad}
        except Exception as e:
            impls[impl] = {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000]}
    ran = [v["status"] for v in impls.values() if v["status"] != "skipped"]
    status = "error" if "error" in ran else "fail" if "fail" in ran else "ok" if ran else "skipped"
    return {"status": status, "rows": R, "width": T, "lengths": lengths.tolist(), "reference_bf16_errors": ref,
            "tolerance": "err(impl) <= 2 * err(reference bf16) + 1e-3, both against float32 reference",
            "impls": impls}


def _peak_verdict(planned: float, peak: float | None, backend: str) -> tuple[str, dict]:
    if peak is None:
        return "ok", {"peak_gib": None, "peak_reason": f"no memory_stats on backend {backend}"}
    return ("ok" if planned >= peak else "fail"), {"peak_gib": gib(peak), "peak_bytes": int(peak),
                                                   "planned_over_peak": round(planned / peak, 3)}


def check_update(ps: Preset, wd: pathlib.Path, ctx: dict, impl: str = "xla") -> dict:
    import functools

    import jax
    import jax.numpy as jnp
    import optax

    from prs import plan as PL
    from prs.models import qwen3 as M
    from prs.models.lm_head import lm_head_logprobs
    from prs.rl.trainer import Batch, RLConfig, update_step

    backend = jax.default_backend()
    if impl == "cudnn" and backend != "gpu":
        return {"status": "skipped", "reason": f"cudnn needs a CUDA GPU (backend {backend})"}
    cfg = model_cfg(ps.model, attention_impl=impl)
    rl = RLConfig(micro_batches=ps.micro_batches, logits_chunk=ps.logits_chunk)
    tx = optax.chain(optax.clip_by_global_norm(rl.optim.grad_clip),
                     optax.adamw(rl.optim.lr, b1=rl.optim.b1, b2=rl.optim.b2, weight_decay=rl.optim.weight_decay))
    R, P, T = ps.rows, ps.prompt, ps.budget
    W = P + 2 * T
    params = load_params(wd, cfg)
    opt = tx.init(params)
    batch = Batch(**{k: jnp.asarray(v) for k, v in update_batch(cfg, ps).items()})
    fn = jax.jit(functools.partial(update_step, cfg=cfg, rl=rl, tx=tx), donate_argnums=(0, 1))
    t0 = time.perf_counter()
    compiled = fn.lower(params, opt, batch).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled_memory(compiled, compile_s)
    times = []
    for _ in range(ps.repeats + 1):
        t0 = time.perf_counter()
        params, opt, m = compiled(params, opt, batch)
        jax.block_until_ready((params, m))
        times.append(time.perf_counter() - t0)
    ms = memory_stats()
    peak = ms.get("peak_bytes_in_use") if ms else None
    limit = ms.get("bytes_limit") if ms else None
    plan = PL.plan(cfg, rows=R, width=W, prompt_len=P, max_new_tokens=T, micro_batches=ps.micro_batches,
                   logits_chunk=ps.logits_chunk, sampling_bytes=2, cache_slots=P + 2 * T,
                   device_gib=(limit or 80 * GIB) / GIB)
    step_s = min(times[1:])
    model_flops = 3 * flops_per_token(cfg, (W - 1) / 2) * R * (W - 1)
    pf, _ = env_peaks(ctx.get("env", {}))
    status, pk = _peak_verdict(plan.update_total, peak, backend)
    out = {"attention_impl": impl, "rows": R, "width": W, "micro_batches": ps.micro_batches, "remat": cfg.remat,
           "planner_bytes": int(plan.update_total), "compiled_bytes": mem.total if mem else None,
           "planner_gib": gib(plan.update_total), "planner_terms_gib": {k: gib(getattr(plan, k)) for k in (
               "parameters", "optimizer_state", "gradients", "optimizer_temps", "activations", "logits", "head")},
           "compiled_gib": mem.gib() if mem else None, "compile_s": round(compile_s, 1), "bytes_limit_gib": gib(limit),
           **pk, "planned_over_compiled": round(plan.update_total / mem.total, 3) if mem else None,
           "step_s": step_s, "step_times_s": [round(t, 4) for t in times], "model_flops": model_flops,
           "mfu": model_flops / step_s / pf, "loss": float(m["loss"]), "grad_norm": float(m["grad_norm"])}
    # the forward side by side with torch: hidden states + chunked LM head log-probs, fresh weights
    del params, opt
    params = load_params(wd, cfg)
    b = update_batch(cfg, ps, rows=ps.fwd_rows)
    tok, val = jnp.asarray(b["tokens"]), jnp.asarray(b["valid"])
    fwd = jax.jit(lambda p: lm_head_logprobs(p, M.forward_hidden(p, tok[:, :-1], cfg=cfg, valid=val[:, :-1]),
                                             tok[:, 1:], cfg=cfg, chunk=ps.logits_chunk)[0])
    logp = jax.block_until_ready(fwd(params))
    fwd_s = timed(lambda: fwd(params), ps.repeats)
    import numpy as np

    np.save(wd / "prs_logp.npy", np.asarray(logp, np.float32))
    f_flops = flops_per_token(cfg, (W - 1) / 2) * ps.fwd_rows * (W - 1)
    out["forward"] = {"rows": ps.fwd_rows, "width": W - 1, "seconds": fwd_s, "mfu": f_flops / fwd_s / pf}
    out["status"] = status
    return out


def _sampler_run(params, tokens, lengths, budget, *, cfg, scfg, repeats: int):
    """One compiled sampler program (``sample_jit``, as ``prs.models.sampler.sample`` calls it) ->
    (Memory, first-call seconds incl. compile, best call seconds, rollout)."""
    import jax
    import numpy as np

    from prs.models import sampler as S

    key = jax.random.key(0)
    args = (params, tokens, lengths, key, budget, np.int32(0))
    t0 = time.perf_counter()
    compiled = S.sample_jit.lower(*args, cfg=cfg, scfg=scfg, mesh=None, return_cache=False).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled_memory(compiled, compile_s)
    ro, _ = jax.block_until_ready(compiled(*args))
    first = time.perf_counter() - t0
    best = timed(lambda: compiled(*args), repeats)
    return mem, compile_s, first, best, ro


def check_sampling(ps: Preset, wd: pathlib.Path, ctx: dict) -> dict:
    import gc

    import jax
    import jax.numpy as jnp
    import numpy as np

    from prs import plan as PL
    from prs.models import sampler as S

    backend = jax.default_backend()
    cfg = model_cfg(ps.model)
    R, P, T = ps.rows, ps.prompt, ps.budget
    p32 = load_params(wd, cfg)
    params = jax.block_until_ready(jax.tree.map(lambda x: x.astype(jnp.bfloat16), p32))  # the sampling copy
    del p32
    gc.collect()
    ms = memory_stats()
    limit = ms.get("bytes_limit") if ms else None
    scfg = S.SamplerConfig(max_new_tokens=T, temperature=0.0, buckets=(P, P + T), pad_id=0)
    _, bw = env_peaks(ctx.get("env", {}))
    out = {"rows": R, "prompt": P, "budget": T, "bytes_limit_gib": gib(limit), "calls": {}}
    status = "ok"
    for call, width, lo in (("fresh", P, P // 2), ("reroll", P + T, P + T // 2)):
        tokens, lengths = ragged_prompts(cfg.vocab_size, R, width, lo, seed=4)
        budget = np.full(R, T, np.int32)
        mem, compile_s, first, best, ro = _sampler_run(params, jnp.asarray(tokens), jnp.asarray(lengths), jnp.asarray(budget),
                                            cfg=cfg, scfg=scfg, repeats=ps.repeats if call == "fresh" else 1)
        gen = int(np.asarray(ro.policy_mask).sum())
        ms = memory_stats()
        peak = ms.get("peak_bytes_in_use") if ms else None
        slots = width + T
        plan = PL.plan(cfg, rows=R, width=P + 2 * T, prompt_len=P, max_new_tokens=T, sampling_bytes=2,
                       cache_slots=slots, device_gib=(limit or 80 * GIB) / GIB)
        st, pk = _peak_verdict(plan.sampling_total, peak, backend)
        status = "fail" if st == "fail" else status
        step_bytes = decode_step_bytes(cfg, rows=R, slots=slots)
        filled = decode_step_bytes(cfg, rows=R, slots=float(np.mean(lengths)) + T / 2)
        tps = gen / best
        out["calls"][call] = {
            "prompt_bucket": width, "cache_slots": slots, "generated_tokens": gen, "expected_tokens": R * T,
            "first_call_s": round(first, 2), "call_s": best, "tokens_per_s": tps,
            "step_bytes": step_bytes, "roofline_tokens_per_s": R * bw / step_bytes,
            "roofline_fraction": tps / (R * bw / step_bytes), "roofline_filled_tokens_per_s": R * bw / filled,
            "planner_bytes": int(plan.sampling_total), "compiled_bytes": mem.total if mem else None,
            "planner_gib": gib(plan.sampling_total), "planner_terms_gib": {k: gib(getattr(plan, k)) for k in (
                "kv_cache", "sampler_params", "decode_weights", "prefill", "cache_transient", "sampler_logits")},
            "compiled_gib": mem.gib() if mem else None, "compile_s": round(compile_s, 1),
            "planned_over_compiled": round(plan.sampling_total / mem.total, 3) if mem else None, **pk}
        if gen != R * T:
            status = "fail"
        if call == "fresh":
            new = np.asarray(ro.tokens)[np.arange(R)[:, None], lengths[:, None] + np.arange(T)[None]]  # [R, T]
            np.save(wd / "prs_greedy.npy", new.astype(np.int32))
    out["status"] = status
    return out


def check_torch(ps: Preset, wd: pathlib.Path, ctx: dict) -> dict:
    if ctx.get("isolated"):  # this child needs jax only for numpy helpers: keep its pool off the GPU
        os.environ["JAX_PLATFORMS"] = "cpu"
    try:
        import torch
        import transformers
    except Exception as e:
        return {"status": "skipped", "reason": f"torch/transformers not importable: {type(e).__name__}: {e}"}
    import numpy as np

    from prs.models import hf

    cfg = model_cfg(ps.model)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = transformers.Qwen3ForCausalLM(_common().hf_qwen3_config(cfg))
    sd = {k: torch.from_numpy(np.array(v, np.float32)) for k, v in hf.read_safetensors(
        wd / "ckpt" / "model.safetensors").items()}
    _common().load_hf_state(model, sd, cfg)
    model = model.to(device=dev, dtype=torch.bfloat16).eval()
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    pflops, bw = env_peaks(ctx.get("env", {}))
    out = {"torch": torch.__version__, "transformers": transformers.__version__, "device": dev,
           "attn_implementation": getattr(model.config, "_attn_implementation", None)}

    def best(fn, n):
        t = float("inf")
        for _ in range(n):
            sync()
            t0 = time.perf_counter()
            r = fn()
            sync()
            t = min(t, time.perf_counter() - t0)
        return t, r

    # forward on the update check's rows (right-padded; HF positions = index = prs's on valid tokens)
    b = update_batch(cfg, ps, rows=ps.fwd_rows)
    W = b["tokens"].shape[1]
    ids = torch.from_numpy(b["tokens"]).long().to(dev)
    am = torch.from_numpy(b["valid"]).long().to(dev)

    @torch.no_grad()
    def fwd():
        logits = model(ids[:, :-1], attention_mask=am[:, :-1]).logits.float()
        return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None])[..., 0]

    fwd()
    s, logp = best(fwd, ps.repeats)
    f_flops = flops_per_token(cfg, (W - 1) / 2) * ps.fwd_rows * (W - 1)
    out["forward"] = {"rows": ps.fwd_rows, "width": W - 1, "seconds": s, "mfu": f_flops / s / pflops}
    if (wd / "prs_logp.npy").exists():
        mine = np.load(wd / "prs_logp.npy")
        tm = b["valid"][:, 1:]
        d = np.abs(logp.cpu().numpy() - mine)[tm]
        out["forward"]["logp_abs_diff_vs_prs"] = {"max": float(d.max()), "mean": float(d.mean())}
    # generate on the sampling check's fresh prompts (left-padded for HF), greedy, exactly T tokens
    R, P, T = ps.rows, ps.prompt, ps.budget
    tokens, lengths = ragged_prompts(cfg.vocab_size, R, P, P // 2, seed=4)
    left = np.zeros_like(tokens)
    for r in range(R):
        left[r, P - lengths[r]:] = tokens[r, :lengths[r]]
    lids = torch.from_numpy(left).long().to(dev)
    lam = (torch.arange(P)[None] >= torch.from_numpy(P - lengths)[:, None]).long().to(dev)
    kw = dict(attention_mask=lam, do_sample=False, max_new_tokens=T, min_new_tokens=T, eos_token_id=None,
              pad_token_id=0)
    with torch.no_grad():
        model.generate(lids, **{**kw, "max_new_tokens": 2, "min_new_tokens": 2})  # warm-up
        s, gen = best(lambda: model.generate(lids, **kw), 1)
    new = gen[:, P:].cpu().numpy()
    slots = P + T  # roofline as prs's static cache; HF's dynamic cache reads only the filled slots
    from_bytes = decode_step_bytes(cfg, rows=R, slots=float(np.mean(lengths)) + T / 2)
    tps = new.size / s
    out["generate"] = {"rows": R, "new_tokens": int(new.shape[1]), "seconds": s, "tokens_per_s": tps,
                       "roofline_filled_tokens_per_s": R * bw / from_bytes,
                       "roofline_fraction_filled": tps / (R * bw / from_bytes),
                       "roofline_static_tokens_per_s": R * bw / decode_step_bytes(cfg, rows=R, slots=slots)}
    if (wd / "prs_greedy.npy").exists():
        mine = np.load(wd / "prs_greedy.npy")
        out["generate"]["first_token_agreement_vs_prs"] = float(np.mean(mine[:, 0] == new[:, 0]))
    out["status"] = "ok"
    return out


CHECKS = {"env": check_env, "weights": check_weights, "attention": check_attention, "update": check_update,
          "sampling": check_sampling, "torch": check_torch,
          "update_cudnn": lambda ps, wd, ctx: check_update(ps, wd, ctx, impl="cudnn")}
NEEDS = {"attention": (), "env": (), "weights": (), "update": ("weights",), "sampling": ("weights",),
         "torch": ("weights",), "update_cudnn": ("weights",)}


def run_one(name: str, ps: Preset, wd: pathlib.Path, ctx: dict) -> dict:
    """A check in this process; an exception becomes ``status: error``."""
    t0 = time.perf_counter()
    try:
        res = CHECKS[name](ps, wd, ctx)
    except Exception as e:
        res = {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000],
               "traceback": traceback.format_exc()[-4000:]}
    res["wall_s"] = round(time.perf_counter() - t0, 2)
    return res


def run_child(name: str, ps: Preset, wd: pathlib.Path, ctx: dict, timeout: float) -> dict:
    """A check in a child process (``--child``), with a timeout; a crash or a timeout becomes ``error``."""
    (wd / "ctx.json").write_text(json.dumps(ctx))
    res_file = wd / f"{name}.json"
    res_file.unlink(missing_ok=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--preset", ps.name, "--workdir", str(wd)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        tail = (p.stdout + p.stderr)[-3000:]
        rc = p.returncode
    except subprocess.TimeoutExpired as e:
        out = ((e.stdout or b"") + (e.stderr or b"")) if isinstance(e.stdout, bytes) else ((e.stdout or "") + (e.stderr or ""))
        tail = out.decode(errors="replace")[-3000:] if isinstance(out, bytes) else out[-3000:]
        return {"status": "error", "error": f"timed out after {timeout:.0f} s", "output_tail": tail,
                "wall_s": round(time.perf_counter() - t0, 2)}
    if res_file.exists():
        return json.loads(res_file.read_text())
    return {"status": "error", "error": f"child exited with code {rc} without a result", "output_tail": tail,
            "wall_s": round(time.perf_counter() - t0, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="the JSON file (default $OUT/device_check.json or ./device_check.json)")
    ap.add_argument("--cpu", action="store_true", help="CPU backend, tiny shapes, checks in this process")
    ap.add_argument("--preset", default=None, choices=sorted(PRESETS))
    ap.add_argument("--checks", default=",".join(ORDER), help=f"comma-separated subset of {','.join(ORDER)}")
    ap.add_argument("--budget-s", type=float, default=None, help="stop starting checks after this many seconds "
                    "(default 450 on an accelerator, 600 with --cpu)")
    ap.add_argument("--child-timeout-s", type=float, default=240.0, help="most seconds one isolated check may take")
    ap.add_argument("--isolate", action="store_true", help="each check in a child process (the default without --cpu)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    ps = PRESETS[a.preset or ("cpu_tiny" if a.cpu else "qwen3_0_6b_1gpu")]
    if a.child:  # one check, result to WORKDIR/NAME.json
        wd = pathlib.Path(a.workdir)
        ctx = json.loads((wd / "ctx.json").read_text()) if (wd / "ctx.json").exists() else {}
        (wd / f"{a.child}.json").write_text(json.dumps(run_one(a.child, ps, wd, ctx), default=float))
        return 0
    names = [c.strip() for c in a.checks.split(",") if c.strip()]
    bad = [c for c in names if c not in CHECKS]
    if bad:
        print(f"error: --checks: unknown {bad}; choose from {list(ORDER)}", file=sys.stderr)
        return 2
    out_path = pathlib.Path(a.out or os.path.join(os.environ.get("OUT", "."), "device_check.json"))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    isolate = a.isolate or not a.cpu
    budget = a.budget_s if a.budget_s is not None else (600.0 if a.cpu else 450.0)
    wd = pathlib.Path(a.workdir or tempfile.mkdtemp(prefix="device_check_"))
    wd.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    doc = {"schema": SCHEMA, "mode": "cpu" if a.cpu else "accelerator", "preset": dataclasses.asdict(ps),
           "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "argv": sys.argv[1:] if argv is None else list(argv), "budget_s": budget, "checks": {}}
    ctx: dict = {}
    for name in names:
        left = budget - (time.perf_counter() - start)
        missing = [n for n in NEEDS[name] if doc["checks"].get(n, {}).get("status") != "ok"]
        if missing:
            res = {"status": "skipped", "reason": f"needs {missing} to have passed"}
        elif left < 20:
            res = {"status": "skipped", "reason": f"out of time ({budget:.0f} s budget)"}
        elif isolate:
            res = run_child(name, ps, wd, {**ctx, "isolated": True}, timeout=min(left, a.child_timeout_s))
        else:
            res = run_one(name, ps, wd, ctx)
        doc["checks"][name] = res
        if name == "env" and res.get("status") == "ok":
            ctx["env"] = {k: res.get(k) for k in ("peak_flops", "peak_hbm_bytes_per_s", "measured_matmul_flops",
                                                   "measured_copy_bytes_per_s")}
        doc["wall_s"] = round(time.perf_counter() - start, 1)
        doc["status"] = ("error" if any(c["status"] == "error" for c in doc["checks"].values()) else
                         "fail" if any(c["status"] == "fail" for c in doc["checks"].values()) else "ok")
        out_path.write_text(json.dumps(doc, indent=1, default=float))
        print(f"[{doc['wall_s']:6.1f} s] {name}: {res['status']}"
              f"{' - ' + str(res.get('error') or res.get('reason')) if res['status'] in ('error', 'skipped') else ''}",
              flush=True)
    print(f"wrote {out_path} (status {doc['status']})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
    sys.exit(main())
