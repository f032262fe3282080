"""Tests for prs.rewards.audit: EQS and its verdicts, separability/F1/hack-rate helpers, the gold-sanity gate."""
import numpy as np
import pytest

from prs.rewards import audit as au


def test_eqs_matches_formula_and_verdicts():
    v = np.array([1.0, 0.0, 0.8, 0.5, 0.2])
    h = np.array([0.0, 1.0, 0.1, 0.5, 0.9])
    f1 = np.array([1.0, 0.0, 0.9, 0.5, 0.3])
    d = np.array([1.0, 0.0, 0.6, 0.5, 0.1])
    want = [0.35 * a + 0.30 * (1 - b) + 0.20 * c + 0.15 * e for a, b, c, e in zip(v, h, f1, d)]
    got = np.asarray(au.eqs(v, h, f1, d))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got[:2], [1.0, 0.0], atol=1e-6)  # the default weights sum to 1
    verdict = np.asarray(au.eqs_verdict(got))
    # 1.0 KEEP, 0.0 DROP, 0.8·… = 0.82 KEEP, 0.5 FIX, 0.2·… = 0.195 DROP.
    np.testing.assert_array_equal(verdict, [au.KEEP, au.DROP, au.KEEP, au.FIX, au.DROP])
    assert [au.VERDICT_NAMES[i] for i in verdict] == ["KEEP", "DROP", "KEEP", "FIX", "DROP"]
    # Thresholds: >= keep is KEEP, < drop is DROP, both configurable.
    np.testing.assert_array_equal(au.eqs_verdict(np.array([0.7, 0.4, 0.39])), [au.KEEP, au.FIX, au.DROP])
    np.testing.assert_array_equal(
        au.eqs_verdict(np.array([0.7, 0.5]), keep_threshold=0.9, drop_threshold=0.6), [au.FIX, au.DROP]
    )
    # Custom weights.
    w = au.EQSWeights(v=1.0, h=0.0, f1=0.0, d=0.0)
    np.testing.assert_allclose(au.eqs(v, h, f1, d, weights=w), v, rtol=1e-6)


def test_eqs_errors():
    one = np.ones(2)
    with pytest.raises(ValueError, match="h must lie in"):
        au.eqs(one, np.array([0.5, 1.5]), one, one)
    with pytest.raises(ValueError, match="share one shape"):
        au.eqs(one, np.ones(3), one, one)
    with pytest.raises(ValueError, match="weights must be >= 0"):
        au.eqs(one, one, one, one, weights=au.EQSWeights(-0.1, 0.3, 0.2, 0.15))
    with pytest.raises(ValueError, match="drop_threshold <= keep_threshold"):
        au.eqs_verdict(one, keep_threshold=0.3, drop_threshold=0.5)


def test_separability_auc_against_pairwise_loop():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 4, (10, 6)).astype(np.float32)
    c = rng.random((10, 6)) < 0.5
    m = rng.random((10, 6)) < 0.9
    got = np.asarray(au.separability_auc(s, c, mask=m))
    for b in range(10):
        pos = [s[b, i] for i in range(6) if m[b, i] and c[b, i]]
        neg = [s[b, j] for j in range(6) if m[b, j] and not c[b, j]]
        want = 0.5 if not pos or not neg else sum((p > q) + 0.5 * (p == q) for p in pos for q in neg) / (len(pos) * len(neg))
        assert got[b] == pytest.approx(want, abs=1e-6)


def test_judge_f1_hand_cases():
    judge = np.array([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 0]], bool)
    exe = np.array([[1, 0, 1, 0], [0, 0, 0, 0], [1, 0, 1, 0]], bool)
    # Row 0: TP=1, FP=1, FN=1 -> 2/4; row 1: nothing positive -> 1 (agreement); row 2: perfect.
    np.testing.assert_allclose(au.judge_f1(judge, exe), [0.5, 1.0, 1.0])


def test_hack_rates_from_the_audit():
    """Rajan 2026: 14/49 SWE-bench Verified tasks hackable in three rounds, 9/49 in one shot."""
    rng = np.random.default_rng(0)
    passed = np.zeros((49, 3), bool)  # [B tasks, A = 3 attack rounds]
    one_shot = rng.choice(49, 9, replace=False)
    later = rng.choice(np.setdiff1d(np.arange(49), one_shot), 5, replace=False)
    passed[one_shot, 0] = True
    passed[one_shot[:3], 2] = True  # also passing again later does not double count
    passed[later, rng.integers(1, 3, 5)] = True
    round1 = np.zeros((49, 3), bool)
    round1[:, 0] = True
    all_rounds = float(au.hackable_fraction(passed))
    first = float(au.hackable_fraction(passed, mask=round1))
    assert all_rounds == pytest.approx(14 / 49) and first == pytest.approx(9 / 49)
    # The survey prints 28.5% and 18.4% (14/49 = 28.57%, so 28.5 is a truncation).
    assert abs(100 * all_rounds - 28.5) < 0.1 and abs(100 * first - 18.4) < 0.05
    assert float(au.hackable_fraction(np.zeros((0, 3), bool))) == 0.0


def test_gold_gate_counts_the_papers_failure_rate():
    """Rajan 2026: 65 of 105 judge-approved tests failed the gold patch (61.9%)."""
    rng = np.random.default_rng(1)
    gold = np.ones((1, 120), bool)
    real = np.zeros((1, 120), bool)
    real[0, :105] = True  # 15 padding slots that fail the gold patch must not count
    gold[0, 105:] = False
    gold[0, rng.choice(105, 65, replace=False)] = False
    rep = au.gold_sanity_gate(gold, test_mask=real)
    assert int(rep.n_tests[0]) == 105 and int(rep.n_dropped[0]) == 65
    assert 100 * float(rep.frac_dropped[0]) == pytest.approx(61.9, abs=0.05)
    np.testing.assert_array_equal(rep.keep, gold & real)
    assert int(rep.n_toxic[0]) == 0 and int(rep.n_distinguishing[0]) == 0  # no candidates given


def test_gold_gate_toxic_and_distinguishing_hand_fixture():
    # One task, 6 test slots (slot 5 is padding), candidates: c1 correct, w1 and w2 wrong, slot 3 empty.
    gold = np.array([[1, 1, 0, 1, 0, 0]], bool)
    real = np.array([[1, 1, 1, 1, 1, 0]], bool)
    passed = np.array(
        [[
            [1, 1, 1, 0, 0, 1],  # c1
            [1, 0, 1, 1, 0, 1],  # w1
            [1, 1, 0, 1, 0, 1],  # w2
            [0, 0, 0, 0, 0, 0],  # empty slot: would make t0 look toxic if counted
        ]],
        bool,
    )
    correct = np.array([[1, 0, 0, 1]], bool)
    cmask = np.array([[1, 1, 1, 0]], bool)
    rep = au.gold_sanity_gate(
        gold, test_mask=real, candidate_passed=passed, candidate_correct=correct, candidate_mask=cmask
    )
    # t0 passes everyone: neither. t1 passes gold+c1, fails w1: distinguishing.
    # t2 fails gold, passes w1: toxic, dropped. t3 passes gold, fails c1, passes w1: toxic, kept.
    # t4 fails everyone: dropped, neither.
    np.testing.assert_array_equal(rep.keep, [[1, 1, 0, 1, 0, 0]])
    assert (int(rep.n_tests[0]), int(rep.n_dropped[0])) == (5, 2)
    assert (int(rep.n_toxic[0]), int(rep.n_toxic_kept[0]), int(rep.n_distinguishing[0])) == (2, 1, 1)
    np.testing.assert_allclose([rep.frac_toxic[0], rep.frac_distinguishing[0]], [0.4, 0.2])


def _gate_ref(gold, real, passed, correct, cmask):
    """Loops over tests, straight from the definitions."""
    out = []
    for b in range(gold.shape[0]):
        tox = dist = 0
        for t in range(gold.shape[1]):
            if not real[b, t]:
                continue
            right = [bool(gold[b, t])] + [bool(passed[b, n, t]) for n in range(passed.shape[1]) if cmask[b, n] and correct[b, n]]
            wrong = [bool(passed[b, n, t]) for n in range(passed.shape[1]) if cmask[b, n] and not correct[b, n]]
            tox += any(wrong) and not all(right)
            dist += all(right) and not all(wrong) and len(wrong) > 0
        out.append((int(real[b].sum()), int((real[b] & ~gold[b]).sum()), tox, dist))
    return out


def test_gold_gate_matches_loop_reference_on_random_tasks():
    rng = np.random.default_rng(2)
    b, n, t = 12, 5, 9
    gold = rng.random((b, t)) < 0.8
    real = rng.random((b, t)) < 0.9
    passed = rng.random((b, n, t)) < 0.6
    correct = rng.random((b, n)) < 0.3
    cmask = rng.random((b, n)) < 0.8
    cmask[0] = False  # a task with no candidates at all
    rep = au.gold_sanity_gate(gold, test_mask=real, candidate_passed=passed, candidate_correct=correct, candidate_mask=cmask)
    got = list(zip(*(np.asarray(x).tolist() for x in (rep.n_tests, rep.n_dropped, rep.n_toxic, rep.n_distinguishing))))
    assert got == _gate_ref(gold, real, passed, correct, cmask)
    for x in (rep.frac_dropped, rep.frac_toxic, rep.frac_distinguishing):
        assert np.all(np.isfinite(np.asarray(x)))


def test_gold_gate_errors_and_empty_tasks():
    with pytest.raises(ValueError, match="gold_passed must be"):
        au.gold_sanity_gate(np.ones(3, bool))
    with pytest.raises(ValueError, match="both candidate_passed and candidate_correct"):
        au.gold_sanity_gate(np.ones((1, 3), bool), candidate_passed=np.ones((1, 2, 3), bool))
    with pytest.raises(ValueError, match=r"\[B, N, T\]"):
        au.gold_sanity_gate(
            np.ones((1, 3), bool), candidate_passed=np.ones((1, 2, 4), bool), candidate_correct=np.ones((1, 2), bool)
        )
    rep = au.gold_sanity_gate(np.ones((2, 3), bool), test_mask=np.zeros((2, 3), bool))
    np.testing.assert_array_equal(rep.frac_dropped, [0.0, 0.0])  # no real tests: 0, not NaN


def test_audit_functions_jit_without_recompiling():
    import jax

    traces = []

    @jax.jit
    def f(gold, real, passed, correct, v, h, f1, d):
        traces.append(1)
        rep = au.gold_sanity_gate(gold, test_mask=real, candidate_passed=passed, candidate_correct=correct)
        return rep, au.eqs_verdict(au.eqs(v, h, f1, d))

    rng = np.random.default_rng(3)
    for _ in range(2):
        args = (rng.random((2, 4)) < 0.8, np.ones((2, 4), bool), rng.random((2, 3, 4)) < 0.5, rng.random((2, 3)) < 0.5)
        scores = [rng.random(2) for _ in range(4)]
        rep, verdict = f(*args, *scores)
        eager = au.gold_sanity_gate(args[0], test_mask=args[1], candidate_passed=args[2], candidate_correct=args[3])
        for a, b in zip(rep, eager):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(verdict, au.eqs_verdict(au.eqs(*scores)))
    assert len(traces) == 1
