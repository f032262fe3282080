"""Math word problems with verifiable final answers, for a real (tokenizer-based) language model.

    task = make_task("math_jsonl", path="data/train.jsonl", tokenizer="/models/Qwen3-4B")

Data: a JSONL file with one ``{"problem": str, "answer": str[, "solution": str]}`` per line
(keys configurable), or, when ``path`` is not a file, a Hugging Face dataset name loaded with the
``datasets`` package (needs network access; otherwise a ``ValueError`` says so). A tiny file ships
in the repository for tests: ``SHIPPED`` (``prs/tasks/data/math_tiny.jsonl``).

Prompt (the paper's math setting): the problem plus ``instruction`` as one user message, rendered
with the checkpoint's chat template in non-thinking mode (``enable_thinking=False``) and tokenised
with the checkpoint's ``tokenizer.json`` (``prs.models.tokenizer``). All prompts are right-padded with
``pad_id`` to one width ``P`` (``max_prompt_len``, default the longest prompt rounded up to a
multiple of 16): one sampler compile for the whole data set. A problem longer than ``P`` is dropped
at load time (counted in ``dropped``).

Reward: r = 1 iff the response's final answer (last ``\\boxed{}``; see ``prs.rewards.math_verify``) equals
the gold answer. The response graded is every token after the task prompt up to the first
``eos_id`` (the replayed prefix of a re-rollout included). Grading is host-side string work, so
``rewards_jittable = False``: the trainer calls ``rewards`` outside ``jax.jit``; it loops over the
R rollouts in Python (decode + verify), or spreads them over ``reward_workers`` processes (grading
rates: ``docs/real_models.md``).

Problems are the pytree ``MathProblems(index [B], prompt [B, P], prompt_len [B])``; answers stay in
the task, looked up by ``index``. ``train_problems(seed, step, count)`` walks per-epoch
permutations ``default_rng([seed, epoch]).permutation(n)``: deterministic in (seed, step), every
problem once per epoch. ``eval_problems`` are the first ``count`` rows of ``eval_path``; without one,
the file is split deterministically (``split_rows``: a row is held out iff a hash of its problem text
falls below ``eval_fraction``), so evaluation never sees a training problem, and the log says so.
Give a held-out file (e.g. AIME) for real runs.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import pathlib
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from prs.rewards.evaluation import answer_key, eval_metrics
from prs.rewards.math_verify import grader_info, verify_answers
from prs.tasks.registry import register_task

SHIPPED = pathlib.Path(__file__).parent / "data" / "math_tiny.jsonl"
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


class MathProblems(NamedTuple):
    """index [B] int32 rows of the split; split [B] int32 (0 train rows, 1 eval rows);
    prompt [B, P] int32; prompt_len [B] int32."""

    index: np.ndarray
    split: np.ndarray
    prompt: np.ndarray
    prompt_len: np.ndarray


def _text(problem) -> str:
    """A problem as one string (a chat list as JSON): what ``split_rows`` hashes."""
    return problem if isinstance(problem, str) else json.dumps(problem, sort_keys=True)


def _is_chat(value) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def load_rows(path: str, *, split: str = "train", problem_key: str = "problem", answer_key: str = "answer",
              source_key: str | None = None, solution_key: str = "solution") -> list[dict[str, Any]]:
    """Rows ``{"problem", "answer", "source", "where", "columns"[, "solution"]}`` of a data set
    (``prs.tasks.tables.load_table``: JSONL, Parquet, a ``save_to_disk`` directory, a cached HF
    dataset). Keys are dotted paths into nested columns (verl: ``answer_key=reward_model.ground_truth``).

    ``problem``: a string, or a chat list ``[{"role", "content"}, ...]`` (verl's ``prompt`` column)
    rendered as given. ``source``: the row's ``source_key`` value; without ``source_key``, the
    ``data_source`` column when every row has one, else the file's name without suffix. ``columns``:
    the row as read (every column, for a custom reward). ``where``: "file row i" for error messages."""
    from prs.tasks.tables import get_path, load_table

    try:
        table = load_table(path, split=split)
    except ValueError as e:
        raise ValueError(f"math_jsonl: {e}") from None
    name = pathlib.Path(str(path)).name
    stem = name.split(".")[0] if pathlib.Path(str(path)).suffix else name
    auto_source = source_key is None and bool(table) and all("data_source" in r for r in table)
    out = []
    for i, r in enumerate(table):
        try:
            problem, answer = get_path(r, problem_key), get_path(r, answer_key)
        except KeyError as e:
            raise ValueError(f"math_jsonl: row {i} of {path} lacks {problem_key!r} or {answer_key!r} (missing "
                             f"{e.args[0]!r}): keys {sorted(r)}; map them with task.params.problem_key / answer_key "
                             f"(dotted paths reach nested columns)") from None
        if not (isinstance(problem, str) or _is_chat(problem)):
            raise ValueError(f"math_jsonl: row {i} of {path}: {problem_key!r} is a {type(problem).__name__}, not a "
                             f"string or a chat list of {{'role', 'content'}} messages")
        if answer is None or isinstance(answer, (dict, list)):
            raise ValueError(f"math_jsonl: row {i} of {path}: {answer_key!r} is {answer!r}, not an answer string")
        if source_key is not None:
            try:
                source = str(get_path(r, source_key))
            except KeyError:
                raise ValueError(f"math_jsonl: row {i} of {path} lacks source_key={source_key!r}: keys "
                                 f"{sorted(r)}") from None
        else:
            source = str(r["data_source"]) if auto_source else stem
        row = {"problem": problem, "answer": str(answer), "source": source, "where": f"{name} row {i}", "columns": r}
        solution = get_path(r, solution_key, None)
        if solution is not None:
            row["solution"] = str(solution)
        out.append(row)
    if not out:
        raise ValueError(f"math_jsonl: {path} holds no problems")
    return out


@dataclasses.dataclass(eq=False)
class MathJsonlTask:
    """The ``SingleTurnTask`` over a math JSONL (see the module docstring). Build with
    ``make_task("math_jsonl", path=..., tokenizer=...)``."""

    tokenizer: Any
    rows: list[dict[str, str]]
    eval_rows: list[dict[str, str]]
    vocab_size: int
    max_new_tokens: int = 1024
    instruction: str = INSTRUCTION
    system_prompt: str | None = None
    enable_thinking: bool = False
    max_prompt_len: int | None = None
    backend: str = "auto"
    reward_workers: int = 0
    prompt_template: str | None = None
    reward: Any = None  # a prs.rewards.custom.RewardConfig (enabled): the user's reward replaces the verifier
    name: str = "math_jsonl"
    rewards_jittable = False

    def __post_init__(self):
        tok = self.tokenizer
        self.pad_id, self.eos_id = tok.pad_id, tok.eos_id
        self.custom = None
        if self.reward is not None and self.reward.enabled:
            from prs.rewards.custom import CustomReward

            self.custom = CustomReward(self.reward)
        if max(self.pad_id, self.eos_id, tok.vocab_size - 1) >= self.vocab_size:
            raise ValueError(f"math_jsonl: tokenizer ids up to {tok.vocab_size - 1} exceed the model vocab_size "
                             f"{self.vocab_size}")
        ids = tok.encode_batch([self.prompt_text(r["problem"], r) for r in self.rows + self.eval_rows])
        longest = max(len(x) for x in ids)
        self.width = int(self.max_prompt_len or -(-longest // 16) * 16)
        split = len(self.rows)
        self._train, self.dropped = self._pack(ids[:split])
        self._eval, dropped_eval = self._pack(ids[split:])
        self.dropped += dropped_eval
        if not len(self._train[2]) or not len(self._eval[2]):
            raise ValueError(f"math_jsonl: every prompt of a split is longer than max_prompt_len={self.width}")

    def _pack(self, ids):
        keep = np.array([i for i, x in enumerate(ids) if len(x) <= self.width], np.int32)
        prompt = np.full((len(keep), self.width), self.pad_id, np.int32)
        for j, i in enumerate(keep):  # once per data set, at load time
            prompt[j, :len(ids[i])] = ids[i]
        lens = np.array([len(ids[i]) for i in keep], np.int32)
        return (keep, prompt, lens), len(ids) - len(keep)

    def prompt_text(self, problem, row: dict | None = None) -> str:
        """The chat rendering of one problem: a string problem becomes one user message,
        ``prompt_template.format(problem=..., **columns)`` when a template is set, else
        ``problem + "\\n" + instruction``; a chat list (verl's ``prompt``) is rendered as given.
        ``system_prompt`` is prepended unless the messages hold a system message."""
        if _is_chat(problem):
            msgs = [dict(m) for m in problem]
        else:
            if self.prompt_template is not None:
                cols = {k: v for k, v in ((row or {}).get("columns") or {}).items() if isinstance(k, str)}
                try:
                    content = self.prompt_template.format(**{**cols, "problem": problem})
                except (KeyError, IndexError) as e:
                    raise ValueError(f"math_jsonl: prompt_template {self.prompt_template!r} names {e} but the row "
                                     f"has the columns {sorted(cols)} (and problem); write literal braces as "
                                     f"{{{{ }}}}") from None
            else:
                content = f"{problem}\n{self.instruction}" if self.instruction else problem
            msgs = [{"role": "user", "content": content}]
        if self.system_prompt and not any(m["role"] == "system" for m in msgs):
            msgs.insert(0, {"role": "system", "content": self.system_prompt})
        return self.tokenizer.apply_chat_template(msgs, add_generation_prompt=True,
                                                  enable_thinking=self.enable_thinking)

    # ------------------------------------------------------------------ SingleTurnTask protocol
    def _problems(self, packed, pos: np.ndarray, split: int) -> MathProblems:
        keep, prompt, lens = packed
        return MathProblems(index=keep[pos], split=np.full(len(pos), split, np.int32), prompt=prompt[pos],
                            prompt_len=lens[pos])

    def train_problems(self, *, seed: int, step: int, count: int) -> MathProblems:
        n = len(self._train[0])
        flat = int(step) * int(count) + np.arange(int(count))  # positions in the endless epoch stream
        epochs = flat // n
        pos = np.empty(count, np.int64)
        for e in np.unique(epochs):  # at most ceil(count / n) + 1 epochs
            perm = np.random.default_rng([int(seed), int(e), 0x3A7]).permutation(n)
            pos[epochs == e] = perm[flat[epochs == e] % n]
        return self._problems(self._train, pos, 0)

    def eval_problems(self, *, count: int) -> MathProblems:
        n = len(self._eval[0])
        if count != n:
            logging.getLogger(__name__).info(
                "math_jsonl: evaluating %d rows of the %d eval rows (eval.count=%d: %s)", count, n, count,
                "the first ones; later files' rows are left out" if count < n else "rows repeat")
        return self._problems(self._eval, np.arange(count) % n, 1)

    def take(self, problems: MathProblems, index) -> MathProblems:
        return MathProblems(*(np.asarray(x)[np.asarray(index)] for x in problems))

    def prompts(self, problems: MathProblems) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(problems.prompt), np.asarray(problems.prompt_len)

    def answers(self, problems: MathProblems) -> list[str]:
        """Gold answers of ``problems``."""
        splits = (self.rows, self.eval_rows)
        return [splits[int(s)][int(i)]["answer"] for i, s in zip(np.asarray(problems.index), np.asarray(problems.split))]

    def responses(self, rollout, task_prompt_len: np.ndarray) -> list[str]:
        """Decoded responses [R]: tokens after the task prompt, up to the first ``eos_id``."""
        tokens = np.asarray(rollout.tokens)
        lengths = np.asarray(rollout.lengths)
        out = []
        for r in range(tokens.shape[0]):  # host-side strings: one row at a time
            ids = tokens[r, int(task_prompt_len[r]):int(lengths[r])]
            stop = np.flatnonzero(ids == self.eos_id)
            out.append(self.tokenizer.decode(ids[:stop[0]] if stop.size else ids, skip_special_tokens=True))
        return out

    def rows_of(self, problems: MathProblems) -> list[dict[str, Any]]:
        """The data rows [B] of ``problems``."""
        splits = (self.rows, self.eval_rows)
        return [splits[int(s)][int(i)] for i, s in zip(np.asarray(problems.index), np.asarray(problems.split))]

    def rewards(self, problems: MathProblems, rollout, *, group_size: int) -> jnp.ndarray:
        """[B, N] float32: 1 iff the response's final answer equals the gold answer; with a custom
        ``reward``, the user's function of (completions, every column of the row), checked
        (``prs.rewards.custom``)."""
        prompt_len = np.asarray(problems.prompt_len)
        if np.asarray(rollout.tokens).shape[0] != prompt_len.shape[0] * group_size:
            raise ValueError(f"math_jsonl.rewards: rollout has {np.asarray(rollout.tokens).shape[0]} rows, "
                             f"expected B*N = {prompt_len.shape[0]}*{group_size}")
        texts = self.responses(rollout, np.repeat(prompt_len, group_size))
        if self.custom is not None:
            rows = [row for row in self.rows_of(problems) for _ in range(group_size)]  # [R]
            keys = list(dict.fromkeys(k for row in rows for k in row["columns"]))  # union, first-seen order
            columns = {k: [row["columns"].get(k) for row in rows] for k in keys}
            where = [f"{row['where']} (rollout {r % group_size})" for r, row in enumerate(rows)]
            return jnp.asarray(self.custom(texts, columns, where).astype(np.float32).reshape(-1, group_size))
        gold = np.repeat(np.array(self.answers(problems), dtype=object), group_size)
        r = np.array(verify_answers(texts, gold, backend=self.backend, workers=self.reward_workers), np.float32)
        return jnp.asarray(r.reshape(-1, group_size))

    def episode_metrics(self, problems: MathProblems, ep) -> dict[str, float]:
        """Per data source, on evaluation episodes (``problems.split == 1``; training calls get {}):
        ``<source>/mean@k``, ``<source>/pass@k``, ``<source>/maj@k`` with k = the samples per
        problem (``eval_metrics``; a source's rows as evaluated, repeats included), and the same
        pooled over every source under ``all/``."""
        split = np.asarray(problems.split)
        if not split.size or not (split == 1).all():
            return {}
        b = split.shape[0]
        rewards = np.asarray(ep.rewards, np.float64).reshape(b, -1)  # [B, N]
        texts = self.episode_texts(ep)
        sources = [row["source"] for row in self.rows_of(problems)]
        return eval_metrics(rewards, [answer_key(t) for t in texts], sources)

    def episode_texts(self, ep) -> list[str]:
        """Decoded generated tokens [R] of episodes (``policy_mask``), up to the first ``eos_id``."""
        tokens, mask = np.asarray(ep.tokens), np.asarray(ep.policy_mask)
        out = []
        for r in range(tokens.shape[0]):  # host-side strings: one row at a time
            ids = tokens[r][mask[r]]
            stop = np.flatnonzero(ids == self.eos_id)
            out.append(self.tokenizer.decode(ids[:stop[0]] if stop.size else ids, skip_special_tokens=True))
        return out

    def provenance(self) -> dict[str, Any]:
        """What decides the rewards beyond the code: the grader back end in use and its version, and
        a custom reward function's file and hash (recorded in every run's provenance)."""
        return {"grader": grader_info(self.backend),
                "reward_fn": self.custom.provenance() if self.custom is not None else None}

    def demonstrations(self, problems: MathProblems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens [B, P + T], loss_mask [B, P + T]): prompt, then the row's ``solution`` (or
        ``\\boxed{answer}``) and ``eos_id``, truncated to ``T = max_new_tokens``; the mask is True on
        the solution and EOS tokens."""
        del seed
        rows = self.rows_of(problems)
        sols = self.tokenizer.encode_batch([r.get("solution") or f"\\boxed{{{r['answer']}}}" for r in rows])
        w = self.width + self.max_new_tokens
        tokens = np.full((len(rows), w), self.pad_id, np.int32)
        mask = np.zeros((len(rows), w), bool)
        for b, (p, n, s) in enumerate(zip(np.asarray(problems.prompt), np.asarray(problems.prompt_len), sols)):
            s = (list(s) + [self.eos_id])[: self.max_new_tokens]
            tokens[b, :n] = p[:n]
            tokens[b, n:n + len(s)] = s
            mask[b, n:n + len(s)] = True
        return tokens, mask

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids])


def split_rows(rows: list[dict[str, str]], *, eval_fraction: float) -> tuple[list, list]:
    """Deterministic train / held-out split of one file's rows: row i is held out iff
    ``int(sha256(problem_i)[:8], 16) / 16**8 < eval_fraction``. Depends only on each problem's text
    (not on the order of the file or on a seed), so appending problems never moves old ones, and a
    problem repeated in the file lands on one side only. Raises ValueError if either side is empty."""
    import hashlib

    if not 0.0 < eval_fraction < 1.0:
        raise ValueError(f"math_jsonl: eval_fraction must lie in (0, 1), got {eval_fraction!r}")
    u = [int(hashlib.sha256(_text(r["problem"]).encode()).hexdigest()[:8], 16) / 16**8 for r in rows]
    train = [r for r, x in zip(rows, u) if x >= eval_fraction]
    held = [r for r, x in zip(rows, u) if x < eval_fraction]
    if not train or not held:
        raise ValueError(f"math_jsonl: splitting {len(rows)} rows at eval_fraction={eval_fraction} leaves "
                         f"{len(train)} train / {len(held)} eval rows; give eval_path or another eval_fraction")
    return train, held


def make_math_jsonl(*, tokenizer: str, path: str | None = None, eval_path: str | list[str] | None = None,
                    split: str = "train", eval_split: str = "test", problem_key: str = "problem",
                    answer_key: str = "answer", source_key: str | None = None, solution_key: str = "solution",
                    prompt_template: str | None = None, vocab_size: int | None = None, max_new_tokens: int = 1024,
                    instruction: str | None = None, system_prompt: str | None = None,
                    enable_thinking: bool = False, max_prompt_len: int | None = None,
                    backend: str = "auto", max_rows: int | None = None, eval_fraction: float = 0.25,
                    reward_workers: int = 0, reward=None, chat_template: str | None = None) -> MathJsonlTask:
    """Factory registered as ``"math_jsonl"``.

    Args:
      tokenizer: checkpoint directory (or model id in the local HF cache) with ``tokenizer.json`` (and
        ``config.json``, whose ``vocab_size`` becomes the task's unless ``vocab_size`` is given).
      chat_template: None = the checkpoint's own (a checkpoint without one is an error); ``"chatml"``
        = Qwen's ChatML (``prs.models.tokenizer.CHATML``); or a path to a Jinja template file.
      path: training data (default: the shipped tiny file): a JSONL or Parquet file, a
        ``save_to_disk`` directory or a dataset in the local HF cache (``prs.tasks.tables``).
      eval_path: held-out data, one path or a list of paths (each its own data source unless the
        rows name theirs); default: a deterministic ``eval_fraction`` of ``path`` held out
        (``split_rows``), never the training problems. split / eval_split: HF dataset splits.
      problem_key / answer_key / source_key / solution_key: columns (dotted paths into nested
        columns, e.g. verl's ``reward_model.ground_truth``); ``load_rows`` says what each holds.
      prompt_template: the user message, ``str.format`` over the row's columns and ``{problem}``
        (e.g. ``"{problem}\\nPut the answer in \\boxed{{}}."``); replaces ``problem + instruction``.
      max_new_tokens: generation budget. instruction: appended to each string problem (default
        ``INSTRUCTION``; refused with ``prompt_template``).
      enable_thinking: Qwen3 thinking mode (False = the paper's non-thinking setting).
      max_prompt_len: prompt width P (longer prompts are dropped). backend: verifier back end.
      max_rows: keep only the first rows of the training data and of each eval file (quick runs).
      reward_workers: score a step's responses over this many processes
        (``prs.rewards.math_verify.verify_answers``; 0 = serial). The same rewards either way.
      reward: a ``prs.rewards.custom.RewardConfig``: the user's reward function instead of the
        verifier (config node ``reward``).
    """
    if not (isinstance(reward_workers, int) and not isinstance(reward_workers, bool) and reward_workers >= 0):
        raise ValueError(f"math_jsonl: reward_workers must be an int >= 0 (0: serial), got {reward_workers!r}")
    if prompt_template is not None and instruction is not None:
        raise ValueError("math_jsonl: give instruction or prompt_template, not both (the template is the whole "
                         "user message; put the instruction in it)")
    if prompt_template is not None and not isinstance(prompt_template, str):
        raise ValueError(f"math_jsonl: prompt_template must be a string, got {prompt_template!r}")
    from prs.models.tokenizer import Tokenizer

    from prs.models.hub import resolve_checkpoint

    tokenizer = str(resolve_checkpoint(tokenizer))
    tok = Tokenizer.from_checkpoint(tokenizer, chat_template=chat_template)
    keys = dict(problem_key=problem_key, answer_key=answer_key, source_key=source_key, solution_key=solution_key)
    path = str(path or SHIPPED)
    rows = load_rows(path, split=split, **keys)
    if eval_path is None:
        n_all = len(rows)
        rows, eval_rows = split_rows(rows, eval_fraction=eval_fraction)
        logging.getLogger(__name__).info(
            "math_jsonl: no eval_path; held out %d of %d problems of %s for evaluation (eval_fraction=%s), "
            "training on the other %d", len(eval_rows), n_all, path, eval_fraction, len(rows))
        eval_sets = [eval_rows]
    else:
        paths = [eval_path] if isinstance(eval_path, str) else list(eval_path)
        if not paths or not all(isinstance(x, str) for x in paths):
            raise ValueError(f"math_jsonl: eval_path must be a path or a list of paths, got {eval_path!r}")
        eval_sets = [load_rows(x, split=eval_split, **keys) for x in paths]
    if max_rows:
        rows, eval_sets = rows[:max_rows], [e[:max_rows] for e in eval_sets]
    eval_rows = [r for e in eval_sets for r in e]
    if all(_is_chat(r["problem"]) for r in rows + eval_rows):
        if prompt_template is not None or instruction is not None:
            raise ValueError("math_jsonl: every prompt of the data is a chat list, rendered as given: prompt_template "
                             "and instruction apply to string problems only; drop them")
    if vocab_size is None:
        cfg = pathlib.Path(tokenizer) / "config.json"
        vocab_size = json.loads(cfg.read_text())["vocab_size"] if cfg.exists() else tok.vocab_size
    return MathJsonlTask(tokenizer=tok, rows=rows, eval_rows=eval_rows, vocab_size=int(vocab_size),
                         max_new_tokens=max_new_tokens, instruction=INSTRUCTION if instruction is None else instruction,
                         system_prompt=system_prompt, enable_thinking=enable_thinking, max_prompt_len=max_prompt_len,
                         backend=backend, reward_workers=reward_workers, prompt_template=prompt_template,
                         reward=reward)


register_task("math_jsonl", make_math_jsonl)


def tokenizer_texts(path=None) -> list[str]:
    """Training texts for a tiny byte-level BPE tokenizer: the problems and solutions of ``path``
    (default ``SHIPPED``) and the chat markup (``prs.models.hf.make_tiny_checkpoint(texts=...)``)."""
    rows = [json.loads(line) for line in pathlib.Path(path or SHIPPED).read_text().splitlines() if line.strip()]
    return [r["problem"] + "\n" + r.get("solution", "") for r in rows] + ["user\nassistant\n\\boxed{}"]


def make_tiny_checkpoint(path, **kw):
    """``prs.models.hf.make_tiny_checkpoint`` with its tokenizer trained on ``tokenizer_texts()``."""
    from prs.models.hf import make_tiny_checkpoint as _make

    return _make(path, texts=kw.pop("texts", None) or tokenizer_texts(), **kw)


def main(argv=None) -> None:
    """``python -m prs.tasks.math_jsonl make-tiny DIR [--seed S]``: a tiny random Qwen3 checkpoint
    whose tokenizer is trained on the shipped math problems (``make_tiny_checkpoint``)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m prs.tasks.math_jsonl")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("make-tiny", help="write a tiny random Qwen3 checkpoint with a tokenizer")
    t.add_argument("dir")
    t.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    cfg = make_tiny_checkpoint(args.dir, seed=args.seed)
    print(f"wrote {args.dir}: {cfg}")


if __name__ == "__main__":
    main()
