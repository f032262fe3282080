"""The rollout-engine contract (prs.rollout.engine) on the jax engine, against independent references:
rows built by hand, a full forward pass's log-softmax, the sampler called directly, and the host
assembly ``result_from_rows`` (what the vLLM engine uses) rebuilt from the sampler's own output."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.models import qwen3 as M
from prs.models import sampler as S
from prs.rollout import ENGINES, JaxEngine, RolloutEngine, join_prefix, make_engine, result_from_rows
from prs.rollout.engine import resume_rows, row_seeds

CFG = M.ModelConfig.preset("tiny")
FWD = jax.jit(M.forward, static_argnames=("cfg",))
PLEN = np.array([3, 5, 2, 4])
CLEN = np.array([2, 0, 4, 1])
SCFG = S.SamplerConfig(max_new_tokens=6, temperature=1.0, eos_id=5, pad_id=0, buckets=(8, 16))


@pytest.fixture(scope="module")
def params():
    return M.init_params(CFG, jax.random.key(0), std=0.3)


@pytest.fixture(scope="module")
def engine(params):
    eng = make_engine("jax", cfg=CFG, params=params)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    prompts = rng.integers(6, CFG.vocab_size, (4, 5)).astype(np.int32)
    prefixes = rng.integers(6, CFG.vocab_size, (4, 4)).astype(np.int32)
    return prompts, prefixes


def test_engine_is_a_rollout_engine(engine):
    assert isinstance(engine, RolloutEngine) and engine.name == "jax" and ENGINES == ("jax", "vllm")


def test_join_prefix_by_hand(inputs):
    prompts, prefixes = inputs
    rows, lengths = join_prefix(prompts, PLEN, prefixes, CLEN, pad_id=0)
    assert lengths.tolist() == (PLEN + CLEN).tolist() and rows.shape == (4, int((PLEN + CLEN).max()))
    for r in range(4):
        want = list(prompts[r, :PLEN[r]]) + list(prefixes[r, :CLEN[r]])
        assert rows[r, :lengths[r]].tolist() == want and not rows[r, lengths[r]:].any()
    same, same_len = join_prefix(prompts, PLEN)
    assert same is not None and (same == prompts).all() and (same_len == PLEN).all()
    with pytest.raises(ValueError, match="prefix_lengths must lie in"):
        join_prefix(prompts, PLEN, prefixes, np.array([0, 0, 5, 0]))


def test_prefix_is_returned_verbatim_with_policy_mask_zero(engine, inputs, params):
    prompts, prefixes = inputs
    ro = engine.generate(prompts, PLEN, prefixes=prefixes, prefix_lengths=CLEN, key=jax.random.key(3), scfg=SCFG)
    tokens, mask, lengths = np.asarray(ro.tokens), np.asarray(ro.policy_mask), np.asarray(ro.lengths)
    assert tokens.shape == (4, 8 + 6)
    for r in range(4):
        a = PLEN[r] + CLEN[r]
        assert tokens[r, :PLEN[r]].tolist() == prompts[r, :PLEN[r]].tolist()
        assert tokens[r, PLEN[r]:a].tolist() == prefixes[r, :CLEN[r]].tolist()
        assert not mask[r, :a].any() and mask[r, a:lengths[r]].all() and not mask[r, lengths[r]:].any()
    assert (np.asarray(ro.prompt_lengths) == PLEN + CLEN).all()
    # the same rows through the sampler directly: the same rollout
    rows, rl = join_prefix(prompts, PLEN, prefixes, CLEN)
    ref = S.sample(params, rows, rl, jax.random.key(3), cfg=CFG, scfg=SCFG)
    for got, want in zip(jax.tree.leaves(ro), jax.tree.leaves(ref)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_logprobs_equal_the_forward_pass(engine, inputs, params):
    prompts, prefixes = inputs
    ro = engine.generate(prompts, PLEN, prefixes=prefixes, prefix_lengths=CLEN, key=jax.random.key(4), scfg=SCFG)
    logits = np.asarray(FWD(params, ro.tokens, cfg=CFG, positions=ro.positions, valid=ro.valid), np.float64)
    lp = logits - logits.max(-1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    tok = np.asarray(ro.tokens)
    want = np.take_along_axis(lp[:, :-1], tok[:, 1:, None], axis=-1)[..., 0]  # [R, L-1]
    m = np.asarray(ro.policy_mask)[:, 1:]
    np.testing.assert_allclose(np.asarray(ro.logprobs)[:, 1:][m], want[m], atol=2e-5)
    np.testing.assert_array_equal(np.asarray(ro.sampling_logprobs), np.asarray(ro.logprobs))  # q = p


def test_distinct_samples_per_row_and_budget(engine):
    prompt = np.tile(np.array([[7, 8, 9]], np.int32), (8, 1))
    scfg = S.SamplerConfig(max_new_tokens=6, temperature=1.0, pad_id=0, buckets=(8,))
    budget = np.array([6, 6, 6, 6, 6, 6, 2, 1], np.int32)
    ro = engine.generate(prompt, np.full(8, 3), key=jax.random.key(5), scfg=scfg, budget=budget)
    gen = np.asarray(ro.tokens)[:, 3:9]
    assert len({tuple(g) for g in gen[:6]}) >= 5  # identical inputs, independent streams
    assert np.asarray(jnp.sum(ro.policy_mask, axis=1)).tolist()[6:] == [2, 1]
    with pytest.raises(ValueError, match="budget must lie in"):
        engine.generate(prompt, np.full(8, 3), key=jax.random.key(5), scfg=scfg, budget=np.full(8, 7))
    seeds = row_seeds(jax.random.key(5), 8)
    assert len(set(seeds.tolist())) == 8 and (row_seeds(jax.random.key(5), 3) == seeds[:3]).all()


def test_result_from_rows_rebuilds_the_sampler_output(engine, inputs, params):
    """The host assembly the vLLM engine uses, fed the jax sampler's generated ids and log-probs,
    gives the sampler's ``Rollout`` field for field (greedy and sampled, stops and budgets)."""
    prompts, prefixes = inputs
    rows, rl = join_prefix(prompts, PLEN, prefixes, CLEN)
    for scfg in (SCFG, S.SamplerConfig(max_new_tokens=6, temperature=0.0, eos_id=5, pad_id=0, buckets=(8, 16))):
        ro = engine.generate(rows, rl, key=jax.random.key(6), scfg=scfg, budget=np.array([6, 3, 6, 1]))
        mask, tok, lp = (np.asarray(x) for x in (ro.policy_mask, ro.tokens, ro.logprobs))
        got = result_from_rows(rows, rl, [tok[r][mask[r]] for r in range(4)], [lp[r][mask[r]] for r in range(4)],
                               scfg=scfg)
        for name, want in ro.__dict__.items():
            np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(want), err_msg=name)


def test_continuous_engine_gives_the_same_tokens(params, inputs):
    prompts, prefixes = inputs
    a = JaxEngine(CFG)
    b = JaxEngine(CFG, continuous_slots=2)
    for e in (a, b):
        e.update_params(params)
    ra, rb = (e.generate(prompts, PLEN, prefixes=prefixes, prefix_lengths=CLEN, key=jax.random.key(7), scfg=SCFG)
              for e in (a, b))
    np.testing.assert_array_equal(np.asarray(ra.tokens), np.asarray(rb.tokens))
    np.testing.assert_allclose(np.asarray(ra.logprobs), np.asarray(rb.logprobs), atol=1e-5)


def test_append_and_resume_is_the_samplers(engine, params, inputs):
    prompts, _ = inputs
    scfg = S.SamplerConfig(max_new_tokens=4, temperature=1.0, stop_ids=(5,), pad_id=0, buckets=(8,))
    ro = engine.generate(prompts, PLEN, key=jax.random.key(8), scfg=scfg)
    obs, ol = np.full((4, 2), 9, np.int32), np.array([2, 0, 1, 2])
    got = engine.append_and_resume(ro, obs, ol, key=jax.random.key(9), scfg=scfg)
    want = S.append_and_resume(params, ro, obs, ol, jax.random.key(9), cfg=CFG, scfg=scfg)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert np.asarray(got.tokens).shape == (4, 8 + 4 + 2 + 4)
    # the host assembly of a resumed turn (the vLLM engine's) from the new turn's ids: the same Rollout
    L0 = np.asarray(ro.tokens).shape[1]
    new = np.asarray(got.policy_mask) & (np.arange(L0 + 2 + 4)[None, :] >= np.asarray(ro.lengths)[:, None])
    tok, lp = np.asarray(got.tokens), np.asarray(got.logprobs)
    again = resume_rows(ro, obs, ol, [tok[r][new[r]] for r in range(4)], [lp[r][new[r]] for r in range(4)], scfg=scfg)
    for name, w in got.__dict__.items():
        np.testing.assert_array_equal(np.asarray(getattr(again, name)), np.asarray(w), err_msg=name)


def test_kept_state_is_the_samplers_cache_and_a_mesh_pads_rows_it_does_not_divide(engine, params, inputs,
                                                                                  eight_devices):
    """``keep_state``: the jax engine's state is the KV cache ``sampler.sample(return_cache=True)``
    hands back, and a resume with it is ``sampler.append_and_resume(cache=...)``, bit for bit. On an
    8-way mesh the 4 rows are padded to 8 (the state keeps the padding rows, the resume pads the
    rollout again): the same tokens as one device."""
    from prs.parallel.sharding import make_mesh

    prompts, _ = inputs
    scfg = S.SamplerConfig(max_new_tokens=4, temperature=1.0, stop_ids=(5,), pad_id=0, buckets=(8,))
    obs, ol = np.full((4, 2), 9, np.int32), np.array([2, 0, 1, 2])
    ro, st = engine.generate(prompts, PLEN, key=jax.random.key(8), scfg=scfg, keep_state=True)
    want_ro, cache = S.sample(params, prompts, PLEN, jax.random.key(8), cfg=CFG, scfg=scfg, return_cache=True)
    for g, w in zip(jax.tree.leaves((ro, st)), jax.tree.leaves((want_ro, cache))):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    got, st = engine.append_and_resume(ro, obs, ol, key=jax.random.key(9), scfg=scfg, state=st, keep_state=True)
    want, cache = S.append_and_resume(params, want_ro, obs, ol, jax.random.key(9), cfg=CFG, scfg=scfg, cache=cache,
                                      return_cache=True)
    for g, w in zip(jax.tree.leaves((got, st)), jax.tree.leaves((want, cache))):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))

    meng = JaxEngine(CFG, mesh=make_mesh(eight_devices, data=8))
    meng.update_params(params)
    r, s = meng.generate(prompts, PLEN, key=jax.random.key(8), scfg=scfg, keep_state=True)
    assert s["k"].shape[1] == 8 and np.asarray(r.tokens).shape[0] == 4  # the state keeps the 4 padding rows
    r, s = meng.append_and_resume(r, obs, ol, key=jax.random.key(9), scfg=scfg, state=s, keep_state=True)
    for name in ("tokens", "policy_mask", "lengths", "finished", "stop_token"):
        np.testing.assert_array_equal(np.asarray(getattr(r, name)), np.asarray(getattr(got, name)), err_msg=name)
    np.testing.assert_allclose(np.asarray(r.logprobs), np.asarray(got.logprobs), atol=1e-5)


def test_bad_engine_and_missing_params():
    with pytest.raises(ValueError, match="unknown rollout engine 'sglang'; choose from"):
        make_engine("sglang", cfg=CFG)
    with pytest.raises(ValueError, match="no parameters yet"):
        JaxEngine(CFG).generate(np.ones((1, 2), np.int32), np.array([2]), key=jax.random.key(0), scfg=SCFG)
    with pytest.raises(ValueError, match="continuous_slots needs mesh=None"):
        JaxEngine(CFG, mesh=object(), continuous_slots=2)


class _FakeLLM:
    """vLLM's ``LLM.generate`` as ``VLLMEngine._run`` calls it (no vLLM needed): records each request's
    seed and answers every request with the ids ``[7, 5]`` (5 = the stop id) at log-prob -1."""

    def __init__(self):
        self.seeds = []

    def generate(self, prompts, params, use_tqdm=False):
        import types

        self.seeds.append([p.seed for p in params])
        lp = types.SimpleNamespace(logprob=-1.0)
        out = types.SimpleNamespace(token_ids=[7, 5], logprobs=[{7: lp}, {5: lp}])
        return [types.SimpleNamespace(outputs=[out]) for _ in prompts]


def test_vllm_resume_seeds_each_row_by_its_index_not_its_rank_among_live_rows():
    """The per-row-stream contract (module docstring of prs.rollout.engine) for the vLLM engine's resume,
    without vLLM (a fake ``LLM``): resumed row r's seed is ``row_seeds(key, R)[r]``, whichever other rows
    resume with it (issue 45, item 6: it was row r's rank among the live rows)."""
    import types

    from prs.rollout.vllm_engine import VLLMEngine

    eng = object.__new__(VLLMEngine)
    eng.cfg, eng.max_model_len, eng.llm = CFG, 64, _FakeLLM()
    eng._vllm = types.SimpleNamespace(SamplingParams=lambda **kw: types.SimpleNamespace(**kw))
    key = jax.random.key(3)
    rows = np.arange(6, 6 + 4 * 3, dtype=np.int32).reshape(4, 3)
    ro = eng.generate(rows, np.array([3, 2, 3, 1]), key=jax.random.key(1), scfg=SCFG)
    obs = np.full((4, 2), 9, np.int32)
    want = row_seeds(key, 4)
    for olen in ([0, 2, 0, 1], [0, 0, 0, 2], [1, 1, 1, 1]):
        eng.append_and_resume(ro, obs, np.array(olen), key=key, scfg=SCFG)
        live = np.flatnonzero(np.array(olen))
        assert eng.llm.seeds[-1] == want[live].tolist(), olen
    assert eng.llm.seeds[0] == row_seeds(jax.random.key(1), 4).tolist()  # generate: row r's seed too
