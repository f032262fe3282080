"""The step-0 pass-count histogram of a run's warm start (issue #16: "tasks in the regime").

Builds (or loads from the ``sft.base_dir`` cache, with the same key as ``experiments.train``) the
warm start a run with these Hydra overrides would start from, samples N = ``algo.group_size``
rollouts for each of ``--problems`` training problems, drawn exactly as the run's first steps draw
them (``task.train_problems(seed, step=s, count=algo.tasks_per_step)`` for ``s = 0, 1, …``, with
the step-0 policy and the trainer's step-``s`` sampling key), and reports the histogram of
``k`` = successes out of N over ``0 … N``, the share of groups with ``k ∈ {1, 2}`` (the hard
mixed groups Prefix Sampling steers), the base pass rate on those training problems, and the
held-out pass@1 the run's step-0 evaluation would log.

    python -m experiments.k_histogram +experiment=regime_late --problems 256 --out results/regime/late
    python -m experiments.k_histogram task=arith task.params.max_terms=5 sft.steps=100 --problems 32

``--out PATH`` writes ``PATH.json`` and ``PATH.md``; without it only stdout.
"""
from __future__ import annotations

import json
import pathlib
import time

import numpy as np

from experiments import cli


def histogram(k: np.ndarray, n: int) -> dict:
    """Counts and shares of ``k`` (successes of N, [G] ints) over ``0 … n``, and the hard-mixed share."""
    k = np.asarray(k)
    if k.ndim != 1 or k.size == 0 or k.min() < 0 or k.max() > n:
        raise ValueError(f"k must be a non-empty [G] array of ints in [0, {n}], got shape {k.shape}")
    counts = np.bincount(k, minlength=n + 1)
    share = counts / k.size
    return {"n": n, "groups": int(k.size), "counts": counts.tolist(), "shares": share.tolist(),
            "share_k1_k2": float(share[1] + (share[2] if n >= 2 else 0.0)),
            "share_mixed": float(share[1:n].sum()), "pass_rate": float(k.sum() / (n * k.size))}


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def markdown(rep: dict) -> str:
    h = rep["histogram"]
    n = h["n"]
    head = "| " + " | ".join(f"k={i}" for i in range(n + 1)) + " |"
    rule = "|" + "---|" * (n + 1)
    row = "| " + " | ".join(f"{s:.3f}" for s in h["shares"]) + " |"
    return "\n".join([
        f"### {rep['name']}",
        "",
        f"overrides: `{' '.join(rep['overrides']) or '(none)'}`; {h['groups']} training problems x N={n} "
        f"rollouts of the step-0 policy",
        "",
        head, rule, row,
        "",
        f"- share of k in {{1, 2}}: **{h['share_k1_k2']:.3f}**; mixed (0 < k < N): {h['share_mixed']:.3f}",
        f"- base pass rate (training problems): **{h['pass_rate']:.3f}**; held-out pass@1 (step-0 eval, "
        f"{rep['eval_episodes']} episodes): {rep['eval_pass_at_1']:.3f}",
        *([f"- first-attempt step accuracy (arith): additions {_fmt(rep['step_accuracy']['add'])}, hard step "
           f"{_fmt(rep['step_accuracy']['hard'])} (chance 1/{rep.get('modulus', 10)})"] if rep.get("step_accuracy") else []),
        *(["- task metrics, training rollouts (mean over calls): " + ", ".join(
            f"{k.split('/')[-1]} {v:.3f}" for k, v in rep["train_metrics"].items())] if rep.get("train_metrics") else []),
        *(["- task metrics, held-out eval: " + ", ".join(
            f"{k.split('/')[-1]} {_fmt(v)}" for k, v in rep["eval_metrics"].items())] if rep.get("eval_metrics") else []),
        f"- mean generated tokens per rollout: {rep['gen_tokens_per_rollout']:.1f}; sampling "
        f"{rep['time_sample_s_per_call']:.2f} s per call of {rep['tasks_per_call']} x {n} rollouts; eval "
        f"{rep['time_eval_s']:.2f} s",
        "",
    ])


def k_histogram(overrides: list[str], *, problems: int = 256, log=print) -> dict:
    """The report dict (see the module docstring) for a run configured by ``overrides``."""
    from hydra import compose, initialize_config_dir

    from experiments.config import validate
    from experiments.train import build
    from prs.core import prefix as ps
    from prs.rl.runner import base_params
    from prs.rl.trainer import Trainer
    from prs.tasks.arith import ArithTask, step_accuracy

    if problems < 1:
        raise ValueError(f"--problems must be >= 1, got {problems}")
    conf = str(pathlib.Path(__file__).resolve().parent.parent / "conf")
    overrides = list(overrides)
    if not any(o.lstrip("+~").startswith("sft.base_dir=") for o in overrides):
        # what experiments.train resolves ``${hydra:runtime.cwd}/runs/base`` to when run from here
        overrides.append(f"sft.base_dir={pathlib.Path.cwd() / 'runs' / 'base'}")
    with initialize_config_dir(config_dir=conf, version_base=None):
        cfg = validate(compose("config", overrides=overrides))
    task, model_cfg, rl, _, run_cfg = build(cfg)
    base_dir = pathlib.Path(run_cfg.base_dir) if run_cfg.base_dir else pathlib.Path("runs/base")
    from prs.rl.provenance import code_state

    provenance = code_state()  # the commit, tree state and machine the record was made on
    sft_log: list[str] = []

    def log_sft(msg):  # the warm start's lines (cycles, attempts, losses) go into the record too
        sft_log.append(str(msg))
        log(msg)

    t0 = time.perf_counter()
    params = base_params(task, model_cfg, run_cfg, base_dir, log=log_sft)
    t_sft = time.perf_counter() - t0
    n, b = rl.group_size, rl.tasks_per_step
    tr = Trainer(task, model_cfg, rl, ps.PrefixConfig(mode="baseline", n=n), seed=run_cfg.seed)
    sp = tr.sampling_params(params)
    ks, gen, times, mech = [], 0, [], []
    steps = {"add": [0, 0], "hard": [0, 0]}  # arith: first-attempt (correct, written) per kind of step
    calls = -(-problems // b)
    for s in range(calls):  # the run's steps 0, 1, …: their problems and sampling keys, step-0 policy
        probs = task.train_problems(seed=run_cfg.seed, step=s, count=b)
        t1 = time.perf_counter()
        ep = tr.rollouts.rollout(sp, probs, tr.step_keys(s)[0], group_size=n)
        r = np.asarray(ep.rewards).reshape(b, n)  # [B, N]
        times.append(time.perf_counter() - t1)
        ks.append((r >= 1.0).sum(axis=1))
        gen += int(np.asarray(ep.policy_mask).sum())
        if hasattr(task, "episode_metrics"):  # the task's own per-step metrics (recovery rate, P(reach), ...)
            mech.append(task.episode_metrics(probs, ep))
        if isinstance(task, ArithTask):
            start = task.prompts(probs)[1]  # the policy's writing begins after the whole prompt (a draft included)
            for kind, (c, w) in step_accuracy(probs, np.asarray(ep.tokens), n, task.cfg, start=start).items():
                steps[kind][0] += c
                steps[kind][1] += w
    k = np.concatenate(ks)[:problems].astype(np.int64)
    t1 = time.perf_counter()
    ev = tr.evaluate(params, 0)
    t_eval = time.perf_counter() - t1
    return {
        "name": cfg.name, "overrides": list(overrides), "task": dataclasses_repr(task),
        "modulus": getattr(getattr(task, "cfg", None), "modulus", None),
        "histogram": histogram(k, n),
        "step_pass_rates": [float(x.sum() / (n * b)) for x in ks],  # per drawn step (as its train metric)
        "eval_pass_at_1": ev["eval/pass_at_1"],
        "train_metrics": _mean_metrics(mech),
        "eval_metrics": {k[len("eval/"):]: v for k, v in ev.items() if k.startswith("eval/mech/")},
        "eval_episodes": rl.eval.count * rl.eval.samples,
        "step_accuracy": ({kind: (c / w if w else None) for kind, (c, w) in steps.items()}
                          if isinstance(task, ArithTask) else None),
        "steps_written": {kind: w for kind, (_, w) in steps.items()},
        "gen_tokens_per_rollout": gen / (calls * b * n), "tasks_per_call": b,
        "sft_steps": run_cfg.sft_steps, "time_warm_start_s": t_sft,
        # the first call compiles; the median is the steady-state cost of one step's sampling
        "time_sample_s_per_call": float(np.median(times[1:] if len(times) > 1 else times)),
        "time_eval_s": t_eval,
        "sft_log": sft_log, "provenance": provenance,
    }


def _mean_metrics(per_call: list[dict]) -> dict:
    """Each numeric metric's mean over the sampling calls that logged it (equal-size calls)."""
    keys = sorted({k for m in per_call for k, v in m.items() if isinstance(v, (int, float)) and v is not None})
    return {k: float(np.mean([m[k] for m in per_call if isinstance(m.get(k), (int, float))])) for k in keys}


def dataclasses_repr(task) -> str:
    return repr(getattr(task, "cfg", task))


@cli.command("experiments.k_histogram")
def main(argv=None) -> dict:
    ap = cli.ArgumentParser(prog="python -m experiments.k_histogram", description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=256, help="training problems (groups of N) to sample")
    ap.add_argument("--out", default=None, help="write OUT.json and OUT.md")
    ap.add_argument("overrides", nargs="*", help="Hydra overrides, as for experiments.train")
    args = ap.parse_intermixed_args(argv)
    rep = k_histogram(args.overrides, problems=args.problems)
    md = markdown(rep)
    print(md)
    if args.out:
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        # OUT + suffix, not with_suffix: a name such as "late_h0.6" must not become "late_h0.json"
        pathlib.Path(f"{out}.json").write_text(json.dumps(rep, indent=2) + "\n")
        pathlib.Path(f"{out}.md").write_text(md)
    return rep


if __name__ == "__main__":
    main()
