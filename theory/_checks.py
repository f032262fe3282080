"""Argument checks shared by the theory modules.

Values are checked only when they are concrete (Python numbers, numpy arrays, committed jax arrays);
inside ``jax.jit`` a traced ``p`` or ``k`` cannot be inspected and is passed through unchecked (the
shape/dtype of a traced argument is still checked). Group sizes ``n`` must always be concrete: they
fix the number of terms of the sums over ``k`` and therefore the compiled shapes.
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np


def is_traced(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def check_probability(name: str, p: Any) -> None:
    """Raises ``ValueError`` unless every entry of concrete ``p`` is a finite number in [0, 1]."""
    if is_traced(p):
        return
    a = np.asarray(p)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be real numbers in [0, 1], got dtype {a.dtype}")
    a = a.astype(np.float64)
    bad = ~np.isfinite(a) | (a < 0.0) | (a > 1.0)
    if np.any(bad):
        raise ValueError(
            f"{name} must lie in [0, 1], got {a[bad].ravel()[:4].tolist()} (shape {a.shape})")


def as_group_size(name: str, n: Any, *, minimum: int = 1) -> np.ndarray:
    """Concrete integer array of group sizes ``>= minimum``; raises ``ValueError`` otherwise.

    Integral floats (``8.0``) are accepted, ``8.5``, ``True``, ``0`` and traced values are not.
    """
    if is_traced(n):
        raise ValueError(f"{name} must be concrete (a Python int or integer array), got a tracer; "
                         "mark it static under jax.jit")
    if isinstance(n, (bool, np.bool_)):
        raise ValueError(f"{name} must be an integer, got {n!r}")
    a = np.asarray(n)
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            raise ValueError(f"{name} must be an integer, got {a.ravel()[:4].tolist()} (shape {a.shape})")
        a = a.astype(np.int64)
    elif a.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer, got {n!r} (dtype {a.dtype})")
    if np.any(a < minimum):
        raise ValueError(f"{name} must be >= {minimum}, got {a.ravel()[:4].tolist()} (shape {a.shape})")
    return a.astype(np.int64)


def check_successes(k: Any, n: np.ndarray) -> None:
    """Raises ``ValueError`` unless concrete ``k`` is integer-valued with ``0 <= k <= n``."""
    if is_traced(k):
        return
    a = np.asarray(k)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"k must be integers, got dtype {a.dtype}")
    a = a.astype(np.float64)
    if np.any(~np.isfinite(a)) or np.any(a != np.round(a)):
        raise ValueError(f"k must be integers, got {a.ravel()[:4].tolist()} (shape {a.shape})")
    try:
        nb = np.broadcast_to(n, np.broadcast_shapes(a.shape, n.shape))
        ab = np.broadcast_to(a, nb.shape)
    except ValueError:
        raise ValueError(f"k (shape {a.shape}) and n (shape {n.shape}) must broadcast") from None
    bad = (ab < 0) | (ab > nb)
    if np.any(bad):
        raise ValueError(f"k must satisfy 0 <= k <= n, got k={ab[bad][:4].tolist()} with "
                         f"n={nb[bad][:4].tolist()}")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
