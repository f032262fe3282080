"""The next GPU window (issue #49): one prepared run, at most 8 minutes on one H100 or H200, that
answers whether the 4B and 8B presets fit and how fast they run, and how long a Prefix Sampling
step takes phase by phase. ``benchmarks/device_window.sh`` is the wrapper to run:

    bash benchmarks/device_window.sh benchmarks/device/window_<date>.json        # one GPU, <= 8 minutes
    bash benchmarks/device_window.sh /tmp/w.json --cpu                          # CPU, tiny shapes

Parts, in priority order, each in its own child process (an OOM, crash or hang costs that part
only: ``{"status": "failed", "error": ...}``; each child reads a clean ``peak_bytes_in_use``); the
JSON is rewritten atomically (a temporary file, then ``os.replace``) after every part:

* ``env``: versions (jax, jaxlib, the CUDA plugin and runtime), ``device_kind``, the allocator's
  ``bytes_limit``, the vendor peaks by ``device_kind`` (``device_check.PEAKS``) beside the bf16
  matmul rate and copy bandwidth measured here (the rooflines divide by the vendor peak where
  known, else by the measured rate).
* ``reroll_4b``: the 4B Prefix Sampling re-roll call at its per-device share of the 8xH200 preset:
  ``row_chunk / (data·fsdp)`` rows of prompt + replayed prefix in the P + T bucket, P + 2T cache
  slots, the bf16 sampling copy, all layers (``prs.models.sampler.sample_jit``, compiled once).
  Memory: ``prs.plan``'s ``sampling_total`` vs the compiled program's ``memory_analysis()`` vs
  ``memory_stats()['peak_bytes_in_use']``. Speed: the same program run with two budgets t₁ < t₂
  (every row generates exactly its budget: no stop id); decode tokens/s = R·(t₂ − t₁) /
  (time(t₂) − time(t₁)), so the prefill cancels; against the HBM roofline R·BW / bytes per step
  (bf16 weights once + the K and V of every cache slot the step attends, ``decode_step_bytes``).
* ``fresh_4b``: the 4B fresh call (prompt bucket P, P + T slots), the same way.
* ``update_4b_xla``, ``update_4b_cudnn``: the trainer's update (``prs.rl.trainer.update_step``,
  AdamW, remat full) at the real update width W = P + 2T and the preset's rows per micro-batch,
  two micro-batches (the gradient accumulator exists as at the preset's M), with as many of the
  layers as the planner says fit one device unsharded (the count is recorded): planner vs
  compiled vs peak, step time, MFU on the real (unpadded) tokens: 3·Σ_rows forward matmul FLOPs of
  each row's own length (causal attention over its average ℓ/2 keys) / step time / peak FLOP/s.
* ``decode_8b``: the 8B re-roll call at its per-device share, as ``reroll_4b``.
* ``ps_step``: one Prefix Sampling training step end to end through the real trainer
  (``prs.rl.trainer.Trainer.step``) at the Qwen3-0.6B shape (the arith task's vocabulary), random
  weights, the arith task's prompts; re-rolls forced: rollout 0 of every even group scores 1 on
  top of the verifier (``ForcedRewards``: k = 1, a hard bucket, for half the groups). Time per
  phase (fresh rollout, re-roll, scoring, update, checkpoint with orbax as the runner saves it,
  into a temporary directory), tokens generated and replayed, peak memory. Two steps: the first
  includes the compiles.

Shapes come from the presets' config files (``derive_shapes``: Hydra through
``experiments.plan.setup``); the device machine has no Hydra, so the derived shapes are also
committed in ``benchmarks/device/window_shapes.json`` (tests/benchmarks/test_device_window.py
re-derives them and checks that the file is current). The JSON records the derivation. Inputs are
made on the device (random weights), nothing is downloaded. ``--cpu`` runs every part at tiny
shapes (``tiny_shapes``: the same structure, small widths) on the CPU backend, through the same
code. ``PRS_WINDOW_INJECT=PART:kill|hang|raise`` makes that part's child die, hang or raise (the
tests' fault injection). No number in this docstring is a measurement.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import importlib.util
import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import traceback

SCHEMA = 1
GIB = 2 ** 30
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
SHAPES_FILE = HERE / "device" / "window_shapes.json"
PARTS = ("env", "reroll_4b", "fresh_4b", "update_4b_xla", "update_4b_cudnn", "decode_8b", "ps_step")
STATUSES = ("ok", "failed", "skipped")
# seconds each part may take on an accelerator (a part gets at most what is left of --total-s)
TIMEOUTS = {"env": 45, "reroll_4b": 120, "fresh_4b": 80, "update_4b_xla": 100, "update_4b_cudnn": 100,
            "decode_8b": 110, "ps_step": 120}
PRESET_4B, PRESET_8B = "grpo_ps_qwen3_4b_h200x8", "grpo_ps_qwen3_8b_h200x8"
PS_OVERRIDES = ("model=qwen3_0_6b", "method=ps_ada")  # conf/config.yaml's arith task, ps_ada, Qwen3-0.6B
DECODE_BUDGETS = (32, 160)  # t1 < t2 decode steps (every row generates exactly its budget)
UPDATE_MICRO_BATCHES = 2    # micro-batches the window runs at the preset's rows per micro-batch
INJECT_VAR = "PRS_WINDOW_INJECT"


def _device_check():
    """``benchmarks/device_check.py`` (its helpers: ``PEAKS``, ``flops_per_token``,
    ``decode_step_bytes``, ``check_env``, ...)."""
    if "device_check" in sys.modules:
        return sys.modules["device_check"]
    spec = importlib.util.spec_from_file_location("device_check", HERE / "device_check.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------------------- shapes


def model_fields(cfg) -> dict:
    """A ``ModelConfig`` as JSON (dtypes by name)."""
    import jax.numpy as jnp

    d = dataclasses.asdict(cfg)
    for k in ("dtype", "param_dtype"):
        d[k] = jnp.dtype(d[k]).name
    return d


def model_from(fields: dict, **over):
    import jax.numpy as jnp

    from prs.models.qwen3 import ModelConfig

    d = {**fields, **over}
    for k in ("dtype", "param_dtype"):
        if isinstance(d[k], str):
            d[k] = getattr(jnp, d[k])
    return ModelConfig(**d)


def _tuples(x):
    return tuple(_tuples(v) for v in x) if isinstance(x, list) else x


def rl_from(d: dict):
    """``RLConfig`` from ``dataclasses.asdict`` (JSON lists back to tuples)."""
    from prs.rl.config import PARTS as RL_PARTS, RLConfig

    parts = {name: cls(**{k: _tuples(v) for k, v in d[name].items()}) for name, cls in RL_PARTS.items()}
    return RLConfig(**{k: v for k, v in d.items() if k not in RL_PARTS}, **parts)


def _sampler_spec(s: dict, *, reroll: bool, plan_sampling: int) -> dict:
    rl, sz, P, T = s["rl"], s["sizes"], s["prompt_len"], s["budget"]
    rows = rl.tasks_per_step * rl.group_size
    chunk = min(rows, rl.rollout.row_chunk) if rl.rollout.row_chunk else rows
    shards = sz["data"] * sz["fsdp"]
    R = chunk // shards
    width = P + T if reroll else P
    return {"program": "sampling", "call": "reroll" if reroll else "fresh", "model": model_fields(s["model_cfg"]),
            "rows": R, "prompt_len": P, "budget": T, "prompt_bucket": width, "cache_slots": width + T,
            "sampling_dtype": rl.rollout.sampling_dtype, "temperature": rl.rollout.temperature,
            "top_k": rl.rollout.top_k, "top_p": rl.rollout.top_p, "row_parts": rl.rollout.row_parts,
            "attend_buckets": rl.rollout.attend_buckets, "decode_budgets": list(DECODE_BUDGETS),
            "preset_plan_sampling_bytes": int(plan_sampling),
            "derivation": (f"{rl.tasks_per_step} tasks x {rl.group_size} rollouts = {rows} rows; row_chunk "
                           f"{rl.rollout.row_chunk} -> {chunk} rows per call over data {sz['data']} x fsdp "
                           f"{sz['fsdp']} = {R} rows per device; prompt bucket P = {P} (experiments.plan's), budget T = {T}: "
                           + (f"prompt + prefix in the P + T = {width} bucket, P + 2T = {width + T} cache slots"
                              if reroll else f"prompt bucket {width}, P + T = {width + T} cache slots")
                           + f"; sampling copy {rl.rollout.sampling_dtype}; {s['model_cfg'].n_layers} layers")}


def _preset_parts(name: str) -> dict:
    from experiments.plan import preset_setup
    from prs import plan as PL

    s = preset_setup(name)
    rl, sz, P, T, cfg = s["rl"], s["sizes"], s["prompt_len"], s["budget"], s["model_cfg"]
    common = dict(prompt_len=P, max_new_tokens=T, device_gib=s["device_gib"], mem_fraction=s["mem_fraction"], **sz)
    out = {"preset": name, "devices": s["devices"], "mesh": sz, "device_gib": s["device_gib"]}
    for call, reroll in (("reroll", True), ("fresh", False)):
        p = PL.plan_run(cfg, rl, prefix_rerolls=reroll, **common)
        out[call] = _sampler_spec(s, reroll=reroll, plan_sampling=p.sampling_total)
    rows = rl.tasks_per_step * rl.group_size * (2 if rl.schedule.reroll == "append" else 1)
    shards = sz["data"] * sz["fsdp"]
    mb_rows = rows // shards // rl.micro_batches
    p = PL.plan_run(cfg, rl, prefix_rerolls=s["rerolls"], **common)
    out["update"] = {
        "program": "update", "model": model_fields(cfg), "width": P + 2 * T, "prompt_len": P, "budget": T,
        "rows_per_micro_batch": mb_rows, "micro_batches": UPDATE_MICRO_BATCHES,
        "preset_micro_batches_per_device": rl.micro_batches, "logits_chunk": rl.logits_chunk,
        "optim": dataclasses.asdict(rl.optim), "preset_plan_update_bytes": int(p.update_total),
        "derivation": (f"{rows} rows over data {sz['data']} x fsdp {sz['fsdp']} = {rows // shards} rows per device "
                       f"in {rl.micro_batches} micro-batches = {mb_rows} row(s) per micro-batch of W = P + 2T = "
                       f"{P + 2 * T}; the window runs {UPDATE_MICRO_BATCHES} micro-batches of that shape, unsharded "
                       f"(fsdp 1), with as many of the {cfg.n_layers} layers as the planner fits on the device")}
    return out


def derive_shapes() -> dict:
    """Every part's shapes from the presets' config files (Hydra, ``experiments.plan.setup``)."""
    from experiments.config import to_kwargs
    from experiments.plan import setup
    from prs.core.prefix import PrefixConfig

    p4, p8 = _preset_parts(PRESET_4B), _preset_parts(PRESET_8B)
    s = setup(list(PS_OVERRIDES))
    cfg, rl = s["cfg"], s["rl"]
    prefix = PrefixConfig(n=rl.group_size, **to_kwargs(cfg.method, PrefixConfig))
    ps_step = {"program": "ps_step", "overrides": list(PS_OVERRIDES), "model": model_fields(s["model_cfg"]),
               "task": cfg.task.name, "task_params": dict(cfg.task.params), "rl": dataclasses.asdict(rl),
               "prefix": dataclasses.asdict(prefix), "seed": int(cfg.seed), "steps": 2,
               "derivation": (f"conf/config.yaml with {' '.join(PS_OVERRIDES)}: task {cfg.task.name}, "
                              f"{rl.tasks_per_step} tasks x {rl.group_size} rollouts, method {prefix.mode}; the "
                              f"model's vocabulary is the task's (the trainer requires it)")}
    return {"schema": SCHEMA, "source": "derive_shapes (Hydra: experiments.plan.setup over conf/)",
            "presets": {k: {x: v[x] for x in ("preset", "devices", "mesh", "device_gib")} for k, v in
                        (("4b", p4), ("8b", p8))},
            "parts": {"reroll_4b": p4["reroll"], "fresh_4b": p4["fresh"], "update_4b_xla": {**p4["update"],
                      "attention_impl": "xla"}, "update_4b_cudnn": {**p4["update"], "attention_impl": "cudnn"},
                      "decode_8b": p8["reroll"], "ps_step": ps_step}}


def load_shapes() -> dict:
    """``derive_shapes()`` where Hydra is importable, else the committed ``window_shapes.json``."""
    try:
        import hydra  # noqa: F401
    except ImportError:
        d = json.loads(SHAPES_FILE.read_text())
        d["source"] = f"{SHAPES_FILE.relative_to(ROOT)} (no Hydra here; the file is checked against derive_shapes by tests)"
        return d
    return derive_shapes()


def tiny_shapes(shapes: dict) -> dict:
    """The same parts at tiny widths for ``--cpu``: every relation kept (re-roll bucket P + T, P + 2T
    slots, W = P + 2T, the preset's rows per micro-batch), the numbers small."""
    tiny = dict(vocab_size=512, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128,
                rope_theta=10_000.0, prefill_flash_from=16, prefill_block=8)
    P, T = 16, 64  # T long enough that the two budgets' decode steps outweigh a CPU timer's noise
    out = json.loads(json.dumps(shapes))
    for name, sp in out["parts"].items():
        sp["model"] = {**sp["model"], **tiny}
        if sp["program"] == "sampling":
            width = P + T if sp["call"] == "reroll" else P
            sp.update(rows=2, prompt_len=P, budget=T, prompt_bucket=width, cache_slots=width + T, decode_budgets=[8, T])
        elif sp["program"] == "update":
            sp.update(width=P + 2 * 8, prompt_len=P, budget=8, logits_chunk=16)
        else:
            sp["model"]["n_layers"] = 1
            sp["rl"]["tasks_per_step"] = 2
            sp["task_params"] = {**sp["task_params"], "max_terms": 3}
        sp["derivation"] = "--cpu: tiny widths; real shapes: " + sp["derivation"]
    out["source"] = "tiny_shapes(" + shapes["source"] + ")"
    return out


# ----------------------------------------------------------------------------- helpers


def _peak():
    ms = _device_check().memory_stats()
    return (ms.get("peak_bytes_in_use"), ms.get("bytes_limit")) if ms else (None, None)


def _gib(b):
    return None if b is None else round(float(b) / GIB, 4)


def _ratios(planner: int, mem, peak) -> dict:
    return {"planner_bytes": int(planner), "planner_gib": _gib(planner),
            "compiled_bytes": int(mem.total) if mem else None, "compiled_gib": mem.gib() if mem else None,
            "peak_bytes": int(peak) if peak is not None else None, "peak_gib": _gib(peak),
            "planned_over_compiled": round(planner / mem.total, 4) if mem else None,
            "planned_over_peak": round(planner / peak, 4) if peak else None,
            "planner_safe": (planner >= peak) if peak else None}


def _limit_bytes(limit) -> float:
    return float(limit) if limit else 80.0 * GIB


def _rate(ctx: dict, peak: str, measured: str, peak_what: str, measured_what: str) -> tuple[float, str]:
    """(rate, where it comes from): the env part's vendor peak ``peak`` for the device_kind (``peak_what``
    formatted with ``kind``), else its measured ``measured``, else NaN."""
    env = ctx.get("env", {})
    if env.get(peak):
        return env[peak], peak_what.format(kind=repr(env.get("device_kind")))
    if env.get(measured):
        return env[measured], f"{measured_what} (no vendor peak for this device_kind)"
    return float("nan"), "unknown (env part did not run)"


def _bandwidth(ctx: dict) -> tuple[float, str]:
    return _rate(ctx, "peak_hbm_bytes_per_s", "measured_copy_bytes_per_s", "vendor peak for {kind} (device_check.PEAKS)",
                 "measured copy bandwidth")


def _flops(ctx: dict) -> tuple[float, str]:
    return _rate(ctx, "peak_flops", "measured_matmul_flops", "vendor bf16 peak for {kind}", "measured matmul rate")


def _ragged(vocab: int, rows: int, width: int, lo: int, seed: int):
    return _device_check().ragged_prompts(vocab, rows, width, lo, seed)


def _random_params(cfg, seed: int = 0):
    """Random weights made on the device, in ``cfg.param_dtype`` (one jitted init: no host copy)."""
    import functools

    import jax

    from prs.models.qwen3 import init_params

    return jax.block_until_ready(jax.jit(functools.partial(init_params, cfg, std=0.02))(jax.random.key(seed)))


# ----------------------------------------------------------------------------- parts


def part_env(spec: dict, ctx: dict) -> dict:
    from importlib import metadata

    DC = _device_check()
    out = DC.check_env(DC.PRESETS["cpu_tiny"], pathlib.Path(ctx["workdir"]), {})
    out.pop("preset", None)
    names = set()
    for dist in metadata.distributions():
        n = (dist.metadata["Name"] or "").lower()
        if n.startswith(("jax-cuda", "jax_cuda", "nvidia-cuda-runtime", "nvidia-cudnn", "jax-rocm")):
            names.add(n)
            out[n] = dist.version
    out["cuda_packages"] = sorted(names)
    try:
        import jax

        out["cuda_runtime_version"] = getattr(jax._src.lib, "cuda_versions", None) and {
            k: str(v()) for k, v in vars(jax._src.lib.cuda_versions).items() if k.endswith("_get_version")}
    except Exception as e:  # informational only
        out["cuda_runtime_version"] = f"unavailable: {type(e).__name__}"
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        out["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()[:200]
    except (OSError, subprocess.TimeoutExpired) as e:
        out["nvidia_smi"] = f"unavailable: {type(e).__name__}"
    out["status"] = "ok"
    return out


def part_sampling(spec: dict, ctx: dict) -> dict:
    """One sampler call at the part's per-device share: planner vs compiled vs peak, decode tokens/s
    from two budgets' difference against the HBM roofline."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from prs import plan as PL
    from prs.models import sampler as S

    DC = _device_check()
    cfg = model_from(spec["model"])
    R, P0, T = spec["rows"], spec["prompt_len"], spec["budget"]
    width, slots = spec["prompt_bucket"], spec["cache_slots"]
    sdt = spec["sampling_dtype"]
    if sdt not in ("bfloat16", "float32", "param"):
        raise ValueError(f"sampling_dtype={sdt!r}; choose from bfloat16, float32, param")
    pdt = cfg.param_dtype if sdt == "param" else getattr(jnp, sdt)
    params = _random_params(dataclasses.replace(cfg, param_dtype=pdt))  # the sampling copy, made in its dtype
    scfg = S.SamplerConfig(max_new_tokens=T, temperature=spec["temperature"], top_k=spec["top_k"], top_p=spec["top_p"],
                           buckets=(P0, P0 + T), pad_id=0, eos_id=None, row_parts=spec["row_parts"],
                           attend_buckets=_tuples(spec["attend_buckets"]))
    lo = P0 // 2 if spec["call"] == "fresh" else P0 + T // 2
    tokens, lengths = _ragged(cfg.vocab_size, R, width, lo, seed=4)
    tok, ln = jnp.asarray(tokens), jnp.asarray(lengths)
    key = jax.random.key(0)
    t1, t2 = spec["decode_budgets"]
    if not 1 <= t1 < t2 <= T:
        raise ValueError(f"decode_budgets={spec['decode_budgets']} must satisfy 1 <= t1 < t2 <= budget {T}")
    budget = lambda t: jnp.full((R,), t, jnp.int32)  # noqa: E731
    c0 = time.perf_counter()
    compiled = S.sample_jit.lower(params, tok, ln, key, budget(t1), np.int32(0), cfg=cfg, scfg=scfg, mesh=None,
                                  return_cache=False).compile()
    compile_s = time.perf_counter() - c0
    mem = DC.compiled_memory(compiled, compile_s)
    times, gen = {}, {}
    for t in (t1, t2) * 3:  # interleaved, best of three each
        b = budget(t)
        s0 = time.perf_counter()
        ro, _ = jax.block_until_ready(compiled(params, tok, ln, key, b, np.int32(0)))
        times[t] = min(times.get(t, float("inf")), time.perf_counter() - s0)
        gen[t] = int(np.asarray(ro.policy_mask).sum())
    peak, limit = _peak()
    pkw = dict(rows=R, width=P0 + 2 * T, prompt_len=P0, max_new_tokens=T, cache_slots=slots,
               sampling_bytes=jnp.dtype(pdt).itemsize, device_gib=_limit_bytes(limit) / GIB)
    plan = PL.plan(cfg, **pkw)
    bw, bw_src = _bandwidth(ctx)
    dt = times[t2] - times[t1]
    tokens_decoded = gen[t2] - gen[t1]
    tps = tokens_decoded / dt if dt > 0 else float("nan")
    step_bytes = DC.decode_step_bytes(cfg, rows=R, slots=slots)
    roof = R * bw / step_bytes
    filled = DC.decode_step_bytes(cfg, rows=R, slots=float(np.mean(lengths)) + (t1 + t2) / 2)
    ok = gen[t1] == R * t1 and gen[t2] == R * t2
    return {"status": "ok" if ok else "failed", **({} if ok else {"error": f"generated {gen}, expected R x budget"}),
            "rows": R, "prompt_bucket": width, "cache_slots": slots, "budget": T, "layers": cfg.n_layers,
            "sampling_dtype": jnp.dtype(pdt).name, "prompt_lengths_mean": float(np.mean(lengths)),
            "decode_budgets": [t1, t2], "generated_tokens": {str(k): v for k, v in gen.items()},
            "call_s": {str(k): v for k, v in times.items()}, "compile_s": round(compile_s, 2),
            "decode_s": dt, "decode_tokens": tokens_decoded, "decode_tokens_per_s": tps,
            "decode_resolved": dt > 0,  # False: the t2 call was not slower than t1's (timer noise; tiny CPU shapes)
            "prefill_plus_overhead_s": times[t1] - t1 * dt / (t2 - t1),
            "step_bytes": step_bytes, "hbm_bytes_per_s": bw, "hbm_source": bw_src,
            "roofline_tokens_per_s": roof, "roofline_fraction": tps / roof,
            "roofline_filled_tokens_per_s": R * bw / filled,
            "roofline_note": ("a decode step reads the bf16 weights once and K, V of every attended slot: all "
                              f"{slots} slots without attend_buckets; 'filled' = only the slots written so far"),
            **_ratios(plan.sampling_total, mem, peak), "bytes_limit": limit,
            "planner_terms_bytes": {k: int(getattr(plan, k)) for k in (
                "kv_cache", "sampler_params", "decode_weights", "prefill", "cache_transient", "sampler_logits")},
            "preset_plan_sampling_bytes": spec.get("preset_plan_sampling_bytes"),
            "plan_model": model_fields(cfg), "plan_kwargs": pkw}


def _layers_that_fit(cfg, *, rows, width, prompt_len, budget, micro_batches, logits_chunk, limit) -> int:
    """The most layers (<= cfg.n_layers) whose update the planner puts within ``limit`` bytes on one device."""
    from prs import plan as PL

    best = 0
    for L in range(1, cfg.n_layers + 1):
        p = PL.plan(dataclasses.replace(cfg, n_layers=L), rows=rows, width=width, prompt_len=prompt_len,
                    max_new_tokens=budget, micro_batches=micro_batches, logits_chunk=logits_chunk,
                    cache_slots=prompt_len + 2 * budget, sampling_bytes=2, device_gib=limit / GIB)
        if p.update_total <= limit:
            best = L
    return best


def part_update(spec: dict, ctx: dict) -> dict:
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from prs import plan as PL
    from prs.rl.config import OptimConfig, RLConfig
    from prs.rl.trainer import Batch, update_step

    DC = _device_check()
    impl = spec["attention_impl"]
    if impl == "cudnn" and jax.default_backend() != "gpu":
        return {"status": "skipped", "reason": f"cudnn needs a CUDA GPU (backend {jax.default_backend()})"}
    full = model_from(spec["model"], attention_impl=impl)
    M, r, W, P0, T = (spec["micro_batches"], spec["rows_per_micro_batch"], spec["width"], spec["prompt_len"],
                      spec["budget"])
    R = M * r
    _, limit = _peak()
    lim = _limit_bytes(limit)
    kw = dict(rows=R, width=W, prompt_len=P0, budget=T, micro_batches=M, logits_chunk=spec["logits_chunk"])
    L = _layers_that_fit(full, limit=lim, **kw)
    if L < 1:
        return {"status": "failed", "error": f"the planner fits no layer in {lim / GIB:.1f} GiB", "layers": 0}
    cfg = dataclasses.replace(full, n_layers=L)
    rl = RLConfig(micro_batches=M, logits_chunk=spec["logits_chunk"], optim=OptimConfig(**spec["optim"]))
    o = rl.optim
    tx = optax.chain(optax.clip_by_global_norm(o.grad_clip),
                     optax.adamw(o.lr * o.lr_scale, b1=o.b1, b2=o.b2, weight_decay=o.weight_decay))
    params = _random_params(cfg)
    opt = jax.jit(tx.init)(params)
    tokens, lengths = _ragged(cfg.vocab_size, R, W, W // 2, seed=1)  # rows of prompt + response, ragged
    valid = np.arange(W)[None] < lengths[:, None]
    positions = np.maximum(np.cumsum(valid, 1) - 1, 0).astype(np.int32)
    loss_mask = valid & (np.arange(W)[None] >= P0)
    old = np.where(loss_mask, -math.log(cfg.vocab_size), 0.0).astype(np.float32)
    adv = np.random.default_rng(2).standard_normal(R).astype(np.float32)
    batch = Batch(*(jnp.asarray(x) for x in (tokens, positions, valid, loss_mask, old, adv)))
    fn = jax.jit(functools.partial(update_step, cfg=cfg, rl=rl, tx=tx, norm_len=W - 1), donate_argnums=(0, 1))
    c0 = time.perf_counter()
    compiled = fn.lower(params, opt, batch).compile()
    compile_s = time.perf_counter() - c0
    mem = DC.compiled_memory(compiled, compile_s)
    times = []
    for _ in range(3):
        s0 = time.perf_counter()
        params, opt, m = compiled(params, opt, batch)
        jax.block_until_ready((params, m))
        times.append(time.perf_counter() - s0)
    peak, limit = _peak()
    pkw = dict(rows=R, width=W, prompt_len=P0, max_new_tokens=T, micro_batches=M, logits_chunk=spec["logits_chunk"],
               cache_slots=P0 + 2 * T, sampling_bytes=2, device_gib=lim / GIB)
    plan = PL.plan(cfg, **pkw)
    step_s = min(times[1:])
    pf, pf_src = _flops(ctx)
    real = [int(n) - 1 for n in lengths]  # predicted tokens per row: its length - 1
    real_flops = 3 * sum(DC.flops_per_token(cfg, n / 2) * n for n in real)
    padded_flops = 3 * DC.flops_per_token(cfg, (W - 1) / 2) * R * (W - 1)
    loss, gn = float(m["loss"]), float(m["grad_norm"])
    ok = math.isfinite(loss) and math.isfinite(gn)
    return {"status": "ok" if ok else "failed", **({} if ok else {"error": f"loss {loss}, grad_norm {gn}"}),
            "attention_impl": impl, "layers": L, "layers_of": full.n_layers,
            "layers_rule": "the most layers whose prs.plan update_total <= the allocator's bytes_limit (fsdp 1)",
            "rows": R, "rows_per_micro_batch": r, "micro_batches": M, "width": W, "remat": cfg.remat,
            "real_tokens": int(sum(real)), "padded_tokens": R * (W - 1),
            "compile_s": round(compile_s, 2), "step_times_s": times, "step_s": step_s,
            "model_flops_real": real_flops, "mfu_real": real_flops / step_s / pf,
            "model_flops_padded": padded_flops, "mfu_padded": padded_flops / step_s / pf, "flops_source": pf_src,
            "real_tokens_per_s": sum(real) / step_s, "loss": loss, "grad_norm": gn,
            **_ratios(plan.update_total, mem, peak), "bytes_limit": limit,
            "planner_terms_bytes": {k: int(getattr(plan, k)) for k in (
                "parameters", "optimizer_state", "gradients", "optimizer_temps", "activations", "logits", "head")},
            "preset_plan_update_bytes": spec.get("preset_plan_update_bytes"), "row_lengths": lengths.tolist(),
            "plan_model": model_fields(cfg), "plan_kwargs": pkw}


class ForcedRewards:
    """A task whose rewards are the verifier's with rollout 0 of every even group set to 1 (k >= 1:
    a hard Prefix Sampling bucket), so that a random-weight policy's step re-rolls; everything else
    is the wrapped task's."""

    def __init__(self, task):
        self._task = task

    def __getattr__(self, name):
        return getattr(self._task, name)

    def rewards(self, problems, rollout, *, group_size: int):
        import jax.numpy as jnp

        r = self._task.rewards(problems, rollout, group_size=group_size)  # [B, N]
        B = r.shape[0]
        forced = (jnp.arange(B)[:, None] % 2 == 0) & (jnp.arange(group_size)[None, :] == 0)
        return jnp.where(forced, jnp.maximum(r, 1.0), r)


def part_ps_step(spec: dict, ctx: dict) -> dict:
    """One Prefix Sampling step (twice: the first compiles) through ``Trainer.step``, its phases
    timed by wrapping the rollout object's ``rollout`` / ``reroll`` / ``_sample`` / ``_score``."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    from prs.core.prefix import PrefixConfig
    from prs.rl.trainer import Trainer, checkpoint_tree
    from prs.tasks.registry import make_task

    task = ForcedRewards(make_task(spec["task"], **spec["task_params"]))
    cfg = model_from(spec["model"], vocab_size=task.vocab_size)
    rl = rl_from(spec["rl"])
    prefix = PrefixConfig(**{k: _tuples(v) for k, v in spec["prefix"].items()})
    trainer = Trainer(task, cfg, rl, prefix, seed=spec["seed"])
    state = trainer.init_state(_random_params(cfg, seed=spec["seed"]))
    ro = trainer.rollouts
    clock = {"phase": None}
    acc: dict = {}

    def add(name, dt):
        acc[name] = acc.get(name, 0.0) + dt

    def labelled(fn, phase):
        def run(*a, **k):
            clock["phase"] = phase
            try:
                return fn(*a, **k)
            finally:
                clock["phase"] = None
        return run

    def timed(fn, what):
        def run(*a, **k):
            t0 = time.perf_counter()
            out = jax.block_until_ready(fn(*a, **k))
            add(what if what == "scoring" else clock["phase"] or "other_sampling", time.perf_counter() - t0)
            return out
        return run

    ro.rollout = labelled(ro.rollout, "rollout")
    ro.reroll = labelled(ro.reroll, "reroll")
    ro._sample = timed(ro._sample, "sample")
    ro._score = timed(ro._score, "scoring")
    steps = []
    with tempfile.TemporaryDirectory(prefix="window_ckpt_") as tmp:
        mngr = ocp.CheckpointManager(pathlib.Path(tmp) / "checkpoints", options=ocp.CheckpointManagerOptions(
            max_to_keep=2, create=True, enable_async_checkpointing=True))  # as prs.rl.runner saves
        for i in range(spec["steps"]):
            acc.clear()
            t0 = time.perf_counter()
            state, m = trainer.step(state)
            jax.block_until_ready(state.params)
            step_s = time.perf_counter() - t0
            c0 = time.perf_counter()
            mngr.save(i + 1, args=ocp.args.StandardSave(checkpoint_tree(state)))
            mngr.wait_until_finished()
            ckpt_s = time.perf_counter() - c0
            phases = {"rollout": acc.get("rollout", 0.0), "reroll": acc.get("reroll", 0.0),
                      "scoring": acc.get("scoring", 0.0), "update": float(m["time_update"]),
                      "checkpoint": ckpt_s}
            phases["other"] = step_s - sum(v for k, v in phases.items() if k != "checkpoint")
            steps.append({"step": i, "step_s": step_s, "phases_s": phases,
                          "tokens_generated": int(m["tokens_generated"]), "tokens_replayed": int(m["tokens_replayed"]),
                          "groups_rerolled": int(m["groups_rerolled"]), "rollouts_sampled": int(m["rollouts_sampled"]),
                          "loss": float(m.get("loss/loss", float("nan"))),
                          "grad_norm": float(m.get("loss/grad_norm", float("nan")))})
        ckpt_bytes = sum(f.stat().st_size for f in pathlib.Path(tmp).rglob("*") if f.is_file())
        mngr.close()
    peak, limit = _peak()
    rerolled = all(s["groups_rerolled"] > 0 for s in steps)
    finite = all(np.isfinite([s["loss"], s["grad_norm"]]).all() for s in steps)
    ok = rerolled and finite
    return {"status": "ok" if ok else "failed",
            **({} if ok else {"error": f"re-rolled every step: {rerolled}; finite loss: {finite}"}),
            "model_params": int(sum(x.size for x in jax.tree.leaves(state.params))), "layers": cfg.n_layers,
            "vocab_size": cfg.vocab_size, "rows": rl.tasks_per_step * rl.group_size, "budget": ro.token_budget,
            "width": trainer.width, "rewards": "arith verifier, rollout 0 of every even group forced to 1 (ForcedRewards)",
            "steps": steps, "checkpoint_bytes": ckpt_bytes, "peak_bytes": peak, "peak_gib": _gib(peak),
            "bytes_limit": limit}


FUNCS = {"env": part_env, "reroll_4b": part_sampling, "fresh_4b": part_sampling, "update_4b_xla": part_update,
         "update_4b_cudnn": part_update, "decode_8b": part_sampling, "ps_step": part_ps_step}


# ----------------------------------------------------------------------------- calibration


def calibration_points(doc: dict) -> list:
    """``prs.plan.calibrate``'s points from a window JSON (``parts``: each ok program part records its
    ``plan_model`` and ``plan_kwargs``) or from a ``device_check`` JSON (``checks``: the planner's call
    rebuilt from its preset, and checked against the recorded ``planner_bytes``); parts without a
    measured peak (CPU) give none."""
    from prs import plan as PL

    pts = []
    if "parts" in doc:
        for res in doc["parts"].values():
            if res.get("status") == "ok" and res.get("peak_bytes") and "plan_kwargs" in res:
                prog = "update" if "attention_impl" in res else "sampling"
                pts.append((prog, model_from(res["plan_model"]), dict(res["plan_kwargs"]), float(res["peak_bytes"])))
        return pts
    DC = _device_check()
    ps = doc["preset"]
    R, P, T = ps["rows"], ps["prompt"], ps["budget"]
    for name, res in doc.get("checks", {}).items():
        if res.get("status") != "ok":
            continue
        if name.startswith("update") and res.get("peak_bytes"):
            cfg = DC.model_cfg(ps["model"], attention_impl=res["attention_impl"])
            kw = dict(rows=R, width=P + 2 * T, prompt_len=P, max_new_tokens=T, micro_batches=ps["micro_batches"],
                      logits_chunk=ps["logits_chunk"], sampling_bytes=2, cache_slots=P + 2 * T)
            items = [("update", cfg, kw, res)]
        elif name == "sampling":
            cfg = DC.model_cfg(ps["model"])
            items = [("sampling", cfg, dict(rows=R, width=P + 2 * T, prompt_len=P, max_new_tokens=T, sampling_bytes=2,
                                            cache_slots=c["cache_slots"]), c)
                     for c in res["calls"].values() if c.get("peak_bytes")]
        else:
            continue
        for prog, cfg, kw, r in items:
            p = PL.plan(cfg, **kw)
            got = p.update_total if prog == "update" else p.sampling_total
            if got != r["planner_bytes"]:
                raise ValueError(f"calibration_points: {name}: the planner's call rebuilt gives {got} bytes, the JSON "
                                 f"recorded {r['planner_bytes']} (the planner changed since: use that commit's planner)")
            pts.append((prog, cfg, kw, float(r["peak_bytes"])))
    return pts


def calibrate_files(paths, *, margin: float = 1.05) -> dict:
    """``prs.plan.calibrate`` over the points of every JSON in ``paths`` (nothing is switched)."""
    from prs import plan as PL

    pts = [p for path in paths for p in calibration_points(json.loads(pathlib.Path(path).read_text()))]
    res = PL.calibrate(pts, margin=margin)
    res["points"] = [{"program": p[0], "plan_kwargs": p[2], "peak_bytes": p[3]} for p in pts]
    res["defaults"] = PL.constants()
    return res


# ----------------------------------------------------------------------------- driver


def write_atomic(path: pathlib.Path, doc: dict) -> None:
    """``path`` replaced in one step (a reader, or a kill, never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=float, allow_nan=True))
    os.replace(tmp, path)


def _inject(name: str) -> None:
    """``PRS_WINDOW_INJECT=PART:kill|hang|raise[,PART:...]``: this part's child dies (SIGKILL), hangs, or raises."""
    for item in filter(None, os.environ.get(INJECT_VAR, "").split(",")):
        part, _, how = item.partition(":")
        if part not in PARTS or how not in ("kill", "hang", "raise"):
            raise ValueError(f"{INJECT_VAR}={item!r}: want PART:kill|hang|raise with PART in {list(PARTS)}")
        if part == name:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if how == "hang":
                time.sleep(10_000)
            raise RuntimeError(f"injected failure ({INJECT_VAR})")


def child_main(name: str, wd: pathlib.Path) -> int:
    spec_doc = json.loads((wd / "spec.json").read_text())
    ctx = {**json.loads((wd / "ctx.json").read_text()), "workdir": str(wd)}
    t0 = time.perf_counter()
    try:
        _inject(name)
        res = FUNCS[name](spec_doc["parts"].get(name, {}), ctx)
    except Exception as e:
        res = {"status": "failed", "error": f"{type(e).__name__}: {e}"[:2000], "traceback": traceback.format_exc()[-4000:]}
    res["wall_s"] = round(time.perf_counter() - t0, 2)
    write_atomic(wd / f"{name}.json", res)
    return 0


_RUNNING: dict = {}  # the child in flight: {"pid": ..., "name": ...}


def run_part(name: str, wd: pathlib.Path, timeout: float, cpu: bool) -> dict:
    """``name`` in a child process of its own session; a crash, a non-zero exit without a result or a
    timeout (the whole process group killed) becomes ``failed`` with the reason and the output's tail."""
    res_file = wd / f"{name}.json"
    res_file.unlink(missing_ok=True)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--workdir", str(wd)] + (["--cpu"] if cpu else [])
    t0 = time.perf_counter()
    log = wd / f"{name}.log"
    with open(log, "wb") as fh:
        p = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        _RUNNING.update(pid=p.pid, name=name)
        try:
            rc = p.wait(timeout=timeout)
            why = None
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc, why = p.returncode, f"timed out after {timeout:.0f} s (killed)"
        finally:
            _RUNNING.clear()
    tail = log.read_text(errors="replace")[-3000:]
    wall = round(time.perf_counter() - t0, 2)
    if why is None and res_file.exists():
        res = json.loads(res_file.read_text())
        if res.get("status") == "failed":
            res["output_tail"] = tail
        return res
    why = why or (f"child killed by signal {-rc}" if rc < 0 else f"child exited with code {rc} without a result")
    return {"status": "failed", "error": why, "output_tail": tail, "wall_s": wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=False, help="the JSON file")
    ap.add_argument("--cpu", action="store_true", help="CPU backend, tiny shapes (tiny_shapes)")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}, run in this order")
    ap.add_argument("--total-s", type=float, default=None, help="stop starting parts after this many seconds "
                    "(default 450 on an accelerator, 900 with --cpu); each part gets at most what is left")
    ap.add_argument("--part-timeout-s", type=float, default=None, help="one timeout for every part (default: TIMEOUTS "
                    "on an accelerator, 300 s with --cpu)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--calibrate", nargs="+", default=None, metavar="JSON",
                    help="print the planner constants calibrated from these window / device_check JSONs, run nothing")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    if a.child:
        if a.child not in FUNCS:
            print(f"error: --child: unknown part {a.child!r}; choose from {list(PARTS)}", file=sys.stderr)
            return 2
        return child_main(a.child, pathlib.Path(a.workdir))
    if a.calibrate:
        print(json.dumps(calibrate_files(a.calibrate), indent=1))
        return 0
    names = [c.strip() for c in a.parts.split(",") if c.strip()]
    bad = [c for c in names if c not in PARTS]
    if bad or not names:
        print(f"error: --parts: unknown {bad or names}; choose from {list(PARTS)}", file=sys.stderr)
        return 2
    if not a.out:
        print("error: --out: the JSON file to write is required", file=sys.stderr)
        return 2
    try:
        _inject("")  # a malformed PRS_WINDOW_INJECT is refused before anything runs
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    total = a.total_s if a.total_s is not None else (900.0 if a.cpu else 450.0)
    wd = pathlib.Path(a.workdir or tempfile.mkdtemp(prefix="device_window_"))
    wd.mkdir(parents=True, exist_ok=True)
    shapes = load_shapes()
    if a.cpu:
        shapes = tiny_shapes(shapes)
    write_atomic(wd / "spec.json", shapes)
    start = time.perf_counter()
    doc = {"schema": SCHEMA, "mode": "cpu" if a.cpu else "accelerator", "parts_order": names,
           "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "argv": sys.argv[1:] if argv is None else list(argv), "total_s": total,
           "inject": os.environ.get(INJECT_VAR) or None, "shapes": shapes, "parts": {}}
    ctx: dict = {}

    def on_term(signum, frame):  # the wrapper's overall timeout: end the child's group, record, stop
        name = _RUNNING.get("name")
        if name:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(_RUNNING["pid"], signal.SIGKILL)
            doc["parts"][name] = {"status": "failed", "error": f"the whole run was stopped ({signal.Signals(signum).name}, "
                                  f"the wrapper's overall timeout) while this part ran"}
        doc["wall_s"] = round(time.perf_counter() - start, 1)
        doc["status"] = "failed"
        doc["stopped"] = f"{signal.Signals(signum).name} after {doc['wall_s']} s"
        write_atomic(out, doc)
        print(f"stopped by {signal.Signals(signum).name}; wrote {out}", flush=True)
        os._exit(1)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    for name in names:
        left = total - (time.perf_counter() - start)
        if left < (5 if a.cpu else 20):
            res = {"status": "skipped", "reason": f"out of time ({total:.0f} s total)"}
        else:
            write_atomic(wd / "ctx.json", ctx)
            limit = a.part_timeout_s or (300.0 if a.cpu else TIMEOUTS[name])
            res = run_part(name, wd, timeout=min(limit, left), cpu=a.cpu)
        doc["parts"][name] = res
        if name == "env" and res.get("status") == "ok":
            ctx["env"] = {k: res.get(k) for k in ("device_kind", "peak_flops", "peak_hbm_bytes_per_s",
                                                   "measured_matmul_flops", "measured_copy_bytes_per_s")}
            doc.update({k: res.get(k) for k in ("jax", "jaxlib", "device_kind", "backend")})
        doc["wall_s"] = round(time.perf_counter() - start, 1)
        doc["status"] = "failed" if any(p["status"] == "failed" for p in doc["parts"].values()) else "ok"
        write_atomic(out, doc)
        print(f"[{doc['wall_s']:6.1f} s] {name}: {res['status']}"
              f"{' - ' + str(res.get('error') or res.get('reason')) if res['status'] != 'ok' else ''}", flush=True)
    print(f"wrote {out} (status {doc['status']})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
