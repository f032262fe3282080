"""Held-out metrics of k samples per problem, per data source: mean@k, pass@j, maj@k.

    eval_metrics(rewards [B, N], answers [B*N], sources [B]) -> {"<source>/mean@N": ..., ...}

With c_b = #{n : r_bn >= 1} successes of problem b among its N samples (a success is reward >= 1,
the trainer's rule, ``prs.rewards.custom``):

    mean@N  = mean_b c_b / N                                  (verl's ``mean@N`` of a 0/1 score)
    pass@j  = mean_b [1 - C(N - c_b, j) / C(N, j)]            for j = 1, 2, 4, ... < N and j = N
              (the unbiased estimator of Chen et al. 2021, arXiv:2107.03374,
              ``prs.rewards.verifiers.pass_at_k``; pass@1 = mean@N)
    maj@N   = mean_b 1[r_b,first(m_b) >= 1], m_b = the most frequent answer among problem b's samples
              that have one (ties: the answer seen first), scored by the reward of its first sample;
              a problem none of whose samples has an answer scores 0.

maj@N follows verl's ``calc_maj_val`` (``verl/trainer/ppo/metric_utils.py``: the value of the first
member of the most common vote), on all N samples at once where verl bootstraps subsets of size N
with replacement; the names follow verl's ``process_validation_metrics`` (``mean@N``, ``maj@N``) with
``pass@j`` beside them. Every source's metrics and the pool of all sources (``all/``) are returned.
"""
from __future__ import annotations

import numpy as np

from prs.rewards.math_verify import extract_answer, normalize
from prs.rewards.verifiers import pass_at_k


def answer_key(text: str) -> str | None:
    """The vote of a response for maj@k: its final answer (``extract_answer``: last boxed, stated,
    or last number), normalised (``normalize``); None when it has none."""
    a = extract_answer(text)
    return None if a is None else normalize(a)


def pass_ks(n: int) -> list[int]:
    """1, 2, 4, ... below n, then n (verl's subset sizes, starting at 1)."""
    ks, j = [], 1
    while j < n:
        ks.append(j)
        j *= 2
    return ks + [n]


def majority(rewards: np.ndarray, answers: list) -> np.ndarray:
    """[B] 0/1 maj@N of ``rewards [B, N]`` and their ``answers`` [B*N] (row-major; None: no vote)."""
    b, n = rewards.shape
    out = np.zeros(b)
    for i in range(b):  # host-side strings, once per evaluation
        votes = {}  # answer -> (count, first sample); dicts keep first-seen order
        for j in range(n):
            a = answers[i * n + j]
            if a is not None:
                c, first = votes.get(a, (0, j))
                votes[a] = (c + 1, first)
        if votes:
            top = max(votes.values(), key=lambda cf: cf[0])  # max returns the first of equal counts
            out[i] = float(rewards[i, top[1]] >= 1.0)
    return out


def eval_metrics(rewards, answers: list, sources: list[str]) -> dict[str, float]:
    """``{"<source>/mean@N", "<source>/pass@j" (j in pass_ks(N)), "<source>/maj@N"}`` for each source
    and for ``all`` (the module docstring); ``rewards [B, N]``, ``answers [B*N]``, ``sources [B]``."""
    rewards = np.asarray(rewards, np.float64)
    if rewards.ndim != 2 or len(sources) != rewards.shape[0] or len(answers) != rewards.size:
        raise ValueError(f"eval_metrics: rewards {rewards.shape}, {len(answers)} answers and {len(sources)} sources "
                         f"do not align (need [B, N], B*N, B)")
    if "all" in sources:
        raise ValueError("eval_metrics: a data source is named 'all', the name of the pooled metrics; rename it")
    b, n = rewards.shape
    c = (rewards >= 1.0).sum(1)  # [B]
    passes = {j: np.asarray(pass_at_k(np.full(b, n), c, k=j), np.float64) for j in pass_ks(n)}  # [B] each
    maj = majority(rewards, answers)
    src = np.array(sources, dtype=object)
    out = {}
    for name in ["all", *dict.fromkeys(sources)]:
        sel = np.ones(b, bool) if name == "all" else src == name
        out[f"{name}/mean@{n}"] = float(np.mean(c[sel] / n))
        out.update({f"{name}/pass@{j}": float(np.mean(p[sel])) for j, p in passes.items()})
        out[f"{name}/maj@{n}"] = float(np.mean(maj[sel]))
    return out
