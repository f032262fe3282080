"""The kernels jitted with the batch sharded over 8 fake CPU devices equal the 1-device result; the
mesh builder's axis sizes and errors (``make_mesh``, ``logical_to_spec``)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core.advantages import group_advantages, group_pass_rates, mixed_groups
from prs.core.losses import AGG_MODES, policy_loss, token_logprobs
from prs.parallel import sharding as shd
from prs.parallel.sharding import DATA_AXIS, make_mesh, replicate, shard_batch


def _on_one_device(tree):
    return jax.device_put(tree, jax.devices()[0])


def test_advantages_sharded_equal_single_device(eight_devices):
    mesh = make_mesh(eight_devices)
    rng = np.random.default_rng(0)
    b, n = 16, 8
    rewards = (rng.random((b, n)) < rng.random((b, 1))).astype(np.float32)  # [B, N], groups split over data
    valid = rng.random((b, n)) < 0.85
    valid[0] = False
    valid[1, 1:] = False

    @jax.jit
    def kernels(r, v):
        out = {e: group_advantages(r, valid=v, estimator=e) for e in ("grpo", "dr_grpo", "rloo", "rloo_std")}
        k, cnt, p = group_pass_rates(r, v)
        return out, (k, cnt, p, mixed_groups(r, v))

    single = kernels(*_on_one_device((rewards, valid)))
    sharded_in = shard_batch((rewards, valid), mesh)
    assert sharded_in[0].sharding.spec[0] == DATA_AXIS and len(sharded_in[0].sharding.device_set) == 8
    sharded = kernels(*sharded_in)
    for a, s in zip(jax.tree.leaves(single), jax.tree.leaves(sharded)):
        np.testing.assert_allclose(np.asarray(s), np.asarray(a), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_loss_and_grad_sharded_equal_single_device(eight_devices, agg):
    """Loss + gradient w.r.t. a replicated parameter, batch [R, T] split over 8 devices.

    Under jit the denominators are global sums over the sharded batch, so no global_norm is needed."""
    mesh = make_mesh(eight_devices)
    rng = np.random.default_rng(1)
    r_, t_, v_, d_ = 16, 6, 11, 5
    feats = rng.normal(size=(r_, t_, d_)).astype(np.float32)  # [R, T, D]
    tokens = rng.integers(0, v_, (r_, t_)).astype(np.int32)  # [R, T]
    w = (0.3 * rng.normal(size=(d_, v_))).astype(np.float32)  # [D, V] the "policy"
    old = np.asarray(token_logprobs(np.einsum("rtd,dv->rtv", feats, w), tokens)) + rng.normal(0, 0.1, (r_, t_))
    old = old.astype(np.float32)
    ref = (old + rng.normal(0, 0.2, (r_, t_))).astype(np.float32)
    adv = rng.normal(size=(r_,)).astype(np.float32)  # [R]
    mask = np.arange(t_)[None, :] < rng.integers(0, t_ + 1, (r_, 1))  # [R, T]

    def loss_fn(w, feats, tokens, old, ref, adv, mask):
        logp = token_logprobs(jnp.einsum("rtd,dv->rtv", feats, w), tokens)  # [R, T]
        return policy_loss(logp, old, adv, mask, agg=agg, ref_logp=ref, kl_coef=0.05, dual_clip=3.0)[0]

    step = jax.jit(jax.value_and_grad(loss_fn))
    batch = (feats, tokens, old, ref, adv, mask)
    l1, g1 = step(*_on_one_device((w, *batch)))
    l8, g8 = step(replicate(w, mesh), *shard_batch(batch, mesh))
    np.testing.assert_allclose(float(l8), float(l1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(g8), np.asarray(g1), rtol=1e-6, atol=1e-6)


def test_make_mesh_sizes_and_errors(eight_devices):
    m = shd.make_mesh(eight_devices, fsdp=4, tensor=2)
    assert dict(m.shape) == {"data": 1, "fsdp": 4, "tensor": 2}
    assert dict(shd.make_mesh(eight_devices, data=2, fsdp=-1).shape) == {"data": 2, "fsdp": 4, "tensor": 1}
    assert dict(shd.make_mesh(eight_devices, model_parallel=2).shape) == {"data": 4, "fsdp": 1, "tensor": 2}
    with pytest.raises(ValueError, match="multiply"):
        shd.make_mesh(eight_devices, data=2, fsdp=2, tensor=1)
    with pytest.raises(ValueError, match="at most one -1"):
        shd.make_mesh(eight_devices, data=-1, fsdp=-1)
    with pytest.raises(ValueError, match="unknown logical axis"):
        shd.logical_to_spec(("embed", "bogus"), (8, 8), m)
