"""Analysis of training runs: steps to converge, speed-ups with bootstrap CIs, settled controller
rates, equal-step improvement, and the figures (issue #7).

Reads the run directories written by ``prs.runner.run`` (``metrics.jsonl``, ``summary.json``) and
turns them into numbers comparable to Zhu et al. 2026 (arXiv 2605.05112). All statistics are
numpy functions over explicit arrays; the ``Run`` loader is the only place that touches files.

Definitions (S seeds, E evaluation points, T training steps, K controller buckets):

* **Evaluation step.** ``{"kind": "eval", "step": s}`` is the held-out pass@1 of the parameters
  after ``s`` updates; it is preceded by the train lines ``0 .. s-1``.
* **Smoothing.** A trailing (causal) moving average over evaluation points,
  ``ỹ_e = mean(y_{max(0, e-w+1)} .. y_e)`` with window ``w`` (``window``, default 3; ``w = 1`` = no
  smoothing). Trailing, so the convergence step never uses evaluations from its future; missing
  points (NaN) are skipped in the mean.
* **Seed-mean curve.** ``ȳ_e = mean_s y_{s,e}`` over the seeds that have point ``e`` (partial runs
  contribute to the points they reached), then smoothed.
* **Reference level** ``L`` (per task): the baseline's smoothed seed-mean curve at its last point
  (``ref="final"``, default) or its maximum (``ref="peak"``), computed from the baseline runs that
  completed (all baseline runs if none completed).
* **Steps to converge** of a curve: the first evaluation step ``s_e`` with ``ỹ_e >= L``
  ("baseline's step 300 reached at 170"). Computed (a) per seed, on each run's own smoothed curve,
  and (b) once per method, on the smoothed seed-mean curve (the headline number). A curve that
  never reaches ``L`` is **censored**: steps = ``inf``, reported as ``>= last evaluated step``;
  censored and partial (killed) runs stay in the tables with their status, never dropped. A run
  with no train line at all (``empty``) is listed in the tables but excluded from the statistics.
* **Cost to converge.** Wall-clock ``Σ_{t < s} (time_sample_t + time_batch_t + time_update_t)``
  (seconds) and generated tokens
  ``Σ_{t < s} tokens_generated_t`` over the train lines before the convergence step ``s``.
  Compilation makes some steps (the first, a first re-roll of a new width) far slower than the
  rest, and in a sweep only the first run of a process pays it; so by default (``time_clip=5``)
  a step time above 5 × the run's median step time counts as the median. ``time_clip=None``
  gives the raw sums.
  If the baseline's smoothed seed-mean starts at or above ``L`` (it never improved), the task is
  flagged ``degenerate`` (every curve converges at step 0; speed-ups 0/0 are NaN).
* **Speed-up** of a method over the baseline: the ratio of means over seeds
  ``mean_s(steps_base) / mean_s(steps_method)`` (likewise for wall-clock and tokens), with a seeded
  percentile bootstrap 95% CI (Efron & Tibshirani 1993, ch. 13). Default **unpaired**: baseline
  seeds and method seeds are resampled independently (runs of different methods share no state
  beyond the warm start, and unpaired uses every seed); ``paired=True`` resamples common seeds
  jointly. A censored seed enters the ratio with its last evaluated step (a lower bound on its
  steps), so censored method seeds make the speed-up an upper bound (marked ``<=``). Baseline
  seeds below ``L`` at their last evaluation enter with their run length: with ``ref="final"``
  about half of them are, by construction, and the baseline's steps are then its run length, as
  in the paper's "baseline's step 300". Both censoring counts are reported.
* **Settled re-roll pass rate** of bucket ``k`` in one run: the mean of ``bucket/k/reroll_pass_rate``
  over the last ``settle_frac`` (default 50%) of its train steps, weighted by ``bucket/k/count``
  (groups in the bucket that step); steps without re-rolls are skipped. Per method: the mean over
  seeds with a bootstrap CI. The paper reports 0.485/0.489/0.504/0.515 for k = 1, 2, 6, 7 of 8.
* **Equal-step improvement**: ``mean_s y^method_s(s*) - mean_s y^base_s(s*)`` (raw pass@1, in
  probability units) at a fixed evaluation step ``s*`` (default: the baseline's last planned
  step), with a bootstrap CI; seeds without an evaluation at ``s*`` are listed as missing.
"""
from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import re
from typing import Any, Iterable, Sequence

import numpy as np

# The paper's reported values (Zhu et al. 2026, arXiv 2605.05112): references to compare against,
# not results of this code base.
PAPER_ABLATION_STEPS = {"baseline": 211, "ps_fix": 131, "ps_ada_hard": 186, "ps_ada": 110}  # steps to converge
PAPER_ABLATION_SPEEDUP = {"baseline": 1.00, "ps_fix": 1.61, "ps_ada_hard": 1.13, "ps_ada": 1.92}  # as printed
PAPER_SETTLED_REROLL = {1: 0.485, 2: 0.489, 6: 0.504, 7: 0.515}  # re-rollout pass rate per bucket k (N = 8)
PAPER_HEADLINE_14B = {"base_step": 300, "ps_step": 170, "base_step_s": 1597.0, "ps_step_s": 1405.0,
                      "step_speedup": 1.76, "time_speedup": 1.14, "end_to_end": 2.01}  # Qwen3-14B, SWE-bench
METHOD_ORDER = ("baseline", "ps_fix", "ps_ada_hard", "ps_ada")
STATUSES = ("complete", "partial", "empty")


# ---------------------------------------------------------------------------------------------
# Reading runs


@dataclasses.dataclass(frozen=True)
class Run:
    """One run directory, as arrays.

    Attributes:
      name, path: directory name and path.  task, method, seed: from ``summary.json``'s config,
        else from the directory name (``<task>-<method><tag>-s<seed>`` or ``<method>_s<seed>``).
        A Hydra ``tag`` is appended to the task (``arith`` + ``_acc`` -> ``arith_acc``), so runs of
        one tag are compared with the baseline of the same tag.
      planned_steps: ``config["steps"]`` (None if unknown).  status: ``complete`` (summary written,
        all planned train steps and the final evaluation present), ``partial`` (killed midway),
        ``empty`` (no train line).  problems: human-readable notes (unparsable lines, ...).
      eval_step [E] int, eval_pass [E] float: held-out pass@1 after ``eval_step`` updates.
      train_step [T] int, step_time [T] s (sample + batch + update), step_tokens [T] generated tokens.
      ks [K]: controller buckets (k successes of n).  n: group size.
      reroll_rate [T, K] (NaN: no re-roll that step), count [T, K], rho [T, K], ema [T, K].
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


def _read_jsonl(path: pathlib.Path) -> tuple[list[dict], list[str]]:
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
    records, problems = _read_jsonl(path / "metrics.jsonl")
    summary, config = None, {}
    if (path / "summary.json").exists():
        try:
            summary = json.loads((path / "summary.json").read_text())
            config = summary.get("config") or {}
        except json.JSONDecodeError:
            problems.append("summary.json unparsable")
    try:
        from_name = parse_run_name(path.name)
    except ValueError:
        from_name = {"task": "unknown", "method": path.name, "seed": -1}
        problems.append("directory name not parsed; method = directory name")
    method = (config.get("method") or {}).get("name", from_name["method"])
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
    if summary is None:
        problems.append("no summary.json")
    return Run(
        name=path.name, path=str(path), task=str(task), method=str(method), seed=seed, planned_steps=planned,
        status=status, problems=tuple(problems), eval_step=eval_step,
        eval_pass=np.array([_f(r.get("eval/pass_at_1")) for r in evals], float),
        train_step=np.array([r["step"] for r in train], int),
        step_time=np.array([sum(_f(r.get(k, 0.0)) for k in ("time_sample", "time_batch", "time_update"))
                            for r in train], float),
        step_tokens=np.array([_f(r.get("tokens_generated", 0)) for r in train], float),
        ks=ks, n=n, reroll_rate=table("reroll_pass_rate"), count=table("count"), rho=table("rho"), ema=table("ema"))


def find_run_dirs(root) -> list[pathlib.Path]:
    """Directories under ``root`` (itself, children, grandchildren) holding ``metrics.jsonl`` or ``summary.json``."""
    root = pathlib.Path(root)
    if not root.is_dir():
        raise ValueError(f"run root {str(root)!r} is not a directory")
    cands = [root, *root.glob("*"), *root.glob("*/*")]
    marks = ("metrics.jsonl", "metrics.jsonl.gz", "summary.json")
    return sorted({p for p in cands if p.is_dir() and any((p / m).exists() for m in marks)})


def load_runs(root) -> list[Run]:
    """All runs under ``root`` sorted by (task, method, seed); partial and empty runs included."""
    runs = [load_run(p) for p in find_run_dirs(root)]
    return sorted(runs, key=lambda r: (r.task, _method_key(r.method), r.seed, r.name))


def _method_key(method: str):
    return (METHOD_ORDER.index(method), method) if method in METHOD_ORDER else (len(METHOD_ORDER), method)


def group_runs(runs: Iterable[Run]) -> dict[str, dict[str, list[Run]]]:
    """{task: {method: [runs sorted by seed]}} with methods in ablation order."""
    out: dict[str, dict[str, list[Run]]] = {}
    for r in runs:
        out.setdefault(r.task, {}).setdefault(r.method, []).append(r)
    return {t: {m: sorted(v, key=lambda r: r.seed) for m, v in sorted(d.items(), key=lambda kv: _method_key(kv[0]))}
            for t, d in sorted(out.items())}


# ---------------------------------------------------------------------------------------------
# Curves and convergence (pure numpy)


def moving_average(y, *, window: int) -> np.ndarray:
    """Trailing NaN-skipping moving average along the last axis: ỹ_e = mean(y_{e-w+1} .. y_e).

    y [..., E] -> [..., E]; a point whose whole window is NaN stays NaN.
    """
    y = np.asarray(y, float)
    if not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be an integer >= 1, got {window!r}")
    if y.ndim < 1:
        raise ValueError(f"y must have at least one axis, got shape {y.shape}")
    ok = np.isfinite(y)
    pad = [(0, 0)] * (y.ndim - 1) + [(1, 0)]
    cs = np.pad(np.cumsum(np.where(ok, y, 0.0), axis=-1), pad)   # [..., E+1]
    cn = np.pad(np.cumsum(ok, axis=-1), pad)                      # [..., E+1]
    e = np.arange(y.shape[-1])
    lo = np.maximum(e + 1 - window, 0)
    tot = cs[..., e + 1] - cs[..., lo]
    cnt = cn[..., e + 1] - cn[..., lo]
    return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def eval_matrix(runs: Sequence[Run]) -> tuple[np.ndarray, np.ndarray]:
    """(steps [E], pass [S, E]) on the union of evaluation steps; NaN where a run has no point."""
    steps = np.unique(np.concatenate([r.eval_step for r in runs])) if runs else np.zeros(0, int)
    y = np.full((len(runs), steps.size), np.nan)
    for i, r in enumerate(runs):
        y[i, np.searchsorted(steps, r.eval_step)] = r.eval_pass
    return steps, y


def seed_mean(y) -> np.ndarray:
    """NaN-skipping mean over seeds: y [S, E] -> [E] (NaN where no seed has the point)."""
    y = np.asarray(y, float)
    ok = np.isfinite(y)
    return np.where(ok.any(0), np.where(ok, y, 0.0).sum(0) / np.maximum(ok.sum(0), 1), np.nan)


def reference_level(y, *, window: int, ref: str = "final") -> float:
    """Baseline reference level L from its per-seed curves y [S, E]: smoothed seed-mean, last point or max."""
    if ref not in ("final", "peak"):
        raise ValueError(f"ref must be 'final' or 'peak', got {ref!r}")
    curve = moving_average(seed_mean(y), window=window)
    curve = curve[np.isfinite(curve)]
    if curve.size == 0:
        return math.nan
    return float(curve[-1] if ref == "final" else curve.max())


def first_reach(steps, curve, level) -> tuple[np.ndarray, np.ndarray]:
    """First step at which ``curve >= level``: steps [E], curve [..., E], level [...] or scalar.

    Returns (step [...] float, inf where never reached; censored [...] bool). NaN points never count.
    """
    steps = np.asarray(steps)
    curve = np.asarray(curve, float)
    if steps.ndim != 1 or curve.shape[-1:] != steps.shape:
        raise ValueError(f"steps must be [E] and curve [..., E], got {steps.shape} and {curve.shape}")
    hit = curve >= np.asarray(level, float)[..., None]             # [..., E]
    ever = hit.any(-1)
    if steps.size == 0:
        return np.full(ever.shape, np.inf), np.ones(ever.shape, bool)
    first = np.where(ever, steps[np.argmax(hit, axis=-1)], np.inf)
    return first.astype(float), ~ever


def last_step(steps, y) -> np.ndarray:
    """Last evaluated step of each row of y [S, E] (-1 if none)."""
    ok = np.isfinite(np.asarray(y, float))
    if ok.shape[-1] == 0:
        return np.full(ok.shape[:-1], -1)
    idx = ok.shape[-1] - 1 - np.argmax(ok[..., ::-1], axis=-1)
    return np.where(ok.any(-1), np.asarray(steps)[idx], -1)


# ---------------------------------------------------------------------------------------------
# Bootstrap (vectorised over resamples, seeded)


def _ci(samples: np.ndarray, level: float) -> tuple[float, float]:
    finite = samples[np.isfinite(samples)]
    if finite.size < samples.size / 2:  # the statistic is infinite/undefined in most resamples
        return math.nan, math.nan
    lo, hi = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def _check_boot(n_boot: int, level: float) -> None:
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must lie in (0, 1), got {level!r}")


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den without warnings: x/0 = inf for x > 0, 0/0 = NaN (undefined: both reached at step 0)."""
    num, den = np.broadcast_arrays(np.asarray(num, float), np.asarray(den, float))
    fill = np.where(num == 0, np.nan, np.inf)
    return np.divide(num, den, out=fill, where=den != 0)


def bootstrap_mean(x, *, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> dict[str, Any]:
    """Mean of x [S] with a percentile bootstrap CI: {"value", "lo", "hi", "n"} (NaN CI if S < 2)."""
    x = np.asarray(x, float)
    if x.ndim != 1:
        raise ValueError(f"x must be [S], got shape {x.shape}")
    _check_boot(n_boot, level)
    if x.size == 0:
        return {"value": math.nan, "lo": math.nan, "hi": math.nan, "n": 0}
    if x.size < 2:
        return {"value": float(x.mean()), "lo": math.nan, "hi": math.nan, "n": 1}
    idx = np.random.default_rng(seed).integers(0, x.size, size=(n_boot, x.size))  # [n_boot, S]
    lo, hi = _ci(x[idx].mean(1), level)
    return {"value": float(x.mean()), "lo": lo, "hi": hi, "n": int(x.size)}


def _two_sample(a, b, stat, *, paired: bool, n_boot: int, level: float, seed: int) -> dict[str, Any]:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.ndim != 1 or b.ndim != 1:
        raise ValueError(f"samples must be 1-D [S], got shapes {a.shape} and {b.shape}")
    if paired and a.shape != b.shape:
        raise ValueError(f"paired bootstrap needs equal sample counts, got {a.size} and {b.size}")
    _check_boot(n_boot, level)
    out = {"value": math.nan, "lo": math.nan, "hi": math.nan, "n_a": int(a.size), "n_b": int(b.size),
           "paired": bool(paired)}
    if a.size == 0 or b.size == 0:
        return out
    out["value"] = float(stat(a.mean(), b.mean()))
    if min(a.size, b.size) < 2:
        return out
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, a.size, size=(n_boot, a.size))                     # [n_boot, Sa]
    ib = ia if paired else rng.integers(0, b.size, size=(n_boot, b.size))   # [n_boot, Sb]
    out["lo"], out["hi"] = _ci(stat(a[ia].mean(1), b[ib].mean(1)), level)
    return out


def bootstrap_ratio_of_means(num, den, *, paired: bool = False, n_boot: int = 2000, level: float = 0.95,
                             seed: int = 0) -> dict[str, Any]:
    """mean(num) / mean(den) with a seeded percentile bootstrap CI (inf when mean(den) = 0).

    Speed-up = mean_s(steps_base) / mean_s(steps_method). Unpaired: num [Sa] and den [Sb] resampled
    independently; paired: one index per resample for both (equal S). Efron & Tibshirani 1993, ch. 13.
    """
    return _two_sample(num, den, _ratio, paired=paired, n_boot=n_boot, level=level, seed=seed)


def bootstrap_diff_of_means(a, b, *, paired: bool = False, n_boot: int = 2000, level: float = 0.95,
                            seed: int = 0) -> dict[str, Any]:
    """mean(a) - mean(b) with a seeded percentile bootstrap CI (the equal-step improvement, a = method)."""
    return _two_sample(a, b, np.subtract, paired=paired, n_boot=n_boot, level=level, seed=seed)


def bootstrap_band(y, *, n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Seed-mean curve of y [S, E] and its pointwise bootstrap CI band (lo [E], hi [E]); NaN-skipping."""
    y = np.asarray(y, float)
    if y.ndim != 2:
        raise ValueError(f"y must be [S, E], got shape {y.shape}")
    _check_boot(n_boot, level)
    mean = seed_mean(y)
    if y.shape[0] < 2:
        return mean, mean.copy(), mean.copy()
    idx = np.random.default_rng(seed).integers(0, y.shape[0], size=(n_boot, y.shape[0]))  # [n_boot, S]
    yb = y[idx]                                                                              # [n_boot, S, E]
    ok = np.isfinite(yb)
    mb = np.where(ok.any(1), np.where(ok, yb, 0.0).sum(1) / np.maximum(ok.sum(1), 1), np.nan)  # [n_boot, E]
    with np.errstate(all="ignore"):
        lo, hi = np.nanquantile(mb, [(1 - level) / 2, (1 + level) / 2], axis=0) if np.isfinite(mb).any() else (mean, mean)
    return mean, np.asarray(lo), np.asarray(hi)


def curves_vs_wallclock(runs: Sequence[Run], *, num: int = 50, clip: float | None = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Held-out pass@1 on a common wall-clock grid: (t [G] s, pass [S, G]) by linear interpolation.

    Each run's evaluation after s updates sits at its cumulative train time before step s; the grid
    spans 0 .. the longest run, NaN beyond a run's own last evaluation.
    """
    xs, ys = [], []
    for r in runs:
        wall, _ = r.cumulative_cost(clip=clip)
        idx = np.minimum(r.eval_step, r.steps_done)
        xs.append(wall[idx] if r.steps_done else np.zeros(r.eval_step.shape))
        ys.append(r.eval_pass)
    tmax = max((float(x[-1]) for x in xs if x.size), default=0.0)
    grid = np.linspace(0.0, tmax, num)
    out = np.full((len(runs), num), np.nan)
    for i, (x, y) in enumerate(zip(xs, ys)):
        if x.size:
            out[i] = np.where(grid <= x[-1] + 1e-9, np.interp(grid, x, y), np.nan)
    return grid, out


# ---------------------------------------------------------------------------------------------
# Per-method statistics


def settled_reroll_rates(run: Run, *, settle_frac: float = 0.5) -> np.ndarray:
    """[K] count-weighted mean re-rollout pass rate per bucket over the last ``settle_frac`` of the
    run's train steps (NaN for a bucket with no re-roll there)."""
    if not 0.0 < settle_frac <= 1.0:
        raise ValueError(f"settle_frac must lie in (0, 1], got {settle_frac!r}")
    t0 = int(math.floor(run.steps_done * (1.0 - settle_frac)))
    rate, cnt = run.reroll_rate[t0:], run.count[t0:]         # [T', K]
    w = np.where(np.isfinite(rate), np.maximum(np.nan_to_num(cnt), 1.0), 0.0)
    tot = (np.nan_to_num(rate) * w).sum(0)
    return np.where(w.sum(0) > 0, tot / np.maximum(w.sum(0), 1e-12), np.nan)


def per_seed_convergence(runs: Sequence[Run], level: float, *, window: int,
                         clip: float | None = 5.0) -> dict[str, np.ndarray]:
    """Per-seed steps to reach ``level`` on each run's smoothed curve, with costs and censoring.

    Returns arrays [S]: steps (inf if censored), censored, last (last evaluated step),
    steps_bound (steps, or the last step for censored seeds), wall, tokens (to steps_bound).
    """
    steps, y = eval_matrix(runs)
    hit, cens = first_reach(steps, moving_average(y, window=window), level) if runs else (np.zeros(0), np.zeros(0, bool))
    last = last_step(steps, y).astype(float) if runs else np.zeros(0)
    bound = np.where(cens, last, hit)
    cost = np.array([r.cost_at(b, clip=clip) for r, b in zip(runs, bound)], float).reshape(len(runs), 2)
    return {"steps": hit, "censored": cens, "last": last, "steps_bound": bound, "wall": cost[:, 0], "tokens": cost[:, 1]}


def _pair(base: Sequence[Run], meth: Sequence[Run], bx: np.ndarray, mx: np.ndarray):
    common = sorted({r.seed for r in base} & {r.seed for r in meth})
    bi = [next(i for i, r in enumerate(base) if r.seed == s) for s in common]
    mi = [next(i for i, r in enumerate(meth) if r.seed == s) for s in common]
    return bx[bi], mx[mi], common


def analyze_task(by_method: dict[str, list[Run]], *, baseline: str = "baseline", window: int = 3,
                 ref: str = "final", settle_frac: float = 0.5, at_step: int | None = None, paired: bool = False,
                 n_boot: int = 2000, level: float = 0.95, seed: int = 0, time_clip: float | None = 5.0) -> dict[str, Any]:
    """All statistics of one task: {method: {...}} plus the reference level. See the module docstring."""
    if baseline not in by_method:
        raise ValueError(f"baseline method {baseline!r} not among the runs' methods {sorted(by_method)}")
    boot = dict(n_boot=n_boot, level=level, seed=seed)
    all_runs = by_method
    by_method = {m: [r for r in rs if r.status != "empty"] for m, rs in by_method.items()}
    base_runs = by_method[baseline]
    if not base_runs:
        raise ValueError(f"baseline method {baseline!r} has no run with a train line ({len(all_runs[baseline])} empty)")
    ref_runs = [r for r in base_runs if r.complete] or base_runs
    bsteps, by = eval_matrix(ref_runs)
    level_ = reference_level(by, window=window, ref=ref)
    if at_step is None:
        planned = [r.planned_steps for r in ref_runs if r.planned_steps is not None]
        at_step = int(max(planned)) if planned else int(bsteps[-1]) if bsteps.size else 0
    base_conv = per_seed_convergence(base_runs, level_, window=window, clip=time_clip)
    start = moving_average(seed_mean(by), window=window)[:1]
    degenerate = bool(start.size and start[0] >= level_)
    out: dict[str, Any] = {"baseline": baseline, "reference_level": level_, "ref": ref, "window": window,
                           "degenerate": degenerate, "time_clip": time_clip,
                           "settle_frac": settle_frac, "at_step": at_step, "paired": paired, "methods": {}}
    for method, runs in by_method.items():
        if not runs:
            out["methods"][method] = {"seeds": [], "status": [], "n_runs": 0, "n_complete": 0,
                                      "excluded_empty": [r.name for r in all_runs[method]]}
            continue
        steps, y = eval_matrix(runs)
        mean_curve = moving_average(seed_mean(y), window=window)
        mc_step, mc_cens = first_reach(steps, mean_curve, level_)
        conv = base_conv if method == baseline else per_seed_convergence(runs, level_, window=window, clip=time_clip)
        rec: dict[str, Any] = {
            "seeds": [r.seed for r in runs], "status": [r.describe() for r in runs],
            "n_runs": len(runs), "n_complete": sum(r.complete for r in runs),
            "excluded_empty": [r.name for r in all_runs[method] if r.status == "empty"],
            "mean_curve_steps": float(mc_step), "mean_curve_censored": bool(mc_cens),
            "mean_curve_last_step": int(steps[np.isfinite(mean_curve)][-1]) if np.isfinite(mean_curve).any() else -1,
            "per_seed": {k: v.tolist() for k, v in conv.items()},
            "n_censored": int(conv["censored"].sum()),
        }
        for key in ("steps_bound", "wall", "tokens"):
            bx, mx = base_conv[key], conv[key]
            if paired:
                bx, mx, common = _pair(base_runs, runs, bx, mx)
                rec["paired_seeds"] = common
            name = {"steps_bound": "speedup_steps", "wall": "speedup_wall", "tokens": "speedup_tokens"}[key]
            rec[name] = (bootstrap_ratio_of_means(bx, mx, paired=paired, **boot) if method != baseline else
                         {"value": 1.0, "lo": 1.0, "hi": 1.0, "n_a": int(bx.size), "n_b": int(mx.size),
                          "paired": paired})  # the reference itself, by definition
            rec[name]["bound"] = "upper" if conv["censored"].any() and method != baseline else "exact"
            rec[name]["n_censored_method"] = int(conv["censored"].sum())
            rec[name]["n_censored_baseline"] = int(base_conv["censored"].sum())
        for key in ("wall", "tokens", "steps_bound"):
            rec[f"{key}_to_converge"] = bootstrap_mean(conv[key], **boot)
        # equal-step improvement
        def at(rs):
            vals = [r.eval_pass[r.eval_step == at_step] for r in rs]
            return np.array([v[0] for v in vals if v.size], float), [r.seed for r, v in zip(rs, vals) if not v.size]
        m_at, m_missing = at(runs)
        b_at, _ = at(base_runs)
        if paired:
            ms = [r.seed for r in runs if (r.eval_step == at_step).any()]
            bs = [r.seed for r in base_runs if (r.eval_step == at_step).any()]
            common = sorted(set(ms) & set(bs))
            m_at = np.array([m_at[ms.index(s)] for s in common]); b_at = np.array([b_at[bs.index(s)] for s in common])
        rec["pass_at_step"] = bootstrap_mean(m_at, **boot)
        rec["equal_step_improvement"] = bootstrap_diff_of_means(m_at, b_at, paired=paired, **boot)
        rec["equal_step_missing_seeds"] = m_missing
        rec["final_pass"] = bootstrap_mean(np.array([r.eval_pass[-1] for r in runs if r.eval_pass.size]), **boot)
        # controller
        ks = runs[0].ks if runs else ()
        settled = np.array([settled_reroll_rates(r, settle_frac=settle_frac) for r in runs if r.ks == ks], float)
        rec["ks"] = list(ks)
        rec["settled_reroll"] = {str(k): bootstrap_mean(settled[:, j][np.isfinite(settled[:, j])], **boot)
                                 for j, k in enumerate(ks)} if settled.size else {}
        out["methods"][method] = rec
    return out


def analyze(runs: Sequence[Run], **kw) -> dict[str, Any]:
    """``analyze_task`` for every task among ``runs`` ({task: ...}); tasks without the baseline are
    reported with an "error" entry, not dropped. Keywords as ``analyze_task``."""
    out = {}
    for task, by_method in group_runs(runs).items():
        try:
            out[task] = analyze_task(by_method, **kw)
        except ValueError as e:
            out[task] = {"error": str(e), "methods": {m: {"seeds": [r.seed for r in rs],
                                                          "status": [r.describe() for r in rs]}
                                                      for m, rs in by_method.items()}}
    return out


# ---------------------------------------------------------------------------------------------
# Tables


def _fmt(x: float, nd: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else "inf" if math.isinf(x) else f"{x:.{nd}f}"


def _fmt_ci(d: dict, nd: int = 2, bound: bool = False) -> str:
    s = f"{_fmt(d['value'], nd)} [{_fmt(d['lo'], nd)}, {_fmt(d['hi'], nd)}]"
    if bound and d.get("bound") == "upper":
        s += f" (<=, {d['n_censored_method']} censored)"
    return s


def runs_table(runs: Sequence[Run]) -> str:
    """Markdown table of every run found, with its status (partial/killed runs included)."""
    lines = ["| run | task | method | seed | steps done / planned | evals | status | notes |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r.name} | {r.task} | {r.method} | {r.seed} | {r.steps_done} / "
                     f"{'?' if r.planned_steps is None else r.planned_steps} | {r.eval_step.size} | {r.describe()} | "
                     f"{'; '.join(r.problems)} |")
    return "\n".join(lines)


def convergence_table(task_result: dict[str, Any]) -> str:
    """Markdown: steps/wall/tokens to converge and speed-ups (95% CIs), paper's speed-up beside."""
    t = task_result
    if "error" in t:
        return f"(no analysis: {t['error']})"
    ref = f"reference level {t['reference_level']:.3f} ({t['ref']} of the smoothed baseline seed-mean, window {t['window']})"
    clip = t.get("time_clip")
    ref += "; wall-clock: " + (f"step times above {clip:g}x the run's median counted as the median" if clip else "raw")
    if t.get("degenerate"):
        ref += (" -- DEGENERATE: the baseline never rose above its initial value, every curve 'converges' at step 0"
                " and the speed-ups are undefined")
    lines = [ref, "",
             "| method | runs (complete) | steps, mean curve | steps per seed (censored) | speed-up steps | "
             "speed-up wall-clock | speed-up tokens | wall-clock to converge (s) | paper speed-up |",
             "|---|---|---|---|---|---|---|---|---|"]
    for m, r in t["methods"].items():
        if not r["n_runs"]:
            lines.append(f"| {m} | 0 (empty: {', '.join(r['excluded_empty'])}) |" + " - |" * 7)
            continue
        mc = (f">= {r['mean_curve_last_step']} (censored)" if r["mean_curve_censored"] else f"{r['mean_curve_steps']:.0f}")
        ps = ", ".join(f">={b:.0f}" if c else f"{s:.0f}" for s, b, c in
                       zip(r["per_seed"]["steps"], r["per_seed"]["steps_bound"], r["per_seed"]["censored"]))
        lines.append(f"| {m} | {r['n_runs']} ({r['n_complete']}) | {mc} | {ps} ({r['n_censored']}) | "
                     f"{_fmt_ci(r['speedup_steps'], bound=True)} | {_fmt_ci(r['speedup_wall'], bound=True)} | "
                     f"{_fmt_ci(r['speedup_tokens'], bound=True)} | {_fmt_ci(r['wall_to_converge'], 1)} | "
                     f"{_fmt(PAPER_ABLATION_SPEEDUP.get(m, math.nan))} |")
    return "\n".join(lines)


def equal_step_table(task_result: dict[str, Any]) -> str:
    """Markdown: held-out pass@1 at the fixed step and the improvement over the baseline (pp)."""
    t = task_result
    if "error" in t:
        return f"(no analysis: {t['error']})"
    lines = [f"| method | pass@1 at step {t['at_step']} | improvement over {t['baseline']} (pp) | final pass@1 | missing seeds |",
             "|---|---|---|---|---|"]
    for m, r in t["methods"].items():
        if not r["n_runs"]:
            lines.append(f"| {m} | - | - | - | all runs empty |")
            continue
        d = r["equal_step_improvement"]
        pp = {k: (v * 100 if isinstance(v, float) else v) for k, v in d.items()}
        lines.append(f"| {m} | {_fmt_ci(r['pass_at_step'], 3)} | {_fmt_ci(pp, 1)} | {_fmt_ci(r['final_pass'], 3)} | "
                     f"{', '.join(map(str, r['equal_step_missing_seeds'])) or '-'} |")
    return "\n".join(lines)


def bucket_table(task_result: dict[str, Any]) -> str:
    """Markdown: settled re-rollout pass rate per bucket (95% CI over seeds) next to the paper's."""
    t = task_result
    if "error" in t:
        return f"(no analysis: {t['error']})"
    ks = sorted({int(k) for r in t["methods"].values() for k in r.get("settled_reroll", {})})
    lines = ["| method | " + " | ".join(f"k={k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for m, r in t["methods"].items():
        cells = [_fmt_ci(r["settled_reroll"][str(k)], 3) if str(k) in r.get("settled_reroll", {}) else "-" for k in ks]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    lines.append("| paper (reported) | " + " | ".join(_fmt(PAPER_SETTLED_REROLL.get(k, math.nan), 3) for k in ks) + " |")
    return "\n".join(lines)


def to_jsonable(x):
    """Replaces non-finite floats by None and numpy scalars/arrays by Python values (strict JSON)."""
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return to_jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


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
        ax.text(xi - 0.18, (v if math.isfinite(v) else 0) + 0.03, f"{_fmt(v)}{note}", ha="center", fontsize=7)
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


# ---------------------------------------------------------------------------------------------
# A tiny run set (notebooks and tests when no saved runs exist)


def make_tiny_runs(out_dir, *, methods: Sequence[str] = ("baseline", "ps_ada"), seeds: Sequence[int] = (0, 1),
                   steps: int = 8, eval_every: int = 2, sft_steps: int = 60, task: str = "arith") -> list[pathlib.Path]:
    """Trains a tiny run per (method, seed) into ``out_dir/<task>-<method>-s<seed>`` with the tiny
    model and task of the trainer tests (``tests/test_trainer.py``; 32 eval problems), skipping runs already complete;
    returns the run directories. The shared warm start is built first (``methods=()``: only that).
    An exclusive lock on ``out_dir/.lock`` serialises concurrent callers."""
    import fcntl

    from prs import prefix as ps
    from prs.model import ModelConfig
    from prs.runner import RunConfig, base_params, run
    from prs.tasks.registry import make_task
    from prs.trainer import RLConfig

    tk = make_task(task, min_terms=2, max_terms=4)
    model = ModelConfig.preset("tiny", vocab_size=tk.vocab_size, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2,
                               head_dim=8, d_ff=64)
    rl = RLConfig(tasks_per_step=4, group_size=8, eval_count=32, eval_samples=1)  # eval rows = train rows: one sampler compile
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
    for p in sorted(pathlib.Path(__file__).resolve().parent.rglob("*.py")):
        h.update(p.read_bytes())
    return pathlib.Path(tempfile.gettempdir()) / f"prs_tiny_runs-{h.hexdigest()[:12]}"


def find_run_root(candidates: Iterable[Any]) -> pathlib.Path | None:
    """The first candidate directory (None entries skipped) holding at least one run, else None."""
    for c in candidates:
        if c and pathlib.Path(c).is_dir() and find_run_dirs(c):
            return pathlib.Path(c)
    return None
