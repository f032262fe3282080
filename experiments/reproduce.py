"""Re-runs a recorded run from the config in its ``summary.json`` and compares the records.

    python -m experiments.reproduce results/repro/arith-ps_ada-s0        # exit 1 on any difference

Exact replay holds only on a machine whose numerics match the recording one (``prs.rl.provenance``:
the CPU's instruction set, cores, device count, jax/jaxlib, ``XLA_FLAGS``): XLA:CPU compiles for the
host, so an AVX2-only machine rounds a reduction differently from an AVX-512 one and a run drifts
apart within a few steps, while each machine on its own is deterministic. ``--mode auto`` (default)
therefore compares exactly when the record's machine fingerprint matches this machine's, and
otherwise says which fields differ and checks what a machine can promise: two fresh re-runs here
give identical records (determinism), the rebuilt config equals the recorded one, and the first
step's discrete records (pass rate, k histogram, groups steered) are shown against the record's
(expected to agree on most machines, not required).

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

import json
import pathlib
import sys
import tempfile

from prs.analysis.runs import read_records  # noqa: F401  (also this module's API)
from experiments import cli


def comparable(records: list[dict]) -> list[dict]:
    """The records without wall-clock fields (the only ones a re-run may change)."""
    return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in records]


def rerun(run_dir, out_dir) -> list[dict]:
    """Trains the run recorded in ``run_dir`` again into ``out_dir``; returns its records."""
    from omegaconf import OmegaConf

    from experiments.config import upgrade, validate
    from experiments.train import build
    from prs.rl.runner import run

    run_dir, out_dir = pathlib.Path(run_dir), pathlib.Path(out_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    if not summary.get("config"):
        raise ValueError(f"{run_dir}/summary.json records no config; it cannot be re-run")
    config = upgrade(summary["config"])  # a record of the earlier flat layout, in today's
    config["sft"] = {**config["sft"], "base_dir": str(out_dir / "base")}
    config["logging"] = {**config["logging"], "wandb_mode": "disabled", "progress": False}
    cfg = validate(OmegaConf.create(config))
    task, model_cfg, rl, prefix, run_cfg = build(cfg)
    run(task, model_cfg, rl, prefix, run_cfg, out_dir / "run", log=lambda *a: None)
    return read_records(out_dir / "run")


def diff(recorded: list[dict], fresh: list[dict]) -> list[str]:
    """Human-readable differences between two record lists (empty: identical). A field the re-run
    logs that the record does not have (a metric added since) is new, not different: it is not
    compared (``new_fields`` lists them); a recorded field the re-run lacks is a difference."""
    a, b = comparable(recorded), comparable(fresh)
    out = [] if len(a) == len(b) else [f"{len(a)} recorded lines vs {len(b)} re-run lines"]
    for i, (x, y) in enumerate(zip(a, b)):
        y = {k: v for k, v in y.items() if k in x}
        if x != y:
            keys = sorted(k for k in set(x) | set(y) if x.get(k) != y.get(k))
            out.append(f"line {i} ({x.get('kind')} step {x.get('step')}): " +
                       ", ".join(f"{k}: {x.get(k)!r} vs {y.get(k)!r}" for k in keys[:6]))
    return out


# the first training step's fields that do not carry floating-point rounding (counts and rates of
# 0/1 rewards); they agree across machines as long as the warm starts sample the same tokens
DISCRETE_STEP0 = ("pass_rate", "k_hist", "groups_steered", "groups_rerolled", "rollouts_sampled")


def step0_discrete(records: list[dict]) -> dict:
    """The first training record's rounding-free fields (``DISCRETE_STEP0``)."""
    first = next((r for r in records if r.get("kind") == "train"), {})
    return {k: first.get(k) for k in DISCRETE_STEP0 if k in first}


def recorded_machine(run_dir: pathlib.Path) -> dict | None:
    """The machine fingerprint the run recorded (``summary.json: provenance.machine``; None if absent)."""
    return json.loads((run_dir / "summary.json").read_text()).get("provenance", {}).get("machine")


def check(run_dir, *, mode: str = "auto", log=print) -> int:
    """Replays ``run_dir`` (see the module docstring); returns 0 when every required comparison holds."""
    from prs.rl.provenance import code_state, fingerprint_mismatch

    if mode not in ("auto", "exact", "determinism"):
        raise ValueError(f"mode={mode!r}; choose from ('auto', 'exact', 'determinism')")
    run_dir = pathlib.Path(run_dir)
    rec = json.loads((run_dir / "summary.json").read_text()).get("provenance", {})
    now = code_state()
    log(f"recorded commit {rec.get('commit')} (dirty {rec.get('dirty')}); now {now['commit']} (dirty {now['dirty']})")
    why = fingerprint_mismatch(rec.get("machine"), now["machine"])
    if mode == "auto":
        mode = "exact" if not why else "determinism"
        if why:
            log("exact replay is not expected here, the machines differ in what decides XLA:CPU's numerics: "
                + "; ".join(why) + " -> checking determinism and the machine-independent records instead")
    recorded = read_records(run_dir)
    with tempfile.TemporaryDirectory() as tmp:
        first = rerun(run_dir, pathlib.Path(tmp) / "a")
        if mode == "exact":
            problems = diff(recorded, first)
            if new_fields(recorded, first):
                log(f"not compared (fields added since the record): {', '.join(new_fields(recorded, first))}")
            for line in problems:
                log(line)
            log("identical records" if not problems else f"{len(problems)} difference(s)")
            return 1 if problems else 0
        second = rerun(run_dir, pathlib.Path(tmp) / "b")
    problems = diff(first, second)
    for line in problems:
        log(f"not deterministic: {line}")
    a, b = step0_discrete(recorded), step0_discrete(first)
    log(f"step 0 discrete records {'agree' if a == b else 'differ'}: recorded {a}, here {b}"
        + ("" if a == b else " (the warm starts sampled different tokens on the two machines; not a defect)"))
    log("deterministic: two fresh re-runs gave identical records" if not problems
        else f"{len(problems)} difference(s) between two re-runs on one machine")
    return 1 if problems else 0


def new_fields(recorded: list[dict], fresh: list[dict]) -> list[str]:
    """Fields the re-run logs that no recorded line has (metrics added after the record was made)."""
    have = set().union(*map(set, recorded)) if recorded else set()
    return sorted(set().union(*map(set, fresh)) - have) if fresh else []


@cli.command("experiments.reproduce")
def main(argv=None) -> int:
    ap = cli.ArgumentParser(prog="python -m experiments.reproduce", description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", nargs="?", help="a recorded run directory (summary.json, metrics.jsonl[.gz])")
    ap.add_argument("--mode", default="auto", choices=("auto", "exact", "determinism"),
                    help="auto: exact when the machine fingerprint matches the record's, else determinism")
    ap.add_argument("--sweep", help="a committed sweep directory: re-run seeds of each arm and check its CIs")
    ap.add_argument("--seeds", type=int, default=2, help="with --sweep: seeds re-run per arm")
    ap.add_argument("--variant", help="with --sweep: the task variant (run names <variant>-<arm>-s<seed>)")
    ap.add_argument("--arms", help="with --sweep: comma-separated arms (default: all; the baseline is always added)")
    ap.add_argument("--out", help="with --sweep: where the re-runs go (default runs/reproduce_sweep/<variant>)")
    args = ap.parse_args(argv)
    if args.sweep:
        from experiments import reproduce_sweep

        try:
            return reproduce_sweep.main(pathlib.Path(args.sweep), seeds=args.seeds, variant=args.variant,
                                        arms=args.arms, out=args.out)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    if not args.run_dir:
        ap.error("run_dir: give a recorded run directory (or --sweep DIR)")
    return check(args.run_dir, mode=args.mode)


if __name__ == "__main__":
    sys.exit(main())
