"""Per-device memory planner for a GRPO + Prefix Sampling run (issue #14).

    python -m prs.plan +experiment=grpo_ps_qwen3_4b_h200x8            # Hydra overrides, as training
    python -m prs.plan +experiment=grpo_ps_qwen3_8b_v5p64 mesh=fsdp algo.micro_batches=16 --devices 32

(The command line lives in ``experiments/plan.py``, since ``prs`` never imports Hydra; this module
holds the arithmetic, ``plan(...)``, and forwards ``python -m prs.plan`` there.)

Per device, with P parameters, a (data, fsdp, tensor) mesh, shard = fsdp · tensor, batch shards
Bs = data · fsdp, r = R / Bs / M rows per micro-batch, W = the update width − 1 tokens per row:

    parameters        P · |param_dtype| / shard   (twice with kl_coef > 0: the frozen reference)
    optimizer state   2 · P · |param_dtype| / shard        (AdamW moments, sharded like the params)
    gradients         P · 4 / shard (+ the same again as the micro-batch accumulator when M > 1)
    optimizer temps   C_OPT · P · 4 / shard                (clip-by-norm and Adam update buffers)
    activations       the remat policy's saved tensors for L layers + one layer's recompute:
                        none           (L + 1) · A₁
                        full           L · r·W·D·|dtype| + A₁
                        dots_saveable  L · r·W·(Q + D)·|dtype| + A₁
                      A₁ = r·W·(C_D·D + C_Q·Q + C_F·F/t)·4 + C_S · r·(K/t)·W²·4   (one layer, f32 upper
                      bound; Q = (K + 2Kv)·H / t; the W² term is the attention scores/probs, absent
                      with a flash kernel, ``attention_impl=cudnn``)
    logits            C_LG · r · min(chunk, W) · V/t · 4     (the chunked LM head's live blocks)
    LM head (FSDP)    V·D·(|dtype| + 4) / t                  (the gathered head and its f32 cotangent)
    sampling, per call of rs = (R or ``row_chunk``) / Bs rows per device:
      KV cache        2·L·rs·S·Kv·H·|dtype| / t_kv (t_kv = t when t divides Kv: the cache's kv heads
                      split over ``tensor`` as its rows over the batch axes, Explicit axes, the
                      default mesh, ``prs.parallel.explicit.head_split``; else 1) (S = the sampler's P_bucket + budget slots: prompt +
                      budget for fresh rollouts, prompt + 2·budget for a Prefix Sampling re-roll,
                      whose rows, prompt + replayed prefix, fall in the prompt + budget bucket; R =
                      B·N there too: ``same_step_reroll`` pads to B groups)
      f32 transients  C_KT · KV cache
      parameters      P·|sampling_dtype| / t (the trainer's sampling copy, the program's argument)
      decode copy     C_DW · (the layers' matmul weights + the tied head)·|dtype| / t (``qwen3.decode_weights``)
      prefill         chunked flash (P_bucket >= ``prefill_flash_from``): C_PH·rs·P_b·D·4 + one
                      chunk's activations + 3 f32 [rs, K/t, b, b] tiles; dense: C_S·rs·(K/t)·P_b²·4
                      + the whole prompt's activations + a second KV cache (the stacked one)
      logits          C_SL · rs·V·4

The step's peak is resident (parameters + optimizer state) + max(update, sampling), checked against
``device_gib · mem_fraction`` (JAX's GPU allocator takes ``XLA_PYTHON_CLIENT_MEM_FRACTION``, 0.75
by default). The update's C_* constants were fitted to ``memory_analysis().temp_size_in_bytes`` of
the jitted update on CPU at small shapes (tests/test_plan.py re-checks two configs within 25%), C_S
and the sampler's to the programs compiled at the presets' real widths (``prs.plan_compiled``,
tests/test_plan_compiled.py, benchmarks/plan_compiled.py: within 15%, on the safe side, of
XLA:CPU's count, which keeps some bf16 buffers in f32; GPU/TPU compilers fuse differently).
"""
from __future__ import annotations

import math
from typing import NamedTuple

from prs.models.qwen3 import ModelConfig

GIB = 2 ** 30

# Fitted on CPU (see the module docstring; update temp bytes on a 4-layer D=128 F=512 V=4096 model at
# R·W = 2048 tokens, two (R, W, M) shapes: full 69.4 / 86.1 MiB measured vs 71.5 / 85.3 planned;
# none 226 / 271 vs 196 / 241; dots_saveable 84.9 / 103.5 vs 79.5 / 93.3): floats per token per layer of one layer's working set,
# attention score copies, optimizer temporaries and live LM-head blocks.
C_D, C_Q, C_F = 6.0, 3.0, 3.0
# score-sized fp32 copies one layer keeps for its backward: the reference attention's hand-written
# backward keeps the probabilities only; autodiff of the einsum form (and XLA's dot_product_attention)
# keeps scores and probabilities; a flash kernel (cudnn) none.
# XLA's dot_product_attention: 4 f32 + 1 bf16 score-sized buffers in one layer's backward, measured on
# Qwen3-4B at W = 8704 (issue #29: 42.4 GiB of temporaries at 2 layers).
C_S = {"reference": 1.0, "einsum": 2.0, "xla": 4.5, "cudnn": 0.0, "blockwise": 0.0}
C_OPT = 1.0
C_LG = 3.0
# The sampler call's working set beyond its KV cache (fitted to XLA:CPU's memory_analysis of
# ``sample_jit`` on Qwen3-4B / 8B at 2 and 4 layers, ``prs.plan_compiled``; CPU keeps some bf16
# buffers in f32, so these are on the safe side for GPU/TPU):
# (fit: the re-roll calls of 4B and 8B at 16 rows per device within 1.01-1.09 of the compiled count,
# the smaller fresh calls 1.19-1.24, all on the safe side; benchmarks/plan_compiled.py)
C_DW = 2.5     # the decode step's per-layer weights (``qwen3.decode_weights``; f32 on CPU), in |dtype| per parameter
C_PH = 2.0     # f32 copies of the prompt's hidden states [rows, P, D] during the chunked prefill
C_KT = 0.8     # the cache's f32 transients (the decode attention's converted blocks), per byte of KV cache
C_SL = 4.0     # f32 [rows, V] buffers of the decode step's logits, log-softmax and sampling


def _bytes(dtype) -> int:
    import jax.numpy as jnp

    return int(jnp.dtype(dtype).itemsize)


class Plan(NamedTuple):
    """Per-device bytes of each part, and the verdict."""

    parameters: int
    optimizer_state: int
    gradients: int
    optimizer_temps: int
    activations: int
    logits: int
    kv_cache: int
    sampler_params: int
    sampler_logits: int
    device_bytes: int
    reference: int = 0       # the frozen KL reference copy (kl_coef > 0), sharded like the params
    head: int = 0            # the update's gathered LM head (|dtype|) and its f32 cotangent
    decode_weights: int = 0  # the sampler's per-layer decode copy of the weights (``qwen3.decode_weights``)
    prefill: int = 0         # the sampler's prefill working set (chunked flash, or dense scores + a 2nd cache)
    cache_transient: int = 0  # the KV cache's f32 transients (fitted on XLA:CPU, see C_KT)
    mem_fraction: float = 1.0  # the share of device_bytes the allocator may use
    @property
    def resident(self) -> int:
        return self.parameters + self.optimizer_state + self.reference

    @property
    def update_temp(self) -> int:
        """What XLA reports as the update's temp bytes (everything but the arguments)."""
        return self.gradients + self.optimizer_temps + self.activations + self.logits + self.head

    @property
    def sampling(self) -> int:
        return (self.kv_cache + self.sampler_params + self.sampler_logits + self.decode_weights + self.prefill
                + self.cache_transient)

    @property
    def update_total(self) -> int:
        """The update program's peak (resident state as its arguments + temporaries): what
        ``prs.plan_compiled.update_memory`` reads back from the compiler."""
        return self.resident + self.update_temp

    @property
    def sampling_total(self) -> int:
        """The sampler program's peak (its parameter copy as argument + cache and working set):
        what ``prs.plan_compiled.sampler_memory`` reads back from the compiler."""
        return self.sampling

    @property
    def peak(self) -> int:
        return self.resident + max(self.update_temp, self.sampling)

    @property
    def usable(self) -> int:
        """The bytes the allocator may hand out: ``device_bytes · mem_fraction``."""
        return int(self.device_bytes * self.mem_fraction)

    @property
    def fits(self) -> bool:
        return self.peak <= self.usable

    def report(self) -> str:
        g = lambda b: f"{b / GIB:9.2f} GiB"  # noqa: E731
        rows = [("parameters", self.parameters), ("optimizer state", self.optimizer_state),
                ("KL reference params", self.reference),
                ("gradients", self.gradients), ("optimizer temps", self.optimizer_temps),
                ("activations", self.activations), ("logits chunks", self.logits),
                ("gathered LM head + cot.", self.head),
                ("= update peak", self.resident + self.update_temp),
                ("KV cache (sampling)", self.kv_cache), ("sampler params", self.sampler_params),
                ("decode weight copy", self.decode_weights), ("prefill working set", self.prefill),
                ("KV cache f32 transients", self.cache_transient),
                ("sampler logits", self.sampler_logits), ("= sampling peak", self.resident + self.sampling),
                ("PEAK per device", self.peak), ("device memory", self.device_bytes),
                (f"usable (x{self.mem_fraction:g})", self.usable)]
        lines = [f"  {name:22s}{g(b)}" for name, b in rows]
        verdict = "fits" if self.fits else "DOES NOT FIT"
        lines.append(f"  verdict: {verdict} ({100 * self.peak / self.usable:.0f}% of the usable memory)")
        return "\n".join(lines)


def param_count(cfg: ModelConfig) -> int:
    return int(sum(math.prod(s.shape) for s in _leaves(cfg.param_shapes())))


def _leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def plan(cfg: ModelConfig, *, rows: int, width: int, prompt_len: int, max_new_tokens: int,
         micro_batches: int = 1, logits_chunk: int = 512, data: int = 1, fsdp: int = 1, tensor: int = 1,
         sample_rows: int | None = None, device_gib: float = 80.0, kl_reference: bool = False,
         sampling_bytes: int | None = None, cache_slots: int | None = None, mem_fraction: float = 1.0) -> Plan:
    """Per-device bytes for the update on ``rows`` rows of ``width`` tokens and sampling of
    ``sample_rows`` (default ``rows``) rollouts of ``cache_slots`` (default ``prompt_len +
    max_new_tokens``) cache slots."""
    for name, val in dict(rows=rows, width=width, micro_batches=micro_batches, data=data, fsdp=fsdp,
                          tensor=tensor, logits_chunk=logits_chunk).items():
        if not (isinstance(val, int) and val >= 1):
            raise ValueError(f"plan: {name} must be an int >= 1, got {val!r}")
    bs = data * fsdp
    if rows % (bs * micro_batches):
        raise ValueError(f"plan: rows={rows} must be a multiple of data·fsdp·micro_batches = {bs * micro_batches}")
    P = param_count(cfg)
    shard = fsdp * tensor
    pb, b = _bytes(cfg.param_dtype), _bytes(cfg.dtype)
    t = tensor
    r = rows // bs // micro_batches
    W = width - 1
    L, D, K, Kv, H, F, V = (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff,
                            cfg.vocab_size)
    Q = (K + 2 * Kv) * H / t
    scores = C_S.get(cfg.attention_impl, 2.0) * r * (K / t) * W * W * 4
    a1 = r * W * (C_D * D + C_Q * Q + C_F * F / t) * 4 + scores
    if cfg.remat == "none":
        act = (L + 1) * a1
    elif cfg.remat == "full":
        act = L * r * W * D * b + a1
    else:
        act = L * r * W * (Q + D) * b + a1
    grads = P * 4 / shard * (2 if micro_batches > 1 else 1)
    logits = C_LG * r * min(logits_chunk, W) * V / t * 4
    rs = (sample_rows or rows) / bs
    S = prompt_len + max_new_tokens if cache_slots is None else cache_slots
    if S < prompt_len + max_new_tokens:
        raise ValueError(f"plan: cache_slots={S} must be >= prompt_len + max_new_tokens = {prompt_len + max_new_tokens}")
    t_kv = t if Kv % t == 0 else 1  # the cache's kv heads over tensor (explicit.head_split)
    kv = 2 * L * rs * S * Kv * H * b / t_kv
    head = V * D * (b + 4) / t if fsdp > 1 else 0  # FSDP: the whole head gathered, its f32 cotangent before the scatter
    mats = L * D * ((K + 2 * Kv) * H + 3 * F) + L * K * H * D + (V * D if cfg.tie_embeddings else 0)
    Pb = S - max_new_tokens  # the call's prompt bucket
    flash = cfg.prefill_flash_from is not None and Pb >= cfg.prefill_flash_from and Pb % cfg.prefill_block == 0
    if flash:  # chunked flash prefill into the decode layout (prs.models.sampler._prefill_blocks)
        c = cfg.prefill_block
        pre = C_PH * rs * Pb * D * 4 + rs * c * (C_D * D + C_Q * Q + C_F * F / t) * 4 + 3 * rs * (K / t) * c * c * 4
    else:  # qwen3.prefill: dense scores, whole-prompt activations, and the stacked cache beside the split one
        pre = C_S["xla"] * rs * (K / t) * Pb * Pb * 4 + rs * Pb * (C_D * D + C_Q * Q + C_F * F / t) * 4 + kv
    return Plan(parameters=int(P * pb / shard), optimizer_state=int(2 * P * pb / shard), gradients=int(grads),
                optimizer_temps=int(C_OPT * P * 4 / shard), activations=int(act), logits=int(logits),
                kv_cache=int(kv), sampler_params=int(P * (sampling_bytes or pb) / t), sampler_logits=int(C_SL * rs * V * 4),
                device_bytes=int(device_gib * GIB), reference=int(P * pb / shard) if kl_reference else 0,
                head=int(head), decode_weights=int(C_DW * mats * b / t), prefill=int(pre),
                cache_transient=int(C_KT * kv), mem_fraction=float(mem_fraction))


MEM_FRACTION_VAR = "XLA_PYTHON_CLIENT_MEM_FRACTION"
GPU_DEFAULT_MEM_FRACTION = 0.75  # JAX's GPU client preallocates 75% of HBM when the variable is unset
PLATFORMS = ("gpu", "tpu")


def mem_fraction(*, platform: str = "gpu", env=None) -> float:
    """The share of a device's memory JAX really gets: on GPU ``XLA_PYTHON_CLIENT_MEM_FRACTION``
    (the BFC allocator's pool, default 0.75 when unset; 1 with ``XLA_PYTHON_CLIENT_ALLOCATOR=platform``,
    which has no pool), on TPU 1 (the variable is a GPU-client option). The launchers set it
    (``scripts/slurm_multinode.sbatch``: 0.92) and the planner reads the same variable, so plan and run
    agree. A value outside (0, 1] is a ValueError naming the variable."""
    import os

    if platform not in PLATFORMS:
        raise ValueError(f"mem_fraction: platform={platform!r}; choose from {PLATFORMS}")
    env = os.environ if env is None else env
    if platform == "tpu" or env.get("XLA_PYTHON_CLIENT_ALLOCATOR", "").strip().lower() == "platform":
        return 1.0
    raw = env.get(MEM_FRACTION_VAR)
    if raw is None or not raw.strip():
        return GPU_DEFAULT_MEM_FRACTION
    try:
        frac = float(raw)
    except ValueError:
        frac = float("nan")
    if not 0.0 < frac <= 1.0:
        raise ValueError(f"{MEM_FRACTION_VAR}={raw!r} must be a number in (0, 1] (the share of device memory "
                         f"JAX may use)")
    return frac


def sampler_cache_slots(prompt_len: int, max_new_tokens: int, *, prefix_rerolls: bool) -> int:
    """KV-cache slots per row of the run's largest sampler call: prompt + budget for fresh rollouts;
    prompt + 2 · budget with ``prefix_rerolls`` (``prs.rl.episodes.SingleTurnRollouts``: the re-roll
    rows, prompt + replayed prefix, fall in the prompt + budget width bucket, then the budget is added)."""
    return prompt_len + (2 if prefix_rerolls else 1) * max_new_tokens


def plan_run(model_cfg: ModelConfig, rl, *, prompt_len: int, max_new_tokens: int, data: int, fsdp: int,
             tensor: int, device_gib: float, prefix_rerolls: bool = True, mem_fraction: float = 1.0) -> Plan:
    """``plan`` for a trainer run: R = B·N rows (doubled with ``reroll=append``), the trainer's
    width prompt + 2 · budget (the longest a re-rolled row can be), ``rl.micro_batches``; with
    ``prefix_rerolls`` (a method that continues replayed prefixes) the sampler's KV cache is sized
    for a re-roll call (``sampler_cache_slots``). The device memory compared against is
    ``mem_fraction · device_gib`` (what JAX gets: ``mem_fraction()``)."""
    if not (isinstance(mem_fraction, (int, float)) and 0 < mem_fraction <= 1):
        raise ValueError(f"plan_run: mem_fraction must be a number in (0, 1], got {mem_fraction!r}")
    rows = rl.tasks_per_step * rl.group_size * (2 if rl.reroll == "append" else 1)
    slots = sampler_cache_slots(prompt_len, max_new_tokens, prefix_rerolls=prefix_rerolls)
    sample_rows = min(rows, rl.row_chunk) if getattr(rl, "row_chunk", None) else None  # one call's rows
    return plan(model_cfg, rows=rows, width=prompt_len + 2 * max_new_tokens, prompt_len=prompt_len, cache_slots=slots,
                sample_rows=sample_rows, mem_fraction=mem_fraction,
                max_new_tokens=max_new_tokens, micro_batches=rl.micro_batches, logits_chunk=rl.logits_chunk,
                data=data, fsdp=fsdp, tensor=tensor, device_gib=device_gib, kl_reference=bool(rl.kl_coef),
                sampling_bytes=None if rl.sampling_dtype == "param" else _bytes(rl.sampling_dtype))


if __name__ == "__main__":  # the Hydra command line is in experiments/plan.py (prs never imports Hydra)
    import runpy

    runpy.run_module("experiments.plan", run_name="__main__", alter_sys=True)
