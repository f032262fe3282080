"""The opt-in blockwise (flash-style) training attention, ``prs.models.blockwise`` /
``ModelConfig(attention_impl="blockwise")`` (issue #20 item 1).

Reference: plain autodiff of the einsum equation (``qwen3._attention_einsum``) and the default
``reference`` impl of the whole decoder, at tiny shapes with grouped-query heads, right padding,
an empty (fully masked) row and tile counts that do not divide T, S or R."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.models import blockwise as BW
from prs.models import qwen3 as M

CFG = M.ModelConfig.preset("tiny")
TILES = (dict(rows=2, q_blocks=3, k_blocks=4, layout="tg"), dict(rows=5, q_blocks=20, k_blocks=2),
         dict(rows=1, q_blocks=2, k_blocks=0))  # rows 5 > R, 20 > T: clipped; k_blocks 0: all visible keys


def _max_rel(a, b) -> float:
    return max(float(jnp.max(jnp.abs(x - y)) / (jnp.max(jnp.abs(y)) + 1e-30))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _qkvw(R, T_, S, K=4, Kv=2, H=8, seed=3):
    ks = jax.random.split(jax.random.PRNGKey(seed), 4)
    return (jax.random.normal(ks[0], (R, T_, K, H)), jax.random.normal(ks[1], (R, S, Kv, H)),
            jax.random.normal(ks[2], (R, S, Kv, H)), jax.random.normal(ks[3], (R, T_, K * H)))


def _vg(attn, w):
    return jax.jit(jax.value_and_grad(lambda q, k, v: jnp.sum(jnp.sin(attn(q, k, v)) * w), argnums=(0, 1, 2)))


def test_blockwise_equals_the_einsum_form_on_a_cross_mask_with_an_empty_row():
    """Non-causal mask (query t sees keys <= t + 2) & key padding (9, 4, 0 valid keys): the last
    row attends to nothing and gets the reference's uniform average, zero q/k gradient, no NaN."""
    R, T_, S = 3, 7, 9
    q, k, v, w = _qkvw(R, T_, S)
    valid = jnp.arange(S)[None] < jnp.asarray([9, 4, 0])[:, None]
    mask = (jnp.arange(T_)[:, None] + 2 >= jnp.arange(S)[None])[None] & valid[:, None, :]
    want = _vg(lambda q, k, v: M._attention_einsum(q, k, v, mask, CFG), w)(q, k, v)
    for kw in TILES:
        got = _vg(lambda q, k, v, kw=kw: BW.blockwise_attention(q, k, v, mask, **kw), w)(q, k, v)
        assert _max_rel(got, want) < 1e-5, (kw, _max_rel(got, want))
        assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(got)), kw
        assert float(jnp.max(jnp.abs(got[1][0][2]))) == 0.0, kw  # the empty row: no query gradient
        assert float(jnp.max(jnp.abs(got[1][1][2]))) == 0.0, kw  # ... and no key gradient


def test_causal_block_skipping_equals_the_dense_causal_attention():
    """``causal=True`` skips the key blocks above each query block's diagonal; right padding."""
    R, T_ = 4, 9
    q, k, v, w = _qkvw(R, T_, T_, seed=5)
    valid = jnp.arange(T_)[None] < jnp.asarray([9, 5, 2, 1])[:, None]
    mask = (jnp.arange(T_)[:, None] >= jnp.arange(T_)[None])[None] & valid[:, None, :]
    want = _vg(lambda q, k, v: M._attention_einsum(q, k, v, mask, CFG), w)(q, k, v)
    for kw in TILES:
        got = _vg(lambda q, k, v, kw=kw: BW.blockwise_attention(q, k, v, mask, causal=True, **kw), w)(q, k, v)
        assert _max_rel(got, want) < 1e-5, (kw, _max_rel(got, want))
    assert BW._tiles(9, 9, 3, 3, True) == [(0, 3, [(0, 3)]), (3, 6, [(0, 3), (3, 6)]), (6, 9, [(0, 3), (3, 6), (6, 9)])]
    assert BW._tiles(9, 9, 3, 0, True) == [(0, 3, [(0, 3)]), (3, 6, [(0, 6)]), (6, 9, [(0, 9)])]


def _masked_loss(p, tokens, valid, cfg):
    """A loss over the valid positions only (as the trainer's loss_mask): the empty row's
    meaningless hidden states (no key to attend to) do not enter it."""
    h = M.forward_hidden(p, tokens, cfg=cfg, valid=valid)
    lg = M.logits_from_hidden(p, h, cfg=cfg)
    m = valid[..., None]
    return jnp.sum(jnp.where(m, jnp.square(h), 0.0)) / 50 + jnp.sum(jnp.where(m, lg, 0.0) ** 2) / 500


@pytest.mark.slow
def test_blockwise_model_loss_and_gradients_equal_the_reference_impl():
    """The whole decoder (2 layers), ``attention_impl="blockwise"`` (and other tile sizes) against
    the default ``reference``: lengths 9, 5, 2, 1 and an empty row, with and without remat (the
    custom_vjp under ``jax.checkpoint``)."""
    params = M.init_params(CFG, jax.random.PRNGKey(0), std=0.2)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (5, 9), 0, CFG.vocab_size)
    valid = jnp.arange(9)[None, :] < jnp.asarray([9, 5, 2, 1, 0])[:, None]
    vg = jax.jit(jax.value_and_grad(_masked_loss), static_argnums=3)
    want = vg(params, tokens, valid, CFG)
    if "bw_test_a" not in M._ATTENTION_IMPLS:
        M.register_blockwise("bw_test_a", rows=2, q_blocks=3, k_blocks=2, layout="gt")
    for impl, remat in (("blockwise", "none"), ("bw_test_a", "full")):
        got = vg(params, tokens, valid, dataclasses.replace(CFG, attention_impl=impl, remat=remat))
        assert _max_rel(got, want) < 1e-5, (impl, remat, _max_rel(got, want))
        assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(got)), impl
    assert CFG.attention_impl == "reference"  # opt-in: the default stays (committed runs replay bit for bit)


def test_blockwise_rejects_bad_shapes():
    q, k, v, _ = _qkvw(2, 5, 7)
    with pytest.raises(ValueError, match="causal=True needs S == T"):
        BW.blockwise_attention(q, k, v, jnp.ones((2, 5, 7), bool), causal=True)
    with pytest.raises(ValueError, match="disagree"):
        BW.blockwise_attention(q, k, v, jnp.ones((2, 5, 6), bool))
    with pytest.raises(ValueError, match="layout"):
        BW.blockwise_attention(q, k, v, jnp.ones((2, 5, 7), bool), layout="tgh")
    with pytest.raises(ValueError, match="already registered"):
        M.register_blockwise("blockwise", rows=1, q_blocks=1, k_blocks=1)
    assert BW.parse_variant("blockwise_r4_q2_k8") == dict(rows=4, q_blocks=2, k_blocks=8, layout="gt")
    assert BW.parse_variant("blockwise_r1_q4_k0_tg") == dict(rows=1, q_blocks=4, k_blocks=0, layout="tg")
    assert BW.parse_variant("reference") is None
    assert BW._row_chunk(6, 4) == 3 and BW._row_chunk(7, 4) == 1 and BW._row_chunk(4, 9) == 4


def test_blockwise_under_the_default_explicit_mesh_equals_one_device(eight_devices):
    """fsdp4_tp2 with Explicit axes (the default mesh): rows split over fsdp, heads over tensor;
    ``lax.map`` cannot scan a split row axis, so the kernel runs per shard (``jax.shard_map``)."""
    from prs.parallel import sharding as shd

    cfg = dataclasses.replace(CFG, attention_impl="blockwise")
    params = M.init_params(cfg, jax.random.PRNGKey(0), std=0.2)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (8, 9), 0, cfg.vocab_size)
    valid = jnp.arange(9)[None, :] < jnp.asarray([9, 5, 2, 1, 9, 3, 4, 7])[:, None]
    vg = jax.jit(jax.value_and_grad(_masked_loss), static_argnums=3)
    want = vg(params, tokens, valid, CFG)  # the reference impl on one device
    mesh = shd.make_mesh(eight_devices, fsdp=4, tensor=2)
    with jax.set_mesh(mesh):
        got = vg(jax.device_put(params, shd.param_shardings(cfg, mesh)), *shd.shard_batch((tokens, valid), mesh), cfg)
    got = jax.tree.map(np.asarray, got)
    assert _max_rel(got, want) < 1e-5, _max_rel(got, want)
