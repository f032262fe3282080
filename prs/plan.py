"""Per-device memory planner for a GRPO + Prefix Sampling run.

    python -m prs.plan --preset qwen3_4b --rows 256 --prompt-len 512 --max-new-tokens 4096 --fsdp 8 --device-gib 141
    python -m experiments.plan +experiment=grpo_ps_qwen3_4b_h200x8     # the same from a Hydra config

This module holds the arithmetic (``plan``, ``plan_run``) and a command line over explicit sizes
(``main``); ``experiments.plan`` reads the sizes from a training config (``prs`` never imports Hydra).

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
                      B·N there too: ``schedule.SameStep`` pads a re-roll to B groups unless
                      ``rollout.reroll_group_buckets``)
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

# Fitted on CPU (see the module docstring; update temp bytes of a 4-layer D=128 F=512 V=4096 model at
# R·W = 2048 tokens, two (R, W, M) shapes per remat policy; the fit's compiled vs planned bytes are in
# benchmarks/README.md): floats per token per layer of one layer's working set, attention score
# copies, optimizer temporaries and live LM-head blocks.
C_D, C_Q, C_F = 6.0, 3.0, 3.0
# score-sized fp32 copies one layer keeps for its backward: the reference attention's hand-written
# backward keeps the probabilities only; autodiff of the einsum form (and XLA's dot_product_attention)
# keeps scores and probabilities; a flash kernel (cudnn) none.
# XLA's dot_product_attention: 4 f32 + 1 bf16 score-sized buffers in one layer's backward (compiled
# Qwen3-4B at W = 8704).
C_S = {"reference": 1.0, "einsum": 2.0, "xla": 4.5, "cudnn": 0.0, "blockwise": 0.0}
C_OPT = 1.0
C_LG = 3.0
# The sampler call's working set beyond its KV cache (fitted to XLA:CPU's memory_analysis of
# ``sample_jit`` on Qwen3-4B / 8B at 2 and 4 layers, ``prs.plan_compiled``; CPU keeps some bf16
# buffers in f32, so these are on the safe side for GPU/TPU):
# (fit: the re-roll and fresh calls of 4B and 8B at 16 rows per device, all on the safe side of the
# compiled count; the ratios: benchmarks/plan_compiled.py, benchmarks/README.md)
C_DW = 2.5     # the decode step's per-layer weights (``qwen3.decode_weights``; f32 on CPU), in |dtype| per parameter
C_PH = 2.0     # f32 copies of the prompt's hidden states [rows, P, D] during the chunked prefill
C_KT = 0.8     # the cache's f32 transients (the decode attention's converted blocks), per byte of KV cache
C_SL = 4.0     # f32 [rows, V] buffers of the decode step's logits, log-softmax and sampling
UPDATE_CONSTANTS = ("C_D", "C_Q", "C_F", "C_S", "C_OPT", "C_LG")
SAMPLING_CONSTANTS = ("C_DW", "C_PH", "C_KT", "C_SL")


def constants() -> dict:
    """The planner's fitted constants by name (``plan(..., constants=)`` overrides any of them)."""
    g = globals()
    return {k: (dict(g[k]) if k == "C_S" else g[k]) for k in UPDATE_CONSTANTS + SAMPLING_CONSTANTS}


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
         sampling_bytes: int | None = None, cache_slots: int | None = None, mem_fraction: float = 1.0,
         constants: dict | None = None) -> Plan:
    """Per-device bytes for the update on ``rows`` rows of ``width`` tokens and sampling of
    ``sample_rows`` (default ``rows``) rollouts of ``cache_slots`` (default ``prompt_len +
    max_new_tokens``) cache slots. ``constants``: fitted constants to use instead of the module's
    (``constants()``'s names; e.g. ``calibrate``'s), default none."""
    bad = sorted(set(constants or {}) - set(UPDATE_CONSTANTS + SAMPLING_CONSTANTS))
    if bad:
        raise ValueError(f"plan: unknown constants {bad}; known: {list(UPDATE_CONSTANTS + SAMPLING_CONSTANTS)}")
    kc = {**globals()["constants"](), **(constants or {})}
    C_D, C_Q, C_F, C_S, C_OPT, C_LG = (kc[k] for k in UPDATE_CONSTANTS)
    C_DW, C_PH, C_KT, C_SL = (kc[k] for k in SAMPLING_CONSTANTS)
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


def _scaled(base: dict, names: tuple[str, ...], s: float) -> dict:
    return {**base, **{k: ({i: v * s for i, v in base[k].items()} if k == "C_S" else base[k] * s) for k in names}}


def calibrate(points, *, margin: float = 1.05, band: float = 1.2) -> dict:
    """Constants calibrated from measured peaks (a GPU window's ``peak_bytes_in_use``), not applied.

    ``points``: (program, cfg, plan_kwargs, peak_bytes) with program ``update`` or ``sampling``,
    ``plan_kwargs`` the keywords the measured program's ``plan(cfg, **plan_kwargs)`` takes. Each
    program's fitted constants (``UPDATE_CONSTANTS``, then ``SAMPLING_CONSTANTS`` with the update's
    calibrated ones held) are scaled by one factor s. A program's planned total is affine in s,
    m_i(s) = m_i(0) + s·(m_i(1) − m_i(0)), so the smallest s with m_i(s) >= margin·peak_i for every
    point is

        s = max_i (margin·peak_i − m_i(0)) / (m_i(1) − m_i(0))

    (never below the peak: the tightest point sits at ``margin``); ``within`` says whether every
    point then lies in [1, ``band``]·peak (issue #49: within 1.2x above, never below). A program
    without points keeps its constants (factor None). Returns {"constants": {...}, "update": {...},
    "sampling": {...}} with each program's factor, its points' planned / peak ratios and ``within``."""
    if not (isinstance(margin, (int, float)) and 1.0 <= margin <= band):
        raise ValueError(f"calibrate: margin must be a number in [1, band={band}], got {margin!r}")
    pts = list(points)
    for p in pts:
        if p[0] not in ("update", "sampling") or not (p[3] and p[3] > 0):
            raise ValueError(f"calibrate: a point is (program in update|sampling, cfg, plan_kwargs, peak > 0); got "
                             f"program {p[0]!r}, peak {p[3]!r}")
    base = constants()
    out: dict = {}
    for prog, names in (("update", UPDATE_CONSTANTS), ("sampling", SAMPLING_CONSTANTS)):
        mine = [p for p in pts if p[0] == prog]
        total = (lambda q: q.update_total) if prog == "update" else (lambda q: q.sampling_total)  # noqa: E731
        if not mine:
            out[prog] = {"factor": None, "ratios": [], "within": None}
            continue
        m0 = [total(plan(c, **kw, constants=_scaled(base, names, 0.0))) for _, c, kw, _ in mine]
        m1 = [total(plan(c, **kw, constants=_scaled(base, names, 1.0))) for _, c, kw, _ in mine]
        if any(b <= a for a, b in zip(m0, m1)):
            raise ValueError(f"calibrate: {prog}: a point's fitted terms are zero; its constants cannot be calibrated")
        s = max(0.0, max((margin * p[3] - a) / (b - a) for p, a, b in zip(mine, m0, m1)))
        base = _scaled(base, names, s)
        ratios = [total(plan(c, **kw, constants=base)) / peak for _, c, kw, peak in mine]
        out[prog] = {"factor": s, "ratios": ratios, "within": all(1.0 <= r <= band for r in ratios)}
    out["constants"] = base
    return out


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
    rows = rl.tasks_per_step * rl.group_size * (2 if rl.schedule.reroll == "append" else 1)
    slots = sampler_cache_slots(prompt_len, max_new_tokens, prefix_rerolls=prefix_rerolls)
    sample_rows = min(rows, rl.rollout.row_chunk) if rl.rollout.row_chunk else None  # one call's rows
    return plan(model_cfg, rows=rows, width=prompt_len + 2 * max_new_tokens, prompt_len=prompt_len, cache_slots=slots,
                sample_rows=sample_rows, mem_fraction=mem_fraction,
                max_new_tokens=max_new_tokens, micro_batches=rl.micro_batches, logits_chunk=rl.logits_chunk,
                data=data, fsdp=fsdp, tensor=tensor, device_gib=device_gib, kl_reference=bool(rl.loss.kl_coef),
                sampling_bytes=None if rl.rollout.sampling_dtype == "param" else _bytes(rl.rollout.sampling_dtype))


# ----------------------------------------------------------------------------- the vLLM rollout engine
#
# ``rollout.engine=vllm`` (``prs.rollout.vllm_engine``) samples with vLLM's offline ``LLM`` on the same
# GPUs as the JAX trainer. Planned here, not measured on a GPU (docs/scaling.md says which is which):
#
#   vLLM's weights per GPU      W_v = |HF tensors| · |dtype| / tp  (the engine loads the model untied:
#                               a tied model's LM head is a second V·D copy)
#   KV bytes per token per GPU  2 · L · max(Kv / tp, 1) · H · |kv dtype|  (K and V; kv heads split over
#                               tp, replicated once tp > Kv)
#   vLLM's share                u · HBM (``gpu_memory_utilization`` u); KV pool = u · HBM − W_v −
#                               activations (its profile run: ``max_num_batched_tokens`` tokens through
#                               one layer + ``max_num_seqs`` rows of f32 logits) − context
#   colocated                   JAX's pool (``XLA_PYTHON_CLIENT_MEM_FRACTION`` f · HBM) is taken when JAX
#                               starts; vLLM refuses to start unless u · HBM is free, so f + u <= 1 −
#                               contexts/HBM, and the trainer's update peak (rollouts by vLLM: no JAX
#                               sampler) must fit f · HBM
#   sleep mode                  ``LLM(enable_sleep_mode=True)``, ``sleep(level=1|2)`` after each
#                               generation: vLLM frees its weights (level 1: to host memory) and KV cache
#                               during the update. It helps only if JAX gives memory back between
#                               phases (``XLA_PYTHON_CLIENT_ALLOCATOR=platform``: no pool; the BFC pool
#                               never shrinks): update phase JAX's update peak + context, rollout phase
#                               JAX's resident state + u · HBM, each <= HBM
#   weight push per step        bytes = W_v · tp (every replica gets the whole model): dlpack on the GPU
#                               (no host): all-gather of the FSDP shards over NVLink + one device copy into
#                               vLLM's buffers; host copy (what ``VLLMEngine.update_params`` does): device
#                               -> host over PCIe, the HF conversion in numpy (transposes, the parameters'
#                               dtype), host -> device
#   decode roofline             a step of one replica reads W_v and its rows' KV per GPU:
#                               rows · (P + T/2) · KV bytes per token; tokens/s <= rows · BW / bytes
#                               (tp's all-reduces not counted)
#   TPU (``platform="tpu"``)     vLLM's JAX backend (tpu-inference) runs inside the trainer's process
#                               (one process per host owns the chips): one allocator, no per-process
#                               fraction, so the update peak + u · HBM <= HBM (sleep mode: each phase
#                               alone), the weight push an on-chip reshard over ICI. Planned only.

# Stated bandwidths (bytes/s, one direction, per GPU) and sizes: vendor figures for an 8xH200 HGX node
# (HBM3e 4.8 TB/s, NVLink 4 900 GB/s both directions, PCIe 5 x16 64 GB/s of which ~50 usable), and
# ~10 GB/s for numpy's strided transposes on one host thread. Override per call.
BANDWIDTHS = {"hbm": 4.8e12, "nvlink": 450e9, "pcie": 50e9, "host": 10e9}
# TPU v5p (planned through vLLM's JAX backend, tpu-inference; not run here): HBM2e 2.765 TB/s, the
# "nvlink" leg is ICI (4,800 Gb/s per chip = 600 GB/s), host links ~25 GB/s.
TPU_BANDWIDTHS = {"hbm": 2.765e12, "nvlink": 600e9, "pcie": 25e9, "host": 10e9}
CONTEXT_BYTES = GIB  # per process: CUDA context, cuBLAS/NCCL workspaces (vLLM's "non-torch" memory)
VLLM_MAX_BATCHED_TOKENS = 16384  # vLLM's offline (LLM class) defaults on H100/H200
VLLM_MAX_SEQS = 1024
VLLM_PAGE = 16  # tokens per KV page (vLLM's default block size)


def hf_param_count(cfg: ModelConfig, *, untied: bool = True) -> int:
    """Parameters of the Hugging Face Qwen3 model vLLM loads, from the config: embedding V·D; per layer
    q D·K·H, k and v D·Kv·H, o K·H·D, gate/up/down 3·D·F, the q/k norms 2·H (with ``qk_norm``), the q/k/v
    biases (K + 2·Kv)·H (with ``qkv_bias``), two RMS norms 2·D; the final norm D; and an LM head V·D
    unless tied (``untied``: the vLLM engine writes every model untied)."""
    L, D, K, Kv, H, F, V = (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff,
                            cfg.vocab_size)
    layer = D * K * H + 2 * D * Kv * H + K * H * D + 3 * D * F + (2 * H if cfg.qk_norm else 0) + 2 * D
    layer += (K + 2 * Kv) * H if cfg.qkv_bias else 0
    head = V * D if (untied or not cfg.tie_embeddings) else 0
    return V * D + L * layer + D + head


def kv_bytes_per_token(cfg: ModelConfig, *, tensor_parallel: int = 1, dtype_bytes: int = 2) -> int:
    """KV-cache bytes one token occupies on one GPU: 2 (K and V) · L · max(Kv / tp, 1) · H · |dtype|."""
    return int(2 * cfg.n_layers * max(cfg.n_kv_heads // tensor_parallel, 1) * cfg.head_dim * dtype_bytes)


class VLLMPlan(NamedTuple):
    """Per-GPU bytes and seconds of the vLLM engine next to the JAX trainer (see the section comment)."""

    tensor_parallel: int
    data_parallel: int
    memory_utilization: float
    hbm: int                 # device bytes
    weights: int             # vLLM's model copy per GPU
    activations: int         # vLLM's profiled activation peak per GPU
    kv_per_token: int        # KV bytes per token per GPU
    kv_pool: int             # bytes left to KV pages per GPU (may be < 0: nothing left)
    rows_per_replica: int    # the step's rows one vLLM replica samples
    slots: int               # cache slots a row needs (prompt + replayed prefix + budget)
    jax_fraction: float      # JAX's pool share f
    jax_update_peak: int     # the trainer's update program (``Plan.update_total``)
    jax_resident: int        # parameters + optimizer state (+ KL reference)
    sleep_mode: bool
    platform: str            # gpu (vLLM's CUDA build, its own process memory) or tpu (vLLM's JAX backend, in-process)
    sync_bytes: int          # bytes pushed into one replica per step (the whole model, |sync dtype|)
    sync_dlpack_s: float     # on the GPU: NVLink all-gather of the FSDP shards + one device copy
    sync_host_s: float       # device -> host, numpy HF conversion, host -> device
    decode_tokens_per_s: float  # the node's decode roofline (all replicas), rows at once as the pool allows

    @property
    def kv_tokens(self) -> int:
        """Tokens of KV one replica holds: whole pages of the per-GPU pool."""
        return max(self.kv_pool, 0) // self.kv_per_token // VLLM_PAGE * VLLM_PAGE

    @property
    def concurrent_rows(self) -> int:
        """Rows one replica decodes at once (vLLM queues the rest): the KV pool's worth of rows, <= rows."""
        return min(self.rows_per_replica, self.kv_tokens // self.slots)

    @property
    def jax_fits(self) -> bool:
        return self.jax_update_peak <= (1.0 if self.platform == "tpu" else self.jax_fraction) * self.hbm

    @property
    def colocated_fits(self) -> bool:
        """Both engines on every GPU: phase by phase with sleep mode (and JAX's platform allocator),
        else both shares at once; vLLM needs at least one row's KV."""
        if self.concurrent_rows < 1:
            return False
        u = self.memory_utilization * self.hbm
        if self.platform == "tpu":  # one process, one allocator
            if self.sleep_mode:
                return self.jax_update_peak <= self.hbm and self.jax_resident + u <= self.hbm
            return self.jax_update_peak + u <= self.hbm
        if self.sleep_mode:
            return (self.jax_update_peak + 2 * CONTEXT_BYTES <= self.hbm
                    and self.jax_resident + CONTEXT_BYTES + self.memory_utilization * self.hbm <= self.hbm)
        return self.jax_fits and (self.jax_fraction + self.memory_utilization) * self.hbm + CONTEXT_BYTES <= self.hbm

    def report(self) -> str:
        g = lambda b: f"{b / GIB:9.2f} GiB"  # noqa: E731
        tpu = self.platform == "tpu"
        rows = [("vLLM weights / device", g(self.weights)), ("vLLM activations", g(self.activations)),
                (f"vLLM share (x{self.memory_utilization:g})", g(self.memory_utilization * self.hbm)),
                ("KV pool / device", g(self.kv_pool)), ("KV bytes / token", f"{self.kv_per_token:9d} B"),
                ("KV tokens / replica", f"{self.kv_tokens:9d}"),
                ("rows / replica", f"{self.rows_per_replica:9d} x {self.slots} slots"),
                ("rows at once", f"{self.concurrent_rows:9d}"),
                (f"JAX pool (x{self.jax_fraction:g})", g(self.jax_fraction * self.hbm)),
                ("JAX update peak", g(self.jax_update_peak)), ("JAX resident", g(self.jax_resident)),
                ("weight push / replica", g(self.sync_bytes)),
                ("  on-chip reshard (ICI)" if tpu else "  by dlpack on GPU", f"{self.sync_dlpack_s:9.2f} s"),
                ("  by host copy", f"{self.sync_host_s:9.2f} s"),
                ("decode roofline", f"{self.decode_tokens_per_s:9.0f} tok/s on all devices")]
        lines = [f"  {name:24s}{val}" for name, val in rows]
        how = "phase by phase (sleep mode, JAX platform allocator)" if self.sleep_mode else "both shares at once"
        if self.platform == "tpu":
            how += "; TPU through vLLM's JAX backend in the trainer's process: planned, not measured"
        lines.append(f"  colocated ({how}): {'fits' if self.colocated_fits else 'DOES NOT FIT'}"
                     f"{'' if self.jax_fits or self.sleep_mode else ' (the update exceeds JAX pool)'}")
        return "\n".join(lines)


def plan_vllm(cfg: ModelConfig, *, rows: int, prompt_len: int, max_new_tokens: int, devices: int,
              device_gib: float, jax_plan: Plan, jax_fraction: float, memory_utilization: float = 0.9,
              tensor_parallel: int = 1, sleep_mode: bool = False, prefix_rerolls: bool = True,
              dtype_bytes: int = 2, bandwidths: dict | None = None, platform: str = "gpu",
              max_batched_tokens: int = VLLM_MAX_BATCHED_TOKENS, max_seqs: int = VLLM_MAX_SEQS) -> VLLMPlan:
    """The vLLM engine on ``devices`` GPUs of ``device_gib`` next to the JAX trainer of ``jax_plan``:
    ``devices / tensor_parallel`` replicas, each sampling its share of the step's ``rows`` rows of
    ``prompt_len`` + ``max_new_tokens`` (+ a replayed prefix of up to ``max_new_tokens`` with
    ``prefix_rerolls``) slots. Bandwidths: ``BANDWIDTHS`` updated by ``bandwidths``."""
    if not (isinstance(tensor_parallel, int) and tensor_parallel >= 1 and devices % tensor_parallel == 0):
        raise ValueError(f"plan_vllm: tensor_parallel={tensor_parallel!r} must be an int >= 1 dividing devices={devices}")
    for name, val in dict(memory_utilization=memory_utilization, jax_fraction=jax_fraction).items():
        if not (isinstance(val, (int, float)) and 0 < val <= 1):
            raise ValueError(f"plan_vllm: {name} must be a number in (0, 1], got {val!r}")
    if platform not in PLATFORMS:
        raise ValueError(f"plan_vllm: platform={platform!r}; choose from {PLATFORMS}")
    bad = set(bandwidths or {}) - set(BANDWIDTHS)
    if bad:
        raise ValueError(f"plan_vllm: unknown bandwidths {sorted(bad)}; known: {sorted(BANDWIDTHS)}")
    bw = {**(TPU_BANDWIDTHS if platform == "tpu" else BANDWIDTHS), **(bandwidths or {})}
    ctx = 0 if platform == "tpu" else CONTEXT_BYTES
    tp, dp = tensor_parallel, devices // tensor_parallel
    hbm = int(device_gib * GIB)
    D, F, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    model = hf_param_count(cfg) * dtype_bytes
    weights = model // tp
    q = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim / tp
    act = max_batched_tokens * (6 * D + 3 * F / tp + 2 * q) * dtype_bytes + 2 * max_seqs * V * 4
    kvt = kv_bytes_per_token(cfg, tensor_parallel=tp, dtype_bytes=dtype_bytes)
    pool = int(memory_utilization * hbm - weights - act - ctx)
    slots = prompt_len + (2 if prefix_rerolls else 1) * max_new_tokens
    rpr = -(-rows // dp)
    fsdp_share = (devices - 1) / devices
    sync_dlpack = model * fsdp_share / bw["nvlink"] + 2 * model / bw["hbm"]
    conv = hf_param_count(cfg) * _bytes(cfg.param_dtype)  # the HF conversion handles the masters' dtype
    sync_host = conv / bw["pcie"] + conv / bw["host"] + model / bw["pcie"]
    plan = VLLMPlan(tensor_parallel=tp, data_parallel=dp, memory_utilization=float(memory_utilization), hbm=hbm,
                    weights=int(weights), activations=int(act), kv_per_token=kvt, kv_pool=pool,
                    rows_per_replica=rpr, slots=slots, jax_fraction=float(jax_fraction),
                    jax_update_peak=int(jax_plan.update_total), jax_resident=int(jax_plan.resident),
                    sleep_mode=bool(sleep_mode), platform=platform, sync_bytes=int(model), sync_dlpack_s=sync_dlpack,
                    sync_host_s=sync_host, decode_tokens_per_s=0.0)
    at_once = plan.concurrent_rows
    step = weights + at_once * (prompt_len + max_new_tokens / 2) * kvt  # bytes one GPU reads per decode step
    return plan._replace(decode_tokens_per_s=dp * at_once * bw["hbm"] / step if at_once else 0.0)



def main(argv=None) -> int:
    """``python -m prs.plan``: the plan of one model preset and batch shape; exits 1 if it does not fit.
    Hydra overrides (``key=value``) are read by ``python -m experiments.plan``."""
    import argparse
    import sys

    argv = sys.argv[1:] if argv is None else list(argv)
    hydra = [a for a in argv if "=" in a and not a.startswith("-")]
    if hydra:
        raise SystemExit(f"prs.plan: {hydra[0]!r} is a Hydra override; run python -m experiments.plan {' '.join(argv)}")
    ap = argparse.ArgumentParser(prog="python -m prs.plan", description="Per-device memory of a GRPO + PS step.")
    ap.add_argument("--preset", required=True, help="ModelConfig.preset name, e.g. qwen3_4b")
    ap.add_argument("--rows", type=int, required=True, help="rollouts per step, B·N")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--max-new-tokens", type=int, default=512)
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--row-chunk", type=int, default=None, help="rows per sampler call (default: all)")
    ap.add_argument("--remat", default=None, help="ModelConfig.remat (default: the preset's)")
    ap.add_argument("--attention-impl", default=None, help="ModelConfig.attention_impl (default: the preset's)")
    ap.add_argument("--logits-chunk", type=int, default=512)
    ap.add_argument("--data", type=int, default=1)
    ap.add_argument("--fsdp", type=int, default=1)
    ap.add_argument("--tensor", type=int, default=1)
    ap.add_argument("--device-gib", type=float, default=80.0)
    ap.add_argument("--platform", default="gpu", choices=PLATFORMS)
    ap.add_argument("--mem-fraction", type=float, default=None, help="default: what JAX takes (mem_fraction())")
    ap.add_argument("--dtype", default="bfloat16", help="compute dtype (conf/model: bfloat16)")
    ap.add_argument("--param-dtype", default="float32", help="master weights (conf/model: float32)")
    ap.add_argument("--sampling-dtype", default=None, help="the sampler's weight copy (default: --param-dtype)")
    ap.add_argument("--kl-reference", action="store_true", help="a frozen reference copy (kl_coef > 0)")
    ap.add_argument("--no-rerolls", action="store_true", help="no prefix re-rolls (the baseline's sampler cache)")
    args = ap.parse_args(argv)
    import jax.numpy as jnp

    over = {k: v for k, v in (("remat", args.remat), ("attention_impl", args.attention_impl)) if v is not None}
    cfg = ModelConfig.preset(args.preset, dtype=getattr(jnp, args.dtype), param_dtype=getattr(jnp, args.param_dtype),
                             **over)
    frac = args.mem_fraction if args.mem_fraction is not None else mem_fraction(platform=args.platform)
    slots = sampler_cache_slots(args.prompt_len, args.max_new_tokens, prefix_rerolls=not args.no_rerolls)
    p = plan(cfg, rows=args.rows, width=args.prompt_len + 2 * args.max_new_tokens, prompt_len=args.prompt_len,
             max_new_tokens=args.max_new_tokens, micro_batches=args.micro_batches, logits_chunk=args.logits_chunk,
             data=args.data, fsdp=args.fsdp, tensor=args.tensor, device_gib=args.device_gib,
             kl_reference=args.kl_reference, cache_slots=slots, mem_fraction=frac,
             sample_rows=min(args.rows, args.row_chunk) if args.row_chunk else None,
             sampling_bytes=_bytes(getattr(jnp, args.sampling_dtype)) if args.sampling_dtype else None)
    print(f"{args.preset}: {args.rows} rollouts x (prompt {args.prompt_len} + budget {args.max_new_tokens}), "
          f"sampler cache {slots} slots, mesh data={args.data} fsdp={args.fsdp} tensor={args.tensor}, "
          f"{args.device_gib:g} GiB x {frac:g}")
    print(p.report())
    return 0 if p.fits else 1


if __name__ == "__main__":
    raise SystemExit(main())
