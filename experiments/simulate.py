"""Hydra entry point of the many-seed simulator (issue #9): ablation x difficulty x N x target sweeps.

    python -m experiments.simulate                                   # the quick sweep (default: sweep=quick)
    python -m experiments.simulate sweep=full                        # the full grid (168 configurations)
    python -m experiments.simulate sweep.ns=[8] sweep.targets=[0.4,0.5,0.6] sweep.seeds=200
    python -m experiments.simulate -m learner.recovery_handicap=2,3,4 sweep=quick
    python -m experiments.simulate sweep=controls learner=noise_limited   # ps_ada vs its controls (issue #16)

The config tree is ``conf/simulate/`` (separate from the training config ``conf/config.yaml``);
every node is merged into the dataclass schema below, so an unknown key is an error. Outputs go
into the Hydra run dir: ``metrics.json`` (every configuration: steps to the success threshold with
bootstrap CIs, speed-ups vs baseline with paired-bootstrap CIs, seconds per configuration: ``wall_s``
the simulation, ``line_s`` the whole line with its statistics),
``summary.md``, and the PNG figures of `make_figures`. One program is compiled per (mode, N); the
difficulty mixture and the controller target are traced, so they reuse it.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import pathlib
import time
from dataclasses import field
from typing import Callable

import numpy as np
from omegaconf import OmegaConf

from experiments import cli
from experiments.schema import node, rest_of, to_kwargs
from prs import sim
from prs.analysis.bootstrap import bootstrap_ci, speedup_ci
from prs.analysis.gap import gap_compare
from prs.analysis.runs import PAPER_ABLATION_SPEEDUP
from prs.core import prefix as px

log = logging.getLogger(__name__)

PAPER_ABLATION = PAPER_ABLATION_SPEEDUP  # Zhu et al. 2026, ablation table (one source: prs.analysis.runs)
ADAPTIVE = ("ps_ada", "ps_ada_hard")
# The controls of issue #15 in the simulator (sweep.control): "reroll_only" = reroll_noprefix (ps_ada's
# groups re-rolled from scratch; with learner.reroll=add these are extra from-scratch rollouts for the
# skewed groups, so it is also extra_rollouts, compared token-matched through the per-decision speed-ups:
# it samples MORE decisions than PS, whose success prefixes are replayed); "baseline_lr2" = the baseline
# with twice learner.lr (the "more gradient" explanation).
CONTROLS = ("reroll_only", "baseline_lr2")


# The learner and controller nodes are derived from prs.sim.SimConfig (experiments.schema): each
# field, type and default is declared once, there. `sweep` picks mode and N; the target is swept.
CONTROLLER = ["ema_decay", "gain", "rho_init", "rho_min", "rho_max"]
LEARNER = rest_of(sim.SimConfig, ["mode", "n"], CONTROLLER)
LearnerCfg = node("LearnerCfg", (sim.SimConfig, LEARNER))
ControllerCfg = node("ControllerCfg", (sim.SimConfig, CONTROLLER))


@dataclasses.dataclass
class DifficultyCfg:
    """Beta mixture of the initial per-task success probability (prs.sim.Difficulty)."""

    weight: list[float] = field(default_factory=lambda: [1.0])
    alpha: list[float] = field(default_factory=lambda: [1.0])
    beta: list[float] = field(default_factory=lambda: [1.0])


@dataclasses.dataclass
class SweepCfg:
    modes: list[str] = field(default_factory=lambda: list(px.MODES))
    ns: list[int] = field(default_factory=lambda: [4, 8, 16])
    difficulties: list[str] = field(default_factory=lambda: ["easy_heavy", "hard_heavy", "bimodal", "uniform"])
    targets: list[float] = field(default_factory=lambda: [0.3, 0.4, 0.5, 0.6, 0.7])
    seeds: int = 100
    seed0: int = 0
    reach: float = 0.5          # threshold: success0 + reach * (1 - success0)
    n_boot: int = 2000
    level: float = 0.95
    trajectory_n: int = 8       # setting whose rho_b / EMA_b trajectories are plotted
    trajectory_difficulty: str = "uniform"
    control: bool = True        # also the controls at target 0.5: "reroll_only" (no prefix), "baseline_lr2" (2x lr)
    gap_k: int = 5              # gap statistics: final level = mean of the baseline's last gap_k points;
    gap_k_start: int = 1        # start = mean of its first gap_k_start points (1: the closed-form step 0 is exact)


@dataclasses.dataclass
class SimulateCfg:
    learner: LearnerCfg = field(default_factory=LearnerCfg)
    controller: ControllerCfg = field(default_factory=ControllerCfg)
    sweep: SweepCfg = field(default_factory=SweepCfg)
    difficulties: dict[str, DifficultyCfg] = field(default_factory=dict)
    figures: bool = True


def validate(cfg) -> SimulateCfg:
    """Merges a composed config into the schema (unknown keys and wrong types raise) -> SimulateCfg."""
    plain = OmegaConf.to_container(cfg, resolve=True) if not isinstance(cfg, dict) else dict(cfg)
    plain.pop("hydra", None)
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SimulateCfg), plain))


def _difficulty(cfg: SimulateCfg, name: str) -> sim.Difficulty:
    if name in cfg.difficulties:
        d = cfg.difficulties[name]
        return sim.Difficulty(tuple(d.weight), tuple(d.alpha), tuple(d.beta))
    if name in sim.DIFFICULTIES:
        return sim.DIFFICULTIES[name]
    raise ValueError(f"unknown difficulty {name!r}; known: {sorted(set(cfg.difficulties) | set(sim.DIFFICULTIES))}")


def sim_config(cfg: SimulateCfg, mode: str, n: int) -> sim.SimConfig:
    """mode "reroll_only" = ps_ada's groups re-rolled from scratch (no prefix); "baseline_lr2" = the
    baseline at 2x learner.lr: the controls (CONTROLS)."""
    learner = to_kwargs(cfg.learner, sim.SimConfig)
    if mode == "reroll_only":
        mode, learner["reroll_prefix"] = "ps_ada", False
    elif mode == "baseline_lr2":
        mode, learner["lr"] = "baseline", 2.0 * learner["lr"]
    return sim.SimConfig(mode=mode, n=n, **learner, **to_kwargs(cfg.controller, sim.SimConfig))


def _ci(triple):
    return {"mean": triple[0], "lo": triple[1], "hi": triple[2]}


def run_sweep(cfg: SimulateCfg, progress: Callable[[str], None] = log.info) -> dict:
    """Runs every (N, mode, difficulty, target) configuration; returns the JSON-ready results.

    Baseline and ps_fix do not use the target, so they run once per (N, difficulty) (target 0.5).
    Speed-up = mean baseline steps / mean method steps on the same seeds (paired bootstrap CI);
    speedup_compute does the same with the policy decisions sampled until the threshold (the
    re-rollouts' cost included). "reroll_only" (sweep.control) is the no-prefix control.
    """
    sw = cfg.sweep
    for m in sw.modes:
        if m not in px.MODES:
            raise ValueError(f"sweep.modes: unknown mode {m!r}, known {px.MODES}")
    diffs = {name: _difficulty(cfg, name) for name in sw.difficulties}
    jobs = [(n, mode, d, t) for n in sw.ns for mode in sw.modes for d in sw.difficulties
            for t in (sw.targets if mode in ADAPTIVE else [0.5])]
    if sw.control and "baseline" in sw.modes:
        jobs += [(n, c, d, 0.5) for c in CONTROLS for n in sw.ns for d in sw.difficulties]
    records, trajectories, base_steps, base_cost, base_curve = [], {}, {}, {}, {}
    boot = dict(n_boot=sw.n_boot, level=sw.level, seed=sw.seed0)
    compiled = set()
    t_all = time.perf_counter()
    # baseline first within each N so that speed-ups can be computed on the fly
    jobs.sort(key=lambda j: (j[0], j[1] != "baseline"))
    for i, (n, mode, dname, target) in enumerate(jobs):
        scfg = sim_config(cfg, mode, n)
        t0 = time.perf_counter()
        m = sim.simulate(scfg, sim.SimParams.make(diffs[dname], target), seeds=sw.seeds, seed0=sw.seed0)
        wall = time.perf_counter() - t0
        first = (mode, n) not in compiled
        compiled.add((mode, n))
        steps, censored = sim.steps_to_reach(m["success"], m["success0"], reach=sw.reach)
        cum = np.cumsum(m["decisions"], axis=1)  # [S, T] policy decisions sampled so far
        cost = cum[np.arange(len(steps)), np.minimum(steps, cum.shape[1]) - 1]  # [S] decisions to reach
        rec = dict(mode=mode, n=n, difficulty=dname, target=target, seeds=sw.seeds, wall_s=wall,
                   includes_compile=first, steps=_ci(bootstrap_ci(steps.astype(float), **boot)),
                   censored=float(censored.mean()), success0=float(m["success0"].mean()),
                   final_success=float(m["success"][:, -1].mean()),
                   skewed0=float(m["skewed"][:, 0].mean()), skewed=float(m["skewed"].mean()),
                   rerolled=float(m["rerolled"].mean()), energy=float(m["energy"].mean()),
                   decisions_per_step=float(m["decisions"].mean()),
                   ema_final=m["ema"][:, -1].mean(0).tolist(), rho_final=m["rho"][:, -1].mean(0).tolist())
        # the curve with its step-0 point, and the decisions sampled before each step: [S, T+1]
        curve = np.concatenate([m["success0"][:, None], m["success"]], axis=1)
        spent = np.concatenate([np.zeros((cum.shape[0], 1)), cum], axis=1)
        if mode == "baseline":
            base_steps[(n, dname)], base_cost[(n, dname)] = steps, cost
            base_curve[(n, dname)] = (curve, spent)
            rec["speedup"] = rec["speedup_compute"] = _ci((1.0, 1.0, 1.0))
        elif (n, dname) in base_steps:
            rec["speedup"] = _ci(speedup_ci(base_steps[(n, dname)], steps, **boot))
            rec["speedup_compute"] = _ci(speedup_ci(base_cost[(n, dname)], cost, **boot))
            try:
                rec["gap"] = gap_summary(base_curve[(n, dname)], (curve, spent), k=sw.gap_k, k_start=sw.gap_k_start,
                                         **boot)
            except ValueError as e:  # e.g. a run too short for 2 * gap_k points: say so, do not drop it
                rec["gap"] = {"error": str(e)}
        if n == sw.trajectory_n and dname == sw.trajectory_difficulty and target == 0.5 and mode != "baseline":
            trajectories[mode] = {
                "ks": px.bucket_ks(scfg.prefix_config()).tolist(),
                "rho": np.percentile(m["rho"], [10, 50, 90], axis=0).tolist(),  # [3, T, K]
                "ema": np.percentile(m["ema"], [10, 50, 90], axis=0).tolist(),
                "success": m["success"].mean(0).tolist()}
        if mode == "baseline" and n == sw.trajectory_n and dname == sw.trajectory_difficulty:
            trajectories["baseline"] = {"success": m["success"].mean(0).tolist()}
        rec["line_s"] = time.perf_counter() - t0  # the whole configuration: simulate + bootstrap / gap statistics
        records.append(rec)
        sp = rec.get("speedup", {}).get("mean", float("nan"))
        progress(f"[{i + 1}/{len(jobs)}] N={n} {mode:<11} {dname:<10} target={target:.2f}  "
                 f"steps={rec['steps']['mean']:.1f}  speed-up={sp:.3f}  "
                 f"({rec['line_s']:.1f} s: simulate {wall:.1f} s{' incl. compile' if first else ''}, "
                 f"statistics {rec['line_s'] - wall:.1f} s)")
    total = time.perf_counter() - t_all
    run_times = [r["wall_s"] for r in records if not r["includes_compile"]]
    return {"config": dataclasses.asdict(cfg), "records": records, "trajectories": trajectories,
            "best_targets": best_targets(records), "total_s": total,
            "median_s_per_config": float(np.median(run_times)) if run_times else None,
            "max_s_per_config_incl_compile": max(r["wall_s"] for r in records),
            "paper_ablation": PAPER_ABLATION}


def gap_summary(base: tuple[np.ndarray, np.ndarray], meth: tuple[np.ndarray, np.ndarray], *, k: int,
                k_start: int | None = None, **boot) -> dict:
    """Paired gap statistics (prs.analysis.gap) of a method vs the baseline on the same seeds.

    base, meth: (success [S, T+1] with the step-0 point, decisions spent before each step [S, T+1]).
    Returns {"gap50"|"gap80": {"steps", "decisions", "mean_curve", "censored"}, "auc"} (CIs as mean/lo/hi).
    """
    steps = np.arange(base[0].shape[1])
    r = gap_compare(steps, base[0], meth[0], cost_base={"decisions": base[1]}, cost_meth={"decisions": meth[1]},
                    k=k, k_start=k_start, **boot)
    ci = lambda d: {"mean": d["value"], "lo": d["lo"], "hi": d["hi"]}  # noqa: E731
    out = {f"gap{int(round(100 * f))}": {"steps": ci(r[f]["speedup_steps"]), "decisions": ci(r[f]["speedup_decisions"]),
                                         "mean_curve": ci(r[f]["mean_curve"]) if "mean_curve" in r[f] else None,
                                         "censored": r[f]["n_censored_method"], "bound": r[f]["bound"]}
           for f in r["fractions"]}
    out["auc"] = ci(r["auc"]["improvement"]) if "auc" in r else None
    out["start"], out["final"] = r["levels"]["start"], r["levels"]["final"]
    return out


def best_targets(records: list[dict]) -> list[dict]:
    """Per (mode, N, difficulty) of an adaptive mode: the target with the largest mean speed-up."""
    out = {}
    for r in records:
        if r["mode"] in ADAPTIVE and "speedup" in r:
            key = (r["mode"], r["n"], r["difficulty"])
            if key not in out or r["speedup"]["mean"] > out[key]["speedup"]["mean"]:
                out[key] = r
    return [dict(mode=k[0], n=k[1], difficulty=k[2], best_target=r["target"], speedup=r["speedup"])
            for k, r in sorted(out.items())]


def summary_markdown(res: dict) -> str:
    recs = res["records"]
    lines = ["# Simulator sweep", "",
             f"reach = {res['config']['sweep']['reach']} of the gap to 1, {res['config']['sweep']['seeds']} seeds, "
             f"{len(recs)} configurations in {res['total_s']:.0f} s (simulation alone: median {res['median_s_per_config'] or 0:.1f} s "
             f"per configuration once compiled, at most {res['max_s_per_config_incl_compile']:.1f} s incl. compile; "
             f"the bootstrap statistics take the rest).",
             "", "## Speed-up vs baseline at target 0.5 (mean [95% CI], paired bootstrap over seeds)", "",
             "| N | difficulty | skewed share (step 0) | baseline steps | ps_fix | ps_ada_hard | ps_ada "
             "| reroll_only (control) | ps_ada per decision | reroll_only per decision |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n in sorted({r["n"] for r in recs}):
        for d in dict.fromkeys(r["difficulty"] for r in recs):
            row = {r["mode"]: r for r in recs if r["n"] == n and r["difficulty"] == d and r["target"] == 0.5}
            if "baseline" not in row:
                continue
            cell = lambda m: (f"{row[m]['speedup']['mean']:.2f} [{row[m]['speedup']['lo']:.2f}, "  # noqa: E731
                              f"{row[m]['speedup']['hi']:.2f}]" if m in row and "speedup" in row[m] else "-")
            def comp(m):
                c = row.get(m, {}).get("speedup_compute")
                return f"{c['mean']:.2f} [{c['lo']:.2f}, {c['hi']:.2f}]" if c else "-"
            lines.append(f"| {n} | {d} | {row['baseline']['skewed0']:.2f} | {row['baseline']['steps']['mean']:.1f} | "
                         f"{cell('ps_fix')} | {cell('ps_ada_hard')} | {cell('ps_ada')} | {cell('reroll_only')} | "
                         f"{comp('ps_ada')} | {comp('reroll_only')} |")
    lines += ["", "Paper (N = 8, SWE agent): ps_fix 1.61, ps_ada_hard 1.13, ps_ada 1.92.", "",
              "## Speed-up to 80% of the baseline's gap (steps | policy decisions), target 0.5", "",
              "Start / final = mean of the baseline's first `gap_k_start` / last `gap_k` points (prs.analysis.gap); paired "
              "bootstrap over seeds; `c` = censored method seeds.", "",
              "| N | difficulty | " + " | ".join(m for m in ("ps_fix", "ps_ada_hard", "ps_ada") + CONTROLS) + " |",
              "|---|---|" + "---|" * (3 + len(CONTROLS))]
    for n in sorted({r["n"] for r in recs}):
        for d in dict.fromkeys(r["difficulty"] for r in recs):
            row = {r["mode"]: r for r in recs if r["n"] == n and r["difficulty"] == d and r["target"] == 0.5}
            if "baseline" not in row:
                continue
            def g80(m):
                g = row.get(m, {}).get("gap")
                if not g or "error" in g:
                    return "-" if not g else "error"
                s, c = g["gap80"]["steps"], g["gap80"]["decisions"]
                cens = f" c{g['gap80']['censored']}" if g["gap80"]["censored"] else ""
                return f"{s['mean']:.2f} [{s['lo']:.2f}, {s['hi']:.2f}] \\| {c['mean']:.2f}{cens}"
            lines.append(f"| {n} | {d} | " + " | ".join(g80(m) for m in ("ps_fix", "ps_ada_hard", "ps_ada") + CONTROLS)
                         + " |")
    lines += ["",
              "## Best controller target per setting", "", "| mode | N | difficulty | best target | speed-up |",
              "|---|---|---|---|---|"]
    for b in res["best_targets"]:
        s = b["speedup"]
        lines.append(f"| {b['mode']} | {b['n']} | {b['difficulty']} | {b['best_target']:.2f} | "
                     f"{s['mean']:.2f} [{s['lo']:.2f}, {s['hi']:.2f}] |")
    return "\n".join(lines) + "\n"


def make_figures(res: dict, out_dir: pathlib.Path) -> list[pathlib.Path]:
    """speedup_vs_target.png, speedup_vs_mix.png, controller_trajectories.png, ablation.png."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = pathlib.Path(out_dir)
    recs = res["records"]
    ns = sorted({r["n"] for r in recs})
    diffs = list(dict.fromkeys(r["difficulty"] for r in recs))
    colors = dict(zip(diffs, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    paths = []

    fig, axes = plt.subplots(1, len(ns), figsize=(4.5 * len(ns), 3.6), squeeze=False, sharey=True)
    for ax, n in zip(axes[0], ns):
        for d in diffs:
            for mode, ls in (("ps_ada", "-"), ("ps_ada_hard", "--")):
                rs = sorted((r for r in recs if r["n"] == n and r["difficulty"] == d and r["mode"] == mode
                             and "speedup" in r), key=lambda r: r["target"])
                if not rs:
                    continue
                t = [r["target"] for r in rs]
                ax.plot(t, [r["speedup"]["mean"] for r in rs], ls, marker="o", ms=3, color=colors[d],
                        label=f"{mode} / {d}")
                ax.fill_between(t, [r["speedup"]["lo"] for r in rs], [r["speedup"]["hi"] for r in rs],
                                color=colors[d], alpha=0.12)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.axvline(0.5, color="grey", lw=0.8, ls=":")
        ax.set_title(f"N = {n}")
        ax.set_xlabel("controller target pass rate")
    axes[0, 0].set_ylabel("speed-up vs baseline (x, steps to threshold)")
    axes[0, -1].legend(fontsize=6, loc="best")
    fig.suptitle("Does the speed-up peak at target 0.5? (95% bootstrap CI bands)")
    fig.tight_layout()
    paths.append(out_dir / "speedup_vs_target.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.5, 4))
    markers = {4: "s", 8: "o", 16: "^"}
    for mode, c in (("ps_fix", "C0"), ("ps_ada_hard", "C1"), ("ps_ada", "C2"), ("reroll_only", "C3")):
        first = True
        for r in recs:
            if r["mode"] != mode or r["target"] != 0.5 or "speedup" not in r:
                continue
            base = next(b for b in recs if b["mode"] == "baseline" and b["n"] == r["n"]
                        and b["difficulty"] == r["difficulty"])
            s = r["speedup"]
            ax.errorbar(base["skewed0"], s["mean"], yerr=[[s["mean"] - s["lo"]], [s["hi"] - s["mean"]]],
                        fmt=markers.get(r["n"], "o"), color=c, ms=5, capsize=2, label=mode if first else None)
            first = False
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel("share of skewed groups at step 0 (fraction of groups in a PS bucket)")
    ax.set_ylabel("speed-up vs baseline (x)")
    ax.set_title("Speed-up vs difficulty mix (marker: N = 4 square, 8 circle, 16 triangle)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / "speedup_vs_mix.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    tr = res["trajectories"].get("ps_ada")
    if tr is not None:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        rho, ema = np.asarray(tr["rho"]), np.asarray(tr["ema"])  # [3, T, K]
        steps = np.arange(1, rho.shape[1] + 1)
        n = res["config"]["sweep"]["trajectory_n"]
        for b, k in enumerate(tr["ks"]):
            for ax, arr in ((axes[0], rho), (axes[1], ema)):
                ax.plot(steps, arr[1, :, b], color=f"C{b % 10}", label=f"bucket k = {k}/{n}")
                ax.fill_between(steps, arr[0, :, b], arr[2, :, b], color=f"C{b % 10}", alpha=0.15)
        axes[0].set_ylabel("prefix fraction rho_b")
        axes[1].set_ylabel("EMA of re-rollout pass rate")
        axes[0].set_title("rho_b: median over seeds, 10-90% band", fontsize=9)
        axes[1].set_title("EMA_b: median over seeds, 10-90% band", fontsize=9)
        axes[1].axhline(0.5, color="k", lw=0.8, ls=":")
        for ax in axes:
            ax.set_xlabel("training step")
            ax.legend(fontsize=7)
        fig.suptitle(f"ps_ada controller, N = {n}, difficulty {res['config']['sweep']['trajectory_difficulty']}, target 0.5")
        fig.tight_layout()
        paths.append(out_dir / "controller_trajectories.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 3.8))
    modes = list(PAPER_ABLATION) + [c for c in CONTROLS if any(r["mode"] == c for r in recs)]
    x = np.arange(len(modes))
    ax.bar(x - 0.4, [PAPER_ABLATION.get(m, np.nan) for m in modes], width=0.8 / (len(diffs) + 1), color="k",
           label="paper (SWE agent, N = 8)")
    n_ab = 8 if 8 in ns else ns[0]
    for j, d in enumerate(diffs):
        vals, lo, hi = [], [], []
        for m in modes:
            r = next((r for r in recs if r["mode"] == m and r["n"] == n_ab and r["difficulty"] == d
                      and r["target"] == 0.5 and "speedup" in r), None)
            s = r["speedup"] if r else {"mean": np.nan, "lo": np.nan, "hi": np.nan}
            vals.append(s["mean"]), lo.append(s["mean"] - s["lo"]), hi.append(s["hi"] - s["mean"])
        ax.bar(x - 0.4 + (j + 1) * 0.8 / (len(diffs) + 1), vals, width=0.8 / (len(diffs) + 1),
               yerr=[lo, hi], capsize=2, color=colors[d], label=f"simulator / {d}")
    ax.set_xticks(x - 0.4 + 0.4 * len(diffs) / (len(diffs) + 1),
                  [{"reroll_only": "reroll_only\n(no-prefix control)", "baseline_lr2": "baseline_lr2\n(2x lr control)"}
                   .get(m, m) for m in modes])
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_ylabel("speed-up vs baseline (x, steps)")
    ax.set_title(f"Ablation: paper vs simulator (N = {n_ab}, target 0.5, 95% CI)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / "ablation.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


def run(cfg: SimulateCfg, out_dir: pathlib.Path, progress: Callable[[str], None] = log.info) -> dict:
    """run_sweep + metrics.json + summary.md + figures, all into out_dir."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    res = run_sweep(cfg, progress)
    (out_dir / "metrics.json").write_text(json.dumps(res, indent=1))
    (out_dir / "summary.md").write_text(summary_markdown(res))
    if cfg.figures:
        res["figures"] = [p.name for p in make_figures(res, out_dir)]
    progress(f"wrote {out_dir}/metrics.json, summary.md{', figures' if cfg.figures else ''} "
             f"({res['total_s']:.0f} s total)")
    return res


CONF = pathlib.Path(__file__).resolve().parent.parent / "conf" / "simulate"


@cli.command("experiments.simulate")
def main(argv=None) -> None:
    """``python -m experiments.simulate [overrides]``: the overrides are checked against ``SimulateCfg``
    and ``conf/simulate/``'s groups first (``cli.check_overrides``: one ``error:`` line, "did you mean")."""
    import sys

    import hydra
    from hydra.core.hydra_config import HydraConfig

    argv = sys.argv[1:] if argv is None else list(argv)
    sys.argv[1:] = cli.check_overrides(argv, conf=CONF, schema=SimulateCfg, listing="python -m experiments.simulate --cfg job")

    @hydra.main(version_base=None, config_path="../conf/simulate", config_name="config")
    def _main(raw) -> None:
        try:
            cfg = validate(raw)
        except Exception as e:  # noqa: BLE001  a schema error (wrong type): one line, as at the command line
            if not isinstance(e, cli.usage_errors()) or os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"error: {cli.one_line(e)}", file=sys.stderr, flush=True)
            sys.exit(2)
        run(cfg, pathlib.Path(HydraConfig.get().runtime.output_dir))

    _main()


if __name__ == "__main__":
    main()
