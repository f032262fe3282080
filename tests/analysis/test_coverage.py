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
