"""docs/your_own_setup.md end to end: every ```bash block marked ``<!-- tested -->`` runs verbatim
(two training steps on a user's JSONL with a reward file, Prefix Sampling on verl's Parquet, evaluate
of a run and of a checkpoint) on a tiny random checkpoint and the shipped tiny data; then the records
say what the page promises."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("pyarrow")

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "your_own_setup.md"


def _blocks(text: str) -> list[str]:
    """The bash blocks that follow a ``<!-- tested -->`` line."""
    return re.findall(r"<!-- tested -->\n```bash\n(.*?)```", text, flags=re.S)


def test_the_page_marks_its_commands():
    blocks = _blocks(PAGE.read_text())
    assert len(blocks) == 3
    assert "reward.path=$D/my_reward.py" in blocks[0] and "verl_test.parquet" in blocks[1]
    assert "experiments.evaluate" in blocks[2]


@pytest.mark.slow
def test_the_page_runs(tmp_path):
    from prs.models import hf
    from prs.tasks.math_jsonl import tokenizer_texts

    hf.make_tiny_checkpoint(tmp_path / "tiny_ckpt", seed=0, texts=tokenizer_texts())
    env = {**os.environ, "CKPT": "tiny_ckpt", "D": str(REPO / "tests" / "data" / "own_setup"),
           "S": str(REPO / "prs" / "tasks" / "data" / "math_tiny.jsonl"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(pathlib.Path(sys.executable).parent), os.environ["PATH"]])}
    script = "set -euo pipefail\n" + "\n".join(_blocks(PAGE.read_text()))
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = tmp_path / "runs"
    mine, verl = runs / "math_jsonl-baseline-mine-s0", runs / "math_jsonl-ps_ada-verl-s0"
    for run in (mine, verl):
        summary = json.loads((run / "summary.json").read_text())
        assert summary["steps"] == 2
        assert summary["provenance"]["grader"]["backend"] in ("math-verify", "fallback")
        metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        last = [m for m in metrics if m["kind"] == "eval"][-1]
        assert last["eval/pass_at_1"] == pytest.approx(last["eval/all/mean@4"])
    reward_fn = json.loads((mine / "summary.json").read_text())["provenance"]["reward_fn"]
    import hashlib
    assert reward_fn["name"] == "correct" and reward_fn["sha256"] == hashlib.sha256(
        (REPO / "tests" / "data" / "own_setup" / "my_reward.py").read_bytes()).hexdigest()
    last = [json.loads(x) for x in (verl / "metrics.jsonl").read_text().splitlines()][-1]
    assert {"eval/tiny_math/maj@4", "eval/tiny_algebra/pass@4", "eval/math_tiny/mean@4"} <= set(last)
    ev = json.loads((tmp_path / "eval_verl.json").read_text())
    assert ev["rows"] == {"tiny_math": 5, "tiny_algebra": 3, "math_tiny": 24} and ev["step"] == 2
    base = json.loads((tmp_path / "eval_base.json").read_text())
    assert base["rows"] == {"problems": 12} and "table" not in base
    assert "source" in out.stdout and "all" in out.stdout
