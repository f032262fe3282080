"""theory.check_optimum: the built-in claims hold for n = 2..64, broken claims raise naming metric and n."""
import time

import jax.numpy as jnp
import numpy as np
import pytest

import theory


@pytest.fixture(scope="module")
def report():
    t0 = time.perf_counter()
    rep = theory.check_optimum()
    print(f"check_optimum: {time.perf_counter() - t0:.2f} s")
    return rep


def test_all_metrics_peak_at_half(report):
    assert report.n_values == tuple(range(2, 65))
    assert tuple(r.metric for r in report.results) == theory.metric_names()
    assert report.max_abs_error <= 1e-9
    for r in report.results:
        assert len(r.argmax) == 63 and r.unimodal
        np.testing.assert_allclose(r.argmax, 0.5, atol=1e-9)
        assert r.max_symmetry_error <= 1e-10
    d = report.to_dict()
    assert set(d["metrics"]) == set(theory.metric_names()) and d["tol"] == 1e-9
    assert "maximised at p = 1/2" in report.summary()


def test_asymmetric_metric_raises_with_name_and_n():
    def skewed(p, n):  # p(1-p) for n < 5, p²(1-p) (argmax 2/3) from n = 5 on
        return jnp.where(n < 5, p * (1 - p), p * p * (1 - p))

    with pytest.raises(theory.OptimumClaimError, match=r"'skewed', n=5: claim 'symmetric") as e:
        theory.check_optimum(n_values=range(2, 9), metrics={"skewed": skewed})
    assert e.value.metric == "skewed" and e.value.n == 5


def test_bimodal_metric_raises_unimodal():
    def twin_peaks(p, n):  # symmetric, maxima at 1/4 and 3/4
        return jnp.sin(2 * jnp.pi * p) ** 2 + 0 * n

    with pytest.raises(theory.OptimumClaimError, match="twin_peaks.*unimodal") as e:
        theory.check_optimum(n_values=[3, 4], metrics={"twin_peaks": twin_peaks})
    assert e.value.n == 3


def test_custom_symmetric_unimodal_metric_passes():
    # Symmetric about 1/2 and unimodal by construction: the bisection finds 1/2 to rounding.
    def flat_top(p, n):
        return -((p - 0.5) ** 2) + 0 * n

    rep = theory.check_optimum(n_values=[2], metrics={"flat_top": flat_top}, grid_size=64)
    assert rep.results[0].max_abs_error <= 1e-12


def test_bad_arguments():
    with pytest.raises(ValueError, match="grid_size"):
        theory.check_optimum(grid_size=7)
    with pytest.raises(ValueError, match="n_values"):
        theory.check_optimum(n_values=[2, 0])
    with pytest.raises(ValueError, match="n_values"):
        theory.check_optimum(n_values=[2.5])
