"""Two arithmetic tasks built to test one mechanism of Prefix Sampling each, and their metrics.

**Deep horizon** (``task=arith_deep``; the hard side: more samples of a late state that fresh
rollouts rarely reach correctly). A chain of ``E`` additions and then one multiplication, the
hard step last, modulus 7 and multipliers ``1 … 6``::

    ^a_1+a_2+…+a_{E+1}*a_{E+2}=      solved by      s_2,s_3,…,s_{E+1},s_{E+2}#y$

Multiplying by a unit of the prime field Z_7 is a bijection, so the answer is uniform whatever
the multiplier (no "x0 gives 0" guess). The whole trace is graded (``verify_trace``): every
running value must be right, no restart (``!``) is allowed, and the EOS must follow the answer.
A rollout reaches the hard step with probability P(reach) = a_easy^E, so ``E = 12`` against
``E = 2`` changes how rarely fresh rollouts sample the hard step, with the hard step itself the same.
Demonstrations that err uniformly (``demo_error_rate``) teach misses around a right argmax, which
sharpening alone removes; ``demo_bad_pairs`` teaches a systematically wrong addition table instead
(``bad_addition_table``), misses the greedy policy keeps. ``teacher_forced_reach`` tells the two apart.

**Recovery** (``task=arith_recovery``; the easy side: learning to recover from failure states).
An addition chain whose prompt already holds a *draft* of the first ``D`` running values written
by an unreliable tool: with probability ``fault_rate`` one draft value is corrupted (the values
after it are computed from the corrupted one, as a tool that miscomputed would). The policy
continues the draft; reaching the right answer after a faulty draft needs noticing the fault
(the grammar's ``!`` restarts the list; silently computing from the right value also passes).
Reward: the plain arith verifier on the final answer. Recovery rate = pass rate on drafts with a
fault; its complement on clean drafts measures plain accuracy.

Prefix sources for the positive controls and the fixed-cut arm (``rollouts_class``, the trainer's
a ``prs.rl.trainer.Trainer`` hook): ``oracle_max_k >= 0`` (deep) re-rolls every group with at most
``oracle_max_k`` successes from the solver's correct prefix cut just before the hard step, and
``fixed_cut`` (deep) makes every Prefix Sampling re-roll cut its source just before the hard step;
``oracle_min_k`` (recovery) re-rolls every group with at least that many successes from an
injected-fault prefix (the correct continuation of the draft with its last value corrupted).

Metrics (pure functions, numpy/jnp over explicit arrays): ``guesser_rate`` (the best
answer-only and trace-only predictor from surface features of the question), ``hard_step_mask``
and ``advantage_mass_share`` (the share of |advantage| on the hard step's token),
``teacher_forced_hard_accuracy`` (the policy's probability of the right hard-step value after the
correct prefix), ``recovery_split`` (pass rates on faulty and clean drafts), ``output_length``.
"""
from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from prs.rl.episodes import Episodes, SingleTurnRollouts, fresh_rows
from prs.tasks.arith import (
    ArithConfig,
    ArithTask,
    Problems,
    _solution_text,
    _step_values,
    demonstrations,
    eval_problems,
    make_problems,
    verify,
)
from prs.tasks.registry import register_task

DEEP_MODULUS = 7
TF_PROBLEMS, TF_SAMPLES = 512, 4  # the teacher-forced metric's held-out set (issue #31: >= 512 x 4)


# ---------------------------------------------------------------------------------------------
# Deep horizon


def deep_config(*, easy_steps: int, demo_error_rate: float = 0.03, demo_hard_error_rate: float = 0.6,
                warm_start_min_terms: int | None = 3, eval_every: int = 8) -> ArithConfig:
    """The ``ArithConfig`` of a deep-horizon chain: ``E = easy_steps`` additions, then the multiply
    step (``hard_op="late"``), modulus 7, multipliers ``1 … 6``, no restarts in demonstrations."""
    if not 1 <= easy_steps <= 14:
        raise ValueError(f"easy_steps must lie in [1, 14], got {easy_steps}")
    n = easy_steps + 2
    return ArithConfig(min_terms=n, max_terms=n, modulus=DEEP_MODULUS, hard_op="late",
                       hard_multipliers=tuple(range(1, DEEP_MODULUS)), demo_error_rate=demo_error_rate,
                       demo_hard_error_rate=demo_hard_error_rate, demo_fix_rate=0.0, max_restarts=0,
                       warm_start_min_terms=warm_start_min_terms, eval_every=eval_every)


def bad_addition_table(modulus: int, count: int, *, seed: int = 0) -> dict[tuple[int, int], int]:
    """``count`` of the ``m²`` additions ``(s, a)`` (value written last, addend), drawn without replacement
    at ``seed``, each mapped to one fixed wrong value ``(s + a + d) mod m``, ``d ~ U{1 … m-1}``."""
    rng = np.random.default_rng([int(seed), 0xBAD])
    pick = rng.choice(modulus * modulus, size=count, replace=False)
    shift = rng.integers(1, modulus, size=count)
    return {(int(i) // modulus, int(i) % modulus): int((i // modulus + i % modulus + d) % modulus)
            for i, d in zip(pick, shift)}


def solution_tokens(problems: Problems, cfg: ArithConfig) -> tuple[np.ndarray, np.ndarray]:
    """The correct trace of each problem: ``(tokens [B, S], length [B])``, ``S = 2 max_terms``.

    Row ``i`` is ``s_2 , s_3 , … , s_n # y EOS`` (``2 n_i`` tokens), right-padded with PAD.
    """
    v = cfg.vocab
    vals = _step_values(np.asarray(problems.terms), np.asarray(problems.n_terms),
                        np.asarray(problems.hard_step), cfg.modulus)  # [B, max_terms]
    b, m = vals.shape
    n = np.asarray(problems.n_terms)
    out = np.full((b, 2 * m), v.pad_id, np.int32)
    j = np.arange(m - 1)[None, :]                    # value index: s_{j+2}
    live = j < (n[:, None] - 1)
    val_tok = v.digit0_id + vals[:, 1:]              # [B, m-1]
    sep = np.where(j == n[:, None] - 2, v.answer_id, v.sep_id)
    out[:, 0:2 * (m - 1):2] = np.where(live, val_tok, v.pad_id)
    out[:, 1:2 * (m - 1):2] = np.where(live, sep, v.pad_id)
    rows = np.arange(b)
    out[rows, 2 * (n - 1)] = v.digit0_id + np.asarray(problems.answer)
    out[rows, 2 * (n - 1) + 1] = v.eos_id
    return out, (2 * n).astype(np.int32)


def _trace_values(terms: jax.Array, n_terms: jax.Array, hard_step: jax.Array, modulus: int) -> jax.Array:
    """jnp twin of ``arith._step_values`` (jittable): [B, M] running values."""
    s = terms[:, 0]
    out = [s]
    for k in range(1, terms.shape[1]):  # over term positions (static), not the batch
        a = jnp.maximum(terms[:, k], 0)
        nxt = jnp.where(hard_step == k, s * a, s + a) % modulus
        s = jnp.where(k < n_terms, nxt, s)
        out.append(s)
    return jnp.stack(out, axis=1)


def verify_trace(problems: Problems, tokens: jax.Array, prompt_len: jax.Array, lengths: jax.Array, *,
                 modulus: int, digit0_id: int, sep_id: int, answer_id: int, eos_id: int) -> jax.Array:
    """Whole-trace reward, jittable: ``r_i = 1`` iff the generated part equals the correct trace.

    With ``p = prompt_len_i`` and ``n = n_terms_i``: ``tokens[i, p + 2j] = s_{j+2}`` and
    ``tokens[i, p + 2j + 1]`` is ``,`` (``#`` after the last value) for ``j < n - 1``, then the
    answer digit at ``p + 2(n-1)`` and EOS at ``p + 2n - 1 < lengths_i``. Any wrong running value,
    a restart ``!``, a missing EOS or a truncated rollout scores 0 (no partial credit).

    Args: problems with ``R`` rows (one per rollout); tokens int [R, L]; prompt_len, lengths int [R].
    Returns: float32 [R] in {0, 1}.
    """
    r, width = jnp.shape(tokens)
    for name, x in (("prompt_len", prompt_len), ("lengths", lengths), ("problems.n_terms", problems.n_terms)):
        if jnp.shape(x) != (r,):
            raise ValueError(f"{name} must be [R]=[{r}] like tokens {jnp.shape(tokens)}, got {jnp.shape(x)}")
    terms = jnp.asarray(problems.terms)
    n = jnp.asarray(problems.n_terms)
    vals = _trace_values(terms, n, jnp.asarray(problems.hard_step), modulus)  # [R, M]
    m = terms.shape[1]
    s_len = 2 * m
    j = jnp.arange(s_len)[None, :]                                      # [1, S]
    vi = jnp.minimum(j // 2 + 1, m - 1)                                  # value s_{j//2 + 2}
    val_tok = digit0_id + jnp.take_along_axis(vals, jnp.broadcast_to(vi, (r, s_len)), axis=1)
    last = 2 * (n[:, None] - 1)                                          # answer position
    sep = jnp.where(j == last - 1, answer_id, sep_id)
    want = jnp.where(j % 2 == 0, val_tok, sep)
    want = jnp.where(j == last, digit0_id + vals[:, -1:], want)
    want = jnp.where(j == last + 1, eos_id, want)                        # [R, S]
    live = j < 2 * n[:, None]
    pos = jnp.minimum(prompt_len[:, None] + j, width - 1)
    got = jnp.take_along_axis(jnp.asarray(tokens), pos, axis=1)
    ok = jnp.all((got == want) | ~live, axis=1) & (prompt_len + 2 * n <= lengths) & (prompt_len + 2 * n <= width)
    return ok.astype(jnp.float32)


def hard_step_cut(problems: Problems) -> np.ndarray:
    """[B] generated tokens before the hard step's value: ``2 (h - 1)`` (``h`` = hard step)."""
    return (2 * (np.asarray(problems.hard_step) - 1)).astype(np.int32)


def hard_step_mask(problems: Problems, width: int, *, group_size: int) -> np.ndarray:
    """[R, L] bool, True at the token holding the hard step's value in each rollout row
    (``prompt_len + 2 (h - 1)``, row ``r`` of problem ``r // group_size``)."""
    p = np.repeat(np.asarray(problems.prompt_len) + hard_step_cut(problems), group_size)  # [R]
    out = np.zeros((p.size, width), bool)
    inside = p < width
    out[np.nonzero(inside)[0], p[inside]] = True
    return out


def advantage_mass_share(advantages, loss_mask, focus_mask) -> float:
    """Share of the advantage mass the update puts on the focus tokens:

        Σ_{r,t} |A_r| m_{rt} f_{rt}  /  Σ_{r,t} |A_r| m_{rt}

    (``A [R]`` per-rollout advantages, ``m [R, L]`` the loss mask, ``f [R, L]`` e.g.
    ``hard_step_mask``); 0 when the update has no advantage mass at all (never NaN).
    """
    a = np.abs(np.asarray(advantages, np.float64)).reshape(-1)
    m = np.asarray(loss_mask, bool)
    f = np.asarray(focus_mask, bool)
    if m.shape != f.shape or m.ndim != 2 or m.shape[0] != a.size:
        raise ValueError(f"advantages [R], loss_mask and focus_mask [R, L] needed, got {a.shape}, {m.shape}, {f.shape}")
    total = float((a[:, None] * m).sum())
    return float((a[:, None] * (m & f)).sum() / total) if total > 0 else 0.0


def output_length(policy_mask) -> float:
    """Mean generated tokens per rollout (a shortcut monitor: a policy that stops computing shrinks)."""
    pm = np.asarray(policy_mask, bool)
    return float(pm.sum(axis=1).mean()) if pm.size else 0.0


def hard_step_rollout_accuracy(problems: Problems, tokens, cfg: ArithConfig, *, group_size: int) -> tuple[int, int, int]:
    """``(reached, hard_correct, rows)`` of rollouts: ``reached`` rows wrote every running value
    before the hard step correctly (P(reach) = reached / rows); ``hard_correct`` of those also wrote
    the hard step's value right (the hard step's accuracy on the policy's own correct prefixes)."""
    tokens = np.asarray(tokens)
    sol, _ = solution_tokens(problems, cfg)
    sol = np.repeat(sol, group_size, axis=0)                        # [R, S]
    p = np.repeat(np.asarray(problems.prompt_len), group_size)
    cut = np.repeat(hard_step_cut(problems), group_size)
    cols = p[:, None] + np.arange(sol.shape[1])[None, :]
    got = np.take_along_axis(tokens, np.minimum(cols, tokens.shape[1] - 1), axis=1)
    j = np.arange(sol.shape[1])[None, :]
    pre_ok = np.all((got == sol) | (j >= cut[:, None]), axis=1)
    hard_ok = pre_ok & (got[np.arange(len(cut)), cut] == sol[np.arange(len(cut)), cut])
    return int(pre_ok.sum()), int(hard_ok.sum()), int(len(cut))


def _correct_prefix_rows(problems: Problems, cfg: ArithConfig):
    """``(rows [B, W], prompt_len [B], cut [B], trace [B, S])``: each problem's prompt followed by its
    correct trace up to the hard step (``cut = hard_step_cut``), PAD after; ``W = P + S`` whatever the
    cuts, so every teacher-forced read of one problem set has one input shape (one compile)."""
    sol, _ = solution_tokens(problems, cfg)
    prompt, plen = np.asarray(problems.prompt), np.asarray(problems.prompt_len)
    cut = hard_step_cut(problems)
    rows = np.full((prompt.shape[0], prompt.shape[1] + sol.shape[1]), cfg.vocab.pad_id, np.int32)
    for i in range(prompt.shape[0]):  # host-side assembly, once per call
        rows[i, : plen[i]] = prompt[i, : plen[i]]
        rows[i, plen[i]: plen[i] + cut[i]] = sol[i, : cut[i]]
    return rows, plen, cut, sol


def teacher_forced_hard_accuracy(params, problems: Problems, cfg: ArithConfig, *, model_cfg, samples: int = 4,
                                 key=None, forward=None) -> dict[str, float]:
    """Accuracy of the hard step given the correct prefix (teacher forcing).

    Each problem's input is its prompt plus the correct trace up to the hard step; one forward pass
    gives ``q_i = π(s_n | prefix_i)``, the probability of the right value. Returns the exact mean
    ``E[q]`` (the expected accuracy of a temperature-1 sample), a sampled accuracy from ``samples``
    draws per problem, and the sampled estimate's standard error.
    """
    if forward is None:
        forward = jit_forward()
    rows, plen, cut, sol = _correct_prefix_rows(problems, cfg)
    b, width = rows.shape
    last = plen + cut - 1                                            # [B] position predicting the value
    valid = np.arange(width)[None, :] <= last[:, None]
    logits = forward(params, jnp.asarray(rows), cfg=model_cfg, valid=jnp.asarray(valid))  # [B, W, V]
    lp = jax.nn.log_softmax(logits[jnp.arange(b), jnp.asarray(last)], axis=-1)          # [B, V]
    target = jnp.asarray(sol[np.arange(b), cut])
    q = jnp.exp(lp[jnp.arange(b), target])
    key = jax.random.PRNGKey(0) if key is None else key
    draws = jax.random.categorical(key, lp, axis=-1, shape=(samples, b))                 # [S, B]
    hit = np.asarray(draws == target[None, :], np.float64)
    return {"expected": float(jnp.mean(q)), "sampled": float(hit.mean()),
            "sampled_se": float(hit.mean(axis=0).std(ddof=1) / np.sqrt(b)) if b > 1 else float("nan"),
            "problems": int(b), "samples": int(samples)}


def teacher_forced_reach(params, problems: Problems, cfg: ArithConfig, *, model_cfg, forward=None) -> dict[str, float]:
    """How the policy reaches the hard step: sampling noise or missing skill (teacher forcing).

    One forward pass over each problem's prompt and correct trace before the hard step gives, at every
    token ``j < c_i`` (``c_i = hard_step_cut``), ``q_ij = π(t_ij | prompt, t_i<j)``. Since the whole trace
    is graded, a temperature-1 rollout reaches the hard step correctly with probability exactly
    ``∏_j q_ij``; the greedy policy (argmax at each token) reaches it iff every ``t_ij`` is the argmax.
    Returns the means over problems of both (``reach_sampled``, ``reach_greedy``) and, over the easy
    steps' value tokens, ``E[q]`` (``easy_sampled``) and the argmax share (``easy_greedy``). Errors that
    sharpening alone removes show as ``reach_greedy`` >> ``reach_sampled``.
    """
    if forward is None:
        forward = jit_forward()
    rows, plen, cut, sol = _correct_prefix_rows(problems, cfg)       # the same [B, W] as the hard step's
    b, width = rows.shape
    c = int(cut.max())
    j = np.arange(c)[None, :]                                        # [1, C] trace offset
    live = j < cut[:, None]                                          # [B, C]
    pos = np.where(live, plen[:, None] + j - 1, 0)                   # [B, C] position predicting t_ij
    valid = np.arange(width)[None, :] < (plen + cut)[:, None]
    logits = forward(params, jnp.asarray(rows), cfg=model_cfg, valid=jnp.asarray(valid))  # [B, W, V]
    lp = jax.nn.log_softmax(logits[jnp.arange(b)[:, None], jnp.asarray(pos)], axis=-1)   # [B, C, V]
    target = jnp.asarray(np.where(live, sol[:, :c], 0))
    lq = np.asarray(jnp.take_along_axis(lp, target[..., None], axis=-1)[..., 0], np.float64)  # [B, C]
    top = np.asarray(jnp.argmax(lp, axis=-1) == target)                                     # [B, C]
    value = live & (j % 2 == 0)                                      # the easy steps' value tokens
    return {"reach_sampled": float(np.exp(np.where(live, lq, 0.0).sum(1)).mean()),
            "reach_greedy": float((top | ~live).all(1).mean()),
            "easy_sampled": float(np.exp(lq[value]).mean()), "easy_greedy": float(top[value].mean()),
            "problems": int(b)}


@functools.lru_cache(maxsize=None)
def jit_forward():
    """``prs.models.qwen3.forward`` compiled once per model config and input shape (an evaluation
    calls it every time on the same [B, W])."""
    from prs.models.qwen3 import forward
    return jax.jit(forward, static_argnames=("cfg",))


def _merge_rows(ep: Episodes, ep2: Episodes, take2: np.ndarray) -> Episodes:
    """Row ``r`` from ``ep2`` where ``take2[r]`` else from ``ep`` (both [R, ...], same widths)."""
    t = jnp.asarray(take2)

    def pick(a, b):
        return jnp.where(t.reshape((-1,) + (1,) * (a.ndim - 1)), b, a)

    return Episodes(*(pick(a, b) for a, b in zip(ep, ep2)))


class _Source(NamedTuple):
    tokens: np.ndarray  # [G, W] prompt then the source solution (what ``reroll`` replays from)


class OracleRollouts(SingleTurnRollouts):
    """``SingleTurnRollouts`` with the task's own prefix sources (the positive controls and the
    fixed-cut arm). A training call (``evaluation=False``) samples as usual, then replaces every
    group the task's ``oracle_groups`` selects by ``N`` re-rolls from ``task.oracle_source``; the
    replaced groups' first samples are dropped (their generated tokens are counted in
    ``task.side['oracle_discarded_tokens']``). ``reroll`` (Prefix Sampling) keeps its source but,
    with ``task.fixed_cut``, cuts it where ``task.fixed_cuts`` says."""

    def rollout(self, params, problems, key, *, group_size: int, evaluation: bool = False) -> Episodes:
        ep = super().rollout(params, problems, key, group_size=group_size, evaluation=evaluation)
        task = self.task
        if evaluation:
            return ep
        k = np.asarray(ep.rewards).reshape(-1, group_size).sum(axis=1)
        sel = np.asarray(task.oracle_groups(k, group_size))
        task.side.update(oracle_groups=int(sel.sum()), oracle_discarded_tokens=0)
        if not sel.any():
            return ep
        src_tokens, cut = task.oracle_source(problems, seed=int(jax.random.randint(key, (), 0, 2**31 - 1)))
        ep2 = super().reroll(params, problems, _Source(src_tokens), cut, jax.random.fold_in(key, 0x0AC1E),
                             group_size=group_size)
        take = np.repeat(sel, group_size)
        task.side["oracle_discarded_tokens"] = int(np.asarray(ep.policy_mask)[take].sum())
        return _merge_rows(ep, ep2, take)

    def reroll(self, params, problems, source, cut, key, *, group_size: int) -> Episodes:
        fixed = self.task.fixed_cuts(problems, source, np.asarray(cut))
        return super().reroll(params, problems, source, fixed, key, group_size=group_size)


def check_ramp(task: str, ramp) -> None:
    """One ValueError naming ``task`` unless the warm-start length ramp ``ramp`` is an int >= 0."""
    if not (isinstance(ramp, int) and ramp >= 0):
        raise ValueError(f"task {task!r}: warm_start_ramp must be an int >= 0 (0: off), got {ramp!r}")


def ramp_longest(cfg: ArithConfig, ramp: int, step: int) -> int:
    """The longest chain of the warm start's demonstration step ``step`` under a length ramp of
    ``R = ramp`` steps per term: ``min(max_terms, warm_start_min_terms + 1 + step // R)``;
    ``max_terms`` when ``R = 0`` (off)."""
    if not ramp:
        return cfg.max_terms
    return min(cfg.max_terms, cfg.warm_start_min_terms + 1 + int(step) // ramp)


def ramp_config(cfg: ArithConfig, ramp: int, step: int) -> ArithConfig:
    """``cfg`` drawing ``n`` uniform over ``[warm_start_min_terms, ramp_longest(cfg, ramp, step)]``
    (a length curriculum, Bengio et al. 2009: short chains teach the running sum off the loss plateau
    before long ones dilute the signal); the arrays keep ``max_terms``' shapes."""
    lo, hi = cfg.warm_start_min_terms, ramp_longest(cfg, ramp, step)
    weights = tuple(1.0 if n <= hi else 0.0 for n in range(lo, cfg.max_terms + 1))
    return dataclasses.replace(cfg, min_terms=lo, term_weights=weights)


@dataclasses.dataclass(frozen=True)
class DeepTask(ArithTask):
    """The deep-horizon chain (module docstring) behind the ``SingleTurnTask`` protocol."""

    name: str = "arith_deep"
    oracle_max_k: int = -1
    fixed_cut: bool = False
    warm_start_ramp: int = dataclasses.field(default=0, repr=False)  # in warm_start_key when > 0
    demo_bad_pairs: int = dataclasses.field(default=0, repr=False)     # in warm_start_key when > 0
    demo_bad_rate: float = dataclasses.field(default=0.8, repr=False)
    side: dict = dataclasses.field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self):
        check_ramp("arith_deep", self.warm_start_ramp)
        if not (isinstance(self.demo_bad_pairs, int) and 0 <= self.demo_bad_pairs <= self.cfg.modulus ** 2):
            raise ValueError(f"task 'arith_deep': demo_bad_pairs must be an int in [0, {self.cfg.modulus ** 2}] "
                             f"(0: off), got {self.demo_bad_pairs!r}")
        if not 0.0 <= self.demo_bad_rate <= 1.0:
            raise ValueError(f"task 'arith_deep': demo_bad_rate must lie in [0, 1], got {self.demo_bad_rate!r}")
        if self.warm_start_ramp and self.cfg.warm_start_min_terms is None:
            raise ValueError("task 'arith_deep': warm_start_ramp needs warm_start_min_terms (the ramp's shortest chain)")

    def warm_start_longest(self, step: int) -> int:
        """The longest chain of the warm start's demonstration step ``step`` (``ramp_longest``)."""
        return ramp_longest(self.cfg, self.warm_start_ramp, step)

    def warm_start_problems(self, *, seed: int, step: int, count: int) -> Problems:
        """The warm start's problems. With ``warm_start_ramp = R > 0``, a length curriculum (Bengio
        et al. 2009): ``n`` uniform over ``[warm_start_min_terms, warm_start_longest(step)]``, the
        longest chain growing by one term every ``R`` steps of the demonstration stream until
        ``max_terms`` (short chains teach the running sum off the loss plateau before long ones
        dilute the signal). Same array shapes as ``train_problems``; ``R = 0``: ``ArithTask``'s draw."""
        if not self.warm_start_ramp:
            return super().warm_start_problems(seed=seed, step=step, count=count)
        wide = ramp_config(self.cfg, self.warm_start_ramp, step)
        return make_problems(wide, seed=int(seed) * 1_000_003 + int(step), count=count)

    @property
    def max_new_tokens(self) -> int:
        return 2 * self.cfg.max_terms + 2  # the full trace (2n) plus room to overrun

    def rewards(self, problems: Problems, rollout, *, group_size: int) -> jnp.ndarray:
        rep = Problems(*(jnp.repeat(jnp.asarray(x), group_size, axis=0) for x in problems))
        v = self.cfg.vocab
        r = verify_trace(rep, rollout.tokens, rep.prompt_len, rollout.lengths, modulus=self.cfg.modulus,
                         digit0_id=v.digit0_id, sep_id=v.sep_id, answer_id=v.answer_id, eos_id=v.eos_id)
        return r.reshape(-1, group_size)

    @property
    def warm_start_key(self):
        """What the warm start depends on: not the arm options (every arm of a chain length shares one);
        the length ramp and the wrong addition table when on (off: the key of a task without the options)."""
        base = dataclasses.replace(self, oracle_max_k=-1, fixed_cut=False)
        key = (base, ("warm_start_ramp", self.warm_start_ramp)) if self.warm_start_ramp else base
        if self.demo_bad_pairs:
            key = (key, ("demo_bad_pairs", self.demo_bad_pairs, self.demo_bad_rate))
        return key

    def demonstrations(self, problems: Problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``ArithTask``'s noisy solver, with ``demo_bad_pairs > 0`` also a systematically wrong addition
        table (``bad_addition_table``) applied with probability ``demo_bad_rate``: errors the greedy
        policy keeps, so reaching the hard step is a skill RL must learn, not sampling noise to sharpen
        away (section 9 of results/mechanism/README.md)."""
        if not self.demo_bad_pairs:
            return super().demonstrations(problems, seed=seed)
        d = demonstrations(problems, self.cfg, seed=seed, bad_pairs=bad_addition_table(self.cfg.modulus, self.demo_bad_pairs),
                           bad_rate=self.demo_bad_rate)
        return d.tokens, d.loss_mask

    @property
    def rollouts_class(self):
        """What samples this task (``Trainer``): ``OracleRollouts`` for the oracle and fixed-cut arms."""
        return SingleTurnRollouts if self.oracle_max_k < 0 and not self.fixed_cut else OracleRollouts

    def oracle_groups(self, k: np.ndarray, group_size: int) -> np.ndarray:
        return np.asarray(k) <= self.oracle_max_k

    def oracle_source(self, problems: Problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The solver's correct trace after each prompt, cut just before the hard step."""
        sol, _ = solution_tokens(problems, self.cfg)
        return np.concatenate([np.asarray(problems.prompt), sol], axis=1), hard_step_cut(problems)

    def fixed_cuts(self, problems: Problems, source, cut: np.ndarray) -> np.ndarray:
        """The cuts of a Prefix Sampling re-roll of ``source [G]`` (``units``: its generated tokens):
        with ``fixed_cut`` just before the hard step, ``min(2 (h - 1), units - 1)`` (within the source's
        proper prefixes, as ``flaky_task.FlakyRollouts.reroll`` clamps: a short failed source's EOS and
        padding are never replayed), at least 1; a row the caller does not steer (``cut = 0``, a
        next-visit call's fresh row) stays 0. Without ``fixed_cut``: ``cut``."""
        if not self.fixed_cut:
            return cut
        units = np.asarray(source.units)
        fixed = np.maximum(np.minimum(hard_step_cut(problems), units - 1), 1)
        return np.where(np.asarray(cut) > 0, fixed, 0).astype(np.int32)

    def policy_metrics(self, params, *, model_cfg) -> dict[str, float]:
        """The mechanism metric at every evaluation (``Trainer.evaluate``): the hard step's
        teacher-forced accuracy on ``TF_PROBLEMS`` held-out problems (``teacher_forced_hard_accuracy``;
        ``mech/tf_hard_acc`` = its exact E[q], ``mech/tf_hard_acc_sampled`` from ``TF_SAMPLES`` draws per
        problem at a fixed key, so no random stream of the run's is used)."""
        rep = teacher_forced_hard_accuracy(params, self.eval_problems(count=TF_PROBLEMS), self.cfg, model_cfg=model_cfg,
                                           samples=TF_SAMPLES, key=jax.random.PRNGKey(0))
        return {"mech/tf_hard_acc": rep["expected"], "mech/tf_hard_acc_sampled": rep["sampled"]}

    def batch_metrics(self, problems: Problems, batch) -> dict[str, float]:
        """``mech/adv_mass_hard``: the share of the update's advantage mass on the hard step's token
        (``advantage_mass_share`` with ``hard_step_mask``; ``Trainer.collect`` passes the batch whose row
        ``r`` belongs to problem ``r // N``)."""
        tokens = np.asarray(batch.tokens)
        n = tokens.shape[0] // np.asarray(problems.prompt_len).shape[0]
        focus = hard_step_mask(problems, tokens.shape[1], group_size=n)
        return {"mech/adv_mass_hard": advantage_mass_share(batch.advantages, batch.loss_mask, focus)}

    def episode_metrics(self, problems: Problems, ep: Episodes) -> dict[str, float]:
        """P(reach), the hard step's accuracy on reach and the output length over the fresh rows of
        ``ep`` (``prs.rl.episodes.fresh_rows``: the oracle's re-rolls merged into a training call are
        left out; None when no row is fresh), and the oracle's side metrics."""
        rows, owner = fresh_rows(ep.replayed, groups=np.asarray(problems.prompt_len).shape[0])
        out = {"mech/p_reach": None, "mech/hard_acc_on_reach": None, "mech/output_len": None}
        if rows.size:
            tokens = np.asarray(ep.tokens)[rows]
            reached, hard_ok, n = hard_step_rollout_accuracy(self.take(problems, owner), tokens, self.cfg, group_size=1)
            out = {"mech/p_reach": reached / n, "mech/hard_acc_on_reach": hard_ok / reached if reached else None,
                   "mech/output_len": output_length(np.asarray(ep.policy_mask)[rows])}
        out.update({f"mech/{k}": v for k, v in self.side.items()})  # the oracle's, once per training step
        self.side.clear()
        return out


def _deep(**params) -> DeepTask:
    own = {"oracle_max_k", "fixed_cut", "warm_start_ramp", "demo_bad_pairs", "demo_bad_rate"}
    known = {"easy_steps", "demo_error_rate", "demo_hard_error_rate", "warm_start_min_terms", "eval_every"} | own
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"task 'arith_deep': unknown parameter(s) {unknown}; known: {sorted(known)}")
    if "easy_steps" not in params:
        raise ValueError("task 'arith_deep': easy_steps is required (e.g. 12 or 2)")
    opts = {k: params.pop(k) for k in own if k in params}
    return DeepTask(deep_config(**params), **opts)


register_task("arith_deep", _deep)


# ---------------------------------------------------------------------------------------------
# Recovery


class RecoveryProblems(NamedTuple):
    """Arith problems with a tool's draft of the first running values (``[B, ...]`` numpy).

    prompt, prompt_len, answer, n_terms, terms, hard_step: as ``arith.Problems`` (prompt without the draft)
    draft:       int32 [B, 2 D]  ``d_2 , d_3 , … , d_{D_i+1} ,`` tokens (each value then ``,``), PAD after
    fault:       bool  [B]       the draft holds a corrupted value
    fault_step:  int32 [B]       index ``j`` in ``1 … D_i`` of the corrupted value ``d_{j+1}`` (0: none)
    draft_len:   int32 [B]       ``D_i``, the values in row ``i``'s draft: ``D``, or ``n_i - 2`` on a chain
                                 too short for ``D`` (``short_drafts``)
    """

    prompt: np.ndarray
    prompt_len: np.ndarray
    answer: np.ndarray
    n_terms: np.ndarray
    terms: np.ndarray
    hard_step: np.ndarray
    draft: np.ndarray
    fault: np.ndarray
    fault_step: np.ndarray
    draft_len: np.ndarray


def make_recovery_problems(cfg: ArithConfig, *, draft_steps: int, fault_rate: float, seed: int, count: int,
                           split: str = "train", short_drafts: bool = False) -> RecoveryProblems:
    """``count`` problems of ``cfg`` with a draft of ``draft_steps`` values; with probability
    ``fault_rate`` value ``j ~ U{1 … D}`` is replaced by a uniformly wrong digit and the later draft
    values are computed from it. ``short_drafts``: a chain of ``n < D + 2`` terms gets a draft of
    ``n - 2`` values (one step left to the policy; ``min_terms >= 3``), the warm start's short
    chains; otherwise every chain must hold ``D + 2`` terms. Deterministic in the arguments."""
    lo = 3 if short_drafts else draft_steps + 2
    if draft_steps < 1 or cfg.min_terms < lo:
        raise ValueError(f"draft_steps must lie in [1, min_terms - 2 = {cfg.min_terms - 2}] (one step is left "
                         f"to the policy at least), got {draft_steps}" if not short_drafts else
                         f"short_drafts needs draft_steps >= 1 and min_terms >= 3 (a draft of one value at "
                         f"least), got draft_steps {draft_steps}, min_terms {cfg.min_terms}")
    if not 0.0 <= fault_rate <= 1.0:
        raise ValueError(f"fault_rate must lie in [0, 1], got {fault_rate}")
    base = make_problems(cfg, seed=seed, count=count, split=split) if split != "eval" else \
        eval_problems(cfg, count=count, seed=seed)
    rng = np.random.default_rng([int(seed), 0xFA17])
    m, d = cfg.modulus, draft_steps
    terms = np.asarray(base.terms)
    dl = np.minimum(d, np.asarray(base.n_terms) - 2).astype(np.int32)  # [B] values in each draft
    fault = rng.random(count) < fault_rate
    if short_drafts:
        fault_step = np.where(fault, rng.integers(1, dl + 1), 0).astype(np.int32)
    else:  # every draft is D long (the draw of the task's own problems)
        fault_step = np.where(fault, rng.integers(1, d + 1, size=count), 0).astype(np.int32)
    shift = rng.integers(1, m, size=count)
    vals = np.zeros((count, d), np.int64)
    s = terms[:, 0].astype(np.int64)
    for j in range(1, d + 1):  # over draft positions, not the batch
        s = (s + np.maximum(terms[:, j], 0)) % m
        s = np.where(fault_step == j, (s + shift) % m, s)
        vals[:, j - 1] = s
    v = cfg.vocab
    live = np.arange(d)[None, :] < dl[:, None]                          # [B, D]
    draft = np.empty((count, 2 * d), np.int32)
    draft[:, 0::2] = np.where(live, v.digit0_id + vals, v.pad_id)
    draft[:, 1::2] = np.where(live, v.sep_id, v.pad_id)
    return RecoveryProblems(*base, draft=draft, fault=fault, fault_step=fault_step, draft_len=dl)


def recovery_split(rewards, fault, *, group_size: int) -> dict[str, float | None]:
    """Pass rates on faulty drafts (the recovery rate) and on clean drafts: rewards [R], fault [B]."""
    r = np.asarray(rewards, np.float64).reshape(-1, group_size)
    f = np.asarray(fault, bool)
    if r.shape[0] != f.size:
        raise ValueError(f"rewards [B*N] and fault [B] disagree: {r.shape} vs {f.shape}")
    return {"recovery_rate": float(r[f].mean()) if f.any() else None,
            "clean_pass_rate": float(r[~f].mean()) if (~f).any() else None,
            "fault_share": float(f.mean())}


@dataclasses.dataclass(frozen=True)
class RecoveryTask(ArithTask):
    """The recovery task (module docstring) behind the ``SingleTurnTask`` protocol."""

    name: str = "arith_recovery"
    draft_steps: int = 3
    fault_rate: float = 0.5
    eval_fault_rate: float = 0.5
    oracle_min_k: int = -1
    warm_start_ramp: int = dataclasses.field(default=0, repr=False)  # in warm_start_key when > 0
    side: dict = dataclasses.field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self):
        check_ramp("arith_recovery", self.warm_start_ramp)
        lo = self.cfg.warm_start_min_terms
        if self.warm_start_ramp and not (lo is not None and 3 <= lo < self.cfg.max_terms):
            raise ValueError(f"task 'arith_recovery': warm_start_ramp needs warm_start_min_terms in [3, n_terms - 1 = "
                             f"{self.cfg.max_terms - 1}] (the ramp's shortest chain), got {lo}")

    @property
    def max_new_tokens(self) -> int:
        return self.cfg.max_solution_len

    def warm_start_longest(self, step: int) -> int:
        """The longest chain of the warm start's demonstration step ``step`` (``ramp_longest``)."""
        return ramp_longest(self.cfg, self.warm_start_ramp, step)

    def _make(self, *, seed: int, count: int, split: str, fault_rate: float, wide: bool = False):
        cfg = self.cfg
        if wide and cfg.warm_start_min_terms is not None:
            cfg = dataclasses.replace(cfg, min_terms=max(cfg.warm_start_min_terms, self.draft_steps + 2))
        return make_recovery_problems(cfg, draft_steps=self.draft_steps, fault_rate=fault_rate, seed=seed,
                                      count=count, split=split)

    def train_problems(self, *, seed: int, step: int, count: int) -> RecoveryProblems:
        return self._make(seed=int(seed) * 1_000_003 + int(step), count=count, split="train", fault_rate=self.fault_rate)

    def warm_start_problems(self, *, seed: int, step: int, count: int) -> RecoveryProblems:
        """The warm start's problems. With ``warm_start_ramp = R > 0``, a length curriculum (as the
        deep task's): ``n`` uniform over ``[warm_start_min_terms, warm_start_longest(step)]``, the
        longest chain growing by one term every ``R`` steps of the demonstration stream until
        ``n_terms``; a chain too short for the draft gets a draft of ``n - 2`` values
        (``short_drafts``), so the first steps are one- and two-step continuations that teach the
        running sum off the loss plateau. Same array shapes as ``train_problems``; ``R = 0``: chains
        down to ``max(warm_start_min_terms, D + 2)`` terms, every draft ``D`` long."""
        seed = int(seed) * 1_000_003 + int(step)
        if not self.warm_start_ramp:
            return self._make(seed=seed, count=count, split="train", fault_rate=self.fault_rate, wide=True)
        wide = ramp_config(self.cfg, self.warm_start_ramp, step)
        return make_recovery_problems(wide, draft_steps=self.draft_steps, fault_rate=self.fault_rate, seed=seed,
                                      count=count, split="train", short_drafts=True)

    def eval_problems(self, *, count: int) -> RecoveryProblems:
        return self._make(seed=0, count=count, split="eval", fault_rate=self.eval_fault_rate)

    def take(self, problems, index):
        return RecoveryProblems(*(np.asarray(x)[index] for x in problems))

    def prompts(self, problems) -> tuple[np.ndarray, np.ndarray]:
        """[B, P + 2D]: the chain prompt, then the draft (right after ``=``, ``2 D_i`` tokens), then PAD."""
        p = np.asarray(problems.prompt)
        plen = np.asarray(problems.prompt_len)
        dr = np.asarray(problems.draft)
        out = np.concatenate([p, np.full_like(dr, self.cfg.vocab.pad_id)], axis=1)
        cols = plen[:, None] + np.arange(dr.shape[1])[None, :]
        np.put_along_axis(out, cols, dr, axis=1)
        return out, (plen + 2 * np.asarray(problems.draft_len)).astype(np.int32)

    def rewards(self, problems, rollout, *, group_size: int) -> jnp.ndarray:
        _, plen = self.prompts(problems)
        answer = jnp.repeat(jnp.asarray(problems.answer), group_size)
        r = verify(answer, rollout.tokens, jnp.repeat(jnp.asarray(plen), group_size), rollout.lengths)
        return r.reshape(-1, group_size)

    rewards_jittable = False  # prompts() is host numpy

    def demonstrations(self, problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The noisy solver continuing each draft (it notices a faulty draft value with probability
        ``demo_fix_rate``, which sets the warm start's recovery skill)."""
        cfg, v = self.cfg, self.cfg.vocab
        prompt, plen = self.prompts(problems)
        rng = np.random.default_rng([int(seed), 0x4EC0])
        width = prompt.shape[1] + cfg.max_solution_len
        tokens = np.full((prompt.shape[0], width), v.pad_id, np.int32)
        mask = np.zeros_like(tokens, bool)
        for i in range(prompt.shape[0]):  # host-side data generation
            n = int(problems.n_terms[i])
            text = _solution_text([int(a) for a in problems.terms[i, :n]], cfg.modulus, rng,
                                  error_rate=cfg.demo_error_rate, fix_rate=cfg.demo_fix_rate,
                                  max_fix_delay=cfg.max_fix_delay, max_restarts=cfg.max_restarts,
                                  prefix=v.decode(problems.draft[i, : 2 * int(problems.draft_len[i])]))
            sol = v.encode(text) + [v.eos_id]
            p = int(plen[i])
            tokens[i, :p] = prompt[i, :p]
            tokens[i, p: p + len(sol)] = sol
            mask[i, p: p + len(sol)] = True
        return tokens, mask

    @property
    def warm_start_key(self):
        """What the warm start depends on: not the arm option nor the evaluation's fault rate; the
        length ramp when on (off: the key of a task without the option)."""
        base = dataclasses.replace(self, oracle_min_k=-1, eval_fault_rate=0.5)
        return (base, ("warm_start_ramp", self.warm_start_ramp)) if self.warm_start_ramp else base

    @property
    def rollouts_class(self):
        """What samples this task (``Trainer``): ``OracleRollouts`` for the injected-fault oracle arm."""
        return OracleRollouts if self.oracle_min_k >= 0 else SingleTurnRollouts

    def oracle_groups(self, k: np.ndarray, group_size: int) -> np.ndarray:
        return np.asarray(k) >= self.oracle_min_k

    def oracle_source(self, problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """An injected-fault prefix: the draft's correct continuation for ``1 … n - D - 2`` more
        values (uniform), the last of them corrupted (a uniformly wrong digit), cut after its ``,``."""
        cfg, v = self.cfg, self.cfg.vocab
        prompt, plen = self.prompts(problems)
        rng = np.random.default_rng([int(seed), 0x1F]) if seed is not None else np.random.default_rng(0)
        b = prompt.shape[0]
        out = np.full((b, prompt.shape[1] + cfg.max_solution_len), v.pad_id, np.int32)
        cut = np.zeros(b, np.int32)
        for i in range(b):  # host-side, once per call
            n = int(problems.n_terms[i])
            terms = [int(a) for a in problems.terms[i, :n]]
            d = int(problems.draft_len[i])
            draft = v.decode(problems.draft[i, : 2 * d]).split(",")[:-1]
            s = int(draft[-1])  # continue from the draft's last value (a faulty draft's error propagates)
            more = int(rng.integers(1, max(n - 1 - d, 1) + 1))
            vals = []
            for j in range(d + 1, min(d + more, n - 1) + 1):
                s = (s + terms[j]) % cfg.modulus
                vals.append(s)
            vals[-1] = (vals[-1] + int(rng.integers(1, cfg.modulus))) % cfg.modulus
            text = "".join(f"{x}," for x in vals)
            p = int(plen[i])
            out[i, :p] = prompt[i, :p]
            ids = v.encode(text)
            out[i, p: p + len(ids)] = ids
            cut[i] = len(ids)
        return out, cut

    def fixed_cuts(self, problems, source, cut: np.ndarray) -> np.ndarray:
        return cut

    def episode_metrics(self, problems, ep: Episodes) -> dict[str, Any]:
        """Recovery and clean pass rates, output length and restart rates over the fresh rows of
        ``ep`` (``prs.rl.episodes.fresh_rows``: the oracle's injected-fault re-rolls are left out;
        None when no row is fresh), and the oracle's side metrics."""
        rows, owner = fresh_rows(ep.replayed, groups=np.asarray(problems.fault).shape[0])
        out: dict[str, Any] = {f"mech/{k}": None for k in ("recovery_rate", "clean_pass_rate", "fault_share", "output_len",
                                                           "restart_rate", "restart_rate_faulty", "restart_rate_clean")}
        if rows.size:
            out.update(self._fresh_metrics(self.take(problems, owner), np.asarray(ep.tokens)[rows],
                                           np.asarray(ep.rewards)[rows], np.asarray(ep.policy_mask)[rows]))
        out.update({f"mech/{k}": v for k, v in self.side.items()})  # the oracle's, once per training step
        self.side.clear()
        return out

    def _fresh_metrics(self, problems, tokens, rewards, policy_mask) -> dict[str, Any]:
        """``episode_metrics`` of rows ``[F]``, row f on problem f (``problems [F]``)."""
        out = {f"mech/{k}": v for k, v in recovery_split(rewards, problems.fault, group_size=1).items()}
        out["mech/output_len"] = output_length(policy_mask)
        _, plen = self.prompts(problems)
        fix = tokens == self.cfg.vocab.fix_id
        gen = np.arange(tokens.shape[1])[None, :] >= np.asarray(plen)[:, None]
        restart = (fix & gen).any(axis=1)                                   # [F]
        fault = np.asarray(problems.fault, bool)                            # [F]
        out["mech/restart_rate"] = float(restart.mean())
        # noticing a fault: restarts after faulty drafts against restarts after clean ones
        out["mech/restart_rate_faulty"] = float(restart[fault].mean()) if fault.any() else None
        out["mech/restart_rate_clean"] = float(restart[~fault].mean()) if (~fault).any() else None
        return out


def recovery_config(*, n_terms: int = 6, modulus: int = 10, demo_error_rate: float = 0.03,
                    demo_fix_rate: float = 0.5, eval_every: int = 8,
                    warm_start_min_terms: int | None = None) -> ArithConfig:
    """The ``ArithConfig`` of the recovery task: additions only, ``n_terms`` terms, one restart;
    ``warm_start_min_terms``: the warm start also sees chains down to that length (its draft
    length permitting), a curriculum for the running sum."""
    return ArithConfig(min_terms=n_terms, max_terms=n_terms, modulus=modulus, demo_error_rate=demo_error_rate,
                       demo_fix_rate=demo_fix_rate, max_fix_delay=1, max_restarts=1, eval_every=eval_every,
                       warm_start_min_terms=warm_start_min_terms)


def _recovery(**params) -> RecoveryTask:
    own = {"draft_steps", "fault_rate", "eval_fault_rate", "oracle_min_k", "warm_start_ramp"}
    known = {"n_terms", "modulus", "demo_error_rate", "demo_fix_rate", "eval_every", "warm_start_min_terms"} | own
    unknown = sorted(set(params) - known)
    if unknown:
        raise ValueError(f"task 'arith_recovery': unknown parameter(s) {unknown}; known: {sorted(known)}")
    opts = {k: params.pop(k) for k in own if k in params}
    return RecoveryTask(recovery_config(**params), **opts)


register_task("arith_recovery", _recovery)


# ---------------------------------------------------------------------------------------------
# The guesser


def guesser_rate(fit: Problems, test: Problems, features, targets) -> float:
    """Pass rate of the best lookup-table predictor from surface features of the question.

    ``features(problems) -> [B, F]`` ints (what a guesser may see, e.g. the multiplier and the
    first term), ``targets(problems) -> [B, T]`` ints (what the grader checks: the answer, or the
    whole trace). The predictor maps each feature tuple to its most frequent target on ``fit``
    (the Bayes rule of the empirical joint; an unseen tuple gets the overall most frequent
    target); the rate is its exact-match accuracy on ``test``.
    """
    fx, fy = np.asarray(features(fit)), np.asarray(targets(fit))
    tx, ty = np.asarray(features(test)), np.asarray(targets(test))
    table: dict[tuple, Counter] = {}
    for x, y in zip(map(tuple, fx), map(tuple, fy)):  # host-side fit, once per report
        table.setdefault(x, Counter())[y] += 1
    overall = Counter(map(tuple, fy)).most_common(1)[0][0]
    best = {x: c.most_common(1)[0][0] for x, c in table.items()}
    hits = [best.get(x, overall) == y for x, y in zip(map(tuple, tx), map(tuple, ty))]
    return float(np.mean(hits))
