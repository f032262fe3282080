"""prs.plan: the planner's update temp bytes against XLA's memory_analysis on two small configs
(not the shapes its constants were fitted on), and the accelerator presets print "fits"."""
import functools

import jax
import jax.numpy as jnp
import optax
import pytest

from prs import plan as PL
from prs.models.qwen3 import ModelConfig
from prs.rl import trainer as T


def _measured_temp(cfg, rows, width, rl):
    tx = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
    params = cfg.param_shapes()
    opt = jax.eval_shape(tx.init, params)
    s = lambda dt: jax.ShapeDtypeStruct((rows, width), dt)  # noqa: E731
    batch = T.Batch(s(jnp.int32), s(jnp.int32), s(jnp.bool_), s(jnp.bool_), s(jnp.float32),
                    jax.ShapeDtypeStruct((rows,), jnp.float32))
    f = jax.jit(functools.partial(T._update_fn, cfg=cfg, rl=rl, tx=tx), donate_argnums=(0, 1))
    return f.lower(params, opt, batch).compile().memory_analysis().temp_size_in_bytes


@pytest.mark.parametrize("remat, shape, rows, width, micro, chunk", [
    ("full", dict(vocab_size=2048, d_model=96, n_layers=3, n_heads=4, n_kv_heads=2, head_dim=24, d_ff=384), 8, 97, 1, 32),
    ("none", dict(vocab_size=3072, d_model=64, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=32, d_ff=256), 16, 65, 2, 16),
])
def test_planner_matches_memory_analysis_within_25_percent(remat, shape, rows, width, micro, chunk):
    cfg = ModelConfig(**shape, remat=remat)
    rl = T.RLConfig(micro_batches=micro, logits_chunk=chunk)
    got = _measured_temp(cfg, rows, width, rl)
    p = PL.plan(cfg, rows=rows, width=width, prompt_len=8, max_new_tokens=8, micro_batches=micro, logits_chunk=chunk)
    assert 0.75 <= p.update_temp / got <= 1.25, (p.update_temp / 2**20, got / 2**20)
    assert p.parameters == PL.param_count(cfg) * 4  # one device: the whole fp32 model


def test_planner_splits_by_the_mesh_and_rejects_bad_shapes():
    cfg = ModelConfig.preset("qwen3_4b", dtype=jnp.bfloat16)
    one = PL.plan(cfg, rows=64, width=1024, prompt_len=512, max_new_tokens=256, micro_batches=8)
    eight = PL.plan(cfg, rows=64, width=1024, prompt_len=512, max_new_tokens=256, micro_batches=8, fsdp=8)
    assert one.parameters == 8 * eight.parameters and one.optimizer_state == 8 * eight.optimizer_state
    assert one.kv_cache == 8 * eight.kv_cache
    assert eight.activations < one.activations
    with pytest.raises(ValueError, match="multiple"):
        PL.plan(cfg, rows=60, width=1024, prompt_len=512, max_new_tokens=256, micro_batches=8)


@pytest.mark.parametrize("preset", ["grpo_ps_qwen3_4b_h200x8", "grpo_ps_qwen3_4b_v5p64",
                                    "grpo_ps_qwen3_8b_h200x8", "grpo_ps_qwen3_8b_v5p64"])
def test_accelerator_presets_fit(preset, capsys):
    from experiments.plan import main

    assert main([f"+experiment={preset}"]) == 0
    out = capsys.readouterr().out
    assert "verdict: fits" in out and "PEAK per device" in out
