"""Per-module calibration of a mathds warm start (issue 48, results/mathds/README.md "Calibration").

    python scripts/mathds_calibration.py --out results/mathds/calibration/w0_sft1500.json \
        +experiment=mathds sft.seed=0 sft.base_dir=$PWD/runs/mathds/base

Builds (or loads from the ``sft.base_dir`` cache, the key ``experiments.train`` uses) the warm start the
overrides name, samples N = ``algo.group_size`` rollouts of every problem of the task's RL pool with the
step-0 policy (the trainer's sampling, step-s keys), and evaluates it once as the run's step-0 evaluation
does (``Trainer.evaluate``: interpolate and extrapolate pass@1, per module). Writes one JSON: the k
histogram of the pool, per module (counts of k = 0..N), the evaluation's metrics, the overrides and the
provenance (commit, tree state, machine). Prints the per-module table.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the JSON to write (refused if it exists)")
    ap.add_argument("overrides", nargs="+", help="Hydra overrides, as for experiments.train (+experiment=mathds ...)")
    args = ap.parse_args(argv)
    out = pathlib.Path(args.out)
    if out.exists():
        ap.error(f"--out {out} exists; choose a new name (records are never overwritten)")
    sys.path.insert(0, str(ROOT))
    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build
    from prs.core import prefix as ps
    from prs.rl.provenance import code_state
    from prs.rl.runner import base_params
    from prs.rl.trainer import Trainer

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = validate(compose("config", overrides=args.overrides))
    task, model_cfg, rl, _, run_cfg = build(cfg)
    if task.name != "mathds":
        ap.error(f"the overrides build task {task.name!r}; this script calibrates task=mathds (+experiment=mathds)")
    provenance = code_state()
    params = base_params(task, model_cfg, run_cfg, pathlib.Path(run_cfg.base_dir))
    n, b = rl.group_size, rl.tasks_per_step
    tr = Trainer(task, model_cfg, rl, ps.PrefixConfig(mode="baseline", n=n), seed=run_cfg.seed)
    sp = tr.sampling_params(params)
    ids = task.pool_ids
    ks, modules = [], []
    for s, start in enumerate(range(0, ids.size, b)):  # over calls of B problems, not problems
        probs = task.problems(ids[start:start + b])
        ep = tr.rollouts.rollout(sp, probs, tr.step_keys(s)[0], group_size=n)
        ks.append((np.asarray(ep.rewards).reshape(-1, n) >= 1.0).sum(axis=1))
        modules += [task.rows[int(i)]["module"] for i in ids[start:start + b]]
    k, modules = np.concatenate(ks), np.asarray(modules)
    per_module = {m: np.bincount(k[modules == m], minlength=n + 1).tolist() for m in sorted(set(modules))}
    ev = tr.evaluate(params, 0)
    hist = np.bincount(k, minlength=n + 1)
    record = {
        "overrides": args.overrides, "task": repr(task), "model": repr(model_cfg),
        "params": int(sum(np.size(x) for x in __import__("jax").tree.leaves(params))),
        "n": n, "pool_hist": hist.tolist(), "pool_hist_by_module": per_module,
        "share_all_same": float((hist[0] + hist[n]) / hist.sum()), "share_mixed": float(hist[1:n].sum() / hist.sum()),
        "eval": {key: v for key, v in ev.items() if key.startswith(("eval/interpolate", "eval/extrapolate"))},
        "provenance": provenance,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    print(f"{'module':32s} pool p   k=0   k=N  mixed  held-out pass@1")
    for m, c in per_module.items():
        c = np.asarray(c)
        print(f"{m:32s} {np.dot(np.arange(n + 1), c) / (n * c.sum()):.3f} {c[0] / c.sum():5.2f} {c[n] / c.sum():5.2f} "
              f"{c[1:n].sum() / c.sum():5.2f}  {ev.get(f'eval/interpolate/{m}', float('nan')):.3f}")
    print(f"pool: all-same {record['share_all_same']:.3f}, mixed {record['share_mixed']:.3f}; interpolate pass@1 "
          f"{ev['eval/interpolate/pass_at_1']:.3f}, extrapolate {ev['eval/extrapolate/pass_at_1']:.3f}; wrote {out}")
    return record


if __name__ == "__main__":
    main()
