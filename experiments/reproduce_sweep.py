"""Statistical reproduction of a committed sweep: re-run K seeds of each arm and ask whether the
arm-level statistics land where the committed seeds say they should.

    python -m experiments.reproduce --sweep results/regime/runs --variant regime_early --seeds 2 \
        [--arms baseline,ps_ada] [--out runs/reproduce_sweep]

Exact replay is a promise of one machine (``experiments.reproduce``); on another machine the runs
drift apart within a few steps, and what can reproduce is the distribution the seeds are drawn from.
For every arm the re-run seeds 0..K-1 are trained from their recorded configs (``summary.json``;
warm starts rebuilt here under ``OUT/base``, shared by the arms as in the sweep). Resumable: a
re-run with a ``summary.json`` is reused, an unfinished one resumes from its checkpoint.

Statistics per arm (S committed seeds, the re-run's K seeds):

* **final pass@1** (the last evaluation) and **AUC** (mean held-out pass@1 over the evaluation
  steps, trapezoid rule, ``prs.analysis.gap.auc``);
* the **headline speed-up** of the arm over the baseline: mean steps to the committed baseline's 80%
  gap level (``gap.gap_levels`` on the committed baseline, crossings by ``gap.crossing_steps``; a
  curve that never reaches it counts at its last evaluation step, as on the page) of the baseline's
  seeds over the arm's, seed-paired.

Two intervals from the committed seeds, both percentile bootstraps (2,000 resamples, seed 0): the
committed **95% CI of the S-seed mean** (what the page prints), and the **95% prediction interval of
a K-seed mean** (K of the committed seeds drawn with replacement: the spread a K-seed re-run must
show by chance alone). A re-run "reproduces" a statistic when its K-seed value lies in the
prediction interval; lying in the (narrower) committed CI is reported too, but K < S seeds are not
expected to land there every time. Writes ``OUT/reproduction.json`` and ``OUT/reproduction.md``.
"""
from __future__ import annotations

import json
import pathlib
import re
from typing import Any

import numpy as np

from prs.analysis.runs import read_records

_NAME = re.compile(r"^(?P<variant>[^-]+)-(?P<arm>.+)-s(?P<seed>\d+)$")
N_BOOT = 2000


def committed_runs(sweep_dir: pathlib.Path, variant: str) -> dict[str, dict[int, pathlib.Path]]:
    """{arm: {seed: run dir}} of ``variant`` in ``sweep_dir`` (names ``<variant>-<arm>-s<seed>``)."""
    out: dict[str, dict[int, pathlib.Path]] = {}
    for d in sorted(p for p in sweep_dir.iterdir() if (p / "summary.json").exists()):
        m = _NAME.match(d.name)
        if m and m["variant"] == variant:
            out.setdefault(m["arm"], {})[int(m["seed"])] = d
    return out


def curve(records: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """(eval steps [E], held-out pass@1 [E]) of one run's records."""
    ev = sorted((r for r in records if r.get("kind") == "eval"), key=lambda r: r["step"])
    return np.array([r["step"] for r in ev], float), np.array([r["eval/pass_at_1"] for r in ev], float)


def _curves(dirs: list[pathlib.Path]) -> tuple[np.ndarray, np.ndarray]:
    cs = [curve(read_records(d)) for d in dirs]
    steps = cs[0][0]
    for d, (s, _) in zip(dirs, cs):
        if not np.array_equal(s, steps):
            raise ValueError(f"{d}: evaluation steps {s.tolist()} differ from the arm's {steps.tolist()}")
    return steps, np.stack([y for _, y in cs])                        # [E], [S, E]


def rerun_into(run_dir: pathlib.Path, out: pathlib.Path, base_dir: pathlib.Path) -> pathlib.Path:
    """Trains the run recorded in ``run_dir`` into ``out`` (resuming, or reusing a finished one)."""
    from omegaconf import OmegaConf

    from experiments.config import upgrade, validate
    from experiments.train import build
    from prs.rl.runner import run

    if (out / "summary.json").exists():
        return out
    config = upgrade(json.loads((run_dir / "summary.json").read_text())["config"])  # earlier layouts: today's
    config["sft"] = {**config["sft"], "base_dir": str(base_dir)}
    config["logging"] = {**config["logging"], "wandb_mode": "disabled", "progress": False}
    task, model_cfg, rl, prefix, run_cfg = build(validate(OmegaConf.create(config)))
    run(task, model_cfg, rl, prefix, run_cfg, out, config_dict=config, log=lambda *a: None)
    return out


def _steps_to(steps, y, level) -> np.ndarray:
    """Steps to ``level`` per row, a never-reaching row at its last evaluation step (as on the page)."""
    from prs.analysis.gap import crossing_steps

    x, cens = crossing_steps(steps, y, level)
    return np.where(cens, steps[-1], x)


def _intervals(values: np.ndarray, k: int, rng: np.random.Generator) -> dict[str, Any]:
    """Committed mean, 95% CI of the S-seed mean, 95% prediction interval of a K-seed mean."""
    s = values.size
    full = values[rng.integers(0, s, (N_BOOT, s))].mean(1)
    few = values[rng.integers(0, s, (N_BOOT, k))].mean(1)
    return {"mean": float(values.mean()), "ci": [float(v) for v in np.percentile(full, [2.5, 97.5])],
            "pi_k": [float(v) for v in np.percentile(few, [2.5, 97.5])]}


def _ratio_intervals(base: np.ndarray, meth: np.ndarray, k: int, rng: np.random.Generator) -> dict[str, Any]:
    """Paired ratio of means mean(base)/mean(meth): value, 95% CI (S pairs), 95% PI of K pairs."""
    s = base.size
    out = {"mean": float(base.mean() / meth.mean())}
    for key, n in (("ci", s), ("pi_k", k)):
        idx = rng.integers(0, s, (N_BOOT, n))
        r = base[idx].mean(1) / meth[idx].mean(1)
        out[key] = [float(v) for v in np.percentile(r[np.isfinite(r)], [2.5, 97.5])]
    return out


def _inside(x: float, iv) -> bool:
    return bool(iv[0] <= x <= iv[1])


def compare(committed: dict[str, dict[int, pathlib.Path]], reruns: dict[str, dict[int, pathlib.Path]], *,
            baseline: str = "baseline") -> dict[str, Any]:
    """The statistics of the module docstring for every arm of ``reruns`` (same seeds in every arm)."""
    from prs.analysis.gap import auc, gap_levels

    rng = np.random.default_rng(0)
    base_seeds = sorted(committed[baseline])
    steps, yb = _curves([committed[baseline][s] for s in base_seeds])
    level = gap_levels(steps, yb)["levels"][0.8]
    horizon = float(steps[-1])
    res: dict[str, Any] = {"level_0.8": level, "horizon": horizon, "arms": {}}
    k = min(len(v) for v in reruns.values())
    rerun_seeds = sorted(reruns[baseline])[:k] if baseline in reruns else []
    for arm, seeds_dirs in reruns.items():
        seeds = sorted(seeds_dirs)[:k]
        cs = sorted(set(committed[arm]) & set(base_seeds))
        st, yc = _curves([committed[arm][s] for s in cs])
        sr, yr = _curves([seeds_dirs[s] for s in seeds])
        if not np.array_equal(st, sr):
            raise ValueError(f"{arm}: re-run evaluation steps {sr.tolist()} differ from the committed {st.tolist()}")
        row: dict[str, Any] = {"committed_seeds": cs, "rerun_seeds": seeds}
        for name, c_val, r_val in (("final", yc[:, -1], yr[:, -1]),
                                   ("auc", auc(st, yc, horizon=horizon), auc(sr, yr, horizon=horizon))):
            iv = _intervals(c_val, k, rng)
            row[name] = {**iv, "rerun": float(r_val.mean()), "rerun_seeds_values": r_val.tolist(),
                         "in_ci": _inside(r_val.mean(), iv["ci"]), "in_pi_k": _inside(r_val.mean(), iv["pi_k"])}
        if arm != baseline and rerun_seeds and set(seeds) <= set(rerun_seeds):
            _, ybc = _curves([committed[baseline][s] for s in cs])
            _, ybr = _curves([reruns[baseline][s] for s in seeds])
            iv = _ratio_intervals(_steps_to(st, ybc, level), _steps_to(st, yc, level), k, rng)
            sp = float(_steps_to(sr, ybr, level).mean() / _steps_to(sr, yr, level).mean())
            row["speedup_0.8"] = {**iv, "rerun": sp, "in_ci": _inside(sp, iv["ci"]), "in_pi_k": _inside(sp, iv["pi_k"])}
        res["arms"][arm] = row
    return res


def markdown(res: dict[str, Any], *, variant: str, k: int, fingerprint: dict | None = None) -> str:
    """The result as a markdown table (one row per arm and statistic)."""
    lines = [f"### Statistical reproduction of `{variant}` ({k} re-run seeds per arm)", "",
             f"Baseline 80% gap level {res['level_0.8']:.3f}; horizon step {res['horizon']:.0f}."
             + (f" Re-run on {fingerprint.get('cpu_model')} ({', '.join(i for i in fingerprint.get('isa', []) if i.startswith('avx'))})."
                if fingerprint else ""), "",
             "| arm | statistic | committed mean [95% CI] | 95% PI of a K-seed mean | re-run (K seeds) | in PI | in CI |",
             "|---|---|---|---|---|---|---|"]
    n_pi = n_all = 0
    for arm, row in res["arms"].items():
        for stat in ("final", "auc", "speedup_0.8"):
            if stat not in row:
                continue
            d = row[stat]
            n_all += 1
            n_pi += d["in_pi_k"]
            lines.append(f"| {arm} | {stat} | {d['mean']:.3f} [{d['ci'][0]:.3f}, {d['ci'][1]:.3f}] | "
                         f"[{d['pi_k'][0]:.3f}, {d['pi_k'][1]:.3f}] | {d['rerun']:.3f} | "
                         f"{'yes' if d['in_pi_k'] else '**no**'} | {'yes' if d['in_ci'] else 'no'} |")
    lines += ["", f"{n_pi} of {n_all} statistics inside their K-seed prediction interval "
                  f"(95% each: about {0.05 * n_all:.1f} misses expected by chance)."]
    return "\n".join(lines) + "\n"


def main(sweep_dir: pathlib.Path, *, seeds: int, variant: str | None = None, arms: str | None = None,
         out: str | None = None, baseline: str = "baseline") -> int:
    from prs.rl.provenance import machine_fingerprint

    variants = sorted({m["variant"] for d in sweep_dir.iterdir() if (m := _NAME.match(d.name))})
    if variant is None:
        if len(variants) != 1:
            raise ValueError(f"--variant: {sweep_dir} holds {variants}; choose one")
        variant = variants[0]
    committed = committed_runs(sweep_dir, variant)
    if not committed:
        raise ValueError(f"--variant={variant!r}: no runs of it in {sweep_dir}; choose from {variants}")
    chosen = list(committed) if arms is None else [a.strip() for a in arms.split(",") if a.strip()]
    bad = [a for a in chosen if a not in committed]
    if bad or baseline not in committed:
        raise ValueError(f"--arms: {bad or [baseline]} not in the sweep; choose from {sorted(committed)}")
    if baseline not in chosen:
        chosen = [baseline, *chosen]
    if not 1 <= seeds <= min(len(committed[a]) for a in chosen):
        raise ValueError(f"--seeds={seeds}: choose 1..{min(len(committed[a]) for a in chosen)} (committed seeds per arm)")
    out_dir = pathlib.Path(out or f"runs/reproduce_sweep/{variant}")
    reruns: dict[str, dict[int, pathlib.Path]] = {}
    total = len(chosen) * seeds
    i = 0
    for seed in sorted(committed[baseline])[:seeds]:
        for arm in chosen:
            i += 1
            src = committed[arm][seed]
            print(f"[{i}/{total}] {src.name}", flush=True)
            reruns.setdefault(arm, {})[seed] = rerun_into(src, out_dir / src.name, out_dir / "base")
    res = compare(committed, reruns, baseline=baseline)
    fp = machine_fingerprint()
    res.update(variant=variant, seeds=seeds, sweep=str(sweep_dir), machine=fp)
    (out_dir / "reproduction.json").write_text(json.dumps(res, indent=1))
    md = markdown(res, variant=variant, k=seeds, fingerprint=fp)
    (out_dir / "reproduction.md").write_text(md)
    print(md)
    return 0
