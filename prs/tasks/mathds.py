"""DeepMind's ``mathematics_dataset`` (Saxton et al., ICLR 2019) as a character-level RL task.

The rows are the committed file ``prs/tasks/data/mathematics_dataset.jsonl`` (made once by
``scripts/gen_mathematics_dataset.py`` in its own venv; ``results/mathds/README.md``): 12 modules of
school arithmetic, comparison, number theory and unit conversion, a train pool at the generator's
easy / medium / hard entropy thirds, held-out ``interpolate`` (same modules, same difficulty range)
and ``extrapolate`` (harder variants) splits.

Problem: a question string ``q`` and its answer string ``a`` as the generator writes them.
Prompt ``^q#`` (``^`` BOS, ``#`` the end of the question), solution ``a$`` (``$`` EOS); every token is
one character, so ``decode(encode(s)) == s``.

    ^What is 5 divided by 32?#5/32$

Reward (``verify``, jnp, runs under ``jax.jit``): 1 iff the generated tokens are exactly the answer's
characters followed by EOS (exact match of the generator's answer string, no normaliser: ``0.50``
for ``0.5`` is wrong, as in the dataset paper's metric), else 0; a rollout cut by its token budget
before EOS is 0.

Splits of the rows (all fixed, independent of the run's seed):

* the **RL pool** (``rl_pool`` problems): drawn once from the train rows, the same number from
  every module (and within a module from its three levels in turn); ``train_problems`` draws from it
  only, so every arm of a study trains on the same finite set (as verl / DAPO train epochs over a
  dataset), and a selector's ``schedule.pool_size = rl_pool`` pool is exactly this set;
* the **warm-start rows**: every other train row. By default the pool is disjoint from them (a step-0
  pass rate on the pool measures generalisation, not memorised demonstrations); ``held_apart = H <
  rl_pool`` keeps only the pool's first H rows (H / modules per module, the same rows as
  ``rl_pool = H``) out of the warm start, so the rest of a larger pool are warm-start rows too (seen
  in the supervised warm start, as RL prompts often are), and the warm start is the one of
  ``rl_pool = H`` (``warm_start_key``): a larger pool without another warm start;
* the **evaluation set**: ``eval_problems(count=C)`` gives the first C interpolate rows in a
  round-robin over modules (C = 600: 50 per module) followed by ``eval_extrapolate`` extrapolate
  rows, round-robin over its 9 modules. ``episode_metrics`` reports ``interpolate/pass_at_1``,
  ``extrapolate/pass_at_1`` and per module ``interpolate/<module>`` / ``extrapolate/<module>``;
  the trainer's ``eval/pass_at_1`` pools both splits (a study reads the per-split keys).

Length cut: questions longer than ``max_question_len`` characters (default 64; 93% of train rows are
shorter) are left out of every split, and ``describe`` says how many. ``max_new_tokens`` is the
longest kept answer + 1 (EOS).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from prs.tasks.registry import register_task
from prs.tasks.vocab import Vocab

DATA = pathlib.Path(__file__).parent / "data" / "mathematics_dataset.jsonl"
PAD, BOS, EOS, END_Q = "_", "^", "$", "#"
# Every character of the committed file (tests/tasks/test_mathds.py checks it against the file).
ALPHABET = " !()*+,-./0123456789:<=>?ACDEFHIMPRSTWabcdefghijklmnopqrstuvwxyz"
TOKENS = (PAD, BOS, EOS, END_Q, *ALPHABET)
SPLITS = ("train", "interpolate", "extrapolate")
LEVELS = ("easy", "medium", "hard")
POOL_SEED = 20_261_207  # the RL pool's draw (fixed: every run of every arm trains on the same pool)


class CharVocab(Vocab):
    """``prs.tasks.vocab.Vocab`` over this task's characters: PAD ``_`` 0, BOS ``^`` 1, EOS ``$`` 2, ``#`` 3
    (the end of the question), then ``ALPHABET``; one token per character."""

    tokens = TOKENS

    @property
    def end_q_id(self) -> int:
        return self._index[END_Q]


VOCAB = CharVocab()


class MathDSProblems(NamedTuple):
    """A batch of problems (numpy arrays).

    prompt:      int32 [B, P]  ``^question#`` right-padded with PAD to ``P = max_question_len + 2``
    prompt_len:  int32 [B]
    answer:      int32 [B, A]  the answer's token ids, PAD after ``answer_len`` (``A = max_new_tokens - 1``)
    answer_len:  int32 [B]
    module:      int32 [B]     index into ``MathDSTask.modules``
    split:       int32 [B]     index into ``SPLITS`` (0 train, 1 interpolate, 2 extrapolate)
    row:         int32 [B]     the row's index in the task's kept rows (``MathDSTask.rows``)
    """

    prompt: np.ndarray
    prompt_len: np.ndarray
    answer: np.ndarray
    answer_len: np.ndarray
    module: np.ndarray
    split: np.ndarray
    row: np.ndarray


def verify(answer, answer_len, tokens, prompt_len, lengths):
    """[R] float32 exact-match reward.

    r_i = 1 iff tokens[i, P_i + j] = answer[i, j] for j < n_i, tokens[i, P_i + n_i] = EOS and
    P_i + n_i < lengths_i (the EOS was generated), with P_i = prompt_len[i], n_i = answer_len[i].

    Args:
      answer:     int [R, A] answer token ids (PAD after ``answer_len``).
      answer_len: int [R].
      tokens:     int [R, L] prompt then generation, any padding after.
      prompt_len: int [R] where the generated part starts (the *task* prompt's length).
      lengths:    int [R] valid tokens (prompt + generation).
    """
    tokens = jnp.asarray(tokens)
    answer = jnp.asarray(answer)
    r, width = tokens.shape
    a = answer.shape[1]
    for name, x in (("answer_len", answer_len), ("prompt_len", prompt_len), ("lengths", lengths)):
        if jnp.shape(x) != (r,):
            raise ValueError(f"{name} must be [R]=[{r}] like tokens {tokens.shape}, got {jnp.shape(x)}")
    j = jnp.arange(a + 1)[None, :]                                              # [1, A+1]
    idx = jnp.minimum(prompt_len[:, None] + j, width - 1)                        # [R, A+1]
    got = jnp.take_along_axis(tokens, idx, axis=1)                              # [R, A+1]
    want = jnp.concatenate([answer, jnp.full((r, 1), VOCAB.pad_id, answer.dtype)], axis=1)  # [R, A+1]
    want = jnp.where(j == answer_len[:, None], VOCAB.eos_id, want)              # EOS right after the answer
    inside = j <= answer_len[:, None]                                           # [R, A+1]
    match = jnp.all((got == want) | ~inside, axis=1)
    fits = prompt_len + answer_len < jnp.minimum(lengths, width)                # the EOS lies in the valid part
    return (match & fits).astype(jnp.float32)


@functools.lru_cache(maxsize=4)
def load_rows(path: str = str(DATA)) -> tuple[dict, ...]:
    """The committed file's rows (parsed once per process)."""
    with open(path) as f:
        return tuple(json.loads(line) for line in f if line.strip())


def _round_robin(groups: list[list[int]]) -> list[int]:
    """Interleaves lists: g0[0], g1[0], …, g0[1], g1[1], … (a shorter list drops out when empty)."""
    out, depth = [], max((len(g) for g in groups), default=0)
    for d in range(depth):  # over positions, not over problems of a batch
        out.extend(g[d] for g in groups if d < len(g))
    return out


@dataclasses.dataclass(frozen=True)
class MathDSTask:
    """``mathematics_dataset`` behind the ``SingleTurnTask`` protocol (module docstring).

    Attributes:
      rl_pool: problems in the RL pool (a multiple of the module count).
      held_apart: the pool's problems kept out of the warm-start rows (a multiple of the module
        count, at most ``rl_pool``; ``None``: all ``rl_pool``, the pool disjoint from the warm start).
      max_question_len: questions longer than this (characters) are left out of every split.
      eval_extrapolate: extrapolate problems appended to ``eval_problems`` (0: interpolate only).
      modules: the modules used (``None``: every module of the file); extrapolate rows are kept
        when their module's base name (before ``_big`` / ``_longer`` / ``_more``) is used.
    """

    rl_pool: int = 480
    max_question_len: int = 64
    eval_extrapolate: int = 270
    modules: tuple[str, ...] | None = None
    name: str = "mathds"
    # out of repr: the warm-start key is the repr of the task with rl_pool = held_apart (warm_start_key)
    held_apart: int | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        if self.max_question_len < 8:
            raise ValueError(f"task 'mathds': max_question_len must be >= 8, got {self.max_question_len}")
        if self.eval_extrapolate < 0:
            raise ValueError(f"task 'mathds': eval_extrapolate must be >= 0, got {self.eval_extrapolate}")
        train_modules = self.modules_list
        if self.rl_pool < len(train_modules) or self.rl_pool % len(train_modules):
            raise ValueError(f"task 'mathds': rl_pool must be a positive multiple of the module count "
                             f"{len(train_modules)}, got {self.rl_pool}")
        if self.held_apart is not None and not (0 < self.held_apart <= self.rl_pool
                                                 and self.held_apart % len(train_modules) == 0):
            raise ValueError(f"task 'mathds': held_apart must be null or a positive multiple of the module count "
                             f"{len(train_modules)} at most rl_pool={self.rl_pool}, got {self.held_apart}")
        per, held = self.rl_pool // len(train_modules), self.held // len(train_modules)
        short = [m for m in train_modules if len(self._train_by_module[m]) < max(per, held + 64)]
        if short:
            raise ValueError(f"task 'mathds': rl_pool={self.rl_pool} (held_apart={self.held_apart}) leaves modules "
                             f"{short} fewer rows than the pool or fewer than 64 warm-start rows; choose a smaller "
                             "rl_pool or held_apart")
        if self.eval_extrapolate > len(self._ext_ids):
            raise ValueError(f"task 'mathds': eval_extrapolate must be <= {len(self._ext_ids)} (the kept "
                             f"extrapolate rows), got {self.eval_extrapolate}")

    # ------------------------------------------------------------------ rows
    @functools.cached_property
    def all_modules(self) -> tuple[str, ...]:
        return tuple(sorted({r["module"] for r in load_rows() if r["split"] == "train"}))

    @functools.cached_property
    def modules_list(self) -> tuple[str, ...]:
        if self.modules is None:
            return self.all_modules
        unknown = sorted(set(self.modules) - set(self.all_modules))
        if unknown or not self.modules:
            raise ValueError(f"task 'mathds': unknown modules {unknown}; allowed: {list(self.all_modules)}")
        return tuple(sorted(set(self.modules)))

    @functools.cached_property
    def rows(self) -> tuple[dict, ...]:
        """The kept rows: used modules, question at most ``max_question_len`` characters."""
        used = set(self.modules_list)
        keep = []
        for r in load_rows():
            base = r["module"]
            if r["split"] == "extrapolate":
                base = base.rsplit("_", 1)[0] if base.rsplit("_", 1)[-1] in ("big", "longer", "more") else base
            if base in used and len(r["question"]) <= self.max_question_len:
                keep.append(r)
        return tuple(keep)

    @functools.cached_property
    def module_names(self) -> tuple[str, ...]:
        """Every module name among the kept rows (train and extrapolate), the index of ``module``."""
        return tuple(sorted({r["module"] for r in self.rows}))

    @functools.cached_property
    def _train_by_module(self) -> dict[str, list[int]]:
        out = {m: [] for m in self.modules_list}
        for i, r in enumerate(self.rows):
            if r["split"] == "train":
                out[r["module"]].append(i)
        return out

    @functools.cached_property
    def pool_ids(self) -> np.ndarray:
        """[rl_pool] row indices of the RL pool: per module ``rl_pool / modules`` rows, the levels
        in turn (easy, medium, hard, easy, …), each level's rows in a fixed random order."""
        rng = np.random.default_rng(POOL_SEED)
        per = self.rl_pool // len(self.modules_list)
        out = []
        for m in self.modules_list:  # over modules (12), not problems
            ids = self._train_by_module[m]
            by_level = [[i for i in ids if self.rows[i]["level"] == lv] for lv in LEVELS]
            by_level = [list(np.asarray(g)[rng.permutation(len(g))]) for g in by_level]
            out.extend(_round_robin(by_level)[:per])
        return np.asarray(out, np.int64)

    @property
    def held(self) -> int:
        """The pool's problems kept out of the warm start (``held_apart``, default ``rl_pool``)."""
        return self.rl_pool if self.held_apart is None else self.held_apart

    @functools.cached_property
    def warm_ids(self) -> np.ndarray:
        """Row indices of the warm-start rows: the train rows outside the pool's first ``held`` rows (per
        module its first ``held / modules``: the pool of ``rl_pool = held``)."""
        per, held = self.rl_pool // len(self.modules_list), self.held // len(self.modules_list)
        pool = set(self.pool_ids.reshape(len(self.modules_list), per)[:, :held].reshape(-1).tolist())
        return np.asarray([i for m in self.modules_list for i in self._train_by_module[m] if i not in pool], np.int64)

    def _split_ids(self, split: str) -> list[list[int]]:
        by = {}
        for i, r in enumerate(self.rows):
            if r["split"] == split:
                by.setdefault(r["module"], []).append(i)
        return [by[m] for m in sorted(by)]

    @functools.cached_property
    def _int_ids(self) -> np.ndarray:
        return np.asarray(_round_robin(self._split_ids("interpolate")), np.int64)

    @functools.cached_property
    def _ext_ids(self) -> np.ndarray:
        return np.asarray(_round_robin(self._split_ids("extrapolate")), np.int64)

    # ------------------------------------------------------------------ shapes
    @property
    def prompt_width(self) -> int:
        return self.max_question_len + 2

    @functools.cached_property
    def max_new_tokens(self) -> int:
        return max(len(r["answer"]) for r in self.rows) + 1

    @property
    def vocab_size(self) -> int:
        return VOCAB.size

    @property
    def pad_id(self) -> int:
        return VOCAB.pad_id

    @property
    def eos_id(self) -> int:
        return VOCAB.eos_id

    @property
    def warm_start_key(self) -> str:
        """The warm-start cache key: the task's fields with ``rl_pool = held`` (the warm-start rows depend on
        the held-apart rows, not on the pool's size) and the data file's size (a regenerated file gives
        another key)."""
        fields = dataclasses.replace(self, rl_pool=self.held, held_apart=None)
        return f"{fields!r} rows={len(self.rows)} bytes={DATA.stat().st_size}"

    # ------------------------------------------------------------------ problems
    def problems(self, ids) -> MathDSProblems:
        """The problems of kept-row indices ``ids`` [B]."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        b, a = ids.size, self.max_new_tokens - 1
        prompt = np.full((b, self.prompt_width), VOCAB.pad_id, np.int32)
        answer = np.full((b, a), VOCAB.pad_id, np.int32)
        plen, alen = np.zeros(b, np.int32), np.zeros(b, np.int32)
        module, split = np.zeros(b, np.int32), np.zeros(b, np.int32)
        mod_index = {m: i for i, m in enumerate(self.module_names)}
        for j, i in enumerate(ids):  # host-side encoding, once per batch
            r = self.rows[int(i)]
            p = [VOCAB.bos_id, *VOCAB.encode(r["question"]), VOCAB.end_q_id]
            prompt[j, :len(p)] = p
            plen[j] = len(p)
            t = VOCAB.encode(r["answer"])
            answer[j, :len(t)] = t
            alen[j] = len(t)
            module[j] = mod_index[r["module"]]
            split[j] = SPLITS.index(r["split"])
        return MathDSProblems(prompt, plen, answer, alen, module, split, ids.astype(np.int32))

    def train_problems(self, *, seed: int, step: int, count: int) -> MathDSProblems:
        """``count`` distinct problems of the RL pool, deterministic in ``(seed, step)``; more than the
        pool holds is refused (a selector's ``schedule.pool_size`` larger than ``rl_pool`` would
        otherwise hold repeated tasks)."""
        m = self.pool_ids.size
        if not 1 <= count <= m:
            raise ValueError(f"task 'mathds': {count} problems asked of the RL pool of rl_pool={m} "
                             f"(task.params.rl_pool); allowed: 1..{m} (a selector's schedule.pool_size <= rl_pool)")
        rng = np.random.default_rng([int(seed), int(step), 0x3A7D5])
        return self.problems(self.pool_ids[rng.choice(m, size=count, replace=False)])

    def warm_start_problems(self, *, seed: int, step: int, count: int) -> MathDSProblems:
        rng = np.random.default_rng([int(seed), int(step), 0x5F7])
        return self.problems(self.warm_ids[rng.choice(self.warm_ids.size, size=count, replace=True)])

    def eval_problems(self, *, count: int) -> MathDSProblems:
        if not 1 <= count <= self._int_ids.size:
            raise ValueError(f"task 'mathds': eval.count must lie in [1, {self._int_ids.size}] (the kept "
                             f"interpolate rows), got {count}")
        return self.problems(np.concatenate([self._int_ids[:count], self._ext_ids[:self.eval_extrapolate]]))

    def take(self, problems: MathDSProblems, index: np.ndarray) -> MathDSProblems:
        return MathDSProblems(*(np.asarray(x)[index] for x in problems))

    def prompts(self, problems: MathDSProblems) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(problems.prompt), np.asarray(problems.prompt_len)

    def rewards(self, problems: MathDSProblems, rollout, *, group_size: int) -> jnp.ndarray:
        """[B, N] 0/1; the graded response starts after the task prompt (a replayed prefix is graded)."""
        rep = lambda x: jnp.repeat(jnp.asarray(x), group_size, axis=0)  # noqa: E731
        r = verify(rep(problems.answer), rep(problems.answer_len), rollout.tokens, rep(problems.prompt_len),
                   rollout.lengths)
        return r.reshape(-1, group_size)

    def demonstrations(self, problems: MathDSProblems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """``tokens [B, L]`` = prompt, answer, EOS, PAD; ``loss_mask [B, L]`` on the answer and EOS
        (``L = prompt_width + max_new_tokens``). The answers are the generator's: ``seed`` is unused
        (no noise is added; the protocol passes it)."""
        b = problems.prompt.shape[0]
        width = self.prompt_width + self.max_new_tokens
        tokens = np.full((b, width), VOCAB.pad_id, np.int32)
        tokens[:, :self.prompt_width] = problems.prompt
        pos = np.arange(width)[None, :]
        start = problems.prompt_len[:, None]
        in_answer = (pos >= start) & (pos < start + problems.answer_len[:, None])
        ans_idx = np.clip(pos - start, 0, problems.answer.shape[1] - 1)
        tokens = np.where(in_answer, np.take_along_axis(problems.answer, ans_idx, axis=1), tokens)
        tokens = np.where(pos == start + problems.answer_len[:, None], VOCAB.eos_id, tokens)
        mask = (pos >= start) & (pos <= start + problems.answer_len[:, None])
        return tokens.astype(np.int32), mask

    def episode_metrics(self, problems: MathDSProblems, ep) -> dict[str, float]:
        """On evaluation episodes (no train rows): ``<split>/pass_at_1`` and ``<split>/<module>``
        (mean reward over the split's / module's problems and samples); training calls get {}."""
        split = np.asarray(problems.split)
        if not split.size or (split == 0).any():
            return {}
        b = split.shape[0]
        rewards = np.asarray(ep.rewards, np.float64).reshape(b, -1).mean(axis=1)  # [B]
        module = np.asarray(problems.module)
        out = {}
        for s in np.unique(split):  # over splits and modules (at most 21), not problems
            name = SPLITS[int(s)]
            out[f"{name}/pass_at_1"] = float(rewards[split == s].mean())
            for m in np.unique(module[split == s]):
                out[f"{name}/{self.module_names[int(m)]}"] = float(rewards[(split == s) & (module == m)].mean())
        return out

    def decode(self, ids) -> str:
        return VOCAB.decode(ids)

    def describe(self) -> str:
        n = {s: sum(r["split"] == s for r in self.rows) for s in SPLITS}
        total = {s: sum(r["split"] == s for r in load_rows()) for s in SPLITS}
        return (f"mathematics_dataset: {len(self.modules_list)} modules; questions <= {self.max_question_len} "
                f"characters kept (train {n['train']}/{total['train']}, interpolate {n['interpolate']}/"
                f"{total['interpolate']}, extrapolate {n['extrapolate']}/{total['extrapolate']}); RL pool "
                f"{self.rl_pool} ({self.held} of them held apart from the warm start), warm-start rows "
                f"{self.warm_ids.size}; vocab {VOCAB.size}; P={self.prompt_width}, new tokens <= {self.max_new_tokens}")


def _mathds(**params) -> MathDSTask:
    fields = {f.name for f in dataclasses.fields(MathDSTask)} - {"name"}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ValueError(f"task 'mathds': unknown parameter(s) {unknown}; known: {sorted(fields)}")
    if params.get("modules") is not None:
        params["modules"] = tuple(str(m) for m in params["modules"])
    return MathDSTask(**params)


register_task("mathds", _mathds)
