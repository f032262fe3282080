"""Analysis of a set of training runs (issue #7): tables, figures and ``results.json``.

    python -m experiments.analyze runs/sweep                      # -> runs/sweep/analysis/
    python -m experiments.analyze runs/sweep --baseline baseline --out /tmp/prs-cpu --ref peak --window 3
    python -m experiments.analyze results/ablation/runs results/schedules/runs results/regime/runs \
        --out results/regime --readme results/regime/README.md --sim-grid results/sim/grid --decisive-only

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

With several run roots the tables above come from the first one; the **decisive experiment**
(issue #16; ``experiments.studies.decisive``) is computed for every root and every task variant in it
(variants and arms are read from each run's config: task name + tag + params, ``method.name`` and
``schedule.kind``): every arm against its schedule's baseline (steps, generated tokens and
wall-clock to 50% / 80% of the baseline's gap, AUC, equal-step difference, the old metric, all with
paired bootstrap CIs), the head-to-head of PS against reroll_noprefix / extra_rollouts (token-matched)
/ baseline_lr2 / ps_ada_hard, and the verdict computed by the rules in that module. It is written to
``OUT/decisive.json``, ``OUT/decisive_<root>_<variant>{,_speedup}.png`` and, with ``--readme``, into
the page between its ``<!-- decisive-experiment:begin/end -->`` markers (appended when absent),
stating the commit (and dirty files) it was produced at. ``--sim-grid DIR`` adds the simulator
grid's verdicts (``experiments.sim_grid``'s summary.json).

Definitions: see ``prs.analysis``. Partial (killed) runs are listed and analysed as such.

An explicit ``--out`` that already holds files of the kinds this command writes, which analyze did
not write there itself (it lists its own in ``OUT/.analyze-written``), is refused unless ``--force``:
``--out results/ablation`` would otherwise replace the committed results with those of a different command
(the committed ``decisive.json`` comes from three run roots, ``--decisive-only``). Regenerate into a
fresh directory and compare.

``--copy-records DIR`` first copies the first root's complete runs' records (``metrics.jsonl`` gzipped,
summary / config / provenance; ``--copy-prefix`` selects by run name) into ``DIR`` for committing, and
analyses ``DIR`` in that root's place; copying the same run again is a no-op, a different run of that name
an error. The page's command line then names the copied directory, so it re-runs from committed records:

    python -m experiments.analyze /work/runs/regime_sweep/runs results/ablation/runs --decisive-only \
        --copy-records results/regime/runs --copy-prefix regime_ --out results/regime --readme results/regime/README.md

The partial-pass trap (issue #18; ``experiments.studies.trap``), instead of the tables above:

    python -m experiments.analyze runs/trap_sweep/runs --trap --out results/trap \
        --copy-records results/trap/runs --page results/trap/README.md

copies the complete runs' records into ``--copy-records`` (then analyses those), and writes into
``--out`` ``trap.md`` (the results-page section: provenance, plain-language answers with paired CIs,
tables, what was cut), ``trap.json``, ``trap_p<p_A>.png`` (the four arms over training) and
``trap_theory.png``; ``--page`` replaces the section between its markers in that page (appended if absent);
``--notebook`` then re-executes ``notebooks/trap.ipynb``, which reads ``results/trap/runs``.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

from prs import analysis as an
from experiments import cli


def parse_args(argv=None) -> argparse.Namespace:
    p = cli.ArgumentParser(prog="python -m experiments.analyze", description=__doc__.split("\n")[0])
    p.add_argument("run_root", nargs="+", help="directories holding run directories (e.g. runs/sweep); the "
                   "first feeds the tables, every one the decisive section")
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
    p.add_argument("--force", action="store_true", help="overwrite outputs in --out that analyze did not write there "
                   "(e.g. the committed results/<study>/); without it such an --out is refused")
    p.add_argument("--readme", default=None, help="page whose decisive-experiment section is (re)written")
    p.add_argument("--sim-grid", default=None, help="experiments.sim_grid output directory to cite on the page")
    p.add_argument("--no-decisive", action="store_true", help="skip the decisive-experiment analysis")
    p.add_argument("--gap-k", type=int, default=3, help="decisive: final level = mean of the baseline's last K "
                   "evaluations (default 3)")
    p.add_argument("--gap-k-start", type=int, default=None, help="decisive: start level = mean of its first K "
                   "evaluations (default --gap-k)")
    p.add_argument("--decisive-only", action="store_true",
                   help="only the decisive-experiment analysis (no tables.md / results.json / fig1-4)")
    p.add_argument("--trap", action="store_true", help="the partial-pass trap section (issue #18) instead of the tables")
    p.add_argument("--page", default=None, help="--trap: results page whose trap section is replaced (e.g. results/trap/README.md)")
    p.add_argument("--copy-records", default=None,
                   help="copy the first run root's complete runs' records (metrics.jsonl.gz, summary/config/"
                   "provenance) here first and analyse this directory in its place (with --trap: the trap runs)")
    p.add_argument("--copy-prefix", default=None,
                   help="--copy-records (not --trap): only runs whose directory name starts with this (e.g. regime_)")
    p.add_argument("--notebook", action="store_true",
                   help="--trap: re-execute notebooks/trap.ipynb afterwards (it reads results/trap/runs)")
    return p.parse_args(argv)


OWNED = ".analyze-written"  # in an output directory: the files analyze wrote there (it may overwrite them)
TABLE_OUTPUTS = ("tables.md", "results.json", "fig1_*.png", "fig2_metrics.png", "fig4_*.png", "controller_*.png")
DECISIVE_OUTPUTS = ("decisive.json", "decisive_*.png")
TRAP_OUTPUTS = ("trap.md", "trap.json", "trap_*.png")


def _outputs(args) -> tuple[str, ...]:
    """Name patterns of the files this invocation writes into ``--out``."""
    if args.trap:
        return TRAP_OUTPUTS
    if args.decisive_only:
        return DECISIVE_OUTPUTS
    return TABLE_OUTPUTS + (() if args.no_decisive else DECISIVE_OUTPUTS)


def _matching(out: pathlib.Path, patterns) -> set[str]:
    import fnmatch

    if not out.is_dir():
        return set()
    return {p.name for p in out.iterdir() if p.is_file() and any(fnmatch.fnmatchcase(p.name, pat) for pat in patterns)}


def _owned(out: pathlib.Path) -> set[str]:
    try:
        return set(json.loads((out / OWNED).read_text()))
    except (OSError, ValueError, TypeError):
        return set()


def check_out(out: pathlib.Path, patterns, *, force: bool) -> set[str]:
    """The files of the kinds this run writes that ``out`` already holds and analyze did not write
    there (``OWNED``: e.g. the committed ``results/<study>/``): ``SystemExit`` naming them unless ``force``.
    Returns the names present before the run that analyze may not claim afterwards."""
    foreign = sorted(_matching(out, patterns) - _owned(out))
    if foreign and not force:
        shown = ", ".join(foreign[:6]) + (f" and {len(foreign) - 6} more" if len(foreign) > 6 else "")
        raise SystemExit(f"error: --out {out} holds {shown}, which this analysis would overwrite and did not write; "
                         f"choose a fresh --out directory (then compare), or pass --force to overwrite them")
    return set(foreign)


def record_owned(out: pathlib.Path, patterns, foreign: set[str]) -> None:
    """Adds the files this run wrote into ``out`` to ``out/OWNED`` (not those it overwrote with --force)."""
    names = sorted(_owned(out) | (_matching(out, patterns) - foreign))
    (out / OWNED).write_text(json.dumps(names, indent=0) + "\n")


@cli.command("experiments.analyze")
def main(argv=None) -> dict:
    args = parse_args(argv)
    roots = [pathlib.Path(r) for r in args.run_root]
    root = roots[0]
    out = pathlib.Path(args.out) if args.out else root / "analysis"
    patterns = _outputs(args)
    foreign = check_out(out, patterns, force=args.force) if args.out else set()  # RUN_ROOT/analysis is analyze's own
    result = _main(args, roots, root, out, argv)
    if out.is_dir():
        record_owned(out, patterns, foreign)
    return result


def _main(args, roots, root: pathlib.Path, out: pathlib.Path, argv) -> dict:
    if args.copy_records and not args.trap:
        copied = an.collect_records(root, args.copy_records, prefix=args.copy_prefix)
        print(f"copied the records of {len(copied)} complete runs to {args.copy_records}", file=sys.stderr)
        root = roots[0] = pathlib.Path(args.copy_records)
        argv = _rerun_argv(sys.argv[1:] if argv is None else list(argv), args.run_root[0], args.copy_records)
    if args.decisive_only:
        out.mkdir(parents=True, exist_ok=True)
        return decisive_section(roots, out, args, argv)
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
    if not args.no_decisive:
        decisive_section(roots, out, args, argv)
    print(f"wrote {out}/results.json, tables.md" + ("" if args.no_figures else " and figures"), file=sys.stderr)
    return results


def _rerun_argv(argv: list[str], first_root: str, copied: str) -> list[str]:
    """The command line that re-runs an analysis from the copied records: the first root replaced by the
    copy, ``--copy-records`` / ``--copy-prefix`` (and their values) dropped."""
    out, skip, replaced = [], False, False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in ("--copy-records", "--copy-prefix"):
            skip = True
            continue
        if a.startswith(("--copy-records=", "--copy-prefix=")):
            continue
        if a == first_root and not replaced:
            a, replaced = copied, True
        out.append(a)
    return out


def decisive_section(roots, out: pathlib.Path, args, argv=None) -> dict:
    """The decisive experiment for every root and task variant: decisive.json, figures, the page section."""
    from experiments.studies import decisive as dc
    from prs.rl.provenance import code_state

    cs = code_state()  # before anything is written, so the page's own outputs do not count as dirty
    payload, parts = {}, []
    multi = len(roots) > 1
    for root in roots:
        runs = an.load_runs(root) if root.is_dir() else []
        if not runs:
            parts += [f"### {root}", "", "No run directories here (yet).", ""]
            continue
        for variant, vruns in dc.task_variants(runs).items():
            name = f"{root}: {variant}" if multi else variant
            res = dc.lm_variant(vruns, baseline=args.baseline, k=args.gap_k, k_start=args.gap_k_start,
                                n_boot=args.n_boot, seed=args.seed,
                                time_clip=args.time_clip or None)
            figs = []
            if "error" not in res and not args.no_figures:
                figs = write_decisive_figures(res, out, dc.slug(f"{root}_{variant}".replace("/", "_")), name)
            base_runs = [r for r in vruns if r.method == args.baseline]
            try:
                kh = dc.k_histogram(base_runs)
            except ValueError:
                kh = None
            page_dir = pathlib.Path(args.readme).parent if args.readme else out
            rel = [os.path.relpath(f, page_dir) for f in figs]
            parts.append(dc.variant_markdown(name, res, figures=rel, k_hist=kh))
            payload[name] = res
    if args.sim_grid:
        parts.append(sim_grid_markdown(pathlib.Path(args.sim_grid)))
    (out / "decisive.json").write_text(json.dumps(an.to_jsonable(payload), indent=1, allow_nan=False))
    if args.readme:
        cmd = "python -m experiments.analyze " + " ".join(argv if argv is not None else sys.argv[1:])
        sec = dc.section_markdown(parts, commit=cs["commit"], dirty=cs["dirty"], dirty_files=cs["dirty_files"],
                                  command=cmd, k=args.gap_k, k_start=args.gap_k_start)
        page = pathlib.Path(args.readme)
        page.write_text(dc.replace_section(page.read_text() if page.exists() else "", sec))
        print(f"wrote the decisive section into {page}", file=sys.stderr)
    return payload


def sim_grid_markdown(grid: pathlib.Path) -> str:
    """One line per simulator regime: its verdict (experiments.sim_grid's summary.json)."""
    path = grid / "summary.json"
    if not path.exists():
        return f"### Simulator grid\n\nNo `{path}` (run `python -m experiments.sim_grid --out {grid}`).\n"
    res = json.loads(path.read_text())
    lines = ["### Simulator grid (`experiments.sim_grid`, noise-limited learner; tables in "
             f"`{grid}/summary.md`)", "", "| regime | base pass rate | verdict |", "|---|---|---|"]
    for regime, r in res["regimes"].items():
        lines.append(f"| {regime} | {r['success0']:.3f} | {r['verdict']['text'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def write_decisive_figures(res: dict, out: pathlib.Path, slug: str, name: str) -> list[pathlib.Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for fig, suffix in ((an.plot_gap_curves(res, title=f"{name}: seed-mean held-out pass@1, gap levels"), ""),
                        (an.plot_gap_speedups(res, title=f"{name}: speed-up to 80% of the baseline's gap"), "_speedup")):
        paths.append(out / f"decisive_{slug}{suffix}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


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

    from experiments.studies import trap
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
