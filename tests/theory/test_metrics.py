"""theory.metrics against pure-Python references (math.comb sums, math.log2) and the source's numbers."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import theory

PS = [0.0, 1e-3, 0.125, 0.3, 0.5, 0.61, 0.875, 1.0]


def py_entropy(p):
    return 0.0 if p in (0.0, 1.0) else -p * math.log2(p) - (1 - p) * math.log2(1 - p)


def py_expect(h, p, n):
    """Σₖ C(n,k) pᵏ(1−p)ⁿ⁻ᵏ h(k) in plain Python floats (0**0 == 1)."""
    return math.fsum(math.comb(n, k) * p**k * (1 - p) ** (n - k) * h(k) for k in range(n + 1))


@pytest.mark.parametrize("n", [1, 2, 3, 8, 17, 64])
def test_expectations_match_pure_python_sums_and_closed_forms(n):
    with jax.enable_x64(True):
        p = jnp.asarray(PS, dtype=jnp.float64)
        got = {
            "var": theory.expected_group_variance(p, n),
            "var_cf": theory.expected_group_variance_closed_form(p, n),
            "pairs": theory.expected_contrast_pairs(p, n),
            "pairs_cf": theory.expected_contrast_pairs_closed_form(p, n),
            "surv": theory.expected_survival(p, n),
            "surv_cf": theory.filter_survival(p, n),
            "ent": theory.expected_empirical_entropy(p, n),
        }
        assert all(v.dtype == jnp.float64 for v in got.values())
    ref = {
        "var": [py_expect(lambda k: k * (n - k) / n**2, q, n) for q in PS],
        "pairs": [py_expect(lambda k: k * (n - k), q, n) for q in PS],
        "surv": [py_expect(lambda k: float(0 < k < n), q, n) for q in PS],
        "ent": [py_expect(lambda k: py_entropy(k / n), q, n) for q in PS],
    }
    for key in ("var", "pairs", "surv", "ent"):
        np.testing.assert_allclose(np.asarray(got[key]), ref[key], rtol=1e-12, atol=1e-13, err_msg=key)
    for key in ("var", "pairs", "surv"):
        np.testing.assert_allclose(np.asarray(got[key + "_cf"]), ref[key], rtol=1e-12, atol=1e-13, err_msg=key)


def test_binomial_pmf_sums_to_one_and_generic_expectation():
    with jax.enable_x64(True):
        p = jnp.linspace(0.0, 1.0, 11)
        ones = theory.binomial_expectation(lambda k, n: jnp.ones_like(k), p, 13)
        mean = theory.binomial_expectation(lambda k, n: k, p, 13)
        second = theory.binomial_expectation(lambda k, n: k * k, p, 13)
    np.testing.assert_allclose(ones, 1.0, atol=1e-13)
    np.testing.assert_allclose(mean, 13 * np.asarray(p), atol=1e-12)
    np.testing.assert_allclose(second, 13 * np.asarray(p) * (1 - np.asarray(p)) + (13 * np.asarray(p)) ** 2, atol=1e-11)


def test_vector_n_broadcasts_against_p():
    with jax.enable_x64(True):
        p = jnp.asarray([[0.2], [0.7]])  # [2, 1]
        n = np.asarray([[2, 5, 9]])  # [1, 3]
        got = np.asarray(theory.expected_contrast_pairs(p, n))
    ref = [[py_expect(lambda k, nn=nn: k * (nn - k), q, nn) for nn in (2, 5, 9)] for q in (0.2, 0.7)]
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_realised_k_metrics_match_python():
    for n in (1, 5, 8):
        k = np.arange(n + 1)
        np.testing.assert_allclose(theory.contrast_pairs(k, n), [kk * (n - kk) for kk in k])
        np.testing.assert_allclose(theory.group_reward_variance(k, n), [np.var([1] * kk + [0] * (n - kk)) for kk in k],
                                   rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(theory.empirical_entropy(k, n), [py_entropy(kk / n) for kk in k], rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(theory.group_survives(k, n), [float(0 < kk < n) for kk in k])


def test_source_numbers_recomputed():
    """Zhu et al. 2026 table: H(1/8) ≈ 0.544 bit; 7/64 ≈ 0.109 vs 0.25 (2.3×); 7 vs 16 pairs; 0.656 vs 0.992."""
    with jax.enable_x64(True):
        assert round(float(theory.reward_entropy(1 / 8)), 3) == 0.544
        assert float(theory.reward_entropy(0.5)) == 1.0
        var1, var4 = (float(theory.group_reward_variance(k, 8)) for k in (1, 4))
        assert round(var1, 3) == 0.109 and var4 == 0.25 and round(var4 / var1, 1) == 2.3
        assert var1 == float(theory.advantage_energy(1 / 8))
        assert [float(theory.contrast_pairs(k, 8)) for k in (1, 4)] == [7.0, 16.0]
        assert round(float(theory.filter_survival(1 / 8, 8)), 3) == 0.656
        assert round(float(theory.filter_survival(0.5, 8)), 3) == 0.992
        # Finite-n expectation from the source: E[k(N-k)] = N(N-1)p(1-p) peaks at 1/2.
        assert float(theory.expected_contrast_pairs(0.5, 8)) == pytest.approx(14.0, abs=1e-12)


def test_jit_and_dtypes():
    p = jnp.linspace(0.0, 1.0, 7)  # float32
    f = jax.jit(theory.reward_entropy)
    np.testing.assert_allclose(f(p), theory.reward_entropy(p), rtol=1e-6)
    g = jax.jit(theory.expected_group_variance, static_argnums=1)
    np.testing.assert_allclose(g(p, 8), theory.expected_group_variance_closed_form(p, 8), rtol=1e-5, atol=1e-7)
    assert g(p, 8).dtype == jnp.float32
    assert theory.reward_entropy(np.arange(3) / 2).dtype == jnp.float32  # x64 is not switched on globally
    jax.grad(lambda q: jnp.sum(theory.expected_empirical_entropy(q, 8)))(jnp.asarray([0.3, 0.6]))


def test_degenerate_inputs_are_finite():
    edge = jnp.asarray([0.0, 1.0])
    for v in (theory.reward_entropy(edge), theory.advantage_energy(edge), theory.filter_survival(edge, 1),
              theory.expected_empirical_entropy(edge, 1), theory.expected_group_variance(edge, 1),
              theory.expected_survival(edge, 64)):
        assert np.all(np.isfinite(np.asarray(v)))
        np.testing.assert_array_equal(np.asarray(v), 0.0)
    assert not np.signbit(np.asarray(theory.reward_entropy(edge))).any()
    # n = 1: a single rollout never has contrast.
    np.testing.assert_array_equal(theory.filter_survival(jnp.asarray([0.3]), 1), 0.0)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), [0.2, 2.0]])
def test_bad_probability_raises(bad):
    with pytest.raises(ValueError, match="p must"):
        theory.reward_entropy(bad)
    with pytest.raises(ValueError, match="p must"):
        theory.expected_group_variance(bad, 4)


@pytest.mark.parametrize("n", [0, -3, 2.5, True, "8"])
def test_bad_group_size_raises(n):
    with pytest.raises(ValueError, match="n must"):
        theory.filter_survival(0.3, n)
    with pytest.raises(ValueError, match="n must"):
        theory.expected_contrast_pairs(0.3, n)


def test_bad_k_raises():
    with pytest.raises(ValueError, match="k must satisfy"):
        theory.contrast_pairs(9, 8)
    with pytest.raises(ValueError, match="k must satisfy"):
        theory.group_reward_variance(np.array([0, -1]), 8)
    with pytest.raises(ValueError, match="k must be integers"):
        theory.empirical_entropy(1.5, 8)
    assert float(theory.contrast_pairs(8.0, 8)) == 0.0  # integral floats are fine


unit = st.floats(0.0, 1.0, allow_nan=False)
# Fixed shapes (16 values of p, four group sizes) so the property tests compile a handful of times.
ps16 = st.lists(unit, min_size=16, max_size=16)
sizes = st.sampled_from([1, 2, 8, 33])


def _metrics(n):
    return {
        "entropy": (theory.reward_entropy, 1.0),
        "energy": (theory.advantage_energy, 0.25),
        "survival": (lambda q: theory.filter_survival(q, n), 1.0),
        "E[var]": (lambda q: theory.expected_group_variance(q, n), 0.25),
        "E[H]": (lambda q: theory.expected_empirical_entropy(q, n), 1.0),
        "E[pairs]": (lambda q: theory.expected_contrast_pairs(q, n), n * n / 4),
    }


@settings(max_examples=15, deadline=None)
@given(p=ps16, n=sizes)
def test_property_symmetry_and_range(p, n):
    with jax.enable_x64(True):
        p = jnp.asarray(p, dtype=jnp.float64)
        for name, (f, hi) in _metrics(n).items():
            a, b = np.asarray(f(p)), np.asarray(f(1.0 - p))
            np.testing.assert_allclose(a, b, atol=1e-12 * max(hi, 1.0), err_msg=name)
            assert np.all((a >= -1e-15) & (a <= hi * (1 + 1e-12))), name


@settings(max_examples=15, deadline=None)
@given(p=ps16, n=sizes)
def test_property_monotone_on_each_side_of_half(p, n):
    with jax.enable_x64(True):
        p = np.sort(np.asarray(p))
        for name, (f, hi) in _metrics(n).items():
            v = np.asarray(f(jnp.asarray(p)))
            d = np.diff(v)
            tol = 1e-12 * max(hi, 1.0)
            assert np.all(d[p[1:] <= 0.5] >= -tol), name  # rising on [0, 1/2]
            assert np.all(d[p[:-1] >= 0.5] <= tol), name  # falling on [1/2, 1]
            assert np.all(np.asarray(f(jnp.full(16, 0.5))) >= v - tol), name


def test_one_compile_per_metric_and_shape():
    """New p values of the same shape reuse the compiled sum; a new n needs its own (static) compile."""
    from theory import metrics as mm

    p = jnp.asarray([0.1, 0.4, 0.9])
    mm.expected_group_variance(p, 11)
    size = mm._binomial_sum_jit._cache_size()
    for q in (0.2, 0.5, 0.7):
        mm.expected_group_variance(jnp.full(3, q), 11)
    assert mm._binomial_sum_jit._cache_size() == size
    mm.expected_group_variance(p, 12)
    assert mm._binomial_sum_jit._cache_size() == size + 1
