"""Provenance of a run: the code it ran on (git commit, dirty tree) and the library versions.

``code_state()`` is recorded in every run's ``summary.json`` (``provenance``), so a committed
result names the commit that produced it and whether uncommitted changes were present; a result
made on a dirty tree cannot be re-run from its commit alone, and ``experiments.analyze`` says so.

``machine_fingerprint()`` is recorded beside it: XLA:CPU compiles for the host's instruction set
(an AVX-512 machine vectorises reductions differently from an AVX2-only one) and splits work by the
host's device count and cores, so a run's floating-point results, and after a few steps its sampled
tokens, are a function of the machine as well as of the seed. ``numerics_key`` is the part of the
fingerprint that decides those results; ``experiments.reproduce`` compares a re-run exactly only
when it matches the record's.
"""
from __future__ import annotations

import os
import pathlib
import platform
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


# The CPU feature flags XLA:CPU's code generation can select on (LLVM target features of x86-64 and
# aarch64); the rest of /proc/cpuinfo's flags do not change compiled code.
_ISA_FLAGS = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512cd", "avx512bw",
              "avx512vl", "avx512ifma", "avx512vbmi", "avx512_vbmi2", "avx512_vnni", "avx512_bf16",
              "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve", "sve2", "bf16", "i8mm")
# the fingerprint fields that decide a run's numerics: LLVM compiles XLA:CPU's kernels for the host
# CPU it detects from vendor, family and model (``cpu_id``: e.g. AMD family 25 model 17 = znver4)
# and its instruction set; the marketing name (``cpu_model``, often just "AMD EPYC" in a VM) is
# recorded, not compared
NUMERICS_FIELDS = ("arch", "cpu_id", "isa", "cores", "platform", "device_count", "jax", "jaxlib", "xla_flags")


def _cpu_info(path: str = "/proc/cpuinfo") -> tuple[str | None, str | None, list[str]]:
    """(model name, "vendor family F model M", sorted XLA-relevant ISA flags) of the first CPU in
    ``/proc/cpuinfo`` (Linux; elsewhere (None, None, []))."""
    try:
        text = pathlib.Path(path).read_text()
    except OSError:
        return None, None, []
    first: dict[str, str] = {}
    for line in text.splitlines():
        key, _, val = line.partition(":")
        first.setdefault(key.strip().lower(), val.strip())
    flags = set((first.get("flags") or first.get("features") or "").split())
    ident = [first.get("vendor_id") or first.get("cpu implementer")]
    ident += [f"family {first['cpu family']}"] if "cpu family" in first else []
    ident += [f"model {first['model']}"] if "model" in first else []
    ident += [f"part {first['cpu part']}"] if "cpu part" in first else []
    cpu_id = " ".join(x for x in ident if x) or None
    return first.get("model name") or first.get("cpu model"), cpu_id, sorted(f for f in flags if f in _ISA_FLAGS)


def machine_fingerprint() -> dict[str, Any]:
    """The machine a run ran on: ``{"cpu_model", "cpu_id", "arch", "isa", "cores", "platform", "device_count",
    "jax", "jaxlib", "xla_flags"}``. ``isa`` is the sorted subset of the CPU's flags that XLA's
    compiler can use (e.g. ``avx2``, ``avx512f``); ``cores`` the CPUs this process may run on."""
    import jax
    import jaxlib

    model, cpu_id, isa = _cpu_info()
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count()
    return {
        "cpu_model": model or platform.processor() or None,
        "cpu_id": cpu_id,
        "arch": platform.machine(),
        "isa": isa,
        "cores": cores,
        "platform": jax.default_backend(),
        "device_count": jax.device_count(),
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }


def numerics_key(fingerprint: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fields of a fingerprint that decide a run's floating-point results (None: no fingerprint)."""
    if not fingerprint:
        return None
    return {k: fingerprint.get(k) for k in NUMERICS_FIELDS}


def fingerprint_mismatch(recorded: dict[str, Any] | None, now: dict[str, Any]) -> list[str]:
    """Why a run recorded on ``recorded`` cannot be expected to re-run bit-exactly here: one line per
    differing numerics field (empty: the machines match). A record without a fingerprint cannot be
    matched."""
    if not recorded:
        return ["the record has no machine fingerprint (made before fingerprints were recorded)"]
    a, b = numerics_key(recorded), numerics_key(now)
    return [f"{k}: recorded {a[k]!r}, here {b[k]!r}" for k in NUMERICS_FIELDS if a[k] != b[k]]


def code_state(repo: str | pathlib.Path | None = None) -> dict[str, Any]:
    """``{"commit", "dirty", "dirty_files", "python", "jax", "jaxlib", "xla_flags", "machine"}`` for the source tree at ``repo``
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
        "machine": machine_fingerprint(),
    }
