"""The memory planner checked against the compiler: the real jitted sampler and update
programs compiled at a preset's real widths on abstract inputs, per device, read back from XLA.

For a model config, a mesh and the run's widths, ``sampler_memory`` lowers
``prs.models.sampler.sample_jit`` (the call ``SingleTurnRollouts`` makes: a fresh call on
``[R, P]`` prompt rows, or a Prefix Sampling re-roll call on ``[R, P + T]`` rows, whose cache is
``P + 2T`` slots) and ``update_memory`` lowers ``prs.rl.trainer.update_step`` with the trainer's
shardings (parameters and AdamW moments by the logical rules, rows over the batch axes), both on
``jax.ShapeDtypeStruct`` inputs (nothing is allocated), and reads
``compiled.memory_analysis()`` of the SPMD-partitioned program: per device,

    total = arguments + temporaries + outputs − aliased   (the program's peak, XLA's count)

The layer count is cut (the real 36 layers take minutes to compile on CPU):
``extrapolated(fn, cfg, layers=(2, 4))`` compiles at L₁ and L₂ layers and extends linearly,
``m(L) = m(L₁) + (L − L₁)·(m(L₂) − m(L₁))/(L₂ − L₁)`` for every field (each layer adds its
weights, its KV cache and nothing else to the sampler; its weights, moments, gradients and the
saved layer input to the update). ``python benchmarks/plan_compiled.py`` prints the table of all
four presets against ``prs.plan`` (docs/scaling.md); ``tests/test_plan_compiled.py`` checks one.

These are XLA:CPU's numbers; GPU and TPU compilers schedule and fuse differently (docs/scaling.md).
"""
from __future__ import annotations

import dataclasses
import functools
import time
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from prs.models.qwen3 import ModelConfig

GIB = 2 ** 30


class Memory(NamedTuple):
    """Per-device bytes of one compiled program (``compiled.memory_analysis()``)."""

    arguments: float
    outputs: float
    aliased: float
    temps: float
    compile_s: float = 0.0

    @property
    def total(self) -> float:
        return self.arguments + self.temps + self.outputs - self.aliased

    @staticmethod
    def of(compiled, compile_s: float = 0.0) -> "Memory":
        m = compiled.memory_analysis()
        return Memory(float(m.argument_size_in_bytes), float(m.output_size_in_bytes),
                      float(m.alias_size_in_bytes), float(m.temp_size_in_bytes), compile_s)

    def gib(self) -> dict:
        return {k: round(getattr(self, k) / GIB, 2) for k in ("arguments", "temps", "outputs", "aliased", "total")}


def _abstract(shapes, shardings):
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh), shapes, shardings)


def _compile(fn, *args, **kwargs) -> Memory:
    t0 = time.perf_counter()
    compiled = fn.lower(*args, **kwargs).compile()
    return Memory.of(compiled, time.perf_counter() - t0)


def sampler_memory(cfg: ModelConfig, *, rows: int, prompt_len: int, max_new_tokens: int, mesh,
                   reroll: bool, sampling_dtype=jnp.bfloat16, scfg_overrides: dict | None = None) -> Memory:
    """The sampler call of ``SingleTurnRollouts`` (``rows`` rows of ``prompt_len`` prompt slots, the
    budget ``max_new_tokens``; ``reroll``: rows in the ``prompt_len + max_new_tokens`` bucket) on the
    trainer's sampling copy (``sampling_dtype``, ``sampling_shardings``; None = the fp32 masters,
    replicated), compiled on ``mesh``."""
    from prs.models import sampler as S
    from prs.parallel import sharding as shd

    T = max_new_tokens
    width = prompt_len + T if reroll else prompt_len
    scfg = S.SamplerConfig(max_new_tokens=T, buckets=(prompt_len, prompt_len + T), **(scfg_overrides or {}))
    shapes = cfg.param_shapes()
    if sampling_dtype is not None:
        shapes = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, jnp.dtype(sampling_dtype)), shapes)
        params = _abstract(shapes, shd.sampling_shardings(cfg, mesh))
    else:
        params = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=shd.replicated(mesh)), shapes)
    row = lambda nd, dt, w=None: jax.ShapeDtypeStruct((rows,) if nd == 1 else (rows, w), dt,  # noqa: E731
                                                      sharding=shd.data_sharding(mesh, nd))
    key = jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=shd.replicated(mesh))
    row0 = jax.ShapeDtypeStruct((), jnp.int32, sharding=shd.replicated(mesh))
    return _compile(S.sample_jit, params, row(2, jnp.int32, width), row(1, jnp.int32), key, row(1, jnp.int32), row0,
                    cfg=cfg, scfg=scfg, mesh=mesh, return_cache=False)


def update_memory(cfg: ModelConfig, rl, *, rows: int, width: int, mesh, norm_len: int | None = None) -> Memory:
    """``Trainer``'s jitted update (``update_step``) on ``rows`` rows of ``width`` tokens, with its
    shardings: parameters and AdamW moments by ``param_shardings`` / ``opt_state_shardings``, rows
    over the batch axes, parameters and optimizer state donated."""
    import optax

    from prs.parallel import sharding as shd
    from prs.rl import trainer as TR

    tx = optax.chain(optax.clip_by_global_norm(rl.optim.grad_clip), optax.adamw(rl.optim.lr, b1=rl.optim.b1, b2=rl.optim.b2,
                                                                            weight_decay=rl.optim.weight_decay))
    shapes = cfg.param_shapes()
    psh = shd.param_shardings(cfg, mesh)
    osh = shd.opt_state_shardings(tx, shapes, psh, mesh)
    params = _abstract(shapes, psh)
    opt = _abstract(jax.eval_shape(tx.init, shapes), osh)
    s = lambda dt, nd=2: jax.ShapeDtypeStruct((rows, width) if nd == 2 else (rows,), dt,  # noqa: E731
                                              sharding=shd.data_sharding(mesh, nd))
    batch = TR.Batch(s(jnp.int32), s(jnp.int32), s(jnp.bool_), s(jnp.bool_), s(jnp.float32), s(jnp.float32, 1),
                     sampler_logp=s(jnp.float32) if rl.loss.rollout_correction else None)
    rows_sh = jax.tree.map(lambda x: x.sharding, batch)
    ref = (params,) if rl.loss.kl_coef else ()
    fn = jax.jit(functools.partial(TR.update_step, cfg=cfg, rl=rl, tx=tx, norm_len=norm_len or width - 1),
                 donate_argnums=(0, 1), in_shardings=(psh, osh, rows_sh, *((psh,) if rl.loss.kl_coef else ())),
                 out_shardings=(psh, osh, shd.replicated(mesh)))
    with jax.set_mesh(mesh):
        return _compile(fn, params, opt, batch, *ref)


def extrapolated(fn: Callable[[ModelConfig], Memory], cfg: ModelConfig, layers: tuple[int, int] = (2, 4)) -> dict:
    """``fn`` compiled at ``layers`` = (L₁, L₂) layers, every field extended linearly to
    ``cfg.n_layers`` (module docstring). Returns {"L1": Memory, "L2": Memory, "full": Memory}
    (``full``'s compile_s: the two compiles together)."""
    l1, l2 = layers
    m1 = fn(dataclasses.replace(cfg, n_layers=l1))
    m2 = fn(dataclasses.replace(cfg, n_layers=l2))
    L = cfg.n_layers
    ext = [a + (L - l1) * (b - a) / (l2 - l1) for a, b in zip(m1[:4], m2[:4])]
    return {"L1": m1, "L2": m2, "full": Memory(*ext, compile_s=m1.compile_s + m2.compile_s)}
