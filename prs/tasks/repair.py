"""``repair``: a tiny multi-turn "repository repair" agent task with a stateful environment.

The repository is a program of ``K`` lines, each holding one digit. A hidden reference program
defines the correct value of every line; ``b`` lines (the bugs, ``b`` drawn per problem from
``[min_bugs, max_bugs]``) differ from it. The hidden test suite has one test per line:
test ``i`` passes iff ``program[i] == reference[i]``. Tests of buggy lines are FAIL_TO_PASS (F2P:
they fail on the initial program and must pass), the others PASS_TO_PASS (P2P: they pass and must
keep passing). The policy sees the program and a *visible copy* of the tests it can run.

Episode (character tokens; ``;`` ends a policy turn, an observation reads ``>…|``)::

    ^315862#t;>1=7,4=0|s17;>+|s40;>+|t;>+|$
    prompt   act obs         act  obs act obs act obs submit

Action language (one action per policy turn, at most ``A = 4`` tokens including ``;``):

    t;       run the visible tests -> ``>i=v,…|`` the first ``report_max`` failing tests with the
             value they expect, or ``>+|`` when all pass
    s i v;   set program line i to digit v                      -> ``>+|``
    e i v;   edit the visible test of line i to expect v        -> ``>+|``
    u;       undo the last edit (of either kind)                -> ``>+|``
    $        submit: the episode ends and is graded

An action that does not parse (or a turn that hits ``A`` tokens without ``;``) gets ``>?|``; one
that parses but cannot apply (line ``i >= K``, ``u`` with nothing to undo) gets ``>!|``. Both
cost a turn and change nothing: garbage never crashes and never ends the episode. A turn that
ends in ``$`` after other tokens ends the episode *unsubmitted* (the sampler stops the row on
EOS). Budget: ``max_turns`` policy turns; an episode that runs out of turns is unsubmitted.

Verifier (``verify``): R = 1[submitted ∧ all F2P tests pass ∧ all P2P tests pass], the hidden tests
applied to the final program *after* the policy's edits (the SWE-bench rule, see
``shared/context/code_agent_rewards.md``). Editing the visible tests changes what ``t;`` reports,
never the reward.

Recoverable failures: every edit can be undone (``u;``) or overwritten, and ``t;`` always shows
what is still wrong, so a failure prefix (a wrong edit, a wasted turn) is a handicap, never a dead
end, as long as turns remain.

Difficulty knobs: ``n_lines`` (K), ``min_bugs``/``max_bugs``, ``max_turns``, ``report_max``.
Demonstrations (``demonstrations``) come from a scripted, deliberately noisy agent: a fix writes a
wrong value or the right value on a wrong line with probability ``demo_error_rate``; after its fixes
it re-runs the tests with probability ``demo_check_rate`` (else submits at once), and repairs a
failure it sees by ``u;`` with probability ``demo_undo_rate`` (else by setting the shown values).
A supervised warm start on them gives a policy that fails sometimes, more often with more bugs.

The executor is plain Python over immutable ``EnvState`` tuples (host side, deterministic):
``execute(state, action_ids, cfg) -> (state, obs_ids)``. ``ENVIRONMENT`` gathers the vocabulary and
these functions into one ``prs.tasks.agent_env.AgentEnv`` (what the task and the multi-turn
rollouts call); multi-turn sampling and replay-through-execution live in ``prs.tasks.agent_rollouts``.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from prs.tasks.agent_env import MAX_ACTION_TOKENS, AgentEnv, EnvConfig, codec  # noqa: F401  (A, re-exported)

EVAL_SEED = 20_261_130

# ----------------------------------------------------------------------------- vocabulary

TOKENS: tuple[str, ...] = ("_", "^", "$", *"0123456789", ";", ">", "|", "=", ",", "+", "?", "!", "#",
                           "t", "s", "u", "e")
_INDEX = {t: i for i, t in enumerate(TOKENS)}
PAD, BOS, EOS = _INDEX["_"], _INDEX["^"], _INDEX["$"]
DIGIT0 = _INDEX["0"]
EOT, OBS_OPEN, OBS_CLOSE = _INDEX[";"], _INDEX[">"], _INDEX["|"]
EQ, COMMA, OK, GARBLED, ILLEGAL, PROMPT_END = (_INDEX[c] for c in "=,+?!#")
TEST, SET, UNDO, EDIT = (_INDEX[c] for c in "tsue")


encode, decode = codec(TOKENS)


# ----------------------------------------------------------------------------- configuration


@dataclasses.dataclass(frozen=True)
class RepairConfig(EnvConfig):
    """Static description of the task (hashable).

    Attributes:
      n_lines: K program lines (1 … 10; a line index is one digit).
      min_bugs, max_bugs: bugs per problem, uniform in ``[min_bugs, max_bugs]`` (1 <= … <= K).
      max_turns: policy-turn budget per episode (>= 2).
      report_max: failing tests listed by one ``t;`` at most (>= 1).
      demo_error_rate, demo_check_rate, demo_undo_rate: the scripted demonstrator's noise (see the
        module docstring), each in [0, 1].
      reward: ``"binary"`` (the default: 1 iff submitted and every FAIL_TO_PASS and PASS_TO_PASS
        hidden test passes, ``prs.rewards.binary_test_reward``) or ``"fraction"`` (submitted ×
        the fraction of hidden tests passing, ``prs.rewards.fraction_test_reward``): the partial-
        credit reward of the partial-pass trap (``theory.partial_pass``). Buckets and pass rates
        still count full successes (reward 1).
      replay: how a re-rollout rebuilds its prefix: ``"replay"`` (execute the prefix's actions,
        prefill the context once) or ``"regenerate"`` (force-decode the prefix token by token
        through the model, interleaved with the environment steps). Same states, same inputs.
    """

    n_lines: int = 6
    min_bugs: int = 1
    max_bugs: int = 2
    max_turns: int = 6
    report_max: int = 2
    demo_error_rate: float = 0.25
    demo_check_rate: float = 0.5
    demo_undo_rate: float = 0.3
    reward: str = "binary"
    replay: str = "replay"

    def __post_init__(self):
        self._check_shared(min_lines=1, rates=("demo_error_rate", "demo_check_rate", "demo_undo_rate"))
        if not 1 <= self.min_bugs <= self.max_bugs <= self.n_lines:
            raise ValueError(f"RepairConfig needs 1 <= min_bugs <= max_bugs <= n_lines, got "
                             f"min_bugs={self.min_bugs}, max_bugs={self.max_bugs}, n_lines={self.n_lines}")
        if self.report_max < 1:
            raise ValueError(f"RepairConfig.report_max must be >= 1, got {self.report_max}")

    @property
    def max_obs_tokens(self) -> int:
        """O: ``>`` + report_max × ``i=v`` with ``,`` between + ``|``."""
        return 2 + 4 * self.report_max - 1


# ----------------------------------------------------------------------------- problems


class Problems(NamedTuple):
    program: np.ndarray    # [B, K] int32 initial (buggy) program
    reference: np.ndarray  # [B, K] int32 hidden correct program


def make_problems(cfg: RepairConfig, *, seed: int, count: int) -> Problems:
    """``count`` problems from ``np.random.default_rng(seed)``: reference digits uniform; ``b`` bug
    lines (uniform count, uniform distinct lines) get a different digit (uniform over the other 9)."""
    if count < 1:
        raise ValueError(f"make_problems: count must be >= 1, got {count}")
    rng = np.random.default_rng(seed)
    k = cfg.n_lines
    ref = rng.integers(0, 10, size=(count, k))                                 # [B, K]
    nb = rng.integers(cfg.min_bugs, cfg.max_bugs + 1, size=(count,))           # [B]
    order = np.argsort(rng.random((count, k)), axis=1)                         # random line order
    rank = np.argsort(order, axis=1)                                           # rank of each line
    is_bug = rank < nb[:, None]                                                # [B, K]
    shift = rng.integers(1, 10, size=(count, k))                               # non-zero offset
    prog = np.where(is_bug, (ref + shift) % 10, ref)
    return Problems(program=prog.astype(np.int32), reference=ref.astype(np.int32))


def problems_from_strings(program: str, reference: str) -> Problems:
    """One problem from digit strings (for hand-written tests)."""
    if len(program) != len(reference) or not (program + reference).isdigit():
        raise ValueError(f"program={program!r} and reference={reference!r} must be digit strings of one length")
    return Problems(program=np.array([[int(c) for c in program]], np.int32),
                    reference=np.array([[int(c) for c in reference]], np.int32))


def prompts(problems: Problems) -> tuple[np.ndarray, np.ndarray]:
    """``^`` + program digits + ``#`` -> tokens [B, P], lengths [B] (all P)."""
    prog = np.asarray(problems.program)
    b, k = prog.shape
    tok = np.concatenate([np.full((b, 1), BOS), prog + DIGIT0, np.full((b, 1), PROMPT_END)], axis=1)
    return tok.astype(np.int32), np.full((b,), k + 2, np.int32)


# ----------------------------------------------------------------------------- environment


class EnvState(NamedTuple):
    """One episode's environment (immutable; ``==`` compares states)."""

    program: tuple[int, ...]                   # current program
    tests: tuple[int, ...]                     # visible tests: expected value per line (editable)
    history: tuple[tuple[int, int, int], ...]  # undo stack of (kind 0=set 1=edit-test, line, old value)
    turns: int = 0                             # policy turns used
    done: bool = False
    submitted: bool = False


def reset(problems: Problems, index: int) -> EnvState:
    """The initial state of problem ``index``: the buggy program, the visible tests = reference."""
    return EnvState(program=tuple(int(x) for x in problems.program[index]),
                    tests=tuple(int(x) for x in problems.reference[index]), history=())


def failing_tests(state: EnvState) -> list[int]:
    """Lines whose *visible* test fails, in line order."""
    return [i for i, (p, t) in enumerate(zip(state.program, state.tests)) if p != t]


def digit(tok: int) -> int | None:
    """A digit token's value (0-9), None for any other token."""
    return tok - DIGIT0 if DIGIT0 <= tok < DIGIT0 + 10 else None


def execute(state: EnvState, action, cfg: RepairConfig) -> tuple[EnvState, list[int]]:
    """Applies one policy turn's tokens ``action`` (the generated tokens of the turn, including its
    ``;`` or ``$`` if any) to ``state`` -> (new state, observation token ids; empty when the episode
    ended). Never raises on any token sequence; raises ``ValueError`` if ``state`` is already done."""
    if state.done:
        raise ValueError("execute: the episode is already done")
    act = [int(t) for t in np.asarray(action).reshape(-1)]
    turns = state.turns + 1
    if act and act[-1] == EOS:
        done = state._replace(turns=turns, done=True, submitted=len(act) == 1)
        return done, []
    nxt = state._replace(turns=turns, done=turns >= cfg.max_turns)
    obs_ok = [OBS_OPEN, OK, OBS_CLOSE]
    if not act or act[-1] != EOT:
        obs = [OBS_OPEN, GARBLED, OBS_CLOSE]  # no ``;``: truncated or empty turn
    else:
        body = act[:-1]
        obs = [OBS_OPEN, GARBLED, OBS_CLOSE]
        if body == [TEST]:
            fail = failing_tests(state)[: cfg.report_max]
            if fail:
                obs = [OBS_OPEN]
                for j, i in enumerate(fail):
                    obs += ([COMMA] if j else []) + [DIGIT0 + i, EQ, DIGIT0 + state.tests[i]]
                obs.append(OBS_CLOSE)
            else:
                obs = obs_ok
        elif body == [UNDO]:
            if state.history:
                kind, line, old = state.history[-1]
                field = "program" if kind == 0 else "tests"
                vals = list(getattr(state, field))
                vals[line] = old
                nxt = nxt._replace(history=state.history[:-1], **{field: tuple(vals)})
                obs = obs_ok
            else:
                obs = [OBS_OPEN, ILLEGAL, OBS_CLOSE]
        elif len(body) == 3 and body[0] in (SET, EDIT) and digit(body[1]) is not None and digit(body[2]) is not None:
            line, val = digit(body[1]), digit(body[2])
            if line >= len(state.program):
                obs = [OBS_OPEN, ILLEGAL, OBS_CLOSE]
            else:
                kind = 0 if body[0] == SET else 1
                field = "program" if kind == 0 else "tests"
                vals = list(getattr(state, field))
                old = vals[line]
                vals[line] = val
                nxt = nxt._replace(history=state.history + ((kind, line, old),), **{field: tuple(vals)})
                obs = obs_ok
    return nxt, ([] if nxt.done else obs)


def verify(problems: Problems, index: int, state: EnvState, *, reward: str = "binary") -> float:
    """R = 1[submitted ∧ F2P all pass ∧ P2P all pass]: the HIDDEN tests (the reference program)
    applied to the final program; the visible, editable tests play no part. ``reward="fraction"``
    gives submitted × (passing hidden tests / all hidden tests) instead (see ``RepairConfig``)."""
    from prs.rewards import binary_test_reward, fraction_test_reward

    prog0 = np.asarray(problems.program[index])
    ref = np.asarray(problems.reference[index])
    passed = (np.asarray(state.program) == ref)[None, :]      # [1, n_tests] hidden test results
    f2p = prog0 != ref
    if reward == "fraction":
        score = fraction_test_reward(passed)
    else:
        score = binary_test_reward(passed, fail_to_pass=f2p, pass_to_pass=~f2p)
    return float(score[0]) * float(state.submitted)


def verify_detail(problems: Problems, index: int, state: EnvState) -> dict:
    """F2P / P2P results of the hidden tests on ``state.program`` (see ``verify``)."""
    prog0 = np.asarray(problems.program[index])
    ref = np.asarray(problems.reference[index])
    final = np.asarray(state.program)
    f2p = prog0 != ref                                        # fail before the fix
    passed = final == ref
    f2p_ok = bool(np.all(passed[f2p]))
    p2p_ok = bool(np.all(passed[~f2p]))
    return {"f2p": f2p_ok, "p2p": p2p_ok, "submitted": state.submitted,
            "reward": bool(state.submitted and f2p_ok and p2p_ok)}


# ----------------------------------------------------------------------------- demonstrations


def demo_actions(problems: Problems, index: int, cfg: RepairConfig, rng: np.random.Generator) -> list[str]:
    """The scripted noisy agent's actions for one problem (see the module docstring)."""
    state = reset(problems, index)
    acts: list[str] = []

    def do(a: str) -> list[int]:
        nonlocal state
        acts.append(a)
        state, obs = execute(state, encode(a), cfg)
        return obs

    def left() -> int:
        return cfg.max_turns - state.turns

    k = cfg.n_lines
    do("t;")
    while not state.done:
        fail = failing_tests(state)[: cfg.report_max]
        if not fail or left() <= 1:
            do("$")
            break
        for i in fail:
            if left() <= 1:
                break
            v = state.tests[i]
            if rng.random() < cfg.demo_error_rate:
                if rng.random() < 0.5 and k > 1:  # right value, wrong line
                    line = int((i + rng.integers(1, k)) % k)
                    do(f"s{line}{v};")
                else:                             # wrong value
                    do(f"s{i}{int((v + rng.integers(1, 10)) % 10)};")
            else:
                do(f"s{i}{v};")
        if left() <= 1:
            do("$")
            break
        if rng.random() >= cfg.demo_check_rate:
            do("$")
            break
        do("t;")
        if failing_tests(state) and state.history and left() > 2 and rng.random() < cfg.demo_undo_rate:
            do("u;")
            if left() > 1:
                do("t;")
    return acts


ENVIRONMENT = AgentEnv(name=__name__, TOKENS=TOKENS, PAD=PAD, EOS=EOS, EOT=EOT, EVAL_SEED=EVAL_SEED,
                       make_problems=make_problems, prompts=prompts, reset=reset, execute=execute, verify=verify,
                       demo_actions=demo_actions, encode=encode, decode=decode)
render = ENVIRONMENT.render                  # (problems, index, actions, cfg) -> ids, action mask, states
demonstrations = ENVIRONMENT.demonstrations  # (problems, cfg, *, seed) -> tokens [B, L], loss mask [B, L]
