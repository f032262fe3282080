"""The model, chunked LM head, GRPO update and sampler under ``AxisType.Explicit`` meshes (issue #14,
"sharding in types"), against the 1-device run; and the annotations of ``prs.parallel.explicit``
are the plain ops when there is no explicit mesh (single device and Auto meshes trace unchanged).

References: the 1-device trainer update of ``tests/rl/test_trainer_scale.py`` (same params, batch, config),
the 1-device sampler, and the plain ``jnp`` ops' jaxprs."""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from prs.models import qwen3 as M
from prs.models import sampler as S
from prs.parallel import explicit
from prs.parallel import sharding as shd
from prs.rl import trainer as T
from tests._compare import max_rel as _max_rel
from tests.rl.test_trainer_scale import _PC, _RL_SHARDED, MODEL, TASK, one_device_reference


def _explicit(mesh) -> bool:
    return all(t == AxisType.Explicit for t in mesh.axis_types)


def test_make_mesh_axis_types(eight_devices):
    """Explicit is the default (the trainer's host glue runs on host copies of the rollouts);
    ``axis_types="auto"`` opts out; anything else is one clear error naming the argument."""
    assert _explicit(shd.make_mesh(eight_devices, fsdp=4, tensor=2))
    assert _explicit(shd.make_mesh(eight_devices, fsdp=4, tensor=2, axis_types="explicit"))
    assert all(t == AxisType.Auto for t in shd.make_mesh(eight_devices, fsdp=8, axis_types="auto").axis_types)
    with pytest.raises(ValueError, match="axis_types='manual'.*choose from"):
        shd.make_mesh(eight_devices, fsdp=8, axis_types="manual")


@pytest.mark.parametrize("mesh_kw, remat", [(dict(fsdp=4, tensor=2), "none"), (dict(fsdp=8), "full")],
                         ids=["fsdp4_tp2", "fsdp8_remat"])
def test_explicit_trainer_update_equals_one_device(eight_devices, mesh_kw, remat):
    """The jitted GRPO update (2 micro-batches, chunked LM head, remat) traced under an Explicit
    mesh: loss, gradient norm, new parameters and Adam moments (mu = (1 − β₁) g after one step,
    i.e. the gradients) equal the 1-device update; parameters and moments stay sharded."""
    params, batch, (p1, o1, m1) = one_device_reference()
    mesh = shd.make_mesh(eight_devices, axis_types="explicit", **mesh_kw)
    tr = T.Trainer(TASK, dataclasses.replace(MODEL, remat=remat), _RL_SHARDED, _PC, mesh=mesh)
    s8 = tr.init_state(params)
    p8, o8, m8 = tr.update(s8.params, s8.opt_state, batch)
    np.testing.assert_allclose(float(m8["loss"]), float(m1["loss"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(m8["grad_norm"]), float(m1["grad_norm"]), rtol=1e-5)
    assert _max_rel(p8, p1) < 1e-5
    assert _max_rel(o8[1][0].mu, o1[1][0].mu) < 1e-5
    tp = "tensor" if "tensor" in mesh_kw else None
    want = {("layers", "q_proj"): P(None, "fsdp", tp), ("layers", "o_proj"): P(None, tp, "fsdp"),
            ("layers", "down_proj"): P(None, tp, "fsdp"), ("embed_tokens",): P(tp, "fsdp")}
    for path, spec in want.items():
        get = lambda t: t[path[0]] if len(path) == 1 else t[path[0]][path[1]]  # noqa: E731
        for leaf in (get(p8), get(o8[1][0].mu), get(o8[1][0].nu)):
            assert _explicit(leaf.sharding.mesh) and leaf.sharding.spec == spec, (path, leaf.sharding)
    q = p8["layers"]["q_proj"]
    assert q.addressable_shards[0].data.size * 8 == q.size  # really split over all 8 devices


def test_explicit_sampler_tokens_equal_one_device(eight_devices):
    """Prefill and the KV-cached decode loop under an Explicit fsdp4_tp2 mesh, with the sampler's
    parameter layout (tensor-split, whole over the batch axes): tokens equal the 1-device call."""
    cfg = M.ModelConfig.preset("tiny")
    params = M.init_params(cfg, jax.random.key(0), std=0.3)
    toks = np.asarray(jax.random.randint(jax.random.key(21), (8, 6), 1, cfg.vocab_size), np.int32)
    lengths = np.array([6, 1, 2, 3, 4, 5, 6, 2])
    scfg = S.SamplerConfig(max_new_tokens=5, temperature=1.0, top_p=0.95, buckets=(8,))
    one = S.sample(params, toks, lengths, jax.random.key(22), cfg=cfg, scfg=scfg)
    mesh = shd.make_mesh(eight_devices, fsdp=4, tensor=2, axis_types="explicit")
    sp = jax.device_put(params, shd.sampling_shardings(cfg, mesh))
    assert sp["layers"]["q_proj"].sharding.spec == P(None, None, "tensor")
    got = S.sample(sp, toks, lengths, jax.random.key(22), cfg=cfg, scfg=scfg, mesh=mesh)
    assert got.tokens.sharding.spec[0] == "fsdp" and _explicit(got.tokens.sharding.mesh)
    np.testing.assert_array_equal(one.tokens, got.tokens)
    np.testing.assert_array_equal(one.policy_mask, got.policy_mask)
    np.testing.assert_allclose(one.logprobs, got.logprobs, atol=1e-5)


@pytest.mark.parametrize("mesh_kw", [dict(fsdp=4, tensor=2),
                                     pytest.param(dict(data=2, fsdp=2, tensor=2), marks=pytest.mark.slow)],
                         ids=["fsdp4_tp2", "dp2_fsdp2_tp2"])
def test_explicit_sampler_kv_cache_split_over_tensor_heads(eight_devices, mesh_kw):
    """Under an Explicit (data/fsdp) x tensor mesh the KV cache is split over rows *and* kv heads
    (``explicit.head_split``): every device holds Kv / tensor heads of its rows, in the prefill's
    stacked cache, the decode loop's slot blocks (the compiled program's per-device buffers) and
    the returned cache; the tokens equal the 1-device call (fresh call, the chunked flash prefill, a
    resumed turn), the log-probs and the cache to float rounding."""
    cfg = M.ModelConfig.preset("tiny")  # Kv = 2, H = 8
    params = M.init_params(cfg, jax.random.key(0), std=0.3)
    toks = np.asarray(jax.random.randint(jax.random.key(21), (8, 6), 1, cfg.vocab_size), np.int32)
    lengths = np.array([6, 1, 2, 3, 4, 5, 6, 2])
    scfg = S.SamplerConfig(max_new_tokens=5, temperature=1.0, top_p=0.95, buckets=(8,))
    one, c1 = S.sample(params, toks, lengths, jax.random.key(22), cfg=cfg, scfg=scfg, return_cache=True)
    mesh = shd.make_mesh(eight_devices, axis_types="explicit", **mesh_kw)
    assert explicit.head_split(cfg.n_kv_heads, mesh) == "tensor"
    sp = jax.device_put(params, shd.sampling_shardings(cfg, mesh))
    got, c8 = S.sample(sp, toks, lengths, jax.random.key(22), cfg=cfg, scfg=scfg, mesh=mesh, return_cache=True)
    np.testing.assert_array_equal(one.tokens, got.tokens)
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(one.logprobs), rtol=0, atol=1e-5)
    rows = ("data", "fsdp") if "data" in mesh_kw else "fsdp"
    for name in ("k", "v"):  # [L, R, S, Kv, H]: rows over the batch axes, kv heads over tensor
        assert c8[name].sharding.spec == P(None, rows, None, "tensor", None), c8[name].sharding
        assert c8[name].addressable_shards[0].data.shape == (cfg.n_layers, 2, 13, 1, cfg.head_dim)
        np.testing.assert_allclose(np.asarray(c8[name]), np.asarray(c1[name]), rtol=0, atol=1e-5)
    # the decode loop's own buffers: per device 2 rows x 1 kv head (keys [2, 1, H, S], values [2, 1, S, H])
    args = S._place(mesh, sp, S.pad_to_bucket(toks, lengths, buckets=(8,)), lengths.astype(np.int32),
                    np.full(8, 5, np.int32))
    hlo = S.sample_jit.lower(*args[:3], jax.random.key(22), args[3], np.int32(0), cfg=cfg, scfg=scfg, mesh=mesh,
                             return_cache=False).compile().as_text()
    assert "f32[2,1,8,13]" in hlo and "f32[2,1,13,8]" in hlo and "f32[2,2,8,13]" not in hlo


@pytest.mark.slow
def test_explicit_sampler_head_split_flash_prefill_and_resume(eight_devices):
    """The other two writers of the head-split KV cache under an Explicit fsdp4_tp2 mesh: the chunked
    flash prefill (P >= ``prefill_flash_from``) and a resumed turn on the returned cache; tokens
    equal the 1-device calls."""
    cfg = M.ModelConfig.preset("tiny")
    params = M.init_params(cfg, jax.random.key(0), std=0.3)
    mesh = shd.make_mesh(eight_devices, axis_types="explicit", fsdp=4, tensor=2)
    sp = jax.device_put(params, shd.sampling_shardings(cfg, mesh))
    # the chunked flash prefill (P >= prefill_flash_from) writes the head-split blocks itself
    cfg2 = dataclasses.replace(cfg, prefill_flash_from=16, prefill_block=8)
    t2 = np.asarray(jax.random.randint(jax.random.key(5), (8, 16), 1, cfg.vocab_size), np.int32)
    l2 = np.array([16, 9, 12, 3, 16, 10, 11, 16])
    s2 = S.SamplerConfig(max_new_tokens=4, temperature=0.0, buckets=(16,))
    np.testing.assert_array_equal(S.sample(params, t2, l2, jax.random.key(1), cfg=cfg2, scfg=s2).tokens,
                                  S.sample(sp, t2, l2, jax.random.key(1), cfg=cfg2, scfg=s2, mesh=mesh).tokens)
    # a resumed turn on the returned (head-split) cache
    toks = np.asarray(jax.random.randint(jax.random.key(21), (8, 6), 1, cfg.vocab_size), np.int32)
    lengths = np.array([6, 1, 2, 3, 4, 5, 6, 2])
    scfg = S.SamplerConfig(max_new_tokens=5, temperature=1.0, buckets=(8,))
    one, c1 = S.sample(params, toks, lengths, jax.random.key(22), cfg=cfg, scfg=scfg, return_cache=True)
    got, c8 = S.sample(sp, toks, lengths, jax.random.key(22), cfg=cfg, scfg=scfg, mesh=mesh, return_cache=True)
    assert c8["k"].sharding.spec == P(None, "fsdp", None, "tensor", None)
    obs, ol = np.ones((8, 2), np.int32), np.array([2, 0, 1, 2, 2, 1, 0, 2])
    s3 = S.SamplerConfig(max_new_tokens=3)
    r1 = S.append_and_resume(params, one, obs, ol, jax.random.key(3), cfg=cfg, scfg=s3, cache=c1)
    r8 = S.append_and_resume(sp, got, obs, ol, jax.random.key(3), cfg=cfg, scfg=s3, cache=c8, mesh=mesh)
    np.testing.assert_array_equal(np.asarray(r1.tokens), S.all_rows_on_host(r8.tokens))


def test_annotations_are_the_plain_ops_without_an_explicit_mesh(eight_devices):
    """No mesh, or an Auto mesh in context: every helper traces to the plain op's jaxpr."""
    x, w = jnp.ones((6, 4)), jnp.ones((4, 5))
    ids = jnp.zeros((2, 3), jnp.int32)
    pairs = [
        (lambda: explicit.matmul(x, w, preferred_element_type=jnp.float32),
         lambda: jnp.matmul(x, w, preferred_element_type=jnp.float32)),
        (lambda: explicit.gather_rows(w, ids), lambda: jnp.take(w, ids, axis=0)),
        (lambda: explicit.reshape_rows(x, (2, 3, 4)), lambda: x.reshape(2, 3, 4)),
        (lambda: explicit.keep_rows(x) + explicit.constrain_rows(x), lambda: x + x),
        (lambda: explicit.zeros((2, 8, 3), jnp.float32, row_axis=1), lambda: jnp.zeros((2, 8, 3), jnp.float32)),
        (lambda: explicit.like_rows(lambda a: a[:, :2], x), lambda: x[:, :2]),
        (lambda: x.at[0].set(1.0, out_sharding=explicit.same(x)), lambda: x.at[0].set(1.0)),
    ]
    auto = shd.make_mesh(eight_devices, fsdp=8, axis_types="auto")
    for ctx in (None, auto):
        for got, want in pairs:
            if ctx is None:
                assert str(jax.make_jaxpr(got)()) == str(jax.make_jaxpr(want)())
            else:
                with jax.set_mesh(ctx):
                    assert explicit.explicit_mesh() is None
                    assert str(jax.make_jaxpr(got)()) == str(jax.make_jaxpr(want)())


def test_full_trainer_step_on_the_default_explicit_mesh_equals_one_device(eight_devices):
    """Two whole ``Trainer.step``s (sampling, rewards, buckets, a fixed-fraction Prefix-Sampling
    re-roll, the controller, the update) on the default mesh (Explicit axes, fsdp4_tp2) give the
    1-device run's metrics, controller state and parameters: the host glue runs on host copies of
    the row-split rollouts, so no eager op sees an Explicit sharding it cannot type."""
    mesh = shd.make_mesh(eight_devices, fsdp=4, tensor=2)
    assert _explicit(mesh)
    from tests._arith_tiny import MODEL as WARM_MODEL
    from tests._arith_tiny import RL as WARM_RL
    from tests._arith_tiny import warm_params

    rl = dataclasses.replace(WARM_RL, micro_batches=2, logits_chunk=4)
    pc = dataclasses.replace(_PC, mode="ps_ada")
    params = warm_params()  # mixed groups, so that Prefix Sampling re-rolls some
    runs = []
    for m in (None, mesh):
        tr = T.Trainer(TASK, WARM_MODEL, rl, pc, seed=5, mesh=m)
        state, ms = tr.init_state(params), []
        for _ in range(2):
            state, met = tr.step(state)
            ms.append(met)
        runs.append((state, ms))
    (s1, m1), (s8, m8) = runs
    assert any(m["groups_rerolled"] for m in m1), "no group was re-rolled: the test would not cover it"
    for a, b in zip(m1, m8):
        assert set(a) == set(b)
        for key, v in a.items():
            if key.startswith("time") or v is None or isinstance(v, str):
                assert key.startswith("time") or b[key] == v, key
                continue
            np.testing.assert_allclose(b[key], v, rtol=1e-5, atol=1e-6, err_msg=key)
    # the loss and gradient norm above agree to 1e-5; Adam's first steps move every weight by about
    # lr = 3e-4 whatever its gradient's size (m / sqrt(v)), so a reordered fp32 sum in a near-zero
    # gradient entry shows up at ~10% of one step: measured 2.8e-5 of the largest weight
    assert _max_rel(s8.params, s1.params) < 1e-4
    for a, b in zip(s1.prefix, s8.prefix):  # the controller (rho, EMA, counts)
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6)
    q = s8.params["layers"]["q_proj"]
    assert _explicit(q.sharding.mesh) and q.sharding.spec == P(None, "fsdp", "tensor")


def test_hydra_mesh_axis_types_reach_make_mesh(eight_devices):
    """``mesh=fsdp4_tp2`` composes an Explicit mesh; ``mesh.axis_types=auto`` an Auto one; another
    value is one error naming the argument and the choices."""
    import pathlib

    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build_mesh

    conf = pathlib.Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        cfgs = {t: validate(compose("config", overrides=["mesh=fsdp4_tp2", f"mesh.axis_types={t}", "sft.base_dir=/x"]))
                for t in ("explicit", "auto", "manual")}
    ex, au = build_mesh(cfgs["explicit"]), build_mesh(cfgs["auto"])
    assert _explicit(ex) and dict(ex.shape) == {"data": 1, "fsdp": 4, "tensor": 2}
    assert all(t == AxisType.Auto for t in au.axis_types) and dict(au.shape) == dict(ex.shape)
    with pytest.raises(ValueError, match="axis_types='manual'; choose from"):
        build_mesh(cfgs["manual"])
