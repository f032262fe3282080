"""Tests for prs.core.prefix: the Prefix Sampling controller."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as px

NS = (2, 4, 5, 8, 16)


def _ref_bucket(k, n, mode, hard_max=None, easy_min=None):
    """Pure-Python reference: the bucket list is hard ks (1..floor(n/4)) then easy ks (n-floor(n/4)..n-1)."""
    hm = n // 4 if hard_max is None else hard_max
    em = n - n // 4 if easy_min is None else easy_min
    hard = list(range(1, hm + 1))
    easy = list(range(em, n))
    ks = hard + easy
    if k not in ks or mode == "baseline":
        return -1
    if mode == "ps_ada_hard" and k in easy:
        return -1
    return ks.index(k)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("mode", px.MODES)
def test_assign_buckets_every_k(n, mode):
    cfg = px.PrefixConfig(mode=mode, n=n)
    k = np.arange(-1, n + 2)  # includes out-of-range k on both sides
    got = np.asarray(px.assign_buckets(jnp.asarray(k), cfg))
    want = np.array([_ref_bucket(int(x), n, mode) for x in k])
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int32
    ks = px.bucket_ks(cfg)
    assert len(ks) == cfg.num_buckets == len(px.bucket_direction(cfg))
    # every assigned bucket's k is the group's k, and its direction matches the side of n/2
    for kk, b in zip(k, got):
        if b >= 0:
            assert ks[b] == kk
            assert px.bucket_direction(cfg)[b] == (1 if kk < n / 2 else -1)


def test_paper_buckets_for_n8():
    # The source's N = 8 table: hard 1/8, 2/8 (success prefix), easy 6/8, 7/8 (failure prefix).
    cfg = px.PrefixConfig(n=8)
    np.testing.assert_array_equal(px.bucket_ks(cfg) / 8, [0.125, 0.25, 0.75, 0.875])
    np.testing.assert_array_equal(px.bucket_direction(cfg), [1, 1, -1, -1])


def test_custom_thresholds():
    cfg = px.PrefixConfig(n=16, hard_max=2, easy_min=15)
    k = np.arange(17)
    got = np.asarray(px.assign_buckets(jnp.asarray(k), cfg))
    want = [_ref_bucket(int(x), 16, "ps_ada", 2, 15) for x in k]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(px.bucket_ks(cfg), [1, 2, 15])


@pytest.mark.parametrize("kwargs", [
    dict(n=1), dict(n=0), dict(mode="ps_magic"), dict(rho_init=0.0), dict(rho_init=1.0),
    dict(rho_init=(0.5, 1.2)), dict(rho_init=(0.5,)), dict(rho_min=0.0), dict(rho_max=1.0),
    dict(rho_min=0.8, rho_max=0.2), dict(target=0.0), dict(target=1.5), dict(ema_decay=1.0),
    dict(ema_decay=-0.1), dict(gain=-1.0), dict(n=8, hard_max=4, easy_min=4),
    dict(n=8, hard_max=8), dict(n=8, easy_min=0), dict(n=8, hard_max=-1),
])
def test_bad_config_raises(kwargs):
    with pytest.raises(ValueError):
        px.PrefixConfig(**kwargs)


def test_config_is_hashable_and_pair_rho_init():
    cfg = px.PrefixConfig(rho_init=[0.3, 0.6])
    assert hash(cfg) == hash(px.PrefixConfig(rho_init=(0.3, 0.6)))
    st = px.init(cfg)
    np.testing.assert_allclose(st.rho, np.where(px.bucket_direction(cfg) > 0, 0.3, 0.6))


def _rewards_with_k(rng, k, n):
    """[B, N] 0/1 rewards with exactly k_i ones per row, in random positions."""
    r = (np.arange(n)[None, :] < np.asarray(k)[:, None]).astype(np.float32)
    return rng.permuted(r, axis=1)


def test_choose_sources_picks_right_kind_and_is_seeded():
    cfg = px.PrefixConfig(n=8)
    rng = np.random.default_rng(0)
    k = np.tile(np.arange(9), 20)  # [B]
    rewards = _rewards_with_k(rng, k, 8)
    bucket = px.assign_buckets(jnp.asarray(k), cfg)
    src = np.asarray(px.choose_sources(jax.random.key(1), jnp.asarray(rewards), bucket, cfg))
    d = px.bucket_direction(cfg)
    b = np.asarray(bucket)
    for i in range(len(k)):
        if b[i] < 0:
            assert src[i] == -1
        else:
            assert 0 <= src[i] < 8
            assert rewards[i, src[i]] == (1.0 if d[b[i]] > 0 else 0.0)
    again = px.choose_sources(jax.random.key(1), jnp.asarray(rewards), bucket, cfg)
    np.testing.assert_array_equal(src, again)
    other = np.asarray(px.choose_sources(jax.random.key(2), jnp.asarray(rewards), bucket, cfg))
    assert (other != src).any()


def test_choose_sources_uniform():
    # A 2/8 group (successes at columns 1 and 5) and a 6/8 group (failures at columns 0 and 3):
    # each candidate must be chosen with probability 1/2; 4000 draws, 5-sigma band.
    cfg = px.PrefixConfig(n=8)
    rewards = np.zeros((2, 8), np.float32)
    rewards[0, [1, 5]] = 1.0
    rewards[1] = 1.0
    rewards[1, [0, 3]] = 0.0
    bucket = px.assign_buckets(jnp.asarray(rewards.sum(1).astype(np.int32)), cfg)
    keys = jax.random.split(jax.random.key(0), 4000)
    src = np.asarray(jax.vmap(lambda kk: px.choose_sources(kk, jnp.asarray(rewards), bucket, cfg))(keys))
    assert set(src[:, 0]) == {1, 5} and set(src[:, 1]) == {0, 3}
    sigma = math.sqrt(0.25 / 4000)
    assert abs((src[:, 0] == 1).mean() - 0.5) < 5 * sigma
    assert abs((src[:, 1] == 0).mean() - 0.5) < 5 * sigma


def test_choose_sources_respects_valid_and_shapes():
    cfg = px.PrefixConfig(n=4)
    rewards = jnp.asarray([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    valid = jnp.asarray([[True] * 4, [False, True, True, True]])
    bucket = jnp.asarray([-1, 0], jnp.int32)
    keys = jax.random.split(jax.random.key(3), 50)
    src = jax.vmap(lambda kk: px.choose_sources(kk, rewards, bucket, cfg, valid=valid))(keys)
    np.testing.assert_array_equal(src, -1)  # bucket -1, and the only success is invalid
    with pytest.raises(ValueError, match="rewards"):
        px.choose_sources(jax.random.key(0), jnp.zeros((2, 5)), bucket, cfg)
    with pytest.raises(ValueError, match="bucket"):
        px.choose_sources(jax.random.key(0), rewards, jnp.zeros((3,), jnp.int32), cfg)
    with pytest.raises(ValueError, match="valid"):
        px.choose_sources(jax.random.key(0), rewards, bucket, cfg, valid=jnp.ones((2, 3), bool))


def test_cut_points_rule_and_clamps():
    cfg = px.PrefixConfig(n=8)
    rho = np.array([0.05, 0.3, 0.5, 0.95], np.float32)
    st = px.init(cfg)._replace(rho=jnp.asarray(rho))
    rng = np.random.default_rng(0)
    B = 400
    bucket = rng.integers(-1, 4, B).astype(np.int32)
    L = rng.integers(0, 40, B).astype(np.int32)
    got = np.asarray(px.cut_points(st, jnp.asarray(bucket), jnp.asarray(L), cfg))
    want = np.zeros(B, np.int64)
    for i in range(B):
        if bucket[i] >= 0 and L[i] >= 2:
            c = int(np.round(np.float32(rho[bucket[i]]) * np.float32(L[i])))
            want[i] = min(max(c, 1), L[i] - 1)
    np.testing.assert_array_equal(got, want)
    ok = (bucket >= 0) & (L >= 2)
    assert ((got[ok] >= 1) & (got[ok] <= L[ok] - 1)).all()
    # the clamps are exercised: rho*L rounds to 0 (clamped up to 1) and to L (clamped down to L-1)
    small = px.cut_points(st, jnp.asarray([0, 3, 2, 2]), jnp.asarray([5, 10, 2, 1]), cfg)
    np.testing.assert_array_equal(small, [1, 9, 1, 0])


def test_prefix_mask():
    m = np.asarray(px.prefix_mask(jnp.asarray([0, 2, 5]), 4))
    np.testing.assert_array_equal(m, np.arange(4)[None, :] < np.array([0, 2, 5])[:, None])


def _logit(x):
    return np.log(x) - np.log1p(-x)


def test_update_matches_numpy_reference():
    cfg = px.PrefixConfig(n=8, ema_decay=0.7, gain=1.3)
    st = px.init(cfg)
    rng = np.random.default_rng(5)
    rho, ema, cnt = np.asarray(st.rho, np.float64), np.asarray(st.ema, np.float64), np.zeros(4, int)
    s = px.bucket_direction(cfg)
    for _ in range(6):
        bucket = rng.integers(-1, 4, 7).astype(np.int32)
        bucket[0] = 1  # bucket 1 is always observed, bucket 3 never (below)
        bucket[bucket == 3] = -1
        rate = rng.integers(0, 9, 7) / 8.0
        rate[bucket < 0] = np.nan  # ignored entries may hold anything
        st = px.update(st, jnp.asarray(bucket), jnp.asarray(rate, jnp.float32), cfg)
        for b in range(4):
            obs = rate[bucket == b]
            if len(obs) == 0:
                continue
            m = obs.mean()
            ema[b] = m if cnt[b] == 0 else 0.7 * ema[b] + 0.3 * m
            cnt[b] += 1
            z = _logit(rho[b]) + 1.3 * s[b] * (0.5 - ema[b])
            rho[b] = np.clip(1 / (1 + np.exp(-z)), 0.05, 0.95)
        np.testing.assert_allclose(st.ema, ema, rtol=1e-5)
        np.testing.assert_allclose(st.rho, rho, rtol=1e-5)
        np.testing.assert_array_equal(st.count, cnt)
    assert cnt[3] == 0 and float(st.rho[3]) == 0.5 and float(st.ema[3]) == 0.5
    assert np.isfinite(np.asarray(st.rho)).all()


def test_modes_fix_and_hard_only():
    bucket = jnp.asarray([0, 1, 2, 3], jnp.int32)
    rate = jnp.asarray([0.1, 0.2, 0.9, 0.8])
    for mode, moves in [("ps_fix", [False] * 4), ("ps_ada_hard", [True, True, False, False]),
                        ("ps_ada", [True] * 4), ("baseline", [False] * 4)]:
        cfg = px.PrefixConfig(mode=mode)
        st = px.update(px.init(cfg), bucket, rate, cfg)
        np.testing.assert_array_equal(np.asarray(st.rho) != 0.5, moves, err_msg=mode)
        np.testing.assert_allclose(st.ema, rate)  # the EMA is tracked in every mode


def _closed_loop(cfg, p_of_rho, steps, groups=0, seed=0):
    """Run update against a simulated pass-rate curve p_of_rho(rho [K]) -> [K] (jax); groups=0 means
    noiseless observations, else Binomial(n, p)/n per group. Returns rho, ema, p histories [steps, K]."""
    K = cfg.num_buckets
    g = max(groups, 1)
    bucket = jnp.repeat(jnp.arange(K, dtype=jnp.int32), g)  # [K*g]

    def step(st, key):
        p = p_of_rho(st.rho)  # [K]
        pg = jnp.repeat(p, g)
        if groups:
            rate = jax.random.binomial(key, cfg.n, pg).astype(jnp.float32) / cfg.n
        else:
            rate = pg
        st = px.update(st, bucket, rate, cfg)
        return st, (st.rho, st.ema, p)

    _, hist = jax.lax.scan(step, px.init(cfg), jax.random.split(jax.random.key(seed), steps))
    return [np.asarray(h) for h in hist]


def _curves(cfg):
    """Monotone pass-rate curves of a chain task: a success prefix of fraction rho leaves (1 - rho) of
    the steps, p = p0^(1 - rho); a failure prefix of fraction rho leaves a recovery-handicapped task,
    p = p0^(1 / (1 - rho)). p0 = k/n, so rho = 0 keeps the group's pass rate."""
    p0 = jnp.asarray(px.bucket_ks(cfg) / cfg.n, jnp.float32)
    hard = jnp.asarray(px.bucket_direction(cfg) > 0)
    return lambda rho: jnp.where(hard, p0 ** (1.0 - rho), p0 ** (1.0 / (1.0 - rho)))


@pytest.mark.parametrize("rho_init", [0.1, 0.9])
def test_controller_reaches_target_from_both_sides(rho_init):
    cfg = px.PrefixConfig(n=8, rho_init=rho_init)
    curve = _curves(cfg)
    rho, ema, p = _closed_loop(cfg, curve, steps=150)
    np.testing.assert_allclose(p[-1], 0.5, atol=0.01)
    np.testing.assert_allclose(ema[-1], 0.5, atol=0.01)
    # the fixed point is the analytic root of p(rho) = 0.5 for each curve
    p0 = px.bucket_ks(cfg) / 8
    root = np.where(px.bucket_direction(cfg) > 0, 1 - np.log(0.5) / np.log(p0), 1 - np.log(p0) / np.log(0.5))
    np.testing.assert_allclose(rho[-1], root, atol=0.02)
    # noisy: 4 groups of 8 per bucket per step; the long-run mean pass rate sits near the target
    _, _, pn = _closed_loop(cfg, curve, steps=400, groups=4, seed=1)
    np.testing.assert_allclose(pn[100:].mean(0), 0.5, atol=0.04)


@pytest.mark.parametrize("target", [0.3, 0.7])
def test_controller_other_targets(target):
    cfg = px.PrefixConfig(n=8, target=target)
    _, _, p = _closed_loop(cfg, _curves(cfg), steps=200)
    np.testing.assert_allclose(p[-1], target, atol=0.01)


def test_controller_clamps_when_target_unreachable():
    cfg = px.PrefixConfig(n=8, rho_min=0.1, rho_max=0.8)
    # hard curve never reaches 0.5 (p <= 0.3); easy curve never drops below 0.6
    curve = lambda rho: jnp.where(jnp.asarray(px.bucket_direction(cfg) > 0), 0.3 * rho, 0.6 + 0.0 * rho)
    rho, _, _ = _closed_loop(cfg, curve, steps=100)
    np.testing.assert_allclose(rho[-1], [0.8, 0.8, 0.8, 0.8], atol=1e-6)
    assert (rho >= 0.1 - 1e-7).all() and (rho <= 0.8 + 1e-7).all()
    # pass rate too high everywhere for hard buckets -> rho pinned at rho_min
    curve_hi = lambda rho: 0.9 + 0.05 * rho
    rho, _, _ = _closed_loop(cfg, curve_hi, steps=100)
    hard = px.bucket_direction(cfg) > 0
    np.testing.assert_allclose(rho[-1][hard], 0.1, atol=1e-6)
    np.testing.assert_allclose(rho[-1][~hard], 0.8, atol=1e-6)


def test_no_buckets_for_n2():
    cfg = px.PrefixConfig(n=2)
    assert cfg.num_buckets == 0
    st = px.init(cfg)
    bucket = px.assign_buckets(jnp.asarray([0, 1, 2]), cfg)
    np.testing.assert_array_equal(bucket, -1)
    np.testing.assert_array_equal(px.cut_points(st, bucket, jnp.asarray([5, 5, 5]), cfg), 0)
    src = px.choose_sources(jax.random.key(0), jnp.asarray([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]), bucket, cfg)
    np.testing.assert_array_equal(src, -1)
    st2 = px.update(st, bucket, jnp.asarray([0.5, 0.5, 0.5]), cfg)
    assert st2.rho.shape == (0,)


def test_jit_no_recompile_across_steps():
    cfg = px.PrefixConfig(n=8)
    traces = []

    def step(st, key, rewards, source_len):
        traces.append(1)
        k = rewards.sum(1).astype(jnp.int32)
        bucket = px.assign_buckets(k, cfg)
        src = px.choose_sources(key, rewards, bucket, cfg)
        cut = px.cut_points(st, bucket, source_len, cfg)
        st = px.update(st, bucket, jnp.full(k.shape, 0.25), cfg)
        return st, src, cut

    jstep = jax.jit(step)
    st = px.init(cfg)
    rng = np.random.default_rng(0)
    for i in range(5):
        rewards = jnp.asarray(_rewards_with_k(rng, rng.integers(0, 9, 16), 8))
        st, _, _ = jstep(st, jax.random.key(i), rewards, jnp.asarray(rng.integers(0, 30, 16), jnp.int32))
    assert len(traces) == 1
    assert int(st.count.max()) >= 1
    # update with the config as a static argument, the documented form
    jup = jax.jit(px.update, static_argnames="cfg")
    st = px.init(cfg)
    for i in range(3):
        st = jup(st, jnp.asarray([0, 1, 2, 3, -1]), jnp.full((5,), 0.1 * i), cfg=cfg)
    assert jup._cache_size() == 1


def test_shape_errors():
    cfg = px.PrefixConfig()
    st = px.init(cfg)
    with pytest.raises(ValueError, match="k must"):
        px.assign_buckets(jnp.zeros((2, 2), jnp.int32), cfg)
    with pytest.raises(ValueError, match="source_len"):
        px.cut_points(st, jnp.zeros((3,), jnp.int32), jnp.zeros((4,), jnp.int32), cfg)
    with pytest.raises(ValueError, match="reroll_pass_rate"):
        px.update(st, jnp.zeros((3,), jnp.int32), jnp.zeros((2,)), cfg)
    with pytest.raises(ValueError, match="buckets"):
        px.update(st, jnp.zeros((3,), jnp.int32), jnp.zeros((3,)), px.PrefixConfig(n=16))


def test_traced_target_override_matches_static_target():
    # a sweep vmaps the target; it must give the same state as a config with that target
    bucket = jnp.asarray([0, 1, 2, 3, 0], jnp.int32)
    rate = jnp.asarray([0.2, 0.4, 0.6, 0.9, 0.3])
    cfg = px.PrefixConfig(n=8)
    targets = jnp.asarray([0.3, 0.5, 0.7])
    got = jax.vmap(lambda t: px.update(px.init(cfg), bucket, rate, cfg, target=t).rho)(targets)
    for i, t in enumerate([0.3, 0.5, 0.7]):
        c = px.PrefixConfig(n=8, target=t)
        np.testing.assert_allclose(got[i], px.update(px.init(c), bucket, rate, c).rho, rtol=1e-6)
