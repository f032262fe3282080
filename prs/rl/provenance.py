"""Provenance of a run: the code it ran on (git commit, dirty tree) and the library versions.

``code_state()`` is recorded in every run's ``summary.json`` (``provenance``), so a committed
result names the commit that produced it and whether uncommitted changes were present; a result
made on a dirty tree cannot be re-run from its commit alone, and ``experiments.analyze`` says so.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

_REPO = pathlib.Path(__file__).resolve().parents[2]


def _git(args: list[str], cwd: pathlib.Path) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.rstrip("\n") if out.returncode == 0 else None


def code_state(repo: str | pathlib.Path | None = None) -> dict[str, Any]:
    """``{"commit", "dirty", "dirty_files", "python", "jax", "jaxlib", "xla_flags"}`` for the source tree at ``repo``
    (default: the tree this module was imported from).

    ``commit`` is None outside a git checkout (an installed wheel). ``dirty`` counts tracked files
    with changes and untracked files that git does not ignore (``git status --porcelain``), i.e.
    anything that could make the run differ from what the commit would produce; the first 20 paths
    are listed."""
    import jax
    import jaxlib

    root = pathlib.Path(repo) if repo is not None else _REPO
    commit = (_git(["rev-parse", "HEAD"], root) or "").strip() or None
    status = _git(["status", "--porcelain"], root) if commit else None
    files = [line[3:] for line in (status or "").splitlines() if line.strip()]
    return {
        "commit": commit,
        "dirty": bool(files) if commit else None,
        "dirty_files": files[:20],
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        # XLA:CPU's numerics depend on the host device count (--xla_force_host_platform_device_count):
        # a re-run must use the same flags to reproduce the records (experiments.reproduce)
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }
