"""Rewards for code-agent RL: test-execution rewards, the SWE-RL similarity reward, a registry.

Two families:

* **Execution rewards** (jnp, jittable) from a per-test pass matrix ``passed # [R, T]`` (R rollouts,
  T tests of the task) and boolean masks that say which columns are FAIL_TO_PASS (F2P) and
  PASS_TO_PASS (P2P) tests:

  - ``binary_test_reward``:   r = 1[∀t∈F2P: passed_t ∧ ∀t∈P2P: passed_t]  (SWE-bench resolution;
    the model's patch is applied first, the reference test patch afterwards).
  - ``fraction_test_reward``: r = Σ_t m_t·passed_t / Σ_t m_t  (the partial-pass reward whose
    trap the survey computes: E[R|honest] = 0.5 + 0.5·p_A < 0.7 = E[R|surface] for p_A < 0.4).

* **SWE-RL** (Wei et al. 2025, arXiv:2502.18449), pure Python, per sample, never raises on policy
  output: parse search/replace edits, apply them to the given files, form per-file unified diffs,
  score ``difflib.SequenceMatcher(None, pred, oracle, autojunk=False).ratio()`` averaged over the
  files either patch touches; −1 with a reason on a format violation. ``exact=True`` gives the
  discrete ablation (1 iff every per-file diff equals the oracle's, else 0; still −1 on format
  violations).

Edit format (SWE-RL / Agentless style; the enclosing ```` ``` ```` fences and ``<think>`` text are
optional; when a ``<solution>...</solution>`` pair is present only its inside is parsed)::

    ### path/to/file.py
    <<<<<<< SEARCH
    exact lines to find (at least one line, matched at a line start)
    =======
    lines to put in their place (may be empty)
    >>>>>>> REPLACE

Rules, in the order they are checked (first failure wins, score −1):
``not_a_string``, ``empty_response`` (only whitespace), ``malformed_edit_block`` (a ``SEARCH``,
``=======`` or ``REPLACE`` marker that is not part of a complete block, or a block without a
``### path`` line), ``no_edit_blocks``, ``unknown_file`` (an edit to a path not in ``files``),
``empty_search``, ``identical_search_replace``, ``search_not_found`` (against the file as edited by
the earlier blocks). Like the SWE-RL reference, a search text that occurs several times is replaced
at every occurrence.

Registry: ``register_reward(name)(fn)`` / ``get_reward(name)``. Calling convention of a registered
reward (what a trainer relies on)::

    reward_fn = get_reward(cfg.reward.name)
    rewards = reward_fn(batch, **cfg.reward.kwargs)   # float32 [R]

``batch`` is a mapping with (at least) the keys in ``reward_fn.required_keys``; missing keys raise
``ValueError`` naming them. ``reward_fn.jittable`` says whether it may be called inside ``jax.jit``
(array rewards) or must run on the host (text rewards; they return a numpy array). Built-ins:
``binary_tests``, ``fraction_tests`` (keys ``passed``, ``fail_to_pass``, ``pass_to_pass``), and
``swe_rl_similarity``, ``swe_rl_exact`` (keys ``responses`` list[str] [R], ``files``
list[dict[str, str]] [R], ``oracle`` list[dict[str, str] | str] [R]).
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "binary_test_reward",
    "fraction_test_reward",
    "SweRlResult",
    "parse_search_replace",
    "swe_rl_reward",
    "swe_rl_rewards",
    "render_patch",
    "RewardFn",
    "register_reward",
    "get_reward",
    "available_rewards",
]


# ----------------------------------------------------------------------------------------------
# Execution rewards (jittable)
# ----------------------------------------------------------------------------------------------


def _test_masks(name: str, passed: jax.Array, masks: dict[str, jax.Array | None]) -> list[jax.Array]:
    """Checks ``passed # [R, T]`` and broadcasts each mask (``[T]`` or ``[R, T]``) to ``[R, T]``."""
    if passed.ndim != 2:
        raise ValueError(f"{name}: passed must be [R, T] (rollouts x tests), got shape {passed.shape}")
    out = []
    for mname, m in masks.items():
        if m is None:
            m = jnp.ones(passed.shape, bool)
        m = jnp.asarray(m)
        if m.shape == passed.shape[1:]:
            m = jnp.broadcast_to(m[None, :], passed.shape)
        if m.shape != passed.shape:
            raise ValueError(
                f"{name}: {mname} must be [T]={passed.shape[1:]} or [R, T]={passed.shape}, got {m.shape}"
            )
        out.append(m.astype(bool))
    return out


def binary_test_reward(
    passed: jax.Array, *, fail_to_pass: jax.Array, pass_to_pass: jax.Array
) -> jax.Array:
    """SWE-bench resolution reward: r = 1[every F2P test passes ∧ every P2P test still passes].

    r_i = Π_{t: F2P_t} passed_{i,t} · Π_{t: P2P_t} passed_{i,t}. Columns in neither mask (tests that
    are not part of the task's verdict, padding) are ignored. A task with no F2P and no P2P test
    gives 1 (empty conjunction), as in SWE-bench; screen such tasks out upstream.
    See Jimenez et al. 2024 (SWE-bench), arXiv:2310.06770.

    Args:
      passed: bool/0-1 ``[R, T]``, rollout i's patch passes test t.
      fail_to_pass: bool ``[T]`` or ``[R, T]``, test t is a FAIL_TO_PASS test.
      pass_to_pass: bool ``[T]`` or ``[R, T]``, test t is a PASS_TO_PASS test.

    Returns:
      float32 ``[R]`` in {0, 1}.
    """
    passed = jnp.asarray(passed)
    f2p, p2p = _test_masks(
        "binary_test_reward", passed, {"fail_to_pass": fail_to_pass, "pass_to_pass": pass_to_pass}
    )
    ok = passed.astype(bool) | ~(f2p | p2p)  # [R, T] True where the test passes or does not count
    return jnp.all(ok, axis=-1).astype(jnp.float32)


def fraction_test_reward(passed: jax.Array, *, test_mask: jax.Array | None = None) -> jax.Array:
    """Partial-pass reward: r_i = Σ_t m_t·passed_{i,t} / Σ_t m_t (0 when no test counts).

    This is the reward of the survey's partial-pass trap (10 tests, 7 surface + 3 semantic): it
    pays 0.7 for a surface patch and 0.5 + 0.5·p_A in expectation for an honest attempt.

    Args:
      passed: bool/0-1 ``[R, T]``.
      test_mask: bool ``[T]`` or ``[R, T]``, tests that count (default all; pass ``F2P | P2P`` to
        score only the task's verdict tests).

    Returns:
      float32 ``[R]`` in [0, 1].
    """
    passed = jnp.asarray(passed)
    (m,) = _test_masks("fraction_test_reward", passed, {"test_mask": test_mask})
    num = jnp.sum(passed.astype(bool) & m, axis=-1).astype(jnp.float32)  # [R]
    den = jnp.sum(m, axis=-1).astype(jnp.float32)  # [R]
    return jnp.where(den > 0, num / jnp.maximum(den, 1.0), 0.0)


# ----------------------------------------------------------------------------------------------
# SWE-RL similarity reward (pure Python)
# ----------------------------------------------------------------------------------------------

_BLOCK_RE = re.compile(
    r"^###[ \t]*(?P<path>\S[^\n]*?)[ \t]*\n"
    r"<<<<<<< SEARCH[ \t]*\n"
    r"(?P<search>(?:[^\n]*\n)*?)"
    r"=======[ \t]*\n"
    r"(?P<replace>(?:[^\n]*\n)*?)"
    r">>>>>>> REPLACE[ \t]*$",
    re.MULTILINE,
)
_MARKERS = ("<<<<<<< SEARCH", ">>>>>>> REPLACE")


@dataclasses.dataclass(frozen=True)
class SweRlResult:
    """Outcome of one SWE-RL scoring (invalid ``files``/``oracle`` from the caller raise ValueError;
    anything wrong with the policy's ``response`` is a −1 result instead).

    Attributes:
      score: −1.0 on a format violation, else the similarity in [0, 1] (or 0/1 when exact).
      reason: ``"ok"`` or the name of the violated rule (see the module docstring).
      detail: a human-readable explanation (which path, which block).
      patch: the predicted per-file diffs, ``{path: diff}`` (empty on a violation).
    """

    score: float
    reason: str
    detail: str = ""
    patch: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def format_ok(self) -> bool:
        return self.reason == "ok"


class _FormatViolation(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason, detail)
        self.reason, self.detail = reason, detail


def parse_search_replace(text: str) -> list[tuple[str, str, str]]:
    """Parses ``text`` into ``[(path, search, replace), ...]`` in order of appearance.

    ``search``/``replace`` are the block's lines, each ending in ``"\\n"`` (``replace == ""``
    deletes the searched lines). Raises
    ``ValueError`` (reason in the message) on malformed or absent blocks; ``swe_rl_reward`` turns
    that into a −1 score instead.
    """
    try:
        return _parse(text)
    except _FormatViolation as e:
        raise ValueError(f"parse_search_replace: {e.reason}: {e.detail}") from None


def _parse(text: str) -> list[tuple[str, str, str]]:
    sol = re.search(r"<solution>(.*)</solution>", text, re.DOTALL)
    if sol is not None:
        text = sol.group(1)
    # Normalise line endings; code fences around blocks are allowed and ignored.
    text = text.replace("\r\n", "\n")
    blocks = [
        (m.group("path"), m.group("search"), m.group("replace"))
        for m in _BLOCK_RE.finditer(text)
    ]
    for marker in _MARKERS:
        if text.count(marker) != len(blocks):
            raise _FormatViolation(
                "malformed_edit_block",
                f"{text.count(marker)} '{marker}' markers but {len(blocks)} complete "
                "'### path / SEARCH / ======= / REPLACE' blocks",
            )
    if not blocks:
        raise _FormatViolation("no_edit_blocks", "no '### path' + SEARCH/REPLACE block found")
    return blocks


def _apply(files: Mapping[str, str], blocks: list[tuple[str, str, str]]) -> dict[str, str]:
    new: dict[str, str] = {}
    for i, (path, search, replace) in enumerate(blocks):
        if path not in files:
            raise _FormatViolation(
                "unknown_file", f"block {i} edits {path!r}; given files: {sorted(files)}"
            )
        if search.strip() == "":
            raise _FormatViolation("empty_search", f"block {i} ({path}) has an empty SEARCH part")
        if search == replace:
            raise _FormatViolation(
                "identical_search_replace", f"block {i} ({path}) replaces a text by itself"
            )
        # Surround with newlines so that the search lines match whole lines only (SWE-RL matches
        # "\n" + search; the trailing one also lets a file without a final newline match).
        content = "\n" + new.get(path, files[path]) + "\n"
        if "\n" + search not in content:
            raise _FormatViolation(
                "search_not_found", f"block {i}: SEARCH text not found in {path} (after earlier edits)"
            )
        new[path] = content.replace("\n" + search, "\n" + replace)[1:-1]
    return new


def _file_diff(old: str, new: str) -> str:
    """Hunks of the unified diff old -> new (no ``---``/``+++`` header), ``""`` if equal."""
    lines = list(
        difflib.unified_diff(
            old.splitlines(), new.splitlines(), fromfile="old", tofile="new", lineterm="", n=3
        )
    )
    return "\n".join(lines[2:])


def _patches(files: Mapping[str, str], new: Mapping[str, str]) -> dict[str, str]:
    out = {}
    for path in sorted(new):
        d = _file_diff(files.get(path, ""), new[path])
        if d:
            out[path] = d
    return out


def render_patch(patch: Mapping[str, str]) -> str:
    """One patch string from per-file hunks ``{path: hunks}`` (as in ``SweRlResult.patch``).

    Files in sorted order, each as ``--- a/{path}\\n+++ b/{path}\\n{hunks}``, joined by newlines.
    This is the form a string ``oracle`` must have for ``swe_rl_reward``; a raw ``git diff``
    (``diff --git``/``index`` lines, other context sizes) is not, so prefer the dict oracle.
    """
    return "\n".join(f"--- a/{p}\n+++ b/{p}\n{d}" for p, d in sorted(patch.items()))


def swe_rl_reward(
    response: Any,
    *,
    files: Mapping[str, str],
    oracle: Mapping[str, str] | str,
    exact: bool = False,
) -> SweRlResult:
    """SWE-RL reward of one policy response. Never raises on malformed policy output.

    R(o) = −1 if o violates the edit format; otherwise
    R(o) = (1/|F|) Σ_{f∈F} SequenceMatcher(None, Δ_pred(f), Δ_oracle(f), autojunk=False).ratio(),
    F = files touched by the prediction or the oracle, Δ(f) the unified-diff hunks of file f
    (a file only one side touches scores 0; the SWE-RL reference implementation does the same).
    With ``exact=True``: R(o) = 1[Δ_pred(f) = Δ_oracle(f) ∀f∈F] (the paper's discrete ablation).
    See Wei et al. 2025, "SWE-RL", arXiv:2502.18449, Sec. 2.

    Args:
      response: the policy's text (anything else scores −1, ``not_a_string``).
      files: ``{path: original content}`` shown to the policy; edits to other paths are violations.
      oracle: ``{path: content after the oracle patch}`` (per-file scoring as above; the SWE-RL
        convention), or an oracle patch string in ``render_patch`` form; then the prediction is
        rendered the same way and compared as a whole.
      exact: the discrete exact-match variant.

    Returns:
      ``SweRlResult(score, reason, detail, patch)``.
    """
    if not isinstance(files, Mapping) or not all(isinstance(v, str) for v in files.values()):
        raise ValueError(f"swe_rl_reward: files must be a mapping path -> str, got {type(files).__name__}")
    if not isinstance(oracle, (str, Mapping)):
        raise ValueError(f"swe_rl_reward: oracle must be a str patch or a mapping path -> str, got {type(oracle).__name__}")
    try:
        if not isinstance(response, str):
            raise _FormatViolation("not_a_string", f"response is {type(response).__name__}")
        if not response.strip():
            raise _FormatViolation("empty_response", "response is empty or whitespace")
        pred = _patches(files, _apply(files, _parse(response)))
    except _FormatViolation as e:
        return SweRlResult(-1.0, e.reason, e.detail)
    if isinstance(oracle, str):
        a, b = render_patch(pred), oracle
        score = float(a == b) if exact else difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
        return SweRlResult(float(score), "ok", "whole-patch comparison", pred)
    gold = _patches(files, oracle)
    paths = sorted(set(pred) | set(gold))
    if not paths:  # neither side changes anything (cannot happen for a parsed edit; kept total)
        return SweRlResult(0.0, "ok", "no changes on either side", pred)
    sims = []
    for p in paths:
        a, b = pred.get(p, ""), gold.get(p, "")
        if exact:
            sims.append(float(a == b))
        elif a == "" or b == "":
            sims.append(0.0)
        else:
            sims.append(difflib.SequenceMatcher(None, a, b, autojunk=False).ratio())
    score = min(sims) if exact else sum(sims) / len(sims)
    return SweRlResult(float(score), "ok", f"{len(paths)} file(s) compared", pred)


def swe_rl_rewards(
    responses: Sequence[Any],
    *,
    files: Sequence[Mapping[str, str]],
    oracle: Sequence[Mapping[str, str] | str],
    exact: bool = False,
) -> list[SweRlResult]:
    """``swe_rl_reward`` over a batch of R responses (``files``/``oracle`` one per response)."""
    if not (len(responses) == len(files) == len(oracle)):
        raise ValueError(
            f"swe_rl_rewards: responses, files, oracle must have the same length R, got "
            f"{len(responses)}, {len(files)}, {len(oracle)}"
        )
    return [swe_rl_reward(r, files=f, oracle=o, exact=exact) for r, f, o in zip(responses, files, oracle)]


# ----------------------------------------------------------------------------------------------
# Registry
# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RewardFn:
    """A registered reward: ``fn(batch, **kwargs) -> float32 [R]`` plus what it needs.

    Attributes:
      name: registry name.
      fn: the adapter ``fn(batch: Mapping[str, Any], **kwargs) -> [R]``.
      required_keys: keys ``batch`` must hold.
      jittable: True if ``fn`` may run under ``jax.jit`` (array inputs), False for host-side
        (text) rewards, which return a numpy array.
    """

    name: str
    fn: Callable[..., Any]
    required_keys: tuple[str, ...]
    jittable: bool

    def __call__(self, batch: Mapping[str, Any], **kwargs: Any):
        missing = [k for k in self.required_keys if k not in batch]
        if missing:
            raise ValueError(
                f"reward {self.name!r}: batch lacks keys {missing}; it has {sorted(batch)}, "
                f"needs {list(self.required_keys)}"
            )
        return self.fn(batch, **kwargs)


_REGISTRY: dict[str, RewardFn] = {}


def register_reward(
    name: str, *, required_keys: Sequence[str], jittable: bool, overwrite: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator registering ``fn(batch, **kwargs) -> [R]`` under ``name``.

    Re-registering a name raises ``ValueError`` unless ``overwrite=True``. Returns ``fn`` unchanged.
    """

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        if name in _REGISTRY and not overwrite:
            raise ValueError(f"register_reward: {name!r} is already registered (pass overwrite=True)")
        _REGISTRY[name] = RewardFn(name, fn, tuple(required_keys), bool(jittable))
        return fn

    return deco


def get_reward(name: str) -> RewardFn:
    """The registered reward called ``name``; unknown names raise ``ValueError`` listing the known."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown reward {name!r}; known rewards: {available_rewards()}") from None


def available_rewards() -> list[str]:
    return sorted(_REGISTRY)


_TEST_KEYS = ("passed", "fail_to_pass", "pass_to_pass")
_SWE_KEYS = ("responses", "files", "oracle")


@register_reward("binary_tests", required_keys=_TEST_KEYS, jittable=True)
def _binary_tests(batch: Mapping[str, Any]) -> jax.Array:
    return binary_test_reward(
        batch["passed"], fail_to_pass=batch["fail_to_pass"], pass_to_pass=batch["pass_to_pass"]
    )


@register_reward("fraction_tests", required_keys=_TEST_KEYS, jittable=True)
def _fraction_tests(batch: Mapping[str, Any]) -> jax.Array:
    mask = jnp.asarray(batch["fail_to_pass"], bool) | jnp.asarray(batch["pass_to_pass"], bool)
    return fraction_test_reward(batch["passed"], test_mask=mask)


def _swe(batch: Mapping[str, Any], exact: bool) -> np.ndarray:
    res = swe_rl_rewards(batch["responses"], files=batch["files"], oracle=batch["oracle"], exact=exact)
    return np.asarray([r.score for r in res], np.float32)


@register_reward("swe_rl_similarity", required_keys=_SWE_KEYS, jittable=False)
def _swe_rl_similarity(batch: Mapping[str, Any]) -> np.ndarray:
    return _swe(batch, exact=False)


@register_reward("swe_rl_exact", required_keys=_SWE_KEYS, jittable=False)
def _swe_rl_exact(batch: Mapping[str, Any]) -> np.ndarray:
    return _swe(batch, exact=True)
