"""Tests for prs.core.advantages against a pure-Python reference and the peers' worked examples."""
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from prs.core.advantages import group_advantages, group_pass_rates, mixed_groups


# ---------------------------------------------------------------- independent reference (pure Python)
def ref_advantages(rewards, valid=None, *, estimator="grpo", std_ddof=1, eps=1e-6, singleton="zero"):
    """Group by group with Python lists, written from the formulas in peer_conventions.md."""
    rewards = np.asarray(rewards, dtype=np.float64)
    valid = np.ones(rewards.shape, bool) if valid is None else np.asarray(valid)
    out = np.zeros_like(rewards)
    for b in range(rewards.shape[0]):
        idx = [j for j in range(rewards.shape[1]) if valid[b, j]]
        vals = [float(rewards[b, j]) for j in idx]
        n = len(vals)
        if n == 1 and singleton == "raw":  # verl: mean 0, std 1
            out[b, idx[0]] = vals[0] / (1 + eps) if estimator in ("grpo", "rloo_std") else vals[0]
            continue
        if n < 2 or max(vals) == min(vals):
            continue
        mu = sum(vals) / n
        sd = math.sqrt(sum((x - mu) ** 2 for x in vals) / (n - std_ddof)) if n > std_ddof else 0.0
        for j, x in zip(idx, vals):
            loo = (sum(vals) - x) / (n - 1)
            a = {"grpo": (x - mu) / (sd + eps), "dr_grpo": x - mu, "rloo": x - loo,
                 "rloo_std": (x - loo) / (sd + eps)}[estimator]
            out[b, j] = a
    return out


ESTIMATORS = ["grpo", "dr_grpo", "rloo", "rloo_std"]
ONE = np.array([[1.0, 0.0, 0.0, 0.0]], np.float32)


# ---------------------------------------------------------------- peers' worked examples
@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (dict(estimator="grpo"), [1.5, -0.5, -0.5, -0.5]),  # verl, tunix
        (dict(estimator="grpo", eps=1e-4), [1.4997, -0.4999, -0.4999, -0.4999]),  # TRL
        (dict(estimator="grpo", std_ddof=0), [1.732, -0.577, -0.577, -0.577]),  # rLLM
        (dict(estimator="grpo", eps=1e-9), [1.5, -0.5, -0.5, -0.5]),  # OpenRLHF
        (dict(estimator="dr_grpo"), [0.75, -0.25, -0.25, -0.25]),
        (dict(estimator="rloo"), [1.0, -1 / 3, -1 / 3, -1 / 3]),
    ],
)
def test_peer_worked_examples(kwargs, expected):
    got = np.asarray(group_advantages(ONE, **kwargs))[0]
    np.testing.assert_allclose(got, expected, atol=1e-3)
    np.testing.assert_allclose(got, ref_advantages(ONE, **kwargs)[0], rtol=1e-5, atol=1e-6)


def test_rloo_is_scaled_dr_grpo():
    """Identity from peer_conventions.md: r − (Σr − r)/(n−1) = n/(n−1)·(r − mean)."""
    r = np.random.default_rng(0).random((5, 6)).astype(np.float32)
    np.testing.assert_allclose(group_advantages(r, estimator="rloo"),
                               6 / 5 * np.asarray(group_advantages(r, estimator="dr_grpo")), rtol=1e-5, atol=1e-6)


def test_singleton_verl_mode():
    """verl: singleton group -> mean 0, std 1 -> advantage r. Our default gives 0."""
    r = np.array([[1.0, 0.3], [0.0, 1.0]], np.float32)
    valid = np.array([[True, False], [True, True]])
    for est in ESTIMATORS:
        raw = np.asarray(group_advantages(r, valid=valid, estimator=est, singleton="raw"))
        zero = np.asarray(group_advantages(r, valid=valid, estimator=est))
        np.testing.assert_allclose(raw[0], [1.0, 0.0], rtol=1e-5)
        np.testing.assert_array_equal(zero[0], [0.0, 0.0])
        np.testing.assert_allclose(raw[1], zero[1])  # non-singletons untouched
        np.testing.assert_allclose(raw, ref_advantages(r, valid, estimator=est, singleton="raw"), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- property tests vs the reference
@st.composite
def reward_batches(draw):
    b = draw(st.sampled_from([1, 3]))  # few shapes (each compiles once); masks vary the group sizes
    n = draw(st.sampled_from([1, 4, 8]))
    binary = draw(st.booleans())
    if binary:
        r = draw(hnp.arrays(np.float32, (b, n), elements=st.sampled_from([0.0, 1.0])))
    else:
        # no subnormals: XLA:CPU flushes them to zero (a reward of 1e-45 counts as 0 successes there)
        r = draw(hnp.arrays(np.float32, (b, n), elements=st.floats(-3, 3, width=32, allow_subnormal=False)))
    valid = draw(hnp.arrays(np.bool_, (b, n)))
    return r, valid


@settings(max_examples=60, deadline=None)
@given(reward_batches(), st.sampled_from(ESTIMATORS), st.sampled_from([0, 1]), st.sampled_from([1e-6, 1e-4]))
def test_matches_reference(batch, estimator, ddof, eps):
    r, valid = batch
    got = np.asarray(_jitted(r, valid, estimator, ddof, eps))
    want = ref_advantages(r, valid, estimator=estimator, std_ddof=ddof, eps=eps)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert np.all(got[~valid] == 0.0)


_jit_adv = jax.jit(group_advantages, static_argnames=("estimator", "std_ddof", "eps", "singleton"))


def _jitted(r, valid, estimator, ddof, eps):
    return _jit_adv(jnp.asarray(r), estimator=estimator, valid=jnp.asarray(valid), std_ddof=ddof, eps=eps)


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("singleton", ["zero", "raw"])
def test_degenerate_groups_are_finite(estimator, singleton):
    r = np.array([[0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 0], [1, 0, 0, 1], [0.1, 0.1, 0.1, 0.1]], np.float32)
    valid = np.array([[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]], bool)
    a = np.asarray(group_advantages(r, valid=valid, estimator=estimator, singleton=singleton))
    assert np.all(np.isfinite(a))
    np.testing.assert_array_equal(a[[0, 1, 3, 4]], 0.0)  # constant or empty groups: exactly 0
    # gradient through the kernel is finite too (safe sqrt at zero variance)
    g = jax.grad(lambda x: jnp.sum(group_advantages(x, valid=valid, estimator=estimator, singleton=singleton)))(r)
    assert np.all(np.isfinite(np.asarray(g)))


def test_excluded_rollout_does_not_move_baseline():
    """verl PR #6452: an excluded rollout moved its group's baseline. Excluding one must equal dropping it."""
    rng = np.random.default_rng(1)
    r = (rng.random((6, 8)) < 0.4).astype(np.float32)
    r[:, 0] = 1.0
    valid = np.ones_like(r, bool)
    valid[:, 3] = False
    for est in ESTIMATORS:
        masked = np.asarray(group_advantages(r, valid=valid, estimator=est))
        dropped = np.asarray(group_advantages(np.delete(r, 3, axis=1), estimator=est))
        np.testing.assert_allclose(np.delete(masked, 3, axis=1), dropped, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(masked[:, 3], 0.0)
        # flipping the excluded rollout's reward changes nothing
        r2 = r.copy()
        r2[:, 3] = 1 - r2[:, 3]
        np.testing.assert_array_equal(masked, np.asarray(group_advantages(r2, valid=valid, estimator=est)))


def test_variance_not_floored_at_eps():
    """verl PR #6348: flooring the variance at eps shrank low-variance advantages. Scale invariance holds."""
    base = np.asarray(group_advantages(ONE))
    small = np.asarray(group_advantages(ONE * 1e-3))  # var = 2.5e-7 < eps: a floor would halve it
    np.testing.assert_allclose(small, base, rtol=3e-3)
    floored = (ONE * 1e-3 - 2.5e-4) / np.sqrt(np.maximum(2.5e-7, 1e-6))  # the buggy formula, for contrast
    assert not np.allclose(small, floored, rtol=0.1)


def test_rloo_std_bounded_on_binary_rewards():
    """NeMo-RL #1518: leave-one-out baseline + (leave-one-out) std gave ±1e6 on binary rewards.

    Enumerates every binary pattern for N = 8: |A| <= n / sqrt(n - 1) (whole-group std)."""
    n = 8
    r = np.array(list(itertools.product([0.0, 1.0], repeat=n)), np.float32)  # [256, 8]
    for ddof in (0, 1):
        a = np.asarray(group_advantages(r, estimator="rloo_std", std_ddof=ddof))
        assert np.all(np.isfinite(a))
        assert np.abs(a).max() <= n / math.sqrt(n - 1) + 1e-5
        np.testing.assert_allclose(a, ref_advantages(r, estimator="rloo_std", std_ddof=ddof), rtol=1e-5, atol=1e-5)
    # the lone success in [1,0,...,0] is where a leave-one-out std is 0 (the buggy path): we stay ~2.6
    lone = np.asarray(group_advantages(np.eye(1, n, dtype=np.float32), estimator="rloo_std"))
    assert 1.0 < lone[0, 0] < 10.0


# ---------------------------------------------------------------- pass rates and the group filter
@settings(max_examples=40, deadline=None)
@given(reward_batches())
def test_pass_rates_and_mixed_vs_reference(batch):
    r, valid = batch
    k, n, p, keep_std, keep_mm = (np.asarray(x) for x in _jit_rates(r, valid))
    for b in range(r.shape[0]):
        vals = [float(x) for x, m in zip(r[b], valid[b]) if m]
        assert n[b] == len(vals)
        assert k[b] == sum(x > 0 for x in vals)
        assert p[b] == pytest.approx(k[b] / n[b] if vals else 0.0)
        assert keep_std[b] == (len(set(vals)) > 1)  # "std > 0" stated exactly: not all values equal
        mu = float(np.mean(np.asarray(vals, np.float32))) if vals else 0.0
        if len(vals) > 1 and min(vals) < mu < max(vals):
            assert keep_mm[b]
        if keep_mm[b]:
            assert keep_std[b]
    assert k.dtype == np.int32 and n.dtype == np.int32 and p.dtype == np.float32


@jax.jit
def _jit_rates(r, valid):
    return (*group_pass_rates(r, valid), mixed_groups(r, valid), mixed_groups(r, valid, rule="minmax"))


def test_pass_rates_from_paper_buckets():
    """k/N buckets of prefix_sampling.md (N = 8): 1/8, 2/8, 6/8, 7/8, and all-same groups not mixed."""
    ks = np.array([0, 1, 2, 4, 6, 7, 8])
    r = (np.arange(8)[None, :] < ks[:, None]).astype(np.float32)  # [7, 8]
    k, n, p = group_pass_rates(r)
    np.testing.assert_array_equal(k, ks)
    np.testing.assert_array_equal(n, 8)
    np.testing.assert_allclose(p, ks / 8)
    np.testing.assert_array_equal(mixed_groups(r), (ks > 0) & (ks < 8))
    np.testing.assert_array_equal(mixed_groups(r, rule="minmax"), (ks > 0) & (ks < 8))


def test_constant_nonbinary_group_dropped():
    r = np.full((1, 3), 0.1, np.float32)
    assert not bool(mixed_groups(r)[0]) and not bool(mixed_groups(r, rule="minmax")[0])
    np.testing.assert_array_equal(group_advantages(r), 0.0)


# ---------------------------------------------------------------- dtypes, compile count, bad input
def test_dtypes():
    r_bf = jnp.asarray(ONE, jnp.bfloat16)
    assert group_advantages(r_bf).dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(group_advantages(r_bf), np.float32), [[1.5, -0.5, -0.5, -0.5]], atol=1e-2)
    r_int = np.array([[1, 0, 0, 0]], np.int32)
    assert group_advantages(r_int).dtype == jnp.float32
    assert group_advantages(r_int.astype(bool)).dtype == jnp.float32
    np.testing.assert_allclose(group_advantages(r_int), group_advantages(ONE))


def test_no_recompile_on_second_call():
    # fresh wrappers: jit caches are keyed on the wrapped function, shared with other tests' jits
    f = jax.jit(lambda r, valid: group_advantages(r, valid=valid))
    g = jax.jit(lambda r, valid: mixed_groups(r, valid))
    r1 = jnp.asarray(np.random.default_rng(0).random((4, 8)), jnp.float32)
    r2 = r1 + 1.0
    valid = jnp.ones((4, 8), bool)
    f(r1, valid=valid).block_until_ready()
    g(r1, valid).block_until_ready()
    assert f._cache_size() == 1 and g._cache_size() == 1
    f(r2, valid=valid).block_until_ready()
    g(r2, valid).block_until_ready()
    assert f._cache_size() == 1 and g._cache_size() == 1


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: group_advantages(np.zeros(4, np.float32)), r"rewards must have rank 2.*\(4,\)"),
        (lambda: group_advantages(ONE, valid=np.ones((1, 3), bool)), r"valid .*\(1, 4\).*\(1, 3\)"),
        (lambda: group_advantages(ONE, valid=np.ones((1, 4), np.float32)), r"valid must have a bool dtype"),
        (lambda: group_advantages(ONE, estimator="ppo"), r"estimator must be one of"),
        (lambda: group_advantages(ONE, singleton="x"), r"singleton must be one of"),
        (lambda: group_advantages(ONE, std_ddof=-1), r"std_ddof"),
        (lambda: group_advantages(ONE, eps=-1.0), r"eps must be"),
        (lambda: group_advantages(ONE.astype(np.complex64)), r"rewards must have a .* dtype"),
        (lambda: mixed_groups(ONE, rule="median"), r"rule must be one of"),
        (lambda: group_pass_rates(ONE[0]), r"rewards must have rank 2"),
    ],
)
def test_bad_input_raises(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- REINFORCE++ and batch whitening (#17)
from prs.core.advantages import whiten_advantages  # noqa: E402


def np_masked_whiten_tokens(scores, lengths, valid):
    """verl masked_whiten on the per-token tiling of one score per rollout (float64, eps 1e-8)."""
    toks = np.concatenate([np.full(int(l), s) for s, l, v in zip(scores.ravel(), lengths.ravel(), valid.ravel()) if v])
    n = toks.size
    mean = toks.sum() / (n + 1e-8)
    var = ((toks - mean) ** 2).sum() / (n + 1e-8) * n / (n - 1)
    return np.where(valid, (scores - mean) / np.sqrt(var + 1e-8), 0.0)


@pytest.mark.parametrize("lengths, base, plain", [
    ([1, 1, 1, 1], [1.5, -0.5, -0.5, -0.5], [1.5, -0.5, -0.5, -0.5]),
    ([2, 2, 2, 2], [1.620185, -0.540062, -0.540062, -0.540062], [1.620185, -0.540062, -0.540062, -0.540062]),
    ([1, 2, 3, 4], [2.846050, -0.316228, -0.316228, -0.316228], [2.846050, -0.316228, -0.316228, -0.316228]),
])
def test_reinforce_pp_worked_numbers(lengths, base, plain):
    """notes/loss_menu.md §5 (derived from verl's REINFORCE++(-baseline), γ = 1, r = [1, 0, 0, 0])."""
    r = np.array([[1.0, 0, 0, 0]], np.float32)
    ln = np.array([lengths], np.float32)
    kw = dict(lengths=ln, eps=1e-8)
    np.testing.assert_allclose(group_advantages(r, estimator="reinforce_pp_baseline", **kw)[0], base, rtol=1e-5)
    np.testing.assert_allclose(group_advantages(r, estimator="reinforce_pp", **kw)[0], plain, rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_reinforce_pp_matches_verl_token_level_whitening(seed):
    rng = np.random.default_rng(seed)
    r = rng.integers(0, 2, (3, 4)).astype(np.float32)
    lengths = rng.integers(1, 6, (3, 4)).astype(np.float32)
    valid = rng.random((3, 4)) < 0.8
    valid[0, :2] = True
    got_plain = np.asarray(group_advantages(r, estimator="reinforce_pp", valid=valid, lengths=lengths, eps=1e-8))
    centred = np.asarray(group_advantages(r, estimator="dr_grpo", valid=valid), np.float64)
    got_base = np.asarray(group_advantages(r, estimator="reinforce_pp_baseline", valid=valid, lengths=lengths, eps=1e-8))
    for got, scores in ((got_plain, r.astype(np.float64)), (got_base, centred)):
        live = scores[valid]
        if np.ptp(live) == 0:
            assert np.all(got == 0)
        else:
            np.testing.assert_allclose(got, np_masked_whiten_tokens(scores, lengths, valid), rtol=1e-4, atol=1e-5)


def test_whiten_rollout_weighted_without_lengths():
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    got = np.asarray(whiten_advantages(x, std_ddof=0, eps=0.0))
    np.testing.assert_allclose(got, (x - x.mean()) / x.std(), rtol=1e-6)
    got = np.asarray(whiten_advantages(x))  # ddof 1
    np.testing.assert_allclose(got, (x - x.mean()) / np.sqrt(x.var(ddof=1) + 1e-8), rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["all0", "all1", "one", "none", "nan_masked", "zero_len"]), st.sampled_from(["reinforce_pp", "reinforce_pp_baseline"]))
def test_reinforce_pp_degenerate_batches_give_zero_not_nan(kind, estimator):
    r = np.zeros((2, 4), np.float32)
    valid = np.ones((2, 4), bool)
    lengths = np.full((2, 4), 3.0, np.float32)
    if kind == "all1":
        r[:] = 1
    elif kind == "one":
        valid[:] = False
        valid[1, 2] = True
        r[1, 2] = 1
    elif kind == "none":
        valid[:] = False
    elif kind == "nan_masked":
        r[0, 0], valid[0, 0], r[1, 1] = np.nan, False, 1
    elif kind == "zero_len":
        r[0, 0] = 1
        lengths[:] = 0
    adv = np.asarray(group_advantages(r, estimator=estimator, valid=valid, lengths=lengths))
    assert np.all(np.isfinite(adv)) and np.all(adv[~valid] == 0)
    if kind in ("all0", "all1", "one", "none", "zero_len"):
        assert np.all(adv == 0)
    g = jax.grad(lambda x: jnp.sum(whiten_advantages(x, jnp.asarray(valid), lengths=lengths) ** 2))(jnp.asarray(np.nan_to_num(r)))
    assert np.all(np.isfinite(np.asarray(g))) and np.all(np.asarray(g)[~valid] == 0)


@pytest.mark.parametrize("call, match", [
    (lambda: group_advantages(np.zeros((2, 3)), estimator="grpo", lengths=np.ones((2, 3))), "lengths is used by the 'reinforce_pp"),
    (lambda: group_advantages(np.zeros((2, 3)), estimator="reinforce_pp", lengths=np.ones((2, 4))), "lengths must have the same shape"),
    (lambda: whiten_advantages(np.zeros((2, 3), np.float32), std_ddof=-1), "std_ddof must be an int >= 0"),
    (lambda: whiten_advantages(np.zeros((2, 3), np.float32), eps=-1.0), "eps must be a finite number >= 0"),
])
def test_whiten_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
