"""Repair agent task: baseline vs ps_ada, and the step time of replay vs regenerate (issue #6, item 7).

    python benchmarks/bench_agent_replay.py --sft-steps 400 --steps 30 --seeds 0 1 2 --out /tmp/agent
    python benchmarks/bench_agent_replay.py --timing-only --out /tmp/agent     # replay vs regenerate

One process: the supervised warm start is trained once (cached in ``--out/base.npz``) and every
run starts from it; all runs share one jit cache, so compile time is paid once (it is reported
separately, from the first step). Per run: held-out pass@1 every ``--eval-every`` steps, per-step
wall-clock, tokens generated/replayed and environment executions. Summary (``summary.json``):
per method, the mean over seeds of the final pass@1; for ps_ada, the steps and wall-clock at
which each seed first reaches the baseline's final mean pass@1.

Replay vs regenerate: from the same params and the same trainer state, ``collect`` (sampling +
re-roll, no update) runs ``--timing-reps`` times per mode after a warm-up, with the re-roll
forced on every skewed group (``ps_fix``). Reported: median step (collect) time per mode, the
re-roll part alone, and their ratios, plus tokens forced/replayed. Both modes rebuild identical
states and inputs (``tests/tasks/test_repair.py``).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from prs.core import prefix as ps
from prs.models.qwen3 import ModelConfig, init_params
from prs.tasks.registry import make_task
from prs.rl.trainer import RLConfig, Trainer, supervised_warm_start
from prs.rl.config import EvalConfig, OptimConfig


def model_cfg(task) -> ModelConfig:
    # conf/model/repair_tiny.yaml
    return ModelConfig.preset("tiny", vocab_size=task.vocab_size, d_model=64, n_layers=2, n_heads=4,
                              n_kv_heads=2, head_dim=16, d_ff=128)


def base_params(task, mc, out: pathlib.Path, *, steps: int, batch: int, lr: float):
    path = out / f"base-{steps}-{batch}.npz"
    if path.exists():
        flat = np.load(path)
        leaves, tree = jax.tree.flatten(jax.eval_shape(lambda k: init_params(mc, k), jax.random.PRNGKey(0)))
        return jax.tree.unflatten(tree, [jnp.asarray(flat[f"a{i}"]) for i in range(len(leaves))])
    t0 = time.perf_counter()
    params = supervised_warm_start(task, mc, steps=steps, batch=batch, lr=lr, seed=0, log_every=100,
                                   log=lambda s: print(s, flush=True))
    print(f"[sft] {time.perf_counter() - t0:.0f}s", flush=True)
    np.savez(path, **{f"a{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(params))})
    return params


def run_one(task, mc, params, method: str, seed: int, args) -> dict:
    rl = RLConfig(tasks_per_step=args.tasks, group_size=args.n, eval=EvalConfig(count=args.eval_count, samples=2), optim=OptimConfig(lr=args.lr))
    tr = Trainer(task, mc, rl, ps.PrefixConfig(mode=method, n=args.n), seed=seed)
    state = tr.init_state(params)
    evals, steps = [], []
    t_run = 0.0
    for s in range(args.steps + 1):
        if s % args.eval_every == 0 or s == args.steps:
            evals.append({"step": s, "time_s": t_run, **tr.evaluate(state.params, s)})
            print(f"  {method} s{seed} step {s} eval {evals[-1]['eval/pass_at_1']:.3f} t={t_run:.1f}s", flush=True)
        if s == args.steps:
            break
        t0 = time.perf_counter()
        state, m = tr.step(state)
        dt = time.perf_counter() - t0
        t_run += dt
        steps.append({k: m[k] for k in ("pass_rate", "pass_rate_train", "groups_rerolled", "groups_kept",
                                        "tokens_generated", "tokens_replayed", "env_steps")} | {"time_s": dt})
    return {"method": method, "seed": seed, "evals": evals, "steps": steps}


def _timed_reroll(tr, box):
    orig = tr.rollouts.reroll

    def timed(*a, **kw):
        t = time.perf_counter()
        r = orig(*a, **kw)
        jax.block_until_ready(r.tokens)
        box["t"] = time.perf_counter() - t
        return r

    tr.rollouts.reroll = timed


def time_modes(task_name, params_task_kw, mc, params, args) -> dict:
    """Median ``collect`` (sample + re-roll) and re-roll time per mode over the same steps; every
    step is first run once per mode to compile its shapes, then measured alternating the modes."""
    modes = ("replay", "regenerate")
    trs, box = {}, {}
    for mode in modes:
        task = make_task(task_name, **{**params_task_kw, "replay": mode})
        rl = RLConfig(tasks_per_step=args.tasks, group_size=args.n, eval=EvalConfig(count=8, samples=2))
        trs[mode] = Trainer(task, mc, rl, ps.PrefixConfig(mode="ps_fix", n=args.n), seed=123)
        _timed_reroll(trs[mode], box)
    state0 = trs["replay"].init_state(params)
    rec = {m: {"collect_s": [], "reroll_s": [], "tokens_forced": 0, "tokens_replayed": 0, "tokens_generated": 0}
           for m in modes}
    for phase in ("warm-up", "measure"):
        for rep in range(args.timing_reps):
            state = state0._replace(step=jnp.asarray(rep, jnp.int32))   # same (seed, step): same problems
            for mode in modes:
                tr = trs[mode]
                tr.rollouts.reset_costs()
                box.clear()
                t0 = time.perf_counter()
                c = tr.collect(state)
                batch, m = c.batch, c.metrics
                jax.block_until_ready(batch.tokens)
                dt = time.perf_counter() - t0
                if phase == "warm-up":
                    continue
                rec[mode]["collect_s"].append(dt)
                rec[mode]["reroll_s"].append(box.get("t", 0.0))
                for k in ("tokens_forced", "tokens_replayed", "tokens_generated"):
                    rec[mode][k] += tr.rollouts.costs[k]
    res = {}
    for mode in modes:
        r = rec[mode]
        res[mode] = {"collect_median_s": float(np.median(r["collect_s"])), "reroll_median_s": float(np.median(r["reroll_s"])),
                     **{k: r[k] for k in ("tokens_forced", "tokens_replayed", "tokens_generated")}, "n": len(r["collect_s"])}
    res["ratio_collect_regenerate_over_replay"] = res["regenerate"]["collect_median_s"] / res["replay"]["collect_median_s"]
    res["ratio_reroll_regenerate_over_replay"] = res["regenerate"]["reroll_median_s"] / res["replay"]["reroll_median_s"]
    return res


def time_reroll_scaling(args) -> dict:
    """Re-roll time alone, replay vs regenerate, on fixed demonstration sources (half-way cuts) for
    models of growing size (random init: only the cost matters here)."""
    from prs.tasks.agent_rollouts import action_spans
    from prs.rl.episodes import Episodes

    out = {}
    for name, kw in (("tiny d64 L2", dict(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128)),
                     ("d256 L4", dict(d_model=256, n_layers=4, n_heads=8, n_kv_heads=4, head_dim=32, d_ff=768)),
                     ("d512 L6", dict(d_model=512, n_layers=6, n_heads=8, n_kv_heads=4, head_dim=64, d_ff=1536))):
        res = {}
        for mode in ("replay", "regenerate"):
            task = make_task("repair", replay=mode)
            mc = ModelConfig.preset("tiny", vocab_size=task.vocab_size, **kw)
            params = init_params(mc, jax.random.PRNGKey(0))
            tr = Trainer(task, mc, RLConfig(tasks_per_step=args.tasks, group_size=args.n, eval=EvalConfig(count=8)),
                         ps.PrefixConfig(mode="ps_fix", n=args.n), seed=0)
            probs = task.train_problems(seed=5, step=0, count=args.tasks)
            tok, mask = task.demonstrations(probs, seed=1)
            turns = np.array([len(action_spans(m)) for m in mask], np.int32)
            z = jnp.zeros((tok.shape[0],), jnp.int32)
            src = Episodes(jnp.asarray(tok), jnp.zeros(tok.shape, jnp.int32), jnp.asarray(tok != 0), jnp.asarray(mask),
                           jnp.zeros(tok.shape, jnp.float32), z.astype(jnp.float32), jnp.asarray(turns), z, z,
                           jnp.zeros(tok.shape, jnp.float32), jnp.zeros(z.shape, bool))
            cut = np.maximum(turns - 1, 1)
            ts = []
            for rep in range(args.timing_reps + 1):
                t0 = time.perf_counter()
                ep = tr.rollouts.reroll(params, probs, src, cut, jax.random.PRNGKey(0), group_size=args.n)
                jax.block_until_ready(ep.tokens)
                ts.append(time.perf_counter() - t0)
            res[mode] = float(np.median(ts[1:]))
        res["ratio_regenerate_over_replay"] = res["regenerate"] / res["replay"]
        out[name] = res
        print(name, res, flush=True)
    return out


def summarise(runs: list[dict]) -> dict:
    by = {}
    for r in runs:
        by.setdefault(r["method"], []).append(r)
    out = {}
    for method, rs in by.items():
        finals = [r["evals"][-1]["eval/pass_at_1"] for r in rs]
        out[method] = {"initial": float(np.mean([r["evals"][0]["eval/pass_at_1"] for r in rs])),
                       "final_mean": float(np.mean(finals)), "final_per_seed": finals,
                       "step_time_mean_s": float(np.mean([s["time_s"] for r in rs for s in r["steps"][1:]])),
                       "first_step_s (compile)": float(np.mean([r["steps"][0]["time_s"] for r in rs])),
                       "tokens_generated_per_step": float(np.mean([s["tokens_generated"] for r in rs for s in r["steps"]])),
                       "tokens_replayed_per_step": float(np.mean([s["tokens_replayed"] for r in rs for s in r["steps"]])),
                       "env_steps_per_step": float(np.mean([s["env_steps"] for r in rs for s in r["steps"]]))}
    if "baseline" in out:
        target = out["baseline"]["final_mean"]
        for method, rs in by.items():
            hits = []
            for r in rs:
                hit = next((e for e in r["evals"] if e["eval/pass_at_1"] >= target), None)
                hits.append(None if hit is None else {"step": hit["step"], "time_s": hit["time_s"]})
            out[method]["reach_baseline_final"] = {"target": target, "per_seed": hits}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/agent_bench")
    ap.add_argument("--sft-steps", type=int, default=400)
    ap.add_argument("--sft-batch", type=int, default=64)
    ap.add_argument("--sft-lr", type=float, default=3e-3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--eval-count", type=int, default=64)
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=["baseline", "ps_ada"])
    ap.add_argument("--timing-reps", type=int, default=3)
    ap.add_argument("--timing-only", action="store_true")
    ap.add_argument("--no-timing", action="store_true")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    task = make_task("repair")
    mc = model_cfg(task)
    params = base_params(task, mc, out, steps=args.sft_steps, batch=args.sft_batch, lr=args.sft_lr)
    result = {"args": vars(args)}
    if not args.no_timing:
        result["replay_vs_regenerate"] = time_modes("repair", {}, mc, params, args)
        print(json.dumps(result["replay_vs_regenerate"], indent=1), flush=True)
        result["reroll_scaling"] = time_reroll_scaling(args)
        (out / "timing.json").write_text(json.dumps({k: result[k] for k in ("replay_vs_regenerate", "reroll_scaling")},
                                                    indent=1))
    if not args.timing_only:
        runs = []
        for seed in args.seeds:
            for method in args.methods:
                runs.append(run_one(task, mc, params, method, seed, args))
                (out / "runs.json").write_text(json.dumps(runs))
        result["summary"] = summarise(runs)
        print(json.dumps(result["summary"], indent=1), flush=True)
    (out / "summary.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
