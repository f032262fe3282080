"""Gradients of the Qwen3 model (``prs.models.qwen3``) under its memory and speed options: remat
policies, attention implementations (and the hand-written backward of the reference one), scan
unrolling and block-skipping causal attention give the loss and gradients of the plain model, and
remat cuts the backward pass's temporary memory.

References: the default configuration's ``value_and_grad``, plain autodiff of the einsum
attention, and XLA's own ``memory_analysis``."""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.models import qwen3 as M
from tests._compare import max_rel as _max_rel, temp_bytes as _temp_bytes


def _model_loss(p, tokens, valid, cfg):
    h = M.forward_hidden(p, tokens, cfg=cfg, valid=valid)
    return jnp.mean(jnp.square(h)) + jnp.mean(M.logits_from_hidden(p, h, cfg=cfg) ** 2)


def test_remat_and_attention_impls_give_the_same_gradients():
    cfg = M.ModelConfig.preset("tiny")
    params = M.init_params(cfg, jax.random.PRNGKey(0), std=0.2)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (4, 9), 0, cfg.vocab_size)
    valid = jnp.arange(9)[None, :] < jnp.asarray([9, 5, 2, 1])[:, None]
    vg = jax.jit(jax.value_and_grad(_model_loss), static_argnums=3)
    want = vg(params, tokens, valid, cfg)
    for remat, impl in (("none", "xla"), ("full", "xla"), ("dots_saveable", "reference"), ("none", "einsum")):
        got = vg(params, tokens, valid, dataclasses.replace(cfg, remat=remat, attention_impl=impl))
        assert _max_rel(got, want) < 1e-5, (remat, impl)
    with pytest.raises(ValueError, match="remat"):
        M.ModelConfig.preset("tiny", remat="everything")
    with pytest.raises(ValueError, match="attention_impl"):
        M.ModelConfig.preset("tiny", attention_impl="flash")


def _ragged_attention_inputs(seed: int):
    """(cfg, q [3, 7, 4, 8], k, v [3, 9, 2, 8], mask [3, 7, 9], w [3, 7, 32]): grouped-query heads (K=4, Kv=2),
    odd T = 7 and S = 9, right padding (9, 4 and 0 valid keys: the last row fully masked) and a non-causal
    cross mask; ``w`` weighs the output in a test loss."""
    cfg = M.ModelConfig.preset("tiny")
    R, T_, S, K, Kv, H = 3, 7, 9, 4, 2, 8
    ks = jax.random.split(jax.random.PRNGKey(seed), 4)
    q = jax.random.normal(ks[0], (R, T_, K, H))
    k, v = jax.random.normal(ks[1], (R, S, Kv, H)), jax.random.normal(ks[2], (R, S, Kv, H))
    valid = jnp.arange(S)[None] < jnp.asarray([9, 4, 0])[:, None]
    mask = (jnp.arange(T_)[:, None] + 2 >= jnp.arange(S)[None])[None] & valid[:, None, :]  # [R, T, S]
    return cfg, q, k, v, mask, jax.random.normal(ks[3], (R, T_, K * H))


def test_reference_attention_backward_equals_autodiff_of_the_einsum_form():
    """The hand-written backward of the heads-major attention (``_attention_hm_bwd``) against
    plain autodiff of the einsum equation: grouped-query heads (K=4, Kv=2), right padding, a
    fully masked row (uniform average, zero q/k gradient) and a non-causal cross mask."""
    cfg, q, k, v, mask, w = _ragged_attention_inputs(3)

    def loss(impl, q, k, v):
        return jnp.sum(jnp.sin(M._ATTENTION_IMPLS[impl](q, k, v, mask, cfg)) * w)

    got = jax.jit(jax.value_and_grad(functools.partial(loss, "reference"), argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.value_and_grad(functools.partial(loss, "einsum"), argnums=(0, 1, 2)))(q, k, v)
    assert _max_rel(got, want) < 1e-5, _max_rel(got, want)
    assert float(jnp.max(jnp.abs(got[1][0][2]))) == 0.0  # the fully masked row: no query gradient
    assert np.isfinite(np.asarray(got[0]))


def test_padded_dot_product_attention_equals_the_einsum_form_with_its_gradient():
    """The cudnn impl pads T and S to a multiple of ``_CUDNN_SEQ_MULTIPLE`` (cuDNN's training kernels
    with a mask-bias refuse odd lengths: the trainer's W - 1 = 1535 failed on an H100). The same
    padding through the XLA kernel (runs on CPU) against the einsum equation: odd T = 7, S = 9, grouped
    heads, right padding and a fully masked row; values and q/k/v gradients."""
    cfg, q, k, v, mask, w = _ragged_attention_inputs(5)
    padded = functools.partial(M._attention_dpa, implementation="xla", seq_multiple=M._CUDNN_SEQ_MULTIPLE)

    def loss(fn, q, k, v):
        return jnp.sum(jnp.sin(fn(q, k, v, mask, cfg)) * w)

    vg = lambda fn: jax.jit(jax.value_and_grad(functools.partial(loss, fn), argnums=(0, 1, 2)))(q, k, v)
    got, want = vg(padded), vg(M._ATTENTION_IMPLS["einsum"])
    assert padded(q, k, v, mask, cfg).shape == w.shape
    assert _max_rel(got, want) < 1e-5, _max_rel(got, want)
    assert np.isfinite(np.asarray(got[0]))


def test_scan_unroll_gives_the_same_loss_and_gradients():
    cfg = M.ModelConfig.preset("tiny", n_layers=3)
    params = M.init_params(cfg, jax.random.PRNGKey(0), std=0.2)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (2, 6), 0, cfg.vocab_size)
    valid = jnp.arange(6)[None, :] < jnp.asarray([6, 3])[:, None]
    vg = jax.jit(jax.value_and_grad(_model_loss), static_argnums=3)
    want = vg(params, tokens, valid, cfg)
    for unroll in (2, 3):
        assert _max_rel(vg(params, tokens, valid, dataclasses.replace(cfg, scan_unroll=unroll)), want) < 1e-5
    with pytest.raises(ValueError, match="scan_unroll"):
        M.ModelConfig.preset("tiny", scan_unroll=0)


@pytest.mark.slow
def test_causal_blocks_give_the_same_loss_and_gradients():
    """Block-skipping causal attention (``ModelConfig.causal_blocks``) against one dense block:
    right padding (lengths 9, 5, 2, 1), T = 9 not a multiple of the block count, B up to T."""
    cfg = M.ModelConfig.preset("tiny", causal_blocks=1)
    params = M.init_params(cfg, jax.random.PRNGKey(0), std=0.2)
    tokens = jax.random.randint(jax.random.PRNGKey(1), (4, 9), 0, cfg.vocab_size)
    valid = jnp.arange(9)[None, :] < jnp.asarray([9, 5, 2, 1])[:, None]
    vg = jax.jit(jax.value_and_grad(_model_loss), static_argnums=3)
    want = vg(params, tokens, valid, cfg)
    for blocks in (2, 4, 9, 20):
        got = vg(params, tokens, valid, dataclasses.replace(cfg, causal_blocks=blocks))
        assert _max_rel(got, want) < 1e-5, blocks
    assert M.ModelConfig.preset("tiny").causal_blocks == 1  # the default: one dense block (committed runs re-run exactly)
    with pytest.raises(ValueError, match="causal_blocks"):
        M.ModelConfig.preset("tiny", causal_blocks=0)


def test_remat_cuts_backward_temp_bytes():
    """L = 8 layers, R = 4, T = 128, D = 64, K = 4: without remat every layer keeps its attention
    probabilities [R, K, T, T] f32 (1 MiB/layer) and MLP activations; ``full`` keeps only the layer
    inputs [R, T, D] (128 KiB/layer) plus one layer's recompute, so the drop should be several-fold
    (measured: see the assertion message); ``dots_saveable`` sits in between."""
    cfg = M.ModelConfig(vocab_size=64, d_model=64, n_layers=8, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128)
    params = jax.eval_shape(lambda: M.init_params(cfg, jax.random.PRNGKey(0)))
    tokens = jax.ShapeDtypeStruct((4, 128), jnp.int32)
    valid = jax.ShapeDtypeStruct((4, 128), jnp.bool_)
    temp = {r: _temp_bytes(jax.grad(functools.partial(_model_loss, cfg=dataclasses.replace(cfg, remat=r))),
                           params, tokens, valid) for r in ("none", "full", "dots_saveable")}
    assert temp["none"] / temp["full"] >= 3, temp
    assert temp["full"] < temp["dots_saveable"] < temp["none"], temp
