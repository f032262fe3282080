"""``flaky_chain``: the deep-horizon chain as an agent task whose tool calls crash at random.

The hard side of Prefix Sampling (issue #31, mechanism 3) needs late states that fresh rollouts
rarely reach *for a reason the policy cannot learn away*: in the single-turn chain (``arith_deep``)
the misses were the policy's own sampling noise or wrong table entries, and RL removed them within
10-20 steps (``results/mechanism/README.md``, section 9a). Here the misses belong to the
environment: every easy step is a tool call that crashes with probability ``f = crash_rate``,
independently of the action, and a crash ends the episode unrewarded. A rollout reaches the hard
step alive with probability ``(1 - f)^E`` whatever the policy does; replay-through-execution that
restores the recorded outcomes (``AgentEnv.restore``) keeps a lucky prefix's state.

Episode (characters of ``prs.tasks.repair``'s vocabulary and ``*``; ``;`` ends a policy turn)::

    ^a_1+a_2#  s_2;>+a_3|  s_3;>+a_4|  …  s_{E+1};>*m|  y;
    prompt     easy turn 1 (its tool's answer: the next addend)   hard turn (the last)

Turn ``t <= E`` (easy) writes the running value ``s_{t+1} = s_t + a_{t+1} mod 7`` (``s_1 = a_1``) as
one digit and ``;``; the tool answers with the next addend ``>+a|`` (after the last easy turn the
multiplier, ``>*m|``, ``m`` in ``1 … 6``), or crashes: no answer, the episode ends. Turn ``E + 1``
(hard) writes ``y = s_{E+1} · m mod 7`` and ends the episode. Multiplying by a unit of Z_7 is a
bijection, so the answer is uniform whatever ``m`` (no guessing shortcut). A turn that is not one
digit and ``;`` writes no value (the trace then fails); an EOS ends the episode unrewarded.

Reward (``verify``): 1 iff no crash, all ``E + 1`` turns taken, every running value and ``y`` right
(the whole trace graded, as ``arith_deep``'s ``verify_trace``).

Randomness (``seeded_reset``): an episode's crashes are drawn at reset from its own seed
(``prs.tasks.agent_rollouts.row_seeds`` of the rollout key: a seed fixes a run, and every process
executes the same outcomes); ``reset`` (demonstrations, the teacher-forced metric) never crashes.
``restore`` rebuilds a prefix's state with its *recorded* outcomes (the tool answered every turn it
answered in the source) and draws only the turns after the cut.

Demonstrations (``demo_actions``): a scripted solver that writes a wrong running value with
probability ``demo_error_rate`` (and continues from what it wrote) and a wrong ``y`` with
probability ``demo_hard_error_rate``; demonstrations never crash (``reset``).

**Recoverable tool errors** (the easy side, issue #31 mechanism 4; off by default): with
``error_rate = g > 0`` a tool call answers ``>!|`` with probability ``g``, independently per turn
(drawn from the episode's seed, apart from the crashes): the value is *not* recorded and the next
addend not given, so the agent must notice and **retry** (write the same value again, a new turn);
``max_retries`` extra turns allow for it. Writing anything else after an error records that instead
(the trace then fails, or a guess happens to be right). Recovery rate = pass rate of episodes with
at least one error. The demonstrations meet an error with probability ``demo_fault_rate`` per call
and retry it with probability ``demo_retry_rate`` (else they guess a value): the warm start's
recovery rate is a knob. Episodes: ``… s;>!|s;>+a| …`` (an error, then the retry).
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from prs.tasks import repair
from prs.tasks.agent_env import MAX_ACTION_TOKENS, AgentEnv, codec

MODULUS = 7
EVAL_SEED = 20_261_204
TOKENS: tuple[str, ...] = repair.TOKENS + ("*",)
_INDEX = {t: i for i, t in enumerate(TOKENS)}
PAD, BOS, EOS, EOT = _INDEX["_"], _INDEX["^"], _INDEX["$"], _INDEX[";"]
DIGIT0 = _INDEX["0"]
PLUS, STAR, OBS_OPEN, OBS_CLOSE, PROMPT_END, ERROR = (_INDEX[c] for c in "+*>|#!")
encode, decode = codec(TOKENS)


@dataclasses.dataclass(frozen=True)
class FlakyConfig:
    """Static description of the task (hashable).

    Attributes:
      easy_steps: E tool calls (easy steps) before the hard step, 1 … 14.
      crash_rate: f, the probability that one tool call crashes, in [0, 1).
      demo_error_rate, demo_hard_error_rate: the demonstrator's wrong-value rates (easy, hard), in [0, 1].
      error_rate: g, the probability that one tool call answers an error ``>!|`` (recoverable: retry), in [0, 1).
      max_retries: extra turns beyond the E + 1 a crash-free, error-free episode takes (>= 0).
      demo_fault_rate, demo_retry_rate: the demonstrations' errors per call and their retry rate, in [0, 1].
      reward: ``"binary"`` only (the whole trace graded).  replay: ``"replay"`` only (``regenerate``
        re-executes, which would draw new crashes).
    """

    easy_steps: int = 12
    crash_rate: float = 0.1
    demo_error_rate: float = 0.02
    demo_hard_error_rate: float = 0.75
    reward: str = "binary"
    replay: str = "replay"
    error_rate: float = 0.0
    max_retries: int = 0
    demo_fault_rate: float = 0.0
    demo_retry_rate: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.easy_steps, int) and 1 <= self.easy_steps <= 14):
            raise ValueError(f"FlakyConfig.easy_steps must be an int in [1, 14], got {self.easy_steps!r}")
        if not 0.0 <= self.crash_rate < 1.0:
            raise ValueError(f"FlakyConfig.crash_rate must be in [0, 1), got {self.crash_rate!r}")
        if not 0.0 <= self.error_rate < 1.0:
            raise ValueError(f"FlakyConfig.error_rate must be in [0, 1), got {self.error_rate!r}")
        if not (isinstance(self.max_retries, int) and 0 <= self.max_retries <= 8):
            raise ValueError(f"FlakyConfig.max_retries must be an int in [0, 8], got {self.max_retries!r}")
        for rate in ("demo_error_rate", "demo_hard_error_rate", "demo_fault_rate", "demo_retry_rate"):
            if not 0.0 <= getattr(self, rate) <= 1.0:
                raise ValueError(f"FlakyConfig.{rate} must be in [0, 1], got {getattr(self, rate)!r}")
        if self.reward != "binary":
            raise ValueError(f"FlakyConfig.reward={self.reward!r}; allowed: 'binary'")
        if self.replay != "replay":
            raise ValueError(f"FlakyConfig.replay={self.replay!r}; allowed: 'replay' (a stochastic environment "
                             f"restores recorded outcomes; 'regenerate' would draw new ones)")

    @property
    def max_turns(self) -> int:
        """E easy turns, the hard one and ``max_retries``."""
        return self.easy_steps + 1 + self.max_retries

    @property
    def prompt_width(self) -> int:
        """P: ``^ a_1 + a_2 #``."""
        return 5

    @property
    def max_obs_tokens(self) -> int:
        """O: ``> + a |`` or ``> * m |``."""
        return 4

    @property
    def episode_width(self) -> int:
        """L: the prompt plus ``max_turns`` × (an action and an observation)."""
        return self.prompt_width + self.max_turns * (MAX_ACTION_TOKENS + self.max_obs_tokens)

    @property
    def survival(self) -> float:
        """P(no crash in E tool calls) = (1 - f)^E: the ceiling of P(reach) for any policy."""
        return (1.0 - self.crash_rate) ** self.easy_steps


class Problems(NamedTuple):
    terms: np.ndarray  # [B, E+1] int32 addends a_1 … a_{E+1} in [0, 7)
    mult: np.ndarray   # [B] int32 multiplier m in [1, 7)


class EnvState(NamedTuple):
    """One episode's environment (immutable; ``==`` compares states)."""

    terms: tuple[int, ...]
    mult: int
    crashes: tuple[bool, ...]    # [E] whether easy call j crashes (drawn at reset)
    values: tuple[int, ...] = ()  # the values recorded so far (-1: a turn that wrote none)
    turns: int = 0
    done: bool = False
    crashed: bool = False
    errors: tuple[bool, ...] = ()  # [T] whether the tool answers an error at turn t (drawn at reset)
    max_turns: int = 0             # the turn budget (0: E + 1)
    errors_seen: int = 0


def make_problems(cfg: FlakyConfig, *, seed: int, count: int) -> Problems:
    """``count`` problems from ``np.random.default_rng(seed)``: addends uniform on Z_7, multipliers on 1 … 6."""
    if count < 1:
        raise ValueError(f"make_problems: count must be >= 1, got {count}")
    rng = np.random.default_rng(seed)
    terms = rng.integers(0, MODULUS, size=(count, cfg.easy_steps + 1))
    mult = rng.integers(1, MODULUS, size=(count,))
    return Problems(terms=terms.astype(np.int32), mult=mult.astype(np.int32))


def solution_values(problems: Problems) -> np.ndarray:
    """[B, E+1] the right values: the running sums ``s_2 … s_{E+1}`` and then ``y``."""
    terms = np.asarray(problems.terms)
    s = np.cumsum(terms, axis=1)[:, 1:] % MODULUS                               # [B, E]
    y = (s[:, -1] * np.asarray(problems.mult)) % MODULUS                          # [B]
    return np.concatenate([s, y[:, None]], axis=1).astype(np.int32)


def prompts(problems: Problems) -> tuple[np.ndarray, np.ndarray]:
    """``^ a_1 + a_2 #`` -> tokens [B, 5], lengths [B] (all 5)."""
    t = np.asarray(problems.terms)
    b = t.shape[0]
    tok = np.stack([np.full(b, BOS), DIGIT0 + t[:, 0], np.full(b, PLUS), DIGIT0 + t[:, 1], np.full(b, PROMPT_END)], 1)
    return tok.astype(np.int32), np.full((b,), 5, np.int32)


def reset(problems: Problems, index: int) -> EnvState:
    """Problem ``index``'s initial state with no crash (demonstrations, teacher forcing)."""
    e = np.asarray(problems.terms).shape[1] - 1
    return EnvState(terms=tuple(int(x) for x in problems.terms[index]), mult=int(problems.mult[index]),
                    crashes=(False,) * e)


def draw_crashes(cfg: FlakyConfig, seed: int) -> tuple[bool, ...]:
    """[E] independent crashes of the E tool calls, each with probability ``crash_rate``, from ``seed``."""
    u = np.random.default_rng([int(seed), 0xF1A]).random(cfg.easy_steps)
    return tuple(bool(x) for x in u < cfg.crash_rate)


def draw_errors(cfg: FlakyConfig, seed: int) -> tuple[bool, ...]:
    """[T] independent tool errors, one draw per turn with probability ``error_rate``, from ``seed``
    (a stream apart from the crashes'; ``()`` when ``error_rate`` is 0)."""
    if cfg.error_rate == 0.0:
        return ()
    u = np.random.default_rng([int(seed), 0xE44]).random(cfg.max_turns)
    return tuple(bool(x) for x in u < cfg.error_rate)


def seeded_reset(problems: Problems, index: int, cfg: FlakyConfig, *, seed: int) -> EnvState:
    """Problem ``index``'s initial state with its crashes and errors drawn from ``seed``."""
    return reset(problems, index)._replace(crashes=draw_crashes(cfg, seed), errors=draw_errors(cfg, seed),
                                           max_turns=cfg.max_turns)


def turn_value(action: list[int]) -> int:
    """The digit a turn writes (``d ;`` with ``d`` in Z_7), -1 for anything else."""
    if len(action) == 2 and action[1] == EOT and DIGIT0 <= action[0] < DIGIT0 + MODULUS:
        return action[0] - DIGIT0
    return -1


def execute(state: EnvState, action, cfg: FlakyConfig) -> tuple[EnvState, list[int]]:
    """One policy turn's tokens -> (state, observation ids; empty when the episode ended). Easy turn
    ``t``: the tool answers the next addend (``>+a|``, after the last ``>*m|``) unless it crashes;
    the hard turn ends the episode; an EOS ends it unrewarded. Raises if the episode is done."""
    if state.done:
        raise ValueError("execute: the episode is already done")
    act = [int(t) for t in np.asarray(action).reshape(-1)]
    turns = state.turns + 1
    e, j = len(state.crashes), len(state.values)                 # E calls; j values recorded so far
    budget = state.max_turns or e + 1
    if j < e and EOS not in act and turns <= len(state.errors) and state.errors[turns - 1]:
        nxt = state._replace(turns=turns, errors_seen=state.errors_seen + 1, done=turns >= budget)
        return nxt, ([] if nxt.done else [OBS_OPEN, ERROR, OBS_CLOSE])  # not recorded: retry
    nxt = state._replace(turns=turns, values=state.values + (turn_value(act),))
    if EOS in act or j >= e:
        return nxt._replace(done=True), []
    if state.crashes[j]:
        return nxt._replace(done=True, crashed=True), []
    if turns >= budget:  # out of turns before the hard step
        return nxt._replace(done=True), []
    if j + 1 < e:
        return nxt, [OBS_OPEN, PLUS, DIGIT0 + state.terms[j + 2], OBS_CLOSE]
    return nxt, [OBS_OPEN, STAR, DIGIT0 + state.mult, OBS_CLOSE]


def restore(problems: Problems, index: int, actions: list, observations: list, cfg: FlakyConfig, *,
            seed: int) -> EnvState:
    """The state after the recorded prefix ``actions`` / ``observations`` (id lists): a recorded error
    ``>!|`` means the tool erred at that turn, another answer that it neither erred nor crashed, an
    empty one that it crashed; the turns and calls after the prefix draw from ``seed``. A recorded
    observation that execution does not give is a ValueError."""
    if len(actions) != len(observations):
        raise ValueError(f"restore: {len(actions)} actions but {len(observations)} observations")
    fresh = seeded_reset(problems, index, cfg, seed=seed)
    e, t_max = len(fresh.crashes), len(fresh.errors)
    state = fresh._replace(crashes=(False,) * e, errors=(False,) * t_max)
    for i, (a, o) in enumerate(zip(actions, observations)):
        o = [int(t) for t in o]
        if i < t_max:  # the recorded answer says whether the tool erred at this turn
            errs = list(state.errors)
            errs[i] = o == [OBS_OPEN, ERROR, OBS_CLOSE]
            state = state._replace(errors=tuple(errs))
        nxt, got = execute(state, a, cfg)
        j = len(state.values)
        if got != o and o == [] and j < e:  # no answer where the tool would answer: it crashed
            nxt, got = execute(state._replace(crashes=state.crashes[:j] + (True,) + state.crashes[j + 1:]), a, cfg)
        if got != o:
            raise ValueError(f"restore: problem {index} turn {i + 1}: recorded observation {decode(o)!r}, "
                             f"the environment gives {decode(got)!r}")
        state = nxt
    j, t = len(state.values), state.turns
    return state._replace(crashes=state.crashes[:j] + fresh.crashes[j:], errors=state.errors[:t] + fresh.errors[t:])


def verify(problems: Problems, index: int, state: EnvState, *, reward: str = "binary") -> float:
    """R = 1[no crash ∧ E + 1 values recorded ∧ every one right] (errors retried cost turns, not reward)."""
    want = solution_values(problems)[index]
    return float(not state.crashed and tuple(int(v) for v in want) == state.values)


def demo_actions(problems: Problems, index: int, cfg: FlakyConfig, rng: np.random.Generator) -> list[str]:
    """The scripted solver's turns (module docstring): ``"d;"`` strings."""
    terms, m = [int(x) for x in problems.terms[index]], int(problems.mult[index])
    s, acts = terms[0], []
    for a in terms[1:]:
        s = (s + a) % MODULUS
        if rng.random() < cfg.demo_error_rate:
            s = (s + int(rng.integers(1, MODULUS))) % MODULUS
        acts.append(f"{s};")
    y = (s * m) % MODULUS
    if rng.random() < cfg.demo_hard_error_rate:
        y = (y + int(rng.integers(1, MODULUS))) % MODULUS
    return acts + [f"{y};"]


def demo_episode(problems: Problems, index: int, cfg: FlakyConfig, rng: np.random.Generator):
    """A demonstration that meets tool errors (``demo_fault_rate > 0``): -> (initial state, turns).
    Each easy call errs with probability ``demo_fault_rate`` (at most once); the demonstrator then
    retries (writes the same value again) with probability ``demo_retry_rate``, else writes a value
    drawn uniformly from Z_7 and continues from it. Values err as in ``demo_actions``."""
    terms, m = [int(x) for x in problems.terms[index]], int(problems.mult[index])
    s, acts, errs = terms[0], [], []
    for a in terms[1:]:
        s = (s + a) % MODULUS
        if rng.random() < cfg.demo_error_rate:
            s = (s + int(rng.integers(1, MODULUS))) % MODULUS
        if rng.random() < cfg.demo_fault_rate:
            acts.append(f"{s};")
            errs.append(True)
            if rng.random() >= cfg.demo_retry_rate:
                s = int(rng.integers(0, MODULUS))
        acts.append(f"{s};")
        errs.append(False)
    y = (s * m) % MODULUS
    if rng.random() < cfg.demo_hard_error_rate:
        y = (y + int(rng.integers(1, MODULUS))) % MODULUS
    errs = (errs + [False] * cfg.max_turns)[: cfg.max_turns]
    return reset(problems, index)._replace(errors=tuple(errs), max_turns=cfg.max_turns), acts + [f"{y};"]


def error_source(problems: Problems, index: int, cfg: FlakyConfig, at: int):
    """The injected-fault oracle's source: the right turns with the tool erring at easy call ``at``
    (0-based) and the right retry after it -> (initial state, turns); cut after ``at + 1`` turns."""
    sol = solution_actions(problems, index)
    errs = [False] * cfg.max_turns
    errs[at] = True
    return (reset(problems, index)._replace(errors=tuple(errs), max_turns=cfg.max_turns),
            sol[:at] + [sol[at]] + sol[at:])


def solution_actions(problems: Problems, index: int) -> list[str]:
    """The right turns of problem ``index`` (the oracle's prefix source)."""
    return [f"{v};" for v in solution_values(problems)[index]]


ENVIRONMENT = AgentEnv(name=__name__, TOKENS=TOKENS, PAD=PAD, EOS=EOS, EOT=EOT, EVAL_SEED=EVAL_SEED,
                       make_problems=make_problems, prompts=prompts, reset=reset, execute=execute, verify=verify,
                       demo_actions=demo_actions, encode=encode, decode=decode, MAX_ACTION_TOKENS=MAX_ACTION_TOKENS,
                       seeded_reset=seeded_reset, restore=restore)
