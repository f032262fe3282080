"""The figures: learning curves, the ablation bars, the controller's trajectories, Fig. 2."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from prs.analysis.runs import PAPER_ABLATION_SPEEDUP, PAPER_SETTLED_REROLL, Run
from prs.analysis.stats import bootstrap_band, curves_vs_wallclock, eval_matrix, moving_average, seed_mean
from prs.analysis.tables import fmt


# ---------------------------------------------------------------------------------------------
# Figures


def _plt():
    import matplotlib.pyplot as plt  # the backend is the caller's choice (the CLI uses Agg)

    return plt


def plot_learning_curves(by_method: dict[str, list[Run]], *, methods: Sequence[str] | None = None,
                         level: float | None = None, n_boot: int = 1000, seed: int = 0, title: str = "",
                         time_clip: float | None = 5.0):
    """Fig. 1 analogue: held-out pass@1 vs step and vs wall-clock, seed mean ± 95% bootstrap band."""
    plt = _plt()
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.2))
    for m in methods or list(by_method):
        runs = by_method.get(m, [])
        if not runs:
            continue
        steps, y = eval_matrix(runs)
        mean, lo, hi = bootstrap_band(y, n_boot=n_boot, seed=seed)
        partial = sum(not r.complete for r in runs)
        line, = ax[0].plot(steps, mean, "o-", ms=3,
                           label=f"{m} (n={len(runs)}" + (f", {partial} partial)" if partial else ")"))
        ax[0].fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2)
        grid, yw = curves_vs_wallclock(runs, clip=time_clip)
        mean, lo, hi = bootstrap_band(yw, n_boot=n_boot, seed=seed)
        ax[1].plot(grid, mean, "-", color=line.get_color(), label=m)
        ax[1].fill_between(grid, lo, hi, color=line.get_color(), alpha=0.2)
    for a in ax:
        if level is not None and math.isfinite(level):
            a.axhline(level, color="k", ls="--", lw=0.8, label="baseline reference level")
        a.set_ylabel("held-out pass@1")
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    ax[0].set(xlabel="training step (updates)", title="vs step (mean ± 95% bootstrap CI over seeds)")
    ax[1].set(xlabel="wall-clock (s, sample + batch + update" + (f"; steps > {time_clip:g}x median clipped)" if time_clip else ")"),
              title="vs wall-clock")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_ablation(task_result: dict[str, Any], *, key: str = "speedup_steps", title: str = ""):
    """Fig. 4 analogue: speed-up over the baseline per method with 95% CIs, the paper's reported
    speed-ups (PAPER_ABLATION_SPEEDUP) as reference markers beside each bar."""
    plt = _plt()
    methods = [m for m, r in task_result["methods"].items() if r["n_runs"]]
    x = np.arange(len(methods))
    vals = np.array([task_result["methods"][m][key]["value"] for m in methods], float)
    lo = np.array([task_result["methods"][m][key]["lo"] for m in methods], float)
    hi = np.array([task_result["methods"][m][key]["hi"] for m in methods], float)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    shown = np.where(np.isfinite(vals), vals, 0.0)
    err = np.stack([np.nan_to_num(shown - lo), np.nan_to_num(hi - shown)]).clip(0)
    ax.bar(x - 0.18, shown, 0.36, yerr=err, capsize=4, label="this code base (95% bootstrap CI)")
    paper = np.array([PAPER_ABLATION_SPEEDUP.get(m, np.nan) for m in methods], float)
    ax.bar(x + 0.18, np.nan_to_num(paper), 0.36, color="0.75", hatch="//", label="paper (reported, Zhu et al. 2026)")
    for xi, v, m in zip(x, vals, methods):
        c = task_result["methods"][m]
        note = " (censored)" if c[key].get("bound") not in (None, "exact") else ""
        ax.text(xi - 0.18, (v if math.isfinite(v) else 0) + 0.03, f"{fmt(v)}{note}", ha="center", fontsize=7)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x, methods)
    ax.set(ylabel={"speedup_steps": "speed-up in steps to converge (×)", "speedup_wall": "speed-up in wall-clock (×)",
                   "speedup_tokens": "speed-up in generated tokens (×)"}[key],
           title=title or "ablation: speed-up over baseline")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_controller(by_method: dict[str, list[Run]], *, methods: Sequence[str] | None = None, window: int = 5,
                    title: str = ""):
    """The controller at work: ρ_b per bucket and the re-rollout pass rate (seed mean of a trailing
    moving average over steps, and the controller's EMA) per bucket, with the 0.5 target and the
    paper's settled rates (PAPER_SETTLED_REROLL) as reference markers."""
    plt = _plt()
    methods = [m for m in (methods or list(by_method)) if by_method.get(m) and by_method[m][0].ks
               and np.isfinite(np.concatenate([r.reroll_rate.ravel() for r in by_method[m]])).any()]
    fig, ax = plt.subplots(max(len(methods), 1), 2, figsize=(12, 3.4 * max(len(methods), 1)), squeeze=False)
    for row, m in enumerate(methods):
        runs = [r for r in by_method[m] if r.ks == by_method[m][0].ks]
        ks, n = runs[0].ks, runs[0].n
        T = max(r.steps_done for r in runs)
        def stack(field):  # [S, T, K] NaN-padded
            a = np.full((len(runs), T, len(ks)), np.nan)
            for i, r in enumerate(runs):
                a[i, : r.steps_done] = getattr(r, field)
            return a
        rho, rate, ema = stack("rho"), stack("reroll_rate"), stack("ema")
        steps = np.arange(T)
        for j, k in enumerate(ks):
            line, = ax[row, 0].plot(steps, seed_mean(rho[:, :, j]), label=f"ρ, bucket {k}/{n}")
            smooth = seed_mean(moving_average(rate[:, :, j], window=window))
            ax[row, 1].plot(steps, smooth, color=line.get_color(), label=f"re-roll pass rate {k}/{n} (MA {window})")
            has = np.isfinite(rate[:, :, j]).any(0)
            ax[row, 1].plot(steps[has], seed_mean(ema[:, :, j])[has], ":", color=line.get_color(), lw=1)
            if k in PAPER_SETTLED_REROLL:
                ax[row, 1].plot([T * 1.02], [PAPER_SETTLED_REROLL[k]], "D", color=line.get_color(), ms=6, mec="k",
                                label=f"paper settled {k}/{n}: {PAPER_SETTLED_REROLL[k]:.3f}")
        ax[row, 1].axhline(0.5, color="k", ls="--", lw=0.8, label="target 0.5")
        ax[row, 0].set(xlabel="training step", ylabel="prefix fraction ρ_b", ylim=(0, 1), title=f"{m}: prefix fraction")
        ax[row, 1].set(xlabel="training step", ylabel="re-rollout pass rate", ylim=(0, 1),
                       title=f"{m}: re-rollout pass rate (dotted: controller EMA; ◆ paper)")
        for a in ax[row]:
            a.legend(fontsize=6, ncol=2)
            a.grid(alpha=0.3)
    if not methods:
        ax[0, 0].text(0.5, 0.5, "no run with re-rolls", ha="center", transform=ax[0, 0].transAxes)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_fig2(n: int = 8):
    """Fig. 2: the four pass-rate metrics vs p, from the theory package (``theory.plot_fig2``)."""
    _plt()
    from theory.figure import plot_fig2 as _fig2

    return _fig2(n)


def plot_gap_curves(res: dict[str, Any], *, title: str = "", xlabel: str = "training step",
                    ylabel: str = "held-out pass@1"):
    """The decisive experiment's learning curves: every arm's seed-mean curve, the baseline's start /
    final levels and its 50% / 80%-gap levels (``experiments.studies.decisive.arm_stats`` result with "steps"
    and "curves": {arm: {"mean": [E]}})."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    steps = np.asarray(res["steps"], float)
    for arm in res["order"]:
        c = res["curves"].get(arm)
        if c is None:
            continue
        ls = "--" if "next_visit" in arm else "-"
        ax.plot(steps, c["mean"], ls, lw=2.2 if arm in ("baseline", res.get("ps")) else 1.2,
                label=f"{arm} (n={len(c['seeds'])})")
    ps = res.get("ps")
    lv = res["arms"].get(ps, {}).get("levels") if ps else None
    if lv and not lv["degenerate"]:
        for f, L in lv["levels"].items():
            ax.axhline(L, color="k", ls=":", lw=0.8)
            ax.text(steps[-1], L, f" {int(round(100 * float(f)))}% of {res['arms'][ps]['vs']}'s gap", va="center",
                    fontsize=7)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title or "seed-mean learning curves; dotted: the gap levels of PS's baseline")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_gap_speedups(res: dict[str, Any], *, cost: str = "tokens", title: str = ""):
    """Speed-up to 80% of the baseline's gap per arm, in steps and in ``cost``, with paired 95% CIs;
    the paper's ablation speed-ups (PAPER_ABLATION_SPEEDUP) as black diamonds."""
    plt = _plt()
    arms = [a for a in res["order"] if a in res["arms"] and "error" not in res["arms"][a]]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.0 * len(arms) + 2), 4.2))
    x = np.arange(len(arms))
    for j, (key, lab) in enumerate((("speedup_steps", "steps"), (f"speedup_{cost}", cost))):
        vals, lo, hi = [], [], []
        for a in arms:
            r = res["arms"][a]
            d = r.get(r["fractions"][-1], {}).get(key) or {"value": np.nan, "lo": np.nan, "hi": np.nan}
            v = d["value"]
            vals.append(v)
            lo.append(v - d["lo"] if np.isfinite(d["lo"]) else 0.0)
            hi.append(d["hi"] - v if np.isfinite(d["hi"]) else 0.0)
        ax.bar(x + (j - 0.5) * 0.38, vals, width=0.38, yerr=[lo, hi], capsize=3, label=f"in {lab} (95% paired CI)")
    paper = [PAPER_ABLATION_SPEEDUP.get(a.split("-")[0], np.nan) for a in arms]
    ax.plot(x, paper, "D", color="k", ms=6, label="paper (ablation, steps to converge)")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(x, [a.replace("-", "\n") for a in arms], fontsize=8)
    ax.set_ylabel("speed-up vs baseline to 80% of its gap (x)")
    ax.set_title(title or "speed-up to 80% of the baseline's gap")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
