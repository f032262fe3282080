"""``python -m theory [--n 8] [--json] [--out DIR | --no-out]``: bucket table, optimality report, partial-pass.

Text by default; ``--json`` prints one JSON document instead. Also writes ``DIR/theory.json``
and ``DIR/tables.txt`` (the tables) and ``DIR/fig2_pass_rate_metrics.png`` (Agg backend, no display needed) into
``--out DIR``, by default ``outputs/theory/`` (``--no-out``: print only), and says where.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from collections.abc import Sequence

from theory.buckets import bucket_table
from theory.optimum import check_optimum
from theory.partial_pass import partial_pass_analysis


DEFAULT_OUT = pathlib.Path("outputs") / "theory"


def build_report(n: int) -> dict:
    t0 = time.perf_counter()
    table = bucket_table(n)
    optimum = check_optimum()
    partial = partial_pass_analysis()
    return {"bucket_table": table, "optimum": optimum, "partial_pass": partial,
            "seconds": time.perf_counter() - t0}


def _to_json(report: dict) -> dict:
    return {"bucket_table": report["bucket_table"].to_dict(), "optimum": report["optimum"].to_dict(),
            "partial_pass": report["partial_pass"].to_dict(), "seconds": report["seconds"]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m theory", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="group size of the bucket table and figure (default 8)")
    ap.add_argument("--json", action="store_true", help="print machine-readable JSON instead of text")
    ap.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT,
                    help=f"write theory.json and the Fig. 2 PNG here (default {DEFAULT_OUT}/)")
    ap.add_argument("--no-out", action="store_true", help="write no files, only print")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error(f"--n must be >= 1, got {args.n}")
    report = build_report(args.n)
    doc = _to_json(report)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        sys.stdout.write("\n")
    text = "\n\n".join([report["bucket_table"].format(), report["optimum"].summary(), report["partial_pass"].format()])
    if not args.json:
        print(text)
    if not args.no_out:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        from theory.figure import plot_fig2  # noqa: PLC0415

        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "theory.json").write_text(json.dumps(doc, indent=1) + "\n")
        (args.out / "tables.txt").write_text(text + "\n")
        fig = plot_fig2(args.n)
        fig.savefig(args.out / "fig2_pass_rate_metrics.png", dpi=120, bbox_inches="tight")
        where = (f"wrote {args.out / 'theory.json'}, {args.out / 'tables.txt'} and "
                 f"{args.out / 'fig2_pass_rate_metrics.png'}")
        if args.json:
            print(where, file=sys.stderr)  # stdout stays one JSON document
        else:
            print(f"\n{where}")
    return 0
