"""Binary verification of final math answers (boxed or stated), for outcome-reward math RL.

    math_reward(response, gold) -> 1.0 iff the response's final answer equals ``gold``

Two back ends with one contract:

* ``"math-verify"``: Hugging Face's ``math-verify`` package (``pip install math-verify``; sympy
  based, the grader of open-r1 / DAPO-style pipelines): the response is parsed with its default
  LaTeX + expression extraction (last ``\\boxed{}`` first), the gold answer as ``$gold$``.
* ``"fallback"`` (this module, no dependency): the answer is the content of the last
  ``\\boxed{…}``/``\\fbox{…}`` (balanced braces), else the text after the last "final answer is" /
  "answer:", else the last number in the response. Both sides are normalised (``$``, ``\\left``,
  ``\\right``, spacing commands, ``\\text{…}``, ``\\dfrac``/``\\tfrac``, ``^\\circ``, ``\\%``, a
  leading ``x =``, a trailing period) and compared as

    numbers      |a − b| ≤ 1e-9 · max(1, |b|), after exact evaluation of a small LaTeX grammar:
                 integers (``1,000`` too), decimals, ``\\frac{a}{b}``/``\\frac12``/``a/b``,
                 ``+ − · × ÷ ^``, ``\\sqrt{x}``, ``\\sqrt[n]{x}``, ``\\pi``, ``e``, parentheses and
                 implicit products (``2\\sqrt{2}``, ``3\\pi``);
    tuples       ``(a, b)`` element-wise in order; ``[a, b)`` etc. intervals with the same brackets;
    sets         ``\\{a, b\\}`` element-wise in any order;
    otherwise    the normalised strings (so ``x^2+1`` equals ``x^{2} + 1`` but not ``1+x^2``:
                 symbolic equivalence needs the ``math-verify`` back end).

``backend="auto"`` uses ``math-verify`` when it imports, else the fallback. Both are host-side
Python (strings): a task that grades with them is not jittable (``rewards_jittable = False``).
"""
from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

BACKENDS = ("auto", "math-verify", "fallback")


@functools.lru_cache(maxsize=1)
def has_math_verify() -> bool:
    try:
        import math_verify  # noqa: F401
    except Exception:  # pragma: no cover - depends on the environment
        return False
    return True


# ----------------------------------------------------------------------------- extraction


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{…}`` or ``\\fbox{…}`` (nested braces balanced; ``\\boxed 5``
    without braces gives ``5``); None if there is none or it is unclosed."""
    i = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if i < 0:
        return None
    j = i + (6 if text.startswith("\\boxed", i) else 5)
    rest = text[j:]
    if rest.startswith(" ") and not rest.lstrip().startswith("{"):
        m = re.match(r"\s+([^\s$]+)", rest)
        return m.group(1) if m else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for k, ch in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return rest[1:k]
    return None


_STATED = re.compile(r"(?:final answer is|final answer:|answer is|answer:)\s*(.+)", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")


def extract_answer(text: str) -> str | None:
    """The final answer of a response: last boxed, else last stated ("final answer is …" up to
    the end of its line/sentence), else the last number; None if nothing qualifies."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    stated = list(_STATED.finditer(text))
    if stated:
        ans = stated[-1].group(1).split("\n")[0].strip()
        ans = re.sub(r"\.\s.*$", "", ans).rstrip(".").strip()
        return ans or None
    nums = _NUMBER.findall(text)
    return nums[-1] if nums else None


# ----------------------------------------------------------------------------- normalisation


def _strip_command_arg(s: str, cmd: str) -> str:
    """``\\cmd{X}`` -> ``X`` (balanced braces), every occurrence."""
    while True:
        i = s.find(cmd + "{")
        if i < 0:
            return s
        depth, j = 0, i + len(cmd)
        for k in range(j, len(s)):
            depth += {"{": 1, "}": -1}.get(s[k], 0)
            if depth == 0:
                s = s[:i] + s[j + 1:k] + s[k + 1:]
                break
        else:
            return s.replace(cmd + "{", "", 1)


def normalize(ans: str) -> str:
    """Canonical spelling of an answer string (see the module docstring)."""
    s = ans.strip().strip("$").strip()
    for cmd in ("\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\operatorname", "\\boxed"):
        s = _strip_command_arg(s, cmd)
    for a, b in (("\\left", ""), ("\\right", ""), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\:", ""),
                 ("\\quad", ""), ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("^\\circ", ""), ("^{\\circ}", ""),
                 ("\\degree", ""), ("\\%", ""), ("%", ""), ("\\$", ""), ("\\displaystyle", ""),
                 ("\\cdot", "*"), ("\\times", "*"), ("\\div", "/")):
        s = s.replace(a, b)
    s = re.sub(r"\s+", "", s).rstrip(".")
    s = re.sub(r"^[a-zA-Z]\w*=(?!=)", "", s)  # "x=5" -> "5"
    s = re.sub(r"\{(\d+)\}", r"\1", s) if re.fullmatch(r"[\d^{}]+", s) else s
    return s


# ----------------------------------------------------------------------------- numbers


class _Parser:
    """Recursive descent over a normalised answer: expr := term (('+'|'-') term)*;
    term := factor (('*'|'/')? factor)* (juxtaposition = product); factor := unary ('^' factor)?;
    unary := '-' unary | atom; atom := number | '(' expr ')' | '{' expr '}' | \\frac{}{}
    | \\frac12 | \\sqrt[n]{} | \\pi | e. Values are Fraction when exact, float otherwise."""

    def __init__(self, s: str):
        self.s, self.i = s, 0

    def peek(self, tok: str) -> bool:
        return self.s.startswith(tok, self.i)

    def eat(self, tok: str) -> bool:
        if self.peek(tok):
            self.i += len(tok)
            return True
        return False

    def parse(self):
        v = self.expr()
        if self.i != len(self.s):
            raise ValueError(self.s[self.i:])
        return v

    def expr(self):
        v = self.term()
        while True:
            if self.eat("+"):
                v = v + self.term()
            elif self.eat("-"):
                v = v - self.term()
            else:
                return v

    def term(self):
        v = self.factor()
        while True:
            if self.eat("*"):
                v = v * self.factor()
            elif self.eat("/"):
                d = self.factor()
                v = v / d
            elif self.i < len(self.s) and (self.s[self.i] in "({\\" or self.s[self.i].isdigit()
                                           or self.peek("e")):
                v = v * self.factor()
            else:
                return v

    def factor(self):
        base = self.unary()
        if self.eat("^"):
            exp = self.factor()
            if isinstance(exp, Fraction) and exp.denominator == 1 and isinstance(base, Fraction) and abs(exp) < 64:
                return base ** int(exp)
            return float(base) ** float(exp)
        return base

    def unary(self):
        if self.eat("-"):
            return -self.unary()
        if self.eat("+"):
            return self.unary()
        return self.atom()

    def group(self):
        if self.eat("{"):
            v = self.expr()
            if not self.eat("}"):
                raise ValueError("}")
            return v
        if self.i < len(self.s) and self.s[self.i].isdigit():  # \frac12: one digit per argument
            self.i += 1
            return Fraction(int(self.s[self.i - 1]))
        raise ValueError("group")

    def atom(self):
        m = re.compile(r"\d+(?:\.\d+)?").match(self.s, self.i)
        if m:
            self.i = m.end()
            return Fraction(m.group(0))
        if self.eat("("):
            v = self.expr()
            if not self.eat(")"):
                raise ValueError(")")
            return v
        if self.peek("{"):
            return self.group()
        if self.eat("\\frac"):
            num = self.group()
            return num / self.group()
        if self.eat("\\sqrt"):
            n = Fraction(2)
            if self.eat("["):
                n = self.expr()
                if not self.eat("]"):
                    raise ValueError("]")
            x = self.group()
            root = float(x) ** (1.0 / float(n))
            r = Fraction(round(root)) if root >= 0 else None
            return r if r is not None and isinstance(x, Fraction) and r ** int(n) == x else root
        if self.eat("\\pi"):
            return math.pi
        if self.eat("e"):
            return math.e
        raise ValueError(f"atom at {self.s[self.i:]!r}")


def to_number(ans: str) -> Fraction | float | None:
    """Value of a normalised answer in the grammar of ``_Parser``; None if it is not a number."""
    s = ans
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    try:
        v = _Parser(s).parse()
    except (ValueError, ZeroDivisionError, OverflowError, IndexError, TypeError):
        return None
    if isinstance(v, complex) or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return v


def _split_top(s: str) -> list[str]:
    """Splits on commas outside (), [], {}."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        depth += 1 if ch in "([{" else -1 if ch in ")]}" else 0
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur]


def _atoms_equal(a: str, b: str) -> bool:
    x, y = to_number(a), to_number(b)
    if x is not None and y is not None:
        if isinstance(x, Fraction) and isinstance(y, Fraction):
            return x == y
        return abs(float(x) - float(y)) <= 1e-9 * max(1.0, abs(float(y)))
    return a == b


def _equal(a: str, b: str) -> bool:
    if a == b:
        return True
    if a.startswith("\\{") and a.endswith("\\}") and b.startswith("\\{") and b.endswith("\\}"):
        xs, ys = _split_top(a[2:-2]), _split_top(b[2:-2])
        return len(xs) == len(ys) and all(any(_equal(x, y) for y in ys) for x in xs) and \
            all(any(_equal(x, y) for x in xs) for y in ys)
    brackets = "([", ")]"
    if len(a) > 1 and len(b) > 1 and a[0] in brackets[0] and a[-1] in brackets[1]:
        if (a[0], a[-1]) != (b[0], b[-1]):
            return False
        xs, ys = _split_top(a[1:-1]), _split_top(b[1:-1])
        if len(xs) > 1 or len(ys) > 1:
            return len(xs) == len(ys) and all(_equal(x, y) for x, y in zip(xs, ys))
    xs, ys = _split_top(a), _split_top(b)
    thousands = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")
    if (len(xs) > 1 or len(ys) > 1) and not (thousands.fullmatch(a) or thousands.fullmatch(b)):
        return len(xs) == len(ys) and all(_atoms_equal(x, y) for x, y in zip(xs, ys))
    return _atoms_equal(a, b)


def answers_equal(pred: str, gold: str) -> bool:
    """Fallback equality of two answer strings (both normalised first)."""
    return _equal(normalize(pred), normalize(gold))


# ----------------------------------------------------------------------------- public entry


def _verify_math_verify(response: str, gold: str) -> bool:
    import threading

    from math_verify import parse, verify

    # math-verify's timeouts use SIGALRM, which only the main thread may set
    t = 5 if threading.current_thread() is threading.main_thread() else None
    g = parse(gold if "$" in gold or "\\boxed" in gold else f"${gold}$", parsing_timeout=t)
    p = parse(response, parsing_timeout=t)
    return bool(verify(g, p, timeout_seconds=t)) if g and p else False


def verify_answer(response: str, gold: str, *, backend: str = "auto") -> bool:
    """True iff the final answer of ``response`` equals ``gold`` (see the module docstring).

    backend: ``"auto"`` (math-verify if installed, else fallback), ``"math-verify"``, ``"fallback"``.
    """
    if backend not in BACKENDS:
        raise ValueError(f"verify_answer: backend={backend!r}; choose from {BACKENDS}")
    if backend == "math-verify" or (backend == "auto" and has_math_verify()):
        if not has_math_verify():
            raise ValueError("verify_answer: backend='math-verify' but the math-verify package is not "
                             "installed (pip install math-verify)")
        try:
            return _verify_math_verify(response, gold)
        except Exception:  # a parser crash is a wrong answer, never a crashed training step
            return False
    pred = extract_answer(response)
    return pred is not None and answers_equal(pred, gold)


def _verify_one(args: tuple[str, str, str]) -> bool:
    """``verify_answer(*args)`` for a worker process (picklable by name)."""
    response, gold, backend = args
    return verify_answer(response, gold, backend=backend)


@functools.lru_cache(maxsize=None)
def _pool(workers: int):
    """A persistent pool of ``workers`` processes, started once per count (``spawn``: never a
    ``fork`` of a multithreaded JAX process; each worker's main thread keeps math-verify's
    SIGALRM timeouts). Shut down at interpreter exit."""
    import atexit
    import concurrent.futures
    import multiprocessing

    pool = concurrent.futures.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    atexit.register(pool.shutdown)  # before interpreter teardown (a pool collected then logs an error)
    return pool


def verify_answers(responses, golds, *, backend: str = "auto", workers: int = 0) -> list[bool]:
    """``[verify_answer(r, g) for r, g in zip(responses, golds)]``, optionally over ``workers``
    processes.

    ``workers`` 0 or 1: serial, in this process. ``workers = w > 1``: the pairs are scored in a
    persistent pool of ``w`` processes (``_pool``), in order, in chunks of ``⌈R / 4w⌉``: the same
    function on the same inputs, so the same answers as the serial loop (each worker is its own
    main thread, so math-verify keeps its 5 s parse/verify timeouts, as in the serial call from the
    main thread). math-verify is pure Python (sympy) and holds the GIL, hence processes, not
    threads. Pays off from a few hundred responses (1,024 rollouts of a step); a pool that breaks (a
    worker killed) is dropped and the batch scored serially.
    """
    if backend not in BACKENDS:
        raise ValueError(f"verify_answers: backend={backend!r}; choose from {BACKENDS}")
    if not (isinstance(workers, int) and not isinstance(workers, bool) and workers >= 0):
        raise ValueError(f"verify_answers: workers must be an int >= 0 (0 or 1: serial), got {workers!r}")
    responses, golds = list(responses), list(golds)
    if len(responses) != len(golds):
        raise ValueError(f"verify_answers: {len(responses)} responses but {len(golds)} gold answers")
    jobs = [(r, g, backend) for r, g in zip(responses, golds)]
    if workers <= 1 or len(jobs) <= 1:
        return [_verify_one(j) for j in jobs]
    from concurrent.futures.process import BrokenProcessPool

    try:
        return list(_pool(workers).map(_verify_one, jobs, chunksize=max(1, -(-len(jobs) // (4 * workers)))))
    except BrokenProcessPool:
        _pool.cache_clear()
        return [_verify_one(j) for j in jobs]


def grader_info(backend: str = "auto") -> dict:
    """``{"requested", "backend", "version"}``: the back end ``backend`` resolves to here (``auto``:
    math-verify when it imports) and its version (the math-verify package's; ``"prs"`` for the
    fallback, which is this module at the run's commit). Recorded in a run's provenance: the same
    config grades differently with and without math-verify installed."""
    if backend not in BACKENDS:
        raise ValueError(f"grader_info: backend={backend!r}; choose from {BACKENDS}")
    used = "math-verify" if backend == "math-verify" or (backend == "auto" and has_math_verify()) else "fallback"
    version = "prs"
    if used == "math-verify":
        from importlib.metadata import PackageNotFoundError, version as _version

        try:
            version = _version("math-verify")
        except PackageNotFoundError:  # pragma: no cover - imported but not installed as a distribution
            version = None
    return {"requested": backend, "backend": used, "version": version}


def math_reward(response: str, gold: str, *, backend: str = "auto") -> float:
    """1.0 if ``verify_answer(response, gold)`` else 0.0."""
    return 1.0 if verify_answer(response, gold, backend=backend) else 0.0
