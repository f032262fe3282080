"""Summary of partial-pass trap runs (issue #18): per arm (reward × method) and target p_A, the held-out
strategy metrics at the first and the last evaluation, averaged over seeds, with the theory's
prediction (``theory.partial_pass``) beside them: the sign of a surface patch's expected GRPO advantage
at the warm start's measured p_A and surface share (positive: the fraction reward drifts toward
surface patches), and the break-even p_A = 0.4.

    python -m experiments.trap_summary runs/sweep [--out runs/trap_summary.json]

Reads ``*/summary.json`` (configuration) and ``*/metrics.jsonl`` (``kind == "eval"`` lines).
Paired differences between arms (same seed, same p_A) come with a percentile bootstrap 95% CI.
"""
from __future__ import annotations

import json
import pathlib
from collections import defaultdict

import numpy as np

from prs.analysis.bootstrap import bootstrap_mean
from experiments import cli

KEYS = ("eval/true_resolution_rate", "eval/hack_rate", "eval/mean_fraction_reward", "eval/p_root",
        "eval/root_attempt_rate")


def load(root: pathlib.Path) -> list[dict]:
    runs = []
    for summ in sorted(root.glob("**/summary.json")):
        cfg = json.loads(summ.read_text())["config"]
        lines = [json.loads(x) for x in (summ.parent / "metrics.jsonl").read_text().splitlines() if x.strip()]
        evals = [{**m, **{k: float("nan") if m.get(k) is None else m[k] for k in KEYS}}  # JSON null = NaN
                 for m in lines if m["kind"] == "eval"]
        train = [m for m in lines if m["kind"] == "train"]
        if cfg.get("task", {}).get("name") != "trap" or not evals:
            continue
        runs.append({"dir": str(summ.parent), "reward": cfg["task"]["params"]["reward"],
                     "method": cfg["method"]["name"], "p": float(cfg["task"]["params"]["demo_root_cause_accuracy"]),
                     "seed": int(cfg["seed"]), "first": evals[0], "last": evals[-1], "steps": len(train),
                     "mixed_share": float(np.mean([m["groups_mixed"] for m in train]) / cfg["algo"]["tasks_per_step"])
                     if train else float("nan")})
    return runs


def theory_surface_advantage(p_a: float, q: float, group_size: int = 8, estimator: str = "rloo") -> float:
    from theory.partial_pass import grpo_type_advantages

    if not (0 <= p_a <= 1 and 0 <= q <= 1):
        return float("nan")
    return grpo_type_advantages(p_a, q, group_size=group_size, estimator=estimator).surface


@cli.command("experiments.trap_summary")
def main(argv=None) -> dict:
    ap = cli.ArgumentParser(prog="python -m experiments.trap_summary", description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    runs = load(pathlib.Path(args.root))
    groups = defaultdict(list)
    for r in runs:
        groups[(r["reward"], r["method"], r["p"])].append(r)
    table = []
    print(f"{'reward':>8} {'method':>8} {'p_A':>4} {'seeds':>5} {'steps':>5} | "
          f"{'resolved 0->T':>13} {'hack 0->T':>13} {'frac R 0->T':>13} {'p_root 0->T':>13} {'mixed':>5} | theory adv(B)")
    for (reward, method, p), rs in sorted(groups.items()):
        row = {"reward": reward, "method": method, "target_p_A": p, "seeds": len(rs), "steps": rs[0]["steps"]}
        for k in KEYS:
            row[k] = [float(np.nanmean([r["first"][k] for r in rs])), float(np.nanmean([r["last"][k] for r in rs]))]
        row["mixed_share"] = float(np.mean([r["mixed_share"] for r in rs]))
        pa0, q0 = row["eval/p_root"][0], row["eval/hack_rate"][0]
        row["theory_surface_advantage_at_start"] = theory_surface_advantage(pa0, q0)
        table.append(row)
        f = lambda k: f"{row[k][0]:.3f}->{row[k][1]:.3f}"  # noqa: E731
        print(f"{reward:>8} {method:>8} {p:>4.1f} {len(rs):>5d} {row['steps']:>5d} | {f(KEYS[0]):>13} {f(KEYS[1]):>13} "
              f"{f(KEYS[2]):>13} {f(KEYS[3]):>13} {row['mixed_share']:>5.2f} | {row['theory_surface_advantage_at_start']:+.3f}")
    # paired differences of the final true resolution rate and hack rate between arms, same (p, seed)
    paired = []
    by = {(r["reward"], r["method"], r["p"], r["seed"]): r for r in runs}
    arms = sorted({(r["reward"], r["method"]) for r in runs})
    for i, a in enumerate(arms):
        for b in arms[i + 1:]:
            for p in sorted({r["p"] for r in runs}):
                seeds = sorted(s for (rw, m, pp, s) in by if (rw, m, pp) == (*a, p) and (*b, p, s) in by)
                if not seeds:
                    continue
                for k in ("eval/true_resolution_rate", "eval/hack_rate"):
                    d = np.array([by[(*a, p, s)]["last"][k] - by[(*b, p, s)]["last"][k] for s in seeds])
                    ci = bootstrap_mean(d, n_boot=10_000)  # percentile 95% (NaN with < 2 seeds)
                    lo, hi = ci["lo"], ci["hi"]
                    paired.append({"a": "/".join(a), "b": "/".join(b), "target_p_A": p, "metric": k,
                                   "seeds": len(seeds), "mean_diff": float(d.mean()), "ci95": [lo, hi]})
                    print(f"  {'/'.join(a)} - {'/'.join(b)} p_A={p}: {k} {d.mean():+.3f} [{lo:+.3f}, {hi:+.3f}] "
                          f"({len(seeds)} paired seeds)")
    out = {"arms": table, "paired": paired, "runs": [{k: v for k, v in r.items() if k not in ("first", "last")} | {
        "first": {k: r["first"].get(k) for k in KEYS}, "last": {k: r["last"].get(k) for k in KEYS}} for r in runs]}
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
