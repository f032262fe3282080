"""Held-out metrics (``prs.rewards.evaluation``) against brute force: pass@j as the fraction of all
j-subsets holding a success, maj@k by hand, mean@k as the success rate, per source and pooled."""
import itertools

import numpy as np
import pytest

from prs.rewards.evaluation import answer_key, eval_metrics, majority, pass_ks


def _pass_brute(row, j):
    """Fraction of the j-subsets of a problem's samples that hold a success (reward >= 1)."""
    subsets = list(itertools.combinations(range(len(row)), j))
    return np.mean([any(row[i] >= 1.0 for i in s) for s in subsets])


def test_metrics_equal_brute_force_per_source():
    rng = np.random.default_rng(0)
    b, n = 7, 6
    rewards = (rng.random((b, n)) < rng.random((b, 1))).astype(float)
    rewards[0] = 0.0          # all fail
    rewards[1] = 1.0          # all pass
    rewards[2, :3] = 0.5      # partial credit: not a success
    answers = [str(rng.integers(0, 3)) if rng.random() < 0.9 else None for _ in range(b * n)]
    sources = ["a", "b", "a", "c", "b", "a", "a"]
    m = eval_metrics(rewards, answers, sources)
    assert pass_ks(n) == [1, 2, 4, 6]
    for name in ["a", "b", "c", "all"]:
        rows = [i for i in range(b) if name == "all" or sources[i] == name]
        assert m[f"{name}/mean@6"] == pytest.approx(np.mean([(rewards[i] >= 1).mean() for i in rows]))
        for j in pass_ks(n):
            assert m[f"{name}/pass@{j}"] == pytest.approx(np.mean([_pass_brute(rewards[i], j) for i in rows]), abs=1e-6)
        # maj by hand: the most common answer (first seen on ties), scored by its first sample
        want = []
        for i in rows:
            votes = [(answers[i * n + j], j) for j in range(n) if answers[i * n + j] is not None]
            if not votes:
                want.append(0.0)
                continue
            counts = {}
            for a, j in votes:
                counts.setdefault(a, []).append(j)
            best = max(counts, key=lambda a: len(counts[a]))
            want.append(float(rewards[i, counts[best][0]] >= 1))
        assert m[f"{name}/maj@6"] == pytest.approx(np.mean(want))
    assert m["all/pass@1"] == pytest.approx(m["all/mean@6"], abs=1e-6)
    assert all(np.isfinite(v) for v in m.values())


def test_majority_by_hand():
    rewards = np.array([[0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], float)
    # row 0: "5" twice (samples 1, 2) beats "4" once -> reward of sample 1 = 1
    # row 1: tie "7" (sample 0) vs "8" (sample 1), first seen wins -> 1
    # row 2: no answers -> 0
    answers = [None, "5", "5", "4", "7", "8", None, None, None, None, None, None]
    np.testing.assert_array_equal(majority(rewards, answers), [1.0, 1.0, 0.0])
    assert answer_key("so \\boxed{\\dfrac{1}{2}}.") == answer_key("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert answer_key("nothing here") is None


def test_one_sample_and_bad_shapes():
    m = eval_metrics(np.array([[1.0], [0.0]]), ["1", "2"], ["s", "s"])
    assert m == {"all/mean@1": 0.5, "all/pass@1": 0.5, "all/maj@1": 0.5,
                 "s/mean@1": 0.5, "s/pass@1": 0.5, "s/maj@1": 0.5}
    with pytest.raises(ValueError, match="do not align"):
        eval_metrics(np.zeros((2, 3)), ["1"] * 5, ["s", "s"])
    with pytest.raises(ValueError, match="named 'all'"):
        eval_metrics(np.zeros((1, 1)), ["1"], ["all"])
