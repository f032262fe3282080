"""Analysis of a set of training runs (issue #7): tables, figures and ``results.json``.

    python -m experiments.analyze runs/sweep                      # -> runs/sweep/analysis/
    python -m experiments.analyze runs/sweep --baseline baseline --out results/cpu --ref peak --window 3

Prints markdown tables (every run with its status, steps/wall-clock/tokens to converge and
speed-ups with 95% bootstrap CIs, equal-step improvement, settled re-rollout pass rates per
bucket) and writes into ``--out`` (default ``RUN_ROOT/analysis``):

    results.json              every number of the tables, per task (strict JSON: null for NaN/inf)
    tables.md                 the printed tables
    fig1_<task>.png           held-out pass@1 vs step and vs wall-clock, mean ± 95% CI band
    fig2_metrics.png          the four pass-rate metrics vs p (theory package)
    fig4_<task>.png           ablation: speed-up in steps with CIs beside the paper's 1.00/1.61/1.13/1.92
    fig4_<task>_wall.png      the same in wall-clock
    controller_<task>.png     ρ_b and re-rollout pass rate per bucket over training

Definitions: see ``prs.analysis``. Partial (killed) runs are listed and analysed as such.

The partial-pass trap (issue #18; ``prs.analysis.trap``), instead of the tables above:

    python -m experiments.analyze runs/trap_sweep/runs --trap --out results/trap \
        --copy-records results/trap/runs --page results/README.md

copies the complete runs' records into ``--copy-records`` (then analyses those), and writes into
``--out`` ``trap.md`` (the results-page section: provenance, plain-language answers with paired CIs,
tables, what was cut), ``trap.json``, ``trap_p<p_A>.png`` (the four arms over training) and
``trap_theory.png``; ``--page`` replaces the section between its markers in that page (appended if absent);
``--notebook`` then re-executes ``notebooks/trap.ipynb``, which reads ``results/trap/runs``.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

from prs import analysis as an


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.analyze", description=__doc__.split("\n")[0])
    p.add_argument("run_root", help="directory holding run directories (e.g. runs/sweep)")
    p.add_argument("--baseline", default="baseline", help="method name of the baseline (default: baseline)")
    p.add_argument("--out", default=None, help="output directory (default: RUN_ROOT/analysis)")
    p.add_argument("--window", type=int, default=3, help="moving-average window over evaluation points (default 3)")
    p.add_argument("--ref", choices=("final", "peak"), default="final", help="baseline reference level (default final)")
    p.add_argument("--settle-frac", type=float, default=0.5, help="last fraction of steps for settled rates (0.5)")
    p.add_argument("--at-step", type=int, default=None, help="step of the equal-step comparison (default: baseline's last)")
    p.add_argument("--paired", action="store_true", help="paired bootstrap over common seeds (default unpaired)")
    p.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--time-clip", type=float, default=5.0,
                   help="step times above this multiple of the run's median count as the median (compilation "
                        "spikes); 0 = raw wall-clock (default 5)")
    p.add_argument("--no-figures", action="store_true", help="tables and results.json only")
    p.add_argument("--trap", action="store_true", help="the partial-pass trap section (issue #18) instead of the tables")
    p.add_argument("--page", default=None, help="--trap: results page whose trap section is replaced (e.g. results/README.md)")
    p.add_argument("--copy-records", default=None,
                   help="--trap: copy the complete runs' records (metrics.jsonl.gz, summary/config/provenance) here first")
    p.add_argument("--notebook", action="store_true",
                   help="--trap: re-execute notebooks/trap.ipynb afterwards (it reads results/trap/runs)")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    root = pathlib.Path(args.run_root)
    out = pathlib.Path(args.out) if args.out else root / "analysis"
    if args.trap:
        return trap_main(args, root, out)
    runs = an.load_runs(root)
    if not runs:
        raise SystemExit(f"no run directories (metrics.jsonl or summary.json) under {root}")
    results = an.analyze(runs, baseline=args.baseline, window=args.window, ref=args.ref,
                         settle_frac=args.settle_frac, at_step=args.at_step, paired=args.paired,
                         n_boot=args.n_boot, seed=args.seed, time_clip=args.time_clip or None)
    parts = [f"# Analysis of {root}", "", "## Runs", "", an.runs_table(runs)]
    for task, res in results.items():
        parts += ["", f"## Task {task}", "", "### Steps to converge and speed-up over the baseline "
                  "(95% bootstrap CI over seeds)", "", an.convergence_table(res),
                  "", "### Equal-step held-out pass@1", "", an.equal_step_table(res),
                  "", "### Settled re-rollout pass rate per bucket", "", an.bucket_table(res)]
    text = "\n".join(parts) + "\n"
    print(text)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables.md").write_text(text)
    payload = {"run_root": str(root), "options": vars(args),
               "runs": [{"name": r.name, "task": r.task, "method": r.method, "seed": r.seed, "status": r.status,
                         "steps_done": r.steps_done, "planned_steps": r.planned_steps, "problems": list(r.problems)}
                        for r in runs],
               "paper": {"ablation_steps": an.PAPER_ABLATION_STEPS, "ablation_speedup": an.PAPER_ABLATION_SPEEDUP,
                         "settled_reroll": an.PAPER_SETTLED_REROLL},
               "tasks": results}
    (out / "results.json").write_text(json.dumps(an.to_jsonable(payload), indent=2, allow_nan=False))
    if not args.no_figures:
        write_figures(runs, results, out, time_clip=args.time_clip or None)
    print(f"wrote {out}/results.json, tables.md" + ("" if args.no_figures else " and figures"), file=sys.stderr)
    return results


def write_figures(runs, results: dict, out: pathlib.Path, *, time_clip: float | None = 5.0) -> list[pathlib.Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []

    def save(fig, name):
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(out / name)

    save(an.plot_fig2(), "fig2_metrics.png")
    for task, by_method in an.group_runs(runs).items():
        res = results[task]
        save(an.plot_learning_curves(by_method, level=res.get("reference_level"), title=f"{task}: held-out pass@1",
                                     time_clip=time_clip),
             f"fig1_{task}.png")
        if "error" not in res:
            save(an.plot_ablation(res, title=f"{task}: speed-up in steps to converge"), f"fig4_{task}.png")
            save(an.plot_ablation(res, key="speedup_wall", title=f"{task}: speed-up in wall-clock"),
                 f"fig4_{task}_wall.png")
        save(an.plot_controller(by_method, title=f"{task}: the controller at work"), f"controller_{task}.png")
    return written


TRAP_BEGIN = "<!-- BEGIN trap section: generated by python -m experiments.analyze --trap; edits here are overwritten -->"
TRAP_END = "<!-- END trap section -->"


def replace_section(page: str, section: str, *, begin: str = TRAP_BEGIN, end: str = TRAP_END) -> str:
    """``page`` with the text between ``begin`` and ``end`` replaced by ``section`` (appended with the
    markers if absent). A page with one marker but not the other raises ValueError."""
    block = f"{begin}\n{section.rstrip()}\n{end}"
    i, j = page.find(begin), page.find(end)
    if i < 0 and j < 0:
        return page.rstrip("\n") + "\n\n" + block + "\n"
    if i < 0 or j < i:
        raise ValueError(f"the page has {'no' if i < 0 else 'a misplaced'} begin marker {begin!r} for its end marker")
    return page[:i] + block + page[j + len(end):]


def _git_dirty(paths: list[str]) -> bool | None:
    """Whether ``git status`` lists changes under ``paths`` of this checkout (None outside git)."""
    import subprocess

    try:
        r = subprocess.run(["git", "status", "--porcelain", "--", *paths], cwd=pathlib.Path(__file__).resolve().parent.parent,
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return bool(r.stdout.strip()) if r.returncode == 0 else None


def trap_main(args, root: pathlib.Path, out: pathlib.Path) -> dict:
    """``--trap``: the partial-pass trap section, its figures and ``trap.json`` (module docstring)."""
    import os
    import shlex

    from prs.analysis import trap
    from prs.rl.provenance import code_state

    if args.copy_records:
        copied = trap.collect_trap_records(root, args.copy_records)
        print(f"copied the records of {len(copied)} complete runs to {args.copy_records}", file=sys.stderr)
        root = pathlib.Path(args.copy_records)
    runs = trap.load_trap_runs(root)
    if not runs:
        raise SystemExit(f"no trap run (task.name == 'trap') under {root}")
    result = trap.analyze_trap(runs, n_boot=args.n_boot, seed=args.seed)
    out.mkdir(parents=True, exist_ok=True)
    state = code_state()
    # the code that computes the page: uncommitted records/results/notebooks do not change the numbers
    code_dirty = _git_dirty(["prs", "experiments", "theory"])
    if code_dirty is not None:
        state["dirty"] = code_dirty
    figures: dict[str, str] = {}
    if not args.no_figures:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        for p in result["cells"]:
            fig = trap.plot_trap_curves(result, p)
            fig.savefig(out / f"trap_p{p}.png", dpi=100)
            plt.close(fig)
            figures[f"p{p}"] = f"trap_p{p}.png"
        fig = trap.plot_trap_theory(result)
        fig.savefig(out / "trap_theory.png", dpi=100)
        plt.close(fig)
        figures["theory"] = "trap_theory.png"
    command = " ".join(["python -m experiments.analyze", shlex.quote(str(root)), "--trap", "--out", shlex.quote(str(out))]
                       + (["--page", shlex.quote(args.page)] if args.page else [])
                       + ([f"--n-boot {args.n_boot}"] if args.n_boot != 2000 else []))
    kw = dict(command=command, commit=state["commit"], dirty=state["dirty"], cuts=trap.budget_cuts(result))
    section = trap.trap_section(result, figures=figures, **kw)
    (out / "trap.md").write_text(section)
    payload = {"run_root": str(root), "commit": state["commit"], "dirty": state["dirty"], "result": result}
    (out / "trap.json").write_text(json.dumps(an.to_jsonable(payload), indent=2, allow_nan=False))
    if args.page:
        page = pathlib.Path(args.page)
        rel = {k: os.path.relpath(out / v, page.parent) for k, v in figures.items()}
        text = page.read_text() if page.exists() else ""
        page.write_text(replace_section(text, trap.trap_section(result, figures=rel, **kw)))
    print(section)
    if args.notebook:
        from experiments import notebooks

        if root.resolve() != (notebooks.ROOT / "results" / "trap" / "runs").resolve():
            print(f"warning: notebooks/trap.ipynb reads results/trap/runs, not {root}; pass --copy-records "
                  "results/trap/runs to show these runs there", file=sys.stderr)
        notebooks.regenerate(["trap"])
    print(f"wrote {out}/trap.md, trap.json" + ("" if args.no_figures else ", figures")
          + (f" and the section of {args.page}" if args.page else ""), file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
