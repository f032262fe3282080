"""Tests for prs.sim: the synthetic learner, its exact policy gradient, seeds, sweep statistics."""
import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.core import prefix as px
from prs import sim
from prs.sim import simulator
from prs.core.advantages import group_advantages

TINY = dict(n_tasks=16, chain_len=4, groups=8, steps=60, lr=3.0)  # one compiled program shared by the tests


def _np_sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def test_success_prob_closed_form_and_monte_carlo():
    rng = np.random.default_rng(0)
    theta = rng.normal(1.0, 1.0, (3, 5)).astype(np.float32)
    offset = np.where(rng.random((3, 5)) < 0.3, -2.0, 0.0).astype(np.float32)
    replay = rng.random((3, 5)) < 0.3
    q = _np_sigmoid(theta + offset)
    want = np.prod(np.where(replay, 1.0, q), axis=1)
    got = sim.success_prob(jnp.asarray(theta), jnp.asarray(offset), jnp.asarray(replay))
    np.testing.assert_allclose(got, want, rtol=1e-5)
    # the sampler's success frequency matches the closed form (5-sigma binomial band)
    n = 40000
    ro = sim.sample_rollouts(jax.random.key(1), jnp.asarray(theta), jnp.asarray(offset), jnp.asarray(replay), n=n)
    freq = np.asarray(ro.reward.mean(1))
    assert (np.abs(freq - want) < 5 * np.sqrt(want * (1 - want) / n) + 1e-4).all(), (freq, want)
    # a rollout stops at its first failure: steps reached = 1 + index of the first failure
    out = np.asarray(ro.outcome)
    first_fail = np.where((out == 0).any(-1), (out == 0).argmax(-1) + 1, 5)
    np.testing.assert_array_equal(ro.length, first_fail)
    pol = np.asarray(ro.policy)
    np.testing.assert_array_equal(pol, (np.arange(5)[None, None, :] < first_fail[..., None]) & ~replay[:, None, :])


def test_success_prob_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    theta = rng.normal(0.5, 1.0, (2, 4))
    offset = np.array([[-3.0, 0, 0, 0], [0, 0, 0, 0]])
    replay = np.array([[False] * 4, [True, False, False, False]])
    f = lambda th: float(np.sum(np.prod(np.where(replay, 1.0, _np_sigmoid(th + offset)), axis=1)))  # noqa: E731
    g = np.asarray(jax.grad(lambda th: sim.success_prob(th, jnp.asarray(offset, jnp.float32),
                                                        jnp.asarray(replay)).sum())(jnp.asarray(theta, jnp.float32)))
    h = 1e-5
    fd = np.zeros_like(theta)
    for i, j in itertools.product(range(2), range(4)):
        e = np.zeros_like(theta)
        e[i, j] = h
        fd[i, j] = (f(theta + e) - f(theta - e)) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-3, atol=1e-6)
    assert g[1, 0] == 0.0  # replayed step: no gradient


def test_score_function_gradient_is_unbiased_and_prefix_masked():
    # E[(1/N) sum_i A_i grad log pi_i] equals grad P exactly, for leave-one-out advantages and for
    # plain REINFORCE (A = r). Prefix masking: the replayed steps are not policy decisions. Without
    # the mask, REINFORCE credits them with E[r (1 - q)] = P (1 - q) > 0 (biased); with a group-
    # centred advantage (sum_i A_i = 0) their identical score (1 - q) cancels exactly instead.
    theta = jnp.asarray([[1.0, 0.5, 2.0, -0.3, 1.5], [0.2, 0.1, 1.0, 0.4, 0.0]])
    offset = jnp.asarray([[-3.0, -3.0, 0, 0, 0], [0.0] * 5])
    replay = jnp.asarray([[False] * 5, [True, True, False, False, False]])
    exact = np.asarray(jax.grad(lambda th: sim.success_prob(th, offset, replay).sum())(theta))

    def est(key):
        ro = sim.sample_rollouts(key, theta, offset, replay, n=8)
        bad = ro._replace(policy=ro.policy | replay[:, None, :])
        loo = group_advantages(ro.reward, estimator="rloo")
        return (sim.policy_gradient(theta, ro, loo), sim.policy_gradient(theta, bad, loo),
                sim.policy_gradient(theta, ro, ro.reward), sim.policy_gradient(theta, bad, ro.reward))

    keys = jax.random.split(jax.random.key(0), 6000)
    loo, loo_bad, rf, rf_bad = (np.asarray(x) for x in jax.jit(jax.vmap(est))(keys))
    for g in (loo, rf):
        se = g.std(0) / math.sqrt(len(keys))
        assert (np.abs(g.mean(0) - exact) < 5 * se + 1e-5).all(), (g.mean(0), exact, se)
    np.testing.assert_allclose(loo_bad, loo, atol=1e-6)  # exact cancellation per sample
    q = _np_sigmoid(np.asarray(theta[1, :2]))
    bias = float(sim.success_prob(theta, offset, replay)[1]) * (1 - q)
    se = rf_bad.std(0)[1, :2] / math.sqrt(len(keys))
    assert (np.abs(rf_bad.mean(0)[1, :2] - bias) < 5 * se).all() and (bias > 10 * se).all()


def test_policy_gradient_equals_closed_form_score():
    ro = sim.sample_rollouts(jax.random.key(3), jnp.zeros((2, 4)) + 0.7, jnp.zeros((2, 4)),
                             jnp.asarray([[False] * 4, [True, False, False, False]]), n=6)
    adv = jax.random.normal(jax.random.key(4), (2, 6))
    theta = jnp.zeros((2, 4)) + 0.7
    got = sim.policy_gradient(theta, ro, adv)
    q = _np_sigmoid(0.7)
    score = np.where(np.asarray(ro.policy), np.asarray(ro.outcome) - q, 0.0)  # [B, N, L]
    want = np.einsum("bn,bnl->bl", np.asarray(adv), score) / 6
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_initial_difficulty_distribution():
    cfg = sim.SimConfig(n_tasks=4000, chain_len=5, groups=8)
    init = jax.jit(sim.initial_theta, static_argnums=2)
    for name, d in sim.DIFFICULTIES.items():
        th = init(jax.random.key(0), sim.SimParams.make(name), cfg)
        assert th.shape == (4000, 5)
        np.testing.assert_allclose(th[:, 0], th[:, 4])  # spread evenly over the steps
        p0 = np.asarray(sim.success_prob(th))
        assert p0.min() >= cfg.p_lo - 1e-5 and p0.max() <= cfg.p_hi + 1e-5
        assert abs(p0.mean() - d.mean()) < 0.02, name  # clipping moves the mean by < 0.01


def test_seeds_reproducible_and_independent():
    cfg = sim.SimConfig(mode="ps_ada", **TINY)
    params = sim.SimParams.make("uniform")
    a = sim.simulate(cfg, params, seeds=4)
    b = sim.simulate(cfg, params, seeds=4, seed0=2)
    c = sim.simulate(cfg, params, seeds=4)
    np.testing.assert_array_equal(a["success"], c["success"])
    # seed s is the same run whatever else is in the vmapped batch
    np.testing.assert_allclose(a["success"][2:], b["success"][:2], rtol=1e-5, atol=1e-6)
    # different seeds differ
    assert len({tuple(np.round(x, 6)) for x in a["success"]}) == 4
    for k in ("success", "rho", "ema", "energy", "reroll_pass"):
        assert np.isfinite(a[k]).all(), k


def test_no_recompile_across_difficulty_and_target():
    cfg = sim.SimConfig(mode="ps_ada", **TINY)
    sim.simulate(cfg, sim.SimParams.make("uniform", 0.5), seeds=4)
    runner = simulator._runner(cfg)
    n0 = runner._cache_size()
    for d, t in [("bimodal", 0.3), ("hard_heavy", 0.7)]:
        sim.simulate(cfg, sim.SimParams.make(d, t), seeds=4)
    # (the runner is cached per config and shared with other tests in this process, which may have
    # compiled it for other seed counts: count the compiles this test adds, not the total)
    assert runner._cache_size() == n0 >= 1


def test_easy_case_converges_and_controller_tracks_target():
    # a population of moderately easy tasks: every method drives the population success rate up
    easy = sim.Difficulty((1.0,), (6.0,), (3.0,))  # mean initial success 2/3
    m = sim.simulate(sim.SimConfig(mode="ps_ada", **TINY), sim.SimParams.make(easy), seeds=4)
    assert (m["success"][:, -1] > 0.9).all()
    assert (m["success"][:, -1] > m["success0"] + 0.2).all()
    assert m["rerolled"].mean() > 0.05


def test_steps_to_reach_against_loop_reference():
    rng = np.random.default_rng(0)
    success = np.cumsum(rng.random((20, 30)) * 0.04, axis=1) + 0.2
    success0 = np.full(20, 0.2)
    steps, cens = sim.steps_to_reach(success, success0, reach=0.5)
    for s in range(20):
        thr = 0.2 + 0.5 * 0.8
        want = next((t + 1 for t in range(30) if success[s, t] >= thr), 31)
        assert steps[s] == want and cens[s] == (want == 31)
    with pytest.raises(ValueError, match="reach"):
        sim.steps_to_reach(success, success0, reach=0.0)
    with pytest.raises(ValueError, match="success"):
        sim.steps_to_reach(success, success0[:3])


def test_bootstrap_ci_covers_and_is_seeded():
    from prs.analysis.bootstrap import bootstrap_ci, speedup_ci

    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 1.0, 400)
    est, lo, hi = bootstrap_ci(x, seed=1)
    assert est == pytest.approx(x.mean())
    half = 1.96 * x.std(ddof=1) / math.sqrt(400)  # normal-theory interval as the reference
    assert lo == pytest.approx(x.mean() - half, abs=0.03) and hi == pytest.approx(x.mean() + half, abs=0.03)
    assert bootstrap_ci(x, seed=1) == (est, lo, hi)
    base, meth = rng.poisson(100, 200).astype(float), rng.poisson(50, 200).astype(float)
    r, lo, hi = speedup_ci(base, meth)
    assert r == pytest.approx(base.mean() / meth.mean()) and lo < r < hi
    with pytest.raises(ValueError):
        bootstrap_ci(np.ones(1))


@pytest.mark.parametrize("kwargs", [dict(n=1), dict(mode="x"), dict(groups=200, n_tasks=10), dict(chain_len=1),
                                    dict(lr=0.0), dict(recovery_handicap=-1.0), dict(p_lo=0.0), dict(steps=0)])
def test_bad_sim_config_raises(kwargs):
    with pytest.raises(ValueError):
        sim.SimConfig(**kwargs)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="target"):
        sim.SimParams.make("uniform", 1.0)
    with pytest.raises(ValueError):
        sim.Difficulty((1.0,), (1.0, 2.0), (1.0,))
    with pytest.raises(ValueError, match="shape"):
        sim.sample_rollouts(jax.random.key(0), jnp.zeros((2, 3)), jnp.zeros((2, 4)), jnp.zeros((2, 3), bool), n=2)


def test_dirichlet_steps_keep_the_task_success_and_spread_difficulty():
    cfg = sim.SimConfig(n_tasks=64, chain_len=6, groups=8, step_concentration=0.5)
    even = sim.SimConfig(n_tasks=64, chain_len=6, groups=8)
    params = sim.SimParams.make("uniform")
    th, th_even = (jax.jit(sim.initial_theta, static_argnums=2)(jax.random.key(0), params, c) for c in (cfg, even))
    np.testing.assert_allclose(sim.success_prob(th), sim.success_prob(th_even), rtol=1e-4, atol=1e-6)
    assert float(jnp.std(th, axis=1).mean()) > 0.5 and float(jnp.std(th_even, axis=1).max()) < 1e-5


def test_no_prefix_control():
    # The control re-rolls the same groups from scratch: its bucket EMAs stay at the skewed pass rates
    # (hard low, easy high), while with a prefix the controller pulls them toward 0.5; and the success
    # prefix saves policy decisions (replayed steps are not sampled).
    params = sim.SimParams.make("uniform")
    ps = sim.simulate(sim.SimConfig(mode="ps_ada", **TINY), params, seeds=4)
    ctl = sim.simulate(sim.SimConfig(mode="ps_ada", reroll_prefix=False, **TINY), params, seeds=4)
    hard = px.bucket_direction(sim.SimConfig(**TINY).prefix_config()) > 0
    ema_ps, ema_ctl = ps["ema"][:, -1].mean(0), ctl["ema"][:, -1].mean(0)
    assert (ema_ctl[hard] < 0.4).all() and (ema_ctl[~hard] > 0.6).all(), ema_ctl
    assert (np.abs(ema_ps - 0.5) < np.abs(ema_ctl - 0.5)).all(), (ema_ps, ema_ctl)
    assert ps["decisions"].sum() < ctl["decisions"].sum()


def test_hydra_config_composes_and_rejects_unknown_keys():
    from hydra import compose, initialize_config_dir

    from experiments import simulate as exp

    conf = str(__import__("pathlib").Path(__file__).resolve().parents[2] / "conf" / "simulate")
    with initialize_config_dir(config_dir=conf, version_base=None):
        raw = compose("config", overrides=["sweep=quick", "learner.steps=7", "sweep.targets=[0.4,0.6]"])
        cfg = exp.validate(raw)
        assert cfg.learner.steps == 7 and cfg.sweep.targets == [0.4, 0.6] and cfg.sweep.ns == [8]
        assert set(cfg.difficulties) == {"uniform", "easy_heavy", "hard_heavy", "bimodal"}
        # the YAML mixtures are the library's
        for name, d in cfg.difficulties.items():
            assert (tuple(d.weight), tuple(d.alpha), tuple(d.beta)) == dataclasses_astuple(sim.DIFFICULTIES[name])
        full = exp.validate(compose("config", overrides=["sweep=full"]))
        assert full.sweep.seeds >= 100 and full.sweep.ns == [4, 8, 16] and len(full.sweep.targets) == 5
        with pytest.raises(Exception):
            exp.validate(compose("config", overrides=["+learner.n_taks=3"]))
        nl = exp.validate(compose("config", overrides=["sweep=controls", "learner=noise_limited"]))
        assert (nl.learner.shared_dim, nl.learner.reroll_combine, nl.learner.n_tasks) == (64, "mean", 128)
        assert nl.sweep.control and nl.sweep.gap_k_start == 1
    assert exp.sim_config(cfg, "reroll_only", 8).reroll_prefix is False
    assert exp.sim_config(cfg, "reroll_only", 8).mode == "ps_ada"
    lr2 = exp.sim_config(cfg, "baseline_lr2", 8)
    assert lr2.mode == "baseline" and lr2.lr == 2 * cfg.learner.lr
    assert cfg.learner.reroll_combine == "sum" and cfg.learner.shared_dim == 0  # derived from SimConfig


def test_the_default_sweep_is_the_quick_one_and_the_full_one_is_named():
    """A bare ``python -m experiments.simulate`` runs the smoke sweep (issue #45): the defaults resolve to
    conf/simulate/sweep/quick.yaml as read by yaml (20 configurations), ``sweep=full`` to the 168 of full.yaml."""
    import dataclasses
    import pathlib

    import yaml
    from hydra import compose, initialize_config_dir

    from experiments import simulate as exp

    conf = pathlib.Path(__file__).resolve().parents[2] / "conf" / "simulate"

    def n_configs(sw):  # what run_sweep enumerates: adaptive modes x targets, the others once, the controls
        per = sum(len(sw["targets"]) if m in exp.ADAPTIVE else 1 for m in sw["modes"])
        return len(sw["ns"]) * len(sw["difficulties"]) * (per + (len(exp.CONTROLS) if sw["control"] else 0))

    with initialize_config_dir(config_dir=str(conf), version_base=None):
        default = dataclasses.asdict(exp.validate(compose("config")).sweep)
        full = dataclasses.asdict(exp.validate(compose("config", overrides=["sweep=full"])).sweep)
    for got, name, count in ((default, "quick", 20), (full, "full", 168)):
        want = yaml.safe_load((conf / "sweep" / f"{name}.yaml").read_text())
        assert {k: got[k] for k in want} == want, name
        assert n_configs(got) == count, name


def dataclasses_astuple(d):
    return (d.weight, d.alpha, d.beta)


def test_sweep_writes_metrics_summary_and_figures(tmp_path):
    from experiments import simulate as exp

    # TINY learner values: the compiled programs are shared with the tests above
    cfg = exp.SimulateCfg(
        learner=exp.LearnerCfg(**{k: v for k, v in TINY.items()}),
        sweep=exp.SweepCfg(modes=["baseline", "ps_ada"], ns=[8], difficulties=["uniform", "hard_heavy"],
                           targets=[0.3, 0.5], seeds=4, n_boot=50, control=False))
    lines = []
    res = exp.run(cfg, tmp_path, progress=lines.append)
    assert len(lines) == 2 * 1 + 2 * 2 + 1
    # each line's time is the whole configuration's (simulate + statistics), the simulation's share beside it
    for line, r in zip(lines, res["records"]):
        assert r["line_s"] >= r["wall_s"] > 0
        assert f"({r['line_s']:.1f} s: simulate {r['wall_s']:.1f} s" in line and "statistics" in line, line
    recs = res["records"]
    assert {(r["mode"], r["difficulty"], r["target"]) for r in recs} == {
        ("baseline", "uniform", 0.5), ("baseline", "hard_heavy", 0.5), ("ps_ada", "uniform", 0.3),
        ("ps_ada", "uniform", 0.5), ("ps_ada", "hard_heavy", 0.3), ("ps_ada", "hard_heavy", 0.5)}
    # speed-ups are recomputed from the steps (ratio of mean steps on the same seeds)
    for r in recs:
        b = next(x for x in recs if x["mode"] == "baseline" and x["difficulty"] == r["difficulty"])
        assert r["speedup"]["mean"] == pytest.approx(b["steps"]["mean"] / r["steps"]["mean"])
        assert r["speedup"]["lo"] <= r["speedup"]["mean"] <= r["speedup"]["hi"]
    assert len(res["best_targets"]) == 2
    # gap statistics (prs.analysis.gap) on the closed-form success curves, paired with the baseline
    for r in recs:
        if r["mode"] != "baseline":
            g = r["gap"]["gap80"]
            assert g["steps"]["lo"] <= g["steps"]["mean"] <= g["steps"]["hi"] and g["bound"] in ("exact", "upper", "lower", "both")
    assert "80% of the baseline's gap" in (tmp_path / "summary.md").read_text()
    for name in ("metrics.json", "summary.md", "speedup_vs_target.png", "speedup_vs_mix.png",
                 "controller_trajectories.png", "ablation.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert "| 8 | uniform |" in (tmp_path / "summary.md").read_text()


# --------------------------------------------------------------------------- noise-limited learner (issue #16)

ONE = dict(n_tasks=16, chain_len=4, groups=4, steps=1, lr=1.0)  # one step; 4 of 16 tasks in the batch


def _theta0(seed, params, cfg):
    import jax

    k_init, _ = jax.random.split(jax.random.key(seed))  # as in make_train
    return np.asarray(sim.initial_theta(k_init, params, cfg))


@functools.lru_cache(maxsize=None)
def _one_step(**kw):
    return sim.simulate(sim.SimConfig(**{**ONE, **kw}), sim.SimParams.make("uniform"), seeds=6)


def test_reroll_combine_mean_averages_the_two_groups_gradients():
    # Same seed -> same original rollouts and re-rollouts; one step moves a batch task's theta by
    # lr (g + g_re) ("sum") or lr (g + g_re) / 2 ("mean") if it was re-rolled and by lr g otherwise,
    # where "sum" and "mean" coincide; tasks outside the batch do not move.
    cfg = sim.SimConfig(**ONE)
    th0 = np.stack([_theta0(s, sim.SimParams.make("uniform"), cfg) for s in range(6)])
    out = {c: _one_step(mode="ps_fix", reroll_combine=c) for c in ("sum", "mean")}
    d_sum, d_mean = out["sum"]["theta"] - th0, out["mean"]["theta"] - th0  # [S, M, L]
    halved = np.all(np.isclose(d_mean, 0.5 * d_sum, atol=1e-5), axis=-1) & np.any(np.abs(d_sum) > 1e-4, axis=-1)
    same = np.all(np.isclose(d_mean, d_sum, atol=1e-5), axis=-1)
    assert np.all(halved | same)                                                       # each task one or the other
    np.testing.assert_allclose(halved.sum(1) / ONE["groups"], out["mean"]["rerolled"][:, 0], atol=1e-6)
    assert out["mean"]["rerolled"].mean() > 0.1
    assert (np.abs(d_sum).max(-1) > 0).sum(1).max() <= ONE["groups"]             # independent logits: batch only


def test_shared_dim_moves_every_task_within_the_feature_span():
    import jax

    params = sim.SimParams.make("uniform")
    m = _one_step(mode="baseline", shared_dim=3)
    M, L = ONE["n_tasks"], ONE["chain_len"]
    for s in range(2):
        th0 = _theta0(s, params, sim.SimConfig(**ONE))
        assert m["success0"][s] == pytest.approx(np.mean(np.prod(1 / (1 + np.exp(-th0)), -1)), rel=1e-5)
        k_init, _ = jax.random.split(jax.random.key(s))
        xi = np.asarray(jax.random.normal(jax.random.fold_in(k_init, 7), (M, L, 3))) / np.sqrt(3)  # [M, L, D]
        u = np.sqrt(0.5) * np.eye(3)[0] + np.sqrt(0.5) * xi                                       # shared_common 0.5
        d = (m["theta"][s] - th0).reshape(-1)                                                     # [M L]
        coef, *_ = np.linalg.lstsq(u.reshape(-1, 3), d, rcond=None)
        np.testing.assert_allclose(u.reshape(-1, 3) @ coef, d, atol=1e-5)       # d theta = U dw: in the span
        assert (np.abs(m["theta"][s] - th0).max(1) > 0).sum() > ONE["groups"]  # interference beyond the batch


@pytest.mark.parametrize("kwargs", [dict(reroll_combine="avg"), dict(shared_dim=-1), dict(shared_dim=1.5)])
def test_bad_noise_limited_config_raises(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        sim.SimConfig(**kwargs)


# ------------------------------------------------------------------ issue #16: crux, next_visit, extra_share


@pytest.mark.parametrize("crux", ["early", "late", "uniform"])
def test_crux_puts_its_share_on_one_step_and_keeps_the_task_success(crux):
    cfg = sim.SimConfig(n_tasks=500, chain_len=6, groups=8)
    init = jax.jit(sim.initial_theta, static_argnums=2)
    base = np.asarray(init(jax.random.key(0), sim.SimParams.make("hard_heavy"), cfg))
    th = np.asarray(init(jax.random.key(0), sim.SimParams.make("hard_heavy", crux=crux, crux_share=0.7), cfg))
    p0 = np.prod(_np_sigmoid(base), axis=1)
    np.testing.assert_allclose(np.prod(_np_sigmoid(th), axis=1), p0, rtol=1e-4)  # same P0 per task
    log_q = np.log(_np_sigmoid(th))                                               # [M, L]
    pos = log_q.argmin(1)
    np.testing.assert_allclose(log_q[np.arange(500), pos] / np.log(p0), 0.7, rtol=1e-3)
    if crux == "early":
        assert (pos == 0).all()
    elif crux == "late":
        assert (pos == 5).all()
    else:  # a uniform position per task
        assert np.bincount(pos, minlength=6).min() > 500 / 6 * 0.6


def test_next_visit_without_prefix_and_extra_share_zero_are_the_baseline():
    params = sim.SimParams.make("uniform")
    base = sim.simulate(sim.SimConfig(mode="baseline", **TINY), params, seeds=3)
    nv = sim.simulate(sim.SimConfig(mode="ps_ada", schedule="next_visit", reroll_prefix=False, **TINY), params, seeds=3)
    np.testing.assert_array_equal(nv["success"], base["success"])   # same keys, same rollouts, one group per task
    np.testing.assert_array_equal(nv["decisions"], base["decisions"])
    none = sim.simulate(sim.SimConfig(mode="ps_ada", **TINY), sim.SimParams.make("uniform", extra_share=0.0), seeds=3)
    np.testing.assert_allclose(none["success"], base["success"], rtol=1e-6)
    assert (none["rerolled"] == 0).all()
    half = sim.simulate(sim.SimConfig(mode="ps_ada", **TINY), sim.SimParams.make("uniform", extra_share=0.5), seeds=3)
    full = sim.simulate(sim.SimConfig(mode="ps_ada", **TINY), params, seeds=3)
    assert 0.3 < half["rerolled"].mean() / full["rerolled"].mean() < 0.7


def test_next_visit_steers_at_the_next_visit_without_extra_groups():
    cfg = sim.SimConfig(mode="ps_ada", schedule="next_visit", **TINY)
    m = sim.simulate(cfg, sim.SimParams.make("uniform"), seeds=4)
    B, N, L = TINY["groups"], 8, TINY["chain_len"]
    assert (m["rerolled"][:, 0] == 0).all()           # nothing is planned before a task's first visit
    assert m["rerolled"][:, 5:].mean() > 0.1          # later visits are steered
    assert (m["decisions"] <= B * N * L).all()        # one group of N per task and step: no re-roll on top
    steered = m["rerolled"] > 0
    assert 0.2 < m["reroll_pass"][steered].mean() < 0.85  # the controller pulls steered groups towards 0.5
    for k in ("success", "rho", "ema", "energy", "reroll_pass"):
        assert np.isfinite(m[k]).all(), k
    with pytest.raises(ValueError, match="schedule"):
        sim.SimConfig(schedule="later")
    with pytest.raises(ValueError, match="crux"):
        sim.SimParams.make("uniform", crux="middle")
