"""Shared argument checks for prs kernels.

Every check runs on static shape/dtype information only, so it works on concrete arrays and on
tracers inside ``jax.jit`` alike, and raises ``ValueError`` naming the argument, its shape/dtype and
what was expected. Kernels call these on their first lines (the rlax habit of asserting shapes
before any math).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(np.shape(x))


def _dtype(x: Any) -> np.dtype:
    dt = getattr(x, "dtype", None)
    return np.dtype(dt) if dt is not None else np.asarray(x).dtype


def check_rank(name: str, x: Any, rank: int | Sequence[int]) -> None:
    """Raises ``ValueError`` unless ``x.ndim`` is ``rank`` (or one of ``rank``)."""
    ranks = (rank,) if isinstance(rank, int) else tuple(rank)
    shape = _shape(x)
    if len(shape) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(f"{name} must have rank {want}, got rank {len(shape)} (shape {shape})")


def check_shape(name: str, x: Any, shape: Sequence[int | None]) -> None:
    """Raises ``ValueError`` unless ``x.shape`` matches ``shape`` (``None`` entries match any size)."""
    got = _shape(x)
    want = tuple(shape)
    if len(got) != len(want) or any(w is not None and w != g for w, g in zip(want, got)):
        pretty = "(" + ", ".join("?" if w is None else str(w) for w in want) + ")"
        raise ValueError(f"{name} must have shape {pretty}, got shape {got}")


def check_same_shape(**named: Any) -> None:
    """Raises ``ValueError`` unless all keyword arrays share one shape; ``None`` values are skipped.

    Example: ``check_same_shape(rewards=rewards, valid=valid)``.
    """
    items = [(k, _shape(v)) for k, v in named.items() if v is not None]
    if not items:
        return
    first_name, first = items[0]
    for k, s in items[1:]:
        if s != first:
            listing = ", ".join(f"{n} {sh}" for n, sh in items)
            raise ValueError(f"{k} must have the same shape as {first_name} {first}; got {listing}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    """Raises ``ValueError`` unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def check_dtype_kind(name: str, x: Any, kinds: str) -> None:
    """Raises ``ValueError`` unless ``x.dtype.kind`` is in ``kinds``.

    Kinds: ``b`` bool, ``i``/``u`` integers, ``f`` floating (``bfloat16`` counts as ``f``).
    """
    dt = _dtype(x)
    kind = "f" if dt.name == "bfloat16" else dt.kind
    if kind not in kinds:
        names = {"b": "bool", "i": "signed int", "u": "unsigned int", "f": "floating"}
        want = "/".join(names.get(k, k) for k in kinds)
        raise ValueError(f"{name} must have a {want} dtype, got {dt} (shape {_shape(x)})")


def check_nonnegative(name: str, value: float) -> None:
    """Raises ``ValueError`` unless the static number ``value`` is finite and >= 0."""
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
