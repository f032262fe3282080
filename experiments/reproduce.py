"""Re-runs a recorded run from the config in its ``summary.json`` and compares the records exactly.

    python -m experiments.reproduce results/runs/repro/arith-ps_ada-s0        # exit 1 on any difference

The run is rebuilt from the recorded ``config`` (the full validated ``TrainCfg``) with a fresh warm
start in a temporary directory (``sft.base_dir`` is redirected there, nothing is read from the
recorded run's caches), trained with the same seed, and its ``metrics.jsonl`` is compared line by
line with the recorded one, every field except wall-clock (``time_*``). Run it with the recorded
``XLA_FLAGS`` (``provenance.xla_flags``; unset for a plain run): XLA:CPU's results depend on the
number of host devices, so the test suite's 8 fake devices give other records. The recorded commit
(``summary.json: provenance``) is printed next to the current one, so a difference can be traced to
the code that changed under the run.
"""
from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import sys
import tempfile


def read_records(run_dir: pathlib.Path) -> list[dict]:
    """``metrics.jsonl`` (or its committed ``.gz``) of ``run_dir``."""
    plain, packed = run_dir / "metrics.jsonl", run_dir / "metrics.jsonl.gz"
    text = plain.read_text() if plain.exists() else gzip.decompress(packed.read_bytes()).decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def comparable(records: list[dict]) -> list[dict]:
    """The records without wall-clock fields (the only ones a re-run may change)."""
    return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in records]


def rerun(run_dir, out_dir) -> list[dict]:
    """Trains the run recorded in ``run_dir`` again into ``out_dir``; returns its records."""
    from omegaconf import OmegaConf

    from experiments.config import validate
    from experiments.train import build
    from prs.rl.runner import run

    run_dir, out_dir = pathlib.Path(run_dir), pathlib.Path(out_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    if not summary.get("config"):
        raise ValueError(f"{run_dir}/summary.json records no config; it cannot be re-run")
    config = dict(summary["config"])
    config["sft"] = {**config["sft"], "base_dir": str(out_dir / "base")}
    config["logging"] = {**config["logging"], "wandb_mode": "disabled", "progress": False}
    cfg = validate(OmegaConf.create(config))
    task, model_cfg, rl, prefix, run_cfg = build(cfg)
    run(task, model_cfg, rl, prefix, run_cfg, out_dir / "run", log=lambda *a: None)
    return read_records(out_dir / "run")


def diff(recorded: list[dict], fresh: list[dict]) -> list[str]:
    """Human-readable differences between two record lists (empty: identical)."""
    a, b = comparable(recorded), comparable(fresh)
    out = [] if len(a) == len(b) else [f"{len(a)} recorded lines vs {len(b)} re-run lines"]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            out.append(f"line {i} ({x.get('kind')} step {x.get('step')}): " +
                       ", ".join(f"{k}: {x.get(k)!r} vs {y.get(k)!r}" for k in keys[:6]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir")
    args = ap.parse_args(argv)
    run_dir = pathlib.Path(args.run_dir)
    from prs.rl.provenance import code_state

    rec = json.loads((run_dir / "summary.json").read_text()).get("provenance", {})
    now = code_state()
    print(f"recorded commit {rec.get('commit')} (dirty {rec.get('dirty')}); now {now['commit']} (dirty {now['dirty']})")
    if rec.get("xla_flags") != now["xla_flags"]:
        print(f"warning: XLA_FLAGS differ (recorded {rec.get('xla_flags')!r}, now {now['xla_flags']!r}); XLA:CPU "
              "numerics depend on the host device count, so the records may differ for that reason alone")
    with tempfile.TemporaryDirectory() as tmp:
        problems = diff(read_records(run_dir), rerun(run_dir, tmp))
    for line in problems:
        print(line)
    print("identical records" if not problems else f"{len(problems)} difference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
