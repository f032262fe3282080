"""``python -m theory [--n 8] [--json] [--out DIR | --no-out]``: bucket table, optimality report, partial-pass.

``python -m theory controls [--beta A,B | --hist h0,...,hN] [--n 8] [--groups 32] ...``: each pass-rate
control's informative groups per 1000 generated rollouts and tokens and its ratio to uniform
(``theory.controls``); prints only, writes nothing. The default report also ends with this table for
Beta(0.5, 0.5) and Beta(2, 2).

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


def _floats(name: str, text: str, count: int | None = None) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated numbers, got {text!r}") from None
    if count is not None and len(vals) != count:
        raise ValueError(f"{name} needs {count} numbers, got {text!r}")
    return vals


def controls_main(argv: Sequence[str]) -> int:
    """``python -m theory controls``: the pass-rate controls table for one pool."""
    from theory import controls as tc  # noqa: PLC0415

    ap = argparse.ArgumentParser(prog="python -m theory controls",
                                 description="informative groups per generated rollout/token under each control")
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--beta", help="task pass rates ~ Beta(A, B), e.g. 0.5,0.5 (default)")
    src.add_argument("--hist", help="measured step-0 shares of groups with k = 0..N successes, e.g. 0.3,0.1,...")
    ap.add_argument("--n", type=int, default=None, help="rollouts per group N (default 8, or len(--hist) - 1)")
    ap.add_argument("--groups", type=int, default=32, help="groups trained per step B (default 32)")
    ap.add_argument("--gen-groups", type=int, default=None, help="dynamic sampling: groups per gen batch (default B)")
    ap.add_argument("--max-batches", type=int, default=10,
                    help="dynamic sampling: cap on gen batches (default 10, the trainer's schedule.ds_max_gen_batches)")
    ap.add_argument("--n-init", type=int, default=4, help="screen: screening rollouts per candidate (default 4)")
    ap.add_argument("--target", type=float, default=0.5, help="Prefix Sampling controller target (default 0.5)")
    ap.add_argument("--pool-size", type=int, default=None, help="predicted: tasks to choose from M (default 4B)")
    ap.add_argument("--reroll", choices=("add", "replace"), default="add",
                    help="Prefix Sampling: both groups trained (add, schedule.reroll=append; default) or the re-roll "
                         "replaces a group when mixed (replace, prs's default schedule.reroll=replace + fallback)")
    ap.add_argument("--lengths", default=None, help="mean tokens of a success,failure rollout (default 1,1)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of the table")
    args = ap.parse_args(list(argv))
    try:
        if args.hist is not None:
            pool, note = tc.hist_pool(_floats("--hist", args.hist))
            n_hist = len(_floats("--hist", args.hist)) - 1
            if args.n is not None and args.n != n_hist:
                ap.error(f"--n {args.n} disagrees with --hist (k = 0..{n_hist}: N = {n_hist})")
            n = n_hist
        else:
            a, b = _floats("--beta", args.beta or "0.5,0.5", 2)
            pool, note = tc.beta_pool(a, b), f"task pass rates ~ Beta({a:g}, {b:g})"
            n = 8 if args.n is None else args.n
        ls, lf = _floats("--lengths", args.lengths, 2) if args.lengths else (1.0, 1.0)
        rates = tc.compare_controls(pool, n=n, groups=args.groups, gen_groups=args.gen_groups,
                                    max_batches=args.max_batches, n_init=args.n_init, target=args.target,
                                    pool_size=args.pool_size, len_success=ls, len_failure=lf, reroll=args.reroll)
    except ValueError as e:
        ap.error(str(e))
    if args.json:
        json.dump({"pool": note, "n": n, "controls": [r.to_dict() for r in rates]}, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(note)
        print(tc.format_controls(rates, title=f"{pool.label}, N = {n}, B = {args.groups}"))
    return 0


def _default_controls_text() -> str:
    from theory import controls as tc  # noqa: PLC0415

    return "\n\n".join(tc.format_controls(tc.compare_controls(tc.beta_pool(a, b)), title=f"Beta({a:g}, {b:g}), N = 8, B = 32")
                       for a, b in ((0.5, 0.5), (2.0, 2.0)))


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["controls"]:
        return controls_main(argv[1:])
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
    text = "\n\n".join([report["bucket_table"].format(), report["optimum"].summary(), report["partial_pass"].format(),
                        _default_controls_text()])
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
