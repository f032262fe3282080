"""Audit tools for test-based rewards: EQS triage, the gold-sanity gate, test-quality statistics.

* EQS (Rajan 2026, "Auditing Reward Hackability in Code RL Training Environments"):
  EQS(t) = w_V·V(t) + w_H·(1 − H(t)) + w_F1·F1(t) + w_D·D(t), default w = (0.35, 0.30, 0.20, 0.15);
  V verifier separability, H empirical hack rate, F1 judge–execution agreement, D learnability,
  each in [0, 1]. The paper sets the weights by hand ("more direct signals weigh more") and does not
  tune them. Neither the paper digest nor the Korean survey states the KEEP/FIX/DROP cut-offs, so
  the defaults here are OUR choice: KEEP if EQS >= 0.70, DROP if EQS < 0.40, FIX in between
  (the midpoint 0.5 of a task that is perfect on half the weight lands in FIX).
* Gold-sanity gate (same paper): run every generated test on the gold patch first and drop those
  that fail it (65 of 105 judge-approved tests, 61.9%, failed the gold patch there).
* R2E-Gym test statistics (Jain et al. 2025, arXiv:2504.07164): a *distinguishing* test passes every
  correct candidate and fails at least one wrong one (< 20% of generated tests on most tasks); a
  *toxic* test passes at least one wrong candidate and fails at least one correct one (up to 10%).
  The gold patch counts as a correct candidate.

Shapes: B tasks, N candidate patches per task, T generated tests per task. All jnp, jittable.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "EQSWeights",
    "DEFAULT_EQS_WEIGHTS",
    "KEEP",
    "FIX",
    "DROP",
    "VERDICT_NAMES",
    "eqs",
    "eqs_verdict",
    "separability_auc",
    "judge_f1",
    "hackable_fraction",
    "GateReport",
    "gold_sanity_gate",
]

KEEP, FIX, DROP = 0, 1, 2
VERDICT_NAMES = ("KEEP", "FIX", "DROP")


class EQSWeights(NamedTuple):
    """Weights of EQS = v·V + h·(1 − H) + f1·F1 + d·D (Rajan 2026 defaults)."""

    v: float = 0.35
    h: float = 0.30
    f1: float = 0.20
    d: float = 0.15


DEFAULT_EQS_WEIGHTS = EQSWeights()


def _concrete(*xs) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in xs)


def eqs(
    v: jax.Array,
    h: jax.Array,
    f1: jax.Array,
    d: jax.Array,
    *,
    weights: EQSWeights = DEFAULT_EQS_WEIGHTS,
) -> jax.Array:
    """Environment-quality score EQS(t) = w_V·V + w_H·(1 − H) + w_F1·F1 + w_D·D, per task ``[B]``.

    Inputs are per-task arrays of one shape with values in [0, 1] (checked when concrete).
    Weights must be non-negative; they need not sum to 1 (with the defaults they do, so EQS ∈ [0, 1]).
    See Rajan 2026, "Auditing Reward Hackability in Code RL Training Environments".
    """
    w = EQSWeights(*weights)
    if any(x < 0 for x in w):
        raise ValueError(f"eqs: weights must be >= 0, got {w}")
    arrs = {k: jnp.asarray(x, jnp.float32) for k, x in dict(v=v, h=h, f1=f1, d=d).items()}
    shapes = {k: a.shape for k, a in arrs.items()}
    if len(set(shapes.values())) != 1:
        raise ValueError(f"eqs: v, h, f1, d must share one shape, got {shapes}")
    if _concrete(*arrs.values()):
        for k, a in arrs.items():
            a_np = np.asarray(a)
            if np.any(~np.isfinite(a_np)) or np.any(a_np < 0) or np.any(a_np > 1):
                raise ValueError(f"eqs: {k} must lie in [0, 1], got {a_np.tolist()}")
    return w.v * arrs["v"] + w.h * (1.0 - arrs["h"]) + w.f1 * arrs["f1"] + w.d * arrs["d"]


def eqs_verdict(
    score: jax.Array, *, keep_threshold: float = 0.70, drop_threshold: float = 0.40
) -> jax.Array:
    """KEEP (0) if score >= keep_threshold, DROP (2) if score < drop_threshold, else FIX (1).

    The thresholds are our defaults (the sources give none); ``VERDICT_NAMES[code]`` names a code.
    """
    if not drop_threshold <= keep_threshold:
        raise ValueError(
            f"eqs_verdict: need drop_threshold <= keep_threshold, got {drop_threshold} > {keep_threshold}"
        )
    s = jnp.asarray(score, jnp.float32)
    return jnp.where(s >= keep_threshold, KEEP, jnp.where(s < drop_threshold, DROP, FIX)).astype(jnp.int32)


def separability_auc(
    scores: jax.Array, correct: jax.Array, *, mask: jax.Array | None = None
) -> jax.Array:
    """One choice of V(t): P(score of a random correct candidate > a random wrong one), ties ½.

    V = Σ_{i correct, j wrong} (1[s_i > s_j] + ½·1[s_i = s_j]) / (#correct · #wrong) (the ROC AUC).
    A task without both a correct and a wrong candidate gets 0.5 (no evidence either way).
    Shapes ``[B, N]`` -> ``[B]``.
    """
    s = jnp.asarray(scores, jnp.float32)
    c = jnp.asarray(correct, bool)
    mask = jnp.ones(s.shape, bool) if mask is None else jnp.asarray(mask, bool)
    if not (s.shape == c.shape == mask.shape) or s.ndim < 1:
        raise ValueError(f"separability_auc: scores {s.shape}, correct {c.shape}, mask {mask.shape} must match")
    pos, neg = c & mask, ~c & mask
    pair = pos[..., :, None] & neg[..., None, :]  # [B, N, N]
    win = (s[..., :, None] > s[..., None, :]) + 0.5 * (s[..., :, None] == s[..., None, :])
    n_pair = jnp.sum(pair, axis=(-2, -1)).astype(jnp.float32)
    tot = jnp.sum(jnp.where(pair, win, 0.0), axis=(-2, -1))
    return jnp.where(n_pair > 0, tot / jnp.maximum(n_pair, 1.0), 0.5)


def judge_f1(judge_yes: jax.Array, exec_pass: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
    """F1(t) of an LLM judge's YES against execution's verdict (positive class: passes).

    F1 = 2·TP / (2·TP + FP + FN); a task where both say "no" to everything gets 1 (full agreement).
    Shapes ``[B, N]`` -> ``[B]``.
    """
    y = jnp.asarray(judge_yes, bool)
    e = jnp.asarray(exec_pass, bool)
    mask = jnp.ones(y.shape, bool) if mask is None else jnp.asarray(mask, bool)
    if not (y.shape == e.shape == mask.shape):
        raise ValueError(f"judge_f1: judge_yes {y.shape}, exec_pass {e.shape}, mask {mask.shape} must match")
    tp = jnp.sum(y & e & mask, axis=-1).astype(jnp.float32)
    fp = jnp.sum(y & ~e & mask, axis=-1).astype(jnp.float32)
    fn = jnp.sum(~y & e & mask, axis=-1).astype(jnp.float32)
    den = 2 * tp + fp + fn
    return jnp.where(den > 0, 2 * tp / jnp.maximum(den, 1.0), 1.0)


def hackable_fraction(exploit_passed: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
    """Fraction of tasks where at least one exploit (non-fix) patch passes the tests, scalar.

    ``exploit_passed # [B, A]``: attempt a of task b passes the task's tests; ``mask # [B, A]``
    marks real attempts (e.g. only round 1 for the one-shot rate). Rajan 2026 reports 14/49 tasks
    of SWE-bench Verified (9/49 one-shot). Zero tasks -> 0.
    """
    x = jnp.asarray(exploit_passed, bool)
    if x.ndim != 2:
        raise ValueError(f"hackable_fraction: exploit_passed must be [B, A], got {x.shape}")
    mask = jnp.ones(x.shape, bool) if mask is None else jnp.asarray(mask, bool)
    if mask.shape != x.shape:
        raise ValueError(f"hackable_fraction: mask {mask.shape} must match exploit_passed {x.shape}")
    hacked = jnp.any(x & mask, axis=-1)  # [B]
    return jnp.sum(hacked) / jnp.maximum(x.shape[0], 1)


class GateReport(NamedTuple):
    """Output of ``gold_sanity_gate``; per-task arrays ``[B]`` unless noted.

    keep: bool ``[B, T]``, tests that are real and pass the gold patch.
    n_tests: real tests; n_dropped: real tests failing the gold patch; frac_dropped = n_dropped/n_tests.
    n_toxic / frac_toxic, n_distinguishing / frac_distinguishing: among the real tests (before the
    gate; fractions of n_tests, 0 when there are none), the gold patch counted as a correct
    candidate. n_toxic_kept: toxic tests the gate does not catch (they pass gold but fail another
    correct candidate). Distinguishing tests pass gold, so the gate keeps all of them.
    """

    keep: jax.Array
    n_tests: jax.Array
    n_dropped: jax.Array
    frac_dropped: jax.Array
    n_toxic: jax.Array
    frac_toxic: jax.Array
    n_toxic_kept: jax.Array
    n_distinguishing: jax.Array
    frac_distinguishing: jax.Array


def gold_sanity_gate(
    gold_passed: jax.Array,
    *,
    test_mask: jax.Array | None = None,
    candidate_passed: jax.Array | None = None,
    candidate_correct: jax.Array | None = None,
    candidate_mask: jax.Array | None = None,
) -> GateReport:
    """Gold-sanity gate: keep_t = real_t ∧ gold passes t; report drops, toxic and distinguishing tests.

    With candidates (N patches, ``candidate_passed[b, n, t]``, ``candidate_correct[b, n]``) and the
    gold patch added as a correct one, for each real test t:
      distinguishing_t = (∀ correct c: pass(c, t)) ∧ (∃ wrong w: ¬pass(w, t)),
      toxic_t          = (∃ wrong w: pass(w, t)) ∧ (∃ correct c: ¬pass(c, t)).
    Toxic and distinguishing are disjoint. Without candidates both counts are 0.
    See Rajan 2026 (gate), Jain et al. 2025, arXiv:2504.07164 (toxic / distinguishing tests).

    Args:
      gold_passed: bool ``[B, T]`` test t passes on task b's gold patch.
      test_mask: bool ``[B, T]`` real tests (default all).
      candidate_passed: bool ``[B, N, T]``.
      candidate_correct: bool ``[B, N]``.
      candidate_mask: bool ``[B, N]`` real candidates (default all).
    """
    g = jnp.asarray(gold_passed, bool)
    if g.ndim != 2:
        raise ValueError(f"gold_sanity_gate: gold_passed must be [B, T], got {g.shape}")
    real = jnp.ones(g.shape, bool) if test_mask is None else jnp.asarray(test_mask, bool)
    if real.shape != g.shape:
        raise ValueError(f"gold_sanity_gate: test_mask {real.shape} must match gold_passed {g.shape}")
    keep = real & g  # [B, T]
    n_tests = jnp.sum(real, axis=-1)
    n_dropped = jnp.sum(real & ~g, axis=-1)
    if (candidate_passed is None) != (candidate_correct is None):
        raise ValueError("gold_sanity_gate: pass both candidate_passed and candidate_correct, or neither")
    if candidate_passed is None:
        toxic = dist = jnp.zeros(g.shape, bool)
    else:
        p = jnp.asarray(candidate_passed, bool)
        c = jnp.asarray(candidate_correct, bool)
        b, t = g.shape
        if p.ndim != 3 or p.shape[0] != b or p.shape[2] != t or c.shape != p.shape[:2]:
            raise ValueError(
                f"gold_sanity_gate: candidate_passed must be [B, N, T] with B={b}, T={t} and "
                f"candidate_correct [B, N]; got {p.shape} and {c.shape}"
            )
        cm = jnp.ones(c.shape, bool) if candidate_mask is None else jnp.asarray(candidate_mask, bool)
        if cm.shape != c.shape:
            raise ValueError(f"gold_sanity_gate: candidate_mask {cm.shape} must match candidate_correct {c.shape}")
        is_c = (c & cm)[..., None]  # [B, N, 1]
        is_w = (~c & cm)[..., None]
        wrong_fails = jnp.any(is_w & ~p, axis=1)  # [B, T]
        wrong_passes = jnp.any(is_w & p, axis=1)
        correct_fails = jnp.any(is_c & ~p, axis=1) | ~g  # gold is a correct candidate
        dist = real & ~correct_fails & wrong_fails
        toxic = real & wrong_passes & correct_fails
    n_toxic = jnp.sum(toxic, axis=-1)
    n_dist = jnp.sum(dist, axis=-1)

    def frac(a, d):
        return jnp.where(d > 0, a / jnp.maximum(d, 1), 0.0).astype(jnp.float32)

    return GateReport(
        keep=keep,
        n_tests=n_tests,
        n_dropped=n_dropped,
        frac_dropped=frac(n_dropped, n_tests),
        n_toxic=n_toxic,
        frac_toxic=frac(n_toxic, n_tests),
        n_toxic_kept=jnp.sum(toxic & keep, axis=-1),
        n_distinguishing=n_dist,
        frac_distinguishing=frac(n_dist, n_tests),
    )
