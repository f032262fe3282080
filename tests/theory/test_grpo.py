"""theory.grpo: expected squared advantages / policy gradients vs a numpy re-implementation."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import theory

PS = [0.0, 0.05, 0.3, 0.5, 0.8, 1.0]
EPS = 1e-6


def np_advantages(r, estimator, eps=EPS):
    """One group, peer conventions (verl/tunix GRPO with ddof=1 std; Dr.GRPO; RLOO); 0 if constant."""
    r = np.asarray(r, dtype=np.float64)
    n = r.size
    if n < 2 or r.max() == r.min():
        return np.zeros(n)
    if estimator == "grpo":
        return (r - r.mean()) / (r.std(ddof=1) + eps)
    if estimator == "dr_grpo":
        return r - r.mean()
    return r - (r.sum() - r) / (n - 1)  # rloo


def np_expectations(p, n, estimator):
    sq = g = 0.0
    for k in range(n + 1):
        w = math.comb(n, k) * p**k * (1 - p) ** (n - k)
        r = np.array([1.0] * k + [0.0] * (n - k))
        a = np_advantages(r, estimator)
        sq += w * np.mean(a * a)
        g += w * abs(np.mean(a * (r - p)))
    return sq, g


@pytest.mark.parametrize("estimator", ["grpo", "dr_grpo", "rloo"])
@pytest.mark.parametrize("n", [2, 5, 8])
def test_expectations_match_numpy_enumeration(estimator, n):
    with jax.enable_x64(True):
        p = jnp.asarray(PS)
        sq = np.asarray(theory.expected_squared_advantage(p, n, estimator=estimator))
        g = np.asarray(theory.expected_policy_gradient(p, n, estimator=estimator))
    ref = np.array([np_expectations(q, n, estimator) for q in PS])
    np.testing.assert_allclose(sq, ref[:, 0], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(g, ref[:, 1], rtol=1e-10, atol=1e-14)


def test_closed_forms():
    """Dr.GRPO: E[ĝ] = E[A²] = (n−1)p(1−p)/n; RLOO: E[ĝ] = p(1−p) (unbiased), E[A²] = n p(1−p)/(n−1)."""
    n = 8
    with jax.enable_x64(True):
        p = jnp.linspace(0.0, 1.0, 9)
        e = np.asarray(p * (1 - p))
        np.testing.assert_allclose(theory.expected_policy_gradient(p, n, estimator="dr_grpo"), (n - 1) / n * e, atol=1e-14)
        np.testing.assert_allclose(theory.expected_squared_advantage(p, n, estimator="dr_grpo"), (n - 1) / n * e, atol=1e-14)
        np.testing.assert_allclose(theory.expected_policy_gradient(p, n, estimator="rloo"), e, atol=1e-14)
        np.testing.assert_allclose(theory.expected_squared_advantage(p, n, estimator="rloo"), n / (n - 1) * e, atol=1e-14)
        # GRPO: (n−1)/n · Σ P(k) σ_k²/(σ_k+eps)² ≈ (n−1)/n · survival for eps → 0.
        grpo = np.asarray(theory.expected_squared_advantage(p, n, estimator="grpo", eps=0.0))
        np.testing.assert_allclose(grpo, (n - 1) / n * np.asarray(theory.filter_survival(p, n)), atol=1e-13)


def test_bernoulli_policy_score_and_true_gradient():
    """∇θ log π(y) = y − p and ∇θ E[r] = p(1−p) for π = sigmoid(θ): the module's premises."""
    theta = 0.37
    p = float(jax.nn.sigmoid(theta))
    for y in (0.0, 1.0):
        score = jax.grad(lambda t: y * jax.nn.log_sigmoid(t) + (1 - y) * jax.nn.log_sigmoid(-t))(theta)
        assert float(score) == pytest.approx(y - p, abs=1e-6)
    assert float(jax.grad(jax.nn.sigmoid)(theta)) == pytest.approx(float(theory.advantage_energy(p)), abs=1e-6)


def test_monte_carlo_policy_gradient_agrees():
    """Sampled groups from the Bernoulli policy, advantages from numpy, mean ĝ ≈ the exact E|ĝ|."""
    rng = np.random.default_rng(0)
    n, p = 6, 0.3
    r = (rng.random((20000, n)) < p).astype(np.float64)  # [S, n]
    mu, sd = r.mean(1, keepdims=True), r.std(1, ddof=1, keepdims=True)
    a = np.where(sd > 0, (r - mu) / (sd + EPS), 0.0)  # numpy GRPO, vectorised over groups
    mc = np.mean(np.abs(np.mean(a * (r - p), axis=1)))
    with jax.enable_x64(True):
        exact = float(theory.expected_policy_gradient(p, n, estimator="grpo"))
    assert mc == pytest.approx(exact, rel=0.02)


def test_canonical_rewards_and_moments_layout():
    r, valid = theory.canonical_rewards(3, width=5)
    np.testing.assert_array_equal(np.asarray(r), [[0, 0, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]])
    np.testing.assert_array_equal(np.asarray(valid), np.tile([True, True, True, False, False], (4, 1)))
    mom = theory.advantage_moments([2, 4], kmax=4, estimator="dr_grpo")
    assert mom["sq"].shape == (2, 5)
    # row n=2 has only k = 0..2; k(n-k)/n² is the dr_grpo mean squared advantage.
    np.testing.assert_allclose(mom["sq"][0], [0, 0.25, 0, 0, 0], atol=1e-7)
    np.testing.assert_allclose(mom["sq"][1], [0, 3 / 16, 0.25, 3 / 16, 0], atol=1e-7)


def test_bad_arguments():
    with pytest.raises(ValueError, match="estimator"):
        theory.expected_squared_advantage(0.5, 8, estimator="ppo")
    with pytest.raises(ValueError, match="p must"):
        theory.expected_policy_gradient(1.2, 8)
    with pytest.raises(ValueError, match="n must"):
        theory.expected_policy_gradient(0.3, 0)
    with pytest.raises(ValueError, match="width"):
        theory.canonical_rewards(4, width=2)


def test_jittable_in_p():
    f = jax.jit(theory.expected_squared_advantage, static_argnums=1, static_argnames=("estimator",))
    p = jnp.asarray([0.2, 0.5])
    np.testing.assert_allclose(f(p, 8, estimator="rloo"), 8 / 7 * np.asarray(p * (1 - p)), rtol=1e-5)
    # d/dp of the RLOO expected gradient p(1−p) is 1 − 2p.
    d = jax.grad(lambda q: theory.expected_policy_gradient(q, 8, estimator="rloo"))(0.3)
    assert float(d) == pytest.approx(0.4, abs=1e-5)
