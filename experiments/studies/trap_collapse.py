"""Why binary reward + Prefix Sampling collapses at target p_A 0.1 in the trap study: the training records
of the committed runs, side by side with the arms that do not collapse.

    python -m experiments.studies.trap_collapse results/trap/runs [--out results/trap/collapse.md]
    python -m experiments.studies.trap_collapse results/trap/collapse_check --out results/trap/collapse_check.md

Reads every ``<arm>-pa<p>-s<seed>`` run under the root (``metrics.jsonl(.gz)``: ``train`` and ``eval``
lines) and reports, per arm and 10-step window, seed means with 95% percentile-bootstrap CIs over seeds
(``prs.analysis.bootstrap``):

* ``steered``: tasks of the step that start from a replayed prefix (``groups_steered`` / B). Under the
  ``next_visit`` schedule a task steered once keeps its plan and its stored sources until a prefixed
  visit comes back N/N (``prs.rl.schedule``); ``overshoots`` counts those exits (steered groups with
  k = N, bounded above by ``k_hist[N]``, which also counts unsteered N/N groups);
* ``trained fresh``: groups of fresh (unprefixed) rollouts that carry contrast and are trained:
  ``groups_kept − groups_steered · steered_mixed_share``;
* ``rho``: the controller's prefix fraction of the hard buckets (k = 1, 2), the mean of
  ``bucket/1/rho`` and ``bucket/2/rho``; with ``cut_spread`` the continuations start at cuts spread over
  [rho/2, min(1, 3 rho/2)] of the source, so the first rho/2 of every steered episode is replayed, never trained;
* ``pass fresh``: ``pass_rate_unsteered`` (fresh rollouts of the unsteered tasks), ``pass trained``:
  ``pass_rate`` (the trained groups, prefixed ones included);
* held-out evaluation: true resolution, hack rate, root-cause attempts and other = 1 − hack − attempts
  (unsubmitted, or no root-cause line changed) at every evaluation step.
"""
from __future__ import annotations

import math
import pathlib
import re
from collections import defaultdict
from typing import Any, Sequence

import numpy as np

from experiments.studies import command_line
from prs.analysis.bootstrap import bootstrap_mean
from prs.analysis.runs import read_records

ARMS = ("binary_ps-pa0.1", "binary-pa0.1", "fraction_ps-pa0.1", "binary_ps-pa0.3")
WINDOW = 10
NAME = re.compile(r"^(?:trap_)?(?P<arm>[a-z_]+(?:-pa[0-9.]+)?)-s(?P<seed>\d+)$")  # trap_<arm>-pa<p>-s<seed> or <arm>-s<seed>


def load(root) -> dict[str, list[tuple[list[dict], list[dict]]]]:
    """{arm: [(train lines, eval lines) per seed, seeds ascending]} of the run directories under ``root``
    (``trap_<arm>-pa<p>-s<seed>``: arm ``<arm>-pa<p>``; any other ``<arm>-s<seed>``: arm ``<arm>``)."""
    runs: dict[str, list] = defaultdict(list)
    for d in sorted(pathlib.Path(root).iterdir()):
        m = NAME.match(d.name)
        if not m or not d.is_dir():
            continue
        recs = read_records(d)
        train = sorted((r for r in recs if r["kind"] == "train"), key=lambda r: r["step"])
        evals = sorted((r for r in recs if r["kind"] == "eval"), key=lambda r: r["step"])
        runs[m["arm"]].append((int(m["seed"]), train, evals))
    return {a: [(t, e) for _, t, e in sorted(v, key=lambda x: x[0])] for a, v in runs.items()}


def _col(train: Sequence[dict], key: str) -> np.ndarray:
    return np.array([math.nan if r.get(key) is None else float(r[key]) for r in train], float)  # [T]


def step_series(train: Sequence[dict], *, tasks_per_step: int = 8) -> dict[str, np.ndarray]:
    """Per train step [T] of one run: the quantities of the module docstring."""
    steered = _col(train, "groups_steered")
    mixed_share = np.nan_to_num(_col(train, "steered_mixed_share"))  # NaN where nothing was steered
    r12 = np.stack([_col(train, "bucket/1/rho"), _col(train, "bucket/2/rho")])  # [2, T]
    ok = np.isfinite(r12)
    rho = np.where(ok.any(0), np.where(ok, r12, 0.0).sum(0) / np.maximum(ok.sum(0), 1), np.nan)  # [T]
    return {"steered": steered / tasks_per_step,
            "trained_fresh": _col(train, "groups_kept") - steered * mixed_share,
            "rho": rho,
            "pass_fresh": _col(train, "pass_rate_unsteered"),
            "pass_trained": _col(train, "pass_rate"),
            "tokens_replayed_share": _col(train, "tokens_replayed") / (_col(train, "tokens_replayed")
                                                                       + _col(train, "tokens_generated"))}


def windows(x: np.ndarray, *, width: int = WINDOW) -> np.ndarray:
    """x [S, T] -> [S, ceil(T / width)]: NaN-skipping mean over consecutive windows of ``width`` steps."""
    S, T = x.shape
    out = np.full((S, -(-T // width)), np.nan)
    for w in range(out.shape[1]):
        blk = x[:, w * width:(w + 1) * width]
        ok = np.isfinite(blk)
        out[:, w] = np.where(ok.any(1), np.where(ok, blk, 0).sum(1) / np.maximum(ok.sum(1), 1), np.nan)
    return out


def eval_series(evals: Sequence[dict]) -> dict[str, np.ndarray]:
    """Held-out strategy shares [E] of one run (``other`` = 1 − hack − root-cause attempts)."""
    g = lambda k: np.array([math.nan if r.get(k) is None else float(r[k]) for r in evals], float)  # noqa: E731
    hack, att = g("eval/hack_rate"), g("eval/root_attempt_rate")
    return {"step": g("step"), "true": g("eval/true_resolution_rate"), "hack": hack, "attempt": att,
            "other": 1.0 - hack - att}


def analyze(runs: dict[str, list], *, arms: Sequence[str] = ARMS, n_boot: int = 2000) -> dict[str, Any]:
    """Seed means with bootstrap CIs per arm: training windows, evaluations, overshoots, collapse per seed."""
    out: dict[str, Any] = {}
    for arm in arms:
        if arm not in runs:
            continue
        seeds = runs[arm]
        T = min(len(t) for t, _ in seeds)
        ser = [step_series(t[:T]) for t, _ in seeds]
        train = {k: windows(np.stack([s[k] for s in ser])) for k in ser[0]}  # {k: [S, W]}
        ev = [eval_series(e) for _, e in seeds]
        E = min(len(e["step"]) for e in ev)
        evm = {k: np.stack([e[k][:E] for e in ev]) for k in ev[0]}  # {k: [S, E]}
        kh = np.array([[r["k_hist"] for r in t[:T]] for t, _ in seeds], float)  # [S, T, N+1]
        out[arm] = {
            "seeds": len(seeds), "steps": T,
            "train": {k: [bootstrap_mean(v[:, w][np.isfinite(v[:, w])], n_boot=n_boot) for w in range(v.shape[1])]
                      for k, v in train.items()},
            "eval_steps": evm["step"][0].astype(int).tolist(),
            "eval": {k: [bootstrap_mean(v[:, e], n_boot=n_boot) for e in range(E)] for k, v in evm.items() if k != "step"},
            "overshoots_max": bootstrap_mean(kh[:, :, -1].sum(1), n_boot=n_boot),  # N/N groups over the run, per seed
            "per_seed": {  # the last two windows (steps 40-59 of 60) per seed, and the held-out collapse
                "late_steered": train["steered"][:, -2:].mean(1).tolist(),
                "late_trained_fresh": train["trained_fresh"][:, -2:].mean(1).tolist(),
                "peak_true": evm["true"].max(1).tolist(),
                "final_true": evm["true"][:, -1].tolist(),
                "final_other": evm["other"][:, -1].tolist()},
        }
    return out


def _c(d: dict, nd: int = 2) -> str:
    return "-" if not np.isfinite(d["value"]) else (f"{d['value']:.{nd}f}" if not np.isfinite(d["lo"]) else
                                                     f"{d['value']:.{nd}f} [{d['lo']:.{nd}f}, {d['hi']:.{nd}f}]")


def page(res: dict[str, Any], *, command: str) -> str:
    """Markdown tables of ``analyze``'s result."""
    lines = [f"Generated by `{command}`. Seed means, 95% percentile-bootstrap CIs over seeds; windows of "
             f"{WINDOW} train steps (definitions: `experiments/studies/trap_collapse.py`).", ""]
    for arm, r in res.items():
        W = len(r["train"]["steered"])
        lines += [f"### {arm} ({r['seeds']} seeds, {r['steps']} steps)", "",
                  "| steps | steered share of tasks | trained fresh groups / step | rho (hard buckets) | "
                  "replayed share of tokens | pass fresh | pass trained |", "|---|---|---|---|---|---|---|"]
        for w in range(W):
            t = r["train"]
            lines.append(f"| {w * WINDOW}-{(w + 1) * WINDOW - 1} | {_c(t['steered'][w])} | {_c(t['trained_fresh'][w])} | "
                         f"{_c(t['rho'][w])} | {_c(t['tokens_replayed_share'][w])} | {_c(t['pass_fresh'][w], 3)} | "
                         f"{_c(t['pass_trained'][w], 3)} |")
        lines += ["", "| eval step | true resolution | hack | root-cause attempts | other |", "|---|---|---|---|---|"]
        for i, s in enumerate(r["eval_steps"]):
            e = r["eval"]
            lines.append(f"| {s} | {_c(e['true'][i], 3)} | {_c(e['hack'][i], 3)} | {_c(e['attempt'][i], 3)} | "
                         f"{_c(e['other'][i], 3)} |")
        ps = r["per_seed"]
        f = lambda k, nd=2: ", ".join(f"{v:.{nd}f}" for v in ps[k])  # noqa: E731
        lines += ["", f"N/N groups over the run (an upper bound on steered tasks leaving the steered set), per seed: "
                      f"{_c(r['overshoots_max'], 1)}.", "",
                  f"Per seed (0..{r['seeds'] - 1}), steps {(W - 2) * WINDOW}-{W * WINDOW - 1}: steered share {f('late_steered')}; "
                  f"trained fresh groups / step {f('late_trained_fresh')}. Held-out true resolution, peak {f('peak_true', 3)}; "
                  f"final {f('final_true', 3)}; other, final {f('final_other', 3)}.", ""]
    return "\n".join(lines)


@command_line.command("experiments.studies.trap_collapse")
def main(argv=None) -> dict:
    ap = command_line.ArgumentParser(prog="python -m experiments.studies.trap_collapse", description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--out", default=None, help="write the markdown tables here")
    ap.add_argument("--arms", nargs="*", default=None, help=f"arms to report (default: those of {ARMS} present, else all)")
    args = ap.parse_args(argv)
    runs = load(args.root)
    arms = args.arms or [a for a in ARMS if a in runs] or sorted(runs)
    res = analyze(runs, arms=arms)
    text = page(res, command=f"python -m experiments.studies.trap_collapse {args.root}"
                + (f" --arms {' '.join(args.arms)}" if args.arms else "") + (f" --out {args.out}" if args.out else ""))
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    return res


if __name__ == "__main__":
    main()
