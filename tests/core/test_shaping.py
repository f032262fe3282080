"""prs.core.shaping: DAPO's soft overlong penalty (TRL's test numbers, verl's formula) and overlong filtering."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prs.core.shaping import drop_truncated, overlong_penalty


def test_trl_test_rewards_numbers():
    """TRL tests/test_rewards.py (max 100, cache 20): 50 -> 0, 110 -> −1, 90 -> −0.5."""
    got = np.asarray(overlong_penalty(np.array([50, 110, 90]), max_len=100, cache_len=20))
    np.testing.assert_allclose(got, [0.0, -1.0, -0.5])


def test_verl_formula_inside_the_budget():
    """verl DAPO reward manager: min(−(len − (max − cache)) / cache · factor, 0); 80 -> 0, 100 -> −factor."""
    lengths = np.arange(0, 101)
    for factor in (1.0, 0.5):
        want = np.minimum(-(lengths - 80) / 20 * factor, 0.0)
        got = np.asarray(overlong_penalty(lengths, max_len=100, cache_len=20, factor=factor))
        np.testing.assert_allclose(got, want, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 500), st.data())
def test_bounded_monotone_and_finite(max_len, data):
    cache = data.draw(st.integers(1, max_len))
    lengths = np.arange(0, 1002)  # one shape for every example (no re-tracing)
    p = np.asarray(overlong_penalty(lengths, max_len=max_len, cache_len=cache))
    assert np.all(np.isfinite(p)) and np.all(p <= 0) and np.all(p >= -1)
    assert np.all(np.diff(p) <= 1e-7)
    assert np.all(p[: max_len - cache + 1] == 0) and np.all(p[max_len + 1:] == -1)


def test_drop_truncated():
    m = np.ones((3, 4), bool)
    got = np.asarray(drop_truncated(m, np.array([False, True, False])))
    np.testing.assert_array_equal(got, [[1] * 4, [0] * 4, [1] * 4])


@pytest.mark.parametrize("call, match", [
    (lambda: overlong_penalty(np.ones(2), max_len=0, cache_len=1), "max_len must be an int >= 1"),
    (lambda: overlong_penalty(np.ones(2), max_len=10, cache_len=11), r"cache_len must be an int in \[1, max_len=10\]"),
    (lambda: overlong_penalty(np.ones(2), max_len=10, cache_len=0), "cache_len must be"),
    (lambda: overlong_penalty(np.ones(2), max_len=10, cache_len=2, factor=-1.0), "factor must be a finite number >= 0"),
    (lambda: drop_truncated(np.ones((3, 4)), np.zeros(2, bool)), r"truncated must have shape \(3\)"),
    (lambda: drop_truncated(np.ones((3, 4)), np.zeros(3)), "truncated must have a bool dtype"),
])
def test_bad_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()
