"""theory.partial_pass and theory.buckets vs brute-force enumeration in numpy / pure Python."""
import itertools
import math

import jax
import numpy as np
import pytest

import theory

EPS = 1e-6


def np_grpo(r):
    r = np.asarray(r, dtype=np.float64)
    return np.zeros_like(r) if r.max() == r.min() else (r - r.mean()) / (r.std(ddof=1) + EPS)


def brute_type_advantages(p_a, q, g, fail=0.5, r_b=0.7):
    """Enumerates all 3^G type sequences (small G): E[A_0 | type of rollout 0]."""
    pi = [(1 - q) * p_a, (1 - q) * (1 - p_a), q]
    vals = [1.0, fail, r_b]
    num, den = np.zeros(3), np.zeros(3)
    for seq in itertools.product(range(3), repeat=g):
        w = math.prod(pi[t] for t in seq)
        a = np_grpo([vals[t] for t in seq])
        num[seq[0]] += w * a[0]
        den[seq[0]] += w
    return num / den


def test_source_numbers():
    assert theory.surface_reward() == pytest.approx(0.7)
    assert float(theory.expected_reward_honest(0.2)) == pytest.approx(0.6)
    assert theory.break_even_p_honest() == pytest.approx(0.4)
    # At the break-even the two strategies tie.
    p_star = theory.break_even_p_honest(surface_tests=5, semantic_tests=5, fail_score=0.2)
    assert float(theory.expected_reward_honest(p_star, fail_score=0.2)) == pytest.approx(0.5)


@pytest.mark.parametrize("p_a,q", [(0.2, 0.75), (0.6, 0.3)])
def test_exact_advantages_match_brute_force(p_a, q):
    got = theory.grpo_type_advantages(p_a, q, group_size=5, method="exact")
    ref = brute_type_advantages(p_a, q, 5)
    np.testing.assert_allclose([got.honest_success, got.honest_fail, got.surface], ref, rtol=1e-9, atol=1e-12)
    assert got.honest_mean == pytest.approx(p_a * ref[0] + (1 - p_a) * ref[1])
    assert got.method == "exact"


def test_expected_advantage_is_zero_on_average_and_mc_agrees():
    """Σ_t π_t E[A|t] = E[A_i] = 0 (GRPO advantages sum to 0 in a group); MC matches exact."""
    exact = theory.grpo_type_advantages(0.2, 0.75, group_size=16)
    pi = theory.type_probabilities(0.2, 0.75)
    assert float(np.dot(pi, [exact.honest_success, exact.honest_fail, exact.surface])) == pytest.approx(0, abs=1e-12)
    mc = theory.grpo_type_advantages(0.2, 0.75, group_size=16, method="monte_carlo", num_samples=8000, seed=1)
    assert mc.method.startswith("monte_carlo")
    np.testing.assert_allclose([mc.honest_success, mc.honest_fail, mc.surface],
                               [exact.honest_success, exact.honest_fail, exact.surface], atol=0.08)


def test_trap_direction():
    """B-dominated groups: B gets a small advantage, failed honest fixes a negative one, net honest < 0."""
    a = theory.grpo_type_advantages(0.2, 0.9, group_size=16)
    assert a.honest_fail < 0 < a.surface < a.honest_success
    assert abs(a.surface) < abs(a.honest_fail) and a.honest_mean < 0


def test_contrast_probability_vs_enumeration():
    g, q, p_a = 4, 0.5, 0.3
    pi = [(1 - q) * p_a, (1 - q) * (1 - p_a), q]
    for kind, vals in (("fraction", [1.0, 0.5, 0.7]), ("binary", [1.0, 0.0, 0.0])):
        ref = sum(math.prod(pi[t] for t in seq) for seq in itertools.product(range(3), repeat=g)
                  if len({vals[t] for t in seq}) > 1)
        with jax.enable_x64(True):
            got = float(theory.contrast_probability(p_a, g, surface_fraction=q, reward=kind))
        assert got == pytest.approx(ref, abs=1e-14), kind
    # Honest-only groups: both rewards have contrast iff successes and failures mix.
    with jax.enable_x64(True):
        ps = np.array([0.05, 0.2, 0.5])
        for kind in ("fraction", "binary"):
            np.testing.assert_allclose(theory.contrast_probability(ps, 16, reward=kind),
                                       theory.filter_survival(ps, 16), atol=1e-14)
        # A tie (failed honest fix scores like the surface patch) merges two reward values.
        tie = float(theory.contrast_probability(0.3, 4, surface_fraction=0.5, fail_score=0.7))
        assert tie == pytest.approx(1 - 0.15**4 - 0.85**4)


def test_analysis_report():
    rep = theory.partial_pass_analysis(surface_fractions=(0.75,), contrast_group_sizes=(8, 16))
    assert rep.expected_reward_honest == pytest.approx(0.6) and rep.expected_reward_surface == pytest.approx(0.7)
    assert rep.break_even_p_honest == pytest.approx(0.4)
    assert set(rep.contrast) == {"fraction", "binary"} and set(rep.contrast["binary"]) == {8, 16}
    assert all(f > b for f, b in zip(rep.contrast["fraction"][16], rep.contrast["binary"][16]))
    d = rep.to_dict()
    assert d["advantages"]["0.75"]["method"] == "exact"
    assert "break-even p_A = 0.400" in rep.format()


def test_bad_arguments():
    with pytest.raises(ValueError, match="p_honest"):
        theory.grpo_type_advantages(1.5, 0.5)
    with pytest.raises(ValueError, match="surface_fraction"):
        theory.grpo_type_advantages(0.2, -0.1)
    with pytest.raises(ValueError, match="group_size"):
        theory.grpo_type_advantages(0.2, 0.5, group_size=1)
    with pytest.raises(ValueError, match="fail_score"):
        theory.break_even_p_honest(fail_score=1.0)
    with pytest.raises(ValueError, match="reward"):
        theory.contrast_probability(0.2, 8, reward="partial")
    with pytest.raises(ValueError, match="semantic_tests"):
        theory.surface_reward(semantic_tests=-1)


# ---------------------------------------------------------------------------------- bucket table
def py_entropy(p):
    return 0.0 if p in (0.0, 1.0) else -p * math.log2(p) - (1 - p) * math.log2(1 - p)


@pytest.mark.parametrize("n", [8, 5, 1])
def test_bucket_table_matches_python(n):
    t = theory.bucket_table(n)
    ks = range(n + 1)
    np.testing.assert_allclose(t.values["entropy_bits"], [py_entropy(k / n) for k in ks], atol=1e-14)
    np.testing.assert_allclose(t.values["variance"], [k * (n - k) / n**2 for k in ks], atol=1e-15)
    np.testing.assert_allclose(t.values["pairs"], [k * (n - k) for k in ks])
    np.testing.assert_allclose(t.values["survival"], [1 - (k / n) ** n - (1 - k / n) ** n for k in ks], atol=1e-14)
    assert t.reference["pairs"] == n * n / 4 and t.reference["survival"] == pytest.approx(1 - 2 ** (1 - n))
    if n % 2 == 0:
        for m in theory.buckets.METRICS:
            assert t.ratio(m)[n // 2] == pytest.approx(1.0)
    else:
        assert "odd" in t.reference_label
        assert all(np.all(t.ratio(m) < 1.0) for m in theory.buckets.METRICS)
        assert all(np.all(np.isfinite(t.ratio(m))) for m in theory.buckets.METRICS)


def test_bucket_table_n8_source_numbers():
    t = theory.bucket_table()
    row = t.to_dict()["rows"][1]
    assert round(row["entropy_bits"], 3) == 0.544
    assert round(row["variance"], 3) == 0.109 and round(1 / row["variance_ratio"], 1) == 2.3
    assert (row["pairs"], t.reference["pairs"]) == (7.0, 16.0)
    assert round(row["survival"], 3) == 0.656 and round(t.reference["survival"], 3) == 0.992
    assert "0.544" in t.format()
    with pytest.raises(ValueError, match="n must"):
        theory.bucket_table(0)
