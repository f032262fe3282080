"""Selection and evaluation of candidate patches: Pass@k, Best@k, ORM scores, R2E-Gym verifiers,
SWE-Gym per-instance capping. All functions are pure jnp and jittable (``k``, ``n``, ``cap`` are
static Python ints).

Conventions: B tasks (groups), N candidate slots per task, T tests. ``mask # [B, N]`` marks real
candidates; an empty slot never counts, never wins a selection, and gets score ``-inf`` from the
scoring functions here. A task with no real candidate gets Pass@k = Best@k = 0 (never NaN).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "pass_at_k",
    "best_at_k",
    "select_best",
    "orm_score",
    "orm_score_from_logits",
    "execution_based_score",
    "execution_free_score",
    "top_n_scores",
    "hybrid_score",
    "cap_successes_per_task",
]


def _is_concrete(x) -> bool:
    return not isinstance(x, jax.core.Tracer)


def _check_k(name: str, k: int) -> None:
    if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
        raise ValueError(f"{name}: k must be a Python int >= 1, got {k!r}")


def _comb_ratio(x: jax.Array, n: jax.Array, k: int) -> jax.Array:
    """C(x, k) / C(n, k) = Π_{j=0}^{k-1} (x − j)/(n − j) for integers 0 <= x <= n, k static.

    Factors with x − j < 0 are clipped to 0 (C(x, k) = 0 for x < k). Factors with j >= n are set to
    1, which turns the ratio into C(x, n)/C(n, n) = 1[x = n] when k > n ("draw all n").
    """
    j = jnp.arange(k, dtype=jnp.float32).reshape((1,) * x.ndim + (k,))  # [1.., k]
    x = x.astype(jnp.float32)[..., None]  # [..., 1]
    n = n.astype(jnp.float32)[..., None]
    live = j < n  # [..., k]
    num = jnp.maximum(x - j, 0.0)
    den = jnp.where(live, n - j, 1.0)
    return jnp.prod(jnp.where(live, num / den, 1.0), axis=-1)


def pass_at_k(n: jax.Array, c: jax.Array, *, k: int) -> jax.Array:
    """Unbiased Pass@k from n samples of which c are correct (Chen et al. 2021, arXiv:2107.03374).

    pass@k = 1 − C(n−c, k)/C(n, k) = 1 − Π_{j=0}^{k−1} (1 − c/(n−j)),
    the same number as Codex's 1 − Π_{i=n−c+1}^{n} (1 − k/i) (both are exact identities); the
    length-k product is used because k is static, so it vectorises over any shape of (n, c)
    without large factorials. It is summed in log space (log1p) and finished with expm1, so that a
    small Pass@k keeps its relative accuracy in float32 for n in the millions.

    Behaviour for k > n: with concrete inputs a ``ValueError``; under ``jit`` (traced n) the value is
    pass@n = 1[c > 0] ("draw everything you have"). n = 0 (no samples) gives 0 in both modes.

    Args:
      n: int ``[...]``, samples per problem (>= 0).
      c: int ``[...]``, correct samples (0 <= c <= n), same shape as ``n``.
      k: static int >= 1.

    Returns:
      float32 ``[...]``.
    """
    _check_k("pass_at_k", k)
    n, c = jnp.asarray(n), jnp.asarray(c)
    if n.shape != c.shape:
        raise ValueError(f"pass_at_k: n and c must have the same shape, got {n.shape} and {c.shape}")
    if _is_concrete(n) and _is_concrete(c):
        nn, cc = np.asarray(n), np.asarray(c)
        if np.any(cc < 0) or np.any(cc > nn):
            raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={nn.tolist()}, c={cc.tolist()}")
        if np.any((k > nn) & (nn > 0)):
            raise ValueError(f"pass_at_k: k={k} exceeds n={nn.tolist()} (unbiased Pass@k needs k <= n)")
    return _pass_at_k(n, c, k=int(k))


@functools.partial(jax.jit, static_argnames="k")
def _pass_at_k(n: jax.Array, c: jax.Array, *, k: int) -> jax.Array:
    c = jnp.clip(c, 0, jnp.maximum(n, 0)).astype(jnp.float32)[..., None]  # [..., 1]
    nf = n.astype(jnp.float32)[..., None]
    j = jnp.arange(k, dtype=jnp.float32).reshape((1,) * n.ndim + (k,))  # [1.., k]
    live = j < nf  # factors with j >= n are dropped (k > n under jit -> Pass@n)
    q = jnp.minimum(c / jnp.where(live, nf - j, 1.0), 1.0)  # c/(n−j), a zero factor when c >= n−j
    # log C(n−c, k)/C(n, k) = Σ_j log1p(−c/(n−j)); 1 − exp(·) via expm1 keeps small Pass@k accurate.
    log_fail = jnp.sum(jnp.where(live, jnp.log1p(-q), 0.0), axis=-1)
    return jnp.where(n > 0, -jnp.expm1(log_fail), 0.0).astype(jnp.float32)


def _rank_stats(scores: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per candidate: a = #valid candidates with a strictly higher score, m = #valid with an equal one."""
    s_i, s_j = scores[..., :, None], scores[..., None, :]  # [B, N, 1], [B, 1, N]
    v_j = mask[..., None, :]  # [B, 1, N]
    above = jnp.sum((s_j > s_i) & v_j, axis=-1)  # [B, N]
    equal = jnp.sum((s_j == s_i) & v_j, axis=-1)  # [B, N] (includes itself when valid)
    return above, equal


def _check_bn(name: str, **arrays: jax.Array) -> tuple[int, ...]:
    shapes = {k: tuple(jnp.shape(v)) for k, v in arrays.items() if v is not None}
    first = next(iter(shapes.values()))
    if len(first) < 1 or any(s != first for s in shapes.values()):
        raise ValueError(f"{name}: arrays must share one shape [..., N], got {shapes}")
    return first


def best_at_k(
    scores: jax.Array, correct: jax.Array, *, k: int, mask: jax.Array | None = None
) -> jax.Array:
    """Best@k: expected correctness of the highest-scored of k candidates drawn without replacement.

    Definition (exact expectation, no sampling): draw a uniformly random k-subset of a task's
    n valid candidates, select the one with the highest score; ties inside the subset are broken
    uniformly at random. Best@k is the expected correctness of the selected candidate. With
    a_i = #candidates scored strictly above i and m_i = #candidates scored equal to i (including i),
    candidate i is selected with probability

        P_i = [C(n − a_i, k) − C(n − a_i − m_i, k)] / (C(n, k) · m_i),

    (the subset holds none of the a_i higher ones and at least one of i's tie group; within the
    group each present member is equally likely), and Best@k = Σ_i P_i · correct_i. Best@1 is the
    mean correctness; Best@n is the correct fraction of the top tie group; all-equal scores give the
    mean correctness for every k. Used by SWE-Gym (Pan et al. 2025, arXiv:2412.21139) and R2E-Gym
    (Jain et al. 2025, arXiv:2504.07164); they report Best@k ≤ Pass@k.

    k > n: ``ValueError`` for concrete masks; under ``jit`` it is Best@n. Tasks with n = 0: 0.

    Args:
      scores: float ``[..., N]`` verifier scores (``-inf`` allowed; NaN is not).
      correct: bool/0-1 ``[..., N]``.
      k: static int >= 1.
      mask: bool ``[..., N]`` valid slots (default all).

    Returns:
      float32 ``[...]``.
    """
    _check_k("best_at_k", k)
    scores = jnp.asarray(scores)
    mask = jnp.ones(scores.shape, bool) if mask is None else jnp.asarray(mask, bool)
    _check_bn("best_at_k", scores=scores, correct=correct, mask=mask)
    n = jnp.sum(mask, axis=-1)  # [...]
    if _is_concrete(mask) and np.any(k > np.asarray(n)[np.asarray(n) > 0]):
        raise ValueError(f"best_at_k: k={k} exceeds the number of valid candidates {np.asarray(n).tolist()}")
    return _best_at_k(scores, jnp.asarray(correct), mask, k=int(k))


@functools.partial(jax.jit, static_argnames="k")
def _best_at_k(scores: jax.Array, correct: jax.Array, mask: jax.Array, *, k: int) -> jax.Array:
    n = jnp.sum(mask, axis=-1)  # [...]
    above, equal = _rank_stats(scores, mask)
    n_b = jnp.broadcast_to(n[..., None], above.shape)
    p = (_comb_ratio(n_b - above, n_b, k) - _comb_ratio(n_b - above - equal, n_b, k)) / jnp.maximum(equal, 1)
    p = jnp.where(mask, p, 0.0)
    return jnp.sum(p * jnp.asarray(correct, jnp.float32), axis=-1).astype(jnp.float32)


@jax.jit
def select_best(scores: jax.Array, *, mask: jax.Array | None = None) -> jax.Array:
    """Index of the highest-scored valid candidate per task (deterministic: ties -> lowest index).

    Returns int32 ``[...]``; -1 for a task with no valid candidate.
    """
    scores = jnp.asarray(scores, jnp.float32)
    mask = jnp.ones(scores.shape, bool) if mask is None else jnp.asarray(mask, bool)
    _check_bn("select_best", scores=scores, mask=mask)
    # Rank by (valid, score) so that a valid -inf still beats an empty slot.
    idx = jnp.argmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
    first_valid = jnp.argmax(mask, axis=-1)
    top = jnp.max(jnp.where(mask, scores, -jnp.inf), axis=-1)
    idx = jnp.where(top == -jnp.inf, first_valid, idx)  # all valid scores -inf: lowest valid index
    return jnp.where(jnp.any(mask, axis=-1), idx, -1).astype(jnp.int32)


def orm_score(logit_yes: jax.Array, logit_no: jax.Array) -> jax.Array:
    """Outcome-reward-model score r = exp(l_yes)/(exp(l_yes) + exp(l_no)) = σ(l_yes − l_no).

    Stable for huge logits (only the difference enters; ``jax.nn.sigmoid`` saturates cleanly);
    raw logits or log-probabilities give the same value. Both logits +inf (or both -inf): 0.5.
    See Pan et al. 2025 (SWE-Gym), arXiv:2412.21139, Sec. 4; R2E-Gym's execution-free verifier.
    """
    ly, ln = jnp.asarray(logit_yes, jnp.float32), jnp.asarray(logit_no, jnp.float32)
    if ly.shape != ln.shape:
        raise ValueError(f"orm_score: logit_yes {ly.shape} and logit_no {ln.shape} must match")
    d = ly - ln
    return jax.nn.sigmoid(jnp.where(jnp.isnan(d), 0.0, d))


def orm_score_from_logits(logits: jax.Array, *, yes_id: int, no_id: int) -> jax.Array:
    """``orm_score`` from next-token logits ``[..., V]`` at the verdict position -> ``[...]``."""
    logits = jnp.asarray(logits)
    v = logits.shape[-1] if logits.ndim else 0
    if not (0 <= yes_id < v and 0 <= no_id < v) or yes_id == no_id:
        raise ValueError(f"orm_score_from_logits: yes_id={yes_id}, no_id={no_id} invalid for V={v}")
    return orm_score(logits[..., yes_id], logits[..., no_id])


def execution_free_score(
    logit_yes: jax.Array, logit_no: jax.Array, *, mask: jax.Array | None = None
) -> jax.Array:
    """R2E-Gym execution-free score s^EF = P(YES)/(P(YES)+P(NO)) ``[..., N]``; -inf on empty slots."""
    s = orm_score(logit_yes, logit_no)
    return s if mask is None else jnp.where(jnp.asarray(mask, bool), s, -jnp.inf)


@jax.jit
def execution_based_score(
    test_score: jax.Array, regression_score: jax.Array, *, mask: jax.Array | None = None
) -> jax.Array:
    """R2E-Gym execution-based score.

    s^EB_k = TestScore_k if RS_k = max_j RS_j (over the task's valid candidates) else 0,
    TestScore_k = Σ_i Pass(P_k, T_i) over generated reproduction tests, RS_k the regression-test
    score. Empty slots get -inf. See Jain et al. 2025 (R2E-Gym), arXiv:2504.07164, Sec. 4.

    Args:
      test_score: ``[B, N]`` counts of passed generated tests (or a ``[B, N, T]`` bool pass
        matrix, summed over T).
      regression_score: ``[B, N]`` (or ``[B, N, T']`` bool, summed).
      mask: bool ``[B, N]``.

    Returns:
      float32 ``[B, N]``.
    """
    ts, rs = jnp.asarray(test_score), jnp.asarray(regression_score)
    if ts.dtype == bool:
        ts = jnp.sum(ts, axis=-1)
    if rs.dtype == bool:
        rs = jnp.sum(rs, axis=-1)
    ts, rs = ts.astype(jnp.float32), rs.astype(jnp.float32)
    mask = jnp.ones(ts.shape, bool) if mask is None else jnp.asarray(mask, bool)
    _check_bn("execution_based_score", test_score=ts, regression_score=rs, mask=mask)
    best_rs = jnp.max(jnp.where(mask, rs, -jnp.inf), axis=-1, keepdims=True)  # [B, 1]
    s = jnp.where(rs == best_rs, ts, 0.0)
    return jnp.where(mask, s, -jnp.inf)


@functools.partial(jax.jit, static_argnames="n")
def top_n_scores(scores: jax.Array, *, n: int, mask: jax.Array | None = None) -> jax.Array:
    """Top_n(s)_k = s_k if candidate k is among the n highest-scored valid candidates, else -inf.

    Ties at the cut are broken by the lower index (rank_k = #{s_j > s_k} + #{s_j = s_k, j < k}),
    so exactly min(n, #valid) candidates keep their score.
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"top_n_scores: n must be an int >= 1, got {n!r}")
    scores = jnp.asarray(scores, jnp.float32)
    mask = jnp.ones(scores.shape, bool) if mask is None else jnp.asarray(mask, bool)
    _check_bn("top_n_scores", scores=scores, mask=mask)
    s_i, s_j = scores[..., :, None], scores[..., None, :]
    idx = jnp.arange(scores.shape[-1])
    earlier = (idx[None, :] < idx[:, None]).reshape((1,) * (scores.ndim - 1) + idx.shape * 2)  # [1.., N, N]: j < i
    ahead = ((s_j > s_i) | ((s_j == s_i) & earlier)) & mask[..., None, :]
    rank = jnp.sum(ahead, axis=-1)  # [B, N]
    return jnp.where(mask & (rank < n), scores, -jnp.inf)


@functools.partial(jax.jit, static_argnames="top_n")
def hybrid_score(
    ef_score: jax.Array,
    test_score: jax.Array,
    regression_score: jax.Array,
    *,
    top_n: int,
    mask: jax.Array | None = None,
) -> jax.Array:
    """R2E-Gym hybrid verifier s^H_k = Top_n(s^EF)_k + s^EB_k.

    The execution-free score shortlists n candidates (others -inf); among them the
    execution-based score decides and the EF score (in [0, 1]) breaks ties between equal test
    counts. See Jain et al. 2025 (R2E-Gym), arXiv:2504.07164 (Best@26 = 51.0% with this rule).
    """
    eb = execution_based_score(test_score, regression_score, mask=mask)
    return top_n_scores(ef_score, n=top_n, mask=mask) + eb


@functools.partial(jax.jit, static_argnames="cap")
def cap_successes_per_task(
    task_ids: jax.Array, success: jax.Array, *, key: jax.Array, cap: int = 2
) -> jax.Array:
    """SWE-Gym per-instance capping: keep at most ``cap`` successful trajectories per task.

    For each task, the kept ones are a uniformly random subset (of size min(cap, #successes)) of
    its successful trajectories, drawn from ``key`` (same key and inputs -> same choice); failed
    trajectories are never kept (rejection-sampling fine-tuning). Sort-based, O(R log R), jittable.
    See Pan et al. 2025 (SWE-Gym), arXiv:2412.21139 (cap c = 2 worked best).

    Args:
      task_ids: int ``[R]`` task of each trajectory (any integers, any order).
      success: bool ``[R]``.
      key: a JAX PRNG key.
      cap: static int >= 1.

    Returns:
      bool ``[R]`` keep mask.
    """
    if not isinstance(cap, (int, np.integer)) or cap < 1:
        raise ValueError(f"cap_successes_per_task: cap must be an int >= 1, got {cap!r}")
    task_ids, success = jnp.asarray(task_ids), jnp.asarray(success, bool)
    if task_ids.ndim != 1 or task_ids.shape != success.shape:
        raise ValueError(
            f"cap_successes_per_task: task_ids and success must both be [R], got {task_ids.shape}, {success.shape}"
        )
    r = task_ids.shape[0]
    u = jax.random.uniform(key, (r,))  # [R] random priorities
    order = jnp.lexsort((u, ~success, task_ids))  # by task, successes first, then priority
    t_sorted = task_ids[order]
    pos = jnp.arange(r)
    new_seg = jnp.concatenate([jnp.ones((1,), bool), t_sorted[1:] != t_sorted[:-1]])
    seg_start = jax.lax.cummax(jnp.where(new_seg, pos, 0))
    rank_sorted = pos - seg_start  # [R] rank within the task
    rank = jnp.zeros((r,), rank_sorted.dtype).at[order].set(rank_sorted)
    return success & (rank < cap)
