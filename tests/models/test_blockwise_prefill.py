"""The flash prefill (``blockwise.causal_attention`` in ``qwen3.prefill``, issue #29) against the
dense prefill: same cache and last-token logits on ragged rows, the same sampled tokens, on one
device and on an explicit fsdp mesh; no [R, K, P, P] buffer in the compiled prefill."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.models import blockwise as BW
from prs.models import qwen3 as M
from prs.models import sampler as S


def _rows(cfg, R=6, P=37, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, cfg.vocab_size, size=(R, P)).astype(np.int32)
    lengths = np.array([P, 1, 5, P - 3, 17, 2][:R], np.int32)  # ragged, incl. a 1-token row
    tokens = np.where(np.arange(P)[None] < lengths[:, None], tokens, 0)
    return jnp.asarray(tokens), jnp.asarray(lengths)


@pytest.mark.parametrize("block, impl", [(8, "reference"), (16, "xla"), (37, "reference"), (5, "einsum")])
def test_flash_prefill_equals_the_dense_prefill_on_ragged_rows(block, impl):
    dense = M.ModelConfig.preset("tiny", vocab_size=97, attention_impl=impl, prefill_flash_from=None)
    flash = dataclasses.replace(dense, prefill_flash_from=1, prefill_block=block)
    params = M.init_params(dense, jax.random.PRNGKey(0))
    tokens, lengths = _rows(dense)
    lg_d, c_d = M.prefill(params, tokens, lengths, cfg=dense, max_len=50)
    lg_f, c_f = M.prefill(params, tokens, lengths, cfg=flash, max_len=50)
    np.testing.assert_allclose(np.asarray(lg_f), np.asarray(lg_d), rtol=1e-5, atol=1e-5)
    for name in ("k", "v"):  # layer 0 is written before any attention: bit-equal; later layers by rounding
        np.testing.assert_array_equal(np.asarray(c_f[name][0]), np.asarray(c_d[name][0]))
        np.testing.assert_allclose(np.asarray(c_f[name]), np.asarray(c_d[name]), rtol=1e-5, atol=1e-5)
    # and against the full forward pass at each row's last token (the cached-decode invariant)
    full = M.forward(params, tokens, cfg=dense, valid=jnp.arange(tokens.shape[1])[None] < lengths[:, None])
    ref = np.asarray(full)[np.arange(tokens.shape[0]), np.asarray(lengths) - 1]
    np.testing.assert_allclose(np.asarray(lg_f), ref, rtol=1e-4, atol=1e-4)


def test_causal_attention_equals_the_masked_einsum():
    rng = np.random.default_rng(1)
    R, T, K, Kv, H = 3, 29, 4, 2, 8
    q = jnp.asarray(rng.normal(size=(R, T, K, H)), jnp.float32)
    k = jnp.asarray(rng.normal(size=(R, T, Kv, H)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(R, T, Kv, H)), jnp.float32)
    mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (R, T, T))
    cfg = M.ModelConfig.preset("tiny")
    ref = M._attention_einsum(q, k, v, mask, cfg)
    for block, rows in [(4, 1), (7, 2), (29, None), (100, 3), (1, None)]:
        got = BW.causal_attention(q, k, v, block=block, rows=rows)
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="disagree"):
        BW.causal_attention(q, k[:, :-1], v[:, :-1])


def test_default_gate_keeps_short_prompts_on_the_dense_path():
    """The default config runs the dense prefill below 512 tokens (committed runs replay bit-exactly):
    the jaxprs of the default and of ``prefill_flash_from=None`` are the same program."""
    cfg = M.ModelConfig.preset("tiny", vocab_size=97)
    assert cfg.prefill_flash_from == 512
    params = M.init_params(cfg, jax.random.PRNGKey(0))
    tokens, lengths = _rows(cfg)
    j = lambda c: str(jax.make_jaxpr(lambda p, t, n: M.prefill(p, t, n, cfg=c, max_len=50))(params, tokens, lengths))  # noqa: E731
    assert j(cfg) == j(dataclasses.replace(cfg, prefill_flash_from=None))
    assert j(cfg) != j(dataclasses.replace(cfg, prefill_flash_from=8))
    with pytest.raises(ValueError, match="prefill_flash_from"):
        M.ModelConfig.preset("tiny", prefill_flash_from=0)


def test_sampler_tokens_equal_with_the_flash_prefill_on_a_mesh(eight_devices):
    """Greedy tokens of the dense and the flash prefill agree, unsharded and on an explicit fsdp=4,
    tensor=2 mesh (each device's rows through ``shard_map``)."""
    from prs.parallel.sharding import make_mesh

    dense = M.ModelConfig.preset("tiny", vocab_size=97, prefill_flash_from=None)
    flash = dataclasses.replace(dense, prefill_flash_from=1, prefill_block=8)
    params = M.init_params(dense, jax.random.PRNGKey(3))
    tokens, lengths = _rows(dense, R=8 - 2)
    tokens = jnp.concatenate([tokens, tokens[:2]])
    lengths = jnp.concatenate([lengths, lengths[:2]])
    scfg = S.SamplerConfig(max_new_tokens=6, temperature=0.0, buckets=None)
    key = jax.random.PRNGKey(1)
    ref = S.sample(params, tokens, lengths, key, cfg=dense, scfg=scfg)
    mesh = make_mesh(eight_devices, data=1, fsdp=4, tensor=2)
    for cfg, m in [(flash, None), (flash, mesh)]:
        got = S.sample(params, tokens, lengths, key, cfg=cfg, scfg=scfg, mesh=m)
        np.testing.assert_array_equal(S.all_rows_on_host(got.tokens), np.asarray(ref.tokens))
        np.testing.assert_allclose(S.all_rows_on_host(got.logprobs), np.asarray(ref.logprobs), atol=1e-5)


def test_compiled_flash_prefill_holds_no_dense_scores():
    """The compiled prefill's temp bytes: the dense path holds [R, K, P, P] f32 scores, the flash
    path one row chunk's tiles (XLA's own count)."""
    cfg = M.ModelConfig.preset("tiny", vocab_size=97, n_layers=1, attention_impl="xla", prefill_flash_from=None)
    R, P = 8, 512
    scores = R * cfg.n_heads * P * P * 4
    args = (jax.ShapeDtypeStruct((R, P), jnp.int32), jax.ShapeDtypeStruct((R,), jnp.int32))
    params = cfg.param_shapes()

    def temp(c):
        f = jax.jit(lambda p, t, n: M.prefill(p, t, n, cfg=c, max_len=P))
        return f.lower(params, *args).compile().memory_analysis().temp_size_in_bytes

    d = temp(cfg)
    f = temp(dataclasses.replace(cfg, prefill_flash_from=1, prefill_block=64))
    assert d >= scores, (d, scores)
    assert f < scores / 8, (f, scores)


@pytest.mark.parametrize("attend", [None, (24, 40)])
def test_long_prompt_prefill_into_the_decode_layout_samples_the_same(attend):
    """``sampler._prefill_blocks`` (prompts >= ``prefill_flash_from``: chunked, flash, straight into
    the decode cache layout) against the dense prefill + split: the same greedy tokens and log-probs
    to float rounding, and the same returned cache on the rows' real slots; with ``attend_buckets``
    (several slot blocks) too."""
    dense = M.ModelConfig.preset("tiny", vocab_size=97, prefill_flash_from=None)
    flash = dataclasses.replace(dense, prefill_flash_from=16, prefill_block=8)
    params = M.init_params(dense, jax.random.PRNGKey(5))
    tokens, lengths = _rows(dense, R=6, P=32)
    scfg = S.SamplerConfig(max_new_tokens=12, temperature=0.0, buckets=(32,), attend_buckets=attend)
    key = jax.random.PRNGKey(2)
    ref, c_ref = S.sample(params, tokens, lengths, key, cfg=dense, scfg=scfg, return_cache=True)
    assert S._long_prefill(32, flash, 1) and not S._long_prefill(32, dense, 1)
    got, c_got = S.sample(params, tokens, lengths, key, cfg=flash, scfg=scfg, return_cache=True)
    np.testing.assert_array_equal(np.asarray(got.tokens), np.asarray(ref.tokens))
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(ref.logprobs), atol=2e-5)
    real = np.arange(c_ref["k"].shape[2])[None, :] < np.asarray(got.lengths)[:, None]  # [R, S] written slots
    for n in ("k", "v"):
        np.testing.assert_allclose(np.asarray(c_got[n])[:, real], np.asarray(c_ref[n])[:, real], atol=2e-5)


def test_long_prompt_prefill_on_an_explicit_mesh(eight_devices):
    from prs.parallel.sharding import make_mesh

    dense = M.ModelConfig.preset("tiny", vocab_size=97, prefill_flash_from=None)
    flash = dataclasses.replace(dense, prefill_flash_from=16, prefill_block=8)
    params = M.init_params(dense, jax.random.PRNGKey(5))
    tokens, lengths = _rows(dense, R=6, P=32)
    tokens, lengths = jnp.concatenate([tokens, tokens[:2]]), jnp.concatenate([lengths, lengths[:2]])
    scfg = S.SamplerConfig(max_new_tokens=7, temperature=0.0, buckets=(32,))
    key = jax.random.PRNGKey(2)
    ref = S.sample(params, tokens, lengths, key, cfg=dense, scfg=scfg)
    for mesh in (make_mesh(eight_devices, data=1, fsdp=8, tensor=1), make_mesh(eight_devices, data=1, fsdp=4, tensor=2)):
        got = S.sample(params, tokens, lengths, key, cfg=flash, scfg=scfg, mesh=mesh)
        np.testing.assert_array_equal(S.all_rows_on_host(got.tokens), np.asarray(ref.tokens))
        np.testing.assert_allclose(S.all_rows_on_host(got.logprobs), np.asarray(ref.logprobs), atol=2e-5)
