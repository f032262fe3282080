"""Fig. 2 of Zhu et al. 2026 (arXiv:2605.05112) recomputed: four pass-rate metrics vs p.

Each curve is normalised to its maximum (at p = 1/2): reward entropy ``H(p)``, advantage energy
``p(1−p)``, expected contrast pairs ``E[k(n−k)] = n(n−1)p(1−p)`` (same shape as the energy once
normalised, drawn dashed) and filter survival ``1 − pⁿ − (1−p)ⁿ``. The n buckets ``p = k/n`` are
marked with the realised-k values (``H(k/n)``, ``k(n−k)/n²``, ``k(n−k)``, survival at ``k/n``),
normalised by the same maxima.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from theory import _checks as c
from theory import metrics as m


def _ratio(x: jax.Array, ref: jax.Array) -> jax.Array:
    """``x / ref``, 0 where ``ref = 0`` (survival and E[pairs] are identically 0 for n = 1)."""
    return jnp.where(ref > 0, x / jnp.where(ref > 0, ref, 1.0), 0.0)


def figure_data(n: int = 8, *, num_points: int = 401) -> dict[str, Any]:
    """Curves ``[P]`` and bucket markers ``[n+1]``, all divided by their value at p = 1/2."""
    (n,) = c.as_group_size("n", n).reshape(1).tolist()
    with jax.enable_x64(True):
        p = jnp.linspace(0.0, 1.0, num_points)
        k = jnp.arange(n + 1)
        pk = k / n
        half = jnp.float64(0.5)
        curves = {
            "reward entropy H(p)": m.reward_entropy(p) / m.reward_entropy(half),
            "advantage energy p(1-p)": m.advantage_energy(p) / m.advantage_energy(half),
            f"contrast pairs E[k(n-k)], n={n}": _ratio(m.expected_contrast_pairs_closed_form(p, n),
                                                       m.expected_contrast_pairs_closed_form(half, n)),
            f"filter survival 1-p^n-(1-p)^n, n={n}": _ratio(m.filter_survival(p, n), m.filter_survival(half, n)),
        }
        buckets = {
            "reward entropy H(p)": m.empirical_entropy(k, n) / m.reward_entropy(half),
            "advantage energy p(1-p)": m.group_reward_variance(k, n) / m.advantage_energy(half),
            f"contrast pairs E[k(n-k)], n={n}": m.contrast_pairs(k, n) / (n * n * m.advantage_energy(half)),
            f"filter survival 1-p^n-(1-p)^n, n={n}": _ratio(m.filter_survival(pk, n), m.filter_survival(half, n)),
        }
        return {"n": n, "p": np.asarray(p), "p_buckets": np.asarray(pk),
                "curves": {kk: np.asarray(v) for kk, v in curves.items()},
                "buckets": {kk: np.asarray(v) for kk, v in buckets.items()}}


def plot_fig2(n: int = 8, *, ax: Any = None):
    """Draws the figure on ``ax`` (a new figure if None) and returns the matplotlib Figure."""
    if ax is None:
        import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib only needed for plotting)

        fig, ax = plt.subplots(figsize=(6.4, 4.2))
    else:
        fig = ax.figure
    data = figure_data(n)
    styles = ["-", "-", "--", "-"]
    markers = ["o", "s", "^", "D"]
    for (name, curve), ls, mk in zip(data["curves"].items(), styles, markers):
        line, = ax.plot(data["p"], curve, ls, label=name)
        ax.plot(data["p_buckets"], data["buckets"][name], mk, color=line.get_color(), ms=4)
    for pk in data["p_buckets"]:
        ax.axvline(pk, color="0.85", lw=0.6, zorder=0)
    ax.set_xlabel("pass rate p (markers: buckets p = k/n, n = %d)" % data["n"])
    ax.set_ylabel("metric / its value at p = 1/2")
    ax.set_title("Pass-rate metrics are maximised at p = 1/2")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.05)
    ax.legend(loc="lower center", fontsize=8)
    return fig
