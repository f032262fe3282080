"""A user's reward function, loaded from a file or a module: TRL's contract, checked row by row.

    fn(completions: list[str], **columns) -> list[float]

``completions`` are the decoded responses [R]; every dataset column arrives as a keyword argument
holding a list aligned with ``completions`` (row r of each list is the dataset row rollout r
answers; a nested column such as verl's ``reward_model`` arrives as its dicts). This is TRL's
``GRPOTrainer(reward_funcs=[fn])`` signature for the standard (string) format (TRL docs, "Using a
custom reward function"); verl's per-row ``compute_score(data_source, solution_str, ground_truth,
extra_info)`` is wrapped in three lines (``docs/your_own_setup.md``).

Checks (each a ``RewardError``, one line naming the function and the dataset row): the function
raises (the row named is the first one that raises when called alone), returns something other than
a list / tuple / 1-d array of R numbers, a non-number (``None``, a string), NaN or ±Inf, or, unless
``graded=True``, a value other than 0 and 1.

Success rule (unchanged for a custom reward): the trainer counts a rollout as a success iff its
reward >= 1 -- Prefix Sampling's bucket count k = #{r >= 1} of a group, the choice of successful and
failed sources, the pass rates, ``eval/pass_at_1`` and pass@k; the advantages use the raw reward.
So a graded reward must put 1.0 at "solved": a partial-credit 0.5 is a failure for the buckets and
for pass@k and counts at its value in the advantages. ``graded=False`` (the default) refuses any
value but 0 and 1, so a graded reward is a choice made in the config, never a surprise.

``workers = w > 1`` scores in a persistent pool of ``w`` processes (``spawn``): the rows are cut into
contiguous chunks, each worker imports the function itself (by file path or module name) and calls it
on its chunks; the chunks come back in order. A row-wise function (TRL's contract: each completion
scored on its own) gives the same rewards as the serial call. Pays off when the function is slow
(math-verify grades ~50 responses/s per core, ``docs/real_models.md``).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import math
import numbers
import pathlib
import sys
from typing import Any, Callable

import numpy as np


class RewardError(ValueError):
    """A user's reward function failed or returned a bad value (one line)."""


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """Where the reward function lives and how it is called (config node ``reward``).

    Exactly one of ``path`` (a ``.py`` file) and ``module`` (an importable ``pkg.mod``) when a custom
    reward is used; neither: the task's own verifier. ``name``: the function in it. ``workers``: score
    in that many processes (0 or 1: serial). ``graded``: accept rewards other than 0 and 1 (the module
    docstring says what a success is then)."""

    path: str | None = None
    module: str | None = None
    name: str | None = None
    workers: int = 0
    graded: bool = False

    def __post_init__(self):
        if self.path and self.module:
            raise ValueError(f"reward: give reward.path or reward.module, not both (path={self.path!r}, "
                             f"module={self.module!r})")
        if (self.path or self.module) and not self.name:
            raise ValueError("reward.name: the function to call in reward.path / reward.module is missing "
                             "(e.g. reward.name=compute_score)")
        if self.name and not (self.path or self.module):
            raise ValueError(f"reward.name={self.name!r} needs reward.path=FILE.py or reward.module=pkg.mod")
        if not (isinstance(self.workers, int) and not isinstance(self.workers, bool) and self.workers >= 0):
            raise ValueError(f"reward.workers must be an int >= 0 (0: serial), got {self.workers!r}")
        if not isinstance(self.graded, bool):
            raise ValueError(f"reward.graded must be true or false, got {self.graded!r}")

    @property
    def enabled(self) -> bool:
        return bool(self.path or self.module)


def _spec(cfg: RewardConfig) -> tuple[str | None, str | None, str]:
    path = str(pathlib.Path(cfg.path).expanduser().resolve()) if cfg.path else None
    return path, cfg.module, cfg.name


@functools.lru_cache(maxsize=None)
def _load(path: str | None, module: str | None, name: str) -> Callable:
    """The function ``name`` of the file ``path`` or the module ``module`` (cached per process)."""
    where = path or module
    if path:
        p = pathlib.Path(path)
        if not p.is_file():
            raise RewardError(f"reward.path={path!r}: no such file")
        mod_name = f"_prs_reward_{hashlib.sha256(path.encode()).hexdigest()[:12]}"
        spec = importlib.util.spec_from_file_location(mod_name, p)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = mod  # so pickling and dataclasses inside the file work
        try:
            spec.loader.exec_module(mod)
        except Exception as e:
            del sys.modules[mod_name]
            raise RewardError(f"reward.path={path!r}: importing it raised {type(e).__name__}: {e}") from None
    else:
        try:
            mod = importlib.import_module(module)
        except Exception as e:
            raise RewardError(f"reward.module={module!r}: importing it raised {type(e).__name__}: {e}") from None
    fn = getattr(mod, name, None)
    if fn is None or not callable(fn):
        found = sorted(k for k, v in vars(mod).items() if callable(v) and not k.startswith("_"))
        raise RewardError(f"reward.name={name!r}: {where} has no function of that name; it defines {found}")
    return fn


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, np.ndarray)


def check_rewards(out, n: int, *, label: str, where: list[str], graded: bool, offset: int = 0) -> np.ndarray:
    """``out`` of a reward call on ``n`` completions as float64 [n], or ``RewardError`` naming the
    first bad row (``where[offset + i]``)."""
    if isinstance(out, np.ndarray):
        if out.ndim != 1:
            raise RewardError(f"{label} returned an array of shape {out.shape} for {n} completions; it must "
                              f"return one number per completion")
        out = out.tolist()
    if not isinstance(out, (list, tuple)):
        raise RewardError(f"{label} returned a {type(out).__name__}; it must return a list of {n} floats")
    if len(out) != n:
        raise RewardError(f"{label} returned {len(out)} rewards for {n} completions ({where[offset]} .. "
                          f"{where[offset + n - 1]})")
    for i, v in enumerate(out):
        if not _is_number(v):
            raise RewardError(f"{label} returned {v!r} (a {type(v).__name__}, not a number) for {where[offset + i]}")
        if not math.isfinite(float(v)):
            raise RewardError(f"{label} returned {float(v)} for {where[offset + i]}; rewards must be finite")
        if not graded and float(v) not in (0.0, 1.0):
            raise RewardError(f"{label} returned {v!r} for {where[offset + i]}, but the reward must be 0 or 1 unless "
                              f"reward.graded=true (then a rollout counts as a success for Prefix Sampling's "
                              f"buckets and pass@k iff its reward >= 1)")
    return np.asarray(out, np.float64)


def _call_chunk(spec, completions: list[str], columns: dict[str, list], *, label: str, where: list[str],
                graded: bool, offset: int = 0) -> np.ndarray:
    """The function on one chunk, checked; a raise names the first row that raises alone."""
    fn = _load(*spec)
    try:
        out = fn(list(completions), **{k: list(v) for k, v in columns.items()})
    except Exception as e:
        for i in range(len(completions)):  # find the row: call the function on each row alone
            try:
                fn([completions[i]], **{k: [v[i]] for k, v in columns.items()})
            except Exception as e1:
                raise RewardError(f"{label} raised {type(e1).__name__}: {e1} on {where[offset + i]}") from None
        raise RewardError(f"{label} raised {type(e).__name__}: {e} on the batch {where[offset]} .. "
                          f"{where[offset + len(completions) - 1]} (every row alone scores)") from None
    return check_rewards(out, len(completions), label=label, where=where, graded=graded, offset=offset)


def _worker(args) -> np.ndarray:
    """``_call_chunk`` in a pool process (picklable by name)."""
    spec, completions, columns, kw = args
    return _call_chunk(spec, completions, columns, **kw)


@functools.lru_cache(maxsize=None)
def _pool(workers: int):
    """A persistent ``spawn`` pool (never a fork of a multithreaded JAX process), shut down at exit."""
    import atexit
    import concurrent.futures
    import multiprocessing

    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    atexit.register(pool.shutdown)
    return pool


@dataclasses.dataclass(frozen=True)
class CustomReward:
    """A loaded reward function: ``reward(completions, columns, where) -> float64 [R]``."""

    cfg: RewardConfig

    def __post_init__(self):
        _load(*_spec(self.cfg))  # a missing file / function fails at start-up, not at the first step

    @property
    def label(self) -> str:
        path, module, name = _spec(self.cfg)
        return f"reward function {name} ({path or module})"

    def provenance(self) -> dict[str, Any]:
        """``{"name", "path" | "module", "file", "sha256"}``: the function and a hash of its source file."""
        path, module, name = _spec(self.cfg)
        fn = _load(path, module, name)
        try:
            import inspect

            file = path or inspect.getsourcefile(fn)
        except TypeError:
            file = None
        digest = hashlib.sha256(pathlib.Path(file).read_bytes()).hexdigest() if file else None
        return {"name": name, "path": path, "module": module, "file": file, "sha256": digest,
                "graded": self.cfg.graded, "workers": self.cfg.workers}

    def __call__(self, completions: list[str], columns: dict[str, list], where: list[str]) -> np.ndarray:
        """Rewards [R] of ``completions`` with the aligned ``columns`` (each a list of R values);
        ``where[r]`` names rollout r's dataset row for errors."""
        n = len(completions)
        bad = [k for k, v in columns.items() if len(v) != n]
        if bad or len(where) != n:
            raise ValueError(f"internal: reward columns {bad} or row names do not align with {n} completions")
        if "completions" in columns:
            raise RewardError("the dataset has a column named 'completions', which clashes with the reward "
                              "function's first argument; rename the column")
        kw = {"label": self.label, "where": where, "graded": self.cfg.graded}
        spec = _spec(self.cfg)
        w = self.cfg.workers
        if w <= 1 or n <= 1:
            return _call_chunk(spec, completions, columns, **kw)
        size = -(-n // (4 * w))
        jobs = [(spec, completions[a:a + size], {k: v[a:a + size] for k, v in columns.items()}, {**kw, "offset": a})
                for a in range(0, n, size)]
        return np.concatenate(list(_pool(w).map(_worker, jobs)))
