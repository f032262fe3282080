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

from prs.rewards.math_verify import verify_answers
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


def load_rows(path: str, *, split: str = "train", problem_key: str = "problem",
              answer_key: str = "answer") -> list[dict[str, str]]:
    """Rows ``{"problem", "answer"[, "solution"]}`` from a JSONL file or a HF dataset name."""
    p = pathlib.Path(path)
    if p.is_file():
        rows = []
        for i, line in enumerate(p.read_text().splitlines()):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise ValueError(f"math_jsonl: {p} line {i + 1} is not JSON ({e})") from None
    else:
        try:
            import datasets
        except ImportError:
            raise ValueError(f"math_jsonl: path={path!r} is not a file; loading it as a Hugging Face dataset "
                             f"needs the `datasets` package (pip install datasets) and network access") from None
        try:
            rows = list(datasets.load_dataset(path, split=split))
        except Exception as e:
            raise ValueError(f"math_jsonl: path={path!r} is not a file and could not be loaded as a Hugging Face "
                             f"dataset (split={split!r}; no network access?): {type(e).__name__}: {e}") from None
    out = []
    for i, r in enumerate(rows):
        if problem_key not in r or answer_key not in r:
            raise ValueError(f"math_jsonl: row {i} of {path} lacks {problem_key!r} or {answer_key!r}: keys {sorted(r)}")
        row = {"problem": str(r[problem_key]), "answer": str(r[answer_key])}
        if r.get("solution") is not None:
            row["solution"] = str(r["solution"])
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
    name: str = "math_jsonl"
    rewards_jittable = False

    def __post_init__(self):
        tok = self.tokenizer
        self.pad_id, self.eos_id = tok.pad_id, tok.eos_id
        if max(self.pad_id, self.eos_id, tok.vocab_size - 1) >= self.vocab_size:
            raise ValueError(f"math_jsonl: tokenizer ids up to {tok.vocab_size - 1} exceed the model vocab_size "
                             f"{self.vocab_size}")
        ids = tok.encode_batch([self.prompt_text(r["problem"]) for r in self.rows + self.eval_rows])
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

    def prompt_text(self, problem: str) -> str:
        content = f"{problem}\n{self.instruction}" if self.instruction else problem
        msgs = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else [])
        msgs.append({"role": "user", "content": content})
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

    def rewards(self, problems: MathProblems, rollout, *, group_size: int) -> jnp.ndarray:
        """[B, N] float32: 1 iff the response's final answer equals the gold answer."""
        prompt_len = np.asarray(problems.prompt_len)
        if np.asarray(rollout.tokens).shape[0] != prompt_len.shape[0] * group_size:
            raise ValueError(f"math_jsonl.rewards: rollout has {np.asarray(rollout.tokens).shape[0]} rows, "
                             f"expected B*N = {prompt_len.shape[0]}*{group_size}")
        gold = np.repeat(np.array(self.answers(problems), dtype=object), group_size)
        texts = self.responses(rollout, np.repeat(prompt_len, group_size))
        r = np.array(verify_answers(texts, gold, backend=self.backend, workers=self.reward_workers), np.float32)
        return jnp.asarray(r.reshape(-1, group_size))

    def demonstrations(self, problems: MathProblems, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(tokens [B, P + T], loss_mask [B, P + T]): prompt, then the row's ``solution`` (or
        ``\\boxed{answer}``) and ``eos_id``, truncated to ``T = max_new_tokens``; the mask is True on
        the solution and EOS tokens."""
        del seed
        splits = (self.rows, self.eval_rows)
        rows = [splits[int(s)][int(i)] for i, s in zip(np.asarray(problems.index), np.asarray(problems.split))]
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
    u = [int(hashlib.sha256(r["problem"].encode()).hexdigest()[:8], 16) / 16**8 for r in rows]
    train = [r for r, x in zip(rows, u) if x >= eval_fraction]
    held = [r for r, x in zip(rows, u) if x < eval_fraction]
    if not train or not held:
        raise ValueError(f"math_jsonl: splitting {len(rows)} rows at eval_fraction={eval_fraction} leaves "
                         f"{len(train)} train / {len(held)} eval rows; give eval_path or another eval_fraction")
    return train, held


def make_math_jsonl(*, tokenizer: str, path: str | None = None, eval_path: str | None = None,
                    split: str = "train", eval_split: str = "test", problem_key: str = "problem",
                    answer_key: str = "answer", vocab_size: int | None = None, max_new_tokens: int = 1024,
                    instruction: str = INSTRUCTION, system_prompt: str | None = None,
                    enable_thinking: bool = False, max_prompt_len: int | None = None,
                    backend: str = "auto", max_rows: int | None = None, eval_fraction: float = 0.25,
                    reward_workers: int = 0, chat_template: str | None = None) -> MathJsonlTask:
    """Factory registered as ``"math_jsonl"``.

    Args:
      tokenizer: checkpoint directory (or model id in the local HF cache) with ``tokenizer.json`` (and
        ``config.json``, whose ``vocab_size`` becomes the task's unless ``vocab_size`` is given).
      chat_template: None = the checkpoint's own (a checkpoint without one is an error); ``"chatml"``
        = Qwen's ChatML (``prs.models.tokenizer.CHATML``); or a path to a Jinja template file.
      path: JSONL file or HF dataset name (default: the shipped tiny file). eval_path: held-out
        problems; default: a deterministic ``eval_fraction`` of ``path`` held out (``split_rows``),
        never the training problems. split / eval_split: HF dataset splits.
      max_new_tokens: generation budget. instruction: appended to each problem.
      enable_thinking: Qwen3 thinking mode (False = the paper's non-thinking setting).
      max_prompt_len: prompt width P (longer prompts are dropped). backend: verifier back end.
      max_rows: keep only the first rows of each split (quick runs).
      reward_workers: score a step's responses over this many processes
        (``prs.rewards.math_verify.verify_answers``; 0 = serial). The same rewards either way.
    """
    if not (isinstance(reward_workers, int) and not isinstance(reward_workers, bool) and reward_workers >= 0):
        raise ValueError(f"math_jsonl: reward_workers must be an int >= 0 (0: serial), got {reward_workers!r}")
    from prs.models.tokenizer import Tokenizer

    from prs.models.hub import resolve_checkpoint

    tokenizer = str(resolve_checkpoint(tokenizer))
    tok = Tokenizer.from_checkpoint(tokenizer, chat_template=chat_template)
    path = str(path or SHIPPED)
    rows = load_rows(path, split=split, problem_key=problem_key, answer_key=answer_key)
    if eval_path is None:
        n_all = len(rows)
        rows, eval_rows = split_rows(rows, eval_fraction=eval_fraction)
        logging.getLogger(__name__).info(
            "math_jsonl: no eval_path; held out %d of %d problems of %s for evaluation (eval_fraction=%s), "
            "training on the other %d", len(eval_rows), n_all, path, eval_fraction, len(rows))
    else:
        eval_rows = load_rows(eval_path, split=eval_split, problem_key=problem_key, answer_key=answer_key)
    if max_rows:
        rows, eval_rows = rows[:max_rows], eval_rows[:max_rows]
    if vocab_size is None:
        cfg = pathlib.Path(tokenizer) / "config.json"
        vocab_size = json.loads(cfg.read_text())["vocab_size"] if cfg.exists() else tok.vocab_size
    return MathJsonlTask(tokenizer=tok, rows=rows, eval_rows=eval_rows, vocab_size=int(vocab_size),
                         max_new_tokens=max_new_tokens, instruction=instruction, system_prompt=system_prompt,
                         enable_thinking=enable_thinking, max_prompt_len=max_prompt_len, backend=backend,
                         reward_workers=reward_workers)


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
