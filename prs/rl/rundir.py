"""Keeping a run directory trustworthy: checks before anything is written, the recorded
configuration, crash-safe files, a lock for shared artefacts, and the record of a failed run.

Used by ``prs.rl.runner.run``; nothing here trains or imports JAX.

    preflight(out, need_bytes)      the directory can be created and written, and the disk has room
    check_config(out, config)       a directory holding a run only resumes the *same* configuration
    read_metrics(path)              metrics.jsonl lines; a truncated last line (a kill mid-write) is dropped
    write_atomic(path, text)        write to a temporary file, then rename: never half a file
    dir_lock(path)                  an exclusive flock on a directory (concurrent sweep jobs)
    run_lock(out)                   one process trains into a run directory at a time (a second one is refused)
    record_failure / clear_failure  ``error.json``: why and at which step a run stopped
"""
from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import json
import os
import pathlib
import shutil
from typing import Any, Iterator

CONFIG_FILE = "config.json"
ERROR_FILE = "error.json"
# Keys that may differ between a run and its resumption: how it is displayed or logged, where the
# shared warm-start cache lives, and the planned length (a finished run can be extended).
RESUME_FREE = ("steps", "logging.*", "sft.base_dir", "name", "compile_cache", "mesh.platform")


class RunDirError(ValueError):
    """The run directory cannot be used: unwritable, too little disk, or a different configuration."""


def preflight(out: pathlib.Path, *, need_bytes: int) -> None:
    """Creates ``out`` and checks it is writable with ``need_bytes`` free, before any training."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-probe-{os.getpid()}"
        with open(probe, "wb") as f:
            f.write(b"0" * 4096)
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
    except OSError as e:
        raise RunDirError(f"run directory {out} is not writable ({e.strerror or e}); "
                          f"choose another output directory") from None
    free = shutil.disk_usage(out).free
    if free < need_bytes:
        raise RunDirError(f"run directory {out}: {free / 2**20:.1f} MiB free on its disk, the run needs about "
                          f"{need_bytes / 2**20:.1f} MiB (checkpoints and logs); free some space or choose "
                          f"another output directory")


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for key, val in d.items():
            out.update(_flatten(val, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: d}


_ABSENT = "<absent>"


def config_diff(old: dict, new: dict, *, defaults: dict | None = None,
                ignore=RESUME_FREE) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ, ``ignore`` globs aside. A key only one side has (a field added
    to the schema since the run was recorded, or a free-form entry such as ``task.params.x``) counts
    as its default on the other side: ``defaults`` (nested like ``old``/``new``, e.g. the schema
    dataclass's ``asdict``), else ``"<absent>"``. So a new field left at its default resumes the run,
    and a new field set to another value, or a free-form entry added or dropped, is a difference."""
    a, b = _flatten(_plain(old)), _flatten(_plain(new))
    dflt = _flatten(_plain(defaults or {}))
    diff = {}
    for key in sorted(set(a) | set(b)):
        if any(fnmatch.fnmatchcase(key, pat) for pat in ignore):
            continue
        va, vb = a.get(key, dflt.get(key, _ABSENT)), b.get(key, dflt.get(key, _ABSENT))
        if va != vb:
            diff[key] = (va, vb)
    return diff


def _plain(d: dict) -> dict:
    return json.loads(json.dumps(d, default=str))


def recorded_config(out: pathlib.Path) -> dict | None:
    """The configuration a run directory was started with (``config.json``, else ``summary.json``)."""
    for name, pick in ((CONFIG_FILE, lambda d: d), ("summary.json", lambda d: d.get("config") or None)):
        p = out / name
        if p.exists():
            try:
                return pick(json.loads(p.read_text()))
            except (json.JSONDecodeError, AttributeError):
                continue
    return None


def check_config(out: pathlib.Path, config: dict | None, *, defaults: dict | None = None, ignore=RESUME_FREE,
                 write: bool = True, upgrade=None) -> None:
    """Raises ``RunDirError`` naming the differing keys if ``out`` holds a run of another configuration
    (``config_diff``: a key the record lacks compares as its value in ``defaults``; ``upgrade``: a
    function mapping a record of another config layout to the current one, applied first); otherwise
    records ``config`` in ``out/config.json`` (the first time; ``write=False``: only the check, e.g.
    on every process of a multi-host job before one of them writes)."""
    if config is None:
        return
    old = recorded_config(out)
    if old is not None and upgrade is not None:
        old = upgrade(old)
    if old is not None:
        diff = config_diff(old, config, defaults=defaults, ignore=ignore)
        if diff:
            shown = "; ".join(f"{key}: {a!r} (recorded) vs {b!r} (now)" for key, a, b in
                              ((k, *v) for k, v in list(diff.items())[:8]))
            more = f" and {len(diff) - 8} more" if len(diff) > 8 else ""
            raise RunDirError(f"{out} holds a run with a different configuration ({shown}{more}); a run directory "
                              f"only resumes the same configuration: add tag=<name> for a new directory, or "
                              f"delete {out}")
    if write and not (out / CONFIG_FILE).exists():
        write_atomic(out / CONFIG_FILE, json.dumps(config, indent=1, default=str) + "\n")


def read_metrics(path: pathlib.Path, *, log=print) -> list[dict]:
    """The records of ``metrics.jsonl``. A truncated last line (the process was killed while writing
    it) is dropped with a note; an unparsable line before the last is an error naming the line."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    out = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                log(f"[run] dropped a truncated last line of {path} (line {i + 1}: {line[:40]!r}...)")
                continue
            raise RunDirError(f"{path}: line {i + 1} is not JSON ({line[:60]!r}); the metrics file is corrupt "
                              f"beyond its last line: repair or delete it") from None
    return out


def write_atomic(path: pathlib.Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


@contextlib.contextmanager
def dir_lock(path: pathlib.Path) -> Iterator[None]:
    """An exclusive advisory lock on directory ``path`` (created if needed), held for the block:
    concurrent processes building the same shared artefact take turns."""
    import fcntl

    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


LOCK_FILE = ".run.lock"


@dataclasses.dataclass
class HeldLock:
    """What ``run_lock`` yields: the (resolved) directory it locks, and whether the block still holds it.
    Passed on (``prs.rl.runner.run(lock=...)``), it lets a caller that took the lock early - before its own
    log file opens in the directory - hand it to the code that trains there."""

    out: pathlib.Path
    held: bool = True


@contextlib.contextmanager
def run_lock(out: pathlib.Path) -> Iterator[HeldLock]:
    """An exclusive, non-blocking advisory lock on run directory ``out`` (``out/.run.lock``, which records the
    holder), held for the block: a second process started on the same directory - two sweep lanes given the
    same run, a run re-launched while it still trains - raises one ``RunDirError`` line naming the holder
    instead of writing metrics and checkpoints beside it. The operating system drops the lock with its process,
    so a killed run leaves none behind and resumes as before; the file itself stays (removing it would let a
    third process lock a file the second still holds). Yields a ``HeldLock`` (``held`` turns False on exit)."""
    import fcntl
    import socket

    out = pathlib.Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        holder = path.read_text().strip() or "another process"
        raise RunDirError(f"{out} is in use: {holder} is training into it; wait for it to end (the same command "
                          f"then resumes the run or reports it complete), or add tag=<name> for a new directory") from None
    token = HeldLock(out)
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode())
        yield token
    finally:
        token.held = False
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def publish_dir(tmp: pathlib.Path, final: pathlib.Path) -> bool:
    """Renames ``tmp`` to ``final``; if another process published ``final`` first, discards ``tmp``
    and returns False (the caller then loads the winner's copy)."""
    try:
        os.replace(tmp, final)
        return True
    except OSError:
        if not final.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        return False


def record_failure(out: pathlib.Path, *, step: int | None, error: BaseException) -> None:
    """Writes ``out/error.json`` (what stopped the run, at which step); ``prs.analysis`` reports such
    a run as ``failed``."""
    rec = {"error": f"{type(error).__name__}: {error}", "type": type(error).__name__, "step": step}
    try:
        write_atomic(out / ERROR_FILE, json.dumps(rec, indent=1) + "\n")
    except OSError:
        pass


def clear_failure(out: pathlib.Path) -> None:
    (out / ERROR_FILE).unlink(missing_ok=True)
