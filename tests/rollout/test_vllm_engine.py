"""The vLLM rollout engine (prs.rollout.vllm_engine) against the jax engine and the prs forward pass,
on a tiny random *tied* Qwen3 (the case vLLM's in-place reload gets wrong when the model is loaded
tied; the engine loads it untied). One engine per module: vLLM starts slowly (~1-2 min on CPU).
Runs only where vLLM is importable (the ``.ci/vllm`` venv); untied weights: tests/rollout/test_vllm_engine_untied.py.
"""
import dataclasses

import pytest

pytest.importorskip("vllm", reason="vLLM not installed (the prs[vllm] extra; .ci/vllm builds a venv with it)")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from prs.models import qwen3 as M  # noqa: E402
from prs.models import sampler as S  # noqa: E402
from prs.rollout import JaxEngine, RolloutEngine, make_engine  # noqa: E402

# head_dim 32: vLLM's CPU attention needs >= 32
CFG = M.ModelConfig(vocab_size=128, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, d_ff=128,
                    rope_theta=10_000.0, tie_embeddings=True)
STD = 0.15
GREEDY = S.SamplerConfig(max_new_tokens=8, temperature=0.0, eos_id=3, pad_id=0, buckets=(16, 32))
PLAIN = dataclasses.replace(GREEDY, temperature=1.0)
FWD = jax.jit(M.forward, static_argnames=("cfg",))


def _params(seed, cfg=CFG):
    return M.init_params(cfg, jax.random.key(seed), std=STD)


@pytest.fixture(scope="module")
def engine():
    eng = make_engine("vllm", cfg=CFG, params=_params(0), max_model_len=128)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def jax_engine():
    return JaxEngine(CFG)


def _inputs(R=6, seed=1):
    rng = np.random.default_rng(seed)
    plen = rng.integers(3, 9, R)
    clen = rng.integers(0, 6, R)
    return (rng.integers(4, CFG.vocab_size, (R, 8)).astype(np.int32), plen,
            rng.integers(4, CFG.vocab_size, (R, 6)).astype(np.int32), clen)


def _generated(ro):
    tok, m = np.asarray(ro.tokens), np.asarray(ro.policy_mask)
    return [tok[r][m[r]].tolist() for r in range(tok.shape[0])]


def test_is_a_rollout_engine(engine):
    assert isinstance(engine, RolloutEngine) and engine.name == "vllm"


def test_prefix_verbatim_policy_mask_zero_and_greedy_equals_jax(engine, jax_engine):
    engine.update_params(_params(0))
    jax_engine.update_params(_params(0))
    prompts, plen, pre, clen = _inputs()
    kw = dict(prefixes=pre, prefix_lengths=clen, key=jax.random.key(0), scfg=GREEDY)
    ro = engine.generate(prompts, plen, **kw)
    ref = jax_engine.generate(prompts, plen, **kw)
    tok, mask = np.asarray(ro.tokens), np.asarray(ro.policy_mask)
    assert tok.shape == np.asarray(ref.tokens).shape
    for r in range(len(plen)):
        a = plen[r] + clen[r]
        assert tok[r, :plen[r]].tolist() == prompts[r, :plen[r]].tolist()
        assert tok[r, plen[r]:a].tolist() == pre[r, :clen[r]].tolist()
        assert not mask[r, :a].any()
    assert _generated(ro) == _generated(ref)
    for name in ("tokens", "policy_mask", "valid", "positions", "lengths", "prompt_lengths", "finished", "stop_token"):
        np.testing.assert_array_equal(np.asarray(getattr(ro, name)), np.asarray(getattr(ref, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(ro.logprobs), np.asarray(ref.logprobs), atol=1e-4)


def test_update_params_in_place_equals_a_fresh_engine(engine, jax_engine):
    """After pushing new weights the greedy rollouts are those of the new weights (the jax engine on
    them, which a fresh engine on those weights also equals: greedy above); the tied LM head moved too."""
    prompts, plen, pre, clen = _inputs(seed=2)
    kw = dict(prefixes=pre, prefix_lengths=clen, key=jax.random.key(1), scfg=GREEDY)
    engine.update_params(_params(0))
    before = _generated(engine.generate(prompts, plen, **kw))
    new = _params(5)
    engine.update_params(new)
    jax_engine.update_params(new)
    after = engine.generate(prompts, plen, **kw)
    assert _generated(after) == _generated(jax_engine.generate(prompts, plen, **kw))
    assert _generated(after) != before
    assert engine.last_sync_s > 0
    # only the embedding changes (tied: also the LM head): still the jax engine's tokens
    emb = dict(new, embed_tokens=new["embed_tokens"] * 1.5)
    engine.update_params(emb)
    jax_engine.update_params(emb)
    np.testing.assert_array_equal(np.asarray(engine.generate(prompts, plen, **kw).tokens),
                                  np.asarray(jax_engine.generate(prompts, plen, **kw).tokens))


def test_sampled_logprobs_equal_the_prs_forward(engine):
    p = _params(3)
    engine.update_params(p)
    prompts, plen, pre, clen = _inputs(R=8, seed=3)
    ro = engine.generate(prompts, plen, prefixes=pre, prefix_lengths=clen, key=jax.random.key(2), scfg=PLAIN)
    logits = np.asarray(FWD(p, ro.tokens, cfg=CFG, positions=ro.positions, valid=ro.valid), np.float64)
    lp = logits - logits.max(-1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    tok = np.asarray(ro.tokens)
    want = np.take_along_axis(lp[:, :-1], tok[:, 1:, None], axis=-1)[..., 0]
    m = np.asarray(ro.policy_mask)[:, 1:]
    assert m.sum() >= 8
    np.testing.assert_allclose(np.asarray(ro.logprobs)[:, 1:][m], want[m], atol=1e-4)
    np.testing.assert_array_equal(np.asarray(ro.sampling_logprobs), np.asarray(ro.logprobs))


def test_distinct_samples_per_row_reproducible_per_key_and_budgets(engine):
    engine.update_params(_params(4))
    prompt = np.tile(np.array([[7, 8, 9, 10]], np.int32), (8, 1))
    budget = np.array([8, 8, 8, 8, 8, 8, 2, 1], np.int32)
    scfg = dataclasses.replace(PLAIN, eos_id=None)
    a = engine.generate(prompt, np.full(8, 4), key=jax.random.key(3), scfg=scfg, budget=budget)
    b = engine.generate(prompt, np.full(8, 4), key=jax.random.key(3), scfg=scfg, budget=budget)
    c = engine.generate(prompt, np.full(8, 4), key=jax.random.key(4), scfg=scfg, budget=budget)
    ga = _generated(a)
    assert len({tuple(g) for g in ga[:6]}) >= 5, ga  # one shared seed would make these equal
    assert ga == _generated(b) and ga != _generated(c)
    assert [len(g) for g in ga] == [8] * 6 + [2, 1]
    assert np.asarray(a.truncated).all() and not np.asarray(a.finished).any()


def test_a_batch_larger_than_one_scheduler_step(engine):
    """More prompt tokens than vLLM schedules in one step (4096 on CPU): seeded rows must not be
    prefilled in chunks (vLLM 0.32's CPU generator cannot be rewound; it raised RuntimeError)."""
    engine.update_params(_params(7))
    rng = np.random.default_rng(7)
    prompts = rng.integers(4, CFG.vocab_size, (96, 60)).astype(np.int32)
    scfg = dataclasses.replace(PLAIN, eos_id=None, max_new_tokens=2, buckets=(64,))
    ro = engine.generate(prompts, np.full(96, 60), key=jax.random.key(8), scfg=scfg)
    assert int(np.asarray(ro.policy_mask).sum()) == 96 * 2


def test_stop_token_kept_and_resume_equals_jax(engine, jax_engine):
    p = _params(6)
    engine.update_params(p)
    jax_engine.update_params(p)
    prompts, plen, _, _ = _inputs(R=4, seed=6)
    # the stop id: each row's most likely 3rd greedy token, so some rows stop early
    first = jax_engine.generate(prompts, plen, key=jax.random.key(5), scfg=GREEDY)
    stop = int(_generated(first)[0][2])
    scfg = dataclasses.replace(GREEDY, eos_id=None, stop_ids=(stop,), max_new_tokens=6)
    ro = engine.generate(prompts, plen, key=jax.random.key(5), scfg=scfg)
    ref = jax_engine.generate(prompts, plen, key=jax.random.key(5), scfg=scfg)
    assert _generated(ro) == _generated(ref) and _generated(ro)[0][-1] == stop and bool(ro.finished[0])
    obs, ol = np.full((4, 3), 11, np.int32), np.array([3, 0, 2, 1])
    got = engine.append_and_resume(ro, obs, ol, key=jax.random.key(6), scfg=scfg)
    want = jax_engine.append_and_resume(ref, obs, ol, key=jax.random.key(6), scfg=scfg)
    for name in ("tokens", "policy_mask", "valid", "lengths", "finished", "truncated", "stop_token"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(got.logprobs), np.asarray(want.logprobs), atol=1e-4)


def test_refuses_adjusted_sampling_and_long_rows(engine):
    prompt = np.ones((1, 3), np.int32)
    with pytest.raises(ValueError, match="temperature=0.7.*raw policy"):
        engine.generate(prompt, np.array([3]), key=jax.random.key(0), scfg=dataclasses.replace(PLAIN, temperature=0.7))
    with pytest.raises(ValueError, match="exceeds max_model_len=128"):
        engine.generate(prompt, np.array([3]), key=jax.random.key(0),
                        scfg=dataclasses.replace(PLAIN, max_new_tokens=200))
