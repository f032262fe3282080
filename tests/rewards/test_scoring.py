"""Tests for prs.rewards: execution rewards, the SWE-RL reward, the registry."""
import difflib

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

from prs import rewards as rw


# ---------------------------------------------------------------- execution rewards


def _binary_ref(passed, f2p, p2p):
    """Pure-Python SWE-bench rule, loops over rows and tests."""
    out = []
    for row in passed:
        ok = all(row[t] for t in range(len(row)) if f2p[t]) and all(row[t] for t in range(len(row)) if p2p[t])
        out.append(1.0 if ok else 0.0)
    return out


def test_binary_reward_matches_python_rule():
    rng = np.random.default_rng(0)
    passed = rng.random((12, 6)) < 0.7
    f2p = np.array([1, 1, 0, 0, 0, 0], bool)
    p2p = np.array([0, 0, 1, 1, 1, 0], bool)  # column 5 counts for neither
    got = rw.binary_test_reward(passed, fail_to_pass=f2p, pass_to_pass=p2p)
    np.testing.assert_array_equal(np.asarray(got), _binary_ref(passed.tolist(), f2p, p2p))
    # The ignored column never changes the verdict.
    flipped = passed.copy()
    flipped[:, 5] = ~flipped[:, 5]
    np.testing.assert_array_equal(
        rw.binary_test_reward(flipped, fail_to_pass=f2p, pass_to_pass=p2p), got
    )
    # Per-rollout [R, T] masks give the same answer as broadcast [T] masks.
    got2 = rw.binary_test_reward(
        passed, fail_to_pass=np.tile(f2p, (12, 1)), pass_to_pass=np.tile(p2p, (12, 1))
    )
    np.testing.assert_array_equal(got2, got)


def test_binary_reward_hand_cases_and_errors():
    passed = np.array([[1, 1, 1], [1, 0, 1], [0, 1, 1], [1, 1, 0]], bool)
    f2p, p2p = np.array([1, 0, 0], bool), np.array([0, 1, 0], bool)
    np.testing.assert_array_equal(
        rw.binary_test_reward(passed, fail_to_pass=f2p, pass_to_pass=p2p), [1, 0, 0, 1]
    )
    with pytest.raises(ValueError, match="fail_to_pass"):
        rw.binary_test_reward(passed, fail_to_pass=np.ones(4, bool), pass_to_pass=p2p)
    with pytest.raises(ValueError, match="passed must be"):
        rw.binary_test_reward(passed[0], fail_to_pass=f2p, pass_to_pass=p2p)


def test_fraction_reward_masks_and_empty_rows():
    passed = np.array([[1, 0, 1, 1], [0, 0, 0, 0], [1, 1, 1, 1]], bool)
    mask = np.array([[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]], bool)
    got = np.asarray(rw.fraction_test_reward(passed, test_mask=mask))
    np.testing.assert_allclose(got, [2 / 3, 0.0, 1.0], rtol=1e-6)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(rw.fraction_test_reward(passed), [0.75, 0.0, 1.0])


def test_partial_pass_trap_expected_rewards():
    """The survey's toy: 10 tests (7 surface, 3 semantic); E[R|A] = 0.6 < E[R|B] = 0.7, break-even 0.4."""
    surface, semantic = np.arange(7), np.arange(7, 10)
    rows = np.zeros((3, 10), bool)
    rows[0] = True  # A succeeds: all 10 pass
    rows[1, [0, 1, 2, 7, 8]] = True  # A fails: refactoring breaks things, 5 of 10 pass
    rows[2, surface] = True  # B: surface patch, 7 surface tests pass, semantic ones cannot
    r = np.asarray(rw.fraction_test_reward(rows), np.float64)
    p_a = 0.2
    e_a, e_b = p_a * r[0] + (1 - p_a) * r[1], r[2]
    assert e_a == pytest.approx(0.6, abs=1e-6) and e_b == pytest.approx(0.7, abs=1e-6)
    assert e_a < e_b
    breakeven = (r[2] - r[1]) / (r[0] - r[1])  # solves p·r_A,ok + (1−p)·r_A,fail = r_B
    assert breakeven == pytest.approx(0.4, abs=1e-6)
    # Binary reward on the same rows (semantic tests are FAIL_TO_PASS): only A's success pays.
    f2p = np.isin(np.arange(10), semantic)
    np.testing.assert_array_equal(
        rw.binary_test_reward(rows, fail_to_pass=f2p, pass_to_pass=~f2p), [1, 0, 0]
    )
    # GRPO group of 16 dominated by B (15 B + 1 failed A): the honest attempt gets a negative
    # advantage while B's is ~0 — the trap's mechanism.
    group = np.array([r[2]] * 15 + [r[1]])
    adv = (group - group.mean()) / (group.std(ddof=1) + 1e-6)
    assert adv[-1] < -3.0 and abs(adv[0]) < 0.3


def test_execution_rewards_jit_compile_once():
    traces = []

    @jax.jit
    def f(passed, f2p, p2p):
        traces.append(1)
        return rw.binary_test_reward(passed, fail_to_pass=f2p, pass_to_pass=p2p), rw.fraction_test_reward(
            passed, test_mask=f2p | p2p
        )

    rng = np.random.default_rng(1)
    f2p, p2p = jnp.array([1, 0, 0, 0], bool), jnp.array([0, 1, 1, 0], bool)
    for _ in range(3):
        b, fr = f(jnp.asarray(rng.random((8, 4)) < 0.5), f2p, p2p)
    assert len(traces) == 1
    assert b.shape == fr.shape == (8,) and b.dtype == fr.dtype == jnp.float32


# ---------------------------------------------------------------- SWE-RL

FILES = {
    "pkg/a.py": "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return y * 2\n",
    "pkg/b.py": "VALUE = 1\n",
}
ORACLE = {"pkg/a.py": "def f(x):\n    return x + 2\n\n\ndef g(y):\n    return y * 2\n"}


def _block(path, search, replace, fence=True):
    body = f"### {path}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"
    return f"```python\n{body}```\n" if fence else body


def test_swe_rl_exact_edit_scores_one():
    resp = "<think>the off-by-one</think>\n<solution>\n" + _block("pkg/a.py", "    return x + 1\n", "    return x + 2\n") + "</solution>"
    res = rw.swe_rl_reward(resp, files=FILES, oracle=ORACLE)
    assert res.reason == "ok" and res.score == 1.0 and res.format_ok
    assert rw.swe_rl_reward(resp, files=FILES, oracle=ORACLE, exact=True).score == 1.0
    # The patch is the unified diff of the edit, header stripped, hunks kept.
    assert res.patch["pkg/a.py"].splitlines()[:3] == ["@@ -1,5 +1,5 @@", " def f(x):", "-    return x + 1"]


def test_swe_rl_similarity_matches_hand_written_diffs():
    # The policy changes the right line but to the wrong value.
    resp = _block("pkg/a.py", "    return x + 1\n", "    return x - 1\n", fence=False)
    res = rw.swe_rl_reward(resp, files=FILES, oracle=ORACLE)
    pred = "@@ -1,5 +1,5 @@\n def f(x):\n-    return x + 1\n+    return x - 1\n \n \n def g(y):"
    gold = "@@ -1,5 +1,5 @@\n def f(x):\n-    return x + 1\n+    return x + 2\n \n \n def g(y):"
    want = difflib.SequenceMatcher(None, pred, gold, autojunk=False).ratio()
    assert res.reason == "ok" and res.score == pytest.approx(want) and 0.9 < res.score < 1.0
    assert rw.swe_rl_reward(resp, files=FILES, oracle=ORACLE, exact=True).score == 0.0
    # An edit to a file the oracle does not touch averages in a 0 for that file (SWE-RL rule).
    two = resp + _block("pkg/b.py", "VALUE = 1\n", "VALUE = 2\n")
    res2 = rw.swe_rl_reward(two, files=FILES, oracle=ORACLE)
    assert res2.score == pytest.approx(want / 2)


def test_swe_rl_sequential_blocks_deletion_and_whole_patch_oracle():
    resp = (
        _block("pkg/a.py", "    return x + 1\n", "    return x + 3\n")
        + _block("pkg/a.py", "    return x + 3\n", "    return x + 2\n")  # sees the first edit
        + _block("pkg/a.py", "def g(y):\n    return y * 2\n", "")  # deletes g
    )
    res = rw.swe_rl_reward(resp, files=FILES, oracle={"pkg/a.py": "def f(x):\n    return x + 2\n\n\n"})
    assert res.reason == "ok" and res.score == 1.0
    # Oracle as a whole unified-diff string: compared with the rendered prediction.
    single = _block("pkg/a.py", "    return x + 1\n", "    return x + 2\n")
    ok = rw.swe_rl_reward(single, files=FILES, oracle=ORACLE)
    oracle_str = "--- a/pkg/a.py\n+++ b/pkg/a.py\n" + ok.patch["pkg/a.py"]
    assert rw.render_patch(ok.patch) == oracle_str
    assert rw.swe_rl_reward(single, files=FILES, oracle=oracle_str, exact=True).score == 1.0
    assert rw.swe_rl_reward(single, files=FILES, oracle=oracle_str + "\n+x").score < 1.0


@pytest.mark.parametrize(
    "response, reason",
    [
        (None, "not_a_string"),
        (b"bytes", "not_a_string"),
        ("", "empty_response"),
        ("  \n\t", "empty_response"),
        ("I think the fix is to add one.", "no_edit_blocks"),
        ("### pkg/a.py\n<<<<<<< SEARCH\n    return x + 1\n=======\n    return x + 2\n", "malformed_edit_block"),
        ("<<<<<<< SEARCH\n    return x + 1\n=======\n    return x + 2\n>>>>>>> REPLACE\n", "malformed_edit_block"),
        ("### pkg/a.py\n<<<<<<< SEARCH\n    return x + 1\n>>>>>>> REPLACE\n", "malformed_edit_block"),
        (_block("pkg/c.py", "x\n", "y\n"), "unknown_file"),
        (_block("pkg/a.py", "", "y = 1\n"), "empty_search"),
        (_block("pkg/a.py", "    return x + 1\n", "    return x + 1\n"), "identical_search_replace"),
        (_block("pkg/a.py", "    return x + 10\n", "    return x + 2\n"), "search_not_found"),
        (_block("pkg/a.py", "eturn x + 1\n", "eturn x + 2\n"), "search_not_found"),  # not at a line start
        (_block("pkg/a.py", "    return x + 1\n", "    return x + 2\n") + _block("pkg/a.py", "    return x + 1\n", "z\n"), "search_not_found"),
    ],
)
def test_swe_rl_format_violations_score_minus_one(response, reason):
    res = rw.swe_rl_reward(response, files=FILES, oracle=ORACLE)
    assert res.score == -1.0 and res.reason == reason and not res.format_ok
    assert rw.swe_rl_reward(response, files=FILES, oracle=ORACLE, exact=True).score == -1.0


_fragments = st.sampled_from(
    ["### pkg/a.py\n", "### \n", "<<<<<<< SEARCH\n", "=======\n", ">>>>>>> REPLACE\n", "```\n",
     "    return x + 1\n", "    return x + 2\n", "def g(y):\n", "<solution>", "</solution>", "\n", "VALUE = 1\n"]
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(_fragments, st.text(max_size=8)), max_size=14))
def test_swe_rl_never_raises_on_garbage(parts):
    res = rw.swe_rl_reward("".join(parts), files=FILES, oracle=ORACLE)
    assert res.score == -1.0 or 0.0 <= res.score <= 1.0
    assert (res.score == -1.0) == (res.reason != "ok")


def test_swe_rl_batch_helper():
    good = _block("pkg/a.py", "    return x + 1\n", "    return x + 2\n")
    out = rw.swe_rl_rewards([good, ""], files=[FILES, FILES], oracle=[ORACLE, ORACLE])
    assert [r.score for r in out] == [1.0, -1.0]
    with pytest.raises(ValueError, match="same length"):
        rw.swe_rl_rewards([good], files=[FILES, FILES], oracle=[ORACLE])
    with pytest.raises(ValueError, match="files must be a mapping"):
        rw.swe_rl_reward(good, files=None, oracle=ORACLE)
    with pytest.raises(ValueError, match="oracle must be"):
        rw.swe_rl_reward(good, files=FILES, oracle=None)
    with pytest.raises(ValueError, match="parse_search_replace: no_edit_blocks"):
        rw.parse_search_replace("nothing here")
    assert rw.parse_search_replace(good) == [("pkg/a.py", "    return x + 1\n", "    return x + 2\n")]


# ---------------------------------------------------------------- registry


def test_registry_builtins_and_convention():
    assert {"binary_tests", "fraction_tests", "swe_rl_similarity", "swe_rl_exact"} <= set(rw.available_rewards())
    passed = np.array([[1, 1, 0], [1, 0, 1]], bool)
    batch = {"passed": passed, "fail_to_pass": np.array([1, 0, 0], bool), "pass_to_pass": np.array([0, 1, 0], bool)}
    fn = rw.get_reward("binary_tests")
    assert fn.jittable and fn.required_keys == ("passed", "fail_to_pass", "pass_to_pass")
    np.testing.assert_array_equal(fn(batch), [1, 0])
    np.testing.assert_array_equal(jax.jit(lambda b: fn(b))(batch), [1, 0])
    np.testing.assert_allclose(rw.get_reward("fraction_tests")(batch), [1.0, 0.5])
    good = _block("pkg/a.py", "    return x + 1\n", "    return x - 1\n")
    sbatch = {"responses": [good, "nope"], "files": [FILES, FILES], "oracle": [ORACLE, ORACLE]}
    sim = rw.get_reward("swe_rl_similarity")
    assert not sim.jittable
    s = sim(sbatch)
    assert s.dtype == np.float32 and s[1] == -1.0 and 0.9 < s[0] < 1.0
    np.testing.assert_array_equal(rw.get_reward("swe_rl_exact")(sbatch), [0.0, -1.0])


def test_registry_errors_and_custom_reward():
    with pytest.raises(ValueError, match="known rewards:.*binary_tests"):
        rw.get_reward("binary_test")
    with pytest.raises(ValueError, match=r"lacks keys \['pass_to_pass'\]"):
        rw.get_reward("binary_tests")({"passed": np.ones((1, 1), bool), "fail_to_pass": np.ones(1, bool)})

    @rw.register_reward("_test_length", required_keys=("responses",), jittable=False, overwrite=True)
    def _length(batch, *, scale=1.0):
        return np.asarray([scale * len(r) for r in batch["responses"]], np.float32)

    np.testing.assert_array_equal(rw.get_reward("_test_length")({"responses": ["ab", ""]}, scale=2.0), [4.0, 0.0])
    with pytest.raises(ValueError, match="already registered"):
        rw.register_reward("_test_length", required_keys=(), jittable=False)(_length)
