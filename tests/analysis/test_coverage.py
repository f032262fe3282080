"""The coverage simulation (``prs.analysis.coverage``, ``experiments.coverage``): its truths in closed
form, and the new estimator's actual coverage on a small simulated sweep where the truth is known."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from prs.analysis import coverage as C


def test_truths_in_closed_form_without_seed_spread():
    sc = C.Scenario(seed_sd=0.0, tau=20.0)
    t = C.truths(sc)
    steps = sc.steps
    p = lambda s: sc.y0 + (sc.y1 - sc.y0) * (1 - np.exp(-s / sc.tau))  # noqa: E731
    L = p(steps[:3]).mean() + 0.8 * (p(steps[-3:]).mean() - p(steps[:3]).mean())
    assert t["level"] == pytest.approx(L)
    xb = -sc.tau * math.log(1 - (L - sc.y0) / (sc.y1 - sc.y0))
    assert xb < sc.horizon and t["restricted"] == pytest.approx(1.9) and t["censored_share_base"] == 0.0
    area = lambda y: np.trapezoid(y, steps) / steps[-1]  # noqa: E731
    assert t["auc"] == pytest.approx(area(p(1.9 * steps)) - area(p(steps)))
    # a baseline slower than the horizon: the restricted truth falls below the planted speed-up
    slow = C.truths(dataclasses.replace(sc, tau=60.0, seed_sd=0.5))
    assert slow["censored_share_base"] > 0 and slow["restricted"] < 1.9


def test_simulated_evaluations_are_binomial_over_the_episodes():
    sc = C.Scenario(seeds=4000, seed_sd=0.0)
    steps, yb, ym = C.simulate_study(sc, np.random.default_rng(0))
    p = sc.y0 + (sc.y1 - sc.y0) * (1 - np.exp(-steps / sc.tau))
    assert np.all(np.round(yb * sc.episodes) == yb * sc.episodes)
    np.testing.assert_allclose(yb.mean(0), p, atol=4 * np.sqrt(0.25 / sc.episodes / 4000))
    np.testing.assert_allclose(yb.var(0), p * (1 - p) / sc.episodes, rtol=0.15)


def test_new_estimator_covers_the_planted_speedup_within_tolerance():
    """40 simulated studies of the committed design: the headline (restricted seed-mean-curve crossing,
    level per resample) must hold 1.9 in at least 0.95 - 3 SE of them (SE = sqrt(0.95 * 0.05 / 40) =
    0.034, so >= 85%), with a median estimate within 7% of 1.9 (3 SE of a median of 40 estimates whose
    sd is ~0.22). The old estimator (per-seed first crossing at a fixed level) misses on this sweep."""
    res = C.coverage_study(C.SCENARIOS[0], studies=40, n_boot=300, seed=1)
    tol = 0.95 - 3 * math.sqrt(0.95 * 0.05 / 40)
    e = res["estimators"]["restricted_mean_curve:speedup"]
    assert e["truth"] == 1.9
    assert e["coverage"] >= tol, e
    assert abs(e["median"] / 1.9 - 1) < 0.07, e
    assert e["no_interval"] == 0.0
    assert res["estimators"]["old:speedup"]["coverage"] < tol


def test_cli_writes_the_page_and_rerenders_it_from_the_numbers(tmp_path):
    from experiments import coverage as cli

    out = tmp_path / "cov.md"
    assert cli.main(["--studies", "3", "--n-boot", "50", "--scenarios", "committed", "--out", str(out)]) == 0
    page = out.read_text()
    assert "## committed" in page and "**new headline**" in page and "old: per-seed crossing" in page
    out.unlink()
    assert cli.main(["--render", str(tmp_path / "cov.json"), "--out", str(out)]) == 0
    assert out.read_text() == page


def test_mixture_of_one_design_twice_is_that_design_with_twice_the_units():
    """Stacking two copies of a design is the design with 2S units: same truths, same simulated law."""
    sc = C.Scenario(seeds=4, tau=60.0, seed_sd=0.5)
    mix = C.Mixture("twice", (sc, sc))
    assert mix.seeds == 8 and mix.speedup == sc.speedup and np.array_equal(mix.steps, sc.steps)
    t1, t2 = C.truths(dataclasses.replace(sc, seeds=8)), C.truths(mix)
    for k in t1:
        assert t2[k] == pytest.approx(t1[k], rel=1e-12, abs=1e-15), k
    steps, yb, ym = C.simulate_study(mix, np.random.default_rng(0))
    assert yb.shape == ym.shape == (8, steps.size)


def test_mixture_truths_match_a_monte_carlo_of_the_pooled_population():
    """Independent reference: draw many noise-free units from each part, pool them, and read the level,
    the area / equal-step differences and the restricted means off the pooled sample directly (crossings by
    a fine grid search, not the closed form). One part (a flat warm start, as this study's W=1) never
    reaches the pooled level: its units are censored at the horizon."""
    a = C.Scenario(seeds=3, y0=0.12, y1=0.20, tau=70.0, seed_sd=0.6, every=10, horizon=100)
    b = C.Scenario(seeds=1, y0=0.095, y1=0.105, tau=40.0, seed_sd=0.3, every=10, horizon=100)
    mix = C.Mixture("two warm starts", (a, b))
    tr = C.truths(mix)
    rng = np.random.default_rng(3)
    n = 60000
    t = mix.steps
    fine = np.linspace(0, 100, 5001)
    units = []
    for p in (a, b):
        tau = p.tau * np.exp(p.seed_sd * rng.normal(size=(n * p.seeds, 1)))
        units.append((p, tau))
    yb = np.concatenate([p.y0 + (p.y1 - p.y0) * (1 - np.exp(-t / tau)) for p, tau in units])
    ym = np.concatenate([p.y0 + (p.y1 - p.y0) * (1 - np.exp(-1.9 * t / tau)) for p, tau in units])
    mb = yb.mean(0)
    L = mb[:3].mean() + 0.8 * (mb[-3:].mean() - mb[:3].mean())
    assert tr["level"] == pytest.approx(L, abs=2e-4)
    area = lambda y: np.trapezoid(y, t, axis=1) / t[-1]  # noqa: E731
    assert tr["auc"] == pytest.approx(float((area(ym) - area(yb)).mean()), rel=0.02)
    assert tr["equal_step"] == pytest.approx(float((ym[:, -3:].mean(1) - yb[:, -3:].mean(1)).mean()), rel=0.02)
    assert b.y1 < tr["level"]          # the flat part never crosses: censored
    # restricted means by grid search on a subsample in the parts' proportions (first fine step at or above
    # the level, else never: censored at the horizon)
    cross = []
    for p, tau in units:
        curve = p.y0 + (p.y1 - p.y0) * (1 - np.exp(-fine[None, :] / tau[: 1500 * p.seeds]))
        hit = curve >= tr["level"]
        cross.append(np.where(hit.any(1), fine[np.argmax(hit, 1)], np.inf))
    xb = np.concatenate(cross)
    rm = np.minimum(xb, 100).mean() / np.minimum(xb / 1.9, 100).mean()
    assert tr["restricted"] == pytest.approx(rm, rel=0.02)
    assert tr["censored_share_base"] == pytest.approx(float(np.mean(xb > 100)), abs=0.02)
    assert tr["censored_share_base"] >= 0.25  # the flat part's quarter, at least


def test_mixture_refuses_parts_that_do_not_share_the_grid():
    with pytest.raises(ValueError, match="every part must share horizon"):
        C.Mixture("bad", (C.Scenario(horizon=80), C.Scenario(horizon=100)))
    with pytest.raises(ValueError, match="at least one Scenario"):
        C.Mixture("empty", ())


def test_a_higher_level_gives_nested_intervals_on_the_same_study():
    """``level`` reaches every estimator: on one simulated study and the same resamples, each 99.17%
    interval holds the 95% one, with the same point estimate."""
    sc = C.Scenario(seeds=6)
    study = C.simulate_study(sc, np.random.default_rng(4))
    lo95 = C.estimate_study(sc, *study, n_boot=400, seed=2)
    hi99 = C.estimate_study(sc, *study, n_boot=400, seed=2, level=1 - 0.05 / 6)
    for name in ("restricted", "restricted_mean_curve", "auc", "equal_step", "auc_plain", "equal_step_plain"):
        a, b = lo95[name], hi99[name]
        assert b["value"] == pytest.approx(a["value"]), name
        assert b["lo"] <= a["lo"] and a["hi"] <= b["hi"] and (b["lo"] < a["lo"] or a["hi"] < b["hi"]), name
    res = C.coverage_study(sc, studies=2, n_boot=50, level=0.9)
    assert res["level"] == 0.9
