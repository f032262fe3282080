"""A training run: warm start, the RL loop, evaluation, checkpoints, resume, logs and figures.

Everything a run writes goes to its output directory:

    metrics.jsonl      one line per training step ({"kind": "train", ...}) and per evaluation
                       ({"kind": "eval", "step": s, "eval/pass_at_1": ...}, params after s updates)
    summary.json       configuration, final/peak held-out pass rate, totals, timings, and the warm
                       start (``warm_start``: its source, cache path, loss per cycle, attempts,
                       held-out demonstration loss; ``base_params``)
    curves.png         held-out and training pass rates, ρ_b and re-rollout pass rates per bucket
    checkpoints/       orbax checkpoints of the full train state every ``ckpt_every`` steps and at the end
    config.json        the configuration the directory was started with (``prs.rl.rundir``)
    error.json         only if the run stopped on an error: what, and at which step
    wandb/             wandb logs (offline by default; ``wandb_mode="online"`` to sync)

Resume: if ``checkpoints/`` holds a checkpoint, the run restores the latest one, drops the
metrics lines at and after its step (and a truncated last line left by a kill), and continues. A
finished run is not redone: re-running it logs "already complete (step N)" and returns its summary;
re-running it with a larger ``steps`` extends it (one line says "extending run X from N to M
steps"), a smaller one is refused.
A directory only resumes the configuration it was started with (``RunDirError`` names the
differing keys), and is checked to be writable with room for its checkpoints before any training.
Ctrl-C (SIGINT) stops the run at the end of the current step, checkpoints it and raises
``Interrupted`` (a ``KeyboardInterrupt``; ``python -m experiments.train`` prints one line and exits
130); a second Ctrl-C interrupts at once. A non-finite loss or gradient norm stops the run
(``NonFiniteError``, naming the step; the last good checkpoint is kept), or with ``on_nonfinite="skip"`` the step's update is dropped and training goes on. Because every step's randomness is a
function of (seed, step) (see ``prs.rl.trainer``), the resumed run writes the same metrics as an
uninterrupted run (wall-clock fields aside). Several processes: checkpoints are written
collectively into one directory every process must see (a shared disk), and whether the run is
complete, and the summary returned, are process 0's (``prs.parallel.multihost``).

The supervised warm start is built once per (task, model, warm-start settings) and cached under
``base_dir`` so that every run of a sweep starts from the same base policy.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import pathlib
import signal
import sys
import threading
import time
from typing import Any

import jax
import numpy as np

from prs.core import prefix as ps
from prs.models.qwen3 import ModelConfig, init_params
from prs.parallel import multihost
from prs.rl import rundir
from prs.rl.provenance import code_state
from prs.rl.rundir import RunDirError  # noqa: F401  (re-exported: the run directory cannot be used)
from prs.rl.trainer import RLConfig, Trainer, TrainState, checkpoint_tree, heldout_demo_loss, supervised_warm_start

WARM_START_FACTS = "warm_start.json"  # in a cached warm start's directory: how it was built (base_params)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Loop settings of a run.

    Attributes:
      steps: RL steps.  seed: the run's seed (data, sampling, source choice).
      eval_every: held-out evaluation period (steps); also evaluated at the end.
      ckpt_every: checkpoint period (steps); 0 = no checkpoints.
      sft_steps, sft_batch, sft_lr, sft_seed: the supervised warm start (0 steps = random init).
      sft_until_loss, sft_max_cycles, sft_attempts: warm restarts while the warm start's loss stays
        above ``sft_until_loss``, then fresh initialisations (``supervised_warm_start``).
      base_dir: cache of warm-start parameters shared by runs (default ``<out_dir>/../base``).
      wandb_mode: ``disabled``, ``offline`` (default, into ``<out_dir>/wandb``) or ``online``.
      wandb_project: wandb project name.
      progress: print a progress bar / periodic lines.
      init_checkpoint: a Hugging Face checkpoint directory (``prs.models.hf``); when set, its weights are
        the starting policy and replace the supervised warm start (``sft_*`` are ignored).
      on_nonfinite: a non-finite loss or gradient norm ``stop``s the run (default; ``NonFiniteError``)
        or ``skip``s that step's update (params, optimiser and controller unchanged; costs a copy of
        the state per step).
      save_hf_every: every this many steps (and at the end) the parameters are also written as a
        Hugging Face directory ``<out_dir>/hf/step_<k>`` (``prs.models.hf.save_checkpoint`` with
        ``init_checkpoint``'s tokenizer files, as ``python -m experiments.export`` writes); 0 = never.
        One process only.
    """

    steps: int = 200
    seed: int = 0
    eval_every: int = 10
    ckpt_every: int = 50
    sft_steps: int = 400
    sft_batch: int = 64
    sft_lr: float = 3e-3
    sft_seed: int = 0
    sft_until_loss: float | None = None
    sft_max_cycles: int = 1
    sft_attempts: int = 1
    base_dir: str | None = None
    wandb_mode: str = "offline"
    wandb_project: str = "prs"
    progress: bool = True
    init_checkpoint: str | None = None
    on_nonfinite: str = "stop"
    save_hf_every: int = 0

    def __post_init__(self):
        if self.steps < 1:
            raise ValueError(f"RunConfig.steps must be >= 1, got {self.steps}")
        if self.eval_every < 1:
            raise ValueError(f"RunConfig.eval_every must be >= 1, got {self.eval_every}")
        if self.wandb_mode not in ("disabled", "offline", "online"):
            raise ValueError(f"RunConfig.wandb_mode={self.wandb_mode!r}; choose disabled, offline or online")
        if self.on_nonfinite not in ("stop", "skip"):
            raise ValueError(f"RunConfig.on_nonfinite={self.on_nonfinite!r}; choose stop or skip")
        if self.save_hf_every < 0:
            raise ValueError(f"RunConfig.save_hf_every must be >= 0 (0 = never), got {self.save_hf_every}")
        if self.ckpt_every < 0:
            raise ValueError(f"RunConfig.ckpt_every must be >= 0 (0 = no checkpoints), got {self.ckpt_every}")


class NonFiniteError(RuntimeError):
    """A training step produced a non-finite loss or gradient norm (``on_nonfinite="stop"``)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped the run at the end of a step: ``step`` steps are done and, with
    ``ckpt_every > 0``, checkpointed, so re-running the same command resumes. The message is one line."""

    def __init__(self, message: str, *, step: int):
        super().__init__(message)
        self.step = step


class _StopFlag:
    """Set by the first SIGINT while the RL loop runs, checked between steps (``run``); that SIGINT
    raises nothing, so no step, checkpoint write or ``__del__`` / gc callback (where jax's
    ``_xla_gc_callback`` would swallow a ``KeyboardInterrupt``) is cut in the middle. Python's default handler comes
    back with it: a second Ctrl-C interrupts at once. Installed only over the default handler, in
    the main thread of a single process (several processes would have to agree on the step to stop
    at: they keep the default handler)."""

    def __init__(self):
        self.is_set = False
        self.installed = (threading.current_thread() is threading.main_thread() and jax.process_count() == 1
                          and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if self.installed:
            signal.signal(signal.SIGINT, self._handler)

    def _handler(self, signum, frame) -> None:
        self.is_set = True
        signal.signal(signal.SIGINT, signal.default_int_handler)

    def restore(self) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            self.installed = False


class Progress:
    """A one-line progress bar on a terminal, periodic lines otherwise (logs, CI).

    The rate (and ETA) counts the steps this process finished after its first one, over the time
    since that first one: the first step carries compilation (and a resumed run's restore and
    evaluation), which would inflate the ETA many times over right after a resume. Until a second step
    finishes the ETA reads ``--``. ``text`` may be a callable, called only when a line is written
    (e.g. a device value: no host sync on the steps that print nothing)."""

    def __init__(self, total: int, *, start: int = 0, enabled: bool = True, every_s: float = 5.0, stream=None,
                 label: str = ""):
        self.total, self.start, self.enabled, self.every_s = total, start, enabled, every_s
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.label = label
        self.first: tuple[int, float] | None = None  # (steps done, time) at the first update
        self.last = -math.inf

    def update(self, done: int, text) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.first is None:
            self.first = (done, now)
        if not self.tty and now - self.last < self.every_s and done < self.total:
            return
        self.last = now
        n, t = done - self.first[0], now - self.first[1]
        speed = f"{n / t:.2f} step/s eta {(self.total - done) * t / n:.0f}s" if n > 0 and t > 0 else "eta --"
        width = 24
        fill = int(width * done / max(self.total, 1))
        bar = "#" * fill + "." * (width - fill)
        line = f"{self.label}[{bar}] {done}/{self.total} {text() if callable(text) else text} {speed}"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done >= self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def final(self, text: str) -> None:
        """One closing line after the last step (e.g. the final evaluation, which runs after it)."""
        if self.enabled:
            self.stream.write(f"{self.label}{text}\n")
            self.stream.flush()


def _hash(obj: Any) -> str:
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def _sft_progress(run: RunConfig) -> Progress:
    """The warm start's display: the RL loop's bar on a terminal, a line every 30 s otherwise."""
    return Progress(run.sft_steps, enabled=run.progress, every_s=30.0, label="[sft] ")


def base_params(task, model_cfg: ModelConfig, run: RunConfig, base_dir: pathlib.Path, *, log=print,
                shardings=None, facts: dict | None = None):
    """Warm-start parameters, trained once and cached under ``base_dir/<hash>``. With ``shardings``
    (``Trainer.param_shardings``) a checkpoint or cached warm start is read straight into that
    layout, each device reading only its slice (no whole copy on one device), and a fresh
    initialisation is created sharded (``prs.parallel.multihost.sharded_params``).

    ``facts`` (a dict, filled in place; ``summary.json``'s ``warm_start``): ``source`` (``checkpoint``,
    ``random_init``, ``built``, ``cache``), ``cache`` (the cached directory, or None), and for a
    supervised warm start the build's record (``supervised_warm_start``'s ``report``: loss per cycle,
    cycles, attempts) and ``heldout_loss`` (``heldout_demo_loss``), logged once when built and kept in
    ``<cache>/warm_start.json`` for the runs that reuse it."""
    import orbax.checkpoint as ocp

    from prs.parallel.multihost import sharded_params

    facts = {} if facts is None else facts
    if run.init_checkpoint:
        from prs.models import hf

        log(f"[base] loading {run.init_checkpoint} (replaces the warm start)")
        facts.update(source="checkpoint", checkpoint=str(run.init_checkpoint), cache=None)
        return hf.load_params(hf.checkpoint_tensors(run.init_checkpoint), model_cfg, shardings=shardings)
    if run.sft_steps == 0:
        facts.update(source="random_init", seed=run.sft_seed, cache=None)
        return sharded_params(lambda: init_params(model_cfg, jax.random.PRNGKey(run.sft_seed)), shardings)
    # a task may name what its warm start depends on (trap: not the RL reward), so arms share one
    restarts = () if run.sft_until_loss is None else (run.sft_until_loss, run.sft_max_cycles)  # defaults add nothing to the key
    restarts += () if run.sft_attempts == 1 else (("attempts", run.sft_attempts),)
    key = _hash((getattr(task, "warm_start_key", task), model_cfg, run.sft_steps, run.sft_batch, run.sft_lr, run.sft_seed,
                 *restarts))
    path = (base_dir / f"base-{key}").resolve()
    ckptr = ocp.StandardCheckpointer()

    def load():
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct,
                                jax.eval_shape(lambda k: init_params(model_cfg, k), jax.random.PRNGKey(0)))
        if shardings is not None:  # restored straight into the trainer's layout
            abstract = jax.tree.map(lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh),
                                    abstract, shardings)
        recorded = path / WARM_START_FACTS
        facts.clear()
        facts.update(json.loads(recorded.read_text()) if recorded.exists() else
                     {"note": f"a cache built before {WARM_START_FACTS} was recorded: no build record"})
        facts.update(source="cache", cache=str(path))
        log(f"[base] reusing warm-start parameters {path}" + (
            f" (held-out demonstration loss {facts['heldout_loss']:.4f})" if facts.get("heldout_loss") is not None else ""))
        return ckptr.restore(path, abstract)

    def build():
        report = {}
        params = supervised_warm_start(task, model_cfg, steps=run.sft_steps, batch=run.sft_batch, lr=run.sft_lr,
                                       seed=run.sft_seed, until_loss=run.sft_until_loss,
                                       max_cycles=run.sft_max_cycles, attempts=run.sft_attempts, log=log,
                                       progress=_sft_progress(run), report=report)
        report["heldout_loss"] = round(heldout_demo_loss(task, model_cfg, params, seed=run.sft_seed,
                                                         chunk=run.sft_batch), 6)
        facts.update(source="built", **report)
        cycles = "; ".join(f"attempt {a + 1}: " + ", ".join(f"{x:.4f}" for x in c)
                           for a, c in enumerate(report["cycle_losses"]))
        log(f"[base] warm start: held-out demonstration loss {report['heldout_loss']:.4f} (512 problems it never "
            f"drew); mean loss of each cycle's last steps: {cycles}; kept attempt {report['kept_attempt']}")
        return params, report

    if path.exists():
        return load()
    if jax.process_count() > 1:  # orbax saves are collective and the cache is one process's: not cached
        log(f"[base] supervised warm start on every process ({jax.process_count()}), not cached: build {path} "
            "with one process first to reuse it")
        facts.update(cache=None)
        return build()[0]
    # Concurrent sweep jobs (joblib, slurm on a shared disk) take turns: the first builds, the others
    # wait on the lock and then load its copy. The rename stays atomic (no reader sees half a
    # checkpoint), and a loser that built anyway (no flock on its filesystem) discards its copy.
    with rundir.dir_lock(base_dir):
        if path.exists():
            return load()
        log(f"[base] supervised warm start: {run.sft_steps} steps x {run.sft_batch} demonstrations -> {path}")
        params, report = build()
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        ckptr.save(tmp, params)
        ckptr.wait_until_finished()
        (tmp / WARM_START_FACTS).write_text(json.dumps(report, indent=1))  # published with the parameters
        if not rundir.publish_dir(tmp, path):
            return load()
    facts.update(cache=str(path))
    return params


def _jsonable(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _read_metrics(path: pathlib.Path, *, log=print) -> list[dict]:
    return rundir.read_metrics(path, log=log)


def _need_bytes(model_cfg: ModelConfig, run_cfg: RunConfig, *, kl_reference: bool = False) -> int:
    """Disk a run needs: params + two Adam moments (+ the KL reference with ``kl_reference``) per
    checkpoint, ``max_to_keep=2`` plus one being written, and 16 MiB for logs and figures."""
    shapes = jax.eval_shape(lambda k: init_params(model_cfg, k), jax.random.PRNGKey(0))
    nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
    return (3 * (3 + kl_reference) * nbytes if run_cfg.ckpt_every else 0) + 16 * 2**20


def _nonfinite(m: dict) -> dict:
    return {key: m[key] for key in ("loss/loss", "loss/grad_norm")
            if key in m and not math.isfinite(float(m[key]))}


def _already_complete(out: pathlib.Path, run_cfg: RunConfig, log) -> dict | None:
    """The saved summary if ``out`` holds a finished run of ``run_cfg.steps`` steps, else None."""
    if not (out / "summary.json").exists() or (out / rundir.ERROR_FILE).exists():
        return None
    try:
        summary = json.loads((out / "summary.json").read_text())
    except json.JSONDecodeError:
        return None
    records = _read_metrics(out / "metrics.jsonl", log=log)
    done = sum(m["kind"] == "train" for m in records)
    final = any(m["kind"] == "eval" and m["step"] == run_cfg.steps for m in records)
    return summary if summary.get("steps") == run_cfg.steps == done and final else None


def _check_length(out: pathlib.Path, run_cfg: RunConfig, log) -> None:
    """A finished run of fewer steps than ``run_cfg.steps`` is extended (one line says so: raising
    ``steps`` is the one change a run directory accepts); of more steps, ``RunDirError``."""
    try:
        done = json.loads((out / "summary.json").read_text()).get("steps")
    except (OSError, json.JSONDecodeError, AttributeError):
        return
    if not isinstance(done, int):
        return
    if done > run_cfg.steps:
        raise RunDirError(f"{out} holds a finished run of {done} steps; steps={run_cfg.steps} would not shorten it: "
                          f"add tag=<name> for a new directory, or delete {out}")
    if done < run_cfg.steps:
        log(f"[run] extending run {out.name} from {done} to {run_cfg.steps} steps")


def run(task, model_cfg: ModelConfig, rl: RLConfig, prefix: ps.PrefixConfig, run_cfg: RunConfig, out_dir,
        *, config_dict: dict | None = None, config_defaults: dict | None = None, config_upgrade=None, mesh=None,
        log=print, lock: rundir.HeldLock | None = None) -> dict:
    """Runs (or resumes) one training run into ``out_dir``; returns the summary dict. ``config_dict``
    is recorded in ``out_dir/config.json`` and a resumed run must match it (``rundir.check_config``;
    ``config_defaults``: the schema's defaults, for keys the record lacks; ``config_upgrade``: maps a
    record of an earlier layout to ``config_dict``'s). The writing process holds ``rundir.run_lock`` on
    ``out_dir`` throughout: a second process started on the same directory stops with one error line.
    ``lock``: the ``rundir.run_lock`` a caller already holds on ``out_dir`` (``experiments.train`` takes it
    before its job log opens there); one on another directory, or released, is refused."""
    out = pathlib.Path(out_dir).resolve()
    args = (task, model_cfg, rl, prefix, run_cfg, out)
    kw = dict(config_dict=config_dict, config_defaults=config_defaults, config_upgrade=config_upgrade, mesh=mesh, log=log)
    if lock is not None and (lock.out != out or not lock.held):
        raise ValueError(f"run(lock=...): the lock given is {'on ' + str(lock.out) if lock.held else 'released'}; "
                         f"allowed: None or a held rundir.run_lock on out_dir {out}")
    if jax.process_index() != 0:  # multi-host: only process 0 writes metrics, figures, wandb
        return _run(*args, writer=False, **kw)
    rundir.preflight(out, need_bytes=_need_bytes(model_cfg, run_cfg, kl_reference=bool(rl.loss.kl_coef)))
    with contextlib.nullcontext() if lock is not None else rundir.run_lock(out):
        return _run(*args, writer=True, **kw)


def _run(task, model_cfg: ModelConfig, rl: RLConfig, prefix: ps.PrefixConfig, run_cfg: RunConfig,
         out: pathlib.Path, *, writer: bool, config_dict, config_defaults, config_upgrade, mesh, log) -> dict:
    """``run``'s body, in a directory ``out`` that process 0 (``writer``) has checked and locked."""
    import orbax.checkpoint as ocp

    if writer:
        rundir.check_config(out, config_dict, defaults=config_defaults, upgrade=config_upgrade)
    done = multihost.broadcast_json(_already_complete(out, run_cfg, log) if writer else None)  # process 0 decides
    if done is not None:
        log(f"[run] already complete (step {run_cfg.steps}): final held-out pass@1 {done['eval_final']:.3f} "
            f"(peak {done['eval_peak']:.3f}); summary.json, metrics and curves.png in {out}")
        return done
    if writer:
        _check_length(out, run_cfg, log)
        rundir.clear_failure(out)
    if run_cfg.save_hf_every and jax.process_count() > 1:
        raise ValueError("RunConfig.save_hf_every needs one process (parameters are sharded over processes); "
                         "export a checkpoint with python -m experiments.export instead")
    base_dir = pathlib.Path(run_cfg.base_dir) if run_cfg.base_dir else out.parent / "base"
    trainer = Trainer(task, model_cfg, rl, prefix, seed=run_cfg.seed, mesh=mesh)
    warm = {}  # summary.json's warm_start
    params = base_params(task, model_cfg, run_cfg, base_dir, log=log, shardings=trainer.param_shardings, facts=warm)
    state = trainer.init_state(params)

    metrics_path = out / "metrics.jsonl"
    mngr = None
    start = 0
    if run_cfg.ckpt_every:
        # asynchronous saves: ``save`` returns once the state is copied off the devices (the buffers the
        # next step donates), the files are written in the background while training goes on; the
        # next save, a stop on a non-finite step and ``close()`` (every exit) wait for the write
        mngr = ocp.CheckpointManager(out / "checkpoints",
                                     options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True,
                                                                          enable_async_checkpointing=True))
        latest = mngr.latest_step()
        if latest is not None and latest > run_cfg.steps:
            raise RunDirError(f"{out} holds a checkpoint at step {latest}, past steps={run_cfg.steps}: add "
                              f"tag=<name> for a new directory, or delete {out}")
        if latest is not None:
            state = _restore(mngr, latest, state, mesh, log=log)
            start = int(state.step)
            log(f"[run] resumed from checkpoint at step {start}")
    kept = [m for m in _read_metrics(metrics_path, log=log) if m["step"] < start]
    segments = [json.loads(x) for x in (out / "provenance.jsonl").read_text().splitlines() if x.strip()] \
        if (out / "provenance.jsonl").exists() else []
    graded_by = task.provenance() if hasattr(task, "provenance") else {}  # math_jsonl: grader back end, reward fn
    segments = [sg for sg in segments if sg.get("start_step", 0) < start] + [{"start_step": start, **code_state(),
                                                                          **graded_by}]
    if writer:
        rundir.write_atomic(metrics_path, "".join(json.dumps(m) + "\n" for m in kept))
        # the code each segment of the run ran on (a resumed run may span commits)
        rundir.write_atomic(out / "provenance.jsonl", "".join(json.dumps(sg) + "\n" for sg in segments))

    wb = None
    if run_cfg.wandb_mode != "disabled" and writer:
        import wandb

        wb = wandb.init(project=run_cfg.wandb_project, dir=str(out), mode=run_cfg.wandb_mode,
                        config=config_dict or {}, resume="allow", id=f"{out.name}-{_hash(str(out))}",
                        reinit="finish_previous", settings=wandb.Settings(quiet=True))

    # a baseline run has no controller: its constant ρ/EMA stay in metrics.jsonl but are not charted
    controller_keys = ("/rho", "/ema") if prefix.mode == "baseline" else ()

    def emit(rec: dict) -> None:
        rec = {key: _jsonable(val) for key, val in rec.items()}
        if not writer:
            return
        with metrics_path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        if wb is not None:
            wb.log({key: val for key, val in rec.items() if isinstance(val, (int, float)) and key != "step"
                    and not key.endswith(controller_keys)}, step=rec["step"])

    bar = Progress(run_cfg.steps, start=start, enabled=run_cfg.progress)
    last_eval, eval_step = next(((m["eval/pass_at_1"], m["step"]) for m in reversed(kept) if m["kind"] == "eval"),
                                (float("nan"), None))
    t_run = time.perf_counter()
    skipped = 0
    s = start
    stop = _StopFlag()  # Ctrl-C: stop at the end of the current step (Interrupted)
    try:
        for s in range(start, run_cfg.steps):
            if s % run_cfg.eval_every == 0:
                ev = trainer.evaluate(state.params, s)
                last_eval, eval_step = ev["eval/pass_at_1"], s
                emit({"kind": "eval", "step": s, **ev})
            # ``step`` donates the params/optimiser buffers: keep copies only when a bad step may be skipped
            # (the KL reference is never donated nor updated: shared, not copied)
            backup = jax.tree.map(jax.numpy.copy, state._replace(ref_params=None))._replace(
                ref_params=state.ref_params) if run_cfg.on_nonfinite == "skip" else None
            new_state, m = trainer.step(state)
            bad = _nonfinite(m)
            if bad and backup is None:
                if mngr is not None:
                    mngr.wait_until_finished()  # an in-flight save commits before it is named
                latest = mngr.latest_step() if mngr is not None else None
                where = (f"the last good checkpoint (step {latest}) is kept in {out / 'checkpoints'}; re-running "
                         f"resumes from it" if latest is not None else "no checkpoint was written yet")
                raise NonFiniteError(f"step {s}: non-finite {', '.join(f'{k}={v}' for k, v in bad.items())}; run "
                                     f"stopped ({where}); on_nonfinite=skip skips such steps instead")
            if bad:
                log(f"[run] step {s}: non-finite {', '.join(f'{k}={v}' for k, v in bad.items())}; update skipped")
                skipped += 1
                new_state = backup._replace(step=backup.step + 1)
                m = {**m, "skipped": True}
            state = new_state
            emit({"kind": "train", **m})
            # the held-out pass@1 names the step it was measured at (the final one follows the last step)
            bar.update(s + 1, f"pass {m['pass_rate']:.3f} eval@{eval_step} {last_eval:.3f}")
            if mngr is not None and ((s + 1) % run_cfg.ckpt_every == 0 or s + 1 == run_cfg.steps):
                # periodic, and always at the end; collective with several processes (multihost.checkpointable)
                mngr.save(s + 1, args=ocp.args.StandardSave(multihost.checkpointable(checkpoint_tree(state), mesh)))
            if run_cfg.save_hf_every and writer and ((s + 1) % run_cfg.save_hf_every == 0 or s + 1 == run_cfg.steps):
                _save_hf(task, state.params, model_cfg, run_cfg, out / "hf" / f"step_{s + 1}", log=log)
            if stop.is_set:
                raise _interrupt(mngr, state, s + 1, run_cfg, out, mesh)
        ev = trainer.evaluate(state.params, run_cfg.steps)  # overlaps the last checkpoint's write
        emit({"kind": "eval", "step": run_cfg.steps, **ev})
        bar.final(f"final eval@{run_cfg.steps} {ev['eval/pass_at_1']:.3f}")
        if mngr is not None:
            mngr.wait_until_finished()  # the last checkpoint committed before the run counts as done
    except BaseException as e:  # noqa: BLE001  (recorded, then re-raised)
        if writer and not isinstance(e, KeyboardInterrupt):  # a run the user stopped has not failed
            rundir.record_failure(out, step=s, error=e)
        if wb is not None:
            wb.finish(exit_code=130 if isinstance(e, KeyboardInterrupt) else 1)
        raise
    finally:
        stop.restore()
        if mngr is not None:
            mngr.close()
    records = _read_metrics(metrics_path) if writer else []
    summary = summarise(records, run_time_s=time.perf_counter() - t_run, resumed_from=start)
    summary["steps_skipped"] = skipped + sum(1 for m in kept if m.get("skipped"))
    summary["config"] = config_dict or {}
    summary["provenance"] = segments[-1]
    summary["provenance_segments"] = segments
    summary["warm_start"] = warm
    summary = multihost.broadcast_json(summary)  # several processes: process 0's summary everywhere
    if writer:
        rundir.write_atomic(out / "summary.json", json.dumps(summary, indent=2, default=str))
        plot_run(records, out / "curves.png", title=out.name)
    if wb is not None:
        wb.summary.update({key: val for key, val in summary.items() if isinstance(val, (int, float))})
        wb.finish()
    log(f"[run] done: final held-out pass@1 {summary['eval_final']:.3f} at step {run_cfg.steps} "
        f"(peak {summary['eval_peak']:.3f}); "
        f"metrics, curves.png and summary.json in {out}")
    return summary


def _save_hf(task, params, model_cfg: ModelConfig, run_cfg: RunConfig, path: pathlib.Path, *, log=print) -> None:
    """``params`` as a Hugging Face directory at ``path`` (``RunConfig.save_hf_every``): the base
    checkpoint's tokenizer files and stored dtype, the task tokenizer's chat template."""
    from prs.models import hf

    extra, base, dtype = {}, None, None
    if run_cfg.init_checkpoint:
        root = hf.resolve_checkpoint(run_cfg.init_checkpoint)
        base = json.loads((root / "config.json").read_text())
        dtype = hf._NAMED_DTYPES.get(base.get("torch_dtype") or base.get("dtype"))
        extra = hf.hf_extra_files(root, template=getattr(getattr(task, "tokenizer", None), "chat_template", None))
    hf.save_checkpoint(path, params, model_cfg, extra_files=extra, dtype=dtype, base_config=base)
    log(f"[run] Hugging Face copy of the parameters in {path}")


def _restore(mngr, step: int, fresh: TrainState, mesh, *, log=print) -> TrainState:
    """The state checkpointed at ``step``, restored into the layout of ``fresh`` (``Trainer.init_state``
    of the run's starting parameters) through ``checkpoint_tree``: step, parameters, optimiser
    state, controller, task memory and, with ``kl_coef > 0``, the KL reference. A checkpoint that
    holds no reference although the run has one keeps ``fresh``'s, i.e. the starting parameters,
    and the log says so."""
    import orbax.checkpoint as ocp

    like = checkpoint_tree(fresh)
    if "ref_params" in like:
        saved = ocp.StandardCheckpointHandler().metadata(pathlib.Path(mngr.directory) / str(step) / "default")
        if "ref_params" not in saved:
            log(f"[run] the checkpoint at step {step} holds no KL reference: the reference is the run's "
                f"starting parameters")
            del like["ref_params"]
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, multihost.checkpointable(like, mesh))
    tree = multihost.host_local(mngr.restore(step, args=ocp.args.StandardRestore(abstract)), like)
    return fresh._replace(**tree)


def _interrupt(mngr, state, done: int, run_cfg: RunConfig, out: pathlib.Path, mesh) -> Interrupted:
    """Checkpoints ``state`` after ``done`` steps (unless that step's periodic checkpoint exists) and
    returns the ``Interrupted`` to raise."""
    import orbax.checkpoint as ocp

    if mngr is None:
        return Interrupted(f"stopped after step {done}/{run_cfg.steps} (Ctrl-C); no checkpoint (ckpt_every=0): "
                           f"a re-run starts again", step=done)
    if mngr.latest_step() != done:
        mngr.save(done, args=ocp.args.StandardSave(multihost.checkpointable(checkpoint_tree(state), mesh)))
    mngr.wait_until_finished()  # this save, or the periodic one still being written (saves are asynchronous)
    return Interrupted(f"stopped after step {done}/{run_cfg.steps} (Ctrl-C); checkpoint in {out / 'checkpoints'}: "
                       f"re-run the same command to resume", step=done)


def summarise(records: list[dict], *, run_time_s: float = float("nan"), resumed_from: int = 0) -> dict:
    train = [m for m in records if m["kind"] == "train"]
    evals = [m for m in records if m["kind"] == "eval"]
    ev = np.array([m["eval/pass_at_1"] for m in evals], float)
    return {
        "steps": len(train),
        "eval_steps": [m["step"] for m in evals],
        "eval_pass_at_1": ev.tolist(),
        "eval_initial": float(ev[0]) if ev.size else float("nan"),
        "eval_final": float(ev[-1]) if ev.size else float("nan"),
        "eval_peak": float(ev.max()) if ev.size else float("nan"),
        "train_pass_rate_mean": float(np.mean([m["pass_rate"] for m in train])) if train else float("nan"),
        "tokens_generated": int(sum(m["tokens_generated"] for m in train)),
        "tokens_replayed": int(sum(m["tokens_replayed"] for m in train)),
        "time_sample_s": float(sum(m["time_sample"] for m in train)),
        "time_update_s": float(sum(m["time_update"] for m in train)),
        # the compute ledger (prs.rl.select): every control compared at matched tokens and time
        **{f"{key}_total": int(sum(m.get(key, 0) for m in train))
           for key in ("tokens_trained", "groups_contrast", "rollouts_sampled", "rollouts_skipped", "gen_batches")},
        "time_select_s": float(sum(m.get("time_select", 0.0) for m in train)),
        "time_batch_s": float(sum(m.get("time_batch", 0.0) for m in train)),
        "run_time_s": run_time_s,
        "resumed_from_step": resumed_from,
    }


def _bucket_stop_note(train: list[dict], kb: str) -> str:
    """Why bucket ``kb``'s re-roll line stops or has holes: ``bucket/<k>/reroll_pass_rate`` is None at a step
    where no group was steered with the bucket's prefix (``Trainer``'s metrics). Names the last step with a
    steered group and whether the bucket held groups after it; "" when the line runs to the last step."""
    have = [m["step"] for m in train if m[f"bucket/{kb}/reroll_pass_rate"] is not None]
    if not have:
        return " (no group steered at any step)"
    after = [m for m in train if m["step"] > have[-1]]
    if not after:
        return "" if len(have) == len(train) else " (gaps: steps without a steered group)"
    empty = all(not m.get(f"bucket/{kb}/count") for m in after)
    return (f" (stops: no groups in bucket after step {have[-1]})" if empty
            else f" (stops: no group steered from bucket after step {have[-1]})")


def plot_run(records: list[dict], path: pathlib.Path, *, title: str = ""):
    """Training curves of one run as a PNG (held-out pass@1, training pass rates, controller); returns the
    figure. The first rollouts' and the after-re-roll pass rates are drawn in two styles (solid with circles,
    dashed with triangles) and the legend says when they coincide (no group re-rolled); a bucket's re-roll
    line that stops or has holes says why in its legend entry (``_bucket_stop_note``)."""
    # A bare Figure (no pyplot): switching the global backend to Agg here would hide the figures of
    # a notebook that trains runs in its kernel.
    from matplotlib.figure import Figure

    train = [m for m in records if m["kind"] == "train"]
    evals = [m for m in records if m["kind"] == "eval"]
    fig = Figure(figsize=(15, 4))
    ax = fig.subplots(1, 3)
    if evals:
        ax[0].plot([m["step"] for m in evals], [m["eval/pass_at_1"] for m in evals], "o-", label="held-out pass@1")
    if train:
        steps = [m["step"] for m in train]
        first, after = [m["pass_rate"] for m in train], [m["pass_rate_train"] for m in train]
        same = first == after
        ax[0].plot(steps, first, "-", marker="o", ms=3, alpha=0.7, color="C1", label="train pass rate (first rollouts)")
        ax[0].plot(steps, after, "--", marker="^", ms=4, alpha=0.7, color="C2", mfc="none",
                   label="train pass rate (after re-roll)" + (": equal to the first rollouts at every step, no group "
                                                              "re-rolled" if same else ""))
        ks = sorted({key.split("/")[1] for key in train[0] if key.startswith("bucket/")}, key=int)
        n = len(train[0]["k_hist"]) - 1
        for kb in ks:
            ax[1].plot(steps, [m[f"bucket/{kb}/rho"] for m in train], label=f"ρ, bucket {kb}/{n}")
            xs = [m["step"] for m in train if m[f"bucket/{kb}/reroll_pass_rate"] is not None]
            ax[2].plot(xs, [m[f"bucket/{kb}/ema"] for m in train if m[f"bucket/{kb}/reroll_pass_rate"] is not None],
                       ".-", ms=3, label=f"EMA re-roll pass rate, {kb}/{n}" + _bucket_stop_note(train, kb))
        ax[2].axhline(0.5, color="k", ls="--", lw=0.8, label="target")
    ax[0].set(xlabel="training step", ylabel="pass rate", title="pass rates", ylim=(0, 1))
    ax[1].set(xlabel="training step", ylabel="prefix fraction ρ_b", title="controller: prefix fraction", ylim=(0, 1))
    ax[2].set(xlabel="training step", ylabel="re-rollout pass rate (EMA)", title="controller: re-roll pass rate",
              ylim=(0, 1))
    for a in ax:
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return fig
