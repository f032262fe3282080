"""Reading run directories (``metrics.jsonl``, ``summary.json``) into ``Run`` records, and the
paper's reported numbers to compare against (never results of this code base)."""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
import pathlib
import re
from typing import Any, Iterable

import numpy as np


# The paper's reported values (Zhu et al. 2026, arXiv 2605.05112): references to compare against,
# not results of this code base.
# The ablation table (steps to converge): the source names no model or task for it; it is *not* the
# Qwen3-14B SWE-bench result (that one is PAPER_HEADLINE_14B: step 300 -> 170, 2.01x end-to-end).
PAPER_ABLATION_STEPS = {"baseline": 211, "ps_fix": 131, "ps_ada_hard": 186, "ps_ada": 110}  # steps to converge
PAPER_ABLATION_SPEEDUP = {"baseline": 1.00, "ps_fix": 1.61, "ps_ada_hard": 1.13, "ps_ada": 1.92}  # as printed
PAPER_EQUAL_STEP_PP = {"Qwen3-4B": 7.3, "Qwen3-8B": 10.8}  # AIME 2025, PS-ada vs baseline at equal steps (pp)
PAPER_SETTLED_REROLL = {1: 0.485, 2: 0.489, 6: 0.504, 7: 0.515}  # re-rollout pass rate per bucket k (N = 8)
PAPER_HEADLINE_14B = {"base_step": 300, "ps_step": 170, "base_step_s": 1597.0, "ps_step_s": 1405.0,
                      "step_speedup": 1.76, "time_speedup": 1.14, "end_to_end": 2.01}  # Qwen3-14B, SWE-bench
# the parts of a train step's wall-clock: next_visit agent steps log their replay through execution
# (rebuilding the prefix's environment state) as time_replay, apart from time_sample
STEP_TIME_KEYS = ("time_sample", "time_replay", "time_batch", "time_update")
METHOD_ORDER = ("baseline", "ps_fix", "ps_ada_hard", "ps_ada")
STATUSES = ("complete", "partial", "empty", "failed")
SCHEDULES = ("same_step", "next_visit")
# per-step train metrics kept in Run.series (the decisive experiment's mechanism measurements)
SERIES = ("pq_trained", "groups_kept", "groups_mixed", "groups_steered", "steered_mixed_share", "pq_steered",
          "tokens_replayed", "rollouts_sampled", "pass_rate")


# ---------------------------------------------------------------------------------------------
# Reading runs


@dataclasses.dataclass(frozen=True)
class Run:
    """One run directory, as arrays.

    Attributes:
      name, path: directory name and path.  task, method, seed: from ``summary.json``'s config
        (``config.json``, the config a run was started with, while it has no summary), else from the directory name (``<task>-<method><tag>-s<seed>`` or ``<method>_s<seed>``).
        A Hydra ``tag`` is appended to the task (``arith`` + ``_acc`` -> ``arith_acc``), so runs of
        one tag are compared with the baseline of the same tag.
      planned_steps: ``config["steps"]`` (None if unknown).  status: ``complete`` (summary written,
        all planned train steps and the final evaluation present), ``partial`` (killed midway),
        ``empty`` (no train line), ``failed`` (stopped on an error: ``error.json``, see
        ``prs.rl.rundir``; its lines are still read).  problems: human-readable notes (unparsable lines, ...).
      error: the recorded error of a ``failed`` run (None otherwise).
      eval_step [E] int, eval_pass [E] float: held-out pass@1 after ``eval_step`` updates.
      train_step [T] int, step_time [T] s (sample + replay + batch + update: ``STEP_TIME_KEYS``),
        step_tokens [T] generated tokens.
      ks [K]: controller buckets (k successes of n).  n: group size.
      reroll_rate [T, K] (NaN: no re-roll that step), count [T, K] (groups whose k is in the bucket),
        rho [T, K], ema [T, K]; steered [T, K] groups re-rolled / steered with the bucket's prefix (the
        groups reroll_rate averages; NaN in runs that did not log it).
    """

    name: str
    path: str
    task: str
    method: str
    seed: int
    planned_steps: int | None
    status: str
    problems: tuple[str, ...]
    eval_step: np.ndarray
    eval_pass: np.ndarray
    train_step: np.ndarray
    step_time: np.ndarray
    step_tokens: np.ndarray
    ks: tuple[int, ...]
    n: int
    reroll_rate: np.ndarray
    count: np.ndarray
    rho: np.ndarray
    ema: np.ndarray
    error: str | None = None
    schedule: str = "same_step"
    task_params: dict = dataclasses.field(default_factory=dict)
    series: dict = dataclasses.field(default_factory=dict)
    k_hist0: tuple = ()
    method_params: dict = dataclasses.field(default_factory=dict)
    steered: np.ndarray | None = None   # [T, K] groups steered with bucket k's prefix (NaN: not logged)

    @property
    def steps_done(self) -> int:
        return int(self.train_step.size)

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def describe(self) -> str:
        if self.status == "complete":
            return "complete"
        if self.status == "empty":
            return "empty: no train line (not started, or killed before the first step)"
        if self.status == "failed":
            return f"failed after {self.steps_done} steps: {self.error}"
        planned = "?" if self.planned_steps is None else str(self.planned_steps)
        return f"{self.status}: killed after {self.steps_done}/{planned} steps"

    def cumulative_cost(self, *, clip: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(wall [T+1] s, tokens [T+1]): totals before train step t (index t), t = 0 .. T.

        ``clip``: step times above ``clip`` × the run's median step time (compilation spikes) count
        as the median; None keeps the raw times.
        """
        wall = np.concatenate([[0.0], np.cumsum(clipped_step_time(self.step_time, clip=clip))])
        tok = np.concatenate([[0.0], np.cumsum(self.step_tokens)])
        return wall, tok

    def cost_at(self, step: float, *, clip: float | None = None) -> tuple[float, float]:
        """(wall-clock s, generated tokens) spent before the parameters after ``step`` updates.

        ``inf`` for an infinite (censored) step; the totals so far for a step beyond the last train line.
        """
        if not math.isfinite(step):
            return math.inf, math.inf
        wall, tok = self.cumulative_cost(clip=clip)
        i = int(min(max(step, 0), self.steps_done))
        return float(wall[i]), float(tok[i])


_NAME_PATTERNS = (
    re.compile(r"^(?P<task>[A-Za-z0-9_.]+)-(?P<method>.+)-s(?P<seed>\d+)$"),  # Hydra: <task>-<method><tag>-s<seed>
    re.compile(r"^(?P<method>.+)_s(?P<seed>\d+)$"),  # outside Hydra: <method>_s<seed>
)


def clipped_step_time(step_time, *, clip: float | None) -> np.ndarray:
    """t_i -> t_i if t_i <= clip · median(t) else median(t): step times [T] without compilation spikes."""
    t = np.asarray(step_time, float)
    if clip is None or t.size == 0:
        return t
    if clip < 1.0:
        raise ValueError(f"clip must be >= 1 (a multiple of the median step time) or None, got {clip!r}")
    med = float(np.median(t))
    return np.where(t > clip * med, med, t)


def parse_run_name(name: str) -> dict[str, Any]:
    """``arith-ps_ada-s3`` -> {task: arith, method: ps_ada, seed: 3}; ``ps_ada_s0`` -> task "unknown".

    Raises ValueError if the name fits neither pattern.
    """
    for pat in _NAME_PATTERNS:
        m = pat.match(name)
        if m:
            d = m.groupdict()
            return {"task": d.get("task") or "unknown", "method": d["method"], "seed": int(d["seed"])}
    raise ValueError(f"run directory name {name!r} fits neither <task>-<method><tag>-s<seed> nor <method>_s<seed>")


def read_jsonl(path: pathlib.Path) -> tuple[list[dict], list[str]]:
    """(records, problems) of a ``metrics.jsonl`` (or its committed ``.gz``); unparsable lines are skipped and named."""
    records, problems = [], []
    gz = path.with_name(path.name + ".gz")  # committed result sets keep metrics.jsonl.gz
    if not path.exists() and not gz.exists():
        return records, ["no metrics.jsonl"]
    if path.exists():
        lines = path.read_text().splitlines()
    else:
        import gzip

        lines = gzip.decompress(gz.read_bytes()).decode().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            where = "last line (truncated write)" if i == len(lines) - 1 else f"line {i + 1}"
            problems.append(f"metrics.jsonl: unparsable {where} skipped")
    return records, problems


def _f(x) -> float:
    return math.nan if x is None else float(x)


def load_run(path) -> Run:
    """Reads one run directory into a ``Run`` (never raises on a partial or killed run)."""
    path = pathlib.Path(path)
    records, problems = read_jsonl(path / "metrics.jsonl")
    summary, config = None, {}
    if (path / "summary.json").exists():
        try:
            summary = json.loads((path / "summary.json").read_text())
            config = summary.get("config") or {}
        except json.JSONDecodeError:
            problems.append("summary.json unparsable")
    if not config:  # a running or killed run has no summary yet: the config it was started with
        from prs.rl.rundir import recorded_config
        config = recorded_config(path) or {}
    try:
        from_name = parse_run_name(path.name)
    except ValueError:
        from_name = {"task": "unknown", "method": path.name, "seed": -1}
        problems.append("directory name not parsed; method = directory name")
    name_method, name_schedule = from_name["method"], None
    for sch in SCHEDULES:  # <task>-<method>-<schedule>-s<seed>
        if name_method.endswith("-" + sch):
            name_method, name_schedule = name_method[: -len(sch) - 1], sch
    method = (config.get("method") or {}).get("name", name_method)
    schedule = str((config.get("schedule") or {}).get("kind")  # the nested layout; the flat one kept it in method
                   or (config.get("method") or {}).get("schedule") or name_schedule or "same_step")
    task_params = dict((config.get("task") or {}).get("params") or {})
    task = (config.get("task") or {}).get("name", from_name["task"]) + str(config.get("tag") or "")
    seed = int(config.get("seed", from_name["seed"]))
    planned = config.get("steps", summary.get("steps") if summary else None)
    planned = None if planned is None else int(planned)

    train = sorted((r for r in records if r.get("kind") == "train"), key=lambda r: r["step"])
    evals = sorted((r for r in records if r.get("kind") == "eval"), key=lambda r: r["step"])
    ks = tuple(sorted({int(key.split("/")[1]) for key in (train[0] if train else {}) if key.startswith("bucket/")}))
    n = len(train[0]["k_hist"]) - 1 if train and "k_hist" in train[0] else 8

    def table(field: str) -> np.ndarray:  # [T, K]
        return np.array([[_f(r.get(f"bucket/{k}/{field}")) for k in ks] for r in train], float).reshape(len(train), len(ks))

    eval_step = np.array([r["step"] for r in evals], int)
    if not train:
        status = "empty"
    elif (summary is not None and (planned is None or len(train) >= planned)
          and eval_step.size and eval_step[-1] >= len(train)):
        status = "complete"
    else:
        status = "partial"
    error = None
    if (path / "error.json").exists():  # written by prs.rl.runner when a run stops on an error
        try:
            rec = json.loads((path / "error.json").read_text())
            error = f"{rec.get('error')} (at step {rec.get('step')})"
        except json.JSONDecodeError:
            error = "error.json unparsable"
        if status != "complete":
            status = "failed"
    if summary is None:
        problems.append("no summary.json")
    return Run(
        name=path.name, path=str(path), task=str(task), method=str(method), seed=seed, planned_steps=planned,
        status=status, problems=tuple(problems), eval_step=eval_step,
        eval_pass=np.array([_f(r.get("eval/pass_at_1")) for r in evals], float),
        train_step=np.array([r["step"] for r in train], int),
        step_time=np.array([sum(_f(r.get(k, 0.0)) for k in STEP_TIME_KEYS) for r in train], float),
        step_tokens=np.array([_f(r.get("tokens_generated", 0)) for r in train], float),
        ks=ks, n=n, reroll_rate=table("reroll_pass_rate"), count=table("count"), rho=table("rho"), ema=table("ema"),
        steered=table("steered"),
        error=error, schedule=schedule, task_params=task_params, method_params=dict(config.get("method") or {}),
        k_hist0=tuple(int(v) for v in (train[0].get("k_hist") or ())) if train else (),
        series={k: np.array([_f(r.get(k)) for r in train], float) for k in SERIES if any(k in r for r in train)})


def read_records(run_dir) -> list[dict]:
    """Every record of ``run_dir``'s ``metrics.jsonl`` (or its committed ``metrics.jsonl.gz``), in order."""
    run_dir = pathlib.Path(run_dir)
    plain, packed = run_dir / "metrics.jsonl", run_dir / "metrics.jsonl.gz"
    text = plain.read_text() if plain.exists() else gzip.decompress(packed.read_bytes()).decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def find_run_dirs(root) -> list[pathlib.Path]:
    """Directories under ``root`` (itself, children, grandchildren) holding ``metrics.jsonl`` or ``summary.json``."""
    root = pathlib.Path(root)
    if not root.is_dir():
        raise ValueError(f"run root {str(root)!r} is not a directory")
    cands = [root, *root.glob("*"), *root.glob("*/*")]
    marks = ("metrics.jsonl", "metrics.jsonl.gz", "summary.json", "error.json")
    return sorted({p for p in cands if p.is_dir() and any((p / m).exists() for m in marks)})


def load_runs(root) -> list[Run]:
    """All runs under ``root`` sorted by (task, method, seed); partial and empty runs included."""
    runs = [load_run(p) for p in find_run_dirs(root)]
    return sorted(runs, key=lambda r: (r.task, _method_key(r.method), r.seed, r.name))


RECORD_FILES = ("summary.json", "config.json", "provenance.jsonl")


def copy_run_records(src, dst) -> pathlib.Path:
    """Copies one run's records for committing into ``dst``: ``metrics.jsonl`` gzipped (``metrics.jsonl.gz``,
    byte-stable: mtime 0; read back by ``load_run``), and ``RECORD_FILES``. Checkpoints and logs stay behind.

    Copying the same records again is a no-op (gzipped metrics compare by content); a ``dst`` that already
    holds *different* records for that name raises (no run overwrites another run's files)."""
    import gzip
    src, dst = pathlib.Path(src), pathlib.Path(dst)
    files: dict[str, bytes] = {}
    if (src / "metrics.jsonl").exists():
        files["metrics.jsonl.gz"] = gzip.compress((src / "metrics.jsonl").read_bytes(), mtime=0)
    elif (src / "metrics.jsonl.gz").exists():
        files["metrics.jsonl.gz"] = (src / "metrics.jsonl.gz").read_bytes()
    for name in RECORD_FILES:
        if (src / name).exists():
            files[name] = (src / name).read_bytes()
    def same(n: str, b: bytes) -> bool:  # gzip headers may differ (name, mtime): compare the content
        old = (dst / n).read_bytes()
        return old == b or (n.endswith(".gz") and gzip.decompress(old) == gzip.decompress(b))
    clash = [n for n, b in files.items() if (dst / n).exists() and not same(n, b)]
    if clash:
        raise ValueError(f"copy_run_records: {dst} already holds different {', '.join(clash)} than {src}; "
                         "remove it or copy to another directory")
    dst.mkdir(parents=True, exist_ok=True)
    for n, b in files.items():
        if not (dst / n).exists():
            (dst / n).write_bytes(b)
    return dst


def collect_records(root, dst, *, complete_only: bool = True, prefix: str | None = None) -> list[pathlib.Path]:
    """``copy_run_records`` for every run under ``root`` (complete ones only by default; names starting with
    ``prefix`` if given) into ``dst/<run name>/``. Returns the directories written, in ``load_runs`` order."""
    out = []
    for r in load_runs(root):
        if (complete_only and not r.complete) or (prefix is not None and not r.name.startswith(prefix)):
            continue
        out.append(copy_run_records(r.path, pathlib.Path(dst) / r.name))
    return out


def _method_key(method: str):
    return (METHOD_ORDER.index(method), method) if method in METHOD_ORDER else (len(METHOD_ORDER), method)


def group_runs(runs: Iterable[Run]) -> dict[str, dict[str, list[Run]]]:
    """{task: {method: [runs sorted by seed]}} with methods in ablation order."""
    out: dict[str, dict[str, list[Run]]] = {}
    for r in runs:
        out.setdefault(r.task, {}).setdefault(r.method, []).append(r)
    return {t: {m: sorted(v, key=lambda r: r.seed) for m, v in sorted(d.items(), key=lambda kv: _method_key(kv[0]))}
            for t, d in sorted(out.items())}
