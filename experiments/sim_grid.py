"""The simulator's broad grid for the decisive experiment (issue #16, items 2 and 4).

    python -m experiments.sim_grid --out results/sim/grid              # scan, grid, report (resumable)
    python -m experiments.sim_grid --out results/sim/grid --stage report   # tables + verdicts only
    python -m experiments.sim_grid --out results/sim/grid_slow --lr 8      # a slow learner, no scan

Every arm of the LM sweep, on the noise-limited learner (``conf/simulate/learner/noise_limited.yaml``:
D = 64 shared parameters, a re-rolled group's gradient averaged with its group's), in task regimes
like the issue's: a base pass rate of ~16% (P0 ~ Beta(1.5, 8): 47% of the step-0 groups at 1/8 or
2/8) with the hard step early, late, uniformly placed, or no crux (``prs.sim`` "Where the hard step
sits"). Arms (``ARMS``):

* ``baseline``, ``baseline_lr2`` (2x lr), ``ps_fix``, ``ps_ada_hard``, ``ps_ada`` (same_step, the
  re-roll's gradient averaged with the original group's), the same three PS arms on ``next_visit``
  (the prefix at the task's next visit, no extra rollouts), ``reroll_noprefix`` (ps_ada's groups
  re-rolled from scratch, same combine: in the simulator this is an extra from-scratch group for
  every steered group), ``extra_rollouts`` (the same, for a share of the skewed groups matched so
  its policy decisions per step equal ps_ada's: s = (d_ps - d_base) / (d_noprefix - d_base), the
  token-matched control). On next_visit, ``reroll_noprefix`` is the baseline itself (prs.sim).

Stages (each writes files into ``--out`` and skips what exists, so an interrupted run resumes):

1. ``scan``: the baseline at lr in ``LR_SCAN`` (doubled on while the largest lr is the best) on the
   no-crux regime; the grid's lr is the one with the highest area under the curve (mean success
   over 200 steps), so 2x lr is past the optimum by that measure (written to ``scan.json``).
2. ``grid``: one record per (regime, arm): ``records/<regime>__<arm>.json.gz`` (config, params,
   per-seed curves and per-step metrics).
3. ``report``: ``summary.md`` (gap statistics via prs.analysis.gap: steps and policy decisions to
   50% / 80% of the baseline's gap, AUC, equal-step improvement, paired bootstrap CIs, and the
   verdict of experiments.studies.decisive per regime) and ``summary.json``.
"""
from __future__ import annotations

import gzip
import json
import pathlib
import time

import numpy as np

from prs import sim
from prs.analysis.gap import crossing_steps, gap_compare, gap_levels
from prs.analysis.tables import to_jsonable
from experiments import cli

LEARNER = dict(n_tasks=128, chain_len=8, groups=32, steps=200, recovery_handicap=4.0, estimator="rloo",
               reroll="add", reroll_combine="mean", shared_dim=64, shared_common=0.03)  # noise_limited.yaml
REGIME_DIFFICULTY = sim.Difficulty((1.0,), (1.5,), (8.0,))  # mean 0.158; k = 1, 2 of 8 at step 0: ~47%
REGIMES = {"spread": "none", "early": "early", "late": "late", "uniform": "uniform"}  # name -> SimParams.crux
CRUX_SHARE = 0.7
LR_SCAN = (30.0, 60.0, 120.0, 240.0)  # doubled on while the best AUC is the largest lr scanned
LR_SCAN_MAX = 8
SCAN_SEEDS = 8
ARMS = ("baseline", "ps_fix", "ps_ada_hard", "ps_ada", "ps_fix-next_visit", "ps_ada_hard-next_visit",
        "ps_ada-next_visit", "reroll_noprefix", "extra_rollouts", "baseline_lr2")


def arm_config(arm: str, lr: float) -> sim.SimConfig:
    """The SimConfig of one arm (module docstring)."""
    method, _, schedule = arm.partition("-")
    kw = dict(LEARNER, lr=lr, schedule=schedule or "same_step")
    if method == "baseline_lr2":
        return sim.SimConfig(mode="baseline", n=8, **dict(kw, lr=2 * lr))
    if method in ("reroll_noprefix", "extra_rollouts"):
        return sim.SimConfig(mode="ps_ada", n=8, reroll_prefix=False, **kw)
    return sim.SimConfig(mode=method, n=8, **kw)


def _save(path: pathlib.Path, rec: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(gzip.compress(json.dumps(to_jsonable(rec)).encode()))
    tmp.rename(path)


def _load(path: pathlib.Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def run_one(arm: str, regime: str, lr: float, *, seeds: int, extra_share: float = 1.0) -> dict:
    cfg = arm_config(arm, lr)
    params = sim.SimParams.make(REGIME_DIFFICULTY, 0.5, crux=REGIMES[regime], crux_share=CRUX_SHARE,
                                extra_share=extra_share)
    t0 = time.perf_counter()
    m = sim.simulate(cfg, params, seeds=seeds)
    wall = time.perf_counter() - t0
    keep = ("success0", "success", "decisions", "skewed", "rerolled", "reroll_pass", "energy", "batch_pass")
    return {"arm": arm, "regime": regime, "crux": REGIMES[regime], "crux_share": CRUX_SHARE, "seeds": seeds,
            "extra_share": extra_share, "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
            "wall_s": wall, "metrics": {k: np.asarray(m[k]).tolist() for k in keep}}


def scan(out: pathlib.Path, progress=print, *, fixed_lr: float | None = None) -> float:
    """The grid's learning rate: the scan's best (module docstring), or ``fixed_lr`` (``--lr``: a chosen
    learner, e.g. a slow one whose baseline needs many steps), recorded in ``scan.json`` either way."""
    path = out / "scan.json"
    if path.exists():
        lr = float(json.loads(path.read_text())["lr"])
        if fixed_lr is not None and lr != fixed_lr:
            raise ValueError(f"--lr {fixed_lr:g}: {path} was made at lr {lr:g}; use another --out")
        return lr
    if fixed_lr is not None:
        if not fixed_lr > 0:
            raise ValueError(f"--lr must be > 0, got {fixed_lr}")
        path.write_text(json.dumps({"lr": fixed_lr, "rule": "fixed by --lr, no scan", "seeds": 0, "rows": []}, indent=1))
        return fixed_lr
    rows, old = [], {}
    if path.with_suffix(".partial.json").exists():  # resume a scan
        old = {r["lr"]: r for r in json.loads(path.with_suffix(".partial.json").read_text())}
    lrs = list(LR_SCAN)
    while lrs:
        lr = lrs.pop(0)
        if lr in old:
            rows.append(old[lr])
            if not lrs and max(rows, key=lambda r: r["auc"])["lr"] == lr and len(rows) < LR_SCAN_MAX:
                lrs.append(2 * lr)
            continue
        r = run_one("baseline", "spread", lr, seeds=SCAN_SEEDS)
        s = np.asarray(r["metrics"]["success"])
        rows.append({"lr": lr, "auc": float(s.mean()), "success_25": float(s[:, 24].mean()),
                     "success_100": float(s[:, 99].mean()), "success_200": float(s[:, -1].mean()),
                     "wall_s": r["wall_s"]})
        progress(f"scan lr={lr}: AUC {rows[-1]['auc']:.3f}, step 200 {rows[-1]['success_200']:.3f}")
        path.with_suffix(".partial.json").write_text(json.dumps(rows))
        # bracket the optimum: while the best AUC is at the top of the scan, double the lr
        if not lrs and max(rows, key=lambda r: r["auc"])["lr"] == lr and len(rows) < LR_SCAN_MAX:
            lrs.append(2 * lr)
    best = max(rows, key=lambda r: r["auc"])["lr"]
    path.with_suffix(".partial.json").unlink(missing_ok=True)
    path.write_text(json.dumps({"lr": best, "rule": "highest AUC of the baseline (no-crux regime), scan doubled "
                                                    "until the optimum is bracketed",
                                "seeds": SCAN_SEEDS, "rows": rows}, indent=1))
    return best


def _decisions(rec: dict) -> float:
    return float(np.mean(rec["metrics"]["decisions"]))


def grid(out: pathlib.Path, lr: float, *, seeds: int, progress=print) -> None:
    rd = out / "records"
    rd.mkdir(parents=True, exist_ok=True)
    for regime in REGIMES:
        order = [a for a in ARMS if a != "extra_rollouts"] + ["extra_rollouts"]  # extra_rollouts is matched last
        for arm in order:
            path = rd / f"{regime}__{arm}.json.gz"
            if path.exists():
                continue
            share = 1.0
            if arm == "extra_rollouts":
                d = {a: _decisions(_load(rd / f"{regime}__{a}.json.gz")) for a in ("baseline", "ps_ada", "reroll_noprefix")}
                share = float(np.clip((d["ps_ada"] - d["baseline"]) / max(d["reroll_noprefix"] - d["baseline"], 1e-9),
                                      0.0, 1.0))
            rec = run_one(arm, regime, lr, seeds=seeds, extra_share=share)
            _save(path, rec)
            progress(f"{regime:<8} {arm:<24} success {np.mean(np.asarray(rec['metrics']['success'])[:, -1]):.3f} "
                     f"decisions/step {_decisions(rec):.0f} ({rec['wall_s']:.1f} s)")


def _curve(rec: dict) -> tuple[np.ndarray, np.ndarray]:
    """(success [S, T+1] with step 0, decisions spent before each step [S, T+1])."""
    m = rec["metrics"]
    s = np.concatenate([np.asarray(m["success0"])[:, None], np.asarray(m["success"])], axis=1)
    d = np.cumsum(np.asarray(m["decisions"], float), axis=1)
    return s, np.concatenate([np.zeros((d.shape[0], 1)), d], axis=1)


def report(out: pathlib.Path, *, n_boot: int = 1000, progress=print) -> dict:
    from experiments.studies import decisive

    rd = out / "records"
    res: dict = {"regimes": {}}
    for regime in REGIMES:
        recs = {a: _load(rd / f"{regime}__{a}.json.gz") for a in ARMS if (rd / f"{regime}__{a}.json.gz").exists()}
        if "baseline" not in recs:
            continue
        curves = {a: _curve(r) for a, r in recs.items()}
        steps = np.arange(curves["baseline"][0].shape[1])
        arm_in = {a: {"seeds": list(range(c[0].shape[0])), "y": c[0], "cost": {"decisions": c[1]},
                      "density": np.asarray(recs[a]["metrics"]["energy"]).mean(1),  # [S] mean p(1-p) trained
                      "survival": None} for a, c in curves.items()}
        # on next_visit the no-prefix control IS the baseline (prs.sim, tested bit-exact)
        arm_in["reroll_noprefix-next_visit"] = arm_in["baseline"]
        arms = decisive.arm_stats(steps, arm_in, baseline="baseline", k=5, k_start=1, n_boot=n_boot)
        verdict = decisive.verdict(arms, cost="decisions")
        b = recs["baseline"]["metrics"]
        yb = curves["baseline"][0]
        lv = gap_levels(steps.astype(float), yb, k=5, k_start=1)
        x80 = crossing_steps(steps.astype(float), yb.mean(0)[None], lv["levels"][0.8])[0][0]
        res["regimes"][regime] = {"arms": arms, "verdict": verdict, "success0": float(np.mean(b["success0"])),
                                  "baseline_steps_to_80": float(x80),
                                  "skewed0": float(np.mean(np.asarray(b["skewed"])[:, 0])),
                                  "extra_share": recs.get("extra_rollouts", {}).get("extra_share"),
                                  "decisions_per_step": {a: _decisions(r) for a, r in recs.items()}}
        progress(f"{regime}: {verdict['mechanism']}")
    scan_p = out / "scan.json"
    res["scan"] = json.loads(scan_p.read_text()) if scan_p.exists() else None
    (out / "summary.json").write_text(json.dumps(to_jsonable(res), indent=1, allow_nan=False))
    (out / "summary.md").write_text(summary_markdown(res))
    return res


def _decisive():
    from experiments.studies import decisive
    return decisive


def summary_markdown(res: dict) -> str:
    lines = ["# Simulator grid (issue #16): every arm, noise-limited learner, regime tasks", ""]
    if res.get("scan"):
        sc = res["scan"]
        lines += [f"Learning rate {sc['lr']:g} ({sc['rule']}" + (f", {sc['seeds']} seeds" if sc["rows"] else "") + "): " + ", ".join(
            f"lr {r['lr']:g}: AUC {r['auc']:.3f} / step-200 {r['success_200']:.3f}" for r in sc["rows"]), ""]
    for regime, r in res["regimes"].items():
        lines += [f"## Regime `{regime}` (crux {REGIMES[regime]}): success at step 0 {r['success0']:.3f}, "
                  f"skewed groups at step 0 {r['skewed0']:.2f}, the baseline's mean curve reaches 80% of its gap "
                  f"at step {r['baseline_steps_to_80']:.1f}"
                  + (f", extra_rollouts share {r['extra_share']:.2f}" if r.get("extra_share") is not None else ""), "",
                  _decisive().arms_table(r["arms"], cost="decisions"), "", "**Verdict:** " + r["verdict"]["text"], ""]
    return "\n".join(lines) + "\n"


@cli.command("experiments.sim_grid")
def main(argv=None) -> None:
    p = cli.ArgumentParser(prog="python -m experiments.sim_grid", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="results/sim/grid")
    p.add_argument("--stage", choices=("all", "scan", "grid", "report"), default="all")
    p.add_argument("--seeds", type=int, default=16)
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--lr", type=float, default=None,
                   help="fixed learning rate instead of the scan (e.g. 8: a slow learner whose baseline needs ~60 "
                        "steps to 80%% of its gap)")
    a = p.parse_args(argv)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if a.stage in ("all", "scan", "grid"):
        lr = scan(out, fixed_lr=a.lr)
        if a.stage != "scan":
            grid(out, lr, seeds=a.seeds)
    if a.stage in ("all", "report"):
        report(out, n_boot=a.n_boot)
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
