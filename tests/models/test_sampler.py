"""Tests for prs.models.sampler against independent references: step-by-step full-forward argmax, numpy
top-k/top-p sets, a chi-square test of the sampling distribution, and the cache-free resume path."""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from prs.models import qwen3 as M
from prs.models import sampler as S
from prs.parallel.sharding import DATA_AXIS, make_mesh

CFG = M.ModelConfig.preset("tiny")
FWD = jax.jit(M.forward, static_argnames=("cfg",))
GREEDY = S.SamplerConfig(max_new_tokens=6, temperature=0.0, pad_id=0, buckets=(8, 16))
# Rows: prompt + replayed prefix, right-padded with junk (must be ignored).
LENGTHS = np.array([3, 1, 8, 5])


@pytest.fixture(scope="module")
def params():
    return M.init_params(CFG, jax.random.key(0), std=0.3)


@pytest.fixture(scope="module")
def rows():
    toks = np.asarray(jax.random.randint(jax.random.key(1), (4, 8), 1, CFG.vocab_size), np.int32)
    return np.where(np.arange(8)[None, :] < LENGTHS[:, None], toks, 63)  # junk padding id 63


def _log_softmax_np(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _reference_greedy(params, rows, lengths, n_new, width, stop=()):
    """Greedy decoding by re-running the full forward on the whole buffer at every step."""
    R = rows.shape[0]
    buf = np.zeros((R, width), np.int32)
    buf[:, : rows.shape[1]] = rows
    cur = lengths.copy()
    done = np.zeros(R, bool)
    for _ in range(n_new):
        valid = np.arange(width)[None, :] < cur[:, None]
        logits = np.asarray(FWD(params, jnp.asarray(buf), cfg=CFG, valid=jnp.asarray(valid)))
        nxt = logits[np.arange(R), cur - 1].argmax(-1)
        for r in range(R):
            if not done[r]:
                buf[r, cur[r]] = nxt[r]
                cur[r] += 1
                done[r] = nxt[r] in stop
    return [buf[r, : cur[r]] for r in range(R)], done


def _check_logprobs_against_forward(params, ro, atol=1e-5):
    """rollout.logprobs == log softmax(forward(tokens, positions, valid)) of the previous index."""
    logits = np.asarray(FWD(params, ro.tokens, cfg=CFG, positions=ro.positions, valid=ro.valid))
    lp = _log_softmax_np(logits.astype(np.float64))
    tok = np.asarray(ro.tokens)
    want = np.take_along_axis(lp[:, :-1], tok[:, 1:, None], -1)[..., 0]
    mask = np.asarray(ro.policy_mask)
    assert not mask[:, 0].any()
    np.testing.assert_allclose(np.where(mask[:, 1:], np.asarray(ro.logprobs)[:, 1:], 0),
                               np.where(mask[:, 1:], want, 0), atol=atol)
    return logits


# ---------------------------------------------------------------- buckets


def test_bucket_helpers():
    assert [S.bucket_length(n, (8, 16, 64)) for n in (0, 1, 8, 9, 64)] == [8, 8, 8, 16, 64]
    with pytest.raises(ValueError, match="exceeds the largest bucket"):
        S.bucket_length(65, (8, 16, 64))
    toks = np.arange(1, 13).reshape(2, 6)
    out = S.pad_to_bucket(toks, np.array([2, 5]), pad_id=0, buckets=(4, 8))
    np.testing.assert_array_equal(out, [[1, 2, 0, 0, 0, 0, 0, 0], [7, 8, 9, 10, 11, 0, 0, 0]])
    out = S.pad_to_bucket(toks, np.array([2, 3]), pad_id=9, buckets=(4, 8))  # trims to width 4
    np.testing.assert_array_equal(out, [[1, 2, 9, 9], [7, 8, 9, 9]])


# ---------------------------------------------------------------- greedy, prefix, logprobs


def test_greedy_equals_stepwise_forward_argmax_and_prefix_is_verbatim(params, rows):
    ro = S.sample(params, rows, LENGTHS, jax.random.key(5), cfg=CFG, scfg=GREEDY)
    R, L = ro.tokens.shape
    assert L == 8 + 6
    ref, _ = _reference_greedy(params, rows, LENGTHS, 6, L)
    tok, mask = np.asarray(ro.tokens), np.asarray(ro.policy_mask)
    for r in range(R):
        n = LENGTHS[r] + 6
        np.testing.assert_array_equal(tok[r, :n], ref[r])
        np.testing.assert_array_equal(tok[r, : LENGTHS[r]], rows[r, : LENGTHS[r]])  # prefix verbatim
        np.testing.assert_array_equal(tok[r, n:], 0)  # pad after
        np.testing.assert_array_equal(mask[r], (np.arange(L) >= LENGTHS[r]) & (np.arange(L) < n))
    np.testing.assert_array_equal(ro.lengths, LENGTHS + 6)
    np.testing.assert_array_equal(ro.prompt_lengths, LENGTHS)
    assert not np.any(ro.finished) and np.all(ro.truncated)
    np.testing.assert_array_equal(ro.sampling_logprobs, 0.0)  # greedy: point mass
    _check_logprobs_against_forward(params, ro)
    # Deterministic and key-independent.
    again = S.sample(params, rows, LENGTHS, jax.random.key(99), cfg=CFG, scfg=GREEDY)
    np.testing.assert_array_equal(again.tokens, ro.tokens)


def test_rows_stop_at_eos_and_pad_afterwards(params, rows):
    base = S.sample(params, rows, LENGTHS, jax.random.key(5), cfg=CFG, scfg=GREEDY)
    eos = int(base.tokens[0, LENGTHS[0] + 2])  # row 0's third generated token
    scfg = S.SamplerConfig(max_new_tokens=6, temperature=0.0, eos_id=eos, pad_id=0, buckets=(8, 16))
    ro = S.sample(params, rows, LENGTHS, jax.random.key(5), cfg=CFG, scfg=scfg)
    tok = np.asarray(ro.tokens)
    for r in range(4):
        gen = np.asarray(base.tokens[r, LENGTHS[r]: LENGTHS[r] + 6])
        hits = np.flatnonzero(gen == eos)
        n = hits[0] + 1 if hits.size else 6  # reference: baseline cut after its first eos
        assert ro.lengths[r] == LENGTHS[r] + n
        np.testing.assert_array_equal(tok[r, LENGTHS[r]: LENGTHS[r] + n], gen[:n])
        np.testing.assert_array_equal(tok[r, LENGTHS[r] + n:], 0)
        assert not np.asarray(ro.policy_mask)[r, LENGTHS[r] + n:].any()
        assert np.all(np.asarray(ro.logprobs)[r, LENGTHS[r] + n:] == 0)
        assert bool(ro.finished[r]) == bool(hits.size) and bool(ro.truncated[r]) == (not hits.size)
        assert int(ro.stop_token[r]) == (eos if hits.size else -1)
    assert ro.lengths[0] <= LENGTHS[0] + 3 and bool(ro.finished[0])  # eos occurs in row 0 by construction


# ---------------------------------------------------------------- sampling distribution


def _np_support(z, temperature, top_k, top_p):
    """Reference truncation, HF order, by explicit sorting (distinct logits)."""
    x = z / temperature
    order = np.argsort(-x)
    keep = set(order[: top_k] if top_k else order)
    kept = [i for i in order if i in keep]
    p = np.exp(x[kept] - x[kept].max())
    p /= p.sum()
    out, mass = [], 0.0
    for i, pi in zip(kept, p):
        if mass < top_p:
            out.append(i)
        mass += pi
    return set(out)


@pytest.mark.parametrize("top_k,top_p,temp", [(3, 1.0, 1.0), (0, 0.6, 0.7), (5, 0.8, 1.3)])
def test_top_k_top_p_keep_exactly_the_right_support(top_k, top_p, temp):
    z = np.asarray(jax.random.normal(jax.random.key(7), (6, 12)), np.float64) * 2.0
    adj = np.asarray(jax.jit(S.adjust_logits, static_argnames=("temperature", "top_k", "top_p"))(
        jnp.asarray(z, jnp.float32), temperature=temp, top_k=top_k, top_p=top_p))
    for r in range(6):
        assert set(np.flatnonzero(np.isfinite(adj[r]))) == _np_support(z[r], temp, top_k, top_p)
    # Draws stay in the support, and every supported token is drawn.
    scfg = S.SamplerConfig(max_new_tokens=1, temperature=temp, top_k=top_k, top_p=top_p)
    zz = jnp.asarray(np.repeat(z[:1], 4000, axis=0), jnp.float32)
    tok, lp, samp = jax.jit(S.choose_tokens, static_argnums=2)(zz, jax.random.key(8), scfg)
    assert set(np.unique(np.asarray(tok)).tolist()) == _np_support(z[0], temp, top_k, top_p)
    np.testing.assert_allclose(lp, _log_softmax_np(z[0])[np.asarray(tok)], atol=1e-5)


def test_choose_tokens_chi_square_with_temperature():
    z = np.array([1.0, 0.2, -0.5, 2.0, 0.0, -1.0], np.float64)
    scfg = S.SamplerConfig(max_new_tokens=1, temperature=0.5)
    n = 20000
    tok, _, samp = jax.jit(S.choose_tokens, static_argnums=2)(
        jnp.asarray(np.repeat(z[None], n, 0), jnp.float32), jax.random.key(11), scfg)
    p = np.exp(_log_softmax_np(z / 0.5))
    counts = np.bincount(np.asarray(tok), minlength=6)
    assert stats.chisquare(counts, n * p).pvalue > 1e-3
    np.testing.assert_allclose(samp, np.log(p)[np.asarray(tok)], atol=1e-5)


def test_sampler_temperature_one_matches_softmax_chi_square():
    """First generated token of many identical rows ~ softmax(forward logits) (tiny vocabulary)."""
    cfg = M.ModelConfig.preset("tiny", vocab_size=8)
    params = M.init_params(cfg, jax.random.key(3), std=0.1)
    R = 4096
    prompt = np.tile(np.array([[1, 5, 2]], np.int32), (R, 1))
    scfg = S.SamplerConfig(max_new_tokens=1, temperature=1.0, buckets=(4,))
    ro = S.sample(params, prompt, np.full(R, 3), jax.random.key(12), cfg=cfg, scfg=scfg)
    p = np.exp(_log_softmax_np(np.asarray(FWD(params, jnp.asarray(prompt[:1]), cfg=cfg), np.float64)[0, -1]))
    counts = np.bincount(np.asarray(ro.tokens[:, 3]), minlength=8)
    assert p.min() > 0.01  # the test has power on every cell
    assert stats.chisquare(counts, R * p).pvalue > 1e-3
    assert stats.chisquare(counts, np.full(8, R / 8)).pvalue < 1e-6  # power: uniform is rejected
    np.testing.assert_allclose(ro.logprobs[:, 3], np.log(p)[np.asarray(ro.tokens[:, 3])], atol=1e-5)


def test_sampled_rollout_logprobs_match_forward_and_truncated_distribution(params, rows):
    scfg = S.SamplerConfig(max_new_tokens=6, temperature=0.8, top_k=10, top_p=0.9, buckets=(8, 16))
    ro = S.sample(params, rows, LENGTHS, jax.random.key(13), cfg=CFG, scfg=scfg)
    logits = _check_logprobs_against_forward(params, ro)
    # sampling_logprobs == log of the numpy-truncated, renormalised distribution.
    mask, tok = np.asarray(ro.policy_mask), np.asarray(ro.tokens)
    for r, t in zip(*np.nonzero(mask)):
        z = logits[r, t - 1].astype(np.float64)
        sup = sorted(_np_support(z, 0.8, 10, 0.9))
        assert tok[r, t] in sup
        x = z[sup] / 0.8
        want = x[sup.index(tok[r, t])] - np.log(np.exp(x - x.max()).sum()) - x.max()
        np.testing.assert_allclose(ro.sampling_logprobs[r, t], want, atol=1e-4)


# ---------------------------------------------------------------- compiles, sharding


def test_second_call_in_same_bucket_does_not_recompile(params, rows):
    S.sample(params, rows, LENGTHS, jax.random.key(1), cfg=CFG, scfg=GREEDY)
    n0 = S.sample_jit._cache_size()
    # Different data, lengths, input width (7 -> bucket 8) and key: same compiled loop.
    other = np.asarray(rows[:, :7])
    S.sample(params, other, np.array([2, 7, 4, 1]), jax.random.key(2), cfg=CFG, scfg=GREEDY)
    S.sample(params, rows, LENGTHS, jax.random.key(3), cfg=CFG, scfg=GREEDY)
    assert S.sample_jit._cache_size() == n0
    # A longer prompt lands in the next bucket: exactly one new compile.
    long = np.ones((4, 12), np.int32)
    S.sample(params, long, np.array([12, 9, 1, 3]), jax.random.key(3), cfg=CFG, scfg=GREEDY)
    assert S.sample_jit._cache_size() == n0 + 1


def test_eight_device_sharded_output_equals_single_device(params, eight_devices):
    R = 8
    toks = np.asarray(jax.random.randint(jax.random.key(21), (R, 6), 1, CFG.vocab_size), np.int32)
    lengths = np.array([6, 1, 2, 3, 4, 5, 6, 2])
    scfg = S.SamplerConfig(max_new_tokens=5, temperature=1.0, top_p=0.95, buckets=(8,))
    one = S.sample(params, toks, lengths, jax.random.key(22), cfg=CFG, scfg=scfg)
    mesh = make_mesh(eight_devices)
    eight = S.sample(params, toks, lengths, jax.random.key(22), cfg=CFG, scfg=scfg, mesh=mesh)
    assert eight.tokens.sharding.spec[0] == DATA_AXIS
    assert len(eight.tokens.sharding.device_set) == 8
    np.testing.assert_array_equal(one.tokens, eight.tokens)
    np.testing.assert_array_equal(one.policy_mask, eight.policy_mask)
    np.testing.assert_allclose(one.logprobs, eight.logprobs, atol=1e-5)


# ---------------------------------------------------------------- multi-turn


def test_multi_turn_resume_cache_and_reprefill_agree_with_fresh_sampling(params, rows):
    stop = int(S.sample(params, rows, LENGTHS, jax.random.key(5), cfg=CFG, scfg=GREEDY).tokens[1, 2])
    scfg = S.SamplerConfig(max_new_tokens=6, temperature=0.0, stop_ids=(stop,), buckets=(8, 16))
    first, cache = S.sample(params, rows, LENGTHS, jax.random.key(5), cfg=CFG, scfg=scfg, return_cache=True)
    assert bool(first.finished[1]) and int(first.stop_token[1]) == stop
    obs = np.array([[40, 41, 42], [50, 51, 0], [60, 0, 0], [0, 0, 0]], np.int32)
    ol = np.array([3, 2, 1, 0])  # row 3 is not resumed
    a = S.append_and_resume(params, first, obs, ol, jax.random.key(6), cfg=CFG, scfg=scfg, cache=cache)
    b = S.append_and_resume(params, first, obs, ol, jax.random.key(6), cfg=CFG, scfg=scfg)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    tok, mask, L0 = np.asarray(a.tokens), np.asarray(a.policy_mask), first.tokens.shape[1]
    assert tok.shape[1] == L0 + 3 + 6
    n1 = np.asarray(first.lengths)
    for r in range(4):
        np.testing.assert_array_equal(tok[r, : n1[r]], first.tokens[r, : n1[r]])  # turn 1 kept
        np.testing.assert_array_equal(mask[r, : n1[r]], first.policy_mask[r, : n1[r]])
        np.testing.assert_array_equal(tok[r, n1[r]: n1[r] + ol[r]], obs[r, : ol[r]])  # observation
        assert not mask[r, n1[r]: n1[r] + ol[r]].any()  # never policy tokens
    assert a.lengths[3] == n1[3] and not mask[3, n1[3]:].any()  # not resumed
    # Reference: fresh greedy sampling with the concatenated conversations as prompts.
    conv_len = n1[:3] + ol[:3]
    conv = np.where(np.arange(L0 + 3)[None, :] < conv_len[:, None], tok[:3, : L0 + 3], 0)
    fresh = S.sample(params, conv, conv_len, jax.random.key(0), cfg=CFG,
                     scfg=S.SamplerConfig(max_new_tokens=6, temperature=0.0, stop_ids=(stop,), buckets=(32,)))
    for r in range(3):
        n = int(fresh.lengths[r])
        assert a.lengths[r] == n
        np.testing.assert_array_equal(tok[r, :n], fresh.tokens[r, :n])
    _check_logprobs_against_forward(params, a)


# ---------------------------------------------------------------- errors


def test_bad_inputs_raise_clear_errors(params, rows):
    with pytest.raises(ValueError, match="exceeds the cache length max_len=12"):
        S.sample(params, rows, LENGTHS, jax.random.key(0), cfg=CFG,
                 scfg=S.SamplerConfig(max_new_tokens=6, buckets=(8,), max_len=12))
    with pytest.raises(ValueError, match=r"rows \[1\] have lengths \[0\]"):
        S.sample(params, rows, np.array([3, 0, 8, 5]), jax.random.key(0), cfg=CFG, scfg=GREEDY)
    with pytest.raises(ValueError, match=r"must have shape \(4,\)"):
        S.sample(params, rows, np.array([3, 1, 8]), jax.random.key(0), cfg=CFG, scfg=GREEDY)
    with pytest.raises(ValueError, match=r"must be \[R, P\]"):
        S.sample(params, rows[0], np.array([3]), jax.random.key(0), cfg=CFG, scfg=GREEDY)
    with pytest.raises(ValueError, match="outside"):
        S.sample(params, rows + 100, LENGTHS, jax.random.key(0), cfg=CFG, scfg=GREEDY)
    with pytest.raises(ValueError, match="exceeds the largest bucket"):
        S.sample(params, np.ones((1, 20), np.int32), np.array([20]), jax.random.key(0), cfg=CFG, scfg=GREEDY)
    with pytest.raises(ValueError, match="max_new_tokens"):
        S.SamplerConfig(max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p"):
        S.SamplerConfig(max_new_tokens=1, top_p=0.0)
    ro = S.sample(params, rows, LENGTHS, jax.random.key(0), cfg=CFG, scfg=GREEDY)
    with pytest.raises(ValueError, match="obs_tokens has 2 rows"):
        S.append_and_resume(params, ro, np.ones((2, 3), np.int32), np.array([1, 1]), jax.random.key(0),
                            cfg=CFG, scfg=GREEDY)


def test_decode_loop_exits_when_every_row_has_stopped(params):
    """The while_loop runs exactly as many decode steps as the longest row needs, not T: with a
    quarter of the vocabulary as stop ids every row stops early, and the loop's step count equals
    the largest number of tokens any row generated (and is < T)."""
    R, P, T = 8, 6, 64
    tokens = np.asarray(jax.random.randint(jax.random.key(5), (R, P), 0, CFG.vocab_size), np.int32)
    lengths = np.full((R,), P, np.int32)
    scfg = S.SamplerConfig(max_new_tokens=T, temperature=1.0, stop_ids=tuple(range(0, CFG.vocab_size, 4)),
                           buckets=None)
    run = jax.jit(lambda p, t, n, k: S._sample_state(p, t, n, k, jnp.full((R,), T, jnp.int32), cfg=CFG, scfg=scfg, mesh=None))
    state = run(params, tokens, lengths, jax.random.key(6))
    ro = S.sample(params, tokens, lengths, jax.random.key(6), cfg=CFG, scfg=scfg)
    generated = np.asarray(ro.lengths - ro.prompt_lengths)  # [R]
    assert np.asarray(ro.finished).all()
    assert int(state.step) == generated.max() < T
    # and without stop ids the loop runs the full budget
    full = dataclasses.replace(scfg, stop_ids=())
    state = jax.jit(lambda p, t, n, k: S._sample_state(p, t, n, k, jnp.full((R,), T, jnp.int32), cfg=CFG, scfg=full, mesh=None))(
        params, tokens, lengths, jax.random.key(6))
    assert int(state.step) == T


# ---------------------------------------------------------------- decode segments, row chunks


def test_segments_cover_every_slot_a_step_can_touch():
    assert S._segments(16, 64, S.DEFAULT_BUCKETS) == ((16, 32), (48, 64), (64, 80))
    assert S._segments(8, 6, S.DEFAULT_BUCKETS) == ((6, 14),)
    assert S._segments(16, 64, None) == ((64, 80),)
    assert S.SamplerConfig(max_new_tokens=1).attend_buckets is None  # default: one segment
    for P, T in ((1, 1), (7, 30), (16, 17), (33, 200)):
        seg = S._segments(P, T, S.DEFAULT_BUCKETS)
        assert seg[-1] == (T, P + T)
        start = 0
        for end, A in seg:  # step t writes/attends slots <= P + t < A for every t in [start, end)
            assert start < end and P + end - 1 < A <= P + T
            start = end


def test_segmented_decode_equals_full_attention_and_stepwise_forward(params, rows):
    """P=8, T=30: decode attends 16, 32, then 38 slots in three segments (blocks); greedy equals the
    full-forward reference, the logprobs equal forward's, and temperature-1 tokens equal the
    one-segment (all slots every step) loop for the same key."""
    T = 30
    greedy = S.SamplerConfig(max_new_tokens=T, temperature=0.0, buckets=(8,), attend_buckets=S.DEFAULT_BUCKETS)
    assert len(S._segments(8, T, greedy.attend_buckets)) == 3
    ro = S.sample(params, rows, LENGTHS, jax.random.key(5), cfg=CFG, scfg=greedy)
    ref, _ = _reference_greedy(params, rows, LENGTHS, T, 8 + T)
    for r in range(4):
        np.testing.assert_array_equal(np.asarray(ro.tokens)[r, : LENGTHS[r] + T], ref[r])
    _check_logprobs_against_forward(params, ro)
    warm = S.SamplerConfig(max_new_tokens=T, temperature=1.0, buckets=(8,), attend_buckets=S.DEFAULT_BUCKETS)
    a = S.sample(params, rows, LENGTHS, jax.random.key(7), cfg=CFG, scfg=warm)
    b = S.sample(params, rows, LENGTHS, jax.random.key(7), cfg=CFG,
                 scfg=dataclasses.replace(warm, attend_buckets=None))
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    _check_logprobs_against_forward(params, a)


def test_row_chunk_equals_one_call(params):
    """R=7 rows in chunks of 3 (the last chunk padded with 2 dummy rows) give the same rollout and
    cache as one call with the same key (per-row streams), with no extra compile for the chunks."""
    R, T = 7, 5
    toks = np.asarray(jax.random.randint(jax.random.key(31), (R, 8), 1, CFG.vocab_size), np.int32)
    lengths = np.array([8, 1, 3, 5, 2, 7, 4])
    budget = np.array([5, 2, 5, 1, 3, 5, 4])
    scfg = S.SamplerConfig(max_new_tokens=T, temperature=1.0, top_k=20, buckets=(8,), eos_id=5)
    one, c1 = S.sample(params, toks, lengths, jax.random.key(32), cfg=CFG, scfg=scfg, budget=budget,
                       return_cache=True)
    chunked = dataclasses.replace(scfg, row_chunk=3)
    S.sample(params, toks, lengths, jax.random.key(32), cfg=CFG, scfg=chunked, budget=budget)  # compile R=3
    n0 = S.sample_jit._cache_size()
    three, c3 = S.sample(params, toks, lengths, jax.random.key(32), cfg=CFG, scfg=chunked, budget=budget,
                         return_cache=True)
    assert three.tokens.shape == one.tokens.shape == (R, 8 + T)
    for f in ("tokens", "policy_mask", "lengths", "finished", "truncated", "stop_token", "positions", "valid"):
        np.testing.assert_array_equal(getattr(three, f), getattr(one, f), err_msg=f)
    np.testing.assert_allclose(three.logprobs, one.logprobs, atol=1e-6)
    np.testing.assert_allclose(three.sampling_logprobs, one.sampling_logprobs, atol=1e-6)
    np.testing.assert_allclose(c3["k"], c1["k"], atol=1e-5)  # R changes the matmul blocking: ~1e-6
    # the temperature-1 draws differ between rows (not one stream copied) and the chunk keeps its rows
    assert len({tuple(np.asarray(one.tokens)[r, 8:]) for r in range(R)}) > 1
    assert S.sample_jit._cache_size() == n0 + 1  # only the return_cache=True variant of R=3 was new
    with pytest.raises(ValueError, match="row_chunk"):
        S.SamplerConfig(max_new_tokens=1, row_chunk=0)


@pytest.mark.slow
def test_row_parts_equal_one_part_and_stepwise_forward(params):
    """R=8 ragged rows: the decode step with its cache writes and attention in 2 (``row_parts=None``
    on a single device) or 4 row parts gives the greedy tokens of the full-forward reference, logprobs
    equal to forward's, and, at temperature 1 with an eos, the same rollout and returned cache as
    one part for the same key; a cached resume from the parts' cache continues identically."""
    R, T = 8, 7
    lengths = np.array([8, 1, 3, 5, 2, 7, 4, 6])
    toks = np.asarray(jax.random.randint(jax.random.key(41), (R, 8), 1, CFG.vocab_size), np.int32)
    toks = np.where(np.arange(8)[None, :] < lengths[:, None], toks, 63)
    auto = S.SamplerConfig(max_new_tokens=1, row_parts=None)
    assert S._row_parts(R, None, S.SamplerConfig(max_new_tokens=1)) == 1  # the default: one part
    assert S._row_parts(R, None, auto) == 2
    assert S._row_parts(4, None, auto) == 1  # too few rows
    assert S._row_parts(9, None, auto) == 1  # odd
    greedy = S.SamplerConfig(max_new_tokens=T, temperature=0.0, buckets=(8,))
    ref, _ = _reference_greedy(params, toks, lengths, T, 8 + T)
    for parts in (None, 4):
        ro = S.sample(params, toks, lengths, jax.random.key(5), cfg=CFG, scfg=dataclasses.replace(greedy, row_parts=parts))
        for r in range(R):
            np.testing.assert_array_equal(np.asarray(ro.tokens)[r, : lengths[r] + T], ref[r])
        _check_logprobs_against_forward(params, ro)
    warm = S.SamplerConfig(max_new_tokens=T, temperature=1.0, buckets=(8,), eos_id=3)
    outs = {p: S.sample(params, toks, lengths, jax.random.key(9), cfg=CFG, scfg=dataclasses.replace(warm, row_parts=p),
                        return_cache=True) for p in (1, 2, 4)}
    (one, c1) = outs[1]
    for p in (2, 4):
        ro, c = outs[p]
        for f in ("tokens", "policy_mask", "lengths", "finished", "truncated", "stop_token"):
            np.testing.assert_array_equal(getattr(ro, f), getattr(one, f), err_msg=f"{f}, row_parts={p}")
        np.testing.assert_allclose(ro.logprobs, one.logprobs, atol=1e-5)
        np.testing.assert_allclose(ro.sampling_logprobs, one.sampling_logprobs, atol=1e-5)
        for name in ("k", "v"):
            np.testing.assert_allclose(c[name], c1[name], atol=1e-5)
    obs = np.tile(np.array([[40, 41]], np.int32), (R, 1))
    ol = np.array([2, 1, 0, 2, 1, 2, 0, 1])
    a = S.append_and_resume(params, outs[2][0], obs, ol, jax.random.key(6), cfg=CFG,
                            scfg=dataclasses.replace(warm, row_parts=2), cache=outs[2][1])
    b = S.append_and_resume(params, one, obs, ol, jax.random.key(6), cfg=CFG,
                            scfg=dataclasses.replace(warm, row_parts=1), cache=c1)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    _check_logprobs_against_forward(params, a)


def test_row_parts_bad_values_raise(params, rows, eight_devices):
    with pytest.raises(ValueError, match="row_parts must be >= 1"):
        S.SamplerConfig(max_new_tokens=1, row_parts=0)
    with pytest.raises(ValueError, match="row_parts=3 must divide the rows of a call, 4"):
        S.sample(params, rows, LENGTHS, jax.random.key(0), cfg=CFG, scfg=dataclasses.replace(GREEDY, row_parts=3))
    with pytest.raises(ValueError, match="needs a single device"):
        S.sample(params, rows, LENGTHS, jax.random.key(0), cfg=CFG, mesh=make_mesh(eight_devices[:2]),
                 scfg=dataclasses.replace(GREEDY, row_parts=2))


def test_rl_row_parts_reaches_the_trainers_sampler_and_keeps_the_tokens():
    """``algo``/``rollout.row_parts`` (``RLConfig.rollout.row_parts``) is the trainer's ``SamplerConfig.row_parts``;
    2 parts give the 1-part rollout's tokens (log-probs to float rounding); a bad value is one error."""
    import dataclasses as dc

    from prs.core import prefix as ps
    from prs.rl import trainer as T
    from tests._arith_tiny import MODEL, RL, TASK, warm_params

    eps = []
    for parts in (1, 2):
        tr = T.Trainer(TASK, MODEL, dc.replace(RL, rollout=dc.replace(RL.rollout, row_parts=parts)), ps.PrefixConfig(n=RL.group_size))
        assert tr.rollouts.scfg.row_parts == parts
        probs = TASK.train_problems(seed=0, step=0, count=RL.tasks_per_step)
        eps.append(tr.rollouts.rollout(warm_params(), probs, jax.random.PRNGKey(4), group_size=RL.group_size))
    np.testing.assert_array_equal(np.asarray(eps[0].tokens), np.asarray(eps[1].tokens))
    np.testing.assert_array_equal(np.asarray(eps[0].rewards), np.asarray(eps[1].rewards))
    np.testing.assert_allclose(np.asarray(eps[0].logprobs), np.asarray(eps[1].logprobs), atol=1e-5)
    with pytest.raises(ValueError, match="row_parts"):
        T.RLConfig(rollout=T.RolloutConfig(row_parts=0))
