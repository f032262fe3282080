"""Tests for prs.rewards.verifiers: Pass@k, Best@k, ORM score, R2E-Gym scores, SWE-Gym capping."""
import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prs.rewards import verifiers as vf


# ---------------------------------------------------------------- Pass@k


def _pass_at_k_exact(n, c, k):
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_pass_at_k_matches_exact_fractions_on_a_grid():
    for k in (1, 2, 3, 5, 8):
        ns, cs = zip(*[(n, c) for n in range(k, 13) for c in range(n + 1)])
        got = np.asarray(vf.pass_at_k(np.array(ns), np.array(cs), k=k))
        want = np.array([float(_pass_at_k_exact(n, c, k)) for n, c in zip(ns, cs)])
        np.testing.assert_allclose(got, want, atol=2e-6)


def test_pass_at_k_large_n_is_stable():
    n = np.array([100_000, 100_000, 5_000, 1_000_000])
    c = np.array([5, 50_000, 1, 3])
    got = np.asarray(vf.pass_at_k(n, c, k=100))
    want = np.array([float(_pass_at_k_exact(a, b, 100)) for a, b in zip(n.tolist(), c.tolist())])
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert np.all(np.isfinite(got))
    # Also the Codex product form 1 − Π_{i=n−c+1}^{n} (1 − k/i), evaluated in float64 numpy.
    codex = [1 - np.prod(1.0 - 100 / np.arange(a - b + 1, a + 1)) for a, b in zip(n.tolist(), c.tolist())]
    np.testing.assert_allclose(got, codex, rtol=2e-5, atol=1e-6)


def test_pass_at_k_edge_cases():
    # Degenerate: c = 0 -> 0, c = n -> 1, k = n -> 1[c > 0], n = 0 -> 0 (no samples, no NaN).
    np.testing.assert_allclose(vf.pass_at_k(np.array([4, 4, 4, 0]), np.array([0, 4, 1, 0]), k=4), [0, 1, 1, 0])
    with pytest.raises(ValueError, match="exceeds n"):
        vf.pass_at_k(np.array([3, 10]), np.array([1, 1]), k=5)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        vf.pass_at_k(np.array([3]), np.array([4]), k=1)
    with pytest.raises(ValueError, match="k must be"):
        vf.pass_at_k(np.array([3]), np.array([1]), k=0)
    # Under jit, k > n is Pass@n = 1[c > 0] (documented).
    f = jax.jit(lambda n, c: vf.pass_at_k(n, c, k=5))
    np.testing.assert_allclose(f(jnp.array([3, 3, 10]), jnp.array([0, 2, 1])), [0.0, 1.0, 0.5], atol=1e-6)


# ---------------------------------------------------------------- Best@k


def _best_at_k_bruteforce(scores, correct, valid, k):
    """Enumerate every k-subset, split ties uniformly, exact fractions."""
    idx = [i for i in range(len(scores)) if valid[i]]
    if not idx:
        return Fraction(0)
    k = min(k, len(idx))
    total, count = Fraction(0), 0
    for sub in itertools.combinations(idx, k):
        top = max(scores[i] for i in sub)
        tied = [i for i in sub if scores[i] == top]
        total += Fraction(sum(bool(correct[i]) for i in tied), len(tied))
        count += 1
    return total / count


def test_best_at_k_matches_bruteforce_with_ties_and_masks():
    rng = np.random.default_rng(0)
    b, n = 40, 7
    scores = rng.integers(0, 4, (b, n)).astype(np.float32)  # many ties
    scores[0] = -np.inf  # all valid scores -inf: all tied
    correct = rng.random((b, n)) < 0.4
    mask = rng.random((b, n)) < 0.85
    mask[:, :3] = True  # at least 3 valid per task
    mask[1] = True
    for k in (1, 2, 3):
        got = np.asarray(vf.best_at_k(scores, correct, k=k, mask=mask))
        want = [float(_best_at_k_bruteforce(scores[i].tolist(), correct[i], mask[i], k)) for i in range(b)]
        np.testing.assert_allclose(got, want, atol=2e-6)


def test_best_at_k_hand_cases():
    # Scores [0.9, 0.5, 0.5, 0.1], correct [0, 1, 0, 1].
    s = np.array([[0.9, 0.5, 0.5, 0.1]])
    c = np.array([[0, 1, 0, 1]], bool)
    # k=1: mean correctness = 1/2. k=4: the top candidate (wrong) = 0.
    # k=2: 6 pairs; pairs without idx0: {1,2}->1/2, {1,3}->1, {2,3}->0 => (1/2 + 1 + 0)/6 = 1/4.
    np.testing.assert_allclose(
        [float(vf.best_at_k(s, c, k=k)[0]) for k in (1, 2, 4)], [0.5, 0.25, 0.0], atol=1e-6
    )
    # All-equal scores: Best@k = mean correctness for every k (ties split uniformly).
    same = np.zeros((1, 5))
    cc = np.array([[1, 0, 0, 1, 0]], bool)
    for k in (1, 3, 5):
        np.testing.assert_allclose(vf.best_at_k(same, cc, k=k), [0.4], atol=1e-6)
    # Empty candidate set: 0, not NaN; k > n raises for concrete input.
    np.testing.assert_array_equal(vf.best_at_k(s, c, k=2, mask=np.zeros((1, 4), bool)), [0.0])
    with pytest.raises(ValueError, match="exceeds"):
        vf.best_at_k(s, c, k=3, mask=np.array([[1, 1, 0, 0]], bool))


def test_best_at_k_is_bounded_by_pass_at_k_and_equals_it_for_a_perfect_verifier():
    rng = np.random.default_rng(1)
    b, n, k = 64, 16, 4
    correct = rng.random((b, n)) < rng.random((b, 1))
    c = correct.sum(-1)
    pk = np.asarray(vf.pass_at_k(np.full(b, n), c, k=k))
    noisy = np.asarray(vf.best_at_k(rng.normal(size=(b, n)) + correct, correct, k=k))
    perfect = np.asarray(vf.best_at_k(correct.astype(np.float32), correct, k=k))
    assert np.all(noisy <= pk + 1e-6)
    np.testing.assert_allclose(perfect, pk, atol=1e-5)
    # An uninformative verifier (constant score) gives Best@k = Pass@1 = c/n.
    np.testing.assert_allclose(vf.best_at_k(np.zeros((b, n)), correct, k=k), c / n, atol=1e-6)


def test_select_best_ties_and_masks():
    s = np.array([[0.2, 0.7, 0.7, 0.1], [0.5, 0.9, 0.1, 0.3], [-np.inf, -np.inf, 0.0, 0.0], [1, 2, 3, 4]], np.float32)
    m = np.array([[1, 1, 1, 1], [1, 0, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]], bool)
    np.testing.assert_array_equal(vf.select_best(s, mask=m), [1, 0, 1, -1])


# ---------------------------------------------------------------- ORM / R2E-Gym


def test_orm_score_matches_softmax_and_is_stable():
    ly = np.array([2.0, -1.0, 0.0, 30.0])
    ln = np.array([1.0, 3.0, 0.0, -5.0])
    want = [math.exp(a) / (math.exp(a) + math.exp(b)) for a, b in zip(ly, ln)]
    np.testing.assert_allclose(vf.orm_score(ly, ln), want, rtol=1e-6)
    big = vf.orm_score(np.array([1e30, -1e30, np.inf, 1e4]), np.array([-1e30, 1e30, np.inf, 1e4]))
    np.testing.assert_allclose(big, [1.0, 0.0, 0.5, 0.5])
    # Log-probabilities give the same score as logits (a common shift cancels).
    np.testing.assert_allclose(vf.orm_score(ly - 7.0, ln - 7.0), want, rtol=1e-5)
    logits = np.zeros((2, 5), np.float32)
    logits[:, 3], logits[:, 1] = ly[:2], ln[:2]
    np.testing.assert_allclose(vf.orm_score_from_logits(logits, yes_id=3, no_id=1), want[:2], rtol=1e-6)
    with pytest.raises(ValueError, match="yes_id"):
        vf.orm_score_from_logits(logits, yes_id=5, no_id=1)


def test_execution_based_score_hand_fixture():
    ts = np.array([[9, 4, 6, 10], [1, 2, 3, 4]], np.float32)
    rs = np.array([[3, 5, 5, 2], [7, 1, 7, 9]], np.float32)
    m = np.array([[1, 1, 1, 1], [1, 1, 1, 0]], bool)  # the RS=9 slot of task 2 is empty
    got = np.asarray(vf.execution_based_score(ts, rs, mask=m))
    np.testing.assert_array_equal(got, [[0, 4, 6, 0], [1, 0, 3, -np.inf]])
    # Bool pass matrices are summed.
    tp = np.zeros((2, 4, 3), bool)
    tp[0, 2, :2] = True
    rp = np.ones((2, 4, 2), bool)
    np.testing.assert_array_equal(vf.execution_based_score(tp, rp)[0], [0, 0, 2, 0])


def test_top_n_and_hybrid_selection():
    s = np.array([[0.5, 0.9, 0.5, 0.1, 0.95]], np.float32)
    m = np.array([[1, 1, 1, 1, 0]], bool)
    # Top-2 of the valid ones: 0.9 (idx 1) and the lower-index 0.5 (idx 0); others -inf.
    np.testing.assert_array_equal(vf.top_n_scores(s, n=2, mask=m), np.float32([[0.5, 0.9, -np.inf, -np.inf, -np.inf]]))
    np.testing.assert_array_equal(vf.top_n_scores(s, n=10, mask=m), np.float32([[0.5, 0.9, 0.5, 0.1, -np.inf]]))
    # Hybrid: the EB winner (idx 3, 10 tests) is not in the EF top-2, so idx 1 wins with its 4 tests.
    ef = np.array([[0.6, 0.8, 0.3, 0.2]], np.float32)
    ts = np.array([[4, 4, 9, 10]], np.float32)
    rs = np.array([[5, 5, 5, 5]], np.float32)
    h = np.asarray(vf.hybrid_score(ef, ts, rs, top_n=2))
    np.testing.assert_allclose(h, [[4.6, 4.8, -np.inf, -np.inf]], rtol=1e-6)
    assert int(vf.select_best(h)[0]) == 1
    # With n = all candidates the hybrid reduces to EB with EF as tie-breaker.
    assert int(vf.select_best(vf.hybrid_score(ef, ts, rs, top_n=4))[0]) == 3
    with pytest.raises(ValueError, match="n must be"):
        vf.top_n_scores(s, n=0)
    # An empty candidate set: every score -inf, no NaN, nothing selected.
    none = np.zeros((1, 4), bool)
    h0 = np.asarray(vf.hybrid_score(ef, ts, rs, top_n=2, mask=none))
    assert np.all(h0 == -np.inf) and int(vf.select_best(h0, mask=none)[0]) == -1


# ---------------------------------------------------------------- SWE-Gym capping


def test_cap_successes_per_task_properties():
    task = np.array([3, 3, 3, 3, 3, 7, 7, 9, 9, 9, 9, -1])
    succ = np.array([1, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 1], bool)
    key = jax.random.key(0)
    keep = np.asarray(vf.cap_successes_per_task(task, succ, key=key, cap=2))
    assert not np.any(keep & ~succ)
    for t, want in {3: 2, 7: 1, 9: 0, -1: 1}.items():
        assert keep[task == t].sum() == want
    again = np.asarray(vf.cap_successes_per_task(task, succ, key=key, cap=2))
    np.testing.assert_array_equal(keep, again)  # reproducible from the key
    np.testing.assert_array_equal(vf.cap_successes_per_task(task, succ, key=key, cap=5), succ)
    with pytest.raises(ValueError, match="cap must be"):
        vf.cap_successes_per_task(task, succ, key=key, cap=0)


def test_cap_successes_is_uniform_and_compiles_once():
    task = jnp.array([0, 0, 0, 0, 0, 1, 1])
    succ = jnp.array([1, 1, 1, 0, 1, 1, 1], bool)
    traces = []

    @jax.jit
    def f(keys):
        traces.append(1)
        return jax.vmap(lambda k: vf.cap_successes_per_task(task, succ, key=k, cap=2))(keys)

    keys = jax.random.split(jax.random.key(1), 4000)
    freq = np.asarray(f(keys)).mean(0)
    f(jax.random.split(jax.random.key(2), 4000))
    assert len(traces) == 1
    # Task 0 has 4 successes, cap 2 -> each kept with probability 1/2; task 1 keeps both.
    np.testing.assert_allclose(freq[[0, 1, 2, 4]], 0.5, atol=0.04)
    assert freq[3] == 0.0 and np.all(freq[5:] == 1.0)
