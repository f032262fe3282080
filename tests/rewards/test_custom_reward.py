"""A user's reward function (``prs.rewards.custom``): loaded by file or module, called with TRL's
signature, every failure one line naming the function and the row, the pool equal to serial."""
import hashlib
import pathlib
import sys

import numpy as np
import pytest

from prs.rewards.custom import CustomReward, RewardConfig, RewardError

FILE = pathlib.Path(__file__).resolve().parents[1] / "data" / "own_setup" / "my_reward.py"

BAD = '''
import math
def raises(completions, **kw):
    return [1.0 / (len(c) - 3) for c in completions]      # ZeroDivisionError on a 3-character completion
def short(completions, **kw):
    return [0.0] * (len(completions) - 1)
def text(completions, **kw):
    return [None if c == "x" else 1.0 for c in completions]
def nan(completions, **kw):
    return [math.nan if c == "x" else 0.0 for c in completions]
def half(completions, **kw):
    return [0.5 if c == "x" else 1.0 for c in completions]
def scalar(completions, **kw):
    return 1.0
def columns(completions, **kw):
    return [float(len(kw)) for _ in completions]
'''


def _cols(n):
    return {"final": [str(i % 3) for i in range(n)], "level": list(range(n))}


def test_trl_signature_gets_the_columns_per_row():
    reward = CustomReward(RewardConfig(path=str(FILE), name="correct"))
    completions = ["so \\boxed{0}", "\\boxed{0}", "no box 2", "\\boxed{ 0 }"]
    got = reward(completions, _cols(4), [f"row {i}" for i in range(4)])
    # by hand: finals are 0, 1, 2, 0
    np.testing.assert_array_equal(got, [1.0, 0.0, 0.0, 1.0])
    graded = CustomReward(RewardConfig(path=str(FILE), name="graded", graded=True))
    np.testing.assert_array_equal(graded(completions, _cols(4), list("abcd")), [1.0, 0.25, 0.0, 1.0])


def test_module_form_and_provenance_hash(tmp_path, monkeypatch):
    (tmp_path / "myrewards.py").write_text(FILE.read_text())
    monkeypatch.syspath_prepend(str(tmp_path))
    reward = CustomReward(RewardConfig(module="myrewards", name="correct"))
    np.testing.assert_array_equal(reward(["\\boxed{1}"], {"final": ["1"]}, ["r"]), [1.0])
    prov = reward.provenance()
    assert prov["sha256"] == hashlib.sha256(FILE.read_bytes()).hexdigest() and prov["module"] == "myrewards"
    prov = CustomReward(RewardConfig(path=str(FILE), name="correct")).provenance()
    assert prov["file"] == str(FILE) and prov["sha256"] == hashlib.sha256(FILE.read_bytes()).hexdigest()
    sys.modules.pop("myrewards", None)


@pytest.mark.parametrize("name, config, match", [
    ("raises", {}, r"reward function raises \(.*bad.py\) raised ZeroDivisionError: .* on row 2"),
    ("short", {}, r"returned 3 rewards for 4 completions"),
    ("text", {}, r"returned None \(a NoneType, not a number\) for row 2"),
    ("nan", {}, r"returned nan for row 2; rewards must be finite"),
    ("half", {}, r"returned 0.5 for row 2, but the reward must be 0 or 1 unless reward.graded=true"),
    ("scalar", {}, r"returned a float; it must return a list of 4 floats"),
])
def test_a_bad_reward_is_one_line_naming_the_function_and_row(tmp_path, name, config, match):
    (tmp_path / "bad.py").write_text(BAD)
    reward = CustomReward(RewardConfig(path=str(tmp_path / "bad.py"), name=name, **config))
    with pytest.raises(RewardError, match=match) as e:
        reward(["aaaa", "bbbb", "xyz" if name == "raises" else "x", "dddd"], {}, [f"row {i}" for i in range(4)])
    assert "\n" not in str(e.value) and name in str(e.value)


def test_graded_accepts_partial_credit(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    reward = CustomReward(RewardConfig(path=str(tmp_path / "bad.py"), name="half", graded=True))
    np.testing.assert_array_equal(reward(["x", "y"], {}, ["a", "b"]), [0.5, 1.0])


def test_config_errors(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        RewardConfig(path="a.py", module="m", name="f")
    with pytest.raises(ValueError, match="reward.name"):
        RewardConfig(path="a.py")
    with pytest.raises(ValueError, match="needs reward.path"):
        RewardConfig(name="f")
    with pytest.raises(ValueError, match="reward.workers"):
        RewardConfig(path="a.py", name="f", workers=-1)
    with pytest.raises(RewardError, match="no such file"):
        CustomReward(RewardConfig(path=str(tmp_path / "absent.py"), name="f"))
    with pytest.raises(RewardError, match=r"no function of that name; it defines \['correct', 'graded'\]"):
        CustomReward(RewardConfig(path=str(FILE), name="nope"))


def test_process_pool_equals_serial(tmp_path):
    """``workers=2``: the same rewards, in the same order, as the serial call; an error from a worker
    names the same row as the serial call."""
    rng = np.random.default_rng(0)
    n = 37
    finals = [str(x) for x in rng.integers(0, 4, n)]
    completions = [f"\\boxed{{{x}}}" if rng.random() < 0.8 else "none" for x in rng.integers(0, 4, n)]
    cols = {"final": finals, "level": list(range(n))}
    where = [f"row {i}" for i in range(n)]
    serial = CustomReward(RewardConfig(path=str(FILE), name="graded", graded=True))(completions, cols, where)
    pooled = CustomReward(RewardConfig(path=str(FILE), name="graded", graded=True, workers=2))(completions, cols, where)
    np.testing.assert_array_equal(pooled, serial)
    assert set(serial) == {0.0, 0.25, 1.0}
    (tmp_path / "bad.py").write_text(BAD)
    bad = ["aaaa"] * n
    bad[29] = "x"
    with pytest.raises(RewardError, match=r"returned nan for row 29"):
        CustomReward(RewardConfig(path=str(tmp_path / "bad.py"), name="nan", workers=2))(bad, {}, where)
