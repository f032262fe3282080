"""The trainer's update at scale: micro-batching and the update width, the sharded update on 8 fake
devices, the KL to a frozen reference policy, and the bf16 sampling copy (``prs.rl.trainer``).

References: the unsharded single-batch update computed by the same library in its plain form, and
an independent computation of the KL term."""
from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as ps
from prs.core.losses import AGG_MODES, token_logprobs
from prs.models import qwen3 as M
from prs.parallel import sharding as shd
from prs.rl import trainer as T
from prs.tasks.registry import make_task
from tests._compare import max_abs as _max_abs, max_rel as _max_rel, rel_norm as _rel_norm

TASK = make_task("arith", min_terms=2, max_terms=4)
MODEL = M.ModelConfig.preset("tiny", vocab_size=TASK.vocab_size)


# ----------------------------------------------------------------------------- update: micro-batches, width


def _batch(rng, r=16, width=12, v=TASK.vocab_size, longest=None):
    lengths = rng.integers(4, (longest or width - 2) + 1, r)
    idx = np.arange(width)[None, :]
    valid = idx < lengths[:, None]
    prompt = rng.integers(1, 4, (r, 1))
    loss_mask = valid & (idx >= prompt)
    loss_mask[0] = False  # an empty row
    loss_mask[5, :] = False
    return T.Batch(tokens=jnp.asarray(rng.integers(0, v, (r, width)), jnp.int32),
                   positions=jnp.asarray(np.maximum(np.cumsum(valid, 1) - 1, 0), jnp.int32),
                   valid=jnp.asarray(valid), loss_mask=jnp.asarray(loss_mask),
                   old_logp=jnp.asarray(-rng.random((r, width)) * 3 - 1, jnp.float32),
                   advantages=jnp.asarray(rng.normal(size=r), jnp.float32))


@pytest.mark.parametrize("agg", AGG_MODES + ("rft",))
def test_micro_batches_equal_the_full_batch(agg):
    rl = T.RLConfig(logits_chunk=4, loss=T.LossConfig(agg=agg if agg != "rft" else "token-mean", algorithm="rft" if agg == "rft" else "grpo", entropy_coef=0.01 if agg == "token-mean" else 0.0))
    params = M.init_params(MODEL, jax.random.PRNGKey(0), std=0.2)
    batch = _batch(np.random.default_rng(0))
    grads = jax.jit(functools.partial(T._grads, cfg=MODEL, norm_len=11), static_argnames="rl")
    l1, m1, g1 = grads(params, batch, rl=rl)
    l4, m4, g4 = grads(params, batch, rl=dataclasses.replace(rl, micro_batches=4))
    np.testing.assert_allclose(float(l4), float(l1), rtol=1e-6, atol=1e-7)
    # float32 noise: ‖g₄ − g₁‖ / ‖g₁‖ measured 7e-7..9e-7 over the four modes (a row permutation
    # alone, M = 1, gives 1.3e-7; the micro-batch matmuls have other shapes, so other rounding)
    assert _rel_norm(g4, g1) < 1e-6 and _max_rel(g4, g1) < 2e-5
    for k in m1:
        np.testing.assert_allclose(float(m4[k]), float(m1[k]), rtol=1e-5, atol=1e-6, err_msg=k)
    with pytest.raises(ValueError, match="micro_batches"):
        grads(params, batch, rl=dataclasses.replace(rl, micro_batches=3))
    with pytest.raises(ValueError, match="micro_batches"):
        T.RLConfig(micro_batches=0)


def test_update_width_is_the_bucketed_longest_row_and_keeps_the_loss():
    valid = np.zeros((3, 40), bool)
    valid[0, :7] = valid[1, :3] = True
    assert T.update_width(valid, 40) == 10  # longest row 7 -> the first quarter of 40
    valid[2, :31] = True
    assert T.update_width(valid, 40) == 40
    assert T.update_width(np.zeros((2, 40), bool), 40) == 10
    rl = T.RLConfig(loss=T.LossConfig(agg="seq-mean-token-sum-norm"))
    params = M.init_params(MODEL, jax.random.PRNGKey(0), std=0.2)
    batch = _batch(np.random.default_rng(1), width=24, longest=11)
    w = T.update_width(batch.valid, 24)
    assert w == 12
    cut = T.Batch(*(x[:, :w] if x is not None and x.ndim == 2 else x for x in batch))
    grads = jax.jit(functools.partial(T._grads, cfg=MODEL, rl=rl, norm_len=23))
    full, short = grads(params, batch), grads(params, cut)
    np.testing.assert_allclose(float(short[0]), float(full[0]), rtol=1e-6)
    assert _max_rel(short[2], full[2]) < 1e-5


# ----------------------------------------------------------------------------- sharded update


_RL_SHARDED = T.RLConfig(tasks_per_step=2, group_size=8, micro_batches=2, logits_chunk=4, eval=T.EvalConfig(count=4, samples=1))
_PC = ps.PrefixConfig(mode="baseline", n=8)


@functools.lru_cache(maxsize=1)
def one_device_reference():
    """(params, batch, (new params, new opt state, metrics)) of the 1-device trainer update."""
    params = M.init_params(MODEL, jax.random.PRNGKey(0), std=0.2)
    batch = _batch(np.random.default_rng(2), r=16, width=12)
    one = T.Trainer(TASK, MODEL, _RL_SHARDED, _PC)
    s1 = one.init_state(params)
    return params, batch, one.update(s1.params, s1.opt_state, batch)


@pytest.fixture(scope="module")
def one_device_update():
    return one_device_reference()


@pytest.mark.parametrize("mesh_kw", [dict(fsdp=4, tensor=2), dict(fsdp=8), dict(data=2, fsdp=2, tensor=2)])
def test_sharded_trainer_update_equals_one_device(eight_devices, one_device_update, mesh_kw):
    """The trainer's jitted update (2 micro-batches, chunked head) on a sharded mesh: params and
    Adam moments sharded by the logical rules, same loss, gradient norm, new params and moments."""
    rl, pc = _RL_SHARDED, _PC
    params, batch, (p1, o1, m1) = one_device_update
    mesh = shd.make_mesh(eight_devices, data=mesh_kw.get("data", 1), fsdp=mesh_kw.get("fsdp", 1),
                         tensor=mesh_kw.get("tensor", 1))
    tr = T.Trainer(TASK, MODEL, rl, pc, mesh=mesh)
    s8 = tr.init_state(params)
    q = s8.params["layers"]["q_proj"]
    assert q.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp", "tensor" if "tensor" in mesh_kw else None)
    assert q.addressable_shards[0].data.size * mesh_kw.get("fsdp", 1) * mesh_kw.get("tensor", 1) == q.size
    mu = s8.opt_state[1][0].mu["layers"]["q_proj"]
    assert mu.sharding.spec == q.sharding.spec  # optimizer state sharded like its parameter
    p8, o8, m8 = tr.update(s8.params, s8.opt_state, shd.shard_batch(batch, mesh))
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(m8["grad_norm"]), float(m1["grad_norm"]), rtol=1e-5)
    assert _max_rel(p8, p1) < 1e-5
    assert _max_rel(o8[1][0].mu, o1[1][0].mu) < 1e-5
    assert p8["layers"]["q_proj"].sharding.spec == q.sharding.spec


@pytest.mark.slow
def test_sharded_update_selects_high_entropy_tokens_like_one_device(eight_devices):
    """``top_entropy_quantile = 0.5`` on an explicit (data 2, fsdp 2, tensor 2) mesh, with 2
    micro-batches (the whole-batch selection: a forward-only scan, one quantile over all rows) and
    without: the 1-device update's loss, selected fraction and new params. (On an explicit mesh the
    quantile's sort along the split rows was a ShardingTypeError, with or without micro-batches.)"""
    rl = dataclasses.replace(_RL_SHARDED, loss=dataclasses.replace(_RL_SHARDED.loss, top_entropy_quantile=0.5))
    params = M.init_params(MODEL, jax.random.PRNGKey(0), std=0.2)
    batch = _batch(np.random.default_rng(2), r=16, width=12)
    one = T.Trainer(TASK, MODEL, rl, _PC)
    s1 = one.init_state(params)
    p1, _, m1 = one.update(s1.params, s1.opt_state, batch)
    full = T.Trainer(TASK, MODEL, dataclasses.replace(rl, micro_batches=1), _PC)
    s0 = full.init_state(params)
    _, _, m0 = full.update(s0.params, s0.opt_state, batch)
    mesh = shd.make_mesh(eight_devices, data=2, fsdp=2, tensor=2)
    tr = T.Trainer(TASK, MODEL, rl, _PC, mesh=mesh)
    s8 = tr.init_state(params)
    p8, _, m8 = tr.update(s8.params, s8.opt_state, shd.shard_batch(batch, mesh))
    tr = T.Trainer(TASK, MODEL, dataclasses.replace(rl, micro_batches=1), _PC, mesh=mesh)  # no micro-batches
    s8 = tr.init_state(params)
    _, _, m8_full = tr.update(s8.params, s8.opt_state, shd.shard_batch(batch, mesh))
    for m in (m1, m8, m8_full):
        np.testing.assert_allclose(float(m["loss"]), float(m0["loss"]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(m["entropy_selected_frac"]), float(m0["entropy_selected_frac"]), rtol=1e-6)
    assert 0.3 < float(m0["entropy_selected_frac"]) < 0.7
    assert _max_rel(p8, p1) < 1e-5


# ----------------------------------------------------------------------------- KL to a reference policy


def test_kl_to_the_frozen_reference_equals_an_independent_computation():
    from prs.core.losses import policy_loss

    rl = T.RLConfig(tasks_per_step=2, group_size=8, logits_chunk=4, eval=T.EvalConfig(count=4, samples=1), loss=T.LossConfig(kl_coef=0.1))
    p0 = M.init_params(MODEL, jax.random.PRNGKey(0), std=0.2)
    p1 = jax.tree.map(lambda x: x + 0.05 * jax.random.normal(jax.random.PRNGKey(3), x.shape), p0)
    batch = _batch(np.random.default_rng(4), r=16, width=12)
    tr = T.Trainer(TASK, MODEL, rl, _PC)
    state = tr.init_state(p0)  # the reference = the starting parameters

    def direct(p, ref):
        lp = lambda q: token_logprobs(M.forward(q, batch.tokens[:, :-1], cfg=MODEL, positions=batch.positions[:, :-1],  # noqa: E731
                                                valid=batch.valid[:, :-1]), batch.tokens[:, 1:])
        return policy_loss(lp(p), batch.old_logp[:, 1:], batch.advantages, batch.loss_mask[:, 1:], agg=rl.loss.agg,
                           clip_low=rl.loss.clip_low, clip_high=rl.loss.clip_high, ref_logp=lp(ref), kl_coef=0.1,
                           norm_len=tr.width - 1)

    loss = jax.jit(lambda p: T._loss_fn(p, batch, cfg=MODEL, rl=rl, norm_len=tr.width - 1, ref_params=state.ref_params))
    (got, gm), (want, wm) = loss(p1), jax.jit(direct)(p1, p0)
    np.testing.assert_allclose(float(got), float(want), rtol=1e-5)
    assert float(gm["kl"]) > 1e-4 and float(gm["kl"]) == pytest.approx(float(wm["kl"]), rel=1e-4)
    assert float(loss(p0)[1]["kl"]) == pytest.approx(0.0, abs=1e-7)  # policy = reference: no KL
    g = jax.jit(functools.partial(T._grads, cfg=MODEL, norm_len=11), static_argnames="rl")
    _, _, g1 = g(p1, batch, p0, rl=rl)
    _, _, g4 = g(p1, batch, p0, rl=dataclasses.replace(rl, micro_batches=4))
    # float32 sums in another order: 1.18e-6 on an AMD family 25 model 17 (AVX-512) machine, < 1e-6 on others
    assert _rel_norm(g4, g1) < 5e-6


def test_kl_coef_trains_end_to_end_and_the_reference_stays_frozen():
    rl = T.RLConfig(tasks_per_step=2, group_size=8, eval=T.EvalConfig(count=4, samples=1), loss=T.LossConfig(kl_coef=0.05), optim=T.OptimConfig(lr=1e-2))
    tr = T.Trainer(TASK, MODEL, rl, _PC, seed=1)
    p0 = M.init_params(MODEL, jax.random.PRNGKey(5), std=0.2)
    state = tr.init_state(p0)
    state, m = tr.step(state)  # sampling, rewards, the KL-penalised update (a random policy: few loss tokens)
    assert np.isfinite(m["loss/loss"]) and m["loss/kl"] >= 0.0
    for _ in range(2):  # a batch with loss tokens everywhere moves the policy, never the reference
        params, opt, lm = tr.update(state.params, state.opt_state, _batch(np.random.default_rng(6), r=16, width=12),
                                    ref_params=state.ref_params)
        state = state._replace(params=params, opt_state=opt)
    assert float(lm["kl"]) > 0.0
    moved = _max_abs(state.params, p0)
    assert _max_abs(state.ref_params, p0) == 0.0 and moved > 0.0


# ----------------------------------------------------------------------------- sampling copy


def test_bf16_sampling_copy_is_cast_from_the_current_params_and_trains(eight_devices):
    rl = T.RLConfig(tasks_per_step=2, group_size=8, eval=T.EvalConfig(count=8, samples=1), rollout=T.RolloutConfig(sampling_dtype="bfloat16"))
    mesh = shd.make_mesh(eight_devices, fsdp=8)
    tr = T.Trainer(TASK, MODEL, rl, _PC, mesh=mesh)
    state = tr.init_state(M.init_params(MODEL, jax.random.PRNGKey(7), std=0.2))
    sp = tr.sampling_params(state.params)
    for x, p in zip(jax.tree.leaves(sp), jax.tree.leaves(state.params)):
        assert x.dtype == jnp.bfloat16 and x.sharding.is_fully_replicated
        np.testing.assert_array_equal(np.asarray(x), np.asarray(p.astype(jnp.bfloat16)))
    state, m = tr.step(state)
    assert np.isfinite(m["loss/loss"])
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(state.params))  # masters stay fp32
    with pytest.raises(ValueError, match="sampling_dtype"):
        T.RLConfig(rollout=T.RolloutConfig(sampling_dtype="int8"))


@pytest.mark.parametrize("micro", (2, 4))
def test_micro_batches_select_high_entropy_tokens_on_the_whole_batch(micro):
    """``top_entropy_quantile = 0.5``: the entropy cut-off τ is the whole batch's, so M micro-batches
    give the full batch's loss, gradient and selected fraction (a per-micro-batch τ moved the loss
    0.1746 -> 0.1682 and the gradient by 1.1e-2 relative on tiny arith)."""
    rl = T.RLConfig(logits_chunk=4, loss=T.LossConfig(top_entropy_quantile=0.5))
    params = M.init_params(MODEL, jax.random.PRNGKey(0), std=0.2)
    batch = _batch(np.random.default_rng(2))
    grads = jax.jit(functools.partial(T._grads, cfg=MODEL, norm_len=11), static_argnames="rl")
    l1, m1, g1 = grads(params, batch, rl=rl)
    lm, mm, gm = grads(params, batch, rl=dataclasses.replace(rl, micro_batches=micro))
    assert 0.3 < float(m1["entropy_selected_frac"]) < 0.7  # the selection is not trivial
    np.testing.assert_allclose(float(lm), float(l1), rtol=1e-5, atol=1e-7)
    assert _rel_norm(gm, g1) < 1e-5
    for k in m1:
        np.testing.assert_allclose(float(mm[k]), float(m1[k]), rtol=1e-5, atol=1e-6, err_msg=k)
