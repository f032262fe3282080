"""``python -m experiments.evaluate`` on a tiny random checkpoint: two data files of different layouts
(``|`` key alternatives), a custom reward, the table and the JSON, a fixed seed reproduces, nothing
overwritten, one-line errors."""
import json
import pathlib

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("pyarrow")

from experiments import evaluate  # noqa: E402
from prs.models import hf  # noqa: E402
from prs.tasks.math_jsonl import tokenizer_texts  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "own_setup"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_qwen3")
    hf.make_tiny_checkpoint(path, seed=0, texts=tokenizer_texts())
    return path


def test_evaluate_a_checkpoint_on_two_files(ckpt, tmp_path, capsys):
    (tmp_path / "even.py").write_text("def even(completions, **columns):\n"
                                      "    return [float(len(c) % 2 == 0) for c in completions]\n")
    argv = [str(ckpt), "--data", str(DATA / "problems.jsonl"), str(DATA / "verl_test.parquet"), "--k", "4",
            "--problem-key", "question|prompt", "--answer-key", "final|reward_model.ground_truth",
            "--max-rows", "3", "--max-new-tokens", "8", "--batch", "4",
            "--reward-path", str(tmp_path / "even.py"), "--reward-name", "even"]
    assert evaluate.main(argv + ["--out", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["source", "rows", "mean@4", "pass@1", "pass@2", "pass@4", "maj@4"]
    rec = json.loads((tmp_path / "a.json").read_text())
    assert rec["rows"] == {"problems": 3, "tiny_math": 3} and rec["k"] == 4 and rec["step"] is None
    m = rec["metrics"]
    # pooled = row-weighted mean of the sources; pass@1 = mean@k; binary reward: mean reward = mean@k
    assert m["all/mean@4"] == pytest.approx((m["problems/mean@4"] + m["tiny_math/mean@4"]) / 2)
    assert m["all/pass@1"] == pytest.approx(m["all/mean@4"], abs=1e-6)
    assert rec["reward_mean"] == pytest.approx(m["all/mean@4"])
    assert 0 < m["all/mean@4"] < 1  # random responses of random lengths: both parities occur
    assert rec["reward_fn"]["name"] == "even" and len(rec["reward_fn"]["sha256"]) == 64
    assert rec["grader"]["backend"] in ("math-verify", "fallback")
    # the same seed gives the same numbers; an existing output is refused, not overwritten
    assert evaluate.main(argv + ["--out", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["metrics"] == m
    before = (tmp_path / "a.json").read_text()
    assert evaluate.main(argv + ["--out", str(tmp_path / "a.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "exists" in err and err.count("\n") == 1
    assert (tmp_path / "a.json").read_text() == before


def test_one_line_errors(ckpt, tmp_path, capsys):
    assert evaluate.main([str(tmp_path / "absent"), "--data", str(DATA / "problems.jsonl")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert evaluate.main([str(ckpt), "--data", str(DATA / "problems.jsonl"), "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "lacks 'problem' or 'answer'" in err and err.count("\n") == 1
