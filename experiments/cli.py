"""What ``python -m experiments.train`` does around a run: one clear line for a user's mistake,
nothing written into a run directory by a rejected run, and a sweep that reports its failed jobs.

    check_overrides(argv)   before Hydra: unknown keys (``metod=``), unknown group options
                            (``method=nope``) and ``experiment=`` without ``+`` -> ``UsageError``
    guarded(fn, dcfg)       inside the Hydra job: a ``UsageError`` / ``ValueError`` / schema error /
                            ``NonFiniteError`` prints ``error: <one line>`` and exits 2 (1 for a
                            stopped run); a sweep job records it and the sweep goes on; Ctrl-C
                            prints one ``interrupted: ...`` line and exits 130; other
                            exceptions (bugs) keep their traceback
    SweepReport             Hydra callback: after a sweep, names the failed jobs and exits 1

Every other ``python -m experiments.X`` command line (and ``experiments.studies.X``) shares the same
rules through the helpers of ``experiments.studies.command_line``, re-exported here:

    ArgumentParser          argparse with one ``error: <prog>: <what>; did you mean ...? (--help ...)``
                            line and exit status 2 for a bad argument
    command(prog)           decorator of a ``main(argv)``: a ``UsageError`` / ``ValueError`` /
                            ``FileNotFoundError`` / schema or Hydra composition error prints one
                            ``error:`` line and exits 2
    did_you_mean(key, keys) the suggestion: close dotted keys, and the keys whose last part is the
                            one given (``lr`` -> ``optim.lr``)

Tracebacks stay for bugs; ``HYDRA_FULL_ERROR=1`` re-raises everything.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import shutil
import sys
from typing import Any, Callable

from hydra.experimental.callback import Callback

from experiments.studies.command_line import ArgumentParser, command, did_you_mean, one_line, usage_errors  # noqa: F401

CONF = pathlib.Path(__file__).resolve().parent.parent / "conf"
FAILURES = "failures.jsonl"  # in the sweep directory, one line per failed job


class UsageError(ValueError):
    """A mistake in the command line or the configuration (as opposed to a bug)."""


# ---------------------------------------------------------------------------------------------
# Before Hydra: the overrides on the command line


def _schema_keys(schema=None) -> tuple[set[str], set[str]]:
    """(dotted keys of the schema dataclass (default: the training schema), keys of free-form dict nodes)."""
    if schema is None:
        from experiments.config import TrainCfg as schema

    keys, free = set(), set()

    def walk(cls, prefix):
        for f in dataclasses.fields(cls):
            key = prefix + f.name
            keys.add(key)
            fac = f.default_factory if f.default_factory is not dataclasses.MISSING else None
            if fac is not None and dataclasses.is_dataclass(fac):
                walk(fac, key + ".")
            elif fac is dict:
                free.add(key)

    walk(schema, "")
    return keys, free


def _groups(conf: pathlib.Path) -> dict[str, list[str]]:
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in conf.iterdir()
            if d.is_dir() and d.name not in ("hydra", "simulate")}


def check_overrides(argv: list[str], *, conf: pathlib.Path = CONF, schema=None,
                    listing: str = "python -m experiments.train --cfg job") -> list[str]:
    """Raises ``UsageError`` (one line: the override, what is wrong, the allowed values) for an
    override of an unknown key or group option; Hydra's own flags and ``hydra.*`` pass through.

    Returns ``argv`` with each plain ``key=value`` of a schema key written ``++key=value``: the YAML
    lists only some of the schema's fields, and Hydra would otherwise reject the others with its
    hint to use ``+key=`` (which then fails for the keys the YAML does list)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from experiments.config import moved_key

    keys, free = _schema_keys(schema)
    groups = _groups(conf)
    parser = OverridesParser.create()
    out = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        out.append(arg)
        i += 1
        if arg.startswith("-"):
            if arg in ("--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                       "--config-dir", "-cd", "--info", "-i", "--experimental-rerun"):
                out += argv[i:i + 1]  # the flag's value
                i += 1
            continue
        try:
            ov = parser.parse_overrides([arg])[0]
        except HydraException as e:
            raise UsageError(f"cannot parse override {arg!r}: {str(e).splitlines()[0]}") from None
        key = ov.key_or_group
        if key.startswith(("hydra.", "hydra/")) or key == "hydra":
            continue
        moved = moved_key(key.lstrip("+~")) if schema is None else None
        if moved is not None:
            raise UsageError(f"{arg}: {key.lstrip('+~')} is now {moved} (the config's nodes mirror "
                             "prs.rl.config.RLConfig)")
        if key in groups:
            if key == "experiment" and not ov.is_add():
                raise UsageError(f"{arg}: an experiment is added to the defaults, write +{arg} "
                                 f"(experiments: {', '.join(groups[key])})")
            if ov.is_delete():
                continue
            values = list(ov.sweep_string_iterator()) if ov.value_type is not None and ov.is_sweep_override() \
                and ov.value_type.name == "SIMPLE_CHOICE_SWEEP" else [ov.value()] if not ov.is_sweep_override() else []
            for v in values:
                if isinstance(v, str) and v not in groups[key]:
                    raise UsageError(f"{key}={v}: no such {key}; choose one of {', '.join(groups[key])}")
            continue
        if key in keys or any(key.startswith(f + ".") for f in free):
            if ov.type.name == "CHANGE" and not arg.startswith("+"):
                out[-1] = "++" + arg
            continue
        top = sorted({k.split(".")[0] for k in keys} | set(groups))
        hint = did_you_mean(key, keys | set(groups))
        raise UsageError(f"{arg}: unknown key {key!r}; {hint}top-level keys: {', '.join(top)} "
                         f"(`{listing}` prints them all)")
    return out


def help_text(conf: pathlib.Path = CONF) -> str:
    """What ``--help`` prints before the composed config: the training groups and how to add an experiment."""
    groups = _groups(conf)
    exps = groups.pop("experiment", [])
    lines = ["python -m experiments.train [-m] [group=option ...] [key=value ...]",
             "  one GRPO / Prefix Sampling training run (-m: a sweep over comma-separated values)", "",
             "Config groups (group=option):"]
    lines += [f"  {g:8s} {', '.join(opts)}" for g, opts in sorted(groups.items())]
    lines += ["", "Experiments (added to the defaults: +experiment=NAME):", f"  {', '.join(exps)}", "",
              "Launchers: hydra/launcher=joblib hydra.launcher.n_jobs=2 (local, parallel), hydra/launcher=slurm", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Inside the Hydra job


def _user_errors() -> tuple[type, ...]:
    from omegaconf.errors import OmegaConfBaseException

    from prs.rl.runner import NonFiniteError

    return ValueError, OmegaConfBaseException, NonFiniteError


def _untouched(out: pathlib.Path, log_name: str) -> bool:
    """True if ``out`` holds nothing but Hydra's (empty) job log: the job created it."""
    if not out.exists():
        return True
    entries = list(out.iterdir())
    return all(p.name == log_name and p.is_file() and p.stat().st_size == 0 for p in entries)


def guarded(fn: Callable[[Any, pathlib.Path], Any], dcfg) -> Any:
    """Runs ``fn(dcfg, out_dir)`` in a Hydra job; see the module docstring for the error handling."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from prs.rl import rundir

    hc = HydraConfig.get()
    out = pathlib.Path(hc.runtime.output_dir)
    log_name = f"{hc.job.name}.log"
    sweep = hc.mode == RunMode.MULTIRUN
    fresh = _untouched(out, log_name)
    try:
        return fn(dcfg, out)
    except _user_errors() as e:
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        from prs.rl.runner import NonFiniteError

        msg = one_line(e)
        name = out.name
        print(f"error: {name}: {msg}" if sweep else f"error: {msg}", file=sys.stderr, flush=True)
        if not sweep and fresh and _untouched(out, log_name):
            shutil.rmtree(out, ignore_errors=True)  # a rejected run leaves no directory behind
        elif sweep and (fresh or not isinstance(e, rundir.RunDirError)) and not (out / rundir.ERROR_FILE).exists():
            rundir.record_failure(out, step=None, error=e)  # the job's own directory: prs.analysis reports it
        if sweep:
            _record_sweep_failure(pathlib.Path(hc.sweep.dir), name, msg)
            return float("nan")
        sys.exit(1 if isinstance(e, NonFiniteError) else 2)
    except KeyboardInterrupt as e:  # Ctrl-C: prs.rl.runner.Interrupted (stopped at a step's end) or at once
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        print(f"interrupted: {one_line(e)}" if str(e) else "interrupted (Ctrl-C)", file=sys.stderr, flush=True)
        sys.exit(130)
    except Exception as e:  # a bug: the traceback stays; a sweep still learns which job failed
        if sweep:
            _record_sweep_failure(pathlib.Path(hc.sweep.dir), out.name, one_line(e))
            if not (out / rundir.ERROR_FILE).exists() and out.exists():
                rundir.record_failure(out, step=None, error=e)
        raise


def _record_sweep_failure(sweep_dir: pathlib.Path, name: str, msg: str) -> None:
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / FAILURES, "a") as f:  # one short append per job: safe across joblib workers
        f.write(json.dumps({"job": name, "error": msg}) + "\n")


class SweepReport(Callback):
    """After a sweep (``-m``): one line per failed job and exit status 1; nothing if all succeeded."""

    def on_multirun_start(self, config, **kwargs) -> None:
        (pathlib.Path(config.hydra.sweep.dir) / FAILURES).unlink(missing_ok=True)

    def on_multirun_end(self, config, **kwargs) -> None:
        path = pathlib.Path(config.hydra.sweep.dir) / FAILURES
        if not path.exists():
            return
        fails = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if fails:
            print(f"sweep: {len(fails)} job(s) failed (the others ran; {path}):", file=sys.stderr)
            for rec in fails:
                print(f"  {rec['job']}: {rec['error']}", file=sys.stderr)
            sys.stderr.flush()
            sys.exit(1)
