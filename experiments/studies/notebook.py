"""Notebook helpers: which runs a notebook shows (``notebook_runs``), and a tiny run set trained on the
fly for notebooks and tests when no saved runs exist. Imports ``prs`` (the trainer for the tiny runs)."""
from __future__ import annotations

import os
import pathlib
from typing import Any, Iterable, Sequence


from prs.analysis.runs import find_run_dirs, load_run, parse_run_name


# ---------------------------------------------------------------------------------------------
# A tiny run set (notebooks and tests when no saved runs exist)


def make_tiny_runs(out_dir, *, methods: Sequence[str] = ("baseline", "ps_ada"), seeds: Sequence[int] = (0, 1),
                   steps: int = 8, eval_every: int = 2, sft_steps: int = 60, task: str = "arith") -> list[pathlib.Path]:
    """Trains a tiny run per (method, seed) into ``out_dir/<task>-<method>-s<seed>`` with the tiny
    model and task of the trainer tests (``tests/rl/test_trainer.py``; 32 eval problems), skipping runs
    already complete; returns the run directories. The shared warm start is built first (``methods=()``: only that).
    An exclusive lock on ``out_dir/.lock`` serialises concurrent callers."""
    import fcntl

    from prs.core import prefix as ps
    from prs.models.qwen3 import ModelConfig
    from prs.rl.runner import RunConfig, base_params, run
    from prs.tasks.registry import make_task
    from prs.rl.trainer import RLConfig
    from prs.rl.config import EvalConfig

    tk = make_task(task, min_terms=2, max_terms=4)
    model = ModelConfig.preset("tiny", vocab_size=tk.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                               head_dim=8, d_ff=64)
    rl = RLConfig(tasks_per_step=4, group_size=8, eval=EvalConfig(count=32, samples=1))  # eval rows = train rows: one sampler compile
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dirs = [out / f"{task}-{m}-s{s}" for m in methods for s in seeds]
    def run_cfg(s):
        return RunConfig(steps=steps, seed=s, eval_every=eval_every, ckpt_every=0, sft_steps=sft_steps, sft_batch=32,
                         base_dir=str(out / "base"), wandb_mode="disabled", progress=False)

    with open(out / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        base_params(tk, model, run_cfg(0), out / "base", log=lambda *a: None)
        for d in dirs:
            if load_run(d).complete if d.exists() else False:
                continue
            m, s = parse_run_name(d.name)["method"], parse_run_name(d.name)["seed"]
            cfg = {"method": {"name": m}, "task": {"name": task}, "seed": s, "steps": steps}
            run(tk, model, rl, ps.PrefixConfig(mode=m, n=8), run_cfg(s), d, config_dict=cfg, log=lambda *a: None)
    return dirs


def tiny_run_dir(tag: str = "") -> pathlib.Path:
    """Where notebooks keep their tiny run set: a temporary directory keyed by ``tag`` and the source
    of the ``prs`` package (a code change gives new runs; notebooks of one session share them)."""
    import hashlib
    import tempfile

    h = hashlib.sha256(tag.encode())
    import prs

    for p in sorted(pathlib.Path(prs.__file__).resolve().parent.rglob("*.py")):  # all of prs
        h.update(p.read_bytes())
    return pathlib.Path(tempfile.gettempdir()) / f"prs_tiny_runs-{h.hexdigest()[:12]}"


def find_run_root(candidates: Iterable[Any]) -> pathlib.Path | None:
    """The first candidate directory (None entries skipped) holding at least one run, else None."""
    for c in candidates:
        if c and pathlib.Path(c).is_dir() and find_run_dirs(c):
            return pathlib.Path(c)
    return None


COMMITTED_RUNS = "../results/ablation/runs"  # the committed ablation, as a notebook's kernel (cwd notebooks/) sees it


def notebook_runs(env: str | None = None, *, committed: str = COMMITTED_RUNS) -> tuple[pathlib.Path | None, str]:
    """``(run root, or None for the tiny run set; one line naming the runs)`` for a run notebook.

    Default: the committed records ``committed`` (what the committed outputs show), even when the
    user has sweeps of their own under ``runs/``; a notebook shows other runs only when asked:
    ``env`` (default ``$PRS_RUN_ROOT``) names a directory of run directories (e.g. ``../runs/sweep``;
    one without runs is a ValueError, not a silent fallback) or is ``"tiny"``: a tiny run set is
    trained into ``tiny_run_dir()`` (a smoke test, not a result; also when ``committed`` is absent).
    """
    env = os.environ.get("PRS_RUN_ROOT") if env is None else env
    tiny = f"tiny runs in {tiny_run_dir()} (a smoke test of the pipeline, not a result)"
    if env == "tiny":
        return None, f"runs: {tiny} (PRS_RUN_ROOT=tiny)"
    if env:
        root = find_run_root([env])
        if root is None:
            raise ValueError(f"PRS_RUN_ROOT={env!r} holds no run directory (metrics.jsonl or summary.json); "
                             f"unset it for the committed runs {committed}")
        return root, f"runs: {root} (yours: PRS_RUN_ROOT)"
    root = find_run_root([committed])
    if root is None:
        return None, f"runs: no committed runs at {committed} -> {tiny}"
    return root, (f"runs: {root} (the committed records; PRS_RUN_ROOT=<directory of runs>, e.g. ../runs/sweep, "
                  f"shows yours)")
