"""prs.models.hf against Hugging Face ``transformers`` (torch CPU): a tiny random Qwen3 / Qwen2 (q/k/v
biases) / Llama (plain and llama3 RoPE scaling) / Mistral saved with ``save_pretrained`` must give the
same logits in prs (full forward, cached decoding, greedy generation); sharded saves, model ids from
the local HF cache; safetensors I/O against the reference ``safetensors`` package; errors."""
import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.models import hf
from prs.models import qwen3 as M
from prs.models.sampler import SamplerConfig, sample

V, D, L, K, KV, H, F = 96, 64, 2, 4, 2, 16, 128
ARCHS = ["qwen3", "qwen2", "llama", "llama3", "mistral"]
# llama3 RoPE scaling whose three wavelength bands are all populated at H = 16, θ = 500 (wavelengths
# 6.3, 13.6, 29.6, 64, ...: < 32/4 unchanged, 8..32 smoothed, > 32 divided by the factor)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}


def _hf_model(arch: str, tmp_path, *, dtype=None):
    """A tiny random HF model (norm scales randomised too, so a missed norm shows) saved to disk."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(ARCHS.index(arch))
    common = dict(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L, num_attention_heads=K,
                  num_key_value_heads=KV, head_dim=H, max_position_embeddings=256, rope_theta=5_000.0,
                  initializer_range=0.15)
    if arch == "qwen3":
        cfg = transformers.Qwen3Config(tie_word_embeddings=True, **common)
        model = transformers.Qwen3ForCausalLM(cfg)
    elif arch == "qwen2":  # Qwen2Config has no head_dim: H = D / K
        cfg = transformers.Qwen2Config(tie_word_embeddings=True, **{k: v for k, v in common.items() if k != "head_dim"})
        model = transformers.Qwen2ForCausalLM(cfg)
    elif arch == "llama":
        cfg = transformers.LlamaConfig(tie_word_embeddings=False, **common)
        model = transformers.LlamaForCausalLM(cfg)
    elif arch == "llama3":
        common = {k: v for k, v in common.items() if k != "rope_theta"}
        cfg = transformers.LlamaConfig(tie_word_embeddings=False, rope_parameters={**LLAMA3, "rope_theta": 500.0},
                                       **common)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.MistralConfig(tie_word_embeddings=False, sliding_window=None, **common)
        model = transformers.MistralForCausalLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif name.endswith(".bias"):  # Qwen2's q/k/v biases (initialised to 0): a missed bias shows
                p.copy_(0.5 * torch.randn_like(p))
    model.eval()
    if dtype is not None:
        model = model.to(dtype)
    path = tmp_path / arch
    model.save_pretrained(path)
    if dtype is not None:  # the reference: the stored (rounded) weights, computed in fp32 (fresh RoPE buffers)
        model = type(model).from_pretrained(path, dtype=torch.float32).eval()
    return model, path


def _hf_logits(model, tokens):
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        return model(torch.as_tensor(np.asarray(tokens), dtype=torch.long)).logits.numpy()


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_match_transformers(arch, tmp_path):
    model, path = _hf_model(arch, tmp_path)
    cfg, params = hf.load_checkpoint(path)
    assert (cfg.vocab_size, cfg.d_model, cfg.n_layers, cfg.head_dim) == (V, D, L, H)
    assert cfg.qk_norm == (arch == "qwen3") and cfg.tie_embeddings == (arch in ("qwen3", "qwen2"))
    assert cfg.qkv_bias == (arch == "qwen2") and bool(cfg.rope_scaling) == (arch == "llama3")
    assert cfg.rope_theta == (500.0 if arch == "llama3" else 5_000.0)
    tokens = np.random.default_rng(0).integers(0, V, (3, 12)).astype(np.int32)
    ref = _hf_logits(model, tokens)  # [R, T, V]
    ours = np.asarray(M.forward(params, jnp.asarray(tokens), cfg=cfg))
    np.testing.assert_allclose(ours, ref, atol=2e-5, rtol=1e-5)
    if arch in ("qwen2", "llama3"):  # the family's own piece matters: without it the logits differ
        import dataclasses
        plain = dataclasses.replace(cfg, qkv_bias=False, rope_scaling=())
        drop = {"q_bias", "k_bias", "v_bias"}
        p2 = {**params, "layers": {n: x for n, x in params["layers"].items() if n not in drop}}
        assert np.abs(np.asarray(M.forward(p2, jnp.asarray(tokens), cfg=plain)) - ref).max() > 1e-2

    # cached decoding: prefill the first P tokens, then one token at a time
    P = 5
    logits, cache = M.prefill(params, jnp.asarray(tokens[:, :P]), jnp.full((3,), P, jnp.int32), cfg=cfg, max_len=16)
    np.testing.assert_allclose(np.asarray(logits), ref[:, P - 1], atol=2e-5, rtol=1e-5)
    step = jax.jit(lambda c, t, p: M.decode_step(params, c, t, p, cfg=cfg))
    for t in range(P, tokens.shape[1]):
        logits, cache = step(cache, jnp.asarray(tokens[:, t]), jnp.full((3,), t, jnp.int32))
        np.testing.assert_allclose(np.asarray(logits), ref[:, t], atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_generation_matches_transformers(arch, tmp_path):
    """The sampler (decode-weights layout: joined q/k/v and their biases) and the LM head of each
    family: greedy tokens equal transformers' greedy ``generate``."""
    torch = pytest.importorskip("torch")
    model, path = _hf_model(arch, tmp_path)
    cfg, params = hf.load_checkpoint(path)
    prompts = np.random.default_rng(1).integers(0, V, (2, 6)).astype(np.int64)
    with torch.no_grad():
        ref = model.generate(torch.as_tensor(prompts), max_new_tokens=10, do_sample=False, eos_token_id=None,
                             pad_token_id=0).numpy()
    scfg = SamplerConfig(max_new_tokens=10, temperature=0.0, buckets=None)
    ro = sample(params, prompts.astype(np.int32), np.full((2,), 6, np.int32), jax.random.key(0), cfg=cfg, scfg=scfg)
    np.testing.assert_array_equal(np.asarray(ro.tokens)[:, :16], ref)


def test_bf16_weights_fp32_compute(tmp_path):
    torch = pytest.importorskip("torch")
    model, path = _hf_model("qwen3", tmp_path, dtype=torch.bfloat16)
    assert json.loads((path / "config.json").read_text()).get("dtype", "bfloat16") == "bfloat16"
    cfg, params = hf.load_checkpoint(path, dtype=jnp.float32)
    assert cfg.param_dtype == jnp.bfloat16 and cfg.dtype == jnp.float32
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(params))
    tokens = np.random.default_rng(2).integers(0, V, (2, 10)).astype(np.int32)
    np.testing.assert_allclose(np.asarray(M.forward(params, jnp.asarray(tokens), cfg=cfg)),
                               _hf_logits(model, tokens), atol=3e-5, rtol=1e-5)


def _random_params(cfg, seed):
    """init_params with the q/k/v biases (zero at init) drawn too, so a lost bias shows."""
    params = M.init_params(cfg, jax.random.key(seed), std=0.2)
    for i, n in enumerate(("q_bias", "k_bias", "v_bias")):
        if n in params["layers"]:
            x = params["layers"][n]
            params["layers"][n] = 0.5 * jax.random.normal(jax.random.key(seed + 100 + i), x.shape, x.dtype)
    return params


@pytest.mark.parametrize("family", ["qwen3", "llama_untied", "qwen2", "llama3"])
def test_save_checkpoint_loads_in_transformers(family, tmp_path):
    """Export direction: prs params -> save_checkpoint -> transformers gives prs's logits, for each
    family config_to_hf names (Qwen3, Qwen2 with biases, Llama plain and with llama3 RoPE scaling)."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    kw = dict(qwen3=dict(tie_embeddings=True, qk_norm=True), llama_untied=dict(tie_embeddings=False, qk_norm=False),
              qwen2=dict(tie_embeddings=True, qk_norm=False, qkv_bias=True),
              llama3=dict(tie_embeddings=False, qk_norm=False, rope_theta=500.0, rope_scaling=LLAMA3))[family]
    cfg = M.ModelConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=K, n_kv_heads=KV, head_dim=H, d_ff=F, **kw)
    params = _random_params(cfg, 3)
    assert hf.save_checkpoint(tmp_path, params, cfg) == ["model.safetensors"]
    assert not (tmp_path / "model.safetensors.index.json").exists()  # fits one shard: as save_pretrained
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).float().eval()
    assert type(model).__name__ == {"qwen3": "Qwen3", "qwen2": "Qwen2"}.get(family, "Llama") + "ForCausalLM"
    tokens = np.random.default_rng(3).integers(0, V, (2, 20)).astype(np.int32)
    np.testing.assert_allclose(np.asarray(M.forward(params, jnp.asarray(tokens), cfg=cfg)),
                               _hf_logits(model, tokens), atol=2e-5, rtol=1e-5)
    cfg2, params2 = hf.load_checkpoint(tmp_path)
    assert cfg2 == cfg
    jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_sharded_save_has_an_index_transformers_reads(tmp_path):
    """``max_shard_size`` below the model's size: shards ``model-0000i-of-0000n.safetensors`` of at
    most that many bytes (a bigger tensor alone), an index whose weight_map covers every tensor once
    and whose total_size is the bytes written; transformers and load_checkpoint read it; a second save
    with one shard leaves no stale shard behind."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    cfg = M.ModelConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=K, n_kv_heads=KV, head_dim=H, d_ff=F,
                        tie_embeddings=False, qk_norm=False, qkv_bias=True)
    params = _random_params(cfg, 4)
    limit = 40_000  # bytes; the f32 [128, 64] MLP kernels are 32,768 each
    names = hf.save_checkpoint(tmp_path, params, cfg, max_shard_size="40KB")
    n = len(names)
    assert n > 3 and names == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    state = hf.to_hf_state_dict(params, cfg)
    assert sorted(index["weight_map"]) == sorted(state) and sorted(set(index["weight_map"].values())) == names
    assert index["metadata"]["total_size"] == sum(x.nbytes for x in state.values())
    for name in names:
        tensors = hf.read_safetensors(tmp_path / name)
        size = sum(x.nbytes for x in tensors.values())
        assert size <= limit or len(tensors) == 1
        assert all(index["weight_map"][k] == name for k in tensors)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).float().eval()
    tokens = np.random.default_rng(4).integers(0, V, (2, 9)).astype(np.int32)
    np.testing.assert_allclose(np.asarray(M.forward(params, jnp.asarray(tokens), cfg=cfg)),
                               _hf_logits(model, tokens), atol=2e-5, rtol=1e-5)
    jax.tree.map(np.testing.assert_array_equal, hf.load_checkpoint(tmp_path)[1], params)
    assert hf.save_checkpoint(tmp_path, params, cfg, max_shard_size="1GiB") == ["model.safetensors"]
    assert sorted(p.name for p in tmp_path.glob("model*")) == ["model.safetensors"]
    with pytest.raises(ValueError, match="max_shard_size='2 parsecs'"):
        hf.save_checkpoint(tmp_path, params, cfg, max_shard_size="2 parsecs")
    assert (hf.parse_size("2GB"), hf.parse_size("500MiB"), hf.parse_size(7)) == (2 * 10**9, 500 * 2**20, 7)


def test_safetensors_io_matches_reference_package(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(4)
    arrays = {"a": rng.normal(size=(3, 5)).astype(np.float32), "b": rng.integers(-9, 9, (7,)).astype(np.int64),
              "c.d": rng.normal(size=(2, 2, 2)).astype(np.float16), "e": np.zeros((0, 3), np.float32)}
    hf.write_safetensors(tmp_path / "ours.safetensors", arrays)
    theirs = st.load_file(str(tmp_path / "ours.safetensors"))
    st.save_file(arrays, str(tmp_path / "ref.safetensors"))
    ours = hf.read_safetensors(tmp_path / "ref.safetensors")
    for k, a in arrays.items():
        np.testing.assert_array_equal(theirs[k], a)
        np.testing.assert_array_equal(np.asarray(ours[k]), a)
        assert ours[k].dtype == a.dtype
    torch = pytest.importorskip("torch")
    import safetensors.torch as stt
    x = torch.randn(4, 6).to(torch.bfloat16)
    stt.save_file({"w": x}, str(tmp_path / "bf16.safetensors"))
    got = hf.read_safetensors(tmp_path / "bf16.safetensors")["w"]
    np.testing.assert_array_equal(np.asarray(got).astype(np.float32), x.float().numpy())


def _write_cfg(tmp_path, **changes):
    cfg = M.ModelConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=K, n_kv_heads=KV, head_dim=H, d_ff=F)
    hf.save_checkpoint(tmp_path, M.init_params(cfg, jax.random.key(0)), cfg)
    c = json.loads((tmp_path / "config.json").read_text())
    c.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(c))


@pytest.mark.parametrize("changes, match", [
    (dict(model_type="qwen2"), "missing tensor 'model.layers.0.self_attn.[qkv]_proj.bias'"),
    (dict(model_type="gpt2"), "model_type 'gpt2' is not supported; supported: qwen3, qwen2, llama, mistral$"),
    (dict(model_type=None, architectures=["GPT2LMHeadModel"]), "'GPT2LMHeadModel' is not supported; supported: "),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "yarn"),
    (dict(rope_parameters={"rope_type": "llama3", "rope_theta": 5e5}), "llama3' lacks"),
    (dict(attention_bias=True), "attention_bias"),
    (dict(hidden_act="gelu"), "gelu"),
    (dict(use_sliding_window=True, sliding_window=64), "sliding"),
    (dict(num_hidden_layers=3), "missing tensor 'model.layers.2"),
    (dict(intermediate_size=100), "has shape"),
])
def test_clear_errors(tmp_path, changes, match):
    _write_cfg(tmp_path, **changes)
    with pytest.raises(ValueError, match=match):
        hf.load_checkpoint(tmp_path)


def test_no_checkpoint_errors(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        hf.load_checkpoint(tmp_path)
    _write_cfg(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(ValueError, match="no \\*.safetensors"):
        hf.load_checkpoint(tmp_path)


@pytest.mark.parametrize("axis_types, family", [("auto", "qwen3"), ("explicit", "qwen3"), ("explicit", "qwen2")])
def test_sharded_load_over_mesh(tmp_path, eight_devices, axis_types, family):
    """Sharded load over 8 devices: every device holds 1/8 of each big kernel, read slice by slice
    from disk, and the forward pass equals the unsharded one. Auto mesh: the storage layout
    (``fsdp_shardings``, over a data x tensor mesh); Explicit mesh (``fsdp4_tp2``): the logical rules
    (``param_shardings``), the layout the model's explicit annotations run on."""
    cfg = M.ModelConfig(vocab_size=V, d_model=D, n_layers=L, n_heads=K, n_kv_heads=KV, head_dim=H, d_ff=F,
                        tie_embeddings=False, qk_norm=family == "qwen3", qkv_bias=family == "qwen2")
    params = _random_params(cfg, 5)
    hf.save_checkpoint(tmp_path, params, cfg)
    from prs.parallel.sharding import make_mesh
    mesh = (make_mesh(eight_devices, model_parallel=2, axis_types="auto") if axis_types == "auto"
            else make_mesh(eight_devices, fsdp=4, tensor=2))
    cfg2, sharded = hf.load_checkpoint(tmp_path, mesh=mesh)
    if axis_types == "explicit":
        from prs.parallel.sharding import param_shardings
        assert jax.tree.map(lambda x: x.sharding, sharded) == param_shardings(cfg2, mesh)
    for path, x in jax.tree_util.tree_leaves_with_path(sharded):
        shard = x.addressable_shards[0].data.shape
        if int(np.prod(x.shape)) >= 8 * 64:
            assert int(np.prod(shard)) * 8 == int(np.prod(x.shape)), (jax.tree_util.keystr(path), shard, x.shape)
            if jax.tree_util.keystr(path).startswith("['layers']"):
                assert shard[0] == L  # never split the scanned layer axis
        np.testing.assert_array_equal(np.asarray(x), np.asarray(jax.tree_util.tree_leaves_with_path(params)[
            [p for p, _ in jax.tree_util.tree_leaves_with_path(params)].index(path)][1]))
    tokens = jnp.asarray(np.random.default_rng(5).integers(0, V, (8, 7)), jnp.int32)
    with jax.set_mesh(mesh):  # under an Explicit mesh the layouts are in the types
        got = jax.jit(lambda p, t: M.forward(p, t, cfg=cfg2))(sharded, tokens)
    np.testing.assert_allclose(np.asarray(got), np.asarray(M.forward(params, tokens, cfg=cfg)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name, total, non_embedding, digits", [
    ("qwen3_0_6b", 0.6, 0.44, 2), ("qwen3_1_7b", 1.7, 1.4, 1), ("qwen3_4b", 4.0, 3.6, 1), ("qwen3_8b", 8.2, 6.95, 2),
])
def test_qwen3_presets_match_model_cards(name, total, non_embedding, digits):
    """Parameter counts (billions) of the presets the docs' memory figures use, against the Qwen3
    model cards ("Number of Parameters" / "(Non-Embedding)") at the cards' precision."""
    cfg = M.ModelConfig.preset(name)
    shapes = jax.eval_shape(lambda: M.init_params(cfg, jax.random.key(0)))
    n = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))
    emb = cfg.vocab_size * cfg.d_model * (1 if cfg.tie_embeddings else 2)
    assert round(n / 1e9, 1) == total
    assert round((n - emb) / 1e9, digits) == non_embedding


def test_llama3_rope_from_either_config_layout():
    """Llama 3.1's transformers-4 config.json (``rope_theta`` + ``rope_scaling``) and the
    transformers-5 one (``rope_parameters``) give the same ModelConfig; the original context length
    defaults to ``max_position_embeddings`` as transformers does."""
    d = dict(model_type="llama", vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
             num_attention_heads=K, max_position_embeddings=32)
    old = hf.config_from_hf({**d, "rope_theta": 500.0, "rope_scaling": dict(LLAMA3)})
    new = hf.config_from_hf({**d, "rope_parameters": {**LLAMA3, "rope_theta": 500.0}})
    short = {k: v for k, v in LLAMA3.items() if k != "original_max_position_embeddings"}
    assert old == new == hf.config_from_hf({**d, "rope_scaling": short, "rope_theta": 500.0})
    assert dict(new.rope_scaling) == LLAMA3 and new.rope_theta == 500.0
    with pytest.raises(ValueError, match="rope_scaling"):
        M.ModelConfig(**{**dataclasses.asdict(new), "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})


def test_architectures_names_the_family_without_model_type():
    d = dict(architectures=["Qwen2ForCausalLM"], vocab_size=V, hidden_size=D, intermediate_size=F,
             num_hidden_layers=L, num_attention_heads=K, num_key_value_heads=KV)
    cfg = hf.config_from_hf(d)
    assert cfg.qkv_bias and not cfg.qk_norm


@pytest.mark.parametrize("model_type", ["qwen3", "qwen2", "llama", "mistral"])
def test_absent_config_keys_take_transformers_defaults(model_type):
    """A config.json without head_dim / tie_word_embeddings / rope_theta / rms_norm_eps /
    num_key_value_heads reads as transformers' own config class reads it."""
    transformers = pytest.importorskip("transformers")
    d = dict(model_type=model_type, vocab_size=V, hidden_size=256, intermediate_size=F, num_hidden_layers=L,
             num_attention_heads=32)
    ref = transformers.AutoConfig.for_model(**d)
    if model_type == "mistral":
        d["sliding_window"] = None
    cfg = hf.config_from_hf(d)
    assert cfg.head_dim == getattr(ref, "head_dim", None) or ref.hidden_size // ref.num_attention_heads
    assert cfg.tie_embeddings == ref.tie_word_embeddings
    assert cfg.n_kv_heads == ref.num_key_value_heads and cfg.rms_norm_eps == ref.rms_norm_eps
    theta = (getattr(ref, "rope_parameters", None) or {}).get("rope_theta", getattr(ref, "rope_theta", None))
    assert cfg.rope_theta == theta


def test_model_id_from_the_local_hf_cache(tmp_path, monkeypatch):
    """``org/name`` resolves offline to its snapshot in ``$HF_HOME/hub`` (the layout huggingface_hub
    writes: ``models--org--name/refs/main`` -> ``snapshots/<commit>``): load_checkpoint, load_config
    and the tokenizer read it; an id that is not cached is one ValueError line naming the cache; a
    directory path still wins."""
    pytest.importorskip("huggingface_hub")
    pytest.importorskip("tokenizers")
    from prs.models.tokenizer import Tokenizer
    from prs.tasks.math_jsonl import make_tiny_checkpoint

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "home" / "hub" / "models--acme--tiny-qwen3"
    snap = repo / "snapshots" / commit
    make_tiny_checkpoint(snap, seed=1)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hf.resolve_checkpoint("acme/tiny-qwen3") == snap
    cfg, params = hf.load_checkpoint("acme/tiny-qwen3")
    cfg2, params2 = hf.load_checkpoint(snap)
    assert cfg == cfg2 == hf.load_config("acme/tiny-qwen3")
    jax.tree.map(np.testing.assert_array_equal, params, params2)
    assert Tokenizer.from_checkpoint("acme/tiny-qwen3").encode("1+1") == Tokenizer.from_checkpoint(snap).encode("1+1")
    with pytest.raises(ValueError, match=r"^checkpoint 'acme/absent' is neither a directory nor a model in the local "
                                         r"Hugging Face cache .*home/hub"):
        hf.load_checkpoint("acme/absent")
    monkeypatch.chdir(tmp_path)  # a relative directory of the same form is a path, not an id
    (tmp_path / "acme").mkdir()
    make_tiny_checkpoint(tmp_path / "acme" / "local", seed=2)
    assert hf.resolve_checkpoint("acme/local") == pathlib.Path("acme/local")
    assert hf.load_config("acme/local") == cfg
