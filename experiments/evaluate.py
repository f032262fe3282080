"""Evaluate a checkpoint or a training run on one or more data files: mean@k, pass@j, maj@k per source.

    python -m experiments.evaluate CHECKPOINT_OR_RUN --data A.jsonl B.parquet --k 8 [--out FILE.json]

CHECKPOINT_OR_RUN: a Hugging Face checkpoint directory (``config.json`` + safetensors + tokenizer), or
a run directory of ``experiments.train`` (its ``config.json`` names the starting checkpoint, whose
tokenizer and chat template are used, its task's column mapping, prompt template and custom reward;
the parameters are the latest checkpoint's, or ``--step``'s). Each data file is a source unless its
rows name theirs (``--source-key``, or a ``data_source`` column); every row of every file is
evaluated (prompts longer than ``--max-prompt-len`` are dropped and counted). k samples per problem
at ``--temperature`` (default 1.0), graded by the run's custom reward or the math verifier
(``--backend``); the metrics are ``prs.rewards.evaluation.eval_metrics``.

Prints a table (one line per source and ``all``) and writes JSON (default
``evaluate-<name>-k<k>.json`` in the current directory): the metrics, the rows per source, the
sampling settings, the grader back end and version, the reward function and its hash. An existing
output file is never overwritten. Mistakes end in one ``error: ...`` line and exit status 2.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np


def _run_config(run: pathlib.Path) -> dict:
    try:
        return json.loads((run / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{run}: not a run directory with a readable config.json ({e})") from None


def _run_params(run: pathlib.Path, like, step: int | None):
    """The parameters of the run's checkpoint at ``step`` (default the latest), in the layout of
    ``like`` (the starting checkpoint's parameters)."""
    import jax
    import orbax.checkpoint as ocp

    ckpts = run / "checkpoints"
    mngr = ocp.CheckpointManager(ckpts) if ckpts.is_dir() else None
    steps = sorted(mngr.all_steps()) if mngr is not None else []
    if not steps:
        raise ValueError(f"{run} holds no checkpoint (trained with ckpt_every=0?); evaluate its starting "
                         f"checkpoint directory instead")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ValueError(f"--step {step}: {run} holds checkpoints at steps {steps}")
    tree = ocp.StandardCheckpointer().restore(ckpts / str(step) / "default")
    params = tree["params"]
    shapes = lambda t: jax.tree.map(lambda x: (tuple(x.shape), str(x.dtype)), t)  # noqa: E731
    if jax.tree.structure(params) != jax.tree.structure(like) or shapes(params) != shapes(like):
        raise ValueError(f"{run} checkpoint {step}: its parameters do not match the starting checkpoint's layout")
    return jax.tree.map(jax.numpy.asarray, params), step


def evaluate(args) -> dict:
    """Loads, samples, grades; returns the JSON record (see the module docstring)."""
    import jax

    from prs.models import hf
    from prs.rewards.custom import RewardConfig
    from prs.rewards.evaluation import answer_key, eval_metrics
    from prs.rl.config import RolloutConfig
    from prs.rl.episodes import SingleTurnRollouts
    from prs.tasks.math_jsonl import make_math_jsonl

    target = pathlib.Path(args.target).expanduser().resolve()
    if not target.is_dir():
        raise ValueError(f"{target}: not a directory (a Hugging Face checkpoint or a run directory)")
    is_run = (target / "config.json").exists() and "task" in _run_config_or_empty(target)
    params_from, task_params, reward_cfg = target, {}, {}
    if is_run:
        rc = _run_config(target)
        if rc["task"]["name"] != "math_jsonl":
            raise ValueError(f"{target}: a run of task={rc['task']['name']}; evaluate takes math_jsonl runs")
        params_from = pathlib.Path(rc["model"]["checkpoint"] or "")
        if not rc["model"]["checkpoint"] or not params_from.is_dir():
            raise ValueError(f"{target}: its starting checkpoint {rc['model']['checkpoint']!r} is not a directory here")
        keep = ("problem_key", "answer_key", "source_key", "solution_key", "prompt_template", "instruction",
                "system_prompt", "enable_thinking", "max_new_tokens", "backend", "max_prompt_len")
        task_params = {k: v for k, v in rc["task"]["params"].items() if k in keep}
        reward_cfg = {k: v for k, v in (rc.get("reward") or {}).items() if v not in (None, "")}
    for key in ("problem_key", "answer_key", "source_key", "prompt_template", "backend", "max_new_tokens",
                "max_prompt_len"):
        if getattr(args, key) is not None:
            task_params[key] = getattr(args, key)
    if args.reward_path or args.reward_module:
        reward_cfg = {"path": args.reward_path, "module": args.reward_module, "name": args.reward_name,
                      "graded": args.reward_graded, "workers": args.reward_workers}
    reward = RewardConfig(**reward_cfg) if reward_cfg else None
    for d in args.data:
        if not (pathlib.Path(d).exists() or "/" in d):
            raise ValueError(f"--data {d}: no such file")
    task = make_math_jsonl(tokenizer=str(params_from), path=args.data[0], eval_path=list(args.data),
                           max_rows=args.max_rows, reward=reward, **task_params)
    model_cfg, params = hf.load_checkpoint(params_from)
    step = None
    if is_run:
        params, step = _run_params(target, params, args.step)
    k = int(args.k)
    sampling = RolloutConfig(temperature=args.temperature, eval_temperature=args.temperature,
                             max_new_tokens=task.max_new_tokens)
    rollouts = SingleTurnRollouts.from_settings(task, sampling, model_cfg=model_cfg)
    n_eval = len(task._eval[0])
    problems = task.eval_problems(count=n_eval)
    batch = min(int(args.batch), n_eval)
    rewards, answers = [], []
    t0 = time.perf_counter()
    for i, a in enumerate(range(0, n_eval, batch)):
        idx = np.arange(a, a + batch) % n_eval  # the last call padded with the first rows: one compile
        real = min(batch, n_eval - a)
        ep = rollouts.rollout(params, task.take(problems, idx), jax.random.fold_in(jax.random.PRNGKey(args.seed), i),
                              group_size=k, evaluation=True)
        rewards.append(np.asarray(ep.rewards).reshape(batch, k)[:real])
        answers += [answer_key(t) for t in task.episode_texts(ep)][: real * k]
    rewards = np.concatenate(rewards)
    sources = [row["source"] for row in task.rows_of(problems)]
    metrics = eval_metrics(rewards, answers, sources)
    counts = {s: sources.count(s) for s in dict.fromkeys(sources)}
    return {"target": str(target), "checkpoint": str(params_from), "step": step, "data": list(args.data), "k": k,
            "rows": counts, "dropped": int(task.dropped), "sampling": {"temperature": args.temperature,
            "max_new_tokens": task.max_new_tokens, "seed": args.seed}, "metrics": metrics,
            "reward_mean": float(rewards.mean()), **task.provenance(), "time_s": time.perf_counter() - t0}


def _run_config_or_empty(path: pathlib.Path) -> dict:
    try:
        cfg = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def table(record: dict) -> str:
    """The metrics as a fixed-width table: one line per source, ``all`` last."""
    m, k = record["metrics"], record["k"]
    sources = [*record["rows"], "all"]
    cols = [c.split("/", 1)[1] for c in m if c.startswith("all/")]
    head = f"{'source':<24} {'rows':>5} " + " ".join(f"{c:>9}" for c in cols)
    lines = [head]
    for s in sources:
        n = sum(record["rows"].values()) if s == "all" else record["rows"][s]
        lines.append(f"{s[:24]:<24} {n:>5} " + " ".join(f"{m[f'{s}/{c}']:>9.4f}" for c in cols))
    return "\n".join(lines) + f"\n(k = {k} samples per problem; grader {record['grader']['backend']}" + \
        (f", reward {record['reward_fn']['name']}" if record.get("reward_fn") else "") + ")"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.evaluate", description=__doc__.split("\n\n")[0])
    ap.add_argument("target", help="a Hugging Face checkpoint directory or an experiments.train run directory")
    ap.add_argument("--data", nargs="+", required=True, help="eval files (JSONL, Parquet, save_to_disk directories)")
    ap.add_argument("--k", type=int, default=8, help="samples per problem (default 8)")
    ap.add_argument("--out", default=None, help="JSON output (default evaluate-<name>-k<k>.json; never overwritten)")
    ap.add_argument("--step", type=int, default=None, help="a run's checkpoint step (default the latest)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=32, help="problems per sampling call (default 32)")
    ap.add_argument("--max-rows", type=int, default=None, help="only the first rows of each file")
    ap.add_argument("--max-new-tokens", dest="max_new_tokens", type=int, default=None)
    ap.add_argument("--max-prompt-len", dest="max_prompt_len", type=int, default=None)
    ap.add_argument("--problem-key", dest="problem_key", default=None)
    ap.add_argument("--answer-key", dest="answer_key", default=None)
    ap.add_argument("--source-key", dest="source_key", default=None)
    ap.add_argument("--prompt-template", dest="prompt_template", default=None)
    ap.add_argument("--backend", default=None, choices=["auto", "math-verify", "fallback"])
    ap.add_argument("--reward-path", dest="reward_path", default=None)
    ap.add_argument("--reward-module", dest="reward_module", default=None)
    ap.add_argument("--reward-name", dest="reward_name", default=None)
    ap.add_argument("--reward-graded", dest="reward_graded", action="store_true")
    ap.add_argument("--reward-workers", dest="reward_workers", type=int, default=0)
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.k < 1:
            raise ValueError(f"--k {args.k}: need k >= 1 samples per problem")
        if args.batch < 1:
            raise ValueError(f"--batch {args.batch}: need >= 1")
        out = pathlib.Path(args.out or f"evaluate-{pathlib.Path(args.target).resolve().name}-k{args.k}.json")
        if out.exists():
            raise ValueError(f"{out} exists; evaluate never overwrites a result: give --out NEW.json")
        if not out.parent.is_dir():
            raise ValueError(f"--out {out}: the directory {out.parent} does not exist")
        record = evaluate(args)
        with open(out, "x") as f:  # exclusive create: a file that appeared meanwhile is not overwritten
            json.dump(record, f, indent=2)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    print(table(record))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
