"""The committed slice of DeepMind's mathematics_dataset (scripts/gen_mathematics_dataset.py): its layout, and,
where the generator's venv exists, a regenerated sample equal to the committed rows."""
import collections
import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "prs" / "tasks" / "data" / "mathematics_dataset.jsonl"
SCRIPT = ROOT / "scripts" / "gen_mathematics_dataset.py"
# the throw-away venv the script's docstring makes (sympy==1.5.1 cannot live in the project's venv)
GEN_PYTHON = os.environ.get("PRS_MATHDS_PYTHON", "/tmp/mdvenv/bin/python")


def _rows():
    with open(DATA) as f:
        return [json.loads(line) for line in f]


def test_the_committed_slice_has_every_pair_with_its_count_and_seed():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_md", SCRIPT)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)  # the script imports the generator only inside its functions
    rows = _rows()
    per = collections.Counter((r["split"], r["level"], r["module"]) for r in rows)
    want = {("train", lvl, m): gen.COUNTS[f"train-{lvl}"] for lvl in ("easy", "medium", "hard")
            for m in gen.TRAIN_MODULES}
    want |= {("interpolate", "interpolate", m): gen.COUNTS["interpolate"] for m in gen.TRAIN_MODULES}
    want |= {("extrapolate", "extrapolate", m): gen.COUNTS["extrapolate"] for m in gen.EXTRAPOLATE_MODULES}
    assert dict(per) == want
    for r in rows:
        split = r["split"] if r["split"] != "train" else f"train-{r['level']}"
        assert r["seed"] == gen.pair_seed(split, r["module"]) and r["generator"] == gen.GENERATOR
        assert r["question"] and r["answer"]


@pytest.mark.skipif(not os.path.exists(GEN_PYTHON),
                    reason=f"the generator's venv ({GEN_PYTHON}; PRS_MATHDS_PYTHON) is absent: see the script's docstring")
def test_a_regenerated_sample_equals_the_committed_rows():
    rows = _rows()
    for split, module in (("train-hard", "arithmetic__mixed"), ("interpolate", "numbers__gcd"),
                          ("extrapolate", "arithmetic__mul_big")):
        out = subprocess.run([GEN_PYTHON, str(SCRIPT), "--only", f"{split}/{module}", "--count", "4"],
                             capture_output=True, text=True, check=True, timeout=120).stdout
        got = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        level = split.split("-", 1)[1] if split.startswith("train-") else split
        committed = [r for r in rows if r["module"] == module and r["level"] == level][:4]
        assert got == committed
