"""Measures the warm start of the partial-pass trap task (issue #18): for each target p_A (the
demonstrator's ``demo_root_cause_accuracy``) it builds the preset's supervised warm start (cached
under ``sft.base_dir``, the same cache the training presets use, so a later sweep reuses it) and
evaluates it on the held-out problems: root-cause attempt share, measured p_A = P(root_cause |
root attempt) with a Wilson 95% interval, hack rate, true resolution rate, mean fraction reward.

    python -m experiments.trap_calibrate --p 0.1 0.3 0.5 --out runs/trap_calibrate.json -- \\
        [hydra overrides, e.g. sft.steps=600 eval.count=256]

The theory's toy (``theory.partial_pass``) beside each row: E[R|A] = p_A + (1 − p_A)·0.5 with the
*measured* p_A against E[R|B] = 0.7 (break-even 0.4).
"""
from __future__ import annotations

import json
import math
import pathlib
import time

from experiments import cli


def wilson(k: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k/n (nan, nan when n = 0)."""
    if n <= 0:
        return float("nan"), float("nan")
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return mid - half, mid + half


@cli.command("experiments.trap_calibrate")
def main(argv=None) -> list[dict]:
    ap = cli.ArgumentParser(prog="python -m experiments.trap_calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("--p", type=float, nargs="+", default=[0.1, 0.3, 0.5])
    ap.add_argument("--preset", default="trap_fraction")
    ap.add_argument("--out", default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build
    from prs.core import prefix as ps
    from prs.rl.runner import base_params
    from prs.rl.trainer import Trainer

    conf = str(pathlib.Path(__file__).resolve().parent.parent / "conf")
    rows = []
    for p in args.p:
        with initialize_config_dir(config_dir=conf, version_base=None):
            cfg = validate(compose("config", overrides=[f"+experiment={args.preset}",
                                                        f"task.params.demo_root_cause_accuracy={p}",
                                                        *args.overrides]))
        task, model_cfg, rl, prefix, run_cfg = build(cfg)
        t0 = time.perf_counter()
        params = base_params(task, model_cfg, run_cfg, pathlib.Path(run_cfg.base_dir), log=print)
        t_sft = time.perf_counter() - t0
        tr = Trainer(task, model_cfg, rl, ps.PrefixConfig(mode="baseline", n=rl.group_size), seed=0)
        t1 = time.perf_counter()
        ev = tr.evaluate(params, 0)
        n = rl.eval.count * rl.eval.samples
        att = ev["eval/root_attempt_rate"] * n
        lo, hi = wilson(ev["eval/p_root"] * att, att)
        pa = ev["eval/p_root"]
        row = {"target_p_A": p, "episodes": n, "root_attempts": int(round(att)), "measured_p_A": pa,
               "p_A_ci95": [lo, hi], "root_attempt_rate": ev["eval/root_attempt_rate"],
               "hack_rate": ev["eval/hack_rate"], "true_resolution_rate": ev["eval/true_resolution_rate"],
               "mean_fraction_reward": ev["eval/mean_fraction_reward"],
               "theory_E_R_root_at_measured_p_A": pa + (1 - pa) * 0.5 if pa == pa else None,
               "theory_E_R_surface": 0.7, "sft_steps": run_cfg.sft_steps, "sft_batch": run_cfg.sft_batch,
               "time_sft_s": t_sft, "time_eval_s": time.perf_counter() - t1}
        rows.append(row)
        print(json.dumps(row))
    print(f"{'target p_A':>10} {'measured p_A':>12} {'95% CI':>15} {'attempts':>8} {'hack':>6} {'resolved':>8}")
    for r in rows:
        print(f"{r['target_p_A']:>10.2f} {r['measured_p_A']:>12.3f} "
              f"[{r['p_A_ci95'][0]:.3f}, {r['p_A_ci95'][1]:.3f}] {r['root_attempts']:>8d} "
              f"{r['hack_rate']:>6.3f} {r['true_resolution_rate']:>8.3f}")
    if args.out:
        pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.out).write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
