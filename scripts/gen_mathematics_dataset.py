"""Generate prs's slice of DeepMind's ``mathematics_dataset`` (Saxton et al., ICLR 2019, arXiv 1904.01557;
PyPI ``mathematics-dataset`` 1.0.1, Apache-2.0) as JSONL, once, in a throw-away venv.

The generator needs ``sympy==1.5.1`` (newer sympy lacks what it imports), which cannot live in the project's
venv (torch needs sympy >= 1.13), so the data is made once and committed:

    python3 -m venv /tmp/mdvenv && /tmp/mdvenv/bin/pip install "sympy==1.5.1" "mathematics-dataset==1.0.1"
    /tmp/mdvenv/bin/python scripts/gen_mathematics_dataset.py --out prs/tasks/data/mathematics_dataset.jsonl

Every (split, module) pair has its own seed, ``SEED + crc32(split/module)``, set into Python's ``random`` and
numpy's global generator (the two the generator draws from) right before that pair's problems are drawn, so
one pair's rows regenerate without the others (``--only SPLIT/MODULE --count K`` prints the first K rows of a
pair; ``tests/tasks/test_tables_mathematics_dataset.py`` compares them with the committed file when the generator is
importable, and is skipped with one line otherwise). Problems are drawn as ``generate.py`` draws them
(``sample_from_module``: questions/answers over the length limits are redrawn), the train pools at the three
entropy levels of ``generate.py --train_split`` (easy / medium / hard thirds of each module's entropy range),
the test sets at the generator's own interpolate / extrapolate settings.

Row: ``{"question", "answer", "module", "split", "level", "seed", "index", "generator"}`` (``level``: easy /
medium / hard for train rows, the split's name for test rows; ``index``: the row's place in its pair's draw).
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import zlib

SEED = 20261206
GENERATOR = "mathematics-dataset==1.0.1 sympy==1.5.1"
# a module mix a few-million-parameter character model can partly learn, graded by exact answer match
TRAIN_MODULES = ("arithmetic__add_or_sub", "arithmetic__add_sub_multiple", "arithmetic__mul", "arithmetic__div",
                 "arithmetic__mixed", "comparison__pair", "comparison__kth_biggest", "numbers__round_number",
                 "numbers__place_value", "numbers__gcd", "numbers__div_remainder", "measurement__conversion")
EXTRAPOLATE_MODULES = ("arithmetic__add_or_sub_big", "arithmetic__add_sub_multiple_longer", "arithmetic__mul_big",
                       "arithmetic__div_big", "arithmetic__mixed_longer", "comparison__kth_biggest_more",
                       "numbers__round_number_big", "numbers__place_value_big", "measurement__conversion")
COUNTS = {"train-easy": 700, "train-medium": 700, "train-hard": 700, "interpolate": 100, "extrapolate": 60}


def pair_seed(split: str, module: str) -> int:
    return SEED + zlib.crc32(f"{split}/{module}".encode())


def rows_for(flat, split: str, module: str, count: int):
    import numpy as np
    from mathematics_dataset import generate as g

    seed = pair_seed(split, module)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    level = split.split("-", 1)[1] if split.startswith("train-") else split
    for i in range(count):
        problem, _ = g.sample_from_module(flat[split][module])
        yield {"question": str(problem.question), "answer": str(problem.answer), "module": module,
               "split": "train" if split.startswith("train-") else split, "level": level, "seed": seed,
               "index": i, "generator": GENERATOR}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="JSONL to write (refused if it exists)")
    ap.add_argument("--only", help="SPLIT/MODULE: print that pair's first --count rows to stdout")
    ap.add_argument("--count", type=int, default=5)
    args = ap.parse_args(argv)
    from absl import flags
    from mathematics_dataset import generate as g

    flags.FLAGS(["gen"])
    g.init_modules(train_split=True)
    flat = g.filtered_modules
    if args.only:
        split, module = args.only.split("/", 1)
        for r in rows_for(flat, split, module, args.count):
            print(json.dumps(r, sort_keys=True))
        return 0
    if not args.out:
        ap.error("--out or --only is required")
    import os

    if os.path.exists(args.out):
        ap.error(f"--out {args.out} exists; choose a new path")
    pairs = [(s, m) for s in ("train-easy", "train-medium", "train-hard", "interpolate") for m in TRAIN_MODULES]
    pairs += [("extrapolate", m) for m in EXTRAPOLATE_MODULES]
    with open(args.out + ".tmp", "w") as f:
        for j, (split, module) in enumerate(pairs):
            for r in rows_for(flat, split, module, COUNTS[split]):
                f.write(json.dumps(r, sort_keys=True) + "\n")
            print(f"[{j + 1}/{len(pairs)}] {split}/{module}", file=sys.stderr, flush=True)
    os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
