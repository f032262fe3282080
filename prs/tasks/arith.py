"""Procedurally generated modular-addition chains: the "math" task of the Prefix Sampling trainer.

Problem: ``n`` digits ``a_1 … a_n`` in ``[0, m)``; prompt ``^a_1+a_2+…+a_n=``. Answer
``y = (a_1 + … + a_n) mod m``. A written solution lists the running sums

    s_1 = a_1,   s_k = (s_{k-1} + a_k) mod m,   written: ``s_2,s_3,…,s_n#y$``

so ``^3+5+2+7=`` is solved by ``8,0,7#7$``. Every step is a small local computation (the sum just
written plus the next prompt digit), so a prefix of a rollout is a partial solution: a correct
prefix leaves fewer steps to get right (easier), a prefix with a wrong running sum leads to a wrong
answer unless the policy notices it.

Self-correction: ``!`` means "what I wrote since the last restart is wrong; start the list again".
A demonstration that makes a wrong step may notice it, right after that step or up to
``max_fix_delay`` steps later, write ``!`` and restart from ``s_2``: ``8,1,8!8,0,7#7$``. Because ``!`` is legal anywhere before ``#``, a
failure prefix (one that contains a wrong step) is a handicap, never a dead end: the continuation
can always restart. Only a prefix that already contains ``#`` is decided.

Difficulty knobs: the number of terms ``n`` (steps ``n - 1``; drawn per problem from
``[min_terms, max_terms]`` with optional weights), and the modulus ``m`` (``2 … 10``, single-digit
answers). Demonstrations are imperfect on purpose (``demo_error_rate``, ``demo_fix_rate``), so a
supervised warm start gives a policy that fails sometimes, more on longer chains.

Hard operation (``hard_op``, default ``"none"``: the plain task above, unchanged): exactly one step
of every chain multiplies instead of adding, written ``*`` in the prompt and evaluated left to right
with no precedence: ``^3+5*2+7=`` is ``((3 + 5) * 2 + 7) mod m`` and is solved by ``8,6,3#3$``. It is
step ``h`` (``s_{h+1} = s_h * a_{h+1} mod m``): the last one (``"late"``, ``h = n - 1``), the
first one (``"early"``, ``h = 1``) or one drawn uniformly from ``1 … n - 1`` per problem
(``"uniform"``). Demonstrations err on that step with their own probability
``demo_hard_error_rate`` (default: ``demo_error_rate``), so a warm start is weak exactly there. A
success prefix can only teach what comes after it (``late``: the hard step); a failure prefix can
teach recovery anywhere. Multiplication by a non-unit mod m (0, or 2, 4, 5, 6, 8 mod 10) can hide an
earlier error; the answer is always the left-to-right value of the prompt.

Reward (``verify``): 1 iff the generated part holds exactly one ``#`` followed by the answer digit
and the first EOS, with only digits, ``,`` and ``!`` before ``#``; everything else (no EOS within
the length, no ``#``, a wrong or missing digit, an extra token before EOS, a stray ``+``) is 0.
The scratch work is not graded (as in outcome-reward math RL).

Generation is numpy on the host (a per-problem loop, done once per data set); ``verify`` is a jnp
function over token arrays and runs inside ``jax.jit``.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from prs.tasks.registry import register_task
from prs.tasks.vocab import HARD_VOCAB, TIMES, VOCAB, Vocab

_SPLITS = {"train": 0, "eval": 1, "all": 2}
HARD_OPS = ("none", "late", "early", "uniform")
# fields beyond the plain task's -> their defaults (shown by __repr__ only when set)
_HARD_FIELDS = {"hard_op": "none", "demo_hard_error_rate": None, "warm_start_min_terms": None,
                "hard_multipliers": None}
MAX_TERMS = 16  # the longest chain (15 steps); the held-out hash packs (m + 1)^n < 2^64
EVAL_SEED = 20_260_505  # seed of the fixed held-out evaluation set (offset by ``eval_problems(seed=)``)


@dataclasses.dataclass(frozen=True)
class ArithConfig:
    """Static description of the task (hashable, so it can be a ``jax.jit`` static argument).

    Attributes:
      min_terms, max_terms: the number of terms ``n`` per problem lies in ``[min_terms, max_terms]``
        (``2 <= min_terms <= max_terms <= 16``); the solution has ``n - 1`` steps.
      modulus: ``m`` in ``[2, 10]``; terms and answers are digits ``0 … m-1``.
      term_weights: optional relative weights of ``n = min_terms … max_terms`` (``None``: uniform).
      demo_error_rate: probability that a demonstration step writes a wrong running sum.
      demo_fix_rate: probability that a wrong step is noticed (``!`` then a restart).
      max_fix_delay: a noticed error is flagged after ``0 … max_fix_delay`` further steps.
      max_restarts: restarts per demonstration at most (bounds the length); later errors stand.
      eval_every: one prompt in ``eval_every`` (by a hash of its digits and hard-step position)
        belongs to the held-out split; ``make_problems(split="train")`` never produces those prompts.
      hard_op: ``"none" | "late" | "early" | "uniform"``: where the one multiplication step ``*``
        of each chain sits (see the module docstring); ``"none"``: additions only.
      demo_hard_error_rate: probability that a demonstration's hard step is wrong (``None``: the
        same as ``demo_error_rate``); unused when ``hard_op == "none"``.
      warm_start_min_terms: the supervised warm start draws its problems with ``n`` uniform over
        ``[warm_start_min_terms, max_terms]`` (short chains teach the addition and the alignment
        of a step with its prompt digit); ``None``: from the training distribution. RL and the
        evaluation always use ``[min_terms, max_terms]``.
      hard_multipliers: the values the hard step's multiplier ``a_{h+1}`` is drawn from, uniformly
        (``None``: ``0 … m-1`` like every term). With a prime modulus and the units ``1 … m-1`` the
        multiply step is a bijection, so the answer carries no trace of the multiplier (no
        shortcut such as "x0 gives 0"); unused when ``hard_op == "none"``.
    """

    min_terms: int = 2
    max_terms: int = 7
    modulus: int = 10
    term_weights: tuple[float, ...] | None = None
    demo_error_rate: float = 0.2
    demo_fix_rate: float = 0.5
    max_fix_delay: int = 1
    max_restarts: int = 1
    eval_every: int = 8
    hard_op: str = "none"
    demo_hard_error_rate: float | None = None
    warm_start_min_terms: int | None = None
    hard_multipliers: tuple[int, ...] | None = None

    def __repr__(self) -> str:
        # The fields of the plain task always; the hard-operation fields only when they are set, so
        # a plain config's repr (and so its warm-start cache key, prs.rl.runner) names the plain
        # task's fields only.
        items = [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]
        items = [(k, v) for k, v in items if k not in _HARD_FIELDS or v != _HARD_FIELDS[k]]
        return f"ArithConfig({', '.join(f'{k}={v!r}' for k, v in items)})"

    def __post_init__(self) -> None:
        if not 2 <= self.min_terms <= self.max_terms <= MAX_TERMS:
            raise ValueError(
                f"need 2 <= min_terms <= max_terms <= {MAX_TERMS}, got min_terms={self.min_terms} "
                f"max_terms={self.max_terms}"
            )
        if not 2 <= self.modulus <= 10:
            raise ValueError(f"modulus must lie in [2, 10] (single-digit answers), got {self.modulus}")
        if self.term_weights is not None:
            w = tuple(self.term_weights)
            if len(w) != self.max_terms - self.min_terms + 1 or min(w) < 0 or sum(w) <= 0:
                raise ValueError(
                    f"term_weights needs {self.max_terms - self.min_terms + 1} non-negative weights "
                    f"(n = {self.min_terms}..{self.max_terms}) with a positive sum, got {self.term_weights}"
                )
        for name in ("demo_error_rate", "demo_fix_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must lie in [0, 1], got {v}")
        if self.max_fix_delay < 0 or self.max_restarts < 0:
            raise ValueError(
                f"max_fix_delay and max_restarts must be >= 0, got {self.max_fix_delay}, {self.max_restarts}"
            )
        if self.eval_every < 2:
            raise ValueError(f"eval_every must be >= 2, got {self.eval_every}")
        if self.hard_op not in HARD_OPS:
            raise ValueError(f"hard_op must be one of {list(HARD_OPS)}, got {self.hard_op!r}")
        if self.warm_start_min_terms is not None and not 2 <= self.warm_start_min_terms <= self.max_terms:
            raise ValueError(
                f"warm_start_min_terms must be None or lie in [2, max_terms={self.max_terms}], got "
                f"{self.warm_start_min_terms}"
            )
        if self.hard_multipliers is not None:
            hm = tuple(int(x) for x in self.hard_multipliers)
            if not hm or any(not 0 <= x < self.modulus for x in hm):
                raise ValueError(f"hard_multipliers must be a non-empty tuple of digits in [0, modulus={self.modulus}), "
                                 f"got {self.hard_multipliers!r}")
            object.__setattr__(self, "hard_multipliers", hm)
        if self.demo_hard_error_rate is not None and not 0.0 <= self.demo_hard_error_rate <= 1.0:
            raise ValueError(f"demo_hard_error_rate must lie in [0, 1] or be None, got {self.demo_hard_error_rate}")

    @property
    def hard_error_rate(self) -> float:
        """The demonstrations' error rate on the hard step."""
        return self.demo_error_rate if self.demo_hard_error_rate is None else self.demo_hard_error_rate

    @property
    def prompt_width(self) -> int:
        """``P``: BOS + ``n`` digits + ``n - 1`` plus signs + ``=`` at ``n = max_terms``."""
        return 2 * self.max_terms + 1

    @property
    def max_solution_len(self) -> int:
        """Longest demonstration solution, EOS included: ``(max_restarts + 1)`` lists of
        ``n - 1`` steps of two tokens (value, separator), then the answer digit and EOS."""
        return 2 * (self.max_terms - 1) * (self.max_restarts + 1) + 2

    @property
    def max_len(self) -> int:
        """``L`` of ``demonstrations``: ``prompt_width + max_solution_len``."""
        return self.prompt_width + self.max_solution_len

    @property
    def vocab(self) -> Vocab:
        """``VOCAB`` (18 tokens); ``HARD_VOCAB`` (``VOCAB`` plus ``*``) when ``hard_op != "none"``."""
        return VOCAB if self.hard_op == "none" else HARD_VOCAB


class Problems(NamedTuple):
    """A batch of problems (a pytree of arrays; numpy on creation).

    prompt:      int32 [B, P]  ``^a_1+…+a_n=`` right-padded with PAD to ``P = cfg.prompt_width``
                               (the hard step's ``+`` is ``*``)
    prompt_len:  int32 [B]     ``2 n + 1``
    answer:      int32 [B]     ``(Σ a_k) mod m`` (the digit value, not its token id), or the
                               left-to-right value with the hard step
    n_terms:     int32 [B]     ``n`` (the difficulty)
    terms:       int32 [B, max_terms]  ``a_k``, padded with -1
    hard_step:   int32 [B]     ``h`` in ``1 … n - 1``: step ``h`` multiplies; 0: no hard step
    """

    prompt: np.ndarray
    prompt_len: np.ndarray
    answer: np.ndarray
    n_terms: np.ndarray
    terms: np.ndarray
    hard_step: np.ndarray


class Demonstrations(NamedTuple):
    """Supervised data: ``tokens, loss_mask = demonstrations(...)``.

    tokens:     int32 [B, L]  prompt then solution then EOS, right-padded with PAD, ``L = cfg.max_len``
    loss_mask:  bool  [B, L]  True on the solution tokens and the EOS (the tokens to predict)
    """

    tokens: np.ndarray
    loss_mask: np.ndarray


def _heldout(terms: np.ndarray, n_terms: np.ndarray, modulus: int, eval_every: int,
             hard_step: np.ndarray | None = None) -> np.ndarray:
    """[B] bool: the prompt belongs to the held-out split (a fixed hash of ``(n, a_1 … a_n, h)``;
    ``h = 0``, no hard step, adds nothing to the hash, so a plain chain's split is the same whether
    ``hard_step`` is given or not)."""
    base = np.uint64(modulus + 1)
    key = np.zeros(terms.shape[0], np.uint64)
    for j in reversed(range(terms.shape[1])):  # over term positions, not over the batch
        key = key * base + np.where(j < n_terms, terms[:, j] + 1, 0).astype(np.uint64)
    key = key * np.uint64(0x9E3779B97F4A7C15) + n_terms.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)
    if hard_step is not None:
        key = key + hard_step.astype(np.uint64) * np.uint64(0x94D049BB133111EB)
    return ((key >> np.uint64(29)) % np.uint64(eval_every)) == 0


def make_problems(cfg: ArithConfig, *, seed: int, count: int, split: str = "train") -> Problems:
    """``count`` problems drawn with ``np.random.default_rng(seed)``.

    ``n ~ term_weights`` over ``[min_terms, max_terms]``, ``a_k ~ U{0 … m-1}``, ``y = Σ a_k mod m``;
    with a hard operation ``h = n - 1`` (late), ``1`` (early) or ``~ U{1 … n-1}`` (uniform) and
    ``y`` the left-to-right value.
    ``split="train"`` rejects held-out prompts, ``"eval"`` keeps only them, ``"all"`` keeps both.
    Deterministic in ``(cfg, seed, count, split)``.
    """
    if split not in _SPLITS:
        raise ValueError(f"split must be one of {sorted(_SPLITS)}, got {split!r}")
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    rng = np.random.default_rng([int(seed), _SPLITS[split], 0x5A17])
    ns = np.arange(cfg.min_terms, cfg.max_terms + 1)
    w = np.ones(len(ns)) if cfg.term_weights is None else np.asarray(cfg.term_weights, float)
    w = w / w.sum()
    kept_terms, kept_n, kept_h, have = [], [], [], 0
    draws = 0
    while have < count:
        draws += 1
        if draws > 1000:
            raise ValueError(f"could not draw {count} {split} problems for {cfg} (space too small?)")
        size = 2 * count + 64 if split == "train" else cfg.eval_every * (count + 16)
        n = rng.choice(ns, size=size, p=w).astype(np.int32)
        t = rng.integers(0, cfg.modulus, size=(size, cfg.max_terms), dtype=np.int32)
        t = np.where(np.arange(cfg.max_terms)[None, :] < n[:, None], t, -1)
        h = _hard_steps(cfg, n, rng)
        if cfg.hard_multipliers is not None and cfg.hard_op != "none":  # the multiplier a_{h+1} (column h)
            mult = np.asarray(cfg.hard_multipliers, np.int32)[rng.integers(0, len(cfg.hard_multipliers), size)]
            t = np.where(np.arange(cfg.max_terms)[None, :] == h[:, None], mult[:, None], t)
        if split != "all":
            held = _heldout(t, n, cfg.modulus, cfg.eval_every, h)
            keep = held if split == "eval" else ~held
            t, n, h = t[keep], n[keep], h[keep]
        kept_terms.append(t)
        kept_n.append(n)
        kept_h.append(h)
        have += len(n)
    terms = np.concatenate(kept_terms)[:count]
    n_terms = np.concatenate(kept_n)[:count]
    return _problems_from_terms(terms, n_terms, cfg, np.concatenate(kept_h)[:count])


def _hard_steps(cfg: ArithConfig, n: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[B] int32 hard-step index per problem (0 = none); draws from ``rng`` only for ``uniform``."""
    if cfg.hard_op == "none":
        return np.zeros_like(n)
    if cfg.hard_op == "late":
        return (n - 1).astype(np.int32)
    if cfg.hard_op == "early":
        return np.ones_like(n)
    return rng.integers(1, n).astype(np.int32)  # uniform over 1 … n-1, per row


def _step_values(terms: np.ndarray, n_terms: np.ndarray, hard_step: np.ndarray, modulus: int) -> np.ndarray:
    """[B, max_terms] int: the true running values ``s_1 … s_n`` (left to right; step ``h``
    multiplies), padded past ``n`` with the last value."""
    s = terms[:, 0].astype(np.int64)
    out = [s]
    for k in range(1, terms.shape[1]):  # over term positions, not over the batch
        a = np.maximum(terms[:, k], 0)
        nxt = np.where(hard_step == k, s * a, s + a) % modulus
        s = np.where(k < n_terms, nxt, s)
        out.append(s)
    return np.stack(out, axis=1)


def _problems_from_terms(terms: np.ndarray, n_terms: np.ndarray, cfg: ArithConfig,
                         hard_step: np.ndarray | None = None) -> Problems:
    v = VOCAB
    hard_step = np.zeros_like(n_terms) if hard_step is None else np.asarray(hard_step)
    count = terms.shape[0]
    prompt = np.full((count, cfg.prompt_width), v.pad_id, np.int32)
    prompt[:, 0] = v.bos_id
    cols = np.arange(cfg.max_terms)
    digit_ids = v.digit0_id + np.maximum(terms, 0)
    prompt[:, 1 : 2 * cfg.max_terms : 2] = np.where(cols[None] < n_terms[:, None], digit_ids, v.pad_id)
    plus_or_eq = np.where(cols[None] < n_terms[:, None] - 1, v.id("+"), v.pad_id)
    plus_or_eq = np.where(cols[None] == n_terms[:, None] - 1, v.id("="), plus_or_eq)
    if (hard_step > 0).any():  # the operator before a_{h+1} (column h - 1) is '*'
        plus_or_eq = np.where(cols[None] == hard_step[:, None] - 1, HARD_VOCAB.id(TIMES), plus_or_eq)
        answer = _step_values(terms, n_terms, hard_step, cfg.modulus)[:, -1].astype(np.int32)
    else:
        answer = (np.where(terms >= 0, terms, 0).sum(axis=1) % cfg.modulus).astype(np.int32)
    prompt[:, 2 : 2 * cfg.max_terms + 1 : 2] = plus_or_eq
    return Problems(
        prompt=prompt,
        prompt_len=(2 * n_terms + 1).astype(np.int32),
        answer=answer,
        n_terms=n_terms.astype(np.int32),
        terms=terms.astype(np.int32),
        hard_step=hard_step.astype(np.int32),
    )


def problems_from_strings(cfg: ArithConfig, prompts: list[str]) -> Problems:
    """Problems from prompt strings such as ``"3+5+2+7="`` (a leading ``^`` is optional). With a
    hard operation each prompt holds exactly one ``*`` where ``cfg.hard_op`` puts it (``"3+5*2+7="``;
    last operator for ``late``, first for ``early``, any for ``uniform``); without, none."""
    terms = np.full((len(prompts), cfg.max_terms), -1, np.int32)
    n_terms = np.zeros(len(prompts), np.int32)
    hard_step = np.zeros(len(prompts), np.int32)
    for i, s in enumerate(prompts):
        body = s[1:] if s.startswith("^") else s
        ops = [c for c in body[1:-1:2]] if body.endswith("=") else []
        parts = body[:-1].replace(TIMES, "+").split("+") if body.endswith("=") else None
        if (
            not parts
            or not all(len(p) == 1 and p.isdigit() and int(p) < cfg.modulus for p in parts)
            or not cfg.min_terms <= len(parts) <= cfg.max_terms
        ):
            raise ValueError(f"prompts[{i}]={s!r} is not a chain of {cfg.min_terms}..{cfg.max_terms} digits < {cfg.modulus}")
        h = [k + 1 for k, c in enumerate(ops) if c == TIMES]
        if cfg.hard_op == "none" and h:
            raise ValueError(f"prompts[{i}]={s!r} holds {TIMES!r} but hard_op='none' (additions only)")
        if cfg.hard_op != "none":
            want = {"late": [len(parts) - 1], "early": [1]}.get(cfg.hard_op)
            if len(h) != 1 or (want is not None and h != want):
                where = {"late": "as the last operator", "early": "as the first operator"}.get(cfg.hard_op, "")
                raise ValueError(
                    f"prompts[{i}]={s!r}: hard_op={cfg.hard_op!r} needs exactly one {TIMES!r} {where}".rstrip()
                )
            hard_step[i] = h[0]
        terms[i, : len(parts)] = [int(p) for p in parts]
        n_terms[i] = len(parts)
    return _problems_from_terms(terms, n_terms, cfg, hard_step)


def eval_problems(cfg: ArithConfig, *, count: int = 512, seed: int = 0) -> Problems:
    """The fixed held-out evaluation set: ``count`` problems of the ``eval`` split (prompts that
    ``make_problems(split="train")`` never yields), the same on every call."""
    return make_problems(cfg, seed=EVAL_SEED + seed, count=count, split="eval")


def _parse_prefix(prefix: str, terms: list[int], modulus: int) -> tuple[int, list[int], bool]:
    """``(restarts, values of the current list, ends_with_value)`` of a solution prefix without
    ``#``; ``ValueError`` when it is not a prefix of the solution grammar."""
    n = len(terms)
    attempts = prefix.split("!")
    cur: list[str] = []
    trailing = False
    for j, att in enumerate(attempts):
        items = att.split(",") if att else []
        last = j == len(attempts) - 1
        trailing = last and bool(items) and items[-1] == ""
        vals = items[:-1] if trailing else items
        ok = all(len(x) == 1 and x.isdigit() and int(x) < modulus for x in vals)
        if last:
            ok &= len(vals) <= n - 1 and not (trailing and len(vals) == n - 1)
        else:
            ok &= 1 <= len(vals) <= n - 1
        if not ok:
            raise ValueError(f"prefix {prefix!r} is not a solution prefix for {n} terms mod {modulus}")
        cur = vals
    return len(attempts) - 1, [int(x) for x in cur], bool(cur) and not trailing


def _apply(s: int, a: int, k: int, hard_step: int, modulus: int) -> int:
    """One step ``k`` of the chain: ``s * a`` at the hard step, else ``s + a`` (mod m)."""
    return (s * a if k == hard_step else s + a) % modulus


def _solution_text(
    terms: list[int], modulus: int, rng: np.random.Generator, *, error_rate: float, fix_rate: float,
    max_fix_delay: int, max_restarts: int, prefix: str = "", hard_step: int = 0,
    hard_error_rate: float | None = None, bad_pairs: dict | None = None, bad_rate: float = 0.0,
) -> str:
    """The rest (after ``prefix``, without EOS) of a solution written by the noisy solver of
    ``demonstrations``. A prefix whose current list holds a wrong step is noticed like the
    solver's own errors (probability ``fix_rate``, flagged ``U{0 … max_fix_delay}`` steps after
    the first wrong one, but not before the next separator). Step ``hard_step`` (0: none)
    multiplies and errs with probability ``hard_error_rate`` (``None``: ``error_rate``).
    ``bad_pairs``: a systematically wrong addition table, ``{(s, a): w}``: an addition of ``a`` to the
    value written last ``s`` writes ``w`` with probability ``bad_rate`` (a skill gap the greedy policy
    keeps, unlike the uniform noise of ``error_rate``); empty or None draws nothing extra."""
    n = len(terms)
    her = error_rate if hard_error_rate is None else hard_error_rate
    restarts, vals, pending_sep = _parse_prefix(prefix, terms, modulus)
    k = len(vals)  # values written in the current list (value k is s_{k+1})
    s = vals[-1] if vals else terms[0]
    flag_at = None  # step at which the pending error is flagged with '!'
    prev = [terms[0], *vals[:-1]]
    wrong = [j + 1 for j, (v, p) in enumerate(zip(vals, prev)) if v != _apply(p, terms[j + 1], j + 1, hard_step, modulus)]
    if wrong and restarts < max_restarts and rng.random() < fix_rate:
        earliest = k if pending_sep else k + 1
        flag_at = min(max(wrong[0] + int(rng.integers(0, max_fix_delay + 1)), earliest), n - 1)
    out: list[str] = []
    while True:
        if pending_sep:  # value k is written; its separator is due
            pending_sep = False
            if flag_at == k:
                out.append("!")
                restarts, k, s, flag_at = restarts + 1, 0, terms[0], None
            elif k == n - 1:
                out.append("#" + str(s))
                return "".join(out)
            else:
                out.append(",")
        else:
            k += 1
            last = s
            s = _apply(s, terms[k], k, hard_step, modulus)  # s_k from the value written last (errors propagate)
            if bad_pairs and k != hard_step and (last, terms[k]) in bad_pairs and rng.random() < bad_rate:
                s = bad_pairs[(last, terms[k])]
            elif rng.random() < (her if k == hard_step else error_rate):
                s = (s + int(rng.integers(1, modulus))) % modulus  # a wrong value, uniform over m-1
                if flag_at is None and restarts < max_restarts and rng.random() < fix_rate:
                    flag_at = min(k + int(rng.integers(0, max_fix_delay + 1)), n - 1)
            out.append(str(s))
            pending_sep = True


def demonstrations(
    problems: Problems, cfg: ArithConfig, *, seed: int, error_rate: float | None = None,
    fix_rate: float | None = None, hard_error_rate: float | None = None, bad_pairs: dict | None = None,
    bad_rate: float = 0.0,
) -> Demonstrations:
    """Written solutions of a noisy solver, for a supervised warm start.

    Per step the solver writes ``s_k = (s_{k-1} + a_k) mod m`` from the value it wrote last; with
    probability ``error_rate`` (default ``cfg.demo_error_rate``) it writes a uniformly wrong digit
    instead. A wrong step is noticed with probability ``fix_rate`` (default ``cfg.demo_fix_rate``)
    after ``U{0 … max_fix_delay}`` more steps: the solver then writes ``!`` and restarts the list
    (``max_restarts`` times at most). Unnoticed errors make the final answer wrong, so the data
    are imperfect on purpose; with ``error_rate=0`` every demonstration is correct. The hard step
    (``problems.hard_step``) multiplies and errs with probability ``hard_error_rate`` (default
    ``cfg.hard_error_rate``; with ``error_rate=0`` and ``hard_error_rate=0`` every demonstration of
    a hard variant is correct). ``bad_pairs``/``bad_rate``: a systematically wrong addition table
    (``_solution_text``), off by default.

    Returns ``Demonstrations(tokens [B, L], loss_mask [B, L])`` with ``L = cfg.max_len``.
    """
    er = cfg.demo_error_rate if error_rate is None else float(error_rate)
    fr = cfg.demo_fix_rate if fix_rate is None else float(fix_rate)
    her = cfg.hard_error_rate if hard_error_rate is None else float(hard_error_rate)
    if not (0.0 <= er <= 1.0 and 0.0 <= fr <= 1.0 and 0.0 <= her <= 1.0):
        raise ValueError(f"error_rate, fix_rate and hard_error_rate must lie in [0, 1], got {er}, {fr}, {her}")
    _check_problems(problems, cfg)
    v = VOCAB
    count = problems.prompt.shape[0]
    tokens = np.full((count, cfg.max_len), v.pad_id, np.int32)
    loss_mask = np.zeros((count, cfg.max_len), bool)
    rng = np.random.default_rng([int(seed), 0xDE3])
    for i in range(count):  # host-side data generation, once per data set
        n = int(problems.n_terms[i])
        text = _solution_text(
            [int(a) for a in problems.terms[i, :n]], cfg.modulus, rng, error_rate=er, fix_rate=fr,
            max_fix_delay=cfg.max_fix_delay, max_restarts=cfg.max_restarts,
            hard_step=int(problems.hard_step[i]), hard_error_rate=her, bad_pairs=bad_pairs, bad_rate=bad_rate,
        )
        sol = v.encode(text) + [v.eos_id]
        p = int(problems.prompt_len[i])
        tokens[i, :p] = problems.prompt[i, :p]
        tokens[i, p : p + len(sol)] = sol
        loss_mask[i, p : p + len(sol)] = True
    return Demonstrations(tokens=tokens, loss_mask=loss_mask)


def continue_demonstrations(
    problems: Problems, tokens: np.ndarray, prefix_len: np.ndarray, cfg: ArithConfig, *, seed: int,
    error_rate: float | None = None, fix_rate: float | None = None, hard_error_rate: float | None = None,
) -> Demonstrations:
    """The noisy solver of ``demonstrations`` continuing replayed prefixes (a model-free stand-in
    for a policy in Prefix Sampling).

    Row ``i`` keeps ``tokens[i, :prefix_len_i]`` (prompt, then a solution prefix without ``#``,
    e.g. the start of another rollout) and appends the solver's continuation and EOS. Errors
    already in the prefix's current list are noticed with probability ``fix_rate``; the prefix's
    ``!`` count toward ``max_restarts``.

    Returns ``Demonstrations(tokens [B, L], loss_mask [B, L])`` with the mask on the continuation
    only (prefix masking); ``L = cfg.max_len``, or more when a prefix with extra restarts needs it.
    """
    er = cfg.demo_error_rate if error_rate is None else float(error_rate)
    fr = cfg.demo_fix_rate if fix_rate is None else float(fix_rate)
    her = cfg.hard_error_rate if hard_error_rate is None else float(hard_error_rate)
    _check_problems(problems, cfg)
    b = problems.prompt.shape[0]
    tokens = np.asarray(tokens)
    prefix_len = np.asarray(prefix_len)
    if tokens.ndim != 2 or tokens.shape[0] != b or prefix_len.shape != (b,):
        raise ValueError(
            f"tokens must be [B={b}, L] and prefix_len [B], got {tokens.shape} and {prefix_len.shape}"
        )
    if (prefix_len < problems.prompt_len).any() or (prefix_len > tokens.shape[1]).any():
        raise ValueError(f"prefix_len must lie in [prompt_len, {tokens.shape[1]}], got {prefix_len}")
    v = cfg.vocab  # a policy prefix of a hard variant may hold any of its tokens
    rng = np.random.default_rng([int(seed), 0xC047])
    rows = []
    for i in range(b):  # host-side simulation
        n, p, c = int(problems.n_terms[i]), int(problems.prompt_len[i]), int(prefix_len[i])
        text = _solution_text(
            [int(a) for a in problems.terms[i, :n]], cfg.modulus, rng, error_rate=er, fix_rate=fr,
            max_fix_delay=cfg.max_fix_delay, max_restarts=cfg.max_restarts,
            prefix=v.decode(tokens[i, p:c]), hard_step=int(problems.hard_step[i]), hard_error_rate=her,
        )
        rows.append((list(tokens[i, :c]), v.encode(text) + [v.eos_id]))
    width = max(cfg.max_len, max(len(a) + len(r) for a, r in rows))
    out = np.full((b, width), v.pad_id, np.int32)
    mask = np.zeros((b, width), bool)
    for i, (a, r) in enumerate(rows):
        out[i, : len(a) + len(r)] = a + r
        mask[i, len(a) : len(a) + len(r)] = True
    return Demonstrations(tokens=out, loss_mask=mask)


def _check_problems(problems: Problems, cfg: ArithConfig) -> None:
    b = np.shape(problems.prompt)[0] if np.ndim(problems.prompt) == 2 else None
    if b is None or np.shape(problems.prompt)[1] != cfg.prompt_width:
        raise ValueError(f"problems.prompt must be [B, {cfg.prompt_width}], got {np.shape(problems.prompt)}")
    for name in ("prompt_len", "answer", "n_terms", "hard_step"):
        if np.shape(getattr(problems, name)) != (b,):
            raise ValueError(f"problems.{name} must be [{b}], got {np.shape(getattr(problems, name))}")
    if np.shape(problems.terms) != (b, cfg.max_terms):
        raise ValueError(f"problems.terms must be [{b}, {cfg.max_terms}], got {np.shape(problems.terms)}")


def verify(answer: jax.Array, tokens: jax.Array, prompt_len: jax.Array, lengths: jax.Array) -> jax.Array:
    """Binary outcome reward of rollouts; jittable, no Python control flow on values.

    ``r_i = 1`` iff, in the generated part ``g = tokens[i, prompt_len_i : lengths_i]``, the first EOS
    exists at ``e``, the only ``#`` of ``g[:e]`` is at ``e - 2``, ``g[e - 1]`` is the digit
    ``answer_i``, and ``g[:e-2]`` holds only digits, ``,`` and ``!``. Tokens at or after
    ``lengths_i`` (and after the first EOS) are ignored. Outcome reward as in DeepSeek-R1 /
    DAPO-style math RL (exact match of the final answer; malformed = 0).

    Args:
      answer:     int [R]     the answer digit value (``problems.answer``, repeated per rollout),
                              or a ``Problems`` with ``R`` rows (its ``answer`` is used).
      tokens:     int [R, L]  prompt then generation, any padding after.
      prompt_len: int [R]     number of prompt tokens (generation starts there).
      lengths:    int [R]     number of valid tokens (prompt + generation); ``L`` when unknown.
    Returns:
      float32 [R] in {0, 1}.
    """
    if isinstance(answer, Problems):
        answer = answer.answer
    if jnp.ndim(tokens) != 2:
        raise ValueError(f"tokens must be [R, L], got shape {jnp.shape(tokens)}")
    r, width = jnp.shape(tokens)
    for name, x in (("answer", answer), ("prompt_len", prompt_len), ("lengths", lengths)):
        if jnp.shape(x) != (r,):
            raise ValueError(f"{name} must be [R]=[{r}] like tokens {jnp.shape(tokens)}, got {jnp.shape(x)}")
    v = VOCAB
    tokens = jnp.asarray(tokens)
    pos = jnp.arange(width)[None, :]  # [1, L]
    gen = (pos >= prompt_len[:, None]) & (pos < lengths[:, None])  # [R, L]
    is_eos = gen & (tokens == v.eos_id)
    eos = jnp.min(jnp.where(is_eos, pos, width), axis=1)  # [R], width = no EOS
    body = gen & (pos < eos[:, None])  # [R, L] generated tokens before the first EOS
    is_hash = body & (tokens == v.answer_id)
    one_hash = jnp.sum(is_hash, axis=1) == 1
    hash_pos = jnp.argmax(is_hash, axis=1)  # [R]
    digit = tokens - v.digit0_id
    is_digit = (digit >= 0) & (digit <= 9)
    scratch_ok = is_digit | (tokens == v.sep_id) | (tokens == v.fix_id)
    scratch = body & (pos < hash_pos[:, None])
    all_scratch_ok = jnp.all(scratch_ok | ~scratch, axis=1)
    final = jnp.take_along_axis(digit, jnp.minimum(hash_pos + 1, width - 1)[:, None], axis=1)[:, 0]
    ok = (eos < width) & one_hash & (eos == hash_pos + 2) & (final == answer) & all_scratch_ok
    return ok.astype(jnp.float32)


def answer_start(tokens: jax.Array, prompt_len: jax.Array, lengths: jax.Array) -> jax.Array:
    """[R] int32: index of the first ``#`` (or EOS, or ``lengths``) in the generated part.

    A replayed prefix ``tokens[i, :c]`` with ``c <= answer_start_i`` leaves the answer undecided
    (the continuation can still restart with ``!``); Prefix Sampling should cut failure prefixes
    there or earlier.
    """
    if jnp.ndim(tokens) != 2:
        raise ValueError(f"tokens must be [R, L], got shape {jnp.shape(tokens)}")
    width = jnp.shape(tokens)[1]
    v = VOCAB
    pos = jnp.arange(width)[None, :]
    gen = (pos >= prompt_len[:, None]) & (pos < lengths[:, None])
    stop = gen & ((tokens == v.answer_id) | (tokens == v.eos_id))
    return jnp.min(jnp.where(stop, pos, lengths[:, None]), axis=1).astype(jnp.int32)


def simulate_pass_counts(
    cfg: ArithConfig, *, step_error_rate: float, fix_rate: float, n_problems: int, n_rollouts: int = 8,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Pass counts of a model-free noisy policy: ``N`` rollouts per problem from the demonstration
    solver with the given per-step error and fix rates, scored by ``verify``.

    Returns ``(k [B], n_terms [B])``: successes out of ``n_rollouts`` and each problem's difficulty.
    Use ``np.bincount(k, minlength=N + 1)`` for the bucket histogram.
    """
    problems = make_problems(cfg, seed=seed, count=n_problems)
    rep = jax.tree.map(lambda x: np.repeat(x, n_rollouts, axis=0), problems)  # [R = B N, ...]
    demo = demonstrations(rep, cfg, seed=seed + 1, error_rate=step_error_rate, fix_rate=fix_rate)
    lengths = rep.prompt_len + demo.loss_mask.sum(axis=1)
    reward = np.asarray(verify(rep.answer, demo.tokens, rep.prompt_len, lengths))
    return reward.reshape(n_problems, n_rollouts).sum(axis=1).astype(np.int32), problems.n_terms


def simulate_prefix_replay(
    cfg: ArithConfig, *, step_error_rate: float, fix_rate: float, n_problems: int, n_rollouts: int = 8,
    cut: float = 0.5, seed: int = 0,
) -> dict[int, tuple[int, float]]:
    """Model-free Prefix Sampling on this task: re-rollout pass rate per bucket.

    Draws ``N`` noisy-solver rollouts per problem (as ``simulate_pass_counts``). For a group with
    ``0 < k < N/2`` successes it replays the first successful rollout, for ``N/2 < k < N`` the first
    failed one, cut after ``floor(cut * w)`` of its ``w`` tokens before ``#``; the same solver then
    writes ``N`` continuations (``continue_demonstrations``), scored by ``verify``.

    Returns ``{k: (groups, re-rollout pass rate)}`` for the buckets that occurred.
    """
    if not 0.0 <= cut <= 1.0:
        raise ValueError(f"cut must lie in [0, 1], got {cut}")
    problems = make_problems(cfg, seed=seed, count=n_problems)
    rep = jax.tree.map(lambda x: np.repeat(x, n_rollouts, axis=0), problems)  # [R, ...]
    demo = demonstrations(rep, cfg, seed=seed + 1, error_rate=step_error_rate, fix_rate=fix_rate)
    lengths = rep.prompt_len + demo.loss_mask.sum(axis=1)
    reward = np.asarray(verify(rep.answer, demo.tokens, rep.prompt_len, lengths)).reshape(n_problems, n_rollouts)
    k = reward.sum(axis=1).astype(np.int32)  # [B]
    half = n_rollouts / 2
    chosen = (k > 0) & (k < n_rollouts) & (k != half)
    want = np.where(k < half, 1.0, 0.0)  # replay a success in hard groups, a failure in easy ones
    src = np.argmax(reward == want[:, None], axis=1)  # [B] first rollout with the wanted outcome
    rows = np.arange(n_problems) * n_rollouts + src
    stop = np.asarray(answer_start(demo.tokens, rep.prompt_len, lengths))[rows]
    plen = problems.prompt_len
    cut_at = plen + np.floor(cut * (stop - plen)).astype(np.int32)
    sel = np.nonzero(chosen)[0]
    if sel.size == 0:
        return {}
    sub = jax.tree.map(lambda x: np.repeat(x[sel], n_rollouts, axis=0), problems)
    cont = continue_demonstrations(
        sub, np.repeat(demo.tokens[rows[sel]], n_rollouts, axis=0), np.repeat(cut_at[sel], n_rollouts),
        cfg, seed=seed + 2, error_rate=step_error_rate, fix_rate=fix_rate,
    )
    clen = np.repeat(cut_at[sel], n_rollouts) + cont.loss_mask.sum(axis=1)
    r2 = np.asarray(verify(sub.answer, cont.tokens, sub.prompt_len, clen)).reshape(sel.size, n_rollouts)
    out = {}
    for b in sorted(set(k[sel].tolist())):  # over buckets (at most N), not the batch
        m = k[sel] == b
        out[b] = (int(m.sum()), float(r2[m].mean()))
    return out


def step_accuracy(problems: Problems, tokens: np.ndarray, group_size: int, cfg: ArithConfig, *,
                  start: np.ndarray | None = None) -> dict:
    """First-attempt accuracy of rollouts, per kind of step (host-side diagnostic of a policy).

    Row ``r`` of ``tokens`` ([R = B N, L], prompt then generation) is a rollout of problem
    ``r // group_size``. In its first attempt (the generation up to the first ``!``, ``#`` or EOS),
    written value ``k`` is correct iff it equals ``op_k(v_{k-1}, a_{k+1})`` with ``v_{k-1}`` the value
    the rollout wrote before it (``a_1`` for ``k = 1``): the step's own correctness, errors before
    it not counted. Values are read while they are single digits and ``k <= n - 1``.
    ``start`` ([B] token index, default ``problems.prompt_len``): where the policy's own writing
    begins; values before it (a draft the prompt already holds) are read as context for the next
    value but not counted.

    Returns ``{"add": (correct, written), "hard": (correct, written)}`` summed over rollouts.
    """
    tokens = np.asarray(tokens)
    v = cfg.vocab
    start = np.asarray(problems.prompt_len if start is None else start)
    out = {"add": [0, 0], "hard": [0, 0]}
    for r in range(tokens.shape[0]):  # host-side diagnostic, once per report
        i = r // group_size
        n, h, p = int(problems.n_terms[i]), int(problems.hard_step[i]), int(problems.prompt_len[i])
        terms = [int(a) for a in problems.terms[i, :n]]
        text = v.decode(tokens[r, p:])
        first = text.split("$")[0].split("!")[0].split("#")[0].split(",")
        prev = terms[0]
        pos = p  # token index of value k
        for k, val in enumerate(first, start=1):
            if k >= n or not (len(val) == 1 and val.isdigit()):
                break
            if pos >= start[i]:
                acc = out["hard" if k == h else "add"]
                acc[0] += int(int(val) == _apply(prev, terms[k], k, h, cfg.modulus))
                acc[1] += 1
            prev = int(val)
            pos += 2
    return {key: (c, w) for key, (c, w) in out.items()}


def describe(cfg: ArithConfig) -> str:
    """A short human-readable description of the task and its knobs."""
    hard = "" if cfg.hard_op == "none" else (
        f"; hard step: one '*' (multiply mod m, left to right) per chain, {cfg.hard_op}, "
        f"demo error rate {cfg.hard_error_rate} there"
    )
    return (
        f"modular addition chains: n in [{cfg.min_terms}, {cfg.max_terms}] digits mod {cfg.modulus}, "
        f"prompt '^3+5+2+7=' -> solution '8,0,7#7$' (running sums, '#' answer, '!' = restart); "
        f"vocab {len(cfg.vocab)} tokens {''.join(cfg.vocab.tokens)!r}; P={cfg.prompt_width}, "
        f"L={cfg.max_len}; demos: error rate {cfg.demo_error_rate}/step, fix rate {cfg.demo_fix_rate}, "
        f"fix delay <= {cfg.max_fix_delay}, restarts <= {cfg.max_restarts}; "
        f"1/{cfg.eval_every} of prompts held out for eval{hard}"
    )


# ---------------------------------------------------------------------------------------------
# The task as the trainer sees it (``prs.tasks.registry.SingleTurnTask``)


@dataclasses.dataclass(frozen=True)
class ArithTask:
    """The modular-addition chain task (`prs.tasks.arith`) behind the `SingleTurnTask` protocol."""

    cfg: ArithConfig = ArithConfig()
    name: str = "arith"

    @property
    def vocab_size(self) -> int:
        return self.cfg.vocab.size

    @property
    def pad_id(self) -> int:
        return self.cfg.vocab.pad_id

    @property
    def eos_id(self) -> int:
        return self.cfg.vocab.eos_id

    @property
    def max_new_tokens(self) -> int:
        return self.cfg.max_solution_len

    def train_problems(self, *, seed: int, step: int, count: int) -> Problems:
        # one independent stream per (seed, step): a resumed run draws the same problems
        return make_problems(self.cfg, seed=int(seed) * 1_000_003 + int(step), count=count)

    def eval_problems(self, *, count: int) -> Problems:
        return eval_problems(self.cfg, count=count)

    def warm_start_problems(self, *, seed: int, step: int, count: int) -> Problems:
        """The supervised warm start's problems: ``train_problems``, or with ``n`` uniform over
        ``[warm_start_min_terms, max_terms]`` when that is set (same array shapes)."""
        if self.cfg.warm_start_min_terms is None:
            return self.train_problems(seed=seed, step=step, count=count)
        wide = dataclasses.replace(self.cfg, min_terms=self.cfg.warm_start_min_terms, term_weights=None)
        return make_problems(wide, seed=int(seed) * 1_000_003 + int(step), count=count)

    def take(self, problems: Problems, index: np.ndarray) -> Problems:
        return Problems(*(np.asarray(x)[index] for x in problems))

    def prompts(self, problems: Problems) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(problems.prompt), np.asarray(problems.prompt_len)

    def rewards(self, problems: Problems, rollout, *, group_size: int) -> jnp.ndarray:
        """[B, N] 0/1. The response graded is everything after the *task* prompt: for a re-rollout,
        the replayed prefix plus the continuation (the rollout's own ``prompt_lengths`` would
        hide the prefix from the verifier)."""
        answer = jnp.repeat(jnp.asarray(problems.answer), group_size)  # [R]
        task_prompt_len = jnp.repeat(jnp.asarray(problems.prompt_len), group_size)  # [R]
        r = verify(answer, rollout.tokens, task_prompt_len, rollout.lengths)
        return r.reshape(-1, group_size)  # [B, N]

    def demonstrations(self, problems: Problems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        d = demonstrations(problems, self.cfg, seed=seed)
        return d.tokens, d.loss_mask

    def decode(self, ids) -> str:
        return self.cfg.vocab.decode([int(i) for i in ids])


def _arith(**params) -> ArithTask:
    fields = {f.name for f in dataclasses.fields(ArithConfig)}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ValueError(f"task 'arith': unknown parameter(s) {unknown}; known: {sorted(fields)}")
    if params.get("term_weights") is not None:
        params["term_weights"] = tuple(float(w) for w in params["term_weights"])
    return ArithTask(ArithConfig(**params))


register_task("arith", _arith)
