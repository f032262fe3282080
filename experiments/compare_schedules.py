"""The same_step vs next_visit first read (issue #15): per-method token cost and signal per step,
held-out pass@1 by step, and paired (same seed) differences, from run directories.

    python -m experiments.compare_schedules results/schedules/runs --out results/schedules/tables.md

A run directory holds ``metrics.jsonl`` (or ``metrics.jsonl.gz``) and ``summary.json``; its name is
``<task>-<method>-<schedule>-s<seed>``.
"""
from __future__ import annotations

import gzip
import json
import pathlib
import re

import numpy as np

from experiments import cli

COLS = [("tokens_generated", "generated tok/step"), ("tokens_replayed", "replayed tok/step"),
        ("rollouts_sampled", "rollouts/step"), ("groups_steered", "steered/step"), ("groups_kept", "kept/step"),
        ("pq_trained", "mean p(1-p) trained"), ("steered_mixed_share", "steered mixed share"),
        ("loss/grad_norm", "grad norm"), ("time_sample", "sample s/step"), ("time_update", "update s/step")]


def load(path: pathlib.Path) -> list[dict]:
    f = path / "metrics.jsonl"
    text = f.read_text() if f.exists() else gzip.open(path / "metrics.jsonl.gz", "rt").read()
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def table(root: pathlib.Path) -> str:
    runs: dict[str, dict[int, list[dict]]] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        m = re.fullmatch(r"(.+)-s(\d+)", d.name)
        if not m or not ((d / "metrics.jsonl").exists() or (d / "metrics.jsonl.gz").exists()):
            continue
        runs.setdefault(m.group(1), {})[int(m.group(2))] = load(d)
    out = ["| run | seeds | steps | " + " | ".join(c[1] for c in COLS) + " |",
           "|---|---|---|" + "---|" * len(COLS)]
    for name, seeds in runs.items():
        cells = []
        for key, _ in COLS:
            per_seed = [np.mean([r[key] for r in recs if r["kind"] == "train" and r.get(key) is not None] or [np.nan])
                        for recs in seeds.values()]
            cells.append(f"{np.nanmean(per_seed):.3g}")
        steps = min(sum(r["kind"] == "train" for r in recs) for recs in seeds.values())
        out.append(f"| {name} | {len(seeds)} | {steps} | " + " | ".join(cells) + " |")
    out += ["", "Held-out pass@1 (seed mean; eval every 10 steps):", ""]
    ev_steps = sorted({r["step"] for s in runs.values() for recs in s.values() for r in recs if r["kind"] == "eval"})
    out += ["| run | " + " | ".join(f"s{s}" for s in ev_steps) + " |", "|---|" + "---|" * len(ev_steps)]
    for name, seeds in runs.items():
        row = []
        for s in ev_steps:
            v = [r["eval/pass_at_1"] for recs in seeds.values() for r in recs if r["kind"] == "eval" and r["step"] == s]
            row.append(f"{np.mean(v):.3f}" if len(v) == len(seeds) else "–")
        out.append(f"| {name} | " + " | ".join(row) + " |")
    # paired differences next_visit - same_step per method, at the last common eval step
    pairs = [(n, n.replace("-next_visit", "-same_step")) for n in runs if "-next_visit" in n]
    pairs += [(n, re.sub(r"^([^-]+)-[^-]+-", r"\1-baseline-", n)) for n in runs if "-baseline-" not in n]
    out += ["", "Paired (same seed) differences: generated tokens per step (ratio), and pass@1 at the last step:", ""]
    for name, other in pairs:
        if other not in runs or other == name:
            continue
        common = sorted(set(runs[name]) & set(runs[other]))
        tok, ev = [], []
        for sd in common:
            a, b = runs[name][sd], runs[other][sd]
            tok.append(np.mean([r["tokens_generated"] for r in a if r["kind"] == "train"])
                       / np.mean([r["tokens_generated"] for r in b if r["kind"] == "train"]))
            la = [r for r in a if r["kind"] == "eval"]
            lb = [r for r in b if r["kind"] == "eval"]
            if la and lb and la[-1]["step"] == lb[-1]["step"]:
                ev.append(la[-1]["eval/pass_at_1"] - lb[-1]["eval/pass_at_1"])
        out.append(f"- {name} vs {other}: seeds {common}; generated-token ratio per step "
                   f"{' / '.join(f'{t:.3f}' for t in tok)}; Δ pass@1 at the last eval "
                   f"{' / '.join(f'{e:+.3f}' for e in ev)} (mean {np.mean(ev) if ev else float('nan'):+.3f})")
    return "\n".join(out) + "\n"


@cli.command("experiments.compare_schedules")
def main(argv=None):
    ap = cli.ArgumentParser(prog="python -m experiments.compare_schedules", description=__doc__.splitlines()[0])
    ap.add_argument("root", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path, default=None)
    a = ap.parse_args(argv)
    text = table(a.root)
    if a.out:
        a.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
