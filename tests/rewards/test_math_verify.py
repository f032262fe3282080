"""prs.rewards.math_verify: the fallback verifier on tricky answers, cross-checked against the
``math-verify`` package (when installed) as an independent peer, and numbers against Python's own
arithmetic."""
import math
from fractions import Fraction

import pytest

from prs.rewards import math_verify as mv

# (response, gold, equal?) — mathematical facts, checked by both back ends.
CASES = [
    ("so the answer is \\boxed{\\frac{1}{2}}.", "0.5", True),
    ("\\boxed{0.5}", "\\frac{1}{2}", True),
    ("\\boxed{\\dfrac{3}{4}}", "3/4", True),
    ("\\boxed{\\tfrac34}", "\\frac{3}{4}", True),
    ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", True),
    ("$\\boxed{\\frac{\\pi}{3}}$", "\\frac{\\pi}{3}", True),
    ("\\boxed{1,000}", "1000", True),
    ("\\boxed{x = 5}", "5", True),
    ("\\boxed{90^\\circ}", "90", True),
    ("\\boxed{10}", "10\\%", True),
    ("\\boxed{(1, 2)}", "(1,2)", True),
    ("\\boxed{\\{2, 1\\}}", "\\{1,2\\}", True),
    ("\\boxed{\\left( 3, -1 \\right)}", "(3,-1)", True),
    ("The final answer is 42", "42", True),
    ("first \\boxed{3} then corrected: \\boxed{4}", "4", True),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}", True),
    ("\\boxed{-\\frac{2}{3}}", "-2/3", True),
    # wrong answers
    ("\\boxed{3}", "4", False),
    ("first \\boxed{4} then \\boxed{3}", "4", False),
    ("\\boxed{\\frac{1}{3}}", "0.33", False),
    ("\\boxed{(2, 1)}", "(1,2)", False),
    ("\\boxed{[0, 1]}", "[0,1)", False),
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{8}", False),
    ("I cannot solve this.", "7", False),
    ("", "7", False),
]


@pytest.mark.parametrize("response, gold, want", CASES)
def test_fallback_cases(response, gold, want):
    assert mv.verify_answer(response, gold, backend="fallback") is want


@pytest.mark.parametrize("response, gold, want", CASES)
def test_math_verify_package_agrees(response, gold, want):
    """The peer grader gives the same verdicts (a case both would get wrong the same way is still
    caught by ``test_fallback_cases``'s stated truth)."""
    pytest.importorskip("math_verify")
    assert mv.verify_answer(response, gold, backend="math-verify") is want


def test_extract_answer():
    assert mv.last_boxed("a \\boxed{\\frac{1}{\\sqrt{2}}} b") == "\\frac{1}{\\sqrt{2}}"
    assert mv.last_boxed("\\boxed{unclosed") is None
    assert mv.last_boxed("\\boxed 5$") == "5"
    assert mv.extract_answer("The answer is 12. Then more text") == "12"
    assert mv.extract_answer("we get 3 and then 17 apples") == "17"
    assert mv.extract_answer("no numbers") is None


@pytest.mark.parametrize("latex, python", [
    ("\\frac{1}{2}+\\frac{1}{3}", "1/2+1/3"),
    ("2\\sqrt{2}", "2*math.sqrt(2)"),
    ("\\sqrt[3]{27}", "3"),
    ("3\\pi", "3*math.pi"),
    ("2^{10}", "2**10"),
    ("-(1+2)*4", "-(1+2)*4"),
    ("\\frac{\\sqrt{3}}{2}", "math.sqrt(3)/2"),
    ("1.25", "1.25"),
    ("e^2", "math.e**2"),
])
def test_numbers_against_python(latex, python):
    got = mv.to_number(mv.normalize(latex))
    assert got is not None
    assert float(got) == pytest.approx(eval(python, {"math": math}), rel=1e-12)


def test_exact_rationals_stay_exact():
    assert mv.to_number("\\frac{1}{3}") == Fraction(1, 3)
    assert mv.to_number("\\sqrt{16}") == Fraction(4)
    assert mv.to_number("1/0") is None and mv.to_number("abc") is None


def test_backend_errors():
    with pytest.raises(ValueError, match="backend"):
        mv.verify_answer("\\boxed{1}", "1", backend="sympy")
    assert mv.math_reward("\\boxed{1}", "1", backend="fallback") == 1.0
    assert mv.math_reward("\\boxed{2}", "1", backend="fallback") == 0.0


@pytest.mark.parametrize("backend", ["fallback", "math-verify"])
def test_verify_answers_process_pool_equals_serial(backend):
    """``verify_answers(workers=2)`` (a process pool, issue #29 item 3g) gives exactly the serial
    loop's ``verify_answer`` results, in order, on the tricky cases shuffled with their golds swapped
    around (so both True and False answers come back from the workers)."""
    if backend == "math-verify":
        pytest.importorskip("math_verify")
    rng = __import__("random").Random(0)
    pairs = [(r, g) for r, g, _ in CASES] + [(r, g2) for (r, _, _), (_, g2, _) in zip(CASES, CASES[3:] + CASES[:3])]
    rng.shuffle(pairs)
    responses, golds = [r for r, _ in pairs], [g for _, g in pairs]
    serial = [mv.verify_answer(r, g, backend=backend) for r, g in pairs]
    assert mv.verify_answers(responses, golds, backend=backend) == serial
    assert mv.verify_answers(responses, golds, backend=backend, workers=2) == serial
    assert any(serial) and not all(serial)


def test_verify_answers_errors():
    with pytest.raises(ValueError, match=r"workers must be an int >= 0"):
        mv.verify_answers(["a"], ["b"], workers=-1)
    with pytest.raises(ValueError, match=r"backend='sympy'; choose from"):
        mv.verify_answers(["a"], ["b"], backend="sympy")
    with pytest.raises(ValueError, match=r"2 responses but 1 gold answers"):
        mv.verify_answers(["a", "b"], ["c"])
