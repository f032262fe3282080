"""Paired seeds of ps_ada on arith, jax vs vLLM rollout engine: the table, the paired CIs and the figure.

    python -m experiments.engines_paired [results/engines/paired]

Reads ``<engine>-s<seed>/metrics.jsonl`` (written by ``experiments/engines_paired.sh``) and writes
``summary.json`` and ``pass_at_1.png`` into the same folder. A pair is a seed with both engines' runs
finished (20 steps, eval at steps 0 and 20); an unpaired run is listed but left out of the statistics.

Statistics over the S paired seeds (held-out pass@1 = ``eval/pass_at_1``):
  gain_e = pass@1(step 20) - pass@1(step 0) per engine e, and final_e = pass@1(step 20);
  the paired differences vLLM - jax of both, d_s = x_vllm,s - x_jax,s, with a paired percentile
  bootstrap CI of mean_s(d_s) (``prs.analysis.bootstrap.bootstrap_diff_of_means``, one resample index
  for both engines, expanded percentile interval for small S: Hesterberg 2015, sec. 4.3).
Per run, as means over the training steps: |log p_trainer - log q_sampler| and KL k1/k3 per policy token
(``rollout/*``, logged by the vLLM engine only: the jax engine's log-probs are the trainer's own),
generation throughput tokens_generated / time_sample over steps >= 1 (step 0 holds the jax engine's
compile and vLLM's warm-up), and the weight push time ``rollout/sync_s``.
"""
from __future__ import annotations

import json
import math
import pathlib
import re

import numpy as np

from prs.analysis.bootstrap import bootstrap_diff_of_means, bootstrap_mean
from experiments import cli

ENGINES = ("jax", "vllm")
RUN = re.compile(r"^(jax|vllm)-s(\d+)$")
MISMATCH = ("rollout/logp_abs_diff", "rollout/kl_k1", "rollout/kl_k3", "rollout/sync_s")


def read_run(run_dir: pathlib.Path) -> dict:
    """One run's record: {"evals": {step: pass@1}, per-run means of the mismatch keys (None when the
    engine does not log them), "tokens_per_s" (steps >= 1), "steps" (train records)}."""
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = [r for r in recs if r.get("kind") == "train"]
    evals = {int(r["step"]): float(r["eval/pass_at_1"]) for r in recs if r.get("kind") == "eval"}
    out = {"evals": evals, "steps": len(train)}
    for k in MISMATCH:
        v = [float(r[k]) for r in train if k in r]
        out[k] = float(np.mean(v)) if v else None
    later = [r for r in train if r["step"] >= 1]
    t = sum(float(r["time_sample"]) for r in later)
    out["tokens_per_s"] = sum(float(r["tokens_generated"]) for r in later) / t if t > 0 else None
    out["time_sample_mean"] = float(np.mean([r["time_sample"] for r in later])) if later else None
    return out


def load(root: pathlib.Path) -> dict[str, dict[int, dict]]:
    """{engine: {seed: read_run(...)}} for every ``<engine>-s<seed>`` folder of root with a metrics.jsonl."""
    runs: dict[str, dict[int, dict]] = {e: {} for e in ENGINES}
    for d in sorted(root.iterdir()):
        m = RUN.match(d.name)
        if m and (d / "metrics.jsonl").is_file():
            runs[m.group(1)][int(m.group(2))] = read_run(d)
    return runs


def paired_stats(jax_curves, vllm_curves, *, first: int = 0, last: int = -1, n_boot: int = 10000,
                 seed: int = 0) -> dict:
    """Gains and final pass@1 per engine and their paired differences vLLM - jax.

    jax_curves, vllm_curves [S, E]: held-out pass@1 at the E eval steps, row s = seed s of both engines;
    ``first``/``last`` index the eval columns of the gain (default: first and last eval).
    Returns {"n_pairs", "gain": {engine: bootstrap_mean}, "final": {engine: ...},
    "diff_gain": bootstrap_diff_of_means(vllm, jax, paired), "diff_final": ...}; CIs are expanded
    percentile intervals (NaN when S < 2)."""
    a, b = np.asarray(jax_curves, float), np.asarray(vllm_curves, float)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"jax_curves and vllm_curves must both be [S, E], got {a.shape} and {b.shape}")
    gain = {"jax": a[:, last] - a[:, first], "vllm": b[:, last] - b[:, first]}   # [S]
    final = {"jax": a[:, last], "vllm": b[:, last]}                            # [S]
    kw = dict(n_boot=n_boot, seed=seed, expand=a.shape[0] >= 2)
    return {
        "n_pairs": int(a.shape[0]),
        "gain": {e: bootstrap_mean(gain[e], **kw) for e in ENGINES},
        "final": {e: bootstrap_mean(final[e], **kw) for e in ENGINES},
        "diff_gain": bootstrap_diff_of_means(gain["vllm"], gain["jax"], paired=True, **kw),
        "diff_final": bootstrap_diff_of_means(final["vllm"], final["jax"], paired=True, **kw),
    }


def verdict(stats: dict) -> dict:
    """The prediction's two parts: the gain difference's CI includes 0, and each engine's gain CI lies
    above 0. None where a CI is undefined (fewer than two pairs)."""
    d = stats["diff_gain"]

    def above0(ci):
        return None if math.isnan(ci["lo"]) else bool(ci["lo"] > 0)

    agree = None if math.isnan(d["lo"]) else bool(d["lo"] <= 0 <= d["hi"])
    learns = {e: above0(stats["gain"][e]) for e in ENGINES}
    return {"engines_agree": agree, "learns": learns,
            "prediction_holds": None if agree is None or None in learns.values() else agree and all(learns.values())}


def summarize(root: pathlib.Path) -> dict:
    """summary.json's content: per-run rows, the paired seeds and ``paired_stats`` on their curves."""
    runs = load(root)
    done = {e: {s: r for s, r in runs[e].items() if r["steps"] >= 20 and 0 in r["evals"] and 20 in r["evals"]}
            for e in ENGINES}
    seeds = sorted(set(done["jax"]) & set(done["vllm"]))
    steps = sorted(set.intersection(*(set(done[e][s]["evals"]) for e in ENGINES for s in seeds))) if seeds else []
    curves = {e: [[done[e][s]["evals"][t] for t in steps] for s in seeds] for e in ENGINES}   # [S, E]
    rows = [{"engine": e, "seed": s, **{k: v for k, v in r.items() if k != "evals"},
             "evals": {str(t): p for t, p in sorted(r["evals"].items())}, "paired": s in seeds}
            for e in ENGINES for s, r in sorted(runs[e].items())]
    out = {"seeds": seeds, "eval_steps": steps, "runs": rows, "curves": curves}
    if seeds:
        st = paired_stats(curves["jax"], curves["vllm"], first=steps.index(0), last=steps.index(20))
        out.update(stats=st, verdict=verdict(st))
    out["means"] = {e: {k: (float(np.mean(v)) if (v := [r[k] for r in rows if r["engine"] == e and r["paired"]
                                                         and r[k] is not None]) else None)
                        for k in (*MISMATCH, "tokens_per_s", "time_sample_mean")} for e in ENGINES}
    return out


def figure(summary: dict, path: pathlib.Path) -> None:
    """Held-out pass@1 vs step: one thin line per seed and the seed mean (thick), both engines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = summary["eval_steps"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for e, color in zip(ENGINES, ("tab:blue", "tab:orange")):
        y = np.asarray(summary["curves"][e], float)   # [S, E]
        for row in y:
            ax.plot(steps, row, color=color, lw=0.8, alpha=0.45)
        ax.plot(steps, y.mean(0), color=color, lw=2.5, marker="o", label=f"{e} (mean of {len(y)} seeds)")
    ax.set_xlabel("RL step")
    ax.set_ylabel("held-out pass@1 (128 problems x 2 samples)")
    ax.set_title("ps_ada on arith: jax vs vLLM rollout engine, paired seeds")
    ax.set_xticks(steps)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _ci(c: dict, fmt: str = "+.3f") -> str:
    lo = "" if math.isnan(c["lo"]) else f" [{c['lo']:{fmt}}, {c['hi']:{fmt}}]"
    return f"{c['value']:{fmt}}{lo}"


def markdown(summary: dict) -> str:
    """The page's tables: held-out pass@1 per run and eval step, the paired statistics with their CIs,
    and the per-engine means of the mismatch, throughput and weight-push time (over the paired runs)."""
    steps = summary["eval_steps"]
    lines = ["| run | " + " | ".join(f"step {t}" for t in steps) + " | gain |", "|---" * (len(steps) + 2) + "|"]
    for e in ENGINES:
        for s, row in zip(summary["seeds"], summary["curves"][e]):
            lines.append(f"| {e}-s{s} | " + " | ".join(f"{v:.3f}" for v in row) + f" | {row[-1] - row[0]:+.3f} |")
    st = summary.get("stats")
    if st:
        n = st["n_pairs"]
        lines += ["", f"| {n} paired seeds, mean [95% CI] | gain step 0 -> 20 | final pass@1 |", "|---|---|---|"]
        for e in ENGINES:
            lines.append(f"| {e} | {_ci(st['gain'][e])} | {_ci(st['final'][e], '.3f')} |")
        lines.append(f"| vLLM - jax (paired) | {_ci(st['diff_gain'])} | {_ci(st['diff_final'])} |")
    m = summary["means"]

    def f(v, fmt):
        return "n/a" if v is None else f"{v:{fmt}}"

    lines += ["", "| engine (mean over runs) | mean abs delta logp | KL k1 | KL k3 | tokens/s (steps 1-19) "
              "| sampling s/step | weight push s |", "|---|---|---|---|---|---|---|"]
    for e in ENGINES:
        lines.append(f"| {e} | {f(m[e]['rollout/logp_abs_diff'], '.2e')} | {f(m[e]['rollout/kl_k1'], '.1e')} | "
                     f"{f(m[e]['rollout/kl_k3'], '.1e')} | {f(m[e]['tokens_per_s'], '.0f')} | "
                     f"{f(m[e]['time_sample_mean'], '.2f')} | {f(m[e]['rollout/sync_s'], '.3f')} |")
    return "\n".join(lines) + "\n"


@cli.command("experiments.engines_paired")
def main(argv=None) -> None:
    p = cli.ArgumentParser(prog="python -m experiments.engines_paired", description=__doc__.split("\n")[0])
    p.add_argument("root", nargs="?", default=str(pathlib.Path(__file__).resolve().parents[1] / "results/engines/paired"))
    args = p.parse_args(argv)
    root = pathlib.Path(args.root)
    summary = summarize(root)
    (root / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    if summary["seeds"]:
        figure(summary, root / "pass_at_1.png")
    st = summary.get("stats")
    print(f"pairs: {summary['seeds']}")
    if st:
        for k in ("gain", "final"):
            for e in ENGINES:
                c = st[k][e]
                print(f"{k:5s} {e:4s} {c['value']:+.4f} [{c['lo']:+.4f}, {c['hi']:+.4f}]")
            d = st[f"diff_{k}"]
            print(f"{k:5s} vllm-jax {d['value']:+.4f} [{d['lo']:+.4f}, {d['hi']:+.4f}]")
        print(json.dumps(summary["verdict"]))
    print(markdown(summary))


if __name__ == "__main__":
    main()
