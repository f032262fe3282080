"""Every public kernel on the default ``data x fsdp x tensor`` mesh (issue #29 item 5).

``make_mesh(data=2, fsdp=2, tensor=2)`` with Explicit axes (the default) and with Auto axes,
parameters placed by ``param_shardings``, the call under ``jax.set_mesh(mesh)`` and ``jax.jit``,
inputs laid out as the model produces them (logits ``[R@rows, T, V@tensor]``, per-token arrays
``[R@rows, T]``, rewards ``[B@rows, N]``; tokens replicated or row-split): values and gradients
equal the one-device call (no mesh) of the same function.

The defect: ``token_logprobs(forward(params, x), y)`` under the Explicit mesh raised
``ShardingTypeError`` (the picked-logit gather from a ``tensor``-split vocabulary).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from prs.core.advantages import ESTIMATORS, group_advantages
from prs.core.losses import policy_loss, token_entropy, token_logprobs
from prs.models import qwen3 as M
from prs.models import sampler as S
from prs.models.lm_head import lm_head_logprobs
from prs.parallel import sharding as shd

CFG = M.ModelConfig.preset("tiny")
R, T = 8, 9  # rows, tokens (+1 for the shifted targets)
AXIS_TYPES = ("explicit", "auto")
ROWS = ("data", "fsdp")


@functools.lru_cache(maxsize=None)
def _mesh(axis_types: str):
    return shd.make_mesh(jax.devices()[:8], data=2, fsdp=2, tensor=2, axis_types=axis_types)


def _params():
    return M.init_params(CFG, jax.random.key(0), std=0.3)


def _tokens():
    return np.asarray(jax.random.randint(jax.random.key(1), (R, T), 0, CFG.vocab_size), np.int32)


def _put(x, mesh, spec):
    return jax.device_put(x, NamedSharding(mesh, spec))


def _close(got, want, *, rtol=1e-5):
    """Leaf by leaf: NaN where the reference is NaN, else ``max |got − want| <= rtol · max |want|``
    (a different reduction order across shards moves float32 sums by a few ulps of the largest term)."""
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        ok = ~np.isnan(w)
        scale = float(np.max(np.abs(w[ok]), initial=0.0))
        assert float(np.max(np.abs(g[ok] - w[ok]), initial=0.0)) <= rtol * scale + 1e-30, (g, w)


def _on_mesh(fn, axis_types, *args):
    """``jax.jit(fn)(*args)`` under ``jax.set_mesh`` (args already placed on the mesh)."""
    with jax.set_mesh(_mesh(axis_types)):
        return jax.jit(fn)(*args)


@pytest.fixture(params=AXIS_TYPES)
def axis_types(request, eight_devices):
    return request.param


@pytest.mark.parametrize("tokens_layout", ["replicated", "rows"])
def test_grad_of_token_logprobs_of_forward(axis_types, tokens_layout):
    """The issue's call: ``jit(grad(loss))`` with ``loss = token_logprobs(forward(p, x), y).mean()``
    (plus the entropy, so ``token_entropy`` is differentiated through the sharded logits too):
    ``forward``'s logits, the loss and the parameter gradient."""
    params, tokens = _params(), _tokens()

    def loss(p, tok):
        z = M.forward(p, tok[:, :-1], cfg=CFG)  # [R, T-1, V]
        return token_logprobs(z, tok[:, 1:]).mean() + 0.1 * token_entropy(z).mean(), z

    want = jax.jit(jax.value_and_grad(loss, has_aux=True))(params, tokens)
    mesh = _mesh(axis_types)
    p = jax.device_put(params, shd.param_shardings(CFG, mesh))
    tok = _put(tokens, mesh, P() if tokens_layout == "replicated" else P(ROWS))
    got = _on_mesh(jax.value_and_grad(loss, has_aux=True), axis_types, p, tok)
    _close(got, want)
    if axis_types == "explicit":  # the gradient's type is the parameter's (Auto: the compiler's choice)
        assert got[1]["layers"]["q_proj"].sharding.spec == p["layers"]["q_proj"].sharding.spec


def test_token_logprobs_and_entropy_on_sharded_logits(axis_types):
    """``token_logprobs`` / ``token_entropy`` of logits split ``[R@rows, T, V@tensor]`` (the LM
    head's layout), a ``-1`` pad id included (NaN, as on one device): values and ``d/dlogits``."""
    z = 3.0 * jax.random.normal(jax.random.key(3), (R, T, CFG.vocab_size))
    y = jnp.asarray(_tokens()).at[0, 0].set(-1)
    w = jax.random.normal(jax.random.key(4), (R, T))

    def fn(z, y, w):
        lp, ent = token_logprobs(z, y), token_entropy(z)
        obj = lambda z: jnp.sum(jnp.where(y >= 0, w * token_logprobs(z, y), 0.0)) + jnp.sum(w * token_entropy(z))  # noqa: E731
        return lp, ent, jax.grad(obj)(z)

    want = jax.jit(fn)(z, y, w)
    mesh = _mesh(axis_types)
    got = _on_mesh(fn, axis_types, _put(z, mesh, P(ROWS, None, "tensor")), _put(y, mesh, P(ROWS)),
                   _put(w, mesh, P(ROWS)))
    assert np.isnan(np.asarray(got[0])[0, 0]) and np.isnan(np.asarray(want[0])[0, 0])
    _close(got, want)


@pytest.mark.parametrize("kw", [dict(), dict(agg="seq-mean-token-mean", ratio_level="sequence"),
                                dict(loss_type="cispo", clip_low=10.0, agg="seq-mean-token-sum"),
                                dict(dual_clip=3.0, kl_coef=0.1, kl_type="k3+", entropy_coef=0.01),
                                dict(agg="seq-mean-token-mean", ratio_level="sequence", num_segments=3)],
                         ids=["ppo", "gspo", "cispo", "kl_entropy", "packed"])
def test_policy_loss(axis_types, kw):
    """``policy_loss`` on row-split ``[R, T]`` inputs (as ``token_logprobs`` returns them): the loss,
    every metric and ``d/dlogp``."""
    k = jax.random.split(jax.random.key(5), 6)
    logp = -jnp.abs(jax.random.normal(k[0], (R, T)))
    old = logp + 0.3 * jax.random.normal(k[1], (R, T))
    adv = jax.random.normal(k[2], (R,))
    mask = jax.random.bernoulli(k[3], 0.8, (R, T)).at[:, 0].set(True)
    ref, ent = logp + 0.2 * jax.random.normal(k[4], (R, T)), jnp.abs(jax.random.normal(k[5], (R, T)))
    seg = jnp.where(jnp.arange(T)[None, :] < 4, 1, 2) * jnp.ones((R, 1), jnp.int32) if "num_segments" in kw else None
    extra = dict(kw)
    if "kl_coef" in kw:
        extra.update(ref_logp=ref, entropy=ent)

    def fn(logp, old, adv, mask, seg):
        f = lambda lp: policy_loss(lp, old, adv, mask, segment_ids=seg, **extra)  # noqa: E731
        (loss, metrics), g = jax.value_and_grad(f, has_aux=True)(logp)
        return loss, metrics, g

    want = jax.jit(fn)(logp, old, adv, mask, seg)
    mesh = _mesh(axis_types)
    rows = lambda x: None if x is None else _put(x, mesh, P(ROWS))  # noqa: E731
    if "kl_coef" in kw:
        extra.update(ref_logp=rows(ref), entropy=rows(ent))
    got = _on_mesh(fn, axis_types, rows(logp), rows(old), rows(adv), rows(mask), rows(seg))
    _close(got, want)


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_group_advantages(axis_types, estimator):
    """``group_advantages`` of rewards ``[B@rows, N]`` with a ``valid`` mask: values and the
    gradient of a weighted sum w.r.t. the rewards."""
    B, N = 8, 4
    k = jax.random.split(jax.random.key(6), 3)
    rewards = jax.random.bernoulli(k[0], 0.5, (B, N)).astype(jnp.float32)
    valid = jax.random.bernoulli(k[1], 0.85, (B, N))
    w = jax.random.normal(k[2], (B, N))
    lengths = jnp.arange(B * N, dtype=jnp.int32).reshape(B, N) % 7 + 1 if estimator.startswith("reinforce_pp") else None

    def fn(r, valid, w, lengths):
        f = lambda r: group_advantages(r, estimator=estimator, valid=valid, lengths=lengths)  # noqa: E731
        return f(r), jax.grad(lambda r: jnp.sum(w * f(r)))(r)

    want = jax.jit(fn)(rewards, valid, w, lengths)
    mesh = _mesh(axis_types)
    rows = lambda x: None if x is None else _put(x, mesh, P(ROWS))  # noqa: E731
    got = _on_mesh(fn, axis_types, rows(rewards), rows(valid), rows(w), rows(lengths))
    _close(got, want)


def test_lm_head_logprobs(axis_types):
    """The chunked LM head on ``forward_hidden``'s ``[R@rows, T, D]`` output (a scan over 3 blocks of
    ``_block_stats``, the one-block path's body): log-probs, entropy and the parameter gradient."""
    chunk = 3
    params, tokens = _params(), _tokens()
    w = jax.random.normal(jax.random.key(7), (R, T - 1))

    def fn(p, tok, w):
        def obj(p):
            h = M.forward_hidden(p, tok[:, :-1], cfg=CFG)
            lp, ent = lm_head_logprobs(p, h, tok[:, 1:], cfg=CFG, chunk=chunk, with_entropy=True)
            return jnp.sum(w * lp) + 0.1 * jnp.sum(w * ent), (lp, ent)
        (_, aux), g = jax.value_and_grad(obj, has_aux=True)(p)
        return aux, g

    want = jax.jit(fn)(params, tokens, w)
    mesh = _mesh(axis_types)
    p = jax.device_put(params, shd.param_shardings(CFG, mesh))
    got = _on_mesh(fn, axis_types, p, _put(tokens, mesh, P(ROWS)), _put(w, mesh, P(ROWS)))
    _close(got, want)


def test_sample(axis_types):
    """``sample`` (prefill + KV-cached decode) with the sampler's layout on the (2, 2, 2) mesh:
    tokens equal the 1-device call, and the log-probs it reports agree."""
    params = _params()
    toks = _tokens()[:, :6]
    lengths = np.array([6, 1, 2, 3, 4, 5, 6, 2])
    scfg = S.SamplerConfig(max_new_tokens=5, temperature=1.0, top_p=0.95, buckets=(8,))
    one = S.sample(params, toks, lengths, jax.random.key(22), cfg=CFG, scfg=scfg)
    mesh = _mesh(axis_types)
    sp = jax.device_put(params, shd.sampling_shardings(CFG, mesh))
    got = S.sample(sp, toks, lengths, jax.random.key(22), cfg=CFG, scfg=scfg, mesh=mesh)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(one.tokens))
    _close(got.logprobs, one.logprobs, rtol=1e-5)
