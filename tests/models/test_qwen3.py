"""Tests for prs.models.qwen3: an independent numpy Qwen3 forward, cached decode == full forward, masks."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.models import qwen3 as M
from prs.models.hf import load_hf_state_dict

CFG = M.ModelConfig.preset("tiny")
CFG_MHA_UNTIED = M.ModelConfig.preset("tiny", n_kv_heads=4, tie_embeddings=False, qk_norm=False)


FWD = jax.jit(M.forward, static_argnames=("cfg",))


def _params(cfg, seed=0):
    # std 0.3: large enough that attention patterns and logits are far from uniform.
    return M.init_params(cfg, jax.random.key(seed), std=0.3)


# ---------------------------------------------------------------- independent numpy reference


def _np_rms(x, g, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * g


def _np_rope(x, pos, theta):
    # x: [T, H] one head; HF: cos/sin of cat(freqs, freqs), rotate_half = cat(-x2, x1)
    H = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, H, 2) / H)
    ang = np.concatenate([np.outer(pos, inv)] * 2, axis=-1)
    rot = np.concatenate([-x[:, H // 2:], x[:, : H // 2]], axis=-1)
    return x * np.cos(ang) + rot * np.sin(ang)


def _to_hf(params, cfg):
    """Our stacked [in, out] layout -> a Hugging Face Qwen3 state_dict ([out, in] per layer)."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)
    sd = {"model.embed_tokens.weight": p["embed_tokens"], "model.norm.weight": p["norm"]}
    if not cfg.tie_embeddings:
        sd["lm_head.weight"] = p["lm_head"].T
    lay = p["layers"]
    for i in range(cfg.n_layers):
        pre = f"model.layers.{i}."
        sd[pre + "input_layernorm.weight"] = lay["input_layernorm"][i]
        sd[pre + "post_attention_layernorm.weight"] = lay["post_attention_layernorm"][i]
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            sd[pre + f"self_attn.{n}.weight"] = lay[n][i].T
        if cfg.qk_norm:
            sd[pre + "self_attn.q_norm.weight"] = lay["q_norm"][i]
            sd[pre + "self_attn.k_norm.weight"] = lay["k_norm"][i]
        for n in ("gate_proj", "up_proj", "down_proj"):
            sd[pre + f"mlp.{n}.weight"] = lay[n][i].T
    return sd


def _np_forward(sd, tokens, cfg, valid):
    """Per-row, per-head loops in float64 over a HF-named state_dict (nn.Linear: y = x Wᵀ),
    written from the Qwen3 equations / HF modeling_qwen3 (not from prs.models.qwen3)."""
    R, T = tokens.shape
    H, K, Kv = cfg.head_dim, cfg.n_heads, cfg.n_kv_heads
    out = np.zeros((R, T, cfg.vocab_size))
    for r in range(R):
        pos = np.maximum(np.cumsum(valid[r]) - 1, 0)
        h = sd["model.embed_tokens.weight"][tokens[r]]
        for l in range(cfg.n_layers):
            w = lambda n: sd[f"model.layers.{l}.{n}.weight"]  # noqa: E731
            a = _np_rms(h, w("input_layernorm"), cfg.rms_norm_eps)
            q_all, k_all, v_all = a @ w("self_attn.q_proj").T, a @ w("self_attn.k_proj").T, a @ w("self_attn.v_proj").T
            heads = []
            for j in range(K):
                kv = j // (K // Kv)  # repeat_kv
                q, k, v = q_all[:, j * H:(j + 1) * H], k_all[:, kv * H:(kv + 1) * H], v_all[:, kv * H:(kv + 1) * H]
                if cfg.qk_norm:
                    q = _np_rms(q, w("self_attn.q_norm"), cfg.rms_norm_eps)
                    k = _np_rms(k, w("self_attn.k_norm"), cfg.rms_norm_eps)
                q, k = _np_rope(q, pos, cfg.rope_theta), _np_rope(k, pos, cfg.rope_theta)
                s = q @ k.T / np.sqrt(H)
                allowed = np.tril(np.ones((T, T), bool)) & valid[r][None, :]
                s = np.where(allowed, s, -np.inf)
                s = s - s.max(axis=-1, keepdims=True)
                e = np.where(allowed, np.exp(s), 0.0)
                heads.append(e / np.maximum(e.sum(-1, keepdims=True), 1e-300) @ v)
            h = h + np.concatenate(heads, axis=-1) @ w("self_attn.o_proj").T
            m = _np_rms(h, w("post_attention_layernorm"), cfg.rms_norm_eps)
            g = m @ w("mlp.gate_proj").T
            h = h + ((g / (1 + np.exp(-g))) * (m @ w("mlp.up_proj").T)) @ w("mlp.down_proj").T
        hf = _np_rms(h, sd["model.norm.weight"], cfg.rms_norm_eps)
        out[r] = hf @ (sd["model.embed_tokens.weight"] if cfg.tie_embeddings else sd["lm_head.weight"]).T
    return out


@pytest.mark.parametrize("cfg", [CFG, CFG_MHA_UNTIED], ids=["gqa_tied_qknorm", "mha_untied"])
def test_forward_matches_numpy_reference(cfg):
    params = _params(cfg)
    tokens = np.asarray(jax.random.randint(jax.random.key(1), (3, 7), 0, cfg.vocab_size))
    lengths = np.array([7, 4, 1])
    valid = np.arange(7)[None, :] < lengths[:, None]
    got = np.asarray(FWD(params, jnp.asarray(tokens), cfg=cfg, valid=jnp.asarray(valid)))
    want = _np_forward(_to_hf(params, cfg), tokens, cfg, valid)
    np.testing.assert_allclose(np.where(valid[..., None], got, 0), np.where(valid[..., None], want, 0),
                               atol=1e-4, rtol=1e-4)
    assert np.all(np.isfinite(got))  # padded positions too


@pytest.mark.parametrize("cfg", [CFG, CFG_MHA_UNTIED], ids=["gqa_tied_qknorm", "mha_untied"])
def test_load_hf_state_dict_inverts_hf_layout(cfg):
    params = _params(cfg)
    sd = _to_hf(params, cfg)
    if cfg.tie_embeddings:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]  # tied checkpoints may carry it: ignored
    back = load_hf_state_dict({k: v.astype(np.float32) for k, v in sd.items()}, cfg)
    assert jax.tree.structure(back) == jax.tree.structure(params)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(a, b), back, params)
    with pytest.raises(ValueError, match="missing tensor 'model.norm.weight'"):
        load_hf_state_dict({k: v for k, v in sd.items() if k != "model.norm.weight"}, cfg)
    sd["model.layers.0.mlp.up_proj.weight"] = sd["model.layers.0.mlp.up_proj.weight"].T
    with pytest.raises(ValueError, match="up_proj"):
        load_hf_state_dict(sd, cfg)


def test_padding_does_not_change_valid_logits():
    params = _params(CFG)
    tokens = jax.random.randint(jax.random.key(2), (2, 9), 0, CFG.vocab_size)
    valid = jnp.arange(9)[None, :] < jnp.array([[5], [9]])
    a = FWD(params, tokens, cfg=CFG, valid=valid)
    other = jnp.where(valid, tokens, (tokens + 7) % CFG.vocab_size)  # change only the padding
    b = FWD(params, other, cfg=CFG, valid=valid)
    np.testing.assert_allclose(np.where(valid[..., None], a, 0), np.where(valid[..., None], b, 0), atol=1e-6)


def test_cached_decode_equals_full_forward():
    """prefill of ragged prompts, then decode_step token by token == forward logits (fp32, 1e-5)."""
    params = _params(CFG)
    R, T = 4, 12
    tokens = jax.random.randint(jax.random.key(3), (R, T), 0, CFG.vocab_size)
    full = FWD(params, tokens, cfg=CFG)  # [R, T, V]
    lengths = jnp.array([1, 3, 5, 6])
    logits, cache = jax.jit(M.prefill, static_argnames=("cfg", "max_len"))(
        params, tokens[:, :6], lengths, cfg=CFG, max_len=T)
    rows = jnp.arange(R)
    np.testing.assert_allclose(logits, full[rows, lengths - 1], atol=1e-5, rtol=1e-5)
    step = jax.jit(M.decode_step, static_argnames=("cfg",), donate_argnums=(1,))
    pos = lengths
    for _ in range(T - 6):
        logits, cache = step(params, cache, tokens[rows, pos], pos, cfg=CFG)
        np.testing.assert_allclose(logits, full[rows, pos], atol=1e-5, rtol=1e-5)
        pos = pos + 1


def test_bf16_compute_close_to_fp32():
    params = _params(CFG)
    tokens = jax.random.randint(jax.random.key(4), (2, 6), 0, CFG.vocab_size)
    a = FWD(params, tokens, cfg=CFG)
    b = FWD(params, tokens, cfg=M.ModelConfig.preset("tiny", dtype=jnp.bfloat16))
    assert b.dtype == jnp.float32
    np.testing.assert_allclose(a, b, atol=0.15 * float(jnp.abs(a).max()))


def test_presets_and_param_layout():
    small, tenm = M.ModelConfig.preset("small"), M.ModelConfig.preset("10m")
    n_small = M.param_count(jax.eval_shape(lambda: M.init_params(small, jax.random.key(0))))
    n_10m = M.param_count(jax.eval_shape(lambda: M.init_params(tenm, jax.random.key(0))))
    assert 1e6 <= n_small <= 3e6 and 8e6 <= n_10m <= 12e6, (n_small, n_10m)
    # Qwen3-0.6B: published 0.6B parameters (0.44B without embeddings); computed from shapes only.
    q06 = M.ModelConfig.preset("qwen3_0_6b")
    shapes = jax.eval_shape(lambda: M.init_params(q06, jax.random.key(0)))
    n = M.param_count(shapes)
    assert 0.55e9 < n < 0.65e9 and 0.40e9 < n - q06.vocab_size * q06.d_model < 0.48e9, n
    assert shapes["layers"]["q_proj"].shape == (28, 1024, 16 * 128)  # [L, D, K*H], i.e. HF weight.T
    assert shapes["layers"]["k_proj"].shape == (28, 1024, 8 * 128)
    assert "lm_head" not in shapes and "lm_head" in jax.eval_shape(
        lambda: M.init_params(M.ModelConfig.preset("qwen3_8b"), jax.random.key(0)))


def test_bad_inputs_raise():
    params = _params(CFG)
    with pytest.raises(ValueError, match="n_kv_heads"):
        M.ModelConfig.preset("tiny", n_kv_heads=3)
    with pytest.raises(ValueError, match="unknown name"):
        M.ModelConfig.preset("huge")
    with pytest.raises(ValueError, match="rank 2"):
        M.forward(params, jnp.zeros((5,), jnp.int32), cfg=CFG)
    with pytest.raises(ValueError, match="valid has shape"):
        M.forward(params, jnp.zeros((2, 5), jnp.int32), cfg=CFG, valid=jnp.ones((2, 4), bool))
    with pytest.raises(ValueError, match="exceeds the cache length"):
        M.prefill(params, jnp.zeros((2, 9), jnp.int32), jnp.array([3, 9]), cfg=CFG, max_len=8)
    with pytest.raises(ValueError, match="lengths has shape"):
        M.prefill(params, jnp.zeros((2, 4), jnp.int32), jnp.array([3, 4, 1]), cfg=CFG, max_len=8)
    cache = M.init_cache(CFG, 2, 8)
    with pytest.raises(ValueError, match="must both be"):
        M.decode_step(params, cache, jnp.zeros((2,), jnp.int32), jnp.zeros((3,), jnp.int32), cfg=CFG)
    with pytest.raises(ValueError, match="disagree"):
        M.decode_step(params, cache, jnp.zeros((3,), jnp.int32), jnp.zeros((3,), jnp.int32), cfg=CFG)


def test_grad_through_forward_is_finite():
    params = _params(CFG)
    tokens = jax.random.randint(jax.random.key(5), (2, 5), 0, CFG.vocab_size)
    valid = jnp.array([[True] * 5, [True, False, False, False, False]])

    def loss(p):
        lp = jax.nn.log_softmax(M.forward(p, tokens, cfg=CFG, valid=valid))
        return -jnp.mean(jnp.take_along_axis(lp[:, :-1], tokens[:, 1:, None], -1))

    g = jax.jit(jax.grad(loss))(params)
    assert all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(g))
