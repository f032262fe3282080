"""theory.controls against independent numpy Monte Carlo re-implementations of each control and the SNR."""
import numpy as np
import pytest

from theory import controls as C


def _np_adv(r, estimator):
    """Independent numpy advantages [S, N] (RLOO: r − mean of the others; GRPO: (r − mean)/(std_ddof1 + 1e-6))."""
    n = r.shape[1]
    if estimator == "rloo":
        return (r - (r.sum(1, keepdims=True) - r) / (n - 1))
    return (r - r.mean(1, keepdims=True)) / (r.std(1, ddof=1, keepdims=True) + 1e-6)


@pytest.mark.parametrize("estimator", ["rloo", "grpo"])
@pytest.mark.parametrize("tau", [0.0, 0.5])
def test_snr_exact_matches_monte_carlo(estimator, tau):
    rng = np.random.default_rng(0)
    n, S = 8, 400_000
    for p in (0.15, 0.5):
        r = (rng.random((S, n)) < p).astype(np.float64)
        s = r - p + np.sqrt(tau) * rng.standard_normal((S, n))  # score: outcome part + within-outcome noise
        g = np.mean(_np_adv(r, estimator) * s, axis=1)
        ex = C.gradient_snr(p, n, estimator=estimator, score_noise=tau)
        np.testing.assert_allclose(ex["mean"], g.mean(), atol=5 * g.std() / np.sqrt(S))
        np.testing.assert_allclose(ex["var"], g.var(), rtol=0.02)
        np.testing.assert_allclose(ex["snr"], g.mean() ** 2 / g.var(), rtol=0.04)


def test_snr_rloo_closed_form_and_speed_bound():
    p = np.linspace(0.0, 1.0, 101)
    for n in (2, 4, 8, 16):
        k = np.arange(n + 1)
        from scipy.stats import binom
        pk = binom.pmf(k[None, :], n, p[:, None])
        g = k * (n - k) / (n * (n - 1))
        var0 = pk @ (g * g) - (pk @ g) ** 2
        ex = C.gradient_snr(p, n, estimator="rloo")
        np.testing.assert_allclose(ex["mean"], p * (1 - p), atol=1e-6)  # RLOO unbiased: E[g] = dp/dtheta
        np.testing.assert_allclose(ex["var"], var0, atol=1e-9)
        # SPEED's bound holds for every p once the score noise reaches (N-1)/(4N) ...
        tau = C.snr_bound_noise(n)
        for t in (tau, 2 * tau, 10.0):
            b = C.gradient_snr(p, n, estimator="rloo", score_noise=t)
            assert np.all(b["snr"] <= b["bound"] + 1e-9), (n, t)
            assert np.all(np.isfinite(b["snr"]))
        # ... and vanishes at p -> 0, 1 (both sides)
        assert ex["snr"][0] == 0 and ex["snr"][-1] == 0
        # near p = 0 or 1 only k in {0, 1} (or {N-1, N}) matter: SNR -> N p, a quarter of the bound 4 N p (1 - p)
        edge = C.gradient_snr(np.array([1e-5, 1 - 1e-5]), n, estimator="rloo")
        np.testing.assert_allclose(edge["snr"] / edge["bound"], 0.25, rtol=1e-3)
    # without score noise (the one-logit policy) the bound fails at p = 1/2 for N >= 3: SNR = 28 > 8 at N = 8
    one = C.gradient_snr(0.5, 8, estimator="rloo")
    assert one["snr"] == pytest.approx(28.0, rel=1e-4) and one["bound"] == pytest.approx(8.0)


def _mc_pool(rng, pool, size):
    return rng.choice(pool.p, size=size, p=pool.w)


def test_controls_match_monte_carlo_numpy():
    rng = np.random.default_rng(1)
    pool = C.beta_pool(0.7, 0.9, size=512)
    n, B, S = 8, 6, 20_000
    # uniform
    p = _mc_pool(rng, pool, (S, B))
    k = rng.binomial(n, p)
    u = C.uniform(pool, n=n, groups=B)
    inf = ((k > 0) & (k < n)).sum(1)
    assert abs(inf.mean() - u.informative) < 5 * inf.std() / np.sqrt(S)
    # dynamic sampling: batches of G until >= B kept or C batches
    G, Cap = 5, 3
    p = _mc_pool(rng, pool, (S, Cap, G))
    k = rng.binomial(n, p)
    keep = ((k > 0) & (k < n)).sum(2)  # [S, C]
    cum = np.cumsum(keep, 1)
    T = np.where((cum >= B).any(1), (cum >= B).argmax(1) + 1, Cap)
    trained = np.minimum(cum[:, -1], B)
    ds = C.dynamic_sampling(pool, n=n, groups=B, gen_groups=G, max_batches=Cap)
    assert abs(T.mean() - ds.extra["expected_batches"]) < 5 * T.std() / np.sqrt(S)
    assert abs(trained.mean() - ds.groups) < 5 * trained.std() / np.sqrt(S) + 1e-9
    assert abs((T * G * n).mean() - ds.rollouts) < 5 * (T * G * n).std() / np.sqrt(S)
    # screen with G candidates per step
    Gs, n0 = 10, 4
    p = _mc_pool(rng, pool, (S, Gs))
    k0 = rng.binomial(n0, p)
    k1 = rng.binomial(n - n0, p)
    acc = (k0 > 0) & (k0 < n0)
    rank = np.cumsum(acc, 1)
    kept = acc & (rank <= B)
    kk = k0 + k1
    sig = np.where(kept, kk * (n - kk) / n ** 2, 0.0).sum(1)
    sc = C.screen(pool, n=n, groups=B, n_init=n0, candidates=Gs)
    roll = Gs * n0 + kept.sum(1) * (n - n0)
    assert abs(kept.sum(1).mean() - sc.informative) < 5 * kept.sum(1).std() / np.sqrt(S)
    assert abs(roll.mean() - sc.rollouts) < 5 * roll.std() / np.sqrt(S)
    assert abs(sig.mean() - sc.signal) < 5 * sig.std() / np.sqrt(S)
    # predicted (oracle): top B of M by p(1-p)
    M = 20
    p = _mc_pool(rng, pool, (S, M))
    top = np.take_along_axis(p, np.argsort(-(p * (1 - p)), 1)[:, :B], 1)
    s = (1 - top ** n - (1 - top) ** n).sum(1)
    pr = C.predicted(pool, n=n, groups=B, pool_size=M)
    assert abs(s.mean() - pr.informative) < 5 * s.std() / np.sqrt(S)


def test_ps_reroll_matches_monte_carlo():
    rng = np.random.default_rng(2)
    pool = C.beta_pool(1.0, 1.0, size=512)
    n, B, S, t = 8, 4, 50_000, 0.4
    p = _mc_pool(rng, pool, (S, B))
    k = rng.binomial(n, p)
    skew = ((k >= 1) & (k <= 2)) | ((k >= 6) & (k <= 7))  # ps_ada buckets at N = 8
    kr = rng.binomial(n, t, size=(S, B))
    inf = ((k > 0) & (k < n)).sum(1) + (skew & (kr > 0) & (kr < n)).sum(1)
    ps = C.ps_reroll(pool, n=n, groups=B, target=t)
    assert abs(inf.mean() - ps.informative) < 5 * inf.std() / np.sqrt(S)
    assert abs((n * B + n * skew.sum(1)).mean() - ps.rollouts) < 5 * (n * skew.sum(1)).std() / np.sqrt(S)


@pytest.mark.parametrize("fallback", [True, False])
def test_ps_reroll_replace_matches_monte_carlo(fallback):
    """reroll="replace" (prs's default): B groups trained, a bucketed group swapped for its re-roll when the
    re-roll is mixed (fallback) or always; informative groups and advantage energy k(N-k)/N^2 simulated."""
    rng = np.random.default_rng(5)
    pool = C.beta_pool(0.4, 0.9, size=512)
    n, B, S, t = 8, 4, 50_000, 0.4
    p = _mc_pool(rng, pool, (S, B))
    k = rng.binomial(n, p)
    skew = ((k >= 1) & (k <= 2)) | ((k >= 6) & (k <= 7))
    kr = rng.binomial(n, t, size=(S, B))
    swap = skew & (((kr > 0) & (kr < n)) if fallback else True)
    kt = np.where(swap, kr, k)                                             # the trained group's successes
    inf = ((kt > 0) & (kt < n)).sum(1)
    sig = (kt * (n - kt) / n ** 2).sum(1)
    ps = C.ps_reroll(pool, n=n, groups=B, target=t, reroll="replace", fallback=fallback)
    assert ps.groups == B
    assert abs(inf.mean() - ps.informative) < 5 * inf.std() / np.sqrt(S)
    assert abs(sig.mean() - ps.signal) < 5 * sig.std() / np.sqrt(S)
    assert abs((n * B + n * skew.sum(1)).mean() - ps.rollouts) < 5 * (n * skew.sum(1)).std() / np.sqrt(S)
    if fallback:  # every bucketed group is mixed already: replacing never changes the informative count
        assert ps.informative == pytest.approx(C.uniform(pool, n=n, groups=B).informative)
    with pytest.raises(ValueError, match="reroll must be one of 'add', 'replace'"):
        C.ps_reroll(pool, n=n, groups=B, reroll="swap")
    with pytest.raises(ValueError, match="fallback applies to reroll='replace' only"):
        C.ps_reroll(pool, n=n, groups=B, reroll="add", fallback=False)


def test_greso_stationary_matches_simulated_chain():
    """The per-task streak chain simulated with GRESO's rule (skip prob 1 - max(p_e^c, 0.01)) vs the linear solve."""
    rng = np.random.default_rng(3)
    n, steps, chains = 8, 4000, 400
    for p, pe, ph in ((0.05, 0.5, 0.5), (0.93, 0.3, 0.6), (0.5, 0.5, 0.5)):
        c = np.zeros(chains, int)
        easy = np.zeros(chains, bool)
        rolled = 0
        for t in range(steps):
            keep = np.where(c == 0, 1.0, np.maximum(np.where(easy, pe, ph) ** c, 0.01))
            go = rng.random(chains) < keep
            k = rng.binomial(n, p, chains)
            ae, ah = go & (k == n), go & (k == 0)
            c = np.where(ae, np.where(easy & (c > 0), c + 1, 1), np.where(ah, np.where(~easy & (c > 0), c + 1, 1),
                                                                           np.where(go, 0, c)))
            easy = np.where(ae, True, np.where(ah, False, easy))
            if t >= 500:
                rolled += go.sum()
        rate = rolled / (chains * (steps - 500))
        want = float(C.greso_stationary(p, n, p_easy=pe, p_hard=ph))
        assert abs(rate - want) < 0.02 * want + 0.002, (p, rate, want)


def test_degenerate_pools_give_zero_and_cap():
    for p in (0.0, 1.0):
        pool = C.finite_pool([p] * 5)
        rates = C.compare_controls(pool, n=8, groups=4, max_batches=3)
        for r in rates:
            d = r.to_dict()
            assert all(np.isfinite(v) for v in d.values() if isinstance(v, float)), d
            assert r.informative == 0 and r.signal == 0
        ds = rates[1]
        assert ds.extra["expected_batches"] == 3 and ds.extra["cap_prob"] == 1 and ds.groups == 0
        assert ds.rollouts == 3 * 4 * 8
        assert "n/a" in C.format_controls(rates, title="degenerate")
    snr = C.gradient_snr(np.array([0.0, 1.0]), 8, estimator="grpo", score_noise=1.0)
    assert np.all(snr["snr"] == 0) and np.all(np.isfinite(snr["var"]))


def test_hist_pool_fit_recovers_beta_and_point_mass():
    from scipy.stats import betabinom
    h = betabinom.pmf(np.arange(9), 8, 0.6, 1.4)
    pool, note = C.hist_pool(h)
    assert "Beta(0.6, 1.4)" in note
    u = C.uniform(pool, n=8, groups=1)
    assert u.informative == pytest.approx(1 - h[0] - h[-1], abs=2e-3)
    binom_h = np.array([0.25, 0.5, 0.25])  # exactly Binomial(2, 1/2): point mass
    pool, note = C.hist_pool(binom_h)
    assert pool.p.tolist() == [0.5] and "point mass" in note


@pytest.mark.parametrize("kwargs, match", [
    (dict(n_init=1), "n_init"), (dict(n_init=9), "n_init"), (dict(groups=0), "groups")])
def test_bad_arguments_raise(kwargs, match):
    pool = C.beta_pool(1, 1, size=8)
    with pytest.raises(ValueError, match=match):
        C.screen(pool, **{"n": 8, "groups": 4, **kwargs})


def test_bad_pool_and_hist_raise():
    with pytest.raises(ValueError, match="pool p"):
        C.finite_pool([0.5, 1.5])
    with pytest.raises(ValueError, match="--hist"):
        C.hist_pool([0.0, 0.0])
    with pytest.raises(ValueError, match="beta"):
        C.beta_pool(0, 1)


def test_the_theorys_dynamic_sampling_cap_default_is_the_trainers(capsys):
    """theory/ sits below prs.rl (tests/test_layout.py), so it cannot read the trainer's default; this pins
    them equal: ``python -m theory controls`` predicts the run ``schedule.select=dynamic_sampling`` makes."""
    import inspect
    import json

    from prs.rl import select as SEL
    from theory import cli

    cap = SEL.DEFAULTS["ds_max_gen_batches"]
    assert inspect.signature(C.compare_controls).parameters["max_batches"].default == cap

    def ds(*extra):  # a pool of rare contrast, where the cap binds: each cap gives other numbers
        cli.controls_main(["--beta", "0.02,0.02", "--groups", "8", "--json", *extra])
        return json.loads(capsys.readouterr().out)["controls"][1]
    assert ds() == ds("--max-batches", str(cap)) != ds("--max-batches", str(cap - 1))
