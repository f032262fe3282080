"""Tests for prs.models.continuous (continuous batching) against the static sampler: the same requests
and key give row i of ``sample`` as request i (greedy and temperature 1, ragged prompts, rows that
stop unevenly on stop ids and on geometric per-request budgets), slots really are refilled (fewer
decode steps than static chunks of the same size), one compile per shape, and clear errors."""
import dataclasses

import jax
import numpy as np
import pytest

from prs.models import continuous as CB
from prs.models import qwen3 as M
from prs.models import sampler as S
from tests.models.test_sampler import _check_logprobs_against_forward

CFG = M.ModelConfig.preset("tiny")
N, P, T, SLOTS = 11, 8, 10, 3
STOPS = tuple(range(2, CFG.vocab_size, 9))  # 7 of 64 ids: rows also stop on a sampled stop token


@pytest.fixture(scope="module")
def params():
    return M.init_params(CFG, jax.random.key(0), std=0.3)


@pytest.fixture(scope="module")
def requests():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, P + 1, N).astype(np.int32)
    tokens = rng.integers(1, CFG.vocab_size, (N, P)).astype(np.int32)
    tokens = np.where(np.arange(P)[None] < lengths[:, None], tokens, 63)  # junk padding (must be ignored)
    budget = np.clip(rng.geometric(0.25, N), 1, T).astype(np.int32)  # mean ~4 of T=10
    return tokens, lengths, budget


FIELDS = ("tokens", "policy_mask", "valid", "positions", "prompt_lengths", "lengths", "finished", "truncated",
          "stop_token")


def _assert_same(a, b):
    assert a.tokens.shape == b.tokens.shape
    for f in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(a, f)), np.asarray(getattr(b, f)), err_msg=f)
    np.testing.assert_allclose(a.logprobs, b.logprobs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(a.sampling_logprobs, b.sampling_logprobs, rtol=0, atol=1e-5)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_continuous_equals_static_sampling_per_request(params, requests, temperature):
    tokens, lengths, budget = requests
    scfg = S.SamplerConfig(max_new_tokens=T, temperature=temperature, stop_ids=STOPS, buckets=(8, 16))
    static = S.sample(params, tokens, lengths, jax.random.key(7), cfg=CFG, scfg=scfg, budget=budget)
    cont, stats = CB.sample_continuous(params, tokens, lengths, jax.random.key(7), cfg=CFG, scfg=scfg, slots=SLOTS,
                                       budget=budget, return_stats=True)
    _assert_same(static, cont)
    _check_logprobs_against_forward(params, cont)  # and against the full forward, independently
    gen = np.asarray(cont.lengths - cont.prompt_lengths)  # [N]
    assert len(set(gen.tolist())) >= 3  # rows finish unevenly...
    assert np.asarray(cont.finished).any() and np.asarray(cont.truncated).any()  # ...on stop ids and budgets
    assert np.all(gen <= budget)
    # Slots were refilled: N - S requests prefilled into freed slots, and the loop ran fewer decode
    # steps than static batches of S rows (each runs until its longest row stops) and no fewer than
    # the tokens demand (every step generates at most S tokens).
    assert stats["refills"] == N - SLOTS
    static_steps = sum(int(c.max()) for c in np.split(gen, range(SLOTS, N, SLOTS)))
    assert -(-gen.sum() // SLOTS) <= stats["steps"] < static_steps


def test_one_slot_and_more_slots_than_requests_give_the_same_rollout(params, requests):
    """slots=1 (one row at a time) and slots > N (one static batch of N, no refill) agree with each
    other (and so with ``sample``, by the test above)."""
    tokens, lengths, budget = requests
    scfg = S.SamplerConfig(max_new_tokens=T, temperature=1.0, eos_id=STOPS[0], buckets=(8,))
    one, s1 = CB.sample_continuous(params, tokens, lengths, jax.random.key(3), cfg=CFG, scfg=scfg, slots=1,
                                   budget=budget, return_stats=True)
    wide, sw = CB.sample_continuous(params, tokens, lengths, jax.random.key(3), cfg=CFG, scfg=scfg, slots=N + 5,
                                    budget=budget, return_stats=True)
    _assert_same(one, wide)
    gen = np.asarray(one.lengths - one.prompt_lengths)
    assert s1 == {"steps": int(gen.sum()), "refills": N - 1}  # one row at a time: one step per token
    assert sw == {"steps": int(gen.max()), "refills": 0}  # all rows at once: the static loop


def test_one_compile_per_shape(params, requests):
    tokens, lengths, budget = requests
    scfg = S.SamplerConfig(max_new_tokens=T, temperature=1.0, stop_ids=STOPS, buckets=(8, 16))
    CB.sample_continuous(params, tokens, lengths, jax.random.key(1), cfg=CFG, scfg=scfg, slots=SLOTS, budget=budget)
    n0 = CB._continuous_jit._cache_size()
    # other prompts, lengths (width 7 -> bucket 8), budgets, key and row_chunk: the same compiled loop
    rng = np.random.default_rng(5)
    CB.sample_continuous(params, tokens[:, :7], rng.integers(1, 8, N), jax.random.key(2), cfg=CFG,
                         scfg=dataclasses.replace(scfg, row_chunk=4), slots=SLOTS, budget=rng.integers(1, T + 1, N))
    CB.sample_continuous(params, tokens, lengths, jax.random.key(3), cfg=CFG, scfg=scfg, slots=SLOTS)
    assert CB._continuous_jit._cache_size() == n0


def test_bad_inputs_raise_clear_errors(params, requests):
    tokens, lengths, budget = requests
    scfg = S.SamplerConfig(max_new_tokens=T, temperature=0.0, buckets=(8,))
    call = lambda **kw: CB.sample_continuous(params, kw.pop("tokens", tokens), kw.pop("lengths", lengths),
                                             jax.random.key(0), cfg=CFG, scfg=kw.pop("scfg", scfg),
                                             **({"slots": SLOTS} | kw))
    for bad in (0, -2, 2.5, True, None):
        with pytest.raises(ValueError, match="slots must be an integer >= 1"):
            call(slots=bad)
    with pytest.raises(ValueError, match=r"budget must lie in \[1, max_new_tokens=10\]"):
        call(budget=np.where(np.arange(N) == 3, 0, budget))
    with pytest.raises(ValueError, match=r"budget must be an int array of shape \(11,\)"):
        call(budget=budget[:4])
    with pytest.raises(ValueError, match="mesh must be None"):
        call(mesh=object())
    with pytest.raises(ValueError, match="attend_buckets must be None"):
        call(scfg=dataclasses.replace(scfg, attend_buckets=(16,)))
    with pytest.raises(ValueError, match=r"lengths for tokens must be in \[1, 8\]"):
        call(lengths=np.where(np.arange(N) == 0, 0, lengths))
    with pytest.raises(ValueError, match="at least one row"):
        call(tokens=tokens[:0], lengths=lengths[:0])
    with pytest.raises(ValueError, match="exceeds the cache length max_len=12"):
        call(scfg=dataclasses.replace(scfg, max_len=12))
