"""A review of the regime sweep's reading, computed from its committed records (``results/regime/runs``).

    python -m experiments.studies.regime_review                  # print the section
    python -m experiments.studies.regime_review --write          # rewrite it in results/regime/README.md
    python -m experiments.studies.regime_review --check          # exit 1 if the committed section differs

What it measures, per variant (every number from the runs' ``metrics.jsonl.gz`` and ``config.json``):

  * **the shortcut**: the pass rate of the best lookup-table guesser from the question's surface (length,
    first term, last term = the multiplier, last addend; ``prs.tasks.mechanism.guesser_rate``, fitted on
    20,000 problems, scored on 4,000) on the variant's task, beside the arms' final held-out pass@1;
  * **where the groups went**: the baseline's share of 0/N, 1-2/N and N/N groups at step 0 and over the
    middle third of the run (from each step's ``k_hist``);
  * **output length**: generated tokens per sampled rollout, first 5 steps vs the last 10 (baseline and
    ps_ada; for ps_ada a re-rolled row's replayed prefix is not generated, so its number is lower by that);
  * **matched cost**: each arm's mean generated tokens per step relative to ps_ada's (the controls are
    matched to PS in rollouts, not in tokens);
  * **collapse**: seeds whose last held-out pass@1 is 0;
  * **how much one seed decides the headline**: ps_ada's speed-up to 80% of the baseline's gap (the
    restricted seed-mean-curve crossing of ``prs.analysis.gap``, the page's headline statistic) on all
    paired seeds and with each seed left out in turn.

The section sits between ``BEGIN`` and ``END`` markers on the page; the rest of the page is untouched.
"""
from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

from experiments.studies import command_line
from prs.analysis.runs import read_records

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNS = ROOT / "results" / "regime" / "runs"
PAGE = ROOT / "results" / "regime" / "README.md"
BEGIN = "<!-- regime-review:begin (experiments/studies/regime_review.py; edits here are overwritten) -->"
END = "<!-- regime-review:end -->"
VARIANTS = ("regime_late", "regime_late_long", "regime_early", "regime_early_long", "regime_uniform",
            "regime_uniform_long", "regime_repair")


def runs_of(variant: str, runs: pathlib.Path = RUNS) -> dict[str, list[pathlib.Path]]:
    """Arm -> run directories (sorted by seed) of one variant; names are ``<variant>-<arm>-s<seed>``."""
    out: dict[str, list[pathlib.Path]] = {}
    for d in sorted(runs.glob(f"{variant}-*-s*")):
        arm = d.name[len(variant) + 1:].rsplit("-s", 1)[0]
        if "-" in arm:  # a longer variant name that starts with this one (regime_late_long vs regime_late)
            continue
        out.setdefault(arm, []).append(d)
    return out


def _train(d: pathlib.Path) -> list[dict]:
    return [r for r in read_records(d) if r.get("kind") == "train"]


def _evals(d: pathlib.Path) -> list[dict]:
    return [r for r in read_records(d) if r.get("kind") == "eval"]


def k_shares(recs: list[dict], steps: slice) -> dict[str, float]:
    """Shares of 0/N, 1-2/N and N/N groups over the records ``recs[steps]`` (their ``k_hist``)."""
    h = np.sum([np.asarray(r["k_hist"], float) for r in recs[steps] if r.get("k_hist")], axis=0)  # [N + 1]
    n = h.sum()
    return {"zero": h[0] / n, "one_two": h[1:3].sum() / n, "all": h[-1] / n}


def tokens_per_rollout(recs: list[dict], steps: slice) -> float:
    t = sum(r["tokens_generated"] for r in recs[steps])
    n = sum(r["rollouts_sampled"] for r in recs[steps])
    return t / n


def tokens_per_step(recs: list[dict]) -> float:
    return float(np.mean([r["tokens_generated"] for r in recs]))


def final_pass(d: pathlib.Path) -> float:
    ev = _evals(d)
    return float(ev[-1]["eval/pass_at_1"]) if ev else float("nan")


def surface_features(problems) -> np.ndarray:
    """What the guesser sees of a question [B, 4]: its length, first term, last term (the multiplier of
    the late variants) and last addend."""
    t, n = np.asarray(problems.terms), np.asarray(problems.n_terms)
    rows = np.arange(t.shape[0])
    return np.stack([n, t[:, 0], t[rows, n - 1], t[rows, n - 2]], axis=1)


def guesser(variant: str, runs: pathlib.Path = RUNS) -> float | None:
    """The surface guesser's pass rate on the variant's arith task (None for repair): the task is
    rebuilt from the baseline's recorded ``config.json`` (task name and params)."""
    from prs.tasks import make_problems
    from prs.tasks.mechanism import guesser_rate
    from prs.tasks.registry import make_task

    base = runs_of(variant, runs).get("baseline")
    cfg = json.loads((base[0] / "config.json").read_text())
    task_cfg = cfg["task"]
    if task_cfg["name"] != "arith":
        return None
    task = make_task("arith", **task_cfg.get("params", {}))
    fit = make_problems(task.cfg, seed=1, count=20000, split="all")
    test = make_problems(task.cfg, seed=2, count=4000, split="all")
    return guesser_rate(fit, test, surface_features, lambda p: np.asarray(p.answer)[:, None])


def review(runs: pathlib.Path = RUNS) -> dict:
    out = {}
    for v in VARIANTS:
        arms = runs_of(v, runs)
        if "baseline" not in arms:
            continue
        base = [_train(d) for d in arms["baseline"]]
        T = min(len(r) for r in base)
        mid = slice(T // 3, 2 * T // 3)
        k0 = [k_shares(r, slice(0, 1)) for r in base]
        km = [k_shares(r, mid) for r in base]
        row = {
            "seeds": len(base), "steps": T,
            "guesser": guesser(v, runs),
            "k_step0": {k: float(np.mean([s[k] for s in k0])) for k in ("zero", "one_two", "all")},
            "k_mid": {k: float(np.mean([s[k] for s in km])) for k in ("zero", "one_two", "all")},
            "mid_steps": [mid.start, mid.stop],
            "final_pass": {a: float(np.mean([final_pass(d) for d in ds])) for a, ds in arms.items()},
            "zero_final_seeds": {a: int(sum(final_pass(d) == 0 for d in ds)) for a, ds in arms.items()},
        }
        for arm in ("baseline", "ps_ada"):
            if arm in arms:
                recs = [_train(d) for d in arms[arm]]
                row[f"len_{arm}"] = [float(np.mean([tokens_per_rollout(r, slice(0, 5)) for r in recs])),
                                     float(np.mean([tokens_per_rollout(r, slice(-10, None)) for r in recs]))]
        if "ps_ada" in arms:
            ps = np.mean([tokens_per_step(_train(d)) for d in arms["ps_ada"]])
            row["tokens_vs_ps_ada"] = {a: float(np.mean([tokens_per_step(_train(d)) for d in ds]) / ps)
                                       for a, ds in arms.items()}
        row["leave_one_out"] = leave_one_out(v, runs)
        out[v] = row
    return out


def leave_one_out(variant: str, runs: pathlib.Path = RUNS, *, fraction: float = 0.8) -> dict | None:
    """ps_ada's restricted mean-curve speed-up in steps to ``fraction`` of the baseline's gap on all
    paired seeds and with each seed left out (None without both arms)."""
    from prs.analysis.gap import gap_task
    from prs.analysis.runs import load_run

    arms = runs_of(variant, runs)
    if "ps_ada" not in arms or "baseline" not in arms:
        return None
    base, ps = [load_run(d) for d in arms["baseline"]], [load_run(d) for d in arms["ps_ada"]]

    def value(drop=None) -> float:
        res = gap_task({"baseline": [r for r in base if r.seed != drop], "ps_ada": [r for r in ps if r.seed != drop]},
                       fractions=(fraction,), n_boot=200)["methods"]["ps_ada"]
        return float(res[fraction]["speedup_steps"]["value"]) if fraction in res else float("nan")

    return {"all": value(), "drop_one": [value(r.seed) for r in base]}


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def render(rev: dict) -> str:
    lines = [BEGIN, "", "### Review of the reading (computed from the committed runs)", "",
             "Generated by `python -m experiments.studies.regime_review --write` from `results/regime/runs`. "
             "Guesser: the best lookup table from the question's surface (length, first term, multiplier, last "
             "addend), fitted on 20,000 problems and scored on 4,000. k shares: the baseline's groups, step 0 vs "
             "the middle third of the run. Length: generated tokens per sampled rollout, first 5 vs last 10 steps "
             "(ps_ada's replayed prefixes are not generated). Final: mean last held-out pass@1 over seeds.", "",
             "| variant | guesser | final pass@1 (arms: min-max) | baseline 0/N, 1-2/N, N/N at step 0 | "
             "... mid-run | length baseline | length ps_ada |",
             "|---|---|---|---|---|---|---|"]
    for v, r in rev.items():
        fp = r["final_pass"].values()
        g = "-" if r["guesser"] is None else f"{r['guesser']:.3f}"
        k0, km = r["k_step0"], r["k_mid"]
        lb = r.get("len_baseline")
        lp = r.get("len_ps_ada")
        lines.append(f"| {v} | {g} | {min(fp):.3f}-{max(fp):.3f} | {_pct(k0['zero'])}, {_pct(k0['one_two'])}, "
                     f"{_pct(k0['all'])} | {_pct(km['zero'])}, {_pct(km['one_two'])}, {_pct(km['all'])} "
                     f"(steps {r['mid_steps'][0]}-{r['mid_steps'][1]}) | "
                     f"{'-' if lb is None else f'{lb[0]:.1f} -> {lb[1]:.1f}'} | "
                     f"{'-' if lp is None else f'{lp[0]:.1f} -> {lp[1]:.1f}'} |")
    lines += ["", "Generated tokens per step relative to ps_ada (the controls were matched in rollouts, not tokens):", "",
              "| variant | " + " | ".join(f"`{a}`" for a in ("baseline", "reroll_noprefix", "extra_rollouts",
                                                                  "baseline_lr2")) + " |",
              "|---|---|---|---|---|"]
    for v, r in rev.items():
        t = r.get("tokens_vs_ps_ada", {})
        cells = [f"{t[a]:.2f}" if a in t else "-" for a in ("baseline", "reroll_noprefix", "extra_rollouts",
                                                             "baseline_lr2")]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    lines += ["", "ps_ada / baseline speed-up in steps to 80% of the gap (the headline statistic) on all seeds, and "
              "its range when one seed is left out:", "", "| variant | all seeds | one seed left out: min - max |",
              "|---|---|---|"]
    for v, r in rev.items():
        lo = r.get("leave_one_out")
        if lo is None:
            continue
        d = np.asarray(lo["drop_one"], float)
        rng = "undefined" if not np.isfinite(d).any() else f"{np.nanmin(d):.2f} - {np.nanmax(d):.2f}"
        lines.append(f"| {v} | {lo['all']:.2f} | {rng} |")
    zero = [f"{v} `{a}` {n}/{rev[v]['seeds']}" for v in rev for a, n in rev[v]["zero_final_seeds"].items() if n]
    lines += ["", "Seeds whose last held-out pass@1 is 0: " + ("; ".join(zero) if zero else "none") + ".", "", END]
    return "\n".join(lines)


def splice(page: str, section: str) -> str:
    """``page`` with the text between the markers replaced (appended at the end when absent)."""
    if BEGIN in page:
        a, rest = page.split(BEGIN, 1)
        _, b = rest.split(END, 1)
        return a + section + b
    return page.rstrip("\n") + "\n\n" + section + "\n"


@command_line.command("experiments.studies.regime_review")
def main(argv=None) -> int:
    ap = command_line.ArgumentParser(prog="python -m experiments.studies.regime_review", description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--write", action="store_true", help="rewrite the section in results/regime/README.md")
    g.add_argument("--check", action="store_true", help="exit 1 if the committed section differs")
    ap.add_argument("--json", type=pathlib.Path, default=None, help="also write the numbers here")
    a = ap.parse_args(argv)
    rev = review()
    section = render(rev)
    if a.json:
        a.json.write_text(json.dumps(rev, indent=1))
    if a.write:
        PAGE.write_text(splice(PAGE.read_text(), section))
    elif a.check:
        if splice(PAGE.read_text(), section) != PAGE.read_text():
            print("results/regime/README.md: the review section differs from what regime_review writes", file=sys.stderr)
            return 1
    else:
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
