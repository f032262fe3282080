"""The shared skeleton of the repair-style agent environments (``prs.tasks.repair``, ``prs.tasks.trap``).

Both are multi-turn "repository" environments over a one-character-per-token vocabulary that
extends repair's: a prompt ``^`` + program digits + ``#``, policy turns of at most ``A`` tokens
ended by ``;`` (or ``$``, submit), observations ``>…|``. They differ in their problems, actions,
observations, reward and scripted demonstrator; this module holds what they share:

* ``EnvConfig``: the checks and widths of their frozen config dataclasses (``n_lines``,
  ``max_turns``, ``reward``, ``replay``, the demonstrator's rates; P, L from ``max_obs_tokens``);
* ``AgentEnv``: one environment as an object: its vocabulary, ids, problem generator, prompts,
  executor, verifier and demonstrator, with the demonstrations built from them
  (``render``, ``demonstrations``). ``prs.tasks.agent_rollouts.AgentRollouts`` (its ``environment``) and
  the tasks (``prs.tasks.repair_task``) call an environment only through it;
* ``codec``, ``take``, ``run_actions``, ``pack_episodes``: the helpers behind them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

MAX_ACTION_TOKENS = 4  # A: the longest action, ``s i v ;``
REWARDS = ("binary", "fraction")
REPLAY_MODES = ("replay", "regenerate")


def codec(tokens: tuple[str, ...]):
    """``(encode, decode)`` for a one-character-per-token vocabulary ``tokens``: ``encode(text) ->
    list[int]`` raises a ``ValueError`` naming the first character outside the vocabulary;
    ``decode(ids) -> str`` one naming out-of-range ids."""
    index = {t: i for i, t in enumerate(tokens)}

    def encode(text: str) -> list[int]:
        out = []
        for pos, ch in enumerate(text):
            if ch not in index:
                raise ValueError(f"text={text!r}: character {ch!r} at {pos} is not in {''.join(tokens)!r}")
            out.append(index[ch])
        return out

    def decode(ids) -> str:
        arr = np.asarray(ids).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= len(tokens)):
            raise ValueError(f"ids must lie in [0, {len(tokens)}), got min {arr.min()} max {arr.max()}")
        return "".join(tokens[int(i)] for i in arr)

    return encode, decode


class EnvConfig:
    """Checks and widths shared by the environments' frozen config dataclasses (a base class that
    adds no fields, so a config's fields, repr and hash are its own). A subclass declares
    ``n_lines``, ``max_turns``, ``reward``, ``replay`` and the property ``max_obs_tokens`` (O), and
    calls ``_check_shared`` from its ``__post_init__``."""

    def _check_shared(self, *, min_lines: int, rates: tuple[str, ...]) -> None:
        """One ``ValueError`` naming the field for: ``n_lines`` outside ``[min_lines, 10]`` (a line index
        is one digit), ``max_turns < 2``, an unknown ``reward`` or ``replay``, a rate outside [0, 1]."""
        name = type(self).__name__
        if not min_lines <= self.n_lines <= 10:
            raise ValueError(f"{name}.n_lines must be in [{min_lines}, 10], got {self.n_lines}")
        if self.max_turns < 2:
            raise ValueError(f"{name}.max_turns must be >= 2, got {self.max_turns}")
        if self.reward not in REWARDS:
            raise ValueError(f"{name}.reward={self.reward!r}; choose 'binary' or 'fraction'")
        if self.replay not in REPLAY_MODES:
            raise ValueError(f"{name}.replay={self.replay!r}; choose 'replay' or 'regenerate'")
        for rate in rates:
            if not 0.0 <= getattr(self, rate) <= 1.0:
                raise ValueError(f"{name}.{rate} must be in [0, 1], got {getattr(self, rate)}")

    @property
    def prompt_width(self) -> int:
        """P = ``^`` + K digits + ``#``."""
        return self.n_lines + 2

    @property
    def episode_width(self) -> int:
        """L: the prompt plus ``max_turns`` × (an action and an observation)."""
        return self.prompt_width + self.max_turns * (MAX_ACTION_TOKENS + self.max_obs_tokens)


def take(problems, index):
    """The problems ``index`` (ints or a bool mask) of ``problems``, a NamedTuple of ``[B, ...]`` arrays."""
    return type(problems)(*(np.asarray(x)[np.asarray(index)] for x in problems))


def run_actions(prompt_ids, state, actions: list, cfg, *, execute, encode):
    """Runs ``actions`` (strings or id lists) from ``state`` after the prompt ``prompt_ids`` through an
    environment's ``execute`` -> (ids, action mask, states after each action); stops at the end of the
    episode."""
    ids = [int(t) for t in prompt_ids]
    mask = [False] * len(ids)
    states = []
    for a in actions:
        a_ids = encode(a) if isinstance(a, str) else [int(t) for t in a]
        state, obs = execute(state, a_ids, cfg)
        states.append(state)
        ids += a_ids + obs
        mask += [True] * len(a_ids) + [False] * len(obs)
        if state.done:
            break
    return ids, mask, states


def pack_episodes(episodes, width: int, *, pad: int) -> tuple[np.ndarray, np.ndarray]:
    """``[(ids, mask), ...]`` -> tokens [B, width] (``pad``-filled), loss mask [B, width]."""
    tokens = np.full((len(episodes), width), pad, np.int32)
    mask = np.zeros((len(episodes), width), bool)
    for i, (ids, m) in enumerate(episodes):
        tokens[i, : len(ids)] = ids
        mask[i, : len(m)] = m
    return tokens, mask


@dataclasses.dataclass(frozen=True)
class AgentEnv:
    """One repair-style environment: what its task and ``AgentRollouts`` call.

    Attributes:
      name: the environment's module (messages).    TOKENS: the vocabulary, one character per token.
      PAD, EOS, EOT: padding, submit (``$``) and end-of-turn (``;``) ids.  EVAL_SEED: the held-out seed.
      MAX_ACTION_TOKENS: A, tokens per policy turn at most.
      make_problems(cfg, *, seed, count) -> Problems [B, ...].
      prompts(problems) -> tokens [B, P], lengths [B].
      reset(problems, index) -> the initial ``EnvState`` of problem ``index``.
      execute(state, action_ids, cfg) -> (state, observation ids; empty once the episode ended).
      verify(problems, index, state, *, reward) -> the episode's reward.
      demo_actions(problems, index, cfg, rng) -> the scripted demonstrator's actions (strings).
      encode(text) -> ids, decode(ids) -> text (``codec(TOKENS)``).
      seeded_reset(problems, index, cfg, *, seed) -> the initial state with the environment's own
        randomness drawn from ``seed`` (a stochastic environment, e.g. ``prs.tasks.flaky``: tool calls
        that crash at random); None: a deterministic environment, ``reset`` is used everywhere.
      restore(problems, index, actions, observations, cfg, *, seed) -> the state after a recorded
        prefix (``actions`` and the ``observations`` the environment gave them, id lists), the recorded
        outcomes kept and the future drawn from ``seed``: replay-through-execution in a stochastic
        environment (an environment whose re-execution would draw new outcomes rebuilds the lucky
        state from the record, as a snapshot restore would). Required with ``seeded_reset``; a
        recorded observation the environment cannot give is a ValueError.
    """

    name: str
    TOKENS: tuple[str, ...]
    PAD: int
    EOS: int
    EOT: int
    EVAL_SEED: int
    make_problems: Callable[..., Any]
    prompts: Callable[..., tuple[np.ndarray, np.ndarray]]
    reset: Callable[..., Any]
    execute: Callable[..., tuple[Any, list[int]]]
    verify: Callable[..., float]
    demo_actions: Callable[..., list[str]]
    encode: Callable[[str], list[int]]
    decode: Callable[..., str]
    MAX_ACTION_TOKENS: int = MAX_ACTION_TOKENS
    seeded_reset: Callable[..., Any] | None = None
    restore: Callable[..., Any] | None = None

    def __post_init__(self):
        if (self.seeded_reset is None) != (self.restore is None):
            raise ValueError(f"AgentEnv {self.name}: seeded_reset and restore come together (a stochastic "
                             f"environment needs both; a deterministic one neither)")

    @property
    def stochastic(self) -> bool:
        """True when the environment draws outcomes of its own (``seeded_reset``)."""
        return self.seeded_reset is not None

    def render(self, problems, index: int, actions: list, cfg, *, state=None):
        """Runs ``actions`` (strings or id lists) from problem ``index``'s initial state (``reset``, or
        ``state``: e.g. a stochastic environment's state with chosen outcomes) -> (ids, action mask,
        states after each action). Stops at the end of the episode."""
        prompt, _ = self.prompts(take(problems, [index]))
        state = self.reset(problems, index) if state is None else state
        return run_actions(prompt[0], state, actions, cfg, execute=self.execute, encode=self.encode)

    def demonstrations(self, problems, cfg, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """Seeded demonstrations -> tokens [B, L] (pad-filled), loss mask [B, L] (1 on action tokens
        only: the prompt and every observation token are 0). Host-side, once per SFT batch."""
        rng = np.random.default_rng(seed)
        b = len(self.prompts(problems)[1])
        eps = [self.render(problems, i, self.demo_actions(problems, i, cfg, rng), cfg)[:2] for i in range(b)]
        return pack_episodes(eps, cfg.episode_width, pad=self.PAD)
